package ir_test

import (
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// hfInvFreq is transformers' RoPE initialisation for rope_type default, linear and llama3
// (modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters), written here as that code is written: whole-vector operations
// with torch.where masks, in float32 as torch computes them. It shares nothing with package ir.
func hfInvFreq(theta float64, dim int, ropeType string, factor, low, high float64, oldCtx int) []float64 {
	h := dim / 2
	invFreq := make([]float32, h)
	for j := range invFreq { // 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
		invFreq[j] = float32(1 / math.Pow(theta, float64(float32(2*j)/float32(dim))))
	}
	out := make([]float64, h)
	switch ropeType {
	case "default":
		for j := range out {
			out[j] = float64(invFreq[j])
		}
	case "linear":
		for j := range out {
			out[j] = float64(invFreq[j] / float32(factor))
		}
	case "llama3":
		lowWavelen := float32(float64(oldCtx) / low)
		highWavelen := float32(float64(oldCtx) / high)
		wavelen := make([]float32, h)
		llama := make([]float32, h)
		for j := range wavelen {
			wavelen[j] = float32(2*math.Pi) / invFreq[j]
		}
		for j := range llama { // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
			if wavelen[j] > lowWavelen {
				llama[j] = invFreq[j] / float32(factor)
			} else {
				llama[j] = invFreq[j]
			}
		}
		for j := range llama {
			smooth := (float32(oldCtx)/wavelen[j] - float32(low)) / float32(high-low)
			smoothed := (1-smooth)*llama[j]/float32(factor) + smooth*llama[j]
			medium := !(wavelen[j] < highWavelen) && !(wavelen[j] > lowWavelen)
			if medium {
				llama[j] = smoothed
			}
		}
		for j := range out {
			out[j] = float64(llama[j])
		}
	}
	return out
}

// llamaCppFactors is what llama.cpp's converter writes as rope_freqs.weight for a llama3
// rope_scaling (LlamaModel.generate_extra_tensors): a divisor per frequency, float32.
func llamaCppFactors(theta float64, dim int, factor, low, high float64, oldCtx int) []float64 {
	lowWavelen, highWavelen := float64(oldCtx)/low, float64(oldCtx)/high
	var f []float64
	for j := 0; j < dim; j += 2 {
		freq := float64(float32(1 / math.Pow(theta, float64(j)/float64(dim))))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			f = append(f, 1)
		case wavelen > lowWavelen:
			f = append(f, float64(float32(factor)))
		default:
			smooth := (float64(oldCtx)/wavelen - low) / (high - low)
			f = append(f, float64(float32(1/((1-smooth)/factor+smooth))))
		}
	}
	return f
}

// The rope scalings of released checkpoints: Llama 3.1 8B (factor 8), Llama 3.2 1B (factor 32),
// and a linear one.
var ropeScalingCases = []struct {
	name     string
	theta    float64
	dim      int
	ropeType string
	factor   float64
	low      float64
	high     float64
	oldCtx   int
}{
	{"llama3.1", 500000, 128, "llama3", 8, 1, 4, 8192},
	{"llama3.2", 500000, 64, "llama3", 32, 1, 4, 8192},
	{"linear", 10000, 64, "linear", 4, 0, 0, 0},
	{"default", 1e6, 128, "default", 1, 0, 0, 0},
}

func TestRopeInvFreqAgainstTransformers(t *testing.T) {
	for _, c := range ropeScalingCases {
		t.Run(c.name, func(t *testing.T) {
			want := hfInvFreq(c.theta, c.dim, c.ropeType, c.factor, c.low, c.high, c.oldCtx)
			at := ir.Attrs{}
			switch c.ropeType {
			case "linear":
				at = ir.Attrs{"scaling": "linear", "factor": c.factor}
			case "llama3":
				at = ir.Attrs{"scaling": "llama3", "factor": c.factor, "low_freq_factor": c.low, "high_freq_factor": c.high, "original_ctx": c.oldCtx}
			}
			sc, err := ir.RopeScalingOf(at)
			if err != nil {
				t.Fatal(err)
			}
			got := ir.RopeInvFreq(c.theta, c.dim, sc)
			scaled := 0
			for i := range want {
				// transformers computes in f32: a few ulps of f32 apart.
				if math.Abs(got[i]-want[i]) > 4e-7*want[i] {
					t.Errorf("frequency %d: %g, transformers gives %g", i, got[i], want[i])
				}
				if base := 1 / math.Pow(c.theta, float64(2*i)/float64(c.dim)); math.Abs(want[i]-base) > 1e-6*base {
					scaled++
				}
			}
			if c.ropeType != "default" && scaled == 0 {
				t.Errorf("no frequency is scaled: the case checks nothing")
			}
		})
	}
}

