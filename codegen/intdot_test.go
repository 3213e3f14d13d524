package codegen_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/x448/float16"
)

// TestGPUUnpackHalf: every one of a word's two halves, normal, denormal, zero, infinite, comes
// back as the float32 x448/float16 gives.
func TestGPUUnpackHalf(t *testing.T) {
	d := openDevice(t)
	b := codegen.NewBuilder("unpack_half")
	x := b.Buffer("x", codegen.U32, codegen.ReadOnly)
	y := b.Buffer("y", codegen.Vec(codegen.F32, 2), codegen.WriteOnly)
	b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	b.Store(y, i, b.UnpackHalf2x16(b.Load(x, i)))
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if k.Needs != 0 {
		t.Errorf("UnpackHalf2x16 needs %v, want no feature", k.Needs)
	}
	const n = 1 << 14
	in := make([]byte, 4*n)
	halves := []uint16{0, 0x8000, 1, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0xc000}
	r := rand.New(rand.NewPCG(1, 2))
	for j := 0; j < n; j++ {
		lo, hi := uint16(r.Uint32()), uint16(r.Uint32())
		if j < len(halves) {
			lo, hi = halves[j], halves[len(halves)-1-j]
		}
		if lo&0x7c00 == 0x7c00 && lo&0x3ff != 0 {
			lo = 0 // NaN payloads are not compared
		}
		if hi&0x7c00 == 0x7c00 && hi&0x3ff != 0 {
			hi = 0
		}
		binary.LittleEndian.PutUint32(in[4*j:], uint32(hi)<<16|uint32(lo))
	}
	out := launch(t, d, k, nil, nil, [3]uint32{n / 64, 1, 1}, [][]byte{in, make([]byte, 8*n)})[1]
	for j := 0; j < n; j++ {
		w := binary.LittleEndian.Uint32(in[4*j:])
		for h := 0; h < 2; h++ {
			want := float16.Frombits(uint16(w >> (16 * h))).Float32()
			got := math.Float32frombits(binary.LittleEndian.Uint32(out[8*j+4*h:]))
			if got != want && !(got == 0 && want == 0) {
				t.Fatalf("word %#08x half %d: got %g, want %g", w, h, got, want)
			}
		}
	}
}

// TestGPUSDot: SDot and SDotAccSat of random packed bytes against the sums in Go; skipped (by
// needs) on a device without integer dot products.
func TestGPUSDot(t *testing.T) {
	d := openDevice(t)
	b := codegen.NewBuilder("sdot")
	x := b.Buffer("x", codegen.U32, codegen.ReadOnly)
	y := b.Buffer("y", codegen.U32, codegen.ReadOnly)
	z := b.Buffer("z", codegen.Vec(codegen.I32, 2), codegen.WriteOnly)
	b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	xv, yv := b.Load(x, i), b.Load(y, i)
	dot := b.SDot(xv, yv)
	b.Store(z, i, b.Vec(dot, b.SDotAccSat(xv, yv, b.I32(1000))))
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if !k.Needs.Has(codegen.FeatureIntegerDot) {
		t.Fatalf("SDot declares %v, want integer-dot", k.Needs)
	}
	const n = 4096
	xs, ys := make([]byte, 4*n), make([]byte, 4*n)
	r := rand.New(rand.NewPCG(3, 4))
	for j := range xs {
		xs[j], ys[j] = byte(r.Uint32()), byte(r.Uint32())
	}
	copy(xs, []byte{0x80, 0x80, 0x80, 0x80})
	copy(ys, []byte{0x80, 0x80, 0x80, 0x80})
	out := launch(t, d, k, nil, nil, [3]uint32{n / 64, 1, 1}, [][]byte{xs, ys, make([]byte, 8*n)})[2]
	for j := 0; j < n; j++ {
		want := int32(0)
		for c := 0; c < 4; c++ {
			want += int32(int8(xs[4*j+c])) * int32(int8(ys[4*j+c]))
		}
		got := int32(binary.LittleEndian.Uint32(out[8*j:]))
		acc := int32(binary.LittleEndian.Uint32(out[8*j+4:]))
		if got != want || acc != want+1000 {
			t.Fatalf("word %d: SDot %d, SDotAccSat %d; want %d and %d", j, got, acc, want, want+1000)
		}
	}
}
