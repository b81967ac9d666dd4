/* bench_cast.c - `lean8-bench cast`: the FP8 cast kernels against the
 * device's copy bandwidth, measured in the same binary and run.
 *
 * Ceiling: cuMemcpyDtoDAsync of 1 GiB, bandwidth = (read + write) / time.
 * Ops (bytes counted = input read + every output written):
 *   cast        in [R,C] -> fp8 [R,C], amax fused            (e+1 bytes/elem)
 *   cast_t      in [R,C] -> fp8 [R,C] + fp8^T [C,R], amax    (e+2)
 *   cast_t_db   cast_t + dbias [C] (column sums)             (e+2, + dbias)
 *   dequant     fp8 [R,C] -> bf16 [R,C]                      (1+2)
 *   transpose   fp8 [R,C] -> fp8 [C,R]                       (1+1)
 *   cast_t_pad, cast_t_db_pad, transpose_pad: the same ops into
 *               row-padded outputs (ops/cast.h's GEMM-ready layout): fp8^T
 *               [C, R16] where R % 16 != 0 (R16 = R rounded up to 16), fp8
 *               [R, C16] where C % 16 != 0 (the cast ops); for shapes that
 *               need either; bytes counted as above (the padding's zeros
 *               are not counted)
 * on bf16 and f32 inputs, 8192x8192 and 16384x4096, and tail shapes (rows or
 * columns not a multiple of 16: 8191x8200, 8200x8192, 8192x8200, 8191x8191).
 * Each: warm-up, then `reps` blocks of `iters` launches timed with events;
 * median block. JSON keys: <op>_<dtype>_<R>x<C>_tbps and _ratio (to the copy).
 * Then the small shapes of a training step (lean8-train 784-512-512-10 at
 * batch 256: activations 256 x 784/512/16, weights 512 x 784, 16 x 512;
 * 128 x 256 and 1024 x 512: one and eight tile rows of dbias),
 * where a launch is latency, not bandwidth: cast_t and cast_t_db in us per
 * launch, 50 launches replayed from one CUDA graph (as lean8-train runs a
 * step; launched eagerly the host's launch rate would be timed instead),
 * median of `reps` replays (keys <op>_<dtype>_<R>x<C>_us), with the amax
 * accumulated as a training step does (no memset before each cast); each
 * with the kernel the library picks (for these, the small-tile kernel of
 * ptx/cast_transpose_sm.ptx.in) and with the 128 x 128 tile kernel alone
 * (keys ..._tile_us).
 * tools/bench_torch_cast.py runs the same ops in PyTorch (eager and
 * torch.compile) with the same keys for the side-by-side ratios.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/cast.h"
#include "runtime/graph.h"
#include "ops/internal.h"         /* l8i_cast_sm_max_tiles: the tile kernel alone, for comparison */

typedef struct shape { int64_t r, c; } shape;
/* aligned, then tails: rows odd, rows % 16 == 8, columns % 16 == 8, both odd */
static const shape k_shapes[] = { { 8192, 8192 }, { 16384, 4096 }, { 8191, 8200 },
                                  { 8200, 8192 }, { 8192, 8200 }, { 8191, 8191 } };
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])
static const shape k_small[] = { { 256, 784 }, { 256, 512 }, { 256, 16 }, { 512, 784 },
                                 { 16, 512 }, { 128, 256 }, { 1024, 512 } };
#define NSMALL (sizeof k_small / sizeof k_small[0])

enum { OP_CAST, OP_CAST_T, OP_CAST_T_DB, OP_DEQUANT, OP_TRANSPOSE, OP_CAST_T_PAD,
       OP_CAST_T_DB_PAD, OP_TRANSPOSE_PAD, NOPS };
static const char *const k_op_names[NOPS] = { "cast", "cast_t", "cast_t_db", "dequant", "transpose",
                                              "cast_t_pad", "cast_t_db_pad", "transpose_pad" };

