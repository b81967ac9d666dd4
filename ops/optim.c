/* optim.c - AdamW and SGD over a parameter group's flat buffers: state,
 * launchers for ptx/optim.ptx.in, and the host reference.
 *
 * A step is three kernels on one stream (see ops/optim.h and the .ptx
 * header): l8_optim_sumsq (f64 partial per 4096-element chunk), then
 * l8_optim_finish (one CTA: norm, skip decision, step counter, clip
 * coefficient, bias corrections into the 64-byte step scalars), then the
 * update, which reads the scalars and does nothing on a skipped step. No
 * host synchronization is needed between them or after them.
 *
 * The host reference below repeats the kernels operation for operation:
 * the same chunk partition, the same per-thread order, the same warp tree
 * and the same f32/f64 roundings. It is written one rounding per statement
 * so that no compiler contracts a multiply and an add into an fma (GCC does
 * not in ISO C mode, clang only within one expression), and it relies on
 * IEEE f32/f64 arithmetic with round-to-nearest, which x86-64 SSE and the
 * GPU's .rn operations both give. Hence GPU == host, bit for bit.
 *
 * Every launch goes over a list of ranges of the group's buffers: one,
 * [0, n), for the whole group (exactly the three launches above), or the
 * shard's (ops/optim_shard.c): one sumsq and one update launch per range,
 * with offset pointers, state compacted range after range. With a norm
 * hook l8_optim_finish runs twice around it (flags 2: this rank's sum out
 * as f32; flags 4: the hook's sum in).
 *
 * Memory (allocated at create, never per step):
 *   state k   f32 [n] each, zeroed        tags "optim.exp_avg", ...
 *             (sharded: f32 [shard numel], reallocated by set_shard)
 *   work      256 B of step scalars, then f64 [nchunks] partials
 *             ("optim.scalars"; a shard with more partials gets its own
 *             "optim.partials")
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ops/optim.h"
#include "ops/optim_internal.h"
#include "runtime/internal.h"
#include "ops/internal.h"

#define CHUNK L8I_OPTIM_CHUNK
#define RED_THREADS 256u       /* l8_optim_sumsq / l8_optim_finish: .reqntid 256 */
#define UPD_THREADS 256u
/* Resident CTAs per SM from `ptxas -v` (sm_90, 256 threads): sumsq 26
 * registers and sgd 28 -> 8 (thread limit); adamw 40 -> 6. */
#define OCC_SUMSQ 8u
#define OCC_ADAMW 6u
#define OCC_SGD 8u
#define SCALARS_BYTES L8I_OPTIM_SCALARS_BYTES

typedef l8i_optim_scalars scalars;
_Static_assert(sizeof(scalars) == 64, "scalars are 64 bytes");
_Static_assert(offsetof(scalars, skip) == 8 && offsetof(scalars, norm) == 12 &&
               offsetof(scalars, clip) == 16 && offsetof(scalars, bc1) == 20 &&
               offsetof(scalars, bc2s) == 24 && offsetof(scalars, sumsq) == 32 &&
               offsetof(scalars, lr) == 40 && offsetof(scalars, decay) == 44 &&
               offsetof(scalars, psum) == 48 && offsetof(scalars, cursor) == 52,
               "scalar offsets are those of ptx/optim.ptx.in");

#define SGD_F_WD 1u
#define SGD_F_MOM 2u
#define SGD_F_NEST 4u

/* l8_optim_finish's p_flags beyond bit 0 (AdamW) */
#define FIN_PARTIAL_OUT 2u     /* write this rank's sum (f32) to scalars.psum and stop */
#define FIN_REDUCED_IN 4u      /* the sum is scalars.psum (the hook's), not the partials */

/* ------------------------------------------------------------------------ */
/* host reference                                                            */

