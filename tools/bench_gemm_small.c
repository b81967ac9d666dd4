/* bench_gemm_small.c - `lean8-bench gemmsmall`: the GEMMs of lean8-train's
 * FP8 step at its two models' shapes, three ways side by side:
 *   lt     cuBLASLt's FP8 GEMM (an l8_gemm handle with l8_gemm_config.small 0)
 *   small  lean8's small FP8 kernel (a handle with small 1:
 *          ptx/gemm_small.ptx.in, ops/gemm.h)
 *   bf16   cuBLASLt's bf16 GEMM of the same shape and D dtype (what the
 *          step's bf16 mode runs)
 * Row-major D[M,N] = A[M,K] . B[N,K]^T (l8_gemm's FP8 TN form), random data;
 * the heads' dgrads are bf16 with K = 16 (10 classes padded), D = dY[M,K] .
 * W[K,N] (trans_b 0):
 * lt and bf16 both cuBLASLt's bf16 GEMM there, small the kernel's bf16 entry.
 * Each variant is one CUDA graph of ITERS back-to-back calls (as in a
 * training step's graph: no host launch cost between them); the rounds
 * launch the three graphs in turn, timed by events, and the median round
 * gives the us per call. JSON keys: gs_<M>x<N>x<K>_<A><B>_<D>_{lt,small,bf16}_us
 * and ..._lt_over_small (cuBLASLt's FP8 time / the small kernel's: > 1 when
 * the small kernel is faster), ..._bf16_over_small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/gemm.h"
#include "runtime/fp8.h"
#include "runtime/graph.h"

#define ITERS 20

typedef struct gshape {
    const char *what;
    int64_t m, n, k;
    l8_dtype a, b, d;
    int nn;                       /* B stored (K, N): trans_b 0 */
} gshape;

/* 784-512-512-10 at batch 256, then the default 784-256-128-10 at batch 128:
 * the FP8 step's fprops (without their epilogues), dgrads (dY E5M2) and
 * wgrads (into f32 main_grad) */
static const gshape k_shapes[] = {
    { "512 L1 fprop", 256, 512, 784, L8_E4M3, L8_E4M3, L8_BF16, 0 },
    { "512 L2 fprop", 256, 512, 512, L8_E4M3, L8_E4M3, L8_BF16, 0 },
    { "512 L2 dgrad", 256, 512, 512, L8_E5M2, L8_E4M3, L8_BF16, 0 },
    { "512 L2 wgrad", 512, 512, 256, L8_E5M2, L8_E4M3, L8_F32, 0 },
    { "512 L1 wgrad", 512, 784, 256, L8_E5M2, L8_E4M3, L8_F32, 0 },
    { "def L1 fprop", 128, 256, 784, L8_E4M3, L8_E4M3, L8_BF16, 0 },
    { "def L2 fprop", 128, 128, 256, L8_E4M3, L8_E4M3, L8_BF16, 0 },
    { "def L2 dgrad", 128, 256, 128, L8_E5M2, L8_E4M3, L8_BF16, 0 },
    { "def L2 wgrad", 128, 256, 128, L8_E5M2, L8_E4M3, L8_F32, 0 },
    { "def L1 wgrad", 256, 784, 128, L8_E5M2, L8_E4M3, L8_F32, 0 },
    { "512 head dgr", 256, 512, 16, L8_BF16, L8_BF16, L8_BF16, 1 },
    { "def head dgr", 128, 128, 16, L8_BF16, L8_BF16, L8_BF16, 1 },
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

typedef struct calls {
    l8_gemm_handle *h;
    l8_gemm_desc g;
} calls;

static l8_status run_calls(void *arg, l8_stream *s)
{
    calls *c = arg;
    for (int i = 0; i < ITERS; i++)
        L8_CHECK(l8_gemm(c->h, &c->g, s));
    return L8_OK;
}

/* A rows x cols tensor of dt with random values in [-2, 2) (FP8: encoded on
 * the host). */
static l8_tensor *operand(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, uint64_t seed,
                          l8_status *st)
{
    l8_tensor *t = bench_mk(ctx, dt, rows, cols, st);
    if (*st != L8_OK) return t;
    if (!l8_dtype_is_fp8(dt)) {
        *st = bench_fill(ctx, t, 2.0f, seed);
        return t;
    }
    size_t n = (size_t)(rows * cols);
    uint8_t *h = malloc(n);
    if (!h) { *st = L8_FAIL(L8_ERR_OOM, "gemmsmall: host buffer"); return t; }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        h[i] = l8_fp8_from_f32(2.0f * ((float)(x >> 40) / 8388608.0f - 1.0f), dt);
    }
    *st = l8_tensor_copy_from_host(t, h, n, NULL);
    free(h);
    return t;
}

