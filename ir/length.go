package ir

import (
	"fmt"
	"sync"
)

// Length is a function dimension whose value n is chosen at run time, between Min and Max
// (model.yaml: `dims: {seq: 1..512}`). The function is built once, at the capacity Max: every
// shape and attribute that mentions the dimension takes Max, and a use of the dimension as a
// value (`kv_len = add(pos, seq)`) reads Node, an i32 scalar that holds n in a run. The
// tensors whose leading axis the dimension sets (Inputs, Outputs and, inside the graph, the
// values LengthRows finds) then hold n·Shape[0]/Max valid rows; the rows past them are
// undefined and never reach a result.
//
// What a run at length n means is the function written with the dimension equal to n: At(n)
// builds that function (static shapes, no Node), and the interpreter evaluates it, so the
// oracle of a run-time-bounded function is the model as written, not the capacity graph.
//
// Limits: one run-time dimension per function; it may set only the leading axis of inputs and
// outputs (as a multiple k·seq); inside the graph it must stay the leading axis (LengthRows
// rejects a transpose, a slice or a reduction over it, except a slice of the run's last rows,
// see LastRows); as a value it is used alone (`seq`, not `seq-1`).
type Length struct {
	Dim      string // the dimension's name
	Min, Max int    // 1 ≤ Min ≤ Max
	// Node is an Input node of type i32[] named Dim holding n. It is not in Function.Inputs:
	// callers never pass it; the runtime and the interpreter derive n from the inputs.
	Node *Node
	// Inputs[i] and Outputs[i] report whether input (output) i of the function has the length
	// as its leading axis: Shape[0] is k·Max in the capacity graph and k·n in a run.
	Inputs, Outputs []bool

	inst *instances // set by the parser; nil for a function built by hand
}

// instances builds and caches a function at particular lengths.
type instances struct {
	mu       sync.Mutex
	build    func(n int) (*Function, error)
	capacity func(c int) (*Function, error) // the capacity graph for bounds Min..c (nil: none)
	cache    map[int]*Function
}

// RowsPerLength is how many rows of a bounded value's leading axis one unit of the run-time
// length covers (Shape[0]/Max: 1 for tokens [seq], heads for [seq·heads, hd]).
func (l *Length) RowsPerLength(t Type) int {
	if t.Shape.Rank() == 0 || l.Max == 0 {
		return 0
	}
	return t.Shape[0] / l.Max
}

// copyFor returns a copy of l for a rebuilt function whose length node is node.
func (l *Length) copyFor(node *Node) *Length {
	c := *l
	c.Node = node
	c.Inputs = append([]bool(nil), l.Inputs...)
	c.Outputs = append([]bool(nil), l.Outputs...)
	return &c
}

// Length adds the run-time length node of a function (see Length) and returns its value. A
// function has at most one; rebuilding a function keeps it with CopyLength.
func (b *Builder) Length(dim string, min, max int) (Value, error) {
	if b.f.Length != nil {
		return Value{}, fmt.Errorf("function %s already has the run-time length %s", b.f.Name, b.f.Length.Dim)
	}
	if min < 1 || min > max {
		return Value{}, fmt.Errorf("run-time length %s: bounds %d..%d (want 1 ≤ min ≤ max)", dim, min, max)
	}
	n := b.add(&Node{Op: Input, Name: dim, Attrs: Attrs{"name": dim}, Outs: []Type{{I32, Shape{}}}})
	b.f.Length = &Length{Dim: dim, Min: min, Max: max, Node: n}
	return n.V(), nil
}

// CopyLength gives the function being built the run-time length of l (a function it rebuilds),
// with a node of its own, and returns that node's value. Inputs and Outputs are copied, so the
// rebuilt function must keep l's function's signature.
func (b *Builder) CopyLength(l *Length) (Value, error) {
	if l == nil {
		return Value{}, nil
	}
	if _, err := b.Length(l.Dim, l.Min, l.Max); err != nil {
		return Value{}, err
	}
	node := b.f.Length.Node
	b.f.Length = l.copyFor(node)
	return node.V(), nil
}

// WithCapacity returns f's capacity graph for the bounds Min..c instead of Min..Max (Min ≤ c ≤
// Max): the same function compiled for a smaller capacity, a variant a plan may run for the
// lengths up to c. Its At(n) is f's, and its Inputs and Outputs flags are f's (even for c = Min,
// where no shape changes with n).
func (f *Function) WithCapacity(c int) (*Function, error) {
	l := f.Length
	if l == nil {
		return nil, fmt.Errorf("function %s has no run-time length", f.Name)
	}
	if c < l.Min || c > l.Max {
		return nil, fmt.Errorf("function %s: capacity %d outside %s's bounds %d..%d", f.Name, c, l.Dim, l.Min, l.Max)
	}
	if l.inst == nil || l.inst.capacity == nil {
		return nil, fmt.Errorf("function %s was not parsed from a model file, so it cannot be built for capacity %d", f.Name, c)
	}
	g, err := l.inst.capacity(c)
	if err != nil {
		return nil, fmt.Errorf("function %s for capacity %d: %w", f.Name, c, err)
	}
	gl := g.Length
	gl.Inputs = append([]bool(nil), l.Inputs...)
	gl.Outputs = append([]bool(nil), l.Outputs...)
	gl.inst = l.inst
	if _, err := LengthRows(g); err != nil {
		return nil, fmt.Errorf("function %s for capacity %d: %w", f.Name, c, err)
	}
	return g, nil
}

