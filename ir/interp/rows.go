package interp

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/ir"
)

// The batched-step ops (ir/ops_rows.go): rows of several sequences, each at its own position in
// its own slot of a [slots, ctx, ...] cache.
func init() {
	impls[ir.RopeRows] = evalRopeRows
	impls[ir.CacheScatter] = evalCacheScatter
	impls[ir.AttentionRows] = evalAttentionRows
}

// evalRopeRows is rope with a position per row: row r (the leading axis) of x is rotated as rope
// rotates a row at position pos[r]. A negative position is an error.
func evalRopeRows(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, pos := a[0], a[1]
	sh := x.t.Shape
	rows := sh[0]
	per := len(x.d) / rows
	ra := n.Attrs.Clone()
	ra["seq_axis"] = 0
	d := make([]float64, 0, len(x.d))
	for r := 0; r < rows; r++ {
		p := int(pos.d[r])
		if p < 0 {
			return nil, fmt.Errorf("row %d: pos %d is negative", r, p)
		}
		// One row at position p is rope over [1, ...] at pos p.
		rt := ir.Type{DType: x.t.DType, Shape: append(ir.Shape{1}, sh[1:]...)}
		row := &val{t: rt, d: x.d[r*per : (r+1)*per]}
		sub := &ir.Node{Op: ir.Rope, Attrs: ra, Outs: []ir.Type{rt}}
		y, err := evalRope(c, sub, []*val{row, {t: ir.T(ir.I32), d: []float64{float64(p)}}})
		if err != nil {
			return nil, err
		}
		d = append(d, y.d...)
	}
	return newVal(n.Type(), d), nil
}

// slotPos reads row r's slot and position and checks them against a [slots, ctx, ...] cache.
func slotPos(slot, pos *val, r, slots, ctxLen int) (int, int, error) {
	s, p := int(slot.d[r]), int(pos.d[r])
	if s < 0 || s >= slots {
		return 0, 0, fmt.Errorf("row %d: slot %d is outside 0..%d", r, s, slots-1)
	}
	if p < 0 || p >= ctxLen {
		return 0, 0, fmt.Errorf("row %d: pos %d is outside 0..%d", r, p, ctxLen-1)
	}
	return s, p, nil
}

// evalCacheScatter returns the state with row x[r] at state[slot[r], pos[r]]; a slot or
// position outside the cache, or two rows naming one cell, is an error. The rows are converted
// to the state's dtype as evalCacheWrite converts them (rounded, or quantized block by block).
func evalCacheScatter(c *ctx, n *ir.Node, a []*val) (*val, error) {
	st, x, slot, pos := a[0], a[1], a[2], a[3]
	slots, ctxLen := st.t.Shape[0], st.t.Shape[1]
	rows := x.t.Shape[0]
	per := len(x.d) / rows
	d := append([]float64(nil), st.d...)
	seen := map[[2]int]int{}
	out := st
	var r32 func(float64) float64 // a float state's rounding
	if !st.t.DType.Quantized() {
		r32 = rounder(st.t.DType)
	}
	for r := 0; r < rows; r++ {
		s, p, err := slotPos(slot, pos, r, slots, ctxLen)
		if err != nil {
			return nil, err
		}
		if r0, dup := seen[[2]int{s, p}]; dup {
			return nil, fmt.Errorf("rows %d and %d both write slot %d, position %d", r0, r, s, p)
		}
		seen[[2]int{s, p}] = r
		if f := st.t.DType.Format(); st.t.DType.Quantized() {
			// a cell is whole blocks (ir.CheckBlocks on the state's last axis)
			row := &val{t: ir.T(x.t.DType, per), d: x.d[r*per : (r+1)*per]}
			if out, err = quantizeRows(n, out, row, (s*ctxLen+p)*per, f); err != nil {
				return nil, err
			}
			continue
		}
		for i, v := range x.d[r*per : (r+1)*per] {
			d[(s*ctxLen+p)*per+i] = r32(v)
		}
	}
	if st.t.DType.Quantized() {
		return out, nil
	}
	return &val{t: n.Type(), d: d}, nil
}

// evalAttentionRows: row r of q attends keys 0..pos[r] of sequence slot[r] (with window w > 0,
// keys pos[r]-w+1..pos[r]), with grouped-query heads (query head h reads key/value head
// h / (hq/hkv)); scale defaults to 1/√d. Each row is summed in key order.
func evalAttentionRows(c *ctx, n *ir.Node, a []*val) (*val, error) {
	q, k, v, slot, pos := a[0], a[1], a[2], a[3], a[4]
	rows, hq, dh := q.t.Shape[0], q.t.Shape[1], q.t.Shape[2]
	slots, ctxLen, hkv := k.t.Shape[0], k.t.Shape[1], k.t.Shape[2]
	dv := v.t.Shape[3]
	window := n.Attrs.Int("window", 0)
	scale := n.Attrs.Float("scale", 1/math.Sqrt(float64(dh)))
	group := hq / hkv
	sp := make([][2]int, rows)
	for r := range sp {
		s, p, err := slotPos(slot, pos, r, slots, ctxLen)
		if err != nil {
			return nil, err
		}
		sp[r] = [2]int{s, p}
	}
	out := make([]float64, rows*hq*dv)
	parallelFor(rows*hq, rows*hq*ctxLen*(dh+dv), func(lo, hi int) {
		scores := make([]float64, ctxLen)
		for rh := lo; rh < hi; rh++ {
			r, h := rh/hq, rh%hq
			s, p := sp[r][0], sp[r][1]
			kh := h / group
			first := 0
			if window > 0 {
				first = max(0, p-window+1)
			}
			mx := math.Inf(-1)
			for j := first; j <= p; j++ {
				dot := 0.0
				kb := ((s*ctxLen+j)*hkv + kh) * dh
				qb := (r*hq + h) * dh
				for f := 0; f < dh; f++ {
					dot += q.d[qb+f] * k.d[kb+f]
				}
				scores[j] = dot * scale
				mx = math.Max(mx, scores[j])
			}
			sum := 0.0
			for j := first; j <= p; j++ {
				scores[j] = math.Exp(scores[j] - mx)
				sum += scores[j]
			}
			for f := 0; f < dv; f++ {
				o := 0.0
				for j := first; j <= p; j++ {
					o += scores[j] * v.d[((s*ctxLen+j)*hkv+kh)*dv+f]
				}
				out[(r*hq+h)*dv+f] = o / sum
			}
		}
	})
	return newVal(n.Type(), out), nil
}
