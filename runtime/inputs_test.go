package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/plan"
)

func i32s(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// rangedFunction has token ids (i32[3], 0..9), a position (i32 scalar, 0..5), a run-time count
// n (u32 scalar, 1..3) with pos + n ≤ 8, and a float input.
func rangedFunction() *plan.Function {
	return &plan.Function{
		Name: "step",
		Inputs: []plan.Value{
			{Name: "tokens", DType: plan.I32, Shape: []int64{3}, Place: plan.Staging},
			{Name: "pos", DType: plan.I32, Place: plan.Staging},
			{Name: "n", DType: plan.U32, Place: plan.Staging},
			{Name: "x", DType: plan.F32, Shape: []int64{2}, Place: plan.Staging},
		},
		Ranges: []plan.Range{
			{Input: 0, Min: 0, Max: 9, MinWhy: "ids are not negative", MaxWhy: "the table has 10 rows"},
			{Input: 1, Min: 0, Max: plan.NoMax, MinWhy: "positions are not negative"},
			{Input: 2, Min: 1, Max: 3, MinWhy: "at least one row", MaxWhy: "the capacity is 3"},
			{Input: 1, Plus: []uint32{2}, Min: plan.NoMin, Max: 8, MaxWhy: "the cache has 8 rows"},
		},
	}
}

func TestInputChecks(t *testing.T) {
	f := rangedFunction()
	c, err := newInputChecker(f)
	if err != nil {
		t.Fatal(err)
	}
	good := func() map[string][]byte {
		return map[string][]byte{"tokens": i32s(0, 9, 4), "pos": i32s(5), "n": i32s(3), "x": make([]byte, 8)}
	}
	for _, tc := range []struct {
		name   string
		mutate func(in map[string][]byte)
		want   string // "" accepts
	}{
		{"all in range", func(map[string][]byte) {}, ""},
		{"token past the table", func(in map[string][]byte) { in["tokens"] = i32s(0, 10, 4) },
			"function step: input tokens[1] is 10: it must be at most 9 (the table has 10 rows)"},
		{"negative token", func(in map[string][]byte) { in["tokens"] = i32s(0, 1, -1) },
			"input tokens[2] is -1: it must be at least 0 (ids are not negative)"},
		{"negative position", func(in map[string][]byte) { in["pos"] = i32s(-3) },
			"function step: input pos is -3: it must be at least 0 (positions are not negative)"},
		{"most negative position", func(in map[string][]byte) { in["pos"] = i32s(math.MinInt32) },
			"input pos is -2147483648: it must be at least 0"},
		{"position plus count past the cache", func(in map[string][]byte) { in["pos"] = i32s(6) },
			"function step: input pos is 6, n is 3: pos + n = 9 must be at most 8 (the cache has 8 rows)"},
		{"no wrap at 32 bits", func(in map[string][]byte) { in["pos"], in["n"] = i32s(math.MaxInt32), i32s(1) },
			"pos + n = 2147483648 must be at most 8"},
		{"u32 read unsigned", func(in map[string][]byte) { in["n"] = i32s(-1) },
			"input n is 4294967295: it must be at most 3"},
		{"missing input", func(in map[string][]byte) { delete(in, "n") }, `missing input "n" (u32[])`},
		{"unknown input", func(in map[string][]byte) { in["\x1b[2Jtok"] = nil }, `unknown input "\x1b[2Jtok"`},
		{"wrong size", func(in map[string][]byte) { in["tokens"] = i32s(1, 2) }, `input "tokens" has 8 bytes, want 12 (i32[3])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := good()
			tc.mutate(in)
			err := c.bind(in, make([][]byte, len(f.Inputs)))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
			if strings.Contains(tc.want, "must be") && !errors.Is(err, ErrInputRange) {
				t.Errorf("%v does not wrap ErrInputRange", err)
			}
		})
	}
}

// TestInputChecksAllocateNothing: a run's checks allocate nothing when the inputs are good
// (RunInto's promise).
func TestInputChecksAllocateNothing(t *testing.T) {
	f := rangedFunction()
	c, err := newInputChecker(f)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string][]byte{"tokens": i32s(0, 9, 4), "pos": i32s(5), "n": i32s(3), "x": make([]byte, 8)}
	slots := make([][]byte, len(f.Inputs))
	if n := testing.AllocsPerRun(100, func() {
		if err := c.bind(in, slots); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per check", n)
	}
}

// fuzzBytes hands out the fuzzer's bytes as small decisions; past the end every decision is 0.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzBytes) intn(n int) int { return int(r.next()) % n }

func (r *fuzzBytes) i32() int32 {
	// Mostly small values around the bounds, sometimes the extremes.
	switch r.intn(8) {
	case 0:
		return math.MinInt32
	case 1:
		return math.MaxInt32
	}
	return int32(int8(r.next()))
}

// FuzzRunInputs builds a random function signature (dtypes, shapes, ranges over tensors and
// scalars with added scalars) and random inputs (values, missing, unknown and wrongly sized
// ones), and checks the run's input checks against a plain re-statement of the rules: the
// checker accepts exactly what the rules accept, never panics, and a rejection names the input,
// and for a range the element, its value and the bound it breaks.
func FuzzRunInputs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 2, 1, 0, 1, 1, 3, 2, 1, 9, 0, 0, 7, 1, 0, 200, 5, 5})
	f.Add([]byte("\x04\x01\x01\x03\x02\x00\x00\x02\x01\x02\x03\x00\x01\x02\x00\x09\x08\x07\x06\x05\x04\x03\x02\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzBytes{data}
		fn := &plan.Function{Name: "f"}
		dtypes := []plan.DType{plan.I32, plan.U32, plan.F32}
		nIn := 1 + r.intn(4)
		for i := 0; i < nIn; i++ {
			v := plan.Value{Name: fmt.Sprintf("in%d", i), DType: dtypes[r.intn(3)], Place: plan.Staging}
			for d := r.intn(3); d > 0; d-- {
				v.Shape = append(v.Shape, int64(r.intn(4)))
			}
			fn.Inputs = append(fn.Inputs, v)
		}
		for k := r.intn(4); k > 0; k-- {
			rg := plan.Range{Input: uint32(r.intn(nIn + 1)), Min: int64(r.i32()), Max: int64(r.i32()),
				MinWhy: "min", MaxWhy: "max"}
			if r.intn(4) == 0 {
				rg.Min = plan.NoMin
			}
			if r.intn(4) == 0 {
				rg.Max = plan.NoMax
			}
			for p := r.intn(3); p > 0; p-- {
				rg.Plus = append(rg.Plus, uint32(r.intn(nIn)))
			}
			fn.Ranges = append(fn.Ranges, rg)
		}
		if (&plan.Plan{Functions: []plan.Function{*fn}}).Validate() != nil {
			return // Load refuses such a plan before any run
		}
		c, err := newInputChecker(fn)
		if err != nil {
			t.Fatalf("a valid function's checker: %v", err)
		}

		in := map[string][]byte{}
		for i, v := range fn.Inputs {
			n, _ := v.Bytes()
			switch r.intn(16) {
			case 0:
				continue // missing
			case 1:
				n += 4 // wrong size
			}
			b := make([]byte, n)
			for j := 0; j+4 <= len(b); j += 4 {
				binary.LittleEndian.PutUint32(b[j:], uint32(r.i32()))
			}
			in[fn.Inputs[i].Name] = b
		}
		if r.intn(16) == 0 {
			in["stray"] = nil
		}

		// The rules, stated plainly.
		var want error
		for name, b := range in {
			found := false
			for i := range fn.Inputs {
				if fn.Inputs[i].Name == name {
					found = true
					if n, _ := fn.Inputs[i].Bytes(); uint64(len(b)) != n {
						want = fmt.Errorf("size of %s", name)
					}
				}
			}
			if !found {
				want = fmt.Errorf("unknown %s", name)
			}
		}
		for i := range fn.Inputs {
			if _, ok := in[fn.Inputs[i].Name]; !ok {
				want = fmt.Errorf("missing %s", fn.Inputs[i].Name)
			}
		}
		val := func(i uint32, j int) int64 {
			w := binary.LittleEndian.Uint32(in[fn.Inputs[i].Name][4*j:])
			if fn.Inputs[i].DType == plan.I32 {
				return int64(int32(w))
			}
			return int64(w)
		}
		if want == nil {
			for _, rg := range fn.Ranges {
				n, _ := plan.Elements(fn.Inputs[rg.Input].Shape)
				for j := 0; j < int(n); j++ {
					s := val(rg.Input, j)
					for _, p := range rg.Plus {
						s += val(p, 0)
					}
					if s < rg.Min || s > rg.Max {
						want = fmt.Errorf("range of %s", fn.Inputs[rg.Input].Name)
					}
				}
			}
		}

		got := c.bind(in, make([][]byte, len(fn.Inputs)))
		if (got == nil) != (want == nil) {
			t.Fatalf("checker says %v, the rules say %v", got, want)
		}
		if got == nil {
			return
		}
		var re *InputRangeError
		if !errors.As(got, &re) {
			if strings.HasPrefix(want.Error(), "range") {
				t.Fatalf("checker says %v, the rules say %v", got, want)
			}
			return
		}
		// The element and the bound the error reports are real.
		var x uint32 = math.MaxUint32
		for i := range fn.Inputs {
			if fn.Inputs[i].Name == re.Input {
				x = uint32(i)
			}
		}
		if x == math.MaxUint32 {
			t.Fatalf("%v names no input", got)
		}
		j := max(re.Index, 0)
		if v := val(x, j); v != re.Value {
			t.Fatalf("%v: element %d is %d", got, j, v)
		}
		if re.Below && re.Sum >= re.Bound || !re.Below && re.Sum <= re.Bound {
			t.Fatalf("%v: the sum %d keeps the bound %d", got, re.Sum, re.Bound)
		}
		if !strings.Contains(got.Error(), re.Input) || !strings.Contains(got.Error(), fmt.Sprint(re.Bound)) {
			t.Fatalf("%q does not name the input and the bound", got)
		}
	})
}

// TestRunRefusesOutOfRange loads a plan that copies its i32[4] input into the state, and checks
// that Run refuses an input outside its range with ErrInputRange before submitting anything: the
// state keeps what the last good run wrote.
func TestRunRefusesOutOfRange(t *testing.T) {
	d := openTest(t, Options{})
	fp := d.DeviceFingerprint()
	spv := spirv(t, "copy")
	words := make([]uint32, len(spv)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(spv[4*i:])
	}
	p := &plan.Plan{
		CompilerVersion: "hand-written", Model: "copy", Device: fp,
		Modules: []plan.Module{{Key: "copy", SPIRV: words, Entry: "main",
			Bindings:         []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Write}},
			PushConstantSize: 4, SpecConstants: []plan.SpecConstant{{ID: 0, Value: 64}}, Workgroup: [3]uint32{64, 1, 1}}},
		State:     []plan.StateTensor{{Name: "s", DType: plan.I32, Shape: []int64{4}}},
		StateSize: 16,
		Functions: []plan.Function{{
			Name:   "put",
			Inputs: []plan.Value{{Name: "ids", DType: plan.I32, Shape: []int64{4}, Place: plan.Staging}},
			Dispatches: []plan.Dispatch{{Module: 0,
				Bindings: []plan.Binding{{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput}, Range: 16}},
					{Binding: 1, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Range: 16}}},
				Push: u32(1), Grid: [3]uint32{1, 1, 1}}},
			Ranges: []plan.Range{{Input: 0, Min: 0, Max: 9, MinWhy: "not negative", MaxWhy: "10 rows"}},
		}},
	}
	exe, err := d.Load(p, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	ctx := context.Background()
	if _, err := exe.Run(ctx, "put", map[string][]byte{"ids": i32s(1, 2, 3, 9)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{i32s(1, 2, 3, 10), i32s(-1, 0, 0, 0)} {
		_, err := exe.Run(ctx, "put", map[string][]byte{"ids": bad})
		if !errors.Is(err, ErrInputRange) {
			t.Fatalf("Run with %v: got %v, want ErrInputRange", bad, err)
		}
		if err := exe.RunInto(ctx, "put", map[string][]byte{"ids": bad}, nil); !errors.Is(err, ErrInputRange) {
			t.Fatalf("RunInto with %v: got %v, want ErrInputRange", bad, err)
		}
		if _, err := exe.Measure(ctx, "put", map[string][]byte{"ids": bad}, MeasureOptions{Reps: 1}); !errors.Is(err, ErrInputRange) {
			t.Fatalf("Measure with %v: got %v, want ErrInputRange", bad, err)
		}
	}
	s, err := exe.ReadState("s")
	if err != nil {
		t.Fatal(err)
	}
	if string(s) != string(i32s(1, 2, 3, 9)) {
		t.Errorf("state %v after refused runs, want the last good run's [1 2 3 9]", s)
	}
}
