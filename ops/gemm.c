/* gemm.c - GEMM handles, validation, the plan cache, dispatch to cuBLASLt,
 * and the host reference.
 *
 * Row-major <-> cuBLASLt. lean8 computes D[M,N] = op(A)[M,K] . op(B)[K,N] on
 * row-major buffers. cuBLASLt is column-major, and a row-major (R,C) buffer
 * with row stride ld is, read column-major, the (C,R) matrix with leading
 * dimension ld - its transpose, with no data moved. So the row-major D[M,N]
 * is the column-major D^T (N x M), and
 *
 *     D^T = op(B)^T . op(A)^T
 *
 * is one cuBLASLt call with the operands swapped:
 *
 *     cuBLASLt A := our B     transa = trans_b ? T : N    A layout: rows = trans_b ? K : N,
 *                                                          cols = trans_b ? N : K, ld = ldb
 *     cuBLASLt B := our A     transb = trans_a ? T : N    B layout: rows = trans_a ? M : K,
 *                                                          cols = trans_a ? K : M, ld = lda
 *     cuBLASLt D := our D     m = N, n = M, k = K         D layout: rows = N, cols = M, ld = ldd
 *
 * (cuBLASLt's rule "rows = (op == N ? m : k)" holds for both operands.) Our
 * FP8 form D = A.B^T (trans_a = 0, trans_b = 1) is therefore cuBLASLt's TN:
 * transa = T, transb = N, which is the only FP8 layout Hopper has. For the
 * fprop Y[T,N] = X[T,K].W[N,K]^T: cuBLASLt A = W (T), B = X (N), m = N,
 * n = T, k = K. Everything attached to an operand swaps with it: our A's
 * scale_inv goes to B_SCALE_POINTER and our B's to A_SCALE_POINTER; our
 * DBIAS_A (sums over k of op(A), one per row of D) is cuBLASLt's BGRADB
 * (its B, one per column of its D), our DBIAS_B is BGRADA; the BIAS vector
 * (one per row of cuBLASLt's D = per column of ours) is bias[N].
 *
 * C. beta != 0 accumulates in place: C is D with the same layout object
 * (cuBLASLt 13 requires the same descriptor when C == D). FP8 GEMMs with
 * beta == 0 pass C = NULL (cuBLASLt 13 rejects an aliased C there, as XLA
 * found). An FP8 D cannot accumulate; cuBLASLt still wants a BF16 C layout
 * then, and gets C = NULL, as TransformerEngine does.
 *
 * Plans. A plan holds the matmul descriptor, three or four layouts and the
 * chosen algorithm, keyed by everything the choice depends on (plan_key).
 * Hot path: validate, resolve pointers, hash the key, find the plan, update
 * the pointer attributes that changed since its last call (scales, amax,
 * bias), cublasLtMatmul. No descriptor is created after the first call.
 * Alignment of each pointer (its lowest set bit, capped at 256 B) is part of
 * the key and is handed to the heuristic as MIN_ALIGNMENT, so an algorithm
 * chosen for 256-B aligned data is never run on 16-B aligned data.
 *
 * Autotuning (timing the candidates, autotune = 2's configuration search)
 * and plan descriptions live in gemm_tune.c; the structures both files use
 * in gemm_internal.h.
 *
 * Invariants: a plan in the cache is complete (all descriptors, an algo);
 * a failed build leaves nothing behind. The handle mutex is held from the
 * lookup to the launch, because the pointer attributes live in the shared
 * descriptor. Workspaces are per stream and allocated on that stream, so the
 * allocator's stream ordering covers their reuse.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/gemm.h"
#include "runtime/fp8.h"
#include "ops/cublaslt.h"
#include "ops/gemm_internal.h"
#include "ops/internal.h"
#include "runtime/internal.h"

#define WS_DEFAULT (32u << 20)

/* problem, plan_key, plan, ws_slot and the handle: gemm_internal.h */

static const char *epi_name(int e)
{
    switch (e) {
    case L8_GEMM_EPI_NONE: return "none";
    case L8_GEMM_EPI_BIAS: return "bias";
    case L8_GEMM_EPI_DBIAS_A: return "dbias_a";
    case L8_GEMM_EPI_DBIAS_B: return "dbias_b";
    case L8_GEMM_EPI_BIAS_GELU_AUX: return "bias_gelu_aux";
    case L8_GEMM_EPI_DGELU_CAST: return "dgelu_cast";
    default: return "invalid";
    }
}

static int is_fp8(l8_dtype dt) { return dt == L8_E4M3 || dt == L8_E5M2; }
static int is_float(l8_dtype dt) { return dt == L8_F32 || dt == L8_BF16 || dt == L8_F16; }

/* log2 of the pointer's alignment, capped at 256 B (cuBLASLt's default). */
static unsigned align_log2(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    if (!u) return 8;
    unsigned l = (unsigned)__builtin_ctzll((unsigned long long)u);
    return l > 8 ? 8 : l;
}

/* ---- handle ---- */

void l8_gemm_config_init(l8_gemm_config *cfg)
{
    if (cfg) *cfg = (l8_gemm_config)L8_GEMM_CONFIG_INIT;
}

/* The persistent plan cache of a CUDA handle: path from the config, else
 * L8_GEMM_CACHE; none when both are unset or empty. A file that cannot be
 * trusted is a warning, never an error (see gemm_cache.c). */
static l8_status cache_open(l8_gemm_handle *h, const char *cfg_path, int lt_version)
{
    const char *path = cfg_path ? cfg_path : getenv("L8_GEMM_CACHE");
    if (!path || !path[0]) return L8_OK;
    unsigned sm = 0;
    L8_CHECK(l8i_sm_count(h->ctx, &sm));
    l8i_gemm_cache *c = calloc(1, sizeof *c);
    if (c) c->path = strdup(path);
    if (!c || !c->path) {
        free(c);
        return L8_FAIL(L8_ERR_OOM, "l8_gemm_handle_create: out of host memory for the plan cache");
    }
    /* calloc zero-fills: the name is NUL-padded, so the identity compares bytewise */
    snprintf(c->id.device, sizeof c->id.device, "%s", l8_ctx_device_name(h->ctx));
    c->id.sm_count = sm;
    c->id.lt_version = (uint32_t)lt_version;
    char why[512];
    int r = l8i_gemm_cache_load(c, why, sizeof why);
    if (r == L8I_GCACHE_IGNORED)
        l8i_warn("GEMM plan cache %s ignored (it will be rewritten after the next tuned"
                 " plan): %s", path, why);
    if (l8i_gemm_debug())
        fprintf(stderr, "lean8: gemm: plan cache %s: %s, %zu entries\n", path,
                r == L8I_GCACHE_LOADED ? "loaded" : r == L8I_GCACHE_ABSENT ? "no file yet" : "ignored",
                c->n);
    h->stats.plan_cache_loaded = c->n;
    h->pcache = c;
    return L8_OK;
}

