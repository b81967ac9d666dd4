/* tensor.c - refcounted storages, FP8 scaling metadata and tensor views.
 *
 * Objects:
 *   l8_storage   one allocation from the context's caching allocator and the
 *                stream it was allocated on; refcounted with C11 atomics. The
 *                last release frees the block (stream-ordered).
 *   l8_fp8_meta  a 48-byte storage of three f32 scalars, scale at byte 0,
 *                scale_inv at 16, amax at 32, each on its own 16-byte
 *                boundary (cuBLASLt takes FP8 scale and amax pointers only
 *                16-byte aligned); its own count, shared by every view of an
 *                FP8 tensor.
 *   l8_tensor    a heap view {storage, byte offset, dtype, shape, element
 *                strides, meta}; owned by the caller.
 *
 * Invariants, established when a tensor is made and kept by every view op:
 *   - a tensor holds one reference on its storage and, when set, on its meta;
 *     only FP8 tensors carry meta;
 *   - 0 <= ndim <= 4, shape[d] >= 0, strides[d] >= 0, and the offset is a
 *     multiple of the dtype size;
 *   - offset + extent <= storage bytes, where extent is the bytes from element
 *     0 to one past the farthest element the view can reach (0 for an empty
 *     view): every element a view names lies inside its storage;
 *   - the product of max(shape[d], 1) times the dtype size fits in int64, so
 *     numel, nbytes and contiguous strides never overflow.
 *   - no data pointer is cached: l8_tensor_data resolves storage pointer +
 *     offset on every call, so when a storage moves (offload) its views follow.
 *
 * Errors: caller mistakes are L8_ERR_INVALID_ARG with a sentence naming the
 * call and the offending value. Every check runs before anything is
 * allocated or retained, so a failing call changes no object and leaks
 * nothing; out-parameters are set to NULL first.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/tensor.h"
#include "runtime/internal.h"
#include "alloc/trace.h"

struct l8_storage {
    atomic_int refs;
    atomic_int resident;          /* 1: never offloaded (parameters) */
    l8_ctx *ctx;
    l8_stream *stream;            /* allocation stream: the block lives on its free list */
    size_t bytes;
    /* Where the bytes are, read and written as one word so a reader never
     * sees a pointer of one state with another state: the device block (at
     * least 512-B aligned, NULL when there is none) | state << 1 | readable.
     * readable: l8_storage_data may hand the block out (DEVICE, or IN_FLIGHT
     * to the host: the device bytes are still valid). Offload (offload.c)
     * moves it through l8i_storage_set. */
    _Atomic uintptr_t where;
};

#define WHERE_PTR(w) ((void *)((w) & ~(uintptr_t)7))
#define WHERE_STATE(w) ((l8_storage_state)(((w) >> 1) & 3))
#define WHERE_READABLE(w) ((int)((w) & 1))

static uintptr_t where_pack(void *ptr, l8_storage_state state, int readable)
{
    return (uintptr_t)ptr | ((uintptr_t)state << 1) | (readable ? 1u : 0u);
}

static void *sptr(const l8_storage *st)
{
    return WHERE_PTR(atomic_load_explicit(&((l8_storage *)st)->where, memory_order_acquire));
}

struct l8_fp8_meta {
    atomic_int refs;
    l8_storage *st;               /* (12,) f32: scale @0, scale_inv @4, amax @8 */
};

struct l8_tensor {
    l8_storage *st;               /* one reference held */
    size_t offset;                /* bytes into the storage */
    l8_dtype dt;
    int ndim;
    int64_t shape[L8_MAX_DIMS];
    int64_t strides[L8_MAX_DIMS]; /* elements */
    l8_fp8_meta *meta;            /* one reference held, or NULL */
};

/* A shape and its strides, checked and measured (see layout_make). */
typedef struct layout {
    int ndim;
    int64_t shape[L8_MAX_DIMS];
    int64_t strides[L8_MAX_DIMS];
    int64_t numel;
    int64_t extent;               /* bytes from element 0 past the farthest element; 0 if empty */
    size_t esize;                 /* bytes per element of the (valid) dtype: never 0 */
} layout;

/* ---- dtypes ---- */

static const struct { size_t size; const char *name; } k_dtypes[L8_DTYPE_COUNT] = {
    [L8_F32] = {4, "f32"},  [L8_BF16] = {2, "bf16"}, [L8_F16] = {2, "f16"},
    [L8_E4M3] = {1, "e4m3"}, [L8_E5M2] = {1, "e5m2"}, [L8_I32] = {4, "i32"},
    [L8_U8] = {1, "u8"},
};

/* The enum's underlying type may be unsigned: compare through unsigned so
 * negative values cast in by a caller are rejected too. */
static int dtype_valid(l8_dtype dt) { return (unsigned)dt < L8_DTYPE_COUNT; }

