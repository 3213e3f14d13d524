package gguf

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir/quant"
)

// sample builds a small file with every metadata type, nested arrays, a plain and a quantized
// tensor, and an alignment of 64.
func sample(t testing.TB, version uint32) []byte {
	b := &Builder{Version: version}
	nested := MustValue([]Value{MustValue([]int32{1, 2}), MustValue([]int32{3})})
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"},
		{"general.alignment", uint32(64)},
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4000000000)}, {"i32", int32(-2000000000)}, {"u64", uint64(1) << 63}, {"i64", int64(-1) << 62},
		{"f32", float32(1e-5)}, {"f64", 0.1}, {"bool", true},
		{"tokenizer.ggml.tokens", []string{"<s>", "</s>", "hé"}},
		{"tokenizer.ggml.scores", []float32{0, -1.5, 2}},
		{"tokenizer.ggml.token_type", []int32{3, 3, 1}},
		{"bools", []bool{true, false}},
		{"u8s", []uint8{1, 2, 255}},
		{"f64s", []float64{0.5}},
		{"nested", nested},
		{"deep", MustValue([]Value{nested})},
		{"empty", []string{}},
	} {
		b.Add(kv.k, MustValue(kv.v))
	}
	f32 := make([]byte, 4*3*2)
	binary.LittleEndian.PutUint32(f32[4:], 0x3f800000) // element 1 = 1.0
	b.Tensor("a", 0, []uint64{3, 2}, f32)
	q := make([]byte, 34*2)
	binary.LittleEndian.PutUint16(q, 0x3800) // block 0: d = 0.5
	q[2] = 4                                 // element 0 = 2
	b.Tensor("q", 8, []uint64{32, 2}, q)
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRoundTrip(t *testing.T) {
	for _, ver := range []uint32{2, 3} {
		f, err := FromBytes("sample.gguf", sample(t, ver))
		if err != nil {
			t.Fatalf("v%d: %v", ver, err)
		}
		if f.Version != ver || f.Alignment != 64 || f.DataOffset%64 != 0 {
			t.Errorf("v%d: version %d alignment %d data at %d", ver, f.Version, f.Alignment, f.DataOffset)
		}
		ints := map[string]int64{"u8": 200, "i8": -100, "u16": 60000, "i16": -30000, "u32": 4000000000, "i32": -2000000000, "i64": -1 << 62}
		for k, w := range ints {
			if got, err := f.Int(k); err != nil || got != w {
				t.Errorf("%s = %d %v, want %d", k, got, err, w)
			}
		}
		if u, err := f.Uint("u64"); err != nil || u != 1<<63 {
			t.Errorf("u64 = %d %v", u, err)
		}
		if _, err := f.Int("u64"); err == nil {
			t.Error("u64 2^63 read as int64 without error")
		}
		if _, err := f.Uint("i8"); err == nil {
			t.Error("negative i8 read as unsigned without error")
		}
		if x, err := f.Float("f32"); err != nil || x != float64(float32(1e-5)) {
			t.Errorf("f32 = %v %v", x, err)
		}
		if x, err := f.Float("f64"); err != nil || x != 0.1 {
			t.Errorf("f64 = %v %v", x, err)
		}
		if x, err := f.Bool("bool"); err != nil || !x {
			t.Errorf("bool = %v %v", x, err)
		}
		if s, err := f.String("general.architecture"); err != nil || s != "llama" {
			t.Errorf("architecture = %q %v", s, err)
		}
		if s, err := f.Strings("tokenizer.ggml.tokens"); err != nil || !reflect.DeepEqual(s, []string{"<s>", "</s>", "hé"}) {
			t.Errorf("tokens = %q %v", s, err)
		}
		if s, err := f.Float32s("tokenizer.ggml.scores"); err != nil || !reflect.DeepEqual(s, []float32{0, -1.5, 2}) {
			t.Errorf("scores = %v %v", s, err)
		}
		if s, err := f.Ints("tokenizer.ggml.token_type"); err != nil || !reflect.DeepEqual(s, []int64{3, 3, 1}) {
			t.Errorf("token types = %v %v", s, err)
		}
		if s, err := f.Ints("u8s"); err != nil || !reflect.DeepEqual(s, []int64{1, 2, 255}) {
			t.Errorf("u8s = %v %v", s, err)
		}
		if v, _ := f.Get("bools"); !reflect.DeepEqual(must(v.Bools()), []bool{true, false}) {
			t.Errorf("bools = %v", v)
		}
		if v, _ := f.Get("f64s"); !reflect.DeepEqual(must(v.Float64s()), []float64{0.5}) {
			t.Errorf("f64s = %v", v)
		}
		v, _ := f.Get("nested")
		inner, ok := v.Values()
		if !ok || len(inner) != 2 || v.TypeString() != "array of array of i32" {
			t.Fatalf("nested = %s %s", v.TypeString(), v)
		}
		if a, _ := inner[0].Ints(); !reflect.DeepEqual(a, []int64{1, 2}) {
			t.Errorf("nested[0] = %v", a)
		}
		if a, _ := inner[1].Ints(); !reflect.DeepEqual(a, []int64{3}) {
			t.Errorf("nested[1] = %v", a)
		}
		deep, _ := f.Get("deep")
		if d, _ := deep.Values(); len(d) != 1 || deep.TypeString() != "array of array of array of i32" {
			t.Errorf("deep = %s", deep.TypeString())
		}
		if e, _ := f.Strings("empty"); e == nil || len(e) != 0 {
			t.Errorf("empty = %#v", e)
		}
		// typed getters: a wrong type and a missing key
		if _, err := f.Strings("tokenizer.ggml.scores"); err == nil || !strings.Contains(err.Error(), "array of f32") {
			t.Errorf("Strings of a float array: %v", err)
		}
		if _, err := f.Uint("tokenizer.ggml.bos_token_id"); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "bos_token_id") {
			t.Errorf("missing key: %v", err)
		}
		// tensors
		a, ok := f.Tensor("a")
		if !ok || !reflect.DeepEqual(a.Shape(), []int{2, 3}) || a.Format != quant.FormatF32 || a.Size != 24 || a.Offset%64 != 0 {
			t.Fatalf("tensor a: %+v", a)
		}
		ya, err := f.Dequantize("a")
		if err != nil || !reflect.DeepEqual(ya, []float32{0, 1, 0, 0, 0, 0}) {
			t.Errorf("a = %v %v", ya, err)
		}
		yq, err := f.Dequantize("q")
		if err != nil || len(yq) != 64 || yq[0] != 2 || yq[1] != 0 {
			t.Errorf("q = %v %v", yq, err)
		}
		if !reflect.DeepEqual(f.Names(), []string{"a", "q"}) {
			t.Errorf("names %v", f.Names())
		}
	}
}

