/* cast.h - FP8 cast, cast + transpose (+ dbias), dequantize, transpose, and
 * the delayed-scaling update.
 *
 * Every op takes l8_tensor views and a stream and is enqueued on that stream
 * (NULL: the context's compute stream); on a host context it runs at once in
 * the calling thread with the host reference, which is the same arithmetic
 * as the GPU kernels (ptx/cast.ptx, cast_transpose.ptx.in,
 * cast_transpose_sm.ptx.in for tensors of up to 64 128 x 128 tiles,
 * transpose.ptx.in, dequantize.ptx, scale_update.ptx), bit for bit except
 * for NaN payloads.
 *
 * Common rules:
 *  - All tensors of a call belong to one context, and a given stream to it.
 *    Their storages and FP8 metas are recorded on the stream
 *    (l8_storage_record_stream), so releasing a tensor right after the call
 *    is safe on any stream.
 *  - Tensors must be contiguous (make a strided view contiguous first);
 *    rows/cols below mean: cols = the last dimension, rows = numel / cols.
 *    One exception, the GEMM-ready padded layout: the outputs of the
 *    cast_transpose ops (not of the _many group op) - out_t [cols, rows]
 *    and, when out_t is given, out [rows, cols] - and out of
 *    l8_fp8_transpose may instead be row-padded: a 2-D view with strides
 *    [ld, 1], ld > its last dimension n, ld % 16 == 0 and its data 16-B
 *    aligned - e.g. l8_tensor_narrow of a [m, ld] tensor to its first n
 *    columns. Columns n .. N16 - 1 of each row, N16 = n rounded up to 16,
 *    are then written with zeros (in out_t a cast's fp8(0 * scale): 0x00,
 *    0x80 for a negative scale, NaN codes for a non-finite one, as in its
 *    data), and the columns from N16 on are never written. So odd sizes
 *    can feed an FP8 GEMM, which
 *    wants K % 16 == 0 and ld % 16 == 0 (cuBLASLt): X^T and dY^T padded to
 *    rows rounded up to 16 make a wgrad over an odd token count add exact
 *    zeros, X padded to cols rounded up the same for an odd K. Every store
 *    into a padded output is an aligned block, which makes it the faster
 *    layout for such shapes (docs/perf.md has what each shape runs at); a
 *    padded out's zeros are written by the same kernel, after its tiles.
 *    Padded outputs take the 128 x 128 tile kernel, never the small-tile
 *    one (the _act ops then run unfused).
 *  - High-precision tensors are L8_F32, L8_BF16 or L8_F16; FP8 tensors are
 *    L8_E4M3 or L8_E5M2 and carry an l8_fp8_meta (scale, scale_inv, amax:
 *    device f32 scalars, see runtime/tensor.h).
 *  - Quantize: q = fp8(f32(x) * scale) with cvt.rn.satfinite (runtime/fp8.h):
 *    round to nearest even, saturate to +-max, NaN -> L8_FP8_NAN_BYTE.
 *  - Amax is max |x| of the UNSCALED input by the bit-pattern rule of
 *    runtime/fp8.h (a NaN anywhere makes it NaN). It is overwritten (the word is
 *    zeroed on the stream first, by a one-CTA kernel launched just before the
 *    cast's) unless L8_CAST_ACCUMULATE_AMAX is given, in which case it is
 *    max-accumulated with what the meta holds.
 *  - L8_CAST_FEW_SMS (the single-tensor casts, not the group op): the same
 *    bytes, amax and dbias from the 128 x 128 tile kernel, a CTA a tile,
 *    instead of the small-tile kernel's many CTAs: for a cast on a second
 *    stream next to GEMMs (the macro below says more).
 *  - Every quantizing op also writes scale_inv = 1 / scale (IEEE reciprocal)
 *    into the output's meta, so the FP8 data and its scale_inv always match.
 *  - Shapes and alignment: any rows and cols, any byte offset, never an
 *    error. The fastest paths want 16-B aligned data (tensors from
 *    l8_tensor_empty are), cols % 8 == 0 (16 for l8_fp8_transpose) and rows
 *    % 16 == 0; other shapes and offsets take the word-load and shifted-store
 *    paths of the transposing kernels (ptx/cast_transpose.ptx.in,
 *    ptx/transpose_p2.ptx.inc) - docs/perf.md has what each costs on an H200.
 *  - Errors: L8_ERR_INVALID_ARG for wrong dtypes, shapes, contexts, missing
 *    metas, non-contiguous tensors (and padded ones that break the rules
 *    above: ld % 16 != 0, unaligned data), NULL where not allowed;
 *    L8_ERR_UNSUPPORTED for dimensions above the kernels' 32-bit limits;
 *    L8_ERR_STATE when a storage is not on the device (offloaded);
 *    L8_ERR_CUDA / L8_ERR_OOM from the device. On error nothing was enqueued
 *    unless the last error says a launch failed.
 */
