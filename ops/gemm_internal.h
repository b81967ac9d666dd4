/* gemm_internal.h - what ops/gemm.c (handles, validation, the plan cache,
 * dispatch) and ops/gemm_tune.c (autotuning, the configuration search, plan
 * descriptions) share. Not installed. Grouped by the file that defines them;
 * gemm.c's banner has the row-major <-> cuBLASLt mapping and the plan
 * invariants, gemm_tune.c's the tuning rules.
 */
#ifndef L8_OPS_GEMM_INTERNAL_H
#define L8_OPS_GEMM_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "ops/cublaslt.h"
#include "ops/gemm.h"
#include "ops/internal.h"         /* l8i_dact_out */

/* ---- gemm.c: the data model ---- */

#define L8I_GEMM_NBUCKETS 1024u       /* plan hash buckets, a power of two */
#define L8I_GEMM_MAX_WS 8             /* a context has 3 streams; room to spare */
#define L8I_GEMM_MAX_HEURISTIC 32     /* autotune_candidates' upper bound */

/* Everything a call describes, checked, in our row-major terms. */
typedef struct problem {
    int64_t m, n, k, lda, ldb, ldd;
    l8_dtype dt_a, dt_b, dt_d, dt_bias;
    int ta, tb, fp8, d_fp8, fast, epi;
    float alpha, beta;
    const void *a, *b;
    void *d, *bias;
    void *aux;                    /* L8_GEMM_EPI_BIAS_GELU_AUX: (m, n), row stride ld_aux,
                                     dt_bias */
    int64_t ld_aux;
    const float *sa, *sb, *sd;    /* scale_inv of A, B; scale of D; NULL = 1 */
    float *amax;                  /* D's amax; NULL = not computed */
    int sm;                       /* l8_gemm_desc.sm_count, 0 when >= the device's SMs */
    int dgelu;                    /* L8_GEMM_EPI_DGELU_CAST: epi is NONE (the GEMM's plan)
                                     and dc what the cast writes (ops/internal.h) */
    l8i_dact_out dc;
} problem;

/* All uint64 words: no padding, so memcmp and the hash see only the key. */
typedef struct plan_key {
    uint64_t m, n, k, lda, ldb, ldd;
    uint64_t bits;
} plan_key;

/* How a plan's algorithm was chosen (plan.pick). */
enum {
    L8I_PICK_FIRST = 0,           /* the heuristic's first, not timed */
    L8I_PICK_TIMED = 1,           /* a heuristic result, fastest when timed */
    L8I_PICK_SEARCH = 2           /* a configuration the search generated, fastest when timed */
};
/* plan.cached: 1 when the algorithm came from the persistent plan cache
 * (pick, rank and timed then say how it was chosen when it was tuned). */

typedef struct plan {
    plan_key key;
    uint64_t hash;
    struct plan *next;
    /* CUDA only; NULL on the host */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld;   /* cuBLASLt's A (our B), B (our A), C, D; lc may be ld */
    cublasLtMatmulAlgo_t algo;
    /* the pointer attributes last written into op (cuBLASLt's naming) */
    int ptrs_set;
    const void *p_sa, *p_sb, *p_sd, *p_amax, *p_bias, *p_aux;
    /* how algo was chosen, for l8_gemm_describe */
    int sm;                       /* problem.sm: planned for that many SMs (0: all) */
    uint8_t pick;                 /* L8I_PICK_* */
    int8_t rank;                  /* the heuristic rank of algo (TIMED) or of the result it
                                     varies (SEARCH); -1: another algorithm id's own pick */
    uint16_t timed;               /* candidates timed for this plan; 0: not tuned */
    uint8_t cached;               /* 1: algo from the persistent plan cache (gemm_cache.c) */
} plan;

/* ---- gemm_cache.c: the persistent plan cache (its banner has the format) ---- */

#define L8I_GCACHE_VERSION 1u

/* Who chose the entries. Compared bytewise: zero-filled before use. */
typedef struct l8i_gemm_cache_id {
    char device[96];              /* device name, NUL-padded */
    uint32_t sm_count;
    uint32_t lt_version;          /* cublasLtGetVersion() */
} l8i_gemm_cache_id;

/* flags: bit 0 precise_reduction; bits 8..15 pick (L8I_PICK_*); bits 16..23
 * rank (int8_t); bits 32..47 timed. */
