/* test_recipe.c - the delayed-scaling recipe: registration and growth, the
 * update math (history roll, max vs most_recent, margin, zero / NaN / Inf
 * amax), the amax-reduction hook, state views, and the whole loop driven by
 * FP8 Linear steps whose amaxes are known exactly. On a GPU: the same steps
 * on the device give the same bits as on the host.
 *
 * Expected values are computed here in double from the amaxes the test put
 * in, then rounded to f32 the way the update does it (an f32 division, then
 * an f32 division by 2^margin), so comparisons are exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "ops/recipe.h"
#include "ops/linear.h"
#include "runtime/fp8.h"

static l8_ctx *mk_ctx(const char *dev) { return l8t_ctx(dev, NULL, 0); }

static void done_ctx(l8_ctx *ctx) { l8t_ctx_finish(ctx); }

static l8_recipe *mk_recipe(l8_ctx *ctx, int H, float margin, l8_amax_compute ac,
                            l8_fp8_format fmt)
{
    l8_recipe_config c = L8_RECIPE_CONFIG_INIT;
    c.history_len = H;
    c.margin = margin;
    c.amax_compute = ac;
    c.format = fmt;
    l8_recipe *r = NULL;
    L8_CK(l8_recipe_create(ctx, &c, &r));
    return r;
}

/* Host copies of the recipe state (n roles, history H). */
typedef struct snap {
    int n, H;
    float *hist, *scale, *amax, *fmax;
} snap;

static void get_all(l8_tensor *t, float *out)
{
    if (l8_tensor_numel(t) > 0)
        L8_CK(l8_tensor_copy_to_host(t, out, l8_tensor_nbytes(t), NULL));
}

static snap take(l8_recipe *r)
{
    snap s = { l8_recipe_count(r), l8_recipe_history_len(r), NULL, NULL, NULL, NULL };
    l8_tensor *h = NULL, *sc = NULL, *am = NULL, *fm = NULL;
    L8_CK(l8_recipe_state(r, &h, &sc, &am, &fm));
    ck_assert_int_eq(l8_tensor_dim(h, 0), s.n);
    ck_assert_int_eq(l8_tensor_dim(h, 1), s.H);
    s.hist = calloc((size_t)(s.n * s.H) + 1, sizeof(float));
    s.scale = calloc((size_t)s.n + 1, sizeof(float));
    s.amax = calloc((size_t)s.n + 1, sizeof(float));
    s.fmax = calloc((size_t)s.n + 1, sizeof(float));
    get_all(h, s.hist);
    get_all(sc, s.scale);
    get_all(am, s.amax);
    get_all(fm, s.fmax);
    l8_tensor_destroy(h);
    l8_tensor_destroy(sc);
    l8_tensor_destroy(am);
    l8_tensor_destroy(fm);
    return s;
}

