package vkc

import (
	"bytes"
	"context"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/runtime"
)

// TestWeightShare: two plans lowered from one model hold the same weights, so their loads
// through a runtime.WeightShare upload them once, and both run as a load of their own does
// (the same logits), also after the other executable is closed; a plan of other weights (the
// model with one parameter changed) gets its own region.
func TestWeightShare(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	p1, _ := compileExample(t, m, Options{Target: targetOf(d), Functions: []string{"decode"}})
	p2, _ := compileExample(t, m, Options{Target: targetOf(d), Functions: []string{"decode"}})
	ins := map[string][]byte{"tokens": engine.Int32Bytes(5), "pos": engine.Int32Bytes(0)}
	run := func(e *runtime.Executable) []byte {
		t.Helper()
		if err := e.ResetState(); err != nil {
			t.Fatal(err)
		}
		res, err := e.Run(context.Background(), "decode", ins)
		if err != nil {
			t.Fatal(err)
		}
		return res["logits"]
	}
	own, err := d.Load(p1, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := run(own)
	own.Close()

	share := runtime.NewWeightShare()
	defer share.Close()
	e1, err := d.Load(p1, runtime.LoadOptions{Weights: share})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := d.Load(p2, runtime.LoadOptions{Weights: share})
	if err != nil {
		t.Fatal(err)
	}
	if n := share.Regions(); n != 1 {
		t.Errorf("two plans of one model's weights: %d regions in the share, want 1", n)
	}
	if got := run(e1); !bytes.Equal(got, want) {
		t.Error("the first shared load's logits differ from a load of its own")
	}
	e1.Close()
	if got := run(e2); !bytes.Equal(got, want) {
		t.Error("the second shared load's logits differ from a load of its own (after the first was closed)")
	}
	e2.Close()

	m2 := parseExample(t, "tinyllama")
	compileExample(t, m2, Options{Target: targetOf(d), Functions: []string{"decode"}}) // makes its weights
	w := m2.Weights["out_norm"]
	if w == nil {
		t.Fatal("tinyllama has no out_norm weights")
	}
	c := *w
	c.Data = bytes.Clone(w.Data) // the loaded weights are mapped read-only
	c.Data[3] ^= 0x40            // the norm's first gamma, an f32's high byte
	m2.Weights["out_norm"] = &c
	p3, _ := compileExample(t, m2, Options{Target: targetOf(d), Functions: []string{"decode"}})
	e3, err := d.Load(p3, runtime.LoadOptions{Weights: share})
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	if n := share.Regions(); n != 2 {
		t.Errorf("a plan of other weights: %d regions in the share, want 2", n)
	}
	if got := run(e3); bytes.Equal(got, want) {
		t.Error("the plan of changed weights gave the first plan's logits: it read the shared region")
	}
}
