/* bench_linear.c - `lean8-bench linear`: one Linear layer's forward +
 * backward (fprop, dgrad, wgrad into f32 main_grad, bias) for 16384 tokens,
 * 4096 -> 4096 and 4096 -> 16384, and for 16383 tokens (an odd count: X^T
 * and dY^T row-padded to 16384 for the FP8 wgrad), 4096 -> 4096, in FP8
 * (HYBRID delayed scaling, with the recipe update every step) and bf16;
 * timed with CUDA events, median of blocks. Variants: eager (one call per
 * op) and the step replayed from one CUDA graph; the default GEMM handle and
 * an autotuned one (what the default handle does with a warm
 * L8_GEMM_CACHE); the FP8 eager step also by stage
 * (events between begin_step, forward, backward, recipe update under the
 * same sustained load). tools/bench_torch_linear.py times PyTorch's bf16
 * nn.Linear on the same shapes, eager and in a CUDA graph, in the same run.
 * JSON keys: linear_<variant>_<T>x<K>x<N>_ms (variant fp8, fp8_graph,
 * fp8_tuned, fp8_tuned_graph, bf16, bf16_graph, bf16_tuned_graph) and
 * linear_fp8_stage_<stage>_<T>x<K>x<N>_ms.
 */
#include <stdlib.h>
#include <string.h>
#include "tools/bench.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"
#include "ops/recipe.h"
#include "runtime/graph.h"