#ifndef L8_OPS_CAST_H
#define L8_OPS_CAST_H

#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of the quantizing ops. */
#define L8_CAST_ACCUMULATE_AMAX 0x1u   /* amax = max(amax, max|x|) instead of max|x| */
/* L8_CAST_FEW_SMS: run on as few multiprocessors as the op can - the 128 x
 * 128 tile kernel, a CTA a tile, never the small-tile kernel of few-tile
 * tensors (whose CTAs cover 32 columns each) - with the same bytes, amax and
 * dbias. For a cast on a second stream next to GEMMs, where the SMs its CTAs
 * hold would delay the GEMM more than the cast's own latency matters
 * (lean8-train's bias gradients, docs/perf.md). Taken by l8_fp8_cast (one
 * kernel: no change), l8_fp8_cast_transpose, _dbias, _act and _dact; an
 * activation then runs unfused, through the scratch described there. */
#define L8_CAST_FEW_SMS 0x2u

/* out = fp8(in * scale), any shape; out has in's numel, an FP8 dtype and a
 * meta. Amax and scale_inv go to out's meta (see above). in and out must not
 * overlap. Errors: see above. */
L8_NODISCARD l8_status l8_fp8_cast(const l8_tensor *in, l8_tensor *out, unsigned flags,
                                   l8_stream *s);

/* One pass over in [rows, cols] (rows = numel / last dim):
 *   out   [rows, cols] = fp8(in * scale)        (may be NULL: not written)
 *   out_t [cols, rows] = the same bytes transposed (2-D; may be NULL when out
 *                        is not: then the call is l8_fp8_cast(in, out), which
 *                        needs only in's numel in out)
 * out and out_t (when both given) have the same FP8 dtype and the same meta
 * object, whose scale is used and whose amax / scale_inv are written.
 * Meant for cuBLASLt's TN-only FP8 GEMMs (X -> X and X^T, dY -> dY^T).
 * One launch, except with both outputs, above 64 tiles and without
 * L8_CAST_FEW_SMS for shapes the tile kernel writes slowly - cols % 8 != 0,
 * or for bf16 / f16 rows % 16 != 0 with cols % 16 != 0: then two, the cast
 * into out and l8_fp8_transpose of out into out_t (the same bytes, amax and
 * scale_inv; faster there, docs/perf.md).
 * Errors: see above; L8_ERR_INVALID_ARG for out and out_t both NULL. */
L8_NODISCARD l8_status l8_fp8_cast_transpose(const l8_tensor *in, l8_tensor *out,
                                             l8_tensor *out_t, unsigned flags, l8_stream *s);

/* l8_fp8_cast_transpose plus the bias gradient (out_t required):
 *   dbias [cols] = sum over rows of in (f32 accumulation; = overwritten)
 * dbias is F32, BF16 or F16 (rounded once from the f32 sum), contiguous.
 * Deterministic: the summation order is fixed (128-row tiles, see
 * ptx/cast_transpose.ptx.in) and does not depend on the device or grid, so
 * repeated runs give identical bits. Up to 128 rows (256 for tensors of up
 * to 64 tiles) the cast kernel sums the columns itself (one launch); above,
 * it leaves per-tile partial sums in a workspace of ceil(rows/128) * cols *
 * 4 bytes from the context's allocator on s (released on s before
 * returning) that a second kernel adds up, in the same order. Errors: see
 * above, L8_ERR_OOM for the workspace. */
L8_NODISCARD l8_status l8_fp8_cast_transpose_dbias(const l8_tensor *in, l8_tensor *out,
                                                   l8_tensor *out_t, l8_tensor *dbias,
                                                   unsigned flags, l8_stream *s);

/* Activations the casts can apply on the way in. Append-only. */
typedef enum l8_act {
    L8_ACT_NONE = 0,              /* none: the plain cast */
    L8_ACT_GELU = 1               /* l8_gelu's tanh GELU (ops/elementwise.h) */
} l8_act;

