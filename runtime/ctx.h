/* ctx.h - devices, contexts, streams and events.
 *
 * A context is bound to one device, "cuda:N" or "host". It owns three
 * streams (compute, comm, copy), a caching device allocator and a pinned-host
 * pool. On the CUDA backend it retains the device's primary context and its
 * streams are non-blocking; on the host backend work runs at once in the
 * calling thread and events are always complete.
 *
 * Work crosses streams only through events: record an event on the producer
 * stream, make the consumer stream wait on it.
 *
 * Thread safety: a context may be used from several threads; each call makes
 * the device's context current on the calling thread.
 */
#ifndef L8_CTX_H
#define L8_CTX_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "alloc/alloc.h"
#include "alloc/pinned.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_ctx l8_ctx;
typedef struct l8_stream l8_stream;
typedef struct l8_event l8_event;

typedef enum l8_backend { L8_BACKEND_HOST = 0, L8_BACKEND_CUDA = 1 } l8_backend;
typedef enum l8_stream_kind {
    L8_STREAM_COMPUTE = 0,
    L8_STREAM_COMM = 1,
    L8_STREAM_COPY = 2
} l8_stream_kind;

typedef struct l8_ctx_config {
    size_t size;                  /* sizeof(l8_ctx_config) */
    const char *device;           /* "cuda:N", "cuda" (= cuda:0), "host"; NULL: L8_DEVICE, else
                                     cuda:LOCAL_RANK when CUDA is usable (the launcher's local
                                     rank, comm.h; 0 without a launcher), else host */
    size_t memory_limit;          /* device allocator cap in bytes; 0: none */
    size_t pinned_limit;          /* pinned pool cap; 0: none */
    const l8_segment_provider *provider;  /* NULL: the backend's own (tests inject faults here) */
    const char *trace_path;       /* a trace file of this context's own (%r rank, %p pid; see
                                     alloc/trace.h); NULL: the process-wide L8_TRACE trace */
    unsigned high_priority;       /* the streams whose kernels go first, a mask of
                                     1u << l8_stream_kind (e.g. 1u << L8_STREAM_COMPUTE for a
                                     critical path on compute and helpers on comm and copy):
                                     they get the device's greatest stream priority, the
                                     others the default. When an SM frees up, the GPU starts
                                     waiting blocks of a high-priority stream's kernels
                                     before the others' (running blocks are never stopped),
                                     and a CUDA graph keeps each kernel's priority from the
                                     stream it was captured on (graph.h). 0: every stream the
                                     default (the host backend only checks the mask) */
} l8_ctx_config;
#define L8_CTX_CONFIG_INIT { sizeof(l8_ctx_config), NULL, 0, 0, NULL, NULL, 0u }
/* Fill *cfg with the defaults of L8_CTX_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_ctx_config_init(l8_ctx_config *cfg);

/* Create a context. cfg may be NULL; a config of an older, smaller size
 * (without trace_path or high_priority) is accepted. The caller owns *out. With trace_path,
 * the context writes its own trace (header device = its device), destroyed
 * with the context; its streams are registered with whichever trace it uses
 * so events name them compute/comm/copy.
 * Errors: L8_ERR_INVALID_ARG (malformed device string or trace path, a
 * high_priority bit that names no stream),
 * L8_ERR_NO_DEVICE (cuda asked for but no driver/GPU, or N out of range),
 * L8_ERR_CUDA, L8_ERR_OOM, L8_ERR_IO (the trace file: see l8_trace_create). */
L8_NODISCARD l8_status l8_ctx_create(const l8_ctx_config *cfg, l8_ctx **out);

/* Synchronize all streams, release the allocator, the pool, the streams and
 * the primary context. NULL: no-op.
 * Every storage of the context (tensors, parameter groups, GEMM handles,
 * optimizers, pinned blocks: whatever holds its memory) must be released
 * first. When some are still alive, the context is NOT destroyed (their later
 * release would touch freed memory): the last error becomes L8_ERR_STATE
 * "l8_ctx_destroy: N device blocks ... still alive", the same line goes to
 * stderr, and the context stays valid; destroy them, then the context. */
void l8_ctx_destroy(l8_ctx *ctx);

/* What a live context is and holds; it owns every object returned (the
 * stream of each kind included). ctx must not be NULL, except for
 * l8_ctx_stream (NULL for a NULL ctx or an unknown kind). */
