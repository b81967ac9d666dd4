/* bench_linear.c - `lean8-bench linear`: one Linear layer's forward +
 * backward (fprop, dgrad, wgrad into f32 main_grad, bias) for 16384 tokens,
 * 4096 -> 4096 and 4096 -> 16384, in FP8 (HYBRID delayed scaling, with the
 * recipe update every step) and bf16; timed with CUDA events, median of
 * blocks. tools/bench_torch_linear.py times PyTorch's bf16 nn.Linear on the
 * same shapes in the same run; TARGETS.md wants FP8 >= 1.8x PyTorch bf16.
 * JSON keys: linear_<mode>_<T>x<K>x<N>_ms.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"
#include "ops/recipe.h"

static const int64_t k_shapes[][3] = { { 16384, 4096, 4096 }, { 16384, 4096, 16384 } };

static double run_shape(l8_ctx *ctx, l8_gemm_handle *gh, int fp8, const int64_t *shp, int reps, int iters)
{
    int64_t T = shp[0], K = shp[1], N = shp[2];
    l8_status st = L8_OK;
    l8_recipe *rec = NULL;
    l8_linear *lin = NULL;
    l8_event *e0 = NULL, *e1 = NULL;
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    double *t = calloc((size_t)reps, sizeof *t), ms = -1;
    l8_tensor *w = bench_mk(ctx, L8_F32, N, K, &st), *gw = bench_mk(ctx, L8_F32, N, K, &st),
              *b = bench_mk(ctx, L8_F32, N, 0, &st), *gb = bench_mk(ctx, L8_F32, N, 0, &st),
              *x = bench_mk(ctx, L8_BF16, T, K, &st), *y = bench_mk(ctx, L8_BF16, T, N, &st),
              *dy = bench_mk(ctx, L8_BF16, T, N, &st), *dx = bench_mk(ctx, L8_BF16, T, K, &st);
    if (st == L8_OK) st = bench_fill(ctx, w, 0.02f, 1);
    if (st == L8_OK) st = bench_fill(ctx, b, 0.02f, 2);
    if (st == L8_OK) st = bench_fill(ctx, x, 1.0f, 3);
    if (st == L8_OK) st = bench_fill(ctx, dy, 0.01f, 4);
    if (st == L8_OK && fp8) st = l8_recipe_create(ctx, NULL, &rec);
    l8_linear_config lc = L8_LINEAR_CONFIG_INIT;
    lc.name = "bench";
    lc.mode = fp8 ? L8_LINEAR_FP8 : L8_LINEAR_BF16;
    lc.gemm = gh;
    lc.recipe = rec;
    lc.weight = w;
    lc.weight_grad = gw;
    lc.bias = b;
    lc.bias_grad = gb;
    lc.bias_id = 1;
    if (st == L8_OK) st = l8_linear_create(ctx, &lc, &lin);
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e0);
    if (st == L8_OK) st = l8_event_create(ctx, 1, &e1);
    /* one training step: new weights, forward, backward, scale update */
    for (int r = -1; st == L8_OK && r < reps; r++) {
        float el = 0;
        if (r >= 0) st = l8_event_record(e0, s);
        for (int i = 0; st == L8_OK && i < (r < 0 ? 3 : iters); i++) {
            l8_linear_ctx *saved = NULL;
            st = l8_linear_begin_step(lin);
            if (st == L8_OK) st = l8_linear_forward(lin, x, y, &saved, s);
            if (st == L8_OK) st = l8_linear_backward(lin, &saved, dy, dx, s);
            l8_linear_ctx_destroy(saved);
            if (st == L8_OK && rec) st = l8_recipe_update(rec, s);
        }
        if (r < 0) { if (st == L8_OK) st = l8_stream_synchronize(s); continue; }
        if (st == L8_OK) st = l8_event_record(e1, s);
        if (st == L8_OK) st = l8_event_synchronize(e1);
        if (st == L8_OK) st = l8_event_elapsed_ms(e0, e1, &el);
        t[r] = el / iters;
    }
    if (st == L8_OK) ms = bench_median(t, (size_t)reps);
    else fprintf(stderr, "linear %s: %s\n", fp8 ? "fp8" : "bf16", l8_last_error_string());
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    l8_linear_destroy(lin);
    l8_recipe_destroy(rec);
    l8_tensor *all[] = { w, gw, b, gb, x, y, dy, dx };
    for (size_t i = 0; i < 8; i++) l8_tensor_destroy(all[i]);
    free(t);
    return ms;
}

int bench_linear(const bench_opts *o)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    l8_gemm_handle *gh = NULL;
    cfg.device = o->device;
    if (l8_ctx_create(&cfg, &ctx) != L8_OK || l8_gemm_handle_create(ctx, NULL, &gh) != L8_OK) {
        fprintf(stderr, "lean8-bench linear: %s\n", l8_last_error_string());
        l8_ctx_destroy(ctx);
        return 1;
    }
    if (l8_ctx_backend(ctx) != L8_BACKEND_CUDA) {
        printf("== linear: skipped: needs a CUDA device (the shapes are GPU-sized)\n");
        l8_gemm_handle_destroy(gh);
        l8_ctx_destroy(ctx);
        return 0;
    }
    bench_json j = {0};
    int rc = bench_json_open(&j, o->json, "linear", l8_ctx_device_name(ctx));
    int reps = o->quick ? 5 : 15, iters = 5;
    printf("== linear: forward + backward (fprop, dgrad, wgrad into f32 main_grad, bias), %s\n",
           l8_ctx_device_name(ctx));
    printf("  %-22s %10s %10s %10s\n", "T x K -> N", "fp8 ms", "bf16 ms", "fp8/bf16");
    for (size_t i = 0; i < 2 && !rc; i++) {
        double f = run_shape(ctx, gh, 1, k_shapes[i], reps, iters);
        double b = run_shape(ctx, gh, 0, k_shapes[i], reps, iters);
        if (f <= 0 || b <= 0) { rc = 1; break; }
        char key[96];
        printf("  %6lld x %5lld -> %5lld %10.3f %10.3f %10.2fx\n", (long long)k_shapes[i][0],
               (long long)k_shapes[i][1], (long long)k_shapes[i][2], f, b, b / f);
        snprintf(key, sizeof key, "linear_fp8_%lldx%lldx%lld_ms", (long long)k_shapes[i][0],
                 (long long)k_shapes[i][1], (long long)k_shapes[i][2]);
        bench_json_num(&j, key, f);
        snprintf(key, sizeof key, "linear_bf16_%lldx%lldx%lld_ms", (long long)k_shapes[i][0],
                 (long long)k_shapes[i][1], (long long)k_shapes[i][2]);
        bench_json_num(&j, key, b);
    }
    bench_json_close(&j);
    l8_gemm_handle_destroy(gh);
    l8_ctx_destroy(ctx);
    return rc;
}
