package engine

import (
	"fmt"
	"testing"

	"github.com/vkc-project/vkc/plan"
)

// TestGenerationFunctions: the lengths a generation runs the prefill at are its chunks, as
// generate cuts them (a fixed-length prefill only where the prompt fills it), and decode always.
func TestGenerationFunctions(t *testing.T) {
	step := func(name string, seq, minSeq int) *Step {
		return &Step{Function: &plan.Function{Name: name}, Seq: seq, MinSeq: minSeq}
	}
	bounded := &LM{Prefill: step("prefill", 64, 1), Decode: step("decode", 1, 1)}
	fixed := &LM{Prefill: step("prefill", 16, 16), Decode: step("decode", 1, 1)}
	for _, c := range []struct {
		lm     *LM
		n, max int
		want   string
	}{
		{bounded, 5, 0, "[{prefill 5} {decode 1}]"},
		{bounded, 5, 1, "[{prefill 5}]"}, // one token: the prefill gives it
		{bounded, 64, 8, "[{prefill 64} {decode 1}]"},
		{bounded, 150, 8, "[{prefill 64} {prefill 22} {decode 1}]"},
		{bounded, 0, 1, "[{prefill 0} {decode 1}]"},
		{fixed, 40, 1, "[{prefill 16} {decode 1}]"}, // 8 tokens left go through decode
		{fixed, 10, 8, "[{decode 1}]"},
		{&LM{Decode: step("decode", 1, 1)}, 10, 8, "[{decode 1}]"},
	} {
		if got := fmt.Sprint(GenerationFunctions(c.lm, c.n, c.max)); got != c.want {
			t.Errorf("prefill %d..%d, %d tokens: %s, want %s", c.lm.Decode.MinSeq, c.n, c.n, got, c.want)
		}
	}
}

// TestNilResults: the accessors of a nil *Results return an error naming the output instead of
// panicking.
func TestNilResults(t *testing.T) {
	var r *Results
	if _, err := r.Float32s("logits"); err == nil {
		t.Errorf("Float32s on nil: no error")
	}
	if _, err := r.Int32s("next_token"); err == nil {
		t.Errorf("Int32s on nil: no error")
	}
	if s := r.Shape("logits"); s != nil {
		t.Errorf("Shape on nil: %v", s)
	}
	if _, err := (&Results{}).Tensor("x"); err == nil {
		t.Errorf("Tensor without a function: no error")
	}
	var m Model
	//lint:ignore SA1012 the nil context is the case under test
	if _, err := m.Call(nil, "decode", nil); err == nil { //nolint:staticcheck
		t.Errorf("Call(nil, …): no error")
	}
}
