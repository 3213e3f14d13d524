package engine_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
)

func val(name string, d plan.DType, shape ...int64) *plan.Value {
	return &plan.Value{Name: name, DType: d, Shape: shape, Place: plan.Staging}
}

// le32 and le16 write the expected bytes independently of the code under test.
func le32(ws ...uint32) []byte {
	b := make([]byte, 4*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func le16(hs ...uint16) []byte {
	b := make([]byte, 2*len(hs))
	for i, h := range hs {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}

func f32bits(xs ...float32) []byte {
	ws := make([]uint32, len(xs))
	for i, x := range xs {
		ws[i] = math.Float32bits(x)
	}
	return le32(ws...)
}

// TestEncode checks every accepted Go value against bytes written by hand (f16/bf16 bit
// patterns from the IEEE and bfloat16 definitions: 1.0 is 0x3c00 and 0x3f80, -2.5 is 0xc100
// and 0xc020, 65504 is f16's largest finite value 0x7bff).
func TestEncode(t *testing.T) {
	for _, c := range []struct {
		name string
		v    *plan.Value
		x    any
		want []byte
	}{
		{"f32 slice", val("x", plan.F32, 2, 2), []float32{1, -2, 0.5, 3}, f32bits(1, -2, 0.5, 3)},
		{"f32 shaped", val("x", plan.F32, 2, 2), engine.WithShape([]float32{1, -2, 0.5, 3}, 2, 2), f32bits(1, -2, 0.5, 3)},
		{"f16 from f32", val("h", plan.F16, 3), []float32{1, -2.5, 65504}, le16(0x3c00, 0xc100, 0x7bff)},
		{"bf16 from f32", val("h", plan.BF16, 2), []float32{1, -2.5}, le16(0x3f80, 0xc020)},
		{"f16 bits", val("h", plan.F16, 2), []uint16{0x3c00, 0x0001}, le16(0x3c00, 0x0001)},
		{"i32", val("tokens", plan.I32, 3), []int32{5, -1, 1 << 30}, le32(5, 0xffffffff, 1<<30)},
		{"i32 from int", val("tokens", plan.I32, 2), []int{7, 8}, le32(7, 8)},
		{"u32 from int32", val("ids", plan.U32, 2), []int32{0, 9}, le32(0, 9)},
		{"u32", val("ids", plan.U32, 1), []uint32{math.MaxUint32}, le32(math.MaxUint32)},
		{"scalar int", val("pos", plan.I32), 16, le32(16)},
		{"scalar int32", val("pos", plan.I32), int32(-3), le32(0xfffffffd)},
		{"scalar float", val("t", plan.F32), 0.25, f32bits(0.25)},
		{"scalar int to float", val("t", plan.F32), 3, f32bits(3)},
		{"scalar as [1]", val("pos", plan.I32), engine.WithShape([]int32{4}, 1), le32(4)},
		{"one-element vector", val("tokens", plan.I32, 1), int32(42), le32(42)},
		{"bytes", val("x", plan.F32, 1), f32bits(2), f32bits(2)},
		{"tensor", val("x", plan.I32, 1), &engine.Tensor{DType: plan.I32, Shape: []int64{1}, Data: le32(6)}, le32(6)},
	} {
		got, err := engine.Encode(c.v, c.x)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: bytes (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestEncodeErrors: every refusal names the input and says what was wrong.
func TestEncodeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		v    *plan.Value
		x    any
		want string
	}{
		{"count", val("x", plan.F32, 4, 16), make([]float32, 12), "input x: 12 values for f32[4 16] (64 elements)"},
		{"shape", val("x", plan.F32, 4, 16), engine.WithShape(make([]float32, 64), 16, 4), "input x: shape [16 4], the plan wants f32[4 16]"},
		{"float for int", val("tokens", plan.I32, 2), []float32{1, 2}, "input tokens: float32 values"},
		{"float scalar for int", val("pos", plan.I32), 1.5, "an integer input would truncate"},
		{"int for float", val("x", plan.F32, 2), []int32{1, 2}, "int32 values (give float32 values"},
		{"bits for f32", val("x", plan.F32, 1), []uint16{1}, "16-bit float bits"},
		{"negative u32", val("ids", plan.U32, 2), []int32{1, -1}, "element 1 is -1, outside u32's range"},
		{"big i32", val("ids", plan.I32, 1), []uint32{1 << 31}, "element 0 is 2147483648, outside i32's range"},
		{"inexact int", val("t", plan.F32), 1<<24 + 1, "cannot hold exactly"},
		{"inexact f16 int", val("t", plan.F16), 2049, "f16 cannot hold exactly"},
		{"scalar for vector", val("tokens", plan.I32, 3), 5, "one number (want 3 values)"},
		{"bytes", val("x", plan.F32, 2), []byte{1, 2, 3}, "input x: 3 bytes for f32[2] (8 bytes)"},
		{"tensor dtype", val("x", plan.F32, 1), &engine.Tensor{DType: plan.I32, Shape: []int64{1}, Data: le32(1)}, "a i32[1] tensor for f32[1]"},
		{"type", val("x", plan.F32, 1), "1.0", "a string (want a slice"},
		{"nil", val("x", plan.F32, 1), nil, "input x: nil"},
	} {
		_, err := engine.Encode(c.v, c.x)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestEncodeMatchesIR: the half conversions agree with ir's (the compiler's, used for weights)
// on values that round, overflow and underflow.
func TestEncodeMatchesIR(t *testing.T) {
	xs := []float32{0, -0, 1e-8, 6e-5, 0.1, 1.0009766, 3.14159, -65519, 65520, 1e6, float32(math.Inf(-1)), 3e38}
	for _, d := range []struct {
		plan plan.DType
		ir   ir.DType
	}{{plan.F16, ir.F16}, {plan.BF16, ir.BF16}} {
		got, err := engine.Encode(val("h", d.plan, int64(len(xs))), xs)
		if err != nil {
			t.Fatal(err)
		}
		f64 := make([]float64, len(xs))
		for i, x := range xs {
			f64[i] = float64(x)
		}
		want := ir.TensorFromFloat64s(ir.T(d.ir, len(xs)), f64).Data
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: bytes (-ir +engine):\n%s", d.plan, diff)
		}
	}
}

func TestInputsAndResults(t *testing.T) {
	f := &plan.Function{Name: "f",
		Inputs:  []plan.Value{*val("tokens", plan.I32, 2), *val("pos", plan.I32)},
		Outputs: []plan.Value{*val("logits", plan.F16, 1, 3), *val("next", plan.I32, 1)}}
	in, err := engine.Inputs(f, map[string]any{"tokens": []int32{5, 7}, "pos": 9})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]byte{"tokens": le32(5, 7), "pos": le32(9)}, in); diff != "" {
		t.Errorf("inputs (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"tokens": []int32{1, 2}}, "input pos (i32[]) is missing; it takes tokens i32[2], pos i32[]"},
		{map[string]any{"tokens": []int32{1, 2}, "pos": 0, "extra": 1}, `function f has no input "extra"`},
		{map[string]any{"tokens": []int32{1}, "pos": 0}, "function f: input tokens: 1 values for i32[2]"},
	} {
		if _, err := engine.Inputs(f, c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Inputs(%v): error %v, want one containing %q", c.in, err, c.want)
		}
	}

	r := &engine.Results{Function: f, Bytes: map[string][]byte{"logits": le16(0x3c00, 0xc100, 0x7bff), "next": le32(2)}}
	lg, err := r.Float32s("logits")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{1, -2.5, 65504}, lg); diff != "" {
		t.Errorf("logits (-want +got):\n%s", diff)
	}
	bits, err := r.Uint16s("logits")
	if err != nil || !cmp.Equal(bits, []uint16{0x3c00, 0xc100, 0x7bff}) {
		t.Errorf("logits bits %x, %v", bits, err)
	}
	next, err := r.Int32s("next")
	if err != nil || !cmp.Equal(next, []int32{2}) {
		t.Errorf("next %v, %v", next, err)
	}
	if got := r.Shape("logits"); !cmp.Equal(got, []int64{1, 3}) {
		t.Errorf("shape %v", got)
	}
	for _, c := range []struct {
		get  func() error
		want string
	}{
		{func() error { _, err := r.Int32s("logits"); return err }, "output logits: f16 tensor read as int32"},
		{func() error { _, err := r.Float32s("next"); return err }, "output next: i32 tensor read as float32"},
		{func() error { _, err := r.Float32s("probs"); return err }, `no output "probs"; it returns logits f16[1 3], next i32[1]`},
		{func() error {
			_, err := (&engine.Results{Function: f, Bytes: map[string][]byte{"next": le32(1, 2)}}).Int32s("next")
			return err
		}, "next: 8 bytes for i32[1] (4 bytes)"},
	} {
		if err := c.get(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}

// TestBoundedValues: a function with a run-time length takes k·n rows of its bounded inputs for
// one n in range and returns k·n rows of its bounded outputs; the other values keep their sizes.
func TestBoundedValues(t *testing.T) {
	tok := *val("tokens", plan.I32, 8)
	tok.Bounded = true
	x := *val("x", plan.F32, 16, 2) // two rows per unit of the length
	x.Bounded = true
	lg := *val("logits", plan.F32, 8, 3)
	lg.Bounded = true
	f := &plan.Function{Name: "prefill", Length: &plan.Length{Name: "seq", Min: 1, Max: 8},
		Inputs: []plan.Value{tok, *val("pos", plan.I32), x}, Outputs: []plan.Value{lg, *val("last", plan.I32, 1)}}
	in, err := engine.Inputs(f, map[string]any{"tokens": []int32{4, 5, 6}, "pos": 2,
		"x": engine.WithShape(make([]float32, 12), 6, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]byte{"tokens": le32(4, 5, 6), "pos": le32(2), "x": make([]byte, 48)}, in); diff != "" {
		t.Errorf("inputs at seq = 3 (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"tokens": []int32{}, "pos": 0, "x": []float32{}}, "input tokens: 0 values for i32[8], which takes 1·seq values for seq in 1..8"},
		{map[string]any{"tokens": make([]int32, 9), "pos": 0, "x": make([]float32, 18)}, "9 values for i32[8]"},
		{map[string]any{"tokens": []int32{1, 2}, "pos": 0, "x": make([]float32, 12)}, "input x gives seq = 3, input tokens gives 2"},
		{map[string]any{"tokens": []int32{1}, "pos": 0, "x": make([]float32, 3)}, "input x: 3 values for f32[16 2], which takes 4·seq values"},
		{map[string]any{"tokens": []int32{1}, "pos": 0, "x": engine.WithShape(make([]float32, 4), 1, 4)}, "input x: shape [1 4], the plan wants f32[2 2]"},
	} {
		if _, err := engine.Inputs(f, c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Inputs: error %v, want one containing %q", err, c.want)
		}
	}
	r := &engine.Results{Function: f, Bytes: map[string][]byte{"logits": f32bits(1, 2, 3, 4, 5, 6), "last": le32(7)}}
	if got := r.Shape("logits"); !cmp.Equal(got, []int64{2, 3}) {
		t.Errorf("logits of a run at seq = 2 have shape %v, want [2 3]", got)
	}
	if got, err := r.Float32s("logits"); err != nil || !cmp.Equal(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("logits %v, %v", got, err)
	}
	if got := r.Shape("last"); !cmp.Equal(got, []int64{1}) {
		t.Errorf("an unbounded output keeps its shape: %v", got)
	}
}
