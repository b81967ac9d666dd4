/* lean8-train - the main job: an MLP classifier on Fashion-MNIST with lean8
 * Linear layers (FP8 HYBRID delayed scaling, or bf16), AdamW over one
 * parameter group, softmax cross-entropy, on the best device (host when
 * there is no GPU).
 *
 *   lean8-train [--hidden 256,128] [--batch 128] [--epochs 10] [--lr 1e-3]
 *               [--wd 0.01] [--fp8|--bf16] [--device D] [--seed N]
 *               [--save PATH] [--resume PATH] [--stop-after E] [--data DIR]
 *               [--limit N] [--quiet] [--offload[=K]]
 *
 * --offload[=K]: every layer's saved activation except the last K layers'
 * (default 1) goes to pinned host memory during the forward and comes back
 * one layer ahead of its backward (runtime/offload.h); losses are bitwise
 * those of a run without it.
 *
 * Model: 784 -> hidden... -> 10 (the head is padded to 16 outputs, as FP8
 * GEMMs need multiples of 16; the padding logits are ignored by the loss and
 * get zero gradient), GELU between layers; the learning rate decays from
 * --lr to 0 along a cosine over the run. Inputs are normalized by the
 * dataset's mean and std and fed in bf16.
 *
 * The data set lives on the device (normalized, bf16: 94 MB for the 60000
 * training images); each epoch uploads its order once, and a step gathers
 * its batch with l8_gather_rows. Losses and hits stay on the device until
 * the epoch ends, so a step never waits for the GPU: the host enqueues
 * ahead while the GPU runs.
 *
 * Determinism: the data order of epoch e is a permutation drawn from
 * (seed, e), weights are initialized from the seed, and every op is
 * deterministic, so a run resumed from a checkpoint (saved after each epoch
 * with --save) prints exactly the losses of an uninterrupted run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/lean8.h"
#include "runtime/params.h"
#include "runtime/checkpoint.h"
#include "runtime/offload.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/optim.h"
#include "ops/recipe.h"
#include "tools/fmnist.h"

#define MAX_LAYERS 8
#define IN_FEATURES 784
#define CLASSES 10
#define HEAD 16                  /* CLASSES padded to a multiple of 16 */
#define CKPT_KIND "lean8-train-mlp"
#define CKPT_VERSION 1

typedef struct opts {
    int hidden[MAX_LAYERS], nhidden;
    int batch, epochs, fp8, quiet, limit, stop_after;
    int offload, offload_keep;    /* --offload[=K] */
    float lr, wd;
    uint64_t seed;
    const char *device, *save, *resume, *data;
} opts;

/* Everything one run holds. Tensors sized for the largest batch; smaller
 * batches use narrowed views. */
typedef struct model {
    l8_ctx *ctx;
    l8_stream *s;
    l8_params *params;
    l8_optim *optim;
    l8_recipe *recipe;
    l8_gemm_handle *gemm;
    int nl;                                   /* layers */
    int64_t dims[MAX_LAYERS + 1];             /* features: dims[0] = 784 ... dims[nl] = 16 */
    l8_linear *lin[MAX_LAYERS];
    int wid[MAX_LAYERS], bid[MAX_LAYERS];
    l8_tensor *labels;                        /* (B) i32 */
    l8_tensor *x[2], *y[2];                   /* the data, [0] train [1] test: (N,784) bf16, (N) i32 */
    l8_tensor *order;                         /* (R) i32: rows of x in the order of a pass */
    l8_tensor *loss, *hit;                    /* (R) f32, (R) i32: per image of a pass */
    l8_tensor *bad;                           /* (1) i32: row numbers out of range (never, we hope) */
    int64_t R;                                /* rows of the per-pass tensors */
    l8_tensor *act[MAX_LAYERS + 1];           /* act[0] (B,784) bf16 input; act[i] GELU out */
    l8_tensor *pre[MAX_LAYERS];               /* (B, dims[i+1]) bf16 Linear outputs */
    l8_tensor *grad[MAX_LAYERS + 1];          /* (B, dims[i]) bf16 gradients */
    l8_offload *off;                          /* --offload: NULL without */
    int off_keep;                             /* layers at the end that keep their activations */
} model;

#define CK(x) do { l8_status st_ = (x); if (st_ != L8_OK) { \
    fprintf(stderr, "lean8-train: %s\n  at %s:%d: %s\n", l8_last_error_string(), __FILE__, __LINE__, #x); \
    goto fail; } } while (0)

