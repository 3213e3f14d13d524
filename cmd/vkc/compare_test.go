package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// vkc compare times one function of two plans in alternating pairs: a plan against itself
// gives every pair a ratio near 1; a function one plan lacks, or plans of other signatures,
// are errors naming them.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.plan"), filepath.Join(dir, "b.plan")
	for _, p := range []string{a, b} {
		if code, _, errs := runCLI(t, "compile", "../../examples/mlp/model.yaml", "-o", p, "-q"); code != 0 {
			t.Fatalf("compile: %s", errs)
		}
	}
	code, out, errs := runCLI(t, "compare", a, b, "-f", "forward", "--pairs", "4", "-n", "2", "--json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, errs)
	}
	var r compareResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if r.Pairs != 4 || len(r.Ratios) != 4 || r.AMedian <= 0 || r.BMedian <= 0 || r.BWins < 0 || r.BWins > 4 || r.Ratio <= 0 {
		t.Errorf("result %+v", r)
	}
	if code, _, errs := runCLI(t, "compare", a, b, "-f", "nope"); code == 0 || !strings.Contains(errs, "nope") {
		t.Errorf("an unknown function: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "compare", a, "-f", "forward"); code == 0 || !strings.Contains(errs, "two plan files") {
		t.Errorf("one plan: exit %d: %s", code, errs)
	}
}
