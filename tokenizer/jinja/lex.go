package jinja

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The lexer follows Jinja2's (jinja2/lexer.py) with the settings transformers compiles chat
// templates with: trim_blocks (the first newline after a block or comment tag is removed),
// lstrip_blocks (spaces and tabs from the start of a line to a block or comment tag are
// removed), keep_trailing_newline off (one newline at the end of the source is dropped), and
// the "-" and "+" whitespace controls. Newlines of the source (\r\n, \r, \n) become \n.

type tokKind int

const (
	tEOF tokKind = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // data text, name, decoded string, operator, number text
	line int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return "string"
	case tInt, tFloat:
		return "number " + t.val
	}
	return "'" + t.val + "'"
}

// normalizeSource makes every newline \n and drops one trailing newline, as Jinja2 does
// before lexing.
func normalizeSource(src string) string {
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
	name string
}

func (lx *lexer) errf(line int, format string, args ...any) error {
	return &Error{Source: lx.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

func (lx *lexer) emit(k tokKind, val string, line int) {
	lx.toks = append(lx.toks, token{k, val, line})
}

// isPySpace is Python's str.isspace() for one character (what Jinja2's \s and strip() use).
func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

func trimLeftSpace(s string) string  { return strings.TrimLeftFunc(s, isPySpace) }
func trimRightSpace(s string) string { return strings.TrimRightFunc(s, isPySpace) }

// lex splits a normalized source into tokens.
func lex(name, src string) ([]token, error) {
	lx := &lexer{src: src, line: 1, name: name}
	lineStarting := true
	for lx.pos < len(src) {
		rest := src[lx.pos:]
		i := indexTagStart(rest)
		if i < 0 {
			lx.emit(tData, rest, lx.line)
			lx.advance(len(rest))
			break
		}
		text := rest[:i]
		open := rest[i : i+2]
		sign := byte(0)
		if i+2 < len(rest) && (rest[i+2] == '-' || rest[i+2] == '+') {
			sign = rest[i+2]
		}
		isRaw := false
		if open == "{%" {
			isRaw = rawTag(rest[i:]) > 0
		}
		switch {
		case sign == '-':
			text = trimRightSpace(text)
		case sign != '+' && open != "{{":
			lpos := strings.LastIndexByte(text, '\n') + 1
			if (lpos > 0 || lineStarting) && strings.Trim(text[lpos:], " \t") == "" {
				text = text[:lpos]
			}
		}
		if text != "" {
			lx.emit(tData, text, lx.line)
		}
		lx.advance(i)
		tagLine := lx.line
		switch {
		case open == "{#":
			end, ends, ok := findCommentEnd(src[lx.pos+2:])
			if !ok {
				return nil, lx.errf(tagLine, "missing end of comment tag")
			}
			lx.advance(2 + end)
			lineStarting = ends
		case isRaw:
			n := rawTag(src[lx.pos:])
			lx.advance(n)
			body, consumed, ends, ok := lexRawBody(src[lx.pos:])
			if !ok {
				return nil, lx.errf(tagLine, "missing end of raw directive")
			}
			if body != "" {
				lx.emit(tData, body, lx.line)
			}
			lx.advance(consumed)
			lineStarting = ends
		default:
			begin, endTok := tVarBegin, tVarEnd
			closer := "}}"
			if open == "{%" {
				begin, endTok, closer = tBlockBegin, tBlockEnd, "%}"
			}
			lx.emit(begin, open, tagLine)
			n := 2
			if sign != 0 {
				n = 3
			}
			lx.advance(n)
			ends, err := lx.lexTag(closer, endTok)
			if err != nil {
				return nil, err
			}
			lineStarting = ends
		}
	}
	lx.emit(tEOF, "", lx.line)
	return lx.toks, nil
}

// indexTagStart finds the first "{{", "{%" or "{#".
func indexTagStart(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '{' && (s[i+1] == '{' || s[i+1] == '%' || s[i+1] == '#') {
			return i
		}
	}
	return -1
}

// findCommentEnd returns the length of a comment's body and end marker (with the whitespace
// control applied) and whether that consumed text ends with a newline.
func findCommentEnd(s string) (int, bool, bool) {
	j := strings.Index(s, "#}")
	if j < 0 {
		return 0, false, false
	}
	n := j + 2
	switch {
	case j > 0 && s[j-1] == '-':
		n += len(s[n:]) - len(trimLeftSpace(s[n:]))
	case j > 0 && s[j-1] == '+':
	default:
		if strings.HasPrefix(s[n:], "\n") {
			n++
		}
	}
	return n, strings.HasSuffix(s[:n], "\n"), true
}

// rawTag returns the length of "{% raw %}" (with its whitespace controls) at the start of s,
// 0 when s does not start with one.
func rawTag(s string) int {
	p := 2
	if p < len(s) && (s[p] == '-' || s[p] == '+') {
		p++
	}
	for p < len(s) && isASCIISpace(s[p]) {
		p++
	}
	if !strings.HasPrefix(s[p:], "raw") {
		return 0
	}
	p += 3
	for p < len(s) && isASCIISpace(s[p]) {
		p++
	}
	switch {
	case strings.HasPrefix(s[p:], "-%}"):
		p += 3
		p += len(s[p:]) - len(trimLeftSpace(s[p:]))
	case strings.HasPrefix(s[p:], "+%}"):
		p += 3
	case strings.HasPrefix(s[p:], "%}"):
		p += 2
		if strings.HasPrefix(s[p:], "\n") {
			p++
		}
	default:
		return 0
	}
	return p
}

// lexRawBody finds "{% endraw %}" in s: the body (whitespace controls applied), the length
// consumed and whether it ends with a newline.
func lexRawBody(s string) (string, int, bool, bool) {
	from := 0
	for {
		j := strings.Index(s[from:], "{%")
		if j < 0 {
			return "", 0, false, false
		}
		j += from
		p := j + 2
		sign := byte(0)
		if p < len(s) && (s[p] == '-' || s[p] == '+') {
			sign = s[p]
			p++
		}
		for p < len(s) && isASCIISpace(s[p]) {
			p++
		}
		if !strings.HasPrefix(s[p:], "endraw") {
			from = j + 2
			continue
		}
		p += 6
		for p < len(s) && isASCIISpace(s[p]) {
			p++
		}
		body := s[:j]
		switch sign {
		case '-':
			body = trimRightSpace(body)
		case 0:
			lpos := strings.LastIndexByte(body, '\n') + 1
			if lpos > 0 && strings.Trim(body[lpos:], " \t") == "" {
				body = body[:lpos]
			}
		}
		switch {
		case strings.HasPrefix(s[p:], "-%}"):
			p += 3
			p += len(s[p:]) - len(trimLeftSpace(s[p:]))
		case strings.HasPrefix(s[p:], "+%}"):
			p += 3
		case strings.HasPrefix(s[p:], "%}"):
			p += 2
			if strings.HasPrefix(s[p:], "\n") {
				p++
			}
		default:
			from = j + 2
			continue
		}
		return body, p, strings.HasSuffix(s[:p], "\n"), true
	}
}

func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Operators, longest first.
var operators = []string{"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// lexTag lexes the inside of a tag up to its closer ("}}" or "%}"), emitting the end token, and
// reports whether the consumed text ends with a newline (trim_blocks).
func (lx *lexer) lexTag(closer string, endTok tokKind) (bool, error) {
	depth := 0 // open brackets: "}}" inside a dict literal is not the end
	start := lx.line
	for {
		s := lx.src[lx.pos:]
		if s == "" {
			return false, lx.errf(start, "unexpected end of template: missing %q", closer)
		}
		c := s[0]
		if isASCIISpace(c) {
			lx.advance(1)
			continue
		}
		if depth == 0 {
			switch {
			case strings.HasPrefix(s, "-"+closer):
				n := 3
				n += len(s[n:]) - len(trimLeftSpace(s[n:]))
				lx.emit(endTok, closer, lx.line)
				lx.advance(n)
				return strings.HasSuffix(s[:n], "\n"), nil
			case strings.HasPrefix(s, "+"+closer) && closer == "%}":
				lx.emit(endTok, closer, lx.line)
				lx.advance(3)
				return false, nil
			case strings.HasPrefix(s, closer):
				n := 2
				if closer == "%}" && strings.HasPrefix(s[2:], "\n") {
					n = 3
				}
				lx.emit(endTok, closer, lx.line)
				lx.advance(n)
				return n == 3, nil
			}
		}
		switch {
		case c == '\'' || c == '"':
			val, n, err := lexString(s)
			if err != nil {
				return false, lx.errf(lx.line, "%v", err)
			}
			lx.emit(tString, val, lx.line)
			lx.advance(n)
		case c >= '0' && c <= '9':
			n, isFloat := lexNumber(s)
			k := tInt
			if isFloat {
				k = tFloat
			}
			lx.emit(k, strings.ReplaceAll(s[:n], "_", ""), lx.line)
			lx.advance(n)
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			n := 0
			for n < len(s) {
				r, w := utf8.DecodeRuneInString(s[n:])
				if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r >= 0x80 && isIdentRune(r)) {
					break
				}
				n += w
			}
			if n == 0 {
				r, _ := utf8.DecodeRuneInString(s)
				return false, lx.errf(lx.line, "unexpected char %q", r)
			}
			lx.emit(tName, s[:n], lx.line)
			lx.advance(n)
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(s)
				return false, lx.errf(lx.line, "unexpected char %q", r)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
			lx.emit(tOp, op, lx.line)
			lx.advance(len(op))
		}
	}
}

