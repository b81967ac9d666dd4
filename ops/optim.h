/* optim.h - optimizers over a whole parameter group: AdamW and SGD with
 * momentum, global-norm gradient clipping, and skipping of steps whose
 * gradients are not finite.
 *
 * An optimizer works on the group's flat buffers (runtime/params.h): the f32
 * master weights, the main_grad buffer (f32 or bf16) and its own f32 state
 * buffers laid out like them. One step is three launches on one stream,
 * none of which waits for the host:
 *
 *   1. sum of squares of main_grad in fixed 4096-element chunks, f64, one
 *      partial per chunk (ptx/optim.ptx.in l8_optim_sumsq)
 *   2. one CTA adds the partials in a fixed order and decides (on the
 *      device): norm = sqrt(sum) rounded to f32; if norm is NaN or +Inf the
 *      step is SKIPPED; else step += 1, the clip coefficient and the bias
 *      corrections are computed (l8_optim_finish)
 *   3. the update over the whole buffer in one launch; when the step is
 *      skipped it writes nothing (l8_adamw_update / l8_sgd_update)
 *
 * Clipping (max_grad_norm > 0): g' = g * c, c = min(1, max_norm / (norm +
 * 1e-6)) (PyTorch's clip_grad_norm_), in f64 rounded to f32; c = 1 when
 * clipping is off. The norm is that of the gradients before clipping.
 *
 * Skipped step: weights, optimizer state and the step counter stay bitwise
 * unchanged; the norm (NaN or Inf) and a skip flag are written. "Not
 * finite" means the f32 norm is NaN or +Inf: a NaN or Inf gradient, or a
 * norm above FLT_MAX.
 *
 * Formulas, per element, f32, each operation rounded once (mul.rn, add.rn,
 * div.rn, sqrt.rn: never contracted into an fma) in exactly this order:
 *   g = grad * c                                   (grad widened from bf16)
 *   AdamW (decoupled weight decay, Loshchilov & Hutter; PyTorch AdamW):
 *     p = p * (1 - lr*wd)          the factor rounded once on the host
 *     m = beta1*m + (1-beta1)*g     v = beta2*v + (1-beta2)*(g*g)
 *     d = sqrt(v) / sqrt(bc2) + eps
 *     p = p - (lr / bc1) * (m / d)
 *     bc1 = 1 - beta1^t, sqrt(bc2) = sqrt(1 - beta2^t): f64 from the step
 *     number t (1-based, after this step), powers by repeated squaring,
 *     rounded to f32 (the same on host and device)
 *   SGD (PyTorch SGD):
 *     weight_decay: g = g + wd*p (L2, coupled)
 *     momentum:     b = g on the first applied step, else
 *                   b = momentum*b + (1-dampening)*g
 *                   nesterov: g = g + momentum*b, else g = b
 *     p = p - lr*g
 * 1 - beta1, 1 - beta2 and 1 - dampening are rounded to f32 on the host.
 *
 * Determinism: the result does not depend on the device, the grid or the
 * run. The norm is a fixed-order f64 reduction (squares of f32 values are
 * exact in f64, so fma or not makes no difference), not an atomic one; the
 * update is elementwise. The host context runs a reference that repeats the
 * device arithmetic operation for operation, so a GPU step must match the
 * host step bit for bit (NaN payloads aside); resuming from a checkpoint
 * (master, state, step) continues bit for bit.
 *
 * ZeRO-1: a shard of the group, the norm over all shards.
 *
 * A data-parallel run with a sharded optimizer (ZeRO stage 1, Megatron's
 * distributed optimizer) gives each of its `world` ranks a disjoint part of
 * the group's flat buffers: after the gradient reduce-scatter, rank r holds
 * the reduced gradient of its ranges only, steps only them, and an
 * all-gather of the updated master ranges makes every rank whole again (the
 * caller's collectives: this optimizer does not communicate except through
 * the norm hook). The state (exp_avg, exp_avg_sq, momentum_buffer) exists
 * for the shard's elements only, compacted: range 0 first, then range 1...,
 * so memory per rank is about 1/world of the unsharded optimizer's.
 *
 * Sharded step, on stream s as l8_optim_step:
 *   1. l8_optim_sumsq over each range (one launch per range; chunks of 4096
 *      from the range's start), partials of all ranges in range order
 *   2. l8_optim_finish adds them in that fixed order (f64); with a norm
 *      hook it writes this rank's partial sum, rounded to f32, into an f32
 *      [1] device tensor, calls the hook to SUM it over the group in place,
 *      and a second l8_optim_finish widens the sum to f64 and decides (norm,
 *      skip, clip, step) exactly as the unsharded step: every rank sees the
 *      same bits, so every rank skips or applies the same step with the
 *      same clip coefficient
 *   3. the update kernel, one launch per range with offset pointers (the
 *      kernel is the unsharded one: per element the arithmetic is the same)
 * So with clipping off a sharded step gives the unsharded step's weights
 * and state bit for bit (the norm only decides the skip). With clipping on
 * the coefficient comes from a norm summed in another order and rounding:
 * per-rank f64 partial -> f32 (relative error <= 2^-24) -> summed in f32
 * over the ranks (host transports: in rank order 0..p-1, the same bits on
 * every rank; NCCL: its own fixed order) -> f64 -> sqrt -> f32, so the norm
 * is within a few f32 ulps of the unsharded one (relative ~(p + 2) 2^-24)
 * and the weights within about as much of the unsharded update (the test
 * states its bound). A sum of squares above FLT_MAX (a norm above
 * ~1.8e19) becomes +Inf in f32: with a hook such a step counts as not
 * finite and is skipped (unsharded it would be clipped). Without a hook the
 * sharded norm is this shard's own (f64 to the end): right for a world of 1
 * only. The hook also serves an unsharded optimizer whose group is split
 * across tensor-parallel ranks (each rank's partial covers its own
 * parameters; a parameter replicated on every TP rank is then counted once
 * per rank, as the caller arranges).
 *
 * Checkpoints (l8_optim_save / l8_optim_load). Sections: "optim.<state
 * name>" (tensor f32 [l8_optim_shard_numel]) for each state buffer,
 * "optim.step" (u64), and for a sharded optimizer "optim.shard": the
 * layout, docs/checkpoint-format.md. An unsharded
 * optimizer writes exactly the sections lean8-train wrote before sharding
 * existed. A sharded checkpoint resumes only on the same layout: the same
 * world size, rank and ranges (bitwise: state and step are restored
 * exactly; the master weights are the caller's section). Resharding (N
 * ranks -> M) is not supported: refused with a message naming both.
 *
 * Common rules: an optimizer belongs to one finalized group, which must
 * outlive it (destroy the optimizer first). Memory is allocated at create
 * (and at l8_optim_set_shard), zeroed, never per step: one f32 buffer per
 * state, tagged "optim.exp_avg", "optim.exp_avg_sq" or
 * "optim.momentum_buffer", and 256 B of step scalars plus 8 B per 4096
 * elements of partials, "optim.scalars" (a shard with more partials than
 * that holds gets them in "optim.partials"). Not thread-safe:
 * one thread drives an optimizer. Errors: L8_ERR_INVALID_ARG (bad config,
 * NULL, stream of another context), L8_ERR_STATE (group not finalized),
 * L8_ERR_OOM, L8_ERR_CUDA. A failed call changes nothing unless the last
 * error says a launch failed (then the step may be half done: restore from
 * a checkpoint).
 */
