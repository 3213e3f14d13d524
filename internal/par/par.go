// Package par runs independent work on every core.
package par

import (
	"errors"
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

// Split cuts [0, n) into consecutive parts of at least least items, at most GOMAXPROCS of them
// and at most 8 (memory copies and file reads stop gaining past a few cores), runs fn on each
// part on a goroutine of its own, and returns their errors joined. With one part fn runs on the
// caller's goroutine.
func Split(n, least int, fn func(a, b int) error) error {
	k := min(runtime.GOMAXPROCS(0), 8, n/max(least, 1))
	if k <= 1 {
		return fn(0, n)
	}
	step := (n + k - 1) / k
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		a, b := min(i*step, n), min((i+1)*step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(a, b)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
