package runtime

/*
#include <stdlib.h>
#include <string.h>
#include "cvk.h"
*/
import "C"

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// Access says how a dispatch uses a bound range.
type Access uint8

const (
	Read      Access = 1
	Write     Access = 2
	ReadWrite        = Read | Write
)

// Binding binds a byte range of a buffer to the next storage-buffer binding of a dispatch.
type Binding struct {
	Buffer *Buffer
	Offset int64 // a multiple of Caps.MinStorageBufferOffset
	Size   int64 // 0: to the end of the buffer
	Access Access
}

// Dispatch is one kernel launch. A compiled plan's dispatch list maps onto it one to one.
type Dispatch struct {
	Name     string // for profiles and errors; "" uses the pipeline's name
	Pipeline *Pipeline
	Bindings []Binding // one per binding of the pipeline's kernel, in binding order
	Push     []byte    // exactly Kernel.PushConstantSize bytes
	Grid     [3]uint32 // workgroup counts, each at least 1
	// Indirect, when set, issues the dispatch with vkCmdDispatchIndirect: its group counts are
	// the three u32 at IndirectOffset (a multiple of 4) in Indirect, read when the dispatch runs,
	// so a caller changes them between runs without re-recording (by making them one of the
	// program's Inputs). Grid is then the largest counts the caller will write; the runtime
	// checks it, not the buffer's values, which must stay within it and each be at least 1.
	Indirect       *Buffer
	IndirectOffset int64
	// BarrierBefore makes the dispatch wait for every earlier one even without a hazard (a
	// plan's explicit barrier, or work the analysis cannot see, such as indirect accesses).
	BarrierBefore bool
}

// Region is a byte range of a buffer, for program inputs and outputs.
type Region struct {
	Buffer       *Buffer
	Offset, Size int64
}

// ProgramSpec describes a program: dispatches in program order and the regions Run writes and
// reads.
type ProgramSpec struct {
	Dispatches []Dispatch
	Inputs     []Region // Run copies inputs[i] into Inputs[i] before the dispatches
	Outputs    []Region // and Outputs[i] into outputs[i] after them
	// KeepOrder records dispatches in program order (barriers still only where a hazard is).
	KeepOrder bool
	// BarrierAll puts a barrier between every two dispatches: a baseline for benchmarks.
	BarrierAll bool
	// RangeBarriers makes each compute-to-compute barrier a list of buffer memory barriers over
	// the byte ranges the interval before it wrote, instead of one global memory barrier (up to
	// 64 ranges; more, or none, fall back to the global barrier). The same dependencies, for the
	// study of what a barrier costs (BenchmarkRangeBarriers); plans use global barriers.
	RangeBarriers bool
}

// Stats counts what a program records per run.
type Stats struct {
	Dispatches int
	Barriers   int // compute-to-compute barriers between dispatch intervals
	Intervals  int
	Copies     int // staging copies (inputs and outputs on devices without zero-copy)
}

// Program is a dispatch list analysed for hazards and recorded once into a reusable command
// buffer. Run executes it; Measure and Profile time it. A Program is not for concurrent use.
type Program struct {
	d     *Device
	spec  ProgramSpec
	sched Schedule
	stats Stats

	cmds  *C.vkc_cmd // the recorded commands, in recorded order (C memory)
	ncmd  int
	infos *C.vkc_buffer_info
	push  *C.uint8_t
	// pos[i]: index in cmds of spec dispatch i
	pos []int

	descPool vk.DescriptorPool
	staging  *Buffer
	ioOff    []uint64 // offset of each input, then each output, in staging

	run       *oneShot
	runQuery  vk.QueryPool
	dirty     bool
	meas      *oneShot
	measQuery vk.QueryPool
	measReps  int
	prof      *oneShot
	profQuery vk.QueryPool

	mu     sync.Mutex
	closed bool
}

// NewProgram validates spec, analyses hazards, allocates descriptors (when the device has no push
// descriptors) and staging, and records the command buffer.
func (d *Device) NewProgram(spec ProgramSpec) (*Program, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	p := &Program{d: d, spec: spec}
	uses, err := p.validate()
	if err != nil {
		return nil, err
	}
	if spec.BarrierAll {
		p.sched = barrierAll(len(spec.Dispatches))
	} else {
		fences := make([]bool, len(spec.Dispatches))
		for i, ds := range spec.Dispatches {
			fences[i] = ds.BarrierBefore
		}
		p.sched = AnalyzeFenced(uses, fences, !spec.KeepOrder)
	}
	if err := p.build(); err != nil {
		p.Close()
		return nil, err
	}
	d.track(p)
	return p, nil
}

