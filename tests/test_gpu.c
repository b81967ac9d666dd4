/* test_gpu.c - the runtime on a real GPU: contexts, streams and events, the
 * caching allocator over cuMemAlloc (cross-stream reuse shown with real
 * copies that would corrupt data otherwise), the pinned pool over
 * cuMemHostAlloc, tensors and the strided-copy kernel against the host.
 *
 * Tag "gpu": the runner runs these in-process (CK_NOFORK) only when a CUDA
 * device is usable; each test creates and destroys its own context.
 */
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "runtime/internal.h"
#include "ops/elementwise.h"

static l8_ctx *gpu_ctx(size_t memory_limit)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = "cuda:0";
    cfg.memory_limit = memory_limit;
    l8_status st = l8_ctx_create(&cfg, &ctx);
    ck_assert_msg(st == L8_OK, "cuda:0: %s", l8_last_error_string());
    return ctx;
}

static void done_ctx(l8_ctx *ctx)
{
    l8_alloc_stats s = { .size = sizeof s };
    L8_CK(l8_ctx_synchronize(ctx));
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    ck_assert_msg(s.allocated_bytes == 0, "%llu bytes still allocated",
                  (unsigned long long)s.allocated_bytes);
    L8_CK(l8_alloc_check(l8_ctx_allocator(ctx)));
    l8_ctx_destroy(ctx);
}

/* l8_ctx_create(device) fails with want, no context, and a last error that
 * names `names` (its own error, not one from the cleanup). */
static void create_fails(const char *device, l8_status want, const char *names)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *none = NULL;
    cfg.device = device;
    ck_assert_int_eq(l8_ctx_create(&cfg, &none), want);
    ck_assert_ptr_null(none);
    ck_assert_msg(strstr(l8_last_error_string(), names) != NULL, "%s", l8_last_error_string());
}

START_TEST(test_gpu_context_and_events)
{
    create_fails("cuda:4000", L8_ERR_NO_DEVICE, "cuda:4000");
    l8_ctx *ctx = gpu_ctx(0);
    ck_assert_int_eq(l8_ctx_backend(ctx), L8_BACKEND_CUDA);
    ck_assert_int_eq(l8_ctx_device(ctx), 0);
    ck_assert_uint_gt(strlen(l8_ctx_device_name(ctx)), 0);
    l8_stream *c = l8_ctx_stream(ctx, L8_STREAM_COMPUTE), *k = l8_ctx_stream(ctx, L8_STREAM_COPY);
    ck_assert_uint_ne(l8_stream_handle(c), l8_stream_handle(k));
    l8_event *e0 = NULL, *e1 = NULL;
    L8_CK(l8_event_create(ctx, 1, &e0));
    L8_CK(l8_event_create(ctx, 1, &e1));
    void *a = NULL, *b = NULL;
    size_t n = 256u << 20;
    L8_CK(l8_ctx_malloc(ctx, n, c, &a));
    L8_CK(l8_ctx_malloc(ctx, n, c, &b));
    L8_CK(l8_event_record(e0, c));
    for (int i = 0; i < 8; i++) L8_CK(l8_memcpy_dtod(c, b, a, n));
    L8_CK(l8_event_record(e1, c));
    L8_CK(l8_stream_wait_event(k, e1));     /* copy stream waits for compute */
    L8_CK(l8_event_synchronize(e1));
    int done = 0;
    L8_CK(l8_event_query(e1, &done));
    ck_assert_int_eq(done, 1);
    float ms = 0;
    L8_CK(l8_event_elapsed_ms(e0, e1, &ms));
    ck_assert_msg(ms > 0.0f && ms < 10000.0f, "elapsed %f ms", ms);
    L8_CK(l8_ctx_free(ctx, a));
    L8_CK(l8_ctx_free(ctx, b));
    l8_event_destroy(e0);
    l8_event_destroy(e1);
    /* default priorities; then compute and copy above comm (high_priority) */
    int pc = 1, pm = 1, pk = 1;
    L8_CK(l8_stream_priority(c, &pc));
    L8_CK(l8_stream_priority(k, &pk));
    ck_assert_int_eq(pc, 0);
    ck_assert_int_eq(pk, 0);
    done_ctx(ctx);
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    cfg.device = "cuda:0";
    cfg.high_priority = 1u << L8_STREAM_COMPUTE | 1u << L8_STREAM_COPY;
    L8_CK(l8_ctx_create(&cfg, &ctx));
    L8_CK(l8_stream_priority(l8_ctx_stream(ctx, L8_STREAM_COMPUTE), &pc));
    L8_CK(l8_stream_priority(l8_ctx_stream(ctx, L8_STREAM_COMM), &pm));
    L8_CK(l8_stream_priority(l8_ctx_stream(ctx, L8_STREAM_COPY), &pk));
    ck_assert_msg(pc < 0 && pk == pc && pm == 0, "priorities compute %d comm %d copy %d", pc, pm,
                  pk);
    done_ctx(ctx);
}
END_TEST

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Keep stream s busy for a while: big device copies queued ahead. */
static void *busy(l8_ctx *ctx, l8_stream *s, size_t bytes, int times)
{
    void *x = NULL;
    L8_CK(l8_ctx_malloc(ctx, 2 * bytes, s, &x));
    for (int i = 0; i < times; i++) L8_CK(l8_memcpy_dtod(s, (char *)x + bytes, x, bytes));
    return x;
}

