package lower

import (
	"fmt"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// ─── Weights larger than one storage buffer ─────────────────────────────────────────────────
//
// A kernel binds each operand as one storage buffer, of at most maxStorageBufferRange bytes
// (128 MiB on lavapipe, 4 GiB on most GPUs), inside one allocation of at most
// maxMemoryAllocationSize. A weight larger than either (the token embedding of an 8B model in f16
// is 1 GiB, a 70B's 4 GiB; a wide vocabulary on lavapipe passes 128 MiB quickly) is cut along its
// rows into pieces that fit, each a weight of its own (its bytes are the weight's, so nothing is
// stored twice), and the problem that reads it becomes one problem per piece:
//
//   - linear and rmsnorm_linear (the LM head): rows of W are columns of the result, so piece k
//     computes columns [r0, r1) (with the bias's rows); a concat along the last axis joins the
//     pieces, and a fused epilogue, if the problem had one, applies to the joined result;
//   - embedding: piece k gathers the ids that fall in its rows, shifted by r0, and gives zero
//     rows for the others (the embedding kernel's rule for an id outside its table); the pieces
//     are added in a chain (each piece's epilogue adds the previous sum), which is exact since
//     every row comes from one piece and adds only zeros.
//
// Every piece's problem is an ordinary one (chosen, dequantized when no kernel reads its blocks,
// checked against the interpreter by the kernel tests), so the function still computes what the
// graph says and the plan is checked against the interpreter as any other. A problem of any
// other op that reads such a weight is refused, naming the weight and the limit. A plan whose
// weights all fit is lowered exactly as before: no piece, no extra dispatch or barrier.

// pieceLimit is the most bytes one weight may have before it is cut into pieces: the smaller of
// the device's maxStorageBufferRange and one allocation (0: no limit).
func (l *lowerer) pieceLimit() uint64 {
	lim := l.caps.MaxBindingRange
	if l.chunk > 0 && (lim == 0 || l.chunk < lim) {
		lim = l.chunk
	}
	return lim
}

// bigArg returns the index of the first argument of p that is a compile-time weight larger than
// pieceLimit, or -1.
func (fl *fnLowerer) bigArg(p *kernels.Problem, args []ir.Value) int {
	lim := fl.l.pieceLimit()
	if lim == 0 {
		return -1
	}
	for i, a := range args {
		if i < len(p.Args) && fl.compileTime(a) && deviceBytes(a.Type()) > lim {
			return i
		}
	}
	return -1
}

// readInPieces reports whether compile-time node n is only ever read in row pieces: it is
// larger than pieceLimit, or the bias of linears whose weights are.
func (fl *fnLowerer) readInPieces(n *ir.Node) bool {
	lim := fl.l.pieceLimit()
	if lim == 0 || len(n.Outs) != 1 {
		return false
	}
	if deviceBytes(n.Type()) > lim {
		return true
	}
	if fl.isResult[n] || len(fl.consumers[n]) == 0 {
		return false
	}
	for _, c := range fl.consumers[n] {
		if c.Op != ir.Linear || len(c.Args) != 3 || c.Args[2].Node != n || c.Args[1].Node == n || deviceBytes(c.Args[1].Type()) <= lim {
			return false
		}
	}
	return true
}

// pieceRows is how the rows of weight t are cut: the row ranges [start, end) of the pieces, each
// at most lim bytes, with starts at multiples of 64 rows (so a piece's columns of a result start
// at an aligned byte) and the pieces as even as that allows.
func pieceRows(t ir.Type, lim uint64) ([][2]int, error) {
	rows := t.Shape[0]
	if t.Shape.Rank() < 1 || rows == 0 {
		return nil, fmt.Errorf("a weight of shape %v has no rows to split", t.Shape)
	}
	rowBytes := deviceBytes(t) / uint64(rows)
	per := lim / max(rowBytes, 1)
	if per >= 64 {
		per = per / 64 * 64
	}
	if per == 0 {
		return nil, fmt.Errorf("one row is %s (%d bytes), more than one storage buffer may hold (%s)", hostmem.Size(rowBytes), rowBytes, hostmem.Size(lim))
	}
	k := (uint64(rows) + per - 1) / per
	even := (uint64(rows) + k - 1) / k
	if per >= 64 {
		even = min((even+63)/64*64, per)
	}
	var out [][2]int
	for r := 0; r < rows; r += int(even) {
		out = append(out, [2]int{r, min(r+int(even), rows)})
	}
	return out, nil
}

// rowPiece is rows [r0, r1) of compile-time value v (a parameter or a folded value) as a value
// of its own: a node outside the graph, static and live, whose blob shares v's bytes, named
// NAME[r0:r1] so that every function (and a tied embedding and LM head) shares one weight per
// piece.
func (fl *fnLowerer) rowPiece(v ir.Value, r0, r1 int) (ir.Value, error) {
	src := v.Node
	var x *blob
	name := src.Name
	if src.Op == ir.Param {
		w := fl.l.m.Weights[src.Name]
		if w == nil {
			return ir.Value{}, fmt.Errorf("parameter %s has no weights loaded", src.Name)
		}
		x = blobOf(w)
	} else {
		x = fl.values[src]
		if x == nil {
			return ir.Value{}, fmt.Errorf("%s: no compile-time value (a bug in lower)", fl.where(src))
		}
		name = x.name
		if name == "" {
			name = fl.l.constName(x)
		}
	}
	if fl.l.external != nil {
		return ir.Value{}, fmt.Errorf("weight %s is cut into pieces along its rows, which needs inline weights (the plan cannot address a part of an external file's tensor)", name)
	}
	name = fmt.Sprintf("%s[%d:%d]", name, r0, r1)
	if pv, ok := fl.pieces[name]; ok {
		return pv, nil
	}
	t := x.t
	row := x.size() / t.Shape[0]
	shape := append(ir.Shape{r1 - r0}, t.Shape[1:]...)
	pb := &blob{t: ir.Type{DType: t.DType, Shape: shape}, pieces: x.slice(r0*row, (r1-r0)*row, nil), name: name}
	n := &ir.Node{ID: -1, Op: ir.Slice, Args: []ir.Value{v}, Attrs: ir.Attrs{"axis": 0, "start": r0, "end": r1},
		Outs: []ir.Type{pb.t}, Name: name, Rule: "row-split"}
	fl.static[n], fl.live[n] = true, true
	fl.values[n] = pb
	if fl.pieces == nil {
		fl.pieces = map[string]ir.Value{}
	}
	fl.pieces[name] = n.V()
	return n.V(), nil
}

// temp is a run-time value of type t that lowering adds between the units of a split problem (a
// node outside the graph); rows says whether it holds the function's run-time rows.
func (fl *fnLowerer) temp(op ir.Op, t ir.Type, name string, rows bool) ir.Value {
	n := &ir.Node{ID: -1, Op: op, Outs: []ir.Type{t}, Name: name, Rule: "row-split"}
	fl.live[n] = true
	if rows {
		fl.rows[n.V()] = true
	}
	return n.V()
}

// addSplit lowers problem p, whose argument big is a weight larger than pieceLimit, as one
// problem per piece of its rows (see the comment at the top of this file).
func (fl *fnLowerer) addSplit(nodes []*ir.Node, p *kernels.Problem, args, outs []ir.Value, big int) error {
	root := nodes[len(nodes)-1]
	w := args[big]
	wt := w.Type()
	lim := fl.l.pieceLimit()
	fail := func(why string) error {
		return fmt.Errorf("function %s: %s: weight %s is %s, more than one storage buffer may hold (maxStorageBufferRange %s, one allocation %s): %s: %w",
			fl.f.Name, fl.where(root), w.Node.Name, hostmem.Size(deviceBytes(wt)), hostmem.Size(fl.l.caps.MaxBindingRange), hostmem.Size(fl.l.chunk), why, ErrDeviceLimit)
	}
	if len(p.Parts) > 0 {
		return fail("a linear with column parts cannot be cut (a bug in lower: parts.go leaves such weights whole)")
	}
	ranges, err := pieceRows(wt, lim)
	if err != nil {
		return fail(err.Error())
	}
	nop := p.NumOpArgs
	if nop == 0 && p.Expr == nil {
		nop = len(p.Args)
	}
	switch {
	case p.Op == ir.Embedding && big == 0 && nop == 2:
		return fl.splitEmbedding(nodes, p, args, outs, ranges)
	case (p.Op == ir.Linear && big == 1) || (p.Op == ir.RMSNormLinear && big == 2):
		return fl.splitLinear(nodes, p, args, outs, big, nop, ranges)
	}
	return fail(fmt.Sprintf("%s reads it whole, and only an embedding table and a linear's weight are cut along their rows", p.OpName()))
}

// opType is the result of p's op before any epilogue.
func opType(p *kernels.Problem, nop int) (ir.Type, error) {
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args[:nop])
	if err != nil {
		return ir.Type{}, err
	}
	return outs[0], nil
}

