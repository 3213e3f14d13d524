package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "g.dot")
	code, _, errs := runCLI(t, "dot", "../../examples/tinyllama/model.yaml", "-f", "decode", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"digraph", `label="repeat i=1"`, "attention", "f32[1,4,16]", "tinyllama · decode"} {
		if !strings.Contains(s, want) {
			t.Errorf("DOT lacks %q", want)
		}
	}
	code, stdout, _ := runCLI(t, "dot", "../../examples/whisper-tiny-encoder/model.yaml")
	if code != 0 || !strings.Contains(stdout, "conv1d") || !strings.Contains(stdout, "f32[32,64]") {
		t.Errorf("whisper to stdout: exit %d\n%.300s", code, stdout)
	}
	if dot, err := exec.LookPath("dot"); err == nil {
		cmd := exec.Command(dot, "-Tsvg", out)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("graphviz: %v\n%.500s", err, o)
		}
	}
	if code, _, errs := runCLI(t, "dot"); code != 2 || !strings.Contains(errs, "want one model.yaml") {
		t.Errorf("no model: exit %d, %s", code, errs)
	}
}
