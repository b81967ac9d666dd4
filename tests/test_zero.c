/* test_zero.c - ZeRO-1 in the optimizer: a shard of the group's buffers
 * with compact state, the norm hook, the shard layout in checkpoints.
 *
 * Multi-rank cases run 2 and 4 ranks as threads (tests/world.c, THREADS
 * transport). Every rank holds the same full gradients (what a reduce-
 * scatter leaves valid in its own ranges is all the sharded step reads);
 * the buffer is cut into buckets and each bucket into one slice per rank,
 * as a data-parallel reducer does; rank r steps its slices with the norm
 * hook all-reducing the sum of squares (l8_comm_reduce_sum), then the
 * ranks broadcast their updated master slices so every rank is whole again.
 * The reference is the unsharded optimizer on the same gradients.
 *
 * Clipping off: weights and state equal the unsharded step's bit for bit
 * (the update is elementwise and the norm only decides the skip). Clipping
 * on: the coefficient comes from a norm summed in another order and through
 * f32 (ops/optim.h), so the norm may differ from the unsharded one by a few
 * f32 ulps. Bounds, measured over many seeds and stated here: the norm
 * within 4e-7 relative (worst seen 1.2e-7), the clip coefficient within 4
 * ulps, weights within 4 ulps of max |p| per element after 4 steps (worst
 * seen 1 ulp), state within 2e-6 of its largest element (worst seen
 * 2.6e-7; elements near zero after a cancellation carry the rounding of
 * their larger terms). A norm that missed
 * the other ranks' partials (no hook, or a MAX instead of a SUM) is off by
 * sqrt(world) and fails by far. Every rank must hold the same bits.
 *
 * "gpu" case: the sharded step on cuda:0 (world 1, several ranges, with and
 * without a hook) equals the host's bit for bit, weights, state, results.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/tests.h"

#include "ops/optim.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/params.h"
#include "runtime/tensor.h"

#define xmalloc l8t_xmalloc
#define MAXW 4
#define MAXB 4                  /* buckets */
#define MAXSTEPS 6
#define UNIT 128                /* L8_PARAMS_ALIGN_ELEMS */

/* ---- the model: 20,224 elements with padding, 158 units of 128 ---- */

typedef struct spec {
    const char *name;
    int ndim;
    int64_t shape[2];
} spec;

static const spec MODEL[] = {
    { "w1", 2, { 100, 130 } },  /* 13,000 -> 13,056 */
    { "b1", 1, { 100 } },       /* -> 128 */
    { "w2", 2, { 37, 100 } },   /* 3,700 -> 3,712 */
    { "b2", 1, { 37 } },        /* -> 128 */
    { "emb", 2, { 64, 50 } },   /* 3,200 */
};
#define NMODEL ((int)(sizeof MODEL / sizeof MODEL[0]))

/* Bucket boundaries in units of 128 elements (the last is the buffer's end). */
static const int BUCKET_UNITS[] = { 0, 40, 97, 150, 158 };
#define NBUCKET 4

static l8_status group_make(l8_ctx *ctx, l8_dtype gdt, uint64_t seed, l8_params **out)
{
    l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
    cfg.grad_dtype = gdt;
    l8_params *g = NULL;
    l8_status st;
    L8_CHECK(l8_params_create(ctx, &cfg, &g));
    for (int i = 0; i < NMODEL; i++)
        L8_TRY(st, l8_params_add(g, MODEL[i].name, MODEL[i].ndim, MODEL[i].shape, NULL), fail);
    L8_TRY(st, l8_params_finalize(g), fail);
    for (int i = 0; i < NMODEL; i++)
        L8_TRY(st, l8_params_init_uniform(g, i, -1.0f, 1.0f, seed + (uint64_t)i), fail);
    *out = g;
    return L8_OK;
fail:
    l8_params_destroy(g);
    return st;
}

/* Rank q's slice of bucket b: units split as evenly as they go, the first
 * (units % world) ranks one more; *n 0 when the slice is empty. */
static void slice_of(int b, int q, int world, int64_t *off, int64_t *n)
{
    int a = BUCKET_UNITS[b], u = BUCKET_UNITS[b + 1] - a;
    int base = u / world, rem = u % world;
    int start = a + q * base + (q < rem ? q : rem);
    *off = (int64_t)start * UNIT;
    *n = (int64_t)(base + (q < rem)) * UNIT;
}

/* Rank r's ranges of a world: one per bucket where its slice is not empty. */
static int ranges_of(int r, int world, int64_t *off, int64_t *n)
{
    int k = 0;
    for (int b = 0; b < NBUCKET; b++) {
        slice_of(b, r, world, &off[k], &n[k]);
        if (n[k] > 0)
            k++;
    }
    return k;
}

/* Gradients of step s, the same on every rank: uniform in [-1, 1) times a
 * scale of 2^e, e in [-6, 0], per parameter; padding 0. A non-finite value
 * goes to element `bad` when bad >= 0. */
static void grads_of(float *flat, l8_params *g, int s, uint64_t salt, int64_t bad, float badv)
{
    l8_rng r;
    l8_rng_init(&r, salt * 31 + (uint64_t)s);
    memset(flat, 0, (size_t)l8_params_buffer_numel(g) * sizeof *flat);
    for (int i = 0; i < l8_params_count(g); i++) {
        float scale = ldexpf(1.0f, -(int)l8_rng_below(&r, 7));
        int64_t off = l8_params_offset(g, i), n = l8_params_numel(g, i);
        for (int64_t k = 0; k < n; k++)
            flat[off + k] = l8_rng_float(&r, -1.0f, 1.0f) * scale;
    }
    if (bad >= 0)
        flat[bad] = badv;
}

static l8_status grads_upload(l8_params *g, const float *flat)
{
    for (int i = 0; i < l8_params_count(g); i++)
        L8_CHECK(l8_params_set_grad_host(g, i, flat + l8_params_offset(g, i),
                                         (size_t)l8_params_numel(g, i)));
    return L8_OK;
}

/* ---- the case ---- */

typedef struct zcase {
    int kind;                     /* 0 AdamW, 1 SGD with momentum */
    l8_dtype gdt;
    float max_norm;
    int steps;
    int bad_rank, bad_step;       /* a non-finite gradient in that rank's own range */
    float bad_value;
    uint64_t salt;
} zcase;

static l8_status optim_make(l8_params *g, const zcase *zc, l8_optim **o)
{
    if (zc->kind == 0) {
        l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
        c.lr = 1e-2f;
        c.beta2 = 0.95f;
        c.eps = 1e-6f;
        c.weight_decay = 0.1f;
        c.max_grad_norm = zc->max_norm;
        return l8_optim_create_adamw(g, &c, o);
    }
    l8_sgd_config c = L8_SGD_CONFIG_INIT;
    c.lr = 5e-2f;
    c.momentum = 0.9f;
    c.dampening = 0.1f;
    c.weight_decay = 1e-2f;
    c.max_grad_norm = zc->max_norm;
    return l8_optim_create_sgd(g, &c, o);
}

/* The element that goes bad: the middle of the bad rank's first range. */
static int64_t bad_element(const zcase *zc, int world)
{
    int64_t off[MAXB], n[MAXB];
    ranges_of(zc->bad_rank, world, off, n);
    return off[0] + n[0] / 2;
}

/* What a rank hands back: its results, state size, shard, then the master
 * buffer (n floats) and its compact state (nstate x sn floats). */
typedef struct zout {
    l8_optim_result res[MAXSTEPS];
    size_t state_bytes;
    int64_t sn, n;
    int nstate;
} zout;

