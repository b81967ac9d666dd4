/* recipe.c - the delayed-scaling recipe: registration, the per-step update
 * (gather -> reduce hook -> one scale-update launch -> scatter), state views.
 *
 * On the GPU, gather and scatter run inside the update's launch
 * (l8i_fp8_scale_update_metas), with the gather as its own kernel only when
 * a reduce hook must see the gathered amaxes: 1 launch per step, 2 with a
 * hook.
 *
 * State: one storage of the recipe's context holding, for capacity C roles
 * and history length H,
 *
 *     [0]            amax_history  C x H f32   (row i = role i, newest first)
 *     [C H]          amax          C f32
 *     [C H + C]      scale         C f32
 *     [C H + 2C]     fp8_max       C f32
 *     [8-aligned]    table         C u64       device address of role i's meta
 *
 * of which the first N entries (rows) are live. Registering past C moves
 * everything to a storage of 2C (a stream-ordered copy on the compute
 * stream). The table lets one kernel gather every meta's amax and scatter
 * every scale (ptx/elementwise.ptx.in, l8_meta_gather / l8_meta_scatter); on
 * the host backend the same is a loop over the metas.
 *
 * Invariants: scale[i] equals meta_i.scale after every update and
 * push_scales; between updates meta_i.amax holds the step's max |x| over
 * role i's casts (they accumulate) and amax[i] holds whatever a failed
 * update left (0 otherwise).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ops/recipe.h"
#include "runtime/comm.h"
#include "runtime/fp8.h"
#include "runtime/internal.h"
#include "ops/internal.h"

#define INIT_CAP 16
#define NAME_MAX_LEN 127

struct l8_recipe {
    l8_ctx *ctx;
    int H;
    float margin;
    l8_amax_compute amax_compute;
    l8_fp8_format format;
    l8_amax_reduce_fn reduce;
    void *reduce_arg;
    int reduce_lost;              /* its communicator was destroyed first (comm_lost) */
    int n, cap;                   /* live roles; capacity of st */
    l8_storage *st;               /* NULL until the first registration */
    int hcap;                     /* capacity of the host arrays */
    l8_fp8_meta **metas;          /* one reference each */
    char **names;
    l8_fp8_role *roles;
    uint64_t updates;
};

/* byte offsets of the arrays for capacity cap */
typedef struct layout {
    size_t hist, amax, scale, fmax, table, bytes;
} layout;

static layout layout_for(int cap, int H)
{
    layout l;
    size_t c = (size_t)cap;
    l.hist = 0;
    l.amax = c * (size_t)H * sizeof(float);
    l.scale = l.amax + c * sizeof(float);
    l.fmax = l.scale + c * sizeof(float);
    l.table = (l.fmax + c * sizeof(float) + 7) & ~(size_t)7;
    l.bytes = l.table + c * sizeof(uint64_t);
    return l;
}

static l8_stream *compute(const l8_recipe *r) { return l8_ctx_stream(r->ctx, L8_STREAM_COMPUTE); }

/* ---- create / destroy ---- */

void l8_recipe_config_init(l8_recipe_config *cfg)
{
    if (cfg) *cfg = (l8_recipe_config)L8_RECIPE_CONFIG_INIT;
}

l8_status l8_recipe_create(l8_ctx *ctx, const l8_recipe_config *cfg, l8_recipe **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_recipe_config c = L8_RECIPE_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_recipe_create", "L8_RECIPE_CONFIG_INIT");
    if (c.history_len < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_create: history_len %d is negative",
                       c.history_len);
    if (!isfinite(c.margin))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_create: margin is not finite");
    if (c.amax_compute != L8_AMAX_MAX_HISTORY && c.amax_compute != L8_AMAX_MOST_RECENT)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_create: unknown amax_compute %d",
                       (int)c.amax_compute);
    if (c.format != L8_FP8_HYBRID && c.format != L8_FP8_E4M3)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_create: unknown format %d", (int)c.format);
    l8_recipe *r = calloc(1, sizeof *r);
    if (!r)
        return L8_FAIL(L8_ERR_OOM, "l8_recipe_create: out of host memory");
    r->ctx = ctx;
    r->H = c.history_len ? c.history_len : 1024;
    r->margin = c.margin;
    r->amax_compute = c.amax_compute;
    r->format = c.format;
    l8_status st = l8_recipe_set_reduce(r, c.reduce, c.reduce_arg);
    if (st != L8_OK) {
        free(r);
        return st;
    }
    *out = r;
    return L8_OK;
}

