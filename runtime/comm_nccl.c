/* comm_nccl.c - the NCCL backend: libnccl.so.2 opened at run time, its
 * entry points resolved through the driver layer's symbol-table loader
 * (l8i_sym_table_load, as the driver and cuBLASLt), collectives on the
 * context's comm stream, and a watchdog.
 *
 * Ordering: a collective called with stream s makes the comm stream wait on
 * an event recorded on s, runs there, and makes s wait on an event recorded
 * after it. With s = the comm stream itself neither join happens (the
 * caller orders it). The host never waits.
 *
 * Init is non-blocking (config.blocking = 0): ncclCommInitRankConfig and
 * ncclCommSplit return at once and we poll ncclCommGetAsyncError until the
 * communicator is ready or the init deadline passes (then ncclCommAbort,
 * L8_ERR_TIMEOUT). Collectives on a non-blocking communicator may also
 * return ncclInProgress: the enqueue is finished by polling the same way.
 *
 * Watchdog: one thread per communicator wakes every 50 ms, polls
 * ncclCommGetAsyncError, and queries the completion event recorded after
 * each collective (the oldest first). An asynchronous error, or a
 * collective older than the timeout that has not completed, aborts the
 * communicator (ncclCommAbort: NCCL's kernels stop, so nothing waits for
 * ever) and records the failure, which the next call on the communicator
 * (or l8_comm_check) returns: L8_ERR_NCCL or L8_ERR_TIMEOUT with the
 * operation and its number.
 */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/comm_internal.h"

typedef struct nccl_api {
    ncclResult_t (*ncclGetVersion)(int *);
    ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *);
    ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*ncclCommSplit)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
    ncclResult_t (*ncclCommFinalize)(ncclComm_t);
    ncclResult_t (*ncclCommDestroy)(ncclComm_t);
    ncclResult_t (*ncclCommAbort)(ncclComm_t);
    ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
    const char *(*ncclGetErrorString)(ncclResult_t);
    const char *(*ncclGetLastError)(ncclComm_t);
    ncclResult_t (*ncclCommCount)(const ncclComm_t, int *);
    ncclResult_t (*ncclCommUserRank)(const ncclComm_t, int *);
    ncclResult_t (*ncclAllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                  ncclComm_t, cudaStream_t);
    ncclResult_t (*ncclBroadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                                  cudaStream_t);
    ncclResult_t (*ncclAllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                                  cudaStream_t);
    ncclResult_t (*ncclReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t);
} nccl_api;

static nccl_api g_nc;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static l8_status g_status = L8_ERR_NO_DEVICE;
static char g_reason[256] = "not loaded";

static const l8i_sym k_entries[] = {
#define E(fn, opt) L8I_SYM(nccl_api, fn, opt)
    E(ncclGetVersion, 0), E(ncclGetUniqueId, 0), E(ncclCommInitRankConfig, 0), E(ncclCommSplit, 0),
    E(ncclCommFinalize, 0), E(ncclCommDestroy, 0), E(ncclCommAbort, 0),
    E(ncclCommGetAsyncError, 0), E(ncclGetErrorString, 0), E(ncclGetLastError, 1),
    E(ncclCommCount, 0), E(ncclCommUserRank, 0),
    E(ncclAllReduce, 0), E(ncclBroadcast, 0), E(ncclAllGather, 0), E(ncclReduceScatter, 0),
#undef E
};

static void load_once(void)
{
    void *h = NULL;
    if (l8i_nccl_open(&h) != L8_OK) {
        snprintf(g_reason, sizeof g_reason, "%s", l8_last_error()->message);
        return;
    }
    if (l8i_sym_table_load("libnccl.so.2", l8i_dlsym_lookup, h, k_entries,
                           sizeof k_entries / sizeof k_entries[0], &g_nc, g_reason,
                           sizeof g_reason) != L8_OK)
        return;
    g_status = L8_OK;
}

static l8_status nccl_load(void)
{
    pthread_once(&g_once, load_once);
    if (g_status != L8_OK)
        return l8_error_set(L8_ERR_NO_DEVICE, 0, "", "dlopen", __FILE__, __LINE__, "NCCL: %s",
                            g_reason);
    return L8_OK;
}

