package importer

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
)

// GGUFArchitectures are the general.architecture values ImportGGUF knows: Llama-style
// decoders (llama: Llama 2 and 3, SmolLM2, TinyLlama, Mistral without a sliding window),
// qwen2 (q/k/v biases) and qwen3 (per-head RMSNorm of q and k before RoPE).
var GGUFArchitectures = []string{"llama", "qwen2", "qwen3"}

// MaxCtx caps the context (KV cache rows) an import gives a model by default: the KV caches
// are f32, so a model that declares 128k tokens would need tens of GiB; 4096 keeps Llama-3-8B's
// caches at 1 GiB. GGUFOptions.Ctx (vkc import --ctx) asks for more.
const MaxCtx = 4096

// DefaultPrefill is the most tokens the prefill function takes when GGUFOptions.Prefill is 0
// (capped at the context).
const DefaultPrefill = 128

// GGUFOptions configure ImportGGUF.
type GGUFOptions struct {
	// Ctx is the number of KV cache rows (positions) the model holds; 0 means the file's
	// {arch}.context_length capped at MaxCtx.
	Ctx int
	// Prefill is the most tokens the prefill function takes (a run-time length 1..Prefill: a
	// run takes any prompt up to it); 0 means DefaultPrefill, capped at Ctx.
	Prefill int
	// YAMLDir is the folder the model.yaml will be written to: the weights file is named
	// relative to it. "" means the GGUF file's folder (an in-memory import).
	YAMLDir string
	// SkipWeights parses the generated model without loading its weights.
	SkipWeights bool
}

// GGUF is an imported GGUF model.
type GGUF struct {
	// YAML is the generated model.yaml; Model is it parsed, with its weights loaded.
	YAML  []byte
	Model *ir.Model
	Arch  string
	// Notes say what the import chose (the rope mode, the context, dequantized tensors).
	Notes []string
}

// ImportGGUF reads a GGUF file of a known architecture and writes a model.yaml for it (kept in
// GGUF.YAML) with the conventions of vkc's examples: functions prefill (seq a run-time length
// 1..Prefill) and decode (seq 1), inputs tokens (i32[seq]) and pos (i32 scalar), output logits
// (f32[seq, vocab]), state
// k_cache.{i} and v_cache.{i} ([ctx, kv_heads, head_dim], f32). Weights keep their GGUF
// formats (block-quantized ones stay blocks) and are read from the file by their GGUF names.
//
// RoPE: llama.cpp's converter permutes the rows of a llama model's Q and K projections so that
// its interleaved ("normal") RoPE, which rotates the pairs (2j, 2j+1), computes what the
// original model's rotate-half RoPE did. The import keeps the weights as stored and uses
// rope mode=interleaved for llama, so it computes what llama.cpp computes; qwen2 and qwen3 are
// stored unpermuted and run with NEOX RoPE, pairs (j, j+d/2): mode=half.
//
// An architecture it does not know, or a feature of a known one it cannot express (rope
// scaling, a partial rotary dimension, mixture of experts, a sliding window shorter than the
// context), is an error that says so; nothing is silently dropped.
func ImportGGUF(path string, opts GGUFOptions) (*GGUF, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := &ggufImport{f: f, path: path, opts: opts}
	src, err := g.generate()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if opts.YAMLDir != "" {
		dir = opts.YAMLDir
	}
	m, err := ir.ParseModelBytesWith(path, src, dir, ir.ParseOptions{SkipWeights: opts.SkipWeights})
	if err != nil {
		return nil, fmt.Errorf("import %s: the generated model.yaml does not load (a bug in the importer): %w", path, err)
	}
	return &GGUF{YAML: src, Model: m, Arch: g.arch, Notes: g.notes}, nil
}

type ggufImport struct {
	f     *gguf.File
	path  string
	opts  GGUFOptions
	arch  string
	notes []string
}

func (g *ggufImport) note(format string, args ...any) {
	g.notes = append(g.notes, fmt.Sprintf(format, args...))
}

// uint reads a required positive integer of the architecture ({arch}.name).
func (g *ggufImport) uint(name string) (int, error) {
	v, err := g.f.Uint(g.arch + "." + name)
	if err != nil {
		return 0, err
	}
	if v == 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%s.%s is %d", g.arch, name, v)
	}
	return int(v), nil
}

