/* comm.h - communicators: a group of ranks that run collectives together.
 *
 * A communicator (l8_comm) joins one context per rank. Three transports,
 * one API:
 *   NCCL     a CUDA context: NCCL (libnccl.so.2, opened at run time) on the
 *            context's comm stream. Multi-GPU, multi-node: the scale path.
 *   TCP      a host context: ranks as processes (or threads) joined by TCP
 *            sockets, on loopback or a real network.
 *   THREADS  a host context: ranks as threads of one process, exchanging
 *            through shared memory.
 * The host transports are the CPU reference (the role Gloo plays for
 * PyTorch): small and correct, not fast. Their reductions are deterministic:
 * element i is summed by one owner rank in rank order 0, 1, ..., p-1 in f32
 * (bf16/f16/FP8 inputs widened, rounded once) and the result copied to
 * everyone, so every rank holds the same bits, run after run, whether the
 * ranks are threads or processes.
 *
 * Joining. Every rank of a communicator calls an init function at about the
 * same time (they are collective and block until all ranks arrived or the
 * init timeout passed):
 *   (a) l8_comm_init_rank with an l8_comm_id that one rank made with
 *       l8_comm_id_create and handed to the others (an MPI code broadcasts
 *       it: docs/distributed.md shows the three lines);
 *   (b) l8_comm_init_env, from the launcher's environment: torchrun /
 *       lean8-run (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *       MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS,
 *       SLURM_LOCALID, SLURM_NTASKS_PER_NODE) or Open MPI
 *       (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE), with a TCP
 *       rendezvous where rank 0 listens on MASTER_ADDR:MASTER_PORT and serves
 *       the id; or (c) with L8_INIT_FILE=path, through a file on a shared
 *       filesystem that rank 0 writes and the others read.
 *   Every rank's hello carries its rank, the world size, lean8's version and
 *   the transport; rank 0 refuses a launch where they differ (a duplicate
 *   rank, another world size, another version or transport) with
 *   L8_ERR_COMM naming the rank and what differs, and the ranks it refused
 *   fail too. Ranks keep retrying the connection (capped exponential
 *   backoff) until the init timeout: L8_INIT_TIMEOUT seconds, default 300.
 *
 * Streams and ordering (NCCL). A collective called with stream s (NULL: the
 * compute stream) runs on the context's comm stream after the work enqueued
 * on s so far, and later work on s runs after it: the streams are joined
 * with events, the host never waits. Passing the comm stream itself skips
 * both joins: the caller orders the comm stream with events and overlaps
 * it with compute (what the tensor-parallel Linear does). On a host context
 * a collective has finished when the call returns.
 *
 * Faults. Every blocking wait has a deadline: L8_COMM_TIMEOUT seconds
 * (default 600) or the config's timeout_ms. A dead peer (closed socket), a
 * collective that never completes (NCCL: a watchdog thread polls each
 * collective's completion and ncclCommGetAsyncError) turns the communicator
 * into a failed one: NCCL's is aborted (ncclCommAbort), and this and every
 * later call returns L8_ERR_COMM (peer gone, NCCL error) or L8_ERR_TIMEOUT,
 * with the rank, the operation and its sequence number in the message; never
 * a hang, never an exit. Shapes or dtypes that differ across ranks are
 * found by the host transports (every message carries the operation, dtype
 * and count) and are L8_ERR_COMM naming both sides; NCCL cannot see them:
 * keep shapes equal (the timeout catches the hang that follows).
 *
 * FP8. FP8 tensors move as bytes. A gather of FP8 data is only meaningful
 * when every rank cast with the same scale (the recipe's amax reduction
 * over the group, l8_comm_reduce_amax, makes it so): when the send tensor
 * carries FP8 metadata, the host transports compare the ranks' scale_inv
 * and fail with L8_ERR_INVALID_ARG naming the ranks that differ. The NCCL
 * path does not compare them (that would cost a device-to-host round trip
 * per gather): there the amax reduction is what guarantees one scale.
 * Host reductions (sum, avg, max) of FP8 data are computed in f32 and
 * rounded once (round to nearest even, saturating). On NCCL a reduction of
 * FP8 data is L8_ERR_UNSUPPORTED (NCCL 2.28 on an H200 refused it); FP8
 * gathers and broadcasts move bytes on every transport.
 *
 * Thread safety: one thread drives a communicator (as NCCL); several
 * communicators of one process may run on several threads. Errors common to
 * all calls: L8_ERR_INVALID_ARG (NULL, shapes, dtypes, tensors of another
 * context or not contiguous), L8_ERR_COMM, L8_ERR_TIMEOUT, L8_ERR_NCCL,
 * L8_ERR_CUDA, L8_ERR_OOM, L8_ERR_IO (sockets, the rendezvous file). Once a
 * collective failed, every later call on the communicator returns that
 * first error's status again, with "failed earlier" and its message.
 */
