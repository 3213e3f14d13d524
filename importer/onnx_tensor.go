package importer

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// How ONNX's element types are held in vkc's (ir.DType), which has no 64-bit, 8-bit or 16-bit
// integers and no float64:
//
//	float32, float16, bfloat16, int32, uint32, bool   as themselves
//	float64                                           f32 (rounded to nearest; results are
//	                                                  widened back exactly)
//	int64                                             i32, when every value fits (checked for
//	                                                  inputs and constants; results are
//	                                                  sign-extended)
//	uint64                                            u32, when every value fits (likewise)
//	int8, int16                                       i32 (sign-extended); results keep their
//	                                                  low 8 or 16 bits
//	uint8, uint16                                     u32; results keep their low bits
//
// Arithmetic on a widened narrow integer wraps at 32 bits and the result is cut back to the
// narrow type at the function's boundary, so add, sub, mul and neg wrap exactly as ONNX's do;
// comparisons, min, max and division are exact. A 64-bit integer result past the 32-bit range
// wraps and cannot be detected: int64 and uint64 are right for values that fit 32 bits.
// Strings, complex numbers and the 8- and 4-bit float and integer types have no vkc form.

// IRDType is the vkc dtype that holds ONNX type d.
func IRDType(d onnx.DataType) (ir.DType, error) {
	switch d {
	case onnx.Float, onnx.Double:
		return ir.F32, nil
	case onnx.Float16:
		return ir.F16, nil
	case onnx.BFloat16:
		return ir.BF16, nil
	case onnx.Int32, onnx.Int64, onnx.Int8, onnx.Int16:
		return ir.I32, nil
	case onnx.Uint32, onnx.Uint64, onnx.Uint8, onnx.Uint16:
		return ir.U32, nil
	case onnx.Bool:
		return ir.Bool, nil
	}
	return ir.InvalidDType, fmt.Errorf("ONNX element type %s has no vkc form (vkc has f32, f16, bf16, i32, u32 and bool)", d)
}

// ONNXDType is the ONNX type of a vkc dtype.
func ONNXDType(d ir.DType) onnx.DataType {
	switch d {
	case ir.F32:
		return onnx.Float
	case ir.F16:
		return onnx.Float16
	case ir.BF16:
		return onnx.BFloat16
	case ir.I32:
		return onnx.Int32
	case ir.U32:
		return onnx.Uint32
	case ir.Bool:
		return onnx.Bool
	}
	return onnx.Undefined
}

// shapeOf converts ONNX dims to a vkc shape: every dimension must be positive (vkc has no
// empty tensors).
func shapeOf(what string, dims []int64) (ir.Shape, error) {
	s := make(ir.Shape, len(dims))
	for i, d := range dims {
		if d <= 0 || d > math.MaxInt32 {
			if d == 0 {
				return nil, fmt.Errorf("%s has a zero dimension %v: vkc has no empty tensors", what, dims)
			}
			return nil, fmt.Errorf("%s has dimension %d of %d", what, i, d)
		}
		s[i] = int(d)
	}
	return s, nil
}

