/* comm_prog.c - one rank of a multi-process communicator test, started by
 * tests/comm.sh (through lean8-run, or by hand with the torchrun variables).
 *
 *   comm_prog collectives   join from the environment, all-reduce, gather and
 *                           reduce-scatter along both dimensions, check the
 *                           results, print "rank R: ok"
 *   comm_prog join          join and pass a barrier
 *   comm_prog exit-early    rank 1 leaves right after joining (exit 0); the
 *                           others must get L8_ERR_COMM from their next
 *                           collective (exit 4 when they do, 1 otherwise)
 *   comm_prog watchdog      (CUDA, one rank, L8_COMM_TIMEOUT < 1 s) an
 *                           all-reduce queued behind about a second of GEMMs
 *                           on the compute stream never completes in time:
 *                           the NCCL watchdog must abort the communicator and
 *                           l8_comm_check return L8_ERR_TIMEOUT within a few
 *                           timeouts, without a host wait; exit 0 when it does
 * Exit: 0 ok, 1 a wrong result or an unexpected error (printed), 4 as above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/lean8.h"

static int fail(int rank, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, l8_last_error_string());
    return 1;
}

/* x[i] of rank r: exact in f32 so sums can be checked exactly. */
static float val(int r, size_t i) { return (float)(r * 1000 + (int)(i % 997)) * 0.25f; }

static int collectives(l8_ctx *ctx, l8_comm *c)
{
    int r = l8_comm_rank(c), w = l8_comm_size(c);
    const int64_t rows = 37, cols = 24;
    int64_t small[2] = { rows, cols }, wide[2] = { rows, cols * w };
    l8_tensor *a, *g, *s;
    if (l8_tensor_empty(ctx, L8_F32, 2, small, &a) || l8_tensor_empty(ctx, L8_F32, 2, wide, &g) ||
        l8_tensor_empty(ctx, L8_F32, 2, small, &s))
        return fail(r, "tensors");
    float *pa, *pg, *ps;
    if (l8_tensor_data(a, (void **)&pa) || l8_tensor_data(g, (void **)&pg) ||
        l8_tensor_data(s, (void **)&ps))
        return fail(r, "data");
    size_t n = (size_t)(rows * cols);
    for (size_t i = 0; i < n; i++) pa[i] = val(r, i);
    /* all-reduce (sum) */
    if (l8_comm_all_reduce(c, a, s, L8_REDUCE_SUM, NULL)) return fail(r, "all_reduce");
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < w; q++) want += val(q, i);
        if (ps[i] != want) {
            fprintf(stderr, "rank %d: all_reduce element %zu is %g, want %g\n", r, i, ps[i], want);
            return 1;
        }
    }
    /* gather along the last dimension: [rows, w * cols], rank q's block at column q*cols */
    if (l8_comm_all_gather(c, a, g, -1, NULL)) return fail(r, "all_gather");
    for (int64_t row = 0; row < rows; row++)
        for (int64_t col = 0; col < cols * w; col++) {
            float want = val((int)(col / cols), (size_t)(row * cols + col % cols));
            if (pg[row * cols * w + col] != want) {
                fprintf(stderr, "rank %d: gathered [%lld, %lld] is %g, want %g\n", r,
                        (long long)row, (long long)col, pg[row * cols * w + col], want);
                return 1;
            }
        }
    /* reduce-scatter it back along the last dimension: sum over ranks of our block */
    if (l8_comm_reduce_scatter(c, g, s, L8_REDUCE_SUM, -1, NULL)) return fail(r, "reduce_scatter");
    for (size_t i = 0; i < n; i++)
        if (ps[i] != (float)w * val(r, i)) {
            fprintf(stderr, "rank %d: reduce_scatter element %zu is %g, want %g\n", r, i, ps[i],
                    (float)w * val(r, i));
            return 1;
        }
    l8_tensor_destroy(a);
    l8_tensor_destroy(g);
    l8_tensor_destroy(s);
    printf("rank %d of %d: ok\n", r, w);
    return 0;
}

/* Keep the compute stream busy for about a second (bf16 GEMMs), then queue
 * an all-reduce behind it and poll l8_comm_check. */
