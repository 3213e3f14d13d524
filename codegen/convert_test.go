package codegen_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/x448/float16"
)

// TestGPUNarrowingRounds: f32 → f16 → f32 in registers rounds to f16 (kernels rely on it to give
// an epilogue the value an f16 tensor would hold). Mesa 25's lavapipe folds the pair away unless
// the narrowing is marked exact (NoContraction): 8.99586 came back unchanged there.
func TestGPUNarrowingRounds(t *testing.T) {
	d := openDevice(t)
	b := codegen.NewBuilder("narrow")
	x := b.Buffer("x", codegen.F32, codegen.ReadOnly)
	h := b.Buffer("h", codegen.F16, codegen.ReadOnly) // 16-bit storage: the f16 values are storage-only
	y := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	v := b.Add(b.Mul(b.Load(x, i), b.F32(1.0000001)), b.Convert(b.Load(h, b.U32(0)), codegen.F32))
	b.Store(y, i, b.Convert(b.Convert(v, codegen.F16), codegen.F32))
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	const n = 256
	in := make([]byte, 4*n)
	for j := 0; j < n; j++ {
		binary.LittleEndian.PutUint32(in[4*j:], math.Float32bits(8+float32(j)/97))
	}
	out := launch(t, d, k, nil, nil, [3]uint32{n / 64, 1, 1}, [][]byte{in, make([]byte, 2), make([]byte, 4*n)})[2]
	for j := 0; j < n; j++ {
		v := math.Float32frombits(binary.LittleEndian.Uint32(in[4*j:])) * 1.0000001
		want := float16.Fromfloat32(v).Float32()
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*j:])); got != want {
			t.Fatalf("f32(f16(%v)) = %v, want %v", v, got, want)
		}
	}
}
