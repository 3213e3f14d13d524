package vkc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/lower/tune"
)

// slotRow is one row of a batched run: a token of sequence seq at position pos.
type slotRow struct{ seq, pos int }

// slotRuns are batched runs as the scheduler makes them and as it does not (a step that mixes
// prompt rows and decode rows): prompt chunks of one slot at consecutive positions, decode rows
// of several slots, and a chunk that reaches past the first key tiles of its slot. Sequence s
// sits in slot slotOf[s]; slot 1 is never written.
var (
	slotOf   = []int{2, 0, 3}
	slotRuns = func() [][]slotRow {
		chunk := func(seq, from, to int) []slotRow {
			var r []slotRow
			for p := from; p < to; p++ {
				r = append(r, slotRow{seq, p})
			}
			return r
		}
		return [][]slotRow{
			chunk(0, 0, 5), // a prompt chunk
			append(chunk(0, 5, 7), chunk(1, 0, 4)...),            // its rest, and another's first chunk
			{{0, 7}, {1, 4}, {2, 0}},                             // decode rows and a one-token chunk
			append(chunk(2, 1, 4), slotRow{0, 8}, slotRow{1, 5}), // a chunk before decode rows
			chunk(1, 6, 32),                                      // 26 rows: several key tiles
			chunk(1, 32, 61),                                     // 29 more at later positions
			{{1, 61}, {0, 9}, {2, 4}},                            // decode rows again
		}
	}()
)

// TestBatchPlanMatchesInterpreter compiles models with slots (a batched step over KV caches of
// several sequences) and runs slotRuns through the plan and through the interpreter: every run's
// logits and next tokens, and the caches at the end, agree (within tune.FunctionTolerance).
// testdata/chat-tiny/parallel.yaml is f32 with grouped-query heads; the f16 case is the same
// model in f16; the others keep f32 rows over caches of another dtype (vkc import --parallel
// --kv): f16, and q8_0 with 2 heads of 32 features (a cache row of whole block pairs).
func TestBatchPlanMatchesInterpreter(t *testing.T) {
	d := device(t)
	src, err := os.ReadFile("testdata/chat-tiny/parallel.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dt, kv string }{{"f32", "f32", ""}, {"f16", "f16", ""}, {"f32 rows, f16 cache", "f32", "f16"}, {"f32 rows, q8_0 cache", "f32", "q8_0"}} {
		dt := c.dt
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(string(src), "dtype: f32", "dtype: "+dt, 1)
			if c.kv != "" {
				text = strings.ReplaceAll(text, ": [slots, ctx, kv_heads, hd]", ": "+c.kv+"[slots, ctx, kv_heads, hd]")
			}
			if c.kv == "q8_0" {
				text = strings.Replace(text, "heads: 4\n", "heads: 2\n", 1)
			}
			text = strings.Replace(text, "tokenizer: tokenizer.json\n", "", 1)
			text = strings.Replace(text, "logits: f32[seq, vocab]", "logits: "+dt+"[seq, vocab]", 1)
			m, err := ir.ParseModelBytes("parallel.yaml", []byte(text), "testdata/chat-tiny")
			if err != nil {
				t.Fatal(err)
			}
			p, rep := compileExample(t, m, Options{Target: targetOf(d), ArgmaxOutput: true})
			// A batched step's layer takes decode's 5 dependent steps: QKV (q rotated, k
			// rotated into its slots' cells, v into theirs) | attention | o-projection +
			// residual | gate/up with SwiGLU | down + residual; the embedding before the layers
			// and the norm, logits, argmax and top-k after them take up to five more. (Before
			// the projections took rope_rows and cache_scatter as column parts it was 7.)
			const layers = 2
			for _, f := range rep.Lower.Functions {
				if limit := 5*layers + 5; f.Barriers > limit {
					t.Errorf("%s: %d barriers for %d layers, more than %d (5 levels per layer)", f.Name, f.Barriers, layers, limit)
				}
				t.Logf("%s: %d dispatches, %d barriers", f.Name, f.Dispatches, f.Barriers)
			}
			exe := roundTrip(t, d, p)
			s := interp.NewSession(m)
			f := p.Function("batch")
			// A whole function's tolerance: f16 differences add up through the layers.
			dtype, _ := ir.ParseDType(dt)
			tol := tune.FunctionTolerance(dtype)
			if c.kv != "" {
				// a 16-bit or 8-bit cache: its rounding, and (q8_0) a value the device rounds
				// the other way at a tie of ggml's quantizer, as the f16 model's
				tol = tune.FunctionTolerance(ir.F16)
			}
			check := func(what string, got, want *ir.Tensor) {
				t.Helper()
				e, err := rowError(got, want)
				if err != nil || e > tol {
					t.Errorf("%s: row-relative error %.3g > %g (%v)", what, e, tol, err)
				}
				t.Logf("%s: row-relative error %.3g", what, e)
			}
			for ri, run := range slotRuns {
				n := len(run)
				var tokens, pos, slot []int32
				for _, r := range run {
					tokens = append(tokens, int32((37*r.seq+11*r.pos+5)%258))
					pos = append(pos, int32(r.pos))
					slot = append(slot, int32(slotOf[r.seq]))
				}
				res, err := exe.Run(context.Background(), "batch", map[string][]byte{
					"tokens": engine.Int32Bytes(tokens...), "pos": engine.Int32Bytes(pos...), "slot": engine.Int32Bytes(slot...)})
				if err != nil {
					t.Fatalf("run %d: %v", ri, err)
				}
				got, err := Outputs(f, res)
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.Run("batch", map[string]*ir.Tensor{
					"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, n), f64s(tokens)),
					"pos":    ir.TensorFromFloat64s(ir.T(ir.I32, n), f64s(pos)),
					"slot":   ir.TensorFromFloat64s(ir.T(ir.I32, n), f64s(slot))})
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("run %d (%d rows): logits", ri, n), got["logits"], want["logits"])
				next, lg := engine.Int32s(got[NextTokenOutput].Data), got["logits"].Float64s()
				for r := range next {
					if w := argmax64(lg[r*258 : (r+1)*258]); int(next[r]) != w {
						t.Errorf("run %d row %d: next_token %d, argmax of the logits %d", ri, r, next[r], w)
					}
				}
			}
			for _, st := range p.State {
				b, err := exe.ReadState(st.Name)
				if err != nil {
					t.Fatal(err)
				}
				want := s.State(st.Name) // its type is the plan's state's (a q8_0 cache's too)
				check("state "+st.Name, &ir.Tensor{Type: want.Type, Data: b}, want)
			}
		})
	}
}
