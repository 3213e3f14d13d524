package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites a piece of text before it is split (HF's Normalizer). The Rust library
// also tracks how every normalized byte aligns with the input, for offsets; this package returns
// ids only, so a normalizer maps a string to a string.
type normalizer interface {
	normalize(s string, sc *scratch) string
}

type (
	nfNormalizer     struct{ form norm.Form }
	lowercaseNorm    struct{}
	stripNorm        struct{ left, right bool }
	stripAccentsNorm struct{}
	prependNorm      struct{ prepend string }
	replaceNorm      struct{ pat pattern }
	sequenceNorm     []normalizer
	byteLevelNorm    struct{}
	bertNormalizer   struct{ cleanText, chinese, stripAccents, lowercase bool }
)

// pattern is a Replace/Split pattern: {"String": "…"} (a literal) or {"Regex": "…"}.
type pattern struct {
	lit     string
	re      *Regex
	content string // Replace's replacement
}

func parsePattern(raw json.RawMessage, where string) (pattern, error) {
	var p struct {
		String *string
		Regex  *string
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return pattern{}, fmt.Errorf("%s: pattern: %v", where, err)
	}
	switch {
	case p.String != nil && p.Regex == nil:
		if *p.String == "" {
			return pattern{}, fmt.Errorf("%s: pattern: empty String", where)
		}
		return pattern{lit: *p.String}, nil
	case p.Regex != nil && p.String == nil:
		re, err := compileRegex(*p.Regex)
		if err != nil {
			return pattern{}, fmt.Errorf("%s: pattern: %w", where, err)
		}
		return pattern{re: re}, nil
	}
	return pattern{}, fmt.Errorf("%s: pattern: want exactly one of String and Regex, got %s", where, raw)
}

func (p *pattern) spans(dst []span, s string, sc *scratch) []span {
	if p.re != nil {
		return matchSpans(dst, p.re, &sc.m, s)
	}
	return literalSpans(dst, p.lit, s)
}

// replaceAll replaces every match of p in s with p.content.
func (p *pattern) replaceAll(s string, sc *scratch) string {
	if p.re == nil {
		if !strings.Contains(s, p.lit) {
			return s
		}
		return strings.ReplaceAll(s, p.lit, p.content)
	}
	mark := len(sc.st)
	sc.st = p.spans(sc.st, s, sc)
	defer func() { sc.st = sc.st[:mark] }()
	var b strings.Builder
	for _, sp := range sc.st[mark:] {
		if sp.match {
			b.WriteString(p.content)
		} else {
			b.WriteString(s[sp.start:sp.end])
		}
	}
	return b.String()
}

func (n nfNormalizer) normalize(s string, _ *scratch) string { return n.form.String(s) }

// Lowercase follows Rust's char::to_lowercase, which is Go's unicode.ToLower except for U+0130
// (İ), whose full lower-case mapping is "i̇".
func (lowercaseNorm) normalize(s string, _ *scratch) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

func (n stripNorm) normalize(s string, _ *scratch) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// StripAccents removes combining marks (HF's is_combining_mark: general category M); like the
// Rust library it does not decompose first, so it is meant to follow NFD or NFKD.
func (stripAccentsNorm) normalize(s string, _ *scratch) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsMark(r) {
			return -1
		}
		return r
	}, s)
}

func (n prependNorm) normalize(s string, _ *scratch) string {
	if s == "" {
		return s
	}
	return n.prepend + s
}

func (n replaceNorm) normalize(s string, sc *scratch) string { return n.pat.replaceAll(s, sc) }

func (n sequenceNorm) normalize(s string, sc *scratch) string {
	for _, x := range n {
		s = x.normalize(s, sc)
	}
	return s
}

func (byteLevelNorm) normalize(s string, _ *scratch) string {
	return string(appendByteLevel(nil, s))
}

func isBertChinese(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// isOther is Unicode general category C (Rust's is_other), unassigned code points included.
func isOther(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) || !isAssigned(r)
}

func (n bertNormalizer) normalize(s string, _ *scratch) string {
	if n.cleanText {
		s = strings.Map(func(r rune) rune {
			switch {
			case r == '\t' || r == '\n' || r == '\r':
				return ' '
			case r == 0 || r == 0xFFFD || isOther(r):
				return -1
			case unicode.IsSpace(r):
				return ' '
			}
			return r
		}, s)
	}
	if n.chinese {
		var b strings.Builder
		for _, r := range s {
			if isBertChinese(r) {
				b.WriteByte(' ')
				b.WriteRune(r)
				b.WriteByte(' ')
			} else {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	if n.stripAccents {
		s = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Mn, r) {
				return -1
			}
			return r
		}, norm.NFD.String(s))
	}
	if n.lowercase {
		s = lowercaseNorm{}.normalize(s, nil)
	}
	return s
}

// stageType reads the "type" field of a stage object.
func stageType(raw json.RawMessage, where string) (string, error) {
	var h struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", fmt.Errorf("%s: %v", where, err)
	}
	if h.Type == nil {
		return "", fmt.Errorf("%s: no \"type\" field", where)
	}
	return *h.Type, nil
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func unmarshalStage(raw json.RawMessage, where string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}
	return nil
}

// parseNormalizer builds the normalizer the JSON object raw describes; where names its place in
// the file. null gives nil.
func parseNormalizer(raw json.RawMessage, where string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := stageType(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "NFC":
		return nfNormalizer{norm.NFC}, nil
	case "NFD":
		return nfNormalizer{norm.NFD}, nil
	case "NFKC":
		return nfNormalizer{norm.NFKC}, nil
	case "NFKD":
		return nfNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "StripAccents":
		return stripAccentsNorm{}, nil
	case "Strip":
		var c struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		return stripNorm{c.Left, c.Right}, nil
	case "Prepend":
		var c struct {
			Prepend *string `json:"prepend"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		if c.Prepend == nil {
			return nil, fmt.Errorf("%s: Prepend without \"prepend\"", where)
		}
		return prependNorm{*c.Prepend}, nil
	case "Replace":
		var c struct {
			Pattern json.RawMessage `json:"pattern"`
			Content *string         `json:"content"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		if c.Content == nil {
			return nil, fmt.Errorf("%s: Replace without \"content\"", where)
		}
		p, err := parsePattern(c.Pattern, where)
		if err != nil {
			return nil, err
		}
		p.content = *c.Content
		return replaceNorm{p}, nil
	case "Sequence":
		var c struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		var seq sequenceNorm
		for i, r := range c.Normalizers {
			n, err := parseNormalizer(r, fmt.Sprintf("%s.normalizers[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "BertNormalizer":
		c := struct {
			CleanText    *bool `json:"clean_text"`
			Chinese      *bool `json:"handle_chinese_chars"`
			StripAccents *bool `json:"strip_accents"`
			Lowercase    *bool `json:"lowercase"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		def := func(p *bool, d bool) bool {
			if p == nil {
				return d
			}
			return *p
		}
		lower := def(c.Lowercase, true)
		return bertNormalizer{def(c.CleanText, true), def(c.Chinese, true), def(c.StripAccents, lower), lower}, nil
	case "Precompiled":
		var c struct {
			Charsmap *string `json:"precompiled_charsmap"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		if c.Charsmap == nil || *c.Charsmap == "" {
			return nil, nil // no rules: the text is left as it is
		}
		return parsePrecompiledBase64(*c.Charsmap, where)
	case "Nmt":
		return nil, fmt.Errorf("%s: normalizer type %q is not supported (Precompiled is)", where, typ)
	}
	return nil, fmt.Errorf("%s: unknown normalizer type %q", where, typ)
}
