/* test_optim.c - AdamW and SGD over a parameter group.
 *
 * Host cases compare the host backend (the reference the GPU must match bit
 * for bit) with an independent fp64 implementation of the textbook formulas
 * (PyTorch's AdamW and SGD, clip_grad_norm_) over several steps of random
 * gradients, and check the exact properties: weight decay alone, bias
 * correction, clipping above and below the threshold, skipped steps that
 * change nothing, resume from saved state, determinism.
 *
 * Tolerances (f32 result vs fp64 reference, after up to 6 steps):
 * |got - want| <= RTOL |want| + ATOL scale, RTOL = 1e-5, ATOL = 1e-6,
 * scale = max |want| over the buffer (elements near zero after a
 * cancellation, e.g. a momentum buffer, carry the rounding of their larger
 * terms). Measured worst case: 0.08 of the bound, so ~13x margin. A wrong
 * formula fails by far: a bias correction off by one step moves weights by
 * 1.5e-3, eps at half its value by 7e-5 (both tried).
 *
 * "gpu" cases (written blind, to be run on a GPU) step identical groups on
 * cuda:0 and on the host and compare every buffer and result bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"

#define xmalloc l8t_xmalloc
#include "ops/optim.h"
#include "ops/optim_internal.h"   /* the step scalars: sumsq */
#include "runtime/params.h"
#include "runtime/tensor.h"

#define RTOL 1e-5
#define ATOL 1e-6

/* ---- contexts ---- */

static l8_ctx *ctx_make_dev(const char *dev, const l8_segment_provider *prov)
{
    return l8t_ctx(dev, prov, 0);
}

static l8_ctx *ctx_make(void) { return ctx_make_dev("host", NULL); }

static uint64_t live_bytes(l8_ctx *ctx)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    return s.allocated_bytes;
}

static void ctx_finish(l8_ctx *ctx) { l8t_ctx_finish(ctx); }

/* ---- the model ---- */

typedef struct spec {
    const char *name;
    int ndim;
    int64_t shape[4];
} spec;

/* With 96 rows: 13,547 elements, 13,952 with padding: four 4096-element
 * norm chunks, the last one partial. */
static const spec MODEL[] = {
    { "fc1.weight", 2, { 96, 130 } },
    { "fc1.bias", 1, { 96 } },
    { "fc2.weight", 2, { 10, 96 } },
    { "fc2.bias", 1, { 10 } },
    { "gain", 0, { 0 } },
};
#define NMODEL ((int)(sizeof MODEL / sizeof MODEL[0]))

/* The bits of the f64 sum of squares l8_optim_finish (or the host
 * reference) left in the step scalars. */
static uint64_t sumsq_bits(l8_optim *o)
{
    int64_t two = 2;
    l8_tensor *t = NULL;
    uint32_t w[2];
    L8_CK(l8_tensor_from_storage(o->work, offsetof(l8i_optim_scalars, sumsq), L8_I32, 1, &two,
                                 NULL, &t));
    L8_CK(l8_tensor_copy_to_host(t, w, sizeof w, NULL));
    l8_tensor_destroy(t);
    return (uint64_t)w[1] << 32 | w[0];
}

/* A group of MODEL with rows1 rows in fc1 (96 here; 40000 for the big GPU
 * case), weights uniform in [-1, 1] from seed. */
static l8_params *group_make(l8_ctx *ctx, l8_dtype gdt, int64_t rows1, uint64_t seed)
{
    l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
    cfg.grad_dtype = gdt;
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, &cfg, &g));
    for (int i = 0; i < NMODEL; i++) {
        int64_t shape[4];
        memcpy(shape, MODEL[i].shape, sizeof shape);
        if (i == 0)
            shape[0] = rows1;
        if (i == 1)
            shape[0] = rows1;
        L8_CK(l8_params_add(g, MODEL[i].name, MODEL[i].ndim, shape, NULL));
    }
    L8_CK(l8_params_finalize(g));
    for (int i = 0; i < NMODEL; i++)
        L8_CK(l8_params_init_uniform(g, i, -1.0f, 1.0f, seed + (uint64_t)i));
    return g;
}

static int64_t nflat(l8_params *g) { return l8_params_buffer_numel(g); }

/* Random gradients over the flat layout (padding 0): sign * m * 2^e with e
 * uniform in [-10, 0] and an 8-bit (bf16_exact: what a bf16 holds, so bf16
 * and f32 groups see the same values) or 24-bit significand m in [1, 2),
 * times scale. Built with ldexpf, not by masking bits: GCC 12.2 at -O1 and
 * above drops a conditional "clear the low 16 bits of a float's bits" (an
 * RTL DCE bug with the strict_low_part it turns the mask into). */
static void grads_random(l8_rng *r, l8_params *g, float *flat, float scale, int bf16_exact)
{
    int bits = bf16_exact ? 8 : 24;
    memset(flat, 0, (size_t)nflat(g) * sizeof *flat);
    for (int i = 0; i < l8_params_count(g); i++) {
        int64_t off = l8_params_offset(g, i), n = l8_params_numel(g, i);
        for (int64_t k = 0; k < n; k++) {
            uint64_t half = (uint64_t)1 << (bits - 1);
            float m = (float)(half + l8_rng_below(r, half));
            int e = -10 + (int)l8_rng_below(r, 11);
            float v = ldexpf(m, e - (bits - 1)) * scale;
            flat[off + k] = l8_rng_below(r, 2) ? -v : v;
        }
    }
}

/* Upload a flat host gradient into the group, parameter by parameter. */
static void grads_upload(l8_params *g, const float *flat)
{
    for (int i = 0; i < l8_params_count(g); i++)
        L8_CK(l8_params_set_grad_host(g, i, flat + l8_params_offset(g, i),
                                      (size_t)l8_params_numel(g, i)));
}

static float *read_f32(l8_tensor *t)
{
    size_t n = (size_t)l8_tensor_numel(t);
    float *out = xmalloc(n * sizeof *out);
    memset(out, 0xA5, n * sizeof *out);
    ck_assert_int_eq(l8_tensor_dtype(t), L8_F32);
    L8_CK(l8_tensor_copy_to_host(t, out, n * sizeof *out, NULL));
    return out;
}

static float read_scalar_f32(l8_tensor *t)
{
    float v;
    L8_CK(l8_tensor_copy_to_host(t, &v, sizeof v, NULL));
    return v;
}

static int32_t read_scalar_i32(l8_tensor *t)
{
    int32_t v;
    L8_CK(l8_tensor_copy_to_host(t, &v, sizeof v, NULL));
    return v;
}

/* ---- the fp64 reference ---- */

typedef struct ref {
    int64_t n;
    double *p, *s0, *s1;          /* weights, state */
    uint64_t t;                   /* applied steps */
    double norm;                  /* of the last step */
    double clip;
} ref;

static ref ref_make(l8_params *g)
{
    ref R;
    memset(&R, 0, sizeof R);
    R.n = nflat(g);
    R.p = xmalloc((size_t)R.n * sizeof(double));
    R.s0 = calloc((size_t)R.n + 1, sizeof(double));
    R.s1 = calloc((size_t)R.n + 1, sizeof(double));
    ck_assert(R.s0 && R.s1);
    float *m = read_f32(l8_params_master_flat(g));
    for (int64_t i = 0; i < R.n; i++)
        R.p[i] = m[i];
    free(m);
    return R;
}

static void ref_free(ref *R)
{
    free(R->p);
    free(R->s0);
    free(R->s1);
}

