// Package onnx reads ONNX model files (.onnx, a protobuf ModelProto) and tensor files (.pb, a
// TensorProto), the messages of ONNX's onnx.proto3 that an importer needs: ModelProto,
// OperatorSetIdProto, GraphProto, NodeProto, AttributeProto, ValueInfoProto, TypeProto,
// TensorShapeProto and TensorProto (raw_data, the typed data fields packed or unpacked, and
// external data files).
//
// It is a small hand-written protobuf decoder rather than code generated from onnx.proto3 by
// protoc: the messages are few and stable, the wire format is simple, and a decoder of our own
// needs no protoc in CI, no generated files to keep in step, and no dependency beyond the
// standard library. It is fuzzed (FuzzDecodeModel, FuzzDecodeTensor). Fields this package does
// not model (doc strings, metadata, training info, sharding) are skipped; a field of a known
// number with the wrong wire type is an error naming the message and field.
//
// Decoded byte slices (raw_data, strings) alias the input; the input must not change while the
// result is in use.
package onnx

import (
	"fmt"
	"math"
)

// DataType is TensorProto.DataType.
type DataType int32

// The element types of TensorProto.DataType.
const (
	Undefined  DataType = 0
	Float      DataType = 1
	Uint8      DataType = 2
	Int8       DataType = 3
	Uint16     DataType = 4
	Int16      DataType = 5
	Int32      DataType = 6
	Int64      DataType = 7
	String     DataType = 8
	Bool       DataType = 9
	Float16    DataType = 10
	Double     DataType = 11
	Uint32     DataType = 12
	Uint64     DataType = 13
	Complex64  DataType = 14
	Complex128 DataType = 15
	BFloat16   DataType = 16
)

var dataTypeNames = map[DataType]string{
	Undefined: "undefined", Float: "float32", Uint8: "uint8", Int8: "int8", Uint16: "uint16", Int16: "int16",
	Int32: "int32", Int64: "int64", String: "string", Bool: "bool", Float16: "float16", Double: "float64",
	Uint32: "uint32", Uint64: "uint64", Complex64: "complex64", Complex128: "complex128", BFloat16: "bfloat16",
	17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
	23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}

// String names the type as the manifest and NumPy do ("float32", "int64").
func (d DataType) String() string {
	if s, ok := dataTypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("data type %d", int32(d))
}

// Size is the byte size of one element in raw_data, or 0 for a type this package cannot lay out
// (string, sub-byte and 8-bit float types).
func (d DataType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Float, Int32, Uint32:
		return 4
	case Int64, Double, Uint64, Complex64:
		return 8
	case Complex128:
		return 16
	}
	return 0
}

// Model is a ModelProto.
type Model struct {
	IRVersion       int64
	Opsets          []OpsetID
	ProducerName    string
	ProducerVersion string
	Graph           *Graph
	// Functions counts the model-local functions (FunctionProto), which this package does not
	// decode; an importer that meets a node calling one names it.
	Functions []string
}

// OpsetID is an OperatorSetIdProto: the domain ("" or "ai.onnx" is the default) and version.
type OpsetID struct {
	Domain  string
	Version int64
}

// Graph is a GraphProto.
type Graph struct {
	Name         string
	Nodes        []*Node
	Initializers []*Tensor
	// SparseInitializers counts sparse_initializer entries (not decoded).
	SparseInitializers int
	Inputs, Outputs    []*ValueInfo
	ValueInfo          []*ValueInfo
}

// Node is a NodeProto.
type Node struct {
	Name, OpType, Domain string
	Inputs, Outputs      []string
	Attrs                []*Attribute
}

