package regular

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesSpecialFiles: a FIFO without a writer, a directory and a character device are
// refused at once with an error naming the path and its kind; a regular file and a link to one
// open.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(reg, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link} {
		b, err := ReadFile(p, 0)
		if err != nil || string(b) != "abc" {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if _, err := ReadFile(reg, 2); err == nil || !strings.Contains(err.Error(), "more than the 2") {
		t.Errorf("bound: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("needs mkfifo: %v", err)
	}
	cases := map[string]string{fifo: "named pipe (FIFO)", dir: "directory"}
	if st, err := os.Stat("/dev/zero"); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		cases["/dev/zero"] = "character device"
	}
	for p, kind := range cases {
		done := make(chan error, 1)
		go func() {
			f, err := Open(p)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %v, want an error naming it as a %s", p, err, kind)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Open blocked", p)
		}
	}
}
