/* gemm_tune.c - choosing a plan's cuBLASLt algorithm by timing (autotune 1
 * and 2), the configuration search of autotune 2, and plan descriptions.
 *
 * Mode 1 times the heuristic's usable results (up to autotune_candidates).
 * Mode 2 times those plus at most L8I_TUNE_MAX_EXTRA configurations that the
 * heuristic did not rank first or did not return at all:
 *   - variants of its first L8I_TUNE_BASES results: copies of their algo
 *     with one or two CUBLASLT_ALGO_CONFIG_* knobs set to values that the
 *     algorithm id's capabilities (CUBLASLT_ALGO_CAP_*) allow;
 *     l8i_tune_enumerate says which and in what order. cuBLASLt lists no
 *     cluster shapes per algorithm, so a fixed set of small shapes is tried
 *     and cublasLtMatmulAlgoCheck sorts them out;
 *   - algorithm ids (cublasLtMatmulAlgoGetIds) the heuristic did not return
 *     at all: the heuristic's own pick for each (SEARCH_LIMITED_BY_ALGO_ID),
 *     at most L8I_TUNE_OTHER_IDS.
 * A generated candidate is kept only if cublasLtMatmulAlgoCheck accepts it
 * with a workspace no larger than the handle's, its configuration differs
 * from every candidate's so far, and, under precise_reduction with a 16-bit
 * D, it reduces split-K partial sums in f32 (COMPUTE_TYPE) if it splits.
 *
 * Timing (both modes): on the call's stream with scratch D, amax, aux and dbias
 * outputs, so the caller's tensors are never touched. Rounds interleave the
 * candidates (clock and thermal drift hit all alike) after a warm-up that
 * brings the clocks up; each candidate keeps its best round (the
 * screening); the fastest few and the heuristic's first are then re-timed
 * in more interleaved rounds of about AT_FINAL_MS each (sustained clocks)
 * and ranked by their median (the final). The heuristic's first stays
 * unless another's median beats it by more than AT_MARGIN. A candidate
 * cuBLASLt refuses to run is dropped. The host blocks until done.
 *
 * Invariants: everything here runs under the handle's mutex with the context
 * bound. The search calls cuBLASLt through the table directly, not L8_LT: a
 * refused configuration is an expected outcome, not an error, and leaves no
 * last-error record. The pure part (enumeration, equality, the reduction
 * rule, formatting) touches no library and is tested on the host.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/gemm_internal.h"
#include "runtime/internal.h"

#define AT_ROUNDS 3
#define AT_MARGIN 0.01f
#define AT_FINALISTS 4            /* the screening's fastest, re-timed with the heuristic's first */
#define AT_FINAL_ROUNDS 7         /* median of these decides */
#define AT_FINAL_MS 25.0f         /* a final block runs about this long: sustained clocks */
#define AT_FINAL_MAX_ITERS 500
#define MAX_TOTAL (L8I_GEMM_MAX_HEURISTIC + L8I_TUNE_MAX_EXTRA)
#define MAX_IDS 64                /* algorithm ids asked of cublasLtMatmulAlgoGetIds */
#define VAR_TILES 6               /* tile variants per base, nearest ids first */
#define VAR_STAGES 6              /* stages variants per base, nearest ids first */
#define VAR_CUSTOM 8              /* custom options 0..7 at most */

/* ---- the pure part ---- */

/* Cluster shapes tried: the small ones Hopper's GEMM kernels use, and AUTO. */
static const uint16_t k_clusters[] = {
    CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
    CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1,
    CUBLASLT_CLUSTER_SHAPE_AUTO,
};
#define N_CLUSTERS (sizeof k_clusters / sizeof k_clusters[0])

/* cublasLtClusterShape_t by value (1 is unused); later ids print as numbers. */
static const char k_cluster_names[][5] = {
    "auto", "?", "1x1", "2x1", "4x1", "1x2", "2x2", "4x2", "1x4", "2x4", "4x4", "8x1", "1x8",
    "8x2", "2x8", "16x1", "1x16", "3x1", "5x1", "6x1", "7x1", "9x1", "10x1", "11x1", "12x1",
    "13x1", "14x1", "15x1", "3x2", "5x2", "6x2", "7x2", "1x3", "2x3", "3x3", "4x3", "5x3", "3x4",
    "1x5", "2x5", "3x5", "1x6", "2x6", "1x7", "2x7", "1x9", "1x10", "1x11", "1x12", "1x13",
    "1x14", "1x15",
};
_Static_assert(sizeof k_cluster_names / sizeof k_cluster_names[0] ==
               (size_t)CUBLASLT_CLUSTER_SHAPE_1x15x1 + 1, "cluster shape names out of step");

