package vkc

import (
	"bytes"
	"context"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/runtime"
)

// toyModel is small enough to tune on lavapipe within a test: one fused elementwise kernel and a
// row reduction.
const toyModel = `
model: toy
dims: {rows: 4, cols: 24}
weights: {init: random, seed: 3}
params:
  b: [cols]
functions:
  f:
    inputs:
      x: f32[rows, cols]
    outputs:
      y: f32[rows, cols]
      s: f32[rows]
    body:
      - y = relu(add(x, b))
      - s = sum(y, axis=-1)
`

// TestCompileTuned runs the measured path end to end on the device under a small budget: the plan
// is valid and matches the interpreter, it records the selection and the tuner's choices, and a
// second compile reuses the tuning database.
func TestCompileTuned(t *testing.T) {
	d := device(t)
	m, err := ir.ParseModelBytes("toy.yaml", []byte(toyModel), ".")
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "tune.json")
	opts := Options{Tune: true, Budget: 90 * time.Second, TuneDB: db, Candidates: 2}
	t0 := time.Now()
	p, rep, err := Compile(context.Background(), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(t0)
	if !rep.Tuned || len(rep.Selections) != 1 {
		t.Errorf("report: tuned %v, %d selections", rep.Tuned, len(rep.Selections))
	}
	measured, program := 0, 0
	for _, c := range p.Record.Candidates {
		if c.Measured > 0 {
			measured++
		}
		if strings.HasSuffix(c.Subject, " program") {
			program++
		}
	}
	// The toy's extraction, static extraction and graph as written are one graph, measured once.
	if measured == 0 || program != 1 {
		t.Errorf("plan records %d measured candidates and %d program candidates", measured, program)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("tuning database not written: %v", err)
	}

	exe := roundTrip(t, d, p)
	x := ir.NewTensor(ir.T(ir.F32, 4, 24))
	for i := 0; i < x.NumElements(); i++ {
		x.SetFloat64(i, float64(i%7)-3)
	}
	in := map[string]*ir.Tensor{"x": x}
	want, _, err := interp.Run(m, "f", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := runFunction(t, exe, p, "f", in)
	compare(t, "y", got["y"], want["y"])
	compare(t, "s", got["s"], want["s"])

	t0 = time.Now()
	_, rep2, err := Compile(context.Background(), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	summary := strings.Join(rep2.Notes, "; ")
	if !strings.Contains(summary, "reused from the database") || strings.Contains(summary, " 0 searches reused") {
		t.Errorf("second compile did not reuse the database: %s", summary)
	}
	t.Logf("tuned compile %v, again with the database %v; %s", first.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), summary)
}

// weightsNote speaks when the winners hold more weights than the static choice (here one
// function's winner folds w·2 into a weight of its own) and stays silent when the winners are
// the static extractions.
func TestWeightsNote(t *testing.T) {
	m, a, b, b2 := weightsModel(t)
	opts := lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"}
	static := map[*ir.Function]*staticExtraction{a: {fn: a}, b: {fn: b}}
	_, got, err := lower.Lower(m, []*ir.Function{a, b2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	note := weightsNote(m, []*ir.Function{a, b}, []*ir.Function{a, b2}, static, got, opts)
	if !strings.Contains(note, "32.0 KiB of weights, the static choice 16.0 KiB") {
		t.Errorf("note %q, want it to name 32.0 KiB against 16.0 KiB", note)
	}
	_, same, err := lower.Lower(m, []*ir.Function{a, b}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if note := weightsNote(m, []*ir.Function{a, b}, []*ir.Function{a, b}, static, same, opts); note != "" {
		t.Errorf("winners equal to the static choice, yet a note: %q", note)
	}
}

// fakeClock stands in for the device's clocks in tuned compiles: kernel configurations and
// whole candidates get times derived from what they are (so a cold compile decides something),
// and every call is counted (so a warm compile can be shown to measure nothing).
type fakeClock struct {
	mu            sync.Mutex
	kernels, plan int
}

func (c *fakeClock) Time(_ context.Context, k *tune.Candidate) (time.Duration, error) {
	c.mu.Lock()
	c.kernels++
	c.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(k.Template.Name + " " + k.Config.Key() + " " + k.Problem.Key()))
	return time.Duration(10000+h.Sum32()%5000) * time.Nanosecond, nil
}

func (c *fakeClock) TimePlan(_ context.Context, _ *runtime.Executable, fn string, _ map[string][]byte, candidate int) (time.Duration, error) {
	c.mu.Lock()
	c.plan++
	c.mu.Unlock()
	return time.Duration(100+7*((candidate+1)%3)) * time.Microsecond, nil // candidate 2 wins
}

func (c *fakeClock) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kernels, c.plan
}

// tunedTwice compiles m with measurement twice on one tuning database, each time with a fresh
// fake clock, and returns both plans' encodings, both reports and both clocks.
func tunedTwice(t *testing.T, m *ir.Model, opts Options) (enc [2][]byte, reps [2]*Report, clocks [2]*fakeClock) {
	t.Helper()
	opts.Tune, opts.TuneDB = true, filepath.Join(t.TempDir(), "tune.json")
	for i := range enc {
		clocks[i] = &fakeClock{}
		o := opts
		o.timing, o.planTimer = clocks[i], clocks[i]
		p, rep, err := Compile(context.Background(), m, o)
		if err != nil {
			t.Fatalf("compile %d: %v", i+1, err)
		}
		var b bytes.Buffer
		if err := p.Encode(&b); err != nil {
			t.Fatal(err)
		}
		enc[i], reps[i] = b.Bytes(), rep
	}
	return enc, reps, clocks
}

// A warm compile, one whose kernel problems and selections the database holds complete, does
// no measurement: the fake clock is never asked, no configuration is built or run, and the
// selection is the recorded one. Its plan is byte-identical to the cold compile's.
func TestWarmCompileMeasuresNothing(t *testing.T) {
	device(t)
	m, err := ir.ParseModelBytes("toy.yaml", []byte(toyModel), ".")
	if err != nil {
		t.Fatal(err)
	}
	enc, reps, clocks := tunedTwice(t, m, Options{Candidates: 2, tuneConfigs: 3})
	if k, p := clocks[0].counts(); k == 0 || p == 0 {
		t.Fatalf("the cold compile measured %d kernel configurations and %d candidates; want some of each", k, p)
	}
	if k, p := clocks[1].counts(); k != 0 || p != 0 {
		t.Errorf("the warm compile measured %d kernel configurations and %d candidates, want none", k, p)
	}
	notes := strings.Join(reps[1].Notes, "\n")
	if !strings.Contains(notes, " 0 searched (0 configurations") {
		t.Errorf("the warm compile searched: %s", notes)
	}
	if sel := strings.Join(reps[1].Selections, ""); !strings.Contains(sel, "recorded by an earlier compile") {
		t.Errorf("the warm selection is not the recorded one:\n%s", sel)
	}
	if !strings.Contains(notes, NotOpenedNote) || strings.Contains(strings.Join(reps[0].Notes, "\n"), NotOpenedNote) {
		t.Errorf("the warm compile opened the device (or the cold one did not): %s", notes)
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Errorf("the warm plan (%d bytes) differs from the cold one (%d bytes)", len(enc[1]), len(enc[0]))
	}
}

// Two tuned compiles of tinyllama on one database write the same plan: the second takes every
// kernel and both selections from the database (on lavapipe, with the device's own clocks
// replaced so that the test is quick; the kernels are still built, run and checked).
func TestWarmTinyLlamaPlanIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cold tuned compile of tinyllama checks hundreds of kernels on lavapipe")
	}
	device(t)
	m := parseExample(t, "tinyllama")
	enc, reps, clocks := tunedTwice(t, m, Options{Functions: []string{"decode"}, Candidates: 3, tuneConfigs: 1, ArgmaxOutput: true})
	if k, p := clocks[1].counts(); k != 0 || p != 0 {
		t.Errorf("the warm compile measured %d kernel configurations and %d candidates, want none", k, p)
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Errorf("two tuned compiles on one database differ: %d and %d bytes", len(enc[0]), len(enc[1]))
	}
	t.Logf("cold %v, warm %v\n%s", reps[0].Total.Round(time.Millisecond), reps[1].Total.Round(time.Millisecond), strings.Join(reps[1].Selections, ""))
}