static float grad_at(const void *g, int bf16, uint64_t i)
{
    if (!bf16)
        return ((const float *)g)[i];
    uint32_t u = (uint32_t)((const uint16_t *)g)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The sum of one value per thread in l8_optim_sumsq's and l8_optim_finish's
 * order: a tree in each warp (shfl.down 16, 8, 4, 2, 1), then warps 0..7 one
 * after another. acc is overwritten. */
static double cta_sum(double acc[RED_THREADS])
{
    double s = 0.0;
    for (unsigned w = 0; w < RED_THREADS / 32; w++) {
        double *v = acc + 32 * w;
        for (unsigned off = 16; off >= 1; off /= 2)
            for (unsigned i = 0; i < off; i++)
                v[i] = v[i] + v[i + off];
        s = w ? s + v[0] : v[0];
    }
    return s;
}

/* l8_optim_sumsq */
static void sumsq_ref(const void *g, int bf16, uint64_t n, double *part, uint64_t nchunks)
{
    double acc[RED_THREADS];
    for (uint64_t c = 0; c < nchunks; c++) {
        for (unsigned t = 0; t < RED_THREADS; t++) {
            double a = 0.0;
            for (unsigned j = 0; j < 4; j++) {
                uint64_t e = c * CHUNK + (uint64_t)(j * RED_THREADS + t) * 4;
                if (e >= n)
                    break;
                for (unsigned k = 0; k < 4; k++) {
                    double x = (double)grad_at(g, bf16, e + k);
                    a += x * x;           /* x*x is exact: fma or not, the same */
                }
            }
            acc[t] = a;
        }
        part[c] = cta_sum(acc);
    }
}

/* beta^t by repeated squaring, as the kernel. */
static double pow_sq(double b, uint64_t t)
{
    double r = 1.0;
    while (t) {
        if (t & 1)
            r = r * b;
        b = b * b;
        t >>= 1;
    }
    return r;
}

/* The step cursor, in l8_optim_finish: with a rate table, the step's rate
 * rates[min(cursor, n - 1)] and AdamW's decay 1 - rate*wd (each rounded
 * once, as l8_optim_step rounds them on the host); then cursor + 1. */
static void cursor_ref(scalars *sc, const float *rates, uint32_t nrates, float wd, int adamw)
{
    if (rates) {
        float lr = rates[sc->cursor < nrates ? sc->cursor : nrates - 1];
        float lw = lr * wd;
        sc->lr = lr;
        sc->decay = adamw ? 1.0f - lw : 1.0f;
    }
    sc->cursor = sc->cursor + 1;
}

/* l8_optim_finish */
static void finish_ref(const double *part, uint64_t nchunks, scalars *sc, float max_norm,
                       float beta1, float beta2, int adamw, unsigned mode, const float *rates,
                       uint32_t nrates, float wd)
{
    double acc[RED_THREADS];
    for (unsigned t = 0; t < RED_THREADS; t++) {
        double a = 0.0;
        for (uint64_t i = t; i < nchunks; i += RED_THREADS)
            a = a + part[i];
        acc[t] = a;
    }
    double s = cta_sum(acc);
    if (mode & FIN_PARTIAL_OUT) {
        sc->psum = (float)s;
        return;
    }
    cursor_ref(sc, rates, nrates, wd, adamw);
    if (mode & FIN_REDUCED_IN)
        s = (double)sc->psum;
    sc->sumsq = s;
    double norm = sqrt(s);
    float normf = (float)norm;
    sc->norm = normf;
    if (!(normf < INFINITY)) {
        sc->skip = 1;
        return;
    }
    sc->skip = 0;
    uint64_t t = sc->step + 1;
    sc->step = t;
    float clip = 1.0f;
    if (max_norm > 0.0f) {
        double den = norm + 1e-6;
        double c = (double)max_norm / den;
        if (c < 1.0)
            clip = (float)c;
    }
    sc->clip = clip;
    if (adamw) {
        double p1 = pow_sq((double)beta1, t), p2 = pow_sq((double)beta2, t);
        double b1 = 1.0 - p1, b2 = 1.0 - p2;
        sc->bc1 = (float)b1;
        sc->bc2s = (float)sqrt(b2);
    }
}

typedef struct adamw_args {
    float lr, beta1, beta2, omb1, omb2, eps, decay;
} adamw_args;

/* l8_adamw_update */
static void adamw_ref(float *p, const void *g, int bf16, float *m, float *v, uint64_t n,
                      const scalars *sc, const adamw_args *a)
{
    if (sc->skip)
        return;
    float clip = sc->clip, bc2s = sc->bc2s;
    float ss = a->lr / sc->bc1;
    for (uint64_t i = 0; i < n; i++) {
        float gi = grad_at(g, bf16, i);
        gi = gi * clip;
        float pi = p[i] * a->decay;
        float mi = a->beta1 * m[i];
        float t = a->omb1 * gi;
        mi = mi + t;
        float vi = a->beta2 * v[i];
        t = gi * gi;
        t = a->omb2 * t;
        vi = vi + t;
        float d = sqrtf(vi);
        d = d / bc2s;
        d = d + a->eps;
        float u = mi / d;
        u = ss * u;
        pi = pi - u;
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

typedef struct sgd_args {
    float lr, wd, mom, omd;
    unsigned flags;
} sgd_args;

/* l8_sgd_update */
static void sgd_ref(float *p, const void *g, int bf16, float *b, uint64_t n, const scalars *sc,
                    const sgd_args *a)
{
    if (sc->skip)
        return;
    float clip = sc->clip;
    int first = sc->step == 1;
    for (uint64_t i = 0; i < n; i++) {
        float gi = grad_at(g, bf16, i);
        gi = gi * clip;
        float t;
        if (a->flags & SGD_F_WD) {
            t = a->wd * p[i];
            gi = gi + t;
        }
        if (a->flags & SGD_F_MOM) {
            float bi;
            if (first) {
                bi = gi;
            } else {
                bi = a->mom * b[i];
                t = a->omd * gi;
                bi = bi + t;
            }
            b[i] = bi;
            if (a->flags & SGD_F_NEST) {
                t = a->mom * bi;
                gi = gi + t;
            } else {
                gi = bi;
            }
        }
        t = a->lr * gi;
        p[i] = p[i] - t;
    }
}

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static uint64_t dptr(const void *p) { return (uint64_t)(uintptr_t)p; }


/* Blocking copies of the scalars through stream s. */
static l8_status scalars_read(l8_optim *o, l8_stream *s, scalars *out)
{
    void *w;
    L8_CHECK(l8_storage_data(o->work, &w));
    L8_CHECK(l8_memcpy_dtoh(s, out, w, sizeof *out));
    return l8_stream_synchronize(s);
}

static l8_status scalars_write(l8_optim *o, l8_stream *s, const scalars *in)
{
    void *w;
    L8_CHECK(l8_storage_data(o->work, &w));
    L8_CHECK(l8_memcpy_htod(s, w, in, sizeof *in));
    return l8_stream_synchronize(s);
}

static int finite_nonneg(float x) { return isfinite(x) && x >= 0.0f; }

l8_status l8i_optim_partials(const l8_optim *o, double **out)
{
    void *w;
    if (o->part_st) {
        L8_CHECK(l8_storage_data(o->part_st, &w));
        *out = w;
        return L8_OK;
    }
    L8_CHECK(l8_storage_data(o->work, &w));
    *out = (double *)((char *)w + SCALARS_BYTES);
    return L8_OK;
}

/* p + k elements of 4 bytes, or NULL for no buffer (SGD without momentum) */
static void *f32_at(void *p, uint64_t k) { return p ? (char *)p + k * sizeof(float) : NULL; }

/* ------------------------------------------------------------------------ */
/* create / destroy                                                          */

/* The group is being destroyed before this optimizer (l8_params_destroy
 * calls this): forget it; a step or a state view then fails. */
static void group_lost(void *obj)
{
    ((l8_optim *)obj)->g = NULL;
}

static l8_status need_group(const l8_optim *o, const char *op)
{
    if (o->g)
        return L8_OK;
    return L8_FAIL(L8_ERR_STATE, "%s: the parameter group was destroyed before this optimizer "
                   "(l8_optim_destroy it first)", op);
}

void l8_optim_destroy(l8_optim *o)
{
    if (!o)
        return;
    if (o->g)
        l8i_params_detach(o->g, o);
    l8_status ignored = l8_optim_set_norm_reduce(o, NULL, NULL);   /* detaches: never fails */
    (void)ignored;
    for (int k = 0; k < 2; k++) {
        l8_tensor_destroy(o->state[k]);
        l8_storage_release(o->state_st[k]);
    }
    l8_tensor_destroy(o->norm_t);
    l8_tensor_destroy(o->skip_t);
    l8_tensor_destroy(o->psum_t);
    l8_tensor_destroy(o->cursor_t);
    l8_tensor_destroy(o->rates);
    l8_storage_release(o->work);
    l8_storage_release(o->part_st);
    if (o->range != &o->whole)
        free(o->range);
    free(o);
}

static l8_status create_common(l8_params *g, l8_optim_kind kind, int nstate,
                               const char *const *names, const char *op, l8_optim **out)
{
    if (!l8_params_is_finalized(g))
        return L8_FAIL(L8_ERR_STATE, "%s: the parameter group is not finalized", op);
    l8_status st = L8_OK;
    l8_ctx *ctx = l8_params_ctx(g);
    l8_stream *compute = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_optim *o = calloc(1, sizeof *o);
    if (!o)
        return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", op);
    o->kind = kind;
    o->g = g;
    o->ctx = ctx;
    o->n = (uint64_t)l8_params_buffer_numel(g);
    o->nchunks = (o->n + CHUNK - 1) / CHUNK;
    o->part_cap = o->nchunks;
    o->whole = (l8i_optim_range){ 0, o->n, 0, 0 };
    o->range = &o->whole;
    o->nrange = 1;
    o->sn = o->n;
    o->shard_rank = -1;
    o->nstate = nstate;
    o->last = compute;
    int64_t n = (int64_t)o->n;
    for (int k = 0; k < nstate; k++) {
        char tag[64];
        snprintf(tag, sizeof tag, "optim.%s", names[k]);
        o->state_name[k] = names[k];
        L8_TRY(st, l8_storage_create_tagged(ctx, (size_t)o->n * sizeof(float), NULL, tag,
                                            &o->state_st[k]), fail);
        void *ptr;
        L8_TRY(st, l8_storage_data(o->state_st[k], &ptr), fail);
        L8_TRY(st, l8_memset_d8(compute, ptr, 0, (size_t)o->n * sizeof(float)), fail);
        L8_TRY(st, l8_tensor_from_storage(o->state_st[k], 0, L8_F32, 1, &n, NULL, &o->state[k]),
               fail);
    }
    L8_TRY(st, l8_storage_create_tagged(ctx, SCALARS_BYTES + o->nchunks * sizeof(double), NULL,
                                        "optim.scalars", &o->work), fail);
    L8_TRY(st, l8_tensor_from_storage(o->work, offsetof(scalars, norm), L8_F32, 0, NULL, NULL,
                                      &o->norm_t), fail);
    L8_TRY(st, l8_tensor_from_storage(o->work, offsetof(scalars, skip), L8_I32, 0, NULL, NULL,
                                      &o->skip_t), fail);
    {
        int64_t one = 1;
        L8_TRY(st, l8_tensor_from_storage(o->work, offsetof(scalars, psum), L8_F32, 1, &one, NULL,
                                          &o->psum_t), fail);
        L8_TRY(st, l8_tensor_from_storage(o->work, offsetof(scalars, cursor), L8_I32, 1, &one,
                                          NULL, &o->cursor_t), fail);
    }
    {
        scalars sc;
        memset(&sc, 0, sizeof sc);
        sc.clip = sc.bc1 = sc.bc2s = 1.0f;
        sc.decay = 1.0f;            /* lr 0: the create functions push the configured rate */
        L8_TRY(st, scalars_write(o, compute, &sc), fail);
    }
    L8_TRY(st, l8i_params_attach(g, group_lost, o), fail);
    *out = o;
    return L8_OK;
fail:
    l8_optim_destroy(o);
    return st;
}

void l8_adamw_config_init(l8_adamw_config *cfg)
{
    if (cfg) *cfg = (l8_adamw_config)L8_ADAMW_CONFIG_INIT;
}

void l8_sgd_config_init(l8_sgd_config *cfg)
{
    if (cfg) *cfg = (l8_sgd_config)L8_SGD_CONFIG_INIT;
}

l8_status l8_optim_create_adamw(l8_params *g, const l8_adamw_config *cfg, l8_optim **out)
{
    static const char *op = "l8_optim_create_adamw";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(g != NULL);
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, op, "L8_ADAMW_CONFIG_INIT");
    if (!finite_nonneg(c.lr) || !finite_nonneg(c.weight_decay) || !finite_nonneg(c.max_grad_norm))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: lr, weight_decay and max_grad_norm must be "
                       "finite and >= 0 (got %g, %g, %g)", op, (double)c.lr,
                       (double)c.weight_decay, (double)c.max_grad_norm);
    if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f && c.beta2 >= 0.0f && c.beta2 < 1.0f))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: betas must be in [0, 1) (got %g, %g)", op,
                       (double)c.beta1, (double)c.beta2);
    if (!(isfinite(c.eps) && c.eps > 0.0f))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: eps must be finite and > 0 (got %g)", op,
                       (double)c.eps);
    static const char *const names[2] = { "exp_avg", "exp_avg_sq" };
    L8_CHECK(create_common(g, L8_OPTIM_ADAMW, 2, names, op, out));
    (*out)->adamw = c;
    (*out)->lr = c.lr;
    l8_status st = l8_optim_push_lr(*out, NULL);
    if (st != L8_OK) {
        l8_optim_destroy(*out);
        *out = NULL;
    }
    return st;
}