static const char *dt_name(l8_dtype dt)
{
    return dt == L8_E4M3 ? "e4m3" : dt == L8_E5M2 ? "e5m2" : dt == L8_BF16 ? "bf16" : "f32";
}

/* us per call of each variant for one shape (median of rounds). */
static l8_status one_shape(l8_ctx *ctx, l8_gemm_handle *h[3], const gshape *sh, int rounds,
                           double us[3])
{
    l8_status st = L8_OK;
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_tensor *a8 = operand(ctx, sh->a, sh->m, sh->k, 1, &st);
    const int64_t br = sh->nn ? sh->k : sh->n, bc = sh->nn ? sh->n : sh->k;
    l8_tensor *b8 = operand(ctx, sh->b, br, bc, 2, &st);
    l8_tensor *a16 = operand(ctx, L8_BF16, sh->m, sh->k, 3, &st);
    l8_tensor *b16 = operand(ctx, L8_BF16, br, bc, 4, &st);
    l8_tensor *d[3] = { bench_mk(ctx, sh->d, sh->m, sh->n, &st),
                        bench_mk(ctx, sh->d, sh->m, sh->n, &st),
                        bench_mk(ctx, sh->d, sh->m, sh->n, &st) };
    calls c[3];
    l8_graph *g[3] = { NULL, NULL, NULL };
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)rounds * 3, sizeof *t);
    if (!t && st == L8_OK) st = L8_FAIL(L8_ERR_OOM, "gemmsmall: times");
    for (int v = 0; v < 3 && st == L8_OK; v++) {
        l8_gemm_desc gd = L8_GEMM_DESC_INIT;
        gd.a = v == 2 ? a16 : a8;
        gd.b = v == 2 ? b16 : b8;
        gd.d = d[v];
        gd.trans_b = !sh->nn;
        c[v].h = h[v];
        c[v].g = gd;
        st = l8_graph_create(ctx, s, &g[v]);
        if (st == L8_OK) st = l8_graph_warmup(g[v], run_calls, &c[v]);
        if (st == L8_OK) st = l8_graph_capture(g[v], run_calls, &c[v]);
    }
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e0);
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e1);
    for (int r = -1; r < rounds && st == L8_OK; r++) {   /* round -1: warm-up */
        for (int v = 0; v < 3 && st == L8_OK; v++) {
            float ms = 0;
            st = l8_event_record(e0, s);
            if (st == L8_OK) st = l8_graph_launch(g[v]);
            if (st == L8_OK) st = l8_event_record(e1, s);
            if (st == L8_OK) st = l8_event_synchronize(e1);
            if (st == L8_OK) st = l8_event_elapsed_ms(e0, e1, &ms);
            if (st == L8_OK && r >= 0) t[v * rounds + r] = ms * 1e3 / ITERS;
        }
    }
    for (int v = 0; v < 3 && st == L8_OK; v++)
        us[v] = bench_median(t + v * rounds, (size_t)rounds);
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    for (int v = 0; v < 3; v++) {
        l8_graph_destroy(g[v]);
        l8_tensor_destroy(d[v]);
    }
    l8_tensor_destroy(a8);
    l8_tensor_destroy(b8);
    l8_tensor_destroy(a16);
    l8_tensor_destroy(b16);
    return st;
}

