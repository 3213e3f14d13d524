package codegen

import (
	"strings"
	"testing"
)

// TestIntDotValidates: a module with SDot, SDotAccSat and UnpackHalf2x16 passes spirv-val as
// SPIR-V 1.3 for Vulkan 1.1 and 1.2, declaring SPV_KHR_integer_dot_product; type errors are
// reported by Finish.
func TestIntDotValidates(t *testing.T) {
	b := NewBuilder("sdot_val")
	x := b.Buffer("x", U32, ReadOnly)
	z := b.Buffer("z", I32, WriteOnly)
	h := b.Buffer("h", Vec(F32, 2), WriteOnly)
	b.WorkgroupSize(b.U32(8), b.U32(1), b.U32(1))
	i := b.X(b.GlobalID())
	v := b.Load(x, i)
	b.Store(z, i, b.SDotAccSat(v, v, b.SDot(v, b.U32(0x01010101))))
	b.Store(h, i, b.UnpackHalf2x16(v))
	k, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(k.Bytes()), "SPV_KHR_integer_dot_product") {
		t.Error("the module does not declare SPV_KHR_integer_dot_product")
	}
	spirvVal(t, k, "vulkan1.1")
	spirvVal(t, k, "vulkan1.2")

	b = NewBuilder("sdot_bad")
	f := b.Buffer("f", F32, ReadOnly)
	b.WorkgroupSize(b.U32(8), b.U32(1), b.U32(1))
	b.SDot(b.Load(f, b.U32(0)), b.U32(1))
	b.UnpackHalf2x16(b.F32(1))
	b.SDotAccSat(b.U32(1), b.U32(2), b.U32(3))
	_, err = b.Finish()
	if err == nil || strings.Count(err.Error(), "want") < 3 {
		t.Fatalf("type errors: %v, want three", err)
	}
}
