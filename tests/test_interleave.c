/* test_interleave.c - l8i_interleave, the rearrangement between per-rank
 * blocks [world][rows][chunk] and the last-dimension layout
 * [rows][world][chunk]:
 *   host: the host path against a plain byte loop (an independent index
 *         formula), byte for byte over world 1..5, rows 0/1/7/70001, chunks
 *         of 1..4100 bytes, misaligned bases, both directions, round trips,
 *         with poisoned destinations and guard bytes around them; argument
 *         errors leave the destination untouched.
 *   gpu:  the kernel against the host path byte for byte on the same cases,
 *         a few large ones, and the same cases cut into many launches (and
 *         driver copies) by a small launch limit.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/internal.h"

#define GUARD 32                      /* bytes of poison before and after a region */

typedef struct il_case {
    int64_t world, rows;
    size_t chunk;
    unsigned soff, doff;              /* bytes past a 16-aligned base: 0..15 */
} il_case;

static size_t total_of(const il_case *c) { return (size_t)(c->world * c->rows) * c->chunk; }
static size_t span_of(const il_case *c) { return total_of(c) + 2 * GUARD + 16; }

/* Poison that differs from byte to byte, so a skipped byte shows. */
static void poison(uint8_t *p, size_t n, uint8_t salt)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(0xA5 ^ salt ^ (i * 131));
}

/* dst[t] for every byte t of the destination, from the layouts' definition. */
static void ref_loop(uint8_t *dst, const uint8_t *src, const il_case *c, l8i_interleave_dir dir)
{
    size_t row = (size_t)c->world * c->chunk, blk = (size_t)c->rows * c->chunk, n = total_of(c);
    for (size_t t = 0; t < n; t++) {
        size_t from;
        if (dir == L8I_INTERLEAVE) {          /* dst [r][w][b] <- src [w][r][b] */
            size_t r = t / row, w = t % row / c->chunk, b = t % c->chunk;
            from = w * blk + r * c->chunk + b;
        } else {                              /* dst [w][r][b] <- src [r][w][b] */
            size_t w = t / blk, r = t % blk / c->chunk, b = t % c->chunk;
            from = r * row + w * c->chunk + b;
        }
        dst[t] = src[from];
    }
}

/* Run one direction on ctx: src (total bytes) placed at GUARD + soff of a
 * poisoned buffer, dst at GUARD + doff of another; out gets dst's whole
 * buffer (span bytes) back. The op runs on the comm stream, as the
 * communicator calls it. */
static void run_dir(l8_ctx *ctx, const il_case *c, l8i_interleave_dir dir, const uint8_t *src,
                    uint8_t *out)
{
    size_t n = total_of(c), span = span_of(c);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMM);
    uint8_t *sd = NULL, *dd = NULL, *pz = l8t_xmalloc(span);
    L8_CK(l8_ctx_malloc(ctx, span, s, (void **)&sd));
    L8_CK(l8_ctx_malloc(ctx, span, s, (void **)&dd));
    ck_assert_msg(((uintptr_t)sd & 15) == 0 && ((uintptr_t)dd & 15) == 0,
                  "allocations not 16-aligned");
    poison(pz, span, 0x11);
    L8_CK(l8_memcpy_htod(s, sd, pz, span));
    L8_CK(l8_memcpy_htod(s, sd + GUARD + c->soff, src, n));
    poison(pz, span, 0x5C);
    L8_CK(l8_memcpy_htod(s, dd, pz, span));
    L8_CK(l8i_interleave(s, dd + GUARD + c->doff, sd + GUARD + c->soff, c->world, c->rows,
                         c->chunk, dir));
    L8_CK(l8_memcpy_dtoh(s, out, dd, span));
    L8_CK(l8_stream_synchronize(s));
    L8_CK(l8_ctx_free(ctx, sd));
    L8_CK(l8_ctx_free(ctx, dd));
    free(pz);
}

static void describe(char *buf, size_t n, const il_case *c, l8i_interleave_dir dir)
{
    snprintf(buf, n, "%s world %lld rows %lld chunk %zu soff %u doff %u (seed %llu)",
             dir == L8I_INTERLEAVE ? "interleave" : "deinterleave", (long long)c->world,
             (long long)c->rows, c->chunk, c->soff, c->doff, (unsigned long long)l8_test_seed());
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return n;
}

