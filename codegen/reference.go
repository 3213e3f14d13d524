package codegen

import "math"

// Reference kernels: small, complete kernels built with the IR. The tests validate them with
// spirv-val; the runtime and kernels packages run them on a device and compare with plain loops.
// They double as examples of the builder API.

// Expr is an expression spliced into a kernel: it receives the builder and the input value and
// returns the result. Kernel templates take fused elementwise chains in this form.
type Expr func(b *Builder, x Value) Value

// Elementwise builds y[i] = f(x[i]) for i < n: x and y are buffers of in and out (f32 or f16
// scalars or vectors of one length), f is computed in f32 (so f16 buffers need only 16-bit storage,
// not f16 arithmetic). Bindings: 0 x (read-only), 1 y (write-only); push constant n (u32, elements);
// workgroup size wg x 1 x 1. Dispatch ceil(n/wg) workgroups, in x, or spread over x and y when that
// exceeds the device's limit: element i = gid.x + gid.y * num_workgroups.x * wg.
func Elementwise(name string, in, out Type, wg uint32, f Expr) (*Kernel, error) {
	b := NewBuilder(name)
	x := b.Buffer("x", in, ReadOnly)
	y := b.Buffer("y", out, WriteOnly)
	n := b.Push("n", U32)
	b.WorkgroupSize(b.U32(wg), b.U32(1), b.U32(1))
	gid := b.GlobalID()
	i := b.Add(b.X(gid), b.Mul(b.Y(gid), b.Mul(b.X(b.NumWorkgroups()), b.U32(wg))))
	b.If(b.Lt(i, n), func() {
		v := b.Convert(b.Load(x, i), Vec(F32, in.Len()))
		b.Store(y, i, b.Convert(f(b, v), out))
	})
	return b.Finish()
}

// Gelu is the exact GELU, x/2 * (1 + erf(x/√2)), as a fusable expression.
func Gelu(b *Builder, x Value) Value {
	half := b.Const(x.Type(), 0.5)
	e := b.Erf(b.Mul(x, b.Const(x.Type(), 1/math.Sqrt2)))
	return b.Mul(b.Mul(half, x), b.Add(b.Const(x.Type(), 1), e))
}