int l8i_algo_cfg_equal(const l8i_algo_cfg *a, const l8i_algo_cfg *b)
{
    return a->id == b->id && a->tile == b->tile && a->stages == b->stages &&
           a->splitk == b->splitk && a->reduction == b->reduction && a->swizzle == b->swizzle &&
           a->custom == b->custom && a->inner == b->inner && a->cluster == b->cluster;
}

int l8i_tune_allowed(const l8i_algo_cfg *c, const l8i_tune_rules *r)
{
    return !r->precise || c->splitk <= 1 || c->reduction == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

typedef struct sink {
    const l8i_algo_cfg *known;
    int n_known;
    const l8i_tune_rules *r;
    l8i_tune_variant *out;
    int n, max;
} sink;

static void emit(sink *k, const l8i_algo_cfg *base, int b, const l8i_algo_cfg *c)
{
    if (k->n >= k->max || l8i_algo_cfg_equal(c, base) || !l8i_tune_allowed(c, k->r)) return;
    for (int i = 0; i < k->n_known; i++)
        if (l8i_algo_cfg_equal(c, &k->known[i])) return;
    for (int i = 0; i < k->n; i++)
        if (l8i_algo_cfg_equal(c, &k->out[i].cfg)) return;
    k->out[k->n].cfg = *c;
    k->out[k->n].base = b;
    k->n++;
}

/* Up to max non-zero ids of ids[0..n), nearest to cur's position first
 * (below, then above); in list order when cur is not listed. The ids are
 * sorted by size in cublasLt.h, so neighbours are the similar kernels. */
static int nearest(const uint32_t *ids, int n, uint32_t cur, int max, uint32_t *out)
{
    int at = -1, m = 0;
    for (int i = 0; i < n && at < 0; i++)
        if (ids[i] == cur) at = i;
    if (at < 0) {
        for (int i = 0; i < n && m < max; i++)
            if (ids[i]) out[m++] = ids[i];
        return m;
    }
    for (int d = 1; m < max && (at - d >= 0 || at + d < n); d++) {
        if (at - d >= 0 && ids[at - d]) out[m++] = ids[at - d];
        if (m < max && at + d < n && ids[at + d]) out[m++] = ids[at + d];
    }
    return m;
}

/* The reduction for a split-K variant: f32 partials when precise, else the
 * schemes that need the least workspace first. 0: none allowed. */
static uint32_t split_reduction(uint32_t mask, int precise)
{
    static const uint32_t order[] = { CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                      CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
                                      CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE };
    if (precise) return mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (mask & order[i]) return order[i];
    return 0;
}

enum { V_CLUSTER, V_SWIZZLE, V_TILE, V_STAGES, V_CLUSTER_SWIZZLE, V_CUSTOM, V_SPLITK, V_CLASSES };

static void vary(sink *k, const l8i_algo_cfg *base, const l8i_algo_caps *cp, int b, int cls)
{
    l8i_algo_cfg c = *base;
    uint32_t ids[L8I_CAP_IDS];
    int m = 0;
    switch (cls) {
    case V_CLUSTER_SWIZZLE:
        if (!cp->swizzle) return;
        c.swizzle = base->swizzle ? 0 : 1;
        /* fall through */
    case V_CLUSTER:
        for (size_t i = 0; i < N_CLUSTERS; i++) {
            if (k_clusters[i] == base->cluster) continue;
            c.cluster = k_clusters[i];
            emit(k, base, b, &c);
        }
        return;
    case V_SWIZZLE:
        if (!cp->swizzle) return;
        c.swizzle = base->swizzle ? 0 : 1;
        emit(k, base, b, &c);
        return;
    case V_TILE:
        m = nearest(cp->tiles, cp->n_tiles, base->tile, VAR_TILES, ids);
        for (int i = 0; i < m; i++) { c.tile = ids[i]; emit(k, base, b, &c); }
        return;
    case V_STAGES:
        m = nearest(cp->stages, cp->n_stages, base->stages, VAR_STAGES, ids);
        for (int i = 0; i < m; i++) { c.stages = ids[i]; emit(k, base, b, &c); }
        return;
    case V_CUSTOM:
        for (int32_t o = 0; o <= cp->custom_max && o < VAR_CUSTOM; o++) {
            c.custom = (uint32_t)o;
            emit(k, base, b, &c);
        }
        return;
    case V_SPLITK:
        if (base->splitk > 1) {
            c.splitk = 1;
            c.reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
        } else if (cp->splitk && k->r->k >= L8I_TUNE_SPLITK_MIN_K) {
            c.splitk = 2;
            c.reduction = split_reduction(cp->reduction_mask, k->r->precise);
            if (!c.reduction) return;
        } else {
            return;
        }
        emit(k, base, b, &c);
        return;
    default:
        return;
    }
}

int l8i_tune_enumerate(const l8i_algo_cfg *bases, const l8i_algo_caps *caps, int nb,
                       const l8i_algo_cfg *known, int n_known, const l8i_tune_rules *r,
                       l8i_tune_variant *out, int max)
{
    sink k = { known, n_known, r, out, 0, max };
    if (nb <= 0) return 0;
    for (int cls = 0; cls < V_CLASSES; cls++) vary(&k, &bases[0], &caps[0], 0, cls);
    for (int cls = 0; cls < V_CLASSES; cls++)
        for (int b = 1; b < nb; b++) vary(&k, &bases[b], &caps[b], b, cls);
    return k.n;
}

void l8i_algo_cfg_format(const l8i_algo_cfg *c, char *buf, size_t size)
{
    char cl[16], red[24] = "";
    if (c->cluster < sizeof k_cluster_names / sizeof k_cluster_names[0])
        snprintf(cl, sizeof cl, "%s", k_cluster_names[c->cluster]);
    else
        snprintf(cl, sizeof cl, "#%u", (unsigned)c->cluster);
    if (c->splitk > 1) snprintf(red, sizeof red, " reduction %u", (unsigned)c->reduction);
    snprintf(buf, size, "algo %d tile %u stages %u cluster %s swizzle %u splitk %d%s custom %u",
             (int)c->id, (unsigned)c->tile, (unsigned)c->stages, cl, (unsigned)c->swizzle,
             (int)c->splitk, red, (unsigned)c->custom);
}

/* ---- cuBLASLt's configuration API ---- */

/* c = a's configuration. 0 when cuBLASLt refuses one of the reads. */
static int cfg_read(const cublasLtMatmulAlgo_t *a, l8i_algo_cfg *c)
{
    size_t w = 0;
    memset(c, 0, sizeof *c);
#define GET(attr, v) (l8i_lt.cublasLtMatmulAlgoConfigGetAttribute(a, attr, &(v), sizeof(v), &w) == \
                      CUBLAS_STATUS_SUCCESS)
    return GET(CUBLASLT_ALGO_CONFIG_ID, c->id) && GET(CUBLASLT_ALGO_CONFIG_TILE_ID, c->tile) &&
           GET(CUBLASLT_ALGO_CONFIG_STAGES_ID, c->stages) &&
           GET(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c->splitk) &&
           GET(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c->reduction) &&
           GET(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c->swizzle) &&
           GET(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c->custom) &&
           GET(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c->inner) &&
           GET(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c->cluster);
#undef GET
}

