package tune

import (
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/runtime"
)

// TestCoop2Caps: templates see VK_NV_cooperative_matrix2 only with workgroup scope, flexible
// dimensions and tensor addressing, and only its workgroup-scope entries of codegen's types.
func TestCoop2Caps(t *testing.T) {
	wg := func(a, b, c, r runtime.ComponentType, inv uint32) runtime.CoopFlexibleShape {
		return runtime.CoopFlexibleShape{MGranularity: 16, NGranularity: 16, KGranularity: 16, A: a, B: b, C: c, Result: r, Scope: 2, WorkgroupInvocations: inv}
	}
	full := func() *runtime.CoopMatrix2 {
		sub := wg(0, 0, 1, 1, 0)
		sub.Scope = 3
		return &runtime.CoopMatrix2{
			WorkgroupScope: true, FlexibleDimensions: true, TensorAddressing: true, Reductions: true,
			MaxWorkgroupSize: 256, MaxDimension: 256, ReservedShared: 1024,
			Flexible: []runtime.CoopFlexibleShape{
				sub,                 // subgroup scope: dropped
				wg(0, 0, 1, 1, 128), // f16*f16+f32->f32
				wg(3, 3, 5, 5, 128), // s8: codegen has no 8-bit type, dropped
				wg(0, 0, 0, 0, 256), // f16 accumulation
			},
		}
	}
	got := coop2Caps(full())
	want := kernels.Coop2Caps{MaxWorkgroupSize: 256, MaxDimension: 256, ReservedShared: 1024, Shapes: []kernels.Coop2Shape{
		{MGran: 16, NGran: 16, KGran: 16, A: codegen.F16, B: codegen.F16, C: codegen.F32, Result: codegen.F32, Invocations: 128},
		{MGran: 16, NGran: 16, KGran: 16, A: codegen.F16, B: codegen.F16, C: codegen.F16, Result: codegen.F16, Invocations: 256},
	}}
	if got == nil || got.MaxWorkgroupSize != want.MaxWorkgroupSize || got.MaxDimension != want.MaxDimension ||
		got.ReservedShared != want.ReservedShared || len(got.Shapes) != len(want.Shapes) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want.Shapes {
		if got.Shapes[i] != want.Shapes[i] {
			t.Errorf("shape %d: got %+v, want %+v", i, got.Shapes[i], want.Shapes[i])
		}
	}

	if coop2Caps(nil) != nil {
		t.Errorf("no extension: want nil")
	}
	for name, off := range map[string]func(m *runtime.CoopMatrix2){
		"workgroup scope":     func(m *runtime.CoopMatrix2) { m.WorkgroupScope = false },
		"flexible dimensions": func(m *runtime.CoopMatrix2) { m.FlexibleDimensions = false },
		"tensor addressing":   func(m *runtime.CoopMatrix2) { m.TensorAddressing = false },
		"usable entries": func(m *runtime.CoopMatrix2) {
			m.Flexible = []runtime.CoopFlexibleShape{m.Flexible[0], m.Flexible[2]}
		},
	} {
		m := full()
		off(m)
		if c := coop2Caps(m); c != nil {
			t.Errorf("without %s: got %+v, want nil", name, c)
		}
	}

	info := &runtime.DeviceInfo{Caps: runtime.Caps{CooperativeMatrix2: full()}}
	if c := CapsOf(info); c.Coop2 == nil || len(c.Coop2.Shapes) != 2 {
		t.Errorf("CapsOf: Coop2 %+v", c.Coop2)
	}
}