/* Every rank broadcasts its updated master slices (the all-gather). */
static l8_status gather_master(l8_comm *c, l8_params *g, int world)
{
    l8_tensor *m = l8_params_master_flat(g);
    for (int b = 0; b < NBUCKET; b++)
        for (int q = 0; q < world; q++) {
            int64_t off, n;
            slice_of(b, q, world, &off, &n);
            if (n == 0)
                continue;
            l8_tensor *v = NULL;
            L8_CHECK(l8_tensor_narrow(m, 0, off, n, &v));
            l8_status st = l8_comm_broadcast(c, v, q, NULL);
            l8_tensor_destroy(v);
            L8_CHECK(st);
        }
    return L8_OK;
}

static l8_status keep_out(l8t_job *j, l8_params *g, l8_optim *o, const zout *zo)
{
    size_t n = (size_t)zo->n, sn = (size_t)zo->sn, ns = (size_t)zo->nstate;
    size_t bytes = sizeof *zo + (n + ns * sn) * sizeof(float);
    unsigned char *buf = malloc(bytes);
    if (!buf)
        return L8_FAIL(L8_ERR_OOM, "test: host memory");
    memcpy(buf, zo, sizeof *zo);
    float *f = (float *)(buf + sizeof *zo);
    l8_status st = l8_tensor_copy_to_host(l8_params_master_flat(g), f, n * sizeof(float), NULL);
    for (int k = 0; k < zo->nstate && st == L8_OK; k++)
        st = l8_tensor_copy_to_host(l8_optim_state(o, k), f + n + (size_t)k * sn,
                                    sn * sizeof(float), NULL);
    if (st == L8_OK)
        st = l8t_keep(j, buf, bytes);
    free(buf);
    return st;
}

static l8_status zero_rank(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const zcase *zc = j->arg;
    l8_params *g = NULL;
    l8_optim *o = NULL;
    float *gr = NULL;
    l8_status st;
    zout zo;
    memset(&zo, 0, sizeof zo);
    int64_t off[MAXB], num[MAXB];
    int nr = ranges_of(j->rank, j->world, off, num);
    L8_TRY(st, group_make(ctx, zc->gdt, 0x5eed ^ zc->salt, &g), out);
    L8_TRY(st, optim_make(g, zc, &o), out);
    L8_TRY(st, l8_optim_set_shard(o, nr, off, num), out);
    L8_TRY(st, l8_optim_set_shard_rank(o, j->rank, j->world), out);
    L8_TRY(st, l8_optim_set_norm_reduce(o, l8_comm_reduce_sum, c), out);
    zo.n = l8_params_buffer_numel(g);
    gr = malloc((size_t)zo.n * sizeof *gr);
    if (!gr) { st = L8_FAIL(L8_ERR_OOM, "test: host memory"); goto out; }
    for (int s = 0; s < zc->steps; s++) {
        int bad = s == zc->bad_step && j->rank == zc->bad_rank;
        grads_of(gr, g, s, zc->salt, bad ? bad_element(zc, j->world) : -1, zc->bad_value);
        L8_TRY(st, grads_upload(g, gr), out);
        zo.res[s] = (l8_optim_result)L8_OPTIM_RESULT_INIT;
        L8_TRY(st, l8_optim_step(o, NULL, &zo.res[s]), out);
        L8_TRY(st, gather_master(c, g, j->world), out);
    }
    zo.state_bytes = l8_optim_state_bytes(o);
    zo.sn = l8_optim_shard_numel(o);
    zo.nstate = l8_optim_state_count(o);
    L8_TRY(st, keep_out(j, g, o, &zo), out);
out:
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    return st;
}

/* The unsharded reference on the host: master, state, results. */
typedef struct zref {
    int64_t n;
    float *p, *s[2];
    l8_optim_result res[MAXSTEPS];
    size_t state_bytes;
} zref;

static zref ref_run(const zcase *zc, int world)
{
    zref R;
    memset(&R, 0, sizeof R);
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = NULL;
    l8_optim *o = NULL;
    L8_CK(group_make(ctx, zc->gdt, 0x5eed ^ zc->salt, &g));
    L8_CK(optim_make(g, zc, &o));
    R.n = l8_params_buffer_numel(g);
    ck_assert_int_eq(R.n, (int64_t)BUCKET_UNITS[NBUCKET] * UNIT);
    float *gr = xmalloc((size_t)R.n * sizeof *gr);
    for (int s = 0; s < zc->steps; s++) {
        grads_of(gr, g, s, zc->salt, s == zc->bad_step ? bad_element(zc, world) : -1,
                 zc->bad_value);
        L8_CK(grads_upload(g, gr));
        R.res[s] = (l8_optim_result)L8_OPTIM_RESULT_INIT;
        L8_CK(l8_optim_step(o, NULL, &R.res[s]));
    }
    R.state_bytes = l8_optim_state_bytes(o);
    R.p = xmalloc((size_t)R.n * sizeof(float));
    L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(g), R.p, (size_t)R.n * 4, NULL));
    for (int k = 0; k < l8_optim_state_count(o); k++) {
        R.s[k] = xmalloc((size_t)R.n * sizeof(float));
        L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, k), R.s[k], (size_t)R.n * 4, NULL));
    }
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
    return R;
}

static void ref_free(zref *R)
{
    free(R->p);
    free(R->s[0]);
    free(R->s[1]);
}

/* ulps between two finite floats of one sign region (as ordered ints) */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t x = ia < 0 ? (int64_t)INT32_MIN - ia : ia, y = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return x > y ? x - y : y - x;
}

