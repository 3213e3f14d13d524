package interp

import (
	"fmt"
	"math"
	"sort"

	"github.com/vkc-project/vkc/ir"
)

// The mixture-of-experts ops (ir/ops_moe.go).

func init() {
	multiImpls[ir.MoeRoute] = evalMoeRoute
	impls[ir.MoeLinear] = evalMoeLinear
	impls[ir.MoeSum] = evalMoeSum
	impls[ir.MoeLinearSum] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		k := a[2].t.Shape[1]
		y, err := evalMoeLinear(c, sub(n, ir.MoeLinear, nil, ir.T(t.DType, t.Shape[0], k, t.Shape[1])), a[:3])
		if err != nil {
			return nil, err
		}
		return evalMoeSum(c, sub(n, ir.MoeSum, nil, t), []*val{y, a[3]})
	}
	impls[ir.MoeGLU] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		g, err := evalMoeLinear(c, sub(n, ir.MoeLinear, nil, t), []*val{a[0], a[1], a[3]})
		if err != nil {
			return nil, err
		}
		u, err := evalMoeLinear(c, sub(n, ir.MoeLinear, nil, t), []*val{a[0], a[2], a[3]})
		if err != nil {
			return nil, err
		}
		act, ok := map[string]ir.Op{"silu": ir.Silu, "gelu_tanh": ir.GeluTanh, "gelu": ir.Gelu}[n.Attrs.String("act", "silu")]
		if !ok {
			return nil, fmt.Errorf("act %q", n.Attrs.String("act", ""))
		}
		ga, err := impls[act](c, sub(n, act, nil, t), []*val{g})
		if err != nil {
			return nil, err
		}
		return impls[ir.Mul](c, sub(n, ir.Mul, nil, t), []*val{ga, u})
	}
}

// evalMoeRoute chooses each row's k experts: the indices of its k largest logits, largest first,
// equal logits in index order and NaN above every number (argtopk's order), and their weights:
// with norm=renorm the softmax over the k chosen logits (which is the softmax over all of them
// renormalised over the k), with norm=none each chosen expert's probability of the softmax over
// all of them. The softmax is computed in float64 from the largest logit.
func evalMoeRoute(c *ctx, n *ir.Node, a []*val) ([]*val, error) {
	x := a[0]
	e := x.t.Shape[x.t.Shape.Rank()-1]
	k := n.Attrs.Int("k", 0)
	renorm := n.Attrs.String("norm", ir.MoeNormRenorm) == ir.MoeNormRenorm
	rows := len(x.d) / e
	ids := make([]float64, 0, rows*k)
	ws := make([]float64, 0, rows*k)
	idx := make([]int, e)
	for r := 0; r < rows; r++ {
		v := x.d[r*e : (r+1)*e]
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool {
			a, b := v[idx[i]], v[idx[j]]
			if math.IsNaN(a) || math.IsNaN(b) {
				return math.IsNaN(a) && !math.IsNaN(b)
			}
			return a > b
		})
		top := v[idx[0]]
		z := 0.0
		if renorm {
			for _, i := range idx[:k] {
				z += math.Exp(v[i] - top)
			}
		} else {
			for _, l := range v {
				z += math.Exp(l - top)
			}
		}
		for _, i := range idx[:k] {
			ids = append(ids, float64(i))
			ws = append(ws, math.Exp(v[i]-top)/z)
		}
	}
	return []*val{newVal(n.Outs[0], ids), newVal(n.Outs[1], ws)}, nil
}

// evalMoeLinear computes out[t, j, :] = W[ids[t, j]]·x[t] (x [n, in]) or ·x[t, j] (x [n, k, in]),
// float64 sums over the dequantized weights; an expert id outside 0..E-1 is an error naming it.
func evalMoeLinear(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w, ids := a[0], a[1], a[2]
	experts, out, in := w.t.Shape[0], w.t.Shape[1], w.t.Shape[2]
	rows, k := ids.t.Shape[0], ids.t.Shape[1]
	perSlot := x.t.Shape.Rank() == 3
	for i, id := range ids.d {
		if id < 0 || id >= float64(experts) {
			return nil, fmt.Errorf("expert id %d at row %d, slot %d is outside 0..%d", int64(id), i/k, i%k, experts-1)
		}
	}
	d := make([]float64, rows*k*out)
	parallelFor(rows*k, rows*k*out*in, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			xr := x.d[(s/k)*in : (s/k+1)*in]
			if perSlot {
				xr = x.d[s*in : (s+1)*in]
			}
			we := w.d[int(ids.d[s])*out*in:]
			for o := range out {
				wr := we[o*in : (o+1)*in]
				sum := 0.0
				for i, xv := range xr {
					sum += xv * wr[i]
				}
				d[s*out+o] = sum
			}
		}
	})
	return newVal(n.Type(), d), nil
}

// evalMoeSum computes out[t, :] = Σ_j w[t, j]·y[t, j, :] in float64, slots in order.
func evalMoeSum(c *ctx, n *ir.Node, a []*val) (*val, error) {
	y, w := a[0], a[1]
	rows, k, dim := y.t.Shape[0], y.t.Shape[1], y.t.Shape[2]
	d := make([]float64, rows*dim)
	for t := range rows {
		for j := range k {
			wt := w.d[t*k+j]
			for i := range dim {
				d[t*dim+i] += wt * y.d[(t*k+j)*dim+i]
			}
		}
	}
	return newVal(n.Type(), d), nil
}
