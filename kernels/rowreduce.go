package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Helpers shared by the row-wise templates (reductions, norms, rope_norm) and usable by any
// template that reduces a value over a workgroup or splices an epilogue into its stores.

// ReduceOp is the combining operation of a workgroup reduction.
type ReduceOp uint8

const (
	ReduceAdd ReduceOp = iota + 1
	ReduceMax
	ReduceMin
)

func (op ReduceOp) apply(b *codegen.Builder, x, y codegen.Value) codegen.Value {
	switch op {
	case ReduceAdd:
		return b.Add(x, y)
	case ReduceMax:
		return b.Max(x, y)
	case ReduceMin:
		return b.Min(x, y)
	}
	panic(fmt.Sprintf("kernels: unknown reduce op %d", op))
}

func (op ReduceOp) subgroup(b *codegen.Builder, x codegen.Value) codegen.Value {
	switch op {
	case ReduceAdd:
		return b.SubgroupAdd(x)
	case ReduceMax:
		return b.SubgroupMax(x)
	case ReduceMin:
		return b.SubgroupMin(x)
	}
	panic(fmt.Sprintf("kernels: unknown reduce op %d", op))
}

// WorkgroupReducer combines one value per invocation over segments of Seg consecutive
// invocations of a one-dimensional workgroup of Size invocations (Seg = Size: the whole
// workgroup), giving every invocation its segment's result. With subgroup arithmetic (whole
// workgroups only) each subgroup reduces in registers and subgroups meet in shared memory;
// otherwise a shared-memory tree halves the active invocations of each segment per step, which
// needs Seg to be a power of two. Every invocation of the workgroup must call each reduction
// (they contain barriers).
//
// The subgroup path assumes subgroups are consecutive runs of gl_SubgroupSize invocations in
// gl_LocalInvocationIndex order (as codegen.Softmax does), which every driver vkc meets does.
//
// Shared memory: Size 32-bit elements per scalar type reduced (two for ArgMax), allocated on
// first use; SharedBytesFor gives the bound for a space predicate.
type WorkgroupReducer struct {
	b        *codegen.Builder
	Size     codegen.Value // the workgroup size (a constant or specialization constant)
	Seg      codegen.Value // invocations per segment (a constant or specialization constant)
	subgroup bool
	lid      codegen.Value
	lane     codegen.Value // lid % Seg
	scratch  map[codegen.Type]*codegen.Array
	extra    map[codegen.Type]*codegen.Array // second array per type, for (key, index) pairs
}

// NewWorkgroupReducer prepares reductions over a whole workgroup of size invocations; subgroup
// selects the subgroup-arithmetic path (the device must have it: Caps.SubgroupArithmetic).
func NewWorkgroupReducer(b *codegen.Builder, size codegen.Value, subgroup bool) *WorkgroupReducer {
	return newReducer(b, size, size, subgroup)
}

// NewSegmentReducer prepares reductions over segments of seg invocations (a power of two dividing
// size), through shared memory.
func NewSegmentReducer(b *codegen.Builder, size, seg codegen.Value) *WorkgroupReducer {
	return newReducer(b, size, seg, false)
}

func newReducer(b *codegen.Builder, size, seg codegen.Value, subgroup bool) *WorkgroupReducer {
	lid := b.LocalIndex()
	return &WorkgroupReducer{b: b, Size: size, Seg: seg, subgroup: subgroup, lid: lid, lane: b.Rem(lid, seg),
		scratch: map[codegen.Type]*codegen.Array{}, extra: map[codegen.Type]*codegen.Array{}}
}

// SharedBytesFor is the shared memory a WorkgroupReducer of wg invocations uses for arrays
// distinct 32-bit arrays.
func SharedBytesFor(wg, arrays int) int { return 4 * wg * arrays }

func (r *WorkgroupReducer) array(m map[codegen.Type]*codegen.Array, t codegen.Type, tag string) *codegen.Array {
	if a, ok := m[t]; ok {
		return a
	}
	a := r.b.Shared(fmt.Sprintf("reduce_%s_%s", tag, t), t, r.Size)
	m[t] = a
	return a
}