// weighWeights gives a function its static extraction back when its measured winner makes the
// plan hold much more weight memory and gains too little for it, and keeps a winner whose gain
// pays for the memory.
func TestWeighWeights(t *testing.T) {
	d := device(t)
	m, a, b, b2 := weightsModel(t)
	s := &measureSource{info: d.Info}
	lopts := lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"}
	for _, tc := range []struct {
		staticRatio float64 // the static extraction's time over the winner's
		shortRatio  float64 // the same at a short length (0: not timed)
		keep        bool
	}{{1.01, 0, false}, {3, 0, true}, {3, 1.01, false}, {3, 2.5, true}} {
		cands := map[*ir.Function][]tune.SelectCandidate{
			a: {{Fn: a, Label: "static extraction", Static: true}},
			b: {{Fn: b, Label: "static extraction", Static: true}, {Fn: b2, Label: "extraction 2"}},
		}
		sels := []*tune.Selection{
			{Function: "a", Winner: 0, Results: []tune.SelectResult{{SelectCandidate: cands[a][0], Valid: true, Ratio: 1}}},
			{Function: "b", Winner: 1, Results: []tune.SelectResult{
				{SelectCandidate: cands[b][0], Valid: true, Ratio: tc.staticRatio, ShortRatio: tc.shortRatio},
				{SelectCandidate: cands[b][1], Valid: true, Ratio: 1, ShortRatio: min(tc.shortRatio, 1)}}},
		}
		got := s.weighWeights(m, []*ir.Function{a, b}, cands, sels, []*ir.Function{a, b2}, lopts)
		if kept := got[1] == b2; kept != tc.keep {
			t.Errorf("static ×%.2f (×%.2f short): winner kept %v, want %v (why: %q)", tc.staticRatio, tc.shortRatio, kept, tc.keep, sels[1].Why)
		}
		if !tc.keep && (sels[1].Winner != 0 || !strings.Contains(sels[1].Why, "more weight memory") || sels[1].Results[0].Ratio != 1) {
			t.Errorf("reverted selection: winner %d, ratio %v, why %q", sels[1].Winner, sels[1].Results[0].Ratio, sels[1].Why)
		}
	}
}

