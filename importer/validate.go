package importer

import (
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Checks of a checkpoint's metadata against its tensors, run before anything of the size the
// metadata declares is allocated and before a model.yaml is written: a hostile or damaged file
// gets an error naming the metadata key, within milliseconds, not an out-of-memory crash or "the
// generated model.yaml does not load".

// layerIndex matches the layer number in a tensor name: "blk.12." (GGUF), "model.layers.12."
// (transformers).
var layerIndex = regexp.MustCompile(`(?:^|\.)(?:blk|layers)\.([0-9]+)\.`)

// checkLayerCount checks a layer count from metadata (key names it) against the layers the
// tensor names hold: every layer has tensors, so a count above the number of distinct layer
// indices cannot be the file's.
func checkLayerCount(key string, layers int, names []string) error {
	seen := map[int]bool{}
	hi := -1
	for _, n := range names {
		m := layerIndex.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		i, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		seen[i] = true
		hi = max(hi, i)
	}
	if layers <= len(seen) {
		return nil
	}
	if len(seen) == 0 {
		return fmt.Errorf("%s is %d, but no tensor belongs to a layer", key, layers)
	}
	return fmt.Errorf("%s is %d, but the tensors hold %d layers (numbered up to %d)", key, layers, len(seen), hi)
}

// dimKeys names, for each model.yaml dimension, the metadata key it came from (for messages).
type dimKeys map[string]string

// checkShapes compares every parameter's tensor with the shape the model's dimensions give it:
// shapeOf returns a tensor's shape (outermost first) as the file stores it. A mismatch names
// the tensor, both shapes, and the metadata keys of the dimensions involved.
func (m *decoderLM) checkShapes(shapeOf func(tensor string) ([]int, bool), keys dimKeys) error {
	dims := map[string]int{"vocab": m.vocab, "d": m.d, "heads": m.heads, "kv_heads": m.kvHeads, "hd": m.hd, "ffn": m.ffn}
	for _, p := range m.params() {
		want, used, ok := evalShape(p.shape, dims)
		if !ok {
			continue // a dimension this check does not know (an architecture's own)
		}
		n := 1
		if p.perLayer {
			n = m.layers
		}
		for i := range n {
			name := strings.ReplaceAll(m.names[p.name], "{i}", strconv.Itoa(i))
			got, ok := shapeOf(name)
			if !ok {
				continue // missing tensors are reported where the files are read
			}
			if !sameShape(got, want) {
				var from []string
				for _, d := range used {
					k := keys[d]
					if k == "" {
						k = d
					}
					from = append(from, fmt.Sprintf("%s %d", k, dims[d]))
				}
				return fmt.Errorf("tensor %s is %v, but %s give it %v", name, got, strings.Join(from, ", "), want)
			}
		}
	}
	return nil
}

// evalShape evaluates shape expressions such as "heads*hd"; used lists the dimensions read.
func evalShape(shape []string, dims map[string]int) (out []int, used []string, ok bool) {
	seen := map[string]bool{}
	for _, e := range shape {
		v := 1
		for _, f := range strings.Split(e, "*") {
			d, ok := dims[f]
			if !ok {
				return nil, nil, false
			}
			v *= d
			if !seen[f] {
				seen[f] = true
				used = append(used, f)
			}
		}
		out = append(out, v)
	}
	sort.Strings(used)
	return out, used, true
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// maxTensorElements is model.yaml's bound on a tensor's elements (ir's maxElements).
const maxTensorElements = 1 << 34

// checkScalars checks the model's float attributes: each must be finite, and eps and theta
// positive. keys names the metadata key of "eps" and "theta".
func (m *decoderLM) checkScalars(keys dimKeys) error {
	name := func(k string) string {
		if keys[k] != "" {
			return keys[k]
		}
		return k
	}
	if !(m.eps > 0) || math.IsInf(m.eps, 0) {
		return fmt.Errorf("%s is %v; want a positive number (the RMSNorm epsilon)", name("eps"), m.eps)
	}
	if !(m.theta > 0) || math.IsInf(m.theta, 0) {
		return fmt.Errorf("%s is %v; want a positive number (the RoPE base)", name("theta"), m.theta)
	}
	// The KV caches: ctx rows of kv_heads×hd, each a tensor the model format bounds.
	if hi, lo := bits.Mul64(uint64(m.ctx), uint64(m.kvHeads)*uint64(m.hd)); hi != 0 || lo > maxTensorElements {
		return fmt.Errorf("context %d: a KV cache of [%d, %d, %d] is more than a tensor may hold (%d elements); give a smaller --ctx", m.ctx, m.ctx, m.kvHeads, m.hd, uint64(maxTensorElements))
	}
	s := m.scaling
	for _, f := range []struct {
		what string
		v    float64
	}{{"factor", s.Factor}, {"low_freq_factor", s.LowFreqFactor}, {"high_freq_factor", s.HighFreqFactor}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("RoPE scaling %s is %v", f.what, f.v)
		}
	}
	return nil
}
