package codegen

// Packed integers and half floats: what kernels that read ggml's quantized blocks need beyond
// plain arithmetic. Block fields are bytes and halves at arbitrary even offsets, so such kernels
// bind a weight as u32 words and unpack; UnpackHalf2x16 turns a word's two halves into floats
// with no 16-bit capability at all, and SDot multiplies four signed bytes of one word by four of
// another and sums them (SPV_KHR_integer_dot_product's packed 4x8-bit form).

// UnpackHalf2x16 interprets the low and high 16 bits of the u32 x as IEEE half floats and
// returns them as a vec2<f32> (GLSL.std.450 UnpackHalf2x16: exact, denormals included). It needs
// no device feature.
func (b *Builder) UnpackHalf2x16(x Value) Value {
	t := Vec(F32, 2)
	if !b.ok("UnpackHalf2x16", x) {
		return Value{t: t}
	}
	if x.t != U32 {
		b.errorf("UnpackHalf2x16", "operand is %s, want u32", x.t)
		return Value{t: t}
	}
	return b.add(node{kind: kExt, t: t, lit: glslUnpackHalf2x16, ops: ids(x), divergent: b.divergent(x)}, true)
}

// packed4x8 is the PackedVectorFormat operand of the dot-product instructions: each 32-bit
// operand holds four 8-bit components, component i in bits 8i..8i+7.
const packed4x8 = 0

// SDot is the dot product of x and y read as four signed 8-bit integers each (u32 words,
// component i in bits 8i..8i+7), an i32: OpSDot with the PackedVectorFormat4x8Bit operand. It
// needs FeatureIntegerDot (the shaderIntegerDotProduct feature: Vulkan 1.3 or
// VK_KHR_shader_integer_dot_product).
func (b *Builder) SDot(x, y Value) Value { return b.dot4x8("SDot", opSDot, x, y) }

// SDotAccSat is acc + SDot(x, y), saturated to the i32 range instead of wrapping (OpSDotAccSat).
// A device may fuse the accumulation; none of vkc's sums come near saturation.
func (b *Builder) SDotAccSat(x, y, acc Value) Value {
	return b.dot4x8("SDotAccSat", opSDotAccSat, x, y, acc)
}

func (b *Builder) dot4x8(name string, op opcode, x, y Value, acc ...Value) Value {
	if !b.ok(name, append([]Value{x, y}, acc...)...) {
		return Value{t: I32}
	}
	if x.t != U32 || y.t != U32 {
		b.errorf(name, "operands are %s and %s, want u32 words of four packed bytes", x.t, y.t)
		return Value{t: I32}
	}
	ops := []operand{{id: x.id}, {id: y.id}}
	for _, a := range acc {
		if a.t != I32 {
			b.errorf(name, "accumulator is %s, want i32", a.t)
			return Value{t: I32}
		}
		ops = append(ops, operand{id: a.id})
	}
	ops = append(ops, operand{lit: packed4x8, isLit: true})
	return b.add(node{kind: kInst, t: I32, op: op, ops: ops, divergent: b.divergent(append([]Value{x, y}, acc...)...)}, true)
}

// PackHalf2x16 converts the two components of the vec2<f32> x to IEEE half floats and packs
// them into a u32, the first in the low 16 bits (GLSL.std.450 PackHalf2x16): what a kernel
// that writes ggml's blocks (an f16 scale at an even byte offset) stores in a word. The
// rounding is the device's conversion to 16 bits (round to nearest even on lavapipe and the
// GPUs vkc targets; the Vulkan specification leaves it to the implementation). It needs no
// device feature.
func (b *Builder) PackHalf2x16(x Value) Value {
	if !b.ok("PackHalf2x16", x) {
		return Value{t: U32}
	}
	if x.t != Vec(F32, 2) {
		b.errorf("PackHalf2x16", "operand is %s, want vec2<f32>", x.t)
		return Value{t: U32}
	}
	return b.add(node{kind: kExt, t: U32, lit: glslPackHalf2x16, ops: ids(x), divergent: b.divergent(x)}, true)
}
