package lower_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// newModel assembles a model from built functions; every parameter and state the functions use
// is declared from the nodes.
func newModel(name string, weights map[string]*ir.Tensor, fns ...*ir.Function) *ir.Model {
	m := &ir.Model{Name: name, Weights: weights, Functions: fns}
	seen := map[string]bool{}
	for _, f := range fns {
		for _, n := range f.Nodes {
			key := n.Op.String() + ":" + n.Name
			if seen[key] {
				continue
			}
			switch n.Op {
			case ir.Param:
				m.Params = append(m.Params, &ir.Decl{Name: n.Name, Type: n.Type()})
			case ir.State:
				m.State = append(m.State, &ir.Decl{Name: n.Name, Type: n.Type()})
			default:
				continue
			}
			seen[key] = true
		}
	}
	return m
}

func options(d *runtime.Device) lower.Options {
	return lower.Options{Caps: kerneltest.CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test"}
}

// compile lowers m, checks that encoding is deterministic and round-trips, and loads the plan.
func compile(t *testing.T, m *ir.Model) (*plan.Plan, *lower.Report, *runtime.Executable) {
	t.Helper()
	d := kerneltest.Device(t)
	p, rep, err := lower.Lower(m, m.Functions, options(d))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := plan.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("decode the encoded plan: %v", err)
	}
	exe, err := d.Load(q, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close() })
	return p, rep, exe
}

func random(rng *rand.Rand, t ir.Type) *ir.Tensor { return kerneltest.Random(rng, t) }

func scalarI32(v int) *ir.Tensor { return ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(v)}) }

// hostTensor reads an output's bytes (bool as u32) back into a tensor of type t.
func hostTensor(t ir.Type, b []byte) *ir.Tensor {
	if t.DType != ir.Bool {
		return &ir.Tensor{Type: t, Data: b}
	}
	x := ir.NewTensor(t)
	for i := range x.Data {
		if binary.LittleEndian.Uint32(b[4*i:]) != 0 {
			x.Data[i] = 1
		}
	}
	return x
}

// runPair runs fn on the executable and in the interpreter session on the same inputs and
// returns both results by output name (the executable's decoded as host tensors).
func runPair(t *testing.T, exe *runtime.Executable, s *interp.Session, f *ir.Function, in map[string]*ir.Tensor) (got, want map[string]*ir.Tensor) {
	t.Helper()
	raw := map[string][]byte{}
	for k, v := range in {
		raw[k] = v.Data
	}
	res, err := exe.Run(context.Background(), f.Name, raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err = s.Run(f.Name, in)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]*ir.Tensor{}
	for _, o := range f.Outputs {
		got[o.Name] = hostTensor(o.Value.Type(), res[o.Name])
	}
	return got, want
}

// runBoth runs fn on the executable and in the interpreter session and compares every output.
func runBoth(t *testing.T, exe *runtime.Executable, s *interp.Session, f *ir.Function, in map[string]*ir.Tensor) {
	t.Helper()
	got, want := runPair(t, exe, s, f, in)
	for _, o := range f.Outputs {
		typ := o.Value.Type()
		if msg := kerneltest.Compare(got[o.Name], want[o.Name], kerneltest.Tolerance(typ.DType)); msg != "" {
			t.Errorf("%s: output %s: %s", f.Name, o.Name, msg)
		}
	}
}

// An elementwise DAG with two outputs becomes one dispatch and needs no barrier.
func TestElementwiseChainOneKernel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 4, 37))
	bias := b.Param("bias", ir.T(ir.F32, 37))
	y := b.MustOp(ir.Add, nil, b.MustOp(ir.Mul, nil, b.MustOp(ir.Silu, nil, x), x), bias)
	z := b.MustOp(ir.Exp, nil, b.MustOp(ir.Mul, nil, y, b.Scalar(ir.F32, 0.5)))
	b.Output("y", y)
	b.Output("z", z)
	m := newModel("chain", map[string]*ir.Tensor{"bias": random(rng, ir.T(ir.F32, 37))}, b.Function())
	p, rep, exe := compile(t, m)
	if fr := rep.Functions[0]; fr.Dispatches != 1 || fr.Barriers != 0 {
		t.Errorf("%d dispatches and %d barriers, want 1 and 0 (one fused kernel)", fr.Dispatches, fr.Barriers)
	}
	if d := p.Functions[0].Dispatches[0]; d.Bindings[len(d.Bindings)-1].Buffer.Region.Kind != plan.RegionOutput {
		t.Errorf("the fused kernel does not write its output slot directly: %+v", d.Bindings)
	}
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 4, 37))})
}

