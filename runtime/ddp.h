/* ddp.h - data parallel: the gradients of a parameter group averaged over a
 * data-parallel communicator in buckets, overlapped with backward.
 *
 * The reducer cuts the group's contiguous main_grad buffer into buckets:
 * consecutive parameters in buffer order (the REVERSE of registration, so
 * the gradients backward produces first fill bucket 0), each bucket about
 * bucket_elems elements (closed at a parameter boundary; every bucket starts
 * and ends on the 128-element boundaries of the group's layout). Every
 * parameter's main_grad stays the group's view into that buffer for the
 * group's whole life: the reducer reduces in place.
 *
 * A step:
 *   l8_ddp_begin_micro_batch(d, last)     before each micro-batch's backward
 *                                         (optional with one micro-batch)
 *   ... backward: layers report through l8_params_grad_ready ...
 *   l8_ddp_finish(d, s)                   before the optimizer step
 * The reducer installs itself as the group's grad-ready consumer
 * (l8_params_set_grad_ready_cb); configure each Linear with grad_ready =
 * l8_params_grad_ready, grad_ready_arg = the group. On a report during the
 * LAST micro-batch it makes the comm stream wait on the reporter's event
 * and, when every parameter of a bucket has reported (overlap on), launches
 * the bucket's all-reduce (average) on the comm stream - in bucket order, so
 * every rank issues the same collectives in the same order whatever order
 * its reports come in. Reports of earlier micro-batches only accumulate
 * (the Linear writes main_grad with beta = 0 on a step's first backward, 1
 * after): nothing is reduced before the last micro-batch, and the caller
 * says which one that is - a flag, not a guess.
 *
 * finish launches the buckets still pending and makes stream s wait on the
 * comm stream; the host never waits. A parameter that did not report in the
 * step (an unused branch, a frozen or skipped layer) gets a zeroed main_grad
 * before its bucket is reduced - never a stale one, never a missing one - or,
 * with strict = 1, finish fails naming every such parameter.
 * l8_ddp_mark_unused declares one early, so its bucket need not wait for
 * finish. A parameter reported twice in one micro-batch is an error naming
 * it (a tied weight must report once).
 *
 * overlap = 0 launches every bucket at finish: the same collectives on the
 * same data, hence the same bits (tests check it). On a host context the
 * collectives run inside the report (the host transports are synchronous),
 * so ranks are threads or processes that run the same steps.
 *
 * ZeRO-1 (zero1 = 1). Each bucket is reduce-scattered instead of
 * all-reduced: rank r of p keeps the averaged gradient of the bucket's r-th
 * p-th (the rest of main_grad then holds partial sums: do not read it).
 * Buckets are cut on multiples of 128 x p elements (a parameter may span
 * two buckets), so the group must be created with pad_to = 128 x p
 * (l8_params_config). The caller gives the optimizer this rank's ranges
 * (l8_ddp_shard_ranges -> l8_optim_set_shard), sums the squared-norm partial
 * over the group (l8_optim_set_norm_reduce with l8_comm_reduce_sum), steps,
 * then l8_ddp_gather_params all-gathers the updated master ranges so every
 * rank is whole again. The optimizer's state exists for the shard only.
 *
 * Thread safety: one thread drives a reducer (the one running backward).
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_STATE (a report out of place, a
 * double report, strict and a parameter missing), and the communicator's.
 * A failed collective fails the communicator (comm.h): every later finish
 * returns that error.
 */
#ifndef L8_DDP_H
#define L8_DDP_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/params.h"
#include "runtime/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_ddp l8_ddp;

/* Megatron-LM's default: 40M elements (160 MB of f32 gradients). */
#define L8_DDP_BUCKET_DEFAULT 40000000

typedef struct l8_ddp_config {
    size_t size;                  /* sizeof(l8_ddp_config) */
    int64_t bucket_elems;         /* target elements per bucket; 0: L8_DDP_BUCKET_DEFAULT */
    int overlap;                  /* 1: launch buckets during backward; 0: all at finish */
    int strict;                   /* 1: a parameter that never reports fails finish */
    int zero1;                    /* 1: ZeRO-1 (see "ZeRO-1" below) */
} l8_ddp_config;
#define L8_DDP_CONFIG_INIT { sizeof(l8_ddp_config), 0, 1, 0, 0 }
/* Fill *cfg with the defaults of L8_DDP_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_ddp_config_init(l8_ddp_config *cfg);

/* A reducer for finalized group g over dp (of g's context); it becomes g's
 * grad-ready consumer until destroyed. g and dp should outlive it: either
 * one destroyed first leaves the reducer inert (every call below that
 * steps, zeroes or gathers, and a report through the group, fails with
 * L8_ERR_STATE; l8_ddp_destroy still works).
 * Errors: L8_ERR_INVALID_ARG (NULL, not finalized, another context,
 * bucket_elems < 0, overlap/strict not 0 or 1), L8_ERR_STATE (g already has a
 * grad-ready consumer: another reducer, or l8_params_set_grad_ready_cb; a
 * replaced consumer would silently lose reports), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_ddp_create(l8_params *g, l8_comm *dp, const l8_ddp_config *cfg,
                                     l8_ddp **out);

/* Uninstall from the group (unless its callback was replaced since), free.
 * Collectives already enqueued stay enqueued (stream-ordered). NULL: no-op. */