// tree runs the shared-memory halving steps over each segment: step(o) combines element lid
// with element o = lid + s for the invocations whose lane is below s.
func (r *WorkgroupReducer) tree(step func(o codegen.Value)) {
	b := r.b
	b.Barrier()
	s := b.Var("seg_half", b.Div(r.Seg, b.U32(2)))
	b.While(func() codegen.Value { return b.Gt(b.Get(s), b.U32(0)) }, func() {
		b.If(b.Lt(r.lane, b.Get(s)), func() { step(b.Add(r.lid, b.Get(s))) })
		b.Barrier()
		b.Set(s, b.Div(b.Get(s), b.U32(2)))
	})
}

// Reduce returns op over v of every invocation of this invocation's segment (v a 32-bit scalar).
func (r *WorkgroupReducer) Reduce(v codegen.Value, op ReduceOp) codegen.Value {
	b := r.b
	sh := r.array(r.scratch, v.Type(), "a")
	if r.subgroup {
		sg := b.SubgroupSize()
		v = op.subgroup(b, v)
		b.If(b.Eq(b.SubgroupInvocation(), b.U32(0)), func() { b.Store(sh, b.Div(r.lid, sg), v) })
		b.Barrier()
		nsg := b.Div(b.Add(r.Size, b.Sub(sg, b.U32(1))), sg)
		acc := b.Var("wg_acc", b.Load(sh, b.U32(0)))
		b.For(b.U32(1), nsg, b.U32(1), func(i codegen.Value) {
			b.Set(acc, op.apply(b, b.Get(acc), b.Load(sh, i)))
		})
		res := b.Get(acc)
		b.Barrier() // the array is reused by the next reduction
		return res
	}
	b.Store(sh, r.lid, v)
	r.tree(func(o codegen.Value) { b.Store(sh, r.lid, op.apply(b, b.Load(sh, r.lid), b.Load(sh, o))) })
	res := b.Load(sh, b.Sub(r.lid, r.lane))
	b.Barrier()
	return res
}

// ArgMax reduces (key, index) pairs (both u32) to the largest key, and among equal keys the
// smallest index, which is what "the first index of the largest value" needs when every
// invocation scanned its elements in increasing order. Uses two shared arrays of u32.
func (r *WorkgroupReducer) ArgMax(key, idx codegen.Value) (codegen.Value, codegen.Value) {
	b := r.b
	sk := r.array(r.scratch, codegen.U32, "a")
	si := r.array(r.extra, codegen.U32, "b")
	if r.subgroup {
		sg := b.SubgroupSize()
		mk := b.SubgroupMax(key)
		mi := b.SubgroupMin(b.Select(b.Eq(key, mk), idx, b.U32(0xffffffff)))
		b.If(b.Eq(b.SubgroupInvocation(), b.U32(0)), func() {
			slot := b.Div(r.lid, sg)
			b.Store(sk, slot, mk)
			b.Store(si, slot, mi)
		})
		b.Barrier()
		nsg := b.Div(b.Add(r.Size, b.Sub(sg, b.U32(1))), sg)
		ak := b.Var("am_key", b.Load(sk, b.U32(0)))
		ai := b.Var("am_idx", b.Load(si, b.U32(0)))
		b.For(b.U32(1), nsg, b.U32(1), func(i codegen.Value) {
			k, x := b.Load(sk, i), b.Load(si, i)
			take := better(b, k, x, b.Get(ak), b.Get(ai))
			b.Set(ak, b.Select(take, k, b.Get(ak)))
			b.Set(ai, b.Select(take, x, b.Get(ai)))
		})
		rk, ri := b.Get(ak), b.Get(ai)
		b.Barrier()
		return rk, ri
	}
	b.Store(sk, r.lid, key)
	b.Store(si, r.lid, idx)
	r.tree(func(o codegen.Value) {
		k0, i0 := b.Load(sk, r.lid), b.Load(si, r.lid)
		k1, i1 := b.Load(sk, o), b.Load(si, o)
		take := better(b, k1, i1, k0, i0)
		b.Store(sk, r.lid, b.Select(take, k1, k0))
		b.Store(si, r.lid, b.Select(take, i1, i0))
	})
	first := b.Sub(r.lid, r.lane)
	rk, ri := b.Load(sk, first), b.Load(si, first)
	b.Barrier()
	return rk, ri
}

