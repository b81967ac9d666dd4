/* test_gemm.c - GEMMs: the host reference against an independent fp64 loop,
 * every argument check, beta and bias semantics, the plan cache, the
 * autotune search's enumeration on made-up capabilities; on a GPU, cuBLASLt
 * against the host reference for every mode, and autotune 2 against 0.
 *
 * Data: fresh random values each run (seeded, see main.c), never all zeros;
 * operands are views with padded rows whose padding holds NaN, outputs are
 * poisoned with NaN bytes before the call (kept where beta != 0 reads D:
 * only the padding is poisoned then), and the padding must come back
 * untouched. NaN never passes a comparison.
 *
 * Tolerances are stated relative to S = |alpha s_A s_B| sum_k |a_mk b_kn|
 * + |beta d0| + |bias| per output (times scale_D for FP8 outputs), plus one
 * unit in the last place of the output format at the compared magnitude
 * (two for GPU vs host: both sides round).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "ops/gemm.h"
#include "ops/gemm_internal.h"        /* the configuration search's pure part */
#include "runtime/fp8.h"

/* ---- an independent decoder (not runtime/fp8.c) ---- */

static double dec(l8_dtype dt, const uint8_t *img, size_t i)
{
    switch (dt) {
    case L8_F32: { float f; memcpy(&f, img + 4 * i, 4); return f; }
    case L8_BF16: {
        uint32_t u = (uint32_t)(img[2 * i] | img[2 * i + 1] << 8) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case L8_F16: {
        unsigned h = img[2 * i] | img[2 * i + 1] << 8, e = (h >> 10) & 31, m = h & 1023;
        double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
        return h & 0x8000 ? -v : v;
    }
    case L8_E4M3: {
        unsigned c = img[i], e = (c >> 3) & 15, m = c & 7;
        if ((c & 0x7f) == 0x7f) return NAN;
        double v = e ? ldexp(8 + m, (int)e - 10) : ldexp(m, -9);
        return c & 0x80 ? -v : v;
    }
    case L8_E5M2: {
        unsigned c = img[i], e = (c >> 2) & 31, m = c & 3;
        double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(4 + m, (int)e - 17) : ldexp(m, -16);
        return c & 0x80 ? -v : v;
    }
    default: return NAN;
    }
}

/* One unit in the last place of dt at magnitude |x|. */
static double ulp(l8_dtype dt, double x)
{
    int e = x > 0 ? ilogb(x) : -200;
    switch (dt) {
    case L8_F32: return ldexp(1.0, (e > -126 ? e : -126) - 23);
    case L8_BF16: return ldexp(1.0, (e > -126 ? e : -126) - 7);
    case L8_F16: return ldexp(1.0, (e > -14 ? e : -14) - 10);
    case L8_E4M3: return ldexp(1.0, (e > -6 ? e : -6) - 3);
    case L8_E5M2: return ldexp(1.0, (e > -14 ? e : -14) - 2);
    default: return 0;
    }
}

static void enc(l8_dtype dt, uint8_t *img, size_t i, float v)
{
    switch (dt) {
    case L8_F32: memcpy(img + 4 * i, &v, 4); break;
    case L8_BF16: { uint16_t u = l8_bf16_from_f32(v); memcpy(img + 2 * i, &u, 2); break; }
    case L8_F16: { uint16_t u = l8_f16_from_f32(v); memcpy(img + 2 * i, &u, 2); break; }
    default: img[i] = l8_fp8_from_f32(v, dt); break;
    }
}

/* ---- matrices: a host image of rows x ld elements, a view of rows x cols ---- */

typedef struct mat {
    l8_dtype dt;
    int64_t rows, cols, ld;
    uint8_t *img;
    size_t bytes;
} mat;

static mat mat_new(l8_dtype dt, int64_t rows, int64_t cols, int64_t ld, l8_rng *r, float range)
{
    mat x = { dt, rows, cols, ld, NULL, 0 };
    size_t es = l8_dtype_size(dt);
    x.bytes = (size_t)(rows * ld) * es;
    x.img = malloc(x.bytes ? x.bytes : 1);
    ck_assert_ptr_nonnull(x.img);
    memset(x.img, 0xFF, x.bytes);                /* NaN in every format: the padding */
    if (r)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                enc(dt, x.img, (size_t)(i * ld + j), l8_rng_float(r, -range, range));
    return x;
}

static double at(const mat *x, int64_t i, int64_t j) { return dec(x->dt, x->img, (size_t)(i * x->ld + j)); }

/* A tensor for x on ctx: the padded (rows, ld) tensor and a (rows, cols) view. */
typedef struct dmat {
    l8_tensor *full, *view;
} dmat;

static dmat upload(l8_ctx *ctx, const mat *x, float scale, float scale_inv)
{
    dmat t = { NULL, NULL };
    int64_t shape[2] = { x->rows, x->ld };
    L8_CK(l8_tensor_empty(ctx, x->dt, 2, shape, &t.full));
    L8_CK(l8_tensor_copy_from_host(t.full, x->img, x->bytes, NULL));
    L8_CK(l8_tensor_narrow(t.full, 1, 0, x->cols, &t.view));
    if (l8_dtype_is_fp8(x->dt)) {
        l8_fp8_meta *m = NULL;
        L8_CK(l8_fp8_meta_create(ctx, &m));
        L8_CK(l8_fp8_meta_set(m, scale, scale_inv, -1.0f));   /* amax poisoned */
        L8_CK(l8_tensor_set_fp8_meta(t.view, m));
        l8_fp8_meta_release(m);
    }
    return t;
}

/* A 1-D tensor (cols,) for a one-row image (bias vectors). */
static dmat upload_vec(l8_ctx *ctx, const mat *x)
{
    dmat t = { NULL, NULL };
    L8_CK(l8_tensor_empty(ctx, x->dt, 1, &x->cols, &t.full));
    L8_CK(l8_tensor_copy_from_host(t.full, x->img, (size_t)x->cols * l8_dtype_size(x->dt), NULL));
    L8_CK(l8_tensor_narrow(t.full, 0, 0, x->cols, &t.view));
    return t;
}

static void dmat_free(dmat *t)
{
    l8_tensor_destroy(t->view);
    l8_tensor_destroy(t->full);
    t->view = t->full = NULL;
}

static l8_ctx *make_ctx(const char *dev) { return l8t_ctx(dev, NULL, 0); }

/* precise_reduction: the GPU comparisons below hold cuBLASLt to f32
 * partial sums; test_gpu_default_reduction covers the default. The handle
 * runs every call through cuBLASLt (l8_gemm_config.small 0: these tests
 * count plans); small_handle gives the small kernel the calls that fit
 * under small (ops/gemm.h: 1 every call, 2 auto, -1 from L8_GEMM_SMALL). */
static l8_gemm_handle *small_handle(l8_ctx *ctx, int autotune, int small)
{
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    cfg.autotune = autotune;
    cfg.precise_reduction = 1;
    cfg.small = small;
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    return h;
}

static l8_gemm_handle *make_handle(l8_ctx *ctx, int autotune)
{
    return small_handle(ctx, autotune, 0);
}

static l8_gemm_stats stats_of(l8_gemm_handle *h)
{
    l8_gemm_stats s = { .size = sizeof s };
    L8_CK(l8_gemm_get_stats(h, &s));
    return s;
}

/* ---- one GEMM case ---- */

typedef struct mode {
    const char *name;
    l8_dtype a, b, d;
    int ta, tb;
    float alpha, beta;
    l8_gemm_epilogue epi;
    int fast;
    double tol;                   /* GPU vs host, relative to S */
} mode;

typedef struct gcase {
    const mode *md;
    int64_t M, N, K;
    mat A, B, D0, bias;           /* D0: D before the call (random if beta != 0) */
    float sa, sb, sd;             /* A, B scale_inv; D scale */
    l8_dtype bias_dt;
    double *S, *t;                /* (M,N): the tolerance base, fp64 result before scale_D */
    double *Sg, *g;               /* bias gradient: sum |x|, fp64 sum */
    double amax;
} gcase;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Leading dimension >= cols with random padding, honouring a byte multiple. */
static int64_t pick_ld(l8_rng *r, int64_t cols, l8_dtype dt, int fp8_rules)
{
    int64_t ld = cols + (int64_t)l8_rng_below(r, 4);
    if (fp8_rules) ld = round_up(ld, 16 / (int64_t)l8_dtype_size(dt));
    return ld;
}

static void case_init(gcase *c, const mode *md, int64_t M, int64_t N, int64_t K, l8_rng *r)
{
    memset(c, 0, sizeof *c);
    c->md = md;
    c->M = M; c->N = N; c->K = K;
    int fp8 = l8_dtype_is_fp8(md->a);
    int64_t ar = md->ta ? K : M, ac = md->ta ? M : K, br = md->tb ? N : K, bc = md->tb ? K : N;
    c->A = mat_new(md->a, ar, ac, pick_ld(r, ac, md->a, fp8), r, 3.0f);
    c->B = mat_new(md->b, br, bc, pick_ld(r, bc, md->b, fp8), r, 3.0f);
    c->D0 = mat_new(md->d, M, N, pick_ld(r, N, md->d, fp8), md->beta != 0.0f ? r : NULL, 2.0f);
    c->sa = fp8 ? 0.5f : 1.0f;
    c->sb = fp8 ? 0.125f : 1.0f;
    c->sd = 1.0f;
    if (l8_dtype_is_fp8(md->d))   /* typical |t| ~ 0.28 sqrt(K): aim at ~32 */
        c->sd = (float)(32.0 / (0.28 * sqrt((double)K)));
    if (md->epi != L8_GEMM_EPI_NONE) {
        c->bias_dt = fp8 ? (md->d == L8_F16 ? L8_F16 : L8_BF16) : md->d;
        int64_t len = md->epi == L8_GEMM_EPI_DBIAS_A ? M : N;
        c->bias = mat_new(c->bias_dt, 1, len, len, md->epi == L8_GEMM_EPI_BIAS ? r : NULL, 1.0f);
    }
}

static void case_free(gcase *c)
{
    free(c->A.img); free(c->B.img); free(c->D0.img); free(c->bias.img);
    free(c->S); free(c->t); free(c->Sg); free(c->g);
}

/* The independent fp64 triple loop: t, S, amax and the bias gradients. */
static void case_naive(gcase *c)
{
    const mode *md = c->md;
    int64_t M = c->M, N = c->N, K = c->K;
    c->S = calloc((size_t)(M * N), sizeof *c->S);
    c->t = calloc((size_t)(M * N), sizeof *c->t);
    double *av = malloc((size_t)(M * K) * sizeof *av), *bv = malloc((size_t)(N * K) * sizeof *bv);
    ck_assert(c->S && c->t && av && bv);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) av[m * K + k] = md->ta ? at(&c->A, k, m) : at(&c->A, m, k);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) bv[n * K + k] = md->tb ? at(&c->B, n, k) : at(&c->B, k, n);
    double ab = (double)md->alpha * c->sa * c->sb;
    c->amax = 0;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            double s = 0, sabs = 0;
            const double *x = av + m * K, *y = bv + n * K;
            for (int64_t k = 0; k < K; k++) { s += x[k] * y[k]; sabs += fabs(x[k] * y[k]); }
            double t = ab * s, S = fabs(ab) * sabs;
            if (md->beta != 0.0f) { t += md->beta * at(&c->D0, m, n); S += fabs(md->beta * at(&c->D0, m, n)); }
            if (md->epi == L8_GEMM_EPI_BIAS) { t += at(&c->bias, 0, n); S += fabs(at(&c->bias, 0, n)); }
            c->t[m * N + n] = t;
            c->S[m * N + n] = S;
            if (fabs(t) > c->amax) c->amax = fabs(t);
        }
    }
    if (md->epi == L8_GEMM_EPI_DBIAS_A || md->epi == L8_GEMM_EPI_DBIAS_B) {
        int rows = md->epi == L8_GEMM_EPI_DBIAS_A;
        int64_t len = rows ? M : N;
        const double *v = rows ? av : bv;
        c->g = calloc((size_t)len, sizeof *c->g);
        c->Sg = calloc((size_t)len, sizeof *c->Sg);
        ck_assert(c->g && c->Sg);
        for (int64_t i = 0; i < len; i++)
            for (int64_t k = 0; k < K; k++) { c->g[i] += v[i * K + k]; c->Sg[i] += fabs(v[i * K + k]); }
    }
    free(av);
    free(bv);
}

/* Outputs of one run, downloaded to the host. */
typedef struct result {
    uint8_t *d;                   /* the full padded D image */
    uint8_t *bias;                /* the bias gradient (or the untouched bias) */
    float amax;                   /* D's meta amax (FP8 D) */
    l8_status st;
} result;

/* Run c on ctx through h (stream NULL) and download. */
static result case_run(gcase *c, l8_ctx *ctx, l8_gemm_handle *h)
{
    const mode *md = c->md;
    result res = { NULL, NULL, 0, L8_OK };
    dmat A = upload(ctx, &c->A, 1.0f / c->sa, c->sa);
    dmat B = upload(ctx, &c->B, 1.0f / c->sb, c->sb);
    dmat D = upload(ctx, &c->D0, c->sd, 1.0f / c->sd);
    dmat bias = { NULL, NULL };
    if (md->epi != L8_GEMM_EPI_NONE) bias = upload_vec(ctx, &c->bias);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = A.view; g.b = B.view; g.d = D.view; g.bias = bias.view;
    g.trans_a = md->ta; g.trans_b = md->tb;
    g.alpha = md->alpha; g.beta = md->beta;
    g.epilogue = md->epi; g.fast_accum = md->fast;
    res.st = l8_gemm(h, &g, NULL);
    ck_assert_msg(res.st == L8_OK, "%s %lldx%lldx%lld: %s", md->name, (long long)c->M,
                  (long long)c->N, (long long)c->K, l8_last_error_string());
    res.d = malloc(c->D0.bytes);
    ck_assert_ptr_nonnull(res.d);
    L8_CK(l8_tensor_copy_to_host(D.full, res.d, c->D0.bytes, NULL));
    if (bias.full) {
        res.bias = malloc(c->bias.bytes);
        ck_assert_ptr_nonnull(res.bias);
        L8_CK(l8_tensor_copy_to_host(bias.full, res.bias, c->bias.bytes, NULL));
    }
    if (l8_dtype_is_fp8(md->d)) L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(D.view), NULL, NULL, &res.amax));
    L8_CK(l8_ctx_synchronize(ctx));
    dmat_free(&A); dmat_free(&B); dmat_free(&D); dmat_free(&bias);
    return res;
}

