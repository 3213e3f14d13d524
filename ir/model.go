package ir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// SourceError is an error in a model file: where it is, the statement or key it concerns, and
// what is wrong. Its text reads "model.yaml:12: function decode: `q = rope(h, pos)`: rope: ...".
type SourceError struct {
	Pos     Pos
	Context string // the function, loop iteration and statement; may be empty
	Err     error
}

func (e *SourceError) Error() string {
	s := e.Pos.String()
	if s != "" {
		s += ": "
	}
	// The context and the message quote the model's text: escape what a terminal would obey
	// and cut what is long (a megabyte statement is shown once, briefly).
	if e.Context != "" {
		s += SafeText(e.Context, 400) + ": "
	}
	return s + SafeText(e.Err.Error(), 1000)
}

func (e *SourceError) Unwrap() error { return e.Err }

// ParseOptions adjusts ParseModelWith.
type ParseOptions struct {
	// SkipWeights parses and validates the model without reading or generating its weights
	// (Model.Weights stays nil): for tools that only need the graph of a large model.
	SkipWeights bool
	// MaxStatements bounds how many statements a function may expand to (repeat included) and
	// how many names one templated declaration may stand for; 0 means 65536. A hostile
	// "repeat i in 0..1000000000" then fails at once instead of running for hours.
	MaxStatements int
	// MaxBytes bounds the size of the model file; 0 means DefaultMaxModelBytes. The YAML
	// decoder takes some 70 times a file's size in memory, so an outsized file is refused
	// before it is read.
	MaxBytes int64
	// MaxNodes bounds the nodes of one function's graph; 0 means 1<<20 (a billion-parameter
	// model has some thousands).
	MaxNodes int
}

// DefaultMaxModelBytes is the largest model file parsed without ParseOptions.MaxBytes: 4 MiB,
// a thousand times a real model.yaml (repeat blocks and templated names keep them small).
const DefaultMaxModelBytes = 4 << 20

// ParseModel reads a model.yaml file, builds and validates its functions, and loads its weights
// (a safetensors file named relative to the model file, or deterministic random values).
//
//	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
//	if err != nil { ... }           // "model.yaml:31: function decode: `q = ...`: ..."
//	f := m.Function("decode")
func ParseModel(path string) (*Model, error) {
	return ParseModelWith(path, ParseOptions{})
}

// ParseModelWith is ParseModel with options.
func ParseModelWith(path string, opt ParseOptions) (*Model, error) {
	max := opt.maxBytes()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than a model file may have (%d; ParseOptions.MaxBytes)", path, st.Size(), max)
	}
	// A pipe or device has no size: read one byte past the bound to know.
	src, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	return parseModel(path, src, filepath.Dir(path), opt)
}

func (o ParseOptions) maxBytes() int64 {
	if o.MaxBytes > 0 {
		return o.MaxBytes
	}
	return DefaultMaxModelBytes
}

// ParseModelBytes parses a model from src; name is used in messages and dir is the folder that
// a weights file is relative to.
func ParseModelBytes(name string, src []byte, dir string) (*Model, error) {
	return parseModel(name, src, dir, ParseOptions{})
}

// ParseModelBytesWith is ParseModelBytes with options.
func ParseModelBytesWith(name string, src []byte, dir string, opt ParseOptions) (*Model, error) {
	return parseModel(name, src, dir, opt)
}

// modelParser holds what the top-level sections declare while the functions are built.
type modelParser struct {
	file  string
	dir   string
	m     *Model
	dtype DType // the default dtype of parameters and state

	dims      map[string]int
	dimPos    map[string]Pos
	params    map[string]*Decl
	state     map[string]*Decl
	inits     map[string]initSpec // per-parameter init overrides
	weights   weightSpec
	stmts     map[*yaml.Node]*statement // parsed body statements
	limit     int                       // ParseOptions.MaxStatements
	nodeLimit int                       // ParseOptions.MaxNodes
	// mu serialises builds of functions at a run-time length (Function.At) after the parse,
	// which share stmts.
	mu sync.Mutex
}

