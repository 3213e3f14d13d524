package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// The ir adapter: the op table the rule compiler needs, the tensor-type analysis, and the
// conversions of an ir.Function into an e-graph and of an extraction back into an ir.Function.
//
// Every ir op is an e-graph operator with the same number (egraph.Op(ir.Op)). Attributes are
// the op's ir attributes in declaration order, each spelled canonically (formatAttr), with ""
// for an optional attribute that has no default and is absent (attention's scale). Sources
// carry what identifies them: input, param and state [name, type]; const [type, value], where
// value is the number for a one-element constant (so a rule may write (const[value=1])) and a
// content hash otherwise. Two multi-output projections, out0 and out1, select the outputs of a
// multi-output op (add_rmsnorm): a value is always a class of single type, a multi-output node a
// class whose data holds every output type.

const (
	projOut0 egraph.Op = 1000 + iota
	projOut1
)

// sourceAttrs are the attribute names of input, param and state nodes in the e-graph.
var sourceAttrs = []string{"name", "type"}

// constAttrs are the attribute names of const nodes in the e-graph.
var constAttrs = []string{"type", "value"}

// attrNames returns the e-graph attribute names of op, in tuple order.
func attrNames(op ir.Op) []string {
	switch op {
	case ir.Input, ir.Param, ir.State:
		return sourceAttrs
	case ir.Const:
		return constAttrs
	}
	specs := op.Info().Attrs
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

// OpTable returns the operator table for compiling rules against the op IR: every ir op by its
// model.yaml name, with its attributes and their defaults, plus the projections out0 and out1.
//
// Example:
//
//	rws, err := rules.Compile(rules.Env{Ops: rules.OpTable()}, f)
func OpTable() map[string]OpInfo {
	t := map[string]OpInfo{
		"out0": {Op: projOut0, Arity: 1},
		"out1": {Op: projOut1, Arity: 1},
	}
	for _, op := range ir.Ops() {
		info := op.Info()
		arity := -1
		if info.MinArgs == info.MaxArgs {
			arity = info.MinArgs
		}
		oi := OpInfo{Op: egraph.Op(op), Arity: arity, Attrs: attrNames(op), Defaults: map[string]string{}}
		if info.Kind != ir.KindSource {
			for _, s := range info.Attrs {
				if s.Like != "" {
					// No default: a right-hand side names it (the e-graph holds it
					// explicitly, encodeAttrs), so one meaning has one spelling.
					continue
				}
				if s.Default != nil {
					oi.Defaults[s.Name] = formatAttr(s.Default)
				} else if !s.Required {
					oi.Defaults[s.Name] = ""
				}
			}
		}
		t[info.Name] = oi
	}
	return t
}

// opName names an e-graph operator for display.
func opName(op egraph.Op) string {
	switch op {
	case projOut0:
		return "out0"
	case projOut1:
		return "out1"
	}
	return ir.Op(op).String()
}

// formatAttr spells an attribute value canonically: floats with the shortest float64 spelling,
// int lists as [1,0,2].
func formatAttr(v any) string {
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case string:
		return v
	case []int:
		return ir.Shape(v).String()
	case ir.Shape:
		return v.String()
	}
	return fmt.Sprint(v)
}

// parseAttr reads a canonical (or user-written) attribute value of the given kind.
func parseAttr(kind ir.AttrKind, s string) (any, error) {
	switch kind {
	case ir.AttrInt:
		return strconv.Atoi(strings.TrimSpace(s))
	case ir.AttrFloat:
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	case ir.AttrBool:
		return strconv.ParseBool(strings.TrimSpace(s))
	case ir.AttrString:
		return s, nil
	case ir.AttrInts:
		return parseInts(s)
	}
	return nil, fmt.Errorf("unknown attribute kind %v", kind)
}

