package kernels_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// BenchmarkAttentionLayouts times attention_flash (each template's static configuration) on
// one problem with each operand layout the layout rules offer, as ratios to the all-shd layout
// measured in the same run: Whisper-tiny's encoder self-attention (6 heads of 64, 1500
// positions, f16; 64 positions on a CPU device, whose submit timeout the full size outlasts).
// The layouts are measured in two passes in opposite orders and each keeps its faster median, so
// a drift of the device's clock or load does not favour the first. This is the kernel half of
// the question "is reading k or v where it lies faster": the whole-program half (the transposes
// a layout saves or costs) is what measured selection decides per model.
//
//	go test -run '^$' -bench AttentionLayouts -v ./kernels/
func BenchmarkAttentionLayouts(b *testing.B) {
	d := kerneltest.Device(b)
	n := 1500
	if d.Info.Type == runtime.CPU {
		n = 64
	}
	layouts := []ir.AttnLayouts{
		{Q: "shd", K: "shd", V: "shd"}, {Q: "hsd", K: "hsd", V: "hsd"}, {Q: "shd", K: "hsd", V: "hsd"},
		{Q: "shd", K: "hds", V: "shd"}, {Q: "hsd", K: "hds", V: "hsd"},
	}
	best := make([]time.Duration, len(layouts))
	for pass := 0; pass < 2; pass++ {
		for j := range layouts {
			i := j
			if pass == 1 {
				i = len(layouts) - 1 - j
			}
			l := layouts[i]
			c := attnCase{sq: n, hq: 6, skv: n, hkv: 6, d: 64, dv: 64, dt: ir.F16,
				attrs: ir.Attrs{"layout": l.Q, "k_layout": l.K, "v_layout": l.V, "scale": 0.125}}
			p, args := c.problem(b)
			t, _, _, err := measureLaunch(d, kernels.AttentionFlash, p, nil, args)
			if err != nil {
				b.Fatalf("%s: %v", l, err)
			}
			if best[i] == 0 || t < best[i] {
				best[i] = t
			}
		}
	}
	for i, l := range layouts {
		b.Run(fmt.Sprintf("q%s_k%s_v%s", l.Q, l.K, l.V), func(b *testing.B) {
			b.ReportMetric(float64(best[i].Nanoseconds())/1e3, "µs")
			b.ReportMetric(float64(best[0])/float64(best[i]), "×shd")
		})
		b.Logf("%s on %s, %d positions: %v (%.2f× the all-shd layout's speed)", l, d.Info.Name, n, best[i], float64(best[0])/float64(best[i]))
	}
}
