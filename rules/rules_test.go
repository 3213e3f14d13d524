package rules

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vkc-project/vkc/egraph"
)

const (
	opNum egraph.Op = iota + 1
	opVar
	opAdd
	opMul
	opNeg
	opSoftmax
	opRMSNorm
	opAddRMSNorm
	opOut0
	opOut1
	opConcat
	opTranspose
)

func testEnv() Env {
	return Env{
		Ops: map[string]OpInfo{
			"num":         {Op: opNum, Arity: 0, Attrs: []string{"v"}},
			"var":         {Op: opVar, Arity: 0, Attrs: []string{"name"}},
			"add":         {Op: opAdd, Arity: 2},
			"mul":         {Op: opMul, Arity: 2},
			"neg":         {Op: opNeg, Arity: 1},
			"softmax":     {Op: opSoftmax, Arity: 1, Attrs: []string{"axis"}, Defaults: map[string]string{"axis": "-1"}},
			"rmsnorm":     {Op: opRMSNorm, Arity: 2, Attrs: []string{"eps"}},
			"add_rmsnorm": {Op: opAddRMSNorm, Arity: 3, Attrs: []string{"eps"}},
			"out0":        {Op: opOut0, Arity: 1},
			"out1":        {Op: opOut1, Arity: 1},
			"concat":      {Op: opConcat, Arity: -1, Attrs: []string{"axis"}},
			"transpose":   {Op: opTranspose, Arity: 1, Attrs: []string{"perm"}},
		},
		Guards: map[string]Guard{
			"is_var": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
				id, _ := m.Subst.Class(egraph.Var(args[0]))
				for _, n := range g.Nodes(id) {
					if n.Op == opVar {
						return true
					}
				}
				return false
			}},
			"never": {Args: 0, Check: func(*egraph.EGraph, egraph.Match, []string) bool { return false }},
			"attr_is": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
				v, _ := m.Subst.Attr(egraph.Var(args[0]))
				return v == args[1]
			}},
		},
		Appliers: map[string]egraph.Applier{
			"fold_add": egraph.ApplyFunc(func(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
				x, _ := m.Subst.Attr("?x")
				y, _ := m.Subst.Attr("?y")
				a, err1 := strconv.Atoi(x)
				b, err2 := strconv.Atoi(y)
				if err1 != nil || err2 != nil {
					return false, nil
				}
				id, err := g.Add(egraph.Node{Op: opNum, Attr: g.InternAttrs(strconv.Itoa(a + b))})
				if err != nil {
					return false, err
				}
				return g.Union(m.Roots[0], id, rule)
			}),
		},
		Canon: func(op, attr, lit string) (string, error) {
			if attr == "eps" {
				f, err := strconv.ParseFloat(lit, 64)
				if err != nil {
					return "", fmt.Errorf("%q is not a number", lit)
				}
				return strconv.FormatFloat(f, 'g', -1, 64), nil
			}
			return lit, nil
		},
	}
}

const example = `# algebra
add-comm:  (add ?a ?b) => (add ?b ?a)
add-zero:  (add ?x (num[v=0])) => ?x   // identity
neg-add:   (neg (add ?a ?b)) <=> (add (neg ?a) (neg ?b))
softmax-shift: (softmax[axis=?ax] (add ?x (num[v=_]))) => (softmax[axis=?ax] ?x) if is_var(?x)
fold: (add (num[v=?x]) (num[v=?y])) => @fold_add
never-fires: (mul ?a ?b) => (mul ?b ?a) [if never]
guarded-attr: (softmax[axis=?ax] ?x) => (softmax ?x) if attr_is(?ax, "-1")

# a two-output fusion over two lines
add-rmsnorm: ?s = (add ?a ?b) & (rmsnorm[eps=?e] ?s ?w)
    => (out0 (add_rmsnorm[eps=?e] ?a ?b ?w)) & (out1 (add_rmsnorm[eps=?e] ?a ?b ?w))
rmsnorm-eps: (rmsnorm[eps=1e-5] ?x ?w) => (rmsnorm[eps=0.00001] ?x ?w)
transpose-id: (transpose[perm=[0,1]] ?x) => ?x
concat-one: (concat[axis=_] ?x) => ?x
`

