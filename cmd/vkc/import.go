package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
)

func init() {
	register(&command{
		name:    "import",
		usage:   "model.gguf|HF-DIR -o model.yaml [--ctx N] [--prefill N] [--parallel N] [--act f32|f16] [--kv f32|f16|q8_0|q4_0] [--force]  |  model.onnx -o model.yaml [--dim NAME=VALUE] [--force]",
		short:   "write a model.yaml for a GGUF file (llama and Mixtral, qwen2, qwen3, qwen3moe, gemma3, phi3), a Hugging Face checkpoint folder (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Gemma 3, Phi-3; weights read from their files) or an ONNX file (weights written beside it)",
		example: "vkc import model.gguf -o model.yaml --ctx 2048",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			out := fs.String("o", "", "the model.yaml to write (required); a GGUF file is named relative to it, an ONNX file's weights go beside it (.safetensors)")
			ctx := fs.Int("ctx", 0, fmt.Sprintf("KV cache positions (default: the model's context length, at most %d)", importer.MaxCtx))
			force := fs.Bool("force", false, "replace an existing file that is not a model.yaml")
			prefill := fs.Int("prefill", 0, fmt.Sprintf("the most tokens the prefill function takes, a run-time length 1..N (default %d, at most the context)", importer.DefaultPrefill))
			parallel := fs.Int("parallel", 0, "KV caches for N sequences and one batched step function (batch) instead of prefill and decode: what vkc serve batches concurrent requests with (docs/serving.md)")
			prec := precisionFlags(fs)
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one GGUF or ONNX file or a Hugging Face folder, got %d arguments", len(args))
				}
				if *out == "" {
					return usagef("-o model.yaml is required")
				}
				if strings.EqualFold(filepath.Ext(args[0]), ".onnx") {
					if *ctx != 0 || *prefill != 0 || *parallel != 0 {
						return usagef("--ctx, --prefill and --parallel go with GGUF files and Hugging Face folders")
					}
					if *prec != (importer.Precision{}) {
						return usagef("--act and --kv go with GGUF files and Hugging Face folders; an ONNX file states its own dtypes")
					}
					return importONNX(stdout, args[0], *out, dims, *force)
				}
				if len(dims) > 0 {
					return usagef("--dim goes with ONNX files")
				}
				if *ctx < 0 || *prefill < 0 || *parallel < 0 {
					return usagef("--ctx, --prefill and --parallel must be positive")
				}
				if err := prec.Check(); err != nil {
					return usagef("%v", err)
				}
				dir, err := filepath.Abs(filepath.Dir(*out))
				if err != nil {
					return err
				}
				if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
					return importHF(stdout, args[0], *out, importer.HFOptions{Ctx: *ctx, Prefill: *prefill, YAMLDir: dir, Slots: *parallel, Precision: *prec}, *force)
				}
				if !importer.IsGGUFPath(args[0]) {
					return fmt.Errorf("%s: vkc import reads GGUF (.gguf) and ONNX (.onnx) files and Hugging Face checkpoint folders", args[0])
				}
				im, err := importer.ImportGGUF(args[0], importer.GGUFOptions{Ctx: *ctx, Prefill: *prefill, YAMLDir: dir, Slots: *parallel, Precision: *prec})
				if err != nil {
					return err
				}
				if err := outputDir(*out); err != nil {
					return err
				}
				err = whileWriting(func(ctx context.Context) error {
					return safefile.Write(ctx, *out, safefile.Options{What: "model.yaml", Inputs: []string{args[0]}, Check: importer.IsModelYAML, Force: *force},
						func(w io.Writer) error { _, err := w.Write(im.YAML); return err })
				})
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

// importHF writes the model.yaml of a Hugging Face checkpoint folder, which names its weight
// and tokenizer files.
func importHF(stdout io.Writer, in, out string, opts importer.HFOptions, force bool) error {
	if !importer.IsHFDir(in) {
		return fmt.Errorf("%s: a folder without config.json; vkc import reads Hugging Face checkpoint folders (config.json and safetensors weights)", in)
	}
	im, err := importer.ImportHF(in, opts)
	if err != nil {
		return err
	}
	if err := outputDir(out); err != nil {
		return err
	}
	inputs := append([]string{filepath.Join(in, "config.json")}, im.Files...)
	err = whileWriting(func(ctx context.Context) error {
		return safefile.Write(ctx, out, safefile.Options{What: "model.yaml", Inputs: inputs, Check: importer.IsModelYAML, Force: force},
			func(w io.Writer) error { _, err := w.Write(im.YAML); return err })
	})
	if err != nil {
		return err
	}
	m := im.Model
	fmt.Fprintf(stdout, "wrote %s: %s (%s), %d parameters in %d safetensors files, functions %s\n", out, m.Name, im.Arch, len(m.Params), len(im.Files), functionNames(m))
	fmt.Fprintf(stdout, "  config.json fields used: %s\n", strings.Join(im.Used, ", "))
	if len(im.Ignored) > 0 {
		fmt.Fprintf(stdout, "  config.json fields not used: %s\n", strings.Join(im.Ignored, ", "))
	}
	for _, n := range im.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	return nil
}

// importONNX writes the model.yaml of an ONNX file and its weights (the initializers, once)
// in a safetensors file beside it, all or none.
func importONNX(stdout io.Writer, in, out string, dims dimFlag, force bool) error {
	ctx, stop := interruptible()
	defer stop()
	im, err := importer.ImportONNX(in, importer.ONNXOptions{Dims: dims})
	if err != nil {
		return err
	}
	if err := outputDir(out); err != nil {
		return err
	}
	header := []string{fmt.Sprintf("imported from %s (ONNX opset %d) by vkc import", filepath.Base(in), im.Opset)}
	for _, n := range im.Notes {
		header = append(header, "note: "+n)
	}
	weights, err := importer.WriteModelYAML(ctx, im.Model, out, importer.YAMLOptions{Header: header, Inputs: []string{in}, Force: force})
	if err != nil {
		return err
	}
	m := im.Model
	f := m.Functions[0]
	fmt.Fprintf(stdout, "wrote %s: %s (ONNX opset %d), %d parameters", out, m.Name, im.Opset, len(m.Params))
	if weights != "" {
		fmt.Fprintf(stdout, " in %s", weights)
	}
	fmt.Fprintf(stdout, ", function %s: %d nodes, %d inputs, %d outputs\n", f.Name, len(f.Nodes), len(f.Inputs), len(f.Outputs))
	for _, n := range im.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	return nil
}

// loadModel reads the model a command is given: a model.yaml, or a file or folder another tool
// wrote (GGUF, ONNX, a Hugging Face checkpoint), imported in memory with the importer's defaults. dims fixes an ONNX model's
// symbolic input dimensions (--dim NAME=VALUE); a model.yaml or GGUF file takes none. prec (at
// most one: --act and --kv) is the precision of a GGUF or Hugging Face import.
func loadModel(path string, skipWeights bool, dims dimFlag, prec ...importer.Precision) (*ir.Model, error) {
	return loadModelSlots(path, skipWeights, dims, 0, prec...)
}

// loadModelSlots is loadModel importing a GGUF file or Hugging Face folder with slots > 0: KV
// caches for that many sequences and a batched step (--parallel).
func loadModelSlots(path string, skipWeights bool, dims dimFlag, slots int, prec ...importer.Precision) (*ir.Model, error) {
	var pr importer.Precision
	if len(prec) > 0 {
		pr = prec[0]
	}
	if err := pr.Check(); err != nil {
		return nil, usagef("%v", err)
	}
	if slots > 0 {
		if len(dims) > 0 {
			return nil, usagef("--dim fixes an ONNX model's dimensions; --parallel goes with GGUF files and Hugging Face folders")
		}
		return importer.LoadWith(path, importer.Options{SkipWeights: skipWeights, Slots: slots, Precision: pr})
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if len(dims) > 0 {
			return nil, usagef("--dim fixes the symbolic dimensions of ONNX models; %s is a folder", path)
		}
		return importer.LoadWith(path, importer.Options{SkipWeights: skipWeights, Precision: pr})
	}
	if pr != (importer.Precision{}) && !importer.IsGGUFPath(path) {
		return nil, usagef("--act and --kv choose the precision of a GGUF file or Hugging Face folder; %s states its own dtypes", path)
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".onnx" || importer.IsGGUFPath(path) {
		if ext != ".onnx" && ext != ".gguf" {
			return nil, fmt.Errorf("%s is a GGUF file; name it .gguf", path)
		}
		if len(dims) > 0 && ext != ".onnx" {
			return nil, usagef("--dim fixes the symbolic dimensions of ONNX models; %s is not one", path)
		}
		return importer.LoadWith(path, importer.Options{SkipWeights: skipWeights, Dims: dims, Precision: pr})
	}
	if len(dims) > 0 {
		return nil, usagef("--dim fixes the symbolic dimensions of ONNX models; %s is a model.yaml", path)
	}
	return ir.ParseModelWith(path, ir.ParseOptions{SkipWeights: skipWeights})
}

// dimFlag is the repeatable --dim NAME=VALUE flag: a symbolic dimension of an ONNX model's
// inputs fixed to a size (vkc's shapes are static).
type dimFlag map[string]int

func (d dimFlag) String() string {
	var parts []string
	for k, v := range d {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	return strings.Join(parts, ",")
}

func (d dimFlag) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(strings.TrimSpace(val))
	if !ok || name == "" || err != nil || n <= 0 {
		return fmt.Errorf("want NAME=VALUE with a positive integer VALUE, got %q", s)
	}
	if _, dup := d[name]; dup {
		return fmt.Errorf("dimension %s given twice", name)
	}
	d[name] = n
	return nil
}

// precisionFlags registers --act and --kv, the precision of a GGUF or Hugging Face import
// (importer.Precision), on a command's flags.
func precisionFlags(fs *flag.FlagSet) *importer.Precision {
	p := &importer.Precision{}
	fs.StringVar(&p.Act, "act", "", "GGUF files and Hugging Face folders: the activations the prefill's matrix products read, "+strings.Join(importer.ActDTypes, "|")+" (default: f16 where the matrices are f16 or block-quantized, else f32)")
	fs.StringVar(&p.KV, "kv", "", "GGUF files and Hugging Face folders: the KV cache's dtype, "+strings.Join(importer.KVDTypes, "|")+" (llama.cpp's -ctk names; default f16)")
	return p
}

// dimFlags registers --dim on a command's flags.
func dimFlags(fs *flag.FlagSet) dimFlag {
	d := dimFlag{}
	fs.Var(d, "dim", "fix a symbolic input dimension of an ONNX model: NAME=VALUE (repeatable)")
	return d
}

// outputDir creates the folder an output file goes in when it does not exist (vkc import -o
// new/model.yaml), once the import has succeeded.
func outputDir(out string) error {
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("-o %s: %s is not a folder", out, dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	return nil
}
