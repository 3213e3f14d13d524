// cvk.h: the small C side of package runtime.
//
// github.com/goki/vulkan binds Vulkan 1.0 (headers 1.3.239) through per-call Go<->C struct
// conversion. It is used for object creation. This file covers what it lacks or does slowly:
// loading libvulkan.so.1, the Vulkan 1.1+ queries with pNext chains (subgroups, 16-bit storage,
// integer dot product, push descriptors, memory budget), VK_KHR_cooperative_matrix and
// VK_NV_cooperative_matrix2 (newer than the binding), the debug-utils messenger, and the hot path
// (recording a program, submit and wait), which must not allocate per call.
//
// Structures are declared here with their exact Vulkan layout rather than including vulkan.h,
// which is not installed on machines that only have the loader. Handles are void*: this file
// assumes a 64-bit platform, where every Vulkan handle is a pointer.
#ifndef VKC_CVK_H
#define VKC_CVK_H

#include <stdint.h>
#include <stddef.h>

typedef void* vkc_handle;

// ---- loader
int vkc_load(const char* name, char* err, int errlen);
void* vkc_gipa(void);

// ---- capabilities (filled by vkc_query_caps)
typedef struct {
	uint32_t m, n, k;
	uint32_t a, b, c, result; // VkComponentTypeKHR
	uint32_t saturating;
	uint32_t scope;
} vkc_coop_shape;

// One VkCooperativeMatrixFlexibleDimensionsPropertiesNV entry (VK_NV_cooperative_matrix2).
typedef struct {
	uint32_t mgran, ngran, kgran;
	uint32_t a, b, c, result; // VkComponentTypeKHR
	uint32_t saturating;
	uint32_t scope; // VkScopeKHR: 2 workgroup, 3 subgroup
	uint32_t workgroup_invocations;
} vkc_coop2_shape;

#define VKC_MAX_COOP 64
#define VKC_MAX_HEAPS 16

typedef struct {
	// which structures may be chained (decided in Go from the API version and extensions)
	uint32_t want_16bit, want_f16i8, want_8bit, want_intdot, want_push, want_budget, want_coop,
		want_driver, want_sgsc, want_vmm, want_bf16,
		want_pexec, // VK_KHR_pipeline_executable_properties: set by Open, only on request
		want_coop2; // VK_NV_cooperative_matrix2: chained only together with want_coop
} vkc_wants;

typedef struct {
	uint32_t core_features[55]; // VkPhysicalDeviceFeatures as an array of VkBool32
	uint32_t subgroup_size, subgroup_stages, subgroup_ops;
	uint32_t min_subgroup_size, max_subgroup_size, max_compute_workgroup_subgroups;
	uint32_t subgroup_size_control, compute_full_subgroups;
	uint32_t max_push_descriptors;
	uint32_t max_per_set_descriptors;
	uint64_t max_memory_allocation_size;
	uint64_t heap_budget[VKC_MAX_HEAPS], heap_usage[VKC_MAX_HEAPS];
	uint32_t storage_buffer16, uniform_and_storage_buffer16, storage_push_constant16;
	uint32_t shader_float16, shader_int8;
	uint32_t storage_buffer8, uniform_and_storage_buffer8;
	uint32_t integer_dot;
	uint32_t vulkan_memory_model, vulkan_memory_model_device_scope;
	uint32_t coop_matrix;
	uint32_t bf16_type, bf16_dot, bf16_coop_matrix; // VK_KHR_shader_bfloat16
	uint32_t n_coop;
	vkc_coop_shape coop[VKC_MAX_COOP];
	// VK_NV_cooperative_matrix2: features (workgroup scope, flexible dimensions, reductions,
	// conversions, per-element operations, tensor addressing, block loads), properties and the
	// flexible-dimensions list. All zero without the extension or where its queries failed.
	uint32_t coop2_features[7];
	uint32_t coop2_max_workgroup_size, coop2_max_dimension, coop2_reserved_shared;
	uint32_t n_coop2;
	vkc_coop2_shape coop2[VKC_MAX_COOP];
	uint32_t driver_id;
	char driver_name[256];
	char driver_info[256];
} vkc_caps;

// vkc_query_caps fills caps for pd. Returns a VkResult (of the cooperative-matrix query).
int vkc_query_caps(vkc_handle instance, vkc_handle pd, const vkc_wants* w, vkc_caps* caps);

// vkc_feature_chain builds (malloc) a VkPhysicalDeviceFeatures2 chain enabling what caps reports
// and w allows, for VkDeviceCreateInfo.pNext; free it with vkc_free_chain.
void* vkc_feature_chain(const vkc_wants* w, const vkc_caps* caps);
void vkc_free_chain(void* chain);

// vkc_query_budget refreshes heap budget and usage (VK_EXT_memory_budget).
void vkc_query_budget(vkc_handle instance, vkc_handle pd, uint64_t* budget, uint64_t* usage);

