package ir

import "fmt"

// Fused ops: single ops that the rewrite rules introduce for patterns a kernel can do in one pass.
// Each is defined by its composition (written next to it); the interpreter evaluates them that
// way, and a rule that introduces one is checked by evaluating both sides. Elementwise chains are
// not fused here: kernel templates splice them into their neighbours as prologues and epilogues.
const (
	// AddRMSNorm(a, b, w) has two outputs: s = a + b and rmsnorm(s, w) (the residual stream and
	// the normalised input of the next block, in one pass over the row).
	AddRMSNorm Op = numBaseOps + iota
	// RMSNormLinear(x, g, W) = linear(rmsnorm(x, g), W): the matmul normalises its rows as it
	// loads them. With act=DTYPE it is linear(cast(rmsnorm(x, g), to=DTYPE), W): the product
	// reads the normalised rows in DTYPE (f16 activations into an f16 or block-quantized
	// weight's product, while x, the residual stream, stays f32), and the result is DTYPE.
	RMSNormLinear
	// RopeNorm(x, w, pos) = rope(rmsnorm(x, w), pos): Qwen3's per-head QK-norm followed by RoPE.
	RopeNorm
	// RopeCacheWrite(state, x, pos) = cache_write(state, rope(x, pos), pos): keys are rotated
	// as they are written into the cache.
	RopeCacheWrite
	// MoeLinearSum(x, W, ids, w) = moe_sum(moe_linear(x, W, ids), w): an MoE layer's down
	// projection sums its k experts' rows with the routing weights as it computes them.
	MoeLinearSum
	// MoeGLU(x, Wg, Wu, ids) = mul(act(moe_linear(x, Wg, ids)), moe_linear(x, Wu, ids)) with act
	// silu, gelu_tanh or gelu: an MoE layer's gated gate and up projections of each chosen expert
	// in one pass over x.
	MoeGLU

	numOps
)

func init() {
	eps := AttrSpec{Name: "eps", Kind: AttrFloat, Default: 1e-5}
	ropeAttrs := append([]AttrSpec{{Name: "theta", Kind: AttrFloat, Default: 10000.0}, {Name: "mode", Kind: AttrString, Default: "half"},
		{Name: "seq_axis", Kind: AttrInt, Default: 0}}, ropeScalingAttrs...) // as rope's
	def(AddRMSNorm, OpInfo{Name: "add_rmsnorm", Kind: KindNorm, MinArgs: 3, MaxArgs: 3, Fused: true, Attrs: []AttrSpec{eps},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if !args[0].Equal(args[1]) {
				return nil, fmt.Errorf("a %s and b %s must have one type", args[0], args[1])
			}
			out, err := normInfer([]Type{args[0], args[2]})
			if err != nil {
				return nil, err
			}
			return []Type{out[0], out[0]}, nil
		}})
	def(RMSNormLinear, OpInfo{Name: "rmsnorm_linear", Kind: KindMatmul, MinArgs: 3, MaxArgs: 3, Fused: true,
		Attrs: []AttrSpec{eps, {Name: "act", Kind: AttrString}}, WeightArgs: []int{2},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if _, err := normInfer(args[:2]); err != nil {
				return nil, err
			}
			x := args[0]
			if s := a.String("act", ""); s != "" {
				d, err := ParseDType(s)
				if err != nil || !d.IsFloat() {
					return nil, fmt.Errorf("act must be a float dtype, got %q", s)
				}
				x.DType = d
			}
			return linearInfer(a, []Type{x, args[2]})
		}})
	def(RopeNorm, OpInfo{Name: "rope_norm", Kind: KindOther, MinArgs: 3, MaxArgs: 3, Fused: true,
		Attrs: append([]AttrSpec{eps}, ropeAttrs...),
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if _, err := normInfer(args[:2]); err != nil {
				return nil, err
			}
			return opTable[Rope].infer(a, []Type{args[0], args[2]})
		}})
	def(RopeCacheWrite, OpInfo{Name: "rope_cache_write", Kind: KindOther, MinArgs: 3, MaxArgs: 3, Fused: true, CacheArgs: []int{0},
		Attrs: append(append([]AttrSpec(nil), ropeAttrs[:2]...), ropeScalingAttrs...), // no seq_axis: rows along axis 0
		infer: func(a Attrs, args []Type) ([]Type, error) {
			ra := a.Clone()
			ra["seq_axis"] = 0
			if _, err := opTable[Rope].infer(ra, []Type{args[1], args[2]}); err != nil {
				return nil, err
			}
			return opTable[CacheWrite].infer(a, args)
		}})
	def(MoeLinearSum, OpInfo{Name: "moe_linear_sum", Kind: KindOther, MinArgs: 4, MaxArgs: 4, Fused: true, WeightArgs: []int{1},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			y, err := moeLinearInfer(args[:3])
			if err != nil {
				return nil, err
			}
			return opTable[MoeSum].infer(a, []Type{y[0], args[3]})
		}})
	def(MoeGLU, OpInfo{Name: "moe_glu", Kind: KindOther, MinArgs: 4, MaxArgs: 4, Fused: true, WeightArgs: []int{1, 2},
		Attrs: []AttrSpec{{Name: "act", Kind: AttrString, Default: "silu"}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if act := a.String("act", "silu"); act != "silu" && act != "gelu_tanh" && act != "gelu" {
				return nil, fmt.Errorf("act must be silu, gelu_tanh or gelu, got %q", act)
			}
			g, err := moeLinearInfer([]Type{args[0], args[1], args[3]})
			if err != nil {
				return nil, fmt.Errorf("gate: %w", err)
			}
			u, err := moeLinearInfer([]Type{args[0], args[2], args[3]})
			if err != nil {
				return nil, fmt.Errorf("up: %w", err)
			}
			if !g[0].Equal(u[0]) {
				return nil, fmt.Errorf("the gate gives %s, the up projection %s", g[0], u[0])
			}
			return g, nil
		}})
}
