package importer

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX products: MatMul and Gemm.

func registerMatmulOps() {
	onnxOps["MatMul"] = func(im *importer, n *onnx.Node) error {
		a, b, err := im.in2(n)
		if err != nil {
			return err
		}
		y, err := im.matmul(a, b)
		if err != nil {
			return err
		}
		return im.set(n, 0, y, im.dt(n, 0))
	}
	onnxOps["Gemm"] = translateGemm
}

// matmul is ONNX's MatMul: NumPy's, with a 1-D operand promoted to a matrix and the added
// dimension removed again.
func (im *importer) matmul(a, b ir.Value) (ir.Value, error) {
	as, bs := a.Type().Shape, b.Type().Shape
	var err error
	if as.Rank() == 1 {
		if a, err = im.reshape(a, []int{1, as[0]}); err != nil {
			return ir.Value{}, err
		}
	}
	if bs.Rank() == 1 {
		if b, err = im.reshape(b, []int{bs[0], 1}); err != nil {
			return ir.Value{}, err
		}
	}
	y, err := im.op(ir.Matmul, nil, a, b)
	if err != nil {
		return ir.Value{}, err
	}
	if as.Rank() == 1 || bs.Rank() == 1 {
		ys := y.Type().Shape
		out := []int(ys[:ys.Rank()-2].Clone())
		if as.Rank() > 1 {
			out = append(out, ys[ys.Rank()-2])
		}
		if bs.Rank() > 1 {
			out = append(out, ys[ys.Rank()-1])
		}
		if out == nil {
			out = []int{}
		}
		return im.reshape(y, out)
	}
	return y, nil
}

func translateGemm(im *importer, n *onnx.Node) error {
	a, b, err := im.in2(n)
	if err != nil {
		return err
	}
	ta, tb := im.attrInt(n, "transA", 0) != 0, im.attrInt(n, "transB", 0) != 0
	if a.Type().Shape.Rank() != 2 || b.Type().Shape.Rank() != 2 {
		return fmt.Errorf("A %s and B %s must be matrices", a.Type(), b.Type())
	}
	y, err := im.op(ir.Matmul, ir.Attrs{"ta": ta, "tb": tb}, a, b)
	if err != nil {
		return err
	}
	dt := y.Type().DType
	if alpha := im.attrFloat(n, "alpha", 1); alpha != 1 {
		if y, err = im.op(ir.Mul, nil, y, im.scalar(dt, alpha)); err != nil {
			return err
		}
	}
	if im.has(n, 2) {
		c, err := im.in(n, 2)
		if err != nil {
			return err
		}
		if beta := im.attrFloat(n, "beta", 1); beta != 1 {
			if c, err = im.op(ir.Mul, nil, c, im.scalar(c.Type().DType, beta)); err != nil {
				return err
			}
		}
		if y, err = im.op(ir.Add, nil, y, c); err != nil {
			return err
		}
	}
	return im.set(n, 0, y, im.dt(n, 0))
}
