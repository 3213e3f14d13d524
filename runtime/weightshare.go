package runtime

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/vkc-project/vkc/plan"
)

// WeightShare lets executables of plans that hold the same weights share one upload of them
// (LoadOptions.Weights): a compile's measured selection loads every candidate graph of a model
// to check it, and each load uploaded all the weights again (on the H100 a load of SmolLM2-135M
// took 0.09-0.16 s, most of a check). Two plans hold the same weights when their weight
// regions are laid out alike (size, split, the tensors' offsets) from the same bytes in memory
// or the same ranges of the same open files: pieces, not contents, are compared, and the share
// keeps what it compared alive, so memory a key names is not reused while it is shared. A plan
// whose weights are read from an external file or were decoded from a plan file (one Data
// buffer) shares by the same rule. The share frees its regions when it is closed, after every
// executable that uses them.
type WeightShare struct {
	mu      sync.Mutex
	regions map[string]*sharedRegion
	closed  bool
}

type sharedRegion struct {
	rb   regionBuffers
	keep []any // the slices and files the key names, held so their memory is not reused
}

// NewWeightShare returns an empty share.
func NewWeightShare() *WeightShare { return &WeightShare{regions: map[string]*sharedRegion{}} }

// Close frees the shared regions. Executables that use them must be closed first.
func (s *WeightShare) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.regions {
		r.rb.free()
	}
	s.regions, s.closed = nil, true
}

// Regions is the number of weight regions the share holds (for tests and traces; 0 for nil).
func (s *WeightShare) Regions() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.regions)
}

// weightKey identifies w's region by its layout and the identity of the bytes it is made of,
// or returns ok false where it cannot (a piece of a file whose identity it cannot take).
func weightKey(w *plan.Weights) (key string, keep []any, ok bool) {
	var b strings.Builder
	b.Grow(64*len(w.Tensors) + 48*len(w.Pieces) + 64)
	fmt.Fprintf(&b, "%d %v|", w.Size, w.Split)
	// Written field by field: fmt's %+v of each tensor took 6 ms of each of SmolLM2's loads in a
	// measured selection on the H100.
	var num []byte
	for _, t := range w.Tensors {
		num = num[:0]
		for _, v := range t.Shape {
			num = strconv.AppendInt(append(num, ','), v, 10)
		}
		for _, v := range []uint64{uint64(t.DType), t.Offset, t.Size, t.SourceOffset} {
			num = strconv.AppendUint(append(num, ' '), v, 10)
		}
		b.WriteString(t.Name)
		b.WriteByte(0)
		b.WriteString(t.Layout)
		b.Write(num)
		b.WriteByte(';')
	}
	ident := func(v any) (uintptr, bool) {
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Pointer, reflect.UnsafePointer:
			return rv.Pointer(), true
		case reflect.Slice:
			if rv.Len() == 0 {
				return 0, true
			}
			return rv.Pointer(), true
		}
		return 0, false
	}
	switch {
	case w.Source != nil:
		fmt.Fprintf(&b, "source %+v", *w.Source)
	case w.Pieces == nil:
		p, _ := ident(w.Data)
		fmt.Fprintf(&b, "data %x+%d", p, len(w.Data))
		keep = append(keep, w.Data)
	default:
		for _, pc := range w.Pieces {
			num = strconv.AppendUint(num[:0], pc.Offset, 10)
			num = strconv.AppendUint(append(num, ':'), pc.Size, 10)
			if pc.Data != nil {
				p, _ := ident(pc.Data)
				num = strconv.AppendUint(append(num, '='), uint64(p), 16)
				keep = append(keep, pc.Data)
			} else {
				p, ok := ident(pc.File)
				if !ok {
					return "", nil, false
				}
				num = strconv.AppendUint(append(num, "=f"...), uint64(p), 16)
				num = strconv.AppendInt(append(num, '@'), pc.FileOffset, 10)
				keep = append(keep, pc.File)
			}
			b.Write(append(num, ';'))
		}
	}
	return b.String(), keep, true
}

// weights gives e the weight region of p: the share's where it holds one for p's weights, else
// a new one, uploaded, which the share then holds for the loads after it.
func (s *WeightShare) weights(d *Device, e *Executable, p *plan.Plan, upload func(rb *regionBuffers) error) error {
	key, keep, ok := weightKey(&p.Weights)
	if !ok {
		return upload(&e.weights)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("the weight share is closed")
	}
	if r := s.regions[key]; r != nil {
		e.weights, e.sharedWeights = r.rb, true
		return nil
	}
	if err := upload(&e.weights); err != nil {
		return err
	}
	s.regions[key] = &sharedRegion{rb: e.weights, keep: keep}
	e.sharedWeights = true
	return nil
}
