/* bench_offload.c - `lean8-bench offload`: activation offload on
 * 8 x (Linear(4096, 4096) + GELU), 16384 tokens, in FP8 (HYBRID; the Linear
 * saves X^T in e4m3) and bf16 (the Linear saves a view of its input, the
 * alias case), with each GELU's input saved through the offloader too.
 *
 * Measured in one run:
 *   - pinned bandwidth: raw cuMemcpy{DtoH,HtoD}Async of one saved tensor's
 *     size between a device block and a pinned-pool block;
 *   - offload throughput: the offloader moving a whole step's saved
 *     storages out (save ... wait) and back (backward_layer/restore ... wait)
 *     with nothing else running, as a fraction of that bandwidth (target
 *     >= 0.85);
 *   - step time (forward + backward + recipe update) without offload, with
 *     every layer offloaded (target <= 1.10 x max(step, bytes one way /
 *     bandwidth)), and with all but the last K layers offloaded for K =
 *     1..7 and prefetch distance 1 and 2: the most offloaded setting within
 *     1.10 x the step without offload is reported, with the peak memory it
 *     saves (allocator peak during one step).
 * Times are wall clock around synchronized blocks (median of blocks).
 * Without a GPU it runs the same code at a small size (4 layers, 256
 * features, 128 tokens) in a second, which checks the plumbing, not speed.
 * tools/bench_torch_offload.py runs PyTorch's save_on_cpu on the bf16 model.
 * JSON keys: pinned_*, offload_*, <mode>_*.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"
#include "ops/recipe.h"

#define MAXL 8

typedef struct net {
    l8_ctx *ctx;
    l8_stream *s;
    int L, fp8;
    int64_t T, H;
    l8_recipe *rec;
    l8_linear *lin[MAXL];
    l8_tensor *w[MAXL], *gw[MAXL], *b[MAXL], *gb[MAXL];
    l8_tensor *x, *g;             /* input (T, H) bf16, the last layer's output gradient */
    l8_offload *off;              /* the offloader of the offloaded steps */
    l8_offload *active;           /* the running step's: off or NULL */
    int keep;                     /* last `keep` layers stay */
} net;

/* The layers' hooks go through the net, so that steps without offload and
 * offloaders made later (other prefetch distances) share the layers. */
static l8_status hook_save(void *arg, l8_tensor *t, const char *name, l8_stream *s)
{
    net *n = arg;
    return n->active ? l8_offload_save(n->active, t, name, s) : L8_OK;
}

static l8_status hook_restore(void *arg, l8_tensor *t, const char *name, l8_stream *s)
{
    net *n = arg;
    return n->active ? l8_offload_restore(n->active, t, name, s) : L8_OK;
}

static void hook_release(void *arg, l8_tensor *t, const char *name)
{
    net *n = arg;
    if (n->active) l8_offload_release(n->active, t, name);
}

static void net_free(net *n)
{
    for (int i = 0; i < n->L; i++) {
        l8_linear_destroy(n->lin[i]);
        l8_tensor_destroy(n->w[i]); l8_tensor_destroy(n->gw[i]);
        l8_tensor_destroy(n->b[i]); l8_tensor_destroy(n->gb[i]);
    }
    l8_tensor_destroy(n->x);
    l8_tensor_destroy(n->g);
    l8_recipe_destroy(n->rec);
}