// A cache_write whose state input is the state source is done in place on the state region; the
// cache persists across runs and matches the interpreter's session.
func TestCacheWriteInPlace(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	ct := ir.T(ir.F32, 8, 2, 4)
	b := ir.NewBuilder("step")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 2, 4))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	c := b.State("cache", ct)
	c2 := b.MustOp(ir.CacheWrite, nil, c, x, pos)
	if err := b.Update("cache", c2); err != nil {
		t.Fatal(err)
	}
	b.Output("y", b.MustOp(ir.Mul, nil, c2, b.Scalar(ir.F32, 2)))
	m := newModel("cache", nil, b.Function())
	p, rep, exe := compile(t, m)
	fr := rep.Functions[0]
	if fr.InPlace != 1 || fr.StateCopies != 0 {
		t.Errorf("in place %d, state copies %d; want 1 and 0", fr.InPlace, fr.StateCopies)
	}
	if fr.Dispatches != 2 || fr.Barriers != 1 {
		t.Errorf("%d dispatches, %d barriers; want 2 and 1", fr.Dispatches, fr.Barriers)
	}
	w := p.Functions[0].Dispatches[0]
	if w.Ops[0] != "cache_write" || w.Bindings[len(w.Bindings)-1].Buffer.Region.Kind != plan.RegionState {
		t.Errorf("cache_write does not write the state region: %v %+v", w.Ops, w.Bindings)
	}
	s := interp.NewSession(m)
	for _, at := range []int{0, 3, 6} {
		runBoth(t, exe, s, m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 2, 4)), "pos": scalarI32(at)})
	}
	got, err := exe.ReadState("cache")
	if err != nil {
		t.Fatal(err)
	}
	if msg := kerneltest.Compare(&ir.Tensor{Type: ct, Data: got}, s.State("cache"), 0); msg != "" {
		t.Errorf("cache after three runs: %s", msg)
	}
	if err := exe.ResetState(); err != nil {
		t.Fatal(err)
	}
	got, _ = exe.ReadState("cache")
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Errorf("ResetState left non-zero bytes")
	}
}

// When a kernel that runs after the in-place write still reads the old state, the old state is
// copied first.
func TestCacheWriteOldStateStillRead(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	ct := ir.T(ir.F32, 4, 3)
	b := ir.NewBuilder("step")
	x, _ := b.Input("x", ir.T(ir.F32, 1, 3))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	c := b.State("cache", ct)
	c2 := b.MustOp(ir.CacheWrite, nil, c, x, pos)
	b.Update("cache", c2)
	// old + new, computed after the write in graph order
	b.Output("y", b.MustOp(ir.Add, nil, c2, c))
	m := newModel("cache", nil, b.Function())
	_, rep, exe := compile(t, m)
	if fr := rep.Functions[0]; fr.InPlace != 1 || fr.StateCopies != 1 {
		t.Errorf("in place %d, state copies %d; want 1 and 1", fr.InPlace, fr.StateCopies)
	}
	s := interp.NewSession(m)
	for _, at := range []int{0, 1, 2} {
		runBoth(t, exe, s, m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 1, 3)), "pos": scalarI32(at)})
	}
}

// Constant subgraphs over parameters are folded into compile-time weights; reshape is a view.
func TestFoldAndViews(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 3, 4))
	w := b.Param("w", ir.T(ir.F32, 12))
	w2 := b.MustOp(ir.Reshape, ir.Attrs{"shape": []int{3, 4}}, b.MustOp(ir.Mul, nil, w, b.Scalar(ir.F32, 3)))
	y := b.MustOp(ir.Add, nil, x, w2)
	b.Output("y", b.MustOp(ir.Reshape, ir.Attrs{"shape": []int{6, 4}}, y))
	m := newModel("fold", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 12))}, b.Function())
	p, rep, exe := compile(t, m)
	if rep.Folded != 1 {
		t.Errorf("folded %d subgraphs, want 1", rep.Folded)
	}
	if rep.Functions[0].Dispatches != 1 {
		t.Errorf("%d dispatches, want 1 (reshapes are views, w·3 is folded)", rep.Functions[0].Dispatches)
	}
	for _, wt := range p.Weights.Tensors {
		if wt.Name == "w" {
			t.Errorf("the unfolded parameter w is in the plan although nothing reads it")
		}
	}
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 3, 4))})
}

