package rules

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Error is a rule-file error at a line.
type Error struct {
	File string
	Line int
	Msg  string
}

// Error formats the error as file:line: message.
//
// Example:
//
//	fmt.Println(err) // algebra.rules:12: rule r: unknown operator "foo"
func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ErrorList is every error found in one or more rule files, in file and line order.
type ErrorList []*Error

// Error lists every error, one per line.
//
// Example:
//
//	if l, ok := err.(rules.ErrorList); ok { fmt.Println(len(l), "errors") }
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// maxErrors bounds the errors collected per file, so a garbage file does not produce thousands.
const maxErrors = 20

type tokKind int

const (
	tEOF tokKind = iota
	tAtom
	tVar
	tString
	tPunct // ( ) [ ] , & : @ =
	tArrow
	tBiArrow
)

type token struct {
	kind tokKind
	text string // for tString, the unquoted value
	line int
	bol  bool // first token on its line
}

func isAtomRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_.+-*'", r)
}

// lex splits src into tokens. Comments run from # or // to the end of the line.
func lex(file string, src []byte, errs *ErrorList) []token {
	var toks []token
	line, bol := 1, true
	s := string(src)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n':
			line++
			bol = true
			i++
			continue
		case unicode.IsSpace(r):
			i += w
			continue
		case r == '#' || strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			continue
		}
		t := token{line: line, bol: bol}
		bol = false
		switch {
		case strings.HasPrefix(s[i:], "<=>"):
			t.kind, t.text = tBiArrow, "<=>"
			i += 3
		case strings.HasPrefix(s[i:], "=>"):
			t.kind, t.text = tArrow, "=>"
			i += 2
		case strings.ContainsRune("()[],&:@=", r):
			t.kind, t.text = tPunct, string(r)
			i++
		case r == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' && s[j] != '\n' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) || s[j] != '"' {
				*errs = append(*errs, &Error{file, line, "unterminated string"})
				i = j
				continue
			}
			v, err := strconv.Unquote(s[i : j+1])
			if err != nil {
				*errs = append(*errs, &Error{file, line, fmt.Sprintf("bad string %s: %v", s[i:j+1], err)})
			}
			t.kind, t.text = tString, v
			i = j + 1
		case r == '?' || isAtomRune(r):
			j := i + w
			for j < len(s) {
				r2, w2 := utf8.DecodeRuneInString(s[j:])
				if !isAtomRune(r2) {
					break
				}
				j += w2
			}
			t.kind, t.text = tAtom, s[i:j]
			if r == '?' {
				t.kind = tVar
				if j == i+1 {
					*errs = append(*errs, &Error{file, line, "'?' must be followed by a variable name"})
				}
			}
			i = j
		default:
			*errs = append(*errs, &Error{file, line, fmt.Sprintf("unexpected character %q", r)})
			i += w
			continue
		}
		toks = append(toks, t)
	}
	// An error at the end of the file is reported on the last line that had a token.
	last := 1
	if len(toks) > 0 {
		last = toks[len(toks)-1].line
	}
	return append(toks, token{kind: tEOF, line: last, bol: true})
}

type parser struct {
	file string
	toks []token
	pos  int
	errs ErrorList
}

// bail is panicked to abandon the current rule after an error; parseRule recovers it.
type bail struct{}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) fail(t token, format string, args ...any) {
	p.errs = append(p.errs, &Error{p.file, t.line, fmt.Sprintf(format, args...)})
	panic(bail{})
}

func (p *parser) is(kind tokKind, text string) bool {
	t := p.peek()
	return t.kind == kind && t.text == text
}

func (p *parser) expect(kind tokKind, text string, what string) token {
	t := p.next()
	if t.kind != kind || t.text != text {
		p.fail(t, "expected %s, found %s", what, describe(t))
	}
	return t
}

func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "end of file"
	case tString:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

// atRuleStart reports whether the parser is at `name:` at the start of a line.
func (p *parser) atRuleStart() bool {
	t := p.peek()
	return t.kind == tAtom && t.bol && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tPunct && p.toks[p.pos+1].text == ":"
}

