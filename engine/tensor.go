package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/x448/float16"

	"github.com/vkc-project/vkc/plan"
)

// The byte maps of Executable.Run hold each input and output in its plan Value's layout: the
// dtype's little-endian encoding, dense and row-major, exactly Value.Bytes() long. This file
// converts between that layout and the values a Go program has.

// Tensor is a host tensor in the plan layout: Data holds Shape's elements of DType,
// little-endian, dense and row-major. Block-quantized dtypes never appear here (they only
// describe stored weights, never a function's input or output).
type Tensor struct {
	DType plan.DType
	Shape []int64
	Data  []byte
}

// Len is the number of elements (1 for a scalar).
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	return n
}

// String is the dtype and shape, "f32[2 3]", for messages.
func (t *Tensor) String() string {
	return fmt.Sprintf("%s%v", t.DType, t.Shape)
}

// Float32s returns the elements of an f32, f16 or bf16 tensor as float32 (exactly: both half
// types widen without rounding).
func (t *Tensor) Float32s() ([]float32, error) {
	switch t.DType {
	case plan.F32:
		return Float32s(t.Data), nil
	case plan.F16, plan.BF16:
		h := uint16s(t.Data)
		xs := make([]float32, len(h))
		for i, v := range h {
			xs[i] = halfToF32(t.DType, v)
		}
		return xs, nil
	}
	return nil, fmt.Errorf("%s tensor read as float32 (read it with Int32s or Uint32s)", t.DType)
}

// Int32s returns the elements of an i32 tensor.
func (t *Tensor) Int32s() ([]int32, error) {
	if t.DType != plan.I32 {
		return nil, fmt.Errorf("%s tensor read as int32", t.DType)
	}
	return Int32s(t.Data), nil
}

// Uint32s returns the elements of a u32 tensor.
func (t *Tensor) Uint32s() ([]uint32, error) {
	if t.DType != plan.U32 {
		return nil, fmt.Errorf("%s tensor read as uint32", t.DType)
	}
	xs := make([]uint32, len(t.Data)/4)
	for i := range xs {
		xs[i] = binary.LittleEndian.Uint32(t.Data[4*i:])
	}
	return xs, nil
}

// Uint16s returns the raw bits of an f16 or bf16 tensor.
func (t *Tensor) Uint16s() ([]uint16, error) {
	if t.DType != plan.F16 && t.DType != plan.BF16 {
		return nil, fmt.Errorf("%s tensor read as 16-bit floats", t.DType)
	}
	return uint16s(t.Data), nil
}

// Shaped is a flat slice of values with the shape they have, for Encode: a Shaped value must
// have exactly the input's shape, where a bare slice is checked by its element count only.
type Shaped struct {
	Shape  []int64
	Values any
}

// WithShape attaches a shape to values (a slice Encode accepts), so that Encode checks the shape
// as well as the element count:
//
//	res, err := m.Call(ctx, "forward", map[string]any{"x": engine.WithShape(xs, 4, 16)})
func WithShape(values any, shape ...int64) Shaped {
	return Shaped{Shape: shape, Values: values}
}

