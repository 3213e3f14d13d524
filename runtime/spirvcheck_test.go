package runtime

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	vk "github.com/goki/vulkan"

	"github.com/vkc-project/vkc/plan"
)

func words(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// withInstruction inserts ins after the header (capabilities come first in a module).
func withInstruction(w []uint32, ins ...uint32) []uint32 {
	out := append([]uint32(nil), w[:5]...)
	out = append(out, ins...)
	return append(out, w[5:]...)
}

// TestCheckModule mutates a real module (testdata/add.spv, from glslc) in the ways the loader
// must catch before a driver sees them, for a described device (no Vulkan needed).
func TestCheckModule(t *testing.T) {
	add := words(spirv(t, "add"))
	dev := &DeviceInfo{Name: "test device", APIVersion: Version(vk.MakeVersion(1, 1, 0)),
		Caps: Caps{SubgroupOps: SubgroupBasic | SubgroupArithmetic, SubgroupStages: 0x20}}
	if err := checkModule(add, "main", dev); err != nil {
		t.Fatalf("the unchanged module: %v", err)
	}
	mut := func(f func(w []uint32) []uint32) []uint32 { return f(append([]uint32(nil), add...)) }
	for _, tc := range []struct {
		name  string
		w     []uint32
		entry string
		want  string
	}{
		{"short", add[:4], "main", "4 words, shorter than the 5-word header"},
		{"magic", mut(func(w []uint32) []uint32 { w[0] = 0x03022307; return w }), "main", "magic number 0x03022307"},
		{"too new for Vulkan 1.1", mut(func(w []uint32) []uint32 { w[1] = 0x00010600; return w }), "main", "SPIR-V version word 0x00010600: not a version Vulkan 1.1.0 consumes (at most 1.3)"},
		{"id bound zero", mut(func(w []uint32) []uint32 { w[3] = 0; return w }), "main", "id bound 0 is outside"},
		{"id bound huge", mut(func(w []uint32) []uint32 { w[3] = 1 << 30; return w }), "main", "id bound 1073741824 is outside"},
		{"reserved", mut(func(w []uint32) []uint32 { w[4] = 7; return w }), "main", "reserved header word is 7"},
		{"word count past the end", mut(func(w []uint32) []uint32 { return append(w, 50<<16|17) }), "main", "has word count 50, past the module's end"},
		{"word count zero", mut(func(w []uint32) []uint32 { return append(w, 0) }), "main", "has word count 0"},
		{"unknown capability", withInstruction(add, 2<<16|17, 5347), "main", "capability 5347 is not one vkc's code generator declares"},
		{"capability the device lacks", withInstruction(add, 2<<16|17, 6022), "main", "declares capability CooperativeMatrixKHR, which test device lacks"},
		{"subgroup op the device lacks", withInstruction(add, 2<<16|17, 65), "main", "declares capability GroupNonUniformShuffle, which test device lacks"},
		{"no such entry point", add, "nosuch", `no GLCompute entry point "nosuch" (entry points: main)`},
		{"entry point id past the bound", mut(func(w []uint32) []uint32 {
			for i := 5; i < len(w); i += int(w[i] >> 16) {
				if w[i]&0xffff == 15 {
					w[i+2] = w[3] + 5
				}
			}
			return w
		}), "main", "has id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkModule(tc.w, tc.entry, dev)
			if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant ErrBadModule with %q", err, tc.want)
			}
		})
	}
}

// TestLoadRefusesBadModule: Device.Load makes the checks for every module before creating any
// pipeline.
func TestLoadRefusesBadModule(t *testing.T) {
	d := openTest(t, Options{})
	w := withInstruction(words(spirv(t, "copy")), 2<<16|17, 5347)
	p := &plan.Plan{
		CompilerVersion: "hand-written", Model: "copy", Device: d.DeviceFingerprint(),
		Modules: []plan.Module{{Key: "copy", SPIRV: w, Entry: "main",
			Bindings:         []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Write}},
			PushConstantSize: 4, SpecConstants: []plan.SpecConstant{{ID: 0, Value: 64}}, Workgroup: [3]uint32{64, 1, 1}}},
		State:     []plan.StateTensor{{Name: "s", DType: plan.I32, Shape: []int64{4}}},
		StateSize: 16,
		Functions: []plan.Function{{
			Name:   "put",
			Inputs: []plan.Value{{Name: "ids", DType: plan.I32, Shape: []int64{4}, Place: plan.Staging}},
			Dispatches: []plan.Dispatch{{Module: 0,
				Bindings: []plan.Binding{{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput}, Range: 16}},
					{Binding: 1, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Range: 16}}},
				Push: u32(1), Grid: [3]uint32{1, 1, 1}}},
		}},
	}
	_, err := d.Load(p, LoadOptions{})
	if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), "module 0 (copy): SPIR-V module refused: capability 5347") {
		t.Fatalf("got %v", err)
	}
}
