package codegen

import (
	"fmt"
	"math"
	"strings"
)

// Dump writes the kernel as text: the interface (workgroup size, specialization constants, bindings,
// push constants, shared arrays), then the body with one SSA value per line. Constants are written
// inline, specialization constants as $name, push constants as push.name, built-ins by name.
//
//	kernel "scale"
//	workgroup_size 64 1 1
//	binding 0 x: readonly f32[]
//	push n: u32 @0
//	{
//	  %5: u32 = global_invocation_id.x
//	  %6: bool = %5 < push.n
//	  if %6 { ... }
//	}
func (b *Builder) Dump() string { return b.dump() }

func (b *Builder) dump() string {
	var s strings.Builder
	fmt.Fprintf(&s, "kernel %q\n", b.name)
	s.WriteString("workgroup_size")
	for i := 0; i < 3; i++ {
		s.WriteString(" " + b.ref(b.WorkgroupSizeValue(i).id))
	}
	s.WriteString("\n")
	for _, sc := range b.specs {
		fmt.Fprintf(&s, "spec %d $%s: %s = %d\n", sc.ID, sc.Name, sc.Type, int32(sc.Default))
	}
	for _, buf := range b.buffers {
		fmt.Fprintf(&s, "binding %d %s: %s %s[]", buf.Binding, buf.Name, buf.Access, buf.Elem)
		if buf.Options&Aliased != 0 {
			s.WriteString(" aliased")
		}
		if buf.Options&Restrict != 0 {
			s.WriteString(" restrict")
		}
		if buf.Options&Coherent != 0 {
			s.WriteString(" coherent")
		}
		s.WriteString("\n")
	}
	for _, p := range b.push {
		fmt.Fprintf(&s, "push %s: %s @%d\n", p.Name, p.Type, p.Offset)
	}
	for _, m := range b.mems {
		if m.kind == memShared {
			fmt.Fprintf(&s, "shared %s: %s[%s]\n", m.name, m.elem, b.ref(m.length.id))
		}
	}
	for _, m := range b.mems {
		if m.kind == memLocal {
			fmt.Fprintf(&s, "local %s: %s[%s]\n", m.name, m.elem, b.ref(m.length.id))
		}
	}
	s.WriteString("{\n")
	b.dumpBlock(&s, b.body, 1)
	s.WriteString("}\n")
	return s.String()
}

// ref writes a value as an operand.
func (b *Builder) ref(id int32) string {
	if id <= 0 {
		return "<invalid>"
	}
	n := &b.nodes[id]
	switch n.kind {
	case kConst:
		switch n.t {
		case Bool:
			return fmt.Sprint(n.lit != 0)
		case I32:
			return fmt.Sprint(int32(n.lit))
		case U32:
			return fmt.Sprintf("%du", n.lit)
		case F32:
			return fmt.Sprintf("%gf", math.Float32frombits(n.lit))
		case F16:
			return fmt.Sprintf("%gh", HalfToFloat32(uint16(n.lit)))
		case BF16:
			return fmt.Sprintf("%gbf", BF16ToFloat32(uint16(n.lit)))
		}
	case kSpec:
		return "$" + b.specs[n.mem].Name
	case kSpecOp:
		return "(" + b.expr(n) + ")"
	case kPush:
		return "push." + b.push[n.mem].Name
	case kBuiltin:
		return builtinName(n.lit)
	}
	return fmt.Sprintf("%%%d", id)
}

func builtinName(bi uint32) string {
	switch bi {
	case builtInGlobalInvocationId:
		return "global_invocation_id"
	case builtInLocalInvocationId:
		return "local_invocation_id"
	case builtInLocalInvocationIndex:
		return "local_invocation_index"
	case builtInWorkgroupId:
		return "workgroup_id"
	case builtInNumWorkgroups:
		return "num_workgroups"
	case builtInSubgroupSize:
		return "subgroup_size"
	case builtInSubgroupLocalInvocationId:
		return "subgroup_invocation_id"
	case builtInSubgroupId:
		return "subgroup_id"
	case builtInNumSubgroups:
		return "num_subgroups"
	}
	return fmt.Sprintf("builtin(%d)", bi)
}

