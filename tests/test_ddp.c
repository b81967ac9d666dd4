/* test_ddp.c - data parallel over the host transports (ranks as threads):
 * a two-Linear network trained a few steps with the gradients averaged by
 * the bucketed reducer (runtime/ddp.h), against itself and a single rank.
 *
 *   - overlap on and off give bitwise the same weights on every rank;
 *   - DP = 2 and 4 equal one rank with the whole batch, within rounding
 *     (each rank's GEMMs sum over its own rows);
 *   - micro-batches: nothing is reduced before the last one, and two
 *     micro-batches of T rows equal one of 2T within rounding;
 *   - seeds/000's scenarios: an unused parameter gets a zero (not a stale)
 *     gradient and the step completes; a frozen layer (no reports) likewise;
 *     a double report and, in strict mode, a missing report are errors
 *     naming the parameter;
 *   - on the GPU at world size 1 (NCCL): buckets launch during backward.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/comm.h"
#include "runtime/ddp.h"
#include "runtime/fp8.h"
#include "ops/linear.h"
#include "ops/optim.h"

enum { K = 32, H = 32, N = 16, ROWS = 128 };       /* ROWS: the whole batch of a step */

typedef struct ddp_case {
    l8_linear_mode mode;
    int overlap, strict, micro, unused, frozen, double_report, steps;
    int64_t bucket;
    uint64_t salt;
    int zero;                     /* ZeRO-1: reduce-scatter, sharded optimizer, gather */
    int pad_world;                /* the group's pad_to = 128 x this (0: default) */
} ddp_case;

typedef struct net {
    l8_ctx *ctx;
    l8_params *g;
    l8_gemm_handle *h;
    l8_recipe *r;
    l8_linear *l1, *l2;
    l8_ddp *ddp;
    l8_optim *o;
    int w1, b1, w2, b2, extra;
} net;

static float gen(uint64_t salt, int what, size_t i)
{
    l8_rng g;
    l8_rng_init(&g, salt * 7919u + (uint64_t)what * 104729u + i * 1299709u);
    l8_rng_next(&g);
    return l8_rng_float(&g, -1.0f, 1.0f);
}

static void net_free(net *n)
{
    l8_ddp_destroy(n->ddp);
    l8_optim_destroy(n->o);
    l8_linear_destroy(n->l1);
    l8_linear_destroy(n->l2);
    l8_recipe_destroy(n->r);
    l8_gemm_handle_destroy(n->h);
    l8_params_destroy(n->g);
}

static l8_status linear(net *n, const ddp_case *k, const char *name, int w, int b, int report,
                        l8_linear **out)
{
    l8_linear_config c = L8_LINEAR_CONFIG_INIT;
    c.name = name;
    c.mode = k->mode;
    c.gemm = n->h;
    c.recipe = n->r;
    c.weight = l8_params_master(n->g, w);
    c.weight_grad = l8_params_main_grad(n->g, w);
    c.bias = l8_params_master(n->g, b);
    c.bias_grad = l8_params_main_grad(n->g, b);
    c.weight_id = w;
    c.bias_id = b;
    if (report) {                 /* the one signature: the layer reports straight into the group */
        c.grad_ready = l8_params_grad_ready;
        c.grad_ready_arg = n->g;
    }
    return l8_linear_create(n->ctx, &c, out);
}

