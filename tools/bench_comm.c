/* bench_comm.c - `lean8-bench comm`: the collectives' pieces.
 *
 * bench_comm_interleave: the last-dimension rearrangement (l8i_interleave,
 * ptx/interleave.ptx.in) against l8_memcpy_dtod of the same bytes, timed in
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
#include <pthread.h>
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
    { 5, 16384, 1999 },                           /* 1-byte words */
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

int bench_comm_interleave(const bench_opts *o, bench_json *jp)
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
    bench_json *j = jp;
    int rc = 0;
    bench_json_str(j, "interleave_device", l8_ctx_device_name(ctx));
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
            bench_json_num(j, key, gbps[k]);
            if (k == K_COPY) continue;
            snprintf(key, sizeof key, "%s_%s_ratio", k_kind[k], shp);
            bench_json_num(j, key, gbps[k] / gbps[K_COPY]);
        }
    }
    if (cuda)
        printf("  target: >= 0.85 x copy on every shape (16-byte words: the first four; "
               "the segment kernel: the last three)\n");
    l8_ctx_destroy(ctx);
    return rc;
}

/* ---- the collectives ----
 *
 * bench_comm_collectives: all-reduce, all-gather (first and last dimension)
 * and reduce-scatter, bus bandwidth as nccl-tests computes it (algbw =
 * bytes of the full array / time; busbw = algbw x 2(p-1)/p for all-reduce,
 * (p-1)/p for the others), median of timed blocks.
 *   - Run under a launcher (WORLD_SIZE > 1, e.g. lean8-run -n 2 lean8-bench
 *     comm): one rank per process joined by l8_comm_init_env - NCCL on GPUs
 *     (1 MiB .. 1 GiB), TCP on the host backend (small sizes); rank 0 prints.
 *   - Otherwise the host transports, for information: 2 and 4 ranks as
 *     threads of this process, over THREADS and over TCP on loopback.
 * tools/bench_torch_comm.py measures PyTorch's NCCL collectives the same way
 * (run both under the same launcher, in the same job). */

enum { C_AR, C_AG0, C_AGL, C_RS, NCOLL };
static const char *const k_coll[NCOLL] = { "all_reduce", "all_gather", "all_gather_lastdim",
                                           "reduce_scatter" };

/* One timed collective over a [rows, cols] bf16 per-rank block (the full
 * array is world x that for gathers and scatters). */
static l8_status coll_once(l8_comm *c, int k, l8_tensor *small, l8_tensor *big0, l8_tensor *bigl,
                           l8_stream *s)
{
    switch (k) {
    case C_AR: return l8_comm_all_reduce(c, big0, big0, L8_REDUCE_SUM, s);
    case C_AG0: return l8_comm_all_gather(c, small, big0, 0, s);
    case C_AGL: return l8_comm_all_gather(c, small, bigl, -1, s);
    default: return l8_comm_reduce_scatter(c, big0, small, L8_REDUCE_SUM, 0, s);
    }
}

typedef struct coll_result { double bytes, ms[NCOLL]; } coll_result;

/* Median ms of each collective on full arrays of `bytes` (bf16), reps blocks
 * of iters calls; every rank runs the same sequence. */
