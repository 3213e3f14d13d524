package runtime

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	vk "github.com/goki/vulkan"
)

// PipelineStatistic is one statistic the driver reports of a compiled pipeline
// (VK_KHR_pipeline_executable_properties), e.g. NVIDIA's register count per invocation.
type PipelineStatistic struct {
	Name, Description string
	Value             float64 // a boolean is 0 or 1
}

// maxStatistics bounds the statistics read of one pipeline (drivers report a dozen or two).
const maxStatistics = 128

// Statistics returns the driver's statistics of the pipeline's executables (a compute pipeline
// has one). It needs a device opened with VKC_PIPELINE_STATS=1 whose driver offers
// VK_KHR_pipeline_executable_properties; otherwise the error says which is missing.
func (p *Pipeline) Statistics() ([]PipelineStatistic, error) {
	d := p.d
	if err := d.alive(); err != nil {
		return nil, err
	}
	if p.closed {
		return nil, fmt.Errorf("pipeline %s: %w", p.Kernel.Name, ErrClosed)
	}
	if d.statsOff != "" {
		return nil, fmt.Errorf("pipeline %s: %s", p.Kernel.Name, d.statsOff)
	}
	out := make([]C.vkc_statistic, maxStatistics) // holds no Go pointers, so C may write it
	n := C.uint32_t(len(out))
	r := vk.Result(C.vkc_pipeline_statistics(d.c, handle(unsafe.Pointer(p.pipeline)), &out[0], &n))
	if r != vk.Incomplete { // VK_INCOMPLETE: the first maxStatistics
		if err := check("vkGetPipelineExecutableStatisticsKHR", r); err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", p.Kernel.Name, d.note(err))
		}
	}
	stats := make([]PipelineStatistic, n)
	for i, s := range out[:n] {
		stats[i] = PipelineStatistic{Name: C.GoString(&s.name[0]), Description: C.GoString(&s.description[0]), Value: float64(s.value)}
	}
	return stats, nil
}