l8_status l8_optim_create_sgd(l8_params *g, const l8_sgd_config *cfg, l8_optim **out)
{
    static const char *op = "l8_optim_create_sgd";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(g != NULL);
    l8_sgd_config c = L8_SGD_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, op, "L8_SGD_CONFIG_INIT");
    if (!finite_nonneg(c.lr) || !finite_nonneg(c.momentum) || !finite_nonneg(c.weight_decay) ||
        !finite_nonneg(c.max_grad_norm))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: lr, momentum, weight_decay and max_grad_norm "
                       "must be finite and >= 0", op);
    if (!(c.dampening >= 0.0f && c.dampening <= 1.0f))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dampening must be in [0, 1] (got %g)", op,
                       (double)c.dampening);
    if (c.nesterov && (c.momentum <= 0.0f || c.dampening != 0.0f))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: nesterov needs momentum > 0 and dampening 0", op);
    static const char *const names[1] = { "momentum_buffer" };
    L8_CHECK(create_common(g, L8_OPTIM_SGD, c.momentum > 0.0f ? 1 : 0, names, op, out));
    (*out)->sgd = c;
    (*out)->lr = c.lr;
    l8_status st = l8_optim_push_lr(*out, NULL);
    if (st != L8_OK) {
        l8_optim_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* step                                                                      */

static void result_of(const scalars *sc, l8_optim_result *res)
{
    res->skipped = sc->skip != 0;
    res->grad_norm = sc->norm;
    res->clip_coef = sc->clip;
    res->step = sc->step;
}

static l8_status need_result(const l8_optim_result *res, const char *op)
{
    if (res && res->size < sizeof *res)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: res->size %zu, wanted %zu "
                       "(use L8_OPTIM_RESULT_INIT)", op, res->size, sizeof *res);
    return L8_OK;
}