static l8_status time_colls(l8_comm *c, size_t bytes, int reps, int iters, coll_result *out)
{
    l8_ctx *ctx = l8_comm_ctx(c);
    int w = l8_comm_size(c), cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    int64_t cols = 1024, rows = (int64_t)(bytes / 2 / (size_t)cols / (size_t)w);
    if (rows < 1) rows = 1;
    int64_t s_sh[2] = { rows, cols }, b0[2] = { rows * w, cols }, bl[2] = { rows, cols * w };
    l8_tensor *small = NULL, *big0 = NULL, *bigl = NULL;
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)reps, sizeof *t);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_status st = t ? L8_OK : L8_FAIL(L8_ERR_OOM, "bench: out of memory");
    if (st == L8_OK) st = l8_tensor_empty(ctx, L8_BF16, 2, s_sh, &small);
    if (st == L8_OK) st = l8_tensor_empty(ctx, L8_BF16, 2, b0, &big0);
    if (st == L8_OK) st = l8_tensor_empty(ctx, L8_BF16, 2, bl, &bigl);
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e0);
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e1);
    void *p;
    if (st == L8_OK) st = l8_tensor_data(big0, &p);
    if (st == L8_OK) st = l8_memset_d8(s, p, 0, l8_tensor_nbytes(big0));   /* zeros: sums stay finite */
    if (st == L8_OK) st = l8_tensor_data(small, &p);
    if (st == L8_OK) st = l8_memset_d8(s, p, 0, l8_tensor_nbytes(small));
    out->bytes = (double)l8_tensor_nbytes(big0);
    for (int k = 0; k < NCOLL && st == L8_OK; k++) {
        for (int i = 0; i < 2 && st == L8_OK; i++) st = coll_once(c, k, small, big0, bigl, s);
        for (int r = 0; r < reps && st == L8_OK; r++) {
            float f = 0;
            double t0 = bench_now_ns();
            st = l8_event_record(e0, s);
            for (int i = 0; i < iters && st == L8_OK; i++) st = coll_once(c, k, small, big0, bigl, s);
            if (st == L8_OK) st = l8_event_record(e1, s);
            if (st == L8_OK) st = l8_event_synchronize(e1);
            if (st == L8_OK && cuda) st = l8_event_elapsed_ms(e0, e1, &f);
            t[r] = (cuda ? (double)f : (bench_now_ns() - t0) * 1e-6) / iters;
        }
        out->ms[k] = bench_median(t, (size_t)reps);
    }
    if (st == L8_OK) st = l8_comm_barrier(c);
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    l8_tensor_destroy(small);
    l8_tensor_destroy(big0);
    l8_tensor_destroy(bigl);
    return st;
}

static double busbw(int k, double bytes, double ms, int w)
{
    double algbw = bytes / (ms * 1e-3) / 1e9;
    return algbw * (k == C_AR ? 2.0 * (w - 1) / w : (double)(w - 1) / w);
}

static void print_row(bench_json *j, const char *tag, int w, const coll_result *r)
{
    printf("  %-14s %2d %10.2f", tag, w, r->bytes / 1048576.0);
    for (int k = 0; k < NCOLL; k++) printf(" %10.2f", busbw(k, r->bytes, r->ms[k], w));
    printf(" %8.3f\n", r->ms[C_AGL] / r->ms[C_AG0]);
    char key[160];
    for (int k = 0; k < NCOLL; k++) {
        snprintf(key, sizeof key, "%s_w%d_%.0fMiB_%s_busbw_gbps", tag, w, r->bytes / 1048576.0, k_coll[k]);
        bench_json_num(j, key, busbw(k, r->bytes, r->ms[k], w));
        snprintf(key, sizeof key, "%s_w%d_%.0fMiB_%s_ms", tag, w, r->bytes / 1048576.0, k_coll[k]);
        bench_json_num(j, key, r->ms[k]);
    }
    snprintf(key, sizeof key, "%s_w%d_%.0fMiB_lastdim_over_firstdim", tag, w, r->bytes / 1048576.0);
    bench_json_num(j, key, r->ms[C_AGL] / r->ms[C_AG0]);
}

static void print_head(void)
{
    printf("  %-14s %2s %10s %10s %10s %10s %10s %8s\n", "transport", "p", "MiB", "AR busbw",
           "AG busbw", "AG-last", "RS busbw", "last/1st");
}

/* Host transports as threads of this process. */
typedef struct hjob {
    const l8_comm_id *id;
    int rank, world, quick;
    size_t bytes;
    coll_result r;
    l8_status st;
    char err[512];
} hjob;

static void *hrank(void *arg)
{
    hjob *h = arg;
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = "host";
    l8_ctx *ctx = NULL;
    l8_comm *c = NULL;
    h->st = l8_ctx_create(&cc, &ctx);
    if (h->st == L8_OK) h->st = l8_comm_init_rank(ctx, h->id, h->rank, h->world, NULL, &c);
    if (h->st == L8_OK) h->st = time_colls(c, h->bytes, h->quick ? 3 : 5, 3, &h->r);
    if (h->st != L8_OK) snprintf(h->err, sizeof h->err, "%s", l8_last_error_string());
    l8_comm_destroy(c);
    l8_ctx_destroy(ctx);
    return NULL;
}