static void result_free(result *r)
{
    free(r->d);
    free(r->bias);
}

/* got (an output image) against want: either the fp64 t (ref == NULL) or
 * another output image. Padding must still be the poison. */
static void case_compare(const gcase *c, const result *got, const result *ref, double tol,
                         const char *what)
{
    const mode *md = c->md;
    l8_dtype dt = md->d;
    int fp8d = l8_dtype_is_fp8(dt);
    double fmax = dt == L8_E4M3 ? 448.0 : dt == L8_E5M2 ? 57344.0 : INFINITY;
    double worst = 0;
    for (int64_t m = 0; m < c->M; m++) {
        for (int64_t j = 0; j < c->D0.ld; j++) {
            size_t i = (size_t)(m * c->D0.ld + j), es = l8_dtype_size(dt);
            if (j >= c->N) {
                ck_assert_msg(memcmp(got->d + i * es, c->D0.img + i * es, es) == 0,
                              "%s %s: padding of D written at (%lld, %lld)", md->name, what,
                              (long long)m, (long long)j);
                continue;
            }
            double g = dec(dt, got->d, i), S = c->S[m * c->N + j] * c->sd, w, slack;
            if (ref) {
                w = dec(dt, ref->d, i);
                slack = tol * S + ulp(dt, fabs(g)) + ulp(dt, fabs(w));
                /* cuBLASLt may round alpha AB + beta C to a 16-bit D's type
                 * before it adds the bias (seen on the H200: bf16, 33x17x9,
                 * 2-byte aligned, 7 ulps of D): one ulp of that sum */
                if (md->epi == L8_GEMM_EPI_BIAS && l8_dtype_size(dt) == 2)
                    slack += ulp(dt, fabs(c->t[m * c->N + j] - at(&c->bias, 0, j)) * c->sd);
            } else {
                w = c->t[m * c->N + j] * c->sd;
                if (fp8d) w = w > fmax ? fmax : w < -fmax ? -fmax : w;
                slack = tol * S + ulp(dt, fabs(w));
            }
            double err = fabs(g - w);
            ck_assert_msg(!isnan(g) && !isnan(w) && err <= slack,
                          "%s %s %lldx%lldx%lld: D(%lld, %lld) = %.9g, expected %.9g (err %.3g,"
                          " allowed %.3g, S %.3g)", md->name, what, (long long)c->M,
                          (long long)c->N, (long long)c->K, (long long)m, (long long)j, g, w, err,
                          slack, S);
            if (S > 0 && err / S > worst) worst = err / S;
        }
    }
    if (fp8d) {
        double w = ref ? ref->amax : c->amax, maxS = 0;
        for (int64_t i = 0; i < c->M * c->N; i++) maxS = c->S[i] > maxS ? c->S[i] : maxS;
        ck_assert_msg(!isnan(got->amax) && fabs(got->amax - w) <= tol * maxS + 1e-6 * w,
                      "%s %s: amax %.9g, expected %.9g", md->name, what, (double)got->amax, w);
    }
    if (c->g) {
        int64_t len = c->bias.cols;
        for (int64_t i = 0; i < len; i++) {
            double g = dec(c->bias_dt, got->bias, (size_t)i);
            double w = ref ? dec(c->bias_dt, ref->bias, (size_t)i) : c->g[i];
            double slack = tol * c->Sg[i] + ulp(c->bias_dt, fabs(w)) + (ref ? ulp(c->bias_dt, fabs(g)) : 0);
            ck_assert_msg(!isnan(g) && fabs(g - w) <= slack, "%s %s: dbias[%lld] = %.9g, expected"
                          " %.9g", md->name, what, (long long)i, g, w);
        }
    }
    if (getenv("L8_GEMM_TEST_VERBOSE"))
        printf("  %-40s %-12s %5lldx%5lldx%5lld  max err/S %.3g (tol %.3g)\n", md->name, what,
               (long long)c->M, (long long)c->N, (long long)c->K, worst, tol);
}

/* ---- host: the reference against fp64 ---- */

static const mode k_host_modes[] = {
    { "e4m3xe4m3->bf16", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "e4m3xe4m3->f32 fast", L8_E4M3, L8_E4M3, L8_F32, 0, 1, 1.5f, 0.0f, L8_GEMM_EPI_NONE, 1, 0 },
    { "e4m3xe4m3->e4m3", L8_E4M3, L8_E4M3, L8_E4M3, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "e4m3xe5m2->bf16", L8_E4M3, L8_E5M2, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "e5m2xe4m3->e5m2", L8_E5M2, L8_E4M3, L8_E5M2, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "e5m2xe4m3->f32 beta1", L8_E5M2, L8_E4M3, L8_F32, 0, 1, 1.0f, 1.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "e4m3xe4m3->bf16 bias", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_BIAS, 1, 0 },
    { "e4m3xe4m3->f32 bias", L8_E4M3, L8_E4M3, L8_F32, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_BIAS, 0, 0 },
    { "e4m3xe4m3->f16 bias", L8_E4M3, L8_E4M3, L8_F16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_BIAS, 0, 0 },
    { "bf16 NN", L8_BF16, L8_BF16, L8_BF16, 0, 0, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "bf16 NT", L8_BF16, L8_BF16, L8_BF16, 0, 1, -0.75f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "bf16 TN", L8_BF16, L8_BF16, L8_BF16, 1, 0, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "bf16 TT", L8_BF16, L8_BF16, L8_BF16, 1, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "bf16->f32 beta1", L8_BF16, L8_BF16, L8_F32, 1, 0, 1.0f, 1.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "bf16 beta0.5 bias", L8_BF16, L8_BF16, L8_BF16, 0, 1, 2.0f, 0.5f, L8_GEMM_EPI_BIAS, 0, 0 },
    { "bf16->f32 dbias_a", L8_BF16, L8_BF16, L8_F32, 1, 0, 1.0f, 1.0f, L8_GEMM_EPI_DBIAS_A, 0, 0 },
    { "bf16 dbias_b", L8_BF16, L8_BF16, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_DBIAS_B, 0, 0 },
    { "f16 NT", L8_F16, L8_F16, L8_F16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0 },
    { "f32 TT beta", L8_F32, L8_F32, L8_F32, 1, 1, 1.0f, -1.0f, L8_GEMM_EPI_BIAS, 0, 0 },
};
#define N_HOST_MODES (sizeof k_host_modes / sizeof k_host_modes[0])

START_TEST(test_host_reference_vs_fp64)
{
    l8_rng r;
    l8_rng_init(&r, 0x6e11 + (uint64_t)_i);
    const mode *md = &k_host_modes[_i];
    int fp8 = l8_dtype_is_fp8(md->a);
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_handle *h = make_handle(ctx, 0);
    int trials = l8_test_quick() ? 2 : 6;
    for (int t = 0; t < trials; t++) {
        /* tails everywhere the rules allow: M free, N % 8 and K % 16 for FP8 */
        int64_t M = 1 + (int64_t)l8_rng_below(&r, 37);
        int64_t N = fp8 ? 8 * (1 + (int64_t)l8_rng_below(&r, 5)) : 1 + (int64_t)l8_rng_below(&r, 29);
        int64_t K = fp8 ? 16 * (1 + (int64_t)l8_rng_below(&r, 4)) : 1 + (int64_t)l8_rng_below(&r, 45);
        gcase c;
        case_init(&c, md, M, N, K, &r);
        case_naive(&c);
        result res = case_run(&c, ctx, h);
        /* f32 accumulation over K <= 64 terms: well inside 1e-5 of S */
        case_compare(&c, &res, NULL, 1e-5, "host vs fp64");
        result_free(&res);
        case_free(&c);
    }
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

/* beta == 0 must not read D: a NaN-filled D gives a NaN-free result; beta
 * accumulates exactly D = alpha AB + beta D0 (checked above); the bias is
 * broadcast over rows. Here, specific values a reader can check by hand. */
START_TEST(test_host_beta_and_bias_semantics)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_handle *h = make_handle(ctx, 0);
    /* A (2,3) f32, B (2,3) f32 (trans_b = 1): AB^T is (2,2) */
    const float av[6] = { 1, 2, 3, 4, 5, 6 }, bv[6] = { 1, 0, -1, 2, 1, 0 };
    const float bias[2] = { 10, 20 };
    mat A = { L8_F32, 2, 3, 3, (uint8_t *)av, sizeof av };
    mat B = { L8_F32, 2, 3, 3, (uint8_t *)bv, sizeof bv };
    mat Bi = { L8_F32, 1, 2, 2, (uint8_t *)bias, sizeof bias };
    dmat a = upload(ctx, &A, 1, 1), b = upload(ctx, &B, 1, 1), bi = upload_vec(ctx, &Bi);
    int64_t shape[2] = { 2, 2 };
    l8_tensor *d = NULL;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, shape, &d));
    float out[4];
    memset(out, 0xFF, sizeof out);                /* NaN */
    L8_CK(l8_tensor_copy_from_host(d, out, sizeof out, NULL));
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d;
    L8_CK(l8_gemm(h, &g, NULL));                  /* beta 0 over NaN */
    L8_CK(l8_tensor_copy_to_host(d, out, sizeof out, NULL));
    const float e0[4] = { -2, 4, -2, 13 };        /* rows of A dot rows of B */
    for (int i = 0; i < 4; i++) ck_assert_msg(out[i] == e0[i], "D[%d] = %g, want %g", i, out[i], e0[i]);
    g.beta = 1.0f;                                /* accumulate: D = AB^T + D */
    L8_CK(l8_gemm(h, &g, NULL));
    L8_CK(l8_tensor_copy_to_host(d, out, sizeof out, NULL));
    for (int i = 0; i < 4; i++) ck_assert_msg(out[i] == 2 * e0[i], "D[%d] = %g after +=", i, out[i]);
    g.alpha = 0.5f; g.beta = -1.0f;               /* D = 0.5 AB^T - D + bias */
    g.epilogue = L8_GEMM_EPI_BIAS; g.bias = bi.view;
    L8_CK(l8_gemm(h, &g, NULL));
    L8_CK(l8_tensor_copy_to_host(d, out, sizeof out, NULL));
    for (int i = 0; i < 4; i++) {
        float want = 0.5f * e0[i] - 2 * e0[i] + bias[i % 2];
        ck_assert_msg(out[i] == want, "D[%d] = %g, want %g (bias per column)", i, out[i], want);
    }
    l8_gemm_stats s = stats_of(h);
    ck_assert_uint_eq(s.calls, 3);
    ck_assert_uint_eq(s.plans_created, 3);        /* beta != 0, then the bias: new plans */
    l8_tensor_destroy(d);
    dmat_free(&a); dmat_free(&b); dmat_free(&bi);
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

/* FP8 D: amax is of the result before scale_D, overwritten (not max'ed),
 * and the stored codes are round(t * scale_D) saturated. */
START_TEST(test_host_fp8_output_amax)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_handle *h = make_handle(ctx, 0);
    /* A (1,16) all 2.0 e4m3, B (8,16) row j all (j+1)*0.5 -> D[0,j] = 16 * (j+1) */
    uint8_t ai[16], bi[8 * 16];
    for (int k = 0; k < 16; k++) ai[k] = l8_fp8_from_f32(2.0f, L8_E4M3);
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < 16; k++) bi[j * 16 + k] = l8_fp8_from_f32(0.5f * (float)(j + 1), L8_E4M3);
    mat A = { L8_E4M3, 1, 16, 16, ai, sizeof ai }, B = { L8_E4M3, 8, 16, 16, bi, sizeof bi };
    uint8_t di[16];
    mat D = { L8_E4M3, 1, 16, 16, di, sizeof di };
    memset(di, 0xFF, sizeof di);
    dmat a = upload(ctx, &A, 1, 1), b = upload(ctx, &B, 1, 1);
    D.cols = 8;
    dmat d = upload(ctx, &D, 4.0f, 0.25f);        /* scale_D = 4: 16*(j+1)*4 -> 448 from j = 6 */
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view;
    L8_CK(l8_gemm(h, &g, NULL));
    uint8_t out[16];
    L8_CK(l8_tensor_copy_to_host(d.full, out, sizeof out, NULL));
    for (int j = 0; j < 8; j++) {
        double want = 64.0 * (j + 1) > 448 ? 448 : 64.0 * (j + 1);
        double got = dec(L8_E4M3, out, (size_t)j);
        ck_assert_msg(fabs(got - want) <= ulp(L8_E4M3, want) / 2, "D[%d] = %g, want %g", j, got, want);
    }
    for (int j = 8; j < 16; j++) ck_assert_uint_eq(out[j], 0xFF);
    float amax = 0;
    L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(d.view), NULL, NULL, &amax));
    ck_assert_msg(amax == 128.0f, "amax %g, want 128 (before scale_D)", (double)amax);
    dmat_free(&a); dmat_free(&b); dmat_free(&d);
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

/* ---- the GELU epilogue ---- */

