package importer

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// YAMLOptions configure WriteModelYAML.
type YAMLOptions struct {
	// Header lines are written as comments at the top.
	Header []string
	// Inputs are the files the model was read from: neither output may replace one of them.
	Inputs []string
	// Force replaces existing files that are not a model.yaml and a safetensors file.
	Force bool
}

// WriteModelYAML writes m as a model.yaml file at path and its parameters, once, to a
// safetensors file beside it (path with .safetensors for .yaml), so that ir.ParseModel(path)
// gives back the same functions and weights. Each node becomes one statement; a scalar constant
// is written as a number where model.yaml's rule for bare numbers gives it the same dtype, and
// any other constant becomes a parameter named const.N. The two files are written all or none
// (internal/safefile): nothing is half-written, and an existing file is replaced only by a
// complete one, and only when it is a model.yaml or a safetensors file (or opts.Force). It
// returns the weights file's path ("" when the model has no parameters).
func WriteModelYAML(ctx context.Context, m *ir.Model, path string, opts YAMLOptions) (string, error) {
	weights := strings.TrimSuffix(path, filepath.Ext(path)) + ".safetensors"
	if filepath.Clean(weights) == filepath.Clean(path) {
		weights = path + ".safetensors"
	}
	w := &yamlWriter{m: m, tensors: map[string]*ir.Tensor{}, taken: map[string]bool{}}
	for _, d := range m.Params {
		w.taken[d.Name] = true
		t := m.Weights[d.Name]
		if t == nil {
			return "", fmt.Errorf("parameter %s has no weights loaded", d.Name)
		}
		w.tensors[d.Name] = t
	}
	var body strings.Builder
	for _, f := range m.Functions {
		if err := w.function(&body, f); err != nil {
			return "", fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	var b strings.Builder
	for _, h := range opts.Header {
		fmt.Fprintf(&b, "# %s\n", h)
	}
	fmt.Fprintf(&b, "model: %s\n", m.Name)
	params := append([]*ir.Decl(nil), m.Params...)
	params = append(params, w.extra...)
	if len(params) > 0 {
		fmt.Fprintf(&b, "weights: {file: %s}\n", yamlScalar(filepath.Base(weights)))
		b.WriteString("params:\n")
		for _, d := range params {
			fmt.Fprintf(&b, "  %s: %s\n", yamlScalar(d.Name), typeString(d.Type))
		}
	}
	b.WriteString("functions:\n")
	b.WriteString(body.String())
	var batch safefile.Batch
	if len(params) > 0 {
		err := batch.Add(ctx, weights, safetensors.FileOptions(opts.Inputs, opts.Force),
			func(out io.Writer) error { return safetensors.Encode(out, w.tensors) })
		if err != nil {
			return "", err
		}
	} else {
		weights = ""
	}
	err := batch.Add(ctx, path, safefile.Options{What: "model.yaml", Inputs: opts.Inputs, Check: IsModelYAML, Force: opts.Force},
		func(out io.Writer) error { _, err := io.WriteString(out, b.String()); return err })
	if err != nil {
		return "", err
	}
	return weights, batch.Commit()
}

// IsModelYAML recognises a file that WriteModelYAML (and vkc import) may replace: YAML with a
// top-level model key.
func IsModelYAML(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if yaml.Unmarshal(b, &doc) != nil || doc["model"] == nil {
		return fmt.Errorf("it is not a model.yaml")
	}
	return nil
}

type yamlWriter struct {
	m       *ir.Model
	tensors map[string]*ir.Tensor
	extra   []*ir.Decl
	taken   map[string]bool
	consts  int
}

var yamlIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func typeString(t ir.Type) string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = strconv.Itoa(d)
	}
	return t.DType.String() + "[" + strings.Join(dims, ", ") + "]"
}

