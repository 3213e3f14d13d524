package vkc

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/runtime"
)

// moeBenchYAML is a two-layer decoder (d 256, 4 heads over 2 KV heads of 64, f16 random weights)
// whose FFN is a mixture of experts experts of width 256, 2 per token, or (experts 0) a dense
// SwiGLU FFN of width 512: the same active parameters per token.
func moeBenchYAML(experts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `model: moe-bench-%d
dims: {vocab: 1000, d: 256, heads: 4, kv_heads: 2, hd: 64, ffn: 512, ffn_exp: 256, experts: %d, used: 2, layers: 2, ctx: 64}
dtype: f16
weights: {init: random, seed: 7, scale: 0.1}
params:
  embed: [vocab, d]
  layers.{i}.attn_norm: f32[d]
  layers.{i}.wq: [heads*hd, d]
  layers.{i}.wk: [kv_heads*hd, d]
  layers.{i}.wv: [kv_heads*hd, d]
  layers.{i}.wo: [d, heads*hd]
  layers.{i}.mlp_norm: f32[d]
`, experts, max(experts, 2))
	if experts > 0 {
		b.WriteString(`  layers.{i}.router: f32[experts, d]
  layers.{i}.w_gate_exps: [experts, ffn_exp, d]
  layers.{i}.w_up_exps: [experts, ffn_exp, d]
  layers.{i}.w_down_exps: [experts, d, ffn_exp]
`)
	} else {
		b.WriteString(`  layers.{i}.w_gate: [ffn, d]
  layers.{i}.w_up: [ffn, d]
  layers.{i}.w_down: [d, ffn]
`)
	}
	b.WriteString(`  out_norm: f32[d]
state:
  k_cache.{i}: f32[ctx, kv_heads, hd]
  v_cache.{i}: f32[ctx, kv_heads, hd]
functions:
  decode:
    inputs:
      tokens: i32[1]
      pos: i32[]
    outputs: [logits]
    body:
      - x = cast(embedding(embed, tokens), to=f32)
      - kv_len = add(pos, 1)
      - repeat i in 0..layers:
        - h = rmsnorm(x, layers.{i}.attn_norm, eps=1e-6)
        - q = rope(reshape(linear(h, cast(layers.{i}.wq, to=f32)), shape=[1, heads, hd]), pos, theta=10000)
        - k = rope(reshape(linear(h, cast(layers.{i}.wk, to=f32)), shape=[1, kv_heads, hd]), pos, theta=10000)
        - k_cache.{i} <- cache_write(k_cache.{i}, k, pos)
        - v_cache.{i} <- cache_write(v_cache.{i}, reshape(linear(h, cast(layers.{i}.wv, to=f32)), shape=[1, kv_heads, hd]), pos)
        - a = attention(q, k_cache.{i}, v_cache.{i}, kv_len, causal=true)
        - x = add(x, linear(reshape(a, shape=[1, heads*hd]), cast(layers.{i}.wo, to=f32)))
        - h = rmsnorm(x, layers.{i}.mlp_norm, eps=1e-6)
`)
	if experts > 0 {
		b.WriteString(`        - ids, wts = moe_route(linear(h, layers.{i}.router), k=used)
        - g = moe_linear(h, layers.{i}.w_gate_exps, ids)
        - u = moe_linear(h, layers.{i}.w_up_exps, ids)
        - x = add(x, moe_sum(moe_linear(mul(silu(g), u), layers.{i}.w_down_exps, ids), wts))
`)
	} else {
		b.WriteString(`        - x = add(x, linear(mul(silu(linear(h, layers.{i}.w_gate)), linear(h, layers.{i}.w_up)), layers.{i}.w_down))
`)
	}
	b.WriteString("      - logits = linear(rmsnorm(x, out_norm, eps=1e-6), embed)\n")
	return b.String()
}

// BenchmarkMoEDecode measures a decode step (one token through both layers, the KV cache on the
// device) of mixtures of 8, 32 and 128 experts with 2 chosen per token, against the dense model
// with the same active parameters (a SwiGLU FFN twice an expert's width) in the same run: the
// experts' matrices are 3 MiB per layer at 8 experts and 48 MiB at 128, but a step reads 2 per
// layer whatever their number (moe_matvec), so its time should stay nearly flat. The four models
// run in turn, a step each, so drifts of a shared machine touch them alike; it reports each one's
// median wall time per token (submit to logits read back) and the ratios to the dense model and
// of 128 experts to 8.
//
//	go test -run '^$' -bench MoEDecode -benchtime 40x .
func BenchmarkMoEDecode(b *testing.B) {
	e2eOnce.Do(func() { e2eDev, e2eErr = runtime.Open(runtime.Options{}) })
	if e2eErr != nil {
		b.Skipf("no Vulkan device (lavapipe is enough): %v", e2eErr)
	}
	d := e2eDev
	sizes := []int{0, 8, 32, 128}
	runners := make([]*planRunner, len(sizes))
	dispatches := make([]int, len(sizes))
	for i, e := range sizes {
		m, err := ir.ParseModelBytes(fmt.Sprintf("moe-%d.yaml", e), []byte(moeBenchYAML(e)), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		p, rep, err := Compile(b.Context(), m, Options{Target: targetOf(d)})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range rep.Lower.Functions {
			if f.Name == "decode" {
				dispatches[i] = f.Dispatches
			}
		}
		path := filepath.Join(b.TempDir(), p.Model+".plan")
		if err := p.WriteFile(path); err != nil {
			b.Fatal(err)
		}
		q, err := engine.LoadPlan(path)
		if err != nil {
			b.Fatal(err)
		}
		exe, err := d.Load(q, runtime.LoadOptions{PlanPath: path})
		if err != nil {
			b.Fatal(err)
		}
		defer exe.Close()
		runners[i] = &planRunner{exe}
	}
	times := make([][]time.Duration, len(sizes))
	pos := 0
	for b.Loop() {
		if pos == 64 {
			for _, r := range runners {
				if err := r.Reset(); err != nil {
					b.Fatal(err)
				}
			}
			pos = 0
		}
		for i, r := range runners {
			t0 := time.Now()
			if _, err := r.Run("decode", []int{(37 * pos) % 1000}, pos); err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], time.Since(t0))
		}
		pos++
	}
	med := make([]float64, len(sizes))
	for i, ts := range times {
		slices.Sort(ts)
		med[i] = float64(ts[len(ts)/2].Microseconds()) / 1e3
		name := "dense"
		if sizes[i] > 0 {
			name = fmt.Sprintf("E%d", sizes[i])
		}
		b.ReportMetric(med[i], "ms/token-"+name)
		b.ReportMetric(float64(dispatches[i]), "dispatches-"+name)
		if i > 0 {
			b.ReportMetric(med[i]/med[0], name+"/dense")
		}
	}
	b.ReportMetric(med[3]/med[1], "E128/E8")
}
