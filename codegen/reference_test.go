package codegen

import "testing"

func TestReferenceKernelsValidate(t *testing.T) {
	build := map[string]func() (*Kernel, error){
		"gelu_f16_to_f32": func() (*Kernel, error) { return Elementwise("gelu_f16_to_f32", F16, F32, 64, Gelu) },
		"mathmix_f32":     func() (*Kernel, error) { return Elementwise("mathmix_f32", F32, F16, 128, MathMix) },
		"gelu_vec4":       func() (*Kernel, error) { return Elementwise("gelu_vec4", Vec(F16, 4), Vec(F32, 4), 64, Gelu) },
		"softmax":         func() (*Kernel, error) { return Softmax(128) },
		"matmul":          func() (*Kernel, error) { return Matmul(16, 16, 8) },
		"copy_f32":        func() (*Kernel, error) { return StridedCopy(F32, 8) },
		"copy_f16":        func() (*Kernel, error) { return StridedCopy(F16, 16) },
		"subgroup_ops":    func() (*Kernel, error) { return SubgroupOps(64) },
	}
	for name, f := range build {
		t.Run(name, func(t *testing.T) {
			k, err := f()
			if err != nil {
				t.Fatal(err)
			}
			spirvVal(t, k, "vulkan1.1")
			spirvVal(t, k, "vulkan1.2")
			t.Logf("needs %v, capabilities %v", k.Needs, k.Capabilities)
		})
	}
}
