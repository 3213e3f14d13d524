package plan

import (
	"fmt"
	"io"
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
// tensor. b is valid only during the call.
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
	buf := make([]byte, 0, max)
	start := uint64(0)
	err := w.stream(func(b []byte) error {
		for len(b) > 0 {
			n := min(uint64(len(b)), max-uint64(len(buf)))
			buf = append(buf, b[:n]...)
			b = b[n:]
			if uint64(len(buf)) == max {
				if err := fn(start, buf); err != nil {
					return err
				}
				start += uint64(len(buf))
				buf = buf[:0]
			}
		}
		return nil
	})
	if err == nil && len(buf) > 0 {
		err = fn(start, buf)
	}
	return err
}
