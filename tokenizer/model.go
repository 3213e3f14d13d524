package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// modelJSON is tokenizer.json's model, decoded in the same pass as the rest of the file (the
// vocabulary and merges are most of a 10 MB file; decoding them once keeps loading fast).
type modelJSON struct {
	Type                    *string    `json:"type"`
	Vocab                   vocabJSON  `json:"vocab"`
	Merges                  mergesJSON `json:"merges"`
	UnkToken                *string    `json:"unk_token"`
	ContinuingSubwordPrefix *string    `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string    `json:"end_of_word_suffix"`
	FuseUnk                 bool       `json:"fuse_unk"`
	ByteFallback            bool       `json:"byte_fallback"`
	IgnoreMerges            bool       `json:"ignore_merges"`
	Dropout                 *float64   `json:"dropout"`
	MaxInputCharsPerWord    *int       `json:"max_input_chars_per_word"`
	UnkID                   *int       `json:"unk_id"` // Unigram
}

// vocabJSON is a {"token": id} object, or a list (Unigram's [[piece, score], …]) kept raw for
// parseUnigram.
type vocabJSON struct {
	m      map[string]int32
	isList bool
	raw    json.RawMessage
}

func (v *vocabJSON) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		v.isList = true
		v.raw = append(json.RawMessage(nil), b...)
		return nil
	}
	return json.Unmarshal(b, &v.m)
}

// mergesJSON holds the merges in either form (see parseMerges).
type mergesJSON struct {
	pairs [][2]string
	err   error // reported by parseModel, with the place in the file
}

func (m *mergesJSON) UnmarshalJSON(b []byte) error {
	m.pairs, m.err = parseMerges(b, "merges")
	return nil
}

// parseMerges reads BPE merges in either form the Rust library writes: ["a b", …] (split at the
// one space) or [["a", "b"], …].
func parseMerges(raw json.RawMessage, where string) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '[' {
		t = bytes.TrimSpace(t[1:])
	}
	if len(t) > 0 && t[0] == '[' {
		var pairs [][]string
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("%s[%d]: want 2 tokens, got %d", where, i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	out := make([][2]string, 0, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("%s[%d]: %q is not two tokens separated by one space", where, i, l)
		}
		out = append(out, [2]string{a, b})
	}
	return out, nil
}

func parseModel(c *modelJSON, where string) (model, error) {
	if c.Type == nil {
		return nil, fmt.Errorf("%s: no \"type\" field", where)
	}
	typ := *c.Type
	switch typ {
	case "BPE", "WordPiece", "WordLevel":
	case "Unigram":
		return parseUnigram(c, where)
	default:
		return nil, fmt.Errorf("%s: unknown model type %q", where, typ)
	}
	if c.Vocab.isList {
		return nil, fmt.Errorf("%s.vocab: a list, want a {\"token\": id} object for %s", where, typ)
	}
	vocab := c.Vocab.m
	if len(vocab) == 0 {
		return nil, fmt.Errorf("%s.vocab: empty", where)
	}
	str := func(p *string, def string) string {
		if p == nil {
			return def
		}
		return *p
	}
	switch typ {
	case "BPE":
		if c.Dropout != nil && *c.Dropout > 0 {
			return nil, fmt.Errorf("%s: BPE dropout %g is not supported (it makes encoding random; it is for training)", where, *c.Dropout)
		}
		if c.Merges.err != nil {
			return nil, fmt.Errorf("%s.%w", where, c.Merges.err)
		}
		m := &bpeModel{prefix: str(c.ContinuingSubwordPrefix, ""), suffix: str(c.EndOfWordSuffix, ""),
			unk: str(c.UnkToken, ""), fuseUnk: c.FuseUnk, byteFallback: c.ByteFallback, ignoreMerges: c.IgnoreMerges}
		if err := m.init(vocab, c.Merges.pairs, where); err != nil {
			return nil, err
		}
		return m, nil
	case "WordPiece":
		w := &wordPieceModel{unk: str(c.UnkToken, "[UNK]"), prefix: str(c.ContinuingSubwordPrefix, "##"), maxChars: 100}
		if c.MaxInputCharsPerWord != nil {
			w.maxChars = *c.MaxInputCharsPerWord
		}
		if err := w.vocabTable.init(vocab, where); err != nil {
			return nil, err
		}
		return w, nil
	default: // WordLevel
		w := &wordLevelModel{unk: str(c.UnkToken, "")}
		if err := w.vocabTable.init(vocab, where); err != nil {
			return nil, err
		}
		return w, nil
	}
}

// vocabTable is a vocabulary both ways.
type vocabTable struct {
	vocab  map[string]int32
	tokens []string
	set    []bool // which ids have a token; nil: all (a GGUF list)
}

func (v *vocabTable) init(vocab map[string]int32, where string) error {
	v.vocab = vocab
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("%s.vocab: token %q has negative id %d", where, tok, id)
		}
		maxID = max(maxID, id)
	}
	if maxID > 1<<26 {
		return fmt.Errorf("%s.vocab: id %d is implausibly large", where, maxID)
	}
	v.tokens = make([]string, maxID+1)
	set := make([]bool, maxID+1)
	for tok, id := range vocab {
		if set[id] {
			return fmt.Errorf("%s.vocab: id %d is given to both %q and %q", where, id, v.tokens[id], tok)
		}
		v.tokens[id], set[id] = tok, true
	}
	v.set = set
	return nil
}

func (v *vocabTable) tokenID(tok string) (int32, bool) {
	id, ok := v.vocab[tok]
	return id, ok
}

func (v *vocabTable) idToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(v.tokens) {
		return "", false
	}
	if v.tokens[id] == "" && v.set != nil && !v.set[id] {
		return "", false // a gap in the ids of a tokenizer.json vocabulary
	}
	return v.tokens[id], true
}

func (v *vocabTable) size() int { return len(v.tokens) }

// wordPieceModel is HF's WordPiece: greedy longest match first, continuation pieces carrying the
// prefix; a word with a piece that matches nothing, or longer than maxChars characters, is the
// unknown token.
type wordPieceModel struct {
	vocabTable
	unk, prefix string
	maxChars    int
}

func (w *wordPieceModel) unkID() ([]int32, error) {
	id, ok := w.vocab[w.unk]
	if !ok {
		return nil, fmt.Errorf("WordPiece unknown token %q is not in the vocabulary", w.unk)
	}
	return []int32{id}, nil
}

func (w *wordPieceModel) tokenize(dst []int32, word string, _ *scratch) ([]int32, error) {
	if utf8.RuneCountInString(word) > w.maxChars {
		u, err := w.unkID()
		return append(dst, u...), err
	}
	mark := len(dst)
	for start := 0; start < len(word); {
		end := len(word)
		found := int32(-1)
		for start < end {
			sub := word[start:end]
			if start > 0 {
				sub = w.prefix + sub
			}
			if id, ok := w.vocab[sub]; ok {
				found = id
				break
			}
			_, n := utf8.DecodeLastRuneInString(word[start:end])
			end -= n
		}
		if found < 0 {
			u, err := w.unkID()
			return append(dst[:mark], u...), err
		}
		dst = append(dst, found)
		start = end
	}
	return dst, nil
}

// wordLevelModel maps each word to its id, or the unknown token.
type wordLevelModel struct {
	vocabTable
	unk string
}

func (w *wordLevelModel) tokenize(dst []int32, word string, _ *scratch) ([]int32, error) {
	if id, ok := w.vocab[word]; ok {
		return append(dst, id), nil
	}
	id, ok := w.vocab[w.unk]
	if !ok {
		return dst, fmt.Errorf("WordLevel: %q is not in the vocabulary and the unknown token %q is not either", word, w.unk)
	}
	return append(dst, id), nil
}
