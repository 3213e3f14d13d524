package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDotFused: --fused draws the optimised graph, fused nodes labelled with their rules.
func TestDotFused(t *testing.T) {
	out := filepath.Join(t.TempDir(), "fused.dot")
	code, _, errs := runCLI(t, "dot", "../../examples/tinyllama/model.yaml", "-f", "decode", "--fused", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"rmsnorm_linear", "rule: rmsnorm-linear", "rope_cache_write", "rule: rope-cache-write", `label="repeat i=1"`} {
		if !strings.Contains(s, want) {
			t.Errorf("fused DOT lacks %q", want)
		}
	}
}
