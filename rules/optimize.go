package rules

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// The rule files, grouped by purpose: algebra.rules (identities, transposes, reshapes, scalar
// folding, x·Wᵀ forms), recognise.rules (the compositions ir.Decompose writes, back to composite
// ops), fusion.rules (ops that one kernel does in one pass), layout.rules (attention layouts,
// linears that share an input) and moe.rules (mixtures of experts: routing recognised, the
// weighted sum done by the down projection).
//
//go:embed *.rules
var ruleFiles embed.FS

// parsedRules parses the embedded rule files once; errors name file and line.
var parsedRules = sync.OnceValues(func() ([]*File, error) {
	names, err := fs.Glob(ruleFiles, "*.rules")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var files []*File
	var errs ErrorList
	for _, n := range names {
		src, err := ruleFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		f, err := Parse(n, src)
		if err != nil {
			errs = append(errs, err.(ErrorList)...)
			continue
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return files, nil
})

var opTable = sync.OnceValue(OpTable)

// RuleFiles returns the embedded rule files, parsed.
//
// Example:
//
//	files, err := rules.RuleFiles()
//	for _, f := range files { fmt.Println(f.Name, len(f.Rules)) }
func RuleFiles() ([]*File, error) { return parsedRules() }

// Options sets the limits of saturation and the cost model of extraction. The zero value is
// usable.
type Options struct {
	// IterLimit, NodeLimit and TimeLimit bound saturation (0: 30 iterations, 500 000 e-nodes,
	// 60 s). Hitting one is not an error: the graph so far is extracted.
	IterLimit int
	NodeLimit int
	TimeLimit time.Duration
	// Cost prices each operation for extraction; nil uses DefaultCost (a static estimate).
	// Measured kernel times plug in here.
	Cost Cost
	// Disable leaves out the named rules (a bidirectional rule's reverse is name-rev).
	Disable []string
}

func (o Options) runner() *egraph.Runner {
	r := &egraph.Runner{IterLimit: 30, NodeLimit: 500_000, TimeLimit: 60 * time.Second}
	if o.IterLimit > 0 {
		r.IterLimit = o.IterLimit
	}
	if o.NodeLimit > 0 {
		r.NodeLimit = o.NodeLimit
	}
	if o.TimeLimit > 0 {
		r.TimeLimit = o.TimeLimit
	}
	b := egraph.DefaultBackoff
	r.Scheduler = &b
	return r
}

// Report describes one optimisation: why saturation stopped, the e-graph's size, what each rule
// did, the phase times and what the extracted graph contains.
type Report struct {
	Function   string
	Stop       egraph.StopReason
	Iterations int
	// Nodes and Classes are the e-graph's size when saturation stopped; InputNodes and
	// OutputNodes count the ir nodes of the function given and of the one extracted.
	Nodes, Classes          int
	InputNodes, OutputNodes int
	// Rules holds each rule's matches and applications summed over the iterations, in rule order.
	Rules []egraph.RuleStat
	// Skipped counts, per rule, matches left alone because the right side would be ill-typed
	// there (a rule written for rank-2 weights meeting a rank-3 tensor).
	Skipped map[string]int
	// Fused counts the extracted nodes per rule that introduced them.
	Fused                               map[string]int
	Convert, Saturate, Extract, Rebuild time.Duration
	// Cost is the extracted graph's cost under the options' cost model (of the first candidate).
	Cost float64
	// Candidates describe the functions returned, in order (one for Optimize, up to k for
	// OptimizeK): each one's cost and its nodes per rule that introduced them.
	Candidates []CandidateInfo
	// Saturation is the runner's full report (per-iteration times and rule counts).
	Saturation *egraph.Report
}

// CandidateInfo describes one extracted function.
type CandidateInfo struct {
	Cost  float64        // under the options' cost model
	Fused map[string]int // nodes per rule that introduced them
}

// Summary names the fusions of a candidate, largest count first ("rmsnorm-linear×60,
// merge-qkv×30"); "no fusions" when there are none.
func (c CandidateInfo) Summary() string {
	if len(c.Fused) == 0 {
		return "no fusions"
	}
	names := make([]string, 0, len(c.Fused))
	for n := range c.Fused {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(c.Fused[b], c.Fused[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s×%d", n, c.Fused[n])
	}
	return strings.Join(parts, ", ")
}

// String summarises the report in a few lines.
//
// Example:
//
//	fmt.Print(rep)
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s after %d iterations; e-graph %d nodes, %d classes; %d → %d ir nodes; cost %.4g\n",
		r.Function, r.Stop, r.Iterations, r.Nodes, r.Classes, r.InputNodes, r.OutputNodes, r.Cost)
	fmt.Fprintf(&b, "  times: convert %v, saturate %v, extract %v, rebuild %v\n", r.Convert.Round(time.Microsecond),
		r.Saturate.Round(time.Microsecond), r.Extract.Round(time.Microsecond), r.Rebuild.Round(time.Microsecond))
	var parts []string
	for _, s := range r.Rules {
		if s.Matches > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d/%d", s.Name, s.Applied, s.Matches))
		}
	}
	fmt.Fprintf(&b, "  rules (applied/matched): %s\n", strings.Join(parts, " "))
	if len(r.Fused) > 0 {
		names := make([]string, 0, len(r.Fused))
		for n := range r.Fused {
			names = append(names, n)
		}
		sort.Strings(names)
		parts = parts[:0]
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s=%d", n, r.Fused[n]))
		}
		fmt.Fprintf(&b, "  extracted nodes by rule: %s\n", strings.Join(parts, " "))
	}
	return b.String()
}

