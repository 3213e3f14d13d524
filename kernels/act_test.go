package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// TestRMSNormLinearActQ: rmsnorm_linear[act=f16] (an import's prefill: the f32 residual stream
// normalised and read as f16 by the product, the result f16) over block-quantized weights, on
// the GEMM (a prefill block) and the matrix-vector template (a row), against the interpreter,
// which rounds the normalised rows to f16 first.
func TestRMSNormLinearActQ(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	T := ir.T
	for _, c := range []struct {
		tmpl *kernels.Template
		rows int
		d    ir.DType
	}{{kernels.MatmulTiled, 17, ir.Q4_K}, {kernels.MatmulTiled, 9, ir.Q8_0}, {kernels.MatmulVecQ, 1, ir.Q4_K}} {
		t.Run(c.tmpl.Name+"/"+c.d.String(), func(t *testing.T) {
			K := quantK(c.d)
			p := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, T(ir.F32, c.rows, K), T(ir.F32, K), T(c.d, 24, K))
			if err := c.tmpl.Accepts(p, kernels.Lavapipe); err != nil {
				t.Fatalf("refused: %v", err)
			}
			args := make([]*ir.Tensor, len(p.Args))
			for j, a := range p.Args {
				args[j] = kerneltest.Random(rng, a)
			}
			kerneltest.Check(t, c.tmpl, p, nil, args)
		})
	}
}