size_t l8_dtype_size(l8_dtype dt) { return dtype_valid(dt) ? k_dtypes[dt].size : 0; }
const char *l8_dtype_name(l8_dtype dt) { return dtype_valid(dt) ? k_dtypes[dt].name : "invalid"; }
int l8_dtype_is_fp8(l8_dtype dt) { return dt == L8_E4M3 || dt == L8_E5M2; }

/* ---- small helpers ---- */

static int mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static int add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }

/* "(2, 3, 4)" for messages; returned by value so it can sit in a printf call. */
typedef struct dims_str { char s[120]; } dims_str;

static dims_str fmt_dims(int ndim, const int64_t *v)
{
    dims_str out;
    size_t n = (size_t)snprintf(out.s, sizeof out.s, "(");
    for (int d = 0; d < ndim && v && n < sizeof out.s; d++)
        n += (size_t)snprintf(out.s + n, sizeof out.s - n, d ? ", %" PRId64 : "%" PRId64, v[d]);
    if (n < sizeof out.s) snprintf(out.s + n, sizeof out.s - n, ")");
    return out;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];   /* fits: layout invariant */
    return n;
}

/* Row-major dense, ignoring the strides of size-1 dimensions (they never
 * move the address); an empty layout is contiguous. */
static int dense(int ndim, const int64_t *shape, const int64_t *strides)
{
    if (numel_of(ndim, shape) == 0) return 1;
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != expect) return 0;
        expect *= shape[d];
    }
    return 1;
}

/* Check a caller's dtype, shape and strides (NULL: contiguous) and measure
 * them into *lo. fn names the public call in messages. */
static l8_status layout_make(const char *fn, l8_dtype dt, int ndim, const int64_t *shape,
                             const int64_t *strides, layout *lo)
{
    memset(lo, 0, sizeof *lo);
    if (!dtype_valid(dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dtype %d is not a valid l8_dtype", fn, (int)dt);
    if (ndim < 0 || ndim > L8_MAX_DIMS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: ndim %d is outside 0..%d", fn, ndim, L8_MAX_DIMS);
    if (ndim > 0 && !shape)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape is NULL for ndim %d", fn, ndim);
    int64_t esize = (int64_t)l8_dtype_size(dt), dense_elems = 1, bytes = 0;
    lo->ndim = ndim;
    lo->numel = 1;
    lo->esize = (size_t)esize;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dimension %d of shape %s has negative"
                           " size %" PRId64, fn, d, fmt_dims(ndim, shape).s, shape[d]);
        if (strides && strides[d] < 0)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dimension %d has negative stride %" PRId64
                           " (strides must be >= 0)", fn, d, strides[d]);
        /* Zero-size dims are counted as 1 so an empty tensor cannot carry a
         * shape whose contiguous strides overflow. */
        if (!mul_ok(dense_elems, shape[d] ? shape[d] : 1, &dense_elems))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s overflows int64 elements",
                           fn, fmt_dims(ndim, shape).s);
        lo->shape[d] = shape[d];
        lo->numel *= shape[d];
    }
    if (!mul_ok(dense_elems, esize, &bytes))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s of %s overflows int64 bytes",
                       fn, fmt_dims(ndim, shape).s, l8_dtype_name(dt));
    int64_t acc = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        lo->strides[d] = strides ? strides[d] : acc;
        acc *= shape[d] ? shape[d] : 1;                 /* <= dense_elems: fits */
    }
    if (lo->numel == 0) return L8_OK;                   /* reaches nothing: extent 0 */
    int64_t reach = 0, term = 0;
    for (int d = 0; d < ndim; d++)
        if (!mul_ok(shape[d] - 1, lo->strides[d], &term) || !add_ok(reach, term, &reach))
            goto overflow;
    if (!add_ok(reach, 1, &reach) || !mul_ok(reach, esize, &lo->extent)) goto overflow;
    return L8_OK;
overflow:
    return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s with strides %s reaches beyond int64 bytes",
                   fn, fmt_dims(ndim, shape).s, fmt_dims(ndim, strides).s);
}

static l8_status check_dim(const char *fn, const l8_tensor *t, int d)
{
    if (d < 0 || d >= t->ndim)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dimension %d is out of range for a"
                       " %d-dimensional tensor", fn, d, t->ndim);
    return L8_OK;
}

/* NULL means the context's compute stream; any other stream must be ctx's. */
/* ---- storages ---- */

