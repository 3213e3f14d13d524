package ir

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// initSpec is how a parameter is initialised when it does not come from a file.
type initSpec struct {
	kind     string // "random", "zeros", "ones"; "" = the model default
	scale    float64
	hasScale bool
}

var initKinds = []string{"random", "zeros", "ones"}

// weightSpec is the weights section: a file with an optional name map, or an init.
type weightSpec struct {
	node  *yaml.Node
	file  string
	names map[string]string // parameter name -> tensor name in the file (expanded)
	init  string
	seed  uint64
	scale float64
}

// defaultScale is the half-width of the uniform distribution of random weights.
const defaultScale = 0.02

var weightKeys = []string{"file", "names", "init", "seed", "scale"}

func (p *modelParser) parseWeightSpec(n *yaml.Node) error {
	w := &p.weights
	w.node = n
	w.scale = defaultScale
	var namesNode *yaml.Node
	err := p.eachKey(n, "weights", weightKeys, func(k string, kn, v *yaml.Node) error {
		if k != "names" && v.Kind != yaml.ScalarNode {
			return p.errAt(v, "weights: "+k, "want a single value")
		}
		switch k {
		case "file":
			w.file = v.Value
		case "names":
			namesNode = v
		case "init":
			if v.Value != "random" && v.Value != "zeros" && v.Value != "ones" {
				return p.errAt(v, "weights: init", "init must be random, zeros or ones, got %q", v.Value)
			}
			w.init = v.Value
		case "seed":
			var s int64
			if err := v.Decode(&s); err != nil || s < 0 {
				return p.errAt(v, "weights: seed", "seed must be a non-negative integer, got %q", v.Value)
			}
			w.seed = uint64(s)
		case "scale":
			f, err := p.floatValue(v)
			if err != nil {
				return p.errAt(v, "weights: scale", "%v", err)
			}
			w.scale = f
		}
		return nil
	})
	if err != nil {
		return err
	}
	if w.file != "" && w.init != "" {
		return p.errAt(n, "weights", "give either file or init, not both (a parameter's own init overrides the file)")
	}
	if w.file == "" && w.init == "" {
		return p.errAt(n, "weights", "give file (a safetensors file) or init (random, zeros or ones)")
	}
	if namesNode != nil {
		if w.file == "" {
			return p.errAt(namesNode, "weights: names", "names map parameters to tensors of a file; there is no file")
		}
		w.names = map[string]string{}
		err := p.eachKey(namesNode, "weights: names", nil, func(k string, kn, v *yaml.Node) error {
			ctx := "weights: names: " + k
			if v.Kind != yaml.ScalarNode {
				return p.errAt(v, ctx, "want a tensor name")
			}
			names, idx, err := p.expandTemplate(k)
			if err != nil {
				return p.errAt(kn, ctx, "%v", err)
			}
			for j, name := range names {
				if p.params[name] == nil {
					return p.errAt(kn, ctx, "%s is not a declared parameter", name)
				}
				if _, dup := w.names[name]; dup {
					return p.errAt(kn, ctx, "duplicate name: %s is mapped twice", name)
				}
				file := v.Value
				if idx[j] >= 0 {
					ii := idx[j]
					file, err = expandNameString(v.Value, func(s string) (int, bool) {
						if s == "i" {
							return ii, true
						}
						return p.lookupDim(s)
					})
					if err != nil {
						return p.errAt(v, ctx, "%v", err)
					}
				}
				w.names[name] = file
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// expandNameString expands {expr} parts of a free-form name (a tensor name of a weight file may
// contain characters model.yaml names do not, so it is not tokenized as a whole).
func expandNameString(s string, lookup func(string) (int, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("unclosed '{' in %q", s)
		}
		e, err := parseExprString(s[i+1 : i+j])
		if err != nil {
			return "", fmt.Errorf("template {%s}: %v", s[i+1:i+j], err)
		}
		v, err := intExpr(e, lookup)
		if err != nil {
			return "", fmt.Errorf("template {%s}: %v", s[i+1:i+j], err)
		}
		b.WriteString(s[:i])
		fmt.Fprintf(&b, "%d", v)
		s = s[i+j+1:]
	}
}

func (p *modelParser) loadWeights() error {
	w := &p.weights
	p.m.Weights = map[string]*Tensor{}
	if len(p.m.Params) == 0 {
		return nil
	}
	if w.node == nil {
		d := p.m.Params[0]
		return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: errors.New("the model declares parameters but has no weights section (weights: {file: ...} or {init: random, seed: ...})")}
	}
	var sf *stFile
	if w.file != "" {
		path := w.file
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.dir, path)
		}
		var err error
		sf, err = openST(path)
		if err != nil {
			return p.errAt(w.node, "weights", "%v", err)
		}
		defer sf.f.Close()
	}
	for _, d := range p.m.Params {
		init, own := p.inits[d.Name]
		kind := w.init
		if own && init.kind != "" {
			kind = init.kind
		}
		if kind == "" && sf != nil {
			name := d.Name
			if mapped, ok := w.names[d.Name]; ok {
				name = mapped
			}
			t, err := sf.read(name)
			if err != nil {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: err}
			}
			if !t.Type.Shape.Equal(d.Type.Shape) {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name,
					Err: fmt.Errorf("declared %s but %s in %s is %s", d.Type.Shape, name, filepath.Base(sf.path), t.Type.Shape)}
			}
			if t.Type.DType != d.Type.DType {
				t = t.Convert(d.Type.DType)
			}
			p.m.Weights[d.Name] = t
			continue
		}
		scale := w.scale
		if own && init.hasScale {
			scale = init.scale
		}
		p.m.Weights[d.Name] = InitTensor(d.Type, kind, w.seed, d.Name, scale)
	}
	return nil
}

