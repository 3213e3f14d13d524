package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Sampling says how the next token is chosen from a step's logits. The zero value is greedy.
//
// The order is transformers' (generate's logits processors): the repetition penalty, then the
// temperature, then top-k, top-p and min-p, then a draw:
//
//   - RepeatPenalty r (≠ 0, 1): the logit l of every token already in the sequence (prompt and
//     generated, each token once) becomes l/r when positive, l·r when not
//     (RepetitionPenaltyLogitsProcessor).
//   - Temperature T: logits divided by T; T = 0 is greedy (the largest logit after the penalty;
//     TopK, TopP, MinP and Seed are then unused).
//   - TopK k > 0: only the k largest logits stay (equal ones in token order); 0 keeps every token.
//   - TopP p in (0, 1): the smallest prefix of the tokens by decreasing probability whose mass
//     reaches p stays: a token stays while the mass of the tokens ranked before it is below p
//     (TopPLogitsWarper); 0 or 1 keeps them all.
//   - MinP m in (0, 1]: tokens whose probability is below m times the largest stay out
//     (MinPLogitsWarper); 0 keeps them all.
//   - The draw: a uniform u in [0, 1) from a PCG generator seeded with Seed, one per step,
//     picks the token where the cumulative probability (in rank order) first exceeds u. The same
//     plan, device, prompt and options give the same tokens.
//
// Where it runs: the device ranks the logits (argtopk, a kernel of the plan compiled with vkc
// compile --top-k K, default 64) and a step reads back the K best (index, logit) pairs of its last
// row; the penalty, temperature, top-p, min-p and the draw run on the host over them. That is
// exact whenever the kept tokens are among those K: always for TopK ≤ K without a penalty; with
// a penalty, when the k-th best penalised candidate is still above the K-th raw logit (no token
// outside the K can then overtake it; otherwise the step is run again reading the whole row).
// TopK = 0 or TopK > K, or a plan without the candidates, reads the whole logits row each step
// and samples on the host. Greedy without a penalty takes the device's argmax (next_token) and
// reads back one token.
type Sampling struct {
	Temperature   float64
	TopK          int
	TopP, MinP    float64
	RepeatPenalty float64
	Seed          uint64
}

// Greedy reports whether s picks the largest logit (temperature 0).
func (s Sampling) Greedy() bool { return s.Temperature == 0 }

func (s Sampling) penalised() bool { return s.RepeatPenalty != 0 && s.RepeatPenalty != 1 }

// Check reports options out of range.
func (s Sampling) Check() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("temperature %v: want 0 (greedy) or more", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("top-k %d: want 0 (every token) or more", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return fmt.Errorf("top-p %v: want a probability in [0, 1]", s.TopP)
	case !(s.MinP >= 0 && s.MinP <= 1):
		return fmt.Errorf("min-p %v: want a probability in [0, 1]", s.MinP)
	case s.RepeatPenalty < 0 || math.IsNaN(s.RepeatPenalty) || math.IsInf(s.RepeatPenalty, 0):
		return fmt.Errorf("repeat penalty %v: want a positive factor (1 is none)", s.RepeatPenalty)
	}
	return nil
}

// candidate is a token and its logit.
type candidate struct {
	id    int32
	logit float64
}

// rank sorts candidates by decreasing logit, equal logits by increasing id, NaN first (the
// device's argtopk order).
func rank(c []candidate) {
	sort.SliceStable(c, func(i, j int) bool {
		a, b := c[i].logit, c[j].logit
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.IsNaN(a) && !math.IsNaN(b) || math.IsNaN(a) && math.IsNaN(b) && c[i].id < c[j].id
		}
		if a != b {
			return a > b
		}
		return c[i].id < c[j].id
	})
}

// sampler chooses tokens on the host.
type sampler struct {
	s    Sampling
	rng  *rand.Rand
	seen map[int32]bool // the tokens of the sequence so far, for the penalty
}

