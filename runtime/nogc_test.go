package runtime

import (
	"context"
	"encoding/binary"
	"math"
	"os"
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

// Pipelines created from several goroutines while the collector runs all the time get their
// specialization constants (the workgroup size: with the wrong one, the grid would cover a
// fraction of the data): the create infos handed to the driver are C memory of cvk.c's.
func TestPipelinesUnderCollection(t *testing.T) {
	d := openTest(t, Options{})
	spv, err := os.ReadFile("testdata/scale.spv")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				goruntime.GC()
			}
		}
	}()
	defer close(stop)
	const n = 1024
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				wgSize := uint32(128 << ((w + i) % 2))
				pl, err := d.NewPipeline(Kernel{Name: "scale", SPIRV: spv, Bindings: 1, PushConstantSize: 8,
					Spec: []SpecConstant{{ID: 0, Value: wgSize}}})
				if err != nil {
					t.Error(err)
					return
				}
				buf, err := d.NewBuffer(4 * n)
				if err != nil {
					t.Error(err)
					return
				}
				push := make([]byte, 8)
				binary.LittleEndian.PutUint32(push, n)
				binary.LittleEndian.PutUint32(push[4:], math.Float32bits(3))
				prog, err := d.NewProgram(ProgramSpec{
					Dispatches: []Dispatch{{Pipeline: pl, Grid: [3]uint32{n / wgSize, 1, 1}, Push: push,
						Bindings: []Binding{{Buffer: buf, Access: ReadWrite}}}},
					Inputs:  []Region{{Buffer: buf, Size: 4 * n}},
					Outputs: []Region{{Buffer: buf, Size: 4 * n}},
				})
				if err != nil {
					t.Error(err)
					return
				}
				in := make([]byte, 4*n)
				for k := range n {
					binary.LittleEndian.PutUint32(in[4*k:], math.Float32bits(float32(k)))
				}
				out := make([]byte, 4*n)
				if err := prog.Run(context.Background(), [][]byte{in}, [][]byte{out}); err != nil {
					t.Error(err)
					return
				}
				for k := range n {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*k:])); got != 3*float32(k) {
						t.Errorf("workgroup %d: element %d is %g, want %g", wgSize, k, got, 3*float32(k))
						break
					}
				}
				prog.Close()
				buf.Free()
				pl.Close()
			}
		}()
	}
	wg.Wait()
}
