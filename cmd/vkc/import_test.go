package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
)

// TestImportGGUF: vkc import writes a model.yaml that vkc check and eval read, naming the GGUF
// file relative to it; check and eval also take the .gguf itself.
func TestImportGGUF(t *testing.T) {
	path := oracles.File(t, "llamacpp", "qwen3-tiny/qwen3-tiny-Q8_0.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "sub", "model.yaml")
	os.MkdirAll(filepath.Dir(out), 0o755)
	code, stdout, errs := runCLI(t, "import", path, "-o", out, "--ctx", "32", "--prefill", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "qwen3-tiny (qwen3)") || !strings.Contains(stdout, "tied to token_embd.weight") {
		t.Errorf("import output:\n%s", stdout)
	}
	src, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Dir(out), path)
	if !strings.Contains(string(src), "file: "+filepath.ToSlash(rel)) || !strings.Contains(string(src), "ctx: 32") {
		t.Errorf("model.yaml does not name the GGUF file as %s or lacks ctx 32", rel)
	}
	for _, m := range []string{out, path} {
		code, stdout, errs = runCLI(t, "check", m)
		if code != 0 {
			t.Fatalf("check %s: exit %d: %s", m, code, errs)
		}
		if !strings.Contains(stdout, "q8_0 ") || !strings.Contains(stdout, "weights loaded: 24") {
			t.Errorf("check %s:\n%s", m, stdout)
		}
	}
	code, stdout, errs = runCLI(t, "eval", out, "-f", "prefill", "--input", "tokens=[1,2,3,4]", "--input", "pos=0")
	if code != 0 || !strings.Contains(stdout, "logits") {
		t.Errorf("eval: exit %d: %s%s", code, stdout, errs)
	}
	// The precision: f16 KV cache and f16 activations into the prefill's products by default;
	// --kv and --act on import and on the commands that take the .gguf itself.
	for _, c := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"k_cache.{i}: f16[ctx, kv_heads, hd]", "h = cast(rmsnorm(x, layers.{i}.attn_norm", "KV cache f16; the prefill's matrix products read f16"}},
		{[]string{"--kv", "q8_0", "--act", "f32"}, []string{"v_cache.{i}: q8_0[ctx, kv_heads, hd]", "body: *body", "KV cache q8_0; the prefill's matrix products read f32 activations (--act f32)"}},
		{[]string{"--kv", "f32"}, []string{"k_cache.{i}: [ctx, kv_heads, hd]"}},
	} {
		args := append([]string{"import", path, "-o", out, "--ctx", "32"}, c.flags...)
		code, stdout, errs := runCLI(t, args...)
		src, _ := os.ReadFile(out)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(string(src)+stdout, w) {
				t.Errorf("%v: exit %d %s: lacks %q", c.flags, code, errs, w)
			}
		}
	}
	code, stdout, errs = runCLI(t, "check", path, "--kv", "q4_0")
	if code != 0 || !strings.Contains(stdout, "q4_0") {
		t.Errorf("check --kv q4_0: exit %d: %s%s", code, stdout, errs)
	}
}

func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	b := &gguf.Builder{}
	b.Add("general.architecture", gguf.MustValue("mamba"))
	data, _ := b.Bytes()
	mamba := filepath.Join(dir, "m.gguf")
	os.WriteFile(mamba, data, 0o644)
	out := filepath.Join(dir, "model.yaml")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", mamba}, 2, "-o model.yaml is required"},
		{[]string{"import", mamba, "-o", out}, 1, `architecture "mamba" is not one vkc imports (it knows llama, qwen2, qwen3, qwen3moe, gemma3, phi3)`},
		{[]string{"import", "../../go.mod", "-o", out}, 1, "reads GGUF (.gguf) and ONNX (.onnx) files"},
		{[]string{"import"}, 2, "want one GGUF or ONNX file"},
		{[]string{"check", mamba}, 1, `architecture "mamba"`},
		{[]string{"import", mamba, "-o", out, "--kv", "q4_k"}, 2, "--kv q4_k: want one of f32, f16, q8_0, q4_0"},
		{[]string{"check", mamba, "--act", "bf16"}, 2, "--act bf16: want f32 or f16"},
		{[]string{"check", "../../examples/mlp/model.yaml", "--kv", "f16"}, 2, "--act and --kv choose the precision of a GGUF file"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed import left a model.yaml")
	}
	// An existing file that is not a model.yaml is not replaced without --force.
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("keep me\n"), 0o644)
	path := oracles.File(t, "llamacpp", "qwen3-tiny/qwen3-tiny-Q8_0.gguf")
	if code, _, errs := runCLI(t, "import", path, "-o", other); code != 1 || !strings.Contains(errs, "not a model.yaml") {
		t.Errorf("import over a text file: exit %d, %q", code, errs)
	}
	if b, _ := os.ReadFile(other); string(b) != "keep me\n" {
		t.Error("the text file was replaced")
	}
	if code, _, errs := runCLI(t, "import", path, "-o", path); code != 1 || !strings.Contains(errs, "refused") {
		t.Errorf("import over its own input: exit %d, %q", code, errs)
	}
}

// TestImportHF: vkc import takes a Hugging Face checkpoint folder (transformers' tinyllama),
// says which config fields it used and that it skipped the folder's golden.safetensors, and
// writes a model.yaml naming the weights file relative to it that check and eval read; check
// and eval also take the folder itself.
func TestImportHF(t *testing.T) {
	src := oracles.Dir(t, "hf/tinyllama")
	dir := t.TempDir()
	out := filepath.Join(dir, "model.yaml")
	code, stdout, errs := runCLI(t, "import", src, "-o", out, "--ctx", "32", "--prefill", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"tinyllama (LlamaForCausalLM), 21 parameters in 1 safetensors files", "config.json fields used: attention_bias, head_dim, hidden_act",
		"config.json fields not used: attention_dropout", "golden.safetensors holds none of the model's tensors"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("import output lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(dir, filepath.Join(src, "weights.safetensors"))
	if !strings.Contains(string(b), "file: "+filepath.ToSlash(rel)) || !strings.Contains(string(b), "dims: {seq: 1..8}") {
		t.Errorf("model.yaml does not name %s or lacks the prefill bound:\n%s", rel, b)
	}
	for _, m := range []string{out, src} {
		if code, stdout, errs = runCLI(t, "check", m); code != 0 || !strings.Contains(stdout, "weights loaded: 21") {
			t.Errorf("check %s: exit %d:\n%s%s", m, code, stdout, errs)
		}
	}
	code, stdout, errs = runCLI(t, "eval", src, "-f", "prefill", "--input", "tokens=[1,2,3]", "--input", "pos=0")
	if code != 0 || !strings.Contains(stdout, "logits") {
		t.Errorf("eval on the folder: exit %d: %s%s", code, stdout, errs)
	}
	if code, _, errs = runCLI(t, "import", t.TempDir(), "-o", filepath.Join(dir, "x.yaml")); code != 1 || !strings.Contains(errs, "a folder without config.json") {
		t.Errorf("a folder without config.json: exit %d: %s", code, errs)
	}
}