/* A block freed while the copy stream still reads it must not be handed to
 * the compute stream (which would overwrite it) before the copy is done. */
START_TEST(test_gpu_cross_stream_reuse)
{
    l8_ctx *ctx = gpu_ctx(0);
    l8_alloc *al = l8_ctx_allocator(ctx);
    l8_stream *c = l8_ctx_stream(ctx, L8_STREAM_COMPUTE), *k = l8_ctx_stream(ctx, L8_STREAM_COPY);
    const size_t n = 64u << 20;
    unsigned char *host = malloc(n);
    ck_assert_ptr_nonnull(host);
    for (int recorded = 0; recorded < 2; recorded++) {
        void *src = NULL, *dst = NULL, *again = NULL;
        L8_CK(l8_ctx_malloc(ctx, n, c, &src));
        L8_CK(l8_ctx_malloc(ctx, n, k, &dst));
        L8_CK(l8_memset_d8(c, src, 0xAB, n));
        L8_CK(l8_stream_synchronize(c));
        void *slow = busy(ctx, k, 1u << 30, 12);          /* ~tens of ms on the copy stream */
        L8_CK(l8_memcpy_dtod(k, dst, src, n));             /* reads src late */
        if (recorded) L8_CK(l8_alloc_record_stream(al, src, l8_stream_handle(k)));
        L8_CK(l8_ctx_free(ctx, src));
        L8_CK(l8_ctx_malloc(ctx, n, c, &again));
        if (recorded) {
            ck_assert_msg(again != src, "a block still read by the copy stream was handed out");
            L8_CK(l8_memset_d8(c, again, 0xCD, n));        /* would corrupt src if it were src */
        } else {
            /* without record_stream the allocator may (and does) reuse at once:
             * this is the hazard record_stream exists for */
            ck_assert_ptr_eq(again, src);
        }
        L8_CK(l8_ctx_synchronize(ctx));
        L8_CK(l8_memcpy_dtoh(k, host, dst, n));
        L8_CK(l8_stream_synchronize(k));
        if (recorded) ck_assert_msg(all_bytes(host, n, 0xAB), "the copy saw overwritten data");
        if (recorded) {
            /* once the copy stream's event has completed, src (an exact fit)
             * is reusable by the compute stream again */
            void *later = NULL;
            L8_CK(l8_ctx_malloc(ctx, n, c, &later));
            ck_assert_ptr_eq(later, src);
            L8_CK(l8_ctx_free(ctx, later));
        }
        L8_CK(l8_ctx_free(ctx, again));
        L8_CK(l8_ctx_free(ctx, dst));
        L8_CK(l8_ctx_free(ctx, slow));
    }
    free(host);
    done_ctx(ctx);
}
END_TEST

/* The compute stream's malloc never waits for the comm stream's work while
 * it can grow: x, still read by the comm stream, is skipped, and a probe
 * event recorded on the comm stream before x's free is still incomplete
 * when the malloc returns (had it waited for x's event, the probe would be
 * done). Out of memory (a limit), the malloc waits for the comm stream and
 * gets x back. */