typedef struct bufs {
    l8_tensor *in, *q, *qt, *db, *deq;
    l8_tensor *qtp;               /* qt row-padded to R16 (rows % 16 != 0), else NULL */
    l8_tensor *qp;                /* q row-padded to C16 (cols % 16 != 0), else NULL */
} bufs;

/* fl: 0 (amax zeroed first: a memset before each cast) or
 * L8_CAST_ACCUMULATE_AMAX (a training step's casts: no memset). */
static l8_status run_op(int op, bufs *b, unsigned fl, l8_stream *s)
{
    switch (op) {
    case OP_CAST: return l8_fp8_cast(b->in, b->q, fl, s);
    case OP_CAST_T: return l8_fp8_cast_transpose(b->in, b->q, b->qt, fl, s);
    case OP_CAST_T_DB: return l8_fp8_cast_transpose_dbias(b->in, b->q, b->qt, b->db, fl, s);
    case OP_DEQUANT: return l8_fp8_dequantize(b->q, b->deq, s);
    case OP_TRANSPOSE: return l8_fp8_transpose(b->q, b->qt, s);
    case OP_CAST_T_PAD:
        return l8_fp8_cast_transpose(b->in, b->qp ? b->qp : b->q, b->qtp ? b->qtp : b->qt, fl, s);
    case OP_CAST_T_DB_PAD:
        return l8_fp8_cast_transpose_dbias(b->in, b->qp ? b->qp : b->q, b->qtp ? b->qtp : b->qt,
                                           b->db, fl, s);
    default: return l8_fp8_transpose(b->q, b->qtp, s);
    }
}

static double op_bytes(int op, const shape *sh, size_t es)
{
    double n = (double)sh->r * (double)sh->c;
    switch (op) {
    case OP_CAST: return n * ((double)es + 1);
    case OP_CAST_T: case OP_CAST_T_PAD: return n * ((double)es + 2);
    case OP_CAST_T_DB: case OP_CAST_T_DB_PAD: return n * ((double)es + 2) + (double)sh->c * 4;
    case OP_DEQUANT: return n * 3;
    default: return n * 2;
    }
}

/* Median ms per launch of fn over reps blocks of iters launches. */
static double time_ms(l8_ctx *ctx, int op, bufs *b, int reps, int iters)
{
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)reps, sizeof *t), m = -1;
    if (!t || l8_event_create(ctx, 1, &e0) != L8_OK || l8_event_create(ctx, 1, &e1) != L8_OK)
        goto out;
    for (int i = 0; i < 3; i++)
        if (run_op(op, b, 0, s) != L8_OK) goto out;
    int host = l8_ctx_backend(ctx) == L8_BACKEND_HOST;   /* host: events don't time */
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        double t0 = bench_now_ns();
        if (l8_event_record(e0, s) != L8_OK) goto out;
        for (int i = 0; i < iters; i++)
            if (run_op(op, b, 0, s) != L8_OK) goto out;
        if (l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
            l8_event_elapsed_ms(e0, e1, &ms) != L8_OK)
            goto out;
        if (host) ms = (float)((bench_now_ns() - t0) * 1e-6);
        t[r] = ms / iters;
    }
    m = bench_median(t, (size_t)reps);
out:
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    return m;
}

/* us per launch of op, SMALL_LAUNCHES launches captured in one graph and
 * replayed reps times (median); -1 on an error. */
#define SMALL_LAUNCHES 50
typedef struct small_job { int op; bufs *b; } small_job;

static l8_status small_fn(void *arg, l8_stream *s)
{
    small_job *j = arg;
    for (int i = 0; i < SMALL_LAUNCHES; i++)
        L8_CHECK(run_op(j->op, j->b, L8_CAST_ACCUMULATE_AMAX, s));
    return L8_OK;
}

