package codegen_test

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
)

// A kernel with a fused epilogue: y[i] = gelu(2*x[i]) over f16 input and f32 output.
func Example() {
	epilogue := codegen.Expr(codegen.Gelu)

	b := codegen.NewBuilder("scale_gelu")
	x := b.Buffer("x", codegen.F16, codegen.ReadOnly)
	y := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	n := b.Push("n", codegen.U32)
	wg := b.Spec("wg", codegen.U32, 64)
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	b.If(b.Lt(i, n), func() {
		v := b.Convert(b.Load(x, i), codegen.F32)
		b.Store(y, i, epilogue(b, b.Mul(v, b.F32(2))))
	})
	k, err := b.Finish()
	if err != nil {
		panic(err)
	}
	fmt.Println(k.Bindings[0].Name, k.Bindings[0].Access, k.Bindings[0].Elem)
	fmt.Println(k.Push, k.PushSize)
	fmt.Println(k.Specs, k.Workgroup)
	fmt.Println(k.Needs, k.Capabilities)
	// Output:
	// x readonly f16
	// [{n u32 0}] 4
	// [{0 wg u32 64}] [{64 0} {1 -1} {1 -1}]
	// storage-buffer-16 [Shader StorageBuffer16BitAccess]
}

// Type errors come back from Finish, naming the kernel, the call and the construct.
func ExampleBuilder_Finish() {
	b := codegen.NewBuilder("bad")
	x := b.Buffer("x", codegen.F16, codegen.ReadOnly)
	y := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	i := b.X(b.GlobalID())
	b.Store(y, i, b.Add(b.Load(x, i), b.F32(1)))
	_, err := b.Finish()
	fmt.Println(err)
	// Output:
	// codegen: kernel "bad": example_test.go:45: Add: operand types differ: f16 and f32
}