// Optimize rewrites f with the rule files by equality saturation (within opts' limits) and
// extracts the cheapest equivalent function under opts.Cost. The result has f's name, inputs,
// outputs and state updates; nodes that rules introduced record the rule in ir.Node.Rule. m
// supplies the parameter and state declarations the result is validated against (nil skips
// validation). Hitting a limit is reported, not an error; a rule that equates tensors of
// different types, an ill-typed f or a cancelled ctx is.
//
// Example:
//
//	g, rep, err := rules.Optimize(ctx, m, m.Function("decode"), rules.Options{})
//	if err != nil { return err }
//	fmt.Print(rep)
func Optimize(ctx context.Context, m *ir.Model, f *ir.Function, opts Options) (*ir.Function, *Report, error) {
	fns, rep, err := optimize(ctx, m, f, opts, 1, 1)
	if err != nil {
		return nil, rep, err
	}
	return fns[0], rep, nil
}

// OptimizeK is Optimize returning up to k diverse candidates, cheapest first (see
// egraph.ExtractDiverse: each further candidate differs from the best in a different place), for
// measurement on the device. The report's Cost and Fused describe the first.
//
// Example:
//
//	cands, rep, err := rules.OptimizeK(ctx, m, f, rules.Options{}, 4)
func OptimizeK(ctx context.Context, m *ir.Model, f *ir.Function, opts Options, k int) ([]*ir.Function, *Report, error) {
	return optimize(ctx, m, f, opts, k, k)
}

// optimize saturates, extracts width diverse selections (and one with merged linears favoured),
// and returns the k cheapest distinct functions.
func optimize(ctx context.Context, m *ir.Model, f *ir.Function, opts Options, k, width int) ([]*ir.Function, *Report, error) {
	sat, rep, err := Saturate(ctx, m, f, opts)
	if err != nil {
		return nil, rep, err
	}
	return sat.extract(opts.Cost, k, width)
}

// Saturated is a function's e-graph after saturation, from which Extract extracts under any
// cost: a compile that extracts twice (under the static model, then under measured times)
// saturates once. It is not safe for concurrent use.
type Saturated struct {
	m    *ir.Model
	f    *ir.Function
	a    *adapter
	vals map[ir.Value]egraph.Id
	rep  Report // the saturation's part of every extraction's report
}

// Saturate converts f to an e-graph and saturates it with the rules (opts' limits and Disable;
// opts.Cost is not used). The report describes the saturation.
func Saturate(ctx context.Context, m *ir.Model, f *ir.Function, opts Options) (*Saturated, *Report, error) {
	rep := &Report{Function: f.Name, InputNodes: len(f.Nodes)}
	t0 := time.Now()
	a := newAdapter()
	rws, err := a.rewrites(opts.Disable)
	if err != nil {
		return nil, rep, err
	}
	vals, err := a.addFunction(f)
	if err != nil {
		return nil, rep, fmt.Errorf("optimize %s: %w", f.Name, err)
	}
	rep.Convert = time.Since(t0)

	t1 := time.Now()
	srep, err := opts.runner().Run(ctx, a.g, rws)
	rep.Saturate = time.Since(t1)
	rep.Saturation = srep
	if srep != nil {
		rep.Stop, rep.Iterations, rep.Nodes, rep.Classes = srep.Stop, len(srep.Iterations), srep.Nodes, srep.Classes
		rep.Rules = srep.RuleMatches()
		for _, it := range srep.Iterations {
			rep.Rebuild += it.Rebuild
		}
	}
	rep.Skipped = a.skipped
	if err != nil {
		return nil, rep, fmt.Errorf("optimize %s: %w", f.Name, err)
	}
	return &Saturated{m: m, f: f, a: a, vals: vals, rep: *rep}, rep, nil
}

