package tokenizer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is a small backtracking regular-expression engine for the patterns that tokenizer.json
// files declare (Split pre-tokenizers, Replace normalizers and decoders).
//
// Why not Go's regexp: the Hugging Face library runs these patterns with Oniguruma, a backtracking
// engine with Perl semantics (leftmost-first alternation, greedy quantifiers that give back), and
// the patterns rely on that: `\s+(?!\S)` is a negative lookahead, which RE2 cannot express, and
// `(?i:'s|'t)` must fold case the Unicode way (`'ſ` matches). Go's `\s` is ASCII-only, where
// Oniguruma's is the Unicode White_Space property (it matches U+0085 and not U+FEFF). Rewriting a
// pattern into RE2 plus a post-pass would have to be redone, and re-proved, for every pattern a file
// may declare; a faithful engine for the subset these files use is smaller.
//
// Supported: literals and escapes (\t \n \r \f \v \a \e \0 \xHH \x{H…} \uHHHH, escaped
// punctuation), `.`, classes `[...]` with ranges, negation and escapes inside, \s \S \d \D \w \W
// \h \H, \p{…} \P{…} \p{^…} with Unicode general categories and scripts, groups `(…)` `(?:…)`
// `(?i:…)` `(?-i:…)` `(?i)`, atomic groups `(?>…)`, lookahead `(?=…)` `(?!…)`, quantifiers
// `* + ? {n} {n,} {n,m}` greedy, lazy (`?` suffix) and possessive (`+` suffix), anchors `^ $ \A \z
// \Z \b \B`. Not supported (an error naming the pattern and position): lookbehind, backreferences,
// named groups, class intersection, and a repeated group that can match the empty string.
//
// Limits: case-insensitive matching folds literal characters and ranges by Unicode simple case
// folding (Go's unicode.SimpleFold orbits); it does not fold property classes (`(?i)\p{Lu}` matches
// upper case only) or apply multi-character folds (ß against "ss"). The Unicode tables are Go's
// (Unicode 15.0).
//
// Time and memory are bounded, whatever the pattern and the text (a tokenizer.json is input, and
// so is the text): a pattern is at most maxPatternBytes long, nests groups at most maxNesting
// deep and compiles to at most maxInsts instructions (counted repetitions expanded), else it is
// refused when the tokenizer loads. Matching runs the backtracking machine, which is fast on the
// patterns tokenizers declare, under a budget of steps proportional to the text (stepsPerByte)
// and a bounded stack; a search that exceeds either, which only a pattern with nested or
// overlapping repeats such as `(a+)+$` does, is finished by solve: a dynamic program over the
// positions of the text that computes the same matches (the first in priority order, which
// depends only on the instruction and the position, since there are no captures) in time
// O(instructions × text) and memory O(text). So `(a+)+$` on 10^6 a's takes milliseconds, not
// forever.

// reClass is a set of runes. ascii holds the membership of runes below 128, negation applied;
// items and neg decide the others.
type reClass struct {
	ascii [2]uint64
	neg   bool
	items []classItem
}

type classItem struct {
	lo, hi rune                // a range when table and fn are nil
	table  *unicode.RangeTable // a property
	fn     func(rune) bool     // a property without a Go table (\w, Alphabetic…)
	not    bool                // the item is the complement of table/fn (\S, \P{L} inside a class)
}

func (it *classItem) match(r rune) bool {
	var m bool
	switch {
	case it.table != nil:
		m = unicode.Is(it.table, r)
	case it.fn != nil:
		m = it.fn(r)
	default:
		m = it.lo <= r && r <= it.hi
	}
	return m != it.not
}

func (c *reClass) slowHas(r rune) bool {
	for i := range c.items {
		if c.items[i].match(r) {
			return !c.neg
		}
	}
	return c.neg
}

// has reports whether r is in the class.
func (c *reClass) has(r rune) bool {
	if r >= 0 && r < 128 {
		return c.ascii[r>>6]>>(uint(r)&63)&1 != 0
	}
	return c.slowHas(r)
}

// finish computes the ASCII bitmap once the items are known.
func (c *reClass) finish() *reClass {
	c.ascii = [2]uint64{}
	for r := rune(0); r < 128; r++ {
		if c.slowHas(r) {
			c.ascii[r>>6] |= 1 << (uint(r) & 63)
		}
	}
	return c
}

type reOp uint8

const (
	nClass reOp = iota
	nEmpty
	nConcat
	nAlt
	nRepeat
	nLook
	nAtomic
	nAssert
)

type assertKind uint8

const (
	aBeginText assertKind = iota // \A
	aEndText                     // \z
	aEndTextNL                   // \Z: end, or before a final \n
	aBeginLine                   // ^
	aEndLine                     // $
	aWordB                       // \b
	aNotWordB                    // \B
)

type reNode struct {
	op         reOp
	subs       []*reNode
	class      *reClass
	min, max   int // repeat bounds, max < 0: unbounded
	greedy     bool
	possessive bool
	neg        bool // negative lookahead
	assert     assertKind
}

// Regex is a compiled pattern. It is safe for concurrent use.
type Regex struct {
	src   string
	progs []reProg // progs[0] is the pattern; the others are lookahead and atomic bodies
	// ninsts counts the instructions of all programs (bounded by maxInsts).
	ninsts int
}

type instOp uint8

const (
	iClass instOp = iota
	iSplit        // try x, on failure y
	iJmp
	iMatch
	iLook   // x: program; y: 1 when negative
	iAtomic // x: program
	iAssert // x: assertKind
)

