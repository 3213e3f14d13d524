package importer

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/internal/regular"
	"github.com/vkc-project/vkc/ir"
)

// HFArchitectures are the Hugging Face architectures ImportHF knows (config.json's
// architectures), with the model_type that names each when a config has no architectures.
var HFArchitectures = []struct{ Class, ModelType string }{
	{"LlamaForCausalLM", "llama"},
	{"MistralForCausalLM", "mistral"},
	{"Qwen2ForCausalLM", "qwen2"},
	{"Qwen3ForCausalLM", "qwen3"},
	{"Qwen3MoeForCausalLM", "qwen3_moe"},
	{"Gemma3ForCausalLM", "gemma3_text"},
	{"Phi3ForCausalLM", "phi3"},
}

// HFOptions configure ImportHF.
type HFOptions struct {
	// Ctx is the number of KV cache rows; 0 means max_position_embeddings capped at MaxCtx.
	Ctx int
	// Prefill is the most tokens the prefill function takes; 0 means DefaultPrefill capped at Ctx.
	Prefill int
	// YAMLDir is the folder the model.yaml will be written to (the weight and tokenizer files
	// are named relative to it); "" means the checkpoint's folder (an in-memory import).
	YAMLDir string
	// SkipWeights parses the generated model without loading its weights.
	SkipWeights bool
	// Slots > 0 gives the KV caches a slot dimension for that many sequences and the model a
	// batched function (batch) in place of prefill and decode: vkc serve --parallel.
	Slots int
	// Precision chooses the KV cache's dtype and the activations the products read.
	Precision Precision
}

// HF is an imported Hugging Face checkpoint.
type HF struct {
	// YAML is the generated model.yaml; Model is it parsed, with its weights loaded.
	YAML  []byte
	Model *ir.Model
	Arch  string // the architecture class, e.g. "LlamaForCausalLM"
	// Used lists the config.json fields the import read; Ignored the ones it did not (metadata
	// such as transformers_version, or fields the architecture's own transformers class
	// ignores too).
	Used, Ignored []string
	// Files are the safetensors files the weights are read from; Tokenizer the tokenizer.json
	// recorded ("" when the folder has none).
	Files     []string
	Tokenizer string
	// Notes say what the import chose (defaults, capped context, converted dtypes, skipped files).
	Notes []string
}

// IsHFDir reports whether path is a folder holding a config.json (a Hugging Face checkpoint).
func IsHFDir(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	_, err = os.Stat(filepath.Join(path, "config.json"))
	return err == nil
}

// ImportHF reads a Hugging Face checkpoint folder (config.json; model.safetensors, shards listed
// by model.safetensors.index.json, or the folder's *.safetensors; tokenizer.json and
// tokenizer_config.json when present) of a Llama-family architecture and writes its model.yaml
// with the examples' conventions (see decoderLM): the weights are read from the safetensors
// files by their transformers names, memory-mapped; Q and K are stored as transformers uses them
// (rotate-half RoPE, mode=half).
//
// The config's rope_theta, rope_scaling (or transformers 5's rope_parameters) of type default,
// linear or llama3, sliding_window (Mistral; Qwen2 and Qwen3 with use_sliding_window, from
// max_window_layers or layer_types), tie_word_embeddings, head_dim and the biases become the
// graph; a field that would change the computation in a way vkc cannot express (another
// activation or RoPE type, partial rotary dimensions, MLP biases, quantized checkpoints) is an
// error naming it. A safetensors tensor that is not the model's is an error naming it; a file
// none of whose tensors is the model's is skipped with a note (a folder may hold reference
// outputs beside the weights).
func ImportHF(dir string, opts HFOptions) (*HF, error) {
	if opts.Slots < 0 || opts.Slots > maxSlots {
		return nil, fmt.Errorf("import %s: %d slots: want 0 (one sequence) to %d", dir, opts.Slots, maxSlots)
	}
	h := &hfImport{dir: dir, opts: opts, res: &HF{}}
	lm, err := h.build()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	src, err := lm.yaml()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	ydir := opts.YAMLDir
	if ydir == "" {
		ydir = dir
	}
	m, err := ir.ParseModelBytesWith(dir, src, ydir, ir.ParseOptions{SkipWeights: opts.SkipWeights})
	if err != nil {
		return nil, fmt.Errorf("import %s: the generated model.yaml does not load: %w", dir, err)
	}
	h.res.YAML, h.res.Model = src, m
	h.res.Used, h.res.Ignored = h.cfg.report()
	return h.res, nil
}

