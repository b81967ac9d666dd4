/* interleave.c - l8i_interleave: the rearrangement between what NCCL moves
 * (contiguous per-rank blocks) and a tensor split along its last dimension.
 *
 *   blocked     [world][rows][chunk]   all-gather output, reduce-scatter input
 *   interleaved [rows][world][chunk]   the [rows, world x cols] tensor
 *
 * An all-gather along the last dimension is the plain all-gather into a
 * blocked buffer followed by L8I_INTERLEAVE; a reduce-scatter along the last
 * dimension is L8I_DEINTERLEAVE followed by the plain reduce-scatter.
 * Concatenating along the first dimension instead (what an all-gather does
 * by itself) scrambles the tensor: the bug this exists to rule out.
 *
 * CUDA: ptx/interleave.ptx.in. Where 16-byte words fit (chunk and both
 * bases multiples of 16), or chunks are short (< IL_SEG_MIN bytes),
 * l8_interleave walks the words of the interleaved side in order, with the
 * widest word (16/8/4/2/1 bytes) that divides chunk and both bases, and
 * 32-bit index math through precomputed division magic. Invariant of every
 * launch: n = rows' x world' x cw <= launch_words (<= 2^30), so a word index
 * never reaches 2^31 where the magic stops being exact. Other chunks go to
 * l8_interleave_seg, a warp per (row, rank) segment with 16-byte stores at
 * any alignment (the narrow words ran at 0.46-0.76 x a device copy); its
 * launches hold at most launch_words segments. Bigger problems are cut into
 * sub-rectangles of ranks and rows; a chunk of more than launch_words words
 * (segment kernel: 16 x launch_words bytes) is a driver copy per (row, rank).
 */
#include <stdint.h>
#include <string.h>
#include "runtime/internal.h"

#define IL_THREADS 256u
#define IL_WORDS_PER_THREAD 4u          /* the kernel's unroll */
#define IL_OCC 4u                       /* resident CTAs per SM (48 registers, ptxas -v) */
#define IL_LAUNCH_WORDS (1u << 30)
#define IL_SEG_MIN 64u                  /* shorter chunks stay on the word kernel */
#define IL_SEG_OCC 8u                   /* segment kernel: 38 registers (ptxas -v) */

static uint32_t g_launch_words = IL_LAUNCH_WORDS;

void l8i_interleave_set_launch_words(uint32_t words)
{
    g_launch_words = words && words < IL_LAUNCH_WORDS ? words : IL_LAUNCH_WORDS;
}

/* Division magic for 1 <= d < 2^31 (see ptx/interleave.ptx.in): for x < 2^31,
 * x / d == (mulhi(x, m) + x) >> l. */
static void div_magic(uint32_t d, uint32_t *m, uint32_t *l)
{
    uint32_t s = 0;
    while (((uint64_t)1 << s) < d) s++;
    *l = s;
    *m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / d + 1);
}

/* log2 of the widest word (16 bytes down to 1) dividing chunk and both bases. */
static unsigned word_shift(size_t chunk, uintptr_t a, uintptr_t b)
{
    uintptr_t x = (uintptr_t)chunk | a | b;
    unsigned sh = 4;
    while (sh && (x & (((uintptr_t)1 << sh) - 1))) sh--;
    return sh;
}

/* Byte offsets of (row r, rank w) on each side. */
static size_t off_blocked(int64_t w, int64_t r, int64_t rows, size_t chunk)
{
    return ((size_t)w * (size_t)rows + (size_t)r) * chunk;
}

static size_t off_interleaved(int64_t w, int64_t r, int64_t world, size_t chunk)
{
    return ((size_t)r * (size_t)world + (size_t)w) * chunk;
}

static void host_interleave(uint8_t *dst, const uint8_t *src, int64_t world, int64_t rows,
                            size_t chunk, l8i_interleave_dir dir)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t w = 0; w < world; w++) {
            size_t b = off_blocked(w, r, rows, chunk), i = off_interleaved(w, r, world, chunk);
            if (dir == L8I_INTERLEAVE) memcpy(dst + i, src + b, chunk);
            else memcpy(dst + b, src + i, chunk);
        }
}

/* Chunks too long for one launch's 32-bit word index: one driver copy each
 * (every copy is more than 2^30 words, so the per-copy cost is nothing). */
static l8_status copy_per_chunk(l8_stream *s, uint8_t *dst, const uint8_t *src, int64_t world,
                                int64_t rows, size_t chunk, l8i_interleave_dir dir)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t w = 0; w < world; w++) {
            size_t b = off_blocked(w, r, rows, chunk), i = off_interleaved(w, r, world, chunk);
            if (dir == L8I_INTERLEAVE) L8_CHECK(l8_memcpy_dtod(s, dst + i, src + b, chunk));
            else L8_CHECK(l8_memcpy_dtod(s, dst + b, src + i, chunk));
        }
    return L8_OK;
}

/* One kernel for the whole problem, cut into sub-rectangles of ranks and
 * rows of at most launch_words units: words of the word kernel (cw a chunk),
 * or segments of the segment kernel (one a chunk). */