// Bad inputs to Run are rejected before anything is submitted, naming the input.
func TestRunBadInputs(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 4))
	b.Output("y", b.MustOp(ir.Neg, nil, x))
	m := newModel("neg", nil, b.Function())
	_, _, exe := compile(t, m)
	ctx := context.Background()
	for _, c := range []struct {
		in   map[string][]byte
		want string
	}{
		{map[string][]byte{"x": make([]byte, 16), "z": nil}, `unknown input "z"`},
		{map[string][]byte{"x": make([]byte, 12)}, `input "x" has 12 bytes, want 16`},
		{map[string][]byte{}, `missing input "x"`},
	} {
		_, err := exe.Run(ctx, "f", c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%v): %v, want an error containing %q", c.in, err, c.want)
		}
	}
	if _, err := exe.Run(ctx, "g", nil); !errors.Is(err, runtime.ErrUnknownFunction) {
		t.Errorf("Run of an unknown function: %v", err)
	}
	out, err := exe.Run(ctx, "f", map[string][]byte{"x": ir.TensorFromFloat64s(ir.T(ir.F32, 4), []float64{1, -2, 3, 0}).Data})
	if err != nil {
		t.Fatal(err)
	}
	if y := (&ir.Tensor{Type: ir.T(ir.F32, 4), Data: out["y"]}).Float64s(); y[0] != -1 || y[1] != 2 {
		t.Errorf("neg gave %v", y)
	}
}

// A plan for another device is refused with both devices named, unless AllowForeign.
func TestLoadForeignDevice(t *testing.T) {
	d := kerneltest.Device(t)
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 4))
	b.Output("y", b.MustOp(ir.Neg, nil, x))
	m := newModel("neg", nil, b.Function())
	opts := options(d)
	opts.Device = plan.Fingerprint{VendorID: 0x10de, DeviceID: 0x2335, DeviceName: "NVIDIA H200"}
	p, _, err := lower.Lower(m, m.Functions, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Load(p, runtime.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "NVIDIA H200") || !strings.Contains(err.Error(), d.Info.Name) {
		t.Fatalf("Load of a foreign plan: %v", err)
	}
	exe, err := d.Load(p, runtime.LoadOptions{AllowForeign: true})
	if err != nil {
		t.Fatal(err)
	}
	exe.Close()
}

// Lowering twice gives byte-identical plans.
func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 8))
	w := b.Param("w", ir.T(ir.F32, 8))
	h := b.MustOp(ir.Mul, nil, b.MustOp(ir.Tanh, nil, x), w)
	b.Output("a", b.MustOp(ir.Add, nil, h, x))
	b.Output("b", b.MustOp(ir.Sub, nil, h, w))
	m := newModel("det", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 8))}, b.Function())
	var enc [2][]byte
	for i := range enc {
		p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		enc[i] = buf.Bytes()
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Errorf("two lowerings differ (%d and %d bytes)", len(enc[0]), len(enc[1]))
	}
}

// Independent kernels share a barrier interval; a dependent one waits. The runtime, which puts a
// barrier only where its own hazard analysis finds one, records exactly the plan's barriers.
func TestBarrierPlacement(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 8))
	w := b.Param("w", ir.T(ir.F32, 8, 8))
	a := b.MustOp(ir.Linear, nil, x, w)                         // level 0
	c := b.MustOp(ir.Exp, nil, x)                               // level 0, independent of a
	e := b.MustOp(ir.Linear, nil, b.MustOp(ir.Tanh, nil, x), w) // tanh level 0, linear level 1
	b.Output("a", a)
	b.Output("c", c)
	b.Output("e", b.MustOp(ir.Add, nil, e, a)) // an epilogue of the second linear
	m := newModel("barriers", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 8, 8))}, b.Function())
	p, rep, exe := compile(t, m)
	fr := rep.Functions[0]
	ds := p.Functions[0].Dispatches
	var marks []bool
	for _, d := range ds {
		marks = append(marks, d.BarrierBefore)
	}
	if fr.Dispatches != 4 || fr.Barriers != 1 || !ds[3].BarrierBefore {
		t.Errorf("%d dispatches, %d barriers (%v), want 4 and one before the last (linear a, exp, tanh | linear+add)", fr.Dispatches, fr.Barriers, marks)
	}
	st, err := exe.Stats("f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Barriers != fr.Barriers || st.Dispatches != fr.Dispatches {
		t.Errorf("runtime recorded %+v, the plan has %d dispatches and %d barriers", st, fr.Dispatches, fr.Barriers)
	}
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 8))})
}