#ifndef L8_OPS_OPTIM_H
#define L8_OPS_OPTIM_H

#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "runtime/params.h"
#include "runtime/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_optim l8_optim;

/* Append-only. */
typedef enum l8_optim_kind { L8_OPTIM_ADAMW = 0, L8_OPTIM_SGD = 1 } l8_optim_kind;

/* AdamW; PyTorch's defaults. lr >= 0, 0 <= beta < 1, eps > 0, wd >= 0,
 * max_grad_norm >= 0 (0: no clipping), all finite. */
typedef struct l8_adamw_config {
    size_t size;                  /* sizeof(l8_adamw_config) */
    float lr;
    float beta1, beta2;
    float eps;
    float weight_decay;           /* decoupled */
    float max_grad_norm;
} l8_adamw_config;
#define L8_ADAMW_CONFIG_INIT \
    { sizeof(l8_adamw_config), 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 0.0f }
/* Fill *cfg with the defaults of L8_ADAMW_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_adamw_config_init(l8_adamw_config *cfg);

/* SGD; PyTorch's defaults. lr >= 0, momentum >= 0, 0 <= dampening <= 1,
 * wd >= 0, max_grad_norm >= 0, all finite; nesterov needs momentum > 0 and
 * dampening 0. Without momentum there is no state buffer. */
