package egraph

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A small arithmetic language for the tests, in the spirit of egg's math tests.
const (
	opNum Op = iota + 1 // attribute: the integer value
	opVar               // attribute: the name
	opAdd
	opMul
	opSub
	opNeg
	opF
	opG
	opPair
	opOut0
	opOut1
	opFused
)

var opNames = map[string]Op{"num": opNum, "var": opVar, "add": opAdd, "mul": opMul, "sub": opSub, "neg": opNeg,
	"f": opF, "g": opG, "pair": opPair, "out0": opOut0, "out1": opOut1, "fused": opFused,
	"norm": 20, "lin": 21, "act": 22, "cheap": 23, "exp": 24, "u": 25, "nl": 26}

var opByID = func() map[Op]string {
	m := map[Op]string{}
	for k, v := range opNames {
		m[v] = k
	}
	return m
}()

func opName(op Op) string {
	if s, ok := opByID[op]; ok {
		return s
	}
	return "op" + strconv.Itoa(int(op))
}

// constFold is the analysis: the class's integer value when it is a known constant. Merging two
// different constants is an error naming both.
type constFold struct{}

type konst struct{ v int64 }

func (constFold) Make(g *EGraph, n Node) (any, error) {
	val := func(i int) (int64, bool) {
		if k, ok := g.Data(n.Children[i]).(konst); ok {
			return k.v, true
		}
		return 0, false
	}
	switch n.Op {
	case opNum:
		v, err := strconv.ParseInt(g.AttrValues(n.Attr)[0], 10, 64)
		if err != nil {
			return nil, err
		}
		return konst{v}, nil
	case opAdd, opMul, opSub:
		a, ok1 := val(0)
		b, ok2 := val(1)
		if !ok1 || !ok2 {
			return nil, nil
		}
		switch n.Op {
		case opAdd:
			return konst{a + b}, nil
		case opMul:
			return konst{a * b}, nil
		default:
			return konst{a - b}, nil
		}
	case opNeg:
		if a, ok := val(0); ok {
			return konst{-a}, nil
		}
	}
	return nil, nil
}

func (constFold) Merge(a, b any) (any, DidMerge, error) {
	switch {
	case a == nil && b == nil:
		return nil, DidMerge{}, nil
	case a == nil:
		return b, DidMerge{A: true}, nil
	case b == nil:
		return a, DidMerge{B: true}, nil
	case a.(konst) != b.(konst):
		return nil, DidMerge{}, fmt.Errorf("constant %d differs from constant %d", a.(konst).v, b.(konst).v)
	}
	return a, DidMerge{}, nil
}

func (constFold) Modify(g *EGraph, id Id) error {
	k, ok := g.Data(id).(konst)
	if !ok {
		return nil
	}
	n, err := g.Add(Node{Op: opNum, Attr: g.InternAttrs(strconv.FormatInt(k.v, 10))})
	if err != nil {
		return err
	}
	_, err = g.Union(id, n, "const-fold")
	return err
}

// sexp tokenises and parses "(op[a,b] child ...)" with ?vars; numbers are (num[n]) and other bare
// symbols are (var[name]).
type sexp struct {
	atom     string
	attrs    []string
	children []*sexp
	list     bool
}

func parseSexp(t testing.TB, s string) *sexp {
	t.Helper()
	toks := strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ").Replace(s))
	pos := 0
	var parse func() *sexp
	parse = func() *sexp {
		if pos >= len(toks) {
			t.Fatalf("parse %q: unexpected end", s)
		}
		tok := toks[pos]
		pos++
		if tok != "(" {
			return &sexp{atom: tok}
		}
		head := toks[pos]
		pos++
		e := &sexp{list: true, atom: head}
		if i := strings.IndexByte(head, '['); i >= 0 {
			e.atom = head[:i]
			e.attrs = strings.Split(strings.TrimSuffix(head[i+1:], "]"), ",")
		}
		for toks[pos] != ")" {
			e.children = append(e.children, parse())
		}
		pos++
		return e
	}
	e := parse()
	if pos != len(toks) {
		t.Fatalf("parse %q: trailing tokens", s)
	}
	return e
}

func lookupOp(t testing.TB, name string) Op {
	t.Helper()
	op, ok := opNames[name]
	if !ok {
		t.Fatalf("unknown op %q", name)
	}
	return op
}

// add adds a term like "(add x (mul 2 y))" to g.
func addTerm(t testing.TB, g *EGraph, s string) Id {
	t.Helper()
	var build func(e *sexp) Id
	build = func(e *sexp) Id {
		var n Node
		switch {
		case !e.list && isNum(e.atom):
			n = Node{Op: opNum, Attr: g.InternAttrs(e.atom)}
		case !e.list:
			n = Node{Op: opVar, Attr: g.InternAttrs(e.atom)}
		default:
			n = Node{Op: lookupOp(t, e.atom)}
			if e.attrs != nil {
				n.Attr = g.InternAttrs(e.attrs...)
			}
			for _, c := range e.children {
				n.Children = append(n.Children, build(c))
			}
		}
		id, err := g.Add(n)
		if err != nil {
			t.Fatalf("add %q: %v", s, err)
		}
		return id
	}
	return build(parseSexp(t, s))
}

func isNum(s string) bool { _, err := strconv.ParseInt(s, 10, 64); return err == nil }

// pat builds a pattern term: "?x" variables, numbers as (num[n]), op[?a,lit,_] attributes, and a
// leading "?s=" on a root to bind it.
func pat(t testing.TB, s string) *PNode {
	t.Helper()
	bind := ""
	if i := strings.Index(s, "="); i > 0 && strings.HasPrefix(s, "?") && !strings.Contains(s[:i], "(") {
		bind, s = strings.TrimSpace(s[:i]), s[i+1:]
	}
	var build func(e *sexp) *PNode
	build = func(e *sexp) *PNode {
		switch {
		case !e.list && strings.HasPrefix(e.atom, "?"):
			return PV(Var(e.atom))
		case !e.list && isNum(e.atom):
			return PA(opNum, []AttrPat{ALit(e.atom)})
		case !e.list:
			return PA(opVar, []AttrPat{ALit(e.atom)})
		}
		n := &PNode{Op: lookupOp(t, e.atom)}
		for _, a := range e.attrs {
			switch {
			case strings.HasPrefix(a, "?"):
				n.Attrs = append(n.Attrs, AVar(Var(a)))
			case a == "_":
				n.Attrs = append(n.Attrs, AAny())
			default:
				n.Attrs = append(n.Attrs, ALit(a))
			}
		}
		for _, c := range e.children {
			n.Children = append(n.Children, build(c))
		}
		return n
	}
	n := build(parseSexp(t, s))
	n.Bind = Var(bind)
	return n
}

func mustPattern(t testing.TB, terms ...string) *Pattern {
	t.Helper()
	var ps []*PNode
	for _, s := range terms {
		ps = append(ps, pat(t, s))
	}
	p, err := NewPattern(ps...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rw builds a rewrite "lhs => rhs" where each side may hold several terms joined by " & ".
func rw(t testing.TB, name, lhs, rhs string, guards ...Guard) *Rewrite {
	t.Helper()
	r, err := NewRewrite(name, mustPattern(t, strings.Split(lhs, " & ")...), mustPattern(t, strings.Split(rhs, " & ")...), guards...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rebuild(t testing.TB, g *EGraph) {
	t.Helper()
	if _, err := g.Rebuild(); err != nil {
		t.Fatal(err)
	}
}

func unitCost(*EGraph, Id, Node) float64 { return 1 }
