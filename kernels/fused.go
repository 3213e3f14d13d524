package kernels

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Fused is a DAG of elementwise ops evaluated per output element: the body of an elementwise
// kernel, or the epilogue of a matmul, reduction or norm. Nodes are in topological order; Input
// nodes read Inputs[Index], Const nodes carry a scalar.
type Fused struct {
	Inputs  []ir.Type
	Nodes   []FusedNode
	Outputs []int // node indices whose values are results
}

// FusedNode is one node of a Fused DAG.
type FusedNode struct {
	Op    ir.Op // ir.Input, ir.Const or an elementwise op (ir.Op.IsElementwise)
	Attrs ir.Attrs
	Args  []int    // earlier node indices
	Index int      // Input: the input number
	Value float64  // Const: the scalar
	DType ir.DType // the result's dtype
}

// Ops is the number of floating-point operations per element: nodes with a float result
// other than inputs, constants and casts (integer arithmetic, on positions and lengths, is not
// a FLOP).
func (f *Fused) Ops() int {
	n := 0
	for _, x := range f.Nodes {
		if x.Op != ir.Input && x.Op != ir.Const && x.Op != ir.Cast && x.DType.IsFloat() {
			n++
		}
	}
	return n
}

// Key is a canonical text of the DAG, part of the Problem key.
func (f *Fused) Key() string {
	var b strings.Builder
	for i, n := range f.Nodes {
		if i > 0 {
			b.WriteByte(';')
		}
		switch n.Op {
		case ir.Input:
			b.WriteString("in" + strconv.Itoa(n.Index))
		case ir.Const:
			b.WriteString("c" + strconv.FormatFloat(n.Value, 'g', -1, 64))
		default:
			b.WriteString(n.Op.String())
			if k := n.Attrs.Key(); k != "" {
				b.WriteString("[" + k + "]")
			}
			for j, a := range n.Args {
				if j == 0 {
					b.WriteByte('(')
				} else {
					b.WriteByte(',')
				}
				b.WriteString(strconv.Itoa(a))
			}
			b.WriteByte(')')
		}
		b.WriteString(":" + n.DType.String())
	}
	b.WriteString("=>")
	for i, o := range f.Outputs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(o))
	}
	return b.String()
}

// Check verifies the DAG's structure: topological references, known elementwise ops, input
// indices in range.
func (f *Fused) Check() error {
	for i, n := range f.Nodes {
		for _, a := range n.Args {
			if a < 0 || a >= i {
				return fmt.Errorf("fused node %d (%s) refers to node %d", i, n.Op, a)
			}
		}
		switch {
		case n.Op == ir.Input:
			if n.Index < 0 || n.Index >= len(f.Inputs) {
				return fmt.Errorf("fused node %d reads input %d of %d", i, n.Index, len(f.Inputs))
			}
		case n.Op == ir.Const:
		case n.Op.IsElementwise():
		default:
			return fmt.Errorf("fused node %d: %s is not elementwise", i, n.Op)
		}
	}
	for _, o := range f.Outputs {
		if o < 0 || o >= len(f.Nodes) {
			return fmt.Errorf("fused output %d out of range", o)
		}
	}
	return nil
}

// StorageType is the codegen type of a dtype's elements in device memory.
func StorageType(d ir.DType) codegen.Type {
	switch d {
	case ir.F32:
		return codegen.F32
	case ir.F16:
		return codegen.F16
	case ir.BF16:
		return codegen.BF16 // only templates that check Caps.BFloat16 declare it (see Supported)
	case ir.I32:
		return codegen.I32
	case ir.U32, ir.Bool:
		return codegen.U32
	}
	panic("kernels: no device storage for " + d.String())
}

// ComputeType is the type arithmetic on a dtype is done in: f32 for every float, bool for bool.
func ComputeType(d ir.DType) codegen.Type {
	switch d {
	case ir.F32, ir.F16, ir.BF16:
		return codegen.F32
	case ir.I32:
		return codegen.I32
	case ir.U32:
		return codegen.U32
	case ir.Bool:
		return codegen.Bool
	}
	panic("kernels: no compute type for " + d.String())
}

// Supported reports whether kernels can hold tensors of dtype d in device memory. bf16 is not among
// them: it needs VK_KHR_shader_bfloat16, and only the cooperative-matrix templates, which check
// Caps.BFloat16, accept it.
func Supported(d ir.DType) bool {
	return d == ir.F32 || d == ir.F16 || d == ir.I32 || d == ir.U32 || d == ir.Bool
}