static l8_status net_init(net *n, l8_ctx *ctx, l8_gemm_handle *gh, int fp8, int L, int64_t T,
                          int64_t H, l8_offload *off)
{
    l8_status st = L8_OK;
    memset(n, 0, sizeof *n);
    n->ctx = ctx;
    n->s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    n->L = L; n->fp8 = fp8; n->T = T; n->H = H; n->off = off;
    if (fp8) L8_CHECK(l8_recipe_create(ctx, NULL, &n->rec));
    l8_save_hooks hk = L8_SAVE_HOOKS_INIT;
    hk.save = hook_save;
    hk.restore = hook_restore;
    hk.release = hook_release;
    hk.arg = n;
    for (int i = 0; i < L && st == L8_OK; i++) {
        n->w[i] = bench_mk(ctx, L8_F32, H, H, &st); n->gw[i] = bench_mk(ctx, L8_F32, H, H, &st);
        n->b[i] = bench_mk(ctx, L8_F32, H, 0, &st); n->gb[i] = bench_mk(ctx, L8_F32, H, 0, &st);
        if (st == L8_OK) st = bench_fill(ctx, n->w[i], 0.02f, 10 + (uint64_t)i);
        if (st == L8_OK) st = bench_fill(ctx, n->b[i], 0.02f, 30 + (uint64_t)i);
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        l8_linear_config lc = L8_LINEAR_CONFIG_INIT;
        lc.name = name;
        lc.mode = fp8 ? L8_LINEAR_FP8 : L8_LINEAR_BF16;
        lc.gemm = gh; lc.recipe = n->rec;
        lc.weight = n->w[i]; lc.weight_grad = n->gw[i];
        lc.bias = n->b[i]; lc.bias_grad = n->gb[i]; lc.bias_id = 1;
        lc.save_hooks = &hk;
        if (st == L8_OK) st = l8_linear_create(ctx, &lc, &n->lin[i]);
    }
    n->x = bench_mk(ctx, L8_BF16, T, H, &st);
    n->g = bench_mk(ctx, L8_BF16, T, H, &st);
    if (st == L8_OK) st = bench_fill(ctx, n->x, 1.0f, 1);
    if (st == L8_OK) st = bench_fill(ctx, n->g, 0.01f, 2);
    return st;
}

/* One training step. Activations are fresh each step and dropped once read,
 * so the saved tensors are their storages' only holders. With n->off set,
 * layers below L - keep offload their Linear's saved tensor and their
 * GELU's input. */
static l8_status net_step(net *n, int use_off)
{
    l8_offload *off = use_off ? n->off : NULL;
    l8_status st = L8_OK;
    n->active = off;
    l8_tensor *act = NULL, *pre[MAXL] = { 0 }, *dy = NULL;
    l8_linear_ctx *saved[MAXL] = { 0 };
    int gsaved[MAXL] = { 0 };
    L8_TRY(st, l8_tensor_contiguous(n->x, n->s, &act), out);
    for (int i = 0; i < n->L; i++) {
        int on = off && i < n->L - n->keep;
        L8_TRY(st, l8_linear_begin_step(n->lin[i]), out);
        if (off) L8_TRY(st, l8_offload_forward_layer(off, i, on), out);
        pre[i] = bench_mk(n->ctx, L8_BF16, n->T, n->H, &st);
        if (st == L8_OK) st = l8_linear_forward(n->lin[i], act, pre[i], &saved[i], n->s);
        l8_tensor_destroy(act);
        act = bench_mk(n->ctx, L8_BF16, n->T, n->H, &st);
        if (st == L8_OK) st = l8_gelu(pre[i], act, n->s);
        if (st == L8_OK && on) st = l8_offload_save(off, pre[i], "gelu.x", n->s);
        if (st != L8_OK) goto out;
        gsaved[i] = on;
    }
    l8_tensor_destroy(act);
    act = NULL;
    for (int i = n->L - 1; i >= 0; i--) {
        if (off) L8_TRY(st, l8_offload_backward_layer(off, i), out);
        if (gsaved[i]) L8_TRY(st, l8_offload_restore(off, pre[i], "gelu.x", n->s), out);
        l8_tensor *d = dy ? dy : bench_mk(n->ctx, L8_BF16, n->T, n->H, &st);
        if (st == L8_OK) st = l8_gelu_backward(pre[i], dy ? dy : n->g, d, n->s);
        dy = d;
        if (gsaved[i]) l8_offload_release(off, pre[i], "gelu.x");
        gsaved[i] = 0;
        l8_tensor_destroy(pre[i]);
        pre[i] = NULL;
        l8_tensor *dx = i > 0 ? bench_mk(n->ctx, L8_BF16, n->T, n->H, &st) : NULL;
        if (st == L8_OK) st = l8_linear_backward(n->lin[i], &saved[i], dy, dx, n->s);
        l8_tensor_destroy(dy);
        dy = dx;
        if (st != L8_OK) goto out;
    }
    if (n->rec) st = l8_recipe_update(n->rec, n->s);
out:
    for (int i = 0; i < n->L; i++) {
        if (gsaved[i]) l8_offload_release(off, pre[i], "gelu.x");
        l8_tensor_destroy(pre[i]);
        l8_linear_ctx_destroy(saved[i]);
    }
    l8_tensor_destroy(act);
    l8_tensor_destroy(dy);
    return st;
}