type hfImport struct {
	dir  string
	opts HFOptions
	cfg  *hfConfig
	res  *HF
	// entries caches the safetensors headers read (by file path); files and indexed are
	// weightFiles' answer.
	entries map[string]map[string]ir.SafetensorsEntry
	files   []string
	indexed bool
	// embedBF16: the checkpoint stores the embedding in bf16 (Gemma's scale is rounded to it).
	embedBF16 bool
}

// fileEntries reads the tensor entries of a safetensors file of the checkpoint (once).
func (h *hfImport) fileEntries(f string) (map[string]ir.SafetensorsEntry, error) {
	if e, ok := h.entries[f]; ok {
		return e, nil
	}
	sf, err := ir.OpenSafetensors(f)
	if err != nil {
		return nil, err
	}
	sf.Close()
	if h.entries == nil {
		h.entries = map[string]map[string]ir.SafetensorsEntry{}
	}
	h.entries[f] = sf.Entries
	return sf.Entries, nil
}

// checkLayers checks num_hidden_layers against the layers the checkpoint's tensors hold.
func (h *hfImport) checkLayers(layers int) error {
	files, _, err := h.weightFiles()
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		entries, err := h.fileEntries(f)
		if err != nil {
			return err
		}
		for n := range entries {
			names = append(names, n)
		}
	}
	return checkLayerCount("num_hidden_layers", layers, names)
}

func (h *hfImport) note(format string, args ...any) {
	h.res.Notes = append(h.res.Notes, fmt.Sprintf(format, args...))
}

// hfConfig is config.json with a record of the fields read.
type hfConfig struct {
	path   string
	fields map[string]json.RawMessage
	used   map[string]bool
}

// maxJSON bounds the JSON files of a checkpoint read whole (config.json, the shard index).
const maxJSON = 64 << 20

func readHFConfig(path string) (*hfConfig, error) {
	b, err := regular.ReadFile(path, maxJSON)
	if err != nil {
		return nil, err
	}
	c := &hfConfig{path: path, used: map[string]bool{}}
	if err := json.Unmarshal(b, &c.fields); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	return c, nil
}

// has reports whether the field is present and not null (and marks it used).
func (c *hfConfig) has(k string) bool {
	v, ok := c.fields[k]
	if ok {
		c.used[k] = true
	}
	return ok && string(v) != "null"
}

func (c *hfConfig) decode(k string, dst any, what string) error {
	if err := json.Unmarshal(c.fields[k], dst); err != nil {
		return fmt.Errorf("%s: %s is %s; want %s", filepath.Base(c.path), k, c.fields[k], what)
	}
	return nil
}

// int reads a required positive integer.
func (c *hfConfig) int(k string) (int, error) {
	if !c.has(k) {
		return 0, fmt.Errorf("%s has no %s", filepath.Base(c.path), k)
	}
	return c.optInt(k, 0)
}

// optInt reads a positive integer, def when absent or null.
func (c *hfConfig) optInt(k string, def int) (int, error) {
	if !c.has(k) {
		return def, nil
	}
	var v float64
	if err := c.decode(k, &v, "an integer"); err != nil {
		return 0, err
	}
	if v != math.Trunc(v) || v < 1 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%s: %s is %v; want a positive integer", filepath.Base(c.path), k, v)
	}
	return int(v), nil
}

func (c *hfConfig) optFloat(k string, def float64) (float64, error) {
	if !c.has(k) {
		return def, nil
	}
	var v float64
	err := c.decode(k, &v, "a number")
	return v, err
}

func (c *hfConfig) optBool(k string, def bool) (bool, error) {
	if !c.has(k) {
		return def, nil
	}
	var v bool
	err := c.decode(k, &v, "true or false")
	return v, err
}

func (c *hfConfig) optString(k, def string) (string, error) {
	if !c.has(k) {
		return def, nil
	}
	var v string
	err := c.decode(k, &v, "a string")
	return v, err
}

// report lists the fields read and the ones not read, sorted.
func (c *hfConfig) report() (used, ignored []string) {
	for k := range c.fields {
		if c.used[k] {
			used = append(used, k)
		} else {
			ignored = append(ignored, k)
		}
	}
	sort.Strings(used)
	sort.Strings(ignored)
	return used, ignored
}

