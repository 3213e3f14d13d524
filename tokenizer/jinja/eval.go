package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Error is a template error: a syntax error found when compiling, or an error when rendering
// (a raise_exception call, an undefined value used, a type error). Line is the template line
// it happened at (0 when unknown).
type Error struct {
	Source string // the template's name (e.g. "tokenizer_config.json chat_template")
	Line   int
	Msg    string
	// Raised is true for the template's own raise_exception(message): Msg is then the
	// message exactly.
	Raised bool
}

func (e *Error) Error() string {
	where := e.Source
	if where == "" {
		where = "template"
	}
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", where, e.Line)
	}
	if e.Raised {
		return fmt.Sprintf("%s: raise_exception: %s", where, e.Msg)
	}
	return fmt.Sprintf("%s: %s", where, e.Msg)
}

// errorf makes an *Error without a place; the renderer adds the source and line.
func errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// Limits of a rendering (transformers has Python's, which are far larger; these keep a bad
// template from exhausting memory).
const (
	maxDepth = 200    // nested calls: of macros and of recursive loops, together
	maxRange = 100000 // items of range() (Jinja2's sandbox MAX_RANGE)
)

// maxOutput bounds the bytes of rendered text, and maxIterations the loop iterations of a
// rendering, so that no template runs without end (variables for the tests).
var (
	maxOutput     = 64 << 20
	maxIterations = 10_000_000
)

type scope struct {
	vars   map[string]any
	parent *scope
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) { s.vars[name] = v }

func newScope(parent *scope) *scope { return &scope{vars: map[string]any{}, parent: parent} }

type renderer struct {
	t     *Template
	out   *strings.Builder
	depth int
	iters int // loop iterations so far
}

// place gives err the template's name and line, if it has none yet.
func (r *renderer) place(err error, line int) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Source == "" {
			e.Source = r.t.name
		}
		if e.Line == 0 {
			e.Line = line
		}
		return e
	}
	if err == errBreak || err == errContinue {
		return err
	}
	return &Error{Source: r.t.name, Line: line, Msg: err.Error()}
}

func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > maxOutput {
		return errorf("the rendered text is over %d bytes", maxOutput)
	}
	r.out.WriteString(s)
	return nil
}

func (r *renderer) exec(body []node, sc *scope) error {
	for _, n := range body {
		if err := r.execNode(n, sc); err != nil {
			return r.place(err, n.nodeLine())
		}
	}
	return nil
}

func (r *renderer) execNode(n node, sc *scope) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		return r.write(str(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(n.bodys[i], sc)
			}
		}
		return r.exec(n.els, sc)
	case *forNode:
		return r.execFor(n, sc)
	case *setNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		return r.assign(n.target, v, sc)
	case *setBlockNode:
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		var v any = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.assign(n.target, v, sc)
	case *macroNode:
		sc.set(n.name, r.macro(n, sc))
		return nil
	case *filterBlockNode:
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		var v any = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.write(str(v))
	case *loopCtlNode:
		if n.brk {
			return errBreak
		}
		return errContinue
	case *withNode:
		inner := newScope(sc)
		for i, t := range n.targets {
			v, err := r.eval(n.values[i], sc)
			if err != nil {
				return err
			}
			if err := r.assign(t, v, inner); err != nil {
				return err
			}
		}
		return r.exec(n.body, inner)
	case *generationNode:
		return r.exec(n.body, sc)
	}
	return fmt.Errorf("unknown node %T", n)
}

// capture renders body into a string (a block set or filter block).
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.exec(body, sc)
	r.out = saved
	return b.String(), err
}

func (r *renderer) assign(target expr, v any, sc *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		sc.set(t.name, v)
		return nil
	case *tupleExpr:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.items) {
			if len(items) > len(t.items) {
				return errorf("too many values to unpack (expected %d)", len(t.items))
			}
			return errorf("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, x := range t.items {
			if err := r.assign(x, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case *attrExpr:
		name := t.x.(*nameExpr).name
		obj, ok := sc.lookup(name)
		ns, isNS := obj.(*Namespace)
		if !ok || !isNS {
			return errorf("cannot assign attribute on non-namespace object")
		}
		ns.d.Set(t.name, v)
		return nil
	}
	return errorf("cannot assign to %T", target)
}

// loopObj is the loop variable of a for.
type loopObj struct {
	items   []any
	index   int
	depth   int
	changed []any // the last value passed to changed()
	seen    bool
	rec     func(v any) (any, error) // loop(...) of a recursive loop; nil otherwise
}

func (r *renderer) execFor(n *forNode, sc *scope) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	return r.runLoop(n, iv, sc, 1)
}

