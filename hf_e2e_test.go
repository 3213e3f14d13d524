package vkc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
)

// TestHFOraclePlan: transformers' tinyllama folder (../shared/oracles/hf/tinyllama) through vkc
// import with everything in f32 (a model.yaml written beside the plan, naming the folder's weights file), compiled for
// the device (lavapipe in CI) and run: prefill and decode logits against transformers' golden
// (the oracle's 1e-4 row-relative) and against the plan compiled from the hand-written
// examples/tinyllama model.yaml (the same graph: ≤ 1e-5), and the greedy tokens.
func TestHFOraclePlan(t *testing.T) {
	d := device(t)
	src := oracles.Dir(t, "hf/tinyllama")
	dir := t.TempDir()
	im, err := importer.ImportHF(src, importer.HFOptions{Ctx: 32, Prefill: 16, YAMLDir: dir, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	im.Model.Close()
	m := parseImported(t, dir, im.YAML)
	defer m.Close()
	p, _ := compileExample(t, m, Options{Target: targetOf(d)})
	hp, _ := compileExample(t, parseExample(t, "tinyllama"), Options{Target: targetOf(d)})
	gold, err := ir.ReadSafetensors(filepath.Join(src, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	prompt, fed := ints64(gold["input_ids"]), ints64(gold["decode_tokens"])
	vocab := gold["prefill_logits"].Type.Shape[1]
	// Every row: the imported model's score, the hand-written one's prefill.
	run := func(r oracles.Runner, rows string) (pre, dec []float64) {
		pre, err := r.Run(rows, prompt, 0)
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
	ip, id := run(&planRunner{roundTrip(t, d, p)}, "score")
	hpre, hdec := run(&planRunner{roundTrip(t, d, hp)}, "prefill")
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

// TestRopeScalingPlan: a checkpoint with Llama 3's rope scaling (tinyllama's weights with
// rope_scaling llama3 over an original context of 16, so positions past it are blended and
// divided) compiled for the device matches the interpreter's prefill and decode logits: the
// scaling survives the rewrites and the merged projections that rotate q and k as they store.
func TestRopeScalingPlan(t *testing.T) {
	d := device(t)
	src := oracles.Dir(t, "hf/tinyllama")
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["rope_parameters"] = map[string]any{"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
		"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(src, "weights.safetensors"), filepath.Join(dir, "weights.safetensors")); err != nil {
		t.Fatal(err)
	}
	im, err := importer.ImportHF(dir, importer.HFOptions{Ctx: 64, Prefill: 16, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Model.Close()
	if !strings.Contains(string(im.YAML), "scaling=llama3") {
		t.Fatalf("no scaling in the model:\n%s", im.YAML)
	}
	p, _ := compileExample(t, im.Model, Options{Target: targetOf(d)})
	prompt := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}
	run := func(r oracles.Runner) []float64 {
		var all []float64
		for c := 0; c < 3; c++ { // positions 0..47: past the original context of 16
			l, err := r.Run("score", prompt, 16*c)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		for i := 0; i < 4; i++ {
			l, err := r.Run("decode", []int{prompt[i]}, 48+i)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		return all
	}
	got := run(&planRunner{roundTrip(t, d, p)})
	want := run(oracles.Interp(im.Model))
	if e := oracles.RowRel(got, want, 256); e > oracleTol {
		t.Errorf("plan vs interpreter: %.3g row-relative > %g", e, oracleTol)
	} else {
		t.Logf("plan vs interpreter: %.3g row-relative", e)
	}
}

// TestHFBF16Plan: transformers' tinyllama stored in bf16 (its f32 weights rounded, as most
// checkpoints are published) through vkc import with the defaults and a compile for the device:
// the plan keeps the matrices and the embedding in bf16 (the weights take half the f32 bytes:
// the kernels read bf16 as 16-bit words and widen them exactly), and its prefill and decode
// logits match the interpreter's within f16's tolerance (the KV cache is f16;
// tune.Tolerance(f16), 2e-3) and give its greedy token.
func TestHFBF16Plan(t *testing.T) {
	d := device(t)
	src := oracles.Dir(t, "hf/tinyllama")
	ws, err := ir.ReadSafetensors(filepath.Join(src, "weights.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b16 := map[string]*ir.Tensor{}
	f32Bytes := 0
	for n, x := range ws {
		b16[n] = x.Convert(ir.BF16)
		f32Bytes += len(x.Data)
	}
	if err := ir.WriteSafetensors(filepath.Join(dir, "model.safetensors"), b16); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	im, err := importer.ImportHF(dir, importer.HFOptions{Ctx: 32, Prefill: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Model.Close()
	if dt := im.Model.Param("layers.0.wq").Type.DType; dt != ir.BF16 {
		t.Fatalf("wq is %s, want bf16", dt)
	}
	p, _ := compileExample(t, im.Model, Options{Target: targetOf(d), NoLengthVariants: true, Functions: []string{"score", "decode"}})
	var sum strings.Builder
	if err := p.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), ", bf16 ") {
		t.Errorf("the plan summary lacks bf16 weights:\n%.800s", sum.String())
	}
	gold, err := ir.ReadSafetensors(filepath.Join(src, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	prompt, fed := ints64(gold["input_ids"]), ints64(gold["decode_tokens"])
	vocab := gold["prefill_logits"].Type.Shape[1]
	run := func(r oracles.Runner) (pre, dec []float64) {
		pre, err := r.Run("score", prompt, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range fed[:3] {
			row, err := r.Run("decode", []int{tok}, len(prompt)+i)
			if err != nil {
				t.Fatal(err)
			}
			dec = append(dec, row...)
		}
		return pre, dec
	}
	gp, gd := run(&planRunner{roundTrip(t, d, p)})
	ip, id := run(oracles.Interp(im.Model))
	for _, c := range []struct {
		what      string
		got, want []float64
	}{{"prefill", gp, ip}, {"decode", gd, id}} {
		e := oracles.RowRel(c.got, c.want, vocab)
		t.Logf("%s: %.3g row-relative from the interpreter", c.what, e)
		if e > 2e-3 {
			t.Errorf("%s: %.3g row-relative from the interpreter > 2e-3", c.what, e)
		}
	}
	if got, want := oracles.Argmax(gp[(len(prompt)-1)*vocab:]), oracles.Argmax(ip[(len(prompt)-1)*vocab:]); got != want {
		t.Errorf("first greedy token %d, the interpreter's %d", got, want)
	}
}
