package runtime

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	vk "github.com/goki/vulkan"

	"github.com/vkc-project/vkc/internal/par"
)

// Memory layout: device buffers are sub-allocated from large blocks (Options.BlockSize), each one
// VkDeviceMemory bound to one VkBuffer that covers it; a Buffer is a byte range of a block. So an
// allocation costs no Vulkan call once its block exists, and descriptors name (block buffer,
// offset, range). Requests larger than a block get a block of their own. First fit over a sorted
// free list; frees coalesce. Staging buffers (host-visible, coherent) come from a second pool.

const (
	poolDevice  = 0
	poolStaging = 1

	defaultBlockSize = 256 << 20
	stagingChunk     = 64 << 20 // largest staging buffer Upload/Download use
)

type span struct{ off, size uint64 }

type block struct {
	id     uint64
	mem    vk.DeviceMemory
	buf    vk.Buffer
	size   uint64
	ptr    unsafe.Pointer // mapped, when host-visible
	free   []span         // sorted by offset, coalesced
	used   uint64
	single bool // dedicated to one large request; freed when that is
}

type pool struct {
	kind      int
	mt        uint32
	heap      int
	heapSize  uint64
	mapped    bool
	blockSize uint64
	align     uint64
	blocks    []*block
}

// Buffer is a range of device (or staging) memory. Offsets given to methods are relative to it.
type Buffer struct {
	d     *Device
	blk   *block
	off   uint64 // in the block
	size  uint64
	pool  int
	freed bool
}

// Size is the buffer's size in bytes (as requested).
func (b *Buffer) Size() int64 { return int64(b.size) }

// Bytes returns the buffer's memory when it is mapped (staging buffers, and device buffers on a
// zero-copy device), else nil. Reads see what the GPU wrote once the run that wrote it returned.
func (b *Buffer) Bytes() []byte {
	if b.blk == nil || b.blk.ptr == nil || b.freed {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.blk.ptr, b.off)), b.size)
}

// id identifies the memory for hazard analysis: ranges of the same block can overlap.
func (b *Buffer) id() uint64 { return b.blk.id }

func (d *Device) initMemory() error {
	// Probe which memory types a storage buffer accepts.
	probe, err := d.createVkBuffer(256)
	if err != nil {
		return err
	}
	var req vk.MemoryRequirements
	vk.GetBufferMemoryRequirements(d.dev, probe, &req)
	req.Deref()
	vk.DestroyBuffer(d.dev, probe, nil)
	bits := req.MemoryTypeBits
	types := d.Info.Memory.Types
	pick := func(ok func(t MemoryType) bool) int {
		for i, t := range types {
			if bits&(1<<i) != 0 && ok(t) {
				return i
			}
		}
		return -1
	}
	dev := -1
	integrated := d.Info.Type == Integrated || d.Info.Type == CPU
	if integrated && !d.opts.NoZeroCopy {
		dev = pick(func(t MemoryType) bool { return t.DeviceLocal && t.HostVisible && t.HostCoherent })
		d.zeroCopy = dev >= 0
	}
	if dev < 0 {
		dev = pick(func(t MemoryType) bool { return t.DeviceLocal })
	}
	if dev < 0 {
		dev = pick(func(t MemoryType) bool { return true })
	}
	stage := pick(func(t MemoryType) bool { return t.HostVisible && t.HostCoherent && t.HostCached })
	if stage < 0 {
		stage = pick(func(t MemoryType) bool { return t.HostVisible && t.HostCoherent })
	}
	if dev < 0 || stage < 0 {
		return fmt.Errorf("no suitable memory type for storage buffers (type bits %#x)", bits)
	}
	align := uint64(256)
	if a := d.Info.Caps.MinStorageBufferOffset; a > align {
		align = a
	}
	bs := uint64(defaultBlockSize)
	if d.opts.BlockSize > 0 {
		bs = uint64(d.opts.BlockSize)
	}
	if m := d.Info.Caps.MaxMemoryAllocationSize; m > 0 && bs > m {
		bs = m
	}
	mk := func(kind, mt int, mapped bool) *pool {
		h := types[mt].Heap
		p := &pool{kind: kind, mt: uint32(mt), heap: h, heapSize: d.Info.Memory.Heaps[h].Size, mapped: mapped, blockSize: bs, align: align}
		if p.blockSize > p.heapSize/4 && p.heapSize > 0 {
			p.blockSize = p.heapSize / 4
		}
		return p
	}
	d.pools[poolDevice] = mk(poolDevice, dev, d.zeroCopy)
	d.pools[poolStaging] = mk(poolStaging, stage, true)
	if stagingChunk < d.pools[poolStaging].blockSize {
		d.pools[poolStaging].blockSize = stagingChunk
	}
	return nil
}

