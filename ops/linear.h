/* linear.h - the Linear layer Y[T,N] = X[T,K] . W[N,K]^T (+ bias[N]) with
 * forward and backward, in FP8 (HYBRID delayed scaling) or bf16.
 *
 * Tensors (row-major; T tokens, K in-features, N out-features):
 *     X  [.., K]  bf16   input, any leading dims (T = numel / K), contiguous
 *     Y  [.., N]  bf16   output (=)
 *     dY [.., N]  bf16   output gradient
 *     dX [.., K]  bf16   input gradient (=)
 *     W  [N, K]   f32    master weight (the caller's, e.g. a parameter group view)
 *     b  [N]      f32    master bias (optional)
 *     gW [N, K]   f32 or bf16   the weight's main_grad; gb [N] the bias's, same dtype
 * Convert f32 activations with l8_convert (ops/elementwise.h). In FP8 mode
 * X, Y, dY, dX and gW must start 16-byte aligned (cuBLASLt's FP8 rule; new
 * tensors and parameter-group views are).
 *
 * FP8 mode (L8_LINEAR_FP8; all GEMMs TN):
 *   once per step  W --cast+transpose--> W8 [N,K] e4m3, W8t [K,N] e4m3     (weight meta)
 *                  b --convert--> b16 [N] bf16                              (fprop epilogue)
 *   forward        X --cast+transpose--> X8 [T,K] e4m3 (freed after fprop),
 *                                        X8t [K,T] e4m3 (saved)             (input meta)
 *                  fprop  Y = X8 . W8^T + b16      bf16, fast accumulation
 *   backward       dY --cast+transpose+dbias--> dY8 [T,N] e5m2, dY8t [N,T] e5m2, db f32
 *                  dgrad  dX = dY8 . W8t^T         bf16, split accumulation  (grad meta)
 *                  wgrad  gW = dY8t . X8t^T (+ gW) in gW's dtype, split accumulation
 *                  gb = db (+ gb)   (later micro-batches: db in a scratch, l8_add_into)
 * The casts max-accumulate their amaxes into the recipe's metas
 * (L8_CAST_ACCUMULATE_AMAX) over the micro-batches of a step; the recipe
 * update gathers them (ops/recipe.h). FP8 needs K and N to be multiples of
 * 16 (cuBLASLt's FP8 rules): anything else is L8_ERR_UNSUPPORTED (pad the
 * features yourself, e.g. a 10-class head as N = 16). Any token count T
 * works: wgrad reduces over T, which cuBLASLt wants a multiple of 16, so
 * X8t and dY8t are [K, T16] and [N, T16] (T16 = T rounded up to 16), cast
 * into row-padded views of their first T columns (ops/cast.h), which writes
 * zeros into the rest; wgrad multiplies all T16 columns and so adds exact
 * zeros (with column-parallel SP see the tensor-parallel section).
 *
 * bf16 mode (L8_LINEAR_BF16): the same structure with bf16 copies: W -> W16
 * [N,K] and b -> b16 once per step; fprop Y = X . W16^T + b16; saved: X
 * itself (a view: the caller must not overwrite X before backward); dgrad
 * dX = dY . W16; wgrad gW (+)= dY^T . X in gW's dtype, with the bias
 * gradient from the GEMM's DBIAS epilogue. Any shapes.
 *
 * Steps and micro-batches. l8_linear_begin_step marks a new optimizer step:
 * the weight copies are rebuilt at the next forward (once per step, not per
 * micro-batch; l8_linear_stats counts the casts), or for several layers at
 * once by l8_linear_refresh_weights, and the micro-batch count
 * restarts. The first backward of a step writes main_grad (=, beta = 0: old
 * contents, NaNs included, are never read); later ones accumulate (+=,
 * beta = 1) - gradient-accumulation fusion. With accumulate_grad = 1 every
 * backward accumulates (the caller zeroes main_grad, e.g. for a weight
 * shared by several layers). main_grad is always written, zero gradients
 * included; it is never NULL.
 *
 * Grad ready. After a backward has enqueued the wgrad GEMM (and the bias
 * gradient) it records an event on the stream and calls grad_ready(arg,
 * weight_id, event), then grad_ready(arg, bias_id, event) when there is a
 * bias: once per parameter per backward. The event is the layer's and is
 * re-recorded by its next backward: make a stream wait on it
 * (l8_stream_wait_event) or query it inside the callback; do not keep it.
 * Set grad_ready = l8_params_grad_ready, grad_ready_arg = the parameter
 * group to report into the group (runtime/params.h: one signature for both).
 * Destroy the layer before that group; if the group goes first, the layer is
 * told, and each later backward enqueues its work and then fails with
 * L8_ERR_STATE instead of reporting into freed memory.
 *
 * Saved tensors. Forward hands what backward needs to an l8_linear_ctx
 * (FP8: X8t, or X8 with column SP at T % 16 != 0; bf16: X) and, when save
 * hooks are set, calls hooks.save for each saved tensor ("<name>.x_t",
 * "<name>.x8", "<name>.x"); backward calls hooks.restore before using it and
 * hooks.release when done (also l8_linear_ctx_destroy). This is the one hook
 * point for activation offload: offload works on the tensor's storage (the
 * views follow it), and the layer never caches a data pointer across calls.
 * The persistent weight copies (W8, W8t, W16, b16) are the layer's and are
 * never offloaded.
 *
 * Tensor and sequence parallel (Megatron's layout; tp = the size of
 * tp_comm; weight, weight_grad, bias are this rank's shard; T is the full
 * token count, T/tp a rank's share of it):
 *   mode          x (in)        y (out)       forward            backward
 *   column        [T, K]        [T, N/tp]     -                  all-reduce dX
 *   column, SP    [T/tp, K]     [T, N/tp]     all-gather X (T)   reduce-scatter dX (T),
 *                                                                re-gather X for wgrad
 *   row           [T, K/tp]     [T, N]        all-reduce Y       -
 *   row, SP       [T, K/tp]     [T/tp, N]     reduce-scatter Y   all-gather dY (T)
 * dX and dY have the shapes of x and y. In FP8 mode the column-SP gather
 * moves the input after its cast: this rank's X8 [T/tp, K] gathers along T
 * into X8 [T, K] (half the bytes of bf16), and backward re-gathers the
 * saved X8t [K, T/tp] along its last dimension into [K, T] for wgrad (the
 * gather TransformerEngine got wrong: an all-gather alone concatenates along
 * the first dimension). For a token count off 16 it saves this rank's X8
 * [T/tp, K] instead, gathers it along T and transposes it into a row-padded
 * [K, T16] (the ranks' columns must not be padded apart). The FP8 bytes of all ranks must
 * share one scale: install l8_comm_reduce_amax on the recipe over tp_comm
 * (the host transports check it). In backward, the column reductions of dX
 * run on the comm stream while the wgrad GEMM runs on s, and the re-gather
 * of X overlaps the dgrad GEMM; s waits for them before returning. The
 * row-parallel bias is added once (by TP rank 0, before the reduction);
 * every rank computes the same bias gradient. In SP modes T must divide by
 * tp (else L8_ERR_INVALID_ARG; pad the batch). The weight gradient is this
 * rank's shard's: reduce it over the data-parallel group, not over tp_comm.
 * With tp_comm of size 1 every collective is a copy or nothing. Destroy the
 * layer before tp_comm; if tp_comm goes first the layer is told, and its
 * forward and backward fail with L8_ERR_STATE.
 *
 * Memory tags (alloc/trace.h): "<name>.w_fp8", "<name>.w_t_fp8",
 * "<name>.w_bf16", "<name>.b_bf16" (at create), "<name>.x_fp8",
 * "<name>.x_t" (forward), "<name>.dy_fp8", "<name>.dy_t_fp8",
 * "<name>.dbias" (backward).
 *
 * Streams: every call enqueues on its stream (NULL: the compute stream) and
 * returns without waiting; on a host context the work is done on return.
 * Tensors and streams belong to the layer's context. Not thread-safe: one
 * thread drives a layer.
 *
 * Errors, common to all calls: L8_ERR_INVALID_ARG (NULL, shapes, dtypes,
 * contexts, non-contiguous tensors, a ctx from another layer),
 * L8_ERR_UNSUPPORTED (FP8 with K or N not a multiple of 16), L8_ERR_STATE (a
 * storage not on the device; a backward whose forward used other weights or
 * input scales, see l8_linear_backward), L8_ERR_OOM, L8_ERR_CUDA,
 * L8_ERR_CUBLAS, and any status a hook or callback returns. Allocation
 * happens before anything is enqueued, so an OOM leaves the layer, the
 * outputs and main_grad untouched.
 */
