package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/plan"
)

func init() {
	register(&command{
		name:    "run",
		usage:   "plan.bin -f NAME --input name=FILE... [-o out.safetensors|out.npy|DIR]  |  plan.bin --prompt-ids 1,2,3 --steps N",
		short:   "run a function of a compiled plan on inputs, or generate tokens greedily with a causal language model",
		example: "vkc run tinyllama.plan --prompt-ids 37,235,140,72 --steps 8",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			fn := fs.String("f", "", "the function to run")
			var inputs multiFlag
			fs.Var(&inputs, "input", "NAME=VALUE: an input as a .npy file, FILE.safetensors[:TENSOR] (default tensor: NAME), an ONNX TensorProto FILE.pb, or numbers (\"3\", \"1,2,3\"); repeatable")
			out := fs.String("o", "", "write the outputs to a .safetensors file, a .npy file (one output) or a folder of .npy files (default: print a summary)")
			prompt := fs.String("prompt-ids", "", "comma-separated prompt token ids: greedy generation through the plan's prefill and decode functions")
			steps := fs.Int("steps", 16, "with --prompt-ids: tokens to generate")
			device := fs.String("device", "", "the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			foreign := fs.Bool("allow-foreign", false, "run a plan compiled for another device")
			force := fs.Bool("force", false, "replace an -o file that is not a safetensors or .npy file")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one plan file, got %d arguments", len(args))
				}
				lo := engine.Options{Device: *device, AllowForeign: *foreign}
				if *prompt != "" {
					if *fn != "" || len(inputs) > 0 || *out != "" {
						return usagef("--prompt-ids generates through prefill and decode; it takes no -f, --input or -o")
					}
					ids, err := parseIDs(*prompt)
					if err != nil {
						return usagef("--prompt-ids: %v", err)
					}
					if *steps < 1 {
						return usagef("--steps %d: want at least 1", *steps)
					}
					return generateCmd(stdout, args[0], lo, ids, *steps)
				}
				if *fn == "" {
					return usagef("-f NAME (the function to run) or --prompt-ids is required")
				}
				return runCmd(stdout, args[0], lo, *fn, inputs, *out, *force)
			}
		},
	})
}

// parseIDs reads comma-separated token ids; an empty element ("1,,2", "1,2,") is an error, not a
// silently shorter prompt.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for i, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("id %d of %s is empty", i+1, quote(s))
		}
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("id %d: %s is not a token id (an integer of 32 bits)", i+1, quote(p))
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func runCmd(w io.Writer, path string, lo engine.Options, fn string, inputs []string, out string, force bool) error {
	// The plan is read (and the input names checked) before a device is opened, so a wrong
	// call fails fast with the plan's signature in the message.
	p, err := plan.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := engine.FindFunction(p, fn)
	if err != nil {
		return usagef("%v", err)
	}
	in, err := readPlanInputs(f, inputs, nil)
	if err != nil {
		return err
	}
	l, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer l.Close()
	ctx, stop := interruptible()
	defer stop()
	t0 := time.Now()
	res, err := l.Run(ctx, fn, in)
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	outs, err := vkc.Outputs(f, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s on %s: %v wall (first run: includes pipeline warm-up)\n", fn, l.Device.Info.Name, wall.Round(time.Microsecond))
	if out != "" {
		files := append([]string{path, p.ResolveSource(path)}, inputFiles(inputs)...)
		o := &outputs{ctx: ctx, inputs: files, force: force}
		defer o.abort()
		if err := o.tensors(out, f.Name, outs); err != nil {
			return err
		}
		if err := o.commit(); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", out)
		return nil
	}
	for _, o := range f.Outputs {
		fmt.Fprintf(w, "%s = %s\n", o.Name, describe(outs[o.Name]))
	}
	return nil
}

// readPlanInputs reads NAME=VALUE arguments for the plan function f, in f's layout. An input not
// given is an error, or when fill is set, fill's bytes.
func readPlanInputs(f *plan.Function, args []string, fill func(v *plan.Value) ([]byte, error)) (map[string][]byte, error) {
	in := map[string][]byte{}
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usagef("--input %q: want NAME=VALUE", a)
		}
		var v *plan.Value
		for i := range f.Inputs {
			if f.Inputs[i].Name == name {
				v = &f.Inputs[i]
			}
		}
		if v == nil {
			return nil, usagef("function %s has no input %q (its inputs: %s)", f.Name, name, planSignature(f.Inputs))
		}
		if _, dup := in[name]; dup {
			return nil, usagef("input %s given twice", name)
		}
		want, err := vkc.ValueType(v)
		if err != nil {
			return nil, err
		}
		x, err := readInputRows(name, val, want, v.Bounded)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		b, err := vkc.TensorBytes(v, x)
		if err != nil {
			return nil, err
		}
		in[name] = b
	}
	for i := range f.Inputs {
		v := &f.Inputs[i]
		if in[v.Name] != nil {
			continue
		}
		if fill == nil {
			return nil, usagef("missing --input %s (function %s takes %s)", v.Name, f.Name, planSignature(f.Inputs))
		}
		b, err := fill(v)
		if err != nil {
			return nil, err
		}
		in[v.Name] = b
	}
	return in, nil
}

func planSignature(vs []plan.Value) string {
	l := make([]string, len(vs))
	for i, v := range vs {
		l[i] = fmt.Sprintf("%s %s%v", v.Name, v.DType, v.Shape)
	}
	return strings.Join(l, ", ")
}

func generateCmd(w io.Writer, path string, lo engine.Options, prompt []int32, steps int) error {
	t0 := time.Now()
	l, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer l.Close()
	load := time.Since(t0)
	ctx, stop := interruptible()
	defer stop()
	g, err := l.Generate(ctx, prompt, steps)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "device: %s (plan loaded in %v)\n", l.Device.Info.Name, load.Round(time.Millisecond))
	var via string
	switch {
	case g.Prefilled == len(prompt) && g.Chunks > 1:
		via = fmt.Sprintf("%s in %d runs (its capacity is %d)", g.PrefillFn, g.Chunks, (len(prompt)+g.Chunks-1)/g.Chunks)
	case g.Prefilled == len(prompt):
		via = g.PrefillFn
	case g.Prefilled > 0:
		via = fmt.Sprintf("%s (%d) and %s (%d, one at a time)", g.PrefillFn, g.Prefilled, g.DecodeFn, len(prompt)-g.Prefilled)
	default:
		via = g.DecodeFn + " one token at a time"
	}
	fmt.Fprintf(w, "prompt: %d tokens through %s in %v\n", len(prompt), via, g.Prompt.Round(time.Microsecond))
	ids := make([]string, len(g.Tokens))
	for i, t := range g.Tokens {
		ids[i] = strconv.Itoa(int(t))
	}
	fmt.Fprintf(w, "greedy tokens: %s\n", strings.Join(ids, " "))
	where := "on the device"
	if g.HostArgmax {
		where = "on the host (the plan outputs logits only)"
	}
	if len(g.Steps) > 0 {
		lo, hi := g.Steps[0], g.Steps[0]
		for _, s := range g.Steps {
			lo, hi = min(lo, s), max(hi, s)
		}
		fmt.Fprintf(w, "decode: %v per token (median of %d steps, min %v, max %v; wall time, argmax %s)\n",
			g.PerToken().Round(time.Microsecond), len(g.Steps), lo.Round(time.Microsecond), hi.Round(time.Microsecond), where)
	}
	return nil
}
