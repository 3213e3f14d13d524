package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/plan"
)

// lengthPlan is a function with a run-time length seq in 1..8: y = x + n over the n rows of x
// (one invocation per workgroup, n read from the length region), and a state counter that every
// workgroup of a grid scaled with n increments in place (scale.spv: c = c·1 + 1), so the state
// shows which workgroups ran.
func lengthPlan(t *testing.T, d *Device) *plan.Plan {
	t.Helper()
	b := codegen.NewBuilder("add_n")
	nb := b.Buffer("n", codegen.U32, codegen.ReadOnly)
	xb := b.Buffer("x", codegen.F32, codegen.ReadOnly)
	yb := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	b.WorkgroupSize(b.U32(1), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	b.If(b.Lt(i, b.U32(8)), func() {
		b.Store(yb, i, b.Add(b.Load(xb, i), b.Convert(b.Load(nb, b.U32(0)), codegen.F32)))
	})
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	// The variant for lengths 1..2 adds 1000·n, so a test sees which one ran.
	b = codegen.NewBuilder("add_1000n")
	nb = b.Buffer("n", codegen.U32, codegen.ReadOnly)
	xb = b.Buffer("x", codegen.F32, codegen.ReadOnly)
	yb = b.Buffer("y", codegen.F32, codegen.WriteOnly)
	b.WorkgroupSize(b.U32(1), b.U32(1), b.U32(1))
	i = b.X(b.GlobalID())
	b.If(b.Lt(i, b.U32(2)), func() {
		b.Store(yb, i, b.Add(b.Load(xb, i), b.Mul(b.F32(1000), b.Convert(b.Load(nb, b.U32(0)), codegen.F32))))
	})
	kv, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	push := make([]byte, 8)
	binary.LittleEndian.PutUint32(push, 8)
	binary.LittleEndian.PutUint32(push[4:], math.Float32bits(1))
	return &plan.Plan{
		Model:  "length",
		Device: d.DeviceFingerprint(),
		Modules: []plan.Module{
			{Key: "add_n", SPIRV: k.Words, Entry: "main",
				Bindings: []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Read}, {Binding: 2, Access: plan.Write}}, Workgroup: [3]uint32{1, 1, 1}},
			{Key: "scale", SPIRV: wordsOf(spirv(t, "scale")), Entry: "main",
				Bindings: []plan.BindingDecl{{Binding: 0, Access: plan.ReadWrite}}, PushConstantSize: 8,
				SpecConstants: []plan.SpecConstant{{ID: 0, Value: 1}, {ID: 1, Value: math.Float32bits(1)}}, Workgroup: [3]uint32{1, 1, 1}},
			{Key: "add_1000n", SPIRV: kv.Words, Entry: "main",
				Bindings: []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Read}, {Binding: 2, Access: plan.Write}}, Workgroup: [3]uint32{1, 1, 1}},
		},
		State:     []plan.StateTensor{{Name: "counter", DType: plan.F32, Shape: []int64{8}}},
		StateSize: 32,
		Arena:     plan.Arena{Size: 16},
		Functions: []plan.Function{{
			Name:   "f",
			Length: &plan.Length{Name: "seq", Min: 1, Max: 8},
			Inputs: []plan.Value{{Name: "x", DType: plan.F32, Shape: []int64{8}, Place: plan.Staging, Bounded: true},
				{Name: "pos", DType: plan.I32, Place: plan.Staging}},
			Ranges:  []plan.Range{{Input: 1, PlusLength: true, Min: plan.NoMin, Max: 8, MaxWhy: "rows pos..pos+seq of 8"}},
			Outputs: []plan.Value{{Name: "y", DType: plan.F32, Shape: []int64{8}, Place: plan.Staging, Bounded: true}},
			Dispatches: []plan.Dispatch{
				{Module: 0, Grid: [3]uint32{8, 1, 1}, Scale: &plan.GridScale{Axis: 0, Num: 1, Den: 1},
					Bindings: []plan.Binding{
						{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionLength}, Range: 4}},
						{Binding: 1, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput}, Range: 32}},
						{Binding: 2, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionOutput}, Range: 32}},
					}},
				{Module: 1, Grid: [3]uint32{8, 1, 1}, Scale: &plan.GridScale{Axis: 0, Num: 1, Den: 1}, Push: push,
					Bindings: []plan.Binding{{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Range: 32}}}},
			},
		}},
	}
}