/* The rate the update kernels read: lr and AdamW's decay = 1 - lr*wd (the
 * product and difference rounded to f32 as before, on the host), written
 * into the step scalars in stream order on s. Device: two 4-byte memsets
 * (the values travel in the calls, no host buffer is read later, so a
 * following l8_optim_set_lr cannot race with them). */
static l8_status push_lr(l8_optim *o, l8_stream *s, void *w)
{
    float lr = o->lr, decay = 1.0f;
    if (o->kind == L8_OPTIM_ADAMW) {
        float lw = o->lr * o->adamw.weight_decay;   /* rounded, then subtracted */
        decay = 1.0f - lw;
    }
    scalars *sc = w;
    if (l8_ctx_backend(o->ctx) == L8_BACKEND_HOST) {
        sc->lr = lr;
        sc->decay = decay;
        return L8_OK;
    }
    uint32_t bits[2];
    memcpy(&bits[0], &lr, 4);
    memcpy(&bits[1], &decay, 4);
    L8_CHECK(l8i_ctx_bind(o->ctx));
    L8_CHECK(L8_CU(cuMemsetD32Async, (CUdeviceptr)(uintptr_t)&sc->lr, bits[0], (size_t)1,
                   l8i_stream_cu(s)));
    return L8_CU(cuMemsetD32Async, (CUdeviceptr)(uintptr_t)&sc->decay, bits[1], (size_t)1,
                 l8i_stream_cu(s));
}

