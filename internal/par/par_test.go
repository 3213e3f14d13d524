package par

import (
	"errors"
	"runtime"
	"sync"
	"testing"
)

// Map returns every result in its item's place.
func TestMap(t *testing.T) {
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	ys := Map(xs, func(x int) int { return 2 * x })
	for i, y := range ys {
		if y != 2*i {
			t.Fatalf("result %d is %d, want %d", i, y, 2*i)
		}
	}
	if len(Map([]int(nil), func(int) int { return 0 })) != 0 {
		t.Error("results for no items")
	}
}

// Split covers [0, n) once, in no more parts than n/least (one at least) nor 8, and joins the
// parts' errors.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ n, least int }{{100, 10}, {5, 10}, {0, 4}, {1 << 20, 1000}} {
		seen := make([]int32, c.n)
		var mu sync.Mutex
		parts := 0
		err := Split(c.n, c.least, func(a, b int) error {
			mu.Lock()
			parts++
			mu.Unlock()
			for i := a; i < b; i++ {
				seen[i]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("n %d: item %d covered %d times", c.n, i, s)
			}
		}
		if parts > max(1, min(8, c.n/c.least)) {
			t.Errorf("n %d: %d parts of at least %d", c.n, parts, c.least)
		}
	}
	if err := Split(100, 10, func(a, b int) error {
		if a > 0 {
			return errors.New("part")
		}
		return nil
	}); err == nil && runtime.GOMAXPROCS(0) > 1 {
		t.Error("a part's error is lost")
	}
}
