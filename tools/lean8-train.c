/* lean8-train - the main job: an MLP classifier on Fashion-MNIST with lean8
 * Linear layers (FP8 HYBRID delayed scaling, or bf16), AdamW over one
 * parameter group, softmax cross-entropy, on the best device (host when
 * there is no GPU).
 *
 *   lean8-train [--hidden 256,128] [--batch 128] [--epochs 10] [--lr 1e-3]
 *               [--wd 0.01] [--fp8|--bf16] [--fp8-head] [--device D] [--seed N]
 *               [--save PATH] [--resume PATH] [--stop-after E] [--data DIR]
 *               [--limit N] [--drop-last] [--quiet] [--no-graph] [--offload[=K]]
 *
 * --drop-last: whole batches only. Each epoch leaves out its last, partial
 * batch (other images each epoch: the order is a new permutation), as
 * --limit at the last whole batch would (docs/train.md).
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
 * FP8 mode runs the hidden layers in FP8 and the head in bf16, as FP8
 * training recipes keep the output layer in higher precision: 10 (16)
 * outputs are too few for FP8 to gain anything, and its casts would sit on
 * the step's critical path (the head's dY cast); --fp8-head puts the head in
 * FP8 too.
 *
 * The data set lives on the device (normalized, bf16: 94 MB for the 60000
 * training images); each epoch uploads its order once, and a step gathers
 * its batch with l8_gather_rows. Losses and hits stay on the device until
 * the epoch ends, so a step never waits for the GPU: the host enqueues
 * ahead while the GPU runs.
 *
 * CUDA graphs (on a GPU, unless --no-graph): a training step - gather,
 * forward, backward, optimizer, recipe update - is captured once into a
 * CUDA graph (runtime/graph.h) and replayed for every later step of the
 * same batch size, one launch instead of ~50, and nothing else per step:
 * the step finds everything that changes from step to step through the
 * optimizer's step cursor k (l8_optim_cursor, counted on the device): it
 * gathers rows order[k*B ...] of the epoch's order (l8_gather_rows_at),
 * files its losses and hits at the same rows of the epoch's
 * (l8_put_rows_at), and the optimizer takes rate k of the epoch's table of
 * cosine-decayed rates (l8_optim_set_lr_table, uploaded with the order at
 * each epoch's start). Every training step has the full batch's rows: an
 * epoch's last, partial batch is padded with copies of its own images, which
 * the loss (l8_softmax_xent_at, at the same cursor) marks as padding - zero
 * loss and gradient, so the step's gradients and amaxes are those of its
 * real rows - and one graph serves every step. Its first step runs eagerly
 * as the graph's warm-up, which reserves its memory, and is then captured;
 * every later step launches it. The results are those of eager execution
 * bit for bit: --no-graph runs every step eagerly (the same padded steps),
 * and tests/train.sh compares the two.
 *
 * Determinism: the data order of epoch e is a permutation drawn from
 * (seed, e), weights are initialized from the seed, and every op is
 * deterministic, so a run resumed from a checkpoint (saved after each epoch
 * with --save) prints exactly the losses of an uninterrupted run.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
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
#define WGRAD_SMS 32             /* the wgrads on the comm stream are planned for 32 SMs, a
                                    quarter of an H200's: 16 to 32 measured alike, +3% on
                                    784-512-512-10 over all 132 (docs/perf.md) */
#define DGRAD_SMS 100            /* the FP8 dgrads beside them are planned for the SMs the
                                    wgrads leave on a 132-SM H100 / H200: FP8 784-512-512-10
                                    1.4% less time a step on an H100 (64 and 116 measured
                                    alike), no change on an H200; bf16's dgrads lose 1% so on
                                    the H100, and keep the whole-GPU plan (docs/perf.md) */
#define CKPT_KIND "lean8-train-mlp"
#define CKPT_VERSION 1

typedef struct opts {
    int hidden[MAX_LAYERS], nhidden;
    int batch, epochs, fp8, quiet, limit, stop_after, tp, dp, zero1, no_graph;
    int fp8_head;                 /* --fp8-head: the head in FP8 too */
    int graph_steps;              /* --graph-steps: full steps a graph launch runs */
    int step_times;               /* --step-times: the GPU's time per training step */
    int drop_last;                /* --drop-last: whole batches only */
    int no_dgrad_cast;            /* --no-dgrad-cast: each FP8 layer casts its own dY */
    int no_head_dgrad_cast;       /* --no-head-dgrad-cast: the head's dgrad does not cast */
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
    int64_t ld[MAX_LAYERS + 1];               /* this rank's: dims[1] / tp with --tp, else dims */
    l8_comm *world, *tpc, *dpc;               /* --tp/--dp: the job, its TP and DP groups */
    int tp, rank;                             /* rank: in the TP group */
    int dp, dp_rank, wrank;                   /* wrank: in the job (0 prints) */
    l8_ddp *ddp;                              /* --dp: the gradient reducer */
    int zero1;                                /* --zero1: sharded optimizer */
    uint64_t steps_done;                      /* optimizer steps of this process (trace marks) */
    l8_linear *lin[MAX_LAYERS];
    int wid[MAX_LAYERS], bid[MAX_LAYERS];
    l8_stream *side;                          /* the copy stream: the weight copies (next to
                                                 the batch gathers), a graph step's filed
                                                 losses and hits (next to the backward) and,
                                                 in one process, the recipe update (next to
                                                 the optimizer) */
    l8_event *ev_fork, *ev_join;
    l8_event *ev_w16, *ev_xt, *ev_side;       /* a step's joins: the bf16 weight copies, the
                                                 transposed FP8 images, the side stream's
                                                 work the optimizer step reads (the filed
                                                 losses, the bias gradients of split casts) */
    l8_tensor *labels;                        /* (B) i32 */
    l8_tensor *x[2], *y[2];                   /* the data, [0] train [1] test: (N,784) bf16, (N) i32 */
    l8_tensor *x8;                            /* FP8 training in one TP rank: x[0] cast once,
                                                 (N,784) e4m3 carrying x8meta */
    l8_fp8_meta *x8meta;                      /* its fixed scale: fp8_max / the images' amax */
    int split_casts;                          /* FP8, one process, no offload: the dGELU
                                                 casts' bias gradients on the side stream
                                                 (backward_split) */
    int dgrad_cast;                           /* with split_casts, not --no-dgrad-cast:
                                                 a split layer's dgrad casts the dY of the
                                                 split layer below (backward_split) */
    int head_cast;                            /* with dgrad_cast, not --no-head-dgrad-cast:
                                                 the head's dgrad too (backward_head) */
    int64_t dg_slot;                          /* bytes of one dY8 slot: B x the widest */
    l8_storage *dg8[2];                       /* with split_casts: dY8, two slots of B x
                                                 the widest layer (layer i's at slot i % 2:
                                                 read by its dgrad on m->s while that dgrad
                                                 writes layer i - 1's), and dY8t,
                                                 B16 x each split layer at dgt_off[i] bytes
                                                 (read by a wgrad on m->wgs; B16: B rounded
                                                 up to 16, see fp8_over) */
    int64_t dgt_off[MAX_LAYERS];
    l8_stream *wgs;                           /* one process: the comm stream,
                                                 where the layers above the first run their
                                                 wgrad (l8_linear_set_wgrad_stream) beside
                                                 the next layer's backward; NULL: none */
    l8_event *ev_wg;                          /* the join of wgs before the optimizer */
    int gelu_out;                             /* one TP rank: a layer below the head writes
                                                 the next one's input gelu(pre[i]) in its
                                                 GEMM (l8_linear_forward_gelu): FP8 for an
                                                 FP8 layer after an FP8 one, else bf16 */
    l8_event *ev_h;                           /* s -> wgs: an FP8 h written, to transpose
                                                 there */
    l8_storage *hscr;                         /* gelu_out between FP8 layers: the bytes of
                                                 the casts that give each FP8 h its amax,
                                                 next to the optimizer (B x the widest) */
    l8_tensor *order;                         /* (R) i32: rows of x in the order of a pass */
    l8_tensor *loss, *hit;                    /* (R) f32, (R) i32: per image of a pass */
    l8_tensor *step_loss, *step_hit;          /* (B): a graph step's static rows */
    l8_tensor *rates;                         /* graphs: the epoch's learning rate per step */
    int64_t lb;                               /* rows of a full batch in this rank (B) */
    int64_t nlocal;                           /* this rank's training images a pass: every
                                                 training step has lb rows, the last one
                                                 padded (run_batch) */
    l8_tensor *bad;                           /* (1) i32: row numbers out of range (never, we hope) */
    int64_t R;                                /* rows of the per-pass tensors */
    l8_tensor *in;                            /* (B,784) bf16: the batch's images */
    l8_tensor *pre[MAX_LAYERS];               /* (B, dims[i+1]) bf16 Linear outputs; the
                                                 next layer applies the GELU itself */
    l8_tensor *grad[MAX_LAYERS + 1];          /* (B, dims[i]) bf16 gradients of the layers'
                                                 inputs (grad[i], i > 0: of gelu(pre[i-1])) */
    l8_offload *off;                          /* --offload: NULL without */
    int off_keep;                             /* layers at the end that keep their activations */
} model;

#define CK(x) do { l8_status st_ = (x); if (st_ != L8_OK) { \
    fprintf(stderr, "lean8-train: %s\n  at %s:%d: %s\n", l8_last_error_string(), __FILE__, __LINE__, #x); \
    goto fail; } } while (0)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lean8-train [--hidden 256,128] [--batch 128] [--epochs 10] [--lr 1e-3] [--wd 0.01]\n"
            "                   [--fp8|--bf16] [--fp8-head] [--device host|cuda:N] [--seed N]\n"
            "                   [--save PATH] [--resume PATH] [--stop-after E] [--data DIR]\n"
            "                   [--limit N] [--drop-last] [--quiet] [--tp N] [--dp N [--zero1]]\n"
            "                   [--no-graph] [--graph-steps N] [--step-times] [--help]\n"
            "                   [--version] [--offload[=K]] [--no-dgrad-cast]\n"
            "                   [--no-head-dgrad-cast]\n"
            "  --fp8-head  FP8 mode: the head in FP8 too (default: hidden layers FP8, head bf16)\n"
            "  --drop-last  whole batches only: each epoch leaves out its last, partial batch\n"
            "          (as --limit at the last whole batch)\n"
            "  --graph-steps N  CUDA graphs: N full training steps a launch (1..64, default 16)\n"
            "  --no-dgrad-cast  FP8: each hidden layer casts its own output gradient (default:\n"
            "          the dgrad of the FP8 layer above casts it, l8_linear_backward_fp8_dx)\n"
            "  --no-head-dgrad-cast  FP8: the top hidden layer casts its own output gradient\n"
            "          (default: the head's dgrad casts it, l8_linear_backward_dx;\n"
            "          --head-dgrad-cast asks for the default)\n"
            "  --step-times  after each epoch, the GPU's time per training step (events\n"
            "          around each launch)\n"
            "  --tp N  tensor parallel over N ranks (start with lean8-run -n N): fc1 column-,\n"
            "          fc2 row-parallel, the rest replicated\n"
            "  --dp N  data parallel over N ranks (lean8-run -n N, or -n TP*DP with --tp):\n"
            "          --batch is the global batch, split between them\n"
            "  --zero1 with --dp: ZeRO-1, each rank keeps 1/N of the optimizer state; with\n"
            "          --save each rank writes PATH.rank<r> and --resume reads it\n");
}

