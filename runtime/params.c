/* params.c - parameter groups: registration, the flat layout, views, the
 * grad-ready table, host-data helpers.
 *
 * Invariants:
 *  - before finalize: every param's offset is -1, no storage or view exists,
 *    `ready` is NULL. After: mst/gst hold buffer_numel elements (f32 and the
 *    grad dtype), every param has both views, `ready` has one counter per
 *    param. finalize is all-or-nothing.
 *  - names are unique; `index` is an open-addressing hash table (linear
 *    probing, capacity a power of two >= 2 x count) of id + 1, 0 = empty.
 *  - `padded` is the running sum of round_up(numel, ALIGN) over all
 *    registered params and never exceeds PADDED_MAX, so every byte offset
 *    into every buffer fits int64 and size_t.
 *  - `deps` lists the objects built over the group that are still alive (a
 *    DDP reducer, an optimizer, a layer; l8i_params_attach);
 *    l8_params_destroy tells each one before it frees anything, so none
 *    keeps a dangling pointer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/params.h"
#include "runtime/fp8.h"
#include "runtime/internal.h"

#define ALIGN ((int64_t)L8_PARAMS_ALIGN_ELEMS)
/* Largest buffer length: 2^60 elements keeps 8-byte elements within int64. */
#define PADDED_MAX ((int64_t)1 << 60)

typedef struct param {
    char *name;
    int ndim;
    int64_t shape[L8_MAX_DIMS];
    int64_t numel;
    int64_t offset;               /* elements; -1 before finalize */
    l8_tensor *master, *grad;     /* views; NULL before finalize */
} param;

struct l8_params {
    l8_ctx *ctx;
    l8_dtype gdt;
    param *p;
    int n, cap;
    int *index;                   /* hash table of id + 1 */
    size_t icap;
    int64_t numel_total, padded;
    int64_t pad_to;               /* the buffer length's multiple */
    int64_t total;                /* buffer elements after finalize: padded rounded up to pad_to */
    int finalized;
    l8_storage *mst, *gst;        /* master f32, main_grad gdt */
    l8_tensor *mflat, *gflat;
    int *ready;                   /* reports per param since the last reset */
    l8_grad_ready_fn cb;
    void *cb_arg;
    l8i_deps deps;                /* l8i_params_attach */
};

static int64_t round_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;           /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Slot of name in the table: its id, or -1 with *slot at the empty place. */
static int index_lookup(const l8_params *g, const char *name, size_t *slot)
{
    if (g->icap == 0) {
        if (slot) *slot = 0;
        return -1;
    }
    size_t mask = g->icap - 1, i = (size_t)name_hash(name) & mask;
    for (;; i = (i + 1) & mask) {
        int e = g->index[i];
        if (e == 0) {
            if (slot) *slot = i;
            return -1;
        }
        if (!strcmp(g->p[e - 1].name, name))
            return e - 1;
    }
}

/* Make room for one more name: capacity >= 2 x (n + 1). */
static l8_status index_reserve(l8_params *g)
{
    size_t want = 2 * ((size_t)g->n + 1);
    if (g->icap >= want)
        return L8_OK;
    size_t cap = g->icap ? g->icap : 16;
    while (cap < want)
        cap *= 2;
    int *t = calloc(cap, sizeof *t);
    if (!t)
        return L8_FAIL(L8_ERR_OOM, "l8_params_add: out of host memory for the name index");
    for (int id = 0; id < g->n; id++) {
        size_t i = (size_t)name_hash(g->p[id].name) & (cap - 1);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = id + 1;
    }
    free(g->index);
    g->index = t;
    g->icap = cap;
    return L8_OK;
}

static const param *get_param(const l8_params *g, int id)
{
    return (g && id >= 0 && id < g->n) ? &g->p[id] : NULL;
}

/* ------------------------------------------------------------------------ */
/* create / destroy / add                                                    */

void l8_params_config_init(l8_params_config *cfg)
{
    if (cfg) *cfg = (l8_params_config)L8_PARAMS_CONFIG_INIT;
}

l8_status l8_params_create(l8_ctx *ctx, const l8_params_config *cfg, l8_params **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_params_config c = L8_PARAMS_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_params_create", "L8_PARAMS_CONFIG_INIT");
    if (c.grad_dtype != L8_F32 && c.grad_dtype != L8_BF16)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_params_create: grad dtype %s is not supported "
                       "(f32 or bf16)", l8_dtype_name(c.grad_dtype));
    if (c.pad_to < 0 || c.pad_to % ALIGN || c.pad_to > ((int64_t)1 << 30))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_params_create: pad_to %lld is not a multiple of %lld "
                       "(0 for the default)", (long long)c.pad_to, (long long)ALIGN);
    l8_params *g = calloc(1, sizeof *g);
    if (!g)
        return L8_FAIL(L8_ERR_OOM, "l8_params_create: out of host memory");
    g->ctx = ctx;
    g->gdt = c.grad_dtype;
    g->pad_to = c.pad_to ? c.pad_to : ALIGN;
    *out = g;
    return L8_OK;
}

