/* cast.c - launchers for the FP8 cast / transpose / scale-update kernels and
 * their host references.
 *
 * Each public op validates its tensors, resolves their pointers now (views
 * never cache them), then either runs the host reference (host context) or
 * launches the PTX kernel (CUDA context). The host references repeat the
 * kernels' arithmetic operation for operation: the same conversion
 * (runtime/fp8.c), mul.rn then cvt, amax as a u32 max of sign-cleared bits, and
 * for dbias the same f32 summation order (see ptx/cast_transpose.ptx.in). So a
 * GPU result must equal the host result bit for bit, NaN payloads aside.
 *
 * Grids: the grid-stride kernels (cast, dequantize) get at most (resident
 * CTAs per SM) x SMs CTAs, so each CTA issues one amax atomic and no CTA
 * waits for a second wave; residency comes from `ptxas -v` for sm_90 and is
 * recorded next to each kernel below. The tile kernels get one CTA per tile
 * (MAX_TILE_CTAS). Grid sizes only change speed, never results.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "runtime/fp8.h"
#include "runtime/internal.h"
#include "ops/internal.h"

#define CTA_THREADS 256u
#define OCC_CAST 8u        /* l8_cast_fp8: 32 registers */
#define OCC_DQ 5u          /* l8_fp8_dequantize: 48 registers */
/* The tile kernels (cast_transpose, transpose) get one CTA per 128 x 128
 * tile up to this many CTAs, then loop: measured faster than a persistent
 * grid (73 vs 78 us on bf16 8192 x 8192, H200), as the block scheduler
 * balances the tiles; one amax atomic per CTA stays cheap at this count. */
#define MAX_TILE_CTAS 32768u
#define SU_THREADS 128u    /* l8_fp8_scale_update */

/* the flags the single-tensor cast ops take (ops/cast.h) */
#define CAST_FLAGS (L8_CAST_ACCUMULATE_AMAX | L8_CAST_FEW_SMS)

/* cast_transpose / transpose kernel flags (see the .ptx headers) */
#define KF_VEC_ROW 0x1u
#define KF_VEC_T16 0x2u
#define KF_VEC_IN8 0x8u       /* transpose: cols % 8 == 0, 8-B aligned input */
#define KF_IN_WORDS 0x10u     /* 4-B aligned input (any cols) */
#define KF_DB_DIRECT 0x20u    /* cast_transpose: one CTA per tile column sums its
                               * dbias (type in bits 6-7), no l8_dbias_reduce */
/* DB_DIRECT up to this many 128-row tile rows. Measured on an H200
 * (2026-12-01, lean8-bench cast, launches replayed from a CUDA graph): one
 * tile row 4.6 us against 5.7 us with l8_dbias_reduce (16 x 512, 128 x 256);
 * two, 5.8 against 5.8 (256 x 512) and 6.2 against 5.9 (256 x 16); four,
 * 9.2 against 6.0 (512 x 784): a CTA walking several tiles costs what the
 * saved launch gains */
#define DB_DIRECT_MAX_TILE_ROWS 1
/* Small tensors go to ptx/cast_transpose_sm.ptx.in (a 128 x 32 block per
 * CTA of 512 threads, 8 elements a thread; over SM_HALF_MIN_ROWS rows 4
 * elements a thread: 64 x 32 per CTA of 512 threads, or with dbias 128 x 32
 * per CTA of 1024) up to this many 128 x 128 tiles, and with
 * dbias up to SM_MAX_DB_TILE_ROWS tile rows: a column block's tile rows run
 * as one cluster of CTAs (1024 threads each) that add their column sums up
 * in order, where the context can launch clusters (else one tile row). The
 * kernel holds up to 8 (the portable cluster size); measured on an H200
 * (2026-12-02, lean8-bench cast, launches replayed from a CUDA graph, bf16
 * with dbias), 512 x 784 ran 2.81 us in clusters of 4 against 3.28 for the
 * tile kernel and its reduction, 1024 x 512 4.11 in clusters of 8 against
 * 3.35. Same results bit for bit; see the .ptx banner for why and
 * docs/perf.md for the measurements. */
#define SM_MAX_TILES 64
#define SM_MAX_DB_TILE_ROWS 4
#define KF_SM_VEC_T8 0x1u     /* cast_transpose_sm: rows % 8 == 0, 8-B aligned out_t */
int l8i_cast_sm_max_tiles = SM_MAX_TILES;
/* The entries of 4 rows a thread (half and quarter forms) for tensors of
 * more rows than this: at 64 rows or fewer most of their threads would idle
 * (16 x 512 bf16: 1.65 us against 1.59 with 8 rows a thread, docs/perf.md). */
#define SM_HALF_MIN_ROWS 64
int l8i_cast_sm_half_min_rows = SM_HALF_MIN_ROWS;
/* Of those without dbias, the ones whose grid of 32-row CTAs is at most
 * this many CTAs (negative: the device's multiprocessors, one wave) take 2
 * rows a thread in 32-row CTAs (the eighth form) instead of 4 in 64-row
 * CTAs (the quarter form): twice the CTAs, each thread half the chain.
 * Measured on an H200 (2026-12-02, lean8-bench cast, bf16, a launch
 * replayed from a CUDA graph, quarter against eighth): 128 x 256 (32 CTAs)
 * 1.30 against 1.18 us, 256 x 16 (8) 1.28 / 1.16, 256 x 512 (128) 1.34 /
 * 1.37; past one wave the eighth form lost: 256 x 784 (200) 1.43 / 1.55,
 * 512 x 784 (400) 1.84 / 2.13. */
int l8i_cast_sm_eighth_max_ctas = -1;
int l8i_cast_split = 1;
int l8i_cast_strip = 1;
int l8i_cast_strip_cl = 1;
int l8i_transpose_max_ctas = 0;

/* The kernels take l8_dtype values as their type codes. */
_Static_assert(L8_F32 == 0 && L8_BF16 == 1 && L8_F16 == 2 && L8_E4M3 == 3 && L8_E5M2 == 4,
               "kernel type codes are l8_dtype values");

/* ------------------------------------------------------------------------ */
/* validation helpers                                                        */

static int aligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) == 0; }

static l8_status need_fp8(const char *op, const char *name, const l8_tensor *t, l8_fp8_meta **m)
{
    if (!l8_dtype_is_fp8(l8_tensor_dtype(t)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted e4m3 or e5m2", op, name,
                       l8_dtype_name(l8_tensor_dtype(t)));
    if (m) {
        *m = l8_tensor_fp8_meta(t);
        if (!*m)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has no FP8 meta (l8_tensor_set_fp8_meta)",
                           op, name);
    }
    return L8_OK;
}

static l8_status need_hp(const char *op, const char *name, const l8_tensor *t)
{
    if (!l8i_is_hp(l8_tensor_dtype(t)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted f32, bf16 or f16", op,
                       name, l8_dtype_name(l8_tensor_dtype(t)));
    return L8_OK;
}

/* rows = product of all but the last dim, cols = the last dim (a 0-dim
 * tensor is 1 x 1). */
static void rows_cols(const l8_tensor *t, int64_t *rows, int64_t *cols)
{
    int nd = l8_tensor_ndim(t);
    *cols = nd > 0 ? l8_tensor_dim(t, nd - 1) : 1;
    *rows = 1;
    for (int d = 0; d + 1 < nd; d++)
        *rows *= l8_tensor_dim(t, d);
}

/* Whether t is a 2-D view whose rows lie further apart than their length
 * with unit steps inside them (a row-padded view: l8i_need_padded says whether
 * one the ops take). A view of one row (or of one column) is contiguous
 * whatever its other stride says: padded where that stride says so. */
static int looks_padded(const l8_tensor *t)
{
    int64_t d0 = l8_tensor_dim(t, 0), d1 = l8_tensor_dim(t, 1);
    return l8_tensor_ndim(t) == 2 && d0 > 0 && l8_tensor_stride(t, 0) > d1 &&
           (l8_tensor_stride(t, 1) == 1 || d1 == 1);
}

/* (ops/internal.h) */
l8_status l8i_need_padded(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx,
                          int64_t d0, int64_t d1, const char *dims, int64_t *ld)
{
    if (!t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
    if (ctx && l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s belongs to another context", op, name);
    if (l8_tensor_ndim(t) != 2 || l8_tensor_dim(t, 0) != d0 || l8_tensor_dim(t, 1) != d1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s must be 2-D [%lld, %lld] (%s)", op, name,
                       (long long)d0, (long long)d1, dims);
    int64_t s0 = l8_tensor_stride(t, 0), s1 = l8_tensor_stride(t, 1);
    int padded = looks_padded(t) && s0 % 16 == 0;
    *ld = d1;
    if (!padded && l8_tensor_is_contiguous(t))
        return L8_OK;
    if (!padded)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has strides [%lld, %lld]: wanted contiguous "
                       "or row-padded ([ld, 1] with ld > %lld and ld %% 16 == 0)", op, name,
                       (long long)s0, (long long)s1, (long long)d1);
    if (l8_tensor_offset(t) % 16)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a row-padded %s must be 16-byte aligned (it "
                       "starts %zu bytes into its storage)", op, name, l8_tensor_offset(t));
    *ld = s0;
    return L8_OK;
}

/* Columns [R, min(R16, ld)) of each of the C rows of a row-padded output
 * yt [C, ld] (R16: R rounded up to 16) get the FP8 code q of a zero input,
 * as the device writes them. */
static void pad_host(uint8_t *yt, int64_t R, int64_t C, int64_t ld, uint8_t q)
{
    int64_t end = (R + 15) / 16 * 16;
    end = end < ld ? end : ld;
    for (int64_t c = 0; ld > R && c < C; c++)
        memset(yt + c * ld + R, q, (size_t)(end - R));
}

/* ------------------------------------------------------------------------ */
/* device helpers                                                            */

/* One CTA per tile, at least one (it writes scale_inv), at most MAX_TILE_CTAS. */
static unsigned tile_grid(uint64_t ntiles)
{
    return ntiles == 0 ? 1u : ntiles > MAX_TILE_CTAS ? MAX_TILE_CTAS : (unsigned)ntiles;
}

static uint64_t dptr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* The amax words of n (1..L8_CAST_MANY_MAX) casts zeroed on s by one launch
 * of l8_amax_zero, for casts without L8_CAST_ACCUMULATE_AMAX. A kernel and
 * not a memset each: a memset node stops programmatic dependent launch on
 * both its sides (ptx/cast.ptx says what that cost). */
_Static_assert(L8_CAST_MANY_MAX <= 64, "l8_amax_zero takes at most 64 words");
static l8_status zero_amaxes(l8_ctx *ctx, l8_stream *s, float *const *amax, int n)
{
    CUfunction f;
    L8_CHECK(l8i_kernel(ctx, "cast", "l8_amax_zero", &f));
    _Alignas(8) uint64_t words[64] = { 0 };
    for (int i = 0; i < n; i++)
        words[i] = dptr(amax[i]);
    uint32_t count = (uint32_t)n;
    void *args[] = { words, &count };
    return l8i_launch(s, f, 1, 1, 1, 64, 1, 1, 0, args);
}

static l8_status zero_amax(l8_ctx *ctx, l8_stream *s, float *amax)
{
    return zero_amaxes(ctx, s, &amax, 1);
}

/* ------------------------------------------------------------------------ */
/* l8_fp8_cast                                                               */

l8_status l8_fp8_cast(const l8_tensor *in, l8_tensor *out, unsigned flags, l8_stream *s)
{
    static const char *op = "l8_fp8_cast";
    L8_CHECK(l8i_need_tensor(op, "in", in, NULL));
    l8_ctx *ctx = l8_tensor_ctx(in);
    L8_CHECK(l8i_need_tensor(op, "out", out, ctx));
    L8_CHECK(need_hp(op, "in", in));
    l8_fp8_meta *m;
    L8_CHECK(need_fp8(op, "out", out, &m));
    if (flags & ~CAST_FLAGS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown flags 0x%x", op, flags);
    int64_t n = l8_tensor_numel(in);
    if (l8_tensor_numel(out) != n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out has %lld elements, in has %lld", op,
                       (long long)l8_tensor_numel(out), (long long)n);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *x, *y;
    L8_CHECK(l8_tensor_data(in, &x));
    L8_CHECK(l8_tensor_data(out, &y));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, out }, 2));
    l8_dtype idt = l8_tensor_dtype(in), fmt = l8_tensor_dtype(out);
    float *scale = l8_fp8_meta_scale(m), *amax = l8_fp8_meta_amax(m);
    float *sinv = l8_fp8_meta_scale_inv(m);

    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        if (!(flags & L8_CAST_ACCUMULATE_AMAX))
            *amax = 0.0f;
        L8_CHECK(l8_fp8_quantize_host(x, idt, (size_t)n, *scale, fmt, y, amax));
        *sinv = 1.0f / *scale;
        return L8_OK;
    }

    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "cast", "l8_cast_fp8", &f));
    if (!(flags & L8_CAST_ACCUMULATE_AMAX))
        L8_CHECK(zero_amax(ctx, s, amax));
    /* 16-element chunks need 16-B aligned input and output rows */
    uint64_t nn = (uint64_t)n;
    uint64_t nvec = (aligned(x, 16) && aligned(y, 16)) ? nn / 16 : 0;
    uint64_t work = ((nvec ? nvec : nn) + CTA_THREADS - 1) / CTA_THREADS;
    unsigned grid;
    L8_CHECK(l8i_grid_for(ctx, work, OCC_CAST, &grid));
    uint64_t a_in = dptr(x), a_out = dptr(y), a_scale = dptr(scale), a_amax = dptr(amax);
    uint64_t a_sinv = dptr(sinv);
    uint32_t itype = (uint32_t)idt, ofmt = (uint32_t)fmt;
    void *args[] = { &a_in, &a_out, &a_scale, &a_amax, &a_sinv, &nvec, &nn, &itype, &ofmt };
    return l8i_launch(s, f, grid, 1, 1, CTA_THREADS, 1, 1, 0, args);
}

