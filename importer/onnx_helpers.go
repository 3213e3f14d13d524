package importer

import (
	"fmt"
	"strconv"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// ONNX what every translation uses: reading inputs and attributes, binding outputs.

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

// mustV unwraps an op whose error the next op reports (a zero Value makes it fail cleanly).
func mustV(v ir.Value, err error) ir.Value {
	if err != nil {
		return ir.Value{}
	}
	return v
}
