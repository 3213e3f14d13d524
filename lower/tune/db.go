package tune

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/kernels"
)

// Key identifies one search in the database: a template on a problem, measured on one device
// and driver by one compiler. A change in any field is a miss: a new driver or compiler may
// generate or run the same configuration differently, so its times are not trusted.
type Key struct {
	Device   string `json:"device"`   // runtime.Fingerprint.String(): vendor, device, driver, pipeline-cache UUID
	Driver   string `json:"driver"`   // the decoded driver version (runtime.DeviceInfo.DriverVersion)
	Compiler string `json:"compiler"` // the compiler version (vkc.CompilerVersion())
	Template string `json:"template"`
	Problem  string `json:"problem"` // kernels.Problem.Key(): op, attributes, shapes, dtypes, fused expression
}

// Entry is the result of one search.
type Entry struct {
	Key
	// Best is the fastest valid configuration and Time its median; Best is nil when no
	// configuration was valid.
	Best kernels.Config `json:"best,omitempty"`
	Time time.Duration  `json:"time_ns,omitempty"`
	// Tried is the number of configurations built and run (valid or not); predicate rejections
	// are not counted.
	Tried int `json:"tried"`
	// Complete is false for a search cut short by a budget or cancellation: a later compile
	// resumes it, reusing every configuration already measured.
	Complete bool `json:"complete"`
	// ShortRows, for a problem with run-time rows, is the short length its configurations were
	// also timed at (ShortRows); each of Times is then LengthTime of the two medians.
	ShortRows int `json:"short_rows,omitempty"`
	// Times holds every valid configuration's median (by Config.Key), Invalid every rejected
	// configuration with the reason (a predicate, a build or pipeline error, a wrong result).
	Times   map[string]time.Duration `json:"times,omitempty"`
	Invalid map[string]string        `json:"invalid,omitempty"`
	// Stopped says why a complete search ended before its space did ("" when it did not): its
	// best could no longer move its function by more than the noise (Tuner.BestWithin).
	Stopped string `json:"stopped,omitempty"`
	// Budget, for an incomplete search, is the budget of the compile whose deadline cut it short
	// (0: cancelled, or no budget). That compile chose with what the search had measured; a
	// compile with a budget no larger takes the entry as it stands and measures nothing for it
	// (Tuner.CompileBudget), so a warm compile makes the same plan. A larger budget, or
	// `vkc tune`, resumes it.
	Budget  time.Duration `json:"budget_ns,omitempty"`
	Updated time.Time     `json:"updated"`
}

// Reusable reports whether a compile of the given budget (0: none, as vkc tune) takes e as it
// stands, measuring nothing for it: e is complete, or a compile of at least that budget cut it
// short (Budget).
func (e *Entry) Reusable(budget time.Duration) bool {
	return e.Complete || budget > 0 && e.Budget >= budget
}

func (e *Entry) clone() *Entry {
	c := *e
	c.Best = cloneConfig(e.Best)
	c.Times = make(map[string]time.Duration, len(e.Times))
	for k, v := range e.Times {
		c.Times[k] = v
	}
	c.Invalid = make(map[string]string, len(e.Invalid))
	for k, v := range e.Invalid {
		c.Invalid[k] = v
	}
	return &c
}

func cloneConfig(c kernels.Config) kernels.Config {
	if c == nil {
		return nil
	}
	d := make(kernels.Config, len(c))
	for k, v := range c {
		d[k] = v
	}
	return d
}

// dbFormat is the version of the file layout; a file of another version is ignored (with a
// warning) and overwritten on the next save.
const dbFormat = 1

type dbFile struct {
	Format     int               `json:"format"`
	Entries    []*Entry          `json:"entries"`
	Selections []*SelectionEntry `json:"selections,omitempty"`
	Statics    []*StaticEntry    `json:"statics,omitempty"`
}

