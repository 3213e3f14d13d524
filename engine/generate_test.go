package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/plan"
)

// interpExe is an Executable backed by the reference interpreter, so Generate's prompt chunking
// and argmax are tested against an oracle without a device or a compiler.
type interpExe struct {
	p    *plan.Plan
	s    *interp.Session
	runs []string // "fn@pos/n" of every run, for the chunking test
}

// planSignature describes the model's functions as a plan would (signatures only, no dispatches).
func planSignature(t testing.TB, m *ir.Model) *plan.Plan {
	t.Helper()
	p := &plan.Plan{Model: m.Name}
	val := func(name string, typ ir.Type) plan.Value {
		d, err := vkc.PlanDType(typ.DType)
		if err != nil {
			t.Fatal(err)
		}
		s := make([]int64, len(typ.Shape))
		for i, n := range typ.Shape {
			s[i] = int64(n)
		}
		return plan.Value{Name: name, DType: d, Shape: s, Place: plan.Staging}
	}
	for _, f := range m.Functions {
		pf := plan.Function{Name: f.Name}
		for _, in := range f.Inputs {
			pf.Inputs = append(pf.Inputs, val(in.Name, in.Type()))
		}
		for _, o := range f.Outputs {
			pf.Outputs = append(pf.Outputs, val(o.Name, o.Value.Type()))
		}
		p.Functions = append(p.Functions, pf)
	}
	for _, d := range m.State {
		pd, _ := vkc.PlanDType(d.Type.DType)
		s := make([]int64, len(d.Type.Shape))
		for i, n := range d.Type.Shape {
			s[i] = int64(n)
		}
		p.State = append(p.State, plan.StateTensor{Name: d.Name, DType: pd, Shape: s})
	}
	return p
}

func (e *interpExe) Plan() *plan.Plan { return e.p }

func (e *interpExe) Run(_ context.Context, fn string, inputs map[string][]byte) (map[string][]byte, error) {
	f := e.p.Function(fn)
	if f == nil {
		return nil, fmt.Errorf("no function %s", fn)
	}
	ins := map[string]*ir.Tensor{}
	for i := range f.Inputs {
		x, err := vkc.ValueTensor(&f.Inputs[i], inputs[f.Inputs[i].Name])
		if err != nil {
			return nil, err
		}
		ins[f.Inputs[i].Name] = x
	}
	e.runs = append(e.runs, fmt.Sprintf("%s@%d/%d", fn, engine.Int32s(inputs["pos"])[0], len(engine.Int32s(inputs["tokens"]))))
	outs, err := e.s.Run(fn, ins)
	if err != nil {
		return nil, err
	}
	res := map[string][]byte{}
	for name, x := range outs {
		res[name] = x.Data
	}
	return res, nil
}

