// The C side of package runtime; see cvk.h.
#include "cvk.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_cgo_export.h"

typedef void (*vkc_void_fn)(void);
typedef vkc_void_fn (*vkc_gipa_fn)(vkc_handle instance, const char* name);

static void* libvulkan;
static vkc_gipa_fn gipa;

int vkc_load(const char* name, char* err, int errlen) {
	if (gipa) return 0;
	libvulkan = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!libvulkan) {
		const char* e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	gipa = (vkc_gipa_fn)dlsym(libvulkan, "vkGetInstanceProcAddr");
	if (!gipa) {
		snprintf(err, errlen, "%s has no vkGetInstanceProcAddr", name);
		dlclose(libvulkan);
		libvulkan = NULL;
		return -1;
	}
	return 0;
}

void* vkc_gipa(void) { return (void*)gipa; }

static vkc_void_fn iproc(vkc_handle instance, const char* name, const char* alt) {
	vkc_void_fn f = gipa(instance, name);
	if (!f && alt) f = gipa(instance, alt);
	return f;
}

// ---- structure types used below
enum {
	ST_SUBMIT_INFO = 4,
	ST_WRITE_DESCRIPTOR_SET = 35,
	ST_COMMAND_BUFFER_BEGIN_INFO = 42,
	ST_MEMORY_BARRIER = 46,
	ST_FEATURES_2 = 1000059000,
	ST_PROPERTIES_2 = 1000059001,
	ST_MEMORY_PROPERTIES_2 = 1000059006,
	ST_SUBGROUP_PROPERTIES = 1000094000,
	ST_MAINTENANCE3_PROPERTIES = 1000168000,
	ST_16BIT_STORAGE_FEATURES = 1000083000,
	ST_8BIT_STORAGE_FEATURES = 1000177000,
	ST_FLOAT16_INT8_FEATURES = 1000082000,
	ST_INTEGER_DOT_FEATURES = 1000280000,
	ST_PUSH_DESCRIPTOR_PROPERTIES = 1000080000,
	ST_MEMORY_BUDGET_PROPERTIES = 1000237000,
	ST_DRIVER_PROPERTIES = 1000196000,
	ST_SUBGROUP_SIZE_CONTROL_PROPERTIES = 1000225000,
	ST_SUBGROUP_SIZE_CONTROL_FEATURES = 1000225002,
	ST_VULKAN_MEMORY_MODEL_FEATURES = 1000211000,
	ST_COOP_MATRIX_FEATURES_KHR = 1000506000,
	ST_COOP_MATRIX_PROPERTIES_KHR = 1000506001,
	ST_COOP_MATRIX_2_FEATURES_NV = 1000593000,
	ST_COOP_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV = 1000593001,
	ST_COOP_MATRIX_2_PROPERTIES_NV = 1000593002,
	ST_SHADER_BFLOAT16_FEATURES_KHR = 1000141000,
	ST_DEBUG_UTILS_MESSENGER_CREATE_INFO = 1000128004,
	ST_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES = 1000269000,
	ST_PIPELINE_INFO_KHR = 1000269001,
	ST_PIPELINE_EXECUTABLE_PROPERTIES_KHR = 1000269002,
	ST_PIPELINE_EXECUTABLE_INFO_KHR = 1000269003,
	ST_PIPELINE_EXECUTABLE_STATISTIC_KHR = 1000269004,
};

typedef struct {
	uint32_t sType;
	void* pNext;
} chain_head;

// A feature structure: header then VkBool32 members (at most 8 here).
typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t v[8];
} feat;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t f[55];
} features2;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint64_t props[128]; // VkPhysicalDeviceProperties (824 bytes), not read here
} properties2;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t subgroupSize, supportedStages, supportedOperations, quadOperationsInAllStages;
} subgroup_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t minSubgroupSize, maxSubgroupSize, maxComputeWorkgroupSubgroups, requiredSubgroupSizeStages;
} sgsc_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t maxPushDescriptors;
} push_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t maxPerSetDescriptors;
	uint64_t maxMemoryAllocationSize;
} maintenance3_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t driverID;
	char driverName[256];
	char driverInfo[256];
	uint8_t conformance[4];
} driver_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint64_t mem[80]; // VkPhysicalDeviceMemoryProperties (520 bytes), not read here
} memory_properties2;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint64_t heapBudget[16];
	uint64_t heapUsage[16];
} budget_props;

typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t M, N, K, A, B, C, Result, saturating, scope;
} coop_props_khr;

// VkPhysicalDeviceCooperativeMatrix2PropertiesNV
typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t maxWorkgroupSize, maxDimension, reservedSharedMemory;
} coop2_props;

// VkCooperativeMatrixFlexibleDimensionsPropertiesNV
typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t MGranularity, NGranularity, KGranularity, A, B, C, Result, saturating, scope, workgroupInvocations;
} coop2_flex_props;

typedef void (*pfn_features2)(vkc_handle, void*);
typedef void (*pfn_properties2)(vkc_handle, void*);
typedef int (*pfn_coop_props)(vkc_handle, uint32_t*, coop_props_khr*);
typedef int (*pfn_coop2_flex_props)(vkc_handle, uint32_t*, coop2_flex_props*);