// bf16Word loads element i of a bf16 tensor bound as u32 words (two elements to a word, element
// 2w in the low half of word w) and widens it to f32 exactly. Templates read bf16 weights so on
// every device: the bfloat16 type (StorageType, VK_KHR_shader_bfloat16) is only for those that
// check Caps.BFloat16.
func bf16Word(b *codegen.Builder, buf *codegen.Buffer, i codegen.Value) codegen.Value {
	w := b.Load(buf, b.Shr(i, b.U32(1)))
	odd := b.Ne(b.And(i, b.U32(1)), b.U32(0))
	return b.Bitcast(b.Select(odd, b.And(w, b.U32(0xffff0000)), b.Shl(w, b.U32(16))), codegen.F32)
}

// bf16Words widens the bf16 pairs of words w (a u32 or a vec2<u32>) to a vec2 or vec4 of f32.
func bf16Words(b *codegen.Builder, w codegen.Value) codegen.Value {
	pair := func(x codegen.Value) (codegen.Value, codegen.Value) {
		return b.Bitcast(b.Shl(x, b.U32(16)), codegen.F32), b.Bitcast(b.And(x, b.U32(0xffff0000)), codegen.F32)
	}
	if w.Type() == codegen.U32 {
		lo, hi := pair(w)
		return b.Vec(lo, hi)
	}
	a, c := pair(b.X(w))
	d, e := pair(b.Y(w))
	return b.Vec(a, c, d, e)
}

// LoadAs loads element i of buf (holding dtype d) and converts it to the compute type.
func LoadAs(b *codegen.Builder, buf *codegen.Buffer, i codegen.Value, d ir.DType) codegen.Value {
	v := b.Load(buf, i)
	if d == ir.Bool {
		return b.Ne(v, b.U32(0))
	}
	if ct := ComputeType(d); ct != StorageType(d) {
		return b.Convert(v, ct)
	}
	return v
}

// StoreAs converts a compute value to dtype d's storage and stores it at element i of buf.
func StoreAs(b *codegen.Builder, buf *codegen.Buffer, i, v codegen.Value, d ir.DType) {
	if d == ir.Bool {
		b.Store(buf, i, b.Select(v, b.U32(1), b.U32(0)))
		return
	}
	if st := StorageType(d); st != v.Type() {
		v = b.Convert(v, st)
	}
	b.Store(buf, i, v)
}

// Emit builds the DAG's values from the inputs' element values (in[i] in ComputeType of input i)
// and returns the outputs' values in their ComputeType. Each node is emitted once.
func (f *Fused) Emit(b *codegen.Builder, in []codegen.Value) []codegen.Value {
	vals := make([]codegen.Value, len(f.Nodes))
	for i, n := range f.Nodes {
		vals[i] = emitNode(b, n, vals, in)
	}
	out := make([]codegen.Value, len(f.Outputs))
	for i, o := range f.Outputs {
		out[i] = vals[o]
	}
	return out
}

func emitNode(b *codegen.Builder, n FusedNode, vals, in []codegen.Value) codegen.Value {
	arg := func(k int) codegen.Value { return vals[n.Args[k]] }
	ct := ComputeType(n.DType)
	c := func(v float64) codegen.Value { return b.Const(ct, v) }
	switch n.Op {
	case ir.Input:
		return in[n.Index]
	case ir.Const:
		if n.DType == ir.Bool {
			return b.Bool(n.Value != 0)
		}
		return c(n.Value)
	case ir.Neg:
		return b.Neg(arg(0))
	case ir.Abs:
		return b.Abs(arg(0))
	case ir.Exp:
		return b.Exp(arg(0))
	case ir.Log:
		return b.Log(arg(0))
	case ir.Sqrt:
		return b.Sqrt(arg(0))
	case ir.Rsqrt:
		return b.InverseSqrt(arg(0))
	case ir.Recip:
		return b.Div(c(1), arg(0))
	case ir.Sin:
		return b.Sin(arg(0))
	case ir.Cos:
		return b.Cos(arg(0))
	case ir.Tanh:
		return b.Tanh(arg(0))
	case ir.Erf:
		return b.Erf(arg(0))
	case ir.Sigmoid:
		return b.Div(c(1), b.Add(c(1), b.Exp(b.Neg(arg(0)))))
	case ir.Silu:
		x := arg(0)
		return b.Div(x, b.Add(c(1), b.Exp(b.Neg(x))))
	case ir.Relu:
		return b.MaxOrNaN(arg(0), c(0)) // relu(NaN) is NaN, as in the interpreter
	case ir.Gelu:
		x := arg(0)
		return b.Mul(b.Mul(c(0.5), x), b.Add(c(1), b.Erf(b.Mul(x, c(1/math.Sqrt2)))))
	case ir.GeluTanh:
		x := arg(0)
		inner := b.Mul(c(math.Sqrt(2/math.Pi)), b.Add(x, b.Mul(c(0.044715), b.Mul(x, b.Mul(x, x)))))
		return b.Mul(b.Mul(c(0.5), x), b.Add(c(1), b.Tanh(inner)))
	case ir.Cast:
		x := arg(0)
		switch {
		case n.DType == ir.Bool:
			return b.Ne(x, b.Const(x.Type(), 0))
		case x.Type() == codegen.Bool:
			return b.Select(x, c(1), c(0))
		case x.Type() == ct:
			// f32 → f16 and similar: round through the storage type so the value is the one the
			// unfused graph would have stored.
			if st := StorageType(n.DType); st != ct {
				return b.Convert(b.Convert(x, st), ct)
			}
			return x
		}
		return b.ConvertSat(x, ct) // float → int saturates, NaN → 0, as the interpreter's cast
	case ir.Add:
		return b.Add(arg(0), arg(1))
	case ir.Sub:
		return b.Sub(arg(0), arg(1))
	case ir.Mul:
		return b.Mul(arg(0), arg(1))
	case ir.Div:
		return b.Div(arg(0), arg(1))
	case ir.Maximum:
		return b.MaxOrNaN(arg(0), arg(1))
	case ir.Minimum:
		return b.MinOrNaN(arg(0), arg(1))
	case ir.Pow:
		if t := arg(0).Type(); t == codegen.I32 || t == codegen.U32 {
			return intPow(b, arg(0), arg(1))
		}
		return b.Pow(arg(0), arg(1))
	case ir.Eq:
		return b.Eq(arg(0), arg(1))
	case ir.Ne:
		return b.Ne(arg(0), arg(1))
	case ir.Lt:
		return b.Lt(arg(0), arg(1))
	case ir.Le:
		return b.Le(arg(0), arg(1))
	case ir.Gt:
		return b.Gt(arg(0), arg(1))
	case ir.Ge:
		return b.Ge(arg(0), arg(1))
	case ir.Where:
		return b.Select(arg(0), arg(1), arg(2))
	}
	panic(fmt.Sprintf("kernels: %s is not an elementwise op", n.Op))
}

