package kernels_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/vkc-project/vkc/internal/cputime"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// Benchmarks of the matmul and attention templates at SmolLM2-135M's sizes (d 576, ffn 1536,
// 9 query heads over 3 key/value heads of 64). Run on the GPU machine with
//
//	kernels.test -test.run '^$' -test.bench 'Matvec|Matmul|Attention' -test.benchtime 1x -test.v
//
// Each reports the median GPU time of the default configuration (runtime.Program.Measure) as
// GFLOP/s and GB/s (the least bytes the problem must move), next to a peer measured in the same
// run: a plain copy of the problem's largest operand by the elementwise template, so the
// bandwidth figure reads as a share of what the device streams. VKC_BENCH_SWEEP=1 also measures
// every valid point of the template's space and logs the five fastest (the tuner's job later;
// here to see how far the default is from the best).
//
// Measured on the NVIDIA H200 (driver 580.159.04), default configurations, medians of three
// fresh processes (they agree within 1%):
//
//	matvec 1×576 · 576→1536 f16     3.55 µs   499 GB/s   copy peer of W 466 GB/s (r+w): 1.07x
//	matmul 128×576 · 576→1536 f16   39.4 µs   5.7 TFLOP/s (f32 FMA, no cooperative matrices;
//	                                          42.9 µs before the register prefetch of tiles)
//	attention decode, kv 512        8.1 µs    (split + combine: two dispatches and a barrier;
//	                                          10.2 µs with the combine's loop not unrolled)
//	attention prefill 512, causal   37.9 µs   15.9 TFLOP/s counting every key (about half are
//	                                          skipped by the causal limit)
//
// The sweeps found the defaults best or within 10% for all four (best: matvec cols=4,vec=2,
// wg=256 3.41 µs; decode block_k=64,splits=8 ~5%). Measurements taken in a process after a
// sweep of hundreds of points were 3-5x slower for the small kernels (prefill attention 203 µs,
// decode 35 µs), so these figures come from processes that measure only the defaults.
// Rejected: keeping attention's output block in unrolled per-element registers (lavapipe's JIT
// took over 10 s at dv=64); a per-row softmax phase with one invocation per row (replaced by
// subgroup butterflies where a row's dv/4 invocations share a subgroup; prefill 1.47 ms → 0.24
// ms together with micro-tiled scores and output in that sweep-affected process).

// launchBench holds the device objects of one Launch, set up once and measured.
type launchBench struct {
	prog  *runtime.Program
	pipes []*runtime.Pipeline // of the steps, in order
	free  []func()
	flops float64
	bytes float64
}

func (r *launchBench) close() {
	if r.prog != nil {
		r.prog.Close()
	}
	for i := len(r.free) - 1; i >= 0; i-- {
		r.free[i]()
	}
}