static void snap_free(snap *s)
{
    free(s->hist);
    free(s->scale);
    free(s->amax);
    free(s->fmax);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The scale the update computes from amax a: f32 (fmax / a) / 2^margin. */
static float want_scale(float fmax, float a, float margin)
{
    volatile float q = fmax / a;
    volatile float m = exp2f(margin);
    return q / m;
}

/* ---- registration ---- */

START_TEST(test_register_and_grow)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_recipe *r = mk_recipe(ctx, 8, 0.0f, L8_AMAX_MAX_HISTORY, L8_FP8_HYBRID);
    ck_assert_int_eq(l8_recipe_dtype(r, L8_ROLE_INPUT), L8_E4M3);
    ck_assert_int_eq(l8_recipe_dtype(r, L8_ROLE_WEIGHT), L8_E4M3);
    ck_assert_int_eq(l8_recipe_dtype(r, L8_ROLE_GRAD_OUTPUT), L8_E5M2);
    /* bad input: not a dtype, and a record that says why */
    l8_error_clear();
    ck_assert_int_eq(l8_recipe_dtype(NULL, L8_ROLE_INPUT), L8_DTYPE_INVALID);
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_INVALID_ARG);
    l8_error_clear();
    ck_assert_int_eq(l8_recipe_dtype(r, (l8_fp8_role)3), L8_DTYPE_INVALID);
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_recipe_dtype(r, (l8_fp8_role)-1), L8_DTYPE_INVALID);
    ck_assert_uint_eq(l8_dtype_size(L8_DTYPE_INVALID), 0);
    /* 40 roles: past the initial capacity twice; the state of the first
     * roles must survive the moves */
    const int n = 40;
    l8_fp8_meta *metas[40];
    for (int i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layer%d.%s", i / 3, i % 3 == 2 ? "grad_output" : "x");
        int idx = -7;
        L8_CK(l8_recipe_register(r, nm, (l8_fp8_role)(i % 3), &idx, &metas[i]));
        ck_assert_int_eq(idx, i);
        ck_assert_ptr_nonnull(metas[i]);
        ck_assert_ptr_eq(l8_recipe_meta(r, i), metas[i]);
        ck_assert_str_eq(l8_recipe_role_name(r, i), nm);
        float sc = 0, si = 0, am = -1;
        L8_CK(l8_fp8_meta_get(metas[i], &sc, &si, &am));
        ck_assert(sc == 1.0f && si == 1.0f && am == 0.0f);
        /* give role i an amax, and update at i = 5 and i = 20 so the early
         * roles have history and scales before the moves */
        L8_CK(l8_fp8_meta_set(metas[i], 1.0f, 1.0f, (float)(i + 1)));
        if (i == 5 || i == 20)
            L8_CK(l8_recipe_update(r, NULL));
    }
    ck_assert_int_eq(l8_recipe_count(r), n);
    ck_assert_ptr_null(l8_recipe_role_name(r, n));
    ck_assert_ptr_null(l8_recipe_meta(r, -1));
    L8_CK(l8_recipe_update(r, NULL));
    ck_assert_uint_eq(l8_recipe_updates(r), 3);
    snap s = take(r);
    for (int i = 0; i < n; i++) {
        float fmax = i % 3 == 2 ? 57344.0f : 448.0f;
        ck_assert(s.fmax[i] == fmax);
        /* role i saw amax i+1 once, in the first update after it registered */
        int ups = i <= 5 ? 3 : i <= 20 ? 2 : 1;
        const float *h = s.hist + (size_t)i * 8;
        ck_assert_msg(h[ups - 1] == (float)(i + 1), "role %d: history[%d] = %g", i, ups - 1,
                      (double)h[ups - 1]);
        for (int j = 0; j < 8; j++)
            if (j != ups - 1)
                ck_assert_msg(h[j] == 0.0f, "role %d history[%d] = %g", i, j, (double)h[j]);
        ck_assert(same_bits(s.scale[i], want_scale(fmax, (float)(i + 1), 0.0f)));
        ck_assert(s.amax[i] == 0.0f);
        float sc = 0, am = -1;
        L8_CK(l8_fp8_meta_get(metas[i], &sc, NULL, &am));
        ck_assert(same_bits(sc, s.scale[i]));       /* scattered */
        ck_assert(am == 0.0f);                       /* gathered and reset */
    }
    snap_free(&s);
    l8_recipe_destroy(r);
    done_ctx(ctx);
}
END_TEST

/* ---- update math, amaxes put into the metas by hand ---- */