static l8_status nccl_check(ncclResult_t r, ncclComm_t comm, const char *call, int line)
{
    if (r == ncclSuccess) return L8_OK;
    const char *last = comm && g_nc.ncclGetLastError ? g_nc.ncclGetLastError(comm) : "";
    return l8_error_set(r == ncclInProgress ? L8_ERR_TIMEOUT : L8_ERR_NCCL, (int)r,
                        g_nc.ncclGetErrorString(r), call, __FILE__, line, "%s",
                        last && last[0] ? last : g_nc.ncclGetErrorString(r));
}
#define NC(comm, fn, ...) nccl_check(g_nc.fn(__VA_ARGS__), (comm), #fn, __LINE__)

/* ---- the per-communicator state ---- */

#define WATCH_SLOTS 64

typedef struct watch {
    l8_event *done;
    int64_t start_ms;
    uint16_t op;
    uint32_t seq;
    size_t bytes;
} watch;

struct l8i_nccl {
    ncclComm_t comm;
    l8_comm *owner;
    l8_event *in, *out;                   /* the stream joins */
    pthread_mutex_t mu;                   /* the ring and the failure below */
    watch ring[WATCH_SLOTS];
    int head, count;
    pthread_t thr;
    int running, stop;
    l8_status failed;                     /* found by the watchdog */
    char failure[400];
    int aborted;
};

l8_status l8i_nccl_get_unique_id(uint8_t id[128])
{
    L8_CHECK(nccl_load());
    ncclUniqueId u;
    L8_CHECK(NC(NULL, ncclGetUniqueId, &u));
    memcpy(id, &u, sizeof u);
    return L8_OK;
}

