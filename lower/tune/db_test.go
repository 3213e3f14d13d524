package tune

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/internal/chardev"
	"github.com/vkc-project/vkc/kernels"
)

// A second tuning run over the same database tries no configuration and says it reused the
// search; a changed compiler version, device fingerprint or driver is a miss and searches again.
func TestDBReusedAcrossRunsAndInvalidated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tune", "tune.json")
	tm := toyTemplate("toy", 1, toySpace...)
	p := toyProblem(1000)
	run := func(edit func(*Tuner)) (*Tuner, *fakeClock, *Choice) {
		t.Helper()
		db, err := OpenDB(path)
		if err != nil {
			t.Fatal(err)
		}
		if db.Warning != "" {
			t.Fatal(db.Warning)
		}
		clock := &fakeClock{timeOf: bowl}
		tu := toyTuner(t, clock, tm)
		tu.DB = db
		if edit != nil {
			edit(tu)
		}
		c, err := tu.Best(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Save(); err != nil {
			t.Fatal(err)
		}
		return tu, clock, c
	}
	tu1, clock1, c1 := run(nil)
	if clock1.count() != 9 || tu1.Stats().Reused != 0 {
		t.Fatalf("first run: timed %d, stats %+v", clock1.count(), tu1.Stats())
	}
	tu2, clock2, c2 := run(nil)
	s := tu2.Stats()
	if clock2.count() != 0 || s.Configs != 0 || s.Reused != 1 || s.Searches != 0 {
		t.Errorf("second run: timed %d, stats %+v; want nothing tried and one search reused", clock2.count(), s)
	}
	if !strings.Contains(tu2.Summary(), "1 searches reused from the database, 0 searched (0 configurations") {
		t.Errorf("summary %q does not say what was reused", tu2.Summary())
	}
	if c2.Template != c1.Template || c2.Config.Key() != c1.Config.Key() || c2.Time != c1.Time {
		t.Errorf("reused choice %s [%s] %v, first run %s [%s] %v", c2.Template.Name, c2.Config.Key(), c2.Time, c1.Template.Name, c1.Config.Key(), c1.Time)
	}
	for _, m := range []struct {
		what string
		edit func(*Tuner)
	}{
		{"compiler version", func(tu *Tuner) { tu.Compiler = "vkc test 2" }},
		{"device fingerprint", func(tu *Tuner) { tu.Fingerprint = "10de:2335:91c00000:0123456789abcdef0123456789abcdef" }},
		{"driver version", func(tu *Tuner) { tu.Driver = "99.0.0" }},
	} {
		tu, clock, _ := run(m.edit)
		if s := tu.Stats(); clock.count() != 9 || s.Reused != 0 || s.Searches != 1 {
			t.Errorf("changed %s: timed %d, stats %+v; want a miss and a new search", m.what, clock.count(), s)
		}
	}
	db, err := OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	if db.Len() != 4 {
		t.Errorf("database holds %d entries, want 4 (one per compiler, device, driver)", db.Len())
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// A corrupt or foreign file is a warning and an empty database, and the next save replaces it.
func TestDBCorruptFileStartsFresh(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"garbage":   "{not json",
		"truncated": `{"format":1,"entries":[{"device":"x"`,
		"format":    `{"format":99,"entries":[]}`,
	} {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		db, err := OpenDB(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if db.Warning == "" || !strings.Contains(db.Warning, path) || db.Len() != 0 {
			t.Errorf("%s: warning %q, %d entries", name, db.Warning, db.Len())
		}
		db.Put(&Entry{Key: Key{Device: "d", Compiler: "c", Template: "t", Problem: "p"}, Best: kernels.Config{"wg": 64}, Time: time.Millisecond, Tried: 3, Complete: true})
		// A database of another format version is replaced; a file that is no database at all
		// (not JSON, or cut short) only with Force.
		err = db.Save()
		if name != "format" {
			if err == nil || !strings.Contains(err.Error(), "is not a tuning database") {
				t.Fatalf("%s: save over a file that is no database: %v", name, err)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatalf("%s: the file changed", name)
			}
			db.Force = true
			err = db.Save()
		}
		if err != nil {
			t.Fatalf("%s: save: %v", name, err)
		}
		again, err := OpenDB(path)
		if err != nil || again.Warning != "" || again.Len() != 1 {
			t.Fatalf("%s: reopened: %v, warning %q, %d entries", name, err, again.Warning, again.Len())
		}
		e, ok := again.Get(Key{Device: "d", Compiler: "c", Template: "t", Problem: "p"})
		if !ok || e.Best["wg"] != 64 || e.Time != time.Millisecond || e.Tried != 3 || !e.Complete {
			t.Errorf("%s: entry after a round trip: %+v", name, e)
		}
	}
}

// Save merges what another process saved in the meantime; ClearDB removes the file.
func TestDBMergeAndClear(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tune.json")
	a, _ := OpenDB(path)
	b, _ := OpenDB(path)
	a.Put(&Entry{Key: Key{Problem: "a"}, Complete: true})
	b.Put(&Entry{Key: Key{Problem: "b"}, Complete: true})
	if err := a.Save(); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	c, _ := OpenDB(path)
	if c.Len() != 2 {
		t.Errorf("after two saves the file holds %d entries, want 2", c.Len())
	}
	n, err := ClearDB(path, false)
	if err != nil || n != 2 {
		t.Errorf("ClearDB = %d, %v; want 2 entries removed", n, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the file is still there: %v", err)
	}
	if n, err := ClearDB(path, false); err != nil || n != 0 {
		t.Errorf("clearing a missing database: %d, %v", n, err)
	}
}

func TestParseConfigRoundTrip(t *testing.T) {
	for _, c := range []kernels.Config{{}, {"wg": 64}, {"tile_m": 32, "tile_n": 64, "wg": 128}} {
		got, err := ParseConfig(c.Key())
		if err != nil || got.Key() != c.Key() {
			t.Errorf("ParseConfig(%q) = %v, %v", c.Key(), got, err)
		}
	}
	for _, bad := range []string{"wg", "wg=x", "=3"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q) accepted", bad)
		}
	}
}

// A complete entry whose best point the template's space no longer accepts is stale: the tuner
// says so and searches again instead of handing lowering an invalid configuration.
func TestDBStaleEntrySearchedAgain(t *testing.T) {
	db, err := OpenDB(filepath.Join(t.TempDir(), "tune.json"))
	if err != nil {
		t.Fatal(err)
	}
	tm := toyTemplate("toy", 1, kernels.Ints("wg", 32, 64))
	clock := &fakeClock{timeOf: bowl}
	tu := toyTuner(t, clock, tm)
	tu.DB = db
	var logs []string
	tu.Log = func(msg string) { logs = append(logs, msg) }
	p := toyProblem(100)
	if err := tu.init(); err != nil {
		t.Fatal(err)
	}
	db.Put(&Entry{Key: tu.Key(tm, p), Best: kernels.Config{"wg": 999}, Time: time.Nanosecond, Tried: 1, Complete: true})
	c, err := tu.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Key() != "wg=64" || clock.count() != 2 || len(logs) != 1 || !strings.Contains(logs[0], "stale") {
		t.Errorf("chose [%s] after timing %d; logs %q", c.Config.Key(), clock.count(), logs)
	}
}

// TestDBConcurrentWriters runs four processes that each save 25 entries of their own, one save
// per entry, into one database file: every one of the 100 entries survives (the read-merge-write
// of Save is under a file lock; without it the last rename wins and entries are lost).
func TestDBConcurrentWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts four processes")
	}
	path := filepath.Join(t.TempDir(), "tune.json")
	const writers, each = 4, 25
	var cmds []*exec.Cmd
	for w := 0; w < writers; w++ {
		cmd := exec.Command(os.Args[0]) // TestMain runs the writer
		cmd.Env = append(os.Environ(), fmt.Sprintf("VKC_DB_WRITER=%s,%d,%d", path, w, each))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("writer %d: %s", w, out.String())
			}
		})
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	db, err := OpenDB(path)
	if err != nil || db.Warning != "" {
		t.Fatalf("open: %v %q", err, db.Warning)
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < each; i++ {
			if _, ok := db.Get(Key{Template: fmt.Sprint(w), Problem: fmt.Sprint(i)}); !ok {
				t.Errorf("entry %d of writer %d is lost", i, w)
			}
		}
	}
	if db.Len() != writers*each {
		t.Errorf("%d entries, want %d", db.Len(), writers*each)
	}
}