// OrderedKey maps an f32 to a u32 whose unsigned order is the float order (-0 and +0 map to one
// key). NaN maps to nan (0xffffffff to make it the largest, 0 the smallest), which is how max,
// min and argmax propagate NaN as the interpreter does.
func OrderedKey(b *codegen.Builder, v codegen.Value, nan uint32) codegen.Value {
	bits := b.Bitcast(v, codegen.U32)
	bits = b.Select(b.Eq(v, b.F32(0)), b.U32(0), bits)
	neg := b.Ne(b.And(bits, b.U32(0x80000000)), b.U32(0))
	key := b.Select(neg, b.Not(bits), b.Or(bits, b.U32(0x80000000)))
	return b.Select(b.Ne(v, v), b.U32(nan), key)
}

// FromOrderedKey inverts OrderedKey (the NaN keys give a NaN).
func FromOrderedKey(b *codegen.Builder, key codegen.Value) codegen.Value {
	pos := b.Ne(b.And(key, b.U32(0x80000000)), b.U32(0))
	bits := b.Select(pos, b.Xor(key, b.U32(0x80000000)), b.Not(key))
	return b.Bitcast(bits, codegen.F32)
}

// RowWalk is how a row-wise kernel's invocations cover its rows: cooperatively (each workgroup
// takes `rows` rows, wg/rows invocations per row, each invocation taking every (wg/rows)-th
// element; partial results combined by a WorkgroupReducer) or serially (one invocation per row,
// reductions are the identity). Templates write their row computation once against it and
// expose the choice as the parameters of RowSpace.
type RowWalk struct {
	B    *codegen.Builder
	Coop bool
	Row  codegen.Value // this invocation's row (u32)
	// Valid is false for the invocations of a cooperative workgroup's rows past the last row:
	// they take part in the reductions (barriers) but touch no memory: Each skips their
	// elements and Leader is false.
	Valid   codegen.Value
	lane    codegen.Value // index within the row's invocations
	threads codegen.Value // invocations per row
	red     *WorkgroupReducer
}

// WalkRows declares the kernel's workgroup size (the specialization constants "wg" and "rows")
// and runs body for this invocation's row, configured by c (a point of RowSpace). Invocations
// without a row skip body (serial) or run it with Valid false (cooperative, so the reductions'
// barriers stay in uniform control flow). Dispatch RowGrid(rows, c, caps); finish the kernel
// with the spec names "wg" and "rows".
func WalkRows(b *codegen.Builder, c Config, rows int, body func(w *RowWalk)) {
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	rpg := b.Spec("rows", codegen.U32, int64(max(c["rows"], 1)))
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	w := &RowWalk{B: b, Coop: c["coop"] == 1}
	lid := b.LocalIndex()
	if w.Coop {
		w.threads = b.Div(wg, rpg)
		w.lane = b.Rem(lid, w.threads)
		w.Row = b.Add(b.Mul(LinearGroup(b), rpg), b.Div(lid, w.threads))
		w.Valid = b.Lt(w.Row, b.U32(uint32(rows)))
		if c["subgroup"] == 1 {
			w.red = NewWorkgroupReducer(b, wg, true)
		} else {
			w.red = NewSegmentReducer(b, wg, w.threads)
		}
		body(w)
		return
	}
	w.Row = b.Add(b.Mul(LinearGroup(b), wg), lid)
	w.Valid = b.Bool(true)
	w.lane, w.threads = b.U32(0), b.U32(1)
	b.If(b.Lt(w.Row, b.U32(uint32(rows))), func() { body(w) })
}

// RowGrid is the grid of a WalkRows kernel.
func RowGrid(rows int, c Config, caps Caps) [3]uint32 {
	if c["coop"] == 1 {
		rpg := max(c["rows"], 1)
		return Grid1D((rows+rpg-1)/rpg, caps)
	}
	return Grid1D((rows+c["wg"]-1)/c["wg"], caps)
}

