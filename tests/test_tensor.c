/* test_tensor.c - storages, FP8 metadata and tensor views on the host backend.
 *
 * Every test makes its own host context and ends in ctx_finish(), which
 * fails unless the context's allocator holds no live block: a leaked
 * storage, view or FP8 metadata shows there.
 *
 * The reference is a host "logical tensor" (href): for every element, in
 * row-major order, its value and the byte offset in the storage where it
 * must live. View ops are applied to it by plain index arithmetic, and a
 * device view is compared with it element by element: shape, offset and
 * strides through the addresses, values through l8_tensor_contiguous +
 * l8_tensor_copy_to_host into a poisoned buffer. Test data are random bytes
 * that are never 0 and never the poison byte, so an element nobody wrote
 * cannot pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/tensor.h"

#define POISON 0xA5

/* ---- contexts ---- */

#define ctx_make(prov, limit) l8t_ctx("host", (prov), (limit))
#define ctx_finish l8t_ctx_finish
#define xmalloc l8t_xmalloc

static l8_alloc_stats ctx_stats(l8_ctx *ctx)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    return s;
}

static uint64_t live_bytes(l8_ctx *ctx) { return ctx_stats(ctx).allocated_bytes; }

/* ---- data ---- */

static void fill_data(l8_rng *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b;
        do b = (uint8_t)(1 + l8_rng_below(r, 255)); while (b == POISON);
        p[i] = b;
    }
}

static l8_tensor *tensor_empty(l8_ctx *ctx, l8_dtype dt, int ndim, const int64_t *shape)
{
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, ndim, shape, &t));
    ck_assert_ptr_nonnull(t);
    return t;
}

/* Fill a contiguous tensor from host bytes. */
static void upload(l8_tensor *t, const uint8_t *bytes)
{
    L8_CK(l8_tensor_copy_from_host(t, bytes, l8_tensor_nbytes(t), NULL));
}

static void poison(l8_tensor *t)
{
    size_t n = l8_tensor_nbytes(t);
    uint8_t *p = xmalloc(n);
    memset(p, POISON, n);
    upload(t, p);
    free(p);
}

/* A contiguous tensor's bytes, in a new buffer. */
static uint8_t *download(const l8_tensor *t)
{
    size_t n = l8_tensor_nbytes(t);
    uint8_t *p = xmalloc(n);
    memset(p, POISON, n);
    L8_CK(l8_tensor_copy_to_host(t, p, n, NULL));
    return p;
}

/* "(2, 3, 4)" for messages. */
typedef struct dims_text { char s[120]; } dims_text;

static dims_text fmt(int ndim, const int64_t *v)
{
    dims_text out;
    int n = snprintf(out.s, sizeof out.s, "(");
    for (int d = 0; d < ndim; d++)
        n += snprintf(out.s + n, sizeof out.s - (size_t)n, d ? ", %lld" : "%lld", (long long)v[d]);
    snprintf(out.s + n, sizeof out.s - (size_t)n, ")");
    return out;
}

/* ---- the host reference ---- */

typedef struct href {
    int ndim;
    int64_t shape[L8_MAX_DIMS];
    size_t es;                    /* element bytes */
    int64_t n;                    /* elements */
    uint8_t *val;                 /* (n,) elements, row-major */
    int64_t *addr;                /* (n,) byte offset of each element in the storage */
} href;

static int64_t count(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static void unravel(int64_t lin, int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? lin % shape[d] : 0;
        lin = shape[d] ? lin / shape[d] : 0;
    }
}

static int64_t ravel(const int64_t *idx, int ndim, const int64_t *shape)
{
    int64_t lin = 0;
    for (int d = 0; d < ndim; d++) lin = lin * shape[d] + idx[d];
    return lin;
}

static href href_alloc(int ndim, const int64_t *shape, size_t es)
{
    href h;
    memset(&h, 0, sizeof h);
    h.ndim = ndim;
    for (int d = 0; d < ndim; d++) h.shape[d] = shape[d];
    h.es = es;
    h.n = count(ndim, shape);
    h.val = xmalloc((size_t)h.n * es);
    h.addr = xmalloc((size_t)h.n * sizeof(int64_t));
    return h;
}

static void href_free(href *h)
{
    free(h->val);
    free(h->addr);
    memset(h, 0, sizeof *h);
}

/* A fresh contiguous tensor at offset 0 with random values. */
static href href_random(l8_rng *r, int ndim, const int64_t *shape, size_t es)
{
    href h = href_alloc(ndim, shape, es);
    fill_data(r, h.val, (size_t)h.n * es);
    for (int64_t i = 0; i < h.n; i++) h.addr[i] = i * (int64_t)es;
    return h;
}

static void href_copy_elem(href *out, int64_t o, const href *in, int64_t i)
{
    memcpy(out->val + o * (int64_t)out->es, in->val + i * (int64_t)in->es, in->es);
    out->addr[o] = in->addr[i];
}

/* Elements start, start+step, ... below stop of dimension d (narrow: step 1). */
static href href_slice(const href *in, int d, int64_t start, int64_t stop, int64_t step)
{
    int64_t shape[L8_MAX_DIMS], idx[L8_MAX_DIMS];
    memcpy(shape, in->shape, sizeof shape);
    shape[d] = stop > start ? (stop - start + step - 1) / step : 0;
    href out = href_alloc(in->ndim, shape, in->es);
    for (int64_t o = 0; o < out.n; o++) {
        unravel(o, out.ndim, out.shape, idx);
        idx[d] = start + idx[d] * step;
        href_copy_elem(&out, o, in, ravel(idx, in->ndim, in->shape));
    }
    return out;
}

static href href_transpose(const href *in, int d0, int d1)
{
    int64_t shape[L8_MAX_DIMS], idx[L8_MAX_DIMS] = { 0 };
    memcpy(shape, in->shape, sizeof shape);
    shape[d0] = in->shape[d1];
    shape[d1] = in->shape[d0];
    href out = href_alloc(in->ndim, shape, in->es);
    for (int64_t o = 0; o < out.n; o++) {
        unravel(o, out.ndim, out.shape, idx);
        int64_t tmp = idx[d0];
        idx[d0] = idx[d1];
        idx[d1] = tmp;
        href_copy_elem(&out, o, in, ravel(idx, in->ndim, in->shape));
    }
    return out;
}

/* Same elements in the same row-major order, new shape. */
static href href_reshape(const href *in, int ndim, const int64_t *shape)
{
    href out = href_alloc(ndim, shape, in->es);
    ck_assert_int_eq(out.n, in->n);
    for (int64_t o = 0; o < out.n; o++) href_copy_elem(&out, o, in, o);
    return out;
}

/* Whether the elements' addresses are an affine function of the new
 * shape's indices with strides >= 0, i.e. whether a view can express the
 * reshape. Brute force over every element; independent of the library. */
static int href_viewable(const href *in, int ndim, const int64_t *shape)
{
    if (in->n == 0) return 1;
    int64_t st[L8_MAX_DIMS] = {0}, idx[L8_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 2) continue;
        memset(idx, 0, sizeof idx);
        idx[d] = 1;
        st[d] = in->addr[ravel(idx, ndim, shape)] - in->addr[0];
        if (st[d] < 0 || st[d] % (int64_t)in->es) return 0;
    }
    for (int64_t k = 0; k < in->n; k++) {
        unravel(k, ndim, shape, idx);
        int64_t a = in->addr[0];
        for (int d = 0; d < ndim; d++) a += idx[d] * st[d];
        if (a != in->addr[k]) return 0;
    }
    return 1;
}

/* ---- comparing a view with the reference ---- */

/* Shape, offset and strides (every element's address), the data pointer,
 * contiguity, and the values read back through contiguous + copy_to_host. */
