package codegen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTablesUpToDate regenerates spirv_tables.go from the grammar committed in
// internal/grammargen/grammar and compares it with the committed file, so an edit to the generator
// or the grammar cannot drift from the tables.
func TestTablesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generator; skipped in -short mode")
	}
	out := filepath.Join(t.TempDir(), "tables.go")
	cmd := exec.Command("go", "run", "./internal/grammargen", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("grammargen: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("spirv_tables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("spirv_tables.go differs from the generator's output for internal/grammargen/grammar: run go generate ./codegen/")
	}
}
