package kernels_test

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// Benchmarks of the cooperative-matrix templates against their f32-arithmetic peers, on a device
// with cooperative matrices (the H200):
//
//	kernels.test -test.run '^$' -test.bench 'Coop' -test.benchtime 1x -test.v
//
// For each problem: a sweep of the cooperative template over chosen points of its space (matmul:
// coopSweep, block shapes from 32×32 to 128×128, single and double buffering; attention: all of
// it), then the peer's default, the template's default and the sweep's best measured again, one
// after the other, so the reported figures do not depend on what the sweep did to the device. Times are medians of
// runtime.Program.Measure's repetitions; TFLOP/s count the launch's Flops (attention: every key,
// about half of which a causal mask skips). VKC_COOP_QUICK=1 measures coopQuick instead of the
// sweep (scripts/gpu-coop.sh runs one process per problem that way).
//
// Measured on the NVIDIA H200 (driver 580.159.04, docs/bench/coopmat-bench-*.txt):
//
//	GEMM 4096³ f16        matmul_tiled 17.7 ms 7.8 TFLOP/s; matmul_coop default 1.06 ms 130 TFLOP/s,
//	                      128×128 single-buffered 0.74 ms 186 TFLOP/s (23.9x)
//	SmolLM2 prefill-128   matmul_coop 2.8-4.7x matmul_tiled on each projection (same process)
//	attention prefill     attention_coop 1.35x attention_flash at 128 queries, 1.61x at 512
//	                      (after a sweep, in one process)

type measured struct {
	name string
	c    kernels.Config
	t    time.Duration
	l    *kernels.Launch
}

func (m measured) String() string {
	return fmt.Sprintf("%-16s %-70s %10.1f µs %8.1f TFLOP/s", m.name, m.c.Key(), float64(m.t.Nanoseconds())/1e3, m.l.Flops/m.t.Seconds()/1e12)
}

