package runtime

import (
	goruntime "runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// goki/vulkan converts slice arguments of structures (vkCreateComputePipelines' create infos,
// vkUpdateDescriptorSets' writes) to C memory owned by allocation maps that it drops before
// making the call; the map's finalizer frees that memory, so a garbage collection during the call
// let the driver read freed structures (seen as intermittent crashes in pipeline creation on
// lavapipe and the H200). Pipelines are now created through cvk.c with C memory of our own;
// withoutGC runs the remaining such call (vkUpdateDescriptorSets) with the collector off. debug.SetGCPercent(-1)
// waits for a running mark phase to finish, and the maps are allocated after that, so no cycle can
// find them unreachable until the call has returned. Calls nest and may come from several
// goroutines (not nest within one): the first one in turns the collector off, the last one out
// restores it.
//
// Calls from several goroutines can overlap without end (a tuner compiling pipelines on every
// core), and a collector that never runs let a SmolLM2 compile grow to 10 GB. So once the heap
// has grown past what the collector would have let it (gcOffGrowth) while it was off, a new call
// waits until those running have returned, collects, and only then turns the collector off
// again. (Waiting every 500 ms instead cost the H200 tuner two thirds of its configurations:
// the pool of compiles drained each time.)
var gcOff struct {
	sync.Mutex
	cond     sync.Cond
	depth    int
	prev     int
	heap     uint64 // heap object bytes when the collector was turned off
	draining bool   // a call is waiting for the running ones to return, to collect
}

// gcOffGrowth is the heap growth, beyond doubling, that overlapping calls allow before new ones
// wait for a collection.
const gcOffGrowth = 256 << 20

// heapBytes reads the bytes of heap objects, live or not yet swept (no stop of the world).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func withoutGC(f func()) {
	gcOff.Lock()
	if gcOff.cond.L == nil {
		gcOff.cond.L = &gcOff.Mutex
	}
	for gcOff.draining {
		gcOff.cond.Wait()
	}
	if gcOff.depth > 0 && heapBytes() > 2*gcOff.heap+gcOffGrowth {
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
		gcOff.heap = heapBytes()
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
