package plan

import (
	"fmt"
	"io"

	"github.com/vkc-project/vkc/internal/par"
)

// chunkSize bounds the buffer file-backed pieces are read through: the region streams through it
// rather than into memory of its own size.
const chunkSize = 4 << 20

// Visit calls fn with the inline weight region's bytes in offset order: Data as one call, or each
// piece (in chunks of at most 4 MiB for a piece read from its file, so b is only valid during
// the call). The ranges between pieces are zero and not visited. It reads nothing for external
// weights.
func (w *Weights) Visit(fn func(off uint64, b []byte) error) error {
	if w.Source != nil {
		return nil
	}
	if w.Pieces == nil {
		if len(w.Data) == 0 {
			return nil
		}
		return fn(0, w.Data)
	}
	var buf []byte
	for i := 0; i < len(w.Pieces); i++ {
		pc := &w.Pieces[i]
		if pc.Data != nil {
			if err := fn(pc.Offset, pc.Data); err != nil {
				return err
			}
			continue
		}
		if buf == nil && pc.Size > 0 {
			buf = make([]byte, min(chunkSize, w.Size))
		}
		// Small pieces of one file that lie near each other (the rows of a weight reordered
		// for a kernel, one piece each) are read with one call covering them all.
		lo, hi, j := pc.FileOffset, pc.FileOffset+int64(pc.Size), i+1
		for ; j < len(w.Pieces); j++ {
			q := &w.Pieces[j]
			if q.Data != nil || q.File != pc.File || max(hi, q.FileOffset+int64(q.Size))-min(lo, q.FileOffset) > int64(len(buf)) {
				break
			}
			lo, hi = min(lo, q.FileOffset), max(hi, q.FileOffset+int64(q.Size))
		}
		if j > i+1 {
			span := buf[:hi-lo]
			if _, err := pc.File.ReadAt(span, lo); err != nil {
				return fmt.Errorf("plan weights: reading %d bytes at %d of a weight file: %w", len(span), lo, err)
			}
			for k := i; k < j; k++ {
				q := &w.Pieces[k]
				if err := fn(q.Offset, span[q.FileOffset-lo:q.FileOffset-lo+int64(q.Size)]); err != nil {
					return err
				}
			}
			i = j - 1
			continue
		}
		for done := uint64(0); done < pc.Size; {
			n := min(uint64(len(buf)), pc.Size-done)
			if _, err := pc.File.ReadAt(buf[:n], pc.FileOffset+int64(done)); err != nil {
				return fmt.Errorf("plan weights: reading %d bytes at %d of a weight file: %w", n, pc.FileOffset+int64(done), err)
			}
			if err := fn(pc.Offset+done, buf[:n]); err != nil {
				return err
			}
			done += n
		}
	}
	return nil
}

// stream writes the whole inline region (Size bytes, zeros between pieces) to fn in order.
func (w *Weights) stream(fn func(b []byte) error) error {
	var zeros []byte
	pos := uint64(0)
	gap := func(to uint64) error {
		for pos < to {
			if zeros == nil {
				zeros = make([]byte, min(chunkSize, w.Size))
			}
			n := min(uint64(len(zeros)), to-pos)
			if err := fn(zeros[:n]); err != nil {
				return err
			}
			pos += n
		}
		return nil
	}
	err := w.Visit(func(off uint64, b []byte) error {
		if err := gap(off); err != nil {
			return err
		}
		pos += uint64(len(b))
		return fn(b)
	})
	if err != nil {
		return err
	}
	return gap(w.Size)
}

// Bytes returns the inline weight region as one slice: Data itself, or the pieces assembled
// into a new buffer (the one copy a caller that needs contiguous bytes pays). It is nil for
// external weights (see LoadWeights).
func (w *Weights) Bytes() ([]byte, error) {
	if w.Source != nil || w.Pieces == nil {
		return w.Data, nil
	}
	out := make([]byte, w.Size)
	err := w.Visit(func(off uint64, b []byte) error {
		copy(out[off:], b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// writeAll adapts an io.Writer for stream.
func writeAll(w io.Writer) func(b []byte) error {
	return func(b []byte) error {
		_, err := w.Write(b)
		return err
	}
}

// Spans calls fn with the whole inline region (zeros between pieces included) in consecutive
// runs of at most max bytes: Data's own subslices, or pieces gathered into one reused buffer, so
// a consumer with a per-call cost (an upload through a staging buffer) pays it per run, not per
// tensor. A run's pieces are read in parallel parts (fill): the pieces of a model just compiled
// are its weight file's bytes, whose page faults or reads one goroutine took in turn (the 8B
// Q8_0 plan's first load in a measured compile took 3.2 s on the H100 machine). b is valid only
// during the call.
func (w *Weights) Spans(max uint64, fn func(off uint64, b []byte) error) error {
	if w.Source != nil || w.Size == 0 {
		return nil
	}
	max = min(max, w.Size)
	if w.Pieces == nil {
		for off := uint64(0); off < uint64(len(w.Data)); off += max {
			if err := fn(off, w.Data[off:min(off+max, uint64(len(w.Data)))]); err != nil {
				return err
			}
		}
		return nil
	}
	buf := make([]byte, max)
	first := 0 // the first piece that may overlap the run
	for start := uint64(0); start < w.Size; start += max {
		end := min(start+max, w.Size)
		for first < len(w.Pieces) && w.Pieces[first].Offset+w.Pieces[first].Size <= start {
			first++
		}
		last := first
		for last < len(w.Pieces) && w.Pieces[last].Offset < end {
			last++
		}
		run := buf[:end-start]
		if err := fill(run, start, w.Pieces[first:last]); err != nil {
			return err
		}
		if err := fn(start, run); err != nil {
			return err
		}
	}
	return nil
}

// fillPart is the least a goroutine of fill reads: 4 MiB.
const fillPart = 4 << 20

// fill writes the region's bytes at [start, start+len(run)) into run: the parts of pieces (sorted,
// those that overlap it) that fall in it, zeros between them. The run is cut into parts of at
// least fillPart bytes, filled in parallel (par.Split).
func fill(run []byte, start uint64, pieces []WeightPiece) error {
	end := start + uint64(len(run))
	pos := start
	for _, pc := range pieces { // the gaps, which no part writes
		if pc.Offset > pos {
			clear(run[pos-start : pc.Offset-start])
		}
		pos = max(pos, pc.Offset+pc.Size)
	}
	if pos < end {
		clear(run[pos-start:])
	}
	return par.Split(len(run), fillPart, func(i, j int) error {
		a, b := start+uint64(i), start+uint64(j)
		for k := range pieces {
			pc := &pieces[k]
			x, y := max(a, pc.Offset), min(b, pc.Offset+pc.Size)
			if x >= y {
				continue
			}
			dst := run[x-start : y-start]
			if pc.Data != nil {
				copy(dst, pc.Data[x-pc.Offset:y-pc.Offset])
				continue
			}
			if _, err := pc.File.ReadAt(dst, pc.FileOffset+int64(x-pc.Offset)); err != nil {
				return fmt.Errorf("plan weights: reading %d bytes at %d of a weight file: %w", len(dst), pc.FileOffset+int64(x-pc.Offset), err)
			}
		}
		return nil
	})
}
