/* test_params.c - parameter groups on the host backend: the flat layout,
 * views that never go missing, zero_grad, the grad-ready table and
 * callback, host-data helpers and initializers, errors and fault injection.
 *
 * Every test makes its own host context and ends in ctx_finish(), which
 * fails unless the allocator holds no live block (a leaked buffer or view
 * shows there). Test data are random and never zero; buffers read back are
 * poisoned first, so an element nobody wrote cannot pass.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/params.h"
#include "runtime/tensor.h"

#define ALIGN L8_PARAMS_ALIGN_ELEMS

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

/* ---- a model's worth of parameters ---- */

typedef struct spec {
    const char *name;
    int ndim;
    int64_t shape[4];
} spec;

static const spec SPECS[] = {
    { "embed.weight", 2, { 37, 16 } },      /* 592: padded to 640 */
    { "fc1.weight", 2, { 64, 48 } },        /* 3072: a multiple of 128 */
    { "fc1.bias", 1, { 64 } },
    { "scale", 0, { 0 } },                  /* a scalar */
    { "conv.weight", 4, { 3, 2, 5, 7 } },   /* 210 */
    { "fc2.bias", 1, { 129 } },             /* one past a multiple */
};
#define NSPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

static int64_t spec_numel(const spec *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

static int64_t pad(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static l8_params *group_make(l8_ctx *ctx, l8_dtype gdt, int finalize)
{
    l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
    cfg.grad_dtype = gdt;
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, &cfg, &g));
    for (int i = 0; i < NSPECS; i++) {
        int id = -7;
        L8_CK(l8_params_add(g, SPECS[i].name, SPECS[i].ndim, SPECS[i].shape, &id));
        ck_assert_int_eq(id, i);
    }
    if (finalize)
        L8_CK(l8_params_finalize(g));
    return g;
}

/* Random nonzero floats: sign * m * 2^e, e in [-2, 1], an 8-bit significand
 * (bf16_exact: values a bf16 holds exactly) or a 24-bit one. Built with
 * ldexpf: GCC 12.2 miscompiles a conditional mask of a float's low 16 bits. */
static void fill_random(l8_rng *r, float *x, size_t n, int bf16_exact)
{
    int bits = bf16_exact ? 8 : 24;
    uint64_t half = (uint64_t)1 << (bits - 1);
    for (size_t i = 0; i < n; i++) {
        float m = (float)(half + l8_rng_below(r, half));
        float v = ldexpf(m, -2 + (int)l8_rng_below(r, 4) - (bits - 1));
        x[i] = l8_rng_below(r, 2) ? -v : v;
    }
}

/* The whole flat buffer, widened to f32; poisoned before the copy. */
static float *read_flat(l8_tensor *flat)
{
    size_t n = (size_t)l8_tensor_numel(flat), bytes = l8_tensor_nbytes(flat);
    float *out = xmalloc(n * sizeof *out);
    if (l8_tensor_dtype(flat) == L8_F32) {
        memset(out, 0xA5, bytes);
        L8_CK(l8_tensor_copy_to_host(flat, out, bytes, NULL));
        return out;
    }
    uint16_t *h = xmalloc(bytes);
    memset(h, 0xA5, bytes);
    L8_CK(l8_tensor_copy_to_host(flat, h, bytes, NULL));
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&out[i], &u, sizeof u);
    }
    free(h);
    return out;
}

/* ---- layout ---- */

