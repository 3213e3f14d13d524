package plan

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/internal/safefile"
)

// Encode validates p and writes its file form to w. The bytes depend on p alone: encoding the same
// plan twice, or a decoded copy of it, gives identical bytes.
func (p *Plan) Encode(w io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	secs := p.sections()
	sums, err := p.sums(secs)
	if err != nil {
		return err
	}
	if _, err := w.Write(p.header(sums)); err != nil {
		return fmt.Errorf("plan: write: %w", err)
	}
	for _, s := range secs {
		if _, err := w.Write(s); err != nil {
			return fmt.Errorf("plan: write: %w", err)
		}
	}
	if p.Weights.Source != nil {
		return nil
	}
	// The weights stream from where they are, a second time; a file that changed in between
	// makes the CRC fail when the plan is read, never a plan that loads wrong weights.
	if err := p.Weights.stream(writeAll(w)); err != nil {
		return fmt.Errorf("plan: write: %w", err)
	}
	return nil
}

// WriteFile writes the plan to path atomically: a temporary file in the same folder (mode 0644
// less the umask) is written, synced and renamed over path. On any error nothing is left behind
// and an existing file at path is unchanged. It refuses to replace a directory, a special file
// other than a character device or FIFO (written through, e.g. /dev/null) and a non-empty file
// that is not a plan (see WriteFileContext for the options).
func (p *Plan) WriteFile(path string) error {
	return p.WriteFileContext(context.Background(), path, WriteOptions{})
}

// WriteOptions are the checks of WriteFileContext.
type WriteOptions struct {
	// Inputs are files the caller read to make the plan (a model, its weights); the plan is
	// not written over one of them.
	Inputs []string
	// Force replaces a file that is not a plan.
	Force bool
}

// WriteFileContext is WriteFile with options, stopping (and writing nothing) when ctx is done.
func (p *Plan) WriteFileContext(ctx context.Context, path string, o WriteOptions) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("write plan %s: %w", path, err)
	}
	return safefile.Write(ctx, path, p.FileOptions(o), p.Encode)
}

// writeFileAtomic is WriteFile with the encoder as a parameter, so tests can make it fail midway.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	return safefile.Write(context.Background(), path, safefile.Options{What: "plan", Check: CheckFile}, write)
}

// FileOptions are the safefile checks of a plan file written with o, for writing a plan with
// other files all or none (safefile.Batch).
func (p *Plan) FileOptions(o WriteOptions) safefile.Options {
	return safefile.Options{What: "plan", Inputs: o.Inputs, Force: o.Force, Check: CheckFile}
}

// CheckFile returns nil if the file at path starts with a plan's magic number (any format
// version), else what it looks like instead.
func CheckFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [16]byte
	n, _ := io.ReadFull(f, b[:])
	if n >= len(Magic) && string(b[:len(Magic)]) == Magic {
		return nil
	}
	return errors.New(sniff(b[:n]))
}

// ReadFile reads and decodes the plan file at path; errors name the file (see Decode).
func ReadFile(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	size := int64(-1)
	if st.Mode().IsRegular() {
		size = st.Size()
	}
	p, err := decode(bufio.NewReaderSize(f, 1<<20), size)
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
			return nil, fe
		}
		return nil, fmt.Errorf("read plan %s: %w", path, err)
	}
	return p, nil
}

// ReadDescription reads the plan file at path without its weight data: everything else is
// read, checked and validated as ReadFile does, and the weight region is one piece that reads
// the file when asked (Weights.Pieces). What looks at a plan without running it (vkc inspect)
// then costs the plan's description, not its weights: a sparse file declaring gigabytes of
// weights is not read. The weight data's checksum is not checked (ReadFile and loading do).
func ReadDescription(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	if !st.Mode().IsRegular() {
		return ReadFile(path) // a pipe has no size to check the skipped section against
	}
	p, err := decodeWith(bufio.NewReaderSize(f, 1<<20), st.Size(), func(off, n uint64) WeightPiece {
		return WeightPiece{Size: n, File: reopen(path), FileOffset: int64(off)}
	})
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
			return nil, fe
		}
		return nil, fmt.Errorf("read plan %s: %w", path, err)
	}
	return p, nil
}

// reopen is an io.ReaderAt over the file at path, opened for each read (a description's weights
// are rarely read, and no descriptor is held meanwhile).
type reopen string

func (r reopen) ReadAt(b []byte, off int64) (int, error) {
	f, err := os.Open(string(r))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(b, off)
}

// ResolveSource returns the path of the plan's external weight file, resolving a relative path
// against the directory of the plan file at planPath, or "" if the weights are inline.
func (p *Plan) ResolveSource(planPath string) string {
	if p.Weights.Source == nil {
		return ""
	}
	s := p.Weights.Source.Path
	if filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(filepath.Dir(planPath), s)
}

// LoadWeights returns the weight region's bytes: the inline data, or for external weights the
// region assembled from the source file, after checking the file's size and SHA-256 against the
// plan. planPath is the plan file's path, for resolving a relative source path.
func (p *Plan) LoadWeights(planPath string) ([]byte, error) {
	w := &p.Weights
	if w.Source == nil {
		return w.Bytes()
	}
	path := p.ResolveSource(planPath)
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && uint64(st.Size()) != w.Source.Size {
		return nil, fmt.Errorf("plan weights %s: file has %d bytes, the plan was compiled from one of %d bytes; recompile the plan", path, st.Size(), w.Source.Size)
	}
	// The file and the region are both held: refuse what does not fit before reading.
	if err := hostmem.Check(fmt.Sprintf("plan weights %s (file and region)", path), w.Source.Size+w.Size); err != nil {
		return nil, err
	}
	src, err := readAtMost(path, w.Source.Size)
	if err != nil {
		return nil, fmt.Errorf("plan weights: %w", err)
	}
	if uint64(len(src)) != w.Source.Size {
		return nil, fmt.Errorf("plan weights %s: file has %d bytes, the plan was compiled from one of %d bytes; recompile the plan", path, len(src), w.Source.Size)
	}
	if sum := sha256.Sum256(src); sum != w.Source.SHA256 {
		return nil, fmt.Errorf("plan weights %s: SHA-256 %x differs from the plan's %x: the file changed since the plan was compiled; recompile the plan", path, sum, w.Source.SHA256)
	}
	region := make([]byte, w.Size)
	for _, t := range w.Tensors {
		// Validate guarantees both ranges are in bounds.
		copy(region[t.Offset:t.Offset+t.Size], src[t.SourceOffset:t.SourceOffset+t.Size])
	}
	return region, nil
}

// readAtMost reads the file at path, or fails once it holds more than n bytes (a file that grew,
// or a FIFO, is not read without end).
func readAtMost(path string, n uint64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(min(n, math.MaxInt64-1))+1))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) > n {
		return nil, fmt.Errorf("%s holds more than the %d bytes the plan was compiled from; recompile the plan", path, n)
	}
	return b, nil
}