/* ------------------------------------------------------------------------ */
/* cast + transpose (+ dbias)                                                */

static l8_status dbias_host(const void *x, l8_dtype idt, int64_t R, int64_t C, void *dbias,
                            l8_dtype ddt);

/* Host reference. out may be NULL; dbias NULL: not computed. *amax is
 * max-accumulated. The dbias order is the kernel's: per 128-row tile tr,
 * partial_j[c] = sum_{i<8} X[128 tr + 16 i + j][c] (rows past the end add
 * +0.0f), p[c] = sum_{j<16} partial_j[c], total[c] = sum_tr p[c], every sum
 * sequential from +0.0f. */
static l8_status ct_host(const void *x, l8_dtype idt, int64_t R, int64_t C, int64_t ldo,
                         int64_t ldt, float scale, l8_dtype fmt, uint8_t *out, uint8_t *out_t,
                         float *amax, void *dbias, l8_dtype ddt)
{
    uint32_t am = l8_amax_bits(*amax);
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < C; c++) {
            float v = l8_host_load_f32(x, idt, (size_t)(r * C + c));
            uint32_t b = l8_amax_bits(v);
            am = b > am ? b : am;
            uint8_t q = l8_fp8_from_f32(v * scale, fmt);
            if (out)
                out[r * ldo + c] = q;
            if (out_t)
                out_t[c * ldt + r] = q;
        }
    }
    if (out)
        pad_host(out, C, R, ldo, 0);          /* as the tile kernel's end does */
    if (out_t)
        pad_host(out_t, R, C, ldt, l8_fp8_from_f32(0.0f * scale, fmt));
    union { uint32_t u; float f; } cv = { am };
    *amax = cv.f;
    return dbias ? dbias_host(x, idt, R, C, dbias, ddt) : L8_OK;
}

/* The host reference of the casts' dbias, in the order described above ct_host. */
static l8_status dbias_host(const void *x, l8_dtype idt, int64_t R, int64_t C, void *dbias,
                            l8_dtype ddt)
{
    if (C == 0)
        return L8_OK;
    float *tot = calloc((size_t)C, sizeof *tot);
    float *part = malloc((size_t)C * 16 * sizeof *part);
    if (!tot || !part) {
        free(tot);
        free(part);
        return L8_FAIL(L8_ERR_OOM, "dbias: no host memory for %lld columns", (long long)C);
    }
    for (int64_t r0 = 0; r0 < R; r0 += 128) {
        for (int64_t k = 0; k < 16 * C; k++)
            part[k] = 0.0f;
        for (int i = 0; i < 8; i++) {
            for (int j = 0; j < 16; j++) {
                int64_t r = r0 + 16 * i + j;
                float *p = part + (int64_t)j * C;
                if (r < R)
                    for (int64_t c = 0; c < C; c++)
                        p[c] += l8_host_load_f32(x, idt, (size_t)(r * C + c));
                else
                    for (int64_t c = 0; c < C; c++)
                        p[c] += 0.0f;              /* as the kernel: turns -0 into +0 */
            }
        }
        for (int64_t c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int j = 0; j < 16; j++)
                sum += part[(int64_t)j * C + c];
            tot[c] += sum;
        }
    }
    for (int64_t c = 0; c < C; c++)
        l8_host_store_f32(dbias, ddt, (size_t)c, tot[c]);
    free(tot);
    free(part);
    return L8_OK;
}

/* One cast_transpose, checked and resolved: what the host reference, the
 * single launch and a group launch need. */
typedef struct ct_job {
    l8_ctx *ctx;
    l8_fp8_meta *m;
    int64_t R, C;
    l8_dtype idt, fmt;
    void *x, *y, *yt, *db;        /* y, db may be NULL; yt too for the _act ops */
    uint32_t kf;                  /* KF_VEC_ROW, KF_IN_WORDS, KF_VEC_T16 */
    uint64_t ntr, ntc;            /* tile rows, tile columns */
    int64_t ldt;                  /* yt's row stride: R, or more where it is row-padded */
    int64_t ldo;                  /* y's row stride: C, or more where it is row-padded */
} ct_job;

/* Check the arguments of one cast_transpose(_dbias) on ctx (NULL: in's) and
 * fill *j. out_t may be NULL only when out is not (a cast without its
 * transpose: the _act ops); out_t, and out when out_t is given, may be
 * row-padded (l8i_need_padded). Nothing is enqueued. */
static l8_status ct_prepare(const char *op, const l8_tensor *in, l8_tensor *out,
                            l8_tensor *out_t, l8_tensor *dbias, l8_ctx *ctx, ct_job *j)
{
    L8_CHECK(l8i_need_tensor(op, "in", in, ctx));
    ctx = l8_tensor_ctx(in);
    L8_CHECK(need_hp(op, "in", in));
    l8_tensor *ref = out_t ? out_t : out;
    int64_t R, C, ldt;
    rows_cols(in, &R, &C);
    ldt = R;
    if (out_t)
        L8_CHECK(l8i_need_padded(op, "out_t", out_t, ctx, C, R, "cols, rows of in", &ldt));
    else
        L8_CHECK(l8i_need_tensor(op, "out (out_t is NULL)", out, ctx));
    l8_fp8_meta *m;
    L8_CHECK(need_fp8(op, out_t ? "out_t" : "out", ref, &m));
    l8_dtype fmt = l8_tensor_dtype(ref);
    int64_t ldo = C;
    if (out && out_t && looks_padded(out)) {
        L8_CHECK(l8i_need_padded(op, "out", out, ctx, R, C, "rows, cols of in", &ldo));
    } else if (out) {
        L8_CHECK(l8i_need_tensor(op, "out", out, ctx));
        int64_t r2, c2;
        rows_cols(out, &r2, &c2);
        if (r2 != R || c2 != C)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out is [%lld, %lld], wanted [%lld, %lld]", op,
                           (long long)r2, (long long)c2, (long long)R, (long long)C);
    }
    if (out) {
        l8_fp8_meta *mo;
        L8_CHECK(need_fp8(op, "out", out, &mo));
        if (l8_tensor_dtype(out) != fmt || mo != m)
            return L8_FAIL(L8_ERR_INVALID_ARG,
                           "%s: out and out_t must have the same FP8 dtype and share one meta", op);
    }
    if (dbias) {
        L8_CHECK(l8i_need_tensor(op, "dbias", dbias, ctx));
        L8_CHECK(need_hp(op, "dbias", dbias));
        if (l8_tensor_numel(dbias) != C)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dbias has %lld elements, wanted %lld (cols)",
                           op, (long long)l8_tensor_numel(dbias), (long long)C);
    }
    if (R > INT32_MAX || C > INT32_MAX || ldt > INT32_MAX || ldo > INT32_MAX ||
        ((R + 127) / 128) * ((C + 127) / 128) > INT32_MAX)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: [%lld, %lld] is above the kernel's 2^31 limits",
                       op, (long long)R, (long long)C);
    *j = (ct_job){ .ctx = ctx, .m = m, .R = R, .C = C, .idt = l8_tensor_dtype(in), .fmt = fmt,
                   .ldt = ldt, .ldo = ldo };
    L8_CHECK(l8_tensor_data(in, &j->x));
    if (out)
        L8_CHECK(l8_tensor_data(out, &j->y));
    if (out_t)
        L8_CHECK(l8_tensor_data(out_t, &j->yt));
    if (dbias)
        L8_CHECK(l8_tensor_data(dbias, &j->db));
    if (C % 8 == 0 && aligned(j->x, 16) && (!j->y || aligned(j->y, 8)))
        j->kf |= KF_VEC_ROW;
    if (aligned(j->x, 4))
        j->kf |= KF_IN_WORDS;
    if (ldt % 16 == 0 && j->yt && aligned(j->yt, 16))   /* row-padded: always */
        j->kf |= KF_VEC_T16;
    j->ntr = (uint64_t)(R + 127) / 128;
    j->ntc = (uint64_t)(C + 127) / 128;
    return L8_OK;
}

