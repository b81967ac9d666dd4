/* test_gather.c - l8_gather_rows: the host path against a plain loop
 * (dtypes, repeats, strided views, out-of-range indices zeroed and counted),
 * l8_gather_rows_at / l8_put_rows_at at a device cursor against a plain
 * loop (partial batch, stride 0, negative and past-the-end cursors),
 * argument errors, and the GPU kernel against the host path byte for byte
 * (16-byte and byte paths, unaligned views, more rows than the grid's y
 * limit).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"

/* A (rows, cols) tensor of dt on ctx, filled from bytes. */
static l8_tensor *mk(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, const void *bytes)
{
    l8_tensor *t = NULL;
    int64_t shape[2] = { rows, cols };
    L8_CK(l8_tensor_empty(ctx, dt, cols ? 2 : 1, shape, &t));
    if (bytes) L8_CK(l8_tensor_copy_from_host(t, bytes, l8_tensor_nbytes(t), NULL));
    return t;
}

static l8_tensor *mk_idx(l8_ctx *ctx, const int32_t *idx, int64_t n)
{
    return mk(ctx, L8_I32, n, 0, idx);
}

static void fill(l8_rng *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)l8_rng_next(r);
}

static int32_t read_bad(l8_tensor *bad)
{
    int32_t v = -1;
    L8_CK(l8_tensor_copy_to_host(bad, &v, 4, NULL));
    return v;
}

/* One gather of R rows out of N on ctx, src a column window [c0, c0 + C)
 * of an (N, W) tensor (row stride W), dst a window of an (R, W2) tensor,
 * compared with a plain loop, and the count of invalid indices. */
static void one_case(l8_ctx *ctx, l8_dtype dt, int64_t N, int64_t W, int64_t c0, int64_t C,
                     int64_t R, int64_t W2, int64_t d0, int nbad, uint64_t salt)
{
    size_t es = l8_dtype_size(dt);
    l8_rng r;
    l8_rng_init(&r, salt);
    uint8_t *sh = l8t_xmalloc((size_t)(N * W) * es), *dh = l8t_xmalloc((size_t)(R * W2) * es);
    uint8_t *want = l8t_xmalloc((size_t)(R * W2) * es);
    int32_t *ih = l8t_xmalloc((size_t)R * 4);
    fill(&r, sh, (size_t)(N * W) * es);
    memset(dh, 0xA5, (size_t)(R * W2) * es);                  /* poison */
    for (int64_t i = 0; i < R; i++) ih[i] = (int32_t)l8_rng_below(&r, (uint64_t)N);
    static const int32_t bad_vals[4] = { -1, INT32_MIN, 0, INT32_MAX };
    for (int k = 0; k < nbad && k < R; k++) {
        int32_t v = bad_vals[k % 4];
        ih[(k * 7919) % R] = v == 0 ? (int32_t)N : v;
    }
    int want_bad = 0;
    memcpy(want, dh, (size_t)(R * W2) * es);
    for (int64_t i = 0; i < R; i++) {
        uint8_t *d = want + (size_t)(i * W2 + d0) * es;
        if (ih[i] < 0 || ih[i] >= N) { memset(d, 0, (size_t)C * es); want_bad++; }
        else memcpy(d, sh + (size_t)(ih[i] * W + c0) * es, (size_t)C * es);
    }
    l8_tensor *s = mk(ctx, dt, N, W, sh), *d = mk(ctx, dt, R, W2, dh), *ix = mk_idx(ctx, ih, R);
    l8_tensor *sv = NULL, *dv = NULL, *bad = NULL;
    int32_t zero = 0;
    bad = mk(ctx, L8_I32, 1, 0, &zero);
    L8_CK(l8_tensor_narrow(s, 1, c0, C, &sv));
    L8_CK(l8_tensor_narrow(d, 1, d0, C, &dv));
    L8_CK(l8_gather_rows(sv, ix, dv, bad, NULL));
    L8_CK(l8_tensor_copy_to_host(d, dh, (size_t)(R * W2) * es, NULL));
    ck_assert_msg(memcmp(dh, want, (size_t)(R * W2) * es) == 0,
                  "%s gather N %lld R %lld cols %lld of %lld (at %lld) differs (seed %llu)",
                  l8_dtype_name(dt), (long long)N, (long long)R, (long long)C, (long long)W,
                  (long long)c0, (unsigned long long)l8_test_seed());
    ck_assert_int_eq(read_bad(bad), want_bad);
    /* again without a counter: same rows */
    memset(dh, 0x5A, (size_t)(R * W2) * es);
    L8_CK(l8_tensor_copy_from_host(d, dh, (size_t)(R * W2) * es, NULL));
    L8_CK(l8_gather_rows(sv, ix, dv, NULL, NULL));
    L8_CK(l8_tensor_copy_to_host(d, dh, (size_t)(R * W2) * es, NULL));
    for (int64_t i = 0; i < R; i++)
        ck_assert(memcmp(dh + (size_t)(i * W2 + d0) * es, want + (size_t)(i * W2 + d0) * es,
                         (size_t)C * es) == 0);
    l8_tensor_destroy(sv); l8_tensor_destroy(dv); l8_tensor_destroy(s); l8_tensor_destroy(d);
    l8_tensor_destroy(ix); l8_tensor_destroy(bad);
    free(sh); free(dh); free(want); free(ih);
}

