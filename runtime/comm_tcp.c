/* comm_tcp.c - the TCP transport and the rendezvous (research/host-transport.md).
 *
 * Rendezvous. Rank 0 listens; every other rank opens its own listener (for
 * the mesh), connects to rank 0 (retrying with capped exponential backoff
 * and jitter until the init deadline) and sends a hello: magic, protocol,
 * lean8's version, transport, world size, rank, run id, its mesh port.
 * Rank 0 checks each hello (a duplicate rank, another world size, version,
 * transport or run id is refused with a message naming the rank and what
 * differs; rank 0 then fails too and tells every rank already connected),
 * and once all world-1 hellos are in, answers each with the table of mesh
 * addresses (the address rank 0 saw the rank connect from, and its port)
 * and a 128-byte blob (NCCL's unique id when NCCL is bootstrapped).
 *
 * Mesh. Rank r keeps its rendezvous socket as its link to rank 0, connects
 * to ranks 1..r-1 and accepts ranks r+1..world-1 (one initiator per pair),
 * each new link starting with {magic, run id, rank}.
 *
 * Transport. Frames are {magic, l8i_hdr} + payload. One receiver thread per
 * process transport reads every socket into per-peer queues, so a sender
 * never waits for the receiving rank's recv call (no send/send deadlock).
 * A socket that closes or fails marks its peer gone: a recv waiting on it
 * fails with L8_ERR_COMM at once; a recv past its deadline fails with
 * L8_ERR_TIMEOUT. Sockets: TCP_NODELAY, keepalive and TCP_USER_TIMEOUT (a
 * partitioned peer is noticed), MSG_NOSIGNAL, close-on-exec. The hosts are
 * assumed to share byte order (headers go as the host's structs).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "runtime/comm_internal.h"

#define WIRE_MAGIC 0x4c385450u            /* "L8TP" */

static l8_status sock_fail(l8_status st, const char *call, const char *fmt, const char *what, int e)
{
    return l8_error_set(st, e, l8_errno_name(e), call, __FILE__, __LINE__, fmt, what, strerror(e));
}

static void tune(int fd, int timeout_ms)
{
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    unsigned ut = timeout_ms > 0 ? (unsigned)timeout_ms : 0;
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Move n bytes, waiting at most until deadline_ms. 0 from recv is a closed
 * peer. Returns L8_OK, L8_ERR_COMM (closed/reset) or L8_ERR_TIMEOUT. */
static l8_status io_full(int fd, void *buf, size_t n, int writing, int64_t deadline_ms,
                         const char *what)
{
    char *p = buf;
    while (n) {
        int64_t left = deadline_ms - l8i_now_ms();
        if (left <= 0) return L8_FAIL(L8_ERR_TIMEOUT, "%s: timed out", what);
        struct pollfd pf = { fd, (short)(writing ? POLLOUT : POLLIN), 0 };
        int r = poll(&pf, 1, left > 1000 ? 1000 : (int)left);
        if (r < 0 && errno != EINTR) return sock_fail(L8_ERR_COMM, "poll", "%s: %s", what, errno);
        if (r <= 0) continue;
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, p, n, MSG_DONTWAIT);
        if (k == 0 && !writing)
            return L8_FAIL(L8_ERR_COMM, "%s: the peer closed the connection", what);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return sock_fail(L8_ERR_COMM, writing ? "send" : "recv", "%s: %s", what, errno);
        }
        p += k;
        n -= (size_t)k;
    }
    return L8_OK;
}

l8_status l8i_tcp_listen(const char *host, int port, int *fd, int *bound_port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return sock_fail(L8_ERR_IO, "socket", "%s: %s", "listen", errno);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (host && host[0] && inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        close(s);
        return L8_FAIL(L8_ERR_INVALID_ARG, "listen: '%s' is not a numeric IPv4 address", host);
    }
    socklen_t len = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1024) ||
        getsockname(s, (struct sockaddr *)&a, &len)) {
        int e = errno;
        close(s);
        char what[96];
        snprintf(what, sizeof what, "listen on %s:%d", host && host[0] ? host : "*", port);
        return sock_fail(L8_ERR_IO, "bind", "%s: %s", what, e);
    }
    *fd = s;
    *bound_port = ntohs(a.sin_port);
    return L8_OK;
}

