/* bench_comm.c - `lean8-bench comm`: the collectives' pieces.
 *
 * bench_comm_interleave: the last-dimension rearrangement (l8i_interleave,
 * ptx/interleave.ptx) against l8_memcpy_dtod of the same bytes, timed in
 * the same run with the blocks of the three alternating, so clock and
 * thermal drift hit all three alike. Bandwidth = (read + write) / time;
 * target: >= 0.85 x the copy on the 16-byte path. Shapes: the per-rank
 * blocks of a bf16 [16384, 4096] tensor split over world = 2, 4, 8
 * (chunk = 8192 / world bytes, 128 MiB in all), a 1 GiB case, and two
 * shapes whose chunks only allow 4- and 2-byte words (for information).
 * JSON keys: copy_<shape>_gbps, {interleave,deinterleave}_<shape>_gbps and
 * _ratio, <shape> = w<world>_r<rows>_c<chunk>. On a host context it runs
 * one small shape and says the GPU numbers are skipped.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
/* l8i_interleave is internal (the communicator calls it); the bench
 * measures the kernel directly, so it includes the runtime's internals. */
#include "runtime/internal.h"

typedef struct il_shape {
    int64_t world, rows;
    size_t chunk;
} il_shape;

static const il_shape k_gpu_shapes[] = {
    { 2, 16384, 4096 }, { 4, 16384, 2048 }, { 8, 16384, 1024 },
    { 8, 131072, 1024 },                          /* 1 GiB */
    { 4, 16384, 2052 }, { 3, 16384, 2730 },       /* 4- and 2-byte words */
};
static const il_shape k_host_shape = { 4, 1024, 512 };

enum { K_COPY, K_ILV, K_DEILV, NKINDS };
static const char *const k_kind[NKINDS] = { "copy", "interleave", "deinterleave" };

static l8_status run_kind(int kind, l8_stream *s, void *dst, const void *src, const il_shape *sh)
{
    size_t n = (size_t)(sh->world * sh->rows) * sh->chunk;
    if (kind == K_COPY) return l8_memcpy_dtod(s, dst, src, n);
    return l8i_interleave(s, dst, src, sh->world, sh->rows, sh->chunk,
                          kind == K_ILV ? L8I_INTERLEAVE : L8I_DEINTERLEAVE);
}

/* Median ms per call of each kind over reps alternating blocks of iters
 * calls (events on a GPU, the wall clock on the host). ms[k] < 0: failed. */
static void time_shape(l8_ctx *ctx, const il_shape *sh, int reps, int iters, double ms[NKINDS])
{
    size_t n = (size_t)(sh->world * sh->rows) * sh->chunk;
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMM);
    int host = l8_ctx_backend(ctx) != L8_BACKEND_CUDA;
    void *a = NULL, *b = NULL;
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)(reps * NKINDS), sizeof *t);
    for (int k = 0; k < NKINDS; k++) ms[k] = -1;
    if (!t || l8_ctx_malloc(ctx, n, s, &a) != L8_OK || l8_ctx_malloc(ctx, n, s, &b) != L8_OK ||
        l8_memset_d8(s, a, 0x3c, n) != L8_OK || l8_event_create(ctx, 1, &e0) != L8_OK ||
        l8_event_create(ctx, 1, &e1) != L8_OK)
        goto out;
    for (int k = 0; k < NKINDS; k++)                     /* warm-up: JIT, caches, clocks */
        for (int i = 0; i < 2; i++)
            if (run_kind(k, s, b, a, sh) != L8_OK) goto out;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < NKINDS; k++) {
            float f = 0;
            double t0 = bench_now_ns();
            if (l8_event_record(e0, s) != L8_OK) goto out;
            for (int i = 0; i < iters; i++)
                if (run_kind(k, s, b, a, sh) != L8_OK) goto out;
            if (l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
                l8_event_elapsed_ms(e0, e1, &f) != L8_OK)
                goto out;
            t[k * reps + r] = (host ? (bench_now_ns() - t0) * 1e-6 : (double)f) / iters;
        }
    for (int k = 0; k < NKINDS; k++) ms[k] = bench_median(t + k * reps, (size_t)reps);
out:
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    if (l8_ctx_free(ctx, a) != L8_OK || l8_ctx_free(ctx, b) != L8_OK) ms[0] = -1;
}

int bench_comm_interleave(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = o->device;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK) {
        fprintf(stderr, "lean8-bench comm: %s\n", l8_last_error_string());
        return 1;
    }
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    const il_shape *shapes = cuda ? k_gpu_shapes : &k_host_shape;
    size_t nshapes = cuda ? sizeof k_gpu_shapes / sizeof k_gpu_shapes[0] : 1;
    int reps = cuda ? (o->quick ? 5 : 15) : 3;
    bench_json j = {0};
    int rc = bench_json_open(&j, o->json ? o->json : "bench-comm.json", "comm",
                             l8_ctx_device_name(ctx));
    printf("== comm interleave (%s): [world][rows][chunk] <-> [rows][world][chunk] vs a device "
           "copy of the same bytes, same run\n", l8_ctx_device_name(ctx));
    if (!cuda)
        printf("  host context: one small shape to show the path works; the GPU numbers are "
               "skipped (run with a CUDA device)\n");
    printf("  %-5s %-7s %-6s %9s %10s %10s %7s %10s %7s\n", "world", "rows", "chunk", "MiB",
           "copy GB/s", "ilv GB/s", "x copy", "deilv GB/s", "x copy");
    for (size_t si = 0; si < nshapes && !rc; si++) {
        const il_shape *sh = &shapes[si];
        double bytes = (double)(sh->world * sh->rows) * (double)sh->chunk, ms[NKINDS], gbps[NKINDS];
        int iters = !cuda ? 1 : bytes > 512e6 ? 5 : 20;
        time_shape(ctx, sh, reps, iters, ms);
        for (int k = 0; k < NKINDS; k++) {
            if (ms[k] <= 0) {
                fprintf(stderr, "%s: %s\n", k_kind[k], l8_last_error_string());
                rc = 1;
            }
            gbps[k] = ms[k] > 0 ? 2.0 * bytes / (ms[k] * 1e-3) / 1e9 : 0;
        }
        if (rc) break;
        printf("  %-5lld %-7lld %-6zu %9.1f %10.1f %10.1f %7.3f %10.1f %7.3f\n",
               (long long)sh->world, (long long)sh->rows, sh->chunk, bytes / 1048576.0, gbps[K_COPY], gbps[K_ILV],
               gbps[K_ILV] / gbps[K_COPY], gbps[K_DEILV], gbps[K_DEILV] / gbps[K_COPY]);
        char shp[64], key[128];
        snprintf(shp, sizeof shp, "w%lld_r%lld_c%zu", (long long)sh->world, (long long)sh->rows,
                 sh->chunk);
        for (int k = 0; k < NKINDS; k++) {
            snprintf(key, sizeof key, "%s_%s_gbps", k_kind[k], shp);
            bench_json_num(&j, key, gbps[k]);
            if (k == K_COPY) continue;
            snprintf(key, sizeof key, "%s_%s_ratio", k_kind[k], shp);
            bench_json_num(&j, key, gbps[k] / gbps[K_COPY]);
        }
    }
    if (cuda)
        printf("  target: >= 0.85 x copy where chunk and bases allow 16-byte words (the first "
               "four shapes)\n");
    bench_json_close(&j);
    l8_ctx_destroy(ctx);
    return rc;
}

/* The communicator's own measurements join here. */
int bench_comm(const bench_opts *o)
{
    return bench_comm_interleave(o);
}