/* The moves at a cursor, step by step as a loop of R-row batches over an
 * order of L entries does them: for each cursor value k, gather_at picks
 * rows idx[k*R + r] of an (N, C) src, and put_at files an (R, C) result at
 * rows k*R + r of an (M, C) dst - both against a plain loop. The values
 * include the last, partial batch, stride 0, a negative cursor and one
 * past the end (zero rows / rows not written, counted in bad). */
static void at_case(l8_ctx *ctx, l8_dtype dt, int64_t N, int64_t C, int64_t L, int64_t R,
                    int64_t M, uint64_t salt)
{
    size_t es = l8_dtype_size(dt), rb = (size_t)C * es;
    l8_rng r;
    l8_rng_init(&r, salt);
    uint8_t *sh = l8t_xmalloc((size_t)N * rb), *got = l8t_xmalloc((size_t)(R + M) * rb);
    uint8_t *want = l8t_xmalloc((size_t)(R + M) * rb), *res = l8t_xmalloc((size_t)R * rb);
    int32_t *ih = l8t_xmalloc((size_t)L * 4);
    fill(&r, sh, (size_t)N * rb);
    for (int64_t i = 0; i < L; i++) ih[i] = (int32_t)l8_rng_below(&r, (uint64_t)N);
    ih[L / 2] = (int32_t)N;                                   /* one bad index in the order */
    l8_tensor *src = mk(ctx, dt, N, C, sh), *ix = mk_idx(ctx, ih, L);
    l8_tensor *d = mk(ctx, dt, R, C, NULL), *out = mk(ctx, dt, M, C, NULL);
    l8_tensor *rs = mk(ctx, dt, R, C, NULL);
    int32_t zero = 0;
    l8_tensor *cur = mk(ctx, L8_I32, 1, 0, &zero), *bad = mk(ctx, L8_I32, 1, 0, &zero);
    memset(want, 0x3C, (size_t)(R + M) * rb);
    L8_CK(l8_tensor_copy_from_host(out, want + (size_t)R * rb, (size_t)M * rb, NULL));
    const int32_t ks[] = { 0, 1, (int32_t)((L - 1) / R), (int32_t)((L - 1) / R) + 1, -1, 2 };
    const int64_t strides[] = { R, R, R, R, R, 0 };
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        int32_t k = ks[t];
        int64_t off = (int64_t)k * strides[t];
        int nbad = 0;
        fill(&r, res, (size_t)R * rb);
        L8_CK(l8_tensor_copy_from_host(rs, res, (size_t)R * rb, NULL));
        L8_CK(l8_tensor_copy_from_host(cur, &k, 4, NULL));
        L8_CK(l8_tensor_copy_from_host(bad, &zero, 4, NULL));
        L8_CK(l8_gather_rows_at(src, ix, cur, strides[t], d, bad, NULL));
        L8_CK(l8_put_rows_at(out, cur, strides[t], rs, bad, NULL));
        for (int64_t i = 0; i < R; i++) {
            int64_t pos = off + i, dr = off + i;
            int64_t j = pos >= 0 && pos < L ? ih[pos] : -1;
            if (j < 0 || j >= N) { memset(want + (size_t)i * rb, 0, rb); nbad++; }
            else memcpy(want + (size_t)i * rb, sh + (size_t)j * rb, rb);
            if (dr < 0 || dr >= M) nbad++;
            else memcpy(want + (size_t)(R + dr) * rb, res + (size_t)i * rb, rb);
        }
        L8_CK(l8_tensor_copy_to_host(d, got, (size_t)R * rb, NULL));
        L8_CK(l8_tensor_copy_to_host(out, got + (size_t)R * rb, (size_t)M * rb, NULL));
        ck_assert_msg(memcmp(got, want, (size_t)R * rb) == 0, "%s gather_at cursor %d stride "
                      "%lld differs", l8_dtype_name(dt), k, (long long)strides[t]);
        ck_assert_msg(memcmp(got + (size_t)R * rb, want + (size_t)R * rb, (size_t)M * rb) == 0,
                      "%s put_at cursor %d differs", l8_dtype_name(dt), k);
        ck_assert_int_eq(read_bad(bad), nbad);
    }
    l8_tensor *all[] = { src, ix, d, out, rs, cur, bad };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
    free(sh); free(got); free(want); free(res); free(ih);
}