void l8i_tcp_advertised_host(char *out, size_t n)
{
    const char *env = getenv("L8_COMM_ADDR");
    snprintf(out, n, "%s", env && env[0] ? env : "127.0.0.1");
    if (env && env[0]) return;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs)) return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if ((ntohl(a.s_addr) >> 24) == 127) continue;
        inet_ntop(AF_INET, &a, out, (socklen_t)n);
        break;
    }
    freeifaddrs(ifs);
}

/* Connect to host:port, retrying until the deadline (backoff 20 ms x 1.5,
 * capped at 1 s, +-25% jitter). */
static l8_status connect_retry(const char *host, int port, int64_t deadline_ms, int timeout_ms,
                               int *out)
{
    char svc[16];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int gai = getaddrinfo(host, svc, &hints, &ai);
    if (gai)
        return l8_error_set(L8_ERR_IO, gai, "EAI", "getaddrinfo", __FILE__, __LINE__,
                            "cannot resolve '%s': %s", host, gai_strerror(gai));
    double wait_ms = 20;
    int last = 0;
    for (;;) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(ai);
            tune(s, timeout_ms);
            *out = s;
            return L8_OK;
        }
        last = errno;
        if (s >= 0) close(s);
        int64_t left = deadline_ms - l8i_now_ms();
        if (left <= 0) break;
        double jitter = 0.75 + 0.5 * (double)(l8i_random64() % 1000) / 1000.0;
        int64_t nap = (int64_t)(wait_ms * jitter);
        if (nap > left) nap = left;
        struct timespec ts = { (time_t)(nap / 1000), (long)(nap % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        wait_ms = wait_ms * 1.5 > 1000 ? 1000 : wait_ms * 1.5;
    }
    freeaddrinfo(ai);
    return l8_error_set(L8_ERR_TIMEOUT, last, l8_errno_name(last), "connect", __FILE__, __LINE__,
                        "could not reach %s:%d before the deadline (L8_INIT_TIMEOUT); last error: "
                        "%s", host, port, strerror(last));
}

static l8_status accept_until(int lfd, int64_t deadline_ms, int timeout_ms, int *out, char *peer,
                              size_t peer_n)
{
    for (;;) {
        int64_t left = deadline_ms - l8i_now_ms();
        if (left <= 0) return L8_FAIL(L8_ERR_TIMEOUT, "accept: timed out");
        struct pollfd pf = { lfd, POLLIN, 0 };
        int r = poll(&pf, 1, left > 1000 ? 1000 : (int)left);
        if (r <= 0) continue;
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        int s = accept4(lfd, (struct sockaddr *)&a, &len, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
            return sock_fail(L8_ERR_IO, "accept", "%s: %s", "rendezvous", errno);
        }
        tune(s, timeout_ms);
        if (peer) inet_ntop(AF_INET, &a.sin_addr, peer, (socklen_t)peer_n);
        *out = s;
        return L8_OK;
    }
}

/* ---- the rendezvous ---- */

typedef struct hello {
    uint32_t magic, proto, transport;
    int32_t world, rank, mesh_port;
    uint64_t run_id;
    char version[16];
} hello;

typedef struct reply {
    uint32_t magic;
    int32_t ok;
    char why[400];
    uint8_t blob[128];
} reply;

typedef struct entry { char host[64]; int32_t port; } entry;

