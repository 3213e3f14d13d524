package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkc-project/vkc/egraph"
)

// OpInfo describes one operator to the rule compiler. The table is supplied by the caller (the ir
// adapter), so this package does not depend on the op IR.
type OpInfo struct {
	Op egraph.Op
	// Arity is the number of arguments; -1 accepts any number (concat).
	Arity int
	// Attrs names the attributes in the order of the e-graph's attribute tuple.
	Attrs []string
	// Defaults gives values for attributes a right-hand side may omit.
	Defaults map[string]string
}

// Guard is a condition implemented in Go and referred to by name in rules (`if is_param(?w)`).
// Args is the number of arguments it takes (-1: any). Check receives the arguments as written:
// variables ("?w", bound by the match: read them with m.Subst) or literals.
type Guard struct {
	Args  int
	Check func(g *egraph.EGraph, m egraph.Match, args []string) bool
}

// Env is what compiling rules needs from the caller.
type Env struct {
	Ops map[string]OpInfo
	// Guards by name.
	Guards map[string]Guard
	// Appliers by name, for right-hand sides computed in Go (`=> @concat_weights`).
	Appliers map[string]egraph.Applier
	// Canon, when set, turns an attribute literal as written into the canonical string the
	// e-graph holds (for example "1e-5" to "1e-05"), or rejects it. nil keeps literals as written.
	Canon func(op, attr, lit string) (string, error)
}

