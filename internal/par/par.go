// Package par runs independent work on every core.
package par

import (
	"runtime"
	"sync"
)

// Map applies fn to each of xs on up to GOMAXPROCS goroutines, taking the items in order, and
// returns the results in xs' order.
func Map[X, Y any](xs []X, fn func(X) Y) []Y {
	out := make([]Y, len(xs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(xs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = fn(xs[i])
			}
		}()
	}
	for i := range xs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