#ifndef L8_OPS_LINEAR_H
#define L8_OPS_LINEAR_H

#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "runtime/params.h"
#include "ops/gemm.h"
#include "ops/recipe.h"
#include "ops/cast.h"
#include "runtime/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_linear l8_linear;
typedef struct l8_linear_ctx l8_linear_ctx;

/* Append-only. */
typedef enum l8_linear_mode {
    L8_LINEAR_FP8 = 0,            /* FP8 GEMMs with the recipe's scales (HYBRID by default) */
    L8_LINEAR_BF16 = 1            /* bf16 GEMMs: layers FP8 gains nothing on (a model's
                                     small head), or for comparison */
} l8_linear_mode;

/* Append-only. */
typedef enum l8_linear_parallel {
    L8_PARALLEL_NONE = 0,
    L8_PARALLEL_COLUMN = 1,       /* weight split along N (out): this rank holds [N/tp, K] */
    L8_PARALLEL_ROW = 2           /* weight split along K (in): this rank holds [N, K/tp] */
} l8_linear_parallel;

/* grad_ready: l8_grad_ready_fn (runtime/params.h). */

/* Save/restore hooks for tensors kept from forward to backward. `name` is
 * "<layer>.x_t" (FP8; "<layer>.x8" where column SP saves X8) or "<layer>.x"
 * (bf16). The tensor is borrowed: hooks
 * act on its storage (l8_tensor_storage) and keep no pointer to the view
 * after release. save: the tensor will not be read before restore (offload
 * may start). restore: make the storage resident and ordered before later
 * work on s. release: the ctx no longer needs it. Any may be NULL. */