// The fused ops that rules introduce lower to their templates and match the interpreter over
// several steps of a KV cache: add_rmsnorm with both outputs used, rmsnorm_linear, rope_norm and
// rope_cache_write in place.
func TestFusedOps(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const d, hd, heads, ctx = 16, 4, 2, 6
	b := ir.NewBuilder("step")
	x, _ := b.Input("x", ir.T(ir.F32, 1, d))
	r, _ := b.Input("r", ir.T(ir.F32, 1, d))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	g := b.Param("g", ir.T(ir.F32, d))
	wk := b.Param("wk", ir.T(ir.F32, heads*hd, d))
	wq := b.Param("wq", ir.T(ir.F32, heads*hd, d))
	qn := b.Param("qn", ir.T(ir.F32, hd))
	kc := b.State("kc", ir.T(ir.F32, ctx, heads, hd))
	sn := b.MustOp(ir.AddRMSNorm, nil, x, r, g)
	s, h := ir.Value{Node: sn.Node, Out: 0}, ir.Value{Node: sn.Node, Out: 1}
	k := b.MustOp(ir.Reshape, ir.Attrs{"shape": []int{1, heads, hd}}, b.MustOp(ir.Linear, nil, h, wk))
	kc2 := b.MustOp(ir.RopeCacheWrite, nil, kc, k, pos)
	b.Update("kc", kc2)
	q := b.MustOp(ir.Reshape, ir.Attrs{"shape": []int{1, heads, hd}}, b.MustOp(ir.RMSNormLinear, nil, s, g, wq))
	b.Output("s", s)
	b.Output("q", b.MustOp(ir.RopeNorm, nil, q, qn, pos))
	weights := map[string]*ir.Tensor{}
	for _, n := range b.Function().Nodes {
		if n.Op == ir.Param {
			weights[n.Name] = random(rng, n.Type())
		}
	}
	m := newModel("fused", weights, b.Function())
	_, rep, exe := compile(t, m)
	if fr := rep.Functions[0]; fr.InPlace != 1 {
		t.Errorf("%d in-place updates, want 1 (rope_cache_write)", fr.InPlace)
	}
	sess := interp.NewSession(m)
	for at := 0; at < 3; at++ {
		runBoth(t, exe, sess, m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 1, d)), "r": random(rng, ir.T(ir.F32, 1, d)), "pos": scalarI32(at)})
	}
	got, err := exe.ReadState("kc")
	if err != nil {
		t.Fatal(err)
	}
	if msg := kerneltest.Compare(&ir.Tensor{Type: kc.Type(), Data: got}, sess.State("kc"), 1e-4); msg != "" {
		t.Errorf("kc: %s", msg)
	}
}

// Profile and Measure time a function through its recorded program.
func TestProfileAndMeasure(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 16, 16))
	w := b.Param("w", ir.T(ir.F32, 16, 16))
	b.Output("y", b.MustOp(ir.Softmax, nil, b.MustOp(ir.Linear, nil, x, w)))
	m := newModel("prof", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 16, 16))}, b.Function())
	_, rep, exe := compile(t, m)
	in := map[string][]byte{"x": random(rng, ir.T(ir.F32, 16, 16)).Data}
	if !exe.Device().Info.Caps.Timestamps {
		t.Skip("missing capability: the device has no timestamp queries")
	}
	times, st, err := exe.Profile(context.Background(), "f", in)
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != rep.Functions[0].Dispatches || st.Dispatches != len(times) {
		t.Errorf("%d dispatch times, stats %+v, plan %d dispatches", len(times), st, rep.Functions[0].Dispatches)
	}
	meas, err := exe.Measure(context.Background(), "f", in, runtime.MeasureOptions{Reps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if meas.Median <= 0 {
		t.Errorf("median %v", meas.Median)
	}
}

// A contiguous slice at an aligned offset is a view; an unaligned or strided one is a kernel.
// Both match the interpreter.
func TestSliceViewsAndCopies(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 6, 8))
	v := b.MustOp(ir.Slice, ir.Attrs{"axis": 0, "start": 2, "end": 5}, x) // 64-byte offset: a view
	u := b.MustOp(ir.Slice, ir.Attrs{"axis": 1, "start": 1, "end": 7}, x) // strided: a kernel
	b.Output("v", b.MustOp(ir.Neg, nil, v))
	b.Output("u", b.MustOp(ir.Neg, nil, u))
	m := newModel("slices", nil, b.Function())
	p, rep, exe := compile(t, m)
	var slices int
	for _, d := range p.Functions[0].Dispatches {
		for _, op := range d.Ops {
			if op == "slice" {
				slices++
			}
		}
	}
	if slices != 1 || rep.Functions[0].Dispatches != 3 {
		t.Errorf("%d slice kernels of %d dispatches, want 1 of 3", slices, rep.Functions[0].Dispatches)
	}
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 6, 8))})
}

