package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Mixture-of-experts kernels (ir/ops_moe.go).
//
//   - moe_route: one invocation per row picks its k experts in k passes over the row's logits
//     (each pass takes the best logit after the previous pass's in argtopk's order: larger
//     first, equal ones in index order, NaN above every number) and computes their weights.
//   - moe_matvec: moe_linear, moe_linear_sum and moe_glu a slot (token, chosen expert) at a time, as a
//     matrix-vector product over the chosen expert's matrix only: a row of workgroups per slot
//     (per token for moe_linear_sum, whose workgroups sum their k experts' columns with the
//     routing weights), so a decode step reads k experts' weights whatever their number. Every
//     slot reads its expert's whole matrix: for many tokens (prefill) that is n·k matrices.
//   - moe_grouped: tokens grouped by expert. A first step lists, in one workgroup, the slots
//     each expert was chosen for (in slot order) and cuts every expert's list into tiles of tm
//     slots; the second step runs one workgroup per (tile, tn columns), which reads its expert's
//     tn rows once for the tile's tm slots, their inputs gathered by the list and its results
//     scattered back. A prefill of n tokens thus reads each chosen expert's matrix about
//     n·k/(E·tm) times rather than n·k/E. moe_linear_sum adds a third step that sums each
//     token's k rows with its weights; moe_glu reads the gate's and the up projection's rows in
//     the same loop and stores act(gate)·up.
//
// Expert ids are clamped to 0..E−1 as they are read: the rows of a run-time length past the run's
// hold anything (the interpreter refuses an id out of range; a kernel cannot report it).
//
// Weights are f32, f16 or any block format the kernels read (quant.go), stacked [E, out, in]:
// expert e's row r is row e·out + r of an [E·out, in] matrix.

var (
	MoeRoute = &Template{
		Name:    "moe_route",
		Accepts: acceptMoeRoute,
		Space:   flatSpace(),
		Build:   buildMoeRoute,
	}
	MoeMatvec = &Template{
		Name:      "moe_matvec",
		Accepts:   acceptMoeLinear,
		Space:     moeMatvecSpace(),
		Quantized: quantDTypes,
		Build:     buildMoeMatvec,
	}
	MoeGrouped = &Template{
		Name:      "moe_grouped",
		Accepts:   acceptMoeLinear,
		Space:     moeGroupedSpace(),
		Quantized: quantDTypes,
		Build:     buildMoeGrouped,
	}
	MoeSum = &Template{
		Name:    "moe_sum",
		Accepts: acceptPlain(ir.MoeSum),
		Space:   flatSpace(),
		Build:   buildMoeSum,
	}
)

func init() {
	for _, t := range []*Template{MoeRoute, MoeMatvec, MoeGrouped, MoeSum} {
		Register(t)
	}
}