/* Take pl's algorithm from the plan cache when it has an entry for pl and
 * cuBLASLt accepts that algorithm for pl's descriptors within the workspace.
 * 1: pl->algo is set; 0: build the plan as without a cache. */
static int cache_try(l8_gemm_handle *h, plan *pl, const problem *p)
{
    const l8i_gemm_cache_entry *e =
        l8i_gemm_cache_find(h->pcache, &pl->key, h->ws_bytes, h->precise_reduction);
    if (!e) return 0;
    cublasLtMatmulAlgo_t a;
    cublasLtMatmulHeuristicResult_t r;
    memcpy(&a, e->algo, sizeof a);
    memset(&r, 0, sizeof r);
    cublasStatus_t cs = CUBLAS_STATUS_NOT_SUPPORTED;
    if (l8i_lt.cublasLtMatmulAlgoCheck)
        cs = l8i_lt.cublasLtMatmulAlgoCheck(h->lt, pl->op, pl->la, pl->lb, pl->lc, pl->ld, &a, &r);
    if (cs != CUBLAS_STATUS_SUCCESS || r.workspaceSize > h->ws_bytes) {
        h->stats.plan_cache_rejected++;
        l8i_warn("GEMM plan cache %s: the entry for %s x %s -> %s, M %" PRId64 " N %" PRId64
                 " K %" PRId64 " was refused (%s, workspace %zu of %zu bytes); choosing again",
                 h->pcache->path, l8_dtype_name(p->dt_a), l8_dtype_name(p->dt_b),
                 l8_dtype_name(p->dt_d), p->m, p->n, p->k,
                 l8i_lt.cublasLtMatmulAlgoCheck ? l8i_lt_status_name(cs)
                                                : "no cublasLtMatmulAlgoCheck",
                 r.workspaceSize, h->ws_bytes);
        return 0;
    }
    unsigned pick = (unsigned)((e->flags >> 8) & 0xff);
    pl->algo = a;
    pl->pick = (uint8_t)(pick <= L8I_PICK_SEARCH ? pick : L8I_PICK_TIMED);
    pl->rank = (int8_t)(uint8_t)((e->flags >> 16) & 0xff);
    pl->timed = (uint16_t)(e->flags >> 32);
    pl->cached = 1;
    h->stats.plan_cache_hits++;
    if (l8i_gemm_debug())
        fprintf(stderr, "lean8: gemm: %" PRId64 "x%" PRId64 "x%" PRId64 " from the plan cache\n",
                p->m, p->n, p->k);
    return 1;
}

l8_status l8_gemm_handle_create(l8_ctx *ctx, const l8_gemm_config *cfg, l8_gemm_handle **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_gemm_config c = L8_GEMM_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_gemm_handle_create", "L8_GEMM_CONFIG_INIT");
    if (c.autotune < -1 || c.autotune > 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm_handle_create: autotune is %d, not -1, 0, 1"
                       " or 2", c.autotune);
    if (c.autotune_candidates < 0 || c.autotune_candidates > L8I_GEMM_MAX_HEURISTIC ||
        c.autotune_iters < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm_handle_create: autotune_candidates %d (0..%d) or"
                       " autotune_iters %d (>= 0) out of range", c.autotune_candidates,
                       L8I_GEMM_MAX_HEURISTIC, c.autotune_iters);
    if (c.workspace_bytes && c.workspace_bytes < (16u << 10))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm_handle_create: workspace_bytes %zu is below"
                       " cuBLASLt's 16 KiB minimum", c.workspace_bytes);
    int small;
    L8_CHECK(l8i_gemm_small_mode(c.small, &small));
    l8_gemm_handle *h = calloc(1, sizeof *h);
    if (!h) return L8_FAIL(L8_ERR_OOM, "l8_gemm_handle_create: out of host memory");
    h->ctx = ctx;
    h->cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    h->ws_bytes = c.workspace_bytes ? c.workspace_bytes : WS_DEFAULT;
    if (c.autotune < 0) {
        const char *e = getenv("L8_GEMM_AUTOTUNE");
        h->autotune = !e ? 0 : e[0] == '1' ? 1 : e[0] == '2' ? 2 : 0;
    } else {
        h->autotune = c.autotune;
    }
    h->at_cands = c.autotune_candidates ? c.autotune_candidates : 16;
    h->at_iters = c.autotune_iters ? c.autotune_iters : 10;
    h->max_plans = c.max_plans ? c.max_plans : 4096;
    h->precise_reduction = c.precise_reduction != 0;
    h->small = h->cuda ? small : 0;
    h->stats.size = sizeof h->stats;
    pthread_mutex_init(&h->lock, NULL);
    l8_status st = L8_OK;
    if (h->cuda) {
        int ltv = 0;
        L8_TRY(st, l8i_lt_load(&ltv), fail);
        L8_TRY(st, l8i_ctx_bind(ctx), fail);
        L8_TRY(st, l8i_sm_count(ctx, &h->nsm), fail);
        L8_TRY(st, L8_LT(cublasLtCreate, &h->lt), fail);
        /* the search needs the algorithm-configuration API: without it,
         * mode 2 is mode 1 (no error: an older cuBLASLt still tunes) */
        if (h->autotune == 2 && !l8i_lt_has_algo_config()) h->autotune = 1;
        L8_TRY(st, cache_open(h, c.plan_cache, ltv), fail);
    }
    *out = h;
    return L8_OK;
fail:
    l8_gemm_handle_destroy(h);
    return st;
}

static void plan_free(l8_gemm_handle *h, plan *pl)
{
    if (!pl) return;
    /* Destroy statuses are ignored: nothing useful can be done with them and
     * a destroy path must not stop half-way. */
    if (pl->lc && pl->lc != pl->ld) (void)l8i_lt.cublasLtMatrixLayoutDestroy(pl->lc);
    if (pl->ld) (void)l8i_lt.cublasLtMatrixLayoutDestroy(pl->ld);
    if (pl->lb) (void)l8i_lt.cublasLtMatrixLayoutDestroy(pl->lb);
    if (pl->la) (void)l8i_lt.cublasLtMatrixLayoutDestroy(pl->la);
    if (pl->op) (void)l8i_lt.cublasLtMatmulDescDestroy(pl->op);
    free(pl);
}

static void cache_flush(l8_gemm_handle *h)
{
    for (unsigned b = 0; b < L8I_GEMM_NBUCKETS; b++) {
        plan *pl = h->buckets[b];
        while (pl) {
            plan *next = pl->next;
            plan_free(h, pl);
            pl = next;
        }
        h->buckets[b] = NULL;
    }
    h->stats.plans_cached = 0;
}

void l8_gemm_handle_destroy(l8_gemm_handle *h)
{
    if (!h) return;
    int bound = h->cuda && l8i_ctx_bind(h->ctx) == L8_OK;
    cache_flush(h);
    for (int i = 0; i < h->n_ws; i++) {
        /* The allocator frees stream-ordered: GEMMs already enqueued on the
         * workspace's stream finish before the block is reused. */
        if (l8_ctx_free(h->ctx, h->ws[i].ptr) != L8_OK) {
            /* in the last error; a destroy cannot report it */
        }
    }
    if (h->lt && bound) (void)l8i_lt.cublasLtDestroy(h->lt);
    if (h->pcache) {
        l8i_gemm_cache_clear(h->pcache);
        free(h->pcache->path);
        free(h->pcache);
    }
    free(h->host_scratch);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int l8_gemm_autotune_enabled(const l8_gemm_handle *h) { return h ? h->autotune : 0; }

l8_status l8_gemm_get_stats(l8_gemm_handle *h, l8_gemm_stats *out)
{
    L8_ARG(h != NULL && out != NULL);
    pthread_mutex_lock(&h->lock);
    l8_gemm_stats s = h->stats;
    pthread_mutex_unlock(&h->lock);
    return l8i_stats_out(out, &s, sizeof s, "l8_gemm_get_stats");
}

/* ---- validation ---- */

typedef struct operand {
    int64_t rows, cols, ld;
    size_t off, extent;           /* bytes into the storage; bytes spanned */
} operand;

static l8_status check_operand(const char *name, const l8_tensor *t, l8_ctx *ctx, operand *o)
{
    if (!t) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: desc->%s is NULL", name);
    if (l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: %s belongs to another context than the handle",
                       name);
    if (l8_tensor_ndim(t) != 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: %s has %d dimensions, not 2", name,
                       l8_tensor_ndim(t));
    o->rows = l8_tensor_dim(t, 0);
    o->cols = l8_tensor_dim(t, 1);
    if (o->rows == 0 || o->cols == 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: %s is empty (%" PRId64 " x %" PRId64 ")",
                       name, o->rows, o->cols);
    if (o->cols > 1 && l8_tensor_stride(t, 1) != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: %s has inner stride %" PRId64 "; rows must be"
                       " contiguous (pass trans_a/trans_b or make it contiguous)", name,
                       l8_tensor_stride(t, 1));
    /* One row: the row stride addresses nothing; keep it when it is large
     * enough (a row of a padded matrix keeps its ld), else use the length. */
    int64_t s0 = l8_tensor_stride(t, 0);
    o->ld = o->rows > 1 || s0 >= o->cols ? s0 : o->cols;
    if (o->ld < o->cols)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: %s has row stride %" PRId64 " below its row"
                       " length %" PRId64, name, o->ld, o->cols);
    size_t es = l8_dtype_size(l8_tensor_dtype(t));
    o->off = l8_tensor_offset(t);
    o->extent = (size_t)((o->rows - 1) * o->ld + o->cols) * es;
    return L8_OK;
}

static int overlap(const l8_tensor *x, const operand *ox, const l8_tensor *y, const operand *oy)
{
    if (l8_tensor_storage(x) != l8_tensor_storage(y)) return 0;
    return ox->off < oy->off + oy->extent && oy->off < ox->off + ox->extent;
}

static l8_status check_dtypes(problem *p)
{
    const char *na = l8_dtype_name(p->dt_a), *nb = l8_dtype_name(p->dt_b),
               *nd = l8_dtype_name(p->dt_d);
    int fa = is_fp8(p->dt_a), fb = is_fp8(p->dt_b);
    if (fa || fb) {
        if (!(fa && fb))
            return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 needs both operands in FP8; got %s x %s"
                           " (cast the other operand)", na, nb);
        if (p->dt_a == L8_E5M2 && p->dt_b == L8_E5M2)
            return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: e5m2 x e5m2 is not supported by cuBLASLt;"
                           " one operand must be e4m3");
        int ok = p->dt_d == L8_F32 || p->dt_d == L8_BF16 || p->dt_d == L8_F16 ||
                 p->dt_d == L8_E4M3 || (p->dt_d == L8_E5M2 && (p->dt_a == L8_E5M2 || p->dt_b == L8_E5M2));
        if (!ok)
            return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: %s x %s cannot produce a %s D (bf16, f16,"
                           " f32, e4m3, or e5m2 with an e5m2 input)", na, nb, nd);
        p->fp8 = 1;
        p->d_fp8 = is_fp8(p->dt_d);
        return L8_OK;
    }
    if (!is_float(p->dt_a) || !is_float(p->dt_b))
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: %s x %s: GEMMs take f32, bf16, f16, e4m3 or"
                       " e5m2 operands", na, nb);
    if (p->dt_a != p->dt_b)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: dtype mismatch: A is %s, B is %s", na, nb);
    if (!(p->dt_d == p->dt_a || (p->dt_d == L8_F32 && p->dt_a != L8_F32)))
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: %s x %s cannot produce a %s D (%s or f32)",
                       na, nb, nd, na);
    return L8_OK;
}

/* FP8 layout, size and alignment rules (see gemm.h). */
static l8_status check_fp8(const problem *p)
{
    if (p->ta != 0 || p->tb != 1)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 on Hopper needs trans_a = 0, trans_b = 1"
                       " (both operands contiguous along K); got (%d, %d): use the transposed FP8"
                       " copy from the cast+transpose kernel", p->ta, p->tb);
    if (p->k % 16)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 needs K %% 16 == 0; K = %" PRId64, p->k);
    size_t ds = l8_dtype_size(p->dt_d), cs = p->d_fp8 ? 2 : ds;
    if (p->lda % 16 || p->ldb % 16 || ((size_t)p->ldd * ds) % 16)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 needs 16-byte row strides; A %" PRId64
                       " B %" PRId64 " D %" PRId64 " x %zu bytes", p->lda, p->ldb, p->ldd, ds);
    if (((size_t)p->n * cs) % 16)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 with a %s D needs N * %zu %% 16 == 0"
                       " (N %% %zu == 0); N = %" PRId64, l8_dtype_name(p->dt_d), cs, 16 / cs, p->n);
    if (align_log2(p->a) < 4 || align_log2(p->b) < 4 || align_log2(p->d) < 4)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: FP8 needs 16-byte aligned A, B and D (%p, %p,"
                       " %p)", p->a, p->b, (void *)p->d);
    if (p->beta != 0.0f && p->d_fp8)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: an FP8 D cannot accumulate (beta = %g)",
                       (double)p->beta);
    return L8_OK;
}