// splitLinear cuts a linear's (or rmsnorm_linear's) weight, and a compile-time bias with it, into
// row pieces: each piece computes its columns of the op's result, a concat joins them, and the
// epilogue (if any) runs on the joined result.
func (fl *fnLowerer) splitLinear(nodes []*ir.Node, p *kernels.Problem, args, outs []ir.Value, big, nop int, ranges [][2]int) error {
	root := nodes[len(nodes)-1]
	bias := -1
	if p.Op == ir.Linear && nop == 3 {
		bias = 2
		if !fl.compileTime(args[2]) {
			return fmt.Errorf("function %s: %s: the weight is cut into pieces along its rows, which needs a compile-time bias: %w", fl.f.Name, fl.where(root), ErrDeviceLimit)
		}
	}
	ot, err := opType(p, nop)
	if err != nil {
		return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), err)
	}
	rows := fl.rows[outs[0]]
	var parts []ir.Value
	for _, r := range ranges {
		vals := append([]ir.Value(nil), args[:nop]...)
		if vals[big], err = fl.rowPiece(args[big], r[0], r[1]); err != nil {
			return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), err)
		}
		if bias >= 0 {
			if vals[bias], err = fl.rowPiece(args[bias], r[0], r[1]); err != nil {
				return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), err)
			}
		}
		pt := ot
		pt.Shape = append(ot.Shape[:len(ot.Shape)-1:len(ot.Shape)-1], r[1]-r[0])
		out := fl.temp(p.Op, pt, fmt.Sprintf("%s columns %d:%d", labelName(root), r[0], r[1]), rows)
		q := &kernels.Problem{Op: p.Op, Attrs: p.Attrs, NumOpArgs: nop}
		for _, v := range vals {
			q.Args = append(q.Args, v.Type())
		}
		q.Outs = []ir.Type{pt}
		q.Rows = fl.problemRows(vals, []ir.Value{out}, p.Rows != nil && p.Rows.Reads)
		if err := fl.addUnit(nodes, q, vals, []ir.Value{out}); err != nil {
			return err
		}
		parts = append(parts, out)
	}
	joined := outs[0]
	if p.Expr != nil || !ot.Equal(p.Outs[0]) {
		joined = fl.temp(ir.Concat, ot, labelName(root)+" joined", rows)
	}
	c := &kernels.Problem{Op: ir.Concat, Attrs: ir.Attrs{"axis": ot.Shape.Rank() - 1}, Outs: []ir.Type{ot}, NumOpArgs: len(parts)}
	for _, v := range parts {
		c.Args = append(c.Args, v.Type())
	}
	c.Rows = fl.problemRows(parts, []ir.Value{joined}, false)
	if err := fl.addUnit(nodes, c, parts, []ir.Value{joined}); err != nil {
		return err
	}
	if joined == outs[0] {
		return nil
	}
	return fl.finishSplit(nodes, p, args[nop:], joined, outs)
}

