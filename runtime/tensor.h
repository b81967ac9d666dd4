/* tensor.h - refcounted storages and tensor views.
 *
 * A storage owns one allocation on one context's device (from the caching
 * allocator) and is refcounted. A tensor is a view: a storage, a byte
 * offset, a dtype, up to 4 dimensions with element strides, and for FP8 a
 * reference to its scaling metadata. A view never caches a raw data pointer:
 * l8_tensor_data() resolves it through the storage each time, so when the
 * storage's bytes move (offload and restore) every view follows.
 *
 * Ownership: every l8_tensor* returned to the caller is owned by the caller
 * and released with l8_tensor_destroy(); each view holds one reference on its
 * storage (and on its FP8 metadata), so views outlive the tensor they were
 * taken from. Shapes and strides are int64 element counts; strides may be 0
 * (broadcast) but not negative.
 *
 * Bad input (negative or overflowing sizes, bad reshapes, out-of-range
 * slices, dtype mismatches) gives L8_ERR_INVALID_ARG and changes nothing.
 * A call that fails sets its `out` pointer to NULL and holds no reference.
 *
 * Every view satisfies: offset + (bytes up to its farthest element) <=
 * storage bytes, offset a multiple of the dtype size, and the product of
 * its non-zero dimensions times the dtype size fits in int64. An empty view
 * (numel 0) made by narrow/slice keeps its parent's offset.
 *
 * Accessors given NULL return 0, -1 (dim/stride), NULL, or an invalid dtype.
 */
#ifndef L8_TENSOR_H
#define L8_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define L8_MAX_DIMS 4

/* Append-only; values are part of the ABI. */
typedef enum l8_dtype {
    L8_F32 = 0,
    L8_BF16 = 1,
    L8_F16 = 2,
    L8_E4M3 = 3,
    L8_E5M2 = 4,
    L8_I32 = 5,
    L8_U8 = 6,
    L8_DTYPE_INVALID = -1         /* what a dtype query answers for bad input */
} l8_dtype;
#define L8_DTYPE_COUNT 7

size_t l8_dtype_size(l8_dtype dt);            /* 0 for an invalid dtype */
const char *l8_dtype_name(l8_dtype dt);       /* "f32", ...; "invalid" */
int l8_dtype_is_fp8(l8_dtype dt);

typedef struct l8_storage l8_storage;
typedef struct l8_tensor l8_tensor;
typedef struct l8_fp8_meta l8_fp8_meta;

/* Where a storage's bytes are. Offload (runtime/offload.h) moves a storage
 * DEVICE -> IN_FLIGHT (copy to the host; the device bytes stay valid and
 * readable) -> HOST (device memory released) -> IN_FLIGHT (copy back; not
 * readable until restored) -> DEVICE. Every view follows its storage. */
typedef enum l8_storage_state {
    L8_STORAGE_DEVICE = 0,        /* on the context's device (or host backend memory) */
    L8_STORAGE_HOST = 1,          /* copied out; device memory released */
    L8_STORAGE_IN_FLIGHT = 2      /* a copy between the two is in progress */
} l8_storage_state;

/* ---- storages ---- */
/* Allocate `bytes` (may be 0) for use on stream s (NULL: compute stream).
 * The contents are undefined. Refcount 1, owned by the caller.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_storage_create(l8_ctx *ctx, size_t bytes, l8_stream *s, l8_storage **out);
/* The same, with the allocation recorded under the trace tag `tag` (pushed
 * for the call only; see alloc/trace.h). Errors: as above, and those of
 * l8_tag_push / l8_tag_pop (nothing is left allocated then). */
L8_NODISCARD l8_status l8_storage_create_tagged(l8_ctx *ctx, size_t bytes, l8_stream *s,
                                                const char *tag, l8_storage **out);
void l8_storage_retain(l8_storage *st);
/* Drop a reference; the last one frees the memory back to the allocator
 * (stream-ordered: later work on the storage's stream is safe). NULL: no-op. */
