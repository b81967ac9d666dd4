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

