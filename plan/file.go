package plan

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Encode validates p and writes its file form to w. The bytes depend on p alone: encoding the same
// plan twice, or a decoded copy of it, gives identical bytes.
func (p *Plan) Encode(w io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	secs := p.sections()
	if _, err := w.Write(p.header(secs)); err != nil {
		return fmt.Errorf("plan: write: %w", err)
	}
	for _, s := range secs {
		if _, err := w.Write(s); err != nil {
			return fmt.Errorf("plan: write: %w", err)
		}
	}
	return nil
}

// WriteFile writes the plan to path atomically: the file is written to a temporary file in the same
// directory, synced, and renamed over path. On any error nothing is left behind and an existing
// file at path is unchanged.
func (p *Plan) WriteFile(path string) error {
	if err := writeFileAtomic(path, p.Encode); err != nil {
		return fmt.Errorf("write plan %s: %w", path, err)
	}
	return nil
}

// writeFileAtomic is WriteFile with the encoder as a parameter, so tests can make it fail midway.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every file system can sync a directory; the file is
	// complete either way, so a failure here is not reported.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
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
		return w.Data, nil
	}
	path := p.ResolveSource(planPath)
	src, err := os.ReadFile(path)
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
