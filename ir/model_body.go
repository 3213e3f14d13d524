package ir

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

var functionKeys = []string{"dims", "inputs", "outputs", "body"}

// fnBuilder builds one function from its body.
type fnBuilder struct {
	p      *modelParser
	name   string
	b      *Builder
	dims   map[string]int // the function's own dimensions
	loop   []loopVar      // enclosing repeat variables, outermost first
	vars   map[string]Value
	inputs map[string]bool
	// updated holds state values written by "<-"; later reads of that state see them.
	updated map[string]Value
	// stmt and line describe the statement being built, for messages.
	stmt string
	line int
	body *yaml.Node // the function's body, for messages
	// steps counts statements and loop iterations against ParseOptions.MaxStatements.
	steps int
	// at is the value the function's run-time dimension takes, or 0 to build it at capacity
	// with a length node (see Length); lengthName is that dimension, length its node.
	at         int
	lengthName string
	length     Value
	// capacity, when positive, replaces the run-time dimension's maximum (Function.WithCapacity).
	capacity int
}

type loopVar struct {
	name string
	val  int
}

func (p *modelParser) parseFunctions(n *yaml.Node) error {
	return p.eachKey(n, "functions", nil, func(name string, kn, v *yaml.Node) error {
		if !identRE.MatchString(name) {
			return p.errAt(kn, "function "+name, "a function name is a plain identifier")
		}
		f, err := p.parseFunction(name, kn, v)
		if err != nil {
			return err
		}
		p.m.Functions = append(p.m.Functions, f)
		return nil
	})
}