void l8_recipe_destroy(l8_recipe *r)
{
    if (!r)
        return;
    l8_status ignored = l8_recipe_set_reduce(r, NULL, NULL);   /* detaches: never fails */
    (void)ignored;
    for (int i = 0; i < r->n; i++) {
        l8_fp8_meta_release(r->metas[i]);
        free(r->names[i]);
    }
    free(r->metas);
    free(r->names);
    free(r->roles);
    l8_storage_release(r->st);
    free(r);
}

/* ---- accessors ---- */

l8_dtype l8_recipe_dtype(const l8_recipe *r, l8_fp8_role role)
{
    if (!r || (role != L8_ROLE_INPUT && role != L8_ROLE_WEIGHT && role != L8_ROLE_GRAD_OUTPUT)) {
        (void)L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_dtype: %s", !r ? "the recipe is NULL"
                      : "unknown role (not L8_ROLE_INPUT, _WEIGHT or _GRAD_OUTPUT)");
        return L8_DTYPE_INVALID;
    }
    if (r->format == L8_FP8_HYBRID && role == L8_ROLE_GRAD_OUTPUT)
        return L8_E5M2;
    return L8_E4M3;
}

int l8_recipe_count(const l8_recipe *r) { return r ? r->n : 0; }
int l8_recipe_history_len(const l8_recipe *r) { return r ? r->H : 0; }
uint64_t l8_recipe_updates(const l8_recipe *r) { return r ? r->updates : 0; }
l8_ctx *l8_recipe_ctx(const l8_recipe *r) { return r ? r->ctx : NULL; }

const char *l8_recipe_role_name(const l8_recipe *r, int i)
{
    return r && i >= 0 && i < r->n ? r->names[i] : NULL;
}

l8_fp8_meta *l8_recipe_meta(const l8_recipe *r, int i)
{
    return r && i >= 0 && i < r->n ? r->metas[i] : NULL;
}

/* The hook's communicator is being destroyed first (l8_comm_destroy calls this). */
static void comm_lost(void *obj)
{
    l8_recipe *r = obj;
    r->reduce_arg = NULL;
    r->reduce_lost = 1;
}

l8_status l8_recipe_set_reduce(l8_recipe *r, l8_amax_reduce_fn fn, void *arg)
{
    L8_ARG(r != NULL);
    /* over a communicator (the documented pairing): attach, so that
     * l8_comm_destroy first leaves an error here and not a dangling arg */
    if (fn == l8_comm_reduce_amax && arg)
        L8_CHECK(l8i_comm_attach(arg, comm_lost, r));
    if (r->reduce == l8_comm_reduce_amax && r->reduce_arg)
        l8i_comm_detach(r->reduce_arg, r);
    r->reduce = fn;
    r->reduce_arg = fn ? arg : NULL;
    r->reduce_lost = 0;
    return L8_OK;
}

/* ---- registration ---- */

/* Host arrays for at least `want` roles. */
static l8_status grow_host(l8_recipe *r, int want)
{
    if (want <= r->hcap)
        return L8_OK;
    int cap = r->hcap ? 2 * r->hcap : INIT_CAP;
    l8_fp8_meta **m = realloc(r->metas, (size_t)cap * sizeof *m);
    if (m)
        r->metas = m;
    char **nm = m ? realloc(r->names, (size_t)cap * sizeof *nm) : NULL;
    if (nm)
        r->names = nm;
    l8_fp8_role *ro = nm ? realloc(r->roles, (size_t)cap * sizeof *ro) : NULL;
    if (!ro)
        return L8_FAIL(L8_ERR_OOM, "l8_recipe_register: out of host memory for %d roles", cap);
    r->roles = ro;
    r->hcap = cap;
    return L8_OK;
}