func newSampler(s Sampling) *sampler {
	return &sampler{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x5DEECE66D)), seen: map[int32]bool{}}
}

// see records tokens of the sequence (for the penalty).
func (sm *sampler) see(ids ...int32) {
	for _, id := range ids {
		sm.seen[id] = true
	}
}

// penalise applies the repetition penalty to the candidates, in place.
func (sm *sampler) penalise(c []candidate) {
	if !sm.s.penalised() {
		return
	}
	r := sm.s.RepeatPenalty
	for i := range c {
		if sm.seen[c[i].id] {
			if c[i].logit > 0 {
				c[i].logit /= r
			} else {
				c[i].logit *= r
			}
		}
	}
}

// fromCandidates chooses the next token from a step's K device-ranked candidates (the K largest
// raw logits, ranked); ok is false when the choice cannot be made exactly from them (see
// Sampling) and the whole row is needed.
func (sm *sampler) fromCandidates(cands []candidate) (int32, bool) {
	k := len(cands)
	want := sm.s.TopK
	if sm.s.Greedy() {
		want = 1
	}
	if want == 0 || want > k {
		return 0, false
	}
	floor := cands[k-1].logit // no token outside the candidates has a larger raw logit
	c := append([]candidate(nil), cands...)
	if sm.s.penalised() {
		sm.penalise(c)
		rank(c)
		// A token outside the candidates has a logit ≤ floor (its own penalty only lowers it):
		// the first want candidates are the true top ones when the want-th is above floor.
		if !(c[want-1].logit > floor) {
			return 0, false
		}
	}
	return sm.choose(c[:want]), true
}

// fromRow chooses the next token from a whole row of logits.
func (sm *sampler) fromRow(row []float32) int32 {
	c := make([]candidate, len(row))
	for i, v := range row {
		c[i] = candidate{int32(i), float64(v)}
	}
	sm.penalise(c)
	rank(c)
	if sm.s.Greedy() {
		return c[0].id
	}
	if k := sm.s.TopK; k > 0 && k < len(c) {
		c = c[:k]
	}
	return sm.choose(c)
}

// choose draws from ranked candidates (already cut to top-k, penalised): temperature, top-p,
// min-p, then the seeded draw; greedy takes the first.
func (sm *sampler) choose(c []candidate) int32 {
	if sm.s.Greedy() || len(c) == 1 {
		return c[0].id
	}
	p := distribution(c, sm.s)
	u := sm.rng.Float64()
	acc := 0.0
	for i, q := range p {
		acc += q
		if u < acc {
			return c[i].id
		}
	}
	// Rounding left the cumulative sum a hair below 1: the last kept token.
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] > 0 {
			return c[i].id
		}
	}
	return c[0].id
}

// distribution is the probability of each ranked candidate after temperature, top-p and min-p
// (0 for those cut), summing to 1. A NaN logit (a broken model) ranks first and takes all the
// probability, as an argmax would pick it.
func distribution(c []candidate, s Sampling) []float64 {
	p := make([]float64, len(c))
	if math.IsNaN(c[0].logit) {
		p[0] = 1
		return p
	}
	top := c[0].logit
	sum := 0.0
	for i, x := range c {
		// exp((l − max)/T): the largest is 1, a -Inf logit 0.
		p[i] = math.Exp((x.logit - top) / s.Temperature)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	if s.TopP > 0 && s.TopP < 1 {
		mass := 0.0
		for i := range p {
			if mass >= s.TopP {
				p[i] = 0
				continue
			}
			mass += p[i]
		}
	}
	if s.MinP > 0 {
		// After top-p (transformers' order); relative to the largest probability, which top-p
		// always keeps.
		for i := range p {
			if p[i] < s.MinP*p[0] {
				p[i] = 0
			}
		}
	}
	sum = 0
	for _, q := range p {
		sum += q
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}