#define L8I_GCE_PRECISE 1ull
typedef struct l8i_gemm_cache_entry {
    plan_key key;
    uint64_t ws_bytes;            /* the handle's workspace limit when tuned */
    uint64_t flags;
    uint64_t algo[8];             /* cublasLtMatmulAlgo_t's bytes */
} l8i_gemm_cache_entry;

typedef struct l8i_gemm_cache {
    char *path;                   /* owned */
    l8i_gemm_cache_id id;
    l8i_gemm_cache_entry *e;
    size_t n, cap;
} l8i_gemm_cache;

/* What l8i_gemm_cache_load found. */
enum { L8I_GCACHE_LOADED = 0, L8I_GCACHE_ABSENT = 1, L8I_GCACHE_IGNORED = 2 };

/* Replace c's entries with those of the file at c->path when it validates
 * and its identity equals c->id. Returns L8I_GCACHE_LOADED, ABSENT (no such
 * file: c empty), or IGNORED (unreadable, truncated, corrupt, not a plan
 * cache, another version, device or cuBLASLt: c empty, the reason in
 * why[0..whysz)). Leaves no last error. */
int l8i_gemm_cache_load(l8i_gemm_cache *c, char *why, size_t whysz);
/* The entry for key k tuned under workspace limit ws and precise, or NULL. */
const l8i_gemm_cache_entry *l8i_gemm_cache_find(const l8i_gemm_cache *c, const plan_key *k,
                                                uint64_t ws, int precise);
/* Add e, replacing an entry with the same key, ws_bytes and precise flag.
 * Errors: L8_ERR_OOM (c unchanged). */
l8_status l8i_gemm_cache_put(l8i_gemm_cache *c, const l8i_gemm_cache_entry *e);
/* Merge the file's current valid entries that c lacks into c, then replace
 * the file atomically with c. Errors: L8_ERR_IO, L8_ERR_OOM, L8_ERR_INVALID_ARG
 * (a path the container refuses); the old file is intact after any error. */
l8_status l8i_gemm_cache_save(l8i_gemm_cache *c);
/* Drop c's entries (c->path and c->id stay). */
void l8i_gemm_cache_clear(l8i_gemm_cache *c);
/* 1 when L8_GEMM_DEBUG is set (not "0"): plan and search decisions on stderr. */
int l8i_gemm_debug(void);

/* Per stream: cuBLASLt's workspace. */
typedef struct ws_slot {
    l8_stream *s;
    void *ptr;
} ws_slot;

struct l8_gemm_handle {
    l8_ctx *ctx;
    int cuda;
    cublasLtHandle_t lt;
    size_t ws_bytes;
    ws_slot ws[L8I_GEMM_MAX_WS];
    int n_ws;
    int autotune;                 /* 0, 1, 2 (2 only where l8i_lt_has_algo_config) */
    int at_cands, at_iters, precise_reduction;
    size_t max_plans;
    plan *buckets[L8I_GEMM_NBUCKETS];
    pthread_mutex_t lock;
    l8_gemm_stats stats;
    l8i_gemm_cache *pcache;       /* the persistent plan cache; NULL: none (host, or no path) */
    int small;                    /* the small kernel's mode: 0, 1, 2 auto (gemm_small.c) */
    unsigned nsm;                 /* the device's SMs (CUDA) */
    void *host_scratch;           /* host backend: packing memory kept between calls */
    size_t host_scratch_bytes;
};

/* cuBLASLt's data type for a GEMM dtype (f32, bf16, f16, e4m3, e5m2). */
cudaDataType_t l8i_gemm_cuda_type(l8_dtype dt);
/* Point pl's descriptor at p's scales, amax and bias (only those that
 * changed since the last call, unless pl->ptrs_set is 0). Errors: L8_ERR_CUBLAS. */
l8_status l8i_gemm_set_ptrs(plan *pl, const problem *p);
/* The workspace of stream s (allocated on first use, h->ws_bytes). Under
 * h->lock. Errors: L8_ERR_OOM, L8_ERR_INTERNAL (too many streams). */
l8_status l8i_gemm_workspace_for(l8_gemm_handle *h, l8_stream *s, ws_slot **out);
/* Enqueue cublasLtMatmul for p with pl->algo on s. The pointer attributes
 * must already be set (l8i_gemm_set_ptrs). Errors: L8_ERR_CUBLAS, L8_ERR_OOM. */