static void usage(void)
{
    fprintf(stderr,
            "usage: lean8-train [--hidden 256,128] [--batch 128] [--epochs 10] [--lr 1e-3] [--wd 0.01]\n"
            "                   [--fp8|--bf16] [--device host|cuda:N] [--seed N] [--save PATH]\n"
            "                   [--resume PATH] [--stop-after E] [--data DIR] [--limit N] [--quiet]\n"
            "                   [--offload[=K]]\n");
}

static int parse_hidden(const char *s, opts *o)
{
    o->nhidden = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 16 || v > 65536 || v % 16 || o->nhidden == MAX_LAYERS - 1) return -1;
        o->hidden[o->nhidden++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return o->nhidden ? 0 : -1;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .hidden = { 256, 128 }, .nhidden = 2, .batch = 128, .epochs = 10, .fp8 = 1,
                 .lr = 1e-3f, .wd = 0.01f, .seed = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--fp8")) o->fp8 = 1;
        else if (!strcmp(a, "--bf16")) o->fp8 = 0;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--offload")) { o->offload = 1; o->offload_keep = 1; }
        else if (!strncmp(a, "--offload=", 10)) {
            o->offload = 1;
            o->offload_keep = (int)strtol(a + 10, &end, 10);
            if (end == a + 10 || *end || o->offload_keep < 0) { fprintf(stderr, "lean8-train: --offload=K wants K >= 0\n"); return -1; }
            end = NULL;
        }
        else if (!v) { fprintf(stderr, "lean8-train: %s needs a value\n", a); return -1; }
        else if (!strcmp(a, "--hidden")) { if (parse_hidden(v, o)) { fprintf(stderr, "lean8-train: --hidden wants sizes that are multiples of 16 (16..65536), e.g. 256,128\n"); return -1; } i++; }
        else if (!strcmp(a, "--batch")) { o->batch = (int)strtol(v, &end, 10); i++; }
        else if (!strcmp(a, "--epochs")) { o->epochs = (int)strtol(v, &end, 10); i++; }
        else if (!strcmp(a, "--limit")) { o->limit = (int)strtol(v, &end, 10); i++; }
        else if (!strcmp(a, "--stop-after")) { o->stop_after = (int)strtol(v, &end, 10); i++; }
        else if (!strcmp(a, "--lr")) { o->lr = strtof(v, &end); i++; }
        else if (!strcmp(a, "--wd")) { o->wd = strtof(v, &end); i++; }
        else if (!strcmp(a, "--seed")) { o->seed = strtoull(v, &end, 0); i++; }
        else if (!strcmp(a, "--device")) { o->device = v; i++; }
        else if (!strcmp(a, "--save")) { o->save = v; i++; }
        else if (!strcmp(a, "--resume")) { o->resume = v; i++; }
        else if (!strcmp(a, "--data")) { o->data = v; i++; }
        else { fprintf(stderr, "lean8-train: unknown option %s\n", a); return -1; }
        if (end && *end) { fprintf(stderr, "lean8-train: bad value for %s: %s\n", a, v); return -1; }
        end = NULL;
    }
    if (o->batch < 16 || o->batch % 16 || o->batch > 65536) {
        fprintf(stderr, "lean8-train: --batch must be a multiple of 16 (FP8 GEMMs need it), 16..65536\n");
        return -1;
    }
    if (o->epochs < 0 || o->limit < 0 || o->stop_after < 0 || !(o->lr > 0) || !(o->wd >= 0)) {
        fprintf(stderr, "lean8-train: --epochs, --limit, --stop-after >= 0, --lr > 0, --wd >= 0\n");
        return -1;
    }
    return 0;
}

static l8_tensor *new2(l8_ctx *ctx, l8_dtype dt, int64_t a, int64_t b, l8_status *st)
{
    int64_t sh[2] = { a, b };
    l8_tensor *t = NULL;
    if (*st == L8_OK) *st = l8_tensor_empty(ctx, dt, b ? 2 : 1, sh, &t);
    return t;
}

static void model_free(model *m)
{
    for (int i = 0; i < m->nl; i++) l8_linear_destroy(m->lin[i]);
    l8_offload_destroy(m->off);
    l8_tensor *ts[] = { m->labels, m->x[0], m->x[1], m->y[0], m->y[1], m->order, m->loss, m->hit,
                        m->bad };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) l8_tensor_destroy(ts[i]);
    for (int i = 0; i <= MAX_LAYERS; i++) {
        l8_tensor_destroy(m->act[i]);
        l8_tensor_destroy(m->grad[i]);
        if (i < MAX_LAYERS) l8_tensor_destroy(m->pre[i]);
    }
    l8_optim_destroy(m->optim);
    l8_recipe_destroy(m->recipe);
    l8_gemm_handle_destroy(m->gemm);
    l8_params_destroy(m->params);
    l8_ctx_destroy(m->ctx);
    memset(m, 0, sizeof *m);
}

