package ir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/internal/par"
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
	files []string          // the shards of a checkpoint (files:), instead of file
	names map[string]string // parameter name -> tensor name in the file (expanded)
	// stacks maps a parameter to the template of the tensors stacked along its first axis
	// (names: {p: {stack: NAME}}, NAME with {j} for the index along that axis, expanded
	// otherwise): a mixture of experts' matrices stored one tensor per expert.
	stacks map[string]string
	init   string
	seed   uint64
	scale  float64
}

// defaultScale is the half-width of the uniform distribution of random weights.
const defaultScale = 0.02

var weightKeys = []string{"file", "files", "names", "init", "seed", "scale"}

func (p *modelParser) parseWeightSpec(n *yaml.Node) error {
	w := &p.weights
	w.node = n
	w.scale = defaultScale
	var namesNode *yaml.Node
	err := p.eachKey(n, "weights", weightKeys, func(k string, kn, v *yaml.Node) error {
		if k != "names" && k != "files" && v.Kind != yaml.ScalarNode {
			return p.errAt(v, "weights: "+k, "want a single value")
		}
		switch k {
		case "file":
			w.file = v.Value
		case "files":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return p.errAt(v, "weights: files", "want a list of weight files (the shards of a checkpoint)")
			}
			for _, f := range v.Content {
				if f.Kind != yaml.ScalarNode || f.Value == "" {
					return p.errAt(f, "weights: files", "want a file name")
				}
				if slices.Contains(w.files, f.Value) {
					return p.errAt(f, "weights: files", "%s is listed twice", f.Value)
				}
				w.files = append(w.files, f.Value)
			}
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
	if w.file != "" && w.files != nil {
		return p.errAt(n, "weights", "give file or files, not both")
	}
	if len(w.files) == 1 {
		w.file, w.files = w.files[0], nil
	}
	if w.file == "" && len(w.files) > 0 {
		w.file = w.files[0] // "a file" for the checks below; loadWeights opens them all
	}
	if w.file != "" && w.init != "" {
		return p.errAt(n, "weights", "give either file or init, not both (a parameter's own init overrides the file)")
	}
	if w.file == "" && w.init == "" {
		return p.errAt(n, "weights", "give file (a safetensors or GGUF file) or init (random, zeros or ones)")
	}
	if namesNode != nil {
		if w.file == "" {
			return p.errAt(namesNode, "weights: names", "names map parameters to tensors of a file; there is no file")
		}
		w.names = map[string]string{}
		err := p.eachKey(namesNode, "weights: names", nil, func(k string, kn, v *yaml.Node) error {
			ctx := "weights: names: " + k
			stack := false
			if v.Kind == yaml.MappingNode {
				// {stack: NAME}: the tensors NAME with {j} = 0, 1, … stacked along the first axis.
				var sv *yaml.Node
				if err := p.eachKey(v, ctx, []string{"stack"}, func(_ string, _, x *yaml.Node) error { sv = x; return nil }); err != nil {
					return err
				}
				if sv == nil || sv.Kind != yaml.ScalarNode || !strings.Contains(sv.Value, "{j}") {
					return p.errAt(v, ctx, "want {stack: NAME} with {j} in NAME (the index along the parameter's first axis)")
				}
				v, stack = sv, true
			}
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
				if stack {
					file = strings.ReplaceAll(file, "{j}", stackMark)
				}
				if idx[j] >= 0 {
					ii := idx[j]
					file, err = expandNameString(file, func(s string) (int, bool) {
						if s == "i" {
							return ii, true
						}
						return p.lookupDim(s)
					})
					if err != nil {
						return p.errAt(v, ctx, "%v", err)
					}
				}
				if stack {
					if w.stacks == nil {
						w.stacks = map[string]string{}
					}
					w.stacks[name] = file
					continue
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

func (p *modelParser) loadWeights() (err error) {
	defer func() {
		if err != nil {
			p.m.Close() // the mapping of a model that failed to load
		}
	}()
	w := &p.weights
	p.m.Weights = map[string]*Tensor{}
	if len(p.m.Params) == 0 {
		return nil
	}
	if w.node == nil {
		d := p.m.Params[0]
		return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: errors.New("the model declares parameters but has no weights section (weights: {file: ...} or {init: random, seed: ...})")}
	}
	// Parameters that are allocated (generated, converted to another dtype, or read from a file
	// that is not memory-mapped) count against the host memory limit, checked before each is
	// allocated: Go ends the process on an allocation it cannot satisfy.
	var total uint64
	var n int
	alloc := func(d *Decl) error {
		total += uint64(d.Type.Bytes())
		n++
		if err := hostmem.Check(fmt.Sprintf("%s: the %d parameters allocated up to this one", d.Type, n), total); err != nil {
			return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: err}
		}
		return nil
	}
	mapped := false
	var sf weightFile
	if w.file != "" {
		path := w.file
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.dir, path)
		}
		var err error
		if len(w.files) > 1 {
			sf, err = p.openShards(w.files)
		} else {
			sf, err = openWeightFile(path)
		}
		if err != nil {
			return p.errAt(w.node, "weights", "%v", err)
		}
		defer sf.Close()
		// The weights alias the memory-mapped files: no copy now, and lowering writes them into
		// a plan by reading the files (Model.WeightFile).
		var mps []*Mapping
		if ms, ok := sf.(*shardedWeights); ok {
			mps, err = ms.mapAll()
		} else {
			var mp *Mapping
			if mp, err = sf.Map(); mp != nil {
				mps = append(mps, mp)
			}
		}
		if err != nil {
			return p.errAt(w.node, "weights", "%v", err)
		}
		for _, mp := range mps {
			p.m.AddMapping(mp)
			mapped = true
		}
	}
	type pending struct {
		d     *Decl
		kind  string
		scale float64
	}
	var inits []pending
	for _, d := range p.m.Params {
		init, own := p.inits[d.Name]
		kind := w.init
		if own && init.kind != "" {
			kind = init.kind
		}
		if st, ok := w.stacks[d.Name]; ok && kind == "" && sf != nil {
			if err := alloc(d); err != nil {
				return err
			}
			t, err := stackTensors(sf, d.Type, st)
			if err != nil {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: err}
			}
			p.m.Weights[d.Name] = t
			continue
		}
		if kind == "" && sf != nil {
			name := d.Name
			if mapped, ok := w.names[d.Name]; ok {
				name = mapped
			}
			if !sf.Has(name) {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name,
					Err: fmt.Errorf("missing weight: %s has no tensor %q%s", shortName(sf.Name()), name, sf.Similar(name))}
			}
			if !mapped {
				if err := alloc(d); err != nil {
					return err
				}
			}
			t, err := sf.View(name)
			if err != nil {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name, Err: err}
			}
			if !t.Type.Shape.Equal(d.Type.Shape) {
				return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name,
					Err: fmt.Errorf("declared %s but %s in %s is %s", d.Type.Shape, name, shortName(sf.Name()), t.Type.Shape)}
			}
			if t.Type.DType != d.Type.DType {
				if d.Type.DType.Quantized() {
					return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name,
						Err: fmt.Errorf("declared %s but %s in %s is %s; vkc does not quantize (declare %s, or a float dtype to dequantize it)", d.Type.DType, name, shortName(sf.Name()), t.Type.DType, t.Type.DType)}
				}
				if mapped {
					if err := alloc(d); err != nil {
						return err
					}
				}
				t = t.Convert(d.Type.DType)
			}
			p.m.Weights[d.Name] = t
			continue
		}
		if d.Type.DType.Quantized() {
			return &SourceError{Pos: d.Pos, Context: "parameter " + d.Name,
				Err: fmt.Errorf("a %s parameter comes from a weight file; init %s cannot make quantized blocks", d.Type.DType, kind)}
		}
		scale := w.scale
		if own && init.hasScale {
			scale = init.scale
		}
		if err := alloc(d); err != nil {
			return err
		}
		inits = append(inits, pending{d, kind, scale})
	}
	// Generated weights are made in parallel: each tensor's values depend on its name and the
	// seed alone, so the result is the same; SmolLM2's 135 M random values took 1.9 s on one core.
	out := par.Map(inits, func(q pending) *Tensor { return InitTensor(q.d.Type, q.kind, w.seed, q.d.Name, q.scale) })
	for i, q := range inits {
		p.m.Weights[q.d.Name] = out[i]
	}
	return nil
}

