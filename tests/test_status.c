/* test_status.c - status names, the last-error record, device selection. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"

START_TEST(test_names_and_ranges)
{
    ck_assert_str_eq(l8_status_name(L8_OK), "L8_OK");
    ck_assert_str_eq(l8_status_name(L8_ERR_OOM), "L8_ERR_OOM");
    ck_assert_str_eq(l8_status_name((l8_status)999), "L8_ERR_UNKNOWN");
    ck_assert(l8_status_is_caller_error(L8_ERR_INVALID_ARG));
    ck_assert(l8_status_is_caller_error(L8_ERR_UNSUPPORTED));
    ck_assert(!l8_status_is_caller_error(L8_ERR_OOM));
    ck_assert(!l8_status_is_caller_error(L8_ERR_CUDA));
    ck_assert(!l8_status_is_caller_error(L8_ERR_INTERNAL));
    ck_assert(!l8_status_is_caller_error(L8_OK));
}
END_TEST

START_TEST(test_last_error_record)
{
    l8_error_clear();
    ck_assert_int_eq(l8_last_error()->status, L8_OK);
    ck_assert_str_eq(l8_last_error_string(), "no error");
    l8_status st = l8_error_set(L8_ERR_CUDA, 2, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc_v2",
                                "alloc/cache.c", 42, "asked for %d bytes", 512);
    ck_assert_int_eq(st, L8_ERR_CUDA);
    const l8_error *e = l8_last_error();
    ck_assert_int_eq(e->status, L8_ERR_CUDA);
    ck_assert_int_eq(e->foreign_code, 2);
    ck_assert_str_eq(e->foreign_name, "CUDA_ERROR_OUT_OF_MEMORY");
    ck_assert_str_eq(e->call, "cuMemAlloc_v2");
    ck_assert_int_eq(e->line, 42);
    ck_assert_str_eq(e->message, "asked for 512 bytes");
    const char *s = l8_last_error_string();
    ck_assert_ptr_nonnull(strstr(s, "L8_ERR_CUDA"));
    ck_assert_ptr_nonnull(strstr(s, "cuMemAlloc_v2 failed with CUDA_ERROR_OUT_OF_MEMORY (2)"));
    ck_assert_ptr_nonnull(strstr(s, "asked for 512 bytes"));
    /* a message longer than the record is truncated, not overflowed */
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    (void)L8_FAIL(L8_ERR_INVALID_ARG, "%s", big);
    ck_assert_uint_lt(strlen(l8_last_error()->message), 2048);
    /* a message built from the previous one */
    (void)L8_FAIL(L8_ERR_IO, "again: %.10s", l8_last_error()->message);
    ck_assert_str_eq(l8_last_error()->message, "again: xxxxxxxxxx");
    /* the bindings' form: the text as it is (a % is no format), no location */
    ck_assert_int_eq(l8_error_set_text(L8_ERR_INVALID_ARG, "l8_ctx_create", "limit -1 < 0%s"),
                     L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_last_error()->foreign_code, 0);
    ck_assert_str_eq(l8_last_error()->call, "l8_ctx_create");
    ck_assert_str_eq(l8_last_error_string(),
                     "L8_ERR_INVALID_ARG: l8_ctx_create failed: limit -1 < 0%s");
    (void)l8_error_set_text(L8_ERR_STATE, NULL, NULL);
    ck_assert_str_eq(l8_last_error_string(), "L8_ERR_STATE: ");
    l8_error_clear();
    ck_assert_int_eq(l8_last_error()->status, L8_OK);
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    /* a fresh thread starts with no error, whatever the main thread has */
    int clean = l8_last_error()->status == L8_OK;
    (void)L8_FAIL(L8_ERR_TIMEOUT, "thread");
    return (void *)(intptr_t)clean;
}

START_TEST(test_last_error_is_per_thread)
{
    (void)L8_FAIL(L8_ERR_STATE, "main");
    pthread_t th;
    void *ret = NULL;
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(th, &ret), 0);
    ck_assert_int_eq((int)(intptr_t)ret, 1);
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_STATE);
    ck_assert_str_eq(l8_last_error()->message, "main");
}
END_TEST

