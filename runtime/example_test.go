package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math"
	"os"

	"github.com/vkc-project/vkc/runtime"
)

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
	fmt.Printf("%+v\n", p.Stats()) // {Dispatches:2 Barriers:1 Intervals:2 Copies:0} (Copies:3 without zero-copy)

	in := make([]byte, 4*n) // n float32 ones
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(1))
	}
	out := make([]byte, 4*n)
	if err := p.Run(context.Background(), [][]byte{in, in}, [][]byte{out}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(out))) // 4
}

// The tuner's measurement: GPU time of the program's dispatches, many repetitions per submission.
func ExampleProgram_Measure() {
	var p *runtime.Program // from Device.NewProgram
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := p.Measure(ctx, runtime.MeasureOptions{Warmup: 3, Reps: 25, MaxSpread: 0.05, MaxRounds: 4})
	if err != nil {
		log.Fatal(err) // context.Canceled, runtime.ErrDeviceLost, ...
	}
	if m.Noisy {
		log.Printf("noisy: %v", m) // e.g. retry later, or widen the tolerance
	}
	fmt.Println(m.Median, m.P10, m.P90, m.Spread)
}