/* Turn a (whose configuration is from) into to: only the knobs that differ
 * are set, so anything else the heuristic put into a stays. 0 if refused. */
static int cfg_apply(cublasLtMatmulAlgo_t *a, const l8i_algo_cfg *from, const l8i_algo_cfg *to)
{
#define SET(attr, f) (to->f == from->f || l8i_lt.cublasLtMatmulAlgoConfigSetAttribute( \
                          a, attr, &to->f, sizeof to->f) == CUBLAS_STATUS_SUCCESS)
    return SET(CUBLASLT_ALGO_CONFIG_TILE_ID, tile) && SET(CUBLASLT_ALGO_CONFIG_STAGES_ID, stages) &&
           SET(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splitk) &&
           SET(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, reduction) &&
           SET(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle) &&
           SET(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom) &&
           SET(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
#undef SET
}

/* cuBLASLt's A, B, C, D types for p (its A is our B; an FP8 D has a bf16 C). */
static void lt_types(const problem *p, cudaDataType_t t[4])
{
    t[0] = l8i_gemm_cuda_type(p->dt_b);
    t[1] = l8i_gemm_cuda_type(p->dt_a);
    t[2] = p->d_fp8 ? CUDA_R_16BF : l8i_gemm_cuda_type(p->dt_d);
    t[3] = l8i_gemm_cuda_type(p->dt_d);
}

static int algo_init(l8_gemm_handle *h, const problem *p, int id, cublasLtMatmulAlgo_t *a)
{
    cudaDataType_t t[4];
    lt_types(p, t);
    return l8i_lt.cublasLtMatmulAlgoInit(h->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t[0], t[1], t[2],
                                         t[3], id, a) == CUBLAS_STATUS_SUCCESS;
}

