// Package oracles finds the external oracles tests compare against: folders of files written by
// no one in this project, kept beside the repository in ../shared/oracles (relative to the
// module root), never copied into it. A test whose oracle is absent skips, naming it.
package oracles

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns ../shared/oracles/name (relative to the directory holding go.mod), or skips the
// test with a message naming the missing oracle.
func Dir(t testing.TB, name string) string {
	t.Helper()
	dir, err := Find(name)
	if err != nil {
		t.Skipf("needs the external oracle ../shared/oracles/%s: %v", name, err)
	}
	return dir
}

// Find returns ../shared/oracles/name, or an error saying where it looked; for tests that use
// an oracle when it is there (a fuzz target's seed corpus) and need not skip without it.
func Find(name string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("no go.mod above the working directory: %w", err)
	}
	dir := filepath.Join(root, "..", "shared", "oracles", name)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("missing (looked in %s)", dir)
	}
	return dir, nil
}

// File returns a file of oracle name (a path under its folder), or skips naming it.
func File(t testing.TB, name, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t, name), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("needs the external oracle file ../shared/oracles/%s/%s: missing", name, rel)
	}
	return p
}

func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", os.ErrNotExist
		}
		d = parent
	}
}
