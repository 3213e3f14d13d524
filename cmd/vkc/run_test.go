package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// addPlan is a hand-written plan (no compiler involved) for the device vkc would use: function
// "add" computes c = a + b over 256 floats with runtime/testdata/add.spv. It lets the run,
// bench and inspect commands be tested whatever the state of lowering. Without Vulkan the test
// is skipped.
func addPlan(t *testing.T) (string, plan.Fingerprint) {
	t.Helper()
	devs, chosen, err := runtime.Devices(runtime.Options{})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	var fp plan.Fingerprint
	for i := range devs {
		if devs[i].Index == chosen {
			fp = vkc.Fingerprint(&devs[i])
		}
	}
	spv, err := os.ReadFile("../../runtime/testdata/add.spv")
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint32, len(spv)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(spv[4*i:])
	}
	v := func(name string) plan.Value {
		return plan.Value{Name: name, DType: plan.F32, Shape: []int64{256}, Place: plan.Staging}
	}
	ref := func(kind plan.RegionKind, i uint32) plan.BufferRef {
		return plan.BufferRef{Region: plan.Region{Kind: kind, Index: i}, Range: 1024}
	}
	p := &plan.Plan{
		CompilerVersion: "hand-written", Model: "add", Device: fp,
		Modules: []plan.Module{{
			Key: "add/f32[256]", SPIRV: words, Entry: "main",
			Bindings:         []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Read}, {Binding: 2, Access: plan.Write}},
			PushConstantSize: 4, SpecConstants: []plan.SpecConstant{{ID: 0, Value: 64}}, Workgroup: [3]uint32{64, 1, 1},
		}},
		Functions: []plan.Function{{
			Name: "add", Inputs: []plan.Value{v("a"), v("b")}, Outputs: []plan.Value{v("c")},
			Dispatches: []plan.Dispatch{{
				Module: 0,
				Bindings: []plan.Binding{{Binding: 0, Buffer: ref(plan.RegionInput, 0)},
					{Binding: 1, Buffer: ref(plan.RegionInput, 1)}, {Binding: 2, Buffer: ref(plan.RegionOutput, 0)}},
				Push: []byte{0, 1, 0, 0}, // n = 256
				Grid: [3]uint32{4, 1, 1}, Ops: []string{"add"},
			}},
		}},
	}
	path := filepath.Join(t.TempDir(), "add.plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path, fp
}

func f32Tensor(vals func(i int) float64) *ir.Tensor {
	x := ir.NewTensor(ir.T(ir.F32, 256))
	for i := 0; i < 256; i++ {
		x.SetFloat64(i, vals(i))
	}
	return x
}