/* dp NULL: no reducer (the single-rank reference). */
static l8_status net_make(l8_ctx *ctx, l8_comm *dp, const ddp_case *k, net *n)
{
    memset(n, 0, sizeof *n);
    n->ctx = ctx;
    n->extra = -1;
    int64_t w1[2] = { H, K }, b1[1] = { H }, w2[2] = { N, H }, b2[1] = { N }, ex[2] = { 8, 8 };
    l8_params_config pc = L8_PARAMS_CONFIG_INIT;
    pc.pad_to = k->pad_world ? (int64_t)L8_PARAMS_ALIGN_ELEMS * k->pad_world : 0;
    L8_CHECK(l8_params_create(ctx, &pc, &n->g));
    L8_CHECK(l8_params_add(n->g, "fc1.weight", 2, w1, &n->w1));
    L8_CHECK(l8_params_add(n->g, "fc1.bias", 1, b1, &n->b1));
    if (k->unused) L8_CHECK(l8_params_add(n->g, "head.unused", 2, ex, &n->extra));
    L8_CHECK(l8_params_add(n->g, "fc2.weight", 2, w2, &n->w2));
    L8_CHECK(l8_params_add(n->g, "fc2.bias", 1, b2, &n->b2));
    L8_CHECK(l8_params_finalize(n->g));
    int ids[5] = { n->w1, n->b1, n->w2, n->b2, n->extra };
    for (int i = 0; i < 5; i++)
        if (ids[i] >= 0) L8_CHECK(l8_params_init_uniform(n->g, ids[i], -0.3f, 0.3f, 77 + (uint64_t)i));
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    gc.autotune = 0;
    L8_CHECK(l8_gemm_handle_create(ctx, &gc, &n->h));
    if (k->mode == L8_LINEAR_FP8) L8_CHECK(l8_recipe_create(ctx, NULL, &n->r));
    /* one FP8 scale per role on every rank: the amax reduced over the group */
    if (n->r && dp) L8_CHECK(l8_recipe_set_reduce(n->r, l8_comm_reduce_amax, dp));
    L8_CHECK(linear(n, k, "fc1", n->w1, n->b1, !k->frozen, &n->l1));
    L8_CHECK(linear(n, k, "fc2", n->w2, n->b2, 1, &n->l2));
    /* SGD: its update scales with the gradient (Adam's would hide a wrong average) */
    l8_sgd_config sc = L8_SGD_CONFIG_INIT;
    sc.lr = 0.5f;
    sc.momentum = 0.9f;
    L8_CHECK(l8_optim_create_sgd(n->g, &sc, &n->o));
    if (dp) {
        l8_ddp_config dc = L8_DDP_CONFIG_INIT;
        dc.bucket_elems = k->bucket;
        dc.overlap = k->overlap;
        dc.strict = k->strict;
        dc.zero1 = k->zero;
        L8_CHECK(l8_ddp_create(n->g, dp, &dc, &n->ddp));
    }
    if (dp && k->zero) {          /* this rank's ranges; the norm over all of them */
        int64_t off[64], num[64];
        int nr = 0;
        L8_CHECK(l8_ddp_shard_ranges(n->ddp, 64, &nr, off, num));
        L8_CHECK(l8_optim_set_shard(n->o, nr, off, num));
        L8_CHECK(l8_optim_set_norm_reduce(n->o, l8_comm_reduce_sum, dp));
    }
    return L8_OK;
}

static l8_status tensor2(l8_ctx *ctx, int64_t r, int64_t c, l8_tensor **t)
{
    int64_t s[2] = { r, c };
    return l8_tensor_empty(ctx, L8_BF16, 2, s, t);
}

/* One step over rows [row0, row0 + rows) of the step's batch, in `micro`
 * micro-batches; the loss is 1/2 |Y - target|^2 averaged over this rank's
 * rows (the reducer averages over ranks: the mean over all ROWS).
 * Host data goes through copies, so any backend works. */
