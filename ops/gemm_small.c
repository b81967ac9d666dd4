/* gemm_small.c - lean8's own kernel for FP8 GEMMs too small for cuBLASLt's
 * FP8 kernels to pay off, and for bf16 GEMMs with a short K
 * (ptx/gemm_small.ptx.in): which l8_gemm calls it takes
 * (l8_gemm_config.small and L8_GEMM_SMALL, ops/gemm.h), and its launch.
 *
 * A small model's GEMMs (lean8-train's default model: 128 x 256 x 128) take
 * 2-3 us in cuBLASLt, FP8 or bf16 alike, most of it fixed cost. The kernel
 * here stages nothing in shared memory: each warp loads its share of K
 * straight into mma.sync fragments, one 32 x 32 tile a CTA, and the partial
 * tiles meet once in shared memory. It was 3-6% faster than cuBLASLt's FP8
 * GEMMs on grids of 16 and 32 CTAs with K <= 256, and took up to 1.5x
 * cuBLASLt's time on grids of 128 CTAs and more, where every CTA rereads
 * its rows of A and B from L2, and 1.3x with K = 784, two rounds of loads
 * (docs/perf.md, 2026-12-06 thirtieth session): hence the auto policy.
 *
 * Its bf16 entries take bf16 GEMMs with K <= 32 (see takes_bf16) - a
 * Linear's dgrad below a narrow output, as lean8-train's head (K = 16: its
 * 10 classes padded) - where a tensor core kernel has almost nothing to
 * multiply: a CTA stages its 32 rows of op(A) and 32 columns of op(B) in
 * shared memory and each thread sums 4 outputs in f32 chains. With
 * L8_GEMM_EPI_DGELU_CAST they cast the layer below's dY in the same launch,
 * as the FP8 _dgelu entries do.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ops/gemm_internal.h"
#include "ops/internal.h"
#include "runtime/internal.h"

#define SMALL_THREADS 128u
#define SMALL_TILE 32
/* The largest M * N * K taken: the kernel keeps no data in shared memory
 * and reads each operand once per CTA row or column of the grid, which
 * pays only while the operands stay in L2 and one wave covers D. */
#define SMALL_MAX_MNK ((int64_t)1 << 27)
/* auto's largest K: 4 warps x 2 chunks of 64 bytes, one round of loads */
#define SMALL_AUTO_MAX_K 512
/* the bf16 entries' largest K (their shared memory: 32 k-rows of A and B) */
#define SMALL_BF16_MAX_K 32

/* M * N * K <= SMALL_MAX_MNK (K >= 1), without overflowing */
static int within_max_mnk(const problem *p)
{
    return p->m * p->n <= SMALL_MAX_MNK / p->k;
}

l8_status l8i_gemm_small_mode(int cfg, int *mode)
{
    if (cfg < -1 || cfg > 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm_handle_create: small is %d, not -1, 0, 1"
                       " or 2", cfg);
    if (cfg >= 0) {
        *mode = cfg;
        return L8_OK;
    }
    const char *e = getenv("L8_GEMM_SMALL");
    if (!e || !strcmp(e, "auto")) *mode = 2;
    else if (!strcmp(e, "0")) *mode = 0;
    else if (!strcmp(e, "1")) *mode = 1;
    else
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_gemm_handle_create: L8_GEMM_SMALL=%.64s is not 0,"
                       " 1 or auto", e);
    return L8_OK;
}

/* The bf16 entries: bf16 A, B and D, any transposes, K <= SMALL_BF16_MAX_K
 * (A's 32 rows and B's 32 columns of a tile staged in shared memory), N %
 * 4 == 0 and D's rows 8-byte aligned (one 8-byte store of 4 elements). */
