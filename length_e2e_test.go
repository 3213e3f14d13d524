package vkc

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/plan"
)

// TestRunTimeLengthMatchesInterpreter runs tinyllama's prefill (a run-time length 1..64) at
// several lengths, each after a shorter chunk so that pos > 0, and compares the n rows of logits
// and of next_token, then every state tensor and a decode step, with the interpreter running the
// model written at that length. It does so with the default variants (capacities 1 and 8 beside
// 64: n = 1 and 7 run on them) and with the capacity alone (every length on the 64-row plan,
// its grids following n).
func TestRunTimeLengthMatchesInterpreter(t *testing.T) {
	for _, variants := range []bool{true, false} {
		t.Run(map[bool]string{true: "variants", false: "capacity"}[variants], func(t *testing.T) {
			testRunTimeLength(t, variants)
		})
	}
}

func testRunTimeLength(t *testing.T, variants bool) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	if m.Function("prefill").Length == nil {
		t.Fatal("examples/tinyllama's prefill has no run-time length")
	}
	p, _ := compileExample(t, m, Options{Target: targetOf(d), ArgmaxOutput: true, NoLengthVariants: !variants})
	pf := p.Function("prefill")
	if pf.Length == nil || pf.Length.Max != 64 {
		t.Fatalf("plan's prefill length %+v, want 1..64", pf.Length)
	}
	var caps []string
	for _, v := range pf.Variants {
		caps = append(caps, fmt.Sprintf("%d..%d", v.Length.Min, v.Length.Max))
	}
	if want := map[bool]string{true: "[1..1 2..8]", false: "[]"}[variants]; fmt.Sprint(caps) != want {
		t.Errorf("variants %v, want %s", caps, want)
	}
	scaled := 0
	for _, dsp := range pf.Dispatches {
		if dsp.Scale != nil {
			scaled++
		}
	}
	t.Logf("prefill: %d of %d dispatches follow the length", scaled, len(pf.Dispatches))
	exe := roundTrip(t, d, p)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 9))
	tokens := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(256))
		}
		return ids
	}
	run := func(s *interp.Session, fn string, ids []int32, pos int) map[string]*ir.Tensor {
		t.Helper()
		f := p.Function(fn)
		res, err := exe.Run(ctx, fn, map[string][]byte{"tokens": engine.Int32Bytes(ids...), "pos": engine.Int32Bytes(int32(pos))})
		if err != nil {
			t.Fatalf("%s of %d tokens at %d: %v", fn, len(ids), pos, err)
		}
		got, err := Outputs(f, res)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Run(fn, map[string]*ir.Tensor{"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, len(ids)), f64s(ids)),
			"pos": ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(pos)})})
		if err != nil {
			t.Fatal(err)
		}
		if r := got["logits"].Type.Shape[0]; r != len(ids) {
			t.Errorf("%s of %d tokens returned %d rows of logits", fn, len(ids), r)
		}
		compare(t, fmt.Sprintf("%s of %d tokens at %d: logits", fn, len(ids), pos), got["logits"], want["logits"])
		next, lg := engine.Int32s(got[NextTokenOutput].Data), got["logits"].Float64s()
		if len(next) != len(ids) {
			t.Errorf("%s of %d tokens returned %d next tokens", fn, len(ids), len(next))
		}
		for r := range next {
			row := lg[r*256 : (r+1)*256]
			if w := argmax64(row); int(next[r]) != w {
				t.Errorf("%s row %d: next_token %d, argmax of the logits %d", fn, r, next[r], w)
			}
		}
		return got
	}
	for _, n := range []int{1, 7, 33, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if err := exe.ResetState(); err != nil {
				t.Fatal(err)
			}
			s := interp.NewSession(m)
			first := 3
			run(s, "prefill", tokens(first), 0)
			run(s, "prefill", tokens(n), first)
			run(s, "decode", tokens(1), first+n)
			for _, st := range p.State {
				b, err := exe.ReadState(st.Name)
				if err != nil {
					t.Fatal(err)
				}
				typ, _ := ValueType(&plan.Value{Name: st.Name, DType: st.DType, Shape: st.Shape})
				compare(t, "state "+st.Name, &ir.Tensor{Type: typ, Data: b}, s.State(st.Name))
			}
		})
	}
	// Out of range: no tokens, more than 64, a chunk past the cache.
	for _, c := range []struct {
		n, pos int
		want   string
	}{{0, 0, "not a whole number"}, {65, 0, "outside 1..64"}, {64, 100, "pos + seq = 164 must be at most 128"}} {
		_, err := exe.Run(ctx, "prefill", map[string][]byte{"tokens": engine.Int32Bytes(make([]int32, c.n)...), "pos": engine.Int32Bytes(int32(c.pos))})
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%d tokens at %d: err %v, want %q", c.n, c.pos, err, c.want)
		}
	}
}

