package kernels_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// quantCacheRun runs p's kernel of tmpl at its default on the device and compares the block-
// quantized cache it writes, its first result, with the interpreter's (quantCacheDiff).
func quantCacheRun(t *testing.T, d *runtime.Device, tmpl *kernels.Template, p *kernels.Problem, args []*ir.Tensor, caps kernels.Caps) (blocks int, steps float64) {
	t.Helper()
	l, _, err := kernels.Build(tmpl, p, caps)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kerneltest.Run(d, p, l, args)
	if err != nil {
		t.Fatal(err)
	}
	want, err := kerneltest.Expect(p, args)
	if err != nil {
		t.Fatal(err)
	}
	return quantCacheDiff(t, got[0], want[0])
}

// quantCacheDiff compares two block-quantized caches of format d block by block: the blocks
// whose bytes differ, and the largest difference of their values in quant steps of the
// expected block (|got − want| / |d_want|; d itself must agree to its f16 bits).
func quantCacheDiff(t *testing.T, got, want *ir.Tensor) (blocks int, steps float64) {
	t.Helper()
	f := want.Type.DType.Format()
	g, w := got.Float64s(), want.Float64s()
	for blk := 0; blk < len(want.Data)/f.BlockBytes; blk++ {
		gb, wb := got.Data[blk*f.BlockBytes:(blk+1)*f.BlockBytes], want.Data[blk*f.BlockBytes:(blk+1)*f.BlockBytes]
		if string(gb) == string(wb) {
			continue
		}
		blocks++
		if gb[0] != wb[0] || gb[1] != wb[1] {
			t.Errorf("block %d: scale bits %02x%02x, want %02x%02x", blk, gb[1], gb[0], wb[1], wb[0])
		}
		d := math.Abs(float64(ir.F16ToF32(uint16(wb[0]) | uint16(wb[1])<<8)))
		for j := blk * f.BlockElems; j < (blk+1)*f.BlockElems; j++ {
			if d > 0 {
				steps = math.Max(steps, math.Abs(g[j]-w[j])/d)
			}
		}
	}
	return blocks, steps
}

// TestQuantCacheWriteOnDevice: cache_write and rope_cache_write into q8_0 and q4_0 caches (f32
// and f16 rows, both rope modes, a run of several rows and a decode row) against the
// interpreter, which quantizes as ggml's quantize_row_q8_0_ref and quantize_row_q4_0_ref do.
// The blocks written must equal the interpreter's, byte for byte, except where the device's
// f32 division or contraction lands a value on the other side of a rounding tie: at most one
// block in a hundred, by one quant step. The rows the write leaves alone keep their bytes.
func TestQuantCacheWriteOnDevice(t *testing.T) {
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	rng := rand.New(rand.NewSource(11))
	// Lavapipe compiles these unrolled kernels slowly (tens of seconds under load): each format
	// gets a plain write and one rope mode. Every case's rows fit the cache of cacheRows rows
	// at its position (the last q4_0 case fills the cache to its end).
	const cacheRows = 12
	cases := []struct {
		kv      ir.DType
		op      ir.Op
		mode    string
		xdt     ir.DType
		rows    int
		kvh, hd int
		pos     int
	}{
		{ir.Q8_0, ir.CacheWrite, "", ir.F32, 5, 2, 64, 3},
		{ir.Q8_0, ir.RopeCacheWrite, "half", ir.F16, 3, 2, 128, 0},
		{ir.Q4_0, ir.CacheWrite, "", ir.F16, 1, 2, 32, 8},
		{ir.Q4_0, ir.RopeCacheWrite, "interleaved", ir.F32, 4, 1, 64, cacheRows - 4},
	}
	for _, c := range cases {
		kv := c.kv
		name := fmt.Sprintf("%s/%s_%s_%s_%dx%dx%d", kv, c.op, c.mode, c.xdt, c.rows, c.kvh, c.hd)
		t.Run(name, func(t *testing.T) {
			if c.pos < 0 || c.pos+c.rows > cacheRows {
				t.Fatalf("the case writes rows %d..%d, outside the cache of %d rows", c.pos, c.pos+c.rows-1, cacheRows)
			}
			f := kv.Format()
			st := ir.T(kv, cacheRows, c.kvh, c.hd)
			x := ir.T(c.xdt, c.rows, c.kvh, c.hd)
			var attrs ir.Attrs
			if c.op == ir.RopeCacheWrite {
				attrs = ir.Attrs{"theta": 10000.0, "mode": c.mode}
			}
			p := problem(t, c.op, attrs, st, x, ir.T(ir.I32))
			tmpl := kernels.CacheWrite
			if c.op == ir.RopeCacheWrite {
				tmpl = kernels.RopeCacheWrite
			}
			if err := tmpl.Accepts(p, caps); err != nil {
				t.Fatalf("refused: %v", err)
			}
			state := &ir.Tensor{Type: st, Data: f.RandomBlocks(rng, st.Bytes()/f.BlockBytes)}
			args := []*ir.Tensor{state, kerneltest.Random(rng, x), posTensor(c.pos)}
			blocks, steps := quantCacheRun(t, d, tmpl, p, args, caps)
			total := st.Bytes() / f.BlockBytes
			written := x.Shape.NumElements() / f.BlockElems
			t.Logf("%d of %d written blocks differ from the interpreter's, by at most %.3g quant steps", blocks, written, steps)
			if blocks > written/100 || steps > 1 {
				t.Errorf("%d of %d blocks (%d written) differ, by up to %.3g quant steps", blocks, total, written, steps)
			}
		})
	}
}