/* Drop everything finalize made (also its partial work on failure). */
static void unfinalize(l8_params *g)
{
    for (int i = 0; i < g->n; i++) {
        l8_tensor_destroy(g->p[i].master);
        l8_tensor_destroy(g->p[i].grad);
        g->p[i].master = g->p[i].grad = NULL;
        g->p[i].offset = -1;
    }
    l8_tensor_destroy(g->mflat);
    l8_tensor_destroy(g->gflat);
    g->mflat = g->gflat = NULL;
    l8_storage_release(g->mst);
    l8_storage_release(g->gst);
    g->mst = g->gst = NULL;
    free(g->ready);
    g->ready = NULL;
    g->finalized = 0;
}

void l8_params_destroy(l8_params *g)
{
    if (!g)
        return;
    l8i_deps_notify(&g->deps);
    unfinalize(g);
    for (int i = 0; i < g->n; i++)
        free(g->p[i].name);
    free(g->p);
    free(g->index);
    free(g);
}

l8_status l8_params_add(l8_params *g, const char *name, int ndim, const int64_t *shape, int *id)
{
    static const char *op = "l8_params_add";
    if (id)
        *id = -1;
    L8_ARG(g != NULL);
    if (g->finalized)
        return L8_FAIL(L8_ERR_STATE, "%s: the group is finalized; register every parameter "
                       "before l8_params_finalize", op);
    if (!name || !name[0])
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the name is NULL or empty", op);
    size_t len = strlen(name);
    if (len > L8_PARAMS_NAME_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: name of %zu bytes is longer than %d", op, len,
                       L8_PARAMS_NAME_MAX);
    if (ndim < 0 || ndim > L8_MAX_DIMS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\" has ndim %d, wanted 0..%d", op, name, ndim,
                       L8_MAX_DIMS);
    if (ndim > 0 && !shape)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\": shape is NULL", op, name);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\" has dim %d = %lld, wanted >= 1", op,
                           name, d, (long long)shape[d]);
        if (__builtin_mul_overflow(numel, shape[d], &numel) || numel > PADDED_MAX)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\" has more than 2^60 elements", op,
                           name);
    }
    if (g->padded + round_up(numel) > PADDED_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\" takes the group above 2^60 elements", op,
                       name);
    if (index_lookup(g, name, NULL) >= 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: a parameter named \"%s\" is already registered",
                       op, name);
    if (g->n == g->cap) {
        if (g->cap >= (1 << 29))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: too many parameters", op);
        int cap = g->cap ? 2 * g->cap : 16;
        param *np = realloc(g->p, (size_t)cap * sizeof *np);
        if (!np)
            return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", op);
        g->p = np;
        g->cap = cap;
    }
    L8_CHECK(index_reserve(g));
    char *copy = malloc(len + 1);
    if (!copy)
        return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", op);
    memcpy(copy, name, len + 1);
    param *p = &g->p[g->n];
    memset(p, 0, sizeof *p);
    p->name = copy;
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        p->shape[d] = shape[d];
    p->numel = numel;
    p->offset = -1;
    size_t slot;
    (void)index_lookup(g, name, &slot);
    g->index[slot] = g->n + 1;
    g->numel_total += numel;
    g->padded += round_up(numel);
    if (id)
        *id = g->n;
    g->n++;
    return L8_OK;
}

/* ------------------------------------------------------------------------ */
/* finalize                                                                  */

static l8_status zero_storage(l8_ctx *ctx, l8_storage *st)
{
    void *ptr;
    L8_CHECK(l8_storage_data(st, &ptr));
    return l8_memset_d8(l8_ctx_stream(ctx, L8_STREAM_COMPUTE), ptr, 0, l8_storage_bytes(st));
}