START_TEST(test_gpu_malloc_does_not_wait_for_comm)
{
    const size_t n = 256u << 20, gib = 1u << 30;
    /* what a context reserves by itself (a throwaway one) */
    l8_ctx *ctx = gpu_ctx(0);
    l8_alloc_stats s0 = { .size = sizeof s0 };
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s0));
    l8_ctx_destroy(ctx);
    for (int limited = 0; limited < 2; limited++) {
        /* the limit: room for the busy buffer (2 GiB), x, and 128 MiB */
        ctx = gpu_ctx(limited ? s0.reserved_bytes + 2 * gib + n + (128u << 20) : 0);
        l8_alloc *al = l8_ctx_allocator(ctx);
        l8_stream *c = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
        l8_stream *m = l8_ctx_stream(ctx, L8_STREAM_COMM);
        void *x = NULL, *y = NULL;
        l8_event *probe = NULL;
        L8_CK(l8_event_create(ctx, 0, &probe));
        L8_CK(l8_ctx_malloc(ctx, n, c, &x));
        void *slow = busy(ctx, m, gib, 400);               /* ~0.2-0.5 s on the comm stream */
        L8_CK(l8_event_record(probe, m));
        L8_CK(l8_memcpy_dtod(m, slow, x, 4096));           /* the comm stream reads x */
        L8_CK(l8_alloc_record_stream(al, x, l8_stream_handle(m)));
        L8_CK(l8_ctx_free(ctx, x));
        l8_alloc_stats before = { .size = sizeof before };
        L8_CK(l8_alloc_get_stats(al, &before));
        if (limited)
            ck_assert_uint_eq(before.reserved_bytes, s0.reserved_bytes + 2 * gib + n);
        L8_CK(l8_ctx_malloc(ctx, n, c, &y));
        int done = -1;
        L8_CK(l8_event_query(probe, &done));
        l8_alloc_stats after = { .size = sizeof after };
        L8_CK(l8_alloc_get_stats(al, &after));
        if (!limited) {
            ck_assert_msg(y != x, "a block the comm stream still reads was handed out");
            ck_assert_msg(done == 0, "the compute stream's malloc waited for the comm stream "
                          "(or the busy work took less time than one malloc)");
            ck_assert_uint_eq(after.segment_allocs, before.segment_allocs + 1);
            ck_assert_uint_eq(after.retries, before.retries);
        } else {
            ck_assert_ptr_eq(y, x);                        /* it waited for the comm stream */
            ck_assert_int_eq(done, 1);
            ck_assert_uint_eq(after.retries, before.retries + 1);
            ck_assert_uint_eq(after.ooms, before.ooms);
        }
        L8_CK(l8_ctx_synchronize(ctx));
        L8_CK(l8_ctx_free(ctx, y));
        L8_CK(l8_ctx_free(ctx, slow));
        l8_event_destroy(probe);
        done_ctx(ctx);
    }
}
END_TEST

START_TEST(test_gpu_allocator_stress_and_oom)
{
    l8_ctx *ctx = gpu_ctx(256u << 20);
    l8_alloc *al = l8_ctx_allocator(ctx);
    l8_rng r;
    l8_rng_init(&r, 71);
    enum { N = 200 };
    void *live[N] = {0};
    l8_stream *ss[2] = { l8_ctx_stream(ctx, L8_STREAM_COMPUTE), l8_ctx_stream(ctx, L8_STREAM_COMM) };
    for (int i = 0; i < 5000; i++) {
        int k = (int)l8_rng_below(&r, N);
        if (live[k]) { L8_CK(l8_ctx_free(ctx, live[k])); live[k] = NULL; continue; }
        size_t bytes = l8_rng_below(&r, 4) ? 1 + l8_rng_below(&r, 200000) : 1 + l8_rng_below(&r, 8u << 20);
        l8_status st = l8_ctx_malloc(ctx, bytes, ss[k & 1], &live[k]);
        ck_assert_msg(st == L8_OK || st == L8_ERR_OOM, "%s", l8_last_error_string());
        if (st != L8_OK) live[k] = NULL;
        if (i % 500 == 0) L8_CK(l8_alloc_check(al));
    }
    for (int k = 0; k < N; k++) L8_CK(l8_ctx_free(ctx, live[k]));
    /* a request past the limit: OOM with the allocator's state in the message */
    void *big = NULL;
    L8_CK_ST(l8_ctx_malloc(ctx, 512u << 20, NULL, &big), L8_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "reserved"));
    L8_CK(l8_alloc_check(al));
    L8_CK(l8_ctx_malloc(ctx, 128u << 20, NULL, &big));     /* still usable */
    L8_CK(l8_ctx_free(ctx, big));
    L8_CK(l8_alloc_empty_cache(al));
    l8_alloc_stats s = { .size = sizeof s };
    L8_CK(l8_alloc_get_stats(al, &s));
    ck_assert_uint_eq(s.reserved_bytes, 0);
    done_ctx(ctx);
}
END_TEST

