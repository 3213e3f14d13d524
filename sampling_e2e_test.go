package vkc

import (
	"context"
	"fmt"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/plan"
)

// interpPlan is an engine.Executable backed by the reference interpreter over the functions a
// compile gave the plan (the generation outputs included), so a plan's generation can be
// compared with the interpreter's step for step.
type interpPlan struct {
	p *plan.Plan
	m *ir.Model
	s *interp.Session
}

func (e *interpPlan) Plan() *plan.Plan { return e.p }
func (e *interpPlan) Run(_ context.Context, fn string, in map[string][]byte) (map[string][]byte, error) {
	f := e.p.Function(fn)
	ins := map[string]*ir.Tensor{}
	for i := range f.Inputs {
		x, err := ValueTensor(&f.Inputs[i], in[f.Inputs[i].Name])
		if err != nil {
			return nil, err
		}
		ins[f.Inputs[i].Name] = x
	}
	outs, err := e.s.Run(fn, ins)
	if err != nil {
		return nil, err
	}
	res := map[string][]byte{}
	for k, x := range outs {
		res[k] = x.Data
	}
	return res, nil
}

// TestSamplingPlan: tinyllama compiled with the generation outputs (next_token and the top-64
// candidates) for the device: the device's argtopk and the logits it takes match the
// interpreter's (ranks within tolerance); and generation on the device chooses the tokens the
// interpreter's generation chooses with the same options — greedy (the device's argmax),
// sampling top-k 40 (the device's candidates, no logits row read), with a repeat penalty, and
// top-k 0 (the whole row on the host).
func TestSamplingPlan(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	opts := Options{Target: targetOf(d), ArgmaxOutput: true, TopK: DefaultTopK}
	p, _ := compileExample(t, m, opts)
	exe := roundTrip(t, d, p)
	fns, _, err := addLMOutputs(m, m.Functions, true, DefaultTopK)
	if err != nil {
		t.Fatal(err)
	}
	mm := *m
	mm.Functions = fns
	ref := &interpPlan{p: p, m: &mm, s: interp.NewSession(&mm)}

	// One prefill: the candidates against the interpreter.
	ctx := context.Background()
	prompt := []int32{37, 235, 140, 72, 5, 9, 100, 200, 3}
	in := map[string][]byte{"tokens": engine.Int32Bytes(prompt...), "pos": engine.Int32Bytes(0)}
	got, err := exe.Run(ctx, "prefill", in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Run(ctx, "prefill", in)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Function("prefill")
	gt, _ := Outputs(f, got)
	wt, _ := Outputs(f, want)
	if msg := tune.CompareTopK(gt[TopIDsOutput], wt["logits"], DefaultTopK, oracleTol); msg != "" {
		t.Errorf("top_ids: %s", msg)
	}
	compare(t, "top_logits", gt[TopLogitsOutput], wt[TopLogitsOutput])
	if fmt.Sprint(gt[TopIDsOutput].Float64s()[:8]) != fmt.Sprint(wt[TopIDsOutput].Float64s()[:8]) {
		t.Logf("note: device and interpreter rank the first 8 differently (near ties): %v, %v", gt[TopIDsOutput].Float64s()[:8], wt[TopIDsOutput].Float64s()[:8])
	}

	for _, c := range []struct {
		name       string
		s          engine.Sampling
		candidates int
		rows       bool
	}{
		{"greedy", engine.Sampling{}, 0, false},
		{"top-k 40", engine.Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, MinP: 0.02, Seed: 5}, DefaultTopK, false},
		{"penalty", engine.Sampling{Temperature: 0.7, TopK: 20, RepeatPenalty: 1.3, Seed: 6}, DefaultTopK, false},
		{"top-k 0", engine.Sampling{Temperature: 1.2, Seed: 7}, 0, true},
	} {
		o := engine.GenerateOptions{MaxTokens: 12, Sampling: c.s}
		if err := exe.ResetState(); err != nil {
			t.Fatal(err)
		}
		g, err := engine.GenerateIDs(ctx, exe, prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref.s.Reset()
		w, err := engine.GenerateIDs(ctx, ref, prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(g.Tokens) != fmt.Sprint(w.Tokens) {
			t.Errorf("%s: device %v, interpreter %v", c.name, g.Tokens, w.Tokens)
		}
		if g.Candidates != c.candidates || (g.RowSteps > 0) != c.rows || g.HostArgmax {
			t.Errorf("%s: %d candidates, %d row steps, host argmax %v", c.name, g.Candidates, g.RowSteps, g.HostArgmax)
		}
		t.Logf("%s: %v (%d steps read the whole row)", c.name, g.Tokens, g.RowSteps)
	}
}
