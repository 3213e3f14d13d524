// Package lower turns extracted graphs into a plan.Plan: constant folding into compile-time
// weights, views for reshapes and contiguous slices, fusion of elementwise chains (into one
// kernel, or into the epilogue of a matmul), template choice, a liveness-based memory plan with
// one arena, in-place state updates, a dispatch order that lets independent kernels share barrier
// intervals, and module deduplication.
//
// The static path (Options.Choose == nil) takes, for every problem, the template with the lowest
// roofline estimate (Estimate) at its default configuration. The measured tuner plugs in through
// Options.Choose; everything else is the same for both.
//
// Lowering is deterministic: the same model, functions and options give a plan whose encoding is
// byte-identical (maps are never iterated where order matters; everything is ordered by node
// position).
package lower

import (
	"errors"
	"fmt"
	"time"

	"vkc/ir"
	"vkc/kernels"
	"vkc/plan"
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
	// Progress, when set, is called after each lowered kernel.
	Progress func(done, total int, what string)
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
// state) into a plan. m.Weights must hold every parameter the functions use.
func Lower(m *ir.Model, fns []*ir.Function, opts Options) (*plan.Plan, *Report, error) {
	return lowerModel(m, fns, opts)
}