/* Device state for at least r->n + 1 roles: a new storage of twice the
 * capacity with the live entries copied over (stream-ordered). */
static l8_status grow_device(l8_recipe *r)
{
    if (r->n < r->cap)
        return L8_OK;
    int cap = r->cap ? 2 * r->cap : INIT_CAP;
    layout nl = layout_for(cap, r->H), ol = layout_for(r->cap, r->H);
    l8_stream *cs = compute(r);
    l8_storage *st = NULL;
    L8_CHECK(l8_storage_create(r->ctx, nl.bytes, cs, &st));
    l8_status ret = L8_OK;
    if (r->n > 0) {
        char *src, *dst;
        size_t n = (size_t)r->n;
        L8_TRY(ret, l8_storage_data(r->st, (void **)&src), fail);
        L8_TRY(ret, l8_storage_data(st, (void **)&dst), fail);
        L8_TRY(ret, l8_memcpy_dtod(cs, dst + nl.hist, src + ol.hist,
                                   n * (size_t)r->H * sizeof(float)), fail);
        L8_TRY(ret, l8_memcpy_dtod(cs, dst + nl.amax, src + ol.amax, n * sizeof(float)), fail);
        L8_TRY(ret, l8_memcpy_dtod(cs, dst + nl.scale, src + ol.scale, n * sizeof(float)), fail);
        L8_TRY(ret, l8_memcpy_dtod(cs, dst + nl.fmax, src + ol.fmax, n * sizeof(float)), fail);
        L8_TRY(ret, l8_memcpy_dtod(cs, dst + nl.table, src + ol.table, n * sizeof(uint64_t)),
               fail);
    }
    l8_storage_release(r->st);    /* stream-ordered: the copies above read it first */
    r->st = st;
    r->cap = cap;
    return L8_OK;
fail:
    l8_storage_release(st);
    return ret;
}

l8_status l8_recipe_register(l8_recipe *r, const char *name, l8_fp8_role role, int *index,
                             l8_fp8_meta **meta)
{
    if (index)
        *index = -1;
    if (meta)
        *meta = NULL;
    L8_ARG(r != NULL && name != NULL);
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_register: the role name must be 1 to %d"
                       " bytes (got %zu)", NAME_MAX_LEN, len);
    if (role != L8_ROLE_INPUT && role != L8_ROLE_WEIGHT && role != L8_ROLE_GRAD_OUTPUT)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_recipe_register: unknown role %d for \"%s\"",
                       (int)role, name);
    if (r->n == INT32_MAX / 2)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_recipe_register: too many roles");
    L8_CHECK(grow_host(r, r->n + 1));
    L8_CHECK(grow_device(r));

    l8_status ret = L8_OK;
    l8_fp8_meta *m = NULL;
    char *nm = malloc(len + 1);
    if (!nm)
        return L8_FAIL(L8_ERR_OOM, "l8_recipe_register: out of host memory");
    memcpy(nm, name, len + 1);
    L8_TRY(ret, l8_fp8_meta_create(r->ctx, &m), fail);
    {
        /* slot n: history zeros, amax 0, scale 1, fp8_max, the meta's address.
         * Uploads from this stack frame block until done (pageable memory). */
        layout l = layout_for(r->cap, r->H);
        l8_stream *cs = compute(r);
        char *base;
        size_t i = (size_t)r->n;
        const float amax0 = 0.0f, scale0 = 1.0f;
        const float fmax = l8_fp8_max(l8_recipe_dtype(r, role));
        const uint64_t addr = (uint64_t)(uintptr_t)l8_fp8_meta_scale(m);
        L8_TRY(ret, l8_storage_data(r->st, (void **)&base), fail);
        L8_TRY(ret, l8_memset_d8(cs, base + l.hist + i * (size_t)r->H * sizeof(float), 0,
                                 (size_t)r->H * sizeof(float)), fail);
        L8_TRY(ret, l8_memcpy_htod(cs, base + l.amax + i * sizeof(float), &amax0, sizeof amax0),
               fail);
        L8_TRY(ret, l8_memcpy_htod(cs, base + l.scale + i * sizeof(float), &scale0,
                                   sizeof scale0), fail);
        L8_TRY(ret, l8_memcpy_htod(cs, base + l.fmax + i * sizeof(float), &fmax, sizeof fmax),
               fail);
        L8_TRY(ret, l8_memcpy_htod(cs, base + l.table + i * sizeof(uint64_t), &addr,
                                   sizeof addr), fail);
    }
    r->metas[r->n] = m;
    r->names[r->n] = nm;
    r->roles[r->n] = role;
    if (index)
        *index = r->n;
    if (meta)
        *meta = m;
    r->n++;
    return L8_OK;
