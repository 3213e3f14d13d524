//go:build unix

package runtime

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
)

// BenchmarkStagedUpload: host-to-device upload through the staging buffer (no zero-copy even
// where the device could map its memory), in runs of Load's weightRun as a plan's weights go, from
// a file mapped in memory as a plan's weights are. VKC_BENCH_UPLOAD_MB sets the size (default
// 512).
func BenchmarkStagedUpload(b *testing.B) {
	d, err := Open(Options{CacheDir: b.TempDir(), NoZeroCopy: true})
	if errors.Is(err, ErrNoVulkan) || errors.Is(err, ErrNoDevice) {
		b.Skipf("%s: %v", noDevice, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	size := envInt("VKC_BENCH_UPLOAD_MB", 512) << 20
	f, err := os.CreateTemp(b.TempDir(), "weights")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("weights!"), size/8)); err != nil {
		b.Fatal(err)
	}
	src, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Munmap(src)
	dst := mustBuffer(b, d, int64(size))
	for b.Loop() {
		for off := 0; off < size; off += 128 << 20 {
			if err := d.Upload(dst, int64(off), src[off:min(off+128<<20, size)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(size))
}
