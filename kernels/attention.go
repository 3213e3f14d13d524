package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Attention templates. Both are built by one generator (buildAttnPass): a workgroup takes a block
// of "rows" — (query, query head) pairs that share one key/value head, the query head varying
// fastest, so grouped-query heads read each key and value tile once and nothing is repeated in
// memory — and walks a range of keys in tiles of block_k with an online softmax: scores of the
// tile in shared memory, a running maximum m, sum l and unnormalised output o per row, all in
// shared memory. (o lived in registers first, block_r·dv/wg elements unrolled per invocation:
// at dv = 64 lavapipe's JIT took over ten seconds on the kernel, so it moved to shared memory,
// which costs two shared accesses per element and key tile against 2·block_k for the product.)
//
//   - AttentionFlash (prefill): the range is every key the block's rows may see; the pass writes
//     o/l to the result.
//   - AttentionSplit (decode, few rows, long cache): the keys are cut into `splits` ranges, one
//     workgroup per (range, key/value head) writes (m, l, o) of its rows to a scratch buffer, and
//     a second step combines the ranges of each row. A range entirely outside the keys its rows
//     may see (at or past kv_len, before a window, after a causal limit) returns at once.
//
// Where a workgroup walks several key tiles, the next one is loaded into registers while the
// current one is computed.
//
// Masks follow ir: query i sits at position p = kv_len - sq + i; key j is seen iff j < kv_len,
// and j ≤ p when causal, and p - window < j ≤ p when window > 0. kv_len is read from its i32
// operand at run time (clamped to 0..skv, so a bad value cannot read outside the cache); the
// grid is fixed and sized for every key.

// attn is an attention problem's geometry.
type attn struct {
	sq, hq, d, skv, hkv, dv int
	group                   int // query heads per key/value head
	lay                     ir.AttnLayouts
	causal                  bool
	window                  int
	scale                   float64
	kvLen                   bool     // kv_len is an operand (Args[3])
	dt                      ir.DType // q's (and the result's before an epilogue)
	kvt                     ir.DType // k's and v's (a KV cache's: may differ from q's)
	opType                  ir.Type
}

// rows is the number of (query, head) rows per key/value head.
func (a *attn) rows() int { return a.sq * a.group }

func readAttn(p *Problem) (*attn, error) {
	if p.Op != ir.Attention {
		return nil, ErrOtherOp
	}
	nop := opArgs(p)
	if nop > len(p.Args) {
		return nil, fmt.Errorf("problem has %d op arguments of %d", nop, len(p.Args))
	}
	args := p.Args[:nop]
	attrs, outs, err := ir.Infer(p.Op, p.Attrs, args)
	if err != nil {
		return nil, err
	}
	a := &attn{lay: ir.AttentionLayouts(attrs), causal: attrs.Bool("causal", false),
		window: attrs.Int("window", 0), kvLen: nop == 4, dt: args[0].DType, kvt: args[1].DType, opType: outs[0]}
	a.sq, a.hq, a.d = ir.LayoutDims(a.lay.Q, args[0].Shape)
	a.skv, a.hkv, _ = ir.LayoutDims(a.lay.K, args[1].Shape)
	_, _, a.dv = ir.LayoutDims(a.lay.V, args[2].Shape)
	a.group = a.hq / a.hkv
	a.scale = attrs.Float("scale", 1/math.Sqrt(float64(a.d)))
	return a, nil
}

// at is the element index of (seq s, head h, feature f) in a tensor of ns × nh × nf in
// layout l (one of a.lay's: each operand is read in its own).
func (a *attn) at(b *codegen.Builder, l string, s, h, f codegen.Value, ns, nh, nf int) codegen.Value {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	switch l {
	case "hsd":
		return b.Add(b.Mul(b.Add(b.Mul(h, u(ns)), s), u(nf)), f)
	case "hds":
		return b.Add(b.Mul(b.Add(b.Mul(h, u(nf)), f), u(ns)), s)
	}
	return b.Add(b.Mul(b.Add(b.Mul(s, u(nh)), h), u(nf)), f)
}