#ifndef L8_COMM_H
#define L8_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_comm l8_comm;

/* Append-only. */
typedef enum l8_comm_transport {
    L8_COMM_DEFAULT = 0,          /* NCCL on a CUDA context, TCP on a host context */
    L8_COMM_NCCL = 1,
    L8_COMM_TCP = 2,
    L8_COMM_THREADS = 3           /* ranks are threads of the process that made the id */
} l8_comm_transport;

/* Append-only. */
typedef enum l8_reduce_op {
    L8_REDUCE_SUM = 0,
    L8_REDUCE_AVG = 1,            /* sum / world size */
    L8_REDUCE_MAX = 2             /* NaN wins, as the casts' amax */
} l8_reduce_op;

/* An opaque, plain-bytes id: copy it, broadcast it, write it to a file. It
 * says which transport and where rank 0 listens (TCP), which process-local
 * group (THREADS) or holds NCCL's unique id. */
#define L8_COMM_ID_BYTES 256
typedef struct l8_comm_id {
    unsigned char bytes[L8_COMM_ID_BYTES];
} l8_comm_id;

typedef struct l8_comm_config {
    size_t size;                  /* sizeof(l8_comm_config) */
    int timeout_ms;               /* collectives and dead peers; 0: L8_COMM_TIMEOUT (s), else 600 s */
    int init_timeout_ms;          /* joining; 0: L8_INIT_TIMEOUT (s), else 300 s */
    l8_comm_transport transport;  /* l8_comm_init_env only: L8_COMM_DEFAULT */
} l8_comm_config;
#define L8_COMM_CONFIG_INIT { sizeof(l8_comm_config), 0, 0, L8_COMM_DEFAULT }
/* Fill *cfg with the defaults of L8_COMM_CONFIG_INIT (size included), for
 * bindings. NULL: nothing. */
void l8_comm_config_init(l8_comm_config *cfg);

/* ---- joining ---- */

/* Make a new id for one communicator (on one rank, usually rank 0, which
 * must then pass ctx's process to l8_comm_init_rank as a member). TCP:
 * opens rank 0's listening socket now, on L8_COMM_ADDR if set (an address of
 * this host the other ranks can reach; port 0 = any), else on all
 * interfaces, advertising this host's first non-loopback IPv4 address (or
 * 127.0.0.1); the socket stays open until this process's rank 0 of that id
 * has joined (or for ever if it never does: one socket). THREADS: makes the
 * process-local group. NCCL: ncclGetUniqueId. transport DEFAULT: from
 * ctx's backend. Errors: L8_ERR_INVALID_ARG (NULL, NCCL on a host context,
 * host transports on a CUDA one), L8_ERR_NO_DEVICE (no NCCL), L8_ERR_IO
 * (socket), L8_ERR_NCCL. */
L8_NODISCARD l8_status l8_comm_id_create(l8_ctx *ctx, l8_comm_transport transport,
                                         l8_comm_id *id);

