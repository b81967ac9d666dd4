/* test_abi.c - what an embedder relies on (suite "abi", host): the
 * struct-size rule of every versioned config struct, seen from a caller
 * built against other headers; the config init functions; a context
 * destroyed too early.
 *
 * An "older" caller is a struct that stops after some field, followed in
 * memory by bytes the library must not read (0xA5: a pointer made of them
 * crashes, a size made of them is refused). A "newer" caller is our struct
 * with fields appended: accepted when they are zero, refused otherwise.
 */
#include <stdint.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"

#define GARBAGE 0xA5

/* An older caller's struct: the first `n` bytes of `full`, then garbage. */
static void *older(void *buf, size_t cap, const void *full, size_t n)
{
    memset(buf, GARBAGE, cap);
    memcpy(buf, full, n);
    memcpy(buf, &n, sizeof n);            /* its size field says how long it is */
    return buf;
}

START_TEST(test_ctx_config_older_and_newer)
{
    _Alignas(16) unsigned char buf[256];
    l8_ctx_config c = L8_CTX_CONFIG_INIT;
    c.device = "host";
    l8_ctx *ctx = NULL;
    /* version "0": size and device only; memory_limit, pinned_limit and
     * provider (0xA5... would be dereferenced) take their defaults */
    size_t v0 = offsetof(l8_ctx_config, device) + sizeof c.device;
    L8_CK(l8_ctx_create(older(buf, sizeof buf, &c, v0), &ctx));
    ck_assert_int_eq(l8_ctx_backend(ctx), L8_BACKEND_HOST);
    l8_ctx_destroy(ctx);

    struct { l8_ctx_config c; uint64_t future[2]; } newer;
    memset(&newer, 0, sizeof newer);
    newer.c = c;
    newer.c.size = sizeof newer;
    L8_CK(l8_ctx_create(&newer.c, &ctx));                     /* zero tail: accepted */
    l8_ctx_destroy(ctx);
    newer.future[1] = 1;
    L8_CK_ST(l8_ctx_create(&newer.c, &ctx), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "unknown tail is not zero"));

    c.size = sizeof(size_t) - 1;                               /* not even its size field */
    L8_CK_ST(l8_ctx_create(&c, &ctx), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "L8_CTX_CONFIG_INIT"));
}
END_TEST

START_TEST(test_alloc_trace_gemm_older)
{
    _Alignas(16) unsigned char buf[256];
    /* trace: size and path; capacity (0xA5...: "too large") takes the default */
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    l8_trace *t = NULL;
    L8_CK(l8_trace_create(older(buf, sizeof buf, &tc, offsetof(l8_trace_config, capacity)), &t));
    l8_trace_destroy(t);

    /* allocator: size only; the trace pointer would be written through */
    l8_alloc_config ac = L8_ALLOC_CONFIG_INIT;
    l8_segment_provider prov;
    l8_host_provider(&prov);
    l8_alloc *a = NULL;
    L8_CK(l8_alloc_create(older(buf, sizeof buf, &ac, sizeof(size_t)), &prov, &a));
    void *p = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, 0, &p));                 /* no limit, no trace */
    L8_CK(l8_alloc_free(a, p));
    l8_alloc_destroy(a);

    /* GEMM: size and workspace_bytes; autotune 0xA5A5A5A5 would be refused */
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_gemm_config gc = L8_GEMM_CONFIG_INIT;
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, older(buf, sizeof buf, &gc, offsetof(l8_gemm_config, autotune)),
                                &h));
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
}
END_TEST

/* A bf16 layer's config over h with fresh 8 x 16 weight and gradient
 * tensors (*w, *wg: the caller destroys them). */
static l8_linear_config small_layer(l8_ctx *ctx, l8_gemm_handle *h, l8_tensor **w, l8_tensor **wg)
{
    int64_t shape[2] = { 8, 16 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, shape, w));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, shape, wg));
    l8_linear_config lc = L8_LINEAR_CONFIG_INIT;
    lc.mode = L8_LINEAR_BF16;
    lc.gemm = h;
    lc.weight = *w;
    lc.weight_grad = *wg;
    return lc;
}