typedef struct l8_save_hooks {
    size_t size;                  /* sizeof(l8_save_hooks) */
    l8_status (*save)(void *arg, l8_tensor *t, const char *name, l8_stream *s);
    l8_status (*restore)(void *arg, l8_tensor *t, const char *name, l8_stream *s);
    void (*release)(void *arg, l8_tensor *t, const char *name);
    void *arg;
} l8_save_hooks;
#define L8_SAVE_HOOKS_INIT { sizeof(l8_save_hooks), NULL, NULL, NULL, NULL }

typedef struct l8_linear_config {
    size_t size;                  /* sizeof(l8_linear_config) */
    const char *name;             /* tag and role prefix, copied (<= 100 bytes); NULL: "linear" */
    l8_linear_mode mode;          /* L8_LINEAR_FP8 */
    l8_gemm_handle *gemm;         /* required; of the same context; must outlive the layer */
    l8_recipe *recipe;            /* FP8: required (3 roles registered: "<name>.input",
                                     ".weight", ".grad_output"); must outlive the layer */
    const l8_tensor *weight;      /* f32 [N, K], contiguous; required */
    const l8_tensor *weight_grad; /* f32 or bf16 [N, K], contiguous; required */
    const l8_tensor *bias;        /* f32 [N] or NULL */
    const l8_tensor *bias_grad;   /* [N], weight_grad's dtype; required with a bias, else NULL */
    int weight_id, bias_id;       /* passed to grad_ready */
    l8_grad_ready_fn grad_ready;  /* NULL: none */
    void *grad_ready_arg;
    int accumulate_grad;          /* 0: first backward of a step writes main_grad; 1: always += */
    const l8_save_hooks *save_hooks;  /* copied; NULL: saved tensors stay as they are */
    /* Tensor parallelism (see "Tensor and sequence parallel" above). */
    l8_comm *tp_comm;             /* the tensor-parallel group (of this context); NULL: none */
    l8_linear_parallel parallel;  /* L8_PARALLEL_NONE unless tp_comm is set */
    int sequence_parallel;        /* 1: the activations outside the layer are split along T */
} l8_linear_config;
#define L8_LINEAR_CONFIG_INIT \
    { sizeof(l8_linear_config), NULL, L8_LINEAR_FP8, NULL, NULL, NULL, NULL, NULL, NULL, \
      0, 1, NULL, NULL, 0, NULL, NULL, L8_PARALLEL_NONE, 0 }
/* Fill *cfg with the defaults of L8_LINEAR_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_linear_config_init(l8_linear_config *cfg);

/* Create a layer on ctx. The layer keeps its own views of weight, bias and
 * their grads (the caller's tensors may be destroyed; the storages are
 * retained), allocates its persistent weight copies, and in FP8 mode
 * registers its three roles in the recipe. Nothing is cast until the first
 * forward. Errors: L8_ERR_INVALID_ARG (config, shapes, dtypes, contexts,
 * name, grad_ready = l8_params_grad_ready without a group of ctx as its
 * arg), L8_ERR_UNSUPPORTED (FP8 with K or N not a multiple of 16),
 * L8_ERR_OOM; on error nothing is left behind (a role already registered in
 * the recipe stays there, unused). */
L8_NODISCARD l8_status l8_linear_create(l8_ctx *ctx, const l8_linear_config *cfg,
                                        l8_linear **out);

/* Release the layer (stream-ordered). Outstanding ctxs must be destroyed
 * first or after; they do not reference the layer's memory. NULL: no-op. */
void l8_linear_destroy(l8_linear *l);