void l8_ddp_destroy(l8_ddp *d);

/* The next backward is a micro-batch; last = 1 for the step's last one
 * (whose reports launch the reductions). Without a call every backward
 * counts as a step's only (last) micro-batch. Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_ddp_begin_micro_batch(l8_ddp *d, int last);

/* Parameter id gets no gradient this step: its main_grad is zeroed on the
 * comm stream and it counts as reported (its bucket may launch). Call it
 * during the last micro-batch (after begin_micro_batch, before finish).
 * Errors: L8_ERR_INVALID_ARG (bad id), L8_ERR_STATE (it reported already). */
L8_NODISCARD l8_status l8_ddp_mark_unused(l8_ddp *d, int id);

/* End of backward: zero the main_grad of parameters that did not report
 * (strict: fail instead, naming them), launch the remaining buckets, make s
 * (NULL: compute stream) wait for every bucket. Resets the step.
 * Errors: L8_ERR_STATE (strict and a parameter missing: nothing launched
 * for its bucket or later ones; the step is reset), the collectives'. */
L8_NODISCARD l8_status l8_ddp_finish(l8_ddp *d, l8_stream *s);

/* ZeRO-1: this rank's part of every bucket, one range per bucket, sorted:
 * elements [offset[i], offset[i] + numel[i]) of the group's buffers. *n is
 * the bucket count; at most max entries are written. Errors:
 * L8_ERR_INVALID_ARG (NULL, max < the bucket count), L8_ERR_STATE (not a
 * zero1 reducer). */
L8_NODISCARD l8_status l8_ddp_shard_ranges(const l8_ddp *d, int max, int *n, int64_t *offset,
                                           int64_t *numel);

/* ZeRO-1, after the optimizer step on stream s (NULL: compute): every
 * bucket's master weights all-gathered in place from their owners' ranges,
 * on the comm stream after s, the buckets the forward needs first (the end
 * of the buffer: the first layers) first. wait = 1: s waits for all of
 * them. wait = 0: nothing waits yet - call l8_ddp_wait_param before a
 * parameter's first use (each layer's forward), so the later layers'
 * gathers overlap the earlier layers' forward; the next l8_ddp_finish
 * orders everything else. The host does not wait either way.
 * Errors: L8_ERR_STATE (not a zero1 reducer), the collectives'. */
L8_NODISCARD l8_status l8_ddp_gather_params(l8_ddp *d, l8_stream *s, int wait);

/* Stream s (NULL: compute) waits until parameter id's master weights are
 * gathered (a no-op when nothing is pending for its buckets); id -1: every
 * parameter's (before reading the whole buffer, e.g. a checkpoint).
 * Errors: L8_ERR_INVALID_ARG (bad id, s of another context), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_ddp_wait_param(l8_ddp *d, int id, l8_stream *s);

/* Buckets and what happened in the last finished step. */
typedef struct l8_ddp_stats {
    size_t size;                  /* sizeof(l8_ddp_stats), set by the caller */
    int buckets;
    int64_t largest_bucket;       /* elements */
    uint64_t steps;               /* finishes */
    int launched_in_backward;     /* last step: buckets launched by reports / mark_unused */
    int launched_at_finish;       /* last step: buckets launched by finish */
    int zeroed;                   /* last step: parameters zeroed for not reporting */
} l8_ddp_stats;
/* The last step's counters (the stats rule of docs/api.md).
 * Errors: L8_ERR_INVALID_ARG (NULL, a size covering no field). */
L8_NODISCARD l8_status l8_ddp_get_stats(const l8_ddp *d, l8_ddp_stats *out);

/* Bucket b's range in the grad buffer: elements [*first, *first + *n).
 * Errors: L8_ERR_INVALID_ARG (bad b). */
L8_NODISCARD l8_status l8_ddp_bucket(const l8_ddp *d, int b, int64_t *first, int64_t *n);

#ifdef __cplusplus
}
#endif
#endif /* L8_DDP_H */
