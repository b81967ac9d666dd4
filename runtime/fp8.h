/* fp8.h - the FP8 formats and the host conversions (FP8, bf16, f16) that
 * lean8's kernels match bit for bit. In runtime/ because the host
 * collectives (comm.h) reduce these dtypes too; the cast ops build on it.
 *
 * Formats (OCP FP8, as Hopper implements them):
 *
 *   E4M3  bias 7,  3 mantissa bits, max 448 (0x7E), min normal 2^-6,
 *         min subnormal 2^-9, no infinity, NaN = 0x7F / 0xFF.
 *   E5M2  bias 15, 2 mantissa bits, max 57344 (0x7B), min normal 2^-14,
 *         min subnormal 2^-16, +-Inf = 0x7C / 0xFC, NaN = 0x7D..0x7F (+sign).
 *
 * Conversions to FP8 follow PTX `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`:
 * round to nearest, ties to even, subnormals kept exactly; a finite value
 * whose rounded magnitude exceeds the format's max becomes +-max, and so
 * does +-Inf (satfinite); zero keeps its sign and so does a value that rounds
 * to zero (-1e-30 -> 0x80). Every NaN becomes L8_FP8_NAN_BYTE, sign dropped
 * (the GPU's f32 arithmetic produces the positive canonical NaN anyway, and
 * NVIDIA's own host emulation in cuda_fp8.hpp canonicalizes the same way).
 *
 * bf16 and f16 inputs go f32 first (exact), then as above: that is what the
 * kernels do (they must multiply by an f32 scale before converting), so a
 * 16-bit input is rounded once, never twice.
 *
 * All functions here are pure, thread-safe and never fail; a `fmt` that is
 * not L8_E4M3 or L8_E5M2 gives 0 (to FP8) or NaN (from FP8) as documented
 * per function. Bulk versions return a status for their argument checks.
 */
#ifndef L8_RUNTIME_FP8_H
#define L8_RUNTIME_FP8_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define L8_E4M3_MAX 448.0f
#define L8_E5M2_MAX 57344.0f
#define L8_E4M3_MAX_BYTE 0x7Eu
#define L8_E5M2_MAX_BYTE 0x7Bu
#define L8_E5M2_INF_BYTE 0x7Cu

/* The byte any NaN input converts to, in both formats. One constant so the
 * choice is easy to revisit: the exhaustive GPU test (tests/test_fp8.c,
 * "gpu_exhaustive") compares every f32 pattern against it. */
#define L8_FP8_NAN_BYTE 0x7Fu

/* Largest finite value of fmt (448 or 57344); 0 for a non-FP8 dtype. */
float l8_fp8_max(l8_dtype fmt);

/* ---- scalar conversions ---- */

/* f32 -> FP8 as cvt.rn.satfinite (see the banner). Non-FP8 fmt: 0. */
uint8_t l8_fp8_from_f32(float x, l8_dtype fmt);
/* bf16 / f16 bit patterns -> FP8: widened to f32 exactly, then as above. */
uint8_t l8_fp8_from_bf16(uint16_t x, l8_dtype fmt);
uint8_t l8_fp8_from_f16(uint16_t x, l8_dtype fmt);

/* FP8 -> f32, exact for all 256 codes (NaN codes give a quiet NaN with the
 * code's sign; E5M2 0x7C/0xFC give +-Inf). Non-FP8 fmt: NaN. */
float l8_fp8_to_f32(uint8_t v, l8_dtype fmt);

/* 1 if the code is a NaN of fmt. */
int l8_fp8_is_nan(uint8_t v, l8_dtype fmt);

/* f32 -> bf16 / f16, round to nearest even, as cvt.rn.{bf16,f16}.f32:
 * overflow gives +-Inf, subnormals are kept (f16), NaN gives the canonical
 * quiet NaN 0x7FFF (kernels may produce another NaN pattern: compare NaN-ness). */
uint16_t l8_bf16_from_f32(float x);
uint16_t l8_f16_from_f32(float x);
/* Exact widenings. */
float l8_bf16_to_f32(uint16_t x);
float l8_f16_to_f32(uint16_t x);

/* ---- amax ----
 * Amax is the absolute maximum taken on IEEE bit patterns with the sign
 * cleared, compared as unsigned integers (the kernels' red.global.max.u32):
 * +Inf beats every finite value and any NaN beats +Inf, so a NaN anywhere
 * makes amax a NaN. */

/* Bits of |x| as the amax rule orders them. */
static inline uint32_t l8_amax_bits(float x)
{
    union { float f; uint32_t u; } v = { x };
    return v.u & 0x7fffffffu;
}
/* max(|a|, |b|) by that rule (returns the winning |value|). */
float l8_amax_combine(float a, float b);

/* ---- bulk host references (the host backend of the cast ops) ---- */

/* Host reference of the cast kernel, element by element:
 *   y[i] = fp8(f32(x[i]) * scale)            (an f32 multiply, then as above)
 *   *amax = max(*amax, |f32(x[i])|)           (unscaled input, rule above)
 * x: n elements of in_dt (L8_F32, L8_BF16 or L8_F16), y: n bytes, both host
 * memory; amax may be NULL (not computed); *amax is accumulated, not reset.
 * Errors: L8_ERR_INVALID_ARG (dtype, NULL with n > 0). */
L8_NODISCARD l8_status l8_fp8_quantize_host(const void *x, l8_dtype in_dt, size_t n, float scale,
                                            l8_dtype fmt, uint8_t *y, float *amax);

/* Host reference of the dequantize kernel:
 *   y[i] = out_dt(f32(fp8 x[i]) * scale_inv)  (f32 multiply, RNE to bf16/f16)
 * out_dt: L8_F32, L8_BF16 or L8_F16. Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_fp8_dequantize_host(const uint8_t *x, size_t n, l8_dtype fmt,
                                              float scale_inv, void *y, l8_dtype out_dt);

/* Element i of a host array of dtype dt (F32, BF16, F16, E4M3, E5M2; FP8
 * unscaled) as f32; 0 for other dtypes. */
float l8_host_load_f32(const void *x, l8_dtype dt, size_t i);
/* Store v into element i of a host array of dtype dt (F32, BF16, F16 with
 * RNE; E4M3, E5M2 as l8_fp8_from_f32, unscaled); other dtypes: nothing. */
void l8_host_store_f32(void *y, l8_dtype dt, size_t i, float v);

#ifdef __cplusplus
}
#endif
#endif /* L8_RUNTIME_FP8_H */
