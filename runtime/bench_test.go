package runtime

import (
	"context"
	"errors"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Micro-benchmarks of the runtime on the real device (no validation layer). Run on the GPU
// machine with `runtime.test -test.run '^$' -test.bench . -test.benchtime 1x -test.v`; each
// prints its figures with b.Logf and reports them as metrics. Sizes adapt to the device:
// lavapipe gets small shapes.
//
// Measured on the NVIDIA H200 (Vulkan 1.4.312, driver 580.159.04), one run, medians:
//
//	copy 1 GiB -> 1 GiB, vec4              500.6 µs   4289 GB/s read+write = 89.4% of 4.8 TB/s
//	1000 tiny dispatches, no barrier       0.168 µs per dispatch (GPU time)
//	1000 tiny dispatches, barrier after    2.430 µs per dispatch: 14.5x
//	Run of 1000 recorded dispatches        227.6 µs host (GPU 167.7 µs); 189.8 µs with SpinWait
//	re-record + Run of the same            943.7 µs host (recording 707.7 µs): 4.15x
//	recording, per dispatch                0.43 µs with push descriptors, 0.54 µs with sets
//	Analyze, 1000 dispatches in one arena  0.92 ms

const hbmPeak = 4.8e12 // H200 HBM3e, bytes/s: the reference the copy figure is a share of

func openBench(b *testing.B) *Device {
	b.Helper()
	d, err := Open(Options{CacheDir: b.TempDir()})
	if errors.Is(err, ErrNoVulkan) || errors.Is(err, ErrNoDevice) {
		b.Skipf("%s: %v", noDevice, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(x []time.Duration) time.Duration {
	s := append([]time.Duration(nil), x...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// BenchmarkCopyBandwidth: device-to-device copy with vec4 loads and stores; bandwidth counts
// read + write. VKC_BENCH_COPY_MB sets the size (default 1024 on discrete GPUs, 16 elsewhere).
func BenchmarkCopyBandwidth(b *testing.B) {
	d := openBench(b)
	mb := 16
	if d.Info.Type == Discrete {
		mb = 1024
	}
	mb = envInt("VKC_BENCH_COPY_MB", mb)
	bytes := int64(mb) << 20
	if r := int64(d.Info.Caps.MaxStorageBufferRange); bytes > r {
		bytes = r &^ 15
	}
	n := bytes / 16
	cp := copyKernel(b, d)
	src, dst := mustBuffer(b, d, bytes), mustBuffer(b, d, bytes)
	grid := uint32(min((n+255)/256, int64(d.Info.Caps.MaxWorkgroupCount[0])))
	p, err := d.NewProgram(ProgramSpec{Dispatches: []Dispatch{{Pipeline: cp, Push: u32(uint32(n)), Grid: [3]uint32{grid, 1, 1},
		Bindings: []Binding{{Buffer: src, Access: Read}, {Buffer: dst, Access: Write}}}}})
	if err != nil {
		b.Fatal(err)
	}
	var m Measurement
	for b.Loop() {
		if m, err = p.Measure(context.Background(), MeasureOptions{Warmup: 2, Reps: 10}); err != nil {
			b.Fatal(err)
		}
	}
	gbs := 2 * float64(bytes) / m.Median.Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(100*gbs*1e9/hbmPeak, "%of4.8TB/s")
	b.ReportMetric(float64(m.Median.Microseconds()), "µs/copy")
	b.Logf("copy %d MiB: median %v (p10 %v, p90 %v, noisy %v): %.0f GB/s read+write = %.1f%% of 4.8 TB/s",
		bytes>>20, m.Median, m.P10, m.P90, m.Noisy, gbs, 100*gbs*1e9/hbmPeak)
}

// tinyProgram: n one-workgroup in-place scales of disjoint 256-byte slots of one buffer: no
// hazards, so the analysis puts them all in one interval; barrierAll separates every two.
func tinyProgram(b *testing.B, d *Device, n int, barrierAll bool) *Program {
	scale := scaleKernel(b, d, 0)
	x := mustBuffer(b, d, int64(n)*256)
	ds := make([]Dispatch, n)
	for i := range ds {
		ds[i] = Dispatch{Pipeline: scale, Bindings: []Binding{{Buffer: x, Offset: int64(i) * 256, Size: 256, Access: ReadWrite}},
			Push: scalePush(64, 1), Grid: [3]uint32{1, 1, 1}}
	}
	p, err := d.NewProgram(ProgramSpec{Dispatches: ds, BarrierAll: barrierAll})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkTinyDispatches: GPU time per dispatch of 1000 tiny dispatches, with no barrier (the
// analysis finds none) and with a full barrier after each.
func BenchmarkTinyDispatches(b *testing.B) {
	d := openBench(b)
	if !d.Info.Caps.Timestamps {
		b.Skip("no timestamps")
	}
	const n = 1000
	free, fenced := tinyProgram(b, d, n, false), tinyProgram(b, d, n, true)
	if free.Stats().Barriers != 0 || fenced.Stats().Barriers != n-1 {
		b.Fatalf("barriers: %d and %d", free.Stats().Barriers, fenced.Stats().Barriers)
	}
	reps := 10
	if d.Info.Type == CPU {
		reps = 3
	}
	var mf, mb Measurement
	var err error
	for b.Loop() {
		if mf, err = free.Measure(context.Background(), MeasureOptions{Warmup: 1, Reps: reps}); err != nil {
			b.Fatal(err)
		}
		if mb, err = fenced.Measure(context.Background(), MeasureOptions{Warmup: 1, Reps: reps}); err != nil {
			b.Fatal(err)
		}
	}
	per := func(m Measurement) float64 { return float64(m.Median.Nanoseconds()) / 1e3 / n }
	b.ReportMetric(per(mf), "µs/dispatch-nobarrier")
	b.ReportMetric(per(mb), "µs/dispatch-barrier")
	b.ReportMetric(per(mb)/per(mf), "barrier/nobarrier")
	b.Logf("1000 tiny dispatches: %.3f µs each without barriers (%v), %.3f µs each with a barrier after each (%v): ratio %.1f",
		per(mf), mf, per(mb), mb, per(mb)/per(mf))
}

// BenchmarkHostRun: host time of one Run (submit + wait) of 1000 recorded dispatches, against
// re-recording them before each run, and against waiting by polling the fence (SpinWait);
// medians over VKC_BENCH_RUNS runs of each, interleaved.
func BenchmarkHostRun(b *testing.B) {
	d := openBench(b)
	const n = 1000
	p := tinyProgram(b, d, n, false)
	runs := 200
	if d.Info.Type == CPU {
		runs = 10
	}
	runs = envInt("VKC_BENCH_RUNS", runs)
	ctx := context.Background()
	var reuse, spin, rerecord, record []time.Duration
	for b.Loop() {
		reuse, spin, rerecord, record = reuse[:0], spin[:0], rerecord[:0], record[:0]
		for i := 0; i < runs; i++ {
			t0 := time.Now()
			if err := p.Run(ctx, nil, nil); err != nil {
				b.Fatal(err)
			}
			reuse = append(reuse, time.Since(t0))

			d.SetSpinWait(5 * time.Millisecond)
			t0 = time.Now()
			err := p.Run(ctx, nil, nil)
			spin = append(spin, time.Since(t0))
			d.SetSpinWait(0)
			if err != nil {
				b.Fatal(err)
			}

			t0 = time.Now()
			if err := p.Rerecord(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := p.Run(ctx, nil, nil); err != nil {
				b.Fatal(err)
			}
			rerecord = append(rerecord, time.Since(t0))
			record = append(record, t1.Sub(t0))
		}
	}
	mr, ms, mrr, mrec := median(reuse), median(spin), median(rerecord), median(record)
	gpu, _ := p.LastGPUTime()
	b.ReportMetric(float64(mr.Microseconds()), "µs/run-recorded")
	b.ReportMetric(float64(ms.Microseconds()), "µs/run-recorded-spin")
	b.ReportMetric(float64(mrr.Microseconds()), "µs/run-rerecorded")
	b.ReportMetric(float64(mrr)/float64(mr), "rerecord/recorded")
	b.Logf("1000 dispatches, %d runs each: recorded once %v per run (%v with SpinWait), re-recorded each run %v (recording alone %v): ratio %.2f; GPU time of one run %v",
		runs, mr, ms, mrr, mrec, float64(mrr)/float64(mr), gpu)
}

// BenchmarkRecord: recording 1000 dispatches into a command buffer, binding with push
// descriptors (three descriptor writes per dispatch) or with descriptor sets made at NewProgram.
func BenchmarkRecord(b *testing.B) {
	for _, v := range []struct {
		name string
		opts Options
	}{{"push", Options{}}, {"sets", Options{NoPushDescriptors: true}}} {
		b.Run(v.name, func(b *testing.B) {
			v.opts.CacheDir = b.TempDir()
			d, err := Open(v.opts)
			if errors.Is(err, ErrNoVulkan) || errors.Is(err, ErrNoDevice) {
				b.Skipf("%s: %v", noDevice, err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			if v.name == "push" && !d.PushDescriptors() {
				b.Skip("no push descriptors")
			}
			p := tinyProgram(b, d, 1000, false)
			for b.Loop() {
				if err := p.Rerecord(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000/1000, "µs/dispatch")
		})
	}
}
