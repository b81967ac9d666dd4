/* test_offload.c - activation offload (runtime/offload.h): the seed's
 * aliasing cases (one storage saved under two names, two views, a view and a
 * narrower view: one transfer of the whole storage each, every view restored
 * bit-exact, the weight usable meanwhile), the owner letting go while a copy
 * is in flight, fault injection (pinned pool full, no device memory to come
 * back to), states, prefetch and trace events, a reader thread during the
 * state changes, and offloaded training of a small MLP of Linear layers,
 * bitwise equal to training without offload. Each case runs on the host and
 * (tag gpu) on cuda:0, where storages are large enough for copies to be in
 * flight for real.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"

#define ST(ctx) l8_ctx_stream((ctx), L8_STREAM_COMPUTE)

static int g_gpu;                 /* the running case is a GPU one: bigger sizes */

static const char *dev_of(int gpu) { return gpu ? "cuda:0" : "host"; }

/* Bytes of the storages the aliasing cases use. */
static size_t big(void) { return g_gpu ? ((size_t)64 << 20) : ((size_t)3 << 20) / 2; }

static l8_ctx *ctx_pinned(const char *dev, size_t pinned_limit, size_t memory_limit)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = dev;
    cfg.pinned_limit = pinned_limit;
    cfg.memory_limit = memory_limit;
    L8_CK(l8_ctx_create(&cfg, &ctx));
    return ctx;
}

static l8_offload *mk_off(l8_ctx *ctx, size_t min_bytes, int prefetch, l8_trace *tr)
{
    l8_offload_config c = L8_OFFLOAD_CONFIG_INIT;
    c.min_bytes = min_bytes;
    c.prefetch_layers = prefetch;
    c.trace = tr;
    l8_offload *off = NULL;
    L8_CK(l8_offload_create(ctx, &c, &off));
    return off;
}

static l8_offload_stats stats(l8_offload *off)
{
    l8_offload_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_offload_get_stats(off, &s));
    return s;
}

static uint64_t dev_allocated(l8_ctx *ctx)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    return s.allocated_bytes;
}

static uint64_t pinned_live(l8_ctx *ctx)
{
    l8_pinned_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_pinned_get_stats(l8_ctx_pinned(ctx), &s));
    return s.allocated_bytes;
}

/* A storage of `bytes` filled with a seeded pattern (also returned in *ref). */
static l8_storage *pattern_storage(l8_ctx *ctx, size_t bytes, uint64_t salt, uint8_t **ref)
{
    l8_storage *st = NULL;
    L8_CK(l8_storage_create(ctx, bytes, NULL, &st));
    uint8_t *h = l8t_xmalloc(bytes);
    l8_rng r;
    l8_rng_init(&r, salt);
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = l8_rng_next(&r);
        memcpy(h + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    void *p = NULL;
    L8_CK(l8_storage_data(st, &p));
    L8_CK(l8_memcpy_htod(ST(ctx), p, h, bytes));
    L8_CK(l8_stream_synchronize(ST(ctx)));
    *ref = h;
    return st;
}

/* Assert that t's elements equal the reference bytes at t's offset (t is
 * contiguous). */
static void check_view(const l8_tensor *t, const uint8_t *ref, const char *what)
{
    size_t n = l8_tensor_nbytes(t);
    uint8_t *h = l8t_xmalloc(n);
    l8_stream *s = ST(l8_tensor_ctx(t));
    L8_CK(l8_tensor_copy_to_host(t, h, n, s));
    L8_CK(l8_stream_synchronize(s));
    ck_assert_msg(!memcmp(h, ref + l8_tensor_offset(t), n), "%s: restored bytes differ", what);
    free(h);
}

/* A u8 view [off, off + len) of st, as a 2-D tensor (rows of 256 bytes). */
static l8_tensor *view(l8_storage *st, size_t off, size_t len)
{
    int64_t shape[2] = { (int64_t)(len / 256), 256 };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_from_storage(st, off, L8_U8, 2, shape, NULL, &t));
    return t;
}

/* Take the block an offload just gave back and overwrite it, so that a
 * restore that did not copy the bytes back cannot pass by luck. */
static void scribble(l8_ctx *ctx, size_t bytes)
{
    l8_storage *st = NULL;
    void *p = NULL;
    L8_CK(l8_storage_create(ctx, bytes, NULL, &st));
    L8_CK(l8_storage_data(st, &p));
    L8_CK(l8_memset_d8(ST(ctx), p, 0xA5, bytes));
    L8_CK(l8_stream_synchronize(ST(ctx)));
    l8_storage_release(st);
}