/* Join communicator `id` as `rank` of `world` (collective: every rank calls
 * it, each with its own context; threads of one process call it from their
 * own threads). cfg NULL: defaults. The caller owns *out.
 * Errors: L8_ERR_INVALID_ARG (rank outside [0, world), world < 1, a bad or
 * foreign id, the id's transport not for ctx's backend), L8_ERR_COMM (a
 * mismatched launch, a peer that left), L8_ERR_TIMEOUT (not every rank came
 * in time), L8_ERR_IO, L8_ERR_NCCL, L8_ERR_OOM. On error *out is NULL. */
L8_NODISCARD l8_status l8_comm_init_rank(l8_ctx *ctx, const l8_comm_id *id, int rank, int world,
                                         const l8_comm_config *cfg, l8_comm **out);

/* What the environment says about this process's place in the job. */
typedef struct l8_dist_env {
    size_t size;                  /* sizeof(l8_dist_env), set by the caller */
    int rank, world_size;         /* 0 and 1 when nothing is set */
    int local_rank, local_world_size;
    const char *source;           /* "torchrun", "slurm", "openmpi" or "none" (static) */
    char master_addr[256];        /* MASTER_ADDR, "" if unset */
    int master_port;              /* MASTER_PORT, 0 if unset */
    char init_file[1024];         /* L8_INIT_FILE, "" if unset */
} l8_dist_env;

/* Read the launcher's variables (torchrun first, then Slurm, then Open MPI).
 * Errors: L8_ERR_INVALID_ARG (NULL, size too small; a variable that is not a
 * number, a rank outside [0, world), a port outside 1..65535: the message
 * names the variable). */
L8_NODISCARD l8_status l8_dist_env_read(l8_dist_env *env);

/* Join the job the environment describes (l8_dist_env_read): with
 * L8_INIT_FILE through that file, else through the TCP rendezvous at
 * MASTER_ADDR:MASTER_PORT (rank 0 listens there); a world of 1 needs
 * neither. ctx should be the context on the rank's device (see
 * l8_ctx_create: with LOCAL_RANK set and no L8_DEVICE, "cuda:LOCAL_RANK").
 * Errors: as l8_comm_init_rank, and L8_ERR_INVALID_ARG when the environment
 * is incomplete (a world > 1 with neither MASTER_ADDR/PORT nor L8_INIT_FILE). */
L8_NODISCARD l8_status l8_comm_init_env(l8_ctx *ctx, const l8_comm_config *cfg, l8_comm **out);

/* Split into sub-communicators (collective over comm, as ncclCommSplit):
 * ranks with the same color form one, ordered by key (ties by rank);
 * color < 0: this rank joins none and *out is NULL. Errors: as the
 * collectives. */
L8_NODISCARD l8_status l8_comm_split(l8_comm *comm, int color, int key, l8_comm **out);

/* The Megatron grid: world = tp x dp with tensor-parallel ranks adjacent:
 * rank r is TP rank r % tp of TP group r / tp, and DP rank r / tp of DP
 * group r % tp. Makes both (collective). Either out may be NULL.
 * Errors: L8_ERR_INVALID_ARG (tp < 1 or not dividing the world size). */
L8_NODISCARD l8_status l8_comm_grid(l8_comm *comm, int tp, l8_comm **tp_comm, l8_comm **dp_comm);

/* Leave: waits for this rank's outstanding collectives (NCCL: ncclCommFinalize,
 * bounded by the timeout, then ncclCommDestroy; a failed communicator is
 * aborted instead). Sub-communicators are independent objects: destroy each.
 * Destroy what uses the communicator first (a DDP reducer, tensor-parallel
 * layers, hooks installed with it as arg); what is left is told and fails
 * with L8_ERR_STATE where it would have used it. NULL: no-op. */
void l8_comm_destroy(l8_comm *comm);

