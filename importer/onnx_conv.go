package importer

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX windows: Conv, MaxPool, AveragePool, GlobalAveragePool (1-D and 2-D).

func registerConvOps() {
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
