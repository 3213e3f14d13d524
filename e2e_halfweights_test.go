package vkc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
)

// halfWeightsTinyLlama is examples/tinyllama with its matrices and embedding in dt (f16 or
// bf16, converted from the Hugging Face oracle's f32 weights as they load) and f32 activations:
// the looked-up rows are cast to f32, the norm weights and KV caches stay f32. This is how a model with a
// half-precision checkpoint (Hugging Face's are mostly bf16) is written: 16-bit weights in memory,
// f32 arithmetic.
func halfWeightsTinyLlama(t *testing.T, dt ir.DType) *ir.Model {
	t.Helper()
	dir := filepath.Join("examples", "tinyllama")
	src, err := os.ReadFile(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(src)
	for _, r := range [][2]string{
		{"model: tinyllama", "model: tinyllama-" + dt.String()},
		{"dtype: f32", "dtype: " + dt.String()},
		{"layers.{i}.attn_norm: [d]", "layers.{i}.attn_norm: f32[d]"},
		{"layers.{i}.mlp_norm: [d]", "layers.{i}.mlp_norm: f32[d]"},
		{"out_norm: [d]", "out_norm: f32[d]"},
		{"k_cache.{i}: [ctx, kv_heads, hd]", "k_cache.{i}: f32[ctx, kv_heads, hd]"},
		{"v_cache.{i}: [ctx, kv_heads, hd]", "v_cache.{i}: f32[ctx, kv_heads, hd]"},
		{"x = embedding(embed, tokens)", "x = cast(embedding(embed, tokens), to=f32)"},
	} {
		if !strings.Contains(y, r[0]) {
			t.Fatalf("examples/tinyllama/model.yaml no longer has %q", r[0])
		}
		y = strings.ReplaceAll(y, r[0], r[1])
	}
	m, err := ir.ParseModelBytes("model.yaml", []byte(y), dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHalfWeightModels compiles tinyllama with f16 and with bf16 weights (f32 arithmetic) and
// runs prefill and decode steps against the interpreter on the same weights (1e-4 row-relative:
// both compute in f32 or better on the exact 16-bit values); the plan keeps the weights in
// their dtype.
func TestHalfWeightModels(t *testing.T) {
	d := device(t)
	for _, dt := range []ir.DType{ir.F16, ir.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			m := halfWeightsTinyLlama(t, dt)
			p := matchInterpreter(t, d, m.Name, m)
			want, _ := plan.ParseDType(dt.String())
			for _, w := range p.Weights.Tensors {
				if strings.HasPrefix(w.Name, "layers.0.w") && w.DType != want {
					t.Errorf("weight %s is stored as %s, want %s", w.Name, w.DType, want)
				}
			}
		})
	}
}
