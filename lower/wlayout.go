package lower

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/vkc-project/vkc/plan"
)

// ─── The weight region's layout ─────────────────────────────────────────────────────────────
//
// Weights are laid out once every function is lowered. A weight whose bytes are a contiguous
// part of another weight's bytes (a projection read on its own by one function, inside the merged
// projection another function reads: their blobs share the parameters' bytes, piece for piece)
// is a view of that weight at its offset, with no storage of its own; every other weight is
// placed in order, in as many buffers as one allocation allows (fit). The dispatches bound each
// weight at offsets relative to it (ref); layoutWeights adds the weight's offset.
//
// Whether bytes are part of another weight's is decided by where they are in memory, not by what
// they hold: two blobs whose pieces are the same bytes of the same parameters are the same data.
// Equal bytes elsewhere (equal tensors of two files) are found by weight's deduplication.

// weightFix is a dispatch binding of weight buffer weight, bound at an offset relative to it.
type weightFix struct {
	b      *plan.Binding
	at     int // index of the binding in its dispatch, while the dispatch is built
	weight int
}

// layoutWeights finds the views, places the weights, and fixes the bindings' offsets.
func (l *lowerer) layoutWeights() error {
	if l.external == nil {
		l.findViews()
	}
	l.wsize, l.wsplit = 0, nil
	for i, w := range l.weights {
		if w.view >= 0 {
			continue
		}
		off, err := l.fit(alignUp(l.wsize, l.align), w.size, &l.wsplit)
		if err != nil {
			return fmt.Errorf("lower: weight %s: %w", l.weightName(i), err)
		}
		w.off = off
		l.wsize = off + w.size
	}
	for _, w := range l.weights {
		if w.view >= 0 {
			w.off = l.weights[w.view].off + w.delta
		}
	}
	for _, f := range l.wfix {
		f.b.Buffer.Offset += l.weights[f.weight].off
	}
	l.wfix = nil
	return nil
}

// weightName is a name of weight buffer i, for messages.
func (l *lowerer) weightName(i int) string {
	for k, b := range l.wtensorBuf {
		if b == i {
			return l.wtensors[k].Name
		}
	}
	return fmt.Sprintf("#%d", i)
}

// span of a weight's bytes in memory: [start, end) at offset off of the weight.
type memSpan struct {
	start, end uintptr
	weight     int
	off        uint64
}

// findViews marks every weight whose bytes lie, in order and contiguously, inside a larger
// weight's (or an equal one's of a lower index) as a view of the largest such weight, where the
// offset keeps the binding alignment.
func (l *lowerer) findViews() {
	var spans []memSpan
	for i, w := range l.weights {
		off := uint64(0)
		for _, p := range w.pieces {
			if len(p) == 0 {
				continue
			}
			s := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
			spans = append(spans, memSpan{s, s + uintptr(len(p)), i, off})
			off += uint64(len(p))
		}
	}
	if len(spans) == 0 {
		return
	}
	sort.Slice(spans, func(a, b int) bool {
		if spans[a].start != spans[b].start {
			return spans[a].start < spans[b].start
		}
		return spans[a].weight < spans[b].weight
	})
	// maxEnd[k] is the furthest end among spans[:k+1]: a backward scan for the spans holding an
	// address stops where it falls below the address.
	maxEnd := make([]uintptr, len(spans))
	for k, s := range spans {
		maxEnd[k] = s.end
		if k > 0 {
			maxEnd[k] = max(maxEnd[k], maxEnd[k-1])
		}
	}
	larger := func(b, a int) bool {
		wa, wb := l.weights[a], l.weights[b]
		return wb.size > wa.size || (wb.size == wa.size && b < a)
	}
	for a, wa := range l.weights {
		if len(wa.pieces) == 0 || wa.size == 0 {
			continue
		}
		p0 := uintptr(unsafe.Pointer(unsafe.SliceData(wa.pieces[0])))
		best, bestDelta := -1, uint64(0)
		k := sort.Search(len(spans), func(k int) bool { return spans[k].start > p0 }) - 1
		for ; k >= 0 && maxEnd[k] > p0; k-- {
			s := spans[k]
			if s.weight == a || p0 >= s.end || !larger(s.weight, a) {
				continue
			}
			delta := s.off + uint64(p0-s.start)
			if delta%l.align != 0 || delta+wa.size > l.weights[s.weight].size {
				continue
			}
			if (best < 0 || larger(s.weight, best)) && l.holds(s.weight, delta, wa) {
				best, bestDelta = s.weight, delta
			}
		}
		if best >= 0 {
			wa.view, wa.delta = best, bestDelta
		}
	}
	// A view of a view is a view of the latter's weight.
	for _, w := range l.weights {
		for w.view >= 0 && l.weights[w.view].view >= 0 {
			v := l.weights[w.view]
			w.view, w.delta = v.view, w.delta+v.delta
		}
	}
}

// holds reports whether weight b's bytes from delta on are weight a's pieces, byte for byte
// the same memory.
func (l *lowerer) holds(b int, delta uint64, a *weightBuf) bool {
	bp := l.weights[b].pieces
	// The piece of b that holds byte delta, and where in it.
	i, at := 0, delta
	for i < len(bp) && at >= uint64(len(bp[i])) {
		at -= uint64(len(bp[i]))
		i++
	}
	for _, p := range a.pieces {
		for len(p) > 0 {
			if i >= len(bp) {
				return false
			}
			q := bp[i][at:]
			n := min(len(p), len(q))
			if unsafe.SliceData(p) != unsafe.SliceData(q) {
				return false
			}
			p = p[n:]
			at += uint64(n)
			if at == uint64(len(bp[i])) {
				i, at = i+1, 0
			}
		}
	}
	return true
}