func (p *modelParser) parseFunction(name string, kn, v *yaml.Node) (*Function, error) {
	f, err := p.buildFunction(name, kn, v, 0, 0)
	if err != nil {
		return nil, err
	}
	if l := f.Length; l != nil {
		l.inst = &instances{build: func(n int) (*Function, error) {
			// Builds share the parser's statement cache.
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.buildFunction(name, kn, v, n, 0)
		}, capacity: func(c int) (*Function, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.buildFunction(name, kn, v, 0, c)
		}}
		if err := p.checkLength(f, kn); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// lengthRangeRE matches a run-time dimension's bounds, "1..512" (expressions allowed).
var lengthRangeRE = regexp.MustCompile(`^\s*(.+?)\s*\.\.\s*(.+?)\s*$`)

// buildFunction builds function name. A run-time dimension (dims: {seq: 1..512}) is built at its
// capacity with a length node when at is 0 (at capacity instead of the declared maximum when
// capacity > 0: Function.WithCapacity), and as the constant at otherwise (Function.At).
func (p *modelParser) buildFunction(name string, kn, v *yaml.Node, at, capacity int) (*Function, error) {
	fb := &fnBuilder{p: p, name: name, b: NewBuilder(name), dims: map[string]int{},
		vars: map[string]Value{}, inputs: map[string]bool{}, updated: map[string]Value{}, at: at, capacity: capacity}
	fb.b.f.Pos = p.pos(kn)
	ctx := "function " + name
	if at > 0 {
		ctx += fmt.Sprintf(" (at length %d)", at)
	}
	secs := map[string]*yaml.Node{}
	if err := p.eachKey(v, ctx, functionKeys, func(k string, _, vv *yaml.Node) error {
		secs[k] = vv
		return nil
	}); err != nil {
		return nil, err
	}
	if d := secs["dims"]; d != nil {
		if err := p.eachKey(d, ctx+": dims", nil, func(k string, dk, dv *yaml.Node) error {
			if !identRE.MatchString(k) {
				return p.errAt(dk, ctx+": dims: "+k, "a dimension name is a plain identifier")
			}
			if what := p.nameTaken(k); what != "" {
				return p.errAt(dk, ctx+": dims: "+k, "duplicate name: %s is already %s", k, what)
			}
			if m := lengthRangeRE.FindStringSubmatch(dv.Value); dv.Kind == yaml.ScalarNode && m != nil {
				return fb.lengthDim(k, dk, dv, m[1], m[2])
			}
			val, err := p.dimExpr(dv, fb.lookupStatic)
			if err != nil {
				return p.errAt(dv, ctx+": dims: "+k, "%v", err)
			}
			fb.dims[k] = val
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if in := secs["inputs"]; in != nil {
		if err := p.eachKey(in, ctx+": inputs", nil, func(k string, ik, iv *yaml.Node) error {
			ictx := ctx + ": input " + k
			if !identRE.MatchString(k) {
				return p.errAt(ik, ictx, "an input name is a plain identifier")
			}
			if what := fb.nameTaken(k); what != "" {
				return p.errAt(ik, ictx, "duplicate name: %s is already %s", k, what)
			}
			t, err := p.parseType(iv, p.dtype, fb.lookupStatic)
			if err != nil {
				return p.errAt(iv, ictx, "%v", err)
			}
			if t.DType.Quantized() {
				return p.errAt(iv, ictx, "an input cannot be %s: block-quantized dtypes are for parameters (weights) only", t.DType)
			}
			fb.b.At(p.pos(ik))
			val, err := fb.b.Input(k, t)
			if err != nil {
				return p.errAt(ik, ictx, "%v", err)
			}
			fb.vars[k] = val
			fb.inputs[k] = true
			return nil
		}); err != nil {
			return nil, err
		}
	}
	body := secs["body"]
	if body == nil {
		return nil, p.errAt(v, ctx, "missing body")
	}
	fb.body = body
	if err := fb.block(body); err != nil {
		return nil, err
	}
	outs := secs["outputs"]
	if outs == nil {
		return nil, p.errAt(v, ctx, "missing outputs")
	}
	if err := fb.outputs(outs); err != nil {
		return nil, err
	}
	// State updates go in declaration order so the function does not depend on map iteration.
	for _, d := range p.m.State {
		if u, ok := fb.updated[d.Name]; ok {
			if err := fb.b.Update(d.Name, u); err != nil {
				return nil, p.errAt(v, ctx, "%v", err)
			}
		}
	}
	return fb.b.Function(), nil
}

// lengthDim declares the run-time dimension k with bounds lo..hi: at capacity (fb.at == 0) the
// dimension is hi and the function gets its length node; at a length it is fb.at.
func (fb *fnBuilder) lengthDim(k string, dk, dv *yaml.Node, lo, hi string) error {
	p := fb.p
	ctx := "function " + fb.name + ": dims: " + k
	if fb.lengthName != "" {
		return p.errAt(dk, ctx, "a function has one run-time dimension; %s is one already", fb.lengthName)
	}
	var bounds [2]int
	for i, s := range []string{lo, hi} {
		e, err := parseExprString(s)
		if err != nil {
			return p.errAt(dv, ctx, "bound %q: %v", s, err)
		}
		if bounds[i], err = intExpr(e, fb.lookupStatic); err != nil {
			return p.errAt(dv, ctx, "bound %q: %v", s, err)
		}
	}
	if bounds[0] < 1 || bounds[0] > bounds[1] {
		return p.errAt(dv, ctx, "run-time bounds %d..%d: want 1 ≤ min ≤ max", bounds[0], bounds[1])
	}
	if bounds[1] > maxElements {
		return p.errAt(dv, ctx, "run-time bound %d is too large", bounds[1])
	}
	fb.lengthName = k
	if fb.at > 0 {
		fb.dims[k] = fb.at
		return nil
	}
	if c := fb.capacity; c > 0 {
		if c < bounds[0] || c > bounds[1] {
			return p.errAt(dv, ctx, "capacity %d is outside the bounds %d..%d", c, bounds[0], bounds[1])
		}
		bounds[1] = c
	}
	fb.dims[k] = bounds[1]
	fb.b.At(p.pos(dk))
	v, err := fb.b.Length(k, bounds[0], bounds[1])
	if err != nil {
		return p.errAt(dk, ctx, "%v", err)
	}
	fb.length = v
	return nil
}

// isLength reports whether e is the bare name of the function's run-time dimension.
func (fb *fnBuilder) isLength(e *expr) bool {
	return fb.lengthName != "" && e.kind == eName && len(e.parts) == 1 && e.parts[0].e == nil && e.str == fb.lengthName &&
		fb.vars[e.str].Node == nil
}

// mentionsLength reports whether the static expression e uses the run-time dimension.
func (fb *fnBuilder) mentionsLength(e *expr) bool {
	if fb.lengthName == "" || e == nil {
		return false
	}
	switch e.kind {
	case eName:
		return e.str == fb.lengthName
	case eNeg:
		return fb.mentionsLength(e.l)
	case eBin:
		return fb.mentionsLength(e.l) || fb.mentionsLength(e.r)
	case eCall, eList:
		for _, a := range e.args {
			if fb.mentionsLength(a) {
				return true
			}
		}
	}
	return false
}

// lengthValue is the value a use of the run-time dimension denotes at capacity: the length
// node. An expression of it is an error (its value would be computed at the capacity).
func (fb *fnBuilder) lengthValue(e *expr) (Value, bool, error) {
	if fb.at > 0 || fb.lengthName == "" {
		return Value{}, false, nil
	}
	if fb.isLength(e) {
		return fb.length, true, nil
	}
	if fb.isStatic(e) && fb.mentionsLength(e) {
		return Value{}, true, fb.errf("column %d: %s uses the run-time length %s in arithmetic; use %s alone as a value (e.g. sub(%s, 1))", e.col, e, fb.lengthName, fb.lengthName, fb.lengthName)
	}
	return Value{}, false, nil
}

// checkLength records which inputs and outputs of f the run-time length sets, by building f at
// another length and comparing the signatures, and checks the graph with LengthRows.
func (p *modelParser) checkLength(f *Function, kn *yaml.Node) error {
	l := f.Length
	ctx := "function " + f.Name
	probe := l.Max - 1
	if probe < l.Min {
		probe = l.Max
	}
	g, err := f.At(probe)
	if err != nil {
		return err
	}
	scales := func(what, name string, ct, pt Type) (bool, error) {
		if ct.Equal(pt) {
			return false, nil
		}
		r := ct.Shape.Rank()
		ok := r > 0 && pt.Shape.Rank() == r && ct.DType == pt.DType && ct.Shape[0]%l.Max == 0 &&
			pt.Shape[0] == ct.Shape[0]/l.Max*probe
		for i := 1; ok && i < r; i++ {
			ok = ct.Shape[i] == pt.Shape[i]
		}
		if !ok {
			return false, fmt.Errorf("%s %s: the run-time length %s may set only the leading axis, as a multiple k·%s (it is %s at %s=%d and %s at %s=%d)",
				what, name, l.Dim, l.Dim, ct, l.Dim, l.Max, pt, l.Dim, probe)
		}
		return true, nil
	}
	l.Inputs = make([]bool, len(f.Inputs))
	any := false
	for i, in := range f.Inputs {
		b, err := scales("input", in.Name, in.Type(), g.Inputs[i].Type())
		if err != nil {
			return &SourceError{Pos: in.Pos, Context: ctx, Err: err}
		}
		l.Inputs[i], any = b, any || b
	}
	l.Outputs = make([]bool, len(f.Outputs))
	for i, o := range f.Outputs {
		b, err := scales("output", o.Name, o.Value.Type(), g.Outputs[i].Value.Type())
		if err != nil {
			return &SourceError{Pos: p.pos(kn), Context: ctx, Err: err}
		}
		l.Outputs[i] = b
	}
	if !any && l.Min < l.Max {
		return &SourceError{Pos: p.pos(kn), Context: ctx, Err: fmt.Errorf("no input has the run-time length %s as its leading axis, so a run could not say its length", l.Dim)}
	}
	if _, err := LengthRows(f); err != nil {
		if se, ok := err.(*SourceError); ok {
			se.Context = ctx + ": " + se.Context
			return se
		}
		return fmt.Errorf("%s: %s: %w", p.file, ctx, err)
	}
	return nil
}

func (fb *fnBuilder) nameTaken(name string) string {
	if what := fb.p.nameTaken(name); what != "" {
		return what
	}
	if _, ok := fb.dims[name]; ok {
		return "a dimension of function " + fb.name
	}
	if fb.inputs[name] {
		return "an input of function " + fb.name
	}
	for _, l := range fb.loop {
		if l.name == name {
			return "a repeat variable"
		}
	}
	return ""
}

// lookupStatic resolves a name in a dimension expression: loop variables, the function's
// dimensions, the model's dimensions.
func (fb *fnBuilder) lookupStatic(name string) (int, bool) {
	for i := len(fb.loop) - 1; i >= 0; i-- {
		if fb.loop[i].name == name {
			return fb.loop[i].val, true
		}
	}
	if v, ok := fb.dims[name]; ok {
		return v, true
	}
	return fb.p.lookupDim(name)
}

func (fb *fnBuilder) context() string {
	s := "function " + fb.name
	if len(fb.loop) > 0 {
		var l []string
		for _, v := range fb.loop {
			l = append(l, fmt.Sprintf("%s=%d", v.name, v.val))
		}
		s += " (" + strings.Join(l, ", ") + ")"
	}
	if fb.stmt != "" {
		s += ": `" + SafeText(fb.stmt, 200) + "`"
	}
	return s
}

func (fb *fnBuilder) errf(format string, args ...any) error {
	return &SourceError{Pos: Pos{fb.p.file, fb.line}, Context: fb.context(), Err: fmt.Errorf(format, args...)}
}

var repeatRE = regexp.MustCompile(`^repeat\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+?)\s*\.\.\s*(.+)$`)

// block builds a sequence of body items: statements and repeat blocks.
func (fb *fnBuilder) block(n *yaml.Node) error {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return fb.p.errAt(n, "function "+fb.name, "a body is a list of statements (- x = op(...))")
	}
	for _, item := range n.Content {
		item = resolve(item)
		switch item.Kind {
		case yaml.ScalarNode:
			if err := fb.statement(item); err != nil {
				return err
			}
		case yaml.MappingNode:
			if len(item.Content) != 2 {
				return fb.p.errAt(item, fb.context(), "a body item is a statement or one 'repeat i in 0..n:' block (is a statement missing its '- '?)")
			}
			kn, body := resolve(item.Content[0]), item.Content[1]
			mm := repeatRE.FindStringSubmatch(strings.TrimSpace(kn.Value))
			if mm == nil {
				return fb.p.errAt(kn, fb.context(), "%q is neither a statement nor 'repeat i in a..b' (a statement containing ': ' must be quoted)", kn.Value+": ...")
			}
			fb.line = kn.Line
			fb.stmt = ""
			if what := fb.nameTaken(mm[1]); what != "" {
				return fb.errf("duplicate name: repeat variable %s is already %s", mm[1], what)
			}
			var bounds [2]int
			for i, s := range mm[2:] {
				e, err := parseExprString(s)
				if err != nil {
					return fb.errf("repeat bound %q: %v", s, err)
				}
				if fb.mentionsLength(e) {
					return fb.errf("repeat bound %q depends on the run-time length %s; the graph cannot change with it", s, fb.lengthName)
				}
				if bounds[i], err = intExpr(e, fb.lookupStatic); err != nil {
					return fb.errf("repeat bound %q: %v", s, err)
				}
			}
			for v := bounds[0]; v < bounds[1]; v++ {
				if fb.steps++; fb.steps > fb.p.limit {
					return fb.errf("the function expands to more than %d statements", fb.p.limit)
				}
				fb.loop = append(fb.loop, loopVar{mm[1], v})
				err := fb.block(body)
				fb.loop = fb.loop[:len(fb.loop)-1]
				if err != nil {
					return err
				}
			}
		default:
			return fb.p.errAt(item, fb.context(), "a body item is a statement string or a repeat block")
		}
	}
	return nil
}

func (fb *fnBuilder) statement(n *yaml.Node) error {
	if fb.steps++; fb.steps > fb.p.limit {
		return fb.p.errAt(n, fb.context(), "the function expands to more than %d statements", fb.p.limit)
	}
	if nodes := len(fb.b.Function().Nodes); nodes > fb.p.nodeLimit {
		return fb.p.errAt(n, fb.context(), "the function has more than %d nodes (ParseOptions.MaxNodes)", fb.p.nodeLimit)
	}
	fb.stmt = strings.TrimSpace(n.Value)
	fb.line = n.Line
	defer func() { fb.stmt = "" }()
	fb.b.At(Pos{fb.p.file, n.Line})
	// A statement inside a repeat (or a shared body) is parsed once.
	st, ok := fb.p.stmts[n]
	if !ok {
		var err error
		if st, err = parseStatement(fb.stmt); err != nil {
			return fb.errf("syntax: %v", err)
		}
		fb.p.stmts[n] = st
	}
	targets := make([]string, len(st.targets))
	for i, t := range st.targets {
		name, err := expandParts(t.parts, fb.lookupStatic)
		if err != nil {
			return fb.errf("%v", err)
		}
		targets[i] = name
	}
	if st.update {
		name := targets[0]
		d := fb.p.state[name]
		if d == nil {
			return fb.errf("%s is not a declared state tensor (only state is updated with <-)", name)
		}
		if _, dup := fb.updated[name]; dup {
			return fb.errf("state %s is updated twice in function %s", name, fb.name)
		}
		v, err := fb.value(st.rhs, InvalidDType)
		if err != nil {
			return err
		}
		if !v.Type().Equal(d.Type) {
			return fb.errf("state %s is %s but the new value is %s", name, d.Type, v.Type())
		}
		fb.updated[name] = v
		return nil
	}
	for _, t := range targets {
		if what := fb.nameTaken(t); what != "" {
			return fb.errf("duplicate name: cannot assign %s, it is already %s", t, what)
		}
	}
	if len(targets) == 1 {
		v, err := fb.value(st.rhs, InvalidDType)
		if err != nil {
			return err
		}
		fb.assign(targets[0], v)
		return nil
	}
	if st.rhs.kind != eCall {
		return fb.errf("%d targets need an op with %d outputs", len(targets), len(targets))
	}
	v, err := fb.value(st.rhs, InvalidDType)
	if err != nil {
		return err
	}
	if got := len(v.Node.Outs); got != len(targets) {
		return fb.errf("%d targets but %s has %d output(s)", len(targets), v.Node.Op, got)
	}
	for i, t := range targets {
		fb.assign(t, Value{v.Node, i})
	}
	return nil
}

// assign binds a variable and names the node for display: "h" at the top level, "h[i=1]" inside
// a repeat (irdot draws one cluster per repeat iteration from that suffix).
func (fb *fnBuilder) assign(name string, v Value) {
	fb.vars[name] = v
	if v.Node.Name != "" || v.Node.Op.Info().Kind == KindSource {
		return
	}
	if len(fb.loop) > 0 {
		var l []string
		for _, lv := range fb.loop {
			l = append(l, fmt.Sprintf("%s=%d", lv.name, lv.val))
		}
		name += "[" + strings.Join(l, ",") + "]"
	}
	v.Node.Name = name
}

// isStatic reports whether e is a number or an expression of dimensions (no tensors).
func (fb *fnBuilder) isStatic(e *expr) bool {
	switch e.kind {
	case eNum:
		return true
	case eName:
		if len(e.parts) != 1 || e.parts[0].e != nil {
			return false
		}
		if _, ok := fb.vars[e.str]; ok {
			return false
		}
		if fb.p.params[e.str] != nil || fb.p.state[e.str] != nil {
			return false
		}
		_, ok := fb.lookupStatic(e.str)
		return ok
	case eNeg:
		return fb.isStatic(e.l)
	case eBin:
		return fb.isStatic(e.l) && fb.isStatic(e.r)
	case eCall:
		if e.str != "sqrt" || len(e.args) != 1 {
			return false
		}
		return fb.isStatic(e.args[0])
	}
	return false
}

// constant makes a scalar constant from a static expression; dtype is the dtype it should take
// (InvalidDType: i32 for integers, f32 otherwise).
func (fb *fnBuilder) constant(e *expr, d DType) (Value, error) {
	x, err := evalNum(e, fb.lookupStatic)
	if err != nil {
		return Value{}, fb.errf("%v", err)
	}
	if d == InvalidDType {
		d = F32
		if x.isInt {
			d = I32
		}
	}
	if d.IsInt() && !x.isInt {
		return Value{}, fb.errf("constant %s is not an integer but is used as %s", x, d)
	}
	return fb.b.Scalar(d, x.float()), nil
}

// value builds the tensor an expression denotes. dtype is the dtype a bare constant takes.
func (fb *fnBuilder) value(e *expr, dtype DType) (Value, error) {
	if v, ok, err := fb.lengthValue(e); ok {
		return v, err
	}
	if fb.isStatic(e) {
		return fb.constant(e, dtype)
	}
	switch e.kind {
	case eName:
		return fb.lookupTensor(e)
	case eCall:
		return fb.call(e)
	case eBin, eNeg:
		return Value{}, fb.errf("column %d: + - * / %% work on dimensions only; for tensors write add(a, b), sub, mul, div or neg", e.col)
	case eList:
		return Value{}, fb.errf("column %d: a list is an attribute value (key=[...]), not a tensor", e.col)
	case eStr:
		return Value{}, fb.errf("column %d: a string is an attribute value (key=\"...\"), not a tensor", e.col)
	}
	return Value{}, fb.errf("column %d: %s is not a tensor", e.col, e)
}

func (fb *fnBuilder) lookupTensor(e *expr) (Value, error) {
	name, err := expandParts(e.parts, fb.lookupStatic)
	if err != nil {
		return Value{}, fb.errf("%v", err)
	}
	if v, ok := fb.vars[name]; ok {
		return v, nil
	}
	if v, ok := fb.updated[name]; ok {
		return v, nil
	}
	if d := fb.p.state[name]; d != nil {
		return fb.b.State(name, d.Type), nil
	}
	if d := fb.p.params[name]; d != nil {
		return fb.b.Param(name, d.Type), nil
	}
	if _, ok := LookupOp(name); ok {
		return Value{}, fb.errf("%s is an op; call it as %s(...)", name, name)
	}
	if line := fb.definedAt(e.str); line > 0 {
		return Value{}, fb.errf("use before definition: %s is assigned only later, at line %d", name, line)
	}
	return Value{}, fb.errf("use before definition: %s is not defined (no variable, input, parameter, state or dimension has that name)", name)
}

// definedAt finds a statement of the body that assigns the raw name (templates unexpanded), for
// a better "use before definition" message; 0 when there is none.
func (fb *fnBuilder) definedAt(raw string) int {
	var walk func(n *yaml.Node, depth int) int
	walk = func(n *yaml.Node, depth int) int {
		n = resolve(n)
		if n == nil || depth > 20 {
			return 0
		}
		switch n.Kind {
		case yaml.ScalarNode:
			if st, ok := fb.p.stmts[n]; ok || n.Line > fb.line {
				if !ok {
					var err error
					if st, err = parseStatement(strings.TrimSpace(n.Value)); err != nil {
						return 0
					}
				}
				for _, t := range st.targets {
					if t.str == raw && n.Line != fb.line {
						return n.Line
					}
				}
			}
		case yaml.SequenceNode, yaml.MappingNode:
			for _, c := range n.Content {
				if l := walk(c, depth+1); l > 0 {
					return l
				}
			}
		}
		return 0
	}
	return walk(fb.body, 0)
}

func (fb *fnBuilder) call(e *expr) (Value, error) {
	op, ok := LookupOp(e.str)
	if !ok {
		return Value{}, fb.errf("unknown op %s%s", e.str, suggestOp(e.str))
	}
	if op.Info().Kind == KindSource {
		return Value{}, fb.errf("%s is a source op; name inputs, parameters and state directly", e.str)
	}
	info := op.Info()
	if len(e.args) < info.MinArgs || len(e.args) > info.MaxArgs {
		want := fmt.Sprint(info.MinArgs)
		if info.MaxArgs != info.MinArgs {
			want = fmt.Sprintf("%d to %d", info.MinArgs, info.MaxArgs)
			if info.MaxArgs > 100 {
				want = fmt.Sprintf("at least %d", info.MinArgs)
			}
		}
		return Value{}, fb.errf("wrong arity: %s takes %s arguments, got %d", e.str, want, len(e.args))
	}
	args := make([]Value, len(e.args))
	var static []int
	cdt := InvalidDType
	for i, a := range e.args {
		if v, ok, err := fb.lengthValue(a); ok {
			if err != nil {
				return Value{}, err
			}
			args[i] = v
			continue
		}
		if fb.isStatic(a) {
			static = append(static, i)
			continue
		}
		v, err := fb.value(a, InvalidDType)
		if err != nil {
			return Value{}, err
		}
		args[i] = v
		if cdt == InvalidDType && v.Type().DType != Bool {
			cdt = v.Type().DType
		}
	}
	if !op.IsElementwise() {
		cdt = InvalidDType
	}
	for _, i := range static {
		v, err := fb.constant(e.args[i], cdt)
		if err != nil {
			return Value{}, err
		}
		args[i] = v
	}
	attrs := Attrs{}
	for _, kw := range e.kw {
		v, err := fb.attr(kw.val)
		if err != nil {
			return Value{}, fb.errf("attribute %s: %v", kw.name, err)
		}
		attrs[kw.name] = v
	}
	v, err := fb.b.Op(op, attrs, args...)
	if err != nil {
		if len(args) > 0 && !strings.HasPrefix(err.Error(), e.str) {
			return Value{}, fb.errf("%s: %v", e.str, err)
		}
		return Value{}, fb.errf("%v", err)
	}
	return v, nil
}

// attr evaluates an attribute value: a list of integers, a string, true/false, a dimension, a
// number or an expression of dimensions; any other bare word is a string (mode=half, to=f16).
func (fb *fnBuilder) attr(e *expr) (any, error) {
	switch e.kind {
	case eStr:
		return e.str, nil
	case eList:
		l := make([]int, len(e.args))
		for i, a := range e.args {
			v, err := intExpr(a, fb.lookupStatic)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, nil
	case eName:
		if len(e.parts) == 1 && e.parts[0].e == nil {
			if v, ok := fb.lookupStatic(e.str); ok {
				return v, nil
			}
			switch e.str {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
			return e.str, nil
		}
	}
	x, err := evalNum(e, fb.lookupStatic)
	if err != nil {
		return nil, err
	}
	if x.isInt {
		return x.i, nil
	}
	return x.f, nil
}

func (fb *fnBuilder) outputs(n *yaml.Node) error {
	ctx := "function " + fb.name + ": outputs"
	add := func(name string, at *yaml.Node, want *Type) error {
		fb.line = at.Line
		e, err := parseExprString(name)
		if err != nil || e.kind != eName {
			return fb.p.errAt(at, ctx, "%q is not a name", name)
		}
		v, err := fb.lookupTensor(e)
		if err != nil {
			return fb.p.errAt(at, ctx, "output %s: use before definition: no variable, input, parameter or state has that name", name)
		}
		if want != nil && !want.Equal(v.Type()) {
			return fb.p.errAt(at, ctx, "output %s is declared %s but is %s", name, *want, v.Type())
		}
		if err := fb.b.Output(name, v); err != nil {
			return fb.p.errAt(at, ctx, "duplicate name: %v", err)
		}
		return nil
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.SequenceNode:
		for _, o := range n.Content {
			o = resolve(o)
			if o.Kind != yaml.ScalarNode {
				return fb.p.errAt(o, ctx, "an output is a variable name")
			}
			if err := add(o.Value, o, nil); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		return fb.p.eachKey(n, ctx, nil, func(k string, kn, v *yaml.Node) error {
			t, err := fb.p.parseType(v, fb.p.dtype, fb.lookupStatic)
			if err != nil {
				return fb.p.errAt(v, ctx, "output %s: %v", k, err)
			}
			return add(k, kn, &t)
		})
	default:
		return fb.p.errAt(n, ctx, "outputs is a list of names or a mapping of names to types")
	}
	if len(fb.b.f.Outputs) == 0 {
		return fb.p.errAt(n, ctx, "a function needs at least one output")
	}
	return nil
}

// suggestOp names the closest op, for "unknown op" messages.
func suggestOp(name string) string {
	best, bestD := "", 3
	var names []string
	for _, op := range Ops() {
		names = append(names, op.String())
	}
	sort.Strings(names)
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
