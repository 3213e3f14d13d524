package ir

import (
	"fmt"
	"math"
)

// RoPE frequency scaling: rope's (and rope_norm's, rope_cache_write's) attribute scaling changes
// the inverse frequencies theta^(-2i/d) of the rotation, as transformers' rope_scaling (or
// rope_parameters) does:
//
//   - "none": unchanged.
//   - "linear": every inverse frequency divided by factor (positions interpolated by 1/factor;
//     transformers' _compute_linear_scaling_rope_parameters, llama.cpp's rope.scaling.type
//     linear).
//   - "llama3" (Llama 3.1 and 3.2): with wavelength λ = 2π/inv, λ_low = original_ctx/low_freq_factor
//     and λ_high = original_ctx/high_freq_factor, an inverse frequency with λ < λ_high is kept,
//     one with λ > λ_low is divided by factor, and one in between becomes
//     (1 − s)·inv/factor + s·inv with s = (original_ctx/λ − low_freq_factor)/(high_freq_factor −
//     low_freq_factor) (transformers' _compute_llama3_parameters). llama.cpp stores the same as
//     per-frequency divisors (rope_freqs.weight); FitRopeScaling reads them back.
//
// Neither changes the attention scale (transformers' attention_factor is 1 for both); scalings
// that do (YaRN, LongRoPE) are not expressed.
const (
	RopeScalingNone   = "none"
	RopeScalingLinear = "linear"
	RopeScalingLlama3 = "llama3"
)

// ropeScalingAttrs are the scaling attributes shared by rope and its fused forms; the llama3
// defaults are Meta's (factor 8 is not a default: factor 1 means no scaling).
var ropeScalingAttrs = []AttrSpec{
	{Name: "scaling", Kind: AttrString, Default: RopeScalingNone},
	{Name: "factor", Kind: AttrFloat, Default: 1.0},
	{Name: "low_freq_factor", Kind: AttrFloat, Default: 1.0},
	{Name: "high_freq_factor", Kind: AttrFloat, Default: 4.0},
	{Name: "original_ctx", Kind: AttrInt, Default: 8192},
}

// RopeScaling is a rope's frequency scaling, read from its attributes by RopeScalingOf.
type RopeScaling struct {
	Type                          string // RopeScalingNone, RopeScalingLinear or RopeScalingLlama3
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64 // llama3 only
	OriginalCtx                   int     // llama3 only
}

// RopeScalingOf reads and checks the scaling attributes of a rope (or fused rope) op; absent
// attributes take their defaults. Attributes of another scaling type than the one named are an
// error, not silently ignored.
func RopeScalingOf(a Attrs) (RopeScaling, error) {
	s := RopeScaling{
		Type:           a.String("scaling", RopeScalingNone),
		Factor:         a.Float("factor", 1),
		LowFreqFactor:  a.Float("low_freq_factor", 1),
		HighFreqFactor: a.Float("high_freq_factor", 4),
		OriginalCtx:    a.Int("original_ctx", 8192),
	}
	llama3Defaults := s.LowFreqFactor == 1 && s.HighFreqFactor == 4 && s.OriginalCtx == 8192
	switch s.Type {
	case RopeScalingNone:
		if s.Factor != 1 || !llama3Defaults {
			return s, fmt.Errorf("factor, low_freq_factor, high_freq_factor and original_ctx apply to scaling=linear or llama3; scaling is none")
		}
	case RopeScalingLinear:
		if !llama3Defaults {
			return s, fmt.Errorf("low_freq_factor, high_freq_factor and original_ctx apply to scaling=llama3, not linear")
		}
	case RopeScalingLlama3:
		if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
			return s, fmt.Errorf("scaling=llama3 needs 0 < low_freq_factor < high_freq_factor, got %v and %v", s.LowFreqFactor, s.HighFreqFactor)
		}
		if s.OriginalCtx <= 0 {
			return s, fmt.Errorf("scaling=llama3 needs original_ctx > 0, got %d", s.OriginalCtx)
		}
	default:
		return s, fmt.Errorf("scaling must be %s, %s or %s, got %q", RopeScalingNone, RopeScalingLinear, RopeScalingLlama3, s.Type)
	}
	if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
		return s, fmt.Errorf("scaling factor must be positive, got %v", s.Factor)
	}
	return s, nil
}

// Attrs returns the attributes that express s (all five, so a rule or an importer that copies
// them carries the whole scaling).
func (s RopeScaling) Attrs() Attrs {
	t := s.Type
	if t == "" {
		t = RopeScalingNone
	}
	f, lo, hi, ctx := s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalCtx
	if f == 0 {
		f = 1
	}
	if t != RopeScalingLlama3 {
		lo, hi, ctx = 1, 4, 8192
	}
	return Attrs{"scaling": t, "factor": f, "low_freq_factor": lo, "high_freq_factor": hi, "original_ctx": ctx}
}

