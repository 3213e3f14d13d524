package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/plan"
)

// interruptGrace is how long a command has to stop after the first SIGINT or SIGTERM before
// the process exits anyway.
const interruptGrace = 5 * time.Second

// interruptible is a context that ends at Ctrl-C (SIGINT) or SIGTERM, so that work stops and
// outputs are not written (or their temporary files removed) instead of the process dying
// mid-write. A second signal is not caught: it ends the process as usual. Work that does not
// watch the context (a read blocked on a pipe, a long loop) would make the first signal do
// nothing: if the command has not returned interruptGrace after it, the process exits (status
// 1, as a handled interrupt) without writing more. Outputs are renamed into place only when
// complete, so none is left half-written.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			signal.Stop(sig) // the next signal has its default effect
			cancel(fmt.Errorf("%w: %v signal received", context.Canceled, s))
			select {
			case <-time.After(interruptGrace):
				fmt.Fprintf(os.Stderr, "vkc: interrupted by %v, and still busy %v later (blocked reading input?): exiting without writing\n", s, interruptGrace)
				os.Exit(1)
			case <-done:
			}
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sig)
			close(done)
			cancel(context.Canceled)
		})
	}
}

// whileWriting runs write with a context that ends at SIGINT or SIGTERM. Commands whose work
// before their outputs takes no context (eval, check, dot, import) catch the signals only while
// they write: before, a signal ends the process as usual (nothing written yet); during, the
// writes stop and their temporary files are removed.
func whileWriting(write func(ctx context.Context) error) error {
	ctx, stop := interruptible()
	defer stop()
	return write(ctx)
}

// outputs collects a command's output files and writes them all or none (safefile.Batch): each
// is checked (no directory, no input of the command, nothing of another kind unless --force) and
// written to a temporary file as it is added, and commit renames them all into place.
type outputs struct {
	ctx    context.Context
	inputs []string // files the command reads
	force  bool
	batch  safefile.Batch
	// progress, when set, hears how far a large plan's writing has come: bytes written and the
	// plan's inline weights (most of the file), every progressStep bytes.
	progress func(written, weights uint64)
}

// progressStep is how often a plan's writing reports its progress; a plan whose inline weights
// are smaller reports nothing (it is written in well under a second).
const progressStep = 256 << 20

func (o *outputs) add(path string, opts safefile.Options, write func(io.Writer) error) error {
	opts.Inputs = append(opts.Inputs, o.inputs...)
	opts.Force = o.force
	return o.batch.Add(o.ctx, path, opts, write)
}

func (o *outputs) plan(path string, p *plan.Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	write := p.Encode
	if weights := p.Weights.Size; o.progress != nil && p.Weights.Source == nil && weights >= progressStep {
		write = func(w io.Writer) error {
			o.progress(0, weights)
			return p.Encode(&countingWriter{w: w, report: func(n uint64) { o.progress(n, weights) }})
		}
	}
	return o.add(path, p.FileOptions(plan.WriteOptions{}), write)
}

// countingWriter passes writes on to w and calls report with the bytes written so far each
// time another progressStep have passed.
type countingWriter struct {
	w      io.Writer
	n      uint64
	report func(n uint64)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	before := c.n
	c.n += uint64(n)
	if c.n/progressStep != before/progressStep {
		c.report(c.n)
	}
	return n, err
}

func (o *outputs) dot(path, text string) error {
	return o.add(path, safefile.Options{What: "DOT graph", Check: checkDOTFile}, func(w io.Writer) error {
		_, err := io.WriteString(w, text)
		return err
	})
}

func (o *outputs) safetensors(path string, ts map[string]*ir.Tensor) error {
	return o.add(path, safetensors.FileOptions(nil, false), func(w io.Writer) error { return safetensors.Encode(w, ts) })
}

func (o *outputs) npy(path string, x *ir.Tensor) error {
	return o.add(path, npy.FileOptions(nil, false), func(w io.Writer) error { return npy.Write(w, x) })
}

// tensors writes a function's results to path: a .safetensors file, a .npy file (one result
// only), a character device or FIFO (as safetensors) or a folder of NAME.npy files (created if
// missing). fn names the function for the message.
func (o *outputs) tensors(path, fn string, res map[string]*ir.Tensor) error {
	// A character device or FIFO (/dev/null, /dev/stdout into a pipe) gets a safetensors stream,
	// written through it.
	if st, err := os.Stat(path); err == nil && st.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) != 0 {
		return o.safetensors(path, res)
	}
	switch {
	case strings.HasSuffix(path, ".safetensors"):
		return o.safetensors(path, res)
	case strings.HasSuffix(path, ".npy"):
		if len(res) != 1 {
			return usagef("-o %s: function %s has %d outputs; give a folder or a .safetensors file", path, fn, len(res))
		}
		for _, x := range res {
			return o.npy(path, x)
		}
	}
	// A folder of .npy files: an existing file there is not replaced by one.
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		if err := safefile.Check(path, safefile.Options{What: "output folder", Inputs: o.inputs}); err != nil {
			return err
		}
		return fmt.Errorf("output folder %s: %w: it is a file (-o takes a .safetensors or .npy file, or a folder)", path, safefile.ErrRefused)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(res))
	for k := range res {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := o.npy(filepath.Join(path, n+".npy"), res[n]); err != nil {
			return err
		}
	}
	return nil
}

func (o *outputs) commit() error { return o.batch.Commit() }
func (o *outputs) abort()        { o.batch.Abort() }

// checkDOTFile recognises a Graphviz file by its first word: digraph, graph or strict (after
// blank space and comments).
func checkDOTFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<16))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "//") || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "/*") {
			continue
		}
		for _, w := range []string{"digraph", "graph", "strict"} {
			if strings.HasPrefix(l, w) {
				return nil
			}
		}
		break
	}
	return errors.New("no digraph or graph statement at its start")
}

// inputFiles returns the files named by --input values (NAME=FILE.npy, NAME=FILE.safetensors[:T]).
func inputFiles(args []string) []string {
	var files []string
	for _, a := range args {
		_, val, _ := strings.Cut(a, "=")
		switch {
		case strings.HasSuffix(val, ".npy"):
			files = append(files, val)
		case strings.Contains(val, ".safetensors"):
			file, _, ok := strings.Cut(val, ".safetensors:")
			if ok {
				file += ".safetensors"
			} else {
				file = val
			}
			files = append(files, file)
		}
	}
	return files
}

// tuneTrace is where VKC_TUNE_TRACE=1 sends the tuner's trace: standard error, each line
// stamped with the seconds since the command started, so a slow configuration shows as a gap.
func tuneTrace() io.Writer {
	return &stampWriter{w: os.Stderr, start: time.Now(), bol: true}
}

type stampWriter struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	bol   bool // at the beginning of a line
}

func (s *stampWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []byte
	for _, c := range b {
		if s.bol {
			out = fmt.Appendf(out, "[%8.3fs] ", time.Since(s.start).Seconds())
			s.bol = false
		}
		out = append(out, c)
		s.bol = c == '\n'
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
