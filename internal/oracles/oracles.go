// Package oracles finds the external oracles tests compare against: folders of files written by
// no one in this project, kept beside the repository in ../shared/oracles (relative to the
// module root), never copied into it. A test whose oracle is absent skips, naming it.
package oracles

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns ../shared/oracles/name (relative to the directory holding go.mod), or skips the
// test with a message naming the missing oracle.
func Dir(t testing.TB, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Skipf("oracle ../shared/oracles/%s missing: %v", name, err)
	}
	dir := filepath.Join(root, "..", "shared", "oracles", name)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Skipf("oracle ../shared/oracles/%s missing (looked in %s)", name, dir)
	}
	return dir
}

// File returns a file of oracle name (a path under its folder), or skips naming it.
func File(t testing.TB, name, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t, name), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("oracle file ../shared/oracles/%s/%s missing", name, rel)
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