// Derived returns a copy of l for a function derived from l's function by a transformation that
// keeps its meaning at every length (such as one more output): the derived function's At(n) is
// fn applied to the original's At(n). The caller adjusts Inputs and Outputs to the derived
// signature.
func (l *Length) Derived(fn func(*Function) (*Function, error)) *Length {
	c := l.copyFor(l.Node)
	if orig := l.inst; orig != nil {
		c.inst = &instances{build: func(n int) (*Function, error) {
			g, err := orig.at(n)
			if err != nil {
				return nil, err
			}
			return fn(g)
		}}
	}
	return c
}

// at returns the function at n from the cache, building it on first use.
func (in *instances) at(n int) (*Function, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := in.cache[n]; ok {
		return g, nil
	}
	g, err := in.build(n)
	if err != nil {
		return nil, err
	}
	if in.cache == nil {
		in.cache = map[int]*Function{}
	}
	in.cache[n] = g
	return g, nil
}

// IsLength reports whether n is f's run-time length node.
func (f *Function) IsLength(n *Node) bool { return f.Length != nil && f.Length.Node == n }

// At returns f written with its run-time dimension equal to n: static shapes, the dimension a
// constant. A function without a run-time length is returned as it is (for n ignored). The
// result is cached; it shares f's parameters and state.
//
//	g, err := f.At(7) // prefill with seq = 7: tokens i32[7], logits f32[7, vocab]
func (f *Function) At(n int) (*Function, error) {
	l := f.Length
	if l == nil {
		return f, nil
	}
	if n < l.Min || n > l.Max {
		return nil, fmt.Errorf("function %s: %s=%d is outside %d..%d", f.Name, l.Dim, n, l.Min, l.Max)
	}
	if l.inst == nil {
		return nil, fmt.Errorf("function %s was not parsed from a model file, so it cannot be built at %s=%d", f.Name, l.Dim, n)
	}
	g, err := l.inst.at(n)
	if err != nil {
		return nil, fmt.Errorf("function %s at %s=%d: %w", f.Name, l.Dim, n, err)
	}
	return g, nil
}

// LengthOf derives the run-time length of a call of f from the leading extent of its inputs
// (shape0(i) returns input i's leading extent as given, or -1 when it is not given): every
// bounded input must hold k·n rows for one n in Min..Max. A function without a bounded input
// runs at Max.
func (f *Function) LengthOf(shape0 func(i int) int) (int, error) {
	l := f.Length
	if l == nil {
		return 0, nil
	}
	n, from := -1, ""
	for i, in := range f.Inputs {
		if i >= len(l.Inputs) || !l.Inputs[i] {
			continue
		}
		got := shape0(i)
		if got < 0 {
			continue
		}
		k := l.RowsPerLength(in.Type())
		if k <= 0 || got%k != 0 {
			return 0, fmt.Errorf("function %s: input %s has %d rows, not a multiple of the %d rows per %s", f.Name, in.Name, got, k, l.Dim)
		}
		m := got / k
		if m < l.Min || m > l.Max {
			return 0, fmt.Errorf("function %s: input %s gives %s=%d, outside %d..%d", f.Name, in.Name, l.Dim, m, l.Min, l.Max)
		}
		if n >= 0 && m != n {
			return 0, fmt.Errorf("function %s: input %s gives %s=%d but input %s gives %d", f.Name, in.Name, l.Dim, m, from, n)
		}
		n, from = m, in.Name
	}
	if n < 0 {
		return l.Max, nil
	}
	return n, nil
}