type inst struct {
	op    instOp
	x, y  int32
	class *reClass
}

type reProg struct {
	insts []inst
	first []firstSet // first[pc]: what a match continuing at pc can start with
	// order lists the pcs so that every instruction comes after those it continues to at the
	// same position (split and jump targets, the instruction after an assertion, lookahead or
	// atomic group): the order solve evaluates a position in. Such edges form no cycle, since a
	// repeated item that can match the empty string is refused.
	order []int32
}

// firstSet over-approximates the first byte a match from some pc consumes: the ASCII bytes in
// ascii, any non-ASCII rune when nonASCII, and anything at all (even no byte: the match may
// succeed without consuming, or the instruction is a lookaround) when any. The machine uses it
// to skip alternatives that cannot match here, which is most of them.
type firstSet struct {
	ascii    [2]uint64
	nonASCII bool
	any      bool
}

func (f *firstSet) canStart(s string, pos int) bool {
	if f.any {
		return true
	}
	if pos >= len(s) {
		return false
	}
	if b := s[pos]; b < utf8.RuneSelf {
		return f.ascii[b>>6]>>(b&63)&1 != 0
	}
	return f.nonASCII
}

func (f *firstSet) union(g firstSet) bool {
	n := firstSet{[2]uint64{f.ascii[0] | g.ascii[0], f.ascii[1] | g.ascii[1]}, f.nonASCII || g.nonASCII, f.any || g.any}
	changed := n != *f
	*f = n
	return changed
}

// classNonASCII reports whether a class may hold a rune of 128 or above.
func classNonASCII(c *reClass) bool {
	if c.neg {
		return true
	}
	for _, it := range c.items {
		if it.table != nil || it.fn != nil || it.not || it.hi >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// computeFirst fills p.first: a fixed point (loops make the graph cyclic), by a worklist so that
// the work is bounded by the instructions times the 130 bits a set can gain, whatever the order.
func (p *reProg) computeFirst() {
	n := len(p.insts)
	p.first = make([]firstSet, n)
	preds := make([][]int32, n)
	for pc := range p.insts {
		in := &p.insts[pc]
		switch in.op {
		case iSplit:
			preds[in.x] = append(preds[in.x], int32(pc))
			preds[in.y] = append(preds[in.y], int32(pc))
		case iJmp:
			preds[in.x] = append(preds[in.x], int32(pc))
		}
	}
	work := make([]int32, 0, n)
	queued := make([]bool, n)
	for pc := n - 1; pc >= 0; pc-- {
		work = append(work, int32(pc))
		queued[pc] = true
	}
	for len(work) > 0 {
		pc := work[len(work)-1]
		work = work[:len(work)-1]
		queued[pc] = false
		in := &p.insts[pc]
		var f firstSet
		switch in.op {
		case iClass:
			f = firstSet{ascii: in.class.ascii, nonASCII: classNonASCII(in.class)}
		case iSplit:
			f = p.first[in.x]
			f.union(p.first[in.y])
		case iJmp:
			f = p.first[in.x]
		default:
			f.any = true
		}
		if p.first[pc].union(f) {
			for _, q := range preds[pc] {
				if !queued[q] {
					queued[q] = true
					work = append(work, q)
				}
			}
		}
	}
}

// computeOrder fills p.order (see reProg), or fails on a cycle of instructions that consume
// nothing (which the parser's nullable check should have refused).
func (p *reProg) computeOrder() error {
	n := len(p.insts)
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, n)
	p.order = make([]int32, 0, n)
	type frame struct {
		pc   int32
		next int // successors visited
	}
	succ := func(pc int32, i int) (int32, bool) {
		in := &p.insts[pc]
		switch in.op {
		case iSplit:
			switch i {
			case 0:
				return in.x, true
			case 1:
				return in.y, true
			}
		case iJmp:
			if i == 0 {
				return in.x, true
			}
		case iLook, iAtomic, iAssert:
			if i == 0 {
				return pc + 1, true
			}
		}
		return 0, false
	}
	var stack []frame
	for root := range n {
		if color[root] != white {
			continue
		}
		color[root] = grey
		stack = append(stack[:0], frame{pc: int32(root)})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			s, ok := succ(f.pc, f.next)
			if !ok {
				color[f.pc] = black
				p.order = append(p.order, f.pc)
				stack = stack[:len(stack)-1]
				continue
			}
			f.next++
			switch color[s] {
			case grey:
				return fmt.Errorf("a loop that can repeat without consuming input")
			case white:
				color[s] = grey
				stack = append(stack, frame{pc: s})
			}
		}
	}
	return nil
}

// Bounds on a pattern (see the file comment): they keep a hostile tokenizer.json from making
// the compiler or the matcher take unbounded time or memory. The patterns tokenizers declare
// are a few hundred bytes and a few hundred instructions.
const (
	// maxRepeat bounds counted repetition, whose copies the compiler expands.
	maxRepeat = 1000
	// maxPatternBytes bounds a pattern's length, checked before it is parsed.
	maxPatternBytes = 64 << 10
	// maxNesting bounds how deep groups nest (the parser recurses per group).
	maxNesting = 200
	// maxInsts bounds the instructions of all a pattern's programs together: the compiled
	// size, and the work per text position when solve runs.
	maxInsts = 1 << 14
	// maxSubprograms bounds lookaheads and atomic groups: solve keeps an array over the text
	// for each atomic group.
	maxSubprograms = 64
)