/* A new optimizer step: the master weights (may) have changed. The weight
 * copies are rebuilt at the next forward; the next backward writes
 * main_grad (=). Never fails on a valid layer. Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_linear_begin_step(l8_linear *l);

/* Rebuild now, on s, the weight copies of those of the n layers that need
 * it (after begin_step; the others are left alone): the FP8 layers' weight
 * casts in one launch for up to 16 layers (l8_fp8_cast_transpose_many),
 * their biases' bf16 copies in that launch too when every weight is of up
 * to 64 128 x 128 tiles (the small-tile kernel), else in one
 * l8_convert_many with the bf16 layers' weight and bias copies. The copies are those the layers' next forward would build, bit for
 * bit; that forward then builds nothing. For a model of many small layers,
 * where each launch costs more than its work. A layer listed twice counts
 * once. n is 0..L8_CAST_MANY_MAX; every layer of one context. Errors:
 * L8_ERR_INVALID_ARG (NULL, n, contexts), and those of the casts. */
L8_NODISCARD l8_status l8_linear_refresh_weights(l8_linear *const *layers, int n,
                                                l8_stream *s);

/* Y = X . W^T + b.
 *   x      bf16 [.., K], contiguous; read
 *   y      bf16 [.., N], contiguous, same leading rows T; written (=); must
 *          not overlap x
 *   saved  NULL: inference (FP8: X is cast without its transpose; nothing is
 *          kept); else *saved receives a new ctx, owned by the caller, to
 *          pass to l8_linear_backward (or l8_linear_ctx_destroy)
 * Errors: see the banner. On error *saved is NULL, and y is unwritten
 * unless the device or hooks.save failed (hooks.save runs last). */
L8_NODISCARD l8_status l8_linear_forward(l8_linear *l, const l8_tensor *x, l8_tensor *y,
                                         l8_linear_ctx **saved, l8_stream *s);

/* Backward of the forward that made *saved:
 *   dy     bf16 [.., N] with the forward's T rows; read
 *   dx     bf16 [.., K] with T rows, written (=); NULL: dgrad is skipped
 *          (first layer); must not overlap dy
 *   main_grads: = or += as in the banner; then grad_ready is called.
 * *saved is consumed (destroyed, set to NULL) once the layer's work is
 * enqueued: on success, and when only a grad_ready callback failed (its
 * status is returned). On any other error *saved is left valid and the
 * caller's: fix the cause and retry, or l8_linear_ctx_destroy it
 * (hooks.restore may then run again: make it idempotent). An error from the
 * device may leave dx and main_grad partly written.
 * L8_ERR_STATE when the weights were rebuilt since that forward
 * (begin_step, then another forward) or, in FP8, the recipe updated the
 * input scale and the input was cast again since (the saved X8t could no
 * longer be decoded). */
L8_NODISCARD l8_status l8_linear_backward(l8_linear *l, l8_linear_ctx **saved,
                                          const l8_tensor *dy, l8_tensor *dx, l8_stream *s);

/* Activations between layers, fused into the FP8 casts. For a model
 * ... -> Linear A -> act -> Linear B -> ..., instead of running act between
 * the layers (l8_gelu, l8_gelu_backward) hand it to the layers:
 *     A: l8_linear_forward(a, x, z)           B: l8_linear_forward_act(b, GELU, z, y)
 *     B: l8_linear_backward(b, &cb, dy, dh)   A: l8_linear_backward_act(a, GELU, &ca, dh, z, dx)
 * The results are bit for bit those of the unfused sequence (h = gelu(z) in
 * bf16 between the layers, dz = bf16(dh * gelu'(z))). In FP8 mode B's input
 * cast applies the activation and A's gradient cast its derivative (one
 * launch each for tensors of up to 64 128 x 128 tiles, see
 * l8_fp8_cast_transpose_act / _dact in ops/cast.h): the bf16 activation and
 * its gradient are never written. In bf16 mode (and for the row-parallel SP
 * dY gather) the layer runs the activation into a tensor of its own first:
 * "<name>.x_act" (saved for wgrad instead of a view of x), "<name>.dy_act".
 * One exception to "allocation before anything is enqueued": in FP8 mode,
 * for tensors the fused kernel does not take, the cast's own scratch
 * ("cast.act") is allocated after the weight copies (and a restore hook)
 * were enqueued; an L8_ERR_OOM there still leaves y, dx and main_grad
 * unwritten and *saved valid.
 *
 * l8_linear_forward_act: Y = act(X) . W^T + b, act(X) rounded to bf16 with
 * l8_gelu's arithmetic; otherwise l8_linear_forward. L8_ACT_NONE: the same
 * as l8_linear_forward. Errors: those of l8_linear_forward,
 * L8_ERR_INVALID_ARG for an unknown act. */
L8_NODISCARD l8_status l8_linear_forward_act(l8_linear *l, l8_act act, const l8_tensor *x,
                                             l8_tensor *y, l8_linear_ctx **saved,
                                             l8_stream *s);

