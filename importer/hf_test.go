package importer_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
)

// writeCheckpoint writes a Hugging Face checkpoint folder: config.json and the tensors, in one
// model.safetensors or, with shards > 1, in that many files named by a
// model.safetensors.index.json (layer by layer, as transformers shards them).
func writeCheckpoint(t *testing.T, dir string, config map[string]any, tensors map[string]*ir.Tensor, shards int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if shards <= 1 {
		if err := ir.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors); err != nil {
			t.Fatal(err)
		}
		return
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]map[string]*ir.Tensor, shards)
	weightMap := map[string]string{}
	for i, n := range names {
		s := i * shards / len(names)
		if parts[s] == nil {
			parts[s] = map[string]*ir.Tensor{}
		}
		parts[s][n] = tensors[n]
		weightMap[n] = fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
	}
	for s, p := range parts {
		if err := ir.WriteSafetensors(filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)), p); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ggufToHF turns a file of the llama.cpp oracle into the transformers checkpoint it was
// converted from: every tensor dequantized exactly to f32 (ggml's own dequantization, as the
// oracle's reference does), renamed back, llama's Q and K rows un-permuted (llama.cpp permutes
// them for its interleaved RoPE; transformers rotates halves), and a config.json of the
// architecture. The oracle's ref_* logits are then the checkpoint's logits.
func ggufToHF(t *testing.T, path, arch string) (map[string]any, map[string]*ir.Tensor) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ga, _ := f.String("general.architecture")
	u := func(k string) int {
		v, err := f.Uint(ga + "." + k)
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	eps, _ := f.Float(ga + ".attention.layer_norm_rms_epsilon")
	theta, _ := f.Float(ga + ".rope.freq_base")
	heads, kvHeads, hd := u("attention.head_count"), u("attention.head_count_kv"), u("attention.key_length")
	rename := strings.NewReplacer("token_embd.weight", "model.embed_tokens.weight", "output_norm.weight", "model.norm.weight",
		"output.weight", "lm_head.weight", "blk.", "model.layers.", ".attn_norm.", ".input_layernorm.",
		".attn_q_norm.", ".self_attn.q_norm.", ".attn_k_norm.", ".self_attn.k_norm.",
		".attn_q.", ".self_attn.q_proj.", ".attn_k.", ".self_attn.k_proj.", ".attn_v.", ".self_attn.v_proj.",
		".attn_output.", ".self_attn.o_proj.", ".ffn_norm.", ".post_attention_layernorm.",
		".ffn_gate.", ".mlp.gate_proj.", ".ffn_up.", ".mlp.up_proj.", ".ffn_down.", ".mlp.down_proj.")
	tensors := map[string]*ir.Tensor{}
	tied := true
	for _, ti := range f.Tensors {
		x, err := ir.ReadGGUFTensor(f, ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		v := x.Float64s() // exact dequantization to f32 values
		if ga == "llama" && (strings.HasSuffix(ti.Name, "attn_q.weight") || strings.HasSuffix(ti.Name, "attn_k.weight")) {
			n := heads
			if strings.HasSuffix(ti.Name, "attn_k.weight") {
				n = kvHeads
			}
			v = unpermute(v, x.Type.Shape[0], x.Type.Shape[1], n)
		}
		if ti.Name == "output.weight" {
			tied = false
		}
		tensors[rename.Replace(ti.Name)] = ir.TensorFromFloat64s(ir.Type{DType: ir.F32, Shape: x.Type.Shape}, v)
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "vocab_size": u("vocab_size"), "hidden_size": u("embedding_length"),
		"intermediate_size": u("feed_forward_length"), "num_hidden_layers": u("block_count"),
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": hd,
		"rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": u("context_length"),
		"tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float32",
	}
	return cfg, tensors
}

// unpermute undoes llama.cpp's LlamaModel.permute on a [rows, cols] matrix of f32 values:
// stored row h·hd + 2j + s is checkpoint row h·hd + s·hd/2 + j.
func unpermute(v []float64, rows, cols, heads int) []float64 {
	out := make([]float64, len(v))
	hd := rows / heads
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			for s := 0; s < 2; s++ {
				from, to := h*hd+2*j+s, h*hd+s*hd/2+j
				copy(out[to*cols:(to+1)*cols], v[from*cols:(from+1)*cols])
			}
		}
	}
	return out
}