// Matching budget: a search may take stepsBase + stepsPerByte × len(text) machine steps in all,
// and hold maxStack backtracking entries, before solve takes over.
const (
	stepsBase    = 1 << 16
	stepsPerByte = 64
	maxStack     = 1 << 20
)

// compileRegex parses and compiles pattern. Errors name the pattern and the rune offset.
func compileRegex(pattern string) (*Regex, error) {
	if len(pattern) > maxPatternBytes {
		return nil, fmt.Errorf("regex %s is longer than a pattern may be (%d bytes)", quotePattern(pattern), maxPatternBytes)
	}
	p := &reParser{src: pattern, runes: []rune(pattern)}
	n, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.runes) {
		return nil, p.errf("unbalanced ')'")
	}
	re := &Regex{src: pattern}
	re.progs = append(re.progs, reProg{})
	if err := re.compileInto(0, n); err != nil {
		return nil, fmt.Errorf("regex %s: %w", quotePattern(pattern), err)
	}
	return re, nil
}

// quotePattern quotes a pattern for a message: whole when short, else its start and its length.
func quotePattern(s string) string {
	const show = 80
	if len(s) <= 2*show {
		return strconv.Quote(s)
	}
	cut := show
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// MustCompile is compileRegex for the built-in patterns; it panics on an error in them.
func mustCompileRegex(pattern string) *Regex {
	re, err := compileRegex(pattern)
	if err != nil {
		panic(err)
	}
	return re
}

func (re *Regex) String() string { return re.src }

type reParser struct {
	src   string
	runes []rune
	pos   int
	fold  bool
	depth int // groups open
}

func (p *reParser) errf(format string, args ...any) error {
	return fmt.Errorf("regex %s at offset %d: %s", quotePattern(p.src), p.pos, fmt.Sprintf(format, args...))
}

func (p *reParser) more() bool { return p.pos < len(p.runes) }
func (p *reParser) peek() rune { return p.runes[p.pos] }

func (p *reParser) parseAlt() (*reNode, error) {
	var alts []*reNode
	for {
		c, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, c)
		if p.more() && p.peek() == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &reNode{op: nAlt, subs: alts}, nil
}

func (p *reParser) parseConcat() (*reNode, error) {
	var items []*reNode
	saved := p.fold
	defer func() { p.fold = saved }() // (?i) lasts to the end of the enclosing group
	for p.more() {
		c := p.peek()
		if c == '|' || c == ')' {
			break
		}
		atom, err := p.parseAtom()
		if err != nil {
			return nil, err
		}
		if atom == nil { // a flag group such as (?i)
			continue
		}
		atom, err = p.parseQuant(atom)
		if err != nil {
			return nil, err
		}
		items = append(items, atom)
	}
	switch len(items) {
	case 0:
		return &reNode{op: nEmpty}, nil
	case 1:
		return items[0], nil
	}
	return &reNode{op: nConcat, subs: items}, nil
}

func (p *reParser) parseQuant(atom *reNode) (*reNode, error) {
	for p.more() {
		start := p.pos
		min, max := -1, -1
		switch p.peek() {
		case '*':
			min, max = 0, -1
			p.pos++
		case '+':
			min, max = 1, -1
			p.pos++
		case '?':
			min, max = 0, 1
			p.pos++
		case '{':
			lo, hi, ok := p.parseBraces()
			if !ok { // Oniguruma reads a '{' that starts no interval as a literal
				return atom, nil
			}
			min, max = lo, hi
		default:
			return atom, nil
		}
		if atom.op == nAssert || atom.op == nLook {
			p.pos = start
			return nil, p.errf("quantifier after an assertion")
		}
		if min > maxRepeat || max > maxRepeat {
			p.pos = start
			return nil, p.errf("repeat count above %d", maxRepeat)
		}
		if max >= 0 && max < min {
			p.pos = start
			return nil, p.errf("repeat {%d,%d} has max below min", min, max)
		}
		n := &reNode{op: nRepeat, subs: []*reNode{atom}, min: min, max: max, greedy: true}
		if p.more() && p.peek() == '?' {
			n.greedy = false
			p.pos++
		} else if p.more() && p.peek() == '+' && p.runes[start] != '{' {
			n.possessive = true
			p.pos++
		}
		if nullable(atom) && (max < 0 || max > 1) {
			p.pos = start
			return nil, p.errf("a repeated item that can match the empty string is not supported")
		}
		atom = n
	}
	return atom, nil
}

// parseBraces reads {n}, {n,}, {n,m} or {,m}; ok is false (and nothing is consumed) when the brace
// starts no interval.
func (p *reParser) parseBraces() (lo, hi int, ok bool) {
	i := p.pos + 1
	num := func() (int, bool) {
		j := i
		for i < len(p.runes) && p.runes[i] >= '0' && p.runes[i] <= '9' {
			i++
		}
		if i == j {
			return 0, false
		}
		v, err := strconv.Atoi(string(p.runes[j:i]))
		return v, err == nil
	}
	lo, hasLo := num()
	if i < len(p.runes) && p.runes[i] == '}' {
		if !hasLo {
			return 0, 0, false
		}
		p.pos = i + 1
		return lo, lo, true
	}
	if i >= len(p.runes) || p.runes[i] != ',' {
		return 0, 0, false
	}
	i++
	hi, hasHi := num()
	if i >= len(p.runes) || p.runes[i] != '}' || (!hasLo && !hasHi) {
		return 0, 0, false
	}
	p.pos = i + 1
	if !hasHi {
		hi = -1
	}
	return lo, hi, true
}

func nullable(n *reNode) bool {
	switch n.op {
	case nClass:
		return false
	case nEmpty, nLook, nAssert:
		return true
	case nConcat:
		for _, s := range n.subs {
			if !nullable(s) {
				return false
			}
		}
		return true
	case nAlt:
		for _, s := range n.subs {
			if nullable(s) {
				return true
			}
		}
		return false
	case nRepeat:
		return n.min == 0 || nullable(n.subs[0])
	case nAtomic:
		return nullable(n.subs[0])
	}
	return true
}

func (p *reParser) parseAtom() (*reNode, error) {
	c := p.peek()
	switch c {
	case '(':
		return p.parseGroup()
	case '[':
		cl, err := p.parseClass()
		if err != nil {
			return nil, err
		}
		return &reNode{op: nClass, class: cl.finish()}, nil
	case '.':
		p.pos++
		return &reNode{op: nClass, class: (&reClass{neg: true, items: []classItem{{lo: '\n', hi: '\n'}}}).finish()}, nil
	case '^':
		p.pos++
		return &reNode{op: nAssert, assert: aBeginLine}, nil
	case '$':
		p.pos++
		return &reNode{op: nAssert, assert: aEndLine}, nil
	case '*', '+', '?':
		return nil, p.errf("quantifier %q with nothing to repeat", c)
	case '\\':
		return p.parseEscape()
	}
	p.pos++
	return p.literal(c), nil
}

func (p *reParser) literal(r rune) *reNode {
	cl := &reClass{}
	if p.fold {
		for f := r; ; {
			cl.items = append(cl.items, classItem{lo: f, hi: f})
			if f = unicode.SimpleFold(f); f == r {
				break
			}
		}
	} else {
		cl.items = []classItem{{lo: r, hi: r}}
	}
	return &reNode{op: nClass, class: cl.finish()}
}

func (p *reParser) parseGroup() (*reNode, error) {
	open := p.pos
	if p.depth >= maxNesting {
		return nil, p.errf("groups nested more than %d deep", maxNesting)
	}
	p.depth++
	defer func() { p.depth-- }()
	p.pos++ // (
	kind := byte(0)
	savedFold := p.fold
	if p.more() && p.peek() == '?' {
		p.pos++
		if !p.more() {
			return nil, p.errf("unterminated group")
		}
		switch c := p.peek(); c {
		case ':':
			p.pos++
		case '=', '!', '>':
			kind = byte(c)
			p.pos++
		case '<':
			return nil, p.errf("lookbehind and named groups are not supported")
		case 'i', '-', 'm', 'x':
			on := true
			for p.more() && p.peek() != ':' && p.peek() != ')' {
				switch p.peek() {
				case '-':
					on = false
				case 'i':
					p.fold = on
				case 'm', 'x':
					return nil, p.errf("flag %q is not supported", p.peek())
				default:
					return nil, p.errf("unknown group flag %q", p.peek())
				}
				p.pos++
			}
			if !p.more() {
				return nil, p.errf("unterminated group")
			}
			if p.peek() == ')' { // (?i): the flag holds to the end of the enclosing group
				p.pos++
				return nil, nil
			}
			p.pos++ // ':'
		default:
			return nil, p.errf("unsupported group (?%c", c)
		}
	}
	body, err := p.parseAlt()
	p.fold = savedFold
	if err != nil {
		return nil, err
	}
	if !p.more() || p.peek() != ')' {
		p.pos = open
		return nil, p.errf("missing ')'")
	}
	p.pos++
	switch kind {
	case '=':
		return &reNode{op: nLook, subs: []*reNode{body}}, nil
	case '!':
		return &reNode{op: nLook, subs: []*reNode{body}, neg: true}, nil
	case '>':
		return &reNode{op: nAtomic, subs: []*reNode{body}}, nil
	}
	return body, nil
}

// escapeClass returns the class item of a class escape (\s, \p{L}, …) at p.pos (after the
// backslash), or ok false when the escape is not a class.
func (p *reParser) escapeClass() (classItem, bool, error) {
	c := p.peek()
	switch c {
	case 's', 'S':
		p.pos++
		return classItem{table: unicode.White_Space, not: c == 'S'}, true, nil
	case 'd', 'D':
		p.pos++
		return classItem{table: unicode.Nd, not: c == 'D'}, true, nil
	case 'w', 'W':
		p.pos++
		return classItem{fn: isOnigWord, not: c == 'W'}, true, nil
	case 'h', 'H': // Oniguruma (Ruby syntax): a hexadecimal digit
		p.pos++
		return classItem{fn: isHexDigit, not: c == 'H'}, true, nil
	case 'p', 'P':
		start := p.pos
		p.pos++
		if !p.more() || p.peek() != '{' {
			return classItem{}, false, p.errf("\\%c needs {name}", c)
		}
		end := p.pos
		for end < len(p.runes) && p.runes[end] != '}' {
			end++
		}
		if end >= len(p.runes) {
			return classItem{}, false, p.errf("unterminated \\%c{", c)
		}
		name := string(p.runes[p.pos+1 : end])
		not := c == 'P'
		if strings.HasPrefix(name, "^") {
			name, not = name[1:], !not
		}
		it, ok := unicodeProperty(name)
		if !ok {
			p.pos = start
			return classItem{}, false, p.errf("unknown Unicode property %q", name)
		}
		it.not = it.not != not
		p.pos = end + 1
		return it, true, nil
	}
	return classItem{}, false, nil
}

// escapeRune decodes a character escape at p.pos (after the backslash).
func (p *reParser) escapeRune() (rune, error) {
	c := p.peek()
	p.pos++
	switch c {
	case 't':
		return '\t', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 'f':
		return '\f', nil
	case 'v':
		return '\v', nil
	case 'a':
		return '\a', nil
	case 'e':
		return 0x1b, nil
	case '0':
		v := 0
		for i := 0; i < 2 && p.more() && p.peek() >= '0' && p.peek() <= '7'; i++ {
			v = v*8 + int(p.peek()-'0')
			p.pos++
		}
		return rune(v), nil
	case 'x':
		if p.more() && p.peek() == '{' {
			end := p.pos + 1
			for end < len(p.runes) && p.runes[end] != '}' {
				end++
			}
			if end >= len(p.runes) {
				return 0, p.errf("unterminated \\x{")
			}
			v, err := strconv.ParseUint(string(p.runes[p.pos+1:end]), 16, 32)
			if err != nil || v > unicode.MaxRune {
				return 0, p.errf("bad \\x{%s}", string(p.runes[p.pos+1:end]))
			}
			p.pos = end + 1
			return rune(v), nil
		}
		return p.hexDigits(2, 'x')
	case 'u':
		return p.hexDigits(4, 'u')
	}
	if c < 128 && !isASCIIAlnum(c) { // escaped punctuation or space stands for itself
		return c, nil
	}
	p.pos--
	return 0, p.errf("unsupported escape \\%c", c)
}

func (p *reParser) hexDigits(n int, name rune) (rune, error) {
	if p.pos+n > len(p.runes) {
		return 0, p.errf("\\%c needs %d hexadecimal digits", name, n)
	}
	v, err := strconv.ParseUint(string(p.runes[p.pos:p.pos+n]), 16, 32)
	if err != nil {
		return 0, p.errf("\\%c needs %d hexadecimal digits", name, n)
	}
	p.pos += n
	return rune(v), nil
}

func (p *reParser) parseEscape() (*reNode, error) {
	p.pos++ // backslash
	if !p.more() {
		return nil, p.errf("trailing backslash")
	}
	switch p.peek() {
	case 'A':
		p.pos++
		return &reNode{op: nAssert, assert: aBeginText}, nil
	case 'z':
		p.pos++
		return &reNode{op: nAssert, assert: aEndText}, nil
	case 'Z':
		p.pos++
		return &reNode{op: nAssert, assert: aEndTextNL}, nil
	case 'b':
		p.pos++
		return &reNode{op: nAssert, assert: aWordB}, nil
	case 'B':
		p.pos++
		return &reNode{op: nAssert, assert: aNotWordB}, nil
	case 'G', 'K', 'R', 'X', 'k', 'g', 'N', 'O', 'y', 'Y':
		return nil, p.errf("unsupported escape \\%c", p.peek())
	}
	if c := p.peek(); c >= '1' && c <= '9' {
		return nil, p.errf("backreferences are not supported")
	}
	it, ok, err := p.escapeClass()
	if err != nil {
		return nil, err
	}
	if ok {
		return &reNode{op: nClass, class: (&reClass{items: []classItem{it}}).finish()}, nil
	}
	r, err := p.escapeRune()
	if err != nil {
		return nil, err
	}
	return p.literal(r), nil
}

func (p *reParser) parseClass() (*reClass, error) {
	open := p.pos
	p.pos++ // [
	cl := &reClass{}
	if p.more() && p.peek() == '^' {
		cl.neg = true
		p.pos++
	}
	first := true
	for {
		if !p.more() {
			p.pos = open
			return nil, p.errf("missing ']'")
		}
		c := p.peek()
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		if c == '[' {
			if p.pos+1 < len(p.runes) && p.runes[p.pos+1] == ':' {
				return nil, p.errf("POSIX bracket classes are not supported")
			}
			return nil, p.errf("nested classes are not supported")
		}
		if c == '&' && p.pos+1 < len(p.runes) && p.runes[p.pos+1] == '&' {
			return nil, p.errf("class intersection is not supported")
		}
		var lo rune
		if c == '\\' {
			p.pos++
			if !p.more() {
				return nil, p.errf("trailing backslash")
			}
			it, ok, err := p.escapeClass()
			if err != nil {
				return nil, err
			}
			if ok {
				cl.items = append(cl.items, it)
				continue
			}
			if p.peek() == 'b' { // backspace inside a class
				p.pos++
				lo = '\b'
			} else if lo, err = p.escapeRune(); err != nil {
				return nil, err
			}
		} else {
			lo = c
			p.pos++
		}
		hi := lo
		if p.pos+1 < len(p.runes) && p.peek() == '-' && p.runes[p.pos+1] != ']' {
			p.pos++
			c := p.peek()
			if c == '\\' {
				p.pos++
				if !p.more() {
					return nil, p.errf("trailing backslash")
				}
				var err error
				if hi, err = p.escapeRune(); err != nil {
					return nil, err
				}
			} else {
				hi = c
				p.pos++
			}
			if hi < lo {
				return nil, p.errf("class range %q-%q is out of order", lo, hi)
			}
		}
		cl.items = append(cl.items, classItem{lo: lo, hi: hi})
		if p.fold {
			cl.items = append(cl.items, foldRange(lo, hi)...)
		}
	}
	return cl, nil
}

// foldRange returns the case-fold partners of the runes in [lo, hi] (bounded: long ranges fold only
// their first 2048 runes, which covers every cased script block a pattern writes as a range).
func foldRange(lo, hi rune) []classItem {
	var out []classItem
	if hi-lo > 2048 {
		hi = lo + 2048
	}
	for r := lo; r <= hi; r++ {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < lo || f > hi {
				out = append(out, classItem{lo: f, hi: f})
			}
		}
	}
	return out
}

