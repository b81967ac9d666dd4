/* linear.c - the Linear layer: validation, the per-step weight copies, the
 * forward and backward dataflow in FP8 and bf16, the saved-tensor ctx.
 *
 * Shapes: T tokens, K in-features, N out-features.
 *
 * FP8 forward                                 FP8 backward
 *   [once per step]                             dY  (T, N) bf16
 *   W   (N, K) f32 --ct--> W8  (N, K) e4m3        --ct+dbias--> dY8  (T, N) e5m2
 *                          W8t (K, N) e4m3                      dY8t (N, T) e5m2
 *   b   (N,)   f32 --cv--> b16 (N,)   bf16                      db   (N,)   f32
 *   X   (T, K) bf16 --ct--> X8  (T, K) e4m3     dgrad dX (T, K) = dY8 . W8t^T
 *                           X8t (K, T) e4m3 ->  wgrad gW (N, K) = dY8t . X8t^T (+ gW)
 *   fprop Y (T, N) = X8 . W8^T + b16 (fast)     gb (+)= db
 *
 * (ct: l8_fp8_cast_transpose, cv: l8_convert; every GEMM is l8_gemm's
 * trans_b = 1 form, cuBLASLt's TN.) bf16 mode replaces the casts with
 * W16 = bf16(W) once per step and keeps X itself for wgrad; its GEMMs use
 * the transposes l8_gemm offers for bf16 (dgrad trans_b = 0, wgrad
 * trans_a = 1 with the bias gradient from the DBIAS_A epilogue).
 *
 * Invariants:
 *  - weight_version counts rebuilds of the weight copies; a ctx remembers the
 *    version its forward used and backward refuses another one.
 *  - x_cast_epoch is the recipe update count at the layer's latest input
 *    cast. All casts of one epoch use the same scale, hence write the same
 *    scale_inv into the shared input meta; a ctx from epoch e can be
 *    decoded as long as the latest cast is from epoch e too.
 *  - micro_batch counts backwards since begin_step: 0 means main_grad is
 *    written (beta = 0), else accumulated (beta = 1).
 *  - Every temporary is allocated on the call's stream before anything is
 *    enqueued, and freed stream-ordered after its last use on that stream.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/linear.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "runtime/internal.h"
#include "ops/internal.h"

#define NAME_MAX_LEN 100

struct l8_linear {
    l8_ctx *ctx;
    uint64_t serial;              /* identifies the layer in its ctxs */
    char name[NAME_MAX_LEN + 1];
    l8_linear_mode mode;
    l8_gemm_handle *gemm;
    l8_recipe *recipe;
    int64_t N, K;
    l8_tensor *w, *gw, *b, *gb;   /* own views of the caller's tensors */
    l8_dtype grad_dt;
    int weight_id, bias_id;
    l8_grad_ready_fn grad_ready;
    void *grad_ready_arg;
    l8_params *group;             /* grad_ready = l8_params_grad_ready: the group, attached to it */
    int group_lost;               /* that group was destroyed first (group_lost): reports fail */
    int accumulate_grad;
    int has_hooks;
    l8_save_hooks hooks;
    /* FP8 */
    int role[3];                  /* recipe rows: input, weight, grad_output */
    l8_fp8_meta *meta_x, *meta_w, *meta_g;   /* one reference each */
    l8_dtype fmt_x, fmt_w, fmt_g;
    l8_tensor *w8, *w8t;          /* (N, K), (K, N) */
    /* bf16 */
    l8_tensor *w16;               /* (N, K) */
    l8_tensor *b16;               /* (N,), both modes when there is a bias */
    l8_event *ev;
    l8_stream *ws;                /* the wgrad's stream (l8_linear_set_wgrad_stream); NULL: s */
    int ws_sms;                   /* the wgrad's sm_count there */
    int dg_sms;                   /* the dgrad's sm_count (l8_linear_set_dgrad_sms) */
    l8_event *ev_ws;              /* s -> ws: dY ready for wgrad */
    l8_event *ev_side;            /* forward_gelu: s <-> side (created on first use) */
    int gelu_amax_by_caller;      /* l8_linear_set_gelu_amax_by_caller */
    /* tensor parallel */
    l8_comm *tp;                  /* NULL: none (or destroyed: tp_lost) */
    int tp_lost;                  /* tp was destroyed first (comm_lost): forward/backward fail */
    l8_linear_parallel par;
    int sp, tp_size, tp_rank;
    l8_event *ev_tp[3];           /* s -> comm, the X re-gather done, the dX reduction done */
    /* state */
    int stale;                    /* weight copies must be rebuilt */
    uint64_t weight_version;
    uint64_t x_cast_epoch;
    l8_linear_stats stats;
};

struct l8_linear_ctx {
    uint64_t serial;              /* the layer's */
    l8_tensor *saved;             /* FP8: X8t (K, T16) e4m3 with the input meta - or with
                                     column SP this rank's X8t (K, T/tp), or where T % 16 != 0
                                     its X8 (T/tp, K) (saves_rows); bf16: X (T, K) */
    char name[NAME_MAX_LEN + 8];  /* "<layer>.x_t" / "<layer>.x8" / "<layer>.x" */
    int hooked;                   /* hooks.save accepted it: release it later */
    l8_save_hooks hooks;
    int64_t T;                    /* the GEMMs' token count (all ranks' with column SP) */
    uint64_t weight_version, x_epoch;
};

static atomic_uint_fast64_t g_serial;

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static int is_fp8_mode(const l8_linear *l) { return l->mode == L8_LINEAR_FP8; }

/* The wgrad reduces over the token count T, and cuBLASLt's FP8 GEMMs want
 * that and every leading dimension a multiple of 16. So the transposed
 * operands X8t [K, T] and dY8t [N, T] live in [.., T16] storages, T16 = T
 * rounded up to 16, whose columns T .. T16 - 1 hold zeros (the cast ops
 * write them into a row-padded out_t: cast.h), and wgrad multiplies the
 * [.., T16] tensors: it adds exact zeros. */
static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

/* Column parallel with SP: x is this rank's rows, gathered along T. In FP8
 * the backward re-gathers this rank's saved input for wgrad: X8t [K, T/tp]
 * along its last dimension where T % 16 == 0 (dense, no padding between the
 * ranks' columns), else X8 [T/tp, K] along T, then transposed into a
 * row-padded [K, T16] (saves_rows: T all ranks' tokens). */
static int gathers_x(const l8_linear *l) { return l->sp && l->par == L8_PARALLEL_COLUMN; }
static int saves_rows(const l8_linear *l, int64_t T)
{
    return is_fp8_mode(l) && gathers_x(l) && T % 16 != 0;
}

/* A new contiguous tensor (rows, cols) - or (rows,) when cols < 0 - for use
 * on s, tagged "<layer>.<suffix>", with meta attached when given. */
static l8_status new_tensor(const l8_linear *l, const char *suffix, l8_dtype dt, int64_t rows,
                            int64_t cols, l8_fp8_meta *meta, l8_stream *s, l8_tensor **out)
{
    *out = NULL;
    char tag[NAME_MAX_LEN + 24];
    snprintf(tag, sizeof tag, "%s.%s", l->name, suffix);
    int64_t shape[2] = { rows, cols };
    int ndim = cols < 0 ? 1 : 2;
    size_t bytes = (size_t)rows * (size_t)(cols < 0 ? 1 : cols) * l8_dtype_size(dt);
    l8_storage *st = NULL;
    l8_status ret = l8_storage_create_tagged(l->ctx, bytes, s, tag, &st);
    if (ret == L8_OK)
        ret = l8_tensor_from_storage(st, 0, dt, ndim, shape, NULL, out);
    l8_storage_release(st);       /* the tensor holds its own reference */
    if (ret == L8_OK && meta) {
        ret = l8_tensor_set_fp8_meta(*out, meta);
        if (ret != L8_OK) {
            l8_tensor_destroy(*out);
            *out = NULL;
        }
    }
    return ret;
}

/* A transposed FP8 operand [rows, T] of the layer's own cast: *full the
 * contiguous [rows, T16] tensor wgrad reads (wide; else [rows, T]) and,
 * where that is wider than T, *cast its [rows, T] view, row-padded, that
 * the cast writes (else NULL: the cast writes *full). */
static l8_status new_transposed(const l8_linear *l, const char *suffix, l8_dtype dt, int64_t rows,
                                int64_t T, int wide, l8_fp8_meta *meta, l8_stream *s,
                                l8_tensor **full, l8_tensor **cast)
{
    *cast = NULL;
    const int64_t cols = wide ? round16(T) : T;
    L8_CHECK(new_tensor(l, suffix, dt, rows, cols, meta, s, full));
    if (cols == T)
        return L8_OK;
    l8_status ret = l8_tensor_narrow(*full, 1, 0, T, cast);
    if (ret != L8_OK) {
        l8_tensor_destroy(*full);
        *full = NULL;
    }
    return ret;
}

/* t must be a contiguous tensor of ctx with dtype in {want, want2}. */
static l8_status need(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx,
                      l8_dtype want, l8_dtype want2)
{
    L8_CHECK(l8i_need_tensor(op, name, t, ctx));
    l8_dtype dt = l8_tensor_dtype(t);
    if (dt != want && dt != want2) {
        if (want == want2)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted %s", op, name,
                           l8_dtype_name(dt), l8_dtype_name(want));
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted %s or %s", op, name,
                       l8_dtype_name(dt), l8_dtype_name(want), l8_dtype_name(want2));
    }
    return L8_OK;
}

