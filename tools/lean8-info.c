/* lean8-info - what lean8 finds on this machine: devices, the driver,
 * cuBLASLt and NCCL versions (or why not), and an allocator self-check on
 * the default device. `make run` runs it until the trainer exists.
 * Exit status: 0 when the self-check passed, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/lean8.h"

static void print_lib(const char *label, l8_library lib)
{
    int v = 0;
    const char *where = "";
    l8_status st = l8_library_info(lib, &v, &where);
    if (st == L8_OK) {
        if (lib == L8_LIB_DRIVER)
            printf("  %-9s CUDA %d.%d (%s)\n", label, v / 1000, (v % 1000) / 10, where);
        else if (lib == L8_LIB_CUBLASLT)
            printf("  %-9s %d.%d.%d (%s)\n", label, v / 10000, (v / 100) % 100, v % 100, where);
        else
            printf("  %-9s %d.%d.%d (%s)\n", label, v / 10000, (v / 100) % 100, v % 100, where);
    } else {
        printf("  %-9s not loaded: %s\n", label, l8_last_error()->message);
    }
}

/* A few thousand random allocations and frees, then the allocator's own
 * invariant check and a full release. */
static int self_check(l8_ctx *ctx)
{
    enum { N = 256, OPS = 4000 };
    void *live[N] = {0};
    l8_alloc *a = l8_ctx_allocator(ctx);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int ok = 1;
    for (int i = 0; i < OPS && ok; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int k = (int)(x % N);
        if (live[k]) {
            ok = l8_ctx_free(ctx, live[k]) == L8_OK;
            live[k] = NULL;
        } else {
            size_t bytes = (x >> 20) % 4 == 0 ? (size_t)((x >> 24) % (8u << 20)) + 1
                                               : (size_t)((x >> 24) % 65536) + 1;
            ok = l8_ctx_malloc(ctx, bytes, s, &live[k]) == L8_OK;
        }
    }
    for (int k = 0; k < N; k++)
        if (live[k] && l8_ctx_free(ctx, live[k]) != L8_OK) ok = 0;
    l8_alloc_stats st = { .size = sizeof st };
    if (ok) ok = l8_alloc_check(a) == L8_OK && l8_alloc_get_stats(a, &st) == L8_OK;
    if (ok) ok = st.allocated_bytes == 0 && st.inactive_split_bytes == 0;
    printf("  allocator %s: %llu allocations, peak %.1f MiB allocated / %.1f MiB reserved, "
           "%llu segments\n", ok ? "ok" : "FAILED", (unsigned long long)st.allocations,
           st.allocated_peak / 1048576.0, st.reserved_peak / 1048576.0,
           (unsigned long long)st.segment_allocs);
    if (ok) ok = l8_alloc_empty_cache(a) == L8_OK;

    void *pin = NULL;
    l8_pinned *p = l8_ctx_pinned(ctx);
    int pin_ok = l8_pinned_alloc(p, 1 << 20, &pin) == L8_OK;
    if (pin_ok) { memset(pin, 0x11, 1 << 20); pin_ok = l8_pinned_free(p, pin) == L8_OK; }
    printf("  pinned    %s: 1 MiB block allocated, written, freed\n", pin_ok ? "ok" : "FAILED");
    if (!ok || !pin_ok) printf("  error: %s\n", l8_last_error_string());
    return ok && pin_ok;
}

int main(void)
{
    printf("lean8 %s\n", l8_version());
    print_lib("driver", L8_LIB_DRIVER);
    print_lib("cuBLASLt", L8_LIB_CUBLASLT);
    print_lib("NCCL", L8_LIB_NCCL);
    int n = l8_cuda_device_count();
    const char *env = getenv("L8_DEVICE");
    int wants_cuda = env && !strncmp(env, "cuda", 4);
    /* what a default context will be, in the same words as its creation below */
    if (n) printf("  devices   %d CUDA device(s)\n", n);
    else if (wants_cuda)
        printf("  devices   0 CUDA devices, and L8_DEVICE=%s asks for one: contexts will fail"
               " (unset L8_DEVICE or set it to host)\n", env);
    else printf("  devices   0 CUDA devices: the host backend will be used\n");
    for (int i = 0; i < n; i++) {
        char dev[16];
        l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
        l8_ctx *c = NULL;
        snprintf(dev, sizeof dev, "cuda:%d", i);
        cfg.device = dev;
        if (l8_ctx_create(&cfg, &c) == L8_OK) printf("    cuda:%d  %s\n", i, l8_ctx_device_name(c));
        else printf("    cuda:%d  unusable: %s\n", i, l8_last_error_string());
        l8_ctx_destroy(c);
    }
    l8_ctx *ctx = NULL;
    if (l8_ctx_create(NULL, &ctx) != L8_OK) {
        printf("  default   none: %s\n", l8_last_error_string());
        return 1;
    }
    printf("  default   %s (L8_DEVICE overrides)\n",
           l8_ctx_backend(ctx) == L8_BACKEND_CUDA ? l8_ctx_device_name(ctx) : "host");
    int ok = self_check(ctx);
    l8_ctx_destroy(ctx);
    return ok ? 0 : 1;
}
