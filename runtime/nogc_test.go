package runtime

import (
	goruntime "runtime"
	"sync"
	"testing"
	"time"
)

// Calls that overlap without end (a tuner compiling pipelines on every core) still let the
// collector run: after maxGCOff, a new call waits for the running ones and collects.
func TestWithoutGCLetsTheCollectorRun(t *testing.T) {
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	stop := time.Now().Add(4 * maxGCOff)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				withoutGC(func() { time.Sleep(maxGCOff / 10) })
			}
		}()
	}
	wg.Wait()
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	if after.NumGC <= before.NumGC {
		t.Errorf("no collection in %v of overlapping calls", 4*maxGCOff)
	}
	gcOff.Lock()
	defer gcOff.Unlock()
	if gcOff.depth != 0 || gcOff.draining {
		t.Errorf("depth %d, draining %v after the calls", gcOff.depth, gcOff.draining)
	}
}
