package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir/gguf"
)

// There is no GGUF file with a real vocabulary among the oracles, so these tests make the GGUF
// vocabulary of each oracle tokenizer the way llama.cpp's converter (convert_hf_to_gguf.py)
// does — tokens by id, token types from the added tokens, merges as "a b", SentencePiece scores
// for Llama 2 — and check that FromVocab gives the oracle's ids and decodes on the whole corpus.

type rawTokenizerJSON struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Model struct {
		Vocab  map[string]int32 `json:"vocab"`
		Merges json.RawMessage  `json:"merges"`
	} `json:"model"`
}

// looksSpecial is the converter's does_token_look_special.
func looksSpecial(s string) bool {
	return s == "<pad>" || s == "<mask>" || strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") || strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

func convertedVocab(t testing.TB, name string) *Vocab {
	t.Helper()
	data, err := readMaybeGzip(filepath.Join(oracleDir(t), name, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f rawTokenizerJSON
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	merges, err := parseMerges(f.Model.Merges, "merges")
	if err != nil {
		t.Fatal(err)
	}
	n := int32(0)
	for _, id := range f.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		n = max(n, a.ID+1)
	}
	v := &Vocab{Tokens: make([]string, n), Types: make([]TokenType, n), BOS: -1, EOS: -1, UNK: -1}
	for i := range v.Tokens {
		v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), TypeUnused
	}
	for tok, id := range f.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, TypeNormal
	}
	for _, a := range f.AddedTokens {
		v.Tokens[a.ID] = a.Content
		if a.Special || looksSpecial(a.Content) {
			v.Types[a.ID] = TypeControl
		} else {
			v.Types[a.ID] = TypeUserDefined
		}
	}
	switch name {
	case "llama2":
		// _set_vocab_sentencepiece: types and scores come from tokenizer.model. Its scores order
		// the pieces as the merges of tokenizer.json do (transformers made those merges from
		// them), so a piece's score here is minus the rank of the first merge that makes it.
		v.Model, v.BOS, v.EOS, v.UNK, v.AddBOS, v.AddSpacePrefix = "llama", 1, 2, 0, true, true
		v.Types[0] = TypeUnknown
		v.Scores = make([]float32, n)
		seen := map[string]bool{}
		for r, m := range merges {
			if tok := m[0] + m[1]; !seen[tok] {
				seen[tok] = true
				v.Scores[f.Model.Vocab[tok]] = -float32(r)
			}
		}
		for b := 0; b < 256; b++ {
			v.Types[f.Model.Vocab[fmt.Sprintf("<0x%02X>", b)]] = TypeByte
		}
	case "llama3":
		// No add_bos_token in tokenizer_config.json: llama.cpp's default for llama-bpe adds BOS.
		v.Model, v.Pre, v.BOS, v.EOS, v.AddBOS = "gpt2", "llama-bpe", 128000, 128001, true
	case "qwen3":
		v.Model, v.Pre, v.BOS, v.EOS, v.AddBOS = "gpt2", "qwen2", 151643, 151645, false
	}
	if v.Model == "gpt2" {
		for _, m := range merges {
			v.Merges = append(v.Merges, m[0]+" "+m[1])
		}
	}
	return v
}

