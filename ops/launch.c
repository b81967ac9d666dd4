/* launch.c - what the ops share before a launch: argument checks on tensors,
 * the device's SM count (asked once per device) and grid sizes capped at
 * what is resident.
 */
#include "ops/internal.h"
#include "runtime/internal.h"

#define MAX_DEVICES 64
static int g_sm_count[MAX_DEVICES];     /* 0 = not asked yet; relaxed atomics */

l8_status l8i_sm_count(l8_ctx *ctx, unsigned *out)
{
    int dev = l8_ctx_device(ctx);
    if (dev >= 0 && dev < MAX_DEVICES) {
        int v = __atomic_load_n(&g_sm_count[dev], __ATOMIC_RELAXED);
        if (v > 0) {
            *out = (unsigned)v;
            return L8_OK;
        }
    }
    CUdevice d;
    int n = 0;
    L8_CHECK(L8_CU(cuDeviceGet, &d, dev));
    L8_CHECK(L8_CU(cuDeviceGetAttribute, &n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
    if (n <= 0)
        n = 1;
    if (dev >= 0 && dev < MAX_DEVICES)
        __atomic_store_n(&g_sm_count[dev], n, __ATOMIC_RELAXED);
    *out = (unsigned)n;
    return L8_OK;
}

l8_status l8i_grid_for(l8_ctx *ctx, uint64_t work, unsigned occ, unsigned *grid)
{
    unsigned nsm;
    L8_CHECK(l8i_sm_count(ctx, &nsm));
    uint64_t cap = (uint64_t)nsm * occ;
    uint64_t g = work < cap ? work : cap;
    *grid = g ? (unsigned)g : 1u;
    return L8_OK;
}

