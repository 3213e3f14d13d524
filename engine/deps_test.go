package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the embedding boundary: a program that imports engine (and the embed
// example, which imports nothing else of vkc) links none of the compiler, the reference
// interpreter, the op IR or the YAML parser. go list -deps lists what the package's build links
// (test files excluded). The tokenizer (text generation) brings the GGUF reader ir/gguf and its
// block-format table ir/quant, which read a GGUF vocabulary; they are file formats, not package
// ir, and link none of it.
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH (go list checks the dependencies)")
	}
	const mod = "github.com/vkc-project/vkc"
	forbidden := []string{"/egraph", "/rules", "/kernels", "/codegen", "/lower", "/ir", "/tune"}
	for _, pkg := range []string{mod + "/engine", mod + "/examples/embed"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = moduleDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		var ours []string
		for _, dep := range strings.Fields(string(out)) {
			if dep == "gopkg.in/yaml.v3" {
				t.Errorf("%s links %s (the model.yaml parser's dependency)", pkg, dep)
			}
			rest, ok := strings.CutPrefix(dep, mod)
			if !ok {
				continue
			}
			ours = append(ours, dep)
			if rest == "" {
				t.Errorf("%s links the compiler package %s", pkg, dep)
			}
			if rest == "/ir/gguf" || rest == "/ir/quant" {
				continue
			}
			for _, f := range forbidden {
				if rest == f || strings.HasPrefix(rest, f+"/") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
		t.Logf("%s links %s", pkg, strings.Join(ours, ", "))
		if len(ours) == 0 {
			t.Errorf("go list -deps %s listed none of the module's packages: %q", pkg, out)
		}
	}
}
