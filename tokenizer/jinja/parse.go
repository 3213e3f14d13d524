package jinja

import (
	"fmt"
	"strconv"
)

// The syntax tree. Statements are nodes; expressions are exprs. Each carries the source line
// it starts on, for errors.

type node interface{ nodeLine() int }

type (
	textNode struct {
		line int
		text string
	}
	outputNode struct {
		line int
		x    expr
	}
	ifNode struct {
		line  int
		conds []expr
		bodys [][]node
		els   []node
	}
	forNode struct {
		line      int
		target    expr // nameExpr or tupleExpr of names
		iter      expr
		cond      expr // nil: none
		body, els []node
		recursive bool
	}
	setNode struct {
		line   int
		target expr // nameExpr, tupleExpr of names, or attrExpr on a name (namespace)
		x      expr
	}
	setBlockNode struct {
		line    int
		target  expr
		filters []*filterExpr // applied to the body's text (their x is nil)
		body    []node
	}
	macroNode struct {
		line     int
		name     string
		params   []string
		defaults []expr // aligned to the last len(defaults) params
		body     []node
	}
	filterBlockNode struct {
		line    int
		filters []*filterExpr
		body    []node
	}
	loopCtlNode struct {
		line  int
		brk   bool
		label string
	}
	withNode struct {
		line    int
		targets []expr
		values  []expr
		body    []node
	}
	// generationNode is transformers' {% generation %} tag (its AssistantTracker extension): the
	// body renders as it is.
	generationNode struct {
		line int
		body []node
	}
)

func (n *textNode) nodeLine() int        { return n.line }
func (n *outputNode) nodeLine() int      { return n.line }
func (n *ifNode) nodeLine() int          { return n.line }
func (n *forNode) nodeLine() int         { return n.line }
func (n *setNode) nodeLine() int         { return n.line }
func (n *setBlockNode) nodeLine() int    { return n.line }
func (n *macroNode) nodeLine() int       { return n.line }
func (n *filterBlockNode) nodeLine() int { return n.line }
func (n *loopCtlNode) nodeLine() int     { return n.line }
func (n *withNode) nodeLine() int        { return n.line }
func (n *generationNode) nodeLine() int  { return n.line }

type expr interface{ exprLine() int }

type (
	constExpr struct {
		line int
		v    any
	}
	nameExpr struct {
		line int
		name string
	}
	attrExpr struct { // x.name
		line int
		x    expr
		name string
	}
	itemExpr struct { // x[key]
		line int
		x    expr
		key  expr
	}
	sliceExpr struct { // the key of x[a:b:c]; nil parts are absent
		line              int
		start, stop, step expr
	}
	callExpr struct {
		line   int
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		line   int
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		line   int
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
		negate bool
	}
	binExpr struct { // + - * / // % ** ~ and or
		line int
		op   string
		l, r expr
	}
	unaryExpr struct { // - + not
		line int
		op   string
		x    expr
	}
	compareExpr struct {
		line int
		x    expr
		ops  []string // == != < <= > >= in notin
		ys   []expr
	}
	condExpr struct {
		line       int
		test, a, b expr // b nil: undefined
	}
	listExpr struct {
		line  int
		items []expr
	}
	tupleExpr struct {
		line  int
		items []expr
	}
	dictExpr struct {
		line       int
		keys, vals []expr
	}
)

type kwarg struct {
	name string
	x    expr
}

func (e *constExpr) exprLine() int   { return e.line }
func (e *nameExpr) exprLine() int    { return e.line }
func (e *attrExpr) exprLine() int    { return e.line }
func (e *itemExpr) exprLine() int    { return e.line }
func (e *sliceExpr) exprLine() int   { return e.line }
func (e *callExpr) exprLine() int    { return e.line }
func (e *filterExpr) exprLine() int  { return e.line }
func (e *testExpr) exprLine() int    { return e.line }
func (e *binExpr) exprLine() int     { return e.line }
func (e *unaryExpr) exprLine() int   { return e.line }
func (e *compareExpr) exprLine() int { return e.line }
func (e *condExpr) exprLine() int    { return e.line }
func (e *listExpr) exprLine() int    { return e.line }
func (e *tupleExpr) exprLine() int   { return e.line }
func (e *dictExpr) exprLine() int    { return e.line }

