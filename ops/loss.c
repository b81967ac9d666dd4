/* loss.c - softmax cross-entropy: validation, the host reference, and the
 * launch of ptx/loss.ptx (one warp per row). l8_softmax_xent_at is the same
 * kernel with a cursor: padding rows past the pass's end get zeros.
 *
 * The host reference and the kernel do the same f32 steps (max, sum of
 * exp(x - max), log) but in different summation orders, so they agree to
 * rounding, not bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include "ops/loss.h"
#include "runtime/fp8.h"
#include "runtime/internal.h"
#include "ops/internal.h"

static l8_status check2(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx,
                        int64_t rows, int64_t cols)
{
    L8_CHECK(l8i_need_tensor(op, name, t, ctx));
    int nd = l8_tensor_ndim(t);
    int64_t r = nd >= 1 ? l8_tensor_dim(t, 0) : -1, c = nd == 2 ? l8_tensor_dim(t, 1) : 1;
    if ((cols < 0 && nd != 1) || (cols >= 0 && nd != 2) || r != rows || (cols >= 0 && c != cols))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has the wrong shape", op, name);
    return L8_OK;
}

static void host_rows(const void *x, l8_dtype dt, const void *lab, l8_dtype ldt, int64_t T,
                      int64_t C, int classes, float gs, void *dx, float *loss, int32_t *hit)
{
    for (int64_t t = 0; t < T; t++) {
        size_t base = (size_t)(t * C);
        int y = ldt == L8_U8 ? ((const uint8_t *)lab)[t] : ((const int32_t *)lab)[t];
        float m = -INFINITY;
        int arg = 0;
        for (int c = 0; c < classes; c++) {
            float v = l8_host_load_f32(x, dt, base + (size_t)c);
            if (v > m) { m = v; arg = c; }
        }
        float sum = 0.0f;
        for (int c = 0; c < classes; c++) sum += expf(l8_host_load_f32(x, dt, base + (size_t)c) - m);
        float lse = m + logf(sum);
        loss[t] = lse - l8_host_load_f32(x, dt, base + (size_t)y);
        hit[t] = arg == y;
        if (!dx) continue;
        for (int64_t c = 0; c < C; c++) {
            float g = 0.0f;
            if (c < classes) g = gs * (expf(l8_host_load_f32(x, dt, base + (size_t)c) - lse) - (c == y));
            l8_host_store_f32(dx, dt, base + (size_t)c, g);
        }
    }
}

/* The checks and the launch of both entry points; cursor NULL: every row is
 * real (l8_softmax_xent). */
