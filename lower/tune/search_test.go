package tune

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/vkc-project/vkc/kernels"
)

var bigSpace = []kernels.Param{
	kernels.Ints("a", 1, 2, 3, 4, 5, 6),
	kernels.Ints("b", 16, 32, 64, 128, 256),
	kernels.Ints("c", 0, 1, 2, 3, 4, 5),
	kernels.Ints("d", 8, 4, 2, 1),
	kernels.Ints("e", 0, 1),
} // 1440 points

// bigCost is a bowl with its minimum at a=4, b=64, c=2, d=2, e=1; points with a=6 are
// "invalid" (failed), points with c=5 are rejected by a predicate (skipped).
func bigCost(c kernels.Config) (outcome, float64) {
	if c["c"] == 5 {
		return skipped, 0
	}
	if c["a"] == 6 {
		return failed, 0
	}
	d := math.Abs(float64(c["a"]-4)) + math.Abs(math.Log2(float64(c["b"]))-6) + math.Abs(float64(c["c"]-2)) +
		math.Abs(math.Log2(float64(c["d"]))-1) + float64(1-c["e"])
	return timed, 10 + d
}

func runSearch(sp searchPlan, params []kernels.Param) (order []string, best string, used int, complete bool) {
	bestCost := math.Inf(1)
	complete = search(params, sp, func(c kernels.Config) (outcome, float64) {
		o, cost := bigCost(c)
		order = append(order, c.Key())
		if o != skipped {
			used++
		}
		if o == timed && cost < bestCost {
			best, bestCost = c.Key(), cost
		}
		return o, cost
	}, func() bool { return false })
	return
}

// The budgeted search is deterministic for a seed, differs between seeds, spends exactly its
// budget on built configurations (predicate rejections are free), and its hill climbing reaches
// a bowl's minimum from random samples.
func TestSearchBudgetedDeterministic(t *testing.T) {
	sp := searchPlan{Exhaustive: 64, Budget: 80, Seed: 42}
	o1, best1, used1, done1 := runSearch(sp, bigSpace)
	o2, best2, used2, _ := runSearch(sp, bigSpace)
	if !reflect.DeepEqual(o1, o2) || best1 != best2 || used1 != used2 {
		t.Fatal("two searches with one seed differ")
	}
	sp.Seed = 43
	o3, best3, _, _ := runSearch(sp, bigSpace)
	if reflect.DeepEqual(o1, o3) {
		t.Error("searches with different seeds visit the same points in the same order")
	}
	if used1 != 80 || !done1 {
		t.Errorf("used %d configurations (complete %v), want the budget of 80", used1, done1)
	}
	if o1[0] != "a=1,b=16,c=0,d=8,e=0" {
		t.Errorf("first point %s, want the default", o1[0])
	}
	seen := map[string]bool{}
	for _, k := range o1 {
		if seen[k] {
			t.Errorf("point %s evaluated twice", k)
		}
		seen[k] = true
	}
	want := "a=4,b=64,c=2,d=2,e=1"
	if best1 != want || best3 != want {
		t.Errorf("best %s (seed 42), %s (seed 43); want the bowl's minimum %s", best1, best3, want)
	}
}

// A small space is enumerated in full, in Points order (defaults first).
func TestSearchExhaustiveSmallSpace(t *testing.T) {
	small := bigSpace[3:] // d, e: 8 points
	order, _, used, done := runSearch(searchPlan{Exhaustive: 64, Budget: 3, Seed: 1}, small)
	var want []string
	for _, c := range pointsOf(small) {
		want = append(want, c.Key())
	}
	if !reflect.DeepEqual(order, want) || used != 8 || !done {
		t.Errorf("order %v (used %d), want all of %v", order, used, want)
	}
}