func setupBenchLaunch(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, args []*ir.Tensor) (*launchBench, error) {
	r := &launchBench{flops: l.Flops, bytes: l.Bytes}
	alloc := func(n int) (*runtime.Buffer, error) {
		b, err := d.NewBuffer(int64(max(n, 16)))
		if err == nil {
			r.free = append(r.free, b.Free)
		}
		return b, err
	}
	fail := func(err error) (*launchBench, error) { r.close(); return nil, err }
	argBuf := make([]*runtime.Buffer, len(args))
	for i, a := range args {
		b, err := alloc(len(a.Data))
		if err != nil {
			return fail(err)
		}
		if err := d.Upload(b, 0, a.Data); err != nil {
			return fail(err)
		}
		argBuf[i] = b
	}
	outBuf := make([]*runtime.Buffer, len(p.Outs))
	for i, t := range p.Outs {
		b, err := alloc(t.Bytes())
		if err != nil {
			return fail(err)
		}
		outBuf[i] = b
	}
	scratch := make([]*runtime.Buffer, len(l.Scratch))
	for i, n := range l.Scratch {
		b, err := alloc(n)
		if err != nil {
			return fail(err)
		}
		scratch[i] = b
	}
	// Sync words start at zero, and a launch leaves them so (attention_split's arrival counts).
	syncs := make([]*runtime.Buffer, len(l.Sync))
	for i, n := range l.Sync {
		b, err := alloc(n)
		if err != nil {
			return fail(err)
		}
		if err := d.Upload(b, 0, make([]byte, max(n, 16))); err != nil {
			return fail(err)
		}
		syncs[i] = b
	}
	var spec runtime.ProgramSpec
	for _, s := range l.Steps {
		k := s.Kernel
		rk := runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
		for id, v := range s.Spec {
			rk.Spec = append(rk.Spec, runtime.SpecConstant{ID: uint32(id), Value: v})
		}
		pl, err := d.NewPipeline(rk)
		if err != nil {
			return fail(err)
		}
		r.free = append(r.free, pl.Close)
		r.pipes = append(r.pipes, pl)
		disp := runtime.Dispatch{Pipeline: pl, Push: s.Push, Grid: s.Grid}
		for bi, op := range s.Bindings {
			buf := map[kernels.OperandKind][]*runtime.Buffer{kernels.Arg: argBuf, kernels.Out: outBuf, kernels.Scratch: scratch, kernels.Sync: syncs}[op.Kind][op.Index]
			disp.Bindings = append(disp.Bindings, runtime.Binding{Buffer: buf, Access: tune.RuntimeAccess(k.Bindings[bi].Access)})
		}
		spec.Dispatches = append(spec.Dispatches, disp)
	}
	spec.KeepOrder = true
	prog, err := d.NewProgram(spec)
	if err != nil {
		return fail(err)
	}
	r.prog = prog
	return r, nil
}

func benchMeasureOpts(d *runtime.Device) runtime.MeasureOptions {
	if d.Info.Type == runtime.CPU {
		return runtime.MeasureOptions{Warmup: 1, Reps: 2, MaxRounds: 1}
	}
	return runtime.MeasureOptions{}
}

// measureWarm measures prog with benchMeasureOpts after running it for benchWarmUp on a GPU:
// the GPU idles while the host builds a point's pipelines, and BenchmarkCoopShapes measured
// from there on the H100 (session 17) timed the first two or three points of a process at full
// speed and every later one 2.5–3.5× slower, whatever its configuration.
func measureWarm(d *runtime.Device, prog *runtime.Program) (runtime.Measurement, error) {
	o := benchMeasureOpts(d)
	for start := time.Now(); d.Info.Type != runtime.CPU && time.Since(start) < benchWarmUp; {
		if _, err := prog.Measure(context.Background(), o); err != nil {
			return runtime.Measurement{}, err
		}
	}
	return prog.Measure(context.Background(), o)
}

// benchWarmUp is how long measureWarm runs a program before it measures it (GPU only).
const benchWarmUp = 100 * time.Millisecond

// measureLaunch builds p with tmpl at c (nil: the default) and returns the median GPU time.
func measureLaunch(d *runtime.Device, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) (time.Duration, *kernels.Launch, kernels.Config, error) {
	caps := kerneltest.CapsOf(&d.Info)
	l, c, err := kernels.BuildAt(tmpl, p, c, caps)
	if err != nil {
		return 0, nil, c, err
	}
	r, err := setupBenchLaunch(d, p, l, args)
	if err != nil {
		return 0, nil, c, err
	}
	defer r.close()
	m, err := measureWarm(d, r.prog)
	if err != nil {
		return 0, nil, c, err
	}
	return m.Median, l, c, nil
}