// With external weights the plan holds no weight bytes, references the safetensors file by its
// checksum, and loads the tensors from it (found by name or, under a model's name map, by
// content).
func TestExternalWeights(t *testing.T) {
	rng := rand.New(rand.NewSource(10))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 8))
	w := b.Param("w", ir.T(ir.F32, 4, 8))
	bias := b.Param("bias", ir.T(ir.F32, 4))
	b.Output("y", b.MustOp(ir.Linear, nil, x, w, bias))
	weights := map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 4, 8)), "bias": random(rng, ir.T(ir.F32, 4))}
	m := newModel("ext", weights, b.Function())
	dir := t.TempDir()
	file := dir + "/weights.safetensors"
	// "bias" is stored under another name, as a model's weight name map would have it.
	if err := safetensors.Write(file, map[string]*ir.Tensor{"w": weights["w"], "model.bias": weights["bias"], "unused": random(rng, ir.T(ir.F32, 3))}); err != nil {
		t.Fatal(err)
	}
	d := kerneltest.Device(t)
	opts := options(d)
	opts.ExternalWeights = "weights.safetensors"
	old, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	p, _, err := lower.Lower(m, m.Functions, opts)
	os.Chdir(old)
	if err != nil {
		t.Fatal(err)
	}
	if p.Weights.Source == nil || p.Weights.Data != nil {
		t.Fatalf("weights are not external: source %v, %d inline bytes", p.Weights.Source, len(p.Weights.Data))
	}
	planPath := dir + "/m.plan"
	if err := p.WriteFile(planPath); err != nil {
		t.Fatal(err)
	}
	q, err := plan.ReadFile(planPath)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := d.Load(q, runtime.LoadOptions{PlanPath: planPath})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 8))})

	// A constant that must live in memory cannot be external.
	b2 := ir.NewBuilder("g")
	x2, _ := b2.Input("x", ir.T(ir.F32, 2, 3))
	c := b2.Const(ir.TensorFromFloat64s(ir.T(ir.F32, 3, 3), []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}))
	b2.Output("y", b2.MustOp(ir.Matmul, nil, x2, c))
	m2 := newModel("ext2", nil, b2.Function())
	opts.ExternalWeights = file
	if _, _, err := lower.Lower(m2, m2.Functions, opts); err == nil || !strings.Contains(err.Error(), "inline weights") {
		t.Errorf("a constant with external weights: %v, want an error asking for inline weights", err)
	}
}

// A missing template is an error that names the op and the node.
func TestNoTemplateNamesOp(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.BF16, 4))
	b.Output("y", b.MustOp(ir.Neg, nil, x))
	m := newModel("bf16", nil, b.Function())
	_, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe})
	var nt *lower.NoTemplateError
	if !errors.As(err, &nt) || !errors.Is(err, lower.ErrNoTemplate) || nt.Op != "elementwise" || !strings.Contains(err.Error(), "neg") {
		t.Errorf("got %v, want a NoTemplateError naming the elementwise op and the neg node", err)
	}
}

// A run through RunInto allocates nothing: inputs and outputs are copied through buffers made at
// load, and the command buffer was recorded once.
func TestRunIntoAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 4, 8))
	w := b.Param("w", ir.T(ir.F32, 8, 8))
	b.Output("y", b.MustOp(ir.Relu, nil, b.MustOp(ir.Linear, nil, x, w)))
	m := newModel("allocs", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 8, 8))}, b.Function())
	_, _, exe := compile(t, m)
	in := map[string][]byte{"x": random(rng, ir.T(ir.F32, 4, 8)).Data}
	out := map[string][]byte{"y": make([]byte, 4*4*8)}
	ctx := context.Background()
	n := testing.AllocsPerRun(20, func() {
		if err := exe.RunInto(ctx, "f", in, out); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Errorf("RunInto allocates %.1f times per run, want 0", n)
	}
}

