package kernels_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// TestTopKOnDevice: argtopk against the interpreter, bit for bit (indices): rows of every
// length against k, one workgroup per row (subgroup and shared-memory combining), several rows
// per workgroup, one invocation per row, and long rows split over workgroups whose candidates a
// second step merges; f32, f16 and i32.
func TestTopKOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	// subgroup=1 is a workgroup of one subgroup (lavapipe's is 8 wide, the H200's 32);
	// subgroup=0 combines through shared memory.
	sg := subgroupSize(t)
	split := []kernels.Config{
		{"wg": sg, "coop": 1, "subgroup": 1, "rows": 1, "split": 8},
		{"wg": 32, "coop": 1, "subgroup": 0, "rows": 1, "split": 8},
		{"wg": sg, "coop": 1, "subgroup": 1, "rows": 1, "split": 32},
		{"wg": 256, "coop": 1, "subgroup": 0, "rows": 1, "split": 32}, // a GPU's static choices
		{"wg": 256, "coop": 1, "subgroup": 0, "rows": 1, "split": 1},
		{"wg": 32, "coop": 2, "subgroup": 0, "rows": 1, "split": 8}, // radix select
		{"wg": 256, "coop": 2, "subgroup": 0, "rows": 1, "split": 32},
		{"wg": 64, "coop": 2, "subgroup": 0, "rows": 1, "split": 1},
	}
	radix := []kernels.Config{{"wg": 32, "coop": 2, "subgroup": 0, "rows": 1, "split": 1},
		{"wg": 256, "coop": 2, "subgroup": 1, "rows": 1, "split": 1}} // suffix sums by shuffles
	for _, tc := range []struct {
		x       ir.Type
		k       int
		configs []kernels.Config
	}{
		{ir.T(ir.F32, 3, 37), 5, append(withSplit(rowConfigs, 1), radix...)},
		{ir.T(ir.F32, 2, 7), 7, append(withSplit(rowConfigs, 1), radix...)}, // k = n: the whole row sorted
		{ir.T(ir.F16, 4, 129), 16, radix},
		{ir.T(ir.I32, 2, 50), 3, append(withSplit(rowConfigs[:1], 1), radix...)},
		{ir.T(ir.F32, 1, 3001), 40, append(split, radix[1])}, // a decode step's row
		{ir.T(ir.F16, 2, 1100), 64, split},
		{ir.T(ir.F32, 3, 2, 20), 4, nil}, // rank 3
	} {
		p := problem(t, ir.ArgTopK, ir.Attrs{"k": tc.k}, tc.x)
		checkConfigs(t, kernels.TopK, p, randomArgs(rng, p), tc.configs)
	}
}

// TestTopKTiesAndNaN: equal values in index order and NaN above every number, across the parts
// of a split row too, exactly as the interpreter orders them.
func TestTopKTiesAndNaN(t *testing.T) {
	const n = 700
	v := make([]float64, 2*n)
	for i := range v {
		v[i] = float64(i%5) - 2 // five values, each 280 times: ties everywhere
	}
	v[3], v[650], v[n+200] = math.NaN(), math.NaN(), math.Inf(1)
	x := ir.TensorFromFloat64s(ir.T(ir.F32, 2, n), v)
	sg := subgroupSize(t)
	p := problem(t, ir.ArgTopK, ir.Attrs{"k": 30}, x.Type)
	checkConfigs(t, kernels.TopK, p, []*ir.Tensor{x}, []kernels.Config{
		{"wg": sg, "coop": 1, "subgroup": 1, "rows": 1, "split": 1},
		{"wg": sg, "coop": 1, "subgroup": 1, "rows": 1, "split": 8},
		{"wg": 32, "coop": 1, "subgroup": 0, "rows": 1, "split": 8},
		{"wg": 64, "coop": 0, "subgroup": 0, "rows": 1, "split": 1},
		{"wg": 32, "coop": 2, "subgroup": 0, "rows": 1, "split": 1},
		{"wg": 32, "coop": 2, "subgroup": 0, "rows": 1, "split": 8},
		{"wg": 256, "coop": 2, "subgroup": 1, "rows": 1, "split": 1},
	})
}