// Attr returns the named attribute or nil.
func (n *Node) Attr(name string) *Attribute {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// AttrType is AttributeProto.AttributeType.
type AttrType int32

// The attribute types.
const (
	AttrUndefined    AttrType = 0
	AttrFloat        AttrType = 1
	AttrInt          AttrType = 2
	AttrString       AttrType = 3
	AttrTensor       AttrType = 4
	AttrGraph        AttrType = 5
	AttrFloats       AttrType = 6
	AttrInts         AttrType = 7
	AttrStrings      AttrType = 8
	AttrTensors      AttrType = 9
	AttrGraphs       AttrType = 10
	AttrSparseTensor AttrType = 11
	AttrTypeProto    AttrType = 13
)

func (t AttrType) String() string {
	names := map[AttrType]string{AttrUndefined: "undefined", AttrFloat: "float", AttrInt: "int", AttrString: "string",
		AttrTensor: "tensor", AttrGraph: "graph", AttrFloats: "floats", AttrInts: "ints", AttrStrings: "strings",
		AttrTensors: "tensors", AttrGraphs: "graphs", AttrSparseTensor: "sparse tensor", AttrTypeProto: "type proto"}
	if s, ok := names[t]; ok {
		return s
	}
	return fmt.Sprintf("attribute type %d", int32(t))
}

// Attribute is an AttributeProto. Graph-valued attributes (control flow) are decoded as graphs.
type Attribute struct {
	Name        string
	RefAttrName string // set inside function bodies only
	Type        AttrType
	F           float32
	I           int64
	S           []byte
	T           *Tensor
	G           *Graph
	Floats      []float32
	Ints        []int64
	Strings     [][]byte
	Tensors     []*Tensor
	Graphs      []*Graph
}

// ValueInfo is a ValueInfoProto: a graph input's or output's name and type.
type ValueInfo struct {
	Name string
	Type *TypeInfo // nil when absent
}

// TypeKind says which member of TypeProto's oneof is set.
type TypeKind uint8

// The kinds of TypeProto.
const (
	TypeUnknown TypeKind = iota
	TypeTensor
	TypeSequence
	TypeMap
	TypeOptional
	TypeSparseTensor
)

// TypeInfo is a TypeProto. Only tensor types carry an element type and shape here; the other
// kinds are recorded so an importer can name them.
type TypeInfo struct {
	Kind     TypeKind
	Elem     DataType
	HasShape bool  // a tensor type without a shape has unknown rank
	Dims     []Dim // when HasShape
}

// Dim is a TensorShapeProto.Dimension: a value, a symbolic name (dim_param), or neither (unknown).
type Dim struct {
	Value    int64
	Param    string
	HasValue bool
}

func (d Dim) String() string {
	switch {
	case d.HasValue:
		return fmt.Sprint(d.Value)
	case d.Param != "":
		return d.Param
	}
	return "?"
}

// Tensor is a TensorProto. Its elements are in exactly one of RawData, the typed fields, or an
// external file (External, DataLocation = 1); Data resolves them.
type Tensor struct {
	Name       string
	Dims       []int64
	DataType   DataType
	RawData    []byte
	HasRaw     bool // raw_data was present (an empty raw_data is a zero-size tensor's)
	FloatData  []float32
	Int32Data  []int32
	Int64Data  []int64
	DoubleData []float64
	Uint64Data []uint64
	StringData [][]byte
	// External holds external_data's key/value pairs (location, offset, length, checksum) in
	// file order; DataLocation is 1 when the data is external.
	External     []KeyValue
	DataLocation int32
	Segment      bool // a segment of a larger tensor (not supported by Data)
}

// KeyValue is a StringStringEntryProto.
type KeyValue struct{ Key, Value string }

// NumElements is the product of the dims (1 for a scalar), or -1 if a dim is negative or the
// product overflows.
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return -1
		}
		n *= d
	}
	return n
}

// maxDepth bounds the nesting of graphs inside attributes (control-flow subgraphs).
const maxDepth = 64

// DecodeModel decodes a ModelProto.
func DecodeModel(data []byte) (*Model, error) {
	m := &Model{}
	r := &reader{buf: data}
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, fmt.Errorf("ModelProto: %w", err)
		}
		if !ok {
			break
		}
		switch f {
		case 1:
			m.IRVersion, err = r.int64v(f, w, "ModelProto")
		case 2:
			m.ProducerName, err = r.str(f, w, "ModelProto")
		case 3:
			m.ProducerVersion, err = r.str(f, w, "ModelProto")
		case 7:
			var b []byte
			if b, err = msgBytes(r, f, w, "ModelProto"); err == nil {
				if m.Graph != nil {
					// proto3 merges repeated occurrences of a message field; an ONNX file never
					// has two graphs, and merging them would hide a corrupt file.
					return nil, fmt.Errorf("ModelProto: graph given twice")
				}
				m.Graph, err = decodeGraph(b, 0)
			}
		case 8:
			var b []byte
			if b, err = msgBytes(r, f, w, "ModelProto"); err == nil {
				var op OpsetID
				op, err = decodeOpset(b)
				m.Opsets = append(m.Opsets, op)
			}
		case 25:
			var b []byte
			if b, err = msgBytes(r, f, w, "ModelProto"); err == nil {
				var name string
				name, err = functionName(b)
				m.Functions = append(m.Functions, name)
			}
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, fmt.Errorf("ModelProto: %w", err)
		}
	}
	if m.Graph == nil {
		return nil, fmt.Errorf("ModelProto has no graph")
	}
	return m, nil
}