// Each runs body(k) for the elements k (u32) of an n-element row that this invocation handles.
func (w *RowWalk) Each(n int, body func(k codegen.Value)) {
	b := w.B
	end := b.U32(uint32(n))
	if w.Coop {
		end = b.Select(w.Valid, end, b.U32(0))
	}
	b.For(w.lane, end, w.threads, body)
}

// Leader is true for one invocation of each valid row (for stores of a per-row result).
func (w *RowWalk) Leader() codegen.Value {
	b := w.B
	return b.And(w.Valid, b.Eq(w.lane, b.U32(0)))
}

// Reduce combines v over the invocations sharing the row.
func (w *RowWalk) Reduce(v codegen.Value, op ReduceOp) codegen.Value {
	if !w.Coop {
		return v
	}
	return w.red.Reduce(v, op)
}

// ArgMax combines (key, index) pairs over the invocations sharing the row (see
// WorkgroupReducer.ArgMax).
func (w *RowWalk) ArgMax(key, idx codegen.Value) (codegen.Value, codegen.Value) {
	if !w.Coop {
		return key, idx
	}
	return w.red.ArgMax(key, idx)
}

// Sum accumulates f(k) over the row's elements this invocation handles and reduces the sums
// over the row's invocations.
func (w *RowWalk) Sum(n int, zero codegen.Value, f func(k codegen.Value) codegen.Value) codegen.Value {
	b := w.B
	acc := b.Var("row_sum", zero)
	w.Each(n, func(k codegen.Value) { b.Set(acc, b.Add(b.Get(acc), f(k))) })
	return w.Reduce(b.Get(acc), ReduceAdd)
}

// RowSpace is the tuning space of the row-wise templates: the workgroup size wg; coop=1 for
// rows shared by the invocations of a workgroup (rows of them per workgroup; subgroup=1 combines
// a whole workgroup's partials with subgroup arithmetic, else shared memory), coop=0 for one
// invocation per row. inner gives the problem's row stride (1 for contiguous rows); arrays the
// 32-bit shared arrays the kernel's reductions use.
func RowSpace(inner func(p *Problem) int, arrays int) Space {
	return NewSpace(Ints("wg", 128, 64, 256, 32, 512, 1024), Bools("coop", true), Bools("subgroup", true), Ints("rows", 1, 2, 4, 8)).
		Where(fitsInvocations("wg")).
		Where(func(p *Problem, c Config, caps Caps) error {
			wg, rows := c["wg"], c["rows"]
			switch {
			case wg > 256 && caps.CPU:
				// For GPUs' long single rows (rowStatic). On lavapipe a workgroup is a loop over
				// its invocations: Qwen3-MoE's 128-row add_rmsnorm took 3.8–4.7 ms at 512 and
				// 1024 against 0.6 ms at 128 when the tuner tried them.
				return fmt.Errorf("wg=%d: workgroups over 256 invocations are for GPUs", wg)
			case c["subgroup"] == 1 && !caps.SubgroupArithmetic:
				return fmt.Errorf("subgroup=1 needs subgroup arithmetic, which the device lacks")
			case c["subgroup"] == 1 && c["coop"] == 0:
				return fmt.Errorf("subgroup=1 applies only to coop=1 (a serial row has nothing to combine)")
			case c["subgroup"] == 1 && rows > 1:
				return fmt.Errorf("subgroup=1 combines whole workgroups; rows=%d shares them between rows (shared memory only)", rows)
			case c["coop"] == 0 && rows > 1:
				return fmt.Errorf("rows=%d applies only to coop=1 (coop=0 is one row per invocation)", rows)
			case c["coop"] == 1 && inner(p) != 1:
				// Not a correctness limit: a workgroup walking a strided fibre reads one element
				// per cache line, while one invocation per fibre reads neighbouring fibres together.
				return fmt.Errorf("coop=1 walks contiguous rows; this axis has stride %d", inner(p))
			}
			if c["coop"] == 1 {
				if wg&(wg-1) != 0 || rows&(rows-1) != 0 {
					return fmt.Errorf("wg=%d, rows=%d: reductions need powers of two", wg, rows)
				}
				if wg/rows < 4 {
					return fmt.Errorf("wg=%d, rows=%d leaves fewer than 4 invocations per row", wg, rows)
				}
				if n := SharedBytesFor(wg, arrays); n > caps.MaxSharedBytes {
					return fmt.Errorf("wg=%d needs %d bytes of shared memory, the device has %d", wg, n, caps.MaxSharedBytes)
				}
			}
			return nil
		})
}

