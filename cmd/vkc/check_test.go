package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vkc runs the CLI in-process and returns its exit status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckTinyLlama(t *testing.T) {
	code, out, errs := runCLI(t, "check", "../../examples/tinyllama/model.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"model tinyllama", "parameters: 21 tensors, 125,248 elements", "weights loaded: 21",
		"state: 4 tensors, 64.0 KiB", "prefill(tokens: i32[64], pos: i32[]) -> (logits: f32[64,256])", "run-time length seq in 1..64",
		"decode(tokens: i32[1], pos: i32[]) -> (logits: f32[1,256])", "attention 2", "cache_write 4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckSkipWeightsAfterPositional(t *testing.T) {
	code, out, errs := runCLI(t, "check", "../../examples/smollm2-135m/model.yaml", "-skip-weights")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "134,515,008 elements, 256.6 MiB (f16 256.6 MiB); weights not loaded") {
		t.Errorf("output:\n%s", out)
	}
}

func TestCheckUnusedParams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(path, []byte("model: u\nweights: {init: zeros}\nparams: {w: [2], spare: [3]}\nfunctions:\n  f:\n    inputs: {x: \"f32[2]\"}\n    outputs: [y]\n    body: [\"y = mul(x, w)\"]\n"), 0o644)
	code, out, errs := runCLI(t, "check", path)
	if code != 0 || !strings.Contains(out, "note: 1 parameters are used by no function: spare") {
		t.Errorf("exit %d, %s\n%s", code, errs, out)
	}
}

func TestCheckErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("model: b\nfunctions:\n  f:\n    inputs: {x: \"f32[2]\"}\n    outputs: [y]\n    body:\n      - y = sqr(x)\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"check"}, 2, "want one model.yaml"},
		{[]string{"check", "-nope", "m.yaml"}, 2, "flag provided but not defined"},
		{[]string{"check", "a.yaml", "b.yaml"}, 2, "got 2 arguments"},
		{[]string{"check", filepath.Join(dir, "absent.yaml")}, 1, "no such file"},
		{[]string{"check", bad}, 1, "bad.yaml:7: function f: `y = sqr(x)`: unknown op sqr (did you mean sqrt?)"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, name := range []string{"check", "eval", "dot"} {
		for _, args := range [][]string{{name, "-h"}, {name, "model.yaml", "-h"}} {
			code, _, errs := runCLI(t, args...)
			if code != 0 || !strings.Contains(errs, "usage: vkc "+name) {
				t.Errorf("%v: exit %d, stderr %q", args, code, errs)
			}
		}
	}
}
