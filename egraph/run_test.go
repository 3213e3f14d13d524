package egraph

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mathRules are egg-style arithmetic rules: commutativity, associativity, identities.
func mathRules(t testing.TB) []*Rewrite {
	return []*Rewrite{
		rw(t, "add-comm", "(add ?a ?b)", "(add ?b ?a)"),
		rw(t, "mul-comm", "(mul ?a ?b)", "(mul ?b ?a)"),
		rw(t, "add-assoc", "(add ?a (add ?b ?c))", "(add (add ?a ?b) ?c)"),
		rw(t, "mul-assoc", "(mul ?a (mul ?b ?c))", "(mul (mul ?a ?b) ?c)"),
		rw(t, "add-zero", "(add ?a 0)", "?a"),
		rw(t, "mul-one", "(mul ?a 1)", "?a"),
		rw(t, "mul-zero", "(mul ?a 0)", "0"),
		rw(t, "sub-self", "(sub ?a ?a)", "0"),
		rw(t, "distribute", "(mul ?a (add ?b ?c))", "(add (mul ?a ?b) (mul ?a ?c))"),
		rw(t, "factor", "(add (mul ?a ?b) (mul ?a ?c))", "(mul ?a (add ?b ?c))"),
	}
}

func TestRunnerSaturates(t *testing.T) {
	g := New(constFold{})
	e := addTerm(t, g, "(add (mul x 1) (sub y y))")
	rep, err := NewRunner().Run(context.Background(), g, mathRules(t)[:8])
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop != Saturated {
		t.Fatalf("stop = %v, want saturated\n%s", rep.Stop, rep)
	}
	if g.Find(e) != g.Find(addTerm(t, g, "x")) {
		t.Errorf("(add (mul x 1) (sub y y)) not proven equal to x")
	}
	last := rep.Iterations[len(rep.Iterations)-1]
	if last.Changed {
		t.Error("last iteration of a saturated run changed the graph")
	}
	stats := rep.RuleMatches()
	if len(stats) != 8 || stats[0].Name != "add-comm" || stats[0].Matches == 0 {
		t.Errorf("rule stats %+v", stats)
	}
	if !strings.Contains(rep.String(), "saturated") {
		t.Errorf("report text: %s", rep)
	}
}

// sumOf returns (add x1 (add x2 ... (add x(n-1) x0))).
func sumOf(n int) string {
	s := "x0"
	for i := n - 1; i >= 1; i-- {
		s = "(add x" + strconv.Itoa(i) + " " + s + ")"
	}
	return s
}

