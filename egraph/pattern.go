package egraph

import (
	"fmt"
	"strings"
)

// Var is a pattern variable, written with a leading '?' ("?x"). A variable stands either for an
// e-class (in a child position) or for an attribute value (in an attribute position), never both.
type Var string

// AttrPat constrains one attribute value of a pattern node: exactly one of Var (binds or checks
// the value), Lit (the value must equal it) or Any (unconstrained; not allowed in a right-hand
// side, which must build a complete node).
type AttrPat struct {
	Var Var
	Lit string
	Any bool
}

// AVar returns an attribute pattern that binds or checks variable v.
//
// Example:
//
//	egraph.PA(opSoftmax, []egraph.AttrPat{egraph.AVar("?axis")}, egraph.PV("?x"))
func AVar(v Var) AttrPat { return AttrPat{Var: v} }

// ALit returns an attribute pattern that requires the value lit.
//
// Example:
//
//	egraph.PA(opNum, []egraph.AttrPat{egraph.ALit("0")})
func ALit(lit string) AttrPat { return AttrPat{Lit: lit} }

// AAny returns an unconstrained attribute pattern.
//
// Example:
//
//	egraph.PA(opRMSNorm, []egraph.AttrPat{egraph.AAny()}, x, w)
func AAny() AttrPat { return AttrPat{Any: true} }

// PNode is a pattern term: a variable leaf (Var set) or an operator with attribute constraints and
// child terms. Attrs nil means "any attributes" in a left-hand side and "no attributes" in a
// right-hand side; otherwise it has one entry per attribute of the operator. Bind, allowed only on
// the root of a left-hand-side term, also binds the matched class to a variable (the rule syntax
// `?s = (add ?a ?b)`).
type PNode struct {
	Var      Var
	Op       Op
	Attrs    []AttrPat
	Children []*PNode
	Bind     Var
}

// PV returns a variable leaf.
//
// Example:
//
//	x := egraph.PV("?x")
func PV(v Var) *PNode { return &PNode{Var: v} }

// P returns an operator term without attribute constraints.
//
// Example:
//
//	p := egraph.P(opAdd, egraph.PV("?a"), egraph.PV("?b"))
func P(op Op, children ...*PNode) *PNode { return &PNode{Op: op, Children: children} }

// PA returns an operator term with attribute constraints.
//
// Example:
//
//	p := egraph.PA(opNum, []egraph.AttrPat{egraph.AVar("?c")})
func PA(op Op, attrs []AttrPat, children ...*PNode) *PNode {
	return &PNode{Op: op, Attrs: attrs, Children: children}
}

// Pattern is one or more pattern terms that share variables. With one term it is an ordinary
// pattern; with several it is a multi-pattern, matched jointly: a match gives one root class per
// term and one binding per variable. A Pattern is both a Searcher (left-hand side) and an Applier
// (right-hand side: term i is instantiated and unioned with the match's root i).
type Pattern struct {
	Terms []*PNode

	vars    []Var  // every variable, in order of first occurrence
	isAttr  []bool // per variable: an attribute variable
	anchors []anchor
}

// anchor says how to find candidate roots of term i (i > 0) from a variable bound by earlier
// terms: start at that variable's class and walk up the parent lists along path (innermost
// first). A term without an anchor is searched through the operator index.
type anchor struct {
	ok   bool
	vi   int
	path []step // from the variable's parent up to the root
}

type step struct {
	op  Op
	pos int
}

// NewPattern builds a pattern from one or more terms sharing variables and checks it: a variable
// may not be both a class and an attribute variable, Bind only on a root, a root must be an
// operator unless the pattern is only used as a right-hand side (see NewRewrite).
//
// Example:
//
//	lhs, err := egraph.NewPattern(egraph.P(opMul, egraph.PV("?x"), egraph.PA(opNum, []egraph.AttrPat{egraph.ALit("1")})))
func NewPattern(terms ...*PNode) (*Pattern, error) {
	if len(terms) == 0 {
		return nil, fmt.Errorf("egraph: pattern has no terms")
	}
	p := &Pattern{Terms: terms}
	index := map[Var]int{}
	declare := func(v Var, attr bool) error {
		if i, ok := index[v]; ok {
			if p.isAttr[i] != attr {
				return fmt.Errorf("egraph: variable %s used both as an attribute and as an e-class", v)
			}
			return nil
		}
		if !strings.HasPrefix(string(v), "?") || len(v) < 2 {
			return fmt.Errorf("egraph: variable %q must start with '?'", v)
		}
		index[v] = len(p.vars)
		p.vars = append(p.vars, v)
		p.isAttr = append(p.isAttr, attr)
		return nil
	}
	var walk func(n *PNode, root bool) error
	walk = func(n *PNode, root bool) error {
		if n == nil {
			return fmt.Errorf("egraph: nil pattern term")
		}
		if n.Bind != "" {
			if !root {
				return fmt.Errorf("egraph: binding %s = ... is only allowed on a term's root", n.Bind)
			}
			if err := declare(n.Bind, false); err != nil {
				return err
			}
		}
		if n.Var != "" {
			if len(n.Children) > 0 || n.Attrs != nil {
				return fmt.Errorf("egraph: variable %s has children or attributes", n.Var)
			}
			return declare(n.Var, false)
		}
		for _, a := range n.Attrs {
			k := 0
			if a.Var != "" {
				k++
				if err := declare(a.Var, true); err != nil {
					return err
				}
			}
			if a.Lit != "" {
				k++
			}
			if a.Any {
				k++
			}
			if k > 1 {
				return fmt.Errorf("egraph: attribute pattern %+v sets more than one of Var, Lit, Any", a)
			}
			// k == 0 is the literal empty string.
		}
		for _, c := range n.Children {
			if err := walk(c, false); err != nil {
				return err
			}
		}
		return nil
	}
	for i, t := range terms {
		if err := walk(t, true); err != nil {
			return nil, err
		}
		p.anchors = append(p.anchors, p.findAnchor(i, index))
	}
	return p, nil
}

