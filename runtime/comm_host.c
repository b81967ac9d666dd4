/* comm_host.c - the host collectives, over any point-to-point transport
 * (comm_threads.c, comm_tcp.c).
 *
 * Algorithms (small and correct; research/host-transport.md §3-4):
 *   all-gather      every rank sends its chunk to every other rank;
 *   reduce-scatter  every rank sends chunk j to rank j, which adds the p
 *                   contributions in rank order 0..p-1 in f32 and rounds once;
 *   all-reduce      the reduce-scatter over p near-equal chunks, then the
 *                   all-gather of the reduced chunks: every rank ends with the
 *                   same bits, whatever the transport or the arrival order;
 *   broadcast       the root sends to every rank.
 * Sends never wait for the receiver's recv (the thread transport queues,
 * the TCP transport's receiver thread drains the sockets), so "send to all,
 * then receive from all" cannot deadlock.
 *
 * Every message carries (communicator tag, collective number, op, dtype,
 * aux, bytes); the receiver checks all of them, so ranks that disagree on
 * a shape, a dtype or the order of collectives fail with L8_ERR_COMM naming
 * both sides instead of exchanging the wrong bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_internal.h"
#include "runtime/fp8.h"

const char *l8i_op_name(int op)
{
    switch (op) {
    case L8I_OP_ALL_REDUCE: return "all_reduce";
    case L8I_OP_BROADCAST: return "broadcast";
    case L8I_OP_ALL_GATHER: return "all_gather";
    case L8I_OP_REDUCE_SCATTER: return "reduce_scatter";
    case L8I_OP_BARRIER: return "barrier";
    case L8I_OP_SPLIT: return "split";
    case L8I_OP_SCALES: return "fp8 scale check";
    default: return "message";
    }
}

typedef struct coll {
    l8_comm *c;
    l8i_hdr h;                    /* tag, seq, op, dtype of this collective */
    int64_t deadline;
} coll;

static coll begin(l8_comm *c, int op, l8_dtype dt)
{
    coll k = { c, { c->tag, ++c->seq, (uint16_t)op, (uint16_t)dt, 0, 0 },
               l8i_now_ms() + c->timeout_ms };
    return k;
}

static l8_status tx(coll *k, int peer, uint32_t aux, const void *buf, size_t bytes)
{
    l8i_hdr h = k->h;
    h.aux = aux;
    h.bytes = bytes;
    return k->c->xp->ops->send(k->c->xp, k->c->peers[peer], &h, buf);
}

static l8_status rx(coll *k, int peer, uint32_t aux, void *buf, size_t bytes)
{
    l8i_hdr h = k->h;
    h.aux = aux;
    h.bytes = bytes;
    return k->c->xp->ops->recv(k->c->xp, k->c->peers[peer], &h, buf, k->deadline);
}

/* ---- reduction in rank order ---- */

static float combine(float a, float b, l8_reduce_op op)
{
    if (op != L8_REDUCE_MAX) return a + b;
    if (isnan(a) || isnan(b)) return NAN;
    return a > b ? a : b;
}

/* out[i] = op over r of parts[r][i], r = 0..p-1 in order, in f32. */
static void reduce_parts(const unsigned char *parts, size_t stride, int p, size_t n, l8_dtype dt,
                         l8_reduce_op op, void *out)
{
    if (dt == L8_F32 && op != L8_REDUCE_MAX) {   /* the common case, without conversions */
        float *o = out;
        const float *x0 = (const float *)parts;
        for (size_t i = 0; i < n; i++) o[i] = x0[i];
        for (int r = 1; r < p; r++) {
            const float *x = (const float *)(parts + (size_t)r * stride);
            for (size_t i = 0; i < n; i++) o[i] += x[i];
        }
        if (op == L8_REDUCE_AVG)
            for (size_t i = 0; i < n; i++) o[i] /= (float)p;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float acc = l8_host_load_f32(parts, dt, i);
        for (int r = 1; r < p; r++) acc = combine(acc, l8_host_load_f32(parts + r * stride, dt, i), op);
        if (op == L8_REDUCE_AVG) acc /= (float)p;
        l8_host_store_f32(out, dt, i, acc);
    }
}

/* ---- the collectives ---- */

static l8_status gather_op(l8_comm *c, int op, const void *send, void *recv, size_t bytes,
                           l8_dtype dt)
{
    coll k = begin(c, op, dt);
    char *dst = recv;             /* NULL with bytes 0: the barrier (no arithmetic on it) */
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) L8_CHECK(tx(&k, r, 0, send, bytes));
    if (bytes) memmove(dst + (size_t)c->rank * bytes, send, bytes);
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) L8_CHECK(rx(&k, r, 0, bytes ? dst + (size_t)r * bytes : dst, bytes));
    return L8_OK;
}

l8_status l8i_host_all_gather(l8_comm *c, const void *send, void *recv, size_t bytes, l8_dtype dt)
{
    return gather_op(c, L8I_OP_ALL_GATHER, send, recv, bytes, dt);
}

l8_status l8i_host_exchange(l8_comm *c, int op, const void *mine, void *all, size_t bytes)
{
    return gather_op(c, op, mine, all, bytes, L8_U8);
}