static void check_layout(l8_dtype gdt)
{
    l8_rng r;
    l8_rng_init(&r, 0x9a7a0001u + (uint64_t)gdt);
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = group_make(ctx, gdt, 0);
    int64_t total_numel = 0, padded = 0;
    for (int i = 0; i < NSPECS; i++) {
        total_numel += spec_numel(&SPECS[i]);
        padded += pad(spec_numel(&SPECS[i]));
        /* before finalize: queries work, data does not exist */
        ck_assert_int_eq(l8_params_offset(g, i), -1);
        ck_assert_ptr_null(l8_params_master(g, i));
        ck_assert_ptr_null(l8_params_main_grad(g, i));
    }
    ck_assert_int_eq(l8_params_count(g), NSPECS);
    ck_assert_int_eq(l8_params_numel_total(g), total_numel);
    ck_assert_int_eq(l8_params_buffer_numel(g), -1);
    ck_assert_int_eq(l8_params_is_finalized(g), 0);
    ck_assert_ptr_null(l8_params_master_flat(g));
    L8_CK_ST(l8_params_zero_grad(g, NULL), L8_ERR_STATE);

    L8_CK(l8_params_finalize(g));
    ck_assert_int_eq(l8_params_is_finalized(g), 1);
    ck_assert_int_eq(l8_params_grad_dtype(g), gdt);
    int64_t total = l8_params_buffer_numel(g);
    ck_assert_int_eq(total, padded);
    ck_assert_int_eq(total % ALIGN, 0);
    size_t gsz = l8_dtype_size(gdt);
    l8_tensor *mf = l8_params_master_flat(g), *gf = l8_params_grad_flat(g);
    ck_assert_ptr_nonnull(mf);
    ck_assert_ptr_nonnull(gf);
    ck_assert_int_eq(l8_tensor_ndim(mf), 1);
    ck_assert_int_eq(l8_tensor_numel(mf), total);
    ck_assert_int_eq(l8_tensor_dtype(mf), L8_F32);
    ck_assert_int_eq(l8_tensor_numel(gf), total);
    ck_assert_int_eq(l8_tensor_dtype(gf), gdt);

    /* reverse registration order, aligned, packed */
    ck_assert_int_eq(l8_params_offset(g, NSPECS - 1), 0);
    for (int i = NSPECS - 2; i >= 0; i--)
        ck_assert_int_eq(l8_params_offset(g, i),
                         l8_params_offset(g, i + 1) + pad(l8_params_numel(g, i + 1)));
    ck_assert_int_eq(l8_params_offset(g, 0) + pad(spec_numel(&SPECS[0])), total);
    for (int i = 0; i < NSPECS; i++) {
        const spec *s = &SPECS[i];
        int64_t off = l8_params_offset(g, i);
        ck_assert_int_eq(off % ALIGN, 0);
        ck_assert_str_eq(l8_params_name(g, i), s->name);
        ck_assert_int_eq(l8_params_ndim(g, i), s->ndim);
        ck_assert_int_eq(l8_params_numel(g, i), spec_numel(s));
        /* no overlap with any other parameter */
        for (int j = 0; j < NSPECS; j++) {
            if (j == i)
                continue;
            int64_t o2 = l8_params_offset(g, j), n2 = l8_params_numel(g, j);
            ck_assert_msg(off + spec_numel(s) <= o2 || o2 + n2 <= off, "%s overlaps %s", s->name,
                          SPECS[j].name);
        }
        l8_tensor *views[2] = { l8_params_master(g, i), l8_params_main_grad(g, i) };
        l8_tensor *flats[2] = { mf, gf };
        size_t esz[2] = { 4, gsz };
        l8_dtype dts[2] = { L8_F32, gdt };
        for (int v = 0; v < 2; v++) {
            l8_tensor *t = views[v];
            ck_assert_ptr_nonnull(t);
            ck_assert_int_eq(l8_tensor_dtype(t), dts[v]);
            ck_assert_int_eq(l8_tensor_ndim(t), s->ndim);
            for (int d = 0; d < s->ndim; d++) {
                ck_assert_int_eq(l8_tensor_dim(t, d), s->shape[d]);
                ck_assert_int_eq(l8_params_dim(g, i, d), s->shape[d]);
            }
            ck_assert(l8_tensor_is_contiguous(t));
            ck_assert_ptr_eq(l8_tensor_storage(t), l8_tensor_storage(flats[v]));
            ck_assert_uint_eq(l8_tensor_offset(t), (size_t)off * esz[v]);
            void *ptr;
            L8_CK(l8_tensor_data(t, &ptr));
            ck_assert_msg((uintptr_t)ptr % 256 == 0, "%s view %d at %p is not 256-B aligned",
                          s->name, v, ptr);
        }
    }
    ck_assert_int_eq(l8_params_dim(g, 0, 2), -1);
    ck_assert_int_eq(l8_params_offset(g, NSPECS), -1);

    /* both buffers start zeroed, padding included */
    float *mh = read_flat(mf), *gh = read_flat(gf);
    for (int64_t i = 0; i < total; i++) {
        ck_assert_msg(mh[i] == 0.0f && gh[i] == 0.0f, "element %lld not zero after finalize",
                      (long long)i);
    }
    free(mh);
    free(gh);

    /* every parameter's data lands at its offset; padding stays zero */
    float **vals = xmalloc(NSPECS * sizeof *vals), **gvals = xmalloc(NSPECS * sizeof *gvals);
    for (int i = 0; i < NSPECS; i++) {
        size_t n = (size_t)spec_numel(&SPECS[i]);
        vals[i] = xmalloc(n * sizeof(float));
        gvals[i] = xmalloc(n * sizeof(float));
        fill_random(&r, vals[i], n, 0);
        fill_random(&r, gvals[i], n, gdt == L8_BF16);
        L8_CK(l8_params_set_host(g, i, vals[i], n));
        L8_CK(l8_params_set_grad_host(g, i, gvals[i], n));
    }
    mh = read_flat(mf);
    gh = read_flat(gf);
    char *owned = xmalloc((size_t)total);
    memset(owned, 0, (size_t)total);
    for (int i = 0; i < NSPECS; i++) {
        size_t n = (size_t)spec_numel(&SPECS[i]);
        int64_t off = l8_params_offset(g, i);
        for (size_t k = 0; k < n; k++) {
            ck_assert(mh[off + (int64_t)k] == vals[i][k]);
            ck_assert(gh[off + (int64_t)k] == gvals[i][k]);
            owned[off + (int64_t)k] = 1;
        }
        float *back = xmalloc(n * sizeof *back);
        memset(back, 0xA5, n * sizeof *back);
        L8_CK(l8_params_get_host(g, i, back, n));
        ck_assert(!memcmp(back, vals[i], n * sizeof *back));
        memset(back, 0xA5, n * sizeof *back);
        L8_CK(l8_params_get_grad_host(g, i, back, n));
        ck_assert(!memcmp(back, gvals[i], n * sizeof *back));
        free(back);
        free(vals[i]);
        free(gvals[i]);
    }
    for (int64_t k = 0; k < total; k++)
        if (!owned[k])
            ck_assert_msg(mh[k] == 0.0f && gh[k] == 0.0f, "padding element %lld was written",
                          (long long)k);
    free(owned);
    free(mh);
    free(gh);
    free(vals);
    free(gvals);
    l8_params_destroy(g);
    ctx_finish(ctx);
}

