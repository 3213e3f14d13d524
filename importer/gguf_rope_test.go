package importer_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/quant"
)

// ggufWith copies a GGUF file with more metadata (replacing keys of the same name) and tensors.
func ggufWith(t *testing.T, src string, kv map[string]any, tensors map[string][]float32) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := &gguf.Builder{}
	for _, e := range f.Metadata {
		if _, ok := kv[e.Key]; !ok {
			b.Add(e.Key, e.Value)
		}
	}
	for k, v := range kv {
		b.Add(k, gguf.MustValue(v))
	}
	for _, ti := range f.Tensors {
		data, err := f.Data(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		b.Tensor(ti.Name, ti.Type, ti.Dims, append([]byte(nil), data...))
	}
	for name, v := range tensors {
		bb := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(bb[4*i:], math.Float32bits(x))
		}
		b.Tensor(name, quant.FormatF32.GGML, []uint64{uint64(len(v))}, bb)
	}
	out, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGGUFRopeScaling: llama.cpp's rope_freqs.weight for Llama 3's scaling (the divisors its
// converter computes, computed here as it does, see llamaCppFactors in package ir's tests) and
// rope.scaling.type linear become rope's scaling attribute; other scalings and divisors that
// follow no formula are errors.
func TestGGUFRopeScaling(t *testing.T) {
	src, _ := oracles.LlamaCpp(t, "llama-tiny/llama-tiny-Q8_0")
	const theta, hd = 10000.0, 64
	// Wavelengths 6.3 to 47000 over the 32 frequencies: with original context 2048 and
	// factors 1 and 8, some are kept, some blended, some divided.
	factor, low, high, old := 16.0, 1.0, 8.0, 2048.0
	ff := make([]float32, hd/2)
	for i := range ff {
		freq := float64(float32(1 / math.Pow(theta, float64(2*i)/hd)))
		wl := 2 * math.Pi / freq
		switch {
		case wl < old/high:
			ff[i] = 1
		case wl > old/low:
			ff[i] = float32(factor)
		default:
			s := (old/wl - low) / (high - low)
			ff[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	// f32 activations: prefill and decode share one body, one rope of q and of k.
	im, err := importer.ImportGGUF(ggufWith(t, src, nil, map[string][]float32{"rope_freqs.weight": ff}), importer.GGUFOptions{SkipWeights: true, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	want := "mode=interleaved, scaling=llama3, factor=16, low_freq_factor=1, high_freq_factor=8, original_ctx=2048)"
	if n := strings.Count(string(im.YAML), want); n != 2 {
		t.Errorf("%d ropes with %q:\n%s", n, want, im.YAML)
	}
	im, err = importer.ImportGGUF(ggufWith(t, src, map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(4)}, nil), importer.GGUFOptions{SkipWeights: true, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(im.YAML), "scaling=linear, factor=4)"); n != 2 {
		t.Errorf("linear: %d scaled ropes:\n%s", n, im.YAML)
	}
	bad := append([]float32(nil), ff...)
	bad[3] *= 1.7
	for _, c := range []struct {
		kv      map[string]any
		tensors map[string][]float32
		want    string
	}{
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4)}, nil, `rope.scaling.type is "yarn"`},
		{nil, map[string][]float32{"rope_freqs.weight": bad}, "rope_freqs.weight does not follow Llama 3's frequency scaling"},
		{nil, map[string][]float32{"rope_freqs.weight": ff[:5]}, "rope_freqs.weight is f32[5]; want f32[32]"},
	} {
		_, err := importer.ImportGGUF(ggufWith(t, src, c.kv, c.tensors), importer.GGUFOptions{SkipWeights: true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
