package vkc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
)

// TestHFOraclePlan: transformers' tinyllama folder (../shared/oracles/hf/tinyllama) through vkc
// import (a model.yaml written beside the plan, naming the folder's weights file), compiled for
// the device (lavapipe in CI) and run: prefill and decode logits against transformers' golden
// (the oracle's 1e-4 row-relative) and against the plan compiled from the hand-written
// examples/tinyllama model.yaml (the same graph: ≤ 1e-5), and the greedy tokens.
func TestHFOraclePlan(t *testing.T) {
	d := device(t)
	src := oracles.Dir(t, "hf/tinyllama")
	dir := t.TempDir()
	im, err := importer.ImportHF(src, importer.HFOptions{Ctx: 32, Prefill: 16, YAMLDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	im.Model.Close()
	yml := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(yml, im.YAML, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ir.ParseModel(yml)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _ := compileExample(t, m, Options{Target: targetOf(d)})
	hp, _ := compileExample(t, parseExample(t, "tinyllama"), Options{Target: targetOf(d)})
	gold, err := ir.ReadSafetensors(filepath.Join(src, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	prompt, fed := ints64(gold["input_ids"]), ints64(gold["decode_tokens"])
	vocab := gold["prefill_logits"].Type.Shape[1]
	run := func(r oracles.Runner) (pre, dec []float64) {
		pre, err := r.Run("prefill", prompt, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range fed {
			row, err := r.Run("decode", []int{tok}, len(prompt)+i)
			if err != nil {
				t.Fatal(err)
			}
			dec = append(dec, row...)
		}
		return pre, dec
	}
	ip, id := run(&planRunner{roundTrip(t, d, p)})
	hpre, hdec := run(&planRunner{roundTrip(t, d, hp)})
	for _, c := range []struct {
		what      string
		got, hand []float64
		ref       string
	}{{"prefill", ip, hpre, "prefill_logits"}, {"decode", id, hdec, "decode_logits"}} {
		e := oracles.RowRel(c.got, gold[c.ref].Float64s(), vocab)
		eh := oracles.RowRel(c.got, c.hand, vocab)
		t.Logf("%s: %.3g row-relative from transformers, %.3g from the hand-written model's plan", c.what, e, eh)
		if e > oracleTol {
			t.Errorf("%s: %.3g row-relative from transformers' %s > %g", c.what, e, c.ref, oracleTol)
		}
		if eh > 1e-5 {
			t.Errorf("%s: %.3g row-relative from the hand-written model's plan", c.what, eh)
		}
	}
	greedy := ints64(gold["greedy_tokens"])
	if got := oracles.Argmax(ip[(len(prompt)-1)*vocab:]); got != greedy[0] {
		t.Errorf("first greedy token %d, transformers' %d", got, greedy[0])
	}
}

func ints64(x *ir.Tensor) []int {
	out := make([]int, x.NumElements())
	for i := range out {
		out[i] = int(x.Float64(i))
	}
	return out
}