// finishSplit applies p's epilogue (or, without one, the conversion to its result's dtype) to
// the joined raw result x of a split problem, writing p's results outs.
func (fl *fnLowerer) finishSplit(nodes []*ir.Node, p *kernels.Problem, extra []ir.Value, x ir.Value, outs []ir.Value) error {
	xt := x.Type()
	f := &kernels.Fused{Inputs: []ir.Type{xt}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: xt.DType}}, Outputs: []int{0}}
	if p.Expr != nil {
		e := *p.Expr
		e.Inputs = append([]ir.Type{xt}, e.Inputs[1:]...)
		e.Nodes = append([]kernels.FusedNode(nil), e.Nodes...)
		for i := range e.Nodes {
			if e.Nodes[i].Op == ir.Input && e.Nodes[i].Index == 0 {
				e.Nodes[i].DType = xt.DType // the joined value is the op's, exact in its own dtype
			}
		}
		f = &e
	}
	vals := append([]ir.Value{x}, extra...)
	q := &kernels.Problem{Op: kernels.FusedElementwise, Expr: f, Outs: append([]ir.Type(nil), p.Outs...)}
	for _, v := range vals {
		q.Args = append(q.Args, v.Type())
	}
	q.Rows = fl.problemRows(vals, outs, false)
	return fl.addUnit(nodes, q, vals, outs)
}

