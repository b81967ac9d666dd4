/* gather.h - row gather: dst[r, :] = src[idx[r], :], and the moves at a
 * device cursor that a step captured in a CUDA graph needs.
 *
 * What a training loop needs to draw a shuffled batch from a data set kept
 * on the device: the batch's rows are picked by an index tensor on the same
 * device, so no host copy and no synchronization per step.
 */
#ifndef L8_OPS_GATHER_H
#define L8_OPS_GATHER_H

#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[r, :] = src[idx[r], :] for r < R (=, not accumulated).
 *
 * src (N, C) and dst (R, C): tensors of one context and one dtype (any:
 * bytes are copied, an FP8 tensor's meta is left alone); a 1-d tensor is
 * taken as one column, (N) as (N, 1). Each row must be contiguous (stride 1
 * on dim 1); the row strides are free (narrowed views work). idx: a
 * contiguous L8_I32 tensor of R elements, of the same context. Indices may
 * repeat. dst must not overlap src or idx.
 *
 * An index outside [0, N) (the kernel cannot return an error without a
 * synchronization) writes row r as zeros and, when bad is not NULL, adds 1
 * to bad: an L8_I32 tensor of one element of the same context, so a caller
 * can check a whole epoch's gathers with one read.
 *
 * GPU: enqueued on s (NULL: the compute stream); 16-byte loads and stores
 * when the row length, both row strides and both base addresses are
 * multiples of 16 bytes, byte copies otherwise (same result). Host context:
 * runs at once, same semantics.
 * Errors: L8_ERR_INVALID_ARG (NULL, ranks, shapes, dtypes, contexts, rows
 * not contiguous, overlap, R >= 2^31), L8_ERR_STATE (a storage not on the
 * device), L8_ERR_CUDA. Nothing is enqueued on an error. */
L8_NODISCARD l8_status l8_gather_rows(const l8_tensor *src, const l8_tensor *idx, l8_tensor *dst,
                                      l8_tensor *bad, l8_stream *s);

/* Moves at a device cursor: the row offset off = *cursor * stride is read
 * when the kernel runs, not when it is enqueued, so one launch captured in
 * a CUDA graph works on another slice at each replay. cursor: an L8_I32
 * tensor of one element of the context (the optimizer's step cursor,
 * l8_optim_cursor in ops/optim.h, counts a loop's steps); stride in
 * [0, 2^31). Shapes, dtypes, strides, overlap (dst and bad with every
 * input, the cursor included), bad and the stream as for l8_gather_rows.
 * Errors: those of l8_gather_rows, and the cursor's (NULL, dtype, size,
 * context) and the stride's. */

/* dst[r, :] = src[idx[off + r], :] for r < R = dst's rows: the rows of step
 * *cursor when idx holds an epoch's order batch after batch (stride = the
 * batch size). idx: contiguous i32 of any length L >= 1. A position off + r
 * outside [0, L) or an index outside [0, N) writes row r as zeros and counts
 * in bad. */
L8_NODISCARD l8_status l8_gather_rows_at(const l8_tensor *src, const l8_tensor *idx,
                                         const l8_tensor *cursor, int64_t stride, l8_tensor *dst,
                                         l8_tensor *bad, l8_stream *s);

/* dst[off + r, :] = src[r, :] for r < R = src's rows: a step's per-row
 * results (losses) filed at their place in the epoch's. dst (M, C): a row
 * off + r outside [0, M) is not written and counts in bad. */
L8_NODISCARD l8_status l8_put_rows_at(l8_tensor *dst, const l8_tensor *cursor, int64_t stride,
                                      const l8_tensor *src, l8_tensor *bad, l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_GATHER_H */
