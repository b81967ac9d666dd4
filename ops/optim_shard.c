/* optim_shard.c - ZeRO-1 for the optimizers of ops/optim.c: a shard of the
 * group's buffers with compact state, the norm hook that makes the norm the
 * group's, and the optimizer's checkpoint sections.
 *
 * Invariants (ops/optim_internal.h): o->range holds o->nrange sorted,
 * disjoint ranges of the group's buffers, 128-element aligned; range i's
 * state starts at base_i = numel_0 + ... + numel_{i-1} (so the state is
 * compact, f32 [sn]) and its norm partials at chunk_i = sum of ceil(numel_j
 * / 4096) over j < i (o->nchunks in all). An unsharded optimizer is the one
 * range [0, n): the step code in optim.c does not tell them apart.
 *
 * The "optim.shard" checkpoint section (docs/checkpoint-format.md): a
 * 32-byte head {u32 version 1, i32 world, i32 rank, i32 nrange, i64
 * buffer_numel, i64 shard_numel} and nrange {i64 offset, i64 numel} pairs,
 * little-endian (the host order of every machine lean8 runs on).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/optim.h"
#include "ops/optim_internal.h"
#include "runtime/comm.h"
#include "runtime/internal.h"

#define ALIGN ((int64_t)L8_PARAMS_ALIGN_ELEMS)
#define SHARD_SECTION "optim.shard"
#define SHARD_VERSION 1u

typedef struct shard_head {
    uint32_t version;
    int32_t world, rank, nrange;
    int64_t buffer_numel, shard_numel;
} shard_head;
_Static_assert(sizeof(shard_head) == 32, "the optim.shard head is 32 bytes");

/* ------------------------------------------------------------------------ */
/* the shard                                                                 */

static l8_status check_ranges(const l8_optim *o, int n, const int64_t *offset,
                              const int64_t *numel, const char *op)
{
    if (n < 0 || n > L8_OPTIM_MAX_RANGES)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %d ranges (0..%d allowed)", op, n,
                       L8_OPTIM_MAX_RANGES);
    if (n > 0 && (!offset || !numel))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: offset and numel must not be NULL for %d ranges",
                       op, n);
    int64_t end = 0, total = (int64_t)o->n;
    for (int i = 0; i < n; i++) {
        int64_t a = offset[i], k = numel[i];
        if (k < 1 || a < 0 || a % ALIGN || k % ALIGN)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: range %d [%" PRId64 ", +%" PRId64 "): offset "
                           "must be >= 0, numel >= 1, both multiples of %" PRId64 " elements",
                           op, i, a, k, ALIGN);
        if (a > total || k > total - a)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: range %d [%" PRId64 ", +%" PRId64 ") ends "
                           "past the group's buffers (%" PRId64 " elements)", op, i, a, k,
                           total);   /* a + k may overflow: not printed */
        if (a < end)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: range %d starts at %" PRId64 ", before the "
                           "end of range %d (%" PRId64 "): ranges must be sorted and disjoint",
                           op, i, a, i - 1, end);
        end = a + k;
    }
    return L8_OK;
}

l8_status l8_optim_set_shard(l8_optim *o, int n, const int64_t *offset, const int64_t *numel)
{
    static const char *op = "l8_optim_set_shard";
    L8_ARG(o != NULL);
    if (o->touched)
        return L8_FAIL(L8_ERR_STATE, "%s: this optimizer has stepped or restored its state "
                       "already; shard it before the first step", op);
    L8_CHECK(check_ranges(o, n, offset, numel, op));
    l8_status st = L8_OK;
    l8_stream *compute = l8_ctx_stream(o->ctx, L8_STREAM_COMPUTE);
    l8_storage *nst[2] = { NULL, NULL }, *npart = NULL;
    l8_tensor *nt[2] = { NULL, NULL };
    l8i_optim_range *rg = calloc((size_t)(n ? n : 1), sizeof *rg);
    if (!rg)
        return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", op);
    uint64_t sn = 0, nch = 0;
    for (int i = 0; i < n; i++) {
        rg[i] = (l8i_optim_range){ (uint64_t)offset[i], (uint64_t)numel[i], sn, nch };
        sn += (uint64_t)numel[i];
        nch += ((uint64_t)numel[i] + L8I_OPTIM_CHUNK - 1) / L8I_OPTIM_CHUNK;
    }
    int64_t len = (int64_t)sn;
    for (int k = 0; k < o->nstate; k++) {
        char tag[64];
        void *ptr;
        snprintf(tag, sizeof tag, "optim.%s", o->state_name[k]);
        L8_TRY(st, l8_storage_create_tagged(o->ctx, (size_t)sn * sizeof(float), NULL, tag,
                                            &nst[k]), fail);
        L8_TRY(st, l8_storage_data(nst[k], &ptr), fail);
        L8_TRY(st, l8_memset_d8(compute, ptr, 0, (size_t)sn * sizeof(float)), fail);
        L8_TRY(st, l8_tensor_from_storage(nst[k], 0, L8_F32, 1, &len, NULL, &nt[k]), fail);
    }
    if (nch > o->part_cap)
        L8_TRY(st, l8_storage_create_tagged(o->ctx, (size_t)nch * sizeof(double), NULL,
                                            "optim.partials", &npart), fail);
    L8_TRY(st, l8_stream_synchronize(compute), fail);
    /* commit: nothing below fails */
    for (int k = 0; k < o->nstate; k++) {
        l8_tensor_destroy(o->state[k]);
        l8_storage_release(o->state_st[k]);
        o->state[k] = nt[k];
        o->state_st[k] = nst[k];
    }
    l8_storage_release(o->part_st);
    o->part_st = npart;
    if (o->range != &o->whole)
        free(o->range);
    o->range = rg;
    o->nrange = n;
    o->sn = sn;
    o->nchunks = nch;
    o->sharded = 1;
    return L8_OK;
fail:
    for (int k = 0; k < 2; k++) {
        l8_tensor_destroy(nt[k]);
        l8_storage_release(nst[k]);
    }
    l8_storage_release(npart);
    free(rg);
    return st;
}

