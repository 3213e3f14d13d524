package runtime

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// Device is an opened Vulkan device: one compute queue, memory pools, a pipeline cache.
// Methods are safe for concurrent use; submissions to the queue are serialised.
type Device struct {
	Info DeviceInfo
	// CoopMatrixNote is non-empty when the device has cooperative matrices but they are not
	// enabled, and says why.
	CoopMatrixNote string
	// CoopMatrix2Note is non-empty when the device offers VK_NV_cooperative_matrix2 with the KHR
	// extension enabled but leaves it disabled (VKC_COOPMAT2=off, an older validation layer), and
	// says why.
	CoopMatrix2Note string

	opts     Options
	in       *instance
	dev      vk.Device
	queue    vk.Queue
	c        *C.vkc_device
	cmdPool  vk.CommandPool
	pcache   vk.PipelineCache
	cacheDir string
	push     bool // push descriptors in use
	// statsOff says why Pipeline.Statistics has nothing ("": pipelines capture statistics).
	statsOff string
	zeroCopy bool // device buffers are host-visible and mapped
	timeout  time.Duration
	spin     atomic.Int64 // ns to poll a fence before blocking

	queueMu sync.Mutex // vkQueueSubmit needs the queue externally synchronised
	poolMu  sync.Mutex // so does the command pool: allocation, free, and recording into its buffers
	lost    atomic.Bool
	closed  atomic.Bool
	// noHelpers: Prepare found that its helper devices' compiles did not reach this one.
	noHelpers atomic.Bool

	memMu    sync.Mutex
	deviceMT uint32 // memory type of device buffers
	stageMT  uint32 // memory type of staging buffers
	pools    [2]*pool
	nextID   atomic.Uint64

	objMu     sync.Mutex
	programs  map[*Program]bool
	pipelines map[*Pipeline]bool

	xferLock sync.Mutex
	xfer     *oneShot // upload/download command buffer and fence
	xfer2    *oneShot // the second half's, for staged uploads (uploadStaged; made at the first)
	staging  *Buffer  // reusable staging buffer for Upload/Download
}

// Open opens the device chosen by opts (see Options.Device). Close it when done.
func Open(opts Options) (*Device, error) {
	in, err := newInstance(opts)
	if err != nil {
		return nil, err
	}
	info, err := choose(in.devices, opts.Device)
	if err != nil {
		in.destroy()
		return nil, err
	}
	d := &Device{Info: *info, opts: opts, in: in, timeout: opts.SubmitTimeout}
	if d.timeout == 0 {
		d.timeout = 10 * time.Second
		if info.Type == CPU {
			// A CPU implementation (lavapipe) runs a model's prefill hundreds of times slower
			// than a GPU: SmolLM2-135M's takes over 20 s on two cores. The timeout detects hangs,
			// so it must not fire on honest work.
			d.timeout = 10 * time.Minute
		}
	}
	d.spin.Store(opts.SpinWait.Nanoseconds())
	// create works on d.Info, so that what it leaves disabled is what Info reports.
	if err := d.create(&d.Info); err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", info.Name, err)
	}
	return d, nil
}

