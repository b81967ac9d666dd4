/* comm_internal.h - what the communicator's files share (not installed).
 *
 *   comm.c          the l8_comm object, argument checks, dispatch, split/grid
 *   comm_host.c     host collectives over a point-to-point transport
 *   comm_threads.c  that transport between threads of one process
 *   comm_tcp.c      that transport over TCP sockets, and the rendezvous
 *   comm_nccl.c     the NCCL backend and its watchdog
 *   bootstrap.c     ids, the launcher's environment, the rendezvous file
 */
#ifndef L8_RUNTIME_COMM_INTERNAL_H
#define L8_RUNTIME_COMM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "runtime/comm.h"
#include "runtime/internal.h"

/* ---- the id's bytes (bootstrap.c) ---- */
#define L8I_ID_MAGIC 0x4c384944u          /* "L8ID" */
#define L8I_PROTO_VERSION 1u
typedef struct l8i_id {
    uint32_t magic, proto;
    uint32_t transport;                   /* l8_comm_transport, never DEFAULT */
    uint32_t port;                        /* TCP: rank 0's port (host order) */
    uint64_t run_id;                      /* random per id: ties the ranks of one job */
    char host[64];                        /* TCP: rank 0's address, numeric */
    uint8_t nccl[128];                    /* NCCL: ncclUniqueId */
} l8i_id;
_Static_assert(sizeof(l8i_id) <= L8_COMM_ID_BYTES, "l8i_id fits l8_comm_id");

/* Decode and check an id (L8_ERR_INVALID_ARG "<fn>: ..." when it is not one). */
l8_status l8i_id_read(const char *fn, const l8_comm_id *id, l8i_id *out);
uint64_t l8i_random64(void);
/* Timeouts in ms from the config or the environment (seconds). */
int l8i_comm_timeout_ms(const l8_comm_config *c);
int l8i_init_timeout_ms(const l8_comm_config *c);
/* Monotonic clock in ms. */
int64_t l8i_now_ms(void);

/* ---- the point-to-point transport the host collectives use ----
 * Peers are ranks of the transport's world (the root communicator's);
 * messages between two peers arrive in order. Every message carries a
 * header the receiver checks against what it expects, so two ranks that
 * disagree about a collective fail loudly instead of mixing bytes. */
typedef struct l8i_hdr {
    uint32_t tag;                         /* the communicator's id in this transport */
    uint32_t seq;                         /* its collective number */
    uint16_t op;                          /* l8i_op */
    uint16_t dtype;
    uint32_t aux;                         /* op-specific: root, dim, chunk index */
    uint64_t bytes;                       /* payload bytes that follow */
} l8i_hdr;

typedef enum l8i_op {
    L8I_OP_ALL_REDUCE = 1, L8I_OP_BROADCAST, L8I_OP_ALL_GATHER, L8I_OP_REDUCE_SCATTER,
    L8I_OP_BARRIER, L8I_OP_SPLIT, L8I_OP_SCALES
} l8i_op;
const char *l8i_op_name(int op);

typedef struct l8i_xport l8i_xport;
typedef struct l8i_xport_ops {
    /* Send n bytes (may be 0) to peer; returns once buf may be reused. */
    l8_status (*send)(l8i_xport *x, int peer, const l8i_hdr *h, const void *buf);
    /* Receive the next message from peer whose tag is want->tag into buf
     * (want->bytes bytes); the whole header must match want. Waits until
     * deadline_ms (l8i_now_ms clock). */
    l8_status (*recv)(l8i_xport *x, int peer, const l8i_hdr *want, void *buf, int64_t deadline_ms);
    /* Leave: peers waiting on this rank fail with L8_ERR_COMM. */
    void (*close)(l8i_xport *x);
    /* Drop a reference (the last frees). */
    void (*release)(l8i_xport *x);
} l8i_xport_ops;

struct l8i_xport {
    const l8i_xport_ops *ops;
    int rank, world;                      /* in the transport */
    int refs;                             /* under l8i_xport_lock */
    uint32_t next_tag;                    /* tags for split communicators */
};
void l8i_xport_retain(l8i_xport *x);
/* comm_host.c: L8_OK when a received header is the expected one, else
 * L8_ERR_COMM describing both; the timeout error of a recv. */
l8_status l8i_hdr_check(int me, int peer, const l8i_hdr *got, const l8i_hdr *want);
l8_status l8i_recv_timeout(int me, int peer, const l8i_hdr *want);
void l8i_xport_release(l8i_xport *x);

/* comm_threads.c: join the process-local group `key` as rank of world. */
l8_status l8i_threads_create_group(uint64_t *key);
l8_status l8i_threads_join(uint64_t key, int rank, int world, int64_t deadline_ms, l8i_xport **out);

/* comm_tcp.c. The rendezvous: rank 0 listens (fd, already bound and
 * listening), ranks > 0 connect to host:port. Each hello carries rank,
 * world, lean8's version, the transport and the run id; rank 0 checks them
 * and answers with the table of the ranks' mesh addresses and `blob` (NCCL's
 * id), or with the reason it refused. mesh != NULL: the ranks then connect
 * to each other and *mesh is the TCP transport. Otherwise only the blob. */
