/* bench_ddp.c - `lean8-bench ddp`: the data-parallel step and how much of
 * its communication overlap hides.
 *
 * An 8-layer FP8 MLP (Linear + GELU), D = 4096 wide, T = 16384 tokens per
 * rank on a GPU (D = 256, T = 512 on the host backend, for information):
 * one step = forward, backward, the gradients' reduction, AdamW. Timed in
 * the same run, steps interleaved in blocks:
 *   none     no reducer (the layers report, nobody reduces)
 *   after    the reducer with overlap = 0 (every bucket at finish)
 *   overlap  the reducer with overlap = 1 (buckets during backward)
 * exposed communication = (overlap - none) / (after - none). Run under a
 * launcher for several ranks (lean8-run -n 2 lean8-bench ddp: one GPU per
 * rank, NCCL); alone it runs at world size 1, where there is nothing to
 * communicate and "overlap - none" is the reducer's own overhead (target
 * <= 2% of the step). Buckets: the default (40M elements) and one layer per
 * bucket.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"

enum { LAYERS = 8 };

typedef struct net {
    l8_ctx *ctx;
    l8_params *g;
    l8_gemm_handle *h;
    l8_recipe *r;
    l8_optim *o;
    l8_linear *lin[LAYERS];
    l8_tensor *act[LAYERS + 1], *pre[LAYERS], *grad[LAYERS + 1];
    int64_t D, T;
} net;

static void net_free(net *n)
{
    for (int i = 0; i < LAYERS; i++) {
        l8_linear_destroy(n->lin[i]);
        l8_tensor_destroy(n->pre[i]);
    }
    for (int i = 0; i <= LAYERS; i++) {
        l8_tensor_destroy(n->act[i]);
        l8_tensor_destroy(n->grad[i]);
    }
    l8_optim_destroy(n->o);
    l8_recipe_destroy(n->r);
    l8_gemm_handle_destroy(n->h);
    l8_params_destroy(n->g);
}

static l8_status fill(l8_tensor *t, l8_stream *s)
{
    void *p;
    L8_CHECK(l8_tensor_data(t, &p));
    return l8_memset_d8(s, p, 0x3c, l8_tensor_nbytes(t));     /* bf16 0x3c3c ~ 0.0115 */
}

static l8_status net_make(l8_ctx *ctx, int64_t D, int64_t T, l8_comm *world, net *n)
{
    memset(n, 0, sizeof *n);
    n->ctx = ctx;
    n->D = D;
    n->T = T;
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    int w[LAYERS], b[LAYERS];
    L8_CHECK(l8_params_create(ctx, NULL, &n->g));
    for (int i = 0; i < LAYERS; i++) {
        char name[32];
        int64_t ws[2] = { D, D }, bs[1] = { D };
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        L8_CHECK(l8_params_add(n->g, name, 2, ws, &w[i]));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        L8_CHECK(l8_params_add(n->g, name, 1, bs, &b[i]));
    }
    L8_CHECK(l8_params_finalize(n->g));
    for (int i = 0; i < LAYERS; i++) {
        L8_CHECK(l8_params_init_kaiming_uniform(n->g, w[i], 2.2360680f, 1 + (uint64_t)i));
        L8_CHECK(l8_params_init_uniform(n->g, b[i], -0.01f, 0.01f, 100 + (uint64_t)i));
    }
    L8_CHECK(l8_gemm_handle_create(ctx, NULL, &n->h));
    L8_CHECK(l8_recipe_create(ctx, NULL, &n->r));
    if (world) L8_CHECK(l8_recipe_set_reduce(n->r, l8_comm_reduce_amax, world));
    l8_adamw_config ac = L8_ADAMW_CONFIG_INIT;
    L8_CHECK(l8_optim_create_adamw(n->g, &ac, &n->o));
    for (int i = 0; i < LAYERS; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        l8_linear_config c = L8_LINEAR_CONFIG_INIT;
        c.name = name;
        c.gemm = n->h;
        c.recipe = n->r;
        c.weight = l8_params_master(n->g, w[i]);
        c.weight_grad = l8_params_main_grad(n->g, w[i]);
        c.bias = l8_params_master(n->g, b[i]);
        c.bias_grad = l8_params_main_grad(n->g, b[i]);
        c.weight_id = w[i];
        c.bias_id = b[i];
        c.grad_ready = l8_params_grad_ready;
        c.grad_ready_arg = n->g;
        L8_CHECK(l8_linear_create(ctx, &c, &n->lin[i]));
    }
    int64_t sh[2] = { T, D };
    for (int i = 0; i <= LAYERS; i++) {
        L8_CHECK(l8_tensor_empty(ctx, L8_BF16, 2, sh, &n->act[i]));
        L8_CHECK(l8_tensor_empty(ctx, L8_BF16, 2, sh, &n->grad[i]));
        if (i < LAYERS) L8_CHECK(l8_tensor_empty(ctx, L8_BF16, 2, sh, &n->pre[i]));
    }
    L8_CHECK(fill(n->act[0], s));
    return fill(n->grad[LAYERS], s);           /* a fixed output gradient */
}

