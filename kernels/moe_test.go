package kernels_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// moeIDs draws expert ids [n, k]: each row k distinct experts of e, as moe_route gives them.
func moeIDs(rng *rand.Rand, n, k, e int) *ir.Tensor {
	v := make([]float64, 0, n*k)
	for range n {
		for _, id := range rng.Perm(e)[:k] {
			v = append(v, float64(id))
		}
	}
	return ir.TensorFromFloat64s(ir.T(ir.I32, n, k), v)
}

// moeArgs draws the arguments of a moe_linear (x, W, ids) or moe_linear_sum (and the weights)
// problem.
func moeArgs(rng *rand.Rand, p *kernels.Problem) []*ir.Tensor {
	args := make([]*ir.Tensor, len(p.Args))
	for i, t := range p.Args {
		args[i] = kerneltest.Random(rng, t)
	}
	ids := p.Args[2].Shape
	args[2] = moeIDs(rng, ids[0], ids[1], p.Args[1].Shape[0])
	return args
}

// TestMoeRouteOnDevice: moe_route against the interpreter, the ids bit for bit: both
// normalisations, k from 1 to all the experts, f16 logits, several rows per run.
func TestMoeRouteOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	for _, tc := range []struct {
		x    ir.Type
		k    int
		norm string
	}{
		{ir.T(ir.F32, 5, 8), 2, ir.MoeNormRenorm},
		{ir.T(ir.F32, 3, 17), 4, ir.MoeNormNone},
		{ir.T(ir.F32, 2, 6), 6, ir.MoeNormRenorm},
		{ir.T(ir.F16, 4, 128), 8, ir.MoeNormRenorm},
		{ir.T(ir.F32, 70, 32), 1, ir.MoeNormNone},
	} {
		p := problem(t, ir.MoeRoute, ir.Attrs{"k": tc.k, "norm": tc.norm}, tc.x)
		checkConfigs(t, kernels.MoeRoute, p, randomArgs(rng, p), nil)
	}
}

// TestMoeLinearOnDevice: moe_linear and moe_linear_sum by both templates (one matrix-vector
// product per slot; tokens grouped by expert) against the interpreter: x shared by a token's
// slots or one row per slot, f32, f16 and block-quantized experts (legacy formats, K-quants,
// codebooks, MXFP4's 17-byte blocks), an input width that is not a multiple of 4 or of the staged tile, more experts than
// slots (empty lists), a decode step among many experts, and every slot on one expert (one list
// cut into many tiles).
func TestMoeLinearOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	T := ir.T
	for _, tc := range []struct {
		x, w ir.Type
		k    int
		sum  bool
		one  bool // every slot on expert 0 (the rows of ids need not be distinct)
		// matvec: the case runs on moe_matvec only (each moe_grouped kernel costs lavapipe
		// seconds to compile; its cases are the forms models give it)
		matvec bool
		cfgs   []kernels.Config
	}{
		{T(ir.F32, 3, 40), T(ir.F32, 5, 24, 40), 2, false, false, false, []kernels.Config{{"wg": 32, "cols": 4}, {"tn": 32, "tm": 8, "group_wg": 64}}},
		{T(ir.F32, 3, 2, 40), T(ir.F32, 5, 24, 40), 2, false, false, true, nil},
		{T(ir.F32, 4, 13), T(ir.F16, 3, 9, 13), 3, true, false, false, nil},
		{T(ir.F16, 2, 64), T(ir.Q8_0, 6, 10, 64), 2, true, false, false, nil},
		{T(ir.F32, 5, 256), T(ir.Q4_K, 4, 40, 256), 2, false, false, true, []kernels.Config{{"wg": 128, "cols": 1}}},
		{T(ir.F32, 5, 2, 256), T(ir.Q6_K, 4, 17, 256), 2, true, false, false, nil},
		{T(ir.F32, 1, 64), T(ir.F32, 128, 16, 64), 2, true, false, true, nil},
		{T(ir.F32, 37, 32), T(ir.Q8_0, 3, 8, 32), 2, false, true, false, []kernels.Config{{"tn": 32, "tm": 8, "group_wg": 64}}},
		// the formats with codebooks, packed scales and odd-sized blocks (gpt-oss's experts are MXFP4)
		{T(ir.F32, 3, 64), T(ir.MXFP4, 4, 10, 64), 2, true, false, false, nil},
		{T(ir.F32, 2, 2, 32), T(ir.IQ4_NL, 5, 9, 32), 2, true, false, true, nil},
		{T(ir.F32, 2, 256), T(ir.Q3_K, 3, 8, 256), 2, false, false, true, nil},
	} {
		n := tc.x.Shape[0]
		name := fmt.Sprintf("%s_%s_k%d_sum%v", tc.x, tc.w, tc.k, tc.sum)
		args := []ir.Type{tc.x, tc.w, T(ir.I32, n, tc.k)}
		op := ir.MoeLinear
		if tc.sum {
			op = ir.MoeLinearSum
			args = append(args, T(tc.x.DType, n, tc.k))
		}
		p := problem(t, op, nil, args...)
		vals := moeArgs(rng, p)
		if tc.one {
			vals[2] = ir.NewTensor(T(ir.I32, n, tc.k))
		}
		tmpls := []*kernels.Template{kernels.MoeMatvec, kernels.MoeGrouped}
		if tc.matvec {
			tmpls = tmpls[:1]
		}
		for _, tmpl := range tmpls {
			t.Run(tmpl.Name+"/"+name, func(t *testing.T) {
				var cfgs []kernels.Config
				for _, c := range tc.cfgs {
					if tmpl.Space.Valid(p, c, kernels.Lavapipe) == nil {
						cfgs = append(cfgs, c)
					}
				}
				checkConfigs(t, tmpl, p, vals, cfgs)
			})
		}
	}
}

