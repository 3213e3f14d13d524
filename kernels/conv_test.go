package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

func TestConv1dOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	for i, tc := range []struct {
		x, w  ir.Type
		bias  bool
		attrs ir.Attrs
	}{
		{ir.T(ir.F32, 3, 37), ir.T(ir.F32, 5, 3, 3), true, ir.Attrs{"padding": 1}},              // Whisper conv1
		{ir.T(ir.F32, 5, 37), ir.T(ir.F32, 4, 5, 3), true, ir.Attrs{"padding": 1, "stride": 2}}, // Whisper conv2
		{ir.T(ir.F16, 2, 6, 29), ir.T(ir.F16, 9, 2, 4), false, ir.Attrs{"groups": 3, "dilation": 2, "padding": 3}},
		{ir.T(ir.F32, 4, 5), ir.T(ir.F32, 4, 1, 5), false, ir.Attrs{"groups": 4, "padding": 2, "stride": 3}}, // depthwise
		{ir.T(ir.F32, 1, 1), ir.T(ir.F32, 1, 1, 1), true, nil},
	} {
		args := []ir.Type{tc.x, tc.w}
		if tc.bias {
			args = append(args, ir.T(ir.F32, tc.w.Shape[0]))
		}
		p := problem(t, ir.Conv1d, tc.attrs, args...)
		a := randomArgs(rng, p)
		checkConfigs(t, kernels.Conv1d, p, a, firstOnly(i, []kernels.Config{{"wg": 32, "per_thread": 1}, {"wg": 64, "per_thread": 8}}))
		// The tiled kernel compiles slowly on lavapipe (~1 s cold): the first case (two
		// configurations) and the grouped, dilated f16 one.
		if i == 0 || i == 2 {
			checkConfigs(t, kernels.Conv1dTiled, p, a, firstOnly(i, []kernels.Config{{"tile_m": 16, "tile_n": 32, "tile_k": 8}}))
		}
	}
	// conv + gelu (+ a broadcast residual) in one kernel.
	p := withEpilogue(problem(t, ir.Conv1d, ir.Attrs{"padding": 1}, ir.T(ir.F32, 3, 37), ir.T(ir.F32, 5, 3, 3), ir.T(ir.F32, 5)), ir.Shape{1, 37}, ir.F16)
	a := randomArgs(rng, p)
	checkConfigs(t, kernels.Conv1d, p, a, []kernels.Config{{"wg": 32, "per_thread": 4}})
	checkConfigs(t, kernels.Conv1dTiled, p, a, nil)
}

func TestConv1dAccepts(t *testing.T) {
	p := problem(t, ir.Conv1d, nil, ir.T(ir.F32, 3, 8), ir.T(ir.F32, 2, 3, 3))
	if err := kernels.Conv1d.Accepts(p, kernels.Lavapipe); err != nil {
		t.Errorf("refused: %v", err)
	}
	bad := withEpilogue(p, ir.Shape{5}, ir.F32) // a residual of 5 does not broadcast to [2, 6]
	for _, tmpl := range []*kernels.Template{kernels.Conv1d, kernels.Conv1dTiled} {
		if err := tmpl.Accepts(bad, kernels.Lavapipe); err == nil {
			t.Errorf("%s: an epilogue input that does not broadcast was accepted", tmpl.Name)
		}
	}
}