/* Run the case on `world` ranks and compare with the reference. */
static void run_case(const zcase *zc, int world)
{
    zref R = ref_run(zc, world);
    l8t_job jobs[MAXW];
    l8t_world_run(world, L8_COMM_THREADS, zero_rank, zc, jobs, 0);
    l8t_world_ok(jobs, world);
    int exact = zc->max_norm == 0.0f;
    size_t sum_bytes = 0;
    int64_t n = R.n;
    const float *p0 = NULL;
    for (int r = 0; r < world; r++) {
        zout zo;
        ck_assert_uint_ge(jobs[r].out_bytes, sizeof zo);
        memcpy(&zo, jobs[r].out, sizeof zo);
        const float *p = (const float *)(jobs[r].out + sizeof zo);
        ck_assert_int_eq(zo.n, n);
        ck_assert_uint_eq(jobs[r].out_bytes, sizeof zo + (size_t)(n + zo.nstate * zo.sn) * 4);
        sum_bytes += zo.state_bytes;
        for (int s = 0; s < zc->steps; s++) {
            const l8_optim_result *a = &zo.res[s], *b = &R.res[s];
            ck_assert_msg(a->skipped == b->skipped && a->step == b->step,
                          "world %d rank %d step %d: skipped %d step %llu, unsharded %d %llu",
                          world, r, s, a->skipped, (unsigned long long)a->step, b->skipped,
                          (unsigned long long)b->step);
            ck_assert_int_eq(a->skipped, s == zc->bad_step);
            if (a->skipped)
                continue;
            double rel = fabs((double)a->grad_norm - b->grad_norm) / b->grad_norm;
            ck_assert_msg(rel <= 4e-7, "world %d rank %d step %d: norm %.9g, unsharded %.9g "
                          "(relative %.3g > 4e-7)", world, r, s, (double)a->grad_norm,
                          (double)b->grad_norm, rel);
            if (zc->max_norm > 0.0f)
                ck_assert_msg(b->clip_coef < 1.0f && ulps(a->clip_coef, b->clip_coef) <= 4,
                              "world %d rank %d step %d: clip %.9g, unsharded %.9g", world, r,
                              s, (double)a->clip_coef, (double)b->clip_coef);
            /* every rank decided the same: the same norm and clip bits */
            const l8_optim_result *z = (const l8_optim_result *)jobs[0].out + s;
            ck_assert(!memcmp(&a->grad_norm, &z->grad_norm, 4) && a->clip_coef == z->clip_coef);
        }
        /* the whole master after the gather */
        if (!p0)
            p0 = p;
        else
            ck_assert_msg(!memcmp(p, p0, (size_t)n * 4), "world %d: rank %d's weights differ "
                          "from rank 0's", world, r);
        int64_t worst = 0;
        float pmax = 0.0f;
        for (int64_t i = 0; i < n; i++)
            pmax = fmaxf(pmax, fabsf(R.p[i]));
        for (int64_t i = 0; i < n; i++) {
            if (exact) {
                ck_assert_msg(!memcmp(&p[i], &R.p[i], 4), "world %d rank %d: master[%lld] "
                              "%.9g, unsharded %.9g (must be bitwise)", world, r,
                              (long long)i, (double)p[i], (double)R.p[i]);
                continue;
            }
            /* within 4 ulps of the largest weight */
            float d = fabsf(p[i] - R.p[i]);
            int64_t u = (int64_t)ceilf(d / (nextafterf(pmax, INFINITY) - pmax));
            if (u > worst)
                worst = u;
            ck_assert_msg(u <= 4, "world %d rank %d: master[%lld] %.9g, unsharded %.9g (%lld "
                          "ulps of %.3g)", world, r, (long long)i, (double)p[i],
                          (double)R.p[i], (long long)u, (double)pmax);
        }
        /* the compact state: the unsharded state's slices, in range order */
        int64_t off[MAXB], num[MAXB];
        int nr = ranges_of(r, world, off, num);
        int64_t base = 0;
        for (int k = 0; k < zo.nstate; k++) {
            const float *st = p + n + k * zo.sn;
            float smax = 0.0f;
            for (int64_t i = 0; i < n; i++)
                smax = fmaxf(smax, fabsf(R.s[k][i]));
            base = 0;
            for (int i = 0; i < nr; i++) {
                for (int64_t e = 0; e < num[i]; e++) {
                    float a = st[base + e], b = R.s[k][off[i] + e];
                    if (exact)
                        ck_assert_msg(!memcmp(&a, &b, 4), "world %d rank %d: state %d[%lld] "
                                      "%.9g, unsharded %.9g", world, r, k,
                                      (long long)(off[i] + e), (double)a, (double)b);
                    else
                        ck_assert_msg(fabsf(a - b) <= 2e-6f * smax,
                                      "world %d rank %d: state %d[%lld] %.9g, unsharded %.9g "
                                      "(scale %.3g)", world, r, k, (long long)(off[i] + e),
                                      (double)a, (double)b, (double)smax);
                }
                base += num[i];
            }
        }
        ck_assert_int_eq(base == 0 ? 0 : base, zo.nstate ? zo.sn : 0);
    }
    /* memory: the shards' state adds up to the unsharded optimizer's */
    ck_assert_uint_eq(sum_bytes, R.state_bytes);
    l8t_world_free(jobs, world);
    ref_free(&R);
}

static int nsteps(void) { return l8_test_quick() ? 3 : 4; }

START_TEST(test_zero_bitwise)
{
    for (int world = 2; world <= 4; world += 2) {
        zcase a = { 0, L8_F32, 0.0f, nsteps(), -1, -1, 0.0f, 0x2e01 };
        run_case(&a, world);
        zcase b = { 1, L8_BF16, 0.0f, nsteps(), -1, -1, 0.0f, 0x2e02 };
        run_case(&b, world);
    }
}
END_TEST

/* max_norm 0.5 (0.25) clips every step: w1 alone (13,000 elements uniform
 * in [-1, 1) times at least 2^-6) has a norm of about 1.03 or more. */
START_TEST(test_zero_clipped)
{
    for (int world = 2; world <= 4; world += 2) {
        zcase a = { 0, L8_F32, 0.5f, nsteps(), -1, -1, 0.0f, 0x2e03 };
        run_case(&a, world);
        zcase b = { 1, L8_F32, 0.25f, nsteps(), -1, -1, 0.0f, 0x2e04 };
        run_case(&b, world);
    }
}
END_TEST

/* A NaN (then an Inf) in one rank's own range: every rank skips that step,
 * weights and state bitwise as the unsharded run that skipped it too. */
START_TEST(test_zero_nonfinite)
{
    for (int world = 2; world <= 4; world += 2) {
        zcase a = { 0, L8_F32, 0.0f, 3, world - 1, 1, NAN, 0x2e05 };
        run_case(&a, world);
        zcase b = { 1, L8_BF16, 0.0f, 3, 0, 0, INFINITY, 0x2e06 };
        run_case(&b, world);
        zcase c = { 0, L8_F32, 0.5f, 3, 1, 2, -INFINITY, 0x2e07 };
        run_case(&c, world);
    }
}
END_TEST

/* ---- single-rank cases ---- */

static l8_params *group_host(l8_ctx *ctx, l8_dtype gdt)
{
    l8_params *g = NULL;
    L8_CK(group_make(ctx, gdt, l8_test_seed(), &g));
    return g;
}

static uint64_t live_bytes(l8_ctx *ctx)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    return s.allocated_bytes;
}

/* State per rank is 1/world of the unsharded state: the query, and the
 * allocator's live bytes (the full buffers are released). */
START_TEST(test_zero_memory)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = group_host(ctx, L8_F32);
    int64_t n = l8_params_buffer_numel(g);
    for (int world = 2; world <= 4; world += 2) {
        size_t sum = 0;
        for (int r = 0; r < world; r++) {
            l8_optim *o = NULL;
            L8_CK(l8_optim_create_adamw(g, NULL, &o));
            ck_assert_int_eq(l8_optim_is_sharded(o), 0);
            ck_assert_int_eq(l8_optim_shard_count(o), 1);
            ck_assert_int_eq(l8_optim_shard_numel(o), n);
            size_t full = l8_optim_state_bytes(o);
            ck_assert_uint_eq(full, 2 * (size_t)n * 4);
            uint64_t before = live_bytes(ctx);
            int64_t off[MAXB], num[MAXB];
            int nr = ranges_of(r, world, off, num);
            L8_CK(l8_optim_set_shard(o, nr, off, num));
            int64_t sn = 0;
            for (int i = 0; i < nr; i++) {
                int64_t a, k;
                L8_CK(l8_optim_shard_range(o, i, &a, &k));
                ck_assert(a == off[i] && k == num[i]);
                sn += k;
            }
            ck_assert_int_eq(l8_optim_is_sharded(o), 1);
            ck_assert_int_eq(l8_optim_shard_count(o), nr);
            ck_assert_int_eq(l8_optim_shard_numel(o), sn);
            size_t part = l8_optim_state_bytes(o);
            ck_assert_uint_eq(part, 2 * (size_t)sn * 4);
            /* 1/world, give or take the 128-element units of uneven buckets */
            ck_assert_msg(part * world >= full - (size_t)NBUCKET * UNIT * 8 * world &&
                          part * world <= full + (size_t)NBUCKET * UNIT * 8 * world,
                          "rank %d of %d: %zu state bytes, unsharded %zu", r, world, part, full);
            /* the allocator holds less by what was released (block rounding aside) */
            uint64_t after = live_bytes(ctx);
            ck_assert_msg(after + (full - part) <= before + 4096 &&
                          after + (full - part) + 4096 >= before,
                          "live bytes %llu -> %llu, state %zu -> %zu", (unsigned long long)before,
                          (unsigned long long)after, full, part);
            sum += part;
            l8_optim_destroy(o);
        }
        ck_assert_uint_eq(sum, 2 * (size_t)n * 4);
    }
    /* SGD without momentum has no state: 0 bytes either way */
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_sgd(g, NULL, &o));
    int64_t a = 0, k = 2 * UNIT;
    L8_CK(l8_optim_set_shard(o, 1, &a, &k));
    ck_assert_uint_eq(l8_optim_state_bytes(o), 0);
    L8_CK(l8_optim_step(o, NULL, NULL));
    l8_optim_destroy(o);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
}
END_TEST

