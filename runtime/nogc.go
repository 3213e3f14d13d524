package runtime

import (
	goruntime "runtime"
	"runtime/debug"
	"sync"
	"time"
)

// goki/vulkan converts the slices of create-info structures and slice arguments (pipeline and
// layout creation, vkUpdateDescriptorSets) to C memory owned by allocation maps that it drops
// before making the call; the map's finalizer frees that memory, so a garbage collection during the call let the
// driver read freed create-info structures (seen as intermittent crashes in pipeline creation on
// lavapipe and the H200). withoutGC runs such a call with the collector off. debug.SetGCPercent(-1)
// waits for a running mark phase to finish, and the maps are allocated after that, so no cycle can
// find them unreachable until the call has returned. Calls nest and may come from several
// goroutines (not nest within one): the first one in turns the collector off, the last one out
// restores it.
//
// Calls from several goroutines can overlap without end (a tuner compiling pipelines on every
// core), and a collector that never runs let a SmolLM2 compile grow to 10 GB. So once the
// collector has been off for maxGCOff, a new call waits until those running have returned,
// collects, and only then turns the collector off again.
var gcOff struct {
	sync.Mutex
	cond     sync.Cond
	depth    int
	prev     int
	since    time.Time // when the collector was turned off
	draining bool      // a call is waiting for the running ones to return, to collect
}

// maxGCOff is how long overlapping calls keep the collector off before new ones wait for it.
const maxGCOff = 500 * time.Millisecond

func withoutGC(f func()) {
	gcOff.Lock()
	if gcOff.cond.L == nil {
		gcOff.cond.L = &gcOff.Mutex
	}
	for gcOff.draining {
		gcOff.cond.Wait()
	}
	if gcOff.depth > 0 && time.Since(gcOff.since) > maxGCOff {
		gcOff.draining = true
		for gcOff.depth > 0 {
			gcOff.cond.Wait()
		}
		gcOff.Unlock()
		goruntime.GC() // the collector is on again (the last call out restored it)
		gcOff.Lock()
		gcOff.draining = false
		gcOff.cond.Broadcast()
	}
	if gcOff.depth == 0 {
		gcOff.prev = debug.SetGCPercent(-1)
		gcOff.since = time.Now()
	}
	gcOff.depth++
	gcOff.Unlock()
	defer func() {
		gcOff.Lock()
		gcOff.depth--
		if gcOff.depth == 0 {
			debug.SetGCPercent(gcOff.prev)
			gcOff.cond.Broadcast()
		}
		gcOff.Unlock()
	}()
	f()
}