int bench_gemm_small(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    cfg.device = o->device;
    l8_ctx *ctx = NULL;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK) {
        fprintf(stderr, "gemmsmall: %s\n", l8_last_error_string());
        return 1;
    }
    if (l8_ctx_backend(ctx) != L8_BACKEND_CUDA) {
        printf("== gemmsmall: skipped: needs a CUDA device\n");
        l8_ctx_destroy(ctx);
        return 0;
    }
    l8_gemm_handle *h[3] = { NULL, NULL, NULL };
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    gc.autotune = 0;
    bench_json j = { 0 };
    int rc = 1, rounds = o->quick ? 5 : 21;
    gc.small = 0;
    l8_status st = l8_gemm_handle_create(ctx, &gc, &h[0]);
    if (st == L8_OK) st = l8_gemm_handle_create(ctx, &gc, &h[2]);
    gc.small = 1;
    if (st == L8_OK) st = l8_gemm_handle_create(ctx, &gc, &h[1]);
    if (st != L8_OK || bench_json_open(&j, o->json, "gemmsmall", l8_ctx_device_name(ctx)))
        goto out;
    printf("== gemmsmall: lean8-train's FP8 step's GEMMs, us per call in a CUDA graph of %d"
           " (%s)\n",
           ITERS, l8_ctx_device_name(ctx));
    printf("  %-13s %-16s %-9s %9s %9s %9s %9s %9s\n", "GEMM", "M x N x K", "types",
           "lt FP8", "small", "lt bf16", "lt/small", "bf16/sm");
    rc = 0;
    for (size_t i = 0; i < NSHAPES && rc == 0; i++) {
        const gshape *sh = &k_shapes[i];
        double us[3] = { 0, 0, 0 };
        if (one_shape(ctx, h, sh, rounds, us) != L8_OK) { rc = 1; break; }
        char key[96], types[24], shape[32];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)sh->m, (long long)sh->n,
                 (long long)sh->k);
        snprintf(types, sizeof types, "%c%c>%s", dt_name(sh->a)[1], dt_name(sh->b)[1],
                 dt_name(sh->d));
        printf("  %-13s %-16s %-9s %9.2f %9.2f %9.2f %9.3f %9.3f\n", sh->what, shape, types,
               us[0], us[1], us[2], us[0] / us[1], us[2] / us[1]);
        const char *names[3] = { "lt", "small", "bf16" };
        for (int v = 0; v < 3; v++) {
            snprintf(key, sizeof key, "gs_%s_%s%s_%s_%s_us", shape, dt_name(sh->a),
                     dt_name(sh->b), dt_name(sh->d), names[v]);
            bench_json_num(&j, key, us[v]);
        }
        snprintf(key, sizeof key, "gs_%s_%s%s_%s_lt_over_small", shape, dt_name(sh->a),
                 dt_name(sh->b), dt_name(sh->d));
        bench_json_num(&j, key, us[0] / us[1]);
        snprintf(key, sizeof key, "gs_%s_%s%s_%s_bf16_over_small", shape, dt_name(sh->a),
                 dt_name(sh->b), dt_name(sh->d));
        bench_json_num(&j, key, us[2] / us[1]);
    }
    l8_gemm_stats gs = { .size = sizeof gs };
    if (rc == 0 && l8_gemm_get_stats(h[1], &gs) == L8_OK) {
        printf("  the small handle: %llu calls, %llu by the small kernel\n",
               (unsigned long long)gs.calls, (unsigned long long)gs.small_calls);
        bench_json_num(&j, "small_handle_calls", (double)gs.calls);
        bench_json_num(&j, "small_handle_small_calls", (double)gs.small_calls);
    }
    bench_json_close(&j);
out:
    if (rc || st != L8_OK) {
        fprintf(stderr, "gemmsmall: %s\n", l8_last_error_string());
        rc = 1;
    }
    for (int v = 0; v < 3; v++) l8_gemm_handle_destroy(h[v]);
    l8_ctx_destroy(ctx);
    return rc;
}