fail:
    l8_fp8_meta_release(m);
    free(nm);
    return ret;
}

/* ---- views ---- */

static l8_status view_1d(const l8_recipe *r, size_t off, l8_tensor **out)
{
    int64_t n = r->n;
    if (!r->st)
        return l8_tensor_empty(r->ctx, L8_F32, 1, &n, out);
    return l8_tensor_from_storage(r->st, off, L8_F32, 1, &n, NULL, out);
}

static l8_status view_hist(const l8_recipe *r, l8_tensor **out)
{
    int64_t shape[2] = { r->n, r->H };
    if (!r->st)
        return l8_tensor_empty(r->ctx, L8_F32, 2, shape, out);
    return l8_tensor_from_storage(r->st, 0, L8_F32, 2, shape, NULL, out);
}

l8_status l8_recipe_state(l8_recipe *r, l8_tensor **amax_history, l8_tensor **scale,
                          l8_tensor **amax, l8_tensor **fp8_max)
{
    l8_tensor **outs[4] = { amax_history, scale, amax, fp8_max };
    for (int i = 0; i < 4; i++)
        if (outs[i])
            *outs[i] = NULL;
    L8_ARG(r != NULL);
    layout l = layout_for(r->cap, r->H);
    size_t offs[4] = { 0, l.scale, l.amax, l.fmax };
    l8_status ret = L8_OK;
    for (int i = 0; i < 4; i++) {
        if (!outs[i])
            continue;
        ret = i == 0 ? view_hist(r, outs[i]) : view_1d(r, offs[i], outs[i]);
        if (ret != L8_OK) {
            for (int j = 0; j < i; j++)
                if (outs[j]) {
                    l8_tensor_destroy(*outs[j]);
                    *outs[j] = NULL;
                }
            return ret;
        }
    }
    return L8_OK;
}

/* ---- update ---- */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* kernel `entry` (l8_meta_gather / l8_meta_scatter) over the n roles with
 * the f32 array at byte offset `off` */
static l8_status meta_kernel(l8_recipe *r, const char *entry, size_t off, l8_stream *s)
{
    layout l = layout_for(r->cap, r->H);
    char *base;
    L8_CHECK(l8_storage_data(r->st, (void **)&base));
    CUfunction f;
    L8_CHECK(l8i_ctx_bind(r->ctx));
    L8_CHECK(l8i_kernel(r->ctx, "elementwise", entry, &f));
    uint64_t a_table = (uint64_t)(uintptr_t)(base + l.table);
    uint64_t a_vec = (uint64_t)(uintptr_t)(base + off);
    uint32_t n = (uint32_t)r->n;
    void *args[] = { &a_table, &a_vec, &n };
    return l8i_launch(s, f, (n + 255u) / 256u, 1, 1, 256, 1, 1, 0, args);
}

