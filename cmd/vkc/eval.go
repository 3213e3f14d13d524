package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/ir/onnx"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func init() {
	register(&command{
		name:    "eval",
		usage:   "model.yaml|model.gguf|model.onnx [--dim NAME=VALUE] -f FUNCTION --input NAME=VALUE ... [--state-from FILE] [-o OUT] [--state-to FILE] [--greedy N]",
		short:   "run a function of a model in the reference interpreter",
		example: "vkc eval examples/tinyllama/model.yaml -f decode --input tokens=37 --input pos=0 --greedy 4",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			prec := precisionFlags(fs)
			fn := fs.String("f", "", "the function to run (default: the model's first)")
			var inputs multiFlag
			fs.Var(&inputs, "input", "an input: NAME=FILE.npy, NAME=FILE.safetensors[:TENSOR] (default tensor: NAME), NAME=FILE.pb (ONNX TensorProto), "+
				"or NAME=VALUES with numbers, e.g. pos=0 or tokens=[1,2,3]; repeat for each input")
			stateFrom := fs.String("state-from", "", "a .safetensors file with the state to start from (default: zeros)")
			out := fs.String("o", "", "write the outputs to OUT: a .safetensors file, a .npy file (one output) or a directory (NAME.npy each)")
			stateTo := fs.String("state-to", "", "write the state after the run to this .safetensors file")
			greedy := fs.Int("greedy", 0, "after the run, generate N tokens greedily with the decode function (inputs tokens and pos, output logits)")
			decodeFn := fs.String("decode", "decode", "the function --greedy runs for each new token")
			force := fs.Bool("force", false, "replace -o and --state-to files that are not safetensors or .npy files")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one model.yaml or .gguf file, got %d arguments", len(args))
				}
				m, err := loadModel(args[0], false, dims, *prec)
				if err != nil {
					return err
				}
				f := m.Function(*fn)
				if *fn == "" && len(m.Functions) > 0 {
					f = m.Functions[0]
				}
				if f == nil {
					return usagef("model %s has no function %q (it has %s)", m.Name, *fn, functionNames(m))
				}
				in, err := readInputs(f, inputs)
				if err != nil {
					return err
				}
				var state map[string]*ir.Tensor // nil: zeros
				if *stateFrom != "" {
					if state, err = safetensors.ReadAll(*stateFrom); err != nil {
						return err
					}
				}
				res, state, err := interp.Run(m, f.Name, in, state)
				if err != nil {
					return err
				}
				if *out == "" {
					for _, o := range f.Outputs {
						fmt.Fprintf(stdout, "%s %s\n", o.Name, describe(res[o.Name]))
					}
				}
				if *greedy > 0 {
					if state, err = generate(stdout, m, state, in, res, *decodeFn, *greedy); err != nil {
						return err
					}
				}
				// The outputs and the state are written all or none, over none of the files
				// read (but --state-to may update the --state-from file).
				inputs := append([]string{args[0]}, inputFiles(inputs)...)
				if wf, err := vkc.ModelWeightsFile(m); err == nil {
					inputs = append(inputs, wf)
				}
				return whileWriting(func(ctx context.Context) error {
					w := &outputs{ctx: ctx, inputs: append(inputs, *stateFrom), force: *force}
					defer w.abort()
					if *out != "" {
						if err := w.tensors(*out, f.Name, res); err != nil {
							return err
						}
					}
					if *stateTo != "" {
						w.inputs = inputs
						if err := w.safetensors(*stateTo, state); err != nil {
							return err
						}
					}
					return w.commit()
				})
			}
		},
	})
}

func functionNames(m *ir.Model) string {
	n := make([]string, len(m.Functions))
	for i, f := range m.Functions {
		n[i] = f.Name
	}
	return strings.Join(n, ", ")
}

// readInputs builds the function's inputs from NAME=VALUE arguments.
func readInputs(f *ir.Function, args []string) (map[string]*ir.Tensor, error) {
	decl := map[string]ir.Type{}
	bounded := map[string]bool{}
	for i, n := range f.Inputs {
		decl[n.Name] = n.Type()
		bounded[n.Name] = f.Length != nil && f.Length.Inputs[i]
	}
	in := map[string]*ir.Tensor{}
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usagef("--input %q: want NAME=VALUE", a)
		}
		t, ok := decl[name]
		if !ok {
			return nil, usagef("function %s has no input %q (its inputs: %s)", f.Name, name, inputList(f))
		}
		if _, dup := in[name]; dup {
			return nil, usagef("input %s given twice", name)
		}
		x, err := readInputRows(name, val, t, bounded[name])
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		in[name] = x
	}
	for _, n := range f.Inputs {
		if in[n.Name] == nil {
			return nil, usagef("missing --input %s (function %s takes %s)", n.Name, f.Name, inputList(f))
		}
	}
	return in, nil
}