/* Abort now (ncclCommAbort; host: close the sockets / leave the group): the
 * peers' next collectives fail with L8_ERR_COMM. The object must still be
 * destroyed. */
void l8_comm_abort(l8_comm *comm);

/* L8_OK, or the communicator's first error (repeated; NCCL: polls
 * ncclCommGetAsyncError and the watchdog's findings, never blocks). */
L8_NODISCARD l8_status l8_comm_check(l8_comm *comm);

int l8_comm_rank(const l8_comm *comm);            /* -1 for NULL */
int l8_comm_size(const l8_comm *comm);            /* 0 for NULL */
l8_comm_transport l8_comm_get_transport(const l8_comm *comm);
l8_ctx *l8_comm_ctx(const l8_comm *comm);

/* ---- collectives (every rank calls them in the same order) ----
 * Tensors: contiguous, of the communicator's context, dtype f32, bf16, f16,
 * e4m3 or e5m2 (i32 and u8 for broadcast and gathers); send and recv of one
 * dtype. "dim" is 0 (the first) or -1 / ndim-1 (the last) of a tensor seen
 * as [rows, cols] (rows = product of the leading dims). */

/* recv = op over ranks of send. send == recv (the same view) is in place.
 * Shapes equal (any ndim). */
L8_NODISCARD l8_status l8_comm_all_reduce(l8_comm *comm, const l8_tensor *send, l8_tensor *recv,
                                          l8_reduce_op op, l8_stream *s);

/* buf on every rank = buf on root. */
L8_NODISCARD l8_status l8_comm_broadcast(l8_comm *comm, l8_tensor *buf, int root, l8_stream *s);

/* Concatenate every rank's send along dim, in rank order:
 *   dim 0:  send [rows, cols] -> recv [world * rows, cols]
 *   dim -1: send [rows, cols] -> recv [rows, world * cols]
 * An all-gather of chunks concatenates along the first dimension; the
 * last-dimension gather therefore gathers [world][rows][cols] into a
 * scratch and rearranges it in one pass (ptx/interleave.ptx.in on the GPU) -
 * the step TransformerEngine missed in its sequence-parallel FP8 wgrad.
 * recv must not overlap send.
 * For ndim > 2 the other dims of recv equal send's. */
L8_NODISCARD l8_status l8_comm_all_gather(l8_comm *comm, const l8_tensor *send, l8_tensor *recv,
                                          int dim, l8_stream *s);

/* The reverse: reduce over ranks, keep this rank's slice along dim:
 *   dim 0:  send [world * rows, cols] -> recv [rows, cols]
 *   dim -1: send [rows, world * cols] -> recv [rows, cols]
 * recv must not overlap send, except in place along dim 0: recv is exactly
 * this rank's slice of send (as NCCL's in-place reduce-scatter; the rest of
 * send then holds partial sums). */
L8_NODISCARD l8_status l8_comm_reduce_scatter(l8_comm *comm, const l8_tensor *send,
                                              l8_tensor *recv, l8_reduce_op op, int dim,
                                              l8_stream *s);

/* Wait until every rank has arrived (host-blocking, also on NCCL: it
 * synchronizes the comm stream). */
L8_NODISCARD l8_status l8_comm_barrier(l8_comm *comm);

/* An l8_amax_reduce_fn (ops/recipe.h) for l8_recipe_set_reduce(r,
 * l8_comm_reduce_amax, comm): all-reduces the recipe's amax vector with MAX
 * over comm (the tensor-parallel group), so every rank casts with the same
 * scales. arg is the l8_comm. */
L8_NODISCARD l8_status l8_comm_reduce_amax(void *comm, l8_tensor *amax, l8_stream *s);

/* The same shape for a sum: t all-reduced with SUM over comm, in place (an
 * optimizer's squared-norm partial over the shards of a ZeRO-1 group). */
L8_NODISCARD l8_status l8_comm_reduce_sum(void *comm, l8_tensor *t, l8_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* L8_COMM_H */