/* Norm, skip decision and clip factor as clip_grad_norm_; 0 when skipped. */
static int ref_norm(ref *R, const float *g, float max_norm)
{
    double s = 0.0;
    for (int64_t i = 0; i < R->n; i++)
        s += (double)g[i] * (double)g[i];
    R->norm = sqrt(s);
    if (!((float)R->norm < INFINITY))
        return 0;
    R->t++;
    R->clip = 1.0;
    if (max_norm > 0.0f)
        R->clip = fmin(1.0, max_norm / (R->norm + 1e-6));
    return 1;
}

/* PyTorch AdamW (decoupled decay, bias-corrected). */
static int ref_adamw(ref *R, const float *g, const l8_adamw_config *c, float lr)
{
    if (!ref_norm(R, g, c->max_grad_norm))
        return 0;
    double b1 = c->beta1, b2 = c->beta2;
    double bc1 = 1.0 - pow(b1, (double)R->t), bc2 = 1.0 - pow(b2, (double)R->t);
    for (int64_t i = 0; i < R->n; i++) {
        double gi = g[i] * R->clip;
        R->p[i] *= 1.0 - (double)lr * c->weight_decay;
        R->s0[i] = b1 * R->s0[i] + (1.0 - b1) * gi;
        R->s1[i] = b2 * R->s1[i] + (1.0 - b2) * gi * gi;
        double mhat = R->s0[i] / bc1, vhat = R->s1[i] / bc2;
        R->p[i] -= lr * mhat / (sqrt(vhat) + c->eps);
    }
    return 1;
}

/* PyTorch SGD (coupled L2 decay, momentum buffer = first gradient). */
static int ref_sgd(ref *R, const float *g, const l8_sgd_config *c, float lr)
{
    if (!ref_norm(R, g, c->max_grad_norm))
        return 0;
    for (int64_t i = 0; i < R->n; i++) {
        double gi = g[i] * R->clip + (double)c->weight_decay * R->p[i];
        if (c->momentum > 0.0f) {
            R->s0[i] = R->t == 1 ? gi : c->momentum * R->s0[i] + (1.0 - c->dampening) * gi;
            gi = c->nesterov ? gi + c->momentum * R->s0[i] : R->s0[i];
        }
        R->p[i] -= lr * gi;
    }
    return 1;
}

/* got vs want, |d| <= RTOL |want| + ATOL scale, scale = max |want|. */
static void check_close(const char *what, const float *got, const double *want, int64_t n)
{
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        ck_assert_msg(d <= RTOL * fabs(want[i]) + ATOL * scale,
                      "%s[%lld]: got %.9g, fp64 reference %.9g (diff %.3g, scale %.3g)", what,
                      (long long)i, (double)got[i], want[i], d, scale);
    }
}

static void check_against_ref(l8_params *g, l8_optim *o, const ref *R)
{
    float *p = read_f32(l8_params_master_flat(g));
    check_close("master", p, R->p, R->n);
    free(p);
    for (int k = 0; k < l8_optim_state_count(o); k++) {
        float *s = read_f32(l8_optim_state(o, k));
        check_close(l8_optim_state_name(o, k), s, k ? R->s1 : R->s0, R->n);
        free(s);
    }
}

static void check_result(const l8_optim_result *res, const ref *R, int applied)
{
    ck_assert_int_eq(res->skipped, !applied);
    ck_assert_uint_eq(res->step, R->t);
    if (!applied)
        return;
    ck_assert_msg(fabs(res->grad_norm - R->norm) <= 1e-6 * R->norm,
                  "grad norm %.9g, fp64 %.9g", (double)res->grad_norm, R->norm);
    ck_assert_msg(fabs(res->clip_coef - R->clip) <= 1e-6 * R->clip, "clip %.9g, fp64 %.9g",
                  (double)res->clip_coef, R->clip);
}

/* ---- AdamW and SGD against fp64 ---- */

static int nsteps(void) { return l8_test_quick() ? 3 : 6; }

static void adamw_case(l8_dtype gdt, float max_norm, uint64_t salt)
{
    l8_rng r;
    l8_rng_init(&r, salt);
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, gdt, 96, l8_test_seed() ^ salt);
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    c.lr = 1e-2f;
    c.beta1 = 0.8f;
    c.beta2 = 0.95f;
    c.eps = 1e-4f;                /* large enough to matter for the small grads */
    c.weight_decay = 0.1f;
    c.max_grad_norm = max_norm;
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, &c, &o));
    ck_assert_int_eq(l8_optim_kind_of(o), L8_OPTIM_ADAMW);
    ck_assert_int_eq(l8_optim_state_count(o), 2);
    ck_assert_str_eq(l8_optim_state_name(o, 0), "exp_avg");
    ck_assert_str_eq(l8_optim_state_name(o, 1), "exp_avg_sq");
    /* a state that does not exist: NULL and a record that says why */
    l8_error_clear();
    ck_assert_ptr_null(l8_optim_state(o, 2));
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_INVALID_ARG);
    l8_error_clear();
    ck_assert_ptr_null(l8_optim_state_name(o, -1));
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_INVALID_ARG);
    l8_error_clear();
    ck_assert_ptr_null(l8_optim_state(NULL, 0));
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_INVALID_ARG);
    ref R = ref_make(g);
    float *gr = xmalloc((size_t)R.n * sizeof *gr);
    int clipped = 0;
    for (int step = 0; step < nsteps(); step++) {
        float lr = c.lr * (float)(step + 1) / 3.0f;      /* a schedule */
        L8_CK(l8_optim_set_lr(o, lr));
        ck_assert(l8_optim_lr(o) == lr);
        grads_random(&r, g, gr, 1.0f, gdt == L8_BF16);
        grads_upload(g, gr);
        l8_optim_result res = L8_OPTIM_RESULT_INIT;
        L8_CK(l8_optim_step(o, NULL, &res));
        int applied = ref_adamw(&R, gr, &c, lr);
        ck_assert(applied);
        check_result(&res, &R, applied);
        clipped += R.clip < 1.0;
        check_against_ref(g, o, &R);
    }
    if (max_norm > 0.0f)
        ck_assert_msg(clipped == nsteps(), "the clipping case did not clip");
    uint64_t step;
    L8_CK(l8_optim_get_step(o, &step));
    ck_assert_uint_eq(step, (uint64_t)nsteps());
    free(gr);
    ref_free(&R);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}

START_TEST(test_adamw_f32) { adamw_case(L8_F32, 0.0f, 0xad01); }
END_TEST

START_TEST(test_adamw_bf16_clipped) { adamw_case(L8_BF16, 5.0f, 0xad02); }
END_TEST

static void sgd_case(float momentum, float dampening, int nesterov, float wd, float max_norm,
                     l8_dtype gdt, uint64_t salt)
{
    l8_rng r;
    l8_rng_init(&r, salt);
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, gdt, 96, l8_test_seed() ^ salt);
    l8_sgd_config c = L8_SGD_CONFIG_INIT;
    c.lr = 0.05f;
    c.momentum = momentum;
    c.dampening = dampening;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    c.max_grad_norm = max_norm;
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_sgd(g, &c, &o));
    ck_assert_int_eq(l8_optim_kind_of(o), L8_OPTIM_SGD);
    ck_assert_int_eq(l8_optim_state_count(o), momentum > 0.0f ? 1 : 0);
    if (momentum > 0.0f)
        ck_assert_str_eq(l8_optim_state_name(o, 0), "momentum_buffer");
    ref R = ref_make(g);
    float *gr = xmalloc((size_t)R.n * sizeof *gr);
    for (int step = 0; step < nsteps(); step++) {
        grads_random(&r, g, gr, 1.0f, gdt == L8_BF16);
        grads_upload(g, gr);
        l8_optim_result res = L8_OPTIM_RESULT_INIT;
        L8_CK(l8_optim_step(o, NULL, &res));
        int applied = ref_sgd(&R, gr, &c, c.lr);
        check_result(&res, &R, applied);
        check_against_ref(g, o, &R);
    }
    free(gr);
    ref_free(&R);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}

