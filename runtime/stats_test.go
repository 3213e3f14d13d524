package runtime

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPipelineStatisticsOff: without VKC_PIPELINE_STATS the device is opened as always, and
// Statistics says how to turn them on.
func TestPipelineStatisticsOff(t *testing.T) {
	t.Setenv("VKC_PIPELINE_STATS", "")
	d := openTest(t, Options{})
	_, err := addKernel(t, d).Statistics()
	if err == nil || !strings.Contains(err.Error(), "VKC_PIPELINE_STATS=1") {
		t.Fatalf("Statistics without VKC_PIPELINE_STATS: %v, want an error naming it", err)
	}
}

// TestPipelineStatistics opens a device with VKC_PIPELINE_STATS=1 (read when a device is
// opened, so a fresh one) and reads a trivial pipeline's statistics. It needs a device that
// offers VK_KHR_pipeline_executable_properties: lavapipe (Mesa 25.0.7) does not; the GPU
// machine's NVIDIA driver does, and runs it there.
func TestPipelineStatistics(t *testing.T) {
	t.Setenv("VKC_PIPELINE_STATS", "1")
	d := openTest(t, Options{})
	const ext = "VK_KHR_pipeline_executable_properties"
	if !slices.Contains(d.Info.Extensions, ext) {
		t.Skipf("needs %s, which %s does not offer (the GPU machine's driver does)", ext, d.Info.Name)
	}
	stats, err := addKernel(t, d).Statistics()
	if err != nil {
		t.Fatalf("%s offers %s, yet: %v", d.Info.Name, ext, err)
	}
	if len(stats) == 0 {
		t.Fatalf("%s reports no statistics of a compute pipeline", d.Info.Name)
	}
	var line []string
	for _, s := range stats {
		line = append(line, s.Name+"="+strconv.FormatFloat(s.Value, 'f', -1, 64))
	}
	t.Logf("%s (%s): %s", d.Info.Name, d.Info.DriverInfo, strings.Join(line, ", "))
}
