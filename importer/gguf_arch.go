package importer

import (
	"fmt"
	"math"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// archWindows are the architectures whose sliding window archSpecific reads (gemma3) or, as
// llama.cpp does, ignores (phi3); another architecture's window shorter than the context is an
// error.
var archWindows = map[string]bool{"gemma3": true, "phi3": true}

// archSpecific adds what an architecture has beyond the Llama graph, as llama.cpp's graph of
// it computes (src/models/ARCH.cpp), and maps its tensors:
//
//   - gemma3: the embedding rows times sqrtf(n_embd); RMSNorm weights as stored (llama.cpp's
//     converter has added Gemma's 1); post-attention and post-FFN RMSNorms; GELU-tanh gated
//     FFN; per-head Q/K RMSNorm; layer il local (sliding window {arch}.attention.sliding_window,
//     RoPE base rope.freq_base_swa, default 10000, no frequency scaling) iff il % P < P − 1 with
//     P = attention.sliding_window_pattern (default 6), the others global (rope.freq_base and
//     the file's scaling); the attention scale 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the
//     62-layer 27B model, as llama.cpp).
//   - phi3: the fused attn_qkv (rows q, k, v) and ffn_up (rows gate, up) as one projection each
//     whose columns are sliced; no sliding window (llama.cpp runs none); LongRoPE factors
//     (rope_factors_long/short) are an error.
//   - qwen3moe, and llama with experts (Mixtral): the FFN is a mixture of expert_count SwiGLU
//     experts, expert_used_count per token, routed by ffn_gate_inp with the chosen experts'
//     softmax weights renormalised (llama.cpp's graph of both does so, whatever the checkpoint
//     said), the experts stacked in ffn_{gate,up,down}_exps.
func (g *ggufImport) archSpecific(lm *decoderLM) error {
	a := &lm.arch
	switch g.arch {
	case "gemma3":
		if err := g.gemma3(lm); err != nil {
			return err
		}
	case "phi3":
		if err := g.phi3(lm); err != nil {
			return err
		}
	}
	if n, _ := g.optUint("expert_count", 0); n > 0 {
		if err := g.experts(lm, n); err != nil {
			return err
		}
	}
	if a.fusedQKV {
		lm.names["layers.{i}.wqkv"] = "blk.{i}.attn_qkv.weight"
	}
	return nil
}

func (g *ggufImport) gemma3(lm *decoderLM) error {
	a := &lm.arch
	arch := g.arch
	a.embedScale = float64(float32(math.Sqrt(float64(lm.d))))
	a.embedScaleWhy = fmt.Sprintf("sqrtf(%d), as llama.cpp's gemma3 graph", lm.d)
	a.postNorms, a.wideAct = true, true
	a.act = "gelu_tanh"
	if lm.layers == 62 {
		a.attnScale = 1 / math.Sqrt(float64(lm.d/lm.heads)) // llama.cpp's "27B" case
		g.note("62 layers (Gemma 3 27B): attention scale 1/sqrt(n_embd/n_head), as llama.cpp")
	}
	lm.names["layers.{i}.post_attn_norm"] = "blk.{i}.post_attention_norm.weight"
	lm.names["layers.{i}.post_mlp_norm"] = "blk.{i}.post_ffw_norm.weight"
	win, err := g.optUint("attention.sliding_window", 0)
	if err != nil {
		return err
	}
	pattern := 6
	if g.f.Has(arch + ".attention.sliding_window_pattern") {
		p, err := g.f.Uint(arch + ".attention.sliding_window_pattern")
		if err != nil {
			return fmt.Errorf("%s.attention.sliding_window_pattern: %w (vkc reads the period P of gemma3: layer il is local iff il %% P < P-1)", arch, err)
		}
		if p == 0 || p > math.MaxInt32 {
			return fmt.Errorf("%s.attention.sliding_window_pattern is %d", arch, p)
		}
		pattern = int(p)
	} else {
		g.note("no %s.attention.sliding_window_pattern: llama.cpp's default 6 (five local layers, then a global one)", arch)
	}
	local := 10000.0
	if k := arch + ".rope.freq_base_swa"; g.f.Has(k) {
		if local, err = g.f.Float(k); err != nil {
			return err
		}
	} else {
		g.note("no %s.rope.freq_base_swa: the local layers' RoPE base is llama.cpp's default 10000", arch)
	}
	if win == 0 {
		return fmt.Errorf("a gemma3 file has %s.attention.sliding_window; it is missing or 0", arch)
	}
	lm.window = make([]int, lm.layers)
	a.layerRope = map[int]layerRope{}
	n := 0
	for il := range lm.layers {
		if il%pattern < pattern-1 {
			n++
			a.layerRope[il] = layerRope{theta: local, scaling: ir.RopeScaling{Type: ir.RopeScalingNone, Factor: 1}}
			if win < lm.ctx {
				lm.window[il] = win
			}
		}
	}
	if win >= lm.ctx {
		g.note("the sliding window %d covers the context %d: every layer attends to all of it", win, lm.ctx)
	}
	g.note("%d of %d layers local (window %d, RoPE base %v), the others global (RoPE base %v)", n, lm.layers, win, local, lm.theta)
	return nil
}

func (g *ggufImport) phi3(lm *decoderLM) error {
	for _, f := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
		if _, ok := g.f.Tensor(f); ok {
			return fmt.Errorf("the file has %s: Phi-3's LongRoPE scaling is not supported", f)
		}
	}
	if w, _ := g.optUint("attention.sliding_window", 0); w > 0 {
		g.note("%s.attention.sliding_window %d is not used: llama.cpp runs phi3 without a sliding window", g.arch, w)
	}
	if _, ok := g.f.Tensor("blk.0.attn_qkv.weight"); ok {
		lm.arch.fusedQKV = true
		g.note("attn_qkv is one projection whose columns are q, k and v")
	}
	if _, ok := g.f.Tensor("blk.0.ffn_gate.weight"); !ok {
		lm.arch.fusedGateUp = true
		lm.names["layers.{i}.w_gate_up"] = "blk.{i}.ffn_up.weight"
		g.note("ffn_up is one projection whose columns are the gate, then the up projection")
	}
	return nil
}

