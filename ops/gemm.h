/* gemm.h - matrix multiplication: FP8 (tensor-scaled), bf16, f16 and f32
 * GEMMs through cuBLASLt, with a plan cache, optional autotuning, and a C
 * reference on the host backend.
 *
 * Everything is row-major, as lean8 tensors are. One call computes
 *
 *     D[M,N] = scale_D * ( alpha * s_A * s_B * op(A)[M,K] . op(B)[K,N]
 *                          + beta * D[M,N] + bias[N] )
 *
 * rounded once to D's dtype, where
 *     op(A) = A  (trans_a = 0, A stored (M,K))  or  A^T (trans_a = 1, A stored (K,M))
 *     op(B) = B  (trans_b = 0, B stored (K,N))  or  B^T (trans_b = 1, B stored (N,K))
 *     s_A, s_B  the FP8 operands' scale_inv (their l8_fp8_meta; 1 without
 *               meta, and 1 for non-FP8 operands): they dequantize
 *     scale_D   D's FP8 meta scale when D is FP8 (1 without meta): it quantizes
 *     bias      only with L8_GEMM_EPI_BIAS (bias[n] added to every row)
 * beta == 0 overwrites D (D's old contents are never read, NaNs included);
 * beta != 0 accumulates in place (C is D: same pointer, same layout). There is
 * no separate C matrix.
 *
 * The Linear GEMMs in this form (tokens T, in K, out N):
 *     fprop  Y[T,N]  = X[T,K] . W[N,K]^T      a = X,  b = W,  trans_b = 1, bias
 *     dgrad  dX[T,K] = dY[T,N] . (W^T)[K,N]^T  a = dY, b = W^T (the [K,N] copy), trans_b = 1
 *     wgrad  dW[N,K] = (dY^T)[N,T] . (X^T)[K,T]^T   a = dY^T, b = X^T, trans_b = 1,
 *            D = main_grad (f32), beta = 0 on the first micro-batch, 1 after
 *
 * FP8 on Hopper (cuBLASLt's rules, checked here so the caller gets a reason):
 *   - only trans_a = 0, trans_b = 1: both operands contiguous along K (the
 *     "TN" layout in cuBLASLt's column-major terms). Transposed FP8 copies
 *     come from the cast+transpose kernels;
 *   - input pairs E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 (no E5M2 x E5M2);
 *   - D: bf16, f16, f32, E4M3, or E5M2 when an input is E5M2. An FP8 D takes
 *     scale_D from its meta and writes amax(D before scale_D) into its meta's
 *     amax (overwritten, not max-accumulated; NaN if the result has a NaN);
 *     an FP8 D needs beta == 0;
 *   - K % 16 == 0; every leading dimension (row stride) times the element
 *     size a multiple of 16 bytes; N times the size of cuBLASLt's C type
 *     (bf16 for an FP8 D, else D's type) a multiple of 16 bytes; A, B and D
 *     16-byte aligned;
 *   - bias is bf16 (f16 when D is f16); the bias-gradient epilogues are not
 *     offered for FP8 (TransformerEngine takes dbias from the dY cast);
 *   - fast_accum = 1 skips the periodic promotion of partial sums to full
 *     f32 (faster, less accurate: fprop only, as TE does);
 *   - cuBLASLt runs FP8 kernels only with 16-byte aligned scale and amax
 *     pointers (NOT_SUPPORTED otherwise, seen with cuBLASLt 13.1 on H200);
 *     a meta scalar that is not 16-byte aligned is staged through a
 *     per-stream slot: one 4-byte device copy in before the GEMM (and one
 *     out after it for amax), stream-ordered. Aligned scalars cost nothing.
 * Non-FP8: bf16 x bf16 -> bf16 or f32, f16 x f16 -> f16 or f32, f32 x f32 ->
 * f32 (full f32, no TF32), any transposes, any element-aligned pointers;
 * bias has D's dtype.
 *
 * Operands are 2-D tensors whose last dimension is contiguous (stride 1);
 * the row stride is the leading dimension (>= the row length). All tensors,
 * the stream and the handle belong to one context. D must not overlap A, B
 * or bias.
 *
 * Plans: the first call for a combination of shapes, leading dimensions,
 * dtypes, transposes, epilogue, fast_accum, beta != 0, which FP8 scales are
 * present and the pointers' alignments builds cuBLASLt descriptors and picks
 * an algorithm (the heuristic's first, or the fastest of several when
 * autotuning); later calls with the same combination find the plan in a hash
 * table and only update pointer attributes before cublasLtMatmul. Autotuning
 * times the candidates on the call's stream with scratch outputs (D, amax and
 * dbias are never touched by the trials) and blocks the host until done,
 * once per plan: do not autotune inside CUDA graph capture. Mode 1 times the
 * heuristic's results (autotune_candidates of them); mode 2 adds up to 64
 * configurations the heuristic did not rank first or did not return: its top
 * results with the cluster shape, CTA swizzling, tile, stages, custom option
 * or split-K changed within what each algorithm allows, and other algorithm
 * ids, each kept only if cuBLASLt accepts it for the plan within the
 * workspace (and, with precise_reduction, splits K only with f32 partial
 * sums). Mode 2 tunes a plan in seconds for large shapes (every candidate
 * runs 3 x autotune_iters times); l8_gemm_describe says what was chosen.
 *
 * Small FP8 GEMMs (l8_gemm_config.small, by default L8_GEMM_SMALL read when
 * the handle is created): a call that fits runs lean8's own kernel
 * (ptx/gemm_small.ptx.in) instead of cuBLASLt. Fits: FP8 A and B (trans_a =
 * 0, trans_b = 1), a bf16 or f32 D, no epilogue, beta any, N % 8 == 0,
 * M * N * K <= 2^27 (and the FP8 rules above). By default (auto) it takes
 * those whose grid of 32 x 32 tiles of D is at most half the device's SMs
 * and whose K is at most 512, where it was faster than cuBLASLt's FP8
 * kernels; 1 ("1") takes every call that fits; 0 ("0") none. A small
 * outside -1..2, or with -1 an L8_GEMM_SMALL other than 0, 1 or auto, makes
 * l8_gemm_handle_create fail with L8_ERR_INVALID_ARG (on every backend; a
 * small of 0..2 does not read the variable). The kernel sums each
 * output in f32 (an mma's 32 products, then its K chunks and its four warps
 * in a fixed order: the same bits from run to run), applies alpha * s_A *
 * s_B and beta in f32 and rounds once to D; it ignores fast_accum and
 * sm_count and makes no plan (l8_gemm_stats.small_calls counts its calls).
 * `lean8-bench gemmsmall` times it against cuBLASLt at lean8-train's shapes.
 * It also takes bf16 GEMMs with a short K: bf16 A, B and D, any
 * transposes, K <= 32, N % 4 == 0, D's row stride a multiple of 4 elements
 * and D 8-byte aligned, beta any, no epilogue - a Linear's dgrad below a
 * narrow output, as lean8-train's head (K = 16: its 10 classes padded);
 * auto those with M * N * K <= 2^27, 1 all. It sums each output in one f32
 * chain over k in order (a fused multiply-add a step, from 0: the host
 * reference's FMA arithmetic), then alpha and beta in f32, one rounding to
 * bf16. At lean8-train's heads it takes half cuBLASLt's time, and with
 * L8_GEMM_EPI_DGELU_CAST the cast runs in the same launch (docs/perf.md,
 * 2026-12-06 thirty-sixth session). Which kernel runs depends on the
 * shapes, dtypes and layouts alone, not on the epilogue: a dgrad gives the
 * same D with and without the fused cast.
 *
 * Host backend: the same API runs the C reference (ops/gemm_host.c): FP8
 * operands are decoded exactly to f32, products are accumulated in f32 in k
 * order (0 .. K-1, one chain per output: a fused multiply-add per step on
 * x86-64 CPUs with AVX2 and FMA, else a multiply and an add; L8_HOST_SIMD=0
 * forces the latter), then t = alpha*s_A*s_B*acc + beta*D + bias in f32
 * (amax of t for an FP8 D), and D = round(t * scale_D) to D's dtype (RNE;
 * FP8 saturating, as cvt.rn.satfinite); with the GELU epilogue aux =
 * round(t) and t = gelu(t) (l8_gelu's host arithmetic in f32) before the
 * amax and D. cuBLASLt's GELU is the same tanh form with its own exp, so a
 * GPU D may differ from the host's in the last bit (an FP8 D: one FP8 step
 * where a value lies near a rounding boundary). Bias gradients are summed in f32 in
 * k order and rounded to the bias dtype. The operands are packed and the
 * work is cache-blocked and split by output tiles over up to 8 threads
 * (L8_HOST_THREADS; calls below 8 MFLOP use one), never along k, so results
 * do not depend on the thread count. The call blocks until D is written. It
 * is what the GPU tests compare against.
 */
