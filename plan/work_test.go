package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWorkAt(t *testing.T) {
	// Causal attention over c = pos + n + 4 keys for n queries, as a run-time length n would
	// count it: 2 FLOPs per pair, n·c − n(n−1)/2 pairs; bytes: 10 per query row, 32 per key.
	w := Work{Terms: []WorkTerm{
		{Length: 1, Count: true, FLOPs: 2},
		{Length: 2, FLOPs: -1},
		{Length: 1, FLOPs: 1, Bytes: 10},
		{Count: true, Bytes: 32},
	}, Count: &WorkCount{Inputs: []uint32{1}, PlusLength: true, Add: 4, Min: 1, Max: 64}}
	type res struct {
		Flops, Bytes float64
		C            int64
	}
	pairs := func(n, c int64) float64 { return float64(n*c - n*(n-1)/2) }
	for _, x := range []struct {
		pos, n int64
		want   res
	}{
		{0, 1, res{2 * pairs(1, 5), 10 + 5*32, 5}},
		{10, 6, res{2 * pairs(6, 20), 60 + 20*32, 20}},
		{100, 2, res{2 * pairs(2, 64), 20 + 64*32, 64}}, // clamped to Max
	} {
		f, b, c := w.At(x.n, func(i uint32) int64 {
			if i != 1 {
				t.Errorf("scalar %d read", i)
			}
			return x.pos
		})
		if diff := cmp.Diff(x.want, res{f, b, c}); diff != "" {
			t.Errorf("pos %d, n %d (-want +got):\n%s", x.pos, x.n, diff)
		}
	}
	fixed := Work{FLOPs: 10, Bytes: 20}
	if f, b, c := fixed.At(0, nil); f != 10 || b != 20 || c != 0 {
		t.Errorf("fixed work at %v, %v, %v", f, b, c)
	}
	if (&Work{}).Known() || !fixed.Known() {
		t.Error("Known: the zero Work is unknown, a recorded one known")
	}
	fn := Function{Length: &Length{Name: "seq", Min: 1, Max: 16}, Dispatches: []Dispatch{{Work: fixed}, {Work: w}}}
	if f, b, known := fn.MaxWork(); f != 10+2*pairs(16, 64) || b != 20+160+64*32 || !known {
		t.Errorf("MaxWork %v, %v, %v", f, b, known)
	}
}