/* The host reference of one prepared job. */
static l8_status ct_job_host(const ct_job *j, l8_dtype ddt, unsigned flags)
{
    float *amax = l8_fp8_meta_amax(j->m), *scale = l8_fp8_meta_scale(j->m);
    if (!(flags & L8_CAST_ACCUMULATE_AMAX))
        *amax = 0.0f;
    L8_CHECK(ct_host(j->x, j->idt, j->R, j->C, j->ldo, j->ldt, *scale, j->fmt, j->y, j->yt, amax,
                     j->db, ddt));
    *l8_fp8_meta_scale_inv(j->m) = 1.0f / *scale;
    return L8_OK;
}

/* Whether j takes the small-tile kernel (by its own size; dbias adds the
 * tile-row limit at the call). */
static int sm_sized(const ct_job *j)
{
    return j->ntr * j->ntc <= (uint64_t)(l8i_cast_sm_max_tiles > 0 ? l8i_cast_sm_max_tiles : 0);
}

/* Whether j (with dbias or not, under the op's flags) takes the small-tile
 * kernel: never with L8_CAST_FEW_SMS, which asks for the 128 x 128 tiles,
 * nor for row-padded outputs, which only the tile kernel writes. */
static int sm_fits(const ct_job *j, const l8_tensor *dbias, unsigned flags)
{
    if ((flags & L8_CAST_FEW_SMS) || !sm_sized(j) || j->ldt != j->R || j->ldo != j->C)
        return 0;
    return !dbias || j->ntr <= 1 || (j->ntr <= SM_MAX_DB_TILE_ROWS && l8i_ctx_clusters(j->ctx));
}

/* A small tensor's cast_transpose(_dbias): one launch of the small-tile
 * kernel, grid (column blocks of 32, tile rows), with dbias over several
 * tile rows in clusters of a column block's tile rows. With act
 * (L8_ACT_GELU) the kernel applies the activation to the input first, or
 * with a (the activation's input, of the input's dtype) its gradient. */
_Static_assert(SM_MAX_DB_TILE_ROWS <= 8, "cast_transpose_sm's clusters hold at most 8 tile rows");
static l8_status cast_transpose_sm(const ct_job *j, l8_act act, int grad, const void *a,
                                   const l8_tensor *dbias, unsigned flags, l8_stream *s)
{
    enum { PLAIN, GELU, DGELU, HALF, HALF_DGELU, HALF_CL, HALF_DGELU_CL, QUARTER,
           EIGHTH = QUARTER + 3 };
    static const char *const entry[EIGHTH + 3][3] = {
        { "l8_cast_transpose_sm_f32", "l8_cast_transpose_sm_bf16", "l8_cast_transpose_sm_f16" },
        { "l8_cast_transpose_sm_gelu_f32", "l8_cast_transpose_sm_gelu_bf16",
          "l8_cast_transpose_sm_gelu_f16" },
        { "l8_cast_transpose_sm_dgelu_f32", "l8_cast_transpose_sm_dgelu_bf16",
          "l8_cast_transpose_sm_dgelu_f16" },
        { "l8_cast_transpose_sm_half_f32", "l8_cast_transpose_sm_half_bf16",
          "l8_cast_transpose_sm_half_f16" },
        { "l8_cast_transpose_sm_half_dgelu_f32", "l8_cast_transpose_sm_half_dgelu_bf16",
          "l8_cast_transpose_sm_half_dgelu_f16" },
        { "l8_cast_transpose_sm_half_cl_f32", "l8_cast_transpose_sm_half_cl_bf16",
          "l8_cast_transpose_sm_half_cl_f16" },
        { "l8_cast_transpose_sm_half_dgelu_cl_f32", "l8_cast_transpose_sm_half_dgelu_cl_bf16",
          "l8_cast_transpose_sm_half_dgelu_cl_f16" },
        { "l8_cast_transpose_sm_quarter_f32", "l8_cast_transpose_sm_quarter_bf16",
          "l8_cast_transpose_sm_quarter_f16" },
        { "l8_cast_transpose_sm_quarter_gelu_f32", "l8_cast_transpose_sm_quarter_gelu_bf16",
          "l8_cast_transpose_sm_quarter_gelu_f16" },
        { "l8_cast_transpose_sm_quarter_dgelu_f32", "l8_cast_transpose_sm_quarter_dgelu_bf16",
          "l8_cast_transpose_sm_quarter_dgelu_f16" },
        { "l8_cast_transpose_sm_eighth_f32", "l8_cast_transpose_sm_eighth_bf16",
          "l8_cast_transpose_sm_eighth_f16" },
        { "l8_cast_transpose_sm_eighth_gelu_f32", "l8_cast_transpose_sm_eighth_gelu_bf16",
          "l8_cast_transpose_sm_eighth_gelu_f16" },
        { "l8_cast_transpose_sm_eighth_dgelu_f32", "l8_cast_transpose_sm_eighth_dgelu_bf16",
          "l8_cast_transpose_sm_eighth_dgelu_f16" } };
    /* Over l8i_cast_sm_half_min_rows rows 4 rows a thread instead of 8 (half
     * the chain of instructions a thread walks, in a kernel that has too few
     * warps to hide it): without dbias in 64-row CTAs of 512 threads (the
     * quarter form; 2 rows a thread in 32-row CTAs, the eighth form, where
     * those fit in one wave: l8i_cast_sm_eighth_max_ctas), with dbias in
     * 128-row CTAs of 1024 (the half form, which keeps the tile row's dbias
     * order), as a cluster of a column block's tile rows for dbias over
     * several (always, whatever the knob says). A
     * dbias comes with no activation or with its gradient (grad; a is its
     * input's address, NULL for an empty tensor): the forward GELU has none. */
    const int ak = act == L8_ACT_NONE ? 0 : grad ? 2 : 1;
    if (dbias && ak == 1)
        return L8_FAIL(L8_ERR_INTERNAL, "cast_transpose_sm: a dbias with the forward GELU");
    const int cl = dbias && j->ntr > 1;
    const int four = cl || j->R > (int64_t)l8i_cast_sm_half_min_rows;
    const int quarter = four && !dbias;
    /* the grid: a CTA per 32 columns and per tile row (the quarter form: per
     * 64 rows, the eighth: per 32); with dbias a column block's tile rows
     * form a cluster (sm_fits: at most SM_MAX_DB_TILE_ROWS) */
    const uint64_t rows32 = ((uint64_t)j->R + 31) / 32, rows64 = ((uint64_t)j->R + 63) / 64;
    unsigned gx = (unsigned)(((uint64_t)j->C + 31) / 32), cap = 0;
    gx = gx ? gx : 1u;
    if (quarter && l8i_cast_sm_eighth_max_ctas < 0)
        L8_CHECK(l8i_sm_count(j->ctx, &cap));
    else if (quarter)
        cap = (unsigned)l8i_cast_sm_eighth_max_ctas;
    const int eighth = quarter && gx * rows32 <= cap;
    unsigned gy = eighth ? (unsigned)rows32 : quarter ? (unsigned)rows64 : (unsigned)j->ntr;
    gy = gy ? gy : 1u;
    const int k = !four ? ak : eighth ? EIGHTH + ak : quarter ? QUARTER + ak
                : cl ? (grad ? HALF_DGELU_CL : HALF_CL) : (grad ? HALF_DGELU : HALF);
    CUfunction f;
    L8_CHECK(l8i_kernel(j->ctx, "cast_transpose_sm", entry[k][j->idt], &f));
    float *amax = l8_fp8_meta_amax(j->m);
    if (!(flags & L8_CAST_ACCUMULATE_AMAX))
        L8_CHECK(zero_amax(j->ctx, s, amax));
    uint32_t kf = 0;
    if (j->R % 8 == 0 && j->yt && aligned(j->yt, 8))
        kf |= KF_SM_VEC_T8;
    if (dbias)
        kf |= (uint32_t)l8_tensor_dtype(dbias) << 6;
    uint64_t a_in = dptr(j->x), a_out = dptr(j->y), a_outt = dptr(j->yt);
    uint64_t a_scale = dptr(l8_fp8_meta_scale(j->m)), a_amax = dptr(amax);
    uint64_t a_sinv = dptr(l8_fp8_meta_scale_inv(j->m)), a_db = dptr(j->db);
    uint64_t a_act = dptr(a);
    uint32_t rows = (uint32_t)j->R, cols = (uint32_t)j->C, ofmt = (uint32_t)j->fmt;
    void *args[] = { &a_in, &a_out, &a_outt, &a_scale, &a_amax, &a_sinv, &a_db,
                     &rows, &cols, &kf, &ofmt, &a_act };   /* a_act: dgelu entries only */
    return l8i_launch_cluster(s, f, gx, gy, 1, four && !quarter ? 1024u : 512u, 1, 1, cl ? gy : 1u,
                              0, args);
}

/* Shapes the tile kernel takes slowly: rows of the row-major output that are
 * not 8-byte multiples (no 8-byte stores, input rows not 4-byte aligned), and
 * for 2-byte inputs odd rows together with columns not a multiple of 16 (both
 * outputs' rows off their lines). There the plain cast (flat, at ~0.92x copy
 * whatever the shape) and the byte transpose of its output move one byte an
 * element more but run faster. Measured on an H200 (2026-12-02, lean8-bench
 * cast, x copy, tile kernel against the split): bf16 8191 x 8200 0.633 /
 * 0.678, 8191 x 8191 0.534 / 0.660, f32 8191 x 8191 0.648 / 0.738. f32 with
 * columns % 8 == 0 stays in the tile kernel, which runs 8191 x 8200 at 0.78:
 * the split's two passes (5 and 2 bytes an element at 0.95 and 0.75 of copy)
 * would come to ~0.76. With dbias the cast is the tile kernel itself,
 * without its transposed output (the kernel skips phase 2 for p_outt 0), so
 * the column sums stay the kernel's, in its order; only where columns % 8
 * == 0: on an H200 (2026-12-03, lean8-bench cast --quick, two rounds, fused
 * against split) bf16 8191 x 8200 0.607-0.609 / 0.624-0.629, but 8191 x
 * 8191 0.514-0.516 / 0.446-0.449 and f32 8191 x 8191 0.624-0.628 /
 * 0.569-0.574: with odd columns the tile kernel's own row-major pass is the
 * slow part, and the split keeps it. Since the lanes of a row store aligned
 * 8-B blocks together (OUT_SEG in the .ptx) the fused kernel runs bf16 8191 x
 * 8191 at 0.573; a split whose row-major stores were each made one aligned
 * store (results wrong: a bound) ran 0.578, so it would not win there either. */
