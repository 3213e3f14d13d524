package kernels_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// TestMatmulVecQValidates builds MatmulVecQ for the H200 at its default point and every point a
// GPU's budgeted search measures first, for every format it reads, one and three rows of x and
// rmsnorm_linear, and runs spirv-val on each module (lavapipe runs a sample of the points against
// the interpreter: TestMatmulVecQ).
func TestMatmulVecQValidates(t *testing.T) {
	caps := kernels.H200
	f32 := ir.F32
	for _, d := range kernels.QuantizedDTypes() {
		t.Run(d.String(), func(t *testing.T) {
			K := quantK(d)
			for _, p := range []*kernels.Problem{
				opProblem(t, ir.Linear, nil, ir.T(f32, 1, K), ir.T(d, 64, K)),
				opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(f32, 3, K), ir.T(f32, K), ir.T(d, 64, K)),
			} {
				_, def, err := kernels.Build(kernels.MatmulVecQ, p, caps)
				if err != nil {
					t.Fatalf("%s: %v", p.Key(), err)
				}
				if def.Key() != "cols=4,rows=2,span=4,wg=128" {
					t.Errorf("%s: the H200's static choice is %s", p.Key(), def.Key())
				}
				cs := append([]kernels.Config{def}, kernels.MatmulVecQ.Space.Suggestions(p, caps)...)
				if len(cs) < 6 {
					t.Errorf("%s: %d points", p.Key(), len(cs))
				}
				for _, c := range cs {
					l, c, err := kernels.BuildAt(kernels.MatmulVecQ, p, c, caps)
					if err != nil {
						t.Fatalf("%s [%s]: %v", p.Key(), c.Key(), err)
					}
					validate(t, l)
				}
			}
		})
	}
}
