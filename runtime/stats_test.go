package runtime

import (
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
// opened, so a fresh one) and reads a trivial pipeline's statistics.
func TestPipelineStatistics(t *testing.T) {
	t.Setenv("VKC_PIPELINE_STATS", "1")
	d := openTest(t, Options{})
	stats, err := addKernel(t, d).Statistics()
	if err != nil && d.statsOff != "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
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
