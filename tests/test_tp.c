/* test_tp.c - the tensor- and sequence-parallel Linear against the layer on
 * one rank (seeds/004's second script, in C, for both parallel modes).
 *
 * A reference layer on one host context sees the whole X [T, K], W [N, K],
 * b [N] and dY [T, N]; tp ranks (threads joined by the THREADS transport)
 * each hold their shard of W (column: rows of W; row: columns of W) and of
 * the activations (with sequence parallelism: rows of X or Y). Two steps:
 * forward + backward, the recipe update (amaxes MAX-reduced over the TP
 * group by l8_comm_reduce_amax), begin_step, forward + backward again; the
 * second step's outputs are compared:
 *   - bitwise where a rank computes exactly the reference's products from
 *     the same bytes (column: y and the weight gradient - with or without
 *     sequence parallelism, the wgrad seeds/004 found scrambled; row: dx and
 *     the weight gradient; the bias gradient everywhere);
 *   - within bf16 rounding where the TP layer adds per-rank partial sums
 *     rounded to bf16 (column: dx; row: y).
 * The first step's scales are the initial ones; the second step's come from
 * amaxes that with sequence parallelism each rank saw only a part of: the
 * comparison checks the reduction made them the reference's. FP8 with
 * sequence parallelism runs once more with X cast by the test with a meta of
 * its own (scale 4 at both steps, l8_linear_forward_fp8): the gathered rows
 * must keep that meta's scale_inv. A column-parallel layer with the GELU in
 * its GEMM (l8_linear_forward_gelu) is compared the same way, its h too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/comm.h"
#include "runtime/fp8.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

enum { T = 64, K = 64, N = 64 };

typedef struct tp_case {
    l8_linear_mode mode;
    l8_linear_parallel par;
    int sp;
    uint64_t salt;
    int own;                      /* FP8: X cast by the test with a fixed-scale meta of its
                                     own (l8_linear_forward_fp8), not by the layer */
    int gelu;                     /* column-parallel: l8_linear_forward_gelu, h bf16 (1) or
                                     E4M3 with a meta of the test's (2, FP8) */
    int rows;                     /* the token count, <= T (0: T) */
} tp_case;

static int64_t rows_of(const tp_case *k) { return k->rows ? k->rows : T; }

/* The outputs of one layer (per rank: its shard), f32. */
typedef struct result { float y[T * N], dx[T * K], gw[N * K], gb[N], h[T * N]; int ny, ndx, ngw; } result;

static float gen(uint64_t salt, int what, size_t i)
{
    l8_rng g;
    l8_rng_init(&g, salt * 7919u + (uint64_t)what * 104729u + i * 1299709u);
    l8_rng_next(&g);
    return l8_rng_float(&g, -1.0f, 1.0f) * (what == 0 ? 2.0f : what == 3 ? 0.5f : 1.0f);
}
/* what: 0 X [T, K], 1 W [N, K], 2 b [N], 3 dY [T, N] (step 1), 4 dY (step 2), 5 X step 2 */

static l8_status mk(l8_ctx *ctx, l8_dtype dt, int64_t r, int64_t c, l8_tensor **t, void **p)
{
    int64_t shape[2] = { r, c };
    L8_CHECK(l8_tensor_empty(ctx, dt, c < 0 ? 1 : 2, shape, t));
    return l8_tensor_data(*t, p);
}

/* This rank's view of the full problem: which rows/cols of each tensor. */
typedef struct shard { int64_t n0, n1, k0, k1, tx0, tx1, ty0, ty1; } shard;

static shard shard_of(const tp_case *k, int rank, int tp)
{
    const int64_t t = rows_of(k);
    shard s = { 0, N, 0, K, 0, t, 0, t };
    if (k->par == L8_PARALLEL_COLUMN) {
        s.n0 = N / tp * rank, s.n1 = s.n0 + N / tp;
        if (k->sp) s.tx0 = t / tp * rank, s.tx1 = s.tx0 + t / tp;
    } else if (k->par == L8_PARALLEL_ROW) {
        s.k0 = K / tp * rank, s.k1 = s.k0 + K / tp;
        if (k->sp) s.ty0 = t / tp * rank, s.ty1 = s.ty0 + t / tp;
    }
    return s;
}

