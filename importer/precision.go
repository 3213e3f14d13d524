package importer

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// Precision is an import's choice of 16-bit data (vkc import --act and --kv, and the same flags
// on every command that takes a GGUF file or a Hugging Face folder). The defaults are llama.cpp's:
// an f16 KV cache, and f16 activations into the matrix products where the weights are 16-bit or
// block-quantized.
type Precision struct {
	// Act is the dtype the prefill's matrix products read their activations in: "f32" or
	// "f16". "" is the default: f16 where the model's matrices are f16 or block-quantized (the
	// cooperative-matrix templates then apply), f32 where they are f32 or bf16. The residual
	// stream, the norms, the softmax and the logits stay f32 either way, and decode's
	// matrix-vector products read the f32 activations (one row gains nothing from 16 bits: the
	// weights dominate its traffic, as in llama.cpp's Vulkan backend).
	Act string
	// KV is the dtype of the KV cache: "f32", "f16", "q8_0" or "q4_0" (llama.cpp's -ctk/-ctv
	// names). "" is f16. (Not bf16: kernels store no bf16 on devices without the bfloat16
	// type.) A block format needs a head dimension that is a whole number
	// of its 32-element blocks.
	KV string
}

// ActDTypes and KVDTypes are the values --act and --kv take.
var (
	ActDTypes = []string{"f32", "f16"}
	KVDTypes  = []string{"f32", "f16", "q8_0", "q4_0"}
)

// Check reports a value Act or KV does not take.
func (p Precision) Check() error {
	if p.Act != "" && !contains(ActDTypes, p.Act) {
		return fmt.Errorf("--act %s: want %s", p.Act, strings.Join(ActDTypes, " or "))
	}
	if p.KV != "" && !contains(KVDTypes, p.KV) {
		return fmt.Errorf("--kv %s: want one of %s", p.KV, strings.Join(KVDTypes, ", "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// setPrecision resolves p for the model (its matrices' dtypes are known: m.dtype) into m.act
// and m.kv, and returns a note saying what it chose.
func (m *decoderLM) setPrecision(p Precision) (string, error) {
	if err := p.Check(); err != nil {
		return "", err
	}
	kv := ir.F16
	if p.KV != "" {
		d, err := ir.ParseDType(p.KV)
		if err != nil {
			return "", err
		}
		kv = d
	}
	if f := kv.Format(); kv.Quantized() && m.hd%f.BlockElems != 0 {
		return "", fmt.Errorf("--kv %s: the head dimension %d is not a whole number of %d-element blocks", kv, m.hd, f.BlockElems)
	}
	if m.slots > 0 {
		// The batched function's cache_scatter converts its f32 rows to the caches' dtype as
		// cache_write does, and attention_rows reads f32 queries over them; its activations
		// stay f32 (its products are skinny: few rows per step).
		if p.Act == "f16" {
			return "", fmt.Errorf("--act f16 with --parallel: the batched function's activations are f32 (--kv still applies)")
		}
		m.act, m.kv = ir.F32, kv
		return fmt.Sprintf("KV caches %s for %d sequences; f32 activations (the batched function's)", kv, m.slots), nil
	}
	act := ir.F32
	why := "the matrices are f32 or bf16"
	switch {
	case p.Act == "f32":
		why = "--act f32"
	case m.arch.wideAct:
		why = "the model's activations exceed f16's range"
		if p.Act == "f16" {
			return "", fmt.Errorf("--act f16: this model's activations exceed f16's range; its products read f32")
		}
	case m.arch.moe != nil:
		why = "the experts' products read f32"
		if p.Act == "f16" {
			return "", fmt.Errorf("--act f16: a mixture of experts reads f32 activations")
		}
	case p.Act == "f16":
		act, why = ir.F16, "--act f16"
	default:
		sixteen, err := m.matrices16()
		if err != nil {
			return "", err
		}
		if sixteen {
			act, why = ir.F16, "the matrices are f16 or block-quantized"
		}
	}
	m.act, m.kv = act, kv
	return fmt.Sprintf("KV cache %s; the prefill's matrix products read %s activations (%s); the residual stream, norms, softmax and logits are f32", kv, act, why), nil
}

// matrices16 reports whether any projection matrix of the model is f16 or block-quantized.
func (m *decoderLM) matrices16() (bool, error) {
	for _, p := range m.params() {
		if len(p.shape) != 2 || p.name == "embed" || p.name == "lm_head" {
			continue
		}
		n := 1
		if p.perLayer {
			n = m.layers
		}
		for i := range n {
			t, err := m.dtype(strings.ReplaceAll(strings.ReplaceAll(m.names[p.name], "{i}", fmt.Sprint(i)), "{j}", "0"))
			if err != nil {
				return false, err
			}
			d, err := ir.ParseDType(t)
			if err != nil {
				return false, err
			}
			if d == ir.F16 || d.Quantized() {
				return true, nil
			}
		}
	}
	return false, nil
}

// F32 is the precision with every activation and the KV cache in f32 (--act f32 --kv f32):
// the path that matches float64 references to 1e-4.
var F32 = Precision{Act: "f32", KV: "f32"}
