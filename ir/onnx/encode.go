package onnx

import (
	"encoding/binary"
	"math"
)

// Marshal encodes m as a ModelProto with the fields this package decodes (repeated scalars
// packed, as protobuf writers do by default), so that DecodeModel(Marshal(m)) equals m. Tests
// use it to build ONNX files without Python, and the fuzzers to check the decoder round-trips.
// Model-local functions (Model.Functions) are not written.
func Marshal(m *Model) []byte {
	w := &writer{}
	w.int64f(1, m.IRVersion)
	w.strf(2, m.ProducerName)
	w.strf(3, m.ProducerVersion)
	if m.Graph != nil {
		w.msg(7, func(w *writer) { encodeGraph(w, m.Graph) })
	}
	for _, op := range m.Opsets {
		w.msg(8, func(w *writer) {
			w.strf(1, op.Domain)
			w.int64f(2, op.Version)
		})
	}
	return w.buf
}

// MarshalTensor encodes t as a TensorProto.
func MarshalTensor(t *Tensor) []byte {
	w := &writer{}
	encodeTensor(w, t)
	return w.buf
}

func encodeGraph(w *writer, g *Graph) {
	for _, n := range g.Nodes {
		w.msg(1, func(w *writer) { encodeNode(w, n) })
	}
	w.strf(2, g.Name)
	for _, t := range g.Initializers {
		w.msg(5, func(w *writer) { encodeTensor(w, t) })
	}
	for i := 0; i < g.SparseInitializers; i++ {
		w.msg(15, func(*writer) {})
	}
	for _, l := range []struct {
		field int
		vs    []*ValueInfo
	}{{11, g.Inputs}, {12, g.Outputs}, {13, g.ValueInfo}} {
		for _, v := range l.vs {
			w.msg(l.field, func(w *writer) { encodeValueInfo(w, v) })
		}
	}
}

func encodeNode(w *writer, n *Node) {
	for _, s := range n.Inputs {
		w.bytesf(1, []byte(s)) // an empty name (an omitted optional input) is still written
	}
	for _, s := range n.Outputs {
		w.bytesf(2, []byte(s))
	}
	w.strf(3, n.Name)
	w.strf(4, n.OpType)
	for _, a := range n.Attrs {
		w.msg(5, func(w *writer) { encodeAttribute(w, a) })
	}
	w.strf(7, n.Domain)
}

func encodeAttribute(w *writer, a *Attribute) {
	w.strf(1, a.Name)
	if a.F != 0 || math.Signbit(float64(a.F)) {
		w.key(2, wireFixed32)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(a.F))
	}
	w.int64f(3, a.I)
	if a.S != nil {
		w.bytesf(4, a.S)
	}
	if a.T != nil {
		w.msg(5, func(w *writer) { encodeTensor(w, a.T) })
	}
	if a.G != nil {
		w.msg(6, func(w *writer) { encodeGraph(w, a.G) })
	}
	if len(a.Floats) > 0 {
		w.msg(7, func(w *writer) {
			for _, f := range a.Floats {
				w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(f))
			}
		})
	}
	if len(a.Ints) > 0 {
		w.msg(8, func(w *writer) {
			for _, v := range a.Ints {
				w.varint(uint64(v))
			}
		})
	}
	for _, s := range a.Strings {
		w.bytesf(9, s)
	}
	for _, t := range a.Tensors {
		w.msg(10, func(w *writer) { encodeTensor(w, t) })
	}
	for _, g := range a.Graphs {
		w.msg(11, func(w *writer) { encodeGraph(w, g) })
	}
	w.int64f(20, int64(a.Type))
	w.strf(21, a.RefAttrName)
}

func encodeValueInfo(w *writer, v *ValueInfo) {
	w.strf(1, v.Name)
	if v.Type == nil {
		return
	}
	w.msg(2, func(w *writer) {
		field := 0
		switch v.Type.Kind {
		case TypeTensor:
			field = 1
		case TypeSparseTensor:
			field = 8
		case TypeSequence:
			w.msg(4, func(*writer) {})
		case TypeMap:
			w.msg(5, func(*writer) {})
		case TypeOptional:
			w.msg(9, func(*writer) {})
		}
		if field == 0 {
			return
		}
		w.msg(field, func(w *writer) {
			w.int64f(1, int64(v.Type.Elem))
			if v.Type.HasShape {
				w.msg(2, func(w *writer) {
					for _, d := range v.Type.Dims {
						w.msg(1, func(w *writer) {
							if d.HasValue {
								w.key(1, wireVarint)
								w.varint(uint64(d.Value))
							} else if d.Param != "" {
								w.strf(2, d.Param)
							}
						})
					}
				})
			}
		})
	})
}

func encodeTensor(w *writer, t *Tensor) {
	if len(t.Dims) > 0 {
		w.msg(1, func(w *writer) {
			for _, d := range t.Dims {
				w.varint(uint64(d))
			}
		})
	}
	w.int64f(2, int64(t.DataType))
	if t.Segment {
		w.msg(3, func(*writer) {})
	}
	if len(t.FloatData) > 0 {
		w.msg(4, func(w *writer) {
			for _, f := range t.FloatData {
				w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(f))
			}
		})
	}
	if len(t.Int32Data) > 0 {
		w.msg(5, func(w *writer) {
			for _, v := range t.Int32Data {
				w.varint(uint64(int64(v)))
			}
		})
	}
	for _, s := range t.StringData {
		w.bytesf(6, s)
	}
	if len(t.Int64Data) > 0 {
		w.msg(7, func(w *writer) {
			for _, v := range t.Int64Data {
				w.varint(uint64(v))
			}
		})
	}
	w.strf(8, t.Name)
	if t.HasRaw {
		w.bytesf(9, t.RawData)
	}
	if len(t.DoubleData) > 0 {
		w.msg(10, func(w *writer) {
			for _, f := range t.DoubleData {
				w.buf = binary.LittleEndian.AppendUint64(w.buf, math.Float64bits(f))
			}
		})
	}
	if len(t.Uint64Data) > 0 {
		w.msg(11, func(w *writer) {
			for _, v := range t.Uint64Data {
				w.varint(v)
			}
		})
	}
	for _, kv := range t.External {
		w.msg(13, func(w *writer) {
			w.strf(1, kv.Key)
			w.strf(2, kv.Value)
		})
	}
	w.int64f(14, int64(t.DataLocation))
}
