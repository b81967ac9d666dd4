/* gather.c - l8_gather_rows, l8_gather_rows_at, l8_put_rows_at: the
 * launcher for ptx/gather.ptx and its host version.
 *
 * Both paths have the same semantics, out-of-range indices included (zero
 * rows, counted in *bad), so a host run and a GPU run of a training loop
 * see the same batches.
 */
#include <stdint.h>
#include <string.h>
#include "ops/gather.h"
#include "ops/internal.h"
#include "runtime/internal.h"

#define G_THREADS 128u
#define G_MAX_X 64u                   /* x-blocks per row: beyond, loop */
#define G_MAX_Y 65535u                /* the grid's y limit: beyond, loop */

/* A (rows, cols) view of t: 1-d is one column; rows contiguous inside. */
typedef struct rows_view {
    int64_t rows, cols, ld;           /* ld in elements */
    size_t esize;
    uint8_t *base;
    size_t lo, hi;                    /* byte range in the storage */
} rows_view;

static l8_status view_of(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx,
                         rows_view *v)
{
    if (!t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
    if (ctx && l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s belongs to another context", op, name);
    int nd = l8_tensor_ndim(t);
    if (nd != 1 && nd != 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has %d dimensions, wanted 1 or 2", op, name, nd);
    v->rows = l8_tensor_dim(t, 0);
    v->cols = nd == 2 ? l8_tensor_dim(t, 1) : 1;
    v->ld = l8_tensor_stride(t, 0);
    if (nd == 2 && v->cols > 1 && l8_tensor_stride(t, 1) != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s's rows are not contiguous (stride %lld on "
                       "dim 1)", op, name, (long long)l8_tensor_stride(t, 1));
    if (v->rows > 1 && v->ld < v->cols)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s's row stride %lld is below its %lld columns",
                       op, name, (long long)v->ld, (long long)v->cols);
    if (v->rows <= 1)
        v->ld = v->cols;
    v->esize = l8_dtype_size(l8_tensor_dtype(t));
    v->base = NULL;
    v->lo = l8_tensor_offset(t);
    v->hi = v->lo + (v->rows && v->cols ? (size_t)((v->rows - 1) * v->ld + v->cols) * v->esize : 0);
    return L8_OK;
}

static int overlaps(const l8_tensor *a, const rows_view *va, const l8_tensor *b, const rows_view *vb)
{
    return a && b && l8_tensor_storage(a) == l8_tensor_storage(b) && va->lo < va->hi &&
           vb->lo < vb->hi && va->lo < vb->hi && vb->lo < va->hi;
}

/* What a move does with the cursor's offset off = *cursor * stride (the
 * kernel's p_mode) */
enum { AT_NONE, AT_IDX, AT_DST };

/* A move of R rows, as the kernel does it: row r goes from src row idx[ioff
 * + r] (without idx: row r) to dst row doff + r. lim bounds the idx
 * position (AT_NONE, AT_IDX) or the dst row (AT_DST). Bad positions,
 * indices or dst rows count in *bad; a bad source gives a zero row, a bad
 * dst row is not written. */
typedef struct move {
    int64_t rows, ioff, doff, lim;
    int mode;
} move;

static void move_host(const rows_view *src, const int32_t *idx, const rows_view *dst,
                      const move *mv, int32_t *bad)
{
    size_t rb = (size_t)dst->cols * dst->esize;
    for (int64_t r = 0; r < mv->rows; r++) {
        int64_t dr = mv->doff + r, pos = mv->ioff + r, i = r;
        if (mv->mode == AT_DST && (dr < 0 || dr >= mv->lim)) {
            if (bad) *bad += 1;
            continue;
        }
        uint8_t *d = dst->base + (size_t)(dr * dst->ld) * dst->esize;
        if (idx)
            i = pos >= 0 && pos < mv->lim ? idx[pos] : -1;
        if (i < 0 || i >= src->rows) {
            memset(d, 0, rb);
            if (bad) *bad += 1;
        } else {
            memcpy(d, src->base + (size_t)(i * src->ld) * src->esize, rb);
        }
    }
}

l8_status l8i_need_cursor(const char *op, const l8_tensor *cursor, l8_ctx *ctx, int64_t stride,
                          int64_t lo)
{
    L8_CHECK(l8i_need_tensor(op, "cursor", cursor, ctx));
    if (l8_tensor_dtype(cursor) != L8_I32 || l8_tensor_numel(cursor) != 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: cursor is %s with %lld elements, wanted one i32",
                       op, l8_dtype_name(l8_tensor_dtype(cursor)),
                       (long long)l8_tensor_numel(cursor));
    if (stride < lo || stride > INT32_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: stride %lld is outside [%lld, 2^31)", op,
                       (long long)stride, (long long)lo);
    return L8_OK;
}

/* The checks and the launch shared by the three entry points. idx may be
 * NULL (l8_put_rows_at), cursor NULL (l8_gather_rows). */
static l8_status move_rows(const char *op, const l8_tensor *src, const l8_tensor *idx,
                           const l8_tensor *cursor, int64_t stride, int mode, l8_tensor *dst,
                           l8_tensor *bad, l8_stream *s)
{
    rows_view vs, vd, vi = {0}, vc = {0}, vb = {0};
    L8_CHECK(view_of(op, "src", src, NULL, &vs));
    l8_ctx *ctx = l8_tensor_ctx(src);
    L8_CHECK(view_of(op, "dst", dst, ctx, &vd));
    if (mode != AT_DST) {
        L8_CHECK(l8i_need_tensor(op, "idx", idx, ctx));
        L8_CHECK(view_of(op, "idx", idx, ctx, &vi));
        if (l8_tensor_dtype(idx) != L8_I32 || l8_tensor_ndim(idx) != 1)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: idx is %d-d %s, wanted 1-d i32", op,
                           l8_tensor_ndim(idx), l8_dtype_name(l8_tensor_dtype(idx)));
    }
    if (mode != AT_NONE) {
        L8_CHECK(l8i_need_cursor(op, cursor, ctx, stride, 0));
        vc.lo = l8_tensor_offset(cursor);
        vc.hi = vc.lo + 4;
    }
    if (l8_tensor_dtype(src) != l8_tensor_dtype(dst))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: src is %s, dst is %s", op,
                       l8_dtype_name(l8_tensor_dtype(src)), l8_dtype_name(l8_tensor_dtype(dst)));
    if (vs.cols != vd.cols)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: src has %lld columns, dst %lld", op,
                       (long long)vs.cols, (long long)vd.cols);
    if (mode == AT_NONE && vi.rows != vd.rows)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: idx has %lld entries, dst %lld rows", op,
                       (long long)vi.rows, (long long)vd.rows);
    move mv = { mode == AT_DST ? vs.rows : vd.rows, 0, 0, mode == AT_DST ? vd.rows : vi.rows,
                mode };
    if (mv.rows > INT32_MAX || mv.lim > INT32_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %lld rows moved, %lld in %s (at most 2^31 - 1 "
                       "each)", op, (long long)mv.rows, (long long)mv.lim,
                       mode == AT_DST ? "dst" : "idx");
    if (bad) {
        L8_CHECK(l8i_need_tensor(op, "bad", bad, ctx));
        if (l8_tensor_dtype(bad) != L8_I32 || l8_tensor_numel(bad) != 1)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: bad is %s with %lld elements, wanted one i32",
                           op, l8_dtype_name(l8_tensor_dtype(bad)), (long long)l8_tensor_numel(bad));
        vb.lo = l8_tensor_offset(bad);
        vb.hi = vb.lo + 4;
    }
    if (overlaps(dst, &vd, src, &vs) || overlaps(dst, &vd, idx, &vi) ||
        overlaps(dst, &vd, cursor, &vc) || overlaps(bad, &vb, dst, &vd) ||
        overlaps(bad, &vb, idx, &vi) || overlaps(bad, &vb, cursor, &vc) ||
        (mode == AT_DST && overlaps(bad, &vb, src, &vs)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst or bad overlaps an input", op);
    L8_CHECK(l8i_resolve_stream(op, ctx, &s));
    void *ps, *pd, *pi = NULL, *pc = NULL, *pb = NULL;
    L8_CHECK(l8_tensor_data(src, &ps));
    L8_CHECK(l8_tensor_data(dst, &pd));
    if (idx) L8_CHECK(l8_tensor_data(idx, &pi));
    if (mode != AT_NONE) L8_CHECK(l8_tensor_data(cursor, &pc));
    if (bad) L8_CHECK(l8_tensor_data(bad, &pb));
    L8_CHECK(l8i_tensors_use(s, (const l8_tensor *const[]){ src, dst, mode != AT_DST ? idx : NULL,
                                                            mode != AT_NONE ? cursor : NULL,
                                                            bad }, 5));
    if (mv.rows == 0 || vd.cols == 0)
        return L8_OK;
    vs.base = ps;
    vd.base = pd;
    if (l8_ctx_backend(ctx) == L8_BACKEND_HOST) {
        int64_t off = pc ? (int64_t)*(const int32_t *)pc * stride : 0;
        mv.ioff = mode == AT_IDX ? off : 0;
        mv.doff = mode == AT_DST ? off : 0;
        move_host(&vs, mode == AT_DST ? NULL : pi, &vd, &mv, pb);
        return L8_OK;
    }
    /* 16-byte words when everything lines up, bytes otherwise */
    uint64_t rb = (uint64_t)vd.cols * vd.esize;
    uint64_t dst_ld = (uint64_t)vd.ld * vd.esize, src_ld = (uint64_t)vs.ld * vs.esize;
    uint64_t a_d = (uint64_t)(uintptr_t)pd, a_s = (uint64_t)(uintptr_t)ps;
    uint32_t wide = ((rb | dst_ld | src_ld | a_d | a_s) & 15u) == 0;
    uint64_t words = wide ? rb / 16 : rb;
    if (words > UINT32_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: rows of %llu bytes are too long", op,
                       (unsigned long long)rb);
    uint64_t a_i = mode == AT_DST ? 0 : (uint64_t)(uintptr_t)pi, a_b = (uint64_t)(uintptr_t)pb;
    uint64_t a_c = (uint64_t)(uintptr_t)pc, st64 = (uint64_t)stride;
    uint32_t rows = (uint32_t)mv.rows, w32 = (uint32_t)words;
    uint32_t src_rows = vs.rows > INT32_MAX ? (uint32_t)INT32_MAX : (uint32_t)vs.rows;
    uint32_t m32 = (uint32_t)mode, lim = (uint32_t)mv.lim;
    void *args[] = { &a_d, &a_s, &a_i, &a_b, &rows, &src_rows, &w32, &wide, &dst_ld, &src_ld,
                     &a_c, &st64, &m32, &lim };
    unsigned gx = (unsigned)((words + G_THREADS - 1) / G_THREADS);
    if (gx > G_MAX_X) gx = G_MAX_X;
    unsigned gy = rows > G_MAX_Y ? G_MAX_Y : rows;
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(ctx));
    L8_CHECK(l8i_kernel(ctx, "gather", "l8_gather_rows", &f));
    return l8i_launch(s, f, gx, gy, 1, G_THREADS, 1, 1, 0, args);
}

l8_status l8_gather_rows(const l8_tensor *src, const l8_tensor *idx, l8_tensor *dst,
                         l8_tensor *bad, l8_stream *s)
{
    return move_rows("l8_gather_rows", src, idx, NULL, 0, AT_NONE, dst, bad, s);
}

l8_status l8_gather_rows_at(const l8_tensor *src, const l8_tensor *idx, const l8_tensor *cursor,
                            int64_t stride, l8_tensor *dst, l8_tensor *bad, l8_stream *s)
{
    return move_rows("l8_gather_rows_at", src, idx, cursor, stride, AT_IDX, dst, bad, s);
}

l8_status l8_put_rows_at(l8_tensor *dst, const l8_tensor *cursor, int64_t stride,
                         const l8_tensor *src, l8_tensor *bad, l8_stream *s)
{
    return move_rows("l8_put_rows_at", src, NULL, cursor, stride, AT_DST, dst, bad, s);
}