// architecture finds the model's class: config.json's architectures, else its model_type.
func (h *hfImport) architecture() (class, modelType string, err error) {
	c := h.cfg
	mt, err := c.optString("model_type", "")
	if err != nil {
		return "", "", err
	}
	known := func() string {
		var l []string
		for _, a := range HFArchitectures {
			l = append(l, a.Class)
		}
		return strings.Join(l, ", ")
	}
	if c.has("architectures") {
		var archs []string
		if err := c.decode("architectures", &archs, "a list of class names"); err != nil {
			return "", "", err
		}
		for _, name := range archs {
			for _, a := range HFArchitectures {
				if a.Class == name {
					if mt != "" && mt != a.ModelType {
						h.note("architectures names %s but model_type is %q: read as %s", a.Class, mt, a.Class)
					}
					return a.Class, a.ModelType, nil
				}
			}
		}
		return "", "", fmt.Errorf("architectures %v: vkc imports %s", archs, known())
	}
	for _, a := range HFArchitectures {
		if a.ModelType == mt {
			h.note("config.json has no architectures: model_type %q is %s", mt, a.Class)
			return a.Class, a.ModelType, nil
		}
	}
	if mt == "" {
		return "", "", fmt.Errorf("config.json has neither architectures nor model_type; vkc imports %s", known())
	}
	return "", "", fmt.Errorf("model_type %q: vkc imports %s", mt, known())
}

// hfNames are the transformers tensor names of a decoderLM's parameters.
var hfNames = map[string]string{
	"embed": "model.embed_tokens.weight", "layers.{i}.attn_norm": "model.layers.{i}.input_layernorm.weight",
	"layers.{i}.wq": "model.layers.{i}.self_attn.q_proj.weight", "layers.{i}.wk": "model.layers.{i}.self_attn.k_proj.weight",
	"layers.{i}.wv": "model.layers.{i}.self_attn.v_proj.weight", "layers.{i}.wo": "model.layers.{i}.self_attn.o_proj.weight",
	"layers.{i}.bq": "model.layers.{i}.self_attn.q_proj.bias", "layers.{i}.bk": "model.layers.{i}.self_attn.k_proj.bias",
	"layers.{i}.bv": "model.layers.{i}.self_attn.v_proj.bias", "layers.{i}.bo": "model.layers.{i}.self_attn.o_proj.bias",
	"layers.{i}.q_norm": "model.layers.{i}.self_attn.q_norm.weight", "layers.{i}.k_norm": "model.layers.{i}.self_attn.k_norm.weight",
	"layers.{i}.mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
	"layers.{i}.w_gate":   "model.layers.{i}.mlp.gate_proj.weight", "layers.{i}.w_up": "model.layers.{i}.mlp.up_proj.weight",
	"layers.{i}.w_down": "model.layers.{i}.mlp.down_proj.weight",
	"out_norm":          "model.norm.weight", "lm_head": "lm_head.weight",
}