/* What differs between rank 0 (a) and another rank's hello (b); "" if nothing. */
static void differs(const hello *a, const hello *b, int seen, char *out, size_t n)
{
    out[0] = '\0';
    if (b->magic != WIRE_MAGIC || b->proto != L8I_PROTO_VERSION)
        snprintf(out, n, "a connection that is not a lean8 rank of this protocol (magic %08x, "
                 "protocol %u)", b->magic, b->proto);
    else if (b->rank < 1 || b->rank >= a->world)
        snprintf(out, n, "rank %d is outside 1..%d of world size %d", b->rank, a->world - 1, a->world);
    else if (b->world != a->world)
        snprintf(out, n, "rank %d has world size %d, rank 0 has %d", b->rank, b->world, a->world);
    else if (strncmp(b->version, a->version, sizeof a->version))
        snprintf(out, n, "rank %d runs lean8 %.16s, rank 0 runs %.16s", b->rank, b->version, a->version);
    else if (b->transport != a->transport)
        snprintf(out, n, "rank %d uses transport %u, rank 0 uses %u (1 NCCL, 2 TCP)", b->rank,
                 b->transport, a->transport);
    else if (b->run_id != a->run_id)
        snprintf(out, n, "rank %d belongs to another run (run id %016llx, rank 0 has %016llx)",
                 b->rank, (unsigned long long)b->run_id, (unsigned long long)a->run_id);
    else if (seen)
        snprintf(out, n, "rank %d connected twice (two processes with the same RANK?)", b->rank);
}

static l8_status send_reply(int fd, int ok, const char *why, const uint8_t *blob, int64_t dl)
{
    reply rp = { WIRE_MAGIC, ok, "", { 0 } };
    snprintf(rp.why, sizeof rp.why, "%s", why ? why : "");
    if (blob) memcpy(rp.blob, blob, sizeof rp.blob);
    return io_full(fd, &rp, sizeof rp, 1, dl, "rendezvous reply");
}

static l8_status root_side(l8i_rdzv *r, int *fds, entry *table)
{
    hello me = { WIRE_MAGIC, L8I_PROTO_VERSION, r->transport, r->world, 0, 0, r->run_id, "" };
    snprintf(me.version, sizeof me.version, "%s", L8_VERSION);
    l8_status st = L8_OK;
    char why[400] = "";
    for (int got = 0; got < r->world - 1 && st == L8_OK;) {
        int s;
        char peer[64];
        st = accept_until(r->listen_fd, r->deadline_ms, r->timeout_ms, &s, peer, sizeof peer);
        if (st != L8_OK) {
            st = L8_FAIL(L8_ERR_TIMEOUT, "rendezvous: %d of %d ranks arrived before the deadline "
                         "(L8_INIT_TIMEOUT)", got + 1, r->world);
            break;
        }
        hello h;
        if (io_full(s, &h, sizeof h, 0, l8i_now_ms() + 10000, "rendezvous hello") != L8_OK) {
            close(s);                     /* a port scanner or a dead rank: not one of ours */
            continue;
        }
        differs(&me, &h, h.rank >= 1 && h.rank < r->world && fds[h.rank] >= 0, why, sizeof why);
        if (why[0]) {
            (void)send_reply(s, 0, why, NULL, l8i_now_ms() + 2000);
            close(s);
            st = L8_FAIL(L8_ERR_COMM, "rendezvous refused a launch: %s", why);
            break;
        }
        fds[h.rank] = s;
        snprintf(table[h.rank].host, sizeof table[h.rank].host, "%s", peer);
        table[h.rank].port = h.mesh_port;
        got++;
    }
    for (int i = 1; i < r->world; i++) {
        if (fds[i] < 0) continue;
        l8_status w = send_reply(fds[i], st == L8_OK, st == L8_OK ? "" : l8_last_error()->message,
                                 r->blob, l8i_now_ms() + 10000);
        if (st == L8_OK && w == L8_OK)
            w = io_full(fds[i], table, sizeof(entry) * (size_t)r->world, 1, l8i_now_ms() + 10000,
                        "rendezvous table");
        if (st == L8_OK && w != L8_OK) st = w;
    }
    return st;
}