// The feature structures of one chain, in one allocation.
typedef struct {
	features2 f2;
	feat s16, s8, f16i8, intdot, sgsc, vmm, coop, bf16, pexec, coop2;
} feature_chain;

static void link(chain_head** tail, void* s, uint32_t stype) {
	chain_head* h = (chain_head*)s;
	h->sType = stype;
	h->pNext = NULL;
	(*tail)->pNext = h;
	*tail = h;
}

static void build_chain(feature_chain* c, const vkc_wants* w) {
	memset(c, 0, sizeof *c);
	c->f2.sType = ST_FEATURES_2;
	chain_head* tail = (chain_head*)&c->f2;
	if (w->want_16bit) link(&tail, &c->s16, ST_16BIT_STORAGE_FEATURES);
	if (w->want_8bit) link(&tail, &c->s8, ST_8BIT_STORAGE_FEATURES);
	if (w->want_f16i8) link(&tail, &c->f16i8, ST_FLOAT16_INT8_FEATURES);
	if (w->want_intdot) link(&tail, &c->intdot, ST_INTEGER_DOT_FEATURES);
	if (w->want_sgsc) link(&tail, &c->sgsc, ST_SUBGROUP_SIZE_CONTROL_FEATURES);
	if (w->want_vmm) link(&tail, &c->vmm, ST_VULKAN_MEMORY_MODEL_FEATURES);
	if (w->want_coop) link(&tail, &c->coop, ST_COOP_MATRIX_FEATURES_KHR);
	if (w->want_bf16) link(&tail, &c->bf16, ST_SHADER_BFLOAT16_FEATURES_KHR);
	if (w->want_pexec) link(&tail, &c->pexec, ST_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES);
	// VK_NV_cooperative_matrix2 requires VK_KHR_cooperative_matrix: never one without the other.
	if (w->want_coop && w->want_coop2) link(&tail, &c->coop2, ST_COOP_MATRIX_2_FEATURES_NV);
}

// coop2_on: the device may have VK_NV_cooperative_matrix2 enabled (w allows it, and it reports
// cooperative matrices and at least one of the extension's features).
static int coop2_on(const vkc_wants* w, const vkc_caps* caps) {
	if (!w->want_coop || !w->want_coop2 || !caps->coop_matrix) return 0;
	for (int i = 0; i < 7; i++)
		if (caps->coop2_features[i]) return 1;
	return 0;
}

