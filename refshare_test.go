package vkc

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/lower/tune"
)

// TestReferencesShared: functions that are one graph at their check length share one reference
// evaluation, as a compile derives them (length variants, a top-k output): tinyllama's prefill
// and a variant of capacity 48, both checked at 37 rows; its prefill@1 and decode, one graph at
// one row. A shared reference is what the function's own evaluation gives; functions that
// differ (prefill@8) get their own.
func TestReferencesShared(t *testing.T) {
	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, fns, _, err := withLengthVariants(m, m.Functions, []int{1, 8, 48})
	if err != nil {
		t.Fatal(err)
	}
	// As a compile of default options has them: a top-k output, which derives the functions
	// (their At builds a new graph each call).
	if fns, _, err = addLMOutputs(m, fns, false, 8); err != nil {
		t.Fatal(err)
	}
	by := map[string]*ir.Function{}
	for _, f := range fns {
		by[f.Name] = f
	}
	refs := startReferences(context.Background(), m, fns, nil, 0, nil)
	for _, pair := range [][2]string{{"prefill", "prefill@48"}, {"prefill@1", "decode"}} {
		a, b := by[pair[0]], by[pair[1]]
		if a == nil || b == nil {
			t.Fatalf("no function %s or %s among %v", pair[0], pair[1], fns)
		}
		if refs[a] != refs[b] {
			t.Errorf("%s and %s evaluate one reference each", pair[0], pair[1])
		}
	}
	if refs[by["prefill"]] == refs[by["prefill@8"]] || refs[by["prefill@8"]] == refs[by["prefill@1"]] {
		t.Error("prefill@8 shares a reference with a function of another length")
	}
	// decode's shared reference (evaluated for prefill@1) against decode's own.
	ins, want, err := refs[by["decode"]].Wait()
	if err != nil {
		t.Fatal(err)
	}
	ownIns, own, err := tune.StartReference(m, by["decode"], 0, nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ins, ownIns) || !reflect.DeepEqual(want, own) {
		t.Error("decode's shared reference differs from its own evaluation")
	}
}

// TestReferencesWithinBudget: a function whose reference the interpreter could not evaluate
// within the budget (tune.ReferenceTime) gets none, and the report says which and why; a
// reference whose context has ended stops with its error.
func TestReferencesWithinBudget(t *testing.T) {
	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	decode := m.Function("decode")
	d := tune.ReferenceTime(m, decode)
	if d <= 0 {
		t.Fatalf("ReferenceTime(decode) = %v", d)
	}
	if p := tune.ReferenceTime(m, m.Function("prefill")); p <= d {
		t.Errorf("ReferenceTime: prefill (37 rows) %v, not more than decode (1 row) %v", p, d)
	}
	// A function of fixed shape counts the rows of its output: a 128-token prefill without a
	// run-time length reads every weight 128 times where decode reads it once. Counted as one
	// row, the 1.2B Llama shape's prefill reference (about 100 s at the same rates) passed for 6 s.
	const src = `
model: fixed
dims: {d: 256, seq: 128}
weights: {init: random, seed: 1, scale: 0.1}
params:
  w: [d, d]
functions:
  prefill:
    inputs:
      x: f32[seq, d]
    outputs:
      y: f32[seq, d]
    body:
      - y = linear(x, w)
  decode:
    inputs:
      x: f32[1, d]
    outputs:
      y: f32[1, d]
    body:
      - y = linear(x, w)
`
	fixed, err := ir.ParseModelBytes("fixed.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	p1, d1 := tune.ReferenceTime(fixed, fixed.Function("prefill")), tune.ReferenceTime(fixed, fixed.Function("decode"))
	if p1 < 10*d1 {
		t.Errorf("ReferenceTime: a fixed 128-row prefill %v, its one-row decode %v: want over ten times the decode (its products 128 times)", p1, d1)
	}
	rep := &Report{}
	refs := startReferences(context.Background(), m, []*ir.Function{decode}, nil, d/2, rep)
	if _, _, err := refs[decode].Wait(); err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "decode (about") {
		t.Errorf("want a note naming decode, got %q", rep.Notes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := tune.StartReferenceContext(ctx, m, decode, 0, nil).Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("a reference of an ended context: err %v, want context.Canceled", err)
	}
}