func (b *Builder) operandList(n *node) string {
	var parts []string
	for _, o := range n.ops {
		if o.isLit {
			parts = append(parts, fmt.Sprint(o.lit))
		} else {
			parts = append(parts, b.ref(o.id))
		}
	}
	return strings.Join(parts, " ")
}

func (b *Builder) dumpBlock(s *strings.Builder, blk *block, depth int) {
	ind := strings.Repeat("  ", depth)
	for _, id := range blk.nodes {
		n := &b.nodes[id]
		switch n.kind {
		case kInst:
			fmt.Fprintf(s, "%s%%%d: %s = %s\n", ind, id, n.t, b.expr(n))
		case kExt:
			fmt.Fprintf(s, "%s%%%d: %s = %s %s\n", ind, id, n.t, glslNames[n.lit], b.operandList(n))
		case kLoad:
			fmt.Fprintf(s, "%s%%%d: %s = %s[%s]\n", ind, id, n.t, b.mems[n.mem].name, b.ref(n.ops[0].id))
		case kStore:
			fmt.Fprintf(s, "%s%s[%s] = %s\n", ind, b.mems[n.mem].name, b.ref(n.ops[0].id), b.ref(n.ops[1].id))
		case kAtomic:
			fmt.Fprintf(s, "%s%%%d: %s = %s &%s[%s] %s\n", ind, id, n.t, strings.TrimPrefix(opcodeNames[n.op], "Op"), b.mems[n.mem].name, b.ref(n.ops[0].id), b.ref(n.ops[1].id))
		case kArrayLen:
			fmt.Fprintf(s, "%s%%%d: u32 = len(%s)\n", ind, id, b.mems[n.mem].name)
		case kVarGet:
			fmt.Fprintf(s, "%s%%%d: %s = %s\n", ind, id, n.t, b.vars[n.mem].Name)
		case kVarSet:
			fmt.Fprintf(s, "%s%s = %s\n", ind, b.vars[n.mem].Name, b.ref(n.ops[0].id))
		case kIf:
			fmt.Fprintf(s, "%sif %s {\n", ind, b.ref(n.ops[0].id))
			b.dumpBlock(s, n.blocks[0], depth+1)
			if len(n.blocks[1].nodes) > 0 {
				fmt.Fprintf(s, "%s} else {\n", ind)
				b.dumpBlock(s, n.blocks[1], depth+1)
			}
			fmt.Fprintf(s, "%s}\n", ind)
		case kLoop:
			fmt.Fprintf(s, "%sloop {\n", ind)
			if len(n.blocks[0].nodes) > 0 {
				b.dumpBlock(s, n.blocks[0], depth+1)
			}
			if len(n.ops) > 0 {
				fmt.Fprintf(s, "%s  while %s\n", ind, b.ref(n.ops[0].id))
			}
			b.dumpBlock(s, n.blocks[1], depth+1)
			if len(n.blocks[2].nodes) > 0 {
				fmt.Fprintf(s, "%scontinuing:\n", ind)
				b.dumpBlock(s, n.blocks[2], depth+1)
			}
			fmt.Fprintf(s, "%s}\n", ind)
		case kBreak:
			fmt.Fprintf(s, "%sbreak\n", ind)
		case kContinue:
			fmt.Fprintf(s, "%scontinue\n", ind)
		case kReturn:
			fmt.Fprintf(s, "%sreturn\n", ind)
		case kBarrier:
			fmt.Fprintf(s, "%scontrol_barrier %s\n", ind, b.operandList(n))
		case kMemBarrier:
			fmt.Fprintf(s, "%smemory_barrier %s\n", ind, b.operandList(n))
		case kMatLoad:
			fmt.Fprintf(s, "%s%%%d: %s = matrix_load %s[%s] stride %s %s\n", ind, id, n.t, b.mems[n.mem].name, b.ref(n.ops[0].id), b.ref(n.ops[1].id), MatrixLayout(n.lit))
		case kMatStore:
			fmt.Fprintf(s, "%smatrix_store %s[%s] = %s stride %s %s\n", ind, b.mems[n.mem].name, b.ref(n.ops[0].id), b.ref(n.ops[1].id), b.ref(n.ops[2].id), MatrixLayout(n.lit))
		case kMatLoadTensor:
			fmt.Fprintf(s, "%s%%%d: %s = matrix_load_tensor %s %s\n", ind, id, n.t, b.mems[n.mem].name, b.operandList(n))
		case kMatStoreTensor:
			fmt.Fprintf(s, "%smatrix_store_tensor %s %s\n", ind, b.mems[n.mem].name, b.operandList(n))
		case kVarElemGet:
			fmt.Fprintf(s, "%s%%%d: %s = %s[%s]\n", ind, id, n.t, b.vars[n.mem].Name, b.ref(n.ops[0].id))
		case kVarElemSet:
			fmt.Fprintf(s, "%s%s[%s] = %s\n", ind, b.vars[n.mem].Name, b.ref(n.ops[0].id), b.ref(n.ops[1].id))
		case kInvalid, kConst, kSpec, kSpecOp, kPush, kBuiltin:
			fmt.Fprintf(s, "%s<%s in block>\n", ind, kindName(n.kind))
		default:
			panic(fmt.Sprintf("codegen: dump: unknown node kind %d", n.kind))
		}
	}
}