func TestFitRopeScaling(t *testing.T) {
	for _, c := range ropeScalingCases {
		t.Run(c.name, func(t *testing.T) {
			table := hfInvFreq(c.theta, c.dim, c.ropeType, c.factor, c.low, c.high, c.oldCtx)
			sc, ok := ir.FitRopeScaling(table, c.theta, c.dim, 1e-6)
			if !ok {
				t.Fatalf("no scaling fits transformers' %s table", c.ropeType)
			}
			wantType := map[string]string{"default": "none", "linear": "linear", "llama3": "llama3"}[c.ropeType]
			if sc.Type != wantType || sc.Factor != c.factor {
				t.Fatalf("fit %+v, want %s with factor %v", sc, wantType, c.factor)
			}
			if c.ropeType == "llama3" && (sc.LowFreqFactor != c.low || sc.HighFreqFactor != c.high || sc.OriginalCtx != c.oldCtx) {
				t.Errorf("fit %+v, want low %v, high %v, original_ctx %d", sc, c.low, c.high, c.oldCtx)
			}
			if c.ropeType != "llama3" {
				return
			}
			// llama.cpp's divisors give the same scaling.
			ff := llamaCppFactors(c.theta, c.dim, c.factor, c.low, c.high, c.oldCtx)
			inv := make([]float64, len(ff))
			for i := range ff {
				inv[i] = 1 / math.Pow(c.theta, float64(2*i)/float64(c.dim)) / ff[i]
			}
			sc2, ok := ir.FitRopeScaling(inv, c.theta, c.dim, 1e-5)
			if !ok || sc2 != sc {
				t.Errorf("llama.cpp's rope_freqs fit %+v (%v), want %+v", sc2, ok, sc)
			}
		})
	}
	// A table no scaling makes.
	bad := hfInvFreq(10000, 64, "default", 1, 0, 0, 0)
	bad[5] *= 1.5
	if sc, ok := ir.FitRopeScaling(bad, 10000, 64, 1e-6); ok {
		t.Errorf("a perturbed table fit %+v", sc)
	}
}

func TestRopeScalingAttrErrors(t *testing.T) {
	x, pos := ir.T(ir.F32, 4, 2, 8), ir.T(ir.I32)
	for _, c := range []struct {
		attrs ir.Attrs
		want  string
	}{
		{ir.Attrs{"scaling": "yarn"}, `scaling must be none, linear or llama3, got "yarn"`},
		{ir.Attrs{"factor": 2.0}, "apply to scaling=linear or llama3"},
		{ir.Attrs{"scaling": "linear", "factor": 0.0}, "factor must be positive"},
		{ir.Attrs{"scaling": "linear", "factor": 2.0, "original_ctx": 4096}, "apply to scaling=llama3, not linear"},
		{ir.Attrs{"scaling": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}, "low_freq_factor < high_freq_factor"},
		{ir.Attrs{"theta": -1.0}, "theta must be positive"},
	} {
		_, _, err := ir.Infer(ir.Rope, c.attrs, []ir.Type{x, pos})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.attrs, err, c.want)
		}
	}
	if _, _, err := ir.Infer(ir.Rope, ir.Attrs{"scaling": "llama3", "factor": 8.0}, []ir.Type{x, pos}); err != nil {
		t.Errorf("llama3 with Meta's defaults: %v", err)
	}
}