l8_status l8_optim_push_lr(l8_optim *o, l8_stream *s)
{
    L8_ARG(o != NULL);
    L8_CHECK(l8i_resolve_stream("l8_optim_push_lr", o->ctx, &s));
    void *w;
    L8_CHECK(l8_storage_data(o->work, &w));
    if (s != l8_ctx_stream(o->ctx, L8_STREAM_COMPUTE))
        L8_CHECK(l8_storage_record_stream(o->work, s));
    return push_lr(o, s, w);
}

l8_status l8_optim_set_lr_table(l8_optim *o, const l8_tensor *rates, l8_stream *s)
{
    static const char *op = "l8_optim_set_lr_table";
    L8_ARG(o != NULL);
    L8_CHECK(l8i_resolve_stream(op, o->ctx, &s));
    l8_tensor *own = NULL;
    if (rates) {
        L8_CHECK(l8i_need_tensor(op, "rates", rates, o->ctx));
        int64_t n = l8_tensor_numel(rates);
        if (l8_tensor_dtype(rates) != L8_F32 || l8_tensor_ndim(rates) != 1 || n < 1 ||
            n > INT32_MAX || (n > 1 && l8_tensor_stride(rates, 0) != 1))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: rates is %d-d %s with %lld elements, wanted a "
                           "contiguous 1-d f32 tensor of 1 to 2^31 - 1 rates", op,
                           l8_tensor_ndim(rates), l8_dtype_name(l8_tensor_dtype(rates)),
                           (long long)n);
        L8_CHECK(l8_tensor_narrow(rates, 0, 0, n, &own));   /* a view of our own */
    }
    void *w;
    l8_status st = l8_storage_data(o->work, &w);
    if (st == L8_OK && l8_ctx_backend(o->ctx) == L8_BACKEND_HOST) {
        ((scalars *)w)->cursor = 0;
    } else if (st == L8_OK) {
        if (s != l8_ctx_stream(o->ctx, L8_STREAM_COMPUTE))
            st = l8_storage_record_stream(o->work, s);
        if (st == L8_OK) st = l8i_ctx_bind(o->ctx);
        if (st == L8_OK)
            st = L8_CU(cuMemsetD32Async, (CUdeviceptr)(uintptr_t)&((scalars *)w)->cursor, 0u,
                       (size_t)1, l8i_stream_cu(s));
    }
    if (st != L8_OK) {
        l8_tensor_destroy(own);
        return st;
    }
    l8_tensor_destroy(o->rates);   /* stream-ordered: steps enqueued before may still read it */
    o->rates = own;
    o->nrates = own ? (uint32_t)l8_tensor_numel(own) : 0;
    return L8_OK;
}

l8_tensor *l8_optim_cursor(const l8_optim *o) { return o ? o->cursor_t : NULL; }

l8_status l8_optim_set_lr_external(l8_optim *o, int external)
{
    L8_ARG(o != NULL);
    o->lr_external = external != 0;
    return L8_OK;
}