static l8_status model_build(model *m, const opts *o)
{
    l8_status st = L8_OK;
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = o->device;
    L8_CHECK(l8_ctx_create(&cc, &m->ctx));
    m->s = l8_ctx_stream(m->ctx, L8_STREAM_COMPUTE);
    m->nl = o->nhidden + 1;
    m->dims[0] = IN_FEATURES;
    for (int i = 0; i < o->nhidden; i++) m->dims[i + 1] = o->hidden[i];
    m->dims[m->nl] = HEAD;
    L8_CHECK(l8_params_create(m->ctx, NULL, &m->params));
    for (int i = 0; i < m->nl; i++) {
        char name[32];
        int64_t w[2] = { m->dims[i + 1], m->dims[i] }, b[1] = { m->dims[i + 1] };
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        L8_CHECK(l8_params_add(m->params, name, 2, w, &m->wid[i]));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        L8_CHECK(l8_params_add(m->params, name, 1, b, &m->bid[i]));
    }
    L8_CHECK(l8_params_finalize(m->params));
    /* nn.Linear's initialization, from the seed */
    for (int i = 0; i < m->nl; i++) {
        float bound = 1.0f / sqrtf((float)m->dims[i]);
        L8_CHECK(l8_params_init_kaiming_uniform(m->params, m->wid[i], sqrtf(5.0f), o->seed * 131 + (uint64_t)i));
        L8_CHECK(l8_params_init_uniform(m->params, m->bid[i], -bound, bound, o->seed * 137 + (uint64_t)i));
    }
    l8_adamw_config ac = L8_ADAMW_CONFIG_INIT;
    ac.lr = o->lr;
    ac.weight_decay = o->wd;
    L8_CHECK(l8_optim_create_adamw(m->params, &ac, &m->optim));
    L8_CHECK(l8_gemm_handle_create(m->ctx, NULL, &m->gemm));
    if (o->fp8) L8_CHECK(l8_recipe_create(m->ctx, NULL, &m->recipe));
    l8_save_hooks hk = L8_SAVE_HOOKS_INIT;
    if (o->offload) {
        l8_offload_config ocfg = L8_OFFLOAD_CONFIG_INIT;
        ocfg.min_bytes = 0;               /* this MLP's activations are all small: take them all */
        L8_CHECK(l8_offload_create(m->ctx, &ocfg, &m->off));
        m->off_keep = o->offload_keep;
        hk.save = l8_offload_save;
        hk.restore = l8_offload_restore;
        hk.release = l8_offload_release;
        hk.arg = m->off;
    }
    for (int i = 0; i < m->nl; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        l8_linear_config lc = L8_LINEAR_CONFIG_INIT;
        lc.name = name;
        lc.mode = o->fp8 ? L8_LINEAR_FP8 : L8_LINEAR_BF16;
        lc.gemm = m->gemm;
        lc.recipe = m->recipe;
        lc.weight = l8_params_master(m->params, m->wid[i]);
        lc.weight_grad = l8_params_main_grad(m->params, m->wid[i]);
        lc.bias = l8_params_master(m->params, m->bid[i]);
        lc.bias_grad = l8_params_main_grad(m->params, m->bid[i]);
        lc.weight_id = m->wid[i];
        lc.bias_id = m->bid[i];
        lc.save_hooks = m->off ? &hk : NULL;
        L8_CHECK(l8_linear_create(m->ctx, &lc, &m->lin[i]));
    }
    int64_t B = o->batch;
    m->labels = new2(m->ctx, L8_I32, B, 0, &st);
    for (int i = 0; i <= m->nl; i++) {
        if (i < m->nl) m->act[i] = new2(m->ctx, L8_BF16, B, m->dims[i], &st);
        m->grad[i] = new2(m->ctx, L8_BF16, B, m->dims[i], &st);
        if (i < m->nl) m->pre[i] = new2(m->ctx, L8_BF16, B, m->dims[i + 1], &st);
    }
    return st;
}

/* The first `rows` rows of t (a view; the caller destroys it). */
static l8_tensor *rows_of(l8_tensor *t, int64_t rows, l8_status *st)
{
    l8_tensor *v = NULL;
    if (*st == L8_OK) *st = l8_tensor_narrow(t, 0, 0, rows, &v);
    return v;
}

