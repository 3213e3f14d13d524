package rules

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// smolLM2 parses examples/smollm2-135m with the given number of layers (weights not loaded).
func smolLM2(tb testing.TB, layers int) *ir.Model {
	tb.Helper()
	const path = "../examples/smollm2-135m/model.yaml"
	src, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^(\s+layers:) 30$`)
	if !re.Match(src) {
		tb.Fatal("smollm2-135m/model.yaml no longer declares layers: 30")
	}
	src = re.ReplaceAll(src, []byte(fmt.Sprintf("${1} %d", layers)))
	m, err := ir.ParseModelBytesWith(path, src, "../examples/smollm2-135m", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestSaturateSmolLM2 saturates the 30-layer SmolLM2-135M (both functions, as written and as
// primitives) within the default limits and reports the statistics.
func TestSaturateSmolLM2(t *testing.T) {
	if testing.Short() {
		t.Skip("30 layers: run without -short")
	}
	m := smolLM2(t, 30)
	for _, f := range m.Functions {
		var summary [2]string
		var expr [2]map[string]string
		for i, decompose := range []bool{false, true} {
			g := f
			if decompose {
				var err error
				if g, err = ir.DecomposeAll(f); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			out, rep, err := Optimize(context.Background(), m, g, Options{TimeLimit: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("decompose=%v %s(%v)", decompose, rep, time.Since(start).Round(time.Millisecond))
			if rep.Stop != egraph.Saturated {
				t.Errorf("%s: stopped by %s, want saturated", f.Name, rep.Stop)
			}
			// Every norm is fused into the linears it feeds (which may be merged), every key
			// rotation into its cache write.
			ops := map[ir.Op]int{}
			for _, n := range out.Nodes {
				ops[n.Op]++
			}
			if ops[ir.RMSNorm] != 0 || ops[ir.RMSNormLinear] < 2*30+1 || ops[ir.RopeCacheWrite] != 30 {
				t.Errorf("%s: %d rmsnorm, %d rmsnorm_linear, %d rope_cache_write extracted; want 0, ≥ 61, 30", f.Name,
					ops[ir.RMSNorm], ops[ir.RMSNormLinear], ops[ir.RopeCacheWrite])
			}
			summary[i], expr[i] = opSummary(out), structure(out)
		}
		if summary[0] != summary[1] {
			t.Errorf("%s: as primitives extracts to\n  %s\nas written to\n  %s", f.Name, summary[1], summary[0])
		}
		for k, w := range expr[0] {
			if expr[1][k] != w {
				t.Errorf("%s: %s is computed differently as primitives", f.Name, k)
			}
		}
	}
}

// BenchmarkSaturate measures saturation of SmolLM2-135M's decode function at 2, 8 and 30
// layers, as written (fused) and as primitives (DecomposeAll), and reports the e-graph's size.
// The whole Optimize is timed (conversion, saturation, extraction, rebuilding the ir function);
// µs/layer should stay about constant, and saturation's and extraction's shares (of the last
// run) are reported apart.
//
//	go test -run '^$' -bench Saturate ./rules/
func BenchmarkSaturate(b *testing.B) {
	for _, form := range []string{"fused", "primitives"} {
		for _, layers := range []int{2, 8, 30} {
			b.Run(fmt.Sprintf("%s/layers=%d", form, layers), func(b *testing.B) {
				m := smolLM2(b, layers)
				f := m.Function("decode")
				if form == "primitives" {
					var err error
					if f, err = ir.DecomposeAll(f); err != nil {
						b.Fatal(err)
					}
				}
				var rep *Report
				for b.Loop() {
					var err error
					_, rep, err = Optimize(context.Background(), m, f, Options{})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rep.Nodes), "enodes")
				b.ReportMetric(float64(rep.Classes), "eclasses")
				b.ReportMetric(float64(rep.Iterations), "iters")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(layers), "µs/layer")
				b.ReportMetric(float64(rep.Saturate.Microseconds())/float64(layers), "µs-saturate/layer")
				b.ReportMetric(float64(rep.Extract.Microseconds())/float64(layers), "µs-extract/layer")
			})
		}
	}
}