void l8_storage_release(l8_storage *st);
size_t l8_storage_bytes(const l8_storage *st);
int l8_storage_refcount(const l8_storage *st);
l8_ctx *l8_storage_ctx(const l8_storage *st);
/* Read atomically: a reader on another thread sees one consistent state. */
l8_storage_state l8_storage_state_of(const l8_storage *st);
/* Resident storages are never offloaded (parameter groups mark their master
 * and main_grad buffers, FP8 metadata is always resident). NULL: no-op / 0. */
void l8_storage_set_resident(l8_storage *st, int resident);
int l8_storage_is_resident(const l8_storage *st);
/* Current device pointer (NULL for a 0-byte storage); also while a copy to
 * the host is in flight (the device bytes are valid; do not write them
 * before the restore). Errors: L8_ERR_STATE (offloaded to the host, or on
 * its way back: restore it first), L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_storage_data(const l8_storage *st, void **ptr);
/* The storage is (also) used on stream s: its memory is not reused before
 * that work completes. A no-op for its own allocation stream. Every lean8
 * op does this for the tensors it is given (their storages and FP8 metas)
 * on the stream it runs on, so a tensor may be released right after the
 * call that uses it, whatever the stream; call it yourself for work of your
 * own on a storage's memory.
 * Errors: L8_ERR_INVALID_ARG (s of another context), L8_ERR_STATE (not on
 * the device). */
L8_NODISCARD l8_status l8_storage_record_stream(l8_storage *st, l8_stream *s);

/* ---- FP8 scaling metadata: scale, scale_inv, amax as device f32 scalars ---- */
/* Created with scale = scale_inv = 1, amax = 0 (enqueued on the compute
 * stream). Refcount 1. Errors: L8_ERR_OOM, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_fp8_meta_create(l8_ctx *ctx, l8_fp8_meta **out);
void l8_fp8_meta_retain(l8_fp8_meta *m);
void l8_fp8_meta_release(l8_fp8_meta *m);       /* NULL: no-op */
/* Device pointers to the three f32 scalars, each 16-byte aligned, 16 bytes
 * apart: scale, then scale_inv, then amax (what cuBLASLt's FP8 scale and
 * amax pointers require, so GEMMs use them in place). */
float *l8_fp8_meta_scale(const l8_fp8_meta *m);
float *l8_fp8_meta_scale_inv(const l8_fp8_meta *m);
float *l8_fp8_meta_amax(const l8_fp8_meta *m);
/* Blocking host read/write of the three values through the compute stream.
 * get: any output pointer may be NULL. Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_fp8_meta_get(l8_fp8_meta *m, float *scale, float *scale_inv, float *amax);
L8_NODISCARD l8_status l8_fp8_meta_set(l8_fp8_meta *m, float scale, float scale_inv, float amax);

/* ---- tensors ---- */
/* A new contiguous tensor with a new storage. ndim 0..4 (0: a scalar).
 * Errors: L8_ERR_INVALID_ARG (dtype, ndim, negative or overflowing shape), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_tensor_empty(l8_ctx *ctx, l8_dtype dt, int ndim, const int64_t *shape,
                                        l8_tensor **out);
/* A view over an existing storage; strides NULL = contiguous. Every element
 * reachable through shape and strides must lie inside the storage.
 * Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_tensor_from_storage(l8_storage *st, size_t byte_offset, l8_dtype dt,
                                               int ndim, const int64_t *shape,
                                               const int64_t *strides, l8_tensor **out);
void l8_tensor_destroy(l8_tensor *t);           /* NULL: no-op */

l8_dtype l8_tensor_dtype(const l8_tensor *t);
int l8_tensor_ndim(const l8_tensor *t);
int64_t l8_tensor_dim(const l8_tensor *t, int d);     /* -1 if d out of range */
int64_t l8_tensor_stride(const l8_tensor *t, int d);  /* -1 if d out of range */
int64_t l8_tensor_numel(const l8_tensor *t);
size_t l8_tensor_nbytes(const l8_tensor *t);          /* numel * dtype size */
size_t l8_tensor_offset(const l8_tensor *t);          /* bytes into the storage */
int l8_tensor_is_contiguous(const l8_tensor *t);
l8_storage *l8_tensor_storage(const l8_tensor *t);    /* borrowed */
l8_ctx *l8_tensor_ctx(const l8_tensor *t);
/* Pointer to element 0, resolved through the storage now. Do not keep it
 * across operations that may move the storage. Errors: L8_ERR_STATE. */
