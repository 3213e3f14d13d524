package engine_test

import (
	"context"
	"fmt"
	"os"
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
		l := f.Length
		if l != nil {
			pf.Length = &plan.Length{Name: l.Dim, Min: uint32(l.Min), Max: uint32(l.Max)}
		}
		for i, in := range f.Inputs {
			v := val(in.Name, in.Type())
			v.Bounded = l != nil && l.Inputs[i]
			pf.Inputs = append(pf.Inputs, v)
		}
		for i, o := range f.Outputs {
			v := val(o.Name, o.Value.Type())
			v.Bounded = l != nil && l.Outputs[i]
			pf.Outputs = append(pf.Outputs, v)
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
	g, err := engine.GenerateIDs(context.Background(), exe, prompt, engine.GenerateOptions{MaxTokens: 9}, nil)
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

// staticTinyllama is examples/tinyllama with a prefill of static length 16.
func staticTinyllama(t *testing.T) *ir.Model {
	t.Helper()
	b, err := os.ReadFile(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "dims: {seq: 1..64}", "dims: {seq: 16}", 1)
	if s == string(b) {
		t.Fatal("examples/tinyllama's prefill is not 1..64")
	}
	m, err := ir.ParseModelBytes(src("examples/tinyllama/model.yaml"), []byte(s), src("examples/tinyllama"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A prefill with a run-time length (1..64) takes a prompt in one run when it fits and in chunks
// of 64 when it does not; a prefill of static length 16 takes full chunks and decode the rest.
// Every way gives the tokens of feeding the prompt through decode alone.
func TestGenerateChunking(t *testing.T) {
	bounded, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	static := staticTinyllama(t)
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(7*i+3) % 256
	}
	// The same model without prefill: everything through decode.
	p0 := planSignature(t, static)
	p0.Functions = []plan.Function{*p0.Function("decode")}
	ref := &interpExe{p: p0, s: interp.NewSession(static)}
	for _, tc := range []struct {
		m      *ir.Model
		prompt int
		runs   string
		chunks int
	}{
		{bounded, 19, "[prefill@0/19 decode@19/1 decode@20/1]", 1},
		{bounded, 1, "[prefill@0/1 decode@1/1 decode@2/1]", 1},
		{bounded, 100, "[prefill@0/64 prefill@64/36 decode@100/1 decode@101/1]", 2},
		{static, 19, "[prefill@0/16 decode@16/1 decode@17/1 decode@18/1 decode@19/1 decode@20/1]", 1},
	} {
		exe := &interpExe{p: planSignature(t, tc.m), s: interp.NewSession(tc.m)}
		g, err := engine.GenerateIDs(context.Background(), exe, prompt[:tc.prompt], engine.GenerateOptions{MaxTokens: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(exe.runs); got != tc.runs {
			t.Errorf("%d tokens: runs %s, want %s", tc.prompt, got, tc.runs)
		}
		if g.Chunks != tc.chunks || g.PrefillFn != "prefill" {
			t.Errorf("%d tokens: %d prefill runs of %q, want %d", tc.prompt, g.Chunks, g.PrefillFn, tc.chunks)
		}
		ref.s.Reset()
		g0, err := engine.GenerateIDs(context.Background(), ref, prompt[:tc.prompt], engine.GenerateOptions{MaxTokens: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(g.Tokens) != fmt.Sprint(g0.Tokens) || g0.PrefillFn != "" || g0.Prefilled != 0 {
			t.Errorf("%d tokens: with prefill %v, decode only %v (prefill fn %q)", tc.prompt, g.Tokens, g0.Tokens, g0.PrefillFn)
		}
	}
}

// Without a decode function, a prefill with a run-time length from 1 decodes too.
func TestGenerateBoundedPrefillDecodes(t *testing.T) {
	m, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := planSignature(t, m)
	p.Functions = []plan.Function{*p.Function("prefill")}
	exe := &interpExe{p: p, s: interp.NewSession(m)}
	g, err := engine.GenerateIDs(context.Background(), exe, []int32{5, 6, 7}, engine.GenerateOptions{MaxTokens: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(exe.runs); got != "[prefill@0/3 prefill@3/1 prefill@4/1]" || g.DecodeFn != "prefill" {
		t.Errorf("runs %s, decode fn %q", got, g.DecodeFn)
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
		{"steps", []int32{1}, -1, "-1 max tokens"},
		{"too long", make([]int32, 129), 1, "the prompt has 129 tokens; the plan's cache holds 128 positions"},
		{"vocab", []int32{1, 256}, 1, "outside the vocabulary"},
	} {
		_, err := engine.GenerateIDs(ctx, exe, c.prompt, engine.GenerateOptions{MaxTokens: c.steps}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	mlp, err := ir.ParseModel(src("examples/mlp/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.GenerateIDs(ctx, &interpExe{p: planSignature(t, mlp)}, []int32{1}, engine.GenerateOptions{MaxTokens: 1}, nil)
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
		g, err := engine.GenerateIDs(context.Background(), &fixedExe{p: p, outs: map[string][]byte{c.out.Name: c.data}}, []int32{1}, engine.GenerateOptions{MaxTokens: 3}, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", c.out.Name, c.out.DType, err)
		}
		if fmt.Sprint(g.Tokens) != "[2 2 2]" || g.HostArgmax != c.host {
			t.Errorf("%s %s: tokens %v, host argmax %v", c.out.Name, c.out.DType, g.Tokens, g.HostArgmax)
		}
	}
}

// lastRowTinyllama is examples/tinyllama whose prefill returns the last row's logits only (as
// an imported model's does: a slice of the run's last row before the LM head).
func lastRowTinyllama(t *testing.T) *ir.Model {
	t.Helper()
	b, err := os.ReadFile(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "logits: f32[seq, vocab]", "logits: f32[1, vocab]", 1)
	s = strings.Replace(s, "linear(rmsnorm(x, out_norm", "linear(rmsnorm(slice(x, axis=0, start=-1, end=seq), out_norm", 1)
	if strings.Count(s, "start=-1") != 1 || !strings.Contains(s, "logits: f32[1, vocab]") {
		t.Fatal("examples/tinyllama's prefill head is not where the test expects it")
	}
	m, err := ir.ParseModelBytes(src("examples/tinyllama/model.yaml"), []byte(s), src("examples/tinyllama"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A prefill that returns the last row's logits only (Step.LastRow) generates what one that
// returns every row does: in one run and in chunks, greedily (the host's argmax of the row)
// and sampling from the row.
func TestGenerateLastRowPrefill(t *testing.T) {
	all, err := ir.ParseModel(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	last := lastRowTinyllama(t)
	lm, err := engine.CausalLM(planSignature(t, last))
	if err != nil {
		t.Fatal(err)
	}
	if !lm.Prefill.LastRow || lm.Prefill.Function.Name != "prefill" || lm.Decode.LastRow {
		t.Fatalf("prefill last row %v (%s), decode last row %v; want the prefill's logits recognised as its last row", lm.Prefill.LastRow, lm.Prefill.Function.Name, lm.Decode.LastRow)
	}
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(11*i+5) % 256
	}
	for _, n := range []int{1, 19, 100} {
		for _, sm := range []engine.Sampling{{}, {Temperature: 0.8, TopP: 0.9, Seed: 7}} {
			var toks []string
			for _, m := range []*ir.Model{all, last} {
				exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
				g, err := engine.GenerateIDs(context.Background(), exe, prompt[:n], engine.GenerateOptions{MaxTokens: 4, Sampling: sm}, nil)
				if err != nil {
					t.Fatalf("%d tokens, %+v: %v", n, sm, err)
				}
				toks = append(toks, fmt.Sprint(g.Tokens))
			}
			if toks[0] != toks[1] {
				t.Errorf("%d tokens, %+v: every row's prefill gives %s, the last row's %s", n, sm, toks[0], toks[1])
			}
		}
	}
}
