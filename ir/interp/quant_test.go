package interp

import (
	"bytes"
	le "encoding/binary"
	"fmt"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// q8Rows is a Q8_0 tensor [rows, 32]: row r has scale d (f16 bits) and quants q0(r) + j.
func q8Rows(rows int, d uint16, q0 func(r int) int) *ir.Tensor {
	x := &ir.Tensor{Type: ir.T(ir.Q8_0, rows, 32)}
	for r := 0; r < rows; r++ {
		b := make([]byte, 34)
		le.LittleEndian.PutUint16(b, d)
		for j := 0; j < 32; j++ {
			b[2+j] = byte(int8(q0(r) + j))
		}
		x.Data = append(x.Data, b...)
	}
	return x
}

// TestQuantizedWeights: the interpreter computes with the dequantized values of a
// block-quantized parameter (worked out by hand here), and concat joins the blocks.
func TestQuantizedWeights(t *testing.T) {
	w := q8Rows(3, 0x3400, func(r int) int { return -5 * r }) // d = 0.25: W[r][j] = 0.25·(j − 5r)
	e := q8Rows(4, 0x3800, func(r int) int { return 10*r - 20 })
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 32))
	ids, _ := b.Input("ids", ir.T(ir.I32, 2))
	pw := b.Param("w", w.Type)
	pe := b.Param("e", e.Type)
	lin := b.MustOp(ir.Linear, nil, x, pw)
	mm := b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, x, pw)
	emb := b.MustOp(ir.Embedding, nil, pe, ids)
	cast := b.MustOp(ir.Cast, ir.Attrs{"to": "f32"}, pw)
	cat0 := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, pw, pe)
	cat1 := b.MustOp(ir.Concat, ir.Attrs{"axis": 1}, pw, pw)
	xv := make([]float64, 64)
	for j := 0; j < 32; j++ {
		xv[j] = 1 // row 0: all ones; row 1: e₀
	}
	xv[32] = 1
	out, err := EvalValues(b.Function(), Env{
		Inputs: map[string]*ir.Tensor{"x": f32(sh(2, 32), xv...), "ids": i32(sh(2), 3, 0)},
		Params: map[string]*ir.Tensor{"w": w, "e": e},
	}, lin, mm, emb, cast, cat0, cat1)
	if err != nil {
		t.Fatal(err)
	}
	// y[0][r] = Σⱼ 0.25·(j − 5r) = 124 − 40r; y[1][r] = 0.25·(−5r).
	want := []float64{124, 84, 44, 0, -1.25, -2.5}
	for i, v := range out[0].Float64s() {
		if v != want[i] {
			t.Errorf("linear[%d] = %v, want %v", i, v, want[i])
		}
	}
	for i, v := range out[1].Float64s() {
		if v != want[i] {
			t.Errorf("matmul[%d] = %v, want %v", i, v, want[i])
		}
	}
	// embedding rows 3 and 0: 0.5·(10r − 20 + j)
	ev := out[2].Float64s()
	if out[2].Type.String() != "f32[2,32]" || ev[0] != 5 || ev[31] != 20.5 || ev[32] != -10 || ev[63] != 5.5 {
		t.Errorf("embedding %s: %v", out[2].Type, ev)
	}
	if cv := out[3].Float64s(); cv[32+7] != 0.25*(7-5) {
		t.Errorf("cast[1,7] = %v", cv[39])
	}
	// concat along rows: the blocks of w then those of e.
	if !bytes.Equal(out[4].Data, append(append([]byte(nil), w.Data...), e.Data...)) || out[4].Type.String() != "q8_0[7,32]" {
		t.Errorf("concat axis 0: %s, %d bytes", out[4].Type, len(out[4].Data))
	}
	// concat along the last axis: each row is w's row twice.
	var both []byte
	for r := 0; r < 3; r++ {
		row := w.Data[34*r : 34*(r+1)]
		both = append(append(both, row...), row...)
	}
	if !bytes.Equal(out[5].Data, both) || out[5].Float64(64+33) != w.Float64(32+1) {
		t.Errorf("concat axis 1: %s", out[5].Type)
	}
}

// TestQuantizedWeightShared: evaluations sharing a ParamCache at once, one op reading a
// quantized weight's blocks a row at a time (linear, and linear over a concat of it) and one
// converting the whole weight (cast), give what one evaluation alone gives. Run with -race: the
// conversion of a shared lazy value must not race with its readers.
func TestQuantizedWeightShared(t *testing.T) {
	w := q8Rows(256, 0x3400, func(r int) int { return r%11 - 9 })
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 32))
	pw := b.Param("w", w.Type)
	lin := b.MustOp(ir.Linear, nil, x, pw)
	cast := b.MustOp(ir.Cast, ir.Attrs{"to": "f32"}, pw)
	mm := b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, x, cast)
	cat := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, pw, pw)
	lin2 := b.MustOp(ir.Linear, nil, x, cat)
	xv := make([]float64, 96)
	for i := range xv {
		xv[i] = float64(i%7) - 3
	}
	env := func(c *ParamCache) Env {
		return Env{Inputs: map[string]*ir.Tensor{"x": f32(sh(3, 32), xv...)}, Params: map[string]*ir.Tensor{"w": w}, Cache: c}
	}
	want, err := EvalValues(b.Function(), env(nil), lin, mm, lin2)
	if err != nil {
		t.Fatal(err)
	}
	// linear reads the blocks, matmul the converted cast: the same products.
	if !bytes.Equal(want[0].Data, want[1].Data) {
		t.Fatalf("linear over the blocks %v, matmul over the converted weight %v", want[0].Float64s(), want[1].Float64s())
	}
	cache := NewParamCache()
	errs, start := make(chan error, 8), make(chan struct{})
	for range 8 {
		go func() {
			<-start
			got, err := EvalValues(b.Function(), env(cache), lin, mm, lin2)
			if err == nil {
				for i := range got {
					if !bytes.Equal(got[i].Data, want[i].Data) {
						err = fmt.Errorf("output %d: %v, want %v", i, got[i].Float64s(), want[i].Float64s())
					}
				}
			}
			errs <- err
		}()
	}
	close(start)
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