l8_status l8_storage_create(l8_ctx *ctx, size_t bytes, l8_stream *s, l8_storage **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    L8_CHECK(l8i_resolve_stream("l8_storage_create", ctx, &s));
    /* Byte offsets and extents are int64 throughout. */
    if (bytes > (size_t)INT64_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_storage_create: %zu bytes exceeds INT64_MAX", bytes);
    l8_storage *st = calloc(1, sizeof *st);
    if (!st) return L8_FAIL(L8_ERR_OOM, "l8_storage_create: out of host memory for a storage");
    void *ptr = NULL;
    l8_status ret = l8_ctx_malloc(ctx, bytes, s, &ptr);
    if (ret != L8_OK) {
        free(st);
        return ret;
    }
    if ((uintptr_t)ptr & 7) {     /* the allocator promises 512 B: the state bits need 8 */
        if (l8_ctx_free(ctx, ptr) != L8_OK) { /* in the last error; reporting the first */ }
        free(st);
        return L8_FAIL(L8_ERR_INTERNAL, "l8_storage_create: block %p is not 8-byte aligned", ptr);
    }
    atomic_init(&st->refs, 1);
    atomic_init(&st->resident, 0);
    st->ctx = ctx;
    st->stream = s;
    st->bytes = bytes;
    atomic_init(&st->where, where_pack(ptr, L8_STORAGE_DEVICE, 1));
    *out = st;
    return L8_OK;
}

l8_status l8_storage_create_tagged(l8_ctx *ctx, size_t bytes, l8_stream *s, const char *tag,
                                   l8_storage **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_CHECK(l8_tag_push(tag));
    l8_status st = l8_storage_create(ctx, bytes, s, out);
    l8_status pop = l8_tag_pop();
    if (st == L8_OK && pop != L8_OK) {
        l8_storage_release(*out);
        *out = NULL;
        st = pop;
    }
    return st;
}

void l8_storage_retain(l8_storage *st)
{
    if (st) atomic_fetch_add_explicit(&st->refs, 1, memory_order_relaxed);
}

void l8_storage_release(l8_storage *st)
{
    if (!st) return;
    /* acq_rel: the thread that frees must see every other holder's writes. */
    if (atomic_fetch_sub_explicit(&st->refs, 1, memory_order_acq_rel) != 1) return;
    /* The allocator frees stream-ordered, so work already enqueued on the
     * allocation stream (or recorded streams) finishes first. A failure here
     * means the allocator no longer knows the block (an internal fault); it is
     * in the last error and a void release can do nothing more. */
    void *ptr = sptr(st);
    if (ptr && l8_ctx_free(st->ctx, ptr) != L8_OK) {
        /* recorded in l8_last_error() */
    }
    free(st);
}

size_t l8_storage_bytes(const l8_storage *st) { return st ? st->bytes : 0; }
int l8_storage_refcount(const l8_storage *st) { return st ? atomic_load(&st->refs) : 0; }
l8_ctx *l8_storage_ctx(const l8_storage *st) { return st ? st->ctx : NULL; }
l8_storage_state l8_storage_state_of(const l8_storage *st)
{
    return st ? WHERE_STATE(atomic_load_explicit(&((l8_storage *)st)->where,
                                                 memory_order_acquire)) : L8_STORAGE_DEVICE;
}

void l8_storage_set_resident(l8_storage *st, int resident)
{
    if (st) atomic_store(&st->resident, resident ? 1 : 0);
}

int l8_storage_is_resident(const l8_storage *st)
{
    return st ? atomic_load(&((l8_storage *)st)->resident) : 0;
}

static const char *k_state_names[] = { "on the device", "offloaded to the host",
                                       "in flight between host and device" };

l8_status l8_storage_data(const l8_storage *st, void **ptr)
{
    L8_ARG(st != NULL && ptr != NULL);
    uintptr_t w = atomic_load_explicit(&((l8_storage *)st)->where, memory_order_acquire);
    if (!WHERE_READABLE(w))
        return L8_FAIL(L8_ERR_STATE, "storage of %zu bytes is not on the device: it is %s"
                       " (restore it first, e.g. l8_offload_restore)", st->bytes,
                       k_state_names[WHERE_STATE(w)]);
    *ptr = WHERE_PTR(w);
    return L8_OK;
}

/* ---- residency, for offload.c (runtime/internal.h) ---- */

l8_stream *l8i_storage_stream(const l8_storage *st) { return st->stream; }

void *l8i_storage_block(const l8_storage *st) { return sptr(st); }

void l8i_storage_set(l8_storage *st, l8_storage_state state, void *block, int readable)
{
    atomic_store_explicit(&st->where, where_pack(block, state, readable), memory_order_release);
}

l8_status l8_storage_record_stream(l8_storage *st, l8_stream *s)
{
    L8_ARG(st != NULL && s != NULL);
    if (l8_stream_ctx(s) != st->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG,
                       "l8_storage_record_stream: the stream belongs to another context");
    uintptr_t w = atomic_load_explicit(&st->where, memory_order_acquire);
    if (!WHERE_READABLE(w))
        return L8_FAIL(L8_ERR_STATE, "l8_storage_record_stream: storage is not on the device (%s)",
                       k_state_names[WHERE_STATE(w)]);
    /* Nothing to protect for an empty storage; the allocation stream is
     * already ordered with the free. */
    if (!WHERE_PTR(w) || l8_stream_handle(s) == l8_stream_handle(st->stream)) return L8_OK;
    return l8_alloc_record_stream(l8_ctx_allocator(st->ctx), WHERE_PTR(w), l8_stream_handle(s));
}

l8_status l8i_tensors_use(l8_stream *s, const l8_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        L8_CHECK(l8_storage_record_stream(t[i]->st, s));
        if (t[i]->meta) L8_CHECK(l8_storage_record_stream(t[i]->meta->st, s));
    }
    return L8_OK;
}

