package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pretok is one piece of text on its way to the model. atStart says whether it begins at the
// start of the input (Metaspace's prepend_scheme "first" asks).
type pretok struct {
	text    string
	atStart bool
}

// A preTokenizer splits a piece into the words the model tokenizes separately (HF's
// PreTokenizer). It appends the pieces of p to dst.
type preTokenizer interface {
	preTokenize(dst []pretok, p pretok, sc *scratch) []pretok
}

type (
	byteLevelPre struct{ addPrefixSpace, useRegex bool }
	splitPre     struct {
		pat      pattern
		behavior splitBehavior
		invert   bool
	}
	metaspacePre struct {
		replacement string
		prepend     prependScheme
		split       bool
	}
	sequencePre       []preTokenizer
	whitespacePre     struct{}
	whitespaceSplit   struct{}
	bertPre           struct{}
	punctuationPre    struct{ behavior splitBehavior }
	digitsPre         struct{ individual bool }
	charDelimiterPre  struct{ delim rune }
	prependScheme     uint8
	predicateSplitter struct {
		pred     func(rune) bool
		behavior splitBehavior
	}
)

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// emitSpans appends the pieces of p that spans and the behavior keep.
func emitSpans(dst []pretok, p pretok, spans []span, b splitBehavior, invert bool) []pretok {
	applyBehavior(spans, b, invert, func(start, end int) {
		dst = append(dst, pretok{p.text[start:end], p.atStart && start == 0})
	})
	return dst
}

func (b byteLevelPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	mark := len(dst)
	if b.useRegex {
		spans := matchSpans(sc.spans[:0], gpt2Regex, &sc.m, p.text)
		dst = emitSpans(dst, p, spans, splitIsolated, false)
		sc.spans = spans[:0]
	} else if p.text != "" {
		dst = append(dst, p)
	}
	for i := mark; i < len(dst); i++ {
		sc.buf = appendByteLevel(sc.buf[:0], dst[i].text)
		dst[i].text = string(sc.buf)
	}
	return dst
}

func (s splitPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	spans := s.pat.spans(sc.spans[:0], p.text, sc)
	dst = emitSpans(dst, p, spans, s.behavior, s.invert)
	sc.spans = spans[:0]
	return dst
}

func (m metaspacePre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	text := strings.ReplaceAll(p.text, " ", m.replacement)
	switch m.prepend {
	case prependAlways:
		if !strings.HasPrefix(text, m.replacement) {
			text = m.replacement + text
		}
	case prependFirst:
		if !strings.HasPrefix(text, m.replacement) && p.atStart {
			text = m.replacement + text
		}
	}
	p.text = text
	if !m.split {
		if text != "" {
			dst = append(dst, p)
		}
		return dst
	}
	spans := literalSpans(sc.spans[:0], m.replacement, text)
	dst = emitSpans(dst, p, spans, splitMergedWithNext, false)
	sc.spans = spans[:0]
	return dst
}

func (s sequencePre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	cur := []pretok{p}
	for _, stage := range s {
		var next []pretok
		for _, q := range cur {
			next = stage.preTokenize(next, q, sc)
		}
		cur = next
	}
	return append(dst, cur...)
}

func (ps predicateSplitter) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	spans := predSpans(sc.spans[:0], ps.pred, p.text)
	dst = emitSpans(dst, p, spans, ps.behavior, false)
	sc.spans = spans[:0]
	return dst
}

// isRustWord is the Rust regex crate's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control), which
// the Whitespace pre-tokenizer's `\w+|[^\w\s]+` uses.
func isRustWord(r rune) bool {
	return isAlphabetic(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

// Whitespace keeps the runs of word characters and the runs of other non-space characters.
func (whitespacePre) preTokenize(dst []pretok, p pretok, _ *scratch) []pretok {
	s := p.text
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) && !isRustWord(r) {
			i += n
			continue
		}
		word := isRustWord(r)
		j := i + n
		for j < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[j:])
			if isRustWord(r2) != word || !word && unicode.IsSpace(r2) {
				break
			}
			j += n2
		}
		dst = append(dst, pretok{s[i:j], p.atStart && i == 0})
		i = j
	}
	return dst
}

func (whitespaceSplit) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	return predicateSplitter{unicode.IsSpace, splitRemoved}.preTokenize(dst, p, sc)
}