func (g *ggufImport) experts(lm *decoderLM, n int) error {
	arch := g.arch
	used, err := g.uint("expert_used_count")
	if err != nil {
		return err
	}
	if used > n {
		return fmt.Errorf("%s.expert_used_count %d is more than the %d experts", arch, used, n)
	}
	ffn := lm.ffn
	if g.f.Has(arch + ".expert_feed_forward_length") {
		if ffn, err = g.uint("expert_feed_forward_length"); err != nil {
			return err
		}
	}
	for _, k := range []string{"expert_shared_count", "expert_shared_feed_forward_length"} {
		if v, _ := g.optUint(k, 0); v > 0 {
			return fmt.Errorf("%s.%s is %d: shared experts are not supported", arch, k, v)
		}
	}
	if v, ok := g.f.Get(arch + ".expert_gating_func"); ok {
		if f, ok := v.AsUint(); !ok || f != 1 {
			return fmt.Errorf("%s.expert_gating_func is not 1 (softmax): other expert gating is not supported", arch)
		}
	}
	if v, ok := g.f.Get(arch + ".expert_weights_scale"); ok {
		if f, ok := v.AsFloat(); !ok || f != 1 && f != 0 {
			return fmt.Errorf("%s.expert_weights_scale is not 1: scaled expert weights are not supported", arch)
		}
	}
	if _, ok := g.f.Tensor("blk.0.ffn_gate.0.weight"); ok {
		return fmt.Errorf("the experts are stored one tensor each (blk.N.ffn_gate.E.weight, an older llama.cpp's Mixtral files); vkc reads them stacked (ffn_gate_exps): convert the model again with a current llama.cpp")
	}
	lm.arch.moe = &moeFFN{experts: n, used: used, ffn: ffn, norm: ir.MoeNormRenorm}
	for p, t := range map[string]string{"router": "ffn_gate_inp", "w_gate_exps": "ffn_gate_exps", "w_up_exps": "ffn_up_exps", "w_down_exps": "ffn_down_exps"} {
		lm.names["layers.{i}."+p] = "blk.{i}." + t + ".weight"
	}
	for _, t := range []string{"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
		if _, ok := g.f.Tensor("blk.0." + t + ".weight"); !ok {
			return fmt.Errorf("a mixture of experts has blk.N.%s.weight; blk.0's is missing", t)
		}
	}
	g.note("mixture of experts: %d of %d experts of width %d per token, their weights renormalised over the chosen (as llama.cpp's %s graph)", used, n, ffn, arch)
	return nil
}

// header names what the architecture adds, for the model.yaml's header.
func (a *archLM) header() []string {
	var h []string
	if a.moe != nil {
		h = append(h, fmt.Sprintf("Mixture of experts: %d of %d experts per token (moe_route, moe_linear, moe_sum).", a.moe.used, a.moe.experts))
	}
	if a.fusedQKV || a.fusedGateUp {
		var f []string
		if a.fusedQKV {
			f = append(f, "q/k/v")
		}
		if a.fusedGateUp {
			f = append(f, "gate/up")
		}
		h = append(h, fmt.Sprintf("Fused %s projections, their columns sliced.", strings.Join(f, " and ")))
	}
	return h
}