/* An id list capability (uint32_t[]) into ids; none when it does not fit. */
static void cap_ids(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t attr,
                    uint32_t *ids, int *n)
{
    size_t need = 0, w = 0;
    *n = 0;
    cublasStatus_t r = l8i_lt.cublasLtMatmulAlgoCapGetAttribute(a, attr, NULL, 0, &need);
    if (r != CUBLAS_STATUS_SUCCESS || need == 0 || need % sizeof *ids ||
        need > L8I_CAP_IDS * sizeof *ids)
        return;
    if (l8i_lt.cublasLtMatmulAlgoCapGetAttribute(a, attr, ids, need, &w) == CUBLAS_STATUS_SUCCESS)
        *n = (int)(w / sizeof *ids);
}

/* The capabilities of algorithm id for p; all zero (nothing but cluster
 * shapes to vary) where cuBLASLt does not answer. */
static void caps_read(l8_gemm_handle *h, const problem *p, int id, l8i_algo_caps *cp)
{
    cublasLtMatmulAlgo_t a;
    size_t w = 0;
    memset(cp, 0, sizeof *cp);
    if (!algo_init(h, p, id, &a)) return;
    cap_ids(&a, CUBLASLT_ALGO_CAP_TILE_IDS, cp->tiles, &cp->n_tiles);
    cap_ids(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, cp->stages, &cp->n_stages);
#define CAP(attr, v) \
    if (l8i_lt.cublasLtMatmulAlgoCapGetAttribute(&a, attr, &(v), sizeof(v), &w) != \
        CUBLAS_STATUS_SUCCESS) (v) = 0
    CAP(CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, cp->splitk);
    CAP(CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, cp->reduction_mask);
    CAP(CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, cp->swizzle);
    CAP(CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, cp->custom_max);
#undef CAP
}

/* ---- the search ---- */

/* The candidates to time: the heuristic's first, then the generated ones. */
typedef struct cands {
    cublasLtMatmulAlgo_t algo[MAX_TOTAL];
    int8_t from[MAX_TOTAL];       /* heuristic rank it is or varies; -1: another id's pick */
    int n, n_heur;
} cands;

/* The search's working memory (on the heap: ~20 KiB). */
typedef struct search {
    l8i_algo_cfg known[MAX_TOTAL];   /* every candidate's configuration so far */
    int n_known;
    int32_t heur_ids[L8I_GEMM_MAX_HEURISTIC];
    int n_heur_ids;
    l8i_algo_cfg bases[L8I_TUNE_BASES];
    int base_rank[L8I_TUNE_BASES];
    l8i_algo_caps caps[L8I_TUNE_BASES];
    l8i_tune_variant raw[L8I_TUNE_MAX_RAW];
    /* why candidates were not timed (logged with L8_GEMM_DEBUG) */
    int n_bases_unread;           /* heuristic results whose configuration cfg_read refused */
    int n_raw;                    /* variants l8i_tune_enumerate generated */
    int n_apply;                  /* variants cfg_apply could not set */
    int n_check[4];               /* AlgoCheck: NOT_SUPPORTED, INVALID_VALUE, other, workspace */
    int n_no_room;                /* variants never checked: L8I_TUNE_MAX_EXTRA reached */
    int n_kept;
    int ids_total, ids_seen, ids_fail, ids_dup, ids_kept;   /* other_ids() */
} search;

/* cublasLtMatmulAlgoCheck's verdict on a for pl: 1 accepted within the
 * workspace; 0 refused, counted in w (may be NULL) by reason. */
static int accepts(l8_gemm_handle *h, const plan *pl, const cublasLtMatmulAlgo_t *a, search *w)
{
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    cublasStatus_t cs =
        l8i_lt.cublasLtMatmulAlgoCheck(h->lt, pl->op, pl->la, pl->lb, pl->lc, pl->ld, a, &r);
    int why = cs == CUBLAS_STATUS_NOT_SUPPORTED ? 0 : cs == CUBLAS_STATUS_INVALID_VALUE ? 1
            : cs != CUBLAS_STATUS_SUCCESS ? 2 : r.workspaceSize > h->ws_bytes ? 3 : -1;
    if (why >= 0 && w) w->n_check[why]++;
    return why < 0;
}