func (d *Device) createVkBuffer(size uint64) (vk.Buffer, error) {
	var buf vk.Buffer
	ci := &vk.BufferCreateInfo{
		SType:       vk.StructureTypeBufferCreateInfo,
		Size:        vk.DeviceSize(size),
		Usage:       vk.BufferUsageFlags(vk.BufferUsageStorageBufferBit | vk.BufferUsageTransferSrcBit | vk.BufferUsageTransferDstBit | vk.BufferUsageIndirectBufferBit),
		SharingMode: vk.SharingModeExclusive,
	}
	r := vk.CreateBuffer(d.dev, ci, nil, &buf)
	ci.Free()
	return buf, check("vkCreateBuffer", r)
}

func (d *Device) newBlock(p *pool, size uint64, single bool) (*block, error) {
	if m := d.Info.Caps.MaxMemoryAllocationSize; m > 0 && size > m {
		return nil, limitError("buffer", "maxMemoryAllocationSize", size, m)
	}
	if p.heapSize > 0 && size > p.heapSize {
		return nil, fmt.Errorf("buffer of %d bytes: memory heap %d has %d bytes: %w", size, p.heap, p.heapSize, ErrOutOfDeviceMemory)
	}
	buf, err := d.createVkBuffer(size)
	if err != nil {
		return nil, err
	}
	var req vk.MemoryRequirements
	vk.GetBufferMemoryRequirements(d.dev, buf, &req)
	req.Deref()
	var mem vk.DeviceMemory
	ai := &vk.MemoryAllocateInfo{
		SType:           vk.StructureTypeMemoryAllocateInfo,
		AllocationSize:  req.Size,
		MemoryTypeIndex: p.mt,
	}
	r := vk.AllocateMemory(d.dev, ai, nil, &mem)
	ai.Free()
	if err := check("vkAllocateMemory", r); err != nil {
		vk.DestroyBuffer(d.dev, buf, nil)
		return nil, fmt.Errorf("allocate %d MiB block in heap %d (%d MiB): %w", size>>20, p.heap, p.heapSize>>20, err)
	}
	if err := check("vkBindBufferMemory", vk.BindBufferMemory(d.dev, buf, mem, 0)); err != nil {
		vk.DestroyBuffer(d.dev, buf, nil)
		vk.FreeMemory(d.dev, mem, nil)
		return nil, err
	}
	b := &block{id: d.nextID.Add(1), mem: mem, buf: buf, size: size, free: []span{{0, size}}, single: single}
	if p.mapped {
		var ptr unsafe.Pointer
		if err := check("vkMapMemory", vk.MapMemory(d.dev, mem, 0, vk.DeviceSize(vk.WholeSize), 0, &ptr)); err != nil {
			d.destroyBlock(b)
			return nil, err
		}
		b.ptr = ptr
	}
	p.blocks = append(p.blocks, b)
	return b, nil
}

func (d *Device) destroyBlock(b *block) {
	if b.ptr != nil {
		vk.UnmapMemory(d.dev, b.mem)
	}
	vk.DestroyBuffer(d.dev, b.buf, nil)
	vk.FreeMemory(d.dev, b.mem, nil)
}

