package egraph

import "fmt"

// Searcher finds matches of a rule's left-hand side. *Pattern is the standard implementation.
type Searcher interface {
	// Search returns at most limit matches (limit <= 0: all) in a deterministic order.
	Search(g *EGraph, limit int) []Match
	// Vars returns the variables a match binds.
	Vars() []Var
}

// Applier changes the graph for one match: typically it adds a term and unions it with the
// match's root. rule is the rule's name, to pass to Union. It reports whether the graph changed.
type Applier interface {
	Apply(g *EGraph, m Match, rule string) (bool, error)
}

// ApplyFunc adapts a Go function to Applier, for right-hand sides that compute attributes or
// constants.
//
// Example:
//
//	fold := egraph.ApplyFunc(func(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
//		a, _ := m.Subst.Attr("?a")
//		b, _ := m.Subst.Attr("?b")
//		id, err := g.Add(egraph.Node{Op: opNum, Attr: g.InternAttrs(sum(a, b))})
//		if err != nil { return false, err }
//		return g.Union(m.Roots[0], id, rule)
//	})
type ApplyFunc func(g *EGraph, m Match, rule string) (bool, error)

// Apply calls f.
//
// Example:
//
//	changed, err := fold.Apply(g, m, "fold")
func (f ApplyFunc) Apply(g *EGraph, m Match, rule string) (bool, error) { return f(g, m, rule) }

// Apply instantiates each term of p with the match's bindings and unions it with the match's
// root of the same index. p must have as many terms as the searcher that produced m.
//
// Example:
//
//	changed, err := rhs.Apply(g, m, "mul-comm")
func (p *Pattern) Apply(g *EGraph, m Match, rule string) (bool, error) {
	if len(p.Terms) != len(m.Roots) {
		return false, fmt.Errorf("rule %q: right-hand side has %d terms, match has %d roots", rule, len(p.Terms), len(m.Roots))
	}
	ids, err := p.Instantiate(g, m.Subst)
	if err != nil {
		return false, fmt.Errorf("rule %q: %w", rule, err)
	}
	changed := false
	for i, id := range ids {
		ch, err := g.Union(m.Roots[i], id, rule)
		if err != nil {
			return changed, err
		}
		changed = changed || ch
	}
	return changed, nil
}

// Guard decides whether a match may be applied (shape conditions, dtype conditions, "this input is
// a parameter"). It must not change the graph.
type Guard func(g *EGraph, m Match) bool

// Rewrite is a rule: a searcher, an applier and optional guards (all must accept a match).
// Bidirectional rules are two Rewrites.
type Rewrite struct {
	Name     string
	Searcher Searcher
	Applier  Applier
	Guards   []Guard
}

// NewRewrite builds a pattern-to-pattern rewrite and checks it: rhs has as many terms as lhs or,
// for a single-term rhs of a multi-pattern, unions with the last lhs root; every rhs variable is
// bound by lhs with the same kind (class or attribute).
//
// Example:
//
//	comm, err := egraph.NewRewrite("add-comm",
//		mustPattern(egraph.P(opAdd, egraph.PV("?a"), egraph.PV("?b"))),
//		mustPattern(egraph.P(opAdd, egraph.PV("?b"), egraph.PV("?a"))))
func NewRewrite(name string, lhs, rhs *Pattern, guards ...Guard) (*Rewrite, error) {
	for i, t := range lhs.Terms {
		if t.Var != "" {
			return nil, fmt.Errorf("rule %q: left-hand term %d is a bare variable", name, i+1)
		}
	}
	for i, v := range rhs.vars {
		found := false
		for j, w := range lhs.vars {
			if v == w {
				found = true
				if rhs.isAttr[i] != lhs.isAttr[j] {
					return nil, fmt.Errorf("rule %q: variable %s is an attribute on one side and an e-class on the other", name, v)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("rule %q: right-hand variable %s is not bound by the left-hand side", name, v)
		}
	}
	for _, t := range rhs.Terms {
		if t.Bind != "" {
			return nil, fmt.Errorf("rule %q: binding %s = ... is not allowed on the right-hand side", name, t.Bind)
		}
	}
	var app Applier = rhs
	switch {
	case len(rhs.Terms) == len(lhs.Terms):
	case len(rhs.Terms) == 1:
		app = lastRoot{rhs}
	default:
		return nil, fmt.Errorf("rule %q: left-hand side has %d terms, right-hand side %d", name, len(lhs.Terms), len(rhs.Terms))
	}
	return &Rewrite{Name: name, Searcher: lhs, Applier: app, Guards: guards}, nil
}

// lastRoot applies a one-term right-hand side to the last root of a multi-pattern match.
type lastRoot struct{ p *Pattern }

func (l lastRoot) Apply(g *EGraph, m Match, rule string) (bool, error) {
	last := Match{Roots: m.Roots[len(m.Roots)-1:], Subst: m.Subst}
	return l.p.Apply(g, last, rule)
}

// Search runs the searcher and drops the matches a guard rejects.
//
// Example:
//
//	ms := rw.Search(g, 0)
func (r *Rewrite) Search(g *EGraph, limit int) []Match {
	return r.filter(g, r.Searcher.Search(g, limit))
}

// Apply applies every match and returns how many changed the graph. It stops at the first error.
//
// Example:
//
//	n, err := rw.Apply(g, rw.Search(g, 0))
func (r *Rewrite) Apply(g *EGraph, ms []Match) (int, error) {
	n := 0
	saved := g.origin
	g.origin = r.Name
	defer func() { g.origin = saved }()
	for _, m := range ms {
		ch, err := r.Applier.Apply(g, m, r.Name)
		if err != nil {
			return n, err
		}
		if ch {
			n++
		}
	}
	return n, nil
}
