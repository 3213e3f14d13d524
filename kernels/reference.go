package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
)

// Reference builds an ir function computing p: inputs "a0", "a1", … (p.Args), outputs "o0", …
// (p.Outs). The interpreter evaluates it to check a Launch (tests, and the tuner before a
// configuration's time counts).
func (p *Problem) Reference() (*ir.Function, error) {
	b := ir.NewBuilder("reference:" + p.OpName())
	args := make([]ir.Value, len(p.Args))
	for i, t := range p.Args {
		v, err := b.Input(fmt.Sprintf("a%d", i), t)
		if err != nil {
			return nil, err
		}
		args[i] = v
	}
	var outs []ir.Value
	if p.Op == FusedElementwise {
		if p.Expr == nil {
			return nil, fmt.Errorf("elementwise problem without an expression")
		}
		vs, err := p.Expr.Build(b, args)
		if err != nil {
			return nil, err
		}
		outs = vs
	} else {
		nop := p.NumOpArgs
		if p.Expr == nil && nop == 0 {
			nop = len(p.Args)
		}
		if nop > len(p.Args) {
			return nil, fmt.Errorf("problem has %d op arguments of %d", nop, len(p.Args))
		}
		v, err := b.Op(p.Op, p.Attrs, args[:nop]...)
		if err != nil {
			return nil, err
		}
		for i := range v.Node.Outs {
			outs = append(outs, ir.Value{Node: v.Node, Out: i})
		}
		if len(p.Parts) > 0 {
			if outs, err = partsReference(b, p, args, outs[0]); err != nil {
				return nil, err
			}
		} else if p.Expr != nil {
			ein := append([]ir.Value{outs[0]}, args[nop:]...)
			vs, err := p.Expr.Build(b, ein)
			if err != nil {
				return nil, err
			}
			if len(vs) != 1 {
				return nil, fmt.Errorf("an epilogue has one result, this one has %d", len(vs))
			}
			outs[0] = vs[0]
		}
	}
	if len(outs) != len(p.Outs) {
		return nil, fmt.Errorf("problem %s declares %d results, the reference has %d", p.Key(), len(p.Outs), len(outs))
	}
	for i, v := range outs {
		if !v.Type().Equal(p.Outs[i]) {
			return nil, fmt.Errorf("problem %s result %d is declared %s, the reference gives %s", p.Key(), i, p.Outs[i], v.Type())
		}
		if err := b.Output(fmt.Sprintf("o%d", i), v); err != nil {
			return nil, err
		}
	}
	return b.Function(), nil
}

// Build adds the DAG's nodes to an ir function over the given input values and returns the
// output values. Constants take their node's dtype as rank-0 tensors.
func (f *Fused) Build(b *ir.Builder, in []ir.Value) ([]ir.Value, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	vals := make([]ir.Value, len(f.Nodes))
	for i, n := range f.Nodes {
		switch n.Op {
		case ir.Input:
			if n.Index >= len(in) {
				return nil, fmt.Errorf("fused input %d of %d", n.Index, len(in))
			}
			vals[i] = in[n.Index]
		case ir.Const:
			vals[i] = b.Scalar(n.DType, n.Value)
		default:
			args := make([]ir.Value, len(n.Args))
			for k, a := range n.Args {
				args[k] = vals[a]
			}
			v, err := b.Op(n.Op, n.Attrs, args...)
			if err != nil {
				return nil, fmt.Errorf("fused node %d: %w", i, err)
			}
			vals[i] = v
		}
	}
	out := make([]ir.Value, len(f.Outputs))
	for i, o := range f.Outputs {
		out[i] = vals[o]
	}
	return out, nil
}
