// Package rules holds vkc's rewrite-rule language: a parser for rule files, the compiler from
// rules to egraph rewrites given an op table, and (later) the rule files and the adapter to the op
// IR. The language follows egg's patterns and the Go compiler's .rules files: one rule per line
// or short block, so rules are read and reviewed as a list.
//
//	# algebra
//	add-comm:    (add ?a ?b) => (add ?b ?a)
//	mul-one:     (mul ?x (const[value=1])) => ?x
//	softmax-max: (softmax[axis=?a] (sub ?x (max[axis=?a] ?x))) => (softmax[axis=?a] ?x)
//	transpose-transpose: (transpose[perm=?p] (transpose[perm=?q] ?x)) => ?x  if inverse_perms(?p, ?q)
//	mul-comm:    (mul ?a ?b) <=> (mul ?b ?a)          // bidirectional: two rewrites
//
//	# a two-output fusion: a multi-pattern (terms joined by &) whose right side gives one term
//	# per left term (or a single term, unioned with the last left term's class); ?s = names the
//	# class the first term matched
//	add-rmsnorm: ?s = (add ?a ?b) & (rmsnorm[eps=?e] ?s ?w)
//	    => (out0 (add_rmsnorm[eps=?e] ?a ?b ?w)) & (out1 (add_rmsnorm[eps=?e] ?a ?b ?w))
//
//	# a right side computed in Go
//	concat-qkv: ?q = (matmul ?x ?wq) & (matmul ?x ?wk) => @concat_weights  if is_param(?wq), is_param(?wk)
//
// See Parse for the grammar and Compile for the checks.
package rules

import (
	"strconv"
	"strings"
)

// File is a parsed rule file.
type File struct {
	Name  string
	Rules []*Rule
}

// Rule is one rule as written. A bidirectional rule (<=>) compiles to two rewrites, the second
// named Name+"-rev".
type Rule struct {
	File string
	Line int
	Name string
	// LHS holds the left-hand terms (several joined by & make a multi-pattern).
	LHS []*Term
	// RHS holds the right-hand terms; nil when Applier names a Go applier instead (=> @name).
	RHS           []*Term
	Applier       string
	Bidirectional bool
	Guards        []GuardCall
}

// Term is a pattern term: a variable (Var), or an operator with attributes and arguments. Bind
// names the class a left-hand root matched (`?s = (add ?a ?b)`).
type Term struct {
	Line  int
	Bind  string
	Var   string
	Op    string
	Attrs []AttrTerm
	Args  []*Term
}

// AttrTerm is one attribute constraint `name=value`: Value is a variable ("?a"), "_" for any, or
// a literal (already unquoted).
type AttrTerm struct {
	Name  string
	Value string
	// Quoted records that the literal was written as a quoted string (so "_" or "?a" can be
	// literals too).
	Quoted bool
}

// IsVar reports whether the attribute value is a variable.
//
// Example:
//
//	if a.IsVar() { bind(a.Value) }
func (a AttrTerm) IsVar() bool { return !a.Quoted && strings.HasPrefix(a.Value, "?") }

// IsAny reports whether the attribute value is "_" (unconstrained).
//
// Example:
//
//	if a.IsAny() { continue }
func (a AttrTerm) IsAny() bool { return !a.Quoted && a.Value == "_" }

// GuardCall is a guard named in an `if` clause, with its arguments (variables or literals).
type GuardCall struct {
	Line int
	Name string
	Args []string
	// Call records that the guard was written with parentheses, even if empty.
	Call bool
}

// String formats the term in the rule syntax; parsing the result gives the same term.
//
// Example:
//
//	fmt.Println(r.LHS[0]) // (softmax[axis=?a] ?x)
func (t *Term) String() string {
	var b strings.Builder
	t.format(&b)
	return b.String()
}

func (t *Term) format(b *strings.Builder) {
	if t.Bind != "" {
		b.WriteString(t.Bind + " = ")
	}
	if t.Var != "" {
		b.WriteString(t.Var)
		return
	}
	b.WriteByte('(')
	b.WriteString(t.Op)
	if len(t.Attrs) > 0 {
		b.WriteByte('[')
		for i, a := range t.Attrs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.Name + "=" + formatValue(a))
		}
		b.WriteByte(']')
	}
	for _, a := range t.Args {
		b.WriteByte(' ')
		a.format(b)
	}
	b.WriteByte(')')
}

func formatValue(a AttrTerm) string {
	if a.Quoted || a.Value == "" || !isPlainValue(a.Value) {
		return strconv.Quote(a.Value)
	}
	return a.Value
}

// isPlainValue reports whether v can be written unquoted: it lexes as one atom, or as a bracketed
// list of atoms.
func isPlainValue(v string) bool {
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		inner := v[1 : len(v)-1]
		if inner == "" {
			return true
		}
		for _, p := range strings.Split(inner, ",") {
			if !isAtom(p) || strings.HasPrefix(p, "?") || p == "_" {
				return false
			}
		}
		return true
	}
	return isAtom(v)
}

func isAtom(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !isAtomRune(r) && !(i == 0 && r == '?') {
			return false
		}
	}
	return !strings.HasPrefix(s, "//")
}

// String formats the rule on one line in the rule syntax; parsing it gives the same rule.
//
// Example:
//
//	fmt.Println(r) // add-comm: (add ?a ?b) => (add ?b ?a)
func (r *Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Name + ": ")
	side := func(ts []*Term) {
		for i, t := range ts {
			if i > 0 {
				b.WriteString(" & ")
			}
			t.format(&b)
		}
	}
	side(r.LHS)
	if r.Bidirectional {
		b.WriteString(" <=> ")
	} else {
		b.WriteString(" => ")
	}
	if r.Applier != "" {
		b.WriteString("@" + r.Applier)
	} else {
		side(r.RHS)
	}
	for i, g := range r.Guards {
		if i == 0 {
			b.WriteString(" if ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(g.Name)
		if g.Call || len(g.Args) > 0 {
			b.WriteByte('(')
			for j, a := range g.Args {
				if j > 0 {
					b.WriteString(", ")
				}
				if strings.HasPrefix(a, "?") || isAtom(a) {
					b.WriteString(a)
				} else {
					b.WriteString(strconv.Quote(a))
				}
			}
			b.WriteByte(')')
		}
	}
	return b.String()
}

// String formats the file, one rule per line, without comments.
//
// Example:
//
//	os.WriteFile("normalised.rules", []byte(f.String()), 0o644)
func (f *File) String() string {
	var b strings.Builder
	for _, r := range f.Rules {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}