func (b *block) take(size, align uint64) (uint64, bool) {
	for i, s := range b.free {
		start := (s.off + align - 1) / align * align
		if start+size > s.off+s.size {
			continue
		}
		// Split s into [s.off, start) and [start+size, end).
		end := s.off + s.size
		var repl []span
		if start > s.off {
			repl = append(repl, span{s.off, start - s.off})
		}
		if start+size < end {
			repl = append(repl, span{start + size, end - start - size})
		}
		b.free = append(b.free[:i], append(repl, b.free[i+1:]...)...)
		b.used += size
		return start, true
	}
	return 0, false
}

func (b *block) give(off, size uint64) {
	b.used -= size
	i := 0
	for i < len(b.free) && b.free[i].off < off {
		i++
	}
	b.free = append(b.free, span{})
	copy(b.free[i+1:], b.free[i:])
	b.free[i] = span{off, size}
	// Coalesce with the neighbours.
	if i+1 < len(b.free) && b.free[i].off+b.free[i].size == b.free[i+1].off {
		b.free[i].size += b.free[i+1].size
		b.free = append(b.free[:i+1], b.free[i+2:]...)
	}
	if i > 0 && b.free[i-1].off+b.free[i-1].size == b.free[i].off {
		b.free[i-1].size += b.free[i].size
		b.free = append(b.free[:i], b.free[i+1:]...)
	}
}

func (d *Device) alloc(kind int, size int64) (*Buffer, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("buffer size %d: must be positive", size)
	}
	p := d.pools[kind]
	n := (uint64(size) + p.align - 1) / p.align * p.align
	d.memMu.Lock()
	defer d.memMu.Unlock()
	for _, b := range p.blocks {
		if b.single {
			continue
		}
		if off, ok := b.take(n, p.align); ok {
			return &Buffer{d: d, blk: b, off: off, size: uint64(size), pool: kind}, nil
		}
	}
	single := n > p.blockSize
	bsize := p.blockSize
	if single {
		bsize = n
	}
	b, err := d.newBlock(p, bsize, single)
	if err != nil {
		return nil, err
	}
	off, _ := b.take(n, p.align)
	return &Buffer{d: d, blk: b, off: off, size: uint64(size), pool: kind}, nil
}

// NewBuffer allocates size bytes of device memory (device-local; host-visible too on zero-copy
// devices). The contents are undefined until written.
func (d *Device) NewBuffer(size int64) (*Buffer, error) { return d.alloc(poolDevice, size) }

// NewStagingBuffer allocates size bytes of host-visible memory; Bytes gives access to it.
func (d *Device) NewStagingBuffer(size int64) (*Buffer, error) { return d.alloc(poolStaging, size) }

// Free returns the buffer's range to its block. Using the buffer afterwards is an error; the
// caller must not free a buffer that a running program uses.
func (b *Buffer) Free() {
	if b == nil || b.freed || b.d.closed.Load() {
		return
	}
	d := b.d
	d.memMu.Lock()
	defer d.memMu.Unlock()
	b.freed = true
	p := d.pools[b.pool]
	n := (b.size + p.align - 1) / p.align * p.align
	b.blk.give(b.off, n)
	if b.blk.single {
		for i, x := range p.blocks {
			if x == b.blk {
				p.blocks = append(p.blocks[:i], p.blocks[i+1:]...)
				break
			}
		}
		d.destroyBlock(b.blk)
	}
}

func (d *Device) freeMemory() {
	if d.staging != nil {
		d.staging = nil
	}
	for _, p := range d.pools {
		if p == nil {
			continue
		}
		for _, b := range p.blocks {
			d.destroyBlock(b)
		}
		p.blocks = nil
	}
}

// MemoryStats are the bytes allocated from Vulkan (blocks) and in use by buffers, per pool.
type MemoryStats struct {
	DeviceAllocated, DeviceUsed   uint64
	StagingAllocated, StagingUsed uint64
}

// MemoryUsage reports the memory pools' sizes and use.
func (d *Device) MemoryUsage() MemoryStats {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	var s MemoryStats
	for _, b := range d.pools[poolDevice].blocks {
		s.DeviceAllocated += b.size
		s.DeviceUsed += b.used
	}
	for _, b := range d.pools[poolStaging].blocks {
		s.StagingAllocated += b.size
		s.StagingUsed += b.used
	}
	return s
}