// isBertPunct is HF's is_bert_punc / is_punc: ASCII punctuation or a Unicode P character.
func isBertPunct(r rune) bool {
	return r > ' ' && r < 127 && !isASCIIAlnum(r) || unicode.IsPunct(r)
}

func (bertPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	words := predicateSplitter{unicode.IsSpace, splitRemoved}.preTokenize(nil, p, sc)
	for _, w := range words {
		dst = predicateSplitter{isBertPunct, splitIsolated}.preTokenize(dst, w, sc)
	}
	return dst
}

func (pp punctuationPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	return predicateSplitter{isBertPunct, pp.behavior}.preTokenize(dst, p, sc)
}

func (d digitsPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	b := splitContiguous
	if d.individual {
		b = splitIsolated
	}
	return predicateSplitter{unicode.IsNumber, b}.preTokenize(dst, p, sc)
}

func (c charDelimiterPre) preTokenize(dst []pretok, p pretok, sc *scratch) []pretok {
	return predicateSplitter{func(r rune) bool { return r == c.delim }, splitRemoved}.preTokenize(dst, p, sc)
}

func parsePrependScheme(scheme *string, addPrefixSpace *bool, where string) (prependScheme, error) {
	if scheme != nil {
		switch *scheme {
		case "always":
			return prependAlways, nil
		case "first":
			return prependFirst, nil
		case "never":
			return prependNever, nil
		}
		return 0, fmt.Errorf("%s: unknown prepend_scheme %q (want always, first or never)", where, *scheme)
	}
	if addPrefixSpace != nil && !*addPrefixSpace {
		return prependNever, nil
	}
	return prependAlways, nil
}

func parsePreTokenizer(raw json.RawMessage, where string) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := stageType(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		c := struct {
			AddPrefixSpace *bool `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		return byteLevelPre{c.AddPrefixSpace == nil || *c.AddPrefixSpace, c.UseRegex == nil || *c.UseRegex}, nil
	case "Split":
		var c struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior string          `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		p, err := parsePattern(c.Pattern, where)
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(c.Behavior, where)
		if err != nil {
			return nil, err
		}
		return splitPre{p, b, c.Invert}, nil
	case "Metaspace":
		var c struct {
			Replacement    *string `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			Split          *bool   `json:"split"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		m := metaspacePre{replacement: "\u2581", split: c.Split == nil || *c.Split}
		if c.Replacement != nil {
			if utf8.RuneCountInString(*c.Replacement) != 1 {
				return nil, fmt.Errorf("%s: Metaspace replacement %q is not one character", where, *c.Replacement)
			}
			m.replacement = *c.Replacement
		}
		if m.prepend, err = parsePrependScheme(c.PrependScheme, c.AddPrefixSpace, where); err != nil {
			return nil, err
		}
		return m, nil
	case "Sequence":
		var c struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		var seq sequencePre
		for i, r := range c.PreTokenizers {
			p, err := parsePreTokenizer(r, fmt.Sprintf("%s.pretokenizers[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return whitespaceSplit{}, nil
	case "BertPreTokenizer":
		return bertPre{}, nil
	case "Punctuation":
		c := struct {
			Behavior *string `json:"behavior"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		b := splitIsolated
		if c.Behavior != nil {
			if b, err = parseBehavior(*c.Behavior, where); err != nil {
				return nil, err
			}
		}
		return punctuationPre{b}, nil
	case "Digits":
		var c struct {
			Individual bool `json:"individual_digits"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		return digitsPre{c.Individual}, nil
	case "CharDelimiterSplit":
		var c struct {
			Delimiter string `json:"delimiter"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		if utf8.RuneCountInString(c.Delimiter) != 1 {
			return nil, fmt.Errorf("%s: CharDelimiterSplit delimiter %q is not one character", where, c.Delimiter)
		}
		r, _ := utf8.DecodeRuneInString(c.Delimiter)
		return charDelimiterPre{r}, nil
	case "UnicodeScripts", "FixedLength":
		return nil, fmt.Errorf("%s: pre-tokenizer type %q is not supported", where, typ)
	}
	return nil, fmt.Errorf("%s: unknown pre-tokenizer type %q", where, typ)
}
