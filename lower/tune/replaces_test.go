package tune

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
)

func ms(xs ...float64) []time.Duration {
	out := make([]time.Duration, len(xs))
	for i, x := range xs {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

// The rule by which a candidate replaces the static extraction, on synthetic paired rounds.
func TestReplaces(t *testing.T) {
	for _, c := range []struct {
		name       string
		cand, base []time.Duration
		want       bool
		why        string
	}{
		// SmolLM2's prefill on the H200: one cold round, the graph as written 10% faster.
		{"one round", ms(14.618), ms(16.257), false, "1 paired round is no evidence (3 needed)"},
		{"two rounds", ms(10, 10), ms(20, 20), false, "2 paired rounds are no evidence"},
		{"five rounds consistently faster", ms(8.6, 8.7, 8.5, 8.8, 8.6), ms(13.9, 14.0, 13.8, 14.1, 13.9), true, "faster in 5 of 5 paired rounds by 38."},
		{"three rounds consistently faster", ms(0.039, 0.040, 0.038), ms(0.051, 0.052, 0.050), true, "faster in 3 of 3"},
		{"one slow round in five", ms(8, 8, 15, 8, 8), ms(10, 10, 10, 10, 10), true, "faster in 4 of 5"},
		{"two slow rounds in five", ms(8, 11, 8, 11, 8), ms(10, 10, 10, 10, 10), false, "faster in 3 of 5 paired rounds (4 needed)"},
		{"mixed within noise", ms(9.9, 10.1, 9.8, 10.2, 9.9), ms(10, 10, 10, 10, 10), false, "faster in 3 of 5"},
		{"faster every round, under 2%", ms(9.9, 9.85, 9.9, 9.95, 9.9), ms(10, 10, 10, 10, 10), false, "within the rounds' noise (2.0%)"},
		// Ratios 0.95, 0.70, 0.99, 0.96, 0.97: median 0.96, median deviation 0.01 → noise 2%
		// (the floor), gain 4%: one outlier does not count as noise.
		{"faster every round, gain 4%", ms(9.5, 7, 9.9, 9.6, 9.7), ms(10, 10, 10, 10, 10), true, "by 4.0%"},
		// Ratios 0.99, 0.60, 0.98, 0.97, 0.62: median 0.97, median deviation 0.02 → noise 4%, gain 3%.
		{"faster every round, gain within the wobble", ms(9.9, 6, 9.8, 9.7, 6.2), ms(10, 10, 10, 10, 10), false, "by 3.0%, within the rounds' noise (4.0%)"},
	} {
		got, why := Replaces(c.cand, c.base)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: Replaces = %v (%s), want %v (%s)", c.name, got, why, c.want, c.why)
		}
	}
}

// With several timed lengths, a candidate replaces the static extraction only when it does at
// every one of them.
func TestReplacesAt(t *testing.T) {
	// SmolLM2's prefill on the H200: 10% faster at the capacity (512) in 4 of 4 rounds, 4.8%
	// slower at 128 rows.
	cap512 := LengthTimes{Dim: "seq", N: 512, Cand: ms(14.6, 14.5, 14.7, 14.4), Base: ms(16.2, 16.1, 16.3, 16.0)}
	slow128 := LengthTimes{Dim: "seq", N: 128, Cand: ms(3.67, 3.66, 3.68, 3.67), Base: ms(3.50, 3.49, 3.51, 3.50)}
	fast128 := LengthTimes{Dim: "seq", N: 128, Cand: ms(3.10, 3.12, 3.11, 3.09), Base: ms(3.50, 3.49, 3.51, 3.50)}
	flat128 := LengthTimes{Dim: "seq", N: 128, Cand: ms(3.49, 3.48, 3.50, 3.49), Base: ms(3.50, 3.49, 3.51, 3.50)}
	for _, c := range []struct {
		name string
		at   []LengthTimes
		want bool
		why  []string
	}{
		{"capacity only", []LengthTimes{cap512}, true, []string{"faster in 4 of 4 paired rounds by 9."}},
		{"slower at the short length", []LengthTimes{cap512, slow128}, false, []string{"at seq=128: faster in 0 of 4 paired rounds (4 needed)"}},
		{"slower at the short length, listed first", []LengthTimes{slow128, cap512}, false, []string{"at seq=128: faster in 0 of 4"}},
		{"within the noise at the short length", []LengthTimes{cap512, flat128}, false, []string{"at seq=128: faster in 4 of 4 paired rounds by 0.3%, within the rounds' noise"}},
		{"faster at both", []LengthTimes{cap512, fast128}, true, []string{"at seq=512: faster in 4 of 4 paired rounds by 9.", "at seq=128: faster in 4 of 4 paired rounds by 11."}},
		{"no length", nil, false, []string{"no length was timed"}},
	} {
		got, why := ReplacesAt(c.at)
		ok := got == c.want
		for _, w := range c.why {
			ok = ok && strings.Contains(why, w)
		}
		if !ok {
			t.Errorf("%s: ReplacesAt = %v (%s), want %v (%s)", c.name, got, why, c.want, strings.Join(c.why, "; "))
		}
	}
}

// The short length a function with a run-time length is timed at besides its capacity.
func TestShortAt(t *testing.T) {
	for _, c := range []struct {
		min, max, want int
	}{
		{1, 512, 128},   // SmolLM2's prefill: the held-out table's 128 tokens
		{1, 8192, 128},  // a long context: still a prompt's length
		{1, 64, 16},     // a small capacity: a quarter of it
		{1, 8, 2},       // prefill@8
		{1, 2, 1},       // a quarter rounds to nothing: the shortest allowed
		{1, 1, 0},       // prefill@1: nothing shorter than the capacity
		{100, 200, 100}, // within the bounds
		{200, 200, 0},   // a fixed length
	} {
		f := &ir.Function{Name: "f", Length: &ir.Length{Dim: "seq", Min: c.min, Max: c.max}}
		if got := ShortAt(f); got != c.want {
			t.Errorf("ShortAt(seq in %d..%d) = %d, want %d", c.min, c.max, got, c.want)
		}
	}
	if got := ShortAt(&ir.Function{Name: "g"}); got != 0 {
		t.Errorf("ShortAt of a function without a run-time length = %d, want 0", got)
	}
}

// Through SelectFunction: the static extraction (the slower version here) is kept on one paired
// round, and the report says why; five rounds in which the other version is faster replace it.
func TestSelectFunctionStaticNeedsEvidence(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	cands := []SelectCandidate{
		{Fn: m.Function("forward"), Label: "static extraction", Static: true},
		{Fn: m.Function("forward_alt"), Label: "matmul+add"},
	}
	times := map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond}
	sel, err := SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Rounds: 1, Timer: &planClock{times: times}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if sel.Winner != 0 || sel.Rounds != 1 || !strings.Contains(sel.String(), "kept the static extraction over candidate 1: 1 paired round is no evidence") {
		t.Errorf("one round: winner %d, want the static extraction kept and said so:\n%s", sel.Winner, sel)
	}
	if r := sel.Results[1].Ratio; r < 0.6 || r > 0.7 {
		t.Errorf("one round: candidate 1's ratio to the kept static extraction %.3f, want about 0.67", r)
	}
	sel, err = SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Rounds: 5, Timer: &planClock{times: times}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if sel.Winner != 1 || sel.Rounds != 5 || !strings.Contains(sel.Why, "candidate 1 replaced the static extraction: faster in 5 of 5") {
		t.Errorf("five rounds: winner %d, want candidate 1 with the evidence said:\n%s", sel.Winner, sel)
	}
}
