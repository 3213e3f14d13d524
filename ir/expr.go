package ir

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file holds the expression language of model.yaml statements: a tokenizer, an AST and a
// recursive-descent parser. Evaluation lives with the model parser (model_body.go) because a name
// means a dimension, a loop variable or a tensor depending on where it is used.
//
// Grammar (informal):
//
//	stmt    = targets "=" expr | name "<-" expr
//	targets = name { "," name }
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/" | "%") unary }
//	unary   = "-" unary | primary
//	primary = number | string | list | name | call | "(" expr ")"
//	call    = ident "(" [ arg { "," arg } ] ")"      arg = expr | ident "=" expr
//	list    = "[" [ expr { "," expr } ] "]"
//	name    = identifier characters (letters, digits, "_", ".") and "{expr}" template parts

type exprKind uint8

const (
	eNum exprKind = iota + 1
	eStr
	eName
	eCall
	eList
	eBin
	eNeg
)

// expr is a parsed expression.
type expr struct {
	kind exprKind
	col  int // 1-based column in the statement, for messages

	num   float64 // eNum
	isInt bool    // eNum written without '.', 'e'
	str   string  // eStr value; eName and eCall: the raw text of the name
	parts []namePart
	args  []*expr // eCall positional args, eList elements
	kw    []kwarg // eCall keyword args
	op    byte    // eBin
	l, r  *expr   // eBin operands; eNeg uses l
}

// namePart is a literal piece of a name or a {expr} template part.
type namePart struct {
	lit string
	e   *expr
}

type kwarg struct {
	name string
	val  *expr
	col  int
}

func (e *expr) String() string {
	switch e.kind {
	case eNum:
		if e.isInt {
			return strconv.FormatInt(int64(e.num), 10)
		}
		return strconv.FormatFloat(e.num, 'g', -1, 64)
	case eStr:
		return strconv.Quote(e.str)
	case eName:
		return e.str
	case eCall:
		var b strings.Builder
		b.WriteString(e.str)
		b.WriteByte('(')
		for i, a := range e.args {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.String())
		}
		for i, k := range e.kw {
			if i > 0 || len(e.args) > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k.name + "=" + k.val.String())
		}
		b.WriteByte(')')
		return b.String()
	case eList:
		var b strings.Builder
		b.WriteByte('[')
		for i, a := range e.args {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.String())
		}
		b.WriteByte(']')
		return b.String()
	case eBin:
		return "(" + e.l.String() + " " + string(e.op) + " " + e.r.String() + ")"
	case eNeg:
		return "-" + e.l.String()
	}
	return "?"
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tNum
	tStr
	tName
	tPunct // one of ( ) [ ] , = + - * / % and the two-character <-
)

type token struct {
	kind  tokKind
	text  string
	col   int
	parts []namePart // tName
}

// exprParser parses one statement or expression.
type exprParser struct {
	src   string
	toks  []token
	i     int
	depth int
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '{'
}

func isNameChar(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9' || c == '.'
}

func tokenize(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '#':
			i = len(src) // a comment runs to the end
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.' && !(j+1 < len(src) && src[j+1] == '.')) {
				j++
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					j = k
					for j < len(src) && src[j] >= '0' && src[j] <= '9' {
						j++
					}
				}
			}
			toks = append(toks, token{kind: tNum, text: src[i:j], col: i + 1})
			i = j
		case isNameStart(c):
			j := i
			var parts []namePart
			lit := strings.Builder{}
			for j < len(src) && isNameChar(src[j]) {
				if src[j] == '{' {
					depth, k := 1, j+1
					for k < len(src) && depth > 0 {
						switch src[k] {
						case '{':
							depth++
						case '}':
							depth--
						}
						k++
					}
					if depth != 0 {
						return nil, fmt.Errorf("column %d: unclosed '{' in name", j+1)
					}
					inner := src[j+1 : k-1]
					if strings.ContainsAny(inner, "{}") {
						return nil, fmt.Errorf("column %d: templates do not nest: {%s}", j+1, inner)
					}
					e, err := parseExprString(inner)
					if err != nil {
						return nil, fmt.Errorf("column %d: in template {%s}: %v", j+1, inner, err)
					}
					if lit.Len() > 0 {
						parts = append(parts, namePart{lit: lit.String()})
						lit.Reset()
					}
					parts = append(parts, namePart{e: e})
					j = k
					continue
				}
				lit.WriteByte(src[j])
				j++
			}
			if lit.Len() > 0 {
				parts = append(parts, namePart{lit: lit.String()})
			}
			toks = append(toks, token{kind: tName, text: src[i:j], col: i + 1, parts: parts})
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("column %d: unterminated string", i+1)
			}
			toks = append(toks, token{kind: tStr, text: src[i+1 : j], col: i + 1})
			i = j + 1
		case c == '<' && i+1 < len(src) && src[i+1] == '-':
			toks = append(toks, token{kind: tPunct, text: "<-", col: i + 1})
			i += 2
		case strings.IndexByte("()[],=+-*/%", c) >= 0:
			toks = append(toks, token{kind: tPunct, text: string(c), col: i + 1})
			i++
		default:
			r, _ := utf8.DecodeRuneInString(src[i:])
			if r == utf8.RuneError {
				return nil, fmt.Errorf("column %d: unexpected byte 0x%02x (not UTF-8)", i+1, c)
			}
			return nil, fmt.Errorf("column %d: unexpected character %q (U+%04X); names are ASCII letters, digits, _ and .", i+1, r, r)
		}
	}
	toks = append(toks, token{kind: tEOF, col: len(src) + 1})
	return toks, nil
}

