package kernels

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// Rows says that a problem is part of a function with a run-time length (ir.Length): its
// bounded operands have capacity shapes, and in a run only a prefix of them is valid, the first
// n·E/Max elements of an operand of E elements, where n (1 ≤ n ≤ Max) is the run's length. The
// rows past the prefix hold anything (NaN included) and a result's rows past it may hold
// anything: nothing reads them.
//
// Every template computes a bounded problem correctly at the capacity grid, since rows are
// independent (ir.LengthRows checks that of the graph). Two things make it follow n:
//
//   - Reads: the op's meaning depends on n itself (attention places query i at
//     kv_len − n + i; a cache write writes n·k rows). Only a template with ReadsLength set is
//     offered such a problem; it binds the Len operand, an i32 scalar holding n.
//   - Step.Scale: a step whose workgroups walk the rows of a bounded operand in order declares
//     how its grid shrinks with n, so a run at length n launches about the work of a problem
//     compiled for n. A step without a Scale runs its full grid.
type Rows struct {
	Max int
	// Args[i] (Outs[i]) reports whether argument (result) i is bounded.
	Args, Outs []bool
	Reads      bool
}

// key is the part of Problem.Key that the run-time length adds.
func (r *Rows) key() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "|rows<=%d:", r.Max)
	for _, x := range r.Args {
		b.WriteByte("-b"[boolInt(x)])
	}
	b.WriteByte('>')
	for _, x := range r.Outs {
		b.WriteByte("-b"[boolInt(x)])
	}
	if r.Reads {
		b.WriteString(":reads")
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Arg reports whether argument i is bounded (false for a problem without a run-time length).
func (r *Rows) Arg(i int) bool { return r != nil && i < len(r.Args) && r.Args[i] }

// Out reports whether result i is bounded.
func (r *Rows) Out(i int) bool { return r != nil && i < len(r.Outs) && r.Outs[i] }

// Linear is GridScale.Axis for a grid laid out by Grid1D (a linear workgroup index over x and y).
const Linear = -1

// GridScale says how a step's grid follows the run-time length n: along Axis (0, 1, 2, or Linear)
// it runs ceil(n·Num/Den) workgroups, never more than Grid's. Num is the work items of the step
// that one unit of n covers, Den the items per workgroup along that axis: for a flat kernel over
// a bounded result of E elements, Num = E/Max and Den = wg·per_thread.
type GridScale struct {
	Axis     int
	Num, Den int
}

// Groups is the grid at length n (for tests and estimates; the runtime computes the same).
func (s *GridScale) Groups(grid [3]uint32, n int) [3]uint32 {
	if s == nil || s.Den <= 0 {
		return grid
	}
	g := max((n*s.Num+s.Den-1)/s.Den, 1)
	if s.Axis == Linear {
		total := int(grid[0]) * int(grid[1])
		g = min(g, total)
		x := min(g, int(grid[0]))
		return [3]uint32{uint32(x), uint32(min((g+x-1)/x, int(grid[1]))), grid[2]}
	}
	out := grid
	out[s.Axis] = uint32(min(g, int(grid[s.Axis])))
	return out
}

// scaleItems is the scale of a step whose workgroups take per consecutive items each along axis,
// of items in all, when the items walk a bounded operand in order (bounded) and split evenly per
// unit of n; nil otherwise (the step keeps its full grid).
func scaleItems(p *Problem, bounded bool, axis, items, per int) *GridScale {
	r := p.Rows
	if r == nil || !bounded || r.Max <= 0 || items%r.Max != 0 || per <= 0 {
		return nil
	}
	return &GridScale{Axis: axis, Num: items / r.Max, Den: per}
}

// flatScale is the scale of a flat kernel (eachFlat, flatGrid) over items of a bounded operand.
func flatScale(p *Problem, bounded bool, items int, c Config) *GridScale {
	return scaleItems(p, bounded, Linear, items, c["wg"]*c["per_thread"])
}

// rowScale is the scale of a WalkRows kernel (RowGrid) over rows of a bounded operand.
func rowScale(p *Problem, bounded bool, rows int, c Config) *GridScale {
	per := c["wg"]
	if c["coop"] == 1 {
		per = max(c["rows"], 1)
	}
	return scaleItems(p, bounded, Linear, rows, per)
}

// At returns the static problem that p (a problem with Rows) computes in a run at length n: each
// bounded argument and result with its leading axis k·Max cut to k·n, no Rows. Its reference is
// what the first rows of p's bounded results must equal in such a run. A problem without Rows is
// returned as it is.
func (p *Problem) At(n int) (*Problem, error) {
	r := p.Rows
	if r == nil {
		return p, nil
	}
	if n < 1 || n > r.Max {
		return nil, fmt.Errorf("length %d outside 1..%d", n, r.Max)
	}
	cut := func(t ir.Type, bounded bool) (ir.Type, error) {
		if !bounded {
			return t, nil
		}
		if t.Shape.Rank() == 0 || t.Shape[0]%r.Max != 0 {
			return ir.Type{}, fmt.Errorf("bounded operand %s: leading axis not a multiple of %d", t, r.Max)
		}
		s := append(ir.Shape(nil), t.Shape...)
		s[0] = s[0] / r.Max * n
		return ir.Type{DType: t.DType, Shape: s}, nil
	}
	q := *p
	q.Rows = nil
	q.Args = make([]ir.Type, len(p.Args))
	q.Outs = make([]ir.Type, len(p.Outs))
	var err error
	for i, t := range p.Args {
		if q.Args[i], err = cut(t, r.Arg(i)); err != nil {
			return nil, err
		}
	}
	for i, t := range p.Outs {
		if q.Outs[i], err = cut(t, r.Out(i)); err != nil {
			return nil, err
		}
	}
	if p.Expr != nil {
		f := *p.Expr
		f.Inputs = append([]ir.Type(nil), p.Expr.Inputs...)
		if p.Op == FusedElementwise {
			copy(f.Inputs, q.Args)
		} else {
			// Input 0 is the op's value (bounded with the result), the rest the extra arguments.
			if f.Inputs[0], err = cut(f.Inputs[0], r.Out(0)); err != nil {
				return nil, err
			}
			copy(f.Inputs[1:], q.Args[opArgs(p):])
		}
		q.Expr = &f
	}
	if s := p.Attrs.Ints("shape"); s != nil && r.Out(0) && (p.Op == ir.Reshape || p.Op == ir.Expand) {
		q.Attrs = p.Attrs.Clone()
		q.Attrs["shape"] = append([]int{s[0] / r.Max * n}, s[1:]...)
	}
	return &q, nil
}