// intPow is x**y on 32-bit integers as the interpreter computes it: square and multiply over
// the exponent's 32 bits, wrapping; a negative exponent gives 1 for x = 1, ±1 for x = −1 and 0
// otherwise (the interpreter's error for 0 to a negative power has no device form: 0).
func intPow(b *codegen.Builder, x, y codegen.Value) codegen.Value {
	t := x.Type()
	one := b.Const(t, 1)
	e := y
	if t == codegen.I32 {
		e = b.Bitcast(y, codegen.U32)
	}
	r, base := one, x
	for i := 0; i < 32; i++ {
		bit := b.Ne(b.And(b.Shr(e, b.U32(uint32(i))), b.U32(1)), b.U32(0))
		r = b.Select(bit, b.Mul(r, base), r)
		if i < 31 {
			base = b.Mul(base, base)
		}
	}
	if t == codegen.I32 {
		odd := b.Ne(b.And(y, b.I32(1)), b.I32(0))
		neg := b.Select(b.Eq(x, one), one, b.Select(b.Eq(x, b.I32(-1)), b.Select(odd, b.I32(-1), one), b.I32(0)))
		r = b.Select(b.Lt(y, b.I32(0)), neg, r)
	}
	return r
}

// BroadcastIndex maps a row-major index into a tensor of shape out to the index of the element of
// a tensor of shape in (NumPy-broadcast to out) that it reads. Shapes are static, so the result is
// a few integer operations; common cases (same shape, scalar, trailing suffix) are cheaper still.
func BroadcastIndex(b *codegen.Builder, idx codegen.Value, out, in ir.Shape) codegen.Value {
	if in.NumElements() == 1 {
		return b.U32(0)
	}
	if in.NumElements() == out.NumElements() {
		return idx // same elements in the same order (broadcasting only adds 1-dims)
	}
	// Trailing suffix: in's dims equal out's last dims and everything before is broadcast.
	off := len(out) - len(in)
	suffix := true
	lead := true // in's leading dims are all 1
	for i, d := range in {
		if d != 1 {
			lead = false
		}
		if !lead && d != out[off+i] {
			suffix = false
		}
	}
	if suffix {
		n := in.NumElements()
		return b.Rem(idx, b.U32(uint32(n)))
	}
	// General case: decompose idx into out's coordinates, recompose with in's strides.
	ost := out.Strides()
	ist := in.Strides()
	res := b.U32(0)
	for i := range out {
		j := i - off
		if j < 0 || in[j] == 1 {
			continue
		}
		coord := b.Div(idx, b.U32(uint32(ost[i])))
		if i > 0 {
			coord = b.Rem(coord, b.U32(uint32(out[i])))
		}
		res = b.Add(res, b.Mul(coord, b.U32(uint32(ist[j]))))
	}
	return res
}