START_TEST(test_device_strings)
{
    const char *bad[] = {"gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999", "", "CUDA:0", "host "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
        l8_ctx *ctx = (l8_ctx *)1;
        cfg.device = bad[i];
        l8_status st = l8_ctx_create(&cfg, &ctx);
        /* "" falls back to the default device; everything else is refused */
        if (bad[i][0] == '\0') { ck_assert_int_eq(st, L8_OK); l8_ctx_destroy(ctx); continue; }
        ck_assert_msg(st == L8_ERR_INVALID_ARG, "%s -> %s", bad[i], l8_status_name(st));
        ck_assert_ptr_null(ctx);
        ck_assert_ptr_nonnull(strstr(l8_last_error()->message, bad[i]));
    }
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = "host";
    L8_CK(l8_ctx_create(&cfg, &ctx));
    ck_assert_int_eq(l8_ctx_backend(ctx), L8_BACKEND_HOST);
    ck_assert_int_eq(l8_ctx_device(ctx), -1);
    ck_assert_str_eq(l8_ctx_device_name(ctx), "host");
    l8_ctx_destroy(ctx);
    ck_assert_int_eq(l8_ctx_create(NULL, NULL), L8_ERR_INVALID_ARG);
    cfg.size = 4;   /* a config struct from the future or garbage */
    ck_assert_int_eq(l8_ctx_create(&cfg, &ctx), L8_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_cuda_absent_is_an_error_not_a_crash)
{
    /* Where there is no GPU, asking for one is a clean L8_ERR_NO_DEVICE;
     * where there is one, asking for an ordinal past the last is. */
    int n = l8_cuda_device_count();
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = n == 0 ? "cuda:0" : "cuda:4000";
    ck_assert_int_eq(l8_ctx_create(&cfg, &ctx), L8_ERR_NO_DEVICE);
    ck_assert_ptr_null(ctx);
    ck_assert_uint_gt(strlen(l8_last_error()->message), 10);
}
END_TEST

START_TEST(test_host_streams_and_events)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL, *ctx2 = NULL;
    cfg.device = "host";
    /* high_priority: a mask of the three streams, checked on every backend */
    cfg.high_priority = 1u << 3;
    ck_assert_int_eq(l8_ctx_create(&cfg, &ctx), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "high_priority is 0x8"));
    cfg.high_priority = 1u << L8_STREAM_COMPUTE | 1u << L8_STREAM_COPY;
    L8_CK(l8_ctx_create(&cfg, &ctx));
    cfg.high_priority = 0;
    L8_CK(l8_ctx_create(&cfg, &ctx2));
    l8_stream *c = l8_ctx_stream(ctx, L8_STREAM_COMPUTE), *m = l8_ctx_stream(ctx, L8_STREAM_COMM);
    ck_assert_ptr_nonnull(c);
    int prio = 7;
    L8_CK(l8_stream_priority(c, &prio));
    ck_assert_int_eq(prio, 0);                    /* the host has none */
    ck_assert_int_eq(l8_stream_priority(NULL, &prio), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_stream_priority(c, NULL), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(l8_ctx_stream(ctx, (l8_stream_kind)7));
    ck_assert_uint_ne(l8_stream_handle(c), l8_stream_handle(m));
    l8_event *e = NULL, *e2 = NULL;
    int done = 0;
    L8_CK(l8_event_create(ctx, 1, &e));
    L8_CK(l8_event_create(ctx2, 0, &e2));
    L8_CK(l8_event_record(e, c));
    L8_CK(l8_stream_wait_event(m, e));
    L8_CK(l8_event_query(e, &done));
    ck_assert_int_eq(done, 1);
    L8_CK(l8_event_synchronize(e));
    ck_assert_int_eq(l8_stream_wait_event(m, e2), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(l8_event_record(e2, c), L8_ERR_INVALID_ARG);
    /* raw copies run at once on the host */
    void *a = NULL, *b = NULL;
    L8_CK(l8_ctx_malloc(ctx, 1000, c, &a));
    L8_CK(l8_ctx_malloc(ctx, 1000, m, &b));
    L8_CK(l8_memset_d8(c, a, 0x5a, 1000));
    L8_CK(l8_memcpy_dtod(c, b, a, 1000));
    ck_assert_int_eq(((unsigned char *)b)[999], 0x5a);
    ck_assert_int_eq(l8_ctx_malloc(ctx, 10, l8_ctx_stream(ctx2, L8_STREAM_COMPUTE), &a),
                     L8_ERR_INVALID_ARG);
    L8_CK(l8_ctx_free(ctx, a));
    L8_CK(l8_ctx_free(ctx, b));
    L8_CK(l8_ctx_synchronize(ctx));
    l8_event_destroy(e);
    l8_event_destroy(e2);
    l8_event_destroy(NULL);
    l8_ctx_destroy(ctx);
    l8_ctx_destroy(ctx2);
    l8_ctx_destroy(NULL);
}
END_TEST

Suite *l8_status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("status");
    tcase_set_tags(tc, "host");
    tcase_add_test(tc, test_names_and_ranges);
    tcase_add_test(tc, test_last_error_record);
    tcase_add_test(tc, test_last_error_is_per_thread);
    tcase_add_test(tc, test_device_strings);
    tcase_add_test(tc, test_cuda_absent_is_an_error_not_a_crash);
    tcase_add_test(tc, test_host_streams_and_events);
    suite_add_tcase(s, tc);
    return s;
}
