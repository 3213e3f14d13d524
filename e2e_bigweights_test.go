//go:build linux

package vkc

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/runtime"
)

// wideModel is a one-layer Llama with a wide vocabulary: an f32 embedding and LM head of VOCAB
// rows of 1024 (1 GiB each at 262144), so that its weights exceed one allocation of lavapipe
// (2 GiB) and each of the two exceeds one storage buffer (128 MiB) eight times over.
const wideModel = `
model: wide
dims: {vocab: VOCAB, d: 1024, heads: 8, kv_heads: 4, hd: 128, ffn: 2048, layers: 1, ctx: 64}
weights: {init: random, seed: 7, scale: 0.05}
params:
  embed: [vocab, d]
  layers.{i}.attn_norm: {shape: [d], init: ones}
  layers.{i}.wq: [heads*hd, d]
  layers.{i}.wk: [kv_heads*hd, d]
  layers.{i}.wv: [kv_heads*hd, d]
  layers.{i}.wo: [d, heads*hd]
  layers.{i}.mlp_norm: {shape: [d], init: ones}
  layers.{i}.w_gate: [ffn, d]
  layers.{i}.w_up: [ffn, d]
  layers.{i}.w_down: [d, ffn]
  out_norm: {shape: [d], init: ones}
  lm_head: [vocab, d]
state:
  k_cache.{i}: [ctx, kv_heads, hd]
  v_cache.{i}: [ctx, kv_heads, hd]
functions:
  prefill:
    dims: {seq: 8}
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs:
      logits: f32[seq, vocab]
    body: &body
      - x = embedding(embed, tokens)
      - kv_len = add(pos, seq)
      - repeat i in 0..layers:
        - h = rmsnorm(x, layers.{i}.attn_norm, eps=1e-5)
        - q = rope(reshape(linear(h, layers.{i}.wq), shape=[seq, heads, hd]), pos, theta=10000)
        - k = rope(reshape(linear(h, layers.{i}.wk), shape=[seq, kv_heads, hd]), pos, theta=10000)
        - k_cache.{i} <- cache_write(k_cache.{i}, k, pos)
        - v_cache.{i} <- cache_write(v_cache.{i}, reshape(linear(h, layers.{i}.wv), shape=[seq, kv_heads, hd]), pos)
        - a = attention(q, k_cache.{i}, v_cache.{i}, kv_len, scale=1/sqrt(hd), causal=true)
        - x = add(x, linear(reshape(a, shape=[seq, heads*hd]), layers.{i}.wo))
        - h = rmsnorm(x, layers.{i}.mlp_norm, eps=1e-5)
        - x = add(x, linear(mul(silu(linear(h, layers.{i}.w_gate)), linear(h, layers.{i}.w_up)), layers.{i}.w_down))
      - logits = linear(rmsnorm(x, out_norm, eps=1e-5), lm_head)
  decode:
    dims: {seq: 1}
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs:
      logits: f32[seq, vocab]
    body: *body
`

