package runtime

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// Helpers is how many helper devices compile pipelines beside the device (see
	// warmHelpers): 0 chooses (on a CPU implementation one for each processor beyond the first,
	// else none), a negative number none.
	Helpers int
}

// PrepareStats says what Prepare did.
type PrepareStats struct {
	Pipelines int // pipelines prepared now
	Before    int // pipelines of the selection prepared by an earlier call
	Helped    int // of Pipelines, those helper devices compiled first
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
	prepare := func(pl *Pipeline) error {
		if err := warmUp(ctx, d, pl, scratch, counts); err != nil {
			return err
		}
		e.prepared[pl] = true
		st.Pipelines++
		return nil
	}
	// The pipelines go out in order to this device and, on a CPU implementation, to helper
	// devices that compile them into the driver's disk cache at the same time (warmHelpers);
	// those are then prepared here from the cache.
	var mu sync.Mutex
	next, done := 0, 0
	take := func() (*Pipeline, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(todo) || ctx.Err() != nil {
			return nil, false
		}
		next++
		return todo[next-1], true
	}
	finished := func() {
		mu.Lock()
		defer mu.Unlock()
		done++
		if o.Progress != nil {
			o.Progress(done, len(todo))
		}
	}
	// helped: the pipelines helpers took, each true where the helper compiled it (false: it
	// failed, and d compiles it from the start).
	helped := map[*Pipeline]bool{}
	stop := d.warmHelpers(ctx, helperCount(d, o, len(todo)), take, func(pl *Pipeline, compiled bool) {
		mu.Lock()
		helped[pl] = compiled
		mu.Unlock()
		finished()
	})
	for {
		pl, ok := take()
		if !ok {
			break
		}
		if err = prepare(pl); err != nil {
			mu.Lock()
			next = len(todo) // the helpers take no more
			mu.Unlock()
			break
		}
		finished()
	}
	st.Helped = stop()
	if err == nil {
		err = ctx.Err()
	}
	t0, n := time.Now(), 0
	for _, pl := range todo {
		if err != nil {
			break
		}
		if compiled, ok := helped[pl]; ok {
			err = prepare(pl)
			if compiled {
				n++
			}
		}
	}
	if n > 0 && err == nil && time.Since(t0) > time.Duration(n)*helpedMax {
		// The helpers' compiles did not reach this device (Mesa's disk cache unwritable, or
		// another driver): the later calls on d compile alone.
		d.noHelpers.Store(true)
	}
	if err != nil {
		return st, err
	}
	// Best effort: a cache that cannot be written only costs the next process compile time.
	_ = d.savePipelineCache()
	return st, nil
}

// warmUp makes d's driver compile pl: one dispatch of no workgroups (counts holds zeros), every
// binding scratch.
func warmUp(ctx context.Context, d *Device, pl *Pipeline, scratch, counts *Buffer) error {
	bs := make([]Binding, pl.Kernel.Bindings)
	for j := range bs {
		bs[j] = Binding{Buffer: scratch, Access: ReadWrite}
	}
	prog, err := d.NewProgram(ProgramSpec{Dispatches: []Dispatch{{Pipeline: pl, Bindings: bs,
		Push: make([]byte, pl.Kernel.PushConstantSize), Grid: [3]uint32{1, 1, 1}, Indirect: counts}}})
	if err != nil {
		return fmt.Errorf("prepare pipeline %s: %w", pl.Kernel.Name, err)
	}
	err = prog.Run(ctx, nil, nil)
	prog.Close()
	if err != nil {
		return fmt.Errorf("prepare pipeline %s: %w", pl.Kernel.Name, err)
	}
	return nil
}

// helperCount is how many helper devices Prepare opens for n pipelines on d: on a CPU
// implementation with the driver's disk cache on, one for each processor beyond the first
// (at most maxHelpers; VKC_PREPARE_HELPERS=k sets k, 0 for none), fewer where the pipelines
// are fewer; PrepareOptions.Helpers when set (negative: none).
func helperCount(d *Device, o PrepareOptions, n int) int {
	h := o.Helpers
	if h == 0 {
		if d.Info.Type != CPU || mesaCacheOff() || d.noHelpers.Load() {
			return 0
		}
		h = min(goruntime.GOMAXPROCS(0)-1, maxHelpers)
		if v := os.Getenv("VKC_PREPARE_HELPERS"); v != "" {
			if k, err := strconv.Atoi(v); err == nil && k >= 0 {
				h = min(k, maxHelpers)
			}
		}
	}
	return max(0, min(h, n-1))
}

