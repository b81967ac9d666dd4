/* test_fp8.c - FP8 formats (runtime/fp8.h) and the cast / transpose / dbias /
 * dequantize / scale-update ops (ops/cast.h).
 *
 * "host" cases check the conversions against references written another way
 * (ldexp decoding, nearest-value search with the tie-to-even rule, double
 * arithmetic) and every op's host path against plain loops over fresh random
 * data (NaN, Inf, zeros, subnormals, huge values mixed in), with outputs
 * poisoned first.
 *
 * "gpu" cases run each kernel on cuda:0 and compare with the same op on a
 * host context, bit for bit (NaN payloads aside): shapes with tails and
 * misaligned views, every f32 bit pattern through the cast kernel (both
 * formats), every bf16 / f16 pattern, every FP8 code through dequantize, and
 * a bandwidth measurement of cast + transpose against a device copy.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/tests.h"

#define xmalloc l8t_xmalloc
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "ops/internal.h"   /* l8i_cast_sm_max_tiles */
#include "ops/elementwise.h"
#include "runtime/fp8.h"
#include "ops/cast.h"

static const l8_dtype FMTS[2] = { L8_E4M3, L8_E5M2 };
static const l8_dtype HPS[3] = { L8_F32, L8_BF16, L8_F16 };

/* ======================================================================== */
/* independent references                                                    */

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* FP8 code -> value by the format's formula (ldexp), NaN as NAN. */
static double ref_decode(unsigned c, l8_dtype f)
{
    int neg = (c >> 7) & 1, e, m;
    double v;
    if (f == L8_E4M3) {
        e = (c >> 3) & 15; m = c & 7;
        if (e == 15 && m == 7) return NAN;
        v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    } else {
        e = (c >> 2) & 31; m = c & 3;
        if (e == 31) { if (m) return NAN; v = INFINITY; }
        else v = e ? ldexp(1.0 + m / 4.0, e - 15) : ldexp(m / 4.0, -14);
    }
    return neg ? -v : v;
}

static unsigned ref_maxcode(l8_dtype f) { return f == L8_E4M3 ? 0x7e : 0x7b; }

/* Brute force: the nearest of all finite magnitudes, ties to the even code,
 * saturating, NaN -> 0x7F, the sign of x kept (also for zero). */
static unsigned ref_encode_brute(double x, l8_dtype f)
{
    if (isnan(x)) return 0x7f;
    unsigned s = signbit(x) ? 0x80 : 0, maxc = ref_maxcode(f);
    double a = fabs(x);
    if (a >= ref_decode(maxc, f)) return s | maxc;
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= maxc; c++) {
        double d = fabs(a - ref_decode(c, f));
        if (d < bd || (d == bd && !(c & 1))) { bd = d; best = c; }
    }
    return s | best;
}

/* The same rule by binary search over the (monotonic) magnitude codes. */
static unsigned ref_encode(double x, l8_dtype f)
{
    if (isnan(x)) return 0x7f;
    unsigned s = signbit(x) ? 0x80 : 0, maxc = ref_maxcode(f);
    double a = fabs(x);
    if (a >= ref_decode(maxc, f)) return s | maxc;
    unsigned lo = 0, hi = maxc;                    /* v(lo) <= a < v(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (ref_decode(mid, f) <= a) lo = mid; else hi = mid;
    }
    double dl = a - ref_decode(lo, f), dh = ref_decode(hi, f) - a;
    unsigned c = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return s | c;
}

/* f16 pattern -> value by formula. */
static double ref_f16_decode(uint16_t h)
{
    int neg = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return neg ? -v : v;
}

/* f32 -> f16 in double arithmetic: scale to an integer number of quanta,
 * nearbyint (round half even in the default mode), overflow to Inf. */
static uint16_t ref_f16_encode(float x)
{
    if (isnan(x)) return 0x7fff;
    uint16_t s = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (a >= 65520.0) return s | 0x7c00;
    int e;
    frexp(a, &e);                                  /* a = f * 2^e, f in [0.5, 1) */
    int q = (e - 1 < -14 ? -14 : e - 1) - 10;     /* quantum exponent */
    double k = nearbyint(ldexp(a, -q));            /* quanta */
    /* back to a pattern by search: exact values are few; use the formula */
    if (k == 0) return s;
    int ee = q + 10;                               /* exponent of the leading bit if normal */
    if (ee < -14 || (q == -24 && k < 1024)) return s | (uint16_t)k;   /* subnormal (k < 1024) */
    if (k >= 2048) { k /= 2; ee++; }
    if (ee > 15) return s | 0x7c00;
    return s | (uint16_t)(((ee + 15) << 10) | ((int)k - 1024));
}

/* f32 -> bf16: of the two neighbours (truncated and next up), the nearer,
 * ties to the even pattern, decided in double. */
static uint16_t ref_bf16_encode(float x)
{
    if (isnan(x)) return 0x7fff;
    uint32_t u = fbits(x);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffff) == 0) return lo;
    double a = fabs((double)x), vl = fabs((double)bitsf((uint32_t)lo << 16));
    double vh = (hi & 0x7f80) == 0x7f80 && (hi & 0x7f) == 0 ? INFINITY
              : fabs((double)bitsf((uint32_t)hi << 16));
    if ((lo & 0x7fff) == 0x7f7f) vh = ldexp(1.0, 128);   /* rounding up reaches Inf */
    double dl = a - vl, dh = vh - a;
    return dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
}

/* ======================================================================== */
/* data helpers                                                              */

/* One random value, with specials when `specials` (about 6% of values). */
static float gen_value(l8_rng *r, int specials, float range)
{
    uint64_t k = l8_rng_below(r, 1000);
    float sign = (l8_rng_next(r) & 1) ? -1.0f : 1.0f;
    if (specials) {
        if (k < 8) return bitsf(0x7f800001u | (uint32_t)(l8_rng_next(r) & 0x807fffffu));  /* NaN */
        if (k < 16) return sign * INFINITY;
        if (k < 30) return sign * 0.0f;
        if (k < 45) return sign * ldexpf(l8_rng_float(r, 0.5f, 1.0f), -(int)l8_rng_below(r, 149));
        if (k < 60) return sign * ldexpf(l8_rng_float(r, 0.5f, 1.0f), (int)l8_rng_below(r, 40) + 10);
    }
    /* spread over many binades around the FP8 range */
    return sign * range * l8_rng_float(r, 0.0f, 1.0f) * ldexpf(1.0f, (int)l8_rng_below(r, 24) - 16);
}

static void fill_hp(l8_rng *r, void *buf, l8_dtype dt, size_t n, int specials, float range)
{
    for (size_t i = 0; i < n; i++) {
        float v = gen_value(r, specials, range);
        if (dt == L8_F32) ((float *)buf)[i] = v;
        else if (dt == L8_BF16) ((uint16_t *)buf)[i] = ref_bf16_encode(v);
        else ((uint16_t *)buf)[i] = ref_f16_encode(v);
    }
}

/* Element i of a host buffer as float, decoded independently. */
static float ref_load(const void *buf, l8_dtype dt, size_t i)
{
    if (dt == L8_F32) return ((const float *)buf)[i];
    if (dt == L8_BF16) return bitsf((uint32_t)((const uint16_t *)buf)[i] << 16);
    return (float)ref_f16_decode(((const uint16_t *)buf)[i]);
}

static int same_float(float got, float want)
{
    return isnan(want) ? isnan(got) : fbits(got) == fbits(want);
}

/* amax of n elements: NaN if any, else max |x|. */
static float ref_amax(const void *buf, l8_dtype dt, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float v = ref_load(buf, dt, i);
        if (isnan(v)) return NAN;
        if (fabsf(v) > m) m = fabsf(v);
    }
    return m;
}

static size_t hp_size(l8_dtype dt) { return dt == L8_F32 ? 4 : 2; }

/* ---- contexts and tensors ---- */

static l8_ctx *mk_ctx(const char *dev) { return l8t_ctx(dev, NULL, 0); }

static void done_ctx(l8_ctx *ctx)
{
    L8_CK(l8_ctx_synchronize(ctx));
    l8_ctx_destroy(ctx);
}

static l8_tensor *mk2(l8_ctx *ctx, l8_dtype dt, int64_t d0, int64_t d1)
{
    int64_t sh[2] = { d0, d1 };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, 2, sh, &t));
    return t;
}

static l8_tensor *mk1(l8_ctx *ctx, l8_dtype dt, int64_t n)
{
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, 1, &n, &t));
    return t;
}

/* A view (dt, nd dims) at byte offset off into a new storage of `bytes` on
 * ctx; the view holds the only reference. */
static l8_tensor *mk_at(l8_ctx *ctx, size_t bytes, size_t off, l8_dtype dt, int nd,
                        const int64_t *dims)
{
    l8_storage *st = NULL;
    l8_tensor *t = NULL;
    L8_CK(l8_storage_create(ctx, bytes, NULL, &st));
    L8_CK(l8_tensor_from_storage(st, off, dt, nd, dims, NULL, &t));
    l8_storage_release(st);
    return t;
}

/* Another view of t's storage. */
static l8_tensor *view_of(const l8_tensor *t, size_t off, l8_dtype dt, int nd, const int64_t *dims)
{
    l8_tensor *v = NULL;
    L8_CK(l8_tensor_from_storage(l8_tensor_storage(t), off, dt, nd, dims, NULL, &v));
    return v;
}

/* An amax left by an earlier cast, above every finite input's: a cast
 * without L8_CAST_ACCUMULATE_AMAX must replace it (the GPU's casts zero the
 * word first in a kernel of their own), one with it must keep it. */
#define STALE_AMAX 3e38f

/* Attach a new meta to t (t keeps the only reference): scale, scale_inv
 * poisoned to -1 (the quantizing ops must write it), amax. */
static l8_fp8_meta *add_meta(l8_tensor *t, float scale, float amax)
{
    l8_fp8_meta *m = NULL;
    L8_CK(l8_fp8_meta_create(l8_tensor_ctx(t), &m));
    L8_CK(l8_fp8_meta_set(m, scale, -1.0f, amax));
    L8_CK(l8_tensor_set_fp8_meta(t, m));
    l8_fp8_meta_release(m);
    return m;
}

static void put(l8_tensor *t, const void *host)
{
    L8_CK(l8_tensor_copy_from_host(t, host, l8_tensor_nbytes(t), NULL));
}

static void get(const l8_tensor *t, void *host)
{
    L8_CK(l8_tensor_copy_to_host(t, host, l8_tensor_nbytes(t), NULL));
}

/* Fill a tensor with a poison byte pattern so unwritten elements show. */
static void poison(l8_tensor *t, unsigned char v)
{
    size_t n = l8_tensor_nbytes(t);
    unsigned char *p = xmalloc(n);
    memset(p, v, n);
    put(t, p);
    free(p);
}

static float random_scale(l8_rng *r)
{
    return ldexpf(l8_rng_float(r, 1.0f, 2.0f), (int)l8_rng_below(r, 16) - 8);
}

/* ======================================================================== */
/* formats (host)                                                            */

START_TEST(test_decode_all_codes)
{
    for (int fi = 0; fi < 2; fi++) {
        l8_dtype f = FMTS[fi];
        for (unsigned c = 0; c < 256; c++) {
            float got = l8_fp8_to_f32((uint8_t)c, f);
            double want = ref_decode(c, f);
            if (isnan(want)) {
                ck_assert_msg(isnan(got) && l8_fp8_is_nan((uint8_t)c, f), "fmt %d code 0x%02x", f, c);
            } else {
                ck_assert_msg((double)got == want && !!signbit(got) == !!signbit(want),
                              "fmt %d code 0x%02x: %g, want %g", f, c, got, want);
                ck_assert(!l8_fp8_is_nan((uint8_t)c, f));
            }
        }
    }
    ck_assert_float_eq(l8_fp8_to_f32(0x7e, L8_E4M3), 448.0f);
    ck_assert_float_eq(l8_fp8_to_f32(0x7b, L8_E5M2), 57344.0f);
    ck_assert_float_eq(l8_fp8_to_f32(0x01, L8_E4M3), 0x1p-9f);
    ck_assert_float_eq(l8_fp8_to_f32(0x01, L8_E5M2), 0x1p-16f);
    ck_assert(isinf(l8_fp8_to_f32(0xfc, L8_E5M2)) && l8_fp8_to_f32(0xfc, L8_E5M2) < 0);
    ck_assert_float_eq(l8_fp8_max(L8_E4M3), 448.0f);
    ck_assert_float_eq(l8_fp8_max(L8_E5M2), 57344.0f);
    ck_assert_float_eq(l8_fp8_max(L8_F32), 0.0f);
    ck_assert(isnan(l8_fp8_to_f32(0x10, L8_F32)));
    ck_assert_uint_eq(l8_fp8_from_f32(1.0f, L8_BF16), 0);
}
END_TEST

START_TEST(test_roundtrip_and_monotonic)
{
    for (int fi = 0; fi < 2; fi++) {
        l8_dtype f = FMTS[fi];
        unsigned maxc = ref_maxcode(f);
        for (unsigned c = 0; c < 256; c++) {
            if (l8_fp8_is_nan((uint8_t)c, f)) continue;
            float v = l8_fp8_to_f32((uint8_t)c, f);
            unsigned want = isinf(v) ? (c & 0x80) | maxc : c;   /* E5M2 Inf saturates */
            ck_assert_msg(l8_fp8_from_f32(v, f) == want, "fmt %d code 0x%02x", f, c);
        }
        /* strictly increasing over the finite non-negative codes, mirrored */
        for (unsigned c = 1; c <= maxc; c++) {
            ck_assert(l8_fp8_to_f32((uint8_t)c, f) > l8_fp8_to_f32((uint8_t)(c - 1), f));
            ck_assert(l8_fp8_to_f32((uint8_t)(c | 0x80), f) <
                      l8_fp8_to_f32((uint8_t)((c - 1) | 0x80), f));
        }
        /* monotonic conversion over a sweep of f32 values */
        unsigned prev = 0;
        for (float x = 0x1p-20f; x < 1e6f; x *= 1.0009765625f) {
            unsigned q = l8_fp8_from_f32(x, f);
            ck_assert_msg(q >= prev, "fmt %d not monotonic at %g", f, x);
            prev = q;
        }
    }
}
END_TEST

START_TEST(test_ties_to_even)
{
    for (int fi = 0; fi < 2; fi++) {
        l8_dtype f = FMTS[fi];
        unsigned maxc = ref_maxcode(f);
        for (unsigned c = 0; c < maxc; c++) {
            float lo = l8_fp8_to_f32((uint8_t)c, f), hi = l8_fp8_to_f32((uint8_t)(c + 1), f);
            float mid = (lo + hi) * 0.5f;            /* exact in f32 */
            ck_assert((double)mid == ((double)lo + (double)hi) / 2);
            unsigned even = (c & 1) ? c + 1 : c;
            for (int neg = 0; neg < 2; neg++) {
                float sg = neg ? -1.0f : 1.0f;
                unsigned sb = neg ? 0x80 : 0;
                ck_assert_msg(l8_fp8_from_f32(sg * mid, f) == (sb | even),
                              "fmt %d tie %g -> 0x%02x", f, sg * mid, l8_fp8_from_f32(sg * mid, f));
                ck_assert(l8_fp8_from_f32(sg * nextafterf(mid, INFINITY), f) == (sb | (c + 1)));
                ck_assert(l8_fp8_from_f32(sg * nextafterf(mid, 0.0f), f) == (sb | c));
            }
        }
    }
    /* the tie between max and the next binade's first value saturates */
    ck_assert_uint_eq(l8_fp8_from_f32(464.0f, L8_E4M3), 0x7e);
    ck_assert_uint_eq(l8_fp8_from_f32(61440.0f, L8_E5M2), 0x7b);
    /* the tie between 0 and the smallest subnormal goes to 0 */
    ck_assert_uint_eq(l8_fp8_from_f32(0x1p-10f, L8_E4M3), 0x00);
    ck_assert_uint_eq(l8_fp8_from_f32(-0x1p-17f, L8_E5M2), 0x80);
    ck_assert_uint_eq(l8_fp8_from_f32(nextafterf(0x1p-10f, 1.0f), L8_E4M3), 0x01);
}
END_TEST

START_TEST(test_saturation_nan_inf)
{
    const float big[] = { 448.0f, 449.0f, 463.9f, 464.0f, 464.1f, 480.0f, 1e10f, FLT_MAX, INFINITY };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        ck_assert_uint_eq(l8_fp8_from_f32(big[i], L8_E4M3), 0x7e);
        ck_assert_uint_eq(l8_fp8_from_f32(-big[i], L8_E4M3), 0xfe);
    }
    const float big5[] = { 57344.0f, 60000.0f, 61440.0f, 61441.0f, 65536.0f, 1e30f, INFINITY };
    for (size_t i = 0; i < sizeof big5 / sizeof big5[0]; i++) {
        ck_assert_uint_eq(l8_fp8_from_f32(big5[i], L8_E5M2), 0x7b);
        ck_assert_uint_eq(l8_fp8_from_f32(-big5[i], L8_E5M2), 0xfb);
    }
    const uint32_t nans[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                              0xffffffffu, 0x7fa5a5a5u };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        for (int fi = 0; fi < 2; fi++)
            ck_assert_uint_eq(l8_fp8_from_f32(bitsf(nans[i]), FMTS[fi]), L8_FP8_NAN_BYTE);
    ck_assert_uint_eq(l8_fp8_from_bf16(0xffc1, L8_E4M3), L8_FP8_NAN_BYTE);
    ck_assert_uint_eq(l8_fp8_from_f16(0xfe01, L8_E5M2), L8_FP8_NAN_BYTE);
    ck_assert_uint_eq(l8_fp8_from_f16(0x7c00, L8_E5M2), 0x7b);     /* f16 Inf saturates */
    const unsigned e5nan[] = { 0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff };
    for (size_t i = 0; i < 6; i++) ck_assert(isnan(l8_fp8_to_f32((uint8_t)e5nan[i], L8_E5M2)));
    ck_assert(isnan(l8_fp8_to_f32(0x7f, L8_E4M3)) && isnan(l8_fp8_to_f32(0xff, L8_E4M3)));
    ck_assert(!isnan(l8_fp8_to_f32(0x7c, L8_E5M2)));
}
END_TEST