// stackMark stands for {j} in a stacked name while its other templates are expanded.
const stackMark = "\x00j\x00"

// stackTensors reads the tensors template names (stackMark for j = 0 … t.Shape[0]−1), each of
// t's shape without its first axis, and stacks them into one tensor of type t (each converted to
// t's dtype; a block-quantized one must be of it already).
func stackTensors(sf weightFile, t Type, template string) (*Tensor, error) {
	if t.Shape.Rank() < 2 {
		return nil, fmt.Errorf("a stacked parameter needs an axis to stack along and one more, got %s", t)
	}
	part := Type{DType: t.DType, Shape: t.Shape[1:].Clone()}
	out := NewTensor(t)
	size := part.Bytes()
	for j := range t.Shape[0] {
		name := strings.ReplaceAll(template, stackMark, fmt.Sprint(j))
		if !sf.Has(name) {
			return nil, fmt.Errorf("missing weight: %s has no tensor %q (stacked entry %d of %d)%s", shortName(sf.Name()), name, j, t.Shape[0], sf.Similar(name))
		}
		x, err := sf.View(name)
		if err != nil {
			return nil, err
		}
		if !x.Type.Shape.Equal(part.Shape) {
			return nil, fmt.Errorf("stacked entry %s in %s is %s; want %s (the parameter %s without its first axis)", name, shortName(sf.Name()), x.Type.Shape, part.Shape, t.Shape)
		}
		if x.Type.DType != t.DType {
			if t.DType.Quantized() || x.Type.DType.Quantized() {
				return nil, fmt.Errorf("stacked entry %s in %s is %s, the parameter %s; vkc does not quantize or requantize", name, shortName(sf.Name()), x.Type.DType, t.DType)
			}
			x = x.Convert(t.DType)
		}
		copy(out.Data[j*size:(j+1)*size], x.Data)
	}
	return out, nil
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

// shortName is a weight file's name for messages: its base name (a list of shards keeps the
// base names it joined).
func shortName(name string) string {
	if strings.Contains(name, ", ") {
		return name
	}
	return filepath.Base(name)
}

// openShards opens the weight files of a sharded checkpoint (weights: files:), each resolved
// against the model's folder.
func (p *modelParser) openShards(files []string) (*shardedWeights, error) {
	ms := &shardedWeights{}
	for _, f := range files {
		path := f
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.dir, path)
		}
		wf, err := openWeightFile(path)
		if err != nil {
			ms.Close()
			return nil, err
		}
		ms.files = append(ms.files, wf)
	}
	return ms, nil
}

