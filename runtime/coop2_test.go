package runtime

import (
	"errors"
	"strings"
	"testing"

	vk "github.com/goki/vulkan"
)

// TestCoopMatrix2 logs VK_NV_cooperative_matrix2's facts on a device that has it (NVIDIA) and
// checks they are sane; with VKC_COOPMAT2=off the same device opens without it.
func TestCoopMatrix2(t *testing.T) {
	d := openTest(t, Options{})
	m := d.Info.Caps.CooperativeMatrix2
	if m == nil {
		note := ""
		if d.CoopMatrix2Note != "" {
			note = " (" + d.CoopMatrix2Note + ")"
		}
		t.Skipf("missing capability: the device has no VK_NV_cooperative_matrix2%s", note)
	}
	t.Logf("%s: VK_NV_cooperative_matrix2 %s", d.Info.Name, m)
	for _, s := range m.Flexible {
		t.Logf("  %s", s)
	}
	if !m.WorkgroupScope || !m.FlexibleDimensions || !m.TensorAddressing {
		t.Errorf("workgroup scope %v, flexible dimensions %v, tensor addressing %v: want all three", m.WorkgroupScope, m.FlexibleDimensions, m.TensorAddressing)
	}
	if m.MaxWorkgroupSize < 32 || m.MaxDimension == 0 {
		t.Errorf("max workgroup size %d, max dimension %d", m.MaxWorkgroupSize, m.MaxDimension)
	}
	f16f32 := false
	for _, s := range m.Flexible {
		if s.MGranularity == 0 || s.NGranularity == 0 || s.KGranularity == 0 {
			t.Errorf("%s: a zero granularity", s)
		}
		if s.Scope == 2 && (s.WorkgroupInvocations == 0 || s.WorkgroupInvocations > m.MaxWorkgroupSize) {
			t.Errorf("%s: workgroup invocations outside 1..%d", s, m.MaxWorkgroupSize)
		}
		if s.Scope == 2 && s.A == 0 && s.B == 0 && s.C == 1 && s.Result == 1 {
			f16f32 = true
		}
	}
	if !f16f32 {
		t.Errorf("no workgroup-scope f16*f16+f32->f32 entry among %d", len(m.Flexible))
	}

	t.Setenv("VKC_COOPMAT2", "off")
	off := openTest(t, Options{})
	if off.Info.Caps.CooperativeMatrix2 != nil || !strings.Contains(off.CoopMatrix2Note, "VKC_COOPMAT2=off") {
		t.Errorf("VKC_COOPMAT2=off: caps %v, note %q", off.Info.Caps.CooperativeMatrix2, off.CoopMatrix2Note)
	}
	if len(off.Info.Caps.CooperativeMatrix) == 0 {
		t.Errorf("VKC_COOPMAT2=off turned VK_KHR_cooperative_matrix off too")
	}
}

// TestCheckModuleCoop2: a SPIR-V 1.6 module declaring VK_NV_cooperative_matrix2's capabilities
// loads only where the matching feature is enabled (no Vulkan needed).
func TestCheckModuleCoop2(t *testing.T) {
	mod := func(caps ...uint32) []uint32 {
		w := []uint32{0x07230203, 0x00010600, 0, 10, 0, 2<<16 | 17, 1}
		for _, c := range caps {
			w = append(w, 2<<16|17, c)
		}
		return append(w, 3<<16|14, 0, 3, // OpMemoryModel Logical Vulkan
			5<<16|15, 5, 1, 0x6e69616d, 0) // OpEntryPoint GLCompute %1 "main"
	}
	dev := &DeviceInfo{Name: "test device", APIVersion: Version(vk.MakeVersion(1, 3, 0)),
		Caps: Caps{CooperativeMatrix: []CoopMatrixShape{{M: 16, N: 16, K: 16, C: 1, Result: 1, Scope: 3}}, VulkanMemoryModel: true}}
	all := []uint32{5430, 5431, 5432, 5433, 5434, 5439}
	for _, c := range all {
		err := checkModule(mod(6022, c), "main", dev)
		if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), "NV, which test device lacks") {
			t.Errorf("capability %d without VK_NV_cooperative_matrix2: %v", c, err)
		}
	}
	dev.Caps.CooperativeMatrix2 = &CoopMatrix2{WorkgroupScope: true, FlexibleDimensions: true, TensorAddressing: true}
	if err := checkModule(mod(6022, 5433, 5439), "main", dev); err != nil {
		t.Errorf("tensor addressing where it is enabled: %v", err)
	}
	if err := checkModule(mod(6022, 5434), "main", dev); err == nil || !strings.Contains(err.Error(), "CooperativeMatrixBlockLoadsNV") {
		t.Errorf("block loads where only tensor addressing is enabled: %v", err)
	}
	dev.Caps.CooperativeMatrix2 = &CoopMatrix2{Reductions: true, Conversions: true, PerElementOperations: true, TensorAddressing: true, BlockLoads: true}
	if err := checkModule(mod(append([]uint32{6022}, all...)...), "main", dev); err != nil {
		t.Errorf("every feature enabled: %v", err)
	}
}
