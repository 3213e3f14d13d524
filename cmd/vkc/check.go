package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
)

func init() {
	register(&command{
		name:    "check",
		usage:   "[-skip-weights] [-write-weights FILE] [--dim NAME=VALUE] model.yaml|model.gguf|model.onnx",
		short:   "parse and validate a model; summarise its parameters, state, functions and ops",
		example: "vkc check examples/tinyllama/model.yaml",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			prec := precisionFlags(fs)
			skip := fs.Bool("skip-weights", false, "do not read or generate the weights (faster for large models)")
			write := fs.String("write-weights", "", "write the model's weights (loaded or generated) to this safetensors `file`, e.g. for a peer implementation")
			force := fs.Bool("force", false, "with -write-weights: replace a file that is not a safetensors file")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one model.yaml or .gguf file, got %d arguments", len(args))
				}
				m, err := loadModel(args[0], *skip, dims, *prec)
				if err != nil {
					return err
				}
				summarize(stdout, m, !*skip)
				if *write != "" {
					if *skip {
						return usagef("-write-weights needs the weights; drop -skip-weights")
					}
					inputs := []string{args[0]}
					if wf, err := vkc.ModelWeightsFile(m); err == nil {
						inputs = append(inputs, wf)
					}
					err := whileWriting(func(ctx context.Context) error {
						w := &outputs{ctx: ctx, inputs: inputs, force: *force}
						if err := w.safetensors(*write, m.Weights); err != nil {
							return err
						}
						return w.commit()
					})
					if err != nil {
						return fmt.Errorf("write weights: %w", err)
					}
					fmt.Fprintf(stdout, "weights written to %s\n", *write)
				}
				return nil
			}
		},
	})
}

// summarize prints what vkc check reports.
func summarize(w io.Writer, m *ir.Model, weights bool) {
	fmt.Fprintf(w, "model %s (%s): ok\n", m.Name, m.Source)
	dims := make([]string, 0, len(m.Dims))
	for _, k := range sortedNames(m.Dims) {
		dims = append(dims, fmt.Sprintf("%s=%d", k, m.Dims[k]))
	}
	if len(dims) > 0 {
		fmt.Fprintf(w, "dims: %s\n", strings.Join(dims, " "))
	}
	elems, bytes := 0, 0
	byDType := map[ir.DType]int{}
	for _, d := range m.Params {
		elems += d.Type.Shape.NumElements()
		bytes += d.Type.Bytes()
		byDType[d.Type.DType] += d.Type.Bytes()
	}
	var dts []string
	for _, d := range sortedDTypes(byDType) {
		dts = append(dts, d.String()+" "+humanBytes(byDType[d]))
	}
	fmt.Fprintf(w, "parameters: %d tensors, %s elements, %s (%s)", len(m.Params), groupDigits(elems), humanBytes(bytes), strings.Join(dts, ", "))
	if weights {
		fmt.Fprintf(w, "; weights loaded: %d\n", len(m.Weights))
	} else {
		fmt.Fprintln(w, "; weights not loaded")
	}
	sbytes := 0
	for _, d := range m.State {
		sbytes += d.Type.Bytes()
	}
	fmt.Fprintf(w, "state: %d tensors, %s", len(m.State), humanBytes(sbytes))
	if len(m.State) > 0 {
		fmt.Fprintf(w, " (%s %s", m.State[0].Name, m.State[0].Type)
		if len(m.State) > 1 {
			fmt.Fprintf(w, ", …")
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
	switch {
	case m.Tokenizer != "":
		fmt.Fprintf(w, "tokenizer: %s\n", m.Tokenizer)
	case importer.IsGGUFPath(m.Source):
		if why := importer.GGUFVocabulary(m.Source); why != "" {
			fmt.Fprintf(w, "tokenizer: none: %s\n", why)
		}
	}
	used := map[string]bool{}
	for _, f := range m.Functions {
		for _, n := range f.Nodes {
			if n.Op == ir.Param {
				used[n.Name] = true
			}
		}
	}
	var unused []string
	for _, d := range m.Params {
		if !used[d.Name] {
			unused = append(unused, d.Name)
		}
	}
	if len(unused) > 0 {
		fmt.Fprintf(w, "note: %d parameters are used by no function: %s\n", len(unused), abbreviate(unused, 4))
	}
	fmt.Fprintln(w, "functions:")
	for _, f := range m.Functions {
		fmt.Fprintf(w, "  %s\n", signature(f))
		if l := f.Length; l != nil {
			fmt.Fprintf(w, "    run-time length %s in %d..%d: shapes above are at the capacity %d; a run takes %s rows of the inputs that mention it\n",
				l.Dim, l.Min, l.Max, l.Max, l.Dim)
		}
		if len(f.Updates) > 0 {
			names := make([]string, len(f.Updates))
			for i, u := range f.Updates {
				names[i] = u.Name
			}
			fmt.Fprintf(w, "    updates %d state tensors: %s\n", len(f.Updates), abbreviate(names, 4))
		}
		var ops []string
		for _, c := range f.OpCounts() {
			ops = append(ops, fmt.Sprintf("%s %d", c.Op, c.Count))
		}
		fmt.Fprintf(w, "    %d nodes: %s\n", len(f.Nodes), strings.Join(ops, ", "))
	}
}

// signature formats "decode(tokens: i32[1], pos: i32[]) -> (logits: f32[1,256])".
func signature(f *ir.Function) string {
	in := make([]string, len(f.Inputs))
	for i, n := range f.Inputs {
		in[i] = n.Name + ": " + n.Type().String()
	}
	out := make([]string, len(f.Outputs))
	for i, o := range f.Outputs {
		out[i] = o.Name + ": " + o.Value.Type().String()
	}
	return fmt.Sprintf("%s(%s) -> (%s)", f.Name, strings.Join(in, ", "), strings.Join(out, ", "))
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(", … (%d more)", len(names)-n)
}

func sortedNames(m map[string]int) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func sortedDTypes(m map[ir.DType]int) []ir.DType {
	k := make([]ir.DType, 0, len(m))
	for d := range m {
		k = append(k, d)
	}
	sort.Slice(k, func(i, j int) bool { return k[i] < k[j] })
	return k
}

func groupDigits(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// positional returns the positional arguments of a command whose flags may also follow them
// ("vkc eval model.yaml -f decode"): the standard flag package stops at the first positional,
// so the rest is parsed again after each one. errHelpShown means -h was given and answered.
func positional(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	usage, out := fs.Usage, fs.Output()
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	// run prints the message and the usage once for the error returned here
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	for len(args) > 0 {
		pos = append(pos, args[0])
		if err := fs.Parse(args[1:]); err != nil {
			if err == flag.ErrHelp {
				fs.SetOutput(out)
				usage()
				return nil, errHelpShown
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
	}
	return pos, nil
}

// errHelpShown ends a command successfully after its usage was printed for -h.
var errHelpShown = errors.New("help shown")
