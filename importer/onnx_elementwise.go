package importer

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX elementwise ops: arithmetic, comparisons, activations, Where, Cast.

func registerElementwiseOps() {
	unary := map[string]ir.Op{"Neg": ir.Neg, "Abs": ir.Abs, "Exp": ir.Exp, "Log": ir.Log, "Sqrt": ir.Sqrt,
		"Reciprocal": ir.Recip, "Sin": ir.Sin, "Cos": ir.Cos, "Tanh": ir.Tanh, "Erf": ir.Erf, "Sigmoid": ir.Sigmoid, "Relu": ir.Relu}
	for name, op := range unary {
		op := op
		onnxOps[name] = func(im *importer, n *onnx.Node) error {
			x, err := im.in(n, 0)
			if err != nil {
				return err
			}
			return im.setOp(n, 0, im.dt(n, 0), op, nil, x)
		}
	}
	binary := map[string]ir.Op{"Add": ir.Add, "Sub": ir.Sub, "Mul": ir.Mul, "Div": ir.Div}
	for name, op := range binary {
		op := op
		onnxOps[name] = func(im *importer, n *onnx.Node) error {
			a, b, err := im.in2(n)
			if err != nil {
				return err
			}
			return im.setOp(n, 0, im.dt(n, 0), op, nil, a, b)
		}
	}
	compare := map[string]ir.Op{"Equal": ir.Eq, "Less": ir.Lt, "LessOrEqual": ir.Le, "Greater": ir.Gt, "GreaterOrEqual": ir.Ge}
	for name, op := range compare {
		op := op
		onnxOps[name] = func(im *importer, n *onnx.Node) error {
			a, b, err := im.in2(n)
			if err != nil {
				return err
			}
			return im.setOp(n, 0, onnx.Bool, op, nil, a, b)
		}
	}
	onnxOps["Pow"] = func(im *importer, n *onnx.Node) error {
		a, b, err := im.in2(n)
		if err != nil {
			return err
		}
		// ONNX's Pow takes an exponent of any numeric type; the result has the base's type.
		if b, err = im.castTo(b, a.Type().DType); err != nil {
			return err
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Pow, nil, a, b)
	}
	for name, op := range map[string]ir.Op{"Max": ir.Maximum, "Min": ir.Minimum} {
		op := op
		onnxOps[name] = func(im *importer, n *onnx.Node) error {
			if len(n.Inputs) == 0 {
				return fmt.Errorf("needs at least one input")
			}
			acc, err := im.in(n, 0)
			if err != nil {
				return err
			}
			for i := 1; i < len(n.Inputs); i++ {
				x, err := im.in(n, i)
				if err != nil {
					return err
				}
				if acc, err = im.op(op, nil, acc, x); err != nil {
					return err
				}
			}
			return im.set(n, 0, acc, im.dt(n, 0))
		}
	}
	onnxOps["Where"] = func(im *importer, n *onnx.Node) error {
		c, err := im.in(n, 0)
		if err != nil {
			return err
		}
		a, b, err := im.inPair(n, 1, 2)
		if err != nil {
			return err
		}
		return im.setOp(n, 0, im.dt(n, 1), ir.Where, nil, c, a, b)
	}
	onnxOps["LeakyRelu"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		alpha := im.attrFloat(n, "alpha", 0.01)
		dt := x.Type().DType
		neg, err := im.op(ir.Mul, nil, x, im.scalar(dt, alpha))
		if err != nil {
			return err
		}
		pos, err := im.op(ir.Ge, nil, x, im.scalar(dt, 0))
		if err != nil {
			return err
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Where, nil, pos, x, neg)
	}
	onnxOps["HardSigmoid"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		y, err := im.hardSigmoid(x, im.attrFloat(n, "alpha", 0.2), im.attrFloat(n, "beta", 0.5))
		if err != nil {
			return err
		}
		return im.set(n, 0, y, im.dt(n, 0))
	}
	onnxOps["HardSwish"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		h, err := im.hardSigmoid(x, 1.0/6, 0.5)
		if err != nil {
			return err
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Mul, nil, x, h)
	}
	onnxOps["Gelu"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		switch a := im.attrString(n, "approximate", "none"); a {
		case "none":
			return im.setOp(n, 0, im.dt(n, 0), ir.Gelu, nil, x)
		case "tanh":
			return im.setOp(n, 0, im.dt(n, 0), ir.GeluTanh, nil, x)
		default:
			return fmt.Errorf("approximate=%q (want none or tanh)", a)
		}
	}
	onnxOps["Clip"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		if im.has(n, 1) {
			lo, err := im.in(n, 1)
			if err != nil {
				return err
			}
			if x, err = im.op(ir.Maximum, nil, x, lo); err != nil {
				return err
			}
		}
		if im.has(n, 2) {
			hi, err := im.in(n, 2)
			if err != nil {
				return err
			}
			if x, err = im.op(ir.Minimum, nil, x, hi); err != nil {
				return err
			}
		}
		return im.set(n, 0, x, im.dt(n, 0))
	}
	onnxOps["Cast"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		to := onnx.DataType(im.attrInt(n, "to", 0))
		d, err := IRDType(to)
		if err != nil {
			return fmt.Errorf("to=%s: %w", to, err)
		}
		y, err := im.castTo(x, d)
		if err != nil {
			return err
		}
		return im.set(n, 0, y, to)
	}
}

func (im *importer) hardSigmoid(x ir.Value, alpha, beta float64) (ir.Value, error) {
	dt := x.Type().DType
	y, err := im.op(ir.Add, nil, mustV(im.op(ir.Mul, nil, x, im.scalar(dt, alpha))), im.scalar(dt, beta))
	if err != nil {
		return ir.Value{}, err
	}
	if y, err = im.op(ir.Minimum, nil, y, im.scalar(dt, 1)); err != nil {
		return ir.Value{}, err
	}
	return im.op(ir.Maximum, nil, y, im.scalar(dt, 0))
}
