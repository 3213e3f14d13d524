package codegen

// Erf approximation.
//
// erf(x) = x * P(x²) / Q(x²) on x clamped to [-4, 4] (beyond which erf rounds to ±1 in float32),
// with P of degree 6 and Q of degree 4 in x². This is the rational minimax approximation used by
// Eigen and XLA for float erf. Unlike Abramowitz-Stegun 7.1.26 (absolute error 1.5e-7 but
// computed as 1 - poly*exp(-x²), which loses all relative accuracy near 0 and is too coarse in
// float32 for 1e-4 relative), it is a pure rational function, so the relative error is small
// everywhere: TestErfAccuracy measures it against math.Erf in float32 (below 2e-6 relative).
// Cost: 11 multiply-adds, one division, one clamp; no transcendental call.
var (
	erfP = [...]float32{ // numerator, in powers of x² from the highest
		-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
		-7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02,
	}
	erfQ = [...]float32{ // denominator, in powers of x² from the highest
		-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
		-1.42647390514189e-02,
	}
)

// Erf is the error function by the rational approximation above. An f16 operand is computed in f32
// and rounded back: the smallest coefficients underflow in f16 and x² up to 16 raised to the 6th
// power would overflow it.
func (b *Builder) Erf(x Value) Value {
	if !b.ok("Erf", x) {
		return Value{t: x.t}
	}
	if !x.t.IsFloat() {
		b.errorf("Erf", "not defined for %s", x.t)
		return Value{t: x.t}
	}
	if x.t.kind == F16Kind {
		return b.Convert(b.Erf(b.Convert(x, Vec(F32, x.t.Len()))), x.t)
	}
	c := func(v float32) Value { return b.Const(x.t, float64(v)) }
	in := x
	x = b.Clamp(x, c(-4), c(4)) // FClamp of a NaN is undefined: the NaN is put back at the end
	x2 := b.Mul(x, x)
	p := c(erfP[0])
	for _, k := range erfP[1:] {
		p = b.Fma(p, x2, c(k))
	}
	q := c(erfQ[0])
	for _, k := range erfQ[1:] {
		q = b.Fma(q, x2, c(k))
	}
	return b.Select(b.IsNaN(in), in, b.Div(b.Mul(x, p), q))
}

// ErfF32 computes, in float32, the same operation sequence Builder.Erf emits; tests of kernels use it
// as the exact expectation for the GPU's result up to fma rounding.
func ErfF32(x float32) float32 {
	x = min(max(x, -4), 4)
	x2 := x * x
	p := erfP[0]
	for _, k := range erfP[1:] {
		p = p*x2 + k
	}
	q := erfQ[0]
	for _, k := range erfQ[1:] {
		q = q*x2 + k
	}
	return x * p / q
}