// Scaled returns the inverse frequency inv after scaling (float64).
func (s RopeScaling) Scaled(inv float64) float64 {
	switch s.Type {
	case RopeScalingLinear:
		return inv / s.Factor
	case RopeScalingLlama3:
		wavelen := 2 * math.Pi / inv
		lo := float64(s.OriginalCtx) / s.LowFreqFactor
		hi := float64(s.OriginalCtx) / s.HighFreqFactor
		switch {
		case wavelen < hi:
			return inv
		case wavelen > lo:
			return inv / s.Factor
		}
		smooth := (float64(s.OriginalCtx)/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
		return (1-smooth)*inv/s.Factor + smooth*inv
	}
	return inv
}

// RopeInvFreq returns the h = d/2 inverse frequencies theta^(-2i/d) of a rope of rotary dimension
// d, scaled by s.
func RopeInvFreq(theta float64, d int, s RopeScaling) []float64 {
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = s.Scaled(1 / math.Pow(theta, float64(2*i)/float64(d)))
	}
	return inv
}

// FitRopeScaling finds the scaling whose inverse frequencies (of theta and rotary dimension d)
// are inv, each within relative tolerance tol (0: equal once rounded to f32): no scaling, linear
// (factor = the first frequency's ratio) or llama3. A llama3 fit reads factor from the lowest
// frequency and λ_low, λ_high from the frequencies between them, so it needs at least two such
// "medium" frequencies; its attributes are given with low_freq_factor 1 (original_ctx = λ_low,
// high_freq_factor = λ_low/λ_high), which is every released Llama 3.x's own form (8192, 1, 4).
// It is how llama.cpp's per-frequency divisors (GGUF rope_freqs.weight) and a decomposed rope's
// frequency table become a rope attribute again; ok is false when no scaling fits.
func FitRopeScaling(inv []float64, theta float64, d int, tol float64) (RopeScaling, bool) {
	h := d / 2
	if len(inv) != h || h == 0 {
		return RopeScaling{}, false
	}
	base := RopeInvFreq(theta, d, RopeScaling{Type: RopeScalingNone})
	matches := func(s RopeScaling) bool {
		got := RopeInvFreq(theta, d, s)
		for i := range got {
			if tol == 0 {
				if float32(got[i]) != float32(inv[i]) {
					return false
				}
			} else if math.Abs(got[i]-inv[i]) > tol*math.Abs(inv[i]) {
				return false
			}
		}
		return true
	}
	none := RopeScaling{Type: RopeScalingNone, Factor: 1}
	if matches(none) {
		return none, true
	}
	// The ratios base/inv: 1 for kept frequencies, factor for fully scaled ones.
	ratio := make([]float64, h)
	for i := range ratio {
		if !(inv[i] > 0) {
			return RopeScaling{}, false
		}
		ratio[i] = base[i] / inv[i]
	}
	for _, f := range niceFloats(ratio[0]) {
		if s := (RopeScaling{Type: RopeScalingLinear, Factor: f}); matches(s) {
			return s, true
		}
	}
	factor := ratio[h-1]
	// Medium frequencies: ratios strictly between 1 and factor (beyond rounding).
	eps := max(tol, 1e-6)
	var med []int
	for i, r := range ratio {
		if r > 1+eps && r < factor*(1-eps) {
			med = append(med, i)
		}
	}
	if len(med) < 2 || !(factor > 1) {
		return RopeScaling{}, false
	}
	// smooth s_i = (1/r_i − 1/factor)/(1 − 1/factor) = α·u_i + β with u_i = 1/λ_i = base_i/2π,
	// α = 1/(1/λ_high − 1/λ_low)·... solved from the outermost medium frequencies.
	sm := func(i int) float64 { return (1/ratio[i] - 1/factor) / (1 - 1/factor) }
	u := func(i int) float64 { return base[i] / (2 * math.Pi) }
	i0, i1 := med[0], med[len(med)-1]
	alpha := (sm(i0) - sm(i1)) / (u(i0) - u(i1))
	beta := sm(i0) - alpha*u(i0)
	// s = 0 at u = 1/λ_low, s = 1 at u = 1/λ_high.
	lowWL, highWL := alpha/(-beta), alpha/(1-beta)
	if !(lowWL > highWL) || !(highWL > 0) {
		return RopeScaling{}, false
	}
	for _, f := range niceFloats(factor) {
		for _, ctx := range []float64{math.Round(lowWL), lowWL} {
			if ctx < 1 || ctx > math.MaxInt32 {
				continue
			}
			for _, hf := range niceFloats(ctx / highWL) {
				s := RopeScaling{Type: RopeScalingLlama3, Factor: f, LowFreqFactor: 1, HighFreqFactor: hf, OriginalCtx: int(ctx)}
				if float64(int(ctx)) == ctx && s.HighFreqFactor > 1 && matches(s) {
					return s, true
				}
			}
		}
	}
	return RopeScaling{}, false
}

// niceFloats are the candidates for a value recovered from rounded data: the nearest integer,
// the shortest decimal that rounds to the same f32, and the value itself.
func niceFloats(x float64) []float64 {
	return []float64{math.Round(x), shortFloat32(x), x}
}

// shortFloat32 is the shortest decimal that rounds to the same float32 as x.
func shortFloat32(x float64) float64 {
	f := float32(x)
	for p := 1; p <= 9; p++ {
		s := math.Pow(10, float64(p)-math.Ceil(math.Log10(math.Abs(x))))
		if c := math.Round(x*s) / s; float32(c) == f {
			return c
		}
	}
	return x
}
