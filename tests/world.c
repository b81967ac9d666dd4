/* world.c - ranks as threads of the test process, for the communicator and
 * tensor-parallel suites (see tests.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/comm.h"

void *l8t_rank_main(void *p)
{
    l8t_job *j = p;
    l8_ctx_config cc = L8_CTX_CONFIG_INIT;
    cc.device = "host";
    l8_ctx *ctx = NULL;
    l8_comm *c = NULL;
    l8_comm_config cfg = L8_COMM_CONFIG_INIT;
    cfg.timeout_ms = j->timeout_ms ? j->timeout_ms : 20000;
    cfg.init_timeout_ms = 20000;
    j->st = l8_ctx_create(&cc, &ctx);
    if (j->st == L8_OK) j->st = l8_comm_init_rank(ctx, j->id, j->rank, j->world, &cfg, &c);
    if (j->st == L8_OK && j->fn) j->st = j->fn(j, c, ctx);
    if (j->st != L8_OK) snprintf(j->err, sizeof j->err, "%s", l8_last_error_string());
    l8_comm_destroy(c);
    l8_ctx_destroy(ctx);
    return NULL;
}

/* A new id of transport t (made through a throwaway host context). */
l8_comm_id l8t_comm_id(int transport)
{
    l8_comm_id id;
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    L8_CK(l8_comm_id_create(ctx, (l8_comm_transport)transport, &id));
    l8_ctx_destroy(ctx);
    return id;
}

l8_comm *l8t_comm_one(l8_ctx *ctx, int transport)
{
    l8_comm_id id;
    l8_comm *c = NULL;
    L8_CK(l8_comm_id_create(ctx, (l8_comm_transport)transport, &id));
    L8_CK(l8_comm_init_rank(ctx, &id, 0, 1, NULL, &c));
    return c;
}

/* Run fn on `world` ranks (threads) of a new communicator; jobs[world] out. */
void l8t_world_run(int world, int t, l8t_rank_fn fn, const void *arg, l8t_job *jobs,
                   int timeout_ms)
{
    l8_comm_id id = l8t_comm_id(t);
    pthread_t th[8];
    ck_assert_int_le(world, 8);
    for (int r = 0; r < world; r++) {
        jobs[r] = (l8t_job){ .rank = r, .world = world, .id = &id, .fn = fn, .arg = arg,
                         .timeout_ms = timeout_ms };
        ck_assert_int_eq(pthread_create(&th[r], NULL, l8t_rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
}

void l8t_world_free(l8t_job *jobs, int world)
{
    for (int r = 0; r < world; r++) free(jobs[r].out);
}

void l8t_world_ok(l8t_job *jobs, int world)
{
    for (int r = 0; r < world; r++)
        ck_assert_msg(jobs[r].st == L8_OK, "rank %d of %d: %s", r, world, jobs[r].err);
}

l8_status l8t_keep(l8t_job *j, const void *p, size_t bytes)
{
    j->out = malloc(bytes + 1);
    if (!j->out) return L8_FAIL(L8_ERR_OOM, "test: out of memory");
    memcpy(j->out, p, bytes);
    j->out_bytes = bytes;
    return L8_OK;
}