static int split_wins(const ct_job *j, int dbias)
{
    /* A row-padded out_t (cast.h) has its rows on their lines: the tile
     * kernel writes it in whole 16-B blocks, and beats the split on every
     * shape. On an H200 (2026-12-03, eleventh session, lean8-bench cast
     * --quick, x copy, split / tile kernel): bf16 8191 x 8200 cast_t
     * 0.70-0.71 / 0.82-0.83, cast_t_db 0.65 / 0.77-0.78; bf16 8191 x 8191
     * cast_t 0.69 / 0.72-0.73; f32 8191 x 8191 cast_t 0.76 / 0.82-0.83. */
    if (j->ldt != j->R || j->ldo != j->C)      /* and the split's cast wants out contiguous */
        return 0;
    if (j->C % 8 != 0)
        return !dbias;
    return j->idt != L8_F32 && j->R % 16 != 0 && j->C % 16 != 0;
}

/* A dense out_t whose rows are not 16-byte multiples (rows % 16 != 0) from
 * a 2-byte or f32 input, with or without dbias: the strip kernel, which
 * writes out_t in whole 128-B lines (ptx/cast_transpose_strip.ptx.in says
 * how and what it measured), any columns (the w entries: word loads, the
 * row-major out as whole aligned 8-B blocks, lane 15's with the next
 * strip's first bytes). This form against what ran before it (H200,
 * 2026-12-05, lean8-bench cast --quick, x copy; before: the split or the
 * tile kernel on 8191^2, the strip kernel's earlier form otherwise): bf16
 * 8191 x 8191 cast_t 0.74 / 0.67, cast_t_db 0.64 / 0.59; bf16 8191 x 8200
 * cast_t 0.79 / 0.78; 8200 x 8192 cast_t_db 0.76 / 0.74.
 * FEW_SMS keeps the tile kernel: the strip kernel wants every SM. */
static int strip_can(const ct_job *j, unsigned flags)
{
    /* f32 by default only with odd-pitch out_t rows (H200, lean8-bench cast,
     * x copy against the tile kernel: cast_t 8191 x 8200 0.84 / 0.76, 8191^2
     * 0.79 / 0.75, but 8200 x 8192 0.88 / 0.92). With dbias too since the
     * reduce runs one CTA a multiprocessor (H100, cast_t_db 8191 x 8200
     * 0.83-0.84 / 0.77-0.78, 8191^2 0.85-0.86 / 0.75-0.76; on H200 before
     * that, 0.67-0.69 / 0.69-0.73) */
    const int f32_ok = l8i_cast_strip == 2 || j->R % 8 != 0;
    return l8i_cast_strip && !(flags & L8_CAST_FEW_SMS) && j->C > 0 &&
           (j->idt == L8_BF16 || j->idt == L8_F16 || (j->idt == L8_F32 && f32_ok)) &&
           aligned(j->x, l8_dtype_size(j->idt)) && j->R % 16 != 0 &&
           j->ldt == j->R && (!j->y || j->ldo == j->C);
}

/* The strip kernel's grid on sms multiprocessors: ceil(C / 128) strips,
 * each cut into *gy segments of *seg rows (a multiple of 128) so that
 * strips x segments is at most one CTA per multiprocessor (one segment a
 * strip when there are more strips than multiprocessors). Returns whether
 * the kernel pays there: each segment past the first loads 128 rows of the
 * next one again (the halo), so with more than one segment each must be at
 * least 8 steps of 128 rows (the halo at most 1/8 of its reads); shorter
 * ones stay with the tile kernel (l8i_cast_strip = 2 takes them too). */
static int strip_grid(const ct_job *j, unsigned sms, unsigned *gx, unsigned *gy, uint32_t *seg)
{
    uint64_t strips = ((uint64_t)j->C + 127) / 128, steps = ((uint64_t)j->R + 127) / 128;
    if (steps == 0) return 0;     /* never: strip_can took R % 16 != 0 only */
    uint64_t segs = sms / strips;
    if (segs < 1) segs = 1;
    if (segs > steps) segs = steps;
    uint64_t seg_steps = (steps + segs - 1) / segs;
    *gx = (unsigned)strips;
    *gy = (unsigned)((steps + seg_steps - 1) / seg_steps);
    *seg = (uint32_t)(seg_steps * 128);
    return *gy == 1 || seg_steps >= 8 || l8i_cast_strip == 2;
}

/* l8_dbias_reduce and how it is launched (reducer_get, before anything is
 * enqueued; dbias_reduce). */
typedef struct reducer {
    CUfunction f;
    unsigned sms;                 /* multiprocessors */
    unsigned smem;                /* dynamic shared memory for one CTA a multiprocessor */
} reducer;

static l8_status reducer_get(l8_ctx *ctx, reducer *r)
{
    unsigned per_sm = 0;
    L8_CHECK(l8i_sm_count(ctx, &r->sms));
    L8_CHECK(l8i_sm_smem(ctx, &per_sm));
    r->smem = per_sm / 2 + 1024;
    return l8i_kernel_smem(ctx, "cast_transpose", "l8_dbias_reduce", r->smem, &r->f);
}

/* dbias[c] = sum over the ntr rows of ws[ntr][C] (l8_dbias_reduce): the
 * second launch of every dbias that goes through column partials. Where its
 * grid is one wave, it asks for more shared memory than it uses (r->smem,
 * over half a multiprocessor's), so that each multiprocessor runs one of its
 * CTAs. Launched with PDL, its CTAs otherwise crowded onto the few
 * multiprocessors the cast before it left free (up to 32 CTAs of 64 threads
 * each) and waited there, and those few then did that share of the sums: on
 * an H100 (forty-third session, lean8-bench cast --quick, libl8ktrace) after
 * the strip kernel (130 CTAs on 132 SMs) it ended 7.5 us after the cast, and
 * 4.1 us spread out; bf16 cast_t_db 8191 x 8200 0.749-0.750 -> 0.769-0.774
 * of copy, 8191^2 0.758-0.759 -> 0.779-0.782, the tile kernel's cells
 * unchanged. Wider grids (over 64 x SMs columns) launch as before: not
 * measured. */
static l8_status dbias_reduce(l8_stream *s, const reducer *r, void *ws, void *db, uint64_t ntr,
                              int64_t C, l8_dtype ddt)
{
    uint64_t a_ws = dptr(ws), a_db = dptr(db);
    uint32_t n_tr = (uint32_t)ntr, cols = (uint32_t)C, otype = (uint32_t)ddt;
    void *args[] = { &a_ws, &a_db, &n_tr, &cols, &otype };
    unsigned g = (unsigned)(((uint64_t)C + 63) / 64);   /* 64 threads a CTA: see the .ptx */
    return l8i_launch(s, r->f, g, 1, 1, 64, 1, 1, g <= r->sms ? r->smem : 0u, args);
}

/* The strip kernel's launch (strip_grid's); the amax word is zeroed first
 * unless accumulating. With dbias the kernel writes one row of column
 * partials per 128-row tile row (the tile kernel's, in its order), which
 * l8_dbias_reduce sums; or, where the context launches clusters, a strip
 * has at most 8 segments (the portable cluster size) and the grid's
 * clusters fit (below), the _cl entries run each strip's segments as one
 * cluster that sums them itself, in the same order (no second launch). */
static l8_status cast_transpose_strip(const ct_job *j, unsigned gx, unsigned gy, uint32_t seg,
                                      l8_dtype ddt, unsigned flags, l8_stream *s)
{
    static const char *const entry[3][2][3] = {
        { { "l8_cast_transpose_strip_f32", "l8_cast_transpose_strip_bf16",
            "l8_cast_transpose_strip_f16" },
          { "l8_cast_transpose_strip_w_f32", "l8_cast_transpose_strip_w_bf16",
            "l8_cast_transpose_strip_w_f16" } },
        { { "l8_cast_transpose_strip_db_f32", "l8_cast_transpose_strip_db_bf16",
            "l8_cast_transpose_strip_db_f16" },
          { "l8_cast_transpose_strip_db_w_f32", "l8_cast_transpose_strip_db_w_bf16",
            "l8_cast_transpose_strip_db_w_f16" } },
        { { "l8_cast_transpose_strip_db_cl_f32", "l8_cast_transpose_strip_db_cl_bf16",
            "l8_cast_transpose_strip_db_cl_f16" },
          { "l8_cast_transpose_strip_db_w_cl_f32", "l8_cast_transpose_strip_db_w_cl_bf16",
            "l8_cast_transpose_strip_db_w_cl_f16" } } };
    const int db = j->db != NULL, w = !(j->kf & KF_VEC_ROW);
    const unsigned smem = db ? STRIP_DB_SMEM((unsigned)l8_dtype_size(j->idt)) : 0;
    int cl = db && gy <= 8 && l8i_cast_strip_cl && l8i_ctx_clusters(j->ctx);
    CUfunction f;
    reducer red = { 0 };
    if (cl && gy > 1 && w && l8i_cast_strip_cl < 2) {
        /* not the w entries (columns % 8 != 0) in clusters of several CTAs:
         * H100 SXM, 2026-12-05, lean8-bench cast --quick, x copy, two rounds:
         * bf16 cast_t_db 8191^2 (64 clusters of 2) 0.612 / 0.590 against the
         * partials' 0.749 / 0.747; the H200 gained 2% there (0.648 against
         * 0.632 / 0.637, the twentieth session). 2 takes them (the tests). */
        cl = 0;
    } else if (cl && gy > 1) {
        /* clusters only where every strip's cluster runs at once (the
         * driver's count) and the grid leaves 4 multiprocessors idle. H200,
         * 2026-12-05, lean8-bench cast --quick, x copy: bf16 cast_t_db
         * 8191 x 8200 as 65 clusters of 2 ran at 0.58 against the partials'
         * 0.71, although the driver counts 66 such clusters at once; as 64
         * (8191^2, 8200 x 8192) at 0.65 / 0.76 against 0.63 / 0.74 (the H100:
         * 8200 x 8192 0.781 / 0.775 against 0.772 / 0.770). Why the 130-CTA
         * grid loses is not known. */
        unsigned n = 0, sms = 0;
        L8_CHECK(l8i_sm_count(j->ctx, &sms));
        L8_CHECK(l8i_kernel_smem(j->ctx, "cast_transpose_strip", entry[2][w][j->idt], smem, &f));
        L8_CHECK(l8i_max_clusters(j->ctx, f, 512, gy, smem, &n));
        cl = n >= gx && (uint64_t)gx * gy + 4 <= sms;
    }
    L8_CHECK(l8i_kernel_smem(j->ctx, "cast_transpose_strip", entry[db + cl][w][j->idt],
                             smem, &f));
    if (db && !cl)
        L8_CHECK(reducer_get(j->ctx, &red));
    l8_status st = L8_OK;
    void *ws = NULL;
    if (db)
        L8_CHECK(l8_ctx_malloc(j->ctx, (size_t)(j->ntr * (uint64_t)j->C * sizeof(float)), s, &ws));
    float *amax = l8_fp8_meta_amax(j->m);
    if (!(flags & L8_CAST_ACCUMULATE_AMAX))
        L8_TRY(st, zero_amax(j->ctx, s, amax), out);
    {
        uint64_t a_in = dptr(j->x), a_out = dptr(j->y), a_outt = dptr(j->yt);
        uint64_t a_scale = dptr(l8_fp8_meta_scale(j->m)), a_amax = dptr(amax);
        uint64_t a_sinv = dptr(l8_fp8_meta_scale_inv(j->m)), a_ws = dptr(ws);
        uint64_t a_db = dptr(j->db);
        uint32_t rows = (uint32_t)j->R, cols = (uint32_t)j->C, ofmt = (uint32_t)j->fmt;
        uint32_t otype = (uint32_t)ddt;
        void *args[] = { &a_in, &a_out, &a_outt, &a_scale, &a_amax, &a_sinv, &a_ws, &rows, &cols,
                         &seg, &ofmt, &a_db, &otype };
        L8_TRY(st, l8i_launch_cluster(s, f, gx, gy, 1, 512, 1, 1, cl ? gy : 1u,
                                      smem, args), out);
    }
    if (db && !cl)
        L8_TRY(st, dbias_reduce(s, &red, ws, j->db, j->ntr, j->C, ddt), out);
out:
    if (ws) {
        l8_status fst = l8_ctx_free(j->ctx, ws);   /* stream-ordered, as below */
        if (st == L8_OK)
            st = fst;
    }
    return st;
}