/* Poll until a non-blocking call has finished or the deadline passed. */
static l8_status settle(ncclComm_t comm, int64_t deadline_ms, const char *what)
{
    for (;;) {
        ncclResult_t a = ncclInProgress;
        ncclResult_t r = g_nc.ncclCommGetAsyncError(comm, &a);
        if (r != ncclSuccess) return nccl_check(r, comm, "ncclCommGetAsyncError", __LINE__);
        if (a == ncclSuccess) return L8_OK;
        if (a != ncclInProgress) return nccl_check(a, comm, what, __LINE__);
        if (l8i_now_ms() > deadline_ms)
            return L8_FAIL(L8_ERR_TIMEOUT, "%s did not finish before the deadline (a rank that "
                           "never joined?)", what);
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
}

static void *watchdog(void *arg);

static l8_status state_new(l8_comm *c, ncclComm_t comm)
{
    l8i_nccl *n = calloc(1, sizeof *n);
    if (!n) return L8_FAIL(L8_ERR_OOM, "NCCL: out of host memory");
    n->comm = comm;
    n->owner = c;
    pthread_mutex_init(&n->mu, NULL);
    l8_status st = l8_event_create(c->ctx, 0, &n->in);
    if (st == L8_OK) st = l8_event_create(c->ctx, 0, &n->out);
    for (int i = 0; i < WATCH_SLOTS && st == L8_OK; i++) st = l8_event_create(c->ctx, 0, &n->ring[i].done);
    if (st == L8_OK && pthread_create(&n->thr, NULL, watchdog, n) == 0) n->running = 1;
    else if (st == L8_OK) st = L8_FAIL(L8_ERR_IO, "NCCL: cannot start the watchdog thread");
    c->nccl = n;                         /* l8i_nccl_destroy frees what exists */
    return st;
}

static ncclConfig_t config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

l8_status l8i_nccl_init(l8_comm *c, const uint8_t id[128], int64_t deadline_ms)
{
    L8_CHECK(nccl_load());
    L8_CHECK(l8i_ctx_bind(c->ctx));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = config();
    ncclComm_t comm = NULL;
    l8_status st = NC(NULL, ncclCommInitRankConfig, &comm, c->size, u, c->rank, &cfg);
    if (st == L8_OK || (comm && l8_last_error()->foreign_code == ncclInProgress))
        st = settle(comm, deadline_ms, "ncclCommInitRankConfig");
    if (st != L8_OK) {
        if (comm) g_nc.ncclCommAbort(comm);
        return L8_FAIL(st, "rank %d of %d: NCCL init failed: %s", c->rank, c->size,
                       l8_last_error()->message);
    }
    return state_new(c, comm);
}

l8_status l8i_nccl_split(l8_comm *parent, int color, int key, l8_comm *child)
{
    L8_CHECK(l8i_ctx_bind(parent->ctx));
    ncclConfig_t cfg = config();
    ncclComm_t comm = NULL;
    l8_status st = NC(parent->nccl->comm, ncclCommSplit, parent->nccl->comm,
                      color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &comm, &cfg);
    if (st == L8_OK || l8_last_error()->foreign_code == ncclInProgress)
        st = settle(parent->nccl->comm, l8i_now_ms() + parent->timeout_ms, "ncclCommSplit");
    if (st == L8_OK && comm) st = settle(comm, l8i_now_ms() + parent->timeout_ms, "ncclCommSplit");
    if (st != L8_OK || color < 0) {
        if (comm) g_nc.ncclCommAbort(comm);
        return st;
    }
    st = NC(comm, ncclCommCount, comm, &child->size);
    if (st == L8_OK) st = NC(comm, ncclCommUserRank, comm, &child->rank);
    if (st != L8_OK) {
        g_nc.ncclCommAbort(comm);
        return st;
    }
    free(child->peers);
    child->peers = NULL;
    return state_new(child, comm);
}

/* ---- the watchdog ---- */

static void fail_locked(l8i_nccl *n, l8_status st, const char *msg)
{
    if (n->failed == L8_OK) {
        n->failed = st;
        snprintf(n->failure, sizeof n->failure, "%s", msg);
    }
    if (!n->aborted) {
        n->aborted = 1;
        g_nc.ncclCommAbort(n->comm);
    }
}

static void *watchdog(void *arg)
{
    l8i_nccl *n = arg;
    l8_comm *c = n->owner;
    int bound = l8i_ctx_bind(c->ctx) == L8_OK;
    for (;;) {
        struct timespec ts = { 0, 50 * 1000000L };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&n->mu);
        if (n->stop) {
            pthread_mutex_unlock(&n->mu);
            break;
        }
        char msg[400];
        ncclResult_t a = ncclSuccess;
        if (!n->aborted && g_nc.ncclCommGetAsyncError(n->comm, &a) == ncclSuccess &&
            a != ncclSuccess && a != ncclInProgress) {
            snprintf(msg, sizeof msg, "rank %d: NCCL reported %s (%s); the communicator was "
                     "aborted", c->rank, g_nc.ncclGetErrorString(a),
                     g_nc.ncclGetLastError ? g_nc.ncclGetLastError(n->comm) : "");
            fail_locked(n, L8_ERR_NCCL, msg);
        }
        while (bound && n->count && !n->aborted) {
            watch *w = &n->ring[n->head];
            int done = 0;
            if (l8_event_query(w->done, &done) != L8_OK) done = 1;  /* the stream's error surfaces there */
            if (done) {
                n->head = (n->head + 1) % WATCH_SLOTS;
                n->count--;
                continue;
            }
            if (l8i_now_ms() - w->start_ms > c->timeout_ms) {
                snprintf(msg, sizeof msg, "rank %d: %s #%u (%zu bytes) did not complete within "
                         "%d ms (L8_COMM_TIMEOUT): a peer died or the ranks diverged; the "
                         "communicator was aborted", c->rank, l8i_op_name(w->op), w->seq, w->bytes,
                         c->timeout_ms);
                fail_locked(n, L8_ERR_TIMEOUT, msg);
            }
            break;
        }
        pthread_mutex_unlock(&n->mu);
    }
    return NULL;
}

l8_status l8i_nccl_check(l8_comm *c)
{
    l8i_nccl *n = c->nccl;
    pthread_mutex_lock(&n->mu);
    l8_status st = n->failed;
    char msg[400];
    snprintf(msg, sizeof msg, "%s", n->failure);
    pthread_mutex_unlock(&n->mu);
    if (st == L8_OK) return L8_OK;
    return l8_error_set(st, 0, "", "watchdog", __FILE__, __LINE__, "%s", msg);
}

static void stop_watchdog(l8i_nccl *n)
{
    if (!n->running) return;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thr, NULL);
    n->running = 0;
}

