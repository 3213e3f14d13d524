package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// TopK ranks each row of the last axis (argtopk): the indices of its k largest elements, largest
// first. It is a selection, k rounds of a workgroup argmax: every invocation keeps the best of its
// own elements; a round's winner is the workgroup's best (larger key, or the smaller index of equal
// keys), and only the invocation that held it rescans its elements for the best one after it in
// that order. So a round costs one reduction and one invocation's share of the row, not a pass
// over the row, and nothing is kept but one candidate per invocation (no shared copy of the row,
// so any row length fits). With split > 1 a row's elements are spread over split workgroups that
// each select their part's k best, and a second step selects the row's k from their split·k
// candidates (a long row, the vocabulary of a decode step, then occupies split workgroups).
//
// Order, as the interpreter's: floats compare through the order-preserving key of argmax, NaN
// above every number and equal keys in index order (the first NaN first), so the result is
// exactly the interpreter's, ties included.
//
// coop=2 is another method over the same order (topk_radix.go): a radix select that fixes a
// row's (or part's) k best in a few histogram passes, then places each by counting the selected
// ahead of it; the rounds' k dependent reductions become some 5 passes (docs/decode.md).
var TopK = &Template{
	Name:    "argtopk",
	Accepts: acceptTopK,
	Space:   topkSpace(),
	Static:  topkStatic,
	Build:   buildTopK,
}

// topkStatic is the static choice on a GPU: 256 invocations per row, and a row split into 32
// parts when there are fewer rows than that, so that a decode step's one row spans 32
// workgroups; the radix select (coop=2) first, its suffix sums by subgroup shuffles where the
// device has them, the rounds (coop=1) where it is not valid (a k whose list does not fit in
// shared memory).
//
// The rounds' point was measured: on the H200 (SmolLM2-135M, k = 64 of 49152 f16) the space's
// first point (one subgroup per row, lavapipe's best) took 3.4 ms of a 4.3 ms decode step, the
// split rounds far less; on the H100 the split rounds took 167 µs of Llama-3.1-8B's 4.5 ms step
// (k = 64 of 128256), 2·64 dependent workgroup reductions. The radix point is NOT measured on a
// GPU yet (BenchmarkDecodeTopK measures both): it is chosen for its dependent steps, some 5
// passes of 4 barriers (11 without subgroup shuffles) per step instead of 64 reductions of 9,
// over the same share of the row per invocation a pass as a round's rescan. On lavapipe, where
// barriers are dear, this point took 5.3 ms against the split rounds' 35 ms at 1×128256 f32
// (docs/decode.md). On a CPU implementation the space's order stands.
func topkStatic(p *Problem, caps Caps) []Config {
	if caps.CPU {
		// The radix select over 64 invocations, a row in 8 parts where it has few rows: on
		// lavapipe (2 cores, BenchmarkDecodeTopK, k = 64 of f32) 0.93 ms at 49152 and 1.32 ms at
		// 32000, where the space's first point (k rounds of one subgroup) took 13.3 and 8.7 ms.
		return []Config{{"subgroup": 0, "wg": 64, "coop": 2, "rows": 1, "split": 8},
			{"subgroup": 0, "wg": 64, "coop": 2, "rows": 1, "split": 1}}
	}
	var out []Config
	for _, sub := range []int{1, 0} { // subgroup=1 where the device has shuffles (topkRadixValid)
		out = append(out, Config{"subgroup": sub, "wg": 256, "coop": 2, "rows": 1, "split": 32},
			Config{"subgroup": sub, "wg": 256, "coop": 2, "rows": 1, "split": 1})
	}
	split := Config{"subgroup": 0, "wg": 256, "coop": 1, "rows": 1, "split": 32}
	whole := Config{"subgroup": 0, "wg": 256, "coop": 1, "rows": 1, "split": 1}
	return append(out, split, whole)
}

// TakeAlong gathers along the last axis (take_along_axis), one invocation per output element.
// An index outside the row gives 0: the kernel cannot report an error (the interpreter does).
var TakeAlong = &Template{
	Name:    "take_along_axis",
	Accepts: acceptTakeAlong,
	Space:   flatSpace(),
	Build:   buildTakeAlong,
}

