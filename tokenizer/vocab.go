package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/vkc-project/vkc/ir/gguf"
	"golang.org/x/text/unicode/norm"
)

// TokenType is llama.cpp's token type (tokenizer.ggml.token_type).
type TokenType int32

const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// Vocab is a vocabulary as a GGUF file carries it (llama.cpp's tokenizer.ggml.* keys), in plain
// Go values, so that it can be built without a file (tests, converters).
type Vocab struct {
	// Model is tokenizer.ggml.model: "gpt2" (byte-level BPE with merges), "llama"
	// (SentencePiece BPE: merge priority from Scores, byte fallback, ▁ for spaces) or "t5"
	// (a SentencePiece unigram model: Scores are the pieces' log probabilities; see
	// fromUnigramVocab).
	Model string
	// Pre is tokenizer.ggml.pre, the pre-tokenizer of a gpt2 vocabulary: "llama-bpe" (also
	// "llama3", "llama-v3"), "qwen2", "gpt-2" or "smollm".
	Pre    string
	Tokens []string
	Scores []float32   // llama: a higher score merges first; unused for gpt2
	Types  []TokenType // one per token; empty means all normal
	Merges []string    // gpt2: "a b", in rank order
	// BOS, EOS, UNK are token ids, -1 when absent.
	BOS, EOS, UNK int32
	// EOG are the other ids that end a generation (tokenizer.ggml.eot_token_id and
	// eom_token_id: Llama 3's <|eot_id|> and <|eom_id|>); see Tokenizer.EOG.
	EOG []int32
	// AddBOS, AddEOS: encoding with special tokens adds them.
	AddBOS, AddEOS bool
	// AddSpacePrefix (llama): a ▁ is prepended to the text, as SentencePiece does.
	AddSpacePrefix bool
	// ChatTemplate is tokenizer.chat_template, "" when absent; NamedChatTemplates are the
	// others, tokenizer.chat_template.NAME for each NAME of tokenizer.chat_templates.
	ChatTemplate       string
	NamedChatTemplates map[string]string
	// PrecompiledCharsmap (t5) is tokenizer.ggml.precompiled_charsmap, SentencePiece's
	// normalization rules (see the Precompiled normalizer); nil for none.
	PrecompiledCharsmap []byte
	// RemoveExtraWhitespaces (t5): runs of white space separate words and are not pieces
	// (tokenizer.ggml.remove_extra_whitespaces).
	RemoveExtraWhitespaces bool
}