static l8_status net_step(net *n, const ddp_case *k, int step, int row0, int rows)
{
    int micro = k->micro ? k->micro : 1, mr = rows / micro;
    l8_tensor *x = NULL, *y1 = NULL, *y2 = NULL, *dy1 = NULL, *dy2 = NULL;
    uint16_t hx[ROWS * K], hy[ROWS * N];
    l8_stream *cs = l8_ctx_stream(n->ctx, L8_STREAM_COMPUTE);
    l8_status st = tensor2(n->ctx, mr, K, &x);
    if (st == L8_OK) st = tensor2(n->ctx, mr, H, &y1);
    if (st == L8_OK) st = tensor2(n->ctx, mr, N, &y2);
    if (st == L8_OK) st = tensor2(n->ctx, mr, H, &dy1);
    if (st == L8_OK) st = tensor2(n->ctx, mr, N, &dy2);
    if (st == L8_OK) st = l8_linear_begin_step(n->l1);
    if (st == L8_OK) st = l8_linear_begin_step(n->l2);
    for (int m = 0; m < micro && st == L8_OK; m++) {
        int r0 = row0 + m * mr;
        if (n->ddp) st = l8_ddp_begin_micro_batch(n->ddp, m == micro - 1);
        for (int i = 0; i < mr * K; i++)
            hx[i] = l8_bf16_from_f32(gen(k->salt + (uint64_t)step, 0, (size_t)(r0 * K + i)));
        if (st == L8_OK) st = l8_tensor_copy_from_host(x, hx, sizeof hx[0] * (size_t)(mr * K), cs);
        l8_linear_ctx *s1 = NULL, *s2 = NULL;
        if (st == L8_OK && k->zero && n->ddp) st = l8_ddp_wait_param(n->ddp, n->w1, NULL);
        if (st == L8_OK && k->zero && n->ddp) st = l8_ddp_wait_param(n->ddp, n->b1, NULL);
        if (st == L8_OK) st = l8_linear_forward(n->l1, x, y1, &s1, NULL);
        if (st == L8_OK && k->zero && n->ddp) st = l8_ddp_wait_param(n->ddp, n->w2, NULL);
        if (st == L8_OK && k->zero && n->ddp) st = l8_ddp_wait_param(n->ddp, n->b2, NULL);
        if (st == L8_OK) st = l8_linear_forward(n->l2, y1, y2, &s2, NULL);
        if (st == L8_OK) st = l8_tensor_copy_to_host(y2, hy, sizeof hy[0] * (size_t)(mr * N), cs);
        if (st == L8_OK) st = l8_stream_synchronize(cs);
        for (int i = 0; st == L8_OK && i < mr * N; i++) {
            float t = gen(k->salt + (uint64_t)step, 1, (size_t)(r0 * N + i));
            hy[i] = l8_bf16_from_f32((l8_bf16_to_f32(hy[i]) - t) / (float)rows);
        }
        if (st == L8_OK) st = l8_tensor_copy_from_host(dy2, hy, sizeof hy[0] * (size_t)(mr * N), cs);
        if (st == L8_OK) st = l8_linear_backward(n->l2, &s2, dy2, dy1, NULL);
        if (st == L8_OK && k->double_report && m == micro - 1)   /* a weight reported twice */
            st = l8_params_grad_ready(n->g, n->w2, NULL);
        if (st == L8_OK) st = l8_linear_backward(n->l1, &s1, dy1, NULL, NULL);
        l8_linear_ctx_destroy(s1);
        l8_linear_ctx_destroy(s2);
    }
    if (st == L8_OK && n->ddp) st = l8_ddp_finish(n->ddp, NULL);
    if (st == L8_OK) st = l8_optim_step(n->o, NULL, NULL);
    if (st == L8_OK && k->zero && n->ddp) st = l8_ddp_gather_params(n->ddp, NULL, 0);   /* waits per layer */
    if (st == L8_OK && n->r) st = l8_recipe_update(n->r, NULL);
    if (st == L8_OK) st = l8_stream_synchronize(cs);
    l8_tensor_destroy(x), l8_tensor_destroy(y1), l8_tensor_destroy(y2);
    l8_tensor_destroy(dy1), l8_tensor_destroy(dy2);
    return st;
}

/* All master weights (buffer order) after the steps, and the reducer's stats. */
typedef struct out { l8_ddp_stats ds; size_t state_bytes; int64_t n; float w[]; } out;

static l8_status keep_weights(l8t_job *j, net *n)
{
    if (n->ddp) L8_CHECK(l8_ddp_wait_param(n->ddp, -1, NULL));   /* ZeRO-1: the whole buffer */
    int64_t total = l8_params_buffer_numel(n->g);
    out *o = calloc(1, sizeof *o + sizeof(float) * (size_t)total);
    if (!o) return L8_FAIL(L8_ERR_OOM, "test: out of memory");
    o->n = total;
    o->state_bytes = l8_optim_state_bytes(n->o);
    o->ds.size = sizeof o->ds;
    l8_status st = n->ddp ? l8_ddp_get_stats(n->ddp, &o->ds) : L8_OK;
    if (st == L8_OK)
        st = l8_tensor_copy_to_host(l8_params_master_flat(n->g), o->w, sizeof(float) * (size_t)total,
                                    l8_ctx_stream(n->ctx, L8_STREAM_COMPUTE));
    if (st == L8_OK) st = l8_stream_synchronize(l8_ctx_stream(n->ctx, L8_STREAM_COMPUTE));
    if (st == L8_OK) st = l8t_keep(j, o, sizeof *o + sizeof(float) * (size_t)total);
    free(o);
    return st;
}