/* Run the two steps on ctx with this rank's shard (tp NULL: the reference).
 * Host buffers are staged through copies, so any backend works. */
static l8_status run_layer(const tp_case *k, l8_ctx *ctx, l8_comm *tp, result *out)
{
    int rank = tp ? l8_comm_rank(tp) : 0, size = tp ? l8_comm_size(tp) : 1;
    shard s = shard_of(k, rank, size);
    int64_t nn = s.n1 - s.n0, kk = s.k1 - s.k0, tx = s.tx1 - s.tx0, ty = s.ty1 - s.ty0;
    l8_gemm_handle *h = NULL;
    l8_recipe *rec = NULL;
    l8_linear *lin = NULL;
    l8_tensor *w = NULL, *gw = NULL, *b = NULL, *gb = NULL, *x = NULL, *y = NULL, *dy = NULL, *dx = NULL;
    l8_tensor *x8 = NULL, *x8t = NULL, *hg = NULL, *hf = NULL;
    l8_fp8_meta *own = NULL, *hm = NULL;
    float *hw = calloc((size_t)(N * K), sizeof *hw), *hb = calloc(N, sizeof *hb);
    uint16_t *hx = calloc((size_t)(T * K), 2), *hy = calloc((size_t)(T * N), 2);
    l8_stream *st_ = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    gc.autotune = 0;
    l8_status st = hw && hb && hx && hy ? l8_gemm_handle_create(ctx, &gc, &h)
                                        : L8_FAIL(L8_ERR_OOM, "test: out of memory");
    if (st == L8_OK) st = l8_recipe_create(ctx, NULL, &rec);
    if (st == L8_OK && tp) st = l8_recipe_set_reduce(rec, l8_comm_reduce_amax, tp);
    void *unused;
    if (st == L8_OK) st = mk(ctx, L8_F32, nn, kk, &w, &unused);
    if (st == L8_OK) st = mk(ctx, L8_F32, nn, kk, &gw, &unused);
    if (st == L8_OK) st = mk(ctx, L8_F32, nn, -1, &b, &unused);
    if (st == L8_OK) st = mk(ctx, L8_F32, nn, -1, &gb, &unused);
    if (st == L8_OK) st = mk(ctx, L8_BF16, tx, kk, &x, &unused);
    if (st == L8_OK) st = mk(ctx, L8_BF16, ty, nn, &y, &unused);
    if (st == L8_OK) st = mk(ctx, L8_BF16, ty, nn, &dy, &unused);
    if (st == L8_OK) st = mk(ctx, L8_BF16, tx, kk, &dx, &unused);
    if (st == L8_OK && k->own) {  /* scale 4 at every step, whatever the recipe's */
        st = l8_fp8_meta_create(ctx, &own);
        if (st == L8_OK) st = l8_fp8_meta_set(own, 4.0f, 0.25f, 0.0f);
        if (st == L8_OK) st = mk(ctx, L8_E4M3, tx, kk, &x8, &unused);
        /* x8t as the layer's wgrad reads it: row-padded for a token count
         * off 16, but for column SP's this rank's rows (kept dense) - and
         * none where column SP at a token count off 16 keeps x8's rows */
        const int colsp = tp && k->par == L8_PARALLEL_COLUMN && k->sp;
        const int padded = tx % 16 && !colsp;
        l8_tensor *x8tw = NULL;
        const int64_t ldt = padded ? (tx + 15) / 16 * 16 : tx;
        if (st == L8_OK) st = l8_tensor_set_fp8_meta(x8, own);
        if (st == L8_OK && !(colsp && rows_of(k) % 16)) {
            st = mk(ctx, L8_E4M3, kk, ldt, &x8tw, &unused);
            if (st == L8_OK) st = l8_tensor_narrow(x8tw, 1, 0, tx, &x8t);
            l8_tensor_destroy(x8tw);
            if (st == L8_OK) st = l8_tensor_set_fp8_meta(x8t, own);
        }
    }
    if (st == L8_OK && k->gelu) {  /* h: this rank's columns of gelu(y), all ty rows */
        st = mk(ctx, k->gelu == 2 ? L8_E4M3 : L8_BF16, ty, nn, &hg, &unused);
        if (st == L8_OK) st = mk(ctx, L8_F32, ty, nn, &hf, &unused);
        if (st == L8_OK && k->gelu == 2) st = l8_fp8_meta_create(ctx, &hm);
        if (st == L8_OK && k->gelu == 2) st = l8_fp8_meta_set(hm, 2.0f, 0.5f, 0.0f);
        if (st == L8_OK && k->gelu == 2) st = l8_tensor_set_fp8_meta(hg, hm);
    }
    if (st != L8_OK) goto out;
    for (int64_t n = 0; n < nn; n++) {
        for (int64_t c = 0; c < kk; c++) hw[n * kk + c] = gen(k->salt, 1, (size_t)((s.n0 + n) * K + s.k0 + c));
        hb[n] = gen(k->salt, 2, (size_t)(s.n0 + n));
    }
    st = l8_tensor_copy_from_host(w, hw, sizeof *hw * (size_t)(nn * kk), st_);
    if (st == L8_OK) st = l8_tensor_copy_from_host(b, hb, sizeof *hb * (size_t)nn, st_);
    l8_linear_config c = L8_LINEAR_CONFIG_INIT;
    c.name = "tp";
    c.mode = k->mode;
    c.gemm = h;
    c.recipe = rec;
    c.weight = w;
    c.weight_grad = gw;
    c.bias = b;
    c.bias_grad = gb;
    c.tp_comm = tp;
    c.parallel = tp ? k->par : L8_PARALLEL_NONE;
    c.sequence_parallel = tp ? k->sp : 0;
    if (st == L8_OK) st = l8_linear_create(ctx, &c, &lin);
    for (int step = 0; step < 2 && st == L8_OK; step++) {
        for (int64_t t = 0; t < tx; t++)
            for (int64_t q = 0; q < kk; q++)
                hx[t * kk + q] = l8_bf16_from_f32(gen(k->salt, step ? 5 : 0, (size_t)((s.tx0 + t) * K + s.k0 + q)));
        for (int64_t t = 0; t < ty; t++)
            for (int64_t n = 0; n < nn; n++)
                hy[t * nn + n] = l8_bf16_from_f32(gen(k->salt, step ? 4 : 3, (size_t)((s.ty0 + t) * N + s.n0 + n)));
        st = l8_tensor_copy_from_host(x, hx, 2 * (size_t)(tx * kk), st_);
        if (st == L8_OK) st = l8_tensor_copy_from_host(dy, hy, 2 * (size_t)(ty * nn), st_);
        l8_linear_ctx *sv = NULL;
        if (st == L8_OK && k->own) {
            st = x8t ? l8_fp8_cast_transpose(x, x8, x8t, 0, NULL)
                     : l8_fp8_cast(x, x8, 0, NULL);
            if (st == L8_OK) st = l8_linear_forward_fp8(lin, x8, x8t, y, &sv, NULL);
        } else if (st == L8_OK && k->gelu) {
            st = l8_linear_forward_gelu(lin, L8_ACT_NONE, x, NULL, NULL, y, hg, &sv, NULL, NULL);
        } else if (st == L8_OK)
            st = l8_linear_forward(lin, x, y, &sv, NULL);
        if (st == L8_OK) st = l8_linear_backward(lin, &sv, dy, dx, NULL);
        l8_linear_ctx_destroy(sv);
        if (st == L8_OK && step == 0) st = l8_recipe_update(rec, NULL);
        if (st == L8_OK && step == 0) st = l8_linear_begin_step(lin);
    }
    if (st == L8_OK) st = l8_tensor_copy_to_host(y, hy, 2 * (size_t)(ty * nn), st_);
    if (st == L8_OK) st = l8_tensor_copy_to_host(dx, hx, 2 * (size_t)(tx * kk), st_);
    if (st == L8_OK) st = l8_tensor_copy_to_host(gw, out->gw, sizeof(float) * (size_t)(nn * kk), st_);
    if (st == L8_OK) st = l8_tensor_copy_to_host(gb, out->gb, sizeof(float) * (size_t)nn, st_);
    if (st == L8_OK && k->gelu == 2) st = l8_fp8_dequantize(hg, hf, st_);
    else if (st == L8_OK && k->gelu) st = l8_convert(hg, hf, st_);
    if (st == L8_OK && k->gelu)
        st = l8_tensor_copy_to_host(hf, out->h, sizeof(float) * (size_t)(ty * nn), st_);
    if (st == L8_OK) st = l8_stream_synchronize(st_);
    if (st == L8_OK) {
        for (int64_t i = 0; i < ty * nn; i++) out->y[i] = l8_bf16_to_f32(hy[i]);
        for (int64_t i = 0; i < tx * kk; i++) out->dx[i] = l8_bf16_to_f32(hx[i]);
        out->ny = (int)(ty * nn), out->ndx = (int)(tx * kk), out->ngw = (int)(nn * kk);
    }
out:
    l8_linear_destroy(lin);
    l8_tensor_destroy(w), l8_tensor_destroy(gw), l8_tensor_destroy(b), l8_tensor_destroy(gb);
    l8_tensor_destroy(x), l8_tensor_destroy(y), l8_tensor_destroy(dy), l8_tensor_destroy(dx);
    l8_tensor_destroy(x8), l8_tensor_destroy(x8t), l8_tensor_destroy(hg), l8_tensor_destroy(hf);
    l8_fp8_meta_release(own);
    l8_fp8_meta_release(hm);
    l8_recipe_destroy(rec);
    l8_gemm_handle_destroy(h);
    free(hw), free(hb), free(hx), free(hy);
    return st;
}