// Split patterns of the gpt2 pre-tokenizers, as the Hugging Face tokenizer.json files of those
// models declare them (llama.cpp's own spellings match the same strings).
const (
	llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Split  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// FromVocab builds the tokenizer a Hugging Face tokenizer.json of the same vocabulary describes:
// for gpt2, a byte-level BPE with the pre-tokenizer Pre names (Llama 3's with ignore_merges;
// Qwen2's with the NFC normalizer of its tokenizer.json, which llama.cpp itself does not apply);
// for llama, the Llama 2 pipeline (Prepend ▁ and Replace " " → ▁, BPE with byte_fallback and
// fuse_unk, the Replace/ByteFallback/Fuse/Strip decoder). A llama vocabulary's merges are made
// from Scores the way transformers' converter makes them from a SentencePiece model: every split
// of every token into two tokens, ordered by the token's score, so BPE merges the highest-scoring
// pair first, as SentencePiece (and llama.cpp) do. Control and unknown tokens are special added
// tokens, user-defined ones non-special added tokens; all are matched in the text as written.
func FromVocab(v *Vocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, errors.New("vocabulary: no tokens")
	}
	if len(v.Types) != 0 && len(v.Types) != n {
		return nil, fmt.Errorf("vocabulary: %d token types for %d tokens", len(v.Types), n)
	}
	typ := func(i int) TokenType {
		if len(v.Types) == 0 {
			return TypeNormal
		}
		return v.Types[i]
	}
	for _, x := range []struct {
		name string
		id   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unk", v.UNK}} {
		if x.id < -1 || int(x.id) >= n {
			return nil, fmt.Errorf("vocabulary: %s token id %d is outside 0..%d", x.name, x.id, n-1)
		}
	}
	for _, id := range v.EOG {
		if id < 0 || int(id) >= n {
			return nil, fmt.Errorf("vocabulary: end-of-generation token id %d is outside 0..%d", id, n-1)
		}
	}
	for i, tok := range v.Tokens {
		if !utf8.ValidString(tok) {
			return nil, fmt.Errorf("vocabulary: token %d is not valid UTF-8: %q", i, tok)
		}
	}
	vocab := make(map[string]int32, n)
	for i, tok := range v.Tokens {
		if _, dup := vocab[tok]; !dup { // a repeated string keeps its first id for encoding
			vocab[tok] = int32(i)
		}
	}
	t := &Tokenizer{bos: v.BOS, eos: v.EOS, unk: v.UNK, chatTemplate: v.ChatTemplate, chatNamed: v.NamedChatTemplates, chatSource: "tokenizer.chat_template"}
	t.addEOG(v.EOG)
	bpe := &bpeModel{}
	var merges [][2]string
	switch v.Model {
	case "gpt2":
		for i, m := range v.Merges {
			a, b, ok := cutMerge(m)
			if !ok {
				return nil, fmt.Errorf("vocabulary: merge %d %q is not two tokens separated by one space", i, m)
			}
			merges = append(merges, [2]string{a, b})
		}
		byteLevel := byteLevelPre{addPrefixSpace: false, useRegex: false}
		switch v.Pre {
		case "llama-bpe", "llama3", "llama-v3":
			t.pre = sequencePre{splitPre{pattern{re: mustCompileRegex(llama3Split)}, splitIsolated, false}, byteLevel}
			bpe.ignoreMerges = true
			t.cleanup = true // llama.cpp's clean_spaces, as Llama 3's tokenizer_config asks
		case "qwen2":
			t.norm = nfNormalizer{norm.NFC}
			t.pre = sequencePre{splitPre{pattern{re: mustCompileRegex(qwen2Split)}, splitIsolated, false}, byteLevel}
		case "gpt-2":
			t.pre = byteLevelPre{addPrefixSpace: false, useRegex: true}
			t.cleanup = true
		case "smollm":
			t.pre = sequencePre{digitsPre{individual: true}, byteLevelPre{addPrefixSpace: false, useRegex: true}}
		case "":
			return nil, errors.New("vocabulary: gpt2 model without tokenizer.ggml.pre (the pre-tokenizer name)")
		default:
			return nil, fmt.Errorf("vocabulary: pre-tokenizer %q is not supported (llama-bpe, qwen2, gpt-2 and smollm are)", v.Pre)
		}
		t.dec = byteLevelDec{}
	case "llama":
		if len(v.Scores) != n {
			return nil, fmt.Errorf("vocabulary: %d scores for %d tokens", len(v.Scores), n)
		}
		merges = mergesFromScores(v.Tokens, v.Scores, vocab, typ)
		replace := replaceNorm{pattern{lit: " ", content: "\u2581"}}
		if v.AddSpacePrefix {
			t.norm = sequenceNorm{prependNorm{"\u2581"}, replace}
		} else {
			t.norm = replace
		}
		bpe.byteFallback, bpe.fuseUnk = true, true
		if v.UNK >= 0 {
			bpe.unk = v.Tokens[v.UNK]
		}
		dec := sequenceDec{replaceDec{pattern{lit: "\u2581", content: " "}}, byteFallbackDec{}, fuseDec{}}
		if v.AddSpacePrefix {
			dec = append(dec, stripDec{' ', 1, 0})
		}
		t.dec = dec
	case "t5":
		return fromUnigramVocab(t, v, typ)
	case "":
		return nil, errors.New("vocabulary: no tokenizer.ggml.model")
	default:
		return nil, fmt.Errorf("vocabulary: tokenizer model %q is not supported (gpt2, llama and t5 are)", v.Model)
	}
	if err := bpe.initList(v.Tokens, vocab, merges, "vocabulary"); err != nil {
		return nil, err
	}
	t.model = bpe
	t.setAdded(vocabAdded(v, typ))
	t.post = vocabPost(v)
	t.chooseWordSplit()
	return t, nil
}

// vocabAdded lists a vocabulary's control and unknown tokens as special added tokens, and its
// user-defined ones as non-special added tokens.
func vocabAdded(v *Vocab, typ func(int) TokenType) []AddedToken {
	var added []AddedToken
	for i, tok := range v.Tokens {
		switch ty := typ(i); ty {
		case TypeControl, TypeUnknown, TypeUserDefined:
			if tok == "" {
				continue
			}
			added = append(added, AddedToken{ID: int32(i), Content: tok, Special: ty != TypeUserDefined})
		}
	}
	return added
}

// vocabPost adds BOS and EOS as the vocabulary asks.
func vocabPost(v *Vocab) postProcessor {
	var before, after []int32
	if v.AddBOS && v.BOS >= 0 {
		before = []int32{v.BOS}
	}
	if v.AddEOS && v.EOS >= 0 {
		after = []int32{v.EOS}
	}
	return templatePost{before, after}
}