func (h *hfImport) build() (*decoderLM, error) {
	var err error
	if h.cfg, err = readHFConfig(filepath.Join(h.dir, "config.json")); err != nil {
		return nil, err
	}
	c := h.cfg
	class, mt, err := h.architecture()
	if err != nil {
		return nil, err
	}
	h.res.Arch = class
	for _, k := range []string{"quantization_config"} {
		if c.has(k) {
			return nil, fmt.Errorf("config.json has %s: quantized checkpoints are not supported (import the unquantized one, or a GGUF file)", k)
		}
	}
	lm := &decoderLM{ropeMode: "half", bias: map[string]bool{}, names: maps.Clone(hfNames), slots: h.opts.Slots}
	for _, f := range []struct {
		key string
		dst *int
	}{{"vocab_size", &lm.vocab}, {"hidden_size", &lm.d}, {"intermediate_size", &lm.ffn},
		{"num_hidden_layers", &lm.layers}, {"num_attention_heads", &lm.heads}} {
		if *f.dst, err = c.int(f.key); err != nil {
			return nil, err
		}
	}
	// The checkpoint's tensors bound the layer count before anything per layer is made.
	if err := h.checkLayers(lm.layers); err != nil {
		return nil, err
	}
	if lm.kvHeads, err = c.optInt("num_key_value_heads", lm.heads); err != nil {
		return nil, err
	}
	if lm.heads%lm.kvHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", lm.heads, lm.kvHeads)
	}
	if lm.hd, err = c.optInt("head_dim", lm.d/lm.heads); err != nil {
		return nil, err
	}
	if !c.has("head_dim") && lm.d%lm.heads != 0 {
		return nil, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d and there is no head_dim", lm.d, lm.heads)
	}
	if lm.hd%2 != 0 {
		return nil, fmt.Errorf("head dimension %d is odd; RoPE needs pairs", lm.hd)
	}
	if mt != "gemma3_text" { // Gemma's activation: hfArchSpecific
		if act, err := c.optString("hidden_act", "silu"); err != nil {
			return nil, err
		} else if act != "silu" {
			return nil, fmt.Errorf("hidden_act is %q: vkc imports SwiGLU MLPs (silu)", act)
		}
	}
	if prf, err := c.optFloat("partial_rotary_factor", 1); err != nil {
		return nil, err
	} else if prf != 1 {
		return nil, fmt.Errorf("partial_rotary_factor is %v: partial rotary embeddings are not supported", prf)
	}
	if mb, err := c.optBool("mlp_bias", false); err != nil {
		return nil, err
	} else if mb {
		return nil, fmt.Errorf("mlp_bias is true: MLP biases are not supported")
	}
	if lm.eps, err = c.optFloat("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if !c.has("rms_norm_eps") {
		h.note("no rms_norm_eps: transformers' default 1e-6")
	}
	switch mt {
	case "qwen2":
		lm.bias["q"], lm.bias["k"], lm.bias["v"] = true, true, true // Qwen2Attention: q, k, v with bias, o without
	case "llama", "qwen3", "qwen3_moe", "gemma3_text":
		ab, err := c.optBool("attention_bias", false)
		if err != nil {
			return nil, err
		}
		lm.bias["q"], lm.bias["k"], lm.bias["v"], lm.bias["o"] = ab, ab, ab, ab
	}
	lm.qkNorm = mt == "qwen3" || mt == "qwen3_moe" || mt == "gemma3_text"
	if lm.tied, err = c.optBool("tie_word_embeddings", mt == "gemma3_text"); err != nil { // Gemma3TextConfig ties by default
		return nil, err
	}
	if err := h.rope(lm); err != nil {
		return nil, err
	}
	ctxLen, err := c.optInt("max_position_embeddings", 0)
	if err != nil {
		return nil, err
	}
	if lm.ctx, lm.prefill, err = h.context(ctxLen); err != nil {
		return nil, err
	}
	if err := h.slidingWindow(lm, mt); err != nil {
		return nil, err
	}
	if err := h.archSpecific(lm, mt); err != nil {
		return nil, err
	}
	if err := lm.checkScalars(dimKeys{"eps": "rms_norm_eps", "theta": "rope_theta"}); err != nil {
		return nil, err
	}
	if err := h.weights(lm); err != nil {
		return nil, err
	}
	h.embedScaleDType(lm)
	pn, err := lm.setPrecision(h.opts.Precision)
	if err != nil {
		return nil, err
	}
	h.note("%s", pn)
	if err := h.tokenizer(lm); err != nil {
		return nil, err
	}
	name := filepath.Base(filepath.Clean(h.dir))
	if abs, err := filepath.Abs(h.dir); err == nil {
		name = filepath.Base(abs)
	}
	lm.name = name
	lm.header = append([]string{
		fmt.Sprintf("Imported by vkc import from the Hugging Face checkpoint %s (%s).", name, class),
		"Weights by their transformers names; Q and K as transformers stores them (rotate-half RoPE: mode=half).",
	}, lm.header...) // and what archSpecific added
	h.note("context %d, prefill up to %d tokens, %d layers, %d heads over %d KV heads of %d", lm.ctx, lm.prefill, lm.layers, lm.heads, lm.kvHeads, lm.hd)
	return lm, nil
}