L8_NODISCARD l8_status l8_tensor_data(const l8_tensor *t, void **ptr);

/* FP8 metadata: attach (retains m; releases any previous one; m NULL
 * detaches) or read (borrowed, NULL if none). Views made later share it;
 * views made earlier keep what they had. Errors: L8_ERR_INVALID_ARG (not an
 * FP8 dtype, or m of another context). */
L8_NODISCARD l8_status l8_tensor_set_fp8_meta(l8_tensor *t, l8_fp8_meta *m);
l8_fp8_meta *l8_tensor_fp8_meta(const l8_tensor *t);

/* ---- views (new tensors sharing the storage and the FP8 metadata) ---- */
/* Elements [start, start+len) of dimension d: 0 <= start <= size, len >= 0,
 * start + len <= size. */
L8_NODISCARD l8_status l8_tensor_narrow(const l8_tensor *t, int d, int64_t start, int64_t len,
                                         l8_tensor **out);
/* Elements start, start+step, ... below stop of dimension d; step >= 1,
 * 0 <= start <= stop <= size. Strict: stop is not clamped to the size. */
L8_NODISCARD l8_status l8_tensor_slice(const l8_tensor *t, int d, int64_t start, int64_t stop,
                                        int64_t step, l8_tensor **out);
/* Same elements, new shape; one entry may be -1 (inferred; not when the
 * other entries multiply to 0). Needs strides compatible with the new shape
 * (PyTorch's view rule: dims that are contiguous with one another may be
 * merged and any dim split; always true for contiguous tensors); otherwise
 * L8_ERR_INVALID_ARG: make it contiguous first. An empty tensor reshapes to
 * contiguous strides (or keeps its own for the same shape). */
L8_NODISCARD l8_status l8_tensor_reshape(const l8_tensor *t, int ndim, const int64_t *shape,
                                          l8_tensor **out);
/* Swap dimensions d0 and d1 (a view; no data moves; d0 == d1 allowed). */
L8_NODISCARD l8_status l8_tensor_transpose(const l8_tensor *t, int d0, int d1, l8_tensor **out);

/* ---- copies (enqueued on s; NULL: the context's compute stream) ---- */
/* Streams: s must belong to the tensors' context. A storage touched on a
 * stream other than its allocation stream is recorded on it
 * (l8_storage_record_stream), so freeing it early is safe. */
/* dst = src elementwise; same shape and dtype, any strides, same context.
 * dst must not overlap src; conservatively, two non-empty views of one
 * storage overlap when their byte ranges [offset, offset + extent)
 * intersect, even if their elements interleave. dst must not be a
 * broadcast view (stride 0 on a dimension of size > 1).
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_STATE, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_tensor_copy(l8_tensor *dst, const l8_tensor *src, l8_stream *s);
/* A new contiguous tensor with src's elements (a copy even when src is
 * contiguous), allocated for use on s. FP8 metadata is shared.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM, L8_ERR_STATE, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_tensor_contiguous(const l8_tensor *src, l8_stream *s, l8_tensor **out);
/* Host <-> device for a contiguous tensor; bytes must equal l8_tensor_nbytes
 * (host may be NULL only when that is 0).
 * Blocks until done unless host memory is from the context's pinned pool.
 * Errors: L8_ERR_INVALID_ARG (size, not contiguous), L8_ERR_STATE, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_tensor_copy_from_host(l8_tensor *dst, const void *host, size_t bytes,
                                                 l8_stream *s);
L8_NODISCARD l8_status l8_tensor_copy_to_host(const l8_tensor *src, void *host, size_t bytes,
                                               l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_TENSOR_H */