START_TEST(test_update_math)
{
    l8_ctx *ctx = mk_ctx("host");
    for (int variant = 0; variant < 3; variant++) {
        /* 0: max over H = 4, 1: most_recent, 2: max with margin 1.5, E4M3 format */
        l8_amax_compute ac = variant == 1 ? L8_AMAX_MOST_RECENT : L8_AMAX_MAX_HISTORY;
        float margin = variant == 2 ? 1.5f : 0.0f;
        l8_fp8_format fmt = variant == 2 ? L8_FP8_E4M3 : L8_FP8_HYBRID;
        const int H = 4;
        l8_recipe *r = mk_recipe(ctx, H, margin, ac, fmt);
        l8_fp8_meta *m[2];
        L8_CK(l8_recipe_register(r, "a.input", L8_ROLE_INPUT, NULL, &m[0]));
        L8_CK(l8_recipe_register(r, "a.grad_output", L8_ROLE_GRAD_OUTPUT, NULL, &m[1]));
        const float fmax[2] = { 448.0f, fmt == L8_FP8_E4M3 ? 448.0f : 57344.0f };
        /* per step: the amax each role reports; NaN/Inf must change nothing;
         * 0 is pushed (finite) */
        const float seq[][2] = {
            { 2.0f, 0.5f }, { 8.0f, 0.25f }, { 1.0f, 4.0f }, { 0.0f, 0.0f },
            { NAN, INFINITY }, { 3.0f, 1.0f }, { 0.5f, 0.125f }, { 0.5f, 0.125f },
        };
        const int steps = (int)(sizeof seq / sizeof seq[0]);
        double hist[2][4] = { { 0 } };
        float scale[2] = { 1.0f, 1.0f };
        for (int st = 0; st < steps; st++) {
            float sinv[2];
            for (int i = 0; i < 2; i++) {
                sinv[i] = 1.0f / scale[i];
                L8_CK(l8_fp8_meta_set(m[i], scale[i], sinv[i], seq[st][i]));
            }
            L8_CK(l8_recipe_update(r, NULL));
            /* the model */
            for (int i = 0; i < 2; i++) {
                float a = seq[st][i];
                if (!isfinite(a))
                    continue;             /* not pushed, scale kept */
                memmove(&hist[i][1], &hist[i][0], 3 * sizeof(double));
                hist[i][0] = a;
                double use = a;
                if (ac == L8_AMAX_MAX_HISTORY)
                    for (int j = 0; j < H; j++)
                        use = hist[i][j] > use ? hist[i][j] : use;
                if (use > 0)
                    scale[i] = want_scale(fmax[i], (float)use, margin);
            }
            snap s = take(r);
            for (int i = 0; i < 2; i++) {
                for (int j = 0; j < H; j++)
                    ck_assert_msg(s.hist[i * H + j] == (float)hist[i][j], "variant %d step %d"
                                  " role %d: history[%d] = %g, expected %g", variant, st, i, j,
                                  (double)s.hist[i * H + j], hist[i][j]);
                ck_assert_msg(same_bits(s.scale[i], scale[i]), "variant %d step %d role %d: scale"
                              " %.9g, expected %.9g", variant, st, i, (double)s.scale[i],
                              (double)scale[i]);
                ck_assert(s.amax[i] == 0.0f);
                float msc = 0, msi = 0, mam = -1;
                L8_CK(l8_fp8_meta_get(m[i], &msc, &msi, &mam));
                ck_assert(same_bits(msc, scale[i]));
                ck_assert(mam == 0.0f);
                /* scale_inv is the casts' business: the update left ours */
                ck_assert(same_bits(msi, sinv[i]));
            }
            snap_free(&s);
        }
        l8_recipe_destroy(r);
    }
    done_ctx(ctx);
}
END_TEST

/* scale_inv is never written by the update: data cast with the old scale
 * keeps decoding with the old scale_inv. */
START_TEST(test_update_leaves_scale_inv)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_recipe *r = mk_recipe(ctx, 16, 0.0f, L8_AMAX_MAX_HISTORY, L8_FP8_HYBRID);
    l8_fp8_meta *m = NULL;
    L8_CK(l8_recipe_register(r, "x", L8_ROLE_INPUT, NULL, &m));
    L8_CK(l8_fp8_meta_set(m, 1.0f, 0.75f, 7.0f));
    L8_CK(l8_recipe_update(r, NULL));
    float sc = 0, si = 0;
    L8_CK(l8_fp8_meta_get(m, &sc, &si, NULL));
    ck_assert(same_bits(sc, want_scale(448.0f, 7.0f, 0.0f)));
    ck_assert(si == 0.75f);
    l8_recipe_destroy(r);
    done_ctx(ctx);
}
END_TEST

/* ---- the reduction hook ---- */

typedef struct hook_log {
    int calls;
    int64_t n;
    float peer[4];                /* what the "other rank" saw */
    l8_status fail;
} hook_log;

static l8_status max_with_peer(void *arg, l8_tensor *amax, l8_stream *s)
{
    hook_log *h = arg;
    h->calls++;
    h->n = l8_tensor_numel(amax);
    if (h->fail != L8_OK)
        return L8_FAIL(h->fail, "simulated all-reduce failure");
    ck_assert_int_eq(l8_tensor_dtype(amax), L8_F32);
    ck_assert(l8_tensor_is_contiguous(amax));
    float v[4];
    L8_CK(l8_tensor_copy_to_host(amax, v, (size_t)h->n * sizeof(float), s));
    for (int i = 0; i < h->n; i++)
        v[i] = v[i] > h->peer[i] ? v[i] : h->peer[i];
    return l8_tensor_copy_from_host(amax, v, (size_t)h->n * sizeof(float), s);
}

