package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pretok is one piece of text on its way to the model. atStart says whether it begins at the
// start of the input (Metaspace's prepend_scheme "first" asks). raw says that the ByteLevel
// pre-tokenizer's byte-to-character mapping is still to be applied to text: the BPE model does it
// itself, after its cache lookup by the unmapped text; any other stage maps it first (mapped).
type pretok struct {
	text    string
	atStart bool
	raw     bool
}

func (p pretok) mapped() pretok {
	if p.raw {
		p.text, p.raw = string(appendByteLevel(nil, p.text)), false
	}
	return p
}

// emitFn receives the words of a pre-tokenizer, in order; an error stops the split.
type emitFn func(pretok) error

// A preTokenizer splits a piece into the words the model tokenizes separately (HF's
// PreTokenizer), handing each to emit as it is found, so a long text is never held as a list of
// words. Stages keep their spans on sc.st above the mark they found, so that a stage emitting
// into the next one can share the scratch.
type preTokenizer interface {
	preTokenize(p pretok, sc *scratch, emit emitFn) error
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

// emitPieces hands emit the pieces of p that the spans above mark on sc.st and the behavior
// keep, then pops the spans.
func emitPieces(p pretok, sc *scratch, mark int, b splitBehavior, invert bool, emit emitFn) error {
	n := len(sc.st)
	sc.st = applyBehavior(sc.st, sc.st[mark:n], b, invert)
	defer func() { sc.st = sc.st[:mark] }()
	for k := n; k < len(sc.st); k++ {
		sp := sc.st[k] // read afresh: a nested stage may have grown sc.st
		if err := emit(pretok{p.text[sp.start:sp.end], p.atStart && sp.start == 0, p.raw}); err != nil {
			return err
		}
	}
	return nil
}

func (b byteLevelPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	p = p.mapped()
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	p.raw = true
	if !b.useRegex {
		if p.text == "" {
			return nil
		}
		return emit(p)
	}
	return emitIsolated(p, gpt2Regex, sc, emit)
}

// emitIsolated is emitPieces for the matches of re with behavior Isolated, handing each piece
// on as it is found rather than collecting the spans of the whole text first (a long text
// would otherwise hold a span per word). Between two matches the machine holds nothing, so the
// stages emit calls may use it.
func emitIsolated(p pretok, re *Regex, sc *scratch, emit emitFn) error {
	s := p.text
	prev := 0
	var err error
	piece := func(start, end int) {
		if err == nil && end > start {
			err = emit(pretok{s[start:end], p.atStart && start == 0, p.raw})
		}
	}
	re.findAll(&sc.m, s, func(start, end int) bool {
		piece(prev, start)
		piece(start, end)
		prev = end
		return err == nil
	})
	piece(prev, len(s))
	return err
}

func (s splitPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	p = p.mapped()
	if s.pat.re != nil && s.behavior == splitIsolated && !s.invert {
		return emitIsolated(p, s.pat.re, sc, emit)
	}
	mark := len(sc.st)
	sc.st = s.pat.spans(sc.st, p.text, sc)
	return emitPieces(p, sc, mark, s.behavior, s.invert, emit)
}

func (m metaspacePre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	p = p.mapped()
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
		if text == "" {
			return nil
		}
		return emit(p)
	}
	mark := len(sc.st)
	sc.st = literalSpans(sc.st, m.replacement, text)
	return emitPieces(p, sc, mark, splitMergedWithNext, false, emit)
}

func (s sequencePre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	fns := make([]emitFn, len(s)+1)
	fns[len(s)] = emit
	for i := len(s) - 1; i >= 0; i-- {
		stage, next := s[i], fns[i+1]
		fns[i] = func(q pretok) error { return stage.preTokenize(q, sc, next) }
	}
	return fns[0](p)
}

func (ps predicateSplitter) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	p = p.mapped()
	mark := len(sc.st)
	sc.st = predSpans(sc.st, ps.pred, p.text)
	return emitPieces(p, sc, mark, ps.behavior, false, emit)
}

// isRustWord is the Rust regex crate's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control), which
// the Whitespace pre-tokenizer's `\w+|[^\w\s]+` uses.
func isRustWord(r rune) bool {
	return isAlphabetic(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

// Whitespace keeps the runs of word characters and the runs of other non-space characters.
func (whitespacePre) preTokenize(p pretok, _ *scratch, emit emitFn) error {
	p = p.mapped()
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
		if err := emit(pretok{s[i:j], p.atStart && i == 0, false}); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (whitespaceSplit) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	return predicateSplitter{unicode.IsSpace, splitRemoved}.preTokenize(p, sc, emit)
}

// isBertPunct is HF's is_bert_punc / is_punc: ASCII punctuation or a Unicode P character.
func isBertPunct(r rune) bool {
	return r > ' ' && r < 127 && !isASCIIAlnum(r) || unicode.IsPunct(r)
}

func (bertPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	punct := predicateSplitter{isBertPunct, splitIsolated}
	return predicateSplitter{unicode.IsSpace, splitRemoved}.preTokenize(p, sc, func(w pretok) error {
		return punct.preTokenize(w, sc, emit)
	})
}

func (pp punctuationPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	return predicateSplitter{isBertPunct, pp.behavior}.preTokenize(p, sc, emit)
}

func (d digitsPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	b := splitContiguous
	if d.individual {
		b = splitIsolated
	}
	return predicateSplitter{unicode.IsNumber, b}.preTokenize(p, sc, emit)
}

func (c charDelimiterPre) preTokenize(p pretok, sc *scratch, emit emitFn) error {
	return predicateSplitter{func(r rune) bool { return r == c.delim }, splitRemoved}.preTokenize(p, sc, emit)
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
