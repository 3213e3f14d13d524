package tune

import (
	"bytes"
	"context"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/runtime"
)

// TestColdCopies: a GPU bench holds copies of its arguments for at least coldBytes in all (at
// most 16), a CPU device's one set.
func TestColdCopies(t *testing.T) {
	lin := func(n, k int, w ir.DType) *kernels.Problem {
		return &kernels.Problem{Op: ir.Linear, Args: []ir.Type{ir.T(ir.F32, 1, k), ir.T(w, n, k)}, Outs: []ir.Type{ir.T(ir.F32, 1, n)}, NumOpArgs: 2}
	}
	for _, c := range []struct {
		p    *kernels.Problem
		t    runtime.DeviceType
		want int
	}{
		{lin(4096, 4096, ir.Q8_0), runtime.Discrete, 8},   // 17 MiB: 8 sets, 136 MiB
		{lin(14336, 4096, ir.Q8_0), runtime.Discrete, 3},  // 59.5 MiB
		{lin(128256, 4096, ir.Q8_0), runtime.Discrete, 1}, // 532 MiB
		{lin(64, 64, ir.F32), runtime.Discrete, 16},       // tiny: at most 16
		{lin(4096, 4096, ir.Q8_0), runtime.CPU, 1},        // lavapipe
	} {
		if got := coldCopies(c.p, c.t); got != c.want {
			t.Errorf("%s on %v: %d copies, want %d", c.p.Key(), c.t, got, c.want)
		}
	}
}

// TestBenchColdRuns: with three argument sets (forced on any device), a bench's check run still
// computes the problem's results; the first Measure makes the further sets, holding the bytes of
// the arguments Exec uploaded, and times the launch (per launch, over the sets), as Sample does;
// a later Exec fills the sets with its arguments too.
func TestBenchColdRuns(t *testing.T) {
	d := testDevice(t)
	caps := CapsOf(&d.Info)
	benchCopies = func(*kernels.Problem, runtime.DeviceType) int { return 3 }
	defer func() { benchCopies = coldCopies }()
	p := &kernels.Problem{Op: ir.RMSNormLinear, Attrs: ir.Attrs{"eps": 1e-5},
		Args: []ir.Type{ir.T(ir.F32, 2, 256), ir.T(ir.F32, 256), ir.T(ir.Q8_0, 48, 256)}, Outs: []ir.Type{ir.T(ir.F32, 2, 48)}, NumOpArgs: 3}
	b := firstBench(t, d, p, caps)
	defer b.Close()
	ctx := context.Background()
	args := Inputs(p, rand.New(rand.NewSource(3)))
	got, err := b.Run(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Expect(p, args)
	if err != nil {
		t.Fatal(err)
	}
	if msg := Compare(got[0], want[0], ProblemTolerance(p, 0)); msg != "" {
		t.Errorf("results: %s", msg)
	}
	if b.cold != nil {
		t.Errorf("a bench that has only checked holds %d further argument sets", len(b.cold))
	}
	m, err := b.Measure(ctx, runtime.MeasureOptions{Warmup: 1, Reps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if m.Median <= 0 || m.Min > m.Median || m.Median > m.Max {
		t.Errorf("measured %+v", m)
	}
	if len(b.cold) != 2 || b.timing == nil {
		t.Fatalf("%d further argument sets (timing program %v), want 2", len(b.cold), b.timing != nil)
	}
	holds := func(what string, args []*ir.Tensor) {
		t.Helper()
		for c, set := range b.cold {
			for i, a := range args {
				back := make([]byte, deviceSize(p.Args[i]))
				if err := d.Download(set[i], 0, back); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, deviceBytes(a)) {
					t.Errorf("%s: copy %d of argument %d differs from the uploaded argument", what, c+1, i)
				}
			}
		}
	}
	holds("after Measure", args)
	again := Inputs(p, rand.New(rand.NewSource(4)))
	if err := b.Exec(ctx, again); err != nil {
		t.Fatal(err)
	}
	holds("after a second Exec", again)
	s, err := b.Sample(ctx)
	if err != nil || d.Info.Caps.Timestamps && s <= 0 {
		t.Errorf("one run on each set: %v, %v", s, err)
	}
}