func acceptMoeRoute(p *Problem, caps Caps) error {
	if p.Op != ir.MoeRoute {
		return otherOp(p)
	}
	if p.Expr != nil {
		return fmt.Errorf("moe_route takes no epilogue")
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return err
	}
	if len(p.Outs) != 2 || !p.Outs[0].Equal(outs[0]) || !p.Outs[1].Equal(outs[1]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	return checkDTypes(p, caps)
}

func buildMoeRoute(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptMoeRoute(p, caps); err != nil {
		return nil, err
	}
	xt := p.Args[0]
	e := xt.Shape[xt.Shape.Rank()-1]
	rows := xt.Shape.NumElements() / e
	k := p.Attrs.Int("k", 1)
	renorm := p.Attrs.String("norm", ir.MoeNormRenorm) == ir.MoeNormRenorm
	b := newBuilder(fmt.Sprintf("moe_route_k%d", k), caps)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	ids := b.Buffer("ids", codegen.I32, codegen.WriteOnly)
	wts := b.Buffer("w", StorageType(p.Outs[1].DType), codegen.WriteOnly)
	none := u(0xffffffff)
	eachFlat(b, c, rows, func(r codegen.Value) {
		base := b.Mul(r, u(e))
		logit := func(i codegen.Value) codegen.Value { return LoadAs(b, x, b.Add(base, i), xt.DType) }
		chosen := make([]codegen.Value, k)
		var pk, pi codegen.Value
		for t := range k {
			bk := b.Var("best_key", u(0))
			bi := b.Var("best_idx", none)
			b.For(u(0), u(e), u(1), func(i codegen.Value) {
				kv := OrderedKey(b, logit(i), 0xffffffff)
				ok := b.Or(b.Eq(b.Get(bi), none), better(b, kv, i, b.Get(bk), b.Get(bi)))
				if t > 0 {
					// after the previous pass's choice in the order
					ok = b.And(ok, b.Or(b.Lt(kv, pk), b.And(b.Eq(kv, pk), b.Gt(i, pi))))
				}
				b.Set(bk, b.Select(ok, kv, b.Get(bk)))
				b.Set(bi, b.Select(ok, i, b.Get(bi)))
			})
			pk, pi = b.Get(bk), b.Get(bi)
			chosen[t] = pi
		}
		top := logit(chosen[0])
		z := b.Var("z", b.F32(0))
		if renorm {
			for t := range k {
				b.Set(z, b.Add(b.Get(z), b.Exp(b.Sub(logit(chosen[t]), top))))
			}
		} else {
			b.For(u(0), u(e), u(1), func(i codegen.Value) {
				b.Set(z, b.Add(b.Get(z), b.Exp(b.Sub(logit(i), top))))
			})
		}
		for t := range k {
			at := b.Add(b.Mul(r, u(k)), u(t))
			b.Store(ids, at, b.Bitcast(chosen[t], codegen.I32))
			StoreAs(b, wts, at, b.Div(b.Exp(b.Sub(logit(chosen[t]), top)), b.Get(z)), p.Outs[1].DType)
		}
	})
	kern, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	return &Launch{
		Steps: []Step{{Kernel: kern, Spec: spec, Grid: flatGrid(rows, c, caps), Bindings: []Operand{{Arg, 0}, {Out, 0}, {Out, 1}},
			Scale: flatScale(p, p.Rows.Arg(0), rows, c)}},
		Flops: float64(rows * e * (k + 2)),
		Bytes: tensorBytes(p.Args, p.Outs),
	}, nil
}

// moeDims is a moe_linear, moe_linear_sum or moe_glu problem.
type moeDims struct {
	sum                bool  // moe_linear_sum
	glu                ir.Op // moe_glu's activation (0 for the others)
	perSlot            bool  // x is [n, k, in]
	idsArg, routeArg   int   // the ids' argument; moe_linear_sum's routing weights'
	n, k, e, out, in   int
	xT, wT, oT         ir.DType
	weightBytesPerElem float64
}

// mats is the number of expert matrices a slot reads (moe_glu: the gate's and the up
// projection's).
func (d moeDims) mats() int {
	if d.glu != 0 {
		return 2
	}
	return 1
}

func (d moeDims) slots() int { return d.n * d.k }

// expertBytes is the bytes of one expert's matrix.
func (d moeDims) expertBytes() float64 { return float64(d.out*d.in) * d.weightBytesPerElem }

func readMoe(p *Problem) (moeDims, error) {
	d := moeDims{idsArg: 2, routeArg: -1}
	switch p.Op {
	case ir.MoeLinear:
	case ir.MoeLinearSum:
		d.sum, d.routeArg = true, 3
	case ir.MoeGLU:
		d.idsArg = 3
		var ok bool
		if d.glu, ok = map[string]ir.Op{"silu": ir.Silu, "gelu_tanh": ir.GeluTanh, "gelu": ir.Gelu}[p.Attrs.String("act", "silu")]; !ok {
			return d, fmt.Errorf("moe_glu: act %q", p.Attrs.String("act", ""))
		}
	default:
		return d, otherOp(p)
	}
	if p.Expr != nil {
		return d, fmt.Errorf("%s takes no epilogue", p.Op)
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return d, err
	}
	if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
		return d, fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	x, w, ids := p.Args[0], p.Args[1], p.Args[d.idsArg]
	if d.glu != 0 && p.Args[2].DType != w.DType {
		return d, fmt.Errorf("the gate's weights are %s, the up projection's %s", w.DType, p.Args[2].DType)
	}
	d.perSlot = x.Shape.Rank() == 3
	d.n, d.k = ids.Shape[0], ids.Shape[1]
	d.e, d.out, d.in = w.Shape[0], w.Shape[1], w.Shape[2]
	d.xT, d.wT, d.oT = x.DType, w.DType, p.Outs[0].DType
	d.weightBytesPerElem = float64(w.Bytes()) / float64(w.Shape.NumElements())
	return d, nil
}

// acceptMoeLinear accepts moe_linear and moe_linear_sum with f32 or f16 activations and weights
// of f32, f16 or a block format the kernels read.
func acceptMoeLinear(p *Problem, caps Caps) error {
	d, err := readMoe(p)
	if err != nil {
		return err
	}
	if d.wT.Quantized() {
		if !readsBlocks(d.wT) {
			return fmt.Errorf("the experts' weights are %s, which no kernel reads", d.wT)
		}
	} else if d.wT != ir.F32 && d.wT != ir.F16 {
		return fmt.Errorf("the experts' weights are %s; the kernels read f32, f16 and block formats", d.wT)
	}
	if d.xT != ir.F32 && d.xT != ir.F16 {
		return fmt.Errorf("activations %s; the kernels take f32 and f16", d.xT)
	}
	if n := d.e * d.out * d.in; n >= 1<<31 {
		return fmt.Errorf("%d weights overflow 32-bit indexing", n)
	}
	if d.glu != 0 && d.wT.Quantized() {
		// checkDTypesExcept skips one argument: the up projection's blocks were checked above
		// with the gate's (the same dtype).
		q := *p
		q.Args = append([]ir.Type{p.Args[0], p.Args[1]}, p.Args[3:]...)
		return checkDTypesExcept(&q, caps, 1)
	}
	return checkDTypesExcept(p, caps, 1)
}

// moeWeights reads the experts' weights: quads of four consecutive elements of a row of the
// [E·out, in] matrix, dequantized as quant.go does, or plain elements.
type moeWeights struct {
	d   moeDims
	buf *codegen.Buffer
	q   quantRows
}

func declareMoeWeights(b *codegen.Builder, d moeDims, name string) moeWeights {
	w := moeWeights{d: d}
	if d.wT.Quantized() {
		w.buf = b.Buffer(name, codegen.U32, codegen.ReadOnly)
		w.q = newQuantRows(d.wT, d.in)
	} else {
		w.buf = b.Buffer(name, StorageType(d.wT), codegen.ReadOnly)
	}
	return w
}

// declareMoeInputs declares x and the experts' weights (two for moe_glu) in argument order and
// returns the operands bound to them.
func declareMoeInputs(b *codegen.Builder, d moeDims) (*codegen.Buffer, []moeWeights, []Operand) {
	x := b.Buffer("x", StorageType(d.xT), codegen.ReadOnly)
	ws := []moeWeights{declareMoeWeights(b, d, "w")}
	binds := []Operand{{Arg, 0}, {Arg, 1}}
	if d.glu != 0 {
		ws = append(ws, declareMoeWeights(b, d, "w_up"))
		binds = append(binds, Operand{Arg, 2})
	}
	return x, ws, binds
}

// gated is moe_glu's act(g)·u (the activation as the fused elementwise kernels compute it).
func gated(b *codegen.Builder, act ir.Op, g, u codegen.Value) codegen.Value {
	f := &Fused{Inputs: []ir.Type{ir.T(ir.F32)}, Nodes: []FusedNode{{Op: ir.Input, DType: ir.F32}, {Op: act, Args: []int{0}, DType: ir.F32}}, Outputs: []int{1}}
	return b.Mul(f.Emit(b, []codegen.Value{g})[0], u)
}

// quad is elements k..k+3 of matrix row row (k a multiple of 4, k+3 < in; in a multiple of 4).
func (w moeWeights) quad(b *codegen.Builder, row, k codegen.Value) codegen.Value {
	if w.d.wT.Quantized() {
		return w.q.quad(b, w.buf, row, k)
	}
	at := b.Add(b.Mul(row, b.U32(uint32(w.d.in))), k)
	es := make([]codegen.Value, 4)
	for i := range es {
		es[i] = LoadAs(b, w.buf, b.Add(at, b.U32(uint32(i))), w.d.wT)
	}
	return b.Vec(es...)
}

// elem is element k of matrix row row (float weights only).
func (w moeWeights) elem(b *codegen.Builder, row, k codegen.Value) codegen.Value {
	return LoadAs(b, w.buf, b.Add(b.Mul(row, b.U32(uint32(w.d.in))), k), w.d.wT)
}

// expertOf reads the expert id of slot s, clamped to 0..E−1.
func expertOf(b *codegen.Builder, ids *codegen.Buffer, s codegen.Value, e int) codegen.Value {
	return b.Min(b.Bitcast(b.Load(ids, s), codegen.U32), b.U32(uint32(e-1)))
}

// moeMatvecSpace: wg invocations in cols groups of a power-of-two number of invocations, each
// group one output column, its K reduction split over the group.
func moeMatvecSpace() Space {
	return NewSpace(Ints("wg", 64, 128, 256, 32), Ints("cols", 2, 1, 4, 8)).
		Where(fitsInvocations("wg")).
		Where(func(p *Problem, c Config, caps Caps) error {
			wg, cols := c["wg"], c["cols"]
			kp := wg / max(cols, 1)
			if cols < 1 || wg%cols != 0 || kp&(kp-1) != 0 {
				return fmt.Errorf("wg=%d, cols=%d: the invocations per column must be a power of two", wg, cols)
			}
			d, err := readMoe(p)
			if err != nil {
				return err
			}
			if cols > 1 && cols >= 2*d.out {
				return fmt.Errorf("cols=%d is more than twice the %d columns", cols, d.out)
			}
			if y := moeMatvecRows(d); y > caps.MaxGroups[1] {
				return fmt.Errorf("%d rows of workgroups exceed the device's %d", y, caps.MaxGroups[1])
			}
			return nil
		})
}

// moeMatvecRows is moe_matvec's rows of workgroups: one per slot, or per token for the sum.
func moeMatvecRows(d moeDims) int {
	if d.sum {
		return d.n
	}
	return d.slots()
}

func buildMoeMatvec(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptMoeLinear(p, caps); err != nil {
		return nil, err
	}
	d, _ := readMoe(p)
	wgN, colsN := c["wg"], c["cols"]
	b := newBuilder(fmt.Sprintf("moe_matvec_k%d", d.k), caps)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	x, ws, binds := declareMoeInputs(b, d)
	ids := b.Buffer("ids", codegen.I32, codegen.ReadOnly)
	binds = append(binds, Operand{Arg, d.idsArg})
	var rw *codegen.Buffer
	if d.sum {
		rw = b.Buffer("route_w", StorageType(p.Args[3].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, 3})
	}
	out := b.Buffer("out", StorageType(d.oT), codegen.WriteOnly)
	binds = append(binds, Operand{Out, 0})

	wg := b.Spec("wg", codegen.U32, int64(wgN))
	cols := b.Spec("cols", codegen.U32, int64(colsN))
	b.WorkgroupSize(wg, u(1), u(1))
	kp := b.Div(wg, cols)
	li := b.LocalIndex()
	ci, ki := b.Div(li, kp), b.Rem(li, kp)
	wid := b.WorkgroupID()
	col := b.Add(b.Mul(b.X(wid), cols), ci)
	y := b.Y(wid)
	// acc[m]: this invocation's partial sum of matrix m (moe_glu: the gate's, the up's).
	acc := make([]*codegen.Var, d.mats())
	for m := range acc {
		acc[m] = b.Var(fmt.Sprintf("acc%d", m), b.F32(0))
	}
	vec := d.in%4 == 0
	slot := func(s codegen.Value) {
		e := expertOf(b, ids, s, d.e)
		xrow := b.Div(s, u(d.k))
		if d.perSlot {
			xrow = s
		}
		xBase := b.Mul(xrow, u(d.in))
		row := b.Add(b.Mul(e, u(d.out)), col)
		part := make([]*codegen.Var, len(ws))
		for m := range part {
			part[m] = b.Var(fmt.Sprintf("part%d", m), b.F32(0))
		}
		b.If(b.Lt(col, u(d.out)), func() {
			if vec {
				b.For(b.Mul(ki, u(4)), u(d.in), b.Mul(kp, u(4)), func(k codegen.Value) {
					xs := make([]codegen.Value, 4)
					for i := range xs {
						xs[i] = LoadAs(b, x, b.Add(xBase, b.Add(k, u(i))), d.xT)
					}
					xv := b.Vec(xs...)
					for m, w := range ws {
						b.Set(part[m], b.Add(b.Get(part[m]), b.Dot(xv, w.quad(b, row, k))))
					}
				})
				return
			}
			b.For(ki, u(d.in), kp, func(k codegen.Value) {
				xv := LoadAs(b, x, b.Add(xBase, k), d.xT)
				for m, w := range ws {
					b.Set(part[m], b.Add(b.Get(part[m]), b.Mul(xv, w.elem(b, row, k))))
				}
			})
		})
		if d.sum {
			b.Set(acc[0], b.Add(b.Get(acc[0]), b.Mul(LoadAs(b, rw, s, p.Args[3].DType), b.Get(part[0]))))
		} else {
			for m := range acc {
				b.Set(acc[m], b.Get(part[m]))
			}
		}
	}
	if d.sum {
		for j := range d.k {
			slot(b.Add(b.Mul(y, u(d.k)), u(j)))
		}
	} else {
		slot(y)
	}
	// The kp partial sums of each column: a shared-memory tree (kp is a power of two), matrix m's
	// at m·wg.
	red := b.Shared("red", codegen.F32, b.Mul(wg, u(len(acc))))
	for m := range acc {
		b.Store(red, b.Add(b.Mul(u(m), wg), li), b.Get(acc[m]))
	}
	b.Barrier()
	half := b.Var("half", b.Div(kp, u(2)))
	b.While(func() codegen.Value { return b.Gt(b.Get(half), u(0)) }, func() {
		h := b.Get(half)
		b.If(b.Lt(ki, h), func() {
			for m := range acc {
				i := b.Add(b.Mul(u(m), wg), li)
				b.Store(red, i, b.Add(b.Load(red, i), b.Load(red, b.Add(i, h))))
			}
		})
		b.Barrier()
		b.Set(half, b.Div(h, u(2)))
	})
	b.If(b.And(b.Eq(ki, u(0)), b.Lt(col, u(d.out))), func() {
		v := b.Load(red, li)
		if d.glu != 0 {
			v = gated(b, d.glu, v, b.Load(red, b.Add(wg, li)))
		}
		StoreAs(b, out, b.Add(b.Mul(y, u(d.out)), col), v, d.oT)
	})
	kern, spec, err := finish(b, caps, c, "wg", "cols")
	if err != nil {
		return nil, err
	}
	rows := moeMatvecRows(d)
	return &Launch{
		Steps: []Step{{Kernel: kern, Spec: spec, Grid: [3]uint32{uint32(ceilDiv(d.out, colsN)), uint32(rows), 1}, Bindings: binds,
			Scale: scaleItems(p, p.Rows.Arg(d.idsArg), 1, rows, 1)}},
		Flops: 2 * float64(d.mats()*d.slots()) * float64(d.out) * float64(d.in),
		// Every slot reads its expert's matrices.
		Bytes: float64(d.mats()*d.slots())*d.expertBytes() + moeActivationBytes(p, d),
	}, nil
}

// moeActivationBytes is the traffic of everything but the experts' weights.
func moeActivationBytes(p *Problem, d moeDims) float64 {
	n := tensorBytes(p.Outs)
	for i, t := range p.Args {
		if i != 1 && (i != 2 || d.glu == 0) {
			n += float64(t.Bytes())
		}
	}
	return n
}

// moeGroupedSpace: tiles of tm slots by tn columns, one invocation per column.
func moeGroupedSpace() Space {
	return NewSpace(Ints("tn", 64, 32, 128), Ints("tm", 16, 8, 32), Ints("group_wg", 64, 256)).
		Where(fitsInvocations("tn")).
		Where(fitsInvocations("group_wg")).
		Where(func(p *Problem, c Config, caps Caps) error {
			d, err := readMoe(p)
			if err != nil {
				return err
			}
			if c["tn"] > 32 && c["tn"] >= 2*d.out {
				return fmt.Errorf("tn=%d is more than twice the %d columns", c["tn"], d.out)
			}
			if y := moeMaxTiles(d, c["tm"]); y > caps.MaxGroups[1] {
				return fmt.Errorf("%d tiles exceed the device's %d workgroups in y", y, caps.MaxGroups[1])
			}
			if bytes := 4 * (2*(d.e+1) + c["tm"]*moeTK); bytes > caps.MaxSharedBytes { // step 1's lists, step 2's tile
				return fmt.Errorf("%d experts and tm=%d need %d bytes of shared memory, the device has %d", d.e, c["tm"], bytes, caps.MaxSharedBytes)
			}
			return nil
		})
}

// moeTK is the K extent of moe_grouped's staged input tile.
const moeTK = 32

// moeMaxTiles bounds the tiles of tm slots the experts' lists cut into: every expert's last tile
// may be partial.
func moeMaxTiles(d moeDims, tm int) int { return ceilDiv(d.slots(), tm) + min(d.e, d.slots()) }

// Scratch of moe_grouped: the tile table (word 0: the number of tiles; then per tile its
// expert, its first position in the list and its number of slots) and the list of slots
// grouped by expert; moe_linear_sum adds the [slots, out] products.
func buildMoeGrouped(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptMoeLinear(p, caps); err != nil {
		return nil, err
	}
	d, _ := readMoe(p)
	tn, tm, gwg := c["tn"], c["tm"], c["group_wg"]
	S := d.slots()
	maxTiles := moeMaxTiles(d, tm)
	l := &Launch{Scratch: []int{4 * (1 + 3*maxTiles), 4 * S}}

	// Step 1: the lists.
	{
		b := newBuilder("moe_group", caps)
		u := func(v int) codegen.Value { return b.U32(uint32(v)) }
		ids := b.Buffer("ids", codegen.I32, codegen.ReadOnly)
		tiles := b.Buffer("tiles", codegen.U32, codegen.WriteOnly)
		list := b.Buffer("list", codegen.U32, codegen.WriteOnly)
		wg := b.Spec("group_wg", codegen.U32, int64(gwg))
		b.WorkgroupSize(wg, u(1), u(1))
		li := b.LocalIndex()
		cnt := b.Shared("count", codegen.U32, u(d.e+1))
		off := b.Shared("offset", codegen.U32, u(d.e+1))
		b.For(li, u(d.e), wg, func(e codegen.Value) {
			n := b.Var("n", u(0))
			b.For(u(0), u(S), u(1), func(s codegen.Value) {
				b.Set(n, b.Add(b.Get(n), b.Select(b.Eq(expertOf(b, ids, s, d.e), e), u(1), u(0))))
			})
			b.Store(cnt, e, b.Get(n))
		})
		b.Barrier()
		b.If(b.Eq(li, u(0)), func() {
			pos := b.Var("pos", u(0))
			nt := b.Var("tiles", u(0))
			b.For(u(0), u(d.e), u(1), func(e codegen.Value) {
				n := b.Load(cnt, e)
				b.Store(off, e, b.Get(pos))
				b.For(u(0), n, u(tm), func(t codegen.Value) {
					at := b.Add(u(1), b.Mul(b.Get(nt), u(3)))
					b.Store(tiles, at, e)
					b.Store(tiles, b.Add(at, u(1)), b.Add(b.Get(pos), t))
					b.Store(tiles, b.Add(at, u(2)), b.Min(u(tm), b.Sub(n, t)))
					b.Set(nt, b.Add(b.Get(nt), u(1)))
				})
				b.Set(pos, b.Add(b.Get(pos), n))
			})
			b.Store(tiles, u(0), b.Get(nt))
		})
		b.Barrier()
		b.For(li, u(d.e), wg, func(e codegen.Value) {
			pos := b.Var("at", b.Load(off, e))
			b.For(u(0), u(S), u(1), func(s codegen.Value) {
				b.If(b.Eq(expertOf(b, ids, s, d.e), e), func() {
					b.Store(list, b.Get(pos), s)
					b.Set(pos, b.Add(b.Get(pos), u(1)))
				})
			})
		})
		kern, spec, err := finish(b, caps, c, "group_wg")
		if err != nil {
			return nil, err
		}
		l.Steps = append(l.Steps, Step{Kernel: kern, Spec: spec, Grid: [3]uint32{1, 1, 1},
			Bindings: []Operand{{Arg, d.idsArg}, {Scratch, 0}, {Scratch, 1}}})
	}

	// Step 2: a tile of tm slots of one expert by tn columns per workgroup.
	{
		b := newBuilder(fmt.Sprintf("moe_gemm_tm%d", tm), caps)
		u := func(v int) codegen.Value { return b.U32(uint32(v)) }
		x, ws, binds := declareMoeInputs(b, d)
		tiles := b.Buffer("tiles", codegen.U32, codegen.ReadOnly)
		list := b.Buffer("list", codegen.U32, codegen.ReadOnly)
		outT := d.oT
		binds = append(binds, Operand{Scratch, 0}, Operand{Scratch, 1})
		if d.sum {
			outT = ir.F32
			l.Scratch = append(l.Scratch, 4*S*d.out)
			binds = append(binds, Operand{Scratch, 2})
		} else {
			binds = append(binds, Operand{Out, 0})
		}
		out := b.Buffer("out", StorageType(outT), codegen.WriteOnly)
		wg := b.Spec("tn", codegen.U32, int64(tn))
		b.WorkgroupSize(wg, u(1), u(1))
		li := b.LocalIndex()
		wid := b.WorkgroupID()
		col := b.Add(b.Mul(b.X(wid), wg), li)
		tile := b.Y(wid)
		xs := b.Shared("xs", codegen.F32, u(tm*moeTK))
		// A workgroup past the tiles the lists gave runs no K loop and stores nothing (its
		// barriers stay in uniform control flow: no branch around them).
		active := b.Lt(tile, b.Load(tiles, u(0)))
		{
			at := b.Add(u(1), b.Mul(b.Select(active, tile, u(0)), u(3)))
			e := b.Min(b.Load(tiles, at), u(d.e-1))
			first := b.Load(tiles, b.Add(at, u(1)))
			rows := b.Select(active, b.Max(b.Load(tiles, b.Add(at, u(2))), u(1)), u(0))
			row := b.Add(b.Mul(e, u(d.out)), b.Min(col, u(d.out-1)))
			// accs[m][r]: slot r's sum for matrix m (moe_glu: the gate's, the up's).
			accs := make([][]*codegen.Var, len(ws))
			for m := range accs {
				accs[m] = make([]*codegen.Var, tm)
				for r := range tm {
					accs[m][r] = b.Var(fmt.Sprintf("acc%d_%d", m, r), b.F32(0))
				}
			}
			// The input row of the tile's slot r (clamped to the tile's last for r ≥ rows).
			xrow := func(r codegen.Value) codegen.Value {
				s := b.Load(list, b.Add(first, b.Min(r, b.Sub(rows, u(1)))))
				if d.perSlot {
					return s
				}
				return b.Div(s, u(d.k))
			}
			b.For(u(0), b.Select(active, u(d.in), u(0)), u(moeTK), func(k0 codegen.Value) {
				// Stage the tile's inputs [tm, moeTK] (zero past in). Loops, not unrolled code:
				// lavapipe's compile time grows fast with the kernel's length.
				b.For(li, u(tm*moeTK), wg, func(i codegen.Value) {
					r, kk := b.Div(i, u(moeTK)), b.Add(k0, b.Rem(i, u(moeTK)))
					in := b.Lt(kk, u(d.in))
					v := LoadAs(b, x, b.Add(b.Mul(xrow(r), u(d.in)), b.Min(kk, u(d.in-1))), d.xT)
					b.Store(xs, i, b.Select(in, v, b.F32(0)))
				})
				b.Barrier()
				if d.in%moeTK == 0 {
					b.For(u(0), u(moeTK), u(4), func(q codegen.Value) {
						for m, w := range ws {
							wq := w.quad(b, row, b.Add(k0, q))
							for r := 0; r < tm; r++ {
								xv := make([]codegen.Value, 4)
								for i := range xv {
									xv[i] = b.Load(xs, b.Add(q, u(r*moeTK+i)))
								}
								b.Set(accs[m][r], b.Add(b.Get(accs[m][r]), b.Dot(b.Vec(xv...), wq)))
							}
						}
					})
				} else {
					b.For(u(0), u(moeTK), u(1), func(kk codegen.Value) {
						kg := b.Add(k0, kk)
						for m, w := range ws {
							wv := b.Select(b.Lt(kg, u(d.in)), w.elem(b, row, b.Min(kg, u(d.in-1))), b.F32(0))
							for r := 0; r < tm; r++ {
								b.Set(accs[m][r], b.Add(b.Get(accs[m][r]), b.Mul(b.Load(xs, b.Add(u(r*moeTK), kk)), wv)))
							}
						}
					})
				}
				b.Barrier()
			})
			b.If(b.Lt(col, u(d.out)), func() {
				for r := 0; r < tm; r++ {
					b.If(b.Lt(u(r), rows), func() {
						s := b.Load(list, b.Add(first, u(r)))
						v := b.Get(accs[0][r])
						if d.glu != 0 {
							v = gated(b, d.glu, v, b.Get(accs[1][r]))
						}
						StoreAs(b, out, b.Add(b.Mul(s, u(d.out)), col), v, outT)
					})
				}
			})
		}
		kern, spec, err := finish(b, caps, c, "tn")
		if err != nil {
			return nil, err
		}
		l.Steps = append(l.Steps, Step{Kernel: kern, Spec: spec, Grid: [3]uint32{uint32(ceilDiv(d.out, tn)), uint32(maxTiles), 1}, Bindings: binds})
	}

	// Step 3 (moe_linear_sum): each token's k rows summed with its routing weights.
	if d.sum {
		b := newBuilder("moe_weighted_sum", caps)
		u := func(v int) codegen.Value { return b.U32(uint32(v)) }
		y := b.Buffer("y", codegen.F32, codegen.ReadOnly)
		rw := b.Buffer("route_w", StorageType(p.Args[3].DType), codegen.ReadOnly)
		out := b.Buffer("out", StorageType(d.oT), codegen.WriteOnly)
		fc := Config{"wg": 64, "per_thread": 1}
		eachFlat(b, fc, d.n*d.out, func(i codegen.Value) {
			t, o := b.Div(i, u(d.out)), b.Rem(i, u(d.out))
			s := b.Var("s", b.F32(0))
			for j := range d.k {
				slot := b.Add(b.Mul(t, u(d.k)), u(j))
				b.Set(s, b.Add(b.Get(s), b.Mul(LoadAs(b, rw, slot, p.Args[3].DType), b.Load(y, b.Add(b.Mul(slot, u(d.out)), o)))))
			}
			StoreAs(b, out, i, b.Get(s), d.oT)
		})
		kern, spec, err := finish(b, caps, fc, "wg", "per_thread")
		if err != nil {
			return nil, err
		}
		l.Steps = append(l.Steps, Step{Kernel: kern, Spec: spec, Grid: flatGrid(d.n*d.out, fc, caps),
			Bindings: []Operand{{Scratch, 2}, {Arg, 3}, {Out, 0}}, Scale: flatScale(p, p.Rows.Out(0), d.n*d.out, fc)})
	}
	l.Flops = 2 * float64(d.mats()*S) * float64(d.out) * float64(d.in)
	// Each expert's matrix is read once per tile of its slots: about slots/tm + E tiles at most,
	// never more matrices than slots.
	reads := min(float64(S), float64(S)/float64(tm)+float64(min(d.e, S)))
	l.Bytes = float64(d.mats())*reads*d.expertBytes() + moeActivationBytes(p, d)
	return l, nil
}

func buildMoeSum(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptPlain(ir.MoeSum)(p, caps); err != nil {
		return nil, err
	}
	yt, wt := p.Args[0], p.Args[1]
	n, k, dim := yt.Shape[0], yt.Shape[1], yt.Shape[2]
	b := newBuilder("moe_sum", caps)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	y := b.Buffer("y", StorageType(yt.DType), codegen.ReadOnly)
	w := b.Buffer("w", StorageType(wt.DType), codegen.ReadOnly)
	out := b.Buffer("out", StorageType(p.Outs[0].DType), codegen.WriteOnly)
	eachFlat(b, c, n*dim, func(i codegen.Value) {
		t, o := b.Div(i, u(dim)), b.Rem(i, u(dim))
		s := b.Var("s", b.F32(0))
		for j := range k {
			slot := b.Add(b.Mul(t, u(k)), u(j))
			b.Set(s, b.Add(b.Get(s), b.Mul(LoadAs(b, w, slot, wt.DType), LoadAs(b, y, b.Add(b.Mul(slot, u(dim)), o), yt.DType))))
		}
		StoreAs(b, out, i, b.Get(s), p.Outs[0].DType)
	})
	kern, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	return &Launch{
		Steps: []Step{{Kernel: kern, Spec: spec, Grid: flatGrid(n*dim, c, caps), Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Out, 0}},
			Scale: flatScale(p, p.Rows.Out(0), n*dim, c)}},
		Flops: 2 * float64(n*k*dim),
		Bytes: tensorBytes(p.Args, p.Outs),
	}, nil
}
