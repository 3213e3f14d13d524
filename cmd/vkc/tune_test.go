package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
)

func TestTuneListAndClear(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tune.json")
	db, err := tune.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Put(&tune.Entry{Key: tune.Key{Device: "10005:0000:00000001:00", Driver: "24.2.8", Compiler: "vkc 0.1.0-dev", Template: "elementwise", Problem: "elementwise(f32[4])->(f32[4]){…}"},
		Best: kernels.Config{"wg": 64, "per_thread": 2}, Time: 12300 * time.Nanosecond, Tried: 9, Complete: true, Invalid: map[string]string{"per_thread=4,wg=256": "wrong result"}})
	db.Put(&tune.Entry{Key: tune.Key{Device: "10005:0000:00000001:00", Driver: "24.2.8", Compiler: "vkc 0.1.0-dev", Template: "reduce", Problem: "sum[axis=0](f32[8])->(f32[])"}, Tried: 2})
	db.PutSelection(&tune.SelectionEntry{SelectionKey: tune.SelectionKey{Device: "10005:0000:00000001:00", Driver: "24.2.8", Compiler: "vkc 0.1.0-dev",
		Function: "decode", Graph: "0123456789abcdef"}, Winner: 1, Rounds: 5, Complete: true,
		Candidates: []tune.SelectionRecord{{Graph: "a", Label: "static extraction: merge-linears×2", Valid: true, Median: 3100 * time.Microsecond, Ratio: 1.034, Weights: 3 << 20},
			{Graph: "b", Label: "extraction 2: rmsnorm-linear×3", Valid: true, Median: 3 * time.Millisecond, Ratio: 1, Weights: 3 << 20}}})
	// A prefill timed at a short length beside its capacity.
	db.PutSelection(&tune.SelectionEntry{SelectionKey: tune.SelectionKey{Device: "10005:0000:00000001:00", Driver: "24.2.8", Compiler: "vkc 0.1.0-dev",
		Function: "prefill", Graph: "fedcba9876543210"}, Winner: 0, Rounds: 4, Complete: true, Short: 128, Dim: "seq", Capacity: 512,
		Candidates: []tune.SelectionRecord{{Graph: "a", Label: "static extraction", Valid: true, Median: 16 * time.Millisecond, Ratio: 1, ShortMedian: 3500 * time.Microsecond, ShortRatio: 1},
			{Graph: "b", Label: "as written", Valid: true, Median: 14400 * time.Microsecond, Ratio: 0.9, ShortMedian: 3670 * time.Microsecond, ShortRatio: 1.049}}})
	if err := db.Save(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "tune", "-list", "-tune-db", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{path + ": 2 searches", "device 10005:0000:00000001:00, driver 24.2.8, vkc 0.1.0-dev",
		"elementwise  [per_thread=2,wg=64]  12.3µs", "complete", "reduce", "none valid", "interrupted",
		"2 measured selections", "function decode (graph 0123456789ab) on device 10005:0000:00000001:00", "2 candidates, 5 paired rounds, complete",
		"* 1  3ms", "×1.034", "3.0 MiB", "extraction 2: rmsnorm-linear×3",
		"4 paired rounds (each at seq=128 and 512), complete", "14.4ms (at 128: 3.67ms)", "×0.900 (×1.049)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, "tune", "--clear", "--tune-db", path)
	if code != 0 || !strings.Contains(out, "cleared "+path+" (4 entries)") {
		t.Fatalf("clear: exit %d: %s%s", code, out, errs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("database still there after -clear: %v", err)
	}
	if code, _, _ := runCLI(t, "tune", "-tune-db", path); code != 2 {
		t.Errorf("tune without -list or -clear: exit %d, want 2", code)
	}
}

// vkc tune model.yaml measures the model's kernels into the database and prints the gains; a
// second run reuses every search and tries nothing.
func TestTuneModelTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tune.json")
	code, out, errs := runCLI(t, "tune", "../../examples/mlp/model.yaml", "-configs", "2", "-tune-db", path, "-q")
	if code != 0 {
		if strings.Contains(errs, "no Vulkan") {
			t.Skipf("no Vulkan device: %s", errs)
		}
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "tuned 4 kernels: 0 searches reused from the database") || !strings.Contains(out, "gain") {
		t.Errorf("first run:\n%s", out)
	}
	code, out, errs = runCLI(t, "tune", "../../examples/mlp/model.yaml", "-configs", "2", "-tune-db", path, "-q")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "searches reused from the database, 0 searched (0 configurations") {
		t.Errorf("second run did not reuse the searches:\n%s", out)
	}
}

// vkc compile measures by default on a GPU and not on a CPU device: on lavapipe the plan is the
// static path's unless --tune asks, and vkc inspect says which path chose it.
func TestCompileDefaultPath(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "mlp.plan")
	code, _, errs := runCLI(t, "compile", "../../examples/mlp/model.yaml", "-o", plan)
	if code != 0 {
		if strings.Contains(errs, "no Vulkan") {
			t.Skipf("no Vulkan device: %s", errs)
		}
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "is a CPU implementation: static by default") {
		t.Skipf("the device is not a CPU implementation; this test is for lavapipe: %s", errs)
	}
	if code, out, errs := runCLI(t, "inspect", plan); code != 0 || !strings.Contains(out, "chosen by: the static path") {
		t.Errorf("inspect of the default compile: exit %d, %s%s", code, out, errs)
	}
	db := filepath.Join(dir, "tune.json")
	code, _, errs = runCLI(t, "compile", "../../examples/mlp/model.yaml", "-o", plan, "--tune", "--budget", "20s", "--tune-db", db, "-q")
	if code != 0 {
		t.Fatalf("compile --tune: exit %d: %s", code, errs)
	}
	if code, out, errs := runCLI(t, "inspect", plan); code != 0 || !strings.Contains(out, "chosen by: measurement on the device") {
		t.Errorf("inspect of the --tune compile: exit %d, %s%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "tune", "--list", "--tune-db", db); code != 0 || !strings.Contains(out, "function forward") {
		t.Errorf("the tuned compile's selection is not listed: exit %d, %s%s", code, out, errs)
	}
}

// TestTuneClearThroughLink: -clear with a --tune-db that is a symbolic link clears the database
// the link leads to and names it (it used to remove the link, leave the database and report the
// link cleared).
func TestTuneClearThroughLink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "real.json")
	db, err := tune.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Put(&tune.Entry{Key: tune.Key{Device: "d", Driver: "v", Compiler: "c", Template: "elementwise", Problem: "p"}, Tried: 1})
	if err := db.Save(); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "tune", "--clear", "--tune-db", link)
	if code != 0 || !strings.Contains(out, "cleared "+path+" (1 entries) through "+link) {
		t.Fatalf("clear through a link: exit %d: %s%s", code, out, errs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the database is still there: %v", err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the link was removed: %v", err)
	}
}
