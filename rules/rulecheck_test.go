package rules

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// Every rule is checked by the reference interpreter: its recipe below builds the rule's left
// side on random shapes (odd sizes, non-power-of-two head counts) and random values, the rule
// (and only it, plus the rules its left side is written in terms of) is run on the e-graph, the
// right side is extracted (nodes the rule added are the cheapest), and both graphs are evaluated
// and compared. TestEveryRuleHasACheck fails for a rule without a recipe.

// caseGen builds one instance of a left side.
type caseGen struct {
	t   *testing.T
	rng *rand.Rand
	b   *ir.Builder
	env interp.Env
	n   int
}

func (c *caseGen) pick(vals ...int) int { return vals[c.rng.IntN(len(vals))] }

// dim draws a dimension, odd sizes included.
func (c *caseGen) dim() int { return c.pick(1, 2, 3, 5, 6, 7, 9) }

func (c *caseGen) randTensor(t ir.Type) *ir.Tensor {
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		v[i] = c.rng.NormFloat64()
	}
	return ir.TensorFromFloat64s(t, v)
}

func (c *caseGen) name(prefix string) string { c.n++; return fmt.Sprintf("%s%d", prefix, c.n) }

// in adds an f32 input with random values.
func (c *caseGen) in(shape ...int) ir.Value {
	t := ir.T(ir.F32, shape...)
	n := c.name("x")
	v, err := c.b.Input(n, t)
	if err != nil {
		c.t.Fatal(err)
	}
	c.env.Inputs[n] = c.randTensor(t)
	return v
}

// i32 adds an i32 scalar input with the given value (a position or a length).
func (c *caseGen) i32(val int) ir.Value {
	n := c.name("n")
	v, err := c.b.Input(n, ir.T(ir.I32))
	if err != nil {
		c.t.Fatal(err)
	}
	c.env.Inputs[n] = ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(val)})
	return v
}

// param adds an f32 parameter with random values.
func (c *caseGen) param(shape ...int) ir.Value {
	t := ir.T(ir.F32, shape...)
	n := c.name("w")
	c.env.Params[n] = c.randTensor(t)
	return c.b.Param(n, t)
}

// state adds an f32 state tensor with random values.
func (c *caseGen) state(shape ...int) ir.Value {
	t := ir.T(ir.F32, shape...)
	n := c.name("s")
	c.env.State[n] = c.randTensor(t)
	return c.b.State(n, t)
}

func (c *caseGen) scalar(v float64) ir.Value { return c.b.Scalar(ir.F32, v) }

func (c *caseGen) op(op ir.Op, a ir.Attrs, args ...ir.Value) ir.Value {
	v, err := c.b.Op(op, a, args...)
	if err != nil {
		c.t.Fatalf("recipe: %s: %v", op, err)
	}
	return v
}

// dec adds op's composition (ir.Decompose).
func (c *caseGen) dec(op ir.Op, a ir.Attrs, args ...ir.Value) ir.Value {
	v, err := ir.Decompose(c.b, op, a, args...)
	if err != nil {
		c.t.Fatalf("recipe: decompose %s: %v", op, err)
	}
	return v
}

// perm returns a random permutation of 0..n-1.
func (c *caseGen) perm(n int) []int { return c.rng.Perm(n) }

// ruleCase builds a rule's left side and returns the values to compare. also names rules the
// left side needs first (attention is matched on a recognised softmax).
type ruleCase struct {
	build func(c *caseGen) []ir.Value
	also  []string
}

// attentionInputs draws q, k, v in the layout's order and the attention attributes.
func attentionInputs(c *caseGen, lay string) (q, k, v ir.Value, at ir.Attrs, sq, skv int) {
	return attentionInputsIn(c, ir.AttnLayouts{Q: lay, K: lay, V: lay})
}

// attentionInputsIn draws q, k, v each in its own layout and the attention attributes.
func attentionInputsIn(c *caseGen, lay ir.AttnLayouts) (q, k, v ir.Value, at ir.Attrs, sq, skv int) {
	hkv := c.pick(1, 2, 3)
	hq := hkv * c.pick(1, 2, 3)
	d := c.pick(2, 3, 4, 6)
	sq = c.pick(1, 3, 5)
	skv = sq + c.pick(0, 2, 4)
	at = ir.Attrs{"layout": lay.Q, "k_layout": lay.K, "v_layout": lay.V, "causal": c.rng.IntN(2) == 0}
	if c.rng.IntN(3) == 0 {
		at["window"] = c.pick(1, 2, 3)
	}
	if c.rng.IntN(2) == 0 {
		at["scale"] = 0.3 + c.rng.Float64()
	}
	return c.in(ir.LayoutShape(lay.Q, sq, hq, d)...), c.in(ir.LayoutShape(lay.K, skv, hkv, d)...),
		c.in(ir.LayoutShape(lay.V, skv, hkv, d)...), at, sq, skv
}

