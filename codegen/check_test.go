package codegen

import (
	"errors"
	"strings"
	"testing"
)

// TestTypeChecker: misuse is reported by the builder, naming the kernel, the construct and the
// position of the call, and never reaches the emitter.
func TestTypeChecker(t *testing.T) {
	cases := []struct {
		name      string
		construct string // "" means the kernel is valid
		msg       string
		build     func(b *Builder)
	}{
		{"f16 into an f32 op", "Add", "operand types differ: f16 and f32", func(b *Builder) {
			x := b.Buffer("x", F16, ReadOnly)
			y := b.Buffer("y", F32, WriteOnly)
			i := b.X(b.GlobalID())
			b.Store(y, i, b.Add(b.Load(x, i), b.F32(1)))
		}},
		{"store to a read-only buffer", "Store", `store to read-only buffer "x"`, func(b *Builder) {
			x := b.Buffer("x", F32, ReadOnly)
			b.Store(x, b.U32(0), b.F32(1))
		}},
		{"load from a write-only buffer", "Load", `load from write-only buffer "y"`, func(b *Builder) {
			y := b.Buffer("y", F32, WriteOnly)
			b.Store(y, b.U32(1), b.Load(y, b.U32(0)))
		}},
		{"store of the wrong type", "Store", `"y" holds f32, value is i32`, func(b *Builder) {
			y := b.Buffer("y", F32, WriteOnly)
			b.Store(y, b.U32(0), b.I32(1))
		}},
		{"float index", "Load", "index must be an i32 or u32 scalar, got f32", func(b *Builder) {
			x := b.Buffer("x", F32, ReadWrite)
			b.Store(x, b.U32(0), b.Load(x, b.F32(0)))
		}},
		{"barrier under a branch on the invocation id", "Barrier", "divergent control flow", func(b *Builder) {
			b.If(b.Lt(b.X(b.LocalID()), b.U32(16)), b.Barrier)
		}},
		{"barrier in a loop whose bound depends on the invocation", "Barrier", "trip count depends on the invocation", func(b *Builder) {
			b.For(b.LocalIndex(), b.U32(64), b.U32(1), func(Value) { b.Barrier() })
		}},
		{"barrier under a branch on a variable set from the invocation id", "Barrier", "divergent control flow", func(b *Builder) {
			v := b.Var("v", b.SubgroupInvocation())
			b.If(b.Eq(b.Get(v), b.U32(0)), b.Barrier)
		}},
		{"barrier under a branch on data loaded at the invocation's index", "Barrier", "divergent control flow", func(b *Builder) {
			x := b.Buffer("x", F32, ReadOnly)
			b.If(b.Gt(b.Load(x, b.X(b.GlobalID())), b.F32(0)), b.Barrier)
		}},
		{"barrier after a divergent early return", "Barrier", "after a return", func(b *Builder) {
			b.If(b.Eq(b.LocalIndex(), b.U32(3)), b.Return)
			b.Barrier()
		}},
		{"barrier in a loop with a divergent break", "Barrier", "trip count depends on the invocation", func(b *Builder) {
			b.For(b.U32(0), b.U32(8), b.U32(1), func(i Value) {
				b.Barrier()
				b.If(b.Eq(i, b.LocalIndex()), b.Break)
			})
		}},
		{"barrier under uniform conditions is fine", "", "", func(b *Builder) {
			n := b.Push("n", U32)
			b.If(b.Lt(b.X(b.WorkgroupID()), n), func() {
				b.For(b.U32(0), n, b.U32(1), func(Value) { b.Barrier() })
			})
			b.If(b.Eq(b.X(b.WorkgroupID()), b.U32(0)), b.Return) // a uniform return
			b.Barrier()
		}},
		{"value used outside its branch", "Store", "used outside the branch or loop that defines it", func(b *Builder) {
			y := b.Buffer("y", U32, WriteOnly)
			var v Value
			b.If(b.Bool(true), func() { v = b.Add(b.X(b.GlobalID()), b.U32(1)) })
			b.Store(y, b.U32(0), v)
		}},
		{"break outside a loop", "Break", "outside a loop", func(b *Builder) { b.Break() }},
		{"statement after return", "store", "unreachable", func(b *Builder) {
			y := b.Buffer("y", U32, WriteOnly)
			b.Return()
			b.Store(y, b.U32(0), b.U32(1))
		}},
		{"if on a non-bool", "If", "condition is u32, want bool", func(b *Builder) {
			b.If(b.U32(1), func() {})
		}},
		{"loop condition with a statement", "While", "may not contain statements", func(b *Builder) {
			y := b.Buffer("y", U32, WriteOnly)
			b.While(func() Value { b.Store(y, b.U32(0), b.U32(0)); return b.Bool(false) }, func() {})
		}},
		{"shared array sized by a push constant", "Shared", "length must be an integer constant", func(b *Builder) {
			b.Shared("s", F32, b.Push("n", U32))
		}},
		{"shift of a float", "Shl", "needs integers", func(b *Builder) { b.Shl(b.F32(1), b.U32(1)) }},
		{"negation of u32", "Neg", "not defined for u32", func(b *Builder) { b.Neg(b.X(b.GlobalID())) }},
		{"abs of u32", "Abs", "not defined for u32", func(b *Builder) { b.Abs(b.X(b.GlobalID())) }},
		{"exp of i32", "Exp", "not defined for i32", func(b *Builder) { b.Exp(b.I32(1)) }},
		{"erf of i32", "Erf", "not defined for i32", func(b *Builder) { b.Erf(b.I32(1)) }},
		{"arithmetic on bools", "Add", "not defined for bool", func(b *Builder) { b.Add(b.Bool(true), b.Bool(false)) }},
		{"subgroup add of bools", "SubgroupAdd", "not defined for bool", func(b *Builder) { b.SubgroupAdd(b.Bool(true)) }},
		{"broadcast from a computed lane", "SubgroupBroadcast", "lane must be a u32 constant", func(b *Builder) {
			b.SubgroupBroadcast(b.F32(1), b.X(b.LocalID()))
		}},
		{"select with mismatched condition", "Select", "condition is vec2<bool>, operands vec4<f32>", func(b *Builder) {
			b.Select(b.Vec(b.Bool(true), b.Bool(false)), b.Splat(b.F32(1), 4), b.Splat(b.F32(2), 4))
		}},
		{"conversion changing the width", "Convert", "cannot convert vec2<f32> to f32", func(b *Builder) {
			b.Convert(b.Splat(b.F32(1), 2), F32)
		}},
		{"bitcast changing the size", "Bitcast", "cannot reinterpret f16 as u32", func(b *Builder) {
			b.Bitcast(b.F16(1), U32)
		}},
		{"bool buffer", "Buffer", "bool cannot be stored in a buffer", func(b *Builder) { b.Buffer("x", Bool, ReadOnly) }},
		{"vec3 buffer", "Buffer", "16-byte stride", func(b *Builder) { b.Buffer("x", Vec(F32, 3), ReadOnly) }},
		{"bool push constant", "Push", "cannot be in a push-constant block", func(b *Builder) { b.Push("p", Bool) }},
		{"float specialization constant", "Spec", "want bool, i32 or u32", func(b *Builder) { b.Spec("s", F32, 1) }},
		{"workgroup size from a push constant", "WorkgroupSize", "u32 constant or specialization constant", func(b *Builder) {
			b.WorkgroupSize(b.Push("n", U32), b.U32(1), b.U32(1))
		}},
		{"variable set to the wrong type", "Set", `variable "v" has type f32, value has type u32`, func(b *Builder) {
			v := b.Var("v", b.F32(0))
			b.Set(v, b.U32(1))
		}},
		{"value from another builder", "Add", "another builder", func(b *Builder) {
			other := NewBuilder("other")
			b.Add(other.Add(other.X(other.GlobalID()), other.U32(1)), b.U32(1))
		}},
		{"dot of scalars", "Dot", "needs two float vectors", func(b *Builder) { b.Dot(b.F32(1), b.F32(2)) }},
		{"atomic on a read-only buffer", "AtomicAdd", "atomics need a read-write buffer", func(b *Builder) {
			b.AtomicAdd(b.Buffer("x", U32, ReadOnly), b.U32(0), b.U32(1))
		}},
		{"atomic on floats", "AtomicAdd", "needs an i32 or u32 element", func(b *Builder) {
			b.AtomicAdd(b.Buffer("x", F32, ReadWrite), b.U32(0), b.F32(1))
		}},
		{"the zero Value", "Add", "invalid Value", func(b *Builder) {
			var v Value
			b.Add(v, b.F32(1))
		}},
		{"vector of too many components", "Vec", "want 2 to 4", func(b *Builder) {
			one := b.F32(1)
			b.Vec(one, one, one, one, one)
		}},
		{"memory barrier without memory", "MemoryBarrier", "no memory named", func(b *Builder) {
			b.MemoryBarrier(ScopeWorkgroup, 0)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("bad")
			c.build(b)
			k, err := b.Finish()
			if c.construct == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				spirvVal(t, k, "vulkan1.1")
				return
			}
			if err == nil {
				t.Fatalf("no error; want %s: %s\n%s", c.construct, c.msg, k.Dump())
			}
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("error %T, want *BuildError", err)
			}
			if be.Kernel != "bad" || !strings.Contains(err.Error(), `kernel "bad"`) {
				t.Errorf("error does not name the kernel: %v", err)
			}
			p := be.Problems[0]
			if p.Construct != c.construct || !strings.Contains(p.Msg, c.msg) {
				t.Errorf("first problem %q, want construct %s and message containing %q", p, c.construct, c.msg)
			}
			if !strings.HasPrefix(p.Pos, "check_test.go:") {
				t.Errorf("position %q, want the test's own line", p.Pos)
			}
		})
	}
}

// TestOneErrorPerMistake: values produced by a failed call do not cause further errors.
func TestOneErrorPerMistake(t *testing.T) {
	b := NewBuilder("cascade")
	y := b.Buffer("y", F32, WriteOnly)
	bad := b.Add(b.F16(1), b.F32(1))
	v := b.Mul(b.Exp(bad), bad)
	b.If(b.Lt(v, b.F32(0)), func() { b.Store(y, b.U32(0), v) })
	_, err := b.Finish()
	var be *BuildError
	if !errors.As(err, &be) || len(be.Problems) != 1 {
		t.Fatalf("want exactly one problem, got %v", err)
	}
}

func TestFinishTwice(t *testing.T) {
	b := NewBuilder("twice")
	if _, err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(); err == nil || !strings.Contains(err.Error(), "Finish called twice") {
		t.Errorf("second Finish: %v", err)
	}
}