// benchTemplate measures tmpl on p (default configuration), a copy peer, and optionally the sweep.
func benchTemplate(b *testing.B, tmpl *kernels.Template, p *kernels.Problem, args []*ir.Tensor, peer ir.Type) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	if err := tmpl.Accepts(p, caps); err != nil {
		b.Skipf("%s refuses %s on this device: %v", tmpl.Name, p.Key(), err)
	}
	rng := rand.New(rand.NewSource(1))
	cp := &kernels.Fused{Inputs: []ir.Type{peer}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: peer.DType}}, Outputs: []int{0}}
	cpp := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{peer}, Outs: []ir.Type{peer}, Expr: cp}
	var t, tp time.Duration
	var l *kernels.Launch
	var c kernels.Config
	for i := 0; i < b.N; i++ {
		var err error
		if t, l, c, err = measureLaunch(d, tmpl, p, nil, args); err != nil {
			b.Fatal(err)
		}
		if tp, _, _, err = measureLaunch(d, kernels.Elementwise, cpp, nil, []*ir.Tensor{kerneltest.Random(rng, peer)}); err != nil {
			b.Fatal(err)
		}
	}
	s := t.Seconds()
	gflops, gbps := l.Flops/s/1e9, l.Bytes/s/1e9
	peerGBps := 2 * float64(peer.Bytes()) / tp.Seconds() / 1e9
	b.ReportMetric(float64(t.Nanoseconds())/1e3, "µs")
	b.ReportMetric(gflops, "GFLOP/s")
	b.ReportMetric(gbps, "GB/s")
	b.ReportMetric(peerGBps, "copyGB/s")
	b.Logf("%s on %s [%s]: %v, %.1f GFLOP/s, %.1f GB/s; peer copy of %s: %v, %.1f GB/s (ratio %.2f)",
		tmpl.Name, d.Info.Name, c.Key(), t, gflops, gbps, peer, tp, peerGBps, gbps/peerGBps)
	if os.Getenv("VKC_BENCH_SWEEP") != "" {
		sweepSpace(b, d, tmpl, p, args, t)
	}
}

