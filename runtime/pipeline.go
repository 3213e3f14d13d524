package runtime

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// Kernel describes a compute shader: SPIR-V, its interface and the specialization constants to
// bake in. It matches what a compiled plan stores per module.
type Kernel struct {
	Name  string // for errors and profiles
	SPIRV []byte // a SPIR-V module (little-endian words)
	Entry string // entry point; "" means "main"
	// Bindings is the number of storage buffers, at descriptor set 0, bindings 0..Bindings-1.
	Bindings int
	// PushConstantSize is the size in bytes of the push-constant block (a multiple of 4).
	PushConstantSize int
	// Spec are the specialization constants. Each value is 4 bytes (bool, int, uint or
	// math.Float32bits of a float).
	Spec []SpecConstant
}

// SpecConstant sets specialization constant ID to the 32-bit Value.
type SpecConstant struct {
	ID    uint32
	Value uint32
}

// Pipeline is a compute pipeline with its layouts. Close it, or let Device.Close do it.
type Pipeline struct {
	d        *Device
	Kernel   Kernel
	pipeline vk.Pipeline
	layout   vk.PipelineLayout
	setl     vk.DescriptorSetLayout
	closed   bool
}

// NewPipeline creates a compute pipeline from k through the device's pipeline cache.
func (d *Device) NewPipeline(k Kernel) (*Pipeline, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	name := k.Name
	if name == "" {
		name = "kernel"
	}
	if len(k.SPIRV) < 20 || len(k.SPIRV)%4 != 0 || binary.LittleEndian.Uint32(k.SPIRV) != 0x07230203 {
		return nil, fmt.Errorf("pipeline %s: not a SPIR-V module (%d bytes)", name, len(k.SPIRV))
	}
	if k.PushConstantSize%4 != 0 || k.PushConstantSize < 0 {
		return nil, fmt.Errorf("pipeline %s: push-constant size %d is not a multiple of 4", name, k.PushConstantSize)
	}
	if uint32(k.PushConstantSize) > d.Info.Caps.MaxPushConstantsSize {
		return nil, fmt.Errorf("pipeline %s: %w", name, limitError("push constants", "maxPushConstantsSize", uint64(k.PushConstantSize), uint64(d.Info.Caps.MaxPushConstantsSize)))
	}
	if k.Bindings > 32 || uint32(k.Bindings) > d.Info.Caps.MaxPerStageStorageBuffer {
		return nil, fmt.Errorf("pipeline %s: %d storage buffers: %w (maxPerStageDescriptorStorageBuffers = %d, and at most 32 here)", name, k.Bindings, ErrLimit, d.Info.Caps.MaxPerStageStorageBuffer)
	}
	if d.push && uint32(k.Bindings) > d.Info.Caps.MaxPushDescriptors {
		return nil, fmt.Errorf("pipeline %s: %d storage buffers: %w (maxPushDescriptors = %d)", name, k.Bindings, ErrLimit, d.Info.Caps.MaxPushDescriptors)
	}
	if err := d.checkCapabilities(k.SPIRV); err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	p := &Pipeline{d: d, Kernel: k}
	p.Kernel.Name = name
	// create's goki calls keep their C copies reachable from the create-info structures until
	// they are freed after the call; the pipeline itself is made through cvk.c (see create).
	if err := p.create(); err != nil {
		p.Close()
		return nil, fmt.Errorf("pipeline %s: %w", name, d.note(err))
	}
	d.track(p)
	return p, nil
}