void l8i_nccl_abort(l8_comm *c)
{
    l8i_nccl *n = c->nccl;
    if (!n) return;
    stop_watchdog(n);
    if (n->comm && !n->aborted) {
        (void)l8i_ctx_bind(c->ctx);
        g_nc.ncclCommAbort(n->comm);
        n->aborted = 1;
    }
}

void l8i_nccl_destroy(l8_comm *c)
{
    l8i_nccl *n = c->nccl;
    if (!n) return;
    stop_watchdog(n);
    if (n->comm && !n->aborted) {
        /* the clean path: finalize (bounded by the timeout), then destroy;
         * a failed communicator, or one whose finalize fails, is aborted */
        int abort = c->failed != L8_OK || l8i_ctx_bind(c->ctx) != L8_OK ||
                    g_nc.ncclCommFinalize(n->comm) != ncclSuccess ||
                    settle(n->comm, l8i_now_ms() + c->timeout_ms, "ncclCommFinalize") != L8_OK;
        if (abort) g_nc.ncclCommAbort(n->comm);
        else g_nc.ncclCommDestroy(n->comm);
        n->aborted = 1;
    }
    l8_event_destroy(n->in);
    l8_event_destroy(n->out);
    for (int i = 0; i < WATCH_SLOTS; i++) l8_event_destroy(n->ring[i].done);
    pthread_mutex_destroy(&n->mu);
    free(n);
    c->nccl = NULL;
}

/* ---- collectives ---- */

static ncclDataType_t nc_type(l8_dtype dt)
{
    switch (dt) {
    case L8_F32: return ncclFloat32;
    case L8_BF16: return ncclBfloat16;
    case L8_F16: return ncclFloat16;
    default: return ncclUint8;         /* reductions of other dtypes are refused before */
    }
}

static ncclRedOp_t nc_op(l8_reduce_op op)
{
    return op == L8_REDUCE_AVG ? ncclAvg : op == L8_REDUCE_MAX ? ncclMax : ncclSum;
}

typedef struct call {
    l8_comm *c;
    l8_stream *s, *cs;
    cudaStream_t raw;
    int op;
    uint32_t seq;
    size_t bytes;
} call;

static l8_status enter(l8_comm *c, l8_stream *s, int op, size_t bytes, call *k)
{
    k->c = c;
    k->s = s;
    k->cs = l8_ctx_stream(c->ctx, L8_STREAM_COMM);
    k->raw = (cudaStream_t)l8i_stream_cu(k->cs);
    k->op = op;
    k->seq = ++c->seq;
    k->bytes = bytes;
    L8_CHECK(l8i_ctx_bind(c->ctx));
    if (s == k->cs) return L8_OK;
    L8_CHECK(l8_event_record(c->nccl->in, s));
    return l8_stream_wait_event(k->cs, c->nccl->in);
}

/* After an NCCL call: finish a non-blocking enqueue, watch the collective. */
static l8_status leave(call *k, l8_status called)
{
    l8i_nccl *n = k->c->nccl;
    if (called != L8_OK && l8_last_error()->foreign_code == ncclInProgress)
        called = settle(n->comm, l8i_now_ms() + k->c->timeout_ms, l8i_op_name(k->op));
    if (called != L8_OK)
        return L8_FAIL(called, "rank %d: %s #%u: %s", k->c->rank, l8i_op_name(k->op), k->seq,
                       l8_last_error()->message);
    pthread_mutex_lock(&n->mu);
    if (n->count == WATCH_SLOTS) {       /* full: the newest slot now watches this one */
        n->count--;
    }
    watch *w = &n->ring[(n->head + n->count) % WATCH_SLOTS];
    l8_status st = l8_event_record(w->done, k->cs);
    if (st == L8_OK) {
        w->start_ms = l8i_now_ms();
        w->op = (uint16_t)k->op;
        w->seq = k->seq;
        w->bytes = k->bytes;
        n->count++;
    }
    pthread_mutex_unlock(&n->mu);
    return st;
}

/* Later work on the caller's stream waits for everything enqueued on the
 * comm stream so far. */
static l8_status join(call *k, l8_status st)
{
    if (st != L8_OK || k->s == k->cs) return st;
    L8_CHECK(l8_event_record(k->c->nccl->out, k->cs));
    return l8_stream_wait_event(k->s, k->c->nccl->out);
}