// Extract returns up to k diverse candidates extracted under cost (nil: DefaultCost), cheapest
// first, as OptimizeK does; k = 1 is Optimize's extraction. The report repeats the saturation's.
func (s *Saturated) Extract(cost Cost, k int) ([]*ir.Function, *Report, error) {
	return s.extract(cost, k, k)
}

func (s *Saturated) extract(cost Cost, k, width int) ([]*ir.Function, *Report, error) {
	a, f, m, vals := s.a, s.f, s.m, s.vals
	rep := s.rep
	rep.Candidates, rep.Fused = nil, nil
	t2 := time.Now()
	if cost == nil {
		cost = DefaultCost
	}
	cf := a.costFunc(cost)
	cands, err := extractCandidates(a.g, roots(f, vals), cf, width)
	if err != nil {
		return nil, &rep, fmt.Errorf("optimize %s: extract: %w", f.Name, err)
	}
	type built struct {
		f    *ir.Function
		cost float64
		key  string
	}
	var all []built
	seen := map[string]bool{}
	for _, x := range cands {
		g, c, err := a.buildFunction(f, vals, []*egraph.Extraction{x}, cf)
		if err != nil {
			return nil, &rep, fmt.Errorf("optimize %s: %w", f.Name, err)
		}
		key := FunctionKey(g)
		if seen[key] {
			continue
		}
		seen[key] = true
		if m != nil {
			chk := &ir.Model{Name: m.Name, Params: m.Params, State: m.State, Functions: []*ir.Function{g}}
			if err := chk.Validate(); err != nil {
				return nil, &rep, fmt.Errorf("optimize %s: the extracted graph is invalid: %w", f.Name, err)
			}
		}
		all = append(all, built{g, c, key})
	}
	// The first is egraph.Extract's selection; alternatives that come out cheaper overall move
	// ahead of it (stable, so equal costs keep their order).
	slices.SortStableFunc(all, func(x, y built) int { return cmp.Compare(x.cost, y.cost) })
	var out []*ir.Function
	for _, b := range all[:min(len(all), max(k, 1))] {
		out = append(out, b.f)
		ci := CandidateInfo{Cost: b.cost, Fused: map[string]int{}}
		for _, n := range b.f.Nodes {
			if n.Rule != "" {
				ci.Fused[n.Rule]++
			}
		}
		rep.Candidates = append(rep.Candidates, ci)
	}
	rep.Cost = all[0].cost
	rep.Extract = time.Since(t2)
	rep.OutputNodes = len(out[0].Nodes)
	rep.Fused = map[string]int{}
	for _, n := range out[0].Nodes {
		if n.Rule != "" {
			rep.Fused[n.Rule]++
		}
	}
	return out, &rep, nil
}

