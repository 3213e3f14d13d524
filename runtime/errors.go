package runtime

import (
	"errors"
	"fmt"

	vk "github.com/goki/vulkan"
)

// Sentinel errors. Every error this package returns for one of these conditions wraps the sentinel,
// so callers test with errors.Is.
var (
	// ErrNoVulkan: the Vulkan loader (libvulkan.so.1) could not be loaded or initialised.
	ErrNoVulkan = errors.New("no Vulkan loader (install libvulkan1 and a Vulkan driver, e.g. mesa-vulkan-drivers)")
	// ErrNoDevice: the loader works but reports no usable device, or VKC_DEVICE matches none.
	ErrNoDevice = errors.New("no Vulkan device (install mesa-vulkan-drivers, or a GPU driver)")
	// ErrDeviceLost: the driver reported VK_ERROR_DEVICE_LOST. The Device must be closed and opened
	// again; every later call on it returns this error.
	ErrDeviceLost = errors.New("Vulkan device lost")
	// ErrOutOfDeviceMemory: an allocation did not fit in device memory (or host memory for staging).
	ErrOutOfDeviceMemory = errors.New("out of device memory")
	// ErrTimeout: a submission did not complete within the device's submit timeout. The work may
	// still be running; the Program stays busy until it completes.
	ErrTimeout = errors.New("GPU submission timed out")
	// ErrLimit: a request exceeds a device limit (maxStorageBufferRange, maxMemoryAllocationSize,
	// push-constant size, workgroup counts …). The message names the limit and both values.
	ErrLimit = errors.New("exceeds a device limit")
	// ErrValidation: the Khronos validation layer reported a message (only with Options.Validation).
	ErrValidation = errors.New("Vulkan validation error")
	// ErrClosed: the Device, Program, Buffer or Pipeline was already closed.
	ErrClosed = errors.New("use after close")
	// ErrUnsupported: a module declares a SPIR-V capability whose device feature the device lacks
	// or was opened without (cooperative matrices, bfloat16, the Vulkan memory model, ...).
	ErrUnsupported = errors.New("the device lacks a feature the module needs")
)

// VkError is a failed Vulkan call: which operation and the VkResult. It wraps the sentinel that
// matches the result (ErrDeviceLost, ErrOutOfDeviceMemory, ErrTimeout), if any.
type VkError struct {
	Op     string    // e.g. "vkAllocateMemory"
	Result vk.Result // the VkResult code
}

func (e *VkError) Error() string {
	return fmt.Sprintf("%s: %s (VkResult %d)", e.Op, resultName(e.Result), int32(e.Result))
}

// Unwrap returns the sentinel matching the result.
func (e *VkError) Unwrap() error {
	switch e.Result {
	case vk.ErrorDeviceLost:
		return ErrDeviceLost
	case vk.ErrorOutOfDeviceMemory, vk.ErrorOutOfHostMemory, vk.ErrorOutOfPoolMemory, vk.ErrorFragmentedPool:
		return ErrOutOfDeviceMemory
	case vk.Timeout:
		return ErrTimeout
	case vk.ErrorInitializationFailed, vk.ErrorIncompatibleDriver:
		return ErrNoDevice
	}
	return nil
}

// check turns a VkResult into nil or a *VkError.
func check(op string, r vk.Result) error {
	if r == vk.Success {
		return nil
	}
	return &VkError{Op: op, Result: r}
}

func resultName(r vk.Result) string {
	switch r {
	case vk.Success:
		return "VK_SUCCESS"
	case vk.NotReady:
		return "VK_NOT_READY"
	case vk.Timeout:
		return "VK_TIMEOUT"
	case vk.Incomplete:
		return "VK_INCOMPLETE"
	case vk.ErrorOutOfHostMemory:
		return "VK_ERROR_OUT_OF_HOST_MEMORY"
	case vk.ErrorOutOfDeviceMemory:
		return "VK_ERROR_OUT_OF_DEVICE_MEMORY"
	case vk.ErrorInitializationFailed:
		return "VK_ERROR_INITIALIZATION_FAILED"
	case vk.ErrorDeviceLost:
		return "VK_ERROR_DEVICE_LOST"
	case vk.ErrorMemoryMapFailed:
		return "VK_ERROR_MEMORY_MAP_FAILED"
	case vk.ErrorLayerNotPresent:
		return "VK_ERROR_LAYER_NOT_PRESENT"
	case vk.ErrorExtensionNotPresent:
		return "VK_ERROR_EXTENSION_NOT_PRESENT"
	case vk.ErrorFeatureNotPresent:
		return "VK_ERROR_FEATURE_NOT_PRESENT"
	case vk.ErrorIncompatibleDriver:
		return "VK_ERROR_INCOMPATIBLE_DRIVER"
	case vk.ErrorTooManyObjects:
		return "VK_ERROR_TOO_MANY_OBJECTS"
	case vk.ErrorFormatNotSupported:
		return "VK_ERROR_FORMAT_NOT_SUPPORTED"
	case vk.ErrorFragmentedPool:
		return "VK_ERROR_FRAGMENTED_POOL"
	case vk.ErrorOutOfPoolMemory:
		return "VK_ERROR_OUT_OF_POOL_MEMORY"
	case vk.ErrorInvalidShaderNv:
		return "VK_ERROR_INVALID_SHADER_NV"
	}
	return "VkResult"
}

// limitError reports a request beyond a device limit.
func limitError(what, limit string, want, have uint64) error {
	return fmt.Errorf("%s: %d bytes %w %s = %d", what, want, ErrLimit, limit, have)
}
