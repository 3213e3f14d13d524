package importer

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNXOptions configure ImportONNX.
type ONNXOptions struct {
	// Dims fixes symbolic input dimensions (dim_param names) to sizes.
	Dims map[string]int
	// ConstInputs gives graph inputs fixed values: they become constants of the model and are
	// no longer inputs of its function. A static-shape import needs this for shape and axes
	// operands that a graph takes as inputs (ONNX's node tests do).
	ConstInputs map[string]*onnx.Tensor
	// Name is the model's name (default: the file's base name without .onnx).
	Name string
}

// ONNX is an imported ONNX model.
type ONNX struct {
	// Model has one function, "forward", whose inputs and outputs are the graph's (in its
	// order, less ConstInputs), initializers as parameters with their weights loaded.
	Model *ir.Model
	// Inputs and Outputs relate the function's signature to the graph's: each ONNX element type
	// and the vkc type that holds it (see IRDType).
	Inputs, Outputs []Port
	// Opset is the default domain's opset the graph was imported at.
	Opset int64
	// Notes say what the import changed: renamed values, narrowed types.
	Notes []string
}

// Port is one input or output of an imported function.
type Port struct {
	Name     string // in the vkc function
	ONNXName string // in the ONNX graph
	DType    onnx.DataType
	Type     ir.Type
}

// MinOpset is the oldest default-domain opset ImportONNX reads: the op semantics it maps are
// those of opset 13 and later (axes as inputs, Split's split input, Softmax over one axis).
const MinOpset = 13

// FunctionName is the name of the one function an ONNX import has.
const FunctionName = "forward"

