/* util.c - helpers shared by the Check suites (declared in tests/tests.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

l8_ctx *l8t_ctx(const char *device, const l8_segment_provider *prov, size_t memory_limit)
{
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = device;
    cfg.provider = prov;
    cfg.memory_limit = memory_limit;
    L8_CK(l8_ctx_create(&cfg, &ctx));
    return ctx;
}

static l8_alloc_stats l8t_stats(l8_ctx *ctx)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(l8_ctx_allocator(ctx), &s));
    return s;
}

void l8t_ctx_finish(l8_ctx *ctx)
{
    L8_CK(l8_ctx_synchronize(ctx));
    l8_alloc_stats s = l8t_stats(ctx);
    ck_assert_msg(s.allocated_bytes == 0 && s.live_blocks == 0,
                  "leak: %llu bytes in %llu live blocks at the end of the test",
                  (unsigned long long)s.allocated_bytes, (unsigned long long)s.live_blocks);
    L8_CK(l8_alloc_check(l8_ctx_allocator(ctx)));
    l8_ctx_destroy(ctx);
}

void *l8t_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_msg(p != NULL, "out of host memory (%zu bytes)", n);
    return p;
}

size_t l8t_same_bytes(const l8_tensor *x, const l8_tensor *y, const char *what)
{
    size_t n = l8_tensor_nbytes(x);
    ck_assert_msg(l8_tensor_nbytes(y) == n, "%s: %zu bytes against %zu", what, n,
                  l8_tensor_nbytes(y));
    uint8_t *a = l8t_xmalloc(n), *b = l8t_xmalloc(n);
    L8_CK(l8_tensor_copy_to_host(x, a, n, NULL));
    L8_CK(l8_tensor_copy_to_host(y, b, n, NULL));
    size_t i = 0, written = 0;
    while (i < n && a[i] == b[i])
        i++;
    ck_assert_msg(i == n, "%s differs at byte %zu of %zu (%#x, want %#x)", what, i, n,
                  i < n ? a[i] : 0, i < n ? b[i] : 0);
    for (size_t j = 0; j < n; j++)
        written += a[j] != 0 && a[j] != 0xFF;
    free(a);
    free(b);
    return written;
}

void l8t_tmp_init(l8t_tmpdir *d, const char *prefix)
{
    const char *base = getenv("TMPDIR");
    snprintf(d->dir, sizeof d->dir, "%s/%s.XXXXXX", base && base[0] ? base : "/tmp", prefix);
    ck_assert_msg(mkdtemp(d->dir) != NULL, "mkdtemp: %s", strerror(errno));
    d->n = 0;
}

const char *l8t_tmp_file(l8t_tmpdir *d, const char *name)
{
    ck_assert_int_lt(d->n, 16);
    char buf[sizeof d->path[0]];
    snprintf(buf, sizeof buf, "%s/%s", d->dir, name);
    memcpy(d->path[d->n], buf, sizeof buf);
    return d->path[d->n++];
}