func parseInts(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("want a list like [1,2], got %q", s)
	}
	inner := strings.TrimSpace(s[1 : len(s)-1])
	out := []int{}
	if inner == "" {
		return out, nil
	}
	for _, p := range strings.Split(inner, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("bad list element %q in %q", p, s)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseType reads a type as ir.Type.String spells it ("f32[2,3]").
func parseType(s string) (ir.Type, error) {
	i := strings.IndexByte(s, '[')
	if i < 0 {
		return ir.Type{}, fmt.Errorf("bad type %q", s)
	}
	d, err := ir.ParseDType(s[:i])
	if err != nil {
		return ir.Type{}, err
	}
	dims, err := parseInts(s[i:])
	if err != nil {
		return ir.Type{}, err
	}
	return ir.Type{DType: d, Shape: ir.Shape(dims)}, nil
}

// canonLiteral is Env.Canon for the ir op table: a literal as written in a rule file becomes the
// spelling the e-graph holds ("1e-5" → "1e-05", "[1, 0]" → "[1,0]"), or an error.
func canonLiteral(op, attr, lit string) (string, error) {
	o, ok := ir.LookupOp(op)
	if !ok {
		return lit, nil // out0/out1 have no attributes; Compile reports unknown ops
	}
	switch o {
	case ir.Input, ir.Param, ir.State:
		if attr == "type" {
			t, err := parseType(lit)
			if err != nil {
				return "", err
			}
			return t.String(), nil
		}
		return lit, nil
	case ir.Const:
		if attr == "type" {
			t, err := parseType(lit)
			if err != nil {
				return "", err
			}
			return t.String(), nil
		}
		v, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return "", fmt.Errorf("a const value in a rule must be a number, got %q", lit)
		}
		return formatAttr(v), nil
	}
	for _, s := range o.Info().Attrs {
		if s.Name == attr {
			v, err := parseAttr(s.Kind, lit)
			if err != nil {
				return "", err
			}
			return formatAttr(v), nil
		}
	}
	return lit, nil
}

// TensorInfo is the analysis data of an e-class: the tensor type of each output (one for a
// value, two for add_rmsnorm's class), whether the value depends only on parameters and
// constants (so the lowering stage computes it at compile time), and, for constants and small
// folded arithmetic on them, the value itself.
type TensorInfo struct {
	Types  []ir.Type
	Static bool
	Value  *ir.Tensor
}

// Type is the class's type (the first output's for a multi-output class).
func (t TensorInfo) Type() ir.Type { return t.Types[0] }

// foldLimit bounds the constants the analysis folds: shape and position arithmetic, never a
// weight-sized table.
const foldLimit = 64

// adapter holds one e-graph over the op IR: the analysis state (constant tables, decoded
// attributes) and the names and positions of the classes the input function's nodes landed in.
type adapter struct {
	g      *egraph.EGraph
	consts map[string]*ir.Tensor // const value attribute → tensor
	attrs  map[[2]uint32]ir.Attrs
	names  map[egraph.Id]string
	pos    map[egraph.Id]ir.Pos
	// foldOff disables constant folding (the rule checks use it to keep a left side intact).
	foldOff bool
	// skipped counts, per rule, matches whose right side did not type-check.
	skipped map[string]int
	// written holds the e-nodes of the input function, so that extraction can tell a node the
	// model wrote from one a rule built (a rule may rebuild a node the model has, and which of
	// two equal nodes keeps its origin after a union is the e-graph's choice).
	written []egraph.Node
}

func newAdapter() *adapter {
	a := &adapter{consts: map[string]*ir.Tensor{}, attrs: map[[2]uint32]ir.Attrs{},
		names: map[egraph.Id]string{}, pos: map[egraph.Id]ir.Pos{}}
	a.g = egraph.New(a)
	a.g.OpName = opName
	return a
}

// info returns the analysis data of a class.
func info(g *egraph.EGraph, id egraph.Id) TensorInfo { return g.Data(id).(TensorInfo) }

// constKey names a constant tensor in the e-graph: its number when it has one element, else a
// hash of its type and bytes.
func constKey(t *ir.Tensor) string {
	if t.NumElements() == 1 {
		return formatAttr(t.Float64(0))
	}
	h := sha256.New()
	h.Write([]byte(t.Type.String()))
	h.Write(t.Data)
	return "#" + hex.EncodeToString(h.Sum(nil)[:16])
}

// constNode returns the e-node of constant t, registering its value.
func (a *adapter) constNode(t *ir.Tensor) egraph.Node {
	k := constKey(t)
	full := t.Type.String() + "|" + k
	if _, ok := a.consts[full]; !ok {
		a.consts[full] = t
	}
	return egraph.Node{Op: egraph.Op(ir.Const), Attr: a.g.InternAttrs(t.Type.String(), k)}
}

// addConst adds constant t and returns its class.
func (a *adapter) addConst(t *ir.Tensor) (egraph.Id, error) { return a.g.Add(a.constNode(t)) }