/* l8_linear_backward_act: the backward of the forward that made *saved when
 * its output y goes through act and da is the gradient of act(y): dY = da *
 * act'(y) rounded to bf16 with l8_gelu_backward's arithmetic, then
 * l8_linear_backward with dY. y is the forward's output (bf16, dy's shape;
 * read); dx must not overlap da or y. L8_ACT_NONE: l8_linear_backward (y
 * is then not read). Errors and the fate of *saved: those of
 * l8_linear_backward, L8_ERR_INVALID_ARG for an unknown act or y NULL. */
L8_NODISCARD l8_status l8_linear_backward_act(l8_linear *l, l8_act act, l8_linear_ctx **saved,
                                              const l8_tensor *da, const l8_tensor *y,
                                              l8_tensor *dx, l8_stream *s);

/* FP8 operands cast by the caller. An FP8 layer casts its X and dY on the
 * call's stream, just before the GEMM that needs them. Where the producer
 * of X or dY can write FP8 itself, or where X is ready long before the
 * layer runs, the caller casts instead and the layer's step loses a launch:
 *   - the first layer's input, cast on another stream while the weights
 *     are cast: l8_fp8_cast_transpose(x, x8, x8t, L8_CAST_ACCUMULATE_AMAX,
 *     side), then l8_linear_forward_fp8(l, x8, x8t, y, &saved, s) after s
 *     waited for side;
 *   - a dY whose producer (a fused loss or activation of the caller's)
 *     writes dy8, dy8t and the column sums db itself, then
 *     l8_linear_backward_fp8.
 *   - an input that never changes (a data set on the device), cast once
 *     with a fixed scale of the caller's: each step gathers its FP8 rows
 *     and transposes them off the critical path (lean8-train does).
 * The bytes must be those the layer's own cast would write: the layer's
 * meta attached (the input meta for x8 / x8t, the grad_output meta for dy8 /
 * dy8t: l8_recipe_meta(recipe, l8_linear_role_index(l, role)), in the
 * role's format: E4M3 input, E5M2 grad_output under HYBRID), cast with that
 * meta's current scale and its amax max-accumulated (the recipe update
 * reads it); then the results are bit for bit those of l8_linear_forward /
 * l8_linear_backward on the bf16 tensors. x8 and x8t may instead carry a
 * meta of the caller's (both the same one, in the input role's format; not
 * one of the recipe's): the GEMMs then use that meta's scale_inv, and the
 * layer's input meta and its amax are left alone; the caller keeps that
 * scale_inv unchanged until the backward of the ctx has been enqueued.
 * FP8 layers only (a bf16 layer: L8_ERR_INVALID_ARG).
 *
 * l8_linear_forward_fp8: Y = X . W^T + b from
 *   x8   [T, K] (this rank's rows with column SP), 2-D, contiguous; read
 *        (and, with column SP at T % 16 != 0, kept by the ctx as x8t is)
 *   x8t  [K, T] its transpose; read by the backward's wgrad: the ctx keeps
 *        a view of it (not a copy: do not overwrite it before backward,
 *        as with bf16's saved X). NULL for inference (saved NULL), and
 *        where it is not read (column SP at T % 16 != 0, below).
 *        Contiguous when T % 16 == 0; else row-padded as the cast ops write
 *        it (ops/cast.h): a 2-D view with strides [ld, 1], ld % 16 == 0,
 *        16-byte aligned, its storage holding ld >= T16 columns of every
 *        row (T16 = T rounded up to 16) with zeros in columns T .. T16 - 1
 *        - the cast op's out_t given a narrow of a [K, ld] tensor writes
 *        those zeros; the layer cannot check them: wgrad reads all T16.
 *        Row-padded with T % 16 == 0 too, except with column-parallel SP:
 *        there x8t is contiguous [K, T/tp], and where T % 16 != 0 it is not
 *        read (the ctx keeps a view of x8 instead).
 * y and saved as in l8_linear_forward; y must not overlap x8 or x8t.
 * Counted in forwards, not in input_casts. Errors: those of
 * l8_linear_forward, L8_ERR_INVALID_ARG for a bf16 layer, a wrong dtype,
 * shape or meta. */
L8_NODISCARD l8_status l8_linear_forward_fp8(l8_linear *l, const l8_tensor *x8,
                                             const l8_tensor *x8t, l8_tensor *y,
                                             l8_linear_ctx **saved, l8_stream *s);