typedef struct result { double ms; double peak_mib; double bytes_out; } result;

/* Median step time over `reps` blocks of `iters` steps, and one step's peak. */
static l8_status time_steps(net *n, int use_off, int reps, int iters, result *r)
{
    double t[16];
    l8_alloc *a = l8_ctx_allocator(n->ctx);
    for (int i = 0; i < 2; i++) L8_CHECK(net_step(n, use_off));     /* warm: pools, plans */
    L8_CHECK(l8_ctx_synchronize(n->ctx));
    for (int rep = 0; rep < reps; rep++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < iters; i++) L8_CHECK(net_step(n, use_off));
        L8_CHECK(l8_ctx_synchronize(n->ctx));
        t[rep] = (bench_now_ns() - t0) / 1e6 / iters;
    }
    r->ms = bench_median(t, (size_t)reps);
    l8_offload_stats os = { .size = sizeof os };
    if (n->off) L8_CHECK(l8_offload_get_stats(n->off, &os));
    double b0 = (double)os.bytes_out;
    l8_alloc_reset_peaks(a);
    L8_CHECK(net_step(n, use_off));
    L8_CHECK(l8_ctx_synchronize(n->ctx));
    if (n->off) L8_CHECK(l8_offload_get_stats(n->off, &os));
    r->bytes_out = (double)os.bytes_out - b0;
    l8_alloc_stats as = { .size = sizeof as };
    L8_CHECK(l8_alloc_get_stats(a, &as));
    r->peak_mib = (double)as.allocated_peak / 1048576.0;
    return L8_OK;
}

/* Raw pinned copies of `bytes` each way (GB/s), and the offloader moving
 * `count` storages of that size out and back with nothing else running. */
static l8_status bandwidth(l8_ctx *ctx, size_t bytes, int count, int reps, double *d2h,
                          double *h2d, double *off_out, double *off_in)
{
    l8_stream *cs = l8_ctx_stream(ctx, L8_STREAM_COPY);
    l8_pinned *pool = l8_ctx_pinned(ctx);
    void *h = NULL, *d = NULL;
    double t[16], u[16];
    l8_status st = L8_OK;
    L8_TRY(st, l8_pinned_alloc(pool, bytes, &h), out);
    L8_TRY(st, l8_ctx_malloc(ctx, bytes, cs, &d), out);
    for (int rep = -1; rep < reps; rep++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < count; i++) L8_TRY(st, l8_memcpy_dtoh(cs, h, d, bytes), out);
        L8_TRY(st, l8_stream_synchronize(cs), out);
        double t1 = bench_now_ns();
        for (int i = 0; i < count; i++) L8_TRY(st, l8_memcpy_htod(cs, d, h, bytes), out);
        L8_TRY(st, l8_stream_synchronize(cs), out);
        if (rep >= 0) {
            t[rep] = (double)bytes * count / (t1 - t0);
            u[rep] = (double)bytes * count / (bench_now_ns() - t1);
        }
    }
    *d2h = bench_median(t, (size_t)reps);
    *h2d = bench_median(u, (size_t)reps);
    l8_offload *off = NULL;
    l8_offload_config oc = L8_OFFLOAD_CONFIG_INIT;
    oc.min_bytes = 0;
    L8_TRY(st, l8_offload_create(ctx, &oc, &off), out);
    l8_tensor *ts[2 * MAXL] = { 0 };
    int64_t sh[1] = { (int64_t)bytes };
    for (int i = 0; i < count && st == L8_OK; i++) st = l8_tensor_empty(ctx, L8_U8, 1, sh, &ts[i]);
    for (int rep = -1; rep < reps && st == L8_OK; rep++) {
        L8_TRY(st, l8_ctx_synchronize(ctx), done);
        double t0 = bench_now_ns();
        for (int i = 0; i < count; i++) L8_TRY(st, l8_offload_save(off, ts[i], "x", NULL), done);
        L8_TRY(st, l8_offload_wait(off), done);
        double t1 = bench_now_ns();
        L8_TRY(st, l8_offload_backward_layer(off, 0), done);   /* all of layer 0 */
        for (int i = 0; i < count; i++) L8_TRY(st, l8_offload_restore(off, ts[i], "x", NULL), done);
        L8_TRY(st, l8_offload_wait(off), done);
        L8_TRY(st, l8_ctx_synchronize(ctx), done);
        if (rep >= 0) {
            t[rep] = (double)bytes * count / (t1 - t0);
            u[rep] = (double)bytes * count / (bench_now_ns() - t1);
        }
        for (int i = 0; i < count; i++) l8_offload_release(off, ts[i], "x");
    }
    *off_out = bench_median(t, (size_t)reps);
    *off_in = bench_median(u, (size_t)reps);
