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
		pctx, cancel := equalShare(ctx, len(todo)-i)
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

// Ranked is a problem with what tuning it can be worth to its function.
type Ranked struct {
	Problem *kernels.Problem
	// Share is the problem's part of its function's estimated time: its uses times its static
	// estimate over the function's estimate (the largest over the functions and candidates
	// that use it).
	Share float64
	Uses  int
	// Floor is a time no kernel of the problem can beat (its bytes at well above the device
	// model's bandwidth); 0 when unknown.
	Floor time.Duration
}

// Noise is the smallest change of a whole function's time that measured selection can tell
// apart from noise (paired rounds of a function agree to about 1%): tuning that cannot move a
// function by more is not worth a measurement.
const Noise = 0.01

// PlanReport says what TunePlan did with each problem.
type PlanReport struct {
	Tuned   int      // problems searched or taken from the database
	Small   []Ranked // left at the static choice: each under Noise of its function
	Unmet   []Ranked // left at the static choice (or a partial search) because the time ran out
	SmallOf float64  // the shares of Small, summed
}

// TunePlan tunes problems by what they are worth: the largest share first, each with a part of
// the time ctx has left proportional to its share of what is left to tune, so the kernels that
// dominate their functions get the time, and what a quick search leaves passes on. A problem
// whose whole share is under Noise is left at the static choice: tuning it cannot move its
// function by more than the noise, and a warm compile makes the same decision without
// measuring. A search stops once its best is so close to the problem's floor that the rest of
// its space cannot move the function by more than the noise (Tuner.BestWithin). Without a
// deadline on ctx every worthwhile search runs until it is complete or stopped so.
func (t *Tuner) TunePlan(ctx context.Context, rs []Ranked) PlanReport {
	var rep PlanReport
	byKey := map[string]int{}
	var todo []Ranked
	for _, r := range rs {
		k := r.Problem.Key()
		if i, ok := byKey[k]; ok {
			if r.Share > todo[i].Share {
				todo[i].Share, todo[i].Uses = r.Share, r.Uses
			}
			continue
		}
		byKey[k] = len(todo)
		todo = append(todo, r)
	}
	sort.SliceStable(todo, func(i, j int) bool {
		if todo[i].Share != todo[j].Share {
			return todo[i].Share > todo[j].Share
		}
		return todo[i].Problem.Key() < todo[j].Problem.Key()
	})
	var big []Ranked
	for _, r := range todo {
		if r.Share < Noise {
			rep.Small = append(rep.Small, r)
			rep.SmallOf += r.Share
			continue
		}
		big = append(big, r)
	}
	left := 0.0
	for _, r := range big {
		left += r.Share
	}
	t.mu.Lock()
	t.planning = true
	t.phase, _ = ctx.Deadline()
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.planning = false
		t.phase = time.Time{}
		if t.pipes != nil && !t.Guard.Busy() {
			t.pipes.Release()
		}
		t.mu.Unlock()
	}()
	// While a problem is searched, the first points of the next two are compiled.
	const ahead = 2
	for i := range min(ahead, len(big)) {
		t.lookahead(big[i].Problem)
	}
	for i, r := range big {
		if i+ahead < len(big) {
			t.lookahead(big[i+ahead].Problem)
		}
		if c := t.known(r.Problem.Key()); c != nil && !c.Static {
			rep.Tuned++
			left -= r.Share
			continue
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok && left > 0 {
			pctx, cancel = context.WithTimeout(ctx, time.Duration(float64(time.Until(d))*r.Share/left))
		}
		left -= r.Share
		share, floor := r.Share, r.Floor
		enough := func(best time.Duration) bool {
			return share*float64(best-floor)/float64(best) < Noise
		}
		c, err := t.BestWithin(pctx, r.Problem, enough)
		cancel()
		switch {
		case err != nil:
			// No template serves it, or none computes it right: lowering reports it.
		case c.Static:
			rep.Unmet = append(rep.Unmet, r)
		default:
			rep.Tuned++
			if !allComplete(c) {
				rep.Unmet = append(rep.Unmet, r)
			}
		}
	}
	return rep
}

func allComplete(c *Choice) bool {
	for _, e := range c.Entries {
		if !e.Complete {
			return false
		}
	}
	return true
}