/* ---- the seed: one storage saved under two names ---- */

static void seed_alias(int gpu)
{
    g_gpu = gpu;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    size_t B = big();
    uint8_t *ref = NULL;
    l8_storage *st = pattern_storage(ctx, B, 0x5eed, &ref);
    l8_tensor *weight = view(st, 0, B);         /* the owner's: the model uses it */
    l8_tensor *saved = view(st, 0, B);          /* what the layer saves, as TE did, twice */
    l8_storage_release(st);

    /* 1. the owner keeps the weight: one copy, nothing taken from it */
    L8_CK(l8_offload_save(off, saved, "fc1.weight", NULL));
    L8_CK(l8_offload_save(off, saved, "fc1.weightmat", NULL));
    l8_offload_stats s = stats(off);
    ck_assert_uint_eq(s.copies_out, 1);
    ck_assert_uint_eq(s.bytes_out, B);
    ck_assert_uint_eq(s.aliased, 1);
    ck_assert_uint_eq(s.entries, 1);
    L8_CK(l8_offload_wait(off));
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_KEPT);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_DEVICE);
    check_view(weight, ref, "the weight while its aliases are saved");   /* usable meanwhile */
    L8_CK(l8_offload_restore(off, saved, "fc1.weight", NULL));
    L8_CK(l8_offload_restore(off, saved, "fc1.weightmat", NULL));
    check_view(saved, ref, "both names");
    l8_offload_release(off, saved, "fc1.weight");
    ck_assert_uint_eq(stats(off).entries, 1);
    l8_offload_release(off, saved, "fc1.weightmat");
    s = stats(off);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.copies_in, 0);          /* the bytes never left the device */
    ck_assert_uint_eq(s.released, 0);

    /* 2. the owner lets go: the device block goes, once, and comes back once */
    l8_tensor_destroy(weight);
    uint64_t before = dev_allocated(ctx);
    L8_CK(l8_offload_save(off, saved, "fc1.weight", NULL));
    L8_CK(l8_offload_save(off, saved, "fc1.weightmat", NULL));
    L8_CK(l8_offload_wait(off));
    s = stats(off);
    ck_assert_uint_eq(s.copies_out, 2);         /* one more, not two */
    ck_assert_uint_eq(s.released, 1);
    ck_assert_uint_eq(s.device_bytes_freed, B);
    ck_assert_uint_eq(dev_allocated(ctx), before - B);
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_HOST);
    void *p = NULL;
    L8_CK_ST(l8_tensor_data(saved, &p), L8_ERR_STATE);
    scribble(ctx, B);
    L8_CK(l8_offload_restore(off, saved, "fc1.weightmat", NULL));
    L8_CK(l8_offload_restore(off, saved, "fc1.weight", NULL));
    s = stats(off);
    ck_assert_uint_eq(s.copies_in, 1);
    ck_assert_uint_eq(s.bytes_in, B);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_DEVICE);
    check_view(saved, ref, "both names after the round trip");
    l8_offload_release(off, saved, "fc1.weightmat");
    l8_offload_release(off, saved, "fc1.weight");
    ck_assert_uint_eq(stats(off).host_bytes, 0);

    /* 3. a parameter is never offloaded, however often it is saved */
    l8_params *g = NULL;
    int64_t wsh[2] = { 64, 64 };
    int id = 0;
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "w", 2, wsh, &id));
    L8_CK(l8_params_finalize(g));
    L8_CK(l8_params_fill(g, id, 0.5f));
    l8_tensor *w = l8_params_master(g, id);
    L8_CK(l8_offload_save(off, w, "fc2.weight", NULL));
    L8_CK(l8_offload_save(off, w, "fc2.weightmat", NULL));
    L8_CK(l8_offload_wait(off));
    s = stats(off);
    ck_assert_uint_eq(s.kept_resident, 2);
    ck_assert_uint_eq(s.copies_out, 2);
    float v = 0;
    float *hw = l8t_xmalloc(64 * 64 * sizeof(float));
    L8_CK(l8_params_get_host(g, id, hw, 64 * 64));
    v = hw[4095];
    ck_assert(v == 0.5f);
    free(hw);
    l8_offload_release(off, w, "fc2.weight");
    l8_offload_release(off, w, "fc2.weightmat");
    l8_params_destroy(g);

    l8_tensor_destroy(saved);
    free(ref);
    l8_offload_destroy(off);
    ck_assert_uint_eq(pinned_live(ctx), 0);
    l8t_ctx_finish(ctx);
}