func sweepSpace(b *testing.B, d *runtime.Device, tmpl *kernels.Template, p *kernels.Problem, args []*ir.Tensor, def time.Duration) {
	caps := kerneltest.CapsOf(&d.Info)
	type point struct {
		c kernels.Config
		t time.Duration
	}
	var pts []point
	for _, c := range tmpl.Space.Points() {
		if tmpl.Space.Valid(p, c, caps) != nil {
			continue
		}
		// Printed before the measurement: a driver that crashes compiling a point names it.
		fmt.Fprintf(os.Stderr, "sweep %s %s\n", tmpl.Name, c.Key())
		t, _, _, err := measureLaunch(d, tmpl, p, c, args)
		if err != nil {
			b.Logf("  %s: %v", c.Key(), err)
			continue
		}
		pts = append(pts, point{c, t})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
	for i, pt := range pts[:min(5, len(pts))] {
		b.Logf("  sweep #%d of %d valid: %s %v (%.2fx the default)", i+1, len(pts), pt.c.Key(), pt.t, float64(def)/float64(pt.t))
	}
}

// SmolLM2 decode: one row through a 576→1536 projection with f16 weights.
func BenchmarkMatvecDecode576x1536(b *testing.B) {
	p := opProblem(b, ir.Linear, nil, ir.T(ir.F16, 1, 576), ir.T(ir.F16, 1536, 576))
	benchTemplate(b, kernels.MatmulVec, p, benchArgs(p, 2), p.Args[1])
}

// SmolLM2 prefill: 128 rows through the same projection.
func BenchmarkMatmulPrefill128x576x1536(b *testing.B) {
	p := opProblem(b, ir.Linear, nil, ir.T(ir.F16, 128, 576), ir.T(ir.F16, 1536, 576))
	benchTemplate(b, kernels.MatmulTiled, p, benchArgs(p, 2), p.Args[1])
}

func attnBenchProblem(b *testing.B, sq, kv int) (*kernels.Problem, []*ir.Tensor) {
	c := attnCase{sq: sq, hq: 9, skv: kv, hkv: 3, d: 64, dv: 64, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: kv}
	return c.problem(b)
}

// Decode attention: one query, 9 heads over 3 key/value heads of 64, a 512-key cache.
func BenchmarkAttentionDecodeKV512(b *testing.B) {
	p, args := attnBenchProblem(b, 1, 512)
	benchTemplate(b, kernels.AttentionSplit, p, args, p.Args[1])
}

// Decode attention at position 127 of a 2048-key cache (SmolLM2's decode step as vkc bench
// --input pos=127 runs it): kv_len 128, so the split ranges cut 128 keys, not 2048.
// VKC_BENCH_SWEEP=1 times every point of the space.
func BenchmarkAttentionDecodeAt127(b *testing.B) {
	c := attnCase{sq: 1, hq: 9, skv: 2048, hkv: 3, d: 64, dv: 64, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: 128}
	p, args := c.problem(b)
	benchTemplate(b, kernels.AttentionSplit, p, args, p.Args[1])
}

// Decode attention of Llama-3.1-8B's shape at position 511 of a 4096-key cache (32 query heads
// over 8 key/value heads of 128; the 8B decode profile's 23–28 µs a layer, docs/bench/h100-2026-12-06).
// VKC_BENCH_SWEEP=1 times every point of the space.
func BenchmarkAttentionDecode8BAt511(b *testing.B) {
	c := attnCase{sq: 1, hq: 32, skv: 4096, hkv: 8, d: 128, dv: 128, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: 512}
	p, args := c.problem(b)
	benchTemplate(b, kernels.AttentionSplit, p, args, p.Args[1])
}

// Prefill attention: 512 causal queries over 512 keys, same heads (64 over 64 on a CPU device,
// where the full size outlasts the runtime's submit timeout).
func BenchmarkAttentionPrefillKV512(b *testing.B) {
	n := 512
	if kerneltest.Device(b).Info.Type == runtime.CPU {
		n = 64
	}
	p, args := attnBenchProblem(b, n, n)
	benchTemplate(b, kernels.AttentionFlash, p, args, p.Args[1])
}

// BenchmarkMatvecPoints times the static choice of MatmulVec and MatmulVecQ (kernels.Build)
// beside a few points of their spaces on decode shapes of SmolLM2 (f32 activations): the LM head
// of a 49152-token vocabulary with its rmsnorm, the SwiGLU projection and the down projection
// with f16 weights, the LM head in Q6_K (a Q4_K_M file's tied embedding) and the SwiGLU
// projection in Q4_K. It is the measurement behind the static choices (vecStatic): each point's
// time and its speed relative to the static one are logged (go test -v; on a CPU implementation
// the process's CPU time per run, which other processes' load leaves alone).
// VKC_BENCH_POINTS=all times every valid point instead.
func BenchmarkMatvecPoints(b *testing.B) {
	f32, f16 := ir.F32, ir.F16
	var fpts, qpts []kernels.Config
	for _, wc := range [][3]int{{128, 2, 1}, {128, 2, 2}, {256, 2, 2}, {64, 8, 1}, {128, 16, 1}, {64, 16, 1}, {128, 16, 2}, {128, 32, 1}, {64, 32, 1}, {32, 16, 1}, {32, 32, 1}} {
		fpts = append(fpts, kernels.Config{"wg": wc[0], "cols": wc[1], "vec": 4, "unroll": wc[2], "stage": 0})
	}
	// lavapipe's static points and the GPU's default with rmsnorm's x·gamma staged (stage = 1)
	for _, wc := range [][2]int{{64, 32}, {32, 16}, {128, 2}} {
		fpts = append(fpts, kernels.Config{"wg": wc[0], "cols": wc[1], "vec": 4, "unroll": 1, "stage": 1})
	}
	for _, wc := range [][4]int{{128, 2, 1, 1}, {128, 2, 2, 1}, {64, 8, 1, 1}, {128, 16, 1, 1}, {128, 16, 2, 1}, {128, 16, 4, 1}, {64, 16, 1, 1}, {32, 16, 1, 1},
		{32, 16, 1, 2}, {32, 8, 1, 4}, {64, 16, 1, 2}, {32, 16, 4, 2}, {128, 4, 4, 2}} {
		qpts = append(qpts, kernels.Config{"wg": wc[0], "cols": wc[1], "span": wc[2], "rows": wc[3], "split": 0, "stage": 0, "unroll": 1})
	}
	// lavapipe's static points and the GPU's default with rmsnorm's x·gamma staged (stage = 1)
	for _, wc := range [][4]int{{32, 8, 1, 4}, {32, 16, 1, 2}, {128, 4, 4, 2}} {
		qpts = append(qpts, kernels.Config{"wg": wc[0], "cols": wc[1], "span": wc[2], "rows": wc[3], "split": 0, "stage": 1, "unroll": 1})
	}
	benchPoints(b, []pointsProblem{
		{"lm_head f16 49152x576", kernels.MatmulVec, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 1, 576), ir.T(f32, 576), ir.T(f16, 49152, 576)), fpts},
		{"up f16 3072x576", kernels.MatmulVec, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 1, 576), ir.T(f32, 576), ir.T(f16, 3072, 576)), fpts},
		{"down f16 576x1536", kernels.MatmulVec, opProblem(b, ir.Linear, nil, ir.T(f32, 1, 1536), ir.T(f16, 576, 1536)), fpts},
		{"lm_head q6_k 49152x768", kernels.MatmulVecQ, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 1, 768), ir.T(f32, 768), ir.T(ir.Q6_K, 49152, 768)), qpts},
		{"up q4_k 3072x768", kernels.MatmulVecQ, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 1, 768), ir.T(f32, 768), ir.T(ir.Q4_K, 3072, 768)), qpts},
	})
}

