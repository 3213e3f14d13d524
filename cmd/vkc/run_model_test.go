package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// greedyTiny are the greedy tokens of examples/tinyllama after the prompt 37,235,140,72, as
// TestCompileAndGenerate checks them against Hugging Face transformers.
const greedyTiny = "235 134 35 219 209 235 146 61"

// TestRunModel: `vkc run` takes a model.yaml or a Hugging Face folder, compiles it into the plan
// cache the first time, takes the plan from the cache the next (and compiles again when the
// model changed or --recompile asks), and generates what the compiled plan does.
func TestRunModel(t *testing.T) {
	needDevice(t)
	dir := t.TempDir()
	cache := filepath.Join(dir, "plans")
	model, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
	local := filepath.Join(dir, "tiny.yaml")
	src, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	weights, _ := filepath.Abs("../../testdata/hf/tinyllama/weights.safetensors")
	src = []byte(strings.Replace(string(src), "../../testdata/hf/tinyllama/weights.safetensors", weights, 1))
	if err := os.WriteFile(local, src, 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(what string, target string, extra ...string) result {
		t.Helper()
		args := append([]string{"run", target, "--plan-cache", cache, "--prompt-ids", "37,235,140,72", "--steps", "8"}, extra...)
		r := runVKC(t, dir, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "greedy tokens: "+greedyTiny) {
			t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", what, r.code, r.stdout, r.stderr)
		}
		return r
	}
	if r := gen("first run", local); !strings.Contains(r.stderr, "compile "+local) || !strings.Contains(r.stdout, "pipelines ready: ") {
		t.Errorf("first run: stderr %q, stdout %q; want a compile and the pipeline step", r.stderr, r.stdout)
	}
	if r := gen("second run", local); !strings.Contains(r.stderr, "(cached;") || strings.Contains(r.stderr, "compile "+local) {
		t.Errorf("second run: stderr %q; want the cached plan", r.stderr)
	}
	if r := gen("--recompile", local, "--recompile"); !strings.Contains(r.stderr, "compile "+local) {
		t.Errorf("--recompile: stderr %q", r.stderr)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(local, later, later)
	if r := gen("a changed model", local); !strings.Contains(r.stderr, "compile "+local) {
		t.Errorf("after the model changed: stderr %q; want a compile", r.stderr)
	}
	plans, _ := filepath.Glob(filepath.Join(cache, "*.plan"))
	if len(plans) != 2 {
		t.Errorf("the cache holds %v; want the plans of the two versions of the model", plans)
	}
	// A Hugging Face folder (it used to be "read plan …: is a directory").
	hf, _ := filepath.Abs("../../testdata/hf/tinyllama")
	gen("a Hugging Face folder", hf)
	// Plan-only flags on a model, model-only flags on a plan.
	if r := runVKC(t, dir, nil, "run", plans[0], "--recompile", "--prompt-ids", "1"); r.code != 2 || !strings.Contains(r.stderr, "--recompile goes with a model") {
		t.Errorf("--recompile on a plan: exit %d, %s", r.code, firstLine(r.stderr))
	}
}

// TestRunPromptSources: --prompt-file reads a file or standard input (the same text as
// --prompt), an empty prompt is a usage error naming it, -f may be left out for a plan of one
// function, and a generation cut short by a full KV cache says so.
func TestRunPromptSources(t *testing.T) {
	needDevice(t)
	dir := t.TempDir()
	tokPath := byteTokenizer(t, dir)
	model, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "tiny.plan", "--tokenizer", tokPath); r.code != 0 {
		t.Fatalf("compile: exit %d: %s", r.code, r.stderr)
	}
	greedy := []string{"--temperature", "0", "--max-tokens", "6"}
	want := runVKC(t, dir, nil, append([]string{"run", "tiny.plan", "--prompt", "Hello there"}, greedy...)...)
	if want.code != 0 {
		t.Fatalf("--prompt: exit %d: %s", want.code, want.stderr)
	}
	os.WriteFile(filepath.Join(dir, "p.txt"), []byte("Hello there"), 0o644)
	if r := runVKC(t, dir, nil, append([]string{"run", "tiny.plan", "--prompt-file", "p.txt"}, greedy...)...); r.code != 0 || r.stdout != want.stdout {
		t.Errorf("--prompt-file: exit %d, %q; want %q (%s)", r.code, r.stdout, want.stdout, r.stderr)
	}
	cmd := exec.Command(vkcBinary(t), append([]string{"run", "tiny.plan", "--prompt-file", "-"}, greedy...)...)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader("Hello there")
	if out, err := cmd.Output(); err != nil || string(out) != want.stdout {
		t.Errorf("--prompt-file - (standard input): %v, %q; want %q", err, out, want.stdout)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--prompt", ""}, 2, "the prompt is empty"},
		{[]string{"--prompt", "a", "--prompt-file", "p.txt"}, 2, "--prompt and --prompt-file exclude each other"},
		{[]string{"--prompt-file", "missing.txt"}, 1, "missing.txt"},
		{[]string{"--prompt-ids", "1", "--steps", "200"}, 0, "stopped after 128 of --steps 200 tokens: the KV cache is full (128 positions)"},
	} {
		r := runVKC(t, dir, nil, append([]string{"run", "tiny.plan"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", c.args, r.code, r.stdout, firstLine(r.stderr), c.code, c.want)
		}
	}
	if interactiveChat == nil {
		if r := runVKC(t, dir, nil, "run", "tiny.plan", "--chat"); r.code != 2 || !strings.Contains(r.stderr, "not available in this build") {
			t.Errorf("--chat without a prompt: exit %d, %s", r.code, firstLine(r.stderr))
		}
	}
}