static l8_status check_bias(const l8_gemm_desc *dc, problem *p, l8_ctx *ctx, operand *ob)
{
    const l8_tensor *t = dc->bias;
    if (p->epi == L8_GEMM_EPI_NONE || p->epi == L8_GEMM_EPI_DGELU_CAST) {
        if (t) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: bias given with epilogue %s",
                              epi_name(p->epi));
        return L8_OK;
    }
    int grad = p->epi == L8_GEMM_EPI_DBIAS_A || p->epi == L8_GEMM_EPI_DBIAS_B;
    if (grad && p->fp8)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: the bias-gradient epilogues are not offered"
                       " for FP8 GEMMs (take dbias from the dY cast)");
    if (grad && p->alpha != 1.0f)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: the bias-gradient epilogues need alpha = 1"
                       " (alpha = %g)", (double)p->alpha);
    if (!t) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: epilogue %s needs desc->bias",
                           epi_name(p->epi));
    if (l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: bias belongs to another context");
    int64_t want = p->epi == L8_GEMM_EPI_DBIAS_A ? p->m : p->n;
    if (l8_tensor_ndim(t) != 1 || l8_tensor_dim(t, 0) != want)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: epilogue %s needs a 1-D bias of length %"
                       PRId64 " (%s)", epi_name(p->epi), want,
                       p->epi == L8_GEMM_EPI_DBIAS_A ? "M" : "N");
    if (want > 1 && l8_tensor_stride(t, 0) != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: bias must be contiguous (stride %" PRId64 ")",
                       l8_tensor_stride(t, 0));
    l8_dtype need = p->fp8 ? (p->dt_d == L8_F16 ? L8_F16 : L8_BF16) : p->dt_d;
    p->dt_bias = l8_tensor_dtype(t);
    if (p->dt_bias != need)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: the bias of a %s x %s -> %s GEMM must be %s,"
                       " not %s", l8_dtype_name(p->dt_a), l8_dtype_name(p->dt_b),
                       l8_dtype_name(p->dt_d), l8_dtype_name(need), l8_dtype_name(p->dt_bias));
    ob->rows = 1;
    ob->cols = want;
    ob->ld = want;
    ob->off = l8_tensor_offset(t);
    ob->extent = (size_t)want * l8_dtype_size(p->dt_bias);
    return L8_OK;
}

/* desc->aux (the GELU epilogue's output; nothing else takes one) and
 * desc->skip_amax (an FP8 D's only). */
static l8_status check_aux(const l8_gemm_desc *dc, problem *p, l8_ctx *ctx, operand *oa)
{
    const l8_tensor *t = dc->aux;
    if (dc->skip_amax != 0 && (dc->skip_amax != 1 || !p->d_fp8))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: skip_amax = %d with a %s D (0, or 1 for an"
                       " FP8 D)", dc->skip_amax, l8_dtype_name(p->dt_d));
    if (p->epi == L8_GEMM_EPI_DGELU_CAST)   /* read: check_dgelu_cast */
        return t ? check_operand("aux", t, ctx, oa) : L8_OK;
    if (p->epi != L8_GEMM_EPI_BIAS_GELU_AUX) {
        if (t) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux given with epilogue %s",
                              epi_name(p->epi));
        return L8_OK;
    }
    if (!t) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: epilogue %s needs desc->aux",
                           epi_name(p->epi));
    if (p->beta != 0.0f)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: epilogue %s needs beta = 0 (beta = %g)",
                       epi_name(p->epi), (double)p->beta);
    L8_CHECK(check_operand("aux", t, ctx, oa));
    if (oa->rows != p->m || oa->cols != p->n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux is %" PRId64 " x %" PRId64 ", D is %"
                       PRId64 " x %" PRId64, oa->rows, oa->cols, p->m, p->n);
    if (l8_tensor_dtype(t) != p->dt_bias)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux has dtype %s, the bias %s (they must be"
                       " the same)", l8_dtype_name(l8_tensor_dtype(t)),
                       l8_dtype_name(p->dt_bias));
    if (oa->ld != p->ldd || oa->ld % 8)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux has row stride %" PRId64 "; it needs D's"
                       " (%" PRId64 "), a multiple of 8 elements", oa->ld, p->ldd);
    if (l8_tensor_offset(t) % 16)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux must be 16-byte aligned (offset %zu in its"
                       " storage)", l8_tensor_offset(t));
    p->ld_aux = oa->ld;
    return L8_OK;
}

/* desc->cast and cast_t, and with L8_GEMM_EPI_DGELU_CAST the cast's own
 * checks (ops/cast.c) on D, aux, cast and cast_t; then p->epi becomes NONE,
 * the GEMM's plan, and p->dgelu says what follows it. */
static l8_status check_dgelu_cast(const l8_gemm_desc *dc, problem *p, l8_ctx *ctx,
                                  const operand *oa, const operand *ob, const operand *od,
                                  const operand *oaux)
{
    if (p->epi != L8_GEMM_EPI_DGELU_CAST) {
        if (dc->cast || dc->cast_t)
            return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: cast or cast_t given with epilogue %s",
                           epi_name(p->epi));
        return L8_OK;
    }
    if (!dc->aux || !dc->cast || !dc->cast_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: epilogue dgelu_cast needs desc->aux, cast"
                       " and cast_t");
    if (p->d_fp8)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: epilogue dgelu_cast needs a high-precision"
                       " D, not %s", l8_dtype_name(p->dt_d));
    operand oc, oct;
    L8_CHECK(check_operand("cast", dc->cast, ctx, &oc));
    L8_CHECK(check_operand("cast_t", dc->cast_t, ctx, &oct));
    L8_CHECK(l8i_cast_dact_prepare("l8_gemm (epilogue dgelu_cast: D is in, cast out, cast_t"
                                   " out_t)", dc->d, dc->aux, dc->cast, dc->cast_t, &p->dc));
    const l8_tensor *t[4] = { dc->a, dc->b, dc->d, dc->aux };
    const operand *o[4] = { oa, ob, od, oaux };
    for (int i = 0; i < 4; i++)
        if (overlap(dc->cast, &oc, t[i], o[i]) || overlap(dc->cast_t, &oct, t[i], o[i]))
            return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: cast or cast_t overlaps %s in one"
                           " storage", (const char *[]){ "A", "B", "D", "aux" }[i]);
    if (overlap(dc->cast, &oc, dc->cast_t, &oct))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: cast overlaps cast_t in one storage");
    p->epi = L8_GEMM_EPI_NONE;
    p->dgelu = 1;
    return L8_OK;
}