func acceptAttn(p *Problem, caps Caps) (*attn, error) {
	a, err := readAttn(p)
	if err != nil {
		return nil, err
	}
	if a.kvt.Quantized() && a.lay.K == "hds" {
		return nil, fmt.Errorf("k_layout hds (K transposed) of a %s cache: blocks run along the features, which K transposed does not keep together", a.kvt)
	}
	if a.kvt.Quantized() {
		// A block-quantized KV cache (q8_0, q4_0): the passes dequantize K and V tiles as
		// they load them (quantRows), from the table's layout.
		if !readsBlocks(a.kvt) {
			return nil, fmt.Errorf("kernels do not read %s blocks", a.kvt)
		}
		for i := 0; i < len(p.Args); i++ {
			if (i == 1 || i == 2) && p.Args[i].DType == a.kvt {
				continue
			}
			if err := checkDTypesOf(p.Args[i], caps); err != nil {
				return nil, err
			}
		}
		for _, t := range p.Outs {
			if err := checkDTypesOf(t, caps); err != nil {
				return nil, err
			}
		}
	} else if err := checkDTypes(p, caps); err != nil {
		return nil, err
	}
	if err := checkEpilogue(p, a.opType); err != nil {
		return nil, err
	}
	if a.hkv > caps.MaxGroups[1] {
		return nil, fmt.Errorf("%d key/value heads exceed the device's %d workgroups in y", a.hkv, caps.MaxGroups[1])
	}
	return a, nil
}

// lengthBuffers declares the attention kernels' scalar inputs after binds: the kv_len argument
// when the problem has one, the run-time length n when the op reads it (nil where absent).
func (a *attn) lengthBuffers(b *codegen.Builder, p *Problem, binds []Operand) (lenBuf, nBuf *codegen.Buffer, _ []Operand) {
	if a.kvLen {
		lenBuf = b.Buffer("kv_len", StorageType(p.Args[3].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, 3})
	}
	if readsLength(p) {
		nBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
		binds = append(binds, Operand{Len, 0})
	}
	return lenBuf, nBuf, binds
}

// buildAttnCombine builds the split template's second step: for each output element, the
// (m, l, o) of every key range its row sees are merged. Bindings: [kv_len], scratch, the
// epilogue's inputs, the result.
func buildAttnCombine(p *Problem, a *attn, splits, wg int, caps Caps) (*codegen.Kernel, []Operand, int, error) {
	b := newBuilder("attention_combine", caps)
	lenBuf, nBuf, binds := a.lengthBuffers(b, p, nil)
	scratch := b.Buffer("partial", codegen.F32, codegen.ReadOnly)
	binds = append(binds, Operand{Scratch, 0})
	epi, eb := declareEpilogue(b, p, a.opType)
	binds = append(binds, eb...)
	b.WorkgroupSize(b.U32(uint32(wg)), b.U32(1), b.U32(1))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	T := a.rows()
	n := a.hkv * T * a.dv
	e := b.Add(b.Mul(LinearGroup(b), u(wg)), b.X(b.LocalID()))
	b.If(b.Ge(e, u(n)), b.Return)
	f := b.Rem(e, u(a.dv))
	t := b.Rem(b.Div(e, u(a.dv)), u(T))
	kh := b.Div(e, u(a.dv*T))
	kvlen := u(a.skv)
	if a.kvLen {
		kvlen = b.Convert(b.Min(b.Max(b.Convert(b.Load(lenBuf, u(0)), codegen.I32), b.I32(0)), b.I32(int32(a.skv))), codegen.U32)
	}
	combineElem(b, a, splits, scratch, epi, kvlen, queries(b, p, a, nBuf), kh, t, f)
	k, err := b.Finish()
	if err != nil {
		return nil, nil, 0, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, nil, 0, err
	}
	return k, binds, ceilDiv(n, wg), nil
}