START_TEST(test_subnormals_and_zero)
{
    for (unsigned m = 0; m < 8; m++) {
        ck_assert_float_eq(l8_fp8_to_f32((uint8_t)m, L8_E4M3), ldexpf((float)m, -9));
        ck_assert_uint_eq(l8_fp8_from_f32(ldexpf((float)m, -9), L8_E4M3), m);
        ck_assert_uint_eq(l8_fp8_from_f32(-ldexpf((float)m, -9), L8_E4M3), 0x80 | m);
    }
    for (unsigned m = 0; m < 4; m++) {
        ck_assert_float_eq(l8_fp8_to_f32((uint8_t)m, L8_E5M2), ldexpf((float)m, -16));
        ck_assert_uint_eq(l8_fp8_from_f32(ldexpf((float)m, -16), L8_E5M2), m);
    }
    /* zeros keep their sign; f32 subnormals and tiny values round to signed zero */
    for (int fi = 0; fi < 2; fi++) {
        ck_assert_uint_eq(l8_fp8_from_f32(0.0f, FMTS[fi]), 0x00);
        ck_assert_uint_eq(l8_fp8_from_f32(-0.0f, FMTS[fi]), 0x80);
        ck_assert_uint_eq(l8_fp8_from_f32(bitsf(1), FMTS[fi]), 0x00);
        ck_assert_uint_eq(l8_fp8_from_f32(bitsf(0x807fffffu), FMTS[fi]), 0x80);
        ck_assert_uint_eq(l8_fp8_from_f32(-1e-30f, FMTS[fi]), 0x80);
    }
    /* rounding up out of the subnormals reaches the smallest normal */
    ck_assert_uint_eq(l8_fp8_from_f32(0x1.ep-7f, L8_E4M3), 0x08);
    ck_assert_uint_eq(l8_fp8_from_f32(0x1.cp-15f, L8_E5M2), 0x04);
}
END_TEST

START_TEST(test_exhaustive_16bit)
{
    /* every bf16 and f16 pattern, both formats, against brute force */
    long bad = 0;
    for (int fi = 0; fi < 2; fi++) {
        l8_dtype f = FMTS[fi];
        for (uint32_t u = 0; u < 65536; u++) {
            double vb = (double)bitsf(u << 16), vh = ref_f16_decode((uint16_t)u);
            unsigned gb = l8_fp8_from_bf16((uint16_t)u, f), wb = ref_encode_brute(vb, f);
            unsigned gh = l8_fp8_from_f16((uint16_t)u, f), wh = ref_encode_brute(vh, f);
            if (gb != wb && bad++ < 5)
                fprintf(stderr, "bf16 0x%04x fmt %d: 0x%02x, want 0x%02x\n", u, f, gb, wb);
            if (gh != wh && bad++ < 5)
                fprintf(stderr, "f16 0x%04x fmt %d: 0x%02x, want 0x%02x\n", u, f, gh, wh);
        }
    }
    ck_assert_msg(bad == 0, "%ld mismatches", bad);
}
END_TEST

START_TEST(test_random_f32)
{
    l8_rng r;
    l8_rng_init(&r, 0xf8f32);
    long n = l8_test_quick() ? 20000 : 2000000, bad = 0;
    for (long i = 0; i < n; i++) {
        uint32_t u = (uint32_t)l8_rng_next(&r);
        if (i & 1) u = (u & 0x87ffffffu) | 0x38000000u;   /* half near the FP8 range */
        float x = bitsf(u);
        for (int fi = 0; fi < 2; fi++) {
            unsigned got = l8_fp8_from_f32(x, FMTS[fi]);
            unsigned want = (i % 64 == 0) ? ref_encode_brute(x, FMTS[fi]) : ref_encode(x, FMTS[fi]);
            if (got != want && bad++ < 5)
                fprintf(stderr, "f32 0x%08x fmt %d: 0x%02x, want 0x%02x\n", u, FMTS[fi], got, want);
        }
    }
    ck_assert_msg(bad == 0, "%ld mismatches", bad);
}
END_TEST

START_TEST(test_half_helpers)
{
    /* widenings: every pattern */
    for (uint32_t u = 0; u < 65536; u++) {
        double want = ref_f16_decode((uint16_t)u);
        float got = l8_f16_to_f32((uint16_t)u);
        ck_assert_msg(isnan(want) ? isnan(got) : (double)got == want && !!signbit(got) == !!signbit(want),
                      "f16 0x%04x", u);
        ck_assert_uint_eq(fbits(l8_bf16_to_f32((uint16_t)u)), u << 16);
        if (!isnan(want))                              /* f16 -> f32 -> f16 is the identity */
            ck_assert_uint_eq(l8_f16_from_f32(got), u);
    }
    /* narrowings vs the double-arithmetic references */
    l8_rng r;
    l8_rng_init(&r, 0x16);
    long n = l8_test_quick() ? 20000 : 1000000;
    for (long i = 0; i < n; i++) {
        uint32_t u = (uint32_t)l8_rng_next(&r);
        if (i & 1) u = (u & 0x8fffffffu) | 0x30000000u;
        float x = bitsf(u);
        ck_assert_msg(l8_bf16_from_f32(x) == ref_bf16_encode(x), "bf16 of 0x%08x", u);
        ck_assert_msg(l8_f16_from_f32(x) == ref_f16_encode(x), "f16 of 0x%08x: 0x%04x want 0x%04x",
                      u, l8_f16_from_f32(x), ref_f16_encode(x));
    }
    ck_assert_uint_eq(l8_f16_from_f32(65504.0f), 0x7bff);
    ck_assert_uint_eq(l8_f16_from_f32(65519.99f), 0x7bff);
    ck_assert_uint_eq(l8_f16_from_f32(65520.0f), 0x7c00);
    ck_assert_uint_eq(l8_f16_from_f32(-0x1p-25f), 0x8000);          /* tie to even zero */
    ck_assert_uint_eq(l8_f16_from_f32(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(l8_bf16_from_f32(FLT_MAX), 0x7f80);
    ck_assert_uint_eq(l8_bf16_from_f32(NAN), 0x7fff);
    ck_assert_uint_eq(l8_f16_from_f32(-NAN), 0x7fff);
}
END_TEST

START_TEST(test_amax_rule)
{
    ck_assert_float_eq(l8_amax_combine(-3.0f, 2.0f), 3.0f);
    ck_assert(isinf(l8_amax_combine(-INFINITY, 1e38f)));
    ck_assert(isnan(l8_amax_combine(INFINITY, -NAN)));
    ck_assert(isnan(l8_amax_combine(NAN, 0.0f)));
    ck_assert_uint_eq(fbits(l8_amax_combine(-0.0f, 0.0f)), 0u);
    ck_assert_uint_eq(l8_amax_bits(-2.0f), fbits(2.0f));
}
END_TEST

START_TEST(test_bulk_host_functions)
{
    l8_rng r;
    l8_rng_init(&r, 0xb01c);
    size_t n = 5000;
    for (int hi = 0; hi < 3; hi++) {
        l8_dtype dt = HPS[hi];
        void *x = xmalloc(n * 4);
        uint8_t *y = xmalloc(n);
        fill_hp(&r, x, dt, n, 1, 100.0f);
        for (int fi = 0; fi < 2; fi++) {
            float scale = random_scale(&r), amax = 0.0f;
            memset(y, 0xa5, n);
            L8_CK(l8_fp8_quantize_host(x, dt, n, scale, FMTS[fi], y, &amax));
            for (size_t i = 0; i < n; i++)
                ck_assert_uint_eq(y[i], ref_encode(ref_load(x, dt, i) * scale, FMTS[fi]));
            ck_assert(same_float(amax, ref_amax(x, dt, n)));
            /* accumulation: a larger amax stays */
            float big = 1e38f, ra = ref_amax(x, dt, 16);
            L8_CK(l8_fp8_quantize_host(x, dt, 16, scale, FMTS[fi], y, &big));
            ck_assert(same_float(big, isnan(ra) ? NAN : fmaxf(ra, 1e38f)));
        }
        free(x);
        free(y);
    }
    /* dequantize every code */
    uint8_t codes[256];
    for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
    for (int fi = 0; fi < 2; fi++)
        for (int hi = 0; hi < 3; hi++) {
            void *out = xmalloc(256 * 4);
            float si = 0.375f;
            L8_CK(l8_fp8_dequantize_host(codes, 256, FMTS[fi], si, out, HPS[hi]));
            for (int c = 0; c < 256; c++) {
                float want = (float)ref_decode((unsigned)c, FMTS[fi]) * si;
                float got = ref_load(out, HPS[hi], (size_t)c);
                if (HPS[hi] == L8_BF16) want = bitsf((uint32_t)ref_bf16_encode(want) << 16);
                if (HPS[hi] == L8_F16) want = (float)ref_f16_decode(ref_f16_encode(want));
                ck_assert_msg(same_float(got, want), "code 0x%02x fmt %d out %d", c, FMTS[fi], HPS[hi]);
            }
            free(out);
        }
    float a = 0;
    uint8_t b;
    L8_CK_ST(l8_fp8_quantize_host(&a, L8_E4M3, 1, 1.0f, L8_E4M3, &b, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_quantize_host(&a, L8_F32, 1, 1.0f, L8_F16, &b, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_quantize_host(NULL, L8_F32, 1, 1.0f, L8_E4M3, &b, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_dequantize_host(&b, 1, L8_F32, 1.0f, &a, L8_F32), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_dequantize_host(&b, 1, L8_E4M3, 1.0f, &a, L8_I32), L8_ERR_INVALID_ARG);
}
END_TEST

/* ======================================================================== */
/* ops on a host context                                                     */

START_TEST(test_cast_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xca57);
    const int64_t sizes[] = { 0, 1, 15, 16, 17, 1000, 4099 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int hi = 0; hi < 3; hi++)
            for (int fi = 0; fi < 2; fi++) {
                int64_t n = sizes[si];
                l8_dtype dt = HPS[hi], f = FMTS[fi];
                int specials = (si + (size_t)fi) % 2;
                l8_tensor *in = mk1(ctx, dt, n), *out = mk1(ctx, f, n);
                float scale = random_scale(&r);
                l8_fp8_meta *m = add_meta(out, scale, 12345.0f);
                void *x = xmalloc((size_t)n * 4);
                uint8_t *y = xmalloc((size_t)n);
                fill_hp(&r, x, dt, (size_t)n, specials, 500.0f);
                put(in, x);
                poison(out, 0xa5);
                L8_CK(l8_fp8_cast(in, out, 0, NULL));
                get(out, y);
                for (int64_t i = 0; i < n; i++) {
                    float v = ref_load(x, dt, (size_t)i);
                    unsigned want = ref_encode(v * scale, f);
                    ck_assert_msg(y[i] == want, "n %lld dt %d fmt %d [%lld] %g*%g: 0x%02x want 0x%02x",
                                  (long long)n, dt, f, (long long)i, v, scale, y[i], want);
                }
                float s, sinv, amax;
                L8_CK(l8_fp8_meta_get(m, &s, &sinv, &amax));
                ck_assert(s == scale && sinv == 1.0f / scale);
                ck_assert_msg(same_float(amax, ref_amax(x, dt, (size_t)n)), "amax %g", amax);
                /* accumulate: an amax larger than any finite input stays */
                L8_CK(l8_fp8_meta_set(m, scale, 0.0f, 3e38f));
                L8_CK(l8_fp8_cast(in, out, L8_CAST_ACCUMULATE_AMAX, NULL));
                L8_CK(l8_fp8_meta_get(m, &s, &sinv, &amax));
                float ra = ref_amax(x, dt, (size_t)n);
                ck_assert(isnan(ra) ? isnan(amax) : amax == fmaxf(3e38f, ra));
                free(x);
                free(y);
                l8_tensor_destroy(in);
                l8_tensor_destroy(out);
            }
    done_ctx(ctx);
}
END_TEST

/* Plain reference for cast + transpose: checks out / out_t bytes and amax. */
static void check_ct(const void *x, l8_dtype dt, int64_t R, int64_t C, float scale, l8_dtype f,
                     const uint8_t *y, const uint8_t *yt)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            unsigned want = ref_encode(ref_load(x, dt, (size_t)(r * C + c)) * scale, f);
            if (y)
                ck_assert_msg(y[r * C + c] == want, "[%lld x %lld] out[%lld][%lld] 0x%02x want 0x%02x",
                              (long long)R, (long long)C, (long long)r, (long long)c,
                              y[r * C + c], want);
            ck_assert_msg(yt[c * R + r] == want, "[%lld x %lld] out_t[%lld][%lld] 0x%02x want 0x%02x",
                          (long long)R, (long long)C, (long long)c, (long long)r, yt[c * R + r], want);
        }
}

START_TEST(test_cast_transpose_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xc7);
    const int64_t shapes[][2] = { { 1, 1 }, { 17, 33 }, { 128, 128 }, { 129, 257 }, { 8, 1 },
                                  { 0, 5 }, { 3, 0 }, { 200, 40 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int hi = 0; hi < 3; hi++) {
            int64_t R = shapes[k][0], C = shapes[k][1];
            l8_dtype dt = HPS[hi], f = FMTS[(k + (size_t)hi) % 2];
            l8_tensor *in = mk2(ctx, dt, R, C), *out = mk2(ctx, f, R, C), *ot = mk2(ctx, f, C, R);
            float scale = random_scale(&r);
            l8_fp8_meta *m = add_meta(ot, scale, 0.0f);
            L8_CK(l8_tensor_set_fp8_meta(out, m));
            size_t n = (size_t)(R * C);
            void *x = xmalloc(n * 4);
            uint8_t *y = xmalloc(n), *yt = xmalloc(n);
            fill_hp(&r, x, dt, n, (int)(k % 2), 300.0f);
            put(in, x);
            for (int with_out = 0; with_out < 2; with_out++) {
                poison(out, 0x5a);
                poison(ot, 0x5a);
                L8_CK(l8_fp8_cast_transpose(in, with_out ? out : NULL, ot, 0, NULL));
                get(out, y);
                get(ot, yt);
                check_ct(x, dt, R, C, scale, f, with_out ? y : NULL, yt);
                if (!with_out)
                    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(y[i], 0x5a);
                float s, sinv, amax;
                L8_CK(l8_fp8_meta_get(m, &s, &sinv, &amax));
                ck_assert(same_float(amax, ref_amax(x, dt, n)) && sinv == 1.0f / scale);
            }
            free(x);
            free(y);
            free(yt);
            l8_tensor_destroy(in);
            l8_tensor_destroy(out);
            l8_tensor_destroy(ot);
        }
    done_ctx(ctx);
}
END_TEST

typedef struct many_shape {
    int64_t r, c;
    l8_dtype dt;
} many_shape;

/* l8_fp8_cast_transpose_many of the nb tensors `base` (and `extra` more,
 * base's shapes again, wider) against one l8_fp8_cast_transpose per tensor:
 * every byte of out and out_t, amax and scale_inv, with and without
 * ACCUMULATE_AMAX, out NULL for every third tensor. */
static void cast_many_shapes(const char *dev, const many_shape *base, int nb, int extra)
{
    l8_ctx *ctx = mk_ctx(dev);
    l8_rng r;
    l8_rng_init(&r, 0x3a7);
    const int n = nb + extra;
    ck_assert(n <= 32);
    l8_tensor *in[32], *q[2][32], *qt[2][32];
    l8_fp8_meta *m[2][32];
    float ra[32];                 /* each input's amax (the reference) */
    for (int acc = 0; acc < 2; acc++) {
        unsigned fl = acc ? L8_CAST_ACCUMULATE_AMAX : 0;
        for (int i = 0; i < n; i++) {
            int64_t R = base[i % nb].r, C = base[i % nb].c + (i >= nb ? 16 * i : 0);
            l8_dtype dt = base[i % nb].dt;
            size_t cnt = (size_t)(R * C);
            void *x = xmalloc(cnt * 4);
            fill_hp(&r, x, dt, cnt, i % 3 == 0, 300.0f);
            in[i] = mk2(ctx, dt, R, C);
            put(in[i], x);
            ra[i] = ref_amax(x, dt, cnt);
            free(x);
            float sc = random_scale(&r);
            for (int side = 0; side < 2; side++) {
                l8_dtype f = i % 2 ? L8_E5M2 : L8_E4M3;
                q[side][i] = mk2(ctx, f, R, C);
                qt[side][i] = mk2(ctx, f, C, R);
                m[side][i] = add_meta(qt[side][i], sc, STALE_AMAX);
                L8_CK(l8_tensor_set_fp8_meta(q[side][i], m[side][i]));
                poison(q[side][i], 0x5a);
                poison(qt[side][i], 0x5a);
            }
        }
        /* side 0: the group, out NULL for every third tensor; side 1: one by one */
        l8_tensor *outs[32];
        for (int i = 0; i < n; i++) outs[i] = i % 3 == 2 ? NULL : q[0][i];
        L8_CK(l8_fp8_cast_transpose_many(n, (const l8_tensor *const *)in, outs, qt[0], fl, NULL));
        for (int i = 0; i < n; i++)
            L8_CK(l8_fp8_cast_transpose(in[i], i % 3 == 2 ? NULL : q[1][i], qt[1][i], fl, NULL));
        for (int i = 0; i < n; i++) {
            size_t nbytes = l8_tensor_nbytes(qt[0][i]);
            uint8_t *a = xmalloc(nbytes + 1), *b = xmalloc(nbytes + 1);
            for (int which = 0; which < 2; which++) {
                get(which ? q[0][i] : qt[0][i], a);
                get(which ? q[1][i] : qt[1][i], b);
                ck_assert_msg(memcmp(a, b, nbytes) == 0, "%s many: tensor %d %s differs", dev, i,
                              which ? "out" : "out_t");
            }
            free(a);
            free(b);
            float g[3], w[3];
            L8_CK(l8_fp8_meta_get(m[0][i], &g[0], &g[1], &g[2]));
            L8_CK(l8_fp8_meta_get(m[1][i], &w[0], &w[1], &w[2]));
            ck_assert_msg(same_float(g[2], w[2]) && fbits(g[1]) == fbits(w[1]),
                          "%s many: tensor %d amax %g / %g", dev, i, g[2], w[2]);
            /* with accumulation the stale amax stays (a NaN input wins) */
            float want = acc ? (isnan(ra[i]) ? NAN : fmaxf(ra[i], STALE_AMAX)) : ra[i];
            ck_assert_msg(same_float(g[2], want), "%s many: tensor %d acc %d amax %g want %g",
                          dev, i, acc, g[2], want);
        }
        for (int i = 0; i < n; i++) {
            l8_tensor_destroy(in[i]);
            for (int side = 0; side < 2; side++) {
                l8_tensor_destroy(q[side][i]);
                l8_tensor_destroy(qt[side][i]);
            }
        }
    }
    done_ctx(ctx);
}

/* mixed input dtypes, empty and edge shapes; `extra` more tensors past 16
 * make the GPU split the group */
static void cast_many_run(const char *dev, int extra)
{
    static const many_shape base[] = {
        { 512, 784, L8_F32 }, { 512, 512, L8_F32 }, { 16, 512, L8_F32 }, { 0, 40, L8_F32 },
        { 300, 130, L8_BF16 }, { 129, 8, L8_F16 }, { 1, 1, L8_F32 }, { 128, 256, L8_BF16 },
        { 257, 1000, L8_F32 }, { 1100, 1100, L8_BF16 } };
    cast_many_shapes(dev, base, (int)(sizeof base / sizeof base[0]), extra);
}

START_TEST(test_cast_transpose_many_host)
{
    cast_many_run("host", 0);
    /* errors: nothing is cast unless every tensor passes */
    l8_ctx *ctx = mk_ctx("host");
    l8_tensor *x = mk2(ctx, L8_F32, 4, 8), *qt = mk2(ctx, L8_E4M3, 8, 4);
    l8_tensor *qt2 = mk2(ctx, L8_E4M3, 8, 4), *bad = mk2(ctx, L8_E4M3, 4, 8);
    poison(x, 0x3f);
    l8_fp8_meta *m = add_meta(qt, 1.0f, 0.0f);
    add_meta(qt2, 1.0f, 0.0f);
    add_meta(bad, 1.0f, 0.0f);
    const l8_tensor *in[2] = { x, x };
    l8_tensor *ot[2] = { qt, qt2 };
    L8_CK_ST(l8_fp8_cast_transpose_many(0, in, NULL, ot, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_many(L8_CAST_MANY_MAX + 1, in, NULL, ot, 0, NULL),
             L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_many(2, in, NULL, ot, 0x8, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_many(2, in, NULL, ot, L8_CAST_FEW_SMS, NULL),
             L8_ERR_INVALID_ARG);                   /* the single-tensor ops' flag */
    ot[1] = bad;                                    /* [4, 8], wanted [8, 4] */
    L8_CK_ST(l8_fp8_cast_transpose_many(2, in, NULL, ot, 0, NULL), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "tensor 1"));
    L8_CK(l8_tensor_set_fp8_meta(qt2, m));          /* two tensors, one meta */
    ot[1] = qt2;
    L8_CK_ST(l8_fp8_cast_transpose_many(2, in, NULL, ot, 0, NULL), L8_ERR_INVALID_ARG);
    l8_tensor_destroy(x);
    l8_tensor_destroy(qt);
    l8_tensor_destroy(qt2);
    l8_tensor_destroy(bad);
    done_ctx(ctx);
}
END_TEST

START_TEST(test_gpu_cast_transpose_many)
{
    /* the tile kernel alone, then the default: groups of small tensors take
     * the small-tile kernel (a group with the 1100 x 1100 tensor, 81 tiles,
     * the tile kernel), single casts of small tensors too */
    const int dflt = l8i_cast_sm_max_tiles;
    l8i_cast_sm_max_tiles = 0;
    cast_many_run("cuda:0", 0);
    l8i_cast_sm_max_tiles = dflt;
    cast_many_run("cuda:0", 0);
    cast_many_run("cuda:0", 12);                    /* 22 tensors: two launches */
    /* a tensor of more 128 x 128 tiles than one launch's CTAs (32768: one
     * tile row of 32769 tile columns, 67 M elements) between two small ones:
     * the group is cut around it and it goes alone to the single-tensor
     * kernel, which loops over its tiles */
    static const many_shape big[] = { { 300, 130, L8_BF16 }, { 16, 128 * 32769, L8_BF16 },
                                       { 129, 8, L8_BF16 } };
    cast_many_shapes("cuda:0", big, 3, 0);
}
END_TEST

START_TEST(test_cast_transpose_dbias_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xdb);
    const int64_t shapes[][2] = { { 1, 1 }, { 17, 33 }, { 300, 70 }, { 129, 8 }, { 0, 4 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int hi = 0; hi < 3; hi++)
            for (int di = 0; di < 3; di++) {
                int64_t R = shapes[k][0], C = shapes[k][1];
                l8_dtype dt = HPS[hi], ddt = HPS[di];
                l8_tensor *in = mk2(ctx, dt, R, C), *ot = mk2(ctx, L8_E5M2, C, R);
                l8_tensor *db = mk1(ctx, ddt, C);
                add_meta(ot, 1.0f, 0.0f);
                size_t n = (size_t)(R * C);
                void *x = xmalloc(n * 4);
                fill_hp(&r, x, dt, n, 0, 8.0f);
                /* column 1: a NaN; column 2: +Inf; column 3: +Inf and -Inf */
                if (R >= 2 && C >= 4) {
                    float sp[4] = { NAN, INFINITY, INFINITY, -INFINITY };
                    int64_t at[4][2] = { { 0, 1 }, { 1, 2 }, { 0, 3 }, { 1, 3 } };
                    for (int q = 0; q < 4; q++) {
                        size_t i = (size_t)(at[q][0] * C + at[q][1]);
                        if (dt == L8_F32) ((float *)x)[i] = sp[q];
                        else if (dt == L8_BF16) ((uint16_t *)x)[i] = ref_bf16_encode(sp[q]);
                        else ((uint16_t *)x)[i] = ref_f16_encode(sp[q]);
                    }
                }
                put(in, x);
                poison(db, 0xee);
                L8_CK(l8_fp8_cast_transpose_dbias(in, NULL, ot, db, 0, NULL));
                void *got = xmalloc((size_t)C * 4 + 4);
                get(db, got);
                for (int64_t c = 0; c < C; c++) {
                    double sum = 0, mag = 0;
                    for (int64_t rr = 0; rr < R; rr++) {
                        double v = ref_load(x, dt, (size_t)(rr * C + c));
                        sum += v;
                        mag += fabs(v);
                    }
                    float g = ref_load(got, ddt, (size_t)c);
                    if (isnan(sum)) {
                        ck_assert_msg(isnan(g), "col %lld: %g, want NaN", (long long)c, g);
                        continue;
                    }
                    if (isinf(sum)) {
                        ck_assert_msg(g == (float)sum, "col %lld: %g, want %g", (long long)c, g, sum);
                        continue;
                    }
                    double tol = 1e-5 * mag + 1e-30;
                    if (ddt == L8_BF16) tol += fabs(sum) * 0x1p-8;
                    if (ddt == L8_F16) tol += fabs(sum) * 0x1p-11 + 0x1p-24;
                    ck_assert_msg(fabs(g - sum) <= tol, "[%lld x %lld] dt %d dbias %d col %lld: %.9g, want %.9g",
                                  (long long)R, (long long)C, dt, ddt, (long long)c, g, sum);
                }
                /* deterministic: a second run gives the same bits */
                void *again = xmalloc((size_t)C * 4 + 4);
                L8_CK(l8_fp8_cast_transpose_dbias(in, NULL, ot, db, 0, NULL));
                get(db, again);
                ck_assert(memcmp(got, again, (size_t)C * hp_size(ddt)) == 0);
                /* the bias gradient alone (l8_dbias_dact): the same bits */
                poison(db, 0xee);
                L8_CK(l8_dbias_dact(L8_ACT_NONE, in, NULL, db, NULL));
                get(db, again);
                ck_assert(memcmp(got, again, (size_t)C * hp_size(ddt)) == 0);
                free(again);
                free(got);
                free(x);
                l8_tensor_destroy(in);
                l8_tensor_destroy(ot);
                l8_tensor_destroy(db);
            }
    done_ctx(ctx);
}
END_TEST

START_TEST(test_dequantize_transpose_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xd0);
    int64_t n = 1000;
    uint8_t *codes = xmalloc((size_t)n);
    for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)(i < 256 ? (uint64_t)i : l8_rng_below(&r, 256));
    for (int fi = 0; fi < 2; fi++)
        for (int hi = 0; hi < 3; hi++) {
            l8_tensor *q = mk1(ctx, FMTS[fi], n), *o = mk1(ctx, HPS[hi], n);
            l8_fp8_meta *m = add_meta(q, 1.0f, 0.0f);
            float si = random_scale(&r);
            L8_CK(l8_fp8_meta_set(m, 1.0f / si, si, 0.0f));
            put(q, codes);
            poison(o, 0xcd);
            L8_CK(l8_fp8_dequantize(q, o, NULL));
            float *got = xmalloc((size_t)n * 4);
            get(o, got);
            for (int64_t i = 0; i < n; i++) {
                float want = (float)ref_decode(codes[i], FMTS[fi]) * si;
                if (HPS[hi] == L8_BF16) want = bitsf((uint32_t)ref_bf16_encode(want) << 16);
                if (HPS[hi] == L8_F16) want = (float)ref_f16_decode(ref_f16_encode(want));
                ck_assert_msg(same_float(ref_load(got, HPS[hi], (size_t)i), want), "code 0x%02x",
                              codes[i]);
            }
            free(got);
            l8_tensor_destroy(q);
            l8_tensor_destroy(o);
        }
    free(codes);
    const int64_t shapes[][2] = { { 1, 1 }, { 3, 200 }, { 129, 130 }, { 64, 16 } };
    for (size_t k = 0; k < 4; k++) {
        int64_t R = shapes[k][0], C = shapes[k][1];
        l8_tensor *a = mk2(ctx, k % 2 ? L8_U8 : L8_E4M3, R, C);
        l8_tensor *b = mk2(ctx, k % 2 ? L8_U8 : L8_E4M3, C, R);
        uint8_t *x = xmalloc((size_t)(R * C)), *y = xmalloc((size_t)(R * C));
        for (int64_t i = 0; i < R * C; i++) x[i] = (uint8_t)l8_rng_next(&r);
        put(a, x);
        poison(b, 0x11);
        L8_CK(l8_fp8_transpose(a, b, NULL));
        get(b, y);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) ck_assert_uint_eq(y[j * R + i], x[i * C + j]);
        free(x);
        free(y);
        l8_tensor_destroy(a);
        l8_tensor_destroy(b);
    }
    done_ctx(ctx);
}
END_TEST

