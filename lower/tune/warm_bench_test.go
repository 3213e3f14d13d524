package tune

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/runtime"
)

// BenchmarkIdleThenMeasure shows whether an isolated kernel measured right after the device sat
// idle runs slower than after sustained load (GPU clocks ramping), which would bias tuning
// towards points measured later in a search. It reports the median of a Measure after 1 s idle
// ("idle-us") and after 300 ms of back-to-back runs ("busy-us"), for a bandwidth-heavy
// matmul (SmolLM2's lm_head: 128×576 by 49152×576, f16) and a tiny elementwise kernel. Run it on
// the GPU machine: go test -run '^$' -bench IdleThenMeasure ./lower/tune (small shapes on lavapipe).
func BenchmarkIdleThenMeasure(b *testing.B) {
	d := testDevice(b)
	caps := CapsOf(&d.Info)
	rows, vocab := 128, 49152
	if d.Info.Type == runtime.CPU {
		rows, vocab = 8, 512
	}
	x, w := ir.T(ir.F16, rows, 576), ir.T(ir.F16, vocab, 576)
	problems := map[string]*kernels.Problem{
		"lmhead":      {Op: ir.Linear, Args: []ir.Type{x, w}, Outs: []ir.Type{ir.T(ir.F16, rows, vocab)}, NumOpArgs: 2},
		"norm-lmhead": {Op: ir.RMSNormLinear, Attrs: ir.Attrs{"eps": 1e-5}, Args: []ir.Type{x, ir.T(ir.F16, 576), w}, Outs: []ir.Type{ir.T(ir.F16, rows, vocab)}, NumOpArgs: 3},
	}
	if p, ok := ProblemOf(ir.Neg, nil, []ir.Type{ir.T(ir.F16, 4096)}, []ir.Type{ir.T(ir.F16, 4096)}); ok {
		problems["tiny"] = p
	}
	for name, p := range problems {
		b.Run(name, func(b *testing.B) {
			bench := firstBench(b, d, p, caps)
			defer bench.Close()
			args := Inputs(p, rand.New(rand.NewSource(1)))
			if _, err := bench.Run(context.Background(), args); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var idle, busy []float64
			for i := 0; i < b.N; i++ {
				time.Sleep(time.Second)
				m, err := bench.Program().Measure(ctx, runtime.MeasureOptions{})
				if err != nil {
					b.Fatal(err)
				}
				idle = append(idle, float64(m.Median.Microseconds()))
				for t0 := time.Now(); time.Since(t0) < 300*time.Millisecond; {
					if err := bench.Program().Run(ctx, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				m, err = bench.Program().Measure(ctx, runtime.MeasureOptions{})
				if err != nil {
					b.Fatal(err)
				}
				busy = append(busy, float64(m.Median.Microseconds()))
			}
			b.ReportMetric(medianF(idle), "idle-us")
			b.ReportMetric(medianF(busy), "busy-us")
			// The same kernel on model-like data (weights scaled by 0.05, norm gains 1): a kernel
			// whose speed depends on the values would show it here.
			for i, a := range args {
				if !a.Type.DType.IsFloat() {
					continue
				}
				for j := 0; j < a.NumElements(); j++ {
					switch {
					case len(args) == 3 && i == 1:
						a.SetFloat64(j, 1)
					case i > 0:
						a.SetFloat64(j, a.Float64(j)*0.05)
					}
				}
			}
			if _, err := bench.Run(ctx, args); err != nil {
				b.Fatal(err)
			}
			m, err := bench.Program().Measure(ctx, runtime.MeasureOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(m.Median.Microseconds()), "modeldata-us")
		})
	}
}

// firstBench is a bench of p's first template at its static point on d.
func firstBench(tb testing.TB, d *runtime.Device, p *kernels.Problem, caps kernels.Caps) *Bench {
	tb.Helper()
	ts, err := kernels.For(p, caps)
	if err != nil {
		tb.Fatal(err)
	}
	l, _, err := kernels.Build(ts[0], p, caps)
	if err != nil {
		tb.Fatal(err)
	}
	bench, err := NewBench(d, p, l, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return bench
}