/* ---- FP8 metadata ---- */

/* Float index of scale, scale_inv and amax in the meta storage: 16 bytes
 * apart, so each is 16-byte aligned (storages are at least 512-B aligned). */
#define META_STRIDE 4
#define META_FLOATS (3 * META_STRIDE)

/* scale, scale_inv, amax (v[0..2]) -> the meta, through the compute stream,
 * then wait: v is usually the caller's stack, which must stay valid until the
 * copy has read it. */
static l8_status meta_write(l8_fp8_meta *m, const float v[3])
{
    float blk[META_FLOATS] = {0};
    for (int i = 0; i < 3; i++) blk[i * META_STRIDE] = v[i];
    l8_stream *s = l8_ctx_stream(m->st->ctx, L8_STREAM_COMPUTE);
    L8_CHECK(l8_memcpy_htod(s, sptr(m->st), blk, sizeof blk));
    return l8_stream_synchronize(s);
}

l8_status l8_fp8_meta_create(l8_ctx *ctx, l8_fp8_meta **out)
{
    static const float init[3] = {1.0f, 1.0f, 0.0f};   /* scale, scale_inv, amax */
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_status ret = L8_OK;
    l8_fp8_meta *m = calloc(1, sizeof *m);
    if (!m) return L8_FAIL(L8_ERR_OOM, "l8_fp8_meta_create: out of host memory");
    L8_TRY(ret, l8_storage_create(ctx, META_FLOATS * sizeof(float), NULL, &m->st), fail);
    l8_storage_set_resident(m->st, 1);      /* GEMMs hold its pointers: never offloaded */
    L8_TRY(ret, meta_write(m, init), fail);
    atomic_init(&m->refs, 1);
    *out = m;
    return L8_OK;
fail:
    l8_storage_release(m->st);
    free(m);
    return ret;
}

void l8_fp8_meta_retain(l8_fp8_meta *m)
{
    if (m) atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void l8_fp8_meta_release(l8_fp8_meta *m)
{
    if (!m) return;
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
    l8_storage_release(m->st);
    free(m);
}

/* Meta storages are never offloaded, so the pointer is stable. */
float *l8_fp8_meta_scale(const l8_fp8_meta *m) { return m ? (float *)sptr(m->st) : NULL; }
float *l8_fp8_meta_scale_inv(const l8_fp8_meta *m)
{
    return m ? (float *)sptr(m->st) + META_STRIDE : NULL;
}
float *l8_fp8_meta_amax(const l8_fp8_meta *m)
{
    return m ? (float *)sptr(m->st) + 2 * META_STRIDE : NULL;
}

l8_status l8_fp8_meta_get(l8_fp8_meta *m, float *scale, float *scale_inv, float *amax)
{
    L8_ARG(m != NULL);
    float v[META_FLOATS];
    l8_stream *s = l8_ctx_stream(m->st->ctx, L8_STREAM_COMPUTE);
    L8_CHECK(l8_memcpy_dtoh(s, v, sptr(m->st), sizeof v));
    L8_CHECK(l8_stream_synchronize(s));
    if (scale) *scale = v[0];
    if (scale_inv) *scale_inv = v[META_STRIDE];
    if (amax) *amax = v[2 * META_STRIDE];
    return L8_OK;
}

l8_status l8_fp8_meta_set(l8_fp8_meta *m, float scale, float scale_inv, float amax)
{
    L8_ARG(m != NULL);
    const float v[3] = {scale, scale_inv, amax};
    return meta_write(m, v);
}

/* ---- tensors ---- */

/* A tensor over st at offset with layout lo; retains meta and takes over the
 * caller's reference to st (kept by the caller on failure). */
static l8_status tensor_adopt(l8_storage *st, size_t offset, l8_dtype dt, const layout *lo,
                              l8_fp8_meta *meta, l8_tensor **out)
{
    l8_tensor *t = calloc(1, sizeof *t);
    if (!t) return L8_FAIL(L8_ERR_OOM, "out of host memory for a tensor");
    t->st = st;
    t->offset = offset;
    t->dt = dt;
    t->ndim = lo->ndim;
    memcpy(t->shape, lo->shape, sizeof t->shape);
    memcpy(t->strides, lo->strides, sizeof t->strides);
    t->meta = meta;
    l8_fp8_meta_retain(meta);
    *out = t;
    return L8_OK;
}

/* A tensor over st at offset with layout lo; retains st and meta. */
static l8_status tensor_new(l8_storage *st, size_t offset, l8_dtype dt, const layout *lo,
                            l8_fp8_meta *meta, l8_tensor **out)
{
    L8_CHECK(tensor_adopt(st, offset, dt, lo, meta, out));
    l8_storage_retain(st);
    return L8_OK;
}

/* t's shape and strides, the starting point of a view (extent unused). */
static layout layout_of(const l8_tensor *t)
{
    layout lo;
    memset(&lo, 0, sizeof lo);
    lo.ndim = t->ndim;
    memcpy(lo.shape, t->shape, sizeof lo.shape);
    memcpy(lo.strides, t->strides, sizeof lo.strides);
    lo.numel = numel_of(t->ndim, t->shape);
    return lo;
}

/* A new contiguous tensor allocated for use on s (NULL: compute stream). */
static l8_status tensor_empty_on(const char *fn, l8_ctx *ctx, l8_stream *s, l8_dtype dt, int ndim,
                                 const int64_t *shape, l8_tensor **out)
{
    layout lo;
    L8_CHECK(layout_make(fn, dt, ndim, shape, NULL, &lo));
    l8_storage *st = NULL;
    L8_CHECK(l8_storage_create(ctx, (size_t)lo.numel * l8_dtype_size(dt), s, &st));
    /* the tensor takes over the creation's reference; without a tensor it goes */
    l8_status ret = tensor_adopt(st, 0, dt, &lo, NULL, out);
    if (ret != L8_OK) l8_storage_release(st);
    return ret;
}

l8_status l8_tensor_empty(l8_ctx *ctx, l8_dtype dt, int ndim, const int64_t *shape, l8_tensor **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    return tensor_empty_on("l8_tensor_empty", ctx, NULL, dt, ndim, shape, out);
}

l8_status l8_tensor_from_storage(l8_storage *st, size_t byte_offset, l8_dtype dt, int ndim,
                                 const int64_t *shape, const int64_t *strides, l8_tensor **out)
{
    const char *fn = "l8_tensor_from_storage";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(st != NULL);
    layout lo;
    L8_CHECK(layout_make(fn, dt, ndim, shape, strides, &lo));
    size_t esize = lo.esize;
    if (byte_offset % esize)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: byte offset %zu is not a multiple of the %s"
                       " size %zu", fn, byte_offset, l8_dtype_name(dt), esize);
    /* An empty view reaches nothing, but its offset must still lie inside. */
    if (byte_offset > st->bytes)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: byte offset %zu is past the end of the %zu-byte"
                       " storage", fn, byte_offset, st->bytes);
    if ((uint64_t)lo.extent > st->bytes - byte_offset)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a %s view of shape %s with strides %s needs"
                       " bytes [%zu, %zu) but the storage holds %zu", fn, l8_dtype_name(dt),
                       fmt_dims(ndim, lo.shape).s, fmt_dims(ndim, lo.strides).s, byte_offset,
                       byte_offset + (size_t)lo.extent, st->bytes);
    return tensor_new(st, byte_offset, dt, &lo, NULL, out);
}