func parseExprString(src string) (*expr, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &exprParser{src: src, toks: toks}
	e, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, fmt.Errorf("column %d: unexpected %s after the expression", t.col, describeTok(t))
	}
	return e, nil
}

// statement is a parsed body line.
type statement struct {
	targets []*expr // eName targets (one, or several for a multi-output op)
	update  bool    // "name <- expr"
	rhs     *expr
}

func parseStatement(src string) (*statement, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &exprParser{src: src, toks: toks}
	st := &statement{}
	for {
		t := p.next()
		if t.kind != tName {
			return nil, fmt.Errorf("column %d: a statement starts with a name to assign (\"x = op(...)\" or \"state <- op(...)\"), got %s", t.col, describeTok(t))
		}
		st.targets = append(st.targets, &expr{kind: eName, str: t.text, parts: t.parts, col: t.col})
		if p.peek().text != "," {
			break
		}
		p.next()
	}
	switch t := p.next(); {
	case t.kind == tPunct && t.text == "=":
	case t.kind == tPunct && t.text == "<-":
		if len(st.targets) != 1 {
			return nil, fmt.Errorf("column %d: a state update has one target", t.col)
		}
		st.update = true
	default:
		return nil, fmt.Errorf("column %d: want '=' or '<-' after %s, got %s", t.col, st.targets[len(st.targets)-1].str, describeTok(t))
	}
	st.rhs, err = p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, fmt.Errorf("column %d: unexpected %s after the expression", t.col, describeTok(t))
	}
	return st, nil
}

