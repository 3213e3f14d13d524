package plan

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A plan whose inline weights are pieces (memory and a file) encodes to the same bytes as the
// same plan with the region in Data, and Bytes, Spans and LoadWeights see the same region.
func TestWeightPieces(t *testing.T) {
	p := smallPlan()
	region := append([]byte(nil), p.Weights.Data...)
	for i := range region {
		region[i] = byte(3*i + 1)
	}
	// The pieces: bytes 0..16 in memory, 32..80 from a file at offset 5; 16..32 and 80..96 zero.
	copy(region[16:32], make([]byte, 16))
	copy(region[80:], make([]byte, 16))
	p.Weights.Data = region
	var want bytes.Buffer
	if err := p.Encode(&want); err != nil {
		t.Fatal(err)
	}
	f := weightFile(t, append([]byte("12345"), region[32:80]...))
	q := smallPlan()
	q.Weights.Data = nil
	q.Weights.Pieces = []WeightPiece{{Offset: 0, Size: 16, Data: region[:16]}, {Offset: 32, Size: 48, File: f, FileOffset: 5}}
	var got bytes.Buffer
	if err := q.Encode(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("pieces encode to %d bytes that differ from Data's %d", got.Len(), want.Len())
	}
	b, err := q.Weights.Bytes()
	if err != nil || !bytes.Equal(b, region) {
		t.Fatalf("Bytes: %v, equal %v", err, bytes.Equal(b, region))
	}
	var spans []byte
	if err := q.Weights.Spans(10, func(off uint64, b []byte) error {
		if off != uint64(len(spans)) || len(b) > 10 {
			t.Fatalf("span at %d of %d bytes after %d bytes", off, len(b), len(spans))
		}
		spans = append(spans, b...)
		return nil
	}); err != nil || !bytes.Equal(spans, region) {
		t.Fatalf("Spans: %v, equal %v", err, bytes.Equal(spans, region))
	}
	if lw, err := q.LoadWeights(""); err != nil || !bytes.Equal(lw, region) {
		t.Fatalf("LoadWeights: %v", err)
	}
	// A file that went away is an error of Encode, not a plan with wrong bytes.
	f.Close()
	if err := q.Encode(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "weight file") {
		t.Errorf("encode with a closed weight file: %v", err)
	}
}

func TestWeightPiecesValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		pieces []WeightPiece
		want   string
	}{
		{"overlap", []WeightPiece{{Offset: 0, Size: 16, Data: make([]byte, 16)}, {Offset: 8, Size: 8, Data: make([]byte, 8)}}, "overlaps"},
		{"outside", []WeightPiece{{Offset: 90, Size: 16, Data: make([]byte, 16)}}, "outside the 96-byte"},
		{"size", []WeightPiece{{Offset: 0, Size: 16, Data: make([]byte, 8)}}, "8 bytes of data for a size of 16"},
		{"nothing", []WeightPiece{{Offset: 0, Size: 16}}, "neither data nor a file"},
	} {
		p := smallPlan()
		p.Weights.Data, p.Weights.Pieces = nil, c.pieces
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	p := smallPlan()
	p.Weights.Pieces = []WeightPiece{{Offset: 0, Size: 16, Data: make([]byte, 16)}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "both inline data and pieces") {
		t.Errorf("data and pieces: %v", err)
	}
}

// Pieces that are rows of one file in another order (a weight reordered for a kernel) are read
// in one call and land where the plan puts them.
func TestWeightPiecesPermutedRows(t *testing.T) {
	file := make([]byte, 40) // 5 bytes of header, then 7 rows of 5 bytes
	for i := range file {
		file[i] = byte(i)
	}
	f := weightFile(t, file)
	perm := []int{3, 1, 6, 0, 2}
	w := Weights{Size: 96}
	want := make([]byte, 96)
	for i, r := range perm {
		w.Pieces = append(w.Pieces, WeightPiece{Offset: uint64(10 + 5*i), Size: 5, File: f, FileOffset: int64(5 + 5*r)})
		copy(want[10+5*i:], file[5+5*r:10+5*r])
	}
	got, err := w.Bytes()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("permuted rows: %v\n got %v\nwant %v", err, got, want)
	}
}

// Spans fills runs of several fillParts in parallel parts: pieces from memory and from a file,
// some crossing the runs' and the parts' boundaries, many small ones, and gaps, give the region
// Bytes gives; a read that fails is an error of Spans.
func TestWeightSpansParallel(t *testing.T) {
	const size = 5*fillPart + 12345
	region := make([]byte, size)
	for i := range region {
		region[i] = byte(i*13 + i>>16)
	}
	f := weightFile(t, region)
	var pieces []WeightPiece
	file := func(a, b uint64) {
		pieces = append(pieces, WeightPiece{Offset: a, Size: b - a, File: f, FileOffset: int64(a)})
	}
	mem := func(a, b uint64) { pieces = append(pieces, WeightPiece{Offset: a, Size: b - a, Data: region[a:b]}) }
	file(0, 3*fillPart+7)                // across runs and parts
	mem(3*fillPart+100, 3*fillPart+5000) // a gap before it
	for a := uint64(3*fillPart + 8192); a < 4*fillPart; a += 4096 {
		file(a, a+1000) // many small pieces, gaps between
	}
	file(4*fillPart, size-50) // zeros at the end
	want := make([]byte, size)
	for _, pc := range pieces {
		copy(want[pc.Offset:], region[pc.Offset:pc.Offset+pc.Size])
	}
	w := Weights{Size: size, Pieces: pieces}
	if b, err := w.Bytes(); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("Bytes: %v, equal %v", err, bytes.Equal(b, want))
	}
	for _, max := range []uint64{3 * fillPart, 2*fillPart + 1, size} {
		var got []byte
		if err := w.Spans(max, func(off uint64, b []byte) error {
			if off != uint64(len(got)) || uint64(len(b)) > max {
				t.Fatalf("span at %d of %d bytes after %d bytes", off, len(b), len(got))
			}
			got = append(got, b...)
			return nil
		}); err != nil || !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("Spans(%d): %v; %d bytes, first difference at %d", max, err, len(got), i)
		}
	}
	f.Close()
	if err := w.Spans(3*fillPart, func(uint64, []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "weight file") {
		t.Errorf("Spans with a closed weight file: %v", err)
	}
}

// BenchmarkWeightSpans: a region of file-backed pieces (as a plan just compiled from a GGUF or
// safetensors file holds its weights) gathered in 128 MiB runs, as Load uploads them.
// VKC_BENCH_SPANS_MB sets the size (default 512); the file is in the page cache after the first
// pass.
func BenchmarkWeightSpans(b *testing.B) {
	mb := 512
	if v, err := strconv.Atoi(os.Getenv("VKC_BENCH_SPANS_MB")); err == nil && v > 0 {
		mb = v
	}
	size := uint64(mb) << 20
	f := weightFile(b, bytes.Repeat([]byte("weights!"), int(size/8)))
	w := Weights{Size: size}
	for a := uint64(0); a < size; a += 56 << 20 { // tensors of 56 MiB, the 8B's 14336×4096 Q8_0
		w.Pieces = append(w.Pieces, WeightPiece{Offset: a, Size: min(56<<20, size-a), File: f, FileOffset: int64(a)})
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		if err := w.Spans(128<<20, func(uint64, []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// weightFile is an open file in a temporary folder holding data, closed when the test ends.
func weightFile(tb testing.TB, data []byte) *os.File {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "weights.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}
