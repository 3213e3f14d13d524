// Package safefile writes output files so that nothing is lost or half-written: the plan, the
// tuning database, weight and tensor files, DOT graphs.
//
// A file is written to a temporary file next to it (named .NAME.tmp-PID-RANDOM, created with the
// file's mode less the umask), synced and renamed over the target, so a reader sees the old file
// or the new one, never part of one; an error, a cancelled context or a signal handled through
// the context removes the temporary file. A process killed outright (SIGKILL, a power cut) leaves
// its temporary file behind; the next write of the same target removes such files once their
// process is gone and they have not changed for StaleAge.
//
// Before anything is written the target is checked:
//   - a directory, block device or socket is refused (renaming over it would replace it);
//   - a character device or FIFO (/dev/null, a pipe such as /dev/stdout) is written through,
//     not atomically: the user asked for the bytes to go there;
//   - a symbolic link is followed and its target replaced, so the link stays;
//   - a file that is one of the command's inputs (Options.Inputs, compared by identity, not by
//     name) is refused;
//   - a non-empty regular file that Options.Check does not recognise as what the command writes
//     (a plan, a tuning database) is refused unless Options.Force.
//
// Several files are written all or none with a Batch: each is prepared as a temporary file and
// only when every one is complete are they renamed into place.
package safefile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// StaleAge is how long a temporary file of a dead process must have been unchanged before a
// write removes it. A live writer keeps its file's modification time recent.
const StaleAge = time.Minute

// Options are the checks of Write and Batch.Add.
type Options struct {
	// What names the file in messages ("plan", "tuning database"); "" is "file".
	What string
	// Inputs are the files the command reads; writing over one of them is refused.
	Inputs []string
	// Check says whether an existing non-empty regular file is one of what is being written
	// (nil: any file may be replaced). It returns nil for a file it recognises, else why not.
	Check func(path string) error
	// Force replaces a file Check does not recognise.
	Force bool
	// Perm is the mode of a new file, less the umask (0: 0644).
	Perm fs.FileMode
}

// ErrRefused is wrapped by the errors for targets that are not written (a directory, an input
// of the command, a file of another kind).
var ErrRefused = errors.New("refused to write")

// Write writes the bytes that write produces to path (see the package comment). write gets a
// buffered writer that fails once ctx is done.
func Write(ctx context.Context, path string, o Options, write func(io.Writer) error) error {
	var b Batch
	if err := b.Add(ctx, path, o, write); err != nil {
		return err
	}
	return b.Commit()
}

// Batch writes several files all or none.
type Batch struct {
	pending []pending
}

type pending struct {
	tmp, target string
}

