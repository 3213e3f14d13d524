// Package regular opens input files only when they are regular files.
//
// A model folder is input: a FIFO there (as weights, config.json or an external-data file) would
// make a plain open or read block forever, and a character device such as /dev/zero would stream
// without end. Open refuses anything but a regular file, and on unix it never blocks to find out:
// it opens with O_NONBLOCK (which a FIFO without a writer does not wait on) and looks at the
// descriptor it got, so the file checked is the file read, with no window between a stat and the
// open.
package regular

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Kind names a file's type for a message: "a named pipe (FIFO)", "a directory", ….
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// notRegular is the error for a file of another kind; what says what the file was to be.
func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is %s, not a regular file: vkc reads models and weights only from regular files", path, Kind(m))
}

// Open opens path for reading if it is a regular file (after following symbolic links), else
// fails with an error naming it and its kind.
func Open(path string) (*os.File, error) {
	return open(path)
}

// ReadFile reads the regular file at path, failing if it holds more than max bytes (max <= 0: no
// bound).
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if max > 0 && st.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d such a file may have", path, st.Size(), max)
	}
	// The size is a hint: a file that grows while read is read up to the bound.
	r := io.Reader(f)
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than the %d bytes such a file may have", path, max)
	}
	return b, nil
}

// Check reports an error if path is not a regular file (following symbolic links), without
// opening it.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return notRegular(path, st.Mode())
	}
	return nil
}