// checkCorpus encodes and decodes every oracle case with tk; bosPrefix is the id llama.cpp's
// add_bos prepends where the tokenizer.json's post-processor adds nothing (-1: none).
func checkCorpus(t *testing.T, name string, tk *Tokenizer, bos int32) int {
	_, g := oracleTokenizer(t, name)
	pass := 0
	for i, c := range g.Cases {
		want, wantSpecial := c.IDs, c.IDsWithSpecial
		if c.HF != nil {
			want, wantSpecial = c.HF.IDs, c.HF.IDsWithSpecial
		}
		if bos >= 0 {
			wantSpecial = append([]int32{bos}, want...)
		}
		ids, err1 := tk.Encode(c.Text, false)
		ws, err2 := tk.Encode(c.Text, true)
		dec, err3 := tk.Decode(c.IDs, DecodeOptions{NoCleanup: true})
		decWS, err4 := tk.Decode(c.IDsWithSpecial, DecodeOptions{NoCleanup: true})
		if err := firstErr(err1, err2, err3, err4); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		ok := equalIDs(ids, want) && equalIDs(ws, wantSpecial) && dec == c.DecodedNoCleanup && decWS == c.DecodedWithSpecial
		if !ok {
			t.Errorf("case %d %q:\n ids %v\nwant %v\n with special %v\nwant %v\n decoded %q want %q\n decoded with special %q want %q",
				i, trunc(c.Text), ids, want, ws, wantSpecial, dec, c.DecodedNoCleanup, decWS, c.DecodedWithSpecial)
			continue
		}
		pass++
	}
	return pass
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func TestVocabMatchesTokenizerJSON(t *testing.T) {
	for _, name := range oracleNames {
		t.Run(name, func(t *testing.T) {
			v := convertedVocab(t, name)
			tk, err := FromVocab(v)
			if err != nil {
				t.Fatal(err)
			}
			bos := int32(-1)
			if name == "llama3" {
				bos = 128000
			}
			pass := checkCorpus(t, name, tk, bos)
			t.Logf("%s from a GGUF-style vocabulary: %d/73 cases give the oracle's ids and decodes", name, pass)
			if tk.BOS() != v.BOS || tk.EOS() != v.EOS {
				t.Errorf("BOS/EOS %d/%d, want %d/%d", tk.BOS(), tk.EOS(), v.BOS, v.EOS)
			}
		})
	}
}

// writeVocabGGUF writes v as a GGUF file's tokenizer.ggml.* metadata (no tensors).
func writeVocabGGUF(t *testing.T, path string, v *Vocab) {
	t.Helper()
	var b gguf.Builder
	b.Add("general.architecture", gguf.MustValue("llama"))
	b.Add("tokenizer.ggml.model", gguf.MustValue(v.Model))
	if v.Pre != "" {
		b.Add("tokenizer.ggml.pre", gguf.MustValue(v.Pre))
	}
	b.Add("tokenizer.ggml.tokens", gguf.MustValue(v.Tokens))
	if v.Scores != nil {
		b.Add("tokenizer.ggml.scores", gguf.MustValue(v.Scores))
	}
	types := make([]int32, len(v.Types))
	for i, ty := range v.Types {
		types[i] = int32(ty)
	}
	b.Add("tokenizer.ggml.token_type", gguf.MustValue(types))
	if v.Merges != nil {
		b.Add("tokenizer.ggml.merges", gguf.MustValue(v.Merges))
	}
	for _, x := range []struct {
		key string
		id  int32
	}{{"tokenizer.ggml.bos_token_id", v.BOS}, {"tokenizer.ggml.eos_token_id", v.EOS}, {"tokenizer.ggml.unknown_token_id", v.UNK}} {
		if x.id >= 0 {
			b.Add(x.key, gguf.MustValue(uint32(x.id)))
		}
	}
	for i, id := range v.EOG { // the end-of-turn id, then the end-of-message id
		b.Add([]string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}[i], gguf.MustValue(uint32(id)))
	}
	b.Add("tokenizer.ggml.add_bos_token", gguf.MustValue(v.AddBOS))
	if v.Model == "llama" {
		b.Add("tokenizer.ggml.add_space_prefix", gguf.MustValue(v.AddSpacePrefix))
	}
	if v.ChatTemplate != "" {
		b.Add("tokenizer.chat_template", gguf.MustValue(v.ChatTemplate))
	}
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadGGUF writes the converted vocabularies into GGUF files and loads them through Load,
// as `vkc tokenize --tokenizer model.gguf` does.
func TestLoadGGUF(t *testing.T) {
	for _, name := range []string{"llama2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			v := convertedVocab(t, name)
			v.ChatTemplate = "{{ messages }}"
			path := filepath.Join(t.TempDir(), name+".gguf")
			writeVocabGGUF(t, path, v)
			tk, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			pass := checkCorpus(t, name, tk, -1)
			t.Logf("%s from a GGUF file: %d/73 cases", name, pass)
			if tk.ChatTemplate() != "{{ messages }}" || tk.BOS() != v.BOS || tk.EOS() != v.EOS {
				t.Errorf("chat template %q, BOS %d, EOS %d", tk.ChatTemplate(), tk.BOS(), tk.EOS())
			}
		})
	}
}

func TestVocabErrors(t *testing.T) {
	base := func() *Vocab {
		return &Vocab{Model: "gpt2", Pre: "gpt-2", Tokens: []string{"a", "b", "ab"}, Merges: []string{"a b"}, BOS: -1, EOS: -1, UNK: -1}
	}
	for _, c := range []struct {
		edit func(v *Vocab)
		want string
	}{
		{func(v *Vocab) { v.Model = "bert" }, `tokenizer model "bert" is not supported`},
		{func(v *Vocab) { v.Pre = "deepseek-llm" }, `pre-tokenizer "deepseek-llm" is not supported`},
		{func(v *Vocab) { v.Pre = "" }, "without tokenizer.ggml.pre"},
		{func(v *Vocab) { v.Merges = []string{"a  b"} }, `merge 0 "a  b" is not two tokens`},
		{func(v *Vocab) { v.Merges = []string{"a c"} }, `"c" is not in the vocabulary`},
		{func(v *Vocab) { v.BOS = 7 }, "bos token id 7 is outside 0..2"},
		{func(v *Vocab) { v.Types = []TokenType{1} }, "1 token types for 3 tokens"},
		{func(v *Vocab) { v.Model = "llama" }, "0 scores for 3 tokens"},
		{func(v *Vocab) { v.Tokens[1] = "\xff" }, "token 1 is not valid UTF-8"},
	} {
		v := base()
		c.edit(v)
		if _, err := FromVocab(v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	// A GGUF file without a vocabulary says so.
	var b gguf.Builder
	b.Add("general.architecture", gguf.MustValue("llama"))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "novocab.gguf")
	os.WriteFile(path, data, 0o644)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "novocab.gguf: no vocabulary") {
		t.Errorf("GGUF without vocabulary: %v", err)
	}
}