// FunctionKey identifies a function's graph (ops, attributes, arguments, names, results), to
// drop candidates that build the same graph.
func FunctionKey(f *ir.Function) string {
	var b strings.Builder
	for _, n := range f.Nodes {
		b.WriteString(n.String())
		b.WriteByte('\n')
	}
	for _, o := range f.Outputs {
		b.WriteString(o.Name + "=" + o.Value.Node.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// rewrites compiles the rule files against this adapter (guards and Go appliers read its
// analysis) and wraps each pattern right side with a type check.
func (a *adapter) rewrites(disable []string) ([]*egraph.Rewrite, error) {
	files, err := parsedRules()
	if err != nil {
		return nil, err
	}
	env := Env{Ops: opTable(), Guards: a.guards(), Appliers: a.appliers(), Canon: canonLiteral}
	rws, err := Compile(env, files...)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Rule{}
	for _, f := range files {
		for _, r := range f.Rules {
			byName[r.Name] = r
		}
	}
	var out []*egraph.Rewrite
	for _, rw := range rws {
		if slices.Contains(disable, rw.Name) {
			continue
		}
		rhs := rhsOf(byName, rw.Name)
		if rhs != nil {
			rw.Applier = checkedApplier{a: a, inner: rw.Applier, rhs: rhs}
		}
		out = append(out, rw)
	}
	return out, nil
}

// rhsOf returns the right-hand terms a rewrite builds (the left side, for a reverse rule), or
// nil for a Go applier.
func rhsOf(byName map[string]*Rule, name string) []*Term {
	if r, ok := byName[name]; ok {
		return r.RHS
	}
	if base, ok := strings.CutSuffix(name, "-rev"); ok {
		if r, ok := byName[base]; ok && r.Bidirectional {
			return r.LHS
		}
	}
	return nil
}

// checkedApplier applies a pattern right side only where it type-checks. Rules are written for
// the shapes they mean ("a linear's weight is [out, in]"); rather than guard every such
// condition by hand, a match whose right side ir inference rejects is skipped and counted.
// A right side that type-checks but has a different type from the left still fails the run:
// that is a wrong rule.
type checkedApplier struct {
	a     *adapter
	inner egraph.Applier
	rhs   []*Term
}

func (c checkedApplier) Apply(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	for _, t := range c.rhs {
		if _, ok := c.a.termTypes(t, m.Subst); !ok {
			if c.a.skipped == nil {
				c.a.skipped = map[string]int{}
			}
			c.a.skipped[rule]++
			return false, nil
		}
	}
	return c.inner.Apply(g, m, rule)
}

// termTypes infers the types a right-hand term would have under the substitution.
func (a *adapter) termTypes(t *Term, s egraph.Subst) ([]ir.Type, bool) {
	if t.Var != "" {
		id, ok := s.Class(egraph.Var(t.Var))
		if !ok {
			return nil, false
		}
		return info(a.g, id).Types, true
	}
	args := make([]ir.Type, len(t.Args))
	for i, x := range t.Args {
		ts, ok := a.termTypes(x, s)
		if !ok {
			return nil, false
		}
		if t.Op == "out0" || t.Op == "out1" {
			k := int(t.Op[3] - '0')
			if len(ts) < 2 {
				return nil, false
			}
			return ts[k : k+1], true
		}
		if len(ts) != 1 {
			return nil, false
		}
		args[i] = ts[0]
	}
	op, ok := ir.LookupOp(t.Op)
	if !ok || op.Info().Kind == ir.KindSource {
		// Sources in a right side are constants a rule writes; their type is in the attributes.
		return a.sourceTermType(t, s)
	}
	at := ir.Attrs{}
	for _, av := range t.Attrs {
		val := av.Value
		if av.IsVar() {
			v, ok := s.Attr(egraph.Var(av.Value))
			if !ok {
				return nil, false
			}
			val = v
		}
		for _, spec := range op.Info().Attrs {
			if spec.Name == av.Name {
				if val == "" && spec.Kind != ir.AttrString {
					break
				}
				x, err := parseAttr(spec.Kind, val)
				if err != nil {
					return nil, false
				}
				at[spec.Name] = x
			}
		}
	}
	_, outs, err := ir.Infer(op, at, args)
	if err != nil {
		return nil, false
	}
	return outs, true
}

func (a *adapter) sourceTermType(t *Term, s egraph.Subst) ([]ir.Type, bool) {
	for _, av := range t.Attrs {
		if av.Name != "type" {
			continue
		}
		val := av.Value
		if av.IsVar() {
			v, ok := s.Attr(egraph.Var(av.Value))
			if !ok {
				return nil, false
			}
			val = v
		}
		typ, err := parseType(val)
		if err != nil {
			return nil, false
		}
		return []ir.Type{typ}, true
	}
	return nil, false
}

// Cost prices one operation of a candidate graph for extraction: a static estimate (DefaultCost)
// or a measured kernel time. +Inf marks an operation that has no kernel. Sources, the out0/out1
// projections and operations on parameters and constants only (the lowering stage computes them
// at compile time) are not priced.
type Cost interface {
	Cost(n CostNode) float64
}

// CostNode is one operation as Cost sees it.
type CostNode struct {
	Op    ir.Op
	Attrs ir.Attrs
	Args  []ir.Type
	Outs  []ir.Type
	// Rule is the rule that introduced the operation ("" for one the model wrote).
	Rule string
}

// CostFunc adapts a function to Cost.
//
// Example:
//
//	opts.Cost = rules.CostFunc(func(n rules.CostNode) float64 { return 1 })
type CostFunc func(n CostNode) float64

// Cost calls f.
func (f CostFunc) Cost(n CostNode) float64 { return f(n) }

// StaticCost is a roofline estimate in units of bytes moved: every kernel costs Launch (the
// dispatch, barrier and pipeline switch around it, expressed as the bytes a GPU streams in that
// time), plus the bytes it reads and writes, or its flops divided by FlopsPerByte when that is
// larger. Reshapes are free (views); a slice costs its output once (the consumer reads a
// strided view); cache writes count the rows written, not the cache. Fused ops come out cheaper
// than their parts because the intermediate tensors and launches disappear.
type StaticCost struct {
	Launch       float64
	FlopsPerByte float64
}

// DefaultCost is the static cost used when Options.Cost is nil: a launch worth 1 MiB of traffic
// and 16 flops per byte (fp32 on a current discrete GPU).
var DefaultCost Cost = StaticCost{Launch: 1 << 20, FlopsPerByte: 16}

// Cost estimates n.
func (c StaticCost) Cost(n CostNode) float64 {
	bytes := 0.0
	for _, t := range n.Args {
		bytes += float64(t.Bytes())
	}
	for _, t := range n.Outs {
		bytes += float64(t.Bytes())
	}
	flops, extra := 0.0, 0.0
	switch n.Op {
	case ir.Reshape:
		return 1
	case ir.Slice:
		return float64(n.Outs[0].Bytes())
	case ir.CacheWrite, ir.RopeCacheWrite:
		bytes = 2 * float64(n.Args[1].Bytes())
	case ir.Matmul:
		// The general batched kernel costs a little more than linear's for the same problem,
		// so extraction prefers linear where both are possible (a deterministic tie-break).
		extra = 64
		o := n.Outs[0].Shape
		a := n.Args[0].Shape
		k := a[a.Rank()-1]
		if n.Attrs.Bool("ta", false) {
			k = a[a.Rank()-2]
		}
		flops = 2 * float64(o.NumElements()) * float64(k)
	case ir.Linear, ir.RMSNormLinear:
		w := n.Args[len(n.Args)-1]
		if n.Op == ir.Linear {
			w = n.Args[1]
		}
		flops = 2 * float64(n.Outs[0].Shape.NumElements()) * float64(w.Shape[1])
	case ir.Attention:
		skv, _, _ := ir.LayoutDims(ir.AttentionLayouts(n.Attrs).K, n.Args[1].Shape)
		flops = 4 * float64(n.Args[0].Shape.NumElements()) * float64(skv)
	case ir.MoeLinear, ir.MoeLinearSum, ir.MoeGLU:
		// Only the chosen experts' matrices are read: k per row, at most all of them.
		ws, ids := n.Args[1:2], n.Args[2].Shape
		if n.Op == ir.MoeGLU {
			ws, ids = n.Args[1:3], n.Args[3].Shape
		}
		slots := ids.NumElements()
		for _, w := range ws {
			bytes -= float64(w.Bytes()) * (1 - math.Min(1, float64(slots)/float64(w.Shape[0])))
			flops += 2 * float64(slots) * float64(w.Shape[1]) * float64(w.Shape[2])
		}
	case ir.Conv2d:
		w := n.Args[1].Shape // [cout, cin/groups, kh, kw]
		flops = 2 * float64(n.Outs[0].Shape.NumElements()) * float64(w[1]*w[2]*w[3])
	}
	return c.Launch + math.Max(bytes, flops/c.FlopsPerByte) + extra
}

// costFunc prices e-nodes with cost: free for sources, projections and compile-time (static)
// computations, cost.Cost for the rest.
func (a *adapter) costFunc(cost Cost) egraph.CostFunc {
	cache := map[string]float64{}
	var key []byte
	return func(g *egraph.EGraph, class egraph.Id, n egraph.Node) float64 {
		key = strconv.AppendUint(key[:0], uint64(n.Op), 10)
		key = append(key, ':')
		key = strconv.AppendUint(key, uint64(n.Attr), 10)
		for _, c := range n.Children {
			key = append(key, ',')
			key = strconv.AppendUint(key, uint64(g.Find(c)), 10)
		}
		key = append(key, '|')
		key = append(key, n.Origin()...)
		if v, ok := cache[string(key)]; ok {
			return v
		}
		v := a.nodeCost(cost, g, class, n)
		cache[string(key)] = v
		return v
	}
}

// nodeCost prices one e-node (see costFunc).
func (a *adapter) nodeCost(cost Cost, g *egraph.EGraph, class egraph.Id, n egraph.Node) float64 {
	{
		if n.Op == projOut0 || n.Op == projOut1 {
			return 0
		}
		op := ir.Op(n.Op)
		if op.Info().Kind == ir.KindSource {
			return 0
		}
		cn := CostNode{Op: op, Rule: n.Origin()}
		static := true
		for _, c := range n.Children {
			ci := info(g, c)
			cn.Args = append(cn.Args, ci.Types...)
			static = static && ci.Static
		}
		if static {
			return 1e-3
		}
		cn.Outs = info(g, class).Types
		at, err := a.decodeAttrs(op, n.Attr)
		if err != nil {
			return math.Inf(1)
		}
		cn.Attrs = at
		v := cost.Cost(cn)
		if v < 0 || math.IsNaN(v) {
			v = math.Inf(1)
		}
		return v
	}
}