/* ---- two views; a view and a narrower view ---- */

static void views_case(int gpu, int nested)
{
    g_gpu = gpu;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    size_t B = big();
    uint8_t *ref = NULL;
    l8_storage *st = pattern_storage(ctx, B, 0x71e5 + (uint64_t)nested, &ref);
    l8_tensor *a, *b;
    if (nested) {                       /* the whole, and a middle part of it */
        a = view(st, 0, B);
        L8_CK(l8_tensor_narrow(a, 0, (int64_t)(B / 256 / 4), (int64_t)(B / 256 / 3), &b));
    } else {                            /* two halves */
        a = view(st, 0, B / 2);
        b = view(st, B / 2, B / 2);
    }
    l8_storage_release(st);
    L8_CK(l8_offload_save(off, a, "x.a", NULL));
    L8_CK(l8_offload_save(off, b, "x.b", NULL));
    L8_CK(l8_offload_wait(off));
    l8_offload_stats s = stats(off);
    ck_assert_uint_eq(s.copies_out, 1);
    ck_assert_uint_eq(s.bytes_out, B);          /* the whole storage, once */
    ck_assert_uint_eq(s.released, 1);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_HOST);
    scribble(ctx, B);
    /* restoring through the narrower view brings the whole storage back */
    L8_CK(l8_offload_restore(off, b, "x.b", NULL));
    check_view(b, ref, "second view");
    check_view(a, ref, "first view, restored through the second");
    L8_CK(l8_offload_restore(off, a, "x.a", NULL));
    s = stats(off);
    ck_assert_uint_eq(s.copies_in, 1);
    l8_offload_release(off, a, "x.a");
    l8_offload_release(off, b, "x.b");
    l8_tensor_destroy(a);
    l8_tensor_destroy(b);
    free(ref);
    ck_assert_uint_eq(stats(off).entries, 0);
    l8_offload_destroy(off);
    ck_assert_uint_eq(pinned_live(ctx), 0);
    l8t_ctx_finish(ctx);
}

/* ---- owners letting go while the copy is in flight ---- */

static void owner_release_case(int gpu)
{
    g_gpu = gpu;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    size_t B = big();
    uint8_t *ref = NULL;
    /* one alias goes mid-copy; the other is restored intact */
    l8_storage *st = pattern_storage(ctx, B, 0x0a1, &ref);
    l8_tensor *a = view(st, 0, B), *b = view(st, 0, B);
    l8_storage_release(st);
    L8_CK(l8_offload_save(off, a, "a", NULL));
    L8_CK(l8_offload_save(off, b, "b", NULL));
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);   /* copy may run */
    l8_offload_release(off, a, "a");
    l8_tensor_destroy(a);
    L8_CK(l8_offload_wait(off));
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);
    L8_CK(l8_offload_restore(off, b, "b", NULL));
    check_view(b, ref, "the alias left behind");
    l8_offload_release(off, b, "b");
    l8_tensor_destroy(b);
    free(ref);

    /* the last reference goes mid-copy; the block is then handed out again
     * and overwritten at once on the compute stream */
    st = pattern_storage(ctx, B, 0x0a2, &ref);
    a = view(st, 0, B);
    l8_storage_release(st);
    L8_CK(l8_offload_save(off, a, "a", NULL));
    l8_offload_release(off, a, "a");
    l8_tensor_destroy(a);               /* the storage's last reference */
    ck_assert_uint_eq(stats(off).entries, 0);
    l8_storage *st2 = NULL;
    void *p = NULL;
    L8_CK(l8_storage_create(ctx, B, NULL, &st2));
    L8_CK(l8_storage_data(st2, &p));
    L8_CK(l8_memset_d8(ST(ctx), p, 0xFF, B));
    L8_CK(l8_ctx_synchronize(ctx));
    l8_storage_release(st2);
    free(ref);
    L8_CK(l8_offload_wait(off));
    ck_assert_uint_eq(stats(off).host_bytes, 0);
    l8_offload_destroy(off);
    ck_assert_uint_eq(pinned_live(ctx), 0);
    l8t_ctx_finish(ctx);
}

/* ---- fault injection ---- */

