package importer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/ir"
)

// decoderLM is a Llama-family decoder-only language model (Llama 2 and 3, Mistral, Qwen2,
// Qwen3, SmolLM2, TinyLlama; with the extensions of decoder_arch.go, Gemma 3, Phi-3 and
// mixtures of experts) as the GGUF and Hugging Face front ends describe it: the one place
// that writes such a model's model.yaml, so that both importers compute the same graph.
//
// The graph, per layer: RMSNorm; q, k, v projections (with biases where the model has them);
// per-head RMSNorm of q and k (Qwen3); RoPE; the KV cache writes; grouped-query causal
// attention (optionally over a sliding window); the output projection; the residual; RMSNorm;
// SwiGLU MLP; the residual. Then RMSNorm and the output projection (tied to the embedding or
// not). The functions follow the examples' conventions, inputs tokens (i32[seq]) and pos (i32
// scalar), state k_cache.{i} and v_cache.{i} ([ctx, kv_heads, hd], in the KV cache's dtype: f16
// by default, see Precision):
//   - prefill (seq a run-time length 1..prefill): what generation runs on a prompt, the logits
//     of its last row only (f32[1, vocab]): the LM head (and the argmax and top-k a compile adds)
//     run on one row, the rows before it picked out by a slice of the run's last row;
//   - decode (seq 1): the same body, logits f32[1, vocab];
//   - score (seq 1..prefill): every row's logits (f32[seq, vocab]), for perplexity and for
//     comparing with other implementations row by row.
type decoderLM struct {
	header []string // comment lines at the top of the model.yaml
	name   string

	vocab, d, heads, kvHeads, hd, ffn, layers, ctx, prefill int
	// slots > 0 gives the caches a slot dimension, [slots, ctx, kv_heads, hd], and the model
	// one function, batch, instead of prefill, decode and score (see batchFunction).
	slots int

	eps, theta float64
	ropeMode   string // "half" (rotate-half) or "interleaved"
	scaling    ir.RopeScaling
	qkNorm     bool            // per-head RMSNorm of q and k before RoPE (Qwen3)
	bias       map[string]bool // "q", "k", "v", "o": the projection has a bias
	tied       bool            // the output projection is the embedding table
	window     []int           // per layer: the attention window, 0 for full attention

	// files are the weight files as the model.yaml names them (one, or the shards of a
	// checkpoint); names maps each parameter template (decoderParams) to its tensor name
	// template in them.
	files []string
	names map[string]string
	// dtype gives the dtype a tensor of the files is declared with (model.yaml's spelling), or
	// an error naming it; castEmbed says the embedding rows come out in 16 bits and are cast to
	// the f32 activations.
	dtype     func(tensor string) (string, error)
	castEmbed bool
	// tokenizer is the tokenizer file the model.yaml names (relative to it), or "".
	tokenizer string

	// arch holds the architecture extensions (decoder_arch.go: Gemma, Phi-3, mixtures of
	// experts); its zero value is the graph above.
	arch archLM

	// act is the dtype the prefill's (and score's) matrix products read their activations in
	// (f32 or f16) and kv the KV cache's dtype: setPrecision (precision.go) chooses them; the
	// zero values mean f32.
	act, kv ir.DType
}

// lmParam is one parameter of the decoder: its name template, its shape in model.yaml dims,
// whether it is per layer, and when the model has it.
type lmParam struct {
	name     string
	shape    []string
	perLayer bool
}

