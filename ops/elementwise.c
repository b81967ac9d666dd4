/* elementwise.c - launchers for ptx/elementwise.ptx.in and their host
 * references (conversion, accumulate, GELU forward and backward).
 *
 * The host references repeat the kernels' operations in the same order with
 * the same f32 constants (the hex values in the .ptx), each step rounded to
 * f32: no FMA contraction on either side (C11 mode compiles with
 * -ffp-contract=off; the kernels use mul.rn / add.rn / div.rn). Only the
 * exponential differs: expf here, ex2.approx on the GPU.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "ops/elementwise.h"
#include "runtime/fp8.h"
#include "runtime/internal.h"
#include "ops/internal.h"

#define EW_THREADS 256u
#define EW_MAX_CTAS 4096u             /* grid-stride beyond this */

/* The GELU constants, as f32 (the .ptx immediates). */
#define GELU_K1 0.044715f             /* 0f3D372713 */
#define GELU_3K1 0.134145f            /* 0f3E095D4F: 3 * 0.044715 */
#define GELU_2K0 1.5957691216057308f  /* 0f3FCC422A: 2 sqrt(2/pi) */

_Static_assert(L8_F32 == 0 && L8_BF16 == 1 && L8_F16 == 2, "kernel type codes are l8_dtype values");

/* t is a contiguous tensor of ctx (ctx NULL: any) with a floating dtype. */
static l8_status need(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx)
{
    L8_CHECK(l8i_need_tensor(op, name, t, ctx));
    l8_dtype dt = l8_tensor_dtype(t);
    if (!l8i_is_hp(dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s, wanted f32, bf16 or f16", op,
                       name, l8_dtype_name(dt));
    return L8_OK;
}

static l8_status same_numel(const char *op, const char *a, const l8_tensor *x, const char *b,
                            const l8_tensor *y)
{
    if (l8_tensor_numel(x) != l8_tensor_numel(y))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has %lld elements, %s has %lld", op, a,
                       (long long)l8_tensor_numel(x), b, (long long)l8_tensor_numel(y));
    return L8_OK;
}

/* Overlap of two tensors' byte ranges in one storage, allowed only when
 * they are the same elements (in place). */
static l8_status no_overlap(const char *op, const l8_tensor *out, const l8_tensor *in,
                            int allow_same)
{
    if (l8_tensor_storage(out) != l8_tensor_storage(in))
        return L8_OK;
    size_t o0 = l8_tensor_offset(out), o1 = o0 + l8_tensor_nbytes(out);
    size_t i0 = l8_tensor_offset(in), i1 = i0 + l8_tensor_nbytes(in);
    if (o0 >= i1 || i0 >= o1 || o0 == o1 || i0 == i1)
        return L8_OK;
    if (allow_same && o0 == i0 && l8_tensor_dtype(out) == l8_tensor_dtype(in))
        return L8_OK;
    return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the output overlaps an input%s", op,
                   allow_same ? " (only an exact in-place call is allowed)" : "");
}

static unsigned ew_grid(uint64_t n)
{
    uint64_t g = (n + EW_THREADS - 1) / EW_THREADS;
    return g == 0 ? 1u : g > EW_MAX_CTAS ? EW_MAX_CTAS : (unsigned)g;
}

static uint64_t dptr(const void *p) { return (uint64_t)(uintptr_t)p; }

static l8_status launch(l8_ctx *ctx, l8_stream *s, const char *entry, uint64_t n, void **args)
{
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "elementwise", entry, &f));
    return l8i_launch(s, f, ew_grid(n), 1, 1, EW_THREADS, 1, 1, 0, args);
}

/* ---- conversion ---- */

l8_status l8_convert(const l8_tensor *in, l8_tensor *out, l8_stream *s)
{
    static const char *op = "l8_convert";
    L8_CHECK(need(op, "in", in, NULL));
    l8_ctx *ctx = l8_tensor_ctx(in);
    L8_CHECK(need(op, "out", out, ctx));
    L8_CHECK(same_numel(op, "in", in, "out", out));
    L8_CHECK(no_overlap(op, out, in, 1));
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *x, *y;
    L8_CHECK(l8_tensor_data(in, &x));
    L8_CHECK(l8_tensor_data(out, &y));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ in, out }, 2));
    uint64_t n = (uint64_t)l8_tensor_numel(in);
    l8_dtype it = l8_tensor_dtype(in), ot = l8_tensor_dtype(out);
    if (n == 0 || x == y)
        return L8_OK;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (uint64_t i = 0; i < n; i++)
            l8_host_store_f32(y, ot, (size_t)i, l8_host_load_f32(x, it, (size_t)i));
        return L8_OK;
    }
    uint64_t a_in = dptr(x), a_out = dptr(y);
    uint32_t itype = (uint32_t)it, otype = (uint32_t)ot;
    void *args[] = { &a_in, &a_out, &n, &itype, &otype };
    return launch(ctx, s, "l8_ew_convert", n, args);
}