func TestGenerateMatchesOracle(t *testing.T) {
	m, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gold, err := safetensors.ReadAll(src("testdata/hf/tinyllama/golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
	prompt := engine.Int32s(gold["input_ids"].Data)
	g, err := engine.Generate(context.Background(), exe, prompt, 9)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Int32s(gold["greedy_tokens"].Data)
	if fmt.Sprint(g.Tokens) != fmt.Sprint(want) {
		t.Errorf("tokens %v, want %v", g.Tokens, want)
	}
	if !g.HostArgmax || g.PrefillFn != "prefill" || g.DecodeFn != "decode" || len(g.Steps) != 8 {
		t.Errorf("generation %+v: want host argmax, prefill then decode, 8 steps", g)
	}
	if got := fmt.Sprint(exe.runs[:2]); got != "[prefill@0/16 decode@16/1]" {
		t.Errorf("runs start %s", got)
	}
}

// A prompt that is not a multiple of prefill's length goes through decode for the rest, and gives
// the same tokens as feeding everything through decode.
func TestGenerateChunking(t *testing.T) {
	m, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 19)
	for i := range prompt {
		prompt[i] = int32(7*i+3) % 256
	}
	exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
	g, err := engine.Generate(context.Background(), exe, prompt, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(exe.runs); got != "[prefill@0/16 decode@16/1 decode@17/1 decode@18/1 decode@19/1 decode@20/1]" {
		t.Errorf("runs %s", got)
	}
	// The same model without prefill: everything through decode.
	p2 := planSignature(t, m)
	p2.Functions = []plan.Function{*p2.Function("decode")}
	exe2 := &interpExe{p: p2, s: interp.NewSession(m)}
	g2, err := engine.Generate(context.Background(), exe2, prompt, 3)
	if err != nil {
		t.Fatal(err)
	}
	if g.Prefilled != 16 || g2.Prefilled != 0 {
		t.Errorf("prefilled %d and %d tokens, want 16 and 0", g.Prefilled, g2.Prefilled)
	}
	if fmt.Sprint(g.Tokens) != fmt.Sprint(g2.Tokens) || g2.PrefillFn != "" {
		t.Errorf("with prefill %v, decode only %v (prefill fn %q)", g.Tokens, g2.Tokens, g2.PrefillFn)
	}
}

func TestGenerateErrors(t *testing.T) {
	m, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := planSignature(t, m)
	exe := &interpExe{p: p, s: interp.NewSession(m)}
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		prompt []int32
		steps  int
		want   string
	}{
		{"empty", nil, 1, "empty prompt"},
		{"steps", []int32{1}, 0, "0 steps"},
		{"too long", []int32{1, 2}, 200, "cache holds 128"},
		{"vocab", []int32{1, 256}, 1, "outside the vocabulary"},
	} {
		_, err := engine.Generate(ctx, exe, c.prompt, c.steps)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	mlp, err := ir.ParseModel(src("examples/mlp/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.Generate(ctx, &interpExe{p: planSignature(t, mlp)}, []int32{1}, 1)
	if err == nil || !strings.Contains(err.Error(), "no decode function") {
		t.Errorf("mlp: error %v, want no decode function", err)
	}
}

func TestArgmax(t *testing.T) {
	nan := float32(0)
	nan = nan / nan
	for _, c := range []struct {
		xs   []float32
		want int
	}{
		{nil, -1},
		{[]float32{1}, 0},
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{nan, nan}, 0},
		{[]float32{-5, -1, -3}, 1},
	} {
		if got := engine.Argmax(c.xs); got != c.want {
			t.Errorf("engine.Argmax(%v) = %d, want %d", c.xs, got, c.want)
		}
	}
}

// fixedExe answers every run with the same outputs.
type fixedExe struct {
	p    *plan.Plan
	outs map[string][]byte
}

func (e *fixedExe) Plan() *plan.Plan { return e.p }
func (e *fixedExe) Run(context.Context, string, map[string][]byte) (map[string][]byte, error) {
	return e.outs, nil
}

// Logits in f16 or bf16 (SmolLM2's plan) are decoded on the host; an i32 output is read as the
// device's argmax.
func TestGenerateLogitTypes(t *testing.T) {
	in := []plan.Value{{Name: "tokens", DType: plan.I32, Shape: []int64{1}}, {Name: "pos", DType: plan.I32, Shape: []int64{}}}
	vals := []float64{0.5, -1, 3, 2.5}
	for _, c := range []struct {
		out  plan.Value
		data []byte
		host bool
	}{
		{plan.Value{Name: "logits", DType: plan.F16, Shape: []int64{1, 4}}, ir.TensorFromFloat64s(ir.T(ir.F16, 1, 4), vals).Data, true},
		{plan.Value{Name: "logits", DType: plan.BF16, Shape: []int64{1, 4}}, ir.TensorFromFloat64s(ir.T(ir.BF16, 1, 4), vals).Data, true},
		{plan.Value{Name: "logits", DType: plan.F32, Shape: []int64{1, 4}}, ir.TensorFromFloat64s(ir.T(ir.F32, 1, 4), vals).Data, true},
		{plan.Value{Name: "next", DType: plan.I32, Shape: []int64{1}}, engine.Int32Bytes(2), false},
	} {
		p := &plan.Plan{Model: "toy", Functions: []plan.Function{{Name: "decode", Inputs: in, Outputs: []plan.Value{c.out}}}}
		g, err := engine.Generate(context.Background(), &fixedExe{p: p, outs: map[string][]byte{c.out.Name: c.data}}, []int32{1}, 3)
		if err != nil {
			t.Fatalf("%s %s: %v", c.out.Name, c.out.DType, err)
		}
		if fmt.Sprint(g.Tokens) != "[2 2 2]" || g.HostArgmax != c.host {
			t.Errorf("%s %s: tokens %v, host argmax %v", c.out.Name, c.out.DType, g.Tokens, g.HostArgmax)
		}
	}
}