static l8_status tp_rank(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    result *r = calloc(1, sizeof *r);
    if (!r) return L8_FAIL(L8_ERR_OOM, "test: out of memory");
    l8_status st = run_layer(j->arg, ctx, c, r);
    if (st == L8_OK) st = l8t_keep(j, r, sizeof *r);
    free(r);
    return st;
}

/* got[i] vs the reference's element at (row, col) of a [rows, cols] tensor
 * restricted to [r0, r1) x [c0, c1). exact: bitwise; else within bf16
 * rounding of partial sums. */
static void compare(const char *what, const tp_case *k, int tp, int rank, const float *got,
                    const float *ref, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                    int exact)
{
    double scale = 0;
    for (int64_t i = 0; i < (r1 - r0) * (c1 - c0); i++) scale += fabs(got[i]);
    scale = scale / (double)((r1 - r0) * (c1 - c0)) + 1e-3;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            float g = got[(r - r0) * (c1 - c0) + (c - c0)], e = ref[r * cols + c];
            int ok = exact ? !memcmp(&g, &e, sizeof g) : fabs(g - e) <= 0.02 * (fabs(e) + scale);
            ck_assert_msg(ok, "%s %s %s%s tp %d rank %d: %s[%lld, %lld] = %.8g, single rank %.8g "
                          "(seed %llu)", k->mode == L8_LINEAR_FP8 ? "fp8" : "bf16",
                          k->par == L8_PARALLEL_COLUMN ? "column" : "row", k->sp ? "SP" : "no SP",
                          exact ? "" : " (tolerance)", tp, rank, what, (long long)r, (long long)c,
                          (double)g, (double)e, (unsigned long long)l8_test_seed());
        }
}