// TestTopKRadix: the radix select (coop=2) where it differs from a plain sort: rows that are
// all one value (the set is fixed by the passes over the index, the key's passes never
// settle), NaN, ±inf and ±0 among ties, k as large as a part allows, the last part shorter than
// k (the merge sees candidates without an index next to i32's smallest value, key 0), several
// rows split, f16's few distinct values, a run-time number of rows, and the GPU's static choice.
func TestTopKRadix(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	cfg := func(wg, split int) kernels.Config {
		return kernels.Config{"wg": wg, "coop": 2, "subgroup": 0, "rows": 1, "split": split}
	}
	sub := func(split int) kernels.Config { // suffix sums by subgroup shuffles
		return kernels.Config{"wg": 256, "coop": 2, "subgroup": 1, "rows": 1, "split": split}
	}
	inf, nan := math.Inf(1), math.NaN()
	// Row 0 one value throughout, row 1 ties among specials, row 2 random with a few repeats.
	const n = 1249
	v := make([]float64, 3*n)
	for i := 0; i < n; i++ {
		v[i] = 1.5
		v[n+i] = []float64{-inf, 0, math.Copysign(0, -1), -inf, 2, -inf}[i%6]
		v[2*n+i] = float64(rng.Intn(400)) / 8
	}
	v[n+7], v[n+900], v[n+1200], v[n+11] = nan, nan, inf, inf
	x := ir.TensorFromFloat64s(ir.T(ir.F32, 3, n), v)
	for _, k := range []int{20, 1249} {
		p := problem(t, ir.ArgTopK, ir.Attrs{"k": k}, x.Type)
		checkConfigs(t, kernels.TopK, p, []*ir.Tensor{x}, []kernels.Config{cfg(32, 1), cfg(64, 1), sub(1)})
	}
	// One row, split: 32 parts of 40 and a last of 9 (< k); 8 parts of 157 with k = 78.
	x1 := ir.TensorFromFloat64s(ir.T(ir.F32, 1, n), v[n:2*n])
	for _, k := range []int{20, 78} {
		p := problem(t, ir.ArgTopK, ir.Attrs{"k": k}, x1.Type)
		checkConfigs(t, kernels.TopK, p, []*ir.Tensor{x1}, []kernels.Config{cfg(32, 32), cfg(32, 8), cfg(128, 8)})
	}
	// i32: mostly the smallest value (key 0), a few others.
	iv := make([]float64, n)
	for i := range iv {
		iv[i] = math.MinInt32
	}
	for i := 0; i < 6; i++ {
		iv[rng.Intn(n)] = float64(rng.Intn(100) - 50)
	}
	xi := ir.TensorFromFloat64s(ir.T(ir.I32, 1, n), iv)
	p := problem(t, ir.ArgTopK, ir.Attrs{"k": 20}, xi.Type)
	checkConfigs(t, kernels.TopK, p, []*ir.Tensor{xi}, []kernels.Config{cfg(32, 32), cfg(32, 1), sub(1)})
	// f16, several rows split (3 rows, 8 parts each), values with many ties.
	p = problem(t, ir.ArgTopK, ir.Attrs{"k": 64}, ir.T(ir.F16, 3, 1100))
	hv := make([]float64, 3*1100)
	for i := range hv {
		hv[i] = float64(rng.Intn(300)) / 16
	}
	checkConfigs(t, kernels.TopK, p, []*ir.Tensor{ir.TensorFromFloat64s(p.Args[0], hv)}, []kernels.Config{cfg(32, 8), cfg(64, 1)})
	// At a run-time number of rows (a prefill's top_ids, rows ≤ capacity): the grids follow it.
	caps := kerneltest.CapsOf(&kerneltest.Device(t).Info)
	for _, tc := range []struct {
		max, split int
	}{{6, 1}, {2, 8}} {
		p := bounded(problem(t, ir.ArgTopK, ir.Attrs{"k": 5}, ir.T(ir.F32, tc.max, 300)), tc.max, []int{0}, []int{0}, false)
		kerneltest.CheckAtWith(t, kernels.TopK, p, cfg(32, tc.split), randomArgs(rng, p), []int{1, tc.max}, caps)
	}
	// The GPU's static choice in the GPU form (Caps.CPU false): 256 invocations, 32 parts of 257,
	// with and without subgroup shuffles.
	gpu := caps
	gpu.CPU = false
	p = problem(t, ir.ArgTopK, ir.Attrs{"k": 64}, ir.T(ir.F32, 1, 8200))
	if _, c, err := kernels.Build(kernels.TopK, p, gpu); err != nil || c["coop"] != 2 || c["split"] != 32 || c["subgroup"] != 1 {
		t.Fatalf("GPU static choice for %s: %v, %v", p.Key(), c.Key(), err)
	}
	args := randomArgs(rng, p)
	kerneltest.CheckWith(t, kernels.TopK, p, nil, args, gpu)
	kerneltest.CheckWith(t, kernels.TopK, p, cfg(256, 32), args, gpu)
}