func barrierAll(n int) Schedule {
	s := Schedule{Interval: make([]int, n)}
	for i := 0; i < n; i++ {
		s.Interval[i] = i
		s.Intervals = append(s.Intervals, []int{i})
		s.Order = append(s.Order, i)
	}
	if n > 0 {
		s.Barriers = n - 1
	}
	return s
}

func (p *Program) validate() ([][]Use, error) {
	d := p.d
	caps := &d.Info.Caps
	uses := make([][]Use, len(p.spec.Dispatches))
	for i, ds := range p.spec.Dispatches {
		name := ds.Name
		if ds.Pipeline != nil && name == "" {
			name = ds.Pipeline.Kernel.Name
		}
		where := fmt.Sprintf("dispatch %d (%s)", i, name)
		if ds.Pipeline == nil || ds.Pipeline.closed || ds.Pipeline.d != d {
			return nil, fmt.Errorf("%s: no open pipeline of this device", where)
		}
		k := ds.Pipeline.Kernel
		if len(ds.Bindings) != k.Bindings {
			return nil, fmt.Errorf("%s: %d bindings, kernel has %d", where, len(ds.Bindings), k.Bindings)
		}
		if len(ds.Push) != k.PushConstantSize {
			return nil, fmt.Errorf("%s: %d push-constant bytes, kernel has %d", where, len(ds.Push), k.PushConstantSize)
		}
		for a := 0; a < 3; a++ {
			if ds.Grid[a] == 0 || ds.Grid[a] > caps.MaxWorkgroupCount[a] {
				return nil, fmt.Errorf("%s: grid %v: dimension %d must be in [1, %d] (maxComputeWorkGroupCount)", where, ds.Grid, a, caps.MaxWorkgroupCount[a])
			}
		}
		if b := ds.Indirect; b != nil {
			if b.freed || b.d != d {
				return nil, fmt.Errorf("%s: indirect group counts: no live buffer of this device", where)
			}
			if ds.IndirectOffset < 0 || ds.IndirectOffset%4 != 0 || ds.IndirectOffset+12 > b.Size() {
				return nil, fmt.Errorf("%s: indirect group counts at byte %d: want a multiple of 4 with 12 bytes inside the %d-byte buffer", where, ds.IndirectOffset, b.Size())
			}
		}
		for j, b := range ds.Bindings {
			if b.Buffer == nil || b.Buffer.freed || b.Buffer.d != d {
				return nil, fmt.Errorf("%s: binding %d: no live buffer of this device", where, j)
			}
			size := b.Size
			if size == 0 {
				size = b.Buffer.Size() - b.Offset
			}
			if b.Offset < 0 || size <= 0 || b.Offset+size > b.Buffer.Size() {
				return nil, fmt.Errorf("%s: binding %d: range [%d, %d) outside buffer of %d bytes", where, j, b.Offset, b.Offset+size, b.Buffer.Size())
			}
			if uint64(b.Offset)%caps.MinStorageBufferOffset != 0 {
				return nil, fmt.Errorf("%s: binding %d: offset %d not a multiple of minStorageBufferOffsetAlignment %d", where, j, b.Offset, caps.MinStorageBufferOffset)
			}
			if uint64(size) > uint64(caps.MaxStorageBufferRange) {
				return nil, fmt.Errorf("%s: binding %d: %w", where, j, limitError("range", "maxStorageBufferRange", uint64(size), uint64(caps.MaxStorageBufferRange)))
			}
			if b.Access&ReadWrite == 0 {
				return nil, fmt.Errorf("%s: binding %d: access not set (Read, Write or ReadWrite)", where, j)
			}
			uses[i] = append(uses[i], Use{Mem: b.Buffer.id(), Offset: b.Buffer.off + uint64(b.Offset), Size: uint64(size), Write: b.Access&Write != 0})
		}
	}
	for _, list := range [][]Region{p.spec.Inputs, p.spec.Outputs} {
		for i, r := range list {
			if r.Buffer == nil || r.Buffer.freed || r.Buffer.d != d {
				return nil, fmt.Errorf("input/output %d: no live buffer of this device", i)
			}
			if r.Offset < 0 || r.Size <= 0 || r.Offset+r.Size > r.Buffer.Size() {
				return nil, fmt.Errorf("input/output %d: range [%d, %d) outside buffer of %d bytes", i, r.Offset, r.Offset+r.Size, r.Buffer.Size())
			}
		}
	}
	return uses, nil
}