// rope reads rope_theta and the RoPE scaling: transformers 4's rope_theta and rope_scaling
// ({"rope_type" or "type": ..., "factor": ...}), or transformers 5's rope_parameters (the same
// keys with rope_theta inside).
func (h *hfImport) rope(lm *decoderLM) error {
	c := h.cfg
	params := map[string]any{}
	key := ""
	for _, k := range []string{"rope_parameters", "rope_scaling"} {
		if c.has(k) {
			if key != "" {
				return fmt.Errorf("config.json has both rope_parameters and rope_scaling")
			}
			if err := c.decode(k, &params, "an object"); err != nil {
				return err
			}
			key = k
		}
	}
	theta, err := c.optFloat("rope_theta", 0)
	if err != nil {
		return err
	}
	if t, ok := params["rope_theta"]; ok {
		tf, ok := t.(float64)
		if !ok || theta != 0 && theta != tf {
			return fmt.Errorf("%s.rope_theta is %v and rope_theta %v", key, t, theta)
		}
		theta = tf
	}
	if theta == 0 {
		theta = 10000
		h.note("no rope_theta: transformers' default 10000")
	}
	if !(theta > 0) {
		return fmt.Errorf("rope_theta is %v", theta)
	}
	lm.theta = theta
	typ, _ := params["rope_type"].(string)
	if typ == "" {
		typ, _ = params["type"].(string) // transformers 4's older spelling
	}
	num := func(k string) (float64, error) {
		v, ok := params[k].(float64)
		if !ok {
			return 0, fmt.Errorf("%s of type %s has no %s", key, typ, k)
		}
		return v, nil
	}
	switch typ {
	case "", "default":
		lm.scaling = ir.RopeScaling{Type: ir.RopeScalingNone, Factor: 1}
	case "linear":
		f, err := num("factor")
		if err != nil {
			return err
		}
		lm.scaling = ir.RopeScaling{Type: ir.RopeScalingLinear, Factor: f}
	case "llama3":
		s := ir.RopeScaling{Type: ir.RopeScalingLlama3}
		var ctx float64
		for _, p := range []struct {
			k   string
			dst *float64
		}{{"factor", &s.Factor}, {"low_freq_factor", &s.LowFreqFactor}, {"high_freq_factor", &s.HighFreqFactor}, {"original_max_position_embeddings", &ctx}} {
			if *p.dst, err = num(p.k); err != nil {
				return err
			}
		}
		if ctx != math.Trunc(ctx) || ctx < 1 {
			return fmt.Errorf("%s.original_max_position_embeddings is %v", key, ctx)
		}
		s.OriginalCtx = int(ctx)
		lm.scaling = s
	default:
		return fmt.Errorf("%s.rope_type is %q: vkc supports default, linear and llama3 RoPE", key, typ)
	}
	// transformers' attention_factor multiplies cos and sin; it is 1 for these types unless set.
	if af, ok := params["attention_factor"]; ok && af != nil && af != 1.0 {
		return fmt.Errorf("%s.attention_factor is %v: RoPE attention factors are not supported", key, af)
	}
	if _, err := ir.RopeScalingOf(lm.scaling.Attrs()); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if lm.scaling.Type != ir.RopeScalingNone {
		h.note("RoPE scaling %s, factor %v", lm.scaling.Type, lm.scaling.Factor)
	}
	return nil
}

// context chooses the KV cache rows and the prefill capacity.
func (h *hfImport) context(ctxLen int) (ctx, seq int, err error) {
	ctx = h.opts.Ctx
	switch {
	case ctx < 0:
		return 0, 0, fmt.Errorf("context %d is negative", ctx)
	case ctx == 0 && ctxLen == 0:
		ctx = MaxCtx
		h.note("config.json gives no max_position_embeddings: context %d", ctx)
	case ctx == 0 && ctxLen > MaxCtx:
		ctx = MaxCtx
		h.note("context %d of the model's %d (capped at %d: KV caches are f32; --ctx sets it)", ctx, ctxLen, MaxCtx)
	case ctx == 0:
		ctx = ctxLen
	case ctxLen > 0 && ctx > ctxLen:
		h.note("context %d is more than the model's %d; positions past it were not trained", ctx, ctxLen)
	}
	seq = h.opts.Prefill
	if seq == 0 {
		seq = min(DefaultPrefill, ctx)
	}
	if seq < 0 || seq > ctx {
		return 0, 0, fmt.Errorf("prefill length %d is not within the context 1..%d", seq, ctx)
	}
	return ctx, seq, nil
}