static void check_tp(const tp_case *k, int tp)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    result *ref = l8t_xmalloc(sizeof *ref);
    L8_CK(run_layer(k, ctx, NULL, ref));
    l8t_job jobs[4];
    l8t_world_run(tp, L8_COMM_THREADS, tp_rank, k, jobs, 0);
    l8t_world_ok(jobs, tp);
    int col = k->par == L8_PARALLEL_COLUMN;
    double hmax = 0;              /* h was written (not two zero buffers compared) */
    for (int i = 0; k->gelu && i < rows_of(k) * N; i++) hmax = fmax(hmax, fabs(ref->h[i]));
    ck_assert(!k->gelu || hmax > 0.1);
    for (int r = 0; r < tp; r++) {
        const result *g = (const result *)jobs[r].out;
        shard s = shard_of(k, r, tp);
        compare("y", k, tp, r, g->y, ref->y, N, s.ty0, s.ty1, s.n0, s.n1, col);
        compare("dx", k, tp, r, g->dx, ref->dx, K, s.tx0, s.tx1, s.k0, s.k1, !col);
        compare("weight grad", k, tp, r, g->gw, ref->gw, K, s.n0, s.n1, s.k0, s.k1, 1);
        compare("bias grad", k, tp, r, g->gb, ref->gb, 1, s.n0, s.n1, 0, 1, 1);
        if (k->gelu)              /* the rank's columns of the GELU epilogue's output */
            compare("h", k, tp, r, g->h, ref->h, N, s.ty0, s.ty1, s.n0, s.n1, 1);
    }
    l8t_world_free(jobs, tp);
    free(ref);
    l8t_ctx_finish(ctx);
}