static l8_status hook_fail(void *arg, l8_tensor *partial, l8_stream *s)
{
    (void)partial;
    (void)s;
    ++*(int *)arg;
    return L8_FAIL(L8_ERR_COMM, "test: the norm hook failed");
}

/* doubles the partial: what a second rank with the same gradients adds */
static l8_status hook_twice(void *arg, l8_tensor *partial, l8_stream *s)
{
    (void)s;
    float v;
    L8_CHECK(l8_tensor_copy_to_host(partial, &v, sizeof v, NULL));
    v = v + v;
    ++*(int *)arg;
    return l8_tensor_copy_from_host(partial, &v, sizeof v, NULL);
}

static void read_all(l8_params *g, l8_optim *o, float *p, float *s0)
{
    int64_t n = l8_params_buffer_numel(g);
    L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(g), p, (size_t)n * 4, NULL));
    L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, 0), s0,
                                 (size_t)l8_optim_shard_numel(o) * 4, NULL));
}

/* The hook: called once per step with an f32 [1] partial; its failure fails
 * the step and changes nothing; its sum is the norm every rank uses. */
START_TEST(test_zero_hook)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = group_host(ctx, L8_F32);
    int64_t n = l8_params_buffer_numel(g);
    float *gr = xmalloc((size_t)n * 4);
    grads_of(gr, g, 0, 0x4001, -1, 0.0f);
    L8_CK(grads_upload(g, gr));
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    c.max_grad_norm = 0.5f;            /* below any norm these gradients have */
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, &c, &o));
    int64_t off[2] = { 0, 40 * UNIT }, num[2] = { 8 * UNIT, 60 * UNIT };
    L8_CK(l8_optim_set_shard(o, 2, off, num));
    float *p0 = xmalloc((size_t)n * 4), *p1 = xmalloc((size_t)n * 4);
    float *s0 = xmalloc((size_t)n * 4), *s1 = xmalloc((size_t)n * 4);
    l8_optim_result res = L8_OPTIM_RESULT_INIT;
    /* a step without a hook: this shard's own norm */
    L8_CK(l8_optim_step(o, NULL, &res));
    double own = 0.0;
    for (int i = 0; i < 2; i++)
        for (int64_t e = off[i]; e < off[i] + num[i]; e++)
            own += (double)gr[e] * gr[e];
    ck_assert_msg(fabs(res.grad_norm - sqrt(own)) <= 1e-6 * sqrt(own), "norm %.9g, shard %.9g",
                  (double)res.grad_norm, sqrt(own));
    read_all(g, o, p0, s0);
    /* a failing hook: the status comes back, nothing moved */
    int calls = 0;
    L8_CK(l8_optim_set_norm_reduce(o, hook_fail, &calls));
    L8_CK_ST(l8_optim_step(o, NULL, NULL), L8_ERR_COMM);
    ck_assert_int_eq(calls, 1);
    ck_assert(strstr(l8_last_error_string(), "norm hook failed") != NULL);
    read_all(g, o, p1, s1);
    ck_assert(!memcmp(p0, p1, (size_t)n * 4));
    ck_assert(!memcmp(s0, s1, (size_t)l8_optim_shard_numel(o) * 4));
    uint64_t step;
    L8_CK(l8_optim_get_step(o, &step));
    ck_assert_uint_eq(step, 1);
    /* a hook that sums two equal partials: the norm is sqrt(2) times the
     * shard's, the partial crossed as f32 */
    calls = 0;
    L8_CK(l8_optim_set_norm_reduce(o, hook_twice, &calls));
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert_int_eq(calls, 1);
    float twice = (float)own + (float)own;
    ck_assert_msg(res.grad_norm == (float)sqrt((double)twice), "norm %.9g, want %.9g",
                  (double)res.grad_norm, sqrt((double)twice));
    ck_assert(res.clip_coef < 1.0f && res.step == 2);
    /* removed: the shard's own norm again */
    L8_CK(l8_optim_set_norm_reduce(o, NULL, &calls));
    L8_CK(l8_optim_step(o, NULL, &res));
    ck_assert_int_eq(calls, 1);
    ck_assert(fabs(res.grad_norm - sqrt(own)) <= 1e-6 * sqrt(own));
    /* weights outside the shard never move */
    read_all(g, o, p1, s1);
    float *init = xmalloc((size_t)n * 4);
    l8_params *g2 = group_host(ctx, L8_F32);
    L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(g2), init, (size_t)n * 4, NULL));
    for (int64_t e = 0; e < n; e++) {
        int inside = (e >= off[0] && e < off[0] + num[0]) || (e >= off[1] && e < off[1] + num[1]);
        ck_assert_msg(inside ? p1[e] != init[e] || gr[e] == 0.0f : p1[e] == init[e],
                      "master[%lld] %s the shard %s", (long long)e, inside ? "inside" : "outside",
                      inside ? "did not move" : "moved");
    }
    /* an unsharded optimizer with a hook: with clipping off the same weights
     * as without it, bit for bit (the norm only decides the skip) */
    l8_params *ga = group_host(ctx, L8_F32), *gb = group_host(ctx, L8_F32);
    l8_optim *oa = NULL, *ob = NULL;
    L8_CK(l8_optim_create_adamw(ga, NULL, &oa));
    L8_CK(l8_optim_create_adamw(gb, NULL, &ob));
    L8_CK(l8_optim_set_norm_reduce(ob, hook_twice, &calls));
    L8_CK(grads_upload(ga, gr));
    L8_CK(grads_upload(gb, gr));
    L8_CK(l8_optim_step(oa, NULL, NULL));
    L8_CK(l8_optim_step(ob, NULL, NULL));
    L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(ga), p0, (size_t)n * 4, NULL));
    L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(gb), p1, (size_t)n * 4, NULL));
    ck_assert(!memcmp(p0, p1, (size_t)n * 4));
    l8_optim_destroy(oa);
    l8_optim_destroy(ob);
    l8_params_destroy(ga);
    l8_params_destroy(gb);
    l8_params_destroy(g2);
    free(init);
    free(p0);
    free(p1);
    free(s0);
    free(s1);
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
}
END_TEST

/* Per-parameter state views of a shard: a parameter inside one range is a
 * view of the compact state; one outside or split is refused. */