l8_status l8_params_finalize(l8_params *g)
{
    L8_ARG(g != NULL);
    if (g->finalized)
        return L8_FAIL(L8_ERR_STATE, "l8_params_finalize: the group is already finalized");
    l8_status st = L8_OK;
    int64_t total = (g->padded + g->pad_to - 1) / g->pad_to * g->pad_to;
    size_t gsz = l8_dtype_size(g->gdt);

    /* reverse registration order: the last parameter starts at element 0 */
    int64_t off = 0;
    for (int i = g->n - 1; i >= 0; i--) {
        g->p[i].offset = off;
        off += round_up(g->p[i].numel);
    }
    if (g->n > 0) {
        g->ready = calloc((size_t)g->n, sizeof *g->ready);
        if (!g->ready) {
            st = L8_FAIL(L8_ERR_OOM, "l8_params_finalize: out of host memory");
            goto fail;
        }
    }
    L8_TRY(st, l8_storage_create_tagged(g->ctx, (size_t)total * sizeof(float), NULL,
                                        "params.master", &g->mst), fail);
    L8_TRY(st, l8_storage_create_tagged(g->ctx, (size_t)total * gsz, NULL, "params.main_grad",
                                        &g->gst), fail);
    l8_storage_set_resident(g->mst, 1);     /* parameters are never offloaded */
    l8_storage_set_resident(g->gst, 1);
    L8_TRY(st, zero_storage(g->ctx, g->mst), fail);
    L8_TRY(st, zero_storage(g->ctx, g->gst), fail);
    for (int i = 0; i < g->n; i++) {
        param *p = &g->p[i];
        L8_TRY(st, l8_tensor_from_storage(g->mst, (size_t)p->offset * sizeof(float), L8_F32,
                                          p->ndim, p->shape, NULL, &p->master), fail);
        L8_TRY(st, l8_tensor_from_storage(g->gst, (size_t)p->offset * gsz, g->gdt, p->ndim,
                                          p->shape, NULL, &p->grad), fail);
    }
    L8_TRY(st, l8_tensor_from_storage(g->mst, 0, L8_F32, 1, &total, NULL, &g->mflat), fail);
    L8_TRY(st, l8_tensor_from_storage(g->gst, 0, g->gdt, 1, &total, NULL, &g->gflat), fail);
    g->finalized = 1;
    g->total = total;
    return L8_OK;
fail:
    unfinalize(g);
    return st;
}

/* ------------------------------------------------------------------------ */
/* queries                                                                   */

l8_ctx *l8_params_ctx(const l8_params *g) { return g ? g->ctx : NULL; }
int l8_params_is_finalized(const l8_params *g) { return g ? g->finalized : 0; }
l8_dtype l8_params_grad_dtype(const l8_params *g) { return g ? g->gdt : (l8_dtype)-1; }
int l8_params_count(const l8_params *g) { return g ? g->n : 0; }

const char *l8_params_name(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->name : NULL;
}

int l8_params_ndim(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->ndim : -1;
}

int64_t l8_params_dim(const l8_params *g, int id, int d)
{
    const param *p = get_param(g, id);
    return (p && d >= 0 && d < p->ndim) ? p->shape[d] : -1;
}

int64_t l8_params_numel(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->numel : -1;
}

int64_t l8_params_offset(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->offset : -1;
}

int64_t l8_params_numel_total(const l8_params *g) { return g ? g->numel_total : 0; }

int64_t l8_params_buffer_numel(const l8_params *g)
{
    return (g && g->finalized) ? g->total : -1;
}

l8_status l8_params_find(const l8_params *g, const char *name, int *id)
{
    L8_ARG(id != NULL);
    *id = -1;
    L8_ARG(g != NULL && name != NULL);
    int i = index_lookup(g, name, NULL);
    if (i < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_params_find: no parameter named \"%s\"", name);
    *id = i;
    return L8_OK;
}

l8_tensor *l8_params_master(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->master : NULL;
}

l8_tensor *l8_params_main_grad(const l8_params *g, int id)
{
    const param *p = get_param(g, id);
    return p ? p->grad : NULL;
}

l8_tensor *l8_params_master_flat(const l8_params *g) { return g ? g->mflat : NULL; }
l8_tensor *l8_params_grad_flat(const l8_params *g) { return g ? g->gflat : NULL; }

/* ------------------------------------------------------------------------ */
/* gradients and the ready table                                             */

static l8_status need_final(const l8_params *g, const char *op)
{
    if (!g)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the group is NULL", op);
    if (!g->finalized)
        return L8_FAIL(L8_ERR_STATE, "%s: the group is not finalized (l8_params_finalize)", op);
    return L8_OK;
}

static l8_status need_id(const l8_params *g, int id, const char *op)
{
    L8_CHECK(need_final(g, op));
    if (id < 0 || id >= g->n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: parameter id %d is out of range (%d registered)",
                       op, id, g->n);
    return L8_OK;
}

