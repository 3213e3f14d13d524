package ir_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// baseModel is a small valid model; the error cases each change one line of it.
const baseModel = `model: t
dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4}
weights: {init: random, seed: 1}
params:
  w: [d, d]
  layers.{i}.n: [d]
state:
  cache: [ctx, d]
functions:
  f:
    inputs:
      x: f32[1, d]
      pos: i32[]
    outputs: [y]
    body:
      - h = linear(x, w)
      - repeat i in 0..layers:
        - h = rmsnorm(h, layers.{i}.n, eps=1e-5)
      - cache <- cache_write(cache, h, pos)
      - y = mul(h, 0.5)
`

// withLine replaces line n (1-based) of baseModel.
func withLine(n int, text string) string {
	lines := strings.Split(baseModel, "\n")
	lines[n-1] = text
	return strings.Join(lines, "\n")
}

func TestParseBaseModel(t *testing.T) {
	m, err := ir.ParseModelBytes("t.yaml", []byte(baseModel), ".")
	if err != nil {
		t.Fatal(err)
	}
	if m.Dims["hd"] != 4 {
		t.Errorf("hd = %d, want 4", m.Dims["hd"])
	}
	f := m.Function("f")
	if f == nil || len(f.Outputs) != 1 || len(f.Updates) != 1 || f.Updates[0].Name != "cache" {
		t.Fatalf("function f: %+v", f)
	}
	if got := f.Outputs[0].Value.Type(); !got.Equal(ir.T(ir.F32, 1, 8)) {
		t.Errorf("y is %s", got)
	}
	// mul(h, 0.5) makes an f32 scalar constant: the dtype of the other operand.
	mul := f.Outputs[0].Value.Node
	if c := mul.Args[1].Node; c.Op != ir.Const || !c.Type().Equal(ir.T(ir.F32)) || c.Value.Float64(0) != 0.5 {
		t.Errorf("constant: %s", c)
	}
	if len(m.Weights) != 3 || m.Weights["layers.1.n"] == nil {
		t.Errorf("weights: %v", m.Weights)
	}
	if n := f.Nodes[len(f.Nodes)-1]; n.Pos.Line != 20 || n.Pos.File != "t.yaml" {
		t.Errorf("last node at %s, want t.yaml:20", n.Pos)
	}
}

func TestParseModelErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		src  string
		line int      // the line the message must name (0: only the file)
		want []string // substrings of the message
	}{
		{"unknown op", withLine(16, "      - h = linaer(x, w)"), 16, []string{"unknown op linaer", "did you mean linear", "`h = linaer(x, w)`"}},
		{"wrong arity", withLine(16, "      - h = linear(x)"), 16, []string{"wrong arity", "linear takes 2 to 3 arguments, got 1"}},
		{"shape mismatch", withLine(16, "      - h = add(x, reshape(w, shape=[2, 32]))"), 16, []string{"[1,8] and [2,32] do not broadcast"}},
		{"matmul shapes", withLine(16, "      - h = linear(x, reshape(w, shape=[16, 4]))"), 16, []string{"f32[16,4]", "width 8", "f32[1,8]"}},
		{"dtype mismatch", withLine(16, "      - h = add(x, pos)"), 16, []string{"dtypes differ", "f32[1,8]", "i32[]"}},
		{"unknown key", withLine(14, "    outputz: [y]"), 14, []string{`unknown key "outputz"`, "inputs, outputs"}},
		{"unknown top key", withLine(3, "weight: {init: random, seed: 1}"), 3, []string{`unknown key "weight"`}},
		{"unknown attribute", withLine(18, "        - h = rmsnorm(h, layers.{i}.n, eps=1e-5, axis=0)"), 18, []string{`has no attribute "axis"`, "i=0"}},
		{"bad attribute kind", withLine(18, "        - h = rmsnorm(h, layers.{i}.n, eps=true)"), 18, []string{"eps must be float"}},
		{"use before definition", withLine(16, "      - h = linear(z, w)"), 16, []string{"use before definition", "z is not defined"}},
		{"use before later definition", withLine(16, "      - h = linear(y, w)"), 16, []string{"use before definition", "y is assigned only later, at line 20"}},
		{"no weights section", withLine(3, ""), 5, []string{"no weights section"}},
		{"undefined output", withLine(14, "    outputs: [yy]"), 14, []string{"output yy", "use before definition"}},
		{"duplicate param/state", withLine(5, "  cache: [d, d]"), 8, []string{"duplicate name", "cache is already a parameter"}},
		{"duplicate key", withLine(6, "  w: [d]"), 6, []string{`duplicate key "w"`, "line 5"}},
		{"assign to param", withLine(16, "      - w = linear(x, w)"), 16, []string{"duplicate name", "w", "already a parameter"}},
		{"assign to input", withLine(16, "      - x = linear(x, w)"), 16, []string{"duplicate name", "input"}},
		{"duplicate dim", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4, d: 3}"), 2, []string{`duplicate key "d"`}},
		{"unknown dim", withLine(5, "  w: [d, dd]"), 5, []string{"unknown dimension dd"}},
		{"non-integer dim", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4.5}"), 2, []string{"not an integer"}},
		{"zero dim", withLine(5, "  w: [d, d-8]"), 5, []string{"must be positive"}},
		{"state update type", withLine(19, "      - cache <- h"), 19, []string{"state cache is f32[4,8]", "f32[1,8]"}},
		{"update of non-state", withLine(19, "      - y <- h"), 19, []string{"not a declared state"}},
		{"output type", withLine(14, `    outputs: {y: "f32[2, d]"}`), 14, []string{"declared f32[2,8]", "is f32[1,8]"}},
		{"syntax", withLine(16, "      - h = linear(x, w"), 16, []string{"syntax", "want ',' or ')'"}},
		{"bad dtype", withLine(12, "      x: f33[1, d]"), 12, []string{`unknown dtype "f33"`}},
		{"bad repeat bound", withLine(17, "      - repeat i in 0..nope:"), 17, []string{"unknown dimension nope"}},
		{"not a repeat", withLine(17, "      - loop i in 0..layers:"), 17, []string{"neither a statement nor 'repeat"}},
		{"operator on tensors", withLine(20, "      - y = h * 2"), 20, []string{"dimensions only", "mul"}},
		{"source op", withLine(20, "      - y = param(h)"), 20, []string{"source op"}},
		{"rope pos dtype", withLine(20, "      - y = rope(reshape(h, shape=[1, 2, 4]), 0.5)"), 20, []string{"pos must be an i32 scalar", "f32[]"}},
		{"missing functions", strings.Split(baseModel, "functions:")[0], 1, []string{"missing key functions"}},
		{"yaml syntax", withLine(5, "  w: [d, d"), 5, []string{"did not find expected"}},
		{"template without layers", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, ctx: 4}"), 6, []string{"no dimension layers"}},
		{"float index", withLine(18, "        - h = rmsnorm(h, layers.{i/2.0}.n)"), 18, []string{"not an integer"}},
		{"unknown weights key", withLine(3, "weights: {init: random, sed: 1}"), 3, []string{`unknown key "sed"`}},
		{"weights file and init", withLine(3, "weights: {init: random, file: w.safetensors}"), 3, []string{"not both"}},
		{"bad init", withLine(6, "  layers.{i}.n: {shape: [d], init: gaussian}"), 6, []string{"init must be one of"}},
		{"multi-output arity", withLine(16, "      - h, g = linear(x, w)"), 16, []string{"2 targets", "1 output"}},
		{"cast target", withLine(20, "      - y = cast(h, to=f64)"), 20, []string{`unknown dtype "f64"`}},
		// Integer overflow in dimension expressions, repeat bounds and shape attributes is an
		// error, not a wrapped value (32, or "dimension is 0").
		{"product overflow", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4, hidden: 105305443*175173699936}"), 2, []string{"overflows", "105305443 × 175173699936 is more than 2199023254528"}},
		{"product wraps to 0", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4, big: 4294967296*4294967296}"), 2, []string{"overflows"}},
		{"sum overflow", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4, big: 2199023254528+2199023254528}"), 2, []string{"overflows", "beyond"}},
		{"literal too large", withLine(2, "dims: {d: 8, heads: 2, hd: d/heads, layers: 2, ctx: 4, big: 99999999999999999999}"), 2, []string{"out of range"}},
		{"shape elements overflow", withLine(5, "  w: [2000000000, 2000000000, 2000000000]"), 5, []string{"too large"}},
		{"repeat bound overflow", withLine(17, "      - repeat i in 0..4294967296*4294967296:"), 17, []string{"repeat bound", "overflows"}},
		{"reshape shape overflow", withLine(20, "      - y = reshape(h, shape=[4294967296, 4294967296, 4294967296])"), 20, []string{"reshape", "overflows"}},
		{"expand shape overflow", withLine(20, "      - y = expand(h, shape=[4294967296, 4294967296, 4294967296, 8])"), 20, []string{"expand", "overflows"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ir.ParseModelBytes("t.yaml", []byte(c.src), ".")
			if err == nil {
				t.Fatalf("no error for:\n%s", c.src)
			}
			msg := err.Error()
			prefix := "t.yaml:"
			if c.line > 0 {
				prefix = "t.yaml:" + strconv.Itoa(c.line) + ":"
			}
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("message does not start with %q: %s", prefix, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q: %s", w, msg)
				}
			}
		})
	}
}