// maxHelpers bounds the helper devices of one Prepare: each lavapipe device starts threads of
// its own (one a processor, LP_NUM_THREADS), and a plan's few dozen pipelines gain little past
// eight compiles at a time.
const maxHelpers = 8

// helpedMax is the most a pipeline a helper compiled may take the device to prepare, on
// average, before Prepare stops opening helpers for it: on lavapipe one found in Mesa's disk
// cache takes under a millisecond (78 of Gemma 3's in 48 ms), one compiled from the start
// 0.1–3 s.
const helpedMax = 50 * time.Millisecond

// helperThreads sets LP_NUM_THREADS to 1 while helper devices open, and returns what puts the
// variable back as it was. llvmpipe reads it when a device is made and starts that many
// rasterizer threads for it (by default one a processor): a helper dispatches nothing but empty
// grids, and its compiles run on its queue's own thread, so the default only multiplied the
// process's threads. With 16 threads a device and 8 helpers a vkc run of tinyllama peaked at
// 330 threads (58 without helpers); where a container bounds a machine's tasks, the test suite's
// processes running side by side on many processors could reach the bound, and a thread the Go
// runtime or the driver then cannot start aborts the process. The caller holds envMu for
// writing, so that no instance is made meanwhile elsewhere in the process (it would read the
// variable, racing setenv) and two Prepares do not interleave their changes; the device the
// helpers help compiles nothing until they are open.
func helperThreads() (restore func()) {
	old, had := os.LookupEnv("LP_NUM_THREADS")
	if os.Setenv("LP_NUM_THREADS", "1") != nil {
		return func() {}
	}
	return func() {
		if had {
			os.Setenv("LP_NUM_THREADS", old)
		} else {
			os.Unsetenv("LP_NUM_THREADS")
		}
	}
}

// mesaCacheOff reports whether Mesa's on-disk shader cache is turned off by its environment
// variable, so that helpers' compiles would not reach this device.
func mesaCacheOff() bool {
	switch strings.ToLower(os.Getenv("MESA_SHADER_CACHE_DISABLE")) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// warmHelpers opens n helper devices like d and has each compile pipelines taken from take (a
// pipeline of its own made from the same kernel, dispatched with no workgroups, then closed)
// until take has none, calling helped after each (compiled false where the helper failed). On lavapipe a pipeline is compiled at its
// first dispatch, by the device's queue thread, one at a time; the compiled code goes into
// Mesa's disk cache, where d finds it when it prepares the same pipeline. stop waits for the
// helpers and closes them, returning how many pipelines they compiled. Helpers are best
// effort: one that cannot open or compile stops, and d compiles what it left.
func (d *Device) warmHelpers(ctx context.Context, n int, take func() (*Pipeline, bool), helped func(pl *Pipeline, compiled bool)) (stop func() int) {
	var wg sync.WaitGroup
	var count atomic.Int64
	// The helpers are opened here, one after another, and closed by stop once every helper has
	// finished: never while a device compiles. lavapipe crashed when a helper's instance was
	// created while d compiled a pipeline (SIGSEGV in vkCreateInstance, or the C heap corrupted:
	// about one run in five of lower/tune's tests on the 2-core CI machine, session 20).
	var hs []*Device
	envMu.Lock()
	restore := helperThreads()
	o := d.opts
	o.envHeld = true
	for range n {
		h, err := Open(o)
		if err != nil || h.Info.Fingerprint != d.Info.Fingerprint {
			if h != nil {
				h.Close()
			}
			break
		}
		hs = append(hs, h)
	}
	restore()
	envMu.Unlock()
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scratch, err := h.NewBuffer(256)
			if err != nil {
				return
			}
			counts, err := h.NewBuffer(16)
			if err != nil || h.Upload(counts, 0, make([]byte, 16)) != nil {
				return
			}
			for {
				pl, ok := take()
				if !ok {
					return
				}
				hp, err := h.NewPipeline(pl.Kernel)
				if err == nil {
					err = warmUp(ctx, h, hp, scratch, counts)
					hp.Close()
				}
				if err != nil {
					// d compiles it itself (it prepares every pipeline a helper took, and
					// reports any error then), from the start: not a sign that the cache
					// does not reach d.
					helped(pl, false)
					return
				}
				count.Add(1)
				helped(pl, true)
			}
		}()
	}
	return func() int {
		wg.Wait()
		for _, h := range hs {
			h.Close()
		}
		return int(count.Load())
	}
}