int vkc_query_caps(vkc_handle instance, vkc_handle pd, const vkc_wants* w, vkc_caps* caps) {
	memset(caps, 0, sizeof *caps);
	pfn_features2 getf = (pfn_features2)iproc(instance, "vkGetPhysicalDeviceFeatures2", "vkGetPhysicalDeviceFeatures2KHR");
	pfn_properties2 getp = (pfn_properties2)iproc(instance, "vkGetPhysicalDeviceProperties2", "vkGetPhysicalDeviceProperties2KHR");
	if (!getf || !getp) return -7; // VK_ERROR_EXTENSION_NOT_PRESENT

	feature_chain fc;
	build_chain(&fc, w);
	getf(pd, &fc.f2);
	memcpy(caps->core_features, fc.f2.f, sizeof caps->core_features);
	caps->storage_buffer16 = fc.s16.v[0];
	caps->uniform_and_storage_buffer16 = fc.s16.v[1];
	caps->storage_push_constant16 = fc.s16.v[2];
	caps->storage_buffer8 = fc.s8.v[0];
	caps->uniform_and_storage_buffer8 = fc.s8.v[1];
	caps->shader_float16 = fc.f16i8.v[0];
	caps->shader_int8 = fc.f16i8.v[1];
	caps->integer_dot = fc.intdot.v[0];
	caps->subgroup_size_control = fc.sgsc.v[0];
	caps->compute_full_subgroups = fc.sgsc.v[1];
	caps->vulkan_memory_model = fc.vmm.v[0];
	caps->vulkan_memory_model_device_scope = fc.vmm.v[1];
	caps->coop_matrix = fc.coop.v[0];
	caps->bf16_type = fc.bf16.v[0];
	caps->bf16_dot = fc.bf16.v[1];
	caps->bf16_coop_matrix = fc.bf16.v[2];
	if (w->want_coop && w->want_coop2 && caps->coop_matrix)
		memcpy(caps->coop2_features, fc.coop2.v, sizeof caps->coop2_features);
	int coop2 = coop2_on(w, caps);

	properties2 p2;
	subgroup_props sg;
	sgsc_props sc;
	push_props pp;
	driver_props dp;
	maintenance3_props m3;
	coop2_props c2;
	memset(&m3, 0, sizeof m3);
	memset(&c2, 0, sizeof c2);
	memset(&p2, 0, sizeof p2);
	memset(&sg, 0, sizeof sg);
	memset(&sc, 0, sizeof sc);
	memset(&pp, 0, sizeof pp);
	memset(&dp, 0, sizeof dp);
	p2.sType = ST_PROPERTIES_2;
	chain_head* tail = (chain_head*)&p2;
	link(&tail, &sg, ST_SUBGROUP_PROPERTIES);
	link(&tail, &m3, ST_MAINTENANCE3_PROPERTIES);
	if (w->want_sgsc) link(&tail, &sc, ST_SUBGROUP_SIZE_CONTROL_PROPERTIES);
	if (w->want_push) link(&tail, &pp, ST_PUSH_DESCRIPTOR_PROPERTIES);
	if (w->want_driver) link(&tail, &dp, ST_DRIVER_PROPERTIES);
	if (coop2) link(&tail, &c2, ST_COOP_MATRIX_2_PROPERTIES_NV);
	getp(pd, &p2);
	caps->subgroup_size = sg.subgroupSize;
	caps->subgroup_stages = sg.supportedStages;
	caps->subgroup_ops = sg.supportedOperations;
	caps->min_subgroup_size = sc.minSubgroupSize;
	caps->max_subgroup_size = sc.maxSubgroupSize;
	caps->max_compute_workgroup_subgroups = sc.maxComputeWorkgroupSubgroups;
	caps->max_push_descriptors = pp.maxPushDescriptors;
	caps->max_per_set_descriptors = m3.maxPerSetDescriptors;
	caps->max_memory_allocation_size = m3.maxMemoryAllocationSize;
	caps->driver_id = dp.driverID;
	memcpy(caps->driver_name, dp.driverName, sizeof caps->driver_name);
	memcpy(caps->driver_info, dp.driverInfo, sizeof caps->driver_info);
	caps->driver_name[255] = 0;
	caps->driver_info[255] = 0;
	caps->coop2_max_workgroup_size = c2.maxWorkgroupSize;
	caps->coop2_max_dimension = c2.maxDimension;
	caps->coop2_reserved_shared = c2.reservedSharedMemory;

	if (w->want_budget) vkc_query_budget(instance, pd, caps->heap_budget, caps->heap_usage);

	int res = 0;
	if (w->want_coop && caps->coop_matrix) {
		pfn_coop_props getc = (pfn_coop_props)iproc(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", NULL);
		if (getc) {
			coop_props_khr props[VKC_MAX_COOP];
			memset(props, 0, sizeof props);
			for (int i = 0; i < VKC_MAX_COOP; i++) props[i].sType = ST_COOP_MATRIX_PROPERTIES_KHR;
			uint32_t n = VKC_MAX_COOP;
			res = getc(pd, &n, props); // VK_INCOMPLETE (5) keeps the first VKC_MAX_COOP
			if (res >= 0) {
				caps->n_coop = n;
				for (uint32_t i = 0; i < n; i++) {
					vkc_coop_shape* s = &caps->coop[i];
					s->m = props[i].M;
					s->n = props[i].N;
					s->k = props[i].K;
					s->a = props[i].A;
					s->b = props[i].B;
					s->c = props[i].C;
					s->result = props[i].Result;
					s->saturating = props[i].saturating;
					s->scope = props[i].scope;
				}
			}
		}
	}
	// VK_NV_cooperative_matrix2's flexible dimensions. A failed query leaves the list empty (the
	// features stay as reported; Go decides what a device without entries gets). Its result is
	// not returned: the extension is optional.
	if (coop2) {
		pfn_coop2_flex_props getf2 = (pfn_coop2_flex_props)iproc(instance,
			"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV", NULL);
		if (getf2) {
			coop2_flex_props props[VKC_MAX_COOP];
			memset(props, 0, sizeof props);
			for (int i = 0; i < VKC_MAX_COOP; i++) props[i].sType = ST_COOP_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
			uint32_t n = VKC_MAX_COOP;
			int r = getf2(pd, &n, props); // VK_INCOMPLETE (5) keeps the first VKC_MAX_COOP
			if (r >= 0) {
				caps->n_coop2 = n;
				for (uint32_t i = 0; i < n; i++) {
					vkc_coop2_shape* s = &caps->coop2[i];
					s->mgran = props[i].MGranularity;
					s->ngran = props[i].NGranularity;
					s->kgran = props[i].KGranularity;
					s->a = props[i].A;
					s->b = props[i].B;
					s->c = props[i].C;
					s->result = props[i].Result;
					s->saturating = props[i].saturating;
					s->scope = props[i].scope;
					s->workgroup_invocations = props[i].workgroupInvocations;
				}
			}
		}
	}
	return res;
}

void vkc_query_budget(vkc_handle instance, vkc_handle pd, uint64_t* budget, uint64_t* usage) {
	pfn_properties2 getm = (pfn_properties2)iproc(instance, "vkGetPhysicalDeviceMemoryProperties2", "vkGetPhysicalDeviceMemoryProperties2KHR");
	if (!getm) return;
	memory_properties2 m2;
	budget_props b;
	memset(&m2, 0, sizeof m2);
	memset(&b, 0, sizeof b);
	m2.sType = ST_MEMORY_PROPERTIES_2;
	b.sType = ST_MEMORY_BUDGET_PROPERTIES;
	m2.pNext = &b;
	getm(pd, &m2);
	memcpy(budget, b.heapBudget, sizeof b.heapBudget);
	memcpy(usage, b.heapUsage, sizeof b.heapUsage);
}

void* vkc_feature_chain(const vkc_wants* w, const vkc_caps* caps) {
	feature_chain* c = malloc(sizeof *c);
	if (!c) return NULL;
	build_chain(c, w);
	// Core features: only those kernels use. robustBufferAccess stays off: it costs speed and
	// the compiler's bounds are static.
	c->f2.f[39] = caps->core_features[39]; // shaderFloat64
	c->f2.f[40] = caps->core_features[40]; // shaderInt64
	c->f2.f[41] = caps->core_features[41]; // shaderInt16
	c->s16.v[0] = caps->storage_buffer16;
	c->s16.v[1] = caps->uniform_and_storage_buffer16;
	c->s16.v[2] = caps->storage_push_constant16;
	c->s8.v[0] = caps->storage_buffer8;
	c->s8.v[1] = caps->uniform_and_storage_buffer8;
	c->f16i8.v[0] = caps->shader_float16;
	c->f16i8.v[1] = caps->shader_int8;
	c->intdot.v[0] = caps->integer_dot;
	c->sgsc.v[0] = caps->subgroup_size_control;
	c->sgsc.v[1] = caps->compute_full_subgroups;
	c->vmm.v[0] = caps->vulkan_memory_model;
	c->vmm.v[1] = caps->vulkan_memory_model_device_scope;
	c->coop.v[0] = caps->coop_matrix;
	c->bf16.v[0] = caps->bf16_type;
	c->bf16.v[1] = caps->bf16_dot;
	// bf16 matrices need both extensions' features; without cooperative matrices enabled the
	// feature must stay off.
	c->bf16.v[2] = caps->bf16_coop_matrix && w->want_coop && caps->coop_matrix;
	// VK_NV_cooperative_matrix2: every feature the device reports (the structure is chained only
	// with want_coop and want_coop2; Go enables the extension under the same condition).
	if (coop2_on(w, caps))
		memcpy(c->coop2.v, caps->coop2_features, sizeof caps->coop2_features);
	// Go sets want_pexec only where the feature exists (vkc_pipeline_executable_info).
	c->pexec.v[0] = 1; // pipelineExecutableInfo
	return c;
}

void vkc_free_chain(void* chain) { free(chain); }

// ---- debug utils

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t flags;
	const char* pMessageIdName;
	int32_t messageIdNumber;
	const char* pMessage;
	// labels and objects follow; not read
} callback_data;