static void check_view(const l8_tensor *v, const href *r)
{
    int64_t idx[L8_MAX_DIMS];
    ck_assert_int_eq(l8_tensor_ndim(v), r->ndim);
    for (int d = 0; d < r->ndim; d++) ck_assert_int_eq(l8_tensor_dim(v, d), r->shape[d]);
    ck_assert_int_eq(l8_tensor_numel(v), r->n);
    ck_assert_uint_eq(l8_tensor_nbytes(v), (size_t)r->n * r->es);
    ck_assert_uint_eq(l8_dtype_size(l8_tensor_dtype(v)), r->es);
    int ref_dense = 1;
    for (int64_t k = 0; k < r->n; k++) {
        unravel(k, r->ndim, r->shape, idx);
        int64_t a = (int64_t)l8_tensor_offset(v);
        for (int d = 0; d < r->ndim; d++) a += idx[d] * l8_tensor_stride(v, d) * (int64_t)r->es;
        ck_assert_msg(a == r->addr[k], "element %lld at byte %lld, reference says %lld",
                      (long long)k, (long long)a, (long long)r->addr[k]);
        if (r->addr[k] != r->addr[0] + k * (int64_t)r->es) ref_dense = 0;
    }
    ck_assert_int_eq(l8_tensor_is_contiguous(v), ref_dense);

    /* The data pointer is the storage's pointer plus the offset, every call. */
    void *base = NULL, *p = NULL;
    L8_CK(l8_storage_data(l8_tensor_storage(v), &base));
    L8_CK(l8_tensor_data(v, &p));
    ck_assert_ptr_eq(p, base ? (void *)((char *)base + l8_tensor_offset(v)) : NULL);

    l8_tensor *c = NULL;
    L8_CK(l8_tensor_contiguous(v, NULL, &c));
    ck_assert(l8_tensor_is_contiguous(c));
    ck_assert_ptr_ne(l8_tensor_storage(c), l8_tensor_storage(v));
    ck_assert_ptr_eq(l8_tensor_fp8_meta(c), l8_tensor_fp8_meta(v));
    uint8_t *got = download(c);
    for (int64_t k = 0; k < r->n; k++)
        ck_assert_msg(!memcmp(got + k * (int64_t)r->es, r->val + k * (int64_t)r->es, r->es),
                      "element %lld of a %s view differs from the reference", (long long)k,
                      l8_dtype_name(l8_tensor_dtype(v)));
    free(got);
    l8_tensor_destroy(c);
}

/* A new contiguous tensor holding the reference's values. */
static l8_tensor *tensor_of(l8_ctx *ctx, l8_dtype dt, const href *r)
{
    l8_tensor *t = tensor_empty(ctx, dt, r->ndim, r->shape);
    upload(t, r->val);
    return t;
}

static void random_shape(l8_rng *r, int ndim, int64_t max_dim, int allow_zero, int64_t *shape)
{
    for (int d = 0; d < ndim; d++) {
        shape[d] = 1 + (int64_t)l8_rng_below(r, (uint64_t)max_dim);
        if (allow_zero && l8_rng_below(r, 24) == 0) shape[d] = 0;
    }
}

static const l8_dtype k_all_dtypes[] = {L8_F32, L8_BF16, L8_F16, L8_E4M3, L8_E5M2, L8_I32, L8_U8};
#define N_DTYPES ((int)(sizeof k_all_dtypes / sizeof k_all_dtypes[0]))

/* ---- random view chains ---- */

/* A random factorization of n into ndim dims (n > 0), maybe with one -1. */
static void random_reshape_target(l8_rng *r, int64_t n, int ndim, int64_t *shape, int64_t *req)
{
    int64_t rest = n;
    for (int d = 0; d < ndim - 1; d++) {
        int64_t divs[64];
        int nd = 0;
        for (int64_t k = 1; k <= rest && nd < 64; k++)
            if (rest % k == 0) divs[nd++] = k;
        shape[d] = divs[l8_rng_below(r, (uint64_t)nd)];
        rest /= shape[d];
    }
    if (ndim > 0) shape[ndim - 1] = rest;
    for (int d = 0; d < ndim; d++) req[d] = shape[d];
    if (ndim > 0 && l8_rng_below(r, 3) == 0) req[l8_rng_below(r, (uint64_t)ndim)] = -1;
}

/* A random chain of narrow/slice/transpose (no reshape) on both sides. */
static void random_strided(l8_rng *r, l8_tensor **t, href *ref, int ops)
{
    for (int k = 0; k < ops; k++) {
        int d = (int)l8_rng_below(r, (uint64_t)ref->ndim);
        l8_tensor *v = NULL;
        href out;
        if (l8_rng_below(r, 2)) {
            int d1 = (int)l8_rng_below(r, (uint64_t)ref->ndim);
            L8_CK(l8_tensor_transpose(*t, d, d1, &v));
            out = href_transpose(ref, d, d1);
        } else {
            int64_t size = ref->shape[d], step = 1 + (int64_t)l8_rng_below(r, 3);
            int64_t start = (int64_t)l8_rng_below(r, (uint64_t)(size + 1) / 2);
            L8_CK(l8_tensor_slice(*t, d, start, size, step, &v));
            out = href_slice(ref, d, start, size, step);
        }
        l8_tensor_destroy(*t);
        *t = v;
        href_free(ref);
        *ref = out;
    }
}

/* Reshape t to a random shape with as many elements. Succeeds exactly when
 * the brute-force check says a view can express it; returns the view and
 * its reference, or NULL. */
static l8_tensor *try_reshape(l8_rng *r, const l8_tensor *t, const href *ref, href *out)
{
    int new_nd = (int)l8_rng_below(r, L8_MAX_DIMS + 1);
    if (ref->n != 1 && new_nd == 0) new_nd = 1;
    int64_t shape[L8_MAX_DIMS] = {0}, req[L8_MAX_DIMS] = {0};
    if (ref->n > 0) {
        random_reshape_target(r, ref->n, new_nd, shape, req);
    } else {                      /* an empty tensor: any shape with a 0 in it */
        random_shape(r, new_nd, 4, 0, shape);
        shape[l8_rng_below(r, (uint64_t)new_nd)] = 0;
        memcpy(req, shape, sizeof req);
    }
    int want = href_viewable(ref, new_nd, shape);
    l8_tensor *v = NULL;
    l8_status st = l8_tensor_reshape(t, new_nd, req, &v);
    ck_assert_msg(st == (want ? L8_OK : L8_ERR_INVALID_ARG),
                  "reshape %s %s to %s: got %s, the brute-force check says %s viewable (%s)",
                  l8_tensor_is_contiguous(t) ? "contiguous" : "strided",
                  fmt(ref->ndim, ref->shape).s, fmt(new_nd, req).s, l8_status_name(st),
                  want ? "it is" : "it is not", l8_last_error_string());
    if (!want) {
        ck_assert(!l8_tensor_is_contiguous(t));        /* contiguous always reshapes */
        ck_assert_ptr_null(v);
        return NULL;
    }
    *out = href_reshape(ref, new_nd, shape);
    return v;
}

/* Apply one random view op to (*t, *ref), checking the result against the
 * reference; the old tensor is destroyed (its storage lives on in the view). */
static void random_op(l8_rng *r, l8_tensor **t, href *ref)
{
    int nd = ref->ndim;
    int op = nd == 0 ? 3 : (int)l8_rng_below(r, 4);
    l8_tensor *v = NULL;
    href out;
    if (op == 0 || op == 1) {
        int d = (int)l8_rng_below(r, (uint64_t)nd);
        int64_t size = ref->shape[d];
        int64_t start = (int64_t)l8_rng_below(r, (uint64_t)size + 1);
        int64_t stop = start + (int64_t)l8_rng_below(r, (uint64_t)(size - start) + 1);
        if (stop == start && stop < size && l8_rng_below(r, 8)) stop++;   /* mostly non-empty */
        if (op == 0) {
            L8_CK(l8_tensor_narrow(*t, d, start, stop - start, &v));
            out = href_slice(ref, d, start, stop, 1);
        } else {
            int64_t step = 1 + (int64_t)l8_rng_below(r, 4);
            L8_CK(l8_tensor_slice(*t, d, start, stop, step, &v));
            out = href_slice(ref, d, start, stop, step);
        }
    } else if (op == 2) {
        int d0 = (int)l8_rng_below(r, (uint64_t)nd), d1 = (int)l8_rng_below(r, (uint64_t)nd);
        L8_CK(l8_tensor_transpose(*t, d0, d1, &v));
        out = href_transpose(ref, d0, d1);
    } else {
        v = try_reshape(r, *t, ref, &out);
        if (!v) return;
    }
    check_view(v, &out);
    ck_assert_ptr_eq(l8_tensor_storage(v), l8_tensor_storage(*t));
    ck_assert_ptr_eq(l8_tensor_fp8_meta(v), l8_tensor_fp8_meta(*t));
    l8_tensor_destroy(*t);
    *t = v;
    href_free(ref);
    *ref = out;
}

