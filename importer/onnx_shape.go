package importer

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX layout ops: Reshape, Transpose, Slice, Concat, Split, Squeeze, Unsqueeze, Flatten, Expand, Gather, Identity.

func registerShapeOps() {
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
