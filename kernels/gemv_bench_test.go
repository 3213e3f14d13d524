package kernels_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/roofline"
	"github.com/vkc-project/vkc/runtime"
)

// BenchmarkDecodeGEMV measures decode's matrix–vector products (issue 27's target: at least 70%
// of the copy rate) at Llama-3.1-8B's shapes — q/o 4096×4096, gate/up 14336×4096, down
// 4096×14336, the LM head 128256×4096 — one f32 row through a weight of each format (f16, bf16,
// q8_0, q4_k, q6_k; VKC_GEMV_DTYPES="f16 q4_k …" picks others, VKC_GEMV_SHAPES="512x2048 …" other N×K shapes, VKC_GEMV_FORM=rmsnorm rmsnorm_linear instead of linear), by the template a decode plan
// takes (matmul_vec, matmul_vec_q) and, where the device has integer dot products, by
// matmul_vec_qdot (8-bit activations, --int8 auto; VKC_GEMV_INT8=off leaves it out). On the GPU
// machine:
//
//	cd kernels && ../.gpu/kernels.test -test.run '^$' -test.bench DecodeGEMV -test.benchtime 1x -test.v
//
// (scripts/gpu-bench.sh, part gemv). For each it logs and reports the static choice
// (kernels.Build, what --no-tune compiles) and the best of the points a budgeted search measures
// first (Space.Suggestions; VKC_BENCH_POINTS=all: every valid point): GPU time per product,
// GB/s of the bytes it must move (the weight's, x's and y's: Launch.Bytes) and that as a share of
// the copy rate measured in the same process (roofline.CopyRate: vec4 loads and stores copying
// 512 MiB, read plus written — the copy vkc bench's peaks measure). Weights do not stay in the L2 cache between products: a measured program
// holds enough copies of the weight (at least 256 MiB in all) and runs the product once on each
// with a barrier between two (as the layers of a decode step follow each other; VKC_GEMV_COPIES
// sets the number of copies); the figure is
// the program's median time over the copies, barriers included. "overlapped" is the same
// program without the barriers (the products of the copies may run concurrently: the kernel's
// bandwidth without a barrier's drain and fill).
//
// On a CPU device (lavapipe) the shapes are 64 times narrower (N/64) with one copy and only the
// static choice: a check that the benchmark runs, not a figure.
func BenchmarkDecodeGEMV(b *testing.B) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	cpu := d.Info.Type == runtime.CPU
	names := strings.Fields(os.Getenv("VKC_GEMV_DTYPES"))
	if len(names) == 0 {
		names = []string{"f16", "bf16", "q8_0", "q4_k", "q6_k"}
	}
	var dts []ir.DType
	for _, n := range names {
		dt, err := ir.ParseDType(n)
		if err != nil {
			b.Fatalf("VKC_GEMV_DTYPES: %v", err)
		}
		dts = append(dts, dt)
	}
	// VKC_GEMV_FORM=rmsnorm measures rmsnorm_linear (x normalised and scaled by gamma as the
	// product reads it: decode's QKV and gate/up projections and the LM head) instead of linear.
	form := os.Getenv("VKC_GEMV_FORM")
	if form != "" && form != "rmsnorm" {
		b.Fatalf("VKC_GEMV_FORM=%q: want rmsnorm or nothing", form)
	}
	copyBytes := 512 << 20
	if cpu {
		copyBytes = 16 << 20
	}
	copyRate := measureCopyRate(b, d, copyBytes)
	b.Logf("copy rate on %s: %.1f GB/s (roofline's vec4 copy of %d MiB, read and written)", d.Info.Name, copyRate, copyBytes>>20)
	shapes := []struct {
		name string
		n, k int
	}{{"qo", 4096, 4096}, {"gate_up", 14336, 4096}, {"down", 4096, 14336}, {"lm_head", 128256, 4096}}
	if env := os.Getenv("VKC_GEMV_SHAPES"); env != "" {
		// VKC_GEMV_SHAPES="512x2048 16384x2048": other products, N×K (a 1B model's K/V or
		// gate/up projections).
		shapes = shapes[:0]
		for _, f := range strings.Fields(env) {
			var n, k int
			if _, err := fmt.Sscanf(f, "%dx%d", &n, &k); err != nil || n <= 0 || k <= 0 {
				b.Fatalf("VKC_GEMV_SHAPES: %q is not N×K (e.g. 512x2048)", f)
			}
			shapes = append(shapes, struct {
				name string
				n, k int
			}{f, n, k})
		}
	}
	for _, sh := range shapes {
		for _, dt := range dts {
			b.Run(sh.name+"/"+dt.String(), func(b *testing.B) {
				n := sh.n
				if cpu {
					n /= 64
				}
				p := opProblem(b, ir.Linear, nil, ir.T(ir.F32, 1, sh.k), ir.T(dt, n, sh.k))
				if form == "rmsnorm" {
					p = opProblem(b, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(ir.F32, 1, sh.k), ir.T(ir.F32, sh.k), ir.T(dt, n, sh.k))
				}
				tmpl := kernels.MatmulVec
				if dt.Quantized() {
					tmpl = kernels.MatmulVecQ
				}
				if err := tmpl.Accepts(p, caps); err != nil {
					b.Skipf("%s refuses %s on this device: %v", tmpl.Name, p.Key(), err)
				}
				copies := 1
				if !cpu {
					wb := p.Args[len(p.Args)-1].Bytes()
					copies = min(max((256<<20+wb-1)/wb, 1), 32)
				}
				// VKC_GEMV_COPIES=1: one copy, the weight's bytes partly or wholly in the L2
				// cache from one product to the next (as a tuner that times one copy sees them).
				if n, err := strconv.Atoi(os.Getenv("VKC_GEMV_COPIES")); err == nil && n > 0 {
					copies = n
				}
				g, err := newGEMVBench(d, p, copies)
				if err != nil {
					b.Fatal(err)
				}
				defer g.close()
				// With 8-bit activations allowed (--int8 auto), a block-quantized weight is also
				// measured by the integer-dot template: x quantized, then the product (two steps);
				// VKC_GEMV_INT8=off leaves it out.
				type gemvRun struct {
					tmpl *kernels.Template
					caps kernels.Caps
				}
				runs := []gemvRun{{tmpl, caps}}
				if i8 := caps; dt.Quantized() && caps.IntegerDot && os.Getenv("VKC_GEMV_INT8") != "off" {
					i8.Int8 = kernels.Int8Auto
					if kernels.MatmulVecQDot.Accepts(p, i8) == nil {
						runs = append(runs, gemvRun{kernels.MatmulVecQDot, i8})
					}
				}
				for ri, r := range runs {
					var rep gemvReport
					for i := 0; i < b.N; i++ {
						if rep, err = g.run(b, r.tmpl, r.caps, cpu); err != nil {
							b.Fatal(err)
						}
					}
					pct := func(t time.Duration) float64 { return 100 * rep.bytes / t.Seconds() / 1e9 / copyRate }
					gbps := func(t time.Duration) float64 { return rep.bytes / t.Seconds() / 1e9 }
					b.Logf("%s %s %d×%d: static [%s] %.2f µs %.1f GB/s (%.0f%% of copy), overlapped %.2f µs (%.0f%%); "+
						"best of %d [%s] %.2f µs %.1f GB/s (%.0f%%), overlapped %.2f µs (%.0f%%); %d copies",
						r.tmpl.Name, dt, n, sh.k, rep.static.Key(), us(rep.st), gbps(rep.st), pct(rep.st), us(rep.stOver), pct(rep.stOver),
						rep.points, rep.best.Key(), us(rep.bt), gbps(rep.bt), pct(rep.bt), us(rep.btOver), pct(rep.btOver), copies)
					unit := ""
					if ri > 0 {
						unit = "int8-"
					}
					b.ReportMetric(us(rep.st), unit+"static-µs")
					b.ReportMetric(pct(rep.st), unit+"static-%copy")
					b.ReportMetric(us(rep.bt), unit+"best-µs")
					b.ReportMetric(pct(rep.bt), unit+"best-%copy")
				}
			})
		}
	}
}