typedef struct l8_sgd_config {
    size_t size;                  /* sizeof(l8_sgd_config) */
    float lr;
    float momentum;
    float dampening;
    float weight_decay;           /* L2, added to the gradient */
    int nesterov;
    float max_grad_norm;
} l8_sgd_config;
#define L8_SGD_CONFIG_INIT { sizeof(l8_sgd_config), 1e-3f, 0.0f, 0.0f, 0.0f, 0, 0.0f }
/* Fill *cfg with the defaults of L8_SGD_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_sgd_config_init(l8_sgd_config *cfg);

/* What one step did. */
typedef struct l8_optim_result {
    size_t size;                  /* caller sets sizeof(l8_optim_result) */
    int skipped;                  /* 1: gradients not finite, nothing changed */
    float grad_norm;              /* global L2 norm of main_grad before clipping */
    float clip_coef;              /* the factor applied (1: no clipping) */
    uint64_t step;                /* steps applied so far, this one included */
} l8_optim_result;
#define L8_OPTIM_RESULT_INIT { sizeof(l8_optim_result), 0, 0.0f, 1.0f, 0 }

/* Create an optimizer for a finalized group; cfg NULL: defaults. State
 * buffers start at zero, the step counter at 0. The caller owns *out.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_STATE, L8_ERR_OOM, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_optim_create_adamw(l8_params *g, const l8_adamw_config *cfg,
                                             l8_optim **out);
L8_NODISCARD l8_status l8_optim_create_sgd(l8_params *g, const l8_sgd_config *cfg,
                                           l8_optim **out);
/* Release the state (stream-ordered on the streams it was used on). NULL:
 * no-op. Destroy it before its group; a group destroyed first leaves the
 * optimizer inert: l8_optim_step and l8_optim_state_view fail with
 * L8_ERR_STATE. */
void l8_optim_destroy(l8_optim *o);

/* One step over the whole group (sharded: over the shard's ranges, see
 * l8_optim_set_shard; with a norm hook the norm is the group's), enqueued
 * on s (NULL: the compute stream; it must already be ordered after the
 * gradients, e.g. after the data-parallel layer's finish). Updates master
 * weights (=) and state (=) in place from main_grad (read only; not
 * zeroed).
 * res NULL: nothing blocks; read the outcome later with
 * l8_optim_read_result. res given: the host waits for s and fills res (one
 * 64-byte read per step). On the host backend the step runs at once.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA, L8_ERR_OOM (host memory to record
 * a second stream), or the norm hook's status (nothing changed). */
L8_NODISCARD l8_status l8_optim_step(l8_optim *o, l8_stream *s, l8_optim_result *res);

/* The outcome of the last step (before any: step 0, not skipped, norm 0,
 * clip 1): blocks until the stream of the last step (or the compute stream)
 * has finished.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_optim_read_result(l8_optim *o, l8_optim_result *res);

/* Learning rate for the following steps (schedules). Errors:
 * L8_ERR_INVALID_ARG (negative or not finite). */