var (
	acceptTopK      = acceptPlain(ir.ArgTopK)
	acceptTakeAlong = acceptPlain(ir.TakeAlongAxis)
)

func init() {
	Register(TopK)
	Register(TakeAlong)
}

// topkSpace is the row walk's space (RowSpace's parameters and rules) with split, ordered so
// that the first valid point — the configuration of a compile that does not measure — suits a
// CPU implementation such as lavapipe, where the static path is the default: subgroup=1, a
// workgroup of exactly one subgroup whose k rounds are subgroup operations alone, and no split.
// Measured there (SmolLM2's vocabulary, 49152 f32, k = 64; median of 15): one subgroup 2.0 ms,
// split in 32 parts 24 ms, 128 invocations through shared memory 2.5 ms and split 66 ms (the
// argmax of the row: 0.9 ms). A GPU wants the split (a row spread over the device), which a
// measured compile, the default on a GPU, finds. (Session 12, BenchmarkDecodeTopK on this
// machine's lavapipe: the one-subgroup point took 13.3 ms at 49152, not 2.0, and the radix
// select 0.93 ms: topkStatic takes the radix select on a CPU too.) coop=2 (the radix select, topkRadixValid's
// rules) and split=128 (for it alone) come after every earlier point, which all stay valid.
func topkSpace() Space {
	return NewSpace(Bools("subgroup", true), Ints("wg", 8, 16, 32, 64, 128, 256), Ints("coop", 1, 0, 2), Ints("rows", 1, 2, 4, 8),
		Ints("split", 1, 8, 32, 128)).
		Where(fitsInvocations("wg")).
		Where(func(p *Problem, c Config, caps Caps) error {
			wg, rows, sp := c["wg"], c["rows"], c["split"]
			if c["coop"] == 2 {
				return topkRadixValid(p, c, caps)
			}
			switch {
			case sp == 128:
				return fmt.Errorf("split=128 is for coop=2 (the rounds' merge of 128·k candidates is k rounds over them)")
			case c["subgroup"] == 1 && !caps.SubgroupArithmetic:
				return fmt.Errorf("subgroup=1 needs subgroup arithmetic, which the device lacks")
			case c["subgroup"] == 1 && (c["coop"] == 0 || rows > 1 || wg != caps.SubgroupSize):
				return fmt.Errorf("subgroup=1 is one subgroup (wg=%d) per row; got coop=%d, rows=%d, wg=%d", caps.SubgroupSize, c["coop"], rows, wg)
			case c["coop"] == 0 && rows > 1:
				return fmt.Errorf("rows=%d applies only to coop=1 (coop=0 is one row per invocation)", rows)
			case c["coop"] == 1 && (wg&(wg-1) != 0 || rows&(rows-1) != 0 || wg/rows < 4):
				return fmt.Errorf("wg=%d, rows=%d: the shared-memory reduction needs powers of two and at least 4 invocations per row", wg, rows)
			case c["coop"] == 1 && SharedBytesFor(wg, 2) > caps.MaxSharedBytes:
				return fmt.Errorf("wg=%d needs %d bytes of shared memory, the device has %d", wg, SharedBytesFor(wg, 2), caps.MaxSharedBytes)
			}
			if sp == 1 {
				return nil
			}
			if c["coop"] != 1 || rows != 1 {
				return fmt.Errorf("split=%d needs coop=1 and rows=1 (whole workgroups per part of a row)", sp)
			}
			nrows, n, k := topkDims(p)
			if nrows >= sp {
				return fmt.Errorf("split=%d is for fewer rows than parts; %d rows already give %d workgroups", sp, nrows, nrows)
			}
			if chunk := (n + sp - 1) / sp; chunk < 2*k || chunk < wg {
				return fmt.Errorf("split=%d leaves %d elements per part, too few for k=%d over wg=%d", sp, chunk, k, wg)
			}
			return nil
		})
}