func (p *Program) build() error {
	d := p.d
	disp := p.spec.Dispatches
	p.stats = Stats{Dispatches: len(disp), Barriers: p.sched.Barriers, Intervals: len(p.sched.Intervals)}

	// Staging for inputs and outputs that are not directly mapped.
	var stagingSize uint64
	needCopy := func(r Region) bool { return r.Buffer.Bytes() == nil }
	for _, r := range append(append([]Region(nil), p.spec.Inputs...), p.spec.Outputs...) {
		p.ioOff = append(p.ioOff, stagingSize)
		if needCopy(r) {
			stagingSize += (uint64(r.Size) + 255) &^ 255
		}
	}
	if stagingSize > 0 {
		s, err := d.NewStagingBuffer(int64(stagingSize))
		if err != nil {
			return err
		}
		p.staging = s
	}
	var copyIn, copyOut []C.vkc_cmd
	for i, r := range p.spec.Inputs {
		if needCopy(r) {
			copyIn = append(copyIn, C.vkc_cmd{kind: 1, timestamp_after: -1,
				src: handle(unsafe.Pointer(p.staging.blk.buf)), src_off: C.uint64_t(p.staging.off + p.ioOff[i]),
				dst: handle(unsafe.Pointer(r.Buffer.blk.buf)), dst_off: C.uint64_t(r.Buffer.off + uint64(r.Offset)), size: C.uint64_t(r.Size)})
		}
	}
	for i, r := range p.spec.Outputs {
		if needCopy(r) {
			copyOut = append(copyOut, C.vkc_cmd{kind: 1, timestamp_after: -1,
				src: handle(unsafe.Pointer(r.Buffer.blk.buf)), src_off: C.uint64_t(r.Buffer.off + uint64(r.Offset)),
				dst: handle(unsafe.Pointer(p.staging.blk.buf)), dst_off: C.uint64_t(p.staging.off + p.ioOff[len(p.spec.Inputs)+i]), size: C.uint64_t(r.Size)})
		}
	}
	if len(copyOut) > 0 {
		copyOut[0].barrier_before = 4
	}
	p.stats.Copies = len(copyIn) + len(copyOut)

	// Descriptor sets, allocated once, when there are no push descriptors.
	var sets []vk.DescriptorSet
	if !d.push {
		var err error
		if sets, err = p.allocSets(); err != nil {
			return err
		}
	}

	// C arrays: commands, buffer infos (the bindings, then with RangeBarriers the ranges each
	// barrier covers), push bytes.
	nbind, npush := 0, 0
	for _, ds := range disp {
		nbind += len(ds.Bindings)
		npush += len(ds.Push)
		if p.spec.RangeBarriers {
			for _, b := range ds.Bindings {
				if b.Access&Write != 0 {
					nbind++
				}
			}
		}
	}
	nbound := 0
	for _, ds := range disp {
		nbound += len(ds.Bindings)
	}
	ri := nbound                    // next free range slot in infos
	var written []C.vkc_buffer_info // the ranges written since the last barrier
	p.ncmd = len(copyIn) + len(disp) + len(copyOut)
	p.cmds = (*C.vkc_cmd)(C.calloc(C.size_t(max(p.ncmd, 1)), C.size_t(unsafe.Sizeof(C.vkc_cmd{}))))
	p.infos = (*C.vkc_buffer_info)(C.calloc(C.size_t(max(nbind, 1)), C.size_t(unsafe.Sizeof(C.vkc_buffer_info{}))))
	p.push = (*C.uint8_t)(C.calloc(C.size_t(max(npush, 1)), 1))
	if p.cmds == nil || p.infos == nil || p.push == nil {
		return fmt.Errorf("program: %w (host)", ErrOutOfDeviceMemory)
	}
	cmds := unsafe.Slice(p.cmds, p.ncmd)
	infos := unsafe.Slice(p.infos, max(nbind, 1))
	push := unsafe.Slice((*byte)(unsafe.Pointer(p.push)), max(npush, 1))
	k := copy(cmds, copyIn)
	bi, pi := 0, 0
	p.pos = make([]int, len(disp))
	for n, i := range p.sched.Order {
		ds := disp[i]
		c := C.vkc_cmd{
			kind:            0,
			pipeline:        handle(unsafe.Pointer(ds.Pipeline.pipeline)),
			layout:          handle(unsafe.Pointer(ds.Pipeline.layout)),
			nbind:           C.uint32_t(len(ds.Bindings)),
			bind_first:      C.uint32_t(bi),
			push_size:       C.uint32_t(len(ds.Push)),
			push_first:      C.uint32_t(pi),
			gx:              C.uint32_t(ds.Grid[0]),
			gy:              C.uint32_t(ds.Grid[1]),
			gz:              C.uint32_t(ds.Grid[2]),
			timestamp_after: -1,
		}
		if sets != nil {
			c.set = handle(unsafe.Pointer(sets[i]))
		}
		if b := ds.Indirect; b != nil {
			c.kind = 2
			c.src = handle(unsafe.Pointer(b.blk.buf))
			c.src_off = C.uint64_t(b.off + uint64(ds.IndirectOffset))
		}
		if n == 0 && len(copyIn) > 0 {
			c.barrier_before |= 2
		}
		if n > 0 && p.sched.Interval[i] != p.sched.Interval[p.sched.Order[n-1]] {
			if p.spec.RangeBarriers && len(written) > 0 {
				c.barrier_before |= 32
				c.range_first, c.nrange = C.uint32_t(ri), C.uint32_t(len(written))
				ri += copy(infos[ri:], written)
			} else {
				c.barrier_before |= 1
			}
			written = written[:0]
		}
		for _, b := range ds.Bindings {
			size := b.Size
			if size == 0 {
				size = b.Buffer.Size() - b.Offset
			}
			infos[bi] = C.vkc_buffer_info{buffer: handle(unsafe.Pointer(b.Buffer.blk.buf)), offset: C.uint64_t(b.Buffer.off + uint64(b.Offset)), _range: C.uint64_t(size)}
			if b.Access&Write != 0 {
				written = append(written, infos[bi])
			}
			bi++
		}
		copy(push[pi:], ds.Push)
		pi += len(ds.Push)
		p.pos[i] = k
		cmds[k] = c
		k++
	}
	copy(cmds[k:], copyOut)

	var err error
	if p.run, err = d.newOneShot(); err != nil {
		return err
	}
	if d.Info.Caps.Timestamps {
		if p.runQuery, err = d.newQueryPool(2); err != nil {
			return err
		}
	}
	return p.record()
}

