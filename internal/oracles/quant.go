package oracles

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// The end-to-end oracle of the block formats added after the shared llamacpp oracle (Q2_K, Q3_K,
// IQ4_NL, IQ4_XS, MXFP4): a tiny llama quantized by llama.cpp's llama-quantize, with llama.cpp's CPU
// logits and a float64 reference, made by scripts/oracles/quant_models.py with the golden schema
// of the shared oracle's files. The mixed file (each weight in one of the five formats) is small
// and committed in testdata/llamacpp-quant; the per-type files (llama.cpp's Q2_K, Q3_K_M, IQ4_XS,
// IQ4_NL mixes and an all-MXFP4 file) are regenerated into a cache by
// scripts/oracles/quant-models.sh.

// QuantTinyNames are the files of that oracle: MIX (committed), then the per-type ones (cached).
var QuantTinyNames = []string{"MIX", "Q2_K", "Q3_K_M", "IQ4_XS", "IQ4_NL", "MXFP4"}

// QuantTinyFile is what the generator measured for a file (its NAME.json): the tensor types, and
// the tolerance (2) against llama.cpp's logits (twice llama.cpp's measured error against the
// float64 reference, the larger of prefill and decode) with the leading greedy tokens llama.cpp
// shares with the reference.
type QuantTinyFile struct {
	Types       map[string]string `json:"tensor_types"`
	Tol2        float64           `json:"tolerance_2"`
	GreedyAgree int               `json:"greedy_agree"`
}

// QuantCacheDir is the folder scripts/oracles/quant-models.sh writes the per-type files to:
// $VKC_ORACLE_CACHE/llamacpp-quant, by default ~/.cache/vkc/oracles/llamacpp-quant.
func QuantCacheDir() string {
	root := os.Getenv("VKC_ORACLE_CACHE")
	if root == "" {
		c := os.Getenv("XDG_CACHE_HOME")
		if c == "" {
			h, _ := os.UserHomeDir()
			c = filepath.Join(h, ".cache")
		}
		root = filepath.Join(c, "vkc", "oracles")
	}
	return filepath.Join(root, "llamacpp-quant")
}

// QuantTiny returns the GGUF path, golden tensors and measurements of file name of
// QuantTinyNames, or skips naming the script that makes it.
func QuantTiny(t testing.TB, name string) (string, map[string]*ir.Tensor, QuantTinyFile) {
	t.Helper()
	dir := QuantCacheDir()
	if name == "MIX" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "testdata", "llamacpp-quant")
	}
	base := filepath.Join(dir, "llama-quant-tiny-"+name)
	if _, err := os.Stat(base + ".gguf"); err != nil {
		t.Skipf("needs the oracle file %s.gguf, made by scripts/oracles/quant-models.sh (llama.cpp's llama-quantize and llama-logits from ../shared/peers/llamacpp): missing", base)
	}
	gold, err := ir.ReadSafetensors(base + ".golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(base + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var f QuantTinyFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s.json: %v", base, err)
	}
	if f.Tol2 <= 0 || f.Tol2 > 0.2 || len(f.Types) == 0 {
		t.Fatalf("%s.json: tolerance (2) %g, %d tensor types: not a measurement", base, f.Tol2, len(f.Types))
	}
	return base + ".gguf", gold, f
}
