package rules

import (
	"math"

	"github.com/vkc-project/vkc/ir"
)

// Recipes for the vision rules (fusion.rules' batch-norm folds, layout.rules' nchw/nhwc forms):
// random window geometry (kernels 1–3, strides and dilations 1–2, asymmetric pads, groups
// including depthwise) on odd image sizes.

var (
	toNHWC = ir.Attrs{"perm": []int{0, 2, 3, 1}}
	toNCHW = ir.Attrs{"perm": []int{0, 3, 1, 2}}
)

// window draws window attributes for a kernel of kh × kw; pads stay below the kernel so pools
// accept them too.
func (c *caseGen) window(kh, kw int) ir.Attrs {
	pad := func(k int) int { return c.rng.IntN(k) }
	return ir.Attrs{"strides": []int{c.pick(1, 2), c.pick(1, 2)}, "dilations": []int{c.pick(1, 2), c.pick(1, 2)},
		"pads": []int{pad(kh), pad(kw), pad(kh), pad(kw)}}
}

// image adds an activation input [n, ch, h, w] (nchw) or [n, h, w, ch] (nhwc).
func (c *caseGen) image(layout string, ch int) ir.Value {
	n, h, w := c.pick(1, 2), c.pick(5, 6, 7, 9), c.pick(5, 7, 8)
	return c.in(ir.ActivationShape(layout, n, ch, h, w)...)
}

// posParam adds an f32 parameter of positive values (a variance).
func (c *caseGen) posParam(n int) ir.Value {
	t := ir.T(ir.F32, n)
	name := c.name("var")
	v := c.randTensor(t).Float64s()
	for i := range v {
		v[i] = math.Abs(v[i]) + 0.05
	}
	c.env.Params[name] = ir.TensorFromFloat64s(t, v)
	return c.b.Param(name, t)
}

// conv draws a convolution of x (layout lay, cin channels): its attributes and weights.
func (c *caseGen) conv(lay string, cin int, bias bool) (ir.Attrs, []ir.Value, int) {
	groups := c.pick(1, 1, cin)
	cout := groups * c.pick(1, 2)
	kh, kw := c.pick(1, 2, 3), c.pick(1, 3)
	at := c.window(kh, kw)
	at["groups"], at["layout"] = groups, lay
	args := []ir.Value{c.param(cout, cin/groups, kh, kw)}
	if bias {
		args = append(args, c.param(cout))
	}
	return at, args, cout
}

func foldBatchNormCase(bias bool) ruleCase {
	return ruleCase{build: func(c *caseGen) []ir.Value {
		lay := []string{"nchw", "nhwc"}[c.rng.IntN(2)]
		cin := c.pick(1, 2, 3, 4)
		x := c.image(lay, cin)
		at, w, cout := c.conv(lay, cin, bias)
		y := c.op(ir.Conv2d, at, append([]ir.Value{x}, w...)...)
		bn := ir.Attrs{"eps": []float64{1e-5, 1e-3, 0.1}[c.rng.IntN(3)], "layout": lay}
		return []ir.Value{c.op(ir.BatchNorm, bn, y, c.param(cout), c.param(cout), c.param(cout), c.posParam(cout))}
	}}
}

// nchwCase builds op in nchw (rev: in nhwc between transposes) from args(x) of an nchw x.
func nchwCase(op ir.Op, rev bool, attrs func(c *caseGen, ch int) (ir.Attrs, []ir.Value)) ruleCase {
	return ruleCase{build: func(c *caseGen) []ir.Value {
		ch := c.pick(1, 2, 3, 5)
		x := c.image("nchw", ch)
		at, rest := attrs(c, ch)
		if !rev {
			at["layout"] = "nchw"
			return []ir.Value{c.op(op, at, append([]ir.Value{x}, rest...)...)}
		}
		at["layout"] = "nhwc"
		y := c.op(op, at, append([]ir.Value{c.op(ir.Transpose, toNHWC, x)}, rest...)...)
		return []ir.Value{c.op(ir.Transpose, toNCHW, y)}
	}}
}

func convAttrs(bias bool) func(c *caseGen, ch int) (ir.Attrs, []ir.Value) {
	return func(c *caseGen, ch int) (ir.Attrs, []ir.Value) {
		at, w, _ := c.conv("nchw", ch, bias)
		return at, w
	}
}

func poolAttrs(avg bool) func(c *caseGen, ch int) (ir.Attrs, []ir.Value) {
	return func(c *caseGen, ch int) (ir.Attrs, []ir.Value) {
		k := []int{c.pick(1, 2, 3), c.pick(2, 3)}
		at := c.window(k[0], k[1])
		at["kernel"], at["ceil_mode"] = k, c.rng.IntN(2) == 0
		if avg {
			at["count_include_pad"] = c.rng.IntN(2) == 0
		}
		return at, nil
	}
}

// layoutCase: op applied to transposed operands (rev: transposed op of the operands), binary
// ops with both operands transposed alike.
func layoutCase(op ir.Op, rev bool) ruleCase {
	return ruleCase{build: func(c *caseGen) []ir.Value {
		perm := []ir.Attrs{toNHWC, toNCHW}[c.rng.IntN(2)]
		a, b, d, e := c.dim(), c.dim(), c.dim(), c.dim()
		args := []ir.Value{c.in(a, b, d, e)}
		if op.Info().Kind == ir.KindBinary {
			args = append(args, c.in(a, b, d, e))
		}
		if rev {
			return []ir.Value{c.op(ir.Transpose, perm, c.op(op, nil, args...))}
		}
		for i := range args {
			args[i] = c.op(ir.Transpose, perm, args[i])
		}
		return []ir.Value{c.op(op, nil, args...)}
	}}
}

func init() {
	ruleCases["fold-batchnorm"] = foldBatchNormCase(true)
	ruleCases["fold-batchnorm-nobias"] = foldBatchNormCase(false)
	for _, rev := range []bool{false, true} {
		sfx := ""
		if rev {
			sfx = "-rev"
		}
		ruleCases["conv2d-nhwc"+sfx] = nchwCase(ir.Conv2d, rev, convAttrs(false))
		ruleCases["conv2d-nhwc-bias"+sfx] = nchwCase(ir.Conv2d, rev, convAttrs(true))
		ruleCases["max-pool-nhwc"+sfx] = nchwCase(ir.MaxPool2d, rev, poolAttrs(false))
		ruleCases["avg-pool-nhwc"+sfx] = nchwCase(ir.AvgPool2d, rev, poolAttrs(true))
		ruleCases["global-avg-pool-nhwc"+sfx] = nchwCase(ir.GlobalAvgPool, rev, func(c *caseGen, ch int) (ir.Attrs, []ir.Value) { return ir.Attrs{}, nil })
		ruleCases["batch-norm-nhwc"+sfx] = nchwCase(ir.BatchNorm, rev, func(c *caseGen, ch int) (ir.Attrs, []ir.Value) {
			return ir.Attrs{"eps": 1e-3}, []ir.Value{c.param(ch), c.param(ch), c.param(ch), c.posParam(ch)}
		})
		for name, op := range map[string]ir.Op{"relu": ir.Relu, "sigmoid": ir.Sigmoid, "silu": ir.Silu, "add": ir.Add, "mul": ir.Mul} {
			ruleCases[name+"-layout"+sfx] = layoutCase(op, rev)
		}
	}
}
