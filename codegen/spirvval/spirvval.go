// Package spirvval runs the Khronos SPIR-V validator on emitted modules, for tests. It prefers the
// spirv-val in ../shared/tools beside the module root (SPIRV-Tools v2026.3: Debian 12's v2023.1
// predates SPV_KHR_cooperative_matrix and SPV_KHR_bfloat16), then the one on $PATH, and says which
// it found so that a test can skip, naming the missing capability, where only an old one exists.
package spirvval

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
)

// Tool is a spirv-val executable and its release.
type Tool struct {
	Path        string
	Year, Minor int // SPIRV-Tools release vYEAR.MINOR; 0 when --version could not be read
	VersionLine string
}

// AtLeast reports whether the tool is release vYEAR.MINOR or newer.
func (t *Tool) AtLeast(year, minor int) bool {
	return t.Year > year || (t.Year == year && t.Minor >= minor)
}

var (
	once  sync.Once
	found *Tool
	ferr  error
)

// Find locates spirv-val once per process: ../shared/tools/spirv-val beside the directory that holds
// go.mod (found by walking up from the working directory, which go test sets to the package's), or
// else spirv-val on $PATH.
func Find() (*Tool, error) {
	once.Do(func() { found, ferr = find() })
	return found, ferr
}

var versionRE = regexp.MustCompile(`SPIRV-Tools v(\d+)\.(\d+)`)

func find() (*Tool, error) {
	var path string
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, "..", "shared", "tools", "spirv-val")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			path = p
		}
	}
	if path == "" {
		p, err := exec.LookPath("spirv-val")
		if err != nil {
			return nil, errors.New("spirv-val not found in ../shared/tools or on $PATH (install spirv-tools; scripts/setup.sh does)")
		}
		path = p
	}
	t := &Tool{Path: path}
	out, _ := exec.Command(path, "--version").Output()
	if m := versionRE.FindSubmatch(out); m != nil {
		t.Year, _ = strconv.Atoi(string(m[1]))
		t.Minor, _ = strconv.Atoi(string(m[2]))
		t.VersionLine = string(m[0])
	}
	return t, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Validate runs the tool on a module (little-endian bytes) for a target environment such as
// vulkan1.1 or vulkan1.3 and returns its complaint, or nil. dir holds the temporary file.
func (t *Tool) Validate(module []byte, env, dir string) error {
	f, err := os.CreateTemp(dir, "module-*.spv")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(module); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	out, err := exec.Command(t.Path, "--target-env", env, f.Name()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --target-env %s: %v\n%s", t.Path, env, err, out)
	}
	return nil
}

// Disassemble returns spirv-dis's text of a module, from beside the validator, for messages.
func (t *Tool) Disassemble(module []byte, dir string) string {
	dis := filepath.Join(filepath.Dir(t.Path), "spirv-dis")
	if _, err := os.Stat(dis); err != nil {
		if dis, err = exec.LookPath("spirv-dis"); err != nil {
			return "(spirv-dis not found)"
		}
	}
	f, err := os.CreateTemp(dir, "module-*.spv")
	if err != nil {
		return err.Error()
	}
	defer os.Remove(f.Name())
	f.Write(module)
	f.Close()
	out, _ := exec.Command(dis, f.Name()).CombinedOutput()
	return string(out)
}