static const int64_t k_shapes[][3] = {
    { 16384, 4096, 4096 }, { 16384, 4096, 16384 }, { 16383, 4096, 4096 },
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

enum { STAGES = 4, STAGE_STEPS = 5 };   /* stage marks per step; steps per timed block */

/* One training step of the layer: what each variant times. */
typedef struct step_arg {
    l8_linear *lin;
    l8_recipe *rec;
    l8_tensor *x, *y, *dy, *dx;
    l8_event *ev[STAGES];         /* stage marks (NULL: none): after begin_step, forward,
                                     backward, recipe update */
} step_arg;

static l8_status one_step(void *arg, l8_stream *s)
{
    step_arg *a = arg;
    l8_linear_ctx *saved = NULL;
    l8_status st = l8_linear_begin_step(a->lin);
    if (st == L8_OK && a->ev[0]) st = l8_event_record(a->ev[0], s);
    if (st == L8_OK) st = l8_linear_forward(a->lin, a->x, a->y, &saved, s);
    if (st == L8_OK && a->ev[1]) st = l8_event_record(a->ev[1], s);
    if (st == L8_OK) st = l8_linear_backward(a->lin, &saved, a->dy, a->dx, s);
    l8_linear_ctx_destroy(saved);
    if (st == L8_OK && a->ev[2]) st = l8_event_record(a->ev[2], s);
    if (st == L8_OK && a->rec) st = l8_recipe_update(a->rec, s);
    if (st == L8_OK && a->ev[3]) st = l8_event_record(a->ev[3], s);
    return st;
}

static const char *const k_stage_names[STAGES] = { "begin_step", "forward", "backward", "recipe" };

/* The layer's step on one shape: median ms per step over reps blocks of
 * iters steps, eager (graph 0) or replaying one CUDA graph of the step
 * (graph 1). With stage_ms (eager only), also the mean ms of each stage
 * under the same sustained load, from events between the stages. */
static double run_shape(l8_ctx *ctx, l8_gemm_handle *gh, int fp8, int graph, const int64_t *shp,
                        int reps, int iters, double *stage_ms)
{
    int64_t T = shp[0], K = shp[1], N = shp[2];
    l8_status st = L8_OK;
    l8_recipe *rec = NULL;
    l8_linear *lin = NULL;
    l8_graph *g = NULL;
    l8_event *e0 = NULL, *e1 = NULL, *marks[STAGE_STEPS][STAGES] = { { NULL } };
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    double *t = calloc((size_t)reps, sizeof *t), ms = -1;
    l8_tensor *w = bench_mk(ctx, L8_F32, N, K, &st), *gw = bench_mk(ctx, L8_F32, N, K, &st),
              *b = bench_mk(ctx, L8_F32, N, 0, &st), *gb = bench_mk(ctx, L8_F32, N, 0, &st),
              *x = bench_mk(ctx, L8_BF16, T, K, &st), *y = bench_mk(ctx, L8_BF16, T, N, &st),
              *dy = bench_mk(ctx, L8_BF16, T, N, &st), *dx = bench_mk(ctx, L8_BF16, T, K, &st);
    if (!t && st == L8_OK) st = L8_FAIL(L8_ERR_OOM, "bench linear: times");
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
    step_arg a = { lin, rec, x, y, dy, dx, { NULL } };
    /* warm-up: plans (and their tuning), workspaces, kernels; then the graph */
    for (int i = 0; st == L8_OK && i < 3; i++) st = one_step(&a, s);
    if (st == L8_OK) st = l8_stream_synchronize(s);
    if (st == L8_OK && graph) st = l8_graph_create(ctx, s, &g);
    if (st == L8_OK && graph) st = l8_graph_warmup(g, one_step, &a);
    if (st == L8_OK && graph) st = l8_graph_capture(g, one_step, &a);
    for (int r = 0; st == L8_OK && r < reps; r++) {
        float el = 0;
        st = l8_event_record(e0, s);
        for (int i = 0; st == L8_OK && i < iters; i++) st = graph ? l8_graph_launch(g) : one_step(&a, s);
        if (st == L8_OK) st = l8_event_record(e1, s);
        if (st == L8_OK) st = l8_event_synchronize(e1);
        if (st == L8_OK) st = l8_event_elapsed_ms(e0, e1, &el);
        t[r] = el / iters;
    }
    if (st == L8_OK) ms = bench_median(t, (size_t)reps);
    /* stages: blocks of STAGE_STEPS steps with events between the stages (eager) */
    if (st == L8_OK && stage_ms && !graph) {
        double sum[STAGES] = { 0 };
        int n = 0;
        for (int i = 0; st == L8_OK && i < STAGE_STEPS; i++)
            for (int k = 0; st == L8_OK && k < STAGES; k++) st = l8_event_create(ctx, 1, &marks[i][k]);
        for (int r = 0; st == L8_OK && r < reps; r++) {
            st = l8_event_record(e0, s);
            for (int i = 0; st == L8_OK && i < STAGE_STEPS; i++) {
                memcpy(a.ev, marks[i], sizeof a.ev);
                st = one_step(&a, s);
            }
            if (st == L8_OK) st = l8_event_synchronize(marks[STAGE_STEPS - 1][STAGES - 1]);
            for (int i = 0; st == L8_OK && i < STAGE_STEPS; i++)
                for (int k = 0; st == L8_OK && k < STAGES; k++) {
                    float el = 0;
                    l8_event *from = k ? marks[i][k - 1] : i ? marks[i - 1][STAGES - 1] : e0;
                    st = l8_event_elapsed_ms(from, marks[i][k], &el);
                    sum[k] += el;
                }
            n += STAGE_STEPS;
        }
        memset(a.ev, 0, sizeof a.ev);
        for (int k = 0; k < STAGES; k++) stage_ms[k] = n ? sum[k] / n : 0;
    }
    if (st != L8_OK) {
        fprintf(stderr, "linear %s%s: %s\n", fp8 ? "fp8" : "bf16", graph ? " graph" : "", l8_last_error_string());
        ms = -1;
    }
    l8_graph_destroy(g);
    for (int i = 0; i < STAGE_STEPS; i++)
        for (int k = 0; k < STAGES; k++) l8_event_destroy(marks[i][k]);
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    l8_linear_destroy(lin);
    l8_recipe_destroy(rec);
    l8_tensor *all[] = { w, gw, b, gb, x, y, dy, dx };
    for (size_t i = 0; i < 8; i++) l8_tensor_destroy(all[i]);
    free(t);
    return ms;
}

/* The JSON key linear_<pre><name>_<T>x<K>x<N>_ms in buf. */
static const char *shape_key(char *buf, size_t n, const char *pre, const char *name, const int64_t *shp)
{
    snprintf(buf, n, "linear_%s%s_%lldx%lldx%lld_ms", pre, name, (long long)shp[0], (long long)shp[1],
             (long long)shp[2]);
    return buf;
}

/* The variants timed per shape, and their JSON key prefixes. */
typedef struct variant { const char *key; int fp8, graph, tuned; } variant;
static const variant k_variants[] = {
    { "fp8", 1, 0, 0 },       { "fp8_graph", 1, 1, 0 },       { "fp8_tuned", 1, 0, 1 },
    { "fp8_tuned_graph", 1, 1, 1 }, { "bf16", 0, 0, 0 },      { "bf16_graph", 0, 1, 0 },
    { "bf16_tuned_graph", 0, 1, 1 },
};
#define NVARIANTS (sizeof k_variants / sizeof k_variants[0])

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
    /* the tuned handle: autotune mode 1 (the heuristic's candidates timed, the
     * winner kept per plan) - what the default handle does with a warm
     * L8_GEMM_CACHE; no cache file is written here */
    l8_gemm_config tc = L8_GEMM_CONFIG_INIT;
    tc.autotune = 1;
    tc.plan_cache = "";
    l8_gemm_handle *th = NULL;
    if (l8_gemm_handle_create(ctx, &tc, &th) != L8_OK) {
        fprintf(stderr, "lean8-bench linear: tuned handle: %s\n", l8_last_error_string());
        l8_gemm_handle_destroy(gh);
        l8_ctx_destroy(ctx);
        return 1;
    }
    bench_json j = {0};
    int rc = bench_json_open(&j, o->json, "linear", l8_ctx_device_name(ctx));
    int reps = o->quick ? 5 : 15, iters = 5;
    printf("== linear: forward + backward (fprop, dgrad, wgrad into f32 main_grad, bias), %s\n"
           "   eager: one call per op; graph: the step replayed from one CUDA graph;\n"
           "   tuned: GEMM plans autotuned (= the default handle with a warm L8_GEMM_CACHE)\n",
           l8_ctx_device_name(ctx));
    for (size_t i = 0; i < NSHAPES && !rc; i++) {
        const int64_t *shp = k_shapes[i];
        double stage[STAGES] = { 0 };
        char key[96];
        printf("  %lld x %lld -> %lld:\n", (long long)shp[0], (long long)shp[1], (long long)shp[2]);
        for (size_t v = 0; v < NVARIANTS && !rc; v++) {
            const variant *va = &k_variants[v];
            double ms = run_shape(ctx, va->tuned ? th : gh, va->fp8, va->graph, shp, reps, iters,
                                  v == 0 ? stage : NULL);
            if (ms <= 0) { rc = 1; break; }
            bench_json_num(&j, shape_key(key, sizeof key, "", va->key, shp), ms);
            printf("    %-18s %9.3f ms\n", va->key, ms);
        }
        if (rc) break;
        printf("    fp8 eager by stage (events between stages, same load):");
        double tot = 0;
        for (int k = 0; k < STAGES; k++) {
            printf(" %s %.3f", k_stage_names[k], stage[k]);
            tot += stage[k];
            bench_json_num(&j, shape_key(key, sizeof key, "fp8_stage_", k_stage_names[k], shp), stage[k]);
        }
        printf(" (sum %.3f ms)\n", tot);
    }
    l8_gemm_handle_destroy(th);
    bench_json_close(&j);
    l8_gemm_handle_destroy(gh);
    l8_ctx_destroy(ctx);
    return rc;
}