l8_status l8_params_zero_grad(l8_params *g, l8_stream *s)
{
    static const char *op = "l8_params_zero_grad";
    L8_CHECK(need_final(g, op));
    l8_stream *compute = l8_ctx_stream(g->ctx, L8_STREAM_COMPUTE);
    L8_CHECK(l8i_resolve_stream(op, g->ctx, &s));
    if (s != compute)
        L8_CHECK(l8_storage_record_stream(g->gst, s));
    void *ptr;
    L8_CHECK(l8_storage_data(g->gst, &ptr));
    L8_CHECK(l8_memset_d8(s, ptr, 0, l8_storage_bytes(g->gst)));
    l8_params_reset_ready(g);
    return L8_OK;
}

l8_status l8_params_set_grad_ready_cb(l8_params *g, l8_grad_ready_fn fn, void *arg)
{
    L8_ARG(g != NULL);
    g->cb = fn;
    g->cb_arg = fn ? arg : NULL;
    return L8_OK;
}

l8_status l8i_params_attach(l8_params *g, void (*lost)(void *obj), void *obj)
{
    return l8i_deps_add(&g->deps, lost, obj, "l8_params");
}

void l8i_params_detach(l8_params *g, void *obj)
{
    l8i_deps_remove(&g->deps, obj);
}

l8_grad_ready_fn l8i_params_grad_ready_cb(const l8_params *g, void **arg)
{
    *arg = g->cb_arg;
    return g->cb;
}

l8_status l8_params_grad_ready(void *group, int id, l8_event *ev)
{
    l8_params *g = group;
    L8_CHECK(need_id(g, id, "l8_params_grad_ready"));
    if (g->ready[id] < INT32_MAX)
        g->ready[id]++;
    return g->cb ? g->cb(g->cb_arg, id, ev) : L8_OK;
}

void l8_params_reset_ready(l8_params *g)
{
    if (g && g->ready)
        memset(g->ready, 0, (size_t)g->n * sizeof *g->ready);
}

int l8_params_ready_count(const l8_params *g, int id)
{
    if (!get_param(g, id))
        return -1;
    return g->ready ? g->ready[id] : 0;
}

int l8_params_missing_count(const l8_params *g)
{
    if (!g)
        return 0;
    int m = 0;
    for (int i = 0; i < g->n; i++)
        m += !(g->ready && g->ready[i]);
    return m;
}

int l8_params_all_ready(const l8_params *g) { return l8_params_missing_count(g) == 0; }

size_t l8_params_describe_missing(const l8_params *g, char *buf, size_t n)
{
    size_t len = 0;
    if (buf && n)
        buf[0] = '\0';
    if (!g)
        return 0;
    for (int i = 0; i < g->n; i++) {
        if (g->ready && g->ready[i])
            continue;
        const char *sep = len ? ", " : "";
        size_t add = strlen(sep) + strlen(g->p[i].name);
        if (buf && len < n)
            snprintf(buf + len, n - len, "%s%s", sep, g->p[i].name);
        len += add;
    }
    return len;
}

l8_status l8_params_check_all_ready(const l8_params *g)
{
    L8_ARG(g != NULL);
    int m = l8_params_missing_count(g);
    if (m == 0)
        return L8_OK;
    char names[1024];
    size_t want = l8_params_describe_missing(g, names, sizeof names);
    return L8_FAIL(L8_ERR_STATE, "%d of %d parameters never reported a gradient this step "
                   "(l8_params_grad_ready): %s%s", m, g->n, names,
                   want >= sizeof names ? "..." : "");
}

/* ------------------------------------------------------------------------ */
/* host data                                                                 */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);        /* NaN stays NaN (quiet) */
    u += 0x7fffu + ((u >> 16) & 1u);                  /* round to nearest even */
    return (uint16_t)(u >> 16);
}


/* Blocking copy between host bytes and a view's bytes through the compute
 * stream. */
static l8_status view_copy(l8_params *g, l8_tensor *t, void *host, int to_device)
{
    l8_stream *s = l8_ctx_stream(g->ctx, L8_STREAM_COMPUTE);
    void *dev;
    size_t bytes = l8_tensor_nbytes(t);
    L8_CHECK(l8_tensor_data(t, &dev));
    if (to_device)
        L8_CHECK(l8_memcpy_htod(s, dev, host, bytes));
    else
        L8_CHECK(l8_memcpy_dtoh(s, host, dev, bytes));
    return l8_stream_synchronize(s);
}