/* An activation [.., cols] bf16: its row count and a (rows, cols) view. */
static l8_status act_view(const l8_linear *l, const char *op, const char *name,
                          const l8_tensor *t, int64_t cols, int64_t *rows, l8_tensor **view)
{
    *view = NULL;
    L8_CHECK(need(op, name, t, l->ctx, L8_BF16, L8_BF16));
    int nd = l8_tensor_ndim(t);
    if (nd < 1 || l8_tensor_dim(t, nd - 1) != cols)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s must have a last dimension of %lld (layer %s:"
                       " %lld in, %lld out), got %lld", op, name, (long long)cols, l->name,
                       (long long)l->K, (long long)l->N,
                       (long long)(nd >= 1 ? l8_tensor_dim(t, nd - 1) : 0));
    *rows = l8_tensor_numel(t) / cols;
    if (*rows == 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is empty (no rows)", op, name);
    int64_t shape[2] = { *rows, cols };
    return l8_tensor_reshape(t, 2, shape, view);
}

static l8_status fp8_dim(const char *op, const char *what, int64_t v)
{
    if (v % 16)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: FP8 GEMMs need %s to be a multiple of 16, got %lld"
                       " (pad it, or use L8_LINEAR_BF16)", op, what, (long long)v);
    return L8_OK;
}

static int overlap(const l8_tensor *a, const l8_tensor *b)
{
    if (!a || !b || l8_tensor_storage(a) != l8_tensor_storage(b))
        return 0;
    size_t a0 = l8_tensor_offset(a), a1 = a0 + l8_tensor_nbytes(a);
    size_t b0 = l8_tensor_offset(b), b1 = b0 + l8_tensor_nbytes(b);
    return a0 < b1 && b0 < a1;
}

/* ------------------------------------------------------------------------ */
/* create / destroy                                                          */

static l8_status check_config(l8_ctx *ctx, const l8_linear_config *c)
{
    static const char *op = "l8_linear_create";
    if (c->mode != L8_LINEAR_FP8 && c->mode != L8_LINEAR_BF16)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown mode %d", op, (int)c->mode);
    if (c->name && (c->name[0] == '\0' || strlen(c->name) > NAME_MAX_LEN))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the name must be 1 to %d bytes", op,
                       NAME_MAX_LEN);
    if (!c->gemm)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: cfg->gemm is NULL (a GEMM handle is required)",
                       op);
    if (c->mode == L8_LINEAR_FP8 && !c->recipe)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: FP8 mode needs cfg->recipe", op);
    if (c->recipe && l8_recipe_ctx(c->recipe) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the recipe belongs to another context", op);
    if (c->accumulate_grad != 0 && c->accumulate_grad != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: accumulate_grad is %d, not 0 or 1", op,
                       c->accumulate_grad);
    if (c->grad_ready == l8_params_grad_ready && !c->grad_ready_arg)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: grad_ready is l8_params_grad_ready but "
                       "grad_ready_arg is NULL (it must be the group to report into)", op);
    if (c->grad_ready == l8_params_grad_ready && l8_params_ctx(c->grad_ready_arg) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: grad_ready_arg is a group of another context",
                       op);
    if (c->save_hooks && c->save_hooks->size < sizeof(l8_save_hooks))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: save_hooks->size is %zu, expected %zu (use"
                       " L8_SAVE_HOOKS_INIT)", op, c->save_hooks->size, sizeof(l8_save_hooks));
    L8_CHECK(need(op, "weight", c->weight, ctx, L8_F32, L8_F32));
    if (l8_tensor_ndim(c->weight) != 2 || l8_tensor_dim(c->weight, 0) < 1 ||
        l8_tensor_dim(c->weight, 1) < 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: weight must be 2-D [out, in] and not empty", op);
    int64_t N = l8_tensor_dim(c->weight, 0), K = l8_tensor_dim(c->weight, 1);
    L8_CHECK(need(op, "weight_grad", c->weight_grad, ctx, L8_F32, L8_BF16));
    if (l8_tensor_ndim(c->weight_grad) != 2 || l8_tensor_dim(c->weight_grad, 0) != N ||
        l8_tensor_dim(c->weight_grad, 1) != K)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: weight_grad must be [%lld, %lld] like the weight",
                       op, (long long)N, (long long)K);
    if (overlap(c->weight, c->weight_grad))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: weight_grad overlaps the weight", op);
    if (!c->bias != !c->bias_grad)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: bias and bias_grad must be given together", op);
    if (c->bias) {
        L8_CHECK(need(op, "bias", c->bias, ctx, L8_F32, L8_F32));
        L8_CHECK(need(op, "bias_grad", c->bias_grad, ctx, l8_tensor_dtype(c->weight_grad),
                      l8_tensor_dtype(c->weight_grad)));
        if (l8_tensor_ndim(c->bias) != 1 || l8_tensor_dim(c->bias, 0) != N ||
            l8_tensor_ndim(c->bias_grad) != 1 || l8_tensor_dim(c->bias_grad, 0) != N)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: bias and bias_grad must be [%lld]", op,
                           (long long)N);
        if (overlap(c->bias_grad, c->weight_grad) || overlap(c->bias_grad, c->bias) ||
            overlap(c->bias_grad, c->weight) || overlap(c->weight_grad, c->bias))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the gradients overlap a parameter or each"
                           " other", op);
    }
    if (c->mode == L8_LINEAR_FP8) {
        L8_CHECK(fp8_dim(op, "in_features (K)", K));
        L8_CHECK(fp8_dim(op, "out_features (N)", N));
    }
    if (c->parallel != L8_PARALLEL_NONE && c->parallel != L8_PARALLEL_COLUMN &&
        c->parallel != L8_PARALLEL_ROW)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown parallel mode %d", op, (int)c->parallel);
    if ((c->parallel != L8_PARALLEL_NONE) != (c->tp_comm != NULL))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: tp_comm and a parallel mode (column or row) go "
                       "together", op);
    if (c->sequence_parallel && !c->tp_comm)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: sequence_parallel needs tp_comm", op);
    if (c->tp_comm && l8_comm_ctx(c->tp_comm) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: tp_comm belongs to another context", op);
    return L8_OK;
}