func wordsOf(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

func TestRunTimeLength(t *testing.T) {
	// With zero-copy memory the host writes the length block in place; without, it is copied
	// in with the inputs and the indirect reads wait for the copy.
	for _, nzc := range []bool{false, true} {
		t.Run(map[bool]string{false: "zero-copy", true: "staging"}[nzc], func(t *testing.T) {
			testRunTimeLength(t, openTest(t, Options{NoZeroCopy: nzc}))
		})
	}
}

func testRunTimeLength(t *testing.T, d *Device) {
	ctx := context.Background()
	p := lengthPlan(t, d)
	counter := func(e *Executable) []float32 {
		t.Helper()
		b, err := e.ReadState("counter")
		if err != nil {
			t.Fatal(err)
		}
		return floats(b)
	}
	run := func(e *Executable, x []float32) []float32 {
		t.Helper()
		out, err := e.Run(ctx, "f", map[string][]byte{"x": bytesOf(x), "pos": u32(0)})
		if err != nil {
			t.Fatal(err)
		}
		return floats(out["y"])
	}
	for _, o := range []LoadOptions{{}, {FullGrids: true}, {OutputsOnDevice: true}} {
		// OutputsOnDevice: the bounded y in device memory, all its rows copied back.
		full := o.FullGrids
		e, err := d.Load(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := run(e, []float32{1, 2, 3, 4, 5, 6, 7, 8}); !equalF(got, []float32{9, 10, 11, 12, 13, 14, 15, 16}) {
			t.Errorf("full=%v, n=8: y = %v", full, got)
		}
		if got := run(e, []float32{10, 20, 30}); !equalF(got, []float32{13, 23, 33}) {
			t.Errorf("full=%v, n=3: y = %v, want 3 rows x + 3", full, got)
		}
		want := []float32{2, 2, 2, 1, 1, 1, 1, 1} // the n=3 run's grid has 3 workgroups
		if full {
			want = []float32{2, 2, 2, 2, 2, 2, 2, 2}
		}
		if got := counter(e); !equalF(got, want) {
			t.Errorf("full=%v: counter %v, want %v", full, got, want)
		}
		// RunInto takes the n rows; a capacity-sized buffer for a 1-row run is an error.
		y := make([]byte, 4)
		if err := e.RunInto(ctx, "f", map[string][]byte{"x": bytesOf([]float32{5}), "pos": u32(7)}, map[string][]byte{"y": y}); err != nil {
			t.Fatal(err)
		}
		if got := floats(y); got[0] != 6 {
			t.Errorf("full=%v, n=1: y = %v, want [6]", full, got)
		}
		err = e.RunInto(ctx, "f", map[string][]byte{"x": bytesOf([]float32{5}), "pos": u32(0)}, map[string][]byte{"y": make([]byte, 32)})
		if err == nil || !strings.Contains(err.Error(), "1 rows of 4 bytes for seq=1") {
			t.Errorf("a 32-byte output for n=1: err %v", err)
		}
		for _, bad := range []struct {
			x    []byte
			want string
		}{
			{make([]byte, 36), "seq=9 is outside 1..8"},
			{make([]byte, 6), "not a whole number of seq rows of 4 bytes"},
			{nil, "not a whole number"},
		} {
			if _, err := e.Run(ctx, "f", map[string][]byte{"x": bad.x, "pos": u32(0)}); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%d input bytes: err %v, want %q", len(bad.x), err, bad.want)
			}
		}
		// The range adds the run's length: pos 6 with 3 rows ends at 9, past 8.
		_, err = e.Run(ctx, "f", map[string][]byte{"x": make([]byte, 12), "pos": u32(6)})
		if !errors.Is(err, ErrInputRange) || !strings.Contains(err.Error(), "seq is 3: pos + seq = 9 must be at most 8") {
			t.Errorf("pos 6, 3 rows: err %v, want a range error naming pos + seq", err)
		}
		if _, err := e.Run(ctx, "f", map[string][]byte{"x": make([]byte, 8), "pos": u32(6)}); err != nil {
			t.Errorf("pos 6, 2 rows: %v", err)
		}
		e.Close()
	}
}

func equalF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRunTimeLengthVariants: a run at a length a variant covers runs the variant (module
// add_1000n adds 1000·n), the others the function; outputs have the run's rows either way, and
// RunsAt names what runs.
func TestRunTimeLengthVariants(t *testing.T) {
	d := openTest(t, Options{})
	ctx := context.Background()
	p := lengthVariantPlan(t, d)
	e, err := d.Load(p, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	checkLengthVariants(t, ctx, e)
}

// lengthVariantPlan is lengthPlan with a variant of f for lengths 1..2 (module add_1000n).
func lengthVariantPlan(t *testing.T, d *Device) *plan.Plan {
	p := lengthPlan(t, d)
	f := &p.Functions[0]
	f.Variants = []plan.Function{{
		Name:   "f",
		Length: &plan.Length{Name: "seq", Min: 1, Max: 2},
		Inputs: []plan.Value{{Name: "x", DType: plan.F32, Shape: []int64{2}, Place: plan.Staging, Bounded: true},
			{Name: "pos", DType: plan.I32, Place: plan.Staging}},
		Ranges:  []plan.Range{{Input: 1, PlusLength: true, Min: plan.NoMin, Max: 8, MaxWhy: "rows pos..pos+seq of 8"}},
		Outputs: []plan.Value{{Name: "y", DType: plan.F32, Shape: []int64{2}, Place: plan.Staging, Bounded: true}},
		Dispatches: []plan.Dispatch{{Module: 2, Grid: [3]uint32{2, 1, 1}, Scale: &plan.GridScale{Axis: 0, Num: 1, Den: 1},
			Bindings: []plan.Binding{
				{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionLength}, Range: 4}},
				{Binding: 1, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput}, Range: 8}},
				{Binding: 2, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionOutput}, Range: 8}},
			}}},
	}}
	return p
}