var topKeys = []string{"model", "description", "dims", "dtype", "tokenizer", "weights", "params", "state", "functions"}

func parseModel(file string, src []byte, dir string, opt ParseOptions) (*Model, error) {
	p := &modelParser{
		file: file, dir: dir, dtype: F32,
		m:         &Model{Dims: map[string]int{}, Source: file},
		dims:      map[string]int{},
		dimPos:    map[string]Pos{},
		params:    map[string]*Decl{},
		state:     map[string]*Decl{},
		inits:     map[string]initSpec{},
		stmts:     map[*yaml.Node]*statement{},
		limit:     opt.MaxStatements,
		nodeLimit: opt.MaxNodes,
	}
	if p.limit <= 0 {
		p.limit = 1 << 16
	}
	if p.nodeLimit <= 0 {
		p.nodeLimit = 1 << 20
	}
	if max := opt.maxBytes(); int64(len(src)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes, more than a model file may have (ParseOptions.MaxBytes)", file, max)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			// yaml.v3 reports these parser errors at the 0-based line where the unfinished
			// collection starts; make it 1-based like every other message.
			if strings.Contains(m[2], "did not find expected ',' or") || strings.Contains(m[2], "expected '-' indicator") {
				line++
			}
			return nil, fmt.Errorf("%s:%d: %s (YAML syntax)", file, line, m[2])
		}
		return nil, fmt.Errorf("%s: %s", file, msg)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty model file", file)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errAt(root, "", "a model file is a mapping with keys %s", strings.Join(topKeys, ", "))
	}
	sections := map[string]*yaml.Node{}
	if err := p.eachKey(root, "the top level", topKeys, func(k string, kn, v *yaml.Node) error {
		sections[k] = v
		return nil
	}); err != nil {
		return nil, err
	}
	if n := sections["model"]; n != nil {
		if n.Kind != yaml.ScalarNode {
			return nil, p.errAt(n, "model", "the model name is a string")
		}
		if !clean(n.Value) {
			return nil, p.errAt(n, "model", "the model name \"%s\" has control characters or invalid UTF-8", SafeText(n.Value, 80))
		}
		p.m.Name = n.Value
	} else {
		return nil, p.errAt(root, "", "missing key model (the model's name)")
	}
	if n := sections["tokenizer"]; n != nil {
		if n.Kind != yaml.ScalarNode || n.Value == "" {
			return nil, p.errAt(n, "tokenizer", "the tokenizer is a file name (a tokenizer.json, or a GGUF file with a vocabulary)")
		}
		t := n.Value
		if !filepath.IsAbs(t) {
			t = filepath.Join(p.dir, t)
		}
		p.m.Tokenizer = t
	}
	if n := sections["dtype"]; n != nil {
		d, err := ParseDType(n.Value)
		if err != nil || n.Kind != yaml.ScalarNode {
			return nil, p.errAt(n, "dtype", "%v", err)
		}
		if d.Quantized() {
			return nil, p.errAt(n, "dtype", "the default dtype cannot be %s (it applies to state too); give block-quantized dtypes per parameter", d)
		}
		p.dtype = d
	}
	steps := []struct {
		key string
		fn  func(*yaml.Node) error
	}{
		{"dims", p.parseDims}, {"params", p.parseParams}, {"state", p.parseState},
		{"weights", p.parseWeightSpec}, {"functions", p.parseFunctions},
	}
	for _, s := range steps {
		n := sections[s.key]
		if n == nil {
			if s.key == "functions" {
				return nil, p.errAt(root, "", "missing key functions (at least one function)")
			}
			continue
		}
		if err := s.fn(n); err != nil {
			return nil, err
		}
	}
	if err := p.m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if !opt.SkipWeights {
		if err := p.loadWeights(); err != nil {
			return nil, err
		}
	}
	return p.m, nil
}