// InitTensor makes a parameter tensor without a file: kind "zeros", "ones" or "random" (uniform
// in [-scale, scale]). Random values come from SplitMix64 seeded by seed and an FNV-1a hash of
// name, and every step before the final multiply by scale is exact, so the same seed gives the
// same bytes on every machine.
func InitTensor(t Type, kind string, seed uint64, name string, scale float64) *Tensor {
	x := NewTensor(t)
	n := t.Shape.NumElements()
	switch kind {
	case "zeros":
		return x
	case "ones":
		for i := 0; i < n; i++ {
			x.SetFloat64(i, 1)
		}
		return x
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	state := seed*0x9e3779b97f4a7c15 ^ h.Sum64()
	next := func() float64 {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		// 24 random bits → [-1, 1) exactly, then one rounding multiply.
		return (float64(z>>40)*(1.0/(1<<23)) - 1) * scale
	}
	switch t.DType {
	case F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(x.Data[4*i:], math.Float32bits(float32(next())))
		}
	case F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(x.Data[2*i:], F16Bits(float32(next())))
		}
	default:
		for i := 0; i < n; i++ {
			x.SetFloat64(i, next())
		}
	}
	return x
}

// stFile is a minimal safetensors reader. ir cannot import ir/safetensors (which imports ir), so
// the model loader reads the format itself: an 8-byte little-endian header length, a JSON
// header of {name: {dtype, shape, data_offsets}}, then the data.
type stFile struct {
	path    string
	f       *os.File
	size    int64
	base    int64
	entries map[string]stEntry
}

type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

var stDTypes = map[string]DType{"F32": F32, "F16": F16, "BF16": BF16, "I32": I32, "U32": U32, "BOOL": Bool}

func openST(path string) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var lb [8]byte
	if _, err := io.ReadFull(f, lb[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: not a safetensors file: too short", path)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n == 0 || n > 100<<20 || int64(n)+8 > st.Size() {
		f.Close()
		return nil, fmt.Errorf("%s: not a safetensors file: header length %d for a file of %d bytes", path, n, st.Size())
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: reading the header: %v", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: not a safetensors file: %v", path, err)
	}
	sf := &stFile{path: path, f: f, size: st.Size(), base: int64(8 + n), entries: map[string]stEntry{}}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: tensor %q: %v", path, k, err)
		}
		sf.entries[k] = e
	}
	return sf, nil
}

func (sf *stFile) read(name string) (*Tensor, error) {
	e, ok := sf.entries[name]
	if !ok {
		return nil, fmt.Errorf("missing weight: %s has no tensor %q%s", filepath.Base(sf.path), name, sf.similar(name))
	}
	d, ok := stDTypes[e.DType]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q has dtype %s (vkc reads F32, F16, BF16, I32, U32, BOOL)", sf.path, name, e.DType)
	}
	t := Type{d, Shape(append([]int{}, e.Shape...))}
	for _, dim := range e.Shape {
		if dim < 0 {
			return nil, fmt.Errorf("%s: tensor %q has shape %v", sf.path, name, e.Shape)
		}
	}
	if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[1]-e.Offsets[0] != int64(t.Bytes()) || sf.base+e.Offsets[1] > sf.size {
		return nil, fmt.Errorf("%s: tensor %q: data offsets %v do not hold %s", sf.path, name, e.Offsets, t)
	}
	x := &Tensor{Type: t, Data: make([]byte, t.Bytes())}
	if _, err := sf.f.ReadAt(x.Data, sf.base+e.Offsets[0]); err != nil {
		return nil, fmt.Errorf("%s: reading %q: %v", sf.path, name, err)
	}
	return x, nil
}

// similar suggests a tensor name that shares the longest suffix with name.
func (sf *stFile) similar(name string) string {
	best, bestN := "", 0
	for k := range sf.entries {
		n := 0
		for n < len(k) && n < len(name) && k[len(k)-1-n] == name[len(name)-1-n] {
			n++
		}
		if n > bestN || n == bestN && k < best {
			best, bestN = k, n
		}
	}
	if bestN < 4 {
		return ""
	}
	return fmt.Sprintf(" (it has %q)", best)
}