START_TEST(test_sgd_plain) { sgd_case(0.0f, 0.0f, 0, 0.0f, 0.0f, L8_F32, 0x5d01); }
END_TEST

START_TEST(test_sgd_momentum)
{
    sgd_case(0.9f, 0.1f, 0, 0.01f, 0.0f, L8_F32, 0x5d02);
    sgd_case(0.9f, 0.0f, 0, 0.0f, 10.0f, L8_BF16, 0x5d03);
}
END_TEST

START_TEST(test_sgd_nesterov) { sgd_case(0.9f, 0.0f, 1, 0.01f, 20.0f, L8_F32, 0x5d04); }
END_TEST

/* ---- exact properties ---- */

/* Zero gradients: AdamW leaves only the decay p * (1 - lr*wd), bit for bit,
 * and its state stays zero; SGD's L2 decay is p - lr*(wd*p). The parameter
 * that never got a gradient is still stepped (its main_grad exists). */
START_TEST(test_weight_decay_alone)
{
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, L8_F32, 96, l8_test_seed());
    float *p0 = read_f32(l8_params_master_flat(g));
    int64_t n = nflat(g);
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    c.lr = 0.01f;
    c.weight_decay = 0.3f;
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, &c, &o));
    L8_CK(l8_params_zero_grad(g, NULL));
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert_int_eq(res.skipped, 0);
    ck_assert(res.grad_norm == 0.0f);
    float lw = c.lr * c.weight_decay;
    float decay = 1.0f - lw;
    float *p1 = read_f32(l8_params_master_flat(g));
    for (int64_t i = 0; i < n; i++) {
        float want = p0[i] * decay;
        ck_assert_msg(p1[i] == want, "p[%lld] = %.9g, want %.9g", (long long)i, (double)p1[i],
                      (double)want);
    }
    for (int k = 0; k < 2; k++) {
        float *s = read_f32(l8_optim_state(o, k));
        for (int64_t i = 0; i < n; i++)
            ck_assert(s[i] == 0.0f);
        free(s);
    }
    l8_optim_destroy(o);

    l8_sgd_config sc = L8_SGD_CONFIG_INIT;
    sc.lr = 0.1f;
    sc.weight_decay = 0.2f;
    L8_CK(l8_optim_create_sgd(g, &sc, &o));
    L8_CK(l8_optim_step(o, NULL, NULL));
    float *p2 = read_f32(l8_params_master_flat(g));
    for (int64_t i = 0; i < n; i++) {
        float t = sc.weight_decay * p1[i];
        t = sc.lr * t;
        ck_assert(p2[i] == p1[i] - t);
    }
    free(p0);
    free(p1);
    free(p2);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* Bias correction: the first AdamW step moves each weight by about lr
 * (m_hat = g, v_hat = g^2), whatever the gradient's size; at step 1001
 * (resumed) the corrections are those of t = 1001. */
START_TEST(test_bias_correction)
{
    l8_rng r;
    l8_rng_init(&r, 0xb1a5);
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, L8_F32, 96, l8_test_seed());
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    c.lr = 1e-3f;
    c.eps = 1e-10f;
    c.weight_decay = 0.0f;
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, &c, &o));
    int64_t n = nflat(g);
    float *gr = xmalloc((size_t)n * sizeof *gr);
    grads_random(&r, g, gr, 1.0f, 0);
    grads_upload(g, gr);
    float *p0 = read_f32(l8_params_master_flat(g));
    L8_CK(l8_optim_step(o, NULL, NULL));
    float *p1 = read_f32(l8_params_master_flat(g));
    for (int i = 0; i < l8_params_count(g); i++) {
        int64_t off = l8_params_offset(g, i);
        for (int64_t k = 0; k < l8_params_numel(g, i); k++) {
            double moved = (double)p0[off + k] - (double)p1[off + k];
            double want = gr[off + k] > 0 ? c.lr : -c.lr;
            ck_assert_msg(fabs(moved - want) <= 1e-3 * c.lr + 1e-7,
                          "step 1 moved [%lld] by %.6g, want %.6g", (long long)(off + k), moved,
                          want);
        }
    }
    /* resume at step 1000: the next step is t = 1001 (a step above 2^63 - 1,
     * a negative count through a signed type, is refused and changes nothing) */
    L8_CK(l8_optim_set_step(o, 1000));
    L8_CK_ST(l8_optim_set_step(o, UINT64_MAX), L8_ERR_INVALID_ARG);
    uint64_t t;
    L8_CK(l8_optim_get_step(o, &t));
    ck_assert_uint_eq(t, 1000);
    ref R = ref_make(g);
    float *s = read_f32(l8_optim_state(o, 0));
    for (int64_t i = 0; i < n; i++)
        R.s0[i] = s[i];
    free(s);
    s = read_f32(l8_optim_state(o, 1));
    for (int64_t i = 0; i < n; i++)
        R.s1[i] = s[i];
    free(s);
    R.t = 1000;
    grads_random(&r, g, gr, 1.0f, 0);
    grads_upload(g, gr);
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert_uint_eq(res.step, 1001);
    ck_assert(ref_adamw(&R, gr, &c, c.lr));
    check_against_ref(g, o, &R);
    ref_free(&R);
    free(gr);
    free(p0);
    free(p1);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* Clipping: above the threshold the factor is max / (norm + 1e-6) and SGD
 * moves by lr * g * factor; below it the factor is exactly 1. */
START_TEST(test_clipping)
{
    l8_rng r;
    l8_rng_init(&r, 0xc11b);
    l8_ctx *ctx = ctx_make();
    for (int above = 0; above < 2; above++) {
        l8_params *g = group_make(ctx, L8_F32, 96, l8_test_seed() + (uint64_t)above);
        int64_t n = nflat(g);
        float *gr = xmalloc((size_t)n * sizeof *gr);
        grads_random(&r, g, gr, 0.5f, 0);
        grads_upload(g, gr);
        double s = 0.0;
        for (int64_t i = 0; i < n; i++)
            s += (double)gr[i] * gr[i];
        double norm = sqrt(s);
        l8_sgd_config c = L8_SGD_CONFIG_INIT;
        c.lr = 0.1f;
        c.max_grad_norm = above ? (float)(norm * 0.25) : (float)(norm * 1.5);
        l8_optim *o = NULL;
        L8_CK(l8_optim_create_sgd(g, &c, &o));
        ref R = ref_make(g);
        l8_optim_result res = L8_OPTIM_RESULT_INIT;
        L8_CK(l8_optim_step(o, NULL, &res));
        ck_assert(ref_sgd(&R, gr, &c, c.lr));
        ck_assert_msg(fabs(res.grad_norm - norm) <= 1e-6 * norm, "norm %.9g, want %.9g",
                      (double)res.grad_norm, norm);
        if (above) {
            double want = c.max_grad_norm / (norm + 1e-6);
            ck_assert_msg(fabs(res.clip_coef - want) <= 1e-6 * want, "clip %.9g, want %.9g",
                          (double)res.clip_coef, want);
            ck_assert(res.clip_coef < 0.26f);
        } else {
            ck_assert(res.clip_coef == 1.0f);
        }
        check_against_ref(g, o, &R);
        free(gr);
        ref_free(&R);
        l8_optim_destroy(o);
        l8_params_destroy(g);
    }
    ctx_finish(ctx);
}
END_TEST