// params lists the parameters the model has, in declaration order.
func (m *decoderLM) params() []lmParam {
	ps := []lmParam{
		{"embed", []string{"vocab", "d"}, false},
		{"layers.{i}.attn_norm", []string{"d"}, true},
	}
	if m.arch.fusedQKV {
		ps = append(ps, lmParam{"layers.{i}.wqkv", []string{"(heads+2*kv_heads)*hd", "d"}, true})
	} else {
		ps = append(ps,
			lmParam{"layers.{i}.wq", []string{"heads*hd", "d"}, true},
			lmParam{"layers.{i}.wk", []string{"kv_heads*hd", "d"}, true},
			lmParam{"layers.{i}.wv", []string{"kv_heads*hd", "d"}, true})
	}
	for _, b := range []struct{ p, out string }{{"q", "heads*hd"}, {"k", "kv_heads*hd"}, {"v", "kv_heads*hd"}, {"o", "d"}} {
		if m.bias[b.p] {
			ps = append(ps, lmParam{"layers.{i}.b" + b.p, []string{b.out}, true})
		}
	}
	if m.qkNorm {
		ps = append(ps, lmParam{"layers.{i}.q_norm", []string{"hd"}, true}, lmParam{"layers.{i}.k_norm", []string{"hd"}, true})
	}
	ps = append(ps, lmParam{"layers.{i}.wo", []string{"d", "heads*hd"}, true})
	if m.arch.postNorms {
		ps = append(ps, lmParam{"layers.{i}.post_attn_norm", []string{"d"}, true})
	}
	ps = append(ps, lmParam{"layers.{i}.mlp_norm", []string{"d"}, true})
	ps = append(ps, m.arch.ffnParams()...)
	if m.arch.postNorms {
		ps = append(ps, lmParam{"layers.{i}.post_mlp_norm", []string{"d"}, true})
	}
	ps = append(ps, lmParam{"out_norm", []string{"d"}, false})
	if !m.tied {
		ps = append(ps, lmParam{"lm_head", []string{"vocab", "d"}, false})
	}
	return ps
}

// tensorNames returns every tensor name of the files the model reads (templates expanded).
func (m *decoderLM) tensorNames() []string {
	var out []string
	for _, p := range m.params() {
		n := 1
		if p.perLayer {
			n = m.layers
		}
		for i := range n {
			name := strings.ReplaceAll(m.names[p.name], "{i}", strconv.Itoa(i))
			out = append(out, m.arch.stacked(name)...)
		}
	}
	return out
}

// yaml writes the model.yaml.
func (m *decoderLM) yaml() ([]byte, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	for _, h := range m.header {
		w("# %s\n", h)
	}
	w("model: %s\n", yamlString(m.name))
	w("dims:\n  vocab: %d\n  d: %d\n  heads: %d\n  kv_heads: %d\n  hd: %d\n  ffn: %d\n  layers: %d\n  ctx: %d\n",
		m.vocab, m.d, m.heads, m.kvHeads, m.hd, m.ffn, m.layers, m.ctx)
	m.arch.dims(w)
	if m.slots > 0 {
		w("  slots: %d\n", m.slots)
	}
	if m.tokenizer != "" {
		w("tokenizer: %s\n", yamlString(m.tokenizer))
	}
	w("\nweights:\n")
	if len(m.files) == 1 {
		w("  file: %s\n", yamlString(m.files[0]))
	} else {
		w("  files:\n")
		for _, f := range m.files {
			w("    - %s\n", yamlString(f))
		}
	}
	w("  names:\n")
	ps := m.params()
	for _, p := range ps {
		if n := m.names[p.name]; strings.Contains(n, "{j}") {
			w("    %s: {stack: %s}\n", p.name, strconv.Quote(n)) // one tensor per expert
			continue
		}
		w("    %s: %s\n", p.name, yamlName(m.names[p.name]))
	}
	w("\nparams:\n")
	for _, p := range ps {
		if err := m.declare(&b, p); err != nil {
			return nil, err
		}
	}
	kv := ""
	if m.kv != 0 && m.kv != ir.F32 {
		kv = m.kv.String()
	}
	if m.slots > 0 {
		m.batchFunction(&b, kv)
		return []byte(b.String()), nil
	}
	w("\nstate:\n  k_cache.{i}: %s[ctx, kv_heads, hd]\n  v_cache.{i}: %s[ctx, kv_heads, hd]\n", kv, kv)
	w("\nfunctions:\n")
	act := m.act
	if act == 0 {
		act = ir.F32
	}
	var blocks []string
	for fi, fn := range []struct {
		name, rows string
		seq        int
	}{{"prefill", "1", m.prefill}, {"decode", "seq", 1}, {"score", "seq", m.prefill}} {
		dims := fmt.Sprint(fn.seq)
		if fn.seq > 1 {
			dims = fmt.Sprintf("1..%d", fn.seq) // a run-time length: a prompt of any length up to it
		}
		w("  %s:\n    dims: {seq: %s}\n    inputs:\n      tokens: i32[seq]\n      pos: i32[]\n    outputs:\n      logits: f32[%s, vocab]\n", fn.name, dims, fn.rows)
		switch {
		case fi == 0:
			if act != ir.F32 {
				w("    # the matrix products read %s activations (converted where they are produced)\n", act)
			}
			w("    body: &body\n")
			blocks = m.body(&b, true, act, "layers")
		case fi == 1 && act != ir.F32:
			// Decode's matrix-vector products read f32 activations: a body of its own.
			w("    body:\n")
			m.body(&b, true, ir.F32, "decode_layers")
		case fi == 1:
			w("    body: *body\n") // the last row of one row is the row
		default:
			// Every row's logits: prefill's layers (its repeat blocks by their anchors), then
			// the LM head on every row.
			w("    body:\n")
			m.prologue(&b)
			for _, a := range blocks {
				w("      - *%s\n", a)
			}
			m.head(&b, false)
		}
	}
	return []byte(b.String()), nil
}