func isASCIIAlnum(c rune) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isHexDigit(r rune) bool {
	return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F'
}

// isOnigWord is Oniguruma's Unicode \w: letters, marks, decimal numbers and connector punctuation.
func isOnigWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

// isAlphabetic is Unicode's Alphabetic property (Rust's char::is_alphabetic).
func isAlphabetic(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r)
}

var longCategoryNames = map[string]string{
	"Letter": "L", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll", "Titlecase_Letter": "Lt",
	"Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M", "Combining_Mark": "M",
	"Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
	"Decimal_Number": "Nd", "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P",
	"Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
	"Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf",
	"Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc",
	"Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z", "Space_Separator": "Zs",
	"Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Control": "Cc", "Format": "Cf",
	"Private_Use": "Co", "Surrogate": "Cs",
}

// unicodeProperty resolves a \p{…} name: a general category (short or long name), a script, or
// one of Alpha, Alphabetic, White_Space, Space, Digit, Word, Any.
func unicodeProperty(name string) (classItem, bool) {
	if short, ok := longCategoryNames[name]; ok {
		name = short
	}
	switch name {
	case "C": // Oniguruma's C includes unassigned code points; Go has no table for those.
		return classItem{fn: func(r rune) bool {
			return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) || !isAssigned(r)
		}}, true
	case "Cn", "Unassigned":
		return classItem{fn: func(r rune) bool { return !isAssigned(r) }}, true
	case "Alpha", "Alphabetic":
		return classItem{fn: isAlphabetic}, true
	case "White_Space", "Space", "space":
		return classItem{table: unicode.White_Space}, true
	case "Digit", "digit":
		return classItem{table: unicode.Nd}, true
	case "Word", "word":
		return classItem{fn: isOnigWord}, true
	case "Any":
		return classItem{fn: func(rune) bool { return true }}, true
	}
	if t, ok := unicode.Categories[name]; ok {
		return classItem{table: t}, true
	}
	if t, ok := unicode.Scripts[name]; ok {
		return classItem{table: t}, true
	}
	return classItem{}, false
}

