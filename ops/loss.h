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

/* The same for a batch padded to a fixed size, as a step captured in a CUDA
 * graph needs when a pass ends in a partial batch: the batch is step k =
 * *cursor (read when the kernel runs) of a pass over `total` rows in batches
 * of `stride` rows, so its first
 *     valid = min(T, max(0, total - k * stride))
 * rows are real and the rest padding. Real rows get the outputs above with
 * the gradient scale grad_scale / valid (f32, rounded once: grad_scale = 1
 * gives the mean over the real rows, bit for bit l8_softmax_xent of those
 * rows with grad_scale 1.0f / valid); padding rows get row_loss 0, row_hit
 * 0 and dlogits 0, and their labels are not read. Gradients summed over
 * the batch's rows downstream (a weight gradient, a bias gradient) thus
 * equal those of the real rows alone, whatever the padding rows hold.
 *
 * cursor: an L8_I32 tensor of one element of the context (the optimizer's
 * step cursor, l8_optim_cursor in ops/optim.h); stride in [1, 2^31), total
 * in [0, 2^62). Everything else as l8_softmax_xent; the host path checks
 * the real rows' labels only.
 * Errors: those of l8_softmax_xent, and the cursor's (NULL, dtype, size,
 * context), the stride's and the total's (L8_ERR_INVALID_ARG). */
L8_NODISCARD l8_status l8_softmax_xent_at(const l8_tensor *logits, const l8_tensor *labels,
                                          int classes, float grad_scale,
                                          const l8_tensor *cursor, int64_t stride,
                                          int64_t total, l8_tensor *dlogits,
                                          l8_tensor *row_loss, l8_tensor *row_hit,
                                          l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif
