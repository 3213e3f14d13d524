package codegen

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// Random programs: a byte string drives a builder through a random sequence of calls, valid and
// invalid alike. The properties: the builder never panics; it either reports errors or emits a
// module; and every module it emits passes spirv-val (TestRandomProgramsValidate).

type byteSource struct {
	data []byte
	pos  int
}

func (s *byteSource) next(n int) int {
	if n <= 0 {
		return 0
	}
	if s.pos >= len(s.data) {
		return 0
	}
	v := int(s.data[s.pos])
	s.pos++
	return v % n
}

func (s *byteSource) done() bool { return s.pos >= len(s.data) }

var randomTypes = []Type{Bool, I32, U32, F32, F16, Vec(F32, 2), Vec(F32, 4), Vec(U32, 2), Vec(F16, 4), Vec(I32, 3), Vec(Bool, 2)}

// randomProgram builds a kernel from src. Value pools are scoped like the program: values made
// inside a branch are dropped when it ends (unless the source asks for a misuse on purpose).
func randomProgram(src *byteSource) (*Kernel, error) {
	b := NewBuilder("random")
	var bufs []*Buffer
	for _, t := range []Type{F32, U32, F16, Vec(F32, 4), I32} {
		acc := []Access{ReadOnly, WriteOnly, ReadWrite}[src.next(3)]
		bufs = append(bufs, b.Buffer("b"+t.String(), t, acc))
	}
	shared := b.Shared("sh", F32, b.Spec("n", U32, 64))
	b.WorkgroupSize(b.Spec("wg", U32, 32), b.U32(1), b.U32(1))
	pool := []Value{b.X(b.GlobalID()), b.Push("p", U32), b.F32(1.5), b.I32(-3), b.Bool(true), b.SubgroupSize()}
	v := b.Var("v", b.F32(0))
	anyValue := func() Value { return pool[src.next(len(pool))] }
	// pickT mostly returns a value of type t (a pooled one or a constant), sometimes any value.
	pickT := func(t Type) Value {
		if src.next(16) == 0 {
			return anyValue()
		}
		var same []Value
		for _, v := range pool {
			if v.Type() == t {
				same = append(same, v)
			}
		}
		if len(same) > 0 && src.next(4) != 0 {
			return same[src.next(len(same))]
		}
		if t == Bool {
			return b.Bool(src.next(2) == 0)
		}
		return b.Const(t, float64(src.next(9))-4)
	}
	numeric := []Type{I32, U32, F32, F16, Vec(F32, 2), Vec(F32, 4), Vec(U32, 2), Vec(F16, 4), Vec(I32, 3)}
	floats := []Type{F32, F16, Vec(F32, 2), Vec(F32, 4), Vec(F16, 4)}
	ints := []Type{I32, U32, Vec(U32, 2), Vec(I32, 3)}
	of := func(ts []Type) Type { return ts[src.next(len(ts))] }
	index := func() Value { return b.Rem(pickT(U32), b.U32(64)) }
	pick := func() Value { return pickT(of(numeric)) }
	depth, loops := 0, 0
	var stmts func(n int)
	stmts = func(n int) {
		for i := 0; i < n && !src.done(); i++ {
			var r Value
			switch src.next(25) {
			case 0:
				r = b.Const(randomTypes[src.next(len(randomTypes))], float64(src.next(9))-4)
			case 1:
				t := of(numeric)
				r = b.Add(pickT(t), pickT(t))
			case 2:
				t := of(numeric)
				r = b.Mul(pickT(t), pickT(t))
			case 3:
				t := of(floats)
				r = b.Div(pickT(t), pickT(t))
			case 4:
				t := of(numeric)
				r = b.Lt(pickT(t), pickT(t))
			case 5:
				t := of(append(ints, Bool))
				r = b.And(pickT(t), pickT(t))
			case 6:
				t := of(numeric)
				r = b.Select(pickT(Bool), pickT(t), pickT(t))
			case 7:
				r = b.Convert(pick(), randomTypes[src.next(len(randomTypes))])
			case 8:
				ops := []func(Value) Value{b.Exp, b.Sqrt, b.Tanh, b.Abs, b.Neg, b.Floor, b.Erf, b.SubgroupAdd, b.SubgroupMax}
				r = ops[src.next(len(ops))](pickT(of(floats)))
			case 9:
				t := of(numeric)
				r = b.Min(pickT(t), pickT(t))
			case 10:
				r = b.Load(bufs[src.next(len(bufs))], index())
			case 11:
				buf := bufs[src.next(len(bufs))]
				b.Store(buf, index(), pickT(buf.Elem))
			case 12:
				r = b.Load(shared, index())
			case 13:
				b.Store(shared, index(), pickT(F32))
			case 14:
				x := pick()
				if x.Type().IsVector() {
					r = b.Extract(x, src.next(x.Type().Len()+1))
				} else {
					r = b.Splat(x, 2+src.next(3))
				}
			case 15:
				if depth < 3 {
					mark := len(pool)
					depth++
					b.IfElse(pickT(Bool), func() { stmts(src.next(5)) }, func() { stmts(src.next(3)) })
					depth--
					if src.next(8) != 0 { // mostly keep scoping right
						pool = pool[:mark]
					}
				}
			case 16:
				if depth < 3 {
					mark := len(pool)
					depth++
					loops++
					b.For(b.U32(0), []Value{b.U32(4), pickT(U32)}[src.next(2)], b.U32(1), func(i Value) {
						pool = append(pool, i)
						stmts(src.next(6))
					})
					loops--
					depth--
					pool = pool[:mark]
				}
			case 17:
				if loops > 0 || src.next(4) == 0 {
					[]func(){b.Break, b.Continue}[src.next(2)]()
					return
				}
			case 18:
				if src.next(3) == 0 {
					b.Return()
					return
				}
			case 19:
				b.Barrier()
			case 20:
				b.Set(v, pickT(F32))
			case 21:
				r = b.Get(v)
			case 22:
				r = b.SubgroupShuffleXor(pick(), pickT(U32))
			case 24:
				r = anyValue() // an operand of the wrong type or scope now and then
				r = b.Add(r, pick())
			case 23:
				t := of(floats)
				r = b.Fma(pickT(t), pickT(t), pickT(t))
			}
			if r.Valid() {
				pool = append(pool, r)
			}
		}
	}
	stmts(1 << 30)
	return b.Finish()
}