func (p *modelParser) pos(n *yaml.Node) Pos { return Pos{File: p.file, Line: n.Line} }

func (p *modelParser) errAt(n *yaml.Node, context, format string, args ...any) error {
	return &SourceError{Pos: p.pos(n), Context: context, Err: fmt.Errorf(format, args...)}
}

// resolve follows YAML aliases (anchors let two functions share one body).
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// eachKey walks a mapping in order, rejecting duplicate keys and, when allowed is not nil, keys
// outside it.
func (p *modelParser) eachKey(n *yaml.Node, where string, allowed []string, fn func(k string, kn, v *yaml.Node) error) error {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return p.errAt(n, where, "want a mapping (key: value lines)")
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if kn == nil || v == nil || kn.Kind != yaml.ScalarNode {
			return p.errAt(n.Content[i], where, "keys must be plain strings")
		}
		k := kn.Value
		if k == "<<" {
			return p.errAt(kn, where, "YAML merge keys (<<) are not supported")
		}
		if line, dup := seen[k]; dup {
			return p.errAt(kn, where, "duplicate key %q (first at line %d)", k, line)
		}
		seen[k] = kn.Line
		if allowed != nil && !contains(allowed, k) {
			return p.errAt(kn, where, "unknown key %q in %s (allowed: %s)", k, where, strings.Join(allowed, ", "))
		}
		if err := fn(k, kn, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (p *modelParser) parseDims(n *yaml.Node) error {
	return p.eachKey(n, "dims", nil, func(k string, kn, v *yaml.Node) error {
		ctx := "dims: " + k
		if !identRE.MatchString(k) {
			return p.errAt(kn, ctx, "a dimension name is a plain identifier (letters, digits, _)")
		}
		if k == "true" || k == "false" || k == "sqrt" {
			return p.errAt(kn, ctx, "%s is reserved", k)
		}
		if _, dup := p.dims[k]; dup {
			return p.errAt(kn, ctx, "duplicate name: dimension %s is already defined at %s", k, p.dimPos[k])
		}
		val, err := p.dimExpr(v, p.lookupDim)
		if err != nil {
			return p.errAt(v, ctx, "%v", err)
		}
		p.dims[k] = val
		p.dimPos[k] = p.pos(kn)
		p.m.Dims[k] = val
		return nil
	})
}

func (p *modelParser) lookupDim(name string) (int, bool) {
	v, ok := p.dims[name]
	return v, ok
}

// dimExpr evaluates a YAML scalar holding an integer expression of dimensions.
func (p *modelParser) dimExpr(v *yaml.Node, lookup func(string) (int, bool)) (int, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, errors.New("want an integer or an expression of dimensions")
	}
	e, err := parseExprString(v.Value)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", v.Value, err)
	}
	return intExpr(e, lookup)
}

func intExpr(e *expr, lookup func(string) (int, bool)) (int, error) {
	x, err := evalNum(e, lookup)
	if err != nil {
		return 0, err
	}
	if !x.isInt {
		return 0, fmt.Errorf("%s is %s, not an integer", e, x)
	}
	return x.i, nil
}

// parseType reads a tensor type: a list of dimensions ("[vocab, d]", dtype def) or a string
// "f16[vocab, d]" or "i32[]". (parseDecls handles the mapping form {shape, dtype, init}.)
func (p *modelParser) parseType(n *yaml.Node, def DType, lookup func(string) (int, bool)) (Type, error) {
	n = resolve(n)
	switch n.Kind {
	case yaml.SequenceNode:
		s := Shape{}
		for _, d := range n.Content {
			v, err := p.dimExpr(resolve(d), lookup)
			if err != nil {
				return Type{}, err
			}
			if v <= 0 {
				return Type{}, fmt.Errorf("dimension %s is %d; dimensions must be positive", d.Value, v)
			}
			s = append(s, v)
			if n, ok := s.CheckedElements(); !ok || n > maxElements {
				return Type{}, fmt.Errorf("shape %s is too large (more than %d elements)", s, maxElements)
			}
		}
		return Type{def, s}, nil
	case yaml.ScalarNode:
		return parseTypeString(n.Value, def, lookup)
	}
	return Type{}, errors.New("want a type such as f32[seq, d] or a list of dimensions [seq, d]")
}

