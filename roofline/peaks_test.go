package roofline_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/roofline"
	"github.com/vkc-project/vkc/runtime"
)

func spirvVal(t *testing.T, k *codegen.Kernel) {
	t.Helper()
	tool, err := exec.LookPath("spirv-val")
	if err != nil {
		t.Skip("missing capability: spirv-val not found (install spirv-tools; scripts/setup.sh does)")
	}
	path := filepath.Join(t.TempDir(), k.Name+".spv")
	if err := os.WriteFile(path, k.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "--target-env", "vulkan1.1", path).CombinedOutput(); err != nil {
		t.Fatalf("spirv-val rejects %s: %v\n%s\n%s", k.Name, err, out, k.Dump())
	}
}

func TestKernelsValidate(t *testing.T) {
	c, err := roofline.CopyKernel()
	if err != nil {
		t.Fatal(err)
	}
	spirvVal(t, c)
	f, err := roofline.FMAKernel(256)
	if err != nil {
		t.Fatal(err)
	}
	spirvVal(t, f)
}

func open(t *testing.T) *runtime.Device {
	t.Helper()
	d, err := runtime.Open(runtime.Options{CacheDir: "off"})
	if errors.Is(err, runtime.ErrNoVulkan) || errors.Is(err, runtime.ErrNoDevice) {
		t.Skipf("no Vulkan device (lavapipe is enough): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestMeasureAndCache measures small peaks on the device (the kernels check their results
// there), caches them, reads them back, and measures again when the cache is damaged or
// remeasuring is asked for. The figures are only required to be positive: timings are not
// asserted.
func TestMeasureAndCache(t *testing.T) {
	d := open(t)
	dir := t.TempDir()
	o := roofline.Options{CopyBytes: 4 << 20, MinTime: time.Millisecond}
	ctx := context.Background()
	p, cached, path, warn, err := roofline.Cached(ctx, d, dir, false, o)
	if err != nil {
		t.Fatal(err)
	}
	if cached || warn != nil || p.Bandwidth <= 0 || p.F32 <= 0 || p.CopyBytes != 4<<20 {
		t.Fatalf("first measurement: cached %v, warn %v, %+v", cached, warn, p)
	}
	t.Logf("%s: %s (spread %.1f%%)", p.Device, p, 100*p.Spread)
	if filepath.Dir(path) != dir || !strings.HasSuffix(path, d.Info.Fingerprint.Hex()+".json") {
		t.Errorf("cache path %s", path)
	}
	q, cached, _, warn, err := roofline.Cached(ctx, d, dir, false, o)
	if err != nil || !cached || warn != nil || q.Bandwidth != p.Bandwidth || q.F32 != p.F32 || !q.When.Equal(p.When) {
		t.Errorf("second call: cached %v, warn %v, err %v, %+v vs %+v", cached, warn, err, q, p)
	}
	if _, cached, _, _, err := roofline.Cached(ctx, d, dir, true, o); err != nil || cached {
		t.Errorf("remeasure: cached %v, err %v", cached, err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, cached, _, warn, err := roofline.Cached(ctx, d, dir, false, o)
	if err != nil || cached || warn == nil || r.Bandwidth <= 0 {
		t.Errorf("damaged cache: cached %v, warn %v, err %v", cached, warn, err)
	}
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{{3.97e12, "3.97 TB/s"}, {8.1e9, "8.1 GB/s"}, {12, "12 B/s"}, {0, "0 B/s"}} {
		if got := roofline.Rate(c.x, "B/s"); got != c.want {
			t.Errorf("Rate(%g) = %q, want %q", c.x, got, c.want)
		}
	}
}
