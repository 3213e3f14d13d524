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
// A phase of the work (the compile's tuning, which has the first quarter of the budget) keeps
// its own deadline with RunBy: work that the phase's deadline finds running is left to finish
// (a straggler) while the caller goes on, and the next work given to the device (Run, RunBy)
// starts only after it ends, waiting for it at most until its own deadline. A straggler that
// the hard deadline still finds running abandons the device for good, as Run's work does.
//
// The zero value, and a guard without a deadline, run everything to its end.
type DeviceGuard struct {
	// Deadline is the hard deadline (zero: none).
	Deadline time.Time

	mu        sync.Mutex
	abandoned bool
	running   sync.WaitGroup
	// straggler is closed when the work a phase's deadline left running ends (nil: none).
	straggler chan struct{}
	// stragglers counts the work left so (for Stragglers).
	stragglers int
}

// Run runs f and reports whether it finished before the deadline (and the guard had abandoned
// nothing before). When it did not, f may still be running: it must not share with its caller
// anything the caller uses afterwards.
func (g *DeviceGuard) Run(f func()) bool {
	return g.RunBy(time.Time{}, f)
}

// RunBy is Run within a phase that ends at by (zero: the phase is the whole of the guard's
// time): when by comes before the guard's deadline and finds f running, f is left to finish (a
// straggler, see the type's comment) and RunBy returns false, without abandoning the device.
// Work a straggler still runs is waited for before f starts, until the earlier of by and the
// guard's deadline; when that comes first, f does not run and RunBy returns false.
func (g *DeviceGuard) RunBy(by time.Time, f func()) bool {
	if g == nil || g.Deadline.IsZero() {
		f()
		return true
	}
	if g.Abandoned() {
		return false
	}
	deadline, phase := g.Deadline, false
	if !by.IsZero() && by.Before(deadline) {
		deadline, phase = by, true
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	g.mu.Lock()
	busy := g.straggler
	g.mu.Unlock()
	if busy != nil {
		select {
		case <-busy:
		case <-timer.C:
			if !phase {
				g.abandon() // the device is still busy at the hard deadline
			}
			return false
		}
	}
	done := make(chan struct{})
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		defer close(done)
		f()
	}()
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
	if !phase {
		g.abandon()
		return false
	}
	g.mu.Lock()
	g.straggler = done
	g.stragglers++
	g.mu.Unlock()
	go func() {
		// A straggler the hard deadline finds running abandons the device.
		hard := time.NewTimer(time.Until(g.Deadline))
		defer hard.Stop()
		select {
		case <-done:
		case <-hard.C:
			select {
			case <-done:
			default:
				g.abandon()
			}
		}
		g.mu.Lock()
		if g.straggler == done {
			g.straggler = nil
		}
		g.mu.Unlock()
	}()
	return false
}

func (g *DeviceGuard) abandon() {
	g.mu.Lock()
	g.abandoned = true
	g.mu.Unlock()
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

// Busy reports whether work the guard stopped waiting for may still run on the device: it was
// abandoned, or a phase's deadline left a straggler that has not ended. What such work may use
// (the tuner's pipelines) must not be released.
func (g *DeviceGuard) Busy() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return true
	}
	if g.straggler != nil {
		select {
		case <-g.straggler:
		default:
			return true
		}
	}
	return false
}

// Stragglers returns how many times a phase's deadline left work running (RunBy).
func (g *DeviceGuard) Stragglers() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stragglers
}

// Wait waits for the work Run started, abandoned work included.
func (g *DeviceGuard) Wait() {
	if g != nil {
		g.running.Wait()
	}
}