// Parse parses one rule file. name is used in errors ("algebra.rules:12: ..."). The syntax:
//
//	file    := rule*
//	rule    := NAME ':' side ('=>' | '<=>') (side | '@' NAME) [guards]
//	side    := term ('&' term)*                    several terms: a multi-pattern
//	term    := ?VAR | ?VAR '=' sexpr | sexpr       ?s = (...) binds a left-hand root
//	sexpr   := '(' OP ['[' attr (',' attr)* ']'] term* ')'
//	attr    := NAME '=' (?VAR | '_' | LITERAL | "STRING" | '[' LITERAL (',' LITERAL)* ']')
//	guards  := 'if' guard (',' guard)*  |  '[' 'if' guard (',' guard)* ']'
//	guard   := NAME ['(' (?VAR | LITERAL) (',' ...)* ')']
//
// A rule starts with `name:` as the first thing on a line and may continue on following lines;
// comments run from # or // to the end of a line. Names, operators and literals are runs of
// letters, digits and _ . + - * '. Errors name the file and line; parsing continues with the next
// rule, so one call reports every syntax error (up to 20).
//
// Example:
//
//	f, err := rules.Parse("algebra.rules", []byte("add-comm: (add ?a ?b) => (add ?b ?a)\n"))
func Parse(name string, src []byte) (*File, error) {
	p := &parser{file: name}
	p.toks = lex(name, src, &p.errs)
	f := &File{Name: name}
	seen := map[string]int{}
	for p.peek().kind != tEOF && len(p.errs) < maxErrors {
		start := p.pos
		r := p.parseRule()
		if r == nil {
			// Skip to the next rule start so that one error does not hide the others.
			if p.pos == start {
				p.next()
			}
			for p.peek().kind != tEOF && !p.atRuleStart() {
				p.next()
			}
			continue
		}
		if line, dup := seen[r.Name]; dup {
			p.errs = append(p.errs, &Error{name, r.Line, fmt.Sprintf("rule %q already defined at line %d", r.Name, line)})
			continue
		}
		seen[r.Name] = r.Line
		f.Rules = append(f.Rules, r)
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
		return f, p.errs
	}
	return f, nil
}

func (p *parser) parseRule() (r *Rule) {
	defer func() {
		if e := recover(); e != nil {
			if _, ok := e.(bail); !ok {
				panic(e)
			}
			r = nil
		}
	}()
	t := p.next()
	if t.kind != tAtom {
		p.fail(t, "expected a rule name, found %s", describe(t))
	}
	if t.text == "if" {
		p.fail(t, "'if' cannot name a rule")
	}
	r = &Rule{File: p.file, Line: t.line, Name: t.text}
	p.expect(tPunct, ":", "':' after rule name "+t.text)
	r.LHS = p.parseSide(true)
	arrow := p.next()
	switch arrow.kind {
	case tArrow:
	case tBiArrow:
		r.Bidirectional = true
	default:
		p.fail(arrow, "rule %s: expected => or <=> after the left side, found %s", r.Name, describe(arrow))
	}
	if p.is(tPunct, "@") {
		p.next()
		a := p.next()
		if a.kind != tAtom {
			p.fail(a, "rule %s: expected an applier name after @, found %s", r.Name, describe(a))
		}
		r.Applier = a.text
	} else {
		r.RHS = p.parseSide(false)
	}
	bracket := false
	if p.is(tPunct, "[") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tAtom && p.toks[p.pos+1].text == "if" {
		p.next()
		bracket = true
	}
	if p.is(tAtom, "if") && !(p.atRuleStart()) {
		p.next()
		for {
			r.Guards = append(r.Guards, p.parseGuard())
			if !p.is(tPunct, ",") {
				break
			}
			p.next()
		}
	} else if bracket {
		p.fail(p.peek(), "expected 'if'")
	}
	if bracket {
		p.expect(tPunct, "]", "']' closing the guards")
	}
	if nt := p.peek(); nt.kind != tEOF && !p.atRuleStart() {
		p.fail(nt, "rule %s: unexpected %s after the rule (a new rule starts with 'name:' at the beginning of a line)", r.Name, describe(nt))
	}
	return r
}

func (p *parser) parseSide(lhs bool) []*Term {
	terms := []*Term{p.parseTerm(lhs)}
	for p.is(tPunct, "&") {
		p.next()
		terms = append(terms, p.parseTerm(lhs))
	}
	return terms
}

