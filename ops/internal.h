/* internal.h - ops internals shared across files (not installed).
 * Grouped by the file that defines them.
 */
#ifndef L8_OPS_INTERNAL_H
#define L8_OPS_INTERNAL_H

#include <stdint.h>
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/internal.h"   /* l8i_need_tensor */
#include "ops/cast.h"          /* l8_fp8_scale_update_config */

/* ---- gemm_host.c: the host backend's GEMM ----
 *
 * One validated l8_gemm call in row-major terms (gemm.c's analyze() has
 * checked shapes, dtypes and strides; pointers are host memory):
 *
 *   t[m,n] = ab * sum_k op(A)[m,k] op(B)[k,n]  (+ beta * D[m,n])  (+ bias[n])
 *   D[m,n] = round(t * sd) to dt_d            amax = max |t| (bit rule of fp8.h)
 *   EPI_DBIAS_A: bias[m] = sum_k op(A)[m,k];  EPI_DBIAS_B: bias[n] = sum_k op(B)[k,n]
 *
 * op(A) is A (M,K) with leading dimension lda, or A^T when ta (A stored
 * (K,M)); op(B) is B (K,N), or B^T when tb (B stored (N,K)). FP8, bf16 and
 * f16 operands are decoded exactly to f32. beta == 0 never reads D. */
typedef struct l8i_hgemm {
    int64_t m, n, k, lda, ldb, ldd;
    l8_dtype dt_a, dt_b, dt_d, dt_bias;
    int ta, tb;
    int epi;                      /* l8_gemm_epilogue */
    float ab;                     /* alpha * s_A * s_B */
    float beta;
    float sd;                     /* scale of an FP8 D, else 1 */
    const void *a, *b;
    void *d, *bias;
    void *aux;                    /* L8_GEMM_EPI_BIAS_GELU_AUX: (m, n), row stride ld_aux,
                                     dt_bias */
    int64_t ld_aux;
    float *amax;                  /* written when not NULL */
    /* Optional cache of the packing memory between calls (the GEMM handle's,
     * used under its mutex): *scratch (64-byte aligned, *scratch_bytes long)
     * is reused when large enough and replaced when not; blocks above 64 MiB
     * are not kept. NULL: allocate and free per call. */
    void **scratch;
    size_t *scratch_bytes;
} l8i_hgemm;

/* Run g on the host (blocking; may use worker threads, see gemm_host.c).
 * Errors: L8_ERR_OOM (host memory for the packed operands). */
l8_status l8i_host_gemm(const l8i_hgemm *g);

/* scale_inv = 1 / scale in the meta m of an FP8 tensor a GEMM quantized
 * (which writes none): one tiny launch on s (ptx/elementwise.ptx.in,
 * l8_meta_scale_inv); on the host at once. */
l8_status l8i_meta_scale_inv(l8_ctx *ctx, l8_fp8_meta *m, l8_stream *s);

/* l8_gelu's host arithmetic on one f32 value (ops/elementwise.c). */
float l8i_gelu_f32(float x);

/* Worker threads the host GEMM may use for a call of `flops` (2 M N K):
 * 1 below the threshold, else min(online CPUs, 8), or L8_HOST_THREADS. */
int l8i_host_threads(double flops);

/* ---- cast.c: a weight cast group with the biases' bf16 copies ----
 *
 * l8_fp8_cast_transpose_many that also converts bias_in[i] (f32, rows of
 * in[i] elements) into bias_out[i] (bf16) - both NULL for none - when all of
 * it fits one launch of the small-tile group kernel (CUDA, n <= 16 tensors of
 * one input dtype, each of up to 64 tiles, every bias pair contiguous, of
 * the context and the right dtypes and sizes): then *folded = 1. Otherwise
 * the casts alone are enqueued and *folded = 0: convert the biases yourself
 * (l8_convert_many). The copies are l8_convert's bit for bit. Errors: those
 * of l8_fp8_cast_transpose_many. */
l8_status l8i_fp8_cast_transpose_many_bias(int n, const l8_tensor *const *in,
                                           l8_tensor *const *out, l8_tensor *const *out_t,
                                           const l8_tensor *const *bias_in,
                                           l8_tensor *const *bias_out, unsigned flags,
                                           l8_stream *s, int *folded);

/* ---- cast.c: a dGELU cast done inside another kernel (ops/gemm.c) ----
 *
 * The checks of l8_fp8_cast_transpose_dact(L8_ACT_GELU, dy, a, out, out_t,
 * NULL, L8_CAST_ACCUMULATE_AMAX) under the name op, with out and out_t both
 * required and a of dy's dtype; nothing is enqueued. Fills what a kernel
 * that writes those outputs itself needs: their addresses and row strides
 * (elements: out C or more, out_t R or more where row-padded), the meta's
 * scalars, the format, a's address. Errors: those of the cast. */
typedef struct l8i_dact_out {
    void *out, *out_t;
    int64_t ldo, ldt;
    const float *scale;
    float *amax, *scale_inv;
    l8_dtype fmt;
    const void *a;
} l8i_dact_out;
l8_status l8i_cast_dact_prepare(const char *op, const l8_tensor *dy, const l8_tensor *a,
                                l8_tensor *out, l8_tensor *out_t, l8i_dact_out *o);

