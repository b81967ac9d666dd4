/* launch.c - what the ops share before a launch: argument checks on tensors
 * and grid sizes capped at what is resident (the SM count comes from
 * runtime/ctx.c's l8i_sm_count).
 */
#include "ops/internal.h"
#include "runtime/internal.h"

l8_status l8i_grid_for(l8_ctx *ctx, uint64_t work, unsigned occ, unsigned *grid)
{
    unsigned nsm;
    L8_CHECK(l8i_sm_count(ctx, &nsm));
    uint64_t cap = (uint64_t)nsm * occ;
    uint64_t g = work < cap ? work : cap;
    *grid = g ? (unsigned)g : 1u;
    return L8_OK;
}

l8_status l8i_need_tensor(const char *op, const char *name, const l8_tensor *t, l8_ctx *ctx)
{
    if (!t)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
    if (ctx && l8_tensor_ctx(t) != ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s belongs to another context", op, name);
    if (!l8_tensor_is_contiguous(t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s is not contiguous (make it contiguous first)",
                       op, name);
    return L8_OK;
}
