/* bench_gemm.c - `lean8-bench gemm`: cuBLASLt GEMMs through l8_gemm on the
 * TARGETS.md shapes, with the heuristic's first algorithm and autotuned
 * (mode 1, or mode 2 with L8_GEMM_AUTOTUNE=2).
 *
 * Modes, all row-major D[M,N] = A[M,K] . B[N,K]^T (the Linear fprop layout,
 * cuBLASLt TN), random data:
 *   fp8_fast  E4M3 x E4M3 -> bf16, fast accumulation
 *   fp8       E4M3 x E4M3 -> bf16, split (precise) accumulation
 *   bf16      bf16 x bf16 -> bf16
 * Each shape: 3 warm-up calls on each handle (the first builds the plan,
 * and autotunes on the tuned handle), then `reps` rounds, each timing one
 * block of `iters` back-to-back calls on the heuristic handle and then one
 * on the tuned handle (CUDA events on the compute stream); the median block
 * of each gives TFLOP/s = 2 M N K / time. The rounds interleave the two so
 * that both see the same clocks and temperature: timed one after the other,
 * the tuned handle's blocks came right after seconds of autotuning at full
 * load and read ~2% slow on the largest shapes. JSON keys: <mode>_<M>x<N>x<K>_tflops (heuristic) and
 * <mode>_<M>x<N>x<K>_tuned_tflops; tools/bench_torch_gemm.py writes the same
 * keys for PyTorch and tools/bench_ratio.py prints the ratios.
 *
 * The tuned handle runs autotune mode 1 (time the heuristic's candidates),
 * or mode 2 (those and the configuration search) when L8_GEMM_AUTOTUNE=2 is
 * set: lean8-bench's flags are common to all subcommands, so the mode comes
 * from the library's own variable. Mode 2 takes a few seconds per plan. The
 * JSON says which (autotune_mode, the mode the handle reports) and, per
 * shape, the algorithm each handle chose (<mode>_<shape>_config and
 * <mode>_<shape>_tuned_config, l8_gemm_describe's text); the table prints
 * both under each row.
 *
 * --cache FILE: both handles use FILE as their persistent plan cache (see
 * ops/gemm.h). The first handle stays a default handle (autotune 0): it
 * reads FILE when it is created and takes every plan found there; the
 * tuned handle adds the plans it tunes. So a first run fills FILE, and a
 * second run's "heuristic" column is the default handle with a warm cache
 * (TARGETS.md's GEMM target); the JSON's plan_cache_hits says how many of
 * the default handle's plans came from FILE. Without --cache the handles
 * use L8_GEMM_CACHE when it is set.
 *
 * Operands are carved out of one storage per role sized for the largest
 * shape and filled once (random values, never zeros), so the run uploads
 * ~1 GiB once instead of per shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/gemm.h"
#include "runtime/fp8.h"

static const int64_t k_shapes[][3] = {
    { 8192, 8192, 8192 }, { 16384, 4096, 4096 }, { 4096, 4096, 4096 },
    { 16384, 12288, 4096 }, { 16384, 4096, 16384 },
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

typedef struct gmode {
    const char *name;
    l8_dtype in;
    int fast;
} gmode;
static const gmode k_modes[] = {
    { "fp8_fast", L8_E4M3, 1 }, { "fp8", L8_E4M3, 0 }, { "bf16", L8_BF16, 0 },
};
#define NMODES (sizeof k_modes / sizeof k_modes[0])

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

/* Fill `elems` elements of dt at byte offset 0 of st with values of about
 * unit size, uploaded in 64 MiB chunks. */