func (p *Pipeline) create() error {
	d, k := p.d, p.Kernel
	bindings := make([]vk.DescriptorSetLayoutBinding, k.Bindings)
	for i := range bindings {
		bindings[i] = vk.DescriptorSetLayoutBinding{
			Binding:         uint32(i),
			DescriptorType:  vk.DescriptorTypeStorageBuffer,
			DescriptorCount: 1,
			StageFlags:      vk.ShaderStageFlags(vk.ShaderStageComputeBit),
		}
	}
	sci := &vk.DescriptorSetLayoutCreateInfo{
		SType:        vk.StructureTypeDescriptorSetLayoutCreateInfo,
		BindingCount: uint32(len(bindings)),
		PBindings:    bindings,
	}
	if d.push {
		sci.Flags = vk.DescriptorSetLayoutCreateFlags(vk.DescriptorSetLayoutCreatePushDescriptorBit)
	}
	var setl vk.DescriptorSetLayout
	r := vk.CreateDescriptorSetLayout(d.dev, sci, nil, &setl)
	p.setl = setl
	sci.Free()
	if err := check("vkCreateDescriptorSetLayout", r); err != nil {
		return err
	}
	lci := &vk.PipelineLayoutCreateInfo{
		SType:          vk.StructureTypePipelineLayoutCreateInfo,
		SetLayoutCount: 1,
		PSetLayouts:    []vk.DescriptorSetLayout{p.setl},
	}
	if k.PushConstantSize > 0 {
		lci.PushConstantRangeCount = 1
		lci.PPushConstantRanges = []vk.PushConstantRange{{
			StageFlags: vk.ShaderStageFlags(vk.ShaderStageComputeBit),
			Size:       uint32(k.PushConstantSize),
		}}
	}
	var layout vk.PipelineLayout
	r = vk.CreatePipelineLayout(d.dev, lci, nil, &layout)
	p.layout = layout
	lci.Free()
	if err := check("vkCreatePipelineLayout", r); err != nil {
		return err
	}

	// SPIR-V and specialization data go to C memory: the create-info structures that point at
	// them are C memory too, and cgo forbids Go pointers stored there.
	code := C.CBytes(k.SPIRV)
	defer C.free(code)
	var mod vk.ShaderModule
	mci := &vk.ShaderModuleCreateInfo{
		SType:    vk.StructureTypeShaderModuleCreateInfo,
		CodeSize: uint64(len(k.SPIRV)),
		PCode:    unsafe.Slice((*uint32)(code), len(k.SPIRV)/4),
	}
	r = vk.CreateShaderModule(d.dev, mci, nil, &mod)
	mci.Free()
	if err := check("vkCreateShaderModule", r); err != nil {
		return err
	}
	defer vk.DestroyShaderModule(d.dev, mod, nil)

	entry := k.Entry
	if entry == "" {
		entry = "main"
	}
	cEntry := C.CString(entry)
	defer C.free(unsafe.Pointer(cEntry))
	var ids, vals *C.uint32_t
	if n := len(k.Spec); n > 0 {
		mem := C.malloc(C.size_t(8 * n))
		defer C.free(mem)
		words := unsafe.Slice((*uint32)(mem), 2*n)
		for i, s := range k.Spec {
			words[i], words[n+i] = s.ID, s.Value
		}
		ids, vals = (*C.uint32_t)(mem), (*C.uint32_t)(unsafe.Add(mem, 4*n))
	}
	// The pipeline itself is created through cvk.c: goki's vkCreateComputePipelines hands the
	// driver C copies that a finalizer may free during the call (nogc.go), and the call is where
	// a driver compiles the shader, up to a second on NVIDIA's; the collector runs meanwhile.
	var out C.vkc_handle
	r = vk.Result(C.vkc_create_compute_pipeline(d.c, handle(unsafe.Pointer(d.pcache)), handle(unsafe.Pointer(mod)), cEntry,
		handle(unsafe.Pointer(p.layout)), C.uint32_t(len(k.Spec)), ids, vals, &out))
	if err := check("vkCreateComputePipelines", r); err != nil {
		return err
	}
	p.pipeline = vk.Pipeline(unsafe.Pointer(out))
	return nil
}

// Close destroys the pipeline. Programs using it must be closed first.
func (p *Pipeline) Close() {
	if p == nil || p.closed || p.d.closed.Load() {
		return
	}
	p.closed = true
	p.d.untrack(p)
	p.destroy()
}