START_TEST(test_view_chains)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50001);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int iters = l8_test_quick() ? 12 : 150;
    for (int it = 0; it < iters; it++) {
        l8_dtype dt = k_all_dtypes[l8_rng_below(&r, N_DTYPES)];
        int ndim = (int)l8_rng_below(&r, L8_MAX_DIMS + 1);
        int64_t shape[L8_MAX_DIMS];
        random_shape(&r, ndim, 6, 1, shape);
        href ref = href_random(&r, ndim, shape, l8_dtype_size(dt));
        l8_tensor *t = tensor_of(ctx, dt, &ref);
        check_view(t, &ref);
        int ops = 1 + (int)l8_rng_below(&r, 6);
        for (int k = 0; k < ops; k++) random_op(&r, &t, &ref);
        ck_assert_int_eq(l8_storage_refcount(l8_tensor_storage(t)), 1);
        l8_tensor_destroy(t);
        href_free(&ref);
        ck_assert_uint_eq(live_bytes(ctx), 0);
    }
    ctx_finish(ctx);
}
END_TEST

/* Strided views (slices and transposes) of random shapes, reshaped many
 * ways: both outcomes occur often, and each must match the brute force. */
START_TEST(test_reshape_strided)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e5000e);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int iters = l8_test_quick() ? 15 : 150, outcomes[2] = {0, 0};
    for (int it = 0; it < iters; it++) {
        l8_dtype dt = k_all_dtypes[l8_rng_below(&r, N_DTYPES)];
        int ndim = 2 + (int)l8_rng_below(&r, L8_MAX_DIMS - 1);
        int64_t shape[L8_MAX_DIMS];
        random_shape(&r, ndim, 5, 0, shape);
        href ref = href_random(&r, ndim, shape, l8_dtype_size(dt));
        l8_tensor *t = tensor_of(ctx, dt, &ref);
        random_strided(&r, &t, &ref, 1 + (int)l8_rng_below(&r, 3));
        for (int k = 0; k < 8; k++) {
            href out;
            l8_tensor *v = try_reshape(&r, t, &ref, &out);
            outcomes[v != NULL]++;
            if (!v) continue;
            check_view(v, &out);
            l8_tensor_destroy(v);
            href_free(&out);
        }
        l8_tensor_destroy(t);
        href_free(&ref);
    }
    ck_assert_msg(outcomes[0] > iters / 4 && outcomes[1] > iters / 4,
                  "too one-sided to test the rule: %d views, %d refusals", outcomes[1],
                  outcomes[0]);
    ctx_finish(ctx);
}
END_TEST

/* Each op once on a known layout, with exact strides and offsets. */
START_TEST(test_view_basics)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50002);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[3] = {4, 5, 6};
    href ref = href_random(&r, 3, shape, 4);
    l8_tensor *t = tensor_of(ctx, L8_F32, &ref), *v = NULL, *w = NULL;
    ck_assert_int_eq(l8_tensor_stride(t, 0), 30);
    ck_assert_int_eq(l8_tensor_stride(t, 1), 6);
    ck_assert_int_eq(l8_tensor_stride(t, 2), 1);
    ck_assert_int_eq(l8_tensor_stride(t, 3), -1);
    ck_assert_int_eq(l8_tensor_dim(t, -1), -1);
    ck_assert(l8_tensor_is_contiguous(t));
    ck_assert_ptr_eq(l8_tensor_ctx(t), ctx);
    ck_assert_uint_eq(l8_storage_bytes(l8_tensor_storage(t)), 4 * 5 * 6 * 4);

    L8_CK(l8_tensor_narrow(t, 1, 2, 3, &v));              /* (4, 3, 6) at element 12 */
    ck_assert_uint_eq(l8_tensor_offset(v), 12 * 4);
    ck_assert(!l8_tensor_is_contiguous(v));
    href h = href_slice(&ref, 1, 2, 5, 1);
    check_view(v, &h);
    href_free(&h);
    l8_tensor_destroy(v);

    L8_CK(l8_tensor_slice(t, 2, 1, 6, 2, &v));            /* (4, 5, 3), stride 2 */
    ck_assert_int_eq(l8_tensor_dim(v, 2), 3);
    ck_assert_int_eq(l8_tensor_stride(v, 2), 2);
    ck_assert_uint_eq(l8_tensor_offset(v), 4);
    h = href_slice(&ref, 2, 1, 6, 2);
    check_view(v, &h);
    href_free(&h);
    l8_tensor_destroy(v);

    L8_CK(l8_tensor_slice(t, 0, 1, 2, 100, &v));          /* huge step: one element */
    ck_assert_int_eq(l8_tensor_dim(v, 0), 1);
    h = href_slice(&ref, 0, 1, 2, 100);
    check_view(v, &h);
    href_free(&h);
    l8_tensor_destroy(v);

    L8_CK(l8_tensor_transpose(t, 0, 2, &v));              /* (6, 5, 4), strides (1, 6, 30) */
    ck_assert_int_eq(l8_tensor_stride(v, 0), 1);
    ck_assert_int_eq(l8_tensor_stride(v, 2), 30);
    h = href_transpose(&ref, 0, 2);
    check_view(v, &h);
    /* (6, 20) would merge dims 1 and 2, but stride 6 != 4 * 30: not a view.
     * (6, 5, 2, 2) only splits dim 2: a view with strides (.., 60, 30). */
    int64_t bad[2] = {6, 20}, good[4] = {6, 5, 2, -1};
    L8_CK_ST(l8_tensor_reshape(v, 2, bad, &w), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(w);
    L8_CK(l8_tensor_reshape(v, 4, good, &w));
    ck_assert_int_eq(l8_tensor_dim(w, 3), 2);
    ck_assert_int_eq(l8_tensor_stride(w, 2), 60);
    ck_assert_int_eq(l8_tensor_stride(w, 3), 30);
    int64_t gs[4] = {6, 5, 2, 2};
    href h2 = href_reshape(&h, 4, gs);
    check_view(w, &h2);
    href_free(&h2);
    href_free(&h);
    l8_tensor_destroy(w);
    l8_tensor_destroy(v);

    int64_t flat[1] = {-1};
    L8_CK(l8_tensor_reshape(t, 1, flat, &v));
    ck_assert_int_eq(l8_tensor_dim(v, 0), 120);
    ck_assert_uint_eq(l8_tensor_offset(v), 0);
    l8_tensor_destroy(v);

    /* narrow to nothing at the very end keeps the view inside the storage */
    L8_CK(l8_tensor_narrow(t, 0, 4, 0, &v));
    ck_assert_int_eq(l8_tensor_numel(v), 0);
    ck_assert_uint_le(l8_tensor_offset(v), l8_storage_bytes(l8_tensor_storage(v)));
    L8_CK(l8_tensor_contiguous(v, NULL, &w));
    ck_assert_int_eq(l8_tensor_numel(w), 0);
    L8_CK(l8_tensor_copy_to_host(w, NULL, 0, NULL));
    l8_tensor_destroy(w);
    l8_tensor_destroy(v);

    l8_tensor_destroy(t);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* Scalars (ndim 0) and reshapes through size-1 dims. */
START_TEST(test_scalar)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50003);
    l8_ctx *ctx = ctx_make(NULL, 0);
    href ref = href_random(&r, 0, NULL, 4);
    l8_tensor *s = tensor_of(ctx, L8_I32, &ref), *v = NULL, *w = NULL;
    ck_assert_int_eq(l8_tensor_ndim(s), 0);
    ck_assert_int_eq(l8_tensor_numel(s), 1);
    ck_assert(l8_tensor_is_contiguous(s));
    check_view(s, &ref);
    int64_t ones[3] = {1, -1, 1};
    L8_CK(l8_tensor_reshape(s, 3, ones, &v));
    ck_assert_int_eq(l8_tensor_dim(v, 1), 1);
    L8_CK(l8_tensor_reshape(v, 0, NULL, &w));
    check_view(w, &ref);
    l8_tensor_destroy(w);
    L8_CK_ST(l8_tensor_narrow(s, 0, 0, 1, &w), L8_ERR_INVALID_ARG);   /* no dims to narrow */
    l8_tensor *d = tensor_empty(ctx, L8_I32, 0, NULL);
    poison(d);
    L8_CK_ST(l8_tensor_copy(d, v, NULL), L8_ERR_INVALID_ARG);     /* () vs (1, 1, 1) */
    L8_CK(l8_tensor_copy(d, s, NULL));
    check_view(d, &ref);
    l8_tensor_destroy(d);
    l8_tensor_destroy(v);
    l8_tensor_destroy(s);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* ---- contiguous copies and copies between views ---- */