/* One step on the compute stream: forward, backward, reduction, AdamW. */
static l8_status net_step(net *n, l8_ddp *d)
{
    l8_stream *s = l8_ctx_stream(n->ctx, L8_STREAM_COMPUTE);
    l8_linear_ctx *sv[LAYERS] = { 0 };
    l8_status st = fill(n->grad[LAYERS], s);    /* the output gradient, fresh each step */
    for (int i = 0; i < LAYERS && st == L8_OK; i++) st = l8_linear_begin_step(n->lin[i]);
    for (int i = 0; i < LAYERS && st == L8_OK; i++) {
        st = l8_linear_forward(n->lin[i], n->act[i], n->pre[i], &sv[i], s);
        if (st == L8_OK) st = l8_gelu(n->pre[i], n->act[i + 1], s);
    }
    if (st == L8_OK && d) st = l8_ddp_begin_micro_batch(d, 1);
    for (int i = LAYERS - 1; i >= 0 && st == L8_OK; i--) {
        st = l8_gelu_backward(n->pre[i], n->grad[i + 1], n->grad[i + 1], s);
        if (st == L8_OK) st = l8_linear_backward(n->lin[i], &sv[i], n->grad[i + 1], i ? n->grad[i] : NULL, s);
    }
    if (st == L8_OK && d) st = l8_ddp_finish(d, s);
    if (st == L8_OK) st = l8_optim_step(n->o, s, NULL);
    if (st == L8_OK) st = l8_recipe_update(n->r, s);
    for (int i = 0; i < LAYERS; i++) l8_linear_ctx_destroy(sv[i]);
    return st;
}

enum { M_NONE, M_AFTER, M_OVERLAP, NMODES };
static const char *const k_mode[NMODES] = { "none", "after", "overlap" };

/* Median ms per step of each mode, blocks of `iters` steps interleaved. */
static l8_status time_modes(net *n, l8_comm *dp, int64_t bucket, int reps, int iters,
                            double ms[NMODES])
{
    int cuda = l8_ctx_backend(n->ctx) == L8_BACKEND_CUDA;
    l8_stream *s = l8_ctx_stream(n->ctx, L8_STREAM_COMPUTE);
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)(reps * NMODES), sizeof *t);
    l8_status st = t ? L8_OK : L8_FAIL(L8_ERR_OOM, "bench: out of memory");
    if (st == L8_OK) st = l8_event_create(n->ctx, 1, &e0);
    if (st == L8_OK) st = l8_event_create(n->ctx, 1, &e1);
    for (int r = -1; r < reps && st == L8_OK; r++)      /* r = -1: warm-up */
        for (int m = 0; m < NMODES && st == L8_OK; m++) {
            l8_ddp *cur = NULL;
            if (m != M_NONE) {                          /* install this mode's reducer */
                l8_ddp_config c = L8_DDP_CONFIG_INIT;
                c.bucket_elems = bucket;
                c.overlap = m == M_OVERLAP;
                st = l8_ddp_create(n->g, dp, &c, &cur);
            }
            double t0 = bench_now_ns();
            float f = 0;
            if (st == L8_OK) st = l8_event_record(e0, s);
            for (int i = 0; i < (r < 0 ? 2 : iters) && st == L8_OK; i++) st = net_step(n, cur);
            if (st == L8_OK) st = l8_event_record(e1, s);
            if (st == L8_OK) st = l8_event_synchronize(e1);
            if (st == L8_OK && cuda) st = l8_event_elapsed_ms(e0, e1, &f);
            if (st == L8_OK && r >= 0) t[m * reps + r] = (cuda ? (double)f : (bench_now_ns() - t0) * 1e-6) / iters;
            l8_ddp_destroy(cur);                        /* the group's consumer again: none */
        }
    for (int m = 0; m < NMODES && st == L8_OK; m++) ms[m] = bench_median(t + m * reps, (size_t)reps);
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    return st;
}