/* ---- scale update ---- */

typedef struct {
    int64_t n, H;
    float *hist, *amax, *scale, *sinv, *fmax;
} su_state;

static void su_alloc(su_state *s, int64_t n, int64_t H)
{
    s->n = n;
    s->H = H;
    s->hist = xmalloc((size_t)(n * (H ? H : 1)) * 4);
    s->amax = xmalloc((size_t)n * 4);
    s->scale = xmalloc((size_t)n * 4);
    s->sinv = xmalloc((size_t)n * 4);
    s->fmax = xmalloc((size_t)n * 4);
}

static void su_free(su_state *s)
{
    free(s->hist); free(s->amax); free(s->scale); free(s->sinv); free(s->fmax);
}

/* Plain reference of the documented rule. */
static void su_ref(su_state *s, int recent, float margin, int reset, int with_sinv)
{
    for (int64_t t = 0; t < s->n; t++) {
        float nv = s->amax[t];
        float *h = s->hist + t * s->H;
        int fin = isfinite(nv);
        if (fin && s->H > 0) {
            for (int64_t i = s->H - 1; i > 0; i--) h[i] = h[i - 1];
            h[0] = nv;
        }
        float a = fabsf(nv);
        if (!recent)
            for (int64_t i = 0; i < s->H; i++) {
                if (isnan(h[i])) a = NAN;
                else if (!isnan(a) && fabsf(h[i]) > a) a = fabsf(h[i]);
            }
        if (fin && isfinite(a) && a > 0) {
            float sc = (s->fmax[t] / a) / exp2f(margin);
            if (isinf(sc)) sc = FLT_MAX;
            if (sc != 0) {
                s->scale[t] = sc;
                if (with_sinv) s->sinv[t] = 1.0f / sc;
            }
        }
        if (reset) s->amax[t] = 0;
    }
}

/* Edge cases plus random rows; `ctx` host or cuda; with a host ctx the op is
 * compared with su_ref, with a cuda ctx with the host op (bit exact). */
static void su_case(l8_ctx *ctx, l8_ctx *href, l8_rng *r, int64_t n, int64_t H, int recent,
                    float margin, int reset, int with_sinv, int bcast_fmax)
{
    su_state s;
    su_alloc(&s, n, H);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t i = 0; i < H; i++)
            s.hist[t * H + i] = l8_rng_below(r, 4) ? l8_rng_float(r, 0.0f, 10.0f) : 0.0f;
        s.amax[t] = l8_rng_float(r, 0.0f, 20.0f);
        s.scale[t] = l8_rng_float(r, 1.0f, 5.0f);
        s.sinv[t] = -7.0f;
        s.fmax[t] = bcast_fmax ? 448.0f : (t % 2 ? 57344.0f : 448.0f);
    }
    /* edge cases in the first rows */
    const float edge[] = { 0.0f, NAN, INFINITY, -INFINITY, 1e-45f, 3e38f, -2.0f };
    for (int64_t t = 0; t < n && t < 7; t++) {
        s.amax[t] = edge[t];
        if (t == 0)
            for (int64_t i = 0; i < H; i++) s.hist[i] = 0.0f;   /* all-zero history */
    }
    float *scale0 = xmalloc((size_t)n * 4);
    memcpy(scale0, s.scale, (size_t)n * 4);
    su_state want;
    su_alloc(&want, n, H);
    memcpy(want.hist, s.hist, (size_t)(n * H) * 4);
    memcpy(want.amax, s.amax, (size_t)n * 4);
    memcpy(want.scale, s.scale, (size_t)n * 4);
    memcpy(want.sinv, s.sinv, (size_t)n * 4);
    memcpy(want.fmax, s.fmax, (size_t)n * 4);

    l8_tensor *th = H ? mk2(ctx, L8_F32, n, H) : NULL;
    l8_tensor *ta = mk1(ctx, L8_F32, n), *ts = mk1(ctx, L8_F32, n), *ti = mk1(ctx, L8_F32, n);
    l8_tensor *tf;
    if (bcast_fmax) {
        l8_storage *st = NULL;
        int64_t zero = 0;
        L8_CK(l8_storage_create(ctx, 4, NULL, &st));
        L8_CK(l8_tensor_from_storage(st, 0, L8_F32, 1, &n, &zero, &tf));
        l8_storage_release(st);
        void *p;
        L8_CK(l8_tensor_data(tf, &p));
        L8_CK(l8_memcpy_htod(l8_ctx_stream(ctx, L8_STREAM_COMPUTE), p, s.fmax, 4));
    } else {
        tf = mk1(ctx, L8_F32, n);
        put(tf, s.fmax);
    }
    if (th) put(th, s.hist);
    put(ta, s.amax);
    put(ts, s.scale);
    put(ti, s.sinv);
    l8_fp8_scale_update_config cfg = L8_FP8_SCALE_UPDATE_CONFIG_INIT;
    cfg.amax_compute = recent ? L8_AMAX_MOST_RECENT : L8_AMAX_MAX_HISTORY;
    cfg.margin = margin;
    cfg.reset_amax = reset;
    L8_CK(l8_fp8_scale_update(th, ta, ts, with_sinv ? ti : NULL, tf, &cfg, NULL));
    if (th) get(th, s.hist);
    get(ta, s.amax);
    get(ts, s.scale);
    get(ti, s.sinv);

    if (href) {       /* the same op on the host context */
        l8_tensor *hh = H ? mk2(href, L8_F32, n, H) : NULL;
        l8_tensor *ha = mk1(href, L8_F32, n), *hs = mk1(href, L8_F32, n), *hi = mk1(href, L8_F32, n);
        l8_tensor *hf = mk1(href, L8_F32, n);
        if (hh) put(hh, want.hist);
        put(ha, want.amax); put(hs, want.scale); put(hi, want.sinv); put(hf, want.fmax);
        L8_CK(l8_fp8_scale_update(hh, ha, hs, with_sinv ? hi : NULL, hf, &cfg, NULL));
        if (hh) get(hh, want.hist);
        get(ha, want.amax); get(hs, want.scale); get(hi, want.sinv);
        l8_tensor_destroy(hh); l8_tensor_destroy(ha); l8_tensor_destroy(hs);
        l8_tensor_destroy(hi); l8_tensor_destroy(hf);
    } else {
        su_ref(&want, recent, margin, reset, with_sinv);
    }
    for (int64_t t = 0; t < n; t++) {
        for (int64_t i = 0; i < H; i++)
            ck_assert_msg(same_float(s.hist[t * H + i], want.hist[t * H + i]),
                          "H %lld tensor %lld hist[%lld] %g want %g", (long long)H, (long long)t,
                          (long long)i, s.hist[t * H + i], want.hist[t * H + i]);
        ck_assert_msg(same_float(s.scale[t], want.scale[t]), "tensor %lld scale %g want %g",
                      (long long)t, s.scale[t], want.scale[t]);
        ck_assert_msg(same_float(s.sinv[t], want.sinv[t]), "tensor %lld scale_inv %g want %g",
                      (long long)t, s.sinv[t], want.sinv[t]);
        ck_assert(same_float(s.amax[t], want.amax[t]));
    }
    if (n > 6) {
        /* spot checks of the rule itself: NaN / Inf keep the scale, a tiny
         * most-recent amax clamps to FLT_MAX, a negative one counts by |.| */
        ck_assert(s.scale[1] == scale0[1] && s.scale[2] == scale0[2] && s.scale[3] == scale0[3]);
        if (recent || H == 1) ck_assert(s.scale[4] == FLT_MAX);
        if (recent) ck_assert(s.scale[6] == (s.fmax[6] / 2.0f) / exp2f(margin));
        if (H > 0) ck_assert(s.hist[6 * H] == -2.0f);
    }
    free(scale0);
    l8_tensor_destroy(th); l8_tensor_destroy(ta); l8_tensor_destroy(ts);
    l8_tensor_destroy(ti); l8_tensor_destroy(tf);
    su_free(&s);
    su_free(&want);
}