START_TEST(test_contiguous_every_dtype)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50004);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int reps = l8_test_quick() ? 1 : 4;
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < N_DTYPES; i++) {
            l8_dtype dt = k_all_dtypes[i];
            int ndim = 2 + (int)l8_rng_below(&r, 3);
            int64_t shape[L8_MAX_DIMS];
            random_shape(&r, ndim, 9, 0, shape);
            shape[0] += 1;            /* >= 2: the view's last dim is then strided */
            shape[ndim - 1] += 2;
            href ref = href_random(&r, ndim, shape, l8_dtype_size(dt));
            l8_tensor *t = tensor_of(ctx, dt, &ref), *a = NULL, *v = NULL;
            /* (.., last) -> transposed, then every second element along dim 0 */
            L8_CK(l8_tensor_transpose(t, 0, ndim - 1, &a));
            L8_CK(l8_tensor_slice(a, 0, 1, l8_tensor_dim(a, 0), 2, &v));
            href h1 = href_transpose(&ref, 0, ndim - 1);
            href h2 = href_slice(&h1, 0, 1, h1.shape[0], 2);
            ck_assert(!l8_tensor_is_contiguous(v));
            check_view(v, &h2);                           /* contiguous + copy_to_host */
            /* and an explicit copy into a poisoned contiguous tensor */
            l8_tensor *d = tensor_empty(ctx, dt, h2.ndim, h2.shape);
            poison(d);
            L8_CK(l8_tensor_copy(d, v, NULL));
            uint8_t *got = download(d);
            ck_assert(!memcmp(got, h2.val, (size_t)h2.n * h2.es));
            free(got);
            l8_tensor_destroy(d);
            l8_tensor_destroy(v);
            l8_tensor_destroy(a);
            l8_tensor_destroy(t);
            href_free(&h2);
            href_free(&h1);
            href_free(&ref);
        }
    }
    ctx_finish(ctx);
}
END_TEST

/* dst, a strided view of a poisoned tensor, receives a strided view of
 * another: the covered elements get src's values, every other byte of the
 * dst storage stays poisoned. */
START_TEST(test_copy_between_views)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50005);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int iters = l8_test_quick() ? 8 : 60;
    for (int it = 0; it < iters; it++) {
        l8_dtype dt = k_all_dtypes[l8_rng_below(&r, N_DTYPES)];
        size_t es = l8_dtype_size(dt);
        int ndim = 1 + (int)l8_rng_below(&r, L8_MAX_DIMS);
        int64_t shape[L8_MAX_DIMS] = { 0 };
        random_shape(&r, ndim, 7, 0, shape);
        href dref = href_random(&r, ndim, shape, es);
        memset(dref.val, POISON, (size_t)dref.n * es);
        l8_tensor *base = tensor_of(ctx, dt, &dref);
        l8_tensor *dst = NULL;
        L8_CK(l8_tensor_narrow(base, 0, 0, shape[0], &dst));
        random_strided(&r, &dst, &dref, 1 + (int)l8_rng_below(&r, 4));

        /* src: a tensor laid out with two dims swapped and every dim doubled,
         * viewed back to dst's shape by a transpose and step-2 slices. */
        int d0 = (int)l8_rng_below(&r, (uint64_t)ndim), d1 = (int)l8_rng_below(&r, (uint64_t)ndim);
        int64_t sshape[L8_MAX_DIMS];
        for (int d = 0; d < ndim; d++) sshape[d] = 2 * dref.shape[d] + 1;
        int64_t tmp = sshape[d0];
        sshape[d0] = sshape[d1];
        sshape[d1] = tmp;
        href sref = href_random(&r, ndim, sshape, es);
        l8_tensor *src = tensor_of(ctx, dt, &sref);
        for (int d = 0; d < ndim; d++) {
            l8_tensor *v = NULL;
            int64_t start = (int64_t)l8_rng_below(&r, 2);
            int64_t stop = start + 2 * (sshape[d] / 2) - 1;       /* sshape[d] / 2 elements */
            L8_CK(l8_tensor_slice(src, d, start, stop, 2, &v));
            href h = href_slice(&sref, d, start, stop, 2);
            l8_tensor_destroy(src);
            src = v;
            href_free(&sref);
            sref = h;
        }
        l8_tensor *v = NULL;
        L8_CK(l8_tensor_transpose(src, d0, d1, &v));
        href h = href_transpose(&sref, d0, d1);
        l8_tensor_destroy(src);
        src = v;
        href_free(&sref);
        sref = h;
        for (int d = 0; d < ndim; d++) ck_assert_int_eq(sref.shape[d], dref.shape[d]);

        L8_CK(l8_tensor_copy(dst, src, NULL));
        /* expected storage image: poison, with src's values at dst's addresses */
        size_t total = l8_tensor_nbytes(base);
        uint8_t *want = xmalloc(total);
        memset(want, POISON, total);
        for (int64_t k = 0; k < dref.n; k++)
            memcpy(want + dref.addr[k], sref.val + k * (int64_t)es, es);
        uint8_t *got = download(base);
        for (size_t i = 0; i < total; i++)
            ck_assert_msg(got[i] == want[i], "byte %zu of the dst storage: %02x, want %02x", i,
                          got[i], want[i]);
        free(got);
        free(want);
        l8_tensor_destroy(src);
        l8_tensor_destroy(dst);
        l8_tensor_destroy(base);
        href_free(&sref);
        href_free(&dref);
    }
    ctx_finish(ctx);
}
END_TEST

/* Copies and host transfers on the other streams, and disjoint views of one
 * storage. */
START_TEST(test_copy_streams)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50006);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[2] = {8, 12};
    href ref = href_random(&r, 2, shape, 2);
    l8_tensor *t = tensor_empty(ctx, L8_BF16, 2, shape), *a = NULL, *b = NULL, *c = NULL;
    l8_stream *copy = l8_ctx_stream(ctx, L8_STREAM_COPY);
    l8_stream *comm = l8_ctx_stream(ctx, L8_STREAM_COMM);
    L8_CK(l8_tensor_copy_from_host(t, ref.val, (size_t)ref.n * 2, copy));
    L8_CK(l8_stream_synchronize(copy));
    check_view(t, &ref);
    L8_CK(l8_tensor_contiguous(t, comm, &c));
    L8_CK(l8_stream_synchronize(comm));
    uint8_t *got = xmalloc((size_t)ref.n * 2);
    L8_CK(l8_tensor_copy_to_host(c, got, (size_t)ref.n * 2, copy));
    L8_CK(l8_stream_synchronize(copy));
    ck_assert(!memcmp(got, ref.val, (size_t)ref.n * 2));
    /* rows 4..7 <- rows 0..3 of the same storage: disjoint, allowed */
    L8_CK(l8_tensor_narrow(t, 0, 0, 4, &a));
    L8_CK(l8_tensor_narrow(t, 0, 4, 4, &b));
    L8_CK(l8_tensor_copy(b, a, comm));
    L8_CK(l8_tensor_copy_to_host(t, got, (size_t)ref.n * 2, NULL));
    ck_assert(!memcmp(got, ref.val, 4 * 12 * 2));
    ck_assert(!memcmp(got + 4 * 12 * 2, ref.val, 4 * 12 * 2));
    free(got);
    l8_tensor_destroy(a);
    l8_tensor_destroy(b);
    l8_tensor_destroy(c);
    l8_tensor_destroy(t);
    /* everything used on other streams still returns to the allocator */
    L8_CK(l8_ctx_synchronize(ctx));
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* ---- refcounts and storages ---- */