// LengthRows finds the values of f that hold a run-time number of rows: those whose leading
// axis carries f's length (n·Shape[0]/Max valid rows in a run). It checks that every op keeps
// the rows of such values independent (elementwise and row-wise ops, matmuls over their
// rows, rope along axis 0, embedding lookups, attention queries, cache writes of them) and
// returns an error naming the node for one that would mix rows or move the axis (a reduction,
// slice, concat or transpose over axis 0, a bounded matmul operand on the right). A function
// without a run-time length has none.
func LengthRows(f *Function) (map[Value]bool, error) {
	rows := map[Value]bool{}
	l := f.Length
	if l == nil {
		return rows, nil
	}
	inputIndex := map[*Node]int{}
	for i, in := range f.Inputs {
		inputIndex[in] = i
	}
	for _, n := range f.Nodes {
		fail := func(format string, args ...any) error {
			return &SourceError{Pos: n.Pos, Context: "node " + n.String(),
				Err: fmt.Errorf("%s (the run-time length %s must stay the leading axis of the values it sets)", fmt.Sprintf(format, args...), l.Dim)}
		}
		b := make([]bool, len(n.Args))
		any := false
		for i, a := range n.Args {
			b[i] = rows[a]
			any = any || b[i]
		}
		axis := func(name string, def, rank int) int {
			ax, err := NormAxis(n.Attrs.Int(name, def), rank)
			if err != nil {
				return -1
			}
			return ax
		}
		out := false
		switch {
		case n.Op == Input:
			if i, ok := inputIndex[n]; ok && i < len(l.Inputs) {
				out = l.Inputs[i]
			}
		case n.Op.Info().Kind == KindSource:
		case !any:
			// Nothing bounded flows in: the value is the same for every n.
		case n.Op.IsElementwise() || n.Op == Expand:
			t := n.Outs[0]
			for i, a := range n.Args {
				if b[i] && (a.Type().Shape.Rank() != t.Shape.Rank() || a.Type().Shape[0] != t.Shape[0]) {
					return nil, fail("operand %d is broadcast along the run-time axis", i)
				}
			}
			out = true
		case n.Op == Reshape:
			t := n.Outs[0]
			if t.Shape.Rank() == 0 || t.Shape[0]%l.Max != 0 {
				return nil, fail("the result's leading axis %v is not a multiple of the capacity %d", t.Shape, l.Max)
			}
			out = true
		case n.Op == Transpose:
			if p := n.Attrs.Ints("perm"); len(p) == 0 || p[0] != 0 {
				return nil, fail("the transpose moves axis 0")
			}
			out = true
		case n.Op == Slice:
			if axis("axis", 0, n.Args[0].Type().Shape.Rank()) == 0 {
				// The last rows of the run (start = −r, to the end): their number does
				// not change with n, so the result is not bounded; the slice reads n.
				if _, ok := LastRows(n, l); !ok {
					return nil, fail("the slice along axis 0 is not the last rows of the run (start −r with r ≤ %d·%d, to the end, step 1)", l.Min, l.RowsPerLength(n.Args[0].Type()))
				}
				break
			}
			out = true
		case n.Op == Concat:
			if axis("axis", 0, n.Outs[0].Shape.Rank()) == 0 {
				return nil, fail("the concatenation is along axis 0")
			}
			for i, a := range n.Args {
				if b[i] && a.Type().Shape[0] != n.Outs[0].Shape[0] {
					return nil, fail("operand %d has another leading axis", i)
				}
			}
			out = true
		case n.Op == TakeAlongAxis:
			if b[0] != b[1] || n.Args[0].Type().Shape.Rank() < 2 {
				return nil, fail("x and the indices must both have the length on their leading axis")
			}
			out = true
		case n.Op == MoeLinear || n.Op == MoeSum || n.Op == MoeLinearSum || n.Op == MoeGLU:
			// Rows (tokens) are routed and computed independently; the experts' weights are
			// never bounded.
			for i, a := range n.Args {
				weight := i == 1 && n.Op != MoeSum || i == 2 && n.Op == MoeGLU
				if b[i] && (weight || a.Type().Shape.Rank() < 2) {
					return nil, fail("operand %d is bounded but is not a row operand", i)
				}
			}
			out = true
		case n.Op == Sum || n.Op == Mean || n.Op == Max || n.Op == Min || n.Op == Argmax || n.Op == ArgTopK || n.Op == Softmax || n.Op == MoeRoute:
			x := n.Args[0].Type()
			if x.Shape.Rank() < 2 || axis("axis", -1, x.Shape.Rank()) == 0 {
				return nil, fail("it reduces over axis 0")
			}
			out = true
		case n.Op == RMSNorm || n.Op == LayerNorm || n.Op == AddRMSNorm:
			nx := 1
			if n.Op == AddRMSNorm {
				nx = 2
			}
			for i := range n.Args {
				if b[i] && (i >= nx || n.Args[i].Type().Shape.Rank() < 2) {
					return nil, fail("operand %d is bounded but is normalised over", i)
				}
			}
			out = true
		case n.Op == Linear || n.Op == RMSNormLinear:
			for i := range n.Args {
				if b[i] && (i > 0 || n.Args[0].Type().Shape.Rank() < 2) {
					return nil, fail("operand %d is bounded but is contracted", i)
				}
			}
			out = true
		case n.Op == Matmul:
			at := n.Args[0].Type()
			if b[1] || at.Shape.Rank() < 2 || (at.Shape.Rank() == 2 && n.Attrs.Bool("ta", false)) ||
				n.Outs[0].Shape.Rank() != at.Shape.Rank() {
				return nil, fail("only a left operand with the length on its leading axis is supported")
			}
			out = true
		case n.Op == Embedding:
			if b[0] || n.Args[1].Type().Shape.Rank() < 1 {
				return nil, fail("the table is bounded")
			}
			out = true
		case n.Op == Rope || n.Op == RopeNorm:
			x := n.Args[0].Type()
			if axis("seq_axis", 0, x.Shape.Rank()) != 0 {
				return nil, fail("seq_axis is not 0")
			}
			for i := 1; i < len(n.Args); i++ {
				if b[i] {
					return nil, fail("operand %d is bounded", i)
				}
			}
			out = true
		case n.Op == CacheWrite || n.Op == RopeCacheWrite:
			if b[0] || b[2] {
				return nil, fail("the cache or the position is bounded")
			}
			// The state keeps its type; n·k rows of it are written.
		case n.Op == Attention:
			if n.Attrs.String("layout", "shd") != "shd" {
				return nil, fail("layout %s puts the heads first", n.Attrs.String("layout", "shd"))
			}
			if !b[0] {
				return nil, fail("keys or values with a run-time length (attention without a KV cache) are not supported")
			}
			for i := 1; i < len(n.Args); i++ {
				if b[i] {
					return nil, fail("keys or values with a run-time length (attention without a KV cache) are not supported")
				}
			}
			out = true
		case n.Op == RopeRows:
			if !b[0] || !b[1] {
				return nil, fail("x and its positions must both have the run's rows")
			}
			out = true
		case n.Op == CacheScatter:
			if b[0] || !b[1] || !b[2] || !b[3] {
				return nil, fail("the rows, their slots and positions must have the run's rows, the cache not")
			}
			// The state keeps its type; the run's rows are written.
		case n.Op == AttentionRows:
			if !b[0] || b[1] || b[2] || !b[3] || !b[4] {
				return nil, fail("the queries, their slots and positions must have the run's rows, the caches not")
			}
			out = true
		default:
			return nil, fail("op %s does not support a run-time length", n.Op)
		}
		if out {
			for i := range n.Outs {
				rows[Value{n, i}] = true
			}
		}
	}
	for i, o := range f.Outputs {
		// With one length only (a variant of capacity Min) every value has its rows, so a
		// rewrite may have dropped a slice of the last row (slice-identity).
		if rows[o.Value] && (i >= len(l.Outputs) || !l.Outputs[i]) && l.Min < l.Max {
			return nil, fmt.Errorf("output %s carries the run-time length %s but its type %s does not scale with it", o.Name, l.Dim, o.Value.Type())
		}
	}
	return rows, nil
}