typedef struct batch_views {
    l8_tensor *order, *labels, *loss, *hit, *act[MAX_LAYERS + 1], *pre[MAX_LAYERS], *grad[MAX_LAYERS + 1];
} batch_views;

static void views_free(batch_views *v)
{
    l8_tensor_destroy(v->order);
    l8_tensor_destroy(v->labels);
    l8_tensor_destroy(v->loss);
    l8_tensor_destroy(v->hit);
    for (int i = 0; i <= MAX_LAYERS; i++) {
        l8_tensor_destroy(v->act[i]);
        l8_tensor_destroy(v->grad[i]);
        if (i < MAX_LAYERS) l8_tensor_destroy(v->pre[i]);
    }
    memset(v, 0, sizeof *v);
}

/* Views for the batch at rows [at, at + rows) of a pass. */
static l8_status views_make(model *m, int64_t at, int64_t rows, batch_views *v)
{
    l8_status st = L8_OK;
    st = l8_tensor_narrow(m->order, 0, at, rows, &v->order);
    if (st == L8_OK) st = l8_tensor_narrow(m->loss, 0, at, rows, &v->loss);
    if (st == L8_OK) st = l8_tensor_narrow(m->hit, 0, at, rows, &v->hit);
    v->labels = rows_of(m->labels, rows, &st);
    for (int i = 0; i <= m->nl; i++) {
        if (i < m->nl) v->act[i] = rows_of(m->act[i], rows, &st);
        v->grad[i] = rows_of(m->grad[i], rows, &st);
        if (i < m->nl) v->pre[i] = rows_of(m->pre[i], rows, &st);
    }
    return st;
}

/* --offload: *t becomes a new (rows, cols) bf16 tensor of its own storage. */
static l8_status fresh_rows(model *m, int64_t rows, int64_t cols, l8_tensor **t)
{
    int64_t sh[2] = { rows, cols };
    l8_tensor_destroy(*t);
    *t = NULL;
    return l8_tensor_empty(m->ctx, L8_BF16, 2, sh, t);
}

/* Forward (and with train, backward and the optimizer step) of the batch at
 * rows [at, at + rows) of the current pass over split (0 train, 1 test):
 * images x[split][order[at + r]]; the loss and hit of each image land in
 * loss[at + r], hit[at + r]. Enqueued on m->s; nothing waits. */
static l8_status run_batch(model *m, int split, int64_t at, int64_t rows, int train)
{
    batch_views v = {0};
    l8_linear_ctx *saved[MAX_LAYERS] = {0};
    l8_status st;
    L8_TRY(st, views_make(m, at, rows, &v), out);
    if (train && m->off && m->nl > m->off_keep) L8_TRY(st, fresh_rows(m, rows, m->dims[0], &v.act[0]), out);
    L8_TRY(st, l8_gather_rows(m->x[split], v.order, v.act[0], m->bad, m->s), out);
    L8_TRY(st, l8_gather_rows(m->y[split], v.order, v.labels, m->bad, m->s), out);
    if (train)
        for (int i = 0; i < m->nl; i++) L8_TRY(st, l8_linear_begin_step(m->lin[i]), out);
    for (int i = 0; i < m->nl; i++) {
        int off = train && m->off && i < m->nl - m->off_keep;
        if (train && m->off) L8_TRY(st, l8_offload_forward_layer(m->off, i, off), out);
        L8_TRY(st, l8_linear_forward(m->lin[i], v.act[i], v.pre[i], train ? &saved[i] : NULL, m->s), out);
        if (off) {
            /* bf16 saves a view of its input: hand the saved view the input
             * alone (a fresh tensor for the next layer's) so that offload
             * may give its device memory back */
            l8_tensor_destroy(v.act[i]);
            v.act[i] = NULL;
            if (i + 1 < m->nl) L8_TRY(st, fresh_rows(m, rows, m->dims[i + 1], &v.act[i + 1]), out);
        }
        if (i + 1 < m->nl) L8_TRY(st, l8_gelu(v.pre[i], v.act[i + 1], m->s), out);
    }
    /* mean loss over the batch: gradient scale 1/rows */
    L8_TRY(st, l8_softmax_xent(v.pre[m->nl - 1], v.labels, CLASSES, 1.0f / (float)rows,
                               train ? v.grad[m->nl] : NULL, v.loss, v.hit, m->s), out);
    if (train) {
        for (int i = m->nl - 1; i >= 0; i--) {
            l8_tensor *dx = i > 0 ? v.grad[i] : NULL;
            if (m->off) L8_TRY(st, l8_offload_backward_layer(m->off, i), out);
            L8_TRY(st, l8_linear_backward(m->lin[i], &saved[i], v.grad[i + 1], dx, m->s), out);
            if (i > 0) L8_TRY(st, l8_gelu_backward(v.pre[i - 1], v.grad[i], v.grad[i], m->s), out);
        }
        L8_TRY(st, l8_optim_step(m->optim, m->s, NULL), out);
        if (m->recipe) L8_TRY(st, l8_recipe_update(m->recipe, m->s), out);
    }
out:
    for (int i = 0; i < m->nl; i++) l8_linear_ctx_destroy(saved[i]);
    views_free(&v);
    return st;
}

