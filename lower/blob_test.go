package lower

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestNativeFold checks foldNative against the interpreter: for every op it folds, on f32, f16
// and bf16 tensors, the bytes must be the interpreter's exactly (folding a weight natively must
// not change a plan); ops and forms it does not fold must say so.
func TestNativeFold(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	random := func(tt ir.Type) *ir.Tensor {
		x := ir.NewTensor(tt)
		if tt.DType.Quantized() {
			rng.Read(x.Data) // blocks are moved, never decoded, by the folds tested
			return x
		}
		for i := 0; i < x.NumElements(); i++ {
			x.SetFloat64(i, rng.NormFloat64()*100)
		}
		return x
	}
	type tc struct {
		name   string
		op     ir.Op
		attrs  ir.Attrs
		args   []ir.Type
		native bool
	}
	var cases []tc
	for _, d := range []ir.DType{ir.F32, ir.F16, ir.BF16} {
		cases = append(cases,
			tc{"concat axis 0", ir.Concat, ir.Attrs{"axis": 0}, []ir.Type{ir.T(d, 3, 4), ir.T(d, 2, 4), ir.T(d, 5, 4)}, true},
			tc{"concat axis 1", ir.Concat, ir.Attrs{"axis": 1}, []ir.Type{ir.T(d, 3, 2, 4), ir.T(d, 3, 5, 4)}, true},
			tc{"concat axis -1", ir.Concat, ir.Attrs{"axis": -1}, []ir.Type{ir.T(d, 3, 2, 4), ir.T(d, 3, 2, 1)}, true},
			tc{"concat of many rows (compacted)", ir.Concat, ir.Attrs{"axis": 1}, []ir.Type{ir.T(d, 70, 1), ir.T(d, 70, 2)}, true},
			tc{"slice axis 1", ir.Slice, ir.Attrs{"axis": 1, "start": 1, "end": 4}, []ir.Type{ir.T(d, 3, 5, 2)}, true},
			tc{"slice negative bounds", ir.Slice, ir.Attrs{"axis": 0, "start": -3, "end": -1}, []ir.Type{ir.T(d, 6, 2)}, true},
			tc{"slice step 2", ir.Slice, ir.Attrs{"axis": 0, "start": 0, "end": 6, "step": 2}, []ir.Type{ir.T(d, 6, 2)}, false},
			tc{"reshape", ir.Reshape, ir.Attrs{"shape": []int{4, 6}}, []ir.Type{ir.T(d, 2, 3, 4)}, true},
			tc{"transpose", ir.Transpose, ir.Attrs{"perm": []int{2, 0, 1}}, []ir.Type{ir.T(d, 2, 3, 4)}, true},
			tc{"transpose 2d", ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, []ir.Type{ir.T(d, 5, 3)}, true},
			tc{"mul is the interpreter's", ir.Mul, nil, []ir.Type{ir.T(d, 4), ir.T(d, 4)}, false},
		)
		for _, to := range []string{"f32", "f16", "bf16"} {
			cases = append(cases, tc{"cast to " + to, ir.Cast, ir.Attrs{"to": to}, []ir.Type{ir.T(d, 3, 7)}, true})
		}
		cases = append(cases, tc{"cast to i32 is the interpreter's", ir.Cast, ir.Attrs{"to": "i32"}, []ir.Type{ir.T(d, 3)}, false})
	}
	cases = append(cases,
		tc{"concat of q8_0 rows", ir.Concat, ir.Attrs{"axis": 0}, []ir.Type{ir.T(ir.Q8_0, 2, 64), ir.T(ir.Q8_0, 3, 64)}, true},
		tc{"concat of q4_k rows, axis 1 of 3", ir.Concat, ir.Attrs{"axis": 1}, []ir.Type{ir.T(ir.Q4_K, 2, 1, 256), ir.T(ir.Q4_K, 2, 2, 256)}, true},
	)
	for _, c := range cases {
		b := ir.NewBuilder("f")
		params := map[string]*ir.Tensor{}
		var args []ir.Value
		var blobs []*blob
		for i, at := range c.args {
			name := string(rune('a' + i))
			x := random(at)
			params[name] = x
			args = append(args, b.Param(name, at))
			blobs = append(blobs, blobOf(x))
		}
		v, err := b.Op(c.op, c.attrs, args...)
		if err != nil {
			t.Fatalf("%s %s: %v", c.name, c.args[0].DType, err)
		}
		got, ok := foldNative(v.Node, blobs)
		if ok != c.native {
			t.Errorf("%s %s: folded natively %v, want %v", c.name, c.args[0].DType, ok, c.native)
			continue
		}
		if !ok {
			continue
		}
		vals, err := interp.Eval(b.Function(), interp.Env{Params: params})
		if err != nil {
			t.Fatal(err)
		}
		want := vals[v.Node][0]
		if !got.t.Equal(want.Type) || !bytes.Equal(got.bytes(), want.Data) {
			t.Errorf("%s %s: native fold %s differs from the interpreter's %s", c.name, c.args[0].DType, got.t, want.Type)
		}
		if len(got.pieces) > maxPieces {
			t.Errorf("%s: %d pieces, more than %d", c.name, len(got.pieces), maxPieces)
		}
	}
}

// A concatenation on axis 0 and a reshape alias their sources (no copy), and the two halves of
// a slice concatenated again are one piece.
func TestNativeFoldAliases(t *testing.T) {
	b := ir.NewBuilder("f")
	x := ir.NewTensor(ir.T(ir.F16, 4, 8))
	y := ir.NewTensor(ir.T(ir.F16, 2, 8))
	px, py := b.Param("x", x.Type), b.Param("y", y.Type)
	cat := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, px, py)
	got, _ := foldNative(cat.Node, []*blob{blobOf(x), blobOf(y)})
	if len(got.pieces) != 2 || &got.pieces[0][0] != &x.Data[0] || &got.pieces[1][0] != &y.Data[0] {
		t.Fatalf("concat on axis 0 does not alias its sources: %d pieces", len(got.pieces))
	}
	lo := b.MustOp(ir.Slice, ir.Attrs{"axis": 0, "start": 0, "end": 2}, px)
	hi := b.MustOp(ir.Slice, ir.Attrs{"axis": 0, "start": 2, "end": 4}, px)
	bl, _ := foldNative(lo.Node, []*blob{blobOf(x)})
	bh, _ := foldNative(hi.Node, []*blob{blobOf(x)})
	again := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, lo, hi)
	one, _ := foldNative(again.Node, []*blob{bl, bh})
	if len(one.pieces) != 1 || &one.pieces[0][0] != &x.Data[0] || len(one.pieces[0]) != len(x.Data) {
		t.Errorf("x's halves concatenated are %d pieces, want x itself", len(one.pieces))
	}
}
