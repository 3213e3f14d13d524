package importer

import (
	"fmt"
	"math"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// archSpecific reads what Gemma 3, Qwen3-MoE and Phi-3 add to the Llama graph, as their
// transformers classes compute it, into the same decoderLM extensions the GGUF front end fills
// (gguf_arch.go), so that both give one model.yaml:
//
//   - Gemma3ForCausalLM (gemma3_text): the embedding times √hidden_size (rounded to the
//     embedding's dtype, as Gemma3TextScaledWordEmbedding does), RMSNorm weights w used as
//     1 + w, post-attention and post-FFN norms, hidden_activation (gelu_pytorch_tanh), the
//     attention scale query_pre_attn_scalar^−½, sliding_window on the layers layer_types calls
//     sliding_attention (or, in older configs, all but every sliding_window_pattern-th) with
//     RoPE base rope_local_base_freq and no scaling, final_logit_softcapping.
//   - Qwen3MoeForCausalLM (qwen3_moe): a mixture of num_experts SwiGLU experts of width
//     moe_intermediate_size, num_experts_per_tok per token, routed by mlp.gate with the chosen
//     weights renormalised iff norm_topk_prob; the experts' tensors (one per expert) stacked.
//   - Phi3ForCausalLM (phi3): the fused qkv_proj and gate_up_proj, columns sliced.
func (h *hfImport) archSpecific(lm *decoderLM, mt string) error {
	switch mt {
	case "gemma3_text":
		return h.gemma3(lm)
	case "qwen3_moe":
		return h.qwen3moe(lm)
	case "phi3":
		lm.arch.fusedQKV, lm.arch.fusedGateUp = true, true
		lm.names["layers.{i}.wqkv"] = "model.layers.{i}.self_attn.qkv_proj.weight"
		lm.names["layers.{i}.w_gate_up"] = "model.layers.{i}.mlp.gate_up_proj.weight"
		h.cfg.has("original_max_position_embeddings") // the context the rope was trained for; no LongRoPE here
		lm.header = append(lm.header, lm.arch.header()...)
	}
	return nil
}

func (h *hfImport) gemma3(lm *decoderLM) error {
	c, a := h.cfg, &lm.arch
	act, err := c.optString("hidden_activation", "gelu_pytorch_tanh")
	if err != nil {
		return err
	}
	switch act {
	case "gelu_pytorch_tanh", "gelu_new", "gelu_tanh":
		a.act = "gelu_tanh"
	case "gelu":
		a.act = "gelu"
	default:
		return fmt.Errorf("hidden_activation is %q: vkc imports Gemma's gelu_pytorch_tanh (or gelu)", act)
	}
	if c.has("hidden_act") {
		h.note("hidden_act is not read: Gemma 3 uses hidden_activation (%s)", act)
	}
	for _, k := range []string{"attn_logit_softcapping"} {
		if v, err := c.optFloat(k, 0); err != nil {
			return err
		} else if v != 0 {
			return fmt.Errorf("%s is %v: attention soft-capping is not supported", k, v)
		}
	}
	if bi, err := c.optBool("use_bidirectional_attention", false); err != nil {
		return err
	} else if bi {
		return fmt.Errorf("use_bidirectional_attention is true (an embedding model): vkc imports causal language models")
	}
	if a.finalSoftcap, err = c.optFloat("final_logit_softcapping", 0); err != nil {
		return err
	}
	a.embedScale = math.Sqrt(float64(lm.d))
	a.embedScaleWhy = fmt.Sprintf("sqrt(hidden_size %d) in the embedding's dtype, as Gemma3TextScaledWordEmbedding", lm.d)
	a.normPlusOne, a.postNorms, a.wideAct = true, true, true
	qs, err := c.optFloat("query_pre_attn_scalar", float64(lm.hd))
	if err != nil {
		return err
	}
	if !(qs > 0) {
		return fmt.Errorf("query_pre_attn_scalar is %v", qs)
	}
	if qs != float64(lm.hd) {
		a.attnScale = 1 / math.Sqrt(qs)
	}
	for k, v := range map[string]string{
		"layers.{i}.post_attn_norm": "model.layers.{i}.post_attention_layernorm.weight",
		"layers.{i}.mlp_norm":       "model.layers.{i}.pre_feedforward_layernorm.weight",
		"layers.{i}.post_mlp_norm":  "model.layers.{i}.post_feedforward_layernorm.weight",
	} {
		lm.names[k] = v
	}
	// Local and global layers.
	win, err := c.optInt("sliding_window", 4096)
	if err != nil {
		return err
	}
	local := make([]bool, lm.layers)
	if c.has("layer_types") {
		var types []string
		if err := c.decode("layer_types", &types, "a list of attention types"); err != nil {
			return err
		}
		if len(types) != lm.layers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(types), lm.layers)
		}
		for i, t := range types {
			switch t {
			case "sliding_attention":
				local[i] = true
			case "full_attention":
			default:
				return fmt.Errorf("layer_types[%d] is %q: want full_attention or sliding_attention", i, t)
			}
		}
	} else {
		p, err := c.optInt("sliding_window_pattern", 6)
		if err != nil {
			return err
		}
		for i := range local {
			local[i] = (i+1)%p != 0
		}
	}
	base, err := c.optFloat("rope_local_base_freq", 10000)
	if err != nil {
		return err
	}
	lm.window = make([]int, lm.layers)
	a.layerRope = map[int]layerRope{}
	n := 0
	for i, l := range local {
		if !l {
			continue
		}
		n++
		a.layerRope[i] = layerRope{theta: base, scaling: ir.RopeScaling{Type: ir.RopeScalingNone, Factor: 1}}
		if win < lm.ctx {
			lm.window[i] = win
		}
	}
	h.note("%d of %d layers local (sliding window %d, RoPE base %v), the others global (RoPE base %v)", n, lm.layers, win, base, lm.theta)
	lm.header = append(lm.header, "Gemma 3: RMSNorm weights w used as 1 + w (transformers' Gemma3RMSNorm).")
	return nil
}

