package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Layout templates: copies whose every output element reads one input element at a statically
// known place. The compiler makes reshape (and, where the consumer reads strided data, slice and
// transpose) a view; these templates are for the places where a dense copy is needed. Elements
// are copied in their storage type, so every dtype works and f16 needs only 16-bit storage.
var (
	Transpose = gatherTemplate("transpose", ir.Transpose, transposeIndex)
	Slice     = gatherTemplate("slice", ir.Slice, sliceIndex)
	Expand    = gatherTemplate("expand", ir.Expand, expandIndex)
	Reverse   = gatherTemplate("reverse", ir.Reverse, reverseIndex)
	// ReshapeCopy materialises a reshape (a plain copy), for completeness: the compiler normally
	// makes reshape a view.
	ReshapeCopy = gatherTemplate("reshape_copy", ir.Reshape, func(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value {
		return func(b *codegen.Builder, e codegen.Value) codegen.Value { return e }
	})
)

func init() {
	// The general transpose leaves swaps of the last two axes to transpose_tiled, which is
	// 2.3x faster there on the H200 (1536×576 f16: 11 µs against 25); the static cost model
	// cannot tell the two apart (same bytes), so offering both would pick by name.
	general := Transpose.Accepts
	Transpose.Accepts = func(p *Problem, caps Caps) error {
		if err := general(p, caps); err != nil {
			return err
		}
		if acceptTransposeTiled(p, caps) == nil {
			return fmt.Errorf("perm %v swaps the last two axes: transpose_tiled serves it", p.Attrs.Ints("perm"))
		}
		return nil
	}
	// A slice of a run's last rows (ir.LastRows) starts where the run's length puts it.
	Slice.ReadsLength = true
	for _, t := range []*Template{Transpose, Slice, Expand, Reverse, ReshapeCopy} {
		Register(t)
	}
}

// acceptLayout checks a single-input, single-result layout problem of op.
func acceptLayout(op ir.Op, p *Problem, caps Caps) error {
	if p.Op != op {
		return otherOp(p)
	}
	if p.Expr != nil {
		return fmt.Errorf("%s takes no epilogue (an elementwise kernel can read it as a view)", p.OpName())
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return err
	}
	if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	return checkDTypes(p, caps)
}

// gatherTemplate is a layout template computing out[e] = in[index(e)], one invocation per output
// element (per_thread consecutive ones).
func gatherTemplate(name string, op ir.Op, index func(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value) *Template {
	accept := func(p *Problem, caps Caps) error { return acceptLayout(op, p, caps) }
	return &Template{
		Name:    name,
		Accepts: accept,
		Space:   flatSpace(),
		Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
			if err := accept(p, caps); err != nil {
				return nil, err
			}
			out := p.Outs[0]
			n := out.Shape.NumElements()
			elem := StorageType(out.DType)
			b := newBuilder(name, caps)
			x := b.Buffer("x", elem, codegen.ReadOnly)
			y := b.Buffer("y", elem, codegen.WriteOnly)
			reads := p.Rows != nil && p.Rows.Reads
			var lenBuf *codegen.Buffer
			if reads {
				lenBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
			}
			idx := index(p)
			eachFlat(b, c, n, func(e codegen.Value) {
				src := idx(b, e)
				if reads {
					// The last rows of the run (ir.LastRows): the index past the capacity's
					// last rows moves back by the rows the run does not have, (Max − n)·k.
					perRow := p.Args[0].Shape.NumElements() / p.Rows.Max // k rows of inner elements
					missing := b.Sub(b.U32(uint32(p.Rows.Max)), b.Load(lenBuf, b.U32(0)))
					src = b.Sub(src, b.Mul(missing, b.U32(uint32(perRow))))
				}
				b.Store(y, e, b.Load(x, src))
			})
			k, spec, err := finish(b, caps, c, "wg", "per_thread")
			if err != nil {
				return nil, err
			}
			// A bounded result's rows read the input's rows at the same index (ir.LengthRows
			// allows no transpose or expand along the run-time axis, and no slice but of the
			// run's last rows, whose result is not bounded).
			st := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: []Operand{{Arg, 0}, {Out, 0}},
				Scale: flatScale(p, p.Rows.Out(0), n, c)}
			if reads {
				st.Bindings = append(st.Bindings, Operand{Len, 0})
			}
			return &Launch{Steps: []Step{st}, Bytes: 2 * float64(out.Bytes())}, nil
		},
	}
}