static void faults_case(int gpu)
{
    g_gpu = gpu;
    const size_t MB = (size_t)1 << 20;
    /* pinned pool full: a clear error, the storage stays on the device intact */
    l8_ctx *ctx = ctx_pinned(dev_of(gpu), MB, 16 * MB);
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    uint8_t *ref = NULL;
    l8_storage *st = pattern_storage(ctx, 2 * MB, 0xfa1, &ref);
    l8_tensor *t = view(st, 0, 2 * MB);
    l8_storage_release(st);
    L8_CK_ST(l8_offload_save(off, t, "big.x", NULL), L8_ERR_OOM);
    ck_assert_msg(strstr(l8_last_error()->message, "stays on the device") != NULL, "%s",
                  l8_last_error_string());
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_NONE);
    ck_assert_int_eq(l8_storage_state_of(st), L8_STORAGE_DEVICE);
    ck_assert_uint_eq(stats(off).entries, 0);
    L8_CK(l8_offload_restore(off, t, "big.x", NULL));     /* nothing registered: a no-op */
    check_view(t, ref, "a storage whose save failed");
    l8_offload_release(off, t, "big.x");
    l8_tensor_destroy(t);
    free(ref);

    /* no device memory to come back to: OOM, the data waits in pinned memory */
    st = pattern_storage(ctx, MB / 2, 0xfa2, &ref);
    t = view(st, 0, MB / 2);
    l8_storage_release(st);
    L8_CK(l8_offload_save(off, t, "small.x", NULL));
    L8_CK(l8_offload_wait(off));
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);
    l8_storage *fill[64];
    int nf = 0;
    while (nf < 64 && l8_storage_create(ctx, MB / 2, NULL, &fill[nf]) == L8_OK) nf++;
    ck_assert_int_lt(nf, 64);
    L8_CK(l8_offload_backward_layer(off, 1));             /* the prefetch is put off */
    ck_assert_uint_eq(stats(off).prefetch_deferred, 1);
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);
    L8_CK_ST(l8_offload_restore(off, t, "small.x", NULL), L8_ERR_OOM);
    ck_assert_msg(strstr(l8_last_error()->message, "pinned host memory") != NULL, "%s",
                  l8_last_error_string());
    ck_assert_int_eq(l8_offload_state_of(off, st), L8_OFFLOAD_ON_HOST);
    while (nf) l8_storage_release(fill[--nf]);
    L8_CK(l8_offload_restore(off, t, "small.x", NULL));   /* retried: works */
    check_view(t, ref, "restored after an OOM");
    l8_offload_release(off, t, "small.x");
    l8_tensor_destroy(t);
    free(ref);

    /* bad input */
    l8_offload_config bad = L8_OFFLOAD_CONFIG_INIT;
    l8_offload *o2 = NULL;
    bad.size = 4;                       /* does not even cover the size field */
    L8_CK_ST(l8_offload_create(ctx, &bad, &o2), L8_ERR_INVALID_ARG);
    bad = (l8_offload_config)L8_OFFLOAD_CONFIG_INIT;
    bad.prefetch_layers = -1;
    L8_CK_ST(l8_offload_create(ctx, &bad, &o2), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_offload_create(NULL, NULL, &o2), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(o2);
    L8_CK_ST(l8_offload_save(NULL, NULL, "x", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_offload_save(off, NULL, "x", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_offload_forward_layer(off, -1, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_offload_backward_layer(off, -2), L8_ERR_INVALID_ARG);
    l8_offload_stats small = { .size = 4 };
    L8_CK_ST(l8_offload_get_stats(off, &small), L8_ERR_INVALID_ARG);
    l8_ctx *other = l8t_ctx("host", NULL, 0);
    int64_t sh[1] = { 4096 };
    l8_tensor *ot = NULL;
    L8_CK(l8_tensor_empty(other, L8_U8, 1, sh, &ot));
    L8_CK_ST(l8_offload_save(off, ot, "x", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_offload_restore(off, ot, "x", NULL), L8_ERR_INVALID_ARG);
    l8_offload_release(off, ot, "x");                     /* unknown: no-op */
    l8_tensor_destroy(ot);
    l8t_ctx_finish(other);
    l8_offload_release(NULL, NULL, NULL);
    l8_offload_destroy(NULL);
    l8_offload_destroy(off);
    ck_assert_uint_eq(pinned_live(ctx), 0);
    l8t_ctx_finish(ctx);
}

/* ---- layers: threshold, disabled layers, prefetch, trace events ---- */

static void layers_case(int gpu)
{
    g_gpu = gpu;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    l8_trace *tr = NULL;
    L8_CK(l8_trace_create(&tc, &tr));
    size_t B = big();
    l8_offload *off = mk_off(ctx, B, 1, tr);
    uint8_t *ref[4] = { 0 };
    l8_tensor *t[4];
    l8_storage *st[4];
    for (int i = 0; i < 4; i++) {
        st[i] = pattern_storage(ctx, i == 3 ? B - 4096 : B, 0x1a0 + (uint64_t)i, &ref[i]);
        t[i] = view(st[i], 0, l8_storage_bytes(st[i]));
        l8_storage_release(st[i]);
    }
    /* layers 0..2 offload; layer 3 is disabled and its storage is small anyway */
    for (int i = 0; i < 4; i++) {
        L8_CK(l8_offload_forward_layer(off, i, i < 3));
        L8_CK(l8_offload_save(off, t[i], "x", NULL));
    }
    L8_CK(l8_offload_forward_layer(off, 4, 0));
    L8_CK(l8_offload_save(off, t[0], "again", NULL));     /* an alias in a disabled layer */
    L8_CK(l8_offload_wait(off));
    l8_offload_stats s = stats(off);
    ck_assert_uint_eq(s.copies_out, 3);
    ck_assert_uint_eq(s.kept_small, 1);
    ck_assert_uint_eq(s.aliased, 1);
    ck_assert_int_eq(l8_offload_state_of(off, st[3]), L8_OFFLOAD_NONE);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(l8_offload_state_of(off, st[i]), L8_OFFLOAD_ON_HOST);
    /* backward of layer 2: it comes back and layer 1 is prefetched */
    L8_CK(l8_offload_backward_layer(off, 2));
    ck_assert_int_eq(l8_offload_state_of(off, st[0]), L8_OFFLOAD_ON_HOST);
    ck_assert_uint_eq(stats(off).prefetches, 1);
    ck_assert_uint_eq(stats(off).copies_in, 2);
    for (int i = 3; i >= 0; i--) {
        L8_CK(l8_offload_backward_layer(off, i));
        L8_CK(l8_offload_restore(off, t[i], "x", NULL));
        check_view(t[i], ref[i], "layer after backward_layer");
        l8_offload_release(off, t[i], "x");
    }
    l8_offload_release(off, t[0], "again");
    ck_assert_uint_eq(stats(off).entries, 0);
    size_t n = l8_trace_held(tr), outs = 0, ins = 0;
    l8_trace_event *ev = l8t_xmalloc(n * sizeof *ev + 1);
    ck_assert_uint_eq(l8_trace_events(tr, 0, ev, n), n);
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == L8_TRACE_OFFLOAD_OUT) { outs++; ck_assert_uint_eq(ev[i].size, B); }
        if (ev[i].kind == L8_TRACE_OFFLOAD_IN) { ins++; ck_assert(ev[i].aux != 0); }
    }
    ck_assert_uint_eq(outs, 3);
    ck_assert_uint_eq(ins, 3);
    free(ev);
    /* bytes still on the device when their backward nears stay there, even
     * once the other holder lets go */
    uint8_t *r5 = NULL;
    l8_storage *s5 = pattern_storage(ctx, B, 0x1b0, &r5);
    l8_tensor *t5 = view(s5, 0, B), *h5 = view(s5, 0, B);
    l8_storage_release(s5);
    L8_CK(l8_offload_forward_layer(off, 0, 1));
    L8_CK(l8_offload_save(off, t5, "x", NULL));
    L8_CK(l8_offload_wait(off));
    ck_assert_int_eq(l8_offload_state_of(off, s5), L8_OFFLOAD_KEPT);
    L8_CK(l8_offload_backward_layer(off, 1));
    l8_tensor_destroy(h5);
    L8_CK(l8_offload_poll(off));
    ck_assert_int_eq(l8_offload_state_of(off, s5), L8_OFFLOAD_KEPT);
    uint64_t kept = stats(off).kept_in_place;
    L8_CK(l8_offload_restore(off, t5, "x", NULL));
    ck_assert_int_eq(l8_offload_state_of(off, s5), L8_OFFLOAD_RESTORED);
    ck_assert_uint_eq(stats(off).kept_in_place, kept + 1);
    check_view(t5, r5, "kept for its backward");
    l8_offload_release(off, t5, "x");
    l8_tensor_destroy(t5);
    free(r5);
    for (int i = 0; i < 4; i++) { l8_tensor_destroy(t[i]); free(ref[i]); }
    l8_offload_destroy(off);
    l8_trace_destroy(tr);
    l8t_ctx_finish(ctx);
}

/* ---- a reader thread while the state changes ---- */

typedef struct reader {
    l8_tensor *t;
    atomic_int stop;
    long seen[3], bad;
} reader;

static void *read_loop(void *arg)
{
    reader *r = arg;
    while (!atomic_load(&r->stop)) {
        l8_storage_state s = l8_storage_state_of(l8_tensor_storage(r->t));
        void *p = NULL;
        l8_status st = l8_tensor_data(r->t, &p);
        if ((unsigned)s > 2) r->bad++;
        else r->seen[s]++;
        if (st == L8_OK && !p) r->bad++;              /* a pointer only when there is one */
        if (st != L8_OK && st != L8_ERR_STATE) r->bad++;
    }
    return NULL;
}

static void readers_case(int gpu)
{
    g_gpu = gpu;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    size_t B = gpu ? ((size_t)8 << 20) : 65536;
    uint8_t *ref = NULL;
    l8_storage *st = pattern_storage(ctx, B, 0x4ead, &ref);
    reader r = { .t = view(st, 0, B) };
    atomic_init(&r.stop, 0);
    l8_storage_release(st);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, read_loop, &r), 0);
    int rounds = l8_test_quick() ? 10 : 100;
    for (int i = 0; i < rounds; i++) {
        L8_CK(l8_offload_save(off, r.t, "x", NULL));
        L8_CK(l8_offload_wait(off));
        if (i % 4 == 0) scribble(ctx, B);
        L8_CK(l8_offload_backward_layer(off, 0));
        L8_CK(l8_offload_restore(off, r.t, "x", NULL));
        l8_offload_release(off, r.t, "x");
    }
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_eq(r.bad, 0);
    check_view(r.t, ref, "after the rounds");
    ck_assert_uint_eq(stats(off).released, (uint64_t)rounds);
    l8_tensor_destroy(r.t);
    free(ref);
    l8_offload_destroy(off);
    l8t_ctx_finish(ctx);
}