// rowStatic is a static choice of RowSpace's templates on a GPU for few long contiguous rows
// (decode's single row): a workgroup a row large enough that an invocation reads at most 8 of
// its elements. The space's first point (128 invocations) left each invocation of an 8B
// model's decode rmsnorm (one row of 4096) 32 loads in a dependent loop, one memory latency
// each: 19.7 µs a call on the H100 (docs/bench/h100-2026-12-06, s7 call 2) for 32 KB. Nil on a
// CPU device, for many rows (a workgroup each already fills the device) and strided rows.
func rowStatic(rowsAndLen func(p *Problem) (rows, n, inner int)) func(p *Problem, caps Caps) []Config {
	return func(p *Problem, caps Caps) []Config {
		rows, n, inner := rowsAndLen(p)
		if caps.CPU || inner != 1 || rows > 64 {
			return nil
		}
		wg := 128
		for wg < 1024 && 2*wg <= caps.MaxInvocations && n > 8*wg {
			wg *= 2
		}
		sub := 0
		if caps.SubgroupArithmetic {
			sub = 1
		}
		return []Config{{"wg": wg, "coop": 1, "subgroup": sub, "rows": 1}}
	}
}

// flatSpace is the space of kernels with one invocation per element (or pair, or output) and no
// shared memory: the workgroup size and the consecutive items per invocation, both
// specialization constants.
func flatSpace() Space {
	return NewSpace(Ints("wg", 128, 64, 256), Ints("per_thread", 1, 2, 4)).Where(fitsInvocations("wg"))
}

// flatGrid is the grid of a flat kernel over n items.
func flatGrid(n int, c Config, caps Caps) [3]uint32 {
	per := c["wg"] * c["per_thread"]
	return Grid1D((n+per-1)/per, caps)
}

// eachFlat declares the flat kernel's wg and per_thread specialization constants and runs body
// for every item q < n this invocation handles: a workgroup takes wg·per_thread consecutive
// items, its invocations neighbours in each of per_thread rounds, so every round's accesses are
// contiguous across the workgroup.
func eachFlat(b *codegen.Builder, c Config, n int, body func(q codegen.Value)) {
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	per := b.Spec("per_thread", codegen.U32, int64(c["per_thread"]))
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	base := b.Add(b.Mul(b.Mul(LinearGroup(b), per), wg), b.LocalIndex())
	b.For(b.U32(0), per, b.U32(1), func(j codegen.Value) {
		q := b.Add(base, b.Mul(j, wg))
		b.If(b.Lt(q, b.U32(uint32(n))), func() { body(q) })
	})
}

// Epilogue applies p's epilogue (if any) to v, the op's value of output element idx (a u32
// index into Outs[0]), and returns the value to store as Outs[0]'s dtype (compute type). opType
// is the op's own result type; v is first rounded through its storage type so the epilogue sees
// what the unfused graph would have stored. extra holds one read-only buffer per epilogue input
// (Args[NumOpArgs:]), declared with EpilogueBuffers.
func Epilogue(b *codegen.Builder, p *Problem, extra []*codegen.Buffer, idx, v codegen.Value, opType ir.DType) codegen.Value {
	if p.Expr == nil {
		return v
	}
	if st := StorageType(opType); st != ComputeType(opType) {
		v = b.Convert(b.Convert(v, st), ComputeType(opType))
	}
	in := []codegen.Value{v}
	out := p.Outs[0].Shape
	for i, t := range p.Args[p.NumOpArgs:] {
		in = append(in, LoadAs(b, extra[i], BroadcastIndex(b, idx, out, t.Shape), t.DType))
	}
	return p.Expr.Emit(b, in)[0]
}

