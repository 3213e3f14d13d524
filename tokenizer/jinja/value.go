package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are Go values with Python's meaning: nil is None, bool, int64, float64, string,
// []any (a list), Tuple, *Dict (a dict, keys in insertion order), *Namespace, *Func and
// *Undefined. Lists and dicts are never modified once built (transformers renders in an
// immutable sandbox).

// Dict is a dict with string keys that keeps their insertion order (as Python's dict and JSON
// objects read with Decode do).
type Dict struct {
	keys []string
	m    map[string]any
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[string]any{}} }

// Set sets key to v (a new key goes last).
func (d *Dict) Set(key string, v any) {
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
}

// Get returns the value of key.
func (d *Dict) Get(key string) (any, bool) {
	v, ok := d.m[key]
	return v, ok
}

// Keys returns the keys in order.
func (d *Dict) Keys() []string { return append([]string(nil), d.keys...) }

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Tuple is a Python tuple (printed with parentheses).
type Tuple []any

// Namespace is the object namespace(...) makes: its attributes can be set from a loop.
type Namespace struct{ d *Dict }

// Func is a callable: a global function, a filter used as a value, a bound method or a macro.
type Func struct {
	Name string
	Fn   func(args []any, kwargs *Dict) (any, error)
}

// Undefined is a missing variable, attribute or element. It prints as "" and is false; most
// other uses are an error carrying msg (what was missing).
type Undefined struct {
	msg    string
	unsafe bool // an attribute the sandbox forbids: using it is a security error
}

func undefinedName(name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("'%s' is undefined", name)}
}

func undefinedAttr(obj any, name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("%s has no attribute %s", pyRepr(objectTypeRepr(obj)), pyRepr(name))}
}

func undefinedElem(obj any, key any) *Undefined {
	if s, ok := key.(string); ok {
		return undefinedAttr(obj, s)
	}
	return &Undefined{msg: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), pyRepr(key))}
}

func unsafeAttr(obj any, name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyRepr(name), pyRepr(typeName(obj))), unsafe: true}
}

func (u *Undefined) err() error { return errorf("%s", u.msg) }

// typeName is Python's type(v).__name__.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Func:
		return "function"
	case *Undefined:
		return "Undefined"
	case *loopObj:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// objectTypeRepr is Jinja2's object_type_repr: "None", "dict object", ...
func objectTypeRepr(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case bool:
		if v.(bool) {
			return "True"
		}
		return "False"
	}
	return typeName(v) + " object"
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case Tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case *Undefined:
		return false
	}
	return true
}

// str is Python's str(v), as {{ v }} prints it.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *Undefined:
		return ""
	}
	return pyRepr(v)
}

// pyRepr is Python's repr(v).
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) { writeReprIn(b, v, map[*Dict]bool{}) }

// writeReprIn writes repr(v) inside the dicts open (being written): a dict that holds itself,
// directly or through a namespace ({% set ns.n = ns %}), is written {...} where it recurs, as
// Python's repr writes a recursive container.
func writeReprIn(b *strings.Builder, v any, open map[*Dict]bool) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(pyFloat(x))
	case string:
		writeStrRepr(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprIn(b, e, open)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprIn(b, e, open)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		if open[x] {
			b.WriteString("{...}")
			return
		}
		open[x] = true
		defer delete(open, x)
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeStrRepr(b, k)
			b.WriteString(": ")
			writeReprIn(b, x.m[k], open)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeReprIn(b, x.d, open)
		b.WriteString(">")
	case *Func:
		b.WriteString("<function " + x.Name + ">")
	case *Undefined:
		b.WriteString("Undefined")
	case *loopObj:
		b.WriteString("<LoopContext " + strconv.Itoa(x.index+1) + "/" + strconv.Itoa(len(x.items)) + ">")
	default:
		fmt.Fprint(b, x)
	}
}