/* The next layer's input from this layer's GEMM, the GELU in its epilogue
 * (TransformerEngine's fc1 -> GELU -> fc2). For ... -> Linear A -> GELU ->
 * Linear B:
 *     A: l8_linear_forward_gelu(a, act, x, x8, x8t, z, h, &ca, side, s)
 *     B: l8_linear_forward(b, h, y, &cb, s)             (h bf16), or
 *        l8_linear_forward_fp8(b, h, ht, y, &cb, s)     (h FP8; the caller
 *        transposes h into ht, l8_fp8_transpose, where B's wgrad reads it)
 *     B: l8_linear_backward(b, &cb, dy, dh, s)
 *     A: l8_linear_backward_act(a, L8_ACT_GELU, &ca, dh, z, dx, s)
 * One cuBLASLt GEMM (L8_GEMM_EPI_BIAS_GELU_AUX) writes
 *   z  [T, N] bf16: X . W^T + b, what l8_linear_forward writes as y (2-D or
 *      [.., N]; the backward's GELU input), and
 *   h  [T, N] (2-D, contiguous, z's rows): gelu(u) for the f32 sum u (z
 *      before its rounding), either
 *      - bf16 (any layer): rounded once, for a bf16 B, or
 *      - FP8, A an FP8 layer: fp8(gelu(u) * scale) with h's meta - B's
 *        input meta (l8_recipe_meta(recipe, l8_linear_role_index(b,
 *        L8_ROLE_INPUT)), B's input format, E4M3) - as B's own cast would
 *        use it: its current scale, its scale_inv written (1 / scale), and
 *        the amax B's cast would max-accumulate (that of bf16 gelu(z):
 *        l8_fp8_cast_transpose_act of z into scratch bytes; the GEMM's own
 *        amax would cost a memset before it, see gemm.h) - or, after
 *        l8_linear_set_gelu_amax_by_caller(a, 1), no amax: the caller's.
 * The GELU runs on u in f32 with cuBLASLt's arithmetic instead of on bf16
 * z with l8_gelu's, so h is not bit for bit B's gelu(z) (l8_gelu, or the
 * cast in l8_linear_forward_act): a bf16 h may differ in the last bit, an
 * FP8 h by one step where a value lies near a rounding boundary. z, the
 * saved ctx and A's backward are l8_linear_forward's.
 * The input: x with act as in l8_linear_forward_act (x8 and x8t NULL), or
 * the caller's x8 and x8t as in l8_linear_forward_fp8 (x NULL, act NONE).
 * Streams: the GEMM on s. An FP8 h's meta work runs on side, off s's path:
 * its scale_inv beside the GEMM (work enqueued on s after this call waits
 * for it) and the amax cast after the GEMM, which reads z - the caller
 * joins side before z is written again and before the recipe update
 * (lean8-train passes its wgrad stream, joined before the optimizer).
 * side NULL: both run on s. A bf16 h has no meta work; side is not used.
 * Layers with a bias, not row-parallel. Errors: those of
 * l8_linear_forward_act / _fp8; L8_ERR_INVALID_ARG for x and x8 both or
 * neither given, an act with x8, h NULL, FP8 for a bf16 layer, neither FP8
 * nor bf16, FP8 without a meta, of another shape, overlapping y or the
 * input, a side stream of another context; L8_ERR_UNSUPPORTED for a layer
 * without a bias or a row-parallel one. */
L8_NODISCARD l8_status l8_linear_forward_gelu(l8_linear *l, l8_act act, const l8_tensor *x,
                                              const l8_tensor *x8, const l8_tensor *x8t,
                                              l8_tensor *z, l8_tensor *h, l8_linear_ctx **saved,
                                              l8_stream *side, l8_stream *s);

/* l8_linear_backward_fp8: the backward of the forward that made *saved from
 *   dy8  [T, N] the forward's T rows, 2-D, contiguous; read by dgrad
 *   dy8t [N, T] its transpose; read by wgrad. Contiguous when T % 16 ==
 *        0, else (or also then) row-padded with zeros up to T16, as x8t
 *   db   [N] F32 or main_grad's dtype: the column sums of dY (before the
 *        cast) when the layer has a bias, else NULL. The bias's main_grad
 *        gets db as the layer's own dbias would (= on the first backward
 *        of a step, += after); on the first backward of a step (without
 *        accumulate_grad) db may be the bias's main_grad itself (the
 *        config's bias_grad), written there by the producer: then nothing
 *        more is enqueued; later, that is L8_ERR_INVALID_ARG (main_grad
 *        holds the sum to add to).
 * dx, main_grads, grad_ready and *saved as in l8_linear_backward; dx must
 * not overlap dy8, dy8t or db. Counted in backwards, not in grad_casts.
 * Errors: those of l8_linear_backward, L8_ERR_INVALID_ARG for a bf16 layer,
 * a wrong dtype, shape or meta, db missing or given without a bias;
 * L8_ERR_UNSUPPORTED for a row-parallel layer with sequence parallelism
 * (it gathers dY in bf16 before the cast). */
L8_NODISCARD l8_status l8_linear_backward_fp8(l8_linear *l, l8_linear_ctx **saved,
                                              const l8_tensor *dy8, const l8_tensor *dy8t,
                                              const l8_tensor *db, l8_tensor *dx,
                                              l8_stream *s);