func isAssigned(r rune) bool {
	for _, t := range unicode.Categories {
		if len(t.R16)+len(t.R32) > 0 && unicode.Is(t, r) {
			return true
		}
	}
	return false
}

// compileInto compiles n into program index pi.
func (re *Regex) compileInto(pi int, n *reNode) error {
	c := &reCompiler{re: re, pi: pi}
	if err := c.emit(n); err != nil {
		return err
	}
	if err := c.add(inst{op: iMatch}); err != nil {
		return err
	}
	re.progs[pi].computeFirst()
	return re.progs[pi].computeOrder()
}

type reCompiler struct {
	re *Regex
	pi int
}

func (c *reCompiler) pc() int32 { return int32(len(c.re.progs[c.pi].insts)) }

// errTooBig is the error of a pattern that compiles to more than maxInsts instructions.
var errTooBig = fmt.Errorf("compiles to more than %d instructions (counted repetitions expanded); simplify it", maxInsts)

// add appends an instruction, or fails once the pattern's programs hold maxInsts.
func (c *reCompiler) add(in inst) error {
	if c.re.ninsts >= maxInsts {
		return errTooBig
	}
	c.re.ninsts++
	p := &c.re.progs[c.pi]
	p.insts = append(p.insts, in)
	return nil
}

// addAt is add returning the new instruction's pc.
func (c *reCompiler) addAt(in inst) (int32, error) {
	pc := c.pc()
	return pc, c.add(in)
}