/* Every mode (column, row; with and without SP; FP8 with X cast by the
 * layer or by the test) at tp 1, 2 and 4 (quick: 2 and 4), rows tokens (0:
 * T), against one rank (check_tp). */
static void check_every_mode(int rows)
{
    for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++)
        for (int par = L8_PARALLEL_COLUMN; par <= L8_PARALLEL_ROW; par++)
            for (int sp = 0; sp <= 1; sp++)
                for (int own = 0; own <= (mode == L8_LINEAR_FP8 && sp); own++)
                    for (int tp = 1; tp <= 4; tp *= 2) {
                        if (l8_test_quick() && tp == 1) continue;
                        tp_case k = { (l8_linear_mode)mode, (l8_linear_parallel)par, sp,
                                      l8_test_seed() + (uint64_t)(mode * 8 + par * 2 + sp), own,
                                      0, rows };
                        check_tp(&k, tp);
                    }
}

START_TEST(test_tp_linear) { check_every_mode(0); }
END_TEST

/* A token count off 16 (T = 40: with SP 40, 20 or 10 rows a rank): FP8 pads
 * X8t and dY8t to 48 columns for wgrad, and a column-parallel layer with
 * SP saves this rank's X8 rows, gathers them along T and transposes them
 * into the padded layout in backward (X cast by the layer, or by the test
 * with a meta of its own). The same comparisons as test_tp_linear. */
START_TEST(test_tp_odd_tokens) { check_every_mode(40); }
END_TEST

/* A column-parallel layer that writes the next layer's input in its GEMM
 * (l8_linear_forward_gelu; bf16 h, and in FP8 also E4M3 h with a meta of
 * the test's): y, dx, the gradients and h equal the single rank's as for
 * l8_linear_forward (h bitwise: each rank computes its columns from the
 * same bytes), with and without sequence parallelism. A row-parallel layer
 * is refused (its GELU needs the summed output). */
START_TEST(test_tp_gelu)
{
    for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++)
        for (int gelu = 1; gelu <= (mode == L8_LINEAR_FP8 ? 2 : 1); gelu++)
            for (int sp = 0; sp <= 1; sp++)
                for (int tp = 2; tp <= 4; tp *= 2) {
                    tp_case k = { (l8_linear_mode)mode, L8_PARALLEL_COLUMN, sp,
                                  l8_test_seed() + (uint64_t)(mode * 8 + gelu * 2 + sp), 0, gelu,
                                  0 };
                    check_tp(&k, tp);
                }
}
END_TEST

/* Sequence parallelism with a token count that does not divide by the TP
 * size is refused, naming it; so are mismatched configurations. */