START_TEST(test_scale_update_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0x5ca1e);
    su_case(ctx, NULL, &r, 20, 5, 0, 0.0f, 0, 1, 0);
    su_case(ctx, NULL, &r, 20, 1, 0, 1.0f, 1, 1, 0);
    su_case(ctx, NULL, &r, 20, 300, 0, 0.0f, 0, 0, 1);
    su_case(ctx, NULL, &r, 20, 16, 1, 2.0f, 1, 1, 0);
    su_case(ctx, NULL, &r, 9, 0, 1, 0.0f, 0, 1, 0);

    /* a worked example: history [1, 4, 2], new 3 -> [3, 1, 4], max 4 */
    float hist[3] = { 1, 4, 2 }, amax = 3, scale = 1, sinv = 1, fmax = 448;
    l8_tensor *th = mk2(ctx, L8_F32, 1, 3), *ta = mk1(ctx, L8_F32, 1), *ts = mk1(ctx, L8_F32, 1);
    l8_tensor *ti = mk1(ctx, L8_F32, 1), *tf = mk1(ctx, L8_F32, 1);
    put(th, hist); put(ta, &amax); put(ts, &scale); put(ti, &sinv); put(tf, &fmax);
    L8_CK(l8_fp8_scale_update(th, ta, ts, ti, tf, NULL, NULL));
    get(th, hist); get(ts, &scale); get(ti, &sinv);
    ck_assert(hist[0] == 3 && hist[1] == 1 && hist[2] == 4);
    ck_assert(scale == 112.0f && sinv == 1.0f / 112.0f);
    l8_fp8_scale_update_config cfg = L8_FP8_SCALE_UPDATE_CONFIG_INIT;
    cfg.amax_compute = L8_AMAX_MOST_RECENT;
    cfg.margin = 1.0f;
    amax = 7.0f;
    put(ta, &amax);
    L8_CK(l8_fp8_scale_update(th, ta, ts, NULL, tf, &cfg, NULL));
    get(ts, &scale); get(ti, &sinv); get(th, hist);
    ck_assert(scale == 32.0f && sinv == 1.0f / 112.0f && hist[0] == 7 && hist[1] == 3);
    /* errors */
    cfg.margin = NAN;
    L8_CK_ST(l8_fp8_scale_update(th, ta, ts, ti, tf, &cfg, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_scale_update(NULL, ta, ts, ti, tf, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_scale_update(th, ta, ts, ti, NULL, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_scale_update(th, ta, th, ti, tf, NULL, NULL), L8_ERR_INVALID_ARG);
    cfg.margin = 0;
    cfg.size = 4;
    L8_CK_ST(l8_fp8_scale_update(th, ta, ts, ti, tf, &cfg, NULL), L8_ERR_INVALID_ARG);
    l8_tensor_destroy(th); l8_tensor_destroy(ta); l8_tensor_destroy(ts);
    l8_tensor_destroy(ti); l8_tensor_destroy(tf);
    done_ctx(ctx);
}
END_TEST

START_TEST(test_errors_host)
{
    l8_ctx *ctx = mk_ctx("host"), *other = mk_ctx("host");
    l8_tensor *x = mk2(ctx, L8_BF16, 4, 8), *q = mk2(ctx, L8_E4M3, 4, 8);
    l8_tensor *qt = mk2(ctx, L8_E4M3, 8, 4), *nometa = mk2(ctx, L8_E4M3, 4, 8);
    l8_tensor *q5 = mk2(ctx, L8_E5M2, 8, 4), *xo = mk2(other, L8_BF16, 4, 8);
    l8_tensor *i32 = mk2(ctx, L8_I32, 4, 8), *small = mk2(ctx, L8_E4M3, 4, 7);
    l8_fp8_meta *m = add_meta(q, 2.0f, 0.0f);
    L8_CK(l8_tensor_set_fp8_meta(qt, m));
    add_meta(q5, 1.0f, 0.0f);
    add_meta(small, 1.0f, 0.0f);
    l8_tensor *xt = NULL;
    L8_CK(l8_tensor_transpose(x, 0, 1, &xt));            /* not contiguous */
    l8_tensor *db = mk1(ctx, L8_F32, 8), *db7 = mk1(ctx, L8_F32, 7);
    poison(x, 0x3f);                                     /* defined inputs for the valid calls */
    poison(q, 0x38);

    L8_CK_ST(l8_fp8_cast(NULL, q, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, NULL, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, nometa, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(i32, q, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, x, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, small, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(xo, q, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(xt, q, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, q, 0x80, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast(x, q, 0, l8_ctx_stream(other, L8_STREAM_COMPUTE)), L8_ERR_INVALID_ARG);
    L8_CK(l8_fp8_cast(x, q, 0, l8_ctx_stream(ctx, L8_STREAM_COPY)));

    L8_CK_ST(l8_fp8_cast_transpose(x, q, q, 0, NULL), L8_ERR_INVALID_ARG);      /* out_t shape */
    L8_CK_ST(l8_fp8_cast_transpose(x, NULL, NULL, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose(x, q, q5, 0, NULL), L8_ERR_INVALID_ARG);     /* dtype/meta */
    L8_CK_ST(l8_fp8_cast_transpose(x, nometa, qt, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose(xt, q, qt, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose(xo, q, qt, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_fp8_cast_transpose(x, q, qt, 0, NULL));
    L8_CK(l8_fp8_cast_transpose(x, NULL, qt, 0, NULL));
    {   /* out_t NULL: l8_fp8_cast, the same bytes (and out's numel is enough) */
        uint8_t a[32], b[32];
        l8_tensor *flat = mk1(ctx, L8_E4M3, 32);
        L8_CK(l8_tensor_set_fp8_meta(flat, m));
        L8_CK(l8_fp8_cast(x, q, 0, NULL));
        get(q, a);
        poison(q, 0x38);
        L8_CK(l8_fp8_cast_transpose(x, q, NULL, 0, NULL));
        get(q, b);
        ck_assert(memcmp(a, b, sizeof a) == 0);
        L8_CK(l8_fp8_cast_transpose(x, flat, NULL, 0, NULL));
        get(flat, b);
        ck_assert(memcmp(a, b, sizeof a) == 0);
        l8_tensor_destroy(flat);
    }
    L8_CK_ST(l8_fp8_cast_transpose_dbias(x, q, NULL, db, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_dbias(x, q, qt, NULL, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_dbias(x, q, qt, db7, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_cast_transpose_dbias(x, q, qt, q, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_fp8_cast_transpose_dbias(x, q, qt, db, 0, NULL));

    L8_CK_ST(l8_fp8_dequantize(x, x, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_dequantize(nometa, x, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_dequantize(q, i32, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_dequantize(q, db, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_fp8_dequantize(q, x, NULL));

    L8_CK_ST(l8_fp8_transpose(q, q, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_transpose(q, q5, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_transpose(x, x, NULL), L8_ERR_INVALID_ARG);
    L8_CK(l8_fp8_transpose(q, qt, NULL));

    l8_tensor *all[] = { x, q, qt, nometa, q5, xo, i32, small, xt, db, db7 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
    done_ctx(other);
    done_ctx(ctx);
}
END_TEST

/* l8_fp8_cast_transpose_act / _dact on the host, where the activation is
 * exact: gelu(20) = 20, gelu(-20) = -0, gelu(+-0) = +-0; gelu'(20) = 1,
 * gelu'(-20) = +0. The results must be those of the plain cast of the
 * exact activation (and its dbias); then the errors. */
START_TEST(test_cast_act_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xac7);
    const int64_t R = 40, C = 24, n = R * C;
    float *x = xmalloc((size_t)n * 4), *a = xmalloc((size_t)n * 4), *dy = xmalloc((size_t)n * 4);
    float *hx = xmalloc((size_t)n * 4), *gd = xmalloc((size_t)n * 4);
    static const float xs[4] = { 20.0f, -20.0f, 0.0f, -0.0f }, hs[4] = { 20.0f, -0.0f, 0.0f, -0.0f };
    for (int64_t i = 0; i < n; i++) {
        x[i] = xs[i % 4 == 3 ? 3 : (i * 7) % 3];
        hx[i] = hs[i % 4 == 3 ? 3 : (i * 7) % 3];
        a[i] = (i * 5) % 3 ? 20.0f : -20.0f;
        dy[i] = l8_bf16_to_f32(l8_bf16_from_f32(gen_value(&r, 0, 8.0f)));
        gd[i] = a[i] > 0 ? dy[i] : dy[i] * 0.0f;
    }
    /* [0]: the _act op, [1]: the plain cast of what it must have computed */
    l8_tensor *in[2], *ta, *out[2], *ot[2], *db[2];
    uint8_t *y[2][2];
    float dbv[2][24], meta[2][3];
    for (int dact = 0; dact < 2; dact++) {
        for (int side = 0; side < 2; side++) {
            in[side] = mk2(ctx, L8_BF16, R, C);
            const float *v = side ? (dact ? gd : hx) : (dact ? dy : x);
            uint16_t *b16 = xmalloc((size_t)n * 2);
            for (int64_t i = 0; i < n; i++) b16[i] = l8_bf16_from_f32(v[i]);
            put(in[side], b16);
            free(b16);
            out[side] = mk2(ctx, L8_E5M2, R, C);
            ot[side] = mk2(ctx, L8_E5M2, C, R);
            db[side] = mk1(ctx, L8_F32, C);
            l8_fp8_meta *m = add_meta(out[side], 0.75f, 0.0f);
            L8_CK(l8_tensor_set_fp8_meta(ot[side], m));
        }
        ta = mk2(ctx, L8_F32, R, C);              /* a of another dtype than dy */
        put(ta, a);
        if (dact) {
            L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], ta, out[0], ot[0], db[0], 0,
                                             NULL));
            L8_CK(l8_fp8_cast_transpose_dbias(in[1], out[1], ot[1], db[1], 0, NULL));
        } else {
            L8_CK(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], out[0], ot[0], 0, NULL));
            L8_CK(l8_fp8_cast_transpose(in[1], out[1], ot[1], 0, NULL));
        }
        for (int side = 0; side < 2; side++) {
            y[side][0] = xmalloc((size_t)n);
            y[side][1] = xmalloc((size_t)n);
            get(out[side], y[side][0]);
            get(ot[side], y[side][1]);
            get(db[side], dbv[side]);
            L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(out[side]), &meta[side][0], &meta[side][1],
                                  &meta[side][2]));
        }
        ck_assert_msg(memcmp(y[0][0], y[1][0], (size_t)n) == 0, "%s: out", dact ? "dact" : "act");
        ck_assert_msg(memcmp(y[0][1], y[1][1], (size_t)n) == 0, "%s: out_t", dact ? "dact" : "act");
        ck_assert(fbits(meta[0][2]) == fbits(meta[1][2]) && fbits(meta[0][1]) == fbits(meta[1][1]));
        if (dact) {
            ck_assert(memcmp(dbv[0], dbv[1], sizeof dbv[0]) == 0);
            /* the bias gradient alone, through the activation (a of
             * another dtype) and without (the exact gradient): the same */
            float dba[24];
            for (int k = 0; k < 2; k++) {
                poison(db[0], 0xee);
                if (k) L8_CK(l8_dbias_dact(L8_ACT_NONE, in[1], NULL, db[0], NULL));
                else L8_CK(l8_dbias_dact(L8_ACT_GELU, in[0], ta, db[0], NULL));
                get(db[0], dba);
                ck_assert_msg(memcmp(dba, dbv[1], sizeof dba) == 0, "l8_dbias_dact %d", k);
            }
        }
        /* out_t NULL: the cast alone, the same bytes */
        poison(out[0], 0x5a);
        if (dact)
            L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], ta, out[0], NULL, NULL, 0, NULL));
        else
            L8_CK(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], out[0], NULL, 0, NULL));
        get(out[0], y[0][0]);
        ck_assert(memcmp(y[0][0], y[1][0], (size_t)n) == 0);
        /* L8_CAST_FEW_SMS: the same bytes (the host has one path) */
        poison(out[0], 0x5a);
        if (dact)
            L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], ta, out[0], ot[0], db[0],
                                             L8_CAST_FEW_SMS, NULL));
        else
            L8_CK(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], out[0], ot[0], L8_CAST_FEW_SMS,
                                            NULL));
        get(out[0], y[0][0]);
        ck_assert(memcmp(y[0][0], y[1][0], (size_t)n) == 0);
        /* L8_ACT_NONE: the plain cast of the input */
        L8_CK(l8_fp8_cast_transpose_act(L8_ACT_NONE, in[1], out[0], ot[0], 0, NULL));
        get(out[0], y[0][0]);
        ck_assert(memcmp(y[0][0], y[1][0], (size_t)n) == 0);
        if (dact) {               /* errors; nothing written */
            l8_tensor *a7 = mk1(ctx, L8_F32, n - 1), *ai = mk2(ctx, L8_I32, R, C);
            L8_CK_ST(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], NULL, out[0], ot[0], NULL, 0,
                                                NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], a7, out[0], ot[0], NULL, 0,
                                                NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], ai, out[0], ot[0], NULL, 0,
                                                NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in[0], ta, out[0], NULL, db[0], 0,
                                                NULL), L8_ERR_INVALID_ARG);   /* dbias, no out_t */
            L8_CK_ST(l8_fp8_cast_transpose_dact((l8_act)9, in[0], ta, out[0], ot[0], NULL, 0,
                                                NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], NULL, NULL, 0, NULL),
                     L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], out[0], ot[0], 0x40, NULL),
                     L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], out[0], ot[0], 0x4, NULL),
                     L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_fp8_cast_transpose_act(L8_ACT_GELU, in[0], ot[0], NULL, 0, NULL),
                     L8_ERR_INVALID_ARG);                                   /* out's shape */
            L8_CK_ST(l8_fp8_cast_transpose_act(L8_ACT_GELU, ta, out[0], in[0], 0, NULL),
                     L8_ERR_INVALID_ARG);                                   /* out_t not FP8 */
            poison(out[0], 0x5a);
            get(out[0], y[0][0]);
            for (int64_t i = 0; i < n; i++) ck_assert_uint_eq(y[0][0][i], 0x5a);
            /* l8_dbias_dact's errors; dbias not written */
            l8_tensor *d7 = mk1(ctx, L8_F32, C - 1), *di = mk1(ctx, L8_I32, C);
            poison(db[0], 0xee);
            L8_CK_ST(l8_dbias_dact(L8_ACT_GELU, in[0], NULL, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_GELU, in[0], a7, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_GELU, in[0], ai, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact((l8_act)9, in[0], ta, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_GELU, in[0], ta, d7, NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_GELU, in[0], ta, di, NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_NONE, ai, NULL, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_NONE, NULL, NULL, db[0], NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_NONE, in[0], NULL, NULL, NULL), L8_ERR_INVALID_ARG);
            L8_CK_ST(l8_dbias_dact(L8_ACT_NONE, out[0], NULL, db[0], NULL), L8_ERR_INVALID_ARG);
            uint32_t dw[24];
            get(db[0], dw);
            for (int64_t c = 0; c < C; c++) ck_assert_uint_eq(dw[c], 0xeeeeeeeeu);
            l8_tensor_destroy(d7);
            l8_tensor_destroy(di);
            l8_tensor_destroy(a7);
            l8_tensor_destroy(ai);
        }
        for (int side = 0; side < 2; side++) {
            l8_tensor_destroy(in[side]);
            l8_tensor_destroy(out[side]);
            l8_tensor_destroy(ot[side]);
            l8_tensor_destroy(db[side]);
            free(y[side][0]);
            free(y[side][1]);
        }
        l8_tensor_destroy(ta);
    }
    free(x); free(a); free(dy); free(hx); free(gd);
    done_ctx(ctx);
}
END_TEST

/* ======================================================================== */
/* GPU: every kernel against the host context                               */

/* Each case makes its inputs on the host, runs the op on both contexts with
 * the same inputs and compares what comes back. */