// Compile turns parsed rules into egraph rewrites, in file and rule order (a bidirectional rule
// gives name and name-rev). It checks everything the syntax cannot: operators exist and have the
// right number of arguments, attributes exist and a right-hand side gives them all (or the op has
// defaults), literals are canonical, every right-hand variable is bound on the left with the same
// kind (class or attribute), guards and appliers exist with the right number of arguments and their
// variables are bound. Every error names file and line; all are reported.
//
// Example:
//
//	env := rules.Env{Ops: map[string]rules.OpInfo{
//		"add": {Op: 1, Arity: 2},
//		"softmax": {Op: 2, Arity: 1, Attrs: []string{"axis"}},
//	}}
//	f, err := rules.Parse("algebra.rules", src)
//	rws, err := rules.Compile(env, f)
//	rep, err := egraph.NewRunner().Run(ctx, g, rws)
func Compile(env Env, files ...*File) ([]*egraph.Rewrite, error) {
	var out []*egraph.Rewrite
	var errs ErrorList
	names := map[string]string{}
	for _, f := range files {
		for _, r := range f.Rules {
			rws, err := compileRule(env, r)
			if err != nil {
				errs = append(errs, err.(*Error))
				continue
			}
			for _, rw := range rws {
				if where, dup := names[rw.Name]; dup {
					errs = append(errs, &Error{r.File, r.Line, fmt.Sprintf("rule %q already defined at %s", rw.Name, where)})
					continue
				}
				names[rw.Name] = fmt.Sprintf("%s:%d", r.File, r.Line)
				out = append(out, rw)
			}
		}
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// Load parses and compiles rule files in one step.
//
// Example:
//
//	rws, err := rules.Load(env, map[string][]byte{"algebra.rules": src})
func Load(env Env, files map[string][]byte) ([]*egraph.Rewrite, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var parsed []*File
	var errs ErrorList
	for _, n := range names {
		f, err := Parse(n, files[n])
		if err != nil {
			errs = append(errs, err.(ErrorList)...)
			continue
		}
		parsed = append(parsed, f)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return Compile(env, parsed...)
}

type compiler struct {
	env  Env
	rule *Rule
}

func (c *compiler) errorf(line int, format string, args ...any) *Error {
	return &Error{c.rule.File, line, fmt.Sprintf("rule %s: ", c.rule.Name) + fmt.Sprintf(format, args...)}
}

func compileRule(env Env, r *Rule) (rws []*egraph.Rewrite, err error) {
	c := &compiler{env: env, rule: r}
	lhs, err := c.side(r.LHS, true)
	if err != nil {
		return nil, err
	}
	guards, err := c.guards(lhs)
	if err != nil {
		return nil, err
	}
	if r.Applier != "" {
		if r.Bidirectional {
			return nil, c.errorf(r.Line, "a Go applier (@%s) cannot be bidirectional", r.Applier)
		}
		app, ok := env.Appliers[r.Applier]
		if !ok {
			return nil, c.errorf(r.Line, "unknown applier @%s", r.Applier)
		}
		return []*egraph.Rewrite{{Name: r.Name, Searcher: lhs, Applier: app, Guards: guards}}, nil
	}
	rhs, err := c.side(r.RHS, false)
	if err != nil {
		return nil, err
	}
	if err := c.bound(lhs, rhs, r.RHS); err != nil {
		return nil, err
	}
	fwd, err := egraph.NewRewrite(r.Name, lhs, rhs, guards...)
	if err != nil {
		return nil, c.errorf(r.Line, "%v", err)
	}
	rws = append(rws, fwd)
	if r.Bidirectional {
		// The right side becomes a left side: it must be a pattern (no bare variable, no
		// wildcard) and bind everything the left side uses, guards included.
		for _, t := range r.RHS {
			if t.Var != "" {
				return nil, c.errorf(t.Line, "<=>: the right side %s is a bare variable, so it cannot be matched; use =>", t.Var)
			}
		}
		for _, t := range r.LHS {
			if t.Bind != "" {
				return nil, c.errorf(t.Line, "<=>: %s = ... cannot be built by the reverse rule; use =>", t.Bind)
			}
		}
		rlhs, err := c.side(r.RHS, true)
		if err != nil {
			return nil, err
		}
		rrhs, err := c.side(r.LHS, false)
		if err != nil {
			e := err.(*Error)
			e.Msg = strings.Replace(e.Msg, ": ", ": <=> reverse direction: ", 1)
			return nil, e
		}
		if err := c.bound(rlhs, rrhs, r.LHS); err != nil {
			return nil, err
		}
		rguards, err := c.guards(rlhs)
		if err != nil {
			return nil, err
		}
		rev, err := egraph.NewRewrite(r.Name+"-rev", rlhs, rrhs, rguards...)
		if err != nil {
			return nil, c.errorf(r.Line, "%v", err)
		}
		rws = append(rws, rev)
	}
	return rws, nil
}

// side compiles the terms of one side to an egraph pattern.
func (c *compiler) side(terms []*Term, lhs bool) (*egraph.Pattern, error) {
	nodes := make([]*egraph.PNode, len(terms))
	for i, t := range terms {
		if lhs && t.Var != "" {
			return nil, c.errorf(t.Line, "a left-hand term cannot be a bare variable (%s): it would match every class", t.Var)
		}
		n, err := c.term(t, lhs)
		if err != nil {
			return nil, err
		}
		nodes[i] = n
	}
	p, err := egraph.NewPattern(nodes...)
	if err != nil {
		return nil, c.errorf(terms[0].Line, "%v", err)
	}
	return p, nil
}

func (c *compiler) term(t *Term, lhs bool) (*egraph.PNode, error) {
	if t.Var != "" {
		return egraph.PV(egraph.Var(t.Var)), nil
	}
	info, ok := c.env.Ops[t.Op]
	if !ok {
		return nil, c.errorf(t.Line, "unknown operator %q", t.Op)
	}
	if info.Arity >= 0 && len(t.Args) != info.Arity {
		return nil, c.errorf(t.Line, "%s takes %d argument(s), got %d", t.Op, info.Arity, len(t.Args))
	}
	n := &egraph.PNode{Op: info.Op, Bind: egraph.Var(t.Bind)}
	given := map[string]AttrTerm{}
	for _, a := range t.Attrs {
		if !slices.Contains(info.Attrs, a.Name) {
			return nil, c.errorf(t.Line, "%s has no attribute %q (it has %s)", t.Op, a.Name, attrList(info.Attrs))
		}
		if _, dup := given[a.Name]; dup {
			return nil, c.errorf(t.Line, "attribute %s of %s given twice", a.Name, t.Op)
		}
		given[a.Name] = a
	}
	if len(info.Attrs) > 0 && (len(t.Attrs) > 0 || !lhs) {
		n.Attrs = make([]egraph.AttrPat, len(info.Attrs))
		for i, name := range info.Attrs {
			a, ok := given[name]
			switch {
			case !ok && lhs:
				n.Attrs[i] = egraph.AAny()
			case !ok:
				d, ok := info.Defaults[name]
				if !ok {
					return nil, c.errorf(t.Line, "right-hand %s must give attribute %s (no default)", t.Op, name)
				}
				n.Attrs[i] = egraph.ALit(d)
			case a.IsAny():
				if !lhs {
					return nil, c.errorf(t.Line, "right-hand %s cannot leave attribute %s as _", t.Op, name)
				}
				n.Attrs[i] = egraph.AAny()
			case a.IsVar():
				n.Attrs[i] = egraph.AVar(egraph.Var(a.Value))
			default:
				lit := a.Value
				if c.env.Canon != nil {
					v, err := c.env.Canon(t.Op, name, lit)
					if err != nil {
						return nil, c.errorf(t.Line, "%s attribute %s: %v", t.Op, name, err)
					}
					lit = v
				}
				n.Attrs[i] = egraph.ALit(lit)
			}
		}
	}
	for _, a := range t.Args {
		ch, err := c.term(a, lhs)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, ch)
	}
	return n, nil
}

func attrList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// bound checks that every variable of the right side is bound by the left with the same kind,
// naming the line of the right-hand term that uses it.
func (c *compiler) bound(lhs, rhs *egraph.Pattern, rterms []*Term) error {
	lv := lhs.Vars()
	for _, v := range rhs.Vars() {
		line := c.rule.Line
		for _, t := range rterms {
			if termUses(t, string(v)) {
				line = t.Line
				break
			}
		}
		if !slices.Contains(lv, v) {
			return c.errorf(line, "right-hand variable %s is not bound by the left side", v)
		}
		if lhs.IsAttrVar(v) != rhs.IsAttrVar(v) {
			return c.errorf(line, "variable %s is an attribute on one side and an e-class on the other", v)
		}
	}
	if len(rterms) != len(lhs.Terms) && len(rterms) != 1 {
		return c.errorf(c.rule.Line, "left side has %d terms, right side %d (give one right-hand term per left-hand term, or one for the last)", len(lhs.Terms), len(rterms))
	}
	return nil
}

func termUses(t *Term, v string) bool {
	if t.Var == v || t.Bind == v {
		return true
	}
	for _, a := range t.Attrs {
		if a.IsVar() && a.Value == v {
			return true
		}
	}
	for _, a := range t.Args {
		if termUses(a, v) {
			return true
		}
	}
	return false
}

// guards resolves the rule's guards against the registry and binds their arguments.
func (c *compiler) guards(lhs *egraph.Pattern) ([]egraph.Guard, error) {
	var out []egraph.Guard
	for _, gc := range c.rule.Guards {
		g, ok := c.env.Guards[gc.Name]
		if !ok {
			return nil, c.errorf(gc.Line, "unknown guard %q", gc.Name)
		}
		if g.Args >= 0 && len(gc.Args) != g.Args {
			return nil, c.errorf(gc.Line, "guard %s takes %d argument(s), got %d", gc.Name, g.Args, len(gc.Args))
		}
		for _, a := range gc.Args {
			if strings.HasPrefix(a, "?") && !slices.Contains(lhs.Vars(), egraph.Var(a)) {
				return nil, c.errorf(gc.Line, "guard %s: variable %s is not bound by the left side", gc.Name, a)
			}
		}
		check, args := g.Check, slices.Clone(gc.Args)
		out = append(out, func(eg *egraph.EGraph, m egraph.Match) bool { return check(eg, m, args) })
	}
	return out, nil
}