START_TEST(test_zero_state_view)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = group_host(ctx, L8_F32);
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    /* emb (id 4) is registered last: it starts at 0 (25 units); b2 (id 3)
     * follows at unit 25; w2 (id 2) at 26..54 */
    ck_assert_int_eq(l8_params_offset(g, 4), 0);
    ck_assert_int_eq(l8_params_offset(g, 3), 25 * UNIT);
    int64_t off[2] = { 25 * UNIT, 60 * UNIT }, num[2] = { 1 * UNIT, 10 * UNIT };
    L8_CK(l8_optim_set_shard(o, 2, off, num));
    float *gr = xmalloc((size_t)l8_params_buffer_numel(g) * 4);
    grads_of(gr, g, 0, 0x4002, -1, 0.0f);
    L8_CK(grads_upload(g, gr));
    L8_CK(l8_optim_step(o, NULL, NULL));
    l8_tensor *v = NULL;
    L8_CK(l8_optim_state_view(o, 1, 3, &v));
    ck_assert_int_eq(l8_tensor_numel(v), 37);
    ck_assert_uint_eq(l8_tensor_offset(v), 0);       /* first in the compact state */
    ck_assert_int_eq(l8_optim_shard_numel(o), 11 * UNIT);
    float got[37], all[11 * UNIT];
    L8_CK(l8_tensor_copy_to_host(v, got, sizeof got, NULL));
    L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, 1), all, sizeof all, NULL));
    ck_assert(!memcmp(got, all, sizeof got));
    ck_assert(got[0] > 0.0f);
    l8_tensor_destroy(v);
    v = NULL;
    L8_CK_ST(l8_optim_state_view(o, 0, 4, &v), L8_ERR_INVALID_ARG);   /* outside */
    ck_assert(strstr(l8_last_error_string(), "emb") != NULL);
    L8_CK_ST(l8_optim_state_view(o, 0, 2, &v), L8_ERR_INVALID_ARG);   /* split */
    ck_assert_ptr_null(v);
    free(gr);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
}
END_TEST

