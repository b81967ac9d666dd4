/* recipe.h - the FP8 delayed-scaling recipe (TransformerEngine's default).
 *
 * A recipe owns the scaling state of N FP8 tensor roles (each Linear
 * registers three: its input, its weight and its output gradient) in
 * contiguous device arrays, so one launch updates them all:
 *
 *     amax_history [N, H] f32   row i = role i, newest first (H default 1024)
 *     amax         [N]    f32   this step's amaxes, gathered from the metas
 *     scale        [N]    f32   the scales the casts use (mirrored in the metas)
 *     fp8_max      [N]    f32   448 (E4M3 roles) or 57344 (E5M2 roles)
 *
 * Each role has an l8_fp8_meta created by the recipe ({scale, scale_inv,
 * amax} device scalars, runtime/tensor.h). The cast ops read the meta's
 * scale, write its scale_inv, and max-accumulate its amax
 * (L8_CAST_ACCUMULATE_AMAX) over the step's micro-batches.
 *
 * l8_recipe_update, once per optimizer step after the step's last backward,
 * enqueues on the stream:
 *   1. gather   amax[i] = max(amax[i], meta_i.amax); meta_i.amax = 0;
 *   2. reduce   the amax-reduction hook, if set, with the amax [N] tensor: a
 *               tensor/data-parallel group all-reduces it with MAX there, so
 *               every rank computes the same scales;
 *   3. update   one l8_fp8_scale_update launch: push amax[i] into row i of the
 *               history (dropping the oldest), a = max(history row) or the
 *               newest (most_recent), scale = (fp8_max / a) / 2^margin; a
 *               zero or non-finite a keeps the old scale, a non-finite new
 *               amax is not pushed at all; then amax[i] = 0;
 *   4. scatter  meta_i.scale = scale[i]. scale_inv is left as the last cast
 *               wrote it: FP8 data cast with the old scale still decodes
 *               correctly until it is cast again.
 * On the GPU steps 1, 3 and 4 are one launch (two when a reduce hook needs
 * the gathered amaxes between 1 and 3); the host backend runs them in turn.
 * A hook that fails stops the update before step 3: the gathered amaxes stay
 * in amax [N] and the next update folds them in, so nothing is lost.
 *
 * HYBRID format: E4M3 for forward tensors (input, weight), E5M2 for the
 * gradient; E4M3 format: E4M3 everywhere.
 *
 * Differences from TransformerEngine: one update per step for all roles
 * (TE updates forward roles after forward and backward roles after
 * backward); a role that saw no cast this step pushes an amax of 0 into its
 * history (TE skips the roll) - with amax_compute = max the scale then still
 * follows the window.
 *
 * Thread safety: a recipe is used from one thread at a time. Roles are never
 * unregistered: indices are stable for the life of the recipe.
 */
#ifndef L8_OPS_RECIPE_H
#define L8_OPS_RECIPE_H

#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "ops/cast.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_recipe l8_recipe;

/* Append-only. */
typedef enum l8_fp8_role {
    L8_ROLE_INPUT = 0,            /* forward activation (Linear X) */
    L8_ROLE_WEIGHT = 1,           /* weight (Linear W) */
    L8_ROLE_GRAD_OUTPUT = 2       /* gradient of the output (Linear dY) */
} l8_fp8_role;

typedef enum l8_fp8_format {
    L8_FP8_HYBRID = 0,            /* E4M3 forward, E5M2 gradients (default) */
    L8_FP8_E4M3 = 1               /* E4M3 for every role */
} l8_fp8_format;

/* Called by l8_recipe_update with the amax [N] f32 tensor (contiguous,
 * device memory of the recipe's context) before the scales are computed.
 * It must reduce the values in place with MAX across the group, enqueued on
 * s or ordered before later work on s (e.g. an event). A non-OK status stops
 * the update and is returned by it. */
typedef l8_status (*l8_amax_reduce_fn)(void *arg, l8_tensor *amax, l8_stream *s);

typedef struct l8_recipe_config {
    size_t size;                  /* sizeof(l8_recipe_config) */
    int history_len;              /* H >= 1; 0: 1024 */
    float margin;                 /* scale = (fp8_max / amax) / 2^margin; finite; 0 */
    l8_amax_compute amax_compute; /* L8_AMAX_MAX_HISTORY (default) or L8_AMAX_MOST_RECENT */
    l8_fp8_format format;         /* L8_FP8_HYBRID */
    l8_amax_reduce_fn reduce;     /* NULL: no reduction (one rank) */
    void *reduce_arg;
} l8_recipe_config;
#define L8_RECIPE_CONFIG_INIT \
    { sizeof(l8_recipe_config), 0, 0.0f, L8_AMAX_MAX_HISTORY, L8_FP8_HYBRID, NULL, NULL }
