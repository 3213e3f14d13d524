package importer

import (
	"fmt"
	"sort"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX reductions: ReduceSum/Mean/Max/Min, ArgMax, Softmax.

func registerReduceOps() {
	for name, op := range map[string]ir.Op{"ReduceSum": ir.Sum, "ReduceMean": ir.Mean, "ReduceMax": ir.Max, "ReduceMin": ir.Min} {
		op := op
		onnxOps[name] = func(im *importer, n *onnx.Node) error { return im.reduce(n, op) }
	}
	onnxOps["ArgMax"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		r := x.Type().Shape.Rank()
		ax, err := ir.NormAxis(im.attrInt(n, "axis", 0), r)
		if err != nil {
			return err
		}
		keep := im.attrInt(n, "keepdims", 1) != 0
		if im.attrInt(n, "select_last_index", 0) != 0 {
			// The last maximum is the first of the reversed axis, counted from the end.
			rev, err := im.op(ir.Reverse, ir.Attrs{"axis": ax}, x)
			if err != nil {
				return err
			}
			i, err := im.op(ir.Argmax, ir.Attrs{"axis": ax, "keepdims": keep}, rev)
			if err != nil {
				return err
			}
			last := im.scalar(ir.I32, float64(x.Type().Shape[ax]-1))
			return im.setOp(n, 0, onnx.Int64, ir.Sub, nil, last, i)
		}
		return im.setOp(n, 0, onnx.Int64, ir.Argmax, ir.Attrs{"axis": ax, "keepdims": keep}, x)
	}
	onnxOps["Softmax"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Softmax, ir.Attrs{"axis": im.attrInt(n, "axis", -1)}, x)
	}
}

// normAxes resolves ONNX axes (negative counting from the end) against rank r, rejecting
// repeats.
func normAxes(axes []int64, r int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, a := range axes {
		ax, err := ir.NormAxis(int(a), r)
		if err != nil {
			return nil, err
		}
		if seen[ax] {
			return nil, fmt.Errorf("axis %d is given twice", a)
		}
		seen[ax] = true
		out = append(out, ax)
	}
	return out, nil
}

// reduce translates ReduceSum/Mean/Max/Min: axes from the input (ReduceSum from opset 13, the
// others from 18) or the attribute, every axis when none is given (unless
// noop_with_empty_axes), one vkc reduction per axis.
func (im *importer) reduce(n *onnx.Node, op ir.Op) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	s := x.Type().Shape
	var axes []int64
	if a, ok := im.attrInt64s(n, "axes"); ok {
		axes = a
	} else if axes, err = im.optInts(n, 1, "axes"); err != nil {
		return err
	}
	keep := im.attrInt(n, "keepdims", 1) != 0
	if len(axes) == 0 {
		if im.attrInt(n, "noop_with_empty_axes", 0) != 0 {
			return im.set(n, 0, x, im.dt(n, 0))
		}
		for i := range s {
			axes = append(axes, int64(i))
		}
	}
	ax, err := normAxes(axes, s.Rank())
	if err != nil {
		return err
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ax)))
	dt := x.Type().DType
	y := x
	if dt == ir.Bool {
		// min and max of booleans are and/or: reduce them as i32 0 and 1.
		if op != ir.Max && op != ir.Min {
			return fmt.Errorf("%s of a bool tensor", n.OpType)
		}
		if y, err = im.castTo(y, ir.I32); err != nil {
			return err
		}
	}
	for _, a := range ax {
		if y, err = im.op(op, ir.Attrs{"axis": a, "keepdims": true}, y); err != nil {
			return err
		}
	}
	if !keep {
		var out []int
		drop := map[int]bool{}
		for _, a := range ax {
			drop[a] = true
		}
		for i, d := range s {
			if !drop[i] {
				out = append(out, d)
			}
		}
		if out == nil {
			out = []int{}
		}
		if y, err = im.reshape(y, out); err != nil {
			return err
		}
	}
	if dt == ir.Bool {
		if y, err = im.castTo(y, ir.Bool); err != nil {
			return err
		}
	}
	return im.set(n, 0, y, im.dt(n, 0))
}
