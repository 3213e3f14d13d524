package importer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// archLM is what an architecture adds to decoderLM's Llama graph; its zero value adds nothing.
//
//   - Gemma 2 and 3: the embedding rows scaled (by √d), RMSNorm weights w used as 1 + w where the
//     checkpoint stores them so (transformers'; a GGUF file has the 1 added), RMSNorms of the
//     attention and FFN outputs before the residual adds, a GELU-tanh gated FFN, local layers
//     with a RoPE base of their own, an attention scale of the config's, soft-capped logits.
//   - Phi-3: one projection for q, k and v and one for gate and up, sliced by columns: the forms
//     the merge-linears rule gives other models, so everything below treats them alike.
//   - Mixture of experts (Mixtral, Qwen3-MoE): a router chooses k of E experts per token, each a
//     SwiGLU FFN whose three matrices are stacked over the experts.
type archLM struct {
	embedScale    float64 // 0: none
	embedScaleWhy string  // the comment the model.yaml gives the scale
	normPlusOne   bool    // RMSNorm weights are used as 1 + w
	postNorms     bool    // post_attn_norm and post_mlp_norm
	act           string  // the gated FFN's activation: "" (silu) or "gelu_tanh"
	attnScale     float64 // 0: 1/sqrt(hd)
	// layerRope gives the layers whose RoPE base and scaling are not the model's.
	layerRope             map[int]layerRope
	fusedQKV, fusedGateUp bool
	finalSoftcap          float64 // 0: none
	moe                   *moeFFN
	// wideAct: the residual stream exceeds f16's range (Gemma's: the embedding is scaled by
	// √d and its norms' outputs are added unscaled), so its activations must stay f32 whatever
	// a precision option asks (every activation is f32 today).
	wideAct bool
}

type layerRope struct {
	theta   float64
	scaling ir.RopeScaling
}

// moeFFN is a mixture-of-experts FFN: experts SwiGLU FFNs of width ffn, used of them per token,
// routed with norm (ir.MoeNormRenorm or ir.MoeNormNone).
type moeFFN struct {
	experts, used, ffn int
	norm               string
}

// dims writes the dimensions the architecture adds.
func (a *archLM) dims(w func(string, ...any)) {
	if e := a.moe; e != nil {
		w("  experts: %d\n  experts_used: %d\n  ffn_exp: %d\n", e.experts, e.used, e.ffn)
	}
}

// ffnParams are the FFN's parameters.
func (a *archLM) ffnParams() []lmParam {
	switch {
	case a.moe != nil:
		return []lmParam{
			{"layers.{i}.router", []string{"experts", "d"}, true},
			{"layers.{i}.w_gate_exps", []string{"experts", "ffn_exp", "d"}, true},
			{"layers.{i}.w_up_exps", []string{"experts", "ffn_exp", "d"}, true},
			{"layers.{i}.w_down_exps", []string{"experts", "d", "ffn_exp"}, true},
		}
	case a.fusedGateUp:
		return []lmParam{
			{"layers.{i}.w_gate_up", []string{"2*ffn", "d"}, true},
			{"layers.{i}.w_down", []string{"d", "ffn"}, true},
		}
	}
	return []lmParam{
		{"layers.{i}.w_gate", []string{"ffn", "d"}, true},
		{"layers.{i}.w_up", []string{"ffn", "d"}, true},
		{"layers.{i}.w_down", []string{"d", "ffn"}, true},
	}
}

// ffn writes the statements the FFN needs before its result (of h, the normalised x) and
// returns the result's expression.
func (a *archLM) ffn(w func(string, ...any)) string {
	act := "silu"
	if a.act != "" {
		act = a.act
	}
	switch {
	case a.moe != nil:
		w("        # %d of %d experts per token, their weights %s\n", a.moe.used, a.moe.experts, map[string]string{
			ir.MoeNormRenorm: "the softmax over the chosen router logits",
			ir.MoeNormNone:   "their probabilities of the softmax over all router logits"}[a.moe.norm])
		w("        - ids, wts = moe_route(linear(h, layers.{i}.router), k=experts_used, norm=%s)\n", a.moe.norm)
		w("        - g = moe_linear(h, layers.{i}.w_gate_exps, ids)\n")
		w("        - u = moe_linear(h, layers.{i}.w_up_exps, ids)\n")
		return fmt.Sprintf("moe_sum(moe_linear(mul(%s(g), u), layers.{i}.w_down_exps, ids), wts)", act)
	case a.fusedGateUp:
		// One projection whose output rows are the gate, then the up projection.
		w("        - gu = linear(h, layers.{i}.w_gate_up)\n")
		return fmt.Sprintf("linear(mul(%s(slice(gu, axis=-1, start=0, end=ffn)), slice(gu, axis=-1, start=ffn, end=2*ffn)), layers.{i}.w_down)", act)
	}
	return fmt.Sprintf("linear(mul(%s(linear(h, layers.{i}.w_gate)), linear(h, layers.{i}.w_up)), layers.{i}.w_down)", act)
}

// normWeight is the weight expression of an RMSNorm whose parameter is name.
func (a *archLM) normWeight(name string) string {
	if a.normPlusOne {
		return fmt.Sprintf("add(%s, 1)", name)
	}
	return name
}

// attnScaleExpr is attention's scale attribute.
func (a *archLM) attnScaleExpr() string {
	if a.attnScale == 0 {
		return "1/sqrt(hd)"
	}
	return fmtFloat(a.attnScale)
}

// stacked lists the tensors a parameter's name stands for: itself, or with {j} (a stacked
// parameter, one tensor per expert) one name per expert.
func (a *archLM) stacked(name string) []string {
	if !strings.Contains(name, "{j}") || a.moe == nil {
		return []string{name}
	}
	out := make([]string, a.moe.experts)
	for j := range out {
		out[j] = strings.ReplaceAll(name, "{j}", strconv.Itoa(j))
	}
	return out
}