/* The FP8 input of a layer that follows an activation, without the
 * activation in memory: h = act(x) rounded to x's dtype, with l8_gelu's
 * arithmetic, then
 *   out   [rows, cols] = fp8(h * scale)   (may be NULL)
 *   out_t [cols, rows] = the same bytes transposed (may be NULL when out is
 *                        not: then out has x's [rows, cols] and nothing is
 *                        transposed)
 * amax is that of h. Bit for bit l8_gelu(x, h) followed by
 * l8_fp8_cast_transpose(h, out, out_t) (l8_fp8_cast(h, out) without out_t)
 * on the same context, h of x's dtype. One launch for tensors of up to 64
 * 128 x 128 tiles (the small-tile kernel, ptx/cast_transpose_sm.ptx.in);
 * larger ones, and the host backend, run exactly those two ops through a
 * scratch h from the context's allocator on s (tag "cast.act", released on
 * s). L8_ACT_NONE: the plain cast (without out_t: l8_fp8_cast, which needs
 * only x's numel in out). Errors: those of l8_fp8_cast_transpose,
 * L8_ERR_INVALID_ARG for an unknown act or out and out_t both NULL, and
 * L8_ERR_OOM for the scratch. */
L8_NODISCARD l8_status l8_fp8_cast_transpose_act(l8_act act, const l8_tensor *x, l8_tensor *out,
                                                 l8_tensor *out_t, unsigned flags, l8_stream *s);

/* The FP8 output gradient of a layer followed by an activation: g = dy *
 * act'(a) rounded to dy's dtype, with l8_gelu_backward's arithmetic (a is
 * the activation's input, the layer's output, any high-precision dtype, dy's
 * numel), then l8_fp8_cast_transpose of g into out / out_t and, when dbias
 * is given, the column sums of g as l8_fp8_cast_transpose_dbias computes
 * them (dbias needs out_t). Bit for bit l8_gelu_backward(a, dy, g) followed
 * by that cast, g of dy's dtype. One launch when a has dy's dtype and the
 * tensor has up to 64 tiles (with dbias: up to 512 rows, where the device
 * launches thread block clusters); otherwise the two
 * ops through a scratch as above. L8_ACT_NONE: the plain cast of dy (a is
 * not read). Errors: those of l8_fp8_cast_transpose_act, and
 * L8_ERR_INVALID_ARG for a NULL or (with an activation) of another numel. */
L8_NODISCARD l8_status l8_fp8_cast_transpose_dact(l8_act act, const l8_tensor *dy,
                                                  const l8_tensor *a, l8_tensor *out,
                                                  l8_tensor *out_t, l8_tensor *dbias,
                                                  unsigned flags, l8_stream *s);

/* The bias gradient alone: dbias = the column sums of g = dy * act'(a)
 * (rounded to dy's dtype, as l8_fp8_cast_transpose_dact computes g; with
 * L8_ACT_NONE g = dy and a is not read, may be NULL), exactly the values
 * l8_fp8_cast_transpose_dact (L8_ACT_NONE: l8_fp8_cast_transpose_dbias)
 * writes into its dbias - every sum in the casts' order, bit for bit - with
 * nothing cast: no FP8 output, no meta, no amax. For a bias gradient on a
 * second stream while the compute stream casts dy without one (lean8-train's
 * backward: docs/design.md). dy and a: any high-precision dtypes, a with
 * dy's numel; dbias: cols elements (rows/cols of dy as above), F32, BF16 or
 * F16, rounded from the f32 sums. With L8_ACT_GELU, g first goes through
 * l8_gelu_backward into a scratch of dy's dtype (tag "cast.dbias", from the
 * context's allocator on s). The column sums on the device: one launch of
 * ceil(cols / 32) CTAs up to 1024 rows, else those CTAs over groups of 1024
 * rows and l8_dbias_reduce through a scratch as above. Errors: L8_ERR_INVALID_ARG (an unknown act, NULL dy or
 * dbias, a NULL with an activation, wrong dtypes or numels, tensors of
 * different contexts, non-contiguous tensors), L8_ERR_UNSUPPORTED (rows or
 * cols above 2^31 - 1), L8_ERR_STATE, L8_ERR_CUDA, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_dbias_dact(l8_act act, const l8_tensor *dy, const l8_tensor *a,
                                     l8_tensor *dbias, l8_stream *s);

/* l8_fp8_cast_transpose of n tensors in as few launches as their tiles
 * allow (one for up to 16 tensors of one input dtype and 32768 tiles in
 * all): in[i] -> out[i] (out, or out[i], may be NULL) and out_t[i], each
 * with its own meta (two tensors sharing a meta: L8_ERR_INVALID_ARG), the
 * same bytes, amaxes and scale_invs as n single calls. For the per-step
 * casts of many small tensors (every layer's weights), where a launch costs
 * more than its work. Without L8_CAST_ACCUMULATE_AMAX the n amaxes are
 * zeroed first (one more launch); l8_linear_refresh_weights accumulates. n is 1..L8_CAST_MANY_MAX; all on one context. Errors: those
 * of l8_fp8_cast_transpose, naming the tensor; nothing is enqueued unless
 * every tensor passes. */