// shardedWeights reads parameters from several weight files (a Hugging Face checkpoint's
// shards): each tensor from the one file that has it; a tensor in two files is an error.
type shardedWeights struct {
	files []weightFile
}

func (s *shardedWeights) Name() string {
	names := make([]string, len(s.files))
	for i, f := range s.files {
		names[i] = filepath.Base(f.Name())
	}
	return strings.Join(names, ", ")
}

func (s *shardedWeights) Has(name string) bool {
	for _, f := range s.files {
		if f.Has(name) {
			return true
		}
	}
	return false
}

// file is the one shard holding the tensor.
func (s *shardedWeights) file(name string) (weightFile, error) {
	var found weightFile
	for _, f := range s.files {
		if !f.Has(name) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("tensor %s is in both %s and %s", name, found.Name(), f.Name())
		}
		found = f
	}
	if found == nil {
		return nil, fmt.Errorf("no weight file has tensor %s", name)
	}
	return found, nil
}

func (s *shardedWeights) Read(name string) (*Tensor, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	return f.Read(name)
}

// Map is not used for shards (mapAll maps each).
func (s *shardedWeights) Map() (*Mapping, error) { return nil, nil }

// mapAll memory-maps every shard (none where mmap is not available).
func (s *shardedWeights) mapAll() ([]*Mapping, error) {
	var mps []*Mapping
	for _, f := range s.files {
		mp, err := f.Map()
		if err != nil {
			for _, m := range mps {
				m.Close()
			}
			return nil, err
		}
		if mp != nil {
			mps = append(mps, mp)
		}
	}
	return mps, nil
}

func (s *shardedWeights) View(name string) (*Tensor, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	return f.View(name)
}

func (s *shardedWeights) Similar(name string) string {
	for _, f := range s.files {
		if h := f.Similar(name); h != "" {
			return h
		}
	}
	return ""
}

func (s *shardedWeights) Close() error {
	var err error
	for _, f := range s.files {
		err = errors.Join(err, f.Close())
	}
	return err
}