static l8_status rank_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const ddp_case *k = j->arg;
    net n;
    int rows = ROWS / j->world;
    l8_status st = net_make(ctx, c, k, &n);
    for (int s = 0; s < k->steps && st == L8_OK; s++) st = net_step(&n, k, s, j->rank * rows, rows);
    if (st == L8_OK) st = keep_weights(j, &n);
    net_free(&n);
    return st;
}

/* The single-rank reference: the whole batch, no reducer. */
static out *reference(const ddp_case *k)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    net n;
    ddp_case one = *k;
    L8_CK(net_make(ctx, NULL, &one, &n));
    for (int s = 0; s < k->steps; s++) L8_CK(net_step(&n, &one, s, 0, ROWS));
    l8t_job j = { 0 };
    L8_CK(keep_weights(&j, &n));
    net_free(&n);
    l8_ctx_destroy(ctx);
    return (out *)j.out;
}

static const out *rank_out(l8t_job *jobs, int r) { return (const out *)jobs[r].out; }

START_TEST(test_ddp_overlap_bitwise)
{
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS; t++)
        for (int w = 2; w <= 4; w += 2)
            for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++) {
                ddp_case k = { (l8_linear_mode)mode, 1, 0, 0, 0, 0, 0, 3, 100, l8_test_seed() + (uint64_t)mode, 0, 0 };
                l8t_job a[4], b[4];
                l8t_world_run(w, t, rank_fn, &k, a, 0);
                k.overlap = 0;
                l8t_world_run(w, t, rank_fn, &k, b, 0);
                l8t_world_ok(a, w);
                l8t_world_ok(b, w);
                const out *a0 = rank_out(a, 0);
                ck_assert_msg(a0->ds.buckets >= 3, "%d buckets: the test wants several", a0->ds.buckets);
                ck_assert_msg(a0->ds.launched_in_backward == a0->ds.buckets, "overlap: %d of %d buckets "
                              "launched during backward", a0->ds.launched_in_backward, a0->ds.buckets);
                ck_assert_int_eq(rank_out(b, 0)->ds.launched_in_backward, 0);
                for (int r = 0; r < w; r++) {
                    ck_assert_msg(!memcmp(rank_out(a, r)->w, a0->w, sizeof(float) * (size_t)a0->n),
                                  "transport %d world %d: rank %d's weights differ from rank 0's", t, w, r);
                    ck_assert_msg(!memcmp(rank_out(b, r)->w, a0->w, sizeof(float) * (size_t)a0->n),
                                  "transport %d world %d mode %d rank %d: overlap on and off differ", t,
                                  w, mode, r);
                }
                l8t_world_free(a, w);
                l8t_world_free(b, w);
            }
}
END_TEST

/* ZeRO-1 equals plain data parallel bitwise (the same averaged gradients;
 * SGD without clipping is elementwise), with 1/p of the optimizer state. */
START_TEST(test_ddp_zero1)
{
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS; t++)
        for (int w = 2; w <= 4; w += 2)
            for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++) {
                ddp_case k = { (l8_linear_mode)mode, 1, 0, 0, 0, 0, 0, 3, 300,
                               l8_test_seed() + 5 * (uint64_t)mode, 0, w };
                l8t_job a[4], z[4];
                l8t_world_run(w, t, rank_fn, &k, a, 0);
                k.zero = 1;
                l8t_world_run(w, t, rank_fn, &k, z, 0);
                l8t_world_ok(a, w);
                l8t_world_ok(z, w);
                for (int r = 0; r < w; r++) {
                    const out *pa = rank_out(a, r), *pz = rank_out(z, r);
                    ck_assert_msg(pz->ds.buckets >= 2, "%d buckets", pz->ds.buckets);
                    ck_assert_msg(!memcmp(pa->w, pz->w, sizeof(float) * (size_t)pa->n),
                                  "transport %d world %d mode %d rank %d: ZeRO-1 differs from plain DP",
                                  t, w, mode, r);
                    ck_assert_msg(pz->state_bytes * (size_t)w <= pa->state_bytes + 4096,
                                  "rank %d: ZeRO-1 state %zu bytes, plain %zu (world %d)", r,
                                  pz->state_bytes, pa->state_bytes, w);
                }
                l8t_world_free(a, w);
                l8t_world_free(z, w);
            }
}
END_TEST

