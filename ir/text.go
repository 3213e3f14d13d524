package ir

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SafeText makes text from a model file or another input fit for a message: control characters
// (which a terminal would obey: escape sequences, bells, carriage returns) and invalid UTF-8 are
// escaped as Go escapes them (\x1b, \a, \xc3), other characters are kept (so "é" stays "é",
// never mojibake), and text longer than max bytes (0: 200) is cut, saying how long it was.
func SafeText(s string, max int) string {
	if max <= 0 {
		max = 200
	}
	cut := len(s) > max
	if cut {
		end := max
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		s = s[:end]
	}
	if clean(s) {
		if cut {
			return s + "…"
		}
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	if cut {
		b.WriteString("…")
	}
	return b.String()
}

func clean(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) {
			return false
		}
		i += n
	}
	return true
}