START_TEST(test_layout_f32) { check_layout(L8_F32); }
END_TEST

START_TEST(test_layout_bf16) { check_layout(L8_BF16); }
END_TEST

/* bf16 grads round to nearest even and keep NaN. */
START_TEST(test_bf16_grad_rounding)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
    cfg.grad_dtype = L8_BF16;
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, &cfg, &g));
    L8_CK(l8_params_add(g, "w", 1, (const int64_t[1]){ 4 }, NULL));
    L8_CK(l8_params_finalize(g));
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1; 1 + 3*2^-8 ties up */
    float in[4] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, NAN, -1.0f - 0x1p-9f }, out[4];
    L8_CK(l8_params_set_grad_host(g, 0, in, 4));
    L8_CK(l8_params_get_grad_host(g, 0, out, 4));
    ck_assert(out[0] == 1.0f);
    ck_assert(out[1] == 1.0f + 4 * 0x1p-8f);
    ck_assert(isnan(out[2]));
    ck_assert(out[3] == -1.0f);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- views that never go missing (seeds/000) ---- */

START_TEST(test_views_never_null)
{
    l8_rng r;
    l8_rng_init(&r, 0x9a7a0002u);
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = group_make(ctx, L8_F32, 1);
    l8_tensor *m0[NSPECS], *g0[NSPECS];
    for (int i = 0; i < NSPECS; i++) {
        m0[i] = l8_params_master(g, i);
        g0[i] = l8_params_main_grad(g, i);
        ck_assert_ptr_nonnull(m0[i]);
        ck_assert_ptr_nonnull(g0[i]);
    }
    /* three steps in which only some parameters get a gradient */
    for (int step = 0; step < 3; step++) {
        L8_CK(l8_params_zero_grad(g, NULL));
        for (int i = step % 2; i < NSPECS; i += 2) {
            size_t n = (size_t)l8_params_numel(g, i);
            float *x = xmalloc(n * sizeof *x);
            fill_random(&r, x, n, 0);
            L8_CK(l8_params_set_grad_host(g, i, x, n));
            L8_CK(l8_params_grad_ready(g, i, NULL));
            free(x);
        }
        for (int i = 0; i < NSPECS; i++) {
            /* the same views, every step, whether or not a gradient came */
            ck_assert_ptr_eq(l8_params_master(g, i), m0[i]);
            ck_assert_ptr_eq(l8_params_main_grad(g, i), g0[i]);
            ck_assert_int_eq(l8_params_ready_count(g, i), (i % 2) == (step % 2) ? 1 : 0);
            if ((i % 2) != (step % 2)) {
                /* no gradient this step: the view reads zeros */
                size_t n = (size_t)l8_params_numel(g, i);
                float *x = xmalloc(n * sizeof *x);
                memset(x, 0xA5, n * sizeof *x);
                L8_CK(l8_params_get_grad_host(g, i, x, n));
                for (size_t k = 0; k < n; k++)
                    ck_assert(x[k] == 0.0f);
                free(x);
            }
        }
    }
    /* a view the caller derives outlives the group (it holds the storage) */
    l8_tensor *keep = NULL;
    L8_CK(l8_tensor_reshape(g0[1], 1, (const int64_t[1]){ -1 }, &keep));
    l8_params_destroy(g);
    ck_assert_int_eq(l8_tensor_numel(keep), 64 * 48);
    void *ptr;
    L8_CK(l8_tensor_data(keep, &ptr));
    ck_assert_ptr_nonnull(ptr);
    l8_tensor_destroy(keep);
    ctx_finish(ctx);
}
END_TEST