func parseTypeString(s string, def DType, lookup func(string) (int, bool)) (Type, error) {
	i := strings.IndexByte(s, '[')
	if i < 0 || !strings.HasSuffix(strings.TrimSpace(s), "]") {
		return Type{}, fmt.Errorf("type %q: want dtype[dims], e.g. f32[seq, d] or i32[] for a scalar", s)
	}
	d := def
	if name := strings.TrimSpace(s[:i]); name != "" {
		var err error
		if d, err = ParseDType(name); err != nil {
			return Type{}, fmt.Errorf("type %q: %v", s, err)
		}
	}
	e, err := parseExprString(s[i:])
	if err != nil {
		return Type{}, fmt.Errorf("type %q: %v", s, err)
	}
	if e.kind != eList {
		return Type{}, fmt.Errorf("type %q: want dtype[dims]", s)
	}
	sh := Shape{}
	for _, de := range e.args {
		v, err := intExpr(de, lookup)
		if err != nil {
			return Type{}, fmt.Errorf("type %q: %v", s, err)
		}
		if v <= 0 {
			return Type{}, fmt.Errorf("type %q: dimension %s is %d; dimensions must be positive", s, de, v)
		}
		sh = append(sh, v)
		if n, ok := sh.CheckedElements(); !ok || n > maxElements {
			return Type{}, fmt.Errorf("type %q is too large (more than %d elements)", s, maxElements)
		}
	}
	return Type{d, sh}, nil
}

// maxElements bounds the size of one declared tensor (16 G elements), far above any model vkc
// targets, so a typo cannot ask for exabytes.
const maxElements = 1 << 34