/* ---- offloaded training of a small MLP is bitwise the same ---- */

#define MLP_L 3
static const int64_t k_dims[MLP_L + 1] = { 64, 48, 32, 16 };

typedef struct mlp {
    l8_params *g;
    l8_optim *opt;
    l8_recipe *rec;
    l8_linear *lin[MLP_L];
    int wid[MLP_L], bid[MLP_L];
    l8_offload *off;
} mlp;

static l8_tensor *mk2(l8_ctx *ctx, l8_dtype dt, int64_t a, int64_t b)
{
    int64_t sh[2] = { a, b };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, b ? 2 : 1, sh, &t));
    return t;
}

static void mlp_init(mlp *m, l8_ctx *ctx, l8_gemm_handle *h, int fp8, l8_offload *off)
{
    memset(m, 0, sizeof *m);
    m->off = off;
    L8_CK(l8_params_create(ctx, NULL, &m->g));
    for (int i = 0; i < MLP_L; i++) {
        int64_t w[2] = { k_dims[i + 1], k_dims[i] }, b[1] = { k_dims[i + 1] };
        char name[32];
        snprintf(name, sizeof name, "fc%d.w", i);
        L8_CK(l8_params_add(m->g, name, 2, w, &m->wid[i]));
        snprintf(name, sizeof name, "fc%d.b", i);
        L8_CK(l8_params_add(m->g, name, 1, b, &m->bid[i]));
    }
    L8_CK(l8_params_finalize(m->g));
    for (int i = 0; i < MLP_L; i++) {
        L8_CK(l8_params_init_kaiming_uniform(m->g, m->wid[i], 2.2f, 11 + (uint64_t)i));
        L8_CK(l8_params_init_uniform(m->g, m->bid[i], -0.1f, 0.1f, 17 + (uint64_t)i));
    }
    l8_sgd_config sc = L8_SGD_CONFIG_INIT;
    sc.lr = 0.05f;
    sc.momentum = 0.9f;
    L8_CK(l8_optim_create_sgd(m->g, &sc, &m->opt));
    if (fp8) L8_CK(l8_recipe_create(ctx, NULL, &m->rec));
    l8_save_hooks hk = L8_SAVE_HOOKS_INIT;
    hk.save = l8_offload_save;
    hk.restore = l8_offload_restore;
    hk.release = l8_offload_release;
    hk.arg = off;
    for (int i = 0; i < MLP_L; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        l8_linear_config lc = L8_LINEAR_CONFIG_INIT;
        lc.name = name;
        lc.mode = fp8 ? L8_LINEAR_FP8 : L8_LINEAR_BF16;
        lc.gemm = h;
        lc.recipe = m->rec;
        lc.weight = l8_params_master(m->g, m->wid[i]);
        lc.weight_grad = l8_params_main_grad(m->g, m->wid[i]);
        lc.bias = l8_params_master(m->g, m->bid[i]);
        lc.bias_grad = l8_params_main_grad(m->g, m->bid[i]);
        lc.weight_id = m->wid[i];
        lc.bias_id = m->bid[i];
        lc.save_hooks = off ? &hk : NULL;
        L8_CK(l8_linear_create(ctx, &lc, &m->lin[i]));
    }
}

