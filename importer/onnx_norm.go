package importer

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX normalisations: LayerNormalization, RMSNormalization, BatchNormalization.

func registerNormOps() {
	onnxOps["LayerNormalization"] = func(im *importer, n *onnx.Node) error { return im.norm(n, true) }
	onnxOps["RMSNormalization"] = func(im *importer, n *onnx.Node) error { return im.norm(n, false) }
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