l8_status l8_optim_set_shard_rank(l8_optim *o, int rank, int world)
{
    L8_ARG(o != NULL);
    if (world < 1 || rank < 0 || rank >= world)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_set_shard_rank: rank %d of world %d (need "
                       "0 <= rank < world)", rank, world);
    o->shard_rank = rank;
    o->shard_world = world;
    return L8_OK;
}

int l8_optim_is_sharded(const l8_optim *o) { return o ? o->sharded : 0; }
int l8_optim_shard_count(const l8_optim *o) { return o ? o->nrange : -1; }
int64_t l8_optim_shard_numel(const l8_optim *o) { return o ? (int64_t)o->sn : -1; }

size_t l8_optim_state_bytes(const l8_optim *o)
{
    return o ? (size_t)o->nstate * (size_t)o->sn * sizeof(float) : 0;
}

l8_status l8_optim_shard_range(const l8_optim *o, int i, int64_t *offset, int64_t *numel)
{
    L8_ARG(o != NULL && offset != NULL && numel != NULL);
    if (i < 0 || i >= o->nrange)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_optim_shard_range: range %d of %d", i, o->nrange);
    *offset = (int64_t)o->range[i].off;
    *numel = (int64_t)o->range[i].numel;
    return L8_OK;
}

/* ------------------------------------------------------------------------ */
/* the norm hook                                                             */

/* The hook's communicator is being destroyed first (l8_comm_destroy calls this). */
static void comm_lost(void *obj)
{
    l8_optim *o = obj;
    o->reduce_arg = NULL;
    o->reduce_lost = 1;
}

l8_status l8_optim_set_norm_reduce(l8_optim *o, l8_optim_norm_reduce_fn fn, void *arg)
{
    L8_ARG(o != NULL);
    /* over a communicator (the documented pairing): attach, so that
     * l8_comm_destroy first leaves an error here and not a dangling arg */
    if (fn == l8_comm_reduce_sum && arg)
        L8_CHECK(l8i_comm_attach(arg, comm_lost, o));
    if (o->reduce == l8_comm_reduce_sum && o->reduce_arg)
        l8i_comm_detach(o->reduce_arg, o);
    o->reduce = fn;
    o->reduce_arg = fn ? arg : NULL;
    o->reduce_lost = 0;
    return L8_OK;
}

/* ------------------------------------------------------------------------ */
/* checkpoints                                                               */

l8_status l8_optim_save(l8_optim *o, l8_ckpt_writer *w)
{
    L8_ARG(o != NULL && w != NULL);
    uint64_t step;
    L8_CHECK(l8_optim_get_step(o, &step));        /* also waits for the last step */
    for (int k = 0; k < o->nstate; k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", o->state_name[k]);
        L8_CHECK(l8_ckpt_write_tensor(w, name, o->state[k]));
    }
    L8_CHECK(l8_ckpt_write_section(w, "optim.step", &step, sizeof step));
    if (!o->sharded)
        return L8_OK;
    size_t bytes = sizeof(shard_head) + (size_t)o->nrange * 2 * sizeof(int64_t);
    unsigned char *buf = malloc(bytes);
    if (!buf)
        return L8_FAIL(L8_ERR_OOM, "l8_optim_save: out of host memory");
    shard_head h = { SHARD_VERSION, o->shard_world, o->shard_world ? o->shard_rank : -1,
                     o->nrange, (int64_t)o->n, (int64_t)o->sn };
    memcpy(buf, &h, sizeof h);
    for (int i = 0; i < o->nrange; i++) {
        int64_t pr[2] = { (int64_t)o->range[i].off, (int64_t)o->range[i].numel };
        memcpy(buf + sizeof h + (size_t)i * sizeof pr, pr, sizeof pr);
    }
    l8_status st = l8_ckpt_write_section(w, SHARD_SECTION, buf, bytes);
    free(buf);
    return st;
}