// Encode returns x in the layout of the plan value v (an input of a function), for Run. x may be
//
//	[]float32        for an f32, f16 or bf16 input (half types round to nearest even)
//	[]uint16         for an f16 or bf16 input: the raw bits
//	[]int32, []int   for an i32 input, or a u32 input when no element is negative
//	[]uint32         for a u32 input, or an i32 input when no element exceeds MaxInt32
//	a number         (int, int32, int64, uint32, float32, float64) for an input of one element;
//	                 an integer for a float input only when the float holds it exactly, a float
//	                 for an integer input never (it would truncate silently)
//	[]byte           the plan layout itself, exactly v.Bytes() long
//	*Tensor          of v's dtype and shape
//	Shaped           (WithShape) any of the slices above with its shape, which must be v's
//
// A bare slice must have as many elements as v's shape; errors name the input, what was given
// and what the plan wants ("input x: 12 values for f32[4 16] (64 elements)").
func Encode(v *plan.Value, x any) ([]byte, error) {
	n, err := v.DType.Bytes(v.Shape)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", v.Name, err)
	}
	elems := 1
	for _, d := range v.Shape {
		elems *= int(d)
	}
	want := fmt.Sprintf("%s%v", v.DType, v.Shape)
	count := func(have int) error {
		if have != elems {
			return fmt.Errorf("input %s: %d values for %s (%d elements)", v.Name, have, want, elems)
		}
		return nil
	}
	kind := func(what string) error {
		return fmt.Errorf("input %s: %s for %s", v.Name, what, want)
	}
	switch x := x.(type) {
	case Shaped:
		if !sameShape(x.Shape, v.Shape) {
			return nil, fmt.Errorf("input %s: shape %v, the plan wants %s", v.Name, x.Shape, want)
		}
		if _, nested := x.Values.(Shaped); nested {
			return nil, kind("a Shaped value inside a Shaped value")
		}
		return Encode(v, x.Values)
	case *Tensor:
		if x == nil {
			return nil, kind("a nil *Tensor")
		}
		if x.DType != v.DType || !sameShape(x.Shape, v.Shape) {
			return nil, kind(fmt.Sprintf("a %s tensor", x))
		}
		if len(x.Data) != int(n) {
			return nil, kind(fmt.Sprintf("a %s tensor of %d bytes (want %d)", x, len(x.Data), n))
		}
		return x.Data, nil
	case []byte:
		if len(x) != int(n) {
			return nil, fmt.Errorf("input %s: %d bytes for %s (%d bytes)", v.Name, len(x), want, n)
		}
		return x, nil
	case []float32:
		if err := count(len(x)); err != nil {
			return nil, err
		}
		switch v.DType {
		case plan.F32:
			return Float32Bytes(x), nil
		case plan.F16, plan.BF16:
			b := make([]byte, 2*len(x))
			for i, f := range x {
				binary.LittleEndian.PutUint16(b[2*i:], f32ToHalf(v.DType, f))
			}
			return b, nil
		}
		return nil, kind("float32 values (convert them explicitly: an integer input would truncate)")
	case []uint16:
		if v.DType != plan.F16 && v.DType != plan.BF16 {
			return nil, kind("16-bit float bits ([]uint16)")
		}
		if err := count(len(x)); err != nil {
			return nil, err
		}
		b := make([]byte, 2*len(x))
		for i, h := range x {
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b, nil
	case []int32:
		ws := make([]int64, len(x))
		for i, e := range x {
			ws[i] = int64(e)
		}
		return encodeInts(v, ws, "int32", count, kind)
	case []int:
		ws := make([]int64, len(x))
		for i, e := range x {
			ws[i] = int64(e)
		}
		return encodeInts(v, ws, "int", count, kind)
	case []uint32:
		ws := make([]int64, len(x))
		for i, e := range x {
			ws[i] = int64(e)
		}
		return encodeInts(v, ws, "uint32", count, kind)
	case int:
		return encodeScalar(v, int64(x), 0, false, elems, kind)
	case int32:
		return encodeScalar(v, int64(x), 0, false, elems, kind)
	case int64:
		return encodeScalar(v, x, 0, false, elems, kind)
	case uint32:
		return encodeScalar(v, int64(x), 0, false, elems, kind)
	case float32:
		return encodeScalar(v, 0, float64(x), true, elems, kind)
	case float64:
		return encodeScalar(v, 0, x, true, elems, kind)
	case nil:
		return nil, kind("nil")
	}
	return nil, kind(fmt.Sprintf("a %T (want a slice of float32, int32, int, uint32 or uint16, a number, []byte, *Tensor or Shaped)", x))
}

func sameShape(have, want []int64) bool {
	if len(want) == 0 && len(have) == 1 && have[0] == 1 {
		return true // a scalar given as a one-element vector
	}
	if len(have) != len(want) {
		return false
	}
	for i := range have {
		if have[i] != want[i] {
			return false
		}
	}
	return true
}

// encodeInts encodes integer values for an i32, u32 or float input, checking the range.
func encodeInts(v *plan.Value, xs []int64, what string, count func(int) error, kind func(string) error) ([]byte, error) {
	if err := count(len(xs)); err != nil {
		return nil, err
	}
	lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
	switch v.DType {
	case plan.I32:
	case plan.U32:
		lo, hi = 0, math.MaxUint32
	default:
		return nil, kind(what + " values (give float32 values for a float input)")
	}
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		if x < lo || x > hi {
			return nil, fmt.Errorf("input %s: element %d is %d, outside %s's range", v.Name, i, x, v.DType)
		}
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b, nil
}

// encodeScalar encodes one number for an input of one element.
func encodeScalar(v *plan.Value, i int64, f float64, isFloat bool, elems int, kind func(string) error) ([]byte, error) {
	if elems != 1 {
		return nil, kind(fmt.Sprintf("one number (want %d values)", elems))
	}
	isFloatInput := v.DType == plan.F32 || v.DType == plan.F16 || v.DType == plan.BF16
	if isFloat {
		if !isFloatInput {
			return nil, kind(fmt.Sprintf("the float %v (an integer input would truncate it; convert it explicitly)", f))
		}
		return Encode(v, []float32{float32(f)})
	}
	if isFloatInput {
		g := float32(i)
		if v.DType != plan.F32 {
			g = halfToF32(v.DType, f32ToHalf(v.DType, g))
		}
		if int64(g) != i || math.Abs(float64(i)) > 1<<24 {
			return nil, kind(fmt.Sprintf("the integer %d, which %s cannot hold exactly", i, v.DType))
		}
		return Encode(v, []float32{g})
	}
	return encodeInts(v, []int64{i}, "integer", func(int) error { return nil }, kind)
}

