package tune

import (
	"math/rand"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// Inputs returns random arguments of p's real shapes for checking a configuration against the
// interpreter: floats are standard normal, bools fair coins, and integer operands get values
// valid for the op that reads them, chosen from the problem:
//
//   - embedding ids: uniform in [0, rows of the table); a mixture of experts' expert ids
//     (moe_linear, moe_linear_sum, moe_glu): uniform in [0, experts);
//   - rope / rope_norm position: 1 (any position is valid; not 0, so a kernel that ignores the
//     position is caught);
//   - cache_write / rope_cache_write position: cache rows − new rows, the last valid position (0
//     when the rows fill the cache), so the write lands at an offset whenever it can;
//   - attention kv_len: the key length (every key valid, every query at a real position);
//   - a batched step's per-row slot and position (cache_scatter, attention_rows): row r in slot
//     r mod slots at position ctx − 1 − r/slots, so no two rows share a cell and the positions
//     reach the end of the cache; rope_rows' positions 1, 2, ...;
//   - the position of column parts (a merged projection's rope and cache writes): see partsPos;
//     per-row positions and slots (a batched step's parts): see rowPartsInts;
//   - any other integer scalar of the op: 0; other integer tensors (and epilogue inputs): small
//     integers in [0, 8), as Random gives.
//
// The same seed gives the same inputs.
func Inputs(p *kernels.Problem, rng *rand.Rand) []*ir.Tensor {
	// The op's own arguments, as Problem.Reference counts them; a fused elementwise problem has
	// none (everything feeds its expression).
	nop := p.NumOpArgs
	if p.Expr == nil && nop == 0 {
		nop = len(p.Args)
	}
	if p.Op == kernels.FusedElementwise {
		nop = 0
	}
	out := make([]*ir.Tensor, len(p.Args))
	for i, t := range p.Args {
		if i == p.PartsPos() && !p.RowPos {
			out[i] = ir.TensorFromFloat64s(t, []float64{float64(partsPos(p))})
			continue
		}
		if p.RowPos && (i == p.PartsPos() || i == p.PartsSlot()) {
			out[i] = rowPartsInts(p, t, i == p.PartsSlot())
			continue
		}
		if i < nop && t.DType.IsInt() {
			if v, ok := intOperand(p, i, rng); ok {
				vals := make([]float64, t.Shape.NumElements())
				for k := range vals {
					vals[k] = v()
				}
				out[i] = ir.TensorFromFloat64s(t, vals)
				continue
			}
		}
		out[i] = Random(rng, t)
	}
	return out
}

// partsPos is the position for a problem with column parts (kernels.Part): the last at which
// every cache part's rows fit (so the writes land at an offset whenever they can), or 1 (not 0,
// so that a rotation that ignores the position is caught).
func partsPos(p *kernels.Problem) int {
	x := p.Args[0].Shape
	rows := 1
	if x.Rank() > 1 {
		rows = x.NumElements() / x[x.Rank()-1]
	}
	pos, cache := 1<<30, false
	for _, pt := range p.Parts {
		if pt.Cache {
			cache = true
			pos = min(pos, max(p.Outs[pt.Out].Shape[0]-rows, 0))
		}
	}
	if !cache {
		return 1
	}
	return pos
}

// partsMaxPos is the largest position Inputs gives a row of a problem with column parts: the
// last row's (partsPos + rows − 1), or with per-row positions the cache's last.
func partsMaxPos(p *kernels.Problem) int {
	x := p.Args[0].Shape
	rows := 1
	if x.Rank() > 1 {
		rows = x.NumElements() / x[x.Rank()-1]
	}
	if !p.RowPos {
		return partsPos(p) + rows - 1
	}
	last := rows
	for _, pt := range p.Parts {
		if pt.Cache {
			last = max(last, p.Outs[pt.Out].Shape[1]-1)
		}
	}
	return last
}

// rowPartsInts is the per-row position (or slot) of a problem with column parts at per-row
// positions (kernels.Problem.RowPos): with a cache part, row r in cell (r mod slots, ctx − 1 −
// r/slots) of the first cache part's state, as cache_scatter's inputs; otherwise positions 1, 2, ...
func rowPartsInts(p *kernels.Problem, t ir.Type, slot bool) *ir.Tensor {
	vals := make([]float64, t.Shape.NumElements())
	for _, pt := range p.Parts {
		if !pt.Cache {
			continue
		}
		st := p.Outs[pt.Out].Shape
		slots, ctx := max(st[0], 1), max(st[1], 1)
		for r := range vals {
			if slot {
				vals[r] = float64(r % slots)
			} else {
				vals[r] = float64(ctx - 1 - (r/slots)%ctx)
			}
		}
		return ir.TensorFromFloat64s(t, vals)
	}
	for r := range vals {
		vals[r] = float64(r + 1)
	}
	return ir.TensorFromFloat64s(t, vals)
}

// intOperand returns a generator of valid values for integer operand i of p's op, or false when
// the op has no rule for it (Random's small integers are used).
func intOperand(p *kernels.Problem, i int, rng *rand.Rand) (func() float64, bool) {
	konst := func(v int) (func() float64, bool) { return func() float64 { return float64(v) }, true }
	rows := func(t ir.Type, axis int) int {
		if t.Shape.Rank() > axis {
			return t.Shape[axis]
		}
		return 1
	}
	// A per-row slot (idx 0) or position (idx 1) of a [slots, ctx, ...] cache: the element
	// counter gives row r the cell (r mod slots, ctx − 1 − (r/slots) mod ctx).
	rowCell := func(cache ir.Type, idx int) (func() float64, bool) {
		slots, ctx := max(rows(cache, 0), 1), max(rows(cache, 1), 1)
		r := 0
		return func() float64 {
			v := r % slots
			if idx == 1 {
				v = ctx - 1 - (r/slots)%ctx
			}
			r++
			return float64(v)
		}, true
	}
	switch {
	case p.Op == ir.RopeRows && i == 1:
		r := 0
		return func() float64 { r++; return float64(r) }, true
	case p.Op == ir.CacheScatter && (i == 2 || i == 3):
		return rowCell(p.Args[0], i-2)
	case p.Op == ir.AttentionRows && (i == 3 || i == 4):
		return rowCell(p.Args[1], i-3)
	case p.Op == ir.Embedding && i == 1:
		n := max(rows(p.Args[0], 0), 1)
		return func() float64 { return float64(rng.Intn(n)) }, true
	case (p.Op == ir.MoeLinear || p.Op == ir.MoeLinearSum) && i == 2, p.Op == ir.MoeGLU && i == 3:
		n := max(rows(p.Args[1], 0), 1) // the experts
		return func() float64 { return float64(rng.Intn(n)) }, true
	case p.Op == ir.Rope && i == 1, p.Op == ir.RopeNorm && i == 2:
		return konst(1)
	case (p.Op == ir.CacheWrite || p.Op == ir.RopeCacheWrite) && i == 2:
		return konst(max(rows(p.Args[0], 0)-rows(p.Args[1], 0), 0))
	case p.Op == ir.Attention && i == 3:
		axis, _, _, _ := ir.LayoutAxes(ir.AttentionLayouts(p.Attrs).K)
		return konst(rows(p.Args[1], axis))
	}
	if p.Args[i].Shape.NumElements() == 1 {
		return konst(0)
	}
	return nil, false
}
