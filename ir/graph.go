package ir

import (
	"fmt"
	"sort"
)

// Pos is a place in a model source, for error messages ("model.yaml:12").
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.File == "" && p.Line == 0 {
		return ""
	}
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Node is one operation in a function. Nodes are immutable once built.
type Node struct {
	ID    int // unique within its function, increasing in topological order
	Op    Op
	Args  []Value
	Attrs Attrs
	Outs  []Type // output types; one for every op of the base set
	// Name is the source name of Input, Param and State nodes, and for others the variable the
	// model assigned the node to (for display; may be empty).
	Name  string
	Value *Tensor // the constant of a Const node
	Pos   Pos     // where the node was written
	// Rule names the rewrite rule that introduced the node when a graph comes out of the e-graph
	// optimiser (rules.Optimize), e.g. "add-rmsnorm"; empty for nodes as the model wrote them. It
	// is for display (vkc dot --fused) and reports, not part of the node's meaning.
	Rule string
}

// Value is one output of a node.
type Value struct {
	Node *Node
	Out  int
}

// Type is the value's tensor type.
func (v Value) Type() Type { return v.Node.Outs[v.Out] }

// V is the first (usually only) output of n.
func (n *Node) V() Value { return Value{n, 0} }

// Type is the type of the first output.
func (n *Node) Type() Type { return n.Outs[0] }

func (n *Node) String() string {
	s := fmt.Sprintf("%%%d = %s", n.ID, n.Op)
	if k := n.Attrs.Key(); k != "" {
		s += "[" + k + "]"
	}
	if n.Name != "" {
		s += " " + n.Name
	}
	for i, a := range n.Args {
		if i == 0 {
			s += "("
		} else {
			s += ", "
		}
		s += fmt.Sprintf("%%%d", a.Node.ID)
		if a.Out != 0 {
			s += fmt.Sprintf(".%d", a.Out)
		}
		if i == len(n.Args)-1 {
			s += ")"
		}
	}
	if len(n.Outs) == 1 {
		return s + " : " + n.Outs[0].String()
	}
	return s + fmt.Sprintf(" : %v", n.Outs)
}

// Output is a named function result.
type Output struct {
	Name  string
	Value Value
}

// StateUpdate says that after a run the state tensor Name holds Value.
type StateUpdate struct {
	Name  string
	Value Value
}

// Function is one entry point of a model (e.g. prefill, decode): a DAG of nodes in topological
// order with typed inputs and outputs. Parameters and state are shared by all functions.
type Function struct {
	Name    string
	Inputs  []*Node // Input nodes, in signature order
	Outputs []Output
	Updates []StateUpdate
	Nodes   []*Node // every node, topologically ordered
	Pos     Pos
	// Length, when not nil, is the function's run-time dimension (see Length): the function is
	// built at its capacity and runs for any length up to it.
	Length *Length
}

// Decl declares a parameter or a state tensor.
type Decl struct {
	Name string
	Type Type
	Pos  Pos
}

// Model is a parsed and validated model: dimensions, parameters, state and functions.
type Model struct {
	Name      string
	Dims      map[string]int
	Params    []*Decl
	State     []*Decl
	Functions []*Function
	// Weights holds the parameter tensors by name, once loaded (LoadWeights or random init).
	Weights map[string]*Tensor
	Source  string // the model file, for messages
	// Tokenizer is the tokenizer file the model names (model.yaml's tokenizer key, resolved
	// against its folder; an importer sets the source's own), or "" when it names none. A
	// compiled plan records it (vkc compile) unless told otherwise.
	Tokenizer string

	mappings []*Mapping // files the weights alias (see Close)
}