func (p *Program) allocSets() ([]vk.DescriptorSet, error) {
	d := p.d
	disp := p.spec.Dispatches
	total := 0
	var layouts []vk.DescriptorSetLayout
	for _, ds := range disp {
		total += len(ds.Bindings)
		layouts = append(layouts, ds.Pipeline.setl)
	}
	if len(disp) == 0 {
		return nil, nil
	}
	pci := &vk.DescriptorPoolCreateInfo{
		SType:         vk.StructureTypeDescriptorPoolCreateInfo,
		MaxSets:       uint32(len(disp)),
		PoolSizeCount: 1,
		PPoolSizes:    []vk.DescriptorPoolSize{{Type: vk.DescriptorTypeStorageBuffer, DescriptorCount: uint32(max(total, 1))}},
	}
	var pool vk.DescriptorPool
	r := vk.CreateDescriptorPool(d.dev, pci, nil, &pool)
	p.descPool = pool
	pci.Free()
	if err := check("vkCreateDescriptorPool", r); err != nil {
		return nil, err
	}
	sets := make([]vk.DescriptorSet, len(disp))
	ai := &vk.DescriptorSetAllocateInfo{
		SType:              vk.StructureTypeDescriptorSetAllocateInfo,
		DescriptorPool:     p.descPool,
		DescriptorSetCount: uint32(len(disp)),
		PSetLayouts:        layouts,
	}
	r = vk.AllocateDescriptorSets(d.dev, ai, &sets[0])
	ai.Free()
	if err := check("vkAllocateDescriptorSets", r); err != nil {
		return nil, err
	}
	var writes []vk.WriteDescriptorSet
	for i, ds := range disp {
		for j, b := range ds.Bindings {
			size := b.Size
			if size == 0 {
				size = b.Buffer.Size() - b.Offset
			}
			writes = append(writes, vk.WriteDescriptorSet{
				SType:           vk.StructureTypeWriteDescriptorSet,
				DstSet:          sets[i],
				DstBinding:      uint32(j),
				DescriptorCount: 1,
				DescriptorType:  vk.DescriptorTypeStorageBuffer,
				PBufferInfo: []vk.DescriptorBufferInfo{{
					Buffer: b.Buffer.blk.buf,
					Offset: vk.DeviceSize(b.Buffer.off + uint64(b.Offset)),
					Range:  vk.DeviceSize(size),
				}},
			})
		}
	}
	if len(writes) > 0 {
		withoutGC(func() { vk.UpdateDescriptorSets(d.dev, uint32(len(writes)), writes, 0, nil) })
	}
	return sets, nil
}