// randomLayouts draws a layout for each operand (K transposed included).
func randomLayouts(c *caseGen) ir.AttnLayouts {
	two := []string{"shd", "hsd"}
	return ir.AttnLayouts{Q: two[c.rng.IntN(2)], K: []string{"shd", "hsd", "hds"}[c.rng.IntN(3)], V: two[c.rng.IntN(2)]}
}

// attentionOperand is the left side of a per-operand layout rule: operand i (0 q, 1 k, 2 v)
// read in layout view as transpose[perm] of a tensor in layout data (the fold); with rev the
// right side's form, the operand in layout data as it is (and for q the result transposed back
// to q's layout, as the rule writes it). The other operands take random layouts.
func attentionOperand(c *caseGen, i int, view, data string, perm []int, rev, withLen bool) []ir.Value {
	lay := randomLayouts(c)
	l := []*string{&lay.Q, &lay.K, &lay.V}
	*l[i] = data
	q, k, v, at, sq, skv := attentionInputsIn(c, lay)
	args := []ir.Value{q, k, v}
	if withLen {
		args = append(args, c.i32(sq+c.rng.IntN(skv-sq+1)))
	}
	if rev {
		out := c.op(ir.Attention, at, args...)
		if i == 0 {
			out = c.op(ir.Transpose, ir.Attrs{"perm": perm}, out)
		}
		return []ir.Value{out}
	}
	args[i] = c.op(ir.Transpose, ir.Attrs{"perm": perm}, args[i])
	at[[]string{"layout", "k_layout", "v_layout"}[i]] = view
	return []ir.Value{c.op(ir.Attention, at, args...)}
}

// moeGLUCase is act(moe_linear(x, Wg, ids))·moe_linear(x, Wu, ids), the ids routed from random
// logits.
func moeGLUCase(c *caseGen, act ir.Op) []ir.Value {
	n, k, e, in, out := c.dim(), c.pick(1, 2), c.pick(2, 3, 5), c.dim(), c.dim()
	ids := c.op(ir.MoeRoute, ir.Attrs{"k": k}, c.in(n, e))
	x := c.in(n, in)
	g := c.op(act, nil, c.op(ir.MoeLinear, nil, x, c.param(e, out, in), ids))
	return []ir.Value{c.op(ir.Mul, nil, g, c.op(ir.MoeLinear, nil, x, c.param(e, out, in), ids))}
}

// ropeInput draws x for rope with a random layout and the rope attributes.
func ropeInput(c *caseGen, seqAxis0 bool) (ir.Value, ir.Attrs, int) {
	s, h, d := c.pick(1, 3, 5), c.pick(1, 2, 3), 2*c.pick(1, 2, 3, 5)
	at := ir.Attrs{"theta": float64(c.pick(10000, 500000, 1000000)), "mode": []string{"half", "interleaved"}[c.rng.IntN(2)]}
	switch c.rng.IntN(4) {
	case 0:
		at["scaling"], at["factor"] = "linear", 4.0
	case 1:
		// Wavelengths 2π·theta^(2i/d) from 6.3 up: with d = 10 and theta = 10000, two of them
		// lie between original_ctx/high_freq_factor = 25 and original_ctx = 1000 (blended), two
		// above (divided by factor).
		d = 10
		at["theta"] = 10000.0
		at["scaling"], at["factor"], at["low_freq_factor"], at["high_freq_factor"], at["original_ctx"] = "llama3", 8.0, 1.0, 40.0, 1000
	}
	if !seqAxis0 && c.rng.IntN(2) == 0 {
		at["seq_axis"] = 1
		return c.in(h, s, d), at, s
	}
	return c.in(s, h, d), at, s
}