static void mlp_free(mlp *m)
{
    for (int i = 0; i < MLP_L; i++) l8_linear_destroy(m->lin[i]);
    l8_optim_destroy(m->opt);
    l8_recipe_destroy(m->rec);
    l8_params_destroy(m->g);
}

/* One training step on (x, labels); per-row losses into loss. Activations
 * are fresh each step and dropped once read, so the saved tensors are their
 * storages' only holders and offload can give their device memory back. */
static void mlp_step(mlp *m, l8_ctx *ctx, const l8_tensor *x, const l8_tensor *labels,
                     l8_tensor *loss)
{
    l8_stream *s = ST(ctx);
    int64_t T = l8_tensor_dim(x, 0);
    l8_tensor *act = NULL, *pre[MLP_L] = { 0 }, *hit = mk2(ctx, L8_I32, T, 0);
    l8_linear_ctx *saved[MLP_L] = { 0 };
    L8_CK(l8_tensor_contiguous(x, s, &act));
    for (int i = 0; i < MLP_L; i++) {
        L8_CK(l8_linear_begin_step(m->lin[i]));
        if (m->off) L8_CK(l8_offload_forward_layer(m->off, i, 1));
        pre[i] = mk2(ctx, L8_BF16, T, k_dims[i + 1]);
        L8_CK(l8_linear_forward(m->lin[i], act, pre[i], &saved[i], s));
        l8_tensor_destroy(act);
        act = NULL;
        if (i + 1 < MLP_L) {
            act = mk2(ctx, L8_BF16, T, k_dims[i + 1]);
            L8_CK(l8_gelu(pre[i], act, s));
        }
    }
    l8_tensor *dy = mk2(ctx, L8_BF16, T, k_dims[MLP_L]);
    L8_CK(l8_softmax_xent(pre[MLP_L - 1], labels, 10, 1.0f / (float)T, dy, loss, hit, s));
    for (int i = MLP_L - 1; i >= 0; i--) {
        if (m->off) L8_CK(l8_offload_backward_layer(m->off, i));
        l8_tensor *dx = i > 0 ? mk2(ctx, L8_BF16, T, k_dims[i]) : NULL;
        L8_CK(l8_linear_backward(m->lin[i], &saved[i], dy, dx, s));
        l8_tensor_destroy(dy);
        if (i > 0) L8_CK(l8_gelu_backward(pre[i - 1], dx, dx, s));
        dy = dx;
    }
    L8_CK(l8_optim_step(m->opt, s, NULL));
    if (m->rec) L8_CK(l8_recipe_update(m->rec, s));
    for (int i = 0; i < MLP_L; i++) l8_tensor_destroy(pre[i]);
    l8_tensor_destroy(hit);
}