l8_status l8i_gemm_launch(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s, void *ws);

/* ---- gemm_small.c: lean8's kernel for small FP8 GEMMs ---- */

/* *mode (h->small) from l8_gemm_config.small cfg: 0 (off), 1 (every call
 * that fits) or 2 (auto) as given; -1: from L8_GEMM_SMALL, "0" -> 0, "1" ->
 * 1, unset or "auto" -> 2. Errors: L8_ERR_INVALID_ARG (cfg outside -1..2, or
 * another value of the variable, named). */
l8_status l8i_gemm_small_mode(int cfg, int *mode);
/* 1 when l8_gemm runs p (checked by analyze, so an FP8 p already has the
 * TN form, K % 16 == 0 and 16-byte aligned operands and row strides; CUDA)
 * with the small kernel under mode (h->small) on a device of nsm SMs: FP8
 * A and B, a bf16 or f32 D, no epilogue, N % 8 == 0, M * N * K <= 2^27;
 * auto (2) also wants a grid of at most nsm / 2 tiles of 32 x 32 and
 * K <= 512. Or, under mode 1 only, bf16 A, B and D, any transposes, K <=
 * 32, N % 4 == 0, D's row stride % 4 == 0 and D 8-byte aligned, no
 * epilogue. Both: at most 65535 tile rows. */
int l8i_gemm_small_takes(int mode, unsigned nsm, const problem *p);
/* 1 when p (taken) has the dGELU cast epilogue (p->dgelu) in the layout the
 * kernel's _dgelu entries write: a bf16 D, M % 8 == 0, dense cast and
 * cast_t at 8-byte aligned addresses, aux 16-byte aligned. */
int l8i_gemm_small_fuses(const problem *p);
/* Enqueue p on s with the small kernel (l8i_gemm_small_takes said 1; the
 * context bound): with fuse (l8i_gemm_small_fuses said 1) the _dgelu entry,
 * D and the epilogue's cast in one launch, else D alone. Errors:
 * L8_ERR_CUDA. */
l8_status l8i_gemm_small(l8_ctx *ctx, const problem *p, int fuse, l8_stream *s);

/* ---- gemm_tune.c: autotuning and the configuration search ---- */

/* Choose pl->algo by timing (h->autotune != 0, CUDA, under h->lock, the
 * context bound), given the heuristic's usable results res[0..n) (n >= 1;
 * pl->algo is res[0].algo on entry) and the preference they came from (the
 * search may change its search mode). Mode 1 times res when n > 1; mode 2
 * adds the configurations the search generates. Blocks. Leaves pl->algo,
 * pl->pick/rank/timed and the stats updated, and pl->ptrs_set = 0 when it
 * ran anything. Errors: L8_ERR_OOM, L8_ERR_CUDA, L8_ERR_CUBLAS (not for a
 * candidate that cannot run: that one is dropped). */
l8_status l8i_gemm_tune(l8_gemm_handle *h, plan *pl, const problem *p, l8_stream *s,
                        cublasLtMatmulPreference_t pref, const cublasLtMatmulHeuristicResult_t *res,
                        int n);

/* After pl was tuned (pl->timed > 0): record its algorithm in h->pcache and
 * save the file. A failure to save is a warning, not an error (the cache is
 * an optimization): the GEMM goes on. */
void l8i_gemm_cache_record(l8_gemm_handle *h, const plan *pl);

/* Write pl's description (see l8_gemm_describe) into buf[0..size), size > 0. */
void l8i_gemm_plan_describe(const l8_gemm_handle *h, const plan *pl, char *buf, size_t size);

/* The search's pure part, host-testable (tests/test_gemm.c). */

/* One algorithm configuration: the CUBLASLT_ALGO_CONFIG_* values, each in
 * the type cublasLt.h gives it (the Get/Set calls check the size). */