/* One case, both directions and the round trip. host == NULL: ctx is the
 * host backend and the reference is the plain loop; else ctx is a GPU and
 * the reference is the host path on `host`. */
static void one_case(l8_ctx *ctx, l8_ctx *host, const il_case *c, uint64_t salt)
{
    size_t n = total_of(c), span = span_of(c);
    l8_rng r;
    l8_rng_init(&r, salt);
    uint8_t *src = l8t_xmalloc(n), *got = l8t_xmalloc(span), *want = l8t_xmalloc(span);
    uint8_t *back = l8t_xmalloc(span);
    for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(l8_rng_next(&r) >> 24);
    for (int d = 0; d < 2; d++) {
        l8i_interleave_dir dir = d ? L8I_DEINTERLEAVE : L8I_INTERLEAVE;
        char what[160];
        describe(what, sizeof what, c, dir);
        run_dir(ctx, c, dir, src, got);
        if (host) {
            run_dir(host, c, dir, src, want);
        } else {
            poison(want, span, 0x5C);
            ref_loop(want + GUARD + c->doff, src, c, dir);
        }
        size_t at = first_diff(got, want, span);
        ck_assert_msg(at == span, "%s: byte %zd of the destination (guard %d) is %02x, wanted %02x",
                      what, (ptrdiff_t)at - GUARD - (ptrdiff_t)c->doff, GUARD,
                      at < span ? got[at] : 0, at < span ? want[at] : 0);
        /* the round trip: the other direction undoes this one */
        il_case rc = *c;
        rc.soff = c->doff;
        rc.doff = c->soff;
        run_dir(ctx, &rc, d ? L8I_INTERLEAVE : L8I_DEINTERLEAVE, got + GUARD + c->doff, back);
        ck_assert_msg(memcmp(back + GUARD + c->soff, src, n) == 0, "%s: the round trip differs",
                      what);
    }
    free(src); free(got); free(want); free(back);
}

/* The sweep both suites run: every world, row count, chunk and offset pair
 * (rows = 70001 only with chunks up to 48 bytes, to keep it quick). */
static void sweep(l8_ctx *ctx, l8_ctx *host)
{
    static const int64_t rows[] = { 0, 1, 7, 70001 };
    /* 64 and more without 16-byte words: the segment kernel (64: at its
     * threshold; 67 and 130: a head, blocks and a tail; 2730: 2-byte words) */
    static const size_t chunks[] = { 1, 2, 3, 6, 16, 18, 48, 4096 + 4, 64, 67, 130, 2730 };
    static const unsigned offs[][2] = { { 0, 0 }, { 1, 3 }, { 8, 0 }, { 6, 2 } };
    uint64_t salt = 1;
    for (int64_t w = 1; w <= 5; w++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
                for (size_t oi = 0; oi < 4; oi++) {
                    il_case c = { w, rows[ri], chunks[ci], offs[oi][0], offs[oi][1] };
                    if (c.rows > 7 && (c.chunk > 48 || oi % 2)) continue;
                    if (c.rows > 7 && l8_test_quick() && (c.world != 3 || c.chunk != 3)) continue;
                    one_case(ctx, host, &c, salt++);
                }
}

START_TEST(test_interleave_host)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    sweep(ctx, NULL);
    l8t_ctx_finish(ctx);
}
END_TEST

