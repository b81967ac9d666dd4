/* params.h - parameter groups: flat master weights and gradient buffers.
 *
 * A parameter group (l8_params) owns every trainable parameter of a model
 * (or of one data-parallel replica of it) in two contiguous buffers:
 *
 *   master     f32, the weights the optimizer updates ("params.master")
 *   main_grad  f32 (default) or bf16, where wgrad GEMMs write or accumulate
 *              the gradient ("params.main_grad")
 *
 * Life cycle: create, register parameters by name and shape (l8_params_add),
 * l8_params_finalize (allocates both buffers, zeroed, and every view), then
 * initialize the weights (l8_params_set_host, l8_params_init_*), train,
 * destroy. Optimizer state (ops/optim.h) is allocated by the optimizer with
 * the same layout, so a parameter's offset is the same in every buffer.
 *
 * Layout (the same element layout in every buffer, whatever its dtype):
 *  - parameters lie in REVERSE registration order: the last registered
 *    parameter starts at element 0. Backward produces gradients roughly
 *    last-layer-first, so the grads that are ready first are at the front
 *    of the buffer, and a data-parallel layer cutting the buffer into
 *    buckets from the front gets buckets that complete in order (as
 *    Megatron-LM's _ParamAndGradBuffer).
 *  - every parameter starts at a multiple of L8_PARAMS_ALIGN_ELEMS (128)
 *    elements: 512 B in f32 buffers, 256 B in bf16 ones; the buffers
 *    themselves start 512-B aligned (the allocator's block alignment). The
 *    layout does not depend on the grad dtype, so state saved from a group
 *    with f32 grads fits a group with bf16 grads.
 *  - the buffer length (l8_params_buffer_numel) is the sum of the padded
 *    sizes, a multiple of 128 elements (so kernels may move 16 B at a time
 *    over the whole buffer). Padding elements are zero in every buffer after
 *    finalize and stay zero: nothing writes them except zero_grad (zeroes)
 *    and the optimizers (whose update of zero weight, zero grad, zero state
 *    is zero).
 *
 * Views never go missing (gradient buffers are always materialized):
 * finalize creates a master view and a main_grad view for every parameter, and the
 * accessors hand out those views (borrowed) for the group's whole life. A
 * parameter that receives no gradient in a step still has its main_grad
 * view: it holds zeros after l8_params_zero_grad, and the optimizer steps it
 * like any other (weight decay and momentum still apply, as in Megatron).
 *
 * Grad ready: after a layer has enqueued a parameter's wgrad (into its
 * main_grad view) it calls l8_params_grad_ready(g, id, event). The group
 * counts the report in a per-step table and calls the callback a
 * data-parallel layer installed (l8_params_set_grad_ready_cb); both have the
 * one signature l8_grad_ready_fn. runtime/
 * never calls up into ops/: the group owns the callback, layers call it.
 *
 * Streams: the buffers are allocated for the context's compute stream; zero
 * _grad takes a stream; the host-data helpers (set/get/init) are blocking
 * copies through the compute stream.
 *
 * Thread safety: calls on one group must not run concurrently (one thread
 * drives a training step); the const queries may run alongside each other.
 *
 * Errors: L8_ERR_INVALID_ARG (NULL, bad id, bad name or shape, duplicate
 * name, size mismatch), L8_ERR_STATE (add after finalize, data access before
 * finalize), L8_ERR_OOM (the group stays valid and unchanged: finalize can
 * be retried), L8_ERR_CUDA. A failed call changes nothing.
 */
#ifndef L8_PARAMS_H
#define L8_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_params l8_params;

/* Every parameter starts at a multiple of this many elements. */
#define L8_PARAMS_ALIGN_ELEMS 128
/* Longest parameter name in bytes (without the NUL). */
#define L8_PARAMS_NAME_MAX 255

typedef struct l8_params_config {
    size_t size;                  /* sizeof(l8_params_config) */
    l8_dtype grad_dtype;          /* L8_F32 (default) or L8_BF16 */
    int64_t pad_to;               /* the buffers' length is a multiple of this many elements:
                                     0 (default) = L8_PARAMS_ALIGN_ELEMS; else a multiple of it
                                     (ZeRO-1 over p ranks: 128 x p, so every bucket splits
                                     evenly, runtime/ddp.h) */
} l8_params_config;
#define L8_PARAMS_CONFIG_INIT { sizeof(l8_params_config), L8_F32, 0 }
/* Fill *cfg with the defaults of L8_PARAMS_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_params_config_init(l8_params_config *cfg);

/* A new empty group on ctx; cfg NULL: defaults. The caller owns *out.
 * Errors: L8_ERR_INVALID_ARG (grad dtype not f32/bf16, cfg->size too small),
 * L8_ERR_OOM. */
L8_NODISCARD l8_status l8_params_create(l8_ctx *ctx, const l8_params_config *cfg,
                                        l8_params **out);