// slidingWindow sets the attention window of each layer: Mistral's sliding_window on every
// layer; Qwen2's and Qwen3's only with use_sliding_window, on the layers layer_types names
// sliding_attention or else from max_window_layers on (transformers' Qwen2Config). A window
// that covers the whole context changes nothing and is left out.
func (h *hfImport) slidingWindow(lm *decoderLM, mt string) error {
	c := h.cfg
	lm.window = make([]int, lm.layers)
	if mt == "llama" {
		return nil // LlamaConfig has no sliding window
	}
	w, err := c.optInt("sliding_window", 0)
	if err != nil {
		return err
	}
	if w == 0 {
		return nil
	}
	sliding := make([]bool, lm.layers)
	switch mt {
	case "mistral", "phi3":
		for i := range sliding {
			sliding[i] = true
		}
	case "qwen2", "qwen3":
		use, err := c.optBool("use_sliding_window", false)
		if err != nil {
			return err
		}
		if !use {
			h.note("use_sliding_window is false: sliding_window %d is not used (full attention, as transformers)", w)
			return nil
		}
		if c.has("layer_types") {
			var types []string
			if err := c.decode("layer_types", &types, "a list of attention types"); err != nil {
				return err
			}
			if len(types) != lm.layers {
				return fmt.Errorf("layer_types has %d entries for %d layers", len(types), lm.layers)
			}
			for i, t := range types {
				switch t {
				case "sliding_attention":
					sliding[i] = true
				case "full_attention":
				default:
					return fmt.Errorf("layer_types[%d] is %q: want full_attention or sliding_attention", i, t)
				}
			}
		} else {
			mwl, err := c.optInt("max_window_layers", 28)
			if err != nil {
				return err
			}
			for i := mwl; i < lm.layers; i++ {
				sliding[i] = true
			}
		}
	}
	if w >= lm.ctx {
		h.note("sliding_window %d covers the whole context of %d: full attention", w, lm.ctx)
		return nil
	}
	n := 0
	for i, s := range sliding {
		if s {
			lm.window[i] = w
			n++
		}
	}
	if n > 0 {
		h.note("sliding-window attention over the last %d positions in %d of %d layers", w, n, lm.layers)
	}
	return nil
}

// hfTensor is a tensor of the checkpoint: its file and dtype.
type hfTensor struct {
	file  string
	dtype ir.DType
	bad   string // the file's dtype name when vkc cannot read it
	shape ir.Shape
}