/* ---- non-finite gradients ---- */

typedef struct snapshot {
    float *p, *s[2];
    uint64_t step;
    int64_t n;
} snapshot;

static snapshot snap(l8_params *g, l8_optim *o)
{
    snapshot sn;
    memset(&sn, 0, sizeof sn);
    sn.p = read_f32(l8_params_master_flat(g));
    for (int k = 0; k < l8_optim_state_count(o); k++)
        sn.s[k] = read_f32(l8_optim_state(o, k));
    L8_CK(l8_optim_get_step(o, &sn.step));
    sn.n = nflat(g);
    return sn;
}

static void snap_equal(const snapshot *a, const snapshot *b, int64_t n, const char *what)
{
    ck_assert_msg(!memcmp(a->p, b->p, (size_t)n * sizeof(float)), "%s: weights differ", what);
    for (int k = 0; k < 2; k++)
        if (a->s[k])
            ck_assert_msg(!memcmp(a->s[k], b->s[k], (size_t)n * sizeof(float)),
                          "%s: state %d differs", what, k);
    ck_assert_msg(a->step == b->step, "%s: step %llu vs %llu", what,
                  (unsigned long long)a->step, (unsigned long long)b->step);
}

static void snap_free(snapshot *s)
{
    free(s->p);
    free(s->s[0]);
    free(s->s[1]);
}

static l8_optim *optim_of(l8_params *g, int kind)
{
    l8_optim *o = NULL;
    if (kind == 0) {
        l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
        c.lr = 1e-2f;
        c.max_grad_norm = 1.0f;
        L8_CK(l8_optim_create_adamw(g, &c, &o));
    } else {
        l8_sgd_config c = L8_SGD_CONFIG_INIT;
        c.lr = 1e-2f;
        c.momentum = 0.9f;
        c.weight_decay = 1e-3f;
        L8_CK(l8_optim_create_sgd(g, &c, &o));
    }
    return o;
}

/* A: g1, g2, bad, g3.  B: g1, g2, g3. The bad step changes nothing, so A and
 * B end bit for bit equal; the bad step itself reports skipped, a NaN or
 * Inf norm, the skip flag, and an unchanged step counter. */
START_TEST(test_nonfinite_skip)
{
    const float bad[] = { NAN, INFINITY, -INFINITY, 3e38f };
    const char *names[] = { "NaN", "+Inf", "-Inf", "norm above FLT_MAX" };
    l8_ctx *ctx = ctx_make();
    for (int kind = 0; kind < 2; kind++)
        for (int bi = 0; bi < 4; bi++) {
            l8_dtype gdt = (bi % 2) ? L8_BF16 : L8_F32;
            l8_rng r;
            l8_rng_init(&r, 0x5419 + (uint64_t)(kind * 8 + bi));
            l8_params *ga = group_make(ctx, gdt, 96, l8_test_seed());
            l8_params *gb = group_make(ctx, gdt, 96, l8_test_seed());
            l8_optim *oa = optim_of(ga, kind), *ob = optim_of(gb, kind);
            int64_t n = nflat(ga);
            float *gr = xmalloc((size_t)n * sizeof *gr);
            for (int step = 0; step < 2; step++) {
                grads_random(&r, ga, gr, 1.0f, 1);
                grads_upload(ga, gr);
                grads_upload(gb, gr);
                L8_CK(l8_optim_step(oa, NULL, NULL));
                L8_CK(l8_optim_step(ob, NULL, NULL));
            }
            snapshot before = snap(ga, oa);
            /* the bad step, on A only */
            grads_random(&r, ga, gr, 1.0f, 1);
            int64_t at = l8_params_offset(ga, 0) + 17;
            gr[at] = bad[bi];
            if (bi == 3)
                gr[l8_params_offset(ga, 2) + 3] = bad[bi];   /* two: sum of squares > FLT_MAX^2 */
            grads_upload(ga, gr);
            l8_optim_result res = L8_OPTIM_RESULT_INIT;
            L8_CK(l8_optim_step(oa, NULL, &res));
            ck_assert_msg(res.skipped == 1, "%s (kind %d): not skipped", names[bi], kind);
            ck_assert_uint_eq(res.step, 2);
            ck_assert_msg(!(res.grad_norm < INFINITY), "%s: norm %g", names[bi],
                          (double)res.grad_norm);
            ck_assert_int_eq(read_scalar_i32(l8_optim_skip_flag(oa)), 1);
            ck_assert(!(read_scalar_f32(l8_optim_grad_norm(oa)) < INFINITY));
            snapshot after = snap(ga, oa);
            snap_equal(&before, &after, n, names[bi]);
            snap_free(&after);
            snap_free(&before);
            /* g3 on both */
            grads_random(&r, ga, gr, 1.0f, 1);
            grads_upload(ga, gr);
            grads_upload(gb, gr);
            L8_CK(l8_optim_step(oa, NULL, &res));
            ck_assert_int_eq(res.skipped, 0);
            ck_assert_uint_eq(res.step, 3);
            ck_assert_int_eq(read_scalar_i32(l8_optim_skip_flag(oa)), 0);
            ck_assert(read_scalar_f32(l8_optim_grad_norm(oa)) == res.grad_norm);
            L8_CK(l8_optim_step(ob, NULL, NULL));
            snapshot sa = snap(ga, oa), sb = snap(gb, ob);
            snap_equal(&sa, &sb, n, "with and without the bad step");
            snap_free(&sa);
            snap_free(&sb);
            free(gr);
            l8_optim_destroy(oa);
            l8_optim_destroy(ob);
            l8_params_destroy(ga);
            l8_params_destroy(gb);
        }
    ctx_finish(ctx);
}
END_TEST

/* A NaN on the very first step: SGD's "first step" (buffer = gradient) is
 * still the first applied one. */
START_TEST(test_skip_first_step)
{
    l8_rng r;
    l8_rng_init(&r, 0xf1257);
    l8_ctx *ctx = ctx_make();
    l8_params *ga = group_make(ctx, L8_F32, 96, l8_test_seed());
    l8_params *gb = group_make(ctx, L8_F32, 96, l8_test_seed());
    l8_optim *oa = optim_of(ga, 1), *ob = optim_of(gb, 1);
    int64_t n = nflat(ga);
    float *gr = xmalloc((size_t)n * sizeof *gr);
    grads_random(&r, ga, gr, 1.0f, 0);
    gr[l8_params_offset(ga, 0) + 5] = NAN;              /* inside fc1.weight */
    grads_upload(ga, gr);
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    L8_CK(l8_optim_step(oa, NULL, &res));
    ck_assert(res.skipped && res.step == 0);
    for (int step = 0; step < 2; step++) {
        grads_random(&r, ga, gr, 1.0f, 0);
        grads_upload(ga, gr);
        grads_upload(gb, gr);
        L8_CK(l8_optim_step(oa, NULL, NULL));
        L8_CK(l8_optim_step(ob, NULL, NULL));
    }
    snapshot sa = snap(ga, oa), sb = snap(gb, ob);
    snap_equal(&sa, &sb, n, "after a skipped first step");
    snap_free(&sa);
    snap_free(&sb);
    free(gr);
    l8_optim_destroy(oa);
    l8_optim_destroy(ob);
    l8_params_destroy(ga);
    l8_params_destroy(gb);
    ctx_finish(ctx);
}
END_TEST