static int takes_bf16(int mode, const problem *p)
{
    if (p->dt_a != L8_BF16 || p->dt_b != L8_BF16 || p->dt_d != L8_BF16)
        return 0;
    if (p->k > SMALL_BF16_MAX_K || p->n % 4 || p->ldd % 4 || (uintptr_t)p->d % 8)
        return 0;
    /* auto takes them below the size limit of the FP8 calls (D and the
     * operands stay in L2): at lean8-train's heads (128 x 128 x 16, 256 x
     * 512 x 16) the kernel alone takes half cuBLASLt's time, and with the
     * dGELU cast fused in it made the FP8 step 0.8 and 1.1 us faster on an
     * H200 (0.3 and 0.2 on an H100), once the backward's join no longer
     * came just before it; the bf16 step ran 0.5 us slower on
     * 784-512-512-10 and 0.3 faster on the default model on the H200, 0.5
     * faster on both on the H100 (docs/perf.md, thirty-sixth session). A
     * shape rule, not one that looks at the epilogue: with and without the
     * fused cast the GEMM runs the same kernel and gives the same bits. */
    return mode == 1 || (mode == 2 && within_max_mnk(p));
}

int l8i_gemm_small_takes(int mode, unsigned nsm, const problem *p)
{
    if (!mode || p->epi != L8_GEMM_EPI_NONE || p->m < 1 || p->n < 1 || p->k < 1)
        return 0;
    if ((p->m + SMALL_TILE - 1) / SMALL_TILE > 65535)   /* the grid's y */
        return 0;
    if (!p->fp8)
        return takes_bf16(mode, p);
    /* p passed analyze's FP8 rules: trans (0, 1), K % 16 == 0, 16-byte row
     * strides and operands (gemm.c, check_fp8); what the kernel needs
     * beyond them: a bf16 or f32 D, no epilogue, N % 8 == 0 (an f32 D
     * there only needs N % 4), no empty dimension */
    if (p->d_fp8 || (p->dt_d != L8_BF16 && p->dt_d != L8_F32) || p->n % 8)
        return 0;
    if (!within_max_mnk(p))
        return 0;
    /* auto: a grid of at most half the SMs, and K in one round of the
     * warps. Each CTA rereads its rows of A and B from L2, so the traffic
     * grows with the grid, and a grid near the SM count takes two waves
     * beside the step's other stream; a second round of loads (K > 512)
     * waits for the first's mmas. A bf16 D is no exception: up to one CTA
     * an SM, its dGELU cast inside, 784-512-512-10's layer-2 dgrad (128
     * CTAs) cost 0.35 us a step on an H100 against cuBLASLt's plan for
     * 100 SMs (docs/perf.md, fortieth session). */
    int64_t ctas = ((p->m + SMALL_TILE - 1) / SMALL_TILE) * ((p->n + SMALL_TILE - 1) / SMALL_TILE);
    if (mode == 2 && (2 * ctas > (int64_t)nsm || p->k > SMALL_AUTO_MAX_K))
        return 0;
    return 1;
}

int l8i_gemm_small_fuses(const problem *p)
{
    /* the _dgelu entries: D bf16; dense FP8 outputs (a row-padded one wants
     * its zeros, which they do not write) stored in 8-byte blocks (out_t's
     * whole: M % 8 == 0) */
    return p->dgelu && p->dt_d == L8_BF16 && p->m % 8 == 0 && p->dc.ldo == p->n &&
           p->dc.ldt == p->m && (uintptr_t)p->dc.out % 8 == 0 &&
           (uintptr_t)p->dc.out_t % 8 == 0 && (uintptr_t)p->dc.a % 16 == 0;
}

