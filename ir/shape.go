package ir

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Shape is a static tensor shape. A scalar has rank 0.
type Shape []int

// Rank is the number of dimensions.
func (s Shape) Rank() int { return len(s) }

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// CheckedElements is NumElements, with ok false when a dimension is negative or the product
// exceeds 2^62 (where NumElements would wrap around, e.g. to 0 for [2^32, 2^32]).
func (s Shape) CheckedElements() (n int, ok bool) {
	n = 1
	for _, d := range s {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > 1<<62 {
			return 0, false
		}
		n = int(lo)
	}
	return n, true
}

// Equal reports whether both shapes have the same dimensions.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy.
func (s Shape) Clone() Shape { return append(Shape{}, s...) }

func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteByte(']')
	return b.String()
}

// Strides returns the row-major element strides.
func (s Shape) Strides() []int {
	st := make([]int, len(s))
	n := 1
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = n
		n *= s[i]
	}
	return st
}

// Broadcast returns the NumPy broadcast of the shapes, or an error naming them.
func Broadcast(shapes ...Shape) (Shape, error) {
	r := 0
	for _, s := range shapes {
		r = max(r, len(s))
	}
	out := make(Shape, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			switch {
			case out[off+i] == d || d == 1:
			case out[off+i] == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %s do not broadcast", shapeList(shapes))
			}
		}
	}
	return out, nil
}

func shapeList(shapes []Shape) string {
	parts := make([]string, len(shapes))
	for i, s := range shapes {
		parts[i] = s.String()
	}
	return strings.Join(parts, " and ")
}

// Type is a tensor type: element type and static shape.
type Type struct {
	DType DType
	Shape Shape
}

// T is shorthand for a Type.
func T(d DType, dims ...int) Type { return Type{d, Shape(dims)} }

// Bytes is the size of a tensor of this type. A block-quantized type stores its last axis in
// whole blocks (CheckBlocks); for one that does not, Bytes is 0.
func (t Type) Bytes() int {
	if f := quantFormats[t.DType]; f != nil {
		n, err := f.Bytes(t.Shape)
		if err != nil {
			return 0
		}
		return n
	}
	return t.Shape.NumElements() * t.DType.Size()
}

// CheckBlocks reports whether a block-quantized type has a shape its blocks tile: rank ≥ 1
// and a last axis that is a whole number of blocks (ggml's blocks never cross a row). Other
// types always pass.
func (t Type) CheckBlocks() error {
	f := quantFormats[t.DType]
	if f == nil {
		return nil
	}
	if t.Shape.Rank() == 0 {
		return fmt.Errorf("%s: a block-quantized tensor needs at least one axis", t)
	}
	if n := t.Shape[t.Shape.Rank()-1]; n%f.BlockElems != 0 {
		return fmt.Errorf("%s: the last axis (%d) is not a whole number of %s blocks of %d elements", t, n, f.Name, f.BlockElems)
	}
	return nil
}

// Equal reports whether the dtypes and shapes are equal.
func (t Type) Equal(u Type) bool { return t.DType == u.DType && t.Shape.Equal(u.Shape) }

// String formats a type as "f32[2,3]".
func (t Type) String() string { return t.DType.String() + t.Shape.String() }