l8_status l8i_nccl_all_reduce(l8_comm *c, const void *send, void *recv, size_t count, l8_dtype dt,
                              l8_reduce_op op, l8_stream *s)
{
    call k;
    L8_CHECK(enter(c, s, L8I_OP_ALL_REDUCE, count * l8_dtype_size(dt), &k));
    return join(&k, leave(&k, NC(c->nccl->comm, ncclAllReduce, send, recv, count, nc_type(dt),
                                 nc_op(op), c->nccl->comm, k.raw)));
}

l8_status l8i_nccl_broadcast(l8_comm *c, void *buf, size_t count, l8_dtype dt, int root,
                             l8_stream *s)
{
    call k;
    size_t bytes = count * l8_dtype_size(dt);   /* data moves as bytes, whatever its dtype */
    L8_CHECK(enter(c, s, L8I_OP_BROADCAST, bytes, &k));
    return join(&k, leave(&k, NC(c->nccl->comm, ncclBroadcast, buf, buf, bytes, ncclUint8, root,
                                 c->nccl->comm, k.raw)));
}

l8_status l8i_nccl_all_gather(l8_comm *c, const void *send, void *recv, size_t count,
                              l8_dtype dt, l8_stream *s, size_t rows, size_t chunk)
{
    call k;
    size_t bytes = count * l8_dtype_size(dt);
    L8_CHECK(enter(c, s, L8I_OP_ALL_GATHER, bytes, &k));
    void *tmp = recv;
    if (rows) L8_CHECK(l8_ctx_malloc(c->ctx, bytes * (size_t)c->size, k.cs, &tmp));
    l8_status st = leave(&k, NC(c->nccl->comm, ncclAllGather, send, tmp, bytes, ncclUint8,
                                c->nccl->comm, k.raw));
    if (rows) {
        if (st == L8_OK)
            st = l8i_interleave(k.cs, recv, tmp, c->size, (int64_t)rows, chunk, L8I_INTERLEAVE);
        l8_status fs = l8_ctx_free(c->ctx, tmp);   /* stream-ordered on the comm stream */
        if (st == L8_OK) st = fs;
    }
    return join(&k, st);
}

l8_status l8i_nccl_reduce_scatter(l8_comm *c, const void *send, void *recv, size_t count,
                                  l8_dtype dt, l8_reduce_op op, l8_stream *s, size_t rows,
                                  size_t chunk)
{
    call k;
    size_t bytes = count * l8_dtype_size(dt);
    L8_CHECK(enter(c, s, L8I_OP_REDUCE_SCATTER, bytes, &k));
    const void *src = send;
    void *tmp = NULL;
    if (rows) {
        L8_CHECK(l8_ctx_malloc(c->ctx, bytes * (size_t)c->size, k.cs, &tmp));
        l8_status st = l8i_interleave(k.cs, tmp, send, c->size, (int64_t)rows, chunk,
                                      L8I_DEINTERLEAVE);
        if (st != L8_OK) {
            l8_status ignored = l8_ctx_free(c->ctx, tmp);   /* the interleave's error is the news */
            (void)ignored;
            return st;
        }
        src = tmp;
    }
    l8_status st = leave(&k, NC(c->nccl->comm, ncclReduceScatter, src, recv, count, nc_type(dt),
                                nc_op(op), c->nccl->comm, k.raw));
    if (tmp) {
        l8_status fs = l8_ctx_free(c->ctx, tmp);
        if (st == L8_OK) st = fs;
    }
    return join(&k, st);
}

l8_status l8i_nccl_barrier(l8_comm *c)
{
    void *one;
    L8_CHECK(l8_ctx_malloc(c->ctx, 4, l8_ctx_stream(c->ctx, L8_STREAM_COMM), &one));
    l8_stream *cs = l8_ctx_stream(c->ctx, L8_STREAM_COMM);
    l8_status st = l8_memset_d8(cs, one, 0, 4);
    if (st == L8_OK) st = l8i_nccl_all_reduce(c, one, one, 1, L8_F32, L8_REDUCE_SUM, cs);
    if (st == L8_OK) st = l8_stream_synchronize(cs);
    l8_status fs = l8_ctx_free(c->ctx, one);
    return st == L8_OK ? fs : st;
}