static l8_status own_view(const l8_tensor *t, l8_tensor **out)
{
    *out = NULL;
    if (!t)
        return L8_OK;
    int nd = l8_tensor_ndim(t);
    int64_t shape[L8_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        shape[d] = l8_tensor_dim(t, d);
    return l8_tensor_reshape(t, nd, shape, out);
}

static l8_status register_roles(l8_linear *l)
{
    static const char *const suffix[3] = { "input", "weight", "grad_output" };
    static const l8_fp8_role roles[3] = { L8_ROLE_INPUT, L8_ROLE_WEIGHT, L8_ROLE_GRAD_OUTPUT };
    l8_fp8_meta **dst[3] = { &l->meta_x, &l->meta_w, &l->meta_g };
    for (int i = 0; i < 3; i++) {
        char nm[NAME_MAX_LEN + 16];
        snprintf(nm, sizeof nm, "%s.%s", l->name, suffix[i]);
        l8_fp8_meta *m = NULL;
        L8_CHECK(l8_recipe_register(l->recipe, nm, roles[i], &l->role[i], &m));
        l8_fp8_meta_retain(m);
        *dst[i] = m;
    }
    l->fmt_x = l8_recipe_dtype(l->recipe, L8_ROLE_INPUT);
    l->fmt_w = l8_recipe_dtype(l->recipe, L8_ROLE_WEIGHT);
    l->fmt_g = l8_recipe_dtype(l->recipe, L8_ROLE_GRAD_OUTPUT);
    return L8_OK;
}

void l8_linear_config_init(l8_linear_config *cfg)
{
    if (cfg) *cfg = (l8_linear_config)L8_LINEAR_CONFIG_INIT;
}

/* The group this layer reports to, or its tensor-parallel communicator, is
 * being destroyed first (l8_params_destroy / l8_comm_destroy call these). */
static void group_lost(void *obj)
{
    l8_linear *l = obj;
    l->group = NULL;
    l->group_lost = 1;
}

static void comm_lost(void *obj)
{
    l8_linear *l = obj;
    l->tp = NULL;
    l->tp_lost = 1;
}

static l8_status need_tp(const l8_linear *l, const char *op)
{
    if (!l->tp_lost)
        return L8_OK;
    return L8_FAIL(L8_ERR_STATE, "%s: %s: its tensor-parallel communicator was destroyed (destroy "
                   "the layer first)", op, l->name);
}

l8_status l8_linear_create(l8_ctx *ctx, const l8_linear_config *cfg, l8_linear **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL && cfg != NULL);
    l8_linear_config c = L8_LINEAR_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_linear_create", "L8_LINEAR_CONFIG_INIT");
    cfg = &c;
    L8_CHECK(check_config(ctx, cfg));
    l8_linear *l = calloc(1, sizeof *l);
    if (!l)
        return L8_FAIL(L8_ERR_OOM, "l8_linear_create: out of host memory");
    l8_status ret = L8_OK;
    l->ctx = ctx;
    l->serial = atomic_fetch_add(&g_serial, 1) + 1;
    snprintf(l->name, sizeof l->name, "%s", cfg->name ? cfg->name : "linear");
    l->mode = cfg->mode;
    l->gemm = cfg->gemm;
    l->recipe = cfg->recipe;
    l->N = l8_tensor_dim(cfg->weight, 0);
    l->K = l8_tensor_dim(cfg->weight, 1);
    l->grad_dt = l8_tensor_dtype(cfg->weight_grad);
    l->weight_id = cfg->weight_id;
    l->bias_id = cfg->bias_id;
    l->grad_ready = cfg->grad_ready;
    l->grad_ready_arg = cfg->grad_ready_arg;
    l->accumulate_grad = cfg->accumulate_grad;
    l->tp = cfg->tp_comm;
    l->par = cfg->parallel;
    l->sp = l->tp && cfg->sequence_parallel;
    l->tp_size = l->tp ? l8_comm_size(l->tp) : 1;
    l->tp_rank = l->tp ? l8_comm_rank(l->tp) : 0;
    if (cfg->save_hooks) {
        l->has_hooks = 1;
        l->hooks = *cfg->save_hooks;
        l->hooks.size = sizeof l->hooks;
    }
    l->role[0] = l->role[1] = l->role[2] = -1;
    l->stale = 1;
    l->stats.size = sizeof l->stats;
    L8_TRY(ret, own_view(cfg->weight, &l->w), fail);
    L8_TRY(ret, own_view(cfg->weight_grad, &l->gw), fail);
    L8_TRY(ret, own_view(cfg->bias, &l->b), fail);
    L8_TRY(ret, own_view(cfg->bias_grad, &l->gb), fail);
    l8_stream *cs = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    if (is_fp8_mode(l)) {
        /* persistent copies first, the roles last: a failure registers nothing */
        l8_dtype fw = l8_recipe_dtype(l->recipe, L8_ROLE_WEIGHT);
        L8_TRY(ret, new_tensor(l, "w_fp8", fw, l->N, l->K, NULL, cs, &l->w8), fail);
        L8_TRY(ret, new_tensor(l, "w_t_fp8", fw, l->K, l->N, NULL, cs, &l->w8t), fail);
    } else {
        L8_TRY(ret, new_tensor(l, "w_bf16", L8_BF16, l->N, l->K, NULL, cs, &l->w16), fail);
    }
    if (l->b)
        L8_TRY(ret, new_tensor(l, "b_bf16", L8_BF16, l->N, -1, NULL, cs, &l->b16), fail);
    L8_TRY(ret, l8_event_create(ctx, 0, &l->ev), fail);
    L8_TRY(ret, l8_event_create(ctx, 0, &l->ev_ws), fail);
    for (int i = 0; l->tp && i < 3; i++)
        L8_TRY(ret, l8_event_create(ctx, 0, &l->ev_tp[i]), fail);
    if (is_fp8_mode(l)) {
        L8_TRY(ret, register_roles(l), fail);
        L8_TRY(ret, l8_tensor_set_fp8_meta(l->w8, l->meta_w), fail);
        L8_TRY(ret, l8_tensor_set_fp8_meta(l->w8t, l->meta_w), fail);
    }
    if (l->tp)
        L8_TRY(ret, l8i_comm_attach(l->tp, comm_lost, l), fail);
    if (l->grad_ready == l8_params_grad_ready && l->grad_ready_arg) {
        L8_TRY(ret, l8i_params_attach(l->grad_ready_arg, group_lost, l), fail);
        l->group = l->grad_ready_arg;
    }
    *out = l;
    return L8_OK;
fail:
    l8_linear_destroy(l);
    return ret;
}

void l8_linear_destroy(l8_linear *l)
{
    if (!l)
        return;
    if (l->group)
        l8i_params_detach(l->group, l);
    if (l->tp)
        l8i_comm_detach(l->tp, l);
    l8_tensor_destroy(l->w);
    l8_tensor_destroy(l->gw);
    l8_tensor_destroy(l->b);
    l8_tensor_destroy(l->gb);
    l8_tensor_destroy(l->w8);
    l8_tensor_destroy(l->w8t);
    l8_tensor_destroy(l->w16);
    l8_tensor_destroy(l->b16);
    l8_fp8_meta_release(l->meta_x);
    l8_fp8_meta_release(l->meta_w);
    l8_fp8_meta_release(l->meta_g);
    l8_event_destroy(l->ev);
    l8_event_destroy(l->ev_ws);
    l8_event_destroy(l->ev_side);
    for (int i = 0; i < 3; i++)
        l8_event_destroy(l->ev_tp[i]);
    free(l);
}

/* ------------------------------------------------------------------------ */
/* small accessors                                                           */

l8_status l8_linear_set_wgrad_stream(l8_linear *l, l8_stream *ws, int sm_count)
{
    L8_ARG(l != NULL);
    if (ws && l8_stream_ctx(ws) != l->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_set_wgrad_stream: the stream belongs to"
                       " another context than %s's", l->name);
    if (sm_count < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_set_wgrad_stream: sm_count %d (>= 0)",
                       sm_count);
    l->ws = ws;
    l->ws_sms = sm_count;
    return L8_OK;
}

l8_status l8_linear_set_dgrad_sms(l8_linear *l, int sm_count)
{
    L8_ARG(l != NULL);
    if (sm_count < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_set_dgrad_sms: sm_count %d (>= 0)",
                       sm_count);
    l->dg_sms = sm_count;
    return L8_OK;
}

l8_status l8_linear_set_gelu_amax_by_caller(l8_linear *l, int on)
{
    L8_ARG(l != NULL);
    if (on != 0 && on != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_set_gelu_amax_by_caller: on = %d (0 or 1)",
                       on);
    l->gelu_amax_by_caller = on;
    return L8_OK;
}

l8_status l8_linear_begin_step(l8_linear *l)
{
    L8_ARG(l != NULL);
    l->stale = 1;
    l->stats.micro_batch = 0;
    l->stats.steps++;
    return L8_OK;
}

l8_status l8_linear_get_stats(const l8_linear *l, l8_linear_stats *out)
{
    L8_ARG(l != NULL && out != NULL);
    return l8i_stats_out(out, &l->stats, sizeof l->stats, "l8_linear_get_stats");
}

int64_t l8_linear_in_features(const l8_linear *l) { return l ? l->K : 0; }
int64_t l8_linear_out_features(const l8_linear *l) { return l ? l->N : 0; }
l8_linear_mode l8_linear_get_mode(const l8_linear *l) { return l ? l->mode : L8_LINEAR_FP8; }

int l8_linear_role_index(const l8_linear *l, l8_fp8_role role)
{
    if (!l || (unsigned)role > L8_ROLE_GRAD_OUTPUT)
        return -1;
    return l->role[role];
}

void l8_linear_ctx_destroy(l8_linear_ctx *c)
{
    if (!c)
        return;
    if (c->hooked && c->hooks.release)
        c->hooks.release(c->hooks.arg, c->saved, c->name);
    l8_tensor_destroy(c->saved);
    free(c);
}

/* ------------------------------------------------------------------------ */
/* forward                                                                   */

/* The layer's copies are current (the casts are enqueued). */
static void weights_built(l8_linear *l)
{
    l->stale = 0;
    l->weight_version++;
    l->stats.weight_casts++;
}

/* Rebuild the weight copies if the step changed (once per step). */
static l8_status ensure_weights(l8_linear *l, l8_stream *s)
{
    if (!l->stale)
        return L8_OK;
    if (is_fp8_mode(l))
        L8_CHECK(l8_fp8_cast_transpose(l->w, l->w8, l->w8t, L8_CAST_ACCUMULATE_AMAX, s));
    else
        L8_CHECK(l8_convert(l->w, l->w16, s));
    if (l->b)
        L8_CHECK(l8_convert(l->b, l->b16, s));
    weights_built(l);
    return L8_OK;
}

l8_status l8_linear_refresh_weights(l8_linear *const *layers, int n, l8_stream *s)
{
    static const char *op = "l8_linear_refresh_weights";
    if (n < 0 || n > L8_CAST_MANY_MAX || (n > 0 && !layers))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: n is %d (0..%d) or layers is NULL", op, n,
                       L8_CAST_MANY_MAX);
    for (int i = 0; i < n; i++) {
        if (!layers[i])
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: layers[%d] is NULL", op, i);
        if (layers[i]->ctx != layers[0]->ctx)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: layers[%d] (%s) belongs to another context",
                           op, i, layers[i]->name);
    }
    if (n == 0)
        return L8_OK;
    L8_CHECK(l8i_resolve_stream(op, layers[0]->ctx, &s));
    /* the stale layers, once each; FP8 weights in one cast group, every
     * other conversion (bf16 weights, biases) in one convert group */
    l8_linear *todo[L8_CAST_MANY_MAX];
    const l8_tensor *w[L8_CAST_MANY_MAX], *cin[2 * L8_CAST_MANY_MAX], *bin[L8_CAST_MANY_MAX];
    l8_tensor *w8[L8_CAST_MANY_MAX], *w8t[L8_CAST_MANY_MAX], *cout[2 * L8_CAST_MANY_MAX];
    l8_tensor *bout[L8_CAST_MANY_MAX];
    int nt = 0, nw = 0, nc = 0;
    for (int i = 0; i < n; i++) {
        l8_linear *l = layers[i];
        int dup = 0;
        for (int j = 0; j < nt; j++)
            dup |= todo[j] == l;
        if (!l->stale || dup)
            continue;
        todo[nt++] = l;
        if (is_fp8_mode(l)) {
            w[nw] = l->w;
            w8[nw] = l->w8;
            w8t[nw] = l->w8t;
            bin[nw] = l->b;       /* the bias copy in the cast launch, if it can */
            bout[nw++] = l->b16;
        } else {
            cin[nc] = l->w;
            cout[nc++] = l->w16;
            if (l->b) {
                cin[nc] = l->b;
                cout[nc++] = l->b16;
            }
        }
    }
    int folded = 0;
    if (nw > 0)
        L8_CHECK(l8i_fp8_cast_transpose_many_bias(nw, w, w8, w8t, bin, bout,
                                                  L8_CAST_ACCUMULATE_AMAX, s, &folded));
    for (int i = 0; i < nw && !folded; i++)
        if (bin[i]) {
            cin[nc] = bin[i];
            cout[nc++] = bout[i];
        }
    for (int c0 = 0; c0 < nc; c0 += L8_CONVERT_MANY_MAX) {
        int m = nc - c0 < L8_CONVERT_MANY_MAX ? nc - c0 : L8_CONVERT_MANY_MAX;
        L8_CHECK(l8_convert_many(m, cin + c0, cout + c0, s));
    }
    for (int j = 0; j < nt; j++)
        weights_built(todo[j]);
    return L8_OK;
}