/* ---- cast.c: the delayed-scaling update with the recipe's meta table ----
 *
 * l8_fp8_scale_update, and in the same launch (CUDA backend only) the
 * recipe's gather and scatter over `table`, a device array of the n roles'
 * l8_fp8_meta block addresses (ops/recipe.c):
 *   L8I_SU_GATHER   first amax[i] = max(amax[i], meta_i.amax), meta_i.amax = 0
 *   L8I_SU_SCATTER  last meta_i.scale = scale[i]
 * meta_flags 0 is l8_fp8_scale_update itself. Errors: its own, and
 * L8_ERR_INTERNAL for meta flags without a table or on the host backend. */
#define L8I_SU_GATHER 0x1u
#define L8I_SU_SCATTER 0x2u
l8_status l8i_fp8_scale_update_metas(l8_tensor *amax_history, l8_tensor *amax, l8_tensor *scale,
                                     l8_tensor *scale_inv, const l8_tensor *fp8_max,
                                     const l8_fp8_scale_update_config *cfg, const void *table,
                                     unsigned meta_flags, l8_stream *s);

/* ---- gather.c: the step cursor of the moves (and of l8_softmax_xent_at) ---- */

/* cursor: a tensor of ctx holding one L8_I32 (a step cursor, l8_optim_cursor),
 * and stride in [lo, 2^31); op names the call in the message.
 * Errors: L8_ERR_INVALID_ARG. */
l8_status l8i_need_cursor(const char *op, const l8_tensor *cursor, l8_ctx *ctx, int64_t stride,
                          int64_t lo);

/* ---- launch.c: launch geometry and argument checks ---- */

/* f32, bf16 or f16: the "high precision" dtypes the casts and kernels take. */
static inline int l8i_is_hp(l8_dtype dt) { return dt == L8_F32 || dt == L8_BF16 || dt == L8_F16; }

/* An output t of ctx (NULL: any), 2-D [d0, d1] (dims: what those are, for
 * the message), and contiguous or row-padded - strides [ld, 1], ld > d1, ld
 * % 16 == 0 (so ld >= d1 rounded up to 16), data 16-B aligned: the
 * GEMM-ready layout of cast.h's common rules. *ld = its row stride. The
 * dtype is the caller's to check. (cast.c) */
l8_status l8i_need_padded(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx,
                          int64_t d0, int64_t d1, const char *dims, int64_t *ld);

/* A group op's check of item i failed with st: the same status, the last
 * error's message prefixed with "<what> <i>: ". */
l8_status l8i_fail_item(l8_status st, const char *what, int i);

/* cast_transpose(_dbias) of tensors up to this many 128 x 128 tiles runs the
 * small-tile kernel (ops/cast.c, SM_MAX_TILES); tests set 0 to run the tile
 * kernel on every shape, then put the default back. */
extern int l8i_cast_sm_max_tiles;
/* Of those, tensors of more rows than this take the small-tile kernel's half
 * entries (4 rows a thread) where they apply (no dbias, or one tile row of
 * it); tests set INT_MAX (never) or 0 (always), then put the default back. */
extern int l8i_cast_sm_half_min_rows;
/* Of those without dbias, tensors whose grid of 32-row CTAs is at most this
 * many CTAs (negative, the default: the device's multiprocessors) take the
 * eighth entries (2 rows a thread), the others the quarter ones (4); tests
 * set 0 (never) or INT_MAX (always), then put the default back. */
extern int l8i_cast_sm_eighth_max_ctas;
/* Nonzero (the default): a cast_transpose of a shape the tile kernel takes
 * slowly runs as the plain cast (with dbias: the tile kernel without its
 * transposed output) and the byte transpose of its output (ops/cast.c,
 * split_wins); tests set 0 to run the tile kernel alone on those shapes
 * too, then put the default back. */
extern int l8i_cast_split;
/* 1 (the default): a cast_transpose of a 2-byte or f32 input (with dbias or
 * not) whose dense out_t has rows % 16 != 0 runs the
 * strip kernel (ptx/cast_transpose_strip.ptx.in) where its segments are
 * long enough to pay (ops/cast.c strip_grid); 2: wherever it can run; 0:
 * never. Tests set 0 or 2, then put the default back. */
extern int l8i_cast_strip;
/* 1 (the default): the strip kernel's dbias entries run a strip's segments
 * (up to 8) as a cluster that sums the column partials itself (the _cl
 * entries, no l8_dbias_reduce launch) where the context launches clusters
 * and the grid's clusters fit, and columns % 8 == 0 where there are several
 * segments (ops/cast.c cast_transpose_strip says which); 2: any columns;
 * 0: partials and l8_dbias_reduce always. Tests set 2 and 0, then put 1
 * back. */
extern int l8i_cast_strip_cl;
/* The strip kernel's dbias entries' dynamic shared memory for an input of
 * esz bytes an element: the rings, the step's input rows and the chains'
 * sums (the .ptx's layout). */
#define STRIP_DB_SMEM(esz) (35456u + 128u * 128u * (esz) + 16u * 128u * 4u)
/* The byte transpose runs on at most this many CTAs when > 0 (0, the
 * default: a CTA per tile), each CTA then taking more tiles in turn; tests
 * set 1 or a few to run every shape through the kernel's tile pipeline
 * (PIPELINE in ptx/transpose.ptx.in), then put 0 back. */
extern int l8i_transpose_max_ctas;
/* Grid for `work` CTAs' worth of work: min(work, SMs x occ), at least 1
 * (occ = resident CTAs per SM from ptxas -v; the SM count is runtime's
 * l8i_sm_count). Grid sizes never change results. */
l8_status l8i_grid_for(l8_ctx *ctx, uint64_t work, unsigned occ, unsigned *grid);

#endif