// TensorFromONNX converts an ONNX tensor's elements (raw, little-endian, as Tensor.Data gives
// them) of type dt and the given dims to the vkc tensor that holds them. A 64-bit integer that
// does not fit 32 bits is an error naming the tensor, the element and its value.
func TensorFromONNX(what string, dt onnx.DataType, dims []int64, raw []byte) (*ir.Tensor, error) {
	d, err := IRDType(dt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s, err := shapeOf(what, dims)
	if err != nil {
		return nil, err
	}
	x := ir.NewTensor(ir.Type{DType: d, Shape: s})
	n := s.NumElements()
	if len(raw) != n*dt.Size() {
		return nil, fmt.Errorf("%s: %d bytes for %d elements of %s", what, len(raw), n, dt)
	}
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		switch dt {
		case onnx.Float, onnx.Int32, onnx.Uint32:
			copy(x.Data[4*i:], raw[4*i:4*i+4])
		case onnx.Float16, onnx.BFloat16:
			copy(x.Data[2*i:], raw[2*i:2*i+2])
		case onnx.Double:
			le.PutUint32(x.Data[4*i:], math.Float32bits(float32(math.Float64frombits(le.Uint64(raw[8*i:])))))
		case onnx.Int64:
			v := int64(le.Uint64(raw[8*i:]))
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("%s: element %d is %d, outside the i32 range vkc holds int64 in", what, i, v)
			}
			le.PutUint32(x.Data[4*i:], uint32(int32(v)))
		case onnx.Uint64:
			v := le.Uint64(raw[8*i:])
			if v > math.MaxUint32 {
				return nil, fmt.Errorf("%s: element %d is %d, outside the u32 range vkc holds uint64 in", what, i, v)
			}
			le.PutUint32(x.Data[4*i:], uint32(v))
		case onnx.Int8:
			le.PutUint32(x.Data[4*i:], uint32(int32(int8(raw[i]))))
		case onnx.Int16:
			le.PutUint32(x.Data[4*i:], uint32(int32(int16(le.Uint16(raw[2*i:])))))
		case onnx.Uint8:
			le.PutUint32(x.Data[4*i:], uint32(raw[i]))
		case onnx.Uint16:
			le.PutUint32(x.Data[4*i:], uint32(le.Uint16(raw[2*i:])))
		case onnx.Bool:
			if raw[i] != 0 {
				x.Data[i] = 1
			}
		}
	}
	return x, nil
}

// TensorToONNX converts a vkc tensor back to ONNX type dt (little-endian raw elements): floats
// widen exactly, integers sign- or zero-extend to 64 bits, and narrow integers keep their low
// bits (ONNX's wrap-around). x must have the dtype IRDType(dt) gives.
func TensorToONNX(x *ir.Tensor, dt onnx.DataType) ([]byte, error) {
	d, err := IRDType(dt)
	if err != nil {
		return nil, err
	}
	if x.Type.DType != d {
		return nil, fmt.Errorf("a %s tensor cannot hold ONNX %s (that needs %s)", x.Type.DType, dt, d)
	}
	n := x.NumElements()
	out := make([]byte, n*dt.Size())
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		switch dt {
		case onnx.Float, onnx.Int32, onnx.Uint32:
			copy(out[4*i:], x.Data[4*i:4*i+4])
		case onnx.Float16, onnx.BFloat16:
			copy(out[2*i:], x.Data[2*i:2*i+2])
		case onnx.Double:
			le.PutUint64(out[8*i:], math.Float64bits(float64(math.Float32frombits(le.Uint32(x.Data[4*i:])))))
		case onnx.Int64:
			le.PutUint64(out[8*i:], uint64(int64(int32(le.Uint32(x.Data[4*i:])))))
		case onnx.Uint64:
			le.PutUint64(out[8*i:], uint64(le.Uint32(x.Data[4*i:])))
		case onnx.Int8, onnx.Uint8:
			out[i] = x.Data[4*i]
		case onnx.Int16, onnx.Uint16:
			copy(out[2*i:], x.Data[4*i:4*i+2])
		case onnx.Bool:
			out[i] = x.Data[i]
		}
	}
	return out, nil
}

