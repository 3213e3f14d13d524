package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/irdot"
)

func init() {
	register(&command{
		name:    "dot",
		usage:   "model.yaml|model.gguf|model.onnx [--dim NAME=VALUE] [-f FUNCTION] [--fused] [-o graph.dot]",
		short:   "draw a function of a model as a Graphviz DOT graph (one cluster per repeated layer)",
		example: "vkc dot examples/tinyllama/model.yaml -f decode -o decode.dot",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			prec := precisionFlags(fs)
			fn := fs.String("f", "", "the function to draw (default: the model's first)")
			out := fs.String("o", "", "write the DOT text to this file (default: standard output)")
			hideConsts := fs.Bool("hide-consts", false, "leave scalar constants out")
			force := fs.Bool("force", false, "replace an -o file that is not a DOT graph")
			fused := fs.Bool("fused", false, "draw the graph the e-graph optimiser extracts (vkc.OptimizeFunction), each node a rule introduced labelled with that rule")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one model.yaml or .gguf file, got %d arguments", len(args))
				}
				m, err := loadModel(args[0], true, dims, *prec)
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
				opt := irdot.Options{HideConsts: *hideConsts}
				if *fused {
					g, err := vkc.OptimizeFunction(context.Background(), m, f)
					if err != nil {
						return fmt.Errorf("%s: %w", args[0], err)
					}
					f = g
					opt.Note = func(n *ir.Node) string {
						if n.Rule == "" {
							return ""
						}
						return "rule: " + n.Rule
					}
				}
				text := irdot.Function(m, f, opt).String()
				if *out == "" {
					_, err := io.WriteString(stdout, text)
					return err
				}
				return whileWriting(func(ctx context.Context) error {
					w := &outputs{ctx: ctx, inputs: []string{args[0]}, force: *force}
					if err := w.dot(*out, text); err != nil {
						return err
					}
					return w.commit()
				})
			}
		},
	})
}
