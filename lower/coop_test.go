package lower_test

import (
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
)

// TestStaticChoiceCoop: with cooperative matrices (the H200's capabilities and the discrete-GPU
// model), lowering's static choice for SmolLM2-135M's prefill matmuls and attention is the
// cooperative-matrix template, and it is offered (so the tuner measures it); for decode's single
// row it is not; on lavapipe it is neither offered nor chosen.
func TestStaticChoiceCoop(t *testing.T) {
	f16 := ir.F16
	prob := func(op ir.Op, attrs ir.Attrs, args ...ir.Type) *kernels.Problem {
		_, outs, err := ir.Infer(op, attrs, args)
		if err != nil {
			t.Fatal(err)
		}
		return &kernels.Problem{Op: op, Attrs: attrs, Args: args, Outs: outs, NumOpArgs: len(args)}
	}
	T := ir.T
	cases := []struct {
		p    *kernels.Problem
		coop string // the template chosen on the H200 ("" : not a cooperative-matrix one)
	}{
		{prob(ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f16, 128, 576), T(f16, 576), T(f16, 960, 576)), "matmul_coop"},
		{prob(ir.Linear, nil, T(f16, 128, 576), T(f16, 576, 576)), "matmul_coop"},
		{prob(ir.RMSNormLinear, nil, T(f16, 128, 576), T(f16, 576), T(f16, 3072, 576)), "matmul_coop"},
		{prob(ir.Linear, nil, T(f16, 128, 1536), T(f16, 576, 1536)), "matmul_coop"},
		{prob(ir.RMSNormLinear, nil, T(f16, 128, 576), T(f16, 576), T(f16, 49152, 576)), "matmul_coop"},
		{prob(ir.Attention, ir.Attrs{"causal": true}, T(f16, 128, 9, 64), T(f16, 2048, 3, 64), T(f16, 2048, 3, 64), T(ir.I32)), "attention_coop"},
		{prob(ir.Linear, nil, T(f16, 1, 576), T(f16, 576, 576)), ""},
		{prob(ir.Attention, ir.Attrs{"causal": true}, T(f16, 1, 9, 64), T(f16, 2048, 3, 64), T(f16, 2048, 3, 64), T(ir.I32)), ""},
	}
	for _, c := range cases {
		tm, cfg, err := lower.StaticChoice(c.p, kernels.H200, lower.DiscreteGPU)
		if err != nil {
			t.Fatalf("%s: %v", c.p.Key(), err)
		}
		if c.coop != "" && tm.Name != c.coop {
			t.Errorf("H200: %s chose %s [%s], want %s", c.p.Key(), tm.Name, cfg.Key(), c.coop)
		}
		if c.coop == "" && strings.Contains(tm.Name, "coop") {
			t.Errorf("H200: %s chose %s for a single row", c.p.Key(), tm.Name)
		}
		ts, err := kernels.For(c.p, kernels.H200)
		if err != nil {
			t.Fatal(err)
		}
		offered := false
		for _, x := range ts {
			offered = offered || x.Name == c.coop
		}
		if c.coop != "" && !offered {
			t.Errorf("H200: %s is not offered %s", c.p.Key(), c.coop)
		}
		tl, _, err := lower.StaticChoice(c.p, kernels.Lavapipe, lower.Lavapipe)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(tl.Name, "coop") {
			t.Errorf("lavapipe: %s chose %s", c.p.Key(), tl.Name)
		}
	}
}