/* Pinned blocks used by an async copy are not handed out until it is done. */
START_TEST(test_gpu_pinned_pool)
{
    l8_ctx *ctx = gpu_ctx(0);
    l8_pinned *p = l8_ctx_pinned(ctx);
    l8_stream *k = l8_ctx_stream(ctx, L8_STREAM_COPY);
    const size_t n = 32u << 20;
    unsigned char *h = NULL, *h2 = NULL;
    void *d = NULL;
    L8_CK(l8_pinned_alloc(p, n, (void **)&h));
    memset(h, 0x3C, n);
    L8_CK(l8_ctx_malloc(ctx, n, k, &d));
    void *slow = busy(ctx, k, 1u << 30, 12);
    L8_CK(l8_memcpy_htod(k, d, h, n));            /* async: reads h later */
    L8_CK(l8_pinned_record_stream(p, h, l8_stream_handle(k)));
    L8_CK(l8_pinned_free(p, h));
    L8_CK(l8_pinned_alloc(p, n, (void **)&h2));
    ck_assert_msg(h2 != h, "a pinned block still read by a copy was handed out");
    memset(h2, 0x00, n);
    L8_CK(l8_stream_synchronize(k));
    unsigned char *back = malloc(n);
    ck_assert_ptr_nonnull(back);
    L8_CK(l8_memcpy_dtoh(k, back, d, n));
    L8_CK(l8_stream_synchronize(k));
    ck_assert(all_bytes(back, n, 0x3C));
    free(back);
    L8_CK(l8_pinned_free(p, h2));
    L8_CK(l8_ctx_free(ctx, d));
    L8_CK(l8_ctx_free(ctx, slow));
    done_ctx(ctx);
}
END_TEST

/* Strided copies through the PTX kernel equal the host backend's. */
START_TEST(test_gpu_tensor_views_match_host)
{
    l8_ctx *g = gpu_ctx(0);
    l8_ctx_config hc = L8_CTX_CONFIG_INIT;
    l8_ctx *h = NULL;
    hc.device = "host";
    L8_CK(l8_ctx_create(&hc, &h));
    l8_rng r;
    l8_rng_init(&r, 5);
    const l8_dtype dts[] = { L8_F32, L8_BF16, L8_E4M3, L8_I32, L8_U8 };
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        int64_t shape[3] = { 1 + (int64_t)l8_rng_below(&r, 7), 1 + (int64_t)l8_rng_below(&r, 300),
                             1 + (int64_t)l8_rng_below(&r, 129) };
        l8_tensor *tg = NULL, *th = NULL, *vg = NULL, *vh = NULL, *cg = NULL, *ch = NULL;
        L8_CK(l8_tensor_empty(g, dts[di], 3, shape, &tg));
        L8_CK(l8_tensor_empty(h, dts[di], 3, shape, &th));
        size_t nb = l8_tensor_nbytes(tg);
        unsigned char *in = malloc(nb), *og = malloc(nb), *oh = malloc(nb);
        ck_assert(in && og && oh);
        for (size_t i = 0; i < nb; i++) in[i] = (unsigned char)l8_rng_next(&r);
        L8_CK(l8_tensor_copy_from_host(tg, in, nb, NULL));
        L8_CK(l8_tensor_copy_from_host(th, in, nb, NULL));
        /* the same chain of views on both: transpose(0,2), narrow, slice */
        l8_tensor *t1g = NULL, *t1h = NULL;
        L8_CK(l8_tensor_transpose(tg, 0, 2, &t1g));
        L8_CK(l8_tensor_transpose(th, 0, 2, &t1h));
        int64_t len = l8_tensor_dim(t1g, 1) > 2 ? l8_tensor_dim(t1g, 1) - 2 : 1;
        L8_CK(l8_tensor_narrow(t1g, 1, l8_tensor_dim(t1g, 1) > 2 ? 1 : 0, len, &vg));
        L8_CK(l8_tensor_narrow(t1h, 1, l8_tensor_dim(t1h, 1) > 2 ? 1 : 0, len, &vh));
        L8_CK(l8_tensor_contiguous(vg, NULL, &cg));
        L8_CK(l8_tensor_contiguous(vh, NULL, &ch));
        size_t vb = l8_tensor_nbytes(cg);
        memset(og, 0xA5, nb);
        memset(oh, 0x5A, nb);
        L8_CK(l8_tensor_copy_to_host(cg, og, vb, NULL));
        L8_CK(l8_tensor_copy_to_host(ch, oh, vb, NULL));
        L8_CK(l8_ctx_synchronize(g));
        ck_assert_msg(memcmp(og, oh, vb) == 0, "dtype %s: GPU strided copy differs from host",
                      l8_dtype_name(dts[di]));
        l8_tensor *all[] = { tg, th, vg, vh, cg, ch, t1g, t1h };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) l8_tensor_destroy(all[i]);
        free(in); free(og); free(oh);
    }
    l8_ctx_destroy(h);
    done_ctx(g);
}
END_TEST

