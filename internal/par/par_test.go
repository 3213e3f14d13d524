package par

import "testing"

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
