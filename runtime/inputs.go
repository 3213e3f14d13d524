package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/plan"
)

// This file checks a run's inputs against the function's signature and the ranges the plan
// records (plan.Range), before anything is written to the device or submitted. It needs no
// device, so it is tested and fuzzed on its own; Executable.Run and RunInto call it for every run.

// ErrInputRange is wrapped by the error for an integer input outside a range the plan records
// (a token id past the embedding table, a position past the KV cache).
var ErrInputRange = errors.New("input out of range")

// InputRangeError says which input broke which bound of the plan, with the value and the bound.
type InputRangeError struct {
	Function string
	Input    string // the input's name
	Index    int    // the element of Input (row-major), -1 for a scalar
	Value    int64  // the element's value
	// Plus names the scalar inputs added to Value before the bound applies, with their values;
	// Sum is Value plus them.
	Plus      []string
	PlusValue []int64
	Sum       int64
	Bound     int64
	Below     bool   // Sum < Bound (the minimum); otherwise Sum > Bound (the maximum)
	Why       string // the op that needs the bound, from the plan
}

func (e *InputRangeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "function %s: input %s", e.Function, e.Input)
	if e.Index >= 0 {
		fmt.Fprintf(&b, "[%d]", e.Index)
	}
	fmt.Fprintf(&b, " is %d", e.Value)
	term := "it"
	if len(e.Plus) > 0 {
		term = e.Input
		for i, p := range e.Plus {
			fmt.Fprintf(&b, ", %s is %d", p, e.PlusValue[i])
			term += " + " + p
		}
		term += " = " + strconv.FormatInt(e.Sum, 10)
	}
	bound := "at most"
	if e.Below {
		bound = "at least"
	}
	fmt.Fprintf(&b, ": %s must be %s %d", term, bound, e.Bound)
	if e.Why != "" {
		fmt.Fprintf(&b, " (%s)", e.Why)
	}
	return b.String()
}

func (e *InputRangeError) Unwrap() error { return ErrInputRange }

// inputChecker is a function's signature in the form the per-run check wants: sizes and indices
// computed once at load, so a run's check allocates nothing unless it fails.
type inputChecker struct {
	f      *plan.Function
	index  map[string]int
	size   []int
	signed []bool // i32 (true) or u32, for integer inputs
	ranges []plan.Range
	// A function with a run-time length: rowBytes[i] is the bytes of one unit of the length of
	// bounded input i (0 for the others), and n the length the last bind derived.
	rowBytes []int
	n        int
}

func newInputChecker(f *plan.Function) (*inputChecker, error) {
	c := &inputChecker{f: f, index: make(map[string]int, len(f.Inputs)), ranges: f.Ranges}
	for i := range f.Inputs {
		v := &f.Inputs[i]
		n, err := v.Bytes()
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", v.Name, err)
		}
		if n > uint64(maxInt) {
			return nil, fmt.Errorf("input %s: %d bytes", v.Name, n)
		}
		c.index[v.Name] = i
		c.size = append(c.size, int(n))
		c.signed = append(c.signed, v.DType == plan.I32)
		rb := 0
		if v.Bounded {
			if f.Length == nil || f.Length.Max == 0 || n%uint64(f.Length.Max) != 0 {
				return nil, fmt.Errorf("input %s: bounded without a run-time length that divides its size", v.Name)
			}
			rb = int(n / uint64(f.Length.Max))
		}
		c.rowBytes = append(c.rowBytes, rb)
	}
	// plan.Validate checked the ranges' indices and dtypes; check again what an index out of
	// bounds would turn into a panic here, for a Function that did not come through Validate.
	for _, r := range f.Ranges {
		ok := uint64(r.Input) < uint64(len(f.Inputs)) && isInt(f.Inputs[r.Input].DType)
		for _, p := range r.Plus {
			ok = ok && uint64(p) < uint64(len(f.Inputs)) && isInt(f.Inputs[p].DType) && c.size[p] == 4
		}
		if !ok || r.PlusLength && f.Length == nil {
			return nil, fmt.Errorf("range %s: not a range over integer inputs", f.RangeTerm(r))
		}
	}
	return c, nil
}

const maxInt = int(^uint(0) >> 1)

func isInt(d plan.DType) bool { return d == plan.I32 || d == plan.U32 }