// topkRadixValid is the rule of coop=2, the radix select (topk_radix.go): one workgroup of at
// least 32 invocations per row or part (rows=1), its histogram and candidate list in shared
// memory, and a split's parts as for the rounds. subgroup=1 takes each pass's suffix sums by
// subgroup shuffles (2 barriers instead of 9), one invocation per bin: wg=256.
func topkRadixValid(p *Problem, c Config, caps Caps) error {
	wg, sp := c["wg"], c["split"]
	nrows, n, k := topkDims(p)
	switch {
	case c["rows"] != 1:
		return fmt.Errorf("coop=2 (radix select) is one workgroup per row or part: rows=1")
	case c["subgroup"] == 1 && (!caps.SubgroupShuffle || wg != radixBins):
		return fmt.Errorf("coop=2 with subgroup=1 needs subgroup shuffles and wg=%d (one invocation per bin); got wg=%d, shuffle=%v", radixBins, wg, caps.SubgroupShuffle)
	case wg < 32:
		return fmt.Errorf("coop=2 walks 256 histogram bins a step; wg=%d is too few invocations for them", wg)
	case radixSharedBytes(k) > caps.MaxSharedBytes:
		return fmt.Errorf("coop=2 with k=%d needs %d bytes of shared memory, the device has %d", k, radixSharedBytes(k), caps.MaxSharedBytes)
	case sp == 1:
		return nil
	case nrows >= sp:
		return fmt.Errorf("split=%d is for fewer rows than parts; %d rows already give %d workgroups", sp, nrows, nrows)
	}
	if chunk := (n + sp - 1) / sp; chunk < 2*k || chunk < wg {
		return fmt.Errorf("split=%d leaves %d elements per part, too few for k=%d over wg=%d", sp, chunk, k, wg)
	}
	return nil
}

func topkDims(p *Problem) (rows, n, k int) {
	x := p.Args[0].Shape
	if x.Rank() == 0 {
		return 1, 1, 1
	}
	n = x[x.Rank()-1]
	return x.NumElements() / max(n, 1), n, p.Attrs.Int("k", 1)
}

// selectTopK runs the k rounds over the candidates [0, cnt) of this invocation's (virtual) row:
// key(c) and index(c) give a candidate's order key and its index in the row (0xffffffff for no
// candidate); emit(t, key, index) stores round t's winner (leader only).
func selectTopK(b *codegen.Builder, w *RowWalk, cnt, k int, argmax func(k, i codegen.Value) (codegen.Value, codegen.Value), key, index func(c codegen.Value) codegen.Value, emit func(t, key, idx codegen.Value)) {
	none := b.U32(0xffffffff)
	bk := b.Var("best_key", b.U32(0))
	bi := b.Var("best_idx", none)
	// rescan sets the invocation's best to its best candidate after (ak, ai) in the order
	// (larger key first, then smaller index); all=true takes every candidate.
	rescan := func(ak, ai codegen.Value, all bool) {
		b.Set(bk, b.U32(0))
		b.Set(bi, none)
		w.Each(cnt, func(c codegen.Value) {
			kv, iv := key(c), index(c)
			ok := b.Ne(iv, none)
			if !all {
				ok = b.And(ok, b.Or(b.Lt(kv, ak), b.And(b.Eq(kv, ak), b.Gt(iv, ai))))
			}
			take := b.And(ok, b.Or(b.Eq(b.Get(bi), none), better(b, kv, iv, b.Get(bk), b.Get(bi))))
			b.Set(bk, b.Select(take, kv, b.Get(bk)))
			b.Set(bi, b.Select(take, iv, b.Get(bi)))
		})
	}
	rescan(b.U32(0), none, true)
	b.For(b.U32(0), b.U32(uint32(k)), b.U32(1), func(t codegen.Value) {
		wk, wi := argmax(b.Get(bk), b.Get(bi))
		b.If(w.Leader(), func() { emit(t, wk, wi) })
		// The winner's holder moves to its next candidate; everyone else's best is still theirs
		// (it was not the winner, and nothing of theirs was taken).
		b.If(b.And(b.Ne(wi, none), b.Eq(b.Get(bi), wi)), func() { rescan(wk, wi, false) })
	})
}

