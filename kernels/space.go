package kernels

import (
	"fmt"
	"iter"
	"sort"
	"strconv"
	"strings"
)

// Param is one tuning parameter and its candidate values; the first value is the default.
type Param struct {
	Name   string
	Values []int
}

// Ints declares an integer parameter; the first value is the preferred default.
func Ints(name string, values ...int) Param { return Param{name, values} }

// Bools declares a boolean parameter as 0/1 (default first).
func Bools(name string, def bool) Param {
	if def {
		return Param{name, []int{1, 0}}
	}
	return Param{name, []int{0, 1}}
}

// Predicate rejects configurations that cannot work for a problem on a device, saying why.
type Predicate func(p *Problem, c Config, caps Caps) error

// Space is a template's tuning space: parameters and validity predicates. It is data, so one
// tuner searches every template's space.
type Space struct {
	Params  []Param
	preds   []Predicate
	suggest func(p *Problem, caps Caps) []Config
}

// NewSpace declares a space.
func NewSpace(params ...Param) Space { return Space{Params: params} }

// Where adds a validity predicate (e.g. "the tiles fit in shared memory").
func (s Space) Where(pred Predicate) Space {
	s.preds = append(append([]Predicate(nil), s.preds...), pred)
	return s
}

// Suggest adds a function proposing points for a problem that a budgeted search should measure
// first, right after the default (see Suggestions). It is a hint about where a large space's fast
// points lie for this kind of problem, never a choice: the tuner still measures each one and checks
// its result, and a static plan still takes the default point.
func (s Space) Suggest(f func(p *Problem, caps Caps) []Config) Space {
	s.suggest = f
	return s
}

// Suggestions are the valid points the space's Suggest function proposes for p on the device, in
// its order, without duplicates or the default point (nil without such a function).
func (s Space) Suggestions(p *Problem, caps Caps) []Config {
	if s.suggest == nil {
		return nil
	}
	def := Config{}
	for _, prm := range s.Params {
		def[prm.Name] = prm.Values[0]
	}
	seen := map[string]bool{def.Key(): true}
	var out []Config
	for _, c := range s.suggest(p, caps) {
		if k := c.Key(); !seen[k] && s.Valid(p, c, caps) == nil {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

// Size is the number of points, valid or not.
func (s Space) Size() int {
	n := 1
	for _, p := range s.Params {
		n *= len(p.Values)
	}
	return n
}

// Points enumerates the space in a fixed order: defaults first, the last parameter varying fastest.
func (s Space) Points() []Config {
	out := []Config{{}}
	for _, p := range s.Params {
		var next []Config
		for _, c := range out {
			for _, v := range p.Values {
				d := c.clone()
				d[p.Name] = v
				next = append(next, d)
			}
		}
		out = next
	}
	return out
}

// All yields the points in Points' order, one at a time (a caller that stops at the first valid
// point of a space of thousands builds one map, not thousands). Each yielded Config is the
// caller's.
func (s Space) All() iter.Seq[Config] {
	return func(yield func(Config) bool) {
		for _, p := range s.Params {
			if len(p.Values) == 0 {
				return
			}
		}
		idx := make([]int, len(s.Params))
		for {
			c := make(Config, len(s.Params))
			for j, p := range s.Params {
				c[p.Name] = p.Values[idx[j]]
			}
			if !yield(c) {
				return
			}
			j := len(idx) - 1
			for ; j >= 0; j-- {
				if idx[j]++; idx[j] < len(s.Params[j].Values) {
					break
				}
				idx[j] = 0
			}
			if j < 0 {
				return
			}
		}
	}
}

// Valid checks a configuration: every parameter present with a declared value, predicates hold.
func (s Space) Valid(p *Problem, c Config, caps Caps) error {
	for _, prm := range s.Params {
		v, ok := c[prm.Name]
		if !ok {
			return fmt.Errorf("configuration %s lacks %s", c.Key(), prm.Name)
		}
		found := false
		for _, w := range prm.Values {
			found = found || w == v
		}
		if !found {
			return fmt.Errorf("%s=%d is not among %v", prm.Name, v, prm.Values)
		}
	}
	if len(c) != len(s.Params) {
		return fmt.Errorf("configuration %s has parameters the space lacks", c.Key())
	}
	for _, pred := range s.preds {
		if err := pred(p, c, caps); err != nil {
			return err
		}
	}
	return nil
}

// Config is a point of a space: parameter name → value.
type Config map[string]int

func (c Config) clone() Config {
	d := make(Config, len(c)+1)
	for k, v := range c {
		d[k] = v
	}
	return d
}

// Key is a canonical form, "tile_m=32,wg=128".
func (c Config) Key() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(c[k])
	}
	return strings.Join(parts, ",")
}

// Spec64 converts a configuration to the map codegen.Kernel.SpecValues takes.
func (c Config) Spec64() map[string]int64 {
	m := make(map[string]int64, len(c))
	for k, v := range c {
		m[k] = int64(v)
	}
	return m
}
