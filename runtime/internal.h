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
#include "runtime/params.h"          /* l8_params, l8_grad_ready_fn */
#include "runtime/cuda_internal.h"   /* the driver layer: l8i_cu, L8_CU */
#include "runtime/config_internal.h" /* L8I_CONFIG_COPY */

/* ---- versioned config structs: L8I_CONFIG_COPY is in config_internal.h ---- */

/* ---- status.c ---- */
/* One line on stderr: "lean8: warning: <message>" (a problem the library
 * handled, so no error status: an ignored cache file, a refused graph chain). */
void l8i_warn(const char *fmt, ...) L8_PRINTF(1, 2);

/* ---- tensor.c ---- */
/* t is non-NULL, contiguous and (ctx not NULL) a tensor of ctx; else
 * L8_ERR_INVALID_ARG "<op>: <name> is NULL / belongs to another context / is
 * not contiguous". */
l8_status l8i_need_tensor(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx);
/* An op is about to enqueue work on s that reads or writes t[0..n) (NULL
 * entries are skipped): record each tensor's storage, and its FP8 meta's,
 * on s (l8_storage_record_stream), so that a caller who releases them before
 * s has run that work never sees their memory handed out again under it. A
 * storage allocated on s costs one compare. Call after l8_tensor_data has
 * accepted the tensors. Errors: those of l8_storage_record_stream (L8_ERR_OOM
 * for host memory); nothing is enqueued. */
l8_status l8i_tensors_use(l8_stream *s, const l8_tensor *const *t, int n);

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

/* ---- graph.c ---- */
struct l8_graph;
/* The priority of each kernel node of g's last captured graph (the
 * driver's order), in prio[0..cap): the stream priority each kernel was
 * captured with, which a launch keeps (the graph is instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY). *n is the kernel count,
 * also when it exceeds cap. For tests. Errors: L8_ERR_STATE (nothing
 * captured), L8_ERR_UNSUPPORTED (the host backend, or a driver without
 * cuGraphGetNodes / cuGraphNodeGetType / cuGraphKernelNodeGetAttribute),
 * L8_ERR_OOM, L8_ERR_CUDA. */
l8_status l8i_graph_kernel_priorities(const struct l8_graph *g, int *prio, size_t cap, size_t *n);
/* For tests only: with on != 0 every chain l8_graph_launch_repeat builds
 * from then on fails as a refusing driver's would (L8_ERR_CUDA), so the
 * fallback to single launches runs; 0 restores the driver's answer. For
 * all graphs of the process. */
void l8i_graph_refuse_chain(int on);

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
/* l8i_kernel for a kernel launched with smem bytes of dynamic shared memory.
 * Above the default 48 KiB, the function's maximum is raised to smem the
 * first time (cuFuncSetAttribute, once per context and function rather than
 * on every launch), so that launches, captured ones too, only pass smem.
 * Errors: those of l8i_kernel; L8_ERR_INTERNAL past 32 such functions. */
l8_status l8i_kernel_smem(l8_ctx *ctx, const char *module, const char *kernel, unsigned smem,
                          CUfunction *out);
/* Launch on s with cuLaunchKernel argument pointers; with programmatic
 * dependent launch where the context uses it (l8i_ctx_pdl): the kernel
 * must begin with griddepcontrol.wait (every ptx/ entry does). */
l8_status l8i_launch(l8_stream *s, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned smem, void **args);
/* l8i_launch in clusters of (1, cy, 1) CTAs (cy 1: no cluster); cy must
 * divide gy, at most 8 (the portable cluster size), and the context must
 * have clusters (l8i_ctx_clusters), else L8_ERR_INTERNAL: a caller's bug. */
l8_status l8i_launch_cluster(l8_stream *s, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned cy, unsigned smem,
                             void **args);
/* 1 when ctx's kernels launch with programmatic dependent launch (CUDA, sm_90
 * on, a driver with cuLaunchKernelEx, L8_PDL not 0), else 0. */
int l8i_ctx_pdl(const l8_ctx *ctx);
/* 1 when ctx can launch thread block clusters (CUDA, sm_90 on, a driver with
 * cuLaunchKernelEx), else 0. */
int l8i_ctx_clusters(const l8_ctx *ctx);
/* *out: how many clusters of (1, cy, 1) CTAs of bx threads and smem bytes
 * of dynamic shared memory can run on ctx's device at once
 * (cuOccupancyMaxActiveClusters, asked once per context and configuration);
 * 0 where the context has no clusters, the driver lacks the query, or cy is
 * not 2..8. f's shared memory maximum must allow smem (l8i_kernel_smem).
 * Errors: L8_ERR_CUDA. */
l8_status l8i_max_clusters(l8_ctx *ctx, CUfunction f, unsigned bx, unsigned cy, unsigned smem,
                           unsigned *out);
