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
#include "runtime/cuda_internal.h"   /* the driver layer: l8i_cu, L8_CU */
#include "runtime/config_internal.h" /* L8I_CONFIG_COPY */

/* ---- versioned config structs: L8I_CONFIG_COPY is in config_internal.h ---- */

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
