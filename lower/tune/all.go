package tune

import (
	"context"
	"sort"
	"time"

	"github.com/vkc-project/vkc/kernels"
)

// TuneAll tunes problems in the order given (duplicates by key and problems already measured
// are skipped), giving each an equal share of the time ctx has left: the i-th of n problems gets
// (time left)/(n-i), so what an early problem does not use passes to the later ones, and no
// problem's search, however large its space, takes the time of all the others. A search cut by
// its share keeps its best point so far and is stored as interrupted (a later compile resumes
// it); a problem whose share ended before anything was measured gets the static choice. Without
// a deadline on ctx every search runs to completion.
//
// Callers list cheap problems first (lower estimate): their searches usually end inside their
// share, leaving more for the expensive ones at the end, which gain most from tuning.
//
// Errors (no template accepts a problem, every configuration invalid) are remembered per problem
// as Best remembers them and returned by later Best calls; TuneAll returns the number of
// problems with a measured choice.
func (t *Tuner) TuneAll(ctx context.Context, probs []*kernels.Problem) int {
	seen := map[string]bool{}
	var todo []*kernels.Problem
	for _, p := range probs {
		k := p.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		if c := t.known(k); c != nil && !c.Static {
			continue
		}
		todo = append(todo, p)
	}
	measured := 0
	for i, p := range todo {
		if ctx.Err() != nil {
			break
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			pctx, cancel = context.WithTimeout(ctx, time.Until(d)/time.Duration(len(todo)-i))
		}
		if c, err := t.Best(pctx, p); err == nil && !c.Static {
			measured++
		}
		cancel()
	}
	return measured
}

// known returns the choice made for a problem key, or nil.
func (t *Tuner) known(key string) *Choice {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.choices[key]
}

// Known returns the measured time of p's choice when p was tuned (or its searches were reused)
// earlier, without tuning anything; ok is false otherwise. Extraction prices with it after
// TuneAll, so that pricing spends no budget of its own.
func (t *Tuner) Known(p *kernels.Problem) (time.Duration, bool) {
	c := t.known(p.Key())
	if c == nil || c.Static {
		return 0, false
	}
	return c.Time, true
}

// ByEstimate returns the distinct problems (by key) sorted by estimated time, cheapest first,
// ties by key: the order TuneAll wants. A nil estimate sorts by key alone.
func ByEstimate(probs []*kernels.Problem, estimate func(*kernels.Problem) time.Duration) []*kernels.Problem {
	type pe struct {
		p *kernels.Problem
		k string
		e time.Duration
	}
	seen := map[string]bool{}
	var all []pe
	for _, p := range probs {
		k := p.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		x := pe{p: p, k: k}
		if estimate != nil {
			x.e = estimate(p)
		}
		all = append(all, x)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].e != all[j].e {
			return all[i].e < all[j].e
		}
		return all[i].k < all[j].k
	})
	out := make([]*kernels.Problem, len(all))
	for i, x := range all {
		out[i] = x.p
	}
	return out
}

// StaticEstimate returns an estimate for ByEstimate: the estimated time (by the given roofline
// function) of the tuner's static choice for a problem, 0 when it does not build.
func (t *Tuner) StaticEstimate(caps kernels.Caps, estimate func(*kernels.Launch) time.Duration) func(*kernels.Problem) time.Duration {
	return func(p *kernels.Problem) time.Duration {
		if t.Static == nil {
			return 0
		}
		tm, c, err := t.Static(p)
		if err != nil {
			return 0
		}
		l, err := tm.Build(p, c, caps)
		if err != nil {
			return 0
		}
		return estimate(l)
	}
}
