package kernels_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// Every op of the reduction, norm, rope, layout, embedding and conv families finds its template
// through the registry, and only the templates meant for it accept it.
func TestRegistryServesEachOp(t *testing.T) {
	x, w := ir.T(ir.F32, 3, 8), ir.T(ir.F32, 8)
	pos := ir.T(ir.I32)
	for _, tc := range []struct {
		p    *kernels.Problem
		want []string
	}{
		{problem(t, ir.Sum, nil, x), []string{"reduce"}},
		{problem(t, ir.Argmax, nil, x), []string{"reduce"}},
		{problem(t, ir.Softmax, nil, x), []string{"softmax"}},
		{problem(t, ir.RMSNorm, nil, x, w), []string{"rmsnorm"}},
		{problem(t, ir.LayerNorm, nil, x, w, w), []string{"layernorm"}},
		{problem(t, ir.AddRMSNorm, nil, x, x, w), []string{"add_rmsnorm"}},
		{problem(t, ir.Embedding, nil, x, ir.T(ir.I32, 2)), []string{"embedding"}},
		{problem(t, ir.Rope, nil, x, pos), []string{"rope"}},
		{problem(t, ir.RopeNorm, nil, x, w, pos), []string{"rope_norm"}},
		{problem(t, ir.CacheWrite, nil, x, ir.T(ir.F32, 1, 8), pos), []string{"cache_write"}},
		{problem(t, ir.RopeCacheWrite, nil, x, ir.T(ir.F32, 1, 8), pos), []string{"rope_cache_write"}},
		{problem(t, ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x), []string{"transpose_tiled"}},
		{problem(t, ir.Transpose, ir.Attrs{"perm": []int{1, 0, 2}}, ir.T(ir.F32, 2, 3, 4)), []string{"transpose"}},
		{problem(t, ir.Slice, ir.Attrs{"end": 2}, x), []string{"slice"}},
		{problem(t, ir.Concat, nil, x, x), []string{"concat"}},
		{problem(t, ir.Expand, ir.Attrs{"shape": []int{2, 3, 8}}, x), []string{"expand"}},
		{problem(t, ir.Reshape, ir.Attrs{"shape": []int{24}}, x), []string{"reshape_copy"}},
		{problem(t, ir.Conv1d, nil, x, ir.T(ir.F32, 2, 3, 3)), []string{"conv1d", "conv1d_tiled"}},
	} {
		got, err := kernels.For(tc.p, kernels.Lavapipe)
		if err != nil {
			t.Errorf("%s: %v", tc.p.Key(), err)
			continue
		}
		var names []string
		for _, g := range got {
			names = append(names, g.Name)
		}
		if len(names) != len(tc.want) {
			t.Errorf("%s: templates %v, want %v", tc.p.Key(), names, tc.want)
			continue
		}
		for i := range names {
			if names[i] != tc.want[i] {
				t.Errorf("%s: templates %v, want %v", tc.p.Key(), names, tc.want)
			}
		}
		// Every accepted problem builds at its default configuration.
		for _, g := range got {
			if _, _, err := kernels.Build(g, tc.p, kernels.Lavapipe); err != nil {
				t.Errorf("%s: %v", g.Name, err)
			}
		}
	}
}

// The spaces have the declared parameters and more than one valid point for a typical problem.
func TestSpacesHaveSeveralPoints(t *testing.T) {
	x := ir.T(ir.F32, 3, 37)
	for _, tc := range []struct {
		tmpl *kernels.Template
		p    *kernels.Problem
	}{
		{kernels.Reduce, problem(t, ir.Max, nil, x)},
		{kernels.Softmax, problem(t, ir.Softmax, nil, x)},
		{kernels.Rope, problem(t, ir.Rope, nil, ir.T(ir.F32, 3, 38), ir.T(ir.I32))},
		{kernels.TransposeTiled, problem(t, ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x)},
		{kernels.Conv1d, problem(t, ir.Conv1d, nil, x, ir.T(ir.F32, 2, 3, 3))},
	} {
		n := 0
		for _, c := range tc.tmpl.Space.Points() {
			if tc.tmpl.Space.Valid(tc.p, c, kernels.Lavapipe) == nil {
				n++
			}
		}
		if n < 4 {
			t.Errorf("%s: %d valid points of %d", tc.tmpl.Name, n, tc.tmpl.Space.Size())
		}
	}
	// Without subgroup arithmetic no point uses it, and some remain.
	noSub := kernels.Lavapipe
	noSub.SubgroupArithmetic = false
	p := problem(t, ir.Softmax, nil, x)
	n := 0
	for _, c := range kernels.Softmax.Space.Points() {
		if kernels.Softmax.Space.Valid(p, c, noSub) == nil {
			if c["subgroup"] == 1 {
				t.Errorf("%s valid without subgroup arithmetic", c.Key())
			}
			n++
		}
	}
	if n == 0 {
		t.Error("no valid point without subgroup arithmetic")
	}
}