/* Multiprocessors of ctx's device (a CUDA context), asked once per device;
 * what capped grids are sized from. Errors: L8_ERR_CUDA. */
l8_status l8i_sm_count(l8_ctx *ctx, unsigned *out);
/* Shared memory of one multiprocessor of ctx's device in bytes, asked once
 * per device: a launch that asks for more than half of it runs at most one
 * CTA a multiprocessor. Errors: L8_ERR_CUDA. */
l8_status l8i_sm_smem(l8_ctx *ctx, unsigned *out);

/* dst[i] = src[i] over an ndim (<= 4) index space of `shape`, with element
 * strides for each side, elements of elem_size bytes (1, 2, 4 or 8), on s.
 * Host backend: a C loop now. CUDA: cuMemcpyDtoDAsync when both sides are
 * dense and alike, else the strided-copy kernel (ptx/copy.ptx). */
l8_status l8i_copy_strided(l8_stream *s, void *dst, const int64_t *dst_strides, const void *src,
                           const int64_t *src_strides, const int64_t *shape, int ndim,
                           size_t elem_size);

/* ---- interleave.c ----
 * Move `world` blocks of `rows` x `chunk` bytes between the two layouts a
 * last-dimension collective needs, on stream s (NULL not allowed here):
 *   L8I_INTERLEAVE  (after an all-gather):   src [world][rows][chunk] -> dst [rows][world][chunk]
 *   L8I_DEINTERLEAVE (before a reduce-scatter): src [rows][world][chunk] -> dst [world][rows][chunk]
 * dst and src must not overlap. Any sizes (chunk >= 1 byte, rows >= 0, world >= 1); any
 * alignment (16-byte vectors when chunk, src and dst allow it; other chunks of 64 bytes
 * and more: 16-byte stores with shifted loads, a warp per chunk; shorter ones 8/4/2/1).
 * dst and src are memory of s's context (device pointers; host memory on the host
 * backend); the call enqueues on s and does not block. The caller owns both buffers.
 * Host backend: memcpy per row chunk, done on return. CUDA: ptx/interleave.ptx.in, one pass
 * (one launch up to 2^30 words or chunks; longer chunks go through the driver's copy).
 * Errors: L8_ERR_INVALID_ARG (NULL s/dst/src even when rows is 0, overlap, world < 1,
 * rows < 0, chunk 0, an unknown dir, world x rows x chunk beyond size_t), L8_ERR_CUDA. */
typedef enum { L8I_INTERLEAVE = 0, L8I_DEINTERLEAVE = 1 } l8i_interleave_dir;
l8_status l8i_interleave(l8_stream *s, void *dst, const void *src, int64_t world, int64_t rows,
                         size_t chunk, l8i_interleave_dir dir);
/* For tests only: the most words (segment kernel: chunks) one kernel launch
 * moves (default 2^30, the kernels' 32-bit index bound); a smaller value
 * makes l8i_interleave split even small problems into several launches (and
 * chunks of more words, or more than 16 x words bytes, into driver copies),
 * so tests reach those paths. 0 restores the default. Not
 * thread-safe against concurrent l8i_interleave calls. */
void l8i_interleave_set_launch_words(uint32_t words);

/* ---- deps.c: dependents ----
 * An object that keeps a pointer to a parameter group (a DDP reducer, an
 * optimizer, a layer reporting into it) or to a communicator (a reducer, a
 * tensor-parallel layer, a recipe's or optimizer's reduce hook over it)
 * attaches after it is made and detaches in its destroy. Destroying the
 * group or communicator calls lost(obj) for each one still attached, newest
 * first, before it frees anything: the object drops its pointer and refuses
 * later calls that need it with L8_ERR_STATE, and its own destroy still
 * works. lost() must not call into what is being destroyed. */
typedef struct l8i_deps {
    struct l8i_dep *v;
    int n, cap;
} l8i_deps;
/* Errors: L8_ERR_OOM (the message names `what`). */
L8_NODISCARD l8_status l8i_deps_add(l8i_deps *d, void (*lost)(void *obj), void *obj,
                                    const char *what);
void l8i_deps_remove(l8i_deps *d, void *obj);   /* not in the list: no-op */
void l8i_deps_notify(l8i_deps *d);              /* lost() each, newest first; empties, frees */

/* ---- params.c, comm.c: the dependents of a group and of a communicator ---- */
typedef struct l8_comm l8_comm;   /* runtime/comm.h */
L8_NODISCARD l8_status l8i_params_attach(l8_params *g, void (*lost)(void *obj), void *obj);
void l8i_params_detach(l8_params *g, void *obj);
L8_NODISCARD l8_status l8i_comm_attach(l8_comm *c, void (*lost)(void *obj), void *obj);
void l8i_comm_detach(l8_comm *c, void *obj);
/* The installed grad-ready callback (NULL: none) and its arg. */
l8_grad_ready_fn l8i_params_grad_ready_cb(const l8_params *g, void **arg);

#endif