// TestWeightsBeyondOneAllocation compiles a model of 2.03 GiB of weights for lavapipe's limits
// (2 GiB allocations, 128 MiB storage buffers; the device's own where they are smaller), so its
// weight region takes several device buffers and its embedding and LM head are cut into row
// pieces, and runs a prefill of 8 tokens and a decode step on the device. The interpreter would
// need the 2 GiB in float64 four times over, so the reference is the same model over a sample of
// the vocabulary: the rows of the tokens fed (at and around the pieces' cuts, the first and the
// last) and the LM head's columns around every cut; the device's logits at those columns must
// match it. It needs about 5 GiB of host memory (the weights, and lavapipe's device memory,
// which is host memory) and is skipped, saying so, where that is short.
func TestWeightsBeyondOneAllocation(t *testing.T) {
	const vocab, d = 262144, 1024
	need := uint64(5 << 30)
	if avail, err := availableMemory(); err == nil && avail < need {
		t.Skipf("needs %s of available host memory for 2 GiB of weights and their device copy; there are %s", size(need), size(avail))
	}
	dev := device(t)
	if free := dev.Room().Free(); free < 3<<30 {
		t.Skipf("needs a device with 3 GiB of free device-local memory; %s", dev.Room())
	}
	target := targetOf(dev)
	target.Caps.MaxAllocation = min(nonzero(target.Caps.MaxAllocation), 2<<30)
	target.Caps.MaxBindingRange = min(nonzero(target.Caps.MaxBindingRange), 128<<20)
	t0 := time.Now()
	m, err := ir.ParseModelBytes("wide.yaml", []byte(strings.ReplaceAll(wideModel, "VOCAB", fmt.Sprint(vocab))), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("weights made in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	p, _, err := Compile(context.Background(), m, Options{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	if p.Weights.Size <= 2<<30 || len(p.Weights.Split) == 0 {
		t.Fatalf("weights %d bytes in %d buffers: want more than 2 GiB in several", p.Weights.Size, p.Weights.Split.Buffers())
	}
	cut := map[string]int{}
	for _, w := range p.Weights.Tensors {
		if i := strings.LastIndexByte(w.Name, '['); i > 0 && strings.HasSuffix(w.Name, "]") && strings.Contains(w.Name[i:], ":") {
			cut[w.Name[:i]]++ // a row piece, NAME[r0:r1]
		}
	}
	if cut["embed"] < 8 || cut["lm_head"] < 8 {
		t.Errorf("pieces %v: want embed and lm_head cut in at least 8 each", cut)
	}
	t.Logf("compiled in %v: weights %s in %d buffers, %v pieces", time.Since(t0).Round(time.Millisecond), size(p.Weights.Size), p.Weights.Split.Buffers(), cut)
	t0 = time.Now()
	exe, err := dev.Load(p, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	t.Logf("loaded in %v", time.Since(t0).Round(time.Millisecond))

	// The sample: every cut of a 32768-row piece (128 MiB of f32 rows of 1024), its neighbours,
	// the ends.
	const piece = 32768
	var rows []int
	for r := 0; r <= vocab; r += piece {
		for _, x := range []int{r - 2, r - 1, r, r + 1} {
			if x >= 0 && x < vocab {
				rows = append(rows, x)
			}
		}
	}
	rows = append(rows, 12345, 200001)
	sort.Ints(rows)
	index := map[int]int{}
	for i, r := range rows {
		index[r] = i
	}
	ref, err := ir.ParseModelBytes("wide-ref.yaml", []byte(strings.ReplaceAll(wideModel, "VOCAB", fmt.Sprint(len(rows)))), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range m.Weights {
		if name == "embed" || name == "lm_head" {
			ref.Weights[name] = pickRows(w, rows)
		} else {
			ref.Weights[name] = w
		}
	}
	s := interp.NewSession(ref)
	tokens := []int{0, piece - 1, piece, 3*piece - 1, 4 * piece, 200001, 7 * piece, vocab - 1}
	run := func(fn string, toks []int, pos int) {
		t.Helper()
		big := ir.NewTensor(ir.T(ir.I32, len(toks)))
		small := ir.NewTensor(ir.T(ir.I32, len(toks)))
		for i, tk := range toks {
			big.SetFloat64(i, float64(tk))
			small.SetFloat64(i, float64(index[tk]))
		}
		posT := ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(pos)})
		t0 := time.Now()
		out, err := exe.Run(context.Background(), fn, map[string][]byte{"tokens": big.Data, "pos": posT.Data})
		if err != nil {
			t.Fatal(err)
		}
		ran := time.Since(t0)
		want, err := s.Run(fn, map[string]*ir.Tensor{"tokens": small, "pos": posT})
		if err != nil {
			t.Fatal(err)
		}
		got := &ir.Tensor{Type: ir.T(ir.F32, len(toks), vocab), Data: out["logits"]}
		sample := pickCols(got, rows)
		worst := 0.0
		w := want["logits"]
		for r := range len(toks) {
			scale, diff := 0.0, 0.0
			for c := range rows {
				g, x := sample.Float64(r*len(rows)+c), w.Float64(r*len(rows)+c)
				scale, diff = math.Max(scale, math.Abs(x)), math.Max(diff, math.Abs(g-x))
				if math.IsNaN(g) {
					diff = math.Inf(1)
				}
			}
			worst = math.Max(worst, diff/math.Max(scale, 1e-30))
		}
		t.Logf("%s: %d tokens at %d in %v: row-relative error %.3g over %d sampled columns", fn, len(toks), pos, ran.Round(time.Millisecond), worst, len(rows))
		if worst > oracleTol {
			t.Errorf("%s: row-relative error %.3g > %g", fn, worst, oracleTol)
		}
	}
	run("prefill", tokens, 0)
	run("decode", []int{5*piece + 1}, len(tokens))
}

func nonzero(x uint64) uint64 {
	if x == 0 {
		return math.MaxUint64
	}
	return x
}

// pickRows is the rows of x ([n, d]) in the order given.
func pickRows(x *ir.Tensor, rows []int) *ir.Tensor {
	d := x.Type.Shape[1]
	rb := x.Type.Bytes() / x.Type.Shape[0]
	out := ir.NewTensor(ir.T(x.Type.DType, len(rows), d))
	for i, r := range rows {
		copy(out.Data[i*rb:(i+1)*rb], x.Data[r*rb:(r+1)*rb])
	}
	return out
}

// pickCols is the columns of x ([m, n], f32) in the order given.
func pickCols(x *ir.Tensor, cols []int) *ir.Tensor {
	m, n := x.Type.Shape[0], x.Type.Shape[1]
	out := ir.NewTensor(ir.T(ir.F32, m, len(cols)))
	for r := range m {
		for i, c := range cols {
			copy(out.Data[4*(r*len(cols)+i):], x.Data[4*(r*n+c):4*(r*n+c)+4])
		}
	}
	return out
}
