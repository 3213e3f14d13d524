package vkc

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/runtime"
)

// TestWeightsStoredOnce: every function of a plan reads one stored copy of each parameter, so a
// plan's weight region is at most 1% more than the source's weights (alignment), for every
// example (SmolLM2's prefill and decode once chose different layouts of the same projections,
// 1.52×), every GGUF oracle of llama.cpp and a Hugging Face folder. The static compile, as
// `vkc compile --no-tune` makes it, for lavapipe (device-free).
func TestWeightsStoredOnce(t *testing.T) {
	type source struct {
		name, path string
		bytes      func(t *testing.T, m *ir.Model) uint64
	}
	declared := func(t *testing.T, m *ir.Model) uint64 {
		var n uint64
		for _, d := range m.Params {
			n += uint64(d.Type.Bytes())
		}
		return n
	}
	var srcs []source
	examples, _ := filepath.Glob("examples/*/model.yaml")
	for _, p := range examples {
		srcs = append(srcs, source{filepath.Base(filepath.Dir(p)), p, declared})
	}
	oracles, _ := filepath.Glob("../shared/oracles/llamacpp/*/*.gguf")
	for _, p := range oracles {
		srcs = append(srcs, source{filepath.Base(p), p, func(t *testing.T, _ *ir.Model) uint64 {
			f, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var n uint64
			for _, ti := range f.Tensors {
				n += uint64(ti.Size)
			}
			return n
		}})
	}
	hf := "../shared/oracles/hf/tinyllama"
	if _, err := os.Stat(hf); err != nil {
		hf = "testdata/hf/tinyllama"
	}
	srcs = append(srcs, source{"hf/tinyllama", hf, func(t *testing.T, _ *ir.Model) uint64 {
		f, err := safetensors.Open(filepath.Join(hf, "weights.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var n uint64
		for _, e := range f.Entries {
			n += uint64(e.Size)
		}
		return n
	}})
	if len(oracles) == 0 {
		t.Log("no GGUF oracles in ../shared/oracles/llamacpp: only the examples and the HF folder are checked")
	}
	for _, s := range srcs {
		t.Run(s.name, func(t *testing.T) {
			var m *ir.Model
			var err error
			if strings.HasSuffix(s.path, ".yaml") {
				m, err = ir.ParseModel(s.path)
			} else {
				m, err = importer.Load(s.path)
			}
			if err != nil {
				if strings.Contains(err.Error(), "is not one vkc imports") {
					t.Skipf("needs an importer for its architecture: %v", err)
				}
				t.Fatal(err)
			}
			defer m.Close()
			src := s.bytes(t, m)
			p, _, err := Compile(context.Background(), m, Options{Target: &LavapipeTarget})
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(p.Weights.Size) / float64(src)
			t.Logf("plan weights %d bytes, source %d: %.4f×", p.Weights.Size, src, ratio)
			if ratio > 1.01 {
				t.Errorf("the plan holds %d bytes of weights for %d in the source (%.3f×): a weight stored more than once", p.Weights.Size, src, ratio)
			}
		})
	}
}

// TestLoadProgress: Load reports the weight bytes on the device as it uploads a plan read from
// its file, rising to the region's size.
func TestLoadProgress(t *testing.T) {
	d := device(t)
	p, _ := compileExample(t, parseExample(t, "tinyllama"), Options{Target: targetOf(d)})
	var dones []uint64
	roundTripWith(t, d, p, runtime.LoadOptions{Progress: func(done, total uint64) {
		if total != p.Weights.Size {
			t.Errorf("progress of %d bytes, the weights are %d", total, p.Weights.Size)
		}
		dones = append(dones, done)
	}})
	if len(dones) == 0 || dones[len(dones)-1] != p.Weights.Size || !slices.IsSorted(dones) {
		t.Errorf("progress %v, want rising to %d", dones, p.Weights.Size)
	}
}