static l8_status need_data(const l8_params *g, int id, const void *data, size_t n,
                           const char *op)
{
    L8_CHECK(need_id(g, id, op));
    if (!data)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the host pointer is NULL", op);
    if ((int64_t)n != g->p[id].numel)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %zu values for \"%s\", which has %lld", op, n,
                       g->p[id].name, (long long)g->p[id].numel);
    return L8_OK;
}

l8_status l8_params_set_host(l8_params *g, int id, const float *data, size_t n)
{
    L8_CHECK(need_data(g, id, data, n, "l8_params_set_host"));
    return view_copy(g, g->p[id].master, (void *)data, 1);
}

l8_status l8_params_get_host(l8_params *g, int id, float *out, size_t n)
{
    L8_CHECK(need_data(g, id, out, n, "l8_params_get_host"));
    return view_copy(g, g->p[id].master, out, 0);
}

l8_status l8_params_set_grad_host(l8_params *g, int id, const float *data, size_t n)
{
    L8_CHECK(need_data(g, id, data, n, "l8_params_set_grad_host"));
    if (g->gdt == L8_F32)
        return view_copy(g, g->p[id].grad, (void *)data, 1);
    uint16_t *h = malloc(n * sizeof *h);
    if (!h)
        return L8_FAIL(L8_ERR_OOM, "l8_params_set_grad_host: out of host memory for %zu values",
                       n);
    for (size_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(data[i]);
    l8_status st = view_copy(g, g->p[id].grad, h, 1);
    free(h);
    return st;
}

l8_status l8_params_get_grad_host(l8_params *g, int id, float *out, size_t n)
{
    L8_CHECK(need_data(g, id, out, n, "l8_params_get_grad_host"));
    if (g->gdt == L8_F32)
        return view_copy(g, g->p[id].grad, out, 0);
    uint16_t *h = malloc(n * sizeof *h);
    if (!h)
        return L8_FAIL(L8_ERR_OOM, "l8_params_get_grad_host: out of host memory for %zu values",
                       n);
    l8_status st = view_copy(g, g->p[id].grad, h, 0);
    if (st == L8_OK)
        for (size_t i = 0; i < n; i++)
            out[i] = l8_bf16_to_f32(h[i]);
    free(h);
    return st;
}

/* A host staging buffer of parameter id's numel floats. */
static l8_status staging(const l8_params *g, int id, const char *op, float **out)
{
    L8_CHECK(need_id(g, id, op));
    size_t n = (size_t)g->p[id].numel;
    *out = malloc(n * sizeof **out);
    if (!*out)
        return L8_FAIL(L8_ERR_OOM, "%s: out of host memory for %zu values", op, n);
    return L8_OK;
}

l8_status l8_params_fill(l8_params *g, int id, float value)
{
    float *h;
    L8_CHECK(staging(g, id, "l8_params_fill", &h));
    size_t n = (size_t)g->p[id].numel;
    for (size_t i = 0; i < n; i++)
        h[i] = value;
    l8_status st = view_copy(g, g->p[id].master, h, 1);
    free(h);
    return st;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static l8_status init_uniform(l8_params *g, int id, float lo, float hi, uint64_t seed,
                              const char *op)
{
    float width = hi - lo;
    if (!isfinite(lo) || !isfinite(hi) || !isfinite(width) || hi < lo)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: bounds [%g, %g] are not finite or not ordered",
                       op, (double)lo, (double)hi);
    float *h;
    L8_CHECK(staging(g, id, op, &h));
    size_t n = (size_t)g->p[id].numel;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        /* one rounding per statement: no contraction into an fma */
        float u = (float)(splitmix64(&s) >> 40) * 0x1p-24f;
        float t = width * u;
        h[i] = lo + t;
    }
    l8_status st = view_copy(g, g->p[id].master, h, 1);
    free(h);
    return st;
}

l8_status l8_params_init_uniform(l8_params *g, int id, float lo, float hi, uint64_t seed)
{
    return init_uniform(g, id, lo, hi, seed, "l8_params_init_uniform");
}

l8_status l8_params_init_kaiming_uniform(l8_params *g, int id, float a, uint64_t seed)
{
    static const char *op = "l8_params_init_kaiming_uniform";
    L8_CHECK(need_id(g, id, op));
    const param *p = &g->p[id];
    if (p->ndim < 2)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: \"%s\" has %d dims; fan_in needs at least 2 "
                       "(use l8_params_init_uniform for biases)", op, p->name, p->ndim);
    if (!isfinite(a))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: slope a is not finite", op);
    double fan_in = (double)(p->numel / p->shape[0]);
    double ad = (double)a;
    float bound = (float)sqrt(6.0 / ((1.0 + ad * ad) * fan_in));
    return init_uniform(g, id, -bound, bound, seed, op);
}