static void *host_of(l8_ctx *ctx, const l8_tensor *t)
{
    size_t n = l8_tensor_nbytes(t);
    void *h = l8t_xmalloc(n);
    L8_CK(l8_tensor_copy_to_host(t, h, n, ST(ctx)));
    L8_CK(l8_stream_synchronize(ST(ctx)));
    return h;
}

static void mlp_case(int gpu, int bf16)
{
    g_gpu = gpu;
    const int64_t T = gpu ? 4096 : 32;
    const int steps = 4;
    l8_ctx *ctx = l8t_ctx(dev_of(gpu), NULL, 0);
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, NULL, &h));
    l8_offload *off = mk_off(ctx, 0, 1, NULL);
    mlp a, b;
    mlp_init(&a, ctx, h, !bf16, off);
    mlp_init(&b, ctx, h, !bf16, NULL);
    l8_rng r;
    l8_rng_init(&r, 0x3177 + (uint64_t)bf16);
    float *xf = l8t_xmalloc((size_t)(T * k_dims[0]) * sizeof *xf);
    int32_t *lab = l8t_xmalloc((size_t)T * sizeof *lab);
    l8_tensor *xs = mk2(ctx, L8_F32, T, k_dims[0]), *x = mk2(ctx, L8_BF16, T, k_dims[0]);
    l8_tensor *labels = mk2(ctx, L8_I32, T, 0);
    l8_tensor *la = mk2(ctx, L8_F32, T, 0), *lb = mk2(ctx, L8_F32, T, 0);
    for (int step = 0; step < steps; step++) {
        for (int64_t i = 0; i < T * k_dims[0]; i++) xf[i] = l8_rng_float(&r, -2.0f, 2.0f);
        for (int64_t i = 0; i < T; i++) lab[i] = (int32_t)l8_rng_below(&r, 10);
        L8_CK(l8_tensor_copy_from_host(xs, xf, (size_t)(T * k_dims[0]) * sizeof *xf, NULL));
        L8_CK(l8_tensor_copy_from_host(labels, lab, (size_t)T * sizeof *lab, NULL));
        L8_CK(l8_convert(xs, x, NULL));
        mlp_step(&a, ctx, x, labels, la);
        mlp_step(&b, ctx, x, labels, lb);
        float *ha = host_of(ctx, la), *hb = host_of(ctx, lb);
        ck_assert_msg(!memcmp(ha, hb, (size_t)T * sizeof *ha),
                      "step %d: losses differ with offload (%g vs %g)", step, ha[0], hb[0]);
        free(ha);
        free(hb);
    }
    float *wa = host_of(ctx, l8_params_master_flat(a.g)), *wb = host_of(ctx, l8_params_master_flat(b.g));
    ck_assert_msg(!memcmp(wa, wb, l8_tensor_nbytes(l8_params_master_flat(a.g))),
                  "weights differ after %d offloaded steps", steps);
    free(wa);
    free(wb);
    l8_offload_stats s = stats(off);
    ck_assert_uint_eq(s.copies_out, (uint64_t)(steps * MLP_L));
    ck_assert_uint_ge(s.released, 1);           /* device memory really went */
    ck_assert_uint_ge(s.prefetches, (uint64_t)steps);   /* layer 1 ahead of its backward */
    ck_assert_uint_eq(s.kept_in_place, (uint64_t)steps); /* the last layer: no round trip */
    ck_assert_uint_eq(s.copies_in, (uint64_t)(steps * (MLP_L - 1)));
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.host_bytes, 0);
    mlp_free(&a);
    mlp_free(&b);
    l8_tensor *all[] = { xs, x, labels, la, lb };
    for (size_t i = 0; i < 5; i++) l8_tensor_destroy(all[i]);
    free(xf);
    free(lab);
    l8_offload_destroy(off);
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
}

