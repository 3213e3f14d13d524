package runtime

import (
	"errors"
	"fmt"
	"strings"
)

// A plan carries SPIR-V that the driver compiles, and a driver is not hardened against hostile
// modules: a crafted plan (its checksums recomputed) could crash it or worse. Plans are trusted
// like shared libraries (docs/trust.md); what the loader can check cheaply it checks before any
// byte reaches the driver, so that an accident, a plan for other hardware or an obviously
// malformed module is an error naming the module instead of a driver crash:
//
//   - the header: magic number, a SPIR-V version the device's Vulkan version consumes, the id
//     bound (non-zero and at most maxIDBound), the reserved word zero;
//   - the instruction stream: every instruction's word count is at least 1 and stays inside the
//     module;
//   - OpCapability: every capability is one vkc's code generator emits and the device has;
//   - OpEntryPoint: a GLCompute entry point of the name the plan gives, with an id below the
//     bound; and an OpMemoryModel.
//
// This is not validation (spirv-val does that in the code generator's tests): a module that
// passes can still be wrong in ways only the driver sees.

// ErrBadModule is wrapped by the errors of checkModule.
var ErrBadModule = errors.New("SPIR-V module refused")

// maxIDBound bounds a module's id bound; vkc's largest kernels use a few thousand ids.
const maxIDBound = 1 << 22

// capability is a SPIR-V capability the code generator may declare, with the device feature it
// needs.
type capability struct {
	name string
	has  func(c *Caps) bool
}

func always(*Caps) bool { return true }

func subgroup(op SubgroupOps) func(c *Caps) bool {
	return func(c *Caps) bool { return c.SubgroupOps.Has(op) && c.SubgroupStages&0x20 != 0 }
}

// capabilities lists what a vkc plan may declare; any other capability is refused (a plan vkc
// writes never declares one). Extend it with the code generator.
var capabilities = map[uint32]capability{
	1:    {"Shader", always},
	9:    {"Float16", func(c *Caps) bool { return c.ShaderFloat16 }},
	10:   {"Float64", func(c *Caps) bool { return c.ShaderFloat64 }},
	11:   {"Int64", func(c *Caps) bool { return c.ShaderInt64 }},
	22:   {"Int16", func(c *Caps) bool { return c.ShaderInt16 }},
	39:   {"Int8", func(c *Caps) bool { return c.ShaderInt8 }},
	61:   {"GroupNonUniform", subgroup(SubgroupBasic)},
	62:   {"GroupNonUniformVote", subgroup(SubgroupVote)},
	63:   {"GroupNonUniformArithmetic", subgroup(SubgroupArithmetic)},
	64:   {"GroupNonUniformBallot", subgroup(SubgroupBallot)},
	65:   {"GroupNonUniformShuffle", subgroup(SubgroupShuffle)},
	66:   {"GroupNonUniformShuffleRelative", subgroup(32)},
	4433: {"StorageBuffer16BitAccess", func(c *Caps) bool { return c.StorageBuffer16BitAccess }},
	4434: {"UniformAndStorageBuffer16BitAccess", func(c *Caps) bool { return c.UniformAndStorageBuffer16BitAccess }},
	4435: {"StoragePushConstant16", func(c *Caps) bool { return c.StoragePushConstant16 }},
	4448: {"StorageBuffer8BitAccess", func(c *Caps) bool { return c.StorageBuffer8BitAccess }},
	5345: {"VulkanMemoryModel", func(c *Caps) bool { return c.VulkanMemoryModel }},
	5346: {"VulkanMemoryModelDeviceScope", func(c *Caps) bool { return c.VulkanMemoryModel }},
	6016: {"DotProductInputAll", func(c *Caps) bool { return c.IntegerDotProduct }},
	6017: {"DotProductInput4x8Bit", func(c *Caps) bool { return c.IntegerDotProduct }},
	6018: {"DotProductInput4x8BitPacked", func(c *Caps) bool { return c.IntegerDotProduct }},
	6019: {"DotProduct", func(c *Caps) bool { return c.IntegerDotProduct }},
	6022: {"CooperativeMatrixKHR", func(c *Caps) bool { return len(c.CooperativeMatrix) > 0 }},
	5116: {"BFloat16TypeKHR", func(c *Caps) bool { return c.BFloat16 }},
	5118: {"BFloat16CooperativeMatrixKHR", func(c *Caps) bool { return c.BFloat16CooperativeMatrix }},
	// VK_NV_cooperative_matrix2 (SPV_NV_cooperative_matrix2, SPV_NV_tensor_addressing). A
	// workgroup-scope matrix declares no capability of its own.
	5430: {"CooperativeMatrixReductionsNV", func(c *Caps) bool { return coop2(c).Reductions }},
	5431: {"CooperativeMatrixConversionsNV", func(c *Caps) bool { return coop2(c).Conversions }},
	5432: {"CooperativeMatrixPerElementOperationsNV", func(c *Caps) bool { return coop2(c).PerElementOperations }},
	5433: {"CooperativeMatrixTensorAddressingNV", func(c *Caps) bool { return coop2(c).TensorAddressing }},
	5434: {"CooperativeMatrixBlockLoadsNV", func(c *Caps) bool { return coop2(c).BlockLoads }},
	5439: {"TensorAddressingNV", func(c *Caps) bool { return coop2(c).TensorAddressing }},
}