func checkRandom(t *testing.T, data []byte) *Kernel {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("builder panicked on %x: %v", data, r)
		}
	}()
	k, err := randomProgram(&byteSource{data: data})
	if err != nil {
		if _, ok := err.(*BuildError); !ok || !strings.Contains(err.Error(), `kernel "random"`) {
			t.Fatalf("error %T %v, want a *BuildError naming the kernel", err, err)
		}
		return nil
	}
	if len(k.Words) < 5 || k.Words[0] != 0x07230203 {
		t.Fatalf("module without a SPIR-V header")
	}
	return k
}

func TestRandomProgramsValidate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	valid := 0
	for i := 0; i < 400 && valid < 60; i++ {
		data := make([]byte, 20+r.IntN(200))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		if k := checkRandom(t, data); k != nil {
			valid++
			spirvVal(t, k, "vulkan1.1")
		}
	}
	t.Logf("%d random programs were valid and passed spirv-val", valid)
	if valid < 20 {
		t.Errorf("only %d of the random programs were valid: the generator exercises too little", valid)
	}
}

func FuzzBuilder(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{15, 4, 16, 0, 11, 0, 1, 2, 17, 0})
	f.Add([]byte{16, 1, 3, 19, 12, 2, 13, 1, 2, 18, 0, 21})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRandom(t, data)
	})
}