static l8_status cast_transpose_impl(const char *op, const l8_tensor *in, l8_tensor *out,
                                     l8_tensor *out_t, l8_tensor *dbias, unsigned flags,
                                     l8_stream *s)
{
    ct_job j;
    if (!out_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out_t is NULL", op);
    L8_CHECK(ct_prepare(op, in, out, out_t, dbias, NULL, &j));
    if (flags & ~CAST_FLAGS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown flags 0x%x", op, flags);
    l8_ctx *ctx = j.ctx;
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, out, out_t, dbias }, 4));
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST)
        return ct_job_host(&j, dbias ? l8_tensor_dtype(dbias) : L8_F32, flags);
    const int64_t R = j.R, C = j.C;
    void *x = j.x, *y = j.y, *yt = j.yt, *db = j.db;
    l8_dtype idt = j.idt, fmt = j.fmt;
    float *scale = l8_fp8_meta_scale(j.m), *amax = l8_fp8_meta_amax(j.m);
    float *sinv = l8_fp8_meta_scale_inv(j.m);

    L8_CHECK(l8i_ctx_bind(ctx));
    if (sm_fits(&j, dbias, flags))
        return cast_transpose_sm(&j, L8_ACT_NONE, 0, NULL, dbias, flags, s);
    if (strip_can(&j, flags)) {
        unsigned sms = 0, gx = 0, gy = 0;
        uint32_t seg = 0;
        L8_CHECK(l8i_sm_count(ctx, &sms));
        if (strip_grid(&j, sms, &gx, &gy, &seg))
            return cast_transpose_strip(&j, gx, gy, seg,
                                        dbias ? l8_tensor_dtype(dbias) : L8_F32, flags, s);
    }
    /* the split: the cast (with dbias, the tile kernel without its
     * transposed output, where columns % 8 == 0), then the byte transpose of
     * out */
    const int split = l8i_cast_split && out && !(flags & L8_CAST_FEW_SMS) &&
                      split_wins(&j, dbias != NULL);
    if (split && !dbias) {
        L8_CHECK(l8_fp8_cast(in, out, flags, s));
        return l8_fp8_transpose(out, out_t, s);
    }
    /* the tile kernel's two forms (ptx/cast_transpose.ptx.in): phase 1 for
     * VEC_ROW, or for IN_WORDS; each takes the other tiles through its edge
     * path */
    static const char *const entry[2][3] = {
        { "l8_cast_transpose_f32", "l8_cast_transpose_bf16", "l8_cast_transpose_f16" },
        { "l8_cast_transpose_w_f32", "l8_cast_transpose_w_bf16", "l8_cast_transpose_w_f16" } };
    const int form = j.kf & KF_VEC_ROW ? 0 : 1;
    CUfunction f;
    reducer red = { 0 };
    L8_CHECK(l8i_kernel(ctx, "cast_transpose", entry[form][idt], &f));
    uint32_t kf = j.kf;
    uint64_t ntr = j.ntr, ntc = j.ntc, ntiles = ntr * ntc;
    unsigned grid = tile_grid(ntiles);
    const int direct = dbias && ntr <= DB_DIRECT_MAX_TILE_ROWS;
    if (direct) {                 /* the grid is the tile columns, exactly (one CTA for none) */
        kf |= KF_DB_DIRECT | (uint32_t)l8_tensor_dtype(dbias) << 6;
        grid = ntc ? (unsigned)ntc : 1u;
    }
    if (dbias && !direct && C > 0)  /* what launches l8_dbias_reduce below */
        L8_CHECK(reducer_get(ctx, &red));

    l8_status st = L8_OK;
    void *ws = NULL;
    if (dbias && !direct && ntr * (uint64_t)C > 0)
        L8_CHECK(l8_ctx_malloc(ctx, (size_t)(ntr * (uint64_t)C * sizeof(float)), s, &ws));
    if (!(flags & L8_CAST_ACCUMULATE_AMAX))
        L8_TRY(st, zero_amax(ctx, s, amax), out);
    {
        uint64_t a_in = dptr(x), a_out = dptr(y), a_outt = split ? 0 : dptr(yt);
        uint64_t a_scale = dptr(scale);
        uint64_t a_amax = dptr(amax), a_sinv = dptr(sinv), a_ws = dptr(direct ? db : ws);
        uint32_t rows = (uint32_t)R, cols = (uint32_t)C, ofmt = (uint32_t)fmt;
        uint32_t ldt = (uint32_t)j.ldt, ldo = (uint32_t)j.ldo;
        void *args[] = { &a_in, &a_out, &a_outt, &a_scale, &a_amax, &a_sinv, &a_ws,
                         &rows, &cols, &kf, &ofmt, &ldt, &ldo };
        L8_TRY(st, l8i_launch(s, f, grid, 1, 1, CTA_THREADS, 1, 1, 0, args), out);
    }
    if (dbias && !direct && C > 0)
        L8_TRY(st, dbias_reduce(s, &red, ws, db, ntr, C, l8_tensor_dtype(dbias)), out);
    if (split)
        st = l8_fp8_transpose(out, out_t, s);
out:
    if (ws) {
        /* stream-ordered: the block is reused only by later work on s */
        l8_status fst = l8_ctx_free(ctx, ws);
        if (st == L8_OK)
            st = fst;
    }
    return st;
}

static l8_status act_impl(const char *op, l8_act act, const l8_tensor *in, const l8_tensor *a,
                          l8_tensor *out, l8_tensor *out_t, l8_tensor *dbias, unsigned flags,
                          l8_stream *s);

/* out_t NULL with out given: the plain cast, as l8_fp8_cast_transpose_act */
l8_status l8_fp8_cast_transpose(const l8_tensor *in, l8_tensor *out, l8_tensor *out_t,
                                unsigned flags, l8_stream *s)
{
    return act_impl("l8_fp8_cast_transpose", L8_ACT_NONE, in, NULL, out, out_t, NULL, flags, s);
}

l8_status l8_fp8_cast_transpose_dbias(const l8_tensor *in, l8_tensor *out, l8_tensor *out_t,
                                      l8_tensor *dbias, unsigned flags, l8_stream *s)
{
    if (!dbias)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_fp8_cast_transpose_dbias: dbias is NULL");
    return cast_transpose_impl("l8_fp8_cast_transpose_dbias", in, out, out_t, dbias, flags, s);
}

/* ------------------------------------------------------------------------ */
/* cast + transpose through an activation                                    */

/* A new tensor of in's dtype and shape, its storage from the context's
 * allocator on s (tag), for the activation's output on the way to a cast. */
static l8_status scratch_like(const l8_tensor *in, const char *tag, l8_stream *s, l8_tensor **t)
{
    l8_dtype dt = l8_tensor_dtype(in);
    int nd = l8_tensor_ndim(in);
    int64_t shape[L8_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        shape[d] = l8_tensor_dim(in, d);
    l8_storage *st = NULL;
    l8_status ret = l8_storage_create_tagged(l8_tensor_ctx(in),
                                             (size_t)l8_tensor_numel(in) * l8_dtype_size(dt), s,
                                             tag, &st);
    if (ret == L8_OK)
        ret = l8_tensor_from_storage(st, 0, dt, nd, shape, NULL, t);
    l8_storage_release(st);       /* *t holds its own reference */
    return ret;
}

/* The activation (a NULL) or its gradient (a: the activation's input)
 * written to a scratch tensor of in's dtype and shape, then the plain cast:
 * l8_gelu / l8_gelu_backward and l8_fp8_cast_transpose(_dbias) or
 * l8_fp8_cast, as a caller would run them. For the host backend and the
 * shapes the fused kernel does not take. The arguments are checked. */
static l8_status act_unfused(const char *op, const l8_tensor *in, const l8_tensor *a,
                             l8_tensor *out, l8_tensor *out_t, l8_tensor *dbias, unsigned flags,
                             l8_stream *s)
{
    l8_tensor *t = NULL;
    l8_status ret = scratch_like(in, "cast.act", s, &t);
    if (ret == L8_OK)
        ret = a ? l8_gelu_backward(a, in, t, s) : l8_gelu(in, t, s);
    if (ret == L8_OK && !out_t)
        ret = l8_fp8_cast(t, out, flags, s);
    else if (ret == L8_OK)
        ret = cast_transpose_impl(op, t, out, out_t, dbias, flags, s);
    l8_tensor_destroy(t);         /* stream-ordered after the cast on s */
    return ret;
}

/* The _act ops: check everything, then one launch of the small-tile kernel
 * with the activation inside when the shape allows, else act_unfused. */
static l8_status act_impl(const char *op, l8_act act, const l8_tensor *in, const l8_tensor *a,
                          l8_tensor *out, l8_tensor *out_t, l8_tensor *dbias, unsigned flags,
                          l8_stream *s)
{
    if (act != L8_ACT_NONE && act != L8_ACT_GELU)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown activation %d", op, (int)act);
    if (!out && !out_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out and out_t are both NULL", op);
    if (dbias && !out_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dbias needs out_t", op);
    if (act == L8_ACT_NONE)       /* the plain cast (a Linear's every forward): checked there */
        return out_t ? cast_transpose_impl(op, in, out, out_t, dbias, flags, s)
                     : l8_fp8_cast(in, out, flags, s);
    ct_job j;
    L8_CHECK(ct_prepare(op, in, out, out_t, dbias, NULL, &j));
    if (flags & ~CAST_FLAGS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown flags 0x%x", op, flags);
    l8_ctx *ctx = j.ctx;
    if (a) {
        L8_CHECK(l8i_need_tensor(op, "a", a, ctx));
        L8_CHECK(need_hp(op, "a", a));
        if (l8_tensor_numel(a) != j.R * j.C)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a has %lld elements, dy has %lld", op,
                           (long long)l8_tensor_numel(a), (long long)(j.R * j.C));
    }
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *pa = NULL;
    if (a)
        L8_CHECK(l8_tensor_data(a, &pa));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, a, out, out_t, dbias }, 5));
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST || !sm_fits(&j, dbias, flags) ||
        (a && l8_tensor_dtype(a) != j.idt))
        return act_unfused(op, in, a, out, out_t, dbias, flags, s);
    L8_CHECK(l8i_ctx_bind(ctx));
    return cast_transpose_sm(&j, act, a != NULL, pa, dbias, flags, s);
}

