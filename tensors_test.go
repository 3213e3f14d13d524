package vkc

import (
	"strings"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
)

func TestInputsOutputs(t *testing.T) {
	f := &plan.Function{Name: "decode",
		Inputs: []plan.Value{
			{Name: "tokens", DType: plan.I32, Shape: []int64{2}},
			{Name: "pos", DType: plan.I32, Shape: []int64{}},
			{Name: "x", DType: plan.F16, Shape: []int64{3}},
		},
		Outputs: []plan.Value{{Name: "y", DType: plan.F32, Shape: []int64{2, 2}}},
	}
	tok := ir.TensorFromFloat64s(ir.T(ir.I32, 2), []float64{5, 7})
	pos := ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{9}) // a one-element tensor for a scalar
	x := ir.TensorFromFloat64s(ir.T(ir.F32, 3), []float64{0.5, -1, 2})
	in, err := Inputs(f, map[string]*ir.Tensor{"tokens": tok, "pos": pos, "x": x})
	if err != nil {
		t.Fatal(err)
	}
	if got := engine.Int32s(in["tokens"]); len(got) != 2 || got[0] != 5 || got[1] != 7 {
		t.Errorf("tokens %v", got)
	}
	if got := engine.Int32s(in["pos"]); len(got) != 1 || got[0] != 9 {
		t.Errorf("pos %v", got)
	}
	if len(in["x"]) != 6 { // converted to f16
		t.Errorf("x has %d bytes, want 6", len(in["x"]))
	}
	outs, err := Outputs(f, map[string][]byte{"y": engine.Float32Bytes([]float32{1, 2, 3, 4})})
	if err != nil {
		t.Fatal(err)
	}
	if y := outs["y"]; y.Type.String() != "f32[2,2]" || y.Float64(3) != 4 {
		t.Errorf("y = %v %v", y.Type, y.Float64s())
	}

	for _, c := range []struct {
		name string
		in   map[string]*ir.Tensor
		want string
	}{
		{"missing", map[string]*ir.Tensor{"tokens": tok, "x": x}, "input pos (i32[]) is missing"},
		{"unknown", map[string]*ir.Tensor{"tokens": tok, "pos": pos, "x": x, "z": x}, `no input "z"`},
		{"shape", map[string]*ir.Tensor{"tokens": x, "pos": pos, "x": x}, "shape [3], the plan wants i32[2]"},
		{"float to int", map[string]*ir.Tensor{"tokens": ir.NewTensor(ir.T(ir.F32, 2)), "pos": pos, "x": x}, "f32 values for an i32 input"},
	} {
		_, err := Inputs(f, c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := Outputs(f, map[string][]byte{"y": make([]byte, 3)}); err == nil || !strings.Contains(err.Error(), "3 bytes for f32[2,2]") {
		t.Errorf("short output: error %v", err)
	}
}

func TestDTypeRoundTrip(t *testing.T) {
	for _, d := range []ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32, ir.U32} {
		pd, err := PlanDType(d)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := IRDType(pd); err != nil || back != d {
			t.Errorf("%s -> %s -> %s, %v", d, pd, back, err)
		}
	}
	if _, err := IRDType(plan.Q8_0); err == nil {
		t.Error("q8_0 has a host form")
	}
}