func (d *Device) newQueryPool(n int) (vk.QueryPool, error) {
	var q vk.QueryPool
	ci := &vk.QueryPoolCreateInfo{
		SType:      vk.StructureTypeQueryPoolCreateInfo,
		QueryType:  vk.QueryTypeTimestamp,
		QueryCount: uint32(n),
	}
	r := vk.CreateQueryPool(d.dev, ci, nil, &q)
	ci.Free()
	return q, check("vkCreateQueryPool", r)
}

// record (re-)records the run command buffer.
func (p *Program) record() error {
	if err := p.d.settle(p.run); err != nil {
		return err
	}
	if err := p.d.record(p.run.cb, p.cmds, p.ncmd, p.infos, p.push, p.runQuery, 2, 1, true, true); err != nil {
		return err
	}
	p.dirty = false
	return nil
}

// Stats reports the dispatch, barrier and copy counts of one run.
func (p *Program) Stats() Stats { return p.stats }

// Schedule returns the hazard analysis the program was recorded with.
func (p *Program) Schedule() Schedule { return p.sched }

// SetPush overwrites push-constant bytes of dispatch i (index in ProgramSpec.Dispatches) from
// offset on. This is how run-time scalars (a decode position) reach kernels: push constants live
// in the recorded command buffer, so the next Run re-records it when the bytes changed (no
// allocation; about 0.4-0.7 µs per dispatch on the H200, see BenchmarkRecord).
func (p *Program) SetPush(i, offset int, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if i < 0 || i >= len(p.spec.Dispatches) {
		return fmt.Errorf("SetPush: no dispatch %d", i)
	}
	ds := p.spec.Dispatches[i]
	if offset < 0 || offset+len(data) > len(ds.Push) {
		return fmt.Errorf("SetPush: dispatch %d: bytes [%d, %d) outside its %d push-constant bytes", i, offset, offset+len(data), len(ds.Push))
	}
	c := unsafe.Slice(p.cmds, p.ncmd)[p.pos[i]]
	dst := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p.push), int(c.push_first)+offset)), len(data))
	if bytes.Equal(dst, data) {
		return nil // unchanged: keep the recorded command buffers
	}
	copy(dst, data)
	p.dirty = true
	p.meas = p.dropShot(p.meas)
	p.prof = p.dropShot(p.prof)
	return nil
}

// Rerecord records the command buffer again. Run does it when needed; benchmarks call it to
// price re-recording against reuse.
func (p *Program) Rerecord() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	return p.record()
}

