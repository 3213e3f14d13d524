package ir

import (
	"strings"
	"testing"
)

// TestInfer checks shape and dtype inference of every op family, and that each rejected case
// says what is wrong with the types it was given.
func TestInfer(t *testing.T) {
	f32 := func(d ...int) Type { return T(F32, d...) }
	i32 := func(d ...int) Type { return T(I32, d...) }
	for _, c := range []struct {
		name  string
		op    Op
		attrs Attrs
		args  []Type
		want  Type   // when err is empty
		err   string // substring of the error
	}{
		// elementwise
		{"exp", Exp, nil, []Type{T(F16, 3)}, T(F16, 3), ""},
		{"exp int", Exp, nil, []Type{i32(3)}, Type{}, "needs a float tensor, got i32[3]"},
		{"neg int", Neg, nil, []Type{i32(2)}, i32(2), ""},
		{"relu u32", Relu, nil, []Type{T(U32, 2)}, Type{}, "float or i32"},
		{"cast", Cast, Attrs{"to": "f16"}, []Type{f32(2, 2)}, T(F16, 2, 2), ""},
		{"cast bad", Cast, Attrs{"to": "f8"}, []Type{f32(2)}, Type{}, `unknown dtype "f8"`},
		{"cast missing attr", Cast, nil, []Type{f32(2)}, Type{}, "cast needs attribute to"},
		{"add broadcast", Add, nil, []Type{f32(4, 1, 3), f32(5, 1)}, f32(4, 5, 3), ""},
		{"add scalar", Mul, nil, []Type{f32(2, 3), f32()}, f32(2, 3), ""},
		{"add mismatch", Add, nil, []Type{f32(2, 3), f32(4, 3)}, Type{}, "shapes [2,3] and [4,3] do not broadcast"},
		{"add dtypes", Add, nil, []Type{f32(2), T(F16, 2)}, Type{}, "operand dtypes differ: f32[2] and f16[2]"},
		{"add bool", Add, nil, []Type{T(Bool, 2), T(Bool, 2)}, Type{}, "arithmetic on bool"},
		{"lt", Lt, nil, []Type{i32(3), i32()}, T(Bool, 3), ""},
		{"where", Where, nil, []Type{T(Bool, 2, 1), f32(1, 3), f32()}, f32(2, 3), ""},
		{"where cond", Where, nil, []Type{f32(2), f32(2), f32(2)}, Type{}, "condition must be bool"},
		{"add arity", Add, nil, []Type{f32(2)}, Type{}, "add takes 2 arguments, got 1"},
		// reductions
		{"sum last", Sum, nil, []Type{f32(2, 3)}, f32(2), ""},
		{"mean keepdims", Mean, Attrs{"axis": 0, "keepdims": true}, []Type{f32(2, 3)}, f32(1, 3), ""},
		{"argmax", Argmax, Attrs{"axis": -1}, []Type{f32(4, 7)}, i32(4), ""},
		{"sum to scalar", Sum, nil, []Type{f32(5)}, f32(), ""},
		{"axis range", Max, Attrs{"axis": 2}, []Type{f32(2, 3)}, Type{}, "axis 2 out of range for rank 2"},
		{"unknown attr", Sum, Attrs{"dim": 0}, []Type{f32(2)}, Type{}, `sum has no attribute "dim" (it has axis, keepdims)`},
		{"attr kind", Sum, Attrs{"axis": "x"}, []Type{f32(2)}, Type{}, "axis must be int"},
		// norms
		{"softmax", Softmax, Attrs{"axis": 0}, []Type{f32(3, 4)}, f32(3, 4), ""},
		{"rmsnorm", RMSNorm, Attrs{"eps": 1e-6}, []Type{f32(5, 8), f32(8)}, f32(5, 8), ""},
		{"rmsnorm per head", RMSNorm, nil, []Type{f32(5, 3, 10), f32(10)}, f32(5, 3, 10), ""},
		{"rmsnorm weight", RMSNorm, nil, []Type{f32(5, 8), f32(4)}, Type{}, "parameter 2 must be [8] to match f32[5,8], got f32[4]"},
		{"layernorm", LayerNorm, nil, []Type{f32(2, 4), f32(4), f32(4)}, f32(2, 4), ""},
		{"layernorm bias", LayerNorm, nil, []Type{f32(2, 4), f32(4), f32(3)}, Type{}, "parameter 3 must be [4]"},
		// matmul family
		{"matmul", Matmul, nil, []Type{f32(2, 3), f32(3, 5)}, f32(2, 5), ""},
		{"matmul batch", Matmul, Attrs{"tb": true}, []Type{f32(4, 1, 2, 3), f32(6, 5, 3)}, f32(4, 6, 2, 5), ""},
		{"matmul ta", Matmul, Attrs{"ta": true}, []Type{f32(3, 2), f32(3, 5)}, f32(2, 5), ""},
		{"matmul inner", Matmul, nil, []Type{f32(2, 3), f32(4, 5)}, Type{}, "inner dimensions differ: f32[2,3] and f32[4,5]"},
		{"linear", Linear, nil, []Type{f32(7, 64), f32(32, 64)}, f32(7, 32), ""},
		{"linear bias", Linear, nil, []Type{f32(64), f32(32, 64), f32(32)}, f32(32), ""},
		{"linear width", Linear, nil, []Type{f32(7, 64), f32(64, 32)}, Type{}, "W f32[64,32] does not take inputs of width 64 from f32[7,64]"},
		{"linear bias shape", Linear, nil, []Type{f32(7, 64), f32(32, 64), f32(64)}, Type{}, "bias must be [32], got f32[64]"},
		// layout
		{"reshape", Reshape, Attrs{"shape": []int{4, -1}}, []Type{f32(2, 6)}, f32(4, 3), ""},
		{"reshape count", Reshape, Attrs{"shape": []int{5, 2}}, []Type{f32(2, 6)}, Type{}, "cannot reshape [2,6] (12 elements) to [5,2] (10 elements)"},
		{"transpose", Transpose, Attrs{"perm": []int{2, 0, 1}}, []Type{f32(2, 3, 4)}, f32(4, 2, 3), ""},
		{"transpose perm", Transpose, Attrs{"perm": []int{0, 0}}, []Type{f32(2, 3)}, Type{}, "not a permutation"},
		{"slice", Slice, Attrs{"axis": 1, "start": 1, "end": -1}, []Type{f32(2, 6)}, f32(2, 4), ""},
		{"slice step", Slice, Attrs{"end": 5, "step": 2}, []Type{f32(6)}, f32(3), ""},
		{"slice empty", Slice, Attrs{"start": 4, "end": 2}, []Type{f32(6)}, Type{}, "is empty"},
		{"reverse", Reverse, Attrs{"axis": -1}, []Type{f32(2, 6)}, f32(2, 6), ""},
		{"reverse axis", Reverse, Attrs{"axis": 2}, []Type{f32(2, 6)}, Type{}, "axis 2 out of range for rank 2"},
		{"concat", Concat, Attrs{"axis": 1}, []Type{f32(2, 3), f32(2, 5)}, f32(2, 8), ""},
		{"concat mismatch", Concat, Attrs{"axis": 1}, []Type{f32(2, 3), f32(3, 5)}, Type{}, "cannot concatenate f32[2,3] and f32[3,5] along axis 1"},
		{"expand", Expand, Attrs{"shape": []int{4, 3}}, []Type{f32(1, 3)}, f32(4, 3), ""},
		{"expand bad", Expand, Attrs{"shape": []int{4, 2}}, []Type{f32(1, 3)}, Type{}, "cannot expand [1,3] to [4,2]"},
		{"argtopk", ArgTopK, Attrs{"k": 4}, []Type{f32(3, 10)}, i32(3, 4), ""},
		{"argtopk k", ArgTopK, Attrs{"k": 11}, []Type{f32(3, 10)}, Type{}, "k must be in 1..10"},
		{"argtopk no k", ArgTopK, nil, []Type{f32(3, 10)}, Type{}, "needs attribute k"},
		{"take_along_axis", TakeAlongAxis, nil, []Type{f32(3, 10), i32(3, 4)}, f32(3, 4), ""},
		{"take_along_axis rows", TakeAlongAxis, nil, []Type{f32(3, 10), i32(2, 4)}, Type{}, "same leading axes"},
		{"take_along_axis index dtype", TakeAlongAxis, nil, []Type{f32(3, 10), f32(3, 4)}, Type{}, "indices must be i32 or u32"},
		// model ops
		{"embedding", Embedding, nil, []Type{T(F16, 256, 64), i32(16)}, T(F16, 16, 64), ""},
		{"embedding ids", Embedding, nil, []Type{f32(256, 64), f32(16)}, Type{}, "ids must be i32 or u32, got f32[16]"},
		{"rope", Rope, Attrs{"theta": 1e6}, []Type{f32(16, 4, 10), i32()}, f32(16, 4, 10), ""},
		{"rope odd", Rope, nil, []Type{f32(16, 4, 9), i32()}, Type{}, "must be even"},
		{"rope mode", Rope, Attrs{"mode": "neox"}, []Type{f32(16, 4, 8), i32()}, Type{}, `mode must be half or interleaved, got "neox"`},
		{"rope pos", Rope, nil, []Type{f32(16, 4, 8), f32()}, Type{}, "pos must be an i32 scalar, got f32[]"},
		{"rope seq axis", Rope, Attrs{"seq_axis": -1}, []Type{f32(16, 8), i32()}, Type{}, "seq_axis cannot be the rotated"},
		{"cache_write", CacheWrite, nil, []Type{f32(128, 2, 16), f32(1, 2, 16), i32()}, f32(128, 2, 16), ""},
		{"cache_write fit", CacheWrite, nil, []Type{f32(128, 2, 16), f32(1, 4, 16), i32()}, Type{}, "rows f32[1,4,16] do not fit cache f32[128,2,16]"},
		{"cache_write dtype", CacheWrite, nil, []Type{f32(8, 4), T(I32, 1, 4), i32()}, Type{}, "differ in dtype"},
		{"attention gqa", Attention, Attrs{"causal": true}, []Type{f32(16, 6, 10), f32(48, 2, 10), f32(48, 2, 10), i32()}, f32(16, 6, 10), ""},
		{"attention hsd", Attention, Attrs{"layout": "hsd"}, []Type{f32(4, 16, 8), f32(2, 20, 8), f32(2, 20, 8)}, f32(4, 16, 8), ""},
		{"attention heads", Attention, nil, []Type{f32(16, 5, 8), f32(16, 2, 8), f32(16, 2, 8)}, Type{}, "5 query heads are not a multiple of 2"},
		{"attention kv_len", Attention, nil, []Type{f32(1, 4, 8), f32(16, 2, 8), f32(16, 2, 8), f32()}, Type{}, "kv_len must be an i32 scalar"},
		{"attention dims", Attention, nil, []Type{f32(1, 4, 8), f32(16, 2, 4), f32(16, 2, 8)}, Type{}, "do not agree"},
		{"conv1d whisper", Conv1d, Attrs{"stride": 2, "padding": 1}, []Type{f32(64, 64), f32(64, 64, 3), f32(64)}, f32(64, 32), ""},
		{"conv1d batch", Conv1d, Attrs{"padding": 1}, []Type{f32(2, 16, 64), f32(64, 16, 3)}, f32(2, 64, 64), ""},
		{"conv1d groups", Conv1d, Attrs{"groups": 4}, []Type{f32(16, 10), f32(8, 4, 3)}, f32(8, 8), ""},
		{"conv1d channels", Conv1d, nil, []Type{f32(16, 10), f32(8, 3, 3)}, Type{}, "does not fit 16 input channels in 1 groups"},
		{"conv1d short", Conv1d, nil, []Type{f32(16, 2), f32(8, 16, 3)}, Type{}, "too short for kernel 3"},
		// vision
		{"conv2d", Conv2d, Attrs{"strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}}, []Type{f32(1, 3, 7, 5), f32(8, 3, 3, 3), f32(8)}, f32(1, 8, 4, 3), ""},
		{"conv2d asymmetric pads", Conv2d, Attrs{"strides": []int{2, 2}, "pads": []int{1, 0, 1, 0}}, []Type{f32(1, 1, 7, 5), f32(1, 1, 3, 3)}, f32(1, 1, 4, 2), ""},
		{"conv2d nhwc depthwise", Conv2d, Attrs{"groups": 6, "layout": "nhwc", "dilations": []int{2, 1}}, []Type{f32(2, 9, 8, 6), f32(6, 1, 3, 3)}, f32(2, 5, 6, 6), ""},
		{"conv2d groups", Conv2d, Attrs{"groups": 2}, []Type{f32(1, 6, 5, 5), f32(4, 2, 3, 3)}, Type{}, "does not fit 6 input channels in 2 groups"},
		{"conv2d rank", Conv2d, nil, []Type{f32(6, 5, 5), f32(4, 6, 3, 3)}, Type{}, "x must have rank 4"},
		{"conv2d small", Conv2d, Attrs{"dilations": []int{3, 3}}, []Type{f32(1, 1, 5, 5), f32(1, 1, 3, 3)}, Type{}, "smaller than the dilated kernel 7x7"},
		{"conv2d pads", Conv2d, Attrs{"pads": []int{1, 1}}, []Type{f32(1, 1, 5, 5), f32(1, 1, 3, 3)}, Type{}, "pads must have 4 entries"},
		{"conv2d bias", Conv2d, nil, []Type{f32(1, 1, 5, 5), f32(2, 1, 3, 3), f32(3)}, Type{}, "bias must be a float [2]"},
		{"conv2d layout", Conv2d, Attrs{"layout": "chw"}, []Type{f32(1, 1, 5, 5), f32(2, 1, 3, 3)}, Type{}, `layout must be nchw or nhwc, got "chw"`},
		{"max_pool2d", MaxPool2d, Attrs{"kernel": []int{3, 3}, "strides": []int{2, 2}}, []Type{f32(1, 2, 7, 6)}, f32(1, 2, 3, 2), ""},
		{"max_pool2d ceil", MaxPool2d, Attrs{"kernel": []int{3, 3}, "strides": []int{2, 2}, "ceil_mode": true}, []Type{f32(1, 2, 7, 6)}, f32(1, 2, 3, 3), ""},
		// ceil_mode's last window would start on the trailing pad: dropped.
		{"avg_pool2d ceil last window", AvgPool2d, Attrs{"kernel": []int{3, 3}, "strides": []int{3, 3}, "pads": []int{1, 1, 1, 1}, "ceil_mode": true}, []Type{f32(1, 3, 2, 2)}, f32(1, 3, 1, 1), ""},
		{"avg_pool2d nhwc", AvgPool2d, Attrs{"kernel": []int{2, 2}, "layout": "nhwc"}, []Type{f32(2, 5, 4, 3)}, f32(2, 4, 3, 3), ""},
		{"pool kernel", MaxPool2d, nil, []Type{f32(1, 2, 7, 6)}, Type{}, "max_pool2d needs attribute kernel"},
		{"pool pads", MaxPool2d, Attrs{"kernel": []int{2, 2}, "pads": []int{2, 0, 0, 0}}, []Type{f32(1, 2, 7, 6)}, Type{}, "must be smaller than the dilated kernel 2x2"},
		{"global_avg_pool", GlobalAvgPool, nil, []Type{f32(2, 3, 7, 5)}, f32(2, 3, 1, 1), ""},
		{"global_avg_pool nhwc", GlobalAvgPool, Attrs{"layout": "nhwc"}, []Type{f32(2, 7, 5, 3)}, f32(2, 1, 1, 3), ""},
		{"batch_norm", BatchNorm, Attrs{"eps": 1e-3}, []Type{f32(2, 3, 4, 4), f32(3), f32(3), f32(3), f32(3)}, f32(2, 3, 4, 4), ""},
		{"batch_norm nhwc", BatchNorm, Attrs{"layout": "nhwc"}, []Type{f32(2, 4, 4, 3), f32(3), f32(3), f32(3), f32(3)}, f32(2, 4, 4, 3), ""},
		{"batch_norm params", BatchNorm, nil, []Type{f32(2, 3, 4, 4), f32(3), f32(4), f32(3), f32(3)}, Type{}, "bias must be a float [3] (one per channel of f32[2,3,4,4]), got f32[4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, outs, err := Infer(c.op, c.attrs, c.args)
			if c.err != "" {
				if err == nil {
					t.Fatalf("no error, got %v", outs)
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q lacks %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(outs) != 1 || !outs[0].Equal(c.want) {
				t.Fatalf("got %v, want %s", outs, c.want)
			}
		})
	}
}

// TestEveryOpHasAName checks the op table round-trips through LookupOp, which model.yaml uses.
func TestEveryOpHasAName(t *testing.T) {
	ops := Ops()
	if len(ops) < 50 {
		t.Fatalf("only %d ops", len(ops))
	}
	for _, op := range ops {
		got, ok := LookupOp(op.String())
		if !ok || got != op {
			t.Errorf("LookupOp(%q) = %v, %v", op.String(), got, ok)
		}
	}
}