/* Validate desc and fill p (pointers resolved now). Records nothing on
 * success; on failure the last error says what is wrong. */
static l8_status analyze(l8_gemm_handle *h, const l8_gemm_desc *dc, problem *p)
{
    memset(p, 0, sizeof *p);
    operand oa, ob, od, obias = { 0 };
    L8_CHECK(check_operand("a", dc->a, h->ctx, &oa));
    L8_CHECK(check_operand("b", dc->b, h->ctx, &ob));
    L8_CHECK(check_operand("d", dc->d, h->ctx, &od));
    if ((dc->trans_a != 0 && dc->trans_a != 1) || (dc->trans_b != 0 && dc->trans_b != 1))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: trans_a = %d, trans_b = %d (0 or 1)",
                       dc->trans_a, dc->trans_b);
    if (!isfinite(dc->alpha) || !isfinite(dc->beta))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: alpha = %g, beta = %g must be finite",
                       (double)dc->alpha, (double)dc->beta);
    if ((unsigned)dc->epilogue > L8_GEMM_EPI_DGELU_CAST)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: unknown epilogue %d", (int)dc->epilogue);
    if (dc->sm_count < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: sm_count %d (0: all, or > 0)", dc->sm_count);
    if (h->cuda && dc->sm_count > 0) {
        unsigned nsm = 0;
        L8_CHECK(l8i_sm_count(h->ctx, &nsm));
        p->sm = (unsigned)dc->sm_count < nsm ? dc->sm_count : 0;
    }
    p->ta = dc->trans_a;
    p->tb = dc->trans_b;
    p->alpha = dc->alpha;
    p->beta = dc->beta;
    p->epi = dc->epilogue;
    p->dt_a = l8_tensor_dtype(dc->a);
    p->dt_b = l8_tensor_dtype(dc->b);
    p->dt_d = l8_tensor_dtype(dc->d);
    p->m = p->ta ? oa.cols : oa.rows;
    p->k = p->ta ? oa.rows : oa.cols;
    int64_t kb = p->tb ? ob.cols : ob.rows;
    p->n = p->tb ? ob.rows : ob.cols;
    p->lda = oa.ld;
    p->ldb = ob.ld;
    p->ldd = od.ld;
    if (kb != p->k)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: op(A) is %" PRId64 " x %" PRId64 " but op(B) is"
                       " %" PRId64 " x %" PRId64 " (inner dimensions differ)", p->m, p->k, kb, p->n);
    if (od.rows != p->m || od.cols != p->n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: D is %" PRId64 " x %" PRId64 ", the product is"
                       " %" PRId64 " x %" PRId64, od.rows, od.cols, p->m, p->n);
    L8_CHECK(check_dtypes(p));
    p->fast = p->fp8 && dc->fast_accum;
    L8_CHECK(check_bias(dc, p, h->ctx, &obias));
    operand oaux = { 0 };
    L8_CHECK(check_aux(dc, p, h->ctx, &oaux));
    const int64_t lim = INT32_MAX;
    if (p->m > lim || p->n > lim || p->k > lim || p->lda > lim || p->ldb > lim || p->ldd > lim)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_gemm: dimensions or strides above INT32_MAX (M %"
                       PRId64 " N %" PRId64 " K %" PRId64 ")", p->m, p->n, p->k);
    if (overlap(dc->d, &od, dc->a, &oa) || overlap(dc->d, &od, dc->b, &ob))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: D overlaps A or B in one storage");
    const int bias_read = p->epi == L8_GEMM_EPI_BIAS || p->epi == L8_GEMM_EPI_BIAS_GELU_AUX;
    if (dc->bias && (overlap(dc->bias, &obias, dc->d, &od) ||
                     (!bias_read && (overlap(dc->bias, &obias, dc->a, &oa) ||
                                     overlap(dc->bias, &obias, dc->b, &ob)))))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: bias overlaps %s in one storage",
                       bias_read ? "D" : "D, A or B");
    if (dc->aux && (overlap(dc->aux, &oaux, dc->a, &oa) || overlap(dc->aux, &oaux, dc->b, &ob) ||
                    overlap(dc->aux, &oaux, dc->d, &od) || overlap(dc->aux, &oaux, dc->bias, &obias)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm: aux overlaps A, B, D or bias in one storage");
    L8_CHECK(check_dgelu_cast(dc, p, h->ctx, &oa, &ob, &od, &oaux));
    void *pa = NULL, *pb = NULL;
    L8_CHECK(l8_tensor_data(dc->a, &pa));
    L8_CHECK(l8_tensor_data(dc->b, &pb));
    L8_CHECK(l8_tensor_data(dc->d, &p->d));
    if (dc->bias) L8_CHECK(l8_tensor_data(dc->bias, &p->bias));
    if (dc->aux && !p->dgelu) L8_CHECK(l8_tensor_data(dc->aux, &p->aux));
    p->a = pa;
    p->b = pb;
    if (p->fp8) {
        L8_CHECK(check_fp8(p));
        l8_fp8_meta *ma = l8_tensor_fp8_meta(dc->a), *mb = l8_tensor_fp8_meta(dc->b),
                    *md = l8_tensor_fp8_meta(dc->d);
        p->sa = ma ? l8_fp8_meta_scale_inv(ma) : NULL;
        p->sb = mb ? l8_fp8_meta_scale_inv(mb) : NULL;
        if (p->d_fp8 && md)
            p->sd = l8_fp8_meta_scale(md);
        if (p->d_fp8 && md && !dc->skip_amax)
            p->amax = l8_fp8_meta_amax(md);
        /* cuBLASLt runs FP8 kernels only with 16-byte aligned scale and amax
         * pointers (CUBLAS_STATUS_NOT_SUPPORTED otherwise, H200, cuBLASLt
         * 13.1); an l8_fp8_meta keeps each of its scalars so (tensor.h). */
        if (((uintptr_t)p->sa | (uintptr_t)p->sb | (uintptr_t)p->sd | (uintptr_t)p->amax) % 16)
            return L8_FAIL(L8_ERR_INTERNAL, "l8_gemm: an FP8 scale or amax pointer is not"
                           " 16-byte aligned");
    }
    return L8_OK;
}

static void make_key(const problem *p, plan_key *k)
{
    memset(k, 0, sizeof *k);
    k->m = (uint64_t)p->m;
    k->n = (uint64_t)p->n;
    k->k = (uint64_t)p->k;
    k->lda = (uint64_t)p->lda;
    k->ldb = (uint64_t)p->ldb;
    k->ldd = (uint64_t)p->ldd;
    uint64_t b = 0;
    unsigned sh = 0;
#define PUT(v, w) do { b |= ((uint64_t)(v) & ((1ull << (w)) - 1)) << sh; sh += (w); } while (0)
    PUT(p->dt_a, 4); PUT(p->dt_b, 4); PUT(p->dt_d, 4);
    PUT(p->epi == L8_GEMM_EPI_NONE ? 15 : p->dt_bias, 4);
    PUT(p->ta, 1); PUT(p->tb, 1); PUT(p->epi, 3); PUT(p->fast, 1);
    PUT(p->beta != 0.0f, 1);
    PUT(p->sa != NULL, 1); PUT(p->sb != NULL, 1); PUT(p->sd != NULL, 1); PUT(p->amax != NULL, 1);
    PUT(align_log2(p->a), 4); PUT(align_log2(p->b), 4); PUT(align_log2(p->d), 4);
    PUT(p->bias ? align_log2(p->bias) : 15, 4);
    PUT(p->sm, 12);               /* < the device's SM count; 0 in files written before it */
    PUT(p->aux ? align_log2(p->aux) : 0, 4);   /* 0 without aux, as in files before it */
#undef PUT
    k->bits = b;
}

static uint64_t key_hash(const plan_key *k)
{
    const uint64_t w[7] = { k->m, k->n, k->k, k->lda, k->ldb, k->ldd, k->bits };
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 7; i++) {
        x ^= w[i];
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 32;
    }
    return x;
}