// EpilogueBuffers declares the read-only buffers of p's epilogue inputs (after the kernel's own
// bindings) and returns them with their operands.
func EpilogueBuffers(b *codegen.Builder, p *Problem) ([]*codegen.Buffer, []Operand) {
	if p.Expr == nil {
		return nil, nil
	}
	var bufs []*codegen.Buffer
	var ops []Operand
	for i := p.NumOpArgs; i < len(p.Args); i++ {
		bufs = append(bufs, b.Buffer(fmt.Sprintf("epi%d", i), StorageType(p.Args[i].DType), codegen.ReadOnly))
		ops = append(ops, Operand{Arg, i})
	}
	return bufs, ops
}

// checkEpilogueOf validates an epilogue of a single-result op: one output, inputs matching Args.
func checkEpilogueOf(p *Problem, opOut ir.Type) error {
	if p.Expr == nil {
		return nil
	}
	f := p.Expr
	if err := f.Check(); err != nil {
		return err
	}
	if len(f.Outputs) != 1 {
		return fmt.Errorf("an epilogue has one result, this one has %d", len(f.Outputs))
	}
	if len(f.Inputs) != 1+len(p.Args)-p.NumOpArgs {
		return fmt.Errorf("epilogue takes %d inputs, the problem gives %d", len(f.Inputs), 1+len(p.Args)-p.NumOpArgs)
	}
	if !f.Inputs[0].Equal(opOut) {
		return fmt.Errorf("epilogue input 0 is %s, the op gives %s", f.Inputs[0], opOut)
	}
	for i, t := range p.Args[p.NumOpArgs:] {
		if _, err := ir.Broadcast(t.Shape, p.Outs[0].Shape); err != nil {
			return fmt.Errorf("epilogue input %d %s does not broadcast to %s", i+1, t, p.Outs[0])
		}
	}
	return nil
}

// numOpArgs is the number of Args that belong to the op.
func numOpArgs(p *Problem) int {
	if p.Expr == nil && p.NumOpArgs == 0 {
		return len(p.Args)
	}
	return p.NumOpArgs
}

// finish completes a kernel, checks the device supports it, and computes its specialization
// data from the configuration's values for the names given (the kernel's spec constants).
func finish(b *codegen.Builder, caps Caps, c Config, names ...string) (*codegen.Kernel, []uint32, error) {
	k, err := b.Finish()
	if err != nil {
		return nil, nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, nil, err
	}
	vals := map[string]int64{}
	for _, n := range names {
		vals[n] = int64(c[n])
	}
	spec, err := k.SpecValues(vals)
	if err != nil {
		return nil, nil, err
	}
	if n, err := k.SharedBytes(spec); err != nil {
		return nil, nil, err
	} else if n > caps.MaxSharedBytes {
		return nil, nil, fmt.Errorf("kernel %s needs %d bytes of shared memory, the device has %d", k.Name, n, caps.MaxSharedBytes)
	}
	return k, spec, nil
}

// splitAxis returns the sizes before, along and after axis ax of s.
func splitAxis(s ir.Shape, ax int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i := 0; i < ax; i++ {
		outer *= s[i]
	}
	for i := ax + 1; i < len(s); i++ {
		inner *= s[i]
	}
	return outer, s[ax], inner
}

// otherOp wraps ErrOtherOp for a problem whose op a template does not serve.
func otherOp(p *Problem) error { return fmt.Errorf("%s: %w", p.OpName(), ErrOtherOp) }

// acceptPlain is the Accepts of a template for one op with a single result and no epilogue: the
// problem must be that op, its result the op's inferred type, its dtypes storable on the device.
func acceptPlain(op ir.Op) func(p *Problem, caps Caps) error {
	return func(p *Problem, caps Caps) error {
		if p.Op != op {
			return otherOp(p)
		}
		if p.Expr != nil {
			return fmt.Errorf("%s takes no epilogue", op)
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
}

// tensorBytes sums the sizes of types, for Launch.Bytes.
func tensorBytes(ts ...[]ir.Type) float64 {
	var n float64
	for _, l := range ts {
		for _, t := range l {
			n += float64(t.Bytes())
		}
	}
	return n
}
