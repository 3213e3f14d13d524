// Package interp is vkc's CPU reference interpreter: the oracle of every test in the project
// (kernels, rewrite rules, compiled plans).
//
// It is deliberately plain: straightforward loops, float64 arithmetic and accumulation, no code
// shared with the GPU path. Every node's result is rounded to the node's dtype (f32, f16, bf16,
// i32, u32, bool) as it is produced, so an f16 graph is modelled faithfully: a value that crosses
// a node boundary carries the rounding error of its dtype, and nothing more precise leaks
// through. Inside one node everything is computed in float64 (integer ops in 64-bit integers,
// wrapped to 32 bits at the end), so a fused op such as attention is more accurate than its
// composition; tests comparing the two need a tolerance of the order of the dtype's epsilon.
//
// Run-time scalars that are out of range (a cache_write past the end of the cache, a kv_len
// larger than the keys, an embedding id outside the table, an integer division by zero) are
// errors naming the node, never panics.
package interp

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
)

// Env holds every source of a function: inputs by input name, parameters and state by their
// model names.
type Env struct {
	Inputs, Params, State map[string]*ir.Tensor
	// Cache, when set, keeps the parameters' float64 values across evaluations (see
	// ParamCache).
	Cache *ParamCache
}

// ParamCache keeps parameters in the float64 form the interpreter computes in, for evaluations
// of one model's functions one after another: a compile checks several functions of a model
// against the interpreter, and converting every weight for each made gigabytes of garbage
// (SmolLM2: 1 GB per evaluation). Evaluations never write their arguments, so the values are
// shared. It is safe for concurrent use; it holds the model's weights in float64 (8 bytes per
// parameter) until it is dropped, but for block-quantized weights that only products and
// embeddings read (ReadsRaw): those it holds as their blocks.
type ParamCache struct {
	mu sync.Mutex
	m  map[*ir.Tensor]*val
}

// NewParamCache returns an empty cache.
func NewParamCache() *ParamCache { return &ParamCache{m: map[*ir.Tensor]*val{}} }

func (c *ParamCache) get(t *ir.Tensor) *val {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[t]
	if !ok {
		v = fromTensor(t)
		c.m[t] = v
	}
	return v
}

// Eval evaluates every node of f in order and returns the outputs of each node (one tensor per
// output: one for every op of the base set, two for add_rmsnorm). Each source must be present in env with exactly the
// node's type; a missing or mistyped source is an error naming it. The run-time length node of a
// bounded function (ir.Length) takes the capacity Max unless env.Inputs holds a value under its
// name: Eval evaluates the graph as it is, so a run at another length is Run's (or f.At(n)'s). Eval does not look at f's
// Outputs or Updates, so it also serves functions under construction (rule checks, kernel tests
// that build a Function with ir.Builder and evaluate one node of it).
//
// Example:
//
//	b := ir.NewBuilder("t")
//	x, _ := b.Input("x", ir.T(ir.F32, 2, 3))
//	y := b.MustOp(ir.Softmax, nil, x)
//	vals, err := interp.Eval(b.Function(), interp.Env{Inputs: map[string]*ir.Tensor{"x": xt}})
//	// vals[y.Node][0] is the softmax of xt
func Eval(f *ir.Function, env Env) (map[*ir.Node][]*ir.Tensor, error) {
	return EvalContext(context.Background(), f, env)
}

// EvalContext is Eval stopping with ctx's error, between nodes, once ctx is done (a compile's
// constant folding runs big subgraphs).
func EvalContext(ctx context.Context, f *ir.Function, env Env) (map[*ir.Node][]*ir.Tensor, error) {
	vals, err := eval(ctx, f, env, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[*ir.Node][]*ir.Tensor, len(vals))
	for n, vs := range vals {
		ts := make([]*ir.Tensor, len(vs))
		for i, v := range vs {
			ts[i] = v.tensor()
		}
		out[n] = ts
	}
	return out, nil
}

// EvalValues evaluates f and returns the tensors of the given values, in order.
func EvalValues(f *ir.Function, env Env, vs ...ir.Value) ([]*ir.Tensor, error) {
	keep := map[*ir.Node]bool{}
	for _, v := range vs {
		keep[v.Node] = true
	}
	vals, err := eval(context.Background(), f, env, keep)
	if err != nil {
		return nil, err
	}
	out := make([]*ir.Tensor, len(vs))
	for i, v := range vs {
		x, ok := vals[v.Node]
		if !ok || v.Out < 0 || v.Out >= len(x) {
			return nil, fmt.Errorf("interp: function %s: value %%%d.%d is not in the function", f.Name, v.Node.ID, v.Out)
		}
		out[i] = x[v.Out].tensor()
	}
	return out, nil
}

