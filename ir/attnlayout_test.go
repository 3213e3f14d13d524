package ir

import (
	"strings"
	"testing"
)

// TestAttentionOperandLayouts: q, k and v are each read in their own layout (k_layout and
// v_layout default to layout, and are dropped from the attributes where they equal it, so a
// uniform attention keeps its key), K transposed is a K layout only, and disagreeing shapes
// are refused naming the layouts.
func TestAttentionOperandLayouts(t *testing.T) {
	// 4 query heads over 2 key/value heads, 3 queries, 5 keys, d 6, dv 7
	q := map[string]Type{"shd": T(F32, 3, 4, 6), "hsd": T(F32, 4, 3, 6)}
	k := map[string]Type{"shd": T(F32, 5, 2, 6), "hsd": T(F32, 2, 5, 6), "hds": T(F32, 2, 6, 5)}
	v := map[string]Type{"shd": T(F32, 5, 2, 7), "hsd": T(F32, 2, 5, 7)}
	for _, ql := range []string{"shd", "hsd"} {
		for _, kl := range []string{"shd", "hsd", "hds"} {
			for _, vl := range []string{"shd", "hsd"} {
				at := Attrs{"layout": ql, "k_layout": kl, "v_layout": vl}
				full, outs, err := Infer(Attention, at, []Type{q[ql], k[kl], v[vl]})
				if err != nil {
					t.Errorf("%s: %v", at.Key(), err)
					continue
				}
				want := T(F32, 3, 4, 7)
				if ql == "hsd" {
					want = T(F32, 4, 3, 7)
				}
				if !outs[0].Shape.Equal(want.Shape) {
					t.Errorf("%s: result %s, want %s", at.Key(), outs[0], want)
				}
				if got := AttentionLayouts(full); got != (AttnLayouts{ql, kl, vl}) {
					t.Errorf("%s: layouts read back as %v", at.Key(), got)
				}
				if _, ok := full["k_layout"]; ok == (kl == ql) {
					t.Errorf("%s: k_layout held %v, want only where it differs from layout (%s)", at.Key(), ok, full.Key())
				}
			}
		}
	}
	// A uniform attention's attributes are what they were before per-operand layouts.
	full, _, err := Infer(Attention, Attrs{"layout": "hsd", "k_layout": "hsd", "v_layout": "hsd", "scale": 0.5}, []Type{q["hsd"], k["hsd"], v["hsd"]})
	if err != nil || full.Key() != "causal=false,layout=hsd,scale=0.5,window=0" {
		t.Errorf("uniform hsd: %q, %v", full.Key(), err)
	}
	for _, c := range []struct {
		at       Attrs
		args     []Type
		contains string
	}{
		{Attrs{"v_layout": "hds"}, []Type{q["shd"], k["shd"], T(F32, 2, 7, 5)}, "v_layout must be shd or hsd"},
		{Attrs{"layout": "hds"}, []Type{T(F32, 4, 6, 3), k["hds"], v["hsd"]}, "layout must be shd or hsd"},
		{Attrs{"k_layout": "dsh"}, []Type{q["shd"], k["shd"], v["shd"]}, "k_layout must be shd, hsd or hds"},
		// k in hsd read as shd: 2 keys of 5 heads
		{Attrs{"k_layout": "shd", "v_layout": "hsd"}, []Type{q["shd"], k["hsd"], v["hsd"]}, "do not agree"},
	} {
		_, _, err := Infer(Attention, c.at, c.args)
		if err == nil || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: got %v, want an error containing %q", c.at.Key(), err, c.contains)
		}
	}
}