int bench_ddp(const bench_opts *o)
{
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = o->device;
    l8_ctx *ctx = NULL;
    l8_comm *c = NULL;
    net n = { 0 };
    bench_json j = { 0 };
    int rc = 1;
    if (l8_ctx_create(&cc, &ctx) || l8_comm_init_env(ctx, NULL, &c)) goto fail;
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA, rank = l8_comm_rank(c), w = l8_comm_size(c);
    int64_t D = cuda ? 4096 : 256, T = cuda ? 16384 : 512;
    if (net_make(ctx, D, T, w > 1 ? c : NULL, &n) != L8_OK) goto fail;
    if (rank == 0 && bench_json_open(&j, o->json, "ddp", l8_ctx_device_name(ctx)) != 0) goto fail;
    if (rank == 0) {
        printf("== ddp: %d x (FP8 Linear %lld -> %lld + GELU), %lld tokens per rank, AdamW; %d "
               "rank(s) on %s (%s)\n", LAYERS, (long long)D, (long long)D, (long long)T, w,
               l8_ctx_device_name(ctx), cuda ? "NCCL" : "host transport");
        if (!cuda) printf("  host backend: a small network, for information\n");
        printf("  %-14s %8s %9s %9s %9s %9s %9s\n", "buckets", "count", "none ms", "after ms",
               "overlap", "exposed", "overhead");
    }
    const int64_t buckets[2] = { 0, D * D };            /* the default; one layer a bucket */
    for (int bi = 0; bi < 2; bi++) {
        double ms[NMODES] = { 0 };
        l8_ddp *probe = NULL;
        l8_ddp_config pc = L8_DDP_CONFIG_INIT;
        pc.bucket_elems = buckets[bi];
        l8_ddp_stats ds = { .size = sizeof ds };
        if (l8_ddp_create(n.g, c, &pc, &probe) || l8_ddp_get_stats(probe, &ds)) goto fail;
        l8_ddp_destroy(probe);
        if (time_modes(&n, c, buckets[bi], cuda ? (o->quick ? 3 : 7) : 2, cuda ? 5 : 1, ms) != L8_OK)
            goto fail;
        double comm = ms[M_AFTER] - ms[M_NONE], exposed = ms[M_OVERLAP] - ms[M_NONE];
        double overhead = exposed / ms[M_NONE];
        if (rank == 0) {
            char exp_s[16] = "n/a";
            if (w > 1 && comm > 0) snprintf(exp_s, sizeof exp_s, "%.1f%%", 100.0 * exposed / comm);
            printf("  %-14s %8d %9.3f %9.3f %9.3f %9s %8.2f%%\n",
                   bi ? "one layer" : "default 40M", ds.buckets, ms[M_NONE], ms[M_AFTER],
                   ms[M_OVERLAP], exp_s, 100.0 * overhead);
            char key[96];
            for (int m = 0; m < NMODES; m++) {
                snprintf(key, sizeof key, "%s_w%d_%s_ms", bi ? "layer" : "default", w, k_mode[m]);
                bench_json_num(&j, key, ms[m]);
            }
            snprintf(key, sizeof key, "%s_w%d_overhead_ratio", bi ? "layer" : "default", w);
            bench_json_num(&j, key, ms[M_OVERLAP] / ms[M_NONE]);
            if (w > 1 && comm > 0) {
                snprintf(key, sizeof key, "%s_w%d_exposed_fraction", bi ? "layer" : "default", w);
                bench_json_num(&j, key, exposed / comm);
            }
        }
    }
    if (rank == 0) {
        if (w == 1)
            printf("  world size 1: nothing to communicate; 'overhead' = (overlap - none) / none is "
                   "the reducer's own cost (target <= 2%%). Exposed communication needs >= 2 GPUs.\n");
        else
            printf("  exposed = (overlap - none) / (after - none); target <= 10%%\n");
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "lean8-bench ddp: %s\n", l8_last_error_string());
    bench_json_close(&j);
    net_free(&n);
    l8_comm_destroy(c);
    l8_ctx_destroy(ctx);
    return rc;
}