static int fill(l8_storage *st, l8_dtype dt, int64_t elems)
{
    const int64_t chunk = (64 << 20) / (int64_t)l8_dtype_size(dt);
    size_t es = l8_dtype_size(dt);
    uint8_t *host = malloc((size_t)chunk * es);
    uint8_t table8[256];
    uint16_t table16[256];
    if (!host) return -1;
    for (int i = 0; i < 256; i++) {              /* 256 values in [-2, 2), none zero */
        float v = ((float)i - 127.5f) / 64.0f;
        table8[i] = l8_fp8_from_f32(v, L8_E4M3);
        table16[i] = l8_bf16_from_f32(v);
    }
    int rc = 0;
    for (int64_t off = 0; off < elems && rc == 0; off += chunk) {
        int64_t n = elems - off < chunk ? elems - off : chunk;
        for (int64_t i = 0; i < n; i += 8) {
            uint64_t r = rng();
            for (int b = 0; b < 8 && i + b < n; b++, r >>= 8) {
                if (dt == L8_E4M3) host[i + b] = table8[r & 255];
                else memcpy(host + 2 * (i + b), &table16[r & 255], 2);
            }
        }
        l8_tensor *v = NULL;
        if (l8_tensor_from_storage(st, (size_t)off * es, dt, 1, &n, NULL, &v) != L8_OK ||
            l8_tensor_copy_from_host(v, host, (size_t)n * es, NULL) != L8_OK)
            rc = -1;
        l8_tensor_destroy(v);
    }
    free(host);
    return rc;
}

typedef struct operands {
    l8_storage *a, *b, *d;
    l8_fp8_meta *meta;            /* scale_inv 1 for both FP8 operands */
} operands;

/* Median milliseconds per call of `desc` on h[0] and on h[1] into ms[0..1]
 * (see the banner); 0, or -1 with the error printed. */
static int time_gemm(l8_ctx *ctx, l8_gemm_handle *h[2], const l8_gemm_desc *desc, int reps,
                     int quick, double ms_out[2])
{
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)(2 * reps), sizeof *t);
    float ms = 0;
    int iters[2], rc = -1;
    if (!t || l8_event_create(ctx, 1, &e0) != L8_OK || l8_event_create(ctx, 1, &e1) != L8_OK)
        goto out;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++)
            if (l8_gemm(h[k], desc, s) != L8_OK) goto out;
        /* one timed call sizes the blocks to ~50 ms (quick: ~10 ms) */
        if (l8_event_record(e0, s) != L8_OK || l8_gemm(h[k], desc, s) != L8_OK ||
            l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
            l8_event_elapsed_ms(e0, e1, &ms) != L8_OK)
            goto out;
        int it = (int)((quick ? 10.0 : 50.0) / (ms > 1e-3 ? ms : 1e-3));
        iters[k] = it < 3 ? 3 : it > 500 ? 500 : it;
    }
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            if (l8_event_record(e0, s) != L8_OK) goto out;
            for (int i = 0; i < iters[k]; i++)
                if (l8_gemm(h[k], desc, s) != L8_OK) goto out;
            if (l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
                l8_event_elapsed_ms(e0, e1, &ms) != L8_OK)
                goto out;
            t[k * reps + r] = ms / iters[k];
        }
    ms_out[0] = bench_median(t, (size_t)reps);
    ms_out[1] = bench_median(t + reps, (size_t)reps);
    rc = 0;
out:
    if (rc) fprintf(stderr, "gemm: %s\n", l8_last_error_string());
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    free(t);
    return rc;
}

#define CFG_LEN 192