typedef uint32_t (*pfn_callback)(uint32_t severity, uint32_t types, const callback_data* data, void* user);

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t messageSeverity;
	uint32_t messageType;
	pfn_callback pfnUserCallback;
	void* pUserData;
} messenger_create_info;

static uint32_t debug_callback(uint32_t severity, uint32_t types, const callback_data* data, void* user) {
	vkcGoDebugMessage((uint64_t)(uintptr_t)user, severity, types,
		(char*)(data && data->pMessageIdName ? data->pMessageIdName : ""),
		(char*)(data && data->pMessage ? data->pMessage : ""));
	return 0; // VK_FALSE: do not abort the call
}

static void fill_messenger(messenger_create_info* ci, uint64_t tag) {
	memset(ci, 0, sizeof *ci);
	ci->sType = ST_DEBUG_UTILS_MESSENGER_CREATE_INFO;
	ci->messageSeverity = 0x100 | 0x1000; // WARNING | ERROR
	ci->messageType = 0x1 | 0x2 | 0x4;    // GENERAL | VALIDATION | PERFORMANCE
	ci->pfnUserCallback = debug_callback;
	ci->pUserData = (void*)(uintptr_t)tag;
}

void* vkc_messenger_info(uint64_t tag) {
	messenger_create_info* ci = malloc(sizeof *ci);
	if (ci) fill_messenger(ci, tag);
	return ci; // freed by the caller with free()
}

typedef int (*pfn_create_messenger)(vkc_handle, const messenger_create_info*, const void*, vkc_handle*);
typedef void (*pfn_destroy_messenger)(vkc_handle, vkc_handle, const void*);

int vkc_create_messenger(vkc_handle instance, uint64_t tag, vkc_handle* out) {
	pfn_create_messenger f = (pfn_create_messenger)iproc(instance, "vkCreateDebugUtilsMessengerEXT", NULL);
	if (!f) return -7;
	messenger_create_info ci;
	fill_messenger(&ci, tag);
	return f(instance, &ci, NULL, out);
}

void vkc_destroy_messenger(vkc_handle instance, vkc_handle messenger) {
	pfn_destroy_messenger f = (pfn_destroy_messenger)iproc(instance, "vkDestroyDebugUtilsMessengerEXT", NULL);
	if (f && messenger) f(instance, messenger, NULL);
}

// ---- hot path

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t flags;
	const void* pInheritanceInfo;
} begin_info;

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t srcAccessMask, dstAccessMask;
} memory_barrier;

