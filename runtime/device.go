package runtime

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// Options configure Open and Devices. The zero value is the production setting.
type Options struct {
	// Device picks the device by index (as listed by Devices) or by a case-insensitive substring
	// of its name. Empty: $VKC_DEVICE, else the best ranked device.
	Device string
	// Validation enables VK_LAYER_KHRONOS_validation and a debug-utils messenger; messages are
	// collected (Device.TakeMessages) and passed to OnMessage. Open fails if the layer is missing.
	Validation bool
	// OnMessage, when set, receives each validation message as it arrives (on a driver thread).
	OnMessage func(Message)
	// CacheDir holds the persisted pipeline cache. Empty: os.UserCacheDir()/vkc. "off": none.
	CacheDir string
	// NoPushDescriptors uses descriptor sets even where VK_KHR_push_descriptor exists.
	NoPushDescriptors bool
	// NoZeroCopy uses staging copies even where device-local memory is host-visible.
	NoZeroCopy bool
	// StagingBytes is the size of the staging buffer that uploads and downloads go through
	// without zero-copy (0: 64 MiB; at least 256). For tests.
	StagingBytes int
	// BlockSize is the size of the device-memory blocks buffers are sub-allocated from.
	// 0: 256 MiB, or less where maxMemoryAllocationSize or the heap is smaller.
	BlockSize int64
	// SubmitTimeout bounds one wait for the GPU. 0: 10 s, or 10 minutes on a CPU implementation
	// (lavapipe). A wait past it returns ErrTimeout; the work still runs, and closing what it
	// uses waits for it to finish.
	SubmitTimeout time.Duration
	// SpinWait polls for completion this long before blocking in the driver: a blocked thread
	// wakes tens of microseconds late, which matters for short programs (decode steps). It burns
	// a core while it polls. 0: block at once.
	SpinWait time.Duration

	// envHeld: the caller holds envMu for writing (warmHelpers' helper devices).
	envHeld bool
}

// DeviceType is the kind of physical device, in ranking order (best first).
type DeviceType int

const (
	Discrete DeviceType = iota
	Integrated
	Virtual
	CPU
	OtherType
)

func (t DeviceType) String() string {
	return [...]string{"discrete", "integrated", "virtual", "cpu", "other"}[t]
}

func deviceType(t vk.PhysicalDeviceType) DeviceType {
	switch t {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return Discrete
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return Integrated
	case vk.PhysicalDeviceTypeVirtualGpu:
		return Virtual
	case vk.PhysicalDeviceTypeCpu:
		return CPU
	}
	return OtherType
}

// Version is a Vulkan API version.
type Version uint32

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", uint32(v)>>22&0x7f, uint32(v)>>12&0x3ff, uint32(v)&0xfff)
}

func (v Version) atLeast(major, minor uint32) bool {
	return uint32(v)>>22&0x7f > major || (uint32(v)>>22&0x7f == major && uint32(v)>>12&0x3ff >= minor)
}

// Fingerprint identifies a device and driver for plan and tuning-database keys: a plan or a
// tuning result measured under one fingerprint is not trusted under another.
type Fingerprint struct {
	VendorID, DeviceID, DriverVersion uint32
	PipelineCacheUUID                 [16]byte
}

// String is the stable text form: vendor:device:driver:uuid in lower-case hex, e.g.
// "10de:2335:91c00000:0123456789abcdef0123456789abcdef".
func (f Fingerprint) String() string {
	return fmt.Sprintf("%04x:%04x:%08x:%x", f.VendorID, f.DeviceID, f.DriverVersion, f.PipelineCacheUUID[:])
}

// Hex is the String form without separators, usable as a file name.
func (f Fingerprint) Hex() string { return strings.ReplaceAll(f.String(), ":", "") }

// ParseFingerprint parses the String form.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	parts := strings.Split(s, ":")
	if len(parts) != 4 || len(parts[3]) != 32 {
		return f, fmt.Errorf("fingerprint %q: want vendor:device:driver:uuid (hex)", s)
	}
	for i, p := range []*uint32{&f.VendorID, &f.DeviceID, &f.DriverVersion} {
		v, err := strconv.ParseUint(parts[i], 16, 32)
		if err != nil {
			return f, fmt.Errorf("fingerprint %q: field %d: %v", s, i, err)
		}
		*p = uint32(v)
	}
	for i := 0; i < 16; i++ {
		v, err := strconv.ParseUint(parts[3][2*i:2*i+2], 16, 8)
		if err != nil {
			return f, fmt.Errorf("fingerprint %q: uuid: %v", s, err)
		}
		f.PipelineCacheUUID[i] = byte(v)
	}
	return f, nil
}

