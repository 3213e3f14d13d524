package runtime

import (
	"bytes"
	"os"
	"testing"

	"github.com/vkc-project/vkc/plan"
)

// weightKey: plans whose regions are made of the same bytes at the same places share a key; a
// piece at another offset, of other bytes (another array) or of another file, or a tensor laid
// out otherwise, gives another; a piece of a file weightKey cannot identify gives none.
func TestWeightKey(t *testing.T) {
	a, b := make([]byte, 64), make([]byte, 64)
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	weights := func(data []byte, off uint64, file *os.File, layout string) *plan.Weights {
		return &plan.Weights{Size: 256,
			Tensors: []plan.WeightTensor{{Name: "w", DType: plan.F16, Shape: []int64{8, 8}, Layout: layout, Offset: 0, Size: 128}},
			Pieces: []plan.WeightPiece{{Offset: off, Size: 64, Data: data},
				{Offset: 128, Size: 64, File: file, FileOffset: 4096}}}
	}
	key := func(w *plan.Weights) string {
		k, keep, ok := weightKey(w)
		if !ok || len(keep) == 0 {
			t.Fatalf("weightKey: ok %v, %d kept", ok, len(keep))
		}
		return k
	}
	base := key(weights(a, 0, f, ""))
	if k := key(weights(a, 0, f, "")); k != base {
		t.Errorf("the same weights: keys differ:\n%q\n%q", k, base)
	}
	for name, w := range map[string]*plan.Weights{
		"another array":  weights(b, 0, f, ""),
		"another offset": weights(a, 64, f, ""),
		"another file":   weights(a, 0, g, ""),
		"another layout": weights(a, 0, f, "transposed"),
	} {
		if key(w) == base {
			t.Errorf("%s: the same key", name)
		}
	}
	w := weights(a, 0, f, "")
	w.Pieces[1].File = bytes.NewReader(nil) // a pointer: identified
	key(w)
	w.Pieces[1].File = valueReader{} // not a pointer
	if _, _, ok := weightKey(w); ok {
		t.Error("a piece of a value-typed reader identified")
	}
}

type valueReader struct{}

func (valueReader) ReadAt(p []byte, off int64) (int, error) { return 0, nil }

// BenchmarkWeightKey: a region of SmolLM2-135M's size in pieces (114,992 in its compiled plan).
func BenchmarkWeightKey(b *testing.B) {
	data := make([]byte, 1<<20)
	w := &plan.Weights{Size: 1 << 28}
	for i := range 114992 {
		w.Pieces = append(w.Pieces, plan.WeightPiece{Offset: uint64(i) * 2048, Size: 2048, Data: data[i%256*2048:][:2048]})
	}
	for b.Loop() {
		weightKey(w)
	}
}