static l8_status bad_rows(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    l8_gemm_handle *h = NULL;
    l8_tensor *w = NULL, *gw = NULL, *x = NULL, *y = NULL;
    l8_linear *lin = NULL;
    void *p;
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    l8_status st = l8_gemm_handle_create(ctx, &gc, &h);
    if (st == L8_OK) st = mk(ctx, L8_F32, 16, 8, &w, &p);
    if (st == L8_OK) st = mk(ctx, L8_F32, 16, 8, &gw, &p);
    if (st == L8_OK) st = mk(ctx, L8_BF16, 5, 8, &x, &p);       /* T = 5 tokens */
    if (st == L8_OK) st = mk(ctx, L8_BF16, 2, 16, &y, &p);
    l8_linear_config cfg = L8_LINEAR_CONFIG_INIT;
    cfg.mode = L8_LINEAR_BF16;
    cfg.gemm = h;
    cfg.weight = w;
    cfg.weight_grad = gw;
    cfg.tp_comm = c;
    cfg.parallel = L8_PARALLEL_ROW;
    cfg.sequence_parallel = 1;
    if (st == L8_OK) st = l8_linear_create(ctx, &cfg, &lin);
    l8_status want = L8_OK;
    if (st == L8_OK) want = l8_linear_forward(lin, x, y, NULL, NULL);
    if (st == L8_OK && want == L8_ERR_INVALID_ARG && strstr(l8_last_error()->message, "divide"))
        st = L8_OK;
    else if (st == L8_OK)
        st = L8_FAIL(L8_ERR_INTERNAL, "T = 5 over 2 ranks was not refused as it should be");
    l8_linear_destroy(lin);
    l8_tensor_destroy(w), l8_tensor_destroy(gw), l8_tensor_destroy(x), l8_tensor_destroy(y);
    l8_gemm_handle_destroy(h);
    return st;
}

START_TEST(test_tp_errors)
{
    l8t_job jobs[2];
    l8t_world_run(2, L8_COMM_THREADS, bad_rows, NULL, jobs, 0);
    l8t_world_ok(jobs, 2);
    l8t_world_free(jobs, 2);
    /* configuration mistakes, one rank */
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_THREADS);
    l8_gemm_handle *h = NULL;
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    L8_CK(l8_gemm_handle_create(ctx, &gc, &h));
    l8_tensor *w, *gw;
    void *p;
    L8_CK(mk(ctx, L8_F32, 16, 16, &w, &p));
    L8_CK(mk(ctx, L8_F32, 16, 16, &gw, &p));
    l8_linear_config cfg = L8_LINEAR_CONFIG_INIT;
    cfg.mode = L8_LINEAR_BF16;
    cfg.gemm = h;
    cfg.weight = w;
    cfg.weight_grad = gw;
    l8_linear *lin = NULL;
    cfg.tp_comm = c;                              /* a group without a mode */
    L8_CK_ST(l8_linear_create(ctx, &cfg, &lin), L8_ERR_INVALID_ARG);
    cfg.tp_comm = NULL, cfg.parallel = L8_PARALLEL_COLUMN;   /* a mode without a group */
    L8_CK_ST(l8_linear_create(ctx, &cfg, &lin), L8_ERR_INVALID_ARG);
    cfg.parallel = L8_PARALLEL_NONE, cfg.sequence_parallel = 1;
    L8_CK_ST(l8_linear_create(ctx, &cfg, &lin), L8_ERR_INVALID_ARG);
    cfg.tp_comm = c, cfg.parallel = (l8_linear_parallel)5;
    L8_CK_ST(l8_linear_create(ctx, &cfg, &lin), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(lin);
    /* the GELU in a row-parallel layer's GEMM: refused (it needs the summed output) */
    l8_tensor *b, *gb, *x, *y, *hh;
    L8_CK(mk(ctx, L8_F32, 16, -1, &b, &p));
    L8_CK(mk(ctx, L8_F32, 16, -1, &gb, &p));
    L8_CK(mk(ctx, L8_BF16, 16, 16, &x, &p));
    L8_CK(mk(ctx, L8_BF16, 16, 16, &y, &p));
    L8_CK(mk(ctx, L8_BF16, 16, 16, &hh, &p));
    cfg.parallel = L8_PARALLEL_ROW, cfg.sequence_parallel = 0, cfg.bias = b, cfg.bias_grad = gb;
    L8_CK(l8_linear_create(ctx, &cfg, &lin));
    L8_CK_ST(l8_linear_forward_gelu(lin, L8_ACT_NONE, x, NULL, NULL, y, hh, NULL, NULL, NULL),
             L8_ERR_UNSUPPORTED);
    l8_linear_destroy(lin);
    lin = NULL;
    /* its communicator destroyed before the layer: told, and every pass then
     * fails with an error instead of using the freed communicator */
    l8_comm *c2 = l8t_comm_one(ctx, L8_COMM_THREADS);
    l8_tensor *in[] = { w, b, x };   /* what the forward reads, defined (host memory) */
    for (int i = 0; i < 3; i++) {
        L8_CK(l8_tensor_data(in[i], &p));
        memset(p, 0, l8_tensor_nbytes(in[i]));
    }
    cfg.tp_comm = c2;
    L8_CK(l8_linear_create(ctx, &cfg, &lin));
    l8_linear_ctx *saved = NULL;
    L8_CK(l8_linear_forward(lin, x, y, &saved, NULL));
    l8_comm_destroy(c2);
    L8_CK_ST(l8_linear_backward(lin, &saved, y, NULL, NULL), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "tensor-parallel communicator was destroyed"),
                  "%s", l8_last_error_string());
    L8_CK_ST(l8_linear_forward(lin, x, y, NULL, NULL), L8_ERR_STATE);
    l8_linear_ctx_destroy(saved);
    l8_linear_destroy(lin);
    l8_tensor_destroy(b), l8_tensor_destroy(gb), l8_tensor_destroy(x), l8_tensor_destroy(y);
    l8_tensor_destroy(hh);
    l8_tensor_destroy(w), l8_tensor_destroy(gw);
    l8_gemm_handle_destroy(h);
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