static double graph_us(l8_ctx *ctx, int op, bufs *b, int reps)
{
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_graph *g = NULL;
    l8_event *e0 = NULL, *e1 = NULL;
    small_job job = { op, b };
    double *t = calloc((size_t)reps, sizeof *t), us = -1;
    if (!t || l8_graph_create(ctx, s, &g) != L8_OK || l8_graph_warmup(g, small_fn, &job) != L8_OK ||
        l8_graph_capture(g, small_fn, &job) != L8_OK || l8_graph_launch(g) != L8_OK ||
        l8_event_create(ctx, 1, &e0) != L8_OK || l8_event_create(ctx, 1, &e1) != L8_OK)
        goto out;
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        if (l8_event_record(e0, s) != L8_OK || l8_graph_launch(g) != L8_OK ||
            l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
            l8_event_elapsed_ms(e0, e1, &ms) != L8_OK)
            goto out;
        t[r] = ms * 1e3 / SMALL_LAUNCHES;
    }
    us = bench_median(t, (size_t)reps);
out:
    free(t);
    l8_graph_destroy(g);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    return us;
}

static double copy_tbps(l8_ctx *ctx, int reps)
{
    const size_t n = 1u << 30;
    void *a = NULL, *b = NULL;
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)reps, sizeof *t), bw = -1;
    if (!t || l8_ctx_malloc(ctx, n, s, &a) != L8_OK || l8_ctx_malloc(ctx, n, s, &b) != L8_OK ||
        l8_memset_d8(s, a, 0x3c, n) != L8_OK || l8_event_create(ctx, 1, &e0) != L8_OK ||
        l8_event_create(ctx, 1, &e1) != L8_OK)
        goto out;
    for (int r = 0; r < reps + 2; r++) {
        float ms = 0;
        if (l8_event_record(e0, s) != L8_OK || l8_memcpy_dtod(s, b, a, n) != L8_OK ||
            l8_event_record(e1, s) != L8_OK || l8_event_synchronize(e1) != L8_OK ||
            l8_event_elapsed_ms(e0, e1, &ms) != L8_OK)
            goto out;
        if (r >= 2) t[r - 2] = ms;
    }
    bw = 2.0 * (double)n / (bench_median(t, (size_t)reps) * 1e-3) / 1e12;
out:
    free(t);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    if (l8_ctx_free(ctx, a) != L8_OK || l8_ctx_free(ctx, b) != L8_OK) bw = -1;
    return bw;
}

static void free_bufs(bufs *b)
{
    l8_tensor_destroy(b->in);
    l8_tensor_destroy(b->q);
    l8_tensor_destroy(b->qt);
    l8_tensor_destroy(b->db);
    l8_tensor_destroy(b->deq);
    l8_tensor_destroy(b->qtp);
    l8_tensor_destroy(b->qp);
    memset(b, 0, sizeof *b);
}