static plan *cache_find(l8_gemm_handle *h, const plan_key *k, uint64_t hash)
{
    for (plan *pl = h->buckets[hash & (L8I_GEMM_NBUCKETS - 1)]; pl; pl = pl->next)
        if (pl->hash == hash && !memcmp(&pl->key, k, sizeof *k)) return pl;
    return NULL;
}

static void cache_insert(l8_gemm_handle *h, plan *pl)
{
    if (h->stats.plans_cached >= h->max_plans) {
        cache_flush(h);
        h->stats.cache_flushes++;
    }
    unsigned b = (unsigned)(pl->hash & (L8I_GEMM_NBUCKETS - 1));
    pl->next = h->buckets[b];
    h->buckets[b] = pl;
    h->stats.plans_cached++;
}

/* ---- host reference ---- */

/* The host backend: gemm_host.c does the arithmetic (packed, blocked, SIMD,
 * threaded; see there for the summation order). */
static l8_status host_gemm(l8_gemm_handle *h, const problem *p)
{
    l8i_hgemm g;
    memset(&g, 0, sizeof g);
    g.m = p->m;
    g.n = p->n;
    g.k = p->k;
    g.lda = p->lda;
    g.ldb = p->ldb;
    g.ldd = p->ldd;
    g.dt_a = p->dt_a;
    g.dt_b = p->dt_b;
    g.dt_d = p->dt_d;
    g.dt_bias = p->dt_bias;
    g.ta = p->ta;
    g.tb = p->tb;
    g.epi = p->epi;
    g.ab = p->alpha * (p->sa ? *p->sa : 1.0f) * (p->sb ? *p->sb : 1.0f);
    g.beta = p->beta;
    g.sd = p->sd ? *p->sd : 1.0f;
    g.a = p->a;
    g.b = p->b;
    g.d = p->d;
    g.bias = p->bias;
    g.aux = p->aux;
    g.ld_aux = p->ld_aux;
    g.amax = p->amax;
    g.scratch = &h->host_scratch;           /* under h->lock */
    g.scratch_bytes = &h->host_scratch_bytes;
    return l8i_host_gemm(&g);
}

/* ---- cuBLASLt plans ---- */

cudaDataType_t l8i_gemm_cuda_type(l8_dtype dt)
{
    switch (dt) {
    case L8_F32: return CUDA_R_32F;
    case L8_BF16: return CUDA_R_16BF;
    case L8_F16: return CUDA_R_16F;
    case L8_E4M3: return CUDA_R_8F_E4M3;
    case L8_E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;   /* unreachable: analyze() admits only these */
    }
}

static l8_status set_attr(plan *pl, cublasLtMatmulDescAttributes_t a, const void *v, size_t n)
{
    return L8_LT(cublasLtMatmulDescSetAttribute, pl->op, a, v, n);
}

static l8_status set_ptr(plan *pl, cublasLtMatmulDescAttributes_t a, const void **cur, const void *v)
{
    if (pl->ptrs_set && *cur == v) return L8_OK;
    L8_CHECK(set_attr(pl, a, &v, sizeof v));
    *cur = v;
    return L8_OK;
}

/* Point the descriptor at this call's scales, amax and bias (only those
 * that changed). Our A is cuBLASLt's B and vice versa. */
l8_status l8i_gemm_set_ptrs(plan *pl, const problem *p)
{
    if (p->fp8) {
        L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pl->p_sa, p->sb));
        L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pl->p_sb, p->sa));
        if (p->d_fp8) {
            L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &pl->p_sd, p->sd));
            L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &pl->p_amax, p->amax));
        }
    }
    if (p->epi != L8_GEMM_EPI_NONE)
        L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pl->p_bias, p->bias));
    if (p->aux)
        L8_CHECK(set_ptr(pl, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pl->p_aux, p->aux));
    pl->ptrs_set = 1;
    return L8_OK;
}