/* Host backend: the kernels' arithmetic, range by range. */
static l8_status step_host(l8_optim *o, l8_stream *s, void *p, void *g, int bf16, void *w,
                           double *part, void *st0, void *st1, const adamw_args *aa0,
                           const sgd_args *sa0, float max_norm)
{
    scalars *sc = w;
    adamw_args aa = *aa0;
    sgd_args sa = *sa0;
    int adamw = o->kind == L8_OPTIM_ADAMW;
    size_t gsz = bf16 ? 2 : 4;
    void *rates = NULL;
    float wd = adamw ? o->adamw.weight_decay : 0.0f;
    if (o->rates)
        L8_CHECK(l8_tensor_data(o->rates, &rates));
    for (int i = 0; i < o->nrange; i++) {
        const l8i_optim_range *r = &o->range[i];
        sumsq_ref((char *)g + r->off * gsz, bf16, r->numel, part + r->chunk,
                  (r->numel + CHUNK - 1) / CHUNK);
    }
    if (o->reduce) {
        finish_ref(part, o->nchunks, sc, max_norm, aa.beta1, aa.beta2, adamw, FIN_PARTIAL_OUT,
                   rates, o->nrates, wd);
        L8_CHECK(o->reduce(o->reduce_arg, o->psum_t, s));
        finish_ref(part, 0, sc, max_norm, aa.beta1, aa.beta2, adamw, FIN_REDUCED_IN, rates,
                   o->nrates, wd);
    } else {
        finish_ref(part, o->nchunks, sc, max_norm, aa.beta1, aa.beta2, adamw, 0, rates,
                   o->nrates, wd);
    }
    /* the rate as the kernels read it: pushed, maybe earlier (external), or the table's */
    aa.lr = sa.lr = sc->lr;
    aa.decay = sc->decay;
    for (int i = 0; i < o->nrange; i++) {
        const l8i_optim_range *r = &o->range[i];
        float *pr = (float *)p + r->off;
        const void *gr = (const char *)g + r->off * gsz;
        if (adamw)
            adamw_ref(pr, gr, bf16, f32_at(st0, r->base), f32_at(st1, r->base), r->numel, sc,
                      &aa);
        else
            sgd_ref(pr, gr, bf16, f32_at(st0, r->base), r->numel, sc, &sa);
    }
    return L8_OK;
}

/* l8_optim_finish on s; flags bit 0 AdamW, FIN_* the hook's two halves. */
static l8_status launch_finish(const l8_optim *o, l8_stream *s, CUfunction f, uint64_t a_part,
                               uint64_t nch, uint64_t a_sc, float max_norm, float beta1,
                               float beta2, uint32_t flags)
{
    void *rates = NULL;
    if (o->rates)
        L8_CHECK(l8_tensor_data(o->rates, &rates));
    uint64_t a_rates = dptr(rates);
    uint32_t nrates = o->nrates;
    float wd = o->kind == L8_OPTIM_ADAMW ? o->adamw.weight_decay : 0.0f;
    void *args[] = { &a_part, &nch, &a_sc, &max_norm, &beta1, &beta2, &flags, &a_rates,
                     &nrates, &wd };
    return l8i_launch(s, f, 1, 1, 1, RED_THREADS, 1, 1, 0, args);
}