func msgBytes(r *reader, f, w int, msg string) ([]byte, error) {
	if err := want(f, w, wireBytes, msg); err != nil {
		return nil, err
	}
	return r.bytes()
}

func decodeOpset(b []byte) (OpsetID, error) {
	var op OpsetID
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil || !ok {
			return op, wrap("OperatorSetIdProto", err)
		}
		switch f {
		case 1:
			op.Domain, err = r.str(f, w, "OperatorSetIdProto")
		case 2:
			op.Version, err = r.int64v(f, w, "OperatorSetIdProto")
		default:
			err = r.skip(w)
		}
		if err != nil {
			return op, wrap("OperatorSetIdProto", err)
		}
	}
}

func functionName(b []byte) (string, error) {
	r := &reader{buf: b}
	name, domain := "", ""
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return "", wrap("FunctionProto", err)
		}
		if !ok {
			break
		}
		switch f {
		case 1:
			name, err = r.str(f, w, "FunctionProto")
		case 10:
			domain, err = r.str(f, w, "FunctionProto")
		default:
			err = r.skip(w)
		}
		if err != nil {
			return "", wrap("FunctionProto", err)
		}
	}
	if domain != "" {
		return domain + "." + name, nil
	}
	return name, nil
}

func wrap(msg string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func decodeGraph(b []byte, depth int) (*Graph, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("GraphProto: graphs nested more than %d deep", maxDepth)
	}
	g := &Graph{}
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap("GraphProto", err)
		}
		if !ok {
			return g, nil
		}
		var sub []byte
		switch f {
		case 1, 5, 11, 12, 13, 15:
			if sub, err = msgBytes(r, f, w, "GraphProto"); err != nil {
				return nil, wrap("GraphProto", err)
			}
		}
		switch f {
		case 1:
			var n *Node
			if n, err = decodeNode(sub, depth); err == nil {
				g.Nodes = append(g.Nodes, n)
			} else {
				err = fmt.Errorf("node %d: %w", len(g.Nodes), err)
			}
		case 2:
			g.Name, err = r.str(f, w, "GraphProto")
		case 5:
			var t *Tensor
			if t, err = DecodeTensor(sub); err == nil {
				g.Initializers = append(g.Initializers, t)
			} else {
				err = fmt.Errorf("initializer %d: %w", len(g.Initializers), err)
			}
		case 11, 12, 13:
			var v *ValueInfo
			if v, err = decodeValueInfo(sub); err == nil {
				switch f {
				case 11:
					g.Inputs = append(g.Inputs, v)
				case 12:
					g.Outputs = append(g.Outputs, v)
				default:
					g.ValueInfo = append(g.ValueInfo, v)
				}
			}
		case 15:
			g.SparseInitializers++
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, wrap("GraphProto", err)
		}
	}
}

func decodeNode(b []byte, depth int) (*Node, error) {
	n := &Node{}
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap("NodeProto", err)
		}
		if !ok {
			return n, nil
		}
		switch f {
		case 1, 2:
			var s string
			if s, err = r.str(f, w, "NodeProto"); err == nil {
				if f == 1 {
					n.Inputs = append(n.Inputs, s)
				} else {
					n.Outputs = append(n.Outputs, s)
				}
			}
		case 3:
			n.Name, err = r.str(f, w, "NodeProto")
		case 4:
			n.OpType, err = r.str(f, w, "NodeProto")
		case 7:
			n.Domain, err = r.str(f, w, "NodeProto")
		case 5:
			var sub []byte
			if sub, err = msgBytes(r, f, w, "NodeProto"); err == nil {
				var a *Attribute
				if a, err = decodeAttribute(sub, depth); err == nil {
					n.Attrs = append(n.Attrs, a)
				}
			}
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, wrap("NodeProto", err)
		}
	}
}

