package codegen

import (
	"fmt"
	"sort"
)

// SharedArray is a workgroup-shared array of a kernel; its length may depend on specialization
// constants, so evaluate it with Kernel.SharedBytes for a given specialization.
type SharedArray struct {
	Name string
	Elem Type
	len  int32 // node of the length
}

// SpecValues returns the specialization data for the given values by name (others keep their
// defaults): one 32-bit word per specialization constant, SpecId i at byte offset 4*i, booleans as 0
// or 1 — the layout of a VkSpecializationInfo whose map entries are (i, 4*i, 4).
func (k *Kernel) SpecValues(values map[string]int64) ([]uint32, error) {
	out := make([]uint32, len(k.Specs))
	known := map[string]bool{}
	for i, s := range k.Specs {
		out[i] = s.Default
		known[s.Name] = true
		if v, ok := values[s.Name]; ok {
			out[i] = uint32(v)
			if s.Type == Bool && v != 0 {
				out[i] = 1
			}
		}
	}
	var unknown []string
	for name := range values {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("codegen: kernel %q has no specialization constants %v", k.Name, unknown)
	}
	return out, nil
}

// WorkgroupSizeFor is the workgroup size under the specialization data spec (from SpecValues; nil
// for the defaults).
func (k *Kernel) WorkgroupSizeFor(spec []uint32) [3]uint32 {
	var out [3]uint32
	for i, d := range k.Workgroup {
		out[i] = d.Size
		if d.SpecID >= 0 && d.SpecID < len(spec) {
			out[i] = spec[d.SpecID]
		}
	}
	return out
}

// SharedBytes is the workgroup-shared memory the kernel uses under the specialization data spec
// (nil for the defaults), to compare with maxComputeSharedMemorySize before creating a pipeline.
func (k *Kernel) SharedBytes(spec []uint32) (int, error) {
	total := 0
	for _, a := range k.Shared {
		n, err := k.eval(a.len, spec)
		if err != nil {
			return 0, fmt.Errorf("codegen: kernel %q: shared array %q: %w", k.Name, a.Name, err)
		}
		size := a.Elem.Size()
		if a.Elem.IsBool() {
			size = 4
		}
		total += int(int32(n)) * size
	}
	return total, nil
}

// eval computes a module-level integer or boolean value under a specialization.
func (k *Kernel) eval(id int32, spec []uint32) (uint32, error) {
	n := &k.nodes[id]
	switch n.kind {
	case kConst:
		return n.lit, nil
	case kSpec:
		if int(n.mem) < len(spec) {
			return spec[n.mem], nil
		}
		return n.lit, nil
	case kSpecOp:
		var a [3]uint32
		for i, o := range n.ops {
			v, err := k.eval(o.id, spec)
			if err != nil {
				return 0, err
			}
			a[i] = v
		}
		return evalOp(n.op, a)
	}
	return 0, fmt.Errorf("not a constant (%s)", kindName(n.kind))
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// evalOp evaluates the integer and boolean opcodes allowed in OpSpecConstantOp (specOpAllowed).
func evalOp(op opcode, a [3]uint32) (uint32, error) {
	x, y := a[0], a[1]
	sx, sy := int32(x), int32(y)
	switch op {
	case opIAdd:
		return x + y, nil
	case opISub:
		return x - y, nil
	case opIMul:
		return x * y, nil
	case opUDiv, opSDiv, opUMod, opSRem, opSMod:
		if y == 0 {
			return 0, fmt.Errorf("division by zero in a constant expression")
		}
		switch op {
		case opUDiv:
			return x / y, nil
		case opSDiv:
			return uint32(sx / sy), nil
		case opUMod:
			return x % y, nil
		case opSRem:
			return uint32(sx % sy), nil
		default: // SMod: the sign of the divisor
			m := sx % sy
			if m != 0 && (m < 0) != (sy < 0) {
				m += sy
			}
			return uint32(m), nil
		}
	case opSNegate:
		return uint32(-sx), nil
	case opNot:
		return ^x, nil
	case opShiftLeftLogical:
		return x << (y & 31), nil
	case opShiftRightLogical:
		return x >> (y & 31), nil
	case opShiftRightArithmetic:
		return uint32(sx >> (y & 31)), nil
	case opBitwiseAnd, opLogicalAnd:
		return x & y, nil
	case opBitwiseOr, opLogicalOr:
		return x | y, nil
	case opBitwiseXor, opLogicalNotEqual, opINotEqual:
		if op == opINotEqual {
			return b2u(x != y), nil
		}
		return x ^ y, nil
	case opLogicalNot:
		return x ^ 1, nil
	case opLogicalEqual, opIEqual:
		return b2u(x == y), nil
	case opSelect:
		if x != 0 {
			return y, nil
		}
		return a[2], nil
	case opULessThan:
		return b2u(x < y), nil
	case opSLessThan:
		return b2u(sx < sy), nil
	case opUGreaterThan:
		return b2u(x > y), nil
	case opSGreaterThan:
		return b2u(sx > sy), nil
	case opULessThanEqual:
		return b2u(x <= y), nil
	case opSLessThanEqual:
		return b2u(sx <= sy), nil
	case opUGreaterThanEqual:
		return b2u(x >= y), nil
	case opSGreaterThanEqual:
		return b2u(sx >= sy), nil
	}
	return 0, fmt.Errorf("cannot evaluate %s", opcodeNames[op])
}
