package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// Benchmarks of the block-quantized products per format, beside the f16 weight of the same shape
// measured in the same run (the float templates, matmul_vec and matmul_tiled): the decode GEMV
// (matmul_vec_q, one row through 2048→2048) and the prefill GEMM (matmul_tiled reading blocks,
// 64 rows through 1024→1024), default configurations. Each reports the median GPU time of its
// launch (runtime.Program.Measure: on a CPU device, two repetitions after a warm-up; run the
// benchmark with -count N and take the median of the N) in µs and the GB/s of the bytes it must
// move (the weight's blocks, x and y). On lavapipe:
//
//	LP_NUM_THREADS=1 go test ./kernels -run '^$' -bench 'QuantGEMV|QuantGEMM' -benchtime 1x -count 5
//
// Medians of the five, lavapipe (Mesa 25) on one thread of the shared 2-core machine under a load
// of about 15, so only the ratios to f16 in the same run mean much (each format's spread is
// ±30%); lavapipe computes on the CPU, so they measure unpacking work, not memory traffic:
//
//	            GEMV 1×2048·2048²   ×f16    GEMM 64×1024·1024²   ×f16
//	f16              90 ms          1.00         711 ms          1.00
//	q8_0             81 ms          0.90         446 ms          0.63
//	q4_k            147 ms          1.63         792 ms          1.11
//	q2_k            121 ms          1.34         777 ms          1.09
//	q3_k            236 ms          2.61         633 ms          0.89
//	iq4_nl           92 ms          1.02         516 ms          0.72
//	iq4_xs          186 ms          2.06         562 ms          0.79
//	mxfp4            92 ms          1.02         540 ms          0.76
//
// Without LP_NUM_THREADS=1 lavapipe's worker threads wait on each other when the machine is
// oversubscribed: one 8-row decode test took 95 s instead of 41 ms. Not yet measured on a GPU.
var quantBenchDTypes = []ir.DType{ir.F16, ir.Q8_0, ir.Q4_K, ir.Q2_K, ir.Q3_K, ir.IQ4_NL, ir.IQ4_XS, ir.MXFP4}

func benchQuant(b *testing.B, tmplQ, tmplF *kernels.Template, rows, k, n int) {
	for _, d := range quantBenchDTypes {
		b.Run(d.String(), func(b *testing.B) {
			dev := kerneltest.Device(b)
			p := opProblem(b, ir.Linear, nil, ir.T(ir.F32, rows, k), ir.T(d, n, k))
			tmpl := tmplQ
			if !d.Quantized() {
				tmpl = tmplF
			}
			if err := tmpl.Accepts(p, kerneltest.CapsOf(&dev.Info)); err != nil {
				b.Fatalf("%s refuses %s: %v", tmpl.Name, p.Key(), err)
			}
			rng := rand.New(rand.NewSource(3))
			args := []*ir.Tensor{kerneltest.Random(rng, p.Args[0]), kerneltest.Random(rng, p.Args[1])}
			var tm float64
			var bytes float64
			for i := 0; i < b.N; i++ {
				t, l, _, err := measureLaunch(dev, tmpl, p, nil, args)
				if err != nil {
					b.Fatal(err)
				}
				tm, bytes = t.Seconds(), l.Bytes
			}
			b.ReportMetric(tm*1e6, "µs")
			b.ReportMetric(bytes/tm/1e9, "GB/s")
		})
	}
}

// BenchmarkQuantGEMV: decode, one row through a 2048→2048 weight of each format.
func BenchmarkQuantGEMV(b *testing.B) {
	benchQuant(b, kernels.MatmulVecQ, kernels.MatmulVec, 1, 2048, 2048)
}

// BenchmarkQuantGEMM: prefill, 64 rows through a 1024→1024 weight of each format.
func BenchmarkQuantGEMM(b *testing.B) {
	benchQuant(b, kernels.MatmulTiled, kernels.MatmulTiled, 64, 1024, 1024)
}