#ifndef L8_OPS_GEMM_H
#define L8_OPS_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A GEMM handle: per context, owns the cublasLtHandle_t, a workspace per
 * stream it has run on (allocated from the context's caching allocator on
 * first use of that stream), and the plan cache. Calls on one handle are
 * serialized by a mutex, so a handle may be shared between threads; GEMMs on
 * different streams of one handle do not share a workspace. */
typedef struct l8_gemm_handle l8_gemm_handle;

typedef struct l8_gemm_config {
    size_t size;                  /* sizeof(l8_gemm_config) */
    size_t workspace_bytes;       /* per stream; 0: 32 MiB (cuBLAS's advice for Hopper) */
    int autotune;                 /* -1: from L8_GEMM_AUTOTUNE ("1", "2"; default off), 0 off,
                                     1 time the heuristic's candidates, 2 those and the
                                     configuration search (where cuBLASLt lacks the algorithm-
                                     configuration API, 2 tunes as 1) */
    int autotune_candidates;      /* heuristic results to time; 0: 16 (at most 32) */
    int autotune_iters;           /* timed runs per candidate and round (3 rounds, after one
                                     warm-up); 0: 10 */
    size_t max_plans;             /* cache size; when full it is emptied; 0: 4096 */
    int precise_reduction;        /* 0 (default): cuBLASLt may keep split-K partial sums in
                                     D's type (bf16/f16), as PyTorch and TransformerEngine
                                     allow: a few output ulps, sometimes faster; 1: partial
                                     sums stay f32 (or no split) */
    const char *plan_cache;       /* persistent plan cache file (see below); NULL: the
                                     environment's L8_GEMM_CACHE, if set; "": none. Copied. */
    int small;                    /* which calls lean8's small kernel takes (FP8 and
                                     short-K bf16; above):
                                     -1: from L8_GEMM_SMALL ("0", "1" or "auto"; unset:
                                     auto), 0 none, 1 every call that fits, 2 auto */
} l8_gemm_config;
#define L8_GEMM_CONFIG_INIT { sizeof(l8_gemm_config), 0, -1, 0, 0, 0, 0, NULL, -1 }
/* Fill *cfg with the defaults of L8_GEMM_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_gemm_config_init(l8_gemm_config *cfg);

/* The persistent plan cache (CUDA handles; ignored on the host backend).
 * With a cache file, every plan the autotuner tunes is recorded there
 * (algorithm and how it was chosen), keyed by the device name, its SM count,
 * the cuBLASLt version, and the plan's key (shapes, leading dimensions,
 * dtypes, transposes, epilogue, fast_accum, beta != 0, the scales present,
 * pointer alignments) with the workspace size and precise_reduction. A new
 * plan found in the cache takes the recorded algorithm without running the
 * heuristic or tuning, whatever autotune says - once its algorithm passes
 * cublasLtMatmulAlgoCheck for this plan and workspace (else the plan is
 * built as without a cache). So tuning once makes tuned algorithms the
 * default for every later handle and process with the same file, and a
 * resumed run uses the algorithms of the run it resumes. The file is read
 * when the handle is created and rewritten (atomically: temporary file,
 * fsync, rename; a CRC-32C over every byte) after each tuned plan; entries
 * other processes saved meanwhile are kept. A file that is unreadable,
 * truncated, corrupt, not a plan cache, or from another device or cuBLASLt
 * version is ignored with a one-line warning on stderr and replaced on the
 * next save; a failed save is a warning too. Neither fails a call.
 * L8_GEMM_DEBUG=1 logs cache and search decisions, and each untuned plan's
 * cuBLASLt configuration, on stderr. */