typedef struct {
	uint32_t sType;
	const void* pNext;
	vkc_handle dstSet;
	uint32_t dstBinding, dstArrayElement, descriptorCount, descriptorType;
	const void* pImageInfo;
	const vkc_buffer_info* pBufferInfo;
	const void* pTexelBufferView;
} write_descriptor_set;

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t waitSemaphoreCount;
	const void* pWaitSemaphores;
	const uint32_t* pWaitDstStageMask;
	uint32_t commandBufferCount;
	const vkc_handle* pCommandBuffers;
	uint32_t signalSemaphoreCount;
	const void* pSignalSemaphores;
} submit_info;

typedef struct {
	uint64_t srcOffset, dstOffset, size;
} buffer_copy;

struct vkc_device {
	vkc_handle device, queue;
	int (*BeginCommandBuffer)(vkc_handle, const begin_info*);
	int (*EndCommandBuffer)(vkc_handle);
	int (*ResetCommandBuffer)(vkc_handle, uint32_t);
	void (*CmdBindPipeline)(vkc_handle, uint32_t, vkc_handle);
	void (*CmdBindDescriptorSets)(vkc_handle, uint32_t, vkc_handle, uint32_t, uint32_t, const vkc_handle*, uint32_t, const uint32_t*);
	void (*CmdPushDescriptorSetKHR)(vkc_handle, uint32_t, vkc_handle, uint32_t, uint32_t, const write_descriptor_set*);
	void (*CmdPushConstants)(vkc_handle, vkc_handle, uint32_t, uint32_t, uint32_t, const void*);
	void (*CmdDispatch)(vkc_handle, uint32_t, uint32_t, uint32_t);
	void (*CmdDispatchIndirect)(vkc_handle, vkc_handle, uint64_t);
	void (*CmdPipelineBarrier)(vkc_handle, uint32_t, uint32_t, uint32_t, uint32_t, const memory_barrier*, uint32_t, const void*, uint32_t, const void*);
	void (*CmdWriteTimestamp)(vkc_handle, uint32_t, vkc_handle, uint32_t);
	void (*CmdResetQueryPool)(vkc_handle, vkc_handle, uint32_t, uint32_t);
	void (*CmdCopyBuffer)(vkc_handle, vkc_handle, vkc_handle, uint32_t, const buffer_copy*);
	void (*CmdFillBuffer)(vkc_handle, vkc_handle, uint64_t, uint64_t, uint32_t);
	int (*QueueSubmit)(vkc_handle, uint32_t, const submit_info*, vkc_handle);
	int (*WaitForFences)(vkc_handle, uint32_t, const vkc_handle*, uint32_t, uint64_t);
	int (*GetFenceStatus)(vkc_handle, vkc_handle);
	int (*ResetFences)(vkc_handle, uint32_t, const vkc_handle*);
	int (*GetQueryPoolResults)(vkc_handle, vkc_handle, uint32_t, uint32_t, size_t, void*, uint64_t, uint32_t);
	int (*CreateComputePipelines)(vkc_handle, vkc_handle, uint32_t, const void*, const void*, vkc_handle*);
	// VK_KHR_pipeline_executable_properties, NULL unless enabled
	int (*GetPipelineExecutablePropertiesKHR)(vkc_handle, const void*, uint32_t*, void*);
	int (*GetPipelineExecutableStatisticsKHR)(vkc_handle, const void*, uint32_t*, void*);
	uint32_t pipeline_flags; // VkPipelineCreateFlags of every compute pipeline
};

typedef vkc_void_fn (*pfn_gdpa)(vkc_handle, const char*);

vkc_device* vkc_device_new(vkc_handle instance, vkc_handle device, vkc_handle queue, int push_descriptors,
	int pipeline_stats) {
	pfn_gdpa gdpa = (pfn_gdpa)gipa(instance, "vkGetDeviceProcAddr");
	if (!gdpa) return NULL;
	vkc_device* d = calloc(1, sizeof *d);
	if (!d) return NULL;
	d->device = device;
	d->queue = queue;
#define LOAD(name)                                                   \
	*(vkc_void_fn*)&d->name = gdpa(device, "vk" #name);               \
	if (!d->name) {                                                   \
		free(d);                                                      \
		return NULL;                                                  \
	}
	LOAD(BeginCommandBuffer)
	LOAD(EndCommandBuffer)
	LOAD(ResetCommandBuffer)
	LOAD(CmdBindPipeline)
	LOAD(CmdBindDescriptorSets)
	LOAD(CmdPushConstants)
	LOAD(CmdDispatch)
	LOAD(CmdDispatchIndirect)
	LOAD(CmdPipelineBarrier)
	LOAD(CmdWriteTimestamp)
	LOAD(CmdResetQueryPool)
	LOAD(CmdCopyBuffer)
	LOAD(CmdFillBuffer)
	LOAD(QueueSubmit)
	LOAD(WaitForFences)
	LOAD(GetFenceStatus)
	LOAD(ResetFences)
	LOAD(GetQueryPoolResults)
	LOAD(CreateComputePipelines)
	if (push_descriptors) {
		LOAD(CmdPushDescriptorSetKHR)
	}
	if (pipeline_stats) {
		LOAD(GetPipelineExecutablePropertiesKHR)
		LOAD(GetPipelineExecutableStatisticsKHR)
		d->pipeline_flags = 0x40; // VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
	}
#undef LOAD
	return d;
}

void vkc_device_free(vkc_device* d) { free(d); }

enum {
	STAGE_TOP = 0x1,
	STAGE_DRAW_INDIRECT = 0x2,
	ACCESS_INDIRECT_COMMAND_READ = 0x1,
	STAGE_COMPUTE = 0x800,
	STAGE_TRANSFER = 0x1000,
	STAGE_BOTTOM = 0x2000,
	STAGE_HOST = 0x4000,
	ACCESS_SHADER_READ = 0x20,
	ACCESS_SHADER_WRITE = 0x40,
	ACCESS_TRANSFER_READ = 0x800,
	ACCESS_TRANSFER_WRITE = 0x1000,
	ACCESS_HOST_READ = 0x2000,
	BIND_COMPUTE = 1,
	SHADER_STAGE_COMPUTE = 0x20,
	DESCRIPTOR_STORAGE_BUFFER = 7,
};

typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t srcAccessMask, dstAccessMask;
	uint32_t srcQueueFamilyIndex, dstQueueFamilyIndex;
	vkc_handle buffer;
	uint64_t offset, size;
} buffer_memory_barrier;

