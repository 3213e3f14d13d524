package lower_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
)

const rangesModel = `
model: ranges
dims: {vocab: 10, d: 4, ctx: 8, seq: 3}
weights: {init: random, seed: 1}
params:
  embed: [vocab, d]
state:
  cache: [ctx, 1, d]
functions:
  f:
    inputs:
      tokens: i32[seq]
      pos: i32[]
      n: i32[]
    outputs: [y, z]
    body:
      - x = embedding(embed, tokens)
      - k = reshape(x, shape=[seq, 1, d])
      - cache <- cache_write(cache, rope(k, pos), pos)
      - y = attention(k, cache, cache, add(add(pos, n), -1))
      - z = embedding(embed, mul(tokens, 2))
  causal:
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs: [y]
    body:
      - k = reshape(embedding(embed, tokens), shape=[seq, 1, d])
      - cache <- cache_write(cache, k, sub(add(pos, 1), 1))
      - y = attention(k, cache, cache, add(pos, seq), causal=true)
`

// TestInputRanges checks the ranges lower derives from the ops consuming integer inputs,
// against bounds worked out by hand from the model above: vocab 10, a cache of 8 rows, 3 rows
// written per run.
func TestInputRanges(t *testing.T) {
	m, err := ir.ParseModelBytes("ranges.yaml", []byte(rangesModel), "")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	// Ranges without their reasons, in a comparable form.
	strip := func(rs []plan.Range) string {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "{input %d plus %v: %d..%d} ", r.Input, r.Plus, r.Min, r.Max)
		}
		return b.String()
	}
	const tokens, pos, n = 0, 1, 2
	want := map[string][]plan.Range{
		"f": {
			{Input: tokens, Min: 0, Max: 9},                 // embedding over 10 rows; mul(tokens, 2) is not followed
			{Input: pos, Min: 0, Max: 5},                    // rope: pos ≥ 0; cache_write: pos + 3 ≤ 8
			{Input: pos, Plus: []uint32{n}, Min: 2, Max: 9}, // attention: 1 ≤ pos + n - 1 ≤ 8
		},
		"causal": {
			{Input: tokens, Min: 0, Max: 9},
			// cache_write: 0 ≤ pos (through pos + 1 - 1), pos + 3 ≤ 8; attention: 3 ≤ pos + 3 ≤ 8
			{Input: pos, Min: 0, Max: 5},
		},
	}
	for name, w := range want {
		f := p.Function(name)
		if got, want := strip(f.Ranges), strip(w); got != want {
			t.Errorf("function %s: ranges\n%s\nwant\n%s", name, got, want)
		}
		for _, r := range f.Ranges {
			if r.MinWhy == "" || r.MaxWhy == "" {
				t.Errorf("function %s: range %s gives no reason", name, f.DescribeRange(r))
			}
		}
	}
	f := p.Function("f")
	if got := f.DescribeRange(f.Ranges[0]); !strings.Contains(got, "0 ≤ tokens ≤ 9") || !strings.Contains(got, "the table embed has 10 rows") {
		t.Errorf("range described as %q", got)
	}
	if got := f.DescribeRange(f.Ranges[1]); !strings.Contains(got, "writes 3 rows from the position on into cache, which has 8") {
		t.Errorf("range described as %q", got)
	}
	notes := strings.Join(p.Record.Notes, "\n")
	if !strings.Contains(notes, "f: input tokens reaches embedding") || !strings.Contains(notes, "not checked at run time") {
		t.Errorf("the unfollowed path of tokens through mul is not noted:\n%s", notes)
	}
}

// TestInputRangesNeverSatisfiable: a causal attention over more queries than keys admits no
// kv_len; lowering says so instead of writing a plan whose every run fails.
func TestInputRangesNeverSatisfiable(t *testing.T) {
	src := `
model: never
dims: {d: 4}
weights: {init: random, seed: 1}
params:
  w: [2, 1, d]
functions:
  f:
    inputs:
      q: f32[3, 1, d]
      kv_len: i32[]
    outputs: [y]
    body:
      - y = attention(q, w, w, kv_len, causal=true)
`
	m, err := ir.ParseModelBytes("never.yaml", []byte(src), "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	if err == nil || !strings.Contains(err.Error(), "no value of kv_len satisfies both") {
		t.Fatalf("got %v, want an error that no kv_len satisfies both bounds", err)
	}
}

// TestLowerStopsWhenCancelled: lowering checks its context before every node and while it
// places the weights, and returns the context's error and no plan.
func TestLowerStopsWhenCancelled(t *testing.T) {
	m, err := ir.ParseModelBytes("ranges.yaml", []byte(rangesModel), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		at    func(done, total int, what string) bool // cancel after this progress report
		where string
	}{
		{"before", func(int, int, string) bool { return false }, "function f"},
		{"after the third node", func(done, _ int, _ string) bool { return done == 3 }, "function f"},
		{"after the last function", func(_, _ int, what string) bool { return what == "causal: lowered" }, "placing the weights"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.name == "before" {
				cancel()
			}
			opts := lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t", Context: ctx,
				Progress: func(done, total int, what string) {
					if tc.at(done, total, what) {
						cancel()
					}
				}}
			p, _, err := lower.Lower(m, m.Functions, opts)
			if !errors.Is(err, context.Canceled) || p != nil || !strings.Contains(err.Error(), tc.where) {
				t.Fatalf("got plan %v, error %v; want no plan and context.Canceled in %s", p != nil, err, tc.where)
			}
		})
	}
}