/* An integer flag's value: all of v, lo <= value <= hi, no overflow. */
static int parse_int(const char *flag, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "lean8-train: %s wants an integer in %ld..%ld, not '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A float flag's value: all of v, finite, and > 0 (positive) or >= 0. */
static int parse_float(const char *flag, const char *v, int positive, float *out)
{
    char *end;
    float x = strtof(v, &end);
    if (end == v || *end || !isfinite(x) || (positive ? !(x > 0) : !(x >= 0))) {
        fprintf(stderr, "lean8-train: %s wants a finite number %s 0, not '%s'\n", flag,
                positive ? ">" : ">=", v);
        return -1;
    }
    *out = x;
    return 0;
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

/* 0: run; 1: done (--help, --version: exit 0); -1: usage error (exit 2). */
static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .hidden = { 256, 128 }, .nhidden = 2, .batch = 128, .epochs = 10, .fp8 = 1,
                 .lr = 1e-3f, .wd = 0.01f, .seed = 1, .tp = 1, .dp = 1, .graph_steps = 16 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
        else if (!strcmp(a, "--version")) { printf("lean8-train (lean8 %s)\n", l8_version()); return 1; }
        else if (!strcmp(a, "--fp8")) o->fp8 = 1;
        else if (!strcmp(a, "--bf16")) o->fp8 = 0;
        else if (!strcmp(a, "--fp8-head")) o->fp8_head = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--no-graph")) o->no_graph = 1;
        else if (!strcmp(a, "--step-times")) o->step_times = 1;
        else if (!strcmp(a, "--drop-last")) o->drop_last = 1;
        else if (!strcmp(a, "--no-dgrad-cast")) o->no_dgrad_cast = 1;
        else if (!strcmp(a, "--head-dgrad-cast")) o->no_head_dgrad_cast = 0;
        else if (!strcmp(a, "--no-head-dgrad-cast")) o->no_head_dgrad_cast = 1;
        else if (!strcmp(a, "--zero1")) o->zero1 = 1;
        else if (!strcmp(a, "--offload")) { o->offload = 1; o->offload_keep = 1; }
        else if (!strncmp(a, "--offload=", 10)) {
            o->offload = 1;
            if (parse_int("--offload", a + 10, 0, MAX_LAYERS, &o->offload_keep)) return -1;
        }
        else if (!v) { fprintf(stderr, "lean8-train: %s needs a value\n", a); return -1; }
        else if (!strcmp(a, "--graph-steps")) { if (parse_int(a, v, 1, 64, &o->graph_steps)) return -1; i++; }
        else if (!strcmp(a, "--hidden")) { if (parse_hidden(v, o)) { fprintf(stderr, "lean8-train: --hidden wants sizes that are multiples of 16 (16..65536), e.g. 256,128\n"); return -1; } i++; }
        else if (!strcmp(a, "--batch")) { if (parse_int(a, v, 1, 65536, &o->batch)) return -1; i++; }
        else if (!strcmp(a, "--tp")) { if (parse_int(a, v, 1, 64, &o->tp)) return -1; i++; }
        else if (!strcmp(a, "--dp")) { if (parse_int(a, v, 1, 64, &o->dp)) return -1; i++; }
        else if (!strcmp(a, "--epochs")) { if (parse_int(a, v, 0, 1000000, &o->epochs)) return -1; i++; }
        else if (!strcmp(a, "--limit")) { if (parse_int(a, v, 0, INT32_MAX, &o->limit)) return -1; i++; }
        else if (!strcmp(a, "--stop-after")) { if (parse_int(a, v, 0, 1000000, &o->stop_after)) return -1; i++; }
        else if (!strcmp(a, "--lr")) { if (parse_float(a, v, 1, &o->lr)) return -1; i++; }
        else if (!strcmp(a, "--wd")) { if (parse_float(a, v, 0, &o->wd)) return -1; i++; }
        else if (!strcmp(a, "--seed")) {
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            if (v[strspn(v, " \t")] == '-' || errno == ERANGE) end = (char *)v;   /* refused below */
            i++;
        }
        else if (!strcmp(a, "--device")) { o->device = v; i++; }
        else if (!strcmp(a, "--save")) { o->save = v; i++; }
        else if (!strcmp(a, "--resume")) { o->resume = v; i++; }
        else if (!strcmp(a, "--data")) { o->data = v; i++; }
        else { fprintf(stderr, "lean8-train: unknown option %s\n", a); return -1; }
        if (end && *end) { fprintf(stderr, "lean8-train: bad value for %s: %s\n", a, v); return -1; }
        end = NULL;
    }
    if (o->fp8_head && !o->fp8) {
        fprintf(stderr, "lean8-train: --fp8-head puts the head of an FP8 run in FP8; it does not go"
                " with --bf16\n");
        return -1;
    }
    if (o->tp > 1 && (o->hidden[0] % (16 * o->tp))) {
        fprintf(stderr, "lean8-train: --tp %d splits the first hidden layer (%d) into %d parts that "
                "must be multiples of 16\n", o->tp, o->hidden[0], o->tp);
        return -1;
    }
    if (o->batch % o->dp) {
        fprintf(stderr, "lean8-train: --dp %d must split --batch %d into equal parts\n", o->dp,
                o->batch);
        return -1;
    }
    if (o->zero1 && (o->dp < 2 || o->tp > 1)) {
        fprintf(stderr, "lean8-train: --zero1 shards the optimizer over --dp ranks: it needs --dp 2 "
                "or more and no --tp\n");
        return -1;
    }
    if (o->tp > 1 && (o->save || o->resume)) {
        fprintf(stderr, "lean8-train: --save and --resume are not supported with --tp yet (each rank "
                "holds a shard of fc1 and fc2)\n");
        return -1;
    }
    if (o->limit && o->limit < o->batch) {
        fprintf(stderr, "lean8-train: --limit %d is smaller than one batch (--batch %d)\n", o->limit,
                o->batch);
        return -1;
    }
    return 0;
}

/* v rounded up to a multiple of 16: the row stride of an FP8 transpose of v
 * rows (fp8_over). */
static int64_t r16(int64_t v) { return (v + 15) / 16 * 16; }

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
    l8_tensor *ts[] = { m->labels, m->x[0], m->x[1], m->x8, m->y[0], m->y[1], m->order, m->loss,
                        m->hit, m->bad, m->rates, m->step_loss, m->step_hit, m->in };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) l8_tensor_destroy(ts[i]);
    for (int i = 0; i <= MAX_LAYERS; i++) {
        l8_tensor_destroy(m->grad[i]);
        if (i < MAX_LAYERS) l8_tensor_destroy(m->pre[i]);
    }
    l8_optim_destroy(m->optim);
    l8_recipe_destroy(m->recipe);
    l8_gemm_handle_destroy(m->gemm);
    l8_ddp_destroy(m->ddp);       /* before its group (ddp.h: g must outlive it) */
    l8_params_destroy(m->params);
    l8_comm_destroy(m->tpc);
    l8_comm_destroy(m->dpc);
    l8_comm_destroy(m->world);
    l8_event_destroy(m->ev_fork);
    l8_event_destroy(m->ev_join);
    l8_event_destroy(m->ev_w16);
    l8_event_destroy(m->ev_xt);
    l8_event_destroy(m->ev_side);
    l8_event_destroy(m->ev_wg);
    l8_event_destroy(m->ev_h);
    l8_fp8_meta_release(m->x8meta);
    for (int k = 0; k < 2; k++)
        l8_storage_release(m->dg8[k]);
    l8_storage_release(m->hscr);
    l8_ctx_destroy(m->ctx);
    memset(m, 0, sizeof *m);
}

/* Register fc1..fc<nl> with out x in features dims_out[i] x dims_in[i]. */
static l8_status add_layers(l8_params *g, int nl, const int64_t *dims, int *wid, int *bid)
{
    for (int i = 0; i < nl; i++) {
        char name[32];
        int64_t w[2] = { dims[i + 1], dims[i] }, b[1] = { dims[i + 1] };
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        L8_CHECK(l8_params_add(g, name, 2, w, &wid[i]));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        L8_CHECK(l8_params_add(g, name, 1, b, &bid[i]));
    }
    return l8_params_finalize(g);
}

/* nn.Linear's initialization of the whole model, from the seed. */
static l8_status init_layers(l8_params *g, int nl, const int64_t *dims, const int *wid,
                             const int *bid, uint64_t seed)
{
    for (int i = 0; i < nl; i++) {
        float bound = 1.0f / sqrtf((float)dims[i]);
        L8_CHECK(l8_params_init_kaiming_uniform(g, wid[i], sqrtf(5.0f), seed * 131 + (uint64_t)i));
        L8_CHECK(l8_params_init_uniform(g, bid[i], -bound, bound, seed * 137 + (uint64_t)i));
    }
    return L8_OK;
}

/* --tp: initialize the whole model as one rank would (a group of the full
 * shapes on this context), then keep this rank's shard of fc1 (rows: its
 * outputs) and fc2 (columns: its inputs), so every --tp trains the same
 * model. */
static l8_status init_shards(model *m, uint64_t seed)
{
    l8_params *full = NULL;
    int fw[MAX_LAYERS], fb[MAX_LAYERS];
    float *buf = NULL, *part = NULL;
    l8_status st = l8_params_create(m->ctx, NULL, &full);
    if (st == L8_OK) st = add_layers(full, m->nl, m->dims, fw, fb);
    if (st == L8_OK) st = init_layers(full, m->nl, m->dims, fw, fb, seed);
    size_t most = (size_t)m->dims[1] * (size_t)(m->dims[0] > m->dims[2] ? m->dims[0] : m->dims[2]);
    for (int i = 2; i < m->nl; i++)
        if ((size_t)(m->dims[i] * m->dims[i + 1]) > most) most = (size_t)(m->dims[i] * m->dims[i + 1]);
    buf = malloc(sizeof *buf * most);
    part = malloc(sizeof *part * most);
    if (st == L8_OK && (!buf || !part)) st = L8_FAIL(L8_ERR_OOM, "lean8-train: out of host memory");
    for (int i = 0; i < m->nl && st == L8_OK; i++) {
        size_t n = (size_t)m->dims[i + 1], k = (size_t)m->dims[i], ln = (size_t)m->ld[i + 1],
               lk = (size_t)m->ld[i];
        st = l8_params_get_host(full, fw[i], buf, n * k);
        for (size_t r = 0; r < ln && st == L8_OK; r++)       /* rows [rank*ln, ..), cols [rank*lk, ..) */
            memcpy(part + r * lk, buf + ((size_t)m->rank * (ln < n ? ln : 0) + r) * k +
                   (size_t)m->rank * (lk < k ? lk : 0), sizeof *part * lk);
        if (st == L8_OK) st = l8_params_set_host(m->params, m->wid[i], part, ln * lk);
        if (st == L8_OK) st = l8_params_get_host(full, fb[i], buf, n);
        if (st == L8_OK)
            st = l8_params_set_host(m->params, m->bid[i], buf + (size_t)m->rank * (ln < n ? ln : 0), ln);
    }
    free(buf);
    free(part);
    l8_params_destroy(full);
    return st;
}