/* Within rounding: bf16 partial sums in another order; FP8 adds each rank's
 * quantization of its own rows (e5m2 gradients: a few per cent), so its
 * bound is wider - a wrong average (a sum) is off by far more. */
static void close_to(const out *got, const out *want, const char *what, int fp8)
{
    float abs_tol = fp8 ? 1e-2f : 2e-3f, rel_tol = fp8 ? 5e-2f : 2e-3f;
    ck_assert_int_eq(got->n, want->n);
    for (int64_t i = 0; i < got->n; i++)
        ck_assert_msg(fabsf(got->w[i] - want->w[i]) <= abs_tol + rel_tol * fabsf(want->w[i]),
                      "%s: weight %lld is %.7g, one rank with the whole batch has %.7g (seed %llu)",
                      what, (long long)i, (double)got->w[i], (double)want->w[i],
                      (unsigned long long)l8_test_seed());
}

START_TEST(test_ddp_equals_one_rank)
{
    for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++)
        for (int w = 2; w <= 4; w += 2) {
            ddp_case k = { (l8_linear_mode)mode, 1, 0, 0, 0, 0, 0, 2, 0, l8_test_seed() + 11, 0, 0 };
            out *ref = reference(&k);
            l8t_job jobs[4];
            l8t_world_run(w, L8_COMM_THREADS, rank_fn, &k, jobs, 0);
            l8t_world_ok(jobs, w);
            close_to(rank_out(jobs, 0), ref, mode == L8_LINEAR_FP8 ? "fp8 DP" : "bf16 DP",
                     mode == L8_LINEAR_FP8);
            l8t_world_free(jobs, w);
            /* micro-batches: two halves of each rank's rows, reduced once */
            k.micro = 2;
            l8t_world_run(w, L8_COMM_THREADS, rank_fn, &k, jobs, 0);
            l8t_world_ok(jobs, w);
            close_to(rank_out(jobs, 0), ref, "DP with 2 micro-batches", mode == L8_LINEAR_FP8);
            ck_assert_int_eq(rank_out(jobs, 0)->ds.launched_in_backward, rank_out(jobs, 0)->ds.buckets);
            l8t_world_free(jobs, w);
            free(ref);
        }
}
END_TEST

/* An unused parameter: poison its gradient, train; its main_grad must end
 * zero and every rank agrees. */
static l8_status unused_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const ddp_case *k = j->arg;
    net n;
    l8_status st = net_make(ctx, c, k, &n);
    float poison[64];
    for (int i = 0; i < 64; i++) poison[i] = 1e6f;
    int victim = k->frozen ? n.w1 : n.extra;
    int64_t cnt = l8_params_numel(n.g, victim);
    float *g = calloc((size_t)cnt, sizeof *g);
    if (!g) st = L8_FAIL(L8_ERR_OOM, "test: out of memory");
    if (st == L8_OK && cnt <= 64) st = l8_params_set_grad_host(n.g, victim, poison, (size_t)cnt);
    if (st == L8_OK) st = net_step(&n, k, 0, j->rank * (ROWS / j->world), ROWS / j->world);
    if (st == L8_OK) st = l8_params_get_grad_host(n.g, victim, g, (size_t)cnt);
    for (int64_t i = 0; st == L8_OK && i < cnt; i++)
        if (g[i] != 0.0f)
            st = L8_FAIL(L8_ERR_INTERNAL, "%s's gradient is %g after the step, not 0",
                         l8_params_name(n.g, victim), (double)g[i]);
    if (st == L8_OK) st = keep_weights(j, &n);
    free(g);
    net_free(&n);
    return st;
}