/* Destroy the views and release the buffers (stream-ordered on the compute
 * stream; views the caller made from the group's views keep the storage
 * alive). Destroy what was built over the group first: a DDP reducer
 * (l8_ddp_destroy, which uninstalls itself from the group) and an optimizer
 * (l8_optim_destroy), and the layers that report into it (l8_linear with
 * grad_ready = l8_params_grad_ready, grad_ready_arg = g). In the other order
 * they are told and turn inert: their calls that need the group fail with
 * L8_ERR_STATE, their destroy still works. NULL: no-op. */
void l8_params_destroy(l8_params *g);

/* ---- registration ---- */

/* Register a parameter: name (copied; 1..L8_PARAMS_NAME_MAX bytes, unique
 * in the group), ndim 0..4 (0: a scalar), every dim >= 1. *id receives the
 * parameter's id: 0, 1, 2, ... in registration order (id may be NULL).
 * Errors: L8_ERR_INVALID_ARG (name, duplicate, shape, size overflow),
 * L8_ERR_STATE (already finalized), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_params_add(l8_params *g, const char *name, int ndim,
                                     const int64_t *shape, int *id);

/* Lay out and allocate: master (f32) and main_grad buffers, both zeroed on
 * the compute stream, one master and one main_grad view per parameter and
 * the two whole-buffer views. Allocations are tagged "params.master" and
 * "params.main_grad" in the memory trace. A group with no parameters gets
 * empty buffers. Errors: L8_ERR_STATE (finalized already), L8_ERR_OOM,
 * L8_ERR_CUDA; on error nothing stays allocated and the group can still
 * take parameters or be finalized again. */
L8_NODISCARD l8_status l8_params_finalize(l8_params *g);

/* ---- queries (NULL group or bad id: 0, -1 or NULL as noted) ---- */

l8_ctx *l8_params_ctx(const l8_params *g);
int l8_params_is_finalized(const l8_params *g);       /* 0 / 1 */
l8_dtype l8_params_grad_dtype(const l8_params *g);
int l8_params_count(const l8_params *g);              /* registered parameters */
const char *l8_params_name(const l8_params *g, int id);   /* group-owned; NULL */
int l8_params_ndim(const l8_params *g, int id);       /* -1 */
int64_t l8_params_dim(const l8_params *g, int id, int d);   /* -1 */
int64_t l8_params_numel(const l8_params *g, int id);  /* -1 */
/* First element of the parameter in every buffer; -1 before finalize. */
int64_t l8_params_offset(const l8_params *g, int id);
/* Sum of the parameters' numel (no padding). */
int64_t l8_params_numel_total(const l8_params *g);
/* Length of each flat buffer in elements (padding included); -1 before
 * finalize. */
int64_t l8_params_buffer_numel(const l8_params *g);
/* The id of the parameter called name. Errors: L8_ERR_INVALID_ARG (NULL, or
 * no such parameter: *id = -1). */
L8_NODISCARD l8_status l8_params_find(const l8_params *g, const char *name, int *id);

/* ---- views (borrowed: owned by the group, valid until l8_params_destroy;
 * NULL only for a bad id or before finalize) ---- */

/* Parameter id's master weights: f32, contiguous, the parameter's shape. */
l8_tensor *l8_params_master(const l8_params *g, int id);
/* Parameter id's gradient: grad dtype, contiguous, the parameter's shape.
 * A wgrad GEMM writes it (= , beta 0) on the first micro-batch after
 * zero_grad or accumulates into it (+=, beta 1). */
l8_tensor *l8_params_main_grad(const l8_params *g, int id);
/* Whole buffers, 1-D [l8_params_buffer_numel]: for optimizers, all-reduce,
 * checkpoints. */
l8_tensor *l8_params_master_flat(const l8_params *g);
l8_tensor *l8_params_grad_flat(const l8_params *g);

/* ---- gradients ---- */

/* main_grad = 0 over the whole buffer (padding included), enqueued on s
 * (NULL: compute stream), and the per-step ready table is cleared (as
 * l8_params_reset_ready). Errors: L8_ERR_STATE (not finalized),
 * L8_ERR_INVALID_ARG (s of another context), L8_ERR_CUDA, L8_ERR_OOM (host
 * memory to record a second stream). */
L8_NODISCARD l8_status l8_params_zero_grad(l8_params *g, l8_stream *s);

/* The one grad-ready signature lean8 uses: a layer's report to the group
 * (l8_linear_config.grad_ready), the group's to its consumer (a
 * data-parallel reducer, runtime/ddp.h). Parameter param_id's main_grad has
 * its wgrad enqueued; event (may be NULL: nothing to wait on, e.g. the host
 * backend) completes when it is written. The event stays the reporter's and
 * may be re-recorded by its next backward: make a stream wait on it
 * (l8_stream_wait_event) or query it inside the callback; do not keep it.
 * A non-OK status is returned to the reporter. */
typedef l8_status (*l8_grad_ready_fn)(void *arg, int param_id, l8_event *event);