/* L8_GEMM_DEBUG: what the search generated and why candidates were dropped. */
static void search_log(const problem *p, const search *w, int n_heur)
{
    fprintf(stderr, "lean8: gemm search %" PRId64 "x%" PRId64 "x%" PRId64 ": %d heuristic results"
            " (%d unreadable); variants: %d generated, %d not settable, AlgoCheck refused %d"
            " NOT_SUPPORTED + %d INVALID_VALUE + %d other + %d over the workspace, %d not checked"
            " (limit %d), %d kept; other algorithm ids: %d listed, %d the heuristic's own, %d"
            " without a usable pick, %d duplicates, %d kept\n",
            p->m, p->n, p->k, n_heur, w->n_bases_unread, w->n_raw, w->n_apply, w->n_check[0],
            w->n_check[1], w->n_check[2], w->n_check[3], w->n_no_room,
            L8I_TUNE_MAX_EXTRA - L8I_TUNE_OTHER_IDS, w->n_kept, w->ids_total, w->ids_seen,
            w->ids_fail, w->ids_dup, w->ids_kept);
}

/* The heuristic's own pick for each algorithm id it did not return, up to
 * max, appended to c. pref goes back to BEST_FIT afterwards. */
static void other_ids(l8_gemm_handle *h, const plan *pl, const problem *p,
                      cublasLtMatmulPreference_t pref, const l8i_tune_rules *r, search *w,
                      cands *c, int max)
{
    int ids[MAX_IDS], nid = 0, added = 0;
    cudaDataType_t t[4];
    lt_types(p, t);
    if (max <= 0 ||
        l8i_lt.cublasLtMatmulAlgoGetIds(h->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t[0], t[1], t[2], t[3],
                                        MAX_IDS, ids, &nid) != CUBLAS_STATUS_SUCCESS)
        return;
    uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    if (l8i_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode,
                                                    sizeof mode) != CUBLAS_STATUS_SUCCESS)
        return;
    w->ids_total = nid;
    for (int i = 0; i < nid && added < max; i++) {
        int seen = 0;
        for (int j = 0; j < w->n_heur_ids && !seen; j++) seen = w->heur_ids[j] == ids[i];
        w->ids_seen += seen;
        cublasLtMatmulHeuristicResult_t hr;
        memset(&hr, 0, sizeof hr);
        int got = 0;
        l8i_algo_cfg cfg;
        /* the results array carries the algorithm id in: AlgoInit first */
        if (seen || !algo_init(h, p, ids[i], &hr.algo) ||
            l8i_lt.cublasLtMatmulAlgoGetHeuristic(h->lt, pl->op, pl->la, pl->lb, pl->lc, pl->ld,
                                                  pref, 1, &hr, &got) != CUBLAS_STATUS_SUCCESS ||
            got < 1 || hr.state != CUBLAS_STATUS_SUCCESS || hr.workspaceSize > h->ws_bytes ||
            !cfg_read(&hr.algo, &cfg) || !l8i_tune_allowed(&cfg, r)) {
            w->ids_fail += !seen;
            continue;
        }
        int dup = 0;
        for (int j = 0; j < w->n_known && !dup; j++) dup = l8i_algo_cfg_equal(&cfg, &w->known[j]);
        w->ids_dup += dup;
        if (dup) continue;
        w->ids_kept++;
        w->known[w->n_known++] = cfg;
        c->algo[c->n] = hr.algo;
        c->from[c->n++] = -1;
        added++;
    }
    mode = CUBLASLT_SEARCH_BEST_FIT;
    (void)l8i_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode,
                                                      sizeof mode);
}

/* Append the generated candidates to c (which holds the heuristic's n). */
static void search_run(l8_gemm_handle *h, const plan *pl, const problem *p,
                       cublasLtMatmulPreference_t pref, const cublasLtMatmulHeuristicResult_t *res,
                       int n, search *w, cands *c)
{
    l8i_tune_rules r = { p->k, h->precise_reduction && p->dt_d != L8_F32 };
    int nb = 0;
    for (int i = 0; i < n; i++) {
        l8i_algo_cfg cfg;
        if (!cfg_read(&res[i].algo, &cfg)) {
            w->n_bases_unread++;
            continue;
        }
        w->known[w->n_known++] = cfg;
        w->heur_ids[w->n_heur_ids++] = cfg.id;
        if (nb < L8I_TUNE_BASES) {
            w->bases[nb] = cfg;
            w->base_rank[nb++] = i;
        }
    }
    for (int b = 0; b < nb; b++) {
        int same = -1;            /* bases often share an algorithm id */
        for (int j = 0; j < b && same < 0; j++)
            if (w->bases[j].id == w->bases[b].id) same = j;
        if (same >= 0) w->caps[b] = w->caps[same];
        else caps_read(h, p, w->bases[b].id, &w->caps[b]);
    }
    int nraw = l8i_tune_enumerate(w->bases, w->caps, nb, w->known, w->n_known, &r, w->raw,
                                  L8I_TUNE_MAX_RAW);
    int room = L8I_TUNE_MAX_EXTRA - L8I_TUNE_OTHER_IDS, i = 0;
    w->n_raw = nraw;
    for (; i < nraw && room > 0; i++) {
        const l8i_tune_variant *v = &w->raw[i];
        cublasLtMatmulAlgo_t a = res[w->base_rank[v->base]].algo;
        if (!cfg_apply(&a, &w->bases[v->base], &v->cfg)) {
            w->n_apply++;
            continue;
        }
        if (!accepts(h, pl, &a, w)) continue;
        w->known[w->n_known++] = v->cfg;
        c->algo[c->n] = a;
        c->from[c->n++] = (int8_t)w->base_rank[v->base];
        room--;
        w->n_kept++;
    }
    w->n_no_room = nraw - i;
    other_ids(h, pl, p, pref, &r, w, c, L8I_TUNE_OTHER_IDS);
    if (l8i_gemm_debug()) search_log(p, w, n);
}