// A stop request ends the search at once and reports it incomplete.
func TestSearchStops(t *testing.T) {
	n := 0
	done := search(bigSpace, searchPlan{Exhaustive: 64, Budget: 80, Seed: 1}, func(c kernels.Config) (outcome, float64) {
		n++
		return bigCost(c)
	}, func() bool { return n >= 5 })
	if done || n != 5 {
		t.Errorf("complete %v after %d evaluations, want incomplete after 5", done, n)
	}
}

// A plan's First points are evaluated first, in their order, once each (a duplicate, the default
// and a point outside the space are ignored), then the default, before the random samples, and
// they count against the budget; in a small space they come before the rest of Points order.
func TestSearchFirstPoints(t *testing.T) {
	first := []kernels.Config{
		{"a": 4, "b": 64, "c": 2, "d": 2, "e": 1},
		{"a": 3, "b": 32, "c": 1, "d": 4, "e": 0},
		{"a": 4, "b": 64, "c": 2, "d": 2, "e": 1}, // again
		{"a": 1, "b": 16, "c": 0, "d": 8, "e": 0}, // the default
		{"a": 9, "b": 16, "c": 0, "d": 8, "e": 0}, // not a point of the space
	}
	order, best, used, _ := runSearch(searchPlan{Exhaustive: 64, Budget: 10, Seed: 7, First: first}, bigSpace)
	want := []string{"a=4,b=64,c=2,d=2,e=1", "a=3,b=32,c=1,d=4,e=0", "a=1,b=16,c=0,d=8,e=0"}
	if len(order) < 3 || !reflect.DeepEqual(order[:3], want) {
		t.Fatalf("first evaluations %v, want %v", order[:min(3, len(order))], want)
	}
	if best != want[0] || used != 10 {
		t.Errorf("best %s after %d configurations, want %s after the budget of 10", best, used, want[0])
	}
	seen := map[string]bool{}
	for _, k := range order {
		if seen[k] {
			t.Errorf("point %s evaluated twice", k)
		}
		seen[k] = true
	}
	small := bigSpace[3:] // d, e: 8 points
	order, _, _, _ = runSearch(searchPlan{Exhaustive: 64, First: []kernels.Config{{"d": 1, "e": 1}}}, small)
	if len(order) != 8 || order[0] != "d=1,e=1" || order[1] != "d=8,e=0" {
		t.Errorf("small space order %v, want d=1,e=1, then the default, then the rest", order)
	}
}

// Prefetch is told every point the search evaluates before it is evaluated, each once, and
// changes nothing the search does; what it is told and never evaluated stays within the window.
func TestSearchPrefetchAhead(t *testing.T) {
	smallSpace := bigSpace[:3] // 180 points
	for _, tc := range []struct {
		name   string
		sp     searchPlan
		params []kernels.Param
	}{
		{"budgeted", searchPlan{Exhaustive: 64, Budget: 80, Seed: 42, First: []kernels.Config{{"a": 4, "b": 64, "c": 2, "d": 2, "e": 1}}}, bigSpace},
		{"exhaustive", searchPlan{Exhaustive: 200, Budget: 80}, smallSpace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, _, _, _ := runSearch(tc.sp, tc.params)
			told := map[string]bool{}
			tc.sp.Prefetch = func(cs []kernels.Config) {
				for _, c := range cs {
					if told[c.Key()] {
						t.Errorf("%s told twice", c.Key())
					}
					told[c.Key()] = true
				}
			}
			var order []string
			search(tc.params, tc.sp, func(c kernels.Config) (outcome, float64) {
				if !told[c.Key()] {
					t.Errorf("%s evaluated before Prefetch was told", c.Key())
				}
				order = append(order, c.Key())
				return bigCost(c)
			}, func() bool { return false })
			if !reflect.DeepEqual(order, plain) {
				t.Errorf("with Prefetch the search evaluated %d points in another order than the %d without", len(order), len(plain))
			}
			wasted := 0
			for k := range told {
				if !slices.Contains(order, k) {
					wasted++
				}
			}
			if wasted > 2*8 {
				t.Errorf("%d points told and never evaluated, want at most two windows of 8", wasted)
			}
		})
	}
}
