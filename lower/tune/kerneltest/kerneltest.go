// Package kerneltest runs kernel templates on a Vulkan device (lavapipe in CI) and checks them
// against the reference interpreter. Tests of kernels, of lowering and of the tuner use it. The
// device-side helpers live in package lower/tune (the tuner runs them outside tests); these wrap
// them. It sits beside the tuner, not under kernels, because it needs the runtime and the tuner:
// package kernels itself depends on ir and codegen only, and its tests (an external test
// package) may reach upwards.
package kerneltest

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/runtime/devtest"
)

// CapsOf converts the runtime's description of a device into what templates need (tune.CapsOf).
func CapsOf(info *runtime.DeviceInfo) kernels.Caps { return tune.CapsOf(info) }

// Device opens the default device once per test binary, with the Khronos validation layer when
// it is installed. Without a Vulkan device the test is skipped, saying so (devtest.Device).
func Device(t testing.TB) *runtime.Device { return devtest.Device(t) }

// Run executes a Launch for p on d with the given arguments and returns the results
// (tune.RunLaunch).
func Run(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, args []*ir.Tensor) ([]*ir.Tensor, error) {
	return tune.RunLaunch(d, p, l, args)
}

// Expect evaluates p's reference function on args in the interpreter (tune.Expect).
func Expect(p *kernels.Problem, args []*ir.Tensor) ([]*ir.Tensor, error) { return tune.Expect(p, args) }

// Compare checks got against want (tune.Compare): for floats, max abs error ≤ tol relative to
// the largest magnitude of the row plus tol absolute; integers and bools exactly. It returns ""
// or a description of the worst element.
func Compare(got, want *ir.Tensor, tol float64) string { return tune.Compare(got, want, tol) }

// Tolerance is the default comparison tolerance for a dtype (tune.Tolerance).
func Tolerance(d ir.DType) float64 { return tune.Tolerance(d) }

// Random returns a tensor of normal values (floats) or small integers in [0, 8) (ints)
// (tune.Random).
func Random(rng *rand.Rand, t ir.Type) *ir.Tensor { return tune.Random(rng, t) }

// Check builds p with template t at configuration c (nil: the default), runs it on the test
// device with args and compares every result with the interpreter.
func Check(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) {
	t.Helper()
	CheckWith(t, tmpl, p, c, args, CapsOf(&Device(t).Info))
}

// CheckForms runs Check for both forms of a template that builds differently for a CPU
// implementation (Caps.CPU) and a GPU, on whichever device there is: subtests cpu=true and
// cpu=false. (Each test device otherwise runs only its own form.)
func CheckForms(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) {
	t.Helper()
	for _, cpu := range []bool{true, false} {
		caps := CapsOf(&Device(t).Info)
		caps.CPU = cpu
		t.Run(fmt.Sprintf("cpu=%v", cpu), func(t *testing.T) {
			CheckWith(t, tmpl, p, c, args, caps)
		})
	}
}

// CheckWith is Check with the kernel built for the given capabilities (a GPU's form of a
// template on a CPU implementation, say).
func CheckWith(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor, caps kernels.Caps) {
	t.Helper()
	d := Device(t)
	var l *kernels.Launch
	var err error
	if c == nil {
		l, c, err = kernels.Build(tmpl, p, caps)
	} else {
		if err = tmpl.Space.Valid(p, c, caps); err == nil {
			l, err = tmpl.Build(p, c, caps)
		}
	}
	if err != nil {
		t.Fatalf("%s %s: %v", tmpl.Name, p.Key(), err)
	}
	got, err := Run(d, p, l, args)
	if err != nil {
		t.Fatalf("%s %s [%s]: run: %v", tmpl.Name, p.Key(), c.Key(), err)
	}
	want, err := Expect(p, args)
	if err != nil {
		t.Fatalf("%s %s: reference: %v", tmpl.Name, p.Key(), err)
	}
	for i := range want {
		if msg := Compare(got[i], want[i], tune.LaunchTolerance(l, p, i)); msg != "" {
			t.Errorf("%s %s [%s]: result %d: %s", tmpl.Name, p.Key(), c.Key(), i, msg)
		}
	}
}

// Names lists template names for messages.
func Names(ts []*kernels.Template) string {
	n := make([]string, len(ts))
	for i, t := range ts {
		n[i] = t.Name
	}
	return strings.Join(n, ", ")
}

// CheckAt is Check for a problem with a run-time length (kernels.Rows), run at length n: the
// launch is built for p's capacity and run with the grids and the Len operand of length n (as a
// plan runs it), the rows of the bounded arguments past the run's are poisoned (NaN for floats),
// and the results' first rows (the whole of an unbounded result, such as a cache written in
// place) are compared with the interpreter's evaluation of the static problem p.At(n).
func CheckAt(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor, n int) {
	t.Helper()
	CheckAtWith(t, tmpl, p, c, args, []int{n}, CapsOf(&Device(t).Info))
}

// CheckAtWith is CheckAt at each of the lengths ns, building the launch once for the given
// capabilities (emulated cooperative matrices, say) and creating its pipelines once.
func CheckAtWith(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor, ns []int, caps kernels.Caps) {
	t.Helper()
	d := Device(t)
	l, c, err := kernels.BuildAt(tmpl, p, c, caps)
	if err != nil {
		t.Fatalf("%s %s: %v", tmpl.Name, p.Key(), err)
	}
	pipes := tune.NewPipelines(d)
	defer pipes.Close()
	for _, n := range ns {
		at, err := p.At(n)
		if err != nil {
			t.Fatal(err)
		}
		// The run's arguments: the first rows of the bounded ones; the device gets them
		// followed by poison.
		cut, dev := tune.ArgsAt(p, at, args)
		b, err := tune.NewBenchAt(d, p, l, pipes, n)
		if err != nil {
			t.Fatalf("%s %s [%s] n=%d: %v", tmpl.Name, p.Key(), c.Key(), n, err)
		}
		got, err := b.Run(context.Background(), dev)
		b.Close()
		if err != nil {
			t.Fatalf("%s %s [%s] n=%d: run: %v", tmpl.Name, p.Key(), c.Key(), n, err)
		}
		want, err := Expect(at, cut)
		if err != nil {
			t.Fatalf("%s %s n=%d: reference: %v", tmpl.Name, at.Key(), n, err)
		}
		got = tune.ResultsAt(p, at, got)
		for i := range want {
			if msg := Compare(got[i], want[i], tune.LaunchTolerance(l, p, i)); msg != "" {
				t.Errorf("%s %s [%s] n=%d: result %d: %s", tmpl.Name, p.Key(), c.Key(), n, i, msg)
			}
		}
	}
}