static l8_status cuda_interleave(l8_stream *s, uint8_t *dst, const uint8_t *src, int64_t world,
                                 int64_t rows, size_t chunk, l8i_interleave_dir dir)
{
    uint32_t vshift = word_shift(chunk, (uintptr_t)dst, (uintptr_t)src);
    const int seg = vshift < 4 && chunk >= IL_SEG_MIN;
    uint64_t cw = seg ? 1 : (uint64_t)chunk >> vshift, limit = g_launch_words;
    if (seg ? chunk > 16 * limit || chunk >= ((size_t)1 << 31) : cw > limit)
        return copy_per_chunk(s, dst, src, world, rows, chunk, dir);
    l8_ctx *ctx = l8_stream_ctx(s);
    CUfunction f;
    unsigned nsm;
    L8_CHECK(l8i_kernel(ctx, "interleave", seg ? "l8_interleave_seg" : "l8_interleave", &f));
    L8_CHECK(l8i_sm_count(ctx, &nsm));
    uint8_t *ilv = dir == L8I_INTERLEAVE ? dst : (uint8_t *)src;
    uint8_t *blk = dir == L8I_INTERLEAVE ? (uint8_t *)src : dst;
    uint64_t irow = (uint64_t)world * chunk, blk_ld = (uint64_t)rows * chunk;
    uint64_t wpl = (uint64_t)world < limit / cw ? (uint64_t)world : limit / cw;
    uint64_t rpl = limit / (wpl * cw);
    if (rpl > (uint64_t)rows) rpl = (uint64_t)rows;
    uint32_t cw32 = (uint32_t)cw, cw_m, cw_l, chunk32 = (uint32_t)chunk, dir32 = (uint32_t)dir;
    div_magic(cw32, &cw_m, &cw_l);
    /* units a CTA takes in a round, CTAs resident an SM (ptxas -v registers) */
    const uint64_t per_cta = seg ? IL_THREADS / 32 : IL_THREADS * IL_WORDS_PER_THREAD;
    const uint64_t cap = (uint64_t)nsm * (seg ? IL_SEG_OCC : IL_OCC);
    /* Sub-rectangles of ranks [w0, w0 + nw) x rows [r0, r0 + nr): one in
     * practice. Bases move by whole chunks, so the word width still fits. */
    for (uint64_t w0 = 0; w0 < (uint64_t)world; w0 += wpl) {
        uint64_t nw = (uint64_t)world - w0 < wpl ? (uint64_t)world - w0 : wpl;
        uint32_t rw = (uint32_t)(nw * cw), rw_m, rw_l;  /* units of a row (segment kernel: world') */
        div_magic(rw, &rw_m, &rw_l);
        for (uint64_t r0 = 0; r0 < (uint64_t)rows; r0 += rpl) {
            uint64_t nr = (uint64_t)rows - r0 < rpl ? (uint64_t)rows - r0 : rpl;
            uint32_t n = (uint32_t)(nr * rw);
            uint64_t a_ilv = (uint64_t)(uintptr_t)(ilv + r0 * irow + w0 * chunk);
            uint64_t a_blk = (uint64_t)(uintptr_t)(blk + w0 * blk_ld + r0 * chunk);
            void *wargs[] = { &a_ilv, &a_blk, &n, &rw, &rw_m, &rw_l, &cw32, &cw_m, &cw_l,
                              &irow, &blk_ld, &vshift, &dir32 };
            void *sargs[] = { &a_ilv, &a_blk, &n, &rw, &rw_m, &rw_l, &chunk32, &irow, &blk_ld,
                              &dir32 };
            uint64_t blocks = ((uint64_t)n + per_cta - 1) / per_cta;
            unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
            L8_CHECK(l8i_launch(s, f, grid, 1, 1, IL_THREADS, 1, 1, 0, seg ? sargs : wargs));
        }
    }
    return L8_OK;
}

l8_status l8i_interleave(l8_stream *s, void *dst, const void *src, int64_t world, int64_t rows,
                         size_t chunk, l8i_interleave_dir dir)
{
    static const char *fn = "l8i_interleave";
    if (!s || !dst || !src)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                       !s ? "the stream" : !dst ? "dst" : "src");
    if (world < 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: world %lld (at least 1)", fn, (long long)world);
    if (rows < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: rows %lld (at least 0)", fn, (long long)rows);
    if (chunk < 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: chunk 0 bytes (at least 1)", fn);
    if (dir != L8I_INTERLEAVE && dir != L8I_DEINTERLEAVE)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: direction %d is neither L8I_INTERLEAVE nor "
                       "L8I_DEINTERLEAVE", fn, (int)dir);
    size_t total;
    if (__builtin_mul_overflow((size_t)world, (size_t)rows, &total) ||
        __builtin_mul_overflow(total, chunk, &total) || total > (size_t)INT64_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %lld x %lld x %zu bytes is too large", fn,
                       (long long)world, (long long)rows, chunk);
    uintptr_t d = (uintptr_t)dst, x = (uintptr_t)src;
    if (total && (d >= x ? d - x : x - d) < total)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst [%p, +%zu) overlaps src [%p, +%zu)", fn,
                       dst, total, src, total);
    if (total == 0) return L8_OK;
    if (l8_ctx_backend(l8_stream_ctx(s)) != L8_BACKEND_CUDA) {
        host_interleave(dst, src, world, rows, chunk, dir);
        return L8_OK;
    }
    return cuda_interleave(s, dst, src, world, rows, chunk, dir);
}
