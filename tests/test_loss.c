/* test_loss.c - softmax cross-entropy against an fp64 reference (host), and
 * the PTX kernel against the host path (gpu); the padded form
 * (l8_softmax_xent_at) against the plain one on the real rows, bit for bit,
 * on both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "ops/loss.h"
#include "runtime/fp8.h"

typedef struct case_t {
    l8_tensor *x, *lab, *dx, *loss, *hit;
} case_t;

static l8_tensor *mk(l8_ctx *ctx, l8_dtype dt, int nd, int64_t a, int64_t b)
{
    int64_t sh[2] = { a, b };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, nd, sh, &t));
    return t;
}

static void destroy(case_t *c)
{
    l8_tensor_destroy(c->x);
    l8_tensor_destroy(c->lab);
    l8_tensor_destroy(c->dx);
    l8_tensor_destroy(c->loss);
    l8_tensor_destroy(c->hit);
}

/* Random logits (bf16-representable so both dtypes see the same values) and labels. */
static void fill(l8_rng *r, float *x, int32_t *y, int64_t T, int64_t C, int classes)
{
    for (int64_t i = 0; i < T * C; i++)
        x[i] = l8_bf16_to_f32(l8_bf16_from_f32(l8_rng_float(r, -6.0f, 6.0f)));
    for (int64_t t = 0; t < T; t++) y[t] = (int32_t)l8_rng_below(r, (uint64_t)classes);
}

static void run(l8_ctx *ctx, l8_dtype dt, const float *x, const int32_t *y, int64_t T, int64_t C,
                int classes, float gs, float *dx, float *loss, int32_t *hit)
{
    case_t c = {0};
    size_t es = l8_dtype_size(dt), n = (size_t)(T * C);
    void *buf = malloc(n * es);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n; i++) l8_host_store_f32(buf, dt, i, x[i]);
    c.x = mk(ctx, dt, 2, T, C);
    c.dx = mk(ctx, dt, 2, T, C);
    c.lab = mk(ctx, L8_I32, 1, T, 0);
    c.loss = mk(ctx, L8_F32, 1, T, 0);
    c.hit = mk(ctx, L8_I32, 1, T, 0);
    L8_CK(l8_tensor_copy_from_host(c.x, buf, n * es, NULL));
    L8_CK(l8_tensor_copy_from_host(c.lab, y, (size_t)T * 4, NULL));
    memset(buf, 0xA5, n * es);                    /* poison the outputs */
    L8_CK(l8_tensor_copy_from_host(c.dx, buf, n * es, NULL));
    L8_CK(l8_softmax_xent(c.x, c.lab, classes, gs, c.dx, c.loss, c.hit, NULL));
    L8_CK(l8_tensor_copy_to_host(c.dx, buf, n * es, NULL));
    L8_CK(l8_tensor_copy_to_host(c.loss, loss, (size_t)T * 4, NULL));
    L8_CK(l8_tensor_copy_to_host(c.hit, hit, (size_t)T * 4, NULL));
    L8_CK(l8_ctx_synchronize(ctx));
    for (size_t i = 0; i < n; i++) dx[i] = l8_host_load_f32(buf, dt, i);
    free(buf);
    destroy(&c);
}

static l8_ctx *ctx_on(const char *dev) { return l8t_ctx(dev, NULL, 0); }

