// Package tokenizer turns text into token ids and back, as Hugging Face's tokenizers library does
// for a tokenizer.json file, in pure Go.
//
// A tokenizer is the Rust library's pipeline of five stages, each chosen by its "type" in the
// file: a normalizer (NFC, NFKC, Prepend, Replace, Lowercase, Strip, Precompiled — SentencePiece's
// compiled rules —, Sequence, …), a pre-tokenizer (ByteLevel, Split with the file's regex,
// Metaspace, Digits, WhitespaceSplit, Sequence, …), a model (BPE, with byte_fallback,
// ignore_merges and the continuing-subword and end-of-word affixes; Unigram, SentencePiece's
// unigram model by Viterbi; WordPiece; WordLevel), a post-processor that adds special tokens
// (TemplateProcessing, ByteLevel, Bert, Roberta, Sequence) and a decoder (ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, WordPiece, Sequence, …). Added tokens (special or not) are
// matched in the text before the model, with their lstrip/rstrip/single_word/normalized flags.
// An unknown type is an error naming it and its place in the file, and so is a known type this
// package does not implement (the Nmt normalizer, UnicodeScripts).
//
// tokenizer_config.json, when it sits beside the file, gives the BOS and EOS tokens, the chat
// template (else chat_template.jinja beside it) and clean_up_tokenization_spaces (applied by
// Decode, as transformers does). The
// vocabulary of a GGUF file (llama.cpp's tokenizer.ggml.* keys) builds the same pipeline; see
// FromVocab.
//
// The ids are checked against the Rust library's on the oracle corpus of ../shared/oracles/
// tokenizers (Llama 2, Llama 3 and Qwen3 files), and for Unigram on T5- and ALBERT-style files of
// testdata/tokenizers/unigram. Limits: one text at a time (no pairs), no
// offsets, and tokenizer.json's truncation and padding settings are not applied.
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/vkc-project/vkc/ir/gguf"
)

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	norm  normalizer
	pre   preTokenizer
	model model
	post  postProcessor
	dec   decoder

	added     []AddedToken
	rawAdded  *addedMatcher // tokens matched in the input as written
	normAdded *addedMatcher // tokens matched in the normalized text
	addedByID map[int32]*AddedToken

	bos, eos int32
	unk      int32 // a GGUF vocabulary's unknown token, -1 when none (for the chat template)
	// eog are the ids besides eos that end a generation (see EOG).
	eog          []int32
	cleanup      bool
	chatTemplate string
	// chatSource names where the chat template came from, for its errors.
	chatSource string
	// chatNamed are the named chat templates besides the default ("tool_use", "rag", ...).
	chatNamed map[string]string
	// special are the special-token variables of tokenizer_config.json the chat template
	// sees (see Chat); nil when there was no tokenizer_config.json.
	special map[string]any
	// chat is the compiled chat template, made by the first Chat call.
	chatOnce sync.Once
	chat     *Chat
	chatErr  error

	// wordSplit, when set, splits a pre-tokenizer-less word before each run of this character
	// that follows another character: the model's vocabulary has no token (and so no merge
	// result) with such a run inside, so merges never cross these points and the parts can be
	// merged (and cached) separately with the same result.
	wordSplit string

	pool sync.Pool // *scratch
}

// scratch is the reusable working memory of one Encode call.
type scratch struct {
	m    reMachine
	st   []span // a stack of spans (see preTokenizer)
	buf  []byte
	syms []bpeSym
	heap []bpeCand
}

// Load reads a tokenizer: a tokenizer.json (or tokenizer.json.gz) file, or a directory holding
// one, with the tokenizer_config.json beside it when there is one; or the vocabulary of a GGUF
// file (recognised by its magic bytes, see FromGGUF).
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() && isGGUF(path) {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return FromGGUF(f)
	}
	if st.IsDir() {
		dir := path
		path = filepath.Join(dir, "tokenizer.json")
		if _, err := os.Stat(path); err != nil {
			gz := path + ".gz"
			if _, err2 := os.Stat(gz); err2 != nil {
				return nil, fmt.Errorf("%s: no tokenizer.json or tokenizer.json.gz in the directory", dir)
			}
			path = gz
		}
	}
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	var cfg []byte
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	if c, err := os.ReadFile(cfgPath); err == nil {
		cfg = c
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	t, err := Parse(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.chatTemplate != "" || t.chatNamed != nil {
		t.chatSource = cfgPath + " chat_template"
	}
	for _, name := range []string{"config.json", "generation_config.json"} {
		cp := filepath.Join(filepath.Dir(path), name)
		ids, err := configEOS(cp)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if int(id) >= t.VocabSize() {
				return nil, fmt.Errorf("%s: eos_token_id %d is outside the tokenizer's %d ids (%s)", cp, id, t.VocabSize(), path)
			}
		}
		t.addEOG(ids)
	}
	if t.chatTemplate == "" {
		// Newer checkpoints keep the chat template in a file of its own beside the tokenizer.
		jinjaPath := filepath.Join(filepath.Dir(path), "chat_template.jinja")
		if b, err := os.ReadFile(jinjaPath); err == nil {
			t.chatTemplate = string(b)
			t.chatSource = jinjaPath
		} else if !os.IsNotExist(err) {
			return nil, err
		}
	}
	return t, nil
}

