package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"testing"

	"github.com/vkc-project/vkc/runtime"
)

// TestMain leaves the examples out when there is no Vulkan device, saying so: they open one
// (lavapipe is enough) and their output lines are what a device computes. The tests skip on
// their own.
func TestMain(m *testing.M) {
	flag.Parse()
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		fmt.Fprintf(os.Stderr, "runtime: examples not run: no Vulkan device: %v\n", err)
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			flag.Set("test.run", "^Test")
		}
	}
	os.Exit(m.Run())
}

// addProgram builds the two-dispatch program of ExampleDevice_NewProgram on d: c = a + b, then
// c = 2c, over n floats.
func addProgram(d *runtime.Device, n int) (*runtime.Program, error) {
	addSPV, err := os.ReadFile("testdata/add.spv")
	if err != nil {
		return nil, err
	}
	scaleSPV, err := os.ReadFile("testdata/scale.spv")
	if err != nil {
		return nil, err
	}
	add, err := d.NewPipeline(runtime.Kernel{Name: "add", SPIRV: addSPV, Bindings: 3, PushConstantSize: 4,
		Spec: []runtime.SpecConstant{{ID: 0, Value: 64}}})
	if err != nil {
		return nil, err
	}
	scale, err := d.NewPipeline(runtime.Kernel{Name: "scale", SPIRV: scaleSPV, Bindings: 1, PushConstantSize: 8,
		Spec: []runtime.SpecConstant{{ID: 0, Value: 64}}})
	if err != nil {
		return nil, err
	}
	a, _ := d.NewBuffer(int64(4 * n))
	b, _ := d.NewBuffer(int64(4 * n))
	c, _ := d.NewBuffer(int64(4 * n))
	push := func(words ...uint32) []byte {
		out := make([]byte, 4*len(words))
		for i, w := range words {
			binary.LittleEndian.PutUint32(out[4*i:], w)
		}
		return out
	}
	g := [3]uint32{uint32(n / 64), 1, 1}
	return d.NewProgram(runtime.ProgramSpec{
		Dispatches: []runtime.Dispatch{
			{Pipeline: add, Grid: g, Push: push(uint32(n)), Bindings: []runtime.Binding{
				{Buffer: a, Access: runtime.Read}, {Buffer: b, Access: runtime.Read}, {Buffer: c, Access: runtime.Write}}},
			{Pipeline: scale, Grid: g, Push: push(uint32(n), math.Float32bits(2)), Bindings: []runtime.Binding{
				{Buffer: c, Access: runtime.ReadWrite}}},
		},
		Inputs:  []runtime.Region{{Buffer: a, Size: int64(4 * n)}, {Buffer: b, Size: int64(4 * n)}},
		Outputs: []runtime.Region{{Buffer: c, Size: int64(4 * n)}},
	})
}

// A two-dispatch program: c = a + b, then c = 2c in place. The analysis finds the read-after-write
// on c and records one barrier; Run reuses the recorded command buffer every time.
func ExampleDevice_NewProgram() {
	d, err := runtime.Open(runtime.Options{})
	if errors.Is(err, runtime.ErrNoVulkan) || errors.Is(err, runtime.ErrNoDevice) {
		log.Fatal(err) // the message says what to install
	}
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	addSPV, _ := os.ReadFile("testdata/add.spv")
	scaleSPV, _ := os.ReadFile("testdata/scale.spv")
	add, err := d.NewPipeline(runtime.Kernel{Name: "add", SPIRV: addSPV, Bindings: 3, PushConstantSize: 4,
		Spec: []runtime.SpecConstant{{ID: 0, Value: 64}}}) // workgroup size
	if err != nil {
		log.Fatal(err)
	}
	scale, err := d.NewPipeline(runtime.Kernel{Name: "scale", SPIRV: scaleSPV, Bindings: 1, PushConstantSize: 8,
		Spec: []runtime.SpecConstant{{ID: 0, Value: 64}}})
	if err != nil {
		log.Fatal(err)
	}

	const n = 1024
	a, _ := d.NewBuffer(4 * n)
	b, _ := d.NewBuffer(4 * n)
	c, _ := d.NewBuffer(4 * n)
	push := func(words ...uint32) []byte {
		out := make([]byte, 4*len(words))
		for i, w := range words {
			binary.LittleEndian.PutUint32(out[4*i:], w)
		}
		return out
	}
	p, err := d.NewProgram(runtime.ProgramSpec{
		Dispatches: []runtime.Dispatch{
			{Pipeline: add, Grid: [3]uint32{n / 64, 1, 1}, Push: push(n), Bindings: []runtime.Binding{
				{Buffer: a, Access: runtime.Read}, {Buffer: b, Access: runtime.Read}, {Buffer: c, Access: runtime.Write}}},
			{Pipeline: scale, Grid: [3]uint32{n / 64, 1, 1}, Push: push(n, math.Float32bits(2)), Bindings: []runtime.Binding{
				{Buffer: c, Access: runtime.ReadWrite}}},
		},
		Inputs:  []runtime.Region{{Buffer: a, Size: 4 * n}, {Buffer: b, Size: 4 * n}},
		Outputs: []runtime.Region{{Buffer: c, Size: 4 * n}},
	})
	if err != nil {
		log.Fatal(err)
	}
	st := p.Stats() // Copies: 0 with zero-copy (lavapipe, integrated GPUs), 3 through staging
	fmt.Printf("%d dispatches, %d barrier, %d intervals\n", st.Dispatches, st.Barriers, st.Intervals)

	in := make([]byte, 4*n) // n float32 ones
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(1))
	}
	out := make([]byte, 4*n)
	if err := p.Run(context.Background(), [][]byte{in, in}, [][]byte{out}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(out))) // (1 + 1) * 2
	// Output:
	// 2 dispatches, 1 barrier, 2 intervals
	// 4
}

// The tuner's measurement: GPU time of the program's dispatches, many repetitions per submission,
// repeated until a round's spread is within MaxSpread (else Noisy). The times vary from run to
// run; what the example prints does not.
func ExampleProgram_Measure() {
	d, err := runtime.Open(runtime.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	p, err := addProgram(d, 1024) // the program of the Device.NewProgram example
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := p.Measure(ctx, runtime.MeasureOptions{Warmup: 3, Reps: 25, MaxSpread: 0.05, MaxRounds: 4})
	if err != nil {
		log.Fatal(err) // context.Canceled, runtime.ErrDeviceLost, ...
	}
	// m.Noisy says that no round was within MaxSpread (a loaded machine): retry later, or
	// widen the tolerance. m.String() summarises: "median 79µs [p10 70µs, p90 83µs] spread ...".
	fmt.Println(len(m.Samples), "timed repetitions")
	fmt.Println("p10 <= median <= p90:", m.P10 <= m.Median && m.Median <= m.P90, "; median > 0:", m.Median > 0)
	// Output:
	// 25 timed repetitions
	// p10 <= median <= p90: true ; median > 0: true
}
