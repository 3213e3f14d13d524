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
//	go test ./kernels -run '^$' -bench 'QuantGEMV|QuantGEMM' -benchtime 1x -count 5
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