static void cases(const char *device)
{
    l8_ctx *ctx = l8t_ctx(device, NULL, 0);
    /* images as lean8-train keeps them: bf16 rows of 1568 bytes (wide) */
    one_case(ctx, L8_BF16, 1000, 784, 0, 784, 256, 784, 0, 0, 1);
    one_case(ctx, L8_BF16, 1000, 784, 0, 784, 256, 784, 0, 5, 2);
    /* labels: 1-d i32 is one column of 4 bytes (byte path) */
    one_case(ctx, L8_I32, 999, 1, 0, 1, 300, 1, 0, 3, 3);
    /* odd widths, fp8 bytes, column windows (unaligned bases and strides) */
    one_case(ctx, L8_E4M3, 77, 33, 5, 17, 41, 19, 1, 2, 4);
    one_case(ctx, L8_F32, 64, 12, 4, 8, 65, 8, 0, 1, 5);      /* 32-byte rows, aligned */
    one_case(ctx, L8_F32, 64, 12, 1, 8, 65, 9, 1, 1, 6);      /* same rows, unaligned */
    one_case(ctx, L8_F16, 5, 3, 0, 3, 1, 3, 0, 0, 7);
    /* more rows than one grid's y (65535), rows longer than one x-block */
    if (!l8_test_quick()) {
        one_case(ctx, L8_F32, 5000, 4, 0, 4, 70001, 4, 0, 9, 8);
        one_case(ctx, L8_E5M2, 300, 40000, 0, 40000, 40, 40000, 0, 1, 9);
        one_case(ctx, L8_BF16, 300, 9000, 8, 8192, 40, 8192, 0, 1, 10);
    }
    /* lean8-train's step: images, labels and losses; then odd bytes */
    at_case(ctx, L8_BF16, 1000, 784, 900, 256, 900, 11);
    at_case(ctx, L8_I32, 1000, 1, 900, 256, 900, 12);
    at_case(ctx, L8_E4M3, 50, 33, 37, 8, 40, 13);
    l8t_ctx_finish(ctx);
}

START_TEST(test_gather_host)
{
    cases("host");
}
END_TEST