// Two cache writes in a row: the first works on a copy of the state (the state itself is only
// updated with the second's result), the second overwrites the first's private result in place,
// and the update is copied into the state at the end.
func TestChainedCacheWrites(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	ct := ir.T(ir.F32, 6, 4)
	b := ir.NewBuilder("step")
	x, _ := b.Input("x", ir.T(ir.F32, 1, 4))
	y, _ := b.Input("y", ir.T(ir.F32, 1, 4))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	c := b.State("cache", ct)
	c1 := b.MustOp(ir.CacheWrite, nil, c, x, pos)
	c2 := b.MustOp(ir.CacheWrite, nil, c1, y, b.MustOp(ir.Add, nil, pos, b.Scalar(ir.I32, 1)))
	b.Update("cache", c2)
	b.Output("z", b.MustOp(ir.Neg, nil, c2))
	m := newModel("chain", nil, b.Function())
	_, rep, exe := compile(t, m)
	if fr := rep.Functions[0]; fr.StateCopies != 1 {
		t.Errorf("%d state copies, want 1 (the update)", fr.StateCopies)
	}
	s := interp.NewSession(m)
	for _, at := range []int{0, 2, 4} {
		runBoth(t, exe, s, m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 1, 4)), "y": random(rng, ir.T(ir.F32, 1, 4)), "pos": scalarI32(at)})
	}
	got, _ := exe.ReadState("cache")
	if msg := kerneltest.Compare(&ir.Tensor{Type: ct, Data: got}, s.State("cache"), 0); msg != "" {
		t.Errorf("cache: %s", msg)
	}
}

// A function that returns the old state and updates it in place copies the old state out first;
// one that reads the state through a view does not write it in place.
func TestOldStateAsOutputAndViewed(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	ct := ir.T(ir.F32, 4, 2, 3)
	for _, viewed := range []bool{false, true} {
		b := ir.NewBuilder("step")
		x, _ := b.Input("x", ir.T(ir.F32, 1, 2, 3))
		pos, _ := b.Input("pos", ir.T(ir.I32))
		c := b.State("cache", ct)
		c2 := b.MustOp(ir.CacheWrite, nil, c, x, pos)
		b.Update("cache", c2)
		if viewed {
			b.Output("old", b.MustOp(ir.Neg, nil, b.MustOp(ir.Reshape, ir.Attrs{"shape": []int{4, 6}}, c)))
		} else {
			b.Output("old", c)
		}
		b.Output("new", b.MustOp(ir.Neg, nil, c2))
		m := newModel("old", nil, b.Function())
		_, _, exe := compile(t, m)
		s := interp.NewSession(m)
		for _, at := range []int{0, 1, 3} {
			runBoth(t, exe, s, m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 1, 2, 3)), "pos": scalarI32(at)})
		}
	}
}

// A FoldCache shared between lowerings of one model serves the second lowering's folded values
// (two functions folding the same w·3 share one evaluation even within one Lower), the plans are
// byte-identical to lowering without it, and a different folded expression is not served.
func TestFoldCacheShared(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	fn := func(name string, k float64) *ir.Function {
		b := ir.NewBuilder(name)
		x, _ := b.Input("x", ir.T(ir.F32, 3, 4))
		w := b.Param("w", ir.T(ir.F32, 4))
		b.Output("y", b.MustOp(ir.Add, nil, x, b.MustOp(ir.Mul, nil, w, b.Scalar(ir.F32, k))))
		return b.Function()
	}
	m := newModel("foldc", map[string]*ir.Tensor{"w": random(rng, ir.T(ir.F32, 4))}, fn("f", 3), fn("g", 3), fn("h", 5))
	encode := func(opts lower.Options) []byte {
		p, _, err := lower.Lower(m, m.Functions, opts)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	plain := encode(lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	c := lower.NewFoldCache()
	first := encode(lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t", Folds: c})
	if c.Hits() != 1 {
		t.Errorf("first lowering: %d cache hits, want 1 (g reuses f's w·3; h's w·5 differs)", c.Hits())
	}
	second := encode(lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t", Folds: c})
	if c.Hits() != 4 {
		t.Errorf("after the second lowering: %d cache hits, want 4", c.Hits())
	}
	if !bytes.Equal(plain, first) || !bytes.Equal(plain, second) {
		t.Errorf("plans differ with the fold cache (%d, %d, %d bytes)", len(plain), len(first), len(second))
	}
}