enum { ST_BUFFER_MEMORY_BARRIER = 44, MAX_RANGE_BARRIERS = 64 };

static void barrier(vkc_device* d, vkc_handle cb, uint32_t bits, const vkc_buffer_info* ranges, uint32_t nrange) {
	uint32_t src = 0, dst = 0, sa = 0, da = 0;
	if ((bits & 32) && nrange > 0 && nrange <= MAX_RANGE_BARRIERS) {
		// Compute to compute over the bytes the previous interval wrote (a study of whether a
		// driver makes these cheaper than a global barrier; see runtime's BarrierStudy benchmarks).
		buffer_memory_barrier bm[MAX_RANGE_BARRIERS];
		for (uint32_t i = 0; i < nrange; i++) {
			bm[i] = (buffer_memory_barrier){ST_BUFFER_MEMORY_BARRIER, NULL, ACCESS_SHADER_WRITE,
				ACCESS_SHADER_READ | ACCESS_SHADER_WRITE, ~0u, ~0u, ranges[i].buffer, ranges[i].offset, ranges[i].range};
		}
		d->CmdPipelineBarrier(cb, STAGE_COMPUTE, STAGE_COMPUTE, 0, 0, NULL, nrange, bm, 0, NULL);
		bits &= ~32u;
		if (!bits) return;
	} else if (bits & 32) {
		bits = (bits & ~32u) | 1; // no ranges, or too many: a global barrier
	}
	if (bits & 1) {
		src |= STAGE_COMPUTE;
		dst |= STAGE_COMPUTE;
		sa |= ACCESS_SHADER_WRITE;
		da |= ACCESS_SHADER_READ | ACCESS_SHADER_WRITE;
	}
	if (bits & 2) {
		// Inputs copied in; they include the group counts of indirect dispatches.
		src |= STAGE_TRANSFER;
		dst |= STAGE_COMPUTE | STAGE_DRAW_INDIRECT;
		sa |= ACCESS_TRANSFER_WRITE;
		da |= ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_INDIRECT_COMMAND_READ;
	}
	if (bits & 4) {
		src |= STAGE_COMPUTE;
		dst |= STAGE_TRANSFER;
		sa |= ACCESS_SHADER_WRITE;
		da |= ACCESS_TRANSFER_READ | ACCESS_TRANSFER_WRITE;
	}
	if (bits & 8) { // everything before, to everything after (between repetitions)
		src |= STAGE_COMPUTE | STAGE_TRANSFER;
		dst |= STAGE_COMPUTE | STAGE_TRANSFER;
		sa |= ACCESS_SHADER_WRITE | ACCESS_TRANSFER_WRITE;
		da |= ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_TRANSFER_READ | ACCESS_TRANSFER_WRITE;
	}
	if (bits & 16) { // device writes to the host
		src |= STAGE_COMPUTE | STAGE_TRANSFER;
		dst |= STAGE_HOST;
		sa |= ACCESS_SHADER_WRITE | ACCESS_TRANSFER_WRITE;
		da |= ACCESS_HOST_READ;
	}
	memory_barrier mb = {ST_MEMORY_BARRIER, NULL, sa, da};
	d->CmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

int vkc_record(vkc_device* d, vkc_handle cb, const vkc_cmd* cmds, uint32_t n,
	const vkc_buffer_info* infos, const uint8_t* push, vkc_handle qpool, uint32_t nquery,
	uint32_t reps, int ts_per_rep, int final_barrier_to_host) {
	int r = d->ResetCommandBuffer(cb, 0);
	if (r < 0) return r;
	begin_info bi = {ST_COMMAND_BUFFER_BEGIN_INFO, NULL, 0, NULL};
	r = d->BeginCommandBuffer(cb, &bi);
	if (r < 0) return r;
	if (qpool) {
		d->CmdResetQueryPool(cb, qpool, 0, nquery);
		d->CmdWriteTimestamp(cb, STAGE_TOP, qpool, 0);
	}
	write_descriptor_set writes[32];
	for (uint32_t rep = 0; rep < reps; rep++) {
		vkc_handle bound = NULL;
		if (rep > 0) barrier(d, cb, 8, NULL, 0);
		for (uint32_t i = 0; i < n; i++) {
			const vkc_cmd* c = &cmds[i];
			if (c->barrier_before) barrier(d, cb, c->barrier_before, infos + c->range_first, c->nrange);
			if (c->kind == 1) {
				buffer_copy bc = {c->src_off, c->dst_off, c->size};
				d->CmdCopyBuffer(cb, c->src, c->dst, 1, &bc);
			} else if (c->kind == 3) {
				d->CmdFillBuffer(cb, c->dst, c->dst_off, c->size, 0);
			} else {
				if (c->pipeline != bound) {
					d->CmdBindPipeline(cb, BIND_COMPUTE, c->pipeline);
					bound = c->pipeline;
				}
				if (c->set) {
					d->CmdBindDescriptorSets(cb, BIND_COMPUTE, c->layout, 0, 1, &c->set, 0, NULL);
				} else if (c->nbind > 0) {
					uint32_t nb = c->nbind > 32 ? 32 : c->nbind;
					for (uint32_t b = 0; b < nb; b++) {
						write_descriptor_set* w = &writes[b];
						memset(w, 0, sizeof *w);
						w->sType = ST_WRITE_DESCRIPTOR_SET;
						w->dstBinding = b;
						w->descriptorCount = 1;
						w->descriptorType = DESCRIPTOR_STORAGE_BUFFER;
						w->pBufferInfo = &infos[c->bind_first + b];
					}
					d->CmdPushDescriptorSetKHR(cb, BIND_COMPUTE, c->layout, 0, nb, writes);
				}
				if (c->push_size) {
					d->CmdPushConstants(cb, c->layout, SHADER_STAGE_COMPUTE, 0, c->push_size, push + c->push_first);
				}
				if (c->kind == 2) {
					d->CmdDispatchIndirect(cb, c->src, c->src_off);
				} else {
					d->CmdDispatch(cb, c->gx, c->gy, c->gz);
				}
			}
			if (qpool && c->timestamp_after >= 0) {
				d->CmdWriteTimestamp(cb, STAGE_BOTTOM, qpool, (uint32_t)c->timestamp_after);
			}
		}
		if (qpool && ts_per_rep) d->CmdWriteTimestamp(cb, STAGE_BOTTOM, qpool, rep + 1);
	}
	if (final_barrier_to_host) barrier(d, cb, 16, NULL, 0);
	return d->EndCommandBuffer(cb);
}

int vkc_submit(vkc_device* d, vkc_handle cb, vkc_handle fence) {
	submit_info si;
	memset(&si, 0, sizeof si);
	si.sType = ST_SUBMIT_INFO;
	si.commandBufferCount = 1;
	si.pCommandBuffers = &cb;
	return d->QueueSubmit(d->queue, 1, &si, fence);
}

static uint64_t now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int vkc_wait(vkc_device* d, vkc_handle fence, uint64_t spin_ns, uint64_t timeout_ns) {
	if (spin_ns) {
		uint64_t start = now_ns();
		for (;;) {
			int r = d->GetFenceStatus(d->device, fence);
			if (r != 1) return r; // VK_NOT_READY
			if (now_ns() - start >= spin_ns) break;
		}
	}
	return d->WaitForFences(d->device, 1, &fence, 1, timeout_ns);
}

int vkc_reset_fence(vkc_device* d, vkc_handle fence) { return d->ResetFences(d->device, 1, &fence); }

int vkc_timestamps(vkc_device* d, vkc_handle qpool, uint32_t first, uint32_t n, uint64_t* out) {
	// VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT
	return d->GetQueryPoolResults(d->device, qpool, first, n, (size_t)n * 8, out, 8, 1 | 2);
}

// ---- pipeline creation

// VkSpecializationMapEntry, VkSpecializationInfo, VkPipelineShaderStageCreateInfo,
// VkComputePipelineCreateInfo.
typedef struct {
	uint32_t constantID, offset;
	size_t size;
} spec_entry;
typedef struct {
	uint32_t mapEntryCount;
	const spec_entry* pMapEntries;
	size_t dataSize;
	const void* pData;
} spec_info;
typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t flags, stage;
	vkc_handle module;
	const char* pName;
	const spec_info* pSpecializationInfo;
} stage_info;
typedef struct {
	uint32_t sType;
	const void* pNext;
	uint32_t flags;
	stage_info stage;
	vkc_handle layout, basePipelineHandle;
	int32_t basePipelineIndex;
} compute_info;