/* tanh GELU in double (the form l8_gelu and cuBLASLt compute) */
static double gelu_d(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* L8_GEMM_EPI_BIAS_GELU_AUX on dev: D = gelu(u), aux = u for u = s_A s_B
 * A.B^T + bias, against fp64: FP8 (E4M3 x E4M3 -> E4M3 with scale_D 2,
 * its amax into D's meta, then skip_amax: the meta's amax stays as set) and
 * bf16 -> bf16. aux within a bf16 step of u (plus the sum's error: f32, or
 * FP8's fast accumulation on a GPU, as the modes below allow), D within
 * one output step of gelu(u) (the host's gelu on f32 u, cuBLASLt's with its
 * own exp), the amax within 1e-3 of max |gelu(u)| (and the sum's error)
 * and within 0.6% of max |gelu(aux)|, the GELU of the call's own sums;
 * D's padding untouched.
 * Then the argument errors. */
static void gelu_aux_run(const char *dev, int fp8, int64_t M, int64_t N, int64_t K)
{
    l8_ctx *ctx = make_ctx(dev);
    l8_gemm_handle *h = make_handle(ctx, 0);
    l8_rng r;
    l8_rng_init(&r, 0x6e1a + (uint64_t)(M + fp8));
    const l8_dtype dt = fp8 ? L8_E4M3 : L8_BF16, dd = fp8 ? L8_E4M3 : L8_BF16;
    const float sa = fp8 ? 0.25f : 1.0f, sdv = fp8 ? 2.0f : 1.0f;
    /* the sum's error relative to S: f32, or FP8's fast accumulation on a GPU */
    const double acc = fp8 && strcmp(dev, "host") ? 2e-2 : 1e-5;
    mat A = mat_new(dt, M, K, K, &r, 2), B = mat_new(dt, N, K, K, &r, 2);
    mat bias = mat_new(L8_BF16, 1, N, N, &r, 1);
    mat D = mat_new(dd, M, N, N + 16, NULL, 0), X = mat_new(L8_BF16, M, N, N + 16, NULL, 0);
    dmat a = upload(ctx, &A, 1, sa), b = upload(ctx, &B, 1, 1), bv = upload_vec(ctx, &bias);
    dmat d = upload(ctx, &D, sdv, 1.0f / sdv), x = upload(ctx, &X, 1, 1);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view; g.bias = bv.view; g.aux = x.view;
    g.epilogue = L8_GEMM_EPI_BIAS_GELU_AUX;
    g.fast_accum = 1;
    L8_CK(l8_gemm(h, &g, NULL));
    L8_CK(l8_gemm(h, &g, NULL));  /* the plan's second call: pointers as set */
    float am = 0;
    if (fp8) {                    /* then without an amax: the meta's stays as set */
        L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(d.view), NULL, NULL, &am));
        L8_CK(l8_fp8_meta_set(l8_tensor_fp8_meta(d.view), sdv, 1.0f / sdv, -1.0f));
        g.skip_amax = 1;
        L8_CK(l8_gemm(h, &g, NULL));
    }
    uint8_t *dout = malloc(D.bytes), *xout = malloc(X.bytes);
    L8_CK(l8_tensor_copy_to_host(d.full, dout, D.bytes, NULL));
    L8_CK(l8_tensor_copy_to_host(x.full, xout, X.bytes, NULL));
    double gmax = 0, smax = 0, xmax = 0;   /* xmax: max |gelu(aux)|, the call's own u */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double u = 0, S = 0;
            for (int64_t k = 0; k < K; k++) {
                u += at(&A, i, k) * at(&B, j, k);
                S += fabs(at(&A, i, k) * at(&B, j, k));
            }
            u = u * sa + at(&bias, 0, j);
            S = S * sa + fabs(at(&bias, 0, j));
            double gu = gelu_d(u), want = gu * sdv;
            if (fp8 && fabs(want) > 448) want = want > 0 ? 448 : -448;
            gmax = fmax(gmax, fabs(gu));
            smax = fmax(smax, S);
            double xa = dec(L8_BF16, xout, (size_t)(i * X.ld + j));
            double got = dec(dd, dout, (size_t)(i * D.ld + j));
            xmax = fmax(xmax, fabs(gelu_d(xa)));
            ck_assert_msg(fabs(xa - u) <= ulp(L8_BF16, fabs(u)) + acc * S, "%s %s aux[%lld,%lld]"
                          " %g, u %g", dev, fp8 ? "fp8" : "bf16", (long long)i, (long long)j, xa, u);
            /* the output step at the larger of the two, and gelu's slope times u's error */
            double tol = ulp(dd, fmax(fabs(want), fabs(got))) + 1.2 * sdv * acc * S +
                         1e-6 * fabs(want);
            ck_assert_msg(fabs(got - want) <= tol, "%s %s D[%lld,%lld] %g, want %g (u %g)", dev,
                          fp8 ? "fp8" : "bf16", (long long)i, (long long)j, got, want, u);
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < D.ld; j++)
            ck_assert_msg(isnan(dec(dd, dout, (size_t)(i * D.ld + j))), "D padding written");
    if (fp8) {
        float meta = 0;
        L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(d.view), NULL, NULL, &meta));
        ck_assert_msg(fabs(am - gmax) <= 1e-3 * gmax + 1.2 * acc * smax, "%s amax %g, max"
                      " |gelu(u)| %g", dev, (double)am, gmax);
        /* tighter: against the GELU of the sums the call itself wrote to aux
         * (one bf16 rounding of u: at most 2^-8 of a large gelu) */
        ck_assert_msg(fabs(am - xmax) <= 6e-3 * xmax, "%s amax %g, max |gelu(aux)| %g", dev,
                      (double)am, xmax);
        ck_assert_msg(meta == -1.0f, "%s: D's meta amax written (%g) with skip_amax", dev,
                      (double)meta);
    }
    /* errors */
    l8_gemm_desc e = g;
    e.aux = NULL;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);        /* aux missing */
    e = g; e.epilogue = L8_GEMM_EPI_BIAS;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);        /* aux with another epilogue */
    e = g; e.aux = a.view;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);        /* aux's shape / dtype */
    e = g; e.aux = x.full;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);        /* aux (M, N + 16) */
    e = g; e.bias = NULL;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);        /* bias missing */
    e = g; e.skip_amax = 2;
    L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);
    if (!fp8) {
        e = g; e.skip_amax = 1;
        L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);    /* skip_amax with a bf16 D */
        e = g; e.beta = 1.0f;
        L8_CK_ST(l8_gemm(h, &e, NULL), L8_ERR_INVALID_ARG);    /* beta with the GELU */
    }
    free(dout); free(xout);
    dmat_free(&a); dmat_free(&b); dmat_free(&bv); dmat_free(&d); dmat_free(&x);
    free(A.img); free(B.img); free(bias.img); free(D.img); free(X.img);
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
}

START_TEST(test_host_gelu_aux) { gelu_aux_run("host", _i, 37, 48, 64); }
END_TEST

START_TEST(test_gpu_gelu_aux)
{
    static const int64_t sh[3][3] = { { 37, 48, 64 }, { 256, 512, 512 }, { 512, 1024, 784 + 16 } };
    gelu_aux_run("cuda:0", _i & 1, sh[_i >> 1][0], sh[_i >> 1][1], sh[_i >> 1][2]);
}
END_TEST

/* ---- L8_GEMM_EPI_DGELU_CAST: the GEMM and l8_fp8_cast_transpose_dact ---- */

/* One call with the epilogue against the two calls it stands for on the
 * same handle (small: its l8_gemm_config.small): l8_gemm without an
 * epilogue, then l8_fp8_cast_transpose_dact - D, cast and cast_t with their
 * padding, and the meta's amax (accumulated from 0.5) and scale_inv (from a
 * wrong 1), byte for byte. A dY8 (e5m2, scale_inv 0.5) x W8t (e4m3) dgrad,
 * or with bf16 a bf16 layer's (dY (M, K) x W (K, N), trans_b = 0), cast_t
 * (N, M) in rows of ldt (> M: row-padded). Returns the handle's fused calls
 * (l8_gemm_stats.small_fused) during the epilogue's call. */
static uint64_t dgelu_cast_run(const char *dev, int small, int bf16, int64_t M, int64_t N,
                               int64_t K, int64_t ldt, float beta)
{
    l8_ctx *ctx = make_ctx(dev);
    l8_gemm_handle *h = small_handle(ctx, 0, small);
    l8_rng r;
    l8_rng_init(&r, 0xd6e1 + (uint64_t)(M + 3 * N + 7 * K + ldt + bf16));
    mat A = bf16 ? mat_new(L8_BF16, M, K, K, &r, 1) : mat_new(L8_E5M2, M, K, K, &r, 2);
    mat B = bf16 ? mat_new(L8_BF16, K, N, N, &r, 1) : mat_new(L8_E4M3, N, K, K, &r, 2);
    mat D0 = mat_new(L8_BF16, M, N, N, &r, 1), X = mat_new(L8_BF16, M, N, N, &r, 3);
    mat C = mat_new(L8_E5M2, M, N, N, NULL, 0), CT = mat_new(L8_E5M2, N, M, ldt, NULL, 0);
    dmat a = upload(ctx, &A, 1, 0.5f), b = upload(ctx, &B, 1, 1), x = upload(ctx, &X, 1, 1);
    dmat d[2], c[2], ct[2];
    for (int k = 0; k < 2; k++) {
        d[k] = upload(ctx, &D0, 1, 1);
        c[k] = upload(ctx, &C, 1, 1);
        ct[k] = upload(ctx, &CT, 1, 1);
        l8_fp8_meta *m = l8_tensor_fp8_meta(c[k].view);
        L8_CK(l8_fp8_meta_set(m, 4.0f, 1.0f, 0.5f));
        L8_CK(l8_tensor_set_fp8_meta(ct[k].view, m));
    }
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d[0].view; g.beta = beta; g.trans_b = !bf16;
    g.epilogue = L8_GEMM_EPI_DGELU_CAST;
    g.aux = x.view; g.cast = c[0].view; g.cast_t = ct[0].view;
    uint64_t f0 = stats_of(h).small_fused;
    L8_CK(l8_gemm(h, &g, NULL));
    uint64_t fused = stats_of(h).small_fused - f0;
    l8_gemm_desc p = L8_GEMM_DESC_INIT;
    p.a = a.view; p.b = b.view; p.d = d[1].view; p.beta = beta; p.trans_b = !bf16;
    L8_CK(l8_gemm(h, &p, NULL));
    L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, d[1].view, x.view, c[1].view, ct[1].view,
                                     NULL, L8_CAST_ACCUMULATE_AMAX, NULL));
    static const char *const what[3] = { "D", "cast", "cast_t" };
    const dmat *got[3][2] = { { &d[0], &d[1] }, { &c[0], &c[1] }, { &ct[0], &ct[1] } };
    for (int k = 0; k < 3; k++) {     /* equal, and something written */
        char w[64];
        snprintf(w, sizeof w, "%s: %s", dev, what[k]);
        ck_assert_msg(l8t_same_bytes(got[k][0]->full, got[k][1]->full, w) > 0,
                      "%s: nothing written", w);
    }
    float v[2][3];
    for (int k = 0; k < 2; k++)
        L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(c[k].view), &v[k][0], &v[k][1], &v[k][2]));
    ck_assert_msg(memcmp(v[0], v[1], sizeof v[0]) == 0 && v[0][1] == 0.25f && v[0][2] > 0.5f,
                  "%s: meta scale %g scale_inv %g amax %g, want %g %g %g", dev, (double)v[0][0],
                  (double)v[0][1], (double)v[0][2], (double)v[1][0], (double)v[1][1],
                  (double)v[1][2]);
    for (int k = 0; k < 2; k++) {
        dmat_free(&d[k]); dmat_free(&c[k]); dmat_free(&ct[k]);
    }
    dmat_free(&a); dmat_free(&b); dmat_free(&x);
    free(A.img); free(B.img); free(D0.img); free(X.img); free(C.img); free(CT.img);
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
    return fused;
}

START_TEST(test_host_dgelu_cast)
{
    dgelu_cast_run("host", 0, 0, 37, 48, 64, 48, 0.0f);   /* cast_t row-padded */
    dgelu_cast_run("host", 0, 0, 32, 40, 96, 32, 1.0f);
    dgelu_cast_run("host", 0, 1, 40, 48, 10, 40, 0.0f);   /* bf16, K = 10 */
}
END_TEST

/* Where the small kernel takes the GEMM and the layout allows, one launch
 * (lean8-train's default model's fc2 dgrad first); where not, the same
 * bytes from the two calls. */
START_TEST(test_gpu_dgelu_cast)
{
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 0, 128, 256, 128, 128, 0.0f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 0, 40, 48, 96, 40, 0.5f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 0, 96, 64, 512, 96, 0.0f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 0, 37, 48, 64, 37, 0.0f), 0);   /* M % 8 */
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 0, 40, 48, 96, 48, 0.0f), 0);   /* padded */
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 0, 0, 128, 256, 128, 128, 0.0f), 0);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 0, 0, 256, 512, 512, 256, 0.0f), 0);
    /* bf16: lean8-train's heads (K = 16) in auto and with small 1, K = 10
     * and 32, beta; cuBLASLt's GEMM then the cast: auto above 2^27, K = 33,
     * small off, M % 8 */
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 2, 1, 128, 128, 16, 128, 0.0f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 2, 1, 256, 512, 16, 256, 0.0f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 1, 128, 128, 10, 128, 0.0f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 2, 1, 2056, 2048, 32, 2056, 0.0f), 0);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 1, 40, 48, 32, 40, 0.5f), 1);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 1, 64, 32, 33, 64, 0.0f), 0);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 0, 1, 128, 128, 10, 128, 0.0f), 0);
    ck_assert_uint_eq(dgelu_cast_run("cuda:0", 1, 1, 36, 48, 10, 36, 0.0f), 0);   /* M % 8 */
}
END_TEST

/* ---- argument checks ---- */

typedef struct errfix {
    l8_ctx *ctx, *other;
    l8_gemm_handle *h;
    l8_tensor *t[64];
    int n;
} errfix;

static l8_tensor *tens(errfix *f, l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols)
{
    int64_t shape[2] = { rows, cols };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, 2, shape, &t));
    /* fill with finite values so a call that wrongly runs does not trip on NaN */
    size_t nb = l8_tensor_nbytes(t);
    uint8_t *z = calloc(1, nb ? nb : 1);
    ck_assert_ptr_nonnull(z);
    L8_CK(l8_tensor_copy_from_host(t, z, nb, NULL));
    free(z);
    ck_assert_int_lt(f->n, 64);
    f->t[f->n++] = t;
    return t;
}

static l8_tensor *keep(errfix *f, l8_tensor *t)
{
    ck_assert_int_lt(f->n, 64);
    f->t[f->n++] = t;
    return t;
}

/* Expect st from l8_gemm with a reason in the last error, and no side effect
 * on the plan cache. */
static void expect(errfix *f, const l8_gemm_desc *g, l8_status want, const char *why)
{
    l8_gemm_stats before = stats_of(f->h);
    l8_error_clear();
    l8_status st = l8_gemm(f->h, g, NULL);
    ck_assert_msg(st == want, "%s: got %s (%s), wanted %s", why, l8_status_name(st),
                  l8_last_error_string(), l8_status_name(want));
    ck_assert_msg(strlen(l8_last_error()->message) > 10, "%s: no reason given", why);
    l8_gemm_stats after = stats_of(f->h);
    ck_assert_uint_eq(after.plans_created, before.plans_created);
    ck_assert_uint_eq(after.calls, before.calls);
}

