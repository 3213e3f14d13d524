package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// The fixed moment of testdata/make_cases.py's strftime_now.
var casesDate = time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)

type jinja2Case struct {
	Name      string          `json:"name"`
	Template  string          `json:"template"`
	Vars      json.RawMessage `json:"vars"`
	Rendered  *string         `json:"rendered"`
	Error     *string         `json:"error"`
	ErrorType string          `json:"error_type"`
}

// Errors whose text this package gives as Jinja2 does (the others it words its own way).
var sameErrorText = map[string]bool{
	"raise_exception": true, "UndefinedError": true, "SecurityError": true, "TypeError": true,
	"ZeroDivisionError": true,
}

func varsOf(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := v.(*Dict)
	if !ok {
		t.Fatalf("vars %s: not an object", raw)
	}
	out := map[string]any{}
	for _, k := range d.Keys() {
		out[k], _ = d.Get(k)
	}
	return out
}

// TestJinja2Cases renders testdata/jinja2_cases.json's templates (whitespace control, value
// printing, scoping, loops, macros, filters, tests, methods, errors, and 100 random nestings of
// tags in every whitespace control) and compares them byte
// for byte with what Python's jinja2, configured as transformers configures it, rendered
// (make_cases.py wrote them). A case jinja2 fails must fail here; a raise_exception must carry
// its message exactly, and undefined, sandbox and type errors jinja2's text.
func TestJinja2Cases(t *testing.T) {
	data, err := os.ReadFile("testdata/jinja2_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Generator   string          `json:"generator"`
		DefaultVars json.RawMessage `json:"default_vars"`
		Cases       []jinja2Case    `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	defaults := varsOf(t, file.DefaultVars)
	pass := 0
	for _, c := range file.Cases {
		vars := defaults
		if c.Vars != nil {
			vars = varsOf(t, c.Vars)
		}
		var got string
		tmpl, err := Compile(c.Name, c.Template)
		if err == nil {
			got, err = tmpl.Render(vars, Options{Now: casesDate})
		}
		switch {
		case c.Error != nil:
			var je *Error
			switch {
			case err == nil:
				t.Errorf("%s: rendered %q; jinja2 fails: %s: %s", c.Name, got, c.ErrorType, *c.Error)
				continue
			case !errors.As(err, &je):
				t.Errorf("%s: error %v is not a *jinja.Error", c.Name, err)
				continue
			case je.Raised != (c.ErrorType == "raise_exception"):
				t.Errorf("%s: error %v (raised %v); jinja2: %s: %s", c.Name, err, je.Raised, c.ErrorType, *c.Error)
				continue
			case sameErrorText[c.ErrorType] && je.Msg != *c.Error:
				t.Errorf("%s: error message %q, jinja2's %q", c.Name, je.Msg, *c.Error)
				continue
			case je.Source != c.Name || je.Line < 1:
				t.Errorf("%s: error %v does not name the template and a line", c.Name, err)
				continue
			}
		case err != nil:
			t.Errorf("%s: %v", c.Name, err)
			continue
		case got != *c.Rendered:
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *c.Rendered)
			continue
		}
		pass++
	}
	t.Logf("%d of %d cases as %s", pass, len(file.Cases), file.Generator)
}

// TestErrorLines: errors carry the line of the statement or expression they happened in.
func TestErrorLines(t *testing.T) {
	for _, c := range []struct {
		src  string
		line int
		msg  string
	}{
		{"a\nb\n{% if x %}\n{{ raise_exception('no') }}\n{% endif %}", 4, "no"},
		{"{% for m in messages %}\n\n{{ m.x.y }}{% endfor %}", 3, "'dict object' has no attribute 'x'"},
		{"{{ 1 }}\n{% endif %}", 2, ""},
		{"\n\n{{ 'unterminated }}", 3, ""},
		{"{% if true %}\n{{ 1 }}", 2, ""},
	} {
		tmpl, err := Compile("t.jinja", c.src)
		if err == nil {
			_, err = tmpl.Render(map[string]any{"x": true, "messages": []any{map[string]any{"role": "user"}}}, Options{})
		}
		var je *Error
		if !errors.As(err, &je) || je.Line != c.line || je.Source != "t.jinja" || !strings.Contains(je.Msg, c.msg) ||
			!strings.HasPrefix(err.Error(), "t.jinja:") {
			t.Errorf("%q: error %v, want line %d with %q", c.src, err, c.line, c.msg)
		}
	}
}

// TestLimits: a template cannot make unbounded output or recurse without end.
func TestLimits(t *testing.T) {
	defer func(n, m int) { maxOutput, maxIterations = n, m }(maxOutput, maxIterations)
	maxOutput, maxIterations = 1<<20, 100_000
	for _, src := range []string{
		"{{ 'x' * 2000000 }}",
		"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
		"{{ range(1000000)|length }}",
		"{% for i in range(90000) %}{% for j in range(90000) %}{{ 'x' * 2000 }}{% endfor %}{% endfor %}",
		"{% for i in range(90000) %}{% for j in range(90000) %}{% endfor %}{% endfor %}",
	} {
		tmpl, err := Compile("t", src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tmpl.Render(nil, Options{}); err == nil {
			t.Errorf("%q rendered", src)
		}
	}
}

// TestSelfReference: a namespace or dict that holds itself is written as Python writes a
// recursive container ({...} where it recurs: Jinja's Namespace repr is "<Namespace " + repr of
// its attribute dict + ">"), and its JSON is an error (json.dumps' check_circular), where both
// recursed without end (a fuzzer's input).
func TestSelfReference(t *testing.T) {
	vars := map[string]any{"messages": []any{map[string]any{"role": "user"}, map[string]any{"role": "assistant"}}}
	for _, c := range []struct{ src, want string }{
		{"{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns %}{% set ns.s = ns.s + m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.s }}",
			"<Namespace {'n': <Namespace {...}>, 's': 'ua'}>ua"},
		{"{% set ns = namespace(a=namespace(b=1)) %}{% set ns.c = ns.a %}{{ ns }}", "<Namespace {'a': <Namespace {'b': 1}>, 'c': <Namespace {'b': 1}>}>"},
	} {
		tmpl, err := Compile("t", c.src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(vars, Options{})
		if err != nil || got != c.want {
			t.Errorf("%q: %q (%v), want %q", c.src, got, err, c.want)
		}
	}
	// Templates cannot make a dict hold itself (no update; a namespace is not JSON), so the
	// JSON check is made on a dict built here.
	d := &Dict{keys: []string{"a"}, m: map[string]any{}}
	d.m["a"] = []any{int64(1), d}
	var b strings.Builder
	if err := toJSON(&b, d, "", 0, false); err == nil || !strings.Contains(err.Error(), "Circular reference") {
		t.Errorf("a dict holding itself written as JSON: %q (%v)", b.String(), err)
	}
	if got, want := pyRepr(d), "{'a': [1, {...}]}"; got != want {
		t.Errorf("repr %q, want %q", got, want)
	}
}

// TestRecursiveLoopDepth: loop(x) of a recursive for nests as a macro call does, within
// maxDepth (over a string, whose items are strings, it never ends: the fuzzer's input
// overflowed the stack before the iteration limit stopped it), alone and beside macro calls.
func TestRecursiveLoopDepth(t *testing.T) {
	for _, src := range []string{
		"{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}<{{ item.n }}{{ loop(item) }}>{% endfor %}",
		"{% macro f(x) %}{% for i in [x] recursive %}{{ f(loop([i])) }}{% endfor %}{% endmacro %}{{ f(1) }}",
	} {
		tmpl, err := Compile("t", src)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tmpl.Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "nested calls") {
			t.Errorf("%q: %.40q (%v), want an error of too many nested calls", src, got, err)
		}
	}
	// A recursive loop within the limit still renders.
	tmpl, err := Compile("t", "{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}<{{ item.n }}{{ loop(item.c) }}>{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render(nil, Options{}); err != nil || got != "<a<b>>" {
		t.Errorf("tree: %q (%v), want <a<b>>", got, err)
	}
}
