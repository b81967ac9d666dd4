/* comm_threads.c - the THREADS transport: ranks are threads of one process.
 *
 * A group (hub) lives in a process-wide list under a random 64-bit key that
 * the l8_comm_id carries. Each rank has one incoming queue; a send copies
 * the message into the receiver's queue (so it never waits for the
 * receiver), a recv takes the first message from the wanted peer with the
 * wanted tag. One mutex and condition variable per hub: the host transports
 * are a reference, not a fast path.
 *
 * Joining is a barrier: every rank waits until `world` ranks have joined.
 * A rank that joins with another world size, or twice, fails the whole
 * group (every waiting rank gets the same message) instead of leaving the
 * others to time out. A rank that leaves (destroy, abort) is marked gone:
 * peers waiting on it fail with L8_ERR_COMM at once.
 *
 * Lifetime: the hub is freed when the last rank's transport is released
 * after all ranks had joined; a group nobody joins stays in the list (one
 * small struct).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/comm_internal.h"

typedef struct msg {
    struct msg *next;
    int src;
    l8i_hdr h;
    unsigned char data[];
} msg;

typedef struct hub {
    struct hub *next;
    uint64_t key;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int world, joined, refs;
    int *present, *gone;          /* [world] */
    msg **head;                   /* [world] incoming queue of each rank */
    char bad[512];                /* the group failed to form: why */
} hub;

typedef struct thr_xport {
    l8i_xport base;
    hub *h;
} thr_xport;

static pthread_mutex_t g_hubs_mu = PTHREAD_MUTEX_INITIALIZER;
static hub *g_hubs;