START_TEST(test_host_argument_errors)
{
    errfix f = { 0 };
    f.ctx = make_ctx("host");
    f.other = make_ctx("host");
    f.h = make_handle(f.ctx, 0);
    l8_tensor *x8 = tens(&f, f.ctx, L8_E4M3, 32, 64), *w8 = tens(&f, f.ctx, L8_E4M3, 48, 64);
    l8_tensor *x5 = tens(&f, f.ctx, L8_E5M2, 32, 64), *w5 = tens(&f, f.ctx, L8_E5M2, 48, 64);
    l8_tensor *y16 = tens(&f, f.ctx, L8_BF16, 32, 48), *y32 = tens(&f, f.ctx, L8_F32, 32, 48);
    l8_tensor *xb = tens(&f, f.ctx, L8_BF16, 32, 64), *wb = tens(&f, f.ctx, L8_BF16, 48, 64);
    l8_tensor *wf = tens(&f, f.ctx, L8_F32, 48, 64);
    l8_tensor *y8 = tens(&f, f.ctx, L8_E4M3, 32, 48);
    l8_gemm_desc g = L8_GEMM_DESC_INIT, ok = L8_GEMM_DESC_INIT;
    ok.a = x8; ok.b = w8; ok.d = y16;
    L8_CK(l8_gemm(f.h, &ok, NULL));               /* the baseline is valid */

    ck_assert_int_eq(l8_gemm(NULL, &ok, NULL), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_gemm(f.h, NULL, NULL), L8_ERR_INVALID_ARG);
    g = ok; g.size = sizeof g - 1;       expect(&f, &g, L8_ERR_INVALID_ARG, "desc size");
    g = ok; g.sm_count = -1;             expect(&f, &g, L8_ERR_INVALID_ARG, "sm_count < 0");
    /* an older caller's desc ends before sm_count: what follows is not read */
    g = ok; g.size = offsetof(l8_gemm_desc, sm_count); g.sm_count = -7;
    L8_CK(l8_gemm(f.h, &g, NULL));
    g = ok; g.sm_count = 32;             /* ignored on a host context */
    L8_CK(l8_gemm(f.h, &g, NULL));
    g = ok; g.a = NULL;                  expect(&f, &g, L8_ERR_INVALID_ARG, "NULL a");
    g = ok; g.b = NULL;                  expect(&f, &g, L8_ERR_INVALID_ARG, "NULL b");
    g = ok; g.d = NULL;                  expect(&f, &g, L8_ERR_INVALID_ARG, "NULL d");
    g = ok; g.a = x5; g.b = w5;          expect(&f, &g, L8_ERR_UNSUPPORTED, "e5m2 x e5m2");
    g = ok; g.b = wb;                    expect(&f, &g, L8_ERR_UNSUPPORTED, "e4m3 x bf16");
    g = ok; g.a = xb; g.b = wf;          expect(&f, &g, L8_ERR_INVALID_ARG, "bf16 x f32 mismatch");
    g = ok; g.a = xb; g.b = wb; g.d = y8; expect(&f, &g, L8_ERR_UNSUPPORTED, "bf16 -> e4m3 D");
    g = ok; g.a = x5; g.b = w8; g.d = y16; L8_CK(l8_gemm(f.h, &g, NULL));  /* e5m2 x e4m3 is fine */
    {   /* an E5M2 D needs an E5M2 input */
        l8_tensor *y5 = tens(&f, f.ctx, L8_E5M2, 32, 48);
        g = ok; g.d = y5;                expect(&f, &g, L8_ERR_UNSUPPORTED, "e4m3 x e4m3 -> e5m2");
    }
    g = ok; g.trans_b = 0;               expect(&f, &g, L8_ERR_INVALID_ARG, "K mismatch (48 vs 64)");
    {   /* FP8 with a transposed layout: (K,M) x (K,N), shapes chain but the layout is NN/TN */
        l8_tensor *at = tens(&f, f.ctx, L8_E4M3, 64, 32), *bt = tens(&f, f.ctx, L8_E4M3, 64, 48);
        g = ok; g.a = at; g.trans_a = 1;  expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 trans_a = 1");
        g = ok; g.b = bt; g.trans_b = 0;  expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 trans_b = 0");
    }
    {   /* K % 16 != 0 */
        l8_tensor *xk = tens(&f, f.ctx, L8_E4M3, 32, 40), *wk = tens(&f, f.ctx, L8_E4M3, 48, 40);
        g = ok; g.a = xk; g.b = wk;      expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 K = 40");
    }
    {   /* leading dimension not a multiple of 16 bytes: a (32, 64) view of (32, 72) rows */
        l8_tensor *wide = tens(&f, f.ctx, L8_E4M3, 32, 72), *v = NULL;
        L8_CK(l8_tensor_narrow(wide, 1, 0, 64, &v));
        keep(&f, v);
        g = ok; g.a = v;                 expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 lda = 72");
        /* misaligned pointer: columns 1..64 of (32, 80) rows: ld 80 is fine, the pointer is not */
        l8_tensor *wider = tens(&f, f.ctx, L8_E4M3, 32, 80), *v2 = NULL;
        L8_CK(l8_tensor_narrow(wider, 1, 1, 64, &v2));
        keep(&f, v2);
        g = ok; g.a = v2;                expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 pointer + 1");
    }
    {   /* N = 44: 44 * 2 bytes is not a multiple of 16 for a bf16 D */
        l8_tensor *wn = tens(&f, f.ctx, L8_E4M3, 44, 64), *yn = tens(&f, f.ctx, L8_BF16, 32, 44);
        g = ok; g.b = wn; g.d = yn;      expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 N = 44");
    }
    g = ok; g.d = y8; g.beta = 1.0f;     expect(&f, &g, L8_ERR_UNSUPPORTED, "FP8 D with beta");
    g = ok; g.d = y32;
    g.d = tens(&f, f.ctx, L8_F32, 31, 48); expect(&f, &g, L8_ERR_INVALID_ARG, "D rows");
    {
        int64_t s1[1] = { 64 };
        l8_tensor *v1 = NULL;
        L8_CK(l8_tensor_empty(f.ctx, L8_E4M3, 1, s1, &v1));
        keep(&f, v1);
        g = ok; g.a = v1;                expect(&f, &g, L8_ERR_INVALID_ARG, "1-D a");
        l8_tensor *tr = NULL;           /* a transposed view: inner stride != 1 */
        L8_CK(l8_tensor_transpose(tens(&f, f.ctx, L8_BF16, 64, 32), 0, 1, &tr));
        keep(&f, tr);
        g = ok; g.a = tr; g.b = wb;      expect(&f, &g, L8_ERR_INVALID_ARG, "inner stride");
    }
    g = ok; g.trans_a = 2;               expect(&f, &g, L8_ERR_INVALID_ARG, "trans_a = 2");
    g = ok; g.alpha = NAN;               expect(&f, &g, L8_ERR_INVALID_ARG, "alpha NaN");
    g = ok; g.beta = INFINITY;           expect(&f, &g, L8_ERR_INVALID_ARG, "beta inf");
    g = ok; g.epilogue = (l8_gemm_epilogue)7; expect(&f, &g, L8_ERR_INVALID_ARG, "epilogue 7");
    {
        int64_t n48 = 48, n32 = 32;
        l8_tensor *bias = NULL, *bias32 = NULL, *biasf = NULL, *biasb32 = NULL;
        L8_CK(l8_tensor_empty(f.ctx, L8_BF16, 1, &n48, &bias)); keep(&f, bias);
        uint16_t ones[48];
        for (int i = 0; i < 48; i++) ones[i] = l8_bf16_from_f32(1.0f);
        L8_CK(l8_tensor_copy_from_host(bias, ones, sizeof ones, NULL));
        L8_CK(l8_tensor_empty(f.ctx, L8_BF16, 1, &n32, &bias32)); keep(&f, bias32);
        L8_CK(l8_tensor_empty(f.ctx, L8_F32, 1, &n48, &biasf)); keep(&f, biasf);
        L8_CK(l8_tensor_empty(f.ctx, L8_BF16, 1, &n32, &biasb32)); keep(&f, biasb32);
        g = ok; g.bias = bias;           expect(&f, &g, L8_ERR_INVALID_ARG, "bias with no epilogue");
        g = ok; g.epilogue = L8_GEMM_EPI_BIAS; expect(&f, &g, L8_ERR_INVALID_ARG, "bias missing");
        g.bias = bias32;                 expect(&f, &g, L8_ERR_INVALID_ARG, "bias length");
        g.bias = biasf;                  expect(&f, &g, L8_ERR_INVALID_ARG, "FP8 bias f32");
        g.bias = bias;                   L8_CK(l8_gemm(f.h, &g, NULL));
        g = ok; g.epilogue = L8_GEMM_EPI_DBIAS_A; g.bias = biasb32;
        expect(&f, &g, L8_ERR_UNSUPPORTED, "dbias with FP8");
        g = ok; g.a = xb; g.b = wb; g.epilogue = L8_GEMM_EPI_DBIAS_A; g.bias = biasb32;
        L8_CK(l8_gemm(f.h, &g, NULL));
        g.alpha = 2.0f;                  expect(&f, &g, L8_ERR_UNSUPPORTED, "dbias with alpha 2");
    }
    {   /* D overlapping A in one storage */
        l8_tensor *big = tens(&f, f.ctx, L8_BF16, 64, 64), *top = NULL, *bot = NULL, *mid = NULL;
        L8_CK(l8_tensor_narrow(big, 0, 0, 32, &top)); keep(&f, top);
        L8_CK(l8_tensor_narrow(big, 0, 32, 32, &bot)); keep(&f, bot);
        L8_CK(l8_tensor_narrow(big, 0, 16, 32, &mid)); keep(&f, mid);
        l8_tensor *w = tens(&f, f.ctx, L8_BF16, 64, 64);
        g = ok; g.a = top; g.b = w; g.d = mid; expect(&f, &g, L8_ERR_INVALID_ARG, "D overlaps A");
        g.d = bot;                        L8_CK(l8_gemm(f.h, &g, NULL));  /* disjoint halves */
    }
    {   /* another context's tensor or stream */
        l8_tensor *xo = tens(&f, f.other, L8_E4M3, 32, 64);
        g = ok; g.a = xo;                expect(&f, &g, L8_ERR_INVALID_ARG, "tensor of another ctx");
        l8_status st = l8_gemm(f.h, &ok, l8_ctx_stream(f.other, L8_STREAM_COMPUTE));
        ck_assert_int_eq(st, L8_ERR_INVALID_ARG);
    }
    {   /* handle configuration */
        l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
        l8_gemm_handle *h2 = NULL;
        static const int bad_autotune[] = { 5, 3, -2 };
        for (size_t i = 0; i < sizeof bad_autotune / sizeof bad_autotune[0]; i++) {
            cfg.autotune = bad_autotune[i];
            ck_assert_int_eq(l8_gemm_handle_create(f.ctx, &cfg, &h2), L8_ERR_INVALID_ARG);
            ck_assert_ptr_null(h2);
        }
        cfg = (l8_gemm_config)L8_GEMM_CONFIG_INIT;
        cfg.size = 4;            /* smaller than the size field itself */
        ck_assert_int_eq(l8_gemm_handle_create(f.ctx, &cfg, &h2), L8_ERR_INVALID_ARG);
        ck_assert_int_eq(l8_gemm_handle_create(NULL, NULL, &h2), L8_ERR_INVALID_ARG);
        ck_assert_int_eq(l8_gemm_handle_create(f.ctx, NULL, NULL), L8_ERR_INVALID_ARG);
        l8_gemm_stats s = { .size = 4 };
        ck_assert_int_eq(l8_gemm_get_stats(f.h, &s), L8_ERR_INVALID_ARG);
        l8_gemm_handle_destroy(NULL);
    }
    for (int i = 0; i < f.n; i++) l8_tensor_destroy(f.t[i]);
    l8_gemm_handle_destroy(f.h);
    l8_ctx_destroy(f.other);
    l8_ctx_destroy(f.ctx);
}
END_TEST

/* L8_GEMM_EPI_DGELU_CAST's refusals: nothing is enqueued, no plan made. */
static l8_tensor *with_meta(errfix *f, l8_tensor *t, l8_fp8_meta *m)
{
    L8_CK(l8_tensor_set_fp8_meta(t, m));
    (void)f;
    return t;
}

