// Package egraph is a generic e-graph engine for equality saturation, after egg (Willsey et al.,
// POPL 2021): hash-consed e-nodes, a union-find, deferred rebuilding (congruence closure once per
// iteration, worklist driven), an e-class analysis hook, e-matching of patterns and multi-patterns,
// rewrites with guards, a runner with limits and a back-off scheduler, DAG-aware extraction of one or
// k diverse candidates, and DOT export.
//
// The package knows nothing about tensors. A client (package rules) supplies:
//   - operator ids (Op, small integers it interns) and, for display, a name function;
//   - attributes as tuples of canonical strings, interned by the e-graph into an Attr handle
//     (two nodes with equal op, attribute tuple and children are the same node);
//   - an Analysis (make / merge / modify) whose per-class data is an interface value;
//   - node costs for extraction.
//
// Typical use:
//
//	g := egraph.New(nil)
//	x, _ := g.Add(egraph.Node{Op: opVar, Attr: g.InternAttrs("x")})
//	y, _ := g.Add(egraph.Node{Op: opMul, Children: []egraph.Id{x, one}})
//	rep, err := egraph.NewRunner().Run(ctx, g, rewrites)
//	best, err := egraph.Extract(g, []egraph.Id{y}, cost)
package egraph