// coopQuick are the points measured instead of the sweep when VKC_COOP_QUICK is set (a process per
// problem, measuring few points, gives figures unaffected by a long sweep): the default, single
// buffering, 128×128 blocks, sixteen subgroups of one tile, deep single-buffered slices.
var coopQuick = []kernels.Config{
	{"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "k_steps": 2, "stages": 2, "split_k": 1, "lean": 0},
	{"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "k_steps": 2, "stages": 1, "split_k": 1, "lean": 0},
	{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "k_steps": 2, "stages": 2, "split_k": 1, "lean": 0},
	{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "k_steps": 2, "stages": 1, "split_k": 1, "lean": 0},
	{"warps_m": 4, "warps_n": 4, "tiles_m": 1, "tiles_n": 1, "k_steps": 2, "stages": 2, "split_k": 1, "lean": 0},
	{"warps_m": 4, "warps_n": 4, "tiles_m": 2, "tiles_n": 2, "k_steps": 1, "stages": 2, "split_k": 1, "lean": 0},
	{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "k_steps": 4, "stages": 1, "split_k": 1, "lean": 0},
}

func coopBench(b *testing.B, p *kernels.Problem, args []*ir.Tensor, peer, coop *kernels.Template, points []kernels.Config) {
	d := kerneltest.Device(b)
	if os.Getenv("VKC_COOP_QUICK") != "" && coop == kernels.MatmulCoop {
		points = coopQuick
	}
	caps := kerneltest.CapsOf(&d.Info)
	if err := coop.Accepts(p, caps); err != nil {
		b.Skipf("%s: %v", d.Info.Name, err)
	}
	measure := func(tm *kernels.Template, c kernels.Config) (measured, error) {
		t, l, c, err := measureLaunch(d, tm, p, c, args)
		return measured{tm.Name, c, t, l}, err
	}
	var pts []measured
	for _, c := range points {
		if coop.Space.Valid(p, c, caps) != nil {
			continue
		}
		m, err := measure(coop, c)
		if err != nil {
			b.Errorf("%s [%s]: %v", coop.Name, c.Key(), err)
			continue
		}
		pts = append(pts, m)
	}
	if len(pts) == 0 {
		b.Fatalf("no valid point of %s measured", coop.Name)
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
	best := pts[0].c
	var final []measured
	for _, run := range []struct {
		tm *kernels.Template
		c  kernels.Config
	}{{peer, nil}, {coop, nil}, {coop, best}} {
		m, err := measure(run.tm, run.c)
		if err != nil {
			b.Fatal(err)
		}
		final = append(final, m)
	}
	b.Logf("%s on %s (sweep of %d points of %s; best of the sweep %v):", p.Key(), d.Info.Name, len(pts), coop.Name, pts[0].t)
	for _, m := range pts {
		b.Logf("  sweep %s", m)
	}
	for _, m := range final {
		b.Logf("  %s  %.2fx the peer", m, float64(final[0].t)/float64(m.t))
	}
	b.ReportMetric(final[2].l.Flops/final[2].t.Seconds()/1e12, "TFLOP/s")
	b.ReportMetric(float64(final[0].t)/float64(final[2].t), "x_peer")
}

// coopSweep are the matmul_coop points the benchmarks measure (warps_m, warps_n, tiles_m, tiles_n,
// k_steps, stages).
var coopSweep = func() []kernels.Config {
	var out []kernels.Config
	for _, v := range [][6]int{
		{2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 1}, {1, 1, 2, 2, 2, 2}, {1, 2, 2, 2, 2, 2}, {2, 1, 2, 2, 2, 2},
		{2, 2, 4, 2, 2, 2}, {2, 2, 2, 4, 2, 2}, {4, 2, 2, 2, 2, 2}, {2, 4, 2, 2, 2, 2}, {1, 1, 4, 4, 2, 2},
		{2, 1, 4, 4, 2, 2}, {2, 2, 4, 4, 2, 2}, {2, 2, 4, 4, 1, 2}, {2, 2, 4, 4, 4, 1}, {4, 2, 2, 4, 2, 2},
		{2, 4, 4, 2, 2, 2}, {4, 4, 2, 2, 1, 2}, {4, 4, 1, 1, 2, 2},
	} {
		out = append(out, kernels.Config{"warps_m": v[0], "warps_n": v[1], "tiles_m": v[2], "tiles_n": v[3], "k_steps": v[4], "stages": v[5], "split_k": 1, "lean": 0})
	}
	return out
}()

// A plain f16 GEMM, 4096×4096×4096 (W stored [N, K], as a linear layer's).
func BenchmarkCoopGEMM4096(b *testing.B) {
	p := opProblem(b, ir.Linear, nil, ir.T(ir.F16, 4096, 4096), ir.T(ir.F16, 4096, 4096))
	coopBench(b, p, benchArgs(p, 3), kernels.MatmulTiled, kernels.MatmulCoop, coopSweep)
}

// Prefill products of 512 rows with a block-quantized B dequantized to f16 as it is staged,
// beside the same product with an f16 B: Llama-3.1-8B's merged gate/up (4096 → 28672) in Q4_K
// as a linear and as rmsnorm_linear of an f16 and of an f32 A (the 8B prefill's form, 63% of
// its time on the H100 at 24.6 TFLOP/s, where its plain Q4_K linears ran at 47), its gate alone
// in f16, and Llama-3.2-1B's merged gate/up (2048 → 16384) in Q4_K. On the H200 the 1B
// prefill's gate/up ran at 25 TFLOP/s at the static point (docs/bench/h200-2026-12-05, call 6)
// where the f16 GEMM 4096³ ran at 130: the sweep says what the dequantization costs and which
// point a static choice should take. coopSweep and coopQuick's points (VKC_COOP_QUICK: the
// latter only).
func BenchmarkCoopQuantPrefill(b *testing.B) {
	points := slices.Clone(coopQuick)
	for _, c := range coopSweep {
		if !slices.ContainsFunc(points, func(q kernels.Config) bool { return q.Key() == c.Key() }) {
			points = append(points, c)
		}
	}
	for _, c := range []struct {
		name string
		n, k int
		dt   ir.DType
		norm string // "": linear; "f16": rmsnorm_linear of an f16 A; "f32": of an f32 A rounded to f16 (act=f16)
	}{{"8b-gate_up-q4_k", 28672, 4096, ir.Q4_K, ""}, {"8b-gate_up-q4_k-rmsnorm", 28672, 4096, ir.Q4_K, "f16"},
		{"8b-gate_up-q4_k-rmsnorm-f32", 28672, 4096, ir.Q4_K, "f32"}, {"8b-gate-f16", 14336, 4096, ir.F16, ""},
		{"1b-gate_up-q4_k", 16384, 2048, ir.Q4_K, ""}} {
		b.Run(c.name, func(b *testing.B) {
			var p *kernels.Problem
			switch c.norm {
			case "":
				p = opProblem(b, ir.Linear, nil, ir.T(ir.F16, 512, c.k), ir.T(c.dt, c.n, c.k))
			case "f16":
				p = opProblem(b, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(ir.F16, 512, c.k), ir.T(ir.F16, c.k), ir.T(c.dt, c.n, c.k))
			default:
				p = opProblem(b, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(ir.F32, 512, c.k), ir.T(ir.F32, c.k), ir.T(c.dt, c.n, c.k))
			}
			coopBench(b, p, benchArgs(p, 5), kernels.MatmulTiled, kernels.MatmulCoop, points)
			if c.dt.Quantized() {
				// B dequantized to an f16 copy first (matmul_coop_dq), against matmul_coop's
				// static point as the peer.
				coopBench(b, p, benchArgs(p, 5), kernels.MatmulCoop, kernels.MatmulCoopDQ, points)
			}
		})
	}
}

// SmolLM2-135M's prefill-128 matmuls (see smolPrefillProblems).
func BenchmarkCoopSmolLM2Prefill(b *testing.B) {
	for _, p := range smolPrefillProblems(b) {
		b.Run(fmt.Sprintf("%dx%dx%d", p.Args[0].Shape[0], p.Outs[0].Shape[1], p.Args[0].Shape[1]), func(b *testing.B) {
			coopBench(b, p, benchArgs(p, 4), kernels.MatmulTiled, kernels.MatmulCoop, coopSweep)
		})
	}
}

// SmolLM2's prefill attention, 9 heads over 3 of 64, causal: 128 queries over a 2048-key cache
// holding 128 (as in the compiled plan), and 512 over 512; and Llama-3.1-8B's, 32 heads over 8 of
// 128, 512 queries over a 4096-key cache holding 512.
func BenchmarkCoopAttentionPrefill(b *testing.B) {
	for _, c := range []attnCase{
		{sq: 128, hq: 9, skv: 2048, hkv: 3, d: 64, dv: 64, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: 128},
		{sq: 512, hq: 9, skv: 512, hkv: 3, d: 64, dv: 64, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: 512},
		// Llama-3.1-8B's prefill of 512 tokens into its 4096-key cache (shd, grouped 4:1).
		{sq: 512, hq: 32, skv: 4096, hkv: 8, d: 128, dv: 128, dt: ir.F16, attrs: ir.Attrs{"causal": true}, kvLen: 512},
	} {
		b.Run(fmt.Sprintf("q%d_h%d_d%d_kv%d", c.sq, c.hq, c.d, c.kvLen), func(b *testing.B) {
			p, args := c.problem(b)
			coopBench(b, p, args, kernels.AttentionFlash, kernels.AttentionCoop, kernels.AttentionCoop.Space.Points())
		})
	}
}

// BenchmarkCoopShapes measures matmul_coop on f16 linears (x [M, K] · W[N, K]ᵀ) over a sample of
// its space: the static point, the suggestions, then other valid points in a fixed pseudo-random
// order, VKC_COOP_POINTS of them in all (default 80; VKC_COOP_POINTS=lean: the static point and
// coopLeanPoints; VKC_COOP_POINTS="bk=32,bm=128,... ...": the static point and these). VKC_COOP_FORM=rmsnorm-q4_k measures matmul_coop_dq on rmsnorm_linear[act=f16]
// of an f32 x over a Q4_K weight instead (the 8B prefill's gate/up form), VKC_COOP_FORM=residual
// the f16 linear with a residual epilogue (the down and output projections);
// VKC_COOP_TEMPLATE=matmul_cm2 measures matmul_cm2 (VK_NV_cooperative_matrix2) on either form.
// The shapes are VKC_COOP_SHAPES, M×N×K
// ("512x4096x14336 4096x4096x4096"; default: Llama-3.1-8B's prefill products at 512 rows and
// the 4096³ GEMM). It logs every point (with the driver's statistics where the device was opened
// with VKC_PIPELINE_STATS=1) and the fifteen fastest.
//
//	VKC_PIPELINE_STATS=1 kernels.test -test.run '^$' -test.bench CoopShapes -test.benchtime 1x -test.v
func BenchmarkCoopShapes(b *testing.B) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	shapes := strings.Fields(os.Getenv("VKC_COOP_SHAPES"))
	if len(shapes) == 0 {
		shapes = []string{"512x4096x14336", "512x14336x4096", "512x4096x4096", "4096x4096x4096"}
	}
	limit := 80
	var only []kernels.Config // VKC_COOP_POINTS=lean: coopLeanPoints instead of a sample
	if v := os.Getenv("VKC_COOP_POINTS"); v == "lean" {
		only = coopLeanPoints()
	} else if strings.Contains(v, "=") {
		// Configurations given: "bk=32,bm=128,bn=128,unroll=4,wg=128 ...".
		for _, f := range strings.Fields(v) {
			c, err := tune.ParseConfig(f)
			if err != nil {
				b.Fatalf("VKC_COOP_POINTS: %v", err)
			}
			only = append(only, c)
		}
		limit = len(only) + 1
	} else if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("VKC_COOP_POINTS=%q: want a positive count", v)
		}
		limit = n
	}
	for _, sh := range shapes {
		var m, n, k int
		if _, err := fmt.Sscanf(sh, "%dx%dx%d", &m, &n, &k); err != nil {
			b.Fatalf("VKC_COOP_SHAPES: %q is not M×N×K: %v", sh, err)
		}
		b.Run(sh, func(b *testing.B) {
			p := opProblem(b, ir.Linear, nil, ir.T(ir.F16, m, k), ir.T(ir.F16, n, k))
			tm := kernels.MatmulCoop
			if os.Getenv("VKC_COOP_FORM") == "residual" {
				// The 8B's down and output projections in a plan: the product plus the
				// residual stream, stored through the reduction step (not directly).
				p = withResidual(p)
			}
			if os.Getenv("VKC_COOP_FORM") == "rmsnorm-q4_k" {
				// The 8B prefill's gate/up form: rmsnorm_linear[act=f16] of the f32 residual
				// over a Q4_K weight, by matmul_coop_dq.
				p = opProblem(b, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(ir.F32, m, k), ir.T(ir.F32, k), ir.T(ir.Q4_K, n, k))
				tm = kernels.MatmulCoopDQ
			}
			if os.Getenv("VKC_COOP_TEMPLATE") == "matmul_cm2" {
				tm = kernels.MatmulCM2 // workgroup matrices, either form
			}
			if err := tm.Accepts(p, caps); err != nil {
				b.Skipf("%s: %v", d.Info.Name, err)
			}
			_, static, err := kernels.Build(tm, p, caps)
			if err != nil {
				b.Fatal(err)
			}
			points := append([]kernels.Config{static}, tm.Space.Suggestions(p, caps)...)
			var rest []kernels.Config
			for c := range tm.Space.All() {
				if tm.Space.Valid(p, c, caps) == nil {
					rest = append(rest, c)
				}
			}
			rand.New(rand.NewSource(1)).Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
			if only != nil {
				points, rest = append([]kernels.Config{static}, only...), nil
			}
			seen := map[string]bool{}
			var pts []measured
			args := benchArgs(p, 3)
			for _, c := range append(points, rest...) {
				if len(pts) >= limit {
					break
				}
				if seen[c.Key()] {
					continue
				}
				if err := tm.Space.Valid(p, c, caps); err != nil {
					if only != nil {
						b.Logf("  point %s [%s] not valid here: %v", tm.Name, c.Key(), err)
					}
					continue
				}
				seen[c.Key()] = true
				l, c, err := kernels.BuildAt(tm, p, c, caps)
				if err != nil {
					b.Errorf("%s [%s]: %v", tm.Name, c.Key(), err)
					continue
				}
				r, err := setupBenchLaunch(d, p, l, args)
				if err != nil {
					b.Fatal(err)
				}
				mt, err := measureWarm(d, r.prog)
				var stats []string
				for _, pl := range r.pipes {
					if st, err := pl.Statistics(); err == nil {
						for _, s := range st {
							if strings.Contains(s.Name, "Register") || strings.Contains(s.Name, "Shared") {
								stats = append(stats, s.Name+"="+strconv.FormatFloat(s.Value, 'f', -1, 64))
							}
						}
					}
				}
				r.close()
				if err != nil {
					b.Fatal(err)
				}
				pt := measured{tm.Name, c, mt.Median, l}
				b.Logf("  point %s  %s", pt, strings.Join(stats, " "))
				pts = append(pts, pt)
			}
			sort.Slice(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
			b.Logf("%s on %s: %d points; static [%s]; fastest:", p.Key(), d.Info.Name, len(pts), static.Key())
			for _, pt := range pts[:min(15, len(pts))] {
				b.Logf("  best %s", pt)
			}
			b.ReportMetric(pts[0].l.Flops/pts[0].t.Seconds()/1e12, "TFLOP/s")
		})
	}
}

// coopLeanPoints are the large blocks at lean 0 and 1: 128×128 of 2×2 subgroups (4×4 matrices)
// and of 4×2 (2×4), and 64×64 of 2×2 (2×2), single- and double-buffered, slices of 32 and 64 k.
func coopLeanPoints() []kernels.Config {
	var out []kernels.Config
	for _, w := range [][4]int{{2, 2, 4, 4}, {4, 2, 2, 4}, {2, 2, 2, 2}} {
		for _, ks := range []int{2, 4} {
			for _, st := range []int{1, 2} {
				for _, lean := range []int{0, 1} {
					out = append(out, kernels.Config{"warps_m": w[0], "warps_n": w[1], "tiles_m": w[2], "tiles_n": w[3], "k_steps": ks, "stages": st, "split_k": 1, "lean": lean})
				}
			}
		}
	}
	return out
}