/* "the ZeRO-1 shard of rank 1 of 4 ranks" and the like. */
static void describe(char *buf, size_t n, int sharded, int rank, int world)
{
    if (!sharded)
        snprintf(buf, n, "the whole optimizer state (unsharded)");
    else if (world > 0)
        snprintf(buf, n, "the ZeRO-1 shard of rank %d of %d ranks", rank, world);
    else
        snprintf(buf, n, "a ZeRO-1 shard (its rank and number of ranks not given)");
}

/* The layout of the checkpoint against o's: L8_OK when they match. */
static l8_status check_layout(const l8_optim *o, const l8_ckpt_reader *r, const char *op)
{
    const char *path = l8_ckpt_path(r);
    shard_head h = { 0, 0, -1, 1, (int64_t)o->n, (int64_t)o->n };
    const unsigned char *pairs = NULL;
    int sharded = l8_ckpt_has(r, SHARD_SECTION);
    if (sharded) {
        const void *p;
        size_t n;
        L8_CHECK(l8_ckpt_section(r, SHARD_SECTION, &p, &n));
        if (n >= sizeof h)
            memcpy(&h, p, sizeof h);
        if (n < sizeof h || h.version != SHARD_VERSION || h.nrange < 0 ||
            h.nrange > L8_OPTIM_MAX_RANGES ||
            n != sizeof h + (size_t)h.nrange * 2 * sizeof(int64_t))
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s: section %s is malformed (%zu "
                           "bytes, version %u)", op, path, SHARD_SECTION, n,
                           n >= sizeof h ? h.version : 0u);
        pairs = (const unsigned char *)p + sizeof h;
    }
    char was[128], now[128];
    describe(was, sizeof was, sharded, h.rank, h.world);
    describe(now, sizeof now, o->sharded, o->shard_rank, o->shard_world);
    if (sharded != o->sharded)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s holds %s, this optimizer is %s: "
                       "refused (optimizer state is not resharded; resume with the layout "
                       "that wrote it)", op, path, was, now);
    if (!sharded)
        return L8_OK;
    if (h.world > 0 && o->shard_world > 0 && h.world != o->shard_world)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s was written by %d ranks (%s), "
                       "this run has %d ranks (%s): refused (ZeRO-1 state cannot be resharded "
                       "from %d to %d ranks; resume with %d)", op, path, h.world, was,
                       o->shard_world, now, h.world, o->shard_world, h.world);
    if (h.world > 0 && o->shard_world > 0 && h.rank != o->shard_rank)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s holds %s, this optimizer is "
                       "rank %d's: refused (load each rank's own file)", op, path, was,
                       o->shard_rank);
    if (h.buffer_numel != (int64_t)o->n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s was written for a group of "
                       "%" PRId64 " elements, this group has %" PRIu64 ": refused", op, path,
                       h.buffer_numel, o->n);
    for (int i = 0; i < h.nrange || i < o->nrange; i++) {
        int64_t pr[2] = { -1, -1 };
        if (i < h.nrange)
            memcpy(pr, pairs + (size_t)i * sizeof pr, sizeof pr);
        int64_t a = i < o->nrange ? (int64_t)o->range[i].off : -1;
        int64_t k = i < o->nrange ? (int64_t)o->range[i].numel : -1;
        if (pr[0] == a && pr[1] == k)
            continue;
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s holds %s with %d ranges "
                       "(%" PRId64 " elements), this optimizer's shard has %d (%" PRIu64 "); "
                       "range %d is [%" PRId64 ", +%" PRId64 ") there, [%" PRId64 ", +%" PRId64
                       ") here (-1: none): refused (resume with the same ranks and buckets)",
                       op, path, was, h.nrange, h.shard_numel, o->nrange, o->sn, i, pr[0],
                       pr[1], a, k);
    }
    return L8_OK;
}

l8_status l8_optim_check_load(const l8_optim *o, const l8_ckpt_reader *r)
{
    static const char *op = "l8_optim_load";
    L8_ARG(o != NULL && r != NULL);
    L8_CHECK(check_layout(o, r, op));
    for (int k = 0; k < o->nstate; k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", o->state_name[k]);
        L8_CHECK(l8_ckpt_check_tensor(r, name, o->state[k]));
    }
    l8_ckpt_section_info info;
    L8_CHECK(l8_ckpt_find(r, "optim.step", &info));
    if (info.bytes != sizeof(uint64_t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint %s: optim.step is %zu bytes, "
                       "wanted 8", op, l8_ckpt_path(r), info.bytes);
    return L8_OK;
}

l8_status l8_optim_load(l8_optim *o, const l8_ckpt_reader *r)
{
    L8_CHECK(l8_optim_check_load(o, r));
    uint64_t step;
    L8_CHECK(l8_ckpt_read_section_into(r, "optim.step", &step, sizeof step));
    for (int k = 0; k < o->nstate; k++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", o->state_name[k]);
        L8_CHECK(l8_ckpt_read_tensor(r, name, o->state[k]));
    }
    return l8_optim_set_step(o, step);
}