/* ---- determinism and resume ---- */

/* The end of a run on its own context: the snapshot, then everything freed. */
static snapshot run_end(l8_ctx *ctx, l8_params *g, l8_optim *o, float *gr)
{
    snapshot sn = snap(g, o);
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
    return sn;
}

/* Run `steps` steps of kind on a fresh context from fixed seeds. */
static snapshot run_fixed(int kind, l8_dtype gdt, int steps, uint64_t seed)
{
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, gdt, 96, seed);
    l8_optim *o = optim_of(g, kind);
    l8_rng r;
    l8_rng_init(&r, seed);
    float *gr = xmalloc((size_t)nflat(g) * sizeof *gr);
    for (int s = 0; s < steps; s++) {
        grads_random(&r, g, gr, 2.0f, gdt == L8_BF16);
        grads_upload(g, gr);
        L8_CK(l8_optim_step(o, NULL, NULL));
    }
    return run_end(ctx, g, o, gr);
}

START_TEST(test_determinism)
{
    for (int kind = 0; kind < 2; kind++)
        for (int bf = 0; bf < 2; bf++) {
            l8_dtype gdt = bf ? L8_BF16 : L8_F32;
            snapshot a = run_fixed(kind, gdt, 3, 0xde7e);
            snapshot b = run_fixed(kind, gdt, 3, 0xde7e);
            ck_assert_int_eq(a.n, b.n);
            snap_equal(&a, &b, a.n, "two identical runs");
            snap_free(&a);
            snap_free(&b);
        }
}
END_TEST

/* A schedule of rates through the device step scalars: set_lr before each
 * step (default mode), or set_lr + push_lr with l8_optim_set_lr_external
 * (graph mode), or set_lr without a push in external mode (the rate last
 * pushed stays: the create-time rate). */
static snapshot run_schedule(int kind, int external, int push)
{
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, L8_F32, 96, 0x1a7e);
    l8_optim *o = optim_of(g, kind);
    if (external) L8_CK(l8_optim_set_lr_external(o, 1));
    l8_rng r;
    l8_rng_init(&r, 0x1a7e);
    float *gr = xmalloc((size_t)nflat(g) * sizeof *gr);
    for (int s = 0; s < 4; s++) {
        grads_random(&r, g, gr, 2.0f, 0);
        grads_upload(g, gr);
        L8_CK(l8_optim_set_lr(o, 3e-3f * (float)(s + 1)));
        if (push) L8_CK(l8_optim_push_lr(o, NULL));
        L8_CK(l8_optim_step(o, NULL, NULL));
    }
    return run_end(ctx, g, o, gr);
}

START_TEST(test_lr_external)
{
    for (int kind = 0; kind < 2; kind++) {
        snapshot a = run_schedule(kind, 0, 0), b = run_schedule(kind, 1, 1);
        snapshot c = run_schedule(kind, 1, 0), d = run_schedule(kind, 0, 1);
        snap_equal(&a, &b, a.n, "external rate pushed before each step");
        snap_equal(&a, &d, a.n, "an extra push in the default mode");
        ck_assert_msg(memcmp(a.p, c.p, (size_t)a.n * sizeof(float)) != 0,
                      "without pushes the external mode must keep the old rate");
        snap_free(&a); snap_free(&b); snap_free(&c); snap_free(&d);
    }
    L8_CK_ST(l8_optim_set_lr_external(NULL, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_push_lr(NULL, NULL), L8_ERR_INVALID_ARG);
}
END_TEST

/* Rates from a device table (l8_optim_set_lr_table) against the same rates
 * set on the host before each step, on dev: 6 steps of which the second is
 * skipped (a NaN gradient: the cursor still advances) and the last two run
 * past the table's 4 entries (its last rate). Then the table is dropped and
 * a host rate drives one more step. table 0: set_lr before each step. */
static snapshot run_table(const char *dev, int kind, int table)
{
    static const float rates[4] = { 7e-3f, 3.3e-3f, 1.1e-3f, 2.9e-4f };
    l8_ctx *ctx = ctx_make_dev(dev, NULL);
    l8_params *g = group_make(ctx, L8_F32, 96, 0x7ab1e);
    l8_optim *o = NULL;
    if (kind == 0) {
        l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
        c.weight_decay = 0.1f;
        L8_CK(l8_optim_create_adamw(g, &c, &o));
    } else {
        o = optim_of(g, kind);
    }
    l8_tensor *rt = NULL;
    int64_t four = 4;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &four, &rt));
    L8_CK(l8_tensor_copy_from_host(rt, rates, sizeof rates, NULL));
    if (table) L8_CK(l8_optim_set_lr_table(o, rt, NULL));
    l8_tensor_destroy(rt);                 /* the optimizer keeps its own view */
    l8_rng r;
    l8_rng_init(&r, 0x7ab1e);
    float *gr = xmalloc((size_t)nflat(g) * sizeof *gr);
    for (int k = 0; k < 6; k++) {
        grads_random(&r, g, gr, 2.0f, 0);
        if (k == 1) gr[l8_params_offset(g, 0) + 3] = NAN;
        grads_upload(g, gr);
        if (!table) L8_CK(l8_optim_set_lr(o, rates[k < 4 ? k : 3]));
        L8_CK(l8_optim_step(o, NULL, NULL));
    }
    if (table) {
        ck_assert_int_eq(read_scalar_i32(l8_optim_cursor(o)), 6);
        L8_CK(l8_optim_set_lr_table(o, NULL, NULL));
        ck_assert_int_eq(read_scalar_i32(l8_optim_cursor(o)), 0);
    }
    grads_random(&r, g, gr, 2.0f, 0);
    grads_upload(g, gr);
    L8_CK(l8_optim_set_lr(o, 5e-3f));
    L8_CK(l8_optim_step(o, NULL, NULL));
    return run_end(ctx, g, o, gr);
}

static void lr_table_on(const char *dev)
{
    for (int kind = 0; kind < 2; kind++) {
        snapshot a = run_table(dev, kind, 0), b = run_table(dev, kind, 1);
        snap_equal(&a, &b, a.n, kind ? "sgd: table vs host rates" : "adamw: table vs host rates");
        ck_assert_uint_eq(a.step, 6);
        snap_free(&a);
        snap_free(&b);
    }
}

START_TEST(test_lr_table) { lr_table_on("host"); }
END_TEST

START_TEST(test_gpu_lr_table) { lr_table_on("cuda:0"); }
END_TEST