START_TEST(test_ddp_seed000_scenarios)
{
    l8t_job jobs[2];
    /* an unused parameter: zeroed, the step completes, no hang */
    ddp_case k = { L8_LINEAR_BF16, 1, 0, 0, 1, 0, 0, 1, 100, l8_test_seed(), 0, 0 };
    l8t_world_run(2, L8_COMM_THREADS, unused_fn, &k, jobs, 5000);
    l8t_world_ok(jobs, 2);
    ck_assert_int_eq(rank_out(jobs, 0)->ds.zeroed, 1);
    ck_assert(!memcmp(rank_out(jobs, 0)->w, rank_out(jobs, 1)->w, sizeof(float) * (size_t)rank_out(jobs, 0)->n));
    l8t_world_free(jobs, 2);
    /* a frozen layer: fc1 reports nothing; its gradients are zeroed */
    k.unused = 0, k.frozen = 1;
    l8t_world_run(2, L8_COMM_THREADS, unused_fn, &k, jobs, 5000);
    l8t_world_ok(jobs, 2);
    ck_assert_int_eq(rank_out(jobs, 0)->ds.zeroed, 2);
    l8t_world_free(jobs, 2);
    /* strict: a parameter that never reports is an error naming it */
    k.frozen = 0, k.unused = 1, k.strict = 1;
    l8t_world_run(2, L8_COMM_THREADS, rank_fn, &k, jobs, 5000);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(jobs[r].st == L8_ERR_STATE, "rank %d: %s", r, jobs[r].err);
        ck_assert_msg(strstr(jobs[r].err, "head.unused"), "rank %d: %s", r, jobs[r].err);
    }
    l8t_world_free(jobs, 2);
    /* a double report in one micro-batch is an error naming the parameter */
    k.unused = 0, k.strict = 0, k.double_report = 1;
    l8t_world_run(2, L8_COMM_THREADS, rank_fn, &k, jobs, 5000);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(jobs[r].st == L8_ERR_STATE || jobs[r].st == L8_ERR_COMM, "rank %d: %s", r,
                      jobs[r].err);
        ck_assert_msg(strstr(jobs[r].err, "fc2.weight") || strstr(jobs[r].err, "failed earlier") ||
                      strstr(jobs[r].err, "rank"), "rank %d: %s", r, jobs[r].err);
    }
    ck_assert_msg(strstr(jobs[0].err, "fc2.weight reported twice"), "%s", jobs[0].err);
    l8t_world_free(jobs, 2);
}
END_TEST

/* A group of one parameter, "a" of 10 elements (its id in *a); not finalized. */
static l8_params *small_group(l8_ctx *ctx, int *a)
{
    l8_params *g = NULL;
    int64_t sh[1] = { 10 };
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "a", 1, sh, a));
    return g;
}

