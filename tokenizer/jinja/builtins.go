package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// The filters, tests, globals and methods chat templates use, with Jinja2's (and Python's)
// meaning. transformers replaces Jinja2's tojson with json.dumps(x, ensure_ascii=False, ...)
// (no HTML escaping) and adds raise_exception and strftime_now.

type filterFn func(v any, args []any, kwargs *Dict) (any, error)

// params binds positional and keyword arguments to names with defaults (nil default:
// required). It returns the values in order.
func params(fname string, args []any, kwargs *Dict, names []string, defaults []any) ([]any, error) {
	if len(args) > len(names) {
		return nil, errorf("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]any, len(names))
	copy(out, defaults)
	for i, a := range args {
		out[i] = a
	}
	if kwargs != nil {
		for _, k := range kwargs.keys {
			i := indexOf(names, k)
			if i < 0 {
				return nil, errorf("%s() got an unexpected keyword argument %s", fname, pyRepr(k))
			}
			out[i] = kwargs.m[k]
		}
	}
	return out, nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func toInt(v any, what string) (int64, error) {
	n, f, isFloat, ok := number(v)
	if !ok {
		return 0, errorf("%s must be an integer, not %s", what, typeName(v))
	}
	if isFloat {
		return int64(f), nil
	}
	return n, nil
}

// strArg makes a filter's input a string, as Jinja2's soft_str does (an undefined value is "").
func strArg(v any) string { return str(v) }

var filters map[string]filterFn

func init() {
	filters = map[string]filterFn{
		"abs": func(v any, args []any, kw *Dict) (any, error) {
			switch x := v.(type) {
			case int64:
				if x < 0 {
					return -x, nil
				}
				return x, nil
			case float64:
				return math.Abs(x), nil
			case bool:
				return boolInt(x), nil
			}
			return nil, errorf("bad operand type for abs(): %s", pyRepr(typeName(v)))
		},
		"attr": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("attr", args, kw, []string{"name"}, []any{nil})
			if err != nil {
				return nil, err
			}
			name, _ := p[0].(string)
			return getAttr(v, name)
		},
		"capitalize": func(v any, args []any, kw *Dict) (any, error) {
			rs := runes(strArg(v))
			for i := range rs {
				if i == 0 {
					rs[i] = unicode.ToUpper(rs[i])
				} else {
					rs[i] = unicode.ToLower(rs[i])
				}
			}
			return string(rs), nil
		},
		"center": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("center", args, kw, []string{"width"}, []any{int64(80)})
			if err != nil {
				return nil, err
			}
			w, err := toInt(p[0], "width")
			if err != nil {
				return nil, err
			}
			return pyCenter(strArg(v), int(w), " "), nil
		},
		"default": filterDefault,
		"d":       filterDefault,
		"dictsort": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("dictsort", args, kw, []string{"case_sensitive", "by", "reverse"}, []any{false, "key", false})
			if err != nil {
				return nil, err
			}
			d, ok := v.(*Dict)
			if !ok {
				return nil, errorf("dictsort: want a dict, got %s", typeName(v))
			}
			pos := 0
			if p[1] == "value" {
				pos = 1
			}
			items := dictItems(d)
			err = sortValues(items, func(x any) (any, error) { return x.(Tuple)[pos], nil }, truthy(p[0]), truthy(p[2]))
			return items, err
		},
		"escape": filterEscape,
		"e":      filterEscape,
		"first": func(v any, args []any, kw *Dict) (any, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return &Undefined{msg: "No first item, sequence was empty."}, nil
			}
			return items[0], nil
		},
		"float": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("float", args, kw, []string{"default"}, []any{0.0})
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case int64:
				return float64(x), nil
			case float64:
				return x, nil
			case bool:
				return float64(boolInt(x)), nil
			case string:
				if f, err := strconv.ParseFloat(strings.TrimFunc(x, isPySpace), 64); err == nil {
					return f, nil
				}
			}
			return p[0], nil
		},
		"format": func(v any, args []any, kw *Dict) (any, error) {
			if kw != nil && len(args) > 0 {
				return nil, errorf("can't handle positional and keyword arguments at the same time")
			}
			if kw != nil {
				return percentFormat(strArg(v), kw)
			}
			return percentFormat(strArg(v), Tuple(args))
		},
		"indent": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("indent", args, kw, []string{"width", "first", "blank"}, []any{int64(4), false, false})
			if err != nil {
				return nil, err
			}
			ind, ok := p[0].(string)
			if !ok {
				n, err := toInt(p[0], "width")
				if err != nil {
					return nil, err
				}
				ind = strings.Repeat(" ", int(n))
			}
			s := strArg(v) + ""
			lines := strings.Split(s, "\n")
			for i := range lines {
				if i == 0 && !truthy(p[1]) {
					continue
				}
				if !truthy(p[2]) && strings.TrimFunc(lines[i], isPySpace) == "" {
					continue
				}
				lines[i] = ind + lines[i]
			}
			return strings.Join(lines, "\n"), nil
		},
		"int": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("int", args, kw, []string{"default", "base"}, []any{int64(0), int64(10)})
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case int64:
				return x, nil
			case float64:
				return int64(x), nil
			case bool:
				return boolInt(x), nil
			case string:
				base, _ := toInt(p[1], "base")
				s := strings.ReplaceAll(strings.TrimFunc(x, isPySpace), "_", "")
				if len(s) > 2 && s[0] == '0' {
					switch {
					case base == 16 && (s[1] == 'x' || s[1] == 'X'), base == 8 && (s[1] == 'o' || s[1] == 'O'),
						base == 2 && (s[1] == 'b' || s[1] == 'B'):
						s = s[2:]
					}
				}
				if n, err := strconv.ParseInt(s, int(base), 64); err == nil {
					return n, nil
				}
				if f, err := strconv.ParseFloat(s, 64); err == nil {
					return int64(f), nil
				}
			}
			return p[0], nil
		},
		"items": func(v any, args []any, kw *Dict) (any, error) {
			switch x := v.(type) {
			case *Undefined:
				return []any{}, nil
			case *Dict:
				return dictItems(x), nil
			}
			return nil, errorf("Can only get item pairs from a mapping.")
		},
		"join": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("join", args, kw, []string{"d", "attribute"}, []any{"", nil})
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				if p[1] != nil {
					if it, err = getPath(it, p[1]); err != nil {
						return nil, err
					}
				}
				parts[i] = str(it)
			}
			return strings.Join(parts, str(p[0])), nil
		},
		"last": func(v any, args []any, kw *Dict) (any, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return &Undefined{msg: "No last item, sequence was empty."}, nil
			}
			return items[len(items)-1], nil
		},
		"length": filterLength,
		"count":  filterLength,
		"list": func(v any, args []any, kw *Dict) (any, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			return append([]any{}, items...), nil
		},
		"lower": func(v any, args []any, kw *Dict) (any, error) { return strings.ToLower(strArg(v)), nil },
		"upper": func(v any, args []any, kw *Dict) (any, error) { return strings.ToUpper(strArg(v)), nil },
		"map":   filterMap,
		"max":   func(v any, args []any, kw *Dict) (any, error) { return minMax(v, args, kw, true) },
		"min":   func(v any, args []any, kw *Dict) (any, error) { return minMax(v, args, kw, false) },
		"pprint": func(v any, args []any, kw *Dict) (any, error) {
			return pyRepr(v), nil
		},
		"reject":     func(v any, args []any, kw *Dict) (any, error) { return selectItems(v, args, kw, false, false) },
		"rejectattr": func(v any, args []any, kw *Dict) (any, error) { return selectItems(v, args, kw, false, true) },
		"select":     func(v any, args []any, kw *Dict) (any, error) { return selectItems(v, args, kw, true, false) },
		"selectattr": func(v any, args []any, kw *Dict) (any, error) { return selectItems(v, args, kw, true, true) },
		"replace": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("replace", args, kw, []string{"old", "new", "count"}, []any{nil, nil, nil})
			if err != nil {
				return nil, err
			}
			n := -1
			if p[2] != nil {
				c, err := toInt(p[2], "count")
				if err != nil {
					return nil, err
				}
				n = int(c)
			}
			return pyReplace(strArg(v), str(p[0]), str(p[1]), n), nil
		},
		"reverse": func(v any, args []any, kw *Dict) (any, error) {
			if s, ok := v.(string); ok {
				rs := runes(s)
				for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
					rs[i], rs[j] = rs[j], rs[i]
				}
				return string(rs), nil
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := make([]any, len(items))
			for i, it := range items {
				out[len(items)-1-i] = it
			}
			return out, nil
		},
		"round": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("round", args, kw, []string{"precision", "method"}, []any{int64(0), "common"})
			if err != nil {
				return nil, err
			}
			_, f, isFloat, ok := number(v)
			if !ok {
				return nil, errorf("round: want a number, got %s", typeName(v))
			}
			if !isFloat {
				n, _, _, _ := number(v)
				f = float64(n)
			}
			prec, _ := toInt(p[0], "precision")
			scale := math.Pow(10, float64(prec))
			switch p[1] {
			case "common":
				// Python's round: the nearest, ties to even, on the exact binary value (as
				// FormatFloat rounds).
				if prec >= 0 {
					r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
					return r, nil
				}
				return math.RoundToEven(f*scale) / scale, nil
			case "ceil":
				return math.Ceil(f*scale) / scale, nil
			case "floor":
				return math.Floor(f*scale) / scale, nil
			}
			return nil, errorf("method must be common, ceil or floor")
		},
		"safe": func(v any, args []any, kw *Dict) (any, error) { return strArg(v), nil },
		"sort": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("sort", args, kw, []string{"reverse", "case_sensitive", "attribute"}, []any{false, false, nil})
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := append([]any{}, items...)
			err = sortValues(out, func(x any) (any, error) {
				if p[2] == nil {
					return x, nil
				}
				return getPath(x, p[2])
			}, truthy(p[1]), truthy(p[0]))
			return out, err
		},
		"string": func(v any, args []any, kw *Dict) (any, error) { return str(v), nil },
		"sum": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("sum", args, kw, []string{"attribute", "start"}, []any{nil, int64(0)})
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			acc := p[1]
			for _, it := range items {
				if p[0] != nil {
					if it, err = getPath(it, p[0]); err != nil {
						return nil, err
					}
				}
				if acc, err = binary("+", acc, it); err != nil {
					return nil, err
				}
			}
			return acc, nil
		},
		"title": func(v any, args []any, kw *Dict) (any, error) {
			// Jinja2's do_title: the first letter of each word (after a run of spaces, -,
			// (, {, [ or <) upper case, the rest lower case.
			var b strings.Builder
			start := true
			for _, r := range strArg(v) {
				if isPySpace(r) || strings.ContainsRune("-({[<", r) {
					b.WriteRune(r)
					start = true
					continue
				}
				if start {
					b.WriteRune(unicode.ToUpper(r))
				} else {
					b.WriteRune(unicode.ToLower(r))
				}
				start = false
			}
			return b.String(), nil
		},
		"tojson": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("tojson", args, kw, []string{"ensure_ascii", "indent", "separators", "sort_keys"}, []any{false, nil, nil, false})
			if err != nil {
				return nil, err
			}
			if truthy(p[0]) || p[2] != nil {
				return nil, errorf("tojson: ensure_ascii and separators are not supported")
			}
			ind := ""
			switch x := p[1].(type) {
			case nil:
			case string:
				ind = x
			default:
				n, err := toInt(x, "indent")
				if err != nil {
					return nil, err
				}
				ind = strings.Repeat(" ", int(n))
				if n == 0 {
					// json.dumps with indent=0 still breaks lines.
					return jsonIndentZero(v, truthy(p[3]))
				}
			}
			var b strings.Builder
			if err := toJSON(&b, v, ind, 0, truthy(p[3])); err != nil {
				return nil, err
			}
			return b.String(), nil
		},
		"trim": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("trim", args, kw, []string{"chars"}, []any{nil})
			if err != nil {
				return nil, err
			}
			return pyStrip(strArg(v), p[0], true, true), nil
		},
		"truncate": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("truncate", args, kw, []string{"length", "killwords", "end", "leeway"}, []any{int64(255), false, "...", int64(5)})
			if err != nil {
				return nil, err
			}
			s := strArg(v)
			n, _ := toInt(p[0], "length")
			lee, _ := toInt(p[3], "leeway")
			end := str(p[2])
			rs := runes(s)
			if int64(len(rs)) <= n+lee {
				return s, nil
			}
			cut := string(rs[:max(0, int(n)-runeLen(end))])
			if truthy(p[1]) {
				return cut + end, nil
			}
			if i := strings.LastIndex(cut, " "); i >= 0 {
				cut = cut[:i]
			}
			return cut + end, nil
		},
		"unique": func(v any, args []any, kw *Dict) (any, error) {
			p, err := params("unique", args, kw, []string{"case_sensitive", "attribute"}, []any{false, nil})
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			var out, seen []any
			for _, it := range items {
				k := it
				if p[1] != nil {
					if k, err = getPath(it, p[1]); err != nil {
						return nil, err
					}
				}
				if s, ok := k.(string); ok && !truthy(p[0]) {
					k = strings.ToLower(s)
				}
				dup := false
				for _, sv := range seen {
					if equal(sv, k) {
						dup = true
						break
					}
				}
				if !dup {
					seen = append(seen, k)
					out = append(out, it)
				}
			}
			return toList(out), nil
		},
		"wordcount": func(v any, args []any, kw *Dict) (any, error) {
			return int64(len(strings.FieldsFunc(strArg(v), func(r rune) bool {
				return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_')
			}))), nil
		},
	}
}