START_TEST(test_linear_config_older)
{
    _Alignas(16) unsigned char buf[512];
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, NULL, &h));
    l8_tensor *w = NULL, *wg = NULL;
    l8_linear_config lc = small_layer(ctx, h, &w, &wg);
    /* before save_hooks existed: 0xA5... there would be copied through */
    l8_linear *l = NULL;
    L8_CK(l8_linear_create(ctx, older(buf, sizeof buf, &lc, offsetof(l8_linear_config, save_hooks)),
                           &l));
    l8_linear_destroy(l);
    /* cut before `gemm`: the default (NULL) is refused by name */
    L8_CK_ST(l8_linear_create(ctx, older(buf, sizeof buf, &lc, offsetof(l8_linear_config, gemm)), &l),
             L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "cfg->gemm"));
    l8_tensor_destroy(w);
    l8_tensor_destroy(wg);
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
}
END_TEST

/* The stats rule: an older caller's shorter struct gets its prefix and
 * nothing past it is written; a newer caller's longer struct gets zeros past
 * this library's fields; size says how much was filled; a size covering no
 * field is refused. One getter of each shape: locked (alloc, GEMM), plain
 * (Linear). */
START_TEST(test_stats_older_and_newer)
{
    _Alignas(16) unsigned char buf[512];
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_alloc *a = l8_ctx_allocator(ctx);
    void *p = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, 0, &p));
    l8_alloc_stats full = { .size = sizeof full };
    L8_CK(l8_alloc_get_stats(a, &full));
    ck_assert_uint_eq(full.size, sizeof full);
    ck_assert_uint_gt(full.allocated_bytes, 0);
    size_t cut = offsetof(l8_alloc_stats, allocated_bytes) + sizeof full.allocated_bytes;
    l8_alloc_stats tmp = { .size = cut };
    older(buf, sizeof buf, &tmp, cut);
    L8_CK(l8_alloc_get_stats(a, (l8_alloc_stats *)buf));
    ck_assert_uint_eq(((l8_alloc_stats *)buf)->size, cut);
    ck_assert_uint_eq(((l8_alloc_stats *)buf)->allocated_bytes, full.allocated_bytes);
    for (size_t i = cut; i < sizeof buf; i++) ck_assert_uint_eq(buf[i], GARBAGE);

    struct { l8_alloc_stats s; uint64_t future[2]; } newer;
    memset(&newer, GARBAGE, sizeof newer);
    newer.s.size = sizeof newer;
    L8_CK(l8_alloc_get_stats(a, &newer.s));
    ck_assert_uint_eq(newer.s.size, sizeof newer.s);
    ck_assert_uint_eq(newer.s.allocated_bytes, full.allocated_bytes);
    ck_assert(newer.future[0] == 0 && newer.future[1] == 0);
    L8_CK(l8_alloc_free(a, p));

    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, NULL, &h));
    l8_gemm_stats gs;
    memset(&gs, GARBAGE, sizeof gs);
    gs.size = sizeof(size_t) + 1;                            /* one byte of a field */
    L8_CK(l8_gemm_get_stats(h, &gs));
    ck_assert_uint_eq(gs.size, sizeof(size_t) + 1);
    gs.size = sizeof(size_t);                                /* no field at all */
    L8_CK_ST(l8_gemm_get_stats(h, &gs), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "l8_gemm_get_stats: stats->size 8"));

    l8_tensor *w = NULL, *wg = NULL;
    l8_linear_config lc = small_layer(ctx, h, &w, &wg);
    l8_linear *l = NULL;
    L8_CK(l8_linear_create(ctx, &lc, &l));
    l8_linear_stats ls = { .size = sizeof ls };
    L8_CK(l8_linear_get_stats(l, &ls));
    ck_assert_uint_eq(ls.size, sizeof ls);
    l8_linear_stats lo = { .size = sizeof(size_t) + sizeof(uint64_t) };   /* its first field */
    L8_CK(l8_linear_get_stats(l, older(buf, sizeof buf, &lo, lo.size)));
    ck_assert_uint_eq(((l8_linear_stats *)buf)->size, sizeof(size_t) + sizeof(uint64_t));
    for (size_t i = lo.size; i < sizeof buf; i++) ck_assert_uint_eq(buf[i], GARBAGE);
    l8_linear_destroy(l);
    l8_tensor_destroy(w);
    l8_tensor_destroy(wg);
    l8_gemm_handle_destroy(h);
    l8t_ctx_finish(ctx);
}
END_TEST

/* The l8_*_config_init() functions give the _INIT macros' values (field by
 * field: padding bytes are not part of the value), over garbage. */
#define INIT_FN(type, fn, f) type f; memset(&f, GARBAGE, sizeof f); fn(&f); fn(NULL); \
    ck_assert_uint_eq(f.size, sizeof(type))