static l8_status xent(const char *op, const l8_tensor *logits, const l8_tensor *labels,
                      int classes, float grad_scale, const l8_tensor *cursor, int64_t stride,
                      int64_t total, l8_tensor *dlogits, l8_tensor *row_loss, l8_tensor *row_hit,
                      l8_stream *s)
{
    L8_ARG(logits != NULL);
    l8_ctx *ctx = l8_tensor_ctx(logits);
    if (!s) s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    L8_ARG(l8_stream_ctx(s) == ctx);
    if (l8_tensor_ndim(logits) != 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: logits must be 2-D [T, C]", op);
    int64_t T = l8_tensor_dim(logits, 0), C = l8_tensor_dim(logits, 1);
    l8_dtype dt = l8_tensor_dtype(logits);
    if (dt != L8_F32 && dt != L8_BF16)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: logits must be f32 or bf16, not %s", op,
                       l8_dtype_name(dt));
    if (classes < 1 || classes > C || C > 1024)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: classes %d must be in 1..%lld (C <= 1024)", op,
                       classes, (long long)C);
    L8_CHECK(check2(op, "logits", logits, ctx, T, C));
    L8_CHECK(check2(op, "labels", labels, ctx, T, -1));
    L8_CHECK(check2(op, "row_loss", row_loss, ctx, T, -1));
    L8_CHECK(check2(op, "row_hit", row_hit, ctx, T, -1));
    if (dlogits) {
        L8_CHECK(check2(op, "dlogits", dlogits, ctx, T, C));
        if (l8_tensor_dtype(dlogits) != dt)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dlogits must have the logits' dtype", op);
    }
    l8_dtype ldt = l8_tensor_dtype(labels);
    if ((ldt != L8_U8 && ldt != L8_I32) || l8_tensor_dtype(row_loss) != L8_F32 ||
        l8_tensor_dtype(row_hit) != L8_I32)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: labels u8/i32, row_loss f32, row_hit i32", op);
    if (cursor) {
        L8_CHECK(l8i_need_cursor(op, cursor, ctx, stride, 1));
        if (total < 0 || total >= (INT64_C(1) << 62))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: total %lld is outside [0, 2^62)", op,
                           (long long)total);
    }
    if (T == 0) return L8_OK;
    void *px, *pl, *pd = NULL, *ploss, *phit, *pc = NULL;
    L8_CHECK(l8_tensor_data(logits, &px));
    L8_CHECK(l8_tensor_data(labels, &pl));
    L8_CHECK(l8_tensor_data(row_loss, &ploss));
    L8_CHECK(l8_tensor_data(row_hit, &phit));
    if (dlogits) L8_CHECK(l8_tensor_data(dlogits, &pd));
    if (cursor) L8_CHECK(l8_tensor_data(cursor, &pc));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ logits, labels, row_loss, row_hit,
                                                            dlogits, cursor }, 6));
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        int64_t valid = T;        /* the kernel's formula, on the cursor as it is now */
        if (pc) {
            int64_t v = total - (int64_t)*(const int32_t *)pc * stride;
            valid = v < 0 ? 0 : v < T ? v : T;
        }
        for (int64_t t = 0; t < valid; t++) {
            int y = ldt == L8_U8 ? ((const uint8_t *)pl)[t] : ((const int32_t *)pl)[t];
            if (y < 0 || y >= classes)
                return L8_FAIL(L8_ERR_INVALID_ARG, "%s: label %d of row %lld is not in 0..%d", op,
                               y, (long long)t, classes - 1);
        }
        float gs = pc && valid ? grad_scale / (float)valid : grad_scale;
        host_rows(px, dt, pl, ldt, valid, C, classes, gs, pd, ploss, phit);
        for (int64_t t = valid; t < T; t++) {          /* padding rows */
            ((float *)ploss)[t] = 0.0f;
            ((int32_t *)phit)[t] = 0;
            for (int64_t c = 0; pd && c < C; c++)
                l8_host_store_f32(pd, dt, (size_t)(t * C + c), 0.0f);
        }
        return L8_OK;
    }
    if (T > 0x7fffffff)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: more than 2^31 rows", op);
    CUfunction f;
    L8_CHECK(l8i_kernel(ctx, "loss", "l8_softmax_xent", &f));
    uint64_t ax = (uintptr_t)px, al = (uintptr_t)pl, ad = (uintptr_t)pd, aloss = (uintptr_t)ploss,
             ahit = (uintptr_t)phit, acur = (uintptr_t)pc, tot = (uint64_t)total;
    uint32_t rows = (uint32_t)T, cols = (uint32_t)C, ncls = (uint32_t)classes,
             is_bf16 = dt == L8_BF16, lab_i32 = ldt == L8_I32, st32 = (uint32_t)stride;
    float gs = grad_scale;
    void *args[] = { &ax, &al, &ad, &aloss, &ahit, &rows, &cols, &ncls, &is_bf16, &lab_i32, &gs,
                     &acur, &st32, &tot };
    /* one warp per row, 8 warps per CTA */
    return l8i_launch(s, f, (unsigned)((T + 7) / 8), 1, 1, 256, 1, 1, 0, args);
}

l8_status l8_softmax_xent(const l8_tensor *logits, const l8_tensor *labels, int classes,
                          float grad_scale, l8_tensor *dlogits, l8_tensor *row_loss,
                          l8_tensor *row_hit, l8_stream *s)
{
    return xent("l8_softmax_xent", logits, labels, classes, grad_scale, NULL, 0, 0, dlogits,
                row_loss, row_hit, s);
}

l8_status l8_softmax_xent_at(const l8_tensor *logits, const l8_tensor *labels, int classes,
                             float grad_scale, const l8_tensor *cursor, int64_t stride,
                             int64_t total, l8_tensor *dlogits, l8_tensor *row_loss,
                             l8_tensor *row_hit, l8_stream *s)
{
    if (!cursor) return L8_FAIL(L8_ERR_INVALID_ARG, "l8_softmax_xent_at: cursor is NULL");
    return xent("l8_softmax_xent_at", logits, labels, classes, grad_scale, cursor, stride, total,
                dlogits, row_loss, row_hit, s);
}