void l8_tensor_destroy(l8_tensor *t)
{
    if (!t) return;
    l8_fp8_meta_release(t->meta);
    l8_storage_release(t->st);
    free(t);
}

/* NULL t: an invalid dtype (l8_dtype_size gives 0). */
l8_dtype l8_tensor_dtype(const l8_tensor *t) { return t ? t->dt : (l8_dtype)L8_DTYPE_COUNT; }
int l8_tensor_ndim(const l8_tensor *t) { return t ? t->ndim : 0; }
int64_t l8_tensor_dim(const l8_tensor *t, int d)
{
    return t && d >= 0 && d < t->ndim ? t->shape[d] : -1;
}
int64_t l8_tensor_stride(const l8_tensor *t, int d)
{
    return t && d >= 0 && d < t->ndim ? t->strides[d] : -1;
}
int64_t l8_tensor_numel(const l8_tensor *t) { return t ? numel_of(t->ndim, t->shape) : 0; }
size_t l8_tensor_nbytes(const l8_tensor *t)
{
    return t ? (size_t)numel_of(t->ndim, t->shape) * l8_dtype_size(t->dt) : 0;
}
size_t l8_tensor_offset(const l8_tensor *t) { return t ? t->offset : 0; }
int l8_tensor_is_contiguous(const l8_tensor *t)
{
    return t ? dense(t->ndim, t->shape, t->strides) : 0;
}
l8_storage *l8_tensor_storage(const l8_tensor *t) { return t ? t->st : NULL; }
l8_ctx *l8_tensor_ctx(const l8_tensor *t) { return t ? t->st->ctx : NULL; }
l8_fp8_meta *l8_tensor_fp8_meta(const l8_tensor *t) { return t ? t->meta : NULL; }

l8_status l8_tensor_data(const l8_tensor *t, void **ptr)
{
    L8_ARG(t != NULL && ptr != NULL);
    void *base = NULL;
    L8_CHECK(l8_storage_data(t->st, &base));
    /* base is NULL only for a 0-byte storage, where offset is 0 too. */
    *ptr = base ? (char *)base + t->offset : NULL;
    return L8_OK;
}