static int run_mode(l8_ctx *ctx, const gmode *md, l8_gemm_handle *h[2], const bench_opts *o,
                    bench_json *j, double tf[NSHAPES][2], char descr[NSHAPES][2][CFG_LEN])
{
    int64_t max_mk = 0, max_nk = 0, max_mn = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        int64_t M = k_shapes[i][0], N = k_shapes[i][1], K = k_shapes[i][2];
        if (M * K > max_mk) max_mk = M * K;
        if (N * K > max_nk) max_nk = N * K;
        if (M * N > max_mn) max_mn = M * N;
    }
    size_t es = l8_dtype_size(md->in);
    operands op = { 0 };
    int rc = 1;
    if (l8_storage_create(ctx, (size_t)max_mk * es, NULL, &op.a) != L8_OK ||
        l8_storage_create(ctx, (size_t)max_nk * es, NULL, &op.b) != L8_OK ||
        l8_storage_create(ctx, (size_t)max_mn * 2, NULL, &op.d) != L8_OK ||
        fill(op.a, md->in, max_mk) || fill(op.b, md->in, max_nk))
        goto out;
    if (md->in == L8_E4M3 && l8_fp8_meta_create(ctx, &op.meta) != L8_OK) goto out;
    for (size_t i = 0; i < NSHAPES; i++) {
        int64_t M = k_shapes[i][0], N = k_shapes[i][1], K = k_shapes[i][2];
        int64_t sa[2] = { M, K }, sb[2] = { N, K }, sd[2] = { M, N };
        l8_tensor *a = NULL, *b = NULL, *d = NULL;
        if (l8_tensor_from_storage(op.a, 0, md->in, 2, sa, NULL, &a) != L8_OK ||
            l8_tensor_from_storage(op.b, 0, md->in, 2, sb, NULL, &b) != L8_OK ||
            l8_tensor_from_storage(op.d, 0, L8_BF16, 2, sd, NULL, &d) != L8_OK ||
            (op.meta && (l8_tensor_set_fp8_meta(a, op.meta) != L8_OK ||
                         l8_tensor_set_fp8_meta(b, op.meta) != L8_OK))) {
            l8_tensor_destroy(a); l8_tensor_destroy(b); l8_tensor_destroy(d);
            goto out;
        }
        l8_gemm_desc g = L8_GEMM_DESC_INIT;
        g.a = a; g.b = b; g.d = d;
        g.fast_accum = md->fast;
        double flop = 2.0 * (double)M * (double)N * (double)K;
        double mst[2] = { -1, -1 };
        (void)time_gemm(ctx, h, &g, o->quick ? 3 : 7, o->quick, mst);
        for (int t = 0; t < 2; t++) {
            double ms = mst[t];
            tf[i][t] = ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0;
            char key[96];
            snprintf(key, sizeof key, "%s_%lldx%lldx%lld_%stflops", md->name, (long long)M,
                     (long long)N, (long long)K, t ? "tuned_" : "");
            bench_json_num(j, key, tf[i][t]);
            if (ms > 0 && l8_gemm_describe(h[t], &g, descr[i][t], CFG_LEN) == L8_OK) {
                snprintf(key, sizeof key, "%s_%lldx%lldx%lld_%sconfig", md->name, (long long)M,
                         (long long)N, (long long)K, t ? "tuned_" : "");
                bench_json_str(j, key, descr[i][t]);
            }
        }
        l8_tensor_destroy(a); l8_tensor_destroy(b); l8_tensor_destroy(d);
        if (tf[i][0] == 0 || tf[i][1] == 0) goto out;
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "gemm %s: %s\n", md->name, l8_last_error_string());
    l8_fp8_meta_release(op.meta);
    l8_storage_release(op.a);
    l8_storage_release(op.b);
    l8_storage_release(op.d);
    return rc;
}

