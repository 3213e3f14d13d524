package runtime

import (
	"os"
	goruntime "runtime"
	"sync/atomic"
	"testing"
)

// Pipeline creation with specialization constants while another goroutine churns the heap, so
// automatic collections run all the time: before
// withoutGC, goki/vulkan's dropped allocation maps were freed mid-call and this crashed the
// process within a few iterations.
func TestPipelineCreationUnderGCPressure(t *testing.T) {
	d := openTest(t, Options{})
	spv, err := os.ReadFile("testdata/scale.spv")
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var keep [][]byte
		for i := 0; !stop.Load(); i++ {
			keep = append(keep, make([]byte, 1<<12)) // churn: automatic collections every few ms
			if len(keep) > 256 {
				keep = keep[:0]
			}
			if i%64 == 0 {
				goruntime.Gosched()
			}
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := 0; i < 200; i++ {
		p, err := d.NewPipeline(Kernel{Name: "scale", SPIRV: spv, Bindings: 1, PushConstantSize: 8,
			Spec: []SpecConstant{{ID: 0, Value: uint32(32 << (i % 3))}}})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
}