l8_status l8_tensor_set_fp8_meta(l8_tensor *t, l8_fp8_meta *m)
{
    L8_ARG(t != NULL);
    if (!l8_dtype_is_fp8(t->dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_tensor_set_fp8_meta: the tensor is %s, not e4m3"
                       " or e5m2", l8_dtype_name(t->dt));
    if (m && m->st->ctx != t->st->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG,
                       "l8_tensor_set_fp8_meta: the metadata belongs to another context");
    l8_fp8_meta_retain(m);        /* before the release: m may be t->meta already */
    l8_fp8_meta_release(t->meta);
    t->meta = m;
    return L8_OK;
}

/* ---- views ---- */

/* Dimension d of t restricted to `len` elements starting at `start`, with
 * element stride `stride`. An empty result keeps t's offset, so the
 * offset <= storage bytes invariant holds even for start == size. */
static l8_status view_dim(const l8_tensor *t, int d, int64_t start, int64_t len, int64_t stride,
                          l8_tensor **out)
{
    layout lo = layout_of(t);
    lo.shape[d] = len;
    lo.strides[d] = stride;
    size_t offset = t->offset;
    if (numel_of(lo.ndim, lo.shape) > 0)
        /* start <= size - 1 and the parent is non-empty, so start * stride
         * is inside the parent's extent: no overflow. */
        offset += (size_t)(start * t->strides[d]) * l8_dtype_size(t->dt);
    return tensor_new(t->st, offset, t->dt, &lo, t->meta, out);
}

l8_status l8_tensor_narrow(const l8_tensor *t, int d, int64_t start, int64_t len, l8_tensor **out)
{
    const char *fn = "l8_tensor_narrow";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(t != NULL);
    L8_CHECK(check_dim(fn, t, d));
    int64_t size = t->shape[d];
    if (start < 0 || start > size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: start %" PRId64 " is outside [0, %" PRId64
                       "] for dimension %d of size %" PRId64, fn, start, size, d, size);
    if (len < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: length %" PRId64 " is negative", fn, len);
    if (len > size - start)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: start %" PRId64 " + length %" PRId64
                       " exceeds dimension %d of size %" PRId64, fn, start, len, d, size);
    return view_dim(t, d, start, len, t->strides[d], out);
}

l8_status l8_tensor_slice(const l8_tensor *t, int d, int64_t start, int64_t stop, int64_t step,
                          l8_tensor **out)
{
    const char *fn = "l8_tensor_slice";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(t != NULL);
    L8_CHECK(check_dim(fn, t, d));
    int64_t size = t->shape[d];
    if (step < 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: step %" PRId64 " must be >= 1", fn, step);
    if (start < 0 || start > size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: start %" PRId64 " is outside [0, %" PRId64
                       "] for dimension %d of size %" PRId64, fn, start, size, d, size);
    if (stop < start || stop > size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: stop %" PRId64 " is outside [start %" PRId64
                       ", %" PRId64 "] for dimension %d of size %" PRId64,
                       fn, stop, start, size, d, size);
    /* Written so that a huge step cannot overflow. */
    int64_t len = stop == start ? 0 : (stop - start - 1) / step + 1;
    int64_t stride = t->strides[d];
    /* With two or more elements step < size, so in a non-empty parent
     * stride * step lies inside its extent. It can overflow only in an empty
     * parent, whose strides never address memory: keep the stride then. */
    if (len > 1 && !mul_ok(t->strides[d], step, &stride)) stride = t->strides[d];
    return view_dim(t, d, start, len, stride, out);
}

l8_status l8_tensor_transpose(const l8_tensor *t, int d0, int d1, l8_tensor **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(t != NULL);
    L8_CHECK(check_dim("l8_tensor_transpose", t, d0));
    L8_CHECK(check_dim("l8_tensor_transpose", t, d1));
    layout lo = layout_of(t);
    lo.shape[d0] = t->shape[d1];
    lo.shape[d1] = t->shape[d0];
    lo.strides[d0] = t->strides[d1];
    lo.strides[d1] = t->strides[d0];
    return tensor_new(t->st, t->offset, t->dt, &lo, t->meta, out);
}

/* Resolve one -1 in a requested shape so it holds numel elements. */
static l8_status infer_shape(const char *fn, int64_t numel, int ndim, const int64_t *shape,
                             int64_t *res)
{
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        res[d] = shape[d];
        if (shape[d] == -1) {
            if (infer >= 0)
                return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s has -1 in dimensions %d and %d;"
                               " only one may be inferred", fn, fmt_dims(ndim, shape).s, infer, d);
            infer = d;
        } else if (shape[d] < 0) {
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dimension %d of shape %s has negative"
                           " size %" PRId64, fn, d, fmt_dims(ndim, shape).s, shape[d]);
        } else if (!mul_ok(known, shape[d], &known)) {
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s overflows int64 elements",
                           fn, fmt_dims(ndim, shape).s);
        }
    }
    if (infer < 0) {
        if (known != numel)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s holds %" PRId64
                           " elements but the tensor has %" PRId64, fn, fmt_dims(ndim, shape).s,
                           known, numel);
        return L8_OK;
    }
    if (known == 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the -1 in shape %s is ambiguous: the other"
                       " dimensions hold 0 elements", fn, fmt_dims(ndim, shape).s);
    if (numel % known)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s cannot hold %" PRId64 " elements"
                       " (not a multiple of %" PRId64 ")", fn, fmt_dims(ndim, shape).s, numel,
                       known);
    res[infer] = numel / known;
    return L8_OK;
}