/* After a pass: wait for it, add up the loss and hits of its first n images
 * (in order, so the sums do not depend on batching), and check that no
 * gather saw a row number out of range. lh, hh: n floats / ints of scratch. */
static l8_status pass_results(model *m, int64_t n, float *lh, int32_t *hh, double *loss,
                              int64_t *hits)
{
    l8_tensor *lv = NULL, *hv = NULL;
    int32_t bad = 0;
    l8_status st;
    L8_TRY(st, l8_tensor_narrow(m->loss, 0, 0, n, &lv), out);
    L8_TRY(st, l8_tensor_narrow(m->hit, 0, 0, n, &hv), out);
    L8_TRY(st, l8_tensor_copy_to_host(lv, lh, (size_t)n * 4, m->s), out);
    L8_TRY(st, l8_tensor_copy_to_host(hv, hh, (size_t)n * 4, m->s), out);
    L8_TRY(st, l8_tensor_copy_to_host(m->bad, &bad, 4, m->s), out);
    L8_TRY(st, l8_stream_synchronize(m->s), out);
    if (bad) {
        st = L8_FAIL(L8_ERR_INTERNAL, "lean8-train: %d row numbers out of range in the gathers", bad);
        goto out;
    }
    for (int64_t t = 0; t < n; t++) { *loss += lh[t]; *hits += hh[t]; }
out:
    l8_tensor_destroy(lv);
    l8_tensor_destroy(hv);
    return st;
}

/* order[0..n) into m->order, enqueued on m->s, so it waits for the previous
 * pass's gathers (the host copy is pageable: the call returns when done). */
static l8_status upload_order(model *m, const int32_t *order, int64_t n)
{
    l8_tensor *v = NULL;
    l8_status st = l8_tensor_narrow(m->order, 0, 0, n, &v);
    if (st == L8_OK) st = l8_tensor_copy_from_host(v, order, (size_t)n * 4, m->s);
    l8_tensor_destroy(v);
    return st;
}

/* Split ds onto the device: images normalized as l8_fmnist_batch does and
 * rounded to bf16 (RNE, as l8_convert rounds), labels as i32. Blocks. */
static l8_status upload_split(model *m, const l8_fmnist *ds, l8_tensor **x, l8_tensor **y)
{
    enum { CHUNK = 4096 };
    size_t n = ds->n;
    uint16_t *xb = malloc(n * IN_FEATURES * sizeof *xb);
    int32_t *yh = malloc(n * sizeof *yh);
    float *xf = malloc((size_t)CHUNK * IN_FEATURES * sizeof *xf);
    int64_t idx[CHUNK];
    l8_status st = L8_OK;
    if (!xb || !yh || !xf) { st = L8_FAIL(L8_ERR_OOM, "lean8-train: host memory for the data"); goto out; }
    for (size_t b = 0; b < n; b += CHUNK) {
        size_t c = n - b < CHUNK ? n - b : CHUNK;
        for (size_t i = 0; i < c; i++) idx[i] = (int64_t)(b + i);
        L8_TRY(st, l8_fmnist_batch(ds, idx, c, xf, yh + b), out);
        for (size_t k = 0; k < c * IN_FEATURES; k++) xb[b * IN_FEATURES + k] = l8_bf16_from_f32(xf[k]);
    }
    *x = new2(m->ctx, L8_BF16, (int64_t)n, IN_FEATURES, &st);
    *y = new2(m->ctx, L8_I32, (int64_t)n, 0, &st);
    if (st != L8_OK) goto out;
    L8_TRY(st, l8_tensor_copy_from_host(*x, xb, n * IN_FEATURES * sizeof *xb, m->s), out);
    L8_TRY(st, l8_tensor_copy_from_host(*y, yh, n * sizeof *yh, m->s), out);
    L8_TRY(st, l8_stream_synchronize(m->s), out);
out:
    free(xb);
    free(yh);
    free(xf);
    return st;
}