/* ---- zero_grad ---- */

START_TEST(test_zero_grad)
{
    l8_rng r;
    l8_rng_init(&r, 0x9a7a0003u);
    l8_ctx *ctx = ctx_make(NULL, 0);
    for (int bf = 0; bf < 2; bf++) {
        l8_params *g = group_make(ctx, bf ? L8_BF16 : L8_F32, 1);
        l8_stream *streams[2] = { NULL, l8_ctx_stream(ctx, L8_STREAM_COMM) };
        for (int si = 0; si < 2; si++) {
            for (int i = 0; i < NSPECS; i++) {
                size_t n = (size_t)l8_params_numel(g, i);
                float *x = xmalloc(n * sizeof *x);
                fill_random(&r, x, n, bf);
                L8_CK(l8_params_set_grad_host(g, i, x, n));
                L8_CK(l8_params_grad_ready(g, i, NULL));
                free(x);
            }
            ck_assert(l8_params_all_ready(g));
            L8_CK(l8_params_zero_grad(g, streams[si]));
            L8_CK(l8_ctx_synchronize(ctx));
            float *h = read_flat(l8_params_grad_flat(g));
            for (int64_t k = 0; k < l8_params_buffer_numel(g); k++)
                ck_assert_msg(h[k] == 0.0f, "grad element %lld not zeroed", (long long)k);
            free(h);
            /* the ready table starts over */
            ck_assert_int_eq(l8_params_missing_count(g), NSPECS);
            for (int i = 0; i < NSPECS; i++)
                ck_assert_int_eq(l8_params_ready_count(g, i), 0);
        }
        /* the master weights are not touched */
        float *m = read_flat(l8_params_master_flat(g));
        for (int64_t k = 0; k < l8_params_buffer_numel(g); k++)
            ck_assert(m[k] == 0.0f);
        free(m);
        l8_params_destroy(g);
    }
    ctx_finish(ctx);
}
END_TEST

/* ---- grad ready ---- */

typedef struct report {
    l8_params *g;
    int id;
    l8_event *ev;
} report;

typedef struct recorder {
    l8_params *g;                 /* the group the callback serves */
    report calls[64];
    int n;
    int fail_id;                  /* return an error for this id; -1 none */
} recorder;

static l8_status record_cb(void *arg, int id, l8_event *ev)
{
    recorder *rec = arg;
    l8_params *g = rec->g;
    if (rec->n < 64)
        rec->calls[rec->n++] = (report){ g, id, ev };
    if (id == rec->fail_id)
        return L8_FAIL(L8_ERR_COMM, "test: the reducer failed for id %d", id);
    return L8_OK;
}

