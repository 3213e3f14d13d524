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