L8_NODISCARD l8_status l8_optim_set_lr(l8_optim *o, float lr);
float l8_optim_lr(const l8_optim *o);             /* NaN for NULL */

/* Where the update kernels get the learning rate: from the device step
 * scalars, written in stream order before they run (for AdamW with the
 * decay factor 1 - lr*weight_decay, rounded on the host as before).
 * external = 0 (the default): l8_optim_step writes the rate of the last
 * l8_optim_set_lr itself, ahead of its kernels. external = 1: it does not;
 * the caller enqueues l8_optim_push_lr before each step. That is for a step
 * captured once in a CUDA graph (runtime/graph.h) and launched many times:
 * whatever l8_optim_step enqueues is frozen at capture, so the new rate of a
 * schedule must come from a push enqueued outside the graph before each
 * launch. A step without any push after set_lr uses the rate last pushed.
 * Errors: L8_ERR_INVALID_ARG (NULL). */
L8_NODISCARD l8_status l8_optim_set_lr_external(l8_optim *o, int external);
/* Enqueue on s (NULL: the compute stream) the write of the current rate
 * (l8_optim_set_lr) into the step scalars: two 4-byte memsets that carry
 * the values, so set_lr may change the rate at once after the call. Host
 * backend: written now. Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_optim_push_lr(l8_optim *o, l8_stream *s);

/* A schedule kept on the device, for steps captured in a CUDA graph with
 * nothing enqueued between launches. rates: an L8_F32 1-d contiguous tensor
 * of n >= 1 rates (finite, >= 0: not checked, they are device data) on o's
 * context. From this call on, the k-th step (k = 0, 1, ...: every
 * l8_optim_step, skipped or not) runs with rate rates[min(k, n - 1)] - for
 * AdamW with decay 1 - rate*weight_decay, rounded as l8_optim_step rounds it
 * on the host, so a table of the rates a loop would set gives bit for bit
 * its results. k is the step cursor (l8_optim_cursor): this call resets it
 * to 0 (enqueued on s, NULL: the compute stream); each step's l8_optim_finish
 * kernel reads its entry and adds 1. The step's kernels get the table's
 * address, so a captured step reads the table given at capture: to change
 * the schedule, write new rates into the same tensor (in stream order) and
 * call again to reset the cursor. o keeps a view of rates (its storage
 * lives on) until the next call. rates NULL: the host's rate again
 * (l8_optim_set_lr, l8_optim_set_lr_external); the cursor is reset and keeps
 * counting. Host backend: the same, at once. Not saved in checkpoints.
 * Errors: L8_ERR_INVALID_ARG (dtype, rank, stride, size, another context),
 * L8_ERR_STATE (not on the device), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_optim_set_lr_table(l8_optim *o, const l8_tensor *rates, l8_stream *s);

/* The step cursor: an L8_I32 tensor of one element on o's device, a view
 * of the step scalars owned by o (do not destroy): the number of steps since
 * the last l8_optim_set_lr_table (or since create). Stored as 32 bits: past
 * 2^31 - 1 steps without a reset it reads negative, and moves at it count
 * as out of range (a loop resets it each epoch). Work
 * enqueued in a step before l8_optim_step reads that step's number k (the
 * finish kernel adds 1 after): l8_gather_rows_at and l8_put_rows_at
 * (ops/gather.h) use it to pick the step's batch out of an epoch's order and
 * to file its per-image results, inside a CUDA graph. NULL for NULL. */
l8_tensor *l8_optim_cursor(const l8_optim *o);
l8_optim_kind l8_optim_kind_of(const l8_optim *o);

/* ---- state, for checkpoints ---- */

/* Number of state buffers: AdamW 2 ("exp_avg", "exp_avg_sq"), SGD with
 * momentum 1 ("momentum_buffer"), SGD without 0. */
