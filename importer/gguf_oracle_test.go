package importer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
)

// TestGGUFOracleInterpreter imports every GGUF file of the llama.cpp oracle and runs it through
// the reference interpreter, with the import's defaults (an f16 KV cache, f16 activations into
// the prefill's products, as llama.cpp runs) and with everything in f32 (importer.F32): prefill
// and decode logits against the float64 reference over ggml's dequantized weights and against
// llama.cpp's own logits, and the greedy tokens. The f32 path is within the README's tolerance
// (1), 1e-4, of the reference; the 16-bit one within its tolerance (2) of both (the README: an
// f16 KV cache moves the logits by about 1e-3, so it is compared with tolerance (2)).
func TestGGUFOracleInterpreter(t *testing.T) {
	for _, name := range oracles.LlamaCppNames() {
		for _, c := range []struct {
			what string
			prec importer.Precision
			tol  float64
		}{{"default", importer.Precision{}, oracles.LlamaCppFiles[name].Tol2}, {"f32", importer.F32, oracles.LlamaCppRefTol}} {
			t.Run(filepath.Base(name)+"/"+c.what, func(t *testing.T) {
				path, gold := oracles.LlamaCpp(t, name)
				im, err := importer.ImportGGUF(path, importer.GGUFOptions{Precision: c.prec})
				if err != nil {
					t.Fatal(err)
				}
				run := oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold)
				oracles.CheckLlamaCpp(t, name, run, gold, c.tol)
			})
		}
	}
}

// TestGGUFImportChoices: the generated model keeps the file's formats, maps GGUF names, picks the
// rope mode by architecture, ties the output when output.weight is absent, and declares layers
// apart when their formats differ.
func TestGGUFImportChoices(t *testing.T) {
	path, _ := oracles.LlamaCpp(t, "llama-tiny/llama-tiny-Q4_K_M")
	im, err := importer.ImportGGUF(path, importer.GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	y := string(im.YAML)
	for _, want := range []string{"mode=interleaved", "layers.0.wv: q4_k[kv_heads*hd, d]", "layers.1.wv: q6_k[kv_heads*hd, d]",
		"lm_head: output.weight", "layers.{i}.wq: blk.{i}.attn_q.weight", "ctx: 128", "dims: {seq: 1..128}", "eps=9.999999747378752e-06"} {
		if !strings.Contains(y, want) {
			t.Errorf("llama model.yaml lacks %q", want)
		}
	}
	m := im.Model
	if m.Param("lm_head").Type.DType != ir.Q6_K || m.Param("layers.1.w_gate").Type.DType != ir.Q4_K || len(m.State) != 4 {
		t.Errorf("params: lm_head %s, w_gate %s, %d state", m.Param("lm_head").Type, m.Param("layers.1.w_gate").Type, len(m.State))
	}
	path, _ = oracles.LlamaCpp(t, "qwen3-tiny/qwen3-tiny-Q4_K_M")
	im, err = importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 64, Prefill: 7})
	if err != nil {
		t.Fatal(err)
	}
	y = string(im.YAML)
	for _, want := range []string{"mode=half", "layers.{i}.q_norm: blk.{i}.attn_q_norm.weight", "linear(rmsnorm(x, out_norm, eps=9.999999974752427e-07), embed)",
		"ctx: 64", "dims: {seq: 1..7}", "theta=1000000"} {
		if !strings.Contains(y, want) {
			t.Errorf("qwen3 model.yaml lacks %q", want)
		}
	}
	if strings.Contains(y, "lm_head") || !strings.Contains(strings.Join(im.Notes, "\n"), "tied") {
		t.Errorf("qwen3 should tie its output: notes %v", im.Notes)
	}
	// Load dispatches on the extension.
	m, err = importer.Load(path)
	if err != nil || m.Function("decode") == nil || m.Function("prefill") == nil {
		t.Fatalf("Load: %v", err)
	}
}

