// Package examples holds runnable model.yaml files; its tests parse every example, evaluate it in
// the reference interpreter and compare the two oracle models with Hugging Face's outputs.
package examples

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// oracleTol is the tolerance of testdata/hf/README.md: max abs error ≤ 1e-4 relative to the
// largest magnitude of the row.
const oracleTol = 1e-4

// rowError is the largest |got-want| of each row divided by the row's largest |want|.
func rowError(t *testing.T, got, want *ir.Tensor) float64 {
	t.Helper()
	if got.NumElements() != want.NumElements() {
		t.Fatalf("got %s, want %s", got.Type, want.Type)
	}
	cols := want.Type.Shape[want.Type.Shape.Rank()-1]
	g, w := got.Float64s(), want.Float64s()
	worst := 0.0
	for r := 0; r < len(w)/cols; r++ {
		scale, diff := 0.0, 0.0
		for c := 0; c < cols; c++ {
			scale = math.Max(scale, math.Abs(w[r*cols+c]))
			diff = math.Max(diff, math.Abs(g[r*cols+c]-w[r*cols+c]))
		}
		worst = math.Max(worst, diff/math.Max(scale, 1e-30))
	}
	return worst
}

func argmaxRow(x *ir.Tensor, row int) int {
	cols := x.Type.Shape[x.Type.Shape.Rank()-1]
	best := 0
	for c := 1; c < cols; c++ {
		if x.Float64(row*cols+c) > x.Float64(row*cols+best) {
			best = c
		}
	}
	return best
}

func i32(vals ...int) *ir.Tensor {
	f := make([]float64, len(vals))
	for i, v := range vals {
		f[i] = float64(v)
	}
	return ir.TensorFromFloat64s(ir.T(ir.I32, len(vals)), f)
}

func scalarI32(v int) *ir.Tensor { return ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(v)}) }

// row returns row r of a 2-D tensor as a [1, cols] tensor.
func row(x *ir.Tensor, r int) *ir.Tensor {
	cols := x.Type.Shape[1]
	n := x.Type.DType.Size() * cols
	return &ir.Tensor{Type: ir.T(x.Type.DType, 1, cols), Data: x.Data[r*n : (r+1)*n]}
}