// TestMoeSumOnDevice: moe_sum against the interpreter.
func TestMoeSumOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	for _, tc := range []struct{ y, w ir.Type }{
		{ir.T(ir.F32, 3, 2, 40), ir.T(ir.F32, 3, 2)},
		{ir.T(ir.F16, 5, 8, 7), ir.T(ir.F16, 5, 8)},
	} {
		p := problem(t, ir.MoeSum, nil, tc.y, tc.w)
		checkConfigs(t, kernels.MoeSum, p, randomArgs(rng, p), nil)
	}
}

// TestMoeMatvecReadsChosenExperts: the matrix-vector template's traffic is k experts' weights
// per token whatever the number of experts, and the grouped template reads each expert's matrix
// about once per tile of its slots.
func TestMoeMatvecReadsChosenExperts(t *testing.T) {
	T := ir.T
	var prev float64
	for i, e := range []int{8, 32, 128} {
		p := problem(t, ir.MoeLinearSum, nil, T(ir.F32, 1, 2, 64), T(ir.Q4_0, e, 256, 64), T(ir.I32, 1, 2), T(ir.F32, 1, 2))
		l, _, err := kernels.Build(kernels.MoeMatvec, p, kernels.Lavapipe)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && l.Bytes != prev {
			t.Errorf("%d experts: %v bytes, %v with fewer", e, l.Bytes, prev)
		}
		prev = l.Bytes
		if w := float64(p.Args[1].Bytes()); l.Bytes >= w/float64(e)*3 {
			t.Errorf("%d experts: %v bytes for 2 experts of %v bytes each", e, l.Bytes, w/float64(e))
		}
	}
}

// TestMoeGLUOnDevice: moe_glu (an expert's gate and up projections and their gated product in
// one pass) by both templates against the interpreter, SwiGLU and GeGLU, float and
// block-quantized experts.
func TestMoeGLUOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	T := ir.T
	for _, tc := range []struct {
		x, w ir.Type
		act  string
	}{
		{T(ir.F32, 3, 40), T(ir.F32, 5, 24, 40), "silu"},
		{T(ir.F32, 5, 256), T(ir.Q4_K, 4, 40, 256), "gelu_tanh"},
		{T(ir.F16, 2, 64), T(ir.Q8_0, 6, 10, 64), "silu"},
	} {
		n := tc.x.Shape[0]
		p := problem(t, ir.MoeGLU, ir.Attrs{"act": tc.act}, tc.x, tc.w, tc.w, T(ir.I32, n, 2))
		vals := make([]*ir.Tensor, 4)
		for i, a := range p.Args[:3] {
			vals[i] = kerneltest.Random(rng, a)
		}
		vals[3] = moeIDs(rng, n, 2, tc.w.Shape[0])
		for _, tmpl := range []*kernels.Template{kernels.MoeMatvec, kernels.MoeGrouped} {
			t.Run(fmt.Sprintf("%s/%s_%s_%s", tmpl.Name, tc.x, tc.w, tc.act), func(t *testing.T) {
				checkConfigs(t, tmpl, p, vals, nil)
			})
		}
	}
}