static l8_status member_side(l8i_rdzv *r, int mesh_port, int *fds, entry *table)
{
    int s;
    L8_CHECK(connect_retry(r->host, r->port, r->deadline_ms, r->timeout_ms, &s));
    fds[0] = s;
    hello me = { WIRE_MAGIC, L8I_PROTO_VERSION, r->transport, r->world, r->rank, mesh_port,
                 r->run_id, "" };
    snprintf(me.version, sizeof me.version, "%s", L8_VERSION);
    L8_CHECK(io_full(s, &me, sizeof me, 1, r->deadline_ms, "rendezvous hello"));
    reply rp;
    l8_status st = io_full(s, &rp, sizeof rp, 0, r->deadline_ms, "rendezvous reply");
    if (st != L8_OK)
        return L8_FAIL(st, "rank %d: no answer from rank 0 at %s:%d: %s", r->rank, r->host, r->port,
                       l8_last_error()->message);
    if (rp.magic != WIRE_MAGIC || !rp.ok)
        return L8_FAIL(L8_ERR_COMM, "rank %d: rank 0 refused the launch: %.399s", r->rank,
                       rp.magic == WIRE_MAGIC ? rp.why : "not a lean8 rank 0");
    memcpy(r->blob, rp.blob, sizeof r->blob);
    return io_full(s, table, sizeof(entry) * (size_t)r->world, 0, r->deadline_ms, "rendezvous table");
}

typedef struct peer_hello { uint32_t magic; int32_t rank; uint64_t run_id; } peer_hello;

static l8_status mesh(l8i_rdzv *r, int lfd, int *fds, const entry *table)
{
    if (r->rank == 0) return L8_OK;      /* linked to every rank by the rendezvous */
    for (int j = 1; j < r->rank; j++) {
        L8_CHECK(connect_retry(table[j].host, table[j].port, r->deadline_ms, r->timeout_ms, &fds[j]));
        peer_hello ph = { WIRE_MAGIC, r->rank, r->run_id };
        L8_CHECK(io_full(fds[j], &ph, sizeof ph, 1, r->deadline_ms, "mesh hello"));
    }
    for (int n = r->world - 1 - r->rank; n > 0;) {
        int s;
        l8_status st = accept_until(lfd, r->deadline_ms, r->timeout_ms, &s, NULL, 0);
        if (st != L8_OK)
            return L8_FAIL(L8_ERR_TIMEOUT, "rank %d: %d higher ranks did not connect before the "
                           "deadline", r->rank, n);
        peer_hello ph;
        if (io_full(s, &ph, sizeof ph, 0, r->deadline_ms, "mesh hello") != L8_OK ||
            ph.magic != WIRE_MAGIC || ph.run_id != r->run_id || ph.rank <= r->rank ||
            ph.rank >= r->world || fds[ph.rank] >= 0) {
            close(s);
            continue;
        }
        fds[ph.rank] = s;
        n--;
    }
    return L8_OK;
}

/* ---- the transport ---- */

typedef struct tmsg {
    struct tmsg *next;
    l8i_hdr h;
    unsigned char data[];
} tmsg;

typedef struct frame { uint32_t magic, pad; l8i_hdr h; } frame;

typedef struct tcp_xport {
    l8i_xport base;
    int *fd;                              /* [world]; -1 for self and closed links */
    pthread_mutex_t *send_mu;             /* [world] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tmsg **head;                          /* [world] messages from each peer */
    char (*why)[160];                     /* [world] "" while the peer is there */
    pthread_t thr;
    int wake[2];                          /* the receiver thread stops when this is written */
    int running;
    int timeout_ms;
} tcp_xport;

