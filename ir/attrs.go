package ir

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// AttrKind is the kind of an attribute value.
type AttrKind uint8

const (
	AttrInt AttrKind = iota + 1
	AttrFloat
	AttrBool
	AttrString
	AttrInts
)

func (k AttrKind) String() string {
	return [...]string{"", "int", "float", "bool", "string", "int list"}[k]
}

// Attrs holds an op's attributes: int64, float64, bool, string or []int values by name.
type Attrs map[string]any

// Int returns the named int attribute, or def when absent.
func (a Attrs) Int(name string, def int) int {
	if v, ok := a[name]; ok {
		switch v := v.(type) {
		case int:
			return v
		case int64:
			return int(v)
		}
	}
	return def
}

// Float returns the named float attribute (an int is widened), or def when absent.
func (a Attrs) Float(name string, def float64) float64 {
	if v, ok := a[name]; ok {
		switch v := v.(type) {
		case float64:
			return v
		case int:
			return float64(v)
		case int64:
			return float64(v)
		}
	}
	return def
}

// Bool returns the named bool attribute, or def when absent.
func (a Attrs) Bool(name string, def bool) bool {
	if v, ok := a[name].(bool); ok {
		return v
	}
	return def
}

// String returns the named string attribute, or def when absent.
func (a Attrs) String(name string, def string) string {
	if v, ok := a[name].(string); ok {
		return v
	}
	return def
}

// Ints returns the named int list attribute, or nil when absent.
func (a Attrs) Ints(name string) []int {
	if v, ok := a[name].([]int); ok {
		return v
	}
	return nil
}

// Clone returns a shallow copy (int lists are copied).
func (a Attrs) Clone() Attrs {
	b := make(Attrs, len(a))
	for k, v := range a {
		if l, ok := v.([]int); ok {
			v = append([]int(nil), l...)
		}
		b[k] = v
	}
	return b
}

// Key is a canonical string of the attributes, equal for equal attributes; used for hashing
// (e-graph nodes, kernel keys) and for display.
func (a Attrs) Key() string {
	if len(a) == 0 {
		return ""
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(formatAttr(a[k]))
	}
	return b.String()
}

func formatAttr(v any) string {
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case string:
		return v
	case []int:
		return Shape(v).String()
	}
	return fmt.Sprint(v)
}

// AttrSpec declares one attribute of an op.
type AttrSpec struct {
	Name     string
	Kind     AttrKind
	Required bool
	Default  any // used by Normalize when absent and not required (nil: stays absent)
	// Like names another attribute of the op whose value this one takes when absent
	// (attention's k_layout and v_layout are its layout unless given). Such an attribute is
	// held only where it differs: checkAttrs drops it when equal, so the attributes of an op
	// that does not use it keep the key (Attrs.Key) they had before it existed.
	Like string
}

// checkAttrs checks a against the op's specs: no unknown names, right kinds, required present.
// Ints given where floats are expected are widened; defaults are filled in.
func checkAttrs(op Op, a Attrs) (Attrs, error) {
	info := op.Info()
	out := make(Attrs, len(info.Attrs))
	for k, v := range a {
		var spec *AttrSpec
		for i := range info.Attrs {
			if info.Attrs[i].Name == k {
				spec = &info.Attrs[i]
			}
		}
		if spec == nil {
			return nil, fmt.Errorf("%s has no attribute %q%s", op, k, attrNames(info.Attrs))
		}
		nv, ok := coerceAttr(spec.Kind, v)
		if !ok {
			return nil, fmt.Errorf("%s attribute %s must be %s, got %v", op, k, spec.Kind, v)
		}
		out[k] = nv
	}
	for _, s := range info.Attrs {
		if _, ok := out[s.Name]; !ok {
			if s.Required {
				return nil, fmt.Errorf("%s needs attribute %s (%s)", op, s.Name, s.Kind)
			}
			if s.Default != nil {
				out[s.Name] = s.Default
			}
		}
	}
	for _, s := range info.Attrs {
		if v, ok := out[s.Name]; ok && s.Like != "" && formatAttr(v) == formatAttr(out[s.Like]) {
			delete(out, s.Name)
		}
	}
	return out, nil
}

func attrNames(specs []AttrSpec) string {
	if len(specs) == 0 {
		return " (it takes none)"
	}
	n := make([]string, len(specs))
	for i, s := range specs {
		n[i] = s.Name
	}
	return " (it has " + strings.Join(n, ", ") + ")"
}

func coerceAttr(k AttrKind, v any) (any, bool) {
	switch k {
	case AttrInt:
		switch v := v.(type) {
		case int:
			return v, true
		case int64:
			return int(v), true
		case float64:
			if v == float64(int(v)) {
				return int(v), true
			}
		}
	case AttrFloat:
		switch v := v.(type) {
		case float64:
			return v, true
		case int:
			return float64(v), true
		case int64:
			return float64(v), true
		}
	case AttrBool:
		b, ok := v.(bool)
		return b, ok
	case AttrString:
		s, ok := v.(string)
		return s, ok
	case AttrInts:
		switch v := v.(type) {
		case []int:
			return append([]int(nil), v...), true
		case Shape:
			return append([]int(nil), v...), true
		}
	}
	return nil, false
}
