package plan

import (
	"bytes"
	"os"
	"path/filepath"
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
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, append([]byte("12345"), region[32:80]...), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
	path := filepath.Join(t.TempDir(), "rows.bin")
	file := make([]byte, 40) // 5 bytes of header, then 7 rows of 5 bytes
	for i := range file {
		file[i] = byte(i)
	}
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