/* --tp: join the job (lean8-run -n N) and make its tensor-parallel group. */
/* --tp/--dp: join the job (lean8-run -n TP*DP) and make its groups (TP
 * ranks adjacent). */
static l8_status join(model *m, const opts *o)
{
    m->tp = o->tp;
    m->dp = o->dp;
    int world = o->tp * o->dp;
    if (world == 1) return L8_OK;
    L8_CHECK(l8_comm_init_env(m->ctx, NULL, &m->world));
    if (l8_comm_size(m->world) != world)
        return L8_FAIL(L8_ERR_INVALID_ARG, "lean8-train: --tp %d --dp %d needs %d ranks (lean8-run "
                       "-n %d); this job has %d", o->tp, o->dp, world, world,
                       l8_comm_size(m->world));
    L8_CHECK(l8_comm_grid(m->world, o->tp, &m->tpc, &m->dpc));
    m->rank = l8_comm_rank(m->tpc);
    m->dp_rank = l8_comm_rank(m->dpc);
    m->wrank = l8_comm_rank(m->world);
    return L8_OK;
}

/* --dp: the loss and hit counts of a pass summed over the DP group (each
 * rank trained on its own images). */
static l8_status dp_sum(model *m, double *loss, int64_t *hits)
{
    if (m->dp == 1) return L8_OK;
    int64_t one[1] = { 2 };
    l8_tensor *t = NULL;
    float v[2] = { (float)*loss, (float)*hits };
    l8_status st = l8_tensor_empty(m->ctx, L8_F32, 1, one, &t);
    if (st == L8_OK) st = l8_tensor_copy_from_host(t, v, sizeof v, m->s);
    if (st == L8_OK) st = l8_comm_all_reduce(m->dpc, t, t, L8_REDUCE_SUM, m->s);
    if (st == L8_OK) st = l8_tensor_copy_to_host(t, v, sizeof v, m->s);
    if (st == L8_OK) st = l8_stream_synchronize(m->s);
    l8_tensor_destroy(t);
    *loss = v[0];
    *hits = (int64_t)v[1];
    return st;
}

static int fp8_layer(const model *m, int i)
{
    return l8_linear_get_mode(m->lin[i]) == L8_LINEAR_FP8;
}

static l8_status model_build(model *m, const opts *o)
{
    l8_status st = L8_OK;
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = o->device;
    /* the step's critical path is on s (compute); the weight copies, wgrads,
     * transposes, loss filing and recipe update beside it go second when
     * they compete for SMs (docs/perf.md, 2026-12-03) */
    cc.high_priority = 1u << L8_STREAM_COMPUTE;
    L8_CHECK(l8_ctx_create(&cc, &m->ctx));
    m->s = l8_ctx_stream(m->ctx, L8_STREAM_COMPUTE);
    m->side = l8_ctx_stream(m->ctx, L8_STREAM_COPY);
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_fork));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_join));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_w16));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_xt));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_side));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_wg));
    L8_CHECK(l8_event_create(m->ctx, 0, &m->ev_h));
    L8_CHECK(join(m, o));
    m->nl = o->nhidden + 1;
    m->dims[0] = IN_FEATURES;
    for (int i = 0; i < o->nhidden; i++) m->dims[i + 1] = o->hidden[i];
    m->dims[m->nl] = HEAD;
    for (int i = 0; i <= m->nl; i++) m->ld[i] = i == 1 ? m->dims[1] / m->tp : m->dims[i];
    l8_params_config pc = L8_PARAMS_CONFIG_INIT;
    if (o->zero1) pc.pad_to = (int64_t)L8_PARAMS_ALIGN_ELEMS * o->dp;   /* buckets split evenly */
    L8_CHECK(l8_params_create(m->ctx, &pc, &m->params));
    L8_CHECK(add_layers(m->params, m->nl, m->ld, m->wid, m->bid));
    if (m->tp > 1) L8_CHECK(init_shards(m, o->seed));
    else L8_CHECK(init_layers(m->params, m->nl, m->dims, m->wid, m->bid, o->seed));
    l8_adamw_config ac = L8_ADAMW_CONFIG_INIT;
    ac.lr = o->lr;
    ac.weight_decay = o->wd;
    L8_CHECK(l8_optim_create_adamw(m->params, &ac, &m->optim));
    L8_CHECK(l8_gemm_handle_create(m->ctx, NULL, &m->gemm));
    if (o->fp8) L8_CHECK(l8_recipe_create(m->ctx, NULL, &m->recipe));
    /* one scale per FP8 role on every rank: the amaxes reduced over the whole job */
    if (o->fp8 && m->world) L8_CHECK(l8_recipe_set_reduce(m->recipe, l8_comm_reduce_amax, m->world));
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
        /* FP8: the head in bf16 unless --fp8-head (its recipe roles are then not made) */
        lc.mode = o->fp8 && (o->fp8_head || i < m->nl - 1) ? L8_LINEAR_FP8 : L8_LINEAR_BF16;
        lc.gemm = m->gemm;
        lc.recipe = m->recipe;
        lc.weight = l8_params_master(m->params, m->wid[i]);
        lc.weight_grad = l8_params_main_grad(m->params, m->wid[i]);
        lc.bias = l8_params_master(m->params, m->bid[i]);
        lc.bias_grad = l8_params_main_grad(m->params, m->bid[i]);
        lc.weight_id = m->wid[i];
        lc.bias_id = m->bid[i];
        if (m->dp > 1) {          /* gradients reported into the group, reduced by m->ddp */
            lc.grad_ready = l8_params_grad_ready;
            lc.grad_ready_arg = m->params;
        }
        if (m->tp > 1 && i < 2) { /* fc1 column-, fc2 row-parallel (Megatron's MLP) */
            lc.tp_comm = m->tpc;
            lc.parallel = i == 0 ? L8_PARALLEL_COLUMN : L8_PARALLEL_ROW;
        }
        lc.save_hooks = m->off ? &hk : NULL;
        L8_CHECK(l8_linear_create(m->ctx, &lc, &m->lin[i]));
    }
    /* one process: the wgrads above the first layer on the comm stream
     * (nothing else uses it then; offload copies on the copy stream),
     * beside the next layer's dGELU and dgrad, planned for WGRAD_SMS; the
     * first layer's wgrad is the backward's last work and stays on s
     * (docs/perf.md, 2026-12-02 (third afternoon)); an FP8 layer's dgrad
     * beside them planned for DGRAD_SMS. With and without --offload alike,
     * so that both run the same GEMM plans. */
    if (!m->world) {
        m->wgs = l8_ctx_stream(m->ctx, L8_STREAM_COMM);
        for (int i = 1; i < m->nl; i++) {
            L8_CHECK(l8_linear_set_wgrad_stream(m->lin[i], m->wgs, WGRAD_SMS));
            if (fp8_layer(m, i))
                L8_CHECK(l8_linear_set_dgrad_sms(m->lin[i], DGRAD_SMS));
        }
    }
    if (m->dp > 1) {
        l8_ddp_config dc = L8_DDP_CONFIG_INIT;
        dc.zero1 = o->zero1;
        L8_CHECK(l8_ddp_create(m->params, m->dpc, &dc, &m->ddp));
    }
    if (o->zero1) {               /* this rank's ranges of the optimizer; the norm over all */
        int64_t off[L8_OPTIM_MAX_RANGES], num[L8_OPTIM_MAX_RANGES];
        int nr = 0;
        L8_CHECK(l8_ddp_shard_ranges(m->ddp, L8_OPTIM_MAX_RANGES, &nr, off, num));
        L8_CHECK(l8_optim_set_shard(m->optim, nr, off, num));
        L8_CHECK(l8_optim_set_norm_reduce(m->optim, l8_comm_reduce_sum, m->dpc));
        L8_CHECK(l8_optim_set_shard_rank(m->optim, m->dp_rank, m->dp));   /* named in checkpoints */
        m->zero1 = 1;
    }
    m->lb = o->batch / o->dp;
    m->labels = new2(m->ctx, L8_I32, m->lb, 0, &st);
    m->in = new2(m->ctx, L8_BF16, m->lb, m->ld[0], &st);
    for (int i = 0; i <= m->nl; i++) {
        m->grad[i] = new2(m->ctx, L8_BF16, m->lb, m->ld[i], &st);
        if (i < m->nl) m->pre[i] = new2(m->ctx, L8_BF16, m->lb, m->ld[i + 1], &st);
    }
    /* the split's buffers: dY8 for the widest FP8 layer below the head,
     * dY8t for each (a wgrad on wgs may still read one layer's while the
     * next layer's cast writes its own) */
    int64_t widest = 0, total = 0;
    for (int i = 0; o->fp8 && !m->world && !m->off && i + 1 < m->nl; i++)
        if (fp8_layer(m, i)) {
            if (m->ld[i + 1] > widest) widest = m->ld[i + 1];
            m->dgt_off[i] = total;
            total += r16(m->lb) * m->ld[i + 1];
        }
    m->split_casts = widest > 0;
    m->dgrad_cast = m->split_casts && !o->no_dgrad_cast;
    m->head_cast = m->dgrad_cast && !o->no_head_dgrad_cast;
    m->dg_slot = m->lb * widest;
    m->gelu_out = m->tp == 1;
    /* an FP8 h's amax, deferred to the end of the step (gelu_amax) */
    int64_t hw = 0;
    for (int i = 0; m->gelu_out && i + 1 < m->nl; i++)
        if (fp8_layer(m, i) && fp8_layer(m, i + 1)) {
            if (st == L8_OK) st = l8_linear_set_gelu_amax_by_caller(m->lin[i], 1);
            if (m->ld[i + 1] > hw) hw = m->ld[i + 1];
        }
    if (hw && st == L8_OK)
        st = l8_storage_create_tagged(m->ctx, (size_t)(m->lb * hw), m->s, "train.h_amax",
                                      &m->hscr);
    for (int k = 0; m->split_casts && st == L8_OK && k < 2; k++)
        st = l8_storage_create_tagged(m->ctx, (size_t)(k ? total : 2 * m->dg_slot), m->s,
                                      k ? "train.dy_fp8_t" : "train.dy_fp8", &m->dg8[k]);
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
    l8_tensor *order, *labels, *loss, *hit, *in, *pre[MAX_LAYERS], *grad[MAX_LAYERS + 1];
    l8_tensor *x8, *x8t;                      /* FP8 training: the first layer's input, cast
                                                 outside the layer (see run_batch) */
    l8_tensor *h[MAX_LAYERS], *ht[MAX_LAYERS];     /* gelu_out: layer i + 1's input from
                                                      layer i's GEMM, and (FP8) its
                                                      transpose */
} batch_views;