done:
    for (int i = 0; i < count; i++) l8_tensor_destroy(ts[i]);
    l8_offload_destroy(off);
out:
    if (h && l8_pinned_free(pool, h) != L8_OK && st == L8_OK) st = l8_last_error()->status;
    if (d && l8_ctx_free(ctx, d) != L8_OK && st == L8_OK) st = l8_last_error()->status;
    return st;
}

int bench_offload(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    l8_gemm_handle *gh = NULL;
    cfg.device = o->device;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK || l8_gemm_handle_create(ctx, NULL, &gh) != L8_OK) {
        fprintf(stderr, "lean8-bench offload: %s\n", l8_last_error_string());
        l8_ctx_destroy(ctx);
        return 1;
    }
    int gpu = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    int L = gpu ? 8 : 4, reps = gpu ? (o->quick ? 3 : 7) : 2, iters = gpu ? 3 : 1;
    int64_t T = gpu ? 16384 : 128, H = gpu ? 4096 : 256;
    bench_json j = {0};
    int rc = bench_json_open(&j, o->json, "offload",
                             l8_ctx_device_name(ctx));
    printf("== offload: %d x (Linear(%lld, %lld) + GELU), %lld tokens, %s%s\n", L, (long long)H,
           (long long)H, (long long)T, l8_ctx_device_name(ctx),
           gpu ? "" : " (host: a small size that checks the plumbing, not speed)");
    double d2h = 0, h2d = 0, oo = 0, oi = 0;
    size_t act_bytes = (size_t)(T * H * 2);
    l8_status st = bandwidth(ctx, act_bytes, L, gpu ? reps : 2, &d2h, &h2d, &oo, &oi);
    if (st != L8_OK) { fprintf(stderr, "offload bandwidth: %s\n", l8_last_error_string()); rc = 1; }
    if (!rc) {
        printf("  pinned bandwidth (%zu MiB copies): D2H %.1f GB/s, H2D %.1f GB/s\n",
               act_bytes >> 20, d2h, h2d);
        printf("  offloader alone: out %.1f GB/s (%.2f of D2H), back %.1f GB/s (%.2f of H2D)"
               "  [target >= 0.85]\n", oo, oo / d2h, oi, oi / h2d);
        bench_json_num(&j, "pinned_d2h_gbs", d2h);
        bench_json_num(&j, "pinned_h2d_gbs", h2d);
        bench_json_num(&j, "offload_out_gbs", oo);
        bench_json_num(&j, "offload_in_gbs", oi);
        bench_json_num(&j, "offload_out_frac", oo / d2h);
        bench_json_num(&j, "offload_in_frac", oi / h2d);
    }
    for (int mode = 0; mode < 2 && !rc; mode++) {
        const char *mn = mode ? "bf16" : "fp8";
        l8_offload *off = NULL;
        l8_offload_config oc = L8_OFFLOAD_CONFIG_INIT;
        if (!gpu) oc.min_bytes = 0;            /* the host size's tensors are all small */
        net n;
        memset(&n, 0, sizeof n);
        result base = { 0 }, all = { 0 }, best = { 0 }, r;
        int best_k = -1, best_d = 0;
        st = l8_offload_create(ctx, &oc, &off);
        if (st == L8_OK) st = net_init(&n, ctx, gh, !mode, L, T, H, off);
        if (st == L8_OK) st = time_steps(&n, 0, reps, iters, &base);
        n.keep = 0;
        if (st == L8_OK) st = time_steps(&n, 1, reps, iters, &all);
        double bound = all.bytes_out / (d2h * 1e6);              /* ms one way */
        if (bound < base.ms) bound = base.ms;
        for (int k = 1; k < L && st == L8_OK; k++) {
            for (int d = 1; d <= 2 && st == L8_OK; d++) {
                l8_offload_destroy(off);
                oc.prefetch_layers = d;
                off = NULL;
                st = l8_offload_create(ctx, &oc, &off);
                n.off = off;
                n.keep = k;
                if (st == L8_OK) st = time_steps(&n, 1, reps, iters, &r);
                if (st == L8_OK && r.ms <= 1.10 * base.ms && best_k < 0) {
                    best = r; best_k = k; best_d = d;
                }
            }
            if (best_k >= 0) break;            /* the most offloaded setting that hides */
        }
        if (st != L8_OK) {
            fprintf(stderr, "offload %s: %s\n", mn, l8_last_error_string());
            rc = 1;
        } else {
            printf("  %s: step %.2f ms, peak %.1f MiB without offload\n", mn, base.ms, base.peak_mib);
            printf("  %s: all offloaded (%.1f MiB out): step %.2f ms = %.2f x max(step, bytes/D2H"
                   " = %.2f ms) [target <= 1.10], peak %.1f MiB (saves %.1f MiB)\n", mn,
                   all.bytes_out / 1048576.0, all.ms, all.ms / bound, bound, all.peak_mib,
                   base.peak_mib - all.peak_mib);
            if (best_k >= 0)
                printf("  %s: all but the last %d, prefetch %d: step %.2f ms = %.2f x without"
                       " [target <= 1.10], peak %.1f MiB (saves %.1f MiB)\n", mn, best_k, best_d,
                       best.ms, best.ms / base.ms, best.peak_mib, base.peak_mib - best.peak_mib);
            else
                printf("  %s: no 'all but the last K' setting stayed within 1.10 x\n", mn);
            char key[64];
#define NUM(k, v) do { snprintf(key, sizeof key, "%s_%s", mn, k); bench_json_num(&j, key, v); } while (0)
            NUM("step_base_ms", base.ms);
            NUM("peak_base_mib", base.peak_mib);
            NUM("step_all_ms", all.ms);
            NUM("all_bound_ms", bound);
            NUM("all_ratio", all.ms / bound);
            NUM("bytes_out_mib", all.bytes_out / 1048576.0);
            NUM("peak_all_mib", all.peak_mib);
            NUM("saved_all_mib", base.peak_mib - all.peak_mib);
            NUM("best_keep", best_k);
            NUM("best_prefetch", best_d);
            if (best_k >= 0) {
                NUM("step_best_ms", best.ms);
                NUM("best_ratio", best.ms / base.ms);
                NUM("peak_best_mib", best.peak_mib);
                NUM("saved_best_mib", base.peak_mib - best.peak_mib);
            }
#undef NUM
        }
        net_free(&n);
        l8_offload_destroy(off);
    }
    bench_json_close(&j);
    l8_gemm_handle_destroy(gh);
    l8_ctx_destroy(ctx);
    return rc;
}