START_TEST(test_xent_vs_fp64)
{
    l8_ctx *ctx = ctx_on("host");
    l8_rng r;
    l8_rng_init(&r, 301);
    const int64_t T = 37, C = 16;
    const int classes = 10;
    float x[37 * 16], dx[37 * 16], loss[37];
    int32_t y[37], hit[37];
    fill(&r, x, y, T, C, classes);
    x[5 * C + 3] = x[5 * C + 7] = 9.0f;             /* a tie: argmax must be the first */
    y[5] = 7;
    for (int dti = 0; dti < 2; dti++) {
        l8_dtype dt = dti ? L8_BF16 : L8_F32;
        run(ctx, dt, x, y, T, C, classes, 0.25f, dx, loss, hit);
        double tol = dt == L8_F32 ? 1e-5 : 8e-3;
        for (int64_t t = 0; t < T; t++) {
            double m = -INFINITY, s = 0;
            int arg = 0;
            for (int c = 0; c < classes; c++) if (x[t * C + c] > m) { m = x[t * C + c]; arg = c; }
            for (int c = 0; c < classes; c++) s += exp((double)x[t * C + c] - m);
            double lse = m + log(s);
            ck_assert_msg(fabs(loss[t] - (lse - x[t * C + y[t]])) < 1e-4, "row %lld loss", (long long)t);
            ck_assert_int_eq(hit[t], arg == y[t]);
            for (int64_t c = 0; c < C; c++) {
                double g = c < classes ? 0.25 * (exp(x[t * C + c] - lse) - (c == y[t])) : 0.0;
                ck_assert_msg(fabs(dx[t * C + c] - g) <= tol * (fabs(g) + 0.01),
                              "%s dx[%lld,%lld] = %g, want %g", l8_dtype_name(dt), (long long)t,
                              (long long)c, dx[t * C + c], g);
            }
        }
        ck_assert_int_eq(hit[5], 0);                  /* the first of the tied maxima is 3 */
    }
    l8_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_xent_errors)
{
    l8_ctx *ctx = ctx_on("host");
    l8_tensor *x = mk(ctx, L8_F32, 2, 4, 16), *lab = mk(ctx, L8_U8, 1, 4, 0),
              *loss = mk(ctx, L8_F32, 1, 4, 0), *hit = mk(ctx, L8_I32, 1, 4, 0),
              *bad = mk(ctx, L8_F16, 2, 4, 16), *shortl = mk(ctx, L8_F32, 1, 3, 0);
    uint8_t y[4] = { 1, 2, 10, 0 };
    float z[64] = {0};
    L8_CK(l8_tensor_copy_from_host(x, z, sizeof z, NULL));
    L8_CK(l8_tensor_copy_from_host(lab, y, 4, NULL));
    L8_CK_ST(l8_softmax_xent(x, lab, 10, 1.0f, NULL, loss, hit, NULL), L8_ERR_INVALID_ARG);   /* label 10 */
    L8_CK_ST(l8_softmax_xent(x, lab, 17, 1.0f, NULL, loss, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent(x, lab, 0, 1.0f, NULL, loss, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent(bad, lab, 11, 1.0f, NULL, loss, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent(x, lab, 11, 1.0f, NULL, shortl, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent(x, lab, 11, 1.0f, bad, loss, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent(x, NULL, 11, 1.0f, NULL, loss, hit, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_softmax_xent(x, lab, 11, 1.0f, NULL, loss, hit, NULL));
    float l[4];
    L8_CK(l8_tensor_copy_to_host(loss, l, sizeof l, NULL));
    ck_assert(fabsf(l[0] - logf(11.0f)) < 1e-5f);    /* uniform logits */
    l8_tensor *all[] = { x, lab, loss, hit, bad, shortl };
    for (size_t i = 0; i < 6; i++) l8_tensor_destroy(all[i]);
    l8_ctx_destroy(ctx);
}
END_TEST

/* l8_softmax_xent_at on ctx: logits x [T, C] (dt), labels y, step cursor k of
 * a pass over `total` rows in batches of `stride`. Its outputs against
 * l8_softmax_xent of the first `valid` rows with grad_scale 1.0f / valid,
 * bit for bit (the same code on either backend), and zeros in the padding
 * rows, whose labels (out of range here) must not be read. Returns valid. */
static int64_t check_at(l8_ctx *ctx, l8_dtype dt, const float *x, const int32_t *y, int64_t T,
                        int64_t C, int classes, int32_t k, int64_t stride, int64_t total)
{
    int64_t valid = total - (int64_t)k * stride;
    valid = valid < 0 ? 0 : valid > T ? T : valid;
    size_t es = l8_dtype_size(dt), n = (size_t)(T * C);
    unsigned char *buf = l8t_xmalloc(n * es), *ref = l8t_xmalloc(n * es);
    int32_t *yy = l8t_xmalloc((size_t)T * 4), *hit = l8t_xmalloc((size_t)T * 4),
            *rhit = l8t_xmalloc((size_t)T * 4);
    float *loss = l8t_xmalloc((size_t)T * 4), *rloss = l8t_xmalloc((size_t)T * 4);
    for (int64_t t = 0; t < T; t++) yy[t] = t < valid ? y[t] : classes + 5;
    case_t c = {0};
    l8_tensor *cur = mk(ctx, L8_I32, 1, 1, 0);
    c.x = mk(ctx, dt, 2, T, C);
    c.dx = mk(ctx, dt, 2, T, C);
    c.lab = mk(ctx, L8_I32, 1, T, 0);
    c.loss = mk(ctx, L8_F32, 1, T, 0);
    c.hit = mk(ctx, L8_I32, 1, T, 0);
    for (size_t i = 0; i < n; i++) l8_host_store_f32(buf, dt, i, x[i]);
    L8_CK(l8_tensor_copy_from_host(c.x, buf, n * es, NULL));
    L8_CK(l8_tensor_copy_from_host(c.lab, yy, (size_t)T * 4, NULL));
    L8_CK(l8_tensor_copy_from_host(cur, &k, 4, NULL));
    memset(buf, 0xA5, n * es);                    /* poison the outputs */
    L8_CK(l8_tensor_copy_from_host(c.dx, buf, n * es, NULL));
    L8_CK(l8_tensor_copy_from_host(c.loss, buf, (size_t)T * 4, NULL));
    L8_CK(l8_tensor_copy_from_host(c.hit, buf, (size_t)T * 4, NULL));
    L8_CK(l8_softmax_xent_at(c.x, c.lab, classes, 1.0f, cur, stride, total, c.dx, c.loss, c.hit,
                             NULL));
    L8_CK(l8_tensor_copy_to_host(c.dx, buf, n * es, NULL));
    L8_CK(l8_tensor_copy_to_host(c.loss, loss, (size_t)T * 4, NULL));
    L8_CK(l8_tensor_copy_to_host(c.hit, hit, (size_t)T * 4, NULL));
    if (valid) {                  /* the reference: the real rows alone */
        l8_tensor *rx = NULL, *rl = NULL, *rd = NULL, *rlo = NULL, *rh = NULL;
        L8_CK(l8_tensor_narrow(c.x, 0, 0, valid, &rx));
        L8_CK(l8_tensor_narrow(c.lab, 0, 0, valid, &rl));
        L8_CK(l8_tensor_narrow(c.dx, 0, 0, valid, &rd));
        L8_CK(l8_tensor_narrow(c.loss, 0, 0, valid, &rlo));
        L8_CK(l8_tensor_narrow(c.hit, 0, 0, valid, &rh));
        L8_CK(l8_softmax_xent(rx, rl, classes, 1.0f / (float)valid, rd, rlo, rh, NULL));
        L8_CK(l8_tensor_copy_to_host(rd, ref, (size_t)valid * C * es, NULL));
        L8_CK(l8_tensor_copy_to_host(rlo, rloss, (size_t)valid * 4, NULL));
        L8_CK(l8_tensor_copy_to_host(rh, rhit, (size_t)valid * 4, NULL));
        l8_tensor *all[] = { rx, rl, rd, rlo, rh };
        for (size_t i = 0; i < 5; i++) l8_tensor_destroy(all[i]);
    }
    L8_CK(l8_ctx_synchronize(ctx));
    ck_assert_msg(!memcmp(buf, ref, (size_t)valid * C * es), "%s k %d: real rows' dx differ",
                  l8_dtype_name(dt), k);
    ck_assert_msg(!memcmp(loss, rloss, (size_t)valid * 4), "k %d: real rows' loss differ", k);
    ck_assert_msg(!memcmp(hit, rhit, (size_t)valid * 4), "k %d: real rows' hit differ", k);
    for (int64_t t = valid; t < T; t++) {
        ck_assert_msg(loss[t] == 0.0f && !signbit(loss[t]) && hit[t] == 0,
                      "k %d: padding row %lld: loss %g hit %d", k, (long long)t, loss[t], hit[t]);
        for (int64_t i = 0; i < C; i++)
            ck_assert_msg(l8_host_load_f32(buf, dt, (size_t)(t * C + i)) == 0.0f &&
                          !signbit(l8_host_load_f32(buf, dt, (size_t)(t * C + i))),
                          "%s k %d: padding dx[%lld,%lld] not +0", l8_dtype_name(dt), k,
                          (long long)t, (long long)i);
    }
    destroy(&c);
    l8_tensor_destroy(cur);
    free(buf); free(ref); free(yy); free(hit); free(rhit); free(loss); free(rloss);
    return valid;
}

/* A pass of 133 rows in batches of 40: steps 0-2 whole, step 3 holds 13
 * real rows, step 4 none; a negative cursor (wrapped) counts as whole. */
static void at_cases(const char *dev)
{
    l8_ctx *ctx = ctx_on(dev);
    l8_rng r;
    l8_rng_init(&r, 303);
    const int64_t T = 40, C = 16, total = 133;
    const int classes = 10;
    float x[40 * 16];
    int32_t y[40];
    fill(&r, x, y, T, C, classes);
    const struct { int32_t k; int64_t valid; } ks[] = { { 3, 13 }, { 0, 40 }, { 2, 40 },
                                                      { 4, 0 }, { -1, 40 } };
    for (int dti = 0; dti < 2; dti++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
            ck_assert_int_eq(check_at(ctx, dti ? L8_BF16 : L8_F32, x, y, T, C, classes, ks[i].k, 40,
                                      total), ks[i].valid);
    /* one row short of a whole batch, and a stride other than T */
    ck_assert_int_eq(check_at(ctx, L8_BF16, x, y, T, C, classes, 1, 39, 78), 39);
    ck_assert_int_eq(check_at(ctx, L8_F32, x, y, T, C, classes, 5, 7, 36), 1);
    l8_ctx_destroy(ctx);
}

START_TEST(test_xent_at) { at_cases("host"); }
END_TEST

START_TEST(test_gpu_xent_at) { at_cases("cuda:0"); }
END_TEST

START_TEST(test_xent_at_errors)
{
    l8_ctx *ctx = ctx_on("host");
    l8_tensor *x = mk(ctx, L8_F32, 2, 4, 16), *lab = mk(ctx, L8_I32, 1, 4, 0),
              *loss = mk(ctx, L8_F32, 1, 4, 0), *hit = mk(ctx, L8_I32, 1, 4, 0),
              *cur = mk(ctx, L8_I32, 1, 1, 0), *cur2 = mk(ctx, L8_I32, 1, 2, 0),
              *curf = mk(ctx, L8_F32, 1, 1, 0);
    int32_t y[4] = { 1, 2, 10, 0 }, k = 0;           /* row 2's label is out of range */
    float z[64] = {0};
    L8_CK(l8_tensor_copy_from_host(x, z, sizeof z, NULL));
    L8_CK(l8_tensor_copy_from_host(lab, y, sizeof y, NULL));
    L8_CK(l8_tensor_copy_from_host(cur, &k, 4, NULL));
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, NULL, 4, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "cursor is NULL"));
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur2, 4, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent_at(x, cur, 10, 1.0f, cur, 4, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);                    /* labels of one row: named by this call */
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "l8_softmax_xent_at: labels"));
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, curf, 4, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, 0, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "stride 0"));
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, INT64_C(1) << 31, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, 4, -1, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "total -1"));
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, 4, INT64_C(1) << 62, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    /* the whole batch is real: row 2's label is read and refused; with two
     * real rows it is padding, not read */
    L8_CK_ST(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, 4, 8, NULL, loss, hit, NULL),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "label 10 of row 2"));
    L8_CK(l8_softmax_xent_at(x, lab, 10, 1.0f, cur, 4, 2, NULL, loss, hit, NULL));
    l8_tensor *all[] = { x, lab, loss, hit, cur, cur2, curf };
    for (size_t i = 0; i < 7; i++) l8_tensor_destroy(all[i]);
    l8_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_gpu_xent_vs_host)
{
    l8_ctx *g = ctx_on("cuda:0"), *h = ctx_on("host");
    l8_rng r;
    l8_rng_init(&r, 302);
    const int64_t T = 1000, C = 48;
    const int classes = 37;
    float *x = malloc(sizeof(float) * T * C), *dg = malloc(sizeof(float) * T * C),
          *dh = malloc(sizeof(float) * T * C), lg[1000], lh[1000];
    int32_t y[1000], hg[1000], hh[1000];
    ck_assert(x && dg && dh);
    fill(&r, x, y, T, C, classes);
    for (int dti = 0; dti < 2; dti++) {
        l8_dtype dt = dti ? L8_BF16 : L8_F32;
        run(g, dt, x, y, T, C, classes, 1.0f / T, dg, lg, hg);
        run(h, dt, x, y, T, C, classes, 1.0f / T, dh, lh, hh);
        for (int64_t t = 0; t < T; t++) {
            ck_assert_msg(fabsf(lg[t] - lh[t]) < 1e-4f * (1 + fabsf(lh[t])), "loss row %lld", (long long)t);
            ck_assert_int_eq(hg[t], hh[t]);
        }
        for (int64_t i = 0; i < T * C; i++)
            ck_assert_msg(fabsf(dg[i] - dh[i]) <= (dt == L8_F32 ? 1e-6f : 1e-5f) + 1e-2f * fabsf(dh[i]),
                          "dx[%lld] gpu %g host %g", (long long)i, dg[i], dh[i]);
    }
    free(x); free(dg); free(dh);
    l8_ctx_destroy(h);
    l8_ctx_destroy(g);
}
END_TEST

Suite *l8_loss_suite(void)
{
    Suite *s = suite_create("loss");
    TCase *tc = tcase_create("loss");
    tcase_set_tags(tc, "host");
    tcase_add_test(tc, test_xent_vs_fp64);
    tcase_add_test(tc, test_xent_errors);
    tcase_add_test(tc, test_xent_at);
    tcase_add_test(tc, test_xent_at_errors);
    suite_add_tcase(s, tc);
    TCase *gc = tcase_create("loss_gpu");
    tcase_set_tags(gc, "gpu");
    tcase_add_test(gc, test_gpu_xent_vs_host);
    tcase_add_test(gc, test_gpu_xent_at);
    suite_add_tcase(s, gc);
    return s;
}
