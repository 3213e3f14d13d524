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
	gobin := goCommand(t)
	const mod = "github.com/vkc-project/vkc"
	forbidden := []string{"/egraph", "/rules", "/kernels", "/codegen", "/lower", "/ir", "/tune"}
	for _, pkg := range []string{mod + "/engine", mod + "/examples/embed"} {
		cmd := exec.Command(gobin, "list", "-deps", pkg)
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

// goCommand is the go command on PATH; without one (a test binary run on a machine with no Go
// toolchain) the test skips, naming the capability it needs.
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the Go toolchain's go command (go list, go build): %v", err)
	}
	return p
}