func describeTok(t token) string {
	switch t.kind {
	case tEOF:
		return "end of statement"
	case tStr:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

func (p *exprParser) peek() token { return p.toks[p.i] }

func (p *exprParser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *exprParser) expect(s string) error {
	t := p.next()
	if t.kind != tPunct || t.text != s {
		return fmt.Errorf("column %d: want '%s', got %s", t.col, s, describeTok(t))
	}
	return nil
}

func (p *exprParser) expr() (*expr, error) {
	l, err := p.term()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t.kind == tPunct && (t.text == "+" || t.text == "-"); t = p.peek() {
		p.next()
		r, err := p.term()
		if err != nil {
			return nil, err
		}
		l = &expr{kind: eBin, op: t.text[0], l: l, r: r, col: t.col}
	}
	return l, nil
}

func (p *exprParser) term() (*expr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t.kind == tPunct && (t.text == "*" || t.text == "/" || t.text == "%"); t = p.peek() {
		p.next()
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		l = &expr{kind: eBin, op: t.text[0], l: l, r: r, col: t.col}
	}
	return l, nil
}

func (p *exprParser) unary() (*expr, error) {
	if t := p.peek(); t.kind == tPunct && t.text == "-" {
		p.next()
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxDepth {
			return nil, fmt.Errorf("expression nested too deeply")
		}
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		if x.kind == eNum {
			x.num = -x.num
			x.col = t.col
			return x, nil
		}
		return &expr{kind: eNeg, l: x, col: t.col}, nil
	}
	return p.primary()
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 200

func (p *exprParser) primary() (*expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, fmt.Errorf("expression nested too deeply")
	}
	t := p.next()
	switch t.kind {
	case tNum:
		isInt := !strings.ContainsAny(t.text, ".eE")
		if isInt {
			v, err := strconv.ParseInt(t.text, 10, 64)
			if err != nil || v > maxInt {
				return nil, fmt.Errorf("column %d: integer %s is out of range (at most %d)", t.col, cut(t.text), maxInt)
			}
			return &expr{kind: eNum, num: float64(v), isInt: true, col: t.col}, nil
		}
		v, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("column %d: bad number %s (out of the float range?)", t.col, cut(t.text))
		}
		return &expr{kind: eNum, num: v, col: t.col}, nil
	case tStr:
		return &expr{kind: eStr, str: t.text, col: t.col}, nil
	case tName:
		if p.peek().text != "(" {
			return &expr{kind: eName, str: t.text, parts: t.parts, col: t.col}, nil
		}
		p.next()
		call := &expr{kind: eCall, str: t.text, parts: t.parts, col: t.col}
		if p.peek().text == ")" {
			p.next()
			return call, nil
		}
		for {
			a := p.peek()
			if a.kind == tName && p.toks[p.i+1].text == "=" {
				p.i += 2
				v, err := p.expr()
				if err != nil {
					return nil, err
				}
				for _, k := range call.kw {
					if k.name == a.text {
						return nil, fmt.Errorf("column %d: attribute %s given twice", a.col, a.text)
					}
				}
				call.kw = append(call.kw, kwarg{name: a.text, val: v, col: a.col})
			} else {
				if len(call.kw) > 0 {
					return nil, fmt.Errorf("column %d: positional argument after attributes", a.col)
				}
				v, err := p.expr()
				if err != nil {
					return nil, err
				}
				call.args = append(call.args, v)
			}
			switch n := p.next(); {
			case n.text == ",":
				continue
			case n.text == ")":
				return call, nil
			default:
				return nil, fmt.Errorf("column %d: want ',' or ')' in the arguments of %s, got %s", n.col, t.text, describeTok(n))
			}
		}
	case tPunct:
		switch t.text {
		case "(":
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			l := &expr{kind: eList, col: t.col}
			if p.peek().text == "]" {
				p.next()
				return l, nil
			}
			for {
				e, err := p.expr()
				if err != nil {
					return nil, err
				}
				l.args = append(l.args, e)
				switch n := p.next(); n.text {
				case ",":
					continue
				case "]":
					return l, nil
				default:
					return nil, fmt.Errorf("column %d: want ',' or ']' in a list, got %s", n.col, describeTok(n))
				}
			}
		}
	}
	return nil, fmt.Errorf("column %d: want an expression, got %s", t.col, describeTok(t))
}

// maxInt bounds every integer of a static expression: a literal, a dimension and every
// intermediate result (2^41 - 1024, about 2.2e12: far above any dimension, and small enough that
// a sum of two never overflows an int).
const maxInt = math.MaxInt32 * 1024

func absU(x int) uint64 {
	if x < 0 {
		return uint64(-x)
	}
	return uint64(x)
}

// cut shortens a long piece of source for a message.
func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// num is the value of a static (dimension) expression: an int or a float.
type num struct {
	isInt bool
	i     int
	f     float64
}

func (n num) float() float64 {
	if n.isInt {
		return float64(n.i)
	}
	return n.f
}

func (n num) String() string {
	if n.isInt {
		return strconv.Itoa(n.i)
	}
	return strconv.FormatFloat(n.f, 'g', -1, 64)
}

// evalNum evaluates a static expression. lookup resolves names (dimensions and loop variables);
// it returns false for names that are not static. Integer operands give integer results ("/"
// truncates); a float anywhere makes the result a float. sqrt is the one built-in function.
func evalNum(e *expr, lookup func(string) (int, bool)) (num, error) {
	switch e.kind {
	case eNum:
		if e.isInt {
			return num{isInt: true, i: int(e.num)}, nil
		}
		return num{f: e.num}, nil
	case eName:
		if len(e.parts) != 1 || e.parts[0].e != nil {
			return num{}, fmt.Errorf("%s is not a dimension", e.str)
		}
		v, ok := lookup(e.str)
		if !ok {
			return num{}, fmt.Errorf("unknown dimension %s", e.str)
		}
		return num{isInt: true, i: v}, nil
	case eNeg:
		x, err := evalNum(e.l, lookup)
		if err != nil {
			return num{}, err
		}
		x.i, x.f = -x.i, -x.f
		return x, nil
	case eCall:
		if e.str != "sqrt" || len(e.args) != 1 || len(e.kw) != 0 {
			return num{}, fmt.Errorf("%s(...) is not allowed in a dimension expression (only sqrt(x))", e.str)
		}
		x, err := evalNum(e.args[0], lookup)
		if err != nil {
			return num{}, err
		}
		if x.float() < 0 {
			return num{}, fmt.Errorf("sqrt of negative %s", x)
		}
		return num{f: math.Sqrt(x.float())}, nil
	case eBin:
		a, err := evalNum(e.l, lookup)
		if err != nil {
			return num{}, err
		}
		b, err := evalNum(e.r, lookup)
		if err != nil {
			return num{}, err
		}
		if a.isInt && b.isInt {
			// Operands are within ±maxInt, so a sum fits an int; a product is checked before it
			// is formed (a wrapped product such as 4294967296*4294967296 would read as 0).
			var r int
			switch e.op {
			case '+':
				r = a.i + b.i
			case '-':
				r = a.i - b.i
			case '*':
				hi, lo := bits.Mul64(absU(a.i), absU(b.i))
				if hi != 0 || lo > maxInt {
					return num{}, fmt.Errorf("%s overflows: %s × %s is more than %d", e, a, b, maxInt)
				}
				r = a.i * b.i
			case '/', '%':
				if b.i == 0 {
					return num{}, fmt.Errorf("division by zero in %s", e)
				}
				if e.op == '/' {
					r = a.i / b.i
				} else {
					r = a.i % b.i
				}
			}
			if r > maxInt || r < -maxInt {
				return num{}, fmt.Errorf("%s overflows: %d is beyond ±%d", e, r, maxInt)
			}
			return num{isInt: true, i: r}, nil
		}
		x, y := a.float(), b.float()
		switch e.op {
		case '+':
			return num{f: x + y}, nil
		case '-':
			return num{f: x - y}, nil
		case '*':
			return num{f: x * y}, nil
		case '/':
			return num{f: x / y}, nil
		}
		return num{}, fmt.Errorf("%% needs integers in %s", e)
	}
	return num{}, fmt.Errorf("%s is not a number", e)
}