START_TEST(test_host_dgelu_cast_errors)
{
    errfix f = { 0 };
    f.ctx = make_ctx("host");
    f.h = make_handle(f.ctx, 0);
    l8_fp8_meta *m = NULL, *m2 = NULL;
    L8_CK(l8_fp8_meta_create(f.ctx, &m));
    L8_CK(l8_fp8_meta_create(f.ctx, &m2));
    l8_tensor *a8 = tens(&f, f.ctx, L8_E5M2, 32, 64), *b8 = tens(&f, f.ctx, L8_E4M3, 48, 64);
    l8_tensor *d = tens(&f, f.ctx, L8_BF16, 32, 48), *x = tens(&f, f.ctx, L8_BF16, 32, 48);
    l8_tensor *c = with_meta(&f, tens(&f, f.ctx, L8_E5M2, 32, 48), m);
    l8_tensor *ct = with_meta(&f, tens(&f, f.ctx, L8_E5M2, 48, 32), m);
    l8_tensor *ct2 = with_meta(&f, tens(&f, f.ctx, L8_E5M2, 48, 32), m2);
    l8_tensor *ct4 = with_meta(&f, tens(&f, f.ctx, L8_E4M3, 48, 32), m);
    l8_tensor *cw = with_meta(&f, tens(&f, f.ctx, L8_E5M2, 32, 40), m);
    l8_tensor *x32 = tens(&f, f.ctx, L8_F32, 32, 48), *d8 = tens(&f, f.ctx, L8_E5M2, 32, 48);
    L8_CK(l8_tensor_set_fp8_meta(d8, m2));
    l8_tensor *dbig = tens(&f, f.ctx, L8_BF16, 32, 64), *dv = NULL;
    L8_CK(l8_tensor_narrow(dbig, 1, 0, 48, &dv));     /* D (32, 48) in rows of 64 */
    keep(&f, dv);
    l8_gemm_desc ok = L8_GEMM_DESC_INIT, g;
    ok.a = a8; ok.b = b8; ok.d = d;
    ok.epilogue = L8_GEMM_EPI_DGELU_CAST;
    ok.aux = x; ok.cast = c; ok.cast_t = ct;
    L8_CK(l8_gemm(f.h, &ok, NULL));               /* the baseline is valid */
    g = ok; g.aux = NULL;      expect(&f, &g, L8_ERR_INVALID_ARG, "dgelu_cast without aux");
    g = ok; g.cast = NULL;     expect(&f, &g, L8_ERR_INVALID_ARG, "dgelu_cast without cast");
    g = ok; g.cast_t = NULL;   expect(&f, &g, L8_ERR_INVALID_ARG, "dgelu_cast without cast_t");
    g = ok; g.epilogue = L8_GEMM_EPI_NONE; g.aux = NULL;
    expect(&f, &g, L8_ERR_INVALID_ARG, "cast with epilogue none");
    g = ok; g.epilogue = L8_GEMM_EPI_NONE; g.aux = NULL; g.cast = NULL;
    expect(&f, &g, L8_ERR_INVALID_ARG, "cast_t with epilogue none");
    g = ok; g.cast_t = ct2;    expect(&f, &g, L8_ERR_INVALID_ARG, "cast_t with another meta");
    g = ok; g.cast_t = ct4;    expect(&f, &g, L8_ERR_INVALID_ARG, "cast_t of another format");
    g = ok; g.cast = cw;       expect(&f, &g, L8_ERR_INVALID_ARG, "cast of another shape");
    g = ok; g.cast_t = c;      expect(&f, &g, L8_ERR_INVALID_ARG, "cast_t not transposed");
    g = ok; g.aux = x32;       expect(&f, &g, L8_ERR_INVALID_ARG, "aux of another dtype");
    g = ok; g.aux = d;         expect(&f, &g, L8_ERR_INVALID_ARG, "aux is D");
    g = ok; g.d = dv;          expect(&f, &g, L8_ERR_INVALID_ARG, "D not contiguous");
    g = ok; g.d = d8;          expect(&f, &g, L8_ERR_UNSUPPORTED, "an FP8 D");
    g = ok; g.bias = x;        expect(&f, &g, L8_ERR_INVALID_ARG, "bias with dgelu_cast");
    {   /* cast inside D's storage */
        l8_tensor *both = tens(&f, f.ctx, L8_BF16, 64, 48), *lo = NULL;
        L8_CK(l8_tensor_narrow(both, 0, 0, 32, &lo));
        keep(&f, lo);
        g = ok; g.d = lo;
        l8_tensor *cd = NULL;
        int64_t sh[2] = { 32, 48 };
        L8_CK(l8_tensor_from_storage(l8_tensor_storage(both), 0, L8_E5M2, 2, sh, NULL, &cd));
        keep(&f, with_meta(&f, cd, m));
        g.cast = cd;           expect(&f, &g, L8_ERR_INVALID_ARG, "cast overlaps D");
    }
    /* an older caller's desc ends before cast: the epilogue needs what it lacks */
    g = ok; g.size = offsetof(l8_gemm_desc, cast);
    expect(&f, &g, L8_ERR_INVALID_ARG, "dgelu_cast in a desc without cast");
    g = ok; g.epilogue = L8_GEMM_EPI_NONE; g.aux = NULL; g.size = offsetof(l8_gemm_desc, cast);
    L8_CK(l8_gemm(f.h, &g, NULL));                /* cast / cast_t past its end: not read */
    for (int i = 0; i < f.n; i++) l8_tensor_destroy(f.t[i]);
    l8_fp8_meta_release(m);
    l8_fp8_meta_release(m2);
    l8_gemm_handle_destroy(f.h);
    l8_ctx_destroy(f.ctx);
}
END_TEST

/* A failed call writes nothing: D keeps its poison. */
START_TEST(test_host_failed_call_writes_nothing)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_handle *h = make_handle(ctx, 0);
    l8_rng r;
    l8_rng_init(&r, 77);
    mat A = mat_new(L8_E5M2, 16, 32, 32, &r, 2), B = mat_new(L8_E5M2, 16, 32, 32, &r, 2);
    mat D = mat_new(L8_BF16, 16, 16, 16, NULL, 0);
    dmat a = upload(ctx, &A, 1, 1), b = upload(ctx, &B, 1, 1), d = upload(ctx, &D, 1, 1);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view;
    ck_assert_int_eq(l8_gemm(h, &g, NULL), L8_ERR_UNSUPPORTED);
    uint8_t *out = malloc(D.bytes);
    ck_assert_ptr_nonnull(out);
    L8_CK(l8_tensor_copy_to_host(d.full, out, D.bytes, NULL));
    ck_assert(memcmp(out, D.img, D.bytes) == 0);
    free(out);
    dmat_free(&a); dmat_free(&b); dmat_free(&d);
    free(A.img); free(B.img); free(D.img);
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

/* ---- the plan cache ---- */

static void run_shape(l8_ctx *ctx, l8_gemm_handle *h, int64_t M, int64_t N, int64_t K, int64_t ldb)
{
    l8_rng r;
    l8_rng_init(&r, (uint64_t)(M * 1000003 + N * 1009 + K));
    mat A = mat_new(L8_BF16, M, K, K, &r, 1), B = mat_new(L8_BF16, N, K, ldb, &r, 1);
    mat D = mat_new(L8_BF16, M, N, N, NULL, 0);
    dmat a = upload(ctx, &A, 1, 1), b = upload(ctx, &B, 1, 1), d = upload(ctx, &D, 1, 1);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view;
    L8_CK(l8_gemm(h, &g, NULL));
    dmat_free(&a); dmat_free(&b); dmat_free(&d);
    free(A.img); free(B.img); free(D.img);
}

START_TEST(test_host_plan_cache)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    cfg.max_plans = 3;
    cfg.autotune = 0;
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    ck_assert_int_eq(l8_gemm_autotune_enabled(h), 0);
    run_shape(ctx, h, 8, 8, 8, 8);
    l8_gemm_stats s = stats_of(h);
    ck_assert_uint_eq(s.plans_created, 1);
    ck_assert_uint_eq(s.plan_hits, 0);
    run_shape(ctx, h, 8, 8, 8, 8);                 /* same key: a hit, no new plan */
    s = stats_of(h);
    ck_assert_uint_eq(s.plans_created, 1);
    ck_assert_uint_eq(s.plan_hits, 1);
    ck_assert_uint_eq(s.calls, 2);
    run_shape(ctx, h, 8, 8, 8, 12);                /* another leading dimension: a new plan */
    run_shape(ctx, h, 9, 8, 8, 8);                 /* another M: a new plan */
    s = stats_of(h);
    ck_assert_uint_eq(s.plans_created, 3);
    ck_assert_uint_eq(s.plans_cached, 3);
    ck_assert_uint_eq(s.cache_flushes, 0);
    run_shape(ctx, h, 10, 8, 8, 8);                /* the cache is full: emptied, then 1 */
    s = stats_of(h);
    ck_assert_uint_eq(s.cache_flushes, 1);
    ck_assert_uint_eq(s.plans_cached, 1);
    run_shape(ctx, h, 8, 8, 8, 8);                 /* flushed earlier: built again */
    s = stats_of(h);
    ck_assert_uint_eq(s.plans_created, 5);
    ck_assert_uint_eq(s.plan_hits, 1);
    ck_assert_uint_eq(s.autotuned, 0);
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_host_autotune_switch)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    l8_gemm_handle *h = NULL;
    setenv("L8_GEMM_AUTOTUNE", "1", 1);
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));   /* autotune = -1: from the environment */
    ck_assert_int_eq(l8_gemm_autotune_enabled(h), 1);
    l8_gemm_handle_destroy(h);
    unsetenv("L8_GEMM_AUTOTUNE");
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    ck_assert_int_eq(l8_gemm_autotune_enabled(h), 0);
    l8_gemm_handle_destroy(h);
    cfg.autotune = 1;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    ck_assert_int_eq(l8_gemm_autotune_enabled(h), 1);
    run_shape(ctx, h, 4, 4, 4, 4);                 /* the host has nothing to tune */
    ck_assert_uint_eq(stats_of(h).autotuned, 0);
    l8_gemm_handle_destroy(h);
    /* mode 2: from the config and from the environment; -1 with "0" or junk is off */
    cfg.autotune = 2;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    ck_assert_int_eq(l8_gemm_autotune_enabled(h), 2);
    run_shape(ctx, h, 4, 4, 4, 4);
    l8_gemm_stats st = stats_of(h);
    ck_assert_uint_eq(st.autotuned, 0);
    ck_assert_uint_eq(st.search_candidates, 0);
    l8_gemm_handle_destroy(h);
    cfg.autotune = -1;
    static const struct { const char *env; int want; } envs[] = {
        { "2", 2 }, { "1", 1 }, { "0", 0 }, { "yes", 0 }, { "", 0 },
    };
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        setenv("L8_GEMM_AUTOTUNE", envs[i].env, 1);
        L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
        ck_assert_msg(l8_gemm_autotune_enabled(h) == envs[i].want, "L8_GEMM_AUTOTUNE=\"%s\": %d",
                      envs[i].env, l8_gemm_autotune_enabled(h));
        l8_gemm_handle_destroy(h);
    }
    unsetenv("L8_GEMM_AUTOTUNE");
    ck_assert_int_eq(l8_gemm_autotune_enabled(NULL), 0);
    l8_ctx_destroy(ctx);
}
END_TEST

/* The small kernel's mode (l8i_gemm_small_mode): l8_gemm_config.small 0, 1
 * and 2 (auto) whatever L8_GEMM_SMALL says; -1 (the default) from the
 * variable, "0", "1", "auto" or unset (auto). A small outside -1..2, or
 * another value of the variable under -1, is refused by name on every
 * backend, and nothing is created. */
START_TEST(test_host_small_mode)
{
    static const struct { int cfg; const char *env; int mode; } ok[] = {
        { 0, NULL, 0 }, { 1, NULL, 1 }, { 2, NULL, 2 },
        { 0, "1", 0 }, { 1, "0", 1 }, { 2, "1", 2 }, { 1, "yes", 1 },
        { -1, NULL, 2 }, { -1, "auto", 2 }, { -1, "0", 0 }, { -1, "1", 1 },
    };
    l8_ctx *ctx = make_ctx("host");
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (ok[i].env) ck_assert_int_eq(setenv("L8_GEMM_SMALL", ok[i].env, 1), 0);
        else unsetenv("L8_GEMM_SMALL");
        int got = 99;
        L8_CK(l8i_gemm_small_mode(ok[i].cfg, &got));
        ck_assert_msg(got == ok[i].mode, "small %d, L8_GEMM_SMALL %s: mode %d, not %d", ok[i].cfg,
                      ok[i].env ? ok[i].env : "unset", got, ok[i].mode);
        l8_gemm_handle_destroy(small_handle(ctx, 0, ok[i].cfg));
    }
    unsetenv("L8_GEMM_SMALL");
    l8_gemm_handle *h = NULL;
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    ck_assert_int_eq(cfg.small, -1);
    static const int bad_cfg[] = { -2, 3, 100 };
    for (size_t i = 0; i < sizeof bad_cfg / sizeof bad_cfg[0]; i++) {
        cfg.small = bad_cfg[i];
        l8_status st = l8_gemm_handle_create(ctx, &cfg, &h);
        ck_assert_msg(st == L8_ERR_INVALID_ARG, "small %d: status %d", bad_cfg[i], (int)st);
        ck_assert_ptr_null(h);
        ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "small is"));
    }
    static const char *const bad[] = { "2", "", "yes", "01", "auto " };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(setenv("L8_GEMM_SMALL", bad[i], 1), 0);
        l8_status st = l8_gemm_handle_create(ctx, NULL, &h);
        unsetenv("L8_GEMM_SMALL");
        ck_assert_msg(st == L8_ERR_INVALID_ARG, "L8_GEMM_SMALL=\"%s\": status %d", bad[i], (int)st);
        ck_assert_ptr_null(h);
        ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "L8_GEMM_SMALL"));
    }
    l8_ctx_destroy(ctx);
}
END_TEST

/* Which calls the small kernel takes (l8i_gemm_small_takes: the policy of
 * ops/gemm.h, a pure function of an analyzed problem, checked without a
 * GPU): mode 0 none, 1 every call that fits, auto (2) the FP8 ones with a
 * grid of at most half the SMs and K <= 512, the short-K bf16 ones up to
 * 2^27. */
START_TEST(test_host_small_policy)
{
    problem base;
    memset(&base, 0, sizeof base);
    base.fp8 = 1;
    base.dt_a = base.dt_b = L8_E4M3;
    base.dt_d = L8_BF16;
    base.tb = 1;
    base.m = 128; base.n = 256; base.k = 128;     /* 4 x 8 = 32 tiles */
    base.epi = L8_GEMM_EPI_NONE;
    problem p = base;
    ck_assert_int_eq(l8i_gemm_small_takes(0, 132, &p), 0);
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 1);
    ck_assert_int_eq(l8i_gemm_small_takes(2, 64, &p), 1);      /* 2 x 32 <= 64 */
    ck_assert_int_eq(l8i_gemm_small_takes(2, 63, &p), 0);
    p.m = 256; p.n = 512; p.k = 512;                            /* 128 tiles */
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 0);
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    p = base; p.k = 784;                                        /* K above 512 */
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 0);
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    p = base; p.m = 512; p.n = 512; p.k = 512;                  /* 2^27: the limit */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    p.k = 528;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p = base; p.dt_d = L8_F32; p.dt_a = L8_E5M2;
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 1);
    p.n = 20;                                                   /* f32 D: N % 4 only */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p = base; p.dt_d = L8_F16;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p = base; p.d_fp8 = 1; p.dt_d = L8_E4M3;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p = base; p.epi = L8_GEMM_EPI_BIAS;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p = base; p.fp8 = 0; p.dt_a = p.dt_b = L8_BF16;             /* bf16: K above 32 */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p.m = 256; p.n = 512; p.k = 16; p.ldd = 512;                /* lean8-train's head dgrad */
    ck_assert_int_eq(l8i_gemm_small_takes(0, 132, &p), 0);
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 1);     /* auto: 128 tiles, any SMs */
    ck_assert_int_eq(l8i_gemm_small_takes(2, 8, &p), 1);
    p.k = 32; p.m = 2048; p.n = 2048; p.ldd = 2048;             /* 2^27: the limit */
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 1);
    p.m = 2056;
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 0);
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 1);
    p.m = 256; p.n = 512; p.ldd = 512; p.k = 33;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p.k = 10; p.n = 510; p.ldd = 510;                           /* N % 4 */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p.n = 512; p.ldd = 514;                                     /* D's rows */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p.ldd = 512; p.dt_d = L8_F32;                               /* D bf16 only */
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
    p.dt_d = L8_BF16; p.epi = L8_GEMM_EPI_BIAS;
    ck_assert_int_eq(l8i_gemm_small_takes(2, 132, &p), 0);
    p = base; p.m = 0;
    ck_assert_int_eq(l8i_gemm_small_takes(1, 132, &p), 0);
}
END_TEST

