// Package lower turns extracted graphs into a plan.Plan:
//
//  1. fold: subgraphs that depend only on parameters and constants are evaluated by the
//     interpreter and stored as compile-time weights (concatenated or transposed weights, scaled
//     norms); compile-time scalars are embedded in the kernels that use them;
//  2. views: reshape is always a view; a contiguous slice (axes before the sliced one of size 1,
//     step 1) is a view at a byte offset when that offset keeps the binding alignment, else a
//     kernel; other layout ops are kernels;
//  3. fusion: pointwise ops (and expand) form groups computed by one elementwise kernel, with
//     several outputs when a member is a function result; a group whose input comes from a
//     kernel that nothing else reads becomes that kernel's epilogue when a template implements it
//     (a matmul's bias, activation or residual add);
//  4. templates: every problem gets a template and configuration through Options.Choose (the
//     measured tuner) or the static choice (lowest Estimate at the default configuration);
//  5. memory: intermediates share one arena placed by memplan.Assign over lifetimes measured in
//     barrier levels; a launch that writes a result in place over a state read straight from its
//     source is done on the state region (the old state is copied first only if a kernel that
//     runs later still reads it); results are written straight into output slots where possible;
//  6. order: every launch step gets the earliest barrier level after its dependencies (reads
//     after writes, writes after reads and writes), dispatches are emitted level by level, and
//     BarrierBefore is set exactly where a dispatch touches bytes that a dispatch since the last
//     barrier writes (or writes bytes it touches); identical modules are emitted once;
//  7. record: ops, labels and estimated times per dispatch, the chosen kernels, notes.
//
// Lowering is deterministic: the same model, functions and options give a plan whose encoding is
// byte-identical (nothing depends on map order; everything is ordered by node position).
//
// Limits: levels minimise barriers to the dependency depth but can keep more intermediates alive
// at once than a depth-first order would; concat is a kernel (producers do not yet write into the
// concatenation's slices); function inputs and outputs always get staging slots of their own.
package lower

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// Options configure Lower.
type Options struct {
	Caps            kernels.Caps
	Device          plan.Fingerprint
	CompilerVersion string
	// Choose picks the template and configuration for a problem. nil: the static choice (among
	// the templates that accept, the one with the lowest roofline estimate at its default
	// configuration; ties go to the first by name). The measured tuner plugs in here.
	Choose func(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
	// ExternalWeights is "" for weights inline in the plan, else the safetensors file the model's
	// weights came from: the plan references it with its checksum. Constant subgraphs are then not
	// folded (the plan can hold no bytes of its own besides the file), they run on the device.
	ExternalWeights string
	// Model is the device model of the roofline estimates; the zero value means ModelFor(Device).
	Model DeviceModel
	// Folds, when set, shares folded constant values between lowerings of the same model (see
	// FoldCache); nil gives each Lower call a cache of its own, shared by its functions.
	Folds *FoldCache
	// Progress, when set, is called after each lowered kernel.
	Progress func(done, total int, what string)
	// Context, when set, stops lowering with its error once it is done: checked before every
	// node, between the folded constants' nodes and while the weights are assembled, so an
	// interrupted compile ends within moments and returns no plan.
	Context context.Context
}

// Report summarises what Lower did, per function.
type Report struct {
	Functions []FunctionReport
	Modules   int    // distinct SPIR-V modules (after deduplication)
	Weights   uint64 // bytes of the weight region
	Folded    int    // constant subgraphs folded into compile-time weights
	State     uint64 // bytes of the state region
	Arena     uint64 // bytes of the arena (the largest function's need)
}

// FunctionReport describes one lowered function.
type FunctionReport struct {
	Name       string
	Dispatches int
	Barriers   int
	// ArenaBytes is the arena this function needs; Intermediates is the sum of the sizes of all
	// its intermediate buffers (what the arena would be without reuse).
	ArenaBytes, Intermediates uint64
	InPlace                   int // state updates done in place
	StateCopies               int // state updates that needed a copy
	Estimated                 time.Duration
	Kernels                   []KernelChoice
}

// KernelChoice is the template chosen for one problem of a function.
type KernelChoice struct {
	Label     string // the graph node(s), e.g. "%12 add+silu"
	Ops       []string
	Problem   string // kernels.Problem.Key()
	Template  string
	Config    kernels.Config
	Estimated time.Duration
	// Tolerance is the launch's declared error beyond its dtype's rounding (kernels.Launch:
	// 8-bit activations, matmul_coop's f16 roundings), 0 for exact kernels.
	Tolerance float64
}

// ErrNoTemplate is wrapped by the error Lower returns when no kernel template implements a
// problem of the graph (the message names the op and the node).
var ErrNoTemplate = errors.New("no kernel template implements it")

// NoTemplateError says which op of which function no template implements.
type NoTemplateError struct {
	Function string
	Op       string // the op name ("elementwise" for a fused group)
	Node     string // the node, as ir prints it
	Err      error  // the registry's reasons
}

func (e *NoTemplateError) Error() string {
	return fmt.Sprintf("function %s: node %s: op %s: no kernel template implements it: %v", e.Function, e.Node, e.Op, e.Err)
}

func (e *NoTemplateError) Unwrap() error { return ErrNoTemplate }

// Lower compiles fns (functions of m, normally after extraction, sharing m's parameters and
// state) into a plan. m.Weights must hold every parameter the functions use. An op no template
// implements is a *NoTemplateError naming the op and the node (errors.Is ErrNoTemplate).
//
//	p, rep, err := lower.Lower(m, m.Functions, lower.Options{Caps: caps, Device: fingerprint})
//	if err == nil {
//		fmt.Println(rep.Functions[0].Dispatches, rep.Functions[0].Barriers, rep.Arena)
//		err = p.WriteFile("model.plan")
//	}
func Lower(m *ir.Model, fns []*ir.Function, opts Options) (*plan.Plan, *Report, error) {
	return lowerModel(m, fns, opts)
}