func (c *reCompiler) at(i int32) *inst { return &c.re.progs[c.pi].insts[i] }

func (c *reCompiler) sub(n *reNode) (int32, error) {
	idx := len(c.re.progs)
	if idx > maxSubprograms {
		return 0, fmt.Errorf("more than %d lookaheads, atomic groups and possessive repeats", maxSubprograms)
	}
	c.re.progs = append(c.re.progs, reProg{})
	if err := c.re.compileInto(idx, n); err != nil {
		return 0, err
	}
	return int32(idx), nil
}

func (c *reCompiler) emit(n *reNode) error {
	switch n.op {
	case nClass:
		return c.add(inst{op: iClass, class: n.class})
	case nEmpty:
	case nConcat:
		for _, s := range n.subs {
			if err := c.emit(s); err != nil {
				return err
			}
		}
	case nAlt:
		var jumps []int32
		for i, s := range n.subs {
			if i == len(n.subs)-1 {
				if err := c.emit(s); err != nil {
					return err
				}
				break
			}
			split, err := c.addAt(inst{op: iSplit})
			if err != nil {
				return err
			}
			c.at(split).x = c.pc()
			if err := c.emit(s); err != nil {
				return err
			}
			j, err := c.addAt(inst{op: iJmp})
			if err != nil {
				return err
			}
			jumps = append(jumps, j)
			c.at(split).y = c.pc()
		}
		for _, j := range jumps {
			c.at(j).x = c.pc()
		}
	case nRepeat:
		if n.possessive {
			inner := *n
			inner.possessive = false
			idx, err := c.sub(&inner)
			if err != nil {
				return err
			}
			return c.add(inst{op: iAtomic, x: idx})
		}
		body := n.subs[0]
		for i := 0; i < n.min; i++ {
			if err := c.emit(body); err != nil {
				return err
			}
		}
		if n.max < 0 { // star loop
			split, err := c.addAt(inst{op: iSplit})
			if err != nil {
				return err
			}
			bodyStart := c.pc()
			if err := c.emit(body); err != nil {
				return err
			}
			if err := c.add(inst{op: iJmp, x: split}); err != nil {
				return err
			}
			c.setSplit(split, bodyStart, c.pc(), n.greedy)
			return nil
		}
		// (max-min) optional copies, nested: x(x(x)?)?
		var splits []int32
		for i := n.min; i < n.max; i++ {
			split, err := c.addAt(inst{op: iSplit})
			if err != nil {
				return err
			}
			splits = append(splits, split)
			bodyStart := c.pc()
			if err := c.emit(body); err != nil {
				return err
			}
			c.at(split).x = bodyStart // completed below
		}
		end := c.pc()
		for _, s := range splits {
			c.setSplit(s, c.at(s).x, end, n.greedy)
		}
	case nLook:
		idx, err := c.sub(n.subs[0])
		if err != nil {
			return err
		}
		neg := int32(0)
		if n.neg {
			neg = 1
		}
		return c.add(inst{op: iLook, x: idx, y: neg})
	case nAtomic:
		idx, err := c.sub(n.subs[0])
		if err != nil {
			return err
		}
		return c.add(inst{op: iAtomic, x: idx})
	case nAssert:
		return c.add(inst{op: iAssert, x: int32(n.assert)})
	}
	return nil
}