/* Strides that lay the new shape over the old non-empty layout, if any
 * (PyTorch's view rule). The old dims are cut, from the innermost, into
 * chunks whose dims are contiguous with one another (stride[d-1] ==
 * size[d] * stride[d]; size-1 dims never cut). Each chunk is addressed like
 * a dense block with base stride = its innermost stride, so the new dims
 * can be laid over it as long as every chunk boundary falls on a boundary
 * between new dims. Returns 1 and fills ns, or 0 if not viewable. */
static int view_strides(int ond, const int64_t *os, const int64_t *ostr, int nnd,
                        const int64_t *ns_shape, int64_t *ns)
{
    if (ond == 0) {               /* a scalar: the new shape is all ones */
        for (int d = 0; d < nnd; d++) ns[d] = 1;
        return 1;
    }
    int vd = nnd - 1;
    int64_t base = ostr[ond - 1], tnumel = 1, vnumel = 1, next = 0;
    for (int td = ond - 1; td >= 0; td--) {
        tnumel *= os[td];
        int cut = td == 0 || (os[td - 1] != 1 &&
                              (!mul_ok(tnumel, base, &next) || ostr[td - 1] != next));
        if (!cut) continue;
        while (vd >= 0 && (vnumel < tnumel || ns_shape[vd] == 1)) {
            if (!mul_ok(vnumel, base, &ns[vd])) return 0;
            vnumel *= ns_shape[vd];   /* <= numel: the counts match overall */
            vd--;
        }
        if (vnumel != tnumel) return 0;
        if (td > 0) {
            base = ostr[td - 1];
            tnumel = vnumel = 1;
        }
    }
    return vd == -1;
}

l8_status l8_tensor_reshape(const l8_tensor *t, int ndim, const int64_t *shape, l8_tensor **out)
{
    const char *fn = "l8_tensor_reshape";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(t != NULL);
    if (ndim < 0 || ndim > L8_MAX_DIMS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: ndim %d is outside 0..%d", fn, ndim, L8_MAX_DIMS);
    if (ndim > 0 && !shape)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape is NULL for ndim %d", fn, ndim);
    int64_t numel = numel_of(t->ndim, t->shape), req[L8_MAX_DIMS] = {0};
    L8_CHECK(infer_shape(fn, numel, ndim, shape, req));
    layout lo;                    /* the new shape, checked, with contiguous strides */
    L8_CHECK(layout_make(fn, t->dt, ndim, req, NULL, &lo));
    if (numel == 0) {
        /* Nothing is addressed: keep t's strides for the same shape, else
         * contiguous ones (as PyTorch does). */
        if (ndim == t->ndim && !memcmp(req, t->shape, sizeof(int64_t) * (size_t)ndim))
            memcpy(lo.strides, t->strides, sizeof lo.strides);
    } else if (!view_strides(t->ndim, t->shape, t->strides, ndim, req, lo.strides)) {
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: shape %s cannot view a tensor of shape %s with"
                       " strides %s; make it contiguous first", fn, fmt_dims(ndim, req).s,
                       fmt_dims(t->ndim, t->shape).s, fmt_dims(t->ndim, t->strides).s);
    }
    return tensor_new(t->st, t->offset, t->dt, &lo, t->meta, out);
}

/* ---- copies ---- */

/* Same context, dtype and shape; fn names the call. */
static l8_status check_alike(const char *fn, const l8_tensor *dst, const l8_tensor *src)
{
    if (dst->st->ctx != src->st->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst and src belong to different contexts", fn);
    if (dst->dt != src->dt)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst is %s but src is %s (no conversion here)", fn,
                       l8_dtype_name(dst->dt), l8_dtype_name(src->dt));
    if (dst->ndim != src->ndim ||
        memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->ndim))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst shape %s differs from src shape %s", fn,
                       fmt_dims(dst->ndim, dst->shape).s, fmt_dims(src->ndim, src->shape).s);
    return L8_OK;
}

/* Bytes from element 0 to one past the farthest element; 0 when empty.
 * No overflow: the layout invariant bounds it by the storage size. */
static size_t extent_of(const l8_tensor *t)
{
    if (numel_of(t->ndim, t->shape) == 0) return 0;
    int64_t reach = 0;
    for (int d = 0; d < t->ndim; d++) reach += (t->shape[d] - 1) * t->strides[d];
    return (size_t)(reach + 1) * l8_dtype_size(t->dt);
}

/* Conservative: non-empty views of one storage whose byte ranges
 * [offset, offset + extent) intersect count as overlapping, even when their
 * elements interleave without touching. */
