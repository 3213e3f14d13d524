package main

// Tests that run the built vkc binary as a user does: exit status, standard error, signals,
// file modes and what is left on disk are the process's, not a function's. The binary is built
// once per test run into a temporary folder.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/runtime"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{binDir, tinyDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// vkcBinary builds cmd/vkc once and returns its path.
func vkcBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "vkc-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "vkc")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = &buildError{string(out), err}
		}
	})
	if binErr != nil {
		t.Fatalf("build vkc: %v", binErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// result is what a vkc process did.
type result struct {
	code           int
	stdout, stderr string
}

// runVKC runs the binary in dir with args (env adds to the environment) and waits for it.
func runVKC(t testing.TB, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(vkcBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if !ee.Exited() { // killed by a signal: say which after what it wrote
			fmt.Fprintf(&errb, "\n[vkc %s]", ee)
		}
	} else if err != nil {
		t.Fatalf("vkc %s: %v", strings.Join(args, " "), err)
	}
	return result{code, out.String(), errb.String()}
}

// needDevice skips a test that runs plans when there is no Vulkan device.
func needDevice(t *testing.T) {
	t.Helper()
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("no Vulkan device (the test runs a plan; lavapipe is enough): %v", err)
	}
}

var (
	tinyOnce sync.Once
	tinyPlan string
	tinyDir  string // removed by TestMain
	tinyRes  result
)

// tinyllamaPlan compiles examples/tinyllama for the device once (through the binary) and
// returns the plan's path.
func tinyllamaPlan(t *testing.T) string {
	t.Helper()
	needDevice(t)
	tinyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vkc-tiny-")
		if err != nil {
			tinyRes = result{code: -1, stderr: err.Error()}
			return
		}
		tinyDir = dir
		tinyPlan = filepath.Join(dir, "tinyllama.plan")
		model, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
		tinyRes = runVKC(t, dir, nil, "compile", "-q", model, "-o", tinyPlan)
	})
	if tinyRes.code != 0 {
		t.Fatalf("compile tinyllama: exit %d: %s", tinyRes.code, tinyRes.stderr)
	}
	return tinyPlan
}

// TestBinaryRunChecksRanges: vkc run and vkc bench refuse token ids outside the vocabulary and
// positions outside the KV cache (exit 1, a message naming the input, the value and the bound),
// where they used to print plausible logits with exit 0.
func TestBinaryRunChecksRanges(t *testing.T) {
	plan := tinyllamaPlan(t)
	dir := t.TempDir()
	toks := "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"
	for _, tc := range []struct {
		args []string
		want string // "" succeeds
	}{
		{[]string{"run", plan, "-f", "prefill", "--input", "tokens=" + toks, "--input", "pos=112"}, ""},
		{[]string{"run", plan, "-f", "prefill", "--input", "tokens=[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,300]", "--input", "pos=0"},
			"input tokens[15] is 300: it must be at most 255"},
		{[]string{"run", plan, "-f", "prefill", "--input", "tokens=" + toks, "--input", "pos=-2"},
			"input pos is -2: it must be at least 0"},
		{[]string{"run", plan, "-f", "prefill", "--input", "tokens=" + toks, "--input", "pos=120"},
			"input pos is 120, seq is 16: pos + seq = 136 must be at most 128"},
		{[]string{"bench", plan, "-f", "decode", "-n", "1", "--input", "pos=128"}, "input pos is 128: it must be at most 127"},
		{[]string{"bench", plan, "-f", "decode", "-n", "1", "--input", "tokens=256"}, "input tokens[0] is 256: it must be at most 255"},
	} {
		r := runVKC(t, dir, nil, tc.args...)
		switch {
		case tc.want == "" && r.code != 0:
			t.Errorf("vkc %s: exit %d: %s", strings.Join(tc.args[2:], " "), r.code, r.stderr)
		case tc.want != "" && (r.code != 1 || !strings.Contains(r.stderr, tc.want)):
			t.Errorf("vkc %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args[2:], " "), r.code, r.stderr, tc.want)
		}
	}
}

// TestBinaryInputParsing: values that the CLI used to change silently (truncated to integers,
// reshaped, overflowed to Inf, an empty id dropped) are errors naming the input; what is merely
// written differently (a [1,4,16] file for f32[4,16], spaces) still works.
func TestBinaryInputParsing(t *testing.T) {
	dir := t.TempDir()
	mlp, _ := filepath.Abs("../../examples/mlp/model.yaml")
	tiny, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
	npyFile := func(name string, shape ...int) string {
		x := ir.NewTensor(ir.T(ir.F32, shape...))
		path := filepath.Join(dir, name)
		if err := npy.WriteFile(path, x); err != nil {
			t.Fatal(err)
		}
		return path
	}
	transposed := npyFile("t.npy", 16, 4)
	flat := npyFile("flat.npy", 64)
	lead := npyFile("lead.npy", 1, 4, 16)
	floats := strings.Repeat("0.5,", 63)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", tiny, "-f", "decode", "--input", "tokens=3", "--input", "pos=0.7"}, 1, "input pos: value 1: 0.7 is not an integer (the input is i32)"},
		{[]string{"eval", tiny, "-f", "decode", "--input", "tokens=1.9", "--input", "pos=0"}, 1, "input tokens: value 1: 1.9 is not an integer"},
		{[]string{"eval", tiny, "-f", "decode", "--input", "tokens=3", "--input", "pos=3e9"}, 1, "input pos: value 1: 3e+09 is outside the range of i32"},
		{[]string{"eval", tiny, "-f", "decode", "--input", "tokens=nan", "--input", "pos=0"}, 1, "input tokens: value 1: NaN is not an integer"},
		{[]string{"eval", mlp, "--input", "x=" + transposed}, 1, "is f32[16,4], the input is f32[4,16] (only dimensions of size 1 may differ)"},
		{[]string{"eval", mlp, "--input", "x=" + flat}, 1, "is f32[64], the input is f32[4,16]"},
		{[]string{"eval", mlp, "--input", "x=" + lead}, 0, "probs f32[4,10]"},
		{[]string{"eval", mlp, "--input", "x=[" + floats + "1e40]"}, 1, "input x: value 64: 1e+40 overflows f32"},
		{[]string{"eval", mlp, "--input", "x=[" + floats + "1e999]"}, 1, "value 64 (\"1e999\") overflows any float"},
		{[]string{"eval", mlp, "--input", "x=[" + floats + "]"}, 1, "value 64 is empty"},
		{[]string{"eval", mlp, "--input", "x=[ " + strings.ReplaceAll(floats, ",", " , ") + "-inf ]"}, 0, "probs f32[4,10]"},
		{[]string{"run", "no.plan", "--prompt-ids", "1,,2"}, 2, `--prompt-ids: id 2 of "1,,2" is empty`},
		{[]string{"run", "no.plan", "--prompt-ids", "1,2,"}, 2, "id 3 of \"1,2,\" is empty"},
		{[]string{"run", "no.plan", "--prompt-ids", "1,2.5"}, 2, `id 2: "2.5" is not a token id`},
	} {
		r := runVKC(t, dir, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("vkc %s: exit %d, output %q%q; want exit %d and %q", strings.Join(tc.args[2:], " "), r.code, r.stdout, firstLine(r.stderr), tc.code, tc.want)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
