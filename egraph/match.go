package egraph

import (
	"slices"
	"strconv"
	"strings"
)

// Subst is a substitution: the value bound to each variable of a pattern.
type Subst struct {
	vars    []Var  // shared with the pattern until extended
	isAttr  []bool // per variable: bound to an attribute value
	classes []Id
	attrs   []string
	bound   []bool
}

func (s Subst) index(v Var) int {
	for i, w := range s.vars {
		if w == v {
			return i
		}
	}
	return -1
}

// Class returns the class bound to v.
//
// Example:
//
//	x, _ := m.Subst.Class("?x")
func (s Subst) Class(v Var) (Id, bool) {
	i := s.index(v)
	if i < 0 || !s.bound[i] {
		return 0, false
	}
	return s.classes[i], true
}

// Attr returns the attribute value bound to v.
//
// Example:
//
//	axis, _ := m.Subst.Attr("?axis")
func (s Subst) Attr(v Var) (string, bool) {
	i := s.index(v)
	if i < 0 || !s.bound[i] {
		return "", false
	}
	return s.attrs[i], true
}

// With returns a copy of s with v bound to the class id (for Go appliers that extend a match).
//
// Example:
//
//	s2 := m.Subst.With("?y", y)
func (s Subst) With(v Var, id Id) Subst {
	c := s.clone()
	if i := c.index(v); i >= 0 {
		c.classes[i], c.bound[i], c.isAttr[i] = id, true, false
		return c
	}
	c.vars = append(c.vars, v)
	c.isAttr = append(c.isAttr, false)
	c.classes = append(c.classes, id)
	c.attrs = append(c.attrs, "")
	c.bound = append(c.bound, true)
	return c
}

// WithAttr returns a copy of s with v bound to the attribute value val.
//
// Example:
//
//	s2 := m.Subst.WithAttr("?c", strconv.Itoa(a+b))
func (s Subst) WithAttr(v Var, val string) Subst {
	c := s.With(v, 0)
	i := c.index(v)
	c.attrs[i], c.isAttr[i] = val, true
	return c
}

func (s Subst) clone() Subst {
	return Subst{vars: slices.Clone(s.vars), isAttr: slices.Clone(s.isAttr), classes: slices.Clone(s.classes),
		attrs: slices.Clone(s.attrs), bound: slices.Clone(s.bound)}
}

// String formats the bindings as ?x=3 ?a="1" in variable order (classes as ids, attributes
// quoted).
//
// Example:
//
//	log.Printf("match %s", m.Subst)
func (s Subst) String() string {
	var b strings.Builder
	for i, v := range s.vars {
		if !s.bound[i] {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(v))
		b.WriteByte('=')
		if s.isAttr[i] {
			b.WriteString(strconv.Quote(s.attrs[i]))
		} else {
			b.WriteString(strconv.Itoa(int(s.classes[i])))
		}
	}
	return b.String()
}

// Match is one match of a searcher: the root class of each pattern term and the bindings.
type Match struct {
	Roots []Id
	Subst Subst
}

// Search returns the matches of p in g, at most limit (limit <= 0: no limit), in a deterministic
// order (classes by increasing id, nodes in class order). g must be rebuilt.
//
// Matching is backtracking over the operator index: the first term's root operator selects the
// candidate classes; each further term of a multi-pattern is found from a variable that earlier
// terms bound, by walking up parent lists (so `(add ?a ?b) & (rmsnorm (add ?a ?b) ?w)` costs
// per add match a look at the add's parents, not a scan of every rmsnorm); only a term sharing no
// class variable with earlier terms scans the index, which is the unavoidable cross product.
//
// Example:
//
//	g.Rebuild()
//	for _, m := range lhs.Search(g, 0) { fmt.Println(m.Roots[0], m.Subst) }
func (p *Pattern) Search(g *EGraph, limit int) []Match {
	g.mustBeClean("Search")
	n := len(p.vars)
	m := &matcher{g: g, p: p, limit: limit, roots: make([]Id, len(p.Terms)),
		s: Subst{vars: p.vars, isAttr: p.isAttr, classes: make([]Id, n), attrs: make([]string, n), bound: make([]bool, n)}}
	m.term(0)
	return m.out
}

type matcher struct {
	g     *EGraph
	p     *Pattern
	s     Subst
	roots []Id
	limit int
	out   []Match
}

func (m *matcher) full() bool { return m.limit > 0 && len(m.out) >= m.limit }