// topkArgmax is the round's reduction: the row walk's, or with subgroup=1, when the workgroup
// is indeed one subgroup (gl_NumSubgroups, uniform), subgroup operations alone, no barrier.
func topkArgmax(b *codegen.Builder, w *RowWalk, c Config) func(k, i codegen.Value) (codegen.Value, codegen.Value) {
	if c["subgroup"] != 1 {
		return w.ArgMax
	}
	return func(k, i codegen.Value) (codegen.Value, codegen.Value) {
		rk := b.Var("round_key", b.U32(0))
		ri := b.Var("round_idx", b.U32(0xffffffff))
		b.IfElse(b.Eq(b.NumSubgroups(), b.U32(1)), func() {
			mk := b.SubgroupMax(k)
			b.Set(rk, mk)
			b.Set(ri, b.SubgroupMin(b.Select(b.Eq(k, mk), i, b.U32(0xffffffff))))
		}, func() {
			wk, wi := w.ArgMax(k, i)
			b.Set(rk, wk)
			b.Set(ri, wi)
		})
		return b.Get(rk), b.Get(ri)
	}
}

func buildTopK(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptTopK(p, caps); err != nil {
		return nil, err
	}
	if c["coop"] == 2 {
		return buildTopKRadix(p, c, caps)
	}
	rows, n, k := topkDims(p)
	xd := p.Args[0].DType
	rc := reduceCodec{ct: ComputeType(xd)}
	split := max(c["split"], 1)
	chunk := (n + split - 1) / split

	// Step 1: virtual row v = row·split + s selects among elements s·chunk .. of its row.
	b := newBuilder("argtopk", caps)
	rc.b = b
	x := b.Buffer("x", StorageType(xd), codegen.ReadOnly)
	var y *codegen.Buffer
	if split == 1 {
		y = b.Buffer("y", codegen.I32, codegen.WriteOnly)
	} else {
		y = b.Buffer("partial", codegen.U32, codegen.WriteOnly) // (key, index) pairs
	}
	WalkRows(b, c, rows*split, func(w *RowWalk) {
		row, s := b.Div(w.Row, b.U32(uint32(split))), b.Rem(w.Row, b.U32(uint32(split)))
		lo := b.Mul(s, b.U32(uint32(chunk)))
		elem := func(cand codegen.Value) codegen.Value { return b.Add(lo, cand) }
		in := func(cand codegen.Value) codegen.Value { return b.Lt(elem(cand), b.U32(uint32(n))) }
		key := func(cand codegen.Value) codegen.Value {
			// Past the row's end (its last part may be short) the index says "none" and the key
			// is not looked at; the load is clamped inside the row.
			e := b.Select(in(cand), elem(cand), b.U32(uint32(n-1)))
			return rc.key(LoadAs(b, x, b.Add(b.Mul(row, b.U32(uint32(n))), e), xd), 0xffffffff)
		}
		index := func(cand codegen.Value) codegen.Value { return b.Select(in(cand), elem(cand), b.U32(0xffffffff)) }
		selectTopK(b, w, chunk, k, topkArgmax(b, w, c), key, index, func(t, wk, wi codegen.Value) {
			if split == 1 {
				b.Store(y, b.Add(b.Mul(w.Row, b.U32(uint32(k))), t), b.Bitcast(wi, codegen.I32))
				return
			}
			at := b.Mul(b.Add(b.Mul(w.Row, b.U32(uint32(k))), t), b.U32(2))
			b.Store(y, at, wk)
			b.Store(y, b.Add(at, b.U32(1)), wi)
		})
	})
	kern, spec, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	l := &Launch{Flops: float64(rows * n * k), Bytes: tensorBytes(p.Args, p.Outs)}
	if l.Steps, l.Scratch = topkFirstStep(p, kern, spec, c, caps, rows, split, k); split == 1 {
		return l, nil
	}

	// Step 2: each row selects its k among its parts' split·k candidates.
	b = newBuilder("argtopk_merge", caps)
	part := b.Buffer("partial", codegen.U32, codegen.ReadOnly)
	y = b.Buffer("y", codegen.I32, codegen.WriteOnly)
	WalkRows(b, c, rows, func(w *RowWalk) {
		base := b.Mul(w.Row, b.U32(uint32(split*k)))
		at := func(cand codegen.Value) codegen.Value { return b.Mul(b.Add(base, cand), b.U32(2)) }
		key := func(cand codegen.Value) codegen.Value { return b.Load(part, at(cand)) }
		index := func(cand codegen.Value) codegen.Value { return b.Load(part, b.Add(at(cand), b.U32(1))) }
		selectTopK(b, w, split*k, k, topkArgmax(b, w, c), key, index, func(t, _, wi codegen.Value) {
			b.Store(y, b.Add(b.Mul(w.Row, b.U32(uint32(k))), t), b.Bitcast(wi, codegen.I32))
		})
	})
	kern2, spec2, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	l.Steps = append(l.Steps, Step{Kernel: kern2, Spec: spec2, Grid: RowGrid(rows, c, caps), Bindings: []Operand{{Scratch, 0}, {Out, 0}},
		Scale: rowScale(p, p.Rows.Out(0), rows, c)})
	return l, nil
}

