package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryFirstSignalEndsBlockedRead is issue 25's severe cases 4 and 5 seen from the command
// line: a command blocked on a read that watches no context (here a model.yaml that is a FIFO
// nobody writes) used to swallow the first SIGTERM and run on; now it exits (status 1, naming
// the signal) within interruptGrace of it, writing nothing.
func TestBinaryFirstSignalEndsBlockedRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("needs mkfifo: %v", err)
	}
	out := filepath.Join(dir, "m.plan")
	cmd := exec.Command(vkcBinary(t), "compile", fifo, "-o", out)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "parse ") {
			break // the command is about to open the FIFO
		}
	}
	time.Sleep(200 * time.Millisecond)
	sent := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	took := time.Since(sent)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 1 || !strings.Contains(log.String(), "interrupted by terminated") {
		t.Errorf("exit %d, stderr %q; want 1 and the interruption named", code, log.String())
	}
	if took > interruptGrace+5*time.Second {
		t.Errorf("exited %v after the first SIGTERM", took)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s was written", out)
	}
}