/* l8_gemm_describe finds the plan of a call already made, and only that. */
START_TEST(test_host_describe)
{
    l8_ctx *ctx = make_ctx("host");
    l8_gemm_handle *h = make_handle(ctx, 0);
    l8_rng r;
    l8_rng_init(&r, 0xde5c);
    mat A = mat_new(L8_BF16, 8, 16, 16, &r, 1), B = mat_new(L8_BF16, 4, 16, 16, &r, 1);
    mat D = mat_new(L8_BF16, 8, 4, 4, NULL, 0);
    dmat a = upload(ctx, &A, 1, 1), b = upload(ctx, &B, 1, 1), d = upload(ctx, &D, 1, 1);
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view;
    char buf[64];
    memset(buf, 'x', sizeof buf);
    L8_CK_ST(l8_gemm_describe(h, &g, buf, sizeof buf), L8_ERR_STATE);   /* not run yet */
    ck_assert_str_eq(buf, "");
    L8_CK(l8_gemm(h, &g, NULL));
    L8_CK(l8_gemm_describe(h, &g, buf, sizeof buf));
    ck_assert_str_eq(buf, "host reference");
    L8_CK(l8_gemm_describe(h, &g, buf, 5));                            /* truncated */
    ck_assert_str_eq(buf, "host");
    l8_tensor *a4 = NULL, *d4 = NULL;              /* another M: another key, no plan */
    L8_CK(l8_tensor_narrow(a.view, 0, 0, 4, &a4));
    L8_CK(l8_tensor_narrow(d.view, 0, 0, 4, &d4));
    g.a = a4; g.d = d4;
    L8_CK_ST(l8_gemm_describe(h, &g, buf, sizeof buf), L8_ERR_STATE);
    g.a = d.view; g.trans_a = 1;                   /* shapes that do not chain: l8_gemm's error */
    L8_CK_ST(l8_gemm_describe(h, &g, buf, sizeof buf), L8_ERR_INVALID_ARG);
    l8_tensor_destroy(a4);
    l8_tensor_destroy(d4);
    g = (l8_gemm_desc)L8_GEMM_DESC_INIT;
    g.a = a.view; g.b = b.view; g.d = d.view;
    L8_CK_ST(l8_gemm_describe(h, &g, NULL, 8), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gemm_describe(h, &g, buf, 0), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gemm_describe(NULL, &g, buf, sizeof buf), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_gemm_describe(h, NULL, buf, sizeof buf), L8_ERR_INVALID_ARG);
    g.size = 8;
    L8_CK_ST(l8_gemm_describe(h, &g, buf, sizeof buf), L8_ERR_INVALID_ARG);
    ck_assert_uint_eq(stats_of(h).calls, 1);       /* describing counts nothing */
    dmat_free(&a); dmat_free(&b); dmat_free(&d);
    free(A.img); free(B.img); free(D.img);
    l8_gemm_handle_destroy(h);
    l8_ctx_destroy(ctx);
}
END_TEST

/* ---- the configuration search's enumeration (pure: made-up capabilities) ---- */

static l8i_algo_cfg cfg_of(int32_t id, uint32_t tile, uint32_t stages, uint16_t cluster)
{
    l8i_algo_cfg c;
    memset(&c, 0, sizeof c);
    c.id = id;
    c.tile = tile;
    c.stages = stages;
    c.splitk = 1;
    c.cluster = cluster;
    return c;
}

static l8i_algo_caps caps_of(int swizzle, int32_t custom_max, int32_t splitk, uint32_t red_mask)
{
    static const uint32_t tiles[] = { 10, 20, 24, 30, 40, 50, 60, 70, 80 };
    static const uint32_t stages[] = { 16, 17, 18, 35 };
    l8i_algo_caps cp;
    memset(&cp, 0, sizeof cp);
    cp.n_tiles = (int)(sizeof tiles / sizeof tiles[0]);
    memcpy(cp.tiles, tiles, sizeof tiles);
    cp.n_stages = (int)(sizeof stages / sizeof stages[0]);
    memcpy(cp.stages, stages, sizeof stages);
    cp.swizzle = (uint32_t)swizzle;
    cp.custom_max = custom_max;
    cp.splitk = splitk;
    cp.reduction_mask = red_mask;
    return cp;
}

/* Fields in which a and b differ. */
static int cfg_diff(const l8i_algo_cfg *a, const l8i_algo_cfg *b)
{
    return (a->id != b->id) + (a->tile != b->tile) + (a->stages != b->stages) +
           (a->splitk != b->splitk) + (a->reduction != b->reduction) + (a->swizzle != b->swizzle) +
           (a->custom != b->custom) + (a->inner != b->inner) + (a->cluster != b->cluster);
}

#define RAW_MAX L8I_TUNE_MAX_RAW

START_TEST(test_host_tune_enumerate)
{
    static l8i_tune_variant v[RAW_MAX], w[RAW_MAX];
    l8i_algo_cfg base[2] = { cfg_of(66, 24, 18, CUBLASLT_CLUSTER_SHAPE_2x1x1),
                             cfg_of(66, 40, 17, CUBLASLT_CLUSTER_SHAPE_1x2x1) };
    l8i_algo_caps caps[2] = { caps_of(1, 2, 1, CUBLASLT_REDUCTION_SCHEME_MASK),
                              caps_of(1, 2, 1, CUBLASLT_REDUCTION_SCHEME_MASK) };
    l8i_tune_rules r = { 4096, 0 };

    /* one base: every variant differs from it in one knob, or two (cluster
     * and swizzle); none twice; the classes in their order */
    int n = l8i_tune_enumerate(base, caps, 1, NULL, 0, &r, v, RAW_MAX);
    /* 6 clusters + 1 swizzle + 6 tiles + 3 stages + 6 cluster-swizzle + 2 custom; no
     * split at K 4096 */
    ck_assert_int_eq(n, 6 + 1 + 6 + 3 + 6 + 2);
    for (int i = 0; i < n; i++) {
        int d = cfg_diff(&v[i].cfg, &base[0]);
        ck_assert_int_eq(v[i].base, 0);
        ck_assert_msg(d == 1 || (d == 2 && v[i].cfg.swizzle != base[0].swizzle &&
                                 v[i].cfg.cluster != base[0].cluster),
                      "variant %d: %d knobs", i, d);
        ck_assert_int_eq(v[i].cfg.splitk, 1);
        for (int j = 0; j < i; j++) ck_assert(!l8i_algo_cfg_equal(&v[i].cfg, &v[j].cfg));
    }
    for (int i = 0; i < 6; i++) ck_assert_uint_ne(v[i].cfg.cluster, base[0].cluster);
    ck_assert_uint_eq(v[6].cfg.swizzle, 1);
    /* tiles nearest to 24 first: 20, 30, 10, 40, then 50, 60 */
    static const uint32_t want_tiles[] = { 20, 30, 10, 40, 50, 60 };
    for (int i = 0; i < 6; i++) ck_assert_uint_eq(v[7 + i].cfg.tile, want_tiles[i]);
    static const uint32_t want_stages[] = { 17, 35, 16 };
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(v[13 + i].cfg.stages, want_stages[i]);
    ck_assert_uint_eq(v[n - 2].cfg.custom, 1);
    ck_assert_uint_eq(v[n - 1].cfg.custom, 2);

    /* max keeps the first ones; known configurations are left out */
    ck_assert_int_eq(l8i_tune_enumerate(base, caps, 1, NULL, 0, &r, w, 5), 5);
    for (int i = 0; i < 5; i++) ck_assert(l8i_algo_cfg_equal(&w[i].cfg, &v[i].cfg));
    l8i_algo_cfg known[2] = { v[6].cfg, v[7].cfg };
    int nk = l8i_tune_enumerate(base, caps, 1, known, 2, &r, w, RAW_MAX);
    ck_assert_int_eq(nk, n - 2);
    for (int i = 0; i < nk; i++)
        ck_assert(!l8i_algo_cfg_equal(&w[i].cfg, &known[0]) &&
                  !l8i_algo_cfg_equal(&w[i].cfg, &known[1]));

    /* two bases one cluster shape apart, both known (as the heuristic's
     * results are): base 0's variants first, then only those of base 1 that
     * base 0 did not produce. Base 0: 5 clusters (not 1x2: base 1), swizzle,
     * 6 tiles, 3 stages, 6 cluster+swizzle, 2 custom = 23. Base 1: its
     * clusters, swizzle and cluster+swizzle variants are all base 0's or
     * base 0 itself; its 6 tiles, 3 stages and 2 custom options are new. */
    base[1] = base[0];
    base[1].cluster = CUBLASLT_CLUSTER_SHAPE_1x2x1;
    int n2 = l8i_tune_enumerate(base, caps, 2, base, 2, &r, w, RAW_MAX);
    ck_assert_int_eq(n2, 23 + 11);
    for (int i = 0; i < n2; i++) {
        ck_assert_int_eq(w[i].base, i < 23 ? 0 : 1);
        ck_assert(!l8i_algo_cfg_equal(&w[i].cfg, &base[0]) &&
                  !l8i_algo_cfg_equal(&w[i].cfg, &base[1]));
        for (int j = 0; j < i; j++) ck_assert(!l8i_algo_cfg_equal(&w[i].cfg, &w[j].cfg));
        if (i >= 23) ck_assert_uint_eq(w[i].cfg.cluster, CUBLASLT_CLUSTER_SHAPE_1x2x1);
    }

    /* no swizzling support, no custom options, no tiles or stages: clusters only */
    l8i_algo_caps bare;
    memset(&bare, 0, sizeof bare);
    ck_assert_int_eq(l8i_tune_enumerate(base, &bare, 1, NULL, 0, &r, w, RAW_MAX), 6);
    ck_assert_int_eq(l8i_tune_enumerate(base, &bare, 0, NULL, 0, &r, w, RAW_MAX), 0);
}
END_TEST

START_TEST(test_host_tune_split_k)
{
    static l8i_tune_variant v[RAW_MAX];
    l8i_algo_cfg base = cfg_of(66, 24, 18, CUBLASLT_CLUSTER_SHAPE_AUTO);
    l8i_algo_caps all = caps_of(0, 0, 1, CUBLASLT_REDUCTION_SCHEME_MASK);
    l8i_algo_caps no_f32 = caps_of(0, 0, 1, CUBLASLT_REDUCTION_SCHEME_INPLACE |
                                             CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
    l8i_algo_caps no_split = caps_of(0, 0, 0, CUBLASLT_REDUCTION_SCHEME_MASK);
    /* which split variant a large K gets: INPLACE by default, f32 when precise */
    struct {
        const l8i_algo_caps *cp;
        int64_t k;
        int precise;
        int32_t splitk;           /* the split variant's, 0: none expected */
        uint32_t red;
    } t[] = {
        { &all, 16384, 0, 2, CUBLASLT_REDUCTION_SCHEME_INPLACE },
        { &all, 16384, 1, 2, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE },
        { &all, 8191, 0, 0, 0 },                   /* K too small: no split */
        { &no_f32, 16384, 1, 0, 0 },               /* precise and no f32 scheme */
        { &no_f32, 16384, 0, 2, CUBLASLT_REDUCTION_SCHEME_INPLACE },
        { &no_split, 16384, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        l8i_tune_rules r = { t[i].k, t[i].precise };
        int n = l8i_tune_enumerate(&base, t[i].cp, 1, NULL, 0, &r, v, RAW_MAX), splits = 0;
        for (int j = 0; j < n; j++) {
            if (v[j].cfg.splitk == 1) continue;
            splits++;
            ck_assert_int_eq(v[j].cfg.splitk, t[i].splitk);
            ck_assert_uint_eq(v[j].cfg.reduction, t[i].red);
        }
        ck_assert_msg(splits == (t[i].splitk ? 1 : 0), "case %zu: %d split variants", i, splits);
    }
    /* a split base: a variant without the split; under precise, its variants
     * that keep an INPLACE split are dropped, and only those */
    base.splitk = 4;
    base.reduction = CUBLASLT_REDUCTION_SCHEME_INPLACE;
    l8i_tune_rules loose = { 4096, 0 }, precise = { 4096, 1 };
    int n = l8i_tune_enumerate(&base, &all, 1, NULL, 0, &loose, v, RAW_MAX);
    ck_assert_int_eq(v[n - 1].cfg.splitk, 1);
    ck_assert_uint_eq(v[n - 1].cfg.reduction, CUBLASLT_REDUCTION_SCHEME_NONE);
    ck_assert_int_eq(l8i_tune_enumerate(&base, &all, 1, NULL, 0, &precise, v, RAW_MAX), 1);
    ck_assert_int_eq(v[0].cfg.splitk, 1);
    /* the rule itself */
    l8i_algo_cfg c = base;
    ck_assert(l8i_tune_allowed(&c, &loose));
    ck_assert(!l8i_tune_allowed(&c, &precise));
    c.reduction = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    ck_assert(!l8i_tune_allowed(&c, &precise));
    c.reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    ck_assert(l8i_tune_allowed(&c, &precise));
    c.splitk = 1;
    c.reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    ck_assert(l8i_tune_allowed(&c, &precise));
}
END_TEST

START_TEST(test_host_tune_format)
{
    char buf[160];
    l8i_algo_cfg c = cfg_of(66, 24, 18, CUBLASLT_CLUSTER_SHAPE_2x1x1);
    c.swizzle = 1;
    l8i_algo_cfg_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "algo 66 tile 24 stages 18 cluster 2x1 swizzle 1 splitk 1 custom 0");
    c.splitk = 3;
    c.reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    c.custom = 2;
    c.cluster = CUBLASLT_CLUSTER_SHAPE_1x15x1;
    l8i_algo_cfg_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "algo 66 tile 24 stages 18 cluster 1x15 swizzle 1 splitk 3 reduction 2"
                          " custom 2");
    c.cluster = CUBLASLT_CLUSTER_SHAPE_AUTO;
    l8i_algo_cfg_format(&c, buf, 20);
    ck_assert_str_eq(buf, "algo 66 tile 24 sta");
    c.cluster = 999;
    l8i_algo_cfg_format(&c, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "cluster #999 "));
    l8i_algo_cfg d = c;
    ck_assert(l8i_algo_cfg_equal(&c, &d));
    d.inner = 1;
    ck_assert(!l8i_algo_cfg_equal(&c, &d));
}
END_TEST

/* ---- GPU: cuBLASLt against the host reference ---- */

