package kernels_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// BenchmarkDecodeTopK measures argtopk at decode's shapes (issue 27): top-64 of one f32 row of
// Llama-3.1-8B's vocabulary (128256) and of SmolLM2's (49152); VKC_TOPK_SHAPES="1x32000 4x49152"
// picks other rows×n, VKC_TOPK_K another k. On the GPU machine:
//
//	cd kernels && ../.gpu/kernels.test -test.run '^$' -test.bench DecodeTopK -test.benchtime 1x -test.v
//
// For each shape it logs the median GPU time of the whole dispatch chain (both steps of a split,
// in order) of the static choice (kernels.Build, what --no-tune compiles), of the rounds' former
// GPU static point (coop=1, wg=256, split=32) and of the radix select's points (coop=2, wg 64 to
// 256, split 1 to 128; subgroup=1, the suffix sums by shuffles, at wg 256);
// VKC_BENCH_POINTS=all measures every valid point of the space instead. Reported: the static
// choice's µs and the best point's.
//
// On a CPU device (lavapipe) the rows are 16 times shorter (unless VKC_TOPK_SHAPES gives them)
// and only the static choice, the rounds' point and one radix point run (unless
// VKC_BENCH_POINTS=all): a check that the benchmark runs, not a GPU's figure.
func BenchmarkDecodeTopK(b *testing.B) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	cpu := d.Info.Type == runtime.CPU
	k := 64
	if env := os.Getenv("VKC_TOPK_K"); env != "" {
		v, err := strconv.Atoi(env)
		if err != nil || v < 1 {
			b.Fatalf("VKC_TOPK_K: %q is not a positive k", env)
		}
		k = v
	}
	type shape struct {
		name    string
		rows, n int
	}
	shapes := []shape{{"llama8b", 1, 128256}, {"smollm2", 1, 49152}}
	scale := 1
	if cpu {
		scale = 16
	}
	if env := os.Getenv("VKC_TOPK_SHAPES"); env != "" {
		shapes = shapes[:0]
		for _, f := range strings.Fields(env) {
			var r, n int
			if _, err := fmt.Sscanf(f, "%dx%d", &r, &n); err != nil || r <= 0 || n <= 0 {
				b.Fatalf("VKC_TOPK_SHAPES: %q is not rows×n (e.g. 1x128256)", f)
			}
			shapes = append(shapes, shape{f, r, n})
		}
		scale = 1
	}
	cfg := func(coop, wg, split int) kernels.Config {
		return kernels.Config{"subgroup": 0, "wg": wg, "coop": coop, "rows": 1, "split": split}
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			n := sh.n / scale
			p := opProblem(b, ir.ArgTopK, ir.Attrs{"k": k}, ir.T(ir.F32, sh.rows, n))
			args := benchArgs(p, 7)
			_, static, err := kernels.Build(kernels.TopK, p, caps)
			if err != nil {
				b.Fatal(err)
			}
			points := []kernels.Config{static, cfg(1, 256, 32)}
			switch {
			case os.Getenv("VKC_BENCH_POINTS") == "all":
				points = append(points, kernels.TopK.Space.Points()...)
			case cpu:
				points = append(points, cfg(2, 64, 8))
			default:
				for _, wg := range []int{64, 128, 256} {
					for _, split := range []int{1, 8, 32, 128} {
						points = append(points, cfg(2, wg, split))
					}
				}
				for _, split := range []int{1, 8, 32, 128} { // suffix sums by subgroup shuffles
					c := cfg(2, 256, split)
					c["subgroup"] = 1
					points = append(points, c)
				}
			}
			type timed struct {
				c kernels.Config
				t time.Duration
			}
			var res []timed
			seen := map[string]bool{}
			for _, c := range points {
				if seen[c.Key()] || kernels.TopK.Space.Valid(p, c, caps) != nil {
					continue
				}
				seen[c.Key()] = true
				var t time.Duration
				for i := 0; i < b.N; i++ {
					if t, _, err = rowsMeasure(d, kernels.TopK, p, c, args); err != nil {
						b.Fatalf("%s: %v", c.Key(), err)
					}
				}
				res = append(res, timed{c, t})
			}
			st := res[0]
			sort.SliceStable(res, func(i, j int) bool { return res[i].t < res[j].t })
			b.Logf("argtopk k=%d of %d×%d f32 on %s: static [%s] %.1f µs per dispatch chain; best [%s] %.1f µs",
				k, sh.rows, n, d.Info.Name, st.c.Key(), us(st.t), res[0].c.Key(), us(res[0].t))
			for _, r := range res {
				b.Logf("  %-48s %8.1f µs", r.c.Key(), us(r.t))
			}
			b.ReportMetric(us(st.t), "static-µs")
			b.ReportMetric(us(res[0].t), "best-µs")
		})
	}
}
