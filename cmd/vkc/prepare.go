package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/runtime"
)

// preparePipelines makes ready the pipelines a command is about to run (fns; nil: all of the
// plan's), as a step of its own: a counter on a terminal, then one line on w saying how many
// and how long. A driver that compiles shaders at their first dispatch (Mesa's lavapipe) does
// it here, not in the first run, whose time then is the run's; a second process of the same
// plan on the same device and driver finds them in the caches.
func preparePipelines(ctx context.Context, w io.Writer, m *engine.Model, fns []runtime.FunctionLength) error {
	pp := newProgressPrinter(w)
	t0 := time.Now()
	st, err := m.Prepare(ctx, runtime.PrepareOptions{Functions: fns, Progress: func(done, total int) {
		if pp.tty && total > 0 {
			fmt.Fprintf(pp.w, "\rpipelines: %d/%d prepared", done, total)
			pp.open = true
		}
	}})
	if pp.open {
		fmt.Fprint(pp.w, "\r")
		pp.open = false
	}
	if err != nil {
		return fmt.Errorf("prepare pipelines: %w", err)
	}
	took := time.Since(t0)
	fmt.Fprintf(w, "pipelines ready: %d in %v", st.Pipelines+st.Before, took.Round(time.Millisecond))
	if took > 2*time.Second {
		fmt.Fprintf(w, " (the driver compiled them; its caches keep them for the next run)")
	}
	if st.Helped > 0 {
		fmt.Fprintf(w, "; %d compiled first on helper devices, one a processor (VKC_PREPARE_HELPERS)", st.Helped)
	}
	fmt.Fprintln(w)
	return nil
}

// weightsProgress is an engine.Options.LoadProgress that shows a large plan's weights going
// onto the device (progressStep or more: the 8B plans' 5–9 GiB take seconds): a line on w when
// the upload starts, and on a terminal a counter that rewrites itself.
func weightsProgress(w io.Writer) func(done, total uint64) {
	pp := newProgressPrinter(w)
	started := false
	return func(done, total uint64) {
		if total < progressStep {
			return
		}
		if !started {
			started = true
			fmt.Fprintf(w, "weights: uploading %s to the device\n", byteSize(total))
		}
		if pp.tty {
			fmt.Fprintf(w, "\r  %s of %s", byteSize(done), byteSize(total))
			pp.open = done < total
			if done >= total {
				fmt.Fprintln(w)
			}
		}
	}
}