#define CONVERT_GROUP 16       /* descriptors of l8_ew_convert_many */
#define CONVERT_BLOCK 2048u    /* elements per CTA of it */

l8_status l8_convert_many(int n, const l8_tensor *const *in, l8_tensor *const *out, l8_stream *s)
{
    static const char *op = "l8_convert_many";
    if (n < 0 || n > L8_CONVERT_MANY_MAX || (n > 0 && (!in || !out)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: n is %d (0..%d) or in / out is NULL", op, n,
                       L8_CONVERT_MANY_MAX);
    if (n == 0)
        return L8_OK;
    l8_ctx *ctx = NULL;
    for (int i = 0; i < n; i++) {
        l8_status st = need(op, "in", in[i], ctx);
        if (st == L8_OK) {
            ctx = l8_tensor_ctx(in[i]);
            st = need(op, "out", out[i], ctx);
        }
        if (st == L8_OK) st = same_numel(op, "in", in[i], "out", out[i]);
        if (st == L8_OK) st = no_overlap(op, out[i], in[i], 1);
        if (st != L8_OK)
            return l8i_fail_item(st, "pair", i);
    }
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (int i = 0; i < n; i++)
            L8_CHECK(l8_convert(in[i], out[i], s));
        return L8_OK;
    }
    L8_CHECK(l8i_tensors_use(s, in, n));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const *)out, n));
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "elementwise", "l8_ew_convert_many", &f));
    _Alignas(8) unsigned char desc[CONVERT_GROUP * 32];
    int k = 0;
    uint64_t blocks = 0;
    for (int i = 0; i <= n; i++) {
        void *x = NULL, *y = NULL;
        uint64_t cnt = 0;
        if (i < n) {
            L8_CHECK(l8_tensor_data(in[i], &x));
            L8_CHECK(l8_tensor_data(out[i], &y));
            cnt = (uint64_t)l8_tensor_numel(in[i]);
        }
        uint64_t nb = (cnt + CONVERT_BLOCK - 1) / CONVERT_BLOCK;
        if (k > 0 && (i == n || k == CONVERT_GROUP || blocks + nb > UINT32_MAX / 2)) {
            void *args[] = { desc };
            L8_CHECK(l8i_launch(s, f, (unsigned)blocks, 1, 1, EW_THREADS, 1, 1, 0, args));
            k = 0;
            blocks = 0;
        }
        if (i == n || cnt == 0 || x == y)         /* as l8_convert: nothing to do */
            continue;
        if (k == 0)
            memset(desc, 0xff, sizeof desc);      /* unused: first block 0xffffffff */
        uint64_t p[3] = { dptr(x), dptr(y), cnt };
        uint32_t w[2] = { (uint32_t)l8_tensor_dtype(in[i]) | (uint32_t)l8_tensor_dtype(out[i]) << 8,
                          (uint32_t)blocks };
        memcpy(desc + k * 32, p, sizeof p);
        memcpy(desc + k * 32 + sizeof p, w, sizeof w);
        k++;
        blocks += nb;
    }
    return L8_OK;
}

/* ---- accumulate ---- */

l8_status l8_add_into(l8_tensor *y, const l8_tensor *x, l8_stream *s)
{
    static const char *op = "l8_add_into";
    L8_CHECK(need(op, "y", y, NULL));
    l8_ctx *ctx = l8_tensor_ctx(y);
    L8_CHECK(need(op, "x", x, ctx));
    L8_CHECK(same_numel(op, "y", y, "x", x));
    L8_CHECK(no_overlap(op, y, x, 0));
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *py, *px;
    L8_CHECK(l8_tensor_data(y, &py));
    L8_CHECK(l8_tensor_data(x, &px));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ y, x }, 2));
    uint64_t n = (uint64_t)l8_tensor_numel(y);
    l8_dtype yt = l8_tensor_dtype(y), xt = l8_tensor_dtype(x);
    if (n == 0)
        return L8_OK;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (uint64_t i = 0; i < n; i++) {
            float v = l8_host_load_f32(py, yt, (size_t)i) + l8_host_load_f32(px, xt, (size_t)i);
            l8_host_store_f32(py, yt, (size_t)i, v);
        }
        return L8_OK;
    }
    uint64_t a_y = dptr(py), a_x = dptr(px);
    uint32_t ytype = (uint32_t)yt, xtype = (uint32_t)xt;
    void *args[] = { &a_y, &a_x, &n, &ytype, &xtype };
    return launch(ctx, s, "l8_ew_add", n, args);
}

/* ---- GELU ---- */