START_TEST(test_config_init_functions)
{
    INIT_FN(l8_ctx_config, l8_ctx_config_init, cc);
    ck_assert(cc.device == NULL && cc.memory_limit == 0 && cc.pinned_limit == 0 && !cc.provider);
    INIT_FN(l8_alloc_config, l8_alloc_config_init, ac);
    ck_assert(ac.memory_limit == 0 && ac.trace == NULL);
    INIT_FN(l8_trace_config, l8_trace_config_init, tc);
    ck_assert(tc.path == NULL && tc.capacity == 0);
    INIT_FN(l8_params_config, l8_params_config_init, pc);
    ck_assert_int_eq(pc.grad_dtype, L8_F32);
    INIT_FN(l8_gemm_config, l8_gemm_config_init, gc);
    l8_gemm_config gm = L8_GEMM_CONFIG_INIT;
    ck_assert(gc.workspace_bytes == gm.workspace_bytes && gc.autotune == gm.autotune &&
              gc.autotune_candidates == gm.autotune_candidates &&
              gc.autotune_iters == gm.autotune_iters && gc.max_plans == gm.max_plans &&
              gc.precise_reduction == gm.precise_reduction && gc.plan_cache == gm.plan_cache &&
              gc.small == gm.small && gc.small == -1);
    INIT_FN(l8_recipe_config, l8_recipe_config_init, rc);
    ck_assert(rc.history_len == 0 && rc.margin == 0.0f && rc.amax_compute == L8_AMAX_MAX_HISTORY &&
              rc.format == L8_FP8_HYBRID && rc.reduce == NULL && rc.reduce_arg == NULL);
    INIT_FN(l8_linear_config, l8_linear_config_init, lc);
    ck_assert(lc.name == NULL && lc.mode == L8_LINEAR_FP8 && !lc.gemm && !lc.recipe && !lc.weight &&
              !lc.weight_grad && !lc.bias && !lc.bias_grad && lc.weight_id == 0 &&
              lc.bias_id == 1 && !lc.grad_ready && !lc.grad_ready_arg &&
              lc.accumulate_grad == 0 && !lc.save_hooks);
    INIT_FN(l8_adamw_config, l8_adamw_config_init, aw);
    l8_adamw_config am = L8_ADAMW_CONFIG_INIT;
    ck_assert(aw.lr == am.lr && aw.beta1 == am.beta1 && aw.beta2 == am.beta2 && aw.eps == am.eps &&
              aw.weight_decay == am.weight_decay && aw.max_grad_norm == am.max_grad_norm);
    INIT_FN(l8_sgd_config, l8_sgd_config_init, sg);
    l8_sgd_config sm = L8_SGD_CONFIG_INIT;
    ck_assert(sg.lr == sm.lr && sg.momentum == sm.momentum && sg.dampening == sm.dampening &&
              sg.weight_decay == sm.weight_decay && sg.nesterov == sm.nesterov &&
              sg.max_grad_norm == sm.max_grad_norm);
    INIT_FN(l8_fp8_scale_update_config, l8_fp8_scale_update_config_init, su);
    ck_assert(su.amax_compute == L8_AMAX_MAX_HISTORY && su.margin == 0.0f && su.reset_amax == 0);
}
END_TEST

/* A context destroyed while a tensor lives is refused and reported, and stays
 * usable; the tensor's release afterwards is no use-after-free (valgrind). */
START_TEST(test_ctx_destroy_with_live_tensor)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    int64_t shape[1] = { 1000 };
    l8_tensor *t = NULL, *u = NULL;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, shape, &t));
    l8_error_clear();
    l8_ctx_destroy(ctx);
    ck_assert_int_eq(l8_last_error()->status, L8_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "1 device blocks"));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, shape, &u));       /* the context still works */
    l8_tensor_destroy(u);
    l8_tensor_destroy(t);
    l8t_ctx_finish(ctx);                                      /* now it goes */
}
END_TEST

Suite *l8_abi_suite(void)
{
    Suite *s = suite_create("abi");
    TCase *tc = tcase_create("abi");
    tcase_set_tags(tc, "host");
    tcase_add_test(tc, test_ctx_config_older_and_newer);
    tcase_add_test(tc, test_alloc_trace_gemm_older);
    tcase_add_test(tc, test_linear_config_older);
    tcase_add_test(tc, test_stats_older_and_newer);
    tcase_add_test(tc, test_config_init_functions);
    tcase_add_test(tc, test_ctx_destroy_with_live_tensor);
    suite_add_tcase(s, tc);
    return s;
}