// writeStrRepr writes Python's repr of a str: single quotes unless the text has a single
// quote and no double quote; backslash escapes for \\, the quote, \n \r \t and characters
// that are not printable.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || pyPrintable(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// pyPrintable approximates Python's str.isprintable for one character: not a control,
// format, surrogate, private-use or unassigned character, nor a separator other than the space.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) {
		return false
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// pyFloat is Python's repr of a float: the shortest digits that read back, in scientific
// notation when the exponent is below -4 or at least 16, and always with a "." or an exponent.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	// The decimal exponent from the shortest representation (Log10 may be off by one).
	e := strconv.FormatFloat(f, 'e', -1, 64)
	if i := strings.IndexByte(e, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(e[i+1:])
	}
	if exp < -4 || exp >= 16 {
		mant, ex, _ := strings.Cut(e, "e")
		n, _ := strconv.Atoi(ex)
		sign := "+"
		if n < 0 {
			sign, n = "-", -n
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, n)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// toJSON writes v as Python's json.dumps(v, ensure_ascii=False) writes it: separators ", " and
// ": " (or "," and ": " with an indent), keys in order, non-ASCII characters as they are.
// A dict that holds itself is an error, as Python's check_circular makes it.
func toJSON(b *strings.Builder, v any, indent string, level int, sortKeys bool) error {
	return toJSONIn(b, v, indent, level, sortKeys, map[*Dict]bool{})
}

func toJSONIn(b *strings.Builder, v any, indent string, level int, sortKeys bool, open map[*Dict]bool) error {
	newline := func(l int) {
		if indent != "" {
			b.WriteByte('\n')
			for i := 0; i < l; i++ {
				b.WriteString(indent)
			}
		}
	}
	sep := ", "
	if indent != "" {
		sep = ","
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		case math.IsNaN(x):
			b.WriteString("NaN")
		default:
			b.WriteString(pyFloat(x))
		}
	case string:
		writeJSONString(b, x)
	case []any, Tuple:
		items := asSeq(x)
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range items {
			if i > 0 {
				b.WriteString(sep)
			}
			newline(level + 1)
			if err := toJSONIn(b, e, indent, level+1, sortKeys, open); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		if open[x] {
			return errorf("Circular reference detected")
		}
		open[x] = true
		defer delete(open, x)
		keys := x.keys
		if sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(sep)
			}
			newline(level + 1)
			writeJSONString(b, k)
			b.WriteString(": ")
			if err := toJSONIn(b, x.m[k], indent, level+1, sortKeys, open); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte('}')
	default:
		return errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func asSeq(v any) []any {
	switch x := v.(type) {
	case []any:
		return x
	case Tuple:
		return x
	}
	return nil
}

// FromGo converts a Go value to a template value: nil, bool, integers, floats, strings,
// slices, maps with string keys (keys sorted, as a Go map has no order), structs are not
// accepted; json.RawMessage is decoded keeping the order of object keys (see DecodeJSON), and
// values that are already template values (*Dict, Tuple, ...) are kept.
func FromGo(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *Dict, Tuple, *Namespace, *Func, *Undefined:
		return x, nil
	case json.RawMessage:
		return DecodeJSON(x)
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return jsonNumber(string(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = FromGo(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			e, err := FromGo(x[k])
			if err != nil {
				return nil, err
			}
			d.Set(k, e)
		}
		return d, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			var err error
			if out[i], err = FromGo(rv.Index(i).Interface()); err != nil {
				return nil, err
			}
		}
		return out, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint()), nil
	case reflect.String:
		return rv.String(), nil
	}
	return nil, fmt.Errorf("a template value cannot be a %T", v)
}

// DecodeJSON reads a JSON value as a template value, keeping the order of object keys (as
// Python's json.loads does): integers become int64, other numbers float64.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	v, err := decodeJSONValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("invalid JSON: more than one value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '[':
			list := []any{}
			for dec.More() {
				e, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, e)
			}
			_, err := dec.Token()
			return list, err
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				e, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k, e)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("invalid JSON: unexpected %v", x)
	case json.Number:
		return jsonNumber(string(x))
	}
	return t, nil // nil, bool, string
}

func jsonNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON number %s", s)
	}
	return f, nil
}

// runes returns the code points of s (Python indexes strings by code point).
func runes(s string) []rune { return []rune(s) }

func runeLen(s string) int { return utf8.RuneCountInString(s) }