// fromUnigramVocab builds a t5 vocabulary (llama.cpp's UGM: a SentencePiece unigram model) as
// transformers' converter builds T5's tokenizer.json from the same SentencePiece model: the
// Precompiled normalizer of its charsmap; WhitespaceSplit (with remove_extra_whitespaces) and
// Metaspace (▁, prepended when add_space_prefix); Unigram over the tokens and their scores,
// with the unknown token and byte fallback when the vocabulary has byte tokens; the Metaspace
// decoder (after ByteFallback).
func fromUnigramVocab(t *Tokenizer, v *Vocab, typ func(int) TokenType) (*Tokenizer, error) {
	n := len(v.Tokens)
	if len(v.Scores) != n {
		return nil, fmt.Errorf("vocabulary: %d scores for %d tokens", len(v.Scores), n)
	}
	if len(v.PrecompiledCharsmap) > 0 {
		p, err := parsePrecompiled(v.PrecompiledCharsmap)
		if err != nil {
			return nil, fmt.Errorf("vocabulary: tokenizer.ggml.%w", err)
		}
		t.norm = p
	}
	prepend := prependNever
	if v.AddSpacePrefix {
		prepend = prependAlways
	}
	meta := metaspacePre{replacement: "\u2581", prepend: prepend, split: true}
	if v.RemoveExtraWhitespaces {
		t.pre = sequencePre{whitespaceSplit{}, meta}
	} else {
		t.pre = meta
	}
	scores := make([]float64, n)
	byteFallback := false
	for i, s := range v.Scores {
		scores[i] = float64(s)
		byteFallback = byteFallback || typ(i) == TypeByte
	}
	m, err := newUnigram(v.Tokens, scores, v.UNK, byteFallback, "vocabulary")
	if err != nil {
		return nil, err
	}
	t.model = m
	dec := sequenceDec{metaspaceDec{replacement: '\u2581', prepend: prepend}}
	if byteFallback {
		dec = sequenceDec{byteFallbackDec{}, dec[0]}
	}
	t.dec = dec
	t.setAdded(vocabAdded(v, typ))
	t.post = vocabPost(v)
	return t, nil
}

func cutMerge(m string) (string, string, bool) {
	for i := 0; i < len(m); i++ {
		if m[i] == ' ' {
			a, b := m[:i], m[i+1:]
			for j := 0; j < len(b); j++ {
				if b[j] == ' ' {
					return "", "", false
				}
			}
			return a, b, true
		}
	}
	return "", "", false
}

// mergesFromScores lists, for every normal or user-defined token, each split into two tokens of
// the vocabulary; a token's splits are ordered by the ids of their parts, and the tokens by
// descending score, ties in id order (transformers' SentencePieceExtractor).
func mergesFromScores(tokens []string, scores []float32, vocab map[string]int32, typ func(int) TokenType) [][2]string {
	type cand struct {
		l, r   string
		li, ri int32
		score  float32
		id     int
	}
	var all []cand
	for i, tok := range tokens {
		if ty := typ(i); ty != TypeNormal && ty != TypeUserDefined {
			continue
		}
		if vocab[tok] != int32(i) { // a repeated string: its first id stands for it
			continue
		}
		var local []cand
		for j := range tok { // j: the start of each character
			if j == 0 {
				continue
			}
			l, rr := tok[:j], tok[j:]
			li, ok1 := vocab[l]
			ri, ok2 := vocab[rr]
			if ok1 && ok2 {
				local = append(local, cand{l, rr, li, ri, scores[i], i})
			}
		}
		sort.Slice(local, func(a, b int) bool {
			if local[a].li != local[b].li {
				return local[a].li < local[b].li
			}
			return local[a].ri < local[b].ri
		})
		all = append(all, local...)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].score > all[b].score })
	out := make([][2]string, len(all))
	for i, c := range all {
		out[i] = [2]string{c.l, c.r}
	}
	return out
}

// FromGGUF builds the tokenizer of a GGUF file's vocabulary (see FromVocab for what is built).
// Absent keys take llama.cpp's defaults: add_bos_token true for llama and for Llama 3's
// pre-tokenizer, false otherwise; add_eos_token false; add_space_prefix true for llama.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := vocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	t, err := FromVocab(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	t.chatSource = f.Path + " tokenizer.chat_template"
	return t, nil
}