/* Install (fn NULL: remove) the group's consumer of reports; arg is passed
 * through. Runs on the reporting thread, inside l8_params_grad_ready.
 * Errors: L8_ERR_INVALID_ARG (g NULL). */
L8_NODISCARD l8_status l8_params_set_grad_ready_cb(l8_params *g, l8_grad_ready_fn fn, void *arg);

/* An l8_grad_ready_fn: `group` is the l8_params. A layer configured with
 * grad_ready = l8_params_grad_ready, grad_ready_arg = the group reports
 * straight into it. Parameter id's gradient for this step has been
 * enqueued. Counts the report in the ready table, then calls the group's
 * consumer if one is set and returns its status. Nothing is recorded or
 * waited on here. A parameter may report more than once per step (a tied
 * weight, micro-batches): each report calls the consumer; the consumer
 * decides what a repeat means.
 * Errors: L8_ERR_STATE (not finalized), L8_ERR_INVALID_ARG (NULL group, bad
 * id), or the consumer's status (the report is counted either way). */
L8_NODISCARD l8_status l8_params_grad_ready(void *group, int id, l8_event *ev);

/* Clear the ready table (start of a step; zero_grad does it too). */
void l8_params_reset_ready(l8_params *g);
/* Reports of parameter id since the last reset: 0 = never; -1 bad id. */
int l8_params_ready_count(const l8_params *g, int id);
/* 1 when every parameter has reported since the last reset (also for an
 * empty group), else 0. */
int l8_params_all_ready(const l8_params *g);
/* Number of parameters that have not reported since the last reset. */
int l8_params_missing_count(const l8_params *g);
/* The names of those parameters, in registration order, as
 * "fc1.bias, fc2.weight" into buf (at most n bytes with the NUL; buf may be
 * NULL when n is 0). Returns the length it wanted (snprintf rules). */
size_t l8_params_describe_missing(const l8_params *g, char *buf, size_t n);
/* L8_OK when every parameter has reported; otherwise L8_ERR_STATE with a
 * message naming the parameters that never did (how a data-parallel layer
 * turns a bucket that can never complete into an error, not a hang).
 * Errors also: L8_ERR_INVALID_ARG (g NULL). */
L8_NODISCARD l8_status l8_params_check_all_ready(const l8_params *g);

/* ---- host data (blocking: the copy is complete on return) ---- */

/* Master weights of id = data[0 .. n), n == numel. Errors: L8_ERR_STATE,
 * L8_ERR_INVALID_ARG (bad id, NULL, n != numel), L8_ERR_OOM, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_params_set_host(l8_params *g, int id, const float *data, size_t n);
/* out[0 .. n) = master weights of id. Errors: as set_host. */
L8_NODISCARD l8_status l8_params_get_host(l8_params *g, int id, float *out, size_t n);
/* main_grad of id = data, rounded to the grad dtype (bf16: round to nearest
 * even, NaN kept); for tests and host-computed gradients. Errors: as set_host. */
L8_NODISCARD l8_status l8_params_set_grad_host(l8_params *g, int id, const float *data,
                                               size_t n);
/* out = main_grad of id, widened to f32 (exact). Errors: as set_host. */
L8_NODISCARD l8_status l8_params_get_grad_host(l8_params *g, int id, float *out, size_t n);

/* Every master weight of id = value. Errors: as set_host (but no data). */
L8_NODISCARD l8_status l8_params_fill(l8_params *g, int id, float value);

/* Master weights of id = lo + (hi - lo) * u (f32, three roundings: hi - lo,
 * the product, the sum; so in [lo, hi], hi only by rounding), u uniform in
 * [0, 1) with 24 random bits: u_i = (x_i >> 40) * 2^-24, x_i the i-th output of splitmix64
 * started at `seed` (state += 0x9E3779B97F4A7C15, then the usual mix). The
 * generator is part of the contract: the same seed gives the same weights on
 * every machine and backend. Errors: as fill, L8_ERR_INVALID_ARG (lo, hi or
 * hi - lo not finite, or hi < lo). */
L8_NODISCARD l8_status l8_params_init_uniform(l8_params *g, int id, float lo, float hi,
                                              uint64_t seed);
/* Kaiming (He) uniform with leaky-ReLU slope a, fan_in mode, as PyTorch's
 * kaiming_uniform_: bound = sqrt(6 / ((1 + a^2) * fan_in)), fan_in = numel /
 * dim 0 (the product of the dims after the first: K for a [N, K] weight),
 * computed in double and rounded to f32, then l8_params_init_uniform(-bound,
 * bound, seed). a = sqrt(5) gives
 * nn.Linear's default bound 1/sqrt(fan_in). Errors: as init_uniform,
 * L8_ERR_INVALID_ARG (ndim < 2, a not finite). */
L8_NODISCARD l8_status l8_params_init_kaiming_uniform(l8_params *g, int id, float a,
                                                      uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* L8_PARAMS_H */
