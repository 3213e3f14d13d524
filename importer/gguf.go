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
// decoders (llama: Llama 2 and 3, SmolLM2, TinyLlama, Mistral without a sliding window, and
// Mixtral's mixture of experts), qwen2 (q/k/v biases), qwen3 (per-head RMSNorm of q and k
// before RoPE), qwen3moe (Qwen3 with a mixture of experts), gemma3 and phi3 (see
// gguf_arch.go).
var GGUFArchitectures = []string{"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"}

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
	// Slots > 0 gives the KV caches a slot dimension for that many sequences and the model a
	// batched function (batch) in place of prefill and decode: vkc serve --parallel.
	Slots int
	// Precision chooses the KV cache's dtype and the activations the products read.
	Precision Precision
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
// RoPE scaling: {arch}.rope.scaling.type linear, and llama.cpp's rope_freqs.weight when its
// divisors are Llama 3's (see ropeScaling), become rope's scaling attribute.
//
// An architecture it does not know, or a feature of a known one it cannot express (another
// rope scaling, a partial rotary dimension, mixture of experts, a sliding window shorter than
// the context), is an error that says so; nothing is silently dropped.
func ImportGGUF(path string, opts GGUFOptions) (*GGUF, error) {
	if opts.Slots < 0 || opts.Slots > maxSlots {
		return nil, fmt.Errorf("import %s: %d slots: want 0 (one sequence) to %d", path, opts.Slots, maxSlots)
	}
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
	if err := checkLayerCount(arch+".block_count", layers, g.f.Names()); err != nil {
		return nil, err
	}
	d, err := g.uint("embedding_length")
	if err != nil {
		return nil, err
	}
	ffn, err := g.uint("feed_forward_length")
	if err != nil && arch == "qwen3moe" && g.f.Has(arch+".expert_feed_forward_length") {
		ffn, err = g.uint("expert_feed_forward_length") // no dense FFN: its width is not needed
	}
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
	if w, err := g.optUint("attention.sliding_window", 0); err == nil && w > 0 && w < ctx && !archWindows[arch] {
		return nil, fmt.Errorf("%s.attention.sliding_window is %d, less than the context %d: sliding-window attention is not supported (import with --ctx %d or less)", arch, w, ctx, w)
	}
	seq := g.opts.Prefill
	if seq == 0 {
		seq = min(DefaultPrefill, ctx)
	}
	if seq < 0 || seq > ctx {
		return nil, fmt.Errorf("prefill length %d is not within the context 1..%d", seq, ctx)
	}

	scaling, err := g.ropeScaling(theta, hd)
	if err != nil {
		return nil, err
	}
	mode := "half" // every architecture but llama is stored unpermuted and run with NEOX RoPE
	if arch == "llama" {
		mode = "interleaved"
		g.note("llama.cpp stores llama's Q and K rows permuted for its interleaved RoPE: rope mode=interleaved on the stored weights (no un-permuting)")
	}
	_, hasOutput := g.f.Tensor("output.weight")
	bias := map[string]bool{}
	for _, b := range []struct{ p, file string }{{"q", "attn_q"}, {"k", "attn_k"}, {"v", "attn_v"}, {"o", "attn_output"}} {
		_, bias[b.p] = g.f.Tensor("blk.0." + b.file + ".bias")
	}
	if arch == "qwen2" && !(bias["q"] && bias["k"] && bias["v"]) {
		return nil, fmt.Errorf("a qwen2 model has q, k and v biases; blk.0.attn_q.bias, attn_k.bias or attn_v.bias is missing")
	}
	if !hasOutput {
		g.note("no output.weight: the output projection is tied to token_embd.weight")
	}
	weightsFile, err := g.weightsPath()
	if err != nil {
		return nil, err
	}
	name, _ := g.f.String("general.name")
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(g.path), filepath.Ext(g.path))
	}
	lm := &decoderLM{
		header: []string{
			fmt.Sprintf("Imported by vkc import from %s (architecture %s).", filepath.Base(g.path), arch),
			fmt.Sprintf("RoPE mode=%s: %s.", mode, map[string]string{
				"interleaved": "llama.cpp's converter permutes llama's Q and K rows for its interleaved RoPE, and the weights are used as stored",
				"half":        "this architecture's Q and K rows are stored unpermuted and llama.cpp runs it with NEOX (rotate-half) RoPE"}[mode]),
			"eps and theta are the file's f32 values, exactly.",
		},
		name: name, vocab: vocab, d: d, heads: heads, kvHeads: kvHeads, hd: hd, ffn: ffn, layers: layers, ctx: ctx, prefill: seq,
		slots: g.opts.Slots, eps: eps, theta: theta, ropeMode: mode, scaling: scaling, qkNorm: arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3", bias: bias, tied: !hasOutput,
		files: []string{weightsFile},
		names: map[string]string{
			"embed": "token_embd.weight", "layers.{i}.attn_norm": "blk.{i}.attn_norm.weight",
			"layers.{i}.wq": "blk.{i}.attn_q.weight", "layers.{i}.wk": "blk.{i}.attn_k.weight", "layers.{i}.wv": "blk.{i}.attn_v.weight",
			"layers.{i}.bq": "blk.{i}.attn_q.bias", "layers.{i}.bk": "blk.{i}.attn_k.bias", "layers.{i}.bv": "blk.{i}.attn_v.bias",
			"layers.{i}.bo":     "blk.{i}.attn_output.bias",
			"layers.{i}.q_norm": "blk.{i}.attn_q_norm.weight", "layers.{i}.k_norm": "blk.{i}.attn_k_norm.weight",
			"layers.{i}.wo": "blk.{i}.attn_output.weight", "layers.{i}.mlp_norm": "blk.{i}.ffn_norm.weight",
			"layers.{i}.w_gate": "blk.{i}.ffn_gate.weight", "layers.{i}.w_up": "blk.{i}.ffn_up.weight", "layers.{i}.w_down": "blk.{i}.ffn_down.weight",
			"out_norm": "output_norm.weight", "lm_head": "output.weight",
		},
		dtype: g.dtype,
		// An f16 or bf16 table gives 16-bit rows; the activations are f32, as llama.cpp's
		// get_rows gives them (a block-quantized table gives f32 rows itself).
		castEmbed: emb.Format != nil && (emb.Format.Name == "f16" || emb.Format.Name == "bf16"),
	}
	if err := g.archSpecific(lm); err != nil {
		return nil, err
	}
	lm.header = append(lm.header, lm.arch.header()...)
	if scaling.Type != ir.RopeScalingNone {
		g.note("RoPE scaling %s (factor %v)", scaling.Type, scaling.Factor)
	}
	if err := g.check(lm, epsKey); err != nil {
		return nil, err
	}
	pn, err := lm.setPrecision(g.opts.Precision)
	if err != nil {
		return nil, err
	}
	g.note("%s", pn)
	if g.f.Has("tokenizer.ggml.tokens") {
		lm.tokenizer = weightsFile // the file's vocabulary: a compiled plan records it
		g.note("the file has a vocabulary (tokenizer.ggml.*): a compiled plan records it")
	} else {
		g.note("%s", NoVocabulary(g.f))
	}
	src, err := lm.yaml()
	if err != nil {
		return nil, err
	}
	g.note("context %d, prefill up to %d tokens, %d layers, %d heads over %d KV heads of %d", ctx, seq, layers, heads, kvHeads, hd)
	return src, nil
}

