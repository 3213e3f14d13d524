package ir

import "fmt"

// Attention's operand layouts. Attribute layout is q's layout and the result's; k_layout and
// v_layout, when given, are k's and v's (absent: the same as layout, so a model that writes
// one layout for all three reads as before). A layout names the order of the axes (s: sequence,
// h: heads, d: features):
//
//	shd  [seq, heads, dim]   q, k, v   a projection's rows reshaped
//	hsd  [heads, seq, dim]   q, k, v   heads first (a transposed projection, most caches)
//	hds  [heads, dim, seq]   k only    K transposed, as matmul(q, transpose(k)) reads it
//
// The layout rules (rules/layout.rules) fold the transpose between two layouts of one operand
// into its attribute, so each operand is read where it lies.

// AttnLayouts are the layouts of an attention's q (and result), k and v.
type AttnLayouts struct{ Q, K, V string }

// AttentionLayouts returns the operand layouts of an attention's attributes (checked or not:
// absent ones take their defaults).
func AttentionLayouts(a Attrs) AttnLayouts {
	q := a.String("layout", "shd")
	return AttnLayouts{Q: q, K: a.String("k_layout", q), V: a.String("v_layout", q)}
}

// Uniform reports whether q, k and v share one layout (the only form before per-operand
// layouts, and what a kernel that reads one layout for all three needs).
func (l AttnLayouts) Uniform() bool { return l.K == l.Q && l.V == l.Q }

// String spells the layouts as vkc dot and traces show them: "hsd" when uniform, else
// "q shd, k hsd, v hsd".
func (l AttnLayouts) String() string {
	if l.Uniform() {
		return l.Q
	}
	return fmt.Sprintf("q %s, k %s, v %s", l.Q, l.K, l.V)
}

// LayoutAxes returns the axes of sequence, heads and features in an attention operand of
// layout l (one of shd, hsd, hds).
func LayoutAxes(l string) (seq, head, feat int, ok bool) {
	switch l {
	case "shd":
		return 0, 1, 2, true
	case "hsd":
		return 1, 0, 2, true
	case "hds":
		return 2, 0, 1, true
	}
	return 0, 0, 0, false
}

// LayoutDims returns the (seq, heads, features) sizes of shape s in layout l (which must be
// valid: LayoutAxes).
func LayoutDims(l string, s Shape) (seq, heads, feat int) {
	a, h, f, _ := LayoutAxes(l)
	return s[a], s[h], s[f]
}

// LayoutShape is the shape of (seq, heads, features) in layout l.
func LayoutShape(l string, seq, heads, feat int) Shape {
	a, h, f, _ := LayoutAxes(l)
	s := make(Shape, 3)
	s[a], s[h], s[f] = seq, heads, feat
	return s
}

// LayoutIndex is the element index of (seq s, head h, feature f) in a tensor of ns × nh × nf
// in layout l.
func LayoutIndex(l string, s, h, f, ns, nh, nf int) int {
	switch l {
	case "hsd":
		return (h*ns+s)*nf + f
	case "hds":
		return (h*nf+f)*ns + s
	}
	return (s*nh+h)*nf + f
}

// checkAttnLayouts checks the layouts: q and v shd or hsd, k any of the three.
func checkAttnLayouts(l AttnLayouts) error {
	for _, c := range []struct {
		name, l string
		hds     bool
	}{{"layout", l.Q, false}, {"k_layout", l.K, true}, {"v_layout", l.V, false}} {
		if c.l == "shd" || c.l == "hsd" || c.hds && c.l == "hds" {
			continue
		}
		if c.hds {
			return fmt.Errorf("%s must be shd, hsd or hds, got %q", c.name, c.l)
		}
		return fmt.Errorf("%s must be shd or hsd, got %q", c.name, c.l)
	}
	return nil
}