// BenchmarkTiledPoints is BenchmarkMatvecPoints for matmul_tiled on SmolLM2's 128-token prefill
// products (f32 activations, f16 weights): the gate/up projection with its rmsnorm and the down
// projection. The points include the space's first (64×64 of 4×4) and the 16×16 micro tiles of
// the static choice on a CPU implementation (tiledStatic).
func BenchmarkTiledPoints(b *testing.B) {
	f32, f16 := ir.F32, ir.F16
	var pts []kernels.Config
	for _, c := range [][5]int{{64, 64, 16, 4, 4}, {64, 64, 16, 8, 8}, {128, 128, 16, 16, 16}, {128, 64, 16, 16, 16}, {64, 128, 16, 16, 16}, {128, 128, 8, 16, 16}, {64, 64, 32, 4, 4}, {32, 32, 16, 2, 2}} {
		pts = append(pts, kernels.Config{"tile_m": c[0], "tile_n": c[1], "tile_k": c[2], "micro_m": c[3], "micro_n": c[4]})
	}
	benchPoints(b, []pointsProblem{
		{"up f16 128x3072x576", kernels.MatmulTiled, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 128, 576), ir.T(f32, 576), ir.T(f16, 3072, 576)), pts},
		{"down f16 128x576x1536", kernels.MatmulTiled, opProblem(b, ir.Linear, nil, ir.T(f32, 128, 1536), ir.T(f16, 576, 1536)), pts},
	})
}