START_TEST(test_refcounts)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50007);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[2] = {6, 10};
    href ref = href_random(&r, 2, shape, 4);
    l8_tensor *t = tensor_of(ctx, L8_F32, &ref), *v = NULL, *w = NULL;
    l8_storage *st = l8_tensor_storage(t);
    ck_assert_int_eq(l8_storage_refcount(st), 1);
    ck_assert_ptr_eq(l8_storage_ctx(st), ctx);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_DEVICE);
    uint64_t live = live_bytes(ctx);
    ck_assert_uint_ge(live, 6 * 10 * 4);

    L8_CK(l8_tensor_narrow(t, 0, 2, 3, &v));
    L8_CK(l8_tensor_transpose(v, 0, 1, &w));
    ck_assert_int_eq(l8_storage_refcount(st), 3);
    l8_tensor_destroy(t);                                 /* the base goes first */
    ck_assert_int_eq(l8_storage_refcount(st), 2);
    ck_assert_uint_eq(live_bytes(ctx), live);
    href h1 = href_slice(&ref, 0, 2, 5, 1);
    href h2 = href_transpose(&h1, 0, 1);
    check_view(w, &h2);                                   /* the data are still there */
    check_view(v, &h1);
    l8_tensor_destroy(v);
    ck_assert_int_eq(l8_storage_refcount(st), 1);
    ck_assert_uint_eq(live_bytes(ctx), live);
    check_view(w, &h2);
    l8_tensor_destroy(w);                                 /* last view: freed */
    ck_assert_uint_eq(live_bytes(ctx), 0);

    /* A storage held by the caller and by views of it. */
    l8_storage *s2 = NULL;
    L8_CK(l8_storage_create(ctx, 1000, NULL, &s2));
    ck_assert_uint_eq(l8_storage_bytes(s2), 1000);
    l8_storage_retain(s2);
    ck_assert_int_eq(l8_storage_refcount(s2), 2);
    l8_storage_release(s2);
    int64_t sh[1] = {250};
    L8_CK(l8_tensor_from_storage(s2, 0, L8_F32, 1, sh, NULL, &v));
    ck_assert_int_eq(l8_storage_refcount(s2), 2);
    l8_storage_release(s2);                               /* the caller lets go */
    ck_assert_uint_gt(live_bytes(ctx), 0);
    uint8_t data[1000];
    fill_data(&r, data, sizeof data);
    upload(v, data);
    uint8_t *got = download(v);
    ck_assert(!memcmp(got, data, sizeof data));
    free(got);
    l8_tensor_destroy(v);
    ck_assert_uint_eq(live_bytes(ctx), 0);

    /* NULL is a no-op for every release */
    l8_storage_release(NULL);
    l8_tensor_destroy(NULL);
    l8_fp8_meta_release(NULL);
    href_free(&h2);
    href_free(&h1);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* Views at different offsets resolve their pointer through the storage on
 * every call; empty storages and tensors have no bytes to point at. */
START_TEST(test_data_pointer)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[2] = {16, 8};
    l8_tensor *t = tensor_empty(ctx, L8_F16, 2, shape), *v = NULL;
    void *base = NULL, *p = NULL;
    L8_CK(l8_storage_data(l8_tensor_storage(t), &base));
    ck_assert_ptr_nonnull(base);
    for (int64_t row = 0; row < 16; row++) {
        L8_CK(l8_tensor_narrow(t, 0, row, 1, &v));
        L8_CK(l8_tensor_data(v, &p));
        ck_assert_ptr_eq(p, (char *)base + row * 8 * 2);
        L8_CK(l8_tensor_data(v, &p));                     /* same answer twice */
        ck_assert_ptr_eq(p, (char *)base + l8_tensor_offset(v));
        l8_tensor_destroy(v);
    }
    l8_tensor_destroy(t);

    l8_storage *z = NULL;
    L8_CK(l8_storage_create(ctx, 0, NULL, &z));
    L8_CK(l8_storage_data(z, &p));
    ck_assert_ptr_null(p);
    int64_t zs[2] = {0, 5};
    L8_CK(l8_tensor_from_storage(z, 0, L8_F32, 2, zs, NULL, &v));
    l8_storage_release(z);
    L8_CK(l8_tensor_data(v, &p));
    ck_assert_ptr_null(p);
    ck_assert_uint_eq(l8_tensor_nbytes(v), 0);
    L8_CK(l8_tensor_copy_from_host(v, NULL, 0, NULL));
    l8_tensor *e = tensor_empty(ctx, L8_F32, 2, zs);
    L8_CK(l8_tensor_copy(e, v, NULL));
    l8_tensor_destroy(e);
    l8_tensor_destroy(v);
    ctx_finish(ctx);
}
END_TEST

/* ---- FP8 metadata ---- */

