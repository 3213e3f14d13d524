package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/tokenizer"
)

// Options configure Load.
type Options struct {
	// Device selects the device by index or name substring ("" is $VKC_DEVICE, else the best).
	Device string
	// AllowForeign runs a plan compiled for another device (its kernels may be slow there, or
	// need a capability the device lacks).
	AllowForeign bool
	// Runtime is passed to runtime.Open; its Device field is replaced by Device.
	Runtime runtime.Options
	// Prepare makes Load ready every pipeline of the plan before it returns
	// (runtime.Executable.Prepare), so that no call pays for a driver compiling a shader at its
	// first dispatch (Mesa's lavapipe does; GPU drivers compile when Load creates the
	// pipelines). PrepareProgress, when set, is called as it goes: done of total.
	// Model.Prepare and Model.PrepareGeneration do it later, for some functions only.
	Prepare         bool
	PrepareProgress func(done, total int)
	// LoadProgress, when set, hears how many of the plan's weight bytes are on the device so
	// far while Load uploads them (runtime.LoadOptions.Progress).
	LoadProgress func(done, total uint64)
	// PrefillChunk bounds the prompt tokens one step runs on a plan with slots, where prompts
	// and the running generations' decode steps take turns (0: DefaultPrefillChunk): a new
	// prompt delays the others' next tokens by one such chunk at most.
	PrefillChunk int
}

// Model is a plan file loaded on a device, ready to run. The embedded Executable's Run, RunInto,
// Profile, Measure, Stats, ResetState and ReadState take and return byte slices in the plan's
// layout; Call takes and returns Go slices. A Model runs one function at a time (calls
// serialise), keeps the plan's state (the KV caches) on the device between runs, and is safe for
// use from many goroutines: generations take turns whole (see Session).
type Model struct {
	*runtime.Executable
	// Device is the device the plan runs on (its Info names it); Close closes it.
	Device *runtime.Device
	// Path is the plan file's path as Load was given it.
	Path string

	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tokErr  error

	gen     chan struct{} // the generation lock (capacity 1): held by every generation and run through Model (session.go)
	waiting atomic.Int64  // generations and runs waiting for gen
	kv      kvRecord      // what the cache holds, under gen
	sched   *scheduler    // continuous batching, for a plan with slots (scheduler.go)
}

// Load reads the plan file at path (LoadPlan), opens the device and loads the plan on it: the
// pipelines are created, the weights uploaded, the state zeroed and every function recorded once.
// Close the result when done.
//
// Errors name the file: not a vkc plan, truncated, corrupt, a newer format, a changed external
// weight file, a plan compiled for another device (unless AllowForeign), no Vulkan (naming what
// to install).
func Load(path string, opts Options) (*Model, error) {
	p, err := LoadPlan(path)
	if err != nil {
		return nil, err
	}
	ro := opts.Runtime
	ro.Device = opts.Device
	dev, err := runtime.Open(ro)
	if err != nil {
		return nil, err
	}
	// Check the device first for a message that says what to do; Device.Load checks it again.
	if err := p.CheckDevice(dev.DeviceFingerprint()); err != nil && !opts.AllowForeign {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	exe, err := dev.Load(p, runtime.LoadOptions{AllowForeign: opts.AllowForeign, PlanPath: path, Progress: opts.LoadProgress})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if opts.Prepare {
		if _, err := exe.Prepare(context.Background(), runtime.PrepareOptions{Progress: opts.PrepareProgress}); err != nil {
			exe.Close()
			dev.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	m := &Model{Executable: exe, Device: dev, Path: path, gen: make(chan struct{}, 1)}
	if lm, err := CausalLM(p); err == nil && lm.Decode.Batched() && lm.Decode.Bounded() && lm.Slots >= 1 {
		m.sched = newScheduler(m, lm, opts.PrefillChunk)
	}
	return m, nil
}

// Close frees the executable and closes the device. Generations still running fail.
func (m *Model) Close() error {
	if m.sched != nil {
		m.sched.close()
	}
	err := m.Executable.Close()
	if cerr := m.Device.Close(); err == nil {
		err = cerr
	}
	return err
}

// Function returns the plan's function fn, or an error listing the functions there are.
func (m *Model) Function(fn string) (*plan.Function, error) {
	return FindFunction(m.Plan(), fn)
}

// FindFunction returns p's function fn, or an error listing the functions there are.
func FindFunction(p *plan.Plan, fn string) (*plan.Function, error) {
	if f := p.Function(fn); f != nil {
		return f, nil
	}
	names := make([]string, len(p.Functions))
	for i, f := range p.Functions {
		names[i] = f.Name
	}
	return nil, fmt.Errorf("plan for %s has no function %q (it has %s)", p.Model, fn, strings.Join(names, ", "))
}

// LoadPlan reads the plan file at path and makes it self-contained: when its weights are
// external (compiled with weights left in their source file), the weight file it names is read
// (relative to the plan's folder), checked against the size and SHA-256 the plan recorded, and
// its tensors are assembled into the plan's weight region, so the runtime needs nothing else.
// Errors name the file and what is wrong with it (not a plan, truncated, corrupt, a newer
// format, a changed weight file).
func LoadPlan(path string) (*plan.Plan, error) {
	p, err := plan.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if p.Weights.Source != nil {
		data, err := p.LoadWeights(path)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", path, err)
		}
		p.Weights.Data, p.Weights.Source = data, nil
		for i := range p.Weights.Tensors {
			p.Weights.Tensors[i].SourceOffset = 0
		}
	}
	return p, nil
}

// Call runs function fn with inputs given as Go values (see Encode: []float32, []int32, []uint16
// for f16, numbers, ...) and returns its outputs with typed accessors:
//
//	res, err := m.Call(ctx, "decode", map[string]any{"tokens": []int32{42}, "pos": 0})
//	logits, err := res.Float32s("logits") // f32, or f16/bf16 widened to float32
//
// The inputs are checked against the function's signature (names, dtypes, element counts, and
// shapes for Shaped values) before anything runs.
func (m *Model) Call(ctx context.Context, fn string, inputs map[string]any) (*Results, error) {
	if ctx == nil {
		return nil, errors.New("engine: Call with a nil context (give context.Background())")
	}
	f, err := m.Function(fn)
	if err != nil {
		return nil, err
	}
	in, err := Inputs(f, inputs)
	if err != nil {
		return nil, err
	}
	out, err := m.Run(ctx, fn, in)
	if err != nil {
		return nil, err
	}
	return &Results{Function: f, Bytes: out}, nil
}