/* The token counts of a call: rows of x (or dy), the GEMMs' T, rows of y
 * (or dx); see linear.h's tensor-parallel table. */
static l8_status tp_rows(const l8_linear *l, const char *op, int64_t x_rows, int64_t *T,
                         int64_t *y_rows)
{
    int colsp = l->sp && l->par == L8_PARALLEL_COLUMN, rowsp = l->sp && l->par == L8_PARALLEL_ROW;
    *T = colsp ? x_rows * l->tp_size : x_rows;
    if (rowsp && *T % l->tp_size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s: sequence parallel needs the token count (%lld)"
                       " to divide by the tensor-parallel size %d (pad the batch)", op, l->name,
                       (long long)*T, l->tp_size);
    *y_rows = rowsp ? *T / l->tp_size : *T;
    return L8_OK;
}

/* Make the comm stream wait for the work on s so far (ev_tp[0]). */
static l8_status comm_after(l8_linear *l, l8_stream *s, l8_stream **cs)
{
    *cs = l8_ctx_stream(l->ctx, L8_STREAM_COMM);
    L8_CHECK(l8_event_record(l->ev_tp[0], s));
    return l8_stream_wait_event(*cs, l->ev_tp[0]);
}

static l8_status act_known(const char *op, l8_act act)
{
    if (act != L8_ACT_NONE && act != L8_ACT_GELU)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown activation %d", op, (int)act);
    return L8_OK;
}

/* t carries meta (the layer's; NULL: any). */
static l8_status need_meta(const l8_linear *l, const char *op, const char *name,
                           const l8_tensor *t, const l8_fp8_meta *meta)
{
    if (meta && l8_tensor_fp8_meta(t) != meta)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s does not carry the layer's %s meta (cast it"
                       " with l8_recipe_meta(recipe, l8_linear_role_index(layer, role)))", op,
                       name, meta == l->meta_x ? "input" : "grad_output");
    return L8_OK;
}

/* An FP8 operand cast by the caller (l8_linear_forward_fp8,
 * l8_linear_backward_fp8): 2-D (rows, cols), contiguous, of the layer's
 * context, in fmt, carrying meta. */
static l8_status need_cast(const l8_linear *l, const char *op, const char *name,
                           const l8_tensor *t, l8_dtype fmt, l8_fp8_meta *meta, int64_t rows,
                           int64_t cols)
{
    L8_CHECK(need(op, name, t, l->ctx, fmt, fmt));
    if (l8_tensor_ndim(t) != 2 || l8_tensor_dim(t, 1) != cols || l8_tensor_dim(t, 0) == 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s must be 2-D (rows, %lld) (layer %s: %lld in,"
                       " %lld out)", op, name, (long long)cols, l->name, (long long)l->K,
                       (long long)l->N);
    if (rows >= 0 && l8_tensor_dim(t, 0) != rows)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has %lld rows, wanted %lld", op, name,
                       (long long)l8_tensor_dim(t, 0), (long long)rows);
    return need_meta(l, op, name, t, meta);
}

/* The caller's transposed operand t [rows, T] (x8t, dy8t) when wgrad may
 * read it padded (wide; not the saved X8t of column SP, which is gathered
 * along T): contiguous with T % 16 == 0, or row-padded as the cast ops
 * write it (l8i_need_padded: ld % 16 == 0, so ld >= T16), its storage
 * holding the last row's padding, columns T .. T16 - 1 zeros (the caller's
 * promise) - in fmt, with meta when given. Else as need_cast. */
static l8_status need_cast_t(const l8_linear *l, const char *op, const char *name,
                             const l8_tensor *t, l8_dtype fmt, l8_fp8_meta *meta, int64_t rows,
                             int64_t T, int wide)
{
    if (!wide || !t || l8_tensor_is_contiguous(t)) {
        L8_CHECK(need_cast(l, op, name, t, fmt, meta, rows, T));
        if (wide && T % 16)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is [%lld, %lld] and contiguous: with a"
                           " token count that is not a multiple of 16 it must be row-padded as"
                           " the cast ops write it (strides [ld, 1], ld %% 16 == 0, ld >= %lld:"
                           " ops/cast.h)", op, name, (long long)rows, (long long)T,
                           (long long)round16(T));
        return L8_OK;
    }
    int64_t ld = 0;
    L8_CHECK(l8i_need_padded(op, name, t, l->ctx, rows, T, "rows, tokens", &ld));
    if (l8_tensor_dtype(t) != fmt)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted %s", op, name,
                       l8_dtype_name(l8_tensor_dtype(t)), l8_dtype_name(fmt));
    size_t off = l8_tensor_offset(t);
    if (off + (size_t)((rows - 1) * ld + round16(T)) > l8_storage_bytes(l8_tensor_storage(t)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s's storage ends before its last row's padding"
                       " (column %lld)", op, name, (long long)round16(T) - 1);
    return need_meta(l, op, name, t, meta);
}

/* The [rows, T16] tensor wgrad reads of a transposed operand t [rows, T]
 * that need_cast_t accepted as wide, with t's meta. */
static l8_status wide_view(const l8_tensor *t, l8_tensor **out)
{
    *out = NULL;
    int64_t rows = l8_tensor_dim(t, 0), T16 = round16(l8_tensor_dim(t, 1));
    int64_t shape[2] = { rows, T16 }, strides[2] = { l8_tensor_stride(t, 0), 1 };
    l8_status ret = l8_tensor_from_storage(l8_tensor_storage(t), l8_tensor_offset(t),
                                           l8_tensor_dtype(t), 2, shape, strides, out);
    if (ret == L8_OK)
        ret = l8_tensor_set_fp8_meta(*out, l8_tensor_fp8_meta(t));
    if (ret != L8_OK) {
        l8_tensor_destroy(*out);
        *out = NULL;
    }
    return ret;
}

/* x8's meta: the layer's input meta, or one of the caller's that the recipe
 * does not update (a fixed scale); *own = 1 for the latter. */
static l8_status cast_input_meta(const l8_linear *l, const char *op, const l8_tensor *x8,
                                 int *own)
{
    l8_fp8_meta *m = l8_tensor_fp8_meta(x8);
    *own = m != l->meta_x;
    if (!*own)
        return L8_OK;
    if (!m)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: x8 carries no FP8 meta", op);
    for (int i = 0; i < l8_recipe_count(l->recipe); i++)
        if (l8_recipe_meta(l->recipe, i) == m)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: x8 carries recipe meta %d, not the layer's"
                           " input meta (%s): the recipe would change its scale between the"
                           " forward and the backward", op, i, l->name);
    return L8_OK;
}

/* What a forward multiplies: act(x), cast by the layer (FP8) - or x8 and
 * x8t, cast by the caller (x NULL). */
typedef struct fwd_in {
    l8_act act;
    const l8_tensor *x, *x8, *x8t;
    l8_tensor *h;                 /* l8_linear_forward_gelu: the next layer's input (FP8
                                     or bf16) */
    l8_stream *side;              /* and where its meta's bookkeeping runs (NULL: s) */
} fwd_in;

