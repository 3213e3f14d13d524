package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/ir/safetensors"
)

const tinyllama = "../../examples/tinyllama/model.yaml"
const golden = "../../testdata/hf/tinyllama/golden.safetensors"

func TestEvalGreedyMatchesOracle(t *testing.T) {
	code, out, errs := runCLI(t, "eval", tinyllama, "-f", "prefill", "--input", "tokens="+golden+":input_ids", "--input", "pos=0", "--greedy", "9")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// testdata/hf/tinyllama greedy_tokens
	if !strings.Contains(out, "greedy tokens: 101 175 85 117 132 175 6 182 26\n") {
		t.Errorf("output:\n%s", out)
	}
	if !strings.Contains(out, "logits f32[16,256] [") {
		t.Errorf("output:\n%s", out)
	}
}

// TestEvalFilesAndState runs prefill writing outputs and state, then decode from that state with
// a .npy input, and checks the decode logits against the oracle's first decode row.
func TestEvalFilesAndState(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "state.safetensors")
	code, _, errs := runCLI(t, "eval", tinyllama, "-f", "prefill", "--input", "tokens="+golden+":input_ids", "--input", "pos=0",
		"-o", filepath.Join(dir, "prefill.safetensors"), "--state-to", st)
	if code != 0 {
		t.Fatalf("prefill: exit %d: %s", code, errs)
	}
	gold, err := safetensors.ReadAll(golden)
	if err != nil {
		t.Fatal(err)
	}
	tok := ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{gold["decode_tokens"].Float64(0)})
	if err := npy.WriteFile(filepath.Join(dir, "tok.npy"), tok); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "eval", tinyllama, "-f", "decode", "--input", "tokens="+filepath.Join(dir, "tok.npy"), "--input", "pos=16",
		"--state-from", st, "-o", filepath.Join(dir, "logits.npy"))
	if code != 0 {
		t.Fatalf("decode: exit %d: %s", code, errs)
	}
	got, err := npy.ReadFile(filepath.Join(dir, "logits.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want := gold["decode_logits"]
	worst := 0.0
	for i := 0; i < 256; i++ {
		d := got.Float64(i) - want.Float64(i)
		worst = max(worst, d, -d)
	}
	if worst > 1e-4 {
		t.Errorf("decode logits from a saved state differ from HF by %g", worst)
	}
	pre, err := safetensors.ReadAll(filepath.Join(dir, "prefill.safetensors"))
	if err != nil || pre["logits"] == nil || !pre["logits"].Type.Equal(ir.T(ir.F32, 16, 256)) {
		t.Errorf("prefill.safetensors: %v %v", pre, err)
	}
	// A directory gets one .npy per output.
	code, _, errs = runCLI(t, "eval", "../../examples/mlp/model.yaml", "--input", "x="+strings.Repeat("0.5,", 63)+"0.5", "-o", filepath.Join(dir, "mlp"))
	if code != 0 {
		t.Fatalf("mlp: exit %d: %s", code, errs)
	}
	for _, n := range []string{"probs.npy", "label.npy"} {
		if _, err := os.Stat(filepath.Join(dir, "mlp", n)); err != nil {
			t.Error(err)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=5"}, 2, "missing --input pos (function decode takes tokens i32[1], pos i32[])"},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=5", "--input", "pos=0", "--input", "x=1"}, 2, `has no input "x"`},
		{[]string{"eval", tinyllama, "-f", "nope"}, 2, `no function "nope" (it has prefill, decode)`},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=[1,2]", "--input", "pos=0"}, 1, "2 values for i32[1]"},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=abc", "--input", "pos=0"}, 1, "not a number"},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=" + golden + ":nope", "--input", "pos=0"}, 1, `no tensor "nope"`},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=" + golden + ":input_ids", "--input", "pos=0"}, 1, "is i32[16], the input is i32[1]"},
		{[]string{"eval", tinyllama, "-f", "decode", "--input", "tokens=1", "--input", "pos=0", "--state-from", golden}, 1, "has no state"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}