/* ---- timing ---- */

static size_t d_bytes(const problem *p)
{
    return (size_t)((p->m - 1) * p->ldd + p->n) * l8_dtype_size(p->dt_d);
}

/* One timed block: `warm` untimed calls, then `iters` calls of algo
 * between two events; *ms their time per call. L8_ERR_CUBLAS (the last error
 * cleared): this algorithm cannot run here. Blocks. */
static l8_status time_one(l8_gemm_handle *h, plan *pl, const problem *q, l8_stream *s, void *ws,
                          const cublasLtMatmulAlgo_t *algo, int warm, int iters, l8_event *e0,
                          l8_event *e1, float *ms)
{
    l8_status st = L8_OK;
    pl->algo = *algo;
    for (int it = 0; st == L8_OK && it < warm; it++) st = l8i_gemm_launch(h, pl, q, s, ws);
    if (st == L8_OK) st = l8_event_record(e0, s);
    for (int it = 0; st == L8_OK && it < iters; it++) st = l8i_gemm_launch(h, pl, q, s, ws);
    if (st == L8_ERR_CUBLAS) {
        l8_error_clear();
        return L8_ERR_CUBLAS;
    }
    L8_CHECK(st);
    L8_CHECK(l8_event_record(e1, s));
    L8_CHECK(l8_event_synchronize(e1));
    L8_CHECK(l8_event_elapsed_ms(e0, e1, ms));
    *ms /= (float)(iters > 0 ? iters : 1);
    return L8_OK;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Time c's candidates on s with scratch outputs and leave the fastest in
 * pl->algo. Two stages: the screening (AT_ROUNDS interleaved rounds over
 * all, each keeping its best round) and the final (the screening's
 * AT_FINALISTS fastest and the heuristic's first, AT_FINAL_ROUNDS more
 * interleaved rounds, ranked by their median). A best-of-few over dozens of
 * candidates favours the one that got lucky once (the winner's curse: run
 * after run, the screening's pick lost to the heuristic's in sustained
 * use); the final's median over many rounds does not. */
static l8_status time_candidates(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s,
                                 const cands *c)
{
    l8_status ret = L8_OK;
    void *scratch_d = NULL, *scratch_v = NULL, *scratch_aux = NULL;
    ws_slot *w = NULL;
    l8_event *e0 = NULL, *e1 = NULL;
    int best = 0, trials = 0, searched = 0, n = c->n;
    float t[MAX_TOTAL];
    unsigned char ok[MAX_TOTAL];
    problem q = *p;
    /* every slot, not just n: the final reads ok[0] and fin[0], and the caller's
     * n >= 2 lies beyond what the static analyzer follows */
    for (int i = 0; i < MAX_TOTAL; i++) { t[i] = INFINITY; ok[i] = 1; }
    L8_TRY(ret, l8i_gemm_workspace_for(h, s, &w), out);
    L8_TRY(ret, l8_ctx_malloc(h->ctx, d_bytes(p), s, &scratch_d), out);
    q.d = scratch_d;
    if (p->amax || p->epi == L8_GEMM_EPI_DBIAS_A || p->epi == L8_GEMM_EPI_DBIAS_B) {
        size_t vb = (size_t)(p->m > p->n ? p->m : p->n) * sizeof(float);
        L8_TRY(ret, l8_ctx_malloc(h->ctx, vb, s, &scratch_v), out);
        if (p->amax) q.amax = scratch_v;
        if (p->epi != L8_GEMM_EPI_BIAS) q.bias = scratch_v;
    }
    if (p->aux) {                 /* the GELU epilogue's aux: D's shape, the bias's type */
        size_t ab = (size_t)((p->m - 1) * p->ld_aux + p->n) * l8_dtype_size(p->dt_bias);
        L8_TRY(ret, l8_ctx_malloc(h->ctx, ab, s, &scratch_aux), out);
        q.aux = scratch_aux;
    }
    L8_TRY(ret, l8i_gemm_set_ptrs(pl, &q), out);
    L8_TRY(ret, l8_event_create(h->ctx, 1, &e0), out);
    L8_TRY(ret, l8_event_create(h->ctx, 1, &e1), out);
    for (int r = 0; r < AT_ROUNDS; r++) {
        for (int i = 0; i < n; i++) {
            if (!ok[i]) continue;
            /* first round: one untimed call each (the warm-up), and the first
             * candidate runs a few more while the clocks come up */
            int warm = r ? 0 : i ? 1 : 2 * h->at_iters;
            float ms = 0.0f;
            l8_status st = time_one(h, pl, &q, s, w->ptr, &c->algo[i], warm, h->at_iters, e0, e1, &ms);
            if (st == L8_ERR_CUBLAS) {                      /* this algo cannot run here */
                ok[i] = 0;
                t[i] = INFINITY;
                continue;
            }
            if (st != L8_OK) { ret = st; goto out; }
            if (ms < t[i]) t[i] = ms;
            if (r == 0) {
                trials++;
                searched += i >= c->n_heur;
            }
        }
    }
    /* the final: finalists fin[0..nf), the heuristic's first among them */
    int fin[AT_FINALISTS + 1], nf = 0;
    if (ok[0]) fin[nf++] = 0;
    for (int k = 0; k < AT_FINALISTS; k++) {
        int b = -1;
        for (int i = 1; i < n; i++) {
            int taken = 0;
            for (int j = 0; j < nf; j++) taken |= fin[j] == i;
            if (ok[i] && !taken && (b < 0 || t[i] < t[b])) b = i;
        }
        if (b >= 0) fin[nf++] = b;
    }
    /* final blocks as long as a sustained run's (the clocks under load
     * differ from a short burst's): AT_FINAL_MS at the screening's speed */
    float med[AT_FINALISTS + 1], rt[AT_FINALISTS + 1][AT_FINAL_ROUNDS];
    int fit = h->at_iters;
    if (nf > 1 && t[fin[0]] > 0.0f && isfinite(t[fin[0]])) {
        float want = AT_FINAL_MS / t[fin[0]];
        fit = want > (float)AT_FINAL_MAX_ITERS ? AT_FINAL_MAX_ITERS : want > (float)fit ? (int)want : fit;
    }
    for (int r = 0; nf > 1 && r < AT_FINAL_ROUNDS; r++)
        for (int j = 0; j < nf; j++) {
            float ms = INFINITY;
            l8_status st = time_one(h, pl, &q, s, w->ptr, &c->algo[fin[j]], 0, fit, e0, e1, &ms);
            if (st != L8_OK && st != L8_ERR_CUBLAS) { ret = st; goto out; }
            rt[j][r] = st == L8_OK ? ms : INFINITY;
        }
    for (int j = 0; nf > 1 && j < nf; j++) {
        qsort(rt[j], AT_FINAL_ROUNDS, sizeof rt[j][0], cmp_float);
        med[j] = rt[j][AT_FINAL_ROUNDS / 2];
    }
    if (nf == 1) {
        best = fin[0];
    } else if (nf > 1) {
        int bj = 0;
        for (int j = 1; j < nf; j++)
            if (med[j] < med[bj]) bj = j;
        best = fin[bj];
        /* the heuristic's first (fin[0] when it ran) stays unless beaten clearly */
        if (best != 0 && ok[0] && med[bj] > (1.0f - AT_MARGIN) * med[0]) best = 0;
    }
out:
    pl->algo = c->algo[best];
    pl->ptrs_set = 0;             /* they point at scratch: rewrite all on the real call */
    h->stats.autotune_trials += (uint64_t)trials;
    h->stats.search_candidates += (uint64_t)searched;
    if (ret == L8_OK && trials > 0) {
        h->stats.autotuned++;
        if (best != 0) h->stats.autotune_changed++;
        if (best >= c->n_heur) h->stats.search_wins++;
        pl->pick = best >= c->n_heur ? L8I_PICK_SEARCH : L8I_PICK_TIMED;
        pl->rank = c->from[best];
        pl->timed = (uint16_t)trials;
    }
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    /* stream-ordered frees: the trials on s finish before reuse */
    l8_status fs = scratch_aux ? l8_ctx_free(h->ctx, scratch_aux) : L8_OK;
    if (fs != L8_OK && ret == L8_OK) ret = fs;
    fs = scratch_v ? l8_ctx_free(h->ctx, scratch_v) : L8_OK;
    if (fs != L8_OK && ret == L8_OK) ret = fs;
    fs = scratch_d ? l8_ctx_free(h->ctx, scratch_d) : L8_OK;
    if (fs != L8_OK && ret == L8_OK) ret = fs;
    return ret;
}

l8_status l8i_gemm_tune(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s,
                        cublasLtMatmulPreference_t pref, const cublasLtMatmulHeuristicResult_t *res,
                        int n)
{
    cands c;                      /* ~6 KiB: on the stack, so mode 1 allocates nothing new */
    int search_on = h->autotune == 2 && l8i_lt_has_algo_config();
    if (n < 1 || (n < 2 && !search_on)) return L8_OK;
    for (int i = 0; i < n; i++) {
        c.algo[i] = res[i].algo;
        c.from[i] = (int8_t)i;
    }
    c.n = c.n_heur = n;
    if (search_on) {
        search *w = calloc(1, sizeof *w);
        if (!w) return L8_FAIL(L8_ERR_OOM, "l8_gemm: out of host memory for the algorithm search");
        search_run(h, pl, p, pref, res, n, w, &c);
        free(w);
    }
    if (c.n < 2) return L8_OK;
    L8_CHECK(time_candidates(h, pl, p, s, &c));
    if (l8i_gemm_debug()) {
        char d[256];
        l8i_gemm_plan_describe(h, pl, d, sizeof d);
        fprintf(stderr, "lean8: gemm tuned %" PRId64 "x%" PRId64 "x%" PRId64 ": %s\n", p->m, p->n,
                p->k, d);
    }
    if (h->pcache && pl->timed > 0) l8i_gemm_cache_record(h, pl);
    return L8_OK;
}

void l8i_gemm_cache_record(l8_gemm_handle *h, const plan *pl)
{
    l8i_gemm_cache_entry e;
    memset(&e, 0, sizeof e);
    e.key = pl->key;
    e.ws_bytes = h->ws_bytes;
    e.flags = (h->precise_reduction ? L8I_GCE_PRECISE : 0) | (uint64_t)pl->pick << 8 |
              (uint64_t)(uint8_t)pl->rank << 16 | (uint64_t)pl->timed << 32;
    memcpy(e.algo, &pl->algo, sizeof e.algo);
    l8_status st = l8i_gemm_cache_put(h->pcache, &e);
    if (st == L8_OK) st = l8i_gemm_cache_save(h->pcache);
    if (st != L8_OK) {
        l8i_warn("GEMM plan cache %s not saved: %s", h->pcache->path, l8_last_error_string());
        l8_error_clear();
        return;
    }
    h->stats.plan_cache_saves++;
}

/* ---- descriptions ---- */

void l8i_gemm_plan_describe(const l8_gemm_handle *h, const plan *pl, char *buf, size_t size)
{
    char cfg[160];
    l8i_algo_cfg c;
    if (!h->cuda) {
        snprintf(buf, size, "host reference");
        return;
    }
    if (l8i_lt.cublasLtMatmulAlgoConfigGetAttribute && cfg_read(&pl->algo, &c))
        l8i_algo_cfg_format(&c, cfg, sizeof cfg);
    else
        snprintf(cfg, sizeof cfg, "configuration not readable");
    switch (pl->pick) {
    case L8I_PICK_TIMED:
        snprintf(buf, size, "%s; heuristic #%d, fastest of %u timed", cfg, (int)pl->rank,
                 (unsigned)pl->timed);
        break;
    case L8I_PICK_SEARCH:
        if (pl->rank >= 0)
            snprintf(buf, size, "%s; search: variant of heuristic #%d, fastest of %u timed", cfg,
                     (int)pl->rank, (unsigned)pl->timed);
        else
            snprintf(buf, size, "%s; search: another algorithm id, fastest of %u timed", cfg,
                     (unsigned)pl->timed);
        break;
    default:
        snprintf(buf, size, "%s; heuristic #0, not timed", cfg);
        break;
    }
    if (pl->cached) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, " (plan cache)");
    }
    if (pl->sm > 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, " (for %d SMs)", pl->sm);
    }
}