START_TEST(test_gather_errors)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0), *other = l8t_ctx("host", NULL, 0);
    int32_t ih[4] = { 0, 1, 2, 3 };
    l8_tensor *s = mk(ctx, L8_F32, 8, 4, NULL), *d = mk(ctx, L8_F32, 4, 4, NULL);
    l8_tensor *ix = mk_idx(ctx, ih, 4), *ix3 = mk_idx(ctx, ih, 3);
    l8_tensor *d16 = mk(ctx, L8_F16, 4, 4, NULL), *d5 = mk(ctx, L8_F32, 4, 5, NULL);
    l8_tensor *ixf = mk(ctx, L8_F32, 4, 0, NULL), *bad2 = mk(ctx, L8_I32, 2, 0, NULL);
    l8_tensor *badf = mk(ctx, L8_F32, 1, 0, NULL), *xo = mk(other, L8_F32, 4, 4, NULL);
    l8_tensor *st = NULL, *s3 = NULL, *alias = NULL, *ix2d = NULL;
    L8_CK(l8_tensor_transpose(s, 0, 1, &st));                  /* (4, 8), rows strided */
    int64_t sh3[3] = { 2, 4, 4 };
    L8_CK(l8_tensor_reshape(s, 3, sh3, &s3));
    L8_CK(l8_tensor_narrow(s, 0, 2, 4, &alias));               /* rows 2..5 of src */
    int64_t sh2[2] = { 2, 2 };
    L8_CK(l8_tensor_reshape(ix, 2, sh2, &ix2d));
    L8_CK_ST(l8_gather_rows(NULL, ix, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows(s, NULL, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows(s, ix, NULL, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows(s, ix, d16, NULL, NULL), L8_ERR_INVALID_ARG);    /* dtype */
    L8_CK_ST(l8_gather_rows(s, ix, d5, NULL, NULL), L8_ERR_INVALID_ARG);     /* columns */
    L8_CK_ST(l8_gather_rows(s, ix3, d, NULL, NULL), L8_ERR_INVALID_ARG);     /* entries */
    L8_CK_ST(l8_gather_rows(s, ixf, d, NULL, NULL), L8_ERR_INVALID_ARG);     /* idx dtype */
    L8_CK_ST(l8_gather_rows(s, ix2d, d, NULL, NULL), L8_ERR_INVALID_ARG);    /* idx rank */
    L8_CK_ST(l8_gather_rows(s, ix, d, bad2, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows(s, ix, d, badf, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows(s, ix, xo, NULL, NULL), L8_ERR_INVALID_ARG);     /* context */
    L8_CK_ST(l8_gather_rows(st, ix, d, NULL, NULL), L8_ERR_INVALID_ARG);     /* strided rows */
    L8_CK_ST(l8_gather_rows(s3, ix, d, NULL, NULL), L8_ERR_INVALID_ARG);     /* rank 3 */
    L8_CK_ST(l8_gather_rows(s, ix, alias, NULL, NULL), L8_ERR_INVALID_ARG);  /* overlap */
    L8_CK(l8_gather_rows(s, ix, d, NULL, NULL));
    /* at a cursor: the cursor's dtype, size and overlap, the stride */
    int32_t c0 = 0;
    l8_tensor *cur = mk(ctx, L8_I32, 1, 0, &c0), *cur2 = mk(ctx, L8_I32, 2, 0, NULL);
    l8_tensor *curf = mk(ctx, L8_F32, 1, 0, NULL), *curd = NULL;
    L8_CK(l8_tensor_narrow(d, 0, 0, 1, &curd));
    L8_CK_ST(l8_gather_rows_at(s, ix, NULL, 4, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows_at(s, ix, cur2, 4, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows_at(s, ix, curf, 4, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows_at(s, ix, cur, -1, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gather_rows_at(s, ix, cur, 4, d, cur, NULL), L8_ERR_INVALID_ARG);  /* bad = cursor */
    L8_CK_ST(l8_put_rows_at(s, cur, 4, d5, NULL, NULL), L8_ERR_INVALID_ARG);       /* columns */
    L8_CK_ST(l8_put_rows_at(d16, cur, 4, d, NULL, NULL), L8_ERR_INVALID_ARG);      /* dtype */
    L8_CK_ST(l8_put_rows_at(s, curd, 4, d, NULL, NULL), L8_ERR_INVALID_ARG);       /* cursor dtype */
    L8_CK_ST(l8_put_rows_at(s, cur, 4, alias, NULL, NULL), L8_ERR_INVALID_ARG);    /* overlap */
    L8_CK_ST(l8_put_rows_at(s, cur, (int64_t)1 << 31, d, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_gather_rows_at(s, ix, cur, 4, d, NULL, NULL));
    L8_CK(l8_put_rows_at(s, cur, 4, d, NULL, NULL));
    l8_tensor *at_t[] = { cur, cur2, curf, curd };
    for (size_t i = 0; i < sizeof at_t / sizeof at_t[0]; i++) l8_tensor_destroy(at_t[i]);
    l8_tensor *all[] = { s, d, ix, ix3, d16, d5, ixf, bad2, badf, st, s3, alias, ix2d };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
    l8_tensor_destroy(xo);
    l8t_ctx_finish(other);
    l8t_ctx_finish(ctx);
}
END_TEST

START_TEST(test_gpu_gather)
{
    cases("cuda:0");
}
END_TEST

Suite *l8_gather_suite(void)
{
    Suite *s = suite_create("gather");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gather_host);
    tcase_add_test(tc, test_gather_errors);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 120);
    tcase_add_test(tg, test_gpu_gather);
    suite_add_tcase(s, tg);
    return s;
}