static void views_free(batch_views *v)
{
    l8_tensor_destroy(v->order);
    l8_tensor_destroy(v->labels);
    l8_tensor_destroy(v->loss);
    l8_tensor_destroy(v->hit);
    l8_tensor_destroy(v->in);
    for (int i = 0; i <= MAX_LAYERS; i++) {
        l8_tensor_destroy(v->grad[i]);
        if (i < MAX_LAYERS) l8_tensor_destroy(v->pre[i]);
    }
    l8_tensor_destroy(v->x8);     /* stream-ordered */
    l8_tensor_destroy(v->x8t);
    for (int i = 0; i < MAX_LAYERS; i++) {
        l8_tensor_destroy(v->h[i]);
        l8_tensor_destroy(v->ht[i]);
    }
    memset(v, 0, sizeof *v);
}

/* An FP8 tensor (r, c) of storage st from byte off, its rows ld bytes
 * apart (ld == c: contiguous), carrying meta. The transpose of `rows` rows
 * as a Linear's wgrad reads it (ops/linear.h) is (c, rows) with ld =
 * r16(rows): row-padded (ops/cast.h), the rest of each row zeros once the
 * cast or transpose that writes it has run. */
static l8_status fp8_over(l8_storage *st, int64_t off, l8_dtype fmt, int64_t r, int64_t c,
                          int64_t ld, l8_fp8_meta *meta, l8_tensor **t)
{
    int64_t sh[2] = { r, c }, sd[2] = { ld, 1 };
    L8_CHECK(l8_tensor_from_storage(st, (size_t)off, fmt, 2, sh, ld == c ? NULL : sd, t));
    return l8_tensor_set_fp8_meta(*t, meta);
}

/* FP8 training: the first layer's input X8 (rows, 784) and X8t (784, rows)
 * in its input format with the data set's fixed-scale meta, new storages on
 * m->s - what the layer's own cast would allocate. */
static l8_status first_input_fp8(model *m, int64_t rows, l8_tensor **x8, l8_tensor **x8t)
{
    l8_dtype fmt = l8_recipe_dtype(m->recipe, L8_ROLE_INPUT);
    for (int k = 0; k < 2; k++) {
        l8_storage *st = NULL;
        L8_CHECK(l8_storage_create_tagged(m->ctx, (size_t)((k ? r16(rows) : rows) * m->ld[0]),
                                          m->s, k ? "fc1.x_fp8_t" : "fc1.x_fp8", &st));
        l8_status ret = k ? fp8_over(st, 0, fmt, m->ld[0], rows, r16(rows), m->x8meta, x8t)
                          : fp8_over(st, 0, fmt, rows, m->ld[0], m->ld[0], m->x8meta, x8);
        l8_storage_release(st);
        L8_CHECK(ret);
    }
    return L8_OK;
}

/* gelu_out: layer i + 1's input h (rows, n) - for an FP8 layer in its
 * input format with its input meta, and, training, ht (n, rows) - new
 * storages on m->s. */
static l8_status gelu_out_new(model *m, int i, int64_t rows, int train, batch_views *v)
{
    const int64_t n = m->ld[i + 1];
    if (!fp8_layer(m, i + 1)) {
        int64_t sh[2] = { rows, n };
        return l8_tensor_empty(m->ctx, L8_BF16, 2, sh, &v->h[i]);
    }
    const l8_linear *nx = m->lin[i + 1];
    l8_fp8_meta *meta = l8_recipe_meta(m->recipe, l8_linear_role_index(nx, L8_ROLE_INPUT));
    l8_dtype fmt = l8_recipe_dtype(m->recipe, L8_ROLE_INPUT);
    for (int k = 0; k < 1 + train; k++) {
        l8_storage *st = NULL;
        L8_CHECK(l8_storage_create_tagged(m->ctx, (size_t)((k ? r16(rows) : rows) * n), m->s,
                                          k ? "train.h_fp8_t" : "train.h_fp8", &st));
        l8_status ret = k ? fp8_over(st, 0, fmt, n, rows, r16(rows), meta, &v->ht[i])
                          : fp8_over(st, 0, fmt, rows, n, n, meta, &v->h[i]);
        l8_storage_release(st);
        L8_CHECK(ret);
    }
    return L8_OK;
}

/* gelu_out between FP8 layers: each FP8 h's amax, as the next layer's cast
 * of gelu(pre[i]) would have accumulated it (l8_linear_set_gelu_amax_by_caller),
 * on st before the recipe update - next to the optimizer step, where it
 * delays no GEMM. pre[i] is unchanged until the next step's forward. */
static l8_status gelu_amax(model *m, const batch_views *v, int64_t rows, l8_stream *st)
{
    for (int i = 0; m->hscr && i + 1 < m->nl; i++) {
        if (!fp8_layer(m, i) || !fp8_layer(m, i + 1))
            continue;
        l8_fp8_meta *meta = l8_recipe_meta(m->recipe, l8_linear_role_index(m->lin[i + 1],
                                                                           L8_ROLE_INPUT));
        l8_tensor *t = NULL;
        L8_CHECK(fp8_over(m->hscr, 0, l8_recipe_dtype(m->recipe, L8_ROLE_INPUT), rows,
                          m->ld[i + 1], m->ld[i + 1], meta, &t));
        l8_status ret = l8_fp8_cast_transpose_act(L8_ACT_GELU, v->pre[i], t, NULL,
                                                  L8_CAST_ACCUMULATE_AMAX, st);
        l8_tensor_destroy(t);
        L8_CHECK(ret);
    }
    return L8_OK;
}

/* Views for the batch at rows [at, at + rows) of a pass; with stat, the
 * loss and hit rows are those of the static step buffers instead and there
 * is no order view: a graph step finds its rows at the step cursor (at is
 * then ignored: a graph step's addresses never change). */