// bind checks inputs (every input of the function exactly once, each exactly its size, every
// range kept) and stores them in in, by input index. For a function with a run-time length a
// bounded input holds k·n rows for one n in the length's range, and c.n is set to it (to the
// capacity when no input is bounded).
func (c *inputChecker) bind(inputs map[string][]byte, in [][]byte) error {
	f := c.f
	n, from := -1, ""
	for name, b := range inputs {
		i, ok := c.index[name]
		if !ok {
			return fmt.Errorf("function %s: unknown input %s (inputs: %s)", f.Name, quote(name), signature(f.Inputs))
		}
		v := &f.Inputs[i]
		if rb := c.rowBytes[i]; rb > 0 {
			l := f.Length
			if len(b)%rb != 0 || len(b) == 0 {
				return fmt.Errorf("function %s: input %q has %d bytes, not a whole number of %s rows of %d bytes (%s%v holds %s = %d..%d of them)",
					f.Name, name, len(b), l.Name, rb, v.DType, v.Shape, l.Name, l.Min, l.Max)
			}
			m := len(b) / rb
			if m < int(l.Min) || m > int(l.Max) {
				return fmt.Errorf("function %s: input %q has %d rows of %d bytes: %s=%d is outside %d..%d", f.Name, name, m, rb, l.Name, m, l.Min, l.Max)
			}
			if n >= 0 && m != n {
				return fmt.Errorf("function %s: input %q gives %s=%d but input %q gives %d", f.Name, name, l.Name, m, from, n)
			}
			n, from = m, name
		} else if len(b) != c.size[i] {
			return fmt.Errorf("function %s: input %q has %d bytes, want %d (%s%v)", f.Name, name, len(b), c.size[i], v.DType, v.Shape)
		}
		in[i] = b
	}
	if f.Length != nil && n < 0 {
		n = int(f.Length.Max)
	}
	c.n = n
	if len(inputs) != len(f.Inputs) {
		for i := range f.Inputs {
			if _, ok := inputs[f.Inputs[i].Name]; !ok {
				return fmt.Errorf("function %s: missing input %q (%s%v)", f.Name, f.Inputs[i].Name, f.Inputs[i].DType, f.Inputs[i].Shape)
			}
		}
	}
	for k := range c.ranges {
		if err := c.checkRange(&c.ranges[k], in); err != nil {
			return err
		}
	}
	return nil
}

// element reads element j of integer input i.
func (c *inputChecker) element(in [][]byte, i, j int) int64 {
	w := binary.LittleEndian.Uint32(in[i][4*j:])
	if c.signed[i] {
		return int64(int32(w))
	}
	return int64(w)
}

func (c *inputChecker) checkRange(r *plan.Range, in [][]byte) error {
	var plus int64 // at most 8 terms of 32 bits each: no overflow in 64 bits
	for _, p := range r.Plus {
		plus += c.element(in, int(p), 0)
	}
	if r.PlusLength {
		plus += int64(c.n)
	}
	x := int(r.Input)
	n := len(in[x]) / 4 // a bounded input: its rows in this run
	for j := 0; j < n; j++ {
		v := c.element(in, x, j)
		s := v + plus
		if s >= r.Min && s <= r.Max {
			continue
		}
		e := &InputRangeError{Function: c.f.Name, Input: c.f.Inputs[x].Name, Index: j, Value: v, Sum: s}
		if len(c.f.Inputs[x].Shape) == 0 {
			e.Index = -1
		}
		for _, p := range r.Plus {
			e.Plus = append(e.Plus, c.f.Inputs[p].Name)
			e.PlusValue = append(e.PlusValue, c.element(in, int(p), 0))
		}
		if r.PlusLength {
			e.Plus = append(e.Plus, c.f.Length.Name)
			e.PlusValue = append(e.PlusValue, int64(c.n))
		}
		if s < r.Min {
			e.Below, e.Bound, e.Why = true, r.Min, r.MinWhy
		} else {
			e.Bound, e.Why = r.Max, r.MaxWhy
		}
		return e
	}
	return nil
}

// quote quotes a name from a caller for a message: Go syntax (control characters and invalid
// UTF-8 escaped, other characters kept), cut to 64 bytes.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		cut := limit
		for cut > 0 && s[cut]&0xc0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
	}
	return strconv.Quote(s)
}
