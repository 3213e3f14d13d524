package importer

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX constants: Constant, Shape, ConstantOfShape, and the folds of integer shape arithmetic.

func registerConstOps() {
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