// weightsModel is a model whose functions a and b use one weight w and b2 folds w·2 into a
// weight of its own: a and b2 together hold twice the weights of a and b.
func weightsModel(t *testing.T) (m *ir.Model, a, b, b2 *ir.Function) {
	t.Helper()
	const src = `
model: weights
dims: {n: 64}
weights: {init: random, seed: 1}
params:
  w: [n, n]
functions:
  a:
    inputs:
      x: f32[1, n]
    outputs: [y]
    body:
      - y = linear(x, w)
  b:
    inputs:
      x: f32[1, n]
    outputs: [y]
    body:
      - y = linear(x, w)
  b2:
    inputs:
      x: f32[1, n]
    outputs: [y]
    body:
      - y = linear(x, mul(w, 2))
`
	m, err := ir.ParseModelBytes("weights.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	return m, m.Function("a"), m.Function("b"), m.Function("b2")
}

// TestTunedCompileWithoutReference: where the interpreter could not hold the model's parameters
// in float64 within the host memory limit (VKC_HOST_MEMORY, here between the weights' f32 bytes
// and twice them), a tuned compile checks no candidate graph against the interpreter: it says so,
// checks the candidates against each function's static extraction run on the device instead, and
// still tunes the kernels and writes a plan that matches the interpreter. Before, the reference
// started anyway: a tuned compile of Llama-3.1-8B (64 GB of float64 parameters) on a machine of
// 24 GiB was killed by the kernel. (TestSelectFunctionDeviceReference checks that a wrong
// candidate is rejected so.)
func TestTunedCompileWithoutReference(t *testing.T) {
	d := device(t)
	const src = `
model: wide
dims: {rows: 4, d: 48, layers: 6}
weights: {init: random, seed: 5, scale: 0.2}
params:
  w.{i}: [d, d]
functions:
  f:
    inputs:
      x: f32[rows, d]
    outputs:
      y: f32[rows, d]
    body:
      - h = x
      - repeat i in 0..layers:
        - h = relu(linear(h, w.{i}))
      - y = h
`
	m, err := ir.ParseModelBytes("wide.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"x": ir.NewTensor(ir.T(ir.F32, 4, 48))}
	for i := range 4 * 48 {
		in["x"].SetFloat64(i, float64(i%9)/4-1)
	}
	want, _, err := interp.Run(m, "f", in, nil) // before the limit
	if err != nil {
		t.Fatal(err)
	}
	// The f32 weights take 54 KiB, a product's reference 18 KiB of float64 weights, the
	// function's 108 KiB.
	t.Setenv("VKC_HOST_MEMORY", "80KiB")
	if err := tune.ReferenceFits(m); err == nil {
		t.Fatal("ReferenceFits: nil under a limit of 80 KiB")
	}
	p, rep, err := Compile(context.Background(), m, Options{Tune: true, Budget: 5 * time.Second, TuneDB: filepath.Join(t.TempDir(), "db.json")})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "no candidate graph is checked against the interpreter") || !strings.Contains(notes, "float64") {
		t.Errorf("the report does not say why nothing was checked against the interpreter:\n%s", notes)
	}
	if len(rep.Selections) == 0 {
		t.Error("no selection reported")
	}
	for _, sel := range rep.Selections {
		t.Log("\n" + sel)
		if !strings.Contains(sel, "float64") || !strings.Contains(sel, "checked against the static extraction") {
			t.Errorf("selection: want the candidates checked against the static extraction on the device, for want of memory:\n%s", sel)
		}
	}
	// The limit is the reference's: the plan file's sections (81 KiB or less, with the kernels
	// the tuner chose) are read back under a larger one.
	t.Setenv("VKC_HOST_MEMORY", "16MiB")
	compare(t, "y", runFunction(t, roundTrip(t, d, p), p, "f", in)["y"], want["y"])
}

// TestWriteReserve: a measured compile keeps the end of its budget for writing the plan's inline
// weights at planWriteRate (at most half the budget), and nothing for a plan of external weights
// or an unbounded compile.
func TestWriteReserve(t *testing.T) {
	m := &ir.Model{Params: []*ir.Decl{{Name: "w", Type: ir.T(ir.F16, 1<<20, 1024)}, {Name: "b", Type: ir.T(ir.F16, 1<<20, 1024)}}} // 4 GiB
	for _, c := range []struct {
		opts Options
		want time.Duration
	}{
		{Options{Budget: 15 * time.Second}, 4 * time.Second},
		{Options{Budget: 6 * time.Second}, 3 * time.Second},
		{Options{Budget: 15 * time.Second, Weights: WeightsExternal}, 0},
		{Options{}, 0},
	} {
		if got := writeReserve(m, c.opts); got != c.want {
			t.Errorf("budget %v, weights %v: reserve %v, want %v", c.opts.Budget, c.opts.Weights, got, c.want)
		}
	}
}