/* Epoch e's order: Fisher-Yates from a generator seeded by (seed, e). */
static void permutation(int64_t *p, int64_t n, uint64_t seed, int epoch)
{
    uint64_t x = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(epoch + 1) * 0xD1B54A32D192ED03ull);
    if (!x) x = 1;
    for (int64_t i = 0; i < n; i++) p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
        int64_t j = (int64_t)((x * 0x2545F4914F6CDD1Dull) % (uint64_t)(i + 1));
        int64_t t = p[i]; p[i] = p[j]; p[j] = t;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(int epoch, int64_t done, int64_t total, double t0)
{
    int w = 30, k = (int)(w * done / (total ? total : 1));
    double dt = now_s() - t0;
    fprintf(stderr, "\r  epoch %2d [%.*s%*s] %3d%%  %.0f img/s ", epoch, k, "==============================",
            w - k, "", (int)(100 * done / (total ? total : 1)), dt > 0 ? done / dt : 0.0);
    fflush(stderr);
}

/* ---- checkpoints: parameters, optimizer, recipe, and where we are ---- */

typedef struct run_state {
    uint64_t seed;
    int32_t epoch_done, fp8, nl;
    int32_t dims[MAX_LAYERS + 1];
} run_state;

static l8_status save_ckpt(model *m, const opts *o, int epoch_done, const char *path)
{
    l8_ckpt_writer *w = NULL;
    l8_status st;
    run_state rs = { .seed = o->seed, .epoch_done = epoch_done, .fp8 = o->fp8, .nl = m->nl };
    uint64_t step = 0;
    for (int i = 0; i <= m->nl; i++) rs.dims[i] = (int32_t)m->dims[i];
    L8_CHECK(l8_ckpt_writer_open(path, CKPT_KIND, CKPT_VERSION, &w));
    L8_TRY(st, l8_ckpt_write_section(w, "run", &rs, sizeof rs), fail);
    L8_TRY(st, l8_ckpt_write_tensor(w, "params.master", l8_params_master_flat(m->params)), fail);
    for (int k = 0; k < l8_optim_state_count(m->optim); k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", l8_optim_state_name(m->optim, k));
        L8_TRY(st, l8_ckpt_write_tensor(w, name, l8_optim_state(m->optim, k)), fail);
    }
    L8_TRY(st, l8_optim_get_step(m->optim, &step), fail);
    L8_TRY(st, l8_ckpt_write_section(w, "optim.step", &step, sizeof step), fail);
    if (m->recipe) {
        l8_tensor *hist = NULL, *scale = NULL, *amax = NULL;
        st = l8_recipe_state(m->recipe, &hist, &scale, &amax, NULL);
        if (st == L8_OK) st = l8_ckpt_write_tensor(w, "recipe.amax_history", hist);
        if (st == L8_OK) st = l8_ckpt_write_tensor(w, "recipe.scale", scale);
        if (st == L8_OK) st = l8_ckpt_write_tensor(w, "recipe.amax", amax);
        l8_tensor_destroy(hist);
        l8_tensor_destroy(scale);
        l8_tensor_destroy(amax);
        if (st != L8_OK) goto fail;
        /* the metas themselves: their amax words hold what casts since the
         * last update saw (evaluation included), which the next update folds in */
        int n = l8_recipe_count(m->recipe);
        float *mv = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1));
        if (!mv) { st = L8_FAIL(L8_ERR_OOM, "lean8-train: host memory"); goto fail; }
        for (int i = 0; i < n && st == L8_OK; i++)
            st = l8_fp8_meta_get(l8_recipe_meta(m->recipe, i), &mv[3 * i], &mv[3 * i + 1], &mv[3 * i + 2]);
        if (st == L8_OK) st = l8_ckpt_write_section(w, "recipe.metas", mv, sizeof(float) * 3 * (size_t)n);
        free(mv);
        if (st != L8_OK) goto fail;
    }
    return l8_ckpt_writer_commit(w);
fail:
    l8_ckpt_writer_abort(w);
    return st;
}

