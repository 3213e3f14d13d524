package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

func idsTensor(t ir.Type, rng *rand.Rand, rows int) *ir.Tensor {
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		v[i] = float64(rng.Intn(rows))
	}
	return ir.TensorFromFloat64s(t, v)
}

func TestEmbeddingOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for i, tc := range []struct{ tab, ids ir.Type }{
		{ir.T(ir.F32, 11, 37), ir.T(ir.I32, 3)},
		{ir.T(ir.F16, 11, 5), ir.T(ir.I32, 2, 3)},
		{ir.T(ir.F32, 300, 1), ir.T(ir.U32, 129)},
		{ir.T(ir.F32, 11, 6), ir.T(ir.I32)},
	} {
		p := problem(t, ir.Embedding, nil, tc.tab, tc.ids)
		args := []*ir.Tensor{kerneltest.Random(rng, tc.tab), idsTensor(tc.ids, rng, tc.tab.Shape[0])}
		checkConfigs(t, kernels.Embedding, p, args, firstOnly(i, flatConfigs))
	}
}

// Ids outside the table give rows of zeros (the interpreter rejects them, so compare by hand).
func TestEmbeddingOutOfRangeIsZero(t *testing.T) {
	d := kerneltest.Device(t)
	tab, ids := ir.T(ir.F32, 4, 3), ir.T(ir.I32, 4)
	p := problem(t, ir.Embedding, nil, tab, ids)
	table := ir.TensorFromFloat64s(tab, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	idv := ir.TensorFromFloat64s(ids, []float64{2, -1, 4, 0})
	l, _, err := kernels.Build(kernels.Embedding, p, kerneltest.CapsOf(&d.Info))
	if err != nil {
		t.Fatal(err)
	}
	got, err := kerneltest.Run(d, p, l, []*ir.Tensor{table, idv})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{7, 8, 9, 0, 0, 0, 0, 0, 0, 1, 2, 3}
	for i, w := range want {
		if g := got[0].Float64(i); g != w {
			t.Fatalf("element %d: got %g, want %g (all: %v)", i, g, w, got[0].Float64s())
		}
	}
}

func TestEmbeddingAccepts(t *testing.T) {
	p := problem(t, ir.Embedding, nil, ir.T(ir.F32, 4, 3), ir.T(ir.I32, 2))
	if err := kernels.Embedding.Accepts(p, kernels.Lavapipe); err != nil {
		t.Errorf("refused: %v", err)
	}
	bf := problem(t, ir.Embedding, nil, ir.T(ir.BF16, 4, 3), ir.T(ir.I32, 2))
	if err := kernels.Embedding.Accepts(bf, kernels.Lavapipe); err == nil {
		t.Error("a bf16 table was accepted")
	}
}