l8_status l8i_cast_dact_prepare(const char *op, const l8_tensor *dy, const l8_tensor *a,
                                l8_tensor *out, l8_tensor *out_t, l8i_dact_out *o)
{
    if (!a)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a (the activation's input) is NULL", op);
    if (!out || !out_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out and out_t are both required", op);
    ct_job j;
    L8_CHECK(ct_prepare(op, dy, out, out_t, NULL, NULL, &j));
    L8_CHECK(l8i_need_tensor(op, "a", a, j.ctx));
    if (l8_tensor_dtype(a) != j.idt || l8_tensor_numel(a) != j.R * j.C)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a is %s with %lld elements; it needs dy's dtype"
                       " (%s) and %lld elements", op, l8_dtype_name(l8_tensor_dtype(a)),
                       (long long)l8_tensor_numel(a), l8_dtype_name(j.idt),
                       (long long)(j.R * j.C));
    void *pa = NULL;
    L8_CHECK(l8_tensor_data(a, &pa));
    *o = (l8i_dact_out){ .out = j.y, .out_t = j.yt, .ldo = j.ldo, .ldt = j.ldt,
                         .scale = l8_fp8_meta_scale(j.m), .amax = l8_fp8_meta_amax(j.m),
                         .scale_inv = l8_fp8_meta_scale_inv(j.m), .fmt = j.fmt, .a = pa };
    return L8_OK;
}

l8_status l8_fp8_cast_transpose_act(l8_act act, const l8_tensor *x, l8_tensor *out,
                                    l8_tensor *out_t, unsigned flags, l8_stream *s)
{
    return act_impl("l8_fp8_cast_transpose_act", act, x, NULL, out, out_t, NULL, flags, s);
}

l8_status l8_fp8_cast_transpose_dact(l8_act act, const l8_tensor *dy, const l8_tensor *a,
                                     l8_tensor *out, l8_tensor *out_t, l8_tensor *dbias,
                                     unsigned flags, l8_stream *s)
{
    static const char *op = "l8_fp8_cast_transpose_dact";
    if (!a)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a (the activation's input) is NULL", op);
    return act_impl(op, act, dy, a, out, out_t, dbias, flags, s);
}

/* ------------------------------------------------------------------------ */
/* the bias gradient alone                                                   */

/* l8_dbias_dact's column sums on the device: up to DBIAS_DIRECT_TILE_ROWS
 * 128-row tile rows one launch of ceil(cols / 32) CTAs of 1024 threads, each
 * walking its column block's tile rows and writing dbias (two tile rows a
 * round trip of loads: 256 x 512, a bias gradient of lean8-train, is one
 * round on 16 CTAs); more rows in CTAs of DBIAS_WS_TILE_ROWS tile rows that
 * write each tile row's partial sums into a scratch, then l8_dbias_reduce,
 * as the tile kernel does. The same sums in the same order either way. */
#define DBIAS_DIRECT_TILE_ROWS 8
#define DBIAS_WS_TILE_ROWS 8
#define KF_DBIAS_WS 0x20u     /* l8_dbias_*: partials per tile row into a scratch */

static l8_status dbias_launch(l8_ctx *ctx, l8_dtype idt, const void *x, int64_t R, int64_t C,
                              void *db, l8_dtype ddt, l8_stream *s)
{
    static const char *const entry[3] = { "l8_dbias_f32", "l8_dbias_bf16", "l8_dbias_f16" };
    if (C == 0)
        return L8_OK;
    CUfunction f;
    reducer red = { 0 };
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "cast_transpose_sm", entry[idt], &f));
    const uint64_t ntr = ((uint64_t)R + 127) / 128;
    const int ws_mode = ntr > DBIAS_DIRECT_TILE_ROWS;
    uint64_t per = (ntr + 65534) / 65535;           /* grid y stays within 65535 */
    uint32_t trpb = !ws_mode ? (uint32_t)(ntr ? ntr : 1)
                  : (uint32_t)(per > DBIAS_WS_TILE_ROWS ? per : DBIAS_WS_TILE_ROWS);
    unsigned gx = (unsigned)(((uint64_t)C + 31) / 32);
    unsigned gy = ws_mode ? (unsigned)((ntr + trpb - 1) / trpb) : 1u;
    void *ws = NULL;
    l8_status st = L8_OK;
    if (ws_mode) {
        L8_CHECK(reducer_get(ctx, &red));
        L8_CHECK(l8_ctx_malloc(ctx, (size_t)(ntr * (uint64_t)C * sizeof(float)), s, &ws));
    }
    {
        uint64_t a_in = dptr(x), a_out = dptr(ws_mode ? ws : db);
        uint32_t rows = (uint32_t)R, cols = (uint32_t)C;
        uint32_t kf = ws_mode ? KF_DBIAS_WS : (uint32_t)ddt << 6;
        void *args[] = { &a_in, &a_out, &rows, &cols, &kf, &trpb };
        L8_TRY(st, l8i_launch(s, f, gx, gy, 1, 1024, 1, 1, 0, args), out);
    }
    if (ws_mode)
        L8_TRY(st, dbias_reduce(s, &red, ws, db, ntr, C, ddt), out);
out:
    if (ws) {
        l8_status fst = l8_ctx_free(ctx, ws);   /* stream-ordered, as above */
        if (st == L8_OK)
            st = fst;
    }
    return st;
}

l8_status l8_dbias_dact(l8_act act, const l8_tensor *dy, const l8_tensor *a, l8_tensor *dbias,
                        l8_stream *s)
{
    static const char *op = "l8_dbias_dact";
    if (act != L8_ACT_NONE && act != L8_ACT_GELU)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown activation %d", op, (int)act);
    L8_CHECK(l8i_need_tensor(op, "dy", dy, NULL));
    l8_ctx *ctx = l8_tensor_ctx(dy);
    L8_CHECK(need_hp(op, "dy", dy));
    int64_t R, C;
    rows_cols(dy, &R, &C);
    L8_CHECK(l8i_need_tensor(op, "dbias", dbias, ctx));
    L8_CHECK(need_hp(op, "dbias", dbias));
    if (l8_tensor_numel(dbias) != C)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dbias has %lld elements, wanted %lld (cols)", op,
                       (long long)l8_tensor_numel(dbias), (long long)C);
    const int grad = act == L8_ACT_GELU;
    if (grad) {
        if (!a)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a (the activation's input) is NULL", op);
        L8_CHECK(l8i_need_tensor(op, "a", a, ctx));
        L8_CHECK(need_hp(op, "a", a));
        if (l8_tensor_numel(a) != R * C)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a has %lld elements, dy has %lld", op,
                           (long long)l8_tensor_numel(a), (long long)(R * C));
    }
    if (R > INT32_MAX || C > INT32_MAX)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: [%lld, %lld] is above the kernel's 2^31 limits",
                       op, (long long)R, (long long)C);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ dy, grad ? a : NULL, dbias }, 3));
    const int host = l8_ctx_backend(ctx) == L8_BACKEND_HOST;
    if (grad) {
        /* the gradient through a scratch of dy's dtype, as act_unfused (on
         * the GPU too: the dGELU arithmetic inside the sums' CTAs measured
         * slower next to GEMMs, docs/perf.md 2026-12-02 late night) */
        l8_tensor *t = NULL;
        l8_status ret = scratch_like(dy, "cast.dbias", s, &t);
        if (ret == L8_OK)
            ret = l8_gelu_backward(a, dy, t, s);
        if (ret == L8_OK)
            ret = l8_dbias_dact(L8_ACT_NONE, t, NULL, dbias, s);
        l8_tensor_destroy(t);
        return ret;
    }
    void *x, *db;
    L8_CHECK(l8_tensor_data(dy, &x));
    L8_CHECK(l8_tensor_data(dbias, &db));
    if (host)
        return dbias_host(x, l8_tensor_dtype(dy), R, C, db, l8_tensor_dtype(dbias));
    return dbias_launch(ctx, l8_tensor_dtype(dy), x, R, C, db, l8_tensor_dtype(dbias), s);
}

/* A group launch: up to GROUP_MAX tensors of one input dtype, one CTA per
 * tile (at least one per tensor: it writes scale_inv), descriptors as kernel
 * parameters (ptx/cast_transpose.ptx.in, the "many" entries); when every
 * tensor is small, the small-tile kernel's "many" entries
 * (ptx/cast_transpose_sm.ptx.in: one CTA per 128 x 32 block). */
#define GROUP_MAX 16
#define GROUP_DESC 64

static int group_sm(const ct_job *jobs, int n)
{
    for (int i = 0; i < n; i++)
        if (!sm_sized(&jobs[i]))
            return 0;
    return 1;
}

/* bias: NULL, or for the small-tile kernel n (f32 in, bf16 out) address
 * pairs of bias copies to make in the same launch (0, 0: none). */