func filterDefault(v any, args []any, kw *Dict) (any, error) {
	p, err := params("default", args, kw, []string{"default_value", "boolean"}, []any{"", false})
	if err != nil {
		return nil, err
	}
	if _, undef := v.(*Undefined); undef || truthy(p[1]) && !truthy(v) {
		return p[0], nil
	}
	return v, nil
}

func filterEscape(v any, args []any, kw *Dict) (any, error) {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", `"`, "&#34;").Replace(strArg(v)), nil
}

func filterLength(v any, args []any, kw *Dict) (any, error) {
	switch x := v.(type) {
	case string:
		return int64(runeLen(x)), nil
	case []any:
		return int64(len(x)), nil
	case Tuple:
		return int64(len(x)), nil
	case *Dict:
		return int64(x.Len()), nil
	case *Undefined:
		return int64(0), nil
	}
	return nil, errorf("object of type %s has no len()", pyRepr(typeName(v)))
}

func dictItems(d *Dict) []any {
	out := make([]any, len(d.keys))
	for i, k := range d.keys {
		out[i] = Tuple{k, d.m[k]}
	}
	return out
}

// getPath is Jinja2's attribute getter for filters: "a.b.0" walks attributes and items.
func getPath(v any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return getItem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var err error
		if n, e := strconv.ParseInt(part, 10, 64); e == nil {
			v, err = getItem(v, n)
		} else {
			v, err = getItem(v, part)
		}
		if err != nil {
			return nil, err
		}
	}
	return v, nil
}

// sortValues sorts items in place, stably, by key(item); strings compare without case
// unless caseSensitive.
func sortValues(items []any, key func(any) (any, error), caseSensitive, reverse bool) error {
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		if s, ok := k.(string); ok && !caseSensitive {
			k = strings.ToLower(s)
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	sort.SliceStable(idx, func(a, b int) bool {
		c, err := order(keys[idx[a]], keys[idx[b]], "<")
		if err != nil && sortErr == nil {
			sortErr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if sortErr != nil {
		return sortErr
	}
	sorted := make([]any, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func minMax(v any, args []any, kw *Dict, wantMax bool) (any, error) {
	p, err := params("max", args, kw, []string{"case_sensitive", "attribute"}, []any{false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{msg: "No aggregated item, sequence was empty."}, nil
	}
	out := append([]any{}, items...)
	if err := sortValues(out, func(x any) (any, error) {
		if p[1] == nil {
			return x, nil
		}
		return getPath(x, p[1])
	}, truthy(p[0]), false); err != nil {
		return nil, err
	}
	if wantMax {
		// Python's max keeps the first of equal maxima.
		best := out[len(out)-1]
		return best, nil
	}
	return out[0], nil
}

func filterMap(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if kw != nil && hasKey(kw, "attribute") {
		attr, _ := kw.Get("attribute")
		def, hasDef := kw.Get("default")
		for _, it := range items {
			x, err := getPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, undef := x.(*Undefined); undef && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, errorf("map requires a filter argument")
	}
	name, _ := args[0].(string)
	f, ok := filters[name]
	if !ok {
		return nil, errorf("No filter named %s.", pyRepr(name))
	}
	for _, it := range items {
		x, err := f(it, args[1:], kw)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func selectItems(v any, args []any, kw *Dict, want, byAttr bool) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var attr any
	if byAttr {
		if len(args) == 0 {
			return nil, errorf("Missing parameter for attribute name")
		}
		attr, args = args[0], args[1:]
	}
	test := func(x any) (bool, error) { return truthy(x), nil }
	if len(args) > 0 {
		name, _ := args[0].(string)
		t, ok := tests[name]
		if !ok {
			return nil, errorf("No test named %s.", pyRepr(name))
		}
		rest := args[1:]
		test = func(x any) (bool, error) { return t(x, rest, kw) }
	}
	out := []any{}
	for _, it := range items {
		x := it
		if byAttr {
			if x, err = getPath(it, attr); err != nil {
				return nil, err
			}
		}
		ok, err := test(x)
		if err != nil {
			return nil, err
		}
		if ok == want {
			out = append(out, it)
		}
	}
	return out, nil
}

// jsonIndentZero is json.dumps(v, indent=0): every item on its own line, not indented.
func jsonIndentZero(v any, sortKeys bool) (any, error) {
	var b strings.Builder
	if err := toJSON(&b, v, "\x00", 0, sortKeys); err != nil {
		return nil, err
	}
	return strings.ReplaceAll(b.String(), "\x00", ""), nil
}

type testFn func(v any, args []any, kw *Dict) (bool, error)

var tests map[string]testFn

func init() {
	cmpTest := func(op string) testFn {
		return func(v any, args []any, kw *Dict) (bool, error) {
			if len(args) != 1 {
				return false, errorf("the %s test takes one argument", op)
			}
			return compare(op, v, args[0])
		}
	}
	isType := func(f func(any) bool) testFn {
		return func(v any, args []any, kw *Dict) (bool, error) { return f(v), nil }
	}
	tests = map[string]testFn{
		"defined":   isType(func(v any) bool { _, u := v.(*Undefined); return !u }),
		"undefined": isType(func(v any) bool { _, u := v.(*Undefined); return u }),
		"none":      isType(func(v any) bool { return v == nil }),
		"boolean":   isType(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":      isType(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"false":     isType(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"integer":   isType(func(v any) bool { _, ok := v.(int64); return ok }),
		"float":     isType(func(v any) bool { _, ok := v.(float64); return ok }),
		"number":    isType(func(v any) bool { _, _, _, ok := number(v); return ok }),
		"string":    isType(func(v any) bool { _, ok := v.(string); return ok }),
		"mapping":   isType(func(v any) bool { _, ok := v.(*Dict); return ok }),
		"iterable": isType(func(v any) bool {
			switch v.(type) {
			case string, []any, Tuple, *Dict, *Undefined:
				return true
			}
			return false
		}),
		"sequence": isType(func(v any) bool {
			switch v.(type) {
			case string, []any, Tuple, *Dict:
				return true
			}
			return false
		}),
		"callable": isType(func(v any) bool {
			switch v.(type) {
			case *Func, *Namespace:
				return true
			}
			return false
		}),
		"escaped": isType(func(v any) bool { return false }),
		"odd": func(v any, args []any, kw *Dict) (bool, error) {
			n, err := toInt(v, "value")
			return n%2 != 0, err
		},
		"even": func(v any, args []any, kw *Dict) (bool, error) {
			n, err := toInt(v, "value")
			return n%2 == 0, err
		},
		"divisibleby": func(v any, args []any, kw *Dict) (bool, error) {
			if len(args) != 1 {
				return false, errorf("divisibleby takes one argument")
			}
			n, err := toInt(v, "value")
			if err != nil {
				return false, err
			}
			d, err := toInt(args[0], "num")
			if err != nil || d == 0 {
				return false, errorf("integer division or modulo by zero")
			}
			return n%d == 0, nil
		},
		"lower": isType(func(v any) bool { s := str(v); return s == strings.ToLower(s) && s != strings.ToUpper(s) }),
		"upper": isType(func(v any) bool { s := str(v); return s == strings.ToUpper(s) && s != strings.ToLower(s) }),
		"sameas": func(v any, args []any, kw *Dict) (bool, error) {
			if len(args) != 1 {
				return false, errorf("sameas takes one argument")
			}
			o := args[0]
			switch x := v.(type) {
			case nil, bool, int64, float64, string:
				return fmt.Sprintf("%T", x) == fmt.Sprintf("%T", o) && equal(x, o), nil
			case []any:
				y, ok := o.([]any)
				return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0]), nil
			}
			return v == o, nil
		},
		"in": func(v any, args []any, kw *Dict) (bool, error) {
			if len(args) != 1 {
				return false, errorf("the in test takes one argument")
			}
			return contained(v, args[0])
		},
		"filter": func(v any, args []any, kw *Dict) (bool, error) { _, ok := filters[str(v)]; return ok, nil },
		"test":   func(v any, args []any, kw *Dict) (bool, error) { _, ok := tests[str(v)]; return ok, nil },
	}
	for op, names := range map[string][]string{"==": {"eq", "equalto"}, "!=": {"ne"}, "<": {"lt", "lessthan"},
		"<=": {"le"}, ">": {"gt", "greaterthan"}, ">=": {"ge"}} {
		names = append(names, op)
		for _, n := range names {
			tests[n] = cmpTest(op)
		}
	}
}

var builtinGlobals = map[string]any{
	"range": &Func{Name: "range", Fn: func(args []any, kw *Dict) (any, error) {
		var start, stop, step int64 = 0, 0, 1
		ints := make([]int64, len(args))
		for i, a := range args {
			n, err := toInt(a, "range argument")
			if err != nil {
				return nil, err
			}
			ints[i] = n
		}
		switch len(ints) {
		case 1:
			stop = ints[0]
		case 2:
			start, stop = ints[0], ints[1]
		case 3:
			start, stop, step = ints[0], ints[1], ints[2]
		default:
			return nil, errorf("range expected 1 to 3 arguments, got %d", len(args))
		}
		if step == 0 {
			return nil, errorf("range() arg 3 must not be zero")
		}
		out := []any{}
		for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
			if len(out) >= maxRange {
				return nil, errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
			}
			out = append(out, i)
		}
		return out, nil
	}},
	"dict": &Func{Name: "dict", Fn: func(args []any, kw *Dict) (any, error) {
		d := NewDict()
		for _, a := range args {
			switch x := a.(type) {
			case *Dict:
				for _, k := range x.keys {
					d.Set(k, x.m[k])
				}
			default:
				items, err := iterate(a)
				if err != nil {
					return nil, err
				}
				for _, it := range items {
					pair := asSeq(it)
					if len(pair) != 2 {
						return nil, errorf("dict: want (key, value) pairs with string keys")
					}
					k, ok := pair[0].(string)
					if !ok {
						return nil, errorf("dict: want (key, value) pairs with string keys")
					}
					d.Set(k, pair[1])
				}
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				d.Set(k, kw.m[k])
			}
		}
		return d, nil
	}},
	"namespace": &Func{Name: "namespace", Fn: func(args []any, kw *Dict) (any, error) {
		d := NewDict()
		for _, a := range args {
			if x, ok := a.(*Dict); ok {
				for _, k := range x.keys {
					d.Set(k, x.m[k])
				}
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				d.Set(k, kw.m[k])
			}
		}
		return &Namespace{d}, nil
	}},
	"raise_exception": &Func{Name: "raise_exception", Fn: func(args []any, kw *Dict) (any, error) {
		msg := ""
		if len(args) > 0 {
			msg = str(args[0])
		}
		return nil, &Error{Msg: msg, Raised: true}
	}},
	"joiner": &Func{Name: "joiner", Fn: func(args []any, kw *Dict) (any, error) {
		sep := ", "
		if len(args) > 0 {
			sep = str(args[0])
		}
		used := false
		return &Func{Name: "joiner", Fn: func([]any, *Dict) (any, error) {
			if !used {
				used = true
				return "", nil
			}
			return sep, nil
		}}, nil
	}},
	"cycler": &Func{Name: "cycler", Fn: func(args []any, kw *Dict) (any, error) {
		return nil, errorf("cycler() is not supported")
	}},
}

// getAttr is x.name as Jinja2's immutable sandbox does it: a method or attribute of the
// object first (methods that modify it are unsafe), then the item of that name, else undefined.
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *Dict:
		if m := dictMethod(x, name); m != nil {
			return m, nil
		}
		if isMutating("dict", name) {
			return unsafeAttr(obj, name), nil
		}
		if v, ok := x.m[name]; ok {
			return v, nil
		}
	case *Namespace:
		if v, ok := x.d.m[name]; ok {
			return v, nil
		}
	case string:
		if m := strMethod(x, name); m != nil {
			return m, nil
		}
	case []any:
		if m := listMethod(x, name); m != nil {
			return m, nil
		}
		if isMutating("list", name) {
			return unsafeAttr(obj, name), nil
		}
	case *loopObj:
		return x.attr(name)
	}
	return undefinedAttr(obj, name), nil
}

func isMutating(typ, name string) bool {
	switch typ {
	case "dict":
		return contains([]string{"clear", "pop", "popitem", "setdefault", "update"}, name)
	case "list":
		return contains([]string{"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}, name)
	}
	return false
}

func method(name string, fn func(args []any, kw *Dict) (any, error)) *Func {
	return &Func{Name: name, Fn: fn}
}

func dictMethod(d *Dict, name string) *Func {
	switch name {
	case "items":
		return method(name, func([]any, *Dict) (any, error) { return dictItems(d), nil })
	case "keys":
		return method(name, func([]any, *Dict) (any, error) {
			out := make([]any, len(d.keys))
			for i, k := range d.keys {
				out[i] = k
			}
			return out, nil
		})
	case "values":
		return method(name, func([]any, *Dict) (any, error) {
			out := make([]any, len(d.keys))
			for i, k := range d.keys {
				out[i] = d.m[k]
			}
			return out, nil
		})
	case "get":
		return method(name, func(args []any, kw *Dict) (any, error) {
			p, err := params("get", args, kw, []string{"key", "default"}, []any{nil, nil})
			if err != nil {
				return nil, err
			}
			if k, ok := p[0].(string); ok {
				if v, ok := d.m[k]; ok {
					return v, nil
				}
			}
			return p[1], nil
		})
	case "copy":
		return method(name, func([]any, *Dict) (any, error) {
			c := NewDict()
			for _, k := range d.keys {
				c.Set(k, d.m[k])
			}
			return c, nil
		})
	}
	return nil
}

func listMethod(l []any, name string) *Func {
	switch name {
	case "index":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) < 1 {
				return nil, errorf("index expected 1 argument")
			}
			for i, x := range l {
				if equal(x, args[0]) {
					return int64(i), nil
				}
			}
			return nil, errorf("%s is not in list", pyRepr(args[0]))
		})
	case "count":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("count expected 1 argument")
			}
			n := int64(0)
			for _, x := range l {
				if equal(x, args[0]) {
					n++
				}
			}
			return n, nil
		})
	case "copy":
		return method(name, func([]any, *Dict) (any, error) { return append([]any{}, l...), nil })
	}
	return nil
}

func (lp *loopObj) attr(name string) (any, error) {
	n := len(lp.items)
	switch name {
	case "index":
		return int64(lp.index + 1), nil
	case "index0":
		return int64(lp.index), nil
	case "revindex":
		return int64(n - lp.index), nil
	case "revindex0":
		return int64(n - lp.index - 1), nil
	case "first":
		return lp.index == 0, nil
	case "last":
		return lp.index == n-1, nil
	case "length":
		return int64(n), nil
	case "depth":
		return int64(lp.depth), nil
	case "depth0":
		return int64(lp.depth - 1), nil
	case "previtem":
		if lp.index == 0 {
			return &Undefined{msg: "there is no previous item"}, nil
		}
		return lp.items[lp.index-1], nil
	case "nextitem":
		if lp.index == n-1 {
			return &Undefined{msg: "there is no next item"}, nil
		}
		return lp.items[lp.index+1], nil
	case "cycle":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) == 0 {
				return nil, errorf("no items for cycling given")
			}
			return args[lp.index%len(args)], nil
		}), nil
	case "changed":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if lp.seen && equal(Tuple(lp.changed), Tuple(args)) {
				return false, nil
			}
			lp.seen, lp.changed = true, args
			return true, nil
		}), nil
	}
	return undefinedAttr(lp, name), nil
}

// pyStrip is Python's str.strip/lstrip/rstrip: chars nil strips whitespace (str.isspace),
// else the characters of the string chars.
func pyStrip(s string, chars any, left, right bool) string {
	f := isPySpace
	if c, ok := chars.(string); ok {
		f = func(r rune) bool { return strings.ContainsRune(c, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}

// pyReplace is Python's str.replace (an empty old inserts new between characters).
func pyReplace(s, old, new string, n int) string {
	return strings.Replace(s, old, new, n)
}

func pyCenter(s string, width int, fill string) string {
	n := runeLen(s)
	if width <= n {
		return s
	}
	pad := width - n
	left := pad / 2
	if pad%2 == 1 && width%2 == 1 {
		left++
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left)
}

// pySplit is Python's str.split (sep nil: runs of whitespace, no empty strings).
func pySplit(s string, sep any, maxsplit int64) ([]any, error) {
	var parts []string
	if sep == nil {
		rest := strings.TrimLeftFunc(s, isPySpace)
		for rest != "" {
			if maxsplit >= 0 && int64(len(parts)) == maxsplit {
				parts = append(parts, rest)
				break
			}
			i := strings.IndexFunc(rest, isPySpace)
			if i < 0 {
				parts = append(parts, rest)
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], isPySpace)
		}
	} else {
		sp, ok := sep.(string)
		if !ok {
			return nil, errorf("must be str or None, not %s", typeName(sep))
		}
		if sp == "" {
			return nil, errorf("empty separator")
		}
		n := -1
		if maxsplit >= 0 {
			n = int(maxsplit) + 1
		}
		parts = strings.SplitN(s, sp, n)
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func strMethod(s string, name string) *Func {
	strip := func(left, right bool) *Func {
		return method(name, func(args []any, kw *Dict) (any, error) {
			var chars any
			if len(args) > 0 {
				chars = args[0]
			}
			return pyStrip(s, chars, left, right), nil
		})
	}
	affix := func(suffix bool) *Func {
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) < 1 {
				return nil, errorf("%s takes at least 1 argument", name)
			}
			var cands []any
			switch x := args[0].(type) {
			case string:
				cands = []any{x}
			case Tuple:
				cands = x
			case []any:
				return nil, errorf("%s first arg must be str or a tuple of str, not list", name)
			default:
				return nil, errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(args[0]))
			}
			for _, c := range cands {
				p, _ := c.(string)
				if suffix && strings.HasSuffix(s, p) || !suffix && strings.HasPrefix(s, p) {
					return true, nil
				}
			}
			return false, nil
		})
	}
	switch name {
	case "strip":
		return strip(true, true)
	case "lstrip":
		return strip(true, false)
	case "rstrip":
		return strip(false, true)
	case "startswith":
		return affix(false)
	case "endswith":
		return affix(true)
	case "upper":
		return method(name, func([]any, *Dict) (any, error) { return strings.ToUpper(s), nil })
	case "lower":
		return method(name, func([]any, *Dict) (any, error) { return strings.ToLower(s), nil })
	case "title":
		return method(name, func(a []any, k *Dict) (any, error) {
			var b strings.Builder
			prevCased := false
			for _, r := range s {
				if unicode.IsLetter(r) {
					if prevCased {
						b.WriteRune(unicode.ToLower(r))
					} else {
						b.WriteRune(unicode.ToUpper(r))
					}
					prevCased = true
				} else {
					b.WriteRune(r)
					prevCased = false
				}
			}
			return b.String(), nil
		})
	case "capitalize":
		return method(name, func(a []any, k *Dict) (any, error) { return filters["capitalize"](s, nil, nil) })
	case "split", "rsplit":
		return method(name, func(args []any, kw *Dict) (any, error) {
			p, err := params(name, args, kw, []string{"sep", "maxsplit"}, []any{nil, int64(-1)})
			if err != nil {
				return nil, err
			}
			n, err := toInt(p[1], "maxsplit")
			if err != nil {
				return nil, err
			}
			if name == "rsplit" && n >= 0 {
				return nil, errorf("rsplit with maxsplit is not supported")
			}
			return pySplit(s, p[0], n)
		})
	case "splitlines":
		return method(name, func([]any, *Dict) (any, error) {
			lines := strings.FieldsFunc(strings.ReplaceAll(s, "\r\n", "\n"), func(r rune) bool {
				return r == '\n' || r == '\r' || r == '\v' || r == '\f' || r == 0x1c || r == 0x1d || r == 0x1e || r == 0x85 || r == 0x2028 || r == 0x2029
			})
			out := make([]any, len(lines))
			for i, l := range lines {
				out[i] = l
			}
			return out, nil
		})
	case "replace":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) < 2 {
				return nil, errorf("replace expected at least 2 arguments")
			}
			n := int64(-1)
			if len(args) > 2 {
				var err error
				if n, err = toInt(args[2], "count"); err != nil {
					return nil, err
				}
			}
			return pyReplace(s, str(args[0]), str(args[1]), int(n)), nil
		})
	case "find", "rfind", "index", "rindex", "count":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) < 1 {
				return nil, errorf("%s expected at least 1 argument", name)
			}
			sub, ok := args[0].(string)
			if !ok {
				return nil, errorf("must be str, not %s", typeName(args[0]))
			}
			if name == "count" {
				return int64(strings.Count(s, sub)), nil
			}
			var i int
			if name == "find" || name == "index" {
				i = strings.Index(s, sub)
			} else {
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if name == "index" || name == "rindex" {
					return nil, errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(runeLen(s[:i])), nil
		})
	case "join":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("join takes exactly one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		})
	case "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper":
		return method(name, func([]any, *Dict) (any, error) {
			if s == "" {
				return false, nil
			}
			switch name {
			case "islower":
				return s == strings.ToLower(s) && s != strings.ToUpper(s), nil
			case "isupper":
				return s == strings.ToUpper(s) && s != strings.ToLower(s), nil
			}
			for _, r := range s {
				ok := false
				switch name {
				case "isdigit":
					ok = unicode.IsDigit(r)
				case "isalpha":
					ok = unicode.IsLetter(r)
				case "isalnum":
					ok = unicode.IsLetter(r) || unicode.IsNumber(r)
				case "isspace":
					ok = isPySpace(r)
				}
				if !ok {
					return false, nil
				}
			}
			return true, nil
		})
	case "format":
		return method(name, func(args []any, kw *Dict) (any, error) { return braceFormat(s, args, kw) })
	case "zfill":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errorf("zfill takes one argument")
			}
			w, err := toInt(args[0], "width")
			if err != nil {
				return nil, err
			}
			n := runeLen(s)
			if int(w) <= n {
				return s, nil
			}
			sign := ""
			body := s
			if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
				sign, body = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", int(w)-n) + body, nil
		})
	case "center":
		return method(name, func(args []any, kw *Dict) (any, error) {
			if len(args) < 1 {
				return nil, errorf("center expected at least 1 argument")
			}
			w, err := toInt(args[0], "width")
			if err != nil {
				return nil, err
			}
			fill := " "
			if len(args) > 1 {
				fill = str(args[1])
			}
			return pyCenter(s, int(w), fill), nil
		})
	}
	return nil
}

// braceFormat is str.format with "{}", "{0}" and "{name}" fields (no format specs).
func braceFormat(s string, args []any, kw *Dict) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, errorf("Single '{' encountered in format string")
		}
		field := s[i+1 : i+j]
		i += j
		if strings.ContainsAny(field, ":!") {
			return nil, errorf("format specs in str.format are not supported")
		}
		var v any
		switch {
		case field == "":
			if auto >= len(args) {
				return nil, errorf("Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case field[0] >= '0' && field[0] <= '9':
			n, _ := strconv.Atoi(field)
			if n >= len(args) {
				return nil, errorf("Replacement index %d out of range for positional args tuple", n)
			}
			v = args[n]
		default:
			var ok bool
			if kw != nil {
				v, ok = kw.Get(field)
			}
			if !ok {
				return nil, errorf("KeyError: %s", pyRepr(field))
			}
		}
		b.WriteString(str(v))
	}
	return b.String(), nil
}

// percentFormat is Python's "fmt % args" for %s, %r, %d, %i, %f, %x and %% with flags,
// width and precision.
func percentFormat(format string, args any) (any, error) {
	var list []any
	var named *Dict
	switch x := args.(type) {
	case Tuple:
		list = x
	case *Dict:
		named = x
	default:
		list = []any{args}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, errorf("incomplete format")
		}
		var v any
		hasV := false
		if format[i] == '(' {
			j := strings.IndexByte(format[i:], ')')
			if j < 0 || named == nil {
				return nil, errorf("format requires a mapping")
			}
			key := format[i+1 : i+j]
			v, hasV = named.Get(key)
			if !hasV {
				return nil, errorf("KeyError: %s", pyRepr(key))
			}
			i += j + 1
		}
		start := i
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			i++
		}
		flags := format[start:i]
		ws := i
		for i < len(format) && format[i] >= '0' && format[i] <= '9' {
			i++
		}
		width := format[ws:i]
		prec := ""
		if i < len(format) && format[i] == '.' {
			ps := i
			i++
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
			prec = format[ps:i]
		}
		if i >= len(format) {
			return nil, errorf("incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if !hasV {
			if next >= len(list) {
				return nil, errorf("not enough arguments for format string")
			}
			v = list[next]
			next++
		}
		spec := "%" + flags + width + prec
		switch verb {
		case 's':
			fmt.Fprintf(&b, spec+"s", str(v))
		case 'r':
			fmt.Fprintf(&b, spec+"s", pyRepr(v))
		case 'd', 'i':
			n, err := toInt(v, "%d format")
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, spec+"d", n)
		case 'f', 'F', 'e', 'g', 'x', 'X', 'o':
			n, f, isFloat, ok := number(v)
			if !ok {
				return nil, errorf("must be real number, not %s", typeName(v))
			}
			if strings.IndexByte("xXo", verb) >= 0 {
				fmt.Fprintf(&b, spec+string(verb), n)
				continue
			}
			if !isFloat {
				f = float64(n)
			}
			if prec == "" {
				spec += ".6"
			}
			fmt.Fprintf(&b, spec+string(verb), f)
		default:
			return nil, errorf("unsupported format character %q", verb)
		}
	}
	if named == nil && next < len(list) {
		return nil, errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}