// TestParseWeightsFile checks loading from safetensors: name templates, conversion to the declared
// dtype, and the errors for a missing or mis-shaped weight.
func TestParseWeightsFile(t *testing.T) {
	dir := t.TempDir()
	f32 := func(shape ...int) *ir.Tensor {
		x := ir.NewTensor(ir.T(ir.F32, shape...))
		for i := 0; i < x.NumElements(); i++ {
			x.SetFloat64(i, float64(i)/8)
		}
		return x
	}
	write := func(name string, m map[string]*ir.Tensor) {
		if err := safetensors.Write(filepath.Join(dir, name), m); err != nil {
			t.Fatal(err)
		}
	}
	write("good.safetensors", map[string]*ir.Tensor{
		"proj.weight": f32(8, 8), "blocks.0.norm": f32(8).Convert(ir.BF16), "blocks.1.norm": f32(8).Convert(ir.F16),
	})
	write("missing.safetensors", map[string]*ir.Tensor{"proj.weight": f32(8, 8), "blocks.0.norm": f32(8)})
	write("misshaped.safetensors", map[string]*ir.Tensor{"proj.weight": f32(8, 4), "blocks.0.norm": f32(8), "blocks.1.norm": f32(8)})
	src := func(file string) string {
		s := strings.Replace(baseModel, "weights: {init: random, seed: 1}", `weights:
  file: `+file+`
  names:
    w: proj.weight
    layers.{i}.n: blocks.{i}.norm`, 1)
		return strings.Replace(s, "  w: [d, d]", "  w: f16[d, d]", 1)
	}
	m, err := ir.ParseModelBytes("t.yaml", []byte(src("good.safetensors")), dir)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Weights["w"]; w.Type.DType != ir.F16 || w.Float64(9) != 9.0/8 {
		t.Errorf("w: %s, w[9] = %v", w.Type, w.Float64(9))
	}
	if n := m.Weights["layers.1.n"]; n.Type.DType != ir.F32 || n.Float64(3) != 3.0/8 {
		t.Errorf("layers.1.n: %s", n.Type)
	}
	// A tensor of the file's own dtype aliases the file's mapping (WeightFile finds it at its
	// entry's offset, the file holds its bytes there); a converted one is a copy of its own.
	sf, err := safetensors.Open(filepath.Join(dir, "good.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if _, _, ok := m.WeightFile(m.Weights["layers.0.n"].Data); ok { // bf16 in the file, f32 here
		t.Errorf("a converted weight is reported as mapped from the file")
	}
	m2, err := ir.ParseModelBytes("t.yaml", []byte(strings.Replace(src("good.safetensors"), "  w: f16[d, d]", "  w: [d, d]", 1)), dir)
	if err != nil {
		t.Fatal(err)
	}
	w := m2.Weights["w"]
	f, off, ok := m2.WeightFile(w.Data[4:])
	if !ok || off != sf.Entries["proj.weight"].Offset+4 {
		t.Fatalf("w is not found in its file: %v at %d, want %d", ok, off, sf.Entries["proj.weight"].Offset+4)
	}
	buf := make([]byte, len(w.Data)-4)
	if _, err := f.ReadAt(buf, off); err != nil || !bytes.Equal(buf, w.Data[4:]) {
		t.Errorf("the file's bytes at the reported offset are not w's: %v", err)
	}
	if _, _, ok := m2.WeightFile(make([]byte, 8)); ok {
		t.Errorf("a slice of other memory is reported as mapped")
	}
	if err := m2.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, _, ok := m2.WeightFile(w.Data); ok {
		t.Errorf("WeightFile after Close still finds the mapping")
	}
	_, err = ir.ParseModelBytes("t.yaml", []byte(src("missing.safetensors")), dir)
	if err == nil || !strings.Contains(err.Error(), "missing weight") || !strings.Contains(err.Error(), `"blocks.1.norm"`) || !strings.Contains(err.Error(), "layers.1.n") {
		t.Errorf("missing weight: %v", err)
	}
	_, err = ir.ParseModelBytes("t.yaml", []byte(src("misshaped.safetensors")), dir)
	if err == nil || !strings.Contains(err.Error(), "declared [8,8]") || !strings.Contains(err.Error(), "[8,4]") || !strings.HasPrefix(err.Error(), "t.yaml:") {
		t.Errorf("mis-shaped weight: %v", err)
	}
	_, err = ir.ParseModelBytes("t.yaml", []byte(src("absent.safetensors")), dir)
	if err == nil || !strings.Contains(err.Error(), "absent.safetensors") {
		t.Errorf("absent file: %v", err)
	}
}

// TestParseWeightShards: weights: files: reads each parameter from the shard that has it, each
// shard memory-mapped; a tensor in two shards, file and files together and a shard listed twice
// are errors; the tokenizer key names a file relative to the model.
func TestParseWeightShards(t *testing.T) {
	dir := t.TempDir()
	val := func(shape []int, v float64) *ir.Tensor {
		x := ir.NewTensor(ir.T(ir.F32, shape...))
		for i := 0; i < x.NumElements(); i++ {
			x.SetFloat64(i, v)
		}
		return x
	}
	for name, m := range map[string]map[string]*ir.Tensor{
		"a.safetensors":   {"proj.weight": val([]int{8, 8}, 1)},
		"b.safetensors":   {"blocks.0.norm": val([]int{8}, 2), "blocks.1.norm": val([]int{8}, 3)},
		"dup.safetensors": {"blocks.1.norm": val([]int{8}, 4)},
	} {
		if err := safetensors.Write(filepath.Join(dir, name), m); err != nil {
			t.Fatal(err)
		}
	}
	src := func(weights string) string {
		return strings.Replace(baseModel, "weights: {init: random, seed: 1}", "tokenizer: tok/tokenizer.json\nweights:\n"+weights+`
  names:
    w: proj.weight
    layers.{i}.n: blocks.{i}.norm`, 1)
	}
	m, err := ir.ParseModelBytes("t.yaml", []byte(src("  files: [a.safetensors, b.safetensors]")), dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Weights["w"].Float64(5) != 1 || m.Weights["layers.0.n"].Float64(0) != 2 || m.Weights["layers.1.n"].Float64(7) != 3 {
		t.Errorf("shards read wrongly")
	}
	for _, n := range []string{"w", "layers.1.n"} {
		if _, _, ok := m.WeightFile(m.Weights[n].Data); !ok {
			t.Errorf("%s is not mapped from its shard", n)
		}
	}
	if want := filepath.Join(dir, "tok", "tokenizer.json"); m.Tokenizer != want {
		t.Errorf("tokenizer %q, want %q", m.Tokenizer, want)
	}
	m.Close()
	for _, c := range []struct{ weights, want string }{
		{"  files: [a.safetensors, b.safetensors, dup.safetensors]", "tensor blocks.1.norm is in both"},
		{"  file: a.safetensors\n  files: [b.safetensors]", "give file or files, not both"},
		{"  files: [a.safetensors, a.safetensors]", "a.safetensors is listed twice"},
		{"  files: []", "want a list of weight files"},
		{"  files: [a.safetensors]", "missing weight: a.safetensors has no tensor"},
		{"  files: [a.safetensors, dup.safetensors]", `missing weight: a.safetensors, dup.safetensors has no tensor "blocks.0.norm"`},
	} {
		_, err := ir.ParseModelBytes("t.yaml", []byte(src(c.weights)), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.weights, err, c.want)
		}
	}
}

// TestParseSharedBodyAndExpressions covers a YAML anchor shared by two functions with different
// dims, attribute arithmetic, float attributes from sqrt, and a state read after its update.
func TestParseSharedBodyAndExpressions(t *testing.T) {
	src := `model: s
dims: {d: 6, heads: 3, hd: d/heads, ctx: 8}
state:
  kc: [ctx, heads, hd]
functions:
  a:
    dims: {seq: 4}
    inputs: {pos: "i32[]", x: "f32[seq, d]"}
    outputs: [o]
    body: &b
      - q = reshape(x, shape=[seq, heads, (d - 0) / heads])
      - kc <- cache_write(kc, q, pos)
      - o = attention(q, kc, kc, add(pos, seq), scale=1/sqrt(hd), causal=true)
  b:
    dims: {seq: 1}
    inputs: {pos: "i32[]", x: "f32[seq, d]"}
    outputs: [o]
    body: *b
`
	m, err := ir.ParseModelBytes("s.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	for fn, seq := range map[string]int{"a": 4, "b": 1} {
		f := m.Function(fn)
		o := f.Outputs[0].Value
		if !o.Type().Equal(ir.T(ir.F32, seq, 3, 2)) {
			t.Errorf("%s: o is %s", fn, o.Type())
		}
		if got := o.Node.Attrs.Float("scale", 0); got != 1/1.4142135623730951 {
			t.Errorf("%s: scale %v", fn, got)
		}
		// attention reads the updated cache, not the state as it came in
		if o.Node.Args[1].Node.Op != ir.CacheWrite {
			t.Errorf("%s: attention reads %s", fn, o.Node.Args[1].Node)
		}
		if kv := o.Node.Args[3].Node; kv.Op != ir.Add || kv.Args[1].Node.Value.Float64(0) != float64(seq) {
			t.Errorf("%s: kv_len is %s", fn, kv)
		}
	}
}

// TestExpressionSyntax checks dimension arithmetic and its errors.
func TestExpressionSyntax(t *testing.T) {
	for _, c := range []struct {
		dim  string
		want int
		err  string
	}{
		{"2+3*4", 14, ""}, {"(2+3)*4", 20, ""}, {"17/5", 3, ""}, {"17%5", 2, ""}, {"-3+10", 7, ""},
		{"a*2", 10, ""}, {"a/0", 0, "division by zero"}, {"2.5", 0, "not an integer"}, {"a+", 0, "want an expression"},
		{"sqrt(16)", 0, "not an integer"}, {"foo(1)", 0, "not allowed"}, {"(1", 0, "want ')'"}, {"1 2", 0, "unexpected"},
	} {
		src := "model: e\ndims: {a: 5, x: " + c.dim + "}\nfunctions: {f: {inputs: {v: \"f32[x]\"}, outputs: [v], body: []}}\n"
		if c.dim == "a/0" || c.err != "" {
			src = "model: e\ndims: {a: 5, x: \"" + c.dim + "\"}\nfunctions: {f: {inputs: {v: \"f32[1]\"}, outputs: [v], body: []}}\n"
		}
		m, err := ir.ParseModelBytes("e.yaml", []byte(src), ".")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.HasPrefix(err.Error(), "e.yaml:2:") {
				t.Errorf("%s: error %v, want %q at e.yaml:2", c.dim, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.dim, err)
			continue
		}
		if m.Dims["x"] != c.want {
			t.Errorf("%s = %d, want %d", c.dim, m.Dims["x"], c.want)
		}
	}
}

// FuzzParseModel feeds arbitrary text to the parser: it must return a model or an error, never
// panic or hang. Weights are skipped so a fuzzed shape cannot allocate gigabytes, and functions
// are limited to 500 statements so a fuzzed layer count does not make one input take seconds.
func FuzzParseModel(f *testing.F) {
	f.Add([]byte(baseModel))
	// Small seeds only: the fuzzer minimises every new interesting input, which takes long
	// for a 3 KB model and left a brief CI run with a handful of executions.
	for _, p := range []string{"../examples/mlp/model.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("model: x\nfunctions: {f: {outputs: [a], body: [\"a = add(1, 2.5)\"]}}"))
	f.Fuzz(func(t *testing.T, src []byte) {
		m, err := ir.ParseModelBytesWith("fuzz.yaml", src, ".", ir.ParseOptions{SkipWeights: true, MaxStatements: 500})
		if err == nil {
			if verr := m.Validate(); verr != nil {
				t.Fatalf("parsed model does not validate: %v", verr)
			}
		}
	})
}

// TestModelSizeBounds: a model file larger than ParseOptions.MaxBytes is refused before it is
// read (a sparse file claiming gigabytes, or an endless pipe, costs nothing), and a function
// graph larger than MaxNodes stops the build.
func TestModelSizeBounds(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse.yaml")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(baseModel)
	f.Truncate(30 << 30) // 30 GiB of holes
	f.Close()
	_, err = ir.ParseModel(sparse)
	if err == nil || !strings.Contains(err.Error(), "32212254720 bytes, more than a model file may have (4194304") {
		t.Errorf("sparse 30 GiB file: %v", err)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		chunk := []byte(strings.Repeat("# padding\n", 1<<16))
		for {
			if _, err := w.Write(chunk); err != nil {
				w.Close()
				return
			}
		}
	}()
	_, err = ir.ParseModel(fmt.Sprintf("/dev/fd/%d", r.Fd()))
	r.Close()
	if err == nil || !strings.Contains(err.Error(), "more than 4194304 bytes") {
		t.Errorf("endless pipe: %v", err)
	}

	small := filepath.Join(dir, "m.yaml")
	os.WriteFile(small, []byte(baseModel), 0o644)
	if _, err := ir.ParseModelWith(small, ir.ParseOptions{MaxBytes: 100}); err == nil || !strings.Contains(err.Error(), "more than a model file may have (100") {
		t.Errorf("MaxBytes 100: %v", err)
	}
	if _, err := ir.ParseModelWith(small, ir.ParseOptions{MaxNodes: 4}); err == nil || !strings.Contains(err.Error(), "more than 4 nodes") {
		t.Errorf("MaxNodes 4: %v", err)
	}
	if _, err := ir.ParseModelWith(small, ir.ParseOptions{}); err != nil {
		t.Errorf("the default bounds refuse the base model: %v", err)
	}
}

// TestMessagesQuoteSafely: a message quotes the model's text without letting a terminal obey it
// (control characters escaped), shows non-ASCII characters as themselves (not as the bytes of
// their UTF-8 encoding), and shows a long statement once, cut.
func TestMessagesQuoteSafely(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
		not       []string
		max       int // bytes of the message at most (0: no bound)
	}{
		{"control characters in the name", strings.Replace(baseModel, "model: t", `model: "t\x1b[31m\a"`, 1),
			[]string{`t.yaml:1: model: the model name "t\x1b[31m\a" has control characters`}, []string{"\x1b", "\a"}, 0},
		{"non-ASCII identifier", withLine(16, "      - h = linéar(x, w)"),
			[]string{"`h = linéar(x, w)`", "unexpected character 'é' (U+00E9)"}, []string{"Ã"}, 0},
		{"control character in a statement", withLine(16, "      - \"h = linear(x,\\x1b[2J w)\""),
			[]string{`\x1b[2J`}, []string{"\x1b"}, 0},
		{"long statement", withLine(16, "      - h = linear(x"+strings.Repeat(" ", 1<<20)+", w"),
			[]string{"`h = linear(x", "…`"}, nil, 1500},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ir.ParseModelBytes("t.yaml", []byte(c.src), ".")
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q: %s", w, ir.SafeText(msg, 2000))
				}
			}
			for _, w := range c.not {
				if strings.Contains(msg, w) {
					t.Errorf("message holds %q: %s", w, ir.SafeText(msg, 2000))
				}
			}
			if c.max > 0 && len(msg) > c.max {
				t.Errorf("message is %d bytes", len(msg))
			}
		})
	}
}
