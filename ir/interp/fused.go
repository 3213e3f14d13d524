package interp

import "github.com/vkc-project/vkc/ir"

// Fused ops are evaluated as their compositions (ir/fused.go), through the base ops' reference
// implementations, with each intermediate rounded to the node's dtype as the unfused graph would.

func sub(n *ir.Node, op ir.Op, attrs ir.Attrs, t ir.Type) *ir.Node {
	return &ir.Node{Op: op, Attrs: attrs, Outs: []ir.Type{t}, Pos: n.Pos}
}

func init() {
	multiImpls[ir.AddRMSNorm] = func(c *ctx, n *ir.Node, a []*val) ([]*val, error) {
		s, err := impls[ir.Add](c, sub(n, ir.Add, nil, n.Outs[0]), a[:2])
		if err != nil {
			return nil, err
		}
		y, err := evalRMSNorm(c, sub(n, ir.RMSNorm, ir.Attrs{"eps": n.Attrs.Float("eps", 1e-5)}, n.Outs[1]), []*val{s, a[2]})
		if err != nil {
			return nil, err
		}
		return []*val{s, y}, nil
	}
	impls[ir.RMSNormLinear] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		h, err := evalRMSNorm(c, sub(n, ir.RMSNorm, ir.Attrs{"eps": n.Attrs.Float("eps", 1e-5)}, a[0].t), a[:2])
		if err != nil {
			return nil, err
		}
		if act := n.Attrs.String("act", ""); act != "" {
			// The rows the product reads, rounded to act (as cast rounds them).
			d, _ := ir.ParseDType(act) // checked by inference
			h = newVal(ir.Type{DType: d, Shape: h.t.Shape}, append([]float64(nil), h.d...))
		}
		return evalLinear(c, sub(n, ir.Linear, nil, n.Type()), []*val{h, a[2]})
	}
	impls[ir.RopeNorm] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		h, err := evalRMSNorm(c, sub(n, ir.RMSNorm, ir.Attrs{"eps": n.Attrs.Float("eps", 1e-5)}, a[0].t), a[:2])
		if err != nil {
			return nil, err
		}
		ra := n.Attrs.Clone()
		delete(ra, "eps")
		return evalRope(c, sub(n, ir.Rope, ra, n.Type()), []*val{h, a[2]})
	}
	impls[ir.RopeCacheWrite] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		ra := n.Attrs.Clone() // theta, mode and the scaling
		ra["seq_axis"] = 0
		r, err := evalRope(c, sub(n, ir.Rope, ra, a[1].t), []*val{a[1], a[2]})
		if err != nil {
			return nil, err
		}
		return evalCacheWrite(c, sub(n, ir.CacheWrite, nil, n.Type()), []*val{a[0], r, a[2]})
	}
}