static l8_status views_make(model *m, int64_t at, int64_t rows, int stat, batch_views *v)
{
    l8_status st = L8_OK;
    if (stat) at = 0;
    else st = l8_tensor_narrow(m->order, 0, at, rows, &v->order);
    if (st == L8_OK) st = l8_tensor_narrow(stat ? m->step_loss : m->loss, 0, at, rows, &v->loss);
    if (st == L8_OK) st = l8_tensor_narrow(stat ? m->step_hit : m->hit, 0, at, rows, &v->hit);
    v->labels = rows_of(m->labels, rows, &st);
    v->in = rows_of(m->in, rows, &st);
    for (int i = 0; i <= m->nl; i++) {
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

/* The side stream waits for the work on m->s so far. */
static l8_status fork_side(model *m)
{
    L8_CHECK(l8_event_record(m->ev_fork, m->s));
    return l8_stream_wait_event(m->side, m->ev_fork);
}

/* Layer i's dY8 [rows, n] and dY8t [n, rows] (row-padded to B16) in the
 * split's buffers, with its grad_output meta: slot i % 2 of dg8[0] (a dgrad
 * reads its own layer's slot while writing the layer below's), dg8[1] at
 * dgt_off[i]. The caller destroys both views. */
static l8_status split_dy8(model *m, int i, int64_t rows, l8_tensor **dy8, l8_tensor **dy8t)
{
    const int64_t n = m->ld[i + 1];
    l8_fp8_meta *gm = l8_recipe_meta(m->recipe, l8_linear_role_index(m->lin[i],
                                                                     L8_ROLE_GRAD_OUTPUT));
    const l8_dtype fmt = l8_recipe_dtype(m->recipe, L8_ROLE_GRAD_OUTPUT);
    L8_CHECK(fp8_over(m->dg8[0], (i % 2) * m->dg_slot, fmt, rows, n, n, gm, dy8));
    return fp8_over(m->dg8[1], m->dgt_off[i], fmt, n, rows, r16(rows), gm, dy8t);
}

/* The backward of FP8 layer i below the head with its casts split (m->split_casts):
 * dY = bf16(dgelu(grad[i + 1], pre[i])) cast on s without the bias gradient
 * (the small-tile kernel's dGELU cast without dbias, the quarter or eighth
 * form) - or, with cast_done, already cast by the dgrad of layer i + 1 -
 * while the side stream writes the same dY in bf16 (l8_gelu_backward)
 * and sums its columns into the bias's main_grad (l8_dbias_dact: ceil(n /
 * 32) light CTAs, nothing cast); then
 * l8_linear_backward_fp8 with that main_grad as db (the step's first
 * backward: nothing more is enqueued for the bias). Bit for bit
 * l8_linear_backward_act: dY cast with the layer's meta, the amax
 * accumulated, and the column sums in the one order every cast kernel keeps
 * (ops/cast.h; tests/train.sh: --offload runs, which do not split, give the
 * same losses). With m->dgrad_cast and layer i - 1 split too, the dgrad
 * casts that layer's dY (l8_linear_backward_fp8_dx: in one launch where the
 * small FP8 GEMM kernel takes the dgrad) and *cast_below is set. s waits
 * for the side stream before the optimizer step reads the gradients
 * (ev_side). */
static l8_status backward_split(model *m, batch_views *v, int i, int64_t rows,
                                l8_linear_ctx **saved, l8_tensor *dx, int cast_done,
                                int *cast_below)
{
    l8_tensor *db = l8_params_main_grad(m->params, m->bid[i]);
    l8_tensor *dy8 = NULL, *dy8t = NULL, *dz8 = NULL, *dz8t = NULL;
    l8_status st = L8_OK;
    *cast_below = 0;
    L8_TRY(st, split_dy8(m, i, rows, &dy8, &dy8t), out);
    L8_TRY(st, fork_side(m), out);
    L8_TRY(st, l8_dbias_dact(L8_ACT_GELU, v->grad[i + 1], v->pre[i], db, m->side), out);
    L8_TRY(st, l8_event_record(m->ev_side, m->side), out);
    if (!cast_done)
        L8_TRY(st, l8_fp8_cast_transpose_dact(L8_ACT_GELU, v->grad[i + 1], v->pre[i], dy8, dy8t,
                                              NULL, L8_CAST_ACCUMULATE_AMAX, m->s), out);
    if (m->dgrad_cast && dx && i > 0 && fp8_layer(m, i - 1)) {
        L8_TRY(st, split_dy8(m, i - 1, rows, &dz8, &dz8t), out);
        L8_TRY(st, l8_linear_backward_fp8_dx(m->lin[i], saved, dy8, dy8t, db, dx, v->pre[i - 1],
                                             dz8, dz8t, m->s), out);
        *cast_below = 1;
    } else {
        L8_TRY(st, l8_linear_backward_fp8(m->lin[i], saved, dy8, dy8t, db, dx, m->s), out);
    }
out:
    l8_tensor_destroy(dy8);
    l8_tensor_destroy(dy8t);
    l8_tensor_destroy(dz8);
    l8_tensor_destroy(dz8t);
    return st;
}

/* The head's backward (layer i = nl - 1, above FP8 layer i - 1, with
 * m->head_cast): l8_linear_backward whose dgrad also casts layer i - 1's dY
 * through its GELU into the split's dY8 and dY8t (l8_linear_backward_dx:
 * one launch where lean8's small GEMM kernel takes the dgrad - a bf16
 * head's, K = 16); layer i - 1 then runs backward_split with cast_done.
 * The same bits as the head's l8_linear_backward_act and the cast in
 * backward_split (tests/train.sh, --no-head-dgrad-cast, --no-dgrad-cast). */
static l8_status backward_head(model *m, batch_views *v, int i, int64_t rows,
                               l8_linear_ctx **saved, l8_tensor *dx)
{
    l8_tensor *dz8 = NULL, *dz8t = NULL;
    l8_status st = L8_OK;
    L8_TRY(st, split_dy8(m, i - 1, rows, &dz8, &dz8t), out);
    L8_TRY(st, l8_linear_backward_dx(m->lin[i], saved, v->grad[i + 1], dx, v->pre[i - 1], dz8,
                                     dz8t, m->s), out);
out:
    l8_tensor_destroy(dz8);
    l8_tensor_destroy(dz8t);
    return st;
}

/* Forward (and with train, backward and the optimizer step) of the batch at
 * rows [at, at + rows) of the current pass over split (0 train, 1 test):
 * images x[split][order[at + r]]; the loss and hit of each image land in
 * loss[at + r], hit[at + r]. Enqueued on m->s; nothing waits. With stat (a
 * graph step, training), at = k * lb for the optimizer's step cursor k,
 * read on the device: the step's rows are gathered, and its losses and
 * hits filed, at the cursor. */
static l8_status run_batch(model *m, int split, int64_t at, int64_t rows, int train, int stat)
{
    batch_views v = {0};
    l8_linear_ctx *saved[MAX_LAYERS] = {0};
    l8_status st;
    /* FP8 training in one TP rank takes its images from the data set cast
     * once (m->x8): the step gathers their FP8 rows on s, and the side
     * stream transposes them for the first layer's wgrad after the weight
     * copies, off the critical path (docs/perf.md, 2026-12-02 night) */
    const int pre8 = train && split == 0 && m->x8;
    L8_TRY(st, views_make(m, at, rows, stat, &v), out);
    if (train && !pre8 && m->off && m->nl > m->off_keep)
        L8_TRY(st, fresh_rows(m, rows, m->ld[0], &v.in), out);
    if (pre8)
        L8_TRY(st, first_input_fp8(m, rows, &v.x8, &v.x8t), out);
    /* the batch on s while the side stream makes the weight copies. (The
     * other way round, the batch on the side stream, a CUDA graph of an FP8
     * step started the gathers only once the weight cast had ended, 6 us
     * into the step; this way both start at once: docs/perf.md, 2026-12-02
     * evening.) */
    if (train) L8_TRY(st, fork_side(m), out);
    l8_tensor *src = pre8 ? m->x8 : m->x[split], *dst = pre8 ? v.x8 : v.in;
    if (stat) {
        l8_tensor *k = l8_optim_cursor(m->optim);
        L8_TRY(st, l8_gather_rows_at(src, m->order, k, m->lb, dst, m->bad, m->s), out);
        L8_TRY(st, l8_gather_rows_at(m->y[split], m->order, k, m->lb, v.labels, m->bad, m->s),
               out);
    } else {
        L8_TRY(st, l8_gather_rows(src, v.order, dst, m->bad, m->s), out);
        L8_TRY(st, l8_gather_rows(m->y[split], v.order, v.labels, m->bad, m->s), out);
    }
    int wait16 = 0;               /* s still has to wait for the bf16 weight copies */
    if (train) {
        for (int i = 0; i < m->nl; i++) L8_TRY(st, l8_linear_begin_step(m->lin[i]), out);
        /* the weight copies, FP8 layers first (one cast launch for all),
         * then the bf16 ones: s waits for each group just before the first
         * layer that needs it */
        l8_linear *g8[MAX_LAYERS], *g16[MAX_LAYERS];
        int n8 = 0, n16 = 0;
        for (int i = 0; i < m->nl; i++) {
            if (fp8_layer(m, i)) g8[n8++] = m->lin[i];
            else g16[n16++] = m->lin[i];
        }
        if (n8) {
            L8_TRY(st, l8_linear_refresh_weights(g8, n8, m->side), out);
            L8_TRY(st, l8_event_record(m->ev_join, m->side), out);
        }
        if (n16) {
            L8_TRY(st, l8_linear_refresh_weights(g16, n16, m->side), out);
            L8_TRY(st, l8_event_record(m->ev_w16, m->side), out);
            wait16 = 1;
        }
        if (pre8) {               /* after the weight copies and the gathers */
            L8_TRY(st, fork_side(m), out);
            L8_TRY(st, l8_fp8_transpose(v.x8, v.x8t, m->side), out);
            L8_TRY(st, l8_event_record(m->ev_xt, m->side), out);
        }
        if (n8) L8_TRY(st, l8_stream_wait_event(m->s, m->ev_join), out);
        /* offload copies fc1's saved X8t out during its forward */
        if (pre8 && m->off) L8_TRY(st, l8_stream_wait_event(m->s, m->ev_xt), out);
    }
    for (int i = 0; i < m->nl; i++) {
        int off = train && m->off && i < m->nl - m->off_keep;
        if (train && m->off) L8_TRY(st, l8_offload_forward_layer(m->off, i, off), out);
        if (wait16 && !fp8_layer(m, i)) {
            L8_TRY(st, l8_stream_wait_event(m->s, m->ev_w16), out);
            wait16 = 0;
        }
        /* layer i > 0 takes gelu(pre[i-1]): the GELU runs in layer i - 1's
         * GEMM (gelu_out: h[i-1]), else inside its input cast (FP8) or into
         * a tensor of the layer's own (bf16) */
        const int gout = m->gelu_out && i + 1 < m->nl && (fp8_layer(m, i) || !fp8_layer(m, i + 1));
        l8_tensor *hin = i > 0 ? v.h[i - 1] : NULL;
        const int gin8 = hin && fp8_layer(m, i);
        const l8_tensor *x8 = pre8 && i == 0 ? v.x8 : gin8 ? hin : NULL;
        const l8_tensor *x8t = !train ? NULL : pre8 && i == 0 ? v.x8t : gin8 ? v.ht[i - 1] : NULL;
        const l8_tensor *x = x8 ? NULL : hin ? hin : i ? v.pre[i - 1] : v.in;
        const l8_act act = x8 || hin || !i ? L8_ACT_NONE : L8_ACT_GELU;
        if (gin8 && m->off && m->wgs)  /* offload copies the saved ht out during the forward */
            L8_TRY(st, l8_stream_wait_event(m->s, m->ev_h), out);
        if (gout) {
            L8_TRY(st, gelu_out_new(m, i, rows, train, &v), out);
            L8_TRY(st, l8_linear_forward_gelu(m->lin[i], act, x, x8, x8t, v.pre[i], v.h[i],
                                              train ? &saved[i] : NULL, train ? m->wgs : NULL,
                                              m->s), out);
            if (train && v.ht[i]) {   /* ht for layer i + 1's wgrad, off the critical path */
                l8_stream *ts = m->wgs ? m->wgs : m->s;
                if (ts != m->s) {
                    L8_TRY(st, l8_event_record(m->ev_h, m->s), out);
                    L8_TRY(st, l8_stream_wait_event(ts, m->ev_h), out);
                    L8_TRY(st, l8_storage_record_stream(l8_tensor_storage(v.h[i]), ts), out);
                    L8_TRY(st, l8_storage_record_stream(l8_tensor_storage(v.ht[i]), ts), out);
                }
                L8_TRY(st, l8_fp8_transpose(v.h[i], v.ht[i], ts), out);
                if (ts != m->s) L8_TRY(st, l8_event_record(m->ev_h, ts), out);
            }
        } else if (x8) {
            L8_TRY(st, l8_linear_forward_fp8(m->lin[i], x8, x8t, v.pre[i],
                                             train ? &saved[i] : NULL, m->s), out);
        } else {
            L8_TRY(st, l8_linear_forward_act(m->lin[i], act, x, v.pre[i],
                                             train ? &saved[i] : NULL, m->s), out);
        }
        if (hin) {                /* the ctx keeps its own view (bf16: of h, FP8: of ht):
                                     offload may give their device memory back */
            l8_tensor_destroy(v.h[i - 1]);
            l8_tensor_destroy(v.ht[i - 1]);
            v.h[i - 1] = v.ht[i - 1] = NULL;
        }
        if (off && i == 0) {
            /* bf16 saves a view of the images (the later layers save a
             * view of h or their own act(x)): hand the saved view the
             * images alone so that offload may give their device memory
             * back */
            l8_tensor_destroy(v.in);
            v.in = NULL;
        }
    }
    /* the mean loss over the batch. A training step is step k (the
     * optimizer's cursor, reset at each pass) of a pass over nlocal images
     * in batches of lb: past the pass's end its rows are padding (copies of
     * its real rows, main's order), and the loss gives them zero loss, hit
     * and gradient, so the gradients below are the real rows' alone, and
     * so are the amaxes (a copy raises no maximum) */
    if (train)
        L8_TRY(st, l8_softmax_xent_at(v.pre[m->nl - 1], v.labels, CLASSES, 1.0f,
                                      l8_optim_cursor(m->optim), m->lb, m->nlocal,
                                      v.grad[m->nl], v.loss, v.hit, m->s), out);
    else
        L8_TRY(st, l8_softmax_xent(v.pre[m->nl - 1], v.labels, CLASSES, 1.0f / (float)rows,
                                   NULL, v.loss, v.hit, m->s), out);
    if (stat) {
        /* filed on the side stream, off the backward's path; s waits for
         * them before the optimizer step moves the cursor on */
        l8_tensor *k = l8_optim_cursor(m->optim);
        L8_TRY(st, fork_side(m), out);
        L8_TRY(st, l8_put_rows_at(m->loss, k, m->lb, v.loss, m->bad, m->side), out);
        L8_TRY(st, l8_put_rows_at(m->hit, k, m->lb, v.hit, m->bad, m->side), out);
        L8_TRY(st, l8_event_record(m->ev_side, m->side), out);
    }
    if (train) {
        if (m->ddp) L8_TRY(st, l8_ddp_begin_micro_batch(m->ddp, 1), out);
        /* fc1's wgrad reads the images' transpose (x8t, on the side
         * stream). Where the head is bf16, s waits for it just before fc1,
         * so that the head's dgrad (lean8's small kernel, with PDL) follows
         * the softmax at once: launched just after a join it ran 5-7 us in
         * place of 1.5 (H100), and with the late join the step ran 0.8 and
         * 1.1 us faster (H200; 0.3 and 0.2 on an H100). With cuBLASLt's head
         * dgrad the late join alone cost 1.2 and 1.5 us (H200, docs/perf.md,
         * thirty-sixth session). Where the head is FP8, s waits just before
         * the head (0.4 us faster than before fc1); offload waits in the forward. */
        const int xt_at = !pre8 || m->off ? -1 : fp8_layer(m, m->nl - 1) ? m->nl - 1 : 0;
        int cast_done = 0;        /* layer i's dY8 cast by the dgrad above */
        for (int i = m->nl - 1; i >= 0; i--) {
            l8_tensor *dx = i > 0 ? v.grad[i] : NULL;
            if (m->off) L8_TRY(st, l8_offload_backward_layer(m->off, i), out);
            if (i == xt_at) L8_TRY(st, l8_stream_wait_event(m->s, m->ev_xt), out);
            /* below the head, the output went through a GELU: the layer
             * takes the gradient of gelu(pre[i]) and its derivative at pre[i] */
            if (m->split_casts && i + 1 < m->nl && fp8_layer(m, i)) {
                L8_TRY(st, backward_split(m, &v, i, rows, &saved[i], dx, cast_done,
                                          &cast_done), out);
            } else if (m->head_cast && i + 1 == m->nl && i > 0 && fp8_layer(m, i - 1)) {
                L8_TRY(st, backward_head(m, &v, i, rows, &saved[i], dx), out);
                cast_done = 1;
            } else
                L8_TRY(st, l8_linear_backward_act(m->lin[i],
                                                  i + 1 < m->nl ? L8_ACT_GELU : L8_ACT_NONE,
                                                  &saved[i], v.grad[i + 1], v.pre[i], dx, m->s),
                       out);
        }
        /* the wgrads on wgs are done before the optimizer reads main_grad
         * and the recipe update changes the scales they read */
        if (m->wgs) {
            L8_TRY(st, l8_event_record(m->ev_wg, m->wgs), out);
            L8_TRY(st, l8_stream_wait_event(m->s, m->ev_wg), out);
        }
        if (m->ddp) L8_TRY(st, l8_ddp_finish(m->ddp, m->s), out);
        /* the recipe update (every amax is in: the casts are done) on the
         * side stream next to the optimizer; with ranks it stays on s, for
         * its amax all-reduce keeps its place among the job's collectives */
        const int side_recipe = m->recipe && !m->world;
        if (side_recipe) {
            L8_TRY(st, fork_side(m), out);
            L8_TRY(st, gelu_amax(m, &v, rows, m->side), out);
            L8_TRY(st, l8_recipe_update(m->recipe, m->side), out);
            L8_TRY(st, l8_event_record(m->ev_join, m->side), out);
        }
        if (stat || m->split_casts) L8_TRY(st, l8_stream_wait_event(m->s, m->ev_side), out);
        L8_TRY(st, l8_optim_step(m->optim, m->s, NULL), out);
        /* every rank whole again before the next step's weight copies read
         * the master weights (all at once: one cast launch for every layer) */
        if (m->zero1) L8_TRY(st, l8_ddp_gather_params(m->ddp, m->s, 1), out);
        if (side_recipe) L8_TRY(st, l8_stream_wait_event(m->s, m->ev_join), out);
        else if (m->recipe) {
            L8_TRY(st, gelu_amax(m, &v, rows, m->s), out);
            L8_TRY(st, l8_recipe_update(m->recipe, m->s), out);
        }
    }
out:
    for (int i = 0; i < m->nl; i++) l8_linear_ctx_destroy(saved[i]);
    views_free(&v);
    return st;
}

/* One training step as a graph callback, arg the model: run_batch of a full
 * (or padded) batch on the static step buffers, enqueued on m->s, which is
 * the graph's stream. The host backend calls it again at each launch. */
static l8_status train_step_fn(void *arg, l8_stream *s)
{
    model *m = arg;
    (void)s;
    return run_batch(m, 0, 0, m->lb, 1, 1);
}

/* The graph of a run's training step (every step has lb rows, the last of
 * a pass padded): captured once, so every later step, in every epoch,
 * launches it instead of warming up and capturing again. Full batches go
 * --graph-steps at a time into one launch (l8_graph_launch_repeat) while
 * that many are left: the gap between two launches costs a step of a small
 * model a few percent (docs/perf.md, 2026-12-03 third session; 16, the
 * default, ran 2.4-3.6% faster than 4: 2026-12-06 twenty-ninth). The partial
 * batch runs in the same graph: a second graph of its size, launched once
 * an epoch, slowed every later launch of the first by 4% in FP8 on the
 * default model (docs/perf.md, 2026-12-04 fifteenth session). on: 0 when
 * every step runs eagerly. */
typedef struct graph_run {
    int on;
    l8_graph *g;                              /* the captured step; NULL until the first */
} graph_run;

/* Drop the graph: the remaining steps run eagerly (same results). The
 * epoch's rate table stays until the next epoch's start: its rates are
 * those the host would set, and the cursor keeps the step's number. */
static void graph_drop(graph_run *gr, const char *why)
{
    fprintf(stderr, "lean8-train: %s (%s); running the remaining steps eagerly\n", why,
            l8_last_error_string());
    l8_error_clear();
    gr->on = 0;
}

/* The training step at row at of the pass (lb rows, padded past nlocal):
 * eagerly without a graph; with one, a launch of it - or, the first time,
 * an eager warm-up of the step followed by its capture. steps > 1 (the
 * graph captured: the caller checks): that many steps in one launch.
 * Nothing else is enqueued: the step finds its rows, its rate (the epoch's
 * table) and the places of its losses and hits through the optimizer's
 * step cursor, at = cursor * lb. */
static l8_status train_batch(model *m, graph_run *gr, int64_t at, int steps)
{
    if (!gr->on) return run_batch(m, 0, at, m->lb, 1, 0);
    if (gr->g) return steps > 1 ? l8_graph_launch_repeat(gr->g, steps) : l8_graph_launch(gr->g);
    l8_graph *g = NULL;
    L8_CHECK(l8_graph_create(m->ctx, m->s, &g));
    l8_status st = l8_graph_warmup(g, train_step_fn, m);   /* this step runs */
    if (st == L8_OK && l8_graph_capture(g, train_step_fn, m) == L8_OK) {
        gr->g = g;
        return L8_OK;
    }
    if (st == L8_OK) graph_drop(gr, "capturing the step failed");
    l8_graph_destroy(g);
    return st;
}

/* --step-times: the GPU's time for each training call of an epoch (a graph
 * launch of k steps, or one eager step), from timing events recorded on the
 * step's stream just before and after the call. The epoch's images/s also
 * count the host's gaps and the wait at the epoch's end; these are the GPU's
 * alone, and steady to a few tenths of a percent from run to run where
 * images/s move by more (docs/perf.md, 2026-12-04 fifteenth session). */
typedef struct step_clock {
    int n, cap;                   /* calls timed this epoch; room for */
    l8_event **ev;                /* 2 cap: before and after call i */
    int *steps;                   /* the steps call i ran */
} step_clock;

static void clock_free(step_clock *c)
{
    for (int i = 0; c->ev && i < 2 * c->cap; i++) l8_event_destroy(c->ev[i]);
    free(c->ev);
    free(c->steps);
    memset(c, 0, sizeof *c);
}

static l8_status clock_init(step_clock *c, l8_ctx *ctx, int cap)
{
    c->ev = calloc((size_t)2 * cap, sizeof *c->ev);
    c->steps = calloc((size_t)cap, sizeof *c->steps);
    if (!c->ev || !c->steps) return L8_FAIL(L8_ERR_OOM, "lean8-train: --step-times: out of memory");
    c->cap = cap;
    for (int i = 0; i < 2 * cap; i++) L8_CHECK(l8_event_create(ctx, 1, &c->ev[i]));
    return L8_OK;
}

/* The line for the epoch's calls (after the last one's end event): per
 * kind of call (k steps a launch), how many, the mean per step, the slowest
 * call per step. */
static l8_status clock_line(step_clock *c, int host, char *buf, size_t size)
{
    if (host) {
        snprintf(buf, size, "  steps on the GPU: not timed (host backend)");
        c->n = 0;
        return L8_OK;
    }
    if (c->n) L8_CHECK(l8_event_synchronize(c->ev[2 * c->n - 1]));
    int kinds[2] = { 0, 0 }, calls[2] = { 0, 0 }, steps[2] = { 0, 0 };
    double ms[2] = { 0, 0 }, worst[2] = { 0, 0 };
    for (int i = 0; i < c->n; i++) {
        float t = 0;
        L8_CHECK(l8_event_elapsed_ms(c->ev[2 * i], c->ev[2 * i + 1], &t));
        int j = c->steps[i] > 1 ? 0 : 1;   /* chains first, then single steps */
        kinds[j] = c->steps[i];
        calls[j]++;
        steps[j] += c->steps[i];
        ms[j] += t;
        if (t / c->steps[i] > worst[j]) worst[j] = t / c->steps[i];
    }
    size_t used = (size_t)snprintf(buf, size, "  steps on the GPU:");
    for (int j = 0, first = 1; j < 2 && used < size; j++) {
        if (!calls[j]) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s %d x %d at %.2f us a step (slowest %.2f)",
                                 first ? "" : ";", calls[j], kinds[j], 1e3 * ms[j] / steps[j],
                                 1e3 * worst[j]);
        first = 0;
    }
    c->n = 0;
    return L8_OK;
}

/* The rate of the step at row b of this rank's order in epoch e: cosine
 * decay from --lr to 0 over the whole run, by global step. */
static float rate_at(const opts *o, int e, int64_t b, int64_t ntrain)
{
    double prog = ((double)e * (double)ntrain + (double)(b * o->dp)) /
                  ((double)o->epochs * (double)ntrain);
    return (float)(o->lr * 0.5 * (1.0 + cos(M_PI * prog)));
}

/* Graphs: epoch e's rates, one per step of nlocal rows in batches of lb,
 * into m->rates and the optimizer's table (the step cursor back to 0),
 * enqueued on m->s after the previous epoch's steps. scratch: a float per
 * step. */
static l8_status push_rates(model *m, const opts *o, int e, int64_t ntrain, int64_t nlocal,
                            float *scratch)
{
    int64_t n = 0;
    for (int64_t b = 0; b < nlocal; b += m->lb) scratch[n++] = rate_at(o, e, b, ntrain);
    l8_tensor *v = NULL;
    l8_status st = l8_tensor_narrow(m->rates, 0, 0, n, &v);
    if (st == L8_OK) st = l8_tensor_copy_from_host(v, scratch, (size_t)n * sizeof *scratch, m->s);
    l8_tensor_destroy(v);
    if (st == L8_OK) st = l8_optim_set_lr_table(m->optim, m->rates, m->s);
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

/* Split ds onto the device: images normalized as fmnist_batch does and
 * rounded to bf16 (RNE, as l8_convert rounds), labels as i32; *amax (if
 * not NULL): the largest |pixel| after the rounding. Blocks. */
static l8_status upload_split(model *m, const fmnist_data *ds, l8_tensor **x, l8_tensor **y,
                              float *amax)
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
        L8_TRY(st, fmnist_batch(ds, idx, c, xf, yh + b), out);
        for (size_t k = 0; k < c * IN_FEATURES; k++) {
            xb[b * IN_FEATURES + k] = l8_bf16_from_f32(xf[k]);
            if (amax) *amax = l8_amax_combine(*amax, l8_bf16_to_f32(xb[b * IN_FEATURES + k]));
        }
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

/* FP8 training in one TP rank: the training images cast once to the input
 * format, with the scale the recipe's delayed scaling reaches once a batch
 * holding the largest pixel has gone by (fp8_max / amax, margin 0): every
 * step then gathers FP8 rows instead of casting its batch. Blocks. */
static l8_status cast_images(model *m, float amax)
{
    l8_dtype fmt = l8_recipe_dtype(m->recipe, L8_ROLE_INPUT);
    float scale = amax > 0 && isfinite(amax) ? l8_fp8_max(fmt) / amax : 1.0f;
    l8_status st = L8_OK;
    L8_CHECK(l8_fp8_meta_create(m->ctx, &m->x8meta));
    L8_CHECK(l8_fp8_meta_set(m->x8meta, scale, 1.0f / scale, 0.0f));
    m->x8 = new2(m->ctx, fmt, l8_tensor_dim(m->x[0], 0), IN_FEATURES, &st);
    L8_CHECK(st);
    L8_CHECK(l8_tensor_set_fp8_meta(m->x8, m->x8meta));
    L8_CHECK(l8_fp8_cast(m->x[0], m->x8, 0, m->s));
    return l8_stream_synchronize(m->s);
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

/* One line of at most 79 columns, rewritten in place:
 *   "  epoch  3 [=========                     ]  31%   412345 img/s  ETA   12s" */
static void progress(int epoch, int64_t done, int64_t total, double t0)
{
    int w = 30, k = (int)(w * done / (total ? total : 1));
    double dt = now_s() - t0, rate = dt > 0 ? done / dt : 0.0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0.0;
    fprintf(stderr, "\r  epoch %2d [%.*s%*s] %3d%%  %7.0f img/s  ETA %5.0fs", epoch, k,
            "==============================", w - k, "", (int)(100 * done / (total ? total : 1)),
            rate, eta < 99999 ? eta : 99999);
    fflush(stderr);
}

/* ---- checkpoints: parameters, optimizer, recipe, and where we are ---- */

typedef struct run_state {
    uint64_t seed;
    int32_t epoch_done, fp8, nl;  /* fp8: run_mode's */
    int32_t dims[MAX_LAYERS + 1];
} run_state;

/* The precision of a run as a checkpoint records it: 0 bf16, 1 every layer
 * FP8 (--fp8 --fp8-head; what every FP8 run was before the head went to
 * bf16), 2 FP8 with a bf16 head (--fp8). */
static int32_t run_mode(const opts *o) { return o->fp8 ? (o->fp8_head ? 1 : 2) : 0; }

static const char *run_mode_flags(int32_t mode)
{
    return mode == 0 ? "--bf16" : mode == 1 ? "--fp8 --fp8-head" : mode == 2 ? "--fp8" : "unknown";
}

/* The run's schedule: a resume with other values would not continue it. */
typedef struct run_hyper {
    int32_t batch, epochs, limit;
    float lr, wd;
} run_hyper;

static run_hyper hyper_of(const opts *o)
{
    return (run_hyper){ .batch = o->batch, .epochs = o->epochs, .limit = o->limit, .lr = o->lr,
                        .wd = o->wd };
}

/* Temporary files "<path>.tmp.<pid>.<n>" of checkpoint writers that died
 * before their rename (SIGXFSZ, SIGKILL, a crash) would stay for ever:
 * removed before each save. One whose process still runs here is kept. */
static void clean_stale_temps(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path) snprintf(dir, sizeof dir, "/");
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *rest = e->d_name + bl;
        if (strncmp(e->d_name, base, bl) || strncmp(rest, ".tmp.", 5)) continue;
        char *end;
        long pid = strtol(rest + 5, &end, 10);
        if (end == rest + 5 || *end != '.' || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;   /* alive, or not ours to judge */
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (unlink(full) == 0)
            printf("lean8-train: removed %s (a checkpoint write that never finished)\n", full);
    }
    closedir(d);
}

/* --save is checked before any training: open a writer and abort it. */
static l8_status check_save_path(const char *path)
{
    l8_ckpt_writer *w = NULL;
    clean_stale_temps(path);
    L8_CHECK(l8_ckpt_writer_open(path, CKPT_KIND, CKPT_VERSION, &w));
    l8_ckpt_writer_abort(w);
    return L8_OK;
}

static l8_status save_ckpt(model *m, const opts *o, int epoch_done, const char *path)
{
    l8_ckpt_writer *w = NULL;
    l8_status st;
    if (m->zero1) L8_CHECK(l8_ddp_wait_param(m->ddp, -1, m->s));   /* the whole master buffer */
    run_state rs = { .seed = o->seed, .epoch_done = epoch_done, .fp8 = run_mode(o), .nl = m->nl };
    run_hyper hy = hyper_of(o);
    for (int i = 0; i <= m->nl; i++) rs.dims[i] = (int32_t)m->dims[i];
    clean_stale_temps(path);
    L8_CHECK(l8_ckpt_writer_open(path, CKPT_KIND, CKPT_VERSION, &w));
    L8_TRY(st, l8_ckpt_write_section(w, "run", &rs, sizeof rs), fail);
    L8_TRY(st, l8_ckpt_write_section(w, "run.hyper", &hy, sizeof hy), fail);
    L8_TRY(st, l8_ckpt_write_tensor(w, "params.master", l8_params_master_flat(m->params)), fail);
    /* optim.<state>, optim.step (and a ZeRO-1 shard's layout) */
    L8_TRY(st, l8_optim_save(m->optim, w), fail);
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

/* The model, mode, seed and schedule of the checkpoint against this run's:
 * L8_ERR_INVALID_ARG naming every field that differs. */
static l8_status check_run(const l8_ckpt_reader *r, const run_state *rs, const model *m,
                           const opts *o, const char *path)
{
    char why[512] = "", a[128] = "", b[128] = "";
    size_t n = 0;
    int same_dims = rs->nl == m->nl;
    for (int i = 0; same_dims && i <= m->nl; i++) same_dims = rs->dims[i] == m->dims[i];
    if (!same_dims) {
        for (int i = 0, k = 0; i <= rs->nl && i <= MAX_LAYERS; i++)
            k += snprintf(a + k, sizeof a - (size_t)k, "%s%d", i ? "-" : "", (int)rs->dims[i]);
        for (int i = 0, k = 0; i <= m->nl; i++)
            k += snprintf(b + k, sizeof b - (size_t)k, "%s%d", i ? "-" : "", (int)m->dims[i]);
        n += (size_t)snprintf(why + n, sizeof why - n, "; layers %s, this run %s (--hidden)", a, b);
    }
    if (rs->fp8 != run_mode(o) && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; written by a %s run, this run is %s",
                              run_mode_flags(rs->fp8), run_mode_flags(run_mode(o)));
    if (rs->seed != o->seed && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --seed %" PRIu64 ", this run %" PRIu64,
                              rs->seed, o->seed);
    if (n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "checkpoint %s is of another model or run: refused%s",
                       path, why);
    if (!l8_ckpt_has(r, "run.hyper")) return L8_OK;           /* written before it was recorded */
    run_hyper h, want = hyper_of(o);
    L8_CHECK(l8_ckpt_read_section_into(r, "run.hyper", &h, sizeof h));
    if (h.batch != want.batch && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --batch %d, this run %d", h.batch, want.batch);
    if (h.epochs != want.epochs && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --epochs %d, this run %d", h.epochs, want.epochs);
    if (h.limit != want.limit && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --limit %d, this run %d (--drop-last"
                              " counts as --limit at the last whole batch)", h.limit, want.limit);
    if (h.lr != want.lr && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --lr %g, this run %g", (double)h.lr, (double)want.lr);
    if (h.wd != want.wd && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "; --wd %g, this run %g", (double)h.wd, (double)want.wd);
    if (n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "checkpoint %s was written with another schedule, so"
                       " resuming would not continue that run: refused%s (resume with the same"
                       " flags)", path, why);
    return L8_OK;
}

/* Validate everything first (config, sections, shapes), then load. */
static l8_status load_ckpt(model *m, const opts *o, const char *path, int *epoch_done)
{
    l8_ckpt_reader *r = NULL;
    l8_tensor *hist = NULL, *scale = NULL, *amax = NULL;
    float *mv = NULL;
    run_state rs;
    l8_status st;
    L8_CHECK(l8_ckpt_open(path, &r));
    L8_TRY(st, l8_ckpt_expect(r, CKPT_KIND, CKPT_VERSION), out);
    L8_TRY(st, l8_ckpt_read_section_into(r, "run", &rs, sizeof rs), out);
    L8_TRY(st, check_run(r, &rs, m, o, path), out);
    L8_TRY(st, l8_ckpt_check_tensor(r, "params.master", l8_params_master_flat(m->params)), out);
    L8_TRY(st, l8_optim_check_load(m->optim, r), out);
    if (m->recipe) {
        L8_TRY(st, l8_recipe_state(m->recipe, &hist, &scale, &amax, NULL), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.amax_history", hist), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.scale", scale), out);
        L8_TRY(st, l8_ckpt_check_tensor(r, "recipe.amax", amax), out);
    }
    if (m->recipe) {
        int n = l8_recipe_count(m->recipe);
        mv = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1));
        if (!mv) { st = L8_FAIL(L8_ERR_OOM, "lean8-train: host memory"); goto out; }
        L8_TRY(st, l8_ckpt_read_section_into(r, "recipe.metas", mv, sizeof(float) * 3 * (size_t)n), out);
    }
    /* all checked: now load */
    L8_TRY(st, l8_ckpt_read_tensor(r, "params.master", l8_params_master_flat(m->params)), out);
    L8_TRY(st, l8_optim_load(m->optim, r), out);
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

/* --zero1: each rank resumes from its own file. A rank whose file is missing
 * (a checkpoint of fewer ranks, or a lost file) says so, with what rank 0's
 * file says to this run - for fewer ranks the refusal naming both rank
 * counts that ranks 0.. give, whichever rank lean8-run hears from first. */
static l8_status load_own_ckpt(model *m, const opts *o, const char *path, int *epoch_done)
{
    if (!m->zero1 || m->dp_rank == 0 || access(path, F_OK) == 0 || errno != ENOENT)
        return load_ckpt(m, o, path, epoch_done);
    char p0[1100], why[512] = "rank 0's file loads";
    snprintf(p0, sizeof p0, "%s.rank0", o->resume);
    if (load_ckpt(m, o, p0, epoch_done) != L8_OK)
        snprintf(why, sizeof why, "%s", l8_last_error_string());
    return L8_FAIL(L8_ERR_IO, "lean8-train: checkpoint %s is missing; %s", path, why);
}

int main(int argc, char **argv)
{
    opts o;
    model m = {0};
    fmnist_data train = {0}, test = {0};
    int64_t *perm = NULL;
    int32_t *order = NULL, *hh = NULL;
    graph_run gr = {0};
    step_clock clk = {0};
    float *lh = NULL;
    int rc = 1, start_epoch = 0;
    l8_status st = L8_OK;
    int pr = parse(argc, argv, &o);
    if (pr) {
        if (pr < 0) usage(stderr);
        return pr < 0 ? 2 : 0;
    }
    if (o.save) CK(check_save_path(o.save));      /* before an epoch is spent */
    CK(fmnist_load(o.data, "train", &train));
    CK(fmnist_load(o.data, "t10k", &test));
    int64_t ntrain = o.limit && (size_t)o.limit < train.n ? o.limit : (int64_t)train.n;
    if (o.drop_last) {            /* = --limit at the last whole batch, in checkpoints too */
        ntrain = ntrain / o.batch * o.batch;
        if (!ntrain) {
            fprintf(stderr, "lean8-train: --drop-last leaves no whole batch: --batch %d is more "
                    "than the %zu training images\n", o.batch, train.n);
            rc = 2;
            goto fail;
        }
        o.limit = (int)ntrain;
    }
    int64_t ntest = (int64_t)test.n;
    CK(model_build(&m, &o));
    if (m.wrank) {                /* --tp/--dp: rank 0 speaks for the job */
        o.quiet = 1;
        if (!freopen("/dev/null", "w", stdout)) { /* nothing to do: keep printing */ }
    }
    /* the host backend runs the graph API eagerly: the same code path, tested in CI;
     * NCCL collectives inside a captured step are not verified yet: --tp runs eagerly on GPUs */
    if (m.tp * m.dp > 1 && l8_graph_native(m.ctx)) o.no_graph = 1;
    /* offload decides on the host at every step (which device blocks go, pinned
     * blocks): a captured step could not replay that, so offloaded steps run eagerly */
    if (o.offload) o.no_graph = 1;
    if (!o.no_graph && (l8_graph_native(m.ctx) || l8_ctx_backend(m.ctx) == L8_BACKEND_HOST)) {
        gr.on = 1;
        m.step_loss = new2(m.ctx, L8_F32, m.lb, 0, &st);
        m.step_hit = new2(m.ctx, L8_I32, m.lb, 0, &st);
        CK(st);
    }
    /* --zero1: every rank has its own optimizer shard, hence its own file */
    char save_p[1100] = "", resume_p[1100] = "";
    if (o.save) snprintf(save_p, sizeof save_p, m.zero1 ? "%s.rank%d" : "%s", o.save, m.dp_rank);
    if (o.resume) snprintf(resume_p, sizeof resume_p, m.zero1 ? "%s.rank%d" : "%s", o.resume, m.dp_rank);
    if (o.resume) {
        CK(load_own_ckpt(&m, &o, resume_p, &start_epoch));
        printf("resumed from %s after epoch %d\n", resume_p, start_epoch);
    }
    /* per-pass rows: the training images with the last step's padding, or the
     * test images */
    m.R = ntrain + m.lb > ntest ? ntrain + m.lb : ntest;
    float amax = 0;
    CK(upload_split(&m, &train, &m.x[0], &m.y[0], &amax));
    CK(upload_split(&m, &test, &m.x[1], &m.y[1], NULL));
    if (m.recipe && m.tp == 1) CK(cast_images(&m, amax));
    m.order = new2(m.ctx, L8_I32, m.R, 0, &st);
    m.loss = new2(m.ctx, L8_F32, m.R, 0, &st);
    m.hit = new2(m.ctx, L8_I32, m.R, 0, &st);
    if (gr.on) m.rates = new2(m.ctx, L8_F32, m.R / m.lb + 1, 0, &st);   /* steps of a pass */
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
    printf("lean8-train: %s on %s, MLP %d",
           !o.fp8 ? "bf16" : o.fp8_head ? "FP8 (HYBRID delayed scaling)"
                                        : "FP8 (HYBRID delayed scaling; head bf16)",
           l8_ctx_device_name(m.ctx), IN_FEATURES);
    for (int i = 1; i < m.nl; i++) printf("-%d", (int)m.dims[i]);
    printf("-%d, batch %d", CLASSES, o.batch);
    if (m.tp > 1) printf(", tensor parallel over %d ranks", m.tp);
    if (m.dp > 1) printf(", data parallel over %d", m.dp);
    printf("\n  AdamW lr %g wd %g, seed %" PRIu64 ", %lld+%lld images (%.1f MiB on"
           " the device)\n", (double)o.lr, (double)o.wd, o.seed, (long long)ntrain,
           (long long)ntest,
           (double)(l8_tensor_nbytes(m.x[0]) + l8_tensor_nbytes(m.x[1]) + l8_tensor_nbytes(m.y[0]) +
                    l8_tensor_nbytes(m.y[1]) + (m.x8 ? l8_tensor_nbytes(m.x8) : 0)) / 1048576.0);
    if (gr.on && l8_graph_native(m.ctx))
        printf("lean8-train: each training step runs as a CUDA graph (--no-graph: eagerly)\n");
    int bar = !o.quiet && isatty(STDERR_FILENO);
    double test_acc = 0;
    /* --step-times: a pair of events for each call of an epoch (its batches) */
    if (o.step_times) CK(clock_init(&clk, m.ctx, (int)(ntrain / m.lb + 2)));
    for (int e = start_epoch; e < o.epochs; e++) {
        permutation(perm, (int64_t)train.n, o.seed, e);
        /* this rank's images: its 1/dp of each global batch (full batches, then
         * the remainder rounded down to a multiple of the rank count) */
        int64_t lb = m.lb, nlocal = 0;
        for (int64_t b = 0; b < ntrain; b += o.batch) {
            int64_t rows = ntrain - b < o.batch ? (ntrain - b) / o.dp * o.dp : o.batch;
            for (int64_t i = 0; i < rows / o.dp; i++)
                order[nlocal++] = (int32_t)perm[b + m.dp_rank * (rows / o.dp) + i];
        }
        double loss = 0, t0 = now_s();
        int64_t hits = 0, seen = 0;
        /* the last step's padding: copies of its own rows, in turn (the loss
         * gives them no weight; a copy raises no amax) */
        m.nlocal = nlocal;
        int64_t last = (nlocal - 1) / lb * lb;
        for (int64_t p = nlocal; p > 0 && p % lb; p++)
            order[p] = order[last + (p - last) % (nlocal - last)];
        CK(upload_order(&m, order, nlocal ? last + lb : 0));
        /* the step cursor back to 0 (the loss reads it): with graphs the
         * epoch's rates come in a table; eager steps take the host's */
        if (gr.on) CK(push_rates(&m, &o, e, ntrain, nlocal, lh));   /* lh: scratch here */
        else CK(l8_optim_set_lr_table(m.optim, NULL, m.s));
        for (int64_t b = 0; b < nlocal;) {
            int64_t rows = nlocal - b < lb ? nlocal - b : lb;   /* the real ones */
            /* --graph-steps full steps in one launch while that many are left */
            int k = gr.g && b + o.graph_steps * lb <= nlocal ? o.graph_steps : 1;
            /* eager steps take the rate from the host; graphs read the table */
            if (!gr.on) CK(l8_optim_set_lr(m.optim, rate_at(&o, e, b, ntrain)));
            const int timed = clk.n < clk.cap;   /* room for every batch of an epoch */
            if (timed) CK(l8_event_record(clk.ev[2 * clk.n], m.s));
            CK(train_batch(&m, &gr, b, k));
            if (timed) {
                CK(l8_event_record(clk.ev[2 * clk.n + 1], m.s));
                clk.steps[clk.n++] = k;
            }
            /* a step mark in the memory trace (L8_TRACE; lean8-trace draws it): counted on
             * the host - reading the optimizer's device step would wait for the GPU - and
             * here, not in the step itself, which a CUDA graph replays without host code
             * (the k steps of one launch get k marks at once) */
            for (int i = 0; l8_ctx_trace(m.ctx) && i < k; i++)
                l8_trace_record(l8_ctx_trace(m.ctx), L8_TRACE_STEP, l8_ctx_device(m.ctx), 0, 0, 0,
                                ++m.steps_done);
            for (int i = 0; i < k; i++, b += lb) {
                seen += rows;
                if (bar && (b / lb) % 16 == 0) progress(e + 1, seen * o.dp, ntrain, t0);
            }
        }
        CK(pass_results(&m, seen, lh, hh, &loss, &hits));
        CK(dp_sum(&m, &loss, &hits));
        seen *= o.dp;
        double dt = now_s() - t0;
        char times[160] = "";
        if (clk.cap) CK(clock_line(&clk, l8_ctx_backend(m.ctx) == L8_BACKEND_HOST, times, sizeof times));
        if (bar) fprintf(stderr, "\r%*s\r", 79, "");
        double tl = 0;
        int64_t th = 0;
        for (int64_t i = 0; i < m.R; i++) order[i] = i < ntest ? (int32_t)i : 0;
        CK(upload_order(&m, order, m.R));
        for (int64_t b = 0; b < ntest; b += lb) {     /* every rank: the whole test set */
            int64_t rows = ntest - b < lb ? ntest - b : lb;
            CK(run_batch(&m, 1, b, rows, 0, 0));
        }
        CK(pass_results(&m, ntest, lh, hh, &tl, &th));
        test_acc = (double)th / (double)ntest;
        l8_alloc_stats as = { .size = sizeof as };
        CK(l8_alloc_get_stats(l8_ctx_allocator(m.ctx), &as));
        /* at most 80 columns: epoch, loss, accuracies, speed, allocator peak */
        printf("epoch %2d  loss %.4f  train %.4f  test acc %.4f  %7.0f img/s  %5.0f MiB\n",
               e + 1, loss / (double)seen, (double)hits / (double)seen, test_acc, (double)seen / dt,
               as.allocated_peak / 1048576.0);
        if (times[0]) printf("%s\n", times);
        fflush(stdout);
        if (o.save && (m.zero1 || !m.wrank)) CK(save_ckpt(&m, &o, e + 1, save_p));   /* --dp: rank 0 */
        if (o.stop_after && e + 1 >= o.stop_after) break;    /* an interruption, for resume */
    }
    if (m.off) {
        l8_offload_stats os = { .size = sizeof os };
        CK(l8_offload_get_stats(m.off, &os));
        printf("offload: %llu saves, %llu copies out (%.1f MiB), %llu back, %llu device blocks given back\n",
               (unsigned long long)os.saves, (unsigned long long)os.copies_out, os.bytes_out / 1048576.0,
               (unsigned long long)os.copies_in, (unsigned long long)os.released);
    }
    if (gr.on) {
        /* one capture however many epochs: tests/train.sh checks it */
        l8_graph_stats gs = { .size = sizeof gs };
        if (gr.g) CK(l8_graph_get_stats(gr.g, &gs));
        /* chained: the steps that ran --graph-steps to a launch (CUDA only) */
        printf("graphs: %llu captures, %llu launches, %llu chained\n",
               (unsigned long long)gs.captures, (unsigned long long)gs.launches,
               (unsigned long long)gs.chained);
    }
    rc = 0;
fail:
    free(perm);
    free(order);
    free(lh);
    free(hh);
    l8_graph_destroy(gr.g);
    clock_free(&clk);
    model_free(&m);
    fmnist_free(&train);
    fmnist_free(&test);
    return rc;
}