// eval evaluates f's nodes in order. With keep nil it returns every node's values; otherwise only
// those of the nodes in keep survive: a value is dropped after its last use, so that evaluating
// a model holds its float64 weights one layer at a time, not all at once (a SmolLM2 prefill held
// 1 GB per evaluation, and a compile runs several).
func eval(cx context.Context, f *ir.Function, env Env, keep map[*ir.Node]bool) (map[*ir.Node][]*val, error) {
	vals := make(map[*ir.Node][]*val, len(f.Nodes))
	c := &ctx{env: env, fn: f}
	order := f.Nodes
	var last map[*ir.Node]int
	if keep != nil {
		order = sourcesLate(f.Nodes)
		last = make(map[*ir.Node]int, len(order))
		for i, n := range order {
			for _, a := range n.Args {
				last[a.Node] = i
			}
		}
	}
	for i, node := range order {
		if err := cx.Err(); err != nil {
			return nil, fmt.Errorf("interp: function %s: %w", f.Name, err)
		}
		n := node
		args := make([]*val, len(n.Args))
		for i, a := range n.Args {
			v, ok := vals[a.Node]
			if !ok || a.Out < 0 || a.Out >= len(v) {
				return nil, fmt.Errorf("interp: function %s: node %s: argument %d (%%%d.%d) is not evaluated before use", f.Name, n, i, a.Node.ID, a.Out)
			}
			args[i] = v[a.Out]
		}
		if n.Op.Info().Kind != ir.KindSource {
			// Implementations rely on inference's guarantees (ranks, dtypes, normalised
			// attributes); a hand-made or mis-rewritten node is an error here, not a panic there.
			types := make([]ir.Type, len(args))
			for i, v := range args {
				types[i] = v.t
			}
			attrs, want, err := ir.Infer(n.Op, n.Attrs, types)
			if err != nil {
				return nil, fmt.Errorf("interp: function %s: %s%s: %w", f.Name, posPrefix(n), n, err)
			}
			if !typesEqual(want, n.Outs) {
				return nil, fmt.Errorf("interp: function %s: node %s: inference gives %v", f.Name, n, want)
			}
			if len(attrs) != len(n.Attrs) {
				// Defaults filled in by inference; evaluate a copy with them.
				nn := *n
				nn.Attrs = attrs
				n = &nn
			}
		}
		// Values are float64 per element: refuse a result the host memory limit cannot hold
		// before the implementation allocates it.
		var need uint64
		for _, t := range n.Outs {
			if e, ok := t.Shape.CheckedElements(); ok {
				need += 8 * uint64(e)
			} else {
				need = math.MaxUint64
				break
			}
		}
		if err := hostmem.Check(fmt.Sprintf("interp: function %s: %s%s", f.Name, posPrefix(n), n), need); err != nil {
			return nil, err
		}
		for i, v := range args {
			if v.lazy() && !ReadsRaw(n, i) {
				v.materialize()
			}
		}
		var outs []*val
		var err error
		if impl, ok := impls[n.Op]; ok && len(n.Outs) == 1 {
			var v *val
			v, err = impl(c, n, args)
			outs = []*val{v}
		} else if impl, ok := multiImpls[n.Op]; ok {
			outs, err = impl(c, n, args)
		} else {
			return nil, fmt.Errorf("interp: function %s: node %s: op %s has no reference implementation with %d outputs", f.Name, n, n.Op, len(n.Outs))
		}
		if err != nil {
			return nil, fmt.Errorf("interp: function %s: %s%s: %w", f.Name, posPrefix(n), n, err)
		}
		if len(outs) != len(n.Outs) {
			return nil, fmt.Errorf("interp: function %s: node %s: evaluated to %d outputs, want %d", f.Name, n, len(outs), len(n.Outs))
		}
		for i, v := range outs {
			if !v.t.Equal(n.Outs[i]) {
				// A bug in an implementation or a node whose type disagrees with inference.
				return nil, fmt.Errorf("interp: function %s: node %s: output %d evaluated to %s, want %s", f.Name, n, i, v.t, n.Outs[i])
			}
		}
		vals[node] = outs
		if keep != nil {
			for _, a := range node.Args {
				if last[a.Node] == i && !keep[a.Node] {
					delete(vals, a.Node)
				}
			}
			if _, used := last[node]; !used && !keep[node] {
				delete(vals, node)
			}
		}
	}
	return vals, nil
}