func (c *reCompiler) setSplit(split, body, out int32, greedy bool) {
	if greedy {
		c.at(split).x, c.at(split).y = body, out
	} else {
		c.at(split).x, c.at(split).y = out, body
	}
}

// reMachine holds the backtracking stack; one per goroutine (matchers take it as an argument so a
// Regex stays shareable).
type reMachine struct{ stack []reThread }

type reThread struct{ pc, pos int32 }

// outOfBudget is matchAt's result when the search ran out of its budget (steps or stack).
const outOfBudget = -2

// matchAt runs program pi anchored at pos and returns the end of the first match in priority
// order, -1, or outOfBudget once the steps are spent or the stack holds maxStack entries (each
// executed instruction costs a step), and the steps left.
func (re *Regex) matchAt(m *reMachine, pi int, s string, pos int, steps int) (int, int) {
	insts, first := re.progs[pi].insts, re.progs[pi].first
	base := len(m.stack)
	pc := int32(0)
	for {
		if steps--; steps < 0 {
			m.stack = m.stack[:base]
			return outOfBudget, 0
		}
		in := &insts[pc]
		switch in.op {
		case iClass:
			if pos < len(s) {
				if b := s[pos]; b < utf8.RuneSelf {
					if in.class.ascii[b>>6]>>(b&63)&1 != 0 {
						pos++
						pc++
						continue
					}
				} else if r, size := utf8.DecodeRuneInString(s[pos:]); in.class.slowHas(r) {
					pos += size
					pc++
					continue
				}
			}
		case iSplit:
			okX, okY := first[in.x].canStart(s, pos), first[in.y].canStart(s, pos)
			switch {
			case okX && okY:
				if len(m.stack)-base >= maxStack {
					m.stack = m.stack[:base]
					return outOfBudget, 0
				}
				m.stack = append(m.stack, reThread{in.y, int32(pos)})
				pc = in.x
				continue
			case okX:
				pc = in.x
				continue
			case okY:
				pc = in.y
				continue
			}
		case iJmp:
			pc = in.x
			continue
		case iMatch:
			m.stack = m.stack[:base]
			return pos, steps
		case iLook:
			var e int
			if e, steps = re.matchAt(m, int(in.x), s, pos, steps); e == outOfBudget {
				m.stack = m.stack[:base]
				return outOfBudget, 0
			}
			if (e >= 0) != (in.y == 1) {
				pc++
				continue
			}
		case iAtomic:
			var e int
			if e, steps = re.matchAt(m, int(in.x), s, pos, steps); e == outOfBudget {
				m.stack = m.stack[:base]
				return outOfBudget, 0
			}
			if e >= 0 {
				pos = e
				pc++
				continue
			}
		case iAssert:
			if assertHolds(assertKind(in.x), s, pos) {
				pc++
				continue
			}
		}
		// fail: resume the most recent alternative
		if len(m.stack) == base {
			return -1, steps
		}
		t := m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
		pc, pos = t.pc, int(t.pos)
	}
}

// solved is the result of solve: the first match in priority order starting at each position
// of a text from some position on.
type solved struct {
	pos []int32 // the rune boundaries from the first position to len(text), ascending
	end []int32 // end[k]: the end of the first match starting at pos[k], or -1
}

// find returns the first match starting at or after from (a position in d.pos), or -1, -1.
func (d *solved) find(from int) (start, end int) {
	k := sort.Search(len(d.pos), func(k int) bool { return int(d.pos[k]) >= from })
	for ; k < len(d.pos); k++ {
		if d.end[k] >= 0 {
			return int(d.pos[k]), int(d.end[k])
		}
	}
	return -1, -1
}