START_TEST(test_ddp_errors)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_THREADS);
    int a;
    l8_params *g = small_group(ctx, &a);
    l8_ddp *d = NULL;
    L8_CK_ST(l8_ddp_create(g, c, NULL, &d), L8_ERR_INVALID_ARG);          /* not finalized */
    L8_CK(l8_params_finalize(g));
    l8_ddp_config dc = L8_DDP_CONFIG_INIT;
    dc.overlap = 2;
    L8_CK_ST(l8_ddp_create(g, c, &dc, &d), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ddp_create(NULL, c, NULL, &d), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(d);
    L8_CK(l8_ddp_create(g, c, NULL, &d));
    L8_CK_ST(l8_ddp_mark_unused(d, 5), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ddp_begin_micro_batch(d, 2), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_grad_ready(g, 7, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_params_grad_ready(g, a, NULL));
    L8_CK_ST(l8_ddp_mark_unused(d, a), L8_ERR_STATE);                     /* reported already */
    L8_CK(l8_ddp_finish(d, NULL));
    int64_t first, n;
    L8_CK(l8_ddp_bucket(d, 0, &first, &n));
    ck_assert_int_eq(first, 0);
    ck_assert_int_eq(n, l8_params_buffer_numel(g));
    L8_CK_ST(l8_ddp_bucket(d, 1, &first, &n), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ddp_wait_param(d, 9, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_ddp_wait_param(d, -1, NULL));                               /* not zero1: nothing */
    L8_CK_ST(l8_ddp_gather_params(d, NULL, 1), L8_ERR_STATE);
    int nr = 0;
    int64_t off[2], num[2];
    L8_CK_ST(l8_ddp_shard_ranges(d, 2, &nr, off, num), L8_ERR_STATE);
    l8_ddp_destroy(d);
    l8_ddp_destroy(NULL);
    l8_params_destroy(g);
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

static l8_status count_report(void *arg, int id, l8_event *ev)
{
    (void)id, (void)ev;
    ++*(int *)arg;
    return L8_OK;
}

/* A group has one grad-ready consumer: a second reducer is refused (it would
 * have replaced the first, whose reports would then be lost), and a reducer
 * destroyed after the user replaced its callback leaves the user's alone.
 * Teardown in the wrong order (the group before its reducer, optimizers and
 * the layers that report into it) leaves them inert, with an error on each
 * call that needs the group and no use of freed memory (the sanitizer build
 * and valgrind run this too). */
START_TEST(test_ddp_group_destroyed_first)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_THREADS);
    int a;
    l8_params *g = small_group(ctx, &a);
    L8_CK(l8_params_finalize(g));

    l8_ddp *d = NULL, *d2 = NULL;
    L8_CK(l8_ddp_create(g, c, NULL, &d));
    L8_CK_ST(l8_ddp_create(g, c, NULL, &d2), L8_ERR_STATE);
    ck_assert_ptr_null(d2);
    ck_assert_msg(strstr(l8_last_error_string(), "already has a grad-ready consumer"), "%s",
                  l8_last_error_string());
    int reports = 0;                      /* the user takes the callback over, then d goes */
    L8_CK(l8_params_set_grad_ready_cb(g, count_report, &reports));
    l8_ddp_destroy(d);
    L8_CK(l8_params_grad_ready(g, a, NULL));
    ck_assert_int_eq(reports, 1);         /* still the user's */
    L8_CK_ST(l8_ddp_create(g, c, NULL, &d), L8_ERR_STATE);
    L8_CK(l8_params_set_grad_ready_cb(g, NULL, NULL));

    /* the wrong order: a reducer and three optimizers (one destroyed in between) */
    l8_optim *o[3] = { NULL, NULL, NULL };
    L8_CK(l8_ddp_create(g, c, NULL, &d));
    for (int k = 0; k < 3; k++)
        L8_CK(l8_optim_create_adamw(g, NULL, &o[k]));
    l8_optim_destroy(o[1]);
    o[1] = NULL;
    L8_CK(l8_ddp_begin_micro_batch(d, 1));
    L8_CK(l8_params_grad_ready(g, a, NULL));
    L8_CK(l8_ddp_finish(d, NULL));
    L8_CK(l8_optim_step(o[0], NULL, NULL));
    l8_params_destroy(g);

    L8_CK_ST(l8_ddp_begin_micro_batch(d, 1), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "group was destroyed before this reducer"), "%s",
                  l8_last_error_string());
    L8_CK_ST(l8_ddp_mark_unused(d, a), L8_ERR_STATE);
    L8_CK_ST(l8_ddp_finish(d, NULL), L8_ERR_STATE);
    L8_CK_ST(l8_ddp_gather_params(d, NULL, 1), L8_ERR_STATE);
    L8_CK_ST(l8_ddp_wait_param(d, -1, NULL), L8_ERR_STATE);
    l8_ddp_stats ds = { .size = sizeof ds };
    L8_CK(l8_ddp_get_stats(d, &ds));      /* what it did before stays readable */
    ck_assert_int_eq(ds.steps, 1);
    int64_t first, n;
    L8_CK(l8_ddp_bucket(d, 0, &first, &n));
    for (int k = 0; k < 3; k += 2) {
        L8_CK_ST(l8_optim_step(o[k], NULL, NULL), L8_ERR_STATE);
        ck_assert_msg(strstr(l8_last_error_string(), "group was destroyed before this optimizer"),
                      "%s", l8_last_error_string());
        l8_tensor *v = NULL;
        L8_CK_ST(l8_optim_state_view(o[k], 0, a, &v), L8_ERR_STATE);
        ck_assert_ptr_null(v);
    }
    l8_optim_destroy(o[2]);
    l8_ddp_destroy(d);
    l8_optim_destroy(o[0]);

    /* layers that report into the group are told too: a net's group destroyed first */
    ddp_case k = { .mode = L8_LINEAR_BF16, .salt = 5 };
    net nt;
    L8_CK(net_make(ctx, NULL, &k, &nt));
    L8_CK(net_step(&nt, &k, 0, 0, ROWS));
    l8_params_destroy(nt.g);
    nt.g = NULL;
    L8_CK_ST(net_step(&nt, &k, 1, 0, ROWS), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "fc2 reports to a parameter group that was "
                         "destroyed"), "%s", l8_last_error_string());
    net_free(&nt);
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

/* The communicator destroyed before what uses it: the reducer over it, the
 * recipe's amax hook and the optimizer's norm hook over it are told; each
 * call that would use it fails, and a hook set anew (here: none) works. */
