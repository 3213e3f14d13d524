package interp

import (
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// TestEveryOpImplemented fails for an op of the table without a reference implementation, so a
// new op cannot slip in silently.
func TestEveryOpImplemented(t *testing.T) {
	for _, op := range ir.Ops() {
		if impls[op] == nil && multiImpls[op] == nil {
			t.Errorf("op %s has no reference implementation in ir/interp", op)
		}
	}
}

type opCase struct {
	name  string
	op    ir.Op
	attrs ir.Attrs
	args  []*ir.Tensor
	want  *ir.Tensor
	tol   float64 // relative; 0 means exact
}

// handCases are worked by hand (or from closed forms); every non-source op has at least one,
// which TestEveryOpHasHandCase checks.
func handCases() []opCase {
	e := math.E
	pi := math.Pi
	s3 := math.Sqrt(3)
	c := []opCase{
		{"neg", ir.Neg, nil, a(f32(sh(3), 1, -2, 0.5)), f32(sh(3), -1, 2, -0.5), 0},
		{"neg i32 wraps", ir.Neg, nil, a(i32(sh(2), -2147483648, 5)), i32(sh(2), -2147483648, -5), 0},
		{"abs", ir.Abs, nil, a(f32(sh(2), -1.5, 2)), f32(sh(2), 1.5, 2), 0},
		{"abs i32", ir.Abs, nil, a(i32(sh(2), -3, 4)), i32(sh(2), 3, 4), 0},
		{"exp", ir.Exp, nil, a(f32(sh(2), 0, 1)), f32(sh(2), 1, e), 0},
		{"log", ir.Log, nil, a(f32(sh(2), 1, 8)), f32(sh(2), 0, 3*math.Ln2), 0},
		{"sqrt", ir.Sqrt, nil, a(f32(sh(2), 4, 2)), f32(sh(2), 2, math.Sqrt2), 0},
		{"rsqrt", ir.Rsqrt, nil, a(f32(sh(2), 4, 0.25)), f32(sh(2), 0.5, 2), 0},
		{"recip", ir.Recip, nil, a(f32(sh(2), 4, -0.5)), f32(sh(2), 0.25, -2), 0},
		{"sin", ir.Sin, nil, a(f32(sh(2), 0, pi/6)), f32(sh(2), 0, 0.5), 1e-7},
		{"cos", ir.Cos, nil, a(f32(sh(2), 0, pi/3)), f32(sh(2), 1, 0.5), 1e-7},
		{"tanh", ir.Tanh, nil, a(f32(sh(2), 0, math.Log(3)/2)), f32(sh(2), 0, 0.5), 1e-7}, // tanh(ln3/2) = (3-1)/(3+1)
		{"erf", ir.Erf, nil, a(f32(sh(3), 0, 1, -1)), f32(sh(3), 0, 0.8427007929497149, -0.8427007929497149), 1e-7},
		{"sigmoid", ir.Sigmoid, nil, a(f32(sh(2), 0, math.Log(3))), f32(sh(2), 0.5, 0.75), 1e-7},
		{"silu", ir.Silu, nil, a(f32(sh(3), 0, math.Log(3), -math.Log(3))), f32(sh(3), 0, 0.75*math.Log(3), -0.25*math.Log(3)), 1e-7},
		{"relu", ir.Relu, nil, a(f32(sh(3), -1, 0, 2)), f32(sh(3), 0, 0, 2), 0},
		{"relu i32", ir.Relu, nil, a(i32(sh(2), -1, 7)), i32(sh(2), 0, 7), 0},
		// Φ(1) = 0.8413447460685429 (the standard normal CDF), gelu(-1) = -(1-Φ(1)).
		{"gelu", ir.Gelu, nil, a(f32(sh(3), 0, 1, -1)), f32(sh(3), 0, 0.8413447460685429, -0.15865525393145707), 1e-7},
		// The tanh form at 1: 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.8411919906082768.
		{"gelu_tanh", ir.GeluTanh, nil, a(f32(sh(2), 0, 1)), f32(sh(2), 0, 0.8411919906082768), 1e-7},
		{"cast f32→i32 truncates", ir.Cast, ir.Attrs{"to": "i32"}, a(f32(sh(5), 1.7, -1.7, 2.5, -0.5, 3e9)), i32(sh(5), 1, -1, 2, 0, 2147483647), 0},
		{"cast NaN and infinities to i32", ir.Cast, ir.Attrs{"to": "i32"}, a(f32(sh(3), math.NaN(), math.Inf(-1), math.Inf(1))), i32(sh(3), 0, -2147483648, 2147483647), 0},
		{"cast f32→u32 saturates", ir.Cast, ir.Attrs{"to": "u32"}, a(f32(sh(2), -3, 7.9)), tn(ir.T(ir.U32, 2), 0, 7), 0},
		{"cast i32→u32 reinterprets", ir.Cast, ir.Attrs{"to": "u32"}, a(i32(sh(2), -1, 7)), tn(ir.T(ir.U32, 2), 4294967295, 7), 0},
		{"cast u32→i32 reinterprets", ir.Cast, ir.Attrs{"to": "i32"}, a(tn(ir.T(ir.U32, 1), 4294967295)), i32(sh(1), -1), 0},
		{"cast i32→f32", ir.Cast, ir.Attrs{"to": "f32"}, a(i32(sh(2), -3, 16777217)), f32(sh(2), -3, 16777216), 0},
		// 1+2⁻¹¹ is halfway between f16 neighbours 1 and 1+2⁻¹⁰: ties to even gives 1;
		// 1+3·2⁻¹¹ is halfway between 1+2⁻¹⁰ (odd) and 1+2⁻⁹ (even).
		{"cast f32→f16 ties to even", ir.Cast, ir.Attrs{"to": "f16"}, a(f32(sh(3), 1+1.0/2048, 1+3.0/2048, 70000)), tn(ir.T(ir.F16, 3), 1, 1+1.0/512, math.Inf(1)), 0},
		{"cast f32→bf16 ties to even", ir.Cast, ir.Attrs{"to": "bf16"}, a(f32(sh(2), 1+1.0/256, 1+3.0/256)), tn(ir.T(ir.BF16, 2), 1, 1+1.0/64), 0},
		{"cast f32→bool", ir.Cast, ir.Attrs{"to": "bool"}, a(f32(sh(3), 0, -0.5, 2)), tn(ir.T(ir.Bool, 3), 0, 1, 1), 0},

		{"add broadcast", ir.Add, nil, a(f32(sh(2, 1), 10, 20), f32(sh(3), 1, 2, 3)), f32(sh(2, 3), 11, 12, 13, 21, 22, 23), 0},
		{"add i32 wraps", ir.Add, nil, a(i32(sh(1), 2147483647), i32(sh(1), 1)), i32(sh(1), -2147483648), 0},
		{"sub u32 wraps", ir.Sub, nil, a(tn(ir.T(ir.U32, 2), 0, 5), tn(ir.T(ir.U32), 1)), tn(ir.T(ir.U32, 2), 4294967295, 4), 0},
		{"sub", ir.Sub, nil, a(f32(sh(2), 5, 1), f32(sh(), 2)), f32(sh(2), 3, -1), 0},
		{"mul", ir.Mul, nil, a(f32(sh(3, 1), 1, 2, 3), f32(sh(1, 2), 1, -1)), f32(sh(3, 2), 1, -1, 2, -2, 3, -3), 0},
		{"mul i32 wraps", ir.Mul, nil, a(i32(sh(1), 65536), i32(sh(1), 65537)), i32(sh(1), 65536), 0},
		{"div", ir.Div, nil, a(f32(sh(2), 1, 6), f32(sh(2), 4, -3)), f32(sh(2), 0.25, -2), 0},
		{"div i32 truncates", ir.Div, nil, a(i32(sh(2), -7, 7), i32(sh(), 2)), i32(sh(2), -3, 3), 0},
		{"maximum", ir.Maximum, nil, a(f32(sh(3), 1, 5, -2), f32(sh(), 2)), f32(sh(3), 2, 5, 2), 0},
		{"minimum", ir.Minimum, nil, a(f32(sh(3), 1, 5, -2), f32(sh(), 2)), f32(sh(3), 1, 2, -2), 0},
		{"pow", ir.Pow, nil, a(f32(sh(2), 2, 9), f32(sh(2), 3, 0.5)), f32(sh(2), 8, 3), 0},
		{"pow i32", ir.Pow, nil, a(i32(sh(3), 2, -3, 5), i32(sh(3), 10, 3, -1)), i32(sh(3), 1024, -27, 0), 0},
		{"eq", ir.Eq, nil, a(f32(sh(3), 1, 2, 3), f32(sh(), 2)), tn(ir.T(ir.Bool, 3), 0, 1, 0), 0},
		{"ne", ir.Ne, nil, a(f32(sh(3), 1, 2, 3), f32(sh(), 2)), tn(ir.T(ir.Bool, 3), 1, 0, 1), 0},
		{"lt", ir.Lt, nil, a(i32(sh(3), 1, 2, 3), i32(sh(), 2)), tn(ir.T(ir.Bool, 3), 1, 0, 0), 0},
		{"le", ir.Le, nil, a(i32(sh(3), 1, 2, 3), i32(sh(), 2)), tn(ir.T(ir.Bool, 3), 1, 1, 0), 0},
		{"gt", ir.Gt, nil, a(f32(sh(2, 1), 1, 3), f32(sh(2), 2, 0)), tn(ir.T(ir.Bool, 2, 2), 0, 1, 1, 1), 0},
		{"ge", ir.Ge, nil, a(f32(sh(3), 1, 2, 3), f32(sh(), 2)), tn(ir.T(ir.Bool, 3), 0, 1, 1), 0},
		{"where broadcast", ir.Where, nil, a(tn(ir.T(ir.Bool, 2, 1), 1, 0), f32(sh(3), 1, 2, 3), f32(sh(), -1)), f32(sh(2, 3), 1, 2, 3, -1, -1, -1), 0},

		{"sum axis 0 keepdims", ir.Sum, ir.Attrs{"axis": 0, "keepdims": true}, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6)), f32(sh(1, 3), 5, 7, 9), 0},
		{"sum i32", ir.Sum, nil, a(i32(sh(2, 2), 1, 2, 2147483647, 1)), i32(sh(2), 3, -2147483648), 0},
		{"mean last", ir.Mean, nil, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 9)), f32(sh(2), 2, 6), 0},
		{"max axis 1 of 3", ir.Max, ir.Attrs{"axis": 1}, a(f32(sh(2, 2, 2), 1, 8, 3, 4, 5, 6, 7, 2)), f32(sh(2, 2), 3, 8, 7, 6), 0},
		{"min keepdims", ir.Min, ir.Attrs{"keepdims": true}, a(f32(sh(2, 2), 1, -8, 3, 4)), f32(sh(2, 1), -8, 3), 0},
		{"sum to a scalar", ir.Sum, nil, a(f32(sh(3), 1, 2, 3.5)), f32(sh(), 6.5), 0},
		{"max propagates NaN", ir.Max, nil, a(f32(sh(3), 1, math.NaN(), 3)), f32(sh(), math.NaN()), 0},
		{"argmax first NaN", ir.Argmax, nil, a(f32(sh(4), 1, math.NaN(), 3, math.NaN())), i32(sh(), 1), 0},
		{"argmax ties go first", ir.Argmax, nil, a(f32(sh(2, 4), 1, 3, 3, 2, 5, 5, 5, 5)), i32(sh(2), 1, 0), 0},
		{"argtopk", ir.ArgTopK, ir.Attrs{"k": 3}, a(f32(sh(2, 5), 1, 7, 3, 7, 5, -1, -2, -3, -4, -5)), i32(sh(2, 3), 1, 3, 4, 0, 1, 2), 0},
		{"argtopk NaN first", ir.ArgTopK, ir.Attrs{"k": 4}, a(f32(sh(5), 2, math.NaN(), math.Inf(-1), math.NaN(), 9)), i32(sh(4), 1, 3, 4, 0), 0},
		{"argtopk all", ir.ArgTopK, ir.Attrs{"k": 3}, a(i32(sh(1, 3), -5, 8, 0)), i32(sh(1, 3), 1, 2, 0), 0},
		{"take_along_axis", ir.TakeAlongAxis, nil, a(f32(sh(2, 3), 10, 11, 12, 20, 21, 22), i32(sh(2, 2), 2, 0, 1, 1)), f32(sh(2, 2), 12, 10, 21, 21), 0},
		{"argmax axis 0", ir.Argmax, ir.Attrs{"axis": 0, "keepdims": true}, a(f32(sh(3, 2), 1, 9, 4, 9, 2, 0)), i32(sh(1, 2), 1, 0), 0},

		// softmax([1,2,3]) = e^k / (e+e²+e³).
		{"softmax", ir.Softmax, nil, a(f32(sh(3), 1, 2, 3)), f32(sh(3), e/(e+e*e+e*e*e), e*e/(e+e*e+e*e*e), e*e*e/(e+e*e+e*e*e)), 1e-7},
		{"softmax masked", ir.Softmax, nil, a(f32(sh(3), 0, math.Inf(-1), 0)), f32(sh(3), 0.5, 0, 0.5), 0},
		{"softmax axis 0 large", ir.Softmax, ir.Attrs{"axis": 0}, a(f32(sh(2, 1), 1000, 1000)), f32(sh(2, 1), 0.5, 0.5), 0},
		// mean(3², 4²) = 12.5.
		{"rmsnorm", ir.RMSNorm, ir.Attrs{"eps": 0.0}, a(f32(sh(2, 2), 3, 4, 0, 2), f32(sh(2), 1, 2)), f32(sh(2, 2), 3/math.Sqrt(12.5), 8/math.Sqrt(12.5), 0, 2*math.Sqrt2), 1e-7},
		{"rmsnorm eps", ir.RMSNorm, ir.Attrs{"eps": 0.5}, a(f32(sh(2), 1, 1), f32(sh(2), 1, 1)), f32(sh(2), 1/math.Sqrt(1.5), 1/math.Sqrt(1.5)), 1e-7},
		// mean 2, biased variance 2/3.
		{"layernorm", ir.LayerNorm, ir.Attrs{"eps": 0.0}, a(f32(sh(3), 1, 2, 3), f32(sh(3), 1, 1, 2), f32(sh(3), 0, 1, 0)), f32(sh(3), -math.Sqrt(1.5), 1, 2*math.Sqrt(1.5)), 1e-7},

		{"matmul", ir.Matmul, nil, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6), f32(sh(3, 2), 1, 0, 0, 1, 1, 1)), f32(sh(2, 2), 4, 5, 10, 11), 0},
		{"matmul ta tb", ir.Matmul, ir.Attrs{"ta": true, "tb": true}, a(f32(sh(3, 2), 1, 4, 2, 5, 3, 6), f32(sh(2, 3), 1, 0, 1, 0, 1, 1)), f32(sh(2, 2), 4, 5, 10, 11), 0},
		{"matmul batch broadcast", ir.Matmul, nil, a(f32(sh(2, 1, 1, 2), 1, 0, 0, 1), f32(sh(3, 2, 1), 1, 2, 3, 4, 5, 6)), f32(sh(2, 3, 1, 1), 1, 3, 5, 2, 4, 6), 0},
		{"linear", ir.Linear, nil, a(f32(sh(2, 2), 1, 2, 3, 4), f32(sh(3, 2), 1, 0, 0, 1, 1, 1), f32(sh(3), 0, 10, 100)), f32(sh(2, 3), 1, 12, 103, 3, 14, 107), 0},
		{"linear rank 1 no bias", ir.Linear, nil, a(f32(sh(2), 1, 2), f32(sh(1, 2), 3, 4)), f32(sh(1), 11), 0},

		{"reshape", ir.Reshape, ir.Attrs{"shape": []int{3, -1}}, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6)), f32(sh(3, 2), 1, 2, 3, 4, 5, 6), 0},
		{"transpose 2d", ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6)), f32(sh(3, 2), 1, 4, 2, 5, 3, 6), 0},
		// x[i,j,k] = 100i+10j+k; out[k,i,j] = x[i,j,k].
		{"transpose 3d", ir.Transpose, ir.Attrs{"perm": []int{2, 0, 1}}, a(f32(sh(2, 2, 2), 0, 1, 10, 11, 100, 101, 110, 111)), f32(sh(2, 2, 2), 0, 10, 100, 110, 1, 11, 101, 111), 0},
		{"slice negative bounds and step", ir.Slice, ir.Attrs{"start": -8, "end": -1, "step": 3}, a(f32(sh(10), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)), f32(sh(3), 2, 5, 8), 0},
		{"slice axis -1 clamped", ir.Slice, ir.Attrs{"axis": -1, "start": 1, "end": 100}, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6)), f32(sh(2, 2), 2, 3, 5, 6), 0},
		{"reverse axis 1", ir.Reverse, ir.Attrs{"axis": 1}, a(f32(sh(2, 3), 1, 2, 3, 4, 5, 6)), f32(sh(2, 3), 3, 2, 1, 6, 5, 4), 0},
		{"reverse axis 0", ir.Reverse, nil, a(f32(sh(2, 2, 1), 1, 2, 3, 4)), f32(sh(2, 2, 1), 3, 4, 1, 2), 0},
		{"concat axis 1", ir.Concat, ir.Attrs{"axis": 1}, a(f32(sh(2, 1), 1, 2), f32(sh(2, 2), 3, 4, 5, 6)), f32(sh(2, 3), 1, 3, 4, 2, 5, 6), 0},
		{"expand", ir.Expand, ir.Attrs{"shape": []int{2, 2, 3}}, a(f32(sh(2, 1), 1, 2)), f32(sh(2, 2, 3), 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2), 0},
		{"embedding", ir.Embedding, nil, a(f32(sh(3, 2), 1, 2, 3, 4, 5, 6), i32(sh(2, 2), 2, 0, 1, 1)), f32(sh(2, 2, 2), 5, 6, 1, 2, 3, 4, 3, 4), 0},

		// d = 2: one pair, inverse frequency 1, angle = pos + s.
		{"rope d=2", ir.Rope, nil, a(f32(sh(2, 2), 1, 0, 0, 1), i32(sh(), 1)), f32(sh(2, 2), math.Cos(1), math.Sin(1), -math.Sin(2), math.Cos(2)), 1e-7},
		// d = 4, theta = 100: inverse frequencies 1 and 0.1; pos 2 gives angles 2 and 0.2.
		{"rope half", ir.Rope, ir.Attrs{"theta": 100.0}, a(f32(sh(1, 4), 1, 2, 3, 4), i32(sh(1), 2)),
			f32(sh(1, 4), 1*math.Cos(2)-3*math.Sin(2), 2*math.Cos(.2)-4*math.Sin(.2), 3*math.Cos(2)+1*math.Sin(2), 4*math.Cos(.2)+2*math.Sin(.2)), 1e-7},
		{"rope interleaved", ir.Rope, ir.Attrs{"theta": 100.0, "mode": "interleaved"}, a(f32(sh(1, 4), 1, 2, 3, 4), i32(sh(), 2)),
			f32(sh(1, 4), 1*math.Cos(2)-2*math.Sin(2), 2*math.Cos(2)+1*math.Sin(2), 3*math.Cos(.2)-4*math.Sin(.2), 4*math.Cos(.2)+3*math.Sin(.2)), 1e-7},
		// seq_axis 1 of [heads=1, seq=2, d=2]: the second row is at pos+1.
		{"rope seq_axis 1", ir.Rope, ir.Attrs{"seq_axis": 1}, a(f32(sh(1, 2, 2), 1, 0, 1, 0), i32(sh(), 0)), f32(sh(1, 2, 2), 1, 0, math.Cos(1), math.Sin(1)), 1e-7},

		{"cache_write", ir.CacheWrite, nil, a(f32(sh(4, 2), 1, 1, 1, 1, 1, 1, 1, 1), f32(sh(2, 2), 5, 6, 7, 8), i32(sh(), 1)), f32(sh(4, 2), 1, 1, 5, 6, 7, 8, 1, 1), 0},
		{"cache_write at the end", ir.CacheWrite, nil, a(f32(sh(2, 1), 0, 0), f32(sh(1, 1), 3), i32(sh(1), 1)), f32(sh(2, 1), 0, 3), 0},

		// One query, two keys with scale 1: scores 0 and ln 3, weights 1/4 and 3/4.
		{"attention two keys", ir.Attention, ir.Attrs{"scale": 1.0}, a(f32(sh(1, 1, 1), 1), f32(sh(2, 1, 1), 0, math.Log(3)), f32(sh(2, 1, 1), 4, 8)), f32(sh(1, 1, 1), 7), 1e-7},
		// Default scale 1/√d with d = 3: q·k = 3·ln(3)/√3·… chosen so that scaled scores are 0 and ln 3.
		{"attention default scale", ir.Attention, nil, a(f32(sh(1, 1, 3), 1, 1, 1), f32(sh(2, 1, 3), 0, 0, 0, s3*math.Log(3)/3, s3*math.Log(3)/3, s3*math.Log(3)/3), f32(sh(2, 1, 1), 4, 8)), f32(sh(1, 1, 1), 7), 1e-7},
		// Causal, two queries over two keys: query 0 sees key 0 only.
		{"attention causal", ir.Attention, ir.Attrs{"scale": 1.0, "causal": true}, a(f32(sh(2, 1, 1), 1, 1), f32(sh(2, 1, 1), 0, math.Log(3)), f32(sh(2, 1, 1), 4, 8)), f32(sh(2, 1, 1), 4, 7), 1e-7},
		// kv_len 2 of a cache of 3 keys (the third is garbage), window 1: the single query at
		// position 1 sees key 1 only.
		{"attention window kv_len", ir.Attention, ir.Attrs{"window": 1}, a(f32(sh(1, 1, 1), 1), f32(sh(3, 1, 1), 0, 1, 50), f32(sh(3, 1, 1), 4, 8, 99), i32(sh(), 2)), f32(sh(1, 1, 1), 8), 0},
		// Rows of several sequences: row 0 at position 1 (d = 2: angle 1), row 1 at position 0.
		{"rope_rows", ir.RopeRows, nil, a(f32(sh(2, 2), 1, 0, 0, 1), i32(sh(2), 1, 0)), f32(sh(2, 2), math.Cos(1), math.Sin(1), 0, 1), 1e-7},
		// Row 0 into slot 1 at position 0, row 1 into slot 0 at position 1.
		{"cache_scatter", ir.CacheScatter, nil, a(f32(sh(2, 2, 1), 0, 0, 0, 0), f32(sh(2, 1), 5, 6), i32(sh(2), 1, 0), i32(sh(2), 0, 1)), f32(sh(2, 2, 1), 0, 6, 5, 0), 0},
		// Slot 1 of two; the row at position 1 sees keys 0 and 1 (weights 1 and 3), not key 2
		// nor slot 0.
		{"attention_rows", ir.AttentionRows, ir.Attrs{"scale": 1.0}, a(f32(sh(1, 1, 1), 1), f32(sh(2, 3, 1, 1), 9, 9, 9, 0, math.Log(3), 50),
			f32(sh(2, 3, 1, 1), 1, 1, 1, 4, 8, 99), i32(sh(1), 1), i32(sh(1), 1)), f32(sh(1, 1, 1), 7), 1e-7},
		// Two query heads share one kv head; hsd layout.
		{"attention gqa hsd", ir.Attention, ir.Attrs{"scale": 1.0, "layout": "hsd"}, a(f32(sh(2, 1, 1), 1, 0), f32(sh(1, 2, 1), 0, math.Log(3)), f32(sh(1, 2, 1), 4, 8)), f32(sh(2, 1, 1), 7, 6), 1e-7},

		// x = [1,2,3,4], w = [1,-1], padding 1, bias 0.5: out[t] = x[t-1] - x[t] + 0.5.
		{"conv1d", ir.Conv1d, ir.Attrs{"padding": 1}, a(f32(sh(1, 4), 1, 2, 3, 4), f32(sh(1, 1, 2), 1, -1), f32(sh(1), 0.5)), f32(sh(1, 5), -0.5, -0.5, -0.5, -0.5, 4.5), 0},
		// stride 2, dilation 2, kernel 2: out[t] = x[2t] + 10·x[2t+2].
		{"conv1d stride dilation", ir.Conv1d, ir.Attrs{"stride": 2, "dilation": 2}, a(f32(sh(1, 1, 6), 1, 2, 3, 4, 5, 6), f32(sh(1, 1, 2), 1, 10)), f32(sh(1, 1, 2), 31, 53), 0},
		// groups 2: channel 0 → output 0, channel 1 → output 1.
		{"conv1d groups", ir.Conv1d, ir.Attrs{"groups": 2}, a(f32(sh(2, 2), 1, 2, 3, 4), f32(sh(2, 1, 1), 2, -1)), f32(sh(2, 2), 2, 4, -3, -4), 0},

		// x = [[1,2],[3,4]], w = [[1,2],[3,4]], padding 1 on top and left only: out[y,x] sums
		// the taps that land inside: out[0,0] = 4·1, out[0,1] = 3·1 + 4·2, …, out[1,1] = 30.
		{"conv2d pads", ir.Conv2d, ir.Attrs{"pads": []int{1, 1, 0, 0}}, a(f32(sh(1, 1, 2, 2), 1, 2, 3, 4), f32(sh(1, 1, 2, 2), 1, 2, 3, 4), f32(sh(1), 0.5)),
			f32(sh(1, 1, 2, 2), 4.5, 11.5, 14.5, 30.5), 0},
		// The same in nhwc with two channels that are two groups (depthwise): channel 1 is 10× channel 0.
		{"conv2d nhwc depthwise", ir.Conv2d, ir.Attrs{"pads": []int{1, 1, 0, 0}, "groups": 2, "layout": "nhwc"},
			a(f32(sh(1, 2, 2, 2), 1, 10, 2, 20, 3, 30, 4, 40), f32(sh(2, 1, 2, 2), 1, 2, 3, 4, 1, 2, 3, 4)),
			f32(sh(1, 2, 2, 2), 4, 40, 11, 110, 14, 140, 30, 300), 0},
		// stride 2, dilation 2 on a 5×5 ramp (x[y,x] = 5y + x) with a 2×2 kernel of ones:
		// out[0,0] = x[0,0]+x[0,2]+x[2,0]+x[2,2] = 24.
		{"conv2d stride dilation", ir.Conv2d, ir.Attrs{"strides": []int{2, 2}, "dilations": []int{2, 2}}, a(ramp(sh(1, 1, 5, 5)), f32(sh(1, 1, 2, 2), 1, 1, 1, 1)),
			f32(sh(1, 1, 2, 2), 24, 32, 64, 72), 0},
		{"max_pool2d", ir.MaxPool2d, ir.Attrs{"kernel": []int{2, 2}, "strides": []int{2, 2}, "ceil_mode": true}, a(ramp(sh(1, 1, 3, 3))),
			f32(sh(1, 1, 2, 2), 4, 5, 7, 8), 0},
		// 2×2 windows of a 2×2 input padded by one all round: the corners see one element; with
		// count_include_pad they divide by 4.
		{"avg_pool2d", ir.AvgPool2d, ir.Attrs{"kernel": []int{2, 2}, "strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}}, a(f32(sh(1, 1, 2, 2), 1, 2, 3, 4)),
			f32(sh(1, 1, 2, 2), 1, 2, 3, 4), 0},
		{"avg_pool2d count_include_pad", ir.AvgPool2d, ir.Attrs{"kernel": []int{2, 2}, "strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}, "count_include_pad": true},
			a(f32(sh(1, 1, 2, 2), 1, 2, 3, 4)), f32(sh(1, 1, 2, 2), 0.25, 0.5, 0.75, 1), 0},
		// ceil_mode past the trailing pad: the window at row 3 covers rows 3..4 of a 4-row input
		// padded by 0, so only row 3 counts, even with count_include_pad.
		{"avg_pool2d ceil count_include_pad", ir.AvgPool2d, ir.Attrs{"kernel": []int{2, 1}, "strides": []int{3, 1}, "ceil_mode": true, "count_include_pad": true},
			a(f32(sh(1, 1, 4, 1), 1, 2, 3, 4)), f32(sh(1, 1, 2, 1), 1.5, 4), 0},
		{"global_avg_pool", ir.GlobalAvgPool, nil, a(f32(sh(1, 2, 1, 3), 1, 2, 3, 4, 5, 9)), f32(sh(1, 2, 1, 1), 2, 6), 0},
		{"global_avg_pool nhwc", ir.GlobalAvgPool, ir.Attrs{"layout": "nhwc"}, a(f32(sh(1, 1, 3, 2), 1, 4, 2, 5, 3, 9)), f32(sh(1, 1, 1, 2), 2, 6), 0},
		// (x − 1)/√(3 + 1)·2 + 5 for channel 0, (x − 0)/√(0 + 1)·1 + 0 for channel 1.
		{"batch_norm", ir.BatchNorm, ir.Attrs{"eps": 1.0}, a(f32(sh(1, 2, 1, 2), 3, 5, 7, 8), f32(sh(2), 2, 1), f32(sh(2), 5, 0), f32(sh(2), 1, 0), f32(sh(2), 3, 0)),
			f32(sh(1, 2, 1, 2), 7, 9, 7, 8), 0},
		{"batch_norm nhwc", ir.BatchNorm, ir.Attrs{"eps": 1.0, "layout": "nhwc"}, a(f32(sh(1, 2, 2), 3, 7, 5, 8), f32(sh(2), 2, 1), f32(sh(2), 5, 0), f32(sh(2), 1, 0), f32(sh(2), 3, 0)),
			f32(sh(1, 2, 2), 7, 7, 9, 8), 0},

		// Mixture of experts. Logits ln(1, 3, 2, 6): the two largest are experts 3 and 1 (out0,
		// the ids; TestMoeRouteWeights checks the weights).
		{"moe_route ids", ir.MoeRoute, ir.Attrs{"k": 2}, a(f32(sh(1, 4), 0, math.Log(3), math.Log(2), math.Log(6))), i32(sh(1, 2), 3, 1), 0},
		// Expert e is [[e+1, 0], [0, 1]]: row [1, 2] through experts 2 and 0 gives [3, 2] and [1, 2].
		{"moe_linear", ir.MoeLinear, nil, a(f32(sh(1, 2), 1, 2), f32(sh(3, 2, 2), 1, 0, 0, 1, 2, 0, 0, 1, 3, 0, 0, 1), i32(sh(1, 2), 2, 0)),
			f32(sh(1, 2, 2), 3, 2, 1, 2), 0},
		// Each slot its own row: slot 0 reads [1, 2] through expert 1, slot 1 reads [5, 7] through expert 1.
		{"moe_linear per slot", ir.MoeLinear, nil, a(f32(sh(1, 2, 2), 1, 2, 5, 7), f32(sh(2, 2, 2), 1, 0, 0, 1, 2, 0, 0, 1), i32(sh(1, 2), 1, 1)),
			f32(sh(1, 2, 2), 2, 2, 10, 7), 0},
		{"moe_sum", ir.MoeSum, nil, a(f32(sh(1, 2, 2), 3, 2, 1, 2), f32(sh(1, 2), 0.5, 0.25)), f32(sh(1, 2), 1.75, 1.5), 0},
	}
	return c
}

