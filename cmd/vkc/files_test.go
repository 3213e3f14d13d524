package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkc-project/vkc/internal/chardev"
)

// copyModel copies examples/mlp (random weights: no weight file) into dir.
func copyModel(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/mlp/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileIs(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s changed: %q, %v", path, b, err)
	}
}

// temporaries lists the .*.tmp-* files in dir.
func temporaries(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	return m
}

// TestBinarySafeWrites: outputs never replace a directory or special file, an input of the same
// command, or a file of another kind (without --force); a character device or FIFO is written
// through; new files get 0644 less the umask; stale temporary files of a killed writer go; and
// the plan and --dot graph are written both or neither.
func TestBinarySafeWrites(t *testing.T) {
	needDevice(t) // compile finds the device to compile for
	dir := t.TempDir()
	model := copyModel(t, dir)
	modelText, _ := os.ReadFile(model)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("my notes\n"), 0o644)
	fakeNpy := filepath.Join(dir, "notes.safetensors")
	os.WriteFile(fakeNpy, []byte("not numbers\n"), 0o644)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	plan := filepath.Join(dir, "m.plan")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", model, "-o", model}, "it is an input of this command"},
		{[]string{"compile", model, "-o", sub}, "it is a directory"},
		{[]string{"compile", model, "-o", notes}, "the file there is not a plan"},
		{[]string{"compile", model, "-o", plan, "--dot", model}, "it is an input of this command"},
		{[]string{"compile", model, "-o", plan, "--dot", notes}, "the file there is not a DOT graph"},
		{[]string{"compile", model, "-o", plan, "--dot", plan}, "the plan file"},
		{[]string{"compile", model, "-o", plan, "--tune", "--tune-db", model}, "it is an input of this command"},
		{[]string{"compile", model, "-o", plan, "--tune", "--tune-db", notes}, "is not a tuning database"},
		{[]string{"tune", "-clear", "-tune-db", notes}, "is not a tuning database"},
		{[]string{"tune", "-clear", "-tune-db", model}, "is not a tuning database"},
		{[]string{"check", model, "-write-weights", model}, "it is an input of this command"},
		{[]string{"check", model, "-write-weights", notes}, "the file there is not a safetensors file"},
		{[]string{"eval", model, "--input", "x=" + strings.Repeat("0,", 63) + "0", "-o", fakeNpy}, "the file there is not a safetensors file"},
		{[]string{"eval", model, "--input", "x=" + strings.Repeat("0,", 63) + "0", "-o", model + ".safetensors", "--state-to", model}, "it is an input of this command"},
		{[]string{"dot", model, "-o", model}, "it is an input of this command"},
		// --dot into a folder that does not exist fails after the plan was prepared: the plan
		// must not be written either.
		{[]string{"compile", model, "-o", plan, "--dot", filepath.Join(dir, "nodir", "g.dot")}, "no such file or directory"},
	} {
		r := runVKC(t, dir, nil, tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("vkc %s: exit %d, stderr %q; want a failure with %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	// run -o onto its own plan.
	tiny := tinyllamaPlan(t)
	tinyText, _ := os.ReadFile(tiny)
	if r := runVKC(t, dir, nil, "run", tiny, "-f", "decode", "--input", "tokens=1", "--input", "pos=0", "-o", tiny); r.code == 0 || !strings.Contains(r.stderr, "it is an input of this command") {
		t.Errorf("run -o its own plan: exit %d: %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(tiny); string(b) != string(tinyText) {
		t.Errorf("run -o replaced its plan")
	}
	fileIs(t, model, string(modelText))
	fileIs(t, notes, "my notes\n")
	fileIs(t, fakeNpy, "not numbers\n")
	if _, err := os.Stat(model + ".safetensors"); !os.IsNotExist(err) {
		t.Errorf("eval wrote -o although --state-to was refused: %v", err)
	}
	if _, err := os.Stat(plan); !os.IsNotExist(err) {
		t.Errorf("a refused compile wrote %s: %v", plan, err)
	}
	if st, err := os.Stat(sub); err != nil || !st.IsDir() {
		t.Errorf("the folder %s was replaced", sub)
	}

	// A character device is written through, and stays a character device.
	null := chardev.Null(t, dir)
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", null); r.code != 0 {
		t.Errorf("compile -o %s: exit %d: %s", null, r.code, r.stderr)
	}
	if st, err := os.Stat(null); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s is no longer a character device: %v", null, err)
	}
	// So is a FIFO, which a reader gets the plan from.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", fifo); r.code != 0 {
		t.Errorf("compile -o fifo: exit %d: %s", r.code, r.stderr)
	}
	if b := <-got; !strings.HasPrefix(string(b), "\x89vkc") {
		t.Errorf("the FIFO's reader got %d bytes, not a plan", len(b))
	}

	// /dev/stdout, a link to the pipe the test reads, gets the plan.
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "/dev/stdout"); r.code != 0 || !strings.HasPrefix(r.stdout, "\x89vkc") {
		t.Errorf("compile -o /dev/stdout: exit %d, %d bytes on stdout: %s", r.code, len(r.stdout), r.stderr)
	}

	// --force replaces a file of another kind; --force on tune -clear removes it.
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", notes, "--force"); r.code != 0 {
		t.Errorf("compile --force: exit %d: %s", r.code, r.stderr)
	}
	if r := runVKC(t, dir, nil, "tune", "-clear", "-tune-db", notes, "--force"); r.code != 0 {
		t.Errorf("tune -clear --force: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(notes); !os.IsNotExist(err) {
		t.Errorf("tune -clear --force left %s", notes)
	}

	// A new plan and its graph are written together, mode 0644 less the umask; a stale
	// temporary file of a killed writer is removed, a recent one of a live process kept.
	old := time.Now().Add(-time.Hour)
	stale := filepath.Join(dir, ".m.plan.tmp-1073741824-x") // no such PID
	os.WriteFile(stale, []byte("partial"), 0o600)
	os.Chtimes(stale, old, old)
	live := filepath.Join(dir, fmt.Sprintf(".m.plan.tmp-%d-y", os.Getpid()))
	os.WriteFile(live, []byte("partial"), 0o600)
	dot := filepath.Join(dir, "m.dot")
	cmd := exec.Command("sh", "-c", `umask 027 && exec "$0" "$@"`, vkcBinary(t), "compile", "-q", model, "-o", plan, "--dot", dot)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	for _, p := range []string{plan, dot} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if m := st.Mode().Perm(); m != 0o640 {
			t.Errorf("%s has mode %v, want 0640 (0644 less the umask 027)", filepath.Base(p), m)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file is still there")
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live process's temporary file was removed")
	}
	os.Remove(live)
	if tmp := temporaries(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// TestBinaryInterruptedCompileWritesNothing interrupts static SmolLM2 compiles (a few seconds of
// weight generation, optimisation and lowering on lavapipe) with SIGINT as lowering starts and
// with SIGTERM as the optimiser starts: each exits non-zero and leaves no plan and no temporary
// file, where the plan used to be written with exit 0.
func TestBinaryInterruptedCompileWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiles SmolLM2-135M's shape twice")
	}
	needDevice(t)
	dir := t.TempDir()
	model, _ := filepath.Abs("../../examples/smollm2-135m/model.yaml")
	type run struct {
		sig   syscall.Signal
		phase string
		done  chan string
	}
	runs := []*run{{syscall.SIGINT, "lower", make(chan string, 1)}, {syscall.SIGTERM, "optimize", make(chan string, 1)}}
	for i, r := range runs {
		out := filepath.Join(dir, fmt.Sprintf("p%d.plan", i))
		cmd := exec.Command(vkcBinary(t), "compile", model, "-o", out)
		cmd.Dir = dir
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			var log strings.Builder
			sc := bufio.NewScanner(stderr)
			sent := false
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if !sent && strings.TrimSpace(sc.Text()) == r.phase {
					cmd.Process.Signal(r.sig)
					sent = true
				}
			}
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			msg := ""
			// A handled interrupt is an error (exit 1); death by the signal (exit -1) is what
			// SIGTERM did before it was handled like SIGINT.
			switch {
			case !sent:
				msg = "the phase line never came"
			case code != 1 || !strings.Contains(log.String(), "context canceled"):
				msg = fmt.Sprintf("exit %d after the signal, want 1 with the interruption named", code)
			}
			if _, err := os.Stat(out); err == nil {
				msg += "; the plan was written"
			}
			if msg != "" {
				msg = fmt.Sprintf("%v at %q: %s\n%s", r.sig, r.phase, msg, log.String())
			}
			r.done <- msg
		}()
	}
	for _, r := range runs {
		if msg := <-r.done; msg != "" {
			t.Error(msg)
		}
	}
	if tmp := temporaries(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// TestBinaryMemoryLimits: sizes beyond the host memory limit are errors naming the tensor and
// both sizes (exit 1), not Go's fatal out-of-memory error (a stack trace, exit 2). The limit is
// set low with VKC_HOST_MEMORY, so nothing large is allocated.
func TestBinaryMemoryLimits(t *testing.T) {
	dir := t.TempDir()
	smol, _ := filepath.Abs("../../examples/smollm2-135m/model.yaml")
	// A graph whose one intermediate is 8 MiB in the interpreter (float64 per element).
	big := "big.yaml"
	os.WriteFile(filepath.Join(dir, big), []byte(`model: big
weights: {init: random, seed: 1}
functions:
  f:
    inputs:
      x: f32[]
    outputs: [y]
    body:
      - y = sum(expand(x, shape=[1024, 1024]), axis=0)
`), 0o644)
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		// SmolLM2's 135 M random parameters are refused before any is generated.
		{"VKC_HOST_MEMORY=64MiB", []string{"check", smol}, "parameter layers.15.wq: f16[576,576]: the 47 parameters allocated up to this one: 64.2 MiB (67274496 bytes) of host memory, more than the limit of 64.0 MiB (VKC_HOST_MEMORY=64MiB)"},
		{"VKC_HOST_MEMORY=60MiB", []string{"check", smol}, "more than the limit of 60.0 MiB (VKC_HOST_MEMORY=60MiB)"},
		{"VKC_HOST_MEMORY=4MiB", []string{"eval", big, "--input", "x=0"},
			"interp: function f: big.yaml:9: %1 = expand[shape=[1024,1024]](%0) : f32[1024,1024]: 8.0 MiB (8388608 bytes) of host memory, more than the limit of 4.0 MiB (VKC_HOST_MEMORY=4MiB)"},
		{"VKC_HOST_MEMORY=lots", []string{"check", smol}, `VKC_HOST_MEMORY: "lots" is not a size in bytes`},
	} {
		r := runVKC(t, dir, []string{tc.env}, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("%s vkc %s: exit %d, stderr %q; want exit 1 and %q", tc.env, tc.args[0], r.code, r.stderr, tc.want)
		}
	}
}

// TestBinaryNegativeDurations: a negative --budget (or -per-search) is a usage error, not "no
// limit".
func TestBinaryNegativeDurations(t *testing.T) {
	dir := t.TempDir()
	model := copyModel(t, dir)
	for _, args := range [][]string{
		{"compile", model, "-o", filepath.Join(dir, "p.plan"), "--tune", "--budget", "-5s"},
		{"tune", model, "-budget", "-5s"},
		{"tune", model, "-per-search", "-1ms"},
	} {
		r := runVKC(t, dir, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "want a positive duration (or 0: no limit)") {
			t.Errorf("vkc %s: exit %d, stderr %q", strings.Join(args, " "), r.code, firstLine(r.stderr))
		}
	}
}