START_TEST(test_zero_errors)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = group_host(ctx, L8_F32);
    int64_t n = l8_params_buffer_numel(g);
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    int64_t off[3] = { 0, 10 * UNIT, 20 * UNIT }, num[3] = { UNIT, UNIT, UNIT };
    L8_CK_ST(l8_optim_set_shard(NULL, 1, off, num), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard(o, -1, off, num), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard(o, L8_OPTIM_MAX_RANGES + 1, off, num), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard(o, 1, NULL, num), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard(o, 1, off, NULL), L8_ERR_INVALID_ARG);
    struct { int64_t a0, k0, a1, k1; const char *why; } bad[] = {
        { 64, UNIT, 10 * UNIT, UNIT, "multiples" },              /* offset not aligned */
        { 0, 100, 10 * UNIT, UNIT, "multiples" },                /* numel not aligned */
        { 0, 0, 10 * UNIT, UNIT, "numel >= 1" },                 /* empty range */
        { -UNIT, UNIT, 10 * UNIT, UNIT, "offset" },              /* negative */
        { 0, UNIT, n - UNIT, 2 * UNIT, "past the group" },       /* past the end */
        { 0, UNIT, n + UNIT, UNIT, "past the group" },
        { 10 * UNIT, UNIT, 0, UNIT, "sorted" },                  /* unsorted */
        { 0, 2 * UNIT, UNIT, UNIT, "disjoint" },                 /* overlapping */
        { 0, UNIT, INT64_MAX - 127, UNIT, "" },                  /* overflow */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t a[2] = { bad[i].a0, bad[i].a1 }, k[2] = { bad[i].k0, bad[i].k1 };
        L8_CK_ST(l8_optim_set_shard(o, 2, a, k), L8_ERR_INVALID_ARG);
        ck_assert_msg(strstr(l8_last_error_string(), bad[i].why) != NULL, "case %zu: %s", i,
                      l8_last_error_string());
    }
    /* nothing of that changed the optimizer */
    ck_assert_int_eq(l8_optim_is_sharded(o), 0);
    ck_assert_int_eq(l8_optim_shard_numel(o), n);
    /* re-sharding before the first step is allowed; n 0 is an empty shard */
    L8_CK(l8_optim_set_shard(o, 3, off, num));
    L8_CK(l8_optim_set_shard(o, 0, NULL, NULL));
    ck_assert_int_eq(l8_optim_shard_numel(o), 0);
    L8_CK(l8_optim_set_shard(o, 2, off, num));
    ck_assert_int_eq(l8_optim_shard_numel(o), 2 * UNIT);
    L8_CK_ST(l8_optim_set_shard_rank(NULL, 0, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard_rank(o, 2, 2), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard_rank(o, -1, 2), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_shard_rank(o, 0, 0), L8_ERR_INVALID_ARG);
    L8_CK(l8_optim_set_shard_rank(o, 1, 2));
    int64_t a, k;
    L8_CK_ST(l8_optim_shard_range(o, 2, &a, &k), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_shard_range(o, -1, &a, &k), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_shard_range(o, 0, NULL, &k), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_set_norm_reduce(NULL, hook_fail, NULL), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_optim_shard_count(NULL), -1);
    ck_assert_int_eq(l8_optim_shard_numel(NULL), -1);
    ck_assert_uint_eq(l8_optim_state_bytes(NULL), 0);
    ck_assert_int_eq(l8_optim_is_sharded(NULL), 0);
    /* after a step, or after a restore: too late */
    L8_CK(l8_optim_step(o, NULL, NULL));
    L8_CK_ST(l8_optim_set_shard(o, 1, off, num), L8_ERR_STATE);
    ck_assert(strstr(l8_last_error_string(), "before the first step") != NULL);
    l8_optim *o2 = NULL;
    L8_CK(l8_optim_create_sgd(g, NULL, &o2));
    L8_CK(l8_optim_set_step(o2, 7));
    L8_CK_ST(l8_optim_set_shard(o2, 1, off, num), L8_ERR_STATE);
    l8_optim_destroy(o2);
    /* checkpoint calls */
    L8_CK_ST(l8_optim_save(o, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_check_load(o, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_load(NULL, NULL), L8_ERR_INVALID_ARG);
    l8_optim_destroy(o);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
}
END_TEST

/* set_shard meets an allocation failure at each of its allocations: OOM,
 * the optimizer unchanged and usable, nothing leaked; then it succeeds. */
START_TEST(test_zero_fault_injection)
{
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &host);
    uint64_t calls = 0;
    for (uint64_t nth = 0; nth <= calls + 1; nth++) {
        l8_ctx *ctx = l8t_ctx("host", &fp.base, 0);
        l8_params *g = NULL;
        L8_CK(l8_params_create(ctx, NULL, &g));
        /* 12 MB buffers: each state buffer takes a segment of its own */
        L8_CK(l8_params_add(g, "big", 1, (const int64_t[1]){ 3000000 }, NULL));
        L8_CK(l8_params_finalize(g));
        l8_optim *o = NULL;
        L8_CK(l8_optim_create_adamw(g, NULL, &o));
        uint64_t held = live_bytes(ctx);
        /* 900 ranges of 3,200 elements: 11.5 MB of state each, and 900 norm
         * partials, more than the 733 the group's own layout has room for */
        int64_t off[900], num[900];
        for (int i = 0; i < 900; i++) {
            off[i] = (int64_t)i * 26 * UNIT;
            num[i] = 25 * UNIT;
        }
        fp.calls = fp.failures = 0;
        fp.fail_nth = nth;
        fp.fail_sticky = 1;
        l8_status st = l8_optim_set_shard(o, 900, off, num);
        fp.fail_nth = 0;
        if (nth == 0) {
            L8_CK(st);
            calls = fp.calls;
            ck_assert_msg(calls >= 2, "set_shard made %llu segment allocations: the test no "
                          "longer reaches every error path", (unsigned long long)calls);
        } else if (nth <= calls) {
            ck_assert_msg(st == L8_ERR_OOM, "fault at %llu -> %s", (unsigned long long)nth,
                          l8_last_error_string());
            ck_assert_uint_eq(live_bytes(ctx), held);
            ck_assert_int_eq(l8_optim_is_sharded(o), 0);
            ck_assert_int_eq(l8_optim_shard_numel(o), l8_params_buffer_numel(g));
            L8_CK(l8_optim_set_shard(o, 900, off, num));
        } else {
            L8_CK(st);
        }
        ck_assert_int_eq(l8_optim_shard_numel(o), 900 * 25 * UNIT);
        L8_CK(l8_optim_step(o, NULL, NULL));
        l8_optim_destroy(o);
        l8_params_destroy(g);
        l8t_ctx_finish(ctx);
        ck_assert_uint_eq(fp.live_bytes, 0);
    }
}
END_TEST


/* ---- checkpoints ---- */

/* Rank: 2 steps, save (master + optimizer), 2 more; then a fresh group and
 * optimizer load that file and do the same 2 steps. Hands back both runs'
 * master and state. */
typedef struct ckarg {
    zcase zc;
    char dir[256];
} ckarg;

static l8_status ck_open_path(const ckarg *a, int rank, char *path, size_t n)
{
    snprintf(path, n, "%s/rank%d.ckpt", a->dir, rank);
    return L8_OK;
}

static l8_status ck_steps(l8_comm *c, l8_params *g, l8_optim *o, const zcase *zc, int from,
                          int to, float *gr, int world)
{
    for (int s = from; s < to; s++) {
        grads_of(gr, g, s, zc->salt, -1, 0.0f);
        L8_CHECK(grads_upload(g, gr));
        L8_CHECK(l8_optim_step(o, NULL, NULL));
        L8_CHECK(gather_master(c, g, world));
    }
    return L8_OK;
}

static l8_status ck_make(l8_ctx *ctx, l8_comm *c, const l8t_job *j, const zcase *zc,
                         uint64_t seed, l8_params **g, l8_optim **o)
{
    int64_t off[MAXB], num[MAXB];
    int nr = ranges_of(j->rank, j->world, off, num);
    L8_CHECK(group_make(ctx, zc->gdt, seed, g));
    L8_CHECK(optim_make(*g, zc, o));
    L8_CHECK(l8_optim_set_shard(*o, nr, off, num));
    L8_CHECK(l8_optim_set_shard_rank(*o, j->rank, j->world));
    return l8_optim_set_norm_reduce(*o, l8_comm_reduce_sum, c);
}

static l8_status ckpt_rank(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const ckarg *a = j->arg;
    const zcase *zc = &a->zc;
    l8_params *g[2] = { NULL, NULL };
    l8_optim *o[2] = { NULL, NULL };
    l8_ckpt_writer *w = NULL;
    l8_ckpt_reader *r = NULL;
    unsigned char *buf = NULL;
    float *gr = NULL;
    char path[320];
    l8_status st;
    L8_TRY(st, ck_open_path(a, j->rank, path, sizeof path), out);
    L8_TRY(st, ck_make(ctx, c, j, zc, 0x5eed, &g[0], &o[0]), out);
    int64_t n = l8_params_buffer_numel(g[0]), sn = l8_optim_shard_numel(o[0]);
    gr = malloc((size_t)n * sizeof *gr);
    if (!gr) { st = L8_FAIL(L8_ERR_OOM, "test: host memory"); goto out; }
    L8_TRY(st, ck_steps(c, g[0], o[0], zc, 0, 2, gr, j->world), out);
    L8_TRY(st, l8_ckpt_writer_open(path, "test-zero", 1, &w), out);
    L8_TRY(st, l8_ckpt_write_tensor(w, "params.master", l8_params_master_flat(g[0])), out);
    L8_TRY(st, l8_optim_save(o[0], w), out);
    st = l8_ckpt_writer_commit(w);
    w = NULL;
    if (st != L8_OK) goto out;
    L8_TRY(st, ck_steps(c, g[0], o[0], zc, 2, 4, gr, j->world), out);
    /* resume: other initial weights, everything from the file */
    L8_TRY(st, ck_make(ctx, c, j, zc, 0xbad5eed, &g[1], &o[1]), out);
    L8_TRY(st, l8_ckpt_open(path, &r), out);
    L8_TRY(st, l8_optim_check_load(o[1], r), out);
    L8_TRY(st, l8_ckpt_read_tensor(r, "params.master", l8_params_master_flat(g[1])), out);
    L8_TRY(st, l8_optim_load(o[1], r), out);
    L8_TRY(st, ck_steps(c, g[1], o[1], zc, 2, 4, gr, j->world), out);
    /* out: [step a, step b] then per run master (n) and state (2 x sn) */
    size_t per = (size_t)(n + 2 * sn) * sizeof(float);
    buf = malloc(2 * sizeof(uint64_t) + 2 * per);
    if (!buf) { st = L8_FAIL(L8_ERR_OOM, "test: host memory"); goto out; }
    for (int k = 0; k < 2; k++) {
        uint64_t step;
        unsigned char *f = buf + 2 * sizeof(uint64_t) + (size_t)k * per;
        L8_TRY(st, l8_optim_get_step(o[k], &step), out);
        memcpy(buf + (size_t)k * sizeof step, &step, sizeof step);
        L8_TRY(st, l8_tensor_copy_to_host(l8_params_master_flat(g[k]), f, (size_t)n * 4, NULL),
               out);
        for (int s = 0; s < l8_optim_state_count(o[k]); s++)
            L8_TRY(st, l8_tensor_copy_to_host(l8_optim_state(o[k], s), f + (size_t)(n + s * sn) * 4,
                                              (size_t)sn * 4, NULL), out);
    }
    L8_TRY(st, l8t_keep(j, buf, 2 * sizeof(uint64_t) + 2 * per), out);
out:
    l8_ckpt_writer_abort(w);
    l8_ckpt_close(r);
    free(buf);
    free(gr);
    for (int k = 0; k < 2; k++) {
        l8_optim_destroy(o[k]);
        l8_params_destroy(g[k]);
    }
    return st;
}

/* A ZeRO-1 run resumed from each rank's checkpoint continues bit for bit. */
START_TEST(test_zero_resume_bitwise)
{
    for (int world = 2; world <= 4; world += 2) {
        l8t_tmpdir d;
        l8t_tmp_init(&d, "l8zero");
        ckarg a = { { 0, L8_F32, 0.5f, 4, -1, -1, 0.0f, 0x2e10 + (uint64_t)world }, "" };
        snprintf(a.dir, sizeof a.dir, "%s", d.dir);
        l8t_job jobs[MAXW];
        l8t_world_run(world, L8_COMM_THREADS, ckpt_rank, &a, jobs, 0);
        l8t_world_ok(jobs, world);
        for (int r = 0; r < world; r++) {
            uint64_t steps[2];
            memcpy(steps, jobs[r].out, sizeof steps);
            ck_assert_uint_eq(steps[0], 4);
            ck_assert_uint_eq(steps[1], 4);
            size_t per = (jobs[r].out_bytes - sizeof steps) / 2;
            ck_assert_msg(!memcmp(jobs[r].out + sizeof steps, jobs[r].out + sizeof steps + per,
                                  per), "world %d rank %d: the resumed run differs", world, r);
            char path[320];
            L8_CK(ck_open_path(&a, r, path, sizeof path));
            ck_assert_int_eq(remove(path), 0);
        }
        l8t_world_free(jobs, world);
        ck_assert_int_eq(rmdir(d.dir), 0);
    }
}
END_TEST

/* An optimizer (one step taken) saved into path. world 0: unsharded; -1: a
 * shard of `rank` of `-world`... kept simple: ranges of rank/world, the rank
 * recorded unless norank. */
static void save_one(l8_params *g, const char *path, int world, int rank, int norank)
{
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    if (world > 0) {
        int64_t off[MAXB], num[MAXB];
        int nr = ranges_of(rank, world, off, num);
        L8_CK(l8_optim_set_shard(o, nr, off, num));
        if (!norank)
            L8_CK(l8_optim_set_shard_rank(o, rank, world));
    }
    L8_CK(l8_optim_step(o, NULL, NULL));
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, "test-zero", 1, &w));
    L8_CK(l8_optim_save(o, w));
    L8_CK(l8_ckpt_writer_commit(w));
    l8_optim_destroy(o);
}