// Budget refreshes the heap budgets and usage (VK_EXT_memory_budget; zeros when absent).
func (d *Device) Budget() []MemoryHeap {
	heaps := append([]MemoryHeap(nil), d.Info.Memory.Heaps...)
	if !d.Info.Caps.MemoryBudget {
		return heaps
	}
	var budget, usage [C.VKC_MAX_HEAPS]C.uint64_t
	C.vkc_query_budget(handle(unsafe.Pointer(d.in.inst)), handle(unsafe.Pointer(d.Info.pd)), &budget[0], &usage[0])
	for i := range heaps {
		heaps[i].Budget, heaps[i].Usage = uint64(budget[i]), uint64(usage[i])
	}
	return heaps
}

func (b *Buffer) checkRange(op string, off int64, n int) error {
	if b == nil || b.freed {
		return fmt.Errorf("%s: %w (buffer freed)", op, ErrClosed)
	}
	if off < 0 || uint64(off)+uint64(n) > b.size {
		return fmt.Errorf("%s: range [%d, %d) outside buffer of %d bytes", op, off, off+int64(n), b.size)
	}
	return nil
}

// Upload writes data into b at off: a memory copy on zero-copy devices, else through a staging
// buffer and a GPU copy, waiting for completion.
func (d *Device) Upload(b *Buffer, off int64, data []byte) error {
	if err := b.checkRange("upload", off, len(data)); err != nil {
		return err
	}
	if m := b.Bytes(); m != nil {
		copy(m[off:], data)
		return nil
	}
	return d.transfer(b, off, data, true)
}

// Download reads len(dst) bytes of b at off into dst.
func (d *Device) Download(b *Buffer, off int64, dst []byte) error {
	if err := b.checkRange("download", off, len(dst)); err != nil {
		return err
	}
	if m := b.Bytes(); m != nil {
		copy(dst, m[off:])
		return nil
	}
	return d.transfer(b, off, dst, false)
}

// Copy copies the first n bytes of src into dst on the device (a host copy where both are
// host-visible) and waits for it.
func (d *Device) Copy(dst, src *Buffer, n int64) error {
	if err := src.checkRange("copy from", 0, int(n)); err != nil {
		return err
	}
	if err := dst.checkRange("copy to", 0, int(n)); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if a, b := dst.Bytes(), src.Bytes(); a != nil && b != nil {
		copy(a[:n], b[:n])
		return nil
	}
	return d.runOne(C.vkc_cmd{kind: 1, barrier_before: 8, timestamp_after: -1, size: C.uint64_t(n),
		src: handle(unsafe.Pointer(src.blk.buf)), src_off: C.uint64_t(src.off),
		dst: handle(unsafe.Pointer(dst.blk.buf)), dst_off: C.uint64_t(dst.off)})
}

// runOne records cmd alone in the transfer command buffer, submits it and waits for it.
func (d *Device) runOne(cmd C.vkc_cmd) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.xferLock.Lock()
	defer d.xferLock.Unlock()
	if err := d.settle(d.xfer); err != nil {
		return err
	}
	if err := d.record(d.xfer.cb, &cmd, 1, nil, nil, nil, 0, 1, false, true); err != nil {
		return err
	}
	return d.submitWait(d.xfer)
}

// Zero fills n bytes of b from off (both multiples of 4) with zeros on the device and waits
// for it: no bytes cross to the device (a KV cache of SmolLM2's took 6 ms a load on the H100
// when uploaded as zeros).
func (d *Device) Zero(b *Buffer, off, n int64) error {
	if err := b.checkRange("zero", off, int(n)); err != nil {
		return err
	}
	if off%4 != 0 || n%4 != 0 {
		return fmt.Errorf("zero: offset %d and size %d must be multiples of 4", off, n)
	}
	if n == 0 {
		return nil
	}
	if m := b.Bytes(); m != nil {
		clear(m[off : off+n])
		return nil
	}
	return d.runOne(C.vkc_cmd{kind: 3, barrier_before: 8, timestamp_after: -1, size: C.uint64_t(n),
		dst: handle(unsafe.Pointer(b.blk.buf)), dst_off: C.uint64_t(b.off + uint64(off))})
}