// embedScaleDType rounds Gemma's embedding scale to the dtype the checkpoint stores the
// embedding in (transformers multiplies by the scale cast to it), and declares 16-bit norm
// weights f32 where they are used as 1 + w (Gemma3RMSNorm adds the 1 in f32).
func (h *hfImport) embedScaleDType(lm *decoderLM) {
	if lm.arch.normPlusOne {
		dtype := lm.dtype
		lm.dtype = func(name string) (string, error) {
			d, err := dtype(name)
			if err == nil && d == "f16" && strings.HasSuffix(name, "norm.weight") {
				d = "f32"
			}
			return d, err
		}
	}
	if lm.arch.embedScale == 0 {
		return
	}
	d, err := lm.dtype(hfNames["embed"])
	if err != nil {
		return
	}
	t := ir.F32
	if h.embedBF16 {
		t = ir.BF16
	} else if d == "f16" {
		t = ir.F16
	}
	lm.arch.embedScale = ir.TensorFromFloat64s(ir.T(t), []float64{lm.arch.embedScale}).Float64(0)
}

func (h *hfImport) qwen3moe(lm *decoderLM) error {
	c := h.cfg
	e := &moeFFN{norm: ir.MoeNormNone}
	var err error
	for _, f := range []struct {
		key string
		dst *int
	}{{"num_experts", &e.experts}, {"num_experts_per_tok", &e.used}, {"moe_intermediate_size", &e.ffn}} {
		if *f.dst, err = c.int(f.key); err != nil {
			return err
		}
	}
	if e.used > e.experts {
		return fmt.Errorf("num_experts_per_tok %d is more than num_experts %d", e.used, e.experts)
	}
	if norm, err := c.optBool("norm_topk_prob", false); err != nil {
		return err
	} else if norm {
		e.norm = ir.MoeNormRenorm
	}
	if step, err := c.optInt("decoder_sparse_step", 1); err != nil {
		return err
	} else if step != 1 {
		return fmt.Errorf("decoder_sparse_step is %d: vkc imports models whose every layer is a mixture of experts", step)
	}
	if c.has("mlp_only_layers") {
		var dense []int
		if err := c.decode("mlp_only_layers", &dense, "a list of layer indices"); err != nil {
			return err
		}
		if len(dense) > 0 {
			return fmt.Errorf("mlp_only_layers is %v: vkc imports models whose every layer is a mixture of experts", dense)
		}
	}
	lm.arch.moe = e
	lm.names["layers.{i}.router"] = "model.layers.{i}.mlp.gate.weight"
	for p, t := range map[string]string{"w_gate_exps": "gate_proj", "w_up_exps": "up_proj", "w_down_exps": "down_proj"} {
		lm.names["layers.{i}."+p] = "model.layers.{i}.mlp.experts.{j}." + t + ".weight"
	}
	h.note("mixture of experts: %d of %d experts of width %d per token, weights %s", e.used, e.experts, e.ffn,
		map[string]string{ir.MoeNormRenorm: "renormalised over the chosen (norm_topk_prob)", ir.MoeNormNone: "not renormalised (norm_topk_prob false)"}[e.norm])
	lm.header = append(lm.header, lm.arch.header()...)
	return nil
}