// transposeIndex: output axis k reads input axis perm[k].
func transposeIndex(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value {
	perm := p.Attrs.Ints("perm")
	out := p.Outs[0].Shape
	ost, ist := out.Strides(), p.Args[0].Shape.Strides()
	return func(b *codegen.Builder, e codegen.Value) codegen.Value {
		src := b.U32(0)
		for k := range out {
			if out[k] == 1 {
				continue
			}
			coord := b.Div(e, b.U32(uint32(ost[k])))
			if k > 0 {
				coord = b.Rem(coord, b.U32(uint32(out[k])))
			}
			src = b.Add(src, b.Mul(coord, b.U32(uint32(ist[perm[k]]))))
		}
		return src
	}
}

// sliceIndex: element (o, k, i) of the [outer, cnt, inner] output reads (o, start + k·step, i).
func sliceIndex(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value {
	x := p.Args[0].Shape
	ax, _ := ir.NormAxis(p.Attrs.Int("axis", 0), x.Rank())
	_, m, inner := splitAxis(x, ax)
	start, _ := ir.ClampSlice(m, p.Attrs.Int("start", 0), p.Attrs.Int("end", 0))
	step := p.Attrs.Int("step", 1)
	cnt := p.Outs[0].Shape[ax]
	return func(b *codegen.Builder, e codegen.Value) codegen.Value {
		i := b.Rem(e, b.U32(uint32(inner)))
		ok := b.Div(e, b.U32(uint32(inner)))
		k, o := b.Rem(ok, b.U32(uint32(cnt))), b.Div(ok, b.U32(uint32(cnt)))
		row := b.Add(b.Mul(o, b.U32(uint32(m))), b.Add(b.U32(uint32(start)), b.Mul(k, b.U32(uint32(step)))))
		return b.Add(b.Mul(row, b.U32(uint32(inner))), i)
	}
}

// reverseIndex: element (o, k, i) of the [outer, m, inner] output reads (o, m−1−k, i).
func reverseIndex(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value {
	x := p.Args[0].Shape
	ax, _ := ir.NormAxis(p.Attrs.Int("axis", 0), x.Rank())
	_, m, inner := splitAxis(x, ax)
	return func(b *codegen.Builder, e codegen.Value) codegen.Value {
		i := b.Rem(e, b.U32(uint32(inner)))
		ok := b.Div(e, b.U32(uint32(inner)))
		k, o := b.Rem(ok, b.U32(uint32(m))), b.Div(ok, b.U32(uint32(m)))
		row := b.Add(b.Mul(o, b.U32(uint32(m))), b.Sub(b.U32(uint32(m-1)), k))
		return b.Add(b.Mul(row, b.U32(uint32(inner))), i)
	}
}

func expandIndex(p *Problem) func(b *codegen.Builder, e codegen.Value) codegen.Value {
	out, in := p.Outs[0].Shape, p.Args[0].Shape
	return func(b *codegen.Builder, e codegen.Value) codegen.Value { return BroadcastIndex(b, e, out, in) }
}

// Concat copies each input into its slab of the result, one step per input; the steps write
// disjoint ranges and share one kernel whose sizes are push constants.
var Concat = &Template{
	Name:    "concat",
	Accepts: acceptConcat,
	Space:   flatSpace(),
	Build:   buildConcat,
}

func init() { Register(Concat) }

var acceptConcat = acceptPlain(ir.Concat)

func buildConcat(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptConcat(p, caps); err != nil {
		return nil, err
	}
	out := p.Outs[0]
	ax, _ := ir.NormAxis(p.Attrs.Int("axis", 0), out.Shape.Rank())
	_, total, inner := splitAxis(out.Shape, ax)
	elem := StorageType(out.DType)
	// Sizes are push constants, so one kernel serves every step.
	b := newBuilder("concat", caps)
	x := b.Buffer("x", elem, codegen.ReadOnly)
	y := b.Buffer("y", elem, codegen.WriteOnly)
	n := b.Push("n", codegen.U32)           // elements of this input
	chunk := b.Push("chunk", codegen.U32)   // this input's m·inner
	ochunk := b.Push("ochunk", codegen.U32) // the result's total·inner
	off := b.Push("off", codegen.U32)       // this input's offset·inner
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	per := b.Spec("per_thread", codegen.U32, int64(c["per_thread"]))
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	base := b.Add(b.Mul(b.Mul(LinearGroup(b), per), wg), b.LocalIndex())
	b.For(b.U32(0), per, b.U32(1), func(j codegen.Value) {
		e := b.Add(base, b.Mul(j, wg))
		b.If(b.Lt(e, n), func() {
			o, r := b.Div(e, chunk), b.Rem(e, chunk)
			b.Store(y, b.Add(b.Add(b.Mul(o, ochunk), off), r), b.Load(x, e))
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	l := &Launch{Bytes: 2 * float64(out.Bytes())}
	at := 0
	for i, t := range p.Args {
		m := t.Shape[ax]
		ne := t.Shape.NumElements()
		// Along an axis after the run-time one, the first n rows of the result take the first
		// n rows of every input, bounded or not.
		l.Steps = append(l.Steps, Step{Kernel: k, Spec: spec, Grid: flatGrid(ne, c, caps),
			Bindings: []Operand{{Arg, i}, {Out, 0}}, Scale: flatScale(p, p.Rows.Out(0), ne, c),
			Push: PushU32(uint32(ne), uint32(m*inner), uint32(total*inner), uint32(at*inner))})
		at += m
	}
	return l, nil
}

// TransposeTiled swaps the last two axes ([..., r, c] → [..., c, r]) through a shared-memory tile
// so that both the reads and the writes are contiguous: a workgroup of tile × rows invocations
// moves a tile × tile block (each invocation tile/rows elements), the tile padded by one column
// against bank conflicts. Batches (the leading axes) are the grid's z.
var TransposeTiled = &Template{
	Name:    "transpose_tiled",
	Accepts: acceptTransposeTiled,
	Space: NewSpace(Ints("tile", 32, 16, 8), Ints("rows", 8, 4, 2)).Where(func(p *Problem, c Config, caps Caps) error {
		t, r := c["tile"], c["rows"]
		if r > t {
			return fmt.Errorf("rows=%d exceeds tile=%d", r, t)
		}
		if t*r > caps.MaxInvocations || t > caps.MaxWorkgroupSize[0] || r > caps.MaxWorkgroupSize[1] {
			return fmt.Errorf("tile=%d × rows=%d exceeds the device's workgroup limits", t, r)
		}
		if n := 4 * t * (t + 1); n > caps.MaxSharedBytes {
			return fmt.Errorf("tile=%d needs %d bytes of shared memory, the device has %d", t, n, caps.MaxSharedBytes)
		}
		return nil
	}),
	Build: buildTransposeTiled,
}

func init() { Register(TransposeTiled) }

func acceptTransposeTiled(p *Problem, caps Caps) error {
	if err := acceptLayout(ir.Transpose, p, caps); err != nil {
		return err
	}
	perm := p.Attrs.Ints("perm")
	r := len(perm)
	if r < 2 || perm[r-1] != r-2 || perm[r-2] != r-1 {
		return fmt.Errorf("perm %v does not swap the last two axes (the transpose template does any perm)", perm)
	}
	for i := 0; i < r-2; i++ {
		if perm[i] != i {
			return fmt.Errorf("perm %v moves a batch axis (the transpose template does any perm)", perm)
		}
	}
	if batch := p.Args[0].Shape[:r-2].NumElements(); batch > caps.MaxGroups[2] {
		return fmt.Errorf("%d batches exceed the device's %d workgroups in z", batch, caps.MaxGroups[2])
	}
	return nil
}

func buildTransposeTiled(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptTransposeTiled(p, caps); err != nil {
		return nil, err
	}
	x := p.Args[0]
	r := x.Shape.Rank()
	R, C := x.Shape[r-2], x.Shape[r-1]
	batch := x.Shape[:r-2].NumElements()
	d := x.DType
	elem := StorageType(d)
	// Shared memory holds 32-bit values: f16 tiles are widened (16-bit shared memory would need a
	// feature the kernels do not otherwise require).
	sh := elem
	if d == ir.F16 {
		sh = codegen.F32
	}
	b := newBuilder("transpose_tiled", caps)
	xb := b.Buffer("x", elem, codegen.ReadOnly)
	yb := b.Buffer("y", elem, codegen.WriteOnly)
	T := b.Spec("tile", codegen.U32, int64(c["tile"]))
	RW := b.Spec("rows", codegen.U32, int64(c["rows"]))
	b.WorkgroupSize(T, RW, b.U32(1))
	pitch := b.Add(T, b.U32(1))
	tile := b.Shared("tile", sh, b.Mul(T, pitch))
	lid, wid := b.LocalID(), b.WorkgroupID()
	lx, ly := b.X(lid), b.Y(lid)
	c0, r0 := b.Mul(b.X(wid), T), b.Mul(b.Y(wid), T)
	mat := b.Mul(b.Z(wid), b.U32(uint32(R*C)))
	b.For(ly, T, RW, func(j codegen.Value) {
		row, col := b.Add(r0, j), b.Add(c0, lx)
		b.If(b.And(b.Lt(row, b.U32(uint32(R))), b.Lt(col, b.U32(uint32(C)))), func() {
			v := b.Load(xb, b.Add(mat, b.Add(b.Mul(row, b.U32(uint32(C))), col)))
			b.Store(tile, b.Add(b.Mul(j, pitch), lx), b.Convert(v, sh))
		})
	})
	b.Barrier()
	b.For(ly, T, RW, func(j codegen.Value) {
		orow, ocol := b.Add(c0, j), b.Add(r0, lx) // output [C, R]
		b.If(b.And(b.Lt(orow, b.U32(uint32(C))), b.Lt(ocol, b.U32(uint32(R)))), func() {
			v := b.Load(tile, b.Add(b.Mul(lx, pitch), j))
			b.Store(yb, b.Add(mat, b.Add(b.Mul(orow, b.U32(uint32(R))), ocol)), b.Convert(v, elem))
		})
	})
	k, spec, err := finish(b, caps, c, "tile", "rows")
	if err != nil {
		return nil, err
	}
	t := c["tile"]
	grid := [3]uint32{uint32((C + t - 1) / t), uint32((R + t - 1) / t), uint32(max(batch, 1))}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("tile=%d: a %d×%d matrix needs more workgroups than the device allows", t, R, C)
	}
	st := Step{Kernel: k, Spec: spec, Grid: grid, Bindings: []Operand{{Arg, 0}, {Out, 0}}}
	if r > 2 {
		// A run-time length is a batch axis here (LengthRows keeps it leading).
		st.Scale = scaleItems(p, p.Rows.Out(0), 2, batch, 1)
	}
	return &Launch{Steps: []Step{st}, Bytes: 2 * float64(x.Bytes())}, nil
}
