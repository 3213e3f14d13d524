package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/onnx"
	"github.com/vkc-project/vkc/ir/quant"
)

// quickStartCommands returns the command lines of the README's "Quick start" section (its sh
// blocks, continuation lines joined, comments dropped).
func quickStartCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Quick start\n")
	if i < 0 {
		t.Fatal("README.md has no Quick start section")
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	tmp := filepath.Join(t.TempDir(), "qs.md")
	os.WriteFile(tmp, []byte(s), 0o644)
	blocks, _ := fencedBlocks(t, tmp, "sh")
	var cmds []string
	for _, blk := range blocks {
		joined := strings.ReplaceAll(blk, "\\\n", " ")
		for _, l := range strings.Split(joined, "\n") {
			if k := strings.Index(l, "  #"); k >= 0 {
				l = l[:k]
			}
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				cmds = append(cmds, l)
			}
		}
	}
	return cmds
}

// TestReadmeQuickStart runs every command of the README's Quick start in a folder that holds
// the repository's examples and test data and, under the names the README uses for models of
// one's own, tiny stand-ins: model.gguf (tinyllama's weights and a byte vocabulary with a chat
// template), resnet.onnx (a convolution with a symbolic batch), Qwen2.5-0.5B/ and Qwen3-0.6B/
// (tinyllama's checkpoint with a byte tokenizer, the second with a chat template), tokenizer.json,
// prompt.txt and chat.json. Each command must exit 0. Not run: go build (the test built the
// binary), --tune (it measures for minutes) and serve (it serves until stopped; cmd/vkc's serve
// tests run it).
func TestReadmeQuickStart(t *testing.T) {
	needDevice(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"examples", "testdata"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	if err := os.Symlink(vkcBinary(t), filepath.Join(dir, "bin", "vkc")); err != nil {
		t.Fatal(err)
	}
	quickStartFixtures(t, dir, root)
	// The plan cache goes to the test's folder; Mesa's shader cache stays where it was, so
	// that lavapipe's compiled shaders are reused.
	env := []string{"XDG_CACHE_HOME=" + filepath.Join(dir, "cache")}
	if os.Getenv("MESA_SHADER_CACHE_DIR") == "" {
		if base, err := os.UserCacheDir(); err == nil {
			env = append(env, "MESA_SHADER_CACHE_DIR="+filepath.Join(base, "mesa_shader_cache"))
		}
	}
	_, haveDot := exec.LookPath("dot")
	ran := 0
	for _, c := range quickStartCommands(t) {
		switch {
		case strings.HasPrefix(c, "go build"):
			continue
		case strings.Contains(c, "--tune") || strings.HasPrefix(c, "bin/vkc serve"):
			t.Logf("not run: %s", c)
			continue
		}
		if haveDot != nil {
			c, _, _ = strings.Cut(c, " && dot ")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a cold shader cache on a busy CPU
		cmd := exec.CommandContext(ctx, "bash", "-c", c)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", c, err, out)
		}
		ran++
	}
	if ran < 20 {
		t.Errorf("ran %d commands of the Quick start; the README has more", ran)
	}
}

// quickStartFixtures writes the stand-ins of the README's own-model commands into dir.
func quickStartFixtures(t *testing.T, dir, root string) {
	t.Helper()
	hf := filepath.Join(root, "testdata", "hf", "tinyllama")
	const chatTemplate = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	tinyGGUF(t, filepath.Join(dir, "model.gguf"), filepath.Join(hf, "weights.safetensors"), chatTemplate)
	quickStartONNX(t, filepath.Join(dir, "resnet.onnx"))
	for _, name := range []string{"Qwen2.5-0.5B", "Qwen3-0.6B"} {
		d := filepath.Join(dir, name)
		os.MkdirAll(d, 0o755)
		for _, f := range []string{"config.json", "weights.safetensors"} {
			b, err := os.ReadFile(filepath.Join(hf, f))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, f), b, 0o644)
		}
		byteTokenizer(t, d)
	}
	cfg, _ := json.Marshal(map[string]any{"chat_template": chatTemplate, "eos_token": nil, "bos_token": nil})
	os.WriteFile(filepath.Join(dir, "Qwen3-0.6B", "tokenizer_config.json"), cfg, 0o644)
	byteTokenizer(t, dir)
	os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte("Once upon a time"), 0o644)
	os.WriteFile(filepath.Join(dir, "chat.json"), []byte(`[{"role": "user", "content": "Why is the sky blue?"}]`), 0o644)
}