// ropeScaling reads the file's RoPE frequency scaling: {arch}.rope.scaling.type linear with its
// factor, or llama.cpp's per-frequency divisors rope_freqs.weight (what its converter writes for
// Llama 3.1's llama3 scaling), read back as the llama3 parameters that give them (within 1e-5:
// the converter rounds each divisor to f32). Another scaling type (yarn, longrope) is an error.
func (g *ggufImport) ropeScaling(theta float64, hd int) (ir.RopeScaling, error) {
	a := g.arch
	none := ir.RopeScaling{Type: ir.RopeScalingNone, Factor: 1}
	typ := ""
	if v, ok := g.f.Get(a + ".rope.scaling.type"); ok {
		typ, _ = v.AsString()
	}
	factor := 0.0
	if v, ok := g.f.Get(a + ".rope.scaling.factor"); ok {
		factor, _ = v.AsFloat()
	}
	_, hasFreqs := g.f.Tensor("rope_freqs.weight")
	switch {
	case hasFreqs && typ != "" && typ != "none":
		return none, fmt.Errorf("%s.rope.scaling.type is %q and the file also has rope_freqs.weight: two RoPE scalings", a, typ)
	case hasFreqs:
		t, err := ir.ReadGGUFTensor(g.f, "rope_freqs.weight")
		if err != nil {
			return none, err
		}
		if t.Type.DType != ir.F32 || t.NumElements() != hd/2 {
			return none, fmt.Errorf("rope_freqs.weight is %s; want f32[%d] (a divisor per frequency of the %d-wide head)", t.Type, hd/2, hd)
		}
		inv := make([]float64, hd/2)
		for i := range inv {
			inv[i] = 1 / math.Pow(theta, float64(2*i)/float64(hd)) / t.Float64(i)
		}
		s, ok := ir.FitRopeScaling(inv, theta, hd, 1e-5)
		if !ok {
			return none, fmt.Errorf("rope_freqs.weight does not follow Llama 3's frequency scaling (the llama3 rope_scaling llama.cpp's converter writes it for); other per-frequency factors are not supported")
		}
		g.note("rope_freqs.weight is Llama 3's frequency scaling with factor %v, low_freq_factor %v, high_freq_factor %v, original context %d",
			s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalCtx)
		return s, nil
	case typ == "linear":
		if !(factor > 0) {
			return none, fmt.Errorf("%s.rope.scaling.type is linear but %s.rope.scaling.factor is %v", a, a, factor)
		}
		return ir.RopeScaling{Type: ir.RopeScalingLinear, Factor: factor}, nil
	case typ == "" || typ == "none":
		if factor != 0 && factor != 1 {
			return none, fmt.Errorf("%s.rope.scaling.factor is %v without a scaling type", a, factor)
		}
		return none, nil
	}
	return none, fmt.Errorf("%s.rope.scaling.type is %q: vkc supports linear and Llama 3's scaling (rope_freqs.weight)", a, typ)
}

