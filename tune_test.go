package vkc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
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
	pf := p.Function("f")
	bin, err := Inputs(pf, in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := exe.Run(context.Background(), "f", bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Outputs(pf, res)
	if err != nil {
		t.Fatal(err)
	}
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
	const src = `
model: wn
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
	m, err := ir.ParseModelBytes("wn.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	a, b, b2 := m.Function("a"), m.Function("b"), m.Function("b2")
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
