/* bench_alloc.c - `lean8-bench alloc`: the caching allocator against the
 * driver, in one run on one device.
 *
 * 1. Median cost of an alloc+free pair on a cache hit, for several sizes:
 *    lean8 (l8_alloc_malloc/l8_alloc_free), cuMemAlloc/cuMemFree, and
 *    cuMemAllocAsync/cuMemFreeAsync on a stream with the default pool's
 *    release threshold raised (the driver's warm pool).
 * 2. Fragmentation on a replayed training-like trace (tools/replay.h):
 *    reserved peak / allocated peak. --dump-trace writes the same trace as
 *    text ("a ID BYTES" / "f ID") for tools/bench_alloc_torch.py to replay
 *    through PyTorch's allocator side by side.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
/* Internal on purpose: the baselines are raw cuMemAlloc/cuMemAllocAsync through
 * the driver table (L8_CU, l8i_stream_cu), which no public header offers. */
#include "runtime/internal.h"
#include "tools/replay.h"
#include "alloc/trace.h"

static const size_t k_sizes[] = { 512, 64u << 10, 1u << 20, 16u << 20, 256u << 20 };
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

/* ns per pair: median over reps of (batch of `batch` pairs) / batch */
static double time_lean8(l8_ctx *ctx, size_t bytes, int reps, int batch)
{
    l8_alloc *a = l8_ctx_allocator(ctx);
    l8_stream_id s = l8_stream_handle(l8_ctx_stream(ctx, L8_STREAM_COMPUTE));
    double *t = calloc((size_t)reps, sizeof *t);
    void *p = NULL;
    if (!t || l8_alloc_malloc(a, bytes, s, &p) != L8_OK || l8_alloc_free(a, p) != L8_OK) {
        free(t);
        return -1;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < batch; i++) {
            if (l8_alloc_malloc(a, bytes, s, &p) != L8_OK || l8_alloc_free(a, p) != L8_OK) {
                free(t);
                return -1;
            }
        }
        t[r] = (bench_now_ns() - t0) / batch;
    }
    double m = bench_median(t, (size_t)reps);
    free(t);
    return m;
}

static double time_cumemalloc(size_t bytes, int reps)
{
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t) return -1;
    for (int r = 0; r < reps; r++) {
        CUdeviceptr p = 0;
        double t0 = bench_now_ns();
        if (L8_CU(cuMemAlloc, &p, bytes) != L8_OK || L8_CU(cuMemFree, p) != L8_OK) {
            free(t);
            return -1;
        }
        t[r] = bench_now_ns() - t0;
    }
    double m = bench_median(t, (size_t)reps);
    free(t);
    return m;
}

static double time_cumemallocasync(l8_ctx *ctx, size_t bytes, int reps, int batch)
{
    CUstream s = l8i_stream_cu(l8_ctx_stream(ctx, L8_STREAM_COMPUTE));
    double *t = calloc((size_t)reps, sizeof *t);
    CUdeviceptr p = 0;
    if (!t) return -1;
    if (L8_CU(cuMemAllocAsync, &p, bytes, s) != L8_OK || L8_CU(cuMemFreeAsync, p, s) != L8_OK ||
        L8_CU(cuStreamSynchronize, s) != L8_OK) {
        free(t);
        return -1;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < batch; i++)
            if (L8_CU(cuMemAllocAsync, &p, bytes, s) != L8_OK || L8_CU(cuMemFreeAsync, p, s) != L8_OK) {
                free(t);
                return -1;
            }
        t[r] = (bench_now_ns() - t0) / batch;
        if (L8_CU(cuStreamSynchronize, s) != L8_OK) { free(t); return -1; }
    }
    double m = bench_median(t, (size_t)reps);
    free(t);
    return m;
}

/* The driver's pool keeps memory only with its release threshold raised. */
static l8_status raise_pool_threshold(l8_ctx *ctx)
{
    CUmemoryPool pool;
    CUdevice dev;
    cuuint64_t thr = UINT64_MAX;
    L8_CHECK(L8_CU(cuDeviceGet, &dev, l8_ctx_device(ctx)));
    L8_CHECK(L8_CU(cuDeviceGetDefaultMemPool, &pool, dev));
    return L8_CU(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr);
}

/* Write the replay's malloc/free sequence as text for the PyTorch replay:
 * run it once on fake addresses with a trace attached and turn the trace's
 * ALLOC / FREE_REQUESTED events into "a ADDR BYTES" / "f ADDR" lines. */
static l8_status dump_trace(const replay_config *rc, const char *path)
{
    replay_virtual_provider vp;
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    l8_alloc_config ac = L8_ALLOC_CONFIG_INIT;
    l8_trace *t = NULL;
    l8_alloc *a = NULL;
    replay_result rr = { .size = sizeof rr };
    FILE *f = NULL;
    l8_status st;
    replay_virtual_provider_init(&vp, 0);
    tc.capacity = 1u << 23;
    L8_TRY(st, l8_trace_create(&tc, &t), out);
    ac.trace = t;
    L8_TRY(st, l8_alloc_create(&ac, &vp.base, &a), out);
    L8_TRY(st, replay_training(a, 0, rc, &rr), out);
    if (l8_trace_count(t) != l8_trace_held(t)) {
        st = L8_FAIL(L8_ERR_INTERNAL, "trace ring too small for the replay");
        goto out;
    }
    f = fopen(path, "w");
    if (!f) { st = L8_FAIL(L8_ERR_IO, "cannot write %s", path); goto out; }
    l8_trace_event ev[1024];
    size_t got;
    for (size_t i = 0; (got = l8_trace_events(t, i, ev, 1024)) > 0; i += got)
        for (size_t k = 0; k < got; k++) {
            if (ev[k].kind == L8_TRACE_ALLOC)
                fprintf(f, "a %llu %llu\n", (unsigned long long)ev[k].addr,
                        (unsigned long long)ev[k].aux);
            else if (ev[k].kind == L8_TRACE_FREE_REQUESTED)
                fprintf(f, "f %llu\n", (unsigned long long)ev[k].addr);
        }
    if (fclose(f)) st = L8_FAIL(L8_ERR_IO, "cannot write %s", path);
out:
    l8_alloc_destroy(a);
    l8_trace_destroy(t);
    return st;
}