int vkc_create_compute_pipeline(vkc_device* d, vkc_handle cache, vkc_handle module, const char* entry,
	vkc_handle layout, uint32_t nspec, const uint32_t* spec_ids, const uint32_t* spec_vals, vkc_handle* out) {
	spec_entry* entries = NULL;
	spec_info spec = {0};
	if (nspec > 0) {
		entries = calloc(nspec, sizeof *entries);
		if (!entries) return -1; // VK_ERROR_OUT_OF_HOST_MEMORY
		for (uint32_t i = 0; i < nspec; i++) {
			entries[i].constantID = spec_ids[i];
			entries[i].offset = 4 * i;
			entries[i].size = 4;
		}
		spec.mapEntryCount = nspec;
		spec.pMapEntries = entries;
		spec.dataSize = 4 * (size_t)nspec;
		spec.pData = spec_vals;
	}
	compute_info ci = {0};
	ci.sType = 29; // VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
	ci.flags = d->pipeline_flags;
	ci.stage.sType = 18; // VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
	ci.stage.stage = 0x20; // VK_SHADER_STAGE_COMPUTE_BIT
	ci.stage.module = module;
	ci.stage.pName = entry;
	ci.stage.pSpecializationInfo = nspec > 0 ? &spec : NULL;
	ci.layout = layout;
	ci.basePipelineIndex = -1;
	int r = d->CreateComputePipelines(d->device, cache, 1, &ci, NULL, out);
	free(entries);
	return r;
}