l8_status l8i_gemm_workspace_for(l8_gemm_handle *h, l8_stream *s, ws_slot **out)
{
    for (int i = 0; i < h->n_ws; i++)
        if (h->ws[i].s == s) { *out = &h->ws[i]; return L8_OK; }
    if (h->n_ws == L8I_GEMM_MAX_WS)
        return L8_FAIL(L8_ERR_INTERNAL, "l8_gemm: more than %d streams on one handle",
                       L8I_GEMM_MAX_WS);
    void *p = NULL;
    L8_CHECK(l8_ctx_malloc(h->ctx, h->ws_bytes, s, &p));
    if ((uintptr_t)p % 256) {
        l8_status st = L8_FAIL(L8_ERR_INTERNAL, "l8_gemm: workspace %p misaligned", p);
        if (l8_ctx_free(h->ctx, p) != L8_OK) {
            /* the first failure is the error to report */
        }
        return st;
    }
    ws_slot *w = &h->ws[h->n_ws++];
    w->s = s;
    w->ptr = p;
    *out = w;
    return L8_OK;
}

l8_status l8i_gemm_launch(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s, void *ws)
{
    float alpha = p->alpha, beta = p->beta;
    /* In place, C is D with D's layout. FP8 GEMMs with beta == 0 get no C:
     * cuBLASLt 13 checks that C == D comes with identical descriptors and
     * rejects FP8 calls that alias them (XLA and PyTorch pass NULL too); an
     * FP8 D has a BF16 C layout and never a C. */
    const void *c = (p->fp8 && p->beta == 0.0f) ? NULL : p->d;
    return L8_LT(cublasLtMatmul, h->lt, pl->op, &alpha, p->b, pl->la, p->a, pl->lb, &beta, c,
                 pl->lc, p->d, pl->ld, &pl->algo, ws, h->ws_bytes, l8i_stream_cu(s));
}

static l8_status layout(cublasLtMatrixLayout_t *l, l8_dtype dt, int64_t rows, int64_t cols, int64_t ld)
{
    return L8_LT(cublasLtMatrixLayoutCreate, l, l8i_gemm_cuda_type(dt), (uint64_t)rows, (uint64_t)cols, ld);
}

static l8_status plan_build_cuda(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s)
{
    l8_status ret = L8_OK;
    cublasLtMatmulPreference_t pref = NULL;
    L8_TRY(ret, L8_LT(cublasLtMatmulDescCreate, &pl->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), out);
    int32_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;      /* cuBLASLt A is our B */
    int32_t opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;      /* cuBLASLt B is our A */
    L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), out);
    L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), out);
    if (p->fp8) {
        int8_t fast = (int8_t)p->fast;
        L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), out);
    }
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (p->epi == L8_GEMM_EPI_BIAS) epi = CUBLASLT_EPILOGUE_BIAS;
    else if (p->epi == L8_GEMM_EPI_DBIAS_A) epi = CUBLASLT_EPILOGUE_BGRADB;
    else if (p->epi == L8_GEMM_EPI_DBIAS_B) epi = CUBLASLT_EPILOGUE_BGRADA;
    else if (p->epi == L8_GEMM_EPI_BIAS_GELU_AUX) epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), out);
    if (p->sm > 0) {              /* before the heuristic: a plan chosen for p->sm SMs */
        int32_t nsm = p->sm;
        L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &nsm, sizeof nsm), out);
    }
    if (p->epi != L8_GEMM_EPI_NONE) {
        int32_t bt = (int32_t)l8i_gemm_cuda_type(p->dt_bias);
        L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), out);
    }
    if (p->aux) {                 /* aux: D's shape and row stride, the bias's type */
        int64_t ld_aux = p->ld_aux;
        int32_t at = (int32_t)l8i_gemm_cuda_type(p->dt_bias);
        L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux), out);
        L8_TRY(ret, set_attr(pl, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at), out);
    }
    L8_TRY(ret, layout(&pl->la, p->dt_b, p->tb ? p->k : p->n, p->tb ? p->n : p->k, p->ldb), out);
    L8_TRY(ret, layout(&pl->lb, p->dt_a, p->ta ? p->m : p->k, p->ta ? p->k : p->m, p->lda), out);
    L8_TRY(ret, layout(&pl->ld, p->dt_d, p->n, p->m, p->ldd), out);
    if (p->d_fp8) L8_TRY(ret, layout(&pl->lc, L8_BF16, p->n, p->m, p->ldd), out);
    else pl->lc = pl->ld;
    /* Real pointers before the heuristic: it reads their alignment. */
    L8_TRY(ret, l8i_gemm_set_ptrs(pl, p), out);
    /* a tuned algorithm from the plan cache replaces the heuristic and tuning */
    if (h->pcache && cache_try(h, pl, p)) goto out;

    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceCreate, &pref), out);
    uint64_t wsb = h->ws_bytes;
    uint32_t al_a = 1u << align_log2(p->b), al_b = 1u << align_log2(p->a),
             al_d = 1u << align_log2(p->d);
    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb), out);
    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a), out);
    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b), out);
    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d), out);
    L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d), out);
    if (h->precise_reduction && p->dt_d != L8_F32) {
        /* Split-K partial sums in f32 (or no split): the INPLACE and
         * OUTPUT_TYPE schemes round each partial to D's type first. */
        uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        L8_TRY(ret, L8_LT(cublasLtMatmulPreferenceSetAttribute, pref,
                          CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof mask), out);
    }

    cublasLtMatmulHeuristicResult_t res[L8I_GEMM_MAX_HEURISTIC];
    memset(res, 0, sizeof res);
    int want = h->autotune ? h->at_cands : 1, got = 0;
    cublasStatus_t r = l8i_lt.cublasLtMatmulAlgoGetHeuristic(h->lt, pl->op, pl->la, pl->lb, pl->lc,
                                                             pl->ld, pref, want, res, &got);
    if (r != CUBLAS_STATUS_SUCCESS && r != CUBLAS_STATUS_NOT_SUPPORTED) {
        ret = l8i_lt_check(r, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
        goto out;
    }
    /* keep the usable ones, in the heuristic's order */
    int n = 0;
    for (int i = 0; r == CUBLAS_STATUS_SUCCESS && i < got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= h->ws_bytes)
            res[n++] = res[i];
    if (n == 0) {
        ret = l8_error_set(L8_ERR_UNSUPPORTED, (int)r, l8i_lt_status_name(r),
                           "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
                           "no cuBLASLt algorithm for %s x %s -> %s, M %" PRId64 " N %" PRId64
                           " K %" PRId64 ", trans (%d, %d), epilogue %s, ld %" PRId64 "/%" PRId64
                           "/%" PRId64, l8_dtype_name(p->dt_a), l8_dtype_name(p->dt_b),
                           l8_dtype_name(p->dt_d), p->m, p->n, p->k, p->ta, p->tb,
                           epi_name(p->epi), p->lda, p->ldb, p->ldd);
        goto out;
    }
    pl->algo = res[0].algo;
    pl->pick = L8I_PICK_FIRST;
    pl->rank = 0;
    if (h->autotune) {
        L8_TRY(ret, l8i_gemm_tune(h, pl, p, s, pref, res, n), out);
    } else if (l8i_gemm_debug()) {
        char d[256];
        l8i_gemm_plan_describe(h, pl, d, sizeof d);
        fprintf(stderr, "lean8: gemm plan %" PRId64 "x%" PRId64 "x%" PRId64 " %s x %s -> %s: %s\n",
                p->m, p->n, p->k, l8_dtype_name(p->dt_a), l8_dtype_name(p->dt_b),
                l8_dtype_name(p->dt_d), d);
    }
out:
    if (pref) (void)l8i_lt.cublasLtMatmulPreferenceDestroy(pref);
    return ret;
}