START_TEST(test_gpu_kernel_errors)
{
    l8_ctx *ctx = gpu_ctx(0);
    CUfunction f = NULL;
    L8_CK(l8i_kernel(ctx, "copy", "l8_copy_strided", &f));
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(l8i_kernel(ctx, "copy", "no_such_kernel", &f), L8_ERR_CUDA);
    ck_assert_str_eq(l8_last_error()->call, "cuModuleGetFunction");
    ck_assert_int_eq(l8i_kernel(ctx, "no_such_module", "k", &f), L8_ERR_INTERNAL);
    done_ctx(ctx);
}
END_TEST

/* Programmatic dependent launch: a chain of kernels where each reads what
 * the one before wrote (x += 1 repeated, then x += bf16(x)) gives the exact
 * count with PDL on (the default on sm_90) and off (L8_PDL=0); a kernel
 * that ran ahead of its wait would lose increments. L8_PDL=2 is refused. */
static void pdl_chain(const char *env, int want_pdl)
{
    setenv("L8_PDL", env, 1);
    l8_ctx *ctx = gpu_ctx(0);
    ck_assert_int_eq(l8i_ctx_pdl(ctx), want_pdl);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    const int64_t n = (int64_t)4 << 20;
    const int reps = 200;
    float *h = calloc((size_t)n, sizeof *h);
    ck_assert_ptr_nonnull(h);
    l8_tensor *x = NULL, *one = NULL, *xb = NULL;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &one));
    L8_CK(l8_tensor_empty(ctx, L8_BF16, 1, &n, &xb));
    L8_CK(l8_tensor_copy_from_host(x, h, (size_t)n * sizeof *h, s));
    for (int64_t i = 0; i < n; i++) h[i] = 1.0f;
    L8_CK(l8_tensor_copy_from_host(one, h, (size_t)n * sizeof *h, s));
    for (int r = 0; r < reps; r++) L8_CK(l8_add_into(x, one, s));
    L8_CK(l8_convert(x, xb, s));                  /* 200: exact in bf16 */
    L8_CK(l8_add_into(x, xb, s));
    L8_CK(l8_tensor_copy_to_host(x, h, (size_t)n * sizeof *h, s));
    L8_CK(l8_stream_synchronize(s));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (h[i] != 2.0f * reps && bad++ == 0) first = i;
    ck_assert_msg(bad == 0, "L8_PDL=%s: %lld of %lld elements wrong, first [%lld] = %g (want %d)",
                  env, (long long)bad, (long long)n, (long long)first, first >= 0 ? h[first] : 0.0,
                  2 * reps);
    l8_tensor_destroy(x);
    l8_tensor_destroy(one);
    l8_tensor_destroy(xb);
    free(h);
    done_ctx(ctx);
}

START_TEST(test_gpu_pdl_chain)
{
    const char *old = getenv("L8_PDL");
    char *keep = old ? strdup(old) : NULL;
    pdl_chain("1", 1);
    pdl_chain("0", 0);
    setenv("L8_PDL", "2", 1);
    create_fails("cuda:0", L8_ERR_INVALID_ARG, "L8_PDL");
    if (keep) setenv("L8_PDL", keep, 1);
    else unsetenv("L8_PDL");
    free(keep);
}
END_TEST

Suite *l8_gpu_suite(void)
{
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("runtime");
    tcase_set_tags(tc, "gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gpu_context_and_events);
    tcase_add_test(tc, test_gpu_cross_stream_reuse);
    tcase_add_test(tc, test_gpu_allocator_stress_and_oom);
    tcase_add_test(tc, test_gpu_malloc_does_not_wait_for_comm);
    tcase_add_test(tc, test_gpu_pinned_pool);
    tcase_add_test(tc, test_gpu_tensor_views_match_host);
    tcase_add_test(tc, test_gpu_kernel_errors);
    tcase_add_test(tc, test_gpu_pdl_chain);
    suite_add_tcase(s, tc);
    return s;
}