func (d *Device) transfer(b *Buffer, off int64, data []byte, up bool) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.xferLock.Lock()
	defer d.xferLock.Unlock()
	if d.staging == nil {
		s, err := d.NewStagingBuffer(d.stagingSize())
		if err != nil {
			return err
		}
		d.staging = s
	}
	if up {
		return d.uploadStaged(b, off, data)
	}
	st := d.staging.Bytes()
	for done := 0; done < len(data); {
		n := min(len(data)-done, len(st))
		devOff := C.uint64_t(b.off + uint64(off) + uint64(done))
		cmd := C.vkc_cmd{kind: 1, barrier_before: 8, timestamp_after: -1, size: C.uint64_t(n),
			src: handle(unsafe.Pointer(b.blk.buf)), src_off: devOff,
			dst: handle(unsafe.Pointer(d.staging.blk.buf)), dst_off: C.uint64_t(d.staging.off)}
		if err := d.settle(d.xfer); err != nil {
			return err
		}
		if err := d.record(d.xfer.cb, &cmd, 1, nil, nil, nil, 0, 1, false, true); err != nil {
			return err
		}
		if err := d.submitWait(d.xfer); err != nil {
			return err
		}
		copy(data[done:done+n], st)
		done += n
	}
	return nil
}

// uploadStaged uploads data into b at off through the two halves of the staging buffer in turn,
// each with a command buffer of its own: while the device copies one half into b, the host fills
// the other (with several goroutines for a large run), so the host's copy and the device's
// overlap instead of alternating. It returns once every copy has ended. Call with xferLock held.
// (An 8B Q8_0 plan's 8.5 GB took 3.2 s on the H100 machine through one 16 MiB run at a time.)
func (d *Device) uploadStaged(b *Buffer, off int64, data []byte) error {
	if d.xfer2 == nil {
		x, err := d.newOneShot()
		if err != nil {
			return err
		}
		d.xfer2 = x
	}
	shots := [2]*oneShot{d.xfer, d.xfer2}
	st := d.staging.Bytes()
	half := len(st) / 2
	var err error
	for i, done := 0, 0; done < len(data) && err == nil; i ^= 1 {
		s := shots[i]
		if err = d.settle(s); err != nil { // this half's previous copy
			break
		}
		n := min(len(data)-done, half)
		parallelCopy(st[i*half:i*half+n], data[done:done+n])
		cmd := C.vkc_cmd{kind: 1, barrier_before: 8, timestamp_after: -1, size: C.uint64_t(n),
			src: handle(unsafe.Pointer(d.staging.blk.buf)), src_off: C.uint64_t(d.staging.off + uint64(i*half)),
			dst: handle(unsafe.Pointer(b.blk.buf)), dst_off: C.uint64_t(b.off + uint64(off) + uint64(done))}
		if err = d.record(s.cb, &cmd, 1, nil, nil, nil, 0, 1, false, true); err == nil {
			err = d.submit(s)
		}
		done += n
	}
	for _, s := range shots {
		if e := d.settle(s); err == nil {
			err = e
		}
	}
	return err
}

// parallelCopy copies src into dst (of equal lengths), in parallel parts of at least 4 MiB: a
// plan's weights come from a memory-mapped file, whose page faults one goroutine takes in turn.
func parallelCopy(dst, src []byte) {
	par.Split(len(src), 4<<20, func(a, b int) error {
		copy(dst[a:b], src[a:b])
		return nil
	})
}

// stagingSize is the staging buffer's size: stagingChunk, or Options.StagingBytes (tests), at
// least 256 bytes (two halves of a word or more).
func (d *Device) stagingSize() int64 {
	if d.opts.StagingBytes > 0 {
		return max(int64(d.opts.StagingBytes), 256)
	}
	return stagingChunk
}