// optUint is uint for an optional key, def when absent.
func (g *ggufImport) optUint(name string, def int) (int, error) {
	if !g.f.Has(g.arch + "." + name) {
		return def, nil
	}
	return g.uint(name)
}

// ggufTensor is one weight the model reads: its parameter (template), its GGUF name (template)
// and its shape in model.yaml dims.
type ggufTensor struct {
	param, file string
	shape       []string
	perLayer    bool
}

func (g *ggufImport) generate() ([]byte, error) {
	arch, err := g.f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	g.arch = arch
	known := false
	for _, a := range GGUFArchitectures {
		known = known || a == arch
	}
	if !known {
		return nil, fmt.Errorf("architecture %q is not one vkc imports (it knows %s)", arch, strings.Join(GGUFArchitectures, ", "))
	}
	layers, err := g.uint("block_count")
	if err != nil {
		return nil, err
	}
	d, err := g.uint("embedding_length")
	if err != nil {
		return nil, err
	}
	ffn, err := g.uint("feed_forward_length")
	if err != nil {
		return nil, err
	}
	heads, err := g.uint("attention.head_count")
	if err != nil {
		return nil, err
	}
	kvHeads, err := g.optUint("attention.head_count_kv", heads)
	if err != nil {
		return nil, err
	}
	if heads%kvHeads != 0 {
		return nil, fmt.Errorf("%d attention heads are not a multiple of %d KV heads", heads, kvHeads)
	}
	hd, err := g.optUint("attention.key_length", d/heads)
	if err != nil {
		return nil, err
	}
	vd, err := g.optUint("attention.value_length", hd)
	if err != nil {
		return nil, err
	}
	if vd != hd {
		return nil, fmt.Errorf("%s.attention.value_length %d differs from key_length %d; vkc imports equal head dimensions only", arch, vd, hd)
	}
	if hd%2 != 0 {
		return nil, fmt.Errorf("head dimension %d is odd; RoPE needs pairs", hd)
	}
	if rd, err := g.optUint("rope.dimension_count", hd); err != nil {
		return nil, err
	} else if rd != hd {
		return nil, fmt.Errorf("%s.rope.dimension_count is %d of a head dimension of %d: partial rotary embeddings are not supported", arch, rd, hd)
	}
	ctxLen, err := g.optUint("context_length", 0)
	if err != nil {
		return nil, err
	}
	epsKey := arch + ".attention.layer_norm_rms_epsilon"
	eps, err := g.f.Float(epsKey)
	if err != nil {
		return nil, err
	}
	theta := 10000.0
	if g.f.Has(arch + ".rope.freq_base") {
		if theta, err = g.f.Float(arch + ".rope.freq_base"); err != nil {
			return nil, err
		}
	}
	if err := g.unsupported(); err != nil {
		return nil, err
	}
	// The vocabulary: {arch}.vocab_size, else token_embd's rows.
	emb, ok := g.f.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("no tensor token_embd.weight")
	}
	vocab := 0
	if len(emb.Dims) == 2 {
		vocab = int(emb.Dims[1])
	}
	if g.f.Has(arch + ".vocab_size") {
		if vocab, err = g.uint("vocab_size"); err != nil {
			return nil, err
		}
	}
	ctx := g.opts.Ctx
	switch {
	case ctx < 0:
		return nil, fmt.Errorf("context %d is negative", ctx)
	case ctx == 0 && ctxLen == 0:
		ctx = MaxCtx
		g.note("the file gives no %s.context_length: context %d", arch, ctx)
	case ctx == 0 && ctxLen > MaxCtx:
		ctx = MaxCtx
		g.note("context %d of the model's %d (capped at %d: KV caches are f32; --ctx sets it)", ctx, ctxLen, MaxCtx)
	case ctx == 0:
		ctx = ctxLen
	case ctxLen > 0 && ctx > ctxLen:
		g.note("context %d is more than the model's %d; positions past it were not trained", ctx, ctxLen)
	}
	if w, err := g.optUint("attention.sliding_window", 0); err == nil && w > 0 && w < ctx {
		return nil, fmt.Errorf("%s.attention.sliding_window is %d, less than the context %d: sliding-window attention is not supported (import with --ctx %d or less)", arch, w, ctx, w)
	}
	seq := g.opts.Prefill
	if seq == 0 {
		seq = min(DefaultPrefill, ctx)
	}
	if seq < 0 || seq > ctx {
		return nil, fmt.Errorf("prefill length %d is not within the context 1..%d", seq, ctx)
	}

	mode := "half"
	if arch == "llama" {
		mode = "interleaved"
		g.note("llama.cpp stores llama's Q and K rows permuted for its interleaved RoPE: rope mode=interleaved on the stored weights (no un-permuting)")
	}
	_, hasOutput := g.f.Tensor("output.weight")
	qkNorm := arch == "qwen3"
	bias := map[string]bool{}
	for _, b := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
		_, bias[b] = g.f.Tensor("blk.0." + b + ".bias")
	}
	if arch == "qwen2" && !(bias["attn_q"] && bias["attn_k"] && bias["attn_v"]) {
		return nil, fmt.Errorf("a qwen2 model has q, k and v biases; blk.0.attn_q.bias, attn_k.bias or attn_v.bias is missing")
	}

	ts := []ggufTensor{
		{param: "embed", file: "token_embd.weight", shape: []string{"vocab", "d"}},
		{param: "layers.{i}.attn_norm", file: "blk.{i}.attn_norm.weight", shape: []string{"d"}, perLayer: true},
		{param: "layers.{i}.wq", file: "blk.{i}.attn_q.weight", shape: []string{"heads*hd", "d"}, perLayer: true},
		{param: "layers.{i}.wk", file: "blk.{i}.attn_k.weight", shape: []string{"kv_heads*hd", "d"}, perLayer: true},
		{param: "layers.{i}.wv", file: "blk.{i}.attn_v.weight", shape: []string{"kv_heads*hd", "d"}, perLayer: true},
	}
	for _, b := range []struct{ name, out string }{{"attn_q", "heads*hd"}, {"attn_k", "kv_heads*hd"}, {"attn_v", "kv_heads*hd"}, {"attn_output", "d"}} {
		if bias[b.name] {
			ts = append(ts, ggufTensor{param: "layers.{i}." + biasParam(b.name), file: "blk.{i}." + b.name + ".bias", shape: []string{b.out}, perLayer: true})
		}
	}
	if qkNorm {
		ts = append(ts,
			ggufTensor{param: "layers.{i}.q_norm", file: "blk.{i}.attn_q_norm.weight", shape: []string{"hd"}, perLayer: true},
			ggufTensor{param: "layers.{i}.k_norm", file: "blk.{i}.attn_k_norm.weight", shape: []string{"hd"}, perLayer: true})
	}
	ts = append(ts,
		ggufTensor{param: "layers.{i}.wo", file: "blk.{i}.attn_output.weight", shape: []string{"d", "heads*hd"}, perLayer: true},
		ggufTensor{param: "layers.{i}.mlp_norm", file: "blk.{i}.ffn_norm.weight", shape: []string{"d"}, perLayer: true},
		ggufTensor{param: "layers.{i}.w_gate", file: "blk.{i}.ffn_gate.weight", shape: []string{"ffn", "d"}, perLayer: true},
		ggufTensor{param: "layers.{i}.w_up", file: "blk.{i}.ffn_up.weight", shape: []string{"ffn", "d"}, perLayer: true},
		ggufTensor{param: "layers.{i}.w_down", file: "blk.{i}.ffn_down.weight", shape: []string{"d", "ffn"}, perLayer: true},
		ggufTensor{param: "out_norm", file: "output_norm.weight", shape: []string{"d"}})
	lmHead := "embed"
	if hasOutput {
		ts = append(ts, ggufTensor{param: "lm_head", file: "output.weight", shape: []string{"vocab", "d"}})
		lmHead = "lm_head"
	} else {
		g.note("no output.weight: the output projection is tied to token_embd.weight")
	}

	weightsFile, err := g.weightsPath()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	name, _ := g.f.String("general.name")
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(g.path), filepath.Ext(g.path))
	}
	w("# Imported by vkc import from %s (architecture %s).\n", filepath.Base(g.path), arch)
	w("# RoPE mode=%s: %s.\n", mode, map[string]string{
		"interleaved": "llama.cpp's converter permutes llama's Q and K rows for its interleaved RoPE, and the weights are used as stored",
		"half":        "this architecture's Q and K rows are stored unpermuted and llama.cpp runs it with NEOX (rotate-half) RoPE"}[mode])
	w("# eps and theta are the file's f32 values, exactly.\n")
	w("model: %s\n", yamlString(name))
	w("dims:\n  vocab: %d\n  d: %d\n  heads: %d\n  kv_heads: %d\n  hd: %d\n  ffn: %d\n  layers: %d\n  ctx: %d\n",
		vocab, d, heads, kvHeads, hd, ffn, layers, ctx)
	w("\nweights:\n  file: %s\n  names:\n", yamlString(weightsFile))
	for _, t := range ts {
		w("    %s: %s\n", t.param, t.file)
	}
	w("\nparams:\n")
	for _, t := range ts {
		if err := g.declare(&b, t, layers); err != nil {
			return nil, err
		}
	}
	w("\nstate:\n  k_cache.{i}: [ctx, kv_heads, hd]\n  v_cache.{i}: [ctx, kv_heads, hd]\n")
	epsS, thetaS := fmtFloat(eps), fmtFloat(theta)
	lin := func(x, wname, bname string) string {
		if bias[bname] {
			return fmt.Sprintf("linear(%s, layers.{i}.%s, layers.{i}.%s)", x, wname, biasParam(bname))
		}
		return fmt.Sprintf("linear(%s, layers.{i}.%s)", x, wname)
	}
	w("\nfunctions:\n")
	for fi, fn := range []struct {
		name string
		seq  int
	}{{"prefill", seq}, {"decode", 1}} {
		dims := fmt.Sprint(fn.seq)
		if fn.seq > 1 {
			dims = fmt.Sprintf("1..%d", fn.seq) // a run-time length: a prompt of any length up to it
		}
		w("  %s:\n    dims: {seq: %s}\n    inputs:\n      tokens: i32[seq]\n      pos: i32[]\n    outputs:\n      logits: f32[seq, vocab]\n", fn.name, dims)
		if fi > 0 {
			w("    body: *body\n")
			continue
		}
		w("    body: &body\n")
		if emb.Format != nil && emb.Format.Name == "f16" {
			// An f16 table gives f16 rows; the activations are f32, as llama.cpp's get_rows
			// gives them (a block-quantized table gives f32 rows itself).
			w("      - x = cast(embedding(embed, tokens), to=f32)\n")
		} else {
			w("      - x = embedding(embed, tokens)\n")
		}
		w("      - kv_len = add(pos, seq)\n")
		w("      - repeat i in 0..layers:\n")
		w("        - h = rmsnorm(x, layers.{i}.attn_norm, eps=%s)\n", epsS)
		q := fmt.Sprintf("reshape(%s, shape=[seq, heads, hd])", lin("h", "wq", "attn_q"))
		k := fmt.Sprintf("reshape(%s, shape=[seq, kv_heads, hd])", lin("h", "wk", "attn_k"))
		if qkNorm {
			w("        # per-head RMSNorm of q and k, then RoPE\n")
			w("        - q = rmsnorm(%s, layers.{i}.q_norm, eps=%s)\n", q, epsS)
			w("        - k = rmsnorm(%s, layers.{i}.k_norm, eps=%s)\n", k, epsS)
			q, k = "q", "k"
		}
		w("        - q = rope(%s, pos, theta=%s, mode=%s)\n", q, thetaS, mode)
		w("        - k = rope(%s, pos, theta=%s, mode=%s)\n", k, thetaS, mode)
		w("        - k_cache.{i} <- cache_write(k_cache.{i}, k, pos)\n")
		w("        - v_cache.{i} <- cache_write(v_cache.{i}, reshape(%s, shape=[seq, kv_heads, hd]), pos)\n", lin("h", "wv", "attn_v"))
		w("        - a = attention(q, k_cache.{i}, v_cache.{i}, kv_len, scale=1/sqrt(hd), causal=true)\n")
		w("        - x = add(x, %s)\n", lin("reshape(a, shape=[seq, heads*hd])", "wo", "attn_output"))
		w("        - h = rmsnorm(x, layers.{i}.mlp_norm, eps=%s)\n", epsS)
		w("        - x = add(x, linear(mul(silu(linear(h, layers.{i}.w_gate)), linear(h, layers.{i}.w_up)), layers.{i}.w_down))\n")
		w("      - logits = linear(rmsnorm(x, out_norm, eps=%s), %s)\n", epsS, lmHead)
	}
	g.note("context %d, prefill up to %d tokens, %d layers, %d heads over %d KV heads of %d", ctx, seq, layers, heads, kvHeads, hd)
	return []byte(b.String()), nil
}