func (d *Device) create(info *DeviceInfo) error {
	caps := &info.Caps
	var exts []string
	has := map[string]bool{}
	for _, e := range info.Extensions {
		has[e] = true
	}
	add := func(name string, cond bool) {
		if cond && has[name] {
			exts = append(exts, name)
		}
	}
	v := info.APIVersion
	d.push = caps.PushDescriptors && !d.opts.NoPushDescriptors
	add("VK_KHR_push_descriptor", d.push)
	add("VK_EXT_memory_budget", true)
	// The feature chain carries the cooperative-matrix structure whenever the extension is
	// enabled. A validation layer older than the extension (header 1.3.255) reports both as
	// unknown, so under such a layer the extension stays off and CoopMatrixNote says why.
	if lv := d.in.layerVersion; info.wants.want_coop != 0 && lv != 0 && lv < Version(vk.MakeVersion(1, 3, 255)) {
		info.wants.want_coop = 0
		caps.CooperativeMatrix = nil
		d.CoopMatrixNote = fmt.Sprintf("VK_KHR_cooperative_matrix left disabled: validation layer %s predates it", d.in.layerVersion)
	}
	add("VK_KHR_cooperative_matrix", info.wants.want_coop != 0)
	// VK_NV_cooperative_matrix2 builds on the KHR extension and goes off with it. Its feature
	// structure is chained whenever it is enabled, so a validation layer older than it (header
	// 1.3.296) leaves it off too. VKC_COOPMAT2=off leaves it off for A/B measurements.
	if info.wants.want_coop2 != 0 {
		switch lv := d.in.layerVersion; {
		case info.wants.want_coop == 0:
			info.wants.want_coop2 = 0
		case lv != 0 && lv < Version(vk.MakeVersion(1, 3, 296)):
			info.wants.want_coop2 = 0
			d.CoopMatrix2Note = fmt.Sprintf("VK_NV_cooperative_matrix2 left disabled: validation layer %s predates it", lv)
		case os.Getenv("VKC_COOPMAT2") == "off":
			info.wants.want_coop2 = 0
			d.CoopMatrix2Note = "VK_NV_cooperative_matrix2 left disabled: VKC_COOPMAT2=off"
		}
	}
	if info.wants.want_coop2 == 0 {
		caps.CooperativeMatrix2 = nil
	}
	add("VK_NV_cooperative_matrix2", info.wants.want_coop2 != 0)
	// Likewise VK_KHR_shader_bfloat16 (header 1.4.311): its feature structure is chained whenever
	// the extension is enabled.
	if lv := d.in.layerVersion; info.wants.want_bf16 != 0 && lv != 0 && lv < Version(vk.MakeVersion(1, 4, 311)) {
		info.wants.want_bf16 = 0
		caps.BFloat16, caps.BFloat16CooperativeMatrix = false, false
	}
	if info.wants.want_coop == 0 {
		caps.BFloat16CooperativeMatrix = false
	}
	add("VK_KHR_shader_bfloat16", info.wants.want_bf16 != 0)
	add("VK_KHR_16bit_storage", !v.atLeast(1, 1))
	add("VK_KHR_shader_float16_int8", !v.atLeast(1, 2))
	add("VK_KHR_8bit_storage", !v.atLeast(1, 2))
	add("VK_KHR_vulkan_memory_model", !v.atLeast(1, 2))
	add("VK_KHR_shader_integer_dot_product", !v.atLeast(1, 3))
	// VKC_PIPELINE_STATS=1 has the driver report what it compiled (Pipeline.Statistics: on
	// NVIDIA registers per invocation, shared memory), to see why a kernel is slow. Only on
	// request: without it the device and its pipelines are created exactly as before.
	d.statsOff = "pipeline statistics are off: set VKC_PIPELINE_STATS=1 before opening the device"
	if os.Getenv("VKC_PIPELINE_STATS") == "1" {
		const ext = "VK_KHR_pipeline_executable_properties"
		switch {
		case !has[ext]:
			d.statsOff = fmt.Sprintf("VKC_PIPELINE_STATS=1, but %s does not offer %s", info.Name, ext)
		case C.vkc_pipeline_executable_info(handle(unsafe.Pointer(d.in.inst)), handle(unsafe.Pointer(info.pd))) == 0:
			d.statsOff = fmt.Sprintf("VKC_PIPELINE_STATS=1, but %s lacks %s's pipelineExecutableInfo feature", info.Name, ext)
		default:
			info.wants.want_pexec = 1
			exts = append(exts, ext)
			d.statsOff = ""
		}
	}
	chain := C.vkc_feature_chain(&info.wants, info.ccaps)
	if chain == nil {
		return ErrOutOfDeviceMemory
	}
	defer C.vkc_free_chain(chain)
	ci := &vk.DeviceCreateInfo{
		SType:                vk.StructureTypeDeviceCreateInfo,
		PNext:                chain,
		QueueCreateInfoCount: 1,
		PQueueCreateInfos: []vk.DeviceQueueCreateInfo{{
			SType:            vk.StructureTypeDeviceQueueCreateInfo,
			QueueFamilyIndex: info.queueFamily,
			QueueCount:       1,
			PQueuePriorities: []float32{1},
		}},
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: cstrings(exts),
	}
	var dev vk.Device
	r := vk.CreateDevice(info.pd, ci, nil, &dev)
	d.dev = dev
	ci.Free()
	if err := check("vkCreateDevice", r); err != nil {
		d.dev = nil
		return err
	}
	var queue vk.Queue
	vk.GetDeviceQueue(d.dev, info.queueFamily, 0, &queue)
	d.queue = queue
	d.c = C.vkc_device_new(handle(unsafe.Pointer(d.in.inst)), handle(unsafe.Pointer(d.dev)), handle(unsafe.Pointer(d.queue)), C.int(b2i(d.push)),
		C.int(b2i(d.statsOff == "")))
	if d.c == nil {
		return fmt.Errorf("vkGetDeviceProcAddr: a core command is missing")
	}
	pci := &vk.CommandPoolCreateInfo{
		SType:            vk.StructureTypeCommandPoolCreateInfo,
		Flags:            vk.CommandPoolCreateFlags(vk.CommandPoolCreateResetCommandBufferBit),
		QueueFamilyIndex: info.queueFamily,
	}
	var cmdPool vk.CommandPool
	r = vk.CreateCommandPool(d.dev, pci, nil, &cmdPool)
	d.cmdPool = cmdPool
	if err := check("vkCreateCommandPool", r); err != nil {
		return err
	}
	if err := d.initMemory(); err != nil {
		return err
	}
	if err := d.openPipelineCache(); err != nil {
		return err
	}
	x, err := d.newOneShot()
	if err != nil {
		return err
	}
	d.xfer = x
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SetSpinWait changes Options.SpinWait.
func (d *Device) SetSpinWait(t time.Duration) { d.spin.Store(t.Nanoseconds()) }

// PushDescriptors reports whether programs bind buffers with push descriptors.
func (d *Device) PushDescriptors() bool { return d.push }

// ZeroCopy reports whether device buffers are host-visible and written without staging.
func (d *Device) ZeroCopy() bool { return d.zeroCopy }

// TakeMessages returns and clears the validation messages received so far (Options.Validation).
func (d *Device) TakeMessages() []Message { return d.in.sink.take() }

// alive returns ErrDeviceLost or ErrClosed when the device cannot be used.
func (d *Device) alive() error {
	if d.closed.Load() {
		return ErrClosed
	}
	if d.lost.Load() {
		return ErrDeviceLost
	}
	return nil
}

// note records device loss from err and returns err.
func (d *Device) note(err error) error {
	if errors.Is(err, ErrDeviceLost) {
		d.lost.Store(true)
	}
	return err
}

// Close waits for the device to go idle, saves the pipeline cache and destroys everything the
// Device created. Buffers, Pipelines and Programs still open are destroyed with it.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var firstErr error
	if d.dev != nil {
		vk.DeviceWaitIdle(d.dev)
		d.objMu.Lock()
		progs, pipes := d.programs, d.pipelines
		d.programs, d.pipelines = nil, nil
		d.objMu.Unlock()
		for p := range progs {
			p.mu.Lock()
			p.closed = true
			p.destroy()
			p.mu.Unlock()
		}
		for p := range pipes {
			p.closed = true
			p.destroy()
		}
		if d.pcache != nil {
			if err := d.savePipelineCache(); err != nil {
				firstErr = err
			}
			vk.DestroyPipelineCache(d.dev, d.pcache, nil)
		}
		if d.xfer != nil {
			d.xfer.destroy(d)
		}
		if d.xfer2 != nil {
			d.xfer2.destroy(d)
		}
		d.freeMemory()
		if d.cmdPool != nil {
			vk.DestroyCommandPool(d.dev, d.cmdPool, nil)
		}
		vk.DestroyDevice(d.dev, nil)
	}
	if d.c != nil {
		C.vkc_device_free(d.c)
	}
	d.in.destroy()
	return firstErr
}