func (r *renderer) runLoop(n *forNode, iv any, sc *scope, depth int) error {
	items, err := iterate(iv)
	if err != nil {
		return err
	}
	if n.cond != nil {
		var kept []any
		for _, it := range items {
			inner := newScope(sc)
			if err := r.assign(n.target, it, inner); err != nil {
				return err
			}
			c, err := r.eval(n.cond, inner)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.exec(n.els, sc)
	}
	lp := &loopObj{items: items, depth: depth}
	if n.recursive {
		lp.rec = func(v any) (any, error) {
			// loop(x) nests as a macro call does (a string's items are strings, so
			// loop(item) over one never ends).
			if r.depth >= maxDepth {
				return nil, errorf("recursive loop: more than %d nested calls", maxDepth)
			}
			r.depth++
			defer func() { r.depth-- }()
			s, err := r.captureFn(func() error { return r.runLoop(n, v, sc, depth+1) })
			return s, err
		}
	}
	for i, it := range items {
		if r.iters++; r.iters > maxIterations {
			return errorf("more than %d loop iterations", maxIterations)
		}
		lp.index = i
		inner := newScope(sc)
		inner.set("loop", lp)
		if err := r.assign(n.target, it, inner); err != nil {
			return err
		}
		err := r.exec(n.body, inner)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (r *renderer) captureFn(f func() error) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := f()
	r.out = saved
	return b.String(), err
}

// macro makes the callable of a macro definition: a call renders the body in a scope of
// its own over the defining one.
func (r *renderer) macro(n *macroNode, def *scope) *Func {
	return &Func{Name: n.name, Fn: func(args []any, kwargs *Dict) (any, error) {
		if r.depth >= maxDepth {
			return nil, errorf("macro %s: more than %d nested calls", n.name, maxDepth)
		}
		inner := newScope(def)
		nd := len(n.params) - len(n.defaults)
		var varargs []any
		for i, p := range n.params {
			switch {
			case i < len(args):
				inner.set(p, args[i])
			case kwargs != nil && hasKey(kwargs, p):
				v, _ := kwargs.Get(p)
				inner.set(p, v)
			case i >= nd:
				v, err := r.eval(n.defaults[i-nd], inner)
				if err != nil {
					return nil, err
				}
				inner.set(p, v)
			default:
				inner.set(p, undefinedName(p))
			}
		}
		if len(args) > len(n.params) {
			varargs = args[len(n.params):]
		}
		inner.set("varargs", Tuple(varargs))
		kw := NewDict()
		if kwargs != nil {
			for _, k := range kwargs.keys {
				if !contains(n.params, k) {
					kw.Set(k, kwargs.m[k])
				}
			}
		}
		inner.set("kwargs", kw)
		r.depth++
		defer func() { r.depth-- }()
		s, err := r.capture(n.body, inner)
		return s, err
	}}
}

func hasKey(d *Dict, k string) bool { _, ok := d.m[k]; return ok }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func toList(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

func (r *renderer) eval(x expr, sc *scope) (any, error) {
	v, err := r.eval1(x, sc)
	if err != nil {
		return nil, r.place(err, x.exprLine())
	}
	return v, nil
}

func (r *renderer) eval1(x expr, sc *scope) (any, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		if g, ok := r.t.globals[x.name]; ok {
			return g, nil
		}
		if g, ok := builtinGlobals[x.name]; ok {
			return g, nil
		}
		return undefinedName(x.name), nil
	case *attrExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		if s, ok := x.key.(*sliceExpr); ok {
			return r.slice(obj, s, sc)
		}
		key, err := r.eval(x.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *callExpr:
		fn, err := r.eval(x.fn, sc)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := r.evalArgs(x.args, x.kwargs, sc)
		if err != nil {
			return nil, err
		}
		return call(fn, args, kwargs)
	case *filterExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(x, v, sc)
	case *testExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := r.evalArgs(x.args, x.kwargs, sc)
		if err != nil {
			return nil, err
		}
		t, ok := tests[x.name]
		if !ok {
			return nil, errorf("No test named %s.", pyRepr(x.name))
		}
		res, err := t(v, args, kwargs)
		if err != nil {
			return nil, err
		}
		return res != x.negate, nil
	case *binExpr:
		switch x.op {
		case "and":
			l, err := r.eval(x.l, sc)
			if err != nil || !truthy(l) {
				return l, err
			}
			return r.eval(x.r, sc)
		case "or":
			l, err := r.eval(x.l, sc)
			if err != nil || truthy(l) {
				return l, err
			}
			return r.eval(x.r, sc)
		}
		l, err := r.eval(x.l, sc)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return nil, err
		}
		return binary(x.op, l, rv)
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch n := v.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			case bool:
				return -boolInt(n), nil
			case *Undefined:
				return nil, n.err()
			}
			return nil, errorf("bad operand type for unary -: %s", pyRepr(typeName(v)))
		default:
			switch n := v.(type) {
			case int64, float64:
				return n, nil
			case bool:
				return boolInt(n), nil
			case *Undefined:
				return nil, n.err()
			}
			return nil, errorf("bad operand type for unary +: %s", pyRepr(typeName(v)))
		}
	case *compareExpr:
		l, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.ys[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, l, rv)
			if err != nil || !ok {
				return false, err
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(x.test, sc)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(x.a, sc)
		}
		if x.b == nil {
			return &Undefined{msg: "the inline if-expression on line " + fmt.Sprint(x.line) + " evaluated to false and no else section was defined."}, nil
		}
		return r.eval(x.b, sc)
	case *listExpr:
		out := make([]any, len(x.items))
		for i, e := range x.items {
			v, err := r.eval(e, sc)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *tupleExpr:
		out := make(Tuple, len(x.items))
		for i, e := range x.items {
			v, err := r.eval(e, sc)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
		d := NewDict()
		for i, k := range x.keys {
			kv, err := r.eval(k, sc)
			if err != nil {
				return nil, err
			}
			ks, ok := kv.(string)
			if !ok {
				return nil, errorf("dict keys must be strings here, not %s", typeName(kv))
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	case *sliceExpr:
		return nil, errorf("a slice outside a subscript")
	}
	return nil, fmt.Errorf("unknown expression %T", x)
}

func (r *renderer) evalArgs(xs []expr, kws []kwarg, sc *scope) ([]any, *Dict, error) {
	args := make([]any, len(xs))
	for i, a := range xs {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		args[i] = v
	}
	var kwargs *Dict
	if len(kws) > 0 {
		kwargs = NewDict()
		for _, k := range kws {
			v, err := r.eval(k.x, sc)
			if err != nil {
				return nil, nil, err
			}
			kwargs.Set(k.name, v)
		}
	}
	return args, kwargs, nil
}

func (r *renderer) applyFilter(f *filterExpr, v any, sc *scope) (any, error) {
	args, kwargs, err := r.evalArgs(f.args, f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	fn, ok := filters[f.name]
	if !ok {
		return nil, errorf("No filter named %s.", pyRepr(f.name))
	}
	return fn(v, args, kwargs)
}

func call(fn any, args []any, kwargs *Dict) (any, error) {
	switch f := fn.(type) {
	case *Func:
		return f.Fn(args, kwargs)
	case *Undefined:
		return nil, f.err()
	case *loopObj:
		if f.rec == nil {
			return nil, errorf("Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.")
		}
		if len(args) != 1 {
			return nil, errorf("loop() takes one argument")
		}
		return f.rec(args[0])
	}
	return nil, errorf("%s object is not callable", pyRepr(typeName(fn)))
}

// iterate lists what a for loop (or a filter) goes over: a list's items, a string's
// characters, a dict's keys; an undefined value is empty.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case Tuple:
		return x, nil
	case string:
		out := make([]any, 0, len(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case *Dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	case *Undefined:
		if x.unsafe {
			return nil, x.err()
		}
		return nil, nil
	}
	return nil, errorf("%s object is not iterable", pyRepr(typeName(v)))
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// number returns v as a number (bool counts as an int, as in Python).
func number(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		return boolInt(x), 0, false, true
	case int64:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func binary(op string, l, r any) (any, error) {
	if u, ok := l.(*Undefined); ok && op != "~" {
		return nil, u.err()
	}
	if u, ok := r.(*Undefined); ok && op != "~" {
		return nil, u.err()
	}
	if op == "~" {
		for _, v := range []any{l, r} {
			if u, ok := v.(*Undefined); ok && u.unsafe {
				return nil, u.err()
			}
		}
		return str(l) + str(r), nil
	}
	li, lf, lfl, lnum := number(l)
	ri, rf, rfl, rnum := number(r)
	if lnum && rnum {
		if !lfl && !rfl {
			return intOp(op, li, ri)
		}
		if !lfl {
			lf = float64(li)
		}
		if !rfl {
			rf = float64(ri)
		}
		return floatOp(op, lf, rf)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
			return nil, errorf("can only concatenate str (not %s) to str", pyQuote(typeName(r)))
		case []any:
			if b, ok := r.([]any); ok {
				out := append(append([]any{}, a...), b...)
				return out, nil
			}
			return nil, errorf("can only concatenate list (not %s) to list", pyQuote(typeName(r)))
		case Tuple:
			if b, ok := r.(Tuple); ok {
				return append(append(Tuple{}, a...), b...), nil
			}
		}
	case "*":
		if s, n, ok := seqTimes(l, r); ok {
			return s, n
		}
		if s, n, ok := seqTimes(r, l); ok {
			return s, n
		}
	case "%":
		if s, ok := l.(string); ok {
			return percentFormat(s, r)
		}
	}
	return nil, errorf("unsupported operand type(s) for %s: %s and %s", op, pyRepr(typeName(l)), pyRepr(typeName(r)))
}

func pyQuote(s string) string { return `"` + s + `"` }

// seqTimes is str * int or list * int.
func seqTimes(a, b any) (any, error, bool) {
	n, _, isFloat, ok := number(b)
	if !ok || isFloat {
		return nil, nil, false
	}
	if _, isBool := b.(bool); isBool {
		return nil, nil, false
	}
	if n < 0 {
		n = 0
	}
	switch x := a.(type) {
	case string:
		if int64(len(x))*n > int64(maxOutput) {
			return nil, errorf("repeated string over %d bytes", maxOutput), true
		}
		return strings.Repeat(x, int(n)), nil, true
	case []any:
		if int64(len(x))*n > int64(maxOutput) {
			return nil, errorf("repeated list over %d items", maxOutput), true
		}
		out := []any{}
		for i := int64(0); i < n; i++ {
			out = append(out, x...)
		}
		return out, nil, true
	}
	return nil, nil, false
}

func intOp(op string, a, b int64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errorf("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, errorf("integer division or modulo by zero")
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q, nil
	case "%":
		if b == 0 {
			return nil, errorf("integer division or modulo by zero")
		}
		m := a % b
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		if b < 0 {
			return math.Pow(float64(a), float64(b)), nil
		}
		if b > 64 && a != 0 && a != 1 && a != -1 {
			return nil, errorf("integer power too large")
		}
		res := int64(1)
		for i := int64(0); i < b; i++ {
			res *= a
		}
		return res, nil
	}
	return nil, errorf("unknown operator %s", op)
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errorf("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errorf("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, errorf("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		return math.Pow(a, b), nil
	}
	return nil, errorf("unknown operator %s", op)
}

// equal is Python's ==.
func equal(a, b any) bool {
	ai, af, afl, anum := number(a)
	bi, bf, bfl, bnum := number(b)
	if anum && bnum {
		if !afl && !bfl {
			return ai == bi
		}
		if !afl {
			af = float64(ai)
		}
		if !bfl {
			bf = float64(bi)
		}
		return af == bf
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any, Tuple:
		_, aList := a.([]any)
		_, bList := b.([]any)
		_, bTuple := b.(Tuple)
		if !(bList || bTuple) || aList != bList {
			return false
		}
		xs, ys := asSeq(a), asSeq(b)
		if len(xs) != len(ys) {
			return false
		}
		for i := range xs {
			if !equal(xs[i], ys[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			yv, ok := y.m[k]
			if !ok || !equal(x.m[k], yv) {
				return false
			}
		}
		return true
	case *Undefined:
		_, ok := b.(*Undefined)
		return ok
	}
	return a == b
}

func compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in", "notin":
		in, err := contained(a, b)
		return in == (op == "in"), err
	}
	c, err := order(a, b, op)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// order compares a and b as Python's < does (numbers, strings, lists and tuples).
func order(a, b any, op string) (int, error) {
	ai, af, afl, anum := number(a)
	bi, bf, bfl, bnum := number(b)
	if anum && bnum {
		if !afl && !bfl {
			return cmp3(ai < bi, ai > bi), nil
		}
		if !afl {
			af = float64(ai)
		}
		if !bfl {
			bf = float64(bi)
		}
		return cmp3(af < bf, af > bf), nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any, Tuple:
		_, aList := a.([]any)
		_, bList := b.([]any)
		_, bTuple := b.(Tuple)
		if (bList || bTuple) && aList == bList {
			xs, ys := asSeq(a), asSeq(b)
			for i := 0; i < len(xs) && i < len(ys); i++ {
				if !equal(xs[i], ys[i]) {
					return order(xs[i], ys[i], op)
				}
			}
			return cmp3(len(xs) < len(ys), len(xs) > len(ys)), nil
		}
	case *Undefined:
		return 0, x.err()
	}
	if u, ok := b.(*Undefined); ok {
		return 0, u.err()
	}
	return 0, errorf("%s not supported between instances of %s and %s", pyRepr(op), pyRepr(typeName(a)), pyRepr(typeName(b)))
}

func cmp3(less, more bool) int {
	switch {
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}

// contained is Python's "a in b".
func contained(a, b any) (bool, error) {
	switch y := b.(type) {
	case string:
		s, ok := a.(string)
		if !ok {
			if u, isU := a.(*Undefined); isU {
				return false, u.err()
			}
			return false, errorf("'in <string>' requires string as left operand, not %s", typeName(a))
		}
		return strings.Contains(y, s), nil
	case []any, Tuple:
		for _, e := range asSeq(y) {
			if equal(a, e) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		s, ok := a.(string)
		return ok && hasKey(y, s), nil
	case *Undefined:
		if y.unsafe {
			return false, y.err()
		}
		return false, nil
	}
	return false, errorf("argument of type %s is not iterable", pyRepr(typeName(b)))
}

// slice is x[start:stop:step] on a list, tuple or string.
func (r *renderer) slice(obj any, s *sliceExpr, sc *scope) (any, error) {
	var idx [3]*int64
	for i, e := range []expr{s.start, s.stop, s.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, _, isFloat, ok := number(v)
		if !ok || isFloat {
			return nil, errorf("slice indices must be integers or None")
		}
		idx[i] = &n
	}
	var n int
	var rs []rune
	switch x := obj.(type) {
	case string:
		rs = runes(x)
		n = len(rs)
	case []any, Tuple:
		n = len(asSeq(x))
	case *Undefined:
		return nil, x.err()
	default:
		return nil, errorf("%s object is not subscriptable", pyRepr(typeName(obj)))
	}
	step := int64(1)
	if idx[2] != nil {
		step = *idx[2]
		if step == 0 {
			return nil, errorf("slice step cannot be zero")
		}
	}
	start, stop := sliceBounds(idx[0], idx[1], step, int64(n))
	var picks []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		picks = append(picks, int(i))
	}
	switch x := obj.(type) {
	case string:
		out := make([]rune, len(picks))
		for i, p := range picks {
			out[i] = rs[p]
		}
		return string(out), nil
	case Tuple:
		out := make(Tuple, len(picks))
		for i, p := range picks {
			out[i] = x[p]
		}
		return out, nil
	default:
		items := asSeq(x)
		out := make([]any, len(picks))
		for i, p := range picks {
			out[i] = items[p]
		}
		return out, nil
	}
}

// sliceBounds is Python's slice.indices.
func sliceBounds(a, b *int64, step, n int64) (int64, int64) {
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		}
		if v >= n {
			if step < 0 {
				return n - 1
			}
			return n
		}
		return v
	}
	if step > 0 {
		return clamp(a, 0), clamp(b, n)
	}
	return clamp(a, n-1), clamp(b, -1)
}

// getItem is x[key] as Jinja2's sandbox does it: the item, else (for a string key) the
// attribute, else undefined.
func getItem(obj, key any) (any, error) {
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *Dict:
		if k, ok := key.(string); ok {
			if v, ok := x.m[k]; ok {
				return v, nil
			}
			return getAttr(obj, k)
		}
		return undefinedElem(obj, key), nil
	case []any, Tuple, string:
		if k, ok := key.(string); ok {
			return getAttr(obj, k)
		}
		i, _, isFloat, ok := number(key)
		if !ok || isFloat {
			return undefinedElem(obj, key), nil
		}
		if s, ok := x.(string); ok {
			rs := runes(s)
			if i < 0 {
				i += int64(len(rs))
			}
			if i < 0 || i >= int64(len(rs)) {
				return undefinedElem(obj, key), nil
			}
			return string(rs[i]), nil
		}
		items := asSeq(x)
		if i < 0 {
			i += int64(len(items))
		}
		if i < 0 || i >= int64(len(items)) {
			return undefinedElem(obj, key), nil
		}
		return items[i], nil
	case *Namespace, *loopObj:
		if k, ok := key.(string); ok {
			return getAttr(obj, k)
		}
	}
	return undefinedElem(obj, key), nil
}
