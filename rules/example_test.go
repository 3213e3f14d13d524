package rules_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/rules"
)

// Example shows the whole flow: an op table, a rule file, compiling, saturating, and extracting
// the two best distinct candidates.
func Example() {
	const (
		opVar egraph.Op = iota + 1
		opAdd
		opRMSNorm
		opAddRMSNorm
		opOut0
		opOut1
	)
	names := []string{"", "var", "add", "rmsnorm", "add_rmsnorm", "out0", "out1"}
	env := rules.Env{Ops: map[string]rules.OpInfo{
		"var":         {Op: opVar, Arity: 0, Attrs: []string{"name"}},
		"add":         {Op: opAdd, Arity: 2},
		"rmsnorm":     {Op: opRMSNorm, Arity: 2, Attrs: []string{"eps"}},
		"add_rmsnorm": {Op: opAddRMSNorm, Arity: 3, Attrs: []string{"eps"}},
		"out0":        {Op: opOut0, Arity: 1},
		"out1":        {Op: opOut1, Arity: 1},
	}}
	src := `
# fusion: the residual sum and its norm from one kernel
add-rmsnorm: ?s = (add ?a ?b) & (rmsnorm[eps=?e] ?s ?w)
    => (out0 (add_rmsnorm[eps=?e] ?a ?b ?w)) & (out1 (add_rmsnorm[eps=?e] ?a ?b ?w))
`
	f, err := rules.Parse("fusion.rules", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	rws, err := rules.Compile(env, f)
	if err != nil {
		fmt.Println(err)
		return
	}

	g := egraph.New(nil)
	g.OpName = func(op egraph.Op) string { return names[op] }
	add := func(op egraph.Op, attrs []string, children ...egraph.Id) egraph.Id {
		id, _ := g.Add(egraph.Node{Op: op, Attr: g.InternAttrs(attrs...), Children: children})
		return id
	}
	x, y, w := add(opVar, []string{"x"}), add(opVar, []string{"y"}), add(opVar, []string{"w"})
	sum := add(opAdd, nil, x, y)
	norm := add(opRMSNorm, []string{"1e-05"}, sum, w)

	rep, err := egraph.NewRunner().Run(context.Background(), g, rws)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stop:", rep.Stop)

	// Static costs: the fused kernel is cheaper than add + rmsnorm; projections are free.
	cost := func(g *egraph.EGraph, _ egraph.Id, n egraph.Node) float64 {
		return map[string]float64{"var": 0, "add": 2, "rmsnorm": 3, "add_rmsnorm": 4, "out0": 0, "out1": 0}[names[n.Op]]
	}
	cands, err := egraph.ExtractDiverse(g, []egraph.Id{sum, norm}, cost, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range cands {
		var ops []string
		for _, n := range c.Nodes {
			if n.Op != opVar {
				ops = append(ops, names[n.Op])
			}
		}
		fmt.Printf("cost %g: %s\n", c.Cost, strings.Join(ops, " "))
	}
	// Output:
	// stop: saturated
	// cost 4: add_rmsnorm out0 out1
	// cost 5: add rmsnorm
}