// term matches terms i.. and records complete matches; it returns false to stop the search.
func (m *matcher) term(i int) bool {
	if i == len(m.p.Terms) {
		s := m.s.clone()
		s.vars, s.isAttr = m.s.vars, m.s.isAttr // shared, never modified in place
		m.out = append(m.out, Match{Roots: slices.Clone(m.roots), Subst: s})
		return !m.full()
	}
	t := m.p.Terms[i]
	for _, c := range m.candidates(i) {
		m.roots[i] = c
		ok := m.bindRoot(t, c, func() bool { return m.term(i + 1) })
		if !ok {
			return false
		}
	}
	return true
}

// bindRoot handles the term's Bind variable, then matches the term at class c.
func (m *matcher) bindRoot(t *PNode, c Id, k func() bool) bool {
	if t.Bind == "" {
		return m.class(t, c, k)
	}
	vi := m.s.index(t.Bind)
	if m.s.bound[vi] {
		if m.s.classes[vi] != c {
			return true
		}
		return m.class(t, c, k)
	}
	m.s.bound[vi], m.s.classes[vi] = true, c
	ok := m.class(t, c, k)
	m.s.bound[vi] = false
	return ok
}

// candidates returns the classes where term i may match, in increasing order.
func (m *matcher) candidates(i int) []Id {
	t := m.p.Terms[i]
	g := m.g
	if t.Bind != "" {
		if vi := m.s.index(t.Bind); m.s.bound[vi] {
			return []Id{m.s.classes[vi]}
		}
	}
	if t.Var != "" {
		if vi := m.s.index(t.Var); m.s.bound[vi] {
			return []Id{m.s.classes[vi]}
		}
		return g.Classes()
	}
	a := m.p.anchors[i]
	if !a.ok {
		return g.byOp[t.Op]
	}
	set := []Id{m.s.classes[a.vi]}
	for _, st := range a.path {
		var next []Id
		for _, c := range set {
			for _, pr := range g.classes[g.uf.find(c)].parents {
				if pr.node.Op == st.op && st.pos < len(pr.node.Children) && g.uf.find(pr.node.Children[st.pos]) == c {
					next = append(next, g.uf.find(pr.class))
				}
			}
		}
		slices.Sort(next)
		set = slices.Compact(next)
		if len(set) == 0 {
			break
		}
	}
	return set
}

// class matches pattern term t against class c, calling k for every extension of the bindings;
// it returns false when k asked to stop.
func (m *matcher) class(t *PNode, c Id, k func() bool) bool {
	if t.Var != "" {
		vi := m.s.index(t.Var)
		if m.s.bound[vi] {
			if m.s.classes[vi] != c {
				return true
			}
			return k()
		}
		m.s.bound[vi], m.s.classes[vi] = true, c
		ok := k()
		m.s.bound[vi] = false
		return ok
	}
	cl := m.g.classes[c]
	lo, hi := cl.opRange(t.Op)
	for _, n := range cl.nodes[lo:hi] {
		if len(n.Children) != len(t.Children) {
			continue
		}
		var newly [8]int
		bound, ok := m.attrs(t, n, newly[:0])
		if !ok {
			continue
		}
		cont := m.children(t, n, 0, k)
		for _, vi := range bound {
			m.s.bound[vi] = false
		}
		if !cont {
			return false
		}
	}
	return true
}

// attrs checks n's attributes against t's constraints, binding unbound attribute variables; it
// returns the indices it bound (to undo) and whether n matches.
func (m *matcher) attrs(t *PNode, n Node, bound []int) ([]int, bool) {
	if t.Attrs == nil {
		return bound, true
	}
	vals := m.g.attrs[n.Attr]
	if len(vals) != len(t.Attrs) {
		return bound, false
	}
	for i, a := range t.Attrs {
		switch {
		case a.Any:
		case a.Var != "":
			vi := m.s.index(a.Var)
			if m.s.bound[vi] {
				if m.s.attrs[vi] != vals[i] {
					for _, b := range bound {
						m.s.bound[b] = false
					}
					return nil, false
				}
				continue
			}
			m.s.bound[vi], m.s.attrs[vi] = true, vals[i]
			bound = append(bound, vi)
		default:
			if a.Lit != vals[i] {
				for _, b := range bound {
					m.s.bound[b] = false
				}
				return nil, false
			}
		}
	}
	return bound, true
}

func (m *matcher) children(t *PNode, n Node, i int, k func() bool) bool {
	if i == len(t.Children) {
		return k()
	}
	return m.class(t.Children[i], n.Children[i], func() bool { return m.children(t, n, i+1, k) })
}
