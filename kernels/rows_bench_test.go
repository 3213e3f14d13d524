package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// BenchmarkAttentionRows: attention_rows at SmolLM2-135M's shape (9 query heads of 64 over 3
// key/value heads, f16 caches of 16 slots × 2048 positions) on the batched step's two kinds of
// run: a prompt chunk of 64 rows of one slot at positions 512..575, and a decode step of one row
// in each of the 16 slots at positions up to 2047. Each logs the median GPU time of block_r = 1
// (a workgroup per row: the template before prompt chunks were attended in blocks) and of 4 and
// 8, and the ratio to block_r = 1 measured in the same run. On the GPU machine:
//
//	kernels.test -test.run '^$' -test.bench 'AttentionRows' -test.benchtime 1x -test.v
func BenchmarkAttentionRows(b *testing.B) {
	d := kerneltest.Device(b)
	rng := rand.New(rand.NewSource(1))
	const slots, ctx, hq, hkv, hd = 16, 2048, 9, 3, 64
	f16, f32, i32 := ir.F16, ir.F32, ir.I32
	ints := func(v []int) *ir.Tensor {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return ir.TensorFromFloat64s(ir.T(i32, len(v)), f)
	}
	cache := ir.T(f16, slots, ctx, hkv, hd)
	k, v := kerneltest.Random(rng, cache), kerneltest.Random(rng, cache)
	for _, run := range []struct {
		name      string
		slot, pos []int
	}{
		{"chunk64", func() []int { s := make([]int, 64); return s }(), func() []int {
			p := make([]int, 64)
			for i := range p {
				p[i] = 512 + i
			}
			return p
		}()},
		{"decode16", func() []int {
			s := make([]int, slots)
			for i := range s {
				s[i] = i
			}
			return s
		}(), func() []int {
			p := make([]int, slots)
			for i := range p {
				p[i] = (i*131 + 700) % ctx
			}
			return p
		}()},
	} {
		b.Run(run.name, func(b *testing.B) {
			n := len(run.slot)
			q := ir.T(f32, n, hq, hd)
			p := opProblem(b, ir.AttentionRows, nil, q, cache, cache, ir.T(i32, n), ir.T(i32, n))
			args := []*ir.Tensor{kerneltest.Random(rng, q), k, v, ints(run.slot), ints(run.pos)}
			for i := 0; i < b.N; i++ {
				var base float64
				for _, r := range []int{1, 4, 8} {
					t, _, err := rowsMeasure(d, kernels.AttentionRows, p, kernels.Config{"wg": 64, "block_k": 32, "block_r": r}, args)
					if err != nil {
						b.Fatal(err)
					}
					us := float64(t.Nanoseconds()) / 1e3
					if r == 1 {
						base = us
					}
					b.Logf("%s block_r=%d: %.1f µs (%.2fx block_r=1's)", run.name, r, us, base/us)
					b.ReportMetric(us, "µs/block_r="+string(rune('0'+r)))
				}
			}
		})
	}
}