// ONNXValues decodes ONNX raw elements of type dt as float64 (for comparisons and constant
// folding). Integers beyond 2⁵³ lose precision; ints gives them exactly.
func ONNXValues(dt onnx.DataType, raw []byte) ([]float64, error) {
	sz := dt.Size()
	if sz == 0 || dt == onnx.Complex64 || dt == onnx.Complex128 || len(raw)%sz != 0 {
		return nil, fmt.Errorf("cannot read %d bytes of %s", len(raw), dt)
	}
	n := len(raw) / sz
	v := make([]float64, n)
	le := binary.LittleEndian
	for i := range v {
		switch dt {
		case onnx.Float:
			v[i] = float64(math.Float32frombits(le.Uint32(raw[4*i:])))
		case onnx.Double:
			v[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		case onnx.Float16:
			v[i] = float64(ir.F16ToF32(le.Uint16(raw[2*i:])))
		case onnx.BFloat16:
			v[i] = float64(ir.BF16ToF32(le.Uint16(raw[2*i:])))
		case onnx.Int32:
			v[i] = float64(int32(le.Uint32(raw[4*i:])))
		case onnx.Uint32:
			v[i] = float64(le.Uint32(raw[4*i:]))
		case onnx.Int64:
			v[i] = float64(int64(le.Uint64(raw[8*i:])))
		case onnx.Uint64:
			v[i] = float64(le.Uint64(raw[8*i:]))
		case onnx.Int8:
			v[i] = float64(int8(raw[i]))
		case onnx.Uint8, onnx.Bool:
			v[i] = float64(raw[i])
		case onnx.Int16:
			v[i] = float64(int16(le.Uint16(raw[2*i:])))
		case onnx.Uint16:
			v[i] = float64(le.Uint16(raw[2*i:]))
		}
	}
	return v, nil
}

// onnxInts decodes integer elements exactly (bool and the integer types).
func onnxInts(dt onnx.DataType, raw []byte) ([]int64, error) {
	switch dt {
	case onnx.Int64:
		v := make([]int64, len(raw)/8)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		return v, nil
	case onnx.Uint64:
		v := make([]int64, len(raw)/8)
		for i := range v {
			u := binary.LittleEndian.Uint64(raw[8*i:])
			if u > math.MaxInt64 {
				return nil, fmt.Errorf("element %d is %d, too large", i, u)
			}
			v[i] = int64(u)
		}
		return v, nil
	case onnx.Int32, onnx.Uint32, onnx.Int8, onnx.Uint8, onnx.Int16, onnx.Uint16, onnx.Bool:
		f, err := ONNXValues(dt, raw)
		if err != nil {
			return nil, err
		}
		v := make([]int64, len(f))
		for i, x := range f {
			v[i] = int64(x)
		}
		return v, nil
	}
	return nil, fmt.Errorf("%s is not an integer type", dt)
}

// encodeInts writes int64 values as ONNX raw elements of integer type dt (truncating).
func encodeInts(dt onnx.DataType, v []int64) []byte {
	out := make([]byte, len(v)*dt.Size())
	le := binary.LittleEndian
	for i, x := range v {
		switch dt.Size() {
		case 1:
			out[i] = byte(x)
		case 2:
			le.PutUint16(out[2*i:], uint16(x))
		case 4:
			le.PutUint32(out[4*i:], uint32(x))
		case 8:
			le.PutUint64(out[8*i:], uint64(x))
		}
	}
	return out
}

// encodeFloats writes float64 values as ONNX raw elements of type dt (rounding floats,
// truncating toward zero for integers, ≠ 0 for bool).
func encodeFloats(dt onnx.DataType, v []float64) []byte {
	le := binary.LittleEndian
	switch dt {
	case onnx.Float:
		out := make([]byte, 4*len(v))
		for i, x := range v {
			le.PutUint32(out[4*i:], math.Float32bits(float32(x)))
		}
		return out
	case onnx.Double:
		out := make([]byte, 8*len(v))
		for i, x := range v {
			le.PutUint64(out[8*i:], math.Float64bits(x))
		}
		return out
	case onnx.Float16, onnx.BFloat16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			if dt == onnx.Float16 {
				le.PutUint16(out[2*i:], ir.F16Bits(float32(x)))
			} else {
				le.PutUint16(out[2*i:], ir.BF16Bits(float32(x)))
			}
		}
		return out
	case onnx.Bool:
		out := make([]byte, len(v))
		for i, x := range v {
			if x != 0 {
				out[i] = 1
			}
		}
		return out
	}
	iv := make([]int64, len(v))
	for i, x := range v {
		iv[i] = int64(x)
	}
	return encodeInts(dt, iv)
}