// TestHFCheckpointsAgainstLlamaCppReference: checkpoints of the four architectures made from
// the llama.cpp oracle's files (see ggufToHF) compute the oracle's float64 reference logits
// through vkc import and the interpreter: LlamaForCausalLM in 3 shards with an index,
// MistralForCausalLM (its sliding window longer than the context: full attention), Qwen2 (zero q,
// k, v biases, which Qwen2 always has) and Qwen3 (per-head q/k norms, tied output). With
// everything in f32 (importer.F32) within the README's tolerance (1), 1e-4, of the reference;
// with the defaults (an f16 KV cache, as llama.cpp's; the checkpoints are f32, so the products
// read f32) within its tolerance (2) of the reference and of llama.cpp's logits.
func TestHFCheckpointsAgainstLlamaCppReference(t *testing.T) {
	for _, c := range []struct {
		name, file, arch string
		shards           int
		edit             func(cfg map[string]any, ts map[string]*ir.Tensor)
	}{
		{"llama", "llama-tiny/llama-tiny-F16", "LlamaForCausalLM", 3, nil},
		{"mistral", "llama-tiny/llama-tiny-F16", "MistralForCausalLM", 1, func(cfg map[string]any, _ map[string]*ir.Tensor) {
			cfg["sliding_window"] = 4096
		}},
		{"qwen2", "llama-tiny/llama-tiny-F16", "Qwen2ForCausalLM", 2, func(cfg map[string]any, ts map[string]*ir.Tensor) {
			cfg["use_sliding_window"], cfg["sliding_window"], cfg["max_window_layers"] = false, 32, 1
			for n, x := range ts {
				for _, p := range []string{"q_proj", "k_proj", "v_proj"} {
					if strings.HasSuffix(n, p+".weight") {
						ts[strings.TrimSuffix(n, "weight")+"bias"] = ir.NewTensor(ir.T(ir.F32, x.Type.Shape[0]))
					}
				}
			}
		}},
		{"qwen3", "qwen3-tiny/qwen3-tiny-Q8_0", "Qwen3ForCausalLM", 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, gold := oracles.LlamaCpp(t, c.file)
			cfg, ts := ggufToHF(t, path, c.arch)
			if c.edit != nil {
				c.edit(cfg, ts)
			}
			dir := filepath.Join(t.TempDir(), c.name)
			writeCheckpoint(t, dir, cfg, ts, c.shards)
			for _, pc := range []struct {
				prec importer.Precision
				tol  float64
			}{{importer.F32, oracles.LlamaCppRefTol}, {importer.Precision{}, oracles.LlamaCppFiles[c.file].Tol2}} {
				im, err := importer.ImportHF(dir, importer.HFOptions{Precision: pc.prec})
				if err != nil {
					t.Fatal(err)
				}
				defer im.Model.Close()
				if im.Arch != c.arch || len(im.Files) != c.shards {
					t.Errorf("import: %s from %d files, want %s from %d", im.Arch, len(im.Files), c.arch, c.shards)
				}
				if strings.Contains(string(im.YAML), "window=") {
					t.Errorf("%s: a window in the model:\n%s", c.name, im.YAML)
				}
				run := oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold)
				oracles.CheckLlamaCpp(t, c.file, run, gold, pc.tol)
			}
		})
	}
}

