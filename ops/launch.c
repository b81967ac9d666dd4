/* launch.c - what the ops share before a launch: argument checks on tensors
 * (and naming the item of a group that failed them) and grid sizes capped
 * at what is resident (the SM count comes from runtime/ctx.c's l8i_sm_count).
 */
#include <stdio.h>
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


l8_status l8i_fail_item(l8_status st, const char *what, int i)
{
    char why[512];                /* the record is rewritten below: copy it first */
    snprintf(why, sizeof why, "%s", l8_last_error()->message);
    return L8_FAIL(st, "%s %d: %s", what, i, why);
}
