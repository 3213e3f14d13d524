package kernels_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// TestAttentionWork: the work model's FLOPs at each kv_len equal 2·(d+dv)·heads per query-key
// pair the mask lets through, the pairs counted here one by one from ir's mask rule (query i at
// position kv_len − sq + i sees key j iff j < kv_len, and j ≤ its position when causal), and its
// bytes count q, the output, kv_len and the first kv_len rows of k and v.
func TestAttentionWork(t *testing.T) {
	const sq, hq, hkv, d, skv = 4, 4, 2, 8, 32
	q, k, v := ir.T(ir.F16, sq, hq, d), ir.T(ir.F16, skv, hkv, d), ir.T(ir.F16, skv, hkv, d)
	for _, causal := range []bool{false, true} {
		p := opProblem(t, ir.Attention, ir.Attrs{"causal": causal}, q, k, v, ir.T(ir.I32))
		l := &kernels.Launch{Flops: 1, Bytes: 1} // the launch's figures are replaced for attention
		w := kernels.Work(p, l)
		if w.CountArg != 3 || w.MaxN != skv {
			t.Fatalf("causal %v: count arg %d, max %d", causal, w.CountArg, w.MaxN)
		}
		for _, n := range []int{sq, 7, skv} {
			pairs := 0
			for i := 0; i < sq; i++ {
				for j := 0; j < skv; j++ {
					if j < n && (!causal || j <= n-sq+i) {
						pairs++
					}
				}
			}
			flops := float64(2 * (d + d) * hq * pairs)
			bytes := float64(q.Bytes() + q.Bytes() + 4 + n*hkv*d*2*2)
			if got := w.Flops + float64(n)*w.FlopsPerN; got != flops {
				t.Errorf("causal %v, kv_len %d: %v FLOPs, %d pairs give %v", causal, n, got, pairs, flops)
			}
			if got := w.Bytes + float64(n)*w.BytesPerN; got != bytes {
				t.Errorf("causal %v, kv_len %d: %v bytes, want %v", causal, n, got, bytes)
			}
		}
		if causal && w.MinN != sq || !causal && w.MinN != 1 {
			t.Errorf("causal %v: MinN %d", causal, w.MinN)
		}
	}
	// Without a kv_len operand every key is seen: fixed work.
	p := opProblem(t, ir.Attention, nil, q, k, v)
	w := kernels.Work(p, &kernels.Launch{})
	if w.CountArg != -1 || w.Flops != float64(2*(d+d)*hq*sq*skv) {
		t.Errorf("no kv_len: %+v, want %d FLOPs fixed", w, 2*(d+d)*hq*sq*skv)
	}
	// Other ops keep the launch's figures.
	mm := opProblem(t, ir.Matmul, nil, ir.T(ir.F32, 2, 3), ir.T(ir.F32, 3, 5))
	if w := kernels.Work(mm, &kernels.Launch{Flops: 60, Bytes: 124}); w != (kernels.WorkModel{Flops: 60, Bytes: 124, CountArg: -1}) {
		t.Errorf("matmul: %+v", w)
	}
}

// TestLaunchFlops: a template's FLOP count is the problem's arithmetic (2·m·n·k for a matmul,
// one per operation and element for a fused elementwise chain, none for a copy).
func TestLaunchFlops(t *testing.T) {
	caps := kernels.Lavapipe
	mm := opProblem(t, ir.Matmul, nil, ir.T(ir.F32, 8, 16), ir.T(ir.F32, 16, 4))
	copyT := ir.T(ir.F32, 64)
	cp := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{copyT}, Outs: []ir.Type{copyT},
		Expr: &kernels.Fused{Inputs: []ir.Type{copyT}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: ir.F32}}, Outputs: []int{0}}}
	addT := ir.T(ir.F32, 64)
	add := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{addT, addT}, Outs: []ir.Type{addT},
		Expr: &kernels.Fused{Inputs: []ir.Type{addT, addT}, Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: ir.F32}, {Op: ir.Input, Index: 1, DType: ir.F32},
			{Op: ir.Add, Args: []int{0, 1}, DType: ir.F32}, {Op: ir.Mul, Args: []int{2, 2}, DType: ir.F32}}, Outputs: []int{3}}}
	for _, c := range []struct {
		name  string
		p     *kernels.Problem
		flops float64
	}{
		{"matmul", mm, 2 * 8 * 16 * 4},
		{"copy", cp, 0},
		{"add·mul", add, 2 * 64},
	} {
		found := false
		for _, tm := range kernels.Templates() {
			if tm.Accepts(c.p, caps) != nil {
				continue
			}
			var l *kernels.Launch
			for _, cfg := range tm.Space.Points() {
				if tm.Space.Valid(c.p, cfg, caps) != nil {
					continue
				}
				if x, err := tm.Build(c.p, cfg, caps); err == nil {
					l = x
					break
				}
			}
			if l == nil {
				continue
			}
			found = true
			if l.Flops != c.flops {
				t.Errorf("%s by %s: %v FLOPs, want %v", c.name, tm.Name, l.Flops, c.flops)
			}
		}
		if !found {
			t.Errorf("%s: no template built it", c.name)
		}
	}
}