// DeviceInfo describes one physical device: identity, capabilities and memory.
type DeviceInfo struct {
	Index         int // position in the loader's enumeration; what VKC_DEVICE=<n> selects
	Name          string
	Type          DeviceType
	APIVersion    Version
	DriverVersion string // decoded the vendor's way (NVIDIA packs 10.8.8.6 bits)
	DriverName    string // VkPhysicalDeviceDriverProperties, where available
	DriverInfo    string
	Fingerprint   Fingerprint
	Caps          Caps
	Memory        MemoryInfo
	Extensions    []string // device extensions, sorted
	// Usable is false when the device cannot run vkc (Vulkan < 1.1, no compute queue); Reason says why.
	Usable bool
	Reason string

	queueFamily uint32
	pd          vk.PhysicalDevice
	wants       C.vkc_wants
	ccaps       *C.vkc_caps
}

// Caps are the capabilities kernels and the tuner depend on.
type Caps struct {
	SubgroupSize                     uint32
	MinSubgroupSize, MaxSubgroupSize uint32 // from VK_EXT_subgroup_size_control (1.3); 0 if absent
	SubgroupStages                   uint32 // VkShaderStageFlags
	SubgroupOps                      SubgroupOps
	SubgroupSizeControl              bool
	ComputeFullSubgroups             bool

	ShaderFloat16, ShaderInt8, ShaderInt16, ShaderInt64, ShaderFloat64 bool
	StorageBuffer16BitAccess, UniformAndStorageBuffer16BitAccess       bool
	StoragePushConstant16                                              bool
	StorageBuffer8BitAccess                                            bool
	IntegerDotProduct                                                  bool
	VulkanMemoryModel                                                  bool
	// BFloat16 and BFloat16CooperativeMatrix are VK_KHR_shader_bfloat16's shaderBFloat16Type and
	// shaderBFloat16CooperativeMatrix.
	BFloat16, BFloat16CooperativeMatrix bool

	PushDescriptors    bool
	MaxPushDescriptors uint32

	// CooperativeMatrix lists VK_KHR_cooperative_matrix shapes (empty when unsupported).
	CooperativeMatrix []CoopMatrixShape
	// CooperativeMatrix2 is VK_NV_cooperative_matrix2 where the device has it and it is enabled (nil otherwise).
	CooperativeMatrix2 *CoopMatrix2

	Timestamps         bool    // compute queue has timestampValidBits > 0
	TimestampPeriod    float64 // nanoseconds per tick
	TimestampValidBits uint32

	MaxSharedMemory          uint32 // maxComputeSharedMemorySize, bytes
	MaxWorkgroupSize         [3]uint32
	MaxWorkgroupInvocations  uint32
	MaxWorkgroupCount        [3]uint32
	MaxPushConstantsSize     uint32
	MaxStorageBufferRange    uint32
	MaxMemoryAllocationSize  uint64
	MinStorageBufferOffset   uint64 // minStorageBufferOffsetAlignment
	MaxBoundDescriptorSets   uint32
	MaxPerStageStorageBuffer uint32

	MemoryBudget bool // VK_EXT_memory_budget: MemoryInfo heaps carry Budget and Usage
}

// SubgroupOps is VkSubgroupFeatureFlags.
type SubgroupOps uint32