func TestParseExample(t *testing.T) {
	f, err := Parse("example.rules", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) != 11 {
		t.Fatalf("%d rules, want 11", len(f.Rules))
	}
	byName := map[string]*Rule{}
	for _, r := range f.Rules {
		byName[r.Name] = r
	}
	fused := byName["add-rmsnorm"]
	if fused.Line != 11 || len(fused.LHS) != 2 || len(fused.RHS) != 2 || fused.LHS[0].Bind != "?s" {
		t.Errorf("add-rmsnorm parsed as %+v", fused)
	}
	if a := fused.LHS[1].Attrs; len(a) != 1 || a[0].Name != "eps" || !a[0].IsVar() {
		t.Errorf("rmsnorm attrs %+v", a)
	}
	if !byName["neg-add"].Bidirectional || byName["fold"].Applier != "fold_add" {
		t.Error("bidirectional or applier not recorded")
	}
	if g := byName["softmax-shift"].Guards; len(g) != 1 || g[0].Name != "is_var" || g[0].Args[0] != "?x" {
		t.Errorf("guards %+v", g)
	}
	if g := byName["never-fires"].Guards; len(g) != 1 || g[0].Name != "never" {
		t.Errorf("bracketed guard %+v", g)
	}
	if v := byName["transpose-id"].LHS[0].Attrs[0].Value; v != "[0,1]" {
		t.Errorf("list literal %q", v)
	}
	// Formatting and re-parsing gives the same rules.
	f2, err := Parse("again.rules", []byte(f.String()))
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, f)
	}
	if f2.String() != f.String() {
		t.Errorf("round trip differs:\n%s\n%s", f, f2)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"r: (add ?a ?b) =>\n", "x.rules:1: expected a term"},
		{"r (add ?a ?b) => ?a\n", "x.rules:1: expected ':' after rule name r"},
		{"r: (add ?a ?b => ?a\n", "x.rules:1: expected a term"},
		{"r: (add ?a\n\n", "x.rules:1: unclosed '(' of add opened at line 1"},
		{"r: (add ?a ?b) => ?a\nr: (mul ?a ?b) => ?a\n", `x.rules:2: rule "r" already defined at line 1`},
		{"r: (f[a=\"x) => ?a\n", "x.rules:1: unterminated string"},
		{"r: (f ?a) -> ?a\n", "x.rules:1: unexpected character"},
		{"r: (f ?a) => ?a (g ?b)\n", "x.rules:1: rule r: unexpected '('"},
		{"r: (f ?a) => ?a s: (g ?a) => ?a\n", "x.rules:1: rule r: unexpected 's'"},
		{"r: (f (g ?a = (h))) => ?a\n", "x.rules:1: ?a = ... may only name a whole left-hand term"},
		{"r: (f[a] ?x) => ?x\n", "x.rules:1: expected '=' after attribute a"},
		{"r: (f ?x) => ?x if\n", "x.rules:1: expected a guard name"},
		{"r: (f ?x) => ?x [if g\n", "x.rules:1: expected ']' closing the guards"},
		{"r: (f ?) => ?x\n", "x.rules:1: '?' must be followed by a variable name"},
	}
	for _, c := range cases {
		_, err := Parse("x.rules", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
	}
	// Every broken rule is reported, not only the first.
	_, err := Parse("x.rules", []byte("a: (f ?x =>\nb: (f ?x) => ?x\nc: (g ?x) => \n"))
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 2 || l[0].Line != 1 || l[1].Line != 3 {
		t.Errorf("errors %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"r: (foo ?x) => ?x", `t.rules:2: rule r: unknown operator "foo"`},
		{"r: (add ?x) => ?x", "t.rules:2: rule r: add takes 2 argument(s), got 1"},
		{"r: (softmax[dim=1] ?x) => ?x", `t.rules:2: rule r: softmax has no attribute "dim" (it has axis)`},
		{"r: (neg ?x) => (add ?x ?y)", "t.rules:2: rule r: right-hand variable ?y is not bound by the left side"},
		{"r: (neg ?x)\n => (add ?x\n   ?y)", "t.rules:3: rule r: right-hand variable ?y is not bound"},
		{"r: (neg ?x) => ?x if nope(?x)", `t.rules:2: rule r: unknown guard "nope"`},
		{"r: (neg ?x) => ?x if is_var", "t.rules:2: rule r: guard is_var takes 1 argument(s), got 0"},
		{"r: (neg ?x) => ?x\n  if is_var(?z)", "t.rules:3: rule r: guard is_var: variable ?z is not bound"},
		{"r: (neg ?x) => (rmsnorm ?x ?x)", "t.rules:2: rule r: right-hand rmsnorm must give attribute eps (no default)"},
		{"r: (neg ?x) => (rmsnorm[eps=_] ?x ?x)", "t.rules:2: rule r: right-hand rmsnorm cannot leave attribute eps as _"},
		{"r: (softmax[axis=?x] ?x) => ?x", "t.rules:2: rule r: egraph: variable ?x used both as an attribute and as an e-class"},
		{"r: (softmax[axis=?a] ?x) => (neg ?a)", "t.rules:2: rule r: variable ?a is an attribute on one side and an e-class on the other"},
		{"r: (neg (neg ?x)) <=> ?x", "t.rules:2: rule r: <=>: the right side ?x is a bare variable"},
		{"r: (neg ?x) <=> (add ?x ?y)", "t.rules:2: rule r: right-hand variable ?y is not bound"},
		{"r: (softmax[axis=_] ?x) <=> (neg ?x)", "t.rules:2: rule r: <=> reverse direction: right-hand softmax cannot leave attribute axis as _"},
		{"r: ?x => (neg ?x)", "t.rules:2: rule r: a left-hand term cannot be a bare variable"},
		{"r: (neg ?x) => @nope", "t.rules:2: rule r: unknown applier @nope"},
		{"r: (rmsnorm[eps=tiny] ?x ?w) => ?x", `t.rules:2: rule r: rmsnorm attribute eps: "tiny" is not a number`},
		{"r: (neg ?x) & (neg ?y) & (neg ?z) => (neg ?x) & (neg ?y)", "t.rules:2: rule r: left side has 3 terms, right side 2"},
		{"r: (neg ?x) <=> (neg ?x)\nr-rev: (neg ?x) => ?x", `t.rules:3: rule "r-rev" already defined at t.rules:2`},
	}
	for _, c := range cases {
		f, err := Parse("t.rules", []byte("# header\n"+c.src+"\n"))
		if err != nil {
			t.Errorf("%q: parse: %v", c.src, err)
			continue
		}
		_, err = Compile(testEnv(), f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n  error %v\n  want  %q", c.src, err, c.want)
		}
	}
}

// build adds a small term to g: numbers become num, other bare names var.
func build(t *testing.T, g *egraph.EGraph, op egraph.Op, attrs []string, children ...egraph.Id) egraph.Id {
	t.Helper()
	id, err := g.Add(egraph.Node{Op: op, Attr: g.InternAttrs(attrs...), Children: children})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCompileAndRun(t *testing.T) {
	f, err := Parse("example.rules", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	rws, err := Compile(testEnv(), f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rws {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "neg-add neg-add-rev softmax-shift") || len(rws) != 12 {
		t.Errorf("rewrites %s", got)
	}
	g := egraph.New(nil)
	x := build(t, g, opVar, []string{"x"})
	y := build(t, g, opVar, []string{"y"})
	w := build(t, g, opVar, []string{"w"})
	two := build(t, g, opNum, []string{"2"})
	three := build(t, g, opNum, []string{"3"})
	zero := build(t, g, opNum, []string{"0"})
	xPlus0 := build(t, g, opAdd, nil, x, zero)
	sum := build(t, g, opAdd, nil, two, three)
	sm := build(t, g, opSoftmax, []string{"-1"}, build(t, g, opAdd, nil, x, two))
	s := build(t, g, opAdd, nil, x, y)
	norm := build(t, g, opRMSNorm, []string{"1e-05"}, s, w)
	negSum := build(t, g, opNeg, nil, s)
	r := egraph.Runner{IterLimit: 10, NodeLimit: 10_000}
	rep, err := r.Run(context.Background(), g, rws)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop != egraph.Saturated {
		t.Fatalf("stop %v\n%s", rep.Stop, rep)
	}
	eq := func(a, b egraph.Id) bool { return g.Find(a) == g.Find(b) }
	if !eq(xPlus0, x) {
		t.Error("add-zero did not fire")
	}
	if !eq(sum, build(t, g, opNum, []string{"5"})) {
		t.Error("@fold_add did not fire")
	}
	if !eq(sm, build(t, g, opSoftmax, []string{"-1"}, x)) {
		t.Error("softmax-shift did not fire")
	}
	fused := build(t, g, opAddRMSNorm, []string{"1e-05"}, x, y, w)
	if !eq(s, build(t, g, opOut0, nil, fused)) || !eq(norm, build(t, g, opOut1, nil, fused)) {
		t.Error("add-rmsnorm did not give both outputs")
	}
	if !eq(negSum, build(t, g, opAdd, nil, build(t, g, opNeg, nil, x), build(t, g, opNeg, nil, y))) {
		t.Error("neg-add did not fire")
	}
	for _, st := range rep.RuleMatches() {
		if st.Name == "never-fires" && st.Matches != 0 {
			t.Error("a rule guarded by never matched")
		}
	}
}

func TestParseFSAndLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"b.rules": {Data: []byte("neg-neg: (neg (neg ?x)) => ?x\n")},
		"a.rules": {Data: []byte("add-comm: (add ?a ?b) => (add ?b ?a)\n")},
		"README":  {Data: []byte("not a rule file")},
	}
	files, err := ParseFS(fsys, "*.rules")
	if err != nil || len(files) != 2 || files[0].Name != "a.rules" {
		t.Fatalf("ParseFS: %v %v", files, err)
	}
	bad := fstest.MapFS{
		"a.rules": {Data: []byte("x: (add ?a => ?a\n")},
		"b.rules": {Data: []byte("\ny (neg ?x) => ?x\n")},
	}
	_, err = ParseFS(bad, "*.rules")
	if err == nil || !strings.Contains(err.Error(), "a.rules:1:") || !strings.Contains(err.Error(), "b.rules:2:") {
		t.Errorf("errors across files: %v", err)
	}
	rws, err := Load(testEnv(), map[string][]byte{"a.rules": []byte("add-comm: (add ?a ?b) => (add ?b ?a)\n")})
	if err != nil || len(rws) != 1 {
		t.Errorf("Load: %v %v", rws, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add("r: (f[a=\"x y\", b=[1,2]] ?x) => ?x if g(?x, \"q\")\n")
	f.Add("r: ?s = (add ?a ?b) & (n ?s) => (o ?a) & (p ?b)\n")
	f.Add("a: (f ?x =>\nb: (f ?x) => ?x\n")
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse("fuzz.rules", []byte(src))
		if err != nil {
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 {
				t.Fatalf("error %v is not a non-empty ErrorList", err)
			}
			for _, e := range l {
				if e.Line < 1 || e.File != "fuzz.rules" {
					t.Fatalf("error without a position: %v", e)
				}
			}
			return
		}
		// A parsed file formats to text that parses to the same rules.
		text := file.String()
		again, err := Parse("fuzz.rules", []byte(text))
		if err != nil {
			t.Fatalf("formatted rules do not parse: %v\n%s", err, text)
		}
		if again.String() != text {
			t.Fatalf("round trip differs:\n%s\n%s", text, again.String())
		}
		// Compiling must not panic either; errors are fine.
		_, _ = Compile(testEnv(), file)
	})
}
