package ir_test

import (
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// boundedModel is a small decoder layer whose prefill has a run-time length.
const boundedModel = `model: t
dims: {vocab: 16, d: 8, heads: 2, hd: d/heads, ctx: 32}
weights: {init: random, seed: 1}
params:
  embed: [vocab, d]
  wq: [d, d]
  n: [d]
state:
  k_cache: [ctx, heads, hd]
functions:
  prefill:
    dims: {seq: 1..12}
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs:
      y: f32[seq, d]
      kv: i32[]
    body:
      - x = embedding(embed, tokens)
      - kv = add(pos, seq)
      - q = rope(reshape(linear(x, wq), shape=[seq, heads, hd]), pos)
      - k_cache <- cache_write(k_cache, q, pos)
      - a = attention(q, k_cache, k_cache, kv, causal=true)
      - y = rmsnorm(reshape(a, shape=[seq, d]), n)
`

func TestLengthParse(t *testing.T) {
	m, err := ir.ParseModelBytes("t.yaml", []byte(boundedModel), ".")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("prefill")
	l := f.Length
	if l == nil {
		t.Fatal("prefill has no run-time length")
	}
	if l.Dim != "seq" || l.Min != 1 || l.Max != 12 {
		t.Errorf("length %s %d..%d, want seq 1..12", l.Dim, l.Min, l.Max)
	}
	if len(f.Inputs) != 2 || f.IsLength(f.Inputs[0]) || f.IsLength(f.Inputs[1]) {
		t.Fatalf("inputs %v: the length node must not be one", f.Inputs)
	}
	if want := []bool{true, false}; !equalBools(l.Inputs, want) {
		t.Errorf("bounded inputs %v, want %v", l.Inputs, want)
	}
	if want := []bool{true, false}; !equalBools(l.Outputs, want) {
		t.Errorf("bounded outputs %v, want %v", l.Outputs, want)
	}
	if got := f.Inputs[0].Type(); !got.Equal(ir.T(ir.I32, 12)) {
		t.Errorf("tokens is %s at capacity, want i32[12]", got)
	}
	// kv_len = add(pos, seq) reads the length node, not a constant 12.
	kv := f.Outputs[1].Value.Node
	if kv.Op != ir.Add || kv.Args[1].Node != l.Node {
		t.Errorf("kv is %s(%s, %s), want add(pos, the length node)", kv.Op, kv.Args[0].Node, kv.Args[1].Node)
	}
	rows, err := ir.LengthRows(f)
	if err != nil {
		t.Fatal(err)
	}
	if !rows[f.Outputs[0].Value] || rows[f.Outputs[1].Value] {
		t.Errorf("rows: y %v (want true), kv %v (want false)", rows[f.Outputs[0].Value], rows[f.Outputs[1].Value])
	}
	for _, n := range f.Nodes {
		if ir.NeedsLength(n, rows) != (n.Op == ir.CacheWrite || n.Op == ir.Attention) {
			t.Errorf("NeedsLength(%s) = %v", n, ir.NeedsLength(n, rows))
		}
	}

	for _, n := range []int{1, 5, 12} {
		g, err := f.At(n)
		if err != nil {
			t.Fatal(err)
		}
		if g.Length != nil {
			t.Errorf("At(%d) has a run-time length", n)
		}
		if got := g.Inputs[0].Type(); !got.Equal(ir.T(ir.I32, n)) {
			t.Errorf("At(%d): tokens %s", n, got)
		}
		if got := g.Outputs[0].Value.Type(); !got.Equal(ir.T(ir.F32, n, 8)) {
			t.Errorf("At(%d): y %s", n, got)
		}
		kv := g.Outputs[1].Value.Node
		if c := kv.Args[1].Node; c.Op != ir.Const || c.Value.Float64(0) != float64(n) {
			t.Errorf("At(%d): kv adds %s, want the constant %d", n, c, n)
		}
		if again, _ := f.At(n); again != g {
			t.Errorf("At(%d) is not cached", n)
		}
	}
	for _, n := range []int{0, 13} {
		if _, err := f.At(n); err == nil || !strings.Contains(err.Error(), "outside 1..12") {
			t.Errorf("At(%d): err %v, want outside 1..12", n, err)
		}
	}
	n, err := f.LengthOf(func(i int) int { return []int{7, -1}[i] })
	if n != 7 || err != nil {
		t.Errorf("LengthOf(7 tokens) = %d, %v", n, err)
	}
	if _, err := f.LengthOf(func(i int) int { return []int{13, -1}[i] }); err == nil {
		t.Error("LengthOf(13 tokens) of a 1..12 function succeeded")
	}

	// A variant for a smaller capacity: the same function for lengths up to 4.
	v, err := f.WithCapacity(4)
	if err != nil {
		t.Fatal(err)
	}
	if v.Length == nil || v.Length.Max != 4 || v.Length.Min != 1 || !equalBools(v.Length.Inputs, l.Inputs) || !equalBools(v.Length.Outputs, l.Outputs) {
		t.Fatalf("WithCapacity(4): length %+v", v.Length)
	}
	if got := v.Inputs[0].Type(); !got.Equal(ir.T(ir.I32, 4)) {
		t.Errorf("WithCapacity(4): tokens %s", got)
	}
	if a, b := mustAt(t, v, 3), mustAt(t, f, 3); a != b {
		t.Error("the variant's function at length 3 is not the function's")
	}
	if _, err := f.WithCapacity(13); err == nil {
		t.Error("WithCapacity(13) of a 1..12 function succeeded")
	}
	one, err := f.WithCapacity(1)
	if err != nil || !equalBools(one.Length.Inputs, l.Inputs) {
		t.Fatalf("WithCapacity(1): %v, %+v", err, one.Length)
	}

	// Rebuilding keeps the length: a decomposition and the model's validation.
	d, err := ir.DecomposeAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if d.Length == nil || d.Length.Node == l.Node || d.Length.Max != 12 || !equalBools(d.Length.Inputs, l.Inputs) {
		t.Fatalf("DecomposeAll: length %+v", d.Length)
	}
	// Attention's composition moves the heads first, which a run-time length cannot follow.
	if _, err := ir.LengthRows(d); err == nil || !strings.Contains(err.Error(), "moves axis 0") {
		t.Errorf("LengthRows of the decomposition: err %v, want the transpose named", err)
	}
}

func mustAt(t *testing.T, f *ir.Function, n int) *ir.Function {
	t.Helper()
	g, err := f.At(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// smallBounded is the smallest run-time-bounded model; the error cases edit its body.
const smallBounded = `model: t
dims: {d: 4}
weights: {init: random, seed: 1}
params: {w: [d, d]}
functions:
  f:
    dims: {seq: 1..8}
    inputs:
      x: f32[seq, d]
      pos: i32[]
    outputs: [y]
    body:
      - y = linear(x, w)
`

func TestLengthErrors(t *testing.T) {
	cases := []struct {
		name, old, new, want string
	}{
		{"bounds", "seq: 1..8", "seq: 5..2", "want 1 ≤ min ≤ max"},
		{"zero", "seq: 1..8", "seq: 0..8", "want 1 ≤ min ≤ max"},
		{"two", "dims: {seq: 1..8}", "dims: {seq: 1..8, s2: 1..4}", "one run-time dimension"},
		{"not leading", "pos: i32[]", "pos: i32[2, seq]", "may set only the leading axis"},
		{"no input", "x: f32[seq, d]", "x: f32[8, d]", "no input has the run-time length"},
		{"arithmetic", "y = linear(x, w)", "y = add(pos, sub(seq, 1))\n      - z = add(pos, seq-1)", "in arithmetic"},
		{"slice", "y = linear(x, w)", "y = slice(x, axis=0, start=0, end=seq)", "is not the last rows of the run"},
		{"slice past min", "y = linear(x, w)", "y = slice(x, axis=0, start=-2, end=seq)", "is not the last rows of the run"},
		{"slice inside", "y = linear(x, w)", "y = slice(x, axis=0, start=-2, end=-1)", "is not the last rows of the run"},
		{"reduce", "y = linear(x, w)", "y = sum(x, axis=0)", "reduces over axis 0"},
		{"transpose", "y = linear(x, w)", "y = transpose(transpose(x, perm=[1, 0]), perm=[1, 0])", "moves axis 0"},
		{"concat", "y = linear(x, w)", "y = concat(x, x, axis=0)", "concatenation is along axis 0"},
		{"matmul", "y = linear(x, w)", "y = matmul(w, x, tb=true)", "may set only the leading axis"},
		{"repeat", "y = linear(x, w)", "y = linear(x, w)\n      - repeat i in 0..seq:\n        - y = add(y, y)", "repeat bound"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(smallBounded, c.old, c.new, 1)
			if src == smallBounded {
				t.Fatalf("%q is not in the model", c.old)
			}
			_, err := ir.ParseModelBytes("t.yaml", []byte(src), ".")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "t.yaml:") {
				t.Errorf("error %q names no file and line", err)
			}
		})
	}
	if _, err := ir.ParseModelBytes("t.yaml", []byte(smallBounded), "."); err != nil {
		t.Fatalf("the base model: %v", err)
	}
}

// A slice of the run's last rows (ir.LastRows) is allowed along the length: its result is not
// bounded (one row at every length), it reads the length, and the function at n slices n rows.
func TestLengthLastRows(t *testing.T) {
	src := strings.Replace(smallBounded, "y = linear(x, w)", "y = linear(slice(x, axis=0, start=-1, end=seq), w)", 1)
	src = strings.Replace(src, "outputs: [y]", "outputs:\n      y: f32[1, d]", 1)
	m, err := ir.ParseModelBytes("t.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("f")
	rows, err := ir.LengthRows(f)
	if err != nil {
		t.Fatal(err)
	}
	if f.Length.Outputs[0] {
		t.Errorf("the last row's result is marked bounded")
	}
	var sl *ir.Node
	for _, n := range f.Nodes {
		if n.Op == ir.Slice {
			sl = n
		}
	}
	if r, ok := ir.LastRows(sl, f.Length); !ok || r != 1 || !ir.NeedsLength(sl, rows) || rows[sl.V()] {
		t.Errorf("LastRows %d %v, NeedsLength %v, bounded %v: want 1 row read at the run's end, not bounded", r, ok, ir.NeedsLength(sl, rows), rows[sl.V()])
	}
	g, err := f.At(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Outputs[0].Value.Type().Shape; !got.Equal(ir.Shape{1, 4}) {
		t.Errorf("at 3: result %v, want [1 4]", got)
	}
}
