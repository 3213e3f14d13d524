package importer_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
)

// ggufToHFArch turns a Gemma 3, Qwen3-MoE or Phi-3 file of the llama.cpp oracle back into the
// transformers checkpoint its converter read (README-new-archs.md's make_model.py, inverted):
// every tensor dequantized exactly to f32, renamed back, Gemma's norm weights less the 1 the
// converter added, Qwen3-MoE's stacked experts split one tensor per expert, and a config.json of
// the class. The oracle's ref_* logits are then the checkpoint's.
func ggufToHFArch(t *testing.T, path string) (map[string]any, map[string]*ir.Tensor) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ga, _ := f.String("general.architecture")
	u := func(k string, def int) int {
		if !f.Has(ga + "." + k) {
			return def
		}
		v, err := f.Uint(ga + "." + k)
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	eps, _ := f.Float(ga + ".attention.layer_norm_rms_epsilon")
	theta, _ := f.Float(ga + ".rope.freq_base")
	d, heads := u("embedding_length", 0), u("attention.head_count", 0)
	cfg := map[string]any{
		"vocab_size": u("vocab_size", 0), "hidden_size": d, "intermediate_size": u("feed_forward_length", 0),
		"num_hidden_layers": u("block_count", 0), "num_attention_heads": heads, "num_key_value_heads": u("attention.head_count_kv", heads),
		"rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": u("context_length", 0), "torch_dtype": "float32",
	}
	pairs := []string{"token_embd.weight", "model.embed_tokens.weight", "output_norm.weight", "model.norm.weight",
		"output.weight", "lm_head.weight", "blk.", "model.layers.", ".attn_norm.", ".input_layernorm.",
		".attn_q_norm.", ".self_attn.q_norm.", ".attn_k_norm.", ".self_attn.k_norm.",
		".attn_q.", ".self_attn.q_proj.", ".attn_k.", ".self_attn.k_proj.", ".attn_v.", ".self_attn.v_proj.",
		".attn_qkv.", ".self_attn.qkv_proj.", ".attn_output.", ".self_attn.o_proj.",
		".ffn_gate.", ".mlp.gate_proj.", ".ffn_down.", ".mlp.down_proj.", ".ffn_gate_inp.", ".mlp.gate."}
	switch ga {
	case "gemma3":
		hd := u("attention.key_length", d/heads)
		pw := u("attention.sliding_window_pattern", 6)
		var types []string
		for i := range u("block_count", 0) {
			types = append(types, map[bool]string{true: "sliding_attention", false: "full_attention"}[i%pw < pw-1])
		}
		local, _ := f.Float(ga + ".rope.freq_base_swa")
		cfg["architectures"] = []string{"Gemma3ForCausalLM"}
		cfg["head_dim"], cfg["query_pre_attn_scalar"], cfg["hidden_activation"] = hd, hd, "gelu_pytorch_tanh"
		cfg["sliding_window"], cfg["layer_types"], cfg["rope_local_base_freq"] = u("attention.sliding_window", 0), types, local
		cfg["final_logit_softcapping"], cfg["attn_logit_softcapping"] = nil, nil
		pairs = append(pairs, ".post_attention_norm.", ".post_attention_layernorm.", ".ffn_norm.", ".pre_feedforward_layernorm.",
			".post_ffw_norm.", ".post_feedforward_layernorm.", ".ffn_up.", ".mlp.up_proj.")
	case "qwen3moe":
		cfg["architectures"] = []string{"Qwen3MoeForCausalLM"}
		cfg["head_dim"], cfg["hidden_act"] = u("attention.key_length", d/heads), "silu"
		cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"] = u("expert_count", 0), u("expert_used_count", 0), u("expert_feed_forward_length", 0)
		cfg["norm_topk_prob"], cfg["decoder_sparse_step"], cfg["mlp_only_layers"] = true, 1, []int{}
		pairs = append(pairs, ".ffn_norm.", ".post_attention_layernorm.")
	case "phi3":
		cfg["architectures"] = []string{"Phi3ForCausalLM"}
		cfg["hidden_act"], cfg["original_max_position_embeddings"] = "silu", u("rope.scaling.original_context_length", 0)
		pairs = append(pairs, ".ffn_norm.", ".post_attention_layernorm.", ".ffn_up.", ".mlp.gate_up_proj.")
	default:
		t.Fatalf("%s: architecture %s", path, ga)
	}
	rename := strings.NewReplacer(pairs...)
	tensors := map[string]*ir.Tensor{}
	tied := true
	for _, ti := range f.Tensors {
		x, err := ir.ReadGGUFTensor(f, ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		v := x.Float64s() // exact dequantization to f32 values
		if ti.Name == "output.weight" {
			tied = false
		}
		if ga == "gemma3" && strings.HasSuffix(ti.Name, "norm.weight") {
			for i := range v {
				v[i] = float64(float32(v[i]) - 1) // exact: the stored weights are 1 + normal(0, 0.1)
			}
		}
		if s := x.Type.Shape; s.Rank() == 3 { // qwen3moe's experts, [E, rows, cols]
			name := strings.TrimSuffix(strings.TrimPrefix(ti.Name, "blk."), ".weight")
			layer, kind, _ := strings.Cut(name, ".")
			proj := map[string]string{"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}[kind]
			if proj == "" {
				t.Fatalf("3-D tensor %s", ti.Name)
			}
			m := s[1] * s[2]
			for e := range s[0] {
				tensors[fmt.Sprintf("model.layers.%s.mlp.experts.%d.%s.weight", layer, e, proj)] =
					ir.TensorFromFloat64s(ir.T(ir.F32, s[1], s[2]), v[e*m:(e+1)*m])
			}
			continue
		}
		tensors[rename.Replace(ti.Name)] = ir.TensorFromFloat64s(ir.Type{DType: ir.F32, Shape: x.Type.Shape}, v)
	}
	cfg["tie_word_embeddings"] = tied
	return cfg, tensors
}

// TestHFNewArchsAgainstLlamaCppReference: Gemma3ForCausalLM, Qwen3MoeForCausalLM and
// Phi3ForCausalLM checkpoints made from the llama.cpp oracle's files (ggufToHFArch) compute, through
// vkc import with everything in f32 (importer.F32) and the interpreter, the oracle's float64
// reference logits (≤ 1e-4 row-relative) and the GGUF file's own import's logits (≤ 1e-5): the
// Hugging Face and GGUF front ends give one model.
func TestHFNewArchsAgainstLlamaCppReference(t *testing.T) {
	for _, c := range []struct{ file, arch string }{
		{"gemma3-tiny/gemma3-tiny-Q8_0", "Gemma3ForCausalLM"},
		{"qwen3moe-tiny/qwen3moe-tiny-Q8_0", "Qwen3MoeForCausalLM"},
		{"phi3-tiny/phi3-tiny-F16", "Phi3ForCausalLM"},
	} {
		t.Run(c.arch, func(t *testing.T) {
			path, gold := oracles.LlamaCpp(t, c.file)
			cfg, ts := ggufToHFArch(t, path)
			dir := filepath.Join(t.TempDir(), c.arch)
			writeCheckpoint(t, dir, cfg, ts, 1)
			im, err := importer.ImportHF(dir, importer.HFOptions{Precision: importer.F32})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Model.Close()
			if im.Arch != c.arch {
				t.Errorf("import: %s, want %s", im.Arch, c.arch)
			}
			if len(im.Ignored) != 1 || im.Ignored[0] != "torch_dtype" {
				t.Errorf("config fields not read: %v (only torch_dtype, metadata, should be)", im.Ignored)
			}
			run := oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold)
			oracles.CheckLlamaCpp(t, c.file, run, gold, oracles.LlamaCppRefTol)
			g, err := importer.ImportGGUF(path, importer.GGUFOptions{Precision: importer.F32})
			if err != nil {
				t.Fatal(err)
			}
			grun := oracles.RunLlamaCpp(t, oracles.Interp(g.Model), gold)
			vocab := gold["prefill_logits"].Type.Shape[1]
			for _, p := range []struct {
				what     string
				hf, ggml []float64
			}{{"prefill", run.Prefill, grun.Prefill}, {"decode", run.Decode, grun.Decode}} {
				if e := oracles.RowRel(p.hf, p.ggml, vocab); e > 1e-5 || math.IsNaN(e) {
					t.Errorf("%s: the checkpoint's logits differ from the GGUF file's by %.3g row-relative", p.what, e)
				}
			}
		})
	}
}
