package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A decoder turns the token strings of ids back into text (HF's Decoder). Like the Rust
// library's decode_chain, each stage maps a list of strings to a list of strings; the text is
// their concatenation.
type decoder interface {
	decodeChain(tokens []string) []string
}

type (
	byteLevelDec    struct{}
	replaceDec      struct{ pat pattern }
	byteFallbackDec struct{}
	fuseDec         struct{}
	stripDec        struct {
		content     rune
		start, stop int
	}
	sequenceDec  []decoder
	metaspaceDec struct {
		replacement rune
		prepend     prependScheme
	}
	wordPieceDec struct {
		prefix  string
		cleanup bool
	}
	bpeDec struct{ suffix string }
	ctcDec struct {
		pad, delimiter string
		cleanup        bool
	}
)

// ByteLevel maps every character back to its byte and reads the bytes as UTF-8, invalid
// sequences becoming U+FFFD (Rust's from_utf8_lossy).
func (byteLevelDec) decodeChain(tokens []string) []string {
	var b []byte
	for _, t := range tokens {
		b = byteLevelDecode(b, t)
	}
	return []string{strings.ToValidUTF8(string(b), "\uFFFD")}
}

func (d replaceDec) decodeChain(tokens []string) []string {
	sc := &scratch{}
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = d.pat.replaceAll(t, sc)
	}
	return out
}

// byteToken reads a byte token <0xNN>.
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(v), err == nil
}

// ByteFallback joins runs of byte tokens into their UTF-8 text; a run that is not valid UTF-8
// becomes one U+FFFD per byte.
func (byteFallbackDec) decodeChain(tokens []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

func (fuseDec) decodeChain(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// Strip removes up to start leading and stop trailing copies of content from every token.
func (d stripDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rs := []rune(t)
		lo := 0
		for lo < d.start && lo < len(rs) && rs[lo] == d.content {
			lo++
		}
		hi := len(rs)
		for n := 0; n < d.stop && hi > lo && rs[hi-1] == d.content; n++ {
			hi--
		}
		out[i] = string(rs[lo:hi])
	}
	return out
}

func (d sequenceDec) decodeChain(tokens []string) []string {
	for _, x := range d {
		tokens = x.decodeChain(tokens)
	}
	return tokens
}

// Metaspace turns the replacement character back into spaces, dropping it from the first token
// when the pre-tokenizer would have prepended one.
func (d metaspaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			if r == d.replacement {
				if i == 0 && d.prepend != prependNever {
					continue
				}
				r = ' '
			}
			b.WriteRune(r)
		}
		out[i] = b.String()
	}
	return out
}

func (d wordPieceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if i != 0 {
			if strings.HasPrefix(t, d.prefix) {
				t = strings.Replace(t, d.prefix, "", 1)
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = sequentialCleanup(t, wordPieceReplacements)
		}
		out[i] = t
	}
	return out
}

var wordPieceReplacements = []string{" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'", " n't", "n't",
	" 'm", "'m", " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re"}

// sequentialCleanup applies the replacements one after another, each over the whole string, as
// chained str::replace / str.replace calls do (a strings.Replacer would apply them in one pass,
// which differs when one replacement creates a match for a later one).
func sequentialCleanup(s string, pairs []string) string {
	for i := 0; i < len(pairs); i += 2 {
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

func (d bpeDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rep := " "
		if i == len(tokens)-1 {
			rep = ""
		}
		out[i] = strings.ReplaceAll(t, d.suffix, rep)
	}
	return out
}

func (d ctcDec) decodeChain(tokens []string) []string {
	var out []string
	for i, t := range tokens {
		if i > 0 && t == tokens[i-1] {
			continue
		}
		t = strings.ReplaceAll(t, d.pad, "")
		if d.cleanup {
			t = strings.ReplaceAll(sequentialCleanup(t, wordPieceReplacements), d.delimiter, " ")
		}
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

func oneRune(s, what, where string) (rune, error) {
	if utf8.RuneCountInString(s) != 1 {
		return 0, fmt.Errorf("%s: %s %q is not one character", where, what, s)
	}
	r, _ := utf8.DecodeRuneInString(s)
	return r, nil
}

func parseDecoder(raw json.RawMessage, where string) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := stageType(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelDec{}, nil
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
		return replaceDec{p}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		var c struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		r, err := oneRune(c.Content, "Strip content", where)
		if err != nil {
			return nil, err
		}
		if c.Start < 0 || c.Stop < 0 {
			return nil, fmt.Errorf("%s: Strip start %d and stop %d must not be negative", where, c.Start, c.Stop)
		}
		return stripDec{r, c.Start, c.Stop}, nil
	case "Sequence":
		var c struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		var seq sequenceDec
		for i, r := range c.Decoders {
			d, err := parseDecoder(r, fmt.Sprintf("%s.decoders[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	case "Metaspace":
		var c struct {
			Replacement    *string `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		d := metaspaceDec{replacement: '\u2581'}
		if c.Replacement != nil {
			if d.replacement, err = oneRune(*c.Replacement, "Metaspace replacement", where); err != nil {
				return nil, err
			}
		}
		if d.prepend, err = parsePrependScheme(c.PrependScheme, c.AddPrefixSpace, where); err != nil {
			return nil, err
		}
		return d, nil
	case "WordPiece":
		c := struct {
			Prefix  *string `json:"prefix"`
			Cleanup *bool   `json:"cleanup"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		d := wordPieceDec{prefix: "##", cleanup: c.Cleanup == nil || *c.Cleanup}
		if c.Prefix != nil {
			d.prefix = *c.Prefix
		}
		return d, nil
	case "BPEDecoder":
		c := struct {
			Suffix *string `json:"suffix"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		d := bpeDec{suffix: "</w>"}
		if c.Suffix != nil {
			d.suffix = *c.Suffix
		}
		return d, nil
	case "CTC":
		c := struct {
			Pad       *string `json:"pad_token"`
			Delimiter *string `json:"word_delimiter_token"`
			Cleanup   *bool   `json:"cleanup"`
		}{}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		d := ctcDec{pad: "<pad>", delimiter: "|", cleanup: c.Cleanup == nil || *c.Cleanup}
		if c.Pad != nil {
			d.pad = *c.Pad
		}
		if c.Delimiter != nil {
			d.delimiter = *c.Delimiter
		}
		return d, nil
	}
	return nil, fmt.Errorf("%s: unknown decoder type %q", where, typ)
}