// constValue returns the tensor of a const node.
func (a *adapter) constValue(n egraph.Node) (*ir.Tensor, error) {
	v := a.g.AttrValues(n.Attr)
	if len(v) != 2 {
		return nil, fmt.Errorf("const node with attributes %v", v)
	}
	if t, ok := a.consts[v[0]+"|"+v[1]]; ok {
		return t, nil
	}
	// A one-element constant written by a rule: its value is the number.
	typ, err := parseType(v[0])
	if err != nil {
		return nil, err
	}
	if typ.Shape.NumElements() != 1 || strings.HasPrefix(v[1], "#") {
		return nil, fmt.Errorf("unknown constant %s %s", v[0], v[1])
	}
	x, err := strconv.ParseFloat(v[1], 64)
	if err != nil {
		return nil, fmt.Errorf("const value %q: %v", v[1], err)
	}
	t := ir.TensorFromFloat64s(typ, []float64{x})
	a.consts[v[0]+"|"+v[1]] = t
	return t, nil
}

// encodeAttrs spells ir attributes (already checked, defaults filled) as the e-graph tuple.
func (a *adapter) encodeAttrs(op ir.Op, at ir.Attrs) egraph.Attr {
	specs := op.Info().Attrs
	if len(specs) == 0 {
		return 0
	}
	vals := make([]string, len(specs))
	for i, s := range specs {
		if v, ok := at[s.Name]; ok {
			vals[i] = formatAttr(v)
		} else if s.Default != nil {
			vals[i] = formatAttr(s.Default)
		}
	}
	// An attribute that is another's when absent (AttrSpec.Like: attention's k_layout and
	// v_layout) is held explicitly, so that rules match and build one spelling of each meaning;
	// ir.Infer drops it again where it equals the other (decodeAttrs).
	for i, s := range specs {
		if s.Like != "" && vals[i] == "" {
			for j, o := range specs {
				if o.Name == s.Like {
					vals[i] = vals[j]
				}
			}
		}
	}
	return a.g.InternAttrs(vals...)
}

// decodeAttrs turns an e-graph attribute tuple of op back into ir attributes (cached).
func (a *adapter) decodeAttrs(op ir.Op, at egraph.Attr) (ir.Attrs, error) {
	key := [2]uint32{uint32(op), uint32(at)}
	if d, ok := a.attrs[key]; ok {
		return d, nil
	}
	specs := op.Info().Attrs
	vals := a.g.AttrValues(at)
	if len(vals) != len(specs) && !(len(vals) == 0 && len(specs) == 0) {
		return nil, fmt.Errorf("%s has %d attributes, the tuple %v has %d", op, len(specs), vals, len(vals))
	}
	out := ir.Attrs{}
	for i, s := range specs {
		if vals[i] == "" && s.Kind != ir.AttrString {
			continue
		}
		v, err := parseAttr(s.Kind, vals[i])
		if err != nil {
			return nil, fmt.Errorf("%s attribute %s: %v", op, s.Name, err)
		}
		out[s.Name] = v
	}
	a.attrs[key] = out
	return out, nil
}

// sourceNode is the e-node of an input, param or state node.
func (a *adapter) sourceNode(op ir.Op, name string, t ir.Type) egraph.Node {
	return egraph.Node{Op: egraph.Op(op), Attr: a.g.InternAttrs(name, t.String())}
}