START_TEST(test_fp8_meta)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50008);
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_fp8_meta *m = NULL, *m2 = NULL;
    L8_CK(l8_fp8_meta_create(ctx, &m));
    float s = 0, si = 0, am = -1;
    L8_CK(l8_fp8_meta_get(m, &s, &si, &am));
    ck_assert(s == 1.0f && si == 1.0f && am == 0.0f);
    /* 16 bytes apart and 16-byte aligned: cuBLASLt uses them in place */
    ck_assert_ptr_eq(l8_fp8_meta_scale_inv(m), l8_fp8_meta_scale(m) + 4);
    ck_assert_ptr_eq(l8_fp8_meta_amax(m), l8_fp8_meta_scale(m) + 8);
    ck_assert_uint_eq((uintptr_t)l8_fp8_meta_scale(m) % 16, 0);
    float ws = l8_rng_float(&r, 0.5f, 300.0f), wa = l8_rng_float(&r, 1.0f, 448.0f);
    L8_CK(l8_fp8_meta_set(m, ws, 1.0f / ws, wa));
    L8_CK(l8_fp8_meta_get(m, &s, &si, &am));
    ck_assert(s == ws && si == 1.0f / ws && am == wa);
    /* host backend: the "device" scalars are host memory we can read */
    ck_assert(*l8_fp8_meta_scale(m) == ws && *l8_fp8_meta_amax(m) == wa);
    L8_CK(l8_fp8_meta_get(m, NULL, NULL, &am));           /* any output may be NULL */
    ck_assert(am == wa);

    int64_t shape[2] = {6, 8};
    href ref = href_random(&r, 2, shape, 1);
    l8_tensor *t = tensor_of(ctx, L8_E4M3, &ref), *v = NULL, *c = NULL;
    ck_assert_ptr_null(l8_tensor_fp8_meta(t));
    L8_CK(l8_tensor_set_fp8_meta(t, m));
    l8_fp8_meta_release(m);                               /* t keeps it alive */
    ck_assert_ptr_eq(l8_tensor_fp8_meta(t), m);
    L8_CK(l8_tensor_transpose(t, 0, 1, &v));
    ck_assert_ptr_eq(l8_tensor_fp8_meta(v), m);           /* views share it */
    L8_CK(l8_tensor_contiguous(v, NULL, &c));
    ck_assert_ptr_eq(l8_tensor_fp8_meta(c), m);           /* and so does a copy */
    l8_tensor_destroy(t);
    l8_tensor_destroy(v);
    L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(c), &s, NULL, NULL));   /* still alive */
    ck_assert(s == ws);
    /* a write through one holder is seen by the others */
    L8_CK(l8_tensor_narrow(c, 0, 1, 2, &v));
    L8_CK(l8_fp8_meta_set(l8_tensor_fp8_meta(v), 2.0f, 0.5f, 7.0f));
    L8_CK(l8_fp8_meta_get(l8_tensor_fp8_meta(c), &s, &si, &am));
    ck_assert(s == 2.0f && si == 0.5f && am == 7.0f);

    /* replace, re-set the same one, detach */
    L8_CK(l8_fp8_meta_create(ctx, &m2));
    L8_CK(l8_tensor_set_fp8_meta(c, m2));
    ck_assert_ptr_eq(l8_tensor_fp8_meta(c), m2);
    ck_assert_ptr_eq(l8_tensor_fp8_meta(v), m);           /* v still holds the old one */
    L8_CK(l8_tensor_set_fp8_meta(c, m2));
    L8_CK(l8_tensor_set_fp8_meta(c, NULL));
    ck_assert_ptr_null(l8_tensor_fp8_meta(c));
    L8_CK(l8_fp8_meta_get(m2, &s, NULL, NULL));           /* our reference kept it */
    ck_assert(s == 1.0f);

    /* not FP8: refused, and the tensor keeps no metadata */
    l8_tensor *f = tensor_empty(ctx, L8_F32, 2, shape);
    L8_CK_ST(l8_tensor_set_fp8_meta(f, m2), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "f32"));
    ck_assert_ptr_null(l8_tensor_fp8_meta(f));
    /* metadata of another context: refused */
    l8_ctx *other = ctx_make(NULL, 0);
    l8_fp8_meta *mo = NULL;
    L8_CK(l8_fp8_meta_create(other, &mo));
    L8_CK_ST(l8_tensor_set_fp8_meta(c, mo), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(l8_tensor_fp8_meta(c));
    l8_fp8_meta_release(mo);
    ctx_finish(other);

    l8_fp8_meta_release(m2);
    l8_tensor_destroy(f);
    l8_tensor_destroy(v);
    l8_tensor_destroy(c);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* ---- error paths ---- */

/* A failing view call sets *out to NULL and creates nothing. */
#define BAD(want, call) do {                                                   \
        l8_tensor *o_ = (l8_tensor *)(uintptr_t)16;                            \
        uint64_t before_ = live_bytes(ctx);                                    \
        l8_status s_ = (call);                                                 \
        ck_assert_msg(s_ == (want), "%s -> %s, wanted %s", #call,              \
                      l8_status_name(s_), l8_status_name(want));               \
        ck_assert_msg(o_ == NULL, "%s left *out set", #call);                  \
        ck_assert_uint_eq(live_bytes(ctx), before_);                           \
        ck_assert(l8_last_error()->message[0] != '\0');                        \
    } while (0)

START_TEST(test_errors_create)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    const int64_t neg[2] = {3, -2}, ok[2] = {3, 4};
    const int64_t huge[3] = {INT64_MAX / 2, INT64_MAX / 2, 2};
    const int64_t huge_empty[3] = {0, INT64_MAX / 2, 4};  /* 0 elements, strides overflow */
    const int64_t big_bytes[1] = {INT64_MAX / 2};         /* elements fit, f32 bytes do not */
    const int64_t five[5] = {1, 1, 1, 1, 1};
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, 2, neg, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "negative"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, 3, huge, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "overflow"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_U8, 3, huge_empty, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, 1, big_bytes, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, 5, five, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, -1, ok, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, (l8_dtype)L8_DTYPE_COUNT, 2, ok, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, (l8_dtype)-1, 2, ok, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(ctx, L8_F32, 2, NULL, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_empty(NULL, L8_F32, 2, ok, &o_));
    L8_CK_ST(l8_tensor_empty(ctx, L8_F32, 2, ok, NULL), L8_ERR_INVALID_ARG);
    /* storages */
    l8_storage *st = NULL;
    L8_CK_ST(l8_storage_create(NULL, 16, NULL, &st), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_storage_create(ctx, (size_t)INT64_MAX + 1, NULL, &st), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(st);
    l8_ctx *other = ctx_make(NULL, 0);
    L8_CK_ST(l8_storage_create(ctx, 16, l8_ctx_stream(other, L8_STREAM_COMPUTE), &st),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(st);
    L8_CK(l8_storage_create(ctx, 16, NULL, &st));
    L8_CK_ST(l8_storage_record_stream(st, l8_ctx_stream(other, L8_STREAM_COMM)),
             L8_ERR_INVALID_ARG);
    L8_CK(l8_storage_record_stream(st, l8_ctx_stream(ctx, L8_STREAM_COMM)));
    L8_CK_ST(l8_storage_record_stream(st, NULL), L8_ERR_INVALID_ARG);
    void *p = NULL;
    L8_CK_ST(l8_storage_data(NULL, &p), L8_ERR_INVALID_ARG);
    l8_storage_release(st);
    ctx_finish(other);
    /* metadata */
    l8_fp8_meta *m = NULL;
    L8_CK_ST(l8_fp8_meta_create(NULL, &m), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(m);
    L8_CK_ST(l8_fp8_meta_get(NULL, NULL, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_fp8_meta_set(NULL, 1, 1, 0), L8_ERR_INVALID_ARG);
    /* dtype helpers */
    ck_assert_uint_eq(l8_dtype_size((l8_dtype)L8_DTYPE_COUNT), 0);
    ck_assert_str_eq(l8_dtype_name((l8_dtype)99), "invalid");
    ck_assert_str_eq(l8_dtype_name(L8_BF16), "bf16");
    ck_assert_uint_eq(l8_dtype_size(L8_E5M2), 1);
    ck_assert_uint_eq(l8_dtype_size(L8_F16), 2);
    ck_assert_uint_eq(l8_dtype_size(L8_I32), 4);
    ck_assert(l8_dtype_is_fp8(L8_E4M3) && l8_dtype_is_fp8(L8_E5M2) && !l8_dtype_is_fp8(L8_U8));
    ctx_finish(ctx);
}
END_TEST

START_TEST(test_errors_from_storage)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e50009);
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_storage *st = NULL;
    L8_CK(l8_storage_create(ctx, 96, NULL, &st));         /* 24 f32 */
    const int64_t s24[1] = {24}, s25[1] = {25}, s0[1] = {0}, s23[1] = {23};
    const int64_t sh2[2] = {4, 6}, st_ok[2] = {6, 1}, st_far[2] = {7, 1}, st_neg[2] = {6, -1};
    const int64_t st_huge[2] = {INT64_MAX / 2, 1};
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_from_storage(st, 0, L8_F32, 1, s24, NULL, &t));   /* exactly fits */
    l8_tensor_destroy(t);
    L8_CK(l8_tensor_from_storage(st, 0, L8_F32, 2, sh2, st_ok, &t));
    l8_tensor_destroy(t);
    L8_CK(l8_tensor_from_storage(st, 4, L8_F32, 1, s23, NULL, &t));   /* the tail */
    l8_tensor_destroy(t);
    L8_CK(l8_tensor_from_storage(st, 96, L8_F32, 1, s0, NULL, &t));   /* empty, at the end */
    l8_tensor_destroy(t);
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 0, L8_F32, 1, s25, NULL, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "96"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 8, L8_F32, 1, s23, NULL, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 100, L8_F32, 1, s0, NULL, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 0, L8_F32, 2, sh2, st_far, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 2, L8_F32, 1, s0, NULL, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "multiple"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 1, L8_BF16, 1, s0, NULL, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 0, L8_F32, 2, sh2, st_neg, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 0, L8_F32, 2, sh2, st_huge, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(st, 0, (l8_dtype)9, 1, s0, NULL, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_from_storage(NULL, 0, L8_F32, 1, s0, NULL, &o_));
    ck_assert_int_eq(l8_storage_refcount(st), 1);         /* no failed call kept a reference */
    /* a u8 view may start anywhere */
    L8_CK(l8_tensor_from_storage(st, 95, L8_U8, 1, (const int64_t[1]){1}, NULL, &t));
    uint8_t b = 0x3C, back = 0;
    L8_CK(l8_tensor_copy_from_host(t, &b, 1, NULL));
    L8_CK(l8_tensor_copy_to_host(t, &back, 1, NULL));
    ck_assert_uint_eq(back, 0x3C);
    l8_tensor_destroy(t);
    /* broadcast strides can be read but not written */
    const int64_t bshape[2] = {3, 4}, bstr[2] = {0, 1};
    L8_CK(l8_tensor_from_storage(st, 0, L8_F32, 2, bshape, bstr, &t));
    href row = href_random(&r, 1, (const int64_t[1]){4}, 4);
    l8_tensor *rv = NULL;
    L8_CK(l8_tensor_from_storage(st, 0, L8_F32, 1, (const int64_t[1]){4}, NULL, &rv));
    upload(rv, row.val);
    l8_tensor *c = NULL;
    L8_CK(l8_tensor_contiguous(t, NULL, &c));
    uint8_t *got = download(c);
    for (int i = 0; i < 3; i++) ck_assert(!memcmp(got + i * 16, row.val, 16));
    free(got);
    L8_CK_ST(l8_tensor_copy(t, c, NULL), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "stride 0"));
    l8_tensor_destroy(c);
    l8_tensor_destroy(rv);
    l8_tensor_destroy(t);
    href_free(&row);
    l8_storage_release(st);
    ctx_finish(ctx);
}
END_TEST