func (p *parser) parseTerm(root bool) *Term {
	t := p.peek()
	if t.kind == tVar {
		p.next()
		if p.is(tPunct, "=") {
			if !root {
				p.fail(t, "%s = ... may only name a whole left-hand term", t.text)
			}
			p.next()
			if !p.is(tPunct, "(") {
				p.fail(p.peek(), "expected (op ...) after %s =, found %s", t.text, describe(p.peek()))
			}
			term := p.parseTerm(false)
			term.Bind = t.text
			return term
		}
		return &Term{Line: t.line, Var: t.text}
	}
	if !p.is(tPunct, "(") {
		p.fail(t, "expected a term, ?var or (op ...), found %s", describe(t))
	}
	p.next()
	op := p.next()
	if op.kind != tAtom {
		p.fail(op, "expected an operator name after '(', found %s", describe(op))
	}
	term := &Term{Line: op.line, Op: op.text}
	if p.is(tPunct, "[") {
		p.next()
		for {
			term.Attrs = append(term.Attrs, p.parseAttr())
			if p.is(tPunct, "]") {
				break
			}
			p.expect(tPunct, ",", "',' or ']' in attributes")
		}
		p.next()
	}
	for !p.is(tPunct, ")") {
		if p.peek().kind == tEOF {
			p.fail(p.peek(), "unclosed '(' of %s opened at line %d", op.text, op.line)
		}
		term.Args = append(term.Args, p.parseTerm(false))
	}
	p.next()
	return term
}

func (p *parser) parseAttr() AttrTerm {
	n := p.next()
	if n.kind != tAtom {
		p.fail(n, "expected an attribute name, found %s", describe(n))
	}
	p.expect(tPunct, "=", "'=' after attribute "+n.text)
	v := p.next()
	switch {
	case v.kind == tVar || v.kind == tAtom:
		return AttrTerm{Name: n.text, Value: v.text}
	case v.kind == tString:
		return AttrTerm{Name: n.text, Value: v.text, Quoted: true}
	case v.kind == tPunct && v.text == "[":
		var items []string
		for !p.is(tPunct, "]") {
			it := p.next()
			if it.kind != tAtom {
				p.fail(it, "expected a literal in the list value of %s, found %s", n.text, describe(it))
			}
			items = append(items, it.text)
			if !p.is(tPunct, "]") {
				p.expect(tPunct, ",", "',' or ']' in a list value")
			}
		}
		p.next()
		return AttrTerm{Name: n.text, Value: "[" + strings.Join(items, ",") + "]", Quoted: true}
	}
	p.fail(v, "expected a value for attribute %s, found %s", n.text, describe(v))
	return AttrTerm{}
}

func (p *parser) parseGuard() GuardCall {
	n := p.next()
	if n.kind != tAtom {
		p.fail(n, "expected a guard name, found %s", describe(n))
	}
	g := GuardCall{Line: n.line, Name: n.text}
	if p.is(tPunct, "(") {
		p.next()
		g.Call = true
		for !p.is(tPunct, ")") {
			a := p.next()
			if a.kind != tAtom && a.kind != tVar && a.kind != tString {
				p.fail(a, "expected a guard argument, found %s", describe(a))
			}
			if a.kind == tString && strings.HasPrefix(a.text, "?") {
				// Guards receive their arguments as text, where a leading '?' names a variable.
				p.fail(a, "guard %s: the string argument %q would read as a variable (it starts with '?')", g.Name, a.text)
			}
			g.Args = append(g.Args, a.text)
			if !p.is(tPunct, ")") {
				p.expect(tPunct, ",", "',' or ')' in guard arguments")
			}
		}
		p.next()
	}
	return g
}

// ParseFS parses every file of fsys matching the glob pattern (for example "*.rules" of an
// embedded directory), in name order, and returns them with every error of every file.
//
// Example:
//
//	//go:embed *.rules
//	var ruleFiles embed.FS
//	files, err := rules.ParseFS(ruleFiles, "*.rules")
func ParseFS(fsys fs.FS, pattern string) ([]*File, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var files []*File
	var errs ErrorList
	for _, n := range names {
		src, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		f, err := Parse(path.Base(n), src)
		if err != nil {
			if l, ok := err.(ErrorList); ok {
				errs = append(errs, l...)
				continue
			}
			return nil, err
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return files, errs
	}
	return files, nil
}