func inputList(f *ir.Function) string {
	l := make([]string, len(f.Inputs))
	for i, n := range f.Inputs {
		l[i] = n.Name + " " + n.Type().String()
	}
	return strings.Join(l, ", ")
}

// readInput reads one input (a .npy file, FILE.safetensors[:TENSOR], an ONNX TensorProto
// FILE.pb or literal numbers) and
// converts it to the declared type, refusing what would change its values or meaning: a file's
// shape may differ from the input's only in dimensions of size 1 ([16] for [1,16], not [16,4]
// for [4,16]); values for an integer input must be integers within the dtype's range (no
// truncation of 0.7 to 0); a finite value must stay finite in the input's dtype (1e40 is not an
// f32).
func readInput(name, val string, want ir.Type) (*ir.Tensor, error) {
	var x *ir.Tensor
	var err error
	switch {
	case strings.HasSuffix(val, ".npy"):
		x, err = npy.ReadFile(val)
	case strings.HasSuffix(val, ".pb"):
		// An ONNX TensorProto file (as ONNX's test data sets hold them): its element type in
		// the vkc type that holds it (int64 as i32 when every value fits, and so on).
		var t *onnx.Tensor
		if t, err = onnx.ReadTensor(val); err == nil {
			x, err = importer.TensorFromONNX(val, t.DataType, t.Dims, t.RawData)
		}
	case strings.Contains(val, ".safetensors"):
		file, tensor, ok := strings.Cut(val, ".safetensors:")
		if ok {
			file += ".safetensors"
		} else {
			file, tensor = val, name
		}
		var all map[string]*ir.Tensor
		if all, err = safetensors.ReadAll(file); err == nil {
			if x = all[tensor]; x == nil {
				err = fmt.Errorf("%s has no tensor %s", file, quote(tensor))
			}
		}
	default:
		return parseValues(val, want)
	}
	if err != nil {
		return nil, err
	}
	if !squeezed(x.Type.Shape).Equal(squeezed(want.Shape)) {
		return nil, fmt.Errorf("%s is %s, the input is %s (only dimensions of size 1 may differ)", quote(val), x.Type, want)
	}
	if x.Type.DType != want.DType {
		v := x.Float64s()
		for i, f := range v {
			if err := fits(f, want.DType); err != nil {
				return nil, fmt.Errorf("%s: element %d: %w", quote(val), i, err)
			}
		}
		x = x.Convert(want.DType)
	}
	x.Type.Shape = want.Shape.Clone()
	return x, nil
}

// readInputRows is readInput for an input whose leading axis may be the function's run-time
// length (rows): it then takes any whole number of rows up to want's (a prompt of n tokens for
// tokens i32[512]).
func readInputRows(name, val string, want ir.Type, rows bool) (*ir.Tensor, error) {
	if !rows || want.Shape.Rank() == 0 {
		return readInput(name, val, want)
	}
	// Count the values as given, then read them as whole rows.
	var n int
	switch {
	case strings.HasSuffix(val, ".npy"), strings.Contains(val, ".safetensors"):
		x, err := readFileAny(name, val)
		if err != nil {
			return nil, err
		}
		n = x.NumElements()
	default:
		body := strings.TrimSpace(val)
		if strings.HasPrefix(body, "[") && strings.HasSuffix(body, "]") {
			body = strings.TrimSpace(body[1 : len(body)-1])
		}
		if body != "" {
			n = len(strings.Split(body, ","))
		}
	}
	per := max(want.Shape[1:].NumElements(), 1)
	if n == 0 || n%per != 0 || n > want.Shape.NumElements() {
		return nil, fmt.Errorf("%s holds %d values: want 1 to %d rows of %d (the input is %s; its leading axis is the run-time length)",
			quote(val), n, want.Shape[0], per, want)
	}
	want.Shape = append(ir.Shape{n / per}, want.Shape[1:]...)
	return readInput(name, val, want)
}

// readFileAny reads a .npy or safetensors input whatever its shape.
func readFileAny(name, val string) (*ir.Tensor, error) {
	if strings.HasSuffix(val, ".npy") {
		return npy.ReadFile(val)
	}
	file, tensor, ok := strings.Cut(val, ".safetensors:")
	if ok {
		file += ".safetensors"
	} else {
		file, tensor = val, name
	}
	all, err := safetensors.ReadAll(file)
	if err != nil {
		return nil, err
	}
	x := all[tensor]
	if x == nil {
		return nil, fmt.Errorf("%s has no tensor %s", file, quote(tensor))
	}
	return x, nil
}

// squeezed is s without its dimensions of size 1.
func squeezed(s ir.Shape) ir.Shape {
	var out ir.Shape
	for _, d := range s {
		if d != 1 {
			out = append(out, d)
		}
	}
	return out
}