// TestHFTinyllamaOracle: transformers' own tinyllama (../shared/oracles/hf/tinyllama, whose
// folder also holds golden.safetensors, which the import skips) gives, through vkc import with
// everything in f32 (importer.F32) and the interpreter, the logits of the hand-written
// examples/tinyllama model.yaml and the golden within the oracle's tolerance (1e-4
// row-relative), prefill and decode. With the import's defaults (an f16 KV cache; the weights
// are f32, so the products read f32) the golden is matched within 0.0021, the llama.cpp oracle
// README's tolerance (2) for its F32 model, which llama.cpp runs with an f16 KV cache (that
// README: "the KV cache … F16 … expect about 1e-3"; the HF oracle states f32 tolerances only).
func TestHFTinyllamaOracle(t *testing.T) {
	dir := oracles.Dir(t, "hf/tinyllama")
	im, err := importer.ImportHF(dir, importer.HFOptions{Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Model.Close()
	if !strings.Contains(strings.Join(im.Notes, "\n"), "golden.safetensors holds none of the model's tensors") {
		t.Errorf("notes do not say golden.safetensors is skipped: %v", im.Notes)
	}
	for _, k := range []string{"hidden_size", "rope_parameters", "rms_norm_eps", "tie_word_embeddings", "num_key_value_heads"} {
		if !contains(im.Used, k) {
			t.Errorf("used fields %v lack %s", im.Used, k)
		}
	}
	if !contains(im.Ignored, "transformers_version") {
		t.Errorf("ignored fields %v lack transformers_version", im.Ignored)
	}
	hand, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer hand.Close()
	gold, err := ir.ReadSafetensors(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := ints(gold["input_ids"])
	fed := ints(gold["decode_tokens"])
	// Every row: the imported model's score, the hand-written one's prefill.
	run := func(m *ir.Model, rows string) (prefill, decode []float64) {
		r := oracles.Interp(m)
		p, err := r.Run(rows, prompt, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range fed {
			row, err := r.Run("decode", []int{tok}, len(prompt)+i)
			if err != nil {
				t.Fatal(err)
			}
			decode = append(decode, row...)
		}
		return p, decode
	}
	ip, id := run(im.Model, "score")
	hp, hd := run(hand, "prefill")
	vocab := gold["prefill_logits"].Type.Shape[1]
	if e := oracles.RowRel(ip, hp, vocab) + oracles.RowRel(id, hd, vocab); e != 0 {
		t.Errorf("imported and hand-written model.yaml differ by %.3g row-relative", e)
	}
	for _, c := range []struct {
		what string
		got  []float64
		ref  string
	}{{"prefill", ip, "prefill_logits"}, {"decode", id, "decode_logits"}} {
		if e := oracles.RowRel(c.got, gold[c.ref].Float64s(), vocab); e > 1e-4 {
			t.Errorf("%s: %.3g row-relative from transformers' %s", c.what, e, c.ref)
		}
	}
	dm, err := importer.ImportHF(dir, importer.HFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Model.Close()
	if kv := dm.Model.State[0].Type.DType; kv != ir.F16 {
		t.Errorf("the default KV cache is %s, want f16", kv)
	}
	dp, dd := run(dm.Model, "score")
	for _, c := range []struct {
		what string
		got  []float64
		ref  string
	}{{"prefill", dp, "prefill_logits"}, {"decode", dd, "decode_logits"}} {
		e := oracles.RowRel(c.got, gold[c.ref].Float64s(), vocab)
		t.Logf("defaults: %s %.3g row-relative from transformers' %s", c.what, e, c.ref)
		if e > 0.0021 {
			t.Errorf("defaults: %s: %.3g row-relative from transformers' %s > 0.0021", c.what, e, c.ref)
		}
	}
	// The greedy choices: transformers' decode tokens are its argmaxes.
	for i, tok := range fed {
		var row []float64
		if i == 0 {
			row = dp[(len(prompt)-1)*vocab:]
		} else {
			row = dd[(i-1)*vocab : i*vocab]
		}
		if got := oracles.Argmax(row); got != tok {
			t.Errorf("defaults: greedy token %d is %d, transformers' %d", i, got, tok)
		}
	}
}

func ints(x *ir.Tensor) []int {
	out := make([]int, x.NumElements())
	for i := range out {
		out[i] = int(x.Float64(i))
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// randomCheckpoint is a small random Llama-family checkpoint (config and tensors) of an
// architecture: 2 layers (layers), hidden 16, 4 heads over 2 KV heads of 8, vocab 40.
func randomCheckpoint(arch string, layers int, seed uint64) (map[string]any, map[string]*ir.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 1))
	const vocab, d, heads, kv, hd, ffn = 40, 16, 4, 2, 8, 24
	ts := map[string]*ir.Tensor{}
	add := func(name string, shape ...int) {
		v := make([]float64, 1)
		n := 1
		for _, s := range shape {
			n *= s
		}
		v = make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * 0.3
			if len(shape) == 1 {
				v[i] = 1 + v[i]*0.3 // norms
			}
		}
		ts[name] = ir.TensorFromFloat64s(ir.T(ir.F32, shape...), v)
	}
	add("model.embed_tokens.weight", vocab, d)
	add("model.norm.weight", d)
	add("lm_head.weight", vocab, d)
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", d)
		add(p+"post_attention_layernorm.weight", d)
		add(p+"self_attn.q_proj.weight", heads*hd, d)
		add(p+"self_attn.k_proj.weight", kv*hd, d)
		add(p+"self_attn.v_proj.weight", kv*hd, d)
		add(p+"self_attn.o_proj.weight", d, heads*hd)
		add(p+"mlp.gate_proj.weight", ffn, d)
		add(p+"mlp.up_proj.weight", ffn, d)
		add(p+"mlp.down_proj.weight", d, ffn)
		if arch == "Qwen2ForCausalLM" {
			add(p+"self_attn.q_proj.bias", heads*hd)
			add(p+"self_attn.k_proj.bias", kv*hd)
			add(p+"self_attn.v_proj.bias", kv*hd)
		}
		if arch == "Qwen3ForCausalLM" {
			add(p+"self_attn.q_norm.weight", hd)
			add(p+"self_attn.k_norm.weight", hd)
		}
	}
	cfg := map[string]any{"architectures": []string{arch}, "vocab_size": vocab, "hidden_size": d, "intermediate_size": ffn,
		"num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
		"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": false}
	return cfg, ts
}

// lastRow runs prefill on tokens at pos and returns the last row of logits.
func lastRow(t *testing.T, m *ir.Model, tokens []int, pos int) []float64 {
	t.Helper()
	l, err := (oracles.Interp(m)).Run("prefill", tokens, pos)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Dims["vocab"]
	return l[len(l)-v:]
}

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// TestHFMistralSlidingWindow checks what sliding_window computes against transformers'
// definition (a query at position p attends to the keys at p−W+1..p): in a one-layer model the
// last prompt row with window W must equal the full-attention model's last row when only the
// last W tokens are given (RoPE makes attention depend on relative positions alone, so they may
// start at position 0), and differ from full attention over the whole prompt.
func TestHFMistralSlidingWindow(t *testing.T) {
	const w = 4
	cfg, ts := randomCheckpoint("MistralForCausalLM", 1, 5)
	tokens := []int{3, 17, 5, 29, 11, 8, 2, 33, 14, 7}
	full := filepath.Join(t.TempDir(), "full")
	writeCheckpoint(t, full, cfg, ts, 1)
	cfg["sliding_window"] = w
	win := filepath.Join(t.TempDir(), "window")
	writeCheckpoint(t, win, cfg, ts, 1)
	fm, err := importer.ImportHF(full, importer.HFOptions{Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	wm, err := importer.ImportHF(win, importer.HFOptions{Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(wm.YAML), fmt.Sprintf("causal=true, window=%d)", w)) {
		t.Fatalf("no window in the model:\n%s", wm.YAML)
	}
	got := lastRow(t, wm.Model, tokens, 0)
	n := len(tokens)
	want := lastRow(t, fm.Model, tokens[n-w:], 0)
	// The interpreter rounds each op's result to f32: rotations at other angles round apart.
	if d := maxDiff(got, want); d > 1e-5 {
		t.Errorf("window %d: last row differs by %.3g from full attention over the last %d tokens", w, d, w)
	}
	if d := maxDiff(got, lastRow(t, fm.Model, tokens, 0)); d < 1e-4 {
		t.Errorf("the window changes the last row by %.3g only: the test checks nothing", d)
	}
}

// TestHFQwenWindowLayers: Qwen2's and Qwen3's sliding window applies only with
// use_sliding_window, to the layers from max_window_layers on, or to those layer_types names.
func TestHFQwenWindowLayers(t *testing.T) {
	for _, c := range []struct {
		arch  string
		extra map[string]any
		want  []string // substrings of the model.yaml in order
		none  bool
	}{
		{"Qwen2ForCausalLM", map[string]any{"use_sliding_window": false, "sliding_window": 8, "max_window_layers": 1}, nil, true},
		{"Qwen2ForCausalLM", map[string]any{"use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1},
			[]string{"repeat i in 0..1:", "causal=true)", "layers 1..1: sliding-window", "repeat i in 1..layers:", "causal=true, window=8)"}, false},
		{"Qwen3ForCausalLM", map[string]any{"use_sliding_window": true, "sliding_window": 8, "layer_types": []string{"sliding_attention", "full_attention"}},
			[]string{"layers 0..0: sliding-window", "repeat i in 0..1:", "causal=true, window=8)", "repeat i in 1..layers:", "causal=true)"}, false},
	} {
		cfg, ts := randomCheckpoint(c.arch, 2, 6)
		for k, v := range c.extra {
			cfg[k] = v
		}
		dir := filepath.Join(t.TempDir(), "m")
		writeCheckpoint(t, dir, cfg, ts, 1)
		im, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		y := string(im.YAML)
		if c.none != !strings.Contains(y, "window=") {
			t.Errorf("%s %v: window present %v:\n%s", c.arch, c.extra, strings.Contains(y, "window="), y)
		}
		rest := y
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s %v: model.yaml lacks %q (in order):\n%s", c.arch, c.extra, w, y)
				break
			}
			rest = rest[i+len(w):]
		}
	}
}

// TestHFRopeScaling: rope_scaling of type llama3 (transformers 4's rope_scaling, and 5's
// rope_parameters) and linear become rope's scaling attribute with the config's values, and
// change the logits (the frequencies themselves are checked against transformers' formula in
// package ir).
func TestHFRopeScaling(t *testing.T) {
	cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 7)
	cfg["rope_theta"] = 500000.0
	plain := filepath.Join(t.TempDir(), "plain")
	writeCheckpoint(t, plain, cfg, ts, 1)
	pm, err := importer.ImportHF(plain, importer.HFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 4, 8, 12, 16, 20, 24, 28, 32}
	base := lastRow(t, pm.Model, tokens, 30)
	llama3 := map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"rope_scaling llama3", func(c map[string]any) { c["rope_scaling"] = llama3 },
			"theta=500000, mode=half, scaling=llama3, factor=8, low_freq_factor=1, high_freq_factor=4, original_ctx=16)"},
		{"rope_parameters llama3", func(c map[string]any) {
			p := map[string]any{"rope_theta": 500000.0}
			for k, v := range llama3 {
				p[k] = v
			}
			delete(c, "rope_theta")
			c["rope_parameters"] = p
		}, "theta=500000, mode=half, scaling=llama3, factor=8, low_freq_factor=1, high_freq_factor=4, original_ctx=16)"},
		{"rope_scaling linear (type)", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "linear", "factor": 2.0} },
			"theta=500000, mode=half, scaling=linear, factor=2)"},
	} {
		cc := map[string]any{}
		for k, v := range cfg {
			cc[k] = v
		}
		c.edit(cc)
		dir := filepath.Join(t.TempDir(), "m")
		writeCheckpoint(t, dir, cc, ts, 1)
		im, err := importer.ImportHF(dir, importer.HFOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := strings.Count(string(im.YAML), c.want); n != 2 {
			t.Errorf("%s: %d ropes with %q:\n%s", c.name, n, c.want, im.YAML)
		}
		if d := maxDiff(lastRow(t, im.Model, tokens, 30), base); d < 1e-6 {
			t.Errorf("%s: the scaling changes the logits by %.3g", c.name, d)
		}
	}
}

// TestHFBF16: a checkpoint stored in bf16 (most are), in shards, keeps its matrices and
// embedding in bf16 (the norm weights load as f32, exactly) and gives the same logits as the
// same values stored in f32.
func TestHFBF16(t *testing.T) {
	cfg, ts := randomCheckpoint("Qwen3ForCausalLM", 2, 8)
	b16 := map[string]*ir.Tensor{}
	for n, x := range ts {
		b := x.Convert(ir.BF16)
		ts[n] = b.Convert(ir.F32) // the values bf16 holds
		b16[n] = b
	}
	f32Dir, bDir := filepath.Join(t.TempDir(), "f32"), filepath.Join(t.TempDir(), "bf16")
	writeCheckpoint(t, f32Dir, cfg, ts, 1)
	writeCheckpoint(t, bDir, cfg, b16, 2)
	fm, err := importer.ImportHF(f32Dir, importer.HFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bm, err := importer.ImportHF(bDir, importer.HFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(bm.Notes, "\n"), "bf16 matrices stay bf16") {
		t.Errorf("notes: %v", bm.Notes)
	}
	for _, c := range []struct {
		name string
		dt   ir.DType
	}{{"embed", ir.BF16}, {"layers.0.wq", ir.BF16}, {"layers.1.w_down", ir.BF16}, {"layers.0.attn_norm", ir.F32}, {"layers.0.q_norm", ir.F32}} {
		if p := bm.Model.Param(c.name); p == nil || p.Type.DType != c.dt {
			t.Errorf("%s: %v, want %s", c.name, p, c.dt)
		}
	}
	if !strings.Contains(string(bm.YAML), "x = cast(embedding(embed, tokens), to=f32)") {
		t.Errorf("the bf16 rows are not cast to the f32 activations:\n%s", bm.YAML)
	}
	tokens := []int{4, 8, 15, 16, 23, 42 % 40}
	if d := maxDiff(lastRow(t, bm.Model, tokens, 0), lastRow(t, fm.Model, tokens, 0)); d != 0 {
		t.Errorf("bf16 and f32 checkpoints differ by %.3g", d)
	}
}

// TestHFErrors: what the import refuses, with messages naming the field or tensor.
func TestHFErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(cfg map[string]any, ts map[string]*ir.Tensor)
		want string
	}{
		{"foreign tensor", func(_ map[string]any, ts map[string]*ir.Tensor) {
			ts["model.vision_tower.proj.weight"] = ir.NewTensor(ir.T(ir.F32, 2, 2))
		}, "1 safetensors tensors are not the LlamaForCausalLM model's: model.vision_tower.proj.weight"},
		{"missing tensor", func(_ map[string]any, ts map[string]*ir.Tensor) { delete(ts, "model.layers.1.mlp.up_proj.weight") },
			"lacks 1 of the model's tensors: model.layers.1.mlp.up_proj.weight"},
		{"missing lm_head", func(_ map[string]any, ts map[string]*ir.Tensor) { delete(ts, "lm_head.weight") },
			"tie_word_embeddings is false, so the output projection lm_head.weight must be stored"},
		{"unknown architecture", func(cfg map[string]any, _ map[string]*ir.Tensor) { cfg["architectures"] = []string{"GPT2LMHeadModel"} },
			"architectures [GPT2LMHeadModel]: vkc imports LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM"},
		{"model_type", func(cfg map[string]any, _ map[string]*ir.Tensor) {
			delete(cfg, "architectures")
			cfg["model_type"] = "gemma"
		}, `model_type "gemma": vkc imports`},
		{"yarn", func(cfg map[string]any, _ map[string]*ir.Tensor) {
			cfg["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0}
		}, `rope_scaling.rope_type is "yarn": vkc supports default, linear and llama3 RoPE`},
		{"activation", func(cfg map[string]any, _ map[string]*ir.Tensor) { cfg["hidden_act"] = "gelu" }, `hidden_act is "gelu"`},
		{"quantized", func(cfg map[string]any, _ map[string]*ir.Tensor) {
			cfg["quantization_config"] = map[string]any{"bits": 4}
		},
			"quantization_config: quantized checkpoints are not supported"},
		{"llama3 without its keys", func(cfg map[string]any, _ map[string]*ir.Tensor) {
			cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0}
		}, "rope_scaling of type llama3 has no low_freq_factor"},
		{"f64 tensor", func(_ map[string]any, ts map[string]*ir.Tensor) {
			ts["model.norm.weight"] = ts["model.norm.weight"].Convert(ir.I32)
		}, "tensor model.norm.weight in model.safetensors is i32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 9)
			c.edit(cfg, ts)
			dir := filepath.Join(t.TempDir(), "m")
			writeCheckpoint(t, dir, cfg, ts, 1)
			_, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	// A file mixing the model's tensors with others is not skipped: its others are an error.
	cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 9)
	dir := filepath.Join(t.TempDir(), "mixed")
	writeCheckpoint(t, dir, cfg, ts, 1)
	os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "weights.safetensors"))
	extra := map[string]*ir.Tensor{"model.layers.0.mlp.up_proj.weight": ts["model.layers.0.mlp.up_proj.weight"], "golden_logits": ir.NewTensor(ir.T(ir.F32, 3))}
	if err := ir.WriteSafetensors(filepath.Join(dir, "extra.safetensors"), extra); err != nil {
		t.Fatal(err)
	}
	if _, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true}); err == nil || !strings.Contains(err.Error(), "tensor model.layers.0.mlp.up_proj.weight is in both") {
		t.Errorf("duplicate across files: %v", err)
	}
	delete(extra, "model.layers.0.mlp.up_proj.weight")
	extra["model.layers.0.input_layernorm.weight2"] = ir.NewTensor(ir.T(ir.F32, 3))
	os.Remove(filepath.Join(dir, "extra.safetensors"))
	ir.WriteSafetensors(filepath.Join(dir, "extra.safetensors"), extra)
	if im, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true}); err != nil || !strings.Contains(strings.Join(im.Notes, "\n"), "extra.safetensors holds none of the model's tensors (2 others): not read") {
		t.Errorf("a file of no model tensor: %v", err)
	}
}

// TestLoadFolder: importer.Load takes a checkpoint folder, and a folder without config.json is
// an error saying what it lacks.
func TestLoadFolder(t *testing.T) {
	cfg, ts := randomCheckpoint("Qwen2ForCausalLM", 2, 10)
	dir := filepath.Join(t.TempDir(), "q")
	writeCheckpoint(t, dir, cfg, ts, 1)
	m, err := importer.Load(dir)
	if err != nil || m.Function("prefill") == nil || m.Param("layers.1.bv") == nil {
		t.Fatalf("Load: %v", err)
	}
	m.Close()
	if _, err := importer.Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "without config.json") {
		t.Errorf("empty folder: %v", err)
	}
}
