package runtime

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unsafe"

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
// or returns ok false where it cannot (a piece of a file whose identity it cannot take). The
// pieces enter it as a hash of their offsets, sizes and the addresses of their bytes (keep holds
// those alive while the key is in use, so that no address is reused): SmolLM2-135M's plan has
// 114,992 pieces, and writing each with fmt took 6 ms of every load of a measured selection on
// the H100.
func weightKey(w *plan.Weights) (key string, keep []any, ok bool) {
	var b strings.Builder
	b.Grow(64*len(w.Tensors) + 64)
	fmt.Fprintf(&b, "%d %v|", w.Size, w.Split)
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
	switch {
	case w.Source != nil:
		fmt.Fprintf(&b, "source %+v", *w.Source)
	case w.Pieces == nil:
		fmt.Fprintf(&b, "data %x+%d", uintptr(unsafe.Pointer(unsafe.SliceData(w.Data))), len(w.Data))
		keep = append(keep, w.Data)
	default:
		var h maphash.Hash
		h.SetSeed(pieceSeed)
		buf := make([]byte, 0, 4096)
		for i := range w.Pieces {
			pc := &w.Pieces[i]
			if len(buf) > 4096-33 {
				h.Write(buf)
				buf = buf[:0]
			}
			buf = binary.LittleEndian.AppendUint64(buf, pc.Offset)
			buf = binary.LittleEndian.AppendUint64(buf, pc.Size)
			if pc.Data != nil {
				buf = append(buf, 'd')
				buf = binary.LittleEndian.AppendUint64(buf, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(pc.Data)))))
				continue
			}
			rv := reflect.ValueOf(pc.File)
			if rv.Kind() != reflect.Pointer && rv.Kind() != reflect.UnsafePointer {
				return "", nil, false
			}
			buf = append(buf, 'f')
			buf = binary.LittleEndian.AppendUint64(buf, uint64(rv.Pointer()))
			buf = binary.LittleEndian.AppendUint64(buf, uint64(pc.FileOffset))
		}
		h.Write(buf)
		fmt.Fprintf(&b, "%d pieces %x", len(w.Pieces), h.Sum64())
		keep = append(keep, w.Pieces)
	}
	return b.String(), keep, true
}

// pieceSeed seeds weightKey's hash of the pieces (the keys live in one process).
var pieceSeed = maphash.MakeSeed()

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
