package importer_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/quant"
)

// qwen2FromLlama rewrites llama-tiny-Q8_0 as a qwen2 file: the architecture's keys renamed,
// attn_q and attn_k rows un-permuted (llama.cpp permutes llama's for its interleaved RoPE; qwen2
// is stored as the checkpoint has it and runs with rotate-half RoPE), and q, k, v biases (bias
// gives their value, as f32).
func qwen2FromLlama(t *testing.T, src string, bias float32) string {
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := &gguf.Builder{}
	for _, kv := range f.Metadata {
		k := kv.Key
		if k == "general.architecture" {
			b.Add(k, gguf.MustValue("qwen2"))
			continue
		}
		b.Add(strings.Replace(k, "llama.", "qwen2.", 1), kv.Value)
	}
	heads, _ := f.Uint("llama.attention.head_count")
	kvHeads, _ := f.Uint("llama.attention.head_count_kv")
	for _, ti := range f.Tensors {
		data, err := f.Data(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		data = append([]byte(nil), data...)
		n := heads
		if strings.HasSuffix(ti.Name, "attn_k.weight") {
			n = kvHeads
		}
		if strings.HasSuffix(ti.Name, "attn_q.weight") || strings.HasSuffix(ti.Name, "attn_k.weight") {
			data = unpermuteRows(data, int(ti.Dims[1]), int(n), ti.Format)
		}
		b.Tensor(ti.Name, ti.Type, ti.Dims, data)
		if strings.HasSuffix(ti.Name, "attn_q.weight") || strings.HasSuffix(ti.Name, "attn_k.weight") || strings.HasSuffix(ti.Name, "attn_v.weight") {
			rows := int(ti.Dims[1])
			bb := make([]byte, 4*rows)
			for i := 0; i < rows; i++ {
				binary.LittleEndian.PutUint32(bb[4*i:], math.Float32bits(bias*float32(i%7-3)))
			}
			b.Tensor(strings.TrimSuffix(ti.Name, ".weight")+".bias", quant.FormatF32.GGML, []uint64{uint64(rows)}, bb)
		}
	}
	out, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "qwen2.gguf")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// unpermuteRows undoes llama.cpp's LlamaModel.permute: GGUF row h·hd + 2j + s holds checkpoint
// row h·hd + s·hd/2 + j. Rows are whole blocks, so rows move as byte ranges.
func unpermuteRows(data []byte, rows, heads int, f *quant.Format) []byte {
	rb := len(data) / rows
	hd := rows / heads
	out := make([]byte, len(data))
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			for s := 0; s < 2; s++ {
				from, to := h*hd+2*j+s, h*hd+s*hd/2+j
				copy(out[to*rb:(to+1)*rb], data[from*rb:(from+1)*rb])
			}
		}
	}
	return out
}

// TestGGUFQwen2: a qwen2 file (q, k, v biases, rotate-half RoPE on unpermuted rows) made from
// the llama oracle with zero biases computes the llama file's reference logits, which checks the
// qwen2 import and that llama's interleaved RoPE on permuted rows is rotate-half on the
// checkpoint's; non-zero biases are read and change the logits.
func TestGGUFQwen2(t *testing.T) {
	name := "llama-tiny/llama-tiny-Q8_0"
	src, gold := oracles.LlamaCpp(t, name)
	prompt := gold["input_ids"].NumElements()
	im, err := importer.ImportGGUF(qwen2FromLlama(t, src, 0), importer.GGUFOptions{Prefill: prompt, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	y := string(im.YAML)
	for _, want := range []string{"mode=half", "linear(h, layers.{i}.wq, layers.{i}.bq)", "layers.{i}.bv: blk.{i}.attn_v.bias"} {
		if !strings.Contains(y, want) {
			t.Errorf("qwen2 model.yaml lacks %q", want)
		}
	}
	run := oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold)
	oracles.CheckLlamaCpp(t, name, run, gold, oracles.LlamaCppRefTol)

	im2, err := importer.ImportGGUF(qwen2FromLlama(t, src, 0.05), importer.GGUFOptions{Prefill: prompt, Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	run2 := oracles.RunLlamaCpp(t, oracles.Interp(im2.Model), gold)
	if e := oracles.RowRel(run2.Prefill, run.Prefill, gold["prefill_logits"].Type.Shape[1]); e < 1e-3 {
		t.Errorf("biases of 0.05 moved the logits by %.2g row-relative only", e)
	}
}