static int watchdog(l8_ctx *ctx, l8_comm *c)
{
    if (l8_ctx_backend(ctx) != L8_BACKEND_CUDA) {
        fprintf(stderr, "watchdog: needs a CUDA context\n");
        return 2;
    }
    int64_t sq[2] = { 8192, 8192 };
    l8_tensor *a, *b, *d, *t;
    l8_gemm_handle *h;
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    gc.autotune = 0;
    if (l8_tensor_empty(ctx, L8_BF16, 2, sq, &a) || l8_tensor_empty(ctx, L8_BF16, 2, sq, &b) ||
        l8_tensor_empty(ctx, L8_BF16, 2, sq, &d) || l8_tensor_empty(ctx, L8_F32, 1, sq, &t) ||
        l8_gemm_handle_create(ctx, &gc, &h))
        return fail(0, "setup");
    void *p;
    l8_stream *cs = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    if (l8_tensor_data(a, &p) || l8_memset_d8(cs, p, 0, l8_tensor_nbytes(a)) ||
        l8_tensor_data(b, &p) || l8_memset_d8(cs, p, 0, l8_tensor_nbytes(b)) ||
        l8_tensor_data(t, &p) || l8_memset_d8(cs, p, 0, l8_tensor_nbytes(t)) ||
        l8_ctx_synchronize(ctx))
        return fail(0, "setup");
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a, g.b = b, g.d = d;
    for (int i = 0; i < 800; i++)                /* ~1.4 ms each on an H200 */
        if (l8_gemm(h, &g, NULL)) return fail(0, "gemm");
    if (l8_comm_all_reduce(c, t, t, L8_REDUCE_SUM, NULL)) return fail(0, "all_reduce (enqueue)");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    l8_status st = L8_OK;
    double ms = 0;
    while (st == L8_OK && ms < 10000) {
        struct timespec nap = { 0, 10 * 1000000L };
        nanosleep(&nap, NULL);
        st = l8_comm_check(c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    printf("watchdog: l8_comm_check -> %s after %.0f ms: %s\n", l8_status_name(st), ms,
           st == L8_OK ? "(nothing)" : l8_last_error()->message);
    l8_status sync = l8_ctx_synchronize(ctx);   /* the GEMMs finish; the aborted NCCL work too */
    printf("watchdog: the streams then drained with %s\n", sync == L8_OK ? "L8_OK" : l8_last_error_string());
    l8_tensor_destroy(a), l8_tensor_destroy(b), l8_tensor_destroy(d), l8_tensor_destroy(t);
    l8_gemm_handle_destroy(h);
    return st == L8_ERR_TIMEOUT && ms < 5000 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "collectives";
    setvbuf(stdout, NULL, _IOLBF, 0);
    l8_ctx *ctx;
    if (l8_ctx_create(NULL, &ctx)) return fail(-1, "l8_ctx_create");
    l8_comm *c;
    if (l8_comm_init_env(ctx, NULL, &c)) {
        int st = fail(-1, "l8_comm_init_env");
        l8_ctx_destroy(ctx);
        return st;
    }
    int rank = l8_comm_rank(c), rc = 0;
    if (!strcmp(mode, "collectives")) {
        rc = collectives(ctx, c);
    } else if (!strcmp(mode, "join")) {
        rc = l8_comm_barrier(c) ? fail(rank, "barrier") : 0;
        if (!rc) printf("rank %d: joined\n", rank);
    } else if (!strcmp(mode, "watchdog")) {
        rc = watchdog(ctx, c);
    } else if (!strcmp(mode, "exit-early")) {
        if (rank == 1) {
            printf("rank 1: leaving early\n");
            fflush(stdout);
            _exit(0);                        /* no destroy: as a crash would */
        }
        l8_status st = l8_comm_barrier(c);
        fprintf(stderr, "rank %d: barrier -> %s\n", rank, l8_last_error_string());
        rc = st == L8_ERR_COMM || st == L8_ERR_TIMEOUT ? 4 : 1;
    } else {
        fprintf(stderr, "comm_prog: unknown mode '%s'\n", mode);
        rc = 2;
    }
    l8_comm_destroy(c);
    l8_ctx_destroy(ctx);
    return rc;
}