static l8_optim *target(l8_params *g, int world, int rank, int norank)
{
    l8_optim *o = NULL;
    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    if (world > 0) {
        int64_t off[MAXB], num[MAXB];
        int nr = ranges_of(rank, world, off, num);
        L8_CK(l8_optim_set_shard(o, nr, off, num));
        if (!norank)
            L8_CK(l8_optim_set_shard_rank(o, rank, world));
    }
    return o;
}

/* load must refuse with every phrase of want (NULL-terminated) in the
 * message, and leave o's state untouched. */
static void refused(l8_optim *o, const char *path, const char *const *want)
{
    l8_ckpt_reader *r = NULL;
    L8_CK(l8_ckpt_open(path, &r));
    size_t sn = (size_t)l8_optim_shard_numel(o);
    float *before = xmalloc(sn * 4 + 4), *after = xmalloc(sn * 4 + 4);
    L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, 0), before, sn * 4, NULL));
    L8_CK_ST(l8_optim_check_load(o, r), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_optim_load(o, r), L8_ERR_INVALID_ARG);
    const char *msg = l8_last_error_string();
    for (int i = 0; want[i]; i++)
        ck_assert_msg(strstr(msg, want[i]) != NULL, "message lacks \"%s\": %s", want[i], msg);
    ck_assert_msg(strstr(msg, path) != NULL, "message lacks the file: %s", msg);
    L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, 0), after, sn * 4, NULL));
    ck_assert(!memcmp(before, after, sn * 4));
    uint64_t step;
    L8_CK(l8_optim_get_step(o, &step));
    ck_assert_uint_eq(step, 0);
    free(before);
    free(after);
    l8_ckpt_close(r);
}

START_TEST(test_zero_ckpt_refused)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_params *g = group_host(ctx, L8_F32);
    float *gr = xmalloc((size_t)l8_params_buffer_numel(g) * 4);
    grads_of(gr, g, 0, 0x4003, -1, 0.0f);
    L8_CK(grads_upload(g, gr));
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8zero");
    const char *f_whole = l8t_tmp_file(&d, "whole.ckpt");
    const char *f_4r0 = l8t_tmp_file(&d, "4r0.ckpt");
    const char *f_4r1 = l8t_tmp_file(&d, "4r1.ckpt");
    const char *f_2anon = l8t_tmp_file(&d, "2anon.ckpt");
    const char *f_bad = l8t_tmp_file(&d, "bad.ckpt");
    save_one(g, f_whole, 0, 0, 0);
    save_one(g, f_4r0, 4, 0, 0);
    save_one(g, f_4r1, 4, 1, 0);
    save_one(g, f_2anon, 2, 0, 1);
    /* the unsharded file has exactly the sections it always had */
    l8_ckpt_reader *r = NULL;
    L8_CK(l8_ckpt_open(f_whole, &r));
    ck_assert_uint_eq(l8_ckpt_section_count(r), 3);
    ck_assert(l8_ckpt_has(r, "optim.exp_avg") && l8_ckpt_has(r, "optim.exp_avg_sq") &&
              l8_ckpt_has(r, "optim.step") && !l8_ckpt_has(r, "optim.shard"));
    l8_ckpt_close(r);

    /* N -> M */
    l8_optim *o = target(g, 2, 0, 0);
    refused(o, f_4r0, (const char *const[]){ "written by 4 ranks", "this run has 2 ranks",
                                             "rank 0 of 4 ranks", "rank 0 of 2 ranks", NULL });
    /* unsharded <-> sharded */
    refused(o, f_whole, (const char *const[]){ "unsharded", "rank 0 of 2 ranks", NULL });
    l8_optim_destroy(o);
    o = target(g, 0, 0, 0);
    refused(o, f_4r0, (const char *const[]){ "rank 0 of 4 ranks", "unsharded", NULL });
    l8_optim_destroy(o);
    /* another rank's file */
    o = target(g, 4, 1, 0);
    refused(o, f_4r0, (const char *const[]){ "rank 0 of 4 ranks", "rank 1's", NULL });
    l8_optim_destroy(o);
    /* the same world and rank, other ranges (another bucketing) */
    o = NULL;
    L8_CK(l8_optim_create_adamw(g, NULL, &o));
    {
        int64_t off[1] = { 0 }, num[1] = { 40 * UNIT };
        L8_CK(l8_optim_set_shard(o, 1, off, num));
        L8_CK(l8_optim_set_shard_rank(o, 0, 4));
    }
    refused(o, f_4r0, (const char *const[]){ "range 0", "same ranks and buckets", NULL });
    l8_optim_destroy(o);
    /* rank not given on one side: the ranges still must match (rank 1 of 2's
     * ranges are not rank 0's) */
    o = target(g, 2, 1, 0);
    refused(o, f_2anon, (const char *const[]){ "not given", "range 0", NULL });
    l8_optim_destroy(o);
    /* a malformed layout section */
    {
        l8_optim *src = target(g, 4, 0, 0);
        l8_ckpt_writer *w = NULL;
        L8_CK(l8_ckpt_writer_open(f_bad, "test-zero", 1, &w));
        for (int k = 0; k < 2; k++) {
            char name[64];
            snprintf(name, sizeof name, "optim.%s", l8_optim_state_name(src, k));
            L8_CK(l8_ckpt_write_tensor(w, name, l8_optim_state(src, k)));
        }
        uint64_t step = 1;
        L8_CK(l8_ckpt_write_section(w, "optim.step", &step, sizeof step));
        L8_CK(l8_ckpt_write_section(w, "optim.shard", "short", 5));
        L8_CK(l8_ckpt_writer_commit(w));
        refused(src, f_bad, (const char *const[]){ "malformed", NULL });
        l8_optim_destroy(src);
    }
    /* the matching layouts load: state and step as saved */
    const char *ok[3] = { f_4r0, f_whole, f_2anon };
    for (int i = 0; i < 3; i++) {
        o = i == 0 ? target(g, 4, 0, 0) : i == 1 ? target(g, 0, 0, 0) : target(g, 2, 0, 1);
        L8_CK(l8_ckpt_open(ok[i], &r));
        L8_CK(l8_optim_load(o, r));
        uint64_t step;
        L8_CK(l8_optim_get_step(o, &step));
        ck_assert_uint_eq(step, 1);
        size_t sn = (size_t)l8_optim_shard_numel(o);
        float *got = xmalloc(sn * 4 + 4);
        const void *raw;
        size_t bytes;
        L8_CK(l8_ckpt_section(r, "optim.exp_avg_sq", &raw, &bytes));
        ck_assert_uint_eq(bytes, sn * 4);
        L8_CK(l8_tensor_copy_to_host(l8_optim_state(o, 1), got, sn * 4, NULL));
        ck_assert(!memcmp(got, raw, sn * 4));
        free(got);
        l8_ckpt_close(r);
        /* loading is a restore: set_shard is too late afterwards */
        int64_t a = 0, k = UNIT;
        L8_CK_ST(l8_optim_set_shard(o, 1, &a, &k), L8_ERR_STATE);
        l8_optim_destroy(o);
    }
    for (int i = 0; i < d.n; i++)
        ck_assert_int_eq(remove(d.path[i]), 0);
    ck_assert_int_eq(rmdir(d.dir), 0);
    free(gr);
    l8_params_destroy(g);
    l8t_ctx_finish(ctx);
}
END_TEST

