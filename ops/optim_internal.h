/* optim_internal.h - what ops/optim.c (create, step, the host reference)
 * and ops/optim_shard.c (ZeRO-1 shards, the norm hook, checkpoints) share.
 * Not installed. Grouped by the file that defines them.
 */
#ifndef L8_OPS_OPTIM_INTERNAL_H
#define L8_OPS_OPTIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "ops/optim.h"

/* ---- optim.c: the data model ---- */

#define L8I_OPTIM_CHUNK 4096u          /* elements per norm partial (the kernel's 256 x 4 x 4) */
#define L8I_OPTIM_SCALARS_BYTES 256u   /* the step scalars, padded so the partials stay aligned */

/* The step scalars; ptx/optim.ptx.in uses these byte offsets. */
typedef struct l8i_optim_scalars {
    uint64_t step;
    uint32_t skip;
    float norm;
    float clip;
    float bc1;
    float bc2s;
    uint32_t pad0;
    double sumsq;
    float lr;                       /* written by push_lr (host), read by the updates */
    float decay;                    /* 1 - lr * weight_decay (AdamW) */
    float psum;                     /* the norm hook's tensor: this rank's sum of squares,
                                       then (after the hook) the group's */
    uint32_t cursor;                /* steps since l8_optim_set_lr_table (l8_optim_cursor) */
    uint8_t pad1[8];
} l8i_optim_scalars;

/* One range of the group's buffers the optimizer steps: elements [off, off
 * + numel) of the flat buffers, state elements [base, base + numel), norm
 * partials from `chunk` (ceil(numel / 4096) of them). */
typedef struct l8i_optim_range {
    uint64_t off, numel, base, chunk;
} l8i_optim_range;

struct l8_optim {
    l8_optim_kind kind;
    l8_params *g;
    l8_ctx *ctx;
    l8_adamw_config adamw;
    l8_sgd_config sgd;
    float lr;
    int lr_external;                /* 1: the caller pushes lr (l8_optim_set_lr_external) */
    l8_tensor *rates;               /* l8_optim_set_lr_table's f32 [nrates], or NULL */
    uint32_t nrates;
    uint64_t n;                     /* group buffer elements */
    uint64_t nchunks;               /* norm partials of all ranges */
    int nstate;
    const char *state_name[2];
    l8_storage *state_st[2];
    l8_tensor *state[2];            /* f32 [sn] */
    l8_storage *work;               /* scalars + room for part_cap partials */
    uint64_t part_cap;              /* partials that fit in work */
    l8_storage *part_st;            /* f64 [nchunks] when more than part_cap; else NULL */
    l8_tensor *norm_t, *skip_t;     /* 0-dim views of the scalars */
    l8_tensor *psum_t;              /* f32 [1] view of scalars.psum: the hook's tensor */
    l8_tensor *cursor_t;            /* i32 [1] view of scalars.cursor (l8_optim_cursor) */
    l8_stream *last;                /* stream of the last step */
    /* the ranges stepped: unsharded one, [0, n), in `whole` */
    int sharded;
    int nrange;
    l8i_optim_range *range;         /* whole or malloc'ed [nrange] */
    l8i_optim_range whole;
    uint64_t sn;                    /* state elements: the ranges' numel summed */
    int shard_rank, shard_world;    /* l8_optim_set_shard_rank; -1, 0: not given */
    int touched;                    /* a step or a restore happened: set_shard refuses */
    l8_optim_norm_reduce_fn reduce;
    void *reduce_arg;
    int reduce_lost;                /* its communicator was destroyed first: steps fail */
};

/* The norm partials' device (or host) pointer. */
l8_status l8i_optim_partials(const l8_optim *o, double **out);

#endif /* L8_OPS_OPTIM_INTERNAL_H */