/* Create a handle for ctx (which must outlive it). cfg may be NULL. On a
 * CUDA context this opens cuBLASLt and creates its handle; the workspaces
 * come later, per stream. On a host context the handle runs the reference.
 * Errors: L8_ERR_INVALID_ARG (autotune outside -1..2, autotune_candidates
 * outside 0..32, autotune_iters < 0, workspace_bytes below 16 KiB, a size
 * field too small, small outside -1..2, or -1 with L8_GEMM_SMALL not 0, 1 or
 * auto), L8_ERR_NO_DEVICE (cuBLASLt missing or older than 12.0),
 * L8_ERR_CUBLAS, L8_ERR_CUDA, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_gemm_handle_create(l8_ctx *ctx, const l8_gemm_config *cfg,
                                             l8_gemm_handle **out);

/* Free the plans, the workspaces (stream-ordered: GEMMs already enqueued
 * finish first) and the cuBLASLt handle. NULL: no-op. */
void l8_gemm_handle_destroy(l8_gemm_handle *h);

/* Epilogues. Append-only. */
typedef enum l8_gemm_epilogue {
    L8_GEMM_EPI_NONE = 0,
    L8_GEMM_EPI_BIAS = 1,         /* D += bias[n] on every row; bias (N,) read */
    L8_GEMM_EPI_DBIAS_A = 2,      /* bias[m] = sum_k op(A)[m,k]: (M,) written (=), not
                                     scaled by alpha (alpha must be 1). The wgrad dbias:
                                     a = dY^T. cuBLASLt BGRADB. Not for FP8. */
    L8_GEMM_EPI_DBIAS_B = 3,      /* bias[n] = sum_k op(B)[k,n]: (N,) written (=); alpha
                                     must be 1. cuBLASLt BGRADA. Not for FP8. */
    L8_GEMM_EPI_BIAS_GELU_AUX = 4,/* u = t + bias[n] (t: the product, scaled, as above);
                                     aux = u rounded to aux's dtype (the GELU's input, for
                                     the backward); D = gelu(u) (l8_gelu's tanh GELU, on
                                     the f32 u, not on aux) - an FP8 D quantized with
                                     scale_D, its amax that of gelu(u). bias and desc->aux
                                     required; beta must be 0. cuBLASLt GELU_AUX_BIAS. */
    L8_GEMM_EPI_DGELU_CAST = 5    /* The FP8 output gradient of the layer below, through its
                                     GELU: D as with NONE (any beta), then
                                     l8_fp8_cast_transpose_dact(L8_ACT_GELU, D, aux, cast,
                                     cast_t, NULL, L8_CAST_ACCUMULATE_AMAX) on s - g =
                                     D * gelu'(aux) rounded to D's dtype, cast to cast's
                                     format with its meta's scale into cast (M,N) and
                                     cast_t (N,M), the amax of g max-accumulated, scale_inv
                                     written - bit for bit those two calls with this
                                     handle. desc->aux (the GELU's input, read), cast and
                                     cast_t required, with that cast's rules: D
                                     contiguous, of a high-precision dtype; aux of D's
                                     dtype and numel, contiguous; cast and cast_t sharing
                                     one meta (cast_t may be row-padded); errors name D
                                     "in", cast "out", cast_t "out_t". Where the small
                                     kernel takes the GEMM (l8_gemm_config.small: FP8
                                     inputs, or short-K bf16 ones; D bf16,
                                     M % 8 == 0, cast and cast_t dense, 8-byte aligned)
                                     it does all of it in one launch
                                     (l8_gemm_stats.small_fused); elsewhere (cuBLASLt,
                                     the host) the two calls run. Not for an FP8 D. For a
                                     Linear's dgrad feeding the FP8 layer below it
                                     (l8_linear_backward_fp8_dx, l8_linear_backward_dx,
                                     lean8-train). */
} l8_gemm_epilogue;