START_TEST(test_grad_ready)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = group_make(ctx, L8_F32, 0);
    /* before finalize: no table */
    L8_CK_ST(l8_params_grad_ready(g, 0, NULL), L8_ERR_STATE);
    L8_CK(l8_params_finalize(g));
    l8_event *ev[2];
    L8_CK(l8_event_create(ctx, 0, &ev[0]));
    L8_CK(l8_event_create(ctx, 0, &ev[1]));
    recorder rec;
    memset(&rec, 0, sizeof rec);
    rec.fail_id = -1;
    rec.g = g;
    L8_CK(l8_params_set_grad_ready_cb(g, record_cb, &rec));

    /* backward order, one repeat, one parameter (2: fc1.bias) never reports */
    int order[] = { 5, 4, 3, 5, 1, 0 };
    int norder = (int)(sizeof order / sizeof order[0]);
    for (int k = 0; k < norder; k++) {
        ck_assert_int_eq(l8_params_all_ready(g), 0);
        L8_CK(l8_params_grad_ready(g, order[k], ev[k % 2]));
        L8_CK(l8_event_record(ev[k % 2], l8_ctx_stream(ctx, L8_STREAM_COMPUTE)));
    }
    ck_assert_int_eq(rec.n, norder);
    for (int k = 0; k < norder; k++) {
        ck_assert_ptr_eq(rec.calls[k].g, g);
        ck_assert_int_eq(rec.calls[k].id, order[k]);
        ck_assert_ptr_eq(rec.calls[k].ev, ev[k % 2]);
    }
    ck_assert_int_eq(l8_params_ready_count(g, 5), 2);
    ck_assert_int_eq(l8_params_ready_count(g, 4), 1);
    ck_assert_int_eq(l8_params_ready_count(g, 2), 0);
    ck_assert_int_eq(l8_params_ready_count(g, 6), -1);
    ck_assert_int_eq(l8_params_all_ready(g), 0);
    ck_assert_int_eq(l8_params_missing_count(g), 1);
    char buf[128];
    ck_assert_uint_eq(l8_params_describe_missing(g, buf, sizeof buf), strlen("fc1.bias"));
    ck_assert_str_eq(buf, "fc1.bias");
    L8_CK_ST(l8_params_check_all_ready(g), L8_ERR_STATE);
    ck_assert_msg(strstr(l8_last_error()->message, "fc1.bias") != NULL,
                  "the error does not name the parameter: %s", l8_last_error()->message);

    /* the last one reports (no event): all ready */
    L8_CK(l8_params_grad_ready(g, 2, NULL));
    ck_assert_ptr_null(rec.calls[norder].ev);
    ck_assert_int_eq(l8_params_all_ready(g), 1);
    ck_assert_int_eq(l8_params_missing_count(g), 0);
    ck_assert_uint_eq(l8_params_describe_missing(g, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    L8_CK(l8_params_check_all_ready(g));

    /* several missing: registration order, snprintf truncation rules */
    l8_params_reset_ready(g);
    L8_CK(l8_params_grad_ready(g, 1, NULL));
    L8_CK(l8_params_grad_ready(g, 3, NULL));
    L8_CK(l8_params_grad_ready(g, 5, NULL));
    const char *want = "embed.weight, fc1.bias, conv.weight";
    ck_assert_uint_eq(l8_params_describe_missing(g, NULL, 0), strlen(want));
    ck_assert_uint_eq(l8_params_describe_missing(g, buf, sizeof buf), strlen(want));
    ck_assert_str_eq(buf, want);
    ck_assert_uint_eq(l8_params_describe_missing(g, buf, 10), strlen(want));
    ck_assert_str_eq(buf, "embed.wei");

    /* a failing consumer: its status comes back; the report still counts */
    l8_params_reset_ready(g);
    rec.n = 0;
    rec.fail_id = 1;
    L8_CK_ST(l8_params_grad_ready(g, 1, ev[0]), L8_ERR_COMM);
    ck_assert_int_eq(l8_params_ready_count(g, 1), 1);
    ck_assert_int_eq(rec.n, 1);

    /* no callback: counted, nobody called */
    L8_CK(l8_params_set_grad_ready_cb(g, NULL, &rec));
    L8_CK(l8_params_grad_ready(g, 0, ev[0]));
    ck_assert_int_eq(rec.n, 1);
    ck_assert_int_eq(l8_params_ready_count(g, 0), 1);

    /* bad ids */
    L8_CK_ST(l8_params_grad_ready(g, -1, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_grad_ready(g, NSPECS, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_grad_ready(NULL, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_set_grad_ready_cb(NULL, record_cb, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_check_all_ready(NULL), L8_ERR_INVALID_ARG);
    l8_event_destroy(ev[0]);
    l8_event_destroy(ev[1]);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- many parameters: the name index, and a long missing list ---- */

START_TEST(test_many_params)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, NULL, &g));
    int n = l8_test_quick() ? 300 : 1000;
    char name[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "layers.%04d.mlp.weight", i);
        int id;
        L8_CK(l8_params_add(g, name, 2, (const int64_t[2]){ 1 + i % 7, 3 }, &id));
        ck_assert_int_eq(id, i);
    }
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "layers.%04d.mlp.weight", i);
        int id = -5;
        L8_CK(l8_params_find(g, name, &id));
        ck_assert_int_eq(id, i);
        L8_CK_ST(l8_params_add(g, name, 1, (const int64_t[1]){ 1 }, NULL), L8_ERR_INVALID_ARG);
    }
    int id = 5;
    L8_CK_ST(l8_params_find(g, "layers.9999.mlp.weight", &id), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(id, -1);
    ck_assert_int_eq(l8_params_count(g), n);
    L8_CK(l8_params_finalize(g));
    ck_assert_int_eq(l8_params_buffer_numel(g), (int64_t)n * ALIGN);
    ck_assert_int_eq(l8_params_offset(g, n - 1), 0);
    ck_assert_int_eq(l8_params_offset(g, 0), (int64_t)(n - 1) * ALIGN);
    /* nobody reported: the error names the first ones and says it is cut */
    L8_CK_ST(l8_params_check_all_ready(g), L8_ERR_STATE);
    const char *msg = l8_last_error()->message;
    snprintf(name, sizeof name, "%d of %d parameters", n, n);
    ck_assert_msg(strstr(msg, name) && strstr(msg, "layers.0000.mlp.weight") &&
                  strstr(msg, "..."), "message: %s", msg);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- an empty group ---- */

START_TEST(test_empty_group)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_finalize(g));
    ck_assert_int_eq(l8_params_buffer_numel(g), 0);
    ck_assert_ptr_nonnull(l8_params_master_flat(g));
    ck_assert_int_eq(l8_tensor_numel(l8_params_grad_flat(g)), 0);
    L8_CK(l8_params_zero_grad(g, NULL));
    ck_assert(l8_params_all_ready(g));
    L8_CK(l8_params_check_all_ready(g));
    L8_CK_ST(l8_params_add(g, "late", 1, (const int64_t[1]){ 4 }, NULL), L8_ERR_STATE);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- initializers ---- */

static uint64_t ref_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

START_TEST(test_init)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = group_make(ctx, L8_F32, 1);
    int w = 1;                                            /* fc1.weight [64, 48] */
    size_t n = (size_t)l8_params_numel(g, w);
    float *a = xmalloc(n * sizeof *a), *b = xmalloc(n * sizeof *b);
    uint64_t seed = l8_test_seed();

    /* uniform: the documented generator, exactly */
    L8_CK(l8_params_init_uniform(g, w, -0.5f, 1.5f, seed));
    L8_CK(l8_params_get_host(g, w, a, n));
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float u = (float)(ref_splitmix(&s) >> 40) * 0x1p-24f;
        float t = 2.0f * u;
        float want = -0.5f + t;
        ck_assert_msg(a[i] == want, "uniform[%zu] = %.9g, want %.9g", i, (double)a[i],
                      (double)want);
        ck_assert(a[i] >= -0.5f && a[i] <= 1.5f);
    }
    /* same seed: same weights; another seed: others */
    L8_CK(l8_params_init_uniform(g, w, -0.5f, 1.5f, seed));
    L8_CK(l8_params_get_host(g, w, b, n));
    ck_assert(!memcmp(a, b, n * sizeof *a));
    L8_CK(l8_params_init_uniform(g, w, -0.5f, 1.5f, seed + 1));
    L8_CK(l8_params_get_host(g, w, b, n));
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += a[i] == b[i];
    ck_assert_uint_lt(same, n / 100);

    /* Kaiming uniform, a = sqrt(5): nn.Linear's bound 1/sqrt(fan_in) */
    L8_CK(l8_params_init_kaiming_uniform(g, w, sqrtf(5.0f), seed));
    L8_CK(l8_params_get_host(g, w, a, n));
    float bound = (float)(1.0 / sqrt(48.0)), amax = 0.0f;
    double mean = 0.0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(fabsf(a[i]) <= bound * (1.0f + 1e-6f), "kaiming[%zu] = %g > %g", i,
                      (double)a[i], (double)bound);
        amax = fmaxf(amax, fabsf(a[i]));
        mean += a[i];
    }
    ck_assert_msg(amax > 0.97f * bound, "max %g never near the bound %g", (double)amax,
                  (double)bound);
    ck_assert_msg(fabs(mean / (double)n) < 0.1 * bound, "mean %g", mean / (double)n);
    /* a = 0 (ReLU gain): bound sqrt(6 / fan_in) on conv.weight, fan_in 2*5*7 */
    L8_CK(l8_params_init_kaiming_uniform(g, 4, 0.0f, seed));
    float c[210];
    L8_CK(l8_params_get_host(g, 4, c, 210));
    for (int i = 0; i < 210; i++)
        ck_assert(fabsf(c[i]) <= (float)sqrt(6.0 / 70.0) * (1.0f + 1e-6f));

    /* fill; the neighbours are untouched */
    L8_CK(l8_params_fill(g, 2, 0.25f));
    float bias[64];
    L8_CK(l8_params_get_host(g, 2, bias, 64));
    for (int i = 0; i < 64; i++)
        ck_assert(bias[i] == 0.25f);
    float *flat = read_flat(l8_params_master_flat(g));
    int64_t o3 = l8_params_offset(g, 3), o0 = l8_params_offset(g, 0);
    ck_assert(flat[o3] == 0.0f);                          /* the scalar, never set */
    for (int64_t k = 0; k < 592; k++)
        ck_assert(flat[o0 + k] == 0.0f);                  /* embed.weight, never set */
    free(flat);

    /* bad arguments */
    L8_CK_ST(l8_params_init_kaiming_uniform(g, 2, 1.0f, seed), L8_ERR_INVALID_ARG); /* 1-D */
    L8_CK_ST(l8_params_init_kaiming_uniform(g, w, NAN, seed), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_init_uniform(g, w, 1.0f, -1.0f, seed), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_init_uniform(g, w, -INFINITY, 0.0f, seed), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_init_uniform(g, w, -3e38f, 3e38f, seed), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_fill(g, 99, 1.0f), L8_ERR_INVALID_ARG);
    free(a);
    free(b);
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
    l8_ctx *ctx = ctx_make(NULL, 0);
    l8_params *g = (l8_params *)1;
    L8_CK_ST(l8_params_create(NULL, NULL, &g), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(g);
    L8_CK_ST(l8_params_create(ctx, NULL, NULL), L8_ERR_INVALID_ARG);
    l8_params_config cfg = L8_PARAMS_CONFIG_INIT;
    cfg.grad_dtype = L8_E4M3;
    L8_CK_ST(l8_params_create(ctx, &cfg, &g), L8_ERR_INVALID_ARG);
    cfg.grad_dtype = L8_F16;
    L8_CK_ST(l8_params_create(ctx, &cfg, &g), L8_ERR_INVALID_ARG);
    cfg = (l8_params_config)L8_PARAMS_CONFIG_INIT;
    cfg.size = 4;
    L8_CK_ST(l8_params_create(ctx, &cfg, &g), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(g);

    L8_CK(l8_params_create(ctx, NULL, &g));
    int64_t sh[5] = { 2, 3, 4, 5, 6 };
    int id = 7;
    char longname[L8_PARAMS_NAME_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    L8_CK_ST(l8_params_add(g, NULL, 1, sh, &id), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(id, -1);
    L8_CK_ST(l8_params_add(g, "", 1, sh, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, longname, 1, sh, &id), L8_ERR_INVALID_ARG);
    longname[L8_PARAMS_NAME_MAX] = '\0';                  /* exactly the maximum: fine */
    L8_CK(l8_params_add(g, longname, 1, sh, &id));
    ck_assert_int_eq(id, 0);
    L8_CK_ST(l8_params_add(g, "w", 5, sh, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", -1, sh, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", 2, NULL, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", 2, (const int64_t[2]){ 4, 0 }, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", 2, (const int64_t[2]){ -4, 2 }, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", 2, (const int64_t[2]){ INT64_MAX / 2, 3 }, &id),
             L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_add(g, "w", 2, (const int64_t[2]){ (int64_t)1 << 40, 1 << 21 }, &id),
             L8_ERR_INVALID_ARG);
    /* a parameter that alone fits but takes the group over the limit */
    L8_CK(l8_params_add(g, "huge", 1, (const int64_t[1]){ ((int64_t)1 << 60) - 256 }, NULL));
    L8_CK_ST(l8_params_add(g, "w", 1, (const int64_t[1]){ 512 }, &id), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_params_count(g), 2);
    /* a failed add changed nothing: "w" is still free */
    l8_params_destroy(g);

    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "w", 2, sh, &id));
    L8_CK_ST(l8_params_add(g, "w", 1, sh, &id), L8_ERR_INVALID_ARG);     /* duplicate */
    ck_assert_int_eq(id, -1);
    L8_CK(l8_params_add(g, "b", 1, sh, &id));
    ck_assert_int_eq(id, 1);
    /* data before finalize */
    float x[6] = { 1, 2, 3, 4, 5, 6 };
    L8_CK_ST(l8_params_set_host(g, 0, x, 6), L8_ERR_STATE);
    L8_CK_ST(l8_params_fill(g, 0, 1.0f), L8_ERR_STATE);
    L8_CK_ST(l8_params_zero_grad(g, NULL), L8_ERR_STATE);
    L8_CK(l8_params_finalize(g));
    L8_CK_ST(l8_params_finalize(g), L8_ERR_STATE);
    L8_CK_ST(l8_params_add(g, "c", 1, sh, &id), L8_ERR_STATE);
    ck_assert_int_eq(l8_params_count(g), 2);
    /* sizes and ids */
    L8_CK_ST(l8_params_set_host(g, 0, x, 5), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_set_host(g, 0, NULL, 6), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_set_host(g, 2, x, 6), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_get_host(g, -1, x, 6), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_set_grad_host(g, 1, x, 6), L8_ERR_INVALID_ARG);   /* "b" has 2 */
    L8_CK_ST(l8_params_get_grad_host(g, 0, x, 7), L8_ERR_INVALID_ARG);
    L8_CK(l8_params_set_host(g, 0, x, 6));
    /* a stream of another context */
    l8_ctx *other = ctx_make(NULL, 0);
    L8_CK_ST(l8_params_zero_grad(g, l8_ctx_stream(other, L8_STREAM_COMPUTE)),
             L8_ERR_INVALID_ARG);
    ctx_finish(other);
    /* queries with bad input */
    ck_assert_ptr_null(l8_params_name(g, 2));
    ck_assert_ptr_null(l8_params_master(g, -1));
    ck_assert_ptr_null(l8_params_main_grad(g, 2));
    ck_assert_ptr_null(l8_params_master(NULL, 0));
    ck_assert_int_eq(l8_params_numel(g, 5), -1);
    ck_assert_int_eq(l8_params_count(NULL), 0);
    ck_assert_int_eq(l8_params_buffer_numel(NULL), -1);
    L8_CK_ST(l8_params_find(g, NULL, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_find(g, "w", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_params_finalize(NULL), L8_ERR_INVALID_ARG);
    l8_params_destroy(g);
    l8_params_destroy(NULL);
    ctx_finish(ctx);
}
END_TEST

/* ---- out of memory ---- */

/* 3M elements in two parameters: each buffer is 12 MB, above the
 * allocator's 10 MiB "mid" limit, so each gets a segment of its own. */
static l8_params *big_group(l8_ctx *ctx)
{
    l8_params *g = NULL;
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "a", 2, (const int64_t[2]){ 1500, 1000 }, NULL));
    L8_CK(l8_params_add(g, "b", 1, (const int64_t[1]){ 1500000 }, NULL));
    return g;
}

/* finalize meets the fault: OOM, nothing held, the group usable after. */
START_TEST(test_fault_injection)
{
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &host);
    /* fault-free: how many segments finalize asks for */
    l8_ctx *ctx = ctx_make(&fp.base, 0);
    l8_params *g = big_group(ctx);
    fp.calls = fp.failures = 0;
    L8_CK(l8_params_finalize(g));
    uint64_t calls = fp.calls;
    ck_assert_msg(calls >= 2, "finalize made %llu segment allocations: the test no longer "
                  "reaches both error paths", (unsigned long long)calls);
    l8_params_destroy(g);
    ctx_finish(ctx);

    for (uint64_t nth = 1; nth <= calls + 1; nth++) {
        ctx = ctx_make(&fp.base, 0);
        g = big_group(ctx);
        fp.calls = fp.failures = 0;
        fp.fail_nth = nth;
        fp.fail_sticky = 1;
        l8_status st = l8_params_finalize(g);
        if (nth <= calls) {
            ck_assert_msg(st == L8_ERR_OOM, "fault at %llu -> %s", (unsigned long long)nth,
                          l8_last_error_string());
            ck_assert_uint_gt(fp.failures, 0);
            ck_assert_int_eq(l8_params_is_finalized(g), 0);
            ck_assert_ptr_null(l8_params_master(g, 0));
            ck_assert_ptr_null(l8_params_main_grad(g, 1));
            ck_assert_ptr_null(l8_params_grad_flat(g));
            ck_assert_int_eq(l8_params_offset(g, 0), -1);
            ck_assert_int_eq(l8_params_buffer_numel(g), -1);
            l8_alloc_stats s = ctx_stats(ctx);
            ck_assert_uint_eq(s.allocated_bytes, 0);      /* nothing held */
            L8_CK(l8_alloc_check(l8_ctx_allocator(ctx)));
            /* still a group: take another parameter, then finalize for real */
            fp.fail_nth = 0;
            L8_CK(l8_params_add(g, "c", 1, (const int64_t[1]){ 10 }, NULL));
            L8_CK(l8_params_finalize(g));
            ck_assert_int_eq(l8_params_offset(g, 2), 0);
        } else {
            L8_CK(st);
        }
        float x[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, y[10];
        int last = l8_params_count(g) - 1;
        if (l8_params_numel(g, last) == 10) {
            L8_CK(l8_params_set_host(g, last, x, 10));
            L8_CK(l8_params_get_host(g, last, y, 10));
            ck_assert(!memcmp(x, y, sizeof x));
        }
        l8_params_destroy(g);
        ctx_finish(ctx);
        ck_assert_uint_eq(fp.live_bytes, 0);
    }
}
END_TEST

/* The allocator's limit is an OOM too; the context stays usable. With 20
 * MiB the master buffer fits and the grad buffer does not: the failure
 * comes after an allocation that must be undone. */
START_TEST(test_memory_limit)
{
    l8_ctx *ctx = ctx_make(NULL, 20u << 20);
    l8_params *g = big_group(ctx);                        /* 2 x 12 MB */
    L8_CK_ST(l8_params_finalize(g), L8_ERR_OOM);
    ck_assert_int_eq(l8_params_is_finalized(g), 0);
    ck_assert_uint_eq(ctx_stats(ctx).allocated_bytes, 0);
    l8_params_destroy(g);
    g = group_make(ctx, L8_BF16, 1);                      /* a small one fits */
    ck_assert_ptr_nonnull(l8_params_main_grad(g, 0));
    l8_params_destroy(g);
    ctx_finish(ctx);
}
END_TEST

Suite *l8_params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *layout = tcase_create("layout");
    tcase_add_test(layout, test_layout_f32);
    tcase_add_test(layout, test_layout_bf16);
    tcase_add_test(layout, test_bf16_grad_rounding);
    tcase_add_test(layout, test_views_never_null);
    tcase_add_test(layout, test_zero_grad);
    tcase_add_test(layout, test_many_params);
    tcase_add_test(layout, test_empty_group);
    tcase_add_test(layout, test_init);
    TCase *ready = tcase_create("grad_ready");
    tcase_add_test(ready, test_grad_ready);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_errors);
    tcase_add_test(errors, test_fault_injection);
    tcase_add_test(errors, test_memory_limit);
    TCase *all[] = { layout, ready, errors };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        tcase_set_tags(all[i], "host");
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    return s;
}
