package kernels_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// BenchmarkAttentionLayouts times attention_flash (its static configuration) on one problem with
// each operand layout the layout rules offer, as speed relative to the all-shd layout measured in
// the same run: Whisper-tiny's encoder self-attention (6 heads of 64, 1500 positions, f16; 64
// positions on a CPU device, whose submit timeout the full size outlasts). The layouts are
// measured in alternating rounds (odd rounds in reverse order) and each reports its median; the
// all-shd layout is measured twice per round, the second time as a control whose ratio is the
// run's noise (on a loaded lavapipe the same kernel measured 1.9× apart in one round). This is
// the kernel half of "is reading k or v where it lies faster"; the whole-program half (the
// transposes a layout saves or costs) is what measured selection decides per model.
//
//	go test -run '^$' -bench AttentionLayouts -v ./kernels/
func BenchmarkAttentionLayouts(b *testing.B) {
	d := kerneltest.Device(b)
	n, rounds := 1500, 7
	if d.Info.Type == runtime.CPU {
		n = 64
	}
	layouts := []ir.AttnLayouts{
		{Q: "shd", K: "shd", V: "shd"}, {Q: "hsd", K: "hsd", V: "hsd"}, {Q: "shd", K: "hsd", V: "hsd"},
		{Q: "shd", K: "hds", V: "shd"}, {Q: "hsd", K: "hds", V: "hsd"}, {Q: "shd", K: "shd", V: "shd"},
	}
	names := make([]string, len(layouts))
	for i, l := range layouts {
		names[i] = fmt.Sprintf("q%s_k%s_v%s", l.Q, l.K, l.V)
	}
	names[len(names)-1] += "_control"
	times := make([][]time.Duration, len(layouts))
	for r := 0; r < rounds; r++ {
		for j := range layouts {
			i := j
			if r%2 == 1 {
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
			times[i] = append(times[i], t)
		}
	}
	med := make([]time.Duration, len(layouts))
	for i := range times {
		ts := append([]time.Duration(nil), times[i]...)
		sort.Slice(ts, func(x, y int) bool { return ts[x] < ts[y] })
		med[i] = ts[len(ts)/2]
	}
	for i := range layouts {
		b.Run(names[i], func(b *testing.B) {
			b.ReportMetric(float64(med[i].Nanoseconds())/1e3, "µs")
			b.ReportMetric(float64(med[0])/float64(med[i]), "×shd")
		})
		b.Logf("%s on %s, %d positions: median %v of %d rounds (%.2f× the all-shd layout's speed)", names[i], d.Info.Name, n, med[i], rounds, float64(med[0])/float64(med[i]))
	}
}