/* The caller's x8 (Tx, K) and x8t (K, Tx; only when saving) for an FP8 layer. */
static l8_status check_cast_input(const l8_linear *l, const char *op, const fwd_in *in, int save,
                                  int64_t *Tx, int *own)
{
    if (!is_fp8_mode(l))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is a bf16 layer: it takes its input in bf16"
                       " (l8_linear_forward)", op, l->name);
    L8_CHECK(need_cast(l, op, "x8", in->x8, l->fmt_x, NULL, -1, l->K));
    L8_CHECK(cast_input_meta(l, op, in->x8, own));
    *Tx = l8_tensor_dim(in->x8, 0);
    if (!save || saves_rows(l, *Tx * l->tp_size))   /* x8t not read (x8's rows saved) */
        return L8_OK;
    if (!in->x8t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: x8t is NULL: training (saved) needs the"
                       " transposed input for wgrad", op);
    L8_CHECK(need_cast_t(l, op, "x8t", in->x8t, l->fmt_x, NULL, l->K, *Tx, !gathers_x(l)));
    if (l8_tensor_fp8_meta(in->x8t) != l8_tensor_fp8_meta(in->x8))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: x8t does not carry x8's meta", op);
    if (overlap(in->x8, in->x8t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: x8t overlaps x8", op);
    return L8_OK;
}

/* l8_linear_forward_gelu's h (Ty, N): FP8 with a meta (FP8 layers) or
 * bf16, and its layer. */
static l8_status check_gelu_out(const l8_linear *l, const char *op, const fwd_in *in,
                                const l8_tensor *y, int64_t Ty)
{
    if (!l->b)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: %s has no bias (the fused GELU takes layers"
                       " with one)", op, l->name);
    if (l->par == L8_PARALLEL_ROW)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: %s is row-parallel: its GELU needs the summed"
                       " output", op, l->name);
    l8_dtype dt = l8_tensor_dtype(in->h);
    L8_CHECK(need(op, "h", in->h, l->ctx, dt, dt));
    if (dt != L8_BF16 && !(l8_dtype_is_fp8(dt) && is_fp8_mode(l)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: h is %s; %s takes bf16%s", op, l8_dtype_name(dt),
                       l->name, is_fp8_mode(l) ? " or FP8" : " (a bf16 layer)");
    if (dt != L8_BF16 && !l8_tensor_fp8_meta(in->h))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: an FP8 h needs a meta (the next layer's input"
                       " meta)", op);
    if (l8_tensor_ndim(in->h) != 2 || l8_tensor_dim(in->h, 0) != Ty ||
        l8_tensor_dim(in->h, 1) != l->N)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: h must be 2-D (%lld, %lld), y's rows and the"
                       " layer's outputs", op, (long long)Ty, (long long)l->N);
    if (overlap(in->h, y) || overlap(in->h, in->x) || overlap(in->h, in->x8) ||
        overlap(in->h, in->x8t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: h overlaps y or the input", op);
    if (in->side && l8_stream_ctx(in->side) != l->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: side belongs to another context than %s's", op,
                       l->name);
    return L8_OK;
}

/* Forward of act(x) (l8_linear_forward: act = L8_ACT_NONE), or of the
 * caller's cast (l8_linear_forward_fp8); with in->h also the next layer's
 * input (l8_linear_forward_gelu). */
static l8_status forward_impl(l8_linear *l, const char *op, const fwd_in *in, l8_tensor *y,
                              l8_linear_ctx **saved, l8_stream *s)
{
    if (saved)
        *saved = NULL;
    L8_ARG(l != NULL);
    L8_CHECK(need_tp(l, op));
    const l8_act act = in->act;
    L8_CHECK(act_known(op, act));
    L8_CHECK(l8i_resolve_stream(op, l->ctx, &s));
    l8_status ret = L8_OK;
    l8_tensor *x2 = NULL, *y2 = NULL, *x8 = NULL, *x8t = NULL, *x8tc = NULL, *xl8 = NULL,
              *xg = NULL, *yp = NULL, *xa = NULL, *h_scr = NULL;
    l8_linear_ctx *c = NULL;
    int64_t Tx = 0, T = 0, Ty = 0, Ty_want = 0;
    int own_meta = 0;             /* the caller's x8 with a meta of its own */
    const int fp8 = is_fp8_mode(l);
    const int precast = in->x == NULL;           /* the caller cast X (FP8) */
    const int gather_x = gathers_x(l);   /* x is this rank's rows */
    const int reduce_y = l->par == L8_PARALLEL_ROW;
    if (precast)
        L8_TRY(ret, check_cast_input(l, op, in, saved != NULL, &Tx, &own_meta), out);
    else
        L8_TRY(ret, act_view(l, op, "x", in->x, l->K, &Tx, &x2), out);
    L8_TRY(ret, act_view(l, op, "y", y, l->N, &Ty, &y2), out);
    L8_TRY(ret, tp_rows(l, op, Tx, &T, &Ty_want), out);
    if (Ty != Ty_want) {
        ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: x has %lld rows, so y needs %lld, but has %lld", op,
                      (long long)Tx, (long long)Ty_want, (long long)Ty);
        goto out;
    }
    if (overlap(in->x, y) || overlap(in->x8, y) || overlap(in->x8t, y)) {
        ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: y overlaps %s", op, precast ? "x8 or x8t" : "x");
        goto out;
    }
    const int rows_saved = saves_rows(l, T);   /* X8's rows, not X8t */
    if (in->h)
        L8_TRY(ret, check_gelu_out(l, op, in, y, Ty), out);

    /* everything allocated before anything is enqueued */
    if (saved) {
        c = calloc(1, sizeof *c);
        if (!c) {
            ret = L8_FAIL(L8_ERR_OOM, "%s: out of host memory", op);
            goto out;
        }
    }
    if (fp8 && precast) {         /* the caller's bytes (and meta); gathered along T with
                                     column SP */
        if (gather_x)
            L8_TRY(ret, new_tensor(l, "x_fp8", l->fmt_x, T, l->K, l8_tensor_fp8_meta(in->x8), s,
                                   &x8), out);
        if (saved)
            L8_TRY(ret, rows_saved ? own_view(in->x8, &x8t)
                        : gather_x ? own_view(in->x8t, &x8t) : wide_view(in->x8t, &x8t), out);
    } else if (fp8) {
        if (gather_x)             /* this rank's rows, cast, then gathered as FP8 bytes */
            L8_TRY(ret, new_tensor(l, "x_fp8_local", l->fmt_x, Tx, l->K, l->meta_x, s, &xl8), out);
        L8_TRY(ret, new_tensor(l, "x_fp8", l->fmt_x, T, l->K, l->meta_x, s, &x8), out);
        if (saved && !rows_saved)   /* X8t [K, T16] (gathered: [K, Tx]), its [K, Tx] view
                                       cast into */
            L8_TRY(ret, new_transposed(l, "x_t", l->fmt_x, l->K, Tx, !gather_x, l->meta_x, s,
                                       &x8t, &x8tc), out);
    } else {
        if (act != L8_ACT_NONE)   /* act(x), this rank's rows: what bf16 multiplies and saves */
            L8_TRY(ret, new_tensor(l, "x_act", L8_BF16, Tx, l->K, NULL, s, &xa), out);
        if (gather_x)
            L8_TRY(ret, new_tensor(l, "x_gathered", L8_BF16, T, l->K, NULL, s, &xg), out);
    }
    if (reduce_y && l->sp)        /* the partial sums of all T rows, scattered into y */
        L8_TRY(ret, new_tensor(l, "y_partial", L8_BF16, T, l->N, NULL, s, &yp), out);
    l8_stream *side = in->side ? in->side : s;
    const int h_fp8 = in->h && l8_dtype_is_fp8(l8_tensor_dtype(in->h));
    const int h_amax = h_fp8 && !l->gelu_amax_by_caller;   /* the amax cast here */
    if (h_amax) {                 /* the amax cast's bytes (unused), with h's meta */
        L8_TRY(ret, new_tensor(l, "h_amax", l8_tensor_dtype(in->h), Ty, l->N,
                               l8_tensor_fp8_meta(in->h), s, &h_scr), out);
    }
    if (h_fp8 && side != s && !l->ev_side)
        L8_TRY(ret, l8_event_create(l->ctx, 0, &l->ev_side), out);

    L8_TRY(ret, ensure_weights(l, s), out);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.d = yp ? yp : y2;
    g.trans_b = 1;
    if (l->b && (!reduce_y || l->tp_rank == 0)) {   /* a row-parallel bias is added once */
        g.bias = l->b16;
        g.epilogue = L8_GEMM_EPI_BIAS;
    }
    l8_fp8_meta *hm = h_fp8 ? l8_tensor_fp8_meta(in->h) : NULL;
    if (in->h) {                 /* y the GELU's input (aux), h = gelu(y) the output (FP8:
                                     its amax from the cast below) */
        g.d = in->h;
        g.aux = y2;
        g.skip_amax = h_fp8;
        g.epilogue = L8_GEMM_EPI_BIAS_GELU_AUX;
        if (h_fp8 && side != s) { /* h's scale_inv on side beside the GEMM (on s alone
                                     the amax cast below writes it before any later work) */
            L8_TRY(ret, l8_event_record(l->ev_side, s), out);
            L8_TRY(ret, l8_stream_wait_event(side, l->ev_side), out);
            L8_TRY(ret, l8i_meta_scale_inv(l->ctx, hm, side), out);
            L8_TRY(ret, l8_event_record(l->ev_side, side), out);
        } else if (h_fp8 && !h_amax) {
            L8_TRY(ret, l8i_meta_scale_inv(l->ctx, hm, s), out);
        }
    }
    if (fp8) {
        /* X8 (T, K) e4m3: the caller's bytes, or act(X) cast here with X8t
         * (K, T) in one pass (X8 alone for inference; the amax accumulates
         * over the step's micro-batches); gathered along T with column SP */
        l8_tensor *cast_to = xl8 ? xl8 : x8;
        if (!precast) {
            L8_TRY(ret, l8_fp8_cast_transpose_act(act, x2, cast_to, x8tc ? x8tc : x8t,
                                                  L8_CAST_ACCUMULATE_AMAX, s), out);
            l->stats.input_casts++;
        }
        if (gather_x)
            L8_TRY(ret, l8_comm_all_gather(l->tp, precast ? in->x8 : cast_to, x8, 0, s), out);
        if (saved && rows_saved && !precast)   /* this rank's X8 rows (the cast's out) */
            L8_TRY(ret, own_view(xl8, &x8t), out);
        /* the scale this input was cast with: the meta's current one */
        if (!own_meta)
            l->x_cast_epoch = l8_recipe_updates(l->recipe);
        g.a = x8 ? x8 : in->x8;   /* (T, K) e4m3 */
        g.b = l->w8;              /* (N, K) e4m3 */
        g.fast_accum = 1;
    } else {
        if (xa) {
            L8_TRY(ret, l8_gelu(x2, xa, s), out);
            l8_tensor_destroy(x2);
            x2 = xa;
            xa = NULL;
        }
        if (xg)
            L8_TRY(ret, l8_comm_all_gather(l->tp, x2, xg, 0, s), out);
        g.a = xg ? xg : x2;       /* (T, K) bf16 */
        g.b = l->w16;             /* (N, K) bf16 */
    }
    L8_TRY(ret, l8_gemm(l->gemm, &g, s), out);   /* Y (T, N) bf16 */
    if (h_fp8 && side != s)       /* s after h's scale_inv */
        L8_TRY(ret, l8_stream_wait_event(s, l->ev_side), out);
    if (h_amax) {
        /* h's amax: that of the input cast the layer after would run (the
         * GELU of bf16 y, max-accumulated), on side after the GEMM - the
         * GEMM's own amax costs a memset node before it (gemm.h). The cast
         * writes scratch bytes and h's scale_inv again (the same value) */
        if (side != s) {          /* side after the GEMM */
            L8_TRY(ret, l8_event_record(l->ev_side, s), out);
            L8_TRY(ret, l8_stream_wait_event(side, l->ev_side), out);
        }
        L8_TRY(ret, l8_fp8_cast_transpose_act(L8_ACT_GELU, y2, h_scr, NULL,
                                              L8_CAST_ACCUMULATE_AMAX, side), out);
    }
    if (reduce_y && yp)
        L8_TRY(ret, l8_comm_reduce_scatter(l->tp, yp, y2, L8_REDUCE_SUM, 0, s), out);
    else if (reduce_y)
        L8_TRY(ret, l8_comm_all_reduce(l->tp, y2, y2, L8_REDUCE_SUM, s), out);
    l->stats.forwards++;

    if (saved) {
        c->serial = l->serial;
        c->T = T;
        c->weight_version = l->weight_version;
        c->x_epoch = l->x_cast_epoch;
        if (fp8) {
            c->saved = x8t;       /* (K, T16), T's columns then zeros; (K, Tx): this rank's
                                     rows with column SP; rows_saved: (Tx, K) */
            x8t = NULL;
            snprintf(c->name, sizeof c->name, rows_saved ? "%s.x8" : "%s.x_t", l->name);
        } else {
            c->saved = x2;        /* a view of the caller's X (its storage is retained),
                                     or the layer's act(X) */
            x2 = NULL;
            snprintf(c->name, sizeof c->name, "%s.x", l->name);
        }
        if (l->has_hooks) {
            c->hooks = l->hooks;
            if (c->hooks.save)
                L8_TRY(ret, c->hooks.save(c->hooks.arg, c->saved, c->name, s), out);
            c->hooked = 1;
        }
        *saved = c;
        c = NULL;
    }
out:
    l8_linear_ctx_destroy(c);
    l8_tensor_destroy(x2);
    l8_tensor_destroy(y2);
    l8_tensor_destroy(x8);        /* stream-ordered: fprop read it on s */
    l8_tensor_destroy(x8t);
    l8_tensor_destroy(x8tc);
    l8_tensor_destroy(xl8);
    l8_tensor_destroy(xg);
    l8_tensor_destroy(yp);
    l8_tensor_destroy(xa);
    l8_tensor_destroy(h_scr);     /* stream-ordered: recorded on side, where it is written */
    return ret;
}

l8_status l8_linear_forward(l8_linear *l, const l8_tensor *x, l8_tensor *y,
                            l8_linear_ctx **saved, l8_stream *s)
{
    fwd_in in = { L8_ACT_NONE, x, NULL, NULL, NULL, NULL };
    if (!x)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_forward: x is NULL");
    return forward_impl(l, "l8_linear_forward", &in, y, saved, s);
}

l8_status l8_linear_forward_act(l8_linear *l, l8_act act, const l8_tensor *x, l8_tensor *y,
                                l8_linear_ctx **saved, l8_stream *s)
{
    fwd_in in = { act, x, NULL, NULL, NULL, NULL };
    if (!x)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_forward_act: x is NULL");
    return forward_impl(l, "l8_linear_forward_act", &in, y, saved, s);
}

l8_status l8_linear_forward_fp8(l8_linear *l, const l8_tensor *x8, const l8_tensor *x8t,
                                l8_tensor *y, l8_linear_ctx **saved, l8_stream *s)
{
    fwd_in in = { L8_ACT_NONE, NULL, x8, x8t, NULL, NULL };
    if (!x8)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_forward_fp8: x8 is NULL");
    return forward_impl(l, "l8_linear_forward_fp8", &in, y, saved, s);
}

l8_status l8_linear_forward_gelu(l8_linear *l, l8_act act, const l8_tensor *x,
                                 const l8_tensor *x8, const l8_tensor *x8t, l8_tensor *y,
                                 l8_tensor *h, l8_linear_ctx **saved, l8_stream *side,
                                 l8_stream *s)
{
    static const char *op = "l8_linear_forward_gelu";
    fwd_in in = { act, x, x8, x8t, h, side };
    if (saved)
        *saved = NULL;
    if (!x == !x8)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: give x or x8, not %s", op, x ? "both" : "neither");
    if (x8 && act != L8_ACT_NONE)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: an activation applies to x, not to x8", op);
    if (!h)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: h is NULL", op);
    return forward_impl(l, op, &in, y, saved, s);
}

/* ------------------------------------------------------------------------ */
/* backward                                                                  */

/* What a backward takes: dY = dy * act'(y), cast by the layer (FP8) - or
 * dy8, dy8t and db, cast by the caller (dy NULL). */
typedef struct bwd_in {
    l8_act act;
    const l8_tensor *dy, *y, *dy8, *dy8t, *db;
    const l8_tensor *z;           /* l8_linear_backward_fp8_dx: the layer below's GELU input */
    l8_tensor *dx8, *dx8t;        /* and its dY8, dY8t, cast from dX in the dgrad */
} bwd_in;

/* Whether t is the same elements as u (same storage, offset, dtype, size). */
static int same_tensor(const l8_tensor *t, const l8_tensor *u)
{
    return l8_tensor_storage(t) == l8_tensor_storage(u) &&
           l8_tensor_offset(t) == l8_tensor_offset(u) && l8_tensor_dtype(t) == l8_tensor_dtype(u) &&
           l8_tensor_numel(t) == l8_tensor_numel(u);
}

/* The caller's dy8 (T, N), dy8t (N, T) and db (N,) for an FP8 layer. */
static l8_status check_cast_grad(const l8_linear *l, const char *op, const bwd_in *in, int64_t T)
{
    if (!is_fp8_mode(l))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is a bf16 layer: it takes dY in bf16"
                       " (l8_linear_backward)", op, l->name);
    if (l->sp && l->par == L8_PARALLEL_ROW)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: %s is row parallel with sequence parallelism: it"
                       " gathers dY in bf16 before the cast (use l8_linear_backward)", op, l->name);
    L8_CHECK(need_cast(l, op, "dy8", in->dy8, l->fmt_g, l->meta_g, T, l->N));
    L8_CHECK(need_cast_t(l, op, "dy8t", in->dy8t, l->fmt_g, l->meta_g, l->N, T, 1));
    if (overlap(in->dy8, in->dy8t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dy8t overlaps dy8", op);
    if (!l->gb) {
        if (in->db)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has no bias: db must be NULL", op, l->name);
        return L8_OK;
    }
    if (!in->db)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has a bias: db (the column sums of dY) is NULL",
                       op, l->name);
    if (same_tensor(in->db, l->gb) && (l->accumulate_grad || l->stats.micro_batch > 0))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: db is %s's bias main_grad, which already holds a"
                       " sum to add to (a later micro-batch, or accumulate_grad): pass the column"
                       " sums in a tensor of their own", op, l->name);
    L8_CHECK(need(op, "db", in->db, l->ctx, L8_F32, l->grad_dt));
    if (l8_tensor_numel(in->db) != l->N)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: db has %lld elements, wanted %lld", op,
                       (long long)l8_tensor_numel(in->db), (long long)l->N);
    if (overlap(in->db, in->dy8) || overlap(in->db, in->dy8t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: db overlaps dy8 or dy8t", op);
    return L8_OK;
}

/* Backward with dY = dy * act'(y) (l8_linear_backward: act = L8_ACT_NONE, y
 * NULL), or with the caller's cast (l8_linear_backward_fp8). */
static l8_status backward_impl(l8_linear *l, const char *op, const bwd_in *in,
                               l8_linear_ctx **saved, l8_tensor *dx, l8_stream *s)
{
    L8_ARG(l != NULL && saved != NULL);
    L8_CHECK(need_tp(l, op));
    const l8_act act = in->act;
    const l8_tensor *dy = in->dy, *y = in->y;
    const int precast = dy == NULL;
    L8_CHECK(act_known(op, act));
    if (act != L8_ACT_NONE && !y)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: y (the forward's output, the activation's input)"
                       " is NULL", op);
    if (!*saved)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: *saved is NULL (forward was run without a ctx,"
                       " or this ctx was consumed already)", op);
    l8_linear_ctx *c = *saved;
    if (c->serial != l->serial)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the ctx comes from another layer's forward (this"
                       " is %s)", op, l->name);
    L8_CHECK(l8i_resolve_stream(op, l->ctx, &s));
    const int fp8 = is_fp8_mode(l);
    const int64_t T = c->T;
    const int colsp = l->sp && l->par == L8_PARALLEL_COLUMN;
    const int rowsp = l->sp && l->par == L8_PARALLEL_ROW;
    const int reduce_dx = l->par == L8_PARALLEL_COLUMN && dx;
    const int rows_saved = saves_rows(l, T);   /* saved is X8's rows: gather, transpose */
    /* the rows of dy and dx as the caller holds them (the forward's y and x) */
    const int64_t dy_rows = rowsp ? T / l->tp_size : T, dx_rows = colsp ? T / l->tp_size : T;
    l8_status ret = L8_OK;
    l8_tensor *dy2 = NULL, *dx2 = NULL, *dy8 = NULL, *dy8t = NULL, *dy8tc = NULL, *dbs = NULL,
              *dyg = NULL, *dxf = NULL, *xs = NULL, *xsc = NULL, *xg8 = NULL, *y2 = NULL,
              *dya = NULL, *z2 = NULL;  /* z2: the dX cast's GELU input, 2-D [T, K] */
    l8_stream *cs = NULL;
    int64_t Tdy = 0, Tdx = 0, Ty = 0;
    /* the activation's gradient inside the dY cast (FP8 without a dY
     * gather), else dy * act'(y) into a tensor of the layer's first */
    const int fuse_act = act != L8_ACT_NONE && fp8 && !rowsp;
    if (precast) {
        L8_TRY(ret, check_cast_grad(l, op, in, T), out);
        Tdy = T;
    } else {
        L8_TRY(ret, act_view(l, op, act != L8_ACT_NONE ? "da" : "dy", dy, l->N, &Tdy, &dy2), out);
    }
    if (act != L8_ACT_NONE) {
        L8_TRY(ret, act_view(l, op, "y", y, l->N, &Ty, &y2), out);
        if (Ty != Tdy) {
            ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: y has %lld rows, da %lld", op, (long long)Ty,
                          (long long)Tdy);
            goto out;
        }
        if (overlap(dx, y)) {
            ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: dx overlaps y", op);
            goto out;
        }
    }
    if (dx)
        L8_TRY(ret, act_view(l, op, "dx", dx, l->K, &Tdx, &dx2), out);
    if (Tdy != dy_rows || (dx && Tdx != dx_rows)) {
        ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: the forward wants %lld rows of dy and %lld of dx;"
                      " dy has %lld%s", op, (long long)dy_rows, (long long)dx_rows,
                      (long long)Tdy, dx && Tdx != dx_rows ? " and dx another count" : "");
        goto out;
    }
    if (overlap(dx, dy) || overlap(dx, in->dy8) || overlap(dx, in->dy8t) || overlap(dx, in->db)) {
        ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: dx overlaps %s", op,
                      precast ? "dy8, dy8t or db" : "dy");
        goto out;
    }
    if (in->dx8) {
        if (!dx || l->tp) {
            ret = L8_FAIL(!dx ? L8_ERR_INVALID_ARG : L8_ERR_UNSUPPORTED, "%s: the dX cast needs"
                          " dx and a layer without tensor parallelism (%s)", op, l->name);
            goto out;
        }
        int64_t Tz = 0;
        l8i_dact_out chk;
        /* the dgrad writes dx, dx8 and dx8t while its cast reads z */
        const l8_tensor *both[4] = { dx, in->z, in->dx8, in->dx8t };
        static const char *const names[4] = { "dx", "z", "dx8", "dx8t" };
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++)
                if (overlap(both[a], both[b])) {
                    ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s overlaps %s", op, names[a],
                                  names[b]);
                    goto out;
                }
        L8_TRY(ret, act_view(l, op, "z", in->z, l->K, &Tz, &z2), out);
        L8_TRY(ret, l8i_cast_dact_prepare(op, dx2, z2, in->dx8, in->dx8t, &chk), out);
        const l8_tensor *ours[5] = { in->dy8, in->dy8t, in->db, c->saved, dy };
        for (int k = 0; k < 5; k++)
            if (overlap(in->dx8, ours[k]) || overlap(in->dx8t, ours[k]) ||
                overlap(dx, ours[k]) || overlap(in->z, ours[k])) {
                ret = L8_FAIL(L8_ERR_INVALID_ARG, "%s: dx, z, dx8 or dx8t overlaps %s", op,
                              (const char *[]){ "dy8", "dy8t", "db", "the saved input",
                                                "dy" }[k]);
                goto out;
            }
    }
    if (c->weight_version != l->weight_version) {
        ret = L8_FAIL(L8_ERR_STATE, "%s: %s rebuilt its weights (begin_step and a forward) after"
                      " the forward this ctx comes from; its backward would use other weights",
                      op, l->name);
        goto out;
    }
    /* (an X8t with a meta of the caller's keeps its scale: no epoch to check) */
    if (fp8 && l8_tensor_fp8_meta(c->saved) == l->meta_x && c->x_epoch != l->x_cast_epoch) {
        ret = L8_FAIL(L8_ERR_STATE, "%s: %s cast its input with a newer scale (recipe update, then"
                      " a forward) after the forward this ctx comes from, so the saved FP8 input"
                      " can no longer be decoded: run l8_recipe_update after the step's"
                      " backwards", op, l->name);
        goto out;
    }
    const int first = !l->accumulate_grad && l->stats.micro_batch == 0;

    /* everything allocated before anything is enqueued */
    if (act != L8_ACT_NONE && !fuse_act)
        L8_TRY(ret, new_tensor(l, "dy_act", L8_BF16, dy_rows, l->N, NULL, s, &dya), out);
    if (rowsp)                    /* dY of all T rows */
        L8_TRY(ret, new_tensor(l, "dy_gathered", L8_BF16, T, l->N, NULL, s, &dyg), out);
    if (colsp && dx)              /* dX partial sums of all T rows, scattered into dx */
        L8_TRY(ret, new_tensor(l, "dx_partial", L8_BF16, T, l->K, NULL, s, &dxf), out);
    if (rows_saved) {             /* X8 of all ranks, then its transpose [K, T16] */
        l8_fp8_meta *xm = l8_tensor_fp8_meta(c->saved);
        L8_TRY(ret, new_tensor(l, "x_fp8_gathered", l->fmt_x, T, l->K, xm, s, &xg8), out);
        L8_TRY(ret, new_transposed(l, "x_t_gathered", l->fmt_x, l->K, T, 1, xm, s, &xs, &xsc),
               out);
    } else if (colsp) {           /* the saved input of all ranks (its meta), for wgrad */
        L8_TRY(ret, fp8 ? new_tensor(l, "x_t_gathered", l->fmt_x, l->K, T,
                                     l8_tensor_fp8_meta(c->saved), s, &xs)
                        : new_tensor(l, "x_gathered", L8_BF16, T, l->K, NULL, s, &xs), out);
    }
    if (fp8 && !precast) {        /* dY8t [N, T16] (its [N, T] view cast into where T % 16) */
        L8_TRY(ret, new_tensor(l, "dy_fp8", l->fmt_g, T, l->N, l->meta_g, s, &dy8), out);
        L8_TRY(ret, new_transposed(l, "dy_t_fp8", l->fmt_g, l->N, T, 1, l->meta_g, s, &dy8t,
                                   &dy8tc), out);
    } else if (fp8) {             /* the caller's dY8t as wgrad reads it: [N, T16] */
        L8_TRY(ret, wide_view(in->dy8t, &dy8t), out);
    }
    if (l->gb && !first && !precast)   /* the bias gradient of this micro-batch, added below */
        L8_TRY(ret, new_tensor(l, "dbias", fp8 ? L8_F32 : l->grad_dt, l->N, -1, NULL, s, &dbs),
               out);
    l8_tensor *db = l->gb ? (first ? l->gb : dbs) : NULL;
    if (c->hooked && c->hooks.restore)
        L8_TRY(ret, c->hooks.restore(c->hooks.arg, c->saved, c->name, s), out);
    if (colsp) {                  /* re-gather X on the comm stream, overlapping dgrad */
        L8_TRY(ret, comm_after(l, s, &cs), out);
        if (rows_saved) {
            L8_TRY(ret, l8_comm_all_gather(l->tp, c->saved, xg8, 0, cs), out);
            L8_TRY(ret, l8_fp8_transpose(xg8, xsc ? xsc : xs, cs), out);
        } else {
            L8_TRY(ret, l8_comm_all_gather(l->tp, c->saved, xs, fp8 ? -1 : 0, cs), out);
        }
        L8_TRY(ret, l8_event_record(l->ev_tp[1], cs), out);
    }
    if (dya) {
        L8_TRY(ret, l8_gelu_backward(y2, dy2, dya, s), out);
        l8_tensor_destroy(dy2);
        dy2 = dya;
        dya = NULL;
    }
    if (dyg) {
        L8_TRY(ret, l8_comm_all_gather(l->tp, dy2, dyg, 0, s), out);
        l8_tensor_destroy(dy2);
        dy2 = dyg;
        dyg = NULL;
    }

    l8_gemm_desc dg = L8_GEMM_DESC_INIT, wg = L8_GEMM_DESC_INIT;
    dg.d = dxf ? dxf : dx2;       /* (T, K) bf16, = */
    dg.sm_count = l->dg_sms;
    if (z2) {                     /* and the layer below's dY8, dY8t */
        dg.epilogue = L8_GEMM_EPI_DGELU_CAST;
        dg.aux = z2;
        dg.cast = in->dx8;
        dg.cast_t = in->dx8t;
    }
    wg.d = l->gw;                 /* (N, K) main_grad */
    wg.beta = first ? 0.0f : 1.0f;
    const l8_tensor *x_saved = xs ? xs : c->saved;
    if (fp8) {
        /* dY8 (T, N), dY8t (N, T) e5m2 and db (N,) f32: the caller's, or
         * cast here in one pass (of da * act'(y) when fused) */
        if (!precast) {
            l8_tensor *yt = dy8tc ? dy8tc : dy8t;   /* [N, T], row-padded where T % 16 */
            if (fuse_act)
                L8_TRY(ret, l8_fp8_cast_transpose_dact(act, dy2, y2, dy8, yt, db,
                                                       L8_CAST_ACCUMULATE_AMAX, s), out);
            else if (db)
                L8_TRY(ret, l8_fp8_cast_transpose_dbias(dy2, dy8, yt, db,
                                                        L8_CAST_ACCUMULATE_AMAX, s), out);
            else
                L8_TRY(ret, l8_fp8_cast_transpose(dy2, dy8, yt, L8_CAST_ACCUMULATE_AMAX, s),
                       out);
            l->stats.grad_casts++;
        }
        dg.a = precast ? in->dy8 : dy8;     /* (T, N) e5m2 */
        dg.b = l->w8t;            /* (K, N) e4m3 */
        dg.trans_b = 1;
        wg.a = dy8t;              /* (N, T16) e5m2: T's columns, then zeros */
        wg.b = x_saved;           /* (K, T16) e4m3, the same */
        wg.trans_b = 1;
    } else {
        dg.a = dy2;               /* (T, N) bf16 */
        dg.b = l->w16;            /* (N, K) bf16, not transposed */
        dg.trans_b = 0;
        wg.a = dy2;               /* op(A) = dY^T (N, T) */
        wg.trans_a = 1;
        wg.b = x_saved;           /* X (T, K) bf16 */
        wg.trans_b = 0;
        if (db) {
            wg.bias = db;         /* db[n] = sum_t dY[t, n], = */
            wg.epilogue = L8_GEMM_EPI_DBIAS_A;
        }
    }
    /* the wgrad's stream: after dY is ready on s (and X restored), beside
     * the dgrad and what the caller enqueues on s next */
    l8_stream *ws = l->ws && l->ws != s ? l->ws : s;
    if (ws != s) {
        L8_TRY(ret, l8_event_record(l->ev_ws, s), out);
        L8_TRY(ret, l8_stream_wait_event(ws, l->ev_ws), out);
        wg.sm_count = l->ws_sms;
    }
    if (dx)
        L8_TRY(ret, l8_gemm(l->gemm, &dg, s), out);
    if (reduce_dx) {              /* the dX reduction on the comm stream, overlapping wgrad */
        L8_TRY(ret, comm_after(l, s, &cs), out);
        if (dxf)
            L8_TRY(ret, l8_comm_reduce_scatter(l->tp, dxf, dx2, L8_REDUCE_SUM, 0, cs), out);
        else
            L8_TRY(ret, l8_comm_all_reduce(l->tp, dx2, dx2, L8_REDUCE_SUM, cs), out);
        L8_TRY(ret, l8_event_record(l->ev_tp[2], cs), out);
    }
    if (colsp)
        L8_TRY(ret, l8_stream_wait_event(ws, l->ev_tp[1]), out);
    L8_TRY(ret, l8_gemm(l->gemm, &wg, ws), out);   /* records its operands on ws */
    /* this micro-batch's bias gradient, when not written into main_grad
     * already: added to it after the first micro-batch, else converted */
    const l8_tensor *mb_db = precast ? in->db : dbs;
    if (mb_db && !first)
        L8_TRY(ret, l8_add_into(l->gb, mb_db, ws), out);
    else if (mb_db && !same_tensor(mb_db, l->gb))
        L8_TRY(ret, l8_convert(mb_db, l->gb, ws), out);
    if (reduce_dx)
        L8_TRY(ret, l8_stream_wait_event(s, l->ev_tp[2]), out);
    L8_TRY(ret, l8_event_record(l->ev, ws), out);
    l->stats.micro_batch++;
    l->stats.backwards++;

    /* the layer's work is enqueued: the ctx is consumed whatever follows */
    l8_linear_ctx_destroy(c);
    *saved = NULL;
    if (l->group_lost) {
        ret = L8_FAIL(L8_ERR_STATE, "%s: %s reports to a parameter group that was destroyed "
                      "(destroy the layer first)", op, l->name);
    } else if (l->grad_ready) {
        l8_status st = l->grad_ready(l->grad_ready_arg, l->weight_id, l->ev);
        if (l->gb) {
            l8_status sb = l->grad_ready(l->grad_ready_arg, l->bias_id, l->ev);
            if (st == L8_OK)
                st = sb;
        }
        ret = st;
    }