#define L8_CAST_MANY_MAX 64
L8_NODISCARD l8_status l8_fp8_cast_transpose_many(int n, const l8_tensor *const *in,
                                                  l8_tensor *const *out,
                                                  l8_tensor *const *out_t, unsigned flags,
                                                  l8_stream *s);

/* out = f32(in) * scale_inv, rounded to out's dtype (F32, BF16, F16); in is
 * FP8 with a meta (its scale_inv is used), out has in's numel. NaN codes give
 * NaN, E5M2 infinities give infinities. Errors: see above. */
L8_NODISCARD l8_status l8_fp8_dequantize(const l8_tensor *in, l8_tensor *out, l8_stream *s);

/* out [cols, rows] = in [rows, cols] transposed, bytes only: FP8 or U8, same
 * dtype on both sides; metas are not touched (attach in's meta to out to
 * reuse its scale_inv). out may be row-padded (the common rules above: its
 * columns rows .. rows rounded up to 16, less one, get 0x00). Errors: see
 * above. */
L8_NODISCARD l8_status l8_fp8_transpose(const l8_tensor *in, l8_tensor *out, l8_stream *s);

/* ---- delayed scaling ---- */

typedef enum l8_amax_compute {
    L8_AMAX_MAX_HISTORY = 0,      /* amax = max over the history window (default) */
    L8_AMAX_MOST_RECENT = 1       /* amax = this step's amax */
} l8_amax_compute;

typedef struct l8_fp8_scale_update_config {
    size_t size;                  /* sizeof(l8_fp8_scale_update_config) */
    l8_amax_compute amax_compute;
    float margin;                 /* scale = (fp8_max / amax) / 2^margin; finite */
    int reset_amax;               /* 1: amax[i] = 0 after it was used */
} l8_fp8_scale_update_config;
#define L8_FP8_SCALE_UPDATE_CONFIG_INIT \
    { sizeof(l8_fp8_scale_update_config), L8_AMAX_MAX_HISTORY, 0.0f, 0 }
/* Fill *cfg with the defaults of L8_FP8_SCALE_UPDATE_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_fp8_scale_update_config_init(l8_fp8_scale_update_config *cfg);

/* Update n tensors' scales in one launch (one CTA per tensor on the GPU).
 *   amax_history [n, H] f32, contiguous, row i = tensor i, newest first: a
 *                finite new amax is pushed at column 0 and the row shifts
 *                right by one (the oldest value drops out). May be NULL with
 *                L8_AMAX_MOST_RECENT (no history kept).
 *   amax         [n] f32: this step's amaxes (e.g. a strided view over the
 *                metas, or an all-reduced buffer); reset to 0 if asked
 *   scale        [n] f32: updated
 *   scale_inv    [n] f32 or NULL: = 1/scale where scale changes. Pass NULL
 *                while FP8 data cast with the old scale is still to be used
 *                (the cast ops write scale_inv next to their data anyway).
 *   fp8_max      [n] f32 (448 or 57344 per tensor; stride 0 broadcasts one)
 * 1-D tensors may be strided (stride >= 0). For each tensor:
 *   new amax not finite (NaN, Inf): history, scale, scale_inv unchanged
 *   a = MOST_RECENT ? |new| : max |history| (after the push)
 *   a zero or not finite: scale kept; else scale = (fp8_max / a) / 2^margin,
 *   +Inf becoming FLT_MAX and an underflow to 0 keeping the old scale.
 * cfg NULL: defaults. Errors: L8_ERR_INVALID_ARG (shapes, dtypes, contexts,
 * margin not finite, history NULL without MOST_RECENT), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_fp8_scale_update(l8_tensor *amax_history, l8_tensor *amax,
                                           l8_tensor *scale, l8_tensor *scale_inv,
                                           const l8_tensor *fp8_max,
                                           const l8_fp8_scale_update_config *cfg,
                                           l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_CAST_H */
