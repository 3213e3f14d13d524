package engine

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func ranked(logits ...float64) []candidate {
	c := make([]candidate, len(logits))
	for i, l := range logits {
		c[i] = candidate{int32(i), l}
	}
	rank(c)
	return c
}

// TestDistribution: temperature, top-p and min-p over ranked candidates, against the
// probabilities worked here from their definitions.
func TestDistribution(t *testing.T) {
	softmax := func(l []float64, temp float64) []float64 {
		p := make([]float64, len(l))
		s := 0.0
		for i, x := range l {
			p[i] = math.Exp(x / temp)
			s += p[i]
		}
		for i := range p {
			p[i] /= s
		}
		return p
	}
	norm := func(p []float64) []float64 {
		s := 0.0
		for _, x := range p {
			s += x
		}
		out := make([]float64, len(p))
		for i, x := range p {
			out[i] = x / s
		}
		return out
	}
	l := []float64{2, 1, 0, -1}
	sm := softmax(l, 1) // 0.644, 0.237, 0.087, 0.032
	for _, c := range []struct {
		name string
		s    Sampling
		want []float64
	}{
		{"temperature 1", Sampling{Temperature: 1}, sm},
		{"temperature 0.5", Sampling{Temperature: 0.5}, softmax(l, 0.5)},
		// the mass before the third token is 0.881 ≥ 0.7: it and the fourth go
		{"top-p 0.7", Sampling{Temperature: 1, TopP: 0.7}, norm([]float64{sm[0], sm[1], 0, 0})},
		// the mass before the second is 0.644 < 0.65: it stays
		{"top-p 0.65", Sampling{Temperature: 1, TopP: 0.65}, norm([]float64{sm[0], sm[1], 0, 0})},
		{"top-p 0.6", Sampling{Temperature: 1, TopP: 0.6}, []float64{1, 0, 0, 0}},
		// exp(l − 2) ≥ 0.2 keeps l ≥ 0.39: the first two
		{"min-p 0.2", Sampling{Temperature: 1, MinP: 0.2}, norm([]float64{sm[0], sm[1], 0, 0})},
		{"min-p 0.1", Sampling{Temperature: 1, MinP: 0.1}, norm([]float64{sm[0], sm[1], sm[2], 0})},
	} {
		got := distribution(ranked(l...), c.s)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}

// TestPenalty: transformers' repetition penalty divides positive logits of seen tokens and
// multiplies negative ones.
func TestPenalty(t *testing.T) {
	sm := newSampler(Sampling{Temperature: 1, RepeatPenalty: 2})
	sm.see(0, 1, 1)
	c := []candidate{{0, 3}, {1, -2}, {2, 1}}
	sm.penalise(c)
	if c[0].logit != 1.5 || c[1].logit != -4 || c[2].logit != 1 {
		t.Errorf("penalised %v", c)
	}
}

// TestCandidatesExact: whenever the device's candidates are said to decide a step, the token is
// the one sampling over the whole row chooses (same seed), over random rows, penalties and
// options; and they do decide most steps.
func TestCandidatesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const vocab, k = 60, 12
	decided, total := 0, 0
	for trial := 0; trial < 2000; trial++ {
		row := make([]float32, vocab)
		for i := range row {
			row[i] = float32(math.Round(rng.NormFloat64()*8) / 4) // quarter steps: ties happen
		}
		s := Sampling{Temperature: []float64{0, 0.7, 1.3}[trial%3], TopK: 1 + rng.IntN(k), TopP: []float64{0, 0.9}[trial%2],
			MinP: []float64{0, 0.05}[trial/2%2], RepeatPenalty: []float64{1, 1.3, 2.5}[trial/3%3], Seed: uint64(trial)}
		full, dev := newSampler(s), newSampler(s)
		for i := 0; i < 20; i++ {
			id := int32(rng.IntN(vocab))
			full.see(id)
			dev.see(id)
		}
		// The device's K: ranked by value, equal values in index order (sorted here directly).
		idx := make([]int, vocab)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
		cands := make([]candidate, k)
		for i := range cands {
			cands[i] = candidate{int32(idx[i]), float64(row[idx[i]])}
		}
		total++
		id, ok := dev.fromCandidates(cands)
		if !ok {
			continue
		}
		decided++
		if want := full.fromRow(row); id != want {
			t.Fatalf("trial %d %+v: candidates chose %d, the whole row %d", trial, s, id, want)
		}
	}
	if decided < total/2 {
		t.Errorf("the candidates decided %d of %d steps", decided, total)
	}
}

// TestDraws: the seeded draw follows the distribution, and the same seed draws the same tokens.
func TestDraws(t *testing.T) {
	c := ranked(math.Log(0.5), math.Log(0.3), math.Log(0.2))
	draw := func(seed uint64, n int) []int32 {
		sm := newSampler(Sampling{Temperature: 1, Seed: seed})
		out := make([]int32, n)
		for i := range out {
			out[i] = sm.choose(c)
		}
		return out
	}
	got := draw(7, 20000)
	freq := make([]float64, 3)
	for _, id := range got {
		freq[id] += 1.0 / 20000
	}
	for i, want := range []float64{0.5, 0.3, 0.2} {
		if math.Abs(freq[i]-want) > 0.015 {
			t.Errorf("token %d drawn %.3f of the time, want %.2f", i, freq[i], want)
		}
	}
	a, b, d := draw(3, 50), draw(3, 50), draw(4, 50)
	same, diff := true, false
	for i := range a {
		same = same && a[i] == b[i]
		diff = diff || a[i] != d[i]
	}
	if !same || !diff {
		t.Errorf("seed 3 twice equal: %v; seeds 3 and 4 differ: %v", same, diff)
	}
}

func TestSamplingCheck(t *testing.T) {
	for _, s := range []Sampling{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1}, {RepeatPenalty: -2}, {Temperature: math.NaN()}} {
		if s.Check() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := (Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1}).Check(); err != nil {
		t.Error(err)
	}
}
