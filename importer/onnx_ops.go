package importer

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// onnxOps translates each supported ONNX op (default domain, opset 13 and later) onto vkc's
// ops. Each translation reads the node's inputs with im.in (tensors) or im.ints (constant
// shape and axes operands) and binds its outputs with im.set.
var onnxOps map[string]func(im *importer, n *onnx.Node) error

// onnxFolds evaluate ops whose inputs are all constants at import time, so that the shapes and
// axes they compute can feed Reshape, Slice and the like; a fold returns false when it leaves
// the node to its translation.
var onnxFolds map[string]func(im *importer, n *onnx.Node) (bool, error)

// SupportedONNXOps lists the op types ImportONNX translates, sorted.
func SupportedONNXOps() []string {
	var s []string
	for k := range onnxOps {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

func init() {
	onnxOps = map[string]func(im *importer, n *onnx.Node) error{}
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
	onnxOps["Identity"] = func(im *importer, n *onnx.Node) error {
		if len(n.Inputs) < 1 || len(n.Outputs) < 1 {
			return fmt.Errorf("needs one input and one output")
		}
		src, ok := im.vals[n.Inputs[0]]
		if !ok {
			return fmt.Errorf("value %q is used before it is computed", n.Inputs[0])
		}
		v := *src
		im.vals[n.Outputs[0]] = &v
		return nil
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
	onnxOps["LayerNormalization"] = func(im *importer, n *onnx.Node) error { return im.norm(n, true) }
	onnxOps["RMSNormalization"] = func(im *importer, n *onnx.Node) error { return im.norm(n, false) }
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
	onnxOps["Reshape"] = translateReshape
	onnxOps["Transpose"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		r := x.Type().Shape.Rank()
		perm := im.attrInts(n, "perm")
		if perm == nil {
			for i := r - 1; i >= 0; i-- {
				perm = append(perm, i)
			}
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Transpose, ir.Attrs{"perm": perm}, x)
	}
	onnxOps["Slice"] = translateSlice
	onnxOps["Concat"] = func(im *importer, n *onnx.Node) error {
		var args []ir.Value
		for i := range n.Inputs {
			x, err := im.in(n, i)
			if err != nil {
				return err
			}
			args = append(args, x)
		}
		if len(args) == 0 {
			return fmt.Errorf("needs at least one input")
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Concat, ir.Attrs{"axis": im.attrInt(n, "axis", 0)}, args...)
	}
	onnxOps["Split"] = translateSplit
	onnxOps["Squeeze"] = func(im *importer, n *onnx.Node) error { return im.squeeze(n, false) }
	onnxOps["Unsqueeze"] = func(im *importer, n *onnx.Node) error { return im.squeeze(n, true) }
	onnxOps["Flatten"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		s := x.Type().Shape
		ax := im.attrInt(n, "axis", 1)
		if ax < 0 {
			ax += s.Rank()
		}
		if ax < 0 || ax > s.Rank() {
			return fmt.Errorf("axis %d out of range for rank %d", im.attrInt(n, "axis", 1), s.Rank())
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Reshape, ir.Attrs{"shape": []int{s[:ax].NumElements(), s[ax:].NumElements()}}, x)
	}
	onnxOps["Expand"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		shape, err := im.ints(n, 1, "shape")
		if err != nil {
			return err
		}
		want, err := shapeOf("shape", shape)
		if err != nil {
			return err
		}
		// ONNX's Expand broadcasts both ways: the result is the broadcast of x and shape.
		out, err := ir.Broadcast(x.Type().Shape, want)
		if err != nil {
			return err
		}
		if out.Equal(x.Type().Shape) {
			return im.set(n, 0, x, im.dt(n, 0))
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.Expand, ir.Attrs{"shape": []int(out)}, x)
	}
	onnxOps["Gather"] = translateGather
	onnxOps["Conv"] = translateConv
	onnxOps["MaxPool"] = func(im *importer, n *onnx.Node) error { return im.pool(n, ir.MaxPool2d) }
	onnxOps["AveragePool"] = func(im *importer, n *onnx.Node) error { return im.pool(n, ir.AvgPool2d) }
	onnxOps["GlobalAveragePool"] = func(im *importer, n *onnx.Node) error {
		x, err := im.in(n, 0)
		if err != nil {
			return err
		}
		x4, back, err := im.to4d(x, "GlobalAveragePool")
		if err != nil {
			return err
		}
		y, err := im.op(ir.GlobalAvgPool, nil, x4)
		if err != nil {
			return err
		}
		if y, err = back(y); err != nil {
			return err
		}
		return im.set(n, 0, y, im.dt(n, 0))
	}
	onnxOps["BatchNormalization"] = func(im *importer, n *onnx.Node) error {
		if im.attrInt(n, "training_mode", 0) != 0 {
			return fmt.Errorf("training_mode=1 (batch statistics) is not supported: vkc imports batch normalisation in inference form")
		}
		for i := 1; i < len(n.Outputs); i++ {
			if n.Outputs[i] != "" {
				return fmt.Errorf("output %d (%s) exists only in training mode", i, n.Outputs[i])
			}
		}
		var args []ir.Value
		for i := 0; i < 5; i++ {
			x, err := im.in(n, i)
			if err != nil {
				return err
			}
			args = append(args, x)
		}
		return im.setOp(n, 0, im.dt(n, 0), ir.BatchNorm, ir.Attrs{"eps": im.attrFloat(n, "epsilon", 1e-5)}, args...)
	}
	onnxOps["Constant"] = translateConstant
	onnxOps["Shape"] = func(im *importer, n *onnx.Node) error {
		_, err := foldShape(im, n)
		return err
	}
	onnxOps["ConstantOfShape"] = func(im *importer, n *onnx.Node) error {
		done, err := foldConstantOfShape(im, n)
		if err == nil && !done {
			err = fmt.Errorf("input 0 (the shape) must be a constant")
		}
		return err
	}

	onnxFolds = map[string]func(im *importer, n *onnx.Node) (bool, error){
		"ConstantOfShape": foldConstantOfShape,
		"Identity": func(im *importer, n *onnx.Node) (bool, error) {
			return false, nil
		},
		"Cast":      foldIntCast,
		"Unsqueeze": foldIntReshape,
		"Squeeze":   foldIntReshape,
		"Concat":    foldIntConcat,
		"Gather":    foldIntGather,
		"Add":       foldIntArith,
		"Sub":       foldIntArith,
		"Mul":       foldIntArith,
		"Div":       foldIntArith,
	}
}

// --- helpers

// dt is the ONNX type of input i of n (Undefined when unknown).
func (im *importer) dt(n *onnx.Node, i int) onnx.DataType {
	if i < len(n.Inputs) {
		if v, ok := im.vals[n.Inputs[i]]; ok {
			return v.dt
		}
	}
	return onnx.Undefined
}

// has reports whether optional input i is given.
func (im *importer) has(n *onnx.Node, i int) bool { return i < len(n.Inputs) && n.Inputs[i] != "" }

// in returns input i as a tensor value.
func (im *importer) in(n *onnx.Node, i int) (ir.Value, error) {
	if !im.has(n, i) {
		return ir.Value{}, fmt.Errorf("input %d is missing", i)
	}
	v, err := im.tensor(n.Inputs[i])
	if err != nil {
		return ir.Value{}, fmt.Errorf("input %d (%s): %w", i, n.Inputs[i], err)
	}
	return v, nil
}

func (im *importer) in2(n *onnx.Node) (ir.Value, ir.Value, error) { return im.inPair(n, 0, 1) }

func (im *importer) inPair(n *onnx.Node, i, j int) (ir.Value, ir.Value, error) {
	a, err := im.in(n, i)
	if err != nil {
		return ir.Value{}, ir.Value{}, err
	}
	b, err := im.in(n, j)
	return a, b, err
}

// constVal returns input i's constant value, or an error saying it must be one.
func (im *importer) constVal(n *onnx.Node, i int, what string) (*onnxValue, error) {
	if !im.has(n, i) {
		return nil, fmt.Errorf("input %d (%s) is missing", i, what)
	}
	v, ok := im.vals[n.Inputs[i]]
	if !ok {
		return nil, fmt.Errorf("value %q is used before it is computed", n.Inputs[i])
	}
	if !v.isConst() {
		return nil, fmt.Errorf("input %d (%s, %q) must be a constant for a static-shape import (an initializer, a Constant, or a graph input fixed as a constant)", i, what, n.Inputs[i])
	}
	return v, nil
}

// ints returns input i's constant integer values.
func (im *importer) ints(n *onnx.Node, i int, what string) ([]int64, error) {
	v, err := im.constVal(n, i, what)
	if err != nil {
		return nil, err
	}
	out, err := onnxInts(v.dt, v.raw)
	if err != nil {
		return nil, fmt.Errorf("input %d (%s): %w", i, what, err)
	}
	return out, nil
}

// optInts returns input i's constant integers, or nil when the input is omitted.
func (im *importer) optInts(n *onnx.Node, i int, what string) ([]int64, error) {
	if !im.has(n, i) {
		return nil, nil
	}
	return im.ints(n, i, what)
}

func (im *importer) attrInt(n *onnx.Node, name string, def int) int {
	if a := im.attr(n, name, onnx.AttrInt); a != nil {
		return int(a.I)
	}
	return def
}

// attrFloat reads a float attribute. ONNX's are float32; the shortest decimal that rounds to
// the same float32 (1e-05, not 9.999999747378752e-06) is what the exporter meant and what
// model.yaml shows.
func (im *importer) attrFloat(n *onnx.Node, name string, def float64) float64 {
	if a := im.attr(n, name, onnx.AttrFloat); a != nil {
		v, err := strconv.ParseFloat(strconv.FormatFloat(float64(a.F), 'g', -1, 32), 64)
		if err != nil {
			return float64(a.F)
		}
		return v
	}
	return def
}

func (im *importer) attrString(n *onnx.Node, name, def string) string {
	if a := im.attr(n, name, onnx.AttrString); a != nil {
		return string(a.S)
	}
	return def
}

func (im *importer) attrInts(n *onnx.Node, name string) []int {
	a := im.attr(n, name, onnx.AttrInts)
	if a == nil {
		return nil
	}
	out := make([]int, len(a.Ints))
	for i, v := range a.Ints {
		out[i] = int(v)
	}
	return out
}

// attrInt64s reads an ints attribute as ONNX holds it (nil when absent).
func (im *importer) attrInt64s(n *onnx.Node, name string) ([]int64, bool) {
	if a := im.attr(n, name, onnx.AttrInts); a != nil {
		return a.Ints, true
	}
	return nil, false
}

func (im *importer) op(op ir.Op, a ir.Attrs, args ...ir.Value) (ir.Value, error) {
	v, err := im.b.Op(op, a, args...)
	if err != nil {
		return ir.Value{}, err
	}
	return v, nil
}

// set binds output i of n to v, of ONNX type dt.
func (im *importer) set(n *onnx.Node, i int, v ir.Value, dt onnx.DataType) error {
	if i >= len(n.Outputs) || n.Outputs[i] == "" {
		return nil // an output nobody reads
	}
	if dt == onnx.Undefined {
		dt = ONNXDType(v.Type().DType)
	}
	if v.Node.Name == "" && v.Node.Op.Info().Kind != ir.KindSource {
		v.Node.Name = im.names.ident(n.Outputs[i])
	}
	im.vals[n.Outputs[i]] = &onnxValue{v: v, dt: dt}
	return nil
}

func (im *importer) setOp(n *onnx.Node, i int, dt onnx.DataType, op ir.Op, a ir.Attrs, args ...ir.Value) error {
	v, err := im.op(op, a, args...)
	if err != nil {
		return err
	}
	return im.set(n, i, v, dt)
}

// setConst binds output i of n to a constant.
func (im *importer) setConst(n *onnx.Node, i int, dt onnx.DataType, dims []int64, raw []byte) {
	if i < len(n.Outputs) && n.Outputs[i] != "" {
		if dims == nil {
			dims = []int64{}
		}
		im.vals[n.Outputs[i]] = &onnxValue{dt: dt, dims: dims, raw: raw}
	}
}

func (im *importer) scalar(d ir.DType, v float64) ir.Value { return im.b.Scalar(d, v) }

func (im *importer) castTo(x ir.Value, d ir.DType) (ir.Value, error) {
	if x.Type().DType == d {
		return x, nil
	}
	return im.op(ir.Cast, ir.Attrs{"to": d.String()}, x)
}

func (im *importer) reshape(x ir.Value, s []int) (ir.Value, error) {
	if x.Type().Shape.Equal(ir.Shape(s)) {
		return x, nil
	}
	return im.op(ir.Reshape, ir.Attrs{"shape": s}, x)
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

// mustV unwraps an op whose error the next op reports (a zero Value makes it fail cleanly).
func mustV(v ir.Value, err error) ir.Value {
	if err != nil {
		return ir.Value{}
	}
	return v
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

// norm translates LayerNormalization (with bias, and its Mean and InvStdDev outputs) and
// RMSNormalization over axes [axis, rank): vkc's norms work on the last axis, so the normalised
// dims are flattened into one and scale and bias broadcast to them first.
func (im *importer) norm(n *onnx.Node, layer bool) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	scale, err := im.in(n, 1)
	if err != nil {
		return err
	}
	s := x.Type().Shape
	r := s.Rank()
	ax, err := ir.NormAxis(im.attrInt(n, "axis", -1), r)
	if err != nil {
		return err
	}
	eps := im.attrFloat(n, "epsilon", 1e-5)
	rows, width := s[:ax].NumElements(), s[ax:].NumElements()
	flatParam := func(p ir.Value, what string) (ir.Value, error) {
		ps := p.Type().Shape
		if bs, err := ir.Broadcast(ps, s[ax:]); err != nil || !bs.Equal(s[ax:]) {
			return ir.Value{}, fmt.Errorf("%s %s does not broadcast to the normalised dims %s", what, ps, s[ax:])
		}
		if !ps.Equal(s[ax:]) {
			var err error
			if p, err = im.op(ir.Expand, ir.Attrs{"shape": []int(s[ax:].Clone())}, p); err != nil {
				return ir.Value{}, err
			}
		}
		return im.reshape(p, []int{width})
	}
	x2, err := im.reshape(x, []int{rows, width})
	if err != nil {
		return err
	}
	w, err := flatParam(scale, "scale")
	if err != nil {
		return err
	}
	var y ir.Value
	if layer {
		var b ir.Value
		if im.has(n, 2) {
			bias, err := im.in(n, 2)
			if err != nil {
				return err
			}
			if b, err = flatParam(bias, "bias"); err != nil {
				return err
			}
		} else {
			b = im.b.Const(ir.NewTensor(ir.T(w.Type().DType, width)))
		}
		y, err = im.op(ir.LayerNorm, ir.Attrs{"eps": eps}, x2, w, b)
	} else {
		y, err = im.op(ir.RMSNorm, ir.Attrs{"eps": eps}, x2, w)
	}
	if err != nil {
		return err
	}
	if y, err = im.reshape(y, []int(s.Clone())); err != nil {
		return err
	}
	if err := im.set(n, 0, y, im.dt(n, 0)); err != nil {
		return err
	}
	if !layer || len(n.Outputs) < 2 {
		return nil
	}
	// Mean and InvStdDev: statistics over the normalised dims, kept as 1s.
	stat := append(s[:ax].Clone(), make(ir.Shape, r-ax)...)
	for i := ax; i < r; i++ {
		stat[i] = 1
	}
	dt := x.Type().DType
	mu, err := im.op(ir.Mean, ir.Attrs{"axis": -1, "keepdims": true}, x2)
	if err != nil {
		return err
	}
	xc, err := im.op(ir.Sub, nil, x2, mu)
	if err != nil {
		return err
	}
	vr, err := im.op(ir.Mean, ir.Attrs{"axis": -1, "keepdims": true}, mustV(im.op(ir.Mul, nil, xc, xc)))
	if err != nil {
		return err
	}
	inv, err := im.op(ir.Rsqrt, nil, mustV(im.op(ir.Add, nil, vr, im.scalar(dt, eps))))
	if err != nil {
		return err
	}
	for i, v := range []ir.Value{mu, inv} {
		if v, err = im.reshape(v, []int(stat)); err != nil {
			return err
		}
		if err := im.set(n, i+1, v, im.dt(n, 0)); err != nil {
			return err
		}
	}
	return nil
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

func translateReshape(im *importer, n *onnx.Node) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	shape, err := im.ints(n, 1, "shape")
	if err != nil {
		return err
	}
	out, err := resolveReshape(x.Type().Shape, shape, im.attrInt(n, "allowzero", 0) != 0)
	if err != nil {
		return err
	}
	y, err := im.reshape(x, out)
	if err != nil {
		return err
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

// resolveReshape applies ONNX's Reshape rules: 0 copies the input's dimension (unless
// allowzero), one -1 is inferred.
func resolveReshape(in ir.Shape, shape []int64, allowZero bool) ([]int, error) {
	out := make([]int, len(shape))
	for i, d := range shape {
		switch {
		case d == 0 && !allowZero:
			if i >= in.Rank() {
				return nil, fmt.Errorf("shape %v copies dimension %d of %s, which has none", shape, i, in)
			}
			out[i] = in[i]
		case d == 0:
			return nil, fmt.Errorf("shape %v has a zero dimension: vkc has no empty tensors", shape)
		case d < -1 || d > math.MaxInt32:
			return nil, fmt.Errorf("shape %v has dimension %d", shape, d)
		default:
			out[i] = int(d)
		}
	}
	s, err := ir.ResolveReshape(in, out)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func translateSlice(im *importer, n *onnx.Node) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	starts, err := im.ints(n, 1, "starts")
	if err != nil {
		return err
	}
	ends, err := im.ints(n, 2, "ends")
	if err != nil {
		return err
	}
	axes, err := im.optInts(n, 3, "axes")
	if err != nil {
		return err
	}
	steps, err := im.optInts(n, 4, "steps")
	if err != nil {
		return err
	}
	s := x.Type().Shape
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if steps == nil {
		for range starts {
			steps = append(steps, 1)
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return fmt.Errorf("starts %v, ends %v, axes %v and steps %v differ in length", starts, ends, axes, steps)
	}
	ax, err := normAxes(axes, s.Rank())
	if err != nil {
		return err
	}
	y := x
	for k, a := range ax {
		dim := int64(s[a])
		st, en, step := starts[k], ends[k], steps[k]
		if step == 0 {
			return fmt.Errorf("step 0 on axis %d", a)
		}
		// ONNX's clamping: negative bounds count from the end; then [0, dim] for a positive
		// step, [-1, dim-1] for a negative one.
		if st < 0 {
			st += dim
		}
		if en < 0 {
			en += dim
		}
		var count int64
		if step > 0 {
			st, en = clamp(st, 0, dim), clamp(en, 0, dim)
			if en > st {
				count = (en - st + step - 1) / step
			}
		} else {
			st, en = clamp(st, 0, dim-1), clamp(en, -1, dim-1)
			if st > en {
				count = (st - en + (-step) - 1) / (-step)
			}
		}
		if count <= 0 {
			return fmt.Errorf("axis %d: the slice %d:%d:%d of %d elements is empty: vkc has no empty tensors", a, starts[k], ends[k], steps[k], dim)
		}
		if step < 0 {
			// Reversed, the slice runs forward from dim-1-st.
			if y, err = im.op(ir.Reverse, ir.Attrs{"axis": a}, y); err != nil {
				return err
			}
			st, step = dim-1-st, -step
		}
		last := st + (count-1)*step
		if st == 0 && step == 1 && count == dim {
			continue
		}
		if y, err = im.op(ir.Slice, ir.Attrs{"axis": a, "start": int(st), "end": int(last + 1), "step": int(step)}, y); err != nil {
			return err
		}
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

func translateSplit(im *importer, n *onnx.Node) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	s := x.Type().Shape
	ax, err := ir.NormAxis(im.attrInt(n, "axis", 0), s.Rank())
	if err != nil {
		return err
	}
	dim := s[ax]
	var sizes []int64
	if a, ok := im.attrInt64s(n, "split"); ok {
		sizes = a
	} else if sizes, err = im.optInts(n, 1, "split"); err != nil {
		return err
	}
	outs := len(n.Outputs)
	if sizes == nil {
		if k := im.attrInt(n, "num_outputs", 0); k > 0 {
			// Opset 18: chunks of ceil(dim/k), the last one smaller.
			c := (dim + k - 1) / k
			for rest := dim; rest > 0; rest -= c {
				sizes = append(sizes, int64(min(c, rest)))
			}
			if len(sizes) != outs {
				return fmt.Errorf("%d outputs for num_outputs=%d over %d elements (%d chunks)", outs, k, dim, len(sizes))
			}
		} else {
			if outs == 0 || dim%outs != 0 {
				return fmt.Errorf("axis %d of %d elements does not split into %d equal parts", ax, dim, outs)
			}
			for i := 0; i < outs; i++ {
				sizes = append(sizes, int64(dim/outs))
			}
		}
	}
	if len(sizes) != outs {
		return fmt.Errorf("split %v has %d sizes for %d outputs", sizes, len(sizes), outs)
	}
	total := int64(0)
	for _, z := range sizes {
		if z <= 0 {
			return fmt.Errorf("split %v has an empty part: vkc has no empty tensors", sizes)
		}
		total += z
	}
	if total != int64(dim) {
		return fmt.Errorf("split %v sums to %d, axis %d has %d", sizes, total, ax, dim)
	}
	start := 0
	for i, z := range sizes {
		y := x
		if int(z) != dim {
			if y, err = im.op(ir.Slice, ir.Attrs{"axis": ax, "start": start, "end": start + int(z)}, x); err != nil {
				return err
			}
		}
		if err := im.set(n, i, y, im.dt(n, 0)); err != nil {
			return err
		}
		start += int(z)
	}
	return nil
}

// squeeze translates Squeeze and Unsqueeze into a reshape.
func (im *importer) squeeze(n *onnx.Node, un bool) error {
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
	out, err := squeezeShape(s, axes, un)
	if err != nil {
		return err
	}
	y, err := im.reshape(x, out)
	if err != nil {
		return err
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

func squeezeShape(s ir.Shape, axes []int64, un bool) ([]int, error) {
	if un {
		r := s.Rank() + len(axes)
		ax, err := normAxes(axes, r)
		if err != nil {
			return nil, err
		}
		ins := map[int]bool{}
		for _, a := range ax {
			ins[a] = true
		}
		out := make([]int, 0, r)
		k := 0
		for i := 0; i < r; i++ {
			if ins[i] {
				out = append(out, 1)
			} else {
				out = append(out, s[k])
				k++
			}
		}
		return out, nil
	}
	drop := map[int]bool{}
	if len(axes) == 0 {
		for i, d := range s {
			if d == 1 {
				drop[i] = true
			}
		}
	} else {
		ax, err := normAxes(axes, s.Rank())
		if err != nil {
			return nil, err
		}
		for _, a := range ax {
			if s[a] != 1 {
				return nil, fmt.Errorf("cannot squeeze axis %d of %s (size %d)", a, s, s[a])
			}
			drop[a] = true
		}
	}
	out := []int{}
	for i, d := range s {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

// translateGather is Gather(data, indices, axis) as vkc's embedding lookup: the axis moved to
// the front, the rest flattened into rows' width, negative indices counted from the end.
func translateGather(im *importer, n *onnx.Node) error {
	data, err := im.in(n, 0)
	if err != nil {
		return err
	}
	idx, err := im.in(n, 1)
	if err != nil {
		return err
	}
	if !idx.Type().DType.IsInt() {
		return fmt.Errorf("indices must be integers, got %s", idx.Type())
	}
	s := data.Type().Shape
	r := s.Rank()
	ax, err := ir.NormAxis(im.attrInt(n, "axis", 0), r)
	if err != nil {
		return err
	}
	dim := s[ax]
	if idx.Type().DType == ir.I32 {
		// Negative indices count from the end: where(i < 0, i + dim, i).
		neg, err := im.op(ir.Lt, nil, idx, im.scalar(ir.I32, 0))
		if err != nil {
			return err
		}
		if idx, err = im.op(ir.Where, nil, neg, mustV(im.op(ir.Add, nil, idx, im.scalar(ir.I32, float64(dim)))), idx); err != nil {
			return err
		}
	}
	x := data
	if ax != 0 {
		perm := []int{ax}
		for i := 0; i < r; i++ {
			if i != ax {
				perm = append(perm, i)
			}
		}
		if x, err = im.op(ir.Transpose, ir.Attrs{"perm": perm}, x); err != nil {
			return err
		}
	}
	rest := s.NumElements() / dim
	if x, err = im.reshape(x, []int{dim, rest}); err != nil {
		return err
	}
	y, err := im.op(ir.Embedding, nil, x, idx)
	if err != nil {
		return err
	}
	is := idx.Type().Shape
	q := is.Rank()
	// y is [idx..., rest]: unflatten rest into data's other dims, then move idx into place.
	shape := []int(is.Clone())
	for i := 0; i < r; i++ {
		if i != ax {
			shape = append(shape, s[i])
		}
	}
	if y, err = im.reshape(y, shape); err != nil {
		return err
	}
	if ax != 0 && q > 0 {
		var perm []int
		for i := 0; i < ax; i++ {
			perm = append(perm, q+i)
		}
		for i := 0; i < q; i++ {
			perm = append(perm, i)
		}
		for i := ax + 1; i < r; i++ {
			perm = append(perm, q+i-1)
		}
		if y, err = im.op(ir.Transpose, ir.Attrs{"perm": perm}, y); err != nil {
			return err
		}
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

// windowAttrs reads Conv's and the pools' kernel, strides, dilations and pads (auto_pad
// resolved to explicit pads) for a 2-D window over h × w.
func (im *importer) windowAttrs(n *onnx.Node, kernel []int, h, w int) (ir.Attrs, error) {
	strides := im.attrInts(n, "strides")
	if strides == nil {
		strides = []int{1, 1}
	}
	dil := im.attrInts(n, "dilations")
	if dil == nil {
		dil = []int{1, 1}
	}
	if len(kernel) != 2 || len(strides) != 2 || len(dil) != 2 {
		return nil, fmt.Errorf("kernel_shape %v, strides %v and dilations %v must have 2 entries (2-D windows only)", kernel, strides, dil)
	}
	pads := im.attrInts(n, "pads")
	switch ap := im.attrString(n, "auto_pad", "NOTSET"); ap {
	case "NOTSET", "":
		if pads == nil {
			pads = []int{0, 0, 0, 0}
		}
	case "VALID":
		pads = []int{0, 0, 0, 0}
	case "SAME_UPPER", "SAME_LOWER":
		// Output size ceil(in / stride); the extra pad goes at the end (upper) or the start.
		pads = make([]int, 4)
		for i, in := range []int{h, w} {
			if strides[i] <= 0 {
				return nil, fmt.Errorf("strides %v must be positive", strides)
			}
			out := (in + strides[i] - 1) / strides[i]
			total := max(0, (out-1)*strides[i]+(kernel[i]-1)*dil[i]+1-in)
			small, big := total/2, total-total/2
			if ap == "SAME_UPPER" {
				pads[i], pads[i+2] = small, big
			} else {
				pads[i], pads[i+2] = big, small
			}
		}
	default:
		return nil, fmt.Errorf("auto_pad=%q (want NOTSET, VALID, SAME_UPPER or SAME_LOWER)", ap)
	}
	if len(pads) != 4 {
		return nil, fmt.Errorf("pads %v must have 4 entries (2-D windows only)", pads)
	}
	return ir.Attrs{"strides": strides, "dilations": dil, "pads": pads}, nil
}

// to4d makes an [n, c, l] tensor [n, c, 1, l] (1-D windows as 2-D ones of height 1) and returns
// the way back; rank 4 passes through.
func (im *importer) to4d(x ir.Value, what string) (ir.Value, func(ir.Value) (ir.Value, error), error) {
	s := x.Type().Shape
	switch s.Rank() {
	case 4:
		return x, func(v ir.Value) (ir.Value, error) { return v, nil }, nil
	case 3:
		y, err := im.reshape(x, []int{s[0], s[1], 1, s[2]})
		return y, func(v ir.Value) (ir.Value, error) {
			vs := v.Type().Shape
			return im.reshape(v, []int{vs[0], vs[1], vs[3]})
		}, err
	}
	return ir.Value{}, nil, fmt.Errorf("%s over %d spatial dimensions: vkc has 1-D and 2-D windows (input %s)", what, s.Rank()-2, x.Type())
}

// spatial1d makes a 1-D window attribute list 2-D (height 1), leaving 2-D lists alone.
func spatial1d(v []int, fill int, pads bool) []int {
	if v == nil {
		return nil
	}
	if pads && len(v) == 2 {
		return []int{0, v[0], 0, v[1]}
	}
	if !pads && len(v) == 1 {
		return []int{fill, v[0]}
	}
	return v
}

func translateConv(im *importer, n *onnx.Node) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	w, err := im.in(n, 1)
	if err != nil {
		return err
	}
	oneD := x.Type().Shape.Rank() == 3
	x4, back, err := im.to4d(x, "Conv")
	if err != nil {
		return err
	}
	if oneD {
		ws := w.Type().Shape
		if ws.Rank() != 3 {
			return fmt.Errorf("W %s of a 1-D convolution must have rank 3", w.Type())
		}
		if w, err = im.reshape(w, []int{ws[0], ws[1], 1, ws[2]}); err != nil {
			return err
		}
	}
	ws := w.Type().Shape
	if ws.Rank() != 4 {
		return fmt.Errorf("W %s must be [cout, cin/group, kh, kw]", w.Type())
	}
	if k := im.attrInts(n, "kernel_shape"); k != nil {
		if oneD {
			k = spatial1d(k, 1, false)
		}
		if len(k) != 2 || k[0] != ws[2] || k[1] != ws[3] {
			return fmt.Errorf("kernel_shape %v does not match W %s", im.attrInts(n, "kernel_shape"), w.Type())
		}
	}
	n1 := im.oneDNode(n, oneD)
	xs := x4.Type().Shape
	attrs, err := im.windowAttrs(n1, []int{ws[2], ws[3]}, xs[2], xs[3])
	if err != nil {
		return err
	}
	attrs["groups"] = im.attrInt(n, "group", 1)
	args := []ir.Value{x4, w}
	if im.has(n, 2) {
		b, err := im.in(n, 2)
		if err != nil {
			return err
		}
		args = append(args, b)
	}
	y, err := im.op(ir.Conv2d, attrs, args...)
	if err != nil {
		return err
	}
	if y, err = back(y); err != nil {
		return err
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

// oneDNode returns n with its window attributes made 2-D when the op is 1-D.
func (im *importer) oneDNode(n *onnx.Node, oneD bool) *onnx.Node {
	if !oneD {
		return n
	}
	c := *n
	c.Attrs = nil
	for _, a := range n.Attrs {
		b := *a
		switch a.Name {
		case "strides", "dilations", "kernel_shape", "pads":
			var v []int
			for _, x := range a.Ints {
				v = append(v, int(x))
			}
			v = spatial1d(v, 1, a.Name == "pads")
			b.Ints = nil
			for _, x := range v {
				b.Ints = append(b.Ints, int64(x))
			}
		}
		c.Attrs = append(c.Attrs, &b)
	}
	return &c
}

func (im *importer) pool(n *onnx.Node, op ir.Op) error {
	x, err := im.in(n, 0)
	if err != nil {
		return err
	}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		return fmt.Errorf("output Indices (the int64 positions of the maxima) is not supported")
	}
	oneD := x.Type().Shape.Rank() == 3
	x4, back, err := im.to4d(x, n.OpType)
	if err != nil {
		return err
	}
	n1 := im.oneDNode(n, oneD)
	kernel := im.attrInts(n1, "kernel_shape")
	if len(kernel) != 2 {
		return fmt.Errorf("kernel_shape %v: vkc has 1-D and 2-D pooling", im.attrInts(n, "kernel_shape"))
	}
	xs := x4.Type().Shape
	attrs, err := im.windowAttrs(n1, kernel, xs[2], xs[3])
	if err != nil {
		return err
	}
	attrs["kernel"] = kernel
	attrs["ceil_mode"] = im.attrInt(n, "ceil_mode", 0) != 0
	if op == ir.AvgPool2d {
		attrs["count_include_pad"] = im.attrInt(n, "count_include_pad", 0) != 0
	}
	if so := im.attrInt(n, "storage_order", 0); so != 0 {
		return fmt.Errorf("storage_order=%d (only the default row-major order is supported)", so)
	}
	y, err := im.op(op, attrs, x4)
	if err != nil {
		return err
	}
	if y, err = back(y); err != nil {
		return err
	}
	return im.set(n, 0, y, im.dt(n, 0))
}

func translateConstant(im *importer, n *onnx.Node) error {
	if len(n.Attrs) != 1 {
		return fmt.Errorf("has %d attributes, want one value", len(n.Attrs))
	}
	a := n.Attrs[0]
	switch a.Name {
	case "value":
		if a.T == nil {
			return fmt.Errorf("value has no tensor")
		}
		raw, err := a.T.Data(im.dir)
		if err != nil {
			return err
		}
		if _, err := IRDType(a.T.DataType); err != nil {
			return err
		}
		im.setConst(n, 0, a.T.DataType, append([]int64{}, a.T.Dims...), raw)
	case "value_float":
		im.setConst(n, 0, onnx.Float, nil, encodeFloats(onnx.Float, []float64{float64(a.F)}))
	case "value_floats":
		v := make([]float64, len(a.Floats))
		for i, f := range a.Floats {
			v[i] = float64(f)
		}
		im.setConst(n, 0, onnx.Float, []int64{int64(len(v))}, encodeFloats(onnx.Float, v))
	case "value_int":
		im.setConst(n, 0, onnx.Int64, nil, encodeInts(onnx.Int64, []int64{a.I}))
	case "value_ints":
		im.setConst(n, 0, onnx.Int64, []int64{int64(len(a.Ints))}, encodeInts(onnx.Int64, a.Ints))
	default:
		return fmt.Errorf("attribute %s is not supported (value, value_float(s) and value_int(s) are)", a.Name)
	}
	return nil
}

// --- folds of shape arithmetic on constants (int64 values, exact)

func foldShape(im *importer, n *onnx.Node) (bool, error) {
	if !im.has(n, 0) {
		return false, fmt.Errorf("input 0 is missing")
	}
	v, ok := im.vals[n.Inputs[0]]
	if !ok {
		return false, fmt.Errorf("value %q is used before it is computed", n.Inputs[0])
	}
	var dims []int64
	if v.v.Node != nil {
		for _, d := range v.v.Type().Shape {
			dims = append(dims, int64(d))
		}
	} else {
		dims = v.dims
	}
	r := int64(len(dims))
	start, end := int64(im.attrInt(n, "start", 0)), int64(im.attrInt(n, "end", int(r)))
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = clamp(start, 0, r), clamp(end, 0, r)
	var out []int64
	if end > start {
		out = dims[start:end]
	}
	if len(out) == 0 {
		return false, fmt.Errorf("Shape with start %d, end %d gives an empty shape: vkc has no empty tensors", start, end)
	}
	im.setConst(n, 0, onnx.Int64, []int64{int64(len(out))}, encodeInts(onnx.Int64, out))
	return true, nil
}

func foldConstantOfShape(im *importer, n *onnx.Node) (bool, error) {
	if !im.allConst(n) {
		return false, nil
	}
	shape, err := im.ints(n, 0, "shape")
	if err != nil {
		return false, err
	}
	dt, val := onnx.Float, []byte{0, 0, 0, 0}
	if a := im.attr(n, "value", onnx.AttrTensor); a != nil && a.T != nil {
		raw, err := a.T.Data(im.dir)
		if err != nil {
			return false, err
		}
		if a.T.NumElements() != 1 {
			return false, fmt.Errorf("value must have one element")
		}
		dt, val = a.T.DataType, raw
	}
	total := int64(1)
	for _, d := range shape {
		if d <= 0 || d > 1<<24 || total*d > 1<<24 {
			return false, fmt.Errorf("shape %v: vkc has no empty tensors and folds at most 2^24 elements", shape)
		}
		total *= d
	}
	raw := make([]byte, 0, int(total)*len(val))
	for i := int64(0); i < total; i++ {
		raw = append(raw, val...)
	}
	im.setConst(n, 0, dt, shape, raw)
	return true, nil
}

// intConst reads a constant integer input with its dims.
func (im *importer) intConst(n *onnx.Node, i int) ([]int64, []int64, onnx.DataType, bool) {
	if !im.has(n, i) {
		return nil, nil, 0, false
	}
	v := im.vals[n.Inputs[i]]
	if v == nil || !v.isConst() {
		return nil, nil, 0, false
	}
	switch v.dt {
	case onnx.Int64, onnx.Int32:
	default:
		return nil, nil, 0, false
	}
	x, err := onnxInts(v.dt, v.raw)
	if err != nil {
		return nil, nil, 0, false
	}
	return x, v.dims, v.dt, true
}

func foldIntCast(im *importer, n *onnx.Node) (bool, error) {
	x, dims, _, ok := im.intConst(n, 0)
	to := onnx.DataType(im.attrInt(n, "to", 0))
	if !ok || (to != onnx.Int64 && to != onnx.Int32) {
		return false, nil
	}
	im.setConst(n, 0, to, dims, encodeInts(to, x))
	return true, nil
}

func foldIntReshape(im *importer, n *onnx.Node) (bool, error) {
	x, dims, dt, ok := im.intConst(n, 0)
	if !ok {
		return false, nil
	}
	s := make(ir.Shape, len(dims))
	for i, d := range dims {
		s[i] = int(d)
	}
	var axes []int64
	if a, ok := im.attrInt64s(n, "axes"); ok {
		axes = a
	} else if im.has(n, 1) {
		var err error
		if axes, err = im.ints(n, 1, "axes"); err != nil {
			return false, err
		}
	}
	out, err := squeezeShape(s, axes, n.OpType == "Unsqueeze")
	if err != nil {
		return false, err
	}
	od := make([]int64, len(out))
	for i, d := range out {
		od[i] = int64(d)
	}
	im.setConst(n, 0, dt, od, encodeInts(dt, x))
	return true, nil
}

func foldIntConcat(im *importer, n *onnx.Node) (bool, error) {
	var all []int64
	dt := onnx.Undefined
	for i := range n.Inputs {
		x, dims, d, ok := im.intConst(n, i)
		if !ok || len(dims) != 1 || (dt != onnx.Undefined && d != dt) {
			return false, nil
		}
		dt = d
		all = append(all, x...)
	}
	if dt == onnx.Undefined {
		return false, nil
	}
	im.setConst(n, 0, dt, []int64{int64(len(all))}, encodeInts(dt, all))
	return true, nil
}

func foldIntGather(im *importer, n *onnx.Node) (bool, error) {
	x, dims, dt, ok := im.intConst(n, 0)
	idx, idims, _, ok2 := im.intConst(n, 1)
	if !ok || !ok2 || len(dims) != 1 || len(idims) > 1 || im.attrInt(n, "axis", 0) != 0 {
		return false, nil
	}
	out := make([]int64, len(idx))
	for i, k := range idx {
		if k < 0 {
			k += dims[0]
		}
		if k < 0 || k >= dims[0] {
			return false, fmt.Errorf("index %d is outside %d elements", idx[i], dims[0])
		}
		out[i] = x[k]
	}
	im.setConst(n, 0, dt, idims, encodeInts(dt, out))
	return true, nil
}

func foldIntArith(im *importer, n *onnx.Node) (bool, error) {
	a, ad, dt, ok := im.intConst(n, 0)
	b, bd, dt2, ok2 := im.intConst(n, 1)
	if !ok || !ok2 || dt != dt2 || len(ad) > 1 || len(bd) > 1 || (len(a) != len(b) && len(a) != 1 && len(b) != 1) {
		return false, nil
	}
	k := max(len(a), len(b))
	out := make([]int64, k)
	for i := range out {
		x, y := a[min(i, len(a)-1)], b[min(i, len(b)-1)]
		switch n.OpType {
		case "Add":
			out[i] = x + y
		case "Sub":
			out[i] = x - y
		case "Mul":
			out[i] = x * y
		case "Div":
			if y == 0 {
				return false, fmt.Errorf("integer division by zero")
			}
			out[i] = x / y
		}
	}
	dims := ad
	if len(bd) > len(ad) || (len(bd) == 1 && bd[0] > 1) {
		dims = bd
	}
	im.setConst(n, 0, dt, dims, encodeInts(dt, out))
	return true, nil
}
