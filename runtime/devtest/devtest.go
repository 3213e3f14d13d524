// Package devtest opens the Vulkan device for tests of packages above the runtime: once per test
// binary, with the Khronos validation layer where it is installed, skipping (and saying why) where
// there is no Vulkan device, and failing a test whose work the layer reported.
package devtest

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/vkc-project/vkc/runtime"
)

var (
	once sync.Once
	dev  *runtime.Device
	err  error
)

// Device returns the default device, opened on first use with a pipeline cache of its own (a
// fresh temporary folder, so runs do not share driver caches). It registers a cleanup that fails
// t for every message the validation layer reported meanwhile.
func Device(t testing.TB) *runtime.Device {
	t.Helper()
	once.Do(func() {
		dir, _ := os.MkdirTemp("", "vkc-devtest-")
		dev, err = runtime.Open(runtime.Options{Validation: true, CacheDir: dir})
		if err != nil && !errors.Is(err, runtime.ErrNoVulkan) && !errors.Is(err, runtime.ErrNoDevice) {
			// The validation layer may be missing on a developer machine; run without it.
			dev, err = runtime.Open(runtime.Options{CacheDir: dir})
		}
	})
	if errors.Is(err, runtime.ErrNoVulkan) || errors.Is(err, runtime.ErrNoDevice) {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range dev.TakeMessages() {
			t.Errorf("validation: %s", m)
		}
	})
	return dev
}