// TestTinyLlamaOracle runs the prompt through prefill and the 8 fed tokens through decode, one
// session carrying the KV caches, and compares every logit row and the greedy tokens with HF.
func TestTinyLlamaOracle(t *testing.T) {
	m, err := ir.ParseModel("tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gold, err := safetensors.ReadAll("../testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	s := interp.NewSession(m)
	ids := gold["input_ids"]
	out, err := s.Run("prefill", map[string]*ir.Tensor{"tokens": ids, "pos": scalarI32(0)})
	if err != nil {
		t.Fatal(err)
	}
	e := rowError(t, out["logits"], gold["prefill_logits"])
	t.Logf("prefill logits: max row-relative error %.3g", e)
	if e > oracleTol {
		t.Errorf("prefill logits: row-relative error %.3g > %g", e, oracleTol)
	}
	var greedy []int
	greedy = append(greedy, argmaxRow(out["logits"], 15))
	fed := gold["decode_tokens"]
	worst := 0.0
	for step := 0; step < 8; step++ {
		tok := int(fed.Float64(step))
		out, err := s.Run("decode", map[string]*ir.Tensor{"tokens": i32(tok), "pos": scalarI32(16 + step)})
		if err != nil {
			t.Fatalf("decode step %d: %v", step, err)
		}
		e := rowError(t, out["logits"], row(gold["decode_logits"], step))
		worst = math.Max(worst, e)
		if e > oracleTol {
			t.Errorf("decode step %d (token %d at position %d): row-relative error %.3g > %g", step, tok, 16+step, e, oracleTol)
		}
		greedy = append(greedy, argmaxRow(out["logits"], 0))
	}
	t.Logf("decode logits (8 steps): max row-relative error %.3g", worst)
	want := gold["greedy_tokens"]
	for i, g := range greedy {
		if int(want.Float64(i)) != g {
			t.Errorf("greedy token %d: got %d, want %d (all: %v)", i, g, int(want.Float64(i)), greedy)
			break
		}
	}
}

// TestWhisperEncoderOracle compares the encoder's last hidden state with HF.
func TestWhisperEncoderOracle(t *testing.T) {
	m, err := ir.ParseModel("whisper-tiny-encoder/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gold, err := safetensors.ReadAll("../testdata/hf/whisper-tiny-encoder/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := interp.Run(m, "encode", map[string]*ir.Tensor{"features": gold["input_features"]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := rowError(t, out["hidden"], gold["last_hidden_state"])
	t.Logf("last_hidden_state: max row-relative error %.3g", e)
	if e > oracleTol {
		t.Errorf("last_hidden_state: row-relative error %.3g > %g", e, oracleTol)
	}
}

// randomInputs makes deterministic small inputs for a function: integers (token ids, positions)
// in a small range that is valid for every example, floats in [-1, 1].
func randomInputs(f *ir.Function, seed uint64) map[string]*ir.Tensor {
	in := map[string]*ir.Tensor{}
	for k, n := range f.Inputs {
		t := n.Type()
		x := ir.NewTensor(t)
		s := seed + uint64(k)*7919
		for i := 0; i < x.NumElements(); i++ {
			s = s*6364136223846793005 + 1442695040888963407
			u := float64(s>>40) / (1 << 24)
			if t.DType.IsInt() {
				if t.Shape.Rank() == 0 {
					x.SetFloat64(i, 0) // a position: start of the cache
				} else {
					x.SetFloat64(i, math.Floor(u*200))
				}
			} else {
				x.SetFloat64(i, 2*u-1)
			}
		}
		in[n.Name] = x
	}
	return in
}

// TestExamplesParseAndEvaluate parses every example and evaluates each of its functions on
// random inputs, except smollm2-135m, which is parsed without weights (30 layers of f16 at
// width 576 would make the suite slow; its functions are checked for their signatures).
func TestExamplesParseAndEvaluate(t *testing.T) {
	dirs, err := filepath.Glob("*/model.yaml")
	if err != nil || len(dirs) < 6 {
		t.Fatalf("found %d examples (%v), want at least 6", len(dirs), err)
	}
	for _, path := range dirs {
		name := filepath.Dir(path)
		t.Run(name, func(t *testing.T) {
			if name == "smollm2-135m" {
				m, err := ir.ParseModelWith(path, ir.ParseOptions{SkipWeights: true})
				if err != nil {
					t.Fatal(err)
				}
				var n int
				for _, d := range m.Params {
					n += d.Type.Shape.NumElements()
				}
				if n < 134e6 || n > 135e6 {
					t.Errorf("smollm2-135m has %d parameters, want about 134.5 M", n)
				}
				if l := m.Function("prefill").Length; l == nil || l.Min != 1 || l.Max != 512 {
					t.Errorf("smollm2-135m's prefill length %+v, want 1..512", l)
				}
				// prefill returns the last row's logits (what generation reads), score every row's.
				for fn, seq := range map[string]int{"prefill": 1, "decode": 1, "score": 512} {
					f := m.Function(fn)
					if f == nil {
						t.Fatalf("no function %s", fn)
					}
					if got := f.Outputs[0].Value.Type(); !got.Equal(ir.T(ir.F16, seq, 49152)) {
						t.Errorf("%s logits are %s", fn, got)
					}
				}
				return
			}
			m, err := ir.ParseModel(path)
			if err != nil {
				t.Fatal(err)
			}
			s := interp.NewSession(m)
			for _, f := range m.Functions {
				out, err := s.Run(f.Name, randomInputs(f, 1))
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				for _, o := range f.Outputs {
					x := out[o.Name]
					if x == nil || !x.Type.Equal(o.Value.Type()) {
						t.Fatalf("%s: output %s is %v, want %s", f.Name, o.Name, x, o.Value.Type())
					}
					for i, v := range x.Float64s() {
						if math.IsNaN(v) || math.IsInf(v, 0) {
							t.Fatalf("%s: output %s element %d is %v", f.Name, o.Name, i, v)
						}
					}
				}
			}
		})
	}
}

// TestRandomWeightsDeterministic checks that random init gives the same bytes on every parse
// (the bytes are fixed by a checksum so a change of generator is noticed).
func TestRandomWeightsDeterministic(t *testing.T) {
	a, err := ir.ParseModel("llama-tied/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ir.ParseModel("llama-tied/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range a.Weights {
		if string(x.Data) != string(b.Weights[name].Data) {
			t.Fatalf("weight %s differs between two parses", name)
		}
	}
	x := ir.InitTensor(ir.T(ir.F32, 4), "random", 1, "w", 0.5)
	got := fmt.Sprint(x.Float64s())
	// Fixed when the generator was written; a change here changes every random model's weights.
	const want = "[-0.2663443684577942 -0.008718311786651611 -0.017002463340759277 0.3366221785545349]"
	if got != want {
		t.Errorf("InitTensor(f32[4], seed 1, \"w\", 0.5) = %s, want %s", got, want)
	}
}