/* ---- GPU: the sharded step on cuda:0 equals the host's, bit for bit ---- */

typedef struct gpair {
    l8_ctx *ctx[2];               /* 0 cuda, 1 host */
    l8_params *g[2];
    l8_optim *o[2];
} gpair;

static void gpu_shard_case(l8_ctx *gc, l8_ctx *hc, int kind, l8_dtype gdt, int hook,
                           int64_t big, uint64_t salt)
{
    gpair pr = { { gc, hc }, { NULL, NULL }, { NULL, NULL } };
    zcase zc = { kind, gdt, kind ? 0.0f : 0.5f, 3, -1, -1, 0.0f, salt };
    int calls[2] = { 0, 0 };
    for (int d = 0; d < 2; d++) {
        if (big) {
            l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
            cfg.grad_dtype = gdt;
            L8_CK(l8_params_create(pr.ctx[d], &cfg, &pr.g[d]));
            L8_CK(l8_params_add(pr.g[d], "big", 1, &big, NULL));
            L8_CK(l8_params_finalize(pr.g[d]));
            L8_CK(l8_params_init_uniform(pr.g[d], 0, -1.0f, 1.0f, salt));
        } else {
            L8_CK(group_make(pr.ctx[d], gdt, salt, &pr.g[d]));
        }
        L8_CK(optim_make(pr.g[d], &zc, &pr.o[d]));
    }
    int64_t n = l8_params_buffer_numel(pr.g[0]);
    /* five ranges: one unit, a partial chunk, several chunks, the end */
    int64_t u = n / UNIT;
    int64_t off[5] = { 0, 3 * UNIT, (u / 4) * UNIT, (u / 2) * UNIT, (u - 7) * UNIT };
    int64_t num[5] = { UNIT, 30 * UNIT, (u / 8) * UNIT, (u / 4 - 1) * UNIT, 7 * UNIT };
    for (int d = 0; d < 2; d++) {
        L8_CK(l8_optim_set_shard(pr.o[d], 5, off, num));
        if (hook)
            L8_CK(l8_optim_set_norm_reduce(pr.o[d], hook_twice, &calls[d]));
    }
    int64_t sn = l8_optim_shard_numel(pr.o[0]);
    float *gr = xmalloc((size_t)n * 4);
    float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4);
    for (int s = 0; s < zc.steps; s++) {
        grads_of(gr, pr.g[0], s, salt, s == 1 ? off[2] + 5 : -1, NAN);
        l8_optim_result res[2] = { L8_OPTIM_RESULT_INIT, L8_OPTIM_RESULT_INIT };
        for (int d = 0; d < 2; d++) {
            L8_CK(grads_upload(pr.g[d], gr));
            L8_CK(l8_optim_step(pr.o[d], NULL, &res[d]));
        }
        ck_assert_int_eq(res[0].skipped, s == 1);
        ck_assert(res[0].skipped == res[1].skipped && res[0].step == res[1].step);
        ck_assert_msg(!memcmp(&res[0].grad_norm, &res[1].grad_norm, 4) ||
                      (isnan(res[0].grad_norm) && isnan(res[1].grad_norm)),
                      "kind %d hook %d step %d: norm gpu %.9g host %.9g", kind, hook, s,
                      (double)res[0].grad_norm, (double)res[1].grad_norm);
        ck_assert(res[0].clip_coef == res[1].clip_coef);
        L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(pr.g[0]), a, (size_t)n * 4, NULL));
        L8_CK(l8_tensor_copy_to_host(l8_params_master_flat(pr.g[1]), b, (size_t)n * 4, NULL));
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(!memcmp(&a[i], &b[i], 4), "kind %d %s hook %d step %d: master[%lld] "
                          "gpu %.9g host %.9g", kind, l8_dtype_name(gdt), hook, s,
                          (long long)i, (double)a[i], (double)b[i]);
        for (int k = 0; k < l8_optim_state_count(pr.o[0]); k++) {
            L8_CK(l8_tensor_copy_to_host(l8_optim_state(pr.o[0], k), a, (size_t)sn * 4, NULL));
            L8_CK(l8_tensor_copy_to_host(l8_optim_state(pr.o[1], k), b, (size_t)sn * 4, NULL));
            ck_assert_msg(!memcmp(a, b, (size_t)sn * 4), "kind %d hook %d step %d: state %d "
                          "differs", kind, hook, s, k);
        }
    }
    ck_assert_int_eq(calls[0], hook ? zc.steps : 0);
    ck_assert_int_eq(calls[0], calls[1]);
    free(gr);
    free(a);
    free(b);
    for (int d = 0; d < 2; d++) {
        l8_optim_destroy(pr.o[d]);
        l8_params_destroy(pr.g[d]);
    }
}

START_TEST(test_zero_gpu_matches_host)
{
    l8_ctx *gc = l8t_ctx("cuda:0", NULL, 0), *hc = l8t_ctx("host", NULL, 0);
    for (int kind = 0; kind < 2; kind++)
        for (int bf = 0; bf < 2; bf++)
            for (int hook = 0; hook < 2; hook++) {
                l8_dtype gdt = bf ? L8_BF16 : L8_F32;
                uint64_t salt = 0x6c0 + (uint64_t)(kind * 4 + bf * 2 + hook);
                gpu_shard_case(gc, hc, kind, gdt, hook, 0, salt);
                /* ~5M elements (quick: 0.5M): many CTAs and partials per range */
                gpu_shard_case(gc, hc, kind, gdt, hook, l8_test_quick() ? 500000 : 5000000,
                               salt + 0x100);
            }
    l8t_ctx_finish(hc);
    l8t_ctx_finish(gc);
}
END_TEST

Suite *l8_zero_suite(void)
{
    Suite *s = suite_create("zero");
    TCase *ranks = tcase_create("zero_ranks");
    tcase_add_test(ranks, test_zero_bitwise);
    tcase_add_test(ranks, test_zero_clipped);
    tcase_add_test(ranks, test_zero_nonfinite);
    tcase_add_test(ranks, test_zero_resume_bitwise);
    TCase *one = tcase_create("zero_one");
    tcase_add_test(one, test_zero_memory);
    tcase_add_test(one, test_zero_hook);
    tcase_add_test(one, test_zero_state_view);
    tcase_add_test(one, test_zero_ckpt_refused);
    tcase_add_test(one, test_zero_errors);
    tcase_add_test(one, test_zero_fault_injection);
    TCase *host[] = { ranks, one };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
        tcase_set_tags(host[i], "host");
        tcase_set_timeout(host[i], 300);
        suite_add_tcase(s, host[i]);
    }
    TCase *gpu = tcase_create("gpu_zero");
    tcase_add_test(gpu, test_zero_gpu_matches_host);
    tcase_set_tags(gpu, "gpu");
    tcase_set_timeout(gpu, 900);
    suite_add_tcase(s, gpu);
    return s;
}
