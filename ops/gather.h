/* gather.h - row gather: dst[r, :] = src[idx[r], :].
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

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_GATHER_H */