static int host_threads(bench_json *j, int quick)
{
    static const size_t sizes[] = { 1u << 20, 16u << 20 };
    int rc = 0;
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS && !rc; t++)
        for (int w = 2; w <= 4 && !rc; w += 2)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !rc; si++) {
                l8_ctx_config cc = L8_CTX_CONFIG_INIT;
                cc.device = "host";
                l8_ctx *ctx = NULL;
                l8_comm_id id;
                if (l8_ctx_create(&cc, &ctx) || l8_comm_id_create(ctx, (l8_comm_transport)t, &id)) {
                    fprintf(stderr, "lean8-bench comm: %s\n", l8_last_error_string());
                    l8_ctx_destroy(ctx);
                    return 1;
                }
                l8_ctx_destroy(ctx);
                hjob h[4];
                pthread_t th[4];
                for (int r = 0; r < w; r++) {
                    h[r] = (hjob){ .id = &id, .rank = r, .world = w, .quick = quick, .bytes = sizes[si] };
                    pthread_create(&th[r], NULL, hrank, &h[r]);
                }
                for (int r = 0; r < w; r++) pthread_join(th[r], NULL);
                for (int r = 0; r < w; r++)
                    if (h[r].st != L8_OK) {
                        fprintf(stderr, "lean8-bench comm: rank %d: %s\n", r, h[r].err);
                        rc = 1;
                    }
                if (!rc) print_row(j, t == L8_COMM_TCP ? "host-tcp" : "host-threads", w, &h[0].r);
            }
    return rc;
}

/* One rank of a launched job (lean8-run, torchrun, srun, mpirun). */
static int launched(const bench_opts *o, bench_json *j)
{
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = o->device;
    l8_ctx *ctx = NULL;
    l8_comm *c = NULL;
    if (l8_ctx_create(&cc, &ctx) || l8_comm_init_env(ctx, NULL, &c)) {
        fprintf(stderr, "lean8-bench comm: %s\n", l8_last_error_string());
        l8_ctx_destroy(ctx);
        return 1;
    }
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA, rank = l8_comm_rank(c), rc = 0;
    static const size_t gpu_sizes[] = { 1u << 20, 16u << 20, 256u << 20, 1u << 30 };
    static const size_t host_sizes[] = { 1u << 20, 16u << 20 };
    const size_t *sizes = cuda ? gpu_sizes : host_sizes;
    size_t n = cuda ? sizeof gpu_sizes / sizeof *gpu_sizes : sizeof host_sizes / sizeof *host_sizes;
    if (rank == 0) {
        printf("== comm collectives (%s, %d ranks, %s): bus bandwidth GB/s (nccl-tests' "
               "formula), bf16\n", l8_ctx_device_name(ctx), l8_comm_size(c),
               cuda ? "NCCL" : "TCP");
        print_head();
    }
    for (size_t si = 0; si < n && !rc; si++) {
        coll_result r;
        l8_status st = time_colls(c, sizes[si], o->quick ? 3 : 9, cuda ? (sizes[si] > (64u << 20) ? 5 : 20) : 3, &r);
        if (st != L8_OK) {
            fprintf(stderr, "lean8-bench comm: rank %d: %s\n", rank, l8_last_error_string());
            rc = 1;
        } else if (rank == 0) {
            print_row(j, cuda ? "nccl" : "tcp", l8_comm_size(c), &r);
        }
    }
    if (rank == 0 && cuda)
        printf("  targets (two H200s): busbw >= 0.95 x PyTorch's in the same job "
               "(tools/bench_torch_comm.py); last-dim all-gather <= 1.15 x the first-dim one\n");
    l8_comm_destroy(c);
    l8_ctx_destroy(ctx);
    return rc;
}

int bench_comm_collectives(const bench_opts *o, bench_json *j)
{
    l8_dist_env e = { .size = sizeof e };
    if (l8_dist_env_read(&e) != L8_OK) {
        fprintf(stderr, "lean8-bench comm: %s\n", l8_last_error_string());
        return 1;
    }
    if (e.world_size > 1) return launched(o, j);
    printf("== comm collectives on the host transports (threads of this process), for "
           "information: bus bandwidth GB/s, bf16\n");
    print_head();
    int rc = host_threads(j, o->quick);
    printf("  (NCCL needs one process per GPU: lean8-run -n N lean8-bench comm on a machine "
           "with N GPUs)\n");
    return rc;
}

/* One JSON file (--json, rank 0 of a launched job) for both parts; a
 * launched job measures the collectives only. */
int bench_comm(const bench_opts *o)
{
    l8_dist_env e = { .size = sizeof e };
    int launched_job = l8_dist_env_read(&e) == L8_OK && e.world_size > 1;
    bench_json j = {0};
    if (o->json && (!launched_job || e.rank == 0) && bench_json_open(&j, o->json, "comm", "") != 0)
        return 1;
    int rc = launched_job ? 0 : bench_comm_interleave(o, &j);
    if (!rc) rc = bench_comm_collectives(o, &j);
    bench_json_close(&j);
    return rc;
}