typedef struct l8i_rdzv {
    int listen_fd;                        /* rank 0: >= 0 (consumed: closed on return) */
    const char *host;                     /* ranks > 0: rank 0's address */
    int port;
    int rank, world;
    uint32_t transport;
    uint64_t run_id;
    int64_t deadline_ms;
    int timeout_ms;                       /* the transport's collective timeout */
    uint8_t blob[128];                    /* in at rank 0, out elsewhere */
} l8i_rdzv;
l8_status l8i_tcp_rendezvous(l8i_rdzv *r, l8i_xport **mesh);
/* A listening socket on host ("" or NULL: all interfaces) and port (0: any);
 * *bound_port gets the port. */
l8_status l8i_tcp_listen(const char *host, int port, int *fd, int *bound_port);
/* This host's address the others should use (L8_COMM_ADDR, else the first
 * non-loopback IPv4, else 127.0.0.1). */
void l8i_tcp_advertised_host(char *out, size_t n);
/* bootstrap.c: the listener l8_comm_id_create opened, taken out (once) by
 * rank 0's l8_comm_init_rank; -1 if none. */
int l8i_id_take_listener(uint64_t run_id);

/* ---- the communicator ---- */
typedef struct l8i_nccl l8i_nccl;

struct l8_comm {
    l8_ctx *ctx;
    l8_comm_transport transport;
    int rank, size;
    int timeout_ms;
    /* host transports */
    l8i_xport *xp;
    uint32_t tag;                         /* this communicator's tag in xp */
    int *peers;                           /* [size]: xp rank of each of our ranks */
    uint32_t seq;                         /* collectives so far */
    uint32_t splits;                      /* split calls so far (child tags) */
    /* NCCL */
    l8i_nccl *nccl;
    /* the first error, repeated by every later call */
    l8_status failed;
    char failure[512];
    l8i_deps deps;                        /* told at destroy (l8i_comm_attach) */
};

/* Record the communicator's first failure and return it (later calls return
 * L8_ERR_STATE naming it through l8i_comm_ready). */
l8_status l8i_comm_fail(l8_comm *c, l8_status st);
l8_status l8i_comm_ready(l8_comm *c, const char *fn);
/* A communicator object (no transport yet). */
l8_status l8i_comm_new(l8_ctx *ctx, l8_comm_transport t, int rank, int size, int timeout_ms,
                       l8_comm **out);

/* comm_host.c: the collectives on raw host bytes, count elements of dt
 * (send and recv as comm.h; layouts already first-dimension). */
l8_status l8i_host_all_reduce(l8_comm *c, const void *send, void *recv, size_t count,
                              l8_dtype dt, l8_reduce_op op);
l8_status l8i_host_broadcast(l8_comm *c, void *buf, size_t bytes, int root);
/* recv = [size][bytes] of every rank's send. */
l8_status l8i_host_all_gather(l8_comm *c, const void *send, void *recv, size_t bytes,
                              l8_dtype dt);
/* send [size][count] -> recv [count] of this rank, reduced in rank order. */
l8_status l8i_host_reduce_scatter(l8_comm *c, const void *send, void *recv, size_t count,
                                  l8_dtype dt, l8_reduce_op op);
l8_status l8i_host_barrier(l8_comm *c);
/* Every rank's `bytes` of `mine` -> all [size][bytes] (an all-gather with op tag). */
l8_status l8i_host_exchange(l8_comm *c, int op, const void *mine, void *all, size_t bytes);

/* comm_nccl.c */
l8_status l8i_nccl_init(l8_comm *c, const uint8_t id[128], int64_t deadline_ms);
l8_status l8i_nccl_get_unique_id(uint8_t id[128]);
l8_status l8i_nccl_split(l8_comm *parent, int color, int key, l8_comm *child);
/* Stop the watchdog and ncclCommAbort (once); destroy frees after either. */
void l8i_nccl_abort(l8_comm *c);
void l8i_nccl_destroy(l8_comm *c);
l8_status l8i_nccl_check(l8_comm *c);
l8_status l8i_nccl_all_reduce(l8_comm *c, const void *send, void *recv, size_t count,
                              l8_dtype dt, l8_reduce_op op, l8_stream *s);
l8_status l8i_nccl_broadcast(l8_comm *c, void *buf, size_t count, l8_dtype dt, int root,
                             l8_stream *s);
/* rows > 0: a last-dimension gather/scatter of [rows][chunk bytes] per
 * rank, through a scratch on the comm stream and l8i_interleave. */
l8_status l8i_nccl_all_gather(l8_comm *c, const void *send, void *recv, size_t count,
                              l8_dtype dt, l8_stream *s, size_t rows, size_t chunk);
l8_status l8i_nccl_reduce_scatter(l8_comm *c, const void *send, void *recv, size_t count,
                                  l8_dtype dt, l8_reduce_op op, l8_stream *s, size_t rows,
                                  size_t chunk);
l8_status l8i_nccl_barrier(l8_comm *c);

#endif