func decodeAttribute(b []byte, depth int) (*Attribute, error) {
	a := &Attribute{}
	r := &reader{buf: b}
	const msg = "AttributeProto"
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap(msg, err)
		}
		if !ok {
			break
		}
		switch f {
		case 1:
			a.Name, err = r.str(f, w, msg)
		case 21:
			a.RefAttrName, err = r.str(f, w, msg)
		case 20:
			var v int64
			v, err = r.int64v(f, w, msg)
			a.Type = AttrType(v)
		case 2:
			if err = want(f, w, wireFixed32, msg); err == nil {
				a.F, err = eachFloat(r)
			}
		case 3:
			a.I, err = r.int64v(f, w, msg)
		case 4:
			if err = want(f, w, wireBytes, msg); err == nil {
				a.S, err = r.bytes()
			}
		case 5, 10:
			var sub []byte
			if sub, err = msgBytes(r, f, w, msg); err == nil {
				var t *Tensor
				if t, err = DecodeTensor(sub); err == nil {
					if f == 5 {
						a.T = t
					} else {
						a.Tensors = append(a.Tensors, t)
					}
				}
			}
		case 6, 11:
			var sub []byte
			if sub, err = msgBytes(r, f, w, msg); err == nil {
				var g *Graph
				if g, err = decodeGraph(sub, depth+1); err == nil {
					if f == 6 {
						a.G = g
					} else {
						a.Graphs = append(a.Graphs, g)
					}
				}
			}
		case 7:
			a.Floats, err = repeated(r, f, w, wireFixed32, msg, a.Floats, eachFloat)
		case 8:
			a.Ints, err = repeated(r, f, w, wireVarint, msg, a.Ints, eachInt64)
		case 9:
			if err = want(f, w, wireBytes, msg); err == nil {
				var s []byte
				s, err = r.bytes()
				a.Strings = append(a.Strings, s)
			}
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", msg, a.Name, err)
		}
	}
	if a.Type == AttrUndefined {
		// IR version 1 files may omit the type; infer it from the field that is set, as ONNX's
		// own helper does.
		switch {
		case a.T != nil:
			a.Type = AttrTensor
		case a.G != nil:
			a.Type = AttrGraph
		case len(a.Floats) > 0:
			a.Type = AttrFloats
		case len(a.Ints) > 0:
			a.Type = AttrInts
		case len(a.Strings) > 0:
			a.Type = AttrStrings
		case a.S != nil:
			a.Type = AttrString
		}
	}
	return a, nil
}

func decodeValueInfo(b []byte) (*ValueInfo, error) {
	v := &ValueInfo{}
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap("ValueInfoProto", err)
		}
		if !ok {
			return v, nil
		}
		switch f {
		case 1:
			v.Name, err = r.str(f, w, "ValueInfoProto")
		case 2:
			var sub []byte
			if sub, err = msgBytes(r, f, w, "ValueInfoProto"); err == nil {
				v.Type, err = decodeType(sub, 0)
			}
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, fmt.Errorf("ValueInfoProto %q: %w", v.Name, err)
		}
	}
}

func decodeType(b []byte, depth int) (*TypeInfo, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("TypeProto nested more than %d deep", maxDepth)
	}
	t := &TypeInfo{}
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap("TypeProto", err)
		}
		if !ok {
			return t, nil
		}
		switch f {
		case 1, 8:
			var sub []byte
			if sub, err = msgBytes(r, f, w, "TypeProto"); err == nil {
				t.Kind = TypeTensor
				if f == 8 {
					t.Kind = TypeSparseTensor
				}
				err = decodeTensorType(sub, t)
			}
		case 4, 5, 9:
			t.Kind = map[int]TypeKind{4: TypeSequence, 5: TypeMap, 9: TypeOptional}[f]
			err = r.skip(w)
		default:
			err = r.skip(w)
		}
		if err != nil {
			return nil, wrap("TypeProto", err)
		}
	}
}

func decodeTensorType(b []byte, t *TypeInfo) error {
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil || !ok {
			return wrap("TypeProto.Tensor", err)
		}
		switch f {
		case 1:
			var v int64
			v, err = r.int64v(f, w, "TypeProto.Tensor")
			t.Elem = DataType(v)
		case 2:
			var sub []byte
			if sub, err = msgBytes(r, f, w, "TypeProto.Tensor"); err == nil {
				t.HasShape = true
				t.Dims, err = decodeShape(sub, t.Dims)
			}
		default:
			err = r.skip(w)
		}
		if err != nil {
			return wrap("TypeProto.Tensor", err)
		}
	}
}

