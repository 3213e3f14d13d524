package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

var flatConfigs = []kernels.Config{{"wg": 64, "per_thread": 4}}

func posTensor(p int) *ir.Tensor { return ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(p)}) }

func TestRopeOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, mode := range []string{"half", "interleaved"} {
		for i, tc := range []struct {
			x       ir.Type
			seqAxis int
			pos     int
		}{
			{ir.T(ir.F32, 5, 3, 16), 0, 7},  // [seq, heads, d]
			{ir.T(ir.F32, 3, 5, 6), 1, 0},   // [heads, seq, d]
			{ir.T(ir.F16, 1, 3, 64), 0, 29}, // decode
			{ir.T(ir.F32, 2, 3, 5, 4), -2, 3},
		} {
			p := problem(t, ir.Rope, ir.Attrs{"mode": mode, "seq_axis": tc.seqAxis, "theta": 10000.0}, tc.x, ir.T(ir.I32))
			args := []*ir.Tensor{kerneltest.Random(rng, tc.x), posTensor(tc.pos)}
			checkConfigs(t, kernels.Rope, p, args, firstOnly(i, flatConfigs))
		}
	}
}

// ropeScalings are linear and llama3 frequency scalings; with theta 10000 and d = 16 the
// llama3 one keeps, blends and divides some of the 8 frequencies each (wavelengths 6.3 to 19000).
var ropeScalings = []ir.Attrs{
	{"scaling": "linear", "factor": 4.0},
	{"scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 20.0, "original_ctx": 2000},
}

func withAttrs(a ir.Attrs, more ir.Attrs) ir.Attrs {
	out := a.Clone()
	for k, v := range more {
		out[k] = v
	}
	return out
}

// TestRopeScalingOnDevice: the scaled frequencies computed in f32 on the device against the
// interpreter's float64, at positions where an angle error shows (up to 900).
func TestRopeScalingOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, sc := range ropeScalings {
		for _, mode := range []string{"half", "interleaved"} {
			x := ir.T(ir.F32, 3, 2, 16)
			p := problem(t, ir.Rope, withAttrs(sc, ir.Attrs{"mode": mode, "theta": 10000.0}), x, ir.T(ir.I32))
			args := []*ir.Tensor{kerneltest.Random(rng, x), posTensor(900)}
			checkConfigs(t, kernels.Rope, p, args, flatConfigs)
		}
		st, x := ir.T(ir.F32, 11, 2, 16), ir.T(ir.F32, 3, 2, 16)
		p := problem(t, ir.RopeCacheWrite, withAttrs(sc, ir.Attrs{"theta": 10000.0}), st, x, ir.T(ir.I32))
		checkConfigs(t, kernels.RopeCacheWrite, p, []*ir.Tensor{kerneltest.Random(rng, st), kerneltest.Random(rng, x), posTensor(7)}, flatConfigs)
		w := ir.T(ir.F32, 16)
		p = problem(t, ir.RopeNorm, withAttrs(sc, ir.Attrs{"theta": 10000.0, "eps": 1e-6}), x, w, ir.T(ir.I32))
		checkConfigs(t, kernels.RopeNorm, p, []*ir.Tensor{kerneltest.Random(rng, x), kerneltest.Random(rng, w), posTensor(400)}, rowConfigs[:1])
	}
}

func TestRopeNormOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	for _, mode := range []string{"half", "interleaved"} {
		for i, tc := range []struct {
			x       ir.Type
			seqAxis int
		}{
			{ir.T(ir.F32, 4, 3, 16), 0},
			{ir.T(ir.F16, 3, 2, 10), 1},
		} {
			d := tc.x.Shape[tc.x.Shape.Rank()-1]
			w := ir.Type{DType: tc.x.DType, Shape: ir.Shape{d}}
			p := problem(t, ir.RopeNorm, ir.Attrs{"mode": mode, "seq_axis": tc.seqAxis, "theta": 1e6, "eps": 1e-6}, tc.x, w, ir.T(ir.I32, 1))
			args := []*ir.Tensor{kerneltest.Random(rng, tc.x), kerneltest.Random(rng, w), ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{11})}
			checkConfigs(t, kernels.RopeNorm, p, args, firstOnly(i, rowConfigs))
		}
	}
}

func TestCacheWriteOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for i, tc := range []struct {
		state, x ir.Type
		pos      int
	}{
		{ir.T(ir.F32, 9, 3, 5), ir.T(ir.F32, 1, 3, 5), 4},
		{ir.T(ir.F32, 9, 3, 5), ir.T(ir.F32, 9, 3, 5), 0},
		{ir.T(ir.F16, 7, 6), ir.T(ir.F16, 3, 6), 4},
		{ir.T(ir.I32, 5, 2), ir.T(ir.I32, 2, 2), 1},
		// f32 rows into an f16 cache (rounded as written), and f16 rows into an f32 one
		{ir.T(ir.F16, 9, 2, 8), ir.T(ir.F32, 2, 2, 8), 3},
		{ir.T(ir.F32, 9, 2, 8), ir.T(ir.F16, 1, 2, 8), 8},
	} {
		p := problem(t, ir.CacheWrite, nil, tc.state, tc.x, ir.T(ir.I32))
		args := []*ir.Tensor{kerneltest.Random(rng, tc.state), kerneltest.Random(rng, tc.x), posTensor(tc.pos)}
		checkConfigs(t, kernels.CacheWrite, p, args, firstOnly(i, flatConfigs))
	}
}

func TestRopeCacheWriteOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(10))
	for _, mode := range []string{"half", "interleaved"} {
		for i, tc := range []struct {
			state, x ir.Type
			pos      int
		}{
			{ir.T(ir.F32, 11, 3, 8), ir.T(ir.F32, 1, 3, 8), 10},
			{ir.T(ir.F16, 11, 3, 8), ir.T(ir.F16, 5, 3, 8), 2},
			{ir.T(ir.F16, 11, 3, 8), ir.T(ir.F32, 2, 3, 8), 6}, // f32 keys into an f16 cache
		} {
			p := problem(t, ir.RopeCacheWrite, ir.Attrs{"mode": mode}, tc.state, tc.x, ir.T(ir.I32))
			args := []*ir.Tensor{kerneltest.Random(rng, tc.state), kerneltest.Random(rng, tc.x), posTensor(tc.pos)}
			checkConfigs(t, kernels.RopeCacheWrite, p, args, firstOnly(i, flatConfigs))
		}
	}
}

func TestRopeAccepts(t *testing.T) {
	x := ir.T(ir.F32, 3, 2, 8)
	p := problem(t, ir.Rope, nil, x, ir.T(ir.I32))
	for _, tmpl := range []*kernels.Template{kernels.RopeNorm, kernels.RopeCacheWrite, kernels.CacheWrite} {
		if err := tmpl.Accepts(p, kernels.Lavapipe); err == nil {
			t.Errorf("%s accepted rope", tmpl.Name)
		}
	}
	if err := kernels.Rope.Accepts(p, kernels.Lavapipe); err != nil {
		t.Errorf("rope refused: %v", err)
	}
	odd := *p
	odd.Args = []ir.Type{ir.T(ir.F32, 3, 7), ir.T(ir.I32)}
	odd.Outs = []ir.Type{odd.Args[0]}
	if err := kernels.Rope.Accepts(&odd, kernels.Lavapipe); err == nil {
		t.Error("rope accepted an odd feature axis")
	}
	cw := problem(t, ir.CacheWrite, nil, ir.T(ir.F32, 4, 2), ir.T(ir.F32, 1, 2), ir.T(ir.I32))
	cw.Outs = []ir.Type{ir.T(ir.F32, 4, 3)}
	if err := kernels.CacheWrite.Accepts(cw, kernels.Lavapipe); err == nil {
		t.Error("cache_write accepted a result of the wrong shape")
	}
}

// Rows that fall past the end of the cache are not written (the interpreter rejects them, so
// compare by hand): the kernel must never write outside the state's buffer.
func TestCacheWritePastTheEnd(t *testing.T) {
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	st, x := ir.T(ir.F32, 4, 2), ir.T(ir.F32, 2, 2)
	state := ir.TensorFromFloat64s(st, []float64{1, 2, 3, 4, 5, 6, 7, 8})
	rows := ir.TensorFromFloat64s(x, []float64{-1, -2, -3, -4})
	for _, tc := range []struct {
		tmpl *kernels.Template
		op   ir.Op
		want []float64
	}{
		{kernels.CacheWrite, ir.CacheWrite, []float64{1, 2, 3, 4, 5, 6, -1, -2}},
		// Pairs of 2 features rotate by pos·theta^0 = 3 radians at pos 3; check only that
		// rows 0-2 keep their values and that nothing else breaks.
		{kernels.RopeCacheWrite, ir.RopeCacheWrite, []float64{1, 2, 3, 4, 5, 6}},
	} {
		p := problem(t, tc.op, nil, st, x, ir.T(ir.I32))
		l, _, err := kernels.Build(tc.tmpl, p, caps)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kerneltest.Run(d, p, l, []*ir.Tensor{state, rows, posTensor(3)})
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range tc.want {
			if g := got[0].Float64(i); g != w {
				t.Errorf("%s: element %d: got %g, want %g (all: %v)", tc.tmpl.Name, i, g, w, got[0].Float64s())
			}
		}
	}
}

// TestRopeLargeAngles: a rotation by a large angle is as exact as the angle. With heads of 2
// features there is one pair a head, turned by pos radians (its frequency is 1: exact in f32),
// so its error is sin's and cos's alone. Vulkan bounds them only in [-π, π]; the kernel reduces
// the angle into it first (reduceAngle). On llvmpipe this passes with or without the reduction;
// it is for devices that reduce coarsely (NVIDIA's rotation by 1023 rad was 1.0e-4 of the row
// scale off in the tuner's check of the 1B file's one-row QKV product; it passed on the H100 in
// session 20).
func TestRopeLargeAngles(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, mode := range []string{"half", "interleaved"} {
		for _, pos := range []int{1023, 30000, 200000} {
			x := ir.T(ir.F32, 1, 128, 2)
			p := problem(t, ir.Rope, ir.Attrs{"mode": mode, "seq_axis": 0, "theta": 10000.0}, x, ir.T(ir.I32))
			args := []*ir.Tensor{kerneltest.Random(rng, x), posTensor(pos)}
			want, err := kerneltest.Expect(p, args)
			if err != nil {
				t.Fatal(err)
			}
			d := kerneltest.Device(t)
			l, c, err := kernels.Build(kernels.Rope, p, kerneltest.CapsOf(&d.Info))
			if err != nil {
				t.Fatal(err)
			}
			got, err := kerneltest.Run(d, p, l, args)
			if err != nil {
				t.Fatal(err)
			}
			if msg := kerneltest.Compare(got[0], want[0], 2e-6); msg != "" {
				t.Errorf("%s at pos %d [%s]: %s", mode, pos, c.Key(), msg)
			}
		}
	}
}
