package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/tokenizer"
)

// byteTokenizer writes a tokenizer.json of 256 byte tokens (GPT-2's byte-level alphabet, id =
// byte value): tinyllama's vocabulary of 256 then reads and writes any text.
func byteTokenizer(t *testing.T, dir string) string {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
	b, _ := json.Marshal(map[string]any{"version": "1.0", "added_tokens": []any{}, "pre_tokenizer": bl, "decoder": bl,
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}}})
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunPrompt: vkc run --prompt through the built binary: tinyllama compiled with a byte-level
// tokenizer streams text; the same --seed gives the same text and another seed another; greedy
// (--temperature 0) is the text of --prompt-ids' greedy tokens; --stop ends the text before the
// string; standard error says what ran where; misuse is a usage error.
func TestRunPrompt(t *testing.T) {
	needDevice(t)
	dir := t.TempDir()
	tokPath := byteTokenizer(t, dir)
	model, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "tiny.plan", "--tokenizer", tokPath); r.code != 0 {
		t.Fatalf("compile: exit %d: %s", r.code, r.stderr)
	}
	run := func(args ...string) result {
		t.Helper()
		r := runVKC(t, dir, nil, append([]string{"run", "tiny.plan", "--prompt", "Hello"}, args...)...)
		if r.code != 0 {
			t.Fatalf("run %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	a, b, c := run("--max-tokens", "24", "--seed", "3"), run("--max-tokens", "24", "--seed", "3"), run("--max-tokens", "24", "--seed", "4")
	if a.stdout != b.stdout || a.stdout == c.stdout {
		t.Errorf("seed 3: %q and %q; seed 4: %q", a.stdout, b.stdout, c.stdout)
	}
	for _, want := range []string{"generated 24 tokens, stopped: max tokens", "sampling: top-40 ranked on the device, 64 candidates read back per step", "seed 3"} {
		if !strings.Contains(a.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, a.stderr)
		}
	}
	if r := run("--max-tokens", "4"); !strings.Contains(r.stderr, "(random; --seed ") {
		t.Errorf("a random seed is not reported:\n%s", r.stderr)
	}

	g := run("--max-tokens", "10", "--temperature", "0")
	ids := runVKC(t, dir, nil, "run", "tiny.plan", "--prompt-ids", "72,101,108,108,111", "--steps", "10")
	if ids.code != 0 {
		t.Fatalf("run --prompt-ids: exit %d: %s", ids.code, ids.stderr)
	}
	line := ""
	for _, l := range strings.Split(ids.stdout, "\n") {
		if s, ok := strings.CutPrefix(l, "greedy tokens: "); ok {
			line = s
		}
	}
	var greedy []int32
	for _, f := range strings.Fields(line) {
		v, _ := strconv.Atoi(f)
		greedy = append(greedy, int32(v))
	}
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tok.Decode(greedy, tokenizer.DecodeOptions{SkipSpecial: true, NoCleanup: true})
	if len(greedy) != 10 || strings.TrimSuffix(g.stdout, "\n") != strings.TrimSuffix(want, "\n") {
		t.Errorf("greedy text %q; --prompt-ids' greedy tokens %v decode to %q", g.stdout, greedy, want)
	}
	if !strings.Contains(g.stderr, "greedy: argmax on the device") {
		t.Errorf("greedy stderr:\n%s", g.stderr)
	}

	text := []rune(strings.TrimSuffix(a.stdout, "\n"))
	if len(text) > 8 {
		stop := string(text[5:7])
		s := run("--max-tokens", "24", "--seed", "3", "--stop", stop)
		if pre := string(text[:strings.Index(string(text), stop)]); strings.TrimSuffix(s.stdout, "\n") != pre || !strings.Contains(s.stderr, "stopped: stop string") {
			t.Errorf("--stop %q: %q, want %q (%s)", stop, s.stdout, pre, s.stderr)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "tiny.plan", "--prompt", "x", "--top-p", "2"}, "top-p 2"},
		{[]string{"run", "tiny.plan", "--prompt-ids", "1", "--temperature", "0.5"}, "--temperature goes with --prompt TEXT"},
		{[]string{"run", "tiny.plan", "--prompt", "x", "--steps", "3"}, "takes no --prompt-ids, --steps"},
		{[]string{"run", "tiny.plan", "--prompt", "x", "--system", "s"}, "--system goes with --chat"},
	} {
		if r := runVKC(t, dir, nil, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, r.code, r.stderr)
		}
	}
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "bare.plan"); r.code != 0 {
		t.Fatalf("compile: %s", r.stderr)
	}
	if r := runVKC(t, dir, nil, "run", "bare.plan", "--prompt", "x"); r.code != 1 || !strings.Contains(r.stderr, "records no tokenizer") {
		t.Errorf("a plan without a tokenizer: exit %d: %s", r.code, r.stderr)
	}
	if r := runVKC(t, dir, nil, "run", "bare.plan", "--prompt", "Hi", "--tokenizer", tokPath, "--max-tokens", "3", "--chat"); r.code != 1 || !strings.Contains(r.stderr, "no chat template") {
		t.Errorf("--chat without a template: exit %d: %s", r.code, r.stderr)
	}
}

// TestHFFolderChat: a Hugging Face folder (transformers' tinyllama weights and config, with a
// byte-level tokenizer.json of its 256-token vocabulary and a ChatML template in
// chat_template.jinja) compiled as it is records its tokenizer and template in the plan, and
// vkc run --chat generates through them; the prompt in the template is what --chat sent.
func TestHFFolderChat(t *testing.T) {
	needDevice(t)
	src, err := filepath.Abs("../../testdata/hf/tinyllama")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hf := filepath.Join(dir, "tinyllama-hf")
	os.MkdirAll(hf, 0o755)
	for _, f := range []string{"config.json", "weights.safetensors"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(hf, f)); err != nil {
			t.Fatal(err)
		}
	}
	byteTokenizer(t, hf)
	tmpl := `{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`
	os.WriteFile(filepath.Join(hf, "chat_template.jinja"), []byte(tmpl), 0o644)
	r := runVKC(t, dir, nil, "compile", "-q", hf, "-o", "hf.plan")
	if r.code != 0 {
		t.Fatalf("compile: exit %d: %s", r.code, r.stderr)
	}
	if r = runVKC(t, dir, nil, "inspect", "hf.plan"); !strings.Contains(r.stdout, "tokenizer: tokenizer.json") || !strings.Contains(r.stdout, "chat template") {
		t.Errorf("inspect: the plan does not record the folder's tokenizer and template:\n%s", r.stdout)
	}
	// The template's text is 91 bytes, a token each.
	r = runVKC(t, dir, nil, "run", "hf.plan", "--prompt", "Hi", "--chat", "--system", "Be brief.", "--max-tokens", "8", "--temperature", "0")
	if r.code != 0 || !strings.Contains(r.stderr, "prompt: 91 tokens") || !strings.Contains(r.stderr, "generated 8 tokens") {
		t.Errorf("run --chat: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