/* l8_linear_backward_fp8 that also casts dx for the FP8 layer below, in the
 * dgrad: for ... -> Linear A -> GELU -> Linear B, both FP8, z = A's output
 * (the GELU's input),
 *     B: l8_linear_backward_fp8_dx(b, &cb, dy8, dy8t, db, dh, z, dz8, dz8t, s)
 *     A: l8_linear_backward_fp8(a, &ca, dz8, dz8t, db_a, dx, s)
 * B writes dx (here dh, bf16, as l8_linear_backward_fp8 does) and A's dY8
 * dx8 [T, K] and dY8t dx8t [K, T] (here dz8, dz8t): bit for bit what
 * l8_fp8_cast_transpose_dact(L8_ACT_GELU, dx, z, dx8, dx8t, NULL,
 * L8_CAST_ACCUMULATE_AMAX, s) would write after it - the dgrad's l8_gemm
 * with L8_GEMM_EPI_DGELU_CAST, one launch where lean8's small FP8 GEMM
 * kernel takes it (ops/gemm.h). dx8 and dx8t carry A's grad_output meta in
 * its format, as l8_linear_backward_fp8 wants them. A's bias gradient, the
 * column sums of dx * gelu'(z), comes from l8_dbias_dact(L8_ACT_GELU, dx, z,
 * db_a, s2) (it reads dx: on any stream after this call's work on s;
 * lean8-train runs it on a side stream). z: bf16 [T, K] (2-D or [.., K]),
 * contiguous, read; dx contiguous; none of dx, z, dx8, dx8t may overlap dy8,
 * dy8t, db, the saved input or each other. Errors: those of
 * l8_linear_backward_fp8 and of the cast (its messages name dx "in", dx8
 * "out", dx8t "out_t"),
 * L8_ERR_INVALID_ARG for a NULL dy8, z, dx8, dx8t or dx and an overlap,
 * L8_ERR_UNSUPPORTED with tensor parallelism. */
L8_NODISCARD l8_status l8_linear_backward_fp8_dx(l8_linear *l, l8_linear_ctx **saved,
                                                 const l8_tensor *dy8, const l8_tensor *dy8t,
                                                 const l8_tensor *db, l8_tensor *dx,
                                                 const l8_tensor *z, l8_tensor *dx8,
                                                 l8_tensor *dx8t, l8_stream *s);

/* l8_linear_backward that also casts dx for the FP8 layer below, as
 * l8_linear_backward_fp8_dx does, for a layer that takes dY in bf16: a bf16
 * layer (lean8-train's head above its FP8 layers) or an FP8 layer casting
 * its own dY,
 *     B: l8_linear_backward_dx(b, &cb, dy, dh, z, dz8, dz8t, s)
 *     A: l8_linear_backward_fp8(a, &ca, dz8, dz8t, db_a, dx, s)
 * dx, dx8 and dx8t bit for bit l8_linear_backward(b, &cb, dy, dx, s)
 * followed by l8_fp8_cast_transpose_dact(L8_ACT_GELU, dx, z, dx8, dx8t,
 * NULL, L8_CAST_ACCUMULATE_AMAX, s); main_grads as l8_linear_backward's.
 * The dgrad's l8_gemm runs with L8_GEMM_EPI_DGELU_CAST: one launch where
 * lean8's small GEMM kernel takes it (for a bf16 layer: the layer's output
 * width at most 32, its input width a multiple of 4, and by default T x
 * input x output width at most 2^27; ops/gemm.h). z, dx8, dx8t and A's
 * bias gradient as in l8_linear_backward_fp8_dx; none of dx, z, dx8, dx8t
 * may overlap dy, the saved input or each other. Errors: those of
 * l8_linear_backward and of the cast (dx "in", dx8 "out", dx8t "out_t"),
 * L8_ERR_INVALID_ARG for a NULL dy, z, dx8, dx8t or dx and an overlap,
 * L8_ERR_UNSUPPORTED with tensor parallelism. */
L8_NODISCARD l8_status l8_linear_backward_dx(l8_linear *l, l8_linear_ctx **saved,
                                             const l8_tensor *dy, l8_tensor *dx,
                                             const l8_tensor *z, l8_tensor *dx8,
                                             l8_tensor *dx8t, l8_stream *s);

/* An FP8 h's amax by the caller (on: 1; off: 0, the default). With it on,
 * l8_linear_forward_gelu writes h and h's scale_inv as before but runs no
 * amax cast: the caller accumulates the amax the next layer's cast would
 * have before the recipe update reads it, by casting z through the GELU
 * into any bytes that carry h's meta - l8_fp8_cast_transpose_act(
 * L8_ACT_GELU, z, scratch, NULL, L8_CAST_ACCUMULATE_AMAX, s) - for example
 * on another stream next to the optimizer step, where it delays no GEMM
 * (lean8-train does). z must then stay unchanged until that cast has run.
 * Errors: L8_ERR_INVALID_ARG (NULL l, on other than 0 or 1). */