// ReadsRaw reports whether n's implementation reads its block-quantized argument i from the
// blocks, converting a row at a time as it goes: the weight of a product and the table of an
// embedding, and the parts of a quantized concat. Every other block-quantized argument is
// converted whole to float64 before the implementation runs, and kept so while the value lives
// (a parameter in a ParamCache: until the cache is dropped).
func ReadsRaw(n *ir.Node, i int) bool {
	switch n.Op {
	case ir.Linear:
		return i == 1
	case ir.RMSNormLinear:
		return i == 2
	case ir.Embedding:
		return i == 0
	case ir.Concat:
		return n.Type().DType.Quantized()
	}
	return false
}

// sourcesLate returns nodes with each source node (a parameter, a constant, an input, a state)
// moved to just before its first user, so that a parameter's float64 copy is made when a layer
// needs it, not with all the others at the top of the function. Unused sources stay first.
func sourcesLate(nodes []*ir.Node) []*ir.Node {
	isSource := func(n *ir.Node) bool { return n.Op.Info().Kind == ir.KindSource }
	placed := map[*ir.Node]bool{}
	used := map[*ir.Node]bool{}
	for _, n := range nodes {
		for _, a := range n.Args {
			used[a.Node] = true
		}
	}
	out := make([]*ir.Node, 0, len(nodes))
	for _, n := range nodes {
		if isSource(n) && !used[n] {
			out = append(out, n)
			placed[n] = true
		}
	}
	for _, n := range nodes {
		if isSource(n) {
			continue
		}
		for _, a := range n.Args {
			if isSource(a.Node) && !placed[a.Node] {
				out = append(out, a.Node)
				placed[a.Node] = true
			}
		}
		out = append(out, n)
	}
	for _, n := range nodes {
		if !placed[n] && isSource(n) { // a source used only by a source (none today)
			out = append(out, n)
		}
	}
	return out
}

func typesEqual(a, b []ir.Type) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func typeOf(t *ir.Tensor) string {
	if t == nil {
		return "nil"
	}
	return t.Type.String()
}

func posPrefix(n *ir.Node) string {
	if p := n.Pos.String(); p != "" {
		return p + ": "
	}
	return ""
}

type ctx struct {
	env Env
	fn  *ir.Function
}

// Run evaluates function fn of m once. Parameters come from m.Weights. inputs must hold exactly
// the function's inputs with their declared types. For a function with a run-time length
// (ir.Length) the inputs it bounds may hold n·k rows for any n in its range, and Run evaluates
// the function written at that length (f.At(n)): its bounded outputs have n·k rows. state maps state names to their current
// values; a state tensor absent from the map starts as zeros. newState holds every state tensor of
// the model after the run: the function's update where it has one, else the value it came in with.
// The input maps are not modified.
func Run(m *ir.Model, fn string, inputs map[string]*ir.Tensor, state map[string]*ir.Tensor) (outputs map[string]*ir.Tensor, newState map[string]*ir.Tensor, err error) {
	return RunCached(m, fn, inputs, state, nil)
}

// RunCached is Run with the parameters' float64 values taken from cache (nil: none), for several
// evaluations of one model in turn.
func RunCached(m *ir.Model, fn string, inputs map[string]*ir.Tensor, state map[string]*ir.Tensor, cache *ParamCache) (outputs map[string]*ir.Tensor, newState map[string]*ir.Tensor, err error) {
	return RunCachedContext(context.Background(), m, fn, inputs, state, cache)
}