// Decode wraps the bytes of an output (or input) v as a Tensor; the bytes are not copied.
func Decode(v *plan.Value, b []byte) (*Tensor, error) {
	n, err := v.DType.Bytes(v.Shape)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.Name, err)
	}
	if len(b) != int(n) {
		return nil, fmt.Errorf("%s: %d bytes for %s%v (%d bytes)", v.Name, len(b), v.DType, v.Shape, n)
	}
	return &Tensor{DType: v.DType, Shape: v.Shape, Data: b}, nil
}

// Inputs encodes named values (see Encode) into Run's byte map for function f, checking that
// every input of f is given exactly once and that no unknown name is given.
//
// A function with a run-time length (plan.Function.Length: a prompt of 1..512 tokens) takes its
// bounded inputs with k·n rows for one n in the length's range, where the plan's shape has k·max
// rows: tokens i32[512] takes 1 to 512 token ids. Every bounded input must give the same n.
func Inputs(f *plan.Function, values map[string]any) (map[string][]byte, error) {
	out := make(map[string][]byte, len(f.Inputs))
	n, nFrom := -1, ""
	for i := range f.Inputs {
		v := &f.Inputs[i]
		x, ok := values[v.Name]
		if !ok {
			return nil, fmt.Errorf("function %s: input %s (%s%v) is missing; it takes %s", f.Name, v.Name, v.DType, v.Shape, Signature(f.Inputs))
		}
		if v.Bounded && f.Length != nil {
			rows, err := boundedRows(f.Length, v, x)
			if err != nil {
				return nil, fmt.Errorf("function %s: %w", f.Name, err)
			}
			if n >= 0 && rows != n {
				return nil, fmt.Errorf("function %s: input %s gives %s = %d, input %s gives %d", f.Name, v.Name, f.Length.Name, rows, nFrom, n)
			}
			n, nFrom = rows, v.Name
			w := atLength(f.Length, v, n)
			v = &w
		}
		b, err := Encode(v, x)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		out[v.Name] = b
	}
	for name := range values {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("function %s has no input %q; it takes %s", f.Name, name, Signature(f.Inputs))
		}
	}
	return out, nil
}

// atLength is the bounded value v as a run at length n has it: k·n rows of its leading axis.
func atLength(l *plan.Length, v *plan.Value, n int) plan.Value {
	w := *v
	w.Shape = append([]int64(nil), v.Shape...)
	w.Shape[0] = v.Shape[0] / int64(l.Max) * int64(n)
	return w
}

// boundedRows is the run-time length n that x gives the bounded input v: its element count (or
// its shape's leading axis, or its bytes) over one length unit's worth.
func boundedRows(l *plan.Length, v *plan.Value, x any) (int, error) {
	if len(v.Shape) == 0 || l.Max == 0 || v.Shape[0]%int64(l.Max) != 0 {
		return 0, fmt.Errorf("input %s: %s%v is not bounded by %s ≤ %d", v.Name, v.DType, v.Shape, l.Name, l.Max)
	}
	k := v.Shape[0] / int64(l.Max)
	unit := k // elements per unit of n
	for _, d := range v.Shape[1:] {
		unit *= d
	}
	var count int64
	switch x := x.(type) {
	case Shaped:
		count = 1
		for _, d := range x.Shape {
			count *= d
		}
	case *Tensor:
		if x == nil {
			return 0, fmt.Errorf("input %s: a nil *Tensor", v.Name)
		}
		count = int64(x.Len())
	case []byte:
		size, err := v.DType.Bytes([]int64{unit})
		if err != nil || size == 0 || int64(len(x))%size != 0 {
			return 0, fmt.Errorf("input %s: %d bytes, not whole rows of %s%v", v.Name, len(x), v.DType, v.Shape)
		}
		count = int64(len(x)) / size * unit
	case []float32:
		count = int64(len(x))
	case []uint16:
		count = int64(len(x))
	case []int32:
		count = int64(len(x))
	case []int:
		count = int64(len(x))
	case []uint32:
		count = int64(len(x))
	default:
		count = 1
	}
	if count%unit != 0 || count/unit < int64(l.Min) || count/unit > int64(l.Max) {
		return 0, fmt.Errorf("input %s: %d values for %s%v, which takes %d·%s values for %s in %d..%d",
			v.Name, count, v.DType, v.Shape, unit, l.Name, l.Name, l.Min, l.Max)
	}
	return int(count / unit), nil
}

