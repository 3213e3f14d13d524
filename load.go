package vkc

import (
	"fmt"

	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// LoadOptions configure Load.
type LoadOptions struct {
	// Device selects the device by index or name substring ("" is $VKC_DEVICE, else the best).
	Device string
	// AllowForeign runs a plan compiled for another device (its kernels may be slow there, or
	// need a capability the device lacks).
	AllowForeign bool
	// Runtime is passed to runtime.Open; its Device field is replaced by Device.
	Runtime runtime.Options
}

// Loaded is a plan file loaded on a device, ready to run: the embedded Executable's Run,
// Profile, Measure, ResetState and ReadState are the whole API, and it satisfies Executable for
// Generate.
type Loaded struct {
	*runtime.Executable
	Device *runtime.Device
}

// Load reads the plan file at path (LoadPlan), opens the device and loads the plan on it. Close
// the result when done.
//
//	l, err := vkc.Load("tinyllama.plan", vkc.LoadOptions{})
//	if err != nil { ... } // "plan file x: not a vkc plan: ...", "plan was compiled for ..."
//	defer l.Close()
//	outs, err := l.Run(ctx, "decode", map[string][]byte{"tokens": vkc.Int32Bytes(5), "pos": vkc.Int32Bytes(16)})
func Load(path string, opts LoadOptions) (*Loaded, error) {
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
	// Check the device first for a message that says what to do; Load checks it again.
	if err := p.CheckDevice(dev.DeviceFingerprint()); err != nil && !opts.AllowForeign {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	exe, err := dev.Load(p, runtime.LoadOptions{AllowForeign: opts.AllowForeign, PlanPath: path})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Loaded{Executable: exe, Device: dev}, nil
}

// Close frees the executable and closes the device.
func (l *Loaded) Close() error {
	err := l.Executable.Close()
	if cerr := l.Device.Close(); err == nil {
		err = cerr
	}
	return err
}

// Function returns the plan's function fn, or an error listing the functions there are.
func (l *Loaded) Function(fn string) (*plan.Function, error) {
	return FindFunction(l.Plan(), fn)
}

// FindFunction returns p's function fn, or an error listing the functions there are.
func FindFunction(p *plan.Plan, fn string) (*plan.Function, error) {
	if f := p.Function(fn); f != nil {
		return f, nil
	}
	names := ""
	for i, f := range p.Functions {
		if i > 0 {
			names += ", "
		}
		names += f.Name
	}
	return nil, fmt.Errorf("plan for %s has no function %q (it has %s)", p.Model, fn, names)
}