/* On the GPU the hook splits the update: the gather kernel, the hook, then
 * the update with the scatter in it (without a hook: one launch). */
static void reduce_hook_run(const char *dev)
{
    l8_ctx *ctx = mk_ctx(dev);
    hook_log hl = { 0, 0, { 5.0f, 1.0f, 0, 0 }, L8_OK };
    l8_recipe_config c = L8_RECIPE_CONFIG_INIT;
    c.history_len = 4;
    c.reduce = max_with_peer;
    c.reduce_arg = &hl;
    l8_recipe *r = NULL;
    L8_CK(l8_recipe_create(ctx, &c, &r));
    l8_fp8_meta *m[2];
    L8_CK(l8_recipe_register(r, "x", L8_ROLE_INPUT, NULL, &m[0]));
    L8_CK(l8_recipe_register(r, "w", L8_ROLE_WEIGHT, NULL, &m[1]));
    L8_CK(l8_fp8_meta_set(m[0], 1, 1, 2.0f));      /* local 2, peer 5 -> 5 */
    L8_CK(l8_fp8_meta_set(m[1], 1, 1, 3.0f));      /* local 3, peer 1 -> 3 */
    L8_CK(l8_recipe_update(r, NULL));
    ck_assert_int_eq(hl.calls, 1);
    ck_assert_int_eq(hl.n, 2);
    snap s = take(r);
    ck_assert(s.hist[0] == 5.0f && s.hist[4] == 3.0f);
    ck_assert(same_bits(s.scale[0], want_scale(448.0f, 5.0f, 0)));
    ck_assert(same_bits(s.scale[1], want_scale(448.0f, 3.0f, 0)));
    snap_free(&s);

    /* a failing hook: the update stops, the gathered amaxes wait in amax [N] */
    hl.fail = L8_ERR_COMM;
    hl.peer[0] = hl.peer[1] = 0.0f;
    L8_CK(l8_fp8_meta_set(m[0], 1, 1, 40.0f));
    L8_CK(l8_fp8_meta_set(m[1], 1, 1, 30.0f));
    L8_CK_ST(l8_recipe_update(r, NULL), L8_ERR_COMM);
    ck_assert_uint_eq(l8_recipe_updates(r), 1);
    s = take(r);
    ck_assert(s.hist[0] == 5.0f && s.hist[1] == 0.0f);          /* no roll */
    ck_assert(s.amax[0] == 40.0f && s.amax[1] == 30.0f);        /* kept */
    snap_free(&s);
    /* this step's casts saw less; the retry folds both in */
    hl.fail = L8_OK;
    L8_CK(l8_fp8_meta_set(m[0], 1, 1, 4.0f));
    L8_CK(l8_recipe_update(r, NULL));
    s = take(r);
    ck_assert(s.hist[0] == 40.0f && s.hist[1] == 5.0f);
    ck_assert(s.hist[4] == 30.0f && s.hist[5] == 3.0f);
    ck_assert(s.amax[0] == 0.0f && s.amax[1] == 0.0f);
    ck_assert(same_bits(s.scale[0], want_scale(448.0f, 40.0f, 0)));
    snap_free(&s);
    /* removing the hook */
    L8_CK(l8_recipe_set_reduce(r, NULL, NULL));
    L8_CK(l8_fp8_meta_set(m[1], 1, 1, 60.0f));
    L8_CK(l8_recipe_update(r, NULL));
    ck_assert_int_eq(hl.calls, 3);
    s = take(r);
    ck_assert(s.hist[0] == 0.0f && s.hist[1] == 40.0f);         /* nothing cast: 0 */
    ck_assert(s.hist[4] == 60.0f && s.hist[5] == 30.0f);
    ck_assert(same_bits(s.scale[0], want_scale(448.0f, 40.0f, 0)));
    ck_assert(same_bits(s.scale[1], want_scale(448.0f, 60.0f, 0)));
    for (int i = 0; i < 2; i++) {
        float sc = 0, am = -1;
        L8_CK(l8_fp8_meta_get(m[i], &sc, NULL, &am));
        ck_assert(same_bits(sc, s.scale[i]) && am == 0.0f);
    }
    snap_free(&s);
    l8_recipe_destroy(r);
    done_ctx(ctx);
}