// Make computes a new node's tensor types by ir inference; an ill-typed node is an error.
func (a *adapter) Make(g *egraph.EGraph, n egraph.Node) (any, error) {
	switch n.Op {
	case projOut0, projOut1:
		k := int(n.Op - projOut0)
		c := info(g, n.Children[0])
		if len(c.Types) < 2 || k >= len(c.Types) {
			return nil, fmt.Errorf("out%d of a class with %d output(s)", k, len(c.Types))
		}
		return TensorInfo{Types: []ir.Type{c.Types[k]}, Static: c.Static}, nil
	}
	op := ir.Op(n.Op)
	switch op {
	case ir.Input, ir.Param, ir.State:
		v := g.AttrValues(n.Attr)
		if len(v) != 2 {
			return nil, fmt.Errorf("%s node needs [name, type], got %v", op, v)
		}
		t, err := parseType(v[1])
		if err != nil {
			return nil, err
		}
		return TensorInfo{Types: []ir.Type{t}, Static: op == ir.Param}, nil
	case ir.Const:
		t, err := a.constValue(n)
		if err != nil {
			return nil, err
		}
		return TensorInfo{Types: []ir.Type{t.Type}, Static: true, Value: t}, nil
	}
	at, err := a.decodeAttrs(op, n.Attr)
	if err != nil {
		return nil, err
	}
	types := make([]ir.Type, len(n.Children))
	static := true
	vals := make([]*ir.Tensor, len(n.Children))
	for i, c := range n.Children {
		ci := info(g, c)
		if len(ci.Types) != 1 {
			return nil, fmt.Errorf("argument %d of %s is a multi-output class; use out0/out1", i+1, op)
		}
		types[i] = ci.Types[0]
		static = static && ci.Static
		vals[i] = ci.Value
	}
	_, outs, err := ir.Infer(op, at, types)
	if err != nil {
		return nil, err
	}
	ti := TensorInfo{Types: outs, Static: static}
	if !a.foldOff && len(outs) == 1 && outs[0].Shape.NumElements() <= foldLimit {
		ti.Value = fold(op, at, vals, outs[0])
	}
	return ti, nil
}

// Merge checks that both classes have the same tensor types: a rule that equates tensors of
// different types is wrong, and the error names both (the e-graph adds the rule's name).
func (a *adapter) Merge(x, y any) (any, egraph.DidMerge, error) {
	p, q := x.(TensorInfo), y.(TensorInfo)
	if !slices.EqualFunc(p.Types, q.Types, ir.Type.Equal) {
		return nil, egraph.DidMerge{}, fmt.Errorf("tensor types differ: %v and %v", p.Types, q.Types)
	}
	m := TensorInfo{Types: p.Types, Static: p.Static || q.Static, Value: p.Value}
	if m.Value == nil {
		m.Value = q.Value
	}
	did := egraph.DidMerge{
		A: m.Static != p.Static || (m.Value != nil) != (p.Value != nil),
		B: m.Static != q.Static || (m.Value != nil) != (q.Value != nil),
	}
	return m, did, nil
}

// Modify adds the constant node of a class whose value the analysis folded.
func (a *adapter) Modify(g *egraph.EGraph, id egraph.Id) error {
	d := info(g, id)
	if d.Value == nil {
		return nil
	}
	for _, n := range g.Nodes(id) {
		if n.Op == egraph.Op(ir.Const) {
			return nil
		}
	}
	c, err := a.addConst(d.Value)
	if err != nil {
		return err
	}
	_, err = g.Union(id, c, "fold-constant")
	return err
}

// fold evaluates small elementwise arithmetic on known constants (positions, lengths, scale
// factors), so that rules see one constant where a model computed it. nil when it does not
// apply.
func fold(op ir.Op, at ir.Attrs, args []*ir.Tensor, out ir.Type) *ir.Tensor {
	if len(args) == 0 {
		return nil
	}
	for _, x := range args {
		if x == nil || x.NumElements() > foldLimit {
			return nil
		}
	}
	isInt := out.DType.IsInt()
	var f func(x []float64) (float64, bool)
	switch op {
	case ir.Neg:
		f = func(x []float64) (float64, bool) { return -x[0], true }
	case ir.Recip:
		f = func(x []float64) (float64, bool) { return 1 / x[0], x[0] != 0 }
	case ir.Cast:
		f = func(x []float64) (float64, bool) {
			if isInt {
				return math.Trunc(x[0]), true
			}
			return x[0], true
		}
	case ir.Add:
		f = func(x []float64) (float64, bool) { return x[0] + x[1], true }
	case ir.Sub:
		f = func(x []float64) (float64, bool) { return x[0] - x[1], true }
	case ir.Mul:
		f = func(x []float64) (float64, bool) { return x[0] * x[1], true }
	case ir.Div:
		if isInt {
			return nil
		}
		f = func(x []float64) (float64, bool) { return x[0] / x[1], true }
	case ir.Reshape:
		return &ir.Tensor{Type: out, Data: args[0].Data}
	default:
		return nil
	}
	n := out.Shape.NumElements()
	res := make([]float64, n)
	idx := make([][]int, len(args))
	for i, x := range args {
		idx[i] = broadcastIndex(out.Shape, x.Type.Shape)
		if idx[i] == nil {
			return nil
		}
	}
	xs := make([]float64, len(args))
	for e := 0; e < n; e++ {
		for i, x := range args {
			xs[i] = x.Float64(idx[i][e])
		}
		v, ok := f(xs)
		if !ok {
			return nil
		}
		if isInt {
			v = float64(int32(int64(v)))
		}
		res[e] = v
	}
	return ir.TensorFromFloat64s(out, res)
}

