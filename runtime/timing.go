package runtime

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sort"
	"time"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// MeasureOptions configure Program.Measure. Zero fields take the defaults.
type MeasureOptions struct {
	Warmup    int     // repetitions run first and discarded (default 2)
	Reps      int     // timed repetitions per submission (default 10)
	MaxSpread float64 // (P90-P10)/Median above which a round is noisy (default 0.10)
	MaxRounds int     // submissions tried before the result is declared noisy (default 3)
}

func (o *MeasureOptions) defaults() {
	if o.Warmup <= 0 {
		o.Warmup = 2
	}
	if o.Reps <= 0 {
		o.Reps = 10
	}
	if o.MaxSpread <= 0 {
		o.MaxSpread = 0.10
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = 3
	}
}

// Measurement is the GPU time of one repetition of a program's dispatches (no staging copies).
type Measurement struct {
	Median, Min, Max, P10, P90 time.Duration
	Spread                     float64         // (P90-P10)/Median of the reported round
	Samples                    []time.Duration // the timed repetitions of the reported round
	Rounds                     int             // submissions made
	Noisy                      bool            // no round had Spread <= MaxSpread
	HostTimed                  bool            // no timestamps: submission wall time / Reps
}

func (m Measurement) String() string {
	noisy := ""
	if m.Noisy {
		noisy = " NOISY"
	}
	return fmt.Sprintf("median %v [p10 %v, p90 %v] spread %.1f%% over %d reps%s", m.Median, m.P10, m.P90, 100*m.Spread, len(m.Samples), noisy)
}

func summarize(samples []time.Duration) Measurement {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(f float64) time.Duration { return s[int(f*float64(len(s)-1)+0.5)] }
	m := Measurement{Samples: samples, Min: s[0], Max: s[len(s)-1], Median: q(0.5), P10: q(0.1), P90: q(0.9)}
	if len(s)%2 == 0 {
		m.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if m.Median > 0 {
		m.Spread = float64(m.P90-m.P10) / float64(m.Median)
	}
	return m
}

// Measure times the program's dispatches for the tuner: each submission runs Warmup+Reps
// repetitions back to back (a full barrier between repetitions, a timestamp after each), so
// host overhead never enters the figure. A round whose spread exceeds MaxSpread is repeated, up
// to MaxRounds; the quietest round is reported and Noisy says none was quiet enough. The context
// is checked before every submission.
func (p *Program) Measure(ctx context.Context, o MeasureOptions) (Measurement, error) {
	o.defaults()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Measurement{}, ErrClosed
	}
	d := p.d
	total := o.Warmup + o.Reps
	if p.meas == nil || p.measReps != total {
		if err := p.recordMeasure(total); err != nil {
			return Measurement{}, err
		}
	}
	var best Measurement
	for round := 1; round <= o.MaxRounds; round++ {
		if err := ctx.Err(); err != nil {
			return best, err
		}
		if err := d.alive(); err != nil {
			return best, err
		}
		start := time.Now()
		if err := d.submitWait(p.meas); err != nil {
			return best, err
		}
		wall := time.Since(start)
		var m Measurement
		if p.measQuery == nil {
			samples := make([]time.Duration, o.Reps)
			for i := range samples {
				samples[i] = wall / time.Duration(total)
			}
			m = summarize(samples)
			m.HostTimed = true
		} else {
			ts, err := d.timestamps(p.measQuery, total+1)
			if err != nil {
				return best, err
			}
			samples := make([]time.Duration, o.Reps)
			for i := range samples {
				r := o.Warmup + i
				samples[i] = ts[r+1] - ts[r]
			}
			m = summarize(samples)
		}
		m.Rounds = round
		if round == 1 || m.Spread < best.Spread {
			best = m
		}
		best.Rounds = round
		if m.Spread <= o.MaxSpread || m.HostTimed {
			best.Noisy = false
			return best, nil
		}
		best.Noisy = true
	}
	return best, nil
}

