package tune

import (
	"math/rand"
	"slices"
	"sort"

	"github.com/vkc-project/vkc/kernels"
)

// outcome is what evaluating one point of a space gave.
type outcome uint8

const (
	// skipped: rejected by the space's predicates, or already known; costs no budget.
	skipped outcome = iota
	// failed: built or run and found invalid (build error, pipeline error, wrong result).
	failed
	// timed: valid, with a time.
	timed
)

// searchPlan says how a space is searched.
type searchPlan struct {
	// Exhaustive: spaces of at most this many points are searched in full, in Points order.
	Exhaustive int
	// Budget: larger spaces get this many evaluations (failed or timed; predicate rejections
	// are free).
	Budget int
	Seed   int64
	// First are points to evaluate before any other, the default included, in order (the
	// static choices a compile without measurement makes, then kernels.Space.Suggestions: where
	// a template expects the fast points of this problem to lie): a search cut short after one
	// point has then measured the static choice, not a default a static compile would not run
	// (a 15 s budget on the H200 cuts most searches after a point or two). They count against
	// the budget like any evaluation.
	First []kernels.Config
	// Prefetch, when set, is told the points the search is about to evaluate, in order, ahead of
	// evaluating them (a few at a time; each point once): the tuner compiles their pipelines in
	// the background. It changes nothing the search decides.
	Prefetch func([]kernels.Config)
	// Ahead is how many points Prefetch is told ahead (0: 8).
	Ahead int
}

// search walks params' points and calls eval on each point it wants, in an order that is a
// function of the plan (its seed) and of eval's answers alone, so the same answers give the same
// order. eval returns the outcome and, for a timed point, its cost (smaller is better); stop
// reports that the caller's time is up. search returns true when it ran its plan to the end.
//
// A small space (≤ Exhaustive points) is enumerated in full, the plan's First points first, then
// the default, then the rest in order. A large one gets a budgeted search: the First points, the
// default point, then random samples (a seeded shuffle) for half the budget,
// then hill climbing from the best point over neighbouring values (each parameter one step up or
// down in its sorted values), then more samples and climbing until the budget is spent or every
// point has been seen. This is a heuristic, not an optimum: a large space's best point is found
// only when it lies on a climb from a sampled point.
func search(params []kernels.Param, sp searchPlan, eval func(kernels.Config) (outcome, float64), stopFn func() bool) bool {
	halted := false
	stop := func() bool {
		halted = halted || stopFn()
		return halted
	}
	points := pointsOf(params)
	index := make(map[string]int, len(points))
	for i, c := range points {
		index[c.Key()] = i
	}
	var first []int // indices of the First points in the space, once each, the default excluded
	for _, c := range sp.First {
		if i, ok := index[c.Key()]; ok && i != 0 && !slices.Contains(first, i) {
			first = append(first, i)
		}
	}
	ahead := sp.Ahead
	if ahead <= 0 {
		ahead = 8
	}
	hinted := map[int]bool{}
	// hint tells Prefetch the points of idx not told before, at most n of them.
	hint := func(idx []int, n int) {
		if sp.Prefetch == nil || n <= 0 {
			return
		}
		var cs []kernels.Config
		for _, i := range idx {
			if len(cs) >= n {
				break
			}
			if !hinted[i] {
				hinted[i] = true
				cs = append(cs, points[i])
			}
		}
		if len(cs) > 0 {
			sp.Prefetch(cs)
		}
	}
	if len(points) <= sp.Exhaustive || sp.Budget <= 0 {
		order := append(append([]int(nil), first...), 0)
		for i := 1; i < len(points); i++ {
			if !slices.Contains(first, i) {
				order = append(order, i)
			}
		}
		for k, i := range order {
			if stop() {
				return false
			}
			hint(order[k:min(k+ahead, len(order))], ahead) // a window sliding ahead
			eval(points[i])
		}
		return true
	}
	// sorted[j] is parameter j's values in increasing order, for neighbours.
	sorted := make([][]int, len(params))
	for j, p := range params {
		sorted[j] = append([]int(nil), p.Values...)
		sort.Ints(sorted[j])
	}
	seen := make([]bool, len(points))
	used := 0
	best, bestCost := -1, 0.0
	visit := func(i int) {
		seen[i] = true
		o, cost := eval(points[i])
		if o == skipped {
			return
		}
		used++
		if o == timed && (best < 0 || cost < bestCost) {
			best, bestCost = i, cost
		}
	}
	neighbours := func(i int) []int {
		var out []int
		c := points[i]
		for j, p := range params {
			v := c[p.Name]
			at := sort.SearchInts(sorted[j], v)
			for _, d := range []int{-1, 1} {
				k := at + d
				if k < 0 || k >= len(sorted[j]) {
					continue
				}
				n := make(kernels.Config, len(c))
				for name, x := range c {
					n[name] = x
				}
				n[p.Name] = sorted[j][k]
				if ni, ok := index[n.Key()]; ok {
					out = append(out, ni)
				}
			}
		}
		return out
	}
	climb := func() {
		for used < sp.Budget && best >= 0 && !stop() {
			from := best
			var fresh []int
			for _, n := range neighbours(from) {
				if !seen[n] {
					fresh = append(fresh, n)
				}
			}
			hint(fresh, sp.Budget-used)
			for _, n := range neighbours(from) {
				if used >= sp.Budget || stop() {
					return
				}
				if !seen[n] {
					visit(n)
				}
			}
			if best == from {
				return // a local optimum: no neighbour is better
			}
		}
	}
	rng := rand.New(rand.NewSource(sp.Seed))
	order := rng.Perm(len(points))
	next := 0
	hint(append(append([]int(nil), first...), 0), sp.Budget)
	for _, i := range first {
		if used >= sp.Budget || stop() {
			break
		}
		visit(i)
	}
	if used < sp.Budget && !stop() {
		visit(0) // the default point
	}
	quota := max(sp.Budget/2, 1)
	for used < sp.Budget && !stop() {
		before := used
		for used < min(quota, sp.Budget) && next < len(order) && !stop() {
			if i := order[next]; !seen[i] {
				var upcoming []int
				for _, j := range order[next:] {
					if !seen[j] {
						upcoming = append(upcoming, j)
					}
					if len(upcoming) == ahead {
						break
					}
				}
				hint(upcoming, min(quota, sp.Budget)-used)
				visit(i)
			}
			next++
		}
		climb()
		quota = used + max((sp.Budget-used)/2, 1)
		if used == before && next >= len(order) {
			break // nothing left to sample and the climb found nothing new
		}
	}
	return !halted || used >= sp.Budget
}

// pointsOf enumerates params as Space.Points does: defaults first, the last parameter fastest.
func pointsOf(params []kernels.Param) []kernels.Config {
	return kernels.Space{Params: params}.Points()
}