// prologue writes the body's first statements: the embedding (scaled where the architecture
// scales it) and the KV length.
func (m *decoderLM) prologue(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	emb := "embedding(embed, tokens)"
	if m.castEmbed {
		// 16-bit table rows; the activations are f32.
		emb = "cast(embedding(embed, tokens), to=f32)"
	}
	if s := m.arch.embedScale; s != 0 {
		w("      # the embedding rows scaled by %s\n", m.arch.embedScaleWhy)
		emb = fmt.Sprintf("mul(%s, %s)", emb, fmtFloat(s))
	}
	w("      - x = %s\n", emb)
	if m.slots == 0 {
		w("      - kv_len = add(pos, seq)\n")
	}
}

// norm is an RMSNorm of x by the weight parameter name (as the architecture uses its weights).
func (m *decoderLM) norm(x, name string) string {
	return fmt.Sprintf("rmsnorm(%s, %s, eps=%s)", x, m.arch.normWeight(name), fmtFloat(m.eps))
}

// head writes the final norm and the LM head: of the last row only (ir.LastRows: a slice the
// run's length places) when last, else of every row.
func (m *decoderLM) head(b *strings.Builder, last bool) {
	head := "lm_head"
	if m.tied {
		head = "embed"
	}
	x := "x"
	if last {
		fmt.Fprintf(b, "      # the last row: generation needs its logits only\n")
		x = "slice(x, axis=0, start=-1, end=seq)"
	}
	logits := fmt.Sprintf("linear(%s, %s)", m.norm(x, "out_norm"), head)
	if c := m.arch.finalSoftcap; c > 0 {
		fmt.Fprintf(b, "      # logits soft-capped at %s: cap·tanh(logits/cap)\n", fmtFloat(c))
		logits = fmt.Sprintf("mul(tanh(mul(%s, %s)), %s)", logits, fmtFloat(1/c), fmtFloat(c))
	}
	fmt.Fprintf(b, "      - logits = %s\n", logits)
}