// solve computes, for every rune boundary p of s from `from` on, the end of the first match of
// the pattern anchored at p in priority order: the result matchAt would return, without its
// exponential worst case. The first match from an instruction at a position is a function of
// the two (there are no captures or backreferences), so it is computed once each, from the end
// of the text backwards: an instruction that consumes a rune continues at the next boundary,
// whose values are known; the others continue at the same position, and are evaluated after
// their successors (reProg.order). A lookahead or atomic body is a program of its own, evaluated
// at the same position before the program that uses it (a body's index is above its user's);
// an atomic group continues after the body's end, perhaps far ahead, so the value of the
// instruction after each atomic group is kept for every position (cont).
//
// Time O(instructions × runes); memory O(instructions) plus 4 bytes per rune for pos, end and
// each atomic group.
func (re *Regex) solve(s string, from int) *solved {
	var pos []int32
	for p := from; ; {
		pos = append(pos, int32(p))
		if p >= len(s) {
			break
		}
		p += runeLen(s, p)
	}
	n := len(pos)
	d := &solved{pos: pos, end: make([]int32, n)}
	np := len(re.progs)
	cur, next := make([][]int32, np), make([][]int32, np)
	type atomicAt struct{ prog, pc int }
	var atomics []atomicAt
	cont := map[atomicAt][]int32{}
	for i := range re.progs {
		cur[i] = make([]int32, len(re.progs[i].insts))
		next[i] = make([]int32, len(re.progs[i].insts))
		for pc, in := range re.progs[i].insts {
			if in.op == iAtomic {
				a := atomicAt{i, pc}
				atomics = append(atomics, a)
				cont[a] = make([]int32, n)
			}
		}
	}
	index := func(p int32) int { // the k with pos[k] == p
		return sort.Search(n, func(k int) bool { return pos[k] >= p })
	}
	for k := n - 1; k >= 0; k-- {
		p := int(pos[k])
		r, size := rune(-1), 0
		if p < len(s) {
			if b := s[p]; b < utf8.RuneSelf {
				r, size = rune(b), 1
			} else {
				r, size = utf8.DecodeRuneInString(s[p:])
			}
		}
		for pi := np - 1; pi >= 0; pi-- {
			prog := &re.progs[pi]
			c, nx := cur[pi], next[pi]
			for _, pc := range prog.order {
				in := &prog.insts[pc]
				v := int32(-1)
				switch in.op {
				case iClass:
					if size > 0 && in.class.has(r) {
						v = nx[pc+1]
					}
				case iSplit:
					if v = c[in.x]; v < 0 {
						v = c[in.y]
					}
				case iJmp:
					v = c[in.x]
				case iMatch:
					v = int32(p)
				case iLook:
					if (cur[in.x][0] >= 0) != (in.y == 1) {
						v = c[pc+1]
					}
				case iAtomic:
					switch e := cur[in.x][0]; {
					case e == int32(p):
						v = c[pc+1]
					case e > int32(p):
						v = cont[atomicAt{pi, int(pc)}][index(e)]
					}
				case iAssert:
					if assertHolds(assertKind(in.x), s, p) {
						v = c[pc+1]
					}
				}
				c[pc] = v
			}
		}
		for _, a := range atomics {
			cont[a][k] = cur[a.prog][a.pc+1]
		}
		d.end[k] = cur[0][0]
		cur, next = next, cur
	}
	return d
}

func assertHolds(k assertKind, s string, pos int) bool {
	switch k {
	case aBeginText:
		return pos == 0
	case aEndText:
		return pos == len(s)
	case aEndTextNL:
		return pos == len(s) || pos == len(s)-1 && s[pos] == '\n'
	case aBeginLine:
		return pos == 0 || s[pos-1] == '\n'
	case aEndLine:
		return pos == len(s) || s[pos] == '\n'
	case aWordB, aNotWordB:
		before, after := false, false
		if pos > 0 {
			r, _ := utf8.DecodeLastRuneInString(s[:pos])
			before = isOnigWord(r)
		}
		if pos < len(s) {
			r, _ := utf8.DecodeRuneInString(s[pos:])
			after = isOnigWord(r)
		}
		return (before != after) == (k == aWordB)
	}
	return false
}

// findAll calls fn for every match in s, left to right, the way the onig crate's find_iter does:
// each search starts where the previous match ended, and an empty match right where the previous
// match ended is skipped. fn returns false to stop.
//
// The searches share one budget of steps (see stepsPerByte); once it is spent, solve computes the
// rest of the matches in linear time. fn may use m (between two matches the machine holds
// nothing), so findAll keeps its own state in locals.
func (re *Regex) findAll(m *reMachine, s string, fn func(start, end int) bool) {
	re.findAllBudget(m, s, stepsBase+stepsPerByte*len(s), fn)
}

// findAllBudget is findAll with a budget of machine steps.
func (re *Regex) findAllBudget(m *reMachine, s string, budget int, fn func(start, end int) bool) {
	lastEnd, lastMatchEnd := 0, -1
	var dp *solved
	for lastEnd <= len(s) {
		start, end := -1, -1
		if dp == nil {
			first := &re.progs[0].first[0]
			for st := lastEnd; st <= len(s); {
				if first.canStart(s, st) {
					var e int
					if e, budget = re.matchAt(m, 0, s, st, budget); e == outOfBudget {
						dp = re.solve(s, lastEnd)
						break
					}
					if e >= 0 {
						start, end = st, e
						break
					}
				}
				if st == len(s) {
					break
				}
				st += runeLen(s, st)
			}
		}
		if dp != nil {
			start, end = dp.find(lastEnd)
		}
		if start < 0 {
			return
		}
		if start == end && lastMatchEnd == end {
			if lastEnd >= len(s) {
				return
			}
			lastEnd += runeLen(s, lastEnd)
			continue
		}
		lastEnd, lastMatchEnd = end, end
		if !fn(start, end) {
			return
		}
	}
}

func runeLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}