/* Validate everything first (config, sections, shapes), then load. */
static l8_status load_ckpt(model *m, const opts *o, const char *path, int *epoch_done)
{
    l8_ckpt_reader *r = NULL;
    l8_tensor *hist = NULL, *scale = NULL, *amax = NULL;
    float *mv = NULL;
    run_state rs;
    uint64_t step;
    l8_status st;
    L8_CHECK(l8_ckpt_open(path, &r));
    L8_TRY(st, l8_ckpt_expect(r, CKPT_KIND, CKPT_VERSION), out);
    L8_TRY(st, l8_ckpt_read_section_into(r, "run", &rs, sizeof rs), out);
    int same = rs.fp8 == o->fp8 && rs.nl == m->nl && rs.seed == o->seed;
    for (int i = 0; same && i <= m->nl; i++) same = rs.dims[i] == m->dims[i];
    if (!same) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "checkpoint %s is of another model or run (layers, "
                     "--fp8/--bf16 or --seed differ): refused", path);
        goto out;
    }
    L8_TRY(st, l8_ckpt_check_tensor(r, "params.master", l8_params_master_flat(m->params)), out);
    for (int k = 0; k < l8_optim_state_count(m->optim); k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", l8_optim_state_name(m->optim, k));
        L8_TRY(st, l8_ckpt_check_tensor(r, name, l8_optim_state(m->optim, k)), out);
    }
    if (m->recipe) {
        L8_TRY(st, l8_recipe_state(m->recipe, &hist, &scale, &amax, NULL), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.amax_history", hist), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.scale", scale), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.amax", amax), out);
    }
    L8_TRY(st, l8_ckpt_read_section_into(r, "optim.step", &step, sizeof step), out);
    if (m->recipe) {
        int n = l8_recipe_count(m->recipe);
        mv = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1));
        if (!mv) { st = L8_FAIL(L8_ERR_OOM, "lean8-train: host memory"); goto out; }
        L8_TRY(st, l8_ckpt_read_section_into(r, "recipe.metas", mv, sizeof(float) * 3 * (size_t)n), out);
    }
    /* all checked: now load */
    L8_TRY(st, l8_ckpt_read_tensor(r, "params.master", l8_params_master_flat(m->params)), out);
    for (int k = 0; k < l8_optim_state_count(m->optim); k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", l8_optim_state_name(m->optim, k));
        L8_TRY(st, l8_ckpt_read_tensor(r, name, l8_optim_state(m->optim, k)), out);
    }
    L8_TRY(st, l8_optim_set_step(m->optim, step), out);
    if (m->recipe) {
        L8_TRY(st, l8_ckpt_read_tensor(r, "recipe.amax_history", hist), out);
        L8_TRY(st, l8_ckpt_read_tensor(r, "recipe.scale", scale), out);
        L8_TRY(st, l8_ckpt_read_tensor(r, "recipe.amax", amax), out);
        L8_TRY(st, l8_recipe_push_scales(m->recipe, m->s), out);
        for (int i = 0; i < l8_recipe_count(m->recipe); i++)
            L8_TRY(st, l8_fp8_meta_set(l8_recipe_meta(m->recipe, i), mv[3 * i], mv[3 * i + 1], mv[3 * i + 2]), out);
    }
    *epoch_done = rs.epoch_done;
out:
    free(mv);
    l8_tensor_destroy(hist);
    l8_tensor_destroy(scale);
    l8_tensor_destroy(amax);
    l8_ckpt_close(r);
    return st;
}