// checkLengthVariants runs lengthVariantPlan's f at lengths that pick the variant or the function.
func checkLengthVariants(t *testing.T, ctx context.Context, e *Executable) {
	t.Helper()
	for _, c := range []struct {
		x, want []float32
		pos     uint32
	}{
		{[]float32{1}, []float32{1001}, 0},
		{[]float32{1, 2}, []float32{2001, 2002}, 0},
		{[]float32{1, 2, 3}, []float32{4, 5, 6}, 0},
		{[]float32{5, 6}, []float32{2005, 2006}, 6},
	} {
		out, err := e.Run(ctx, "f", map[string][]byte{"x": bytesOf(c.x), "pos": u32(c.pos)})
		if err != nil {
			t.Fatal(err)
		}
		if got := floats(out["y"]); !equalF(got, c.want) {
			t.Errorf("n=%d: y = %v, want %v", len(c.x), got, c.want)
		}
	}
	// The variant checks the ranges too: 2 rows at 7 end past 8.
	if _, err := e.Run(ctx, "f", map[string][]byte{"x": make([]byte, 8), "pos": u32(7)}); !errors.Is(err, ErrInputRange) {
		t.Errorf("2 rows at 7: %v, want a range error", err)
	}
	for n, want := range map[int]int{1: 2, 2: 2, 3: 8, 8: 8} {
		g, err := e.RunsAt("f", n)
		if err != nil || int(g.Length.Max) != want {
			t.Errorf("RunsAt(%d) = %+v, %v; want the function of capacity %d", n, g.Length, err, want)
		}
	}
}