// expandTemplate lists the names a declaration key stands for: "layers.{i}.wq" gives
// layers.0.wq … layers.(layers-1).wq. {i} is the one template variable of declarations and
// ranges over 0..layers. The returned index maps each name to its i (or -1).
func (p *modelParser) expandTemplate(key string) ([]string, []int, error) {
	toks, err := tokenize(key)
	if err != nil {
		return nil, nil, err
	}
	if len(toks) != 2 || toks[0].kind != tName {
		return nil, nil, fmt.Errorf("%q is not a name (letters, digits, _, . and {i})", key)
	}
	parts := toks[0].parts
	templated := false
	for _, pt := range parts {
		if pt.e != nil {
			templated = true
		}
	}
	if !templated {
		return []string{key}, []int{-1}, nil
	}
	n, ok := p.dims["layers"]
	if !ok {
		return nil, nil, fmt.Errorf("%q uses {i}, which ranges over 0..layers, but there is no dimension layers", key)
	}
	if n > p.limit {
		return nil, nil, fmt.Errorf("%q expands to %d names (the limit is %d)", key, n, p.limit)
	}
	var names []string
	var idx []int
	for i := 0; i < n; i++ {
		name, err := expandParts(parts, func(s string) (int, bool) {
			if s == "i" {
				return i, true
			}
			return p.lookupDim(s)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%q: %v", key, err)
		}
		names = append(names, name)
		idx = append(idx, i)
	}
	return names, idx, nil
}

func expandParts(parts []namePart, lookup func(string) (int, bool)) (string, error) {
	var b strings.Builder
	for _, pt := range parts {
		if pt.e == nil {
			b.WriteString(pt.lit)
			continue
		}
		v, err := intExpr(pt.e, lookup)
		if err != nil {
			return "", fmt.Errorf("template {%s}: %v", pt.e, err)
		}
		fmt.Fprintf(&b, "%d", v)
	}
	return b.String(), nil
}

// nameTaken says what a name already is, for duplicate-name errors; "" when free.
func (p *modelParser) nameTaken(name string) string {
	if d, ok := p.params[name]; ok {
		return fmt.Sprintf("a parameter (declared at %s)", d.Pos)
	}
	if d, ok := p.state[name]; ok {
		return fmt.Sprintf("a state tensor (declared at %s)", d.Pos)
	}
	if _, ok := p.dims[name]; ok {
		return fmt.Sprintf("a dimension (defined at %s)", p.dimPos[name])
	}
	return ""
}

var declKeys = []string{"shape", "dtype", "init", "scale"}

func (p *modelParser) parseDecls(n *yaml.Node, section string, isParam bool) error {
	return p.eachKey(n, section, nil, func(k string, kn, v *yaml.Node) error {
		ctx := section + ": " + k
		names, _, err := p.expandTemplate(k)
		if err != nil {
			return p.errAt(kn, ctx, "%v", err)
		}
		var t Type
		var init initSpec
		if v.Kind == yaml.MappingNode {
			var shapeNode *yaml.Node
			dt := p.dtype
			allowed := declKeys
			if !isParam {
				allowed = declKeys[:2]
			}
			err := p.eachKey(v, section+" entry "+k, allowed, func(kk string, kkn, vv *yaml.Node) error {
				switch kk {
				case "shape":
					shapeNode = vv
				case "dtype":
					d, err := ParseDType(vv.Value)
					if err != nil {
						return p.errAt(vv, ctx, "%v", err)
					}
					dt = d
				case "init":
					if !contains(initKinds, vv.Value) {
						return p.errAt(vv, ctx, "init must be one of %s, got %q", strings.Join(initKinds, ", "), vv.Value)
					}
					init.kind = vv.Value
				case "scale":
					f, err := p.floatValue(vv)
					if err != nil {
						return p.errAt(vv, ctx, "scale: %v", err)
					}
					init.scale = f
					init.hasScale = true
				}
				return nil
			})
			if err != nil {
				return err
			}
			if shapeNode == nil {
				return p.errAt(v, ctx, "missing shape")
			}
			if t, err = p.parseType(shapeNode, dt, p.lookupDim); err != nil {
				return p.errAt(shapeNode, ctx, "%v", err)
			}
		} else if t, err = p.parseType(v, p.dtype, p.lookupDim); err != nil {
			return p.errAt(v, ctx, "%v", err)
		}
		if t.DType.Quantized() {
			if !isParam && !t.DType.CacheFormat() {
				return p.errAt(v, ctx, "state cannot be %s: a block-quantized state is a KV cache in q8_0 or q4_0", t.DType)
			}
			if err := t.CheckBlocks(); err != nil {
				return p.errAt(v, ctx, "%v", err)
			}
		}
		for _, name := range names {
			if what := p.nameTaken(name); what != "" {
				return p.errAt(kn, ctx, "duplicate name: %s is already %s", name, what)
			}
			d := &Decl{Name: name, Type: Type{t.DType, t.Shape.Clone()}, Pos: p.pos(kn)}
			if isParam {
				p.params[name] = d
				p.m.Params = append(p.m.Params, d)
				if init.kind != "" || init.hasScale {
					p.inits[name] = init
				}
			} else {
				p.state[name] = d
				p.m.State = append(p.m.State, d)
			}
		}
		return nil
	})
}

func (p *modelParser) parseParams(n *yaml.Node) error { return p.parseDecls(n, "params", true) }
func (p *modelParser) parseState(n *yaml.Node) error  { return p.parseDecls(n, "state", false) }

// floatValue reads a YAML scalar as a number (an expression of dimensions is allowed).
func (p *modelParser) floatValue(v *yaml.Node) (float64, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, errors.New("want a number")
	}
	e, err := parseExprString(v.Value)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", v.Value, err)
	}
	x, err := evalNum(e, p.lookupDim)
	if err != nil {
		return 0, err
	}
	return x.float(), nil
}