var ruleCases = map[string]ruleCase{
	// algebra
	"transpose-transpose": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim(), c.dim(), c.dim())
		return []ir.Value{c.op(ir.Transpose, ir.Attrs{"perm": c.perm(3)}, c.op(ir.Transpose, ir.Attrs{"perm": c.perm(3)}, x))}
	}},
	"transpose-identity": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Transpose, ir.Attrs{"perm": []int{0, 1, 2}}, c.in(c.dim(), c.dim(), c.dim()))}
	}},
	"reshape-reshape": {build: func(c *caseGen) []ir.Value {
		a, b, d := c.dim(), c.dim(), c.dim()
		return []ir.Value{c.op(ir.Reshape, ir.Attrs{"shape": []int{b, a * d}}, c.op(ir.Reshape, ir.Attrs{"shape": []int{a * b * d}}, c.in(a, b, d)))}
	}},
	"reshape-identity": {build: func(c *caseGen) []ir.Value {
		a, b := c.dim(), c.dim()
		return []ir.Value{c.op(ir.Reshape, ir.Attrs{"shape": []int{a, -1}}, c.in(a, b))}
	}},
	"expand-identity": {build: func(c *caseGen) []ir.Value {
		a, b := c.dim(), c.dim()
		return []ir.Value{c.op(ir.Expand, ir.Attrs{"shape": []int{a, b}}, c.in(a, b))}
	}},
	"cast-identity": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Cast, ir.Attrs{"to": "f32"}, c.in(c.dim(), c.dim()))}
	}},
	"slice-identity": {build: func(c *caseGen) []ir.Value {
		a, b := c.dim(), c.dim()
		return []ir.Value{c.op(ir.Slice, ir.Attrs{"axis": 1, "start": 0, "end": b + c.pick(0, 3)}, c.in(a, b))}
	}},
	"slice-slice": {build: func(c *caseGen) []ir.Value {
		n := c.dim() + 6
		x := c.in(c.dim(), n)
		s2 := c.rng.IntN(3)
		e2 := n - c.rng.IntN(3)
		inner := c.op(ir.Slice, ir.Attrs{"axis": c.pick(1, -1), "start": s2, "end": e2}, x)
		l := e2 - s2
		s1 := c.rng.IntN(2)
		return []ir.Value{c.op(ir.Slice, ir.Attrs{"axis": -1, "start": s1, "end": s1 + 1 + c.rng.IntN(l-s1)}, inner)}
	}},
	"rows-linear": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim()+2, c.dim())
		return []ir.Value{rowsSlice(c, c.op(ir.Linear, nil, x, c.param(c.dim(), x.Type().Shape[1])))}
	}},
	"rows-linear-bias": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim()+2, c.dim(), c.dim())
		n := c.dim()
		return []ir.Value{rowsSlice(c, c.op(ir.Linear, nil, x, c.param(n, x.Type().Shape[2]), c.param(n)))}
	}},
	"rows-rmsnorm": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim()+2, c.dim()+1)
		return []ir.Value{rowsSlice(c, c.op(ir.RMSNorm, ir.Attrs{"eps": 1e-5}, x, c.param(x.Type().Shape[1])))}
	}},
	"concat-one": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Concat, ir.Attrs{"axis": 1}, c.in(c.dim(), c.dim()))}
	}},
	"mul-one": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Mul, nil, c.in(c.dim(), c.dim()), c.scalar(1))}
	}},
	"div-one": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Div, nil, c.in(c.dim(), c.dim()), c.scalar(1))}
	}},
	"add-zero": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Add, nil, c.in(c.dim(), c.dim()), c.scalar(0))}
	}},
	"sub-zero": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Sub, nil, c.in(c.dim(), c.dim()), c.scalar(0))}
	}},
	"neg-neg": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Neg, nil, c.op(ir.Neg, nil, c.in(c.dim(), c.dim())))}
	}},
	"linear-matmul": {build: func(c *caseGen) []ir.Value {
		in := c.dim()
		return []ir.Value{c.op(ir.Linear, nil, c.in(c.dim(), c.dim(), in), c.param(c.dim(), in))}
	}},
	"linear-matmul-rev": {build: func(c *caseGen) []ir.Value {
		in := c.dim()
		return []ir.Value{c.op(ir.Matmul, ir.Attrs{"tb": true}, c.in(c.dim(), in), c.param(c.dim(), in))}
	}},
	"matmul-transpose-b": {build: func(c *caseGen) []ir.Value {
		k := c.dim()
		w := c.in(c.dim(), k)
		return []ir.Value{c.op(ir.Matmul, nil, c.in(c.dim(), k), c.op(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, w))}
	}},
	"matmul-transpose-b3": {build: func(c *caseGen) []ir.Value {
		b, k := c.dim(), c.dim()
		w := c.in(b, c.dim(), k)
		return []ir.Value{c.op(ir.Matmul, nil, c.in(b, c.dim(), k), c.op(ir.Transpose, ir.Attrs{"perm": []int{0, 2, 1}}, w))}
	}},
	"matmul-transpose-out": {build: func(c *caseGen) []ir.Value {
		k := c.dim()
		mm := c.op(ir.Matmul, ir.Attrs{"tb": true}, c.in(c.dim(), k), c.in(c.dim(), k))
		return []ir.Value{c.op(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, mm)}
	}},
	"transpose-split": {build: func(c *caseGen) []ir.Value {
		// rows [a, q·r] split into [a, q, r] and moved to [q, r, a]
		a, q, r := c.dim(), c.pick(1, 2, 3), c.pick(2, 3, 4)
		x := c.op(ir.Reshape, ir.Attrs{"shape": []int{a, q, r}}, c.in(a, q*r))
		return []ir.Value{c.op(ir.Transpose, ir.Attrs{"perm": []int{1, 2, 0}}, x)}
	}},
	"matmul-transpose-a": {build: func(c *caseGen) []ir.Value {
		k := c.dim()
		x := c.in(k, c.dim())
		return []ir.Value{c.op(ir.Matmul, ir.Attrs{"tb": c.rng.IntN(2) == 0}, c.op(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x), c.in(k, k))}
	}},
	"scale-fold": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim(), c.dim())
		return []ir.Value{c.op(ir.Mul, nil, c.op(ir.Mul, nil, x, c.scalar(c.rng.NormFloat64())), c.scalar(c.rng.NormFloat64()))}
	}},
	"div-to-mul": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.op(ir.Div, nil, c.in(c.dim(), c.dim()), c.scalar(0.5+c.rng.Float64()))}
	}},
	"scale-matmul": {build: func(c *caseGen) []ir.Value {
		k := c.dim()
		mm := c.op(ir.Matmul, ir.Attrs{"tb": true}, c.in(c.dim(), c.dim(), k), c.in(c.dim(), k))
		return []ir.Value{c.op(ir.Mul, nil, mm, c.scalar(c.rng.NormFloat64()))}
	}},
	"scale-matmul-rev": {build: func(c *caseGen) []ir.Value {
		k := c.dim()
		x := c.op(ir.Mul, nil, c.in(c.dim(), k), c.scalar(c.rng.NormFloat64()))
		return []ir.Value{c.op(ir.Matmul, nil, x, c.in(k, c.dim()))}
	}},

	// recognition
	"silu": {build: func(c *caseGen) []ir.Value { return []ir.Value{c.dec(ir.Silu, nil, c.in(c.dim(), c.dim()))} }},
	"silu-swap": {build: func(c *caseGen) []ir.Value {
		x := c.in(c.dim(), c.dim())
		return []ir.Value{c.op(ir.Mul, nil, c.op(ir.Sigmoid, nil, x), x)}
	}},
	"gelu":      {build: func(c *caseGen) []ir.Value { return []ir.Value{c.dec(ir.Gelu, nil, c.in(c.dim(), c.dim()))} }},
	"gelu-tanh": {build: func(c *caseGen) []ir.Value { return []ir.Value{c.dec(ir.GeluTanh, nil, c.in(c.dim(), c.dim()))} }},
	"softmax": {build: func(c *caseGen) []ir.Value {
		return []ir.Value{c.dec(ir.Softmax, ir.Attrs{"axis": c.pick(-1, 0, 1, 2)}, c.in(c.dim(), c.dim(), c.dim()))}
	}},
	"rmsnorm": {build: func(c *caseGen) []ir.Value {
		d := c.dim()
		return []ir.Value{c.dec(ir.RMSNorm, ir.Attrs{"eps": []float64{1e-5, 1e-6, 0.1}[c.rng.IntN(3)]}, c.in(c.dim(), d), c.param(d))}
	}},
	"layernorm": {also: []string{"rmsnorm"}, build: func(c *caseGen) []ir.Value {
		d := c.dim() + 1
		return []ir.Value{c.dec(ir.LayerNorm, ir.Attrs{"eps": 1e-5}, c.in(c.dim(), d), c.param(d), c.param(d))}
	}},
	"linear-bias": {build: func(c *caseGen) []ir.Value {
		in, out := c.dim(), c.dim()
		return []ir.Value{c.op(ir.Add, nil, c.op(ir.Linear, nil, c.in(c.dim(), in), c.param(out, in)), c.param(out))}
	}},
	"linear-vector": {build: func(c *caseGen) []ir.Value {
		in := c.dim()
		return []ir.Value{c.dec(ir.Linear, nil, c.in(in), c.param(c.dim(), in))}
	}},
	"moe-route": {build: func(c *caseGen) []ir.Value {
		e := c.pick(2, 3, 8, 9)
		x := c.in(c.dim(), e)
		ids := c.op(ir.ArgTopK, ir.Attrs{"k": 1 + c.rng.IntN(e)}, x)
		return []ir.Value{ids, c.op(ir.Softmax, ir.Attrs{"axis": -1}, c.op(ir.TakeAlongAxis, nil, x, ids))}
	}},
	"moe-route-probs": {build: func(c *caseGen) []ir.Value {
		e := c.pick(2, 3, 8, 9)
		x := c.in(c.dim(), e)
		ids := c.op(ir.ArgTopK, ir.Attrs{"k": 1 + c.rng.IntN(e)}, x)
		return []ir.Value{ids, c.op(ir.TakeAlongAxis, nil, c.op(ir.Softmax, ir.Attrs{"axis": -1}, x), ids)}
	}},
	"attention": {also: []string{"softmax"}, build: func(c *caseGen) []ir.Value {
		// each operand in a random layout: the decomposition transposes shd operands to heads
		// first and reads K transposed (hds) as the scores' matmul operand untransposed
		q, k, v, at, sq, skv := attentionInputsIn(c, randomLayouts(c))
		args := []ir.Value{q, k, v}
		if c.rng.IntN(3) > 0 {
			args = append(args, c.i32(sq+c.rng.IntN(skv-sq+1)))
		}
		return []ir.Value{c.dec(ir.Attention, at, args...)}
	}},
	"rope": {build: func(c *caseGen) []ir.Value {
		x, at, s := ropeInput(c, false)
		return []ir.Value{c.dec(ir.Rope, at, x, c.i32(c.rng.IntN(50)+s))}
	}},

	// fusion
	"add-rmsnorm": {build: func(c *caseGen) []ir.Value {
		r, d := c.dim(), c.dim()
		s := c.op(ir.Add, nil, c.in(r, d), c.in(r, d))
		return []ir.Value{s, c.op(ir.RMSNorm, ir.Attrs{"eps": 1e-5}, s, c.param(d))}
	}},
	"rmsnorm-linear": {build: func(c *caseGen) []ir.Value {
		d := c.dim()
		h := c.op(ir.RMSNorm, ir.Attrs{"eps": 1e-6}, c.in(c.dim(), d), c.param(d))
		return []ir.Value{c.op(ir.Linear, nil, h, c.param(c.dim(), d))}
	}},
	"rmsnorm-linear-cast": {build: func(c *caseGen) []ir.Value {
		d := c.dim()
		h := c.op(ir.RMSNorm, ir.Attrs{"eps": 1e-6}, c.in(c.dim(), d), c.param(d))
		h16 := c.op(ir.Cast, ir.Attrs{"to": "f16"}, h)
		return []ir.Value{c.op(ir.Linear, nil, h16, c.param(c.dim(), d))}
	}},
	"rope-norm": {build: func(c *caseGen) []ir.Value {
		x, at, s := ropeInput(c, false)
		d := x.Type().Shape[2]
		n := c.op(ir.RMSNorm, ir.Attrs{"eps": 1e-6}, x, c.param(d))
		return []ir.Value{c.op(ir.Rope, at, n, c.i32(c.rng.IntN(9)+s))}
	}},
	"rope-cache-write": {build: func(c *caseGen) []ir.Value {
		x, at, s := ropeInput(c, true)
		sh := x.Type().Shape
		ctx := s + c.pick(0, 1, 4)
		pos := c.i32(c.rng.IntN(ctx - s + 1))
		return []ir.Value{c.op(ir.CacheWrite, nil, c.state(ctx, sh[1], sh[2]), c.op(ir.Rope, at, x, pos), pos)}
	}},
	"moe-linear-sum": {build: func(c *caseGen) []ir.Value {
		n, k, e, in, out := c.dim(), c.pick(1, 2), c.pick(2, 3, 5), c.dim(), c.dim()
		r := c.op(ir.MoeRoute, ir.Attrs{"k": k}, c.in(n, e))
		x := c.in(n, in)
		if c.rng.IntN(2) == 0 {
			x = c.in(n, k, in) // a row per slot (the down projection's input)
		}
		y := c.op(ir.MoeLinear, nil, x, c.param(e, out, in), r)
		return []ir.Value{c.op(ir.MoeSum, nil, y, ir.Value{Node: r.Node, Out: 1})}
	}},
	"moe-glu-silu":      {build: func(c *caseGen) []ir.Value { return moeGLUCase(c, ir.Silu) }},
	"moe-glu-gelu-tanh": {build: func(c *caseGen) []ir.Value { return moeGLUCase(c, ir.GeluTanh) }},
	"matmul-bias": {build: func(c *caseGen) []ir.Value {
		in, out := c.dim(), c.dim()
		mm := c.op(ir.Matmul, ir.Attrs{"tb": true}, c.in(c.dim(), in), c.param(out, in))
		return []ir.Value{c.op(ir.Add, nil, mm, c.param(out))}
	}},

	// layout
	"attention-q-shd":             {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 0, "hsd", "shd", []int{1, 0, 2}, false, false) }},
	"attention-q-shd-rev":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 0, "hsd", "shd", []int{1, 0, 2}, true, false) }},
	"attention-q-shd-len":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 0, "hsd", "shd", []int{1, 0, 2}, false, true) }},
	"attention-q-shd-len-rev":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 0, "hsd", "shd", []int{1, 0, 2}, true, true) }},
	"attention-v-shd":             {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 2, "hsd", "shd", []int{1, 0, 2}, false, false) }},
	"attention-v-shd-rev":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 2, "hsd", "shd", []int{1, 0, 2}, true, false) }},
	"attention-v-shd-len":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 2, "hsd", "shd", []int{1, 0, 2}, false, true) }},
	"attention-v-shd-len-rev":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 2, "hsd", "shd", []int{1, 0, 2}, true, true) }},
	"attention-k-shd":             {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "shd", []int{1, 0, 2}, false, false) }},
	"attention-k-shd-rev":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "shd", []int{1, 0, 2}, true, false) }},
	"attention-k-shd-len":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "shd", []int{1, 0, 2}, false, true) }},
	"attention-k-shd-len-rev":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "shd", []int{1, 0, 2}, true, true) }},
	"attention-k-hds":             {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "hds", []int{0, 2, 1}, false, false) }},
	"attention-k-hds-rev":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "hds", []int{0, 2, 1}, true, false) }},
	"attention-k-hds-len":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "hds", []int{0, 2, 1}, false, true) }},
	"attention-k-hds-len-rev":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hsd", "hds", []int{0, 2, 1}, true, true) }},
	"attention-k-shd-hds":         {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hds", "shd", []int{1, 2, 0}, false, false) }},
	"attention-k-shd-hds-rev":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hds", "shd", []int{1, 2, 0}, true, false) }},
	"attention-k-shd-hds-len":     {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hds", "shd", []int{1, 2, 0}, false, true) }},
	"attention-k-shd-hds-len-rev": {build: func(c *caseGen) []ir.Value { return attentionOperand(c, 1, "hds", "shd", []int{1, 2, 0}, true, true) }},
	"attention-shd":               {build: func(c *caseGen) []ir.Value { return attentionHSD(c, false) }},
	"attention-shd-len":           {build: func(c *caseGen) []ir.Value { return attentionHSD(c, true) }},
	"attention-shd-rev":           {build: func(c *caseGen) []ir.Value { return attentionSHD(c, false) }},
	"attention-shd-len-rev":       {build: func(c *caseGen) []ir.Value { return attentionSHD(c, true) }},
	"merge-linears": {build: func(c *caseGen) []ir.Value {
		in := c.dim()
		x := c.in(c.dim(), in)
		var out []ir.Value
		for range c.pick(2, 3) {
			out = append(out, c.op(ir.Linear, nil, x, c.param(c.dim(), in)))
		}
		return out
	}},
	"merge-linears-bias": {build: func(c *caseGen) []ir.Value {
		in := c.dim()
		x := c.in(c.dim(), c.dim(), in)
		var out []ir.Value
		for range c.pick(2, 3) {
			o := c.dim()
			out = append(out, c.op(ir.Linear, nil, x, c.param(o, in), c.param(o)))
		}
		return out
	}},
}

var heads = ir.Attrs{"perm": []int{1, 0, 2}}

// attentionHSD: heads-first attention of transposed sequence-first tensors.
func attentionHSD(c *caseGen, withLen bool) []ir.Value {
	q, k, v, at, sq, skv := attentionInputs(c, "shd")
	at["layout"], at["k_layout"], at["v_layout"] = "hsd", "hsd", "hsd"
	args := []ir.Value{c.op(ir.Transpose, heads, q), c.op(ir.Transpose, heads, k), c.op(ir.Transpose, heads, v)}
	if withLen {
		args = append(args, c.i32(sq+c.rng.IntN(skv-sq+1)))
	}
	return []ir.Value{c.op(ir.Attention, at, args...)}
}

// attentionSHD: the transpose of sequence-first attention.
func attentionSHD(c *caseGen, withLen bool) []ir.Value {
	q, k, v, at, sq, skv := attentionInputs(c, "shd")
	args := []ir.Value{q, k, v}
	if withLen {
		args = append(args, c.i32(sq+c.rng.IntN(skv-sq+1)))
	}
	return []ir.Value{c.op(ir.Transpose, heads, c.op(ir.Attention, at, args...))}
}

// rowsSlice is a slice of some rows of x along axis 0 (the last ones, counted from the end, or
// a span from the start), the left side of the rows rules.
func rowsSlice(c *caseGen, x ir.Value) ir.Value {
	r := x.Type().Shape[0]
	if c.rng.IntN(2) == 0 {
		return c.op(ir.Slice, ir.Attrs{"axis": 0, "start": -c.pick(1, 2), "end": r}, x)
	}
	s := c.rng.IntN(r - 1)
	return c.op(ir.Slice, ir.Attrs{"axis": 0, "start": s, "end": s + 1 + c.rng.IntN(r-s-1)}, x)
}

// compiledRuleNames returns the names of every compiled rewrite of the rule files.
func compiledRuleNames(t *testing.T) []string {
	rws, err := newAdapter().rewrites(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rw := range rws {
		names = append(names, rw.Name)
	}
	return names
}

func TestEveryRuleHasACheck(t *testing.T) {
	names := compiledRuleNames(t)
	for _, n := range names {
		if _, ok := ruleCases[n]; !ok {
			t.Errorf("rule %s has no interpreter check: add a recipe to ruleCases", n)
		}
	}
	for n := range ruleCases {
		if !slices.Contains(names, n) {
			t.Errorf("recipe %s checks no rule", n)
		}
	}
}

// TestRulesAgainstInterpreter runs every rule's recipe on several random instances.
func TestRulesAgainstInterpreter(t *testing.T) {
	names := compiledRuleNames(t)
	for _, name := range names {
		rc, ok := ruleCases[name]
		if !ok {
			continue // TestEveryRuleHasACheck reports it
		}
		t.Run(name, func(t *testing.T) {
			for seed := range 10 {
				if checkRule(t, name, rc, uint64(seed)) == 0 {
					t.Errorf("seed %d: rule %s did not apply to its own left side", seed, name)
				}
			}
		})
	}
}

// checkRule builds one instance, applies the rule, extracts its right side and compares. It
// returns how many matches the rule applied.
func checkRule(t *testing.T, name string, rc ruleCase, seed uint64) int {
	t.Helper()
	c := &caseGen{t: t, rng: rand.New(rand.NewPCG(seed, 7)), b: ir.NewBuilder("lhs"),
		env: interp.Env{Inputs: map[string]*ir.Tensor{}, Params: map[string]*ir.Tensor{}, State: map[string]*ir.Tensor{}}}
	outs := rc.build(c)
	for i, v := range outs {
		if err := c.b.Output(fmt.Sprintf("out%d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	f := c.b.Function()

	a := newAdapter()
	all, err := a.rewrites(nil)
	if err != nil {
		t.Fatal(err)
	}
	var rws []*egraph.Rewrite
	for _, rw := range all {
		if rw.Name == name || slices.Contains(rc.also, rw.Name) {
			rws = append(rws, rw)
		}
	}
	vals, err := a.addFunction(f)
	if err != nil {
		t.Fatal(err)
	}
	r := &egraph.Runner{IterLimit: 4, NodeLimit: 10_000}
	rep, err := r.Run(context.Background(), a.g, rws)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	applied := 0
	for _, s := range rep.RuleMatches() {
		if s.Name == name {
			applied = s.Applied
		}
	}
	// The right side: nodes the checked rules added cost almost nothing, the rest 1.
	cost := func(g *egraph.EGraph, _ egraph.Id, n egraph.Node) float64 {
		if n.Origin() == name || slices.Contains(rc.also, n.Origin()) {
			return 1e-3
		}
		if n.Op == projOut0 || n.Op == projOut1 || ir.Op(n.Op).Info().Kind == ir.KindSource {
			return 0
		}
		return 1
	}
	x, err := egraph.Extract(a.g, roots(f, vals), cost)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := a.buildFunction(f, vals, []*egraph.Extraction{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The extraction must be the right side: a node the rule built, or (for a right side that
	// is a variable of the left) a smaller graph.
	fromRule := slices.ContainsFunc(g.Nodes, func(n *ir.Node) bool { return n.Rule == name })
	if applied > 0 && !fromRule && len(g.Nodes) >= len(f.Nodes) {
		t.Errorf("seed %d: rule applied but the extracted graph is the left side:\n%s", seed, funcString(g))
	}
	want := evalOutputs(t, f, c.env)
	got := evalOutputs(t, g, c.env)
	for i := range want {
		if err := closeEnough(got[i], want[i], 1e-5); err != nil {
			t.Errorf("seed %d: output %d: %v\nleft side:\n%sright side:\n%s", seed, i, err, funcString(f), funcString(g))
		}
	}
	return applied
}

func evalOutputs(t *testing.T, f *ir.Function, env interp.Env) []*ir.Tensor {
	t.Helper()
	vs := make([]ir.Value, len(f.Outputs))
	for i, o := range f.Outputs {
		vs[i] = o.Value
	}
	out, err := interp.EvalValues(f, env, vs...)
	if err != nil {
		t.Fatalf("%v\n%s", err, funcString(f))
	}
	return out
}

// closeEnough compares within tol relative to the larger of 1 and the largest magnitude.
func closeEnough(got, want *ir.Tensor, tol float64) error {
	if !got.Type.Equal(want.Type) {
		return fmt.Errorf("type %s, want %s", got.Type, want.Type)
	}
	g, w := got.Float64s(), want.Float64s()
	scale := 1.0
	for _, v := range w {
		if !math.IsInf(v, 0) {
			scale = math.Max(scale, math.Abs(v))
		}
	}
	for i := range w {
		if math.IsNaN(w[i]) != math.IsNaN(g[i]) || math.Abs(g[i]-w[i]) > tol*scale && g[i] != w[i] {
			return fmt.Errorf("element %d is %g, want %g (tolerance %g)", i, g[i], w[i], tol*scale)
		}
	}
	return nil
}

func funcString(f *ir.Function) string {
	var b strings.Builder
	for _, n := range f.Nodes {
		fmt.Fprintf(&b, "  %s", n)
		if n.Rule != "" {
			fmt.Fprintf(&b, "   (rule %s)", n.Rule)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestMergeOfDifferentTypesFails: a wrong rule that equates tensors of different types stops
// saturation with an error naming the rule and both types.
func TestMergeOfDifferentTypesFails(t *testing.T) {
	a := newAdapter()
	f, err := Parse("bad.rules", []byte("bad-transpose: (transpose[perm=[1,0]] ?x) => ?x\n"))
	if err != nil {
		t.Fatal(err)
	}
	rws, err := Compile(Env{Ops: opTable(), Canon: canonLiteral}, f)
	if err != nil {
		t.Fatal(err)
	}
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 3))
	if err := b.Output("y", b.MustOp(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.addFunction(b.Function()); err != nil {
		t.Fatal(err)
	}
	_, err = egraph.NewRunner().Run(context.Background(), a.g, rws)
	var me *egraph.MergeError
	if !errors.As(err, &me) || me.Rule != "bad-transpose" || !strings.Contains(err.Error(), "f32[3,2]") || !strings.Contains(err.Error(), "f32[2,3]") {
		t.Fatalf("got %v, want a merge error naming bad-transpose, f32[3,2] and f32[2,3]", err)
	}
}

// TestRuleFilesListed keeps the rule files grouped as documented.
func TestRuleFilesListed(t *testing.T) {
	files, err := RuleFiles()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if len(f.Rules) == 0 {
			t.Errorf("%s has no rules", f.Name)
		}
	}
	sort.Strings(names)
	if want := []string{"algebra.rules", "fusion.rules", "layout.rules", "moe.rules", "recognise.rules", "rows.rules"}; !slices.Equal(names, want) {
		t.Errorf("rule files %v, want %v", names, want)
	}
}