START_TEST(test_errors_views)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e5000a);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[3] = {4, 6, 8};
    href ref = href_random(&r, 3, shape, 2);
    l8_tensor *t = tensor_of(ctx, L8_BF16, &ref), *tt = NULL;
    L8_CK(l8_tensor_transpose(t, 1, 2, &tt));             /* (4, 8, 6) strides (48, 1, 8) */
    href tref = href_transpose(&ref, 1, 2);

    /* narrow */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 1, -1, 2, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 1, 7, 0, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 1, 2, -1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 2, 5, 4, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message,
                                 "start 5 + length 4 exceeds dimension 2 of size 8"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 2, 1, INT64_MAX, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, 3, 0, 1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(t, -1, 0, 1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_narrow(NULL, 0, 0, 1, &o_));
    L8_CK_ST(l8_tensor_narrow(t, 0, 0, 1, NULL), L8_ERR_INVALID_ARG);
    /* slice */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, 0, 4, 0, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, 0, 4, -1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, 3, 2, 1, &o_));     /* stop < start */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, 0, 5, 1, &o_));     /* stop > dim: not clamped */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, 5, 5, 1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 0, -1, 2, 1, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_slice(t, 4, 0, 1, 1, &o_));
    /* transpose */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_transpose(t, 0, 3, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_transpose(t, -1, 0, &o_));
    /* reshape */
    const int64_t r_count[2] = {10, 19}, r_two[3] = {-1, 8, -1}, r_neg[2] = {-2, -96};
    const int64_t r_div[2] = {-1, 7}, r_five[5] = {1, 1, 4, 6, 8}, r_ok[2] = {24, 8};
    const int64_t r_flat[1] = {192}, r_split[4] = {4, 8, 2, -1};
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 2, r_count, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 3, r_two, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "only one"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 2, r_neg, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 2, r_div, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 5, r_five, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, -1, r_ok, &o_));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(t, 2, NULL, &o_));
    /* not viewable: the transposed layout cannot be flattened */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(tt, 1, r_flat, &o_));
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "contiguous"));
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(tt, 2, r_ok, &o_));
    l8_tensor *v = NULL;
    L8_CK(l8_tensor_reshape(tt, 4, r_split, &v));         /* (4, 8, 2, 3): dim 2 splits */
    ck_assert_int_eq(l8_tensor_stride(v, 2), 24);
    href vref = href_reshape(&tref, 4, (const int64_t[4]){4, 8, 2, 3});
    check_view(v, &vref);
    href_free(&vref);
    l8_tensor_destroy(v);
    /* empty tensors: the -1 is ambiguous */
    l8_tensor *e = NULL;
    L8_CK(l8_tensor_narrow(t, 1, 6, 0, &e));              /* (4, 0, 8) */
    BAD(L8_ERR_INVALID_ARG, l8_tensor_reshape(e, 2, (const int64_t[2]){0, -1}, &o_));
    L8_CK(l8_tensor_reshape(e, 2, (const int64_t[2]){-1, 4}, &v));
    ck_assert_int_eq(l8_tensor_dim(v, 0), 0);
    l8_tensor_destroy(v);
    L8_CK(l8_tensor_reshape(e, 3, (const int64_t[3]){4, 0, 8}, &v));   /* same shape: */
    ck_assert_int_eq(l8_tensor_stride(v, 0), 48);                      /* strides kept */
    l8_tensor_destroy(v);
    l8_tensor_destroy(e);

    /* the inputs are untouched */
    check_view(t, &ref);
    check_view(tt, &tref);
    ck_assert_int_eq(l8_storage_refcount(l8_tensor_storage(t)), 2);
    l8_tensor_destroy(tt);
    l8_tensor_destroy(t);
    href_free(&tref);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