func TestRunHandWrittenPlan(t *testing.T) {
	path, _ := addPlan(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.npy")
	if err := npy.WriteFile(a, f32Tensor(func(i int) float64 { return float64(i) })); err != nil {
		t.Fatal(err)
	}
	bfile := filepath.Join(dir, "in.safetensors")
	if err := safetensors.Write(bfile, map[string]*ir.Tensor{"bee": f32Tensor(func(i int) float64 { return 0.5 })}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	code, stdout, stderr := runCLI(t, "run", path, "-f", "add", "--input", "a="+a, "--input", "b="+bfile+":bee", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	res, err := safetensors.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	c := res["c"]
	for i := 0; i < 256; i++ {
		if got := c.Float64(i); got != float64(i)+0.5 {
			t.Fatalf("c[%d] = %g, want %g", i, got, float64(i)+0.5)
		}
	}
	// Printed summary instead of a file.
	code, stdout, stderr = runCLI(t, "run", path, "-f", "add", "--input", "a="+a, "--input", "b="+a)
	if code != 0 || !strings.Contains(stdout, "c = f32[256] [0 2 4 6") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestBenchHandWrittenPlan(t *testing.T) {
	path, _ := addPlan(t)
	code, stdout, stderr := runCLI(t, "bench", path, "-f", "add", "-n", "5", "--peaks=false")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	t.Log("\n" + stdout)
	for _, want := range []string{"GPU time   median", "wall time  median", "1 dispatches, 0 barriers", "add/f32[256]", "100.0%"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestInspectHandWrittenPlan(t *testing.T) {
	path, _ := addPlan(t)
	code, stdout, stderr := runCLI(t, "inspect", "-check-device", path)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	for _, want := range []string{`plan for model "add"`, "function add: 1 dispatches", "add/f32[256]", "runs on device", "fits: the plan needs "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, stdout)
		}
	}
}

// A plan that needs more device memory than the heap has (a KV cache of 1 TiB) is refused by
// inspect --check-device and by the loader (bench here), before anything is allocated, with what would fit.
func TestTooLargeForTheHeap(t *testing.T) {
	path, _ := addPlan(t)
	p, err := plan.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p.State = []plan.StateTensor{{Name: "k_cache.0", DType: plan.F32, Shape: []int64{1 << 20, 64, 4096}}}
	p.StateSize = 1 << 40
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "inspect", "-check-device", path)
	if code != 1 || !strings.Contains(stderr, "the plan needs 1.0 TiB of device memory") || !strings.Contains(stderr, "would fit: a context of") {
		t.Errorf("inspect: exit %d, stderr %q (stdout %d bytes)", code, stderr, len(stdout))
	}
	code, _, stderr = runCLI(t, "bench", path, "-f", "add", "-n", "1", "--peaks=false")
	if code != 1 || !strings.Contains(stderr, "the plan needs 1.0 TiB") || !strings.Contains(stderr, "out of device memory") {
		t.Errorf("bench: exit %d, stderr %q", code, stderr)
	}
}

// TestPlanCommandErrors covers what a user gets wrong: a missing file, a file that is not a
// plan, a truncated or damaged plan, a plan for another device, wrong inputs, and usage errors.
func TestPlanCommandErrors(t *testing.T) {
	path, fp := addPlan(t)
	dir := t.TempDir()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	truncated := write("truncated.plan", good[:len(good)*2/3])
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)/2] ^= 0x40
	corruptPath := write("corrupt.plan", corrupt)
	foreign := write("foreign.plan", []byte("model: tinyllama\ndims: {}\n"))

	other := fp
	other.VendorID ^= 0xffff
	other.DeviceName = "some other GPU"
	p, err := plan.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p.Device = other
	otherPath := filepath.Join(dir, "other.plan")
	if err := p.WriteFile(otherPath); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dir, "a.npy")
	if err := npy.WriteFile(a, f32Tensor(func(i int) float64 { return 1 })); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.npy")
	if err := npy.WriteFile(short, ir.NewTensor(ir.T(ir.F32, 3))); err != nil {
		t.Fatal(err)
	}
	ok := []string{"-f", "add", "--input", "a=" + a, "--input", "b=" + a}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{append([]string{"run", filepath.Join(dir, "missing.plan")}, ok...), 1, "no such file"},
		{append([]string{"run", foreign}, ok...), 1, "not a vkc plan"},
		{append([]string{"run", truncated}, ok...), 1, "truncated plan"},
		{append([]string{"run", corruptPath}, ok...), 1, "corrupt plan"},
		{append([]string{"run", otherPath}, ok...), 1, `plan was compiled for "some other GPU"`},
		{[]string{"inspect", truncated}, 1, "truncated plan"},
		{[]string{"bench", corruptPath, "-f", "add"}, 1, "corrupt plan"},
		{[]string{"run", path, "-f", "add", "--input", "a=" + a}, 2, "missing --input b"},
		{[]string{"run", path, "-f", "add", "--input", "a=" + a, "--input", "b=" + a, "--input", "x=1"}, 2, `no input "x"`},
		{[]string{"run", path, "-f", "add", "--input", "a=" + short, "--input", "b=" + a}, 1, "is f32[3], the input is f32[256]"},
		{[]string{"run", path, "-f", "mul"}, 2, `no function "mul" (it has add)`},
		{[]string{"run", path}, 2, "missing --input a (function add takes"}, // -f: the plan's only function
		{[]string{"run"}, 2, "want one plan file"},
		{[]string{"run", path, "--prompt-ids", "1,x"}, 2, `"x" is not a token id`},
		{[]string{"run", path, "--prompt-ids", "1,2", "--steps", "2"}, 1, "no decode function"},
		{[]string{"bench", path, "-f", "add", "-n", "0"}, 2, "-n 0"},
		{[]string{"compile", "../../examples/mlp/model.yaml"}, 2, "-o plan.bin is required"},
		{[]string{"compile", "../../examples/mlp/model.yaml", "-o", filepath.Join(dir, "x.plan"), "--weights", "sideways"}, 2, "want inline or external"},
		{[]string{"compile", filepath.Join(dir, "nope.yaml"), "-o", filepath.Join(dir, "x.plan")}, 1, "no such file"},
		{[]string{"compile", "../../examples/mlp/model.yaml", "-o", filepath.Join(dir, "x.plan"), "--tune", "--no-tune"}, 2, "exclude each other"},
		{[]string{"compile", "../../examples/mlp/model.yaml", "-o", filepath.Join(dir, "x.plan"), "--no-tune", "--budget", "1m"}, 2, "go with measuring, not --no-tune"},
		{[]string{"compile", "../../examples/mlp/model.yaml", "-o", filepath.Join(dir, "x.plan"), "-f", "nope"}, 1, `no function "nope"`},
	} {
		code, stdout, stderr := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q); want exit %d and %q", c.args, code, stderr, stdout, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.plan")); !os.IsNotExist(err) {
		t.Errorf("a failed compile left %s (%v)", filepath.Join(dir, "x.plan"), err)
	}
}

