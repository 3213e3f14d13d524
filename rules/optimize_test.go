package rules

import (
	"context"
	"testing"

	"vkc/ir"
)

func TestOptimizeRoundTrip(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Functions {
		g, rep, err := Optimize(context.Background(), m, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", rep)
		if len(g.Outputs) != len(f.Outputs) || len(g.Updates) != len(f.Updates) {
			t.Fatalf("signature changed")
		}
	}
}
