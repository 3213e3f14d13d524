package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// NewValue makes a metadata value from a Go value: uint8 … float64, bool and string give the
// scalar types, slices of them arrays, and []Value an array of arrays (whose elements must be
// arrays); a Value is returned as it is.
//
//	v, _ := gguf.NewValue([]string{"<s>", "</s>"}) // an array of string
func NewValue(x any) (Value, error) {
	s := func(t ValueType) Value { return Value{Type: t} }
	arr := func(t ValueType, a any) Value { return Value{Type: Array, Elem: t, arr: a} }
	switch x := x.(type) {
	case Value:
		return x, nil
	case uint8:
		v := s(Uint8)
		v.u = uint64(x)
		return v, nil
	case int8:
		v := s(Int8)
		v.i = int64(x)
		return v, nil
	case uint16:
		v := s(Uint16)
		v.u = uint64(x)
		return v, nil
	case int16:
		v := s(Int16)
		v.i = int64(x)
		return v, nil
	case uint32:
		v := s(Uint32)
		v.u = uint64(x)
		return v, nil
	case int32:
		v := s(Int32)
		v.i = int64(x)
		return v, nil
	case uint64:
		v := s(Uint64)
		v.u = x
		return v, nil
	case int64:
		v := s(Int64)
		v.i = x
		return v, nil
	case float32:
		v := s(Float32)
		v.f = float64(x)
		return v, nil
	case float64:
		v := s(Float64)
		v.f = x
		return v, nil
	case bool:
		v := s(Bool)
		if x {
			v.u = 1
		}
		return v, nil
	case string:
		v := s(String)
		v.s = x
		return v, nil
	case []uint8:
		return arr(Uint8, x), nil
	case []int8:
		return arr(Int8, x), nil
	case []uint16:
		return arr(Uint16, x), nil
	case []int16:
		return arr(Int16, x), nil
	case []uint32:
		return arr(Uint32, x), nil
	case []int32:
		return arr(Int32, x), nil
	case []uint64:
		return arr(Uint64, x), nil
	case []int64:
		return arr(Int64, x), nil
	case []float32:
		return arr(Float32, x), nil
	case []float64:
		return arr(Float64, x), nil
	case []bool:
		return arr(Bool, x), nil
	case []string:
		return arr(String, x), nil
	case []Value:
		for i, e := range x {
			if e.Type != Array {
				return Value{}, fmt.Errorf("gguf: element %d of an array of arrays is %s", i, e.TypeString())
			}
		}
		return arr(Array, x), nil
	}
	return Value{}, fmt.Errorf("gguf: no metadata type for %T", x)
}

// MustValue is NewValue for values known to be of a supported type (tests, constants).
func MustValue(x any) Value {
	v, err := NewValue(x)
	if err != nil {
		panic(err)
	}
	return v
}

// Builder makes a GGUF file in memory: for tests, and tools that write small files. The
// general.alignment entry, when added, sets the data alignment (else 32).
type Builder struct {
	Version uint32 // 3 when 0
	kv      []KV
	tensors []builderTensor
}

type builderTensor struct {
	name string
	typ  uint32
	ne   []uint64
	data []byte
}

// Add appends a metadata entry.
func (b *Builder) Add(key string, v Value) { b.kv = append(b.kv, KV{key, v}) }

// Tensor appends a tensor: ggml type typ, ne innermost first, and its bytes.
func (b *Builder) Tensor(name string, typ uint32, ne []uint64, data []byte) {
	b.tensors = append(b.tensors, builderTensor{name, typ, append([]uint64(nil), ne...), data})
}

// Bytes encodes the file.
func (b *Builder) Bytes() ([]byte, error) {
	var w bytes.Buffer
	le := binary.LittleEndian
	put := func(x any) { binary.Write(&w, le, x) }
	str := func(s string) { put(uint64(len(s))); w.WriteString(s) }
	ver := b.Version
	if ver == 0 {
		ver = 3
	}
	align := uint64(DefaultAlignment)
	w.WriteString(Magic)
	put(ver)
	put(uint64(len(b.tensors)))
	put(uint64(len(b.kv)))
	for _, kv := range b.kv {
		str(kv.Key)
		put(uint32(kv.Value.Type))
		if err := writeValue(&w, kv.Value); err != nil {
			return nil, fmt.Errorf("gguf: key %s: %w", kv.Key, err)
		}
		if kv.Key == "general.alignment" {
			if a, ok := kv.Value.AsUint(); ok && a > 0 {
				align = a
			}
		}
	}
	off := uint64(0)
	for _, t := range b.tensors {
		str(t.name)
		put(uint32(len(t.ne)))
		for _, d := range t.ne {
			put(d)
		}
		put(t.typ)
		put(off)
		off += uint64(len(t.data))
		off = (off + align - 1) / align * align
	}
	for uint64(w.Len())%align != 0 {
		w.WriteByte(0)
	}
	start := uint64(w.Len())
	for _, t := range b.tensors {
		w.Write(t.data)
		for (uint64(w.Len())-start)%align != 0 {
			w.WriteByte(0)
		}
	}
	return w.Bytes(), nil
}

func writeValue(w *bytes.Buffer, v Value) error {
	le := binary.LittleEndian
	put := func(x any) { binary.Write(w, le, x) }
	switch v.Type {
	case Uint8:
		put(uint8(v.u))
	case Int8:
		put(int8(v.i))
	case Uint16:
		put(uint16(v.u))
	case Int16:
		put(int16(v.i))
	case Uint32:
		put(uint32(v.u))
	case Int32:
		put(int32(v.i))
	case Uint64:
		put(v.u)
	case Int64:
		put(v.i)
	case Float32:
		put(math.Float32bits(float32(v.f)))
	case Float64:
		put(math.Float64bits(v.f))
	case Bool:
		put(uint8(v.u))
	case String:
		put(uint64(len(v.s)))
		w.WriteString(v.s)
	case Array:
		put(uint32(v.Elem))
		put(uint64(v.Len()))
		switch a := v.arr.(type) {
		case []string:
			for _, s := range a {
				put(uint64(len(s)))
				w.WriteString(s)
			}
		case []bool:
			for _, x := range a {
				if x {
					w.WriteByte(1)
				} else {
					w.WriteByte(0)
				}
			}
		case []Value:
			for _, e := range a {
				if err := writeValue(w, e); err != nil {
					return err
				}
			}
		default:
			put(a)
		}
	default:
		return fmt.Errorf("unknown value type %d", uint32(v.Type))
	}
	return nil
}