int l8_optim_state_count(const l8_optim *o);
const char *l8_optim_state_name(const l8_optim *o, int k);   /* NULL: bad k (as below) */
/* State buffer k as a whole-buffer view: f32, 1-D
 * [l8_params_buffer_numel], the group's layout; sharded: f32
 * [l8_optim_shard_numel], the ranges one after the other. Borrowed: valid
 * until l8_optim_destroy or l8_optim_set_shard. NULL, with an
 * L8_ERR_INVALID_ARG error record: bad k or o NULL. Restore it with
 * l8_tensor_copy_from_host. */
l8_tensor *l8_optim_state(const l8_optim *o, int k);
/* State buffer k of parameter id as a new view with the parameter's shape
 * (owned by the caller). Sharded: only for a parameter that lies wholly
 * inside one range of the shard. Errors: L8_ERR_INVALID_ARG (bad k or id,
 * a parameter not wholly in the shard), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_optim_state_view(const l8_optim *o, int k, int id, l8_tensor **out);
/* Steps applied so far (blocking read: waits for the last step's stream).
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_optim_get_step(l8_optim *o, uint64_t *step);
/* Set the step counter (resume). Blocking: the value is on the device on
 * return, ordered after every step enqueued before. Errors: as get_step,
 * and L8_ERR_INVALID_ARG for a step above 2^63 - 1 (a negative count passed
 * through a signed type, as a binding would). */
L8_NODISCARD l8_status l8_optim_set_step(l8_optim *o, uint64_t step);

/* Device scalars written by every step, as 0-dim views (borrowed, valid
 * until destroy) for device-side consumers (logging, loss-scale logic):
 * the grad norm (f32) and the skip flag (i32, 1 when the last step was
 * skipped). */
l8_tensor *l8_optim_grad_norm(const l8_optim *o);
l8_tensor *l8_optim_skip_flag(const l8_optim *o);

/* ---- ZeRO-1: a shard of the group, the norm over all shards (see the
 * top of this file) ---- */

/* Most ranges one shard may have. */
#define L8_OPTIM_MAX_RANGES 1024

/* From now on o updates only elements [offset[i], offset[i] + numel[i]) of
 * the group's flat buffers, i < n, and its state exists only for them.
 * Ranges: sorted, disjoint, numel >= 1, offset and numel multiples of
 * L8_PARAMS_ALIGN_ELEMS (128), inside l8_params_buffer_numel; 0 <= n <=
 * L8_OPTIM_MAX_RANGES (n 0: an empty shard that updates nothing but still
 * takes part in the norm hook). Arrays are copied; they may be NULL when n
 * is 0. Call it after create and before the first step or any restore of
 * state (l8_optim_set_step, l8_optim_load) - a data-parallel reducer calls
 * it with the ranges its reduce-scatter leaves on this rank (one per
 * bucket); it may be called again before that step to change the ranges.
 * There is no way back to the whole group (create a new optimizer).
 * Effects: the state buffers are replaced by zeroed compact ones
 * (f32 [l8_optim_shard_numel]), so views from l8_optim_state taken before
 * are invalid; the learning rate, the step counter and the step scalars
 * (grad_norm, skip_flag views) are kept. The old buffers are released
 * stream-ordered. Blocking: waits for the compute stream.
 * Errors: L8_ERR_INVALID_ARG (NULL, n, a range that breaks a rule: the
 * message names it), L8_ERR_STATE (a step or a restore happened already),
 * L8_ERR_OOM, L8_ERR_CUDA. On error o is unchanged. */
L8_NODISCARD l8_status l8_optim_set_shard(l8_optim *o, int n, const int64_t *offset,
                                          const int64_t *numel);