typedef struct l8i_algo_cfg {
    int32_t id;                   /* CONFIG_ID, int32_t, read-only */
    uint32_t tile;                /* CONFIG_TILE_ID, uint32_t (cublasLtMatmulTile_t) */
    uint32_t stages;              /* CONFIG_STAGES_ID, uint32_t (cublasLtMatmulStages_t) */
    int32_t splitk;               /* CONFIG_SPLITK_NUM, int32_t; <= 1: no split */
    uint32_t reduction;           /* CONFIG_REDUCTION_SCHEME, uint32_t
                                     (cublasLtReductionScheme_t) */
    uint32_t swizzle;             /* CONFIG_CTA_SWIZZLING, uint32_t, 0 or 1 */
    uint32_t custom;              /* CONFIG_CUSTOM_OPTION, uint32_t */
    uint16_t inner;               /* CONFIG_INNER_SHAPE_ID, uint16_t (not varied) */
    uint16_t cluster;             /* CONFIG_CLUSTER_SHAPE_ID, uint16_t (cublasLtClusterShape_t) */
} l8i_algo_cfg;

#define L8I_CAP_IDS 128               /* tile or stage ids kept per algorithm */

/* What an algorithm id allows: the CUBLASLT_ALGO_CAP_* values. */
typedef struct l8i_algo_caps {
    uint32_t tiles[L8I_CAP_IDS];  /* CAP_TILE_IDS, uint32_t[] */
    int n_tiles;
    uint32_t stages[L8I_CAP_IDS]; /* CAP_STAGES_IDS, uint32_t[] */
    int n_stages;
    int32_t splitk;               /* CAP_SPLITK_SUPPORT, int32_t, 0 = no */
    uint32_t reduction_mask;      /* CAP_REDUCTION_SCHEME_MASK, uint32_t */
    uint32_t swizzle;             /* CAP_CTA_SWIZZLING_SUPPORT, uint32_t, 0 or 1 */
    int32_t custom_max;           /* CAP_CUSTOM_OPTION_MAX, int32_t (options 0..max) */
} l8i_algo_caps;

/* What the GEMM asks of every candidate. */
typedef struct l8i_tune_rules {
    int64_t k;                    /* K: split-K variants only from L8I_TUNE_SPLITK_MIN_K */
    int precise;                  /* no split-K reduction in a 16-bit D's type: with
                                     splitk > 1 only REDUCTION_SCHEME_COMPUTE_TYPE */
} l8i_tune_rules;

/* A generated configuration and the base it varies (an index into bases). */
typedef struct l8i_tune_variant {
    l8i_algo_cfg cfg;
    int base;
} l8i_tune_variant;

#define L8I_TUNE_MAX_EXTRA 64         /* generated candidates timed per plan, at most */
#define L8I_TUNE_OTHER_IDS 8          /* of which other algorithm ids' own picks, at most */
#define L8I_TUNE_BASES 4              /* heuristic results whose knobs are varied */
#define L8I_TUNE_MAX_RAW 256          /* variants enumerated before cublasLtMatmulAlgoCheck */
#define L8I_TUNE_SPLITK_MIN_K 8192

/* 1 when every field of a and b is equal. */
int l8i_algo_cfg_equal(const l8i_algo_cfg *a, const l8i_algo_cfg *b);
/* 1 when c obeys r (the reduction rule); 0 otherwise. */
int l8i_tune_allowed(const l8i_algo_cfg *c, const l8i_tune_rules *r);
/* Enumerate variants of bases[0..nb) (caps[i] the capabilities of
 * bases[i]'s algorithm id) into out[0..max), best bets first: every knob
 * class of bases[0], then each class over bases[1..nb). The classes, in
 * order: cluster shape; CTA swizzling; tile (nearest ids first); stages
 * (nearest first); cluster shape with swizzling toggled; custom option;
 * split-K (off for a split base; 2 for K >= L8I_TUNE_SPLITK_MIN_K). A
 * variant equal to one in known[0..n_known), to an earlier one or to its
 * base, or not l8i_tune_allowed, is left out. Returns the count written. */
int l8i_tune_enumerate(const l8i_algo_cfg *bases, const l8i_algo_caps *caps, int nb,
                       const l8i_algo_cfg *known, int n_known, const l8i_tune_rules *r,
                       l8i_tune_variant *out, int max);
/* "algo 66 tile 24 stages 18 cluster 2x1 swizzle 1 splitk 1 custom 0" (with
 * the reduction scheme after splitk when it is > 1) into buf[0..size). */
void l8i_algo_cfg_format(const l8i_algo_cfg *c, char *buf, size_t size);

#endif /* L8_OPS_GEMM_INTERNAL_H */