// TestRunTimeLengthOracle: the HF tinyllama prompt through the compiled run-time-length prefill
// at other lengths than the golden 16: 5 tokens then the other 11 at position 5 give the
// golden's 16 rows; Generate sends the prompt through one prefill run and gives HF's greedy
// tokens.
func TestRunTimeLengthOracle(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	p, _ := compileExample(t, m, Options{Target: targetOf(d), ArgmaxOutput: true})
	exe := roundTrip(t, d, p)
	gold, err := safetensors.ReadAll("testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := engine.Int32s(gold["input_ids"].Data)
	want := gold["prefill_logits"]
	prefill := p.Function("prefill")
	for _, split := range []int{1, 5, 15} {
		if err := exe.ResetState(); err != nil {
			t.Fatal(err)
		}
		for _, c := range [][2]int{{0, split}, {split, 16}} {
			res, err := exe.Run(ctx, "prefill", map[string][]byte{"tokens": engine.Int32Bytes(ids[c[0]:c[1]]...), "pos": engine.Int32Bytes(int32(c[0]))})
			if err != nil {
				t.Fatal(err)
			}
			out, err := Outputs(prefill, res)
			if err != nil {
				t.Fatal(err)
			}
			rows := &ir.Tensor{Type: ir.T(ir.F32, c[1]-c[0], 256), Data: want.Data[4*256*c[0] : 4*256*c[1]]}
			e := compare(t, fmt.Sprintf("prefill of tokens %d..%d", c[0], c[1]), out["logits"], rows)
			t.Logf("tokens %d..%d: max row-relative error %.3g", c[0], c[1], e)
		}
		// The decode steps after the chunked prompt.
		dl := gold["decode_logits"]
		for step, tok := range engine.Int32s(gold["decode_tokens"].Data)[:2] {
			res, err := exe.Run(ctx, "decode", map[string][]byte{"tokens": engine.Int32Bytes(tok), "pos": engine.Int32Bytes(int32(16 + step))})
			if err != nil {
				t.Fatal(err)
			}
			out, err := Outputs(p.Function("decode"), res)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, fmt.Sprintf("split %d: decode %d", split, step), out["logits"], &ir.Tensor{Type: ir.T(ir.F32, 1, 256), Data: dl.Data[4*256*step : 4*256*(step+1)]})
		}
	}
	if err := exe.ResetState(); err != nil {
		t.Fatal(err)
	}
	g, err := engine.GenerateIDs(ctx, exe, ids, engine.GenerateOptions{MaxTokens: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := engine.Int32s(gold["greedy_tokens"].Data); fmt.Sprint(g.Tokens) != fmt.Sprint(w) {
		t.Errorf("greedy tokens %v, HF %v", g.Tokens, w)
	}
	if g.Chunks != 1 || g.Prefilled != 16 {
		t.Errorf("the 16-token prompt took %d prefill runs for %d tokens, want 1 for 16", g.Chunks, g.Prefilled)
	}
}

func f64s(ids []int32) []float64 {
	out := make([]float64, len(ids))
	for i, x := range ids {
		out[i] = float64(x)
	}
	return out
}

func argmax64(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] || math.IsNaN(xs[best]) {
			best = i
		}
	}
	return best
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