// track registers an object Close must destroy (a *Program or *Pipeline).
func (d *Device) track(obj any) {
	d.objMu.Lock()
	defer d.objMu.Unlock()
	switch o := obj.(type) {
	case *Program:
		if d.programs == nil {
			d.programs = map[*Program]bool{}
		}
		d.programs[o] = true
	case *Pipeline:
		if d.pipelines == nil {
			d.pipelines = map[*Pipeline]bool{}
		}
		d.pipelines[o] = true
	}
}

func (d *Device) untrack(obj any) {
	d.objMu.Lock()
	defer d.objMu.Unlock()
	switch o := obj.(type) {
	case *Program:
		delete(d.programs, o)
	case *Pipeline:
		delete(d.pipelines, o)
	}
}

// ---- pipeline cache

func (d *Device) cachePath() string {
	if d.cacheDir == "" {
		return ""
	}
	return filepath.Join(d.cacheDir, "pipelines-"+d.Info.Fingerprint.Hex()+".bin")
}

func (d *Device) openPipelineCache() error {
	dir := d.opts.CacheDir
	if dir == "" {
		if base, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(base, "vkc")
		}
	}
	if dir != "off" {
		d.cacheDir = dir
	}
	var data []byte
	if p := d.cachePath(); p != "" {
		data, _ = os.ReadFile(p) // a missing or unreadable cache only costs compile time
	}
	ci := &vk.PipelineCacheCreateInfo{SType: vk.StructureTypePipelineCacheCreateInfo}
	var cdata unsafe.Pointer
	if len(data) > 0 {
		cdata = C.CBytes(data)
		defer C.free(cdata)
		ci.InitialDataSize = uint64(len(data))
		ci.PInitialData = cdata
	}
	var pc vk.PipelineCache
	r := vk.CreatePipelineCache(d.dev, ci, nil, &pc)
	ci.Free()
	if r != vk.Success && len(data) > 0 {
		// A corrupt cache file must not stop the device from opening.
		ci = &vk.PipelineCacheCreateInfo{SType: vk.StructureTypePipelineCacheCreateInfo}
		r = vk.CreatePipelineCache(d.dev, ci, nil, &pc)
		ci.Free()
	}
	d.pcache = pc
	return check("vkCreatePipelineCache", r)
}

