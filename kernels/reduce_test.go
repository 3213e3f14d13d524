package kernels_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// problem builds a Problem for op on args, inferring the result types.
func problem(t *testing.T, op ir.Op, attrs ir.Attrs, args ...ir.Type) *kernels.Problem {
	t.Helper()
	a, outs, err := ir.Infer(op, attrs, args)
	if err != nil {
		t.Fatalf("%s%v: %v", op, args, err)
	}
	return &kernels.Problem{Op: op, Attrs: a, Args: args, Outs: outs, NumOpArgs: len(args)}
}

func randomArgs(rng *rand.Rand, p *kernels.Problem) []*ir.Tensor {
	out := make([]*ir.Tensor, len(p.Args))
	for i, t := range p.Args {
		out[i] = kerneltest.Random(rng, t)
	}
	return out
}

// Configurations row-wise templates are tested at besides their default (one workgroup per row,
// subgroup arithmetic): several rows per workgroup combined through the shared-memory tree (the
// last workgroup partly past the last row), and one invocation per row.
var rowConfigs = []kernels.Config{
	{"wg": 64, "coop": 1, "subgroup": 0, "rows": 4},
	{"wg": 64, "coop": 0, "subgroup": 0, "rows": 1},
}

func TestReduceOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, op := range []ir.Op{ir.Sum, ir.Mean, ir.Max, ir.Min, ir.Argmax} {
		for _, tc := range []struct {
			x       ir.Type
			axis    int
			keep    bool
			configs []kernels.Config
		}{
			{ir.T(ir.F32, 3, 37), -1, false, rowConfigs},
			{ir.T(ir.F16, 3, 129), 1, true, nil},
			{ir.T(ir.F32, 4, 5, 3), 1, false, rowConfigs},
			{ir.T(ir.F32, 5, 1), -1, true, nil},
			{ir.T(ir.F32, 7, 3), 0, false, nil},
			{ir.T(ir.I32, 2, 37), -1, false, rowConfigs[:1]},
			{ir.T(ir.U32, 3, 5), 0, false, nil},
		} {
			p := problem(t, op, ir.Attrs{"axis": tc.axis, "keepdims": tc.keep}, tc.x)
			checkConfigs(t, kernels.Reduce, p, randomArgs(rng, p), withSplit(tc.configs, 1))
		}
	}
}

// NaN propagates through max and min and wins argmax (its first occurrence); ties go to the
// first index; -0 and +0 are equal.
func TestReduceNaNAndTies(t *testing.T) {
	x := ir.T(ir.F32, 3, 9)
	nan := math.NaN()
	v := []float64{
		1, 3, -2, 3, 0, 3, -5, 1, 2,
		1, nan, 7, nan, 9, 0, 0, 0, 0,
		math.Copysign(0, -1), 0, -1, -3, -1, -3, -9, -3, -1,
	}
	args := []*ir.Tensor{ir.TensorFromFloat64s(x, v)}
	for _, op := range []ir.Op{ir.Max, ir.Min, ir.Argmax} {
		p := problem(t, op, ir.Attrs{"axis": -1}, x)
		checkConfigs(t, kernels.Reduce, p, args, withSplit(rowConfigs, 1))
	}
}

// withSplit adds the reduce template's split parameter to row configurations.
func withSplit(cs []kernels.Config, split int) []kernels.Config {
	if cs == nil {
		return nil
	}
	out := make([]kernels.Config, len(cs))
	for i, c := range cs {
		d := kernels.Config{"split": split}
		for k, v := range c {
			d[k] = v
		}
		out[i] = d
	}
	return out
}

// A long row split over several workgroups, combined by a second step: every op, f32 and f16,
// subgroup and shared-memory combining; ties and NaN across parts.
func TestReduceSplitOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	split := []kernels.Config{
		{"wg": 32, "coop": 1, "subgroup": 1, "rows": 1, "split": 8},
		{"wg": 32, "coop": 1, "subgroup": 0, "rows": 1, "split": 8},
	}
	for _, op := range []ir.Op{ir.Sum, ir.Mean, ir.Max, ir.Min, ir.Argmax} {
		for _, x := range []ir.Type{ir.T(ir.F32, 2, 300), ir.T(ir.F16, 1, 301)} {
			p := problem(t, op, nil, x)
			args := randomArgs(rng, p)
			for _, c := range split {
				kerneltest.Check(t, kernels.Reduce, p, c, args)
			}
		}
	}
	x := ir.T(ir.F32, 2, 300)
	v := make([]float64, 600)
	v[100], v[250] = 5, 5                 // row 0: a tie across parts, the first wins
	v[300+10], v[300+290] = 7, math.NaN() // row 1: NaN in the last part
	args := []*ir.Tensor{ir.TensorFromFloat64s(x, v)}
	for _, op := range []ir.Op{ir.Max, ir.Min, ir.Argmax} {
		kerneltest.Check(t, kernels.Reduce, problem(t, op, nil, x), split[1], args)
	}
	short := problem(t, ir.Sum, nil, ir.T(ir.F32, 2, 100))
	if err := kernels.Reduce.Space.Valid(short, split[0], kernels.Lavapipe); err == nil {
		t.Error("split=8 accepted for rows of 100 with wg=32")
	}
	many := problem(t, ir.Sum, nil, ir.T(ir.F32, 8, 1000))
	if err := kernels.Reduce.Space.Valid(many, split[0], kernels.Lavapipe); err == nil {
		t.Error("split=8 accepted for 8 rows")
	}
	// One long row (greedy decoding's argmax over a vocabulary) splits by default.
	_, c, err := kernels.Build(kernels.Reduce, problem(t, ir.Argmax, nil, ir.T(ir.F32, 1, 49152)), kernels.Lavapipe)
	if err != nil || c["split"] != 32 {
		t.Errorf("argmax over 49152: default %v, %v", c, err)
	}
}

func TestReduceAccepts(t *testing.T) {
	p := problem(t, ir.Sum, ir.Attrs{"axis": 0}, ir.T(ir.F32, 4))
	if err := kernels.Reduce.Accepts(p, kernels.Lavapipe); err != nil {
		t.Errorf("sum of f32[4] refused: %v", err)
	}
	p.Expr = &kernels.Fused{}
	if err := kernels.Reduce.Accepts(p, kernels.Lavapipe); err == nil {
		t.Error("an epilogue was accepted")
	}
	noF16 := kernels.Lavapipe
	noF16.Storage16 = false
	if err := kernels.Reduce.Accepts(problem(t, ir.Max, nil, ir.T(ir.F16, 3, 4)), noF16); err == nil {
		t.Error("f16 without 16-bit storage was accepted")
	}
	if err := kernels.Reduce.Accepts(problem(t, ir.Softmax, nil, ir.T(ir.F32, 3, 4)), kernels.Lavapipe); err == nil {
		t.Error("softmax was accepted")
	}
	// Without subgroup arithmetic the default falls back to shared memory.
	noSub := kernels.Lavapipe
	noSub.SubgroupArithmetic = false
	_, c, err := kernels.Build(kernels.Reduce, problem(t, ir.Sum, nil, ir.T(ir.F32, 3, 37)), noSub)
	if err != nil || c["subgroup"] != 0 || c["coop"] != 1 {
		t.Errorf("without subgroups: config %v, err %v", c, err)
	}
}