// TestGGUFKVCacheOracle: files of the llama.cpp oracle imported with a block-quantized KV cache
// (--kv q8_0, q4_0; the interpreter quantizes it as ggml's reference quantizer does) match
// llama.cpp's own logits with that cache (testdata/llamacpp-kv) and the float64 reference within
// that oracle's tolerance.
func TestGGUFKVCacheOracle(t *testing.T) {
	for _, f := range oracles.LlamaCppKVFiles {
		t.Run(filepath.Base(f.Name)+"/"+f.KV, func(t *testing.T) {
			path, gold := oracles.LlamaCpp(t, f.Name)
			im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32, Precision: importer.Precision{KV: f.KV}})
			if err != nil {
				t.Fatal(err)
			}
			if st := im.Model.State[0].Type; st.DType.String() != f.KV {
				t.Fatalf("the cache is %s, want %s", st, f.KV)
			}
			run := oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold)
			oracles.CheckLlamaCppKV(t, f, run, gold)
		})
	}
}

// TestGGUFPrecisionChoices: the import's defaults per architecture, as llama.cpp runs them. The
// KV cache is f16 everywhere; the prefill's products read f16 activations where the matrices are
// f16 or block-quantized, and f32 for a model whose residual stream exceeds f16's range (Gemma)
// and for a mixture of experts (its block, router included, is written in f32), where --act f16 is
// refused by name; --act f32 --kv f32 is f32 throughout, and a block-quantized cache is taken by
// every architecture (head dimensions of whole 32-element blocks).
func TestGGUFPrecisionChoices(t *testing.T) {
	for _, c := range []struct {
		file   string
		act    string // the default's activation dtype
		why    string // in the import's note
		refuse string // the error of --act f16, "" when it is taken
	}{
		{"llama-tiny/llama-tiny-Q4_K_M", "f16", "the matrices are f16 or block-quantized", ""},
		{"phi3-tiny/phi3-tiny-F16", "f16", "the matrices are f16 or block-quantized", ""},
		{"gemma3-tiny/gemma3-tiny-Q4_K_M", "f32", "the model's activations exceed f16's range", "--act f16: this model's activations exceed f16's range"},
		{"qwen3moe-tiny/qwen3moe-tiny-Q4_K_M", "f32", "the experts' products read f32", "--act f16: a mixture of experts reads f32 activations"},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			path, _ := oracles.LlamaCpp(t, c.file)
			im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32})
			if err != nil {
				t.Fatal(err)
			}
			notes, y := strings.Join(im.Notes, "\n"), string(im.YAML)
			if want := "KV cache f16; the prefill's matrix products read " + c.act + " activations (" + c.why + ")"; !strings.Contains(notes, want) {
				t.Errorf("notes lack %q:\n%s", want, notes)
			}
			if casts := strings.Contains(y, "to=f16)"); casts != (c.act == "f16") {
				t.Errorf("activations %s, but the model casts to f16: %v", c.act, casts)
			}
			for _, s := range im.Model.State {
				if s.Type.DType != ir.F16 {
					t.Errorf("state %s is %s, want the f16 cache", s.Name, s.Type)
				}
			}
			_, err = importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32, Precision: importer.Precision{Act: "f16"}})
			if c.refuse == "" && err != nil {
				t.Errorf("--act f16: %v", err)
			} else if c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)) {
				t.Errorf("--act f16: error %v, want %q", err, c.refuse)
			}
			for _, p := range []importer.Precision{importer.F32, {KV: "q4_0"}} {
				im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32, Precision: p})
				if err != nil {
					t.Fatalf("%+v: %v", p, err)
				}
				want := ir.F32
				if p.KV == "q4_0" {
					want = ir.Q4_0
				}
				for _, s := range im.Model.State {
					if s.Type.DType != want {
						t.Errorf("%+v: state %s is %s", p, s.Name, s.Type)
					}
				}
				if p.Act == "f32" && strings.Contains(string(im.YAML), "to=f16)") {
					t.Errorf("--act f32 casts to f16")
				}
			}
		})
	}
}