func us(t time.Duration) float64 { return float64(t.Nanoseconds()) / 1e3 }

type gemvReport struct {
	static, best   kernels.Config
	st, stOver, bt time.Duration // per product: static chained, overlapped; best chained
	btOver         time.Duration
	points         int
	bytes          float64
}

// gemvBench holds a problem's operands on the device: copies of the weight, one x, an output
// per copy.
type gemvBench struct {
	d *runtime.Device
	p *kernels.Problem
	x *runtime.Buffer
	// gamma is rmsnorm_linear's (VKC_GEMV_FORM=rmsnorm), argument 1; the weight is the last.
	gamma *runtime.Buffer
	w     []*runtime.Buffer
	y     []*runtime.Buffer
	free  []func()
	// statsLogged holds the kernels whose driver statistics were logged (VKC_BENCH_LOG=points).
	statsLogged map[string]bool
}

func (g *gemvBench) close() {
	for i := len(g.free) - 1; i >= 0; i-- {
		g.free[i]()
	}
}

func newGEMVBench(d *runtime.Device, p *kernels.Problem, copies int) (*gemvBench, error) {
	g := &gemvBench{d: d, p: p}
	alloc := func(n int, data []byte) (*runtime.Buffer, error) {
		buf, err := d.NewBuffer(int64(max(n, 16)))
		if err != nil {
			return nil, err
		}
		g.free = append(g.free, buf.Free)
		if data != nil {
			err = d.Upload(buf, 0, data)
		}
		return buf, err
	}
	rng := rand.New(rand.NewSource(5))
	var err error
	if g.x, err = alloc(p.Args[0].Bytes(), kerneltest.Random(rng, p.Args[0]).Data); err != nil {
		g.close()
		return nil, err
	}
	wt := p.Args[len(p.Args)-1]
	if len(p.Args) == 3 {
		if g.gamma, err = alloc(p.Args[1].Bytes(), kerneltest.Random(rng, p.Args[1]).Data); err != nil {
			g.close()
			return nil, err
		}
	}
	w := tiledRandom(rng, wt)
	for i := 0; i < copies; i++ {
		wb, err := alloc(len(w), w)
		if err != nil {
			g.close()
			return nil, err
		}
		yb, err := alloc(p.Outs[0].Bytes(), nil)
		if err != nil {
			g.close()
			return nil, err
		}
		g.w, g.y = append(g.w, wb), append(g.y, yb)
	}
	return g, nil
}

