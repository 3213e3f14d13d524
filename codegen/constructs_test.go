package codegen

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// constructKernels build one small kernel per group of constructs; every one must pass spirv-val and
// declare exactly the listed capabilities.
var constructKernels = []struct {
	name  string
	caps  []string
	env   string // target environment beyond vulkan1.1, if any
	build func(b *Builder)
}{
	{"if_else_return", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", U32, ReadWrite)
		i := b.X(b.GlobalID())
		b.If(b.Gt(i, b.U32(100)), b.Return)
		b.IfElse(b.Eq(b.Rem(i, b.U32(2)), b.U32(0)), func() {
			b.Store(y, i, b.U32(1))
			b.If(b.Eq(i, b.U32(4)), func() {
				b.Store(y, i, b.U32(7))
				b.Return()
			})
		}, func() {
			b.IfElse(b.Eq(i, b.U32(3)), b.Return, b.Return) // both branches leave: the merge is unreachable
			b.Store(y, i, b.U32(9))                         // unreachable, still valid
		})
		b.Store(y, b.Add(i, b.U32(1)), b.Load(y, i))
	}},
	{"loops", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", I32, ReadWrite)
		n := b.Push("n", I32)
		acc := b.Var("acc", b.I32(0))
		b.For(b.I32(0), n, b.I32(1), func(i Value) {
			b.If(b.Eq(b.Rem(i, b.I32(3)), b.I32(0)), b.Continue)
			b.If(b.Gt(i, b.I32(50)), b.Break)
			b.For(b.I32(10), b.I32(0), b.I32(-1), func(j Value) { // counts nothing: 10 < 0 is false
				b.Set(acc, b.Add(b.Get(acc), j))
			})
			b.Set(acc, b.Add(b.Get(acc), i))
			b.If(b.Gt(b.Get(acc), b.I32(1000)), b.Return)
		})
		k := b.Var("k", b.I32(0))
		b.While(func() Value { return b.Lt(b.Get(k), b.I32(8)) }, func() {
			b.Set(k, b.Add(b.Get(k), b.I32(2)))
		})
		b.Loop(func() {
			b.Set(k, b.Sub(b.Get(k), b.I32(1)))
			b.If(b.Le(b.Get(k), b.I32(0)), b.Break)
		})
		b.Store(y, b.I32(0), b.Add(b.Get(acc), b.Get(k)))
	}},
	{"integers_bitwise", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", U32, WriteOnly)
		z := b.Buffer("z", I32, WriteOnly)
		u := b.X(b.GlobalID())
		s := b.Bitcast(u, I32)
		us := []Value{b.Add(u, b.U32(1)), b.Sub(u, b.U32(1)), b.Mul(u, u), b.Div(u, b.U32(3)), b.Rem(u, b.U32(3)),
			b.And(u, b.U32(0xf0)), b.Or(u, b.U32(1)), b.Xor(u, b.U32(5)), b.Not(u), b.Shl(u, b.U32(2)), b.Shr(u, b.I32(1)),
			b.Min(u, b.U32(9)), b.Max(u, b.U32(9)), b.Clamp(u, b.U32(1), b.U32(9)), b.Convert(s, U32),
			b.Select(b.Le(u, b.U32(4)), u, b.U32(4)), b.Select(b.Ge(u, b.U32(4)), u, b.U32(4))}
		for k, v := range us {
			b.Store(y, b.Add(b.Mul(u, b.U32(32)), b.U32(uint32(k))), v)
		}
		ss := []Value{b.Neg(s), b.Div(s, b.I32(-3)), b.Rem(s, b.I32(-3)), b.Shr(s, b.U32(1)), b.Abs(s),
			b.Min(s, b.I32(-1)), b.Max(s, b.I32(-1)), b.Clamp(s, b.I32(-2), b.I32(2)), b.Convert(b.Lt(s, b.I32(0)), I32)}
		for k, v := range ss {
			b.Store(z, b.Add(b.Mul(s, b.I32(16)), b.I32(int32(k))), v)
		}
	}},
	{"floats_conversions", []string{"Shader"}, "", func(b *Builder) {
		x := b.Buffer("x", F32, ReadOnly)
		y := b.Buffer("y", F32, WriteOnly)
		iy := b.Buffer("iy", I32, WriteOnly)
		uy := b.Buffer("uy", U32, WriteOnly)
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		fs := []Value{b.Rem(v, b.F32(3)), b.Neg(v), b.Div(v, b.F32(7)), b.Convert(b.Convert(v, I32), F32),
			b.Convert(b.Convert(v, U32), F32), b.Convert(b.Ne(v, b.F32(0)), F32), b.Select(b.Lt(v, b.F32(0)), b.F32(-1), b.F32(1)),
			b.Bitcast(b.Bitcast(v, U32), F32), b.Erf(v), MathMix(b, v)}
		for k, f := range fs {
			b.Store(y, b.Add(b.Mul(i, b.U32(16)), b.U32(uint32(k))), f)
		}
		b.Store(iy, i, b.Convert(b.Convert(b.Gt(v, b.F32(1)), F32), I32))
		b.Store(uy, i, b.Convert(b.Convert(b.Le(v, b.F32(0)), U32), U32))
	}},
	{"vectors", []string{"Shader"}, "", func(b *Builder) {
		x := b.Buffer("x", Vec(F32, 4), ReadOnly)
		y := b.Buffer("y", Vec(F32, 4), WriteOnly)
		c := b.Buffer("c", Vec(U32, 2), ReadWrite)
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		w := b.Fma(v, b.F32(2), b.Splat(b.F32(1), 4)) // scalar operands broadcast
		w = b.Select(b.Lt(w, b.Splat(b.F32(0), 4)), b.Neg(w), w)
		w = b.Sub(b.F32(1), b.Add(w, b.F32(0.5))) // scalars broadcast on either side: vec4 results
		w = b.Select(b.Eq(i, b.U32(0)), w, v)     // a scalar condition selects whole vectors
		s := b.Add(b.Add(b.X(w), b.Y(w)), b.Add(b.Z(w), b.Extract(w, 3)))
		b.Store(y, i, b.Vec(s, b.Dot(v, w), b.Max(b.Y(v), b.F32(0)), b.Exp(s)))
		u := b.Load(c, i)
		b.Store(c, i, b.Add(u, b.Vec(b.Y(u), b.X(u))))
	}},
	{"bools_and_bool_spec", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", U32, WriteOnly)
		flag := b.Spec("flag", Bool, 1)
		i := b.X(b.GlobalID())
		p, q := b.Lt(i, b.U32(3)), b.Gt(i, b.U32(1))
		r := b.Or(b.And(p, q), b.Xor(p, b.Not(q)))
		r = b.And(r, b.Ne(flag, b.Eq(p, q)))
		b.If(b.And(flag, b.Bool(true)), func() { // a constant expression of a spec constant
			b.Store(y, i, b.Convert(r, U32))
		})
		bv := b.Vec(p, q)
		b.Store(y, b.Add(i, b.U32(64)), b.Select(b.Extract(bv, 1), b.U32(1), b.U32(0)))
	}},
	{"spec_constants_in_expressions", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", I32, WriteOnly)
		a := b.Spec("a", I32, -3)
		c := b.Spec("c", U32, 5)
		wx := b.Spec("wx", U32, 32)
		b.WorkgroupSize(wx, b.U32(2), c)
		arr := b.Shared("arr", I32, b.Add(b.Mul(wx, b.U32(2)), b.Shl(c, b.U32(1)))) // a constant expression as length
		li := b.LocalIndex()
		b.Store(arr, li, b.Add(b.Bitcast(li, I32), b.Mul(a, b.I32(2))))
		b.Barrier()
		b.Store(y, b.X(b.GlobalID()), b.Load(arr, b.Rem(b.Add(li, b.U32(1)), b.Mul(wx, b.U32(2)))))
	}},
	{"local_arrays_and_vars", []string{"Shader"}, "", func(b *Builder) {
		y := b.Buffer("y", F32, WriteOnly)
		tmp := b.LocalArray("tmp", F32, b.U32(8))
		vv := b.VarOf("vv", Vec(F32, 2))
		b.Set(vv, b.Vec(b.F32(1), b.F32(2)))
		b.For(b.U32(0), b.U32(8), b.U32(1), func(k Value) {
			b.Store(tmp, k, b.Convert(k, F32))
		})
		sum := b.Var("sum", b.F32(0))
		b.For(b.U32(0), b.U32(8), b.U32(1), func(k Value) {
			b.Set(sum, b.Add(b.Get(sum), b.Load(tmp, k)))
		})
		b.Store(y, b.X(b.GlobalID()), b.Add(b.Get(sum), b.X(b.Get(vv))))
	}},
	{"buffers_options_len_barriers", []string{"Shader"}, "", func(b *Builder) {
		x := b.Buffer("x", F32, ReadOnly, Restrict)
		y := b.Buffer("y", F32, ReadWrite, Coherent)
		z := b.Buffer("z", F32, ReadWrite, Aliased) // may alias y
		i := b.X(b.GlobalID())
		b.If(b.Lt(i, b.Len(x)), func() {
			b.Store(y, i, b.Load(x, i))
			b.MemoryBarrier(ScopeDevice, SemStorageBuffer)
			b.Store(z, i, b.Load(y, i))
		})
		b.ControlBarrier(ScopeWorkgroup, ScopeWorkgroup, SemWorkgroup|SemStorageBuffer)
		b.MemoryBarrier(ScopeWorkgroup, SemWorkgroup)
		b.ControlBarrier(ScopeWorkgroup, ScopeWorkgroup, 0) // execution only
	}},
	{"atomics", []string{"Shader"}, "", func(b *Builder) {
		c := b.Buffer("c", U32, ReadWrite)
		s := b.Buffer("s", I32, ReadWrite)
		hist := b.Shared("hist", U32, b.U32(16))
		b.WorkgroupSize(b.U32(16), b.U32(1), b.U32(1))
		i := b.X(b.GlobalID())
		li := b.LocalIndex()
		b.Store(hist, li, b.U32(0))
		b.Barrier()
		old := b.AtomicAdd(hist, b.Rem(i, b.U32(16)), b.U32(1))
		b.AtomicMax(s, b.I32(0), b.Bitcast(old, I32))
		b.AtomicMin(s, b.I32(1), b.I32(-5))
		b.Barrier()
		b.AtomicExchange(c, li, b.Load(hist, li))
	}},
	{"all_builtins", []string{"Shader", "GroupNonUniform"}, "", func(b *Builder) {
		y := b.Buffer("y", U32, WriteOnly)
		b.WorkgroupSize(b.U32(4), b.U32(4), b.U32(2))
		vs := []Value{b.X(b.GlobalID()), b.Y(b.LocalID()), b.Z(b.WorkgroupID()), b.X(b.NumWorkgroups()),
			b.LocalIndex(), b.SubgroupSize(), b.SubgroupInvocation()}
		base := b.Mul(b.X(b.GlobalID()), b.U32(8))
		for k, v := range vs {
			b.Store(y, b.Add(base, b.U32(uint32(k))), v)
		}
	}},
	{"f16_storage_only", []string{"Shader", "StorageBuffer16BitAccess"}, "", func(b *Builder) {
		x := b.Buffer("x", F16, ReadOnly)
		y := b.Buffer("y", Vec(F16, 2), WriteOnly)
		i := b.X(b.GlobalID())
		h := b.Load(x, i)
		f := b.Mul(b.Convert(h, F32), b.F32(2))
		b.Store(y, i, b.Convert(b.Vec(f, f), Vec(F16, 2)))
	}},
	{"f16_arithmetic", []string{"Shader", "Float16", "StorageBuffer16BitAccess"}, "", func(b *Builder) {
		x := b.Buffer("x", Vec(F16, 4), ReadOnly)
		y := b.Buffer("y", F16, WriteOnly)
		t := b.Shared("t", F16, b.U32(64))
		b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		s := b.Add(b.Mul(b.X(v), b.F16(0.5)), b.Exp(b.Y(v)))
		b.Store(t, b.LocalIndex(), s)
		b.Barrier()
		b.Store(y, i, b.Add(b.Load(t, b.U32(0)), b.Erf(s)))
	}},
	{"f16_native_transcendentals", []string{"Shader", "Float16", "StorageBuffer16BitAccess"}, "", func(b *Builder) {
		b.UseNativeF16Math(true)
		x := b.Buffer("x", F16, ReadWrite)
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		b.Store(x, i, b.Add(b.Pow(b.Exp(v), b.Tanh(v)), b.Sin(b.Log(v))))
	}},
	{"f16_push_constant", []string{"Shader", "StorageBuffer16BitAccess", "StoragePushConstant16"}, "", func(b *Builder) {
		y := b.Buffer("y", F16, WriteOnly)
		p := b.Push("scale", F16)
		n := b.Push("n", U32) // offset 4: u32 aligns to 4 after a 2-byte f16
		i := b.X(b.GlobalID())
		b.If(b.Lt(i, n), func() { b.Store(y, i, p) })
	}},
	{"subgroup_arithmetic_only", []string{"Shader", "GroupNonUniform", "GroupNonUniformArithmetic"}, "", func(b *Builder) {
		x := b.Buffer("x", I32, ReadWrite)
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		b.Store(x, i, b.Add(b.SubgroupAdd(v), b.Add(b.SubgroupMin(v), b.SubgroupMax(v))))
	}},
	{"subgroup_ballot_shuffle", []string{"Shader", "GroupNonUniform", "GroupNonUniformBallot", "GroupNonUniformShuffle"}, "", func(b *Builder) {
		x := b.Buffer("x", U32, ReadWrite)
		i := b.X(b.GlobalID())
		v := b.Load(x, i)
		w := b.Add(b.SubgroupBroadcast(v, b.U32(1)), b.SubgroupBroadcastFirst(v))
		w = b.Add(w, b.SubgroupShuffle(v, b.Xor(b.SubgroupInvocation(), b.U32(2))))
		b.Store(x, i, b.Add(w, b.SubgroupShuffleXor(v, b.U32(1))))
	}},
}

