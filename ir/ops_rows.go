package ir

import (
	"fmt"
	"math"
)

// The ops of batched steps over several sequences (--parallel): a state with a slot dimension,
// [slots, ctx, ...] (one KV cache per sequence), and rows that each belong to a sequence (slot)
// at a position. A batched decode step advances one row per sequence; a prefill chunk of one
// sequence is rows of one slot at consecutive positions; a step may mix both. The rows are the
// leading axis of x and q and of the i32 vectors slot and pos, so a function written with them
// takes a run-time number of rows like a prefill (dims: {seq: 1..N}).
//
//	rope_rows(x [n, ..., d], pos i32[n])       row r rotated by pos[r]·theta^(-2i/d) (rope's
//	                                           modes and scalings; rope's pos + r becomes pos[r])
//	cache_scatter(state [S, ctx, ...], x [n, ...], slot i32[n], pos i32[n])
//	                                           state with state[slot[r], pos[r]] = x[r]; two rows
//	                                           naming one cell are an error; the rows are
//	                                           converted to the state's dtype as cache_write's
//	                                           (a 16-bit float, q8_0 or q4_0 cache)
//	attention_rows(q [n, hq, d], k [S, ctx, hkv, d], v [S, ctx, hkv, dv], slot i32[n], pos i32[n])
//	                                           row r attends keys 0..pos[r] of sequence slot[r]
//	                                           (causal at position pos[r]; window w > 0 keeps
//	                                           keys pos[r]-w+1..pos[r]); grouped-query heads
//	                                           as attention's, scale defaults to 1/√d; k and v
//	                                           may be of another dtype than q (f16, q8_0, q4_0)
//
// A step writes its rows' keys and values (cache_scatter) before it attends (attention_rows
// reads the updated cache), so a row sees the rows of its own sequence that come before it in
// the same step.
func init() {
	def(RopeRows, OpInfo{Name: "rope_rows", Kind: KindOther, MinArgs: 2, MaxArgs: 2,
		Attrs: append([]AttrSpec{{Name: "theta", Kind: AttrFloat, Default: 10000.0}, {Name: "mode", Kind: AttrString, Default: "half"}},
			ropeScalingAttrs...),
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x, pos := args[0], args[1]
			if !x.DType.IsFloat() {
				return nil, fmt.Errorf("x must be float, got %s", x)
			}
			if x.Shape.Rank() < 2 || x.Shape[x.Shape.Rank()-1]%2 != 0 {
				return nil, fmt.Errorf("x must have rows and an even last axis, got %s", x)
			}
			if err := checkRowInts("pos", pos, x.Shape[0]); err != nil {
				return nil, err
			}
			if m := a.String("mode", "half"); m != "half" && m != "interleaved" {
				return nil, fmt.Errorf("mode must be half or interleaved, got %q", m)
			}
			if th := a.Float("theta", 10000); !(th > 0) || math.IsInf(th, 0) {
				return nil, fmt.Errorf("theta must be positive, got %v", th)
			}
			if _, err := RopeScalingOf(a); err != nil {
				return nil, err
			}
			return one(x), nil
		}})
	def(CacheScatter, OpInfo{Name: "cache_scatter", Kind: KindOther, MinArgs: 4, MaxArgs: 4, CacheArgs: []int{0},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			st, x := args[0], args[1]
			// The rows are converted to the cache's dtype as cache_write converts them:
			// rounded to a 16-bit cache, quantized block by block to a q8_0 or q4_0 one.
			if !x.DType.IsFloat() && st.DType != x.DType {
				return nil, fmt.Errorf("cache %s and rows %s differ in dtype (rows of another dtype must be float)", st, x)
			}
			if st.DType != x.DType && !st.DType.CacheFormat() {
				return nil, fmt.Errorf("float rows %s cannot be written to a %s cache", x, st.DType)
			}
			if st.Shape.Rank() < 3 || x.Shape.Rank() != st.Shape.Rank()-1 || !st.Shape[2:].Equal(x.Shape[1:]) {
				return nil, fmt.Errorf("rows %s do not fit cache %s ([slots, ctx, ...] and [rows, ...] with the same trailing dims)", x, st)
			}
			for i, name := range []string{"slot", "pos"} {
				if err := checkRowInts(name, args[2+i], x.Shape[0]); err != nil {
					return nil, err
				}
			}
			return one(st), nil
		}})
	def(AttentionRows, OpInfo{Name: "attention_rows", Kind: KindOther, MinArgs: 5, MaxArgs: 5, CacheArgs: []int{1, 2},
		Attrs: []AttrSpec{{Name: "scale", Kind: AttrFloat}, {Name: "window", Kind: AttrInt, Default: 0}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			q, k, v := args[0], args[1], args[2]
			if q.Shape.Rank() != 3 || k.Shape.Rank() != 4 || v.Shape.Rank() != 4 {
				return nil, fmt.Errorf("want q [rows, heads, d] and k, v [slots, ctx, kv_heads, d], got %s, %s, %s", q, k, v)
			}
			// k and v share a dtype, float or a block-quantized cache's; q's may differ (f32
			// queries over an f16 cache), and is the result's.
			if !q.DType.IsFloat() || k.DType != v.DType || !k.DType.IsFloat() && !k.DType.CacheFormat() {
				return nil, fmt.Errorf("want float q and k, v of one dtype (float, or a q8_0/q4_0 cache), got %s, %s, %s", q, k, v)
			}
			if k.Shape[3] != q.Shape[2] || v.Shape[0] != k.Shape[0] || v.Shape[1] != k.Shape[1] || v.Shape[2] != k.Shape[2] {
				return nil, fmt.Errorf("q %s, k %s, v %s do not agree", q, k, v)
			}
			if hk := k.Shape[2]; hk == 0 || q.Shape[1]%hk != 0 {
				return nil, fmt.Errorf("%d query heads are not a multiple of %d key/value heads", q.Shape[1], hk)
			}
			if a.Int("window", 0) < 0 {
				return nil, fmt.Errorf("window must be ≥ 0")
			}
			for i, name := range []string{"slot", "pos"} {
				if err := checkRowInts(name, args[3+i], q.Shape[0]); err != nil {
					return nil, err
				}
			}
			return one(Type{q.DType, Shape{q.Shape[0], q.Shape[1], v.Shape[3]}}), nil
		}})
}

// checkRowInts checks a per-row integer operand: i32 or u32 of shape [rows].
func checkRowInts(name string, t Type, rows int) error {
	if !t.DType.IsInt() || t.Shape.Rank() != 1 || t.Shape[0] != rows {
		return fmt.Errorf("%s must be i32[%d] (one per row), got %s", name, rows, t)
	}
	return nil
}
