package codegen_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/runtime"
)

// These tests run the reference kernels on a Vulkan device (lavapipe in CI) through package runtime
// and compare them with straightforward Go loops in float64.

func openDevice(t *testing.T) *runtime.Device {
	t.Helper()
	// Under the validation layer when it is installed: a kernel the layer complains about fails.
	d, err := runtime.Open(runtime.Options{CacheDir: "off", Validation: true})
	if err != nil {
		t.Logf("without the validation layer: %v", err)
		d, err = runtime.Open(runtime.Options{CacheDir: "off"})
	}
	if err != nil {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers for lavapipe): %v", err)
	}
	t.Cleanup(func() {
		for _, m := range d.TakeMessages() {
			t.Errorf("validation: %v", m)
		}
		d.Close()
	})
	return d
}

// needs skips the test when the device lacks a feature the kernel declares.
func needs(t *testing.T, d *runtime.Device, k *codegen.Kernel) {
	t.Helper()
	c := d.Info.Caps
	checks := []struct {
		f    codegen.Feature
		have bool
	}{
		{codegen.FeatureFloat16, c.ShaderFloat16},
		{codegen.FeatureStorageBuffer16, c.StorageBuffer16BitAccess},
		{codegen.FeaturePushConstant16, c.StoragePushConstant16},
		{codegen.FeatureSubgroupBasic, c.SubgroupOps.Has(runtime.SubgroupBasic)},
		{codegen.FeatureSubgroupArithmetic, c.SubgroupOps.Has(runtime.SubgroupArithmetic)},
		{codegen.FeatureSubgroupBallot, c.SubgroupOps.Has(runtime.SubgroupBallot)},
		{codegen.FeatureSubgroupShuffle, c.SubgroupOps.Has(runtime.SubgroupShuffle)},
		{codegen.FeatureVulkanMemoryModel, c.VulkanMemoryModel},
		{codegen.FeatureCooperativeMatrix, len(c.CooperativeMatrix) > 0},
		{codegen.FeatureIntegerDot, c.IntegerDotProduct},
	}
	for _, ch := range checks {
		if k.Needs.Has(ch.f) && !ch.have {
			t.Skipf("%s: kernel %s needs %v, which the device lacks", d.Info.Name, k.Name, ch.f)
		}
	}
}

// launch runs k once: bufs[i] is the initial content of binding i (its length is the binding's
// size); the result holds the final content of every binding the kernel writes (nil for the others).
func launch(t *testing.T, d *runtime.Device, k *codegen.Kernel, spec map[string]int64, push map[string]uint32, grid [3]uint32, bufs [][]byte) [][]byte {
	t.Helper()
	needs(t, d, k)
	words, err := k.SpecValues(spec)
	if err != nil {
		t.Fatal(err)
	}
	var sc []runtime.SpecConstant
	for i, w := range words {
		sc = append(sc, runtime.SpecConstant{ID: uint32(i), Value: w})
	}
	p, err := d.NewPipeline(runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize, Spec: sc})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pb := make([]byte, k.PushSize)
	for _, pc := range k.Push {
		v, ok := push[pc.Name]
		if !ok {
			t.Fatalf("no value for push constant %s", pc.Name)
		}
		binary.LittleEndian.PutUint32(pb[pc.Offset:], v)
	}
	spec2 := runtime.ProgramSpec{}
	ds := runtime.Dispatch{Pipeline: p, Push: pb, Grid: grid}
	var inputs [][]byte
	var outIdx []int
	for i, b := range k.Bindings {
		buf, err := d.NewBuffer(int64(len(bufs[i])))
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Free()
		acc := map[codegen.Access]runtime.Access{codegen.ReadOnly: runtime.Read, codegen.WriteOnly: runtime.Write, codegen.ReadWrite: runtime.ReadWrite}[b.Access]
		ds.Bindings = append(ds.Bindings, runtime.Binding{Buffer: buf, Access: acc})
		region := runtime.Region{Buffer: buf, Size: int64(len(bufs[i]))}
		if b.Access != codegen.WriteOnly {
			spec2.Inputs = append(spec2.Inputs, region)
			inputs = append(inputs, bufs[i])
		}
		if b.Access != codegen.ReadOnly {
			spec2.Outputs = append(spec2.Outputs, region)
			outIdx = append(outIdx, i)
		}
	}
	spec2.Dispatches = []runtime.Dispatch{ds}
	prog, err := d.NewProgram(spec2)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	outputs := make([][]byte, len(outIdx))
	for j, i := range outIdx {
		outputs[j] = make([]byte, len(bufs[i]))
	}
	if err := prog.Run(context.Background(), inputs, outputs); err != nil {
		t.Fatal(err)
	}
	res := make([][]byte, len(bufs))
	for j, i := range outIdx {
		res[i] = outputs[j]
	}
	return res
}

