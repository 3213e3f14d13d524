package runtime

import (
	goruntime "runtime"
	"sync"
	"testing"
	"time"
)

// Calls that overlap without end (a tuner compiling pipelines on every core) still let the
// collector run: once the heap has grown past doubling while it was off, a new call waits for
// the running ones and collects, so garbage made meanwhile (by the reference evaluations of a
// compile) does not pile up.
func TestWithoutGCLetsTheCollectorRun(t *testing.T) {
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				withoutGC(func() { time.Sleep(20 * time.Millisecond) })
			}
		}()
	}
	var peak uint64
	garbage := 0
	for time.Now().Before(stop) {
		b := make([]byte, 4<<20) // 4 MiB of garbage at a time, 2 GB/s at most
		garbage += len(b) + int(b[len(b)-1])
		peak = max(peak, heapBytes())
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	if after.NumGC <= before.NumGC {
		t.Errorf("no collection during 2 s of overlapping calls and %d MiB of garbage", garbage>>20)
	}
	if limit := uint64(2 << 30); peak > limit {
		t.Errorf("the heap peaked at %d MiB of %d MiB of garbage", peak>>20, garbage>>20)
	}
	gcOff.Lock()
	defer gcOff.Unlock()
	if gcOff.depth != 0 || gcOff.draining {
		t.Errorf("depth %d, draining %v after the calls", gcOff.depth, gcOff.draining)
	}
}