// dtype is the model.yaml dtype a tensor of the file is declared with: its ggml type; a bf16
// matrix stays bf16 (kernels read it as 16-bit words, widened exactly), a bf16 vector (a norm
// weight, a bias) is f32, which holds every bf16 value.
func (g *ggufImport) dtype(name string) (string, error) {
	ti, ok := g.f.Tensor(name)
	if !ok {
		return "", fmt.Errorf("no tensor %s (the %s architecture has one per layer)", name, g.arch)
	}
	if ti.Format == nil {
		return "", fmt.Errorf("tensor %s has ggml type %d (%s), which vkc does not read", name, ti.Type, ti.TypeName())
	}
	d, ok := ir.DTypeOfFormat(ti.Format)
	if !ok {
		return "", fmt.Errorf("tensor %s has type %s, which has no vkc dtype", name, ti.TypeName())
	}
	if d == ir.BF16 && len(ti.Dims) != 2 {
		d = ir.F32
		g.note("%s is a bf16 vector: loaded as f32 (exact)", name)
	}
	return d.String(), nil
}

// unsupported rejects features of known architectures that the generated model would not
// compute.
func (g *ggufImport) unsupported() error {
	a := g.arch
	if n, err := g.optUint("expert_count", 0); err != nil || n > 0 && a != "llama" && a != "qwen3moe" {
		return fmt.Errorf("%s.expert_count is %d: vkc imports mixtures of experts of llama (Mixtral) and qwen3moe only", a, n)
	}
	if a == "qwen3moe" && !g.f.Has(a+".expert_count") {
		return fmt.Errorf("a qwen3moe file has %s.expert_count; it is missing", a)
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

// check validates the metadata the model was built from against the file's tensors (see
// validate.go), naming the GGUF keys.
func (g *ggufImport) check(lm *decoderLM, epsKey string) error {
	a := g.arch + "."
	keys := dimKeys{"vocab": a + "vocab_size", "d": a + "embedding_length", "heads": a + "attention.head_count",
		"kv_heads": a + "attention.head_count_kv", "hd": a + "attention.key_length", "ffn": a + "feed_forward_length",
		"eps": epsKey, "theta": a + "rope.freq_base"}
	if !g.f.Has(a + "vocab_size") {
		keys["vocab"] = "token_embd.weight's rows"
	}
	if !g.f.Has(a + "attention.key_length") {
		keys["hd"] = a + "embedding_length / " + a + "attention.head_count"
	}
	if err := lm.checkScalars(keys); err != nil {
		return err
	}
	return lm.checkShapes(func(name string) ([]int, bool) {
		ti, ok := g.f.Tensor(name)
		if !ok {
			return nil, false
		}
		return ti.Shape(), true
	}, keys)
}

// NoVocabulary says why a GGUF file without tokenizer.ggml.tokens has no tokenizer, and what to
// do: text generation then needs a tokenizer.json given apart.
func NoVocabulary(f *gguf.File) string {
	why := "it has no tokenizer.ggml.* keys"
	if m, err := f.String("tokenizer.ggml.model"); err == nil {
		why = fmt.Sprintf("tokenizer.ggml.model is %q and there is no tokenizer.ggml.tokens", m)
	}
	return fmt.Sprintf("the file has no vocabulary (%s): a plan compiled from it records no tokenizer; give one with --tokenizer tokenizer.json", why)
}

// GGUFVocabulary reports, for a GGUF file, "" when it has a vocabulary, else NoVocabulary's
// sentence (and "" for a file that does not open: its import says why).
func GGUFVocabulary(path string) string {
	f, err := gguf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if f.Has("tokenizer.ggml.tokens") {
		return ""
	}
	return NoVocabulary(f)
}