typedef struct l8_gemm_desc {
    size_t size;                  /* sizeof(l8_gemm_desc) */
    const l8_tensor *a;           /* 2-D: (M,K), or (K,M) with trans_a */
    const l8_tensor *b;           /* 2-D: (K,N), or (N,K) with trans_b */
    l8_tensor *d;                 /* 2-D (M,N): written (beta == 0) or accumulated */
    l8_tensor *bias;              /* 1-D, contiguous; NULL unless the epilogue uses it */
    int trans_a;                  /* 0 (default) or 1 */
    int trans_b;                  /* 1 (default: D = A.B^T, the FP8 layout) or 0 */
    float alpha;                  /* 1 */
    float beta;                   /* 0: D = ..., anything else: D = ... + beta*D */
    l8_gemm_epilogue epilogue;    /* L8_GEMM_EPI_NONE */
    int fast_accum;               /* FP8 only (ignored otherwise): 1 = fast accumulation */
    int sm_count;                 /* 0: the plan for the whole GPU. N > 0: for a GEMM that
                                     shares the GPU with another stream's work, the plan
                                     cuBLASLt chooses for N SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_
                                     TARGET: fewer, longer-running CTAs that leave the other
                                     SMs to the other stream). Its own plan (key and plan
                                     cache), possibly another algorithm: the results may
                                     differ from 0's in the last bits, as between any two
                                     algorithms. N >= the device's SM count means 0; ignored
                                     on a host context. Appended: a desc of an older caller,
                                     whose size ends before it, runs with 0. */
    l8_tensor *aux;               /* L8_GEMM_EPI_BIAS_GELU_AUX (NULL with other epilogues
                                     but DGELU_CAST): 2-D (M,N), last dim contiguous,
                                     bias's dtype, D's row stride (a multiple of 8
                                     elements), 16-byte aligned; not overlapping A, B, D or
                                     bias. Written. L8_GEMM_EPI_DGELU_CAST: the GELU's
                                     input, read (see there). Appended. */
    int skip_amax;                /* FP8 D only (0 otherwise): 1 = compute no amax, D's meta
                                     amax left alone. cuBLASLt zeroes the amax before an
                                     FP8 GEMM that writes one (a memset of its own: in a
                                     CUDA graph an extra node, which delayed a small GEMM by
                                     ~8 us on an H200); a caller that takes the amax from
                                     elsewhere skips both. Appended. */
    l8_tensor *cast;              /* L8_GEMM_EPI_DGELU_CAST only (NULL otherwise): (M,N)
                                     FP8 with a meta. Written. Appended. */
    l8_tensor *cast_t;            /* the same: (N,M), cast's dtype and meta. Written. Neither
                                     may overlap A, B, D, aux or the other. Appended. */
} l8_gemm_desc;
#define L8_GEMM_DESC_INIT                                                                   \
    { sizeof(l8_gemm_desc), NULL, NULL, NULL, NULL, 0, 1, 1.0f, 0.0f, L8_GEMM_EPI_NONE, 0, 0, \
      NULL, 0, NULL, NULL }