// lexNumber returns the length of the integer or float literal at the start of s.
func lexNumber(s string) (int, bool) {
	digits := func(p int) int { // (\d+_)*\d+
		q := p
		for q < len(s) && (s[q] >= '0' && s[q] <= '9' || s[q] == '_' && q > p && q+1 < len(s) && s[q+1] >= '0' && s[q+1] <= '9') {
			q++
		}
		return q
	}
	n := digits(0)
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		n = digits(n + 1)
		isFloat = true
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		p := n + 1
		if p < len(s) && (s[p] == '+' || s[p] == '-') {
			p++
		}
		if p < len(s) && s[p] >= '0' && s[p] <= '9' {
			n = digits(p)
			isFloat = true
		}
	}
	return n, isFloat
}

// lexString decodes a quoted string literal with Python's escapes (Jinja2 decodes with
// "unicode-escape"): it returns the value and the literal's length.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape in a string", e)
			}
			var r rune
			for _, h := range s[i : i+n] {
				d := hexVal(h)
				if d < 0 {
					return "", 0, fmt.Errorf("bad \\%c escape in a string", e)
				}
				r = r*16 + rune(d)
			}
			if r > utf8.MaxRune {
				return "", 0, fmt.Errorf("\\%c escape out of range in a string", e)
			}
			b.WriteRune(r)
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			r := rune(e - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				r = r*8 + rune(s[i]-'0')
				i++
			}
			b.WriteRune(r)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}

func hexVal(r rune) int {
	switch {
	case r >= '0' && r <= '9':
		return int(r - '0')
	case r >= 'a' && r <= 'f':
		return int(r-'a') + 10
	case r >= 'A' && r <= 'F':
		return int(r-'A') + 10
	}
	return -1
}

func isIdentRune(r rune) bool {
	return r >= 0x80 && !isPySpace(r) && r != 0xfeff
}
