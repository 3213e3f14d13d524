package safefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func content(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leftovers lists the temporary files in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

func TestWriteNewAndReplace(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.plan")
	ctx := context.Background()
	if err := Write(ctx, path, Options{}, content("one")); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if got := st.Mode().Perm(); got != 0o640 {
		t.Errorf("mode %v, want 0640 (0644 less the umask 027)", got)
	}
	if err := Write(ctx, path, Options{}, content("two")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "two" {
		t.Errorf("content %q", got)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

func TestWriteRefusesAndWritesThrough(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	sock := filepath.Join(dir, "s.sock")
	if l, err := net.Listen("unix", sock); err == nil {
		defer l.Close()
	} else {
		sock = ""
	}
	model := filepath.Join(dir, "model.yaml")
	os.WriteFile(model, []byte("model: m\n"), 0o644)
	hard := filepath.Join(dir, "hard")
	if err := os.Link(model, hard); err != nil {
		t.Fatal(err)
	}
	notPlan := filepath.Join(dir, "notes.txt")
	os.WriteFile(notPlan, []byte("my notes"), 0o644)
	isPlan := func(p string) error {
		if !strings.HasPrefix(read(t, p), "PLAN") {
			return errors.New("no plan magic")
		}
		return nil
	}
	for _, tc := range []struct {
		name, path string
		o          Options
		want       string
	}{
		{"directory", sub, Options{What: "plan"}, "plan " + sub + ": refused to write: it is a directory"},
		{"socket", sock, Options{}, "it is a socket"},
		{"input by name", model, Options{Inputs: []string{model}}, "it is an input of this command (" + model + ")"},
		{"input by hard link", hard, Options{Inputs: []string{model}}, "it is an input of this command"},
		{"not what is written", notPlan, Options{What: "plan", Check: isPlan}, "the file there is not a plan (no plan magic); remove it or use --force"},
	} {
		if tc.path == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.path)
			err := Write(ctx, tc.path, tc.o, content("PLAN new"))
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrRefused with %q", err, tc.want)
			}
			if after, _ := os.ReadFile(tc.path); string(after) != string(before) {
				t.Errorf("the target changed")
			}
		})
	}
	// --force replaces a file of another kind; an empty file needs no force.
	if err := Write(ctx, notPlan, Options{Check: isPlan, Force: true}, content("PLAN")); err != nil || read(t, notPlan) != "PLAN" {
		t.Errorf("forced write: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if err := Write(ctx, empty, Options{Check: isPlan}, content("PLAN")); err != nil {
		t.Errorf("empty file: %v", err)
	}

	// A character device is written through and stays a device.
	if st, err := os.Stat("/dev/null"); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		if err := Write(ctx, "/dev/null", Options{Check: isPlan}, content("PLAN")); err != nil {
			t.Errorf("/dev/null: %v", err)
		}
		if st, err := os.Stat("/dev/null"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("/dev/null is no longer a character device: %v %v", st.Mode(), err)
		}
	}
	// So is a FIFO, with a reader at the other end.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	// Through a symbolic link to it, as /dev/stdout is to a pipe.
	link := filepath.Join(dir, "stdout")
	os.Symlink(fifo, link)
	if err := Write(ctx, link, Options{}, content("through a pipe")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through a pipe" {
		t.Errorf("the reader got %q", s)
	}
	if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v", st.Mode())
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to the FIFO was replaced: %v", st.Mode())
	}
	// A symbolic link stays a link; its target is replaced.
	real := filepath.Join(dir, "real.plan")
	os.WriteFile(real, []byte("PLAN old"), 0o644)
	planLink := filepath.Join(dir, "link.plan")
	os.Symlink("real.plan", planLink)
	if err := Write(ctx, planLink, Options{Check: isPlan}, content("PLAN new")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(planLink); st.Mode()&os.ModeSymlink == 0 || read(t, real) != "PLAN new" {
		t.Errorf("link mode %v, target %q", st.Mode(), read(t, real))
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

// A failed or cancelled write changes nothing and leaves no temporary file.
func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	os.WriteFile(path, []byte("old"), 0o644)
	boom := errors.New("boom")
	if err := Write(context.Background(), path, Options{}, func(w io.Writer) error {
		io.WriteString(w, strings.Repeat("x", 3<<20))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err := Write(ctx, path, Options{}, func(w io.Writer) error {
		for i := 0; i < 64; i++ {
			if i == 3 {
				cancel()
			}
			if _, err := w.Write(make([]byte, 1<<20)); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: got %v", err)
	}
	if read(t, path) != "old" {
		t.Error("the target changed")
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

// A batch writes all its files or none.
func TestBatchAllOrNone(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.plan"), filepath.Join(dir, "sub")
	os.Mkdir(b, 0o755)
	ctx := context.Background()
	var bt Batch
	if err := bt.Add(ctx, a, Options{}, content("plan")); err != nil {
		t.Fatal(err)
	}
	if err := bt.Add(ctx, b, Options{What: "dot graph"}, content("digraph{}")); !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v", err)
	}
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("a.plan was written although the batch failed: %v", err)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

// Temporary files of a killed writer are removed by the next write once stale; those of a live
// process, and recent ones, stay.
func TestStaleTemporariesRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.plan")
	old := time.Now().Add(-2 * StaleAge)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("partial"), 0o600)
		os.Chtimes(p, mtime, mtime)
		return p
	}
	dead := 1 << 30 // no such PID (Linux pid_max is at most 2^22)
	deadOld := mk(fmt.Sprintf(".m.plan.tmp-%d-abc", dead), old)
	legacy := mk(".m.plan.tmp-123456789", old) // os.CreateTemp's naming, from an older vkc
	deadNew := mk(fmt.Sprintf(".m.plan.tmp-%d-def", dead), time.Now())
	live := mk(fmt.Sprintf(".m.plan.tmp-%d-ghi", os.Getppid()), old)
	other := mk(".other.plan.tmp-1-abc", old)
	if err := Write(context.Background(), path, Options{}, content("x")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{deadOld: false, legacy: false, deadNew: true, live: true, other: true} {
		_, err := os.Stat(p)
		if exists := err == nil; exists != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), exists, want)
		}
	}
}
