package oracles

import (
	"math"
	"path/filepath"
	"sort"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// LlamaCppFile is one row of ../shared/oracles/llamacpp/README.md's "Measured error" table for
// a shipped file: its "tolerance (2)" against llama.cpp's own logits, and how many leading
// greedy tokens of llama.cpp equal the reference's ("greedy = ref greedy").
type LlamaCppFile struct {
	Tol2        float64
	GreedyAgree int
	// FlipRows are the prefill positions where llama.cpp's router chose another expert than
	// the exact top-k (README-new-archs.md's "routing flips"): its logits there are not
	// compared (the README's tolerance (2) excludes them).
	FlipRows []int
	// NoInt8 leaves the file out of the 8-bit-activation plan test (e2e_gguf_test.go): of the
	// new architectures' files one per architecture runs it, its Q4_K_M (lavapipe compiles every
	// plan's kernels afresh; the 8-bit kernels are the linear ones every file shares).
	NoInt8 bool
}

// LlamaCppFiles are the shipped GGUF files of the llamacpp oracle (MODEL/MODEL-TYPE, without
// .gguf), with their README rows.
var LlamaCppFiles = map[string]LlamaCppFile{
	"llama-tiny/llama-tiny-F16":    {0.0034, 6, nil, false},
	"llama-tiny/llama-tiny-Q8_0":   {0.075, 6, nil, false},
	"llama-tiny/llama-tiny-Q4_0":   {0.077, 6, nil, false},
	"llama-tiny/llama-tiny-Q4_1":   {0.07, 1, nil, false},
	"llama-tiny/llama-tiny-Q5_0":   {0.07, 6, nil, false},
	"llama-tiny/llama-tiny-Q5_1":   {0.083, 6, nil, false},
	"llama-tiny/llama-tiny-Q4_K_M": {0.086, 0, nil, false},
	"llama-tiny/llama-tiny-Q5_K_M": {0.099, 6, nil, false},
	"llama-tiny/llama-tiny-Q6_K":   {0.084, 6, nil, false},
	"qwen3-tiny/qwen3-tiny-Q8_0":   {0.064, 6, nil, false},
	"qwen3-tiny/qwen3-tiny-Q4_0":   {0.067, 6, nil, false},
	"qwen3-tiny/qwen3-tiny-Q4_K_M": {0.11, 6, nil, false},
	// README-new-archs.md: Gemma 3, Qwen3-MoE and Phi-3.
	"gemma3-tiny/gemma3-tiny-Q8_0":       {0.02, 6, nil, true},
	"gemma3-tiny/gemma3-tiny-Q4_K_M":     {0.03, 6, nil, false},
	"qwen3moe-tiny/qwen3moe-tiny-Q8_0":   {0.068, 6, nil, true},
	"qwen3moe-tiny/qwen3moe-tiny-Q4_K_M": {0.063, 4, []int{5, 11}, false},
	"phi3-tiny/phi3-tiny-F16":            {0.0029, 6, nil, true},
	"phi3-tiny/phi3-tiny-Q4_K_M":         {0.09, 4, nil, false},
}

// LlamaCppRefTol is the README's tolerance (1): an implementation that dequantizes exactly
// and computes in f32 is within it of ref_prefill_logits and ref_decode_logits, row-relative.
const LlamaCppRefTol = 1e-4

// LlamaCppNames lists LlamaCppFiles' names, sorted.
func LlamaCppNames() []string {
	var n []string
	for k := range LlamaCppFiles {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// LlamaCpp returns the GGUF path of a file of the oracle and its golden tensors, or skips.
func LlamaCpp(t testing.TB, name string) (string, map[string]*ir.Tensor) {
	t.Helper()
	dir := Dir(t, "llamacpp")
	gold, err := ir.ReadSafetensors(filepath.Join(dir, name+".golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name+".gguf"), gold
}

// RowRel is the README's row-relative error: the largest over rows (of cols) of
// max|got − ref| / max|ref|; NaN where ref has none is +Inf.
func RowRel(got, ref []float64, cols int) float64 {
	worst := 0.0
	for r := 0; r < len(ref)/cols; r++ {
		scale, diff := 0.0, 0.0
		for c := r * cols; c < (r+1)*cols; c++ {
			scale = math.Max(scale, math.Abs(ref[c]))
			d := math.Abs(got[c] - ref[c])
			if math.IsNaN(d) {
				return math.Inf(1)
			}
			diff = math.Max(diff, d)
		}
		worst = math.Max(worst, diff/scale)
	}
	return worst
}

// Argmax is the index of the largest value (the first of equals).
func Argmax(row []float64) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// Runner runs a causal LM's prefill and decode functions (tokens and pos in, logits out) over a
// KV cache it carries from call to call.
type Runner interface {
	Reset() error
	Run(fn string, tokens []int, pos int) ([]float64, error)
}

// Interp is the Runner of the reference interpreter: a session of the model, its state kept
// between calls, inputs tokens (i32[n]) and pos (i32), output logits.
func Interp(m *ir.Model) Runner { return &interpRunner{interp.NewSession(m)} }

type interpRunner struct{ s *interp.Session }

func (r *interpRunner) Reset() error { r.s.Reset(); return nil }
func (r *interpRunner) Run(fn string, tokens []int, pos int) ([]float64, error) {
	f := make([]float64, len(tokens))
	for i, x := range tokens {
		f[i] = float64(x)
	}
	out, err := r.s.Run(fn, map[string]*ir.Tensor{
		"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, len(tokens)), f),
		"pos":    ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(pos)}),
	})
	if err != nil {
		return nil, err
	}
	return out["logits"].Float64s(), nil
}

// LlamaCppRun is what a model computed for one oracle file: the prefill logits, the decode
// logits with llama.cpp's greedy tokens fed (teacher forcing, as the reference was run), and
// its own greedy continuation (its argmax fed back).
type LlamaCppRun struct {
	Prefill, Decode []float64
	Greedy          []int
}

func ints(t *ir.Tensor) []int {
	out := make([]int, t.NumElements())
	for i := range out {
		out[i] = int(t.Float64(i))
	}
	return out
}

// RunLlamaCpp feeds a file's prompt and decode tokens through r.
func RunLlamaCpp(t testing.TB, r Runner, gold map[string]*ir.Tensor) LlamaCppRun {
	t.Helper()
	prompt, fed := ints(gold["input_ids"]), ints(gold["greedy_tokens"])
	vocab := gold["prefill_logits"].Type.Shape[1]
	var res LlamaCppRun
	var err error
	if err = r.Reset(); err != nil {
		t.Fatal(err)
	}
	// Every row's logits: an imported model's score function (its prefill computes the last
	// row's only, for generation).
	if res.Prefill, err = r.Run("score", prompt, 0); err != nil {
		t.Fatal(err)
	}
	own := Argmax(res.Prefill[(len(prompt)-1)*vocab:])
	for i, tok := range fed {
		row, err := r.Run("decode", []int{tok}, len(prompt)+i)
		if err != nil {
			t.Fatal(err)
		}
		res.Decode = append(res.Decode, row...)
	}
	// The model's own greedy continuation follows the teacher-forced rows for as long as its
	// argmax is the token fed; where it differs, it is run again from the prompt, feeding its
	// own argmax.
	res.Greedy = append(res.Greedy, own)
	diverged := -1
	for i := 0; i+1 < len(fed); i++ {
		if res.Greedy[i] != fed[i] {
			diverged = i
			break
		}
		res.Greedy = append(res.Greedy, Argmax(res.Decode[i*vocab:(i+1)*vocab]))
	}
	if diverged < 0 {
		return res // len(fed) tokens, each the argmax after the ones before
	}
	res.Greedy = res.Greedy[:0]
	if err := r.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run("prefill", prompt, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(fed); i++ {
		res.Greedy = append(res.Greedy, own)
		row, err := r.Run("decode", []int{own}, len(prompt)+i)
		if err != nil {
			t.Fatal(err)
		}
		own = Argmax(row)
	}
	return res
}

// CheckLlamaCpp compares a run with a file's golden: the float64 reference to tol (row-relative),
// llama.cpp's logits to the file's tolerance (2), the greedy tokens to the reference's, and the
// leading ones the README says llama.cpp agrees on to llama.cpp's.
func CheckLlamaCpp(t testing.TB, name string, run LlamaCppRun, gold map[string]*ir.Tensor, tol float64) {
	t.Helper()
	o, ok := LlamaCppFiles[name]
	if !ok {
		t.Fatalf("no README row for %s", name)
	}
	CheckLlamaCppFile(t, o, run, gold, tol)
}

// CheckLlamaCppFile is CheckLlamaCpp for a file whose tolerance (2) and greedy agreement o gives.
func CheckLlamaCppFile(t testing.TB, o LlamaCppFile, run LlamaCppRun, gold map[string]*ir.Tensor, tol float64) {
	t.Helper()
	vocab := gold["prefill_logits"].Type.Shape[1]
	for _, c := range []struct {
		what      string
		got       []float64
		ref, llcp string
	}{{"prefill", run.Prefill, "ref_prefill_logits", "prefill_logits"}, {"decode", run.Decode, "ref_decode_logits", "decode_logits"}} {
		e := RowRel(c.got, gold[c.ref].Float64s(), vocab)
		got, llcp := c.got, gold[c.llcp].Float64s()
		if c.what == "prefill" {
			got, llcp = DropRows(got, o.FlipRows, vocab), DropRows(llcp, o.FlipRows, vocab)
		}
		el := RowRel(got, llcp, vocab)
		t.Logf("%s: row-relative error %.2g against the reference, %.2g against llama.cpp", c.what, e, el)
		if e > tol {
			t.Errorf("%s: row-relative error %.3g against %s > %g", c.what, e, c.ref, tol)
		}
		if el > o.Tol2 {
			t.Errorf("%s: row-relative error %.3g against llama.cpp's %s > the README's tolerance (2) %g", c.what, el, c.llcp, o.Tol2)
		}
	}
	if want := ints(gold["ref_greedy_tokens"]); !equal(run.Greedy, want) {
		t.Errorf("greedy tokens %v, the reference's %v", run.Greedy, want)
	}
	if llcp := ints(gold["greedy_tokens"]); !equal(run.Greedy[:o.GreedyAgree], llcp[:o.GreedyAgree]) {
		t.Errorf("greedy tokens %v: the first %d should be llama.cpp's %v", run.Greedy, o.GreedyAgree, llcp)
	}
}

// DropRows returns x (rows of cols) without the given rows.
func DropRows(x []float64, rows []int, cols int) []float64 {
	if len(rows) == 0 {
		return x
	}
	var out []float64
	for r := 0; r < len(x)/cols; r++ {
		skip := false
		for _, d := range rows {
			skip = skip || d == r
		}
		if !skip {
			out = append(out, x[r*cols:(r+1)*cols]...)
		}
	}
	return out
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