START_TEST(test_lr_table_errors)
{
    l8_ctx *ctx = ctx_make(), *other = ctx_make();
    l8_params *g = group_make(ctx, L8_F32, 8, 1);
    l8_optim *o = optim_of(g, 0);
    l8_tensor *i32 = NULL, *two = NULL, *empty = NULL, *xo = NULL, *strided = NULL;
    int64_t one = 1, sh2[2] = { 2, 2 }, zero = 0, four = 4;
    L8_CK(l8_tensor_empty(ctx, L8_I32, 1, &one, &i32));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, sh2, &two));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &zero, &empty));
    L8_CK(l8_tensor_empty(other, L8_F32, 1, &four, &xo));
    int64_t st2 = 2;
    L8_CK(l8_tensor_from_storage(l8_tensor_storage(two), 0, L8_F32, 1, sh2, &st2, &strided));
    L8_CK_ST(l8_optim_set_lr_table(NULL, two, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr_table(o, i32, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr_table(o, two, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr_table(o, empty, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr_table(o, xo, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr_table(o, strided, NULL), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(l8_optim_cursor(NULL));
    ck_assert_ptr_nonnull(l8_optim_cursor(o));
    l8_tensor *all[] = { i32, two, empty, xo, strided };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(other);
    ctx_finish(ctx);
}
END_TEST

/* Save master, state and step after k steps; restore into a fresh group and
 * optimizer; both continue bit for bit alike. State views per parameter
 * alias the flat state at the parameter's offset. */
START_TEST(test_resume)
{
    for (int kind = 0; kind < 2; kind++) {
        l8_rng r;
        l8_rng_init(&r, 0x4e5u + (uint64_t)kind);
        l8_ctx *ctx = ctx_make();
        l8_params *ga = group_make(ctx, L8_F32, 96, l8_test_seed());
        l8_optim *oa = optim_of(ga, kind);
        int64_t n = nflat(ga);
        float *gr = xmalloc((size_t)n * sizeof *gr);
        for (int s = 0; s < 3; s++) {
            grads_random(&r, ga, gr, 1.0f, 0);
            grads_upload(ga, gr);
            L8_CK(l8_optim_step(oa, NULL, NULL));
        }
        snapshot saved = snap(ga, oa);
        /* per-parameter state views */
        for (int k = 0; k < l8_optim_state_count(oa); k++)
            for (int id = 0; id < l8_params_count(ga); id++) {
                l8_tensor *v = NULL;
                L8_CK(l8_optim_state_view(oa, k, id, &v));
                ck_assert_int_eq(l8_tensor_ndim(v), l8_params_ndim(ga, id));
                ck_assert_int_eq(l8_tensor_numel(v), l8_params_numel(ga, id));
                ck_assert_uint_eq(l8_tensor_offset(v), (size_t)l8_params_offset(ga, id) * 4);
                float *x = read_f32(v);
                ck_assert(!memcmp(x, saved.s[k] + l8_params_offset(ga, id),
                                  (size_t)l8_params_numel(ga, id) * sizeof *x));
                free(x);
                l8_tensor_destroy(v);
            }
        /* restore into B (different initial weights) */
        l8_params *gb = group_make(ctx, L8_F32, 96, l8_test_seed() + 99);
        l8_optim *ob = optim_of(gb, kind);
        L8_CK(l8_tensor_copy_from_host(l8_params_master_flat(gb), saved.p,
                                       (size_t)n * sizeof(float), NULL));
        for (int k = 0; k < l8_optim_state_count(ob); k++)
            L8_CK(l8_tensor_copy_from_host(l8_optim_state(ob, k), saved.s[k],
                                           (size_t)n * sizeof(float), NULL));
        L8_CK(l8_optim_set_step(ob, saved.step));
        for (int s = 0; s < 2; s++) {
            grads_random(&r, ga, gr, 1.0f, 0);
            grads_upload(ga, gr);
            grads_upload(gb, gr);
            L8_CK(l8_optim_step(oa, NULL, NULL));
            L8_CK(l8_optim_step(ob, NULL, NULL));
        }
        snapshot sa = snap(ga, oa), sb = snap(gb, ob);
        snap_equal(&sa, &sb, n, "resumed");
        ck_assert_uint_eq(sa.step, 5);
        snap_free(&sa);
        snap_free(&sb);
        snap_free(&saved);
        free(gr);
        l8_optim_destroy(oa);
        l8_optim_destroy(ob);
        l8_params_destroy(ga);
        l8_params_destroy(gb);
        ctx_finish(ctx);
    }
}
END_TEST

/* ---- streams, results, an empty group ---- */

START_TEST(test_streams_and_results)
{
    l8_rng r;
    l8_rng_init(&r, 0x57e4);
    l8_ctx *ctx = ctx_make();
    l8_params *g = group_make(ctx, L8_F32, 96, l8_test_seed());
    l8_optim *o = optim_of(g, 0);
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    /* before any step */
    L8_CK(l8_optim_read_result(o, &res));
    ck_assert_uint_eq(res.step, 0);
    ck_assert_int_eq(res.skipped, 0);
    float *gr = xmalloc((size_t)nflat(g) * sizeof *gr);
    grads_random(&r, g, gr, 1.0f, 0);
    grads_upload(g, gr);
    L8_CK(l8_optim_step(o, l8_ctx_stream(ctx, L8_STREAM_COMM), NULL));
    L8_CK(l8_optim_read_result(o, &res));
    ck_assert_uint_eq(res.step, 1);
    ck_assert(res.grad_norm > 0.0f && res.grad_norm == read_scalar_f32(l8_optim_grad_norm(o)));
    L8_CK(l8_optim_step(o, NULL, NULL));
    L8_CK(l8_optim_read_result(o, &res));
    ck_assert_uint_eq(res.step, 2);
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);

    /* an empty group steps its counter */
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_finalize(g));
    o = optim_of(g, 0);
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert(res.step == 1 && !res.skipped && res.grad_norm == 0.0f);
    l8_optim_destroy(o);
    o = optim_of(g, 1);
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert_uint_eq(res.step, 1);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
    l8_ctx *ctx = ctx_make();
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "w", 1, (const int64_t[1]){ 8 }, NULL));
    l8_optim *o = (l8_optim *)1;
    L8_CK_ST(l8_optim_create_adamw(g, NULL, &o), L8_ERR_STATE);   /* not finalized */
    ck_assert_ptr_null(o);
    L8_CK_ST(l8_optim_create_sgd(g, NULL, &o), L8_ERR_STATE);
    L8_CK(l8_params_finalize(g));
    L8_CK_ST(l8_optim_create_adamw(NULL, NULL, &o), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_create_adamw(g, NULL, NULL), L8_ERR_INVALID_ARG);

    l8_adamw_config a = L8_ADAMW_CONFIG_INIT;
    l8_adamw_config bad_a[8];
    for (int i = 0; i < 8; i++)
        bad_a[i] = a;
    bad_a[0].size = 4;                 /* smaller than the size field */
    bad_a[1].lr = -1.0f;
    bad_a[2].lr = NAN;
    bad_a[3].beta1 = 1.0f;
    bad_a[4].beta2 = -0.1f;
    bad_a[5].eps = 0.0f;
    bad_a[6].weight_decay = INFINITY;
    bad_a[7].max_grad_norm = -1.0f;
    for (int i = 0; i < 8; i++) {
        L8_CK_ST(l8_optim_create_adamw(g, &bad_a[i], &o), L8_ERR_INVALID_ARG);
        ck_assert_ptr_null(o);
    }
    l8_sgd_config sgd = L8_SGD_CONFIG_INIT;
    l8_sgd_config bad_s[6];
    for (int i = 0; i < 6; i++)
        bad_s[i] = sgd;
    bad_s[0].size = 4;
    bad_s[1].momentum = -0.5f;
    bad_s[2].dampening = 1.5f;
    bad_s[3].nesterov = 1;                                  /* without momentum */
    bad_s[4].nesterov = 1;
    bad_s[4].momentum = 0.9f;
    bad_s[4].dampening = 0.1f;                              /* with dampening */
    bad_s[5].lr = INFINITY;
    for (int i = 0; i < 6; i++)
        L8_CK_ST(l8_optim_create_sgd(g, &bad_s[i], &o), L8_ERR_INVALID_ARG);

    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    ck_assert(l8_optim_lr(o) == 1e-3f);
    L8_CK_ST(l8_optim_set_lr(o, -1.0f), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_lr(o, NAN), L8_ERR_INVALID_ARG);
    ck_assert(l8_optim_lr(o) == 1e-3f);
    L8_CK_ST(l8_optim_set_lr(NULL, 1.0f), L8_ERR_INVALID_ARG);
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    res.size = 4;
    L8_CK_ST(l8_optim_step(o, NULL, &res), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_read_result(o, &res), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_step(NULL, NULL, NULL), L8_ERR_INVALID_ARG);
    l8_ctx *other = ctx_make();
    L8_CK_ST(l8_optim_step(o, l8_ctx_stream(other, L8_STREAM_COMPUTE), NULL),
             L8_ERR_INVALID_ARG);
    ctx_finish(other);
    uint64_t step = 9;
    L8_CK(l8_optim_get_step(o, &step));
    ck_assert_uint_eq(step, 0);                             /* nothing ran */
    L8_CK_ST(l8_optim_get_step(o, NULL), L8_ERR_INVALID_ARG);
    l8_tensor *v = (l8_tensor *)1;
    L8_CK_ST(l8_optim_state_view(o, 2, 0, &v), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(v);
    L8_CK_ST(l8_optim_state_view(o, 0, 1, &v), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_state_view(o, 0, -1, &v), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(l8_optim_state(o, 2));
    ck_assert_ptr_null(l8_optim_state(o, -1));
    ck_assert_ptr_null(l8_optim_state_name(o, 2));
    ck_assert_ptr_null(l8_optim_state(NULL, 0));
    ck_assert_int_eq(l8_optim_state_count(NULL), 0);
    ck_assert(isnan(l8_optim_lr(NULL)));
    ck_assert_ptr_null(l8_optim_grad_norm(NULL));
    l8_optim_destroy(o);
    l8_optim_destroy(NULL);

    /* SGD without momentum has no state */
    L8_CK(l8_optim_create_sgd(g, NULL, &o));
    ck_assert_int_eq(l8_optim_state_count(o), 0);
    ck_assert_ptr_null(l8_optim_state(o, 0));
    L8_CK_ST(l8_optim_state_view(o, 0, 0, &v), L8_ERR_INVALID_ARG);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* Creating the optimizer meets the fault: OOM, nothing held beyond the
 * group's buffers, and it succeeds once the fault is cleared. */
START_TEST(test_fault_injection)
{
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &host);
    uint64_t calls = 0;
    for (uint64_t nth = 0; nth <= calls + 1; nth++) {
        l8_ctx *ctx = ctx_make_dev("host", &fp.base);
        l8_params *g = NULL;
        L8_CK(l8_params_create(ctx, NULL, &g));
        /* 12 MB buffers: each state buffer takes a segment of its own */
        L8_CK(l8_params_add(g, "big", 1, (const int64_t[1]){ 3000000 }, NULL));
        L8_CK(l8_params_finalize(g));
        uint64_t held = live_bytes(ctx);
        fp.calls = fp.failures = 0;
        fp.fail_nth = nth;
        fp.fail_sticky = 1;
        l8_optim *o = NULL;
        l8_status st = l8_optim_create_adamw(g, NULL, &o);
        if (nth == 0) {
            L8_CK(st);
            calls = fp.calls;
            ck_assert_msg(calls >= 3, "create made %llu segment allocations: the test no "
                          "longer reaches every error path", (unsigned long long)calls);
        } else if (nth <= calls) {
            ck_assert_msg(st == L8_ERR_OOM, "fault at %llu -> %s", (unsigned long long)nth,
                          l8_last_error_string());
            ck_assert_ptr_null(o);
            ck_assert_uint_eq(live_bytes(ctx), held);
            fp.fail_nth = 0;
            L8_CK(l8_optim_create_adamw(g, NULL, &o));
        } else {
            L8_CK(st);
        }
        L8_CK(l8_optim_step(o, NULL, NULL));
        l8_optim_destroy(o);
        l8_params_destroy(g);
        fp.fail_nth = 0;
        ctx_finish(ctx);
        ck_assert_uint_eq(fp.live_bytes, 0);
    }
}
END_TEST

/* ---- GPU: bit for bit against the host ---- */

typedef struct pair {
    l8_ctx *ctx[2];               /* 0 cuda, 1 host */
    l8_params *g[2];
    l8_optim *o[2];
} pair;

static void gpu_compare(pair *pr, int64_t n, const char *what)
{
    float *a = read_f32(l8_params_master_flat(pr->g[0]));
    float *b = read_f32(l8_params_master_flat(pr->g[1]));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof a[i]), "%s: master[%lld] gpu %.9g host %.9g",
                      what, (long long)i, (double)a[i], (double)b[i]);
    free(a);
    free(b);
    for (int k = 0; k < l8_optim_state_count(pr->o[1]); k++) {
        a = read_f32(l8_optim_state(pr->o[0], k));
        b = read_f32(l8_optim_state(pr->o[1], k));
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(!memcmp(&a[i], &b[i], sizeof a[i]),
                          "%s: %s[%lld] gpu %.9g host %.9g", what,
                          l8_optim_state_name(pr->o[1], k), (long long)i, (double)a[i],
                          (double)b[i]);
        free(a);
        free(b);
    }
}

static void gpu_case(l8_ctx *gc, l8_ctx *hc, int kind, l8_dtype gdt, int64_t rows1, int steps,
                     uint64_t salt)
{
    pair pr;
    memset(&pr, 0, sizeof pr);
    pr.ctx[0] = gc;
    pr.ctx[1] = hc;
    for (int d = 0; d < 2; d++) {
        pr.g[d] = group_make(pr.ctx[d], gdt, rows1, l8_test_seed() ^ salt);
        if (kind == 0) {
            l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
            c.lr = 3e-3f;
            c.beta2 = 0.95f;
            c.weight_decay = 0.1f;
            c.max_grad_norm = rows1 > 1000 ? 50.0f : 5.0f;
            L8_CK(l8_optim_create_adamw(pr.g[d], &c, &pr.o[d]));
        } else {
            l8_sgd_config c = L8_SGD_CONFIG_INIT;
            c.lr = 1e-2f;
            c.momentum = 0.9f;
            c.nesterov = kind == 2;
            c.dampening = kind == 1 ? 0.1f : 0.0f;
            c.weight_decay = 1e-2f;
            c.max_grad_norm = kind == 1 ? 5.0f : 0.0f;
            L8_CK(l8_optim_create_sgd(pr.g[d], &c, &pr.o[d]));
        }
    }
    int64_t n = nflat(pr.g[0]);
    ck_assert_int_eq(n, nflat(pr.g[1]));
    l8_rng r;
    l8_rng_init(&r, salt);
    float *gr = xmalloc((size_t)n * sizeof *gr);
    char what[96];
    for (int s = 0; s < steps; s++) {
        grads_random(&r, pr.g[0], gr, 1.0f, 0);          /* bf16 groups round them */
        if (s == 1)
            gr[l8_params_offset(pr.g[0], 0) + 100] = NAN;   /* a skipped step */
        l8_optim_result res[2] = { L8_OPTIM_RESULT_INIT, L8_OPTIM_RESULT_INIT };
        for (int d = 0; d < 2; d++) {
            grads_upload(pr.g[d], gr);
            L8_CK(l8_optim_step(pr.o[d], NULL, &res[d]));
        }
        snprintf(what, sizeof what, "kind %d %s rows %lld step %d", kind, l8_dtype_name(gdt),
                 (long long)rows1, s);
        ck_assert_msg(res[0].skipped == res[1].skipped && res[0].step == res[1].step, "%s", what);
        /* bit for bit; a NaN norm's payload may differ (the GPU's is canonical) */
        ck_assert_msg(!memcmp(&res[0].grad_norm, &res[1].grad_norm, sizeof(float)) ||
                      (isnan(res[0].grad_norm) && isnan(res[1].grad_norm)),
                      "%s: norm gpu %.9g host %.9g", what, (double)res[0].grad_norm,
                      (double)res[1].grad_norm);
        ck_assert_msg(res[0].clip_coef == res[1].clip_coef, "%s: clip gpu %.9g host %.9g", what,
                      (double)res[0].clip_coef, (double)res[1].clip_coef);
        if (!res[0].skipped) {    /* the f64 sum of squares itself: the partials' order */
            uint64_t sq[2];
            for (int d = 0; d < 2; d++) sq[d] = sumsq_bits(pr.o[d]);
            ck_assert_msg(sq[0] == sq[1], "%s: sumsq gpu 0x%016llx host 0x%016llx", what,
                          (unsigned long long)sq[0], (unsigned long long)sq[1]);
        }
        ck_assert_int_eq(res[0].skipped, s == 1);
        gpu_compare(&pr, n, what);
    }
    free(gr);
    for (int d = 0; d < 2; d++) {
        l8_optim_destroy(pr.o[d]);
        l8_params_destroy(pr.g[d]);
    }
}

START_TEST(test_gpu_matches_host)
{
    l8_ctx *gc = ctx_make_dev("cuda:0", NULL), *hc = ctx_make();
    for (int kind = 0; kind < 3; kind++)
        for (int bf = 0; bf < 2; bf++) {
            l8_dtype gdt = bf ? L8_BF16 : L8_F32;
            gpu_case(gc, hc, kind, gdt, 96, 4, 0x6a0 + (uint64_t)(kind * 2 + bf));
            /* ~5M elements: many CTAs, grid-stride loops, 1200+ partials
             * (quick mode, the compute-sanitizer run: ~0.5M) */
            gpu_case(gc, hc, kind, gdt, l8_test_quick() ? 4000 : 40000, 3,
                     0x6b0 + (uint64_t)(kind * 2 + bf));
        }
    /* l8_optim_finish: each of its 256 threads sums partials t, t + 256, ...,
     * then a tree in each warp and the 8 warps in order: 1, 32, 33, 256 and
     * 257 partials (one warp, a second, every thread, a second partial for
     * thread 0; about (c - 1/2) x 4096 elements: 131 a row of fc1, 971
     * more), the sum of squares bit for bit */
    static const int64_t edge[] = { 1, 32, 33, 256, 257 };
    for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
        int64_t rows = ((2 * edge[e] - 1) * 2048 - 971) / 131;
        l8_params *g = group_make(hc, L8_F32, rows, 1);
        ck_assert_int_eq((nflat(g) + 4095) / 4096, edge[e]);
        l8_params_destroy(g);
        gpu_case(gc, hc, 0, L8_F32, rows, 2, 0x6c0 + (uint64_t)e);
    }
    ctx_finish(hc);
    ctx_finish(gc);
}
END_TEST