int main(int argc, char **argv)
{
    opts o;
    model m = {0};
    l8_fmnist train = {0}, test = {0};
    int64_t *perm = NULL;
    int32_t *order = NULL, *hh = NULL;
    float *lh = NULL;
    int rc = 1, start_epoch = 0;
    l8_status st = L8_OK;
    if (parse(argc, argv, &o)) { usage(); return 2; }
    CK(l8_fmnist_load(o.data, "train", &train));
    CK(l8_fmnist_load(o.data, "t10k", &test));
    int64_t ntrain = o.limit && (size_t)o.limit < train.n ? o.limit : (int64_t)train.n;
    int64_t ntest = (int64_t)test.n;
    CK(model_build(&m, &o));
    if (o.resume) {
        CK(load_ckpt(&m, &o, o.resume, &start_epoch));
        printf("resumed from %s after epoch %d\n", o.resume, start_epoch);
    }
    /* per-pass rows: the training images, or the test images and the
     * padding of the last test batch to a multiple of 16 (image 0) */
    m.R = ntrain > ntest + 16 ? ntrain : ntest + 16;
    CK(upload_split(&m, &train, &m.x[0], &m.y[0]));
    CK(upload_split(&m, &test, &m.x[1], &m.y[1]));
    m.order = new2(m.ctx, L8_I32, m.R, 0, &st);
    m.loss = new2(m.ctx, L8_F32, m.R, 0, &st);
    m.hit = new2(m.ctx, L8_I32, m.R, 0, &st);
    m.bad = new2(m.ctx, L8_I32, 1, 0, &st);
    CK(st);
    {
        int32_t zero = 0;
        CK(l8_tensor_copy_from_host(m.bad, &zero, 4, m.s));
    }
    perm = malloc(sizeof *perm * train.n);
    order = malloc(sizeof *order * (size_t)m.R);
    lh = malloc(sizeof *lh * (size_t)m.R);
    hh = malloc(sizeof *hh * (size_t)m.R);
    if (!perm || !order || !lh || !hh) { fprintf(stderr, "lean8-train: out of host memory\n"); goto fail; }
    printf("lean8-train: %s on %s, MLP %d", o.fp8 ? "FP8 (HYBRID delayed scaling)" : "bf16",
           l8_ctx_device_name(m.ctx), IN_FEATURES);
    for (int i = 1; i < m.nl; i++) printf("-%d", (int)m.dims[i]);
    printf("-%d, batch %d, AdamW lr %g wd %g, %lld train / %lld test images (%.1f MiB on the "
           "device), seed %" PRIu64 "\n", CLASSES, o.batch, (double)o.lr, (double)o.wd,
           (long long)ntrain, (long long)ntest,
           (double)(l8_tensor_nbytes(m.x[0]) + l8_tensor_nbytes(m.x[1]) + l8_tensor_nbytes(m.y[0]) +
                    l8_tensor_nbytes(m.y[1])) / 1048576.0, o.seed);
    int bar = !o.quiet && isatty(STDERR_FILENO);
    double test_acc = 0;
    for (int e = start_epoch; e < o.epochs; e++) {
        permutation(perm, (int64_t)train.n, o.seed, e);
        for (int64_t i = 0; i < ntrain; i++) order[i] = (int32_t)perm[i];
        double loss = 0, t0 = now_s();
        int64_t hits = 0, seen = 0;
        CK(upload_order(&m, order, ntrain));
        /* full batches, then the remainder rounded down to a multiple of 16 */
        for (int64_t b = 0; b < ntrain; b += o.batch) {
            int64_t rows = ntrain - b < o.batch ? (ntrain - b) / 16 * 16 : o.batch;
            if (rows == 0) break;
            /* cosine decay from lr to 0 over the whole run, by global step */
            double prog = ((double)e * (double)ntrain + (double)b) / ((double)o.epochs * (double)ntrain);
            CK(l8_optim_set_lr(m.optim, (float)(o.lr * 0.5 * (1.0 + cos(M_PI * prog)))));
            CK(run_batch(&m, 0, b, rows, 1));
            seen += rows;
            if (bar && (b / o.batch) % 16 == 0) progress(e + 1, seen, ntrain, t0);
        }
        CK(pass_results(&m, seen, lh, hh, &loss, &hits));
        double dt = now_s() - t0;
        if (bar) fprintf(stderr, "\r%*s\r", 70, "");
        double tl = 0;
        int64_t th = 0;
        for (int64_t i = 0; i < m.R; i++) order[i] = i < ntest ? (int32_t)i : 0;
        CK(upload_order(&m, order, m.R));
        for (int64_t b = 0; b < ntest; b += o.batch) {
            int64_t rows = ntest - b < o.batch ? ntest - b : o.batch;
            CK(run_batch(&m, 1, b, (rows + 15) / 16 * 16, 0));    /* FP8 GEMMs: pad */
        }
        CK(pass_results(&m, ntest, lh, hh, &tl, &th));
        test_acc = (double)th / (double)ntest;
        l8_alloc_stats as = { .size = sizeof as };
        CK(l8_alloc_get_stats(l8_ctx_allocator(m.ctx), &as));
        printf("epoch %2d  loss %.4f  train acc %.4f  test acc %.4f  %8.0f img/s  peak mem %.1f MiB\n",
               e + 1, loss / (double)seen, (double)hits / (double)seen, test_acc, (double)seen / dt,
               as.allocated_peak / 1048576.0);
        fflush(stdout);
        if (o.save) CK(save_ckpt(&m, &o, e + 1, o.save));
        if (o.stop_after && e + 1 >= o.stop_after) break;    /* an interruption, for resume */
    }
    if (m.off) {
        l8_offload_stats os = { .size = sizeof os };
        CK(l8_offload_get_stats(m.off, &os));
        printf("offload: %llu saves, %llu copies out (%.1f MiB), %llu back, %llu device blocks given back\n",
               (unsigned long long)os.saves, (unsigned long long)os.copies_out, os.bytes_out / 1048576.0,
               (unsigned long long)os.copies_in, (unsigned long long)os.released);
    }
    rc = 0;
fail:
    free(perm);
    free(order);
    free(lh);
    free(hh);
    model_free(&m);
    l8_fmnist_free(&train);
    l8_fmnist_free(&test);
    return rc;
}