/* Random inputs of about unit size (never zeros), uploaded once. */
static l8_status make_bufs(l8_ctx *ctx, l8_dtype dt, const shape *sh, l8_fp8_meta *meta, bufs *b)
{
    int64_t rc[2] = { sh->r, sh->c }, cr[2] = { sh->c, sh->r }, c1[1] = { sh->c };
    size_t n = (size_t)(sh->r * sh->c), es = l8_dtype_size(dt);
    l8_status st;
    uint8_t *host = malloc(n * es);
    if (!host) return L8_FAIL(L8_ERR_OOM, "bench: host buffer");
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        float v = (float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 22);   /* [-2, 2) */
        if (v == 0.0f) v = 0.5f;
        if (dt == L8_F32) memcpy(host + i * 4, &v, 4);
        else { uint32_t u; memcpy(&u, &v, 4); uint16_t h = (uint16_t)(u >> 16); memcpy(host + i * 2, &h, 2); }
    }
    L8_TRY(st, l8_tensor_empty(ctx, dt, 2, rc, &b->in), fail);
    L8_TRY(st, l8_tensor_copy_from_host(b->in, host, n * es, NULL), fail);
    L8_TRY(st, l8_tensor_empty(ctx, L8_E4M3, 2, rc, &b->q), fail);
    L8_TRY(st, l8_tensor_empty(ctx, L8_E4M3, 2, cr, &b->qt), fail);
    L8_TRY(st, l8_tensor_empty(ctx, L8_F32, 1, c1, &b->db), fail);
    L8_TRY(st, l8_tensor_empty(ctx, L8_BF16, 2, rc, &b->deq), fail);
    L8_TRY(st, l8_tensor_set_fp8_meta(b->q, meta), fail);
    L8_TRY(st, l8_tensor_set_fp8_meta(b->qt, meta), fail);
    /* the padded outputs: [C, R16] and [R, C16], narrowed to R and C columns */
    for (int t = 0; t < 2; t++) {
        int64_t d0 = t ? sh->r : sh->c, d1 = t ? sh->c : sh->r;
        int64_t pd[2] = { d0, (d1 + 15) / 16 * 16 };
        l8_tensor *whole = NULL, **v = t ? &b->qp : &b->qtp;
        if (d1 % 16 == 0) continue;
        L8_TRY(st, l8_tensor_empty(ctx, L8_E4M3, 2, pd, &whole), fail);
        st = l8_tensor_narrow(whole, 1, 0, d1, v);
        l8_tensor_destroy(whole);
        if (st != L8_OK) goto fail;
        L8_TRY(st, l8_tensor_set_fp8_meta(*v, meta), fail);
    }
    L8_TRY(st, l8_ctx_synchronize(ctx), fail);
    free(host);
    return L8_OK;
fail:
    free(host);
    free_bufs(b);
    return st;
}