type parser struct {
	name string
	toks []token
	pos  int
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }
func (p *parser) peek(k int) token {
	if p.pos+k < len(p.toks) {
		return p.toks[p.pos+k]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) errf(line int, format string, args ...any) error {
	return &Error{Source: p.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tName && t.val == name
}

func (p *parser) expectOp(op string) error {
	if !p.isOp(op) {
		return p.errf(p.cur().line, "expected '%s', got %s", op, p.cur())
	}
	p.pos++
	return nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.errf(p.cur().line, "expected end of statement block, got %s", p.cur())
	}
	p.pos++
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.errf(t.line, "expected a name, got %s", t)
	}
	p.pos++
	return t.val, nil
}

// parseTemplate parses the whole token list.
func parseTemplate(name string, toks []token) ([]node, error) {
	p := &parser{name: name, toks: toks}
	body, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errf(p.cur().line, "unexpected '%s'", end)
	}
	return body, nil
}

// parseBody parses nodes until a block tag whose first name is in ends (left unconsumed after
// its name: the name is returned) or the end of the template ("").
func (p *parser) parseBody(ends []string) ([]node, string, error) {
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.errf(t.line, "unexpected end of template: expected %s", quoteList(ends))
			}
			return body, "", nil
		case tData:
			p.pos++
			body = append(body, &textNode{t.line, t.val})
		case tVarBegin:
			p.pos++
			x, err := p.parseTuple(false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.errf(p.cur().line, "expected end of print statement, got %s", p.cur())
			}
			p.pos++
			body = append(body, &outputNode{t.line, x})
		case tBlockBegin:
			p.pos++
			kw := p.cur()
			if kw.kind != tName {
				return nil, "", p.errf(kw.line, "expected a statement name, got %s", kw)
			}
			for _, e := range ends {
				if kw.val == e {
					p.pos++
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, n)
		default:
			return nil, "", p.errf(t.line, "unexpected %s", t)
		}
	}
}

func quoteList(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " or "
		}
		out += "'" + x + "'"
	}
	return out
}