// combineElem merges, for output element (row t of key/value head kh, feature f), the (m, l, o)
// that each key range the row sees left in scratch, and stores o/l through epi. kvlen is the keys
// seen (u32), qlen the queries (i32): query i sits at kv_len − qlen + i.
func combineElem(b *codegen.Builder, a *attn, splits int, scratch *codegen.Buffer, epi *epilogue, kvlen, qlen, kh, t, f codegen.Value) {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	T := a.rows()
	i, h := b.Div(t, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(t, u(a.group)))
	i32 := func(x codegen.Value) codegen.Value { return b.Convert(x, codegen.I32) }
	p0 := b.Add(b.Sub(i32(kvlen), qlen), i32(i))
	lo, hi := b.I32(0), i32(kvlen)
	if a.causal || a.window > 0 {
		hi = b.Min(hi, b.Add(p0, b.I32(1)))
	}
	if a.window > 0 {
		lo = b.Max(lo, b.Add(b.Sub(p0, b.I32(int32(a.window))), b.I32(1)))
	}
	chunk := splitChunk(b, a, splits, kvlen)
	negInf := b.F32(float32(math.Inf(-1)))
	// Unrolled over the ranges, every load issued first (from row 0 where a range is not
	// read): a loop waited out the memory latency once per range.
	ms, ls, os := make([]codegen.Value, splits), make([]codegen.Value, splits), make([]codegen.Value, splits)
	on := make([]codegen.Value, splits)
	for z := 0; z < splits; z++ {
		ks := b.Mul(b.I32(int32(z)), chunk)
		ke := b.Add(ks, chunk)
		on[z] = b.Lt(b.Max(ks, lo), b.Min(ke, hi))
		base := b.Select(on[z], b.Mul(b.Add(b.Mul(b.Add(u(z*a.hkv), kh), u(T)), t), u(a.dv+2)), u(0))
		ms[z], ls[z], os[z] = b.Load(scratch, base), b.Load(scratch, b.Add(base, u(1))), b.Load(scratch, b.Add(base, b.Add(f, u(2))))
	}
	M := negInf
	for z := range ms {
		M = b.Max(M, b.Select(on[z], ms[z], negInf))
	}
	L, O := b.F32(0), b.F32(0)
	for z := range ms {
		// Selected, not multiplied by 0: an unread range's scratch may hold anything, NaN too.
		c := b.Exp(b.Sub(ms[z], M))
		L = b.Add(L, b.Select(on[z], b.Mul(ls[z], c), b.F32(0)))
		O = b.Add(O, b.Select(on[z], b.Mul(os[z], c), b.F32(0)))
	}
	epi.store(b, a.at(b, a.lay.Q, i, h, f, a.sq, a.hq, a.dv), b.Div(O, L))
}

// splitChunk is the keys of each of splits key ranges (i32): the cache's keys cut evenly, or,
// where kv_len is an operand, the keys seen, kvlen (u32), cut evenly, so that every range has
// work at every position: a decode step at position 127 of a 1024-key cache in 16 ranges of 64
// ran 2 of them, 16 workgroups of Llama-3.2-1B's 128, at 17 µs a layer on the H200
// (docs/bench/h200-2026-12-05, call 8).
func splitChunk(b *codegen.Builder, a *attn, splits int, kvlen codegen.Value) codegen.Value {
	if !a.kvLen || splits == 1 {
		return b.I32(int32(ceilDiv(a.skv, splits)))
	}
	return b.Convert(b.Div(b.Add(kvlen, b.U32(uint32(splits-1))), b.U32(uint32(splits))), codegen.I32)
}