// RunCachedContext is RunCached that stops between two nodes once ctx is done, returning its
// error.
func RunCachedContext(ctx context.Context, m *ir.Model, fn string, inputs map[string]*ir.Tensor, state map[string]*ir.Tensor, cache *ParamCache) (outputs map[string]*ir.Tensor, newState map[string]*ir.Tensor, err error) {
	f := m.Function(fn)
	if f == nil {
		names := make([]string, len(m.Functions))
		for i, g := range m.Functions {
			names[i] = g.Name
		}
		return nil, nil, fmt.Errorf("interp: model %s has no function %q (it has %s)", m.Name, fn, strings.Join(names, ", "))
	}
	if f.Length != nil {
		n, err := f.LengthOf(func(i int) int {
			t := inputs[f.Inputs[i].Name]
			if t == nil || t.Type.Shape.Rank() == 0 {
				return -1
			}
			return t.Type.Shape[0]
		})
		if err != nil {
			return nil, nil, fmt.Errorf("interp: %w", err)
		}
		if f, err = f.At(n); err != nil {
			return nil, nil, fmt.Errorf("interp: %w", err)
		}
	}
	if err := checkInputs(f, inputs); err != nil {
		return nil, nil, err
	}
	params := map[string]*ir.Tensor{}
	for _, d := range m.Params {
		w, ok := m.Weights[d.Name]
		if !ok {
			return nil, nil, fmt.Errorf("interp: model %s: parameter %q has no weight loaded", m.Name, d.Name)
		}
		if !w.Type.Equal(d.Type) {
			return nil, nil, fmt.Errorf("interp: model %s: parameter %q is declared %s but its weight is %s", m.Name, d.Name, d.Type, w.Type)
		}
		params[d.Name] = w
	}
	st := map[string]*ir.Tensor{}
	for name, t := range state {
		d := m.StateDecl(name)
		if d == nil {
			return nil, nil, fmt.Errorf("interp: model %s has no state %q", m.Name, name)
		}
		if !t.Type.Equal(d.Type) {
			return nil, nil, fmt.Errorf("interp: model %s: state %q is declared %s, got %s", m.Name, name, d.Type, t.Type)
		}
		st[name] = t
	}
	for _, d := range m.State {
		if _, ok := st[d.Name]; !ok {
			st[d.Name] = ir.NewTensor(d.Type)
		}
	}
	keep := map[*ir.Node]bool{}
	for _, o := range f.Outputs {
		keep[o.Value.Node] = true
	}
	for _, u := range f.Updates {
		keep[u.Value.Node] = true
	}
	vals, err := eval(ctx, f, Env{Inputs: inputs, Params: params, State: st, Cache: cache}, keep)
	if err != nil {
		return nil, nil, err
	}
	outputs = map[string]*ir.Tensor{}
	for _, o := range f.Outputs {
		outputs[o.Name] = vals[o.Value.Node][o.Value.Out].tensor()
	}
	newState = map[string]*ir.Tensor{}
	for k, v := range st {
		newState[k] = v
	}
	for _, u := range f.Updates {
		newState[u.Name] = vals[u.Value.Node][u.Value.Out].tensor()
	}
	return outputs, newState, nil
}

func checkInputs(f *ir.Function, inputs map[string]*ir.Tensor) error {
	declared := map[string]*ir.Node{}
	for _, in := range f.Inputs {
		declared[in.Name] = in
		t, ok := inputs[in.Name]
		if !ok || t == nil {
			return fmt.Errorf("interp: function %s: input %q (%s) is missing", f.Name, in.Name, in.Type())
		}
		if !t.Type.Equal(in.Type()) {
			return fmt.Errorf("interp: function %s: input %q is %s, want %s", f.Name, in.Name, t.Type, in.Type())
		}
		if len(t.Data) != t.Type.Bytes() {
			return fmt.Errorf("interp: function %s: input %q has %d bytes of data for %s", f.Name, in.Name, len(t.Data), t.Type)
		}
	}
	var unknown []string
	for name := range inputs {
		if declared[name] == nil {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		var want []string
		for _, in := range f.Inputs {
			want = append(want, in.Name+" "+in.Type().String())
		}
		return fmt.Errorf("interp: function %s has no input %q (given %s; its inputs: %s)", f.Name, unknown[0], typeOf(inputs[unknown[0]]), strings.Join(want, ", "))
	}
	return nil
}

// Session runs a model's functions one after another, carrying the state (KV caches) from each
// run to the next. The state starts as zeros, as declared in m.State.
type Session struct {
	m     *ir.Model
	state map[string]*ir.Tensor
}

// NewSession starts a session with zeroed state.
func NewSession(m *ir.Model) *Session {
	s := &Session{m: m}
	s.Reset()
	return s
}

// Run evaluates function fn and, if it succeeds, keeps the state it leaves. On error the state
// is unchanged.
func (s *Session) Run(fn string, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	out, st, err := Run(s.m, fn, inputs, s.state)
	if err != nil {
		return nil, err
	}
	s.state = st
	return out, nil
}

// State returns the current value of the named state tensor (nil if the model has none such).
// The tensor must not be modified.
func (s *Session) State(name string) *ir.Tensor { return s.state[name] }

// Reset sets every state tensor back to zeros.
func (s *Session) Reset() {
	s.state = map[string]*ir.Tensor{}
	for _, d := range s.m.State {
		s.state[d.Name] = ir.NewTensor(d.Type)
	}
}