// body writes the prefill body (decode shares it when act is f32), with the LM head of the last
// row when last, and returns the YAML anchors of its repeat blocks, named anchor0, … (score's
// body aliases prefill's). Its matrix products read activations of dtype act: with f16, the
// norms' results are cast to f16 where they are produced, the attention and SwiGLU results are
// f16 already (their operands are), and the products that feed the f32 residual stream are cast
// back; the LM head reads f32.
func (m *decoderLM) body(b *strings.Builder, last bool, act ir.DType, anchor string) []string {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	// in16 converts a norm's result to the products' activations; out32 brings a product's
	// result back to the residual stream.
	in16, out32 := func(x string) string { return x }, func(x string) string { return x }
	if act != ir.F32 {
		in16 = func(x string) string { return fmt.Sprintf("cast(%s, to=%s)", x, act) }
		out32 = func(x string) string { return fmt.Sprintf("cast(%s, to=f32)", x) }
	}
	m.prologue(b)
	var anchors []string
	lin := func(x, wname, bname string) string {
		if m.bias[bname] {
			return fmt.Sprintf("linear(%s, layers.{i}.%s, layers.{i}.b%s)", x, wname, bname)
		}
		return fmt.Sprintf("linear(%s, layers.{i}.%s)", x, wname)
	}
	norm := m.norm
	// Consecutive layers with the same attention window and RoPE share one repeat block.
	for lo := 0; lo < m.layers; {
		hi := lo + 1
		for hi < m.layers && m.windowOf(hi) == m.windowOf(lo) && m.ropeOf(hi) == m.ropeOf(lo) {
			hi++
		}
		from, to := strconv.Itoa(lo), strconv.Itoa(hi)
		if hi == m.layers {
			to = "layers"
		}
		win := ""
		if wn := m.windowOf(lo); wn > 0 {
			win = fmt.Sprintf(", window=%d", wn)
			w("      # layers %d..%d: sliding-window attention over the last %d positions\n", lo, hi-1, wn)
		}
		rope := m.ropeOf(lo)
		anchors = append(anchors, fmt.Sprintf("%s%d", anchor, lo))
		w("      - &%s\n        repeat i in %s..%s:\n", anchors[len(anchors)-1], from, to)
		w("        - h = %s\n", in16(norm("x", "layers.{i}.attn_norm")))
		q := fmt.Sprintf("reshape(%s, shape=[seq, heads, hd])", lin("h", "wq", "q"))
		k := fmt.Sprintf("reshape(%s, shape=[seq, kv_heads, hd])", lin("h", "wk", "k"))
		v := fmt.Sprintf("reshape(%s, shape=[seq, kv_heads, hd])", lin("h", "wv", "v"))
		if m.arch.fusedQKV {
			// One projection whose output rows are q, then k, then v (its columns sliced).
			w("        - qkv = linear(h, layers.{i}.wqkv)\n")
			q = "reshape(slice(qkv, axis=-1, start=0, end=heads*hd), shape=[seq, heads, hd])"
			k = "reshape(slice(qkv, axis=-1, start=heads*hd, end=(heads+kv_heads)*hd), shape=[seq, kv_heads, hd])"
			v = "reshape(slice(qkv, axis=-1, start=(heads+kv_heads)*hd, end=(heads+2*kv_heads)*hd), shape=[seq, kv_heads, hd])"
		}
		if m.qkNorm {
			w("        # per-head RMSNorm of q and k, then RoPE\n")
			w("        - q = %s\n", norm(q, "layers.{i}.q_norm"))
			w("        - k = %s\n", norm(k, "layers.{i}.k_norm"))
			q, k = "q", "k"
		}
		if m.slots > 0 {
			// Each row at its own position pos[r] in its own slot slot[r].
			w("        - q = rope_rows(%s, pos, %s)\n", q, rope)
			w("        - k = rope_rows(%s, pos, %s)\n", k, rope)
			w("        - k_cache.{i} <- cache_scatter(k_cache.{i}, k, slot, pos)\n")
			w("        - v_cache.{i} <- cache_scatter(v_cache.{i}, %s, slot, pos)\n", v)
			w("        - a = attention_rows(q, k_cache.{i}, v_cache.{i}, slot, pos, scale=%s%s)\n", m.arch.attnScaleExpr(), win)
		} else {
			w("        - q = rope(%s, pos, %s)\n", q, rope)
			w("        - k = rope(%s, pos, %s)\n", k, rope)
			w("        - k_cache.{i} <- cache_write(k_cache.{i}, k, pos)\n")
			w("        - v_cache.{i} <- cache_write(v_cache.{i}, %s, pos)\n", v)
			w("        - a = attention(q, k_cache.{i}, v_cache.{i}, kv_len, scale=%s, causal=true%s)\n", m.arch.attnScaleExpr(), win)
		}
		o := lin("reshape(a, shape=[seq, heads*hd])", "wo", "o")
		if m.arch.postNorms {
			o = norm(o, "layers.{i}.post_attn_norm")
		}
		w("        - x = add(x, %s)\n", out32(o))
		w("        - h = %s\n", in16(norm("x", "layers.{i}.mlp_norm")))
		f := m.arch.ffn(w)
		if m.arch.postNorms {
			f = norm(f, "layers.{i}.post_mlp_norm")
		}
		w("        - x = add(x, %s)\n", out32(f))
		lo = hi
	}
	m.head(b, last)
	return anchors
}