func decodeShape(b []byte, dims []Dim) ([]Dim, error) {
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil || !ok {
			return dims, wrap("TensorShapeProto", err)
		}
		if f != 1 {
			if err := r.skip(w); err != nil {
				return nil, wrap("TensorShapeProto", err)
			}
			continue
		}
		sub, err := msgBytes(r, f, w, "TensorShapeProto")
		if err != nil {
			return nil, wrap("TensorShapeProto", err)
		}
		var d Dim
		dr := &reader{buf: sub}
		for {
			f, w, ok, err := dr.next()
			if err != nil {
				return nil, wrap("TensorShapeProto.Dimension", err)
			}
			if !ok {
				break
			}
			switch f {
			case 1:
				d.Value, err = dr.int64v(f, w, "TensorShapeProto.Dimension")
				d.HasValue, d.Param = true, ""
			case 2:
				d.Param, err = dr.str(f, w, "TensorShapeProto.Dimension")
				d.HasValue, d.Value = false, 0
			default:
				err = dr.skip(w)
			}
			if err != nil {
				return nil, wrap("TensorShapeProto.Dimension", err)
			}
		}
		dims = append(dims, d)
	}
}

// DecodeTensor decodes a TensorProto (the contents of a .pb tensor file, or an initializer).
func DecodeTensor(b []byte) (*Tensor, error) {
	t := &Tensor{}
	r := &reader{buf: b}
	const msg = "TensorProto"
	for {
		f, w, ok, err := r.next()
		if err != nil {
			return nil, wrap(msg, err)
		}
		if !ok {
			return t, nil
		}
		switch f {
		case 1:
			t.Dims, err = repeated(r, f, w, wireVarint, msg, t.Dims, eachInt64)
		case 2:
			var v int64
			v, err = r.int64v(f, w, msg)
			t.DataType = DataType(int32(v))
		case 3:
			t.Segment = true
			err = r.skip(w)
		case 4:
			t.FloatData, err = repeated(r, f, w, wireFixed32, msg, t.FloatData, eachFloat)
		case 5:
			t.Int32Data, err = repeated(r, f, w, wireVarint, msg, t.Int32Data, eachInt32)
		case 6:
			if err = want(f, w, wireBytes, msg); err == nil {
				var s []byte
				s, err = r.bytes()
				t.StringData = append(t.StringData, s)
			}
		case 7:
			t.Int64Data, err = repeated(r, f, w, wireVarint, msg, t.Int64Data, eachInt64)
		case 8:
			t.Name, err = r.str(f, w, msg)
		case 9:
			if err = want(f, w, wireBytes, msg); err == nil {
				t.RawData, err = r.bytes()
				t.HasRaw = true
			}
		case 10:
			t.DoubleData, err = repeated(r, f, w, wireFixed64, msg, t.DoubleData, eachDouble)
		case 11:
			t.Uint64Data, err = repeated(r, f, w, wireVarint, msg, t.Uint64Data, eachUint64)
		case 13:
			var sub []byte
			if sub, err = msgBytes(r, f, w, msg); err == nil {
				var kv KeyValue
				kv, err = decodeKeyValue(sub)
				t.External = append(t.External, kv)
			}
		case 14:
			var v int64
			v, err = r.int64v(f, w, msg)
			t.DataLocation = int32(v)
		default:
			err = r.skip(w)
		}
		if err != nil {
			if t.Name != "" {
				return nil, fmt.Errorf("%s %q: %w", msg, t.Name, err)
			}
			return nil, wrap(msg, err)
		}
	}
}

func decodeKeyValue(b []byte) (KeyValue, error) {
	var kv KeyValue
	r := &reader{buf: b}
	for {
		f, w, ok, err := r.next()
		if err != nil || !ok {
			return kv, wrap("StringStringEntryProto", err)
		}
		switch f {
		case 1:
			kv.Key, err = r.str(f, w, "StringStringEntryProto")
		case 2:
			kv.Value, err = r.str(f, w, "StringStringEntryProto")
		default:
			err = r.skip(w)
		}
		if err != nil {
			return kv, wrap("StringStringEntryProto", err)
		}
	}
}