l8_status l8_optim_step(l8_optim *o, l8_stream *s, l8_optim_result *res)
{
    static const char *op = "l8_optim_step";
    L8_ARG(o != NULL);
    L8_CHECK(need_result(res, op));
    L8_CHECK(need_group(o, op));
    if (o->reduce_lost)
        return L8_FAIL(L8_ERR_STATE, "%s: the communicator of the norm reduction "
                       "(l8_optim_set_norm_reduce) was destroyed first; set another hook or none",
                       op);
    l8_ctx *ctx = o->ctx;
    l8_stream *compute = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    l8_tensor *mflat = l8_params_master_flat(o->g), *gflat = l8_params_grad_flat(o->g);
    if (!mflat || !gflat || (uint64_t)l8_tensor_numel(mflat) != o->n)
        return L8_FAIL(L8_ERR_STATE, "%s: the parameter group no longer matches the optimizer",
                       op);
    if (s != compute) {
        /* keep every buffer alive for the work enqueued on s */
        L8_CHECK(l8_storage_record_stream(l8_tensor_storage(mflat), s));
        L8_CHECK(l8_storage_record_stream(l8_tensor_storage(gflat), s));
        L8_CHECK(l8_storage_record_stream(o->work, s));
        if (o->part_st)
            L8_CHECK(l8_storage_record_stream(o->part_st, s));
        if (o->rates)
            L8_CHECK(l8_storage_record_stream(l8_tensor_storage(o->rates), s));
        for (int k = 0; k < o->nstate; k++)
            L8_CHECK(l8_storage_record_stream(o->state_st[k], s));
    }
    o->touched = 1;
    void *p, *g, *w, *st0 = NULL, *st1 = NULL;
    double *part;
    L8_CHECK(l8_tensor_data(mflat, &p));
    L8_CHECK(l8_tensor_data(gflat, &g));
    L8_CHECK(l8_storage_data(o->work, &w));
    L8_CHECK(l8i_optim_partials(o, &part));
    if (o->nstate > 0)
        L8_CHECK(l8_tensor_data(o->state[0], &st0));
    if (o->nstate > 1)
        L8_CHECK(l8_tensor_data(o->state[1], &st1));
    int bf16 = l8_tensor_dtype(gflat) == L8_BF16;
    int adamw = o->kind == L8_OPTIM_ADAMW;
    float max_norm = adamw ? o->adamw.max_grad_norm : o->sgd.max_grad_norm;
    float beta1 = adamw ? o->adamw.beta1 : 0.0f, beta2 = adamw ? o->adamw.beta2 : 0.0f;
    adamw_args aa = { 0 };
    sgd_args sa = { 0 };
    if (adamw) {
        float lw = o->lr * o->adamw.weight_decay;
        aa.lr = o->lr;
        aa.beta1 = beta1;
        aa.beta2 = beta2;
        aa.omb1 = 1.0f - beta1;
        aa.omb2 = 1.0f - beta2;
        aa.eps = o->adamw.eps;
        aa.decay = 1.0f - lw;
    } else {
        sa.lr = o->lr;
        sa.wd = o->sgd.weight_decay;
        sa.mom = o->sgd.momentum;
        sa.omd = 1.0f - o->sgd.dampening;
        sa.flags = (sa.wd != 0.0f ? SGD_F_WD : 0u) | (o->nstate ? SGD_F_MOM : 0u) |
                   (o->sgd.nesterov ? SGD_F_NEST : 0u);
    }
    if (!o->lr_external && !o->rates) L8_CHECK(push_lr(o, s, w));

    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        L8_CHECK(step_host(o, s, p, g, bf16, w, part, st0, st1, &aa, &sa, max_norm));
        o->last = s;
        if (res)
            result_of(w, res);
        return L8_OK;
    }

    CUfunction fsum, ffin, fupd;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "optim", "l8_optim_sumsq", &fsum));
    L8_CHECK(l8i_kernel(ctx, "optim", "l8_optim_finish", &ffin));
    L8_CHECK(l8i_kernel(ctx, "optim", adamw ? "l8_adamw_update" : "l8_sgd_update", &fupd));
    uint64_t a_sc = dptr(w);
    uint64_t gsz = bf16 ? 2 : 4;
    uint32_t gtype = bf16 ? 1u : 0u;
    uint32_t fadam = adamw ? 1u : 0u;
    unsigned grid;
    o->last = s;                  /* from here work may be enqueued on s */
    for (int i = 0; i < o->nrange; i++) {
        const l8i_optim_range *r = &o->range[i];
        uint64_t a_g = dptr(g) + r->off * gsz, a_part = dptr(part + r->chunk);
        uint64_t nn = r->numel, nch = (r->numel + CHUNK - 1) / CHUNK;
        if (nch == 0)
            continue;
        L8_CHECK(l8i_grid_for(ctx, nch, OCC_SUMSQ, &grid));
        void *args[] = { &a_g, &nn, &gtype, &a_part, &nch };
        L8_CHECK(l8i_launch(s, fsum, grid, 1, 1, RED_THREADS, 1, 1, 0, args));
    }
    if (o->reduce) {
        L8_CHECK(launch_finish(o, s, ffin, dptr(part), o->nchunks, a_sc, max_norm, beta1,
                               beta2, fadam | FIN_PARTIAL_OUT));
        L8_CHECK(o->reduce(o->reduce_arg, o->psum_t, s));
        L8_CHECK(launch_finish(o, s, ffin, dptr(part), 0, a_sc, max_norm, beta1, beta2,
                               fadam | FIN_REDUCED_IN));
    } else {
        L8_CHECK(launch_finish(o, s, ffin, dptr(part), o->nchunks, a_sc, max_norm, beta1,
                               beta2, fadam));
    }
    for (int i = 0; i < o->nrange; i++) {
        const l8i_optim_range *r = &o->range[i];
        uint64_t nvec = r->numel / 4;
        if (nvec == 0)
            continue;
        uint64_t a_p = dptr(p) + r->off * 4, a_g = dptr(g) + r->off * gsz;
        uint64_t work = (nvec + UPD_THREADS - 1) / UPD_THREADS;
        if (adamw) {
            uint64_t a_m = dptr(f32_at(st0, r->base)), a_v = dptr(f32_at(st1, r->base));
            L8_CHECK(l8i_grid_for(ctx, work, OCC_ADAMW, &grid));
            void *args[] = { &a_p, &a_g, &a_m, &a_v, &nvec, &gtype, &a_sc, &aa.beta1,
                             &aa.beta2, &aa.omb1, &aa.omb2, &aa.eps };
            L8_CHECK(l8i_launch(s, fupd, grid, 1, 1, UPD_THREADS, 1, 1, 0, args));
        } else {
            uint64_t a_b = dptr(f32_at(st0, r->base));
            uint32_t flags = sa.flags;
            L8_CHECK(l8i_grid_for(ctx, work, OCC_SGD, &grid));
            void *args[] = { &a_p, &a_g, &a_b, &nvec, &gtype, &a_sc, &sa.wd, &sa.mom,
                             &sa.omd, &flags };
            L8_CHECK(l8i_launch(s, fupd, grid, 1, 1, UPD_THREADS, 1, 1, 0, args));
        }
    }
    if (!res)
        return L8_OK;
    scalars sc;
    L8_CHECK(scalars_read(o, s, &sc));
    result_of(&sc, res);
    return L8_OK;
}