// ---- pipeline statistics

int vkc_pipeline_executable_info(vkc_handle instance, vkc_handle pd) {
	pfn_features2 getf = (pfn_features2)iproc(instance, "vkGetPhysicalDeviceFeatures2", "vkGetPhysicalDeviceFeatures2KHR");
	if (!getf) return 0;
	features2 f2;
	feat pe;
	memset(&f2, 0, sizeof f2);
	memset(&pe, 0, sizeof pe);
	f2.sType = ST_FEATURES_2;
	chain_head* tail = (chain_head*)&f2;
	link(&tail, &pe, ST_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES);
	getf(pd, &f2);
	return (int)pe.v[0];
}

// VkPipelineInfoKHR, VkPipelineExecutablePropertiesKHR, VkPipelineExecutableInfoKHR,
// VkPipelineExecutableStatisticKHR.
typedef struct {
	uint32_t sType;
	const void* pNext;
	vkc_handle pipeline;
} pipeline_info;
typedef struct {
	uint32_t sType;
	void* pNext;
	uint32_t stages;
	char name[256];
	char description[256];
	uint32_t subgroupSize;
} executable_props;
typedef struct {
	uint32_t sType;
	const void* pNext;
	vkc_handle pipeline;
	uint32_t executableIndex;
} executable_info;
typedef struct {
	uint32_t sType;
	void* pNext;
	char name[256];
	char description[256];
	uint32_t format; // VkPipelineExecutableStatisticFormatKHR
	union {
		uint32_t b32;
		int64_t i64;
		uint64_t u64;
		double f64;
	} value;
} executable_statistic;

enum { MAX_EXECUTABLES = 8, MAX_STATISTICS = 64 };

int vkc_pipeline_statistics(vkc_device* d, vkc_handle pipeline, vkc_statistic* out, uint32_t* n) {
	uint32_t cap = *n, got = 0;
	*n = 0;
	if (!d->GetPipelineExecutableStatisticsKHR) return -7; // VK_ERROR_EXTENSION_NOT_PRESENT
	pipeline_info pi = {ST_PIPELINE_INFO_KHR, NULL, pipeline};
	executable_props props[MAX_EXECUTABLES];
	memset(props, 0, sizeof props);
	for (int i = 0; i < MAX_EXECUTABLES; i++) props[i].sType = ST_PIPELINE_EXECUTABLE_PROPERTIES_KHR;
	uint32_t nexec = MAX_EXECUTABLES;
	int r = d->GetPipelineExecutablePropertiesKHR(d->device, &pi, &nexec, props);
	if (r < 0) return r;
	int incomplete = r == 5; // VK_INCOMPLETE
	executable_statistic* st = calloc(MAX_STATISTICS, sizeof *st); // 34 KiB: not on the stack
	if (!st) return -1; // VK_ERROR_OUT_OF_HOST_MEMORY
	for (uint32_t e = 0; e < nexec; e++) {
		executable_info ei = {ST_PIPELINE_EXECUTABLE_INFO_KHR, NULL, pipeline, e};
		memset(st, 0, MAX_STATISTICS * sizeof *st);
		for (int i = 0; i < MAX_STATISTICS; i++) st[i].sType = ST_PIPELINE_EXECUTABLE_STATISTIC_KHR;
		uint32_t ns = MAX_STATISTICS;
		r = d->GetPipelineExecutableStatisticsKHR(d->device, &ei, &ns, st);
		if (r < 0) break;
		incomplete |= r == 5 || ns > cap - got;
		for (uint32_t i = 0; i < ns && got < cap; i++) {
			vkc_statistic* o = &out[got++];
			memcpy(o->name, st[i].name, sizeof o->name);
			memcpy(o->description, st[i].description, sizeof o->description);
			o->name[255] = o->description[255] = 0;
			switch (st[i].format) {
			case 0: o->value = st[i].value.b32; break;
			case 1: o->value = (double)st[i].value.i64; break;
			case 2: o->value = (double)st[i].value.u64; break;
			default: o->value = st[i].value.f64; break; // 3: FLOAT64
			}
		}
	}
	free(st);
	*n = got;
	if (r < 0) return r;
	return incomplete ? 5 : 0;
}