// SavePipelineCache writes the pipeline cache to the cache directory (atomically: a temporary
// file renamed over the old one). Close calls it.
func (d *Device) SavePipelineCache() error {
	if err := d.alive(); err != nil {
		return err
	}
	return d.savePipelineCache()
}

func (d *Device) savePipelineCache() error {
	p := d.cachePath()
	if p == "" || d.pcache == nil {
		return nil
	}
	var n uint64
	if err := check("vkGetPipelineCacheData", vk.GetPipelineCacheData(d.dev, d.pcache, &n, nil)); err != nil || n == 0 {
		return err
	}
	buf := C.malloc(C.size_t(n))
	defer C.free(buf)
	if err := check("vkGetPipelineCacheData", vk.GetPipelineCacheData(d.dev, d.pcache, &n, buf)); err != nil {
		return err
	}
	data := C.GoBytes(buf, C.int(n))
	if err := os.MkdirAll(d.cacheDir, 0o755); err != nil {
		return fmt.Errorf("pipeline cache: %w", err)
	}
	f, err := os.CreateTemp(d.cacheDir, ".pipelines-*.tmp")
	if err != nil {
		return fmt.Errorf("pipeline cache: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), p)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("pipeline cache %s: %w", p, werr)
	}
	return nil
}

// ---- one-shot submissions (uploads, downloads)

// oneShot is a command buffer with its fence. pending: submitted, and the wait for it timed out,
// so the command buffer may still execute and must not be re-recorded before settle.
type oneShot struct {
	cb      vk.CommandBuffer
	fence   vk.Fence
	pending bool
}

func (d *Device) newCommandBuffer() (vk.CommandBuffer, error) {
	cbs := make([]vk.CommandBuffer, 1)
	ai := &vk.CommandBufferAllocateInfo{
		SType:              vk.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        d.cmdPool,
		Level:              vk.CommandBufferLevelPrimary,
		CommandBufferCount: 1,
	}
	d.poolMu.Lock()
	r := vk.AllocateCommandBuffers(d.dev, ai, cbs)
	d.poolMu.Unlock()
	ai.Free()
	if err := check("vkAllocateCommandBuffers", r); err != nil {
		return nil, err
	}
	return cbs[0], nil
}

func (d *Device) freeCommandBuffer(cb vk.CommandBuffer) {
	if cb == nil {
		return
	}
	d.poolMu.Lock()
	vk.FreeCommandBuffers(d.dev, d.cmdPool, 1, []vk.CommandBuffer{cb})
	d.poolMu.Unlock()
}

func (d *Device) newFence() (vk.Fence, error) {
	var f vk.Fence
	fi := &vk.FenceCreateInfo{SType: vk.StructureTypeFenceCreateInfo}
	r := vk.CreateFence(d.dev, fi, nil, &f)
	fi.Free()
	return f, check("vkCreateFence", r)
}

func (d *Device) newOneShot() (*oneShot, error) {
	cb, err := d.newCommandBuffer()
	if err != nil {
		return nil, err
	}
	f, err := d.newFence()
	if err != nil {
		d.freeCommandBuffer(cb)
		return nil, err
	}
	return &oneShot{cb: cb, fence: f}, nil
}

func (o *oneShot) destroy(d *Device) {
	d.freeCommandBuffer(o.cb)
	vk.DestroyFence(d.dev, o.fence, nil)
}

// record records cmds into cb (see vkc_record in cvk.h) holding the command-pool lock.
func (d *Device) record(cb vk.CommandBuffer, cmds *C.vkc_cmd, n int, infos *C.vkc_buffer_info, push *C.uint8_t,
	q vk.QueryPool, nquery, reps int, tsPerRep, toHost bool) error {
	d.poolMu.Lock()
	r := C.vkc_record(d.c, handle(unsafe.Pointer(cb)), cmds, C.uint32_t(n), infos, push,
		handle(unsafe.Pointer(q)), C.uint32_t(nquery), C.uint32_t(reps), C.int(b2i(tsPerRep)), C.int(b2i(toHost)))
	d.poolMu.Unlock()
	return d.note(check("record command buffer", vk.Result(r)))
}

// settle waits for an earlier submission of s whose wait timed out. Call before re-recording.
func (d *Device) settle(s *oneShot) error {
	if !s.pending {
		return nil
	}
	return d.wait(s)
}

// settleForFree waits for s however long it takes, before its command buffer or anything it
// uses is destroyed: freeing work the device still executes crashes the driver (lavapipe did,
// after a timed-out prefill). It gives up only on an error other than a timeout (a lost device,
// after which destroying is allowed).
func (d *Device) settleForFree(s *oneShot) {
	for s.pending {
		if err := d.wait(s); err != nil && !errors.Is(err, ErrTimeout) {
			return
		}
	}
}

// submit submits s's command buffer signalling its fence.
func (d *Device) submit(s *oneShot) error {
	if err := d.settle(s); err != nil {
		return err
	}
	d.queueMu.Lock()
	r := C.vkc_submit(d.c, handle(unsafe.Pointer(s.cb)), handle(unsafe.Pointer(s.fence)))
	d.queueMu.Unlock()
	if err := check("vkQueueSubmit", vk.Result(r)); err != nil {
		return d.note(err)
	}
	s.pending = true
	return nil
}

// submitWait submits s and waits for it (at most the submit timeout).
func (d *Device) submitWait(s *oneShot) error {
	if err := d.submit(s); err != nil {
		return err
	}
	return d.wait(s)
}

// wait waits for s's fence (at most the submit timeout) and resets it. Work already submitted
// cannot be abandoned, so cancellation is checked by callers between submissions, never here.
func (d *Device) wait(s *oneShot) error {
	r := vk.Result(C.vkc_wait(d.c, handle(unsafe.Pointer(s.fence)), C.uint64_t(d.spin.Load()), C.uint64_t(d.timeout.Nanoseconds())))
	if r == vk.Timeout {
		return fmt.Errorf("waited %v: %w", d.timeout, ErrTimeout)
	}
	if err := check("vkWaitForFences", r); err != nil {
		return d.note(err)
	}
	s.pending = false
	return d.note(check("vkResetFences", vk.Result(C.vkc_reset_fence(d.c, handle(unsafe.Pointer(s.fence))))))
}
