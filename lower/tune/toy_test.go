package tune

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/runtime/devtest"
)

// testDevice opens the default Vulkan device once (lavapipe in CI); see devtest.Device.
// (kerneltest.Device cannot be used: it imports this package.)
func testDevice(t testing.TB) *runtime.Device { return devtest.Device(t) }

// toyProblem is y = -x over n f32 elements.
func toyProblem(n int) *kernels.Problem {
	t := ir.T(ir.F32, n)
	return &kernels.Problem{Op: ir.Neg, Args: []ir.Type{t}, Outs: []ir.Type{t}}
}

// toyTemplate computes toyProblem with parameters the tuner sees as opaque data:
//
//   - wg: workgroup size (a specialization constant), per: elements per invocation;
//   - variant: 0 correct, 1 a wrong kernel (writes x instead of -x), 2 a Build error, 3 rejected
//     by the space's predicate;
//   - slow: 1 negates each element 2048 extra times (a loop bounded by a push constant, so the
//     driver cannot fold it) — a genuinely slower kernel with the same result.
//
// A parameter missing from the space takes its neutral value. bytesScale multiplies the bytes
// the Launch declares, which is what the static (roofline) estimate ranks by.
func toyTemplate(name string, bytesScale float64, params ...kernels.Param) *kernels.Template {
	return &kernels.Template{
		Name: name,
		Accepts: func(p *kernels.Problem, caps kernels.Caps) error {
			if p.Op != ir.Neg {
				return kernels.ErrOtherOp
			}
			return nil
		},
		Space: kernels.NewSpace(params...).Where(func(p *kernels.Problem, c kernels.Config, caps kernels.Caps) error {
			if c["variant"] == 3 {
				return errors.New("variant 3 is rejected by the predicate")
			}
			return nil
		}),
		Build: func(p *kernels.Problem, c kernels.Config, caps kernels.Caps) (*kernels.Launch, error) {
			return buildToy(p, c, bytesScale)
		},
	}
}

func param(c kernels.Config, name string, def int) int {
	if v, ok := c[name]; ok {
		return v
	}
	return def
}

func buildToy(p *kernels.Problem, c kernels.Config, bytesScale float64) (*kernels.Launch, error) {
	variant := param(c, "variant", 0)
	if variant == 2 {
		return nil, fmt.Errorf("variant=2 does not build")
	}
	n := p.Outs[0].Shape.NumElements()
	wg, per := param(c, "wg", 64), param(c, "per", 1)
	iters := uint32(0)
	if param(c, "slow", 0) == 1 {
		iters = 2048
	}
	b := codegen.NewBuilder("toy_neg")
	in := b.Buffer("x", codegen.F32, codegen.ReadOnly)
	out := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	it := b.Push("iters", codegen.U32)
	b.WorkgroupSize(b.Spec("wg", codegen.U32, int64(wg)), b.U32(1), b.U32(1))
	base := b.Mul(b.X(b.GlobalID()), b.U32(uint32(per)))
	for k := 0; k < per; k++ {
		idx := b.Add(base, b.U32(uint32(k)))
		b.If(b.Lt(idx, b.U32(uint32(n))), func() {
			acc := b.Var("acc", b.Load(in, idx))
			b.For(b.U32(0), it, b.U32(1), func(codegen.Value) { b.Set(acc, b.Neg(b.Get(acc))) })
			r := b.Neg(b.Get(acc))
			if variant == 1 {
				r = b.Get(acc)
			}
			b.Store(out, idx, r)
		})
	}
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	spec, err := k.SpecValues(map[string]int64{"wg": int64(wg)})
	if err != nil {
		return nil, err
	}
	groups := (n + wg*per - 1) / (wg * per)
	st := kernels.Step{Kernel: k, Spec: spec, Grid: [3]uint32{uint32(groups), 1, 1},
		Bindings: []kernels.Operand{{Kind: kernels.Arg, Index: 0}, {Kind: kernels.Out, Index: 0}},
		Push:     kernels.PushU32(iters)}
	return &kernels.Launch{Steps: []kernels.Step{st}, Flops: float64(n), Bytes: 8 * float64(n) * bytesScale}, nil
}

// fakeClock is a TimingSource with a known optimum: the time of a configuration is a function
// of it alone. It counts the configurations it timed.
type fakeClock struct {
	mu     sync.Mutex
	timeOf func(tmpl string, c kernels.Config) time.Duration
	timed  []string // "template[config]" in order
	// onTime, when set, runs before each timing (tests cancel a context from it).
	onTime func(n int)
}

func (f *fakeClock) Time(ctx context.Context, c *Candidate) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if f.onTime != nil {
		f.onTime(len(f.timed))
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	if c.Bench == nil || c.Bench.Program() == nil {
		return 0, errors.New("fake clock: candidate has no recorded program")
	}
	f.timed = append(f.timed, c.Template.Name+"["+c.Config.Key()+"]")
	return f.timeOf(c.Template.Name, c.Config), nil
}

func (f *fakeClock) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timed)
}

// bowl is a fake time with its minimum at wg=64, per=2, variant=0, slow=0, except that the
// wrong kernel (variant 1) would be fastest of all if its result were not checked.
func bowl(tmpl string, c kernels.Config) time.Duration {
	abs := func(x int) int { return max(x, -x) }
	d := 100*time.Microsecond + time.Duration(abs(c["wg"]-64))*time.Microsecond + time.Duration(abs(c["per"]-2))*7*time.Microsecond
	if c["slow"] == 1 {
		d += 500 * time.Microsecond
	}
	if c["variant"] == 1 {
		d = time.Microsecond
	}
	return d
}

// toyTuner is a tuner over the given templates only, on the test device.
func toyTuner(t *testing.T, clock TimingSource, tmpls ...*kernels.Template) *Tuner {
	d := testDevice(t)
	tu := &Tuner{Device: d, Timing: clock, Compiler: "vkc test", Seed: 1, Confirm: -1,
		Templates: func(p *kernels.Problem, caps kernels.Caps) ([]*kernels.Template, error) {
			var out []*kernels.Template
			for _, tm := range tmpls {
				if tm.Accepts(p, caps) == nil {
					out = append(out, tm)
				}
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("no toy template accepts %s", p.Key())
			}
			return out, nil
		}}
	tu.Static = CheapestOf(CapsOf(&d.Info), tu.Templates, nil)
	t.Cleanup(tu.Close)
	return tu
}
