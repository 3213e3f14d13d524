package engine_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/runtime"
)

// userProgram is a user's main package: it compiles a model with the compiler (package vkc),
// writes the plan, loads it with engine and runs it on Go values.
const userProgram = `package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
)

func main() {
	ctx := context.Background()
	model, err := ir.ParseModel(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	p, _, err := vkc.Compile(ctx, model, vkc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(os.Args[2], "mlp.plan")
	if err := p.WriteFile(path); err != nil {
		log.Fatal(err)
	}
	m, err := engine.Load(path, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	x := make([]float32, 4*16)
	for i := range x {
		x[i] = float32(i%5-2) / 3
	}
	res, err := m.Call(ctx, "forward", map[string]any{"x": engine.WithShape(x, 4, 16)})
	if err != nil {
		log.Fatal(err)
	}
	labels, err := res.Int32s("label")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("labels", labels)
}
`

// TestScratchModule builds a program in a module of its own outside the tree (as a user's
// would be) that requires this module through a replace directive to the checkout, imports
// engine and the compiler, compiles the mlp example, runs it, and prints the labels, which
// must be the interpreter's. It works offline: GOPROXY=off, GOFLAGS=-mod=mod, the module cache
// as scripts/setup.sh's go mod download left it (the scratch module's go.sum is this one's).
func TestScratchModule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a program in a scratch module")
	}
	gobin := goCommand(t)
	root, err := filepath.Abs(moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := ""
	for _, l := range strings.Split(string(goMod), "\n") {
		if strings.HasPrefix(l, "go ") {
			goLine = l
		}
	}
	dir := t.TempDir()
	mod := fmt.Sprintf("module example.com/vkcuser\n\n%s\n\nrequire github.com/vkc-project/vkc v0.0.0\n\nreplace github.com/vkc-project/vkc => %s\n", goLine, root)
	for name, data := range map[string][]byte{"go.mod": []byte(mod), "go.sum": goSum, "main.go": []byte(userProgram)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "vkcuser")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in the scratch module: %v\n%s\ngo.mod:\n%s", err, out, mod)
	}

	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("built; not run: no Vulkan device: %v", err)
	}
	model := filepath.Join(root, "examples", "mlp", "model.yaml")
	run := exec.Command(bin, model, dir)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the scratch module's program: %v\n%s", err, out)
	}

	m, err := ir.ParseModel(model)
	if err != nil {
		t.Fatal(err)
	}
	x := ir.NewTensor(ir.T(ir.F32, 4, 16))
	for i := 0; i < 64; i++ {
		x.SetFloat64(i, float64(float32(i%5-2)/3))
	}
	want, _, err := interp.Run(m, "forward", map[string]*ir.Tensor{"x": x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	labels := want["label"].Float64s()
	w := make([]string, len(labels))
	for i, l := range labels {
		w[i] = fmt.Sprint(int(l))
	}
	t.Logf("the scratch module's program: %s", strings.TrimSpace(string(out)))
	if got, exp := strings.TrimSpace(string(out)), "labels ["+strings.Join(w, " ")+"]"; got != exp {
		t.Errorf("the scratch module's program printed %q, the interpreter gives %q", got, exp)
	}
}