// ImportONNX reads an ONNX model and translates its graph into a vkc model with one function,
// forward. Every node is translated onto vkc's ops (ops_onnx.go lists them); an op vkc lacks,
// or an attribute value it cannot express, is an error naming the node, its op type and the
// opset. Shapes must be static: an input dimension that is symbolic and not fixed by
// ONNXOptions.Dims is an error naming it. Shape and axes operands must be constants
// (initializers, Constant nodes, folded Shape/ConstantOfShape, or ConstInputs).
func ImportONNX(path string, opts ONNXOptions) (*ONNX, error) {
	m, err := onnx.ReadModel(path)
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	im, err := ImportONNXModel(m, filepath.Dir(path), name, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	im.Model.Source = path
	return im, nil
}

// ImportONNXModel is ImportONNX for a decoded model; dir is the folder external data is read
// from.
func ImportONNXModel(m *onnx.Model, dir, name string, opts ONNXOptions) (*ONNX, error) {
	return importModel(m, dir, name, opts)
}

// onnxValue is what the importer knows of one ONNX value name.
type onnxValue struct {
	v     ir.Value      // the vkc value (Node nil until needed, for constants)
	dt    onnx.DataType // its ONNX element type
	dims  []int64       // for constants
	raw   []byte        // a constant's elements (ONNX raw layout), or nil
	param string        // an initializer: the parameter name it becomes when used as a tensor
}

func (v *onnxValue) isConst() bool { return v.raw != nil || (v.dims != nil && v.v.Node == nil) }

type importer struct {
	dir      string
	opset    int64
	b        *ir.Builder
	vals     map[string]*onnxValue
	model    *ir.Model
	names    *namer
	notes    []string
	node     *onnx.Node
	consts   int
	paramSet map[string]bool
	// graphInputs and initializers name the values the graph itself gives (no node may write
	// them); attrErr is the node's first attribute of the wrong type (onnx_check.go).
	graphInputs, initializers map[string]bool
	attrErr                   error
}

func importModel(m *onnx.Model, dir, name string, opts ONNXOptions) (*ONNX, error) {
	im := &importer{dir: dir, vals: map[string]*onnxValue{}, names: newNamer(), paramSet: map[string]bool{}}
	for _, op := range m.Opsets {
		switch op.Domain {
		case "", "ai.onnx":
			im.opset = op.Version
		}
	}
	if im.opset == 0 {
		return nil, fmt.Errorf("the model imports no opset of the default domain (ai.onnx)")
	}
	if im.opset < MinOpset {
		return nil, fmt.Errorf("opset %d: vkc imports opset %d and newer (convert the model with onnx.version_converter)", im.opset, MinOpset)
	}
	if im.opset > MaxOpset {
		return nil, fmt.Errorf("opset %d is newer than vkc knows (it imports opsets %d to %d): an op may mean something else there", im.opset, MinOpset, MaxOpset)
	}
	g := m.Graph
	if g.SparseInitializers > 0 {
		return nil, fmt.Errorf("graph has %d sparse initializers (not supported)", g.SparseInitializers)
	}
	im.model = &ir.Model{Name: sanitizeModelName(name), Dims: map[string]int{}, Weights: map[string]*ir.Tensor{}}
	im.b = ir.NewBuilder(FunctionName)
	res := &ONNX{Model: im.model, Opset: im.opset}

	// Initializers: parameters when used as tensors, constants when read as shapes or axes.
	inits := map[string]bool{}
	for i, t := range g.Initializers {
		if t.Name == "" {
			return nil, fmt.Errorf("initializer %d has no name", i)
		}
		raw, err := t.Data(dir)
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", t.Name, err)
		}
		if inits[t.Name] {
			return nil, fmt.Errorf("initializer %q appears twice", t.Name)
		}
		inits[t.Name] = true
		im.vals[t.Name] = &onnxValue{dt: t.DataType, dims: append([]int64{}, t.Dims...), raw: raw, param: t.Name}
	}
	// Inputs (an input that is also an initializer is the initializer: IR < 4 lists both).
	im.initializers, im.graphInputs = inits, map[string]bool{}
	used := map[string]bool{}
	for name := range opts.ConstInputs {
		used[name] = false
	}
	for _, in := range g.Inputs {
		if inits[in.Name] {
			continue
		}
		if im.graphInputs[in.Name] {
			return nil, fmt.Errorf("input %q appears twice", in.Name)
		}
		im.graphInputs[in.Name] = true
		if c, ok := opts.ConstInputs[in.Name]; ok {
			used[in.Name] = true
			raw, err := c.Data(dir)
			if err != nil {
				return nil, fmt.Errorf("constant input %q: %w", in.Name, err)
			}
			im.vals[in.Name] = &onnxValue{dt: c.DataType, dims: append([]int64{}, c.Dims...), raw: raw}
			continue
		}
		t, dt, err := inputType(in, opts.Dims)
		if err != nil {
			return nil, err
		}
		irName := im.names.ident(in.Name)
		if irName != in.Name {
			im.notes = append(im.notes, fmt.Sprintf("input %q is named %s", in.Name, irName))
		}
		if dt == onnx.Double || dt == onnx.Int64 || dt == onnx.Uint64 || dt.Size() < 4 && dt != onnx.Bool {
			im.notes = append(im.notes, fmt.Sprintf("input %s: ONNX %s is held as %s", irName, dt, t.DType))
		}
		v, err := im.b.Input(irName, t)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		im.vals[in.Name] = &onnxValue{v: v, dt: dt}
		res.Inputs = append(res.Inputs, Port{Name: irName, ONNXName: in.Name, DType: dt, Type: t})
	}
	var unused []string
	for name, ok := range used {
		if !ok {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		return nil, fmt.Errorf("constant inputs %s are not inputs of the graph", strings.Join(unused, ", "))
	}
	for i, n := range g.Nodes {
		im.node = n
		if err := im.translate(n); err != nil {
			return nil, fmt.Errorf("node %d %q (%s, opset %d): %w", i, n.Name, n.OpType, im.opset, err)
		}
	}
	im.node = nil
	for _, o := range g.Outputs {
		val, ok := im.vals[o.Name]
		if !ok {
			return nil, fmt.Errorf("output %q is not computed by any node", o.Name)
		}
		v, err := im.tensor(o.Name)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		irName := im.names.ident(o.Name)
		if irName != o.Name {
			im.notes = append(im.notes, fmt.Sprintf("output %q is named %s", o.Name, irName))
		}
		if err := im.b.Output(irName, v); err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		if o.Type != nil && o.Type.Kind == onnx.TypeTensor && o.Type.Elem != onnx.Undefined && o.Type.Elem != val.dt {
			return nil, fmt.Errorf("output %q is declared %s but computes %s", o.Name, o.Type.Elem, val.dt)
		}
		res.Outputs = append(res.Outputs, Port{Name: irName, ONNXName: o.Name, DType: val.dt, Type: v.Type()})
	}
	f := im.b.Function()
	im.model.Functions = []*ir.Function{f}
	if err := im.model.Validate(); err != nil {
		return nil, fmt.Errorf("imported graph: %w", err)
	}
	res.Notes = im.notes
	return res, nil
}

// inputType is a graph input's vkc type: static dims (symbolic ones fixed by dims).
func inputType(in *onnx.ValueInfo, dims map[string]int) (ir.Type, onnx.DataType, error) {
	tp := in.Type
	if tp == nil || tp.Kind != onnx.TypeTensor {
		kind := "no type"
		if tp != nil {
			kind = map[onnx.TypeKind]string{onnx.TypeSequence: "a sequence", onnx.TypeMap: "a map", onnx.TypeOptional: "an optional",
				onnx.TypeSparseTensor: "a sparse tensor", onnx.TypeUnknown: "an unknown type"}[tp.Kind]
		}
		return ir.Type{}, 0, fmt.Errorf("input %q has %s; vkc takes tensors", in.Name, kind)
	}
	d, err := IRDType(tp.Elem)
	if err != nil {
		return ir.Type{}, 0, fmt.Errorf("input %q: %w", in.Name, err)
	}
	if !tp.HasShape {
		return ir.Type{}, 0, fmt.Errorf("input %q has no shape (unknown rank): vkc needs static shapes", in.Name)
	}
	s := make(ir.Shape, len(tp.Dims))
	for i, dim := range tp.Dims {
		switch {
		case dim.HasValue && dim.Value > 0:
			s[i] = int(dim.Value)
		case dim.HasValue && dim.Value == 0:
			return ir.Type{}, 0, fmt.Errorf("input %q: dimension %d is 0: vkc has no empty tensors", in.Name, i)
		case dim.Param != "":
			v, ok := dims[dim.Param]
			if !ok {
				return ir.Type{}, 0, fmt.Errorf("input %q: dimension %d is %q, not static: fix it with --dim %s=VALUE", in.Name, i, dim.Param, dim.Param)
			}
			if v <= 0 {
				return ir.Type{}, 0, fmt.Errorf("input %q: --dim %s=%d must be positive", in.Name, dim.Param, v)
			}
			s[i] = v
		default:
			return ir.Type{}, 0, fmt.Errorf("input %q: dimension %d is unknown (%s): vkc needs static shapes", in.Name, i, dim)
		}
	}
	return ir.Type{DType: d, Shape: s}, tp.Elem, nil
}

// tensor returns the vkc value of an ONNX value name, materialising a constant on first use:
// an initializer becomes a parameter; another constant a parameter too, or a Const node when
// it is a scalar.
func (im *importer) tensor(name string) (ir.Value, error) {
	val, ok := im.vals[name]
	if !ok {
		if name == "" {
			return ir.Value{}, fmt.Errorf("an omitted optional input is needed here")
		}
		return ir.Value{}, fmt.Errorf("value %q is used before it is computed", name)
	}
	if val.v.Node != nil {
		return val.v, nil
	}
	t, err := TensorFromONNX(fmt.Sprintf("constant %q", name), val.dt, val.dims, val.raw)
	if err != nil {
		return ir.Value{}, err
	}
	if val.param == "" && len(val.dims) == 0 {
		val.v = im.b.Const(t)
		return val.v, nil
	}
	pname := val.param
	if pname == "" {
		im.consts++
		pname = "const." + name
	}
	pname = im.names.param(pname)
	im.model.Params = append(im.model.Params, &ir.Decl{Name: pname, Type: t.Type})
	im.model.Weights[pname] = t
	val.v = im.b.Param(pname, t.Type)
	return val.v, nil
}

// translate adds one node.
func (im *importer) translate(n *onnx.Node) error {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return fmt.Errorf("domain %q is not supported (vkc imports the default domain, ai.onnx)", n.Domain)
	}
	for _, a := range n.Attrs {
		if a.RefAttrName != "" {
			return fmt.Errorf("attribute %s refers to a function attribute (not supported)", a.Name)
		}
	}
	tr, ok := onnxOps[n.OpType]
	if !ok {
		return fmt.Errorf("op %s is not supported by vkc's ONNX importer", n.OpType)
	}
	if err := im.checkNodeBefore(n); err != nil {
		return err
	}
	// Shape ops on constants are evaluated here, so the shapes they compute are known.
	if fold, ok := onnxFolds[n.OpType]; ok && im.allConst(n) {
		done, err := fold(im, n)
		if err != nil {
			return err
		}
		if done {
			return im.checkNodeAfter(n)
		}
	}
	if err := tr(im, n); err != nil {
		return err
	}
	return im.checkNodeAfter(n)
}

