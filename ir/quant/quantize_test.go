package quant_test

import (
	"bytes"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/quant"
)

// TestQuantizeOracle: vkc's quantizers (a KV cache in q8_0 or q4_0) give ggml's blocks byte for
// byte: the oracle's q8_0 and q4_0 tensors were written by ggml_quantize_chunk (without an
// importance matrix: quantize_row_q8_0_ref, quantize_row_q4_0_ref) from its golden source,
// whose rows include zeros, ±20 outliers and small values.
func TestQuantizeOracle(t *testing.T) {
	path := oracles.File(t, "llamacpp", "blocks/quant-blocks.gguf")
	gold, err := ir.ReadSafetensors(oracles.File(t, "llamacpp", "blocks/quant-blocks.golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := gold["source"]
	x := make([]float32, src.NumElements())
	for i := range x {
		x[i] = float32(src.Float64(i))
	}
	n := 0
	for _, fm := range quant.Formats {
		if !fm.Quantizes() {
			if _, err := fm.Quantize(x[:fm.BlockElems]); err == nil {
				t.Errorf("%s quantizes without a quantizer", fm.Name)
			}
			continue
		}
		n++
		want, err := f.Data(fm.Name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fm.Quantize(x)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			for i := 0; i < len(want)/fm.BlockBytes; i++ {
				g, w := got[i*fm.BlockBytes:(i+1)*fm.BlockBytes], want[i*fm.BlockBytes:(i+1)*fm.BlockBytes]
				if !bytes.Equal(g, w) {
					t.Errorf("%s: block %d (row %d) is % x, ggml's % x", fm.Name, i, i*fm.BlockElems/512, g, w)
					break
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("%d formats quantize; want q8_0 and q4_0", n)
	}
}