// DB is the tuning database: one JSON file holding completed (and interrupted) searches. It is
// safe for concurrent use within a process and between processes: Save holds an advisory lock
// (flock on .NAME.lock beside the file) while it reads the file, merges its entries and writes
// it back, so processes saving at once keep each other's entries.
type DB struct {
	path       string
	mu         sync.Mutex
	entries    map[Key]*Entry
	selections map[SelectionKey]*SelectionEntry
	statics    map[StaticKey]*StaticEntry
	// Warning is set when the file existed but could not be used (corrupt, another format):
	// the database started empty, and the next Save replaces a file of another format version
	// but refuses to replace one that is not a tuning database at all unless Force.
	Warning string
	// Inputs are files the command reads (a model, its weights): Save refuses to write over one.
	Inputs []string
	// Force lets Save replace a file that is not a tuning database.
	Force bool
}

// DefaultPath is the database file in the user cache directory: $XDG_CACHE_HOME/vkc/tune/tune.json
// (os.UserCacheDir) on Linux.
func DefaultPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tuning database: no user cache directory (use --tune-db PATH): %w", err)
	}
	return filepath.Join(dir, "vkc", "tune", "tune.json"), nil
}

// OpenDB reads the database at path ("" is DefaultPath). A missing file is an empty database; a
// corrupt one is too, with DB.Warning saying why. Only an unreadable file (permissions) is an
// error.
func OpenDB(path string) (*DB, error) {
	if path == "" {
		p, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	db := &DB{path: path, entries: map[Key]*Entry{}, selections: map[SelectionKey]*SelectionEntry{}, statics: map[StaticKey]*StaticEntry{}}
	f, err := readDB(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, errCorrupt):
		db.Warning = fmt.Sprintf("tuning database %s is unusable, starting afresh: %v", path, err)
	case err != nil:
		return nil, fmt.Errorf("tuning database: %w", err)
	default:
		db.entries, db.selections, db.statics = f.entries, f.selections, f.statics
	}
	return db, nil
}

// dbMaps is a database file's content by key.
type dbMaps struct {
	entries    map[Key]*Entry
	selections map[SelectionKey]*SelectionEntry
	statics    map[StaticKey]*StaticEntry
}

var errCorrupt = errors.New("corrupt")

func readDB(path string) (dbMaps, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return dbMaps{}, err
	}
	var f dbFile
	if err := json.Unmarshal(b, &f); err != nil {
		return dbMaps{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if f.Format != dbFormat {
		return dbMaps{}, fmt.Errorf("%w: format %d, this vkc reads format %d", errCorrupt, f.Format, dbFormat)
	}
	out := dbMaps{entries: make(map[Key]*Entry, len(f.Entries)), selections: make(map[SelectionKey]*SelectionEntry, len(f.Selections)),
		statics: make(map[StaticKey]*StaticEntry, len(f.Statics))}
	for _, e := range f.Entries {
		if e != nil {
			out.entries[e.Key] = e
		}
	}
	for _, e := range f.Selections {
		if e != nil {
			out.selections[e.SelectionKey] = e
		}
	}
	for _, e := range f.Statics {
		if e != nil {
			out.statics[e.StaticKey] = e
		}
	}
	return out, nil
}

// Path is the database's file.
func (db *DB) Path() string { return db.path }

// Get returns a copy of the entry for k.
func (db *DB) Get(k Key) (*Entry, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	e, ok := db.entries[k]
	if !ok {
		return nil, false
	}
	return e.clone(), true
}

// Put stores a copy of e (replacing the entry of its key). Save writes it.
func (db *DB) Put(e *Entry) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.entries[e.Key] = e.clone()
}

// Len is the number of entries.
func (db *DB) Len() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.entries)
}

// Entries returns copies of all entries, sorted by device, compiler, template and problem.
func (db *DB) Entries() []*Entry {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]*Entry, 0, len(db.entries))
	for _, e := range db.entries {
		out = append(out, e.clone())
	}
	sortEntries(out)
	return out
}

func sortEntries(es []*Entry) {
	slices.SortFunc(es, func(x, y *Entry) int {
		a, b := x.Key, y.Key
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Compiler, b.Compiler),
			cmp.Compare(a.Template, b.Template), cmp.Compare(a.Problem, b.Problem))
	})
}