// allConst reports whether every present input of n is a constant.
func (im *importer) allConst(n *onnx.Node) bool {
	for _, in := range n.Inputs {
		if in == "" {
			continue
		}
		v, ok := im.vals[in]
		if !ok || !v.isConst() {
			return false
		}
	}
	return true
}

// namer makes ONNX names into model.yaml identifiers, distinct from each other.
type namer struct {
	taken  map[string]bool
	idents map[string]string
}

func newNamer() *namer { return &namer{taken: map[string]bool{}, idents: map[string]string{}} }

var (
	identChars = regexp.MustCompile(`[^A-Za-z0-9_]`)
	paramChars = regexp.MustCompile(`[^A-Za-z0-9_.]`)
)

func (nm *namer) unique(s string) string {
	if s == "" || (s[0] >= '0' && s[0] <= '9') || s[0] == '.' {
		s = "v_" + s
	}
	base, k := s, 2
	for nm.taken[s] {
		s = fmt.Sprintf("%s_%d", base, k)
		k++
	}
	nm.taken[s] = true
	return s
}

// ident names an input, output or variable: [A-Za-z_][A-Za-z0-9_]*.
func (nm *namer) ident(onnxName string) string {
	if s, ok := nm.idents[onnxName]; ok {
		return s
	}
	s := nm.unique(identChars.ReplaceAllString(onnxName, "_"))
	nm.idents[onnxName] = s
	return s
}

// param names a parameter: dots are allowed.
func (nm *namer) param(onnxName string) string {
	s := strings.Trim(paramChars.ReplaceAllString(onnxName, "_"), ".")
	for strings.Contains(s, "..") {
		s = strings.ReplaceAll(s, "..", ".")
	}
	return nm.unique(s)
}

func sanitizeModelName(s string) string {
	s = identChars.ReplaceAllString(s, "_")
	if s == "" {
		return "onnx_model"
	}
	return s
}
