package vkc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// importTinyllama imports testdata/hf/tinyllama (the repository's own small checkpoint) into a
// model.yaml in a temporary folder and parses it, with everything in f32 (importer.F32: the
// tests compare the plan with the interpreter at f32's 1e-4).
func importTinyllama(t *testing.T, ctx, prefill int) *ir.Model {
	t.Helper()
	dir := t.TempDir()
	im, err := importer.ImportHF(filepath.Join("testdata", "hf", "tinyllama"), importer.HFOptions{Ctx: ctx, Prefill: prefill, YAMLDir: dir, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	im.Model.Close()
	m := parseImported(t, dir, im.YAML)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestLastRowPrefill: an imported model's prefill computes the LM head, the argmax and the top-k
// of the prompt's last row only (a slice of the run's last row, placed by the run's length),
// and its score function every row. Compiled for the device (the 1..16 prefill with its
// variants), each is run at several lengths after a first chunk (so pos > 0) and compared with
// the interpreter running the model written at that length; the prefill's logits are the
// score's last row; and generation through the plan (engine.GenerateIDs, which takes the
// prefill) gives the interpreter's greedy tokens.
func TestLastRowPrefill(t *testing.T) {
	d := device(t)
	m := importTinyllama(t, 32, 16)
	pf := m.Function("prefill")
	if got := pf.Outputs[0].Value.Type().Shape; !got.Equal(ir.Shape{1, 256}) {
		t.Fatalf("imported prefill's logits %v, want [1 256] (the last row)", got)
	}
	p, _ := compileExample(t, m, Options{Target: targetOf(d), ArgmaxOutput: true, TopK: 8})
	exe := roundTrip(t, d, p)
	lm, err := engine.CausalLM(p)
	if err != nil {
		t.Fatal(err)
	}
	if lm.Prefill.Function.Name != "prefill" || !lm.Prefill.LastRow || lm.Prefill.TopK != 8 || lm.Prefill.Next == "" {
		t.Fatalf("generation takes %s (last row %v, top-k %d, next %q), want prefill's last row with its argmax and 8 candidates",
			lm.Prefill.Function.Name, lm.Prefill.LastRow, lm.Prefill.TopK, lm.Prefill.Next)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(256))
		}
		return ids
	}
	s := interp.NewSession(m)
	in := func(ids []int32, pos int) map[string]*ir.Tensor {
		return map[string]*ir.Tensor{"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, len(ids)), f64s(ids)),
			"pos": ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(pos)})}
	}
	run := func(fn string, ids []int32, pos int) map[string]*ir.Tensor {
		t.Helper()
		res, err := exe.Run(ctx, fn, map[string][]byte{"tokens": engine.Int32Bytes(ids...), "pos": engine.Int32Bytes(int32(pos))})
		if err != nil {
			t.Fatalf("%s of %d tokens at %d: %v", fn, len(ids), pos, err)
		}
		got, err := Outputs(p.Function(fn), res)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct{ first, n int }{{3, 1}, {2, 5}, {4, 12}, {0, 16}} {
		first, rest := tokens(c.first), tokens(c.n)
		if c.first > 0 {
			run("prefill", first, 0)
		}
		got := run("prefill", rest, c.first)
		// The interpreter's session runs the model as written (a fresh one per case: the
		// first chunk fills its caches the same way).
		s = interp.NewSession(m)
		if c.first > 0 {
			if _, err := s.Run("score", in(first, 0)); err != nil {
				t.Fatal(err)
			}
		}
		want, err := interp.NewSession(m).Run("prefill", in(append(append([]int32(nil), first...), rest...), 0))
		if err != nil {
			t.Fatal(err)
		}
		score, err := s.Run("score", in(rest, c.first))
		if err != nil {
			t.Fatal(err)
		}
		lg, sc, wl := got["logits"].Float64s(), score["logits"].Float64s(), want["logits"].Float64s()
		if len(lg) != 256 || len(sc) != 256*c.n {
			t.Fatalf("n=%d: prefill logits %d values, score %d; want 256 and %d", c.n, len(lg), len(sc), 256*c.n)
		}
		if e := oracles.RowRel(lg, sc[(c.n-1)*256:], 256); e > 1e-4 {
			t.Errorf("n=%d at %d: prefill's logits are %.3g row-relative from the interpreter's score's last row", c.n, c.first, e)
		}
		if e := oracles.RowRel(lg, wl, 256); e > 1e-4 {
			t.Errorf("n=%d at %d: prefill's logits are %.3g row-relative from the interpreter's prefill of the whole prompt", c.n, c.first, e)
		}
		if next := got["next_token"].Float64s(); len(next) != 1 || int(next[0]) != argmax64(sc[(c.n-1)*256:]) {
			t.Errorf("n=%d: next_token %v, the last row's argmax is %d", c.n, next, argmax64(sc[(c.n-1)*256:]))
		}
		if ids := got["top_ids"].Float64s(); len(ids) != 8 || int(ids[0]) != argmax64(sc[(c.n-1)*256:]) {
			t.Errorf("n=%d: top_ids %v, want 8 led by the last row's argmax %d", c.n, ids, argmax64(sc[(c.n-1)*256:]))
		}
		// The device's score of the same rows, for every row.
		if c.first > 0 {
			run("score", first, 0)
		}
		gs := run("score", rest, c.first)["logits"].Float64s()
		if e := oracles.RowRel(gs, sc, 256); e > 1e-4 {
			t.Errorf("n=%d: score's logits are %.3g row-relative from the interpreter's", c.n, e)
		}
	}
	prompt := tokens(11)
	g, err := engine.GenerateIDs(ctx, exe, prompt, engine.GenerateOptions{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.PrefillFn != "prefill" || g.Prefilled != len(prompt) {
		t.Errorf("the prompt went through %q (%d tokens), want prefill (%d)", g.PrefillFn, g.Prefilled, len(prompt))
	}
	// The interpreter's greedy tokens: the prompt through prefill, then decode steps.
	s = interp.NewSession(m)
	var want []int32
	ids, pos := prompt, 0
	for len(want) < 4 {
		fn := "prefill"
		if pos > 0 {
			fn = "decode"
		}
		out, err := s.Run(fn, in(ids, pos))
		if err != nil {
			t.Fatal(err)
		}
		next := int32(argmax64(out["logits"].Float64s()))
		want = append(want, next)
		pos += len(ids)
		ids = []int32{next}
	}
	if fmt.Sprint(g.Tokens) != fmt.Sprint(want) {
		t.Errorf("greedy tokens %v, the interpreter's %v", g.Tokens, want)
	}
}