static int overlaps(const l8_tensor *a, const l8_tensor *b)
{
    if (a->st != b->st) return 0;
    size_t ea = extent_of(a), eb = extent_of(b);
    if (ea == 0 || eb == 0) return 0;
    return a->offset < b->offset + eb && b->offset < a->offset + ea;
}

l8_status l8_tensor_copy(l8_tensor *dst, const l8_tensor *src, l8_stream *s)
{
    const char *fn = "l8_tensor_copy";
    L8_ARG(dst != NULL && src != NULL);
    L8_CHECK(check_alike(fn, dst, src));
    L8_CHECK(l8i_resolve_stream(fn, dst->st->ctx, &s));
    /* A broadcast dst would write several elements to one address. */
    for (int d = 0; d < dst->ndim; d++)
        if (dst->shape[d] > 1 && dst->strides[d] == 0)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst dimension %d of size %" PRId64
                           " has stride 0 (a broadcast view cannot be written)", fn, d,
                           dst->shape[d]);
    if (overlaps(dst, src))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dst bytes [%zu, %zu) and src bytes [%zu, %zu) of"
                       " one storage overlap", fn, dst->offset, dst->offset + extent_of(dst),
                       src->offset, src->offset + extent_of(src));
    if (numel_of(dst->ndim, dst->shape) == 0) return L8_OK;
    void *dp = NULL, *sp = NULL;
    L8_CHECK(l8_tensor_data(dst, &dp));
    L8_CHECK(l8_tensor_data(src, &sp));
    /* Work on s will touch both storages: the allocator must not reuse
     * either block before it completes. */
    L8_CHECK(l8_storage_record_stream(dst->st, s));
    L8_CHECK(l8_storage_record_stream(src->st, s));
    return l8i_copy_strided(s, dp, dst->strides, sp, src->strides, dst->shape, dst->ndim,
                            l8_dtype_size(dst->dt));
}

l8_status l8_tensor_contiguous(const l8_tensor *src, l8_stream *s, l8_tensor **out)
{
    const char *fn = "l8_tensor_contiguous";
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(src != NULL);
    L8_CHECK(l8i_resolve_stream(fn, src->st->ctx, &s));
    l8_tensor *t = NULL;
    l8_status ret = L8_OK;
    L8_TRY(ret, tensor_empty_on(fn, src->st->ctx, s, src->dt, src->ndim, src->shape, &t), fail);
    L8_TRY(ret, l8_tensor_copy(t, src, s), fail);
    t->meta = src->meta;          /* the copy shares its scale, scale_inv and amax */
    l8_fp8_meta_retain(t->meta);
    *out = t;
    return L8_OK;
fail:
    l8_tensor_destroy(t);
    return ret;
}

/* Host copies need a dense tensor and exactly its bytes. */
static l8_status check_host_copy(const char *fn, const l8_tensor *t, const void *host, size_t bytes)
{
    if (!dense(t->ndim, t->shape, t->strides))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the tensor of shape %s with strides %s is not"
                       " contiguous; use l8_tensor_contiguous first", fn,
                       fmt_dims(t->ndim, t->shape).s, fmt_dims(t->ndim, t->strides).s);
    size_t nbytes = l8_tensor_nbytes(t);
    if (bytes != nbytes)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %zu host bytes given, but the %s tensor of shape %s"
                       " holds %zu", fn, bytes, l8_dtype_name(t->dt),
                       fmt_dims(t->ndim, t->shape).s, nbytes);
    if (bytes && !host)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: host pointer is NULL for %zu bytes", fn, bytes);
    return L8_OK;
}

l8_status l8_tensor_copy_from_host(l8_tensor *dst, const void *host, size_t bytes, l8_stream *s)
{
    const char *fn = "l8_tensor_copy_from_host";
    L8_ARG(dst != NULL);
    L8_CHECK(check_host_copy(fn, dst, host, bytes));
    L8_CHECK(l8i_resolve_stream(fn, dst->st->ctx, &s));
    if (bytes == 0) return L8_OK;
    void *dp = NULL;
    L8_CHECK(l8_tensor_data(dst, &dp));
    L8_CHECK(l8_storage_record_stream(dst->st, s));
    return l8_memcpy_htod(s, dp, host, bytes);
}

l8_status l8_tensor_copy_to_host(const l8_tensor *src, void *host, size_t bytes, l8_stream *s)
{
    const char *fn = "l8_tensor_copy_to_host";
    L8_ARG(src != NULL);
    L8_CHECK(check_host_copy(fn, src, host, bytes));
    L8_CHECK(l8i_resolve_stream(fn, src->st->ctx, &s));
    if (bytes == 0) return L8_OK;
    void *sp = NULL;
    L8_CHECK(l8_tensor_data(src, &sp));
    L8_CHECK(l8_storage_record_stream(src->st, s));
    return l8_memcpy_dtoh(s, host, sp, bytes);
}

l8_status l8i_need_tensor(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx)
{
    if (!t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
    if (ctx && l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s belongs to another context", op, name);
    if (!l8_tensor_is_contiguous(t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is not contiguous (make it contiguous first)",
                       op, name);
    return L8_OK;
}