static const mode k_gpu_modes[] = {
    /* FP8 accumulation: fast is the tensor cores' reduced-precision sum; the
     * split path promotes partial sums, so it is much tighter */
    { "fp8 e4m3xe4m3->bf16 fast", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 1, 2e-2 },
    { "fp8 e4m3xe4m3->bf16", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e4m3xe4m3->f32", L8_E4M3, L8_E4M3, L8_F32, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e4m3xe4m3->e4m3 amax", L8_E4M3, L8_E4M3, L8_E4M3, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e4m3xe5m2->bf16", L8_E4M3, L8_E5M2, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e5m2xe4m3->e5m2 amax", L8_E5M2, L8_E4M3, L8_E5M2, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e5m2xe4m3->f32 beta1 (wgrad)", L8_E5M2, L8_E4M3, L8_F32, 0, 1, 1.0f, 1.0f, L8_GEMM_EPI_NONE, 0, 2e-3 },
    { "fp8 e4m3xe4m3->bf16 bias fast (fprop)", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_BIAS, 1, 2e-2 },
    { "fp8 e4m3xe4m3->f32 bias alpha", L8_E4M3, L8_E4M3, L8_F32, 0, 1, 0.5f, 0.0f, L8_GEMM_EPI_BIAS, 0, 2e-3 },
    { "bf16 NT", L8_BF16, L8_BF16, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 1e-4 },
    { "bf16 NN", L8_BF16, L8_BF16, L8_BF16, 0, 0, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 1e-4 },
    { "bf16 TN->f32 beta1", L8_BF16, L8_BF16, L8_F32, 1, 0, 1.0f, 1.0f, L8_GEMM_EPI_NONE, 0, 1e-4 },
    { "bf16 bias", L8_BF16, L8_BF16, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_BIAS, 0, 1e-4 },
    { "bf16->f32 dbias_a beta1 (wgrad)", L8_BF16, L8_BF16, L8_F32, 1, 0, 1.0f, 1.0f, L8_GEMM_EPI_DBIAS_A, 0, 1e-4 },
    { "bf16 dbias_b", L8_BF16, L8_BF16, L8_BF16, 0, 0, 1.0f, 0.0f, L8_GEMM_EPI_DBIAS_B, 0, 1e-4 },
    { "f16 NT", L8_F16, L8_F16, L8_F16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 1e-4 },
    { "f32 NT", L8_F32, L8_F32, L8_F32, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 1e-5 },
    { "f32 TT beta", L8_F32, L8_F32, L8_F32, 1, 1, 1.0f, -0.5f, L8_GEMM_EPI_BIAS, 0, 1e-5 },
};
#define N_GPU_MODES (sizeof k_gpu_modes / sizeof k_gpu_modes[0])

/* GPU and host runs of one case, compared. */
static void gpu_case(l8_ctx *gctx, l8_gemm_handle *gh, l8_ctx *hctx, l8_gemm_handle *hh,
                     const mode *md, int64_t M, int64_t N, int64_t K, l8_rng *r)
{
    gcase c;
    case_init(&c, md, M, N, K, r);
    case_naive(&c);
    result want = case_run(&c, hctx, hh);
    result got = case_run(&c, gctx, gh);
    case_compare(&c, &got, &want, md->tol, "gpu vs host");
    result_free(&want);
    result_free(&got);
    case_free(&c);
}

static void done_gpu(l8_ctx *ctx) { l8t_ctx_finish(ctx); }

START_TEST(test_gpu_gemm_modes)
{
    const mode *md = &k_gpu_modes[_i];
    l8_ctx *g = make_ctx("cuda:0"), *h = make_ctx("host");
    l8_gemm_handle *gh = make_handle(g, 0), *hh = make_handle(h, 0);
    l8_rng r;
    l8_rng_init(&r, 0x9e3 + (uint64_t)_i);
    static const int64_t shapes[][3] = { { 64, 48, 32 }, { 256, 128, 512 }, { 1024, 1024, 1024 } };
    int n_shapes = l8_test_quick() ? 2 : 3;
    for (int s = 0; s < n_shapes; s++)
        gpu_case(g, gh, h, hh, md, shapes[s][0], shapes[s][1], shapes[s][2], &r);
    if (!l8_dtype_is_fp8(md->a))                   /* non-FP8: odd sizes and 2-byte alignment */
        gpu_case(g, gh, h, hh, md, 33, 17, 9, &r);
    else                                           /* FP8: M free, N and K at their minimum steps */
        gpu_case(g, gh, h, hh, md, 37, l8_dtype_is_fp8(md->d) ? 32 : 24, 48, &r);
    l8_gemm_stats st = stats_of(gh);
    ck_assert_uint_eq(st.calls, (uint64_t)n_shapes + 1);
    l8_gemm_handle_destroy(gh);
    l8_gemm_handle_destroy(hh);
    l8_ctx_destroy(h);
    done_gpu(g);
}
END_TEST

/* small 1: the FP8 calls lean8's small kernel takes (TN, a bf16 or
 * f32 D, no epilogue, M * N * K <= 2^27) against the host reference at a
 * training step's shapes and at tails (M and N not multiples of its 32 x
 * 32 tile, K not of its 64-byte chunks, one warp looping over K); the
 * calls it must leave to cuBLASLt (an FP8 D with amax, a bias epilogue, a
 * GEMM above the size limit) still right and not counted. */
static const int k_small_modes[] = { 0, 1, 2, 4, 6, 3, 7 };
#define N_SMALL_MODES (sizeof k_small_modes / sizeof k_small_modes[0])

START_TEST(test_gpu_small_kernel)
{
    const mode *md = &k_gpu_modes[k_small_modes[_i]];
    int taken = !l8_dtype_is_fp8(md->d) && md->epi == L8_GEMM_EPI_NONE;
    l8_ctx *g = make_ctx("cuda:0"), *h = make_ctx("host");
    l8_gemm_handle *gh = small_handle(g, 0, 1), *hh = make_handle(h, 0);
    l8_rng r;
    l8_rng_init(&r, 0x5a11 + (uint64_t)_i);
    static const int64_t shapes[][3] = {
        { 256, 512, 512 }, { 512, 512, 256 }, { 256, 512, 784 }, { 128, 256, 784 },
        { 37, 24, 48 }, { 70, 72, 1040 }, { 1, 8, 16 },
    };
    int n = l8_test_quick() ? 5 : 7;
    for (int i = 0; i < n; i++)   /* cuBLASLt's FP8 D wants N % 16 == 0 */
        gpu_case(g, gh, h, hh, md, shapes[i][0], taken ? shapes[i][1] : round_up(shapes[i][1], 32),
                 shapes[i][2], &r);
    gpu_case(g, gh, h, hh, md, 512, 512, 1024, &r);   /* 2^28: above the limit */
    l8_gemm_stats st = stats_of(gh);
    ck_assert_uint_eq(st.calls, (uint64_t)n + 1);
    ck_assert_uint_eq(st.small_calls, taken ? (uint64_t)n : 0);
    l8_gemm_handle_destroy(gh);
    l8_gemm_handle_destroy(hh);
    l8_ctx_destroy(h);
    done_gpu(g);
}
END_TEST

/* small 2 (auto): the small kernel takes a call that fits when its grid of
 * 32 x 32 tiles is at most half the SMs and K <= 512; -1 with L8_GEMM_SMALL
 * unset takes the same; 0 takes none. */
START_TEST(test_gpu_small_auto)
{
    const mode *md = &k_gpu_modes[1];                /* e4m3 x e4m3 -> bf16 */
    l8_ctx *g = make_ctx("cuda:0"), *h = make_ctx("host");
    unsetenv("L8_GEMM_SMALL");
    l8_gemm_handle *ga = small_handle(g, 0, 2), *ge = small_handle(g, 0, -1);
    l8_gemm_handle *g0 = make_handle(g, 0), *hh = make_handle(h, 0);
    l8_rng r;
    l8_rng_init(&r, 0xa070);
    static const int64_t shapes[][3] = {
        { 128, 256, 128 }, { 256, 512, 512 }, { 96, 64, 512 }, { 128, 256, 784 },
    };
    uint64_t want = 0;
    for (int i = 0; i < 4; i++) {
        gpu_case(g, ga, h, hh, md, shapes[i][0], shapes[i][1], shapes[i][2], &r);
        gpu_case(g, ge, h, hh, md, shapes[i][0], shapes[i][1], shapes[i][2], &r);
        gpu_case(g, g0, h, hh, md, shapes[i][0], shapes[i][1], shapes[i][2], &r);
        int64_t ctas = round_up(shapes[i][0], 32) / 32 * (round_up(shapes[i][1], 32) / 32);
        want += 2 * ctas <= (int64_t)ga->nsm && shapes[i][2] <= 512;
    }
    ck_assert_uint_eq(want, 2);                     /* 64 to 255 SMs: the first and the third */
    ck_assert_uint_eq(stats_of(ga).small_calls, want);
    ck_assert_uint_eq(stats_of(ge).small_calls, want);
    ck_assert_uint_eq(stats_of(g0).small_calls, 0);
    l8_gemm_handle_destroy(ga);
    l8_gemm_handle_destroy(ge);
    l8_gemm_handle_destroy(g0);
    l8_gemm_handle_destroy(hh);
    l8_ctx_destroy(h);
    done_gpu(g);
}
END_TEST

/* The second call of one shape creates no plan and gives the same bits. */
START_TEST(test_gpu_plan_cache_hit)
{
    const mode *md = &k_gpu_modes[0];
    l8_ctx *g = make_ctx("cuda:0");
    l8_gemm_handle *gh = make_handle(g, 0);
    l8_rng r;
    l8_rng_init(&r, 0xcac4e);
    gcase c;
    case_init(&c, md, 256, 128, 512, &r);
    result first = case_run(&c, g, gh);
    l8_gemm_stats s = stats_of(gh);
    ck_assert_uint_eq(s.plans_created, 1);
    ck_assert_uint_eq(s.plan_hits, 0);
    result second = case_run(&c, g, gh);          /* new tensors, same key */
    s = stats_of(gh);
    ck_assert_uint_eq(s.plans_created, 1);
    ck_assert_uint_eq(s.plan_hits, 1);
    ck_assert_uint_eq(s.plans_cached, 1);
    ck_assert(memcmp(first.d, second.d, c.D0.bytes) == 0);
    /* the compute stream and the copy stream get workspaces of their own */
    dmat A = upload(g, &c.A, 1.0f / c.sa, c.sa), B = upload(g, &c.B, 1.0f / c.sb, c.sb),
         D = upload(g, &c.D0, 1, 1);
    l8_gemm_desc gd = L8_GEMM_DESC_INIT;
    gd.a = A.view; gd.b = B.view; gd.d = D.view; gd.fast_accum = md->fast;
    l8_stream *cp = l8_ctx_stream(g, L8_STREAM_COPY);
    L8_CK(l8_gemm(gh, &gd, cp));
    uint8_t *third = malloc(c.D0.bytes);
    ck_assert_ptr_nonnull(third);
    L8_CK(l8_tensor_copy_to_host(D.full, third, c.D0.bytes, cp));
    L8_CK(l8_stream_synchronize(cp));
    ck_assert(memcmp(first.d, third, c.D0.bytes) == 0);
    ck_assert_uint_eq(stats_of(gh).plans_created, 1);
    /* planned for 32 SMs: a plan of its own, the same product up to the
     * algorithm's sums (bf16 D: one rounding; fast accumulation: the mode's
     * 2e-2); the SM count or more: the whole GPU's plan, the same bytes */
    gd.sm_count = 32;
    L8_CK(l8_gemm(gh, &gd, cp));
    L8_CK(l8_tensor_copy_to_host(D.full, third, c.D0.bytes, cp));
    L8_CK(l8_stream_synchronize(cp));
    ck_assert_uint_eq(stats_of(gh).plans_created, 2);
    const uint16_t *w0 = (const uint16_t *)first.d, *w1 = (const uint16_t *)third;
    double big = 0;
    for (size_t i = 0; i < c.D0.bytes / 2; i++)
        if (fabs(l8_bf16_to_f32(w0[i])) > big) big = fabs(l8_bf16_to_f32(w0[i]));   /* NaN: no */
    for (size_t i = 0; i < c.D0.bytes / 2; i++) {
        if (w0[i] == w1[i]) continue;             /* (the padding past N: poison in both) */
        double u = l8_bf16_to_f32(w0[i]), v = l8_bf16_to_f32(w1[i]);
        ck_assert_msg(fabs(u - v) <= fabs(u) / 128 + 2e-2 * big, "sm_count 32: %g against %g"
                      " at %zu", v, u, i);
    }
    char desc[256];
    L8_CK(l8_gemm_describe(gh, &gd, desc, sizeof desc));
    ck_assert_msg(strstr(desc, " (for 32 SMs)") != NULL, "describe: %s", desc);
    gd.sm_count = 1 << 20;
    L8_CK(l8_gemm(gh, &gd, cp));
    L8_CK(l8_tensor_copy_to_host(D.full, third, c.D0.bytes, cp));
    L8_CK(l8_stream_synchronize(cp));
    ck_assert_uint_eq(stats_of(gh).plans_created, 2);
    ck_assert(memcmp(first.d, third, c.D0.bytes) == 0);
    L8_CK(l8_gemm_describe(gh, &gd, desc, sizeof desc));
    ck_assert_msg(strstr(desc, "SMs") == NULL, "describe: %s", desc);
    free(third);
    dmat_free(&A); dmat_free(&B); dmat_free(&D);
    result_free(&first);
    result_free(&second);
    case_free(&c);
    l8_gemm_handle_destroy(gh);
    done_gpu(g);
}
END_TEST

/* Autotuning times several algorithms on scratch outputs: D (accumulated
 * with beta = 1), amax and dbias must come out as from a single GEMM. */
START_TEST(test_gpu_autotune)
{
    l8_ctx *g = make_ctx("cuda:0"), *h = make_ctx("host");
    l8_gemm_handle *gh = make_handle(g, 1), *hh = make_handle(h, 0);
    ck_assert_int_eq(l8_gemm_autotune_enabled(gh), 1);
    l8_rng r;
    l8_rng_init(&r, 0xa070);
    const mode *modes[] = { &k_gpu_modes[6], &k_gpu_modes[3], &k_gpu_modes[13], &k_gpu_modes[9] };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        l8_rng_init(&r, 0xa070 + i);              /* the repeat below draws the same lds */
        gpu_case(g, gh, h, hh, modes[i], 512, 512, 1024, &r);
    }
    l8_gemm_stats s = stats_of(gh);
    ck_assert_uint_eq(s.plans_created, 4);
    /* bf16 512x512x1024 has many algorithms: at least that plan was timed */
    ck_assert_uint_ge(s.autotuned, 1);
    ck_assert_uint_ge(s.autotune_trials, 2 * s.autotuned);
    l8_rng_init(&r, 0xa070);
    gpu_case(g, gh, h, hh, modes[0], 512, 512, 1024, &r);   /* tuned plan reused */
    ck_assert_uint_eq(stats_of(gh).plans_created, 4);
    ck_assert_uint_eq(stats_of(gh).plan_hits, 1);
    l8_gemm_handle_destroy(gh);
    l8_gemm_handle_destroy(hh);
    l8_ctx_destroy(h);
    done_gpu(g);
}
END_TEST