// ropeOf is layer's rope attributes: theta, mode and the frequency scaling (a layer may have a
// base and scaling of its own: Gemma's local layers).
func (m *decoderLM) ropeOf(layer int) string {
	theta, scaling := m.theta, m.scaling
	if r, ok := m.arch.layerRope[layer]; ok {
		theta, scaling = r.theta, r.scaling
	}
	rope := fmt.Sprintf("theta=%s, mode=%s", fmtFloat(theta), m.ropeMode)
	if s := scaling; s.Type == ir.RopeScalingLinear {
		rope += fmt.Sprintf(", scaling=linear, factor=%s", fmtFloat(s.Factor))
	} else if s.Type == ir.RopeScalingLlama3 {
		rope += fmt.Sprintf(", scaling=llama3, factor=%s, low_freq_factor=%s, high_freq_factor=%s, original_ctx=%d",
			fmtFloat(s.Factor), fmtFloat(s.LowFreqFactor), fmtFloat(s.HighFreqFactor), s.OriginalCtx)
	}
	return rope
}

// maxSlots bounds GGUFOptions.Slots and HFOptions.Slots: the sequences one plan's caches hold.
const maxSlots = 1024

// batchFunction writes the state and functions of a model with slots: caches of slots
// sequences, and one function, batch, whose rows each belong to a sequence (slot) at a position.
// A run of n rows (a run-time length up to the larger of the prefill length and the slots)
// advances several sequences one token each (a batched decode step), runs a chunk of one
// sequence's prompt (rows of one slot at consecutive positions), or both at once; a row sees the
// keys and values of its sequence up to its position, the run's earlier rows included. Every
// row's logits are returned (each row may be a sequence's last). The caches are of dtype kv
// ("" for f32: --kv); the activations are f32.
func (m *decoderLM) batchFunction(b *strings.Builder, kv string) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("\nstate:\n  k_cache.{i}: %s[slots, ctx, kv_heads, hd]\n  v_cache.{i}: %s[slots, ctx, kv_heads, hd]\n", kv, kv)
	w("\nfunctions:\n  batch:\n    dims: {seq: 1..%d}\n", max(m.prefill, m.slots, 2))
	w("    inputs:\n      tokens: i32[seq]\n      pos: i32[seq]      # each row's position in its sequence\n")
	w("      slot: i32[seq]     # each row's sequence: its KV cache slot\n")
	w("    outputs:\n      logits: f32[seq, vocab]\n    body:\n")
	m.body(b, false, ir.F32, "layers")
}

func (m *decoderLM) windowOf(layer int) int {
	if layer < len(m.window) {
		return m.window[layer]
	}
	return 0
}

// declare writes the parameter declarations of p: one templated line when every layer's tensor
// has the same dtype, else one line per layer (llama.cpp's K-quant mixes give some layers'
// attn_v and ffn_down more bits).
func (m *decoderLM) declare(b *strings.Builder, p lmParam) error {
	n := 1
	if p.perLayer {
		n = m.layers
	}
	types := make([]string, n)
	for i := range types {
		name := strings.ReplaceAll(strings.ReplaceAll(m.names[p.name], "{i}", strconv.Itoa(i)), "{j}", "0")
		t, err := m.dtype(name)
		if err != nil {
			return err
		}
		types[i] = t
	}
	same := true
	for _, s := range types {
		same = same && s == types[0]
	}
	shape := "[" + strings.Join(p.shape, ", ") + "]"
	dt := func(s string) string {
		if s == "f32" {
			return shape
		}
		return s + shape
	}
	if same {
		fmt.Fprintf(b, "  %s: %s\n", p.name, dt(types[0]))
		return nil
	}
	for i, s := range types {
		fmt.Fprintf(b, "  %s: %s\n", strings.ReplaceAll(p.name, "{i}", strconv.Itoa(i)), dt(s))
	}
	return nil
}

// yamlName writes a tensor name template for YAML: plain when it is made of word characters,
// dots, slashes and {i} templates (a plain scalar may hold braces after its first character),
// else quoted.
func yamlName(s string) string {
	plain := s != "" && s[0] != '{'
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./{}", r)) {
			plain = false
		}
	}
	if plain {
		return s
	}
	return strconv.Quote(s)
}