static void gpu_cast_case(l8_ctx *g, l8_ctx *h, l8_rng *r, int64_t n, l8_dtype dt, l8_dtype f,
                          int specials, size_t misalign, unsigned flags)
{
    size_t esz = hp_size(dt);
    void *x = xmalloc((size_t)n * esz);
    fill_hp(r, x, dt, (size_t)n, specials, 400.0f);
    float scale = random_scale(r);
    uint8_t *yg = xmalloc((size_t)n + 1), *yh = xmalloc((size_t)n + 1);
    float mg[3], mh[3];
    for (int side = 0; side < 2; side++) {
        l8_ctx *ctx = side ? h : g;
        /* misaligned views: element offset `misalign` into bigger storages */
        l8_tensor *in = mk_at(ctx, (size_t)(n + 16) * esz, misalign * esz, dt, 1, &n);
        l8_tensor *out = mk_at(ctx, (size_t)n + 16, misalign, f, 1, &n);
        l8_fp8_meta *m = add_meta(out, scale, STALE_AMAX);
        put(in, x);
        poison(out, 0xa5);
        L8_CK(l8_fp8_cast(in, out, flags, NULL));
        get(out, side ? yh : yg);
        L8_CK(l8_fp8_meta_get(m, side ? &mh[0] : &mg[0], side ? &mh[1] : &mg[1],
                              side ? &mh[2] : &mg[2]));
        l8_tensor_destroy(in);
        l8_tensor_destroy(out);
    }
    /* the first mismatch, reported with its input */
    int64_t i = 0;
    while (i < n && yg[i] == yh[i]) i++;
    ck_assert_msg(i == n, "cast n %lld dt %d fmt %d misalign %zu [%lld] x=%g*%g: "
                  "gpu 0x%02x host 0x%02x", (long long)n, dt, f, misalign, (long long)i,
                  i < n ? l8_host_load_f32(x, dt, (size_t)i) : 0.0f, scale, i < n ? yg[i] : 0,
                  i < n ? yh[i] : 0);
    ck_assert_msg(same_float(mg[2], mh[2]), "amax gpu %g host %g", mg[2], mh[2]);
    ck_assert_msg(fbits(mg[1]) == fbits(mh[1]), "scale_inv gpu %g host %g", mg[1], mh[1]);
    free(x);
    free(yg);
    free(yh);
}

START_TEST(test_gpu_cast)
{
    l8_ctx *g = mk_ctx("cuda:0"), *h = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0x9ca5);
    const int64_t sizes[] = { 1, 15, 16, 17, 1000, 65536 + 7, 4096 * 4096 + 3 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int hi = 0; hi < 3; hi++)
            for (int fi = 0; fi < 2; fi++)
                gpu_cast_case(g, h, &r, sizes[si], HPS[hi], FMTS[fi], (int)((si + (size_t)fi) % 2),
                              0, 0);
    /* misaligned views take the scalar path; accumulate keeps a larger amax */
    for (int hi = 0; hi < 3; hi++) {
        gpu_cast_case(g, h, &r, 5000, HPS[hi], L8_E4M3, 1, 1, 0);
        gpu_cast_case(g, h, &r, 5000, HPS[hi], L8_E5M2, 0, 3, L8_CAST_ACCUMULATE_AMAX);
    }
    done_ctx(h);
    done_ctx(g);
}
END_TEST

/* cast_transpose of in, with its dbias when db is not NULL (default stream). */
static void ct_call(const l8_tensor *in, l8_tensor *out, l8_tensor *ot, l8_tensor *db)
{
    if (db) L8_CK(l8_fp8_cast_transpose_dbias(in, out, ot, db, 0, NULL));
    else L8_CK(l8_fp8_cast_transpose(in, out, ot, 0, NULL));
}

static void gpu_ct_case(l8_ctx *g, l8_ctx *h, l8_rng *r, int64_t R, int64_t C, l8_dtype dt,
                        l8_dtype f, int with_out, int dbias_dt, int specials)
{
    size_t n = (size_t)(R * C), esz = hp_size(dt);
    void *x = xmalloc(n * esz);
    fill_hp(r, x, dt, n, specials, dbias_dt >= 0 ? 8.0f : 400.0f);
    float scale = random_scale(r);
    uint8_t *y[2] = { xmalloc(n + 1), xmalloc(n + 1) }, *yt[2] = { xmalloc(n + 1), xmalloc(n + 1) };
    void *db[2] = { xmalloc((size_t)C * 4 + 4), xmalloc((size_t)C * 4 + 4) };
    float meta[2][3];
    for (int side = 0; side < 2; side++) {
        l8_ctx *ctx = side ? h : g;
        l8_tensor *in = mk2(ctx, dt, R, C), *out = mk2(ctx, f, R, C), *ot = mk2(ctx, f, C, R);
        l8_tensor *tdb = dbias_dt >= 0 ? mk1(ctx, (l8_dtype)dbias_dt, C) : NULL;
        l8_fp8_meta *m = add_meta(ot, scale, STALE_AMAX);
        L8_CK(l8_tensor_set_fp8_meta(out, m));
        put(in, x);
        poison(out, 0x5a);
        poison(ot, 0x5a);
        if (tdb) poison(tdb, 0xee);
        ct_call(in, with_out ? out : NULL, ot, tdb);
        if (tdb) get(tdb, db[side]);
        get(out, y[side]);
        get(ot, yt[side]);
        L8_CK(l8_fp8_meta_get(m, &meta[side][0], &meta[side][1], &meta[side][2]));
        l8_tensor_destroy(in);
        l8_tensor_destroy(out);
        l8_tensor_destroy(ot);
        l8_tensor_destroy(tdb);
    }
    size_t i = 0, j = 0;          /* the first mismatches */
    while (i < n && y[0][i] == y[1][i]) i++;
    while (j < n && yt[0][j] == yt[1][j]) j++;
    ck_assert_msg(i == n, "ct [%lld x %lld] dt %d fmt %d out[%zu]: gpu 0x%02x host 0x%02x",
                  (long long)R, (long long)C, dt, f, i, y[0][i], y[1][i]);
    ck_assert_msg(j == n, "ct [%lld x %lld] dt %d fmt %d out_t[%lld][%lld]: gpu 0x%02x host 0x%02x",
                  (long long)R, (long long)C, dt, f, (long long)(j / (size_t)R),
                  (long long)(j % (size_t)R), yt[0][j], yt[1][j]);
    ck_assert_msg(same_float(meta[0][2], meta[1][2]), "amax gpu %g host %g", meta[0][2], meta[1][2]);
    ck_assert(fbits(meta[0][1]) == fbits(meta[1][1]));
    if (dbias_dt >= 0)
        for (int64_t c = 0; c < C; c++) {
            float a = ref_load(db[0], (l8_dtype)dbias_dt, (size_t)c);
            float b = ref_load(db[1], (l8_dtype)dbias_dt, (size_t)c);
            ck_assert_msg(same_float(a, b), "dbias [%lld x %lld] col %lld: gpu %.9g host %.9g",
                          (long long)R, (long long)C, (long long)c, a, b);
        }
    free(x);
    for (int s = 0; s < 2; s++) { free(y[s]); free(yt[s]); free(db[s]); }
}

/* cast_transpose (+ dbias) with views at byte offsets, against the host:
 * the input at xoff (2, 4, 6 or 8 bytes: no VEC_ROW, rows through the word
 * loads, funnel-shifted when the offset is 2 mod 4), out at 32 + yoff and
 * out_t at 32 + toff of their storages (odd: the row-major chunks as
 * 1/2/4-B pieces, the transposed rows through P2_SHIFT, or the strip
 * kernel's lines aligned in memory, not in the tensor), each output with 32
 * guard bytes on both sides that must keep their poison (out's too when it
 * is not passed); amax and scale_inv too. Without dbias the input holds
 * NaN, Inf and large values. */
static void gpu_ct_view_case(l8_ctx *g, l8_ctx *h, l8_rng *r, int64_t R, int64_t C, l8_dtype dt,
                             int64_t xoff, int64_t yoff, int64_t toff, int with_out,
                             int with_dbias)
{
    size_t n = (size_t)(R * C), esz = hp_size(dt);
    int64_t dims[2] = { R, C }, tdims[2] = { C, R }, c1 = C;
    int64_t nb[2] = { (int64_t)n + 64 + yoff, (int64_t)n + 64 + toff };   /* out, out_t */
    void *x = xmalloc(n * esz);
    fill_hp(r, x, dt, n, !with_dbias, with_dbias ? 8.0f : 400.0f);
    float scale = random_scale(r), meta[2][3];
    uint8_t *y[2][2];
    float *db[2] = { xmalloc((size_t)C * 4), xmalloc((size_t)C * 4) };
    for (int side = 0; side < 2; side++) {
        l8_ctx *ctx = side ? h : g;
        l8_tensor *in = mk_at(ctx, n * esz + 16, (size_t)xoff, dt, 2, dims);
        l8_tensor *out = mk_at(ctx, (size_t)nb[0], (size_t)(32 + yoff), L8_E4M3, 2, dims);
        l8_tensor *ot = mk_at(ctx, (size_t)nb[1], (size_t)(32 + toff), L8_E4M3, 2, tdims);
        l8_tensor *wo = view_of(out, 0, L8_E4M3, 1, &nb[0]);
        l8_tensor *wt = view_of(ot, 0, L8_E4M3, 1, &nb[1]);
        l8_fp8_meta *m = add_meta(ot, scale, 0.0f);
        L8_CK(l8_tensor_set_fp8_meta(out, m));
        put(in, x);
        poison(wo, 0x5a);
        poison(wt, 0x5a);
        l8_tensor *tdb = with_dbias ? mk1(ctx, L8_F32, c1) : NULL;
        ct_call(in, with_out ? out : NULL, ot, tdb);
        if (tdb) get(tdb, db[side]);
        l8_tensor_destroy(tdb);
        for (int o = 0; o < 2; o++) y[side][o] = xmalloc((size_t)nb[o]);
        get(wo, y[side][0]);
        get(wt, y[side][1]);
        L8_CK(l8_fp8_meta_get(m, &meta[side][0], &meta[side][1], &meta[side][2]));
        l8_tensor *all[] = { in, out, ot, wo, wt };
        for (size_t i = 0; i < 5; i++) l8_tensor_destroy(all[i]);
    }
    for (int o = 0; o < 2; o++) {
        int64_t i = 0;
        while (i < nb[o] && y[0][o][i] == y[1][o][i]) i++;
        ck_assert_msg(i == nb[o], "ct [%lld x %lld] dt %d, input at +%lld, %s at +%lld: byte %lld"
                      " of its storage: gpu 0x%02x host 0x%02x", (long long)R, (long long)C, dt,
                      (long long)xoff, o ? "out_t" : "out", (long long)(32 + (o ? toff : yoff)),
                      (long long)i, y[0][o][i], y[1][o][i]);
    }
    ck_assert_msg(same_float(meta[0][2], meta[1][2]), "ct view amax gpu %g host %g", meta[0][2],
                  meta[1][2]);
    ck_assert(fbits(meta[0][1]) == fbits(meta[1][1]));
    for (int64_t c = 0; with_dbias && c < C; c++)
        ck_assert_msg(same_float(db[0][c], db[1][c]), "ct offset dbias col %lld: gpu %.9g host %.9g",
                      (long long)c, db[0][c], db[1][c]);
    free(x);
    for (int sd = 0; sd < 2; sd++) { free(y[sd][0]); free(y[sd][1]); free(db[sd]); }
}

/* The strip kernel (ptx/cast_transpose_strip.ptx.in) where its lines meet
 * what is not its own: out_t at byte offsets 0, 5, 10, 15 past 32 guard
 * bytes of its storage, with and without out, with and without dbias
 * (gpu_ct_view_case); shapes of one and of many segments (the halo rows),
 * a last segment of several steps, the last one partial (131 x 17000, 1003
 * x 8200, 300 x 17000: out's rows past the matrix must not be written),
 * strips past the last column, more strips than multiprocessors (17000
 * columns: one segment each). First columns % 8 == 0 with the input and out
 * aligned (the plain and db entries), then the w entries: any columns (odd,
 * % 8 = 2, 4, 6; one column; a last strip of 1..7 columns, whose chunks end
 * inside the row and whose lane 0 starts the row's last 8-B block), the
 * input at offsets 0, 2, 4, 6 and out at 0, 5, 2, 7 (every lane's block
 * and its pieces at each alignment). */
static void gpu_strip_cases(l8_ctx *g, l8_ctx *h, l8_rng *r)
{
    const int64_t shapes[][2] = { { 1, 8 }, { 3, 136 }, { 129, 8 }, { 1003, 520 }, { 4133, 264 },
                                  { 131, 17000 }, { 2049, 1160 }, { 8191, 256 }, { 1003, 8200 },
                                  { 300, 17000 } };
    const int64_t wshapes[][2] = { { 1, 7 }, { 3, 131 }, { 129, 1 }, { 1003, 517 },
                                   { 4133, 262 }, { 131, 17001 }, { 2049, 1163 }, { 8191, 253 },
                                   { 300, 132 }, { 1003, 8191 }, { 5, 133 }, { 77, 1030 } };
    /* quick mode (compute-sanitizer): the first six shapes of each, offsets 0 and 15 */
    const int q = l8_test_quick();
    const size_t nq = q ? 6 : sizeof shapes / sizeof shapes[0];
    const size_t nw = q ? 6 : sizeof wshapes / sizeof wshapes[0];
    /* the input dtype cycles f32, bf16, f16 */
    for (size_t k = 0; k < nq; k++)
        for (int64_t toff = 0; toff < 16; toff += q ? 15 : 5)
            gpu_ct_view_case(g, h, r, shapes[k][0], shapes[k][1],
                             HPS[(k + (size_t)toff) % 3], 0, 0, toff,
                             (int)((k + (size_t)toff) % 2),
                             (int)((k + (size_t)toff / 5) % 3 == 0));
    for (size_t k = 0; k < nw; k++)
        for (int64_t toff = 0; toff < 16; toff += q ? 15 : 5) {
            const int64_t o = toff / 5;                 /* 0..3 */
            const l8_dtype dt = HPS[(k + (size_t)o) % 3];
            gpu_ct_view_case(g, h, r, wshapes[k][0], wshapes[k][1], dt,
                             (int64_t)hp_size(dt) * ((o + (int64_t)k) % 4), toff % 8, toff,
                             (int)((k + (size_t)o) % 4 != 3), (int)((k + (size_t)o) % 3 == 1));
        }
}

/* Every shape below through both kernels: the tile kernel alone
 * (l8i_cast_sm_max_tiles = 0, l8i_cast_split = 0, l8i_cast_strip = 0), then
 * with the split of the shapes the tile kernel takes slowly into a cast and
 * a byte transpose (columns % 8 != 0, or odd rows with columns % 16 != 0 for
 * 2-byte inputs; with dbias, where columns % 8 == 0, the cast is the tile
 * kernel without its transposed output), then with the strip kernel for
 * 2-byte and f32 inputs whose out_t rows are not 16-B multiples (rows % 16
 * != 0, any columns, with dbias or not; l8i_cast_strip = 2: also where its
 * segments are short, and f32 with rows % 8 == 0; and gpu_strip_cases, with dbias
 * summed in the kernel by a cluster of a strip's segments where ops/cast.c
 * takes the clusters (up to 8 segments, the grid's clusters fitting; with
 * l8i_cast_strip_cl = 2, also for columns % 8 != 0, which the default leaves
 * to the partials), then again with l8i_cast_strip_cl = 0: partials and
 * l8_dbias_reduce),
 * then where tensors of up to 64 tiles (and
 * dbias up to 4 tile rows) take the small-tile kernel, once with 8 rows a
 * thread, once with 4 rows a thread (the quarter entries without dbias,
 * the half ones with it) wherever they apply and once more with 2 (the
 * eighth entries) where no dbias is asked for; by default those take more
 * than 64 rows. A dbias over
 * 2..4 tile rows takes the half entries in clusters in each of them (129 x
 * 260, 300 x 8, 256 x 512, 512 x 100, 500 x 33; at offsets 300 x 520,
 * 264 x 257, 257 x 1031, 272 x 257); 640 x 64 and up, the tile kernel. */
/* l8_dbias_dact on the GPU against l8_fp8_cast_transpose_dbias of the
 * gradient (l8_gelu_backward into a tensor of dy's dtype first), bit for
 * bit: one launch up to 8 tile rows, partials and l8_dbias_reduce past
 * them (1025, 2048, 4733 rows: 9, 16 and 37 tile rows, the last CTA row of
 * the grid partial), empty and one-column tensors; every dtype. */
