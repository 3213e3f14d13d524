package tune

import (
	"testing"
	"time"
)

// A guard runs work to its end before its deadline; work the deadline finds running is
// abandoned (Run returns at the deadline, not when the work ends), later work is refused, and
// Wait waits for the abandoned work.
func TestDeviceGuard(t *testing.T) {
	var none *DeviceGuard
	ran := false
	if !none.Run(func() { ran = true }) || !ran || none.Abandoned() {
		t.Fatal("a nil guard does not run its work to the end")
	}
	g := &DeviceGuard{Deadline: time.Now().Add(200 * time.Millisecond)}
	if !g.Run(func() {}) || g.Abandoned() {
		t.Fatal("quick work before the deadline is not finished")
	}
	release := make(chan struct{})
	ended := make(chan struct{})
	t0 := time.Now()
	if g.Run(func() { <-release; close(ended) }) {
		t.Fatal("work outlasting the deadline reported finished")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Run returned %v after it started, not at the deadline", d)
	}
	if !g.Abandoned() {
		t.Error("the guard does not say it abandoned work")
	}
	again := false
	if g.Run(func() { again = true }) || again {
		t.Error("work given after the abandonment ran")
	}
	waited := make(chan struct{})
	go func() { g.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while the abandoned work runs")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-ended
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the abandoned work ended")
	}
}

// A phase's deadline (RunBy) earlier than the guard's leaves the work it finds running as a
// straggler: RunBy returns at the phase's deadline without abandoning the device, the next work
// waits for the straggler (until its own deadline) and then runs; a straggler the hard deadline
// still finds running abandons the device.
func TestDeviceGuardPhase(t *testing.T) {
	g := &DeviceGuard{Deadline: time.Now().Add(time.Minute)}
	release := make(chan struct{})
	t0 := time.Now()
	if g.RunBy(time.Now().Add(100*time.Millisecond), func() { <-release }) {
		t.Fatal("work outlasting its phase reported finished")
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("RunBy returned %v after it started, not at the phase's deadline", d)
	}
	if g.Abandoned() || !g.Busy() || g.Stragglers() != 1 {
		t.Fatalf("after a phase's deadline: abandoned=%v busy=%v stragglers=%d, want false, true, 1", g.Abandoned(), g.Busy(), g.Stragglers())
	}
	// Work of a later phase whose deadline comes while the straggler runs does not start.
	ran := false
	if g.RunBy(time.Now().Add(50*time.Millisecond), func() { ran = true }) || ran || g.Abandoned() {
		t.Fatalf("work given while the straggler outlasts its phase: finished=%v ran=%v abandoned=%v", !ran, ran, g.Abandoned())
	}
	// Work given while the straggler runs starts once it ends.
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	if !g.Run(func() { ran = true }) || !ran {
		t.Fatal("work given after a straggler did not run when it ended")
	}
	if g.Busy() || g.Abandoned() {
		t.Errorf("after the straggler ended: busy=%v abandoned=%v", g.Busy(), g.Abandoned())
	}

	// A straggler that outlasts the hard deadline abandons the device.
	h := &DeviceGuard{Deadline: time.Now().Add(300 * time.Millisecond)}
	stuck := make(chan struct{})
	defer close(stuck)
	if h.RunBy(time.Now().Add(50*time.Millisecond), func() { <-stuck }) || h.Abandoned() {
		t.Fatal("the straggler's phase: want RunBy false without abandoning")
	}
	for end := time.Now().Add(10 * time.Second); !h.Abandoned() && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if !h.Abandoned() {
		t.Error("a straggler running at the hard deadline did not abandon the device")
	}
	if h.Run(func() { t.Error("work ran after the device was abandoned") }) {
		t.Error("Run after the abandonment reported finished")
	}
}