// fits says why the value v cannot become dtype to unchanged in kind: a
// non-integer, NaN or out-of-range value for an integer type, or a finite value that overflows
// a float type. Rounding to a narrower float is allowed.
func fits(v float64, to ir.DType) error {
	num := strconv.FormatFloat(v, 'g', -1, 64)
	switch {
	case to == ir.Bool:
		if v != 0 && v != 1 {
			return fmt.Errorf("%s is not a bool (0 or 1)", num)
		}
	case to.IsInt():
		lo, hi := float64(math.MinInt32), float64(math.MaxInt32)
		if to == ir.U32 {
			lo, hi = 0, math.MaxUint32
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) {
			return fmt.Errorf("%s is not an integer (the input is %s)", num, to)
		}
		if v < lo || v > hi {
			return fmt.Errorf("%s is outside the range of %s (%d..%d)", num, to, int64(lo), int64(hi))
		}
	case to.IsFloat():
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			if r := ir.TensorFromFloat64s(ir.T(to), []float64{v}).Float64(0); math.IsInf(r, 0) {
				return fmt.Errorf("%s overflows %s", num, to)
			}
		}
	}
	return nil
}

// parseValues reads "3", "[1, 2, 3]" or "1,2,3" as a tensor of type want; an empty element
// ("1,,2"), a value that does not fit the dtype (see fits) or a wrong count is an error.
func parseValues(s string, want ir.Type) (*ir.Tensor, error) {
	body := strings.TrimSpace(s)
	if strings.HasPrefix(body, "[") && strings.HasSuffix(body, "]") {
		body = strings.TrimSpace(body[1 : len(body)-1])
	}
	var vals []float64
	if body != "" {
		for i, p := range strings.Split(body, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				return nil, fmt.Errorf("%s: value %d is empty", quote(s), i+1)
			}
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				var ne *strconv.NumError
				if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
					return nil, fmt.Errorf("%s: value %d (%s) overflows any float", quote(s), i+1, quote(p))
				}
				if _, serr := os.Stat(s); serr == nil {
					return nil, fmt.Errorf("%s: only .npy and .safetensors files are read", quote(s))
				}
				return nil, fmt.Errorf("%s is not a number, a .npy or a .safetensors file", quote(s))
			}
			if err := fits(v, want.DType); err != nil {
				return nil, fmt.Errorf("value %d: %w", i+1, err)
			}
			vals = append(vals, v)
		}
	}
	if len(vals) != want.Shape.NumElements() {
		return nil, fmt.Errorf("%d values for %s", len(vals), want)
	}
	return ir.TensorFromFloat64s(want, vals), nil
}

// describe prints a tensor briefly: type, the first values, and min/max/mean.
func describe(x *ir.Tensor) string {
	v := x.Float64s()
	var b strings.Builder
	b.WriteString(x.Type.String() + " [")
	for i := 0; i < len(v) && i < 8; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(v[i], 'g', 5, 64))
	}
	if len(v) > 8 {
		b.WriteString(" …")
	}
	b.WriteByte(']')
	if len(v) > 1 {
		lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
		for _, f := range v {
			lo, hi, sum = math.Min(lo, f), math.Max(hi, f), sum+f
		}
		fmt.Fprintf(&b, " min %.5g max %.5g mean %.5g", lo, hi, sum/float64(len(v)))
	}
	return b.String()
}

// generate continues a prompt greedily: the argmax of the last logits row is fed to decodeFn
// at the next position, n times. It needs inputs tokens and pos and an output logits.
func generate(w io.Writer, m *ir.Model, state, in, res map[string]*ir.Tensor, decodeFn string, n int) (map[string]*ir.Tensor, error) {
	dec := m.Function(decodeFn)
	if dec == nil {
		return nil, usagef("--greedy: model %s has no function %q (use --decode)", m.Name, decodeFn)
	}
	logits, pos := res["logits"], in["pos"]
	if logits == nil || pos == nil || in["tokens"] == nil {
		return nil, usagef("--greedy needs a function with inputs tokens and pos and an output logits")
	}
	next := int(pos.Float64(0)) + in["tokens"].NumElements()
	var toks []string
	for step := 0; ; step++ {
		cols := logits.Type.Shape[logits.Type.Shape.Rank()-1]
		last := logits.NumElements()/cols - 1
		best := 0
		for c := 1; c < cols; c++ {
			if logits.Float64(last*cols+c) > logits.Float64(last*cols+best) {
				best = c
			}
		}
		toks = append(toks, strconv.Itoa(best))
		if step == n-1 {
			break
		}
		out, st, err := interp.Run(m, dec.Name, map[string]*ir.Tensor{
			"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{float64(best)}),
			"pos":    ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(next)}),
		}, state)
		if err != nil {
			return nil, fmt.Errorf("--greedy step %d: %w", step+1, err)
		}
		logits, state = out["logits"], st
		next++
	}
	fmt.Fprintf(w, "greedy tokens: %s\n", strings.Join(toks, " "))
	return state, nil
}
