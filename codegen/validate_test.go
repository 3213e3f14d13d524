package codegen

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// spirvVal runs spirv-val on the kernel's module for the target environment (vulkan1.1, vulkan1.2),
// skipping the test when the tool is missing.
func spirvVal(t *testing.T, k *Kernel, env string) {
	t.Helper()
	tool, err := exec.LookPath("spirv-val")
	if err != nil {
		t.Skip("missing capability: spirv-val not found (install spirv-tools; scripts/setup.sh does)")
	}
	path := filepath.Join(t.TempDir(), k.Name+".spv")
	if err := os.WriteFile(path, k.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "--target-env", env, path).CombinedOutput()
	if err != nil {
		dis, _ := exec.Command("spirv-dis", path).CombinedOutput()
		t.Fatalf("spirv-val --target-env %s rejects kernel %q: %v\n%s\ndisassembly:\n%s\nIR:\n%s", env, k.Name, err, out, dis, k.Dump())
	}
}