func TestConstructsValidate(t *testing.T) {
	for _, c := range constructKernels {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder(c.name)
			c.build(b)
			k, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(k.Capabilities, c.caps) {
				t.Errorf("capabilities %v, want exactly %v", k.Capabilities, c.caps)
			}
			if len(k.Extensions) != 0 {
				t.Errorf("extensions %v in a SPIR-V 1.3 module, want none", k.Extensions)
			}
			spirvVal(t, k, "vulkan1.1")
			spirvVal(t, k, "vulkan1.2")
		})
	}
}

// TestDeterministic: the same builder calls give byte-identical modules (plans are compared by
// checksum).
func TestDeterministic(t *testing.T) {
	for _, c := range constructKernels {
		var prev []uint32
		for range 3 {
			b := NewBuilder(c.name)
			c.build(b)
			k, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if prev != nil && !slices.Equal(prev, k.Words) {
				t.Fatalf("%s: two builds differ", c.name)
			}
			prev = k.Words
		}
	}
}

func TestMatmulInterface(t *testing.T) {
	k, err := Matmul(8, 16, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantSpecs := []SpecConstant{{0, "tile_m", U32, 8}, {1, "tile_n", U32, 16}, {2, "tile_k", U32, 4}}
	if !reflect.DeepEqual(k.Specs, wantSpecs) {
		t.Errorf("specs %+v, want %+v", k.Specs, wantSpecs)
	}
	if want := [3]Dim{{16, 1}, {8, 0}, {1, -1}}; k.Workgroup != want {
		t.Errorf("workgroup %+v, want %+v", k.Workgroup, want)
	}
	wantB := []Binding{{0, 0, "a", ReadOnly, F32, 0}, {0, 1, "b", ReadOnly, F32, 0}, {0, 2, "c", WriteOnly, F32, 0}}
	if !reflect.DeepEqual(k.Bindings, wantB) {
		t.Errorf("bindings %+v, want %+v", k.Bindings, wantB)
	}
	wantP := []PushConstant{{"m", U32, 0}, {"n", U32, 4}, {"k", U32, 8}}
	if !reflect.DeepEqual(k.Push, wantP) || k.PushSize != 12 {
		t.Errorf("push %+v size %d, want %+v size 12", k.Push, k.PushSize, wantP)
	}
	if k.Needs != 0 {
		t.Errorf("needs %v, want none", k.Needs)
	}
	if len(k.Bytes()) != 4*len(k.Words) || k.Words[0] != 0x07230203 || k.Words[1] != 0x00010300 {
		t.Errorf("header %#x %#x, want SPIR-V magic and version 1.3", k.Words[0], k.Words[1])
	}
}

func TestPushLayout(t *testing.T) {
	b := NewBuilder("push")
	b.Push("a", F16)
	b.Push("v", Vec(F32, 3))
	b.Push("c", U32)
	b.Push("d", Vec(F16, 2))
	b.Push("e", F16)
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for _, p := range k.Push {
		offs = append(offs, p.Offset)
	}
	// std430: vec3 aligns to 16 and takes 12; the u32 packs after it.
	if want := []int{0, 16, 28, 32, 36}; !slices.Equal(offs, want) || k.PushSize != 40 {
		t.Errorf("offsets %v size %d, want %v size 40", offs, k.PushSize, want)
	}
	spirvVal(t, k, "vulkan1.1")
}

func TestDump(t *testing.T) {
	k, err := Softmax(64)
	if err != nil {
		t.Fatal(err)
	}
	d := k.Dump()
	for _, want := range []string{`kernel "softmax"`, "workgroup_size $wg 1u 1u", "spec 0 $wg: u32 = 64",
		"binding 0 x: readonly f32[]", "push cols: u32 @4", "shared partial: f32[$wg]",
		"GroupNonUniformFMax", "GroupNonUniformShuffleXor", "control_barrier", "loop {", "continuing:", "if "} {
		if !strings.Contains(d, want) {
			t.Errorf("dump lacks %q:\n%s", want, d)
		}
	}
}

func TestSpecialization(t *testing.T) {
	k, err := Matmul(16, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.SharedBytes(nil); err != nil || got != 4*(16*4+4*8) {
		t.Errorf("default shared bytes %d (%v), want %d", got, err, 4*(16*4+4*8))
	}
	spec, err := k.SpecValues(map[string]int64{"tile_m": 32, "tile_k": 16})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{32, 8, 16}; !slices.Equal(spec, want) {
		t.Errorf("spec data %v, want %v", spec, want)
	}
	if got := k.WorkgroupSizeFor(spec); got != [3]uint32{8, 32, 1} {
		t.Errorf("workgroup size %v, want [8 32 1]", got)
	}
	if got, _ := k.SharedBytes(spec); got != 4*(32*16+16*8) {
		t.Errorf("shared bytes %d, want %d", got, 4*(32*16+16*8))
	}
	if _, err := k.SpecValues(map[string]int64{"tile_q": 1}); err == nil || !strings.Contains(err.Error(), "tile_q") {
		t.Errorf("unknown name: %v", err)
	}

	// Constant expressions of every kind evaluate like Go.
	b := NewBuilder("consts")
	a, c := b.Spec("a", I32, -7), b.Spec("c", U32, 5)
	f := b.Spec("f", Bool, 0)
	exprs := []struct {
		v    Value
		want int32
	}{
		{b.Div(a, b.I32(2)), -3}, {b.Rem(a, b.I32(2)), -1}, {b.Shr(a, b.U32(1)), -4}, {b.Neg(a), 7},
		{b.Sub(c, b.U32(6)), -1}, {b.Shl(c, b.U32(2)), 20}, {b.Xor(b.And(c, b.U32(4)), b.Or(c, b.U32(8))), 9},
		{b.Select(b.Or(f, b.Lt(a, b.I32(0))), b.I32(1), b.I32(2)), 1},
		{b.Select(b.And(b.Not(f), b.Ge(c, b.U32(6))), b.I32(1), b.I32(2)), 2},
	}
	for i, e := range exprs {
		b.Shared(fmt.Sprintf("s%d", i), I32, b.Add(e.v, b.Const(e.v.Type(), 100)))
	}
	k, err = b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range exprs {
		n, err := k.eval(k.Shared[i].len, nil)
		if err != nil || int32(n) != e.want+100 {
			t.Errorf("expression %d = %d (%v), want %d", i, int32(n), err, e.want+100)
		}
	}
	spirvVal(t, k, "vulkan1.1")
}

// TestF16TranscendentalsInF32: by default Exp on f16 is computed in f32 (lavapipe crashes on the
// f16 instruction); UseNativeF16Math emits it on f16.
func TestF16TranscendentalsInF32(t *testing.T) {
	for _, native := range []bool{false, true} {
		b := NewBuilder("exp16")
		b.UseNativeF16Math(native)
		x := b.Buffer("x", F16, ReadWrite)
		i := b.X(b.GlobalID())
		b.Store(x, i, b.Exp(b.Load(x, i)))
		k, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		d := k.Dump()
		if got := strings.Contains(d, "f32 = Exp"); got == native {
			t.Errorf("native=%v: dump:\n%s", native, d)
		}
		spirvVal(t, k, "vulkan1.1")
	}
}

// TestF16RoundTripWithoutF16Buffers: an f32 kernel that rounds values through f16 (an epilogue
// storing what an unfused f16 op would have) declares the f16 type, which needs a capability:
// Float16 without any 16-bit buffer, 16-bit storage alone with one.
func TestF16RoundTripWithoutF16Buffers(t *testing.T) {
	for _, f16buf := range []bool{false, true} {
		b := NewBuilder("round16")
		x := b.Buffer("x", F32, ReadWrite)
		if f16buf {
			b.Buffer("h", F16, ReadOnly)
		}
		i := b.X(b.GlobalID())
		b.Store(x, i, b.Convert(b.Convert(b.Load(x, i), F16), F32))
		k, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		want := FeatureFloat16
		if f16buf {
			want = FeatureStorageBuffer16
		}
		if !k.Needs.Has(want) || f16buf && k.Needs.Has(FeatureFloat16) {
			t.Errorf("16-bit buffer %v: needs %v, want %v", f16buf, k.Needs, want)
		}
		spirvVal(t, k, "vulkan1.1")
	}
}
