package vkc

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
)

// The byte maps of Executable.Run hold each input and output in its plan Value's layout: the
// dtype's little-endian encoding, dense and row-major, exactly Value.Bytes() long. The helpers
// below convert between that layout and ir.Tensor (what the interpreter and the weight files
// use), for programs that have both the compiler and the engine. Package engine, which does not
// import ir, converts between that layout and plain Go slices (engine.Encode, engine.Results).

// IRDType is the ir dtype of a plan dtype. Block-quantized plan dtypes have none (they only
// describe stored weights, never a function's input or output).
func IRDType(d plan.DType) (ir.DType, error) {
	switch d {
	case plan.F32:
		return ir.F32, nil
	case plan.F16:
		return ir.F16, nil
	case plan.BF16:
		return ir.BF16, nil
	case plan.I32:
		return ir.I32, nil
	case plan.U32:
		return ir.U32, nil
	}
	return ir.InvalidDType, fmt.Errorf("plan dtype %s has no host tensor form", d)
}

// PlanDType is the plan dtype of an ir dtype. ir's bool has no plan dtype: kernels keep booleans
// as u32, and a function whose signature has a bool is given u32 by the compiler.
func PlanDType(d ir.DType) (plan.DType, error) {
	if d == ir.Bool {
		return plan.InvalidDType, fmt.Errorf("ir dtype %s has no plan form", d)
	}
	return lower.PlanDType(d)
}

// ValueType is the ir type of a function's input or output.
func ValueType(v *plan.Value) (ir.Type, error) {
	d, err := IRDType(v.DType)
	if err != nil {
		return ir.Type{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	s := make(ir.Shape, len(v.Shape))
	for i, n := range v.Shape {
		if n < 0 || n > math.MaxInt32 {
			return ir.Type{}, fmt.Errorf("%s: dimension %d is %d", v.Name, i, n)
		}
		s[i] = int(n)
	}
	return ir.Type{DType: d, Shape: s}, nil
}

// TensorBytes returns t in the layout of the plan value v, for Executable.Run. The shape must be
// v's (a scalar input also accepts a one-element tensor). The dtype is converted when it differs,
// except from a float type to an integer type, which would truncate silently and is refused.
func TensorBytes(v *plan.Value, t *ir.Tensor) ([]byte, error) {
	if v.Bounded && t.Type.Shape.Rank() > 0 {
		// A bounded input takes the rows of the run: its leading axis is the run-time length.
		w, err := v.WithRows(int64(t.Type.Shape[0]))
		if err != nil {
			return nil, fmt.Errorf("input %w", err)
		}
		v = &w
	}
	want, err := ValueType(v)
	if err != nil {
		return nil, err
	}
	have := t.Type
	sameShape := have.Shape.Equal(want.Shape) ||
		(want.Shape.Rank() == 0 && have.Shape.NumElements() == 1)
	if !sameShape {
		return nil, fmt.Errorf("input %s: shape %v, the plan wants %s", v.Name, have.Shape, want)
	}
	if have.DType != want.DType {
		if have.DType.IsFloat() && !want.DType.IsFloat() {
			return nil, fmt.Errorf("input %s: %s values for an %s input (convert them explicitly)", v.Name, have.DType, want.DType)
		}
		if !have.DType.IsFloat() && !have.DType.IsInt() {
			return nil, fmt.Errorf("input %s: %s values for an %s input", v.Name, have.DType, want.DType)
		}
		t = t.Convert(want.DType)
	}
	if len(t.Data) != want.Bytes() {
		return nil, fmt.Errorf("input %s: %d bytes of data for %s (%d bytes)", v.Name, len(t.Data), want, want.Bytes())
	}
	return t.Data, nil
}

// ValueTensor wraps the bytes of output (or input) v as an ir.Tensor. The bytes are not copied.
// A bounded value (plan.Value.Bounded) holds the rows of its run.
func ValueTensor(v *plan.Value, b []byte) (*ir.Tensor, error) {
	if v.Bounded {
		rowBytes, _, err := v.RowOf()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, err)
		}
		if rowBytes == 0 || uint64(len(b))%rowBytes != 0 {
			return nil, fmt.Errorf("%s: %d bytes are not whole rows of %s%v", v.Name, len(b), v.DType, v.Shape)
		}
		w, err := v.WithRows(int64(uint64(len(b)) / rowBytes))
		if err != nil {
			return nil, err
		}
		v = &w
	}
	typ, err := ValueType(v)
	if err != nil {
		return nil, err
	}
	if len(b) != typ.Bytes() {
		return nil, fmt.Errorf("%s: %d bytes for %s (%d bytes)", v.Name, len(b), typ, typ.Bytes())
	}
	return &ir.Tensor{Type: typ, Data: b}, nil
}

// Inputs converts named host tensors into Run's byte map for function f, checking that every
// input of f is given exactly once and that no unknown name is given.
func Inputs(f *plan.Function, tensors map[string]*ir.Tensor) (map[string][]byte, error) {
	out := make(map[string][]byte, len(f.Inputs))
	for i := range f.Inputs {
		v := &f.Inputs[i]
		t, ok := tensors[v.Name]
		if !ok {
			return nil, fmt.Errorf("function %s: input %s (%s%v) is missing; it takes %s", f.Name, v.Name, v.DType, v.Shape, engine.Signature(f.Inputs))
		}
		b, err := TensorBytes(v, t)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		out[v.Name] = b
	}
	for name := range tensors {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("function %s has no input %q; it takes %s", f.Name, name, engine.Signature(f.Inputs))
		}
	}
	return out, nil
}

// Outputs converts Run's output byte map into named host tensors.
func Outputs(f *plan.Function, outs map[string][]byte) (map[string]*ir.Tensor, error) {
	res := make(map[string]*ir.Tensor, len(f.Outputs))
	for i := range f.Outputs {
		v := &f.Outputs[i]
		b, ok := outs[v.Name]
		if !ok {
			return nil, fmt.Errorf("function %s: output %s missing from the run's results", f.Name, v.Name)
		}
		t, err := ValueTensor(v, b)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		res[v.Name] = t
	}
	return res, nil
}