// attnFits: the tiles fit in shared memory and the workgroup in the device.
func attnFits(rows func(a *attn, c Config) int) Predicate {
	return func(p *Problem, c Config, caps Caps) error {
		a, err := readAttn(p)
		if err != nil {
			return err
		}
		br, bk, wg := rows(a, c), c["block_k"], c["wg"]
		if wg > caps.MaxInvocations || wg > caps.MaxWorkgroupSize[0] {
			return fmt.Errorf("wg=%d exceeds the device's %d invocations", wg, caps.MaxInvocations)
		}
		if n := attnShared(a, attnPass{br: br, bk: bk, wg: wg}); n > caps.MaxSharedBytes {
			return fmt.Errorf("block %dx%d needs %d bytes of shared memory, the device has %d", br, bk, n, caps.MaxSharedBytes)
		}
		return nil
	}
}

// AttentionFlash is flash attention for prefill: one workgroup per (block of block_r rows, key/
// value head), the rows being (query, grouped query head) pairs; keys in tiles of block_k with an
// online softmax; only the key tiles the block's rows may see (kv_len, causal, window) are read.
// Specialization constants: block_r, block_k, wg. Grid: ceil(sq·group/block_r) × hkv.
var AttentionFlash = &Template{
	Name: "attention_flash",
	Accepts: func(p *Problem, caps Caps) error {
		_, err := acceptAttn(p, caps)
		return err
	},
	Space: NewSpace(Ints("block_r", 32, 16, 64, 8), Ints("block_k", 32, 16, 64, 8), Ints("wg", 128, 64, 256)).
		Where(attnFits(func(a *attn, c Config) int { return c["block_r"] })),
	Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return nil, err
		}
		cfg := attnPass{br: c["block_r"], bk: c["block_k"], wg: c["wg"], splits: 1}
		k, sp, binds, err := buildAttnPass(p, a, cfg, caps)
		if err != nil {
			return nil, err
		}
		grid := [3]uint32{uint32(ceilDiv(a.rows(), cfg.br)), uint32(a.hkv), 1}
		// Row blocks walk (query, head) rows query-major: with a run-time length only the
		// blocks of the run's queries are launched.
		l := &Launch{Steps: []Step{{Kernel: k, Spec: sp, Grid: grid, Bindings: binds,
			Scale: scaleItems(p, p.Rows.Arg(0), 0, a.rows(), cfg.br)}}}
		a.cost(p, l)
		return l, nil
	},
}

// splitStatic is AttentionSplit's static choice on a GPU: 16 ranges of blocks of 32 keys, 256
// invocations, the ranges combined in the same dispatch by the last workgroup of each key/value
// head. On the H100 (docs/bench/h100-2026-12-06, session 9) the space's first point (64
// invocations) took 16.4 µs at Llama-3.1-8B's decode at 512 keys and this one 9.7 (the sweep's
// best 9.4; BenchmarkAttentionDecode8BAt511), at SmolLM2's at 128 keys 9.3 and 8.0 (best 7.2);
// in plans, SmolLM2's decode step at 1000 keys went from 0.988 to 0.950 ms and the 1B Q4_K_M's at
// 512 from 1.267 to 1.228 ms. Points that combine in a second dispatch time as well alone but not
// in a plan: each adds a dispatch and a barrier a layer (SmolLM2's step took 1.001 ms with
// splits=8, wg=128, combine=0). A CPU implementation keeps the space's first point.
func splitStatic(p *Problem, caps Caps) []Config {
	if caps.CPU {
		return nil
	}
	return []Config{{"splits": 16, "block_k": 32, "wg": 256, "combine": 1}}
}