START_TEST(test_gpu_dbias_alone)
{
    l8_ctx *g = mk_ctx("cuda:0");
    l8_rng r;
    l8_rng_init(&r, 0xdba1);
    const int64_t shapes[][2] = { { 4733, 72 }, { 2048, 512 }, { 1025, 33 }, { 1024, 40 },
                                  { 129, 1 }, { 1, 4000 }, { 0, 5 }, { 300, 8 }, { 256, 512 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int hi = 0; hi < 3; hi++)
            for (int act = 0; act < 2; act++) {
                int64_t R = shapes[k][0], C = shapes[k][1];
                l8_dtype dt = HPS[hi], ddt = HPS[(k + (size_t)hi + (size_t)act) % 3];
                size_t n = (size_t)(R * C);
                void *x = xmalloc(n * 4 + 4), *a = xmalloc(n * 4 + 4);
                fill_hp(&r, x, dt, n, (int)(k % 2), 4.0f);
                fill_hp(&r, a, dt, n, 0, 4.0f);
                l8_tensor *in = mk2(g, dt, R, C), *ta = mk2(g, dt, R, C), *hgt = mk2(g, dt, R, C);
                l8_tensor *ot = mk2(g, L8_E4M3, C, R), *d0 = mk1(g, ddt, C), *d1 = mk1(g, ddt, C);
                add_meta(ot, 1.0f, 0.0f);
                if (n) { put(in, x); put(ta, a); }
                poison(d0, 0xee);
                poison(d1, 0xdd);
                if (act) {
                    L8_CK(l8_dbias_dact(L8_ACT_GELU, in, ta, d0, NULL));
                    L8_CK(l8_gelu_backward(ta, in, hgt, NULL));
                    L8_CK(l8_fp8_cast_transpose_dbias(hgt, NULL, ot, d1, 0, NULL));
                } else {
                    L8_CK(l8_dbias_dact(L8_ACT_NONE, in, NULL, d0, NULL));
                    L8_CK(l8_fp8_cast_transpose_dbias(in, NULL, ot, d1, 0, NULL));
                }
                float v0[4000], v1[4000];
                get(d0, v0);
                get(d1, v1);
                for (int64_t c = 0; c < C; c++)
                    ck_assert_msg(same_float(ref_load(v0, ddt, (size_t)c), ref_load(v1, ddt, (size_t)c)),
                                  "l8_dbias_dact act %d [%lld x %lld] dt %d dbias %d col %lld: "
                                  "%.9g, the cast's %.9g", act, (long long)R, (long long)C, dt,
                                  ddt, (long long)c, ref_load(v0, ddt, (size_t)c),
                                  ref_load(v1, ddt, (size_t)c));
                l8_tensor *all[] = { in, ta, hgt, ot, d0, d1 };
                for (size_t i = 0; i < 6; i++) l8_tensor_destroy(all[i]);
                free(x);
                free(a);
            }
    done_ctx(g);
}
END_TEST

static void gpu_ct_shapes(l8_ctx *g, l8_ctx *h, l8_rng *r);

START_TEST(test_gpu_cast_transpose)
{
    l8_ctx *g = mk_ctx("cuda:0"), *h = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0x9c7);
    const int dflt = l8i_cast_sm_max_tiles, dhalf = l8i_cast_sm_half_min_rows;
    const int d8 = l8i_cast_sm_eighth_max_ctas;
    l8i_cast_sm_max_tiles = 0;
    l8i_cast_split = 0;                             /* the tile kernel alone */
    l8i_cast_strip = 0;
    gpu_ct_shapes(g, h, &r);
    l8i_cast_split = 1;                             /* the slow shapes' cast + transpose */
    gpu_ct_shapes(g, h, &r);
    l8i_cast_strip = 2;                             /* dense out_t, rows % 16 != 0: the strip kernel */
    gpu_ct_shapes(g, h, &r);
    {   /* what decides the _cl entries (ops/cast.c): clusters at once, for the log */
        CUfunction f;
        unsigned n[9] = { 0 };
        ck_assert_int_eq(l8i_kernel_smem(g, "cast_transpose_strip",
                                         "l8_cast_transpose_strip_db_cl_bf16", STRIP_DB_SMEM(2u),
                                         &f), L8_OK);
        for (unsigned cy = 2; cy <= 8; cy++)
            ck_assert_int_eq(l8i_max_clusters(g, f, 512, cy, STRIP_DB_SMEM(2u), &n[cy]), L8_OK);
        printf("strip db_cl bf16: clusters at once of 2..8 CTAs: %u %u %u %u %u %u %u\n", n[2],
               n[3], n[4], n[5], n[6], n[7], n[8]);
    }
    l8i_cast_strip_cl = 2;                          /* clusters for the w entries too */
    gpu_strip_cases(g, h, &r);
    l8i_cast_strip_cl = 0;                          /* dbias: partials and l8_dbias_reduce */
    gpu_strip_cases(g, h, &r);
    l8i_cast_strip_cl = 1;
    l8i_cast_strip = 1;
    l8i_cast_sm_max_tiles = dflt;
    l8i_cast_sm_half_min_rows = INT_MAX;            /* the small-tile kernel, 8 rows a thread */
    gpu_ct_shapes(g, h, &r);
    l8i_cast_sm_half_min_rows = 0;                  /* 4 rows a thread wherever it applies */
    l8i_cast_sm_eighth_max_ctas = 0;
    gpu_ct_shapes(g, h, &r);
    l8i_cast_sm_eighth_max_ctas = INT_MAX;          /* and 2 without dbias */
    gpu_ct_shapes(g, h, &r);
    l8i_cast_sm_half_min_rows = dhalf;
    l8i_cast_sm_eighth_max_ctas = d8;
    done_ctx(h);
    done_ctx(g);
}
END_TEST

/* l8_fp8_cast_transpose_act (dact 0) / _dact (1) on the GPU against the ops
 * they stand for on the GPU (l8_gelu / l8_gelu_backward into a tensor of the
 * input's dtype, then l8_fp8_cast_transpose(_dbias), or l8_fp8_cast without
 * out_t): every output byte, amax, scale_inv and dbias bit for bit. outs:
 * bit 0 out, bit 1 out_t; adt: a's dtype; dbias_dt < 0: none. The fused op
 * gets act_flags (L8_CAST_FEW_SMS: the unfused ops on the tile kernel). */
static unsigned act_flags;
static void gpu_act_case(l8_ctx *g, l8_rng *r, int dact, int64_t R, int64_t C, l8_dtype dt,
                         l8_dtype adt, l8_dtype f, int outs, int dbias_dt)
{
    size_t n = (size_t)(R * C);
    void *x = xmalloc(n * 4 + 4), *a = xmalloc(n * 4 + 4);
    fill_hp(r, x, dt, n, (int)((R + C) % 2), 4.0f);
    fill_hp(r, a, adt, n, 0, 4.0f);
    float scale = random_scale(r);
    uint8_t *y[2][2];
    float db[2][2048], meta[2][3];
    for (int side = 0; side < 2; side++) {
        l8_tensor *in = mk2(g, dt, R, C), *ta = dact ? mk2(g, adt, R, C) : NULL;
        l8_tensor *out = (outs & 1) ? mk2(g, f, R, C) : NULL;
        l8_tensor *ot = (outs & 2) ? mk2(g, f, C, R) : NULL;
        l8_tensor *tdb = dbias_dt >= 0 ? mk1(g, (l8_dtype)dbias_dt, C) : NULL;
        l8_fp8_meta *m = add_meta(out ? out : ot, scale, STALE_AMAX);
        if (out && ot) L8_CK(l8_tensor_set_fp8_meta(ot, m));
        if (n) put(in, x);
        if (ta && n) put(ta, a);
        if (out) poison(out, 0x5a);
        if (ot) poison(ot, 0x5a);
        if (tdb) poison(tdb, 0xee);
        if (side == 0 && dact) {
            L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in, ta, out, ot, tdb, act_flags, NULL));
        } else if (side == 0) {
            L8_CK(l8_fp8_cast_transpose_act(L8_ACT_GELU, in, out, ot, act_flags, NULL));
        } else {
            l8_tensor *h = mk2(g, dt, R, C);
            if (dact) L8_CK(l8_gelu_backward(ta, in, h, NULL));
            else L8_CK(l8_gelu(in, h, NULL));
            if (ot) ct_call(h, out, ot, tdb);
            else L8_CK(l8_fp8_cast(h, out, 0, NULL));
            l8_tensor_destroy(h);
        }
        for (int o = 0; o < 2; o++) {
            l8_tensor *t = o ? ot : out;
            y[side][o] = xmalloc(n + 1);
            if (t) get(t, y[side][o]);
        }
        if (tdb) get(tdb, db[side]);
        if (tdb && dact) {
            /* the bias gradient alone (l8_dbias_dact), through the
             * activation on side 0 and of the activation's output h on
             * side 1: the casts' dbias bit for bit (checked below) */
            float dba[2048];
            poison(tdb, 0xee);
            if (side == 0) {
                L8_CK(l8_dbias_dact(L8_ACT_GELU, in, ta, tdb, NULL));
            } else {
                l8_tensor *h = mk2(g, dt, R, C);
                L8_CK(l8_gelu_backward(ta, in, h, NULL));
                L8_CK(l8_dbias_dact(L8_ACT_NONE, h, NULL, tdb, NULL));
                l8_tensor_destroy(h);
            }
            get(tdb, dba);
            for (int64_t c = 0; c < C; c++)
                ck_assert_msg(same_float(ref_load(dba, (l8_dtype)dbias_dt, (size_t)c),
                                         ref_load(db[side], (l8_dtype)dbias_dt, (size_t)c)),
                              "l8_dbias_dact [%lld x %lld] dt %d a %d side %d col %lld: %.9g, "
                              "the cast's %.9g", (long long)R, (long long)C, dt, adt, side,
                              (long long)c, ref_load(dba, (l8_dtype)dbias_dt, (size_t)c),
                              ref_load(db[side], (l8_dtype)dbias_dt, (size_t)c));
        }
        L8_CK(l8_fp8_meta_get(m, &meta[side][0], &meta[side][1], &meta[side][2]));
        l8_tensor *all[] = { in, ta, out, ot, tdb };
        for (size_t i = 0; i < 5; i++) l8_tensor_destroy(all[i]);
    }
    for (int o = 0; o < 2; o++) {
        if (!(outs & (1 << o))) continue;
        size_t i = 0;
        while (i < n && y[0][o][i] == y[1][o][i]) i++;
        ck_assert_msg(i == n, "%s [%lld x %lld] dt %d a %d fmt %d %s[%zu]: fused 0x%02x ops 0x%02x",
                      dact ? "dact" : "act", (long long)R, (long long)C, dt, adt, f,
                      o ? "out_t" : "out", i, y[0][o][i], y[1][o][i]);
    }
    ck_assert_msg(same_float(meta[0][2], meta[1][2]), "act amax fused %g ops %g", meta[0][2],
                  meta[1][2]);
    ck_assert(fbits(meta[0][1]) == fbits(meta[1][1]));
    for (int64_t c = 0; dbias_dt >= 0 && c < C; c++) {
        float u = ref_load(db[0], (l8_dtype)dbias_dt, (size_t)c);
        float v = ref_load(db[1], (l8_dtype)dbias_dt, (size_t)c);
        ck_assert_msg(same_float(u, v), "dact dbias [%lld x %lld] col %lld: fused %.9g ops %.9g",
                      (long long)R, (long long)C, (long long)c, u, v);
    }
    free(x);
    free(a);
    for (int sd = 0; sd < 2; sd++) { free(y[sd][0]); free(y[sd][1]); }
}

/* The fused shapes (up to 64 tiles, dbias up to 512 rows: 129 x 1024,
 * 256 x 512, 300 x 520, 512 x 784 in clusters of tile rows) and the ones
 * past them (through a scratch), every input dtype, with and without out,
 * out_t, dbias; a of another dtype than dy. */
START_TEST(test_gpu_cast_act)
{
    l8_ctx *g = mk_ctx("cuda:0");
    l8_rng r;
    l8_rng_init(&r, 0xac70);
    const int64_t shapes[][2] = { { 256, 512 }, { 16, 512 }, { 256, 16 }, { 17, 33 }, { 1, 1 },
                                  { 300, 520 }, { 1000, 1000 }, { 1031, 1000 }, { 0, 64 },
                                  { 512, 784 }, { 129, 1024 }, { 128, 256 }, { 100, 200 } };
    const int dhalf = l8i_cast_sm_half_min_rows, d8 = l8i_cast_sm_eighth_max_ctas;
    /* the small-tile kernel with 8 rows a thread, then its entries of 4 rows
     * a thread wherever they apply (quarter without dbias; half with dbias
     * over one tile row: 128 x 256, 100 x 200), then 2 rows a thread without
     * dbias (eighth); last, the default knobs with L8_CAST_FEW_SMS (the
     * tile kernel against the small-tile kernel's bytes) */
    for (int pass = 0; pass < 4; pass++) {
        l8i_cast_sm_half_min_rows = pass == 3 ? dhalf : pass ? 0 : INT_MAX;
        l8i_cast_sm_eighth_max_ctas = pass == 3 ? d8 : pass == 2 ? INT_MAX : 0;
        act_flags = pass == 3 ? L8_CAST_FEW_SMS : 0u;
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int hi = 0; hi < 3; hi++) {
                int64_t R = shapes[k][0], C = shapes[k][1];
                l8_dtype dt = HPS[hi], f = FMTS[(k + (size_t)hi) % 2];
                int outs = 1 + (int)((k + (size_t)hi) % 3);          /* out, out_t, both */
                gpu_act_case(g, &r, 0, R, C, dt, dt, f, outs, -1);
                gpu_act_case(g, &r, 1, R, C, dt, dt, L8_E5M2, outs | 2, (int)HPS[(k + 1) % 3]);
                gpu_act_case(g, &r, 1, R, C, dt, dt, L8_E5M2, 3 - (int)(k % 2), -1);
            }
    }
    l8i_cast_sm_half_min_rows = dhalf;
    l8i_cast_sm_eighth_max_ctas = d8;
    act_flags = 0;
    gpu_act_case(g, &r, 1, 256, 512, L8_BF16, L8_F32, L8_E5M2, 3, (int)L8_F32);
    gpu_act_case(g, &r, 1, 128, 256, L8_BF16, L8_F32, L8_E5M2, 3, (int)L8_F32);
    done_ctx(g);
}
END_TEST

static void gpu_ct_shapes(l8_ctx *g, l8_ctx *h, l8_rng *r)
{
    const int64_t shapes[][2] = { { 1, 1 }, { 17, 33 }, { 128, 128 }, { 256, 384 }, { 1000, 1000 },
                                  { 1, 1000 }, { 1000, 1 }, { 136, 264 }, { 16, 17 }, { 129, 127 },
                                  { 4096, 4096 },
                                  /* rows % 8 != 0 with vector row loads: transposed rows
                                   * at every address % 4 (the P2_WORDS stores) */
                                  { 1003, 520 }, { 258, 1024 },
                                  /* full 128-row tiles with rows % 16 != 0: the shifted
                                   * 16-B stores (P2_SHIFT) at every address % 16, next to
                                   * edge tiles; columns % 16 == 8 and odd */
                                  { 257, 136 }, { 259, 384 }, { 264, 257 }, { 269, 200 },
                                  { 271, 1000 }, { 385, 131 }, { 1031, 1000 }, { 300, 520 },
                                  /* edge tiles: fewer than 16 rows, under a tile without
                                   * a halo, partial pieces */
                                  { 5, 300 }, { 100, 260 }, { 143, 136 }, { 150, 136 },
                                  /* rows % 16 == 0, cols % 8 != 0: the word loads next to
                                   * whole 16-B transposed stores (the w_ form) */
                                  { 256, 1031 }, { 384, 130 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int hi = 0; hi < 3; hi++)
            gpu_ct_case(g, h, r, shapes[k][0], shapes[k][1], HPS[hi], FMTS[(k + (size_t)hi) % 2],
                        (int)(k % 3 != 2), -1, (int)(k % 2));
    /* dbias, every output dtype. Up to one tile row (128 rows) the tile
     * kernel sums the columns itself (DB_DIRECT): 0..128 rows, here next to
     * 129 and more, which go through l8_dbias_reduce (or up to 512 rows, in
     * the small-tile passes, the clusters); 4733 rows = 37 tile
     * rows: two rounds of the reduction's 16 loads in flight, then 5 one by
     * one */
    const int64_t dshapes[][2] = { { 1, 1 }, { 17, 33 }, { 1000, 1000 }, { 300, 8 }, { 2048, 512 },
                                   { 4733, 72 }, { 128, 1100 }, { 129, 260 }, { 100, 130 },
                                   { 0, 260 }, { 256, 512 }, { 512, 100 }, { 500, 33 },
                                   { 640, 64 } };
    for (size_t k = 0; k < sizeof dshapes / sizeof dshapes[0]; k++)
        for (int hi = 0; hi < 3; hi++)
            gpu_ct_case(g, h, r, dshapes[k][0], dshapes[k][1], HPS[hi], L8_E5M2, 1, (int)HPS[(k + (size_t)hi) % 3],
                        k == 1);
    /* views at offsets: every input path next to unaligned outputs; 272 x 257:
     * a halo that ends with the matrix next to a full tile of odd columns (its
     * word loads would read past the matrix: it loads element by element) */
    const int64_t oshapes[][2] = { { 300, 520 }, { 264, 257 }, { 257, 1031 }, { 1031, 136 },
                                   { 272, 257 } };
    const int64_t xoffs[] = { 2, 4, 6, 8 }, yoffs[] = { 1, 3, 5, 0 };
    for (size_t k = 0; k < sizeof oshapes / sizeof oshapes[0]; k++)
        for (size_t o = 0; o < 4; o++)
            gpu_ct_view_case(g, h, r, oshapes[k][0], oshapes[k][1], HPS[(k + o) % 3],
                             xoffs[o] * (HPS[(k + o) % 3] == L8_F32 ? 2 : 1), yoffs[(o + k) % 4],
                             yoffs[(o + k) % 4], 1, (int)((k + o) % 2));
}

/* Transposes one random R x C byte matrix on the GPU and on the host and
 * compares every byte of the output storage: the input view starts at byte
 * off of its storage, the output view at 32 + off, with 32 guard bytes on
 * both sides of it that must keep their poison (off 0: both bases aligned). */
static void transpose_both(l8_ctx *g, l8_ctx *h, l8_rng *r, int64_t R, int64_t C, int64_t off)
{
    int64_t n = R * C, nb = n + 64 + off;
    int64_t dims[2] = { R, C }, tdims[2] = { C, R };
    uint8_t *x = xmalloc((size_t)n), *y[2] = { xmalloc((size_t)nb), xmalloc((size_t)nb) };
    for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)l8_rng_next(r);
    for (int side = 0; side < 2; side++) {
        l8_ctx *ctx = side ? h : g;
        l8_tensor *a = mk_at(ctx, (size_t)(n + 16), (size_t)off, L8_E4M3, 2, dims);
        l8_tensor *b = mk_at(ctx, (size_t)nb, (size_t)(32 + off), L8_E4M3, 2, tdims);
        l8_tensor *whole = view_of(b, 0, L8_E4M3, 1, &nb);
        put(a, x);
        poison(whole, 0x3c);
        L8_CK(l8_fp8_transpose(a, b, NULL));
        get(whole, y[side]);
        l8_tensor_destroy(a);
        l8_tensor_destroy(b);
        l8_tensor_destroy(whole);
    }
    int64_t i = 0;
    while (i < nb && y[0][i] == y[1][i]) i++;
    ck_assert_msg(i == nb, "transpose [%lld x %lld] at offset %lld: byte %lld of the output"
                  " storage (the view starts at %lld, at most %d CTAs): gpu 0x%02x host 0x%02x",
                  (long long)R, (long long)C, (long long)off, (long long)i, (long long)(32 + off),
                  l8i_transpose_max_ctas, i < nb ? y[0][i] : 0, i < nb ? y[1][i] : 0);
    free(x);
    free(y[0]);
    free(y[1]);
}