func f32Bytes(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f32s(b []byte) []float32 {
	xs := make([]float32, len(b)/4)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}

func f16Bytes(xs []float32) []byte {
	b := make([]byte, 2*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint16(b[2*i:], codegen.Float32ToHalf(x))
	}
	return b
}

func f16s(b []byte) []float32 {
	xs := make([]float32, len(b)/2)
	for i := range xs {
		xs[i] = codegen.HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return xs
}

func randoms(r *rand.Rand, n int, lo, hi float64) []float32 {
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return xs
}

func ceilDiv(a, b int) uint32 { return uint32((a + b - 1) / b) }

// compare checks got against want within abs + rel*|want|, reporting the worst element.
func compare(t *testing.T, what string, got []float32, want []float64, abs, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range want {
		err := math.Abs(float64(got[i]) - want[i])
		if tol := abs + rel*math.Abs(want[i]); err > tol || math.IsNaN(float64(got[i])) {
			if e := err / tol; e > worst || math.IsNaN(e) || at < 0 {
				worst, at = e, i
			}
		}
	}
	if at >= 0 {
		t.Errorf("%s: element %d = %g, want %g (error %.3g of the tolerance)", what, at, got[at], want[at], worst)
	}
}

func TestGPUElementwise(t *testing.T) {
	d := openDevice(t)
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1000
	x := randoms(r, n, -5, 5)

	t.Run("gelu_f16_to_f32", func(t *testing.T) {
		k, err := codegen.Elementwise("gelu", codegen.F16, codegen.F32, 64, codegen.Gelu)
		if err != nil {
			t.Fatal(err)
		}
		xh := f16s(f16Bytes(x)) // the values the kernel sees
		// Spread the workgroups over x and y: 8 x 2 groups of 64 cover 1024 >= n.
		out := launch(t, d, k, nil, map[string]uint32{"n": n}, [3]uint32{8, 2, 1}, [][]byte{f16Bytes(x), make([]byte, 4*n)})
		want := make([]float64, n)
		for i, v := range xh {
			want[i] = codegen.GeluF64(float64(v))
		}
		compare(t, "gelu", f32s(out[1]), want, 2e-6, 1e-5)
	})
	t.Run("gelu_vec4_f16_to_f32", func(t *testing.T) {
		k, err := codegen.Elementwise("gelu4", codegen.Vec(codegen.F16, 4), codegen.Vec(codegen.F32, 4), 32, codegen.Gelu)
		if err != nil {
			t.Fatal(err)
		}
		xh := f16s(f16Bytes(x))
		out := launch(t, d, k, nil, map[string]uint32{"n": n / 4}, [3]uint32{ceilDiv(n/4, 32), 1, 1}, [][]byte{f16Bytes(x), make([]byte, 4*n)})
		want := make([]float64, n)
		for i, v := range xh {
			want[i] = codegen.GeluF64(float64(v))
		}
		compare(t, "gelu vec4", f32s(out[1]), want, 2e-6, 1e-5)
	})
	t.Run("mathmix_f32_to_f16", func(t *testing.T) {
		k, err := codegen.Elementwise("mathmix", codegen.F32, codegen.F16, 128, codegen.MathMix)
		if err != nil {
			t.Fatal(err)
		}
		out := launch(t, d, k, nil, map[string]uint32{"n": n}, [3]uint32{ceilDiv(n, 128), 1, 1}, [][]byte{f32Bytes(x), make([]byte, 2*n)})
		want := make([]float64, n)
		for i, v := range x {
			want[i] = codegen.MathMixF64(float64(v))
		}
		// f16 output: half an ulp is 2^-11 relative; GLSL's sin and cos have 2^-11 absolute error.
		compare(t, "mathmix", f16s(out[1]), want, 2e-3, 2e-3)
	})
}

func TestGPUSoftmax(t *testing.T) {
	d := openDevice(t)
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 7, 300
	x := randoms(r, rows*cols, -8, 8)
	want := make([]float64, rows*cols)
	for i := 0; i < rows; i++ {
		row := x[i*cols : (i+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		for j, v := range row {
			want[i*cols+j] = math.Exp(float64(v)-m) / s
		}
	}
	for _, vmm := range []bool{false, true} {
		k, err := codegen.Softmax(128, func(b *codegen.Builder) { b.UseVulkanMemoryModel(vmm) })
		if err != nil {
			t.Fatal(err)
		}
		for _, wg := range []int64{128, 64, 32} {
			out := launch(t, d, k, map[string]int64{"wg": wg}, map[string]uint32{"rows": rows, "cols": cols}, [3]uint32{rows, 1, 1},
				[][]byte{f32Bytes(x), make([]byte, 4*rows*cols)})
			compare(t, fmt.Sprintf("softmax wg=%d vulkan memory model %v", wg, vmm), f32s(out[1]), want, 1e-7, 1e-5)
		}
	}
}

func TestGPUMatmul(t *testing.T) {
	d := openDevice(t)
	r := rand.New(rand.NewPCG(5, 6))
	const M, N, K = 37, 45, 29
	a, bm := randoms(r, M*K, -1, 1), randoms(r, K*N, -1, 1)
	want := make([]float64, M*N)
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			s := 0.0
			for k := 0; k < K; k++ {
				s += float64(a[i*K+k]) * float64(bm[k*N+j])
			}
			want[i*N+j] = s
		}
	}
	for _, vmm := range []bool{false, true} {
		k, err := codegen.Matmul(16, 16, 8, func(b *codegen.Builder) { b.UseVulkanMemoryModel(vmm) })
		if err != nil {
			t.Fatal(err)
		}
		if k.Needs.Has(codegen.FeatureVulkanMemoryModel) != vmm {
			t.Errorf("vulkan memory model %v: Needs %v", vmm, k.Needs)
		}
		for _, tiles := range [][3]int64{{16, 16, 8}, {8, 32, 4}, {32, 8, 16}, {4, 4, 29}} {
			spec := map[string]int64{"tile_m": tiles[0], "tile_n": tiles[1], "tile_k": tiles[2]}
			grid := [3]uint32{ceilDiv(N, int(tiles[1])), ceilDiv(M, int(tiles[0])), 1}
			out := launch(t, d, k, spec, map[string]uint32{"m": M, "n": N, "k": K}, grid,
				[][]byte{f32Bytes(a), f32Bytes(bm), make([]byte, 4*M*N)})
			compare(t, fmt.Sprintf("matmul vulkan memory model %v", vmm), f32s(out[2]), want, 1e-5, 1e-5)
		}
	}
}

func TestGPUStridedCopy(t *testing.T) {
	d := openDevice(t)
	const R, C = 19, 23
	x := make([]float32, R*C+5)
	for i := range x {
		x[i] = float32(i)
	}
	// Transpose: x is R x C row-major starting at element 5, y is C x R.
	push := map[string]uint32{"rows": R, "cols": C, "xoff": 5, "xrs": C, "xcs": 1, "yoff": 0, "yrs": 1, "ycs": R}
	want := make([]float64, R*C)
	for r := 0; r < R; r++ {
		for c := 0; c < C; c++ {
			want[c*R+r] = float64(x[5+r*C+c])
		}
	}
	for _, elem := range []codegen.Type{codegen.F32, codegen.F16} {
		k, err := codegen.StridedCopy(elem, 8)
		if err != nil {
			t.Fatal(err)
		}
		grid := [3]uint32{ceilDiv(C, 8), ceilDiv(R, 8), 1}
		if elem == codegen.F32 {
			out := launch(t, d, k, nil, push, grid, [][]byte{f32Bytes(x), make([]byte, 4*R*C)})
			compare(t, "transpose f32", f32s(out[1]), want, 0, 0)
		} else {
			out := launch(t, d, k, nil, push, grid, [][]byte{f16Bytes(x), make([]byte, 2*R*C)})
			compare(t, "transpose f16", f16s(out[1]), want, 0, 0)
		}
	}
}

func TestGPUSubgroupOps(t *testing.T) {
	d := openDevice(t)
	const wg, n = 64, 256
	k, err := codegen.SubgroupOps(wg)
	if err != nil {
		t.Fatal(err)
	}
	sg := int(d.Info.Caps.SubgroupSize)
	if sg == 0 || wg%sg != 0 {
		t.Skipf("subgroup size %d does not divide the workgroup size %d", sg, wg)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((i*37)%101 - 50)
	}
	out := launch(t, d, k, nil, map[string]uint32{"n": n}, [3]uint32{n / wg, 1, 1}, [][]byte{f32Bytes(x), make([]byte, 4*5*n)})
	// Invocations of a one-dimensional workgroup fill subgroups in order of their local index
	// (true of lavapipe and of the GPUs vkc targets, though Vulkan does not promise it).
	want := make([]float64, 5*n)
	for i := 0; i < n; i++ {
		base := i / sg * sg
		s, mx, mn := 0.0, math.Inf(-1), math.Inf(1)
		for j := base; j < base+sg; j++ {
			s += float64(x[j])
			mx, mn = math.Max(mx, float64(x[j])), math.Min(mn, float64(x[j]))
		}
		want[5*i], want[5*i+1], want[5*i+2], want[5*i+3], want[5*i+4] = s, mx, mn, float64(x[base]), float64(x[i^1])
	}
	compare(t, "subgroup ops", f32s(out[1]), want, 0, 0)
}

// TestGPUAliasedBindings binds two ranges of one buffer at byte offsets, as a memory plan does,
// and copies between them.
func TestGPUAliasedBindings(t *testing.T) {
	d := openDevice(t)
	k, err := codegen.StridedCopy(codegen.F32, 8)
	if err != nil {
		t.Fatal(err)
	}
	needs(t, d, k)
	const n = 1024
	align := int64(d.Info.Caps.MinStorageBufferOffset)
	half := (int64(4*n) + align - 1) / align * align
	buf, err := d.NewBuffer(2 * half)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	p, err := d.NewPipeline(runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: 2, PushConstantSize: k.PushSize})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	push := make([]byte, k.PushSize)
	for i, v := range []uint32{1, n, 0, 0, 1, 0, 0, 1} { // rows, cols, xoff, xrs, xcs, yoff, yrs, ycs
		binary.LittleEndian.PutUint32(push[4*i:], v)
	}
	prog, err := d.NewProgram(runtime.ProgramSpec{
		Dispatches: []runtime.Dispatch{{Pipeline: p, Push: push, Grid: [3]uint32{n / 8, 1, 1}, Bindings: []runtime.Binding{
			{Buffer: buf, Offset: 0, Size: 4 * n, Access: runtime.Read},
			{Buffer: buf, Offset: half, Size: 4 * n, Access: runtime.Write},
		}}},
		Inputs:  []runtime.Region{{Buffer: buf, Offset: 0, Size: 4 * n}},
		Outputs: []runtime.Region{{Buffer: buf, Offset: half, Size: 4 * n}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	x := make([]float32, n)
	want := make([]float64, n)
	for i := range x {
		x[i] = float32(i) * 0.5
		want[i] = float64(x[i])
	}
	out := [][]byte{make([]byte, 4*n)}
	if err := prog.Run(context.Background(), [][]byte{f32Bytes(x)}, out); err != nil {
		t.Fatal(err)
	}
	compare(t, "copy between aliased bindings", f32s(out[0]), want, 0, 0)
}

// TestGPUAtomics counts values into buckets with AtomicAdd on a shared array, then adds each
// workgroup's counts to a buffer with AtomicAdd.
func TestGPUAtomics(t *testing.T) {
	for _, vmm := range []bool{false, true} {
		t.Run(fmt.Sprintf("vulkan memory model %v", vmm), func(t *testing.T) { testAtomics(t, vmm) })
	}
}

func testAtomics(t *testing.T, vmm bool) {
	d := openDevice(t)
	const wg, n, buckets = 64, 1000, 16
	b := codegen.NewBuilder("histogram")
	b.UseVulkanMemoryModel(vmm)
	x := b.Buffer("x", codegen.U32, codegen.ReadOnly)
	h := b.Buffer("h", codegen.U32, codegen.ReadWrite)
	nn := b.Push("n", codegen.U32)
	local := b.Shared("local", codegen.U32, b.U32(buckets))
	b.WorkgroupSize(b.U32(wg), b.U32(1), b.U32(1))
	li, i := b.LocalIndex(), b.X(b.GlobalID())
	b.If(b.Lt(li, b.U32(buckets)), func() { b.Store(local, li, b.U32(0)) })
	b.Barrier()
	b.If(b.Lt(i, nn), func() { b.AtomicAdd(local, b.Rem(b.Load(x, i), b.U32(buckets)), b.U32(1)) })
	b.Barrier()
	b.If(b.Lt(li, b.U32(buckets)), func() { b.AtomicAdd(h, li, b.Load(local, li)) })
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	xs := make([]byte, 4*n)
	want := make([]float64, buckets)
	for j := 0; j < n; j++ {
		v := uint32(j*j + 3*j)
		binary.LittleEndian.PutUint32(xs[4*j:], v)
		want[v%buckets]++
	}
	want[0] += 1000 // the initial content of h
	h0 := make([]byte, 4*buckets)
	binary.LittleEndian.PutUint32(h0, 1000)
	out := launch(t, d, k, nil, map[string]uint32{"n": n}, [3]uint32{ceilDiv(n, wg), 1, 1}, [][]byte{xs, h0})
	got := make([]float32, buckets)
	for j := range got {
		got[j] = float32(binary.LittleEndian.Uint32(out[1][4*j:]))
	}
	compare(t, "histogram", got, want, 0, 0)
}

// TestGPUControlFlow runs loops with continue, break and early returns, a while loop and nested
// branches, and compares each invocation's result with the same program in Go.
func TestGPUControlFlow(t *testing.T) {
	d := openDevice(t)
	const n = 300
	b := codegen.NewBuilder("control_flow")
	y := b.Buffer("y", codegen.I32, codegen.WriteOnly)
	i := b.Bitcast(b.X(b.GlobalID()), codegen.I32)
	b.If(b.Ge(i, b.I32(n)), b.Return)
	acc := b.Var("acc", b.I32(0))
	b.For(b.I32(0), b.I32(1000), b.I32(1), func(j codegen.Value) {
		b.If(b.Eq(b.Rem(j, b.I32(3)), b.I32(0)), b.Continue)
		b.If(b.Gt(j, i), b.Break)
		b.IfElse(b.Eq(b.And(j, b.I32(1)), b.I32(1)),
			func() { b.Set(acc, b.Add(b.Get(acc), j)) },
			func() { b.Set(acc, b.Sub(b.Get(acc), b.Shr(j, b.I32(1)))) })
		b.If(b.Gt(b.Get(acc), b.I32(5000)), func() {
			b.Store(y, i, b.I32(-1))
			b.Return()
		})
	})
	k := b.Var("k", b.Get(acc))
	steps := b.Var("steps", b.I32(0))
	b.While(func() codegen.Value { return b.Gt(b.Get(k), b.I32(1)) }, func() {
		b.IfElse(b.Eq(b.Rem(b.Get(k), b.I32(2)), b.I32(0)),
			func() { b.Set(k, b.Div(b.Get(k), b.I32(2))) },
			func() { b.Set(k, b.Add(b.Mul(b.Get(k), b.I32(3)), b.I32(1))) })
		b.Set(steps, b.Add(b.Get(steps), b.I32(1)))
	})
	b.Store(y, i, b.Add(b.Mul(b.Get(acc), b.I32(1000)), b.Get(steps)))
	b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
	kern, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, n)
	for i := 0; i < n; i++ {
		acc, early := 0, false
		for j := 0; j < 1000; j++ {
			if j%3 == 0 {
				continue
			}
			if j > i {
				break
			}
			if j&1 == 1 {
				acc += j
			} else {
				acc -= j >> 1
			}
			if acc > 5000 {
				early = true
				break
			}
		}
		if early {
			want[i] = -1
			continue
		}
		k, steps := acc, 0
		for k > 1 {
			if k%2 == 0 {
				k /= 2
			} else {
				k = 3*k + 1
			}
			steps++
		}
		want[i] = float64(acc*1000 + steps)
	}
	out := launch(t, d, kern, nil, nil, [3]uint32{ceilDiv(n+20, 32), 1, 1}, [][]byte{make([]byte, 4*n)})
	got := make([]float32, n)
	for j := range got {
		got[j] = float32(int32(binary.LittleEndian.Uint32(out[0][4*j:])))
	}
	compare(t, "control flow", got, want, 0, 0)
}

// TestGPUFloat16Arithmetic computes in f16 (where the device has shaderFloat16).
func TestGPUFloat16Arithmetic(t *testing.T) {
	d := openDevice(t)
	const n = 256
	k, err := codegen.Elementwise("f16math", codegen.F16, codegen.F16, 64, func(b *codegen.Builder, x codegen.Value) codegen.Value {
		h := b.Convert(x, codegen.F16)
		r := b.Add(b.Mul(h, b.F16(0.5)), b.Exp(b.Neg(b.Abs(h))))
		return b.Convert(r, codegen.F32)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !k.Needs.Has(codegen.FeatureFloat16) {
		t.Fatalf("needs %v, want float16", k.Needs)
	}
	r := rand.New(rand.NewPCG(9, 10))
	x := randoms(r, n, -4, 4)
	xh := f16s(f16Bytes(x))
	out := launch(t, d, k, nil, map[string]uint32{"n": n}, [3]uint32{n / 64, 1, 1}, [][]byte{f16Bytes(x), make([]byte, 2*n)})
	want := make([]float64, n)
	for i, v := range xh {
		want[i] = float64(v)*0.5 + math.Exp(-math.Abs(float64(v)))
	}
	compare(t, "f16 arithmetic", f16s(out[1]), want, 4e-3, 4e-3)
}

// TestGPUEmulatedMatrices runs a cooperative-matrix kernel with emulated matrices (lavapipe has
// none) and compares it with Go: a product over two K-steps with A row-major from f16 and B
// column-major from vec4<u32> units, the accumulator scaled and offset, stored as f32 row-major
// and as f16 column-major, and components read through MatrixMap.
func TestGPUEmulatedMatrices(t *testing.T) {
	d := openDevice(t)
	const M, N, K = 16, 16, 32
	r := rand.New(rand.NewPCG(9, 10))
	a, bt, c := randoms(r, M*K, -1, 1), randoms(r, N*K, -1, 1), randoms(r, M*N, -1, 1)
	for i := range a { // exact in f16
		a[i] = codegen.HalfToFloat32(codegen.Float32ToHalf(a[i]))
	}
	for i := range bt {
		bt[i] = codegen.HalfToFloat32(codegen.Float32ToHalf(bt[i]))
	}
	want := make([]float64, M*N)
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			s := float64(c[i*N+j])
			for k := 0; k < K; k++ {
				s += float64(a[i*K+k]) * float64(bt[j*K+k])
			}
			want[i*N+j] = math.Max(s*0.5+1, 0.75)
		}
	}
	b := codegen.NewBuilder("emulated")
	b.EmulateMatrices(true)
	ab := b.Buffer("a", codegen.F16, codegen.ReadOnly)
	bb := b.Buffer("b", codegen.Vec(codegen.U32, 4), codegen.ReadOnly)
	cb := b.Buffer("c", codegen.F32, codegen.ReadWrite)
	ob := b.Buffer("o", codegen.F16, codegen.WriteOnly)
	b.WorkgroupSize(b.U32(16), b.U32(1), b.U32(1))
	ma := codegen.Matrix(codegen.F16, codegen.ScopeSubgroup, 16, 16, codegen.MatrixA)
	mb := codegen.Matrix(codegen.F16, codegen.ScopeSubgroup, 16, 16, codegen.MatrixB)
	acc32 := codegen.Matrix(codegen.F32, codegen.ScopeSubgroup, 16, 16, codegen.MatrixAcc)
	acc16 := codegen.Matrix(codegen.F16, codegen.ScopeSubgroup, 16, 16, codegen.MatrixAcc)
	acc := b.Var("acc", b.MatrixLoad(acc32, cb, b.U32(0), b.U32(N), codegen.RowMajor))
	b.For(b.U32(0), b.U32(K), b.U32(16), func(k0 codegen.Value) {
		x := b.MatrixLoad(ma, ab, k0, b.U32(K), codegen.RowMajor)
		y := b.MatrixLoad(mb, bb, b.Div(k0, b.U32(8)), b.U32(K/8), codegen.ColumnMajor)
		b.Set(acc, b.MatrixMulAdd(x, y, b.Get(acc), 0))
	})
	m := b.Add(b.Mul(b.Get(acc), b.F32(0.5)), b.Const(acc32, 1))
	m = b.MatrixMap(m, func(b *codegen.Builder, x codegen.Value) codegen.Value { return b.Max(x, b.F32(0.75)) })
	// Every invocation has read c before any writes it (each holds the whole matrix).
	b.ControlBarrier(codegen.ScopeWorkgroup, codegen.ScopeWorkgroup, codegen.SemStorageBuffer)
	b.MatrixStore(cb, b.U32(0), m, b.U32(N), codegen.RowMajor)
	b.MatrixStore(ob, b.U32(0), b.Convert(m, acc16), b.U32(M), codegen.ColumnMajor)
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if k.Needs.Has(codegen.FeatureCooperativeMatrix) || !k.Needs.Has(codegen.FeatureVulkanMemoryModel) {
		t.Errorf("emulated module needs %v", k.Needs)
	}
	out := launch(t, d, k, nil, nil, [3]uint32{1, 1, 1}, [][]byte{f16Bytes(a), f16Bytes(bt), f32Bytes(c), make([]byte, 2*M*N)})
	compare(t, "emulated f32 result", f32s(out[2]), want, 1e-5, 1e-5)
	o := f16s(out[3])
	got := make([]float32, M*N)
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			got[i*N+j] = o[j*M+i]
		}
	}
	compare(t, "emulated f16 column-major result", got, want, 1e-3, 1e-3)
}

// TestGPUEmulatedTensorMatrices runs the workgroup-matrix GEMM of tensor_test.go, emulated, on
// edges no tile divides: the clamped loads must read zeros past x's and W's last rows and K,
// and the clamped store must drop y's elements outside it (the buffer is one row larger, and
// that row must stay as it was).
func TestGPUEmulatedTensorMatrices(t *testing.T) {
	d := openDevice(t)
	const M, N, K, tm, tn, tk = 20, 40, 40, 16, 32, 16
	r := rand.New(rand.NewPCG(11, 12))
	x, w := randoms(r, M*K, -1, 1), randoms(r, N*K, -1, 1)
	for i := range x {
		x[i] = codegen.HalfToFloat32(codegen.Float32ToHalf(x[i]))
	}
	for i := range w {
		w[i] = codegen.HalfToFloat32(codegen.Float32ToHalf(w[i]))
	}
	want := make([]float64, (M+1)*N)
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			s := 0.0
			for k := 0; k < K; k++ {
				s += float64(x[i*K+k]) * float64(w[j*K+k])
			}
			want[i*N+j] = s
		}
	}
	y := make([]float32, (M+1)*N)
	for i := M * N; i < len(y); i++ {
		y[i], want[i] = 7, 7
	}
	b := codegen.NewBuilder("tensor_gemm_emulated")
	codegen.BuildTensorGemm(b, tm, tn, tk, true)
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if k.Needs.Has(codegen.FeatureCooperativeMatrix) || k.Needs.Has(codegen.FeatureCooperativeMatrix2) {
		t.Errorf("emulated module needs %v", k.Needs)
	}
	grid := [3]uint32{(N + tn - 1) / tn, (M + tm - 1) / tm, 1}
	out := launch(t, d, k, nil, map[string]uint32{"m": M, "n": N, "k": K}, grid, [][]byte{f16Bytes(x), f16Bytes(w), f32Bytes(y)})
	compare(t, "emulated tensor GEMM", f32s(out[2]), want, 1e-5, 1e-5)
}