// NeedsLength reports whether node n of f (rows from LengthRows) reads the run-time length
// itself, beyond computing its rows independently: a cache write writes n·k rows, attention
// places its queries at kv_len − n + i, and a slice of the last rows starts at n·k − r.
func NeedsLength(n *Node, rows map[Value]bool) bool {
	switch n.Op {
	case CacheWrite, RopeCacheWrite, CacheScatter:
		return rows[n.Args[1]]
	case Attention:
		return rows[n.Args[0]]
	case Slice:
		ax, err := NormAxis(n.Attrs.Int("axis", 0), n.Args[0].Type().Shape.Rank())
		return rows[n.Args[0]] && err == nil && ax == 0
	}
	return false
}

// LastRows reports whether slice node n keeps the last r rows of its input's leading axis —
// axis 0, step 1, start −r, and an end at or past the axis' end — and returns r. Within a
// function with run-time length l (nil: none) the rows are the run's (n·k of them, k rows per
// unit of the length), so r must not exceed the fewest a run has (Min·k): such a slice has r
// rows at every length, and its meaning at n is the function written with seq = n, as
// always. A generation prefill picks the last row before the LM head with it (model.yaml):
//
//	logits = linear(rmsnorm(slice(x, axis=0, start=-1, end=seq), out_norm, eps=1e-5), lm_head)
func LastRows(n *Node, l *Length) (int, bool) {
	if n.Op != Slice || len(n.Args) != 1 {
		return 0, false
	}
	x := n.Args[0].Type()
	ax, err := NormAxis(n.Attrs.Int("axis", 0), x.Shape.Rank())
	start, end := n.Attrs.Int("start", 0), n.Attrs.Int("end", 0)
	if err != nil || ax != 0 || n.Attrs.Int("step", 1) != 1 || start >= 0 || end < x.Shape[0] {
		return 0, false
	}
	r := -start
	if l != nil && r > l.Min*l.RowsPerLength(x) {
		return 0, false
	}
	return r, r <= x.Shape[0]
}