l8_status l8i_threads_create_group(uint64_t *key)
{
    hub *h = calloc(1, sizeof *h);
    if (!h) return L8_FAIL(L8_ERR_OOM, "l8_comm_id_create: out of host memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_lock(&g_hubs_mu);
    h->key = l8i_random64() | 1u;
    h->next = g_hubs;
    g_hubs = h;
    pthread_mutex_unlock(&g_hubs_mu);
    *key = h->key;
    return L8_OK;
}

static void hub_free(hub *h)
{
    for (int r = 0; h->head && r < h->world; r++)
        for (msg *m = h->head[r], *n; m; m = n) {
            n = m->next;
            free(m);
        }
    free(h->head);
    free(h->present);
    free(h->gone);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* Absolute CLOCK_REALTIME timespec for a deadline on the l8i_now_ms clock. */
static struct timespec abs_time(int64_t deadline_ms)
{
    int64_t left = deadline_ms - l8i_now_ms();
    if (left < 0) left = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (long)(left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ---- the transport ---- */

static l8_status thr_send(l8i_xport *x, int peer, const l8i_hdr *hd, const void *buf)
{
    hub *h = ((thr_xport *)x)->h;
    msg *m = malloc(sizeof *m + hd->bytes);
    if (!m) return L8_FAIL(L8_ERR_OOM, "rank %d: out of host memory for a %llu-byte message",
                           x->rank, (unsigned long long)hd->bytes);
    m->next = NULL;
    m->src = x->rank;
    m->h = *hd;
    if (hd->bytes) memcpy(m->data, buf, hd->bytes);
    pthread_mutex_lock(&h->mu);
    if (h->gone[peer]) {
        pthread_mutex_unlock(&h->mu);
        free(m);
        return L8_FAIL(L8_ERR_COMM, "rank %d: rank %d has left the group (%s)", x->rank, peer,
                       l8i_op_name(hd->op));
    }
    msg **at = &h->head[peer];
    while (*at) at = &(*at)->next;
    *at = m;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return L8_OK;
}

static l8_status thr_recv(l8i_xport *x, int peer, const l8i_hdr *want, void *buf,
                          int64_t deadline_ms)
{
    hub *h = ((thr_xport *)x)->h;
    struct timespec until = abs_time(deadline_ms);
    l8_status st = L8_OK;
    msg *m = NULL;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        for (msg **at = &h->head[x->rank]; *at; at = &(*at)->next)
            if ((*at)->src == peer && (*at)->h.tag == want->tag) {
                m = *at;
                *at = m->next;
                break;
            }
        if (m) break;
        if (h->gone[peer]) {
            st = L8_FAIL(L8_ERR_COMM, "rank %d: rank %d left the group while rank %d waited for "
                         "its %s #%u", x->rank, peer, x->rank, l8i_op_name(want->op), want->seq);
            break;
        }
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT) {
            st = l8i_recv_timeout(x->rank, peer, want);
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (!m) return st;
    st = l8i_hdr_check(x->rank, peer, &m->h, want);
    if (st == L8_OK && want->bytes) memcpy(buf, m->data, want->bytes);
    free(m);
    return st;
}

static void thr_close(l8i_xport *x)
{
    hub *h = ((thr_xport *)x)->h;
    pthread_mutex_lock(&h->mu);
    h->gone[x->rank] = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void thr_release(l8i_xport *x)
{
    hub *h = ((thr_xport *)x)->h;
    free(x);
    pthread_mutex_lock(&g_hubs_mu);
    pthread_mutex_lock(&h->mu);
    int last = --h->refs == 0 && h->joined == h->world;
    pthread_mutex_unlock(&h->mu);
    if (last)
        for (hub **at = &g_hubs; *at; at = &(*at)->next)
            if (*at == h) {
                *at = h->next;
                break;
            }
    pthread_mutex_unlock(&g_hubs_mu);
    if (last) hub_free(h);
}

static const l8i_xport_ops k_thr_ops = { thr_send, thr_recv, thr_close, thr_release };

/* ---- joining ---- */

static l8_status join_locked(hub *h, int rank, int world)
{
    if (h->bad[0]) return L8_FAIL(L8_ERR_COMM, "%s", h->bad);
    if (!h->world) {
        h->present = calloc((size_t)world, sizeof *h->present);
        h->gone = calloc((size_t)world, sizeof *h->gone);
        h->head = calloc((size_t)world, sizeof *h->head);
        if (!h->present || !h->gone || !h->head) {
            free(h->present), free(h->gone), free(h->head);
            h->present = h->gone = NULL;
            h->head = NULL;
            return L8_FAIL(L8_ERR_OOM, "l8_comm_init_rank: out of host memory");
        }
        h->world = world;
    }
    if (world != h->world)
        snprintf(h->bad, sizeof h->bad, "l8_comm_init_rank: rank %d joined with world size %d, "
                 "but the group has world size %d", rank, world, h->world);
    else if (h->present[rank])
        snprintf(h->bad, sizeof h->bad, "l8_comm_init_rank: rank %d joined twice", rank);
    if (h->bad[0]) {
        pthread_cond_broadcast(&h->cv);
        return L8_FAIL(L8_ERR_COMM, "%s", h->bad);
    }
    h->present[rank] = 1;
    h->joined++;
    h->refs++;
    pthread_cond_broadcast(&h->cv);
    return L8_OK;
}

l8_status l8i_threads_join(uint64_t key, int rank, int world, int64_t deadline_ms, l8i_xport **out)
{
    pthread_mutex_lock(&g_hubs_mu);
    hub *h = g_hubs;
    while (h && h->key != key) h = h->next;
    pthread_mutex_unlock(&g_hubs_mu);
    if (!h)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_rank: no THREADS group with this id in "
                       "this process (THREADS ids work only in the process that made them)");
    thr_xport *x = calloc(1, sizeof *x);
    if (!x) return L8_FAIL(L8_ERR_OOM, "l8_comm_init_rank: out of host memory");
    struct timespec until = abs_time(deadline_ms);
    pthread_mutex_lock(&h->mu);
    l8_status st = join_locked(h, rank, world);
    while (st == L8_OK && h->joined < h->world && !h->bad[0])
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT) break;
    if (st == L8_OK && (h->bad[0] || h->joined < h->world)) {
        st = h->bad[0] ? L8_FAIL(L8_ERR_COMM, "%s", h->bad)
                       : L8_FAIL(L8_ERR_TIMEOUT, "l8_comm_init_rank: %d of %d ranks joined before "
                                 "the deadline (L8_INIT_TIMEOUT)", h->joined, h->world);
        h->present[rank] = 0;
        h->joined--;
        h->refs--;
    }
    pthread_mutex_unlock(&h->mu);
    if (st != L8_OK) {
        free(x);
        return st;
    }
    x->base.ops = &k_thr_ops;
    x->base.rank = rank;
    x->base.world = world;
    x->base.refs = 1;
    x->h = h;
    *out = &x->base;
    return L8_OK;
}