START_TEST(test_reduce_hook) { reduce_hook_run("host"); }
END_TEST

START_TEST(test_gpu_reduce_hook) { reduce_hook_run("cuda:0"); }
END_TEST

/* ---- state views: checkpoint save / restore ---- */

START_TEST(test_state_views_and_push)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_recipe *r = mk_recipe(ctx, 2, 0, L8_AMAX_MAX_HISTORY, L8_FP8_HYBRID);
    l8_tensor *h = NULL, *sc = NULL;
    L8_CK(l8_recipe_state(r, &h, &sc, NULL, NULL));          /* empty recipe: empty views */
    ck_assert_int_eq(l8_tensor_numel(h), 0);
    ck_assert_int_eq(l8_tensor_numel(sc), 0);
    l8_tensor_destroy(h);
    l8_tensor_destroy(sc);
    L8_CK(l8_recipe_update(r, NULL));                          /* N = 0: counts only */
    ck_assert_uint_eq(l8_recipe_updates(r), 1);
    l8_fp8_meta *m[3];
    L8_CK(l8_recipe_register(r, "l.input", L8_ROLE_INPUT, NULL, &m[0]));
    L8_CK(l8_recipe_register(r, "l.weight", L8_ROLE_WEIGHT, NULL, &m[1]));
    L8_CK(l8_recipe_register(r, "l.grad_output", L8_ROLE_GRAD_OUTPUT, NULL, &m[2]));
    L8_CK(l8_recipe_state(r, &h, &sc, NULL, NULL));
    ck_assert_int_eq(l8_tensor_dim(h, 0), 3);
    ck_assert_int_eq(l8_tensor_dim(h, 1), 2);
    /* "restore a checkpoint": write history and scales, push */
    const float hv[6] = { 1, 2, 3, 4, 5, 6 }, sv[3] = { 0.5f, 2.0f, 1024.0f };
    L8_CK(l8_tensor_copy_from_host(h, hv, sizeof hv, NULL));
    L8_CK(l8_tensor_copy_from_host(sc, sv, sizeof sv, NULL));
    L8_CK(l8_recipe_push_scales(r, NULL));
    for (int i = 0; i < 3; i++) {
        float v = 0;
        L8_CK(l8_fp8_meta_get(m[i], &v, NULL, NULL));
        ck_assert(v == sv[i]);
    }
    /* the next update continues from the restored history */
    L8_CK(l8_fp8_meta_set(m[0], sv[0], 1, 0.25f));
    L8_CK(l8_recipe_update(r, NULL));
    snap s = take(r);
    ck_assert(s.hist[0] == 0.25f && s.hist[1] == 1.0f);
    ck_assert(same_bits(s.scale[0], want_scale(448.0f, 1.0f, 0)));
    ck_assert(s.hist[2] == 0.0f && s.hist[3] == 3.0f);          /* role 1: pushed 0 */
    ck_assert(same_bits(s.scale[1], want_scale(448.0f, 3.0f, 0)));
    snap_free(&s);
    l8_tensor_destroy(h);
    l8_tensor_destroy(sc);
    l8_recipe_destroy(r);
    done_ctx(ctx);
}
END_TEST

/* ---- bad arguments ---- */

