package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// checkConfigs checks p at the template's default and at every configuration of configs its
// space allows for p; when configs are given, at least one must be allowed. Lavapipe compiles
// every pipeline with LLVM (50-300 ms each on a cold shader cache), so tests check every case at
// the default and only a few at the other points.
func checkConfigs(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, args []*ir.Tensor, configs []kernels.Config) {
	t.Helper()
	kerneltest.Check(t, tmpl, p, nil, args)
	if configs == nil {
		return
	}
	n := 0
	caps := kerneltest.CapsOf(&kerneltest.Device(t).Info)
	for _, c := range configs {
		if tmpl.Space.Valid(p, c, caps) == nil {
			kerneltest.Check(t, tmpl, p, c, args)
			n++
		}
	}
	if n == 0 {
		t.Errorf("%s %s: no non-default configuration was valid", tmpl.Name, p.Key())
	}
}

// geluResidual is the epilogue gelu(v)+r with r broadcast from shape rs.
func geluResidual(op, r ir.Type, out ir.DType) *kernels.Fused {
	f := &kernels.Fused{Inputs: []ir.Type{op, r}, Nodes: []kernels.FusedNode{
		{Op: ir.Input, Index: 0, DType: op.DType},
		{Op: ir.Input, Index: 1, DType: r.DType},
		{Op: ir.Gelu, Args: []int{0}, DType: op.DType},
		{Op: ir.Add, Args: []int{2, 1}, DType: op.DType},
	}, Outputs: []int{3}}
	if out != op.DType {
		f.Nodes = append(f.Nodes, kernels.FusedNode{Op: ir.Cast, Attrs: ir.Attrs{"to": out.String()}, Args: []int{3}, DType: out})
		f.Outputs = []int{4}
	}
	return f
}

// withEpilogue adds gelu(result)+r to p, r of shape rs, the result cast to out.
func withEpilogue(p *kernels.Problem, rs ir.Shape, out ir.DType) *kernels.Problem {
	q := *p
	op := p.Outs[0]
	r := ir.Type{DType: op.DType, Shape: rs}
	q.Expr = geluResidual(op, r, out)
	q.NumOpArgs = len(p.Args)
	q.Args = append(append([]ir.Type(nil), p.Args...), r)
	q.Outs = []ir.Type{{DType: out, Shape: op.Shape}}
	return &q
}

func TestSoftmaxOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, tc := range []struct {
		x       ir.Type
		axis    int
		configs []kernels.Config
	}{
		{ir.T(ir.F32, 3, 37), -1, rowConfigs},
		{ir.T(ir.F16, 2, 129), -1, nil},
		{ir.T(ir.F32, 5, 1), -1, nil},
		{ir.T(ir.F32, 2, 5, 3), 1, rowConfigs},
		{ir.T(ir.F32, 7, 4), 0, nil},
	} {
		p := problem(t, ir.Softmax, ir.Attrs{"axis": tc.axis}, tc.x)
		checkConfigs(t, kernels.Softmax, p, randomArgs(rng, p), tc.configs)
	}
	p := withEpilogue(problem(t, ir.Softmax, nil, ir.T(ir.F32, 3, 37)), ir.Shape{37}, ir.F16)
	checkConfigs(t, kernels.Softmax, p, randomArgs(rng, p), rowConfigs[1:])
}

func TestRMSNormOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for i, tc := range []struct{ x, w ir.Type }{
		{ir.T(ir.F32, 3, 37), ir.T(ir.F32, 37)},
		{ir.T(ir.F16, 2, 129), ir.T(ir.F16, 129)},
		{ir.T(ir.F16, 4, 5), ir.T(ir.F32, 5)},
		{ir.T(ir.F32, 1), ir.T(ir.F32, 1)},
	} {
		p := problem(t, ir.RMSNorm, ir.Attrs{"eps": 1e-6}, tc.x, tc.w)
		checkConfigs(t, kernels.RMSNorm, p, randomArgs(rng, p), firstOnly(i, rowConfigs))
	}
	// A decode row at the GPU static choice's workgroups (rowStatic): 1024 invocations over
	// 4100 elements, some with 5 and some with 4 of them; 512 with subgroup arithmetic. The
	// space leaves them to GPUs, so they run here in the GPU form (Caps.CPU false).
	p1 := problem(t, ir.RMSNorm, ir.Attrs{"eps": 1e-6}, ir.T(ir.F32, 1, 4100), ir.T(ir.F32, 4100))
	args1 := randomArgs(rng, p1)
	gpu := kerneltest.CapsOf(&kerneltest.Device(t).Info)
	gpu.CPU = false
	sub := 0
	if gpu.SubgroupArithmetic {
		sub = 1
	}
	for _, c := range []kernels.Config{{"wg": 1024, "coop": 1, "subgroup": 0, "rows": 1}, {"wg": 512, "coop": 1, "subgroup": sub, "rows": 1}} {
		if err := kernels.RMSNorm.Space.Valid(p1, c, kernels.Lavapipe); err == nil {
			t.Errorf("[%s] valid on lavapipe", c.Key())
		}
		kerneltest.CheckWith(t, kernels.RMSNorm, p1, c, args1, gpu)
	}
	p := withEpilogue(problem(t, ir.RMSNorm, nil, ir.T(ir.F32, 3, 37), ir.T(ir.F32, 37)), ir.Shape{3, 37}, ir.F32)
	checkConfigs(t, kernels.RMSNorm, p, randomArgs(rng, p), rowConfigs[:1])
}

func TestLayerNormOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for i, tc := range []struct{ x, w ir.Type }{
		{ir.T(ir.F32, 3, 37), ir.T(ir.F32, 37)},
		{ir.T(ir.F16, 2, 129), ir.T(ir.F16, 129)},
		{ir.T(ir.F32, 2, 3, 5), ir.T(ir.F32, 5)},
	} {
		p := problem(t, ir.LayerNorm, nil, tc.x, tc.w, tc.w)
		checkConfigs(t, kernels.LayerNorm, p, randomArgs(rng, p), firstOnly(i, rowConfigs))
	}
	p := withEpilogue(problem(t, ir.LayerNorm, nil, ir.T(ir.F32, 3, 37), ir.T(ir.F32, 37), ir.T(ir.F32, 37)), ir.Shape{3, 1}, ir.F32)
	checkConfigs(t, kernels.LayerNorm, p, randomArgs(rng, p), rowConfigs[1:])
}

func TestAddRMSNormOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	for i, tc := range []struct{ x, w ir.Type }{
		{ir.T(ir.F32, 3, 37), ir.T(ir.F32, 37)},
		{ir.T(ir.F16, 2, 129), ir.T(ir.F16, 129)},
		{ir.T(ir.F32, 5, 1), ir.T(ir.F32, 1)},
	} {
		p := problem(t, ir.AddRMSNorm, nil, tc.x, tc.x, tc.w)
		checkConfigs(t, kernels.AddRMSNorm, p, randomArgs(rng, p), firstOnly(i, rowConfigs))
	}
}

func TestNormAccepts(t *testing.T) {
	x, w := ir.T(ir.F32, 3, 8), ir.T(ir.F32, 8)
	add := problem(t, ir.AddRMSNorm, nil, x, x, w)
	if err := kernels.AddRMSNorm.Accepts(add, kernels.Lavapipe); err != nil {
		t.Errorf("add_rmsnorm refused: %v", err)
	}
	if err := kernels.RMSNorm.Accepts(add, kernels.Lavapipe); err == nil {
		t.Error("rmsnorm accepted add_rmsnorm")
	}
	epi := withEpilogue(problem(t, ir.RMSNorm, nil, x, w), ir.Shape{8}, ir.F32)
	epi.Op, epi.Args = ir.AddRMSNorm, append([]ir.Type{x}, epi.Args...)
	epi.NumOpArgs = 3
	epi.Outs = append(epi.Outs, x)
	if err := kernels.AddRMSNorm.Accepts(epi, kernels.Lavapipe); err == nil {
		t.Error("add_rmsnorm accepted an epilogue")
	}
	bad := problem(t, ir.Softmax, nil, x)
	bad.Outs = []ir.Type{ir.T(ir.F16, 3, 8)}
	if err := kernels.Softmax.Accepts(bad, kernels.Lavapipe); err == nil {
		t.Error("softmax accepted a result of the wrong dtype")
	}
	// Softmax over a strided axis has only serial configurations.
	strided := problem(t, ir.Softmax, ir.Attrs{"axis": 0}, x)
	if err := kernels.Softmax.Space.Valid(strided, kernels.Config{"wg": 128, "coop": 1, "subgroup": 1, "rows": 1}, kernels.Lavapipe); err == nil {
		t.Error("coop=1 accepted for a strided axis")
	}
}

// firstOnly gives configs for the first case of a table and nil for the others.
func firstOnly(i int, configs []kernels.Config) []kernels.Config {
	if i == 0 {
		return configs
	}
	return nil
}

// On a GPU a decode row gets a workgroup large enough that an invocation reads at most 8 of its
// elements (rowStatic); many rows keep the space's first point.
func TestRowStaticGPU(t *testing.T) {
	for _, tc := range []struct {
		rows, n, wg int
	}{{1, 4096, 512}, {1, 2048, 256}, {1, 576, 128}, {1, 128256, 1024}, {4, 4096, 512}, {512, 4096, 128}} {
		p := problem(t, ir.RMSNorm, nil, ir.T(ir.F32, tc.rows, tc.n), ir.T(ir.F32, tc.n))
		_, c, err := kernels.Build(kernels.RMSNorm, p, kernels.H200)
		if err != nil {
			t.Fatal(err)
		}
		if c["wg"] != tc.wg || c["coop"] != 1 {
			t.Errorf("%d×%d: static [%s], want wg=%d, coop=1", tc.rows, tc.n, c.Key(), tc.wg)
		}
	}
}