// TestMain runs one writer of TestDBConcurrentWriters, and nothing else, when the test binary is
// started as one (VKC_DB_WRITER=path,writer,entries); else the tests.
func TestMain(m *testing.M) {
	if arg := os.Getenv("VKC_DB_WRITER"); arg != "" {
		if err := dbWriter(arg); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dbWriter saves entries (writer, 0..n-1) into the database at path, one save per entry.
func dbWriter(arg string) error {
	var path string
	var w, each int
	parts := strings.Split(arg, ",")
	if len(parts) != 3 {
		return fmt.Errorf("VKC_DB_WRITER=%q: want path,writer,entries", arg)
	}
	path = parts[0]
	if _, err := fmt.Sscan(parts[1], &w); err != nil {
		return err
	}
	if _, err := fmt.Sscan(parts[2], &each); err != nil {
		return err
	}
	db, err := OpenDB(path)
	if err != nil {
		return err
	}
	for i := 0; i < each; i++ {
		db.Put(&Entry{Key: Key{Template: fmt.Sprint(w), Problem: fmt.Sprint(i)}, Tried: 1, Complete: true})
		if err := db.Save(); err != nil {
			return err
		}
	}
	return nil
}

// A character device given as the database (/dev/null) is written through: it stays a device,
// and no lock or temporary file appears beside it.
func TestDBOnCharacterDevice(t *testing.T) {
	dir := t.TempDir()
	null := chardev.Null(t, dir)
	db, err := OpenDB(null)
	if err != nil {
		t.Fatal(err)
	}
	db.Put(&Entry{Key: Key{Problem: "p"}, Complete: true})
	if err := db.Save(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(null); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s is no longer a character device", null)
	}
	if null != "/dev/null" {
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("files beside the device: %v", names)
		}
	}
}