static void peer_gone(tcp_xport *t, int p, const char *why)
{
    pthread_mutex_lock(&t->mu);
    if (!t->why[p][0]) snprintf(t->why[p], sizeof t->why[p], "%s", why);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Read one whole frame from peer p into its queue. */
static void pump(tcp_xport *t, int p)
{
    frame f;
    l8_status st = io_full(t->fd[p], &f, sizeof f, 0, l8i_now_ms() + t->timeout_ms, "receive");
    tmsg *m = NULL;
    if (st == L8_OK && f.magic != WIRE_MAGIC) {
        peer_gone(t, p, "sent bytes that are not a lean8 frame");
        goto drop;
    }
    if (st == L8_OK) {
        m = malloc(sizeof *m + f.h.bytes);
        if (!m) {
            peer_gone(t, p, "sent a frame larger than the free host memory");
            goto drop;
        }
        m->next = NULL;
        m->h = f.h;
        st = io_full(t->fd[p], m->data, f.h.bytes, 0, l8i_now_ms() + t->timeout_ms, "receive");
    }
    if (st != L8_OK) {
        free(m);
        peer_gone(t, p, l8_last_error()->message);
        goto drop;
    }
    pthread_mutex_lock(&t->mu);
    tmsg **at = &t->head[p];
    while (*at) at = &(*at)->next;
    *at = m;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return;
drop:                                     /* the link is dead (why[p] set): not polled again */
    shutdown(t->fd[p], SHUT_RDWR);
}

static int alive(tcp_xport *t, int p)
{
    pthread_mutex_lock(&t->mu);
    int ok = t->fd[p] >= 0 && !t->why[p][0];
    pthread_mutex_unlock(&t->mu);
    return ok;
}

static void *receiver(void *arg)
{
    tcp_xport *t = arg;
    int w = t->base.world;
    struct pollfd *pf = calloc((size_t)w + 1, sizeof *pf);
    if (!pf) {
        for (int p = 0; p < w; p++) peer_gone(t, p, "the receiver thread ran out of memory");
        return NULL;
    }
    for (;;) {
        int n = 0;
        pf[n++] = (struct pollfd){ t->wake[0], POLLIN, 0 };
        for (int p = 0; p < w; p++)
            if (alive(t, p)) pf[n++] = (struct pollfd){ t->fd[p], POLLIN, 0 };
        if (poll(pf, (nfds_t)n, -1) < 0 && errno != EINTR) break;
        if (pf[0].revents) break;
        for (int i = 1; i < n; i++) {
            if (!pf[i].revents) continue;
            for (int p = 0; p < w; p++)
                if (t->fd[p] == pf[i].fd) pump(t, p);
        }
    }
    free(pf);
    return NULL;
}

static l8_status tcp_send(l8i_xport *x, int peer, const l8i_hdr *h, const void *buf)
{
    tcp_xport *t = (tcp_xport *)x;
    pthread_mutex_lock(&t->mu);
    char why[160];
    snprintf(why, sizeof why, "%s", t->why[peer]);
    pthread_mutex_unlock(&t->mu);
    if (why[0] || t->fd[peer] < 0)
        return L8_FAIL(L8_ERR_COMM, "rank %d: rank %d is gone (%s) before %s #%u", x->rank, peer,
                       why[0] ? why : "link closed", l8i_op_name(h->op), h->seq);
    frame f = { WIRE_MAGIC, 0, *h };
    int64_t dl = l8i_now_ms() + t->timeout_ms;
    pthread_mutex_lock(&t->send_mu[peer]);
    l8_status st = io_full(t->fd[peer], &f, sizeof f, 1, dl, "send");
    if (st == L8_OK) st = io_full(t->fd[peer], (void *)buf, h->bytes, 1, dl, "send");
    pthread_mutex_unlock(&t->send_mu[peer]);
    if (st != L8_OK)
        return L8_FAIL(st, "rank %d: lost rank %d while sending %s #%u: %s", x->rank, peer,
                       l8i_op_name(h->op), h->seq, l8_last_error()->message);
    return L8_OK;
}

static l8_status tcp_recv(l8i_xport *x, int peer, const l8i_hdr *want, void *buf,
                          int64_t deadline_ms)
{
    tcp_xport *t = (tcp_xport *)x;
    tmsg *m = NULL;
    l8_status st = L8_OK;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        for (tmsg **at = &t->head[peer]; *at; at = &(*at)->next)
            if ((*at)->h.tag == want->tag) {
                m = *at;
                *at = m->next;
                break;
            }
        if (m) break;
        if (t->why[peer][0]) {
            st = L8_FAIL(L8_ERR_COMM, "rank %d: lost rank %d during %s #%u: %s", x->rank, peer,
                         l8i_op_name(want->op), want->seq, t->why[peer]);
            break;
        }
        int64_t left = deadline_ms - l8i_now_ms();
        if (left <= 0) {
            st = l8i_recv_timeout(x->rank, peer, want);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (left > 200 ? 200 : left) * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    if (!m) return st;
    st = l8i_hdr_check(x->rank, peer, &m->h, want);
    if (st == L8_OK && want->bytes) memcpy(buf, m->data, want->bytes);
    free(m);
    return st;
}

static void tcp_close(l8i_xport *x)
{
    tcp_xport *t = (tcp_xport *)x;
    if (t->running) {
        char b = 1;
        if (write(t->wake[1], &b, 1) < 0) { /* the thread also stops when the fds close */ }
        pthread_join(t->thr, NULL);
        t->running = 0;
    }
    for (int p = 0; p < x->world; p++)
        if (t->fd[p] >= 0) shutdown(t->fd[p], SHUT_RDWR);
}

static void tcp_free(tcp_xport *t)
{
    int w = t->base.world;
    tcp_close(&t->base);
    for (int p = 0; p < w; p++) {
        if (t->fd[p] >= 0) close(t->fd[p]);
        for (tmsg *m = t->head[p], *n; m; m = n) {
            n = m->next;
            free(m);
        }
        pthread_mutex_destroy(&t->send_mu[p]);
    }
    if (t->wake[0] >= 0) close(t->wake[0]), close(t->wake[1]);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->fd), free(t->send_mu), free(t->head), free(t->why);
    free(t);
}

static void tcp_release(l8i_xport *x) { tcp_free((tcp_xport *)x); }

static const l8i_xport_ops k_tcp_ops = { tcp_send, tcp_recv, tcp_close, tcp_release };

static l8_status xport_new(int rank, int world, int timeout_ms, tcp_xport **out)
{
    tcp_xport *t = calloc(1, sizeof *t);
    if (!t) return L8_FAIL(L8_ERR_OOM, "rendezvous: out of host memory");
    t->fd = malloc(sizeof *t->fd * (size_t)world);
    t->send_mu = calloc((size_t)world, sizeof *t->send_mu);
    t->head = calloc((size_t)world, sizeof *t->head);
    t->why = calloc((size_t)world, sizeof *t->why);
    t->wake[0] = t->wake[1] = -1;
    if (!t->fd || !t->send_mu || !t->head || !t->why) {
        free(t->fd), free(t->send_mu), free(t->head), free(t->why), free(t);
        return L8_FAIL(L8_ERR_OOM, "rendezvous: out of host memory");
    }
    for (int p = 0; p < world; p++) {
        t->fd[p] = -1;
        pthread_mutex_init(&t->send_mu[p], NULL);
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->base.ops = &k_tcp_ops;
    t->base.rank = rank;
    t->base.world = world;
    t->base.refs = 1;
    t->timeout_ms = timeout_ms;
    *out = t;
    return L8_OK;
}

l8_status l8i_tcp_rendezvous(l8i_rdzv *r, l8i_xport **out)
{
    tcp_xport *t = NULL;
    entry *table = calloc((size_t)r->world, sizeof *table);
    l8_status st = table ? xport_new(r->rank, r->world, r->timeout_ms, &t)
                         : L8_FAIL(L8_ERR_OOM, "rendezvous: out of host memory");
    if (st != L8_OK) {
        free(table);
        if (r->listen_fd >= 0) close(r->listen_fd);
        return st;
    }
    int lfd = r->listen_fd, mesh_port = 0;
    if (r->rank > 0 && out) st = l8i_tcp_listen(NULL, 0, &lfd, &mesh_port);
    if (st == L8_OK && r->world > 1)
        st = r->rank == 0 ? root_side(r, t->fd, table) : member_side(r, mesh_port, t->fd, table);
    if (st == L8_OK && out && r->world > 1) st = mesh(r, lfd, t->fd, table);
    if (lfd >= 0) close(lfd);
    free(table);
    if (st == L8_OK && out && (pipe2(t->wake, O_CLOEXEC) ||
                               pthread_create(&t->thr, NULL, receiver, t)))
        st = L8_FAIL(L8_ERR_IO, "rendezvous: cannot start the receiver thread");
    if (st != L8_OK || !out) {
        tcp_free(t);
        return st;
    }
    t->running = 1;
    *out = &t->base;
    return L8_OK;
}