func must[T any](v T, ok bool) T {
	if !ok {
		var zero T
		return zero
	}
	return v
}

func TestOpenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := os.WriteFile(p, sample(t, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Data("a")
	if err != nil || len(d) != 24 || d[7] != 0x3f {
		t.Errorf("data %v %v", d, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Data("a"); err == nil {
		t.Error("data after close: no error")
	}
}

func TestErrors(t *testing.T) {
	good := sample(t, 3)
	patch := func(off int, b ...byte) []byte {
		c := append([]byte(nil), good...)
		copy(c[off:], b)
		return c
	}
	le32 := func(v uint32) []byte { var b [4]byte; binary.LittleEndian.PutUint32(b[:], v); return b[:] }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"magic", patch(0, 'G', 'G', 'M', 'L'), "not a GGUF file"},
		{"v1", patch(4, le32(1)...), "version 1 is not supported"},
		{"big-endian", patch(4, 0, 0, 0, 3), "big-endian"},
		{"v9", patch(4, le32(9)...), "version 9"},
		{"huge tensor count", patch(8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), "tensor count"},
		{"huge kv count", patch(16, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0), "metadata count"},
		{"huge key length", patch(24, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0), "key length"},
	} {
		_, err := FromBytes(c.name+".gguf", c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name+".gguf") {
			t.Errorf("%s: error %v, want one naming the file and saying %q", c.name, err, c.want)
		}
	}
	// Every truncation is an error, never a panic.
	for n := 0; n < len(good); n++ {
		if _, err := FromBytes("t.gguf", good[:n]); err == nil {
			// Only the padding after the last tensor may be cut (no tensor lies there).
			f, _ := FromBytes("t.gguf", good)
			last := f.Tensors[len(f.Tensors)-1]
			if int64(n) < last.Offset+last.Size {
				t.Fatalf("truncated to %d bytes: no error", n)
			}
		}
	}
	// Built errors: duplicate keys and tensors, bad alignment, unknown value type, bad bool.
	build := func(fn func(b *Builder)) error {
		b := &Builder{}
		fn(b)
		data, err := b.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		_, err = FromBytes("b.gguf", data)
		return err
	}
	checks := []struct {
		name string
		fn   func(b *Builder)
		want string
	}{
		{"dup key", func(b *Builder) { b.Add("k", MustValue(uint32(1))); b.Add("k", MustValue(uint32(2))) }, "appears twice"},
		{"dup tensor", func(b *Builder) {
			b.Tensor("t", 0, []uint64{1}, make([]byte, 4))
			b.Tensor("t", 0, []uint64{1}, make([]byte, 4))
		}, "tensor t appears twice"},
		{"alignment type", func(b *Builder) { b.Add("general.alignment", MustValue(uint64(32))) }, "general.alignment"},
		{"alignment value", func(b *Builder) { b.Add("general.alignment", MustValue(uint32(48))) }, "power of two"},
		{"five dims", func(b *Builder) { b.Tensor("t", 0, []uint64{1, 1, 1, 1, 1}, make([]byte, 4)) }, "at most 4"},
		{"partial block", func(b *Builder) { b.Tensor("w", 12, []uint64{100, 2}, make([]byte, 288)) }, "tensor w"},
		{"past the end", func(b *Builder) { b.Tensor("w", 0, []uint64{1000}, make([]byte, 4)) }, "past the end"},
	}
	for _, c := range checks {
		if err := build(c.fn); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	// An unknown tensor type parses (the metadata stays readable) but reading it names it.
	b := &Builder{}
	b.Tensor("blk.0.attn_q.weight", 16, []uint64{256, 2}, make([]byte, 132))
	data, _ := b.Bytes()
	f, err := FromBytes("iq.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Data("blk.0.attn_q.weight"); err == nil || !strings.Contains(err.Error(), "blk.0.attn_q.weight") || !strings.Contains(err.Error(), "iq2_xxs") {
		t.Errorf("unknown type: %v", err)
	}
	// A misaligned tensor offset.
	c := append([]byte(nil), good...)
	ff, _ := FromBytes("x", good)
	_ = ff
	idx := strings.Index(string(c), "\x01\x00\x00\x00\x00\x00\x00\x00q") // the name "q" (length 1)
	if idx < 0 {
		t.Fatal("cannot find tensor q in the sample")
	}
	// name (8+1), n_dims 4, dims 16, type 4, offset 8
	off := idx + 9 + 4 + 16 + 4
	binary.LittleEndian.PutUint64(c[off:], binary.LittleEndian.Uint64(c[off:])+4)
	if _, err := FromBytes("mis.gguf", c); err == nil || !strings.Contains(err.Error(), "not a multiple of the alignment") {
		t.Errorf("misaligned offset: %v", err)
	}
}

// TestOracleFiles reads every GGUF of the llama.cpp oracle: metadata keys the importer needs,
// and every tensor's bytes within the file.
func TestOracleFiles(t *testing.T) {
	root := oracleDir(t)
	paths, _ := filepath.Glob(filepath.Join(root, "*", "*.gguf"))
	if len(paths) < 10 {
		t.Fatalf("found %d GGUF files in %s", len(paths), root)
	}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		arch, err := f.String("general.architecture")
		if err != nil {
			t.Fatal(err)
		}
		if arch != "quant-blocks" {
			// block_count: the blocks the tensors hold (2, or 4 for gemma3-tiny).
			n, err := f.Uint(arch + ".block_count")
			last := "blk." + strconv.FormatUint(n-1, 10) + ".attn_norm.weight"
			if _, ok := f.Tensor(last); err != nil || n < 2 || !ok {
				t.Errorf("%s: block_count %d %v (tensor %s: %v)", p, n, err, last, ok)
			}
			if _, ok := f.Tensor("blk." + strconv.FormatUint(n, 10) + ".attn_norm.weight"); ok {
				t.Errorf("%s: block_count %d, but there is a block %d", p, n, n)
			}
			if e, err := f.Float(arch + ".attention.layer_norm_rms_epsilon"); err != nil || e <= 0 {
				t.Errorf("%s: eps %v %v", p, e, err)
			}
		}
		for _, ti := range f.Tensors {
			if _, err := f.Data(ti.Name); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
		f.Close()
	}
}

func oracleDir(t *testing.T) string {
	// ir/gguf → module root is two levels up; the oracle lives beside the repository.
	d, _ := filepath.Abs(filepath.Join("..", "..", "..", "shared", "oracles", "llamacpp"))
	if _, err := os.Stat(d); err != nil {
		t.Skipf("oracle ../shared/oracles/llamacpp missing (looked in %s)", d)
	}
	return d
}

// FuzzGGUF: no input makes the parser panic, hang or allocate without bound; whatever it
// accepts has every tensor inside the file.
func FuzzGGUF(f *testing.F) {
	f.Add(sample(f, 3))
	f.Add(sample(f, 2))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := FromBytes("fuzz.gguf", data)
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			if ti.Format == nil {
				continue
			}
			if ti.Offset < g.DataOffset || ti.Offset+ti.Size > int64(len(data)) {
				t.Fatalf("tensor %s at %d+%d outside a file of %d", ti.Name, ti.Offset, ti.Size, len(data))
			}
			if _, err := g.Data(ti.Name); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestNestedArraysBounded: 48 MB of empty arrays nested in one array (4 million values of
// 12 bytes each in the file) took 1.13 GB of memory to parse; they are refused once the
// file's nested arrays pass maxNestedValues.
func TestNestedArraysBounded(t *testing.T) {
	const n = 4 << 20
	le := binary.LittleEndian
	b := []byte(Magic)
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 0) // tensors
	b = le.AppendUint64(b, 1) // metadata entries
	key := "x.nested"
	b = le.AppendUint64(b, uint64(len(key)))
	b = append(b, key...)
	b = le.AppendUint32(b, uint32(Array))
	b = le.AppendUint32(b, uint32(Array))
	b = le.AppendUint64(b, n)
	for range n {
		b = le.AppendUint32(b, uint32(Uint8))
		b = le.AppendUint64(b, 0)
	}
	_, err := FromBytes("nested.gguf", b)
	if err == nil || !strings.Contains(err.Error(), "arrays of arrays hold more than 1048576 values in all") {
		t.Errorf("%d empty nested arrays: %v", n, err)
	}
}

// TestOverlappingTensors: a file whose tensors share bytes is refused, naming both.
func TestOverlappingTensors(t *testing.T) {
	var b Builder
	b.Tensor("a", quant.FormatF32.GGML, []uint64{8}, make([]byte, 32))
	b.Tensor("b", quant.FormatF32.GGML, []uint64{8}, make([]byte, 32))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromBytes("ok.gguf", data); err != nil {
		t.Fatal(err)
	}
	idx := strings.Index(string(data), "\x01\x00\x00\x00\x00\x00\x00\x00b") // the name "b"
	off := idx + 9 + 4 + 8 + 4                                              // name, n_dims, one dim, type: the offset
	binary.LittleEndian.PutUint64(data[off:], 0)                            // over a
	if _, err := FromBytes("overlap.gguf", data); err == nil || !strings.Contains(err.Error(), "tensors a (bytes") || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping tensors: %v", err)
	}
}