// yamlScalar quotes s when YAML would not read it back as the same plain string.
func yamlScalar(s string) string {
	if regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-]*$`).MatchString(s) && s != "true" && s != "false" && s != "null" {
		return s
	}
	return strconv.Quote(s)
}

func (w *yamlWriter) function(b *strings.Builder, f *ir.Function) error {
	fmt.Fprintf(b, "  %s:\n    inputs:", f.Name)
	if len(f.Inputs) == 0 {
		b.WriteString(" {}")
	}
	b.WriteString("\n")
	names := map[*ir.Node]string{}
	for _, in := range f.Inputs {
		if !yamlIdent.MatchString(in.Name) {
			return fmt.Errorf("input %q is not a model.yaml identifier", in.Name)
		}
		names[in] = in.Name
		w.taken[in.Name] = true
		fmt.Fprintf(b, "      %s: %s\n", in.Name, typeString(in.Type()))
	}
	outNames := map[string]bool{}
	for _, o := range f.Outputs {
		outNames[o.Name] = true
		w.taken[o.Name] = true
	}
	// A node that is an output takes the output's name, so the output list names variables.
	outOf := map[*ir.Node]string{}
	for _, o := range f.Outputs {
		if _, ok := outOf[o.Value.Node]; !ok && o.Value.Node.Op.Info().Kind != ir.KindSource && len(o.Value.Node.Outs) == 1 {
			outOf[o.Value.Node] = o.Name
		}
	}
	b.WriteString("    outputs: [")
	for i, o := range f.Outputs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(o.Name)
	}
	b.WriteString("]\n    body:")
	var stmts []string
	for _, n := range f.Nodes {
		switch n.Op {
		case ir.Input:
			continue
		case ir.Param:
			names[n] = n.Name
			continue
		case ir.State:
			return fmt.Errorf("state %s: model.yaml writing of state is not supported", n.Name)
		case ir.Const:
			continue // written where it is used
		}
		if len(n.Outs) != 1 {
			return fmt.Errorf("node %s has %d outputs (not supported)", n, len(n.Outs))
		}
		name := outOf[n]
		if name == "" {
			name = w.variable(n)
		}
		names[n] = name
		args := make([]string, len(n.Args))
		for i, a := range n.Args {
			s, err := w.arg(n, i, a, names)
			if err != nil {
				return err
			}
			args[i] = s
		}
		attrs, err := attrString(n)
		if err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
		all := append(args, attrs...)
		stmts = append(stmts, fmt.Sprintf("%s = %s(%s)", name, n.Op, strings.Join(all, ", ")))
	}
	for _, o := range f.Outputs {
		if names[o.Value.Node] == o.Name {
			continue
		}
		src, err := w.arg(nil, 0, o.Value, names)
		if err != nil {
			return err
		}
		stmts = append(stmts, fmt.Sprintf("%s = %s", o.Name, src))
	}
	if len(stmts) == 0 {
		b.WriteString(" []")
	}
	b.WriteString("\n")
	for _, s := range stmts {
		if strings.Contains(s, ": ") || strings.Contains(s, " #") || strings.ContainsAny(s, "\"'\n") {
			s = strconv.Quote(s)
		}
		fmt.Fprintf(b, "      - %s\n", s)
	}
	return nil
}

// variable names a node's result: its display name when that is a free identifier, else t<ID>.
func (w *yamlWriter) variable(n *ir.Node) string {
	name := n.Name
	if !yamlIdent.MatchString(name) || w.taken[name] {
		name = fmt.Sprintf("t%d", n.ID)
	}
	for k := 2; w.taken[name]; k++ {
		name = fmt.Sprintf("t%d_%d", n.ID, k)
	}
	w.taken[name] = true
	return name
}

// arg writes argument i of n (nil n: an output's source).
func (w *yamlWriter) arg(n *ir.Node, i int, a ir.Value, names map[*ir.Node]string) (string, error) {
	if s, ok := names[a.Node]; ok {
		return s, nil
	}
	if a.Node.Op != ir.Const {
		s, ok := names[a.Node]
		if !ok {
			return "", fmt.Errorf("value %%%d is used before it is written", a.Node.ID)
		}
		return s, nil
	}
	c := a.Node.Value
	if n != nil && c.Type.Shape.Rank() == 0 {
		if s, ok := inlineConst(n, i, c); ok {
			return s, nil
		}
	}
	w.consts++
	name := fmt.Sprintf("const.%d", w.consts)
	for w.taken[name] {
		w.consts++
		name = fmt.Sprintf("const.%d", w.consts)
	}
	w.taken[name] = true
	w.extra = append(w.extra, &ir.Decl{Name: name, Type: c.Type})
	w.tensors[name] = c
	names[a.Node] = name
	return name, nil
}

// inlineConst writes a scalar constant as a number when model.yaml reads it back with the same
// dtype: in an elementwise op it takes the dtype of the first non-bool tensor operand, elsewhere
// an integer is i32 and a number with a point f32 (docs/model-format.md).
func inlineConst(n *ir.Node, i int, c *ir.Tensor) (string, bool) {
	d := c.Type.DType
	v := c.Float64(0)
	if math.IsNaN(v) || math.IsInf(v, 0) || d == ir.Bool || d == ir.BF16 {
		return "", false
	}
	want := ir.InvalidDType
	if n.Op.IsElementwise() {
		for _, a := range n.Args {
			if a.Node.Op == ir.Const && a.Node.Value.Type.Shape.Rank() == 0 {
				continue
			}
			if t := a.Type().DType; t != ir.Bool {
				want = t
				break
			}
		}
	}
	if want == ir.InvalidDType {
		switch d {
		case ir.I32:
			want = ir.I32
		case ir.F32:
			want = ir.F32
		default:
			return "", false
		}
	}
	if want != d {
		return "", false
	}
	if d.IsInt() {
		return strconv.FormatInt(int64(v), 10), true
	}
	// f32 and f16 values are f32 numbers: the shortest f32 spelling reads back to the same bits.
	s := strconv.FormatFloat(v, 'g', -1, 32)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s, true
}

// attrString writes a node's attributes as key=value in name order.
func attrString(n *ir.Node) ([]string, error) {
	keys := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		var s string
		switch v := n.Attrs[k].(type) {
		case int:
			s = strconv.Itoa(v)
		case int64:
			s = strconv.FormatInt(v, 10)
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("attribute %s=%v has no model.yaml spelling", k, v)
			}
			s = strconv.FormatFloat(v, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") {
				s += ".0"
			}
		case bool:
			s = strconv.FormatBool(v)
		case string:
			if yamlIdent.MatchString(v) {
				s = v
			} else {
				s = strconv.Quote(v)
			}
		case []int:
			parts := make([]string, len(v))
			for i, x := range v {
				parts[i] = strconv.Itoa(x)
			}
			s = "[" + strings.Join(parts, ", ") + "]"
		default:
			return nil, fmt.Errorf("attribute %s has a value of type %T", k, v)
		}
		out = append(out, k+"="+s)
	}
	return out, nil
}
