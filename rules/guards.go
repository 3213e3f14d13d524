package rules

import (
	"math"
	"strconv"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// Guards: conditions on a match, written in Go and named in rule files (`if is_param(?w)`).
// Arguments are pattern variables (classes or attribute values) or literals, as written.

// classArg returns the class bound to a variable argument.
func classArg(m egraph.Match, arg string) (egraph.Id, bool) { return m.Subst.Class(egraph.Var(arg)) }

// attrArg returns an attribute variable's value, or the literal itself.
func attrArg(m egraph.Match, arg string) (string, bool) {
	if len(arg) > 0 && arg[0] == '?' {
		return m.Subst.Attr(egraph.Var(arg))
	}
	return arg, true
}

// scalarValue returns the value of a class known to be a one-element constant.
func scalarValue(g *egraph.EGraph, id egraph.Id) (float64, ir.DType, bool) {
	v := info(g, id).Value
	if v == nil || v.NumElements() != 1 {
		return 0, 0, false
	}
	return v.Float64(0), v.Type.DType, true
}

// roundTo rounds x to dtype d as a tensor of that dtype stores it.
func roundTo(d ir.DType, x float64) float64 {
	return ir.TensorFromFloat64s(ir.T(d), []float64{x}).Float64(0)
}

func (a *adapter) guards() map[string]Guard {
	return map[string]Guard{
		// is_param: the class depends on parameters and constants only, so the lowering stage
		// computes it at compile time (a weight, or a concatenation of weights).
		"is_param": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			return ok && info(g, id).Static
		}},
		// not_last_axis(?a, ?x): axis ?a of ?x (negative: from the end) is not its last.
		"not_last_axis": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[1])
			a, ok2 := attrArg(m, args[0])
			ax, err := strconv.Atoi(a)
			if !ok || !ok2 || err != nil {
				return false
			}
			r := info(g, id).Type().Shape.Rank()
			n, err := ir.NormAxis(ax, r)
			return err == nil && n < r-1
		}},
		// rank(?x, n): ?x has rank n.
		"rank": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			n, err := strconv.Atoi(args[1])
			return ok && err == nil && info(g, id).Type().Shape.Rank() == n
		}},
		// last_dim_at_most(?x, n): the last axis of ?x has at most n elements.
		"last_dim_at_most": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			n, err := strconv.Atoi(args[1])
			if !ok || err != nil {
				return false
			}
			s := info(g, id).Type().Shape
			return s.Rank() > 0 && s[s.Rank()-1] <= n
		}},
		// scalar_const(?c): ?c is a known one-element constant.
		"scalar_const": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			if !ok {
				return false
			}
			_, _, ok = scalarValue(g, id)
			return ok
		}},
		// const_eq(?c, v): ?c is a one-element constant equal to v rounded to ?c's dtype (so
		// 0.7071067811865476 matches Decompose's f32 and f16 spellings of 1/√2).
		"const_eq": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			if !ok {
				return false
			}
			v, d, ok := scalarValue(g, id)
			want, err := strconv.ParseFloat(args[1], 64)
			return ok && err == nil && v == roundTo(d, want)
		}},
		// layout_perm(?p): ?p takes nchw to nhwc ([0,2,3,1]) or back ([0,3,1,2]).
		"layout_perm": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			s, ok := attrArg(m, args[0])
			return ok && (s == "[0,2,3,1]" || s == "[0,3,1,2]")
		}},
		// not_kv_cache(?x): ?x is not a KV cache: its class holds no state and no write to one
		// (cache_write, rope_cache_write, cache_scatter). A layout rule offering another layout
		// of an attention operand behind a transpose uses it: for a cache that copy would be
		// the whole cache every call.
		"not_kv_cache": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			if !ok {
				return false
			}
			for _, n := range g.Nodes(id) {
				switch ir.Op(n.Op) {
				case ir.State, ir.CacheWrite, ir.RopeCacheWrite, ir.CacheScatter:
					return false
				}
			}
			return true
		}},
		// same_dtype(?a, ?b): two classes hold tensors of one dtype (a product with its
		// operands swapped takes the other's dtype for its result).
		"same_dtype": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			x, ok1 := classArg(m, args[0])
			y, ok2 := classArg(m, args[1])
			return ok1 && ok2 && info(g, x).Type().DType == info(g, y).Type().DType
		}},
		// identity_perm(?p): the permutation leaves every axis in place.
		"identity_perm": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			s, ok := attrArg(m, args[0])
			if !ok {
				return false
			}
			p, err := parseInts(s)
			if err != nil {
				return false
			}
			for i, v := range p {
				if v != i {
					return false
				}
			}
			return true
		}},
		// same_type_as_root(?x): ?x has the type of the class the (first) left term matched, so
		// the op in between changes nothing (a reshape or expand to its own shape).
		"same_type_as_root": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			return ok && slicesEqualTypes(info(g, id).Types, info(g, m.Roots[0]).Types)
		}},
		// distinct(?a, ?b): two class variables matched different classes.
		"distinct": {Args: 2, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			x, ok1 := classArg(m, args[0])
			y, ok2 := classArg(m, args[1])
			return ok1 && ok2 && g.Find(x) != g.Find(y)
		}},
		// finite_scalar(?c): a one-element constant that is finite and non-zero (safe to divide
		// by and to move across a matmul).
		"finite_scalar": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			if !ok {
				return false
			}
			v, _, ok := scalarValue(g, id)
			return ok && v != 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
		}},
		// float(?x): ?x is a floating-point tensor.
		"float": {Args: 1, Check: func(g *egraph.EGraph, m egraph.Match, args []string) bool {
			id, ok := classArg(m, args[0])
			return ok && info(g, id).Type().DType.IsFloat()
		}},
	}
}

func slicesEqualTypes(a, b []ir.Type) bool {
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