START_TEST(test_ddp_comm_destroyed_first)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_THREADS);
    ddp_case k = { .mode = L8_LINEAR_FP8, .zero = 1, .salt = 9 };
    net nt;
    L8_CK(net_make(ctx, c, &k, &nt));     /* ZeRO-1: the norm hook over c too */
    L8_CK(net_step(&nt, &k, 0, 0, ROWS));
    l8_comm_destroy(c);
    L8_CK_ST(l8_ddp_begin_micro_batch(nt.ddp, 1), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "the communicator was destroyed before this "
                         "reducer"), "%s", l8_last_error_string());
    L8_CK_ST(l8_ddp_finish(nt.ddp, NULL), L8_ERR_STATE);
    L8_CK_ST(l8_ddp_gather_params(nt.ddp, NULL, 1), L8_ERR_STATE);
    L8_CK_ST(l8_params_grad_ready(nt.g, nt.w1, NULL), L8_ERR_STATE);   /* the reducer's hook */
    L8_CK_ST(l8_recipe_update(nt.r, NULL), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "amax reduction"), "%s",
                  l8_last_error_string());
    L8_CK_ST(l8_optim_step(nt.o, NULL, NULL), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error_string(), "norm reduction"), "%s", l8_last_error_string());
    L8_CK(l8_recipe_set_reduce(nt.r, NULL, NULL));
    L8_CK(l8_recipe_update(nt.r, NULL));
    L8_CK(l8_optim_set_norm_reduce(nt.o, NULL, NULL));
    L8_CK(l8_optim_step(nt.o, NULL, NULL));
    net_free(&nt);
    l8t_ctx_finish(ctx);
}
END_TEST

/* GPU, world size 1 over NCCL: the same network, several buckets; the
 * buckets launch during backward (before finish), the step completes and
 * equals the run without a reducer bitwise (an average over one rank). */
START_TEST(test_gpu_ddp_world1)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0);
    l8_comm *c = l8t_comm_one(ctx, L8_COMM_NCCL);
    for (int zero = 0; zero <= 1; zero++)
    for (int mode = L8_LINEAR_FP8; mode <= L8_LINEAR_BF16; mode++) {
        /* every parameter reports (an unused one would hold its bucket and the
         * later ones until finish: buckets launch in order); zero: ZeRO-1 with
         * the parameter gathers waited for layer by layer */
        ddp_case k = { (l8_linear_mode)mode, 1, 0, 0, 0, 0, 0, 3, 100, l8_test_seed(), zero, 1 };
        net a, b;
        L8_CK(net_make(ctx, c, &k, &a));
        L8_CK(net_make(ctx, NULL, &k, &b));
        for (int s = 0; s < k.steps; s++) {
            L8_CK(net_step(&a, &k, s, 0, ROWS));
            L8_CK(net_step(&b, &k, s, 0, ROWS));
        }
        l8_ddp_stats ds = { .size = sizeof ds };
        L8_CK(l8_ddp_get_stats(a.ddp, &ds));
        ck_assert_msg(ds.buckets >= 3 && ds.launched_in_backward == ds.buckets,
                      "%d buckets, %d launched during backward", ds.buckets, ds.launched_in_backward);
        l8t_job ja = { 0 }, jb = { 0 };
        L8_CK(keep_weights(&ja, &a));
        L8_CK(keep_weights(&jb, &b));
        const out *oa = (const out *)ja.out, *ob = (const out *)jb.out;
        ck_assert_msg(!memcmp(oa->w, ob->w, sizeof(float) * (size_t)oa->n),
                      "mode %d zero1 %d: DP at world 1 differs from no reducer", mode, zero);
        free(ja.out);
        free(jb.out);
        net_free(&a);
        net_free(&b);
    }
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

Suite *l8_ddp_suite(void)
{
    Suite *s = suite_create("ddp");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_ddp_errors);
    tcase_add_test(tc, test_ddp_group_destroyed_first);
    tcase_add_test(tc, test_ddp_comm_destroyed_first);
    tcase_add_test(tc, test_ddp_overlap_bitwise);
    tcase_add_test(tc, test_ddp_equals_one_rank);
    tcase_add_test(tc, test_ddp_seed000_scenarios);
    tcase_add_test(tc, test_ddp_zero1);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 300);
    tcase_add_test(tg, test_gpu_ddp_world1);
    suite_add_tcase(s, tg);
    return s;
}