// Save writes the database atomically (a temporary file in the same folder, then a rename), so a
// reader sees the old file or the new one, never part of one. Under the lock, entries another
// process saved since OpenDB are kept unless this database has the same key.
func (db *DB) Save() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, err := os.Stat(db.path); err != nil {
		if err := os.MkdirAll(filepath.Dir(db.path), 0o755); err != nil {
			return fmt.Errorf("tuning database: %w", err)
		}
	}
	// The lock goes beside a database file; a character device or FIFO given as the database
	// (/dev/null) is written through, with nothing to merge and no lock file beside it.
	if st, err := os.Stat(db.path); err != nil || st.Mode().IsRegular() {
		unlock, err := lockDB(db.path)
		if err != nil {
			return err
		}
		defer unlock()
	}
	merged := map[Key]*Entry{}
	msels := map[SelectionKey]*SelectionEntry{}
	mstat := map[StaticKey]*StaticEntry{}
	if disk, err := readDB(db.path); err == nil {
		for k, e := range disk.entries {
			merged[k] = e
		}
		for k, e := range disk.selections {
			msels[k] = e
		}
		for k, e := range disk.statics {
			mstat[k] = e
		}
	}
	for k, e := range db.entries {
		merged[k] = e
	}
	for k, e := range db.selections {
		msels[k] = e
	}
	for k, e := range db.statics {
		mstat[k] = e
	}
	f := dbFile{Format: dbFormat}
	for _, e := range merged {
		f.Entries = append(f.Entries, e)
	}
	sortEntries(f.Entries)
	for _, e := range msels {
		f.Selections = append(f.Selections, e)
	}
	sortSelections(f.Selections)
	for _, e := range mstat {
		f.Statics = append(f.Statics, e)
	}
	sortStatics(f.Statics)
	b, err := json.MarshalIndent(&f, "", " ")
	if err != nil {
		return fmt.Errorf("tuning database: %w", err)
	}
	b = append(b, '\n')
	return safefile.Write(context.Background(), db.path, db.fileOptions(), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// CheckWritable says whether Save could write the database's file (see Save's refusals), without
// writing: a command that tunes for minutes checks first.
func (db *DB) CheckWritable() error {
	return safefile.Check(db.path, db.fileOptions())
}

func (db *DB) fileOptions() safefile.Options {
	return safefile.Options{What: "tuning database", Inputs: db.Inputs, Force: db.Force, Check: checkDBFile}
}

// lockDB takes the database's advisory lock (flock, exclusive; none off Unix) and returns its
// release. The lock file .NAME.lock stays beside the database: removing it while another process
// waits on it would let a third lock a new file at once.
func lockDB(path string) (func(), error) {
	dir, base := filepath.Split(path)
	lp := filepath.Join(dir, "."+base+".lock")
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tuning database: lock: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("tuning database: lock %s: %w", lp, err)
	}
	return func() {
		unlockFile(f)
		f.Close()
	}, nil
}

// checkDBFile recognises a tuning database of any format version: a JSON object with the keys
// "format" and "entries".
func checkDBFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if _, ok := f["format"]; !ok {
		return errors.New(`a JSON file without the key "format"`)
	}
	if _, ok := f["entries"]; !ok {
		return errors.New(`a JSON file without the key "entries"`)
	}
	return nil
}

// ClearDB removes the database file at path ("" is DefaultPath) and any temporary files a
// crashed save left next to it, under the lock. It refuses to remove a file that is not a tuning
// database (a mistyped --tune-db) unless force. It reports how many entries (searches and
// selections) the file held (0 when it did not exist or was of another format).
func ClearDB(path string, force bool) (int, error) {
	if path == "" {
		p, err := DefaultPath()
		if err != nil {
			return 0, err
		}
		path = p
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("tuning database: %w", err)
	}
	unlock, err := lockDB(path)
	if err != nil {
		return 0, err
	}
	defer unlock()
	n := 0
	if f, err := readDB(path); err == nil {
		n = len(f.entries) + len(f.selections)
	}
	if _, err := safefile.Remove(path, safefile.Options{What: "tuning database", Force: force, Check: checkDBFile}); err != nil {
		return 0, err
	}
	// Temporary files of the naming before safefile's (NAME.tmp-*), from a crashed older vkc.
	if tmps, err := filepath.Glob(path + ".tmp-*"); err == nil {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	return n, nil
}