START_TEST(test_seed_alias) { seed_alias(0); }
END_TEST
START_TEST(test_two_views) { views_case(0, 0); }
END_TEST
START_TEST(test_nested_views) { views_case(0, 1); }
END_TEST
START_TEST(test_owner_release) { owner_release_case(0); }
END_TEST
START_TEST(test_faults) { faults_case(0); }
END_TEST
START_TEST(test_layers) { layers_case(0); }
END_TEST
START_TEST(test_readers) { readers_case(0); }
END_TEST
START_TEST(test_mlp) { mlp_case(0, _i); }
END_TEST
START_TEST(test_gpu_seed_alias) { seed_alias(1); }
END_TEST
START_TEST(test_gpu_views) { views_case(1, 0); views_case(1, 1); }
END_TEST
START_TEST(test_gpu_owner_release) { owner_release_case(1); }
END_TEST
START_TEST(test_gpu_faults) { faults_case(1); }
END_TEST
START_TEST(test_gpu_layers) { layers_case(1); }
END_TEST
START_TEST(test_gpu_readers) { readers_case(1); }
END_TEST
START_TEST(test_gpu_mlp) { mlp_case(1, _i); }
END_TEST

Suite *l8_offload_suite(void)
{
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_seed_alias);
    tcase_add_test(tc, test_two_views);
    tcase_add_test(tc, test_nested_views);
    tcase_add_test(tc, test_owner_release);
    tcase_add_test(tc, test_faults);
    tcase_add_test(tc, test_layers);
    tcase_add_test(tc, test_readers);
    tcase_add_loop_test(tc, test_mlp, 0, 2);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 600);
    tcase_add_test(tg, test_gpu_seed_alias);
    tcase_add_test(tg, test_gpu_views);
    tcase_add_test(tg, test_gpu_owner_release);
    tcase_add_test(tg, test_gpu_faults);
    tcase_add_test(tg, test_gpu_layers);
    tcase_add_test(tg, test_gpu_readers);
    tcase_add_loop_test(tg, test_gpu_mlp, 0, 2);
    suite_add_tcase(s, tg);
    return s;
}