L8_NODISCARD l8_status l8_linear_set_gelu_amax_by_caller(l8_linear *l, int on);

/* The weight gradient on a stream of its own. A backward needs dX before
 * the layer below can start, but main_grad only at the optimizer step; on
 * one stream the wgrad GEMM sits between the two. With ws set, every later
 * backward of l enqueues dY's preparation (activation gradient, casts,
 * gathers) and the dgrad GEMM on its own stream s as before, while ws waits
 * for s's work up to the dgrad (an event) and takes what only main_grad
 * needs: the wgrad GEMM (in bf16 mode with the bias gradient in its
 * epilogue) and the bias gradient's addition or conversion. The wgrad may
 * then run beside the dgrad and beside whatever the caller enqueues on s
 * next (the layer below). With sm_count 0 the results are bit for bit
 * those without ws: the same kernels on the same bytes.
 *   ws        a stream of l's context (e.g. L8_STREAM_COMM when nothing
 *             else uses it); NULL, or the backward's own stream: no split
 *             (the default)
 *   sm_count  the wgrad GEMM's l8_gemm_desc.sm_count while it runs on ws:
 *             0, the plan for the whole GPU (then the results are bit for
 *             bit those without ws); N > 0, the plan cuBLASLt chooses for
 *             N SMs, which leaves the others to the dgrad and the layer
 *             below (its own plan: main_grad may differ from 0's in the
 *             last bits); >= 0
 * The event handed to grad_ready is then recorded on ws. The caller owns
 * the join: before anything reads main_grad (the optimizer), changes a
 * scale the GEMMs read (l8_recipe_update), or overwrites what the wgrad
 * reads (dy for l8_linear_backward / _act in bf16 mode, dy8t and db for
 * l8_linear_backward_fp8, and x, which a bf16 layer saves as a view), make
 * that stream wait for ws (l8_event_record on ws after the step's last
 * backward, then l8_stream_wait_event). Memory the layer allocates or
 * frees is recorded on ws, so freeing it early is safe. Takes effect at
 * the next backward; a host context runs both streams' work in order.
 * Errors: L8_ERR_INVALID_ARG (l NULL, ws of another context, sm_count <
 * 0). */
L8_NODISCARD l8_status l8_linear_set_wgrad_stream(l8_linear *l, l8_stream *ws, int sm_count);

/* The dgrad GEMM's plan for sm_count SMs: its l8_gemm_desc.sm_count in every
 * later backward of l that computes dX (0, the default: the plan for the
 * whole GPU). Meant for a dgrad that runs beside a wgrad on a stream of its
 * own (l8_linear_set_wgrad_stream) planned for the other SMs: cuBLASLt's
 * plan for fewer SMs can be a different kernel, so dX may differ from 0's
 * in the last bits, and everything computed from it with it. Whether it is
 * faster depends on the shapes and the GPU: measure (lean8-train uses it
 * for its FP8 layers' dgrads, docs/train.md). A host context ignores it.
 * Errors: L8_ERR_INVALID_ARG (l NULL, sm_count < 0). */
L8_NODISCARD l8_status l8_linear_set_dgrad_sms(l8_linear *l, int sm_count);

/* Release a ctx without running backward (hooks.release is called). NULL: no-op. */
void l8_linear_ctx_destroy(l8_linear_ctx *c);

/* Counters since create. */
typedef struct l8_linear_stats {
    size_t size;                  /* sizeof(l8_linear_stats), set by the caller */
    uint64_t forwards, backwards;
    uint64_t weight_casts;        /* weight copies built (FP8 cast+transpose or bf16 convert) */
    uint64_t input_casts;         /* FP8 casts of X */
    uint64_t grad_casts;          /* FP8 casts of dY */
    uint64_t steps;               /* l8_linear_begin_step calls */
    int64_t micro_batch;          /* backwards since the last begin_step */
} l8_linear_stats;

/* The stats rule of docs/api.md. Errors: L8_ERR_INVALID_ARG (NULL, a size covering
 * no field). */
L8_NODISCARD l8_status l8_linear_get_stats(const l8_linear *l, l8_linear_stats *out);

int64_t l8_linear_in_features(const l8_linear *l);    /* K; 0 for NULL */
int64_t l8_linear_out_features(const l8_linear *l);   /* N; 0 for NULL */
l8_linear_mode l8_linear_get_mode(const l8_linear *l);
/* The recipe rows of the input, weight and grad_output roles (FP8), else -1. */
int l8_linear_role_index(const l8_linear *l, l8_fp8_role role);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_LINEAR_H */