// broadcastIndex maps each element of out to the element of in that NumPy broadcasting reads.
func broadcastIndex(out, in ir.Shape) []int {
	if in.Rank() > out.Rank() {
		return nil
	}
	n := out.NumElements()
	res := make([]int, n)
	off := out.Rank() - in.Rank()
	coord := make([]int, out.Rank())
	for e := 0; e < n; e++ {
		r := e
		for d := out.Rank() - 1; d >= 0; d-- {
			coord[d] = r % out[d]
			r /= out[d]
		}
		k := 0
		for d := 0; d < in.Rank(); d++ {
			c := coord[d+off]
			if in[d] == 1 {
				c = 0
			}
			k = k*in[d] + c
		}
		res[e] = k
	}
	return res
}

// addNode adds an op with ir attributes to the e-graph. Its types are inferred first, so an
// ill-typed combination is reported as errIllTyped (an applier then skips the match) rather than
// failing the run.
func (a *adapter) addNode(op ir.Op, at ir.Attrs, children ...egraph.Id) (egraph.Id, error) {
	types := make([]ir.Type, len(children))
	for i, c := range children {
		ci := info(a.g, c)
		if len(ci.Types) != 1 {
			return 0, errIllTyped
		}
		types[i] = ci.Types[0]
	}
	full, _, err := ir.Infer(op, at, types)
	if err != nil {
		return 0, errIllTyped
	}
	return a.g.Add(egraph.Node{Op: egraph.Op(op), Attr: a.encodeAttrs(op, full), Children: children})
}

var errIllTyped = fmt.Errorf("ill-typed")

// addFunction adds every node of f and returns the class of each value.
func (a *adapter) addFunction(f *ir.Function) (map[ir.Value]egraph.Id, error) {
	vals := map[ir.Value]egraph.Id{}
	for _, n := range f.Nodes {
		var node egraph.Node
		switch n.Op {
		case ir.Input, ir.Param, ir.State:
			node = a.sourceNode(n.Op, n.Name, n.Type())
		case ir.Const:
			node = a.constNode(n.Value)
		default:
			ch := make([]egraph.Id, len(n.Args))
			for i, v := range n.Args {
				c, ok := vals[v]
				if !ok {
					return nil, fmt.Errorf("node %s: argument %%%d.%d is not defined before use", n, v.Node.ID, v.Out)
				}
				ch[i] = c
			}
			node = egraph.Node{Op: egraph.Op(n.Op), Attr: a.encodeAttrs(n.Op, n.Attrs), Children: ch}
		}
		id, err := a.g.Add(node)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n, err)
		}
		a.written = append(a.written, node)
		if n.Name != "" {
			if _, ok := a.names[id]; !ok {
				a.names[id] = n.Name
			}
		}
		if _, ok := a.pos[id]; !ok && n.Pos.Line > 0 {
			a.pos[id] = n.Pos
		}
		if len(n.Outs) == 1 {
			vals[n.V()] = id
			continue
		}
		if len(n.Outs) > 2 {
			return nil, fmt.Errorf("node %s: %d outputs (the e-graph projects two at most)", n, len(n.Outs))
		}
		for k := range n.Outs {
			p, err := a.g.Add(egraph.Node{Op: projOut0 + egraph.Op(k), Children: []egraph.Id{id}})
			if err != nil {
				return nil, fmt.Errorf("node %s output %d: %w", n, k, err)
			}
			vals[ir.Value{Node: n, Out: k}] = p
		}
	}
	return vals, nil
}

// roots returns the classes of f's outputs then its state updates.
func roots(f *ir.Function, vals map[ir.Value]egraph.Id) []egraph.Id {
	var r []egraph.Id
	for _, o := range f.Outputs {
		r = append(r, vals[o.Value])
	}
	for _, u := range f.Updates {
		r = append(r, vals[u.Value])
	}
	return r
}