// coop2 is c's VK_NV_cooperative_matrix2, every feature false where it is not enabled.
func coop2(c *Caps) CoopMatrix2 {
	if c.CooperativeMatrix2 == nil {
		return CoopMatrix2{}
	}
	return *c.CooperativeMatrix2
}

// maxSPIRV is the newest SPIR-V version a device of Vulkan version v consumes (as the header's
// version word).
func maxSPIRV(v Version) uint32 {
	switch {
	case v.atLeast(1, 3):
		return 0x00010600
	case v.atLeast(1, 2):
		return 0x00010500
	case v.atLeast(1, 1):
		return 0x00010300
	}
	return 0x00010000
}

// checkModule makes the checks above on words, a module whose entry point should be entry, for
// the device d.
func checkModule(words []uint32, entry string, d *DeviceInfo) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadModule, fmt.Sprintf(format, args...))
	}
	if len(words) < 5 {
		return bad("%d words, shorter than the 5-word header", len(words))
	}
	if words[0] != 0x07230203 {
		return bad("magic number 0x%08x, want 0x07230203", words[0])
	}
	ver := words[1]
	if ver&0xff0000ff != 0 || ver < 0x00010000 || ver > maxSPIRV(d.APIVersion) {
		return bad("SPIR-V version word 0x%08x: not a version Vulkan %s consumes (at most %d.%d)",
			ver, d.APIVersion, maxSPIRV(d.APIVersion)>>16, maxSPIRV(d.APIVersion)>>8&0xff)
	}
	bound := words[3]
	if bound == 0 || bound > maxIDBound {
		return bad("id bound %d is outside 1..%d", bound, maxIDBound)
	}
	if words[4] != 0 {
		return bad("reserved header word is %d, want 0", words[4])
	}
	found, memoryModel := false, false
	var entries []string
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || n > len(words)-i {
			return bad("instruction at word %d (opcode %d) has word count %d, past the module's end at word %d", i, op, n, len(words))
		}
		ins := words[i : i+n]
		switch op {
		case 17: // OpCapability
			if n != 2 {
				return bad("OpCapability at word %d has %d words", i, n)
			}
			c, ok := capabilities[ins[1]]
			if !ok {
				return bad("capability %d is not one vkc's code generator declares", ins[1])
			}
			if !c.has(&d.Caps) {
				return fmt.Errorf("%w: the module declares capability %s, which %s lacks", ErrBadModule, c.name, d.Name)
			}
		case 14: // OpMemoryModel
			memoryModel = true
		case 15: // OpEntryPoint: execution model, id, name (a nul-terminated string), interface ids
			if n < 4 {
				return bad("OpEntryPoint at word %d has %d words", i, n)
			}
			name, ok := spirvString(ins[3:])
			if !ok {
				return bad("OpEntryPoint at word %d: its name is not a terminated string", i)
			}
			entries = append(entries, name)
			if ins[2] >= bound {
				return bad("entry point %q has id %d, not below the id bound %d", name, ins[2], bound)
			}
			if ins[1] == 5 && name == entry { // GLCompute
				found = true
			}
		}
		i += n
	}
	if !memoryModel {
		return bad("no OpMemoryModel")
	}
	if !found {
		return bad("no GLCompute entry point %q (entry points: %s)", entry, strings.Join(entries, ", "))
	}
	return nil
}

// spirvString decodes a literal string (UTF-8, nul-terminated, padded to whole words).
func spirvString(w []uint32) (string, bool) {
	var b []byte
	for _, x := range w {
		for k := 0; k < 4; k++ {
			c := byte(x >> (8 * k))
			if c == 0 {
				return string(b), true
			}
			b = append(b, c)
		}
	}
	return "", false
}