func (o SubgroupOps) String() string {
	names := []string{"basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad"}
	var s []string
	for i, n := range names {
		if o&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if o&0x100 != 0 {
		s = append(s, "partitioned_nv")
	}
	return strings.Join(s, ",")
}

// Has reports whether every operation in want is supported.
func (o SubgroupOps) Has(want SubgroupOps) bool { return o&want == want }

// Subgroup operation bits.
const (
	SubgroupBasic      SubgroupOps = 1
	SubgroupVote       SubgroupOps = 2
	SubgroupArithmetic SubgroupOps = 4
	SubgroupBallot     SubgroupOps = 8
	SubgroupShuffle    SubgroupOps = 16
)

// CoopMatrixShape is one VkCooperativeMatrixPropertiesKHR entry.
type CoopMatrixShape struct {
	M, N, K                uint32
	A, B, C, Result        ComponentType
	SaturatingAccumulation bool
	Scope                  uint32 // 3: subgroup
}

func (s CoopMatrixShape) String() string {
	sat := ""
	if s.SaturatingAccumulation {
		sat = " sat"
	}
	return fmt.Sprintf("%dx%dx%d %s*%s+%s->%s%s", s.M, s.N, s.K, s.A, s.B, s.C, s.Result, sat)
}

// CoopMatrix2 describes VK_NV_cooperative_matrix2: its features (every one the device reports is
// enabled), VkPhysicalDeviceCooperativeMatrix2PropertiesNV and the flexible-dimensions list.
type CoopMatrix2 struct {
	WorkgroupScope, FlexibleDimensions, Reductions, Conversions, PerElementOperations, TensorAddressing, BlockLoads bool

	MaxWorkgroupSize uint32 // cooperativeMatrixWorkgroupScopeMaxWorkgroupSize
	MaxDimension     uint32 // cooperativeMatrixFlexibleDimensionsMaxDimension
	ReservedShared   uint32 // cooperativeMatrixWorkgroupScopeReservedSharedMemory, bytes

	// Flexible lists VkCooperativeMatrixFlexibleDimensionsPropertiesNV entries (empty when the
	// query failed or the device has no flexible dimensions).
	Flexible []CoopFlexibleShape
}

func (c *CoopMatrix2) String() string {
	var f []string
	for _, x := range []struct {
		on   bool
		name string
	}{{c.WorkgroupScope, "workgroup-scope"}, {c.FlexibleDimensions, "flexible-dimensions"}, {c.Reductions, "reductions"},
		{c.Conversions, "conversions"}, {c.PerElementOperations, "per-element"}, {c.TensorAddressing, "tensor-addressing"},
		{c.BlockLoads, "block-loads"}} {
		if x.on {
			f = append(f, x.name)
		}
	}
	return fmt.Sprintf("%s; max workgroup %d, max dimension %d, reserved shared %d B",
		strings.Join(f, ","), c.MaxWorkgroupSize, c.MaxDimension, c.ReservedShared)
}

// CoopFlexibleShape is one VkCooperativeMatrixFlexibleDimensionsPropertiesNV entry: matrices whose
// M, N and K are multiples of the granularities (up to CoopMatrix2.MaxDimension).
type CoopFlexibleShape struct {
	MGranularity, NGranularity, KGranularity uint32
	A, B, C, Result                          ComponentType
	Saturating                               bool
	Scope                                    uint32 // VkScopeKHR: 2 workgroup, 3 subgroup
	WorkgroupInvocations                     uint32 // the workgroup size a workgroup-scope entry is for
}

func (s CoopFlexibleShape) String() string {
	sat, scope := "", "subgroup"
	if s.Saturating {
		sat = " sat"
	}
	if s.Scope == 2 {
		scope = fmt.Sprintf("workgroup of %d", s.WorkgroupInvocations)
	} else if s.Scope != 3 {
		scope = fmt.Sprintf("scope %d", s.Scope)
	}
	return fmt.Sprintf("%dx%dx%d granules %s*%s+%s->%s%s (%s)", s.MGranularity, s.NGranularity, s.KGranularity,
		s.A, s.B, s.C, s.Result, sat, scope)
}

// ComponentType is VkComponentTypeKHR.
type ComponentType uint32

func (c ComponentType) String() string {
	switch c {
	case 0:
		return "f16"
	case 1:
		return "f32"
	case 2:
		return "f64"
	case 3:
		return "s8"
	case 4:
		return "s16"
	case 5:
		return "s32"
	case 6:
		return "s64"
	case 7:
		return "u8"
	case 8:
		return "u16"
	case 9:
		return "u32"
	case 10:
		return "u64"
	case 1000141000:
		return "bf16"
	case 1000491000:
		return "s8packed"
	case 1000491001:
		return "u8packed"
	case 1000491002:
		return "e4m3"
	case 1000491003:
		return "e5m2"
	}
	return fmt.Sprintf("type%d", uint32(c))
}

// MemoryInfo lists memory heaps and types.
type MemoryInfo struct {
	Heaps []MemoryHeap
	Types []MemoryType
}

// MemoryHeap is one VkMemoryHeap with, where VK_EXT_memory_budget exists, its budget and usage.
type MemoryHeap struct {
	Size          uint64
	DeviceLocal   bool
	Budget, Usage uint64 // 0 when unknown
}

// MemoryType is one VkMemoryType.
type MemoryType struct {
	Heap                                               int
	DeviceLocal, HostVisible, HostCoherent, HostCached bool
}

// instance is a VkInstance with its optional validation messenger.
type instance struct {
	inst      vk.Instance
	messenger C.vkc_handle
	sink      *messageSink
	devices   []*DeviceInfo
	// layerVersion is the validation layer's header version (0: no validation).
	layerVersion Version
}

var (
	sinks   sync.Map // uint64 -> *messageSink
	sinkTag atomic.Uint64
)

func cstrings(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + "\x00"
	}
	return out
}