func (p *parser) parseStatement() (node, error) {
	kw := p.next()
	line := kw.line
	switch kw.val {
	case "if":
		n := &ifNode{line: line}
		for {
			c, err := p.parseTuple(false)
			if err != nil {
				return nil, err
			}
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			body, end, err := p.parseBody([]string{"elif", "else", "endif"})
			if err != nil {
				return nil, err
			}
			n.conds = append(n.conds, c)
			n.bodys = append(n.bodys, body)
			switch end {
			case "elif":
				continue
			case "else":
				if err := p.expectBlockEnd(); err != nil {
					return nil, err
				}
				if n.els, _, err = p.parseBody([]string{"endif"}); err != nil {
					return nil, err
				}
			}
			return n, p.expectBlockEnd()
		}
	case "for":
		n := &forNode{line: line}
		var err error
		if n.target, err = p.parseAssignTarget(false); err != nil {
			return nil, err
		}
		if !p.isName("in") {
			return nil, p.errf(p.cur().line, "expected 'in', got %s", p.cur())
		}
		p.pos++
		if n.iter, err = p.parseTupleNoCond(); err != nil {
			return nil, err
		}
		if p.isName("if") {
			p.pos++
			if n.cond, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		if p.isName("recursive") {
			p.pos++
			n.recursive = true
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"endfor", "else"})
		if err != nil {
			return nil, err
		}
		n.body = body
		if end == "else" {
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.parseBody([]string{"endfor"}); err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	case "set":
		target, err := p.parseAssignTarget(true)
		if err != nil {
			return nil, err
		}
		if p.isOp("=") {
			p.pos++
			x, err := p.parseTuple(false)
			if err != nil {
				return nil, err
			}
			return &setNode{line, target, x}, p.expectBlockEnd()
		}
		n := &setBlockNode{line: line, target: target}
		for p.isOp("|") {
			p.pos++
			f, err := p.parseFilter(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.parseBody([]string{"endset"}); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "macro":
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n := &macroNode{line: line, name: name}
		if err := p.expectOp("("); err != nil {
			return nil, err
		}
		for !p.isOp(")") {
			if len(n.params) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
				if p.isOp(")") {
					break
				}
			}
			a, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.params = append(n.params, a)
			if p.isOp("=") {
				p.pos++
				d, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				n.defaults = append(n.defaults, d)
			} else if len(n.defaults) > 0 {
				return nil, p.errf(p.cur().line, "non-default argument follows default argument")
			}
		}
		p.pos++
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.parseBody([]string{"endmacro"}); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "filter":
		n := &filterBlockNode{line: line}
		for {
			f, err := p.parseFilter(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
			if !p.isOp("|") {
				break
			}
			p.pos++
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		var err error
		if n.body, _, err = p.parseBody([]string{"endfilter"}); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "break", "continue":
		return &loopCtlNode{line: line, brk: kw.val == "break"}, p.expectBlockEnd()
	case "with":
		n := &withNode{line: line}
		for p.cur().kind != tBlockEnd {
			if len(n.targets) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			t, err := p.parseAssignTarget(false)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("="); err != nil {
				return nil, err
			}
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, t)
			n.values = append(n.values, v)
		}
		p.pos++
		var err error
		if n.body, _, err = p.parseBody([]string{"endwith"}); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "generation":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &generationNode{line, body}, p.expectBlockEnd()
	}
	return nil, p.errf(line, "encountered unknown tag '%s'", kw.val)
}

// parseAssignTarget parses a name, names separated by commas, or (with attr) name.attr.
func (p *parser) parseAssignTarget(attr bool) (expr, error) {
	line := p.cur().line
	var items []expr
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var t expr = &nameExpr{line, name}
		if attr && p.isOp(".") && len(items) == 0 {
			p.pos++
			a, err := p.expectName()
			if err != nil {
				return nil, err
			}
			return &attrExpr{line, t, a}, nil
		}
		items = append(items, t)
		if !p.isOp(",") {
			break
		}
		p.pos++
	}
	if len(items) == 1 {
		return items[0], nil
	}
	return &tupleExpr{line, items}, nil
}

// parseTuple parses an expression, or several separated by commas (a tuple without
// parentheses).
func (p *parser) parseTuple(simplified bool) (expr, error) {
	line := p.cur().line
	var items []expr
	comma := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.pos++
			comma = true
		}
		if p.tupleEnds() {
			break
		}
		x, err := p.parseExpression(!simplified)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !comma {
		if len(items) == 0 {
			return nil, p.errf(line, "expected an expression, got %s", p.cur())
		}
		return items[0], nil
	}
	return &tupleExpr{line, items}, nil
}

// parseTupleNoCond is the iterable of a for: no conditional expression (its "if" is the
// loop's filter).
func (p *parser) parseTupleNoCond() (expr, error) { return p.parseTuple(true) }

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")" || t.val == "]" || t.val == "}" || t.val == "="
	case tName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	x, err := p.parseOr()
	if err != nil || !withCond {
		return x, err
	}
	for p.isName("if") {
		line := p.next().line
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{line: line, test: test, a: x}
		if p.isName("else") {
			p.pos++
			if c.b, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		x = c
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	for err == nil && p.isName("or") {
		line := p.next().line
		var r expr
		if r, err = p.parseAnd(); err == nil {
			x = &binExpr{line, "or", x, r}
		}
	}
	return x, err
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	for err == nil && p.isName("and") {
		line := p.next().line
		var r expr
		if r, err = p.parseNot(); err == nil {
			x = &binExpr{line, "and", x, r}
		}
	}
	return x, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{line, "not", x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{line: line, x: x}
	for {
		t := p.cur()
		op := ""
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.pos++
		case t.kind == tName && t.val == "in":
			op = "in"
			p.pos++
		case t.kind == tName && t.val == "not" && p.peek(1).kind == tName && p.peek(1).val == "in":
			op = "notin"
			p.pos += 2
		}
		if op == "" {
			break
		}
		y, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.ys = append(c.ys, y)
	}
	if len(c.ops) == 0 {
		return x, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		t := p.next()
		var r expr
		if r, err = p.parseConcat(); err == nil {
			x = &binExpr{t.line, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	for err == nil && p.isOp("~") {
		t := p.next()
		var r expr
		if r, err = p.parseMath2(); err == nil {
			x = &binExpr{t.line, "~", x, r}
		}
	}
	return x, err
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		t := p.next()
		var r expr
		if r, err = p.parsePow(); err == nil {
			x = &binExpr{t.line, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		t := p.next()
		var r expr
		if r, err = p.parseUnary(true); err == nil {
			x = &binExpr{t.line, "**", x, r}
		}
	}
	return x, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.cur()
	var x expr
	var err error
	if t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.pos++
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{t.line, t.val, inner}
	} else {
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.pos++
		switch t.val {
		case "true", "True":
			return &constExpr{t.line, true}, nil
		case "false", "False":
			return &constExpr{t.line, false}, nil
		case "none", "None":
			return &constExpr{t.line, nil}, nil
		}
		return &nameExpr{t.line, t.val}, nil
	case tString:
		p.pos++
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{t.line, s}, nil
	case tInt:
		p.pos++
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, p.errf(t.line, "integer %s out of range", t.val)
		}
		return &constExpr{t.line, n}, nil
	case tFloat:
		p.pos++
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errf(t.line, "bad float %s", t.val)
		}
		return &constExpr{t.line, f}, nil
	case tOp:
		switch t.val {
		case "(":
			p.pos++
			if p.isOp(")") {
				p.pos++
				return &tupleExpr{t.line, nil}, nil
			}
			x, err := p.parseTuple(false)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.pos++
			l := &listExpr{line: t.line}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.pos++
			return l, nil
		case "{":
			p.pos++
			d := &dictExpr{line: t.line}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.pos++
			return d, nil
		}
	}
	return nil, p.errf(t.line, "unexpected %s", t)
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		t := p.cur()
		switch {
		case t.kind == tOp && t.val == ".":
			p.pos++
			a := p.next()
			switch a.kind {
			case tName:
				x = &attrExpr{t.line, x, a.val}
			case tInt:
				n, _ := strconv.ParseInt(a.val, 10, 64)
				x = &itemExpr{t.line, x, &constExpr{a.line, n}}
			default:
				return nil, p.errf(a.line, "expected a name after '.', got %s", a)
			}
		case t.kind == tOp && t.val == "[":
			p.pos++
			key, err := p.parseSubscript()
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("]"); err != nil {
				return nil, err
			}
			x = &itemExpr{t.line, x, key}
		case t.kind == tOp && t.val == "(":
			c, err := p.parseCall(x)
			if err != nil {
				return nil, err
			}
			x = c
		default:
			return x, nil
		}
	}
}

func (p *parser) parseSubscript() (expr, error) {
	line := p.cur().line
	var parts [3]expr
	colons := 0
	for i := 0; i < 3; i++ {
		if !p.isOp(":") && !p.isOp("]") {
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			parts[i] = x
		}
		if i == 2 || !p.isOp(":") {
			break
		}
		p.pos++
		colons++
	}
	if colons == 0 {
		if parts[0] == nil {
			return nil, p.errf(line, "expected a subscript, got %s", p.cur())
		}
		return parts[0], nil
	}
	return &sliceExpr{line, parts[0], parts[1], parts[2]}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	for !p.isOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.cur().kind == tName && p.peek(1).kind == tOp && p.peek(1).val == "=" {
			name := p.next().val
			p.pos++
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name, x})
			continue
		}
		if len(kwargs) > 0 {
			return nil, nil, p.errf(p.cur().line, "positional argument follows keyword argument")
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, x)
	}
	p.pos++
	return args, kwargs, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kwargs, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{line, fn, args, kwargs}, nil
}

// parseFilter parses "name[(args)]" after a "|" (already consumed).
func (p *parser) parseFilter(x expr) (*filterExpr, error) {
	line := p.cur().line
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.pos++
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	f := &filterExpr{line: line, x: x, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.pos++
			f, err := p.parseFilter(x)
			if err != nil {
				return nil, err
			}
			x = f
		case p.isName("is"):
			line := p.next().line
			t := &testExpr{line: line, x: x}
			if p.isName("not") {
				p.pos++
				t.negate = true
			}
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			for p.isOp(".") {
				p.pos++
				n, err := p.expectName()
				if err != nil {
					return nil, err
				}
				name += "." + n
			}
			t.name = name
			c := p.cur()
			switch {
			case c.kind == tOp && c.val == "(":
				if t.args, t.kwargs, err = p.parseCallArgs(); err != nil {
					return nil, err
				}
			case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat ||
				c.kind == tOp && (c.val == "[" || c.val == "{")) &&
				!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
				if c.kind == tName && c.val == "is" {
					return nil, p.errf(c.line, "You cannot chain multiple tests with is")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			x = t
		case p.isOp("("):
			c, err := p.parseCall(x)
			if err != nil {
				return nil, err
			}
			x = c
		default:
			return x, nil
		}
	}
}