// ---- debug utils
// vkc_messenger_info returns a static VkDebugUtilsMessengerCreateInfoEXT for the instance pNext
// (so instance creation and destruction are covered too) and for vkCreateDebugUtilsMessengerEXT.
void* vkc_messenger_info(uint64_t tag);
int vkc_create_messenger(vkc_handle instance, uint64_t tag, vkc_handle* out);
void vkc_destroy_messenger(vkc_handle instance, vkc_handle messenger);

// ---- device function table for the hot path
typedef struct vkc_device vkc_device;
// pipeline_stats: VK_KHR_pipeline_executable_properties is enabled; pipelines are then created
// capturing statistics (see vkc_pipeline_statistics).
vkc_device* vkc_device_new(vkc_handle instance, vkc_handle device, vkc_handle queue, int push_descriptors,
	int pipeline_stats);
void vkc_device_free(vkc_device* d);

// One recorded command. kind: 0 dispatch, 1 copy, 2 indirect dispatch (group counts read from
// src at src_off; gx, gy, gz are the largest counts, for checks only), 3 zeros (dst at dst_off,
// size bytes, a multiple of 4).
typedef struct {
	uint32_t kind;
	uint32_t barrier_before; // bit 0: compute->compute memory barrier before this command
	                         // bit 1: transfer->compute; bit 2: compute->transfer
	                         // bit 5: compute->compute buffer memory barriers over
	                         // infos[range_first..range_first+nrange) instead of bit 0's
	uint32_t nrange, range_first;
	vkc_handle pipeline;
	vkc_handle layout;
	vkc_handle set; // NULL: push descriptors
	uint32_t nbind, bind_first; // into the buffer-info array
	uint32_t push_size, push_first; // into the push-constant bytes
	uint32_t gx, gy, gz;
	int32_t timestamp_after; // query index written after this command, or -1
	// copy (and the indirect dispatch's buffer: src, src_off)
	vkc_handle src, dst;
	uint64_t src_off, dst_off, size;
} vkc_cmd;

typedef struct {
	vkc_handle buffer;
	uint64_t offset, range;
} vkc_buffer_info; // VkDescriptorBufferInfo

// vkc_record records cmds into cb (which must be resettable or fresh). The query pool, when not
// NULL, is reset for nquery queries and timestamp 0 is written at the start. The program is
// repeated reps times with a full barrier and a timestamp (when ts_per_rep) between repetitions.
int vkc_record(vkc_device* d, vkc_handle cb, const vkc_cmd* cmds, uint32_t n,
	const vkc_buffer_info* infos, const uint8_t* push, vkc_handle qpool, uint32_t nquery,
	uint32_t reps, int ts_per_rep, int final_barrier_to_host);

// vkc_submit submits cb signalling fence.
int vkc_submit(vkc_device* d, vkc_handle cb, vkc_handle fence);
// vkc_wait polls fence for up to spin_ns, then blocks up to timeout_ns; returns VK_SUCCESS,
// VK_TIMEOUT or an error. It does not reset the fence.
int vkc_wait(vkc_device* d, vkc_handle fence, uint64_t spin_ns, uint64_t timeout_ns);
int vkc_reset_fence(vkc_device* d, vkc_handle fence);
// vkc_timestamps reads n 64-bit timestamps (waiting for them).
int vkc_timestamps(vkc_device* d, vkc_handle qpool, uint32_t first, uint32_t n, uint64_t* out);

// ---- pipeline creation
// vkc_create_compute_pipeline creates one compute pipeline of module's entry with the given
// specialization constants (4 bytes each), through cache. Everything it hands the driver is C
// memory of its own, so no Go collector can free it during the call (see nogc.go).
int vkc_create_compute_pipeline(vkc_device* d, vkc_handle cache, vkc_handle module, const char* entry,
	vkc_handle layout, uint32_t nspec, const uint32_t* spec_ids, const uint32_t* spec_vals, vkc_handle* out);

// ---- pipeline statistics (VK_KHR_pipeline_executable_properties)
// vkc_pipeline_executable_info reports the pipelineExecutableInfo feature of pd.
int vkc_pipeline_executable_info(vkc_handle instance, vkc_handle pd);

typedef struct {
	char name[256];
	char description[256];
	double value; // bool32, int64, uint64 or float64, converted
} vkc_statistic;

// vkc_pipeline_statistics writes up to *n statistics of every executable of pipeline (a compute
// pipeline has one) to out and sets *n to the number written. Returns a VkResult: VK_INCOMPLETE
// when out was too small; -7 (VK_ERROR_EXTENSION_NOT_PRESENT) when the device has no statistics.
int vkc_pipeline_statistics(vkc_device* d, vkc_handle pipeline, vkc_statistic* out, uint32_t* n);

#endif