static l8_status gather(l8_recipe *r, l8_stream *s)
{
    layout l = layout_for(r->cap, r->H);
    if (l8_ctx_backend(r->ctx) != L8_BACKEND_HOST)
        return meta_kernel(r, "l8_meta_gather", l.amax, s);
    char *base;
    L8_CHECK(l8_storage_data(r->st, (void **)&base));
    float *amax = (float *)(base + l.amax);
    for (int i = 0; i < r->n; i++) {
        float *ma = l8_fp8_meta_amax(r->metas[i]);
        uint32_t a = fbits(amax[i]) & 0x7fffffffu, b = fbits(*ma) & 0x7fffffffu;
        amax[i] = bitsf(a > b ? a : b);
        *ma = 0.0f;
    }
    return L8_OK;
}

l8_status l8_recipe_push_scales(l8_recipe *r, l8_stream *s)
{
    L8_ARG(r != NULL);
    L8_CHECK(l8i_resolve_stream("l8_recipe_push_scales", r->ctx, &s));
    if (r->n == 0)
        return L8_OK;
    layout l = layout_for(r->cap, r->H);
    L8_CHECK(l8_storage_record_stream(r->st, s));
    if (l8_ctx_backend(r->ctx) != L8_BACKEND_HOST)
        return meta_kernel(r, "l8_meta_scatter", l.scale, s);
    char *base;
    L8_CHECK(l8_storage_data(r->st, (void **)&base));
    const float *scale = (const float *)(base + l.scale);
    for (int i = 0; i < r->n; i++)
        *l8_fp8_meta_scale(r->metas[i]) = scale[i];
    return L8_OK;
}

l8_status l8_recipe_update(l8_recipe *r, l8_stream *s)
{
    L8_ARG(r != NULL);
    L8_CHECK(l8i_resolve_stream("l8_recipe_update", r->ctx, &s));
    if (r->reduce_lost)
        return L8_FAIL(L8_ERR_STATE, "l8_recipe_update: the communicator of the amax reduction "
                       "(l8_recipe_set_reduce) was destroyed first; set another hook or none");
    if (r->n == 0) {
        r->updates++;
        return L8_OK;
    }
    L8_CHECK(l8_storage_record_stream(r->st, s));
    l8_status ret = L8_OK;
    l8_tensor *hist = NULL, *scale = NULL, *amax = NULL, *fmax = NULL;
    L8_TRY(ret, l8_recipe_state(r, &hist, &scale, &amax, &fmax), out);
    /* On the GPU the update kernel does the scatter too, and the gather
     * unless the hook must see the gathered amaxes first: one launch a step
     * without a hook, two with one. */
    const int dev = l8_ctx_backend(r->ctx) != L8_BACKEND_HOST;
    unsigned mf = dev ? L8I_SU_SCATTER : 0;
    if (dev && !r->reduce)
        mf |= L8I_SU_GATHER;
    else
        L8_TRY(ret, gather(r, s), out);
    if (r->reduce)
        L8_TRY(ret, r->reduce(r->reduce_arg, amax, s), out);
    {
        l8_fp8_scale_update_config c = L8_FP8_SCALE_UPDATE_CONFIG_INIT;
        c.amax_compute = r->amax_compute;
        c.margin = r->margin;
        c.reset_amax = 1;
        char *base;
        L8_TRY(ret, l8_storage_data(r->st, (void **)&base), out);
        /* scale_inv NULL: data cast with the old scale keeps its own */
        L8_TRY(ret, l8i_fp8_scale_update_metas(hist, amax, scale, NULL, fmax, &c,
                                               dev ? base + layout_for(r->cap, r->H).table : NULL,
                                               mf, s), out);
    }
    if (!dev)
        L8_TRY(ret, l8_recipe_push_scales(r, s), out);
    r->updates++;
out:
    l8_tensor_destroy(hist);
    l8_tensor_destroy(scale);
    l8_tensor_destroy(amax);
    l8_tensor_destroy(fmax);
    return ret;
}