func buildTakeAlong(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptTakeAlong(p, caps); err != nil {
		return nil, err
	}
	x, idx, out := p.Args[0], p.Args[1], p.Outs[0]
	n := x.Shape[x.Shape.Rank()-1]
	k := idx.Shape[idx.Shape.Rank()-1]
	total := out.Shape.NumElements()
	b := newBuilder("take_along_axis", caps)
	xb := b.Buffer("x", StorageType(x.DType), codegen.ReadOnly)
	ib := b.Buffer("idx", StorageType(idx.DType), codegen.ReadOnly)
	ob := b.Buffer("y", StorageType(out.DType), codegen.WriteOnly)
	eachFlat(b, c, total, func(q codegen.Value) {
		// Negative i32 indices become large u32s: one unsigned comparison bounds both ends.
		id := b.Bitcast(b.Load(ib, q), codegen.U32)
		v := b.Var("v", b.Const(ComputeType(x.DType), 0))
		b.If(b.Lt(id, b.U32(uint32(n))), func() {
			row := b.Div(q, b.U32(uint32(k)))
			b.Set(v, LoadAs(b, xb, b.Add(b.Mul(row, b.U32(uint32(n))), id), x.DType))
		})
		StoreAs(b, ob, q, b.Get(v), out.DType)
	})
	kern, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: kern, Spec: spec, Grid: flatGrid(total, c, caps), Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Out, 0}},
		Scale: flatScale(p, p.Rows.Out(0), total, c)}
	return &Launch{Steps: []Step{st}, Bytes: 2*float64(out.Bytes()) + float64(idx.Bytes())}, nil
}

// topkFirstStep is an argtopk launch's first dispatch, a workgroup walk over rows·split
// (part) rows: the result itself when split is 1, else each part's k (key, index) candidates
// into scratch 0, which a merge step reads.
func topkFirstStep(p *Problem, kern *codegen.Kernel, spec []uint32, walk Config, caps Caps, rows, split, k int) ([]Step, []int) {
	if split == 1 {
		return []Step{{Kernel: kern, Spec: spec, Grid: RowGrid(rows, walk, caps), Bindings: []Operand{{Arg, 0}, {Out, 0}},
			Scale: rowScale(p, p.Rows.Out(0), rows, walk)}}, nil
	}
	return []Step{{Kernel: kern, Spec: spec, Grid: RowGrid(rows*split, walk, caps), Bindings: []Operand{{Arg, 0}, {Scratch, 0}},
		Scale: rowScale(p, p.Rows.Out(0), rows*split, walk)}}, []int{8 * rows * split * k}
}
