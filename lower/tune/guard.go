package tune

import (
	"sync"
	"time"
)

// DeviceGuard bounds device work that cannot be interrupted by a hard deadline: a driver
// compiling a kernel (lavapipe compiles at a kernel's first run, taking from 0.05 s to tens of
// seconds on a loaded machine), a submission being timed. Run runs such work on a goroutine of
// its own and returns when it ends or when the deadline passes, whichever is first; in the
// second case the work is abandoned: it goes on until the driver returns, nothing waits for it,
// and no further work is given to the device (Run refuses it). The owner closes the device only
// after Wait, on a goroutine of its own, so that a compile ends at its deadline and a program
// that exits then simply leaves the driver's work to the process's end.
//
// The zero value, and a guard without a deadline, run everything to its end.
type DeviceGuard struct {
	// Deadline is the hard deadline (zero: none).
	Deadline time.Time

	mu        sync.Mutex
	abandoned bool
	running   sync.WaitGroup
}

// Run runs f and reports whether it finished before the deadline (and the guard had abandoned
// nothing before). When it did not, f may still be running: it must not share with its caller
// anything the caller uses afterwards.
func (g *DeviceGuard) Run(f func()) bool {
	if g == nil || g.Deadline.IsZero() {
		f()
		return true
	}
	if g.Abandoned() {
		return false
	}
	done := make(chan struct{})
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		defer close(done)
		f()
	}()
	timer := time.NewTimer(time.Until(g.Deadline))
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
	}
	select {
	case <-done: // it ended as the deadline came
		return true
	default:
	}
	g.mu.Lock()
	g.abandoned = true
	g.mu.Unlock()
	return false
}

// Abandoned reports whether work was left running at the deadline: the device is busy with it.
func (g *DeviceGuard) Abandoned() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.abandoned
}

// Wait waits for the work Run started, abandoned work included.
func (g *DeviceGuard) Wait() {
	if g != nil {
		g.running.Wait()
	}
}