static l8_status group_launch(l8_ctx *ctx, const ct_job *jobs, int n, const uint64_t (*bias)[2],
                              l8_stream *s)
{
    static const char *const entry[2][3] = {
        { "l8_cast_transpose_many_f32", "l8_cast_transpose_many_bf16",
          "l8_cast_transpose_many_f16" },
        { "l8_cast_transpose_sm_many_f32", "l8_cast_transpose_sm_many_bf16",
          "l8_cast_transpose_sm_many_f16" } };
    /* the small-tile kernel when every tensor is small enough for it alone */
    const int sm = group_sm(jobs, n);
    if (bias && !sm)
        return L8_FAIL(L8_ERR_INTERNAL, "cast group: bias copies need the small-tile kernel");
    CUfunction f;
    L8_CHECK(l8i_kernel(ctx, sm ? "cast_transpose_sm" : "cast_transpose", entry[sm][jobs[0].idt], &f));
    _Alignas(8) unsigned char desc[GROUP_MAX * GROUP_DESC];
    memset(desc, 0xff, sizeof desc);              /* unused: first CTA 0xffffffff */
    uint32_t cta = 0;
    for (int i = 0; i < n; i++) {
        const ct_job *j = &jobs[i];
        uint64_t p[6] = { dptr(j->x), dptr(j->y), dptr(j->yt), dptr(l8_fp8_meta_scale(j->m)),
                          dptr(l8_fp8_meta_amax(j->m)), dptr(l8_fp8_meta_scale_inv(j->m)) };
        uint32_t kf = sm ? (j->R % 8 == 0 && aligned(j->yt, 8) ? KF_SM_VEC_T8 : 0u) : j->kf;
        uint32_t w[4] = { (uint32_t)j->R, (uint32_t)j->C, kf | (uint32_t)j->fmt << 8, cta };
        memcpy(desc + i * GROUP_DESC, p, sizeof p);
        memcpy(desc + i * GROUP_DESC + sizeof p, w, sizeof w);
        /* tiles, or column blocks of 32 x tile rows (sm) */
        uint64_t nc = sm ? j->ntr * (uint64_t)((j->C + 31) / 32 ? (j->C + 31) / 32 : 1)
                         : j->ntr * j->ntc;
        cta += (uint32_t)(nc ? nc : 1);
    }
    _Alignas(8) uint64_t bdesc[GROUP_MAX][2];
    memset(bdesc, 0, sizeof bdesc);
    if (bias)
        memcpy(bdesc, bias, (size_t)n * sizeof bdesc[0]);
    void *args[] = { desc, bdesc };            /* the tile kernel takes desc alone */
    return l8i_launch(s, f, cta, 1, 1, sm ? 512u : CTA_THREADS, 1, 1, 0, args);
}

/* Check the n tensors of a cast group (every one of one context, no shared
 * meta) and fill jobs[0..n). Nothing is enqueued. */
static l8_status many_prepare(const char *op, int n, const l8_tensor *const *in,
                              l8_tensor *const *out, l8_tensor *const *out_t, ct_job *jobs)
{
    for (int i = 0; i < n; i++) {
        l8_status st = ct_prepare(op, in[i], out ? out[i] : NULL, out_t[i], NULL,
                                  i ? jobs[0].ctx : NULL, &jobs[i]);
        if (st != L8_OK)
            return l8i_fail_item(st, "tensor", i);
        if (jobs[i].ldt != jobs[i].R || jobs[i].ldo != jobs[i].C)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: tensor %d's %s is row-padded; the group op "
                           "needs contiguous tensors (l8_fp8_cast_transpose takes padded ones)",
                           op, i, jobs[i].ldt != jobs[i].R ? "out_t" : "out");
        for (int k = 0; k < i; k++)
            if (jobs[k].m == jobs[i].m)
                return L8_FAIL(L8_ERR_INVALID_ARG, "%s: tensors %d and %d share a meta (each "
                               "tensor's amax and scale_inv are its own)", op, k, i);
    }
    return L8_OK;
}

/* The bias pairs of a cast group as (in, out) device addresses for the
 * small-tile kernel, when every one can go there (contiguous, of ctx, f32 ->
 * bf16, rows of its tensor; both NULL: none): 1, else 0 (the caller converts). */
static int group_bias(l8_ctx *ctx, const ct_job *jobs, int n, const l8_tensor *const *bias_in,
                      l8_tensor *const *bias_out, uint64_t (*bias)[2])
{
    for (int i = 0; i < n; i++) {
        const l8_tensor *bi = bias_in[i];
        l8_tensor *bo = bias_out[i];
        void *pi = NULL, *po = NULL;
        bias[i][0] = bias[i][1] = 0;
        if (!bi && !bo)
            continue;
        if (!bi || !bo || l8_tensor_ctx(bi) != ctx || l8_tensor_ctx(bo) != ctx ||
            !l8_tensor_is_contiguous(bi) || !l8_tensor_is_contiguous(bo) ||
            l8_tensor_dtype(bi) != L8_F32 || l8_tensor_dtype(bo) != L8_BF16 ||
            l8_tensor_numel(bi) != jobs[i].R || l8_tensor_numel(bo) != jobs[i].R ||
            l8_tensor_data(bi, &pi) != L8_OK || l8_tensor_data(bo, &po) != L8_OK)
            return 0;
        bias[i][0] = dptr(pi);
        bias[i][1] = dptr(po);
    }
    return 1;
}

/* l8_fp8_cast_transpose_many, and with bias_in / bias_out the bias copies
 * of l8i_fp8_cast_transpose_many_bias (*folded = 1 when they were made). */
static l8_status many_impl(int n, const l8_tensor *const *in, l8_tensor *const *out,
                           l8_tensor *const *out_t, const l8_tensor *const *bias_in,
                           l8_tensor *const *bias_out, unsigned flags, l8_stream *s, int *folded)
{
    static const char *op = "l8_fp8_cast_transpose_many";
    *folded = 0;
    if (n < 1 || n > L8_CAST_MANY_MAX || !in || !out_t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: n is %d (1..%d) or in / out_t is NULL", op, n,
                       L8_CAST_MANY_MAX);
    if (flags & ~L8_CAST_ACCUMULATE_AMAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown flags 0x%x", op, flags);
    ct_job jobs[L8_CAST_MANY_MAX];
    L8_CHECK(many_prepare(op, n, in, out, out_t, jobs));
    l8_ctx *ctx = jobs[0].ctx;
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    L8_CHECK(l8i_tensors_use(s, in, n));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const *)out_t, n));
    if (out) L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const *)out, n));
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (int i = 0; i < n; i++)
            L8_CHECK(ct_job_host(&jobs[i], L8_F32, flags));
        return L8_OK;
    }
    L8_CHECK(l8i_ctx_bind(ctx));
    if (!(flags & L8_CAST_ACCUMULATE_AMAX)) {
        float *amax[L8_CAST_MANY_MAX];
        for (int i = 0; i < n; i++)
            amax[i] = l8_fp8_meta_amax(jobs[i].m);
        L8_CHECK(zero_amaxes(ctx, s, amax, n));
    }
    /* the biases too: one launch of the small-tile group kernel for all */
    uint64_t bias[GROUP_MAX][2];
    int fold = bias_in && bias_out && n <= GROUP_MAX && group_sm(jobs, n);
    for (int i = 1; i < n && fold; i++)
        fold = jobs[i].idt == jobs[0].idt;
    if (fold && group_bias(ctx, jobs, n, bias_in, bias_out, bias)) {
        L8_CHECK(group_launch(ctx, jobs, n, (const uint64_t (*)[2])bias, s));
        *folded = 1;
        return L8_OK;
    }
    /* launches of consecutive tensors: one input dtype, <= GROUP_MAX of
     * them, <= MAX_TILE_CTAS tiles (a tensor above that goes alone, looped
     * over by the single-tensor kernel) */
    int first = 0;
    uint64_t tiles = 0;
    for (int i = 0; i <= n; i++) {
        uint64_t nt = 0;
        if (i < n) {
            nt = jobs[i].ntr * jobs[i].ntc;
            nt = nt ? nt : 1;
        }
        int flush = i == n || i - first == GROUP_MAX || jobs[i].idt != jobs[first].idt ||
                    tiles + nt > MAX_TILE_CTAS;
        if (flush && i > first) {
            if (i - first == 1 && tiles > MAX_TILE_CTAS) {
                L8_CHECK(l8_fp8_cast_transpose(in[first], out ? out[first] : NULL, out_t[first],
                                               L8_CAST_ACCUMULATE_AMAX, s));
            } else {
                L8_CHECK(group_launch(ctx, jobs + first, i - first, NULL, s));
            }
            first = i;
            tiles = 0;
        }
        tiles += nt;
    }
    return L8_OK;
}

l8_status l8_fp8_cast_transpose_many(int n, const l8_tensor *const *in, l8_tensor *const *out,
                                     l8_tensor *const *out_t, unsigned flags, l8_stream *s)
{
    int folded;
    return many_impl(n, in, out, out_t, NULL, NULL, flags, s, &folded);
}

l8_status l8i_fp8_cast_transpose_many_bias(int n, const l8_tensor *const *in,
                                           l8_tensor *const *out, l8_tensor *const *out_t,
                                           const l8_tensor *const *bias_in,
                                           l8_tensor *const *bias_out, unsigned flags,
                                           l8_stream *s, int *folded)
{
    return many_impl(n, in, out, out_t, bias_in, bias_out, flags, s, folded);
}

/* ------------------------------------------------------------------------ */
/* dequantize, transpose                                                     */

l8_status l8_fp8_dequantize(const l8_tensor *in, l8_tensor *out, l8_stream *s)
{
    static const char *op = "l8_fp8_dequantize";
    L8_CHECK(l8i_need_tensor(op, "in", in, NULL));
    l8_ctx *ctx = l8_tensor_ctx(in);
    L8_CHECK(l8i_need_tensor(op, "out", out, ctx));
    l8_fp8_meta *m;
    L8_CHECK(need_fp8(op, "in", in, &m));
    L8_CHECK(need_hp(op, "out", out));
    int64_t n = l8_tensor_numel(in);
    if (l8_tensor_numel(out) != n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: out has %lld elements, in has %lld", op,
                       (long long)l8_tensor_numel(out), (long long)n);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *x, *y;
    L8_CHECK(l8_tensor_data(in, &x));
    L8_CHECK(l8_tensor_data(out, &y));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, out }, 2));
    l8_dtype fmt = l8_tensor_dtype(in), odt = l8_tensor_dtype(out);
    float *sinv = l8_fp8_meta_scale_inv(m);

    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST)
        return l8_fp8_dequantize_host(x, (size_t)n, fmt, *sinv, y, odt);
    if (n == 0)
        return L8_OK;
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "dequantize", "l8_fp8_dequantize", &f));
    uint64_t nn = (uint64_t)n;
    uint64_t nvec = (aligned(x, 16) && aligned(y, 16)) ? nn / 16 : 0;
    uint64_t work = ((nvec ? nvec : nn) + CTA_THREADS - 1) / CTA_THREADS;
    unsigned grid;
    L8_CHECK(l8i_grid_for(ctx, work, OCC_DQ, &grid));
    uint64_t a_in = dptr(x), a_out = dptr(y), a_sinv = dptr(sinv);
    uint32_t ifmt = (uint32_t)fmt, otype = (uint32_t)odt;
    void *args[] = { &a_in, &a_out, &a_sinv, &nvec, &nn, &ifmt, &otype };
    return l8i_launch(s, f, grid, 1, 1, CTA_THREADS, 1, 1, 0, args);
}