START_TEST(test_errors_copy)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e5000b);
    l8_ctx *ctx = ctx_make(NULL, 0);
    int64_t shape[2] = {6, 8};
    href ref = href_random(&r, 2, shape, 4);
    l8_tensor *src = tensor_of(ctx, L8_F32, &ref);
    l8_tensor *dst = tensor_empty(ctx, L8_F32, 2, shape);
    poison(dst);
    l8_tensor *di = tensor_empty(ctx, L8_I32, 2, shape);
    l8_tensor *d3 = tensor_empty(ctx, L8_F32, 2, (const int64_t[2]){8, 6});
    l8_tensor *d1 = tensor_empty(ctx, L8_F32, 1, (const int64_t[1]){48});
    l8_tensor *a = NULL, *b = NULL, *tr = NULL;
    L8_CK(l8_tensor_narrow(src, 0, 0, 4, &a));
    L8_CK(l8_tensor_narrow(src, 0, 2, 4, &b));            /* rows 2..5 overlap rows 0..3 */
    L8_CK(l8_tensor_transpose(src, 0, 1, &tr));
    uint64_t live = live_bytes(ctx);

    L8_CK_ST(l8_tensor_copy(di, src, NULL), L8_ERR_INVALID_ARG);      /* dtype */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "i32"));
    L8_CK_ST(l8_tensor_copy(d3, src, NULL), L8_ERR_INVALID_ARG);      /* shape */
    L8_CK_ST(l8_tensor_copy(d1, src, NULL), L8_ERR_INVALID_ARG);      /* ndim */
    L8_CK_ST(l8_tensor_copy(b, a, NULL), L8_ERR_INVALID_ARG);         /* overlap */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "overlap"));
    L8_CK_ST(l8_tensor_copy(src, src, NULL), L8_ERR_INVALID_ARG);     /* itself */
    L8_CK_ST(l8_tensor_copy(NULL, src, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy(dst, NULL, NULL), L8_ERR_INVALID_ARG);
    l8_ctx *other = ctx_make(NULL, 0);
    l8_tensor *od = tensor_empty(other, L8_F32, 2, shape);
    L8_CK_ST(l8_tensor_copy(od, src, NULL), L8_ERR_INVALID_ARG);      /* contexts */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "context"));
    L8_CK_ST(l8_tensor_copy(dst, src, l8_ctx_stream(other, L8_STREAM_COMPUTE)), L8_ERR_INVALID_ARG);
    l8_tensor *oc = NULL;
    L8_CK_ST(l8_tensor_contiguous(src, l8_ctx_stream(other, L8_STREAM_COPY), &oc),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(oc);
    l8_tensor_destroy(od);
    ctx_finish(other);

    /* host copies: size, contiguity, NULL */
    size_t n = l8_tensor_nbytes(src);
    uint8_t *buf = xmalloc(n + 4);
    memset(buf, POISON, n + 4);
    L8_CK_ST(l8_tensor_copy_to_host(src, buf, n - 1, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_to_host(src, buf, n + 4, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_from_host(dst, buf, n + 4, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_from_host(dst, buf, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_from_host(dst, NULL, n, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_to_host(tr, buf, n, NULL), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "not contiguous"));
    L8_CK_ST(l8_tensor_copy_from_host(tr, ref.val, n, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tensor_copy_to_host(NULL, buf, n, NULL), L8_ERR_INVALID_ARG);
    for (size_t i = 0; i < n + 4; i++) ck_assert_uint_eq(buf[i], POISON);   /* nothing written */
    free(buf);

    /* nothing moved, nothing allocated, everything still usable */
    ck_assert_uint_eq(live_bytes(ctx), live);
    uint8_t *got = download(dst);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(got[i], POISON);
    free(got);
    check_view(src, &ref);
    L8_CK(l8_tensor_copy(dst, src, NULL));
    check_view(dst, &ref);
    href tref = href_transpose(&ref, 0, 1);
    check_view(tr, &tref);
    href_free(&tref);

    l8_tensor *list[] = {src, dst, di, d3, d1, a, b, tr};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) l8_tensor_destroy(list[i]);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

/* ---- fault injection ---- */

/* The steps of a small workload; each needs a new segment from the provider
 * in a fresh context: pools are per stream and per size class. */
enum { STEP_META, STEP_EMPTY, STEP_CONTIG_COPY, STEP_CONTIG_COMM, N_STEPS };

typedef struct workload {
    l8_ctx *ctx;
    l8_fp8_meta *meta;
    l8_tensor *big;               /* (2, 1 MiB) u8: the large pool of the compute stream */
    l8_tensor *big_c;             /* its contiguous copy on the copy stream */
    l8_tensor *small;             /* (6, 5) e4m3 inside big, with meta */
    l8_tensor *small_c;           /* contiguous of its transpose on the comm stream */
} workload;

static l8_status run_step(workload *w, int step)
{
    l8_ctx *ctx = w->ctx;
    switch (step) {
    case STEP_META:
        return l8_fp8_meta_create(ctx, &w->meta);
    case STEP_EMPTY:
        return l8_tensor_empty(ctx, L8_U8, 2, (const int64_t[2]){2, 1 << 20}, &w->big);
    case STEP_CONTIG_COPY: {
        l8_tensor *v = NULL;
        l8_status st = l8_tensor_narrow(w->big, 0, 0, 2, &v);
        if (st == L8_OK)
            st = l8_tensor_contiguous(v, l8_ctx_stream(ctx, L8_STREAM_COPY), &w->big_c);
        l8_tensor_destroy(v);
        return st;
    }
    default: {
        l8_tensor *v = NULL;
        l8_status st = l8_tensor_transpose(w->small, 0, 1, &v);
        if (st == L8_OK)
            st = l8_tensor_contiguous(v, l8_ctx_stream(ctx, L8_STREAM_COMM), &w->small_c);
        l8_tensor_destroy(v);
        return st;
    }
    }
}

static l8_tensor **step_out(workload *w, int step)
{
    return step == STEP_EMPTY ? &w->big : step == STEP_CONTIG_COPY ? &w->big_c : &w->small_c;
}

/* Run the workload with fp failing its fail_nth-th segment_alloc and every
 * later one. The step that meets the fault must fail with L8_ERR_OOM,
 * change nothing and leave its output NULL; then the fault is cleared and
 * the step and the rest succeed. Returns the step that failed, or -1.
 * calls_per_step (may be NULL) receives the provider calls of each step. */
static int run_workload(l8_fault_provider *fp, uint64_t fail_nth, l8_rng *r,
                        uint64_t *calls_per_step)
{
    workload w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx_make(&fp->base, 0);
    fp->calls = fp->failures = 0;
    fp->fail_nth = fail_nth;
    fp->fail_sticky = 1;
    int failed = -1;
    uint8_t *data = NULL;
    for (int step = 0; step < N_STEPS; step++) {
        uint64_t before_calls = fp->calls, before_live = live_bytes(w.ctx);
        l8_status st = run_step(&w, step);
        if (calls_per_step) calls_per_step[step] = fp->calls - before_calls;
        if (st != L8_OK) {
            ck_assert_msg(st == L8_ERR_OOM, "step %d -> %s", step, l8_last_error_string());
            ck_assert_msg(failed < 0, "a second step failed after the fault was cleared");
            ck_assert_uint_gt(fp->failures, 0);
            ck_assert_uint_eq(live_bytes(w.ctx), before_live);     /* nothing leaked */
            L8_CK(l8_alloc_check(l8_ctx_allocator(w.ctx)));
            if (step == STEP_META) ck_assert_ptr_null(w.meta);
            else ck_assert_ptr_null(*step_out(&w, step));
            failed = step;
            fp->fail_nth = 0;                                      /* clear the fault */
            L8_CK(run_step(&w, step));
        }
        if (step == STEP_EMPTY) {
            /* fill big, and carve the FP8 view out of it */
            size_t n = l8_tensor_nbytes(w.big);
            data = xmalloc(n);
            fill_data(r, data, n);
            upload(w.big, data);
            int64_t sh[2] = {6, 5};
            L8_CK(l8_tensor_from_storage(l8_tensor_storage(w.big), 4096, L8_E4M3, 2, sh, NULL,
                                         &w.small));
            L8_CK(l8_tensor_set_fp8_meta(w.small, w.meta));
        }
    }
    /* the results are right */
    uint8_t *got = download(w.big_c);
    ck_assert(!memcmp(got, data, l8_tensor_nbytes(w.big)));
    free(got);
    got = download(w.small_c);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) ck_assert_uint_eq(got[i * 6 + j], data[4096 + j * 5 + i]);
    free(got);
    ck_assert_ptr_eq(l8_tensor_fp8_meta(w.small_c), w.meta);
    free(data);
    l8_tensor_destroy(w.small_c);
    l8_tensor_destroy(w.small);
    l8_tensor_destroy(w.big_c);
    l8_tensor_destroy(w.big);
    l8_fp8_meta_release(w.meta);
    ctx_finish(w.ctx);
    return failed;
}

START_TEST(test_fault_injection)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e5000c);
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &host);
    /* Fault-free: learn which provider call each step makes. */
    uint64_t calls[N_STEPS];
    ck_assert_int_eq(run_workload(&fp, 0, &r, calls), -1);
    uint64_t total = 0;
    for (int s = 0; s < N_STEPS; s++) {
        ck_assert_msg(calls[s] >= 1, "step %d made no segment allocation: the test no longer"
                      " reaches its error path", s);
        total += calls[s];
    }
    ck_assert_uint_eq(fp.live_bytes, 0);
    /* Fail the N-th call for every N: the step that makes it fails. */
    int hit[N_STEPS] = {0};
    for (uint64_t nth = 1; nth <= total; nth++) {
        int want = 0;
        for (uint64_t c = calls[0]; c < nth; c += calls[++want]) {}
        int got = run_workload(&fp, nth, &r, NULL);
        ck_assert_msg(got == want, "fault at call %llu: step %d failed, expected step %d",
                      (unsigned long long)nth, got, want);
        hit[got]++;
        ck_assert_uint_eq(fp.live_bytes, 0);
    }
    for (int s = 0; s < N_STEPS; s++) ck_assert_int_gt(hit[s], 0);
    /* A fault past the end touches nothing. */
    ck_assert_int_eq(run_workload(&fp, total + 1, &r, NULL), -1);
}
END_TEST

/* The allocator's memory limit is an OOM too, and leaves everything usable. */
START_TEST(test_memory_limit)
{
    l8_rng r;
    l8_rng_init(&r, 0x7e5000d);
    l8_ctx *ctx = ctx_make(NULL, 4u << 20);
    int64_t shape[2] = {16, 16};
    href ref = href_random(&r, 2, shape, 4);
    l8_tensor *t = tensor_of(ctx, L8_F32, &ref), *o_ = NULL;
    uint64_t live = live_bytes(ctx);
    L8_CK_ST(l8_tensor_empty(ctx, L8_F32, 1, (const int64_t[1]){2 << 20}, &o_), L8_ERR_OOM);
    ck_assert_ptr_null(o_);
    ck_assert_uint_eq(live_bytes(ctx), live);
    l8_tensor *v = NULL;
    L8_CK(l8_tensor_transpose(t, 0, 1, &v));
    href tref = href_transpose(&ref, 0, 1);
    check_view(v, &tref);
    href_free(&tref);
    l8_tensor_destroy(v);
    l8_tensor_destroy(t);
    href_free(&ref);
    ctx_finish(ctx);
}
END_TEST

Suite *l8_tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *views = tcase_create("views");
    tcase_add_test(views, test_view_basics);
    tcase_add_test(views, test_view_chains);
    tcase_add_test(views, test_reshape_strided);
    tcase_add_test(views, test_scalar);
    tcase_add_test(views, test_refcounts);
    tcase_add_test(views, test_data_pointer);
    TCase *copies = tcase_create("copies");
    tcase_add_test(copies, test_contiguous_every_dtype);
    tcase_add_test(copies, test_copy_between_views);
    tcase_add_test(copies, test_copy_streams);
    TCase *meta = tcase_create("fp8_meta");
    tcase_add_test(meta, test_fp8_meta);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_errors_create);
    tcase_add_test(errors, test_errors_from_storage);
    tcase_add_test(errors, test_errors_views);
    tcase_add_test(errors, test_errors_copy);
    tcase_add_test(errors, test_fault_injection);
    tcase_add_test(errors, test_memory_limit);
    TCase *all[] = {views, copies, meta, errors};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        tcase_set_tags(all[i], "host");
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    return s;
}