// TestTakeAlongOnDevice: take_along_axis against the interpreter, indices from argtopk's range
// (an index outside the row gives 0 on the device; the interpreter refuses it, so it is not
// compared here).
func TestTakeAlongOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(32))
	for i, tc := range []struct{ x, idx ir.Type }{
		{ir.T(ir.F32, 3, 50), ir.T(ir.I32, 3, 8)},
		{ir.T(ir.F16, 2, 9), ir.T(ir.I32, 2, 9)},
		{ir.T(ir.F32, 2, 3, 10), ir.T(ir.U32, 2, 3, 4)},
	} {
		p := problem(t, ir.TakeAlongAxis, nil, tc.x, tc.idx)
		n := tc.x.Shape[tc.x.Shape.Rank()-1]
		iv := make([]float64, tc.idx.Shape.NumElements())
		for j := range iv {
			iv[j] = float64(rng.Intn(n))
		}
		args := []*ir.Tensor{kerneltest.Random(rng, tc.x), ir.TensorFromFloat64s(tc.idx, iv)}
		checkConfigs(t, kernels.TakeAlong, p, args, firstOnly(i, flatConfigs))
	}
}

// subgroupSize is the test device's subgroup size: a subgroup=1 point is a workgroup of one.
func subgroupSize(t *testing.T) int {
	return kerneltest.CapsOf(&kerneltest.Device(t).Info).SubgroupSize
}

// TestTopKStaticChoice: a compile without measurement takes one subgroup per row (the rounds) on
// a CPU implementation and, on a GPU, the radix select over 256 invocations per row with a short
// row split over 32 workgroups (suffix sums by subgroup shuffles where there are), the rounds for
// a k whose list does not fit in shared memory
// (TestTopKOnDevice and TestTopKRadix check these points against the interpreter).
func TestTopKStaticChoice(t *testing.T) {
	noShuffle := kernels.H200
	noShuffle.SubgroupShuffle = false
	for _, tc := range []struct {
		caps  kernels.Caps
		x     ir.Type
		k     int
		split int
		wg    int
		coop  int
		sub   int
	}{
		{kernels.Lavapipe, ir.T(ir.F16, 1, 49152), 64, 8, 64, 2, 0},
		{kernels.Lavapipe, ir.T(ir.F16, 16, 49152), 64, 1, 64, 2, 0},
		{kernels.H200, ir.T(ir.F16, 1, 49152), 64, 32, 256, 2, 1},
		{kernels.H200, ir.T(ir.F32, 1, 128256), 64, 32, 256, 2, 1},
		{kernels.H200, ir.T(ir.F16, 128, 49152), 64, 1, 256, 2, 1},
		{noShuffle, ir.T(ir.F32, 1, 128256), 64, 32, 256, 2, 0},
		{kernels.H200, ir.T(ir.F16, 1, 49152), 5000, 1, 256, 1, 0}, // 40 KB of list
	} {
		p := problem(t, ir.ArgTopK, ir.Attrs{"k": tc.k}, tc.x)
		_, c, err := kernels.Build(kernels.TopK, p, tc.caps)
		if err != nil {
			t.Fatal(err)
		}
		if c["split"] != tc.split || c["wg"] != tc.wg || c["coop"] != tc.coop || c["subgroup"] != tc.sub {
			t.Errorf("%s on a device with CPU=%v: static choice %s, want coop=%d, split=%d, wg=%d, subgroup=%d", p.Key(), tc.caps.CPU, c.Key(), tc.coop, tc.split, tc.wg, tc.sub)
		}
	}
}
