package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/tokenizer"
)

// ByteTokenizer writes a tokenizer.json whose 256 tokens are the bytes (GPT-2's byte-level
// alphabet, id = byte value) and whose added tokens take the ids after them, and a
// tokenizer_config.json (eos_token, chat_template), into dir. A model of vocabulary 256 (+
// added) then reads and writes any text, a character's bytes possibly over several tokens.
func ByteTokenizer(t testing.TB, dir string, added []string, config map[string]any) string {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	var at []map[string]any
	for i, a := range added {
		at = append(at, map[string]any{"id": 256 + i, "content": a, "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
	}
	tj := map[string]any{
		"version": "1.0", "added_tokens": at, "normalizer": nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		"post_processor": nil, "decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	os.MkdirAll(dir, 0o755)
	b, _ := json.Marshal(tj)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if config != nil {
		b, _ = json.Marshal(config)
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "tokenizer.json")
}

// textModel is tinyllama's shape with vocab tokens and random weights (seed).
func textModel(t *testing.T, vocab int, seed int) *ir.Model {
	t.Helper()
	b, err := os.ReadFile(src("examples/tinyllama/model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	i, j := strings.Index(y, "weights:"), strings.Index(y, "params:")
	y = y[:i] + fmt.Sprintf("weights: {init: random, seed: %d, scale: 0.3}\n\n", seed) + y[j:]
	y = strings.Replace(y, "vocab: 256", fmt.Sprintf("vocab: %d", vocab), 1)
	y = strings.Replace(y, "  layers.{i}.attn_norm: [d]", "  layers.{i}.attn_norm: {shape: [d], init: ones}", 1)
	m, err := ir.ParseModelBytes("text.yaml", []byte(y), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGenerateTextInterpreter: text generation through the reference interpreter: greedy text is
// the decode of GenerateIDs' greedy tokens for the encoded prompt; the pieces are valid UTF-8
// and concatenate to Generation.Text; the same seed gives the same text and another seed other
// text; a stop string ends it before the string; the EOS token ends it.
func TestGenerateTextInterpreter(t *testing.T) {
	m := textModel(t, 256, 3)
	tok, err := tokenizer.Load(ByteTokenizer(t, t.TempDir(), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
	ctx := context.Background()
	prompt := "Hello, wörld"
	var pieces []string
	g, err := engine.GenerateText(ctx, exe, tok, prompt, engine.GenerateOptions{MaxTokens: 24}, func(s string) error {
		pieces = append(pieces, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode(prompt, true)
	gi, err := engine.GenerateIDs(ctx, exe, ids, engine.GenerateOptions{MaxTokens: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g.Tokens) != fmt.Sprint(gi.Tokens) || g.Stopped != engine.StopMaxTokens || len(g.Tokens) != 24 {
		t.Fatalf("greedy text tokens %v (%s), GenerateIDs' %v", g.Tokens, g.Stopped, gi.Tokens)
	}
	whole, _ := tok.Decode(g.Tokens, tokenizer.DecodeOptions{})
	if g.Text != whole || strings.Join(pieces, "") != g.Text {
		t.Errorf("text %q, pieces %q, the tokens decode to %q", g.Text, pieces, whole)
	}
	for _, p := range pieces {
		if !utf8.ValidString(p) {
			t.Errorf("piece %q is not UTF-8", p)
		}
	}
	sample := func(seed uint64, stop ...string) *engine.Generation {
		g, err := engine.GenerateText(ctx, exe, tok, prompt, engine.GenerateOptions{MaxTokens: 20, Stop: stop,
			Sampling: engine.Sampling{Temperature: 1.5, TopK: 0, Seed: seed}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b, c := sample(11), sample(11), sample(12)
	if a.Text != b.Text || fmt.Sprint(a.Tokens) != fmt.Sprint(b.Tokens) {
		t.Errorf("seed 11 twice: %q and %q", a.Text, b.Text)
	}
	if a.Text == c.Text {
		t.Errorf("seeds 11 and 12 both give %q", a.Text)
	}
	if a.RowSteps != len(a.Tokens) || a.Candidates != 0 {
		t.Errorf("top-k 0 over a plan without candidates: %d row steps for %d tokens, %d candidates", a.RowSteps, len(a.Tokens), a.Candidates)
	}
	// A stop string cut from the middle of the sampled text.
	r := []rune(a.Text)
	if len(r) < 6 {
		t.Fatalf("sampled text %q too short", a.Text)
	}
	stop := string(r[3:5])
	s := sample(11, stop)
	if s.Stopped != engine.StopString || s.Text != a.Text[:strings.Index(a.Text, stop)] {
		t.Errorf("stop %q: %q (%s), want %q", stop, s.Text, s.Stopped, a.Text[:strings.Index(a.Text, stop)])
	}
	// The EOS token: the first generated byte, made the end token.
	eos := engine.GenerateOptions{MaxTokens: 24, StopIDs: []int32{g.Tokens[3]}}
	e, err := engine.GenerateText(ctx, exe, tok, prompt, eos, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for first < len(g.Tokens) && g.Tokens[first] != g.Tokens[3] {
		first++
	}
	if e.Stopped != engine.StopToken || len(e.Tokens) != first {
		t.Errorf("end token %d: %d tokens (%s), want %d", g.Tokens[3], len(e.Tokens), e.Stopped, first)
	}
}

// TestGenerateChat: --chat renders the prompt in the tokenizer's ChatML template (the text of
// the prompt tokens is the template's, special tokens matched as one token each) and the
// template's end of turn, <|im_end|>, is a stop token.
func TestGenerateChat(t *testing.T) {
	m := textModel(t, 258, 4)
	tmpl := `{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`
	dir := t.TempDir()
	tok, err := tokenizer.Load(ByteTokenizer(t, dir, []string{"<|im_start|>", "<|im_end|>"}, map[string]any{"eos_token": "<|im_end|>", "chat_template": tmpl}))
	if err != nil {
		t.Fatal(err)
	}
	exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
	var prompt []int32
	rec := &recordExe{interpExe: exe, first: &prompt}
	g, err := engine.GenerateText(context.Background(), rec, tok, "Hi", engine.GenerateOptions{MaxTokens: 30, Chat: true, System: "Be brief."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := tok.Decode(prompt, tokenizer.DecodeOptions{})
	if want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"; text != want || prompt[0] != 256 {
		t.Errorf("chat prompt %q (ids %v), want %q", text, prompt[:3], want)
	}
	if g.PromptTokens != len(prompt) {
		t.Errorf("prompt tokens %d, the run had %d", g.PromptTokens, len(prompt))
	}
	for _, id := range g.Tokens {
		if id == 257 {
			t.Errorf("<|im_end|> was generated and kept: %v", g.Tokens)
		}
	}
	if _, err := engine.GenerateText(context.Background(), exe, tok, "Hi", engine.GenerateOptions{MaxTokens: 3, System: "x"}, nil); err == nil {
		t.Error("a system message without chat was accepted")
	}
	plain, _ := tokenizer.Load(ByteTokenizer(t, t.TempDir(), nil, nil))
	if _, err := engine.GenerateText(context.Background(), exe, plain, "Hi", engine.GenerateOptions{MaxTokens: 3, Chat: true}, nil); err == nil || !strings.Contains(err.Error(), "no chat template") {
		t.Errorf("chat without a template: %v", err)
	}
}

// recordExe records the tokens of the first run (the prompt's prefill).
type recordExe struct {
	*interpExe
	first *[]int32
}

func (r *recordExe) Run(ctx context.Context, fn string, in map[string][]byte) (map[string][]byte, error) {
	if *r.first == nil {
		*r.first = engine.Int32s(in["tokens"])
	}
	return r.interpExe.Run(ctx, fn, in)
}

// TestGenerateTextStopsAtEveryEOS: a Hugging Face folder's config.json that lists several
// eos_token_id (Llama 3 lists three) ends a generation at whichever comes first, with no StopIDs
// given: here two bytes of the greedy text, the later one first in the list.
func TestGenerateTextStopsAtEveryEOS(t *testing.T) {
	m := textModel(t, 256, 3)
	dir := t.TempDir()
	tok, err := tokenizer.Load(ByteTokenizer(t, dir, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	exe := &interpExe{p: planSignature(t, m), s: interp.NewSession(m)}
	ctx := context.Background()
	prompt := "Hello, wörld"
	g, err := engine.GenerateText(ctx, exe, tok, prompt, engine.GenerateOptions{MaxTokens: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Stopped != engine.StopMaxTokens {
		t.Fatalf("without an EOS: stopped at %s", g.Stopped)
	}
	early, late := g.Tokens[4], g.Tokens[9]
	first := slices.Index(g.Tokens, early)
	if i := slices.Index(g.Tokens, late); i < first {
		early, first = late, i
	}
	cfg := fmt.Sprintf(`{"eos_token_id": [%d, %d]}`, late, early)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if tok, err = tokenizer.Load(dir); err != nil {
		t.Fatal(err)
	}
	e, err := engine.GenerateText(ctx, exe, tok, prompt, engine.GenerateOptions{MaxTokens: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Stopped != engine.StopToken || len(e.Tokens) != first || fmt.Sprint(e.Tokens) != fmt.Sprint(g.Tokens[:first]) {
		t.Errorf("config %s: %d tokens (%s), want the %d before the first end token", cfg, len(e.Tokens), e.Stopped, first)
	}
}
