package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

func TestTransposeOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for i, tc := range []struct {
		x    ir.Type
		perm []int
	}{
		{ir.T(ir.F32, 3, 5, 7), []int{2, 0, 1}},
		{ir.T(ir.F16, 37, 3, 2), []int{1, 0, 2}},
		{ir.T(ir.I32, 2, 3, 1, 4), []int{3, 1, 0, 2}},
		{ir.T(ir.Bool, 4, 3, 2), []int{2, 0, 1}},
	} {
		p := problem(t, ir.Transpose, ir.Attrs{"perm": tc.perm}, tc.x)
		checkConfigs(t, kernels.Transpose, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
	}
}

func TestTransposeTiledOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	for i, tc := range []struct {
		x    ir.Type
		perm []int
	}{
		{ir.T(ir.F32, 37, 45), []int{1, 0}},
		{ir.T(ir.F16, 2, 5, 129), []int{0, 2, 1}},
		{ir.T(ir.I32, 1, 1), []int{1, 0}},
	} {
		p := problem(t, ir.Transpose, ir.Attrs{"perm": tc.perm}, tc.x)
		checkConfigs(t, kernels.TransposeTiled, p, randomArgs(rng, p), firstOnly(i, []kernels.Config{{"tile": 8, "rows": 2}, {"tile": 16, "rows": 4}}))
	}
	p := problem(t, ir.Transpose, ir.Attrs{"perm": []int{1, 0, 2}}, ir.T(ir.F32, 2, 3, 4))
	if err := kernels.TransposeTiled.Accepts(p, kernels.Lavapipe); err == nil {
		t.Error("transpose_tiled accepted a perm that keeps the last axis")
	}
	if err := kernels.Transpose.Accepts(p, kernels.Lavapipe); err != nil {
		t.Errorf("transpose refused %v: %v", p.Attrs, err)
	}
	swap := problem(t, ir.Transpose, ir.Attrs{"perm": []int{0, 2, 1}}, ir.T(ir.F32, 2, 3, 4))
	if err := kernels.Transpose.Accepts(swap, kernels.Lavapipe); err == nil {
		t.Error("the general transpose accepted a swap of the last two axes (transpose_tiled's)")
	}
	big := kernels.Config{"tile": 32, "rows": 32}
	if err := kernels.TransposeTiled.Space.Valid(p, big, kernels.Caps{MaxInvocations: 256, MaxWorkgroupSize: [3]int{256, 256, 64}, MaxSharedBytes: 1 << 14}); err == nil {
		t.Error("32×32 invocations accepted on a device of 256")
	}
}

func TestSliceOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	for i, a := range []ir.Attrs{
		{"axis": 0, "start": 1, "end": 3},
		{"axis": 1, "start": 2, "end": 37, "step": 5},
		{"axis": -1, "start": -4, "end": 100, "step": 2},
		{"axis": 1, "start": 36, "end": 37},
	} {
		for _, x := range []ir.Type{ir.T(ir.F32, 3, 37, 5), ir.T(ir.F16, 4, 37, 6)} {
			p := problem(t, ir.Slice, a, x)
			checkConfigs(t, kernels.Slice, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
		}
	}
}

func TestReverseOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	for i, tc := range []struct {
		axis int
		x    ir.Type
	}{{1, ir.T(ir.F32, 3, 37, 5)}, {-1, ir.T(ir.F16, 4, 7)}, {0, ir.T(ir.I32, 9)}} {
		p := problem(t, ir.Reverse, ir.Attrs{"axis": tc.axis}, tc.x)
		checkConfigs(t, kernels.Reverse, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
	}
}

func TestConcatOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(15))
	for i, tc := range []struct {
		axis int
		args []ir.Type
	}{
		{0, []ir.Type{ir.T(ir.F32, 2, 5), ir.T(ir.F32, 3, 5), ir.T(ir.F32, 1, 5)}},
		{1, []ir.Type{ir.T(ir.F16, 3, 1, 4), ir.T(ir.F16, 3, 37, 4)}},
		{-1, []ir.Type{ir.T(ir.I32, 3, 5), ir.T(ir.I32, 3, 2), ir.T(ir.I32, 3, 7)}},
		{0, []ir.Type{ir.T(ir.F32, 4)}},
	} {
		p := problem(t, ir.Concat, ir.Attrs{"axis": tc.axis}, tc.args...)
		checkConfigs(t, kernels.Concat, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
	}
}

func TestExpandAndReshapeOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(16))
	for i, tc := range []struct {
		x     ir.Type
		shape []int
	}{
		{ir.T(ir.F32, 1, 5), []int{3, 5}},
		{ir.T(ir.F16, 3, 1), []int{3, 37}},
		{ir.T(ir.F32), []int{2, 3}},
		{ir.T(ir.I32, 3, 1, 2), []int{4, 3, 5, 2}},
	} {
		p := problem(t, ir.Expand, ir.Attrs{"shape": tc.shape}, tc.x)
		checkConfigs(t, kernels.Expand, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
	}
	p := problem(t, ir.Reshape, ir.Attrs{"shape": []int{5, -1}}, ir.T(ir.F16, 3, 5, 7))
	checkConfigs(t, kernels.ReshapeCopy, p, randomArgs(rng, p), flatConfigs)
}

func TestLayoutAccepts(t *testing.T) {
	p := problem(t, ir.Slice, ir.Attrs{"axis": 0, "end": 2}, ir.T(ir.F32, 3))
	for _, tmpl := range []*kernels.Template{kernels.Transpose, kernels.Expand, kernels.Concat, kernels.ReshapeCopy} {
		if err := tmpl.Accepts(p, kernels.Lavapipe); err == nil {
			t.Errorf("%s accepted slice", tmpl.Name)
		}
	}
	p.Outs = []ir.Type{ir.T(ir.F32, 3)}
	if err := kernels.Slice.Accepts(p, kernels.Lavapipe); err == nil {
		t.Error("slice accepted a result of the wrong shape")
	}
}
