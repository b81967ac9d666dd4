/* internal.h - runtime internals shared across files (not installed).
 * Grouped by the file that defines them.
 */
#ifndef L8_RUNTIME_INTERNAL_H
#define L8_RUNTIME_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>                 /* types and enums only: nothing links libcuda */
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

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
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
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
} l8_cuda_api;

/* Load the driver once (thread-safe). L8_OK, or L8_ERR_NO_DEVICE with the
 * reason (no libcuda.so.1, cuInit failed, no device) in the last error. */
l8_status l8i_cuda_load(void);
/* The resolved table; valid only after l8i_cuda_load returned L8_OK. */
extern l8_cuda_api l8i_cu;
/* Turn a CUresult into a status and last-error record. */
l8_status l8i_cu_check(CUresult r, const char *call, const char *file, int line);
/* Call a driver function through the table: L8_CU(cuMemAlloc, &p, n) -> l8_status. */
#define L8_CU(fn, ...) l8i_cu_check(l8i_cu.fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

/* cuBLASLt and NCCL, dlopen'ed on first use. L8_OK with the handle for
 * dlsym, or L8_ERR_NO_DEVICE saying what was tried. */
l8_status l8i_cublaslt_open(void **handle);
l8_status l8i_nccl_open(void **handle);

/* ---- versioned config structs (first member: size_t size) ----
 * c holds the defaults; when cfg is not NULL it becomes *cfg, after checking
 * that the caller's struct is as large as ours (L8_ERR_INVALID_ARG "<fn>:
 * cfg->size N, wanted M (use <init>)" otherwise). Returns from the caller. */
#define L8I_CONFIG_COPY(c, cfg, fn, init)                                                     \
    do {                                                                                      \
        if (cfg) {                                                                            \
            if ((cfg)->size < sizeof(c))                                                      \
                return L8_FAIL(L8_ERR_INVALID_ARG, "%s: cfg->size %zu, wanted %zu (use %s)",  \
                               (fn), (cfg)->size, sizeof(c), (init));                         \
            (c) = *(cfg);                                                                     \
            (c).size = sizeof(c);                                                             \
        }                                                                                     \
    } while (0)

/* ---- tensor.c: storage residency, driven by offload.c ---- */
struct l8_storage;
/* The stream the storage's blocks are allocated on (and freed against). */
l8_stream *l8i_storage_stream(const struct l8_storage *st);
/* The device block now held (NULL in HOST state or for 0 bytes). */
void *l8i_storage_block(const struct l8_storage *st);
/* Publish a new residency in one atomic store: state, the device block
 * (8-byte aligned; NULL when released) and whether l8_storage_data may hand
 * it out. The caller owns the transitions (offload.c, under its lock). */
void l8i_storage_set(struct l8_storage *st, l8_storage_state state, void *block, int readable);

/* ---- ctx.c: contexts and kernels ---- */
/* The stream an op runs on: *s, or ctx's compute stream when *s is NULL.
 * L8_ERR_INVALID_ARG ("<fn>: the stream belongs to another context") when *s
 * is another context's. */
l8_status l8i_resolve_stream(const char *fn, l8_ctx *ctx, l8_stream **s);
/* Make ctx's CUDA context current on this thread (no-op on host). */
l8_status l8i_ctx_bind(l8_ctx *ctx);
CUstream l8i_stream_cu(const l8_stream *s);

/* A kernel from an embedded PTX module (`module` is the ptx/<name>.ptx
 * basename, `kernel` its .entry name). The module is JIT-loaded once per
 * context with cuModuleLoadDataEx; the JIT error log goes into the last
 * error. Errors: L8_ERR_UNSUPPORTED (host context), L8_ERR_CUDA. */
l8_status l8i_kernel(l8_ctx *ctx, const char *module, const char *kernel, CUfunction *out);
/* Launch on s with cuLaunchKernel argument pointers. */
l8_status l8i_launch(l8_stream *s, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned smem, void **args);

/* dst[i] = src[i] over an ndim (<= 4) index space of `shape`, with element
 * strides for each side, elements of elem_size bytes (1, 2, 4 or 8), on s.
 * Host backend: a C loop now. CUDA: cuMemcpyDtoDAsync when both sides are
 * dense and alike, else the strided-copy kernel (ptx/copy.ptx). */
l8_status l8i_copy_strided(l8_stream *s, void *dst, const int64_t *dst_strides, const void *src,
                           const int64_t *src_strides, const int64_t *shape, int ndim,
                           size_t elem_size);

#endif