int bench_cast(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    l8_fp8_meta *meta = NULL;
    cfg.device = o->device;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK || l8_fp8_meta_create(ctx, &meta) != L8_OK ||
        l8_fp8_meta_set(meta, 64.0f, 1.0f / 64.0f, 0.0f) != L8_OK) {
        fprintf(stderr, "lean8-bench cast: %s\n", l8_last_error_string());
        l8_fp8_meta_release(meta);
        l8_ctx_destroy(ctx);
        return 1;
    }
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    if (!cuda) {                        /* bandwidth of the host reference means nothing */
        printf("== cast: skipped: needs a CUDA device (the host reference is not a benchmark)\n");
        l8_fp8_meta_release(meta);
        l8_ctx_destroy(ctx);
        return 0;
    }
    int reps = o->quick ? 5 : 21, iters = 20;
    bench_json j = {0};
    int rc = bench_json_open(&j, o->json, "cast", l8_ctx_device_name(ctx));
    double copy = cuda ? copy_tbps(ctx, reps) : 0;
    printf("== cast (%s): device copy %.2f TB/s (read + write, 1 GiB, same run)\n",
           l8_ctx_device_name(ctx), copy);
    bench_json_num(&j, "copy_tbps", copy);
    printf("  %-10s %-5s %-12s %10s %10s %8s\n", "op", "in", "shape", "ms", "TB/s", "x copy");
    const l8_dtype dts[] = { L8_BF16, L8_F32 };
    for (size_t di = 0; di < 2 && !rc; di++)
        for (size_t si = 0; si < NSHAPES && !rc; si++) {
            bufs b = {0};
            if (!cuda && si > 0) break;                   /* host: one shape is plenty */
            if (make_bufs(ctx, dts[di], &k_shapes[si], meta, &b) != L8_OK) {
                fprintf(stderr, "buffers: %s\n", l8_last_error_string());
                rc = 1;
                break;
            }
            for (int op = 0; op < NOPS; op++) {
                if (di > 0 && (op == OP_DEQUANT || op == OP_TRANSPOSE || op == OP_TRANSPOSE_PAD))
                    continue;                                           /* dtype-free */
                if (op >= OP_CAST_T_PAD && !b.qtp && (op == OP_TRANSPOSE_PAD || !b.qp))
                    continue;                                           /* nothing to pad */
                double ms = time_ms(ctx, op, &b, reps, iters);
                if (ms <= 0) { fprintf(stderr, "%s: %s\n", k_op_names[op], l8_last_error_string()); rc = 1; break; }
                double tbps = op_bytes(op, &k_shapes[si], l8_dtype_size(dts[di])) / (ms * 1e-3) / 1e12;
                char shp[32], key[96];
                snprintf(shp, sizeof shp, "%lldx%lld", (long long)k_shapes[si].r, (long long)k_shapes[si].c);
                printf("  %-10s %-5s %-12s %10.4f %10.3f %8.3f\n", k_op_names[op], l8_dtype_name(dts[di]),
                       shp, ms, tbps, copy > 0 ? tbps / copy : 0);
                snprintf(key, sizeof key, "%s_%s_%s_ms", k_op_names[op], l8_dtype_name(dts[di]), shp);
                bench_json_num(&j, key, ms);
                snprintf(key, sizeof key, "%s_%s_%s_tbps", k_op_names[op], l8_dtype_name(dts[di]), shp);
                bench_json_num(&j, key, tbps);
                snprintf(key, sizeof key, "%s_%s_%s_ratio", k_op_names[op], l8_dtype_name(dts[di]), shp);
                bench_json_num(&j, key, copy > 0 ? tbps / copy : 0);
            }
            free_bufs(&b);
        }
    printf("  small shapes (a training step's): us per launch, %d launches in one CUDA graph, amax\n"
           "  accumulated (no memset); the library's choice, then the 128 x 128 tile kernel alone\n"
           "  op         in    shape              us     tile us\n", SMALL_LAUNCHES);
    for (size_t di = 0; di < 2 && !rc; di++)
        for (size_t si = 0; si < NSMALL && !rc; si++) {
            bufs b = {0};
            if (make_bufs(ctx, dts[di], &k_small[si], meta, &b) != L8_OK) {
                fprintf(stderr, "buffers: %s\n", l8_last_error_string());
                rc = 1;
                break;
            }
            for (int op = OP_CAST_T; op <= OP_CAST_T_DB; op++) {
                /* the library's choice, then the 128 x 128 tile kernel alone */
                const int dflt = l8i_cast_sm_max_tiles;
                double us = graph_us(ctx, op, &b, reps);
                l8i_cast_sm_max_tiles = 0;
                double us_tile = us > 0 ? graph_us(ctx, op, &b, reps) : -1;
                l8i_cast_sm_max_tiles = dflt;
                if (us <= 0 || us_tile <= 0) { fprintf(stderr, "%s: %s\n", k_op_names[op], l8_last_error_string()); rc = 1; break; }
                char shp[32], key[96];
                snprintf(shp, sizeof shp, "%lldx%lld", (long long)k_small[si].r, (long long)k_small[si].c);
                printf("  %-10s %-5s %-12s %10.2f %10.2f\n", k_op_names[op], l8_dtype_name(dts[di]), shp,
                       us, us_tile);
                snprintf(key, sizeof key, "%s_%s_%s_us", k_op_names[op], l8_dtype_name(dts[di]), shp);
                bench_json_num(&j, key, us);
                snprintf(key, sizeof key, "%s_%s_%s_tile_us", k_op_names[op], l8_dtype_name(dts[di]), shp);
                bench_json_num(&j, key, us_tile);
            }
            free_bufs(&b);
        }
    if (cuda) printf("  targets: cast_t bf16 8192x8192 >= 0.85 x copy; cast >= 0.90 x copy;\n"
                     "           tails (rows or columns %% 16 != 0): cast_t, cast_t_db, transpose >= 0.75\n"
                     "           (_pad: outputs row-padded, the GEMM-ready layout of ops/cast.h)\n");
    bench_json_close(&j);
    l8_fp8_meta_release(meta);
    l8_ctx_destroy(ctx);
    return rc;
}
