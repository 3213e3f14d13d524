package oracles

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
)

// The Mixtral-style oracle. ../shared/oracles/llamacpp has no llama file with experts (how
// llama.cpp's converter writes Mixtral), so vkc makes one as that folder's files were made
// (README-new-archs.md) and keeps llama.cpp's logits for it in testdata/llamacpp-mixtral, whose
// README says how they were produced. The GGUF itself is not stored: MixtralGGUF makes it again,
// byte for byte (MixtralSHA256 is the file llama.cpp ran).

// MixtralSHA256 is the SHA-256 of the GGUF file llama.cpp ran.
const MixtralSHA256 = "46cf4e04f2f997a30aad48abd26ecbdf150db08a2c994afa7b736e0b59d16d82"

// MixtralTol is the tolerance of the model's logits against llama.cpp's, row-relative: twice the
// error of the interpreter (the float64 reference) measured when they were made (6.4e-4 prefill,
// 7.0e-4 decode: llama.cpp's F16 KV cache), as ../shared/oracles/llamacpp's "tolerance (2)".
const MixtralTol = 0.0014

// Mixtral are the model's dimensions and seed.
var Mixtral = struct {
	Vocab, D, Heads, KVHeads, FFN, Experts, Used, Layers, Ctx int
	Seed                                                      uint64
}{Vocab: 512, D: 128, Heads: 4, KVHeads: 2, FFN: 128, Experts: 4, Used: 2, Layers: 2, Ctx: 128, Seed: 4101}

// MixtralGGUF makes the model: arch llama with expert_count, F32 tensors, random weights from a
// fixed seed drawn as the oracle's are (matrices, embeddings and the router normal(0, 0.08),
// RMSNorm weights 1 + normal(0, 0.1)), and no vocabulary (tokenizer.ggml.model none with
// llama.vocab_size: llama.cpp's no-vocab mode).
func MixtralGGUF() ([]byte, error) {
	m := Mixtral
	rng := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9e3779b97f4a7c15))
	f32 := func(n int, mean, std float64) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(mean+std*rng.NormFloat64())))
		}
		return b
	}
	var g gguf.Builder
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"}, {"general.type", "model"}, {"general.name", "mixtral-tiny-random"},
		{"llama.block_count", uint32(m.Layers)}, {"llama.context_length", uint32(m.Ctx)},
		{"llama.embedding_length", uint32(m.D)}, {"llama.feed_forward_length", uint32(m.FFN)},
		{"llama.attention.head_count", uint32(m.Heads)}, {"llama.attention.head_count_kv", uint32(m.KVHeads)},
		{"llama.rope.freq_base", float32(10000)}, {"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.dimension_count", uint32(m.D / m.Heads)},
		{"llama.expert_count", uint32(m.Experts)}, {"llama.expert_used_count", uint32(m.Used)},
		{"llama.vocab_size", uint32(m.Vocab)}, {"general.file_type", uint32(0)}, {"general.quantization_version", uint32(2)},
		{"tokenizer.ggml.model", "none"},
	} {
		v, err := gguf.NewValue(kv.v)
		if err != nil {
			return nil, err
		}
		g.Add(kv.k, v)
	}
	const f32Type = 0 // GGML_TYPE_F32
	mat := func(name string, ne ...uint64) {
		n := 1
		for _, x := range ne {
			n *= int(x)
		}
		g.Tensor(name, f32Type, ne, f32(n, 0, 0.08))
	}
	norm := func(name string) { g.Tensor(name, f32Type, []uint64{uint64(m.D)}, f32(m.D, 1, 0.1)) }
	d, hd := uint64(m.D), uint64(m.D/m.Heads)
	mat("token_embd.weight", d, uint64(m.Vocab))
	for i := range m.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		norm(p + "attn_norm.weight")
		mat(p+"attn_q.weight", d, uint64(m.Heads)*hd)
		mat(p+"attn_k.weight", d, uint64(m.KVHeads)*hd)
		mat(p+"attn_v.weight", d, uint64(m.KVHeads)*hd)
		mat(p+"attn_output.weight", uint64(m.Heads)*hd, d)
		norm(p + "ffn_norm.weight")
		mat(p+"ffn_gate_inp.weight", d, uint64(m.Experts))
		mat(p+"ffn_gate_exps.weight", d, uint64(m.FFN), uint64(m.Experts))
		mat(p+"ffn_up_exps.weight", d, uint64(m.FFN), uint64(m.Experts))
		mat(p+"ffn_down_exps.weight", uint64(m.FFN), d, uint64(m.Experts))
	}
	norm("output_norm.weight")
	mat("output.weight", d, uint64(m.Vocab))
	return g.Bytes()
}

// MixtralFile writes the model to a temporary file, checking that it is the one llama.cpp ran,
// and returns its path and the golden (testdata/llamacpp-mixtral/golden.safetensors: input_ids,
// prefill_logits, greedy_tokens, decode_logits, as the oracle folder's goldens without the
// reference's tensors).
func MixtralFile(t testing.TB) (string, map[string]*ir.Tensor) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	gold, err := ir.ReadSafetensors(filepath.Join(root, "testdata", "llamacpp-mixtral", "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := MixtralGGUF()
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != MixtralSHA256 {
		t.Fatalf("the Mixtral-style model made now (sha256 %s) is not the one llama.cpp ran: make testdata/llamacpp-mixtral again (its README)", hex.EncodeToString(sum[:]))
	}
	path := filepath.Join(t.TempDir(), "mixtral-tiny-F32.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, gold
}

// CheckMixtral compares a run of the model with llama.cpp's: the prefill and decode logits to
// MixtralTol and the greedy tokens exactly (the float64 reference's agree with llama.cpp's).
func CheckMixtral(t testing.TB, run LlamaCppRun, gold map[string]*ir.Tensor) {
	t.Helper()
	vocab := gold["prefill_logits"].Type.Shape[1]
	for _, c := range []struct {
		what string
		got  []float64
		llcp string
	}{{"prefill", run.Prefill, "prefill_logits"}, {"decode", run.Decode, "decode_logits"}} {
		e := RowRel(c.got, gold[c.llcp].Float64s(), vocab)
		t.Logf("%s: row-relative error %.2g against llama.cpp", c.what, e)
		if !(e <= MixtralTol) {
			t.Errorf("%s: row-relative error %.3g against llama.cpp's %s > %g", c.what, e, c.llcp, MixtralTol)
		}
	}
	if want := ints(gold["greedy_tokens"]); !equal(run.Greedy, want) {
		t.Errorf("greedy tokens %v, llama.cpp's %v", run.Greedy, want)
	}
}