func TestRunnerStopReasons(t *testing.T) {
	ac := mathRules(t)[:4]
	cases := []struct {
		name   string
		runner Runner
		ctx    func() context.Context
		want   StopReason
	}{
		{"iteration limit", Runner{IterLimit: 2}, context.Background, IterationLimit},
		{"node limit", Runner{IterLimit: 100, NodeLimit: 200}, context.Background, NodeLimit},
		{"time limit", Runner{IterLimit: 100, TimeLimit: time.Nanosecond}, context.Background, TimeLimit},
		{"cancelled", Runner{IterLimit: 100}, func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, Cancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := New(nil)
			addTerm(t, g, sumOf(8))
			rep, err := c.runner.Run(c.ctx(), g, ac)
			if rep.Stop != c.want {
				t.Fatalf("stop = %v, want %v", rep.Stop, c.want)
			}
			if (c.want == Cancelled) != (err != nil) {
				t.Errorf("err = %v", err)
			}
			if c.want == NodeLimit && g.NumNodes() <= 200 {
				t.Errorf("node limit reported with %d nodes", g.NumNodes())
			}
			if !g.Clean() {
				t.Error("graph left unrebuilt after stopping")
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		g := New(constFold{})
		addTerm(t, g, "(add 2 2)")
		rep, err := NewRunner().Run(context.Background(), g, []*Rewrite{rw(t, "two-plus-two", "(add 2 2)", "5")})
		if rep.Stop != Error || err == nil || rep.Err != err {
			t.Fatalf("stop = %v, err = %v", rep.Stop, err)
		}
	})
}

func TestBackoffBansExplosiveRules(t *testing.T) {
	g := New(nil)
	addTerm(t, g, sumOf(6))
	r := Runner{IterLimit: 40, NodeLimit: 100_000, Scheduler: &Backoff{MatchLimit: 8, BanLength: 2}}
	rep, err := r.Run(context.Background(), g, mathRules(t)[:4])
	if err != nil {
		t.Fatal(err)
	}
	banned := 0
	firstBan := map[string]int{}
	for i, it := range rep.Iterations {
		for _, s := range it.Rules {
			if s.Banned {
				banned++
				if _, ok := firstBan[s.Name]; !ok {
					firstBan[s.Name] = i
				}
			}
		}
	}
	if banned == 0 {
		t.Fatalf("no rule was banned with a match limit of 8:\n%s", rep)
	}
	// A banned rule sits out BanLength iterations, then is searched again with a doubled limit.
	it := firstBan["add-comm"]
	if it+2 < len(rep.Iterations) && !rep.Iterations[it+1].Rules[0].Banned {
		t.Errorf("add-comm banned in iteration %d but searched in %d", it, it+1)
	}
	if rep.Stop != Saturated {
		t.Errorf("stop = %v; back-off must still reach saturation on 6 terms\n%s", rep.Stop, rep)
	}
	// Without back-off the same run saturates too, to the same graph size.
	g2 := New(nil)
	addTerm(t, g2, sumOf(6))
	rep2, err := (&Runner{IterLimit: 40, NodeLimit: 100_000}).Run(context.Background(), g2, mathRules(t)[:4])
	if err != nil || rep2.Stop != Saturated {
		t.Fatalf("%v %v", rep2.Stop, err)
	}
	if g.NumClasses() != g2.NumClasses() {
		t.Errorf("classes with back-off %d, without %d", g.NumClasses(), g2.NumClasses())
	}
}

func TestGuardsFilterMatches(t *testing.T) {
	g := New(constFold{})
	a := addTerm(t, g, "(mul x 2)")
	b := addTerm(t, g, "(mul x 3)")
	onlyTwo := func(g *EGraph, m Match) bool {
		c, _ := m.Subst.Class("?c")
		k, ok := g.Data(c).(konst)
		return ok && k.v == 2
	}
	r := rw(t, "double", "(mul ?x ?c)", "(add ?x ?x)", onlyTwo)
	if _, err := NewRunner().Run(context.Background(), g, []*Rewrite{r}); err != nil {
		t.Fatal(err)
	}
	if g.Find(a) != g.Find(addTerm(t, g, "(add x x)")) {
		t.Error("guarded rule not applied to (mul x 2)")
	}
	rebuild(t, g)
	if len(g.Nodes(b)) != 1 {
		t.Error("guarded rule applied to (mul x 3)")
	}
}

// TestMath is the arithmetic suite: equalities egg's math tests prove.
func TestMath(t *testing.T) {
	cases := []struct{ a, b string }{
		{"(add x (add y z))", "(add z (add y x))"},
		{"(mul (add x 0) 1)", "x"},
		{"(add 1 (add 2 x))", "(add x 3)"}, // associativity and constant folding together
		{"(mul x (add y 1))", "(add (mul x y) x)"},
		{"(mul (mul 2 x) 0)", "0"},
		{"(sub (add a b) (add b a))", "0"},
	}
	for _, c := range cases {
		g := New(constFold{})
		a := addTerm(t, g, c.a)
		b := addTerm(t, g, c.b)
		r := Runner{IterLimit: 12, NodeLimit: 20_000, TimeLimit: 5 * time.Second, Scheduler: &DefaultBackoff}
		rep, err := r.Run(context.Background(), g, mathRules(t))
		if err != nil {
			t.Fatalf("%s: %v", c.a, err)
		}
		if g.Find(a) != g.Find(b) {
			t.Errorf("%s ≠ %s after %s", c.a, c.b, rep.Stop)
		}
	}
	// Associativity and commutativity over n terms make (2^n - 2)... classes; with limits the
	// run stops cleanly with a reason.
	g := New(nil)
	addTerm(t, g, sumOf(12))
	rep, err := (&Runner{IterLimit: 50, NodeLimit: 5_000, Scheduler: &DefaultBackoff}).Run(context.Background(), g, mathRules(t)[:4])
	if err != nil || rep.Stop != NodeLimit {
		t.Errorf("12-term AC: stop %v err %v, want node limit", rep.Stop, err)
	}
}