l8_status l8_fp8_transpose(const l8_tensor *in, l8_tensor *out, l8_stream *s)
{
    static const char *op = "l8_fp8_transpose";
    L8_CHECK(l8i_need_tensor(op, "in", in, NULL));
    l8_ctx *ctx = l8_tensor_ctx(in);
    int64_t R, C, ld;
    rows_cols(in, &R, &C);
    L8_CHECK(l8i_need_padded(op, "out", out, ctx, C, R, "cols, rows of in", &ld));
    l8_dtype dt = l8_tensor_dtype(in);
    if (!(l8_dtype_is_fp8(dt) || dt == L8_U8) || l8_tensor_dtype(out) != dt)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: in and out must both be e4m3, e5m2 or u8 "
                       "(got %s and %s)", op, l8_dtype_name(dt),
                       l8_dtype_name(l8_tensor_dtype(out)));
    if (R > INT32_MAX || C > INT32_MAX || ld > INT32_MAX ||
        ((R + 127) / 128) * ((C + 127) / 128) > INT32_MAX)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: [%lld, %lld] is above the kernel's 2^31 limits",
                       op, (long long)R, (long long)C);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *x, *y;
    L8_CHECK(l8_tensor_data(in, &x));
    L8_CHECK(l8_tensor_data(out, &y));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, out }, 2));

    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        const uint8_t *a = x;
        uint8_t *b = y;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                b[c * ld + r] = a[r * C + c];
        pad_host(b, R, C, ld, 0);
        return L8_OK;
    }
    if (R == 0 || C == 0)
        return L8_OK;
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "transpose", "l8_transpose_b8", &f));
    uint32_t kf = 0;
    if (C % 16 == 0 && aligned(x, 16))
        kf |= KF_VEC_ROW;
    if (C % 8 == 0 && aligned(x, 8))
        kf |= KF_VEC_IN8;
    if (aligned(x, 4))
        kf |= KF_IN_WORDS;
    if (ld % 16 == 0 && aligned(y, 16))   /* row-padded: always */
        kf |= KF_VEC_T16;
    uint64_t ntiles = (uint64_t)((R + 127) / 128) * (uint64_t)((C + 127) / 128);
    unsigned grid = tile_grid(ntiles);
    if (l8i_transpose_max_ctas > 0 && grid > (unsigned)l8i_transpose_max_ctas)
        grid = (unsigned)l8i_transpose_max_ctas;
    uint64_t a_in = dptr(x), a_out = dptr(y);
    uint32_t rows = (uint32_t)R, cols = (uint32_t)C, ldt = (uint32_t)ld;
    void *args[] = { &a_in, &a_out, &rows, &cols, &kf, &ldt };
    return l8i_launch(s, f, grid, 1, 1, CTA_THREADS, 1, 1, 0, args);
}

/* ------------------------------------------------------------------------ */
/* delayed-scaling update                                                    */

static l8_status need_vec(const char *name, const l8_tensor *t, l8_ctx *ctx, int64_t n,
                          uint32_t *stride)
{
    static const char *op = "l8_fp8_scale_update";
    if (!t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
    if (l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s belongs to another context", op, name);
    if (l8_tensor_dtype(t) != L8_F32 || l8_tensor_ndim(t) != 1 || l8_tensor_dim(t, 0) != n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s must be a 1-D f32 tensor of %lld elements", op,
                       name, (long long)n);
    int64_t st = l8_tensor_stride(t, 0);
    if (st < 0 || st > INT32_MAX)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: %s has stride %lld", op, name, (long long)st);
    *stride = (uint32_t)st;
    return L8_OK;
}

/* Host reference, tensor by tensor, as ptx/scale_update.ptx. */
static void scale_update_host(float *hist, int64_t H, float *amax, uint32_t as, float *scale,
                              uint32_t ss, float *sinv, uint32_t is, const float *fmax,
                              uint32_t fs, int64_t n, int recent, int reset, float mdiv)
{
    if (!hist) H = 0;             /* no history: the caller's H is 0 already */
    for (int64_t t = 0; t < n; t++) {
        float nv = amax[t * as];
        uint32_t m = l8_amax_bits(nv);
        int fin = m < 0x7f800000u;
        float *h = hist ? hist + t * H : NULL;
        if (fin && H > 0) {
            memmove(h + 1, h, (size_t)(H - 1) * sizeof *h);
            h[0] = nv;
        }
        uint32_t a = m;
        if (fin && !recent)
            for (int64_t i = 0; i < H; i++) {
                uint32_t b = l8_amax_bits(h[i]);
                a = b > a ? b : a;
            }
        if (fin && a < 0x7f800000u && a != 0) {
            union { uint32_t u; float f; } av = { a };
            float sc = (fmax[t * fs] / av.f) / mdiv;
            if (sc == INFINITY)
                sc = FLT_MAX;
            if (sc != 0.0f) {
                scale[t * ss] = sc;
                if (sinv)
                    sinv[t * is] = 1.0f / sc;
            }
        }
        if (reset)
            amax[t * as] = 0.0f;
    }
}

void l8_fp8_scale_update_config_init(l8_fp8_scale_update_config *cfg)
{
    if (cfg) *cfg = (l8_fp8_scale_update_config)L8_FP8_SCALE_UPDATE_CONFIG_INIT;
}

l8_status l8_fp8_scale_update(l8_tensor *amax_history, l8_tensor *amax, l8_tensor *scale,
                              l8_tensor *scale_inv, const l8_tensor *fp8_max,
                              const l8_fp8_scale_update_config *cfg, l8_stream *s)
{
    return l8i_fp8_scale_update_metas(amax_history, amax, scale, scale_inv, fp8_max, cfg, NULL, 0,
                                      s);
}

l8_status l8i_fp8_scale_update_metas(l8_tensor *amax_history, l8_tensor *amax, l8_tensor *scale,
                                     l8_tensor *scale_inv, const l8_tensor *fp8_max,
                                     const l8_fp8_scale_update_config *cfg, const void *table,
                                     unsigned meta_flags, l8_stream *s)
{
    static const char *op = "l8_fp8_scale_update";
    l8_fp8_scale_update_config c = L8_FP8_SCALE_UPDATE_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, op, "L8_FP8_SCALE_UPDATE_CONFIG_INIT");
    if (c.amax_compute != L8_AMAX_MAX_HISTORY && c.amax_compute != L8_AMAX_MOST_RECENT)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown amax_compute %d", op, (int)c.amax_compute);
    if (!isfinite(c.margin))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: margin is not finite", op);
    if (!amax)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: amax is NULL", op);
    l8_ctx *ctx = l8_tensor_ctx(amax);
    int64_t n = l8_tensor_ndim(amax) == 1 ? l8_tensor_dim(amax, 0) : -1;
    uint32_t as, ss, is = 0, fs;
    L8_CHECK(need_vec("amax", amax, ctx, n, &as));
    L8_CHECK(need_vec("scale", scale, ctx, n, &ss));
    if (scale_inv)
        L8_CHECK(need_vec("scale_inv", scale_inv, ctx, n, &is));
    L8_CHECK(need_vec("fp8_max", fp8_max, ctx, n, &fs));
    int64_t H = 0;
    if (amax_history) {
        L8_CHECK(l8i_need_tensor(op, "amax_history", amax_history, ctx));
        if (l8_tensor_dtype(amax_history) != L8_F32 || l8_tensor_ndim(amax_history) != 2 ||
            l8_tensor_dim(amax_history, 0) != n || l8_tensor_dim(amax_history, 1) < 1)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: amax_history must be f32 [%lld, H >= 1]", op,
                           (long long)n);
        H = l8_tensor_dim(amax_history, 1);
    } else if (c.amax_compute != L8_AMAX_MOST_RECENT) {
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: amax_history is NULL but amax_compute is "
                       "L8_AMAX_MAX_HISTORY", op);
    }
    if (n > INT32_MAX || H > INT32_MAX)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: %lld tensors x %lld history is too large", op,
                       (long long)n, (long long)H);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *ph = NULL, *pa, *ps, *pi = NULL, *pf;
    if (amax_history)
        L8_CHECK(l8_tensor_data(amax_history, &ph));
    L8_CHECK(l8_tensor_data(amax, &pa));
    L8_CHECK(l8_tensor_data(scale, &ps));
    if (scale_inv)
        L8_CHECK(l8_tensor_data(scale_inv, &pi));
    L8_CHECK(l8_tensor_data(fp8_max, &pf));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ amax_history, amax, scale,
                                                            scale_inv, fp8_max }, 5));
    float mdiv = exp2f(c.margin);
    int recent = c.amax_compute == L8_AMAX_MOST_RECENT;

    if (meta_flags & ~(unsigned)(L8I_SU_GATHER | L8I_SU_SCATTER) ||
        (meta_flags && (!table || l8_ctx_backend(ctx) == L8_BACKEND_HOST)))
        return L8_FAIL(L8_ERR_INTERNAL, "%s: meta flags 0x%x need a device table", op,
                       meta_flags);
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        scale_update_host(ph, H, pa, as, ps, ss, pi, is, pf, fs, n, recent, c.reset_amax != 0,
                          mdiv);
        return L8_OK;
    }
    if (n == 0)
        return L8_OK;
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "scale_update", "l8_fp8_scale_update", &f));
    uint64_t a_h = dptr(ph), a_a = dptr(pa), a_s = dptr(ps), a_i = dptr(pi), a_f = dptr(pf);
    uint64_t a_t = dptr(table);
    uint32_t hlen = (uint32_t)H, kflags = (recent ? 1u : 0u) | (c.reset_amax ? 2u : 0u) |
                                          (meta_flags & L8I_SU_GATHER ? 4u : 0u) |
                                          (meta_flags & L8I_SU_SCATTER ? 8u : 0u);
    void *args[] = { &a_h, &hlen, &a_a, &as, &a_s, &ss, &a_i, &is, &a_f, &fs, &kflags, &mdiv,
                     &a_t };
    return l8i_launch(s, f, (unsigned)n, 1, 1, SU_THREADS, 1, 1, 0, args);
}
