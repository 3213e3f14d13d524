// Package jinja renders Jinja templates as transformers renders chat templates: Jinja2 in
// an immutable sandbox with trim_blocks and lstrip_blocks, the loopcontrols extension, the
// {% generation %} tag, and transformers' raise_exception, strftime_now and tojson (Python's
// json.dumps without HTML escaping).
//
// It is a focused interpreter, not a general Jinja engine: the statements are if, for (with
// else, a filter condition, loop variables, recursive), set (also of a namespace attribute,
// and the block form), macro, filter, with, break/continue and raw; expressions have Python's
// meaning (values print as Python prints them, a string's length counts code points, strip()
// strips what str.isspace() calls whitespace, integer division floors); the filters, tests and
// str/dict/list methods are the ones chat templates use. There is no autoescaping, no
// include/extends/import (a chat template is one string) and no call blocks.
//
// Errors name the template and the line: a syntax error when compiling, and when rendering an
// undefined value used where that is an error, a type error, or the template's own
// raise_exception(message) (Error.Raised, with Error.Msg the message exactly).
package jinja

import (
	"fmt"
	"strings"
	"time"
)

// Template is a compiled template. It is safe for concurrent use.
type Template struct {
	name    string
	body    []node
	globals map[string]any
}

// Compile parses source; name is what errors call it (e.g. "model/tokenizer_config.json
// chat_template").
func Compile(name, source string) (*Template, error) {
	toks, err := lex(name, normalizeSource(source))
	if err != nil {
		return nil, err
	}
	body, err := parseTemplate(name, toks)
	if err != nil {
		return nil, err
	}
	return &Template{name: name, body: body}, nil
}

// Options change a rendering.
type Options struct {
	// Now is the moment strftime_now formats; the zero time means the current time.
	Now time.Time
}

// Render renders the template with vars (values as FromGo accepts them).
func (t *Template) Render(vars map[string]any, opt Options) (string, error) {
	sc := newScope(nil)
	for k, v := range vars {
		tv, err := FromGo(v)
		if err != nil {
			return "", fmt.Errorf("variable %s: %w", k, err)
		}
		sc.set(k, tv)
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	rt := &Template{name: t.name, body: t.body, globals: map[string]any{
		"strftime_now": &Func{Name: "strftime_now", Fn: func(args []any, kw *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("strftime_now takes one argument (a format)")
			}
			return strftime(now, str(args[0])), nil
		}},
	}}
	var b strings.Builder
	r := &renderer{t: rt, out: &b}
	if err := r.exec(t.body, newScope(sc)); err != nil {
		if err == errBreak || err == errContinue {
			return "", &Error{Source: t.name, Msg: "break or continue outside a loop"}
		}
		return "", err
	}
	return b.String(), nil
}

// strftime formats t as C's strftime does for the common directives.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