/* Fill *cfg with the defaults of L8_RECIPE_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_recipe_config_init(l8_recipe_config *cfg);

/* Create an empty recipe on ctx (which must outlive it). cfg NULL: defaults.
 * Errors: L8_ERR_INVALID_ARG (size field, history_len < 0, margin not
 * finite, unknown amax_compute or format), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_recipe_create(l8_ctx *ctx, const l8_recipe_config *cfg,
                                        l8_recipe **out);

/* Release the state and the metas' references (tensors that still hold a
 * meta keep it alive). Stream-ordered. NULL: no-op. */
void l8_recipe_destroy(l8_recipe *r);

/* Register one FP8 tensor role named `name` (copied; for checkpoints and
 * messages, e.g. "layer3.fc1.input"). Its history row starts at zeros, its
 * scale at 1, its meta at scale 1, scale_inv 1, amax 0. *index gets its row
 * (0, 1, ...; may be NULL); *meta gets its meta, borrowed: it lives as long
 * as the recipe (retain it to keep it longer). Blocks briefly (small
 * uploads on the compute stream). Growing past the current capacity moves
 * the state to a new storage: views from l8_recipe_state taken before then
 * no longer see it.
 * Errors: L8_ERR_INVALID_ARG (NULL, empty name or longer than 127 bytes,
 * unknown role), L8_ERR_OOM, L8_ERR_CUDA; on error nothing is registered. */
L8_NODISCARD l8_status l8_recipe_register(l8_recipe *r, const char *name, l8_fp8_role role,
                                          int *index, l8_fp8_meta **meta);

/* The FP8 dtype of a role under the recipe's format (L8_E4M3 / L8_E5M2);
 * L8_DTYPE_INVALID, with an L8_ERR_INVALID_ARG error record, for a NULL
 * recipe or an unknown role. */
l8_dtype l8_recipe_dtype(const l8_recipe *r, l8_fp8_role role);

int l8_recipe_count(const l8_recipe *r);                   /* N */
int l8_recipe_history_len(const l8_recipe *r);             /* H */
const char *l8_recipe_role_name(const l8_recipe *r, int i); /* NULL if out of range */
l8_fp8_meta *l8_recipe_meta(const l8_recipe *r, int i);    /* borrowed; NULL if out of range */
/* Successful l8_recipe_update calls so far. */
uint64_t l8_recipe_updates(const l8_recipe *r);
l8_ctx *l8_recipe_ctx(const l8_recipe *r);

/* Install or remove (fn NULL) the amax-reduction hook. Over a communicator
 * (fn = l8_comm_reduce_amax, arg = the l8_comm) the recipe is told when the
 * communicator is destroyed first: l8_recipe_update then fails with
 * L8_ERR_STATE until a hook is set again. Errors: L8_ERR_INVALID_ARG,
 * L8_ERR_OOM. */
L8_NODISCARD l8_status l8_recipe_set_reduce(l8_recipe *r, l8_amax_reduce_fn fn, void *arg);

/* The step's update (see the banner), enqueued on s (NULL: compute stream).
 * Call it once per optimizer step after the last backward of the step and
 * before the next step's first cast; not between a forward and its backward
 * if another forward's input cast comes in between (the Linear refuses that
 * backward with L8_ERR_STATE). With N = 0 it only counts the step.
 * Errors: L8_ERR_INVALID_ARG (stream of another context), the hook's status,
 * L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_recipe_update(l8_recipe *r, l8_stream *s);

/* New views of the state for checkpoints and inspection, owned by the caller
 * (l8_tensor_destroy); any pointer may be NULL (not wanted):
 *   amax_history [N, H], scale [N], amax [N], fp8_max [N], all f32, contiguous.
 * With N = 0 the views are empty. Reading or writing them is ordinary tensor
 * I/O (l8_tensor_copy_to_host / _from_host). After writing `scale` (restoring
 * a checkpoint) call l8_recipe_push_scales so the metas see it. The metas
 * (l8_recipe_meta) are state too: each one's amax holds the maximum the
 * casts since the last update saw (an evaluation's included), which the
 * next update folds into the history; a bit-for-bit resume saves and
 * restores them (l8_fp8_meta_get / _set), as tools/lean8-train.c does.
 * Errors: L8_ERR_INVALID_ARG (NULL recipe), L8_ERR_OOM. On error every
 * output is NULL. */
L8_NODISCARD l8_status l8_recipe_state(l8_recipe *r, l8_tensor **amax_history,
                                       l8_tensor **scale, l8_tensor **amax,
                                       l8_tensor **fp8_max);

/* meta_i.scale = scale[i] for every role (step 4 alone), enqueued on s.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_recipe_push_scales(l8_recipe *r, l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_RECIPE_H */