// weights finds the safetensors files, checks that they hold the model's tensors and only them,
// and names the files and dtypes in lm.
func (h *hfImport) weights(lm *decoderLM) error {
	files, indexed, err := h.weightFiles()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range lm.tensorNames() {
		want[n] = true
	}
	tensors := map[string]hfTensor{}
	var used []string
	for _, f := range files {
		entries, err := h.fileEntries(f)
		if err != nil {
			return err
		}
		ours := 0
		for name := range entries {
			if want[name] {
				ours++
			}
		}
		if ours == 0 && !indexed {
			h.note("%s holds none of the model's tensors (%d others): not read", filepath.Base(f), len(entries))
			continue
		}
		used = append(used, f)
		for name, e := range entries {
			if prev, dup := tensors[name]; dup {
				return fmt.Errorf("tensor %s is in both %s and %s", name, filepath.Base(prev.file), filepath.Base(f))
			}
			tensors[name] = hfTensor{file: f, dtype: e.Type.DType, bad: e.Unsupported, shape: e.Type.Shape}
		}
	}
	if len(used) == 0 {
		return fmt.Errorf("no safetensors file in %s holds the model's tensors (e.g. %s)", h.dir, hfNames["embed"])
	}
	var missing, foreign []string
	for n := range want {
		if _, ok := tensors[n]; !ok {
			missing = append(missing, n)
		}
	}
	bf16, bf16Vec := 0, 0
	for n, t := range tensors {
		if want[n] {
			if t.dtype == ir.BF16 && len(t.shape) == 2 && !strings.Contains(n, ".experts.") {
				bf16++
			} else if t.dtype == ir.BF16 {
				bf16Vec++
			}
			continue
		}
		switch {
		case n == "lm_head.weight" && lm.tied:
			h.note("lm_head.weight is not read: tie_word_embeddings is true, so the output projection is model.embed_tokens.weight (as transformers ties them)")
		case strings.HasSuffix(n, ".self_attn.rotary_emb.inv_freq"):
			if err := h.checkInvFreq(lm, n, t); err != nil {
				return err
			}
		default:
			foreign = append(foreign, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		hint := ""
		if slices.Contains(missing, "lm_head.weight") && !lm.tied {
			hint = " (tie_word_embeddings is false, so the output projection lm_head.weight must be stored)"
		}
		return fmt.Errorf("the checkpoint lacks %d of the model's tensors: %s%s", len(missing), listSome(missing), hint)
	}
	if len(foreign) > 0 {
		sort.Strings(foreign)
		return fmt.Errorf("%d safetensors tensors are not the %s model's: %s", len(foreign), h.res.Arch, listSome(foreign))
	}
	keys := dimKeys{"vocab": "vocab_size", "d": "hidden_size", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
		"hd": "head_dim", "ffn": "intermediate_size"}
	if !h.cfg.has("head_dim") {
		keys["hd"] = "hidden_size / num_attention_heads"
	}
	if err := lm.checkShapes(func(name string) ([]int, bool) {
		t, ok := tensors[name]
		return t.shape, ok && t.bad == ""
	}, keys); err != nil {
		return err
	}
	if bf16 > 0 {
		h.note("%d bf16 matrices stay bf16 (kernels read them as 16-bit words, widened exactly)", bf16)
	}
	if bf16Vec > 0 {
		h.note("%d bf16 vectors (norm weights, biases) and experts' matrices are loaded as f32 (exact)", bf16Vec)
	}
	ydir, err := h.yamlDir()
	if err != nil {
		return err
	}
	for _, f := range used {
		lm.files = append(lm.files, relTo(ydir, f))
	}
	h.res.Files = used
	lm.dtype = func(name string) (string, error) {
		t := tensors[name]
		switch {
		case t.bad != "":
			return "", fmt.Errorf("tensor %s in %s has dtype %s, which vkc does not read", name, filepath.Base(t.file), t.bad)
		case t.dtype == ir.BF16 && len(t.shape) == 2 && !strings.Contains(name, ".experts."):
			return "bf16", nil // matrices and the embedding stay bf16 (the experts': f32, below)
		case t.dtype == ir.BF16:
			// Norm weights and biases, and the experts' matrices (the MoE kernels read f32,
			// f16 and block formats): f32 holds every bf16 value.
			return "f32", nil
		case t.dtype == ir.F32 || t.dtype == ir.F16:
			return t.dtype.String(), nil
		}
		return "", fmt.Errorf("tensor %s in %s is %s; model weights are f32, f16 or bf16", name, filepath.Base(t.file), t.dtype)
	}
	emb := tensors[hfNames["embed"]]
	lm.castEmbed = emb.dtype == ir.F16 || emb.dtype == ir.BF16
	h.embedBF16 = emb.dtype == ir.BF16
	return nil
}

// weightFiles lists the checkpoint's safetensors files: the shards model.safetensors.index.json
// lists (indexed), else model.safetensors, else every *.safetensors in the folder. Each must be
// a regular file (a shard may be a symbolic link, as in the Hugging Face cache, to a regular
// file anywhere); the list is made once.
func (h *hfImport) weightFiles() (files []string, indexed bool, err error) {
	if h.files == nil {
		if h.files, h.indexed, err = h.listWeightFiles(); err != nil {
			return nil, false, err
		}
		for _, f := range h.files {
			if err := regular.Check(f); err != nil {
				return nil, false, err
			}
		}
	}
	return h.files, h.indexed, nil
}

func (h *hfImport) listWeightFiles() (files []string, indexed bool, err error) {
	idx := filepath.Join(h.dir, "model.safetensors.index.json")
	if b, err := regular.ReadFile(idx, maxJSON); err == nil {
		var doc struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &doc); err != nil || len(doc.WeightMap) == 0 {
			return nil, false, fmt.Errorf("%s: want {\"weight_map\": {tensor: shard file}}", idx)
		}
		seen := map[string]bool{}
		for _, f := range doc.WeightMap {
			if f != filepath.Base(f) {
				return nil, false, fmt.Errorf("%s: shard %q is not a file name in the folder", idx, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, filepath.Join(h.dir, f))
			}
		}
		sort.Strings(files)
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				return nil, false, fmt.Errorf("%s lists %s: %w", filepath.Base(idx), filepath.Base(f), err)
			}
		}
		h.note("%d shards listed by %s", len(files), filepath.Base(idx))
		return files, true, nil
	} else if !os.IsNotExist(err) {
		return nil, false, err
	}
	single := filepath.Join(h.dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return []string{single}, true, nil
	}
	all, err := filepath.Glob(filepath.Join(h.dir, "*.safetensors"))
	if err != nil {
		return nil, false, err
	}
	if len(all) == 0 {
		return nil, false, fmt.Errorf("%s has no safetensors weights (model.safetensors, model.safetensors.index.json or *.safetensors); PyTorch .bin checkpoints are not read", h.dir)
	}
	sort.Strings(all)
	return all, false, nil
}

