package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the server sits on engine only. It links none of the compiler (the root
// package, egraph, rules, kernels, codegen, lower, the op IR), and the OpenAI SDK and the
// Prometheus parser its tests use are not linked into it.
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the Go toolchain's go command (go list): %v", err)
	}
	const mod = "github.com/vkc-project/vkc"
	out, err := exec.Command(gobin, "list", "-deps", mod+"/server").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %q", out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/openai/") || strings.HasPrefix(dep, "github.com/prometheus/") {
			t.Errorf("the server links %s (a test-only dependency)", dep)
		}
		rest, ok := strings.CutPrefix(dep, mod)
		if !ok {
			continue
		}
		if rest == "" {
			t.Errorf("the server links the compiler package %s", dep)
		}
		for _, f := range []string{"/egraph", "/rules", "/kernels", "/codegen", "/lower", "/ir"} {
			if (rest == f || strings.HasPrefix(rest, f+"/")) && rest != "/ir/gguf" && rest != "/ir/quant" {
				t.Errorf("the server links %s", dep)
			}
		}
	}
}