// instanceLayers maps each installed layer to its spec (header) version.
func instanceLayers() map[string]Version {
	var n uint32
	vk.EnumerateInstanceLayerProperties(&n, nil)
	props := make([]vk.LayerProperties, n)
	vk.EnumerateInstanceLayerProperties(&n, props)
	m := map[string]Version{}
	for _, p := range props[:n] {
		p.Deref()
		m[vk.ToString(p.LayerName[:])] = Version(p.SpecVersion)
	}
	return m
}

func instanceExtensions() map[string]bool {
	var n uint32
	vk.EnumerateInstanceExtensionProperties("", &n, nil)
	props := make([]vk.ExtensionProperties, n)
	vk.EnumerateInstanceExtensionProperties("", &n, props)
	m := map[string]bool{}
	for _, p := range props[:n] {
		p.Deref()
		m[vk.ToString(p.ExtensionName[:])] = true
	}
	return m
}

const validationLayer = "VK_LAYER_KHRONOS_validation"

// envMu orders the making of instances after a change of the environment: an instance is made
// under its read lock, because the driver reads the environment as it enumerates its devices
// (llvmpipe: LP_NUM_THREADS) and C's getenv is not safe beside a setenv; warmHelpers holds it
// for writing while it sets LP_NUM_THREADS and opens its helpers (helperThreads).
var envMu sync.RWMutex