static int fragmentation(l8_ctx *ctx, const bench_opts *o, bench_json *j)
{
    replay_config rc = REPLAY_CONFIG_INIT;
    replay_result rr = { .size = sizeof rr };
    if (o->quick) rc.steps /= 4;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) rc.hidden /= 8;   /* keep host memory modest */
    if (o->dump_trace && dump_trace(&rc, o->dump_trace) != L8_OK) {
        fprintf(stderr, "dump: %s\n", l8_last_error_string());
        return 1;
    }
    l8_alloc *a = l8_ctx_allocator(ctx);
    if (l8_alloc_empty_cache(a) != L8_OK) return 1;
    if (replay_training(a, l8_stream_handle(l8_ctx_stream(ctx, L8_STREAM_COMPUTE)), &rc,
                                 &rr) != L8_OK) {
        fprintf(stderr, "replay: %s\n", l8_last_error_string());
        return 1;
    }
    printf("\n  fragmentation on the training-like trace (%d layers, hidden %d, %d steps, tokens "
           "%d..%d, new count every step; %llu ops, %.0f ns/op):\n", rc.layers, rc.hidden, rc.steps,
           rc.min_tokens, rc.max_tokens, (unsigned long long)rr.ops, rr.ns_per_op);
    printf("  %-34s %10.2f GiB\n", "allocated peak", rr.allocated_peak / 1073741824.0);
    printf("  %-34s %10.2f GiB\n", "reserved peak", rr.reserved_peak / 1073741824.0);
    int gpu = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    printf("  %-34s %10.3f   (%s; PyTorch anchor 1.30)\n", "reserved / allocated", rr.ratio,
           gpu ? "target <= 1.10" : "the target <= 1.10 is for the GPU-sized trace");
    bench_json_num(j, "replay_allocated_peak_bytes", (double)rr.allocated_peak);
    bench_json_num(j, "replay_reserved_peak_bytes", (double)rr.reserved_peak);
    bench_json_num(j, "replay_fragmentation_ratio", rr.ratio);
    bench_json_num(j, "replay_ops", (double)rr.ops);
    bench_json_num(j, "replay_ns_per_op", rr.ns_per_op);
    return !gpu || rr.ratio <= 1.10 ? 0 : 1;
}

int bench_alloc(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = o->device;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK) {
        fprintf(stderr, "lean8-bench alloc: %s\n", l8_last_error_string());
        return 1;
    }
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    bench_json j = {0};
    if (bench_json_open(&j, o->json, "alloc", l8_ctx_device_name(ctx))) {
        l8_ctx_destroy(ctx);
        return 1;
    }
    int reps = o->quick ? 11 : 101, batch = o->quick ? 1000 : 10000, drv_reps = o->quick ? 10 : 100;
    if (cuda && raise_pool_threshold(ctx) != L8_OK)
        fprintf(stderr, "warning: pool threshold: %s\n", l8_last_error_string());
    printf("== alloc: alloc+free pair on a cache hit, median ns (%s)\n", l8_ctx_device_name(ctx));
    if (!cuda)
        printf("  cuMemAlloc, cuMemAllocAsync: skipped (host backend: no driver to compare with)\n");
    printf("  %-10s %12s %14s %18s %10s %10s\n", "size", "lean8", "cuMemAlloc", "cuMemAllocAsync",
           "x Alloc", "x Async");
    int rc = 0;
    double worst = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        size_t b = k_sizes[i];
        double l = time_lean8(ctx, b, reps, batch);
        double d = cuda ? time_cumemalloc(b, drv_reps) : -1;
        double as = cuda ? time_cumemallocasync(ctx, b, reps, batch / 10) : -1;
        if (l < 0) { fprintf(stderr, "lean8 failed: %s\n", l8_last_error_string()); rc = 1; break; }
        if (l > worst) worst = l;
        char sz[32];
        snprintf(sz, sizeof sz, b >= (1u << 20) ? "%zu MiB" : b >= 1024 ? "%zu KiB" : "%zu B",
                 b >= (1u << 20) ? b >> 20 : b >= 1024 ? b >> 10 : b);
        if (cuda)
            printf("  %-10s %12.1f %14.1f %18.1f %10.0f %10.1f\n", sz, l, d, as, d > 0 ? d / l : 0,
                   as > 0 ? as / l : 0);
        else
            printf("  %-10s %12.1f %14s %18s %10s %10s\n", sz, l, "-", "-", "-", "-");
        char key[64];
        snprintf(key, sizeof key, "pair_ns_lean8_%zu", b);
        bench_json_num(&j, key, l);
        snprintf(key, sizeof key, "pair_ns_cuMemAlloc_%zu", b);
        bench_json_num(&j, key, d);
        snprintf(key, sizeof key, "pair_ns_cuMemAllocAsync_%zu", b);
        bench_json_num(&j, key, as);
    }
    printf("  worst lean8 median %.1f ns per pair (target <= 100 ns)\n", worst);
    bench_json_num(&j, "pair_ns_lean8_worst", worst);
    if (!rc) rc = fragmentation(ctx, o, &j);
    bench_json_close(&j);
    l8_ctx_destroy(ctx);
    return rc;
}
