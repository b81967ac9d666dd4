/* cuda_internal.h - the driver layer's internal interface (not installed).
 *
 * The ground floor under contexts and the allocator: runtime/cuda.c includes
 * this header and the public ctx.h (for the prototypes of the two public
 * functions it defines), never runtime/internal.h, so the driver table does
 * not depend on anything above it. Other files get it through internal.h.
 */
#ifndef L8_RUNTIME_CUDA_INTERNAL_H
#define L8_RUNTIME_CUDA_INTERNAL_H

#include <stddef.h>
#include <cuda.h>                 /* types and enums only: nothing links libcuda */
#include "runtime/status.h"

/* ---- cuda.c: the driver layer ----
 * libcuda.so.1 is opened with dlopen on first use and every entry point is
 * resolved once through cuGetProcAddress at a pinned API version. No other
 * file calls the driver except through l8i_cu and L8_CU. */
typedef struct l8_cuda_api {
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*cuMemFreeHost)(void *);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned int, int);
    CUresult (*cuStreamGetPriority)(CUstream, int *);
    CUresult (*cuCtxGetStreamPriorityRange)(int *, int *);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    /* CUDA graphs (runtime/graph.c). Optional: all NULL when the driver lacks
     * any of them; l8i_cuda_has_graphs() says which. */
    CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphExecUpdate)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
    CUresult (*cuGraphUpload)(CUgraphExec, CUstream);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    /* Launches with attributes (programmatic dependent launch, runtime/ctx.c).
     * Optional: NULL when the driver lacks it; launches then use cuLaunchKernel. */
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    /* A captured graph's kernel nodes, read back (l8i_graph_kernel_priorities).
     * Optional one by one, like cuLaunchKernelEx. */
    CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*cuGraphNodeGetType)(CUgraphNode, CUgraphNodeType *);
    CUresult (*cuGraphKernelNodeGetAttribute)(CUgraphNode, CUkernelNodeAttrID,
                                              CUkernelNodeAttrValue *);
    /* A chain of copies of a captured graph (l8_graph_launch_repeat).
     * Optional: without them a repeat launches the graph n times. */
    CUresult (*cuGraphCreate)(CUgraph *, unsigned int);
    CUresult (*cuGraphAddChildGraphNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                         CUgraph);
    /* How many clusters of a launch can run at once (l8i_max_clusters).
     * Optional: without it no launch is sized by it. */
    CUresult (*cuOccupancyMaxActiveClusters)(int *, CUfunction, const CUlaunchConfig *);
} l8_cuda_api;

/* Load the driver once (thread-safe). L8_OK, or L8_ERR_NO_DEVICE with the
 * reason (no libcuda.so.1, cuInit failed, no device) in the last error. */
l8_status l8i_cuda_load(void);
/* The resolved table; valid only after l8i_cuda_load returned L8_OK. */
extern l8_cuda_api l8i_cu;
/* 1 when the driver has every graph entry point of the table (after a
 * successful l8i_cuda_load), else 0. */
int l8i_cuda_has_graphs(void);
/* Turn a CUresult into a status and last-error record. */
l8_status l8i_cu_check(CUresult r, const char *call, const char *file, int line);
/* Call a driver function through the table: L8_CU(cuMemAlloc, &p, n) -> l8_status. */
#define L8_CU(fn, ...) l8i_cu_check(l8i_cu.fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

/* One loader for the three libraries' function tables: for each entry,
 * lookup(ctx, name) gives the address, stored at table + off. A missing
 * required entry stops the load (L8_ERR_NO_DEVICE, "<lib> has no <name>" in
 * why); a missing optional one stays NULL. The driver looks names up through
 * cuGetProcAddress, cuBLASLt and NCCL through dlsym (l8i_dlsym_lookup). */
typedef struct l8i_sym { const char *name; size_t off; int optional; } l8i_sym;
/* (For the driver table, write the entry directly: an extra macro level
 * would expand cuda.h's versioned names before they are stringified.) */
#define L8I_SYM(type, fn, opt) { #fn, offsetof(type, fn), (opt) }
typedef void *(*l8i_lookup_fn)(void *ctx, const char *name);
l8_status l8i_sym_table_load(const char *lib, l8i_lookup_fn lookup, void *ctx, const l8i_sym *e,
                             size_t n, void *table, char *why, size_t why_n);
void *l8i_dlsym_lookup(void *handle, const char *name);

/* cuBLASLt and NCCL, dlopen'ed on first use. L8_OK with the handle for
 * dlsym, or L8_ERR_NO_DEVICE saying what was tried. */
l8_status l8i_cublaslt_open(void **handle);
l8_status l8i_nccl_open(void **handle);

#endif