func newInstance(opts Options) (*instance, error) {
	if !opts.envHeld {
		envMu.RLock()
		defer envMu.RUnlock()
	}
	if err := load(); err != nil {
		return nil, err
	}
	in := &instance{}
	var layers, exts []string
	var pnext unsafe.Pointer
	if opts.Validation {
		lv, ok := instanceLayers()[validationLayer]
		if !ok {
			return nil, fmt.Errorf("validation requested but %s is not installed (Debian: vulkan-validationlayers)", validationLayer)
		}
		if !instanceExtensions()["VK_EXT_debug_utils"] {
			return nil, fmt.Errorf("validation requested but VK_EXT_debug_utils is not available")
		}
		in.layerVersion = lv
		layers = append(layers, validationLayer)
		exts = append(exts, "VK_EXT_debug_utils")
		in.sink = &messageSink{tag: sinkTag.Add(1), on: opts.OnMessage}
		sinks.Store(in.sink.tag, in.sink)
		pnext = C.vkc_messenger_info(C.uint64_t(in.sink.tag))
		defer C.free(pnext)
	}
	app := &vk.ApplicationInfo{
		SType:            vk.StructureTypeApplicationInfo,
		PApplicationName: "vkc\x00",
		PEngineName:      "vkc\x00",
		ApiVersion:       vk.MakeVersion(1, 3, 0),
	}
	ci := &vk.InstanceCreateInfo{
		SType:                   vk.StructureTypeInstanceCreateInfo,
		PNext:                   pnext,
		PApplicationInfo:        app,
		EnabledLayerCount:       uint32(len(layers)),
		PpEnabledLayerNames:     cstrings(layers),
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: cstrings(exts),
	}
	var inst vk.Instance // a local: cgo rejects pointers into structs holding Go pointers
	r := vk.CreateInstance(ci, nil, &inst)
	in.inst = inst
	ci.Free()
	app.Free()
	if r != vk.Success {
		in.dropSink()
		err := check("vkCreateInstance", r)
		if r == vk.ErrorIncompatibleDriver {
			// The loader works but found no driver (no ICD manifest, or none loads).
			return nil, fmt.Errorf("%w: the Vulkan loader found no driver: %v", ErrNoDevice, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrNoVulkan, err)
	}
	loader.Lock() // goki/vulkan keeps its function pointers in C globals
	err := vk.InitInstance(in.inst)
	loader.Unlock()
	if err != nil {
		vk.DestroyInstance(in.inst, nil)
		in.dropSink()
		return nil, fmt.Errorf("%w: %v", ErrNoVulkan, err)
	}
	if in.sink != nil {
		var m C.vkc_handle
		r := C.vkc_create_messenger(handle(unsafe.Pointer(in.inst)), C.uint64_t(in.sink.tag), &m)
		in.messenger = m
		if r != 0 {
			in.destroy()
			return nil, check("vkCreateDebugUtilsMessengerEXT", vk.Result(r))
		}
	}
	if err := in.enumerate(); err != nil {
		in.destroy()
		return nil, err
	}
	return in, nil
}

func (in *instance) dropSink() {
	if in.sink != nil {
		sinks.Delete(in.sink.tag)
	}
}

func (in *instance) destroy() {
	for _, d := range in.devices {
		if d.ccaps != nil {
			C.free(unsafe.Pointer(d.ccaps))
			d.ccaps = nil
		}
	}
	if in.messenger != nil {
		C.vkc_destroy_messenger(handle(unsafe.Pointer(in.inst)), in.messenger)
		in.messenger = nil
	}
	vk.DestroyInstance(in.inst, nil)
	// Messages during vkDestroyInstance arrive through the instance-creation messenger, so the
	// sink is unregistered only now; TakeMessages still reads it (tags are never reused).
	in.dropSink()
}

func (in *instance) enumerate() error {
	var n uint32
	if err := check("vkEnumeratePhysicalDevices", vk.EnumeratePhysicalDevices(in.inst, &n, nil)); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	pds := make([]vk.PhysicalDevice, n)
	if n > 0 {
		if err := check("vkEnumeratePhysicalDevices", vk.EnumeratePhysicalDevices(in.inst, &n, pds)); err != nil && vk.Result(err.(*VkError).Result) != vk.Incomplete {
			return fmt.Errorf("%w: %v", ErrNoDevice, err)
		}
	}
	for i, pd := range pds[:n] {
		in.devices = append(in.devices, in.describe(i, pd))
	}
	return nil
}

func deviceExtensions(pd vk.PhysicalDevice) []string {
	var n uint32
	vk.EnumerateDeviceExtensionProperties(pd, "", &n, nil)
	props := make([]vk.ExtensionProperties, n)
	vk.EnumerateDeviceExtensionProperties(pd, "", &n, props)
	var names []string
	for _, p := range props[:n] {
		p.Deref()
		names = append(names, vk.ToString(p.ExtensionName[:]))
	}
	sort.Strings(names)
	return names
}

// coop2Caps reads VK_NV_cooperative_matrix2 from cc: nil when the device has no cooperative
// matrices or reports none of the extension's features.
func coop2Caps(cc *C.vkc_caps) *CoopMatrix2 {
	f := cc.coop2_features
	if cc.coop_matrix == 0 || f == [7]C.uint32_t{} {
		return nil
	}
	m := &CoopMatrix2{
		WorkgroupScope: f[0] != 0, FlexibleDimensions: f[1] != 0, Reductions: f[2] != 0, Conversions: f[3] != 0,
		PerElementOperations: f[4] != 0, TensorAddressing: f[5] != 0, BlockLoads: f[6] != 0,
		MaxWorkgroupSize: uint32(cc.coop2_max_workgroup_size),
		MaxDimension:     uint32(cc.coop2_max_dimension),
		ReservedShared:   uint32(cc.coop2_reserved_shared),
	}
	for i := 0; i < int(cc.n_coop2) && i < C.VKC_MAX_COOP; i++ {
		s := cc.coop2[i]
		m.Flexible = append(m.Flexible, CoopFlexibleShape{
			MGranularity: uint32(s.mgran), NGranularity: uint32(s.ngran), KGranularity: uint32(s.kgran),
			A: ComponentType(s.a), B: ComponentType(s.b), C: ComponentType(s.c), Result: ComponentType(s.result),
			Saturating: s.saturating != 0, Scope: uint32(s.scope), WorkgroupInvocations: uint32(s.workgroup_invocations),
		})
	}
	return m
}

func b2u(b bool) C.uint32_t {
	if b {
		return 1
	}
	return 0
}

func (in *instance) describe(index int, pd vk.PhysicalDevice) *DeviceInfo {
	var props vk.PhysicalDeviceProperties
	vk.GetPhysicalDeviceProperties(pd, &props)
	props.Deref()
	props.Limits.Deref()
	lim := props.Limits
	d := &DeviceInfo{
		Index:      index,
		Name:       vk.ToString(props.DeviceName[:]),
		Type:       deviceType(props.DeviceType),
		APIVersion: Version(props.ApiVersion),
		Fingerprint: Fingerprint{
			VendorID:          props.VendorID,
			DeviceID:          props.DeviceID,
			DriverVersion:     props.DriverVersion,
			PipelineCacheUUID: props.PipelineCacheUUID,
		},
		Extensions: deviceExtensions(pd),
		pd:         pd,
	}
	d.DriverVersion = driverVersionString(props.VendorID, props.DriverVersion)
	has := map[string]bool{}
	for _, e := range d.Extensions {
		has[e] = true
	}
	v := d.APIVersion
	w := C.vkc_wants{
		want_16bit:  b2u(v.atLeast(1, 1) || has["VK_KHR_16bit_storage"]),
		want_f16i8:  b2u(v.atLeast(1, 2) || has["VK_KHR_shader_float16_int8"]),
		want_8bit:   b2u(v.atLeast(1, 2) || has["VK_KHR_8bit_storage"]),
		want_intdot: b2u(v.atLeast(1, 3) || has["VK_KHR_shader_integer_dot_product"]),
		want_push:   b2u(has["VK_KHR_push_descriptor"]),
		want_budget: b2u(has["VK_EXT_memory_budget"]),
		want_coop:   b2u(has["VK_KHR_cooperative_matrix"]),
		want_driver: b2u(v.atLeast(1, 2) || has["VK_KHR_driver_properties"]),
		want_sgsc:   b2u(v.atLeast(1, 3)),
		want_vmm:    b2u(v.atLeast(1, 2) || has["VK_KHR_vulkan_memory_model"]),
		want_bf16:   b2u(has["VK_KHR_shader_bfloat16"]),
		want_coop2:  b2u(has["VK_KHR_cooperative_matrix"] && has["VK_NV_cooperative_matrix2"]),
	}
	d.wants = w
	if !v.atLeast(1, 1) {
		d.Reason = "Vulkan " + v.String() + " < 1.1"
		return d
	}
	cc := (*C.vkc_caps)(C.calloc(1, C.size_t(unsafe.Sizeof(C.vkc_caps{}))))
	C.vkc_query_caps(handle(unsafe.Pointer(in.inst)), handle(unsafe.Pointer(pd)), &w, cc)
	d.ccaps = cc
	c := &d.Caps
	c.CooperativeMatrix2 = coop2Caps(cc)
	if c.CooperativeMatrix2 == nil {
		// Nothing to enable: the feature chain then leaves the structure out and Open the
		// extension (wants.want_coop2 says whether both are in).
		d.wants.want_coop2 = 0
	}
	d.DriverName = C.GoString(&cc.driver_name[0])
	d.DriverInfo = C.GoString(&cc.driver_info[0])

	c.SubgroupSize = uint32(cc.subgroup_size)
	c.MinSubgroupSize = uint32(cc.min_subgroup_size)
	c.MaxSubgroupSize = uint32(cc.max_subgroup_size)
	c.SubgroupStages = uint32(cc.subgroup_stages)
	c.SubgroupOps = SubgroupOps(cc.subgroup_ops)
	c.SubgroupSizeControl = cc.subgroup_size_control != 0
	c.ComputeFullSubgroups = cc.compute_full_subgroups != 0
	c.ShaderFloat64 = cc.core_features[39] != 0
	c.ShaderInt64 = cc.core_features[40] != 0
	c.ShaderInt16 = cc.core_features[41] != 0
	c.ShaderFloat16 = cc.shader_float16 != 0
	c.ShaderInt8 = cc.shader_int8 != 0
	c.StorageBuffer16BitAccess = cc.storage_buffer16 != 0
	c.UniformAndStorageBuffer16BitAccess = cc.uniform_and_storage_buffer16 != 0
	c.StoragePushConstant16 = cc.storage_push_constant16 != 0
	c.StorageBuffer8BitAccess = cc.storage_buffer8 != 0
	c.IntegerDotProduct = cc.integer_dot != 0
	c.VulkanMemoryModel = cc.vulkan_memory_model != 0
	c.BFloat16 = cc.bf16_type != 0
	c.BFloat16CooperativeMatrix = cc.bf16_coop_matrix != 0 && cc.coop_matrix != 0
	c.PushDescriptors = w.want_push != 0 && cc.max_push_descriptors > 0
	c.MaxPushDescriptors = uint32(cc.max_push_descriptors)
	for i := 0; i < int(cc.n_coop); i++ {
		s := cc.coop[i]
		c.CooperativeMatrix = append(c.CooperativeMatrix, CoopMatrixShape{
			M: uint32(s.m), N: uint32(s.n), K: uint32(s.k),
			A: ComponentType(s.a), B: ComponentType(s.b), C: ComponentType(s.c), Result: ComponentType(s.result),
			SaturatingAccumulation: s.saturating != 0, Scope: uint32(s.scope),
		})
	}
	c.TimestampPeriod = float64(lim.TimestampPeriod)
	c.MaxSharedMemory = lim.MaxComputeSharedMemorySize
	c.MaxWorkgroupSize = lim.MaxComputeWorkGroupSize
	c.MaxWorkgroupInvocations = lim.MaxComputeWorkGroupInvocations
	c.MaxWorkgroupCount = lim.MaxComputeWorkGroupCount
	c.MaxPushConstantsSize = lim.MaxPushConstantsSize
	c.MaxStorageBufferRange = lim.MaxStorageBufferRange
	c.MaxMemoryAllocationSize = uint64(cc.max_memory_allocation_size)
	c.MinStorageBufferOffset = uint64(lim.MinStorageBufferOffsetAlignment)
	c.MaxBoundDescriptorSets = lim.MaxBoundDescriptorSets
	c.MaxPerStageStorageBuffer = lim.MaxPerStageDescriptorStorageBuffers
	c.MemoryBudget = w.want_budget != 0

	var mp vk.PhysicalDeviceMemoryProperties
	vk.GetPhysicalDeviceMemoryProperties(pd, &mp)
	mp.Deref()
	for i := 0; i < int(mp.MemoryHeapCount); i++ {
		h := mp.MemoryHeaps[i]
		h.Deref()
		mh := MemoryHeap{Size: uint64(h.Size), DeviceLocal: h.Flags&vk.MemoryHeapFlags(vk.MemoryHeapDeviceLocalBit) != 0}
		if c.MemoryBudget && i < C.VKC_MAX_HEAPS {
			mh.Budget, mh.Usage = uint64(cc.heap_budget[i]), uint64(cc.heap_usage[i])
		}
		d.Memory.Heaps = append(d.Memory.Heaps, mh)
	}
	for i := 0; i < int(mp.MemoryTypeCount); i++ {
		t := mp.MemoryTypes[i]
		t.Deref()
		f := t.PropertyFlags
		d.Memory.Types = append(d.Memory.Types, MemoryType{
			Heap:         int(t.HeapIndex),
			DeviceLocal:  f&vk.MemoryPropertyFlags(vk.MemoryPropertyDeviceLocalBit) != 0,
			HostVisible:  f&vk.MemoryPropertyFlags(vk.MemoryPropertyHostVisibleBit) != 0,
			HostCoherent: f&vk.MemoryPropertyFlags(vk.MemoryPropertyHostCoherentBit) != 0,
			HostCached:   f&vk.MemoryPropertyFlags(vk.MemoryPropertyHostCachedBit) != 0,
		})
	}

	var nq uint32
	vk.GetPhysicalDeviceQueueFamilyProperties(pd, &nq, nil)
	qs := make([]vk.QueueFamilyProperties, nq)
	vk.GetPhysicalDeviceQueueFamilyProperties(pd, &nq, qs)
	best := -1
	bestScore := -1
	for i := range qs[:nq] {
		qs[i].Deref()
		f := qs[i].QueueFlags
		if f&vk.QueueFlags(vk.QueueComputeBit) == 0 {
			continue
		}
		// Prefer timestamps, then the main (graphics+compute) family: dedicated compute families
		// have no advantage for a single in-order stream and sometimes lower priority.
		score := 0
		if qs[i].TimestampValidBits > 0 {
			score += 2
		}
		if f&vk.QueueFlags(vk.QueueGraphicsBit) != 0 {
			score++
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		d.Reason = "no compute queue"
		return d
	}
	d.queueFamily = uint32(best)
	c.TimestampValidBits = qs[best].TimestampValidBits
	c.Timestamps = c.TimestampValidBits > 0 && c.TimestampPeriod > 0
	d.Usable = true
	return d
}

func driverVersionString(vendor, v uint32) string {
	switch vendor {
	case 0x10de: // NVIDIA: 10.8.8.6
		return fmt.Sprintf("%d.%d.%d.%d", v>>22, v>>14&0xff, v>>6&0xff, v&0x3f)
	case 0x8086: // Intel on Windows uses 18.14; Mesa uses the standard packing
		return Version(v).String()
	}
	return Version(v).String()
}

// DeviceLocalBytes is the size of the largest device-local heap.
func (d *DeviceInfo) DeviceLocalBytes() uint64 {
	var m uint64
	for _, h := range d.Memory.Heaps {
		if h.DeviceLocal && h.Size > m {
			m = h.Size
		}
	}
	return m
}

// rank orders usable devices: discrete > integrated > virtual > CPU, then the larger
// device-local heap, then enumeration order.
func rank(devs []*DeviceInfo) []*DeviceInfo {
	var out []*DeviceInfo
	for _, d := range devs {
		if d.Usable {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.DeviceLocalBytes() > b.DeviceLocalBytes()
	})
	return out
}

// choose applies the selector (index or name substring; empty: $VKC_DEVICE, then the ranking).
func choose(devs []*DeviceInfo, sel string) (*DeviceInfo, error) {
	from := "device selector"
	if sel == "" {
		sel, from = os.Getenv("VKC_DEVICE"), "VKC_DEVICE"
	}
	ranked := rank(devs)
	if sel == "" {
		if len(ranked) == 0 {
			if len(devs) > 0 {
				return nil, fmt.Errorf("%w: %d device(s), none usable: %s", ErrNoDevice, len(devs), devs[0].Reason)
			}
			return nil, ErrNoDevice
		}
		return ranked[0], nil
	}
	nm := &NoMatchError{Selector: sel, From: from}
	for _, d := range devs {
		nm.Devices = append(nm.Devices, fmt.Sprintf("%d: %s (%s)", d.Index, d.Name, d.Type))
	}
	if i, err := strconv.Atoi(sel); err == nil {
		for _, d := range devs {
			if d.Index == i {
				if !d.Usable {
					return nil, fmt.Errorf("%w: device %d (%s) is not usable: %s", ErrNoDevice, i, d.Name, d.Reason)
				}
				return d, nil
			}
		}
		nm.Index = true
		return nil, nm
	}
	for _, d := range ranked {
		if strings.Contains(strings.ToLower(d.Name), strings.ToLower(sel)) {
			return d, nil
		}
	}
	return nil, nm
}

// NoMatchError says that a device selector (Options.Device, or VKC_DEVICE) matches none of the
// devices there are, and lists them. It wraps ErrNoDevice, but does not repeat its advice to
// install a driver: there are devices, the selector is wrong.
type NoMatchError struct {
	Selector string   // as given
	From     string   // "device selector" (Options.Device, the CLI's --device) or "VKC_DEVICE"
	Index    bool     // the selector is a number: no device has that index
	Devices  []string // "0: llvmpipe (...) (cpu)"
}

func (e *NoMatchError) Error() string {
	what := "matches no usable device by name"
	if e.Index {
		what = "is no device's index"
	}
	sel := strconv.Quote(e.Selector)
	if e.From == "VKC_DEVICE" {
		sel = "VKC_DEVICE=" + sel
	} else {
		sel = e.From + " " + sel
	}
	return fmt.Sprintf("%s %s; the devices are: %s", sel, what, strings.Join(e.Devices, "; "))
}

func (e *NoMatchError) Unwrap() error { return ErrNoDevice }

// Devices lists every physical device and the index (into the returned slice) of the one Open
// would choose with the same options (-1 when none). Errors wrap ErrNoVulkan or ErrNoDevice.
func Devices(opts Options) ([]DeviceInfo, int, error) {
	in, err := newInstance(Options{Validation: opts.Validation})
	if err != nil {
		return nil, -1, err
	}
	defer in.destroy()
	out := make([]DeviceInfo, len(in.devices))
	for i, d := range in.devices {
		out[i] = *d
		out[i].pd = nil
		out[i].ccaps = nil
	}
	if len(out) == 0 {
		return nil, -1, ErrNoDevice
	}
	chosen := -1
	c, err := choose(in.devices, opts.Device)
	if err == nil {
		chosen = c.Index
	}
	return out, chosen, err
}