START_TEST(test_errors)
{
    l8_ctx *ctx = mk_ctx("host"), *other = mk_ctx("host");
    l8_recipe *r = NULL;
    l8_recipe_config c = L8_RECIPE_CONFIG_INIT;
    L8_CK_ST(l8_recipe_create(NULL, NULL, &r), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(r);
    c.size = 4;
    L8_CK_ST(l8_recipe_create(ctx, &c, &r), L8_ERR_INVALID_ARG);
    c = (l8_recipe_config)L8_RECIPE_CONFIG_INIT;
    c.history_len = -1;
    L8_CK_ST(l8_recipe_create(ctx, &c, &r), L8_ERR_INVALID_ARG);
    c = (l8_recipe_config)L8_RECIPE_CONFIG_INIT;
    c.margin = NAN;
    L8_CK_ST(l8_recipe_create(ctx, &c, &r), L8_ERR_INVALID_ARG);
    c = (l8_recipe_config)L8_RECIPE_CONFIG_INIT;
    c.amax_compute = (l8_amax_compute)7;
    L8_CK_ST(l8_recipe_create(ctx, &c, &r), L8_ERR_INVALID_ARG);
    c = (l8_recipe_config)L8_RECIPE_CONFIG_INIT;
    c.format = (l8_fp8_format)9;
    L8_CK_ST(l8_recipe_create(ctx, &c, &r), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(r);
    L8_CK(l8_recipe_create(ctx, NULL, &r));
    ck_assert_int_eq(l8_recipe_history_len(r), 1024);
    int idx = 5;
    l8_fp8_meta *m = (l8_fp8_meta *)r;
    L8_CK_ST(l8_recipe_register(r, "", L8_ROLE_INPUT, &idx, &m), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(idx, -1);
    ck_assert_ptr_null(m);
    char big[200];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    L8_CK_ST(l8_recipe_register(r, big, L8_ROLE_INPUT, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_recipe_register(r, "x", (l8_fp8_role)3, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_recipe_register(r, NULL, L8_ROLE_INPUT, NULL, NULL), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_recipe_count(r), 0);
    L8_CK_ST(l8_recipe_update(r, l8_ctx_stream(other, L8_STREAM_COMPUTE)), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_recipe_update(NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_recipe_state(NULL, NULL, NULL, NULL, NULL), L8_ERR_INVALID_ARG);
    l8_recipe_destroy(r);
    l8_recipe_destroy(NULL);
    done_ctx(other);
    done_ctx(ctx);
}
END_TEST

/* ---- the whole loop through FP8 Linear steps ----
 *
 * One FP8 Linear (K = 32, N = 16, T = 16, bias). Step s feeds X whose
 * largest |x| is ax[s] exactly (bf16-exact values, the maximum placed at a
 * random position), dY with max |dy| = ag[s], and master weights with max
 * |w| = aw[s] (rewritten before each step, then begin_step). After each
 * step's update the recipe's history and scales must follow the model. A
 * zero step (all-zero X) pushes 0; a NaN in X makes that role's amax NaN:
 * nothing is pushed and the scale stays. */

typedef struct loop_fx {
    l8_ctx *ctx;
    l8_gemm_handle *h;
    l8_recipe *r;
    l8_tensor *w, *gw, *b, *gb;
    l8_linear *lin;
} loop_fx;

static l8_tensor *mk(l8_ctx *ctx, l8_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    int64_t shape[2] = { d0, d1 };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, ndim, shape, &t));
    return t;
}

static void put_f32(l8_tensor *t, const float *v)
{
    L8_CK(l8_tensor_copy_from_host(t, v, l8_tensor_nbytes(t), NULL));
}

static void put_bf16(l8_tensor *t, const float *v)
{
    size_t n = (size_t)l8_tensor_numel(t);
    uint16_t *u = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        u[i] = l8_bf16_from_f32(v[i]);
    L8_CK(l8_tensor_copy_from_host(t, u, n * 2, NULL));
    free(u);
}

/* n values with |v| <= amax, max exactly amax at one place, bf16-exact */
static void fill_amax(l8_rng *r, float *v, int n, float amax)
{
    for (int i = 0; i < n; i++)
        v[i] = l8_bf16_to_f32(l8_bf16_from_f32(amax * l8_rng_float(r, -0.9f, 0.9f)));
    v[l8_rng_below(r, (uint64_t)n)] = (l8_rng_below(r, 2) ? -1.0f : 1.0f) * amax;
}

static void loop_init(loop_fx *f, const char *dev, l8_amax_compute ac, float margin, int H)
{
    memset(f, 0, sizeof *f);
    f->ctx = mk_ctx(dev);
    L8_CK(l8_gemm_handle_create(f->ctx, NULL, &f->h));
    f->r = mk_recipe(f->ctx, H, margin, ac, L8_FP8_HYBRID);
    f->w = mk(f->ctx, L8_F32, 2, 16, 32);
    f->gw = mk(f->ctx, L8_F32, 2, 16, 32);
    f->b = mk(f->ctx, L8_F32, 1, 16, 0);
    f->gb = mk(f->ctx, L8_F32, 1, 16, 0);
    float bias[16];
    for (int i = 0; i < 16; i++)
        bias[i] = 0.125f * (float)(i - 8);
    put_f32(f->b, bias);
    l8_linear_config c = L8_LINEAR_CONFIG_INIT;
    c.name = "loop";
    c.gemm = f->h;
    c.recipe = f->r;
    c.weight = f->w;
    c.weight_grad = f->gw;
    c.bias = f->b;
    c.bias_grad = f->gb;
    L8_CK(l8_linear_create(f->ctx, &c, &f->lin));
}

static void loop_free(loop_fx *f)
{
    l8_linear_destroy(f->lin);
    l8_tensor_destroy(f->w);
    l8_tensor_destroy(f->gw);
    l8_tensor_destroy(f->b);
    l8_tensor_destroy(f->gb);
    l8_recipe_destroy(f->r);
    l8_gemm_handle_destroy(f->h);
    done_ctx(f->ctx);
}

/* One training step on f with the given maxima; x_nan puts a NaN into X. */
static void loop_step(loop_fx *f, l8_rng *r, float ax, float aw, float ag, int x_nan)
{
    float w[16 * 32], x[16 * 32], dy[16 * 16];
    fill_amax(r, w, 16 * 32, aw);
    fill_amax(r, x, 16 * 32, ax);
    fill_amax(r, dy, 16 * 16, ag);
    if (ax == 0.0f)
        memset(x, 0, sizeof x);
    if (x_nan)
        x[3] = NAN;
    put_f32(f->w, w);
    L8_CK(l8_linear_begin_step(f->lin));
    l8_tensor *tx = mk(f->ctx, L8_BF16, 2, 16, 32), *ty = mk(f->ctx, L8_BF16, 2, 16, 16);
    l8_tensor *tdy = mk(f->ctx, L8_BF16, 2, 16, 16), *tdx = mk(f->ctx, L8_BF16, 2, 16, 32);
    put_bf16(tx, x);
    put_bf16(tdy, dy);
    l8_linear_ctx *c = NULL;
    L8_CK(l8_linear_forward(f->lin, tx, ty, &c, NULL));
    L8_CK(l8_linear_backward(f->lin, &c, tdy, tdx, NULL));
    ck_assert_ptr_null(c);
    L8_CK(l8_recipe_update(f->r, NULL));
    l8_tensor_destroy(tx);
    l8_tensor_destroy(ty);
    l8_tensor_destroy(tdy);
    l8_tensor_destroy(tdx);
}

/* The model of one role: push (if finite), scale from max or newest. */
typedef struct role_model {
    double hist[8];
    float scale;
} role_model;

static void model_push(role_model *m, int H, float a, float fmax, float margin, int recent)
{
    if (!isfinite(a))
        return;
    memmove(&m->hist[1], &m->hist[0], (size_t)(H - 1) * sizeof(double));
    m->hist[0] = a;
    double use = a;
    if (!recent)
        for (int j = 0; j < H; j++)
            use = m->hist[j] > use ? m->hist[j] : use;
    if (use > 0)
        m->scale = want_scale(fmax, (float)use, margin);
}

static void loop_run(const char *dev, l8_amax_compute ac, float margin)
{
    const int H = 3;
    loop_fx f;
    loop_init(&f, dev, ac, margin, H);
    l8_rng r;
    l8_rng_init(&r, 0x5ca1e + (uint64_t)ac * 7 + (uint64_t)(margin * 4));
    /* ax, aw, ag per step; step 3 all-zero X, step 5 NaN in X */
    const float steps[][3] = {
        { 1.0f, 0.5f, 0.25f }, { 4.0f, 0.5f, 2.0f }, { 2.0f, 0.75f, 0.5f }, { 0.0f, 0.5f, 1.0f },
        { 0.5f, 0.25f, 0.125f }, { 3.0f, 0.25f, 0.125f }, { 0.25f, 0.125f, 64.0f },
    };
    const int ns = (int)(sizeof steps / sizeof steps[0]);
    role_model m[3];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 3; i++)
        m[i].scale = 1.0f;
    const float fmax[3] = { 448.0f, 448.0f, 57344.0f };
    int ix = l8_linear_role_index(f.lin, L8_ROLE_INPUT);
    int iw = l8_linear_role_index(f.lin, L8_ROLE_WEIGHT);
    int ig = l8_linear_role_index(f.lin, L8_ROLE_GRAD_OUTPUT);
    ck_assert(ix >= 0 && iw >= 0 && ig >= 0);
    for (int s = 0; s < ns; s++) {
        int nan = s == 5;
        loop_step(&f, &r, steps[s][0], steps[s][1], steps[s][2], nan);
        model_push(&m[0], H, nan ? NAN : steps[s][0], fmax[0], margin, ac == L8_AMAX_MOST_RECENT);
        model_push(&m[1], H, steps[s][1], fmax[1], margin, ac == L8_AMAX_MOST_RECENT);
        model_push(&m[2], H, steps[s][2], fmax[2], margin, ac == L8_AMAX_MOST_RECENT);
        snap sn = take(f.r);
        const int idx[3] = { ix, iw, ig };
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < H; j++)
                ck_assert_msg(sn.hist[idx[i] * H + j] == (float)m[i].hist[j], "%s step %d role %d:"
                              " history[%d] = %g, expected %g", dev, s, i, j,
                              (double)sn.hist[idx[i] * H + j], m[i].hist[j]);
            ck_assert_msg(same_bits(sn.scale[idx[i]], m[i].scale), "%s step %d role %d: scale %.9g,"
                          " expected %.9g", dev, s, i, (double)sn.scale[idx[i]],
                          (double)m[i].scale);
            float msc = 0;
            L8_CK(l8_fp8_meta_get(l8_recipe_meta(f.r, idx[i]), &msc, NULL, NULL));
            ck_assert(same_bits(msc, m[i].scale));
        }
        snap_free(&sn);
    }
    loop_free(&f);
}

START_TEST(test_through_linear_max)
{
    loop_run("host", L8_AMAX_MAX_HISTORY, 0.0f);
}
END_TEST

START_TEST(test_through_linear_most_recent_margin)
{
    loop_run("host", L8_AMAX_MOST_RECENT, 1.0f);
}
END_TEST

/* ---- GPU: the same loop on the device; scales and histories must be the
 * model's bits exactly (the casts' amax and the update are exact). ---- */

START_TEST(test_gpu_through_linear)
{
    loop_run("cuda:0", L8_AMAX_MAX_HISTORY, 0.0f);
    loop_run("cuda:0", L8_AMAX_MOST_RECENT, 2.0f);
}
END_TEST

START_TEST(test_gpu_gather_scatter_many)
{
    /* 300 roles (two CTAs of the gather/scatter kernels), amaxes set by hand */
    l8_ctx *ctx = mk_ctx("cuda:0");
    l8_recipe *r = mk_recipe(ctx, 4, 0.0f, L8_AMAX_MAX_HISTORY, L8_FP8_HYBRID);
    const int n = 300;
    l8_fp8_meta **m = calloc((size_t)n, sizeof *m);
    for (int i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "r%d", i);
        L8_CK(l8_recipe_register(r, nm, (l8_fp8_role)(i % 3), NULL, &m[i]));
        L8_CK(l8_fp8_meta_set(m[i], 1, 1, (float)(i % 17) + 0.5f));
    }
    L8_CK(l8_recipe_update(r, NULL));
    snap s = take(r);
    for (int i = 0; i < n; i++) {
        float a = (float)(i % 17) + 0.5f, fmax = i % 3 == 2 ? 57344.0f : 448.0f;
        ck_assert(s.hist[i * 4] == a);
        ck_assert(same_bits(s.scale[i], want_scale(fmax, a, 0)));
        float sc = 0, am = -1;
        L8_CK(l8_fp8_meta_get(m[i], &sc, NULL, &am));
        ck_assert(same_bits(sc, s.scale[i]) && am == 0.0f);
    }
    snap_free(&s);
    free(m);
    l8_recipe_destroy(r);
    done_ctx(ctx);
}
END_TEST

Suite *l8_recipe_suite(void)
{
    Suite *s = suite_create("recipe");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_register_and_grow);
    tcase_add_test(tc, test_update_math);
    tcase_add_test(tc, test_update_leaves_scale_inv);
    tcase_add_test(tc, test_reduce_hook);
    tcase_add_test(tc, test_state_views_and_push);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_through_linear_max);
    tcase_add_test(tc, test_through_linear_most_recent_margin);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 300);
    tcase_add_test(tg, test_gpu_through_linear);
    tcase_add_test(tg, test_gpu_gather_scatter_many);
    tcase_add_test(tg, test_gpu_reduce_hook);
    suite_add_tcase(s, tg);
    return s;
}