func TestPlanCommandsHelp(t *testing.T) {
	for _, name := range []string{"compile", "run", "bench", "inspect"} {
		for _, args := range [][]string{{name, "-h"}, {name, "x.plan", "-h"}} {
			code, _, errs := runCLI(t, args...)
			if code != 0 || !strings.Contains(errs, "usage: vkc "+name) {
				t.Errorf("%v: exit %d, stderr %q", args, code, errs)
			}
		}
	}
}

// TestCompileAndGenerate compiles tinyllama with the CLI for the device, generates from the HF
// prompt (the tokens must be HF's greedy ones), and checks the --dot and --dump-kernels outputs
// and inspect.
func TestCompileAndGenerate(t *testing.T) {
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "tl.plan")
	dotFile := filepath.Join(dir, "chosen.dot")
	kdir := filepath.Join(dir, "kernels")
	code, stdout, stderr := runCLI(t, "compile", "../../examples/tinyllama/model.yaml", "-o", out, "--dot", dotFile, "--dump-kernels", kdir)
	if code != 0 {
		t.Fatalf("compile: exit %d: %s%s", code, stdout, stderr)
	}
	for _, want := range []string{"compiled tinyllama", "prefill", "decode", "wrote " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("compile's report lacks %q:\n%s", want, stderr)
		}
	}
	dot, err := os.ReadFile(dotFile)
	if err != nil || !strings.Contains(string(dot), "digraph plan") || !strings.Contains(string(dot), "->") {
		t.Errorf("--dot wrote %q (%v)", dot, err)
	}
	spv, _ := filepath.Glob(filepath.Join(kdir, "*.spv"))
	if len(spv) == 0 {
		t.Errorf("--dump-kernels wrote no .spv files")
	}
	code, stdout, stderr = runCLI(t, "run", out, "--prompt-ids", "37,235,140,72,255,137,203,133,79,192,144,129,204,71,237,252", "--steps", "9")
	if code != 0 || !strings.Contains(stdout, "greedy tokens: 101 175 85 117 132 175 6 182 26\n") || !strings.Contains(stdout, "argmax on the device") {
		t.Errorf("run --prompt-ids: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The 16-token prompt goes through one run of the 1..64 prefill, not token by token.
	if !strings.Contains(stdout, "prompt: 16 tokens through prefill in ") {
		t.Errorf("run --prompt-ids: the prompt did not go through one prefill run:\n%s", stdout)
	}
	// 100 tokens: in chunks of the capacity, 64 and 36.
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa((7*i + 3) % 256)
	}
	code, stdout, stderr = runCLI(t, "run", out, "--prompt-ids", strings.Join(ids, ","), "--steps", "2")
	if code != 0 || !strings.Contains(stdout, "prompt: 100 tokens through prefill in 2 runs") {
		t.Errorf("run --prompt-ids of 100 tokens: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "inspect", out)
	if code != 0 || !strings.Contains(stdout, "function decode") || !strings.Contains(stdout, "rules applied") {
		t.Errorf("inspect: exit %d:\n%s", code, stdout)
	}

	// A failing compile leaves an existing plan untouched.
	before, _ := os.ReadFile(out)
	code, _, _ = runCLI(t, "compile", "../../examples/tinyllama/model.yaml", "-o", out, "-f", "nope")
	after, _ := os.ReadFile(out)
	if code != 1 || !bytes.Equal(before, after) {
		t.Errorf("failed compile: exit %d, plan changed: %v", code, !bytes.Equal(before, after))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".tl.plan.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