// checkInvFreq accepts the rotary_emb.inv_freq buffers older checkpoints saved: they are
// recomputed from rope_theta, and must agree with it.
func (h *hfImport) checkInvFreq(lm *decoderLM, name string, t hfTensor) error {
	sf, err := ir.OpenSafetensors(t.file)
	if err != nil {
		return err
	}
	defer sf.Close()
	x, err := sf.Read(name)
	if err != nil {
		return err
	}
	want := ir.RopeInvFreq(lm.theta, lm.hd, lm.scaling)
	if x.NumElements() != len(want) {
		return fmt.Errorf("%s has %d frequencies; a head of %d has %d", name, x.NumElements(), lm.hd, len(want))
	}
	for i, w := range want {
		if math.Abs(x.Float64(i)-w) > 1e-5*w {
			return fmt.Errorf("%s[%d] is %g, but rope_theta %v gives %g: the buffer disagrees with the config", name, i, x.Float64(i), lm.theta, w)
		}
	}
	if !strings.HasPrefix(name, "model.layers.0.") {
		return nil
	}
	h.note("rotary_emb.inv_freq buffers agree with rope_theta and are not read (the frequencies are recomputed)")
	return nil
}

// tokenizer names the folder's tokenizer.json in the model.yaml.
func (h *hfImport) tokenizer(lm *decoderLM) error {
	tj := filepath.Join(h.dir, "tokenizer.json")
	if _, err := os.Stat(tj); err != nil {
		if _, err := os.Stat(filepath.Join(h.dir, "tokenizer.model")); err == nil {
			h.note("tokenizer.model (SentencePiece) is not read; only tokenizer.json is: the model has no tokenizer")
		}
		return nil
	}
	// The tokenizer files are read later, whole: refuse a FIFO or device among them now.
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		if p := filepath.Join(h.dir, f); fileExists(p) {
			if err := regular.Check(p); err != nil {
				return err
			}
		}
	}
	ydir, err := h.yamlDir()
	if err != nil {
		return err
	}
	lm.tokenizer = relTo(ydir, tj)
	h.res.Tokenizer = tj
	cfg := ""
	if _, err := os.Stat(filepath.Join(h.dir, "tokenizer_config.json")); err == nil {
		cfg = " with tokenizer_config.json"
	}
	h.note("tokenizer.json%s: a compiled plan records it", cfg)
	if h.cfg.has("eos_token_id") {
		// An id or a list (Llama 3: [128001, 128008, 128009]); the tokenizer reads it from
		// config.json (and generation_config.json) and generation stops at each.
		var ids []int
		raw := h.cfg.fields["eos_token_id"]
		if err := json.Unmarshal(raw, &ids); err != nil {
			var one int
			if err := h.cfg.decode("eos_token_id", &one, "a token id or a list of them"); err != nil {
				return err
			}
			ids = []int{one}
		}
		h.note("eos_token_id %v: generation stops at each (the plan's tokenizer records them)", ids)
	}
	return nil
}

func (h *hfImport) yamlDir() (string, error) {
	d := h.opts.YAMLDir
	if d == "" {
		d = h.dir
	}
	return filepath.Abs(d)
}

// relTo names path relative to dir when it can, else absolutely.
func relTo(dir, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(dir, abs); err == nil {
		return filepath.ToSlash(rel)
	}
	return abs
}

// listSome lists up to 8 names and how many more.
func listSome(names []string) string {
	if len(names) <= 8 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:8], ", ") + " and " + strconv.Itoa(len(names)-8) + " more"
}

// fileExists reports whether something (of any kind) is at path.
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
