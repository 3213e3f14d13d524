package ir

import "fmt"

// Mixture-of-experts ops. A layer of E experts routes each row (token) to k of them:
//
//	ids, w = moe_route(linear(h, router), k=2, norm=renorm)   # i32[n, k], f32[n, k]
//	g = moe_linear(h, w_gate_exps, ids)                        # [n, k, ffn]: expert ids[t, j] on row t
//	u = moe_linear(h, w_up_exps, ids)
//	o = moe_linear(mul(silu(g), u), w_down_exps, ids)          # [n, k, d]: slot j reads row (t, j)
//	x = add(x, moe_sum(o, w))                                  # Σ_j w[t, j]·o[t, j, :]
//
// The experts' weights are one stacked parameter [E, out, in] (GGUF's ffn_*_exps), block-quantized
// or not; moe_linear reads only the k matrices a row chose.

// MoE routing normalisations (moe_route's norm attribute).
const (
	// MoeNormRenorm: the softmax over all E logits, the k chosen renormalised to sum to 1, which
	// is the softmax over the k chosen logits (Mixtral; Qwen3-MoE with norm_topk_prob, and
	// llama.cpp's qwen3moe always).
	MoeNormRenorm = "renorm"
	// MoeNormNone: the k chosen keep their probability of the softmax over all E (Qwen2-MoE,
	// Qwen3-MoE with norm_topk_prob false in transformers).
	MoeNormNone = "none"
)

func init() {
	def(MoeRoute, OpInfo{Name: "moe_route", Kind: KindOther, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "k", Kind: AttrInt, Required: true}, {Name: "norm", Kind: AttrString, Default: MoeNormRenorm}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x := args[0]
			if !x.DType.IsFloat() {
				return nil, fmt.Errorf("the router logits must be float, got %s", x)
			}
			if x.Shape.Rank() == 0 {
				return nil, fmt.Errorf("the router logits need an axis of experts, got the scalar %s", x)
			}
			e, k := x.Shape[x.Shape.Rank()-1], a.Int("k", 0)
			if k < 1 || k > e {
				return nil, fmt.Errorf("k must be in 1..%d (the experts, the last axis of %s), got %d", e, x, k)
			}
			if nm := a.String("norm", MoeNormRenorm); nm != MoeNormRenorm && nm != MoeNormNone {
				return nil, fmt.Errorf("norm must be %s or %s, got %q", MoeNormRenorm, MoeNormNone, nm)
			}
			s := x.Shape.Clone()
			s[len(s)-1] = k
			return []Type{{I32, s}, {x.DType, s.Clone()}}, nil
		}})
	def(MoeLinear, OpInfo{Name: "moe_linear", Kind: KindOther, MinArgs: 3, MaxArgs: 3, WeightArgs: []int{1},
		infer: func(a Attrs, args []Type) ([]Type, error) { return moeLinearInfer(args) }})
	def(MoeSum, OpInfo{Name: "moe_sum", Kind: KindOther, MinArgs: 2, MaxArgs: 2,
		infer: func(a Attrs, args []Type) ([]Type, error) {
			y, w := args[0], args[1]
			if !y.DType.IsFloat() || y.DType != w.DType {
				return nil, fmt.Errorf("y %s and the weights %s must share a float dtype", y, w)
			}
			if y.Shape.Rank() != 3 || w.Shape.Rank() != 2 || y.Shape[0] != w.Shape[0] || y.Shape[1] != w.Shape[1] {
				return nil, fmt.Errorf("want y [n, k, d] and weights [n, k], got %s and %s", y, w)
			}
			return []Type{{y.DType, Shape{y.Shape[0], y.Shape[2]}}}, nil
		}})
}

// moeLinearInfer checks moe_linear(x, W, ids): W [E, out, in], ids int [n, k], x [n, in] (every
// slot of a row reads the row) or [n, k, in] (slot j reads its own row); the result is
// [n, k, out] in x's dtype.
func moeLinearInfer(args []Type) ([]Type, error) {
	x, w, ids := args[0], args[1], args[2]
	if w.Shape.Rank() != 3 {
		return nil, fmt.Errorf("the experts' weights must be [experts, out, in], got %s", w)
	}
	if !x.DType.IsFloat() || !w.DType.IsFloat() && !w.DType.Quantized() {
		return nil, fmt.Errorf("x and the weights must be float, got %s and %s", x, w)
	}
	if !ids.DType.IsInt() || ids.Shape.Rank() != 2 {
		return nil, fmt.Errorf("the expert ids must be i32 [n, k], got %s", ids)
	}
	n, k, in := ids.Shape[0], ids.Shape[1], w.Shape[2]
	switch {
	case x.Shape.Rank() == 2 && x.Shape[0] == n && x.Shape[1] == in:
	case x.Shape.Rank() == 3 && x.Shape[0] == n && x.Shape[1] == k && x.Shape[2] == in:
	default:
		return nil, fmt.Errorf("x %s must be [%d, %d] or [%d, %d, %d] for the ids %s and the weights %s", x, n, in, n, k, in, ids, w)
	}
	return []Type{{x.DType, Shape{n, k, w.Shape[1]}}}, nil
}
