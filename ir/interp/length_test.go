package interp

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// boundedTinyllama is examples/tinyllama with its prefill made run-time bounded (seq 1..64).
func boundedTinyllama(t *testing.T) *ir.Model {
	t.Helper()
	const dir = "../../examples/tinyllama"
	src, err := os.ReadFile(dir + "/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	if !strings.Contains(s, "dims: {seq: 1..64}") {
		s = strings.Replace(s, "dims: {seq: 16}", "dims: {seq: 1..64}", 1)
	}
	m, err := ir.ParseModelBytes(dir+"/model.yaml", []byte(s), dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Function("prefill").Length == nil {
		t.Fatal("prefill has no run-time length")
	}
	return m
}

// TestLengthTinyllamaOracle runs the run-time-bounded prefill at several lengths against the
// Hugging Face oracle: a causal model's logits for the first n prompt tokens are the first n
// rows of the 16-token golden prefill, and a prompt prefilled in two chunks (n, then 16 - n at
// position n) gives all 16 rows and the same decode steps after it.
func TestLengthTinyllamaOracle(t *testing.T) {
	golden, err := safetensors.ReadAll("../../testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := boundedTinyllama(t)
	ids := golden["input_ids"].Float64s()
	want := golden["prefill_logits"].Float64s()
	for _, n := range []int{1, 5, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := NewSession(m)
			out, err := s.Run("prefill", map[string]*ir.Tensor{"tokens": i32(sh(n), ids[:n]...), "pos": i32(sh(), 0)})
			if err != nil {
				t.Fatal(err)
			}
			if got := out["logits"].Type; !got.Equal(ir.T(ir.F32, n, tlVocab)) {
				t.Fatalf("logits %s, want [%d, %d]: a run at length n returns n rows", got, n, tlVocab)
			}
			checkRows(t, "first chunk", out["logits"].Float64s(), want[:n*tlVocab], tlVocab)
			if n < 16 {
				out, err = s.Run("prefill", map[string]*ir.Tensor{"tokens": i32(sh(16-n), ids[n:16]...), "pos": i32(sh(), float64(n))})
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, "second chunk", out["logits"].Float64s(), want[n*tlVocab:], tlVocab)
			}
			dt, dl := golden["decode_tokens"].Float64s(), golden["decode_logits"].Float64s()
			for i, tok := range dt[:3] {
				out, err := s.Run("decode", map[string]*ir.Tensor{"tokens": i32(sh(1), tok), "pos": i32(sh(), float64(16+i))})
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, fmt.Sprintf("decode %d", i), out["logits"].Float64s(), dl[i*tlVocab:(i+1)*tlVocab], tlVocab)
			}
		})
	}
	// Out of range: more tokens than the capacity.
	if _, err := NewSession(m).Run("prefill", map[string]*ir.Tensor{"tokens": i32(sh(65), make([]float64, 65)...), "pos": i32(sh(), 0)}); err == nil ||
		!strings.Contains(err.Error(), "outside 1..64") {
		t.Errorf("65 tokens: err %v, want outside 1..64", err)
	}
}

// TestLengthCapacityGraph: Eval of the capacity graph as it stands (the length node at its
// default, the capacity) agrees with the function written at the capacity.
func TestLengthCapacityGraph(t *testing.T) {
	m := boundedTinyllama(t)
	f := m.Function("prefill")
	g, err := f.At(f.Length.Max)
	if err != nil {
		t.Fatal(err)
	}
	tok := make([]float64, 64)
	for i := range tok {
		tok[i] = float64((i * 37) % tlVocab)
	}
	env := Env{Inputs: map[string]*ir.Tensor{"tokens": i32(sh(64), tok...), "pos": i32(sh(), 3)}, Params: m.Weights,
		State: map[string]*ir.Tensor{}}
	for _, d := range m.State {
		env.State[d.Name] = ir.NewTensor(d.Type)
	}
	a, err := EvalValues(f, env, f.Outputs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EvalValues(g, env, g.Outputs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, "capacity", a[0].Float64s(), b[0].Float64s(), tlVocab)
}