func (p *Program) recordMeasure(reps int) error {
	d := p.d
	p.meas = p.dropShot(p.meas)
	if p.measQuery != nil {
		vk.DestroyQueryPool(d.dev, p.measQuery, nil)
		p.measQuery = nil
	}
	s, err := d.newOneShot()
	if err != nil {
		return err
	}
	p.meas = s
	if d.Info.Caps.Timestamps {
		if p.measQuery, err = d.newQueryPool(reps + 1); err != nil {
			return err
		}
	}
	// Only the dispatches: the staging copies are the run's business, not the kernel's.
	first, n := p.dispatchCmds()
	if err := d.record(s.cb, first, n, p.infos, p.push, p.measQuery, reps+1, reps, true, false); err != nil {
		return err
	}
	p.measReps = reps
	return nil
}

// dispatchCmds returns the recorded dispatches without the staging copies before and after.
func (p *Program) dispatchCmds() (*C.vkc_cmd, int) {
	cmds := unsafe.Slice(p.cmds, p.ncmd)
	lo, hi := 0, p.ncmd
	for lo < hi && cmds[lo].kind == 1 {
		lo++
	}
	for hi > lo && cmds[hi-1].kind == 1 {
		hi--
	}
	if lo == hi {
		return nil, 0
	}
	return &cmds[lo], hi - lo
}

// DispatchTime is the GPU time of one dispatch in a profile.
type DispatchTime struct {
	Index int    // in ProgramSpec.Dispatches
	Name  string // the dispatch's or its pipeline's name
	Time  time.Duration
	// Bytes is the sum of the dispatch's bound ranges: the traffic if the kernel reads or writes
	// each bound byte once (a read-write range counts twice). The kernel may touch less.
	Bytes int64
}

// GBps is Bytes/Time in GB/s: achieved bandwidth when the kernel touches every bound byte once.
func (t DispatchTime) GBps() float64 {
	if t.Time <= 0 {
		return 0
	}
	return float64(t.Bytes) / t.Time.Seconds() / 1e9
}

// Profile runs the program's dispatches once with a barrier and a timestamp after every one and
// returns each dispatch's GPU time in recorded order, and their sum. Serialising removes the
// overlap that the recorded program allows, so the sum exceeds a Run's GPU time by that overlap
// and the barriers.
func (p *Program) Profile(ctx context.Context) ([]DispatchTime, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, 0, ErrClosed
	}
	d := p.d
	if !d.Info.Caps.Timestamps {
		return nil, 0, fmt.Errorf("profile: %s has no timestamp queries on its compute queue", d.Info.Name)
	}
	first, n := p.dispatchCmds()
	if n == 0 {
		return nil, 0, nil
	}
	if p.prof == nil {
		s, err := d.newOneShot()
		if err != nil {
			return nil, 0, err
		}
		p.prof = s
		if p.profQuery == nil {
			if p.profQuery, err = d.newQueryPool(n + 1); err != nil {
				return nil, 0, err
			}
		}
		// A private copy of the commands with a barrier before and a timestamp after each.
		cmds := make([]C.vkc_cmd, n)
		copy(cmds, unsafe.Slice(first, n))
		for i := range cmds {
			cmds[i].barrier_before = 0
			if i > 0 {
				cmds[i].barrier_before = 1
			}
			cmds[i].timestamp_after = C.int32_t(i + 1)
		}
		cm := C.CBytes(unsafe.Slice((*byte)(unsafe.Pointer(&cmds[0])), n*int(unsafe.Sizeof(cmds[0]))))
		err = d.record(s.cb, (*C.vkc_cmd)(cm), n, p.infos, p.push, p.profQuery, n+1, 1, false, false)
		C.free(cm)
		if err != nil {
			return nil, 0, err
		}
	}
	if err := d.submitWait(p.prof); err != nil {
		return nil, 0, err
	}
	ts, err := d.timestamps(p.profQuery, n+1)
	if err != nil {
		return nil, 0, err
	}
	out := make([]DispatchTime, n)
	for k, i := range p.sched.Order {
		ds := p.spec.Dispatches[i]
		name := ds.Name
		if name == "" {
			name = ds.Pipeline.Kernel.Name
		}
		var bytes int64
		for _, b := range ds.Bindings {
			size := b.Size
			if size == 0 {
				size = b.Buffer.Size() - b.Offset
			}
			if b.Access == ReadWrite {
				size *= 2
			}
			bytes += size
		}
		out[k] = DispatchTime{Index: i, Name: name, Time: ts[k+1] - ts[k], Bytes: bytes}
	}
	return out, ts[n], nil
}