/* Every argument error is L8_ERR_INVALID_ARG and writes nothing. */
START_TEST(test_interleave_errors)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMM);
    uint8_t buf[256], want[256];
    poison(buf, sizeof buf, 1);
    memcpy(want, buf, sizeof buf);
    uint8_t *a = buf, *b = buf + 128;           /* 2 x 4 x 8 = 64 bytes each */
    const l8i_interleave_dir I = L8I_INTERLEAVE;
    L8_CK_ST(l8i_interleave(NULL, b, a, 2, 4, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, NULL, a, 2, 4, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, NULL, 2, 4, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, NULL, a, 2, 0, 8, I), L8_ERR_INVALID_ARG);     /* even when empty */
    L8_CK_ST(l8i_interleave(s, b, a, 0, 4, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, -3, 4, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, 2, -1, 8, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, 2, 4, 0, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, 2, 4, 8, (l8i_interleave_dir)2), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, 2, 4, 8, (l8i_interleave_dir)-1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, a + 63, a, 2, 4, 8, I), L8_ERR_INVALID_ARG);    /* overlap */
    L8_CK_ST(l8i_interleave(s, a, a + 63, 2, 4, 8, L8I_DEINTERLEAVE), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, a, a, 1, 1, 1, I), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8i_interleave(s, b, a, INT64_C(1) << 40, INT64_C(1) << 40, 1 << 20, I),
             L8_ERR_INVALID_ARG);                                              /* size_t overflow */
    L8_CK_ST(l8i_interleave(s, b, a, INT64_MAX, 2, 1, I), L8_ERR_INVALID_ARG);
    ck_assert_msg(memcmp(buf, want, sizeof buf) == 0, "a refused call wrote");
    L8_CK(l8i_interleave(s, b, a, 2, 0, 8, I));                                /* nothing to move */
    L8_CK(l8i_interleave(s, b, a, 7, 0, 1, L8I_DEINTERLEAVE));
    ck_assert_msg(memcmp(buf, want, sizeof buf) == 0, "an empty call wrote");
    L8_CK(l8i_interleave(s, a + 64, a, 2, 4, 8, I));                           /* adjacent: fine */
    ck_assert(memcmp(buf, want, 64) == 0 && memcmp(buf + 128, want + 128, 128) == 0);
    l8t_ctx_finish(ctx);
}
END_TEST

START_TEST(test_gpu_interleave)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0), *host = l8t_ctx("host", NULL, 0);
    sweep(ctx, host);
    l8t_ctx_finish(host);
    l8t_ctx_finish(ctx);
}
END_TEST

/* Collective-sized layouts: the 16-byte path over 64 MiB, and the same
 * shape at 8- and 4-byte words (misaligned bases). */
START_TEST(test_gpu_interleave_large)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0), *host = l8t_ctx("host", NULL, 0);
    const il_case cs[] = {
        { 4, 8192, 2048, 0, 0 },
        { 4, 8192, 2048, 8, 0 },
        { 8, 16384, 1024, 0, 4 },
        { 2, 3, (1u << 20) + 1, 0, 0 },       /* long chunks on the byte path */
        { 3, 4099, 4096 + 4, 0, 0 },
        { 3, 4099, 2730, 2, 0 },              /* the segment kernel: 2-byte words */
        { 4, 4099, 2052, 0, 4 },              /* and 4-byte words */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        if (l8_test_quick() && i > 1) break;
        one_case(ctx, host, &cs[i], 100 + i);
    }
    l8t_ctx_finish(host);
    l8t_ctx_finish(ctx);
}
END_TEST

/* A small launch limit cuts problems into many launches over ranks and rows,
 * and sends chunks of more words than the limit to driver copies. */
START_TEST(test_gpu_interleave_split)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0), *host = l8t_ctx("host", NULL, 0);
    const il_case cs[] = {
        { 5, 7001, 48, 0, 0 },                /* 3 words a chunk: rows split */
        { 5, 300, 16, 0, 0 },
        { 3, 7, 4096 + 4, 0, 0 },             /* segments (limit 1000), driver copies (7) */
        { 4, 33, 400, 0, 0 },                 /* 25 words: rows split, driver copies (7) */
        { 9, 30, 32, 0, 0 },                  /* 2 words: ranks split at limit 7 */
        { 5, 61, 997, 1, 3 },                 /* 997 bytes: segments (limit 1000), driver copies (7) */
        { 5, 700, 100, 2, 6 },                /* segments: rows split */
        { 9, 20, 70, 1, 0 },                  /* segments: ranks split at limit 7 */
    };
    const uint32_t limits[] = { 1000, 7 };
    for (size_t li = 0; li < 2; li++) {
        l8i_interleave_set_launch_words(limits[li]);
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            if (li == 1 && i == 0) continue;      /* 21,003 launches of 6 words: slow */
            one_case(ctx, host, &cs[i], 200 + 10 * li + i);
        }
    }
    l8i_interleave_set_launch_words(0);
    l8t_ctx_finish(host);
    l8t_ctx_finish(ctx);
}
END_TEST

Suite *l8_interleave_suite(void)
{
    Suite *s = suite_create("interleave");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_interleave_host);
    tcase_add_test(tc, test_interleave_errors);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 300);
    tcase_add_test(tg, test_gpu_interleave);
    tcase_add_test(tg, test_gpu_interleave_large);
    tcase_add_test(tg, test_gpu_interleave_split);
    suite_add_tcase(s, tg);
    return s;
}