/* A new plan for p in the cache, or an error and no plan. */
static l8_status plan_get(l8_gemm_handle *h, const problem *p, l8_stream *s, plan **out)
{
    plan_key key;
    make_key(p, &key);
    uint64_t hash = key_hash(&key);
    plan *pl = cache_find(h, &key, hash);
    if (pl) {
        h->stats.plan_hits++;
        *out = pl;
        return L8_OK;
    }
    pl = calloc(1, sizeof *pl);
    if (!pl) return L8_FAIL(L8_ERR_OOM, "l8_gemm: out of host memory for a plan");
    pl->key = key;
    pl->hash = hash;
    pl->sm = p->sm;
    if (h->cuda) {
        l8_status st = plan_build_cuda(h, pl, p, s);
        if (st != L8_OK) {
            plan_free(h, pl);
            return st;
        }
    }
    cache_insert(h, pl);
    h->stats.plans_created++;
    *out = pl;
    return L8_OK;
}

/* ---- the entry point ---- */

/* The caller's desc as this library reads it: the full size, or an older
 * caller's that ends before sm_count or before aux (the fields it lacks keep
 * L8_GEMM_DESC_INIT's values: 0 and NULL). */
static l8_status desc_in(const l8_gemm_desc *desc, const char *fn, l8_gemm_desc *out)
{
    const size_t v1 = offsetof(l8_gemm_desc, sm_count), v2 = offsetof(l8_gemm_desc, aux),
                 v3 = offsetof(l8_gemm_desc, cast);
    if (desc->size != v1 && desc->size != v2 && desc->size != v3 &&
        desc->size < sizeof(l8_gemm_desc))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: desc->size is %zu, expected %zu (use"
                       " L8_GEMM_DESC_INIT)", fn, desc->size, sizeof(l8_gemm_desc));
    *out = (l8_gemm_desc)L8_GEMM_DESC_INIT;
    memcpy(out, desc, desc->size < sizeof *out ? desc->size : sizeof *out);
    out->size = sizeof *out;
    return L8_OK;
}

l8_status l8_gemm(l8_gemm_handle *h, const l8_gemm_desc *desc, l8_stream *s)
{
    L8_ARG(h != NULL && desc != NULL);
    l8_gemm_desc dd;
    L8_CHECK(desc_in(desc, "l8_gemm", &dd));
    desc = &dd;
    L8_CHECK(l8i_resolve_stream("l8_gemm", h->ctx, &s));
    problem p;
    L8_CHECK(analyze(h, desc, &p));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ desc->a, desc->b, desc->d,
                                                            desc->bias, desc->aux, desc->cast,
                                                            desc->cast_t }, 7));

    l8_status ret = L8_OK;
    plan *pl = NULL;
    ws_slot *w = NULL;
    int cast_after = p.dgelu;     /* the epilogue's cast, unless the small kernel did it */
    pthread_mutex_lock(&h->lock);
    const int cuda = h->cuda;     /* fixed at create: w is set exactly when it is */
    if (cuda) {
        L8_TRY(ret, l8i_ctx_bind(h->ctx), out);
        if (l8i_gemm_small_takes(h->small, h->nsm, &p)) {
            /* the kernel the call without the epilogue takes, with its
             * cast inside where the layout allows */
            const int fuse = l8i_gemm_small_fuses(&p);
            L8_TRY(ret, l8i_gemm_small(h->ctx, &p, fuse, s), out);
            h->stats.calls++;
            h->stats.small_calls++;
            h->stats.small_fused += (uint64_t)fuse;
            cast_after = p.dgelu && !fuse;
            goto out;
        }
        L8_TRY(ret, l8i_gemm_workspace_for(h, s, &w), out);
    }
    L8_TRY(ret, plan_get(h, &p, s, &pl), out);
    if (cuda) {
        L8_TRY(ret, l8i_gemm_set_ptrs(pl, &p), out);
        L8_TRY(ret, l8i_gemm_launch(h, pl, &p, s, w->ptr), out);
    } else {
        L8_TRY(ret, host_gemm(h, &p), out);
    }
    h->stats.calls++;
out:
    pthread_mutex_unlock(&h->lock);
    if (ret == L8_OK && cast_after)
        ret = l8_fp8_cast_transpose_dact(L8_ACT_GELU, desc->d, desc->aux, desc->cast,
                                         desc->cast_t, NULL, L8_CAST_ACCUMULATE_AMAX, s);
    return ret;
}

l8_status l8_gemm_describe(l8_gemm_handle *h, const l8_gemm_desc *desc, char *buf, size_t size)
{
    L8_ARG(h != NULL && desc != NULL && buf != NULL && size > 0);
    buf[0] = '\0';
    l8_gemm_desc dd;
    L8_CHECK(desc_in(desc, "l8_gemm_describe", &dd));
    desc = &dd;
    problem p;
    L8_CHECK(analyze(h, desc, &p));
    plan_key key;
    make_key(&p, &key);
    l8_status ret = L8_OK;
    pthread_mutex_lock(&h->lock);
    const plan *pl = cache_find(h, &key, key_hash(&key));
    if (pl) l8i_gemm_plan_describe(h, pl, buf, size);
    else ret = L8_FAIL(L8_ERR_STATE, "l8_gemm_describe: no plan for this GEMM (%" PRId64 " x %"
                       PRId64 " x %" PRId64 ") in the cache: run it first", p.m, p.n, p.k);
    pthread_mutex_unlock(&h->lock);
    return ret;
}
