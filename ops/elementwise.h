/* elementwise.h - small elementwise ops: dtype conversion, accumulate, GELU
 * forward and backward.
 *
 * What the Linear layer and a training loop need around the GEMMs: the f32
 * master weight -> bf16 copy once per step, bias-gradient accumulation over
 * micro-batches, the activation between two Linears, inputs converted to
 * bf16.
 *
 * Common rules (as ops/cast.h):
 *  - tensors are contiguous, of one context; shapes need not match, the
 *    element counts must (the ops are flat); a given stream belongs to that
 *    context (NULL: the compute stream). Enqueued on the stream; on a host
 *    context they run at once. The tensors' storages are recorded on the
 *    stream (l8_storage_record_stream): releasing one right after the call
 *    is safe on any stream.
 *  - floating dtypes are L8_F32, L8_BF16, L8_F16; values are widened to f32
 *    exactly, computed in f32 with IEEE round-to-nearest (no contraction into
 *    FMAs), and rounded once to the output dtype (RNE, subnormals kept, NaN
 *    stays NaN - the GPU's NaN bit pattern may differ from the host's).
 *  - outputs are written (=) and must not overlap the inputs except where a
 *    function says so.
 *  - Errors: L8_ERR_INVALID_ARG (NULL, dtype, element counts, contexts,
 *    non-contiguous), L8_ERR_STATE (a storage not on the device),
 *    L8_ERR_CUDA. Nothing is enqueued on an error.
 *
 * Host and GPU agree bit for bit for l8_convert and l8_add_into; the GELU
 * kernels use the GPU's ex2.approx for exp, so they agree to about 1e-6
 * relative (before rounding to the output dtype).
 */
#ifndef L8_OPS_ELEMENTWISE_H
#define L8_OPS_ELEMENTWISE_H

#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = out_dtype(in[i]). in and out: F32, BF16 or F16 in any
 * combination (same dtype: a plain copy). */
L8_NODISCARD l8_status l8_convert(const l8_tensor *in, l8_tensor *out, l8_stream *s);

/* l8_convert of n pairs in[i] -> out[i] in as few launches as possible (one
 * for up to 16 pairs): the same results. For the per-step conversions of
 * many small tensors (every layer's bias), where a launch costs more than
 * its work. n is 0..L8_CONVERT_MANY_MAX; all on one context. Errors: those
 * of l8_convert, naming the pair; nothing is enqueued unless every pair
 * passes. */
#define L8_CONVERT_MANY_MAX 64
L8_NODISCARD l8_status l8_convert_many(int n, const l8_tensor *const *in,
                                       l8_tensor *const *out, l8_stream *s);

/* y[i] = y[i] + x[i] (accumulated, not overwritten): F32, BF16 or F16 in
 * any combination, added in f32 and rounded once to y's dtype. */
L8_NODISCARD l8_status l8_add_into(l8_tensor *y, const l8_tensor *x, l8_stream *s);

/* y = gelu(x), the tanh approximation (PyTorch's approximate="tanh"):
 *     gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))). y may be x
 * itself (same tensor, same dtype: in place). */
L8_NODISCARD l8_status l8_gelu(const l8_tensor *x, l8_tensor *y, l8_stream *s);

/* dx = dy * gelu'(x) (=, not accumulated); x is the forward input. dx may
 * be dy itself (in place). */
L8_NODISCARD l8_status l8_gelu_backward(const l8_tensor *x, const l8_tensor *dy, l8_tensor *dx,
                                        l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_ELEMENTWISE_H */