// Function returns the named function or nil.
func (m *Model) Function(name string) *Function {
	for _, f := range m.Functions {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Param returns the named parameter declaration or nil.
func (m *Model) Param(name string) *Decl {
	for _, d := range m.Params {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// StateDecl returns the named state declaration or nil.
func (m *Model) StateDecl(name string) *Decl {
	for _, d := range m.State {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Builder builds a Function node by node, inferring types as it goes. Errors are returned at
// each step; the Pos set with At is attached to new nodes.
type Builder struct {
	f   *Function
	pos Pos
	// sources deduplicates Param and State nodes by name.
	sources map[string]*Node
}

// NewBuilder starts a function.
func NewBuilder(name string) *Builder {
	return &Builder{f: &Function{Name: name}, sources: map[string]*Node{}}
}

// At sets the source position recorded on the following nodes.
func (b *Builder) At(p Pos) *Builder { b.pos = p; return b }

func (b *Builder) add(n *Node) *Node {
	n.ID = len(b.f.Nodes)
	n.Pos = b.pos
	b.f.Nodes = append(b.f.Nodes, n)
	return n
}

// Input adds a function input.
func (b *Builder) Input(name string, t Type) (Value, error) {
	for _, in := range b.f.Inputs {
		if in.Name == name {
			return Value{}, fmt.Errorf("duplicate input %q", name)
		}
	}
	n := b.add(&Node{Op: Input, Name: name, Attrs: Attrs{"name": name}, Outs: []Type{t}})
	b.f.Inputs = append(b.f.Inputs, n)
	return n.V(), nil
}

// Param refers to a model parameter (one node per name).
func (b *Builder) Param(name string, t Type) Value { return b.source(Param, name, t) }

// State refers to a state tensor's value at the start of the run (one node per name).
func (b *Builder) State(name string, t Type) Value { return b.source(State, name, t) }

func (b *Builder) source(op Op, name string, t Type) Value {
	key := op.String() + ":" + name
	if n, ok := b.sources[key]; ok {
		return n.V()
	}
	n := b.add(&Node{Op: op, Name: name, Attrs: Attrs{"name": name}, Outs: []Type{t}})
	b.sources[key] = n
	return n.V()
}

// Const adds a constant tensor.
func (b *Builder) Const(t *Tensor) Value {
	return b.add(&Node{Op: Const, Value: t, Outs: []Type{t.Type}}).V()
}

// Scalar adds a rank-0 constant of dtype d.
func (b *Builder) Scalar(d DType, v float64) Value {
	return b.Const(TensorFromFloat64s(Type{d, Shape{}}, []float64{v}))
}

// Op adds an operation after checking its attributes and argument types.
func (b *Builder) Op(op Op, a Attrs, args ...Value) (Value, error) {
	if op.Info().Kind == KindSource {
		return Value{}, fmt.Errorf("%s is a source; use Input, Param, State or Const", op)
	}
	types := make([]Type, len(args))
	for i, v := range args {
		types[i] = v.Type()
	}
	a, outs, err := Infer(op, a, types)
	if err != nil {
		return Value{}, err
	}
	return b.add(&Node{Op: op, Args: append([]Value(nil), args...), Attrs: a, Outs: outs}).V(), nil
}

// MustOp is Op for tests and rule construction, where an error is a bug.
func (b *Builder) MustOp(op Op, a Attrs, args ...Value) Value {
	v, err := b.Op(op, a, args...)
	if err != nil {
		panic(err)
	}
	return v
}

// Name gives the node of v a display name.
func (b *Builder) Name(v Value, name string) { v.Node.Name = name }

// Output declares a result.
func (b *Builder) Output(name string, v Value) error {
	if v.Node == nil {
		return fmt.Errorf("output %q has no value", name)
	}
	for _, o := range b.f.Outputs {
		if o.Name == name {
			return fmt.Errorf("duplicate output %q", name)
		}
	}
	b.f.Outputs = append(b.f.Outputs, Output{name, v})
	return nil
}

// Update declares that state name holds v after the run; v must have the state's type.
func (b *Builder) Update(name string, v Value) error {
	if v.Node == nil {
		return fmt.Errorf("update of state %q has no value", name)
	}
	for _, u := range b.f.Updates {
		if u.Name == name {
			return fmt.Errorf("state %q is updated twice", name)
		}
	}
	st, ok := b.sources[State.String()+":"+name]
	if ok && !st.Type().Equal(v.Type()) {
		return fmt.Errorf("state %q is %s but the update is %s", name, st.Type(), v.Type())
	}
	b.f.Updates = append(b.f.Updates, StateUpdate{name, v})
	return nil
}

// Function returns the built function.
func (b *Builder) Function() *Function { return b.f }

// Validate checks the model's internal consistency: functions are DAGs in topological order,
// types agree with inference, sources refer to declared parameters and state of the right
// type, and updates match state types. Parsers call it; so does anything that rewrites a graph.
func (m *Model) Validate() error {
	// Index the declarations once: looking each source up by a linear scan made validation
	// quadratic in the number of layers.
	decls := map[string]*Decl{}
	for _, d := range m.Params {
		decls["param:"+d.Name] = d
	}
	for _, d := range m.State {
		decls["state:"+d.Name] = d
	}
	seenF := map[string]bool{}
	for _, f := range m.Functions {
		if seenF[f.Name] {
			return fmt.Errorf("duplicate function %q", f.Name)
		}
		seenF[f.Name] = true
		if err := m.validateFunction(f, decls); err != nil {
			return fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	return nil
}

func (m *Model) validateFunction(f *Function, decls map[string]*Decl) error {
	index := map[*Node]int{}
	for i, n := range f.Nodes {
		index[n] = i
	}
	for i, n := range f.Nodes {
		where := func(err error) error {
			if n.Pos.Line > 0 {
				return fmt.Errorf("%s: node %s: %w", n.Pos, n, err)
			}
			return fmt.Errorf("node %s: %w", n, err)
		}
		for _, a := range n.Args {
			j, ok := index[a.Node]
			if !ok || j >= i {
				return where(fmt.Errorf("argument %%%d is not defined before use", a.Node.ID))
			}
			if a.Out >= len(a.Node.Outs) {
				return where(fmt.Errorf("argument %%%d has no output %d", a.Node.ID, a.Out))
			}
		}
		switch n.Op {
		case Param:
			d := decls["param:"+n.Name]
			if d == nil {
				return where(fmt.Errorf("unknown parameter %q", n.Name))
			}
			if !d.Type.Equal(n.Type()) {
				return where(fmt.Errorf("parameter %q is declared %s", n.Name, d.Type))
			}
		case State:
			d := decls["state:"+n.Name]
			if d == nil {
				return where(fmt.Errorf("unknown state %q", n.Name))
			}
			if !d.Type.Equal(n.Type()) {
				return where(fmt.Errorf("state %q is declared %s", n.Name, d.Type))
			}
		case Const:
			if n.Value == nil || !n.Value.Type.Equal(n.Type()) || len(n.Value.Data) != n.Type().Bytes() {
				return where(fmt.Errorf("constant does not match its type"))
			}
		case Input:
		default:
			types := make([]Type, len(n.Args))
			for k, a := range n.Args {
				types[k] = a.Type()
			}
			_, outs, err := Infer(n.Op, n.Attrs, types)
			if err != nil {
				return where(err)
			}
			if len(outs) != len(n.Outs) {
				return where(fmt.Errorf("has %d outputs, inference gives %d", len(n.Outs), len(outs)))
			}
			for k := range outs {
				if !outs[k].Equal(n.Outs[k]) {
					return where(fmt.Errorf("output %d is %s, inference gives %s", k, n.Outs[k], outs[k]))
				}
			}
		}
	}
	for _, o := range f.Outputs {
		if _, ok := index[o.Value.Node]; !ok || o.Value.Out >= len(o.Value.Node.Outs) {
			return fmt.Errorf("output %q does not refer to a value of this function", o.Name)
		}
	}
	for _, u := range f.Updates {
		if _, ok := index[u.Value.Node]; !ok || u.Value.Out >= len(u.Value.Node.Outs) {
			return fmt.Errorf("update of state %q does not refer to a value of this function", u.Name)
		}
		d := decls["state:"+u.Name]
		if d == nil {
			return fmt.Errorf("update of unknown state %q", u.Name)
		}
		if !d.Type.Equal(u.Value.Type()) {
			return fmt.Errorf("state %q is %s but is updated with %s", u.Name, d.Type, u.Value.Type())
		}
	}
	return nil
}

// OpCounts counts the nodes of each op in f, sorted by op name, for summaries.
func (f *Function) OpCounts() []struct {
	Op    Op
	Count int
} {
	c := map[Op]int{}
	for _, n := range f.Nodes {
		c[n.Op]++
	}
	out := make([]struct {
		Op    Op
		Count int
	}, 0, len(c))
	for op, k := range c {
		out = append(out, struct {
			Op    Op
			Count int
		}{op, k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op.String() < out[j].Op.String() })
	return out
}