// Run writes inputs[i] into spec.Inputs[i], submits the recorded command buffer, waits for it
// and reads spec.Outputs[i] into outputs[i]. A slice may be shorter than its region: it is then
// the region's first bytes (the rest of an input region keeps what it held; the rest of an output
// is not read back), which is how a run at a run-time length passes and returns fewer rows. A context
// already done returns its error without submitting; once submitted, Run waits for the GPU
// (bounded by Options.SubmitTimeout).
func (p *Program) Run(ctx context.Context, inputs, outputs [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.d.alive(); err != nil {
		return err
	}
	if len(inputs) != len(p.spec.Inputs) || len(outputs) != len(p.spec.Outputs) {
		return fmt.Errorf("run: %d inputs and %d outputs given, program has %d and %d", len(inputs), len(outputs), len(p.spec.Inputs), len(p.spec.Outputs))
	}
	for i, r := range p.spec.Inputs {
		if int64(len(inputs[i])) > r.Size {
			return fmt.Errorf("run: input %d: %d bytes, region has %d", i, len(inputs[i]), r.Size)
		}
	}
	for i, r := range p.spec.Outputs {
		if int64(len(outputs[i])) > r.Size {
			return fmt.Errorf("run: output %d: %d bytes, region has %d", i, len(outputs[i]), r.Size)
		}
	}
	if p.dirty {
		if err := p.record(); err != nil {
			return err
		}
	}
	if err := p.d.settle(p.run); err != nil {
		return err
	}
	for i, r := range p.spec.Inputs {
		copy(p.ioBytes(r, p.ioOff[i]), inputs[i])
	}
	if err := p.d.submitWait(p.run); err != nil {
		return err
	}
	for i, r := range p.spec.Outputs {
		copy(outputs[i], p.ioBytes(r, p.ioOff[len(p.spec.Inputs)+i]))
	}
	return nil
}

// ioBytes is the host view of an input or output: the mapped region itself, or its staging slot.
func (p *Program) ioBytes(r Region, stagingOff uint64) []byte {
	if m := r.Buffer.Bytes(); m != nil {
		return m[r.Offset : r.Offset+r.Size]
	}
	return p.staging.Bytes()[stagingOff : stagingOff+uint64(r.Size)]
}

// LastGPUTime is the GPU time of the last Run (from the first to the last command, copies
// included), or 0 when the device has no timestamps.
func (p *Program) LastGPUTime() (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runQuery == nil || p.closed {
		return 0, nil
	}
	ts, err := p.d.timestamps(p.runQuery, 2)
	if err != nil {
		return 0, err
	}
	return ts[1] - ts[0], nil
}

// timestamps reads n timestamps and converts them to durations since an arbitrary origin.
func (d *Device) timestamps(q vk.QueryPool, n int) ([]time.Duration, error) {
	raw := make([]uint64, n)
	r := C.vkc_timestamps(d.c, handle(unsafe.Pointer(q)), 0, C.uint32_t(n), (*C.uint64_t)(unsafe.Pointer(&raw[0])))
	if err := check("vkGetQueryPoolResults", vk.Result(r)); err != nil {
		return nil, d.note(err)
	}
	mask := uint64(1)<<d.Info.Caps.TimestampValidBits - 1
	if d.Info.Caps.TimestampValidBits >= 64 {
		mask = ^uint64(0)
	}
	out := make([]time.Duration, n)
	for i := range raw {
		// Differences modulo the valid bits survive a counter wrap between two timestamps.
		ticks := (raw[i] - raw[0]) & mask
		out[i] = time.Duration(float64(ticks) * d.Info.Caps.TimestampPeriod)
	}
	return out, nil
}

func (p *Program) dropShot(s *oneShot) *oneShot {
	if s != nil {
		p.d.settleForFree(s)
		s.destroy(p.d)
	}
	return nil
}

// Close waits for the program's work and frees its command buffers, query pools, descriptor pool
// and staging. Buffers and pipelines it uses stay open.
func (p *Program) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.d.closed.Load() {
		return // Device.Close destroyed it
	}
	p.d.untrack(p)
	p.destroy()
}

func (p *Program) destroy() {
	d := p.d
	for _, s := range []*oneShot{p.run, p.meas, p.prof} {
		if s != nil {
			d.settleForFree(s)
			s.destroy(d)
		}
	}
	p.run, p.meas, p.prof = nil, nil, nil
	for _, q := range []vk.QueryPool{p.runQuery, p.measQuery, p.profQuery} {
		if q != nil {
			vk.DestroyQueryPool(d.dev, q, nil)
		}
	}
	p.runQuery, p.measQuery, p.profQuery = nil, nil, nil
	if p.descPool != nil {
		vk.DestroyDescriptorPool(d.dev, p.descPool, nil)
		p.descPool = nil
	}
	p.staging.Free()
	p.staging = nil
	C.free(unsafe.Pointer(p.cmds))
	C.free(unsafe.Pointer(p.infos))
	C.free(unsafe.Pointer(p.push))
	p.cmds, p.infos, p.push = nil, nil, nil
}