func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == gguf.Magic
}

// readMaybeGzip reads a file, gunzipping it when it starts with the gzip magic bytes.
func readMaybeGzip(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		return data, nil
	}
	out, err := gunzip(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// Parse builds a tokenizer from the bytes of tokenizer.json and, when not nil, of
// tokenizer_config.json. Errors name the place in the file ("pre_tokenizer.pretokenizers[0]: …").
func Parse(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &Tokenizer{bos: -1, eos: -1, unk: -1}
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if f.Model == nil {
		return nil, fmt.Errorf("model: missing")
	}
	if t.model, err = parseModel(f.Model, "model"); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	var added []AddedToken
	for i, a := range f.AddedTokens {
		where := fmt.Sprintf("added_tokens[%d]", i)
		if a.Content == "" {
			return nil, fmt.Errorf("%s: empty content", where)
		}
		// The Rust library gives a token the model already has the model's id.
		id, ok := t.model.tokenID(a.Content)
		if !ok {
			if a.ID == nil {
				return nil, fmt.Errorf("%s: %q has no id and is not in the model's vocabulary", where, a.Content)
			}
			id = *a.ID
		}
		if id < 0 {
			return nil, fmt.Errorf("%s: negative id %d", where, id)
		}
		normalized := !a.Special // the Rust library's default
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		added = append(added, AddedToken{ID: id, Content: a.Content, Special: a.Special, SingleWord: a.SingleWord,
			LStrip: a.LStrip, RStrip: a.RStrip, Normalized: normalized})
	}
	t.setAdded(added)
	if configJSON != nil {
		if err := t.applyConfig(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t.chooseWordSplit()
	return t, nil
}

// setAdded installs the added tokens and their two matchers.
func (t *Tokenizer) setAdded(added []AddedToken) {
	t.added = added
	t.addedByID = map[int32]*AddedToken{}
	var raw, normed []AddedToken
	for i := range t.added {
		a := &t.added[i]
		if _, dup := t.addedByID[a.ID]; !dup {
			t.addedByID[a.ID] = a
		}
		if a.Normalized {
			normed = append(normed, *a)
		} else {
			raw = append(raw, *a)
		}
	}
	t.rawAdded = newAddedMatcher(raw, func(a AddedToken) string { return a.Content })
	t.normAdded = newAddedMatcher(normed, func(a AddedToken) string {
		if t.norm == nil {
			return a.Content
		}
		return t.norm.normalize(a.Content, &scratch{})
	})
}

// chooseWordSplit sets wordSplit for SentencePiece-style BPE without a pre-tokenizer (Llama 2),
// where otherwise the whole text is one word, when the vocabulary allows it (see wordSplit).
func (t *Tokenizer) chooseWordSplit() {
	bpe, ok := t.model.(*bpeModel)
	if !ok || t.pre != nil {
		return
	}
	const sep = "\u2581"
	if _, ok := bpe.vocab[sep]; !ok {
		return // an unknown ▁ could fuse with unknown neighbours across the split
	}
	for _, tok := range bpe.tokens {
		i := strings.Index(tok, sep)
		for i >= 0 {
			if i > 0 && !strings.HasSuffix(tok[:i], sep) {
				return // a token with ▁ after another character: merges may cross
			}
			j := strings.Index(tok[i+len(sep):], sep)
			if j < 0 {
				break
			}
			i += len(sep) + j
		}
	}
	t.wordSplit = sep
}

type configJSON struct {
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	CleanUp      *bool           `json:"clean_up_tokenization_spaces"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// specialTokenKeys are the keys of tokenizer_config.json transformers' special_tokens_map
// holds (and passes to the chat template).
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// specialVars reads the special-token variables of tokenizer_config.json as transformers
// passes them to a chat template: each of specialTokenKeys that is set and not null (an
// AddedToken object as its content), and additional_special_tokens as a list of strings.
func specialVars(data []byte) (map[string]any, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	vars := map[string]any{}
	for _, k := range specialTokenKeys {
		v, ok := raw[k]
		if !ok || isNull(v) {
			continue
		}
		tok, err := configToken(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		vars[k] = tok
	}
	if v, ok := raw["additional_special_tokens"]; ok && !isNull(v) {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return nil, fmt.Errorf("additional_special_tokens: want a list, got %s", v)
		}
		toks := []any{}
		for i, e := range list {
			tok, err := configToken(e)
			if err != nil {
				return nil, fmt.Errorf("additional_special_tokens[%d]: %w", i, err)
			}
			toks = append(toks, tok)
		}
		vars["additional_special_tokens"] = toks
	}
	return vars, nil
}

// configToken reads a token of tokenizer_config.json: a string, {"content": …} or null.
func configToken(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("want a string or {\"content\": …}, got %s", raw)
	}
	return o.Content, nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		raw  json.RawMessage
		dst  *int32
	}{{"bos_token", c.BOS, &t.bos}, {"eos_token", c.EOS, &t.eos}} {
		tok, err := configToken(x.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", x.name, err)
		}
		if tok == "" {
			continue
		}
		id, ok := t.ID(tok)
		if !ok {
			return fmt.Errorf("%s %q is not in the vocabulary", x.name, tok)
		}
		*x.dst = id
	}
	t.cleanup = c.CleanUp != nil && *c.CleanUp
	special, err := specialVars(data)
	if err != nil {
		return err
	}
	t.special = special
	tmpl, named, err := configChatTemplate(c.ChatTemplate)
	if err != nil {
		return err
	}
	if tmpl != "" {
		t.chatTemplate = tmpl
	}
	t.chatNamed = named
	return nil
}

// configChatTemplate reads tokenizer_config.json's chat_template: a string, or a list of
// named templates (the one named "default", and the others by name); "" when absent.
func configChatTemplate(raw json.RawMessage) (string, map[string]string, error) {
	if isNull(raw) {
		return "", nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, fmt.Errorf("chat_template: want a string or a list of {name, template}")
	}
	def := ""
	var named map[string]string
	for _, n := range list {
		switch {
		case n.Name == "default":
			def = n.Template
		case n.Name != "" && n.Template != "":
			if named == nil {
				named = map[string]string{}
			}
			named[n.Name] = n.Template
		}
	}
	return def, named, nil
}

// BOS returns the beginning-of-sequence token id, or -1 when the source names none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence token id, or -1 when the source names none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOG returns the ids that end a generation: EOS (when there is one) first, then the others the
// source names: a Hugging Face folder's config.json and generation_config.json eos_token_id (an
// id or a list, as Llama 3's [128001, 128008, 128009]), a GGUF vocabulary's
// tokenizer.ggml.eot_token_id and eom_token_id. Each id once; empty when there is none.
func (t *Tokenizer) EOG() []int32 {
	var ids []int32
	if t.eos >= 0 {
		ids = append(ids, t.eos)
	}
	for _, id := range t.eog {
		if id >= 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// addEOG adds ids to the end-of-generation ids besides EOS, each once.
func (t *Tokenizer) addEOG(ids []int32) {
	for _, id := range ids {
		if id != t.eos && !slices.Contains(t.eog, id) {
			t.eog = append(t.eog, id)
		}
	}
}

// configEOS reads the eos_token_id of a Hugging Face config.json or generation_config.json at
// path (an id or a list of ids; nil when the file or the field is absent or null).
func configEOS(path string) ([]int32, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if isNull(c.EOS) {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(c.EOS, &one); err == nil {
		c.EOS = []byte(fmt.Sprintf("[%d]", one))
	}
	var ids []int32
	if err := json.Unmarshal(c.EOS, &ids); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id is %s; want a token id or a list of them", path, c.EOS)
	}
	for _, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("%s: eos_token_id %d is negative", path, id)
		}
	}
	return ids, nil
}

// ChatTemplate returns the source's chat template (a Jinja template), or "".
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// VocabSize is one more than the largest id the tokenizer knows.
func (t *Tokenizer) VocabSize() int {
	n := t.model.size()
	for id := range t.addedByID {
		n = max(n, int(id)+1)
	}
	return n
}

// AddedTokens returns the added tokens in file order.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// Token returns the string of id: an added token's content or the model's vocabulary entry.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		return a.Content, true
	}
	return t.model.idToken(id)
}

// ID returns the id of a token string (added tokens first).
func (t *Tokenizer) ID(token string) (int32, bool) {
	for i := range t.added {
		if t.added[i].Content == token {
			return t.added[i].ID, true
		}
	}
	return t.model.tokenID(token)
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.addedByID[id]
	return ok && a.Special
}

// Encode returns the ids of text. With addSpecial the post-processor adds its special tokens
// (BOS for Llama 2), as HF's add_special_tokens=True; special-token text in the input is matched
// either way. text must be valid UTF-8.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	if !utf8.ValidString(text) {
		for i := 0; i < len(text); {
			r, n := utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && n == 1 {
				return nil, fmt.Errorf("text is not valid UTF-8 at byte %d", i)
			}
			i += n
		}
	}
	sc, _ := t.pool.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	defer t.pool.Put(sc)
	var ids []int32
	word := func(w pretok) error {
		var err error
		switch {
		case w.raw:
			if bpe, ok := t.model.(*bpeModel); ok {
				ids, err = bpe.tokenizeRaw(ids, w.text, sc)
				return err
			}
			w = w.mapped()
			fallthrough
		default:
			if t.wordSplit != "" {
				ids, err = t.tokenizeSplit(ids, w.text, sc)
			} else {
				ids, err = t.model.tokenize(ids, w.text, sc)
			}
		}
		return err
	}
	for _, seg := range t.rawAdded.split(nil, text, true) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		s := seg.text
		if t.norm != nil {
			s = t.norm.normalize(s, sc)
		}
		for _, sub := range t.normAdded.split(nil, s, seg.atStart) {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
				continue
			}
			p := pretok{sub.text, sub.atStart, false}
			var err error
			if t.pre != nil {
				err = t.pre.preTokenize(p, sc, word)
			} else {
				err = word(p)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if addSpecial && t.post != nil {
		ids = t.post.process(ids)
	}
	if ids == nil {
		ids = []int32{}
	}
	return ids, nil
}

// tokenizeSplit tokenizes w in parts that start at each run of wordSplit following another
// character (see Tokenizer.wordSplit).
func (t *Tokenizer) tokenizeSplit(ids []int32, w string, sc *scratch) ([]int32, error) {
	sep := t.wordSplit
	start := 0
	for i := 0; i < len(w); {
		if strings.HasPrefix(w[i:], sep) {
			if i > start && !strings.HasSuffix(w[:i], sep) {
				var err error
				if ids, err = t.model.tokenize(ids, w[start:i], sc); err != nil {
					return nil, err
				}
				start = i
			}
			i += len(sep)
			continue
		}
		i++
	}
	return t.model.tokenize(ids, w[start:], sc)
}

// DecodeOptions are Decode's choices.
type DecodeOptions struct {
	// SkipSpecial drops special added tokens (HF's skip_special_tokens).
	SkipSpecial bool
	// NoCleanup skips clean_up_tokenization_spaces even where tokenizer_config.json asks for it:
	// the text is then the tokenizer.json decoder's alone.
	NoCleanup bool
}

// Decode returns the text of ids. An id the tokenizer does not know is an error naming it.
func (t *Tokenizer) Decode(ids []int32, opt DecodeOptions) (string, error) {
	tokens := make([]string, 0, len(ids))
	for i, id := range ids {
		tok, ok := t.Token(id)
		if !ok {
			return "", fmt.Errorf("id %d (position %d) is not in the vocabulary (ids 0..%d)", id, i, t.VocabSize()-1)
		}
		if opt.SkipSpecial && t.IsSpecial(id) {
			continue
		}
		tokens = append(tokens, tok)
	}
	var s string
	if t.dec != nil {
		s = strings.Join(t.dec.decodeChain(tokens), "")
	} else {
		s = strings.Join(tokens, " ")
	}
	if t.cleanup && !opt.NoCleanup {
		s = cleanUpTokenization(s)
	}
	return s, nil
}

// cleanUpTokenization is transformers' clean_up_tokenization: it removes the space before
// punctuation and English contractions.
func cleanUpTokenization(s string) string {
	return sequentialCleanup(s, []string{" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
		" n't", "n't", " 'm", "'m", " 's", "'s", " 've", "'ve", " 're", "'re"})
}
