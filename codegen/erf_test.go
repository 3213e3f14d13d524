package codegen

import (
	"math"
	"testing"
)

// TestErfAccuracy bounds the error of the erf approximation against math.Erf over [-6, 6], computed
// in float32 as the GPU does: relative error where |erf| > 1e-30, and absolute error near 1.
func TestErfAccuracy(t *testing.T) {
	var maxRel, maxAbs float64
	var worst float32
	for i := -60000; i <= 60000; i++ {
		x := float32(i) / 10000
		got := float64(ErfF32(x))
		want := math.Erf(float64(x))
		abs := math.Abs(got - want)
		maxAbs = max(maxAbs, abs)
		if want != 0 {
			if rel := abs / math.Abs(want); rel > maxRel {
				maxRel, worst = rel, x
			}
		}
	}
	// Tiny arguments, where a 1 - exp(...) formulation would lose everything.
	for _, x := range []float32{1e-30, 1e-20, 1e-10, 1e-6, 3e-5, 1e-3} {
		want := math.Erf(float64(x))
		if rel := math.Abs(float64(ErfF32(x))-want) / want; rel > maxRel {
			maxRel, worst = rel, x
		}
	}
	t.Logf("erf approximation: max relative error %.3g (at x=%g), max absolute error %.3g", maxRel, worst, maxAbs)
	if maxRel > 2e-6 {
		t.Errorf("max relative error %.3g at x=%g, want below 2e-6", maxRel, worst)
	}
	if maxAbs > 1e-6 {
		t.Errorf("max absolute error %.3g, want below 1e-6", maxAbs)
	}
}

func TestHalfRoundTrip(t *testing.T) {
	for _, c := range []struct {
		x float32
		h uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 1}, {0.333251953125, 0x3555}} {
		if got := Float32ToHalf(c.x); got != c.h {
			t.Errorf("Float32ToHalf(%g) = %#x, want %#x", c.x, got, c.h)
		}
		if c.h != 0x7c00 {
			if got := HalfToFloat32(c.h); got != c.x {
				t.Errorf("HalfToFloat32(%#x) = %g, want %g", c.h, got, c.x)
			}
		}
	}
	// Every finite half survives a round trip through float32.
	for h := 0; h < 0x10000; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := Float32ToHalf(HalfToFloat32(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip of %#x gives %#x", h, got)
		}
	}
}