/* No host sync per step: five steps, then one read; steps on a second stream
 * ordered by an event. */
START_TEST(test_gpu_async_steps)
{
    l8_ctx *gc = ctx_make_dev("cuda:0", NULL), *hc = ctx_make();
    l8_params *g[2];
    l8_optim *o[2];
    l8_ctx *cs[2] = { gc, hc };
    for (int d = 0; d < 2; d++) {
        g[d] = group_make(cs[d], L8_F32, 512, 0xa5a5);
        o[d] = optim_of(g[d], 0);
    }
    l8_rng r;
    l8_rng_init(&r, 0xa5a6);
    int64_t n = nflat(g[0]);
    float *gr = xmalloc((size_t)n * sizeof *gr);
    grads_random(&r, g[0], gr, 1.0f, 0);
    for (int d = 0; d < 2; d++) {
        grads_upload(g[d], gr);                           /* blocking */
        /* three steps on the copy stream, then two on compute after it */
        l8_stream *copy = l8_ctx_stream(cs[d], L8_STREAM_COPY);
        for (int s = 0; s < 3; s++)
            L8_CK(l8_optim_step(o[d], copy, NULL));
        l8_event *ev = NULL;
        L8_CK(l8_event_create(cs[d], 0, &ev));
        L8_CK(l8_event_record(ev, copy));
        L8_CK(l8_stream_wait_event(l8_ctx_stream(cs[d], L8_STREAM_COMPUTE), ev));
        for (int s = 3; s < 5; s++)
            L8_CK(l8_optim_step(o[d], NULL, NULL));
        l8_event_destroy(ev);
    }
    l8_optim_result a = L8_OPTIM_RESULT_INIT, b = L8_OPTIM_RESULT_INIT;
    L8_CK(l8_optim_read_result(o[0], &a));
    L8_CK(l8_optim_read_result(o[1], &b));
    ck_assert_uint_eq(a.step, 5);
    ck_assert(a.step == b.step && a.grad_norm == b.grad_norm);
    pair pr = { { gc, hc }, { g[0], g[1] }, { o[0], o[1] } };
    L8_CK(l8_ctx_synchronize(gc));
    gpu_compare(&pr, n, "async steps");
    free(gr);
    for (int d = 0; d < 2; d++) {
        l8_optim_destroy(o[d]);
        l8_params_destroy(g[d]);
    }
    ctx_finish(hc);
    ctx_finish(gc);
}
END_TEST