/* exp(-z) as the host computes it (the kernel: ex2.approx(z * -log2 e)). */
static float gelu_z(float x)
{
    float t = x * x;
    t = t * x;
    t = t * GELU_K1;
    t = t + x;
    return t * GELU_2K0;
}

float l8i_gelu_f32(float x)
{
    float e = expf(-gelu_z(x));
    return x / (e + 1.0f);
}

static float gelu_grad_host(float x)
{
    float x2 = x * x;
    float e = expf(-gelu_z(x));
    float s = 1.0f / (e + 1.0f);
    float dz = x2 * GELU_3K1;
    dz = dz + 1.0f;
    dz = dz * GELU_2K0;
    float w = 1.0f - s;
    w = s * w;
    w = w * x;
    w = w * dz;
    return s + w;
}

l8_status l8_gelu(const l8_tensor *x, l8_tensor *y, l8_stream *s)
{
    static const char *op = "l8_gelu";
    L8_CHECK(need(op, "x", x, NULL));
    l8_ctx *ctx = l8_tensor_ctx(x);
    L8_CHECK(need(op, "y", y, ctx));
    L8_CHECK(same_numel(op, "x", x, "y", y));
    L8_CHECK(no_overlap(op, y, x, 1));
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *px, *py;
    L8_CHECK(l8_tensor_data(x, &px));
    L8_CHECK(l8_tensor_data(y, &py));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ x, y }, 2));
    uint64_t n = (uint64_t)l8_tensor_numel(x);
    l8_dtype xt = l8_tensor_dtype(x), yt = l8_tensor_dtype(y);
    if (n == 0)
        return L8_OK;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (uint64_t i = 0; i < n; i++)
            l8_host_store_f32(py, yt, (size_t)i, l8i_gelu_f32(l8_host_load_f32(px, xt, (size_t)i)));
        return L8_OK;
    }
    uint64_t a_x = dptr(px), a_y = dptr(py);
    uint32_t xtype = (uint32_t)xt, ytype = (uint32_t)yt;
    void *args[] = { &a_x, &a_y, &n, &xtype, &ytype };
    return launch(ctx, s, "l8_ew_gelu", n, args);
}

l8_status l8_gelu_backward(const l8_tensor *x, const l8_tensor *dy, l8_tensor *dx, l8_stream *s)
{
    static const char *op = "l8_gelu_backward";
    L8_CHECK(need(op, "x", x, NULL));
    l8_ctx *ctx = l8_tensor_ctx(x);
    L8_CHECK(need(op, "dy", dy, ctx));
    L8_CHECK(need(op, "dx", dx, ctx));
    L8_CHECK(same_numel(op, "x", x, "dy", dy));
    L8_CHECK(same_numel(op, "x", x, "dx", dx));
    L8_CHECK(no_overlap(op, dx, x, 0));
    L8_CHECK(no_overlap(op, dx, dy, 1));
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *px, *pg, *pd;
    L8_CHECK(l8_tensor_data(x, &px));
    L8_CHECK(l8_tensor_data(dy, &pg));
    L8_CHECK(l8_tensor_data(dx, &pd));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ x, dy, dx }, 3));
    uint64_t n = (uint64_t)l8_tensor_numel(x);
    l8_dtype xt = l8_tensor_dtype(x), gt = l8_tensor_dtype(dy), dt = l8_tensor_dtype(dx);
    if (n == 0)
        return L8_OK;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        for (uint64_t i = 0; i < n; i++) {
            float g = l8_host_load_f32(pg, gt, (size_t)i);
            float d = gelu_grad_host(l8_host_load_f32(px, xt, (size_t)i));
            l8_host_store_f32(pd, dt, (size_t)i, g * d);
        }
        return L8_OK;
    }
    uint64_t a_x = dptr(px), a_g = dptr(pg), a_d = dptr(pd);
    uint32_t xtype = (uint32_t)xt, gtype = (uint32_t)gt, dtype = (uint32_t)dt;
    void *args[] = { &a_x, &a_g, &a_d, &n, &xtype, &gtype, &dtype };
    return launch(ctx, s, "l8_ew_gelu_bwd", n, args);
}

/* ---- the meta of a GEMM-quantized tensor ---- */

l8_status l8i_meta_scale_inv(l8_ctx *ctx, l8_fp8_meta *m, l8_stream *s)
{
    float *scale = l8_fp8_meta_scale(m);
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        *l8_fp8_meta_scale_inv(m) = 1.0f / *scale;
        return L8_OK;
    }
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "elementwise", "l8_meta_scale_inv", &f));
    uint64_t a_meta = (uint64_t)(uintptr_t)scale;
    void *args[] = { &a_meta };
    return l8i_launch(s, f, 1, 1, 1, 32, 1, 1, 0, args);
}