/* Autotune 2 (the configuration search) gives mode 0's results within the
 * GEMM tolerance, tails included, and says where its winner came from. */
START_TEST(test_gpu_autotune_search)
{
    l8_ctx *g = make_ctx("cuda:0");
    l8_gemm_handle *g0 = make_handle(g, 0), *g2 = make_handle(g, 2);
    int at_mode = l8_gemm_autotune_enabled(g2);
    /* 1 where cuBLASLt lacks the algorithm-configuration API */
    ck_assert_msg(at_mode == 2 || at_mode == 1, "autotune mode %d", at_mode);
    /* fp8 fast and split, an FP8 D with amax, wgrad accumulating (beta 1), bf16 */
    const mode *modes[] = { &k_gpu_modes[0], &k_gpu_modes[1], &k_gpu_modes[3], &k_gpu_modes[6],
                            &k_gpu_modes[9] };
    static const int64_t shapes[][3] = {
        { 1000, 520, 784 },                        /* tails: M free, N % 8, K % 16 */
        { 128, 256, 8192 },                        /* K large enough for split-K variants */
        { 2048, 1024, 1024 },
    };
    int n_shapes = l8_test_quick() ? 2 : 3;
    char buf[256];
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        for (int s = 0; s < n_shapes; s++) {
            const mode *md = modes[i];
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            if (!l8_dtype_is_fp8(md->a)) { M += 3; N += 1; K += 5; }   /* odd non-FP8 tails */
            if (l8_dtype_is_fp8(md->d)) N = (N + 15) / 16 * 16;  /* cuBLASLt: FP8 D needs N % 16 */
            l8_rng r;
            l8_rng_init(&r, 0x5ea2c + 16 * i + (uint64_t)s);
            gcase c;
            case_init(&c, md, M, N, K, &r);
            case_naive(&c);                        /* S: the tolerance base */
            result want = case_run(&c, g, g0);
            result got = case_run(&c, g, g2);
            case_compare(&c, &got, &want, md->tol, "mode 2 vs mode 0");
            result_free(&want);
            result_free(&got);
            case_free(&c);
        }
    }
    l8_gemm_stats st = stats_of(g2);
    ck_assert_uint_ge(st.autotuned, 1);
    ck_assert_uint_ge(st.autotune_changed, st.search_wins);
    ck_assert_uint_ge(st.autotune_trials, st.search_candidates);
    if (at_mode == 2) ck_assert_uint_ge(st.search_candidates, 1);
    else ck_assert_uint_eq(st.search_candidates, 0);
    /* the description of a tuned plan: its configuration, then how it was chosen */
    {
        l8_rng r;
        l8_rng_init(&r, 0xd35c);
        gcase c;
        case_init(&c, &k_gpu_modes[1], 512, 512, 1024, &r);
        dmat A = upload(g, &c.A, 1.0f / c.sa, c.sa), B = upload(g, &c.B, 1.0f / c.sb, c.sb),
             D = upload(g, &c.D0, 1, 1);
        l8_gemm_desc gd = L8_GEMM_DESC_INIT;
        gd.a = A.view; gd.b = B.view; gd.d = D.view;
        L8_CK_ST(l8_gemm_describe(g2, &gd, buf, sizeof buf), L8_ERR_STATE);
        L8_CK(l8_gemm(g2, &gd, NULL));
        L8_CK(l8_gemm_describe(g2, &gd, buf, sizeof buf));
        ck_assert_msg(strncmp(buf, "algo ", 5) == 0 && strstr(buf, " cluster ") &&
                      (strstr(buf, "timed") || strstr(buf, "not timed")), "description: %s", buf);
        L8_CK(l8_gemm(g0, &gd, NULL));
        L8_CK(l8_gemm_describe(g0, &gd, buf, sizeof buf));
        ck_assert_msg(strstr(buf, "; heuristic #0, not timed") != NULL, "description: %s", buf);
        L8_CK(l8_ctx_synchronize(g));
        dmat_free(&A); dmat_free(&B); dmat_free(&D);
        case_free(&c);
    }
    l8_gemm_handle_destroy(g0);
    l8_gemm_handle_destroy(g2);
    done_gpu(g);
}
END_TEST

/* The default handle lets cuBLASLt keep split-K partial sums in bf16: each
 * partial is rounded once more, so the bound is 2^-8 S rather than f32's. */
START_TEST(test_gpu_default_reduction)
{
    static const mode md[] = {
        { "bf16 NT default reduction", L8_BF16, L8_BF16, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 4e-3 },
        { "fp8->bf16 fast default reduction", L8_E4M3, L8_E4M3, L8_BF16, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 1, 2e-2 },
    };
    l8_ctx *g = make_ctx("cuda:0"), *h = make_ctx("host");
    l8_gemm_handle *gh = NULL, *hh = make_handle(h, 0);
    L8_CK(l8_gemm_handle_create(g, NULL, &gh));
    l8_rng r;
    l8_rng_init(&r, 0xde7);
    for (int i = 0; i < 2; i++) {
        gpu_case(g, gh, h, hh, &md[i], 1024, 1024, 1024, &r);
        gpu_case(g, gh, h, hh, &md[i], 128, 256, 4096, &r);   /* a split-K shape */
    }
    l8_gemm_handle_destroy(gh);
    l8_gemm_handle_destroy(hh);
    l8_ctx_destroy(h);
    done_gpu(g);
}
END_TEST

/* The description of c's plan on h (uploads fresh tensors: same key). */
static void describe_case(l8_ctx *ctx, l8_gemm_handle *h, gcase *c, char *buf, size_t n)
{
    dmat A = upload(ctx, &c->A, 1.0f / c->sa, c->sa), B = upload(ctx, &c->B, 1.0f / c->sb, c->sb),
         D = upload(ctx, &c->D0, c->sd, 1.0f / c->sd);
    l8_gemm_desc gd = L8_GEMM_DESC_INIT;
    gd.a = A.view; gd.b = B.view; gd.d = D.view;
    gd.trans_a = c->md->ta; gd.trans_b = c->md->tb;
    gd.alpha = c->md->alpha; gd.beta = c->md->beta; gd.fast_accum = c->md->fast;
    L8_CK(l8_gemm_describe(h, &gd, buf, n));
    dmat_free(&A); dmat_free(&B); dmat_free(&D);
}

static l8_gemm_handle *cache_handle(l8_ctx *ctx, const char *path, int autotune)
{
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    cfg.autotune = autotune;
    cfg.precise_reduction = 1;
    cfg.plan_cache = path;
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    return h;
}

/* The persistent plan cache: a handle that tunes writes the file; later
 * handles with the file (tuning or not) build the plan from it without
 * tuning, say so, and compute bitwise the same D; a corrupt file is
 * ignored (a warning) and the GEMM still runs and is right. */
START_TEST(test_gpu_plan_cache_file)
{
    l8t_tmpdir td;
    l8t_tmp_init(&td, "l8gcg");
    const char *path = l8t_tmp_file(&td, "plans.l8c");
    l8_ctx *g = make_ctx("cuda:0");
    const mode *md = &k_gpu_modes[0];             /* fp8 -> bf16, fast accumulation */
    l8_rng r;
    l8_rng_init(&r, 0xf11e);
    gcase c;
    case_init(&c, md, 1024, 1024, 1024, &r);
    case_naive(&c);
    char d0[256], d1[256], want[300];

    l8_gemm_handle *tuner = cache_handle(g, path, 1);
    result r0 = case_run(&c, g, tuner);
    l8_gemm_stats s = stats_of(tuner);
    ck_assert_msg(s.autotuned == 1 && s.plan_cache_saves == 1, "autotuned %llu, saves %llu (the"
                  " heuristic must offer several algorithms here)", (unsigned long long)s.autotuned,
                  (unsigned long long)s.plan_cache_saves);
    describe_case(g, tuner, &c, d0, sizeof d0);
    ck_assert_msg(strstr(d0, "timed") && !strstr(d0, "(plan cache)"), "tuned: %s", d0);
    l8_gemm_handle_destroy(tuner);

    /* a new handle, tuning or not, takes the tuned algorithm from the file */
    for (int at = 1; at >= 0; at--) {
        l8_gemm_handle *h = cache_handle(g, path, at);
        ck_assert_uint_eq(stats_of(h).plan_cache_loaded, 1);
        result r1 = case_run(&c, g, h);
        s = stats_of(h);
        ck_assert_uint_eq(s.plan_cache_hits, 1);
        ck_assert_uint_eq(s.plan_cache_rejected, 0);
        ck_assert_uint_eq(s.autotuned, 0);
        ck_assert_uint_eq(s.autotune_trials, 0);
        ck_assert_uint_eq(s.plan_cache_saves, 0);
        describe_case(g, h, &c, d1, sizeof d1);
        snprintf(want, sizeof want, "%s (plan cache)", d0);
        ck_assert_msg(strcmp(d1, want) == 0, "autotune %d: '%s', wanted '%s'", at, d1, want);
        ck_assert_msg(memcmp(r0.d, r1.d, c.D0.bytes) == 0, "autotune %d: D differs", at);
        result_free(&r1);
        l8_gemm_handle_destroy(h);
    }

    /* a corrupt file is never trusted */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -40, SEEK_END), 0);
    int ch = fgetc(f);
    ck_assert_int_eq(fseek(f, -40, SEEK_END), 0);
    fputc(ch ^ 0x40, f);
    fclose(f);
    l8_gemm_handle *h = cache_handle(g, path, 0);
    ck_assert_uint_eq(stats_of(h).plan_cache_loaded, 0);
    result r2 = case_run(&c, g, h);
    s = stats_of(h);
    ck_assert_uint_eq(s.plan_cache_hits, 0);
    ck_assert_uint_eq(s.autotuned, 0);
    case_compare(&c, &r2, NULL, md->tol, "heuristic after a corrupt cache");
    result_free(&r2);
    l8_gemm_handle_destroy(h);

    result_free(&r0);
    case_free(&c);
    done_gpu(g);
    unlink(path);
    rmdir(td.dir);
}
END_TEST

/* Validation is the same on the GPU; nothing is built for a bad call. */
START_TEST(test_gpu_errors)
{
    l8_ctx *g = make_ctx("cuda:0");
    l8_gemm_handle *gh = make_handle(g, 0);
    l8_rng r;
    l8_rng_init(&r, 5);
    mat A = mat_new(L8_E5M2, 16, 32, 32, &r, 2), B = mat_new(L8_E5M2, 16, 32, 32, &r, 2);
    mat Bkn = mat_new(L8_E4M3, 32, 16, 16, &r, 2);  /* (K,N): the NN layout */
    mat D = mat_new(L8_BF16, 16, 16, 16, NULL, 0);
    dmat a = upload(g, &A, 1, 1), b = upload(g, &B, 1, 1), bkn = upload(g, &Bkn, 1, 1),
         d = upload(g, &D, 1, 1);
    l8_gemm_desc gd = L8_GEMM_DESC_INIT;
    gd.a = a.view; gd.b = b.view; gd.d = d.view;
    L8_CK_ST(l8_gemm(gh, &gd, NULL), L8_ERR_UNSUPPORTED);      /* e5m2 x e5m2 */
    gd.b = bkn.view; gd.trans_b = 0;
    L8_CK_ST(l8_gemm(gh, &gd, NULL), L8_ERR_UNSUPPORTED);      /* FP8 not TN */
    ck_assert_uint_eq(stats_of(gh).plans_created, 0);
    dmat_free(&a); dmat_free(&b); dmat_free(&bkn); dmat_free(&d);
    free(A.img); free(B.img); free(Bkn.img); free(D.img);
    l8_gemm_handle_destroy(gh);
    done_gpu(g);
}
END_TEST

Suite *l8_gemm_suite(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm-host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_host_reference_vs_fp64, 0, (int)N_HOST_MODES);
    tcase_add_test(tc, test_host_beta_and_bias_semantics);
    tcase_add_test(tc, test_host_fp8_output_amax);
    tcase_add_loop_test(tc, test_host_gelu_aux, 0, 2);
    tcase_add_test(tc, test_host_dgelu_cast);
    tcase_add_test(tc, test_host_dgelu_cast_errors);
    tcase_add_test(tc, test_host_argument_errors);
    tcase_add_test(tc, test_host_failed_call_writes_nothing);
    tcase_add_test(tc, test_host_plan_cache);
    tcase_add_test(tc, test_host_autotune_switch);
    tcase_add_test(tc, test_host_small_mode);
    tcase_add_test(tc, test_host_small_policy);
    tcase_add_test(tc, test_host_describe);
    tcase_add_test(tc, test_host_tune_enumerate);
    tcase_add_test(tc, test_host_tune_split_k);
    tcase_add_test(tc, test_host_tune_format);
    suite_add_tcase(s, tc);

    TCase *tg = tcase_create("gemm-gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 600);
    tcase_add_loop_test(tg, test_gpu_gemm_modes, 0, (int)N_GPU_MODES);
    tcase_add_test(tg, test_gpu_plan_cache_hit);
    tcase_add_test(tg, test_gpu_autotune);
    tcase_add_test(tg, test_gpu_autotune_search);
    tcase_add_test(tg, test_gpu_default_reduction);
    tcase_add_test(tg, test_gpu_errors);
    tcase_add_loop_test(tg, test_gpu_gelu_aux, 0, 6);
    tcase_add_test(tg, test_gpu_plan_cache_file);
    tcase_add_loop_test(tg, test_gpu_small_kernel, 0, (int)N_SMALL_MODES);
    tcase_add_test(tg, test_gpu_small_auto);
    tcase_add_test(tg, test_gpu_dgelu_cast);
    suite_add_tcase(s, tg);
    return s;
}