/* Run one GEMM as described above, enqueued on s (NULL: the context's
 * compute stream); returns without waiting, except that the first call of a
 * new plan blocks while autotuning. Tensor data is resolved when the call is
 * made; storages (and FP8 metas) used on a stream other than their own are
 * recorded on it.
 * D (and a dbias output, aux, and an FP8 D's amax) are written when the
 * stream reaches the GEMM; the scales are read then too. With
 * L8_GEMM_EPI_DGELU_CAST, its cast may be a second launch after the GEMM's
 * on s; nothing is enqueued when the arguments fail, but a CUDA error of
 * that second launch is returned after the GEMM was enqueued.
 * Errors (nothing is enqueued):
 *   L8_ERR_INVALID_ARG  NULL handle/desc/tensor, wrong size field, ndim != 2,
 *                       inner stride != 1, shapes that do not chain, an empty
 *                       dimension, A and B of different non-FP8 dtypes, a bias
 *                       of the wrong length/dtype/layout or with an epilogue
 *                       that does not use one, an aux missing, of the wrong
 *                       shape/dtype/layout, overlapping, or with another
 *                       epilogue, skip_amax other than 0 or 1 or with a
 *                       non-FP8 D, beta != 0 with the GELU epilogue,
 *                       cast / cast_t given with another epilogue or, with
 *                       DGELU_CAST, missing, off the cast's rules or
 *                       overlapping, D overlapping an input, a
 *                       tensor or stream of another context, non-finite
 *                       alpha/beta, an unknown epilogue;
 *   L8_ERR_UNSUPPORTED  E5M2 x E5M2, FP8 mixed with a non-FP8 operand, a D
 *                       dtype the inputs cannot produce, FP8 transposes other
 *                       than (0, 1), FP8 sizes/strides/pointers off the 16-byte
 *                       rules, FP8 D with beta != 0, dbias with FP8 or alpha
 *                       != 1, dimensions above INT32_MAX, or no cuBLASLt
 *                       algorithm for the combination;
 *   L8_ERR_STATE        a storage not on the device (offloaded);
 *   L8_ERR_CUBLAS, L8_ERR_CUDA, L8_ERR_OOM (plan creation, workspace, autotune). */