// tinyGGUF writes a llama GGUF file of tinyllama's checkpoint (f32, tensors under llama.cpp's
// names, Q and K as stored: the numbers are not llama.cpp's, the file is a stand-in) with a
// byte-level vocabulary of 256 tokens and a chat template.
func tinyGGUF(t *testing.T, path, weights, chatTemplate string) {
	t.Helper()
	sf, err := ir.OpenSafetensors(weights)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	var b gguf.Builder
	for k, v := range map[string]any{
		"general.architecture": "llama", "general.name": "tinyllama", "llama.block_count": uint32(2),
		"llama.context_length": uint32(128), "llama.embedding_length": uint32(64), "llama.feed_forward_length": uint32(176),
		"llama.attention.head_count": uint32(4), "llama.attention.head_count_kv": uint32(2),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5), "llama.rope.freq_base": float32(10000),
		"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.chat_template": chatTemplate,
	} {
		b.Add(k, gguf.MustValue(v))
	}
	var toks []string
	n := 256
	for c := 0; c < 256; c++ {
		if c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE {
			toks = append(toks, string(rune(c)))
		} else {
			toks = append(toks, string(rune(n)))
			n++
		}
	}
	b.Add("tokenizer.ggml.tokens", gguf.MustValue(toks))
	b.Add("tokenizer.ggml.merges", gguf.MustValue([]string{}))
	names := map[string]string{"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
	for i := range 2 {
		p, q := "model.layers."+string(rune('0'+i))+".", "blk."+string(rune('0'+i))+"."
		for from, to := range map[string]string{"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
			"self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
			"post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
			"mlp.down_proj.weight": "ffn_down.weight"} {
			names[p+from] = q + to
		}
	}
	for from, to := range names {
		x, err := sf.Read(from)
		if err != nil {
			t.Fatal(err)
		}
		s := x.Type.Shape
		ne := make([]uint64, len(s))
		for i, d := range s {
			ne[len(s)-1-i] = uint64(d)
		}
		data := make([]byte, 4*x.NumElements())
		for i := range x.NumElements() {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(x.Float64(i))))
		}
		b.Tensor(to, quant.FormatF32.GGML, ne, data)
	}
	out, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// quickStartONNX writes y = relu(conv(x, W) + 1) with x f32[batch, 3, 8, 8].
func quickStartONNX(t *testing.T, path string) {
	t.Helper()
	w := make([]byte, 4*4*3*3*3)
	for i := 0; i < len(w)/4; i++ {
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(i%5)-2))
	}
	g := &onnx.Graph{
		Name: "resnet",
		Initializers: []*onnx.Tensor{
			{Name: "W", Dims: []int64{4, 3, 3, 3}, DataType: onnx.Float, RawData: w, HasRaw: true},
			{Name: "one", DataType: onnx.Float, FloatData: []float32{1}},
		},
		Nodes: []*onnx.Node{
			{OpType: "Conv", Inputs: []string{"x", "W"}, Outputs: []string{"c"},
				Attrs: []*onnx.Attribute{{Name: "pads", Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}}}},
			{OpType: "Add", Inputs: []string{"c", "one"}, Outputs: []string{"a"}},
			{OpType: "Relu", Inputs: []string{"a"}, Outputs: []string{"y"}},
		},
		Inputs: []*onnx.ValueInfo{{Name: "x", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
			Dims: []onnx.Dim{{Param: "batch"}, {Value: 3, HasValue: true}, {Value: 8, HasValue: true}, {Value: 8, HasValue: true}}}}},
		Outputs: []*onnx.ValueInfo{{Name: "y"}},
	}
	if err := os.WriteFile(path, onnx.Marshal(&onnx.Model{IRVersion: 8, Opsets: []onnx.OpsetID{{Version: 13}}, Graph: g}), 0o644); err != nil {
		t.Fatal(err)
	}
}
