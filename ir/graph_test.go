package ir

import (
	"strings"
	"testing"
)

func TestOutputsMustReferToTheFunction(t *testing.T) {
	b := NewBuilder("f")
	if err := b.Output("y", Value{}); err == nil || !strings.Contains(err.Error(), `"y" has no value`) {
		t.Errorf("zero output value: got %v", err)
	}
	other := NewBuilder("g")
	x, _ := other.Input("x", T(F32, 2))
	b2 := NewBuilder("f")
	if err := b2.Output("y", x); err != nil {
		t.Fatal(err)
	}
	m := &Model{Functions: []*Function{b2.Function()}}
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), `output "y" does not refer to a value of this function`) {
		t.Errorf("foreign output value: got %v", err)
	}
}