// buildFunction turns extractions back into an ir.Function with f's signature, outputs and
// updates. The extractions are applied in order and share their results: a class built by an
// earlier one is not built again. Types are inferred again by ir.Builder; a node introduced by a rule
// records it in Node.Rule, and a class that held a named node of f gives its name to the
// extracted node. cost, when set, prices each built e-node; the sum (each class once) is
// returned.
func (a *adapter) buildFunction(f *ir.Function, vals map[ir.Value]egraph.Id, xs []*egraph.Extraction, cost egraph.CostFunc) (*ir.Function, float64, error) {
	g := a.g
	b := ir.NewBuilder(f.Name)
	inputs := map[string]ir.Value{}
	for _, in := range f.Inputs {
		v, err := b.At(in.Pos).Input(in.Name, in.Type())
		if err != nil {
			return nil, 0, err
		}
		inputs[in.Name] = v
	}
	if l := f.Length; l != nil {
		v, err := b.At(l.Node.Pos).CopyLength(l)
		if err != nil {
			return nil, 0, err
		}
		inputs[l.Dim] = v
	}
	// Names: a class may hold several named nodes of f; the smallest name wins (deterministic).
	names := map[egraph.Id]string{}
	for id, n := range a.names {
		c := g.Find(id)
		if old, ok := names[c]; !ok || n < old {
			names[c] = n
		}
	}
	pos := map[egraph.Id]ir.Pos{}
	for id, p := range a.pos {
		pos[g.Find(id)] = p
	}
	nodeKey := func(n egraph.Node) string {
		k := fmt.Sprint(n.Op, ":", n.Attr)
		for _, c := range n.Children {
			k += "," + strconv.Itoa(int(g.Find(c)))
		}
		return k
	}
	written := map[string]bool{}
	for _, n := range a.written {
		written[nodeKey(n)] = true
	}
	built := map[egraph.Id]ir.Value{}
	total := 0.0
	for _, x := range xs {
		for i, c := range x.Order {
			if _, ok := built[c]; ok {
				continue
			}
			n := x.Nodes[i]
			b.At(pos[c])
			if cost != nil {
				total += cost(g, c, n)
			}
			var v ir.Value
			switch n.Op {
			case projOut0, projOut1:
				p := built[g.Find(n.Children[0])]
				built[c] = ir.Value{Node: p.Node, Out: int(n.Op - projOut0)}
				continue
			}
			op := ir.Op(n.Op)
			switch op {
			case ir.Input:
				name := g.AttrValues(n.Attr)[0]
				in, ok := inputs[name]
				if !ok {
					return nil, 0, fmt.Errorf("extracted graph uses input %q, which %s does not have", name, f.Name)
				}
				v = in
			case ir.Param, ir.State:
				av := g.AttrValues(n.Attr)
				t, err := parseType(av[1])
				if err != nil {
					return nil, 0, err
				}
				if op == ir.Param {
					v = b.Param(av[0], t)
				} else {
					v = b.State(av[0], t)
				}
			case ir.Const:
				t, err := a.constValue(n)
				if err != nil {
					return nil, 0, err
				}
				v = b.Const(t)
			default:
				at, err := a.decodeAttrs(op, n.Attr)
				if err != nil {
					return nil, 0, err
				}
				args := make([]ir.Value, len(n.Children))
				for j, ch := range n.Children {
					cv, ok := built[g.Find(ch)]
					if !ok {
						return nil, 0, fmt.Errorf("extraction order: e-class %d used before it is built", ch)
					}
					args[j] = cv
				}
				v, err = b.Op(op, at.Clone(), args...)
				if err != nil {
					return nil, 0, fmt.Errorf("extracted node %s: %w", g.NodeString(n), err)
				}
				if !written[nodeKey(n)] {
					v.Node.Rule = n.Origin()
				}
				v.Node.Name = names[c]
			}
			built[c] = v
		}
	}
	result := func(v ir.Value) (ir.Value, error) {
		r, ok := built[g.Find(vals[v])]
		if !ok {
			return ir.Value{}, fmt.Errorf("the extraction does not cover the result %%%d.%d", v.Node.ID, v.Out)
		}
		return r, nil
	}
	for _, o := range f.Outputs {
		v, err := result(o.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("output %s: %w", o.Name, err)
		}
		if err := b.Output(o.Name, v); err != nil {
			return nil, 0, err
		}
	}
	for _, u := range f.Updates {
		v, err := result(u.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("update of %s: %w", u.Name, err)
		}
		if err := b.Update(u.Name, v); err != nil {
			return nil, 0, err
		}
	}
	out := b.Function()
	out.Pos = f.Pos
	return out, total, nil
}
