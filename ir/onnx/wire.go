package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The protobuf wire format, as far as ONNX's messages use it: varints (int32, int64, uint64,
// enums, bools), fixed32 (float), fixed64 (double), and length-delimited fields (strings, bytes,
// sub-messages, packed repeated scalars). Groups (wire types 3 and 4) are obsolete and no ONNX
// message has one; they are an error.

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var errTruncated = errors.New("truncated")

// reader decodes one message's fields from buf.
type reader struct {
	buf []byte
	pos int
}

// next returns the next field's number and wire type; ok is false at the end of the message.
func (r *reader) next() (field int, wire int, ok bool, err error) {
	if r.pos >= len(r.buf) {
		return 0, 0, false, nil
	}
	start := r.pos
	key, err := r.varint()
	if err != nil {
		return 0, 0, false, err
	}
	field, wire = int(key>>3), int(key&7)
	if key>>3 == 0 || key>>3 > math.MaxInt32 {
		return 0, 0, false, fmt.Errorf("byte %d: invalid field number %d", start, key>>3)
	}
	return field, wire, true, nil
}

func (r *reader) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if r.pos >= len(r.buf) {
			return 0, fmt.Errorf("byte %d: varint: %w", r.pos, errTruncated)
		}
		b := r.buf[r.pos]
		r.pos++
		if i == 9 && b > 1 {
			return 0, fmt.Errorf("byte %d: varint overflows 64 bits", r.pos-1)
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("byte %d: varint longer than 10 bytes", r.pos)
}

func (r *reader) fixed32() (uint32, error) {
	if len(r.buf)-r.pos < 4 {
		return 0, fmt.Errorf("byte %d: fixed32: %w", r.pos, errTruncated)
	}
	v := binary.LittleEndian.Uint32(r.buf[r.pos:])
	r.pos += 4
	return v, nil
}

func (r *reader) fixed64() (uint64, error) {
	if len(r.buf)-r.pos < 8 {
		return 0, fmt.Errorf("byte %d: fixed64: %w", r.pos, errTruncated)
	}
	v := binary.LittleEndian.Uint64(r.buf[r.pos:])
	r.pos += 8
	return v, nil
}

// bytes returns a length-delimited field's contents (aliasing the input).
func (r *reader) bytes() ([]byte, error) {
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.buf)-r.pos) {
		return nil, fmt.Errorf("byte %d: a field of %d bytes runs past the end (%d left): %w", r.pos, n, len(r.buf)-r.pos, errTruncated)
	}
	b := r.buf[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// skip skips a field of the given wire type.
func (r *reader) skip(wire int) error {
	switch wire {
	case wireVarint:
		_, err := r.varint()
		return err
	case wireFixed64:
		_, err := r.fixed64()
		return err
	case wireBytes:
		_, err := r.bytes()
		return err
	case wireFixed32:
		_, err := r.fixed32()
		return err
	}
	return fmt.Errorf("byte %d: unsupported wire type %d", r.pos, wire)
}

// want checks a field's wire type.
func want(field, wire, w int, msg string) error {
	if wire != w {
		return fmt.Errorf("%s field %d has wire type %d, want %d", msg, field, wire, w)
	}
	return nil
}

func (r *reader) str(field, wire int, msg string) (string, error) {
	if err := want(field, wire, wireBytes, msg); err != nil {
		return "", err
	}
	b, err := r.bytes()
	return string(b), err
}

func (r *reader) int64v(field, wire int, msg string) (int64, error) {
	if err := want(field, wire, wireVarint, msg); err != nil {
		return 0, err
	}
	v, err := r.varint()
	return int64(v), err
}

// repeated appends one repeated scalar field's values to dst: packed (one length-delimited
// run) or unpacked (one tag per element), as the proto spec requires parsers to accept both.
// each decodes one element of the scalar's wire type from a reader.
func repeated[T any](r *reader, field, wire, elemWire int, msg string, dst []T, each func(*reader) (T, error)) ([]T, error) {
	if wire == wireBytes {
		b, err := r.bytes()
		if err != nil {
			return nil, err
		}
		sub := &reader{buf: b}
		for sub.pos < len(sub.buf) {
			v, err := each(sub)
			if err != nil {
				return nil, fmt.Errorf("%s field %d (packed): %w", msg, field, err)
			}
			dst = append(dst, v)
		}
		return dst, nil
	}
	if err := want(field, wire, elemWire, msg); err != nil {
		return nil, err
	}
	v, err := each(r)
	if err != nil {
		return nil, err
	}
	return append(dst, v), nil
}

func eachInt64(r *reader) (int64, error) {
	v, err := r.varint()
	return int64(v), err
}

func eachUint64(r *reader) (uint64, error) { return r.varint() }

func eachInt32(r *reader) (int32, error) {
	v, err := r.varint()
	return int32(v), err // int32 is sign-extended to 64 bits on the wire; the low 32 bits are the value
}

func eachFloat(r *reader) (float32, error) {
	v, err := r.fixed32()
	return math.Float32frombits(v), err
}

func eachDouble(r *reader) (float64, error) {
	v, err := r.fixed64()
	return math.Float64frombits(v), err
}

// writer encodes fields (Marshal's side).
type writer struct{ buf []byte }

func (w *writer) key(field, wire int) { w.varint(uint64(field)<<3 | uint64(wire)) }

func (w *writer) varint(v uint64) {
	for v >= 0x80 {
		w.buf = append(w.buf, byte(v)|0x80)
		v >>= 7
	}
	w.buf = append(w.buf, byte(v))
}

func (w *writer) int64f(field int, v int64) {
	if v != 0 {
		w.key(field, wireVarint)
		w.varint(uint64(v))
	}
}

func (w *writer) bytesf(field int, b []byte) {
	w.key(field, wireBytes)
	w.varint(uint64(len(b)))
	w.buf = append(w.buf, b...)
}

func (w *writer) strf(field int, s string) {
	if s != "" {
		w.bytesf(field, []byte(s))
	}
}

func (w *writer) msg(field int, enc func(*writer)) {
	sub := &writer{}
	enc(sub)
	w.bytesf(field, sub.buf)
}