// findAnchor picks, for term i, the shallowest class variable that an earlier term binds.
func (p *Pattern) findAnchor(i int, index map[Var]int) anchor {
	if i == 0 {
		return anchor{}
	}
	boundBefore := map[Var]bool{}
	for _, t := range p.Terms[:i] {
		t.visit(func(n *PNode) {
			if n.Var != "" {
				boundBefore[n.Var] = true
			}
			if n.Bind != "" {
				boundBefore[n.Bind] = true
			}
		})
	}
	best := anchor{}
	var walk func(n *PNode, path []step)
	walk = func(n *PNode, path []step) {
		if n.Var != "" {
			if boundBefore[n.Var] && len(path) > 0 && (!best.ok || len(path) < len(best.path)) {
				rev := make([]step, len(path))
				for j := range path {
					rev[j] = path[len(path)-1-j]
				}
				best = anchor{ok: true, vi: index[n.Var], path: rev}
			}
			return
		}
		for j, c := range n.Children {
			walk(c, append(path[:len(path):len(path)], step{op: n.Op, pos: j}))
		}
	}
	walk(p.Terms[i], nil)
	return best
}

func (n *PNode) visit(f func(*PNode)) {
	f(n)
	for _, c := range n.Children {
		c.visit(f)
	}
}

// Vars returns the pattern's variables in order of first occurrence.
//
// Example:
//
//	for _, v := range lhs.Vars() { fmt.Println(v) }
func (p *Pattern) Vars() []Var { return p.vars }

// IsAttrVar reports whether v is an attribute variable of p.
//
// Example:
//
//	if lhs.IsAttrVar("?axis") { ... }
func (p *Pattern) IsAttrVar(v Var) bool {
	for i, w := range p.vars {
		if w == v {
			return p.isAttr[i]
		}
	}
	return false
}

// String formats the pattern in the rule syntax, with operators named by opName (nil: "op<N>").
//
// Example:
//
//	fmt.Println(lhs.String(nil)) // (op2 ?x (op1[1]))
func (p *Pattern) String(opName func(Op) string) string {
	parts := make([]string, len(p.Terms))
	for i, t := range p.Terms {
		parts[i] = t.String(opName)
	}
	return strings.Join(parts, " & ")
}

// String formats the term in the rule syntax.
//
// Example:
//
//	fmt.Println(egraph.P(3, egraph.PV("?x")).String(nil)) // (op3 ?x)
func (n *PNode) String(opName func(Op) string) string {
	if n.Var != "" {
		return string(n.Var)
	}
	var b strings.Builder
	if n.Bind != "" {
		b.WriteString(string(n.Bind) + " = ")
	}
	b.WriteByte('(')
	if opName != nil {
		b.WriteString(opName(n.Op))
	} else {
		fmt.Fprintf(&b, "op%d", n.Op)
	}
	if n.Attrs != nil {
		b.WriteByte('[')
		for i, a := range n.Attrs {
			if i > 0 {
				b.WriteByte(',')
			}
			switch {
			case a.Var != "":
				b.WriteString(string(a.Var))
			case a.Any:
				b.WriteByte('_')
			default:
				b.WriteString(a.Lit)
			}
		}
		b.WriteByte(']')
	}
	for _, c := range n.Children {
		b.WriteByte(' ')
		b.WriteString(c.String(opName))
	}
	b.WriteByte(')')
	return b.String()
}

// Instantiate adds the terms of p to g with the variables bound by s and returns the class of
// each term (a variable term returns its bound class). Every attribute must be a literal or a
// bound attribute variable.
//
// Example:
//
//	ids, err := rhs.Instantiate(g, m.Subst)
func (p *Pattern) Instantiate(g *EGraph, s Subst) ([]Id, error) {
	ids := make([]Id, len(p.Terms))
	for i, t := range p.Terms {
		id, err := instantiate(g, t, s)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

func instantiate(g *EGraph, n *PNode, s Subst) (Id, error) {
	if n.Var != "" {
		id, ok := s.Class(n.Var)
		if !ok {
			return 0, fmt.Errorf("egraph: instantiate: unbound variable %s", n.Var)
		}
		return id, nil
	}
	children := make([]Id, len(n.Children))
	for i, c := range n.Children {
		id, err := instantiate(g, c, s)
		if err != nil {
			return 0, err
		}
		children[i] = id
	}
	var attr Attr
	if len(n.Attrs) > 0 {
		vals := make([]string, len(n.Attrs))
		for i, a := range n.Attrs {
			switch {
			case a.Var != "":
				v, ok := s.Attr(a.Var)
				if !ok {
					return 0, fmt.Errorf("egraph: instantiate: unbound attribute variable %s", a.Var)
				}
				vals[i] = v
			case a.Any:
				return 0, fmt.Errorf("egraph: instantiate %s: attribute %d is unconstrained", g.OpString(n.Op), i)
			default:
				vals[i] = a.Lit
			}
		}
		attr = g.InternAttrs(vals...)
	}
	return g.Add(Node{Op: n.Op, Attr: attr, Children: children})
}