int bench_gemm(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    cfg.device = o->device;
    l8_ctx *ctx = NULL;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK) {
        fprintf(stderr, "gemm: %s\n", l8_last_error_string());
        return 1;
    }
    if (l8_ctx_backend(ctx) != L8_BACKEND_CUDA) {
        printf("== gemm: skipped: needs a CUDA device (the host reference is not a benchmark)\n");
        l8_ctx_destroy(ctx);
        return 0;
    }
    l8_gemm_handle *h[2] = { NULL, NULL };
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    bench_json j = { 0 };
    double tf[NMODES][NSHAPES][2];
    char descr[NMODES][NSHAPES][2][CFG_LEN];
    int ver = 0, rc = 1, mode = 0;
    const char *where = "", *env = getenv("L8_GEMM_AUTOTUNE");
    memset(tf, 0, sizeof tf);
    memset(descr, 0, sizeof descr);
    gc.autotune = 0;
    gc.plan_cache = o->cache;
    if (l8_gemm_handle_create(ctx, &gc, &h[0]) != L8_OK) goto out;
    gc.autotune = env && env[0] == '2' ? 2 : 1;
    if (l8_gemm_handle_create(ctx, &gc, &h[1]) != L8_OK) goto out;
    mode = l8_gemm_autotune_enabled(h[1]);
    if (bench_json_open(&j, o->json, "gemm", l8_ctx_device_name(ctx)))
        goto out;
    if (l8_library_info(L8_LIB_CUBLASLT, &ver, &where) == L8_OK) bench_json_num(&j, "cublaslt_version", ver);
    bench_json_num(&j, "autotune_mode", mode);
    printf("== gemm: D[M,N] = A[M,K] . B[N,K]^T, TFLOP/s (%s, cuBLASLt %d, autotune mode %d)\n",
           l8_ctx_device_name(ctx), ver, mode);
    printf("  %-22s %-9s %10s %10s %8s\n", "M x N x K", "mode", "heuristic", "autotuned", "tuned/h");
    rc = 0;
    for (size_t m = 0; m < NMODES && rc == 0; m++)
        rc = run_mode(ctx, &k_modes[m], h, o, &j, tf[m], descr[m]);
    for (size_t i = 0; i < NSHAPES; i++) {
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)k_shapes[i][0],
                 (long long)k_shapes[i][1], (long long)k_shapes[i][2]);
        for (size_t m = 0; m < NMODES; m++) {
            printf("  %-22s %-9s %10.1f %10.1f %8.3f\n", m ? "" : shape, k_modes[m].name,
                   tf[m][i][0], tf[m][i][1], tf[m][i][0] > 0 ? tf[m][i][1] / tf[m][i][0] : 0.0);
            if (descr[m][i][0][0]) printf("  %-22s %-9s heuristic: %s\n", "", "", descr[m][i][0]);
            if (descr[m][i][1][0]) printf("  %-22s %-9s tuned:     %s\n", "", "", descr[m][i][1]);
        }
    }
    l8_gemm_stats st = { .size = sizeof st };
    if (l8_gemm_get_stats(h[0], &st) == L8_OK && (o->cache || getenv("L8_GEMM_CACHE"))) {
        printf("  plan cache: the default handle loaded %llu entries, built %llu of %llu plans"
               " from them (%llu refused)\n", (unsigned long long)st.plan_cache_loaded,
               (unsigned long long)st.plan_cache_hits, (unsigned long long)st.plans_created,
               (unsigned long long)st.plan_cache_rejected);
        bench_json_num(&j, "plan_cache_loaded", (double)st.plan_cache_loaded);
        bench_json_num(&j, "plan_cache_hits", (double)st.plan_cache_hits);
    }
    if (l8_gemm_get_stats(h[1], &st) == L8_OK) {
        printf("  autotune: %llu plans timed, %llu candidates (%llu from the search), %llu picked"
               " another algorithm (%llu from the search)\n", (unsigned long long)st.autotuned,
               (unsigned long long)st.autotune_trials, (unsigned long long)st.search_candidates,
               (unsigned long long)st.autotune_changed, (unsigned long long)st.search_wins);
        bench_json_num(&j, "autotune_changed", (double)st.autotune_changed);
        bench_json_num(&j, "autotune_trials", (double)st.autotune_trials);
        bench_json_num(&j, "search_candidates", (double)st.search_candidates);
        bench_json_num(&j, "search_wins", (double)st.search_wins);
    }
    bench_json_close(&j);
out:
    if (rc) fprintf(stderr, "gemm: %s\n", l8_last_error_string());
    l8_gemm_handle_destroy(h[0]);
    l8_gemm_handle_destroy(h[1]);
    l8_ctx_destroy(ctx);
    return rc;
}
