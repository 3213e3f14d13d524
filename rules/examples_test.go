package rules

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestExamplesOptimized optimises every function of the small example models, as written and
// as primitives (DecomposeAll), and checks in the interpreter that the extracted graphs compute
// what the model does (outputs and state updates) on random inputs.
func TestExamplesOptimized(t *testing.T) {
	wantRule := map[string]string{"qwen3-tiny": "rope-norm", "tinyllama": "rmsnorm-linear", "llama-tied": "rmsnorm-linear"}
	for _, name := range []string{"tinyllama", "qwen3-tiny", "llama-tied", "whisper-tiny-encoder", "mlp"} {
		t.Run(name, func(t *testing.T) {
			m, err := ir.ParseModel("../examples/" + name + "/model.yaml")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range m.Functions {
				inputs := randomInputs(m, f, rand.New(rand.NewPCG(1, 2)))
				want, wantState, err := interp.Run(m, f.Name, inputs, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, decompose := range []bool{false, true} {
					src := f
					if decompose {
						if src, err = ir.DecomposeAll(f); err != nil {
							t.Fatal(err)
						}
					}
					g, rep, err := Optimize(context.Background(), m, src, Options{})
					if err != nil {
						t.Fatalf("%s decompose=%v: %v", f.Name, decompose, err)
					}
					t.Logf("decompose=%v %s", decompose, rep)
					if r := wantRule[name]; r != "" && rep.Fused[r] == 0 {
						t.Errorf("%s decompose=%v: no node from %s extracted", f.Name, decompose, r)
					}
					om := &ir.Model{Name: m.Name, Params: m.Params, State: m.State, Weights: m.Weights, Functions: []*ir.Function{g}}
					got, gotState, err := interp.Run(om, f.Name, inputs, nil)
					if err != nil {
						t.Fatal(err)
					}
					for k, w := range want {
						if err := closeEnough(got[k], w, 1e-4); err != nil {
							t.Errorf("%s decompose=%v: output %s: %v", f.Name, decompose, k, err)
						}
					}
					for k, w := range wantState {
						if err := closeEnough(gotState[k], w, 1e-4); err != nil {
							t.Errorf("%s decompose=%v: state %s: %v", f.Name, decompose, k, err)
						}
					}
				}
			}
		})
	}
}

// randomInputs gives float inputs normal values, integer vectors ids below the vocabulary (or
// 2), and integer scalars (positions) 0.
func randomInputs(m *ir.Model, f *ir.Function, rng *rand.Rand) map[string]*ir.Tensor {
	in := map[string]*ir.Tensor{}
	vocab := 2
	if v, ok := m.Dims["vocab"]; ok {
		vocab = v
	}
	for _, n := range f.Inputs {
		t := n.Type()
		v := make([]float64, t.Shape.NumElements())
		for i := range v {
			switch {
			case t.DType.IsFloat():
				v[i] = rng.NormFloat64()
			case t.Shape.Rank() > 0:
				v[i] = float64(rng.IntN(vocab))
			}
		}
		in[n.Name] = ir.TensorFromFloat64s(t, v)
	}
	return in
}