func (p *Pipeline) destroy() {
	d := p.d
	if p.pipeline != nil {
		vk.DestroyPipeline(d.dev, p.pipeline, nil)
	}
	if p.layout != nil {
		vk.DestroyPipelineLayout(d.dev, p.layout, nil)
	}
	if p.setl != nil {
		vk.DestroyDescriptorSetLayout(d.dev, p.setl, nil)
	}
}

// capabilityFeatures maps the SPIR-V capabilities whose device features are optional to a check of
// the opened device and the feature's name. Capabilities not listed are core or not used by vkc
// (a driver rejects those itself).
var capabilityFeatures = map[uint32]struct {
	name string
	has  func(d *Device) bool
}{
	9:    {"shaderFloat16", func(d *Device) bool { return d.Info.Caps.ShaderFloat16 }},
	4433: {"storageBuffer16BitAccess", func(d *Device) bool { return d.Info.Caps.StorageBuffer16BitAccess }},
	4434: {"uniformAndStorageBuffer16BitAccess", func(d *Device) bool { return d.Info.Caps.UniformAndStorageBuffer16BitAccess }},
	4435: {"storagePushConstant16", func(d *Device) bool { return d.Info.Caps.StoragePushConstant16 }},
	5345: {"vulkanMemoryModel", func(d *Device) bool { return d.Info.Caps.VulkanMemoryModel }},
	6022: {"cooperativeMatrix (VK_KHR_cooperative_matrix)", func(d *Device) bool { return len(d.Info.Caps.CooperativeMatrix) > 0 }},
	5116: {"shaderBFloat16Type (VK_KHR_shader_bfloat16)", func(d *Device) bool { return d.Info.Caps.BFloat16 }},
	5118: {"shaderBFloat16CooperativeMatrix (VK_KHR_shader_bfloat16)", func(d *Device) bool { return d.Info.Caps.BFloat16CooperativeMatrix }},
	5430: {"cooperativeMatrixReductions (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).Reductions }},
	5431: {"cooperativeMatrixConversions (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).Conversions }},
	5432: {"cooperativeMatrixPerElementOperations (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).PerElementOperations }},
	5433: {"cooperativeMatrixTensorAddressing (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).TensorAddressing }},
	5434: {"cooperativeMatrixBlockLoads (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).BlockLoads }},
	5439: {"cooperativeMatrixTensorAddressing (VK_NV_cooperative_matrix2)", func(d *Device) bool { return coop2(&d.Info.Caps).TensorAddressing }},
}

// capabilityNames names the capabilities of capabilityFeatures for messages.
var capabilityNames = map[uint32]string{9: "Float16", 4433: "StorageBuffer16BitAccess", 4434: "UniformAndStorageBuffer16BitAccess",
	4435: "StoragePushConstant16", 5345: "VulkanMemoryModel", 6022: "CooperativeMatrixKHR", 5116: "BFloat16TypeKHR",
	5118: "BFloat16CooperativeMatrixKHR", 5430: "CooperativeMatrixReductionsNV", 5431: "CooperativeMatrixConversionsNV",
	5432: "CooperativeMatrixPerElementOperationsNV", 5433: "CooperativeMatrixTensorAddressingNV", 5434: "CooperativeMatrixBlockLoadsNV",
	5439: "TensorAddressingNV"}

// checkCapabilities reads the module's OpCapability instructions (which come first, after the
// header) and refuses one whose device feature is missing or was not enabled, so that a plan
// compiled for another device fails with the feature's name instead of inside the driver.
func (d *Device) checkCapabilities(spirv []byte) error {
	for i := 20; i+4 <= len(spirv); {
		w := binary.LittleEndian.Uint32(spirv[i:])
		n, op := int(w>>16), w&0xffff
		if op != 17 || n != 2 || i+8 > len(spirv) { // OpCapability
			return nil
		}
		c := binary.LittleEndian.Uint32(spirv[i+4:])
		if f, ok := capabilityFeatures[c]; ok && !f.has(d) {
			return fmt.Errorf("the module declares capability %s, but %s has no %s enabled: %w", capabilityNames[c], d.Info.Name, f.name, ErrUnsupported)
		}
		i += 8
	}
	return nil
}
