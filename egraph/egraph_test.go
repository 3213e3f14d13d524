package egraph

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestUnionFind(t *testing.T) {
	var u unionFind
	for i := 0; i < 6; i++ {
		if got := u.makeSet(); got != Id(i) {
			t.Fatalf("makeSet = %d, want %d", got, i)
		}
	}
	u.union(0, 1)
	u.union(2, 3)
	u.union(0, 2)
	u.union(4, 5)
	for _, c := range []struct {
		a, b Id
		same bool
	}{{1, 3, true}, {0, 3, true}, {3, 4, false}, {4, 5, true}} {
		if got := u.find(c.a) == u.find(c.b); got != c.same {
			t.Errorf("find(%d)==find(%d) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
	// Path halving leaves every element pointing closer to its root.
	for i := Id(0); i < 4; i++ {
		u.find(i)
	}
	if u.parent[3] != 0 && u.parent[u.parent[3]] != 0 {
		t.Errorf("path not compressed: parent[3] = %d", u.parent[3])
	}
}

func TestHashConsing(t *testing.T) {
	g := New(nil)
	a := addTerm(t, g, "(add x y)")
	b := addTerm(t, g, "(add x y)")
	c := addTerm(t, g, "(add y x)")
	if a != b {
		t.Errorf("equal terms got classes %d and %d", a, b)
	}
	if a == c {
		t.Errorf("different terms share class %d", a)
	}
	if g.NumNodes() != 4 || g.NumClasses() != 4 {
		t.Errorf("nodes, classes = %d, %d; want 4, 4", g.NumNodes(), g.NumClasses())
	}
	// Attributes are part of the node.
	n1, _ := g.Add(Node{Op: opF, Attr: g.InternAttrs("1", "a")})
	n2, _ := g.Add(Node{Op: opF, Attr: g.InternAttrs("1", "a")})
	n3, _ := g.Add(Node{Op: opF, Attr: g.InternAttrs("1a")})
	if n1 != n2 || n1 == n3 {
		t.Errorf("attribute hash-consing: %d %d %d", n1, n2, n3)
	}
	if _, err := g.Add(Node{Op: opF, Children: []Id{99}}); err == nil {
		t.Error("adding a node with a missing child succeeded")
	}
}

func TestCongruenceAfterRebuild(t *testing.T) {
	g := New(nil)
	fa := addTerm(t, g, "(f a)")
	fb := addTerm(t, g, "(f b)")
	gfa := addTerm(t, g, "(g (f a))")
	gfb := addTerm(t, g, "(g (f b))")
	a := addTerm(t, g, "a")
	b := addTerm(t, g, "b")
	if _, err := g.Union(a, b, "test"); err != nil {
		t.Fatal(err)
	}
	if g.Find(fa) == g.Find(fb) {
		t.Fatal("congruence closed before Rebuild: rebuild is not deferred")
	}
	n, err := g.Rebuild()
	if err != nil {
		t.Fatal(err)
	}
	if g.Find(fa) != g.Find(fb) || g.Find(gfa) != g.Find(gfb) {
		t.Errorf("after rebuild f(a)≡f(b) is %v, g(f(a))≡g(f(b)) is %v", g.Find(fa) == g.Find(fb), g.Find(gfa) == g.Find(gfb))
	}
	if n != 2 {
		t.Errorf("congruence unions = %d, want 2", n)
	}
	if g.NumClasses() != 3 || g.NumNodes() != 4 {
		t.Errorf("classes, nodes = %d, %d; want 3 (a=b, f, g), 4", g.NumClasses(), g.NumNodes())
	}
	if id, ok := g.Lookup(Node{Op: opF, Children: []Id{b}}); !ok || id != g.Find(fa) {
		t.Errorf("Lookup f(b) = %d, %v", id, ok)
	}
}

func search(t *testing.T, g *EGraph, terms ...string) []Match {
	t.Helper()
	rebuild(t, g)
	return mustPattern(t, terms...).Search(g, 0)
}

func TestMatchRepeatedVariables(t *testing.T) {
	g := New(nil)
	aa := addTerm(t, g, "(add a a)")
	addTerm(t, g, "(add a b)")
	ms := search(t, g, "(add ?x ?x)")
	if len(ms) != 1 || ms[0].Roots[0] != aa {
		t.Fatalf("(add ?x ?x) matched %v, want only class %d", ms, aa)
	}
	x, _ := ms[0].Subst.Class("?x")
	if x != g.Find(addTerm(t, g, "a")) {
		t.Errorf("?x = %d", x)
	}
	g.Union(addTerm(t, g, "a"), addTerm(t, g, "b"), "test")
	if ms := search(t, g, "(add ?x ?x)"); len(ms) != 1 {
		t.Errorf("after a=b, (add ?x ?x) has %d matches, want 1 (both adds are one class now)", len(ms))
	}
	// Repetition across depth.
	g2 := New(nil)
	addTerm(t, g2, "(mul (add x y) x)")
	addTerm(t, g2, "(mul (add x y) y)")
	if ms := search(t, g2, "(mul (add ?a ?b) ?a)"); len(ms) != 1 {
		t.Errorf("(mul (add ?a ?b) ?a): %d matches, want 1", len(ms))
	}
}

func TestMatchAttributes(t *testing.T) {
	g := New(nil)
	addTerm(t, g, "(add 1 1)")
	addTerm(t, g, "(add 1 2)")
	addTerm(t, g, "(f[3,x] a)")
	addTerm(t, g, "(f[4,x] a)")
	addTerm(t, g, "(f[4,y] a)")
	cases := []struct {
		pat  string
		want int
	}{
		{"(add (num[?c]) (num[?c]))", 1},
		{"(add (num[?c]) (num[?d]))", 2},
		{"(add ?x (num[2]))", 1},
		{"(f[4,?n] ?x)", 2},
		{"(f[_,x] ?x)", 2},
		{"(f[3,y] ?x)", 0},
		{"(f ?x)", 3}, // no attribute constraint at all
		{"(f[4] ?x)", 0},
	}
	for _, c := range cases {
		if ms := search(t, g, c.pat); len(ms) != c.want {
			t.Errorf("%s: %d matches, want %d", c.pat, len(ms), c.want)
		}
	}
	ms := search(t, g, "(f[4,?n] ?x)")
	var names []string
	for _, m := range ms {
		v, ok := m.Subst.Attr("?n")
		if !ok {
			t.Fatal("?n unbound")
		}
		names = append(names, v)
	}
	if !slices.Equal(names, []string{"x", "y"}) {
		t.Errorf("?n bindings %v, want [x y] in class order", names)
	}
}

func TestMultiPattern(t *testing.T) {
	g := New(nil)
	s1 := addTerm(t, g, "(add x y)")
	n1 := addTerm(t, g, "(mul (add x y) w)")
	addTerm(t, g, "(add x z)")               // an add without a mul user
	addTerm(t, g, "(mul (add z z) w)")       // a mul over a different add
	n3 := addTerm(t, g, "(mul v (add x y))") // the add in the other position
	for _, terms := range [][]string{
		{"(add ?a ?b)", "(mul (add ?a ?b) ?w)"},
		{"?s = (add ?a ?b)", "(mul ?s ?w)"},
	} {
		ms := search(t, g, terms...)
		if len(ms) != 2 {
			t.Fatalf("%v: %d matches, want 2 (add z z has a mul, so it matches too): %v", terms, len(ms), ms)
		}
		found := false
		for _, m := range ms {
			if m.Roots[0] == s1 && m.Roots[1] == n1 {
				found = true
			}
			if m.Roots[1] == n3 {
				t.Errorf("%v matched mul with the add in position 1", terms)
			}
		}
		if !found {
			t.Errorf("%v: no match with roots (%d %d): %v", terms, s1, n1, ms)
		}
	}
	// A second term whose bound variable is deeper than one level.
	g2 := New(nil)
	addTerm(t, g2, "(neg x)")
	root := addTerm(t, g2, "(f (g (neg x)))")
	addTerm(t, g2, "(f (g y))")
	ms := search(t, g2, "(neg ?a)", "(f (g (neg ?a)))")
	if len(ms) != 1 || ms[0].Roots[1] != root {
		t.Errorf("deep multi-pattern: %v", ms)
	}
	// A multi-pattern rule with a two-term right-hand side (a two-output fusion).
	g3 := New(nil)
	sum := addTerm(t, g3, "(add x y)")
	prod := addTerm(t, g3, "(mul (add x y) w)")
	r := rw(t, "fuse", "?s = (add ?a ?b) & (mul ?s ?w)", "(out0 (fused ?a ?b ?w)) & (out1 (fused ?a ?b ?w))")
	rep, err := (&Runner{IterLimit: 5}).Run(t.Context(), g3, []*Rewrite{r})
	if err != nil || rep.Stop != Saturated {
		t.Fatalf("run: %v %v", rep.Stop, err)
	}
	if g3.Find(sum) != g3.Find(addTerm(t, g3, "(out0 (fused x y w))")) || g3.Find(prod) != g3.Find(addTerm(t, g3, "(out1 (fused x y w))")) {
		t.Error("fusion outputs not unioned with their matched roots")
	}
}

func TestAnalysisMergeErrorNamesValuesAndRule(t *testing.T) {
	g := New(constFold{})
	addTerm(t, g, "(add 1 2)")
	bad := rw(t, "wrong-fold", "(add (num[1]) (num[2]))", "(num[4])")
	_, err := NewRunner().Run(t.Context(), g, []*Rewrite{bad})
	if err == nil {
		t.Fatal("merging constants 3 and 4 succeeded")
	}
	var me *MergeError
	if !errors.As(err, &me) || me.Rule != "wrong-fold" {
		t.Fatalf("error %v is not a MergeError for rule wrong-fold", err)
	}
	for _, want := range []string{"wrong-fold", "constant 3", "constant 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The same through congruence: f(3) and f(4) would merge because 3 and 4 do.
	g2 := New(constFold{})
	three := addTerm(t, g2, "3")
	addTerm(t, g2, "(f 3)")
	four := addTerm(t, g2, "4")
	if _, err := g2.Union(three, four, "direct"); err == nil || !strings.Contains(err.Error(), "direct") {
		t.Errorf("direct union error = %v", err)
	}
}

func TestConstantFoldingInAnalysis(t *testing.T) {
	g := New(constFold{})
	e := addTerm(t, g, "(add 1 (mul 2 3))")
	rebuild(t, g)
	if e != g.Find(addTerm(t, g, "7")) {
		t.Errorf("(add 1 (mul 2 3)) not folded to 7")
	}
	x, err := Extract(g, []Id{e}, unitCost)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Order) != 1 || x.Nodes[0].Op != opNum {
		t.Errorf("extracted %s", x.String(g))
	}
}

func TestOriginRecordsTheRule(t *testing.T) {
	g := New(nil)
	g.OpName = opName
	x := addTerm(t, g, "(mul (norm x) w)")
	r := rw(t, "norm-mul", "(mul (norm ?x) ?w)", "(fused ?x ?w)")
	if _, err := NewRunner().Run(t.Context(), g, []*Rewrite{r}); err != nil {
		t.Fatal(err)
	}
	origins := map[string]string{}
	for _, n := range g.Nodes(x) {
		origins[opName(n.Op)] = n.Origin()
	}
	if origins["mul"] != "" || origins["fused"] != "norm-mul" {
		t.Errorf("origins %v", origins)
	}
	ex, err := Extract(g, []Id{x}, opCost(map[string]float64{"mul": 2, "norm": 2, "fused": 1}))
	if err != nil {
		t.Fatal(err)
	}
	d := Dot(g, DotOptions{Extraction: ex, ChosenOnly: true, ShowOrigin: true}).String()
	if !strings.Contains(d, `fused\n(norm-mul)`) {
		t.Errorf("DOT does not label the fused node with its rule:\n%s", d)
	}
}

func TestApplierErrorNamesRule(t *testing.T) {
	g := New(constFold{})
	addTerm(t, g, "(neg x)")
	bad := rw(t, "bad-const", "(neg ?x)", "(num[not-a-number])")
	_, err := NewRunner().Run(t.Context(), g, []*Rewrite{bad})
	if err == nil || !strings.Contains(err.Error(), `rule "bad-const"`) || !strings.Contains(err.Error(), "not-a-number") {
		t.Errorf("error %v", err)
	}
}

func TestMultiPatternBoundRootLater(t *testing.T) {
	// The bound term second: (mul ?s ?w) first, then ?s = (add ?a ?b) checks the class ?s.
	g := New(nil)
	addTerm(t, g, "(mul (add x y) w)")
	addTerm(t, g, "(mul (neg x) w)")
	ms := search(t, g, "(mul ?s ?w)", "?s = (add ?a ?b)")
	if len(ms) != 1 {
		t.Fatalf("%d matches, want 1: %v", len(ms), ms)
	}
	a, _ := ms[0].Subst.Class("?a")
	if a != g.Find(addTerm(t, g, "x")) {
		t.Errorf("?a = %d", a)
	}
}