Suite *l8_optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *vs = tcase_create("vs_fp64");
    tcase_add_test(vs, test_adamw_f32);
    tcase_add_test(vs, test_adamw_bf16_clipped);
    tcase_add_test(vs, test_sgd_plain);
    tcase_add_test(vs, test_sgd_momentum);
    tcase_add_test(vs, test_sgd_nesterov);
    TCase *exact = tcase_create("exact");
    tcase_add_test(exact, test_weight_decay_alone);
    tcase_add_test(exact, test_bias_correction);
    tcase_add_test(exact, test_clipping);
    tcase_add_test(exact, test_nonfinite_skip);
    tcase_add_test(exact, test_skip_first_step);
    tcase_add_test(exact, test_determinism);
    tcase_add_test(exact, test_lr_external);
    tcase_add_test(exact, test_lr_table);
    tcase_add_test(exact, test_lr_table_errors);
    tcase_add_test(exact, test_resume);
    tcase_add_test(exact, test_streams_and_results);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_errors);
    tcase_add_test(errors, test_fault_injection);
    TCase *host[] = { vs, exact, errors };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
        tcase_set_tags(host[i], "host");
        tcase_set_timeout(host[i], 300);
        suite_add_tcase(s, host[i]);
    }
    TCase *gpu = tcase_create("gpu_optim");
    tcase_add_test(gpu, test_gpu_matches_host);
    tcase_add_test(gpu, test_gpu_async_steps);
    tcase_add_test(gpu, test_gpu_lr_table);
    tcase_set_tags(gpu, "gpu");
    tcase_set_timeout(gpu, 900);
    suite_add_tcase(s, gpu);
    return s;
}
