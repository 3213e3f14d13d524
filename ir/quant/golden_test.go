package quant_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/quant"
)

// TestQuantBlocksOracle dequantizes llama.cpp's one-tensor-per-type blocks files and compares
// bit for bit with the values ggml's own dequantize_row_* gave (the golden): the shared oracle's
// (the formats up to Q8_K) and testdata/ggml-blocks (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, made the
// same way by scripts/oracles/ggml_blocks.py). Every block format of the table is in one of them.
func TestQuantBlocksOracle(t *testing.T) {
	seen := map[*quant.Format]bool{}
	checkBlocksFile(t, filepath.Join("..", "..", "testdata", "ggml-blocks", "quant-blocks-new"), seen)
	shared := oracles.File(t, "llamacpp", "blocks/quant-blocks.gguf")
	checkBlocksFile(t, shared[:len(shared)-len(".gguf")], seen)
	for _, fm := range quant.Formats {
		if !seen[fm] && fm != quant.FormatBF16 {
			t.Errorf("no oracle has a tensor of %s", fm.Name)
		}
	}
}

// checkBlocksFile checks base.gguf against base.golden.safetensors.
func checkBlocksFile(t *testing.T, base string, seen map[*quant.Format]bool) {
	t.Helper()
	gold, err := ir.ReadSafetensors(base + ".golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(base + ".gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		want := gold[ti.Name]
		if want == nil {
			t.Fatalf("%s: golden has no tensor %s", base, ti.Name)
		}
		if ti.Format == nil || ti.Format.Name != ti.Name {
			t.Fatalf("%s: tensor %s has type %s", base, ti.Name, ti.TypeName())
		}
		seen[ti.Format] = true
		y, err := f.Dequantize(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(y) != want.NumElements() || !want.Type.Shape.Equal(ir.Shape(ti.Shape())) {
			t.Fatalf("%s: shape %v, golden %s", ti.Name, ti.Shape(), want.Type)
		}
		bad := 0
		for i, v := range y {
			w := float32(want.Float64(i))
			if math.Float32bits(v) != math.Float32bits(w) {
				if bad < 5 {
					t.Errorf("%s: element %d (row %d col %d) = %v (%08x), ggml %v (%08x)", ti.Name, i, i/512, i%512, v, math.Float32bits(v), w, math.Float32bits(w))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d elements differ from ggml", ti.Name, bad, len(y))
		}
		// The table-driven decoder (what kernels follow) agrees too.
		if ti.Format.Quantized() {
			b, _ := f.Data(ti.Name)
			fm := ti.Format
			for i := range y {
				blk := b[i/fm.BlockElems*fm.BlockBytes:]
				if e := fm.Element(blk, i%fm.BlockElems); math.Float32bits(e) != math.Float32bits(y[i]) {
					t.Fatalf("%s: element %d: layout gives %v, reference %v", ti.Name, i, e, y[i])
				}
			}
		}
	}
}
