package codegen

import (
	"encoding/binary"
	"strings"
	"testing"
)

// buildTensorGemm is y[M, N] = x[M, K] · W[N, K]ᵀ on workgroup matrices of tm×tn×tk read with
// tensor addressing: a workgroup per tm×tn block (workgroup id x along N, y along M), x's
// slice loaded as A, W's as a transposed B, y's block stored clamped. M, N and K need not be
// multiples of the tiles: the clamped loads read zeros past the edges.
func buildTensorGemm(b *Builder, tm, tn, tk int, emulate bool) {
	b.EmulateMatrices(emulate)
	x := b.Buffer("x", F16, ReadOnly)
	w := b.Buffer("w", F16, ReadOnly)
	y := b.Buffer("y", F32, ReadWrite) // read-write: the test checks what the clamped store leaves
	m := b.Push("m", U32)
	n := b.Push("n", U32)
	k := b.Push("k", U32)
	b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
	ma := Matrix(F16, ScopeWorkgroup, tm, tk, MatrixA)
	mb := Matrix(F16, ScopeWorkgroup, tk, tn, MatrixB)
	acc := Matrix(F32, ScopeWorkgroup, tm, tn, MatrixAcc)
	row := b.Mul(b.Y(b.WorkgroupID()), b.U32(uint32(tm)))
	col := b.Mul(b.X(b.WorkgroupID()), b.U32(uint32(tn)))
	xt := Tensor{Mem: x, Base: b.U32(0), Rows: m, Cols: k, Stride: k, Clamp: true}
	wt := Tensor{Mem: w, Base: b.U32(0), Rows: n, Cols: k, Stride: k, Clamp: true}
	sum := b.Var("sum", b.MatrixFill(acc, b.F32(0)))
	b.For(b.U32(0), k, b.U32(uint32(tk)), func(k0 Value) {
		a := b.MatrixLoadTensor(ma, xt, row, k0, false)
		bm := b.MatrixLoadTensor(mb, wt, col, k0, true)
		b.Set(sum, b.MatrixMulAdd(a, bm, b.Get(sum), 0))
	})
	yt := Tensor{Mem: y, Base: b.U32(0), Rows: m, Cols: n, Stride: n, Clamp: true}
	b.MatrixStoreTensor(yt, row, col, b.Get(sum), false)
}

// TestTensorKernelValidate: a workgroup-matrix GEMM with tensor addressing is a SPIR-V 1.6
// module that spirv-val accepts for Vulkan 1.3, declaring the NV capabilities and extensions,
// with every global variable in the entry point's interface.
func TestTensorKernelValidate(t *testing.T) {
	b := NewBuilder("tensor_gemm")
	buildTensorGemm(b, 32, 32, 16, false)
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if !k.Needs.Has(FeatureCooperativeMatrix | FeatureCooperativeMatrix2 | FeatureVulkanMemoryModel) {
		t.Errorf("Needs %v lacks cooperative-matrix-2", k.Needs)
	}
	for _, c := range []string{"CooperativeMatrixKHR", "CooperativeMatrixTensorAddressingNV", "TensorAddressingNV", "VulkanMemoryModel"} {
		if !hasString(k.Capabilities, c) {
			t.Errorf("capabilities %v lack %s", k.Capabilities, c)
		}
	}
	for _, x := range []string{"SPV_NV_cooperative_matrix2", "SPV_NV_tensor_addressing", "SPV_KHR_cooperative_matrix"} {
		if !hasString(k.Extensions, x) {
			t.Errorf("extensions %v lack %s", k.Extensions, x)
		}
	}
	if v := binary.LittleEndian.Uint32(k.Bytes()[4:]); v != 0x00010600 {
		t.Errorf("module version %#x, want SPIR-V 1.6", v)
	}
	if d := k.Dump(); !strings.Contains(d, "matrix_load_tensor") || !strings.Contains(d, "matrix_store_tensor") {
		t.Errorf("the dump shows no tensor access:\n%s", d)
	}
	spirvVal(t, k, "vulkan1.3")

	// A subgroup-matrix module stays SPIR-V 1.3.
	b = NewBuilder("subgroup")
	matrixKernels[0].build(b)
	if k, err = b.Finish(); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(k.Bytes()[4:]); v != spirvVersion || k.Needs.Has(FeatureCooperativeMatrix2) {
		t.Errorf("subgroup matrices: version %#x, needs %v", v, k.Needs)
	}
}

// TestTensorChecks: the builder refuses what tensor addressing cannot do.
func TestTensorChecks(t *testing.T) {
	cases := []struct {
		name, want string
		build      func(b *Builder)
	}{
		{"subgroup matrix", "workgroup matrices", func(b *Builder) {
			x := b.Buffer("x", F16, ReadOnly)
			b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
			ts := Tensor{Mem: x, Base: b.U32(0), Rows: b.U32(16), Cols: b.U32(16), Stride: b.U32(16)}
			b.MatrixLoadTensor(f16A, ts, b.U32(0), b.U32(0), false)
		}},
		{"invocation-dependent slice", "differ between the invocations", func(b *Builder) {
			x := b.Buffer("x", F16, ReadOnly)
			b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
			ts := Tensor{Mem: x, Base: b.U32(0), Rows: b.U32(16), Cols: b.U32(16), Stride: b.U32(16)}
			b.MatrixLoadTensor(Matrix(F16, ScopeWorkgroup, 16, 16, MatrixA), ts, b.LocalIndex(), b.U32(0), false)
		}},
		{"shared array", "not a buffer", func(b *Builder) {
			sh := b.Shared("sh", F16, b.U32(256))
			b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
			ts := Tensor{Mem: sh, Base: b.U32(0), Rows: b.U32(16), Cols: b.U32(16), Stride: b.U32(16)}
			b.MatrixLoadTensor(Matrix(F16, ScopeWorkgroup, 16, 16, MatrixA), ts, b.U32(0), b.U32(0), false)
		}},
		{"workgroup matrix under a divergent branch", "workgroup-scope cooperative matrix operation", func(b *Builder) {
			x := b.Buffer("x", F16, ReadOnly)
			y := b.Buffer("y", F16, WriteOnly)
			b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
			ts := Tensor{Mem: x, Base: b.U32(0), Rows: b.U32(16), Cols: b.U32(16), Stride: b.U32(16)}
			ys := Tensor{Mem: y, Base: b.U32(0), Rows: b.U32(16), Cols: b.U32(16), Stride: b.U32(16)}
			m := b.MatrixLoadTensor(Matrix(F16, ScopeWorkgroup, 16, 16, MatrixAcc), ts, b.U32(0), b.U32(0), false)
			b.If(b.Lt(b.LocalIndex(), b.U32(32)), func() { b.MatrixStoreTensor(ys, b.U32(0), b.U32(0), m, false) })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("bad")
			c.build(b)
			_, err := b.Finish()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}