/* On the GPU at TP = 1 (one H200 holds one NCCL rank): every parallel mode
 * through NCCL equals the plain layer bitwise (the collectives are copies
 * or nothing, and the dataflow around them must not change a bit), at 64
 * tokens and at 40 (column SP then saves X8's rows and transposes them in
 * backward). */
START_TEST(test_gpu_tp_world1)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_NCCL);
    result *ref = l8t_xmalloc(sizeof *ref), *got = l8t_xmalloc(sizeof *got);
    static const int counts[] = { T, 40 };
    for (int i = 0; i < 2 * 2 * 2 * 2; i++) {     /* count, mode, par, sp */
        int rows = counts[i >> 3], mode = L8_LINEAR_FP8 + ((i >> 2) & 1);
        int par = L8_PARALLEL_COLUMN + ((i >> 1) & 1), sp = i & 1;
        tp_case k = { (l8_linear_mode)mode, (l8_linear_parallel)par, sp,
                      l8_test_seed() + (uint64_t)(mode * 8 + par * 2 + sp), 0, 0, rows };
        L8_CK(run_layer(&k, ctx, NULL, ref));
        L8_CK(run_layer(&k, ctx, c, got));
        compare("y", &k, 1, 0, got->y, ref->y, N, 0, rows, 0, N, 1);
        compare("dx", &k, 1, 0, got->dx, ref->dx, K, 0, rows, 0, K, 1);
        compare("weight grad", &k, 1, 0, got->gw, ref->gw, K, 0, N, 0, K, 1);
        compare("bias grad", &k, 1, 0, got->gb, ref->gb, 1, 0, N, 0, 1, 1);
    }
    L8_CK(l8_comm_check(c));
    free(ref);
    free(got);
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

Suite *l8_tp_suite(void)
{
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_tp_linear);
    tcase_add_test(tc, test_tp_gelu);
    tcase_add_test(tc, test_tp_odd_tokens);
    tcase_add_test(tc, test_tp_errors);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 600);
    tcase_add_test(tg, test_gpu_tp_world1);
    suite_add_tcase(s, tg);
    return s;
}
