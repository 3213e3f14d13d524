// Package importer turns model files written by other tools into vkc models (ir.Model): ONNX
// files (onnx.go), GGUF files (gguf.go) and Hugging Face checkpoint folders (hf.go) of known
// architectures, and model.yaml itself, so that every command taking a model takes any of them
// through Load. The CLI and the API share it. GGUF and Hugging Face decoders share one
// model builder (decoder.go), so both compute the same graph.
package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// Options configure Load.
type Options struct {
	// Dims fixes symbolic dimensions of the inputs (ONNX dim_param names) to sizes: vkc's
	// shapes are static, so a dimension left symbolic is an error naming it.
	Dims map[string]int
	// GGUF configures the import of a GGUF file (context, prefill length); HF that of a
	// Hugging Face checkpoint folder.
	GGUF GGUFOptions
	HF   HFOptions
	// SkipWeights builds and validates the model without loading its weights (model.yaml and
	// GGUF files; Model.Weights stays nil), for tools that need only the graph.
	SkipWeights bool
	// Slots, when positive, imports a GGUF file or Hugging Face folder with KV caches for that
	// many sequences and a batched step function (GGUFOptions.Slots, HFOptions.Slots); a
	// model.yaml or ONNX file takes none.
	Slots int
	// Precision, when set, is the precision of a GGUF or Hugging Face import (GGUF.Precision
	// and HF.Precision otherwise); a model.yaml or ONNX file takes none.
	Precision Precision
}

// Load reads the model at path by its kind: model.yaml (.yaml, .yml), ONNX (.onnx), GGUF
// (.gguf) or a Hugging Face checkpoint folder (a directory with config.json). The result has its
// weights loaded.
func Load(path string) (*ir.Model, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with options.
func LoadWith(path string, opts Options) (*ir.Model, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if !IsHFDir(path) {
			return nil, fmt.Errorf("%s is a folder without config.json (a Hugging Face checkpoint has one)", path)
		}
		if len(opts.Dims) > 0 {
			return nil, fmt.Errorf("%s: --dim fixes the symbolic dimensions of ONNX models; a Hugging Face checkpoint has none", path)
		}
		h := opts.HF
		h.SkipWeights = h.SkipWeights || opts.SkipWeights
		if opts.Slots > 0 {
			h.Slots = opts.Slots
		}
		if opts.Precision != (Precision{}) {
			h.Precision = opts.Precision
		}
		im, err := ImportHF(path, h)
		if err != nil {
			return nil, err
		}
		return im.Model, nil
	}
	if ext := strings.ToLower(filepath.Ext(path)); opts.Slots > 0 && ext != ".gguf" {
		return nil, fmt.Errorf("%s: slots (--parallel) are imported from GGUF files and Hugging Face folders; write a model.yaml's batched function by hand (docs/serving.md)", path)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".onnx":
		if opts.Precision != (Precision{}) {
			return nil, fmt.Errorf("%s: --act and --kv choose the precision of GGUF and Hugging Face imports; a %s file states its own dtypes", path, filepath.Ext(path))
		}
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		if len(opts.Dims) > 0 {
			return nil, fmt.Errorf("%s: --dim fixes the symbolic dimensions of imported models; a model.yaml has none", path)
		}
		return ir.ParseModelWith(path, ir.ParseOptions{SkipWeights: opts.SkipWeights})
	case ".onnx":
		im, err := ImportONNX(path, ONNXOptions{Dims: opts.Dims})
		if err != nil {
			return nil, err
		}
		return im.Model, nil
	case ".gguf":
		g := opts.GGUF
		g.SkipWeights = g.SkipWeights || opts.SkipWeights
		if opts.Slots > 0 {
			g.Slots = opts.Slots
		}
		if opts.Precision != (Precision{}) {
			g.Precision = opts.Precision
		}
		im, err := ImportGGUF(path, g)
		if err != nil {
			return nil, err
		}
		return im.Model, nil
	}
	return nil, fmt.Errorf("%s: unknown model kind %q (want model.yaml, .onnx, .gguf or a Hugging Face checkpoint folder)", path, filepath.Ext(path))
}
