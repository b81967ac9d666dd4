/* loss.h - softmax cross-entropy for classifiers, forward and backward in
 * one pass.
 *
 * For each row t of logits [T, C] (C >= classes; columns at or past
 * `classes` are padding, e.g. a last Linear layer padded to a multiple of 16
 * for FP8, and are ignored):
 *     p          = softmax(logits[t, :classes])        (f32, max-subtracted)
 *     row_loss[t] = -log p[label[t]]                    (= overwritten)
 *     row_hit[t]  = 1 if argmax (first maximum) == label[t], else 0   (=)
 *     dlogits[t, c] = grad_scale * (p[c] - [c == label[t]])  for c < classes,
 *                     0 for padding columns                      (=)
 * Per-row outputs instead of a reduced sum keep the result deterministic;
 * the caller sums T values (they are small).
 *
 * Tensors: logits and dlogits F32 or BF16 (same dtype), contiguous, 2-D;
 * labels [T] U8 or I32; row_loss [T] F32; row_hit [T] I32; dlogits may be
 * NULL (evaluation). All of one context; enqueued on s (NULL: compute).
 * Errors: L8_ERR_INVALID_ARG (shapes, dtypes, classes out of 1..C, a label
 * >= classes is reported by the host path only: the kernel writes NaN loss
 * for it), L8_ERR_CUDA.
 */
#ifndef L8_OPS_LOSS_H
#define L8_OPS_LOSS_H

#include "runtime/status.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

L8_NODISCARD l8_status l8_softmax_xent(const l8_tensor *logits, const l8_tensor *labels,
                                       int classes, float grad_scale, l8_tensor *dlogits,
                                       l8_tensor *row_loss, l8_tensor *row_hit, l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif
