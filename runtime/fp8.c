/* fp8.c - host conversions between f32 / bf16 / f16 and FP8 (E4M3, E5M2).
 *
 * These are the references the GPU kernels are tested against bit for bit,
 * and the arithmetic of the host backend. Everything works on integer bit
 * patterns so that the result does not depend on the host FPU's modes; the
 * only floating-point operations are the f32 multiplies of the bulk paths,
 * which are IEEE round-to-nearest on every target we build for (x86-64 SSE,
 * AArch64; no -ffast-math, no FTZ), exactly like the kernels' mul.rn.f32.
 *
 * Rounding model (round_mag below): a positive finite f32 with unbiased
 * exponent e and 24-bit significand m is rounded to a format with `mbits`
 * stored mantissa bits and minimum normal exponent `emin`. The result's
 * quantum is 2^(max(e, emin) - mbits); m is shifted right to that quantum
 * with round-to-nearest-even. The encoded magnitude code is then
 *     ((max(e, emin) - emin) << mbits) + r
 * which is right for subnormals (exponent field 0) and normals alike, and a
 * rounding carry (r == 2^(mbits+1), or 2^mbits from a subnormal) moves into
 * the exponent field by itself. Saturation and NaN are the callers' business.
 */
#include <string.h>
#include <math.h>
#include "runtime/fp8.h"

/* f32, bf16 or f16: what the bulk host references take. */
static int is_hp(l8_dtype dt) { return dt == L8_F32 || dt == L8_BF16 || dt == L8_F16; }

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Magnitude code of a (sign-cleared f32 bits, finite, nonzero) rounded to
 * nearest even in a format with mbits mantissa bits and min normal exponent
 * emin. Unbounded above: the caller saturates. */
static uint32_t round_mag(uint32_t a, int mbits, int emin)
{
    if (a < 0x00800000u)          /* f32 zero or subnormal: < 2^-126, far below half
                                     the smallest subnormal of every target format */
        return 0;
    int e = (int)(a >> 23) - 127;
    uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    int eq = e > emin ? e : emin;                 /* exponent of the result's leading bit */
    int s = (eq - mbits) - (e - 23);              /* bits to drop: >= 23 - mbits > 0 */
    uint32_t r;
    if (s > 24) {
        r = 0;                                    /* below half a quantum */
    } else {
        uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
        r = m >> s;
        if (rem > half || (rem == half && (r & 1u)))
            r++;
    }
    /* e may be large (up to 127): compute the exponent part in 32 bits. */
    return ((uint32_t)(eq - emin) << mbits) + r;
}

float l8_fp8_max(l8_dtype fmt)
{
    return fmt == L8_E4M3 ? L8_E4M3_MAX : fmt == L8_E5M2 ? L8_E5M2_MAX : 0.0f;
}

uint8_t l8_fp8_from_f32(float x, l8_dtype fmt)
{
    int mbits, emin;
    uint32_t maxb;
    if (fmt == L8_E4M3) {
        mbits = 3; emin = -6; maxb = L8_E4M3_MAX_BYTE;
    } else if (fmt == L8_E5M2) {
        mbits = 2; emin = -14; maxb = L8_E5M2_MAX_BYTE;
    } else {
        return 0;
    }
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)L8_FP8_NAN_BYTE;          /* NaN: sign dropped */
    if (a >= 0x47800000u)                          /* |x| >= 65536 (or Inf): above both maxima */
        return (uint8_t)(sign | maxb);
    uint32_t code = round_mag(a, mbits, emin);
    if (code > maxb)
        code = maxb;                               /* satfinite */
    return (uint8_t)(sign | code);
}

uint8_t l8_fp8_from_bf16(uint16_t x, l8_dtype fmt)
{
    return l8_fp8_from_f32(l8_bf16_to_f32(x), fmt);
}

uint8_t l8_fp8_from_f16(uint16_t x, l8_dtype fmt)
{
    return l8_fp8_from_f32(l8_f16_to_f32(x), fmt);
}

int l8_fp8_is_nan(uint8_t v, l8_dtype fmt)
{
    if (fmt == L8_E4M3)
        return (v & 0x7fu) == 0x7fu;
    if (fmt == L8_E5M2)
        return (v & 0x7fu) > L8_E5M2_INF_BYTE;
    return 0;
}

float l8_fp8_to_f32(uint8_t v, l8_dtype fmt)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    if (fmt == L8_E5M2)                            /* an E5M2 byte is the top byte of an f16 */
        return l8_f16_to_f32((uint16_t)(v << 8));
    if (fmt != L8_E4M3)
        return bits_f32(0x7fc00000u);
    uint32_t exp = (v >> 3) & 0xfu, man = v & 0x7u;
    if (exp == 0xfu && man == 0x7u)
        return bits_f32(sign | 0x7fc00000u);       /* NaN */
    if (exp == 0) {                                /* subnormal: man * 2^-9, exact */
        float f = (float)man * 0x1p-9f;
        return bits_f32(sign | f32_bits(f));
    }
    return bits_f32(sign | ((exp - 7u + 127u) << 23) | (man << 20));
}

uint16_t l8_bf16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    /* Round to nearest even on the dropped 16 bits; a carry out of the
     * mantissa bumps the exponent, and past the max it reaches Inf. */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

uint16_t l8_f16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return 0x7fffu;
    if (a >= 0x477ff000u)                          /* >= 65504 + half ulp: rounds to Inf */
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | round_mag(a, 10, -14));
}

float l8_bf16_to_f32(uint16_t x)
{
    return bits_f32((uint32_t)x << 16);
}

float l8_f16_to_f32(uint16_t x)
{
    uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
    uint32_t exp = (x >> 10) & 0x1fu, man = x & 0x3ffu;
    if (exp == 0x1fu)                              /* Inf, or NaN with its payload kept */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {                                /* zero or subnormal: man * 2^-24, exact */
        float f = (float)man * 0x1p-24f;
        return bits_f32(sign | f32_bits(f));
    }
    return bits_f32(sign | ((exp - 15u + 127u) << 23) | (man << 13));
}

float l8_amax_combine(float a, float b)
{
    uint32_t x = l8_amax_bits(a), y = l8_amax_bits(b);
    return bits_f32(x > y ? x : y);
}

float l8_host_load_f32(const void *x, l8_dtype dt, size_t i)
{
    switch (dt) {
    case L8_F32: return ((const float *)x)[i];
    case L8_BF16: return l8_bf16_to_f32(((const uint16_t *)x)[i]);
    case L8_F16: return l8_f16_to_f32(((const uint16_t *)x)[i]);
    case L8_E4M3: case L8_E5M2: return l8_fp8_to_f32(((const uint8_t *)x)[i], dt);
    default: return 0.0f;
    }
}

void l8_host_store_f32(void *y, l8_dtype dt, size_t i, float v)
{
    switch (dt) {
    case L8_F32: ((float *)y)[i] = v; break;
    case L8_BF16: ((uint16_t *)y)[i] = l8_bf16_from_f32(v); break;
    case L8_F16: ((uint16_t *)y)[i] = l8_f16_from_f32(v); break;
    case L8_E4M3: case L8_E5M2: ((uint8_t *)y)[i] = l8_fp8_from_f32(v, dt); break;
    default: break;
    }
}

l8_status l8_fp8_quantize_host(const void *x, l8_dtype in_dt, size_t n, float scale,
                               l8_dtype fmt, uint8_t *y, float *amax)
{
    if (!is_hp(in_dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "fp8 quantize: input dtype %s is not f32/bf16/f16",
                       l8_dtype_name(in_dt));
    if (!l8_dtype_is_fp8(fmt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "fp8 quantize: output dtype %s is not e4m3/e5m2",
                       l8_dtype_name(fmt));
    L8_ARG(n == 0 || (x && y));
    uint32_t am = amax ? l8_amax_bits(*amax) : 0;
    for (size_t i = 0; i < n; i++) {
        float v = l8_host_load_f32(x, in_dt, i);
        uint32_t b = l8_amax_bits(v);
        am = b > am ? b : am;
        y[i] = l8_fp8_from_f32(v * scale, fmt);
    }
    if (amax)
        *amax = bits_f32(am);
    return L8_OK;
}

l8_status l8_fp8_dequantize_host(const uint8_t *x, size_t n, l8_dtype fmt, float scale_inv,
                                 void *y, l8_dtype out_dt)
{
    if (!l8_dtype_is_fp8(fmt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "fp8 dequantize: input dtype %s is not e4m3/e5m2",
                       l8_dtype_name(fmt));
    if (!is_hp(out_dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "fp8 dequantize: output dtype %s is not f32/bf16/f16",
                       l8_dtype_name(out_dt));
    L8_ARG(n == 0 || (x && y));
    float lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = l8_fp8_to_f32((uint8_t)c, fmt);
    for (size_t i = 0; i < n; i++)
        l8_host_store_f32(y, out_dt, i, lut[x[i]] * scale_inv);
    return L8_OK;
}