// Add checks path and writes its content to a temporary file (or, for a character device or
// FIFO, straight to it). Nothing replaces path until Commit. On error the batch is aborted: the
// files added before are removed too.
func (b *Batch) Add(ctx context.Context, path string, o Options, write func(io.Writer) error) (err error) {
	defer func() {
		if err != nil {
			b.Abort()
		}
	}()
	what := o.What
	if what == "" {
		what = "file"
	}
	target, through, err := check(path, what, o)
	if err != nil {
		return err
	}
	for _, p := range b.pending {
		if p.target == target {
			return fmt.Errorf("%s %s: %w: written twice by one command", what, path, ErrRefused)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	if through {
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		werr := writeAll(ctx, f, write)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("%s %s: %w", what, path, werr)
		}
		return nil
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	RemoveStale(target)
	perm := o.Perm
	if perm == 0 {
		perm = 0o644
	}
	var f *os.File
	for i := 0; ; i++ {
		name := filepath.Join(dir, tempName(base))
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err == nil || !errors.Is(err, fs.ErrExist) || i == 100 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	werr := writeAll(ctx, f, write)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = ctx.Err()
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%s %s: %w", what, path, werr)
	}
	b.pending = append(b.pending, pending{tmp: f.Name(), target: target})
	return nil
}

// Commit renames every prepared file into place. A failing rename (rare: the folder became
// unwritable) leaves the files renamed before it in place and removes the rest.
func (b *Batch) Commit() error {
	defer b.Abort()
	for i, p := range b.pending {
		if err := os.Rename(p.tmp, p.target); err != nil {
			return err
		}
		b.pending[i].tmp = ""
		// Make the rename durable; not every file system can sync a folder, and the file is
		// complete either way.
		if d, err := os.Open(filepath.Dir(p.target)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// Abort removes every prepared file; nothing is replaced.
func (b *Batch) Abort() {
	for _, p := range b.pending {
		if p.tmp != "" {
			os.Remove(p.tmp)
		}
	}
	b.pending = nil
}

// check resolves path and decides how it may be written: the path to write (a symbolic link's
// target), whether to write through it (a character device or FIFO), or why not at all.
func check(path, what string, o Options) (target string, through bool, err error) {
	refuse := func(format string, args ...any) (string, bool, error) {
		return "", false, fmt.Errorf("%s %s: %w: %s", what, path, ErrRefused, fmt.Sprintf(format, args...))
	}
	// os.Stat follows links the way open does (also /proc's magic links such as /dev/stdout to
	// a pipe, which have no path to resolve).
	st, err := os.Stat(path)
	lst, lerr := os.Lstat(path)
	link := lerr == nil && lst.Mode()&fs.ModeSymlink != 0
	if errors.Is(err, fs.ErrNotExist) {
		if link {
			return refuse("a symbolic link to nothing")
		}
		return path, false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%s %s: %w", what, path, err)
	}
	m := st.Mode()
	switch {
	case m.IsDir():
		return refuse("it is a directory")
	case m&fs.ModeCharDevice != 0, m&fs.ModeNamedPipe != 0:
		return path, true, nil
	case m&fs.ModeDevice != 0:
		return refuse("it is a block device")
	case m&fs.ModeSocket != 0:
		return refuse("it is a socket")
	case !m.IsRegular():
		return refuse("it is not a regular file (%v)", m.Type())
	}
	target = path
	if link {
		// The file the link points to is replaced, so that the link stays.
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return refuse("a symbolic link that does not resolve (%v)", err)
		}
	}
	for _, in := range o.Inputs {
		if in == "" {
			continue
		}
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return refuse("it is an input of this command (%s); write elsewhere", in)
		}
	}
	if o.Check != nil && !o.Force && st.Size() > 0 {
		if err := o.Check(target); err != nil {
			return refuse("the file there is not a %s (%v); remove it or use --force to replace it", what, err)
		}
	}
	return target, false, nil
}

// ctxWriter fails writes once ctx is done, so that a long write stops at a signal.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

func writeAll(ctx context.Context, f *os.File, write func(io.Writer) error) error {
	bw := bufio.NewWriterSize(ctxWriter{ctx, f}, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// tempName is the name of a temporary file for base: .BASE.tmp-PID-RANDOM.
func tempName(base string) string {
	return "." + base + ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()&0xffffffff, 36)
}

// RemoveStale removes temporary files of target (.NAME.tmp-*) whose writing process is gone and
// that have not changed for StaleAge, and reports how many. A temporary file of a live process
// (by PID on this machine) is kept, whatever its age.
func RemoveStale(target string) int {
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	prefix := "." + base + ".tmp-"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if pid, _, ok := strings.Cut(rest, "-"); ok {
			if p, err := strconv.Atoi(pid); err == nil && p > 0 && alive(p) {
				continue
			}
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < StaleAge {
			continue
		}
		if os.Remove(filepath.Join(dir, name)) == nil {
			n++
		}
	}
	return n
}

// Remove deletes path after the checks of Write (no directory or special file, no input of the
// command, a file Check recognises unless Force), and the stale temporary files beside it. A
// missing file is not an error; it reports whether a file was removed.
func Remove(path string, o Options) (bool, error) {
	what := o.What
	if what == "" {
		what = "file"
	}
	target, through, err := check(path, what, o)
	if err != nil {
		return false, err
	}
	if through {
		return false, fmt.Errorf("%s %s: %w: it is a device or FIFO, not a file to remove", what, path, ErrRefused)
	}
	RemoveStale(target)
	err = os.Remove(path) // the link itself when path is a symbolic link
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return true, nil
}

// Check makes Write's checks of path without writing anything: a command that works long before
// it writes (a tuning run) fails at once for a target it would refuse.
func Check(path string, o Options) error {
	what := o.What
	if what == "" {
		what = "file"
	}
	_, _, err := check(path, what, o)
	return err
}