// infix gives the operator of the binary opcodes the dump writes infix.
var infix = map[opcode]string{
	opFAdd: "+", opIAdd: "+", opFSub: "-", opISub: "-", opFMul: "*", opIMul: "*",
	opFDiv: "/", opUDiv: "/", opSDiv: "/", opFRem: "%", opUMod: "%", opSRem: "%",
	opBitwiseAnd: "&", opBitwiseOr: "|", opBitwiseXor: "^", opLogicalAnd: "&&", opLogicalOr: "||",
	opShiftLeftLogical: "<<", opShiftRightLogical: ">>", opShiftRightArithmetic: ">>",
	opFOrdEqual: "==", opIEqual: "==", opLogicalEqual: "==",
	opFUnordNotEqual: "!=", opINotEqual: "!=", opLogicalNotEqual: "!=",
	opFOrdLessThan: "<", opSLessThan: "<", opULessThan: "<",
	opFOrdLessThanEqual: "<=", opSLessThanEqual: "<=", opULessThanEqual: "<=",
	opFOrdGreaterThan: ">", opSGreaterThan: ">", opUGreaterThan: ">",
	opFOrdGreaterThanEqual: ">=", opSGreaterThanEqual: ">=", opUGreaterThanEqual: ">=",
}

// expr writes an instruction node: infix for binary operators, v.x for component extraction,
// opcode name and operands otherwise.
func (b *Builder) expr(n *node) string {
	if sym, ok := infix[n.op]; ok && len(n.ops) == 2 {
		return b.ref(n.ops[0].id) + " " + sym + " " + b.ref(n.ops[1].id)
	}
	if n.op == opCooperativeMatrixLengthKHR {
		return "MatrixLength " + n.aux.String()
	}
	if n.op == opCompositeExtract && len(n.ops) == 2 && n.ops[1].isLit && n.ops[1].lit < 4 && !b.nodes[n.ops[0].id].t.IsMatrix() {
		return b.ref(n.ops[0].id) + "." + string("xyzw"[n.ops[1].lit])
	}
	return strings.TrimPrefix(opcodeNames[n.op], "Op") + " " + b.operandList(n)
}
