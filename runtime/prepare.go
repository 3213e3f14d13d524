package runtime

import (
	"context"
	"fmt"
	"sort"

	"github.com/vkc-project/vkc/plan"
)

// This file makes pipelines ready before the first run. vkCreateComputePipelines is where most
// drivers compile a shader, and Device.Load creates every pipeline of a plan in parallel; but
// Mesa's lavapipe (llvmpipe) compiles each shader to machine code with LLVM at its first
// dispatch, so without a warm-up the first run of each function carries that time (tens of
// seconds for a small model on a busy CPU), counted as the run's. Prepare dispatches each
// pipeline once with zero workgroups (an indirect dispatch whose counts are zero: nothing runs,
// the Vulkan specification allows it), which makes such a driver compile it then; elsewhere it
// costs a submission per pipeline.
//
// What persists between processes: the VkPipelineCache saved under the cache directory, keyed by
// the device's fingerprint (vendor, device, driver version, pipeline-cache UUID), which GPU
// drivers fill; lavapipe leaves it empty and keeps its compiled shaders in Mesa's own on-disk
// shader cache (MESA_SHADER_CACHE_DIR, by default ~/.cache/mesa_shader_cache), so a second run
// compiles nothing either way. Prepare saves the pipeline cache when it is done, so a process
// that is then killed still leaves it for the next.

// FunctionLength names a function and the run-time length it will run at (0: every length,
// that is every variant of the function; a function without a run-time length ignores it).
type FunctionLength struct {
	Name   string
	Length int
}

// PrepareOptions configure Executable.Prepare.
type PrepareOptions struct {
	// Functions limits the work to the pipelines these functions run at these lengths; nil means
	// every pipeline of the plan.
	Functions []FunctionLength
	// Progress, when set, is called before the first pipeline and after each one: done of
	// total (the pipelines not prepared before).
	Progress func(done, total int)
}

// PrepareStats says what Prepare did.
type PrepareStats struct {
	Pipelines int // pipelines prepared now
	Before    int // pipelines of the selection prepared by an earlier call
}

// Prepare makes the selected pipelines ready, so that the first run of a function costs what
// any run does (see the file comment). Pipelines prepared once stay so; a run prepares its own
// pipelines without it, at its first dispatch of each.
func (e *Executable) Prepare(ctx context.Context, o PrepareOptions) (PrepareStats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return PrepareStats{}, ErrClosed
	}
	var fns []*plan.Function
	if o.Functions == nil {
		for _, name := range e.names {
			ef := e.fns[name]
			fns = append(fns, ef.f)
			for _, v := range ef.variants {
				fns = append(fns, v.f)
			}
		}
	} else {
		for _, fl := range o.Functions {
			ef, err := e.function(fl.Name)
			if err != nil {
				return PrepareStats{}, err
			}
			if fl.Length <= 0 || ef.f.Length == nil {
				fns = append(fns, ef.f)
				for _, v := range ef.variants {
					if fl.Length <= 0 {
						fns = append(fns, v.f)
					}
				}
				continue
			}
			chosen := ef.f
			for _, v := range ef.variants {
				if l := v.f.Length; fl.Length >= int(l.Min) && fl.Length <= int(l.Max) {
					chosen = v.f
					break
				}
			}
			fns = append(fns, chosen)
		}
	}
	seen := map[*Pipeline]bool{}
	var todo []*Pipeline
	var st PrepareStats
	for _, f := range fns {
		for _, ds := range f.Dispatches {
			pl := e.pipes[ds.Module]
			if seen[pl] {
				continue
			}
			seen[pl] = true
			if e.prepared[pl] {
				st.Before++
				continue
			}
			todo = append(todo, pl)
		}
	}
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].Kernel.Name < todo[j].Kernel.Name })
	if o.Progress != nil {
		o.Progress(0, len(todo))
	}
	if len(todo) == 0 {
		return st, nil
	}
	d := e.d
	// Every binding of every warm-up dispatch is this one small buffer: no invocation runs.
	scratch, err := d.NewBuffer(256)
	if err != nil {
		return st, fmt.Errorf("prepare pipelines: %w", err)
	}
	defer scratch.Free()
	counts, err := d.NewBuffer(16) // zeros: no workgroups
	if err != nil {
		return st, fmt.Errorf("prepare pipelines: %w", err)
	}
	defer counts.Free()
	if err := d.Upload(counts, 0, make([]byte, 16)); err != nil {
		return st, fmt.Errorf("prepare pipelines: %w", err)
	}
	if e.prepared == nil {
		e.prepared = map[*Pipeline]bool{}
	}
	for i, pl := range todo {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		bs := make([]Binding, pl.Kernel.Bindings)
		for j := range bs {
			bs[j] = Binding{Buffer: scratch, Access: ReadWrite}
		}
		prog, err := d.NewProgram(ProgramSpec{Dispatches: []Dispatch{{Pipeline: pl, Bindings: bs,
			Push: make([]byte, pl.Kernel.PushConstantSize), Grid: [3]uint32{1, 1, 1}, Indirect: counts}}})
		if err != nil {
			return st, fmt.Errorf("prepare pipeline %s: %w", pl.Kernel.Name, err)
		}
		err = prog.Run(ctx, nil, nil)
		prog.Close()
		if err != nil {
			return st, fmt.Errorf("prepare pipeline %s: %w", pl.Kernel.Name, err)
		}
		e.prepared[pl] = true
		st.Pipelines++
		if o.Progress != nil {
			o.Progress(i+1, len(todo))
		}
	}
	// Best effort: a cache that cannot be written only costs the next process compile time.
	_ = d.savePipelineCache()
	return st, nil
}
