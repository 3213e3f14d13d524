package codegen

import (
	"testing"

	"github.com/vkc-project/vkc/codegen/spirvval"
)

// spirvVal runs spirv-val (see package spirvval: ../shared/tools first, then $PATH) on the kernel's
// module for the target environment (vulkan1.1, vulkan1.2, vulkan1.3), skipping the test when the
// tool is missing, or when the module uses cooperative matrices or bfloat16 and the only tool is
// older than v2025.2 (Debian 12's v2023.1 does not know those capabilities).
func spirvVal(t *testing.T, k *Kernel, env string) {
	t.Helper()
	tool, err := spirvval.Find()
	if err != nil {
		t.Skipf("missing capability: %v", err)
	}
	if k.Needs&(FeatureCooperativeMatrix|FeatureBFloat16|FeatureBFloat16Matrix) != 0 && !tool.AtLeast(2025, 2) {
		t.Skipf("missing capability: %s (%s) predates CooperativeMatrixKHR and BFloat16TypeKHR; put SPIRV-Tools v2025.2 or newer in ../shared/tools", tool.Path, tool.VersionLine)
	}
	dir := t.TempDir()
	if err := tool.Validate(k.Bytes(), env, dir); err != nil {
		t.Fatalf("spirv-val rejects kernel %q: %v\ndisassembly:\n%s\nIR:\n%s", k.Name, err, tool.Disassemble(k.Bytes(), dir), k.Dump())
	}
}