// AttentionSplit is split-key attention for decode: every row of a key/value head (sq·group of
// them, at most maxSplitRows) in one workgroup, the keys cut into `splits` ranges processed in
// parallel (partial (m, l, o) into scratch), then merged: with combine=1 by the last workgroup of
// each key/value head to finish (an arrival count at a Sync word: one dispatch, no barrier level
// of its own), with combine=0 by a second step (one invocation per output element). The tuner
// chooses between them by measurement. Specialization constants of the pass: block_r (= the
// rows), block_k, wg. Grid: 1 × hkv × splits.
var AttentionSplit = &Template{
	Name: "attention_split",
	Accepts: func(p *Problem, caps Caps) error {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return err
		}
		if a.rows() > maxSplitRows {
			return fmt.Errorf("%d rows per key/value head (sq·group); split-key attention takes at most %d", a.rows(), maxSplitRows)
		}
		return nil
	},
	Space: NewSpace(Ints("splits", 16, 8, 32, 4, 64, 2), Ints("block_k", 32, 64, 16, 8), Ints("wg", 64, 128, 256), Ints("combine", 1, 0)).
		Where(attnFits(func(a *attn, c Config) int { return splitRows(a, c["wg"]) })).
		Where(func(p *Problem, c Config, caps Caps) error {
			a, err := readAttn(p)
			if err != nil {
				return err
			}
			if c["splits"] > a.skv {
				return fmt.Errorf("splits=%d exceeds the %d keys", c["splits"], a.skv)
			}
			if c["splits"] > caps.MaxGroups[2] {
				return fmt.Errorf("splits=%d exceeds the device's %d workgroups in z", c["splits"], caps.MaxGroups[2])
			}
			return nil
		}),
	Static: splitStatic,
	Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return nil, err
		}
		cfg := attnPass{br: splitRows(a, c["wg"]), bk: c["block_k"], wg: c["wg"], splits: c["splits"], split: true, inPass: c["combine"] == 1}
		k1, sp, b1, err := buildAttnPass(p, a, cfg, caps)
		if err != nil {
			return nil, err
		}
		scratch := []int{4 * cfg.splits * a.hkv * a.rows() * (a.dv + 2)}
		if cfg.inPass {
			l := &Launch{Steps: []Step{{Kernel: k1, Spec: sp, Grid: [3]uint32{1, uint32(a.hkv), uint32(cfg.splits)}, Bindings: b1}},
				Scratch: scratch, Sync: []int{4 * a.hkv}}
			a.cost(p, l)
			return l, nil
		}
		k2, b2, groups, err := buildAttnCombine(p, a, cfg.splits, 64, caps)
		if err != nil {
			return nil, err
		}
		l := &Launch{
			Steps: []Step{
				{Kernel: k1, Spec: sp, Grid: [3]uint32{1, uint32(a.hkv), uint32(cfg.splits)}, Bindings: b1},
				{Kernel: k2, Grid: Grid1D(groups, caps), Bindings: b2},
			},
			Scratch: scratch,
		}
		a.cost(p, l)
		return l, nil
	},
}

// maxSplitRows bounds the rows one split-key workgroup takes; more rows are better served by the
// flash kernel's parallel row blocks.
const maxSplitRows = 32

func init() {
	// Both place their queries at kv_len − n + i with a run-time length n.
	AttentionFlash.ReadsLength = true
	AttentionSplit.ReadsLength = true
	Register(AttentionFlash)
	Register(AttentionSplit)
}

// readsLength reports whether p's meaning depends on its run-time length (Rows.Reads).
func readsLength(p *Problem) bool { return p.Rows != nil && p.Rows.Reads }

// queries is the number of queries as an i32: sq, or the run-time length n read from nBuf
// (times the query rows per unit of n) when the problem has one. Query i sits at kv_len −
// queries + i.
func queries(b *codegen.Builder, p *Problem, a *attn, nBuf *codegen.Buffer) codegen.Value {
	if nBuf == nil {
		return b.I32(int32(a.sq))
	}
	n := b.Bitcast(b.Load(nBuf, b.U32(0)), codegen.I32)
	if k := a.sq / p.Rows.Max; k != 1 {
		n = b.Mul(n, b.I32(int32(k)))
	}
	return n
}

// cost: two products of sq × skv × d per query head (scores and values), all keys counted.
func (a *attn) cost(p *Problem, l *Launch) {
	l.Flops = 2*float64(a.hq)*float64(a.sq)*float64(a.skv)*float64(a.d+a.dv) +
		float64(a.hq*a.sq*a.dv*epilogueFlops(p))
	l.Bytes = problemBytes(p)
}