l8_backend l8_ctx_backend(const l8_ctx *ctx);
int l8_ctx_device(const l8_ctx *ctx);                 /* CUDA ordinal, -1 for host */
const char *l8_ctx_device_name(const l8_ctx *ctx);    /* "NVIDIA H200" / "host" */
l8_alloc *l8_ctx_allocator(l8_ctx *ctx);
l8_pinned *l8_ctx_pinned(l8_ctx *ctx);
l8_stream *l8_ctx_stream(l8_ctx *ctx, l8_stream_kind kind);
/* The trace the context records into (its own, else the L8_TRACE one), or
 * NULL when it records nothing. Owned by the context / the process: use it
 * for step marks (l8_trace_record(t, L8_TRACE_STEP, ...)) and flushes. */
l8_trace *l8_ctx_trace(l8_ctx *ctx);

/* Number of CUDA devices usable (0 without a driver or GPU; never fails). */
int l8_cuda_device_count(void);

/* The libraries lean8 opens at run time. */
typedef enum l8_library {
    L8_LIB_DRIVER = 0,            /* libcuda.so.1: version as cuDriverGetVersion (13000) */
    L8_LIB_CUBLASLT = 1,          /* libcublasLt: cublasLtGetVersion (130100) */
    L8_LIB_NCCL = 2               /* libnccl.so.2: ncclGetVersion (22800) */
} l8_library;

/* Load the library if not yet done and report its version and the path it
 * came from (*where, library-owned; on failure the reason). Never fails the
 * process: L8_ERR_NO_DEVICE when it is not there. */
L8_NODISCARD l8_status l8_library_info(l8_library lib, int *version, const char **where);

/* Block until all of ctx's streams are idle. Errors: L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_ctx_synchronize(l8_ctx *ctx);

/* ---- streams ---- */
/* The context s belongs to. NULL s: NULL. */
l8_ctx *l8_stream_ctx(const l8_stream *s);
/* The stream as the allocator knows it: the CUstream as an integer on CUDA,
 * a small distinct integer per stream kind on the host. */
l8_stream_id l8_stream_handle(const l8_stream *s);
L8_NODISCARD l8_status l8_stream_synchronize(l8_stream *s);
/* The stream's priority as the driver reports it (cuStreamGetPriority: lower
 * numbers go first; 0 is the default, the device's greatest is negative)
 * into *prio; 0 on the host backend. Errors:
 * L8_ERR_INVALID_ARG (NULL), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_stream_priority(const l8_stream *s, int *prio);
/* Enqueue on s a wait for e; does not block the host. Errors: L8_ERR_CUDA,
 * L8_ERR_INVALID_ARG (different contexts). */
L8_NODISCARD l8_status l8_stream_wait_event(l8_stream *s, l8_event *e);

/* ---- events ---- */
/* timing: 1 to allow l8_event_elapsed_ms (slower to record). */
L8_NODISCARD l8_status l8_event_create(l8_ctx *ctx, int timing, l8_event **out);
void l8_event_destroy(l8_event *e);                   /* NULL: no-op */
L8_NODISCARD l8_status l8_event_record(l8_event *e, l8_stream *s);
/* *done = 1 when the recorded work is complete (also for a never-recorded event). */
L8_NODISCARD l8_status l8_event_query(l8_event *e, int *done);
L8_NODISCARD l8_status l8_event_synchronize(l8_event *e);
/* Milliseconds between two completed timing events (0 on host). */
L8_NODISCARD l8_status l8_event_elapsed_ms(l8_event *start, l8_event *end, float *ms);

/* ---- raw memory (device memory from the caching allocator) ---- */
/* Allocate on stream s's free list. Errors: as l8_alloc_malloc. */
L8_NODISCARD l8_status l8_ctx_malloc(l8_ctx *ctx, size_t bytes, l8_stream *s, void **ptr);
L8_NODISCARD l8_status l8_ctx_free(l8_ctx *ctx, void *ptr);

/* Copies enqueued on s. Host pointers should come from the pinned pool for
 * the copy to be asynchronous; pageable host memory makes the call block
 * until the copy is done. kind is implied by the arguments' names.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_memcpy_htod(l8_stream *s, void *dst_dev, const void *src_host, size_t n);
L8_NODISCARD l8_status l8_memcpy_dtoh(l8_stream *s, void *dst_host, const void *src_dev, size_t n);
L8_NODISCARD l8_status l8_memcpy_dtod(l8_stream *s, void *dst_dev, const void *src_dev, size_t n);
/* Set n bytes of device memory to `value`. */
L8_NODISCARD l8_status l8_memset_d8(l8_stream *s, void *dst_dev, uint8_t value, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* L8_CTX_H */