// GeluF64 is Gelu in float64 for comparisons.
func GeluF64(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// MathMix uses every GLSL.std.450 operation the IR offers, on positive and negative x alike:
//
//	fma(tanh(x), sqrt(|x|+1), pow(exp2(clamp(x,-4,4)/4), 1.5))
//	+ inversesqrt(x*x+1) * sin(x) - cos(x)
//	+ exp(min(x, 2)) * max(log(|x|+1), floor(x)*0.25)
func MathMix(b *Builder, x Value) Value {
	t := x.Type()
	c := func(v float64) Value { return b.Const(t, v) }
	ax := b.Abs(x)
	a := b.Fma(b.Tanh(x), b.Sqrt(b.Add(ax, c(1))), b.Pow(b.Exp2(b.Div(b.Clamp(x, c(-4), c(4)), c(4))), c(1.5)))
	s := b.Sub(b.Mul(b.InverseSqrt(b.Fma(x, x, c(1))), b.Sin(x)), b.Cos(x))
	e := b.Mul(b.Exp(b.Min(x, c(2))), b.Max(b.Log(b.Add(ax, c(1))), b.Mul(b.Floor(x), c(0.25))))
	return b.Add(b.Add(a, s), e)
}

// MathMixF64 is MathMix in float64.
func MathMixF64(x float64) float64 {
	a := math.Tanh(x)*math.Sqrt(math.Abs(x)+1) + math.Pow(math.Exp2(math.Max(-4, math.Min(4, x))/4), 1.5)
	s := 1/math.Sqrt(x*x+1)*math.Sin(x) - math.Cos(x)
	e := math.Exp(math.Min(x, 2)) * math.Max(math.Log(math.Abs(x)+1), math.Floor(x)*0.25)
	return a + s + e
}

// Softmax builds a row softmax over a rows x cols f32 matrix (row-major, contiguous rows):
// y[r][c] = exp(x[r][c] - max_r) / sum_c' exp(x[r][c'] - max_r). One workgroup per row
// (dispatch rows x 1 x 1); the workgroup size is specialization constant 0 ("wg", default wg).
// Each invocation reduces a strided slice of the row; the subgroup combines its slices (SubgroupMax
// for the maximum, a shuffle-xor butterfly for the sum); subgroups meet in shared memory.
// Bindings: 0 x (read-only), 1 y (write-only); push constants rows, cols (u32). opts are applied
// to the builder first (say, UseVulkanMemoryModel).
func Softmax(wg uint32, opts ...func(*Builder)) (*Kernel, error) {
	b := NewBuilder("softmax")
	for _, o := range opts {
		o(b)
	}
	x := b.Buffer("x", F32, ReadOnly)
	y := b.Buffer("y", F32, WriteOnly)
	b.Push("rows", U32)
	cols := b.Push("cols", U32)
	size := b.Spec("wg", U32, int64(wg))
	b.WorkgroupSize(size, b.U32(1), b.U32(1))
	partial := b.Shared("partial", F32, size) // one slot per subgroup; at most wg subgroups

	row := b.X(b.WorkgroupID())
	base := b.Mul(row, cols)
	lid := b.LocalIndex()
	sg := b.SubgroupSize()
	sgID := b.Div(lid, sg)
	nsg := b.Div(b.Add(size, b.Sub(sg, b.U32(1))), sg)
	lane0 := b.Eq(b.SubgroupInvocation(), b.U32(0))

	// combine reduces v over the workgroup: within the subgroup by sub, across subgroups by comb.
	combine := func(v Value, sub func(Value) Value, comb func(a, c Value) Value) Value {
		v = sub(v)
		b.If(lane0, func() { b.Store(partial, sgID, v) })
		b.Barrier()
		acc := b.Var("acc", b.Load(partial, b.U32(0)))
		b.For(b.U32(1), nsg, b.U32(1), func(i Value) {
			b.Set(acc, comb(b.Get(acc), b.Load(partial, i)))
		})
		r := b.Get(acc)
		b.Barrier() // partial is reused by the next reduction
		return r
	}

	m := b.Var("m", b.F32(float32(math.Inf(-1))))
	b.For(lid, cols, size, func(c Value) {
		b.Set(m, b.Max(b.Get(m), b.Load(x, b.Add(base, c))))
	})
	rowMax := combine(b.Get(m), b.SubgroupMax, b.Max)

	s := b.Var("s", b.F32(0))
	b.For(lid, cols, size, func(c Value) {
		b.Set(s, b.Add(b.Get(s), b.Exp(b.Sub(b.Load(x, b.Add(base, c)), rowMax))))
	})
	butterfly := func(v Value) Value {
		acc := b.Var("bf", v)
		off := b.Var("off", b.Div(sg, b.U32(2)))
		b.While(func() Value { return b.Gt(b.Get(off), b.U32(0)) }, func() {
			b.Set(acc, b.Add(b.Get(acc), b.SubgroupShuffleXor(b.Get(acc), b.Get(off))))
			b.Set(off, b.Div(b.Get(off), b.U32(2)))
		})
		return b.Get(acc)
	}
	rowSum := combine(b.Get(s), butterfly, b.Add)

	inv := b.Div(b.F32(1), rowSum)
	b.For(lid, cols, size, func(c Value) {
		i := b.Add(base, c)
		b.Store(y, i, b.Mul(b.Exp(b.Sub(b.Load(x, i), rowMax)), inv))
	})
	return b.Finish()
}

// Matmul builds C = A·B for row-major f32 matrices A (M x K), B (K x N), C (M x N), tiled through
// shared memory. Specialization constants: 0 "tile_m" and 1 "tile_n" (the tile of C one workgroup
// computes, and the workgroup size tile_n x tile_m: one invocation per element), 2 "tile_k" (the
// depth of the shared tiles). Dispatch ceil(N/tile_n) x ceil(M/tile_m) x 1.
// Bindings: 0 a, 1 b (read-only), 2 c (write-only); push constants m, n, k (u32). opts are
// applied to the builder first.
func Matmul(tileM, tileN, tileK uint32, opts ...func(*Builder)) (*Kernel, error) {
	b := NewBuilder("matmul")
	for _, o := range opts {
		o(b)
	}
	A := b.Buffer("a", F32, ReadOnly)
	B := b.Buffer("b", F32, ReadOnly)
	C := b.Buffer("c", F32, WriteOnly)
	M, N, K := b.Push("m", U32), b.Push("n", U32), b.Push("k", U32)
	tm, tn, tk := b.Spec("tile_m", U32, int64(tileM)), b.Spec("tile_n", U32, int64(tileN)), b.Spec("tile_k", U32, int64(tileK))
	b.WorkgroupSize(tn, tm, b.U32(1))
	as := b.Shared("a_tile", F32, b.Mul(tm, tk)) // tile_m x tile_k
	bs := b.Shared("b_tile", F32, b.Mul(tk, tn)) // tile_k x tile_n
	threads := b.Mul(tm, tn)

	lid := b.LocalID()
	lx, ly := b.X(lid), b.Y(lid)
	li := b.LocalIndex()
	wid := b.WorkgroupID()
	row0, col0 := b.Mul(b.Y(wid), tm), b.Mul(b.X(wid), tn)
	row, col := b.Add(row0, ly), b.Add(col0, lx)
	zero := b.F32(0)

	acc := b.Var("acc", zero)
	b.For(b.U32(0), K, tk, func(k0 Value) {
		// Cooperative loads, zero-filled outside the matrices.
		b.For(li, b.Mul(tm, tk), threads, func(e Value) {
			r, c := b.Div(e, tk), b.Rem(e, tk)
			gr, gc := b.Add(row0, r), b.Add(k0, c)
			v := b.Var("va", zero)
			b.If(b.And(b.Lt(gr, M), b.Lt(gc, K)), func() { b.Set(v, b.Load(A, b.Add(b.Mul(gr, K), gc))) })
			b.Store(as, e, b.Get(v))
		})
		b.For(li, b.Mul(tk, tn), threads, func(e Value) {
			r, c := b.Div(e, tn), b.Rem(e, tn)
			gr, gc := b.Add(k0, r), b.Add(col0, c)
			v := b.Var("vb", zero)
			b.If(b.And(b.Lt(gr, K), b.Lt(gc, N)), func() { b.Set(v, b.Load(B, b.Add(b.Mul(gr, N), gc))) })
			b.Store(bs, e, b.Get(v))
		})
		b.Barrier()
		b.For(b.U32(0), tk, b.U32(1), func(kk Value) {
			b.Set(acc, b.Fma(b.Load(as, b.Add(b.Mul(ly, tk), kk)), b.Load(bs, b.Add(b.Mul(kk, tn), lx)), b.Get(acc)))
		})
		b.Barrier()
	})
	b.If(b.And(b.Lt(row, M), b.Lt(col, N)), func() {
		b.Store(C, b.Add(b.Mul(row, N), col), b.Get(acc))
	})
	return b.Finish()
}

// StridedCopy builds a 2-D strided copy of elem elements, which is also a transposition:
// y[yoff + r*yrs + c*ycs] = x[xoff + r*xrs + c*xcs] for r < rows, c < cols. Offsets and strides are
// in elements (push constants, u32: rows, cols, xoff, xrs, xcs, yoff, yrs, ycs). Workgroup size
// wg x wg; dispatch ceil(cols/wg) x ceil(rows/wg). x and y are declared Aliased so that they may
// be two views of one buffer (an in-place copy between disjoint regions).
// Bindings: 0 x (read-only), 1 y (write-only).
func StridedCopy(elem Type, wg uint32) (*Kernel, error) {
	b := NewBuilder("strided_copy_" + elem.String())
	x := b.Buffer("x", elem, ReadOnly, Aliased)
	y := b.Buffer("y", elem, WriteOnly, Aliased)
	p := map[string]Value{}
	for _, name := range []string{"rows", "cols", "xoff", "xrs", "xcs", "yoff", "yrs", "ycs"} {
		p[name] = b.Push(name, U32)
	}
	b.WorkgroupSize(b.U32(wg), b.U32(wg), b.U32(1))
	gid := b.GlobalID()
	c, r := b.X(gid), b.Y(gid)
	b.If(b.Or(b.Ge(r, p["rows"]), b.Ge(c, p["cols"])), b.Return)
	src := b.Add(p["xoff"], b.Add(b.Mul(r, p["xrs"]), b.Mul(c, p["xcs"])))
	dst := b.Add(p["yoff"], b.Add(b.Mul(r, p["yrs"]), b.Mul(c, p["ycs"])))
	b.Store(y, dst, b.Load(x, src))
	return b.Finish()
}

// SubgroupOps builds a kernel that exercises every subgroup operation: for each invocation i < n
// (one workgroup of wg invocations per wg elements), with v = x[i]:
// y[5i..5i+4] = SubgroupAdd(v), SubgroupMax(v), SubgroupMin(v), SubgroupBroadcast(v, lane 0),
// SubgroupShuffleXor(v, 1). Every invocation of a dispatched workgroup takes part (n must be a
// multiple of wg). Bindings: 0 x (read-only, f32), 1 y (write-only, f32); push constant n.
func SubgroupOps(wg uint32) (*Kernel, error) {
	b := NewBuilder("subgroup_ops")
	x := b.Buffer("x", F32, ReadOnly)
	y := b.Buffer("y", F32, WriteOnly)
	b.Push("n", U32)
	b.WorkgroupSize(b.U32(wg), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	v := b.Load(x, i)
	out := []Value{b.SubgroupAdd(v), b.SubgroupMax(v), b.SubgroupMin(v), b.SubgroupBroadcast(v, b.U32(0)), b.SubgroupShuffleXor(v, b.U32(1))}
	for k, o := range out {
		b.Store(y, b.Add(b.Mul(i, b.U32(5)), b.U32(uint32(k))), o)
	}
	return b.Finish()
}