// BenchmarkTiledPointsQuant is BenchmarkTiledPoints for a block-quantized B (SmolLM2's
// Q4_K_M file: Q5_0 gate/up, Q4_K and Q6_K down), whose staging dequantizes each quad of a B
// tile as it loads it. Run with an empty MESA_SHADER_CACHE_DIR to see the driver's compile in
// each point's first run.
func BenchmarkTiledPointsQuant(b *testing.B) {
	f32 := ir.F32
	var pts []kernels.Config
	for _, c := range [][5]int{{64, 64, 16, 8, 8}, {128, 128, 16, 16, 16}, {128, 128, 16, 8, 8}, {64, 128, 16, 8, 16}, {64, 64, 16, 4, 4}} {
		pts = append(pts, kernels.Config{"tile_m": c[0], "tile_n": c[1], "tile_k": c[2], "micro_m": c[3], "micro_n": c[4]})
	}
	benchPoints(b, []pointsProblem{
		{"up q5_0 128x3072x576", kernels.MatmulTiled, opProblem(b, ir.RMSNormLinear, nil, ir.T(f32, 128, 576), ir.T(f32, 576), ir.T(ir.Q5_0, 3072, 576)), pts},
		{"down q4_k 128x576x1536", kernels.MatmulTiled, opProblem(b, ir.Linear, nil, ir.T(f32, 128, 1536), ir.T(ir.Q4_K, 576, 1536)), pts},
		{"down q6_k 128x576x1536", kernels.MatmulTiled, opProblem(b, ir.Linear, nil, ir.T(f32, 128, 1536), ir.T(ir.Q6_K, 576, 1536)), pts},
	})
}

type pointsProblem struct {
	name string
	t    *kernels.Template
	p    *kernels.Problem
	pts  []kernels.Config
}

// benchPoints times each problem's static choice, then its points (see BenchmarkMatvecPoints).
func benchPoints(b *testing.B, probs []pointsProblem) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	// On a CPU implementation the device's work is this process's CPU time, which other
	// processes' load does not inflate as it does the timestamps: it is logged beside them and
	// the ratios are of it.
	cpuDev := d.Info.Type == runtime.CPU
	// measure returns the median time, the CPU time per run and the first run's wall time (with
	// pipeline creation: a CPU implementation may compile the kernel at its first dispatch, and
	// an empty MESA_SHADER_CACHE_DIR makes that the driver's compile).
	measure := func(tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) (time.Duration, time.Duration, time.Duration, kernels.Config, error) {
		l, c, err := kernels.BuildAt(tmpl, p, c, caps)
		if err != nil {
			return 0, 0, 0, c, err
		}
		t0 := time.Now()
		r, err := setupBenchLaunch(d, p, l, args)
		if err != nil {
			return 0, 0, 0, c, err
		}
		defer r.close()
		o := benchMeasureOpts(d)
		// The first run outside the CPU time.
		if _, err := r.prog.Measure(context.Background(), runtime.MeasureOptions{Warmup: 1, Reps: 1, MaxRounds: 1}); err != nil {
			return 0, 0, 0, c, err
		}
		first := time.Since(t0)
		c0 := cputime.Process()
		m, err := r.prog.Measure(context.Background(), o)
		if err != nil {
			return 0, 0, 0, c, err
		}
		runs := max(o.Warmup, 0) + m.Rounds*len(m.Samples)
		return m.Median, (cputime.Process() - c0) / time.Duration(max(runs, 1)), first, c, nil
	}
	for i := 0; i < b.N; i++ {
		for _, pr := range probs {
			args := benchArgs(pr.p, 3)
			st, sCPU, sFirst, sc, err := measure(pr.t, pr.p, nil, args)
			if err != nil {
				b.Fatalf("%s: %v", pr.name, err)
			}
			ref := st
			if cpuDev {
				ref = sCPU
			}
			b.Logf("%s: static %s %v (CPU %v; first run %v)", pr.name, sc.Key(), st, sCPU, sFirst.Round(time.Millisecond))
			pts := pr.pts
			if os.Getenv("VKC_BENCH_POINTS") == "all" {
				pts = pr.t.Space.Points()
			}
			for _, c := range pts {
				if pr.t.Space.Valid(pr.p, c, caps) != nil || c.Key() == sc.Key() {
					continue
				}
				t, tCPU, first, _, err := measure(pr.t, pr.p, c, args)
				if err != nil {
					b.Logf("  %s: %v", c.Key(), err)
					continue
				}
				x := t
				if cpuDev {
					x = tCPU
				}
				b.Logf("  %s %v (CPU %v; first run %v): %.2fx the static choice's speed", c.Key(), t, tCPU, first.Round(time.Millisecond), float64(ref)/float64(x))
			}
		}
	}
}
