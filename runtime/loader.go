package runtime

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// LoaderLibrary is the shared object opened for Vulkan: the runtime package of the loader
// (libvulkan1 on Debian), not the libvulkan.so development symlink that goki/vulkan's default
// loader wants. VKC_VULKAN_LIBRARY overrides it (tests use it to simulate a machine without one).
const LoaderLibrary = "libvulkan.so.1"

var loader struct {
	sync.Mutex
	done bool
}

// load opens the Vulkan loader once per process and initialises goki/vulkan with its
// vkGetInstanceProcAddr. A failure is not remembered, so a later call can succeed.
func load() error {
	loader.Lock()
	defer loader.Unlock()
	if loader.done {
		return nil
	}
	name := LoaderLibrary
	if v := os.Getenv("VKC_VULKAN_LIBRARY"); v != "" {
		name = v
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var buf [512]C.char
	if C.vkc_load(cname, &buf[0], C.int(len(buf))) != 0 {
		return fmt.Errorf("%w: %s", ErrNoVulkan, C.GoString(&buf[0]))
	}
	vk.SetGetInstanceProcAddr(C.vkc_gipa())
	if err := vk.Init(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoVulkan, name, err)
	}
	loader.done = true
	return nil
}

// handle converts a goki/vulkan handle (a C pointer type, passed as unsafe.Pointer(h)) to the
// void* used by cvk.c.
func handle(h unsafe.Pointer) C.vkc_handle { return C.vkc_handle(h) }
