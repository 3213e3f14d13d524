package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
)

func init() {
	register(&command{
		name:    "import",
		usage:   "model.gguf -o model.yaml [--ctx N] [--prefill N] [--force]",
		short:   "write a model.yaml for a GGUF file (llama, qwen2, qwen3) that reads its weights from the file",
		example: "vkc import model.gguf -o model.yaml --ctx 2048",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			out := fs.String("o", "", "the model.yaml to write (required); the GGUF file is named relative to it")
			ctx := fs.Int("ctx", 0, fmt.Sprintf("KV cache positions (default: the model's context length, at most %d)", importer.MaxCtx))
			force := fs.Bool("force", false, "replace an existing file that is not a model.yaml")
			prefill := fs.Int("prefill", 0, fmt.Sprintf("the most tokens the prefill function takes, a run-time length 1..N (default %d, at most the context)", importer.DefaultPrefill))
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one GGUF file, got %d arguments", len(args))
				}
				if *out == "" {
					return usagef("-o model.yaml is required")
				}
				if *ctx < 0 || *prefill < 0 {
					return usagef("--ctx and --prefill must be positive")
				}
				if !importer.IsGGUFPath(args[0]) {
					return fmt.Errorf("%s: vkc import reads GGUF files (.gguf)", args[0])
				}
				dir, err := filepath.Abs(filepath.Dir(*out))
				if err != nil {
					return err
				}
				im, err := importer.ImportGGUF(args[0], importer.GGUFOptions{Ctx: *ctx, Prefill: *prefill, YAMLDir: dir})
				if err != nil {
					return err
				}
				err = safefile.Write(context.Background(), *out, safefile.Options{What: "model.yaml", Inputs: []string{args[0]}, Check: isModelYAML, Force: *force},
					func(w io.Writer) error { _, err := w.Write(im.YAML); return err })
				if err != nil {
					return err
				}
				m := im.Model
				fmt.Fprintf(stdout, "wrote %s: %s (%s), %d parameters, functions %s\n", *out, m.Name, im.Arch, len(m.Params), functionNames(m))
				for _, n := range im.Notes {
					fmt.Fprintf(stdout, "  note: %s\n", n)
				}
				return nil
			}
		},
	})
}

// loadModel reads the model a command is given: a model.yaml, or a file another tool wrote
// (GGUF, ONNX), imported in memory with the importer's defaults.
func loadModel(path string, skipWeights bool) (*ir.Model, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".onnx" || importer.IsGGUFPath(path) {
		if ext != ".onnx" && ext != ".gguf" {
			return nil, fmt.Errorf("%s is a GGUF file; name it .gguf", path)
		}
		return importer.LoadWith(path, importer.Options{SkipWeights: skipWeights})
	}
	return ir.ParseModelWith(path, ir.ParseOptions{SkipWeights: skipWeights})
}

// isModelYAML recognises a file vkc import may replace: YAML with a top-level model key.
func isModelYAML(path string) error {
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
