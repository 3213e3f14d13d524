package runtime

import (
	"runtime/debug"
	"sync"
)

// goki/vulkan converts the slices of create-info structures and slice arguments (pipeline and
// layout creation, vkUpdateDescriptorSets) to C memory owned by allocation maps that it drops
// before making the call; the map's finalizer frees that memory, so a garbage collection during the call let the
// driver read freed create-info structures (seen as intermittent crashes in pipeline creation on
// lavapipe and the H200). withoutGC runs such a call with the collector off. debug.SetGCPercent(-1)
// waits for a running mark phase to finish, and the maps are allocated after that, so no cycle can
// find them unreachable until the call has returned. Calls nest and may come from several
// goroutines: the first one in turns the collector off, the last one out restores it.
var gcOff struct {
	sync.Mutex
	depth int
	prev  int
}

func withoutGC(f func()) {
	gcOff.Lock()
	if gcOff.depth == 0 {
		gcOff.prev = debug.SetGCPercent(-1)
	}
	gcOff.depth++
	gcOff.Unlock()
	defer func() {
		gcOff.Lock()
		gcOff.depth--
		if gcOff.depth == 0 {
			debug.SetGCPercent(gcOff.prev)
		}
		gcOff.Unlock()
	}()
	f()
}