// Results are the outputs of one Call, by name, in the plan's layout (Bytes), with typed
// accessors that check the output's dtype.
type Results struct {
	Function *plan.Function
	Bytes    map[string][]byte
}

// Tensor returns output name as a Tensor (its bytes are not copied).
func (r *Results) Tensor(name string) (*Tensor, error) {
	if r == nil || r.Function == nil {
		return nil, fmt.Errorf("output %s: no results (a nil Results, or one without its function)", name)
	}
	for i := range r.Function.Outputs {
		v := &r.Function.Outputs[i]
		if v.Name != name {
			continue
		}
		b, ok := r.Bytes[name]
		if !ok {
			return nil, fmt.Errorf("function %s: output %s was not read back", r.Function.Name, name)
		}
		if l := r.Function.Length; v.Bounded && l != nil && l.Max > 0 {
			// A run at length n returns k·n rows.
			if rb, err := v.RowBytes(l.Max); err == nil && rb > 0 && uint64(len(b))%rb == 0 {
				w := atLength(l, v, int(uint64(len(b))/rb))
				return Decode(&w, b)
			}
		}
		return Decode(v, b)
	}
	return nil, fmt.Errorf("function %s has no output %q; it returns %s", r.Function.Name, name, Signature(r.Function.Outputs))
}

// Float32s returns an f32, f16 or bf16 output as float32 values.
func (r *Results) Float32s(name string) ([]float32, error) {
	t, err := r.Tensor(name)
	if err != nil {
		return nil, err
	}
	xs, err := t.Float32s()
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", name, err)
	}
	return xs, nil
}

// Int32s returns an i32 output.
func (r *Results) Int32s(name string) ([]int32, error) {
	t, err := r.Tensor(name)
	if err != nil {
		return nil, err
	}
	xs, err := t.Int32s()
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", name, err)
	}
	return xs, nil
}

// Uint16s returns the raw bits of an f16 or bf16 output.
func (r *Results) Uint16s(name string) ([]uint16, error) {
	t, err := r.Tensor(name)
	if err != nil {
		return nil, err
	}
	xs, err := t.Uint16s()
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", name, err)
	}
	return xs, nil
}

// Shape is output name's shape in these results (for a bounded output, the rows this run
// returned), or nil when the function has no such output.
func (r *Results) Shape(name string) []int64 {
	if t, err := r.Tensor(name); err == nil {
		return t.Shape
	}
	if r == nil || r.Function == nil {
		return nil
	}
	for _, v := range r.Function.Outputs {
		if v.Name == name {
			return v.Shape
		}
	}
	return nil
}

// Float32Bytes encodes xs as f32 little-endian bytes.
func Float32Bytes(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Int32Bytes encodes xs as i32 little-endian bytes (the layout of token ids and positions).
func Int32Bytes(xs ...int32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// Float32s decodes f32 little-endian bytes; a trailing partial element is ignored.
func Float32s(b []byte) []float32 {
	xs := make([]float32, len(b)/4)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}

// Int32s decodes i32 little-endian bytes; a trailing partial element is ignored.
func Int32s(b []byte) []int32 {
	xs := make([]int32, len(b)/4)
	for i := range xs {
		xs[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}

func uint16s(b []byte) []uint16 {
	xs := make([]uint16, len(b)/2)
	for i := range xs {
		xs[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return xs
}

// halfToF32 widens f16 or bf16 bits to float32 (exact).
func halfToF32(d plan.DType, h uint16) float32 {
	if d == plan.BF16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	return float16.Frombits(h).Float32()
}

// f32ToHalf rounds f to f16 or bf16 bits, to nearest even (NaN stays a quiet NaN).
func f32ToHalf(d plan.DType, f float32) uint16 {
	if d == plan.BF16 {
		b := math.Float32bits(f)
		if b&0x7fffffff > 0x7f800000 {
			return uint16(b>>16) | 0x40
		}
		b += 0x7fff + (b>>16)&1
		return uint16(b >> 16)
	}
	return float16.Fromfloat32(f).Bits()
}

// Signature formats values as "tokens i32[16], pos i32[]" for messages.
func Signature(vs []plan.Value) string {
	if len(vs) == 0 {
		return "nothing"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%s %s%v", v.Name, v.DType, v.Shape)
	}
	return strings.Join(parts, ", ")
}