func biasParam(name string) string {
	return map[string]string{"attn_q": "bq", "attn_k": "bk", "attn_v": "bv", "attn_output": "bo"}[name]
}

// unsupported rejects features of known architectures that the generated model would not
// compute.
func (g *ggufImport) unsupported() error {
	a := g.arch
	if n, err := g.optUint("expert_count", 0); err != nil || n > 0 {
		return fmt.Errorf("%s.expert_count is %d: mixture-of-experts models are not supported", a, n)
	}
	if v, ok := g.f.Get(a + ".rope.scaling.type"); ok {
		if s, _ := v.AsString(); s != "" && s != "none" {
			return fmt.Errorf("%s.rope.scaling.type is %q: RoPE scaling is not supported", a, s)
		}
	}
	if v, ok := g.f.Get(a + ".rope.scaling.factor"); ok {
		if x, _ := v.AsFloat(); x != 0 && x != 1 {
			return fmt.Errorf("%s.rope.scaling.factor is %v: RoPE scaling is not supported", a, x)
		}
	}
	if _, ok := g.f.Tensor("rope_freqs.weight"); ok {
		return fmt.Errorf("the file has rope_freqs.weight (Llama 3.1-style frequency scaling), which is not supported")
	}
	return nil
}

// declare writes the parameter declarations of t: one templated line when every layer's tensor
// has the same type, else one line per layer (llama.cpp's K-quant mixes give some layers' attn_v
// and ffn_down more bits).
func (g *ggufImport) declare(b *strings.Builder, t ggufTensor, layers int) error {
	n := 1
	if t.perLayer {
		n = layers
	}
	types := make([]string, n)
	for i := range types {
		name := strings.ReplaceAll(t.file, "{i}", strconv.Itoa(i))
		ti, ok := g.f.Tensor(name)
		if !ok {
			return fmt.Errorf("no tensor %s (the %s architecture has one per layer)", name, g.arch)
		}
		if ti.Format == nil {
			return fmt.Errorf("tensor %s has ggml type %d (%s), which vkc does not read", name, ti.Type, ti.TypeName())
		}
		d, ok := ir.DTypeOfFormat(ti.Format)
		if !ok {
			return fmt.Errorf("tensor %s has type %s, which has no vkc dtype", name, ti.TypeName())
		}
		if d == ir.BF16 {
			// Kernels have no bf16 storage; f32 holds every bf16 value exactly.
			d = ir.F32
			g.note("%s is bf16: loaded as f32", name)
		}
		types[i] = d.String()
	}
	same := true
	for _, s := range types {
		same = same && s == types[0]
	}
	shape := "[" + strings.Join(t.shape, ", ") + "]"
	dt := func(s string) string {
		if s == "f32" {
			return shape
		}
		return s + shape
	}
	if same {
		fmt.Fprintf(b, "  %s: %s\n", t.param, dt(types[0]))
		return nil
	}
	for i, s := range types {
		fmt.Fprintf(b, "  %s: %s\n", strings.ReplaceAll(t.param, "{i}", strconv.Itoa(i)), dt(s))
	}
	return nil
}

// weightsPath is the GGUF file as the model.yaml names it: relative to the folder the yaml
// goes to when it can be, else absolute.
func (g *ggufImport) weightsPath() (string, error) {
	abs, err := filepath.Abs(g.path)
	if err != nil {
		return "", err
	}
	dir := g.opts.YAMLDir
	if dir == "" {
		return filepath.Base(g.path), nil
	}
	adir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(adir, abs); err == nil {
		return filepath.ToSlash(rel), nil
	}
	return abs, nil
}

// fmtFloat writes x (a float32 widened exactly) so that model.yaml reads back the same float64.
func fmtFloat(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// yamlString quotes s for YAML when it is not a plain word.
func yamlString(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r)) {
			plain = false
		}
	}
	if plain {
		return s
	}
	return strconv.Quote(s)
}

// IsGGUFPath reports whether path names a GGUF file: by its extension, or its first bytes.
func IsGGUFPath(path string) bool {
	if strings.EqualFold(filepath.Ext(path), ".gguf") {
		return true
	}
	ok, _ := ir.IsGGUF(path)
	return ok
}
