package oracles

import (
	"fmt"
	"math"
	"sort"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// RoutingFlip is a decode row of a mixture of experts explained by one routing flip: at Layer
// the router's k-th and (k+1)-th experts (Experts, the chosen one first) were within Gap of
// each other, and the reference with the two swapped there is within Err of the row.
type RoutingFlip struct {
	Row, Layer int
	Experts    [2]int
	Gap        float64 // the two router logits' difference over the row's largest |logit|
	Err        float64 // row-relative, against the reference with the swap
}

func (f RoutingFlip) String() string {
	return fmt.Sprintf("decode row %d: layer %d's experts %d and %d (router logits %.2g apart, relative) swapped: %.2g row-relative from the reference so routed",
		f.Row, f.Layer, f.Experts[0], f.Experts[1], f.Gap, f.Err)
}

// DecodeRoutingFlip checks whether decode row row of a file's teacher-forced run (got, its
// logits) is the reference with one near-tied routing choice flipped, as README-new-archs.md
// confirms llama.cpp's flips: m (the imported model, run by the interpreter) is fed the prompt
// and greedy_tokens up to that row; at every moe_route layer whose k-th and (k+1)-th router
// logits lie within maxGap of the row's largest |logit| (a near tie that arithmetic of that
// relative error can flip) the reference is run again with the two experts' router rows
// swapped, which routes the row to the other expert. It returns the swap that brings the
// row closest to the reference, or ok false when no layer is that near a tie (a wrong row then
// has another cause).
func DecodeRoutingFlip(m *ir.Model, gold map[string]*ir.Tensor, row int, got []float64, maxGap float64) (RoutingFlip, bool, error) {
	prompt, fed := ints(gold["input_ids"]), ints(gold["greedy_tokens"])
	if row < 0 || row >= len(fed) {
		return RoutingFlip{}, false, fmt.Errorf("decode row %d of %d", row, len(fed))
	}
	vocab := gold["prefill_logits"].Type.Shape[1]
	inputs := func(tokens []int, pos int) map[string]*ir.Tensor {
		f := make([]float64, len(tokens))
		for i, x := range tokens {
			f[i] = float64(x)
		}
		return map[string]*ir.Tensor{"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, len(tokens)), f),
			"pos": ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(pos)})}
	}
	s := interp.NewSession(m)
	if _, err := s.Run("score", inputs(prompt, 0)); err != nil {
		return RoutingFlip{}, false, err
	}
	for i := 0; i < row; i++ {
		if _, err := s.Run("decode", inputs(fed[i:i+1], len(prompt)+i)); err != nil {
			return RoutingFlip{}, false, err
		}
	}
	in := inputs(fed[row:row+1], len(prompt)+row)
	state := map[string]*ir.Tensor{}
	for _, d := range m.State {
		state[d.Name] = s.State(d.Name)
	}
	f := m.Function("decode")
	if f == nil {
		return RoutingFlip{}, false, fmt.Errorf("model %s has no decode function", m.Name)
	}
	// Each layer's router: moe_route over linear(h, W) with W a parameter of one row per expert.
	type router struct {
		logits ir.Value
		w      string
		k      int
	}
	var routers []router
	var vals []ir.Value
	for _, n := range f.Nodes {
		if n.Op != ir.MoeRoute {
			continue
		}
		lin := n.Args[0].Node
		if lin.Op != ir.Linear || len(lin.Args) != 2 || lin.Args[1].Node.Op != ir.Param {
			return RoutingFlip{}, false, fmt.Errorf("moe_route %%%d does not read linear(h, a router parameter)", n.ID)
		}
		routers = append(routers, router{n.Args[0], lin.Args[1].Node.Name, n.Attrs.Int("k", 1)})
		vals = append(vals, n.Args[0])
	}
	logits, err := interp.EvalValues(f, interp.Env{Inputs: in, Params: m.Weights, State: state}, vals...)
	if err != nil {
		return RoutingFlip{}, false, err
	}
	best, found := RoutingFlip{Err: math.Inf(1)}, false
	for l, r := range routers {
		x := logits[l].Float64s()
		if r.k >= len(x) {
			continue
		}
		idx := make([]int, len(x))
		scale := 0.0
		for i := range idx {
			idx[i] = i
			scale = math.Max(scale, math.Abs(x[i]))
		}
		sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] > x[idx[b]] })
		a, b := idx[r.k-1], idx[r.k]
		gap := (x[a] - x[b]) / scale
		if gap > maxGap {
			continue
		}
		w := m.Weights[r.w]
		rows := w.Type.Shape[0]
		if rows != len(x) || len(w.Data)%rows != 0 {
			return RoutingFlip{}, false, fmt.Errorf("router %s: %s is not one row per expert", r.w, w.Type)
		}
		rb := len(w.Data) / rows
		sw := &ir.Tensor{Type: w.Type, Data: append([]byte(nil), w.Data...)}
		copy(sw.Data[a*rb:(a+1)*rb], w.Data[b*rb:(b+1)*rb])
		copy(sw.Data[b*rb:(b+1)*rb], w.Data[a*rb:(a+1)*rb])
		m2 := *m
		m2.Weights = make(map[string]*ir.Tensor, len(m.Weights))
		for k, v := range m.Weights {
			m2.Weights[k] = v
		}
		m2.Weights[r.w] = sw
		out, _, err := interp.Run(&m2, "decode", in, state)
		if err != nil {
			return RoutingFlip{}, false, err
		}
		e := RowRel(got, out["logits"].Float64s(), vocab)
		if e < best.Err {
			best, found = RoutingFlip{Row: row, Layer: l, Experts: [2]int{a, b}, Gap: gap, Err: e}, true
		}
	}
	return best, found, nil
}