l8_status l8_optim_read_result(l8_optim *o, l8_optim_result *res)
{
    L8_ARG(o != NULL && res != NULL);
    L8_CHECK(need_result(res, "l8_optim_read_result"));
    scalars sc;
    L8_CHECK(scalars_read(o, o->last, &sc));
    result_of(&sc, res);
    return L8_OK;
}

/* ------------------------------------------------------------------------ */
/* settings and state                                                        */

l8_status l8_optim_set_lr(l8_optim *o, float lr)
{
    L8_ARG(o != NULL);
    if (!finite_nonneg(lr))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_set_lr: lr %g is negative or not finite",
                       (double)lr);
    o->lr = lr;
    return L8_OK;
}

float l8_optim_lr(const l8_optim *o) { return o ? o->lr : NAN; }

l8_optim_kind l8_optim_kind_of(const l8_optim *o) { return o ? o->kind : (l8_optim_kind)-1; }

int l8_optim_state_count(const l8_optim *o) { return o ? o->nstate : 0; }

/* 1 when state buffer k exists, else 0 with an L8_ERR_INVALID_ARG record. */
static int state_ok(const char *op, const l8_optim *o, int k)
{
    if (o && k >= 0 && k < o->nstate) return 1;
    if (!o) (void)L8_FAIL(L8_ERR_INVALID_ARG, "%s: the optimizer is NULL", op);
    else (void)L8_FAIL(L8_ERR_INVALID_ARG, "%s: no state %d (the optimizer has %d)", op, k,
                       o->nstate);
    return 0;
}

const char *l8_optim_state_name(const l8_optim *o, int k)
{
    return state_ok("l8_optim_state_name", o, k) ? o->state_name[k] : NULL;
}

l8_tensor *l8_optim_state(const l8_optim *o, int k)
{
    return state_ok("l8_optim_state", o, k) ? o->state[k] : NULL;
}

l8_status l8_optim_state_view(const l8_optim *o, int k, int id, l8_tensor **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(o != NULL);
    if (k < 0 || k >= o->nstate)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_state_view: state %d of %d", k, o->nstate);
    L8_CHECK(need_group(o, "l8_optim_state_view"));
    int64_t off = l8_params_offset(o->g, id);
    if (off < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_state_view: parameter id %d is out of "
                       "range (%d registered)", id, l8_params_count(o->g));
    /* sharded: the range that holds the whole parameter */
    uint64_t pn = (uint64_t)l8_params_numel(o->g, id), at = UINT64_MAX;
    for (int i = 0; i < o->nrange; i++) {
        const l8i_optim_range *r = &o->range[i];
        if ((uint64_t)off >= r->off && (uint64_t)off + pn <= r->off + r->numel)
            at = r->base + ((uint64_t)off - r->off);
    }
    if (at == UINT64_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_state_view: parameter %d (%s, elements "
                       "[%lld, %lld)) is not wholly inside one range of this optimizer's shard",
                       id, l8_params_name(o->g, id), (long long)off,
                       (long long)(off + (int64_t)pn));
    int nd = l8_params_ndim(o->g, id);
    int64_t shape[L8_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        shape[d] = l8_params_dim(o->g, id, d);
    return l8_tensor_from_storage(o->state_st[k], (size_t)at * sizeof(float), L8_F32, nd, shape,
                                  NULL, out);
}

l8_status l8_optim_get_step(l8_optim *o, uint64_t *step)
{
    L8_ARG(o != NULL && step != NULL);
    scalars sc;
    L8_CHECK(scalars_read(o, o->last, &sc));
    *step = sc.step;
    return L8_OK;
}

l8_status l8_optim_set_step(l8_optim *o, uint64_t step)
{
    L8_ARG(o != NULL);
    if (step > (uint64_t)INT64_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_set_step: step %llu is above 2^63 - 1 (%lld "
                       "as a signed count)", (unsigned long long)step, -(long long)~step - 1);
    scalars sc;
    L8_CHECK(scalars_read(o, o->last, &sc));
    sc.step = step;
    L8_CHECK(scalars_write(o, o->last, &sc));
    o->touched = 1;
    return L8_OK;
}

l8_tensor *l8_optim_grad_norm(const l8_optim *o) { return o ? o->norm_t : NULL; }
l8_tensor *l8_optim_skip_flag(const l8_optim *o) { return o ? o->skip_t : NULL; }