// tiledRandom is a random weight of type t made of one random slab of at most 256 rows repeated
// (random values for the whole of a 128k-row weight would take the host longer than the GPU's
// whole benchmark; the product's speed does not depend on them).
func tiledRandom(rng *rand.Rand, t ir.Type) []byte {
	rows := t.Shape[0]
	slab := t
	slab.Shape = append(ir.Shape{min(rows, 256)}, t.Shape[1:]...)
	s := kerneltest.Random(rng, slab).Data
	out := make([]byte, t.Bytes())
	for off := 0; off < len(out); off += len(s) {
		copy(out[off:], s)
	}
	return out
}

// run measures the static choice and the suggested points (all valid points with
// VKC_BENCH_POINTS=all; none on a CPU device).
func (g *gemvBench) run(b *testing.B, tmpl *kernels.Template, caps kernels.Caps, cpu bool) (gemvReport, error) {
	var r gemvReport
	l, c, err := kernels.Build(tmpl, g.p, caps)
	if err != nil {
		return r, err
	}
	r.static, r.bytes = c, l.Bytes
	if r.st, r.stOver, err = g.measure(b, l, cpu); err != nil {
		return r, err
	}
	r.best, r.bt, r.btOver = c, r.st, r.stOver
	var pts []kernels.Config
	switch {
	case cpu:
	case os.Getenv("VKC_BENCH_POINTS") == "all":
		pts = tmpl.Space.Points()
	default:
		pts = append([]kernels.Config{tmpl.Space.Points()[0]}, tmpl.Space.Suggestions(g.p, caps)...)
	}
	r.points = 1
	// VKC_BENCH_LOG=points logs every point's times and, on a device opened with
	// VKC_PIPELINE_STATS=1, each kernel's driver statistics (logStats).
	logPoints := os.Getenv("VKC_BENCH_LOG") == "points"
	if logPoints {
		b.Logf("  static %s: %.2f µs, overlapped %.2f µs", c.Key(), us(r.st), us(r.stOver))
	}
	for _, pc := range pts {
		if pc.Key() == c.Key() || tmpl.Space.Valid(g.p, pc, caps) != nil {
			continue
		}
		pl, err := tmpl.Build(g.p, pc, caps)
		if err != nil {
			b.Logf("  %s: %v", pc.Key(), err)
			continue
		}
		t, tOver, err := g.measure(b, pl, cpu)
		if err != nil {
			b.Logf("  %s: %v", pc.Key(), err)
			continue
		}
		r.points++
		if logPoints {
			b.Logf("  %s: %.2f µs, overlapped %.2f µs", pc.Key(), us(t), us(tOver))
		}
		if t < r.bt {
			r.best, r.bt, r.btOver = pc, t, tOver
		}
	}
	return r, nil
}