/* Which data-parallel rank of how many ranks this shard belongs to (0 <=
 * rank < world). Recorded by l8_optim_save for a sharded optimizer so that
 * l8_optim_load can refuse a checkpoint written by another number of ranks
 * (or by another rank) with a message naming both; without it a sharded
 * checkpoint records world 0 ("not given") and only the ranges are
 * compared. Any time. Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_optim_set_shard_rank(l8_optim *o, int rank, int world);

/* 1 when l8_optim_set_shard was called, else 0 (also for NULL). */
int l8_optim_is_sharded(const l8_optim *o);
/* The shard's ranges (unsharded: 1, the whole buffer [0, buffer_numel)).
 * -1 for NULL. */
int l8_optim_shard_count(const l8_optim *o);
/* Range i of the shard as group elements. Errors: L8_ERR_INVALID_ARG (NULL,
 * i out of range). */
L8_NODISCARD l8_status l8_optim_shard_range(const l8_optim *o, int i, int64_t *offset,
                                            int64_t *numel);
/* Elements of each state buffer: the sum of the ranges' numel (unsharded:
 * l8_params_buffer_numel). -1 for NULL. */
int64_t l8_optim_shard_numel(const l8_optim *o);
/* Device bytes of the state buffers: state_count x shard_numel x 4 (the
 * step scalars and norm partials, 256 B + 8 B per 4096 elements, are not
 * counted). 0 for NULL. */
size_t l8_optim_state_bytes(const l8_optim *o);

/* The norm hook: SUM-reduce `partial` in place over the group (every rank
 * of the data-parallel group, and of the tensor-parallel one where the
 * group is split), enqueued on s or ordered after it, so that work
 * enqueued on s afterwards sees the sum. partial is an f32 [1] tensor on
 * the optimizer's context (device memory; host memory on a host context)
 * holding this rank's sum of squares, rounded from f64. Called once per
 * step, inside l8_optim_step, on the calling thread; every rank must step
 * (the hook is a collective). A non-OK status fails the step: nothing
 * (weights, state, step counter) has changed, the status is returned. */
typedef l8_status (*l8_optim_norm_reduce_fn)(void *arg, l8_tensor *partial, l8_stream *s);

/* Install (fn NULL: remove) the norm hook (l8_optim_norm_reduce_fn above:
 * SUM-reduce the f32 [1] partial in place over the group, on or after s;
 * a non-OK status fails the step, nothing changed); arg is passed through.
 * Any time (the next step uses it). Over a communicator: fn = l8_comm_reduce_sum
 * (runtime/comm.h), arg = the l8_comm; if the communicator is destroyed
 * first, l8_optim_step fails with L8_ERR_STATE until a hook is set again.
 * Errors: L8_ERR_INVALID_ARG (o NULL), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_optim_set_norm_reduce(l8_optim *o, l8_optim_norm_reduce_fn fn,
                                                void *arg);


/* ---- checkpoints (runtime/checkpoint.h; see the top of this file) ---- */

/* Write o's sections into w. Blocking: waits for the stream of the last
 * step. Errors: those of l8_ckpt_write_tensor / _section, L8_ERR_INVALID_ARG
 * (NULL). */
L8_NODISCARD l8_status l8_optim_save(l8_optim *o, l8_ckpt_writer *w);
/* Would l8_optim_load accept r? Checks the layout (unsharded vs sharded,
 * world size, rank, ranges) and every section's presence, dtype and shape,
 * so a loader that restores several components can check them all first.
 * Errors: L8_ERR_INVALID_ARG (the message names the file and what differs:
 * "checkpoint F was written by 4 ranks (the ZeRO-1 shard of rank 0 of 4
 * ranks), this run has 2 ranks (...): refused"). */
L8_NODISCARD l8_status l8_optim_check_load(const l8_optim *o, const l8_ckpt_reader *r);
/* Restore state and step from r (checked first as l8_optim_check_load: on
 * a refusal nothing changes). Blocking. Errors: those of check_load,
 * l8_ckpt_read_tensor, l8_optim_set_step. */
L8_NODISCARD l8_status l8_optim_load(l8_optim *o, const l8_ckpt_reader *r);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_OPTIM_H */