func vocabFromGGUF(f *gguf.File) (*Vocab, error) {
	v := &Vocab{BOS: -1, EOS: -1, UNK: -1}
	var err error
	if v.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		if errors.Is(err, gguf.ErrNoKey) {
			return nil, fmt.Errorf("%s: no vocabulary (metadata key tokenizer.ggml.model is absent)", f.Path)
		}
		return nil, err
	}
	if v.Model == "none" {
		return nil, fmt.Errorf("%s: no vocabulary (tokenizer.ggml.model is \"none\": the file was converted without its tokenizer; give the model's tokenizer.json)", f.Path)
	}
	if v.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		if errors.Is(err, gguf.ErrNoKey) {
			return nil, fmt.Errorf("%s: no vocabulary (tokenizer.ggml.model is %q but tokenizer.ggml.tokens is absent)", f.Path, v.Model)
		}
		return nil, err
	}
	optional := func(err error) error {
		if errors.Is(err, gguf.ErrNoKey) {
			return nil
		}
		return err
	}
	if v.Pre, err = f.String("tokenizer.ggml.pre"); optional(err) != nil {
		return nil, err
	}
	if v.Scores, err = f.Float32s("tokenizer.ggml.scores"); optional(err) != nil {
		return nil, err
	}
	types, err := f.Ints("tokenizer.ggml.token_type")
	if optional(err) != nil {
		return nil, err
	}
	for _, x := range types {
		v.Types = append(v.Types, TokenType(x))
	}
	if v.Merges, err = f.Strings("tokenizer.ggml.merges"); optional(err) != nil {
		return nil, err
	}
	for _, x := range []struct {
		key string
		dst *int32
	}{{"tokenizer.ggml.bos_token_id", &v.BOS}, {"tokenizer.ggml.eos_token_id", &v.EOS}, {"tokenizer.ggml.unknown_token_id", &v.UNK}} {
		id, err := f.Uint(x.key)
		if optional(err) != nil {
			return nil, err
		}
		if err == nil {
			if id >= uint64(len(v.Tokens)) {
				return nil, fmt.Errorf("%s: %s is %d, outside the %d tokens", f.Path, x.key, id, len(v.Tokens))
			}
			*x.dst = int32(id)
		}
	}
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		id, err := f.Uint(key)
		if optional(err) != nil {
			return nil, err
		}
		if err == nil {
			if id >= uint64(len(v.Tokens)) {
				return nil, fmt.Errorf("%s: %s is %d, outside the %d tokens", f.Path, key, id, len(v.Tokens))
			}
			v.EOG = append(v.EOG, int32(id))
		}
	}
	v.AddBOS = v.Model == "llama" || v.Pre == "llama-bpe" || v.Pre == "llama3" || v.Pre == "llama-v3"
	v.AddEOS = v.Model == "t5" // T5 ends every sequence with </s>
	v.AddSpacePrefix = v.Model == "llama" || v.Model == "t5"
	v.RemoveExtraWhitespaces = v.Model == "t5"
	for _, x := range []struct {
		key string
		dst *bool
	}{{"tokenizer.ggml.add_bos_token", &v.AddBOS}, {"tokenizer.ggml.add_eos_token", &v.AddEOS}, {"tokenizer.ggml.add_space_prefix", &v.AddSpacePrefix},
		{"tokenizer.ggml.remove_extra_whitespaces", &v.RemoveExtraWhitespaces}} {
		b, err := f.Bool(x.key)
		if optional(err) != nil {
			return nil, err
		}
		if err == nil {
			*x.dst = b
		}
	}
	if v.ChatTemplate, err = f.String("tokenizer.chat_template"); optional(err) != nil {
		return nil, err
	}
	names, err := f.Strings("tokenizer.chat_templates")
	if optional(err) != nil {
		return nil, err
	}
	for _, n := range names {
		key := "tokenizer.chat_template." + n
		s, err := f.String(key)
		if err != nil {
			return nil, err
		}
		if v.NamedChatTemplates == nil {
			v.NamedChatTemplates = map[string]string{}
		}
		v.NamedChatTemplates[n] = s
	}
	cm, err := f.Ints("tokenizer.ggml.precompiled_charsmap")
	if optional(err) != nil {
		return nil, err
	}
	for i, b := range cm {
		if b < 0 || b > 255 {
			return nil, fmt.Errorf("%s: tokenizer.ggml.precompiled_charsmap[%d] is %d, not a byte", f.Path, i, b)
		}
		v.PrecompiledCharsmap = append(v.PrecompiledCharsmap, byte(b))
	}
	return v, nil
}