l8_status l8i_host_reduce_scatter(l8_comm *c, const void *send, void *recv, size_t count,
                                  l8_dtype dt, l8_reduce_op op)
{
    size_t cb = count * l8_dtype_size(dt);
    coll k = begin(c, L8I_OP_REDUCE_SCATTER, dt);
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) L8_CHECK(tx(&k, r, (uint32_t)r, (const char *)send + r * cb, cb));
    unsigned char *parts = malloc(cb * (size_t)c->size + 1);
    if (!parts) return L8_FAIL(L8_ERR_OOM, "reduce_scatter: out of host memory");
    memcpy(parts + (size_t)c->rank * cb, (const char *)send + (size_t)c->rank * cb, cb);
    l8_status st = L8_OK;
    for (int r = 0; r < c->size && st == L8_OK; r++)
        if (r != c->rank) st = rx(&k, r, (uint32_t)c->rank, parts + (size_t)r * cb, cb);
    if (st == L8_OK) reduce_parts(parts, cb, c->size, count, dt, op, recv);
    free(parts);
    return st;
}

/* Rank r owns elements [lo(r), lo(r + 1)) of an all-reduce. */
static size_t lo(size_t n, int r, int p) { return (size_t)((unsigned __int128)n * (unsigned)r / (unsigned)p); }

l8_status l8i_host_all_reduce(l8_comm *c, const void *send, void *recv, size_t count, l8_dtype dt,
                              l8_reduce_op op)
{
    size_t esz = l8_dtype_size(dt);
    int p = c->size, me = c->rank;
    coll k = begin(c, L8I_OP_ALL_REDUCE, dt);
    /* phase 0: chunk r of my data to its owner r */
    for (int r = 0; r < p; r++)
        if (r != me)
            L8_CHECK(tx(&k, r, 0, (const char *)send + lo(count, r, p) * esz,
                        (lo(count, r + 1, p) - lo(count, r, p)) * esz));
    size_t n = lo(count, me + 1, p) - lo(count, me, p), cb = n * esz;
    unsigned char *parts = malloc(cb * (size_t)p + 1);
    if (!parts) return L8_FAIL(L8_ERR_OOM, "all_reduce: out of host memory");
    memcpy(parts + (size_t)me * cb, (const char *)send + lo(count, me, p) * esz, cb);
    l8_status st = L8_OK;
    for (int r = 0; r < p && st == L8_OK; r++)
        if (r != me) st = rx(&k, r, 0, parts + (size_t)r * cb, cb);
    if (st == L8_OK) reduce_parts(parts, cb, p, n, dt, op, (char *)recv + lo(count, me, p) * esz);
    free(parts);
    /* phase 1: every owner's reduced chunk to everyone */
    for (int r = 0; r < p && st == L8_OK; r++)
        if (r != me) st = tx(&k, r, 1, (const char *)recv + lo(count, me, p) * esz, cb);
    for (int r = 0; r < p && st == L8_OK; r++)
        if (r != me)
            st = rx(&k, r, 1, (char *)recv + lo(count, r, p) * esz,
                    (lo(count, r + 1, p) - lo(count, r, p)) * esz);
    return st;
}

l8_status l8i_host_broadcast(l8_comm *c, void *buf, size_t bytes, int root)
{
    coll k = begin(c, L8I_OP_BROADCAST, L8_U8);
    k.h.aux = (uint32_t)root;
    if (c->rank != root) return rx(&k, root, (uint32_t)root, buf, bytes);
    for (int r = 0; r < c->size; r++)
        if (r != root) L8_CHECK(tx(&k, r, (uint32_t)root, buf, bytes));
    return L8_OK;
}

l8_status l8i_host_barrier(l8_comm *c)
{
    return gather_op(c, L8I_OP_BARRIER, NULL, NULL, 0, L8_U8);
}

/* ---- shared by the transports ---- */

static void describe(char *out, size_t n, const l8i_hdr *h)
{
    snprintf(out, n, "%s #%u (%s, %llu bytes, aux %u)", l8i_op_name(h->op), h->seq,
             l8_dtype_name((l8_dtype)h->dtype), (unsigned long long)h->bytes, h->aux);
}

l8_status l8i_hdr_check(int me, int peer, const l8i_hdr *got, const l8i_hdr *want)
{
    if (got->seq == want->seq && got->op == want->op && got->dtype == want->dtype &&
        got->aux == want->aux && got->bytes == want->bytes)
        return L8_OK;
    char a[160], b[160];
    describe(a, sizeof a, got);
    describe(b, sizeof b, want);
    return L8_FAIL(L8_ERR_COMM, "rank %d sent %s while rank %d expected %s: the ranks disagree "
                   "on the collectives' order, shapes or dtypes", peer, a, me, b);
}

l8_status l8i_recv_timeout(int me, int peer, const l8i_hdr *want)
{
    char b[160];
    describe(b, sizeof b, want);
    return L8_FAIL(L8_ERR_TIMEOUT, "rank %d: %s timed out waiting for rank %d (the deadline is "
                   "L8_COMM_TIMEOUT or the config's timeout_ms)", me, b, peer);
}

/* Communicators split from one root share its transport. */
static pthread_mutex_t g_xport_mu = PTHREAD_MUTEX_INITIALIZER;

void l8i_xport_retain(l8i_xport *x)
{
    pthread_mutex_lock(&g_xport_mu);
    x->refs++;
    pthread_mutex_unlock(&g_xport_mu);
}

void l8i_xport_release(l8i_xport *x)
{
    if (!x) return;
    pthread_mutex_lock(&g_xport_mu);
    int last = --x->refs == 0;
    pthread_mutex_unlock(&g_xport_mu);
    if (last) x->ops->release(x);
}