out:
    if (cs && ret != L8_OK) {     /* nothing of ours may still be in flight on the comm stream */
        l8_status ignored = l8_event_record(l->ev_tp[0], cs);
        if (ignored == L8_OK) ignored = l8_stream_wait_event(s, l->ev_tp[0]);
        (void)ignored;
    }
    l8_tensor_destroy(dy2);
    l8_tensor_destroy(dx2);
    l8_tensor_destroy(dy8);       /* stream-ordered after the GEMMs on s */
    l8_tensor_destroy(dy8t);
    l8_tensor_destroy(dy8tc);
    l8_tensor_destroy(dbs);
    l8_tensor_destroy(dyg);
    l8_tensor_destroy(dxf);
    l8_tensor_destroy(xs);
    l8_tensor_destroy(xsc);
    l8_tensor_destroy(xg8);
    l8_tensor_destroy(y2);
    l8_tensor_destroy(dya);
    l8_tensor_destroy(z2);
    return ret;
}

l8_status l8_linear_backward(l8_linear *l, l8_linear_ctx **saved, const l8_tensor *dy,
                             l8_tensor *dx, l8_stream *s)
{
    bwd_in in = { L8_ACT_NONE, dy, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    if (!dy)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_backward: dy is NULL");
    return backward_impl(l, "l8_linear_backward", &in, saved, dx, s);
}

l8_status l8_linear_backward_act(l8_linear *l, l8_act act, l8_linear_ctx **saved,
                                 const l8_tensor *da, const l8_tensor *y, l8_tensor *dx,
                                 l8_stream *s)
{
    bwd_in in = { act, da, y, NULL, NULL, NULL, NULL, NULL, NULL };
    if (!da)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_backward_act: da is NULL");
    return backward_impl(l, "l8_linear_backward_act", &in, saved, dx, s);
}

l8_status l8_linear_backward_fp8(l8_linear *l, l8_linear_ctx **saved, const l8_tensor *dy8,
                                 const l8_tensor *dy8t, const l8_tensor *db, l8_tensor *dx,
                                 l8_stream *s)
{
    bwd_in in = { L8_ACT_NONE, NULL, NULL, dy8, dy8t, db, NULL, NULL, NULL };
    if (!dy8)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_linear_backward_fp8: dy8 is NULL");
    return backward_impl(l, "l8_linear_backward_fp8", &in, saved, dx, s);
}

l8_status l8_linear_backward_dx(l8_linear *l, l8_linear_ctx **saved, const l8_tensor *dy,
                                l8_tensor *dx, const l8_tensor *z, l8_tensor *dx8,
                                l8_tensor *dx8t, l8_stream *s)
{
    static const char *op = "l8_linear_backward_dx";
    bwd_in in = { L8_ACT_NONE, dy, NULL, NULL, NULL, NULL, z, dx8, dx8t };
    if (!dy || !z || !dx8 || !dx8t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dy, z, dx8 and dx8t are required", op);
    return backward_impl(l, op, &in, saved, dx, s);
}

l8_status l8_linear_backward_fp8_dx(l8_linear *l, l8_linear_ctx **saved, const l8_tensor *dy8,
                                    const l8_tensor *dy8t, const l8_tensor *db, l8_tensor *dx,
                                    const l8_tensor *z, l8_tensor *dx8, l8_tensor *dx8t,
                                    l8_stream *s)
{
    static const char *op = "l8_linear_backward_fp8_dx";
    bwd_in in = { L8_ACT_NONE, NULL, NULL, dy8, dy8t, db, z, dx8, dx8t };
    if (!dy8 || !z || !dx8 || !dx8t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dy8, z, dx8 and dx8t are required", op);
    return backward_impl(l, op, &in, saved, dx, s);
}