START_TEST(test_gpu_dequantize_transpose)
{
    l8_ctx *g = mk_ctx("cuda:0"), *h = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0x9d0);
    const int64_t sizes[] = { 1, 256, 1000, 65536 + 5 };
    for (size_t si = 0; si < 4; si++)
        for (int fi = 0; fi < 2; fi++)
            for (int hi = 0; hi < 3; hi++)
                for (size_t mis = 0; mis < 2; mis++) {
                    int64_t n = sizes[si];
                    uint8_t *codes = xmalloc((size_t)n);
                    for (int64_t i = 0; i < n; i++)
                        codes[i] = (uint8_t)(si == 1 ? i : (int64_t)l8_rng_below(&r, 256));
                    float si_ = random_scale(&r);
                    float *o[2] = { xmalloc((size_t)n * 4), xmalloc((size_t)n * 4) };
                    for (int side = 0; side < 2; side++) {
                        l8_ctx *ctx = side ? h : g;
                        size_t osz = hp_size(HPS[hi]);
                        l8_tensor *q = mk_at(ctx, (size_t)n + 16, mis, FMTS[fi], 1, &n);
                        l8_tensor *out = mk_at(ctx, ((size_t)n + 16) * osz, mis * osz, HPS[hi], 1,
                                               &n);
                        l8_fp8_meta *m = add_meta(q, 1.0f, 0.0f);
                        L8_CK(l8_fp8_meta_set(m, 1.0f, si_, 0.0f));
                        put(q, codes);
                        poison(out, 0x77);
                        L8_CK(l8_fp8_dequantize(q, out, NULL));
                        get(out, o[side]);
                        l8_tensor_destroy(q);
                        l8_tensor_destroy(out);
                    }
                    for (int64_t i = 0; i < n; i++) {
                        float a = ref_load(o[0], HPS[hi], (size_t)i), b = ref_load(o[1], HPS[hi], (size_t)i);
                        ck_assert_msg(same_float(a, b), "dequant fmt %d out %d code 0x%02x: gpu %g host %g",
                                      FMTS[fi], HPS[hi], codes[i], a, b);
                    }
                    free(codes);
                    free(o[0]);
                    free(o[1]);
                }
    /* each shape with the usual grid (a CTA per tile), then on one CTA and on
     * three: many tiles through one CTA in turn (PIPELINE in the .ptx: a
     * tile's loads in flight over phase 2 of the one before, both shared
     * buffers), edge and whole tiles, halo or not, one after the other */
    const int max_ctas[] = { 0, 1, 3 };
    /* the loads: 16 B (cols % 16 == 0), 2 x 8 B (cols % 8 == 0), aligned words
     * funnel-shifted (any cols; 258 and 261 put full tiles next to the limit of
     * 3 bytes past a tile row), predicated bytes (edges); the stores: 16 B,
     * P2_SHIFT (full tiles, rows % 16 != 0), 8 B, words and bytes (edge tiles) */
    const int64_t shapes[][2] = { { 1, 1 }, { 17, 33 }, { 128, 128 }, { 1000, 1000 }, { 1, 4096 },
                                  { 4096, 3 }, { 4096, 4096 }, { 264, 136 }, { 1003, 517 },
                                  { 258, 1024 }, { 384, 261 }, { 384, 258 }, { 257, 136 },
                                  { 263, 1031 }, { 1031, 263 }, { 520, 4104 }, { 300, 261 },
                                  { 5, 300 }, { 143, 261 }, { 100, 1000 }, { 15, 17 },
                                  { 1003, 1024 } };
    /* and at byte offsets: unaligned input bases (the word loads shifted from
     * the first row on, or off) and output bases (no VEC_T16: every tile with
     * 128 rows through P2_SHIFT); 272 x 258: a halo that ends with the matrix
     * next to a full tile 2 columns from the end (loaded byte by byte) */
    const int64_t oshapes[][2] = { { 257, 136 }, { 384, 261 }, { 256, 1000 }, { 1031, 263 },
                                   { 272, 258 } };
    const int64_t offs[] = { 1, 3, 4, 8 };
    for (size_t gi = 0; gi < sizeof max_ctas / sizeof max_ctas[0]; gi++) {
        l8i_transpose_max_ctas = max_ctas[gi];
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            transpose_both(g, h, &r, shapes[k][0], shapes[k][1], 0);
        for (size_t k = 0; k < sizeof oshapes / sizeof oshapes[0]; k++)
            for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++)
                transpose_both(g, h, &r, oshapes[k][0], oshapes[k][1], offs[o]);
    }
    l8i_transpose_max_ctas = 0;
    done_ctx(h);
    done_ctx(g);
}
END_TEST

/* ======================================================================== */
/* row-padded outputs (ops/cast.h's GEMM-ready layout)                      */

enum { PAD_CT, PAD_CT_DB, PAD_ACT, PAD_DACT, PAD_T, PAD_OPS };
static const char *const pad_op_name[PAD_OPS] = { "cast_transpose", "cast_transpose_dbias",
                                                  "cast_transpose_act", "cast_transpose_dact",
                                                  "transpose" };

/* A view [d0, d1] with strides [ld, 1] (ld == d1: contiguous) at byte 32
 * of a new storage of 64 + d0 * ld bytes on ctx, and a u8 view of that
 * whole storage in *whole; both poisoned 0x3c. */
static l8_tensor *pad_view(l8_ctx *ctx, l8_dtype dt, int64_t d0, int64_t d1, int64_t ld,
                           l8_tensor **whole)
{
    int64_t nb = 64 + d0 * ld, dims[2] = { d0, d1 }, strides[2] = { ld, 1 };
    l8_storage *st = NULL;
    l8_tensor *v = NULL;
    L8_CK(l8_storage_create(ctx, (size_t)nb, NULL, &st));
    L8_CK(l8_tensor_from_storage(st, 32, dt, 2, dims, strides, &v));
    L8_CK(l8_tensor_from_storage(st, 0, L8_U8, 1, &nb, NULL, whole));
    l8_storage_release(st);
    poison(*whole, 0x3c);
    return v;
}

/* One op of the family on ctx into out_t [C, R] with row stride ld and (with
 * out; not PAD_T) out [R, C] with row stride ldo (ld == R, ldo == C:
 * contiguous), each a pad_view: their whole storages to wt (64 + C * ld
 * bytes) and wo (64 + R * ldo), the f32 dbias (the _dbias and _dact ops) to
 * db. x: R x C of dt (of the FP8 dtype f for PAD_T), a: the activation's
 * input (dt). */
static void pad_run(l8_ctx *ctx, int op, const void *x, const void *a, l8_dtype dt, l8_dtype f,
                    int64_t R, int64_t C, int64_t ld, int64_t ldo, float scale, int with_out,
                    uint8_t *wt, uint8_t *wo, float *db)
{
    l8_tensor *wvt = NULL, *wvo = NULL;
    l8_tensor *ot = pad_view(ctx, f, C, R, ld, &wvt);
    l8_tensor *out = with_out ? pad_view(ctx, f, R, C, ldo, &wvo) : NULL;
    l8_tensor *in = mk2(ctx, op == PAD_T ? f : dt, R, C);
    l8_tensor *ta = op == PAD_DACT ? mk2(ctx, dt, R, C) : NULL;
    l8_tensor *tdb = op == PAD_CT_DB || op == PAD_DACT ? mk1(ctx, L8_F32, C) : NULL;
    if (op != PAD_T) {
        l8_fp8_meta *m = add_meta(ot, scale, 0.0f);
        if (out) L8_CK(l8_tensor_set_fp8_meta(out, m));
    }
    if (R > 0 && C > 0) {
        put(in, x);
        if (ta) put(ta, a);
    }
    if (tdb) poison(tdb, 0xee);
    switch (op) {
    case PAD_CT: L8_CK(l8_fp8_cast_transpose(in, out, ot, 0, NULL)); break;
    case PAD_CT_DB: L8_CK(l8_fp8_cast_transpose_dbias(in, out, ot, tdb, 0, NULL)); break;
    case PAD_ACT: L8_CK(l8_fp8_cast_transpose_act(L8_ACT_GELU, in, out, ot, 0, NULL)); break;
    case PAD_DACT:
        L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, in, ta, out, ot, tdb, 0, NULL));
        break;
    default: L8_CK(l8_fp8_transpose(in, ot, NULL)); break;
    }
    get(wvt, wt);
    if (wvo) get(wvo, wo);
    if (tdb) get(tdb, db);
    l8_tensor *all[] = { ot, wvt, out, wvo, in, ta, tdb };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
}

/* The rules of a padded output's storage (whole: C rows of R elements, row
 * stride ld) against the same op's contiguous output (its storage `dense`,
 * row stride R): equal data; columns R .. min(R16, ld) - 1 zero; the columns
 * from R16 on and the 32 guard bytes on each side keep their poison. */
static void pad_check_layout(const uint8_t *whole, const uint8_t *dense, int64_t R, int64_t C,
                             int64_t ld, const char *what)
{
    int64_t r16 = (R + 15) / 16 * 16, nb = 64 + C * ld;
    for (int64_t i = 0; i < nb; i++) {
        int64_t k = i - 32, c = ld ? k / ld : C, r = ld ? k % ld : 0;   /* ld 0: no rows */
        unsigned want = k < 0 || c >= C ? 0x3c : r < R ? dense[32 + c * R + r] : r < r16 ? 0 : 0x3c;
        if (k >= 0 && c >= C) c = -1;
        ck_assert_msg(whole[i] == want, "%s [%lld x %lld] ld %lld: storage byte %lld (row %lld, "
                      "column %lld) 0x%02x want 0x%02x", what, (long long)R, (long long)C,
                      (long long)ld, (long long)i, (long long)(k < 0 ? -1 : c),
                      (long long)(k < 0 ? -1 : r), whole[i], want);
    }
}

/* Inputs for pad_run: x (R x C of dt, or bytes), a, a finite scale. */
static void pad_inputs(l8_rng *r, l8_dtype dt, int64_t R, int64_t C, void **x, void **a)
{
    size_t n = (size_t)(R * C);
    *x = xmalloc(n * 4 + 4);
    *a = xmalloc(n * 4 + 4);
    fill_hp(r, *x, dt, n, 0, 8.0f);
    fill_hp(r, *a, dt, n, 0, 4.0f);
}

START_TEST(test_padded_host)
{
    l8_ctx *ctx = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xad);
    const int64_t shapes[][2] = { { 1, 1 }, { 17, 33 }, { 129, 257 }, { 16, 40 }, { 0, 5 },
                                  { 3, 0 }, { 200, 40 }, { 5, 300 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int op = 0; op < PAD_OPS; op++) {
            int64_t R = shapes[k][0], C = shapes[k][1], r16 = (R + 15) / 16 * 16;
            l8_dtype dt = HPS[(k + (size_t)op) % 3], f = FMTS[k % 2];
            void *x, *a;
            pad_inputs(&r, op == PAD_T ? L8_F32 : dt, R, C, &x, &a);
            float scale = random_scale(&r);
            int with_out = op != PAD_T && (k + (size_t)op) % 2;
            int64_t c16 = (C + 15) / 16 * 16;
            uint8_t *dense = xmalloc((size_t)(64 + C * R)), *y0 = xmalloc((size_t)(64 + R * C));
            float db0[512], db1[512];
            pad_run(ctx, op, x, a, dt, f, R, C, R, C, scale, with_out, dense, y0, db0);
            /* out_t padded, out contiguous; out padded; both, further */
            const int64_t lds[3][2] = { { r16 > R ? r16 : r16 + 16, C },
                                        { R, c16 > C ? c16 : c16 + 16 }, { r16 + 32, c16 + 48 } };
            for (int li = 0; li < 3; li++) {
                int64_t ld = lds[li][0], ldo = lds[li][1];
                uint8_t *wt = xmalloc((size_t)(64 + C * ld)), *wo = xmalloc((size_t)(64 + R * ldo));
                pad_run(ctx, op, x, a, dt, f, R, C, ld, ldo, scale, with_out, wt, wo, db1);
                pad_check_layout(wt, dense, R, C, ld, pad_op_name[op]);
                if (with_out)
                    pad_check_layout(wo, y0, C, R, ldo, pad_op_name[op]);
                for (int64_t c = 0; (op == PAD_CT_DB || op == PAD_DACT) && c < C; c++)
                    ck_assert(fbits(db0[c]) == fbits(db1[c]));
                free(wt);
                free(wo);
            }
            if (op == PAD_CT)     /* the data against the plain reference too */
                for (int64_t c = 0; c < C; c++)
                    for (int64_t rr = 0; rr < R; rr++) {
                        float v = ref_load(x, dt, (size_t)(rr * C + c));
                        unsigned want = ref_encode(v * scale, f);
                        ck_assert_uint_eq(dense[32 + c * R + rr], want);
                        ck_assert(!with_out || y0[32 + rr * C + c] == want);
                    }
            free(x);
            free(a);
            free(dense);
            free(y0);
        }

    /* what is not the padded layout: ld % 16 != 0, ld <= rows, a column
     * stride, an unaligned start; the group op takes no padded tensor */
    l8_tensor *in = mk2(ctx, L8_BF16, 20, 8), *q = mk2(ctx, L8_E4M3, 20, 8);
    poison(in, 0x3f);
    l8_storage *st = NULL;
    L8_CK(l8_storage_create(ctx, 1024, NULL, &st));
    const struct { size_t off; int64_t s0, s1; } bad[] = {
        { 0, 24, 1 }, { 0, 40, 1 }, { 0, 16, 1 }, { 0, 64, 2 }, { 8, 32, 1 }, { 1, 48, 1 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t tdims[2] = { 8, 20 }, strides[2] = { bad[i].s0, bad[i].s1 };
        l8_tensor *v = NULL;
        L8_CK(l8_tensor_from_storage(st, bad[i].off, L8_E4M3, 2, tdims, strides, &v));
        add_meta(v, 1.0f, 0.0f);
        L8_CK_ST(l8_fp8_cast_transpose(in, NULL, v, 0, NULL), L8_ERR_INVALID_ARG);
        L8_CK_ST(l8_fp8_transpose(q, v, NULL), L8_ERR_INVALID_ARG);
        l8_tensor_destroy(v);
    }
    {
        int64_t tdims[2] = { 8, 20 }, strides[2] = { 32, 1 };
        l8_tensor *v = NULL;
        L8_CK(l8_tensor_from_storage(st, 0, L8_E4M3, 2, tdims, strides, &v));
        add_meta(v, 1.0f, 0.0f);
        L8_CK(l8_fp8_cast_transpose(in, NULL, v, 0, NULL));
        const l8_tensor *ins[1] = { in };
        l8_tensor *outs[1] = { v };
        L8_CK_ST(l8_fp8_cast_transpose_many(1, ins, NULL, outs, 0, NULL), L8_ERR_INVALID_ARG);
        /* a padded out: with out_t only (without, the op is l8_fp8_cast), and
         * not in the group op */
        int64_t odims[2] = { 20, 8 }, ostr[2] = { 16, 1 };
        l8_tensor *vo = NULL;
        L8_CK(l8_tensor_from_storage(st, 320, L8_E4M3, 2, odims, ostr, &vo));
        L8_CK(l8_tensor_set_fp8_meta(vo, l8_tensor_fp8_meta(v)));
        L8_CK(l8_fp8_cast_transpose(in, vo, v, 0, NULL));
        L8_CK_ST(l8_fp8_cast_transpose(in, vo, NULL, 0, NULL), L8_ERR_INVALID_ARG);
        l8_tensor *qt = mk2(ctx, L8_E4M3, 8, 20), *outs2[1] = { qt }, *ys[1] = { vo };
        L8_CK(l8_tensor_set_fp8_meta(qt, l8_tensor_fp8_meta(v)));
        L8_CK_ST(l8_fp8_cast_transpose_many(1, ins, ys, outs2, 0, NULL), L8_ERR_INVALID_ARG);
        l8_tensor_destroy(qt);
        l8_tensor_destroy(vo);
        l8_tensor_destroy(v);
    }
    l8_storage_release(st);
    l8_tensor_destroy(in);
    l8_tensor_destroy(q);
    done_ctx(ctx);
}
END_TEST

/* Each op of the family into padded out_t (and out) views on the GPU:
 * against the same op's contiguous outputs on the GPU by pad_check_layout's
 * rules, dbias equal; and for the ops without an activation every byte of
 * both output storages against the host's (the GELU kernels agree with the
 * host to ~1e-6 relative, not bit for bit: ops/elementwise.h). The shapes
 * reach the tile kernel's paths (small tensors too: padded views never take
 * the small-tile kernel), the cast + byte transpose split of contiguous
 * outputs next to them, DB_DIRECT and the dbias reduction, and the byte
 * transpose on one CTA (its pipeline) as well as a CTA a tile. */
START_TEST(test_gpu_padded)
{
    l8_ctx *g = mk_ctx("cuda:0"), *h = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0xad2);
    const int64_t shapes[][2] = { { 1, 1 }, { 5, 300 }, { 17, 33 }, { 100, 260 }, { 129, 127 },
                                  { 143, 136 }, { 255, 1000 }, { 257, 136 }, { 1003, 520 },
                                  { 1031, 1000 }, { 256, 384 }, { 2049, 1031 }, { 4095, 264 } };
    for (int gi = 0; gi < 2; gi++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int op = 0; op < PAD_OPS; op++) {
                if (gi && op != PAD_T)
                    continue;
                l8i_transpose_max_ctas = gi;     /* 0: a CTA a tile; 1: one CTA */
                int64_t R = shapes[k][0], C = shapes[k][1], r16 = (R + 15) / 16 * 16;
                int64_t ld = r16 > R ? r16 + 16 * (int64_t)(k % 2) : r16 + 16;
                /* out: padded where its rows are odd, else contiguous or padded in turn */
                int64_t c16 = (C + 15) / 16 * 16;
                int64_t ldo = c16 > C ? c16 + 16 * (int64_t)(k % 2) : k % 2 ? C : c16 + 16;
                l8_dtype dt = HPS[(k + (size_t)op) % 3], f = FMTS[(k + (size_t)op) % 2];
                void *x, *a;
                pad_inputs(&r, op == PAD_T ? L8_F32 : dt, R, C, &x, &a);
                float scale = random_scale(&r);
                int with_out = op != PAD_T && (k + (size_t)op) % 3 != 2;
                int act = op == PAD_ACT || op == PAD_DACT;
                size_t nbt = (size_t)(64 + C * ld), nbo = (size_t)(64 + R * ldo);
                /* 0: the GPU, padded; 1: the GPU, contiguous; 2: the host, padded */
                uint8_t *wt[3], *wo[3];
                float *db[3];
                for (int v = 0; v < 3; v++) {
                    wt[v] = xmalloc(v == 1 ? (size_t)(64 + C * R) : nbt);
                    wo[v] = xmalloc(v == 1 ? (size_t)(64 + R * C) : nbo);
                    db[v] = xmalloc((size_t)C * 4 + 4);
                    if (v < 2 || !act)
                        pad_run(v == 2 ? h : g, op, x, a, dt, f, R, C, v == 1 ? R : ld,
                                v == 1 ? C : ldo, scale, with_out, wt[v], wo[v], db[v]);
                }
                pad_check_layout(wt[0], wt[1], R, C, ld, pad_op_name[op]);
                if (with_out)
                    pad_check_layout(wo[0], wo[1], C, R, ldo, pad_op_name[op]);
                for (int o = 0; o < 2 && !act; o++) {
                    const uint8_t *gp = o ? wo[0] : wt[0], *hp = o ? wo[2] : wt[2];
                    size_t nb = o ? nbo : nbt, i = 0;
                    if (o && !with_out)
                        break;
                    while (i < nb && gp[i] == hp[i]) i++;
                    ck_assert_msg(i == nb, "%s [%lld x %lld] ld %lld / %lld dt %d (%d CTAs max): "
                                  "%s storage byte %zu: gpu 0x%02x host 0x%02x", pad_op_name[op],
                                  (long long)R, (long long)C, (long long)ld, (long long)ldo, dt, gi,
                                  o ? "out" : "out_t", i, i < nb ? gp[i] : 0, i < nb ? hp[i] : 0);
                }
                for (int v = 1; v < (act ? 2 : 3); v++)
                    for (int64_t c = 0; (op == PAD_CT_DB || op == PAD_DACT) && c < C; c++)
                        ck_assert_msg(fbits(db[0][c]) == fbits(db[v][c]), "%s [%lld x %lld]: dbias "
                                      "col %lld: %.9g against %.9g (%s)", pad_op_name[op],
                                      (long long)R, (long long)C, (long long)c, db[0][c], db[v][c],
                                      v == 1 ? "contiguous" : "the host");
                free(x);
                free(a);
                for (int v = 0; v < 3; v++) { free(wt[v]); free(wo[v]); free(db[v]); }
            }
    l8i_transpose_max_ctas = 0;
    done_ctx(h);
    done_ctx(g);
}
END_TEST