// TestMoeRouteWeights checks moe_route's second output by hand: logits ln(1, 3, 2, 6) choose
// experts 3 and 1, whose weights are 6/9 and 3/9 renormalised, or 6/12 and 3/12 of the
// softmax over all four (norm=none).
func TestMoeRouteWeights(t *testing.T) {
	x := f32(sh(2, 4), 0, math.Log(3), math.Log(2), math.Log(6), 1, 1, 1, 1)
	for _, c := range []struct {
		norm string
		want *ir.Tensor
	}{
		{"renorm", f32(sh(2, 2), 2.0/3, 1.0/3, 0.5, 0.5)},
		{"none", f32(sh(2, 2), 0.5, 0.25, 0.25, 0.25)},
	} {
		b := ir.NewBuilder("t")
		in, err := b.Input("x", x.Type)
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.Op(ir.MoeRoute, ir.Attrs{"k": 2, "norm": c.norm}, in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EvalValues(b.Function(), Env{Inputs: map[string]*ir.Tensor{"x": x}}, r, ir.Value{Node: r.Node, Out: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Equal logits (the second row) choose in index order: experts 0 and 1.
		if msg := closeTo(got[0], i32(sh(2, 2), 3, 1, 0, 1), 0); msg != "" {
			t.Errorf("norm=%s ids: %s", c.norm, msg)
		}
		if msg := closeTo(got[1], c.want, 1e-7); msg != "" {
			t.Errorf("norm=%s weights: %s", c.norm, msg)
		}
	}
}

func a(x ...*ir.Tensor) []*ir.Tensor { return x }

func TestHandCases(t *testing.T) {
	for _, c := range handCases() {
		t.Run(c.name, func(t *testing.T) {
			got := mustEval(t, c.op, c.attrs, c.args...)
			if msg := closeTo(got, c.want, c.tol); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestEveryOpHasHandCase(t *testing.T) {
	have := map[ir.Op]bool{}
	for _, c := range handCases() {
		have[c.op] = true
	}
	for _, op := range ir.Ops() {
		if op.Info().Kind != ir.KindSource && !op.Info().Fused && !have[op] { // fused ops: fused_test.go
			t.Errorf("op %s has no hand-worked case in handCases", op)
		}
	}
}

func TestRunTimeErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		op    ir.Op
		attrs ir.Attrs
		args  []*ir.Tensor
		want  string
	}{
		{"cache_write past the end", ir.CacheWrite, nil, a(f32(sh(4, 1), 0, 0, 0, 0), f32(sh(2, 1), 1, 2), i32(sh(), 3)), "pos 3: rows 3..4 do not fit a cache of 4 rows"},
		{"cache_write negative", ir.CacheWrite, nil, a(f32(sh(4, 1), 0, 0, 0, 0), f32(sh(2, 1), 1, 2), i32(sh(), -1)), "pos -1"},
		{"kv_len past the keys", ir.Attention, nil, a(f32(sh(1, 1, 1), 1), f32(sh(2, 1, 1), 0, 1), f32(sh(2, 1, 1), 4, 8), i32(sh(), 3)), "kv_len 3 is outside 1..2"},
		{"kv_len zero", ir.Attention, nil, a(f32(sh(1, 1, 1), 1), f32(sh(2, 1, 1), 0, 1), f32(sh(2, 1, 1), 4, 8), i32(sh(), 0)), "kv_len 0 is outside 1..2"},
		{"kv_len below queries causal", ir.Attention, ir.Attrs{"causal": true}, a(f32(sh(2, 1, 1), 1, 1), f32(sh(2, 1, 1), 0, 1), f32(sh(2, 1, 1), 4, 8), i32(sh(), 1)), "kv_len 1 is less than the 2 queries"},
		{"embedding id too large", ir.Embedding, nil, a(f32(sh(3, 1), 1, 2, 3), i32(sh(2), 0, 3)), "id 3 at index 1 is outside the table of 3 rows"},
		{"moe_linear expert id", ir.MoeLinear, nil, a(f32(sh(1, 2), 1, 2), f32(sh(2, 2, 2), 1, 0, 0, 1, 2, 0, 0, 1), i32(sh(1, 2), 0, 2)), "expert id 2 at row 0, slot 1 is outside 0..1"},
		{"take_along_axis index", ir.TakeAlongAxis, nil, a(f32(sh(1, 3), 1, 2, 3), i32(sh(1, 2), 0, 3)), "index 3 at 1 is outside the axis of 3"},
		{"embedding id negative", ir.Embedding, nil, a(f32(sh(3, 1), 1, 2, 3), i32(sh(1), -1)), "id -1 at index 0"},
		{"rope negative pos", ir.Rope, nil, a(f32(sh(1, 2), 1, 2), i32(sh(), -1)), "pos -1 is negative"},
		{"integer division by zero", ir.Div, nil, a(i32(sh(2), 1, 2), i32(sh(2), 1, 0)), "element 1: integer division by zero"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := evalOp(c.op, c.attrs, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "function t") || !strings.Contains(err.Error(), c.op.String()) {
				t.Errorf("error %q does not name the function and the node", err)
			}
		})
	}
}

// TestRopeScaling rotates unit pairs (1, 0) at a position p, so the result is (cos p·ω_i,
// sin p·ω_i) for each frequency ω_i, and checks ω against the scaled frequencies worked from
// transformers' formulas here (linear: ω/factor; llama3 on Llama 3.1's parameters, where the
// 64 frequencies of a 128-wide head are kept, blended and divided by 8).
func TestRopeScaling(t *testing.T) {
	const d, p, theta = 128, 37, 500000.0
	llama3 := func(w float64) float64 {
		const factor, low, high, old = 8.0, 1.0, 4.0, 8192.0
		lambda := 2 * math.Pi / w
		if lambda < old/high {
			return w
		}
		if lambda > old/low {
			return w / factor
		}
		s := (old/lambda - low) / (high - low)
		return (1-s)*w/factor + s*w
	}
	for _, c := range []struct {
		name  string
		attrs ir.Attrs
		freq  func(float64) float64
	}{
		{"linear", ir.Attrs{"scaling": "linear", "factor": 4.0}, func(w float64) float64 { return w / 4 }},
		{"llama3", ir.Attrs{"scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_ctx": 8192}, llama3},
	} {
		x := make([]float64, d)
		for i := 0; i < d/2; i++ {
			x[i] = 1
		}
		at := c.attrs.Clone()
		at["theta"] = theta
		got := mustEval(t, ir.Rope, at, f32(sh(1, d), x...), i32(sh(), p)).Float64s()
		kinds := map[string]int{}
		for i := 0; i < d/2; i++ {
			w := math.Pow(theta, -2*float64(i)/d)
			ws := c.freq(w)
			switch {
			case ws == w:
				kinds["kept"]++
			case ws == w/8 || ws == w/4:
				kinds["divided"]++
			default:
				kinds["blended"]++
			}
			if math.Abs(got[i]-math.Cos(p*ws)) > 1e-6 || math.Abs(got[i+d/2]-math.Sin(p*ws)) > 1e-6 {
				t.Errorf("%s: frequency %d: (%g, %g), want angle %g: (%g, %g)", c.name, i, got[i], got[i+d/2], p*ws, math.Cos(p*ws), math.Sin(p*ws))
			}
		}
		if c.name == "llama3" && (kinds["kept"] == 0 || kinds["divided"] == 0 || kinds["blended"] == 0) {
			t.Errorf("llama3 case covers %v: want every region", kinds)
		}
	}
}