// measure times l over every copy of the weight, with a barrier between two products and
// without, and returns the median time per product of each. A launch of several steps (the
// integer-dot template quantizes x into scratch first) runs them all for each copy, with
// scratch buffers of its own, so that copies without barriers still overlap.
func (g *gemvBench) measure(b *testing.B, l *kernels.Launch, cpu bool) (chained, overlapped time.Duration, err error) {
	if len(l.Sync) != 0 {
		return 0, 0, errUnexpectedLaunch
	}
	pls := make([]*runtime.Pipeline, len(l.Steps))
	for i, s := range l.Steps {
		k := s.Kernel
		rk := runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
		for id, v := range s.Spec {
			rk.Spec = append(rk.Spec, runtime.SpecConstant{ID: uint32(id), Value: v})
		}
		if pls[i], err = g.d.NewPipeline(rk); err != nil {
			return 0, 0, err
		}
		defer pls[i].Close()
		if os.Getenv("VKC_BENCH_LOG") == "points" {
			g.logStats(b, pls[i])
		}
	}
	scratch := make([][]*runtime.Buffer, len(g.w))
	for c := range scratch {
		for _, n := range l.Scratch {
			buf, err := g.d.NewBuffer(int64(max(n, 16)))
			if err != nil {
				return 0, 0, err
			}
			defer buf.Free()
			scratch[c] = append(scratch[c], buf)
		}
	}
	o := runtime.MeasureOptions{}
	if cpu {
		o = runtime.MeasureOptions{Warmup: 1, Reps: 2, MaxRounds: 1}
	}
	times := [2]time.Duration{}
	for i, barriers := range []bool{true, false} {
		spec := runtime.ProgramSpec{KeepOrder: true, BarrierAll: barriers}
		for c := range g.w {
			for si, s := range l.Steps {
				disp := runtime.Dispatch{Pipeline: pls[si], Push: s.Push, Grid: s.Grid}
				for bi, op := range s.Bindings {
					var buf *runtime.Buffer
					switch {
					case op.Kind == kernels.Arg && op.Index == 0:
						buf = g.x
					case op.Kind == kernels.Arg && op.Index == len(g.p.Args)-1:
						buf = g.w[c]
					case op.Kind == kernels.Arg && op.Index == 1 && g.gamma != nil:
						buf = g.gamma
					case op.Kind == kernels.Out && op.Index == 0:
						buf = g.y[c]
					case op.Kind == kernels.Scratch && op.Index < len(scratch[c]):
						buf = scratch[c][op.Index]
					default:
						return 0, 0, errUnexpectedLaunch
					}
					disp.Bindings = append(disp.Bindings, runtime.Binding{Buffer: buf, Access: tune.RuntimeAccess(s.Kernel.Bindings[bi].Access)})
				}
				spec.Dispatches = append(spec.Dispatches, disp)
			}
		}
		prog, err := g.d.NewProgram(spec)
		if err != nil {
			return 0, 0, err
		}
		// The GPU idles while the host builds a point's pipeline, and a measurement of a few
		// milliseconds from there ran at idle clocks: the same kernel measured 2–3× slower in
		// a process's first round (docs/bench/h200-2026-12-05, call 8). So each program first
		// runs for gemvWarmUp.
		for start := time.Now(); !cpu && time.Since(start) < gemvWarmUp; {
			if _, err := prog.Measure(context.Background(), o); err != nil {
				prog.Close()
				return 0, 0, err
			}
		}
		m, err := prog.Measure(context.Background(), o)
		prog.Close()
		if err != nil {
			return 0, 0, err
		}
		times[i] = m.Median / time.Duration(len(g.w))
		if cpu {
			return times[0], times[0], nil
		}
	}
	return times[0], times[1], nil
}

// logStats logs the driver's statistics of a kernel once (a device opened with
// VKC_PIPELINE_STATS=1; on NVIDIA registers per invocation and shared memory, which bound
// occupancy); nothing where the device has none.
func (g *gemvBench) logStats(b *testing.B, p *runtime.Pipeline) {
	// A name leaves out some of a point (its specialization constants).
	key := fmt.Sprint(p.Kernel.Name, p.Kernel.Spec)
	if g.statsLogged[key] {
		return
	}
	stats, err := p.Statistics()
	if err != nil {
		return
	}
	if g.statsLogged == nil {
		g.statsLogged = map[string]bool{}
	}
	g.statsLogged[key] = true
	var s []string
	for _, st := range stats {
		s = append(s, st.Name+"="+strconv.FormatFloat(st.Value, 'f', -1, 64))
	}
	b.Logf("  stats %s: %s", p.Kernel.Name, strings.Join(s, ", "))
}

// gemvWarmUp is how long a GEMV program runs before it is measured (GPU only).
const gemvWarmUp = 100 * time.Millisecond

var errUnexpectedLaunch = errors.New("the launch does not read x and W and write y (through scratch buffers at most)")

// measureCopyRate runs roofline's copy (vec4<f32> loads and stores, 16 bytes each: the copy
// vkc bench rates kernels against) over n bytes and returns the GB/s of the bytes read and
// written. (The elementwise template's copy, one f32 an invocation, reached 1.49 TB/s on the H200
// where this one reaches 4.19: a denominator of the former flattered every product.)
func measureCopyRate(b *testing.B, d *runtime.Device, n int) float64 {
	bw, err := roofline.CopyRate(context.Background(), d, int64(n))
	if err != nil {
		b.Fatal(err)
	}
	return bw / 1e9
}
