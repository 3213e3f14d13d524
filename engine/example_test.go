package engine_test

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// TestMain compiles the plans the examples load (tinyllama and mlp, for the default device)
// into a temporary folder and runs the tests there, so that the examples read like a user's
// program: engine.Load("tinyllama.plan", ...). Without a Vulkan device the examples cannot run
// and are left out (the tests still run, and skip what needs a device), saying so.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		fmt.Fprintf(os.Stderr, "engine: examples not run: no Vulkan device (they load plans on one; lavapipe is enough): %v\n", err)
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			flag.Set("test.run", "^Test")
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "vkc-engine-examples")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"tinyllama", "mlp"} {
		if err := compileExample(name, filepath.Join(dir, name+".plan")); err != nil {
			fmt.Fprintf(os.Stderr, "engine: compile the %s example for the examples: %v\n", name, err)
			return 1
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Chdir(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.Chdir(wd)
	moduleDir = filepath.Join(wd, "..")
	return m.Run()
}

// moduleDir is the module's root: the tests run in the folder of the examples' plans, so they
// name the module's files by src.
var moduleDir = ".."

func src(path string) string { return filepath.Join(moduleDir, path) }

func compileExample(name, out string) error {
	m, err := ir.ParseModel(filepath.Join("..", "examples", name, "model.yaml"))
	if err != nil {
		return err
	}
	p, _, err := vkc.Compile(context.Background(), m, vkc.Options{ArgmaxOutput: true})
	if err != nil {
		return err
	}
	return p.WriteFile(out)
}

// Greedy generation with the tinyllama example: the prompt and the tokens are those of the
// Hugging Face oracle (testdata/hf/tinyllama: input_ids and greedy_tokens).
func Example() {
	ctx := context.Background()
	m, err := engine.Load("tinyllama.plan", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	prompt := []int32{37, 235, 140, 72, 255, 137, 203, 133, 79, 192, 144, 129, 204, 71, 237, 252}
	g, err := m.GenerateIDs(ctx, prompt, engine.GenerateOptions{MaxTokens: 9}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("prompt through", g.PrefillFn, "then", g.DecodeFn)
	fmt.Println("tokens", g.Tokens)
	fmt.Println("argmax on the device:", !g.HostArgmax)
	// Output:
	// prompt through prefill then decode
	// tokens [101 175 85 117 132 175 6 182 26]
	// argmax on the device: true
}

// One function run with Go values in and out: the mlp example's forward takes x f32[4, 16] and
// returns probs f32[4, 10] and label i32[4]. The labels are the reference interpreter's for the
// same input (vkc eval examples/mlp/model.yaml --input x=-0.75,-0.5,... prints them).
func ExampleModel_Call() {
	ctx := context.Background()
	m, err := engine.Load("mlp.plan", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	x := make([]float32, 4*16)
	for i := range x {
		x[i] = float32(i%7-3) / 4
	}
	res, err := m.Call(ctx, "forward", map[string]any{"x": engine.WithShape(x, 4, 16)})
	if err != nil {
		log.Fatal(err)
	}
	probs, err := res.Float32s("probs")
	if err != nil {
		log.Fatal(err)
	}
	labels, err := res.Int32s("label")
	if err != nil {
		log.Fatal(err)
	}
	sum := float32(0)
	for _, p := range probs[:10] {
		sum += p
	}
	fmt.Println("probs", res.Shape("probs"), "row 0 sums to", fmt.Sprintf("%.4f", sum))
	fmt.Println("labels", labels)

	// A mistake is caught before anything runs, naming the input.
	_, err = m.Call(ctx, "forward", map[string]any{"x": x[:60]})
	fmt.Println(err)
	// Output:
	// probs [4 10] row 0 sums to 1.0000
	// labels [7 3 2 5]
	// function forward: input x: 60 values for f32[4 16] (64 elements)
}

// Encode converts Go values into a function input's plan layout, the bytes Executable.Run
// takes; f16 inputs accept float32 values (rounded to nearest even) or raw bits.
func ExampleEncode() {
	in := &plan.Value{Name: "x", DType: plan.F16, Shape: []int64{3}}
	b, err := engine.Encode(in, []float32{1, -2.5, 0.1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("% x\n", b)
	_, err = engine.Encode(&plan.Value{Name: "tokens", DType: plan.I32, Shape: []int64{2}}, []float32{1, 2})
	fmt.Println(err)
	// Output:
	// 00 3c 00 c1 66 2e
	// input tokens: float32 values (convert them explicitly: an integer input would truncate) for i32[2]
}

// Decode steps with bytes in the plan layout, through the embedded Executable's RunInto, which
// allocates nothing: a loop that keeps its buffers. The tokens are the reference interpreter's
// (vkc eval examples/tinyllama/model.yaml -f decode --input tokens=37 --input pos=0 --greedy 4).
func ExampleModel_RunInto() {
	ctx := context.Background()
	m, err := engine.Load("tinyllama.plan", engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	f, err := m.Function("decode")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("decode takes", engine.Signature(f.Inputs), "and returns", engine.Signature(f.Outputs))
	next := make([]byte, 4) // next_token i32[1]; the logits are not read back
	tok := int32(37)
	var got []int32
	for pos := int32(0); pos < 4; pos++ {
		in := map[string][]byte{"tokens": engine.Int32Bytes(tok), "pos": engine.Int32Bytes(pos)}
		if err := m.RunInto(ctx, "decode", in, map[string][]byte{"next_token": next}); err != nil {
			log.Fatal(err)
		}
		tok = engine.Int32s(next)[0]
		got = append(got, tok)
	}
	fmt.Println(got)
	// Output:
	// decode takes tokens i32[1], pos i32[] and returns logits f32[1 256], next_token i32[1]
	// [181 192 102 36]
}