// splitEmbedding cuts an embedding table into row pieces: piece k gathers the ids minus its
// first row (zero rows for ids outside it), added to the sum of the pieces before it.
func (fl *fnLowerer) splitEmbedding(nodes []*ir.Node, p *kernels.Problem, args, outs []ir.Value, ranges [][2]int) error {
	root := nodes[len(nodes)-1]
	tab, ids := args[0], args[1]
	ot, err := opType(p, 2)
	if err != nil {
		return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), err)
	}
	// The sum's dtype: the table's values (f32 for blocks, and for bf16, which kernels do not
	// store), exact in it.
	acc := ot
	if tab.Type().DType.Quantized() || acc.DType == ir.BF16 {
		acc.DType = ir.F32
	}
	direct := p.Expr == nil && acc.Equal(p.Outs[0])
	rows := fl.rows[outs[0]]
	it := ids.Type()
	var sum ir.Value
	for k, r := range ranges {
		piece, err := fl.rowPiece(tab, r[0], r[1])
		if err != nil {
			return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), err)
		}
		shifted := ids
		if r[0] > 0 {
			// ids − r0: an id below the piece wraps to a large unsigned value, outside it too.
			shifted = fl.temp(ir.Sub, it, fmt.Sprintf("%s ids − %d", labelName(root), r[0]), fl.rows[ids])
			f := &kernels.Fused{Inputs: []ir.Type{it}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: it.DType},
				{Op: ir.Const, Value: float64(r[0]), DType: it.DType}, {Op: ir.Sub, Args: []int{0, 1}, DType: it.DType}}, Outputs: []int{2}}
			q := &kernels.Problem{Op: kernels.FusedElementwise, Expr: f, Args: []ir.Type{it}, Outs: []ir.Type{it}}
			q.Rows = fl.problemRows([]ir.Value{ids}, []ir.Value{shifted}, false)
			if err := fl.addUnit(nodes, q, []ir.Value{ids}, []ir.Value{shifted}); err != nil {
				return err
			}
		}
		out := fl.temp(ir.Embedding, acc, fmt.Sprintf("%s rows %d:%d", labelName(root), r[0], r[1]), rows)
		if k == len(ranges)-1 && direct {
			out = outs[0]
		}
		vals := []ir.Value{piece, shifted}
		q := &kernels.Problem{Op: ir.Embedding, Attrs: p.Attrs, NumOpArgs: 2, Args: []ir.Type{piece.Type(), it}, Outs: []ir.Type{acc}}
		if k > 0 || !acc.Equal(ot) {
			// out = gathered (+ sum), the gathered value in the table's dtype (f32 for blocks)
			// and stored in the sum's.
			g := ot.DType
			if tab.Type().DType.Quantized() {
				g = ir.F32
			}
			f := &kernels.Fused{Inputs: []ir.Type{{DType: g, Shape: acc.Shape}}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: g}}, Outputs: []int{0}}
			if k > 0 {
				f.Inputs = append(f.Inputs, acc)
				f.Nodes = append(f.Nodes, kernels.FusedNode{Op: ir.Input, Index: 1, DType: acc.DType}, kernels.FusedNode{Op: ir.Add, Args: []int{0, 1}, DType: acc.DType})
				f.Outputs = []int{2}
				vals = append(vals, sum)
				q.Args = append(q.Args, acc)
			}
			q.Expr = f
		}
		q.Rows = fl.problemRows(vals, []ir.Value{out}, false)
		if err := fl.addUnit(nodes, q, vals, []ir.Value{out}); err != nil {
			return err
		}
		sum = out
	}
	if direct {
		return nil
	}
	return fl.finishSplit(nodes, p, args[2:], sum, outs)
}

// labelName names node n for the values a split adds ("%12 logits").
func labelName(n *ir.Node) string {
	if n.Name != "" {
		return fmt.Sprintf("%%%d %s", n.ID, n.Name)
	}
	return fmt.Sprintf("%%%d", n.ID)
}