l8_status l8i_gemm_small(l8_ctx *ctx, const problem *p, int fuse, l8_stream *s)
{
    /* by D (bf16, f32, bf16 with the dGELU cast) and input pair (e4m3
     * e4m3, e4m3 e5m2, e5m2 e4m3) */
    static const char *const k_entries[3][3] = {
        { "l8_gemm_small_e4m3_e4m3_bf16", "l8_gemm_small_e4m3_e5m2_bf16",
          "l8_gemm_small_e5m2_e4m3_bf16" },
        { "l8_gemm_small_e4m3_e4m3_f32", "l8_gemm_small_e4m3_e5m2_f32",
          "l8_gemm_small_e5m2_e4m3_f32" },
        { "l8_gemm_small_e4m3_e4m3_dgelu", "l8_gemm_small_e4m3_e5m2_dgelu",
          "l8_gemm_small_e5m2_e4m3_dgelu" },
    };
    int pair = p->dt_a == L8_E5M2 ? 2 : p->dt_b == L8_E5M2 ? 1 : 0;
    int kind = fuse ? 2 : p->dt_d == L8_F32;
    CUfunction f;
    if (p->fp8)
        L8_CHECK(l8i_kernel(ctx, "gemm_small", k_entries[kind][pair], &f));
    else
        L8_CHECK(l8i_kernel(ctx, "gemm_small", fuse ? "l8_gemm_small_bf16_bf16_dgelu"
                                                    : "l8_gemm_small_bf16_bf16_bf16", &f));
    uint64_t d = (uint64_t)(uintptr_t)p->d, a = (uint64_t)(uintptr_t)p->a;
    uint64_t b = (uint64_t)(uintptr_t)p->b;
    uint64_t sa = (uint64_t)(uintptr_t)p->sa, sb = (uint64_t)(uintptr_t)p->sb;
    uint32_t m = (uint32_t)p->m, n = (uint32_t)p->n, k = (uint32_t)p->k;
    uint64_t lda = (uint64_t)p->lda, ldb = (uint64_t)p->ldb;   /* FP8: bytes */
    uint64_t ldd = (uint64_t)p->ldd * (p->dt_d == L8_BF16 ? 2u : 4u);
    float alpha = p->alpha, beta = p->beta;
    unsigned gx = (unsigned)((p->n + SMALL_TILE - 1) / SMALL_TILE);
    unsigned gy = (unsigned)((p->m + SMALL_TILE - 1) / SMALL_TILE);
    /* the bf16 entries: byte steps along op(A)'s rows and k, op(B)'s k and columns */
    uint64_t sar = p->ta ? 2u : 2u * lda, sak = p->ta ? 2u * lda : 2u;
    uint64_t sbk = p->tb ? 2u : 2u * ldb, sbn = p->tb ? 2u * ldb : 2u;
    if (!fuse) {
        void *args[] = { &d, &a, &b, &sa, &sb, &m, &n, &k, &lda, &ldb, &ldd, &alpha, &beta };
        void *args16[] = { &d, &a, &b, &m, &n, &k, &sar, &sak, &sbk, &sbn, &ldd, &alpha, &beta };
        return p->fp8 ? l8i_launch(s, f, gx, gy, 1, SMALL_THREADS, 1, 1, 0, args)
                      : l8i_launch(s, f, gx, gy, 1, 2 * SMALL_THREADS, 1, 1, 0, args16);
    }
    const l8i_dact_out *c = &p->dc;
    uint64_t act = (uint64_t)(uintptr_t)c->a, ldact = (uint64_t)p->n * 2u;
    uint64_t out = (uint64_t)(uintptr_t)c->out, ldo = (uint64_t)c->ldo;
    uint64_t outt = (uint64_t)(uintptr_t)c->out_t, ldot = (uint64_t)c->ldt;
    uint64_t scale = (uint64_t)(uintptr_t)c->scale, amax = (uint64_t)(uintptr_t)c->amax;
    uint64_t sinv = (uint64_t)(uintptr_t)c->scale_inv;
    uint32_t fmt = (uint32_t)c->fmt;                 /* 3 e4m3, 4 e5m2 (l8_dtype) */
    void *args[] = { &d, &a, &b, &sa, &sb, &m, &n, &k, &lda, &ldb, &ldd, &alpha, &beta,
                     &act, &ldact, &out, &ldo, &outt, &ldot, &scale, &amax, &sinv, &fmt };
    void *args16[] = { &d, &a, &b, &m, &n, &k, &sar, &sak, &sbk, &sbn, &ldd, &alpha, &beta,
                       &act, &ldact, &out, &ldo, &outt, &ldot, &scale, &amax, &sinv, &fmt };
    return l8i_launch(s, f, gx, gy, 1, 2 * SMALL_THREADS, 1, 1, 0,   /* see the PTX */
                      p->fp8 ? args : args16);
}