L8_NODISCARD l8_status l8_gemm(l8_gemm_handle *h, const l8_gemm_desc *desc, l8_stream *s);

/* Counters since the handle was created. */
typedef struct l8_gemm_stats {
    size_t size;                  /* sizeof(l8_gemm_stats), set by the caller */
    uint64_t calls;               /* l8_gemm calls that enqueued (or ran) a GEMM */
    uint64_t plan_hits;           /* calls that found their plan in the cache */
    uint64_t plans_created;       /* cache misses that built a plan */
    uint64_t plans_cached;        /* plans in the cache now */
    uint64_t cache_flushes;       /* times the full cache was emptied */
    uint64_t autotuned;           /* plans whose algorithm was chosen by timing */
    uint64_t autotune_trials;     /* candidate algorithms timed, over all plans */
    uint64_t autotune_changed;    /* autotuned plans whose winner was not the heuristic's first */
    uint64_t search_candidates;   /* of autotune_trials: configurations the search (mode 2)
                                     generated */
    uint64_t search_wins;         /* of autotune_changed: plans whose winner the search
                                     generated */
    uint64_t plan_cache_loaded;   /* entries read from the plan cache file at create */
    uint64_t plan_cache_hits;     /* plans built from a plan cache entry (not tuned) */
    uint64_t plan_cache_rejected; /* cache entries cublasLtMatmulAlgoCheck refused */
    uint64_t plan_cache_saves;    /* times the plan cache file was written */
    uint64_t small_calls;         /* of calls: run by lean8's small GEMM kernel (FP8,
                                     or bf16 with K <= 32; l8_gemm_config.small), no
                                     cuBLASLt plan */
    uint64_t small_fused;         /* of small_calls: with L8_GEMM_EPI_DGELU_CAST's cast in
                                     the same launch. Appended. */
} l8_gemm_stats;

/* The stats rule of docs/api.md. Errors: L8_ERR_INVALID_ARG (NULL, a size covering
 * no field). */
L8_NODISCARD l8_status l8_gemm_get_stats(l8_gemm_handle *h, l8_gemm_stats *out);

/* The handle's autotune mode for new plans: 0 off, 1, or 2 (see
 * l8_gemm_config; 1 where 2 was asked for but cuBLASLt cannot search). NULL: 0. */
int l8_gemm_autotune_enabled(const l8_gemm_handle *h);

/* Describe the algorithm of the handle's cached plan for desc, and how it
 * was chosen, as one line of text in buf (host memory, size bytes; always
 * NUL-terminated, truncated to fit), e.g.
 *   "algo 66 tile 24 stages 35 cluster 2x1 swizzle 1 splitk 1 custom 0;
 *    search: variant of heuristic #0, fastest of 57 timed"
 * The numbers are cuBLASLt's CUBLASLT_ALGO_CONFIG_* values (tile and stages
 * are cublasLtMatmulTile_t and cublasLtMatmulStages_t ids; "reduction N"
 * follows a split K). After ";": "heuristic #0, not timed" (autotune off or
 * one candidate), "heuristic #R, fastest of N timed", or "search: variant of
 * heuristic #R / another algorithm id, fastest of N timed", followed by
 * " (plan cache)" when the algorithm came from the plan cache and " (for N
 * SMs)" for a desc's sm_count N. On a host
 * context: "host reference". desc is checked as l8_gemm checks it and its
 * plan looked up by the same key (shapes, strides, dtypes, flags, pointer
 * alignments): pass the desc of a call already made. Builds, enqueues and
 * counts nothing; does not block beyond the handle's mutex.
 * Errors: L8_ERR_INVALID_ARG (NULL h, desc or buf, size 0, and l8_gemm's
 * argument errors), L8_ERR_UNSUPPORTED (as l8_gemm), L8_ERR_STATE (no plan
 * for desc in the cache: never run, or flushed since; or an offloaded
 * storage). buf is "" after an error. */
L8_NODISCARD l8_status l8_gemm_describe(l8_gemm_handle *h, const l8_gemm_desc *desc, char *buf,
                                        size_t size);

#ifdef __cplusplus
}
#endif
#endif /* L8_OPS_GEMM_H */