START_TEST(test_gpu_scale_update)
{
    l8_ctx *g = mk_ctx("cuda:0"), *h = mk_ctx("host");
    l8_rng r;
    l8_rng_init(&r, 0x95c);
    su_case(g, h, &r, 50, 1024, 0, 0.0f, 0, 1, 0);
    su_case(g, h, &r, 50, 1, 0, 1.0f, 1, 1, 0);
    su_case(g, h, &r, 50, 300, 0, 0.5f, 1, 0, 1);
    su_case(g, h, &r, 50, 129, 1, 0.0f, 0, 1, 0);
    su_case(g, h, &r, 7, 0, 1, 3.0f, 1, 1, 0);
    /* the roll moves 8 x 128 elements a batch: 1025 moves exactly one batch,
     * 1026 one more element, 2500 three batches, the last one partial */
    su_case(g, h, &r, 9, 1025, 0, 0.0f, 1, 1, 0);
    su_case(g, h, &r, 9, 1026, 0, 0.0f, 0, 1, 1);
    su_case(g, h, &r, 5, 2500, 0, 1.0f, 1, 0, 0);
    done_ctx(h);
    done_ctx(g);
}
END_TEST

/* ---- exhaustive conversions ---- */

typedef struct {
    const uint8_t *got;
    uint64_t base;
    size_t n;
    l8_dtype fmt;
    uint64_t bad, bad_nan;
    uint32_t first;
    uint8_t first_got, first_want;
} sweep_job;

static void *sweep_check(void *p)
{
    sweep_job *j = p;
    for (size_t i = 0; i < j->n; i++) {
        uint32_t u = (uint32_t)(j->base + i);
        uint8_t want = l8_fp8_from_f32(bitsf(u), j->fmt);
        if (j->got[i] != want) {
            if (j->bad == 0) { j->first = u; j->first_got = j->got[i]; j->first_want = want; }
            j->bad++;
            if ((u & 0x7fffffffu) > 0x7f800000u) j->bad_nan++;
        }
    }
    return NULL;
}

START_TEST(test_gpu_exhaustive)
{
    l8_ctx *g = mk_ctx("cuda:0");
    const size_t chunk = (size_t)1 << 26;
    l8_tensor *in = mk1(g, L8_F32, (int64_t)chunk);
    l8_tensor *out[2] = { mk1(g, L8_E4M3, (int64_t)chunk), mk1(g, L8_E5M2, (int64_t)chunk) };
    add_meta(out[0], 1.0f, 0.0f);
    add_meta(out[1], 1.0f, 0.0f);
    uint32_t *x = xmalloc(chunk * 4);
    uint8_t *y = xmalloc(chunk);
    long nthr = sysconf(_SC_NPROCESSORS_ONLN);
    if (nthr < 1) nthr = 1;
    if (nthr > 32) nthr = 32;
    uint64_t bad[2] = { 0, 0 }, bad_nan[2] = { 0, 0 };
    char first[2][96] = { "", "" };
    /* Quick mode (memcheck runs): four 2^26 chunks around 0, 1.0, +Inf/NaN
     * and -Inf/NaN instead of all 64. */
    static const uint64_t quick_bases[] = { 0x00000000u, 0x3C000000u, 0x7C000000u, 0xFC000000u };
    int quick = l8_test_quick();
    uint64_t nchunks = quick ? 4 : ((uint64_t)1 << 32) / chunk;
    for (uint64_t ci = 0; ci < nchunks; ci++) {
        uint64_t base = quick ? quick_bases[ci] : ci * chunk;
        for (size_t i = 0; i < chunk; i++) x[i] = (uint32_t)(base + i);
        put(in, x);
        for (int fi = 0; fi < 2; fi++) {
            L8_CK(l8_fp8_cast(in, out[fi], 0, NULL));
            get(out[fi], y);
            pthread_t th[32];
            sweep_job jobs[32];
            size_t per = chunk / (size_t)nthr;
            for (long t = 0; t < nthr; t++) {
                jobs[t] = (sweep_job){ y + (size_t)t * per, base + (size_t)t * per,
                                       t == nthr - 1 ? chunk - (size_t)t * per : per, FMTS[fi],
                                       0, 0, 0, 0, 0 };
                ck_assert(pthread_create(&th[t], NULL, sweep_check, &jobs[t]) == 0);
            }
            for (long t = 0; t < nthr; t++) {
                pthread_join(th[t], NULL);
                if (jobs[t].bad && !first[fi][0])
                    snprintf(first[fi], sizeof first[fi], "0x%08x -> gpu 0x%02x, host 0x%02x",
                             jobs[t].first, jobs[t].first_got, jobs[t].first_want);
                bad[fi] += jobs[t].bad;
                bad_nan[fi] += jobs[t].bad_nan;
            }
        }
    }
    printf("fp8 exhaustive: %llu f32 patterns per format through the cast kernel%s\n",
           (unsigned long long)(nchunks * chunk), quick ? " (quick mode: 4 of 64 chunks)" : " (all 2^32)");
    for (int fi = 0; fi < 2; fi++)
        ck_assert_msg(bad[fi] == 0, "fmt %d: %llu of 2^32 f32 patterns differ (%llu of them NaN "
                      "inputs: see L8_FP8_NAN_BYTE); first %s", FMTS[fi], (unsigned long long)bad[fi],
                      (unsigned long long)bad_nan[fi], first[fi]);
    free(x);
    free(y);
    l8_tensor_destroy(in);
    l8_tensor_destroy(out[0]);
    l8_tensor_destroy(out[1]);

    /* every bf16 and f16 pattern through the cast kernel, every code through dequantize */
    uint16_t *p16 = xmalloc(65536 * 2);
    uint8_t *q = xmalloc(65536);
    for (uint32_t u = 0; u < 65536; u++) p16[u] = (uint16_t)u;
    for (int hi = 1; hi < 3; hi++)
        for (int fi = 0; fi < 2; fi++) {
            l8_tensor *a = mk1(g, HPS[hi], 65536), *b = mk1(g, FMTS[fi], 65536);
            add_meta(b, 1.0f, 0.0f);
            put(a, p16);
            L8_CK(l8_fp8_cast(a, b, 0, NULL));
            get(b, q);
            for (uint32_t u = 0; u < 65536; u++) {
                uint8_t want = HPS[hi] == L8_BF16 ? l8_fp8_from_bf16((uint16_t)u, FMTS[fi])
                                                  : l8_fp8_from_f16((uint16_t)u, FMTS[fi]);
                ck_assert_msg(q[u] == want, "dt %d fmt %d pattern 0x%04x: gpu 0x%02x host 0x%02x",
                              HPS[hi], FMTS[fi], u, q[u], want);
            }
            l8_tensor_destroy(a);
            l8_tensor_destroy(b);
        }
    for (int fi = 0; fi < 2; fi++) {
        l8_tensor *a = mk1(g, FMTS[fi], 256), *b = mk1(g, L8_F32, 256);
        L8_CK(l8_fp8_meta_set(add_meta(a, 1.0f, 0.0f), 1.0f, 1.0f, 0.0f));   /* scale_inv 1 */
        uint8_t codes[256];
        float v[256];
        for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
        put(a, codes);
        L8_CK(l8_fp8_dequantize(a, b, NULL));
        get(b, v);
        for (int c = 0; c < 256; c++) {
            float want = l8_fp8_to_f32((uint8_t)c, FMTS[fi]);
            /* NaN codes: NaN-ness only (the GPU's multiply gives the canonical NaN) */
            ck_assert_msg(same_float(v[c], want) &&
                          (isnan(want) || !!signbit(v[c]) == !!signbit(want)),
                          "fmt %d code 0x%02x: gpu %g, want %g", FMTS[fi], c, v[c], want);
        }
        l8_tensor_destroy(a);
        l8_tensor_destroy(b);
    }
    free(p16);
    free(q);
    done_ctx(g);
}
END_TEST

/* ---- bandwidth against a device copy of the same traffic ---- */

static float time_ms(l8_ctx *ctx, int iters, int what, l8_tensor *in, l8_tensor *out,
                     l8_tensor *ot, void *cdst, void *csrc, size_t cbytes)
{
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    l8_event *e0 = NULL, *e1 = NULL;
    L8_CK(l8_event_create(ctx, 1, &e0));
    L8_CK(l8_event_create(ctx, 1, &e1));
    for (int pass = 0; pass < 2; pass++) {          /* pass 0 warms up */
        L8_CK(l8_event_record(e0, s));
        for (int i = 0; i < (pass ? iters : 3); i++) {
            if (what == 0) L8_CK(l8_memcpy_dtod(s, cdst, csrc, cbytes));
            else if (what == 1) L8_CK(l8_fp8_cast_transpose(in, out, ot, 0, s));
            else L8_CK(l8_fp8_cast(in, out, 0, s));
        }
        L8_CK(l8_event_record(e1, s));
        L8_CK(l8_event_synchronize(e1));
    }
    float ms = 0;
    L8_CK(l8_event_elapsed_ms(e0, e1, &ms));
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    return ms / (float)iters;
}

START_TEST(test_gpu_bandwidth)
{
    l8_ctx *g = mk_ctx("cuda:0");
    const int64_t N = 8192;
    l8_tensor *in = mk2(g, L8_BF16, N, N), *out = mk2(g, L8_E4M3, N, N), *ot = mk2(g, L8_E4M3, N, N);
    l8_fp8_meta *m = add_meta(ot, 1.0f, 0.0f);
    L8_CK(l8_tensor_set_fp8_meta(out, m));
    l8_rng r;
    l8_rng_init(&r, 0xbe);
    uint16_t *x = xmalloc((size_t)(N * N) * 2);
    fill_hp(&r, x, L8_BF16, (size_t)(N * N), 0, 100.0f);
    put(in, x);
    void *a = NULL, *b = NULL;
    size_t half = (size_t)(N * N) * 2;              /* copy of 2 B/elem moves 4 B/elem */
    l8_stream *s = l8_ctx_stream(g, L8_STREAM_COMPUTE);
    L8_CK(l8_ctx_malloc(g, half, s, &a));
    L8_CK(l8_ctx_malloc(g, half, s, &b));
    float t_copy = time_ms(g, 20, 0, NULL, NULL, NULL, b, a, half);
    float t_ct = time_ms(g, 20, 1, in, out, ot, NULL, NULL, 0);
    float t_copy3 = time_ms(g, 20, 0, NULL, NULL, NULL, b, a, (size_t)(N * N) * 3 / 2);
    float t_cast = time_ms(g, 20, 2, in, out, NULL, NULL, NULL, 0);
    double bytes = (double)(N * N) * 4;
    printf("fp8 bandwidth (bf16 %lldx%lld): copy %.1f us (%.2f TB/s); cast_transpose %.1f us "
           "(%.2f TB/s, %.0f%% of copy); cast %.1f us (%.2f TB/s, %.0f%% of a copy of 3 B/elem)\n",
           (long long)N, (long long)N, t_copy * 1e3, bytes / t_copy / 1e9, t_ct * 1e3,
           bytes / t_ct / 1e9, 100.0 * t_copy / t_ct, t_cast * 1e3, bytes * 0.75 / t_cast / 1e9,
           100.0 * t_copy3 / t_cast);
    fflush(stdout);
    /* a floor that only a broken fast path misses; the targets are in
     * TARGETS.md. Not in quick mode: that is the compute-sanitizer run,
     * where every kernel is instrumented and timings mean nothing. */
    ck_assert_msg(l8_test_quick() || t_ct < 3.0f * t_copy, "cast_transpose %.1f us vs copy %.1f us", t_ct * 1e3,
                  t_copy * 1e3);
    /* the timed output is right: spot-check against the host conversion */
    uint8_t *yt = xmalloc((size_t)(N * N));
    get(ot, yt);
    for (int k = 0; k < 1000; k++) {
        int64_t i = (int64_t)l8_rng_below(&r, (uint64_t)N), j = (int64_t)l8_rng_below(&r, (uint64_t)N);
        ck_assert_uint_eq(yt[j * N + i], l8_fp8_from_bf16(x[i * N + j], L8_E4M3));
    }
    free(yt);
    free(x);
    L8_CK(l8_ctx_free(g, a));
    L8_CK(l8_ctx_free(g, b));
    l8_tensor_destroy(in);
    l8_tensor_destroy(out);
    l8_tensor_destroy(ot);
    done_ctx(g);
}
END_TEST

Suite *l8_fp8_suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *fmt = tcase_create("formats");
    tcase_add_test(fmt, test_decode_all_codes);
    tcase_add_test(fmt, test_roundtrip_and_monotonic);
    tcase_add_test(fmt, test_ties_to_even);
    tcase_add_test(fmt, test_saturation_nan_inf);
    tcase_add_test(fmt, test_subnormals_and_zero);
    tcase_add_test(fmt, test_exhaustive_16bit);
    tcase_add_test(fmt, test_random_f32);
    tcase_add_test(fmt, test_half_helpers);
    tcase_add_test(fmt, test_amax_rule);
    tcase_add_test(fmt, test_bulk_host_functions);
    TCase *ops = tcase_create("ops_host");
    tcase_add_test(ops, test_cast_host);
    tcase_add_test(ops, test_cast_transpose_host);
    tcase_add_test(ops, test_cast_transpose_dbias_host);
    tcase_add_test(ops, test_cast_transpose_many_host);
    tcase_add_test(ops, test_dequantize_transpose_host);
    tcase_add_test(ops, test_scale_update_host);
    tcase_add_test(ops, test_errors_host);
    tcase_add_test(ops, test_cast_act_host);
    tcase_add_test(ops, test_padded_host);
    TCase *host[] = { fmt, ops };
    for (size_t i = 0; i < 2; i++) {
        tcase_set_tags(host[i], "host");
        tcase_set_timeout(host[i], 300);
        suite_add_tcase(s, host[i]);
    }
    TCase *gpu = tcase_create("gpu_kernels");
    tcase_add_test(gpu, test_gpu_cast);
    tcase_add_test(gpu, test_gpu_cast_transpose);
    tcase_add_test(gpu, test_gpu_cast_transpose_many);
    tcase_add_test(gpu, test_gpu_cast_act);
    tcase_add_test(gpu, test_gpu_dbias_alone);
    tcase_add_test(gpu, test_gpu_dequantize_transpose);
    tcase_add_test(gpu, test_gpu_padded);
    tcase_add_test(gpu, test_gpu_scale_update);
    tcase_add_test(gpu, test_gpu_bandwidth);
    TCase *sweep = tcase_create("gpu_exhaustive");
    tcase_add_test(sweep, test_gpu_exhaustive);
    TCase *gcases[] = { gpu, sweep };
    for (size_t i = 0; i < 2; i++) {
        tcase_set_tags(gcases[i], "gpu");
        tcase_set_timeout(gcases[i], 900);
        suite_add_tcase(s, gcases[i]);
    }
    return s;
}
