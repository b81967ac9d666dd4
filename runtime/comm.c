/* comm.c - the communicator object: joining, argument checks, and the
 * dispatch of each collective to the host transports (comm_host.c) or NCCL
 * (comm_nccl.c).
 *
 * Layouts. NCCL and the host transports both gather and scatter contiguous
 * per-rank chunks, i.e. along the first dimension. A last-dimension gather
 * of [rows, cols] therefore gathers into a scratch [world][rows][cols] and
 * interleaves it into [rows][world][cols] = [rows, world * cols] in one pass
 * (l8i_interleave, ptx/interleave.ptx.in); a last-dimension reduce-scatter
 * de-interleaves first. This is the step TransformerEngine missed in its
 * sequence-parallel FP8 wgrad: gathering the chunks alone concatenates
 * along the first dimension.
 *
 * Failure. The first error of a collective is kept in the communicator
 * (l8i_comm_fail); every later call repeats it, so a rank that lost a peer
 * cannot go on with half a group.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_internal.h"
#include "runtime/fp8.h"

l8_status l8i_comm_fail(l8_comm *c, l8_status st)
{
    if (st != L8_OK && c && c->failed == L8_OK) {
        c->failed = st;
        snprintf(c->failure, sizeof c->failure, "%s", l8_last_error_string());
    }
    return st;
}

l8_status l8i_comm_ready(l8_comm *c, const char *fn)
{
    if (!c) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: comm is NULL", fn);
    if (c->failed == L8_OK && c->nccl) l8i_comm_fail(c, l8i_nccl_check(c));
    if (c->failed != L8_OK)
        return l8_error_set(c->failed, 0, "", fn, __FILE__, __LINE__,
                            "rank %d: the communicator failed earlier: %s", c->rank, c->failure);
    return L8_OK;
}

l8_status l8i_comm_new(l8_ctx *ctx, l8_comm_transport t, int rank, int size, int timeout_ms,
                       l8_comm **out)
{
    l8_comm *c = calloc(1, sizeof *c);
    int *peers = calloc((size_t)size, sizeof *peers);
    if (!c || !peers) {
        free(c);
        free(peers);
        return L8_FAIL(L8_ERR_OOM, "communicator: out of host memory");
    }
    for (int i = 0; i < size; i++) peers[i] = i;
    c->ctx = ctx;
    c->transport = t;
    c->rank = rank;
    c->size = size;
    c->timeout_ms = timeout_ms;
    c->peers = peers;
    *out = c;
    return L8_OK;
}

static int transport_fits(l8_comm_transport t, l8_backend b)
{
    return t == L8_COMM_NCCL ? b == L8_BACKEND_CUDA : b == L8_BACKEND_HOST;
}

l8_status l8_comm_init_rank(l8_ctx *ctx, const l8_comm_id *id, int rank, int world,
                            const l8_comm_config *cfg, l8_comm **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL && id != NULL);
    l8_comm_config c = L8_COMM_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_comm_init_rank", "L8_COMM_CONFIG_INIT");
    if (world < 1 || rank < 0 || rank >= world)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_rank: rank %d of world %d", rank, world);
    l8i_id d;
    L8_CHECK(l8i_id_read("l8_comm_init_rank", id, &d));
    if (!transport_fits((l8_comm_transport)d.transport, l8_ctx_backend(ctx)))
        return L8_FAIL(L8_ERR_INVALID_ARG,
                       "l8_comm_init_rank: a %s id does not fit a %s context",
                       d.transport == L8_COMM_NCCL ? "NCCL" : "host-transport",
                       l8_ctx_device_name(ctx));
    l8_comm *comm;
    L8_CHECK(l8i_comm_new(ctx, (l8_comm_transport)d.transport, rank, world,
                          l8i_comm_timeout_ms(&c), &comm));
    int64_t deadline = l8i_now_ms() + l8i_init_timeout_ms(&c);
    l8_status st;
    if (d.transport == L8_COMM_THREADS) {
        st = l8i_threads_join(d.run_id, rank, world, deadline, &comm->xp);
    } else if (d.transport == L8_COMM_TCP) {
        l8i_rdzv r = { .listen_fd = rank == 0 ? l8i_id_take_listener(d.run_id) : -1,
                       .host = d.host, .port = (int)d.port, .rank = rank, .world = world,
                       .transport = L8_COMM_TCP, .run_id = d.run_id, .deadline_ms = deadline,
                       .timeout_ms = comm->timeout_ms };
        if (rank == 0 && r.listen_fd < 0)
            st = L8_FAIL(L8_ERR_INVALID_ARG,
                         "l8_comm_init_rank: rank 0 of a TCP id must join from the process "
                         "that made the id (l8_comm_id_create), once");
        else
            st = l8i_tcp_rendezvous(&r, &comm->xp);
    } else {
        st = l8i_nccl_init(comm, d.nccl, deadline);
    }
    if (st != L8_OK) {
        l8_comm_destroy(comm);
        return st;
    }
    *out = comm;
    return L8_OK;
}

/* ---- queries ---- */

int l8_comm_rank(const l8_comm *c) { return c ? c->rank : -1; }
int l8_comm_size(const l8_comm *c) { return c ? c->size : 0; }
l8_comm_transport l8_comm_get_transport(const l8_comm *c) { return c ? c->transport : L8_COMM_DEFAULT; }
l8_ctx *l8_comm_ctx(const l8_comm *c) { return c ? c->ctx : NULL; }

l8_status l8_comm_check(l8_comm *c)
{
    return l8i_comm_ready(c, "l8_comm_check");
}

void l8_comm_abort(l8_comm *c)
{
    if (!c) return;
    if (c->nccl) l8i_nccl_abort(c);
    if (c->xp) c->xp->ops->close(c->xp);
    if (c->failed == L8_OK) {
        c->failed = L8_ERR_COMM;
        snprintf(c->failure, sizeof c->failure, "rank %d aborted the communicator", c->rank);
    }
}

l8_status l8i_comm_attach(l8_comm *c, void (*lost)(void *obj), void *obj)
{
    return l8i_deps_add(&c->deps, lost, obj, "l8_comm");
}

void l8i_comm_detach(l8_comm *c, void *obj)
{
    l8i_deps_remove(&c->deps, obj);
}

void l8_comm_destroy(l8_comm *c)
{
    if (!c) return;
    l8i_deps_notify(&c->deps);           /* first: nothing may use c from here on */
    if (c->nccl) l8i_nccl_destroy(c);
    if (c->xp) {
        /* The root communicator leaves the group; children only drop their
         * reference (the transport lives while any communicator uses it). */
        if (c->tag == 0) c->xp->ops->close(c->xp);
        l8i_xport_release(c->xp);
    }
    free(c->peers);
    free(c);
}

/* ---- split and grid ---- */

typedef struct split_entry { int32_t color, key; } split_entry;

l8_status l8_comm_split(l8_comm *c, int color, int key, l8_comm **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_CHECK(l8i_comm_ready(c, "l8_comm_split"));
    if (c->nccl) {
        l8_comm *child = NULL;
        if (color >= 0) L8_CHECK(l8i_comm_new(c->ctx, c->transport, 0, 1, c->timeout_ms, &child));
        l8_status st = l8i_nccl_split(c, color, key, child);
        if (st != L8_OK || color < 0) {
            l8_comm_destroy(child);
            return st;
        }
        *out = child;
        return L8_OK;
    }
    /* Host: every rank learns every (color, key), then the members of our
     * color, ordered by (key, rank), are the child's ranks. */
    split_entry mine = { color < 0 ? -1 : color, key }, *all = calloc((size_t)c->size, sizeof *all);
    if (!all) return L8_FAIL(L8_ERR_OOM, "l8_comm_split: out of host memory");
    l8_status st = l8i_host_exchange(c, L8I_OP_SPLIT, &mine, all, sizeof mine);
    uint32_t child_tag = (c->tag + 1u) * 1000003u + ++c->splits * 7919u;
    if (st != L8_OK || color < 0) {
        free(all);
        return st;
    }
    int n = 0, me = 0;
    int *members = calloc((size_t)c->size, sizeof *members);
    if (!members) {
        free(all);
        return L8_FAIL(L8_ERR_OOM, "l8_comm_split: out of host memory");
    }
    for (int r = 0; r < c->size; r++) {
        if (all[r].color != color) continue;
        int at = n++;               /* insertion sort by (key, rank) */
        while (at > 0 && all[members[at - 1]].key > all[r].key) {
            members[at] = members[at - 1];
            at--;
        }
        members[at] = r;
    }
    for (int i = 0; i < n; i++)
        if (members[i] == c->rank) me = i;
    l8_comm *child;
    st = l8i_comm_new(c->ctx, c->transport, me, n, c->timeout_ms, &child);
    if (st == L8_OK) {
        for (int i = 0; i < n; i++) child->peers[i] = c->peers[members[i]];
        child->xp = c->xp;
        l8i_xport_retain(c->xp);
        child->tag = child_tag ^ (uint32_t)color * 2654435761u;
        *out = child;
    }
    free(members);
    free(all);
    return st;
}

l8_status l8_comm_grid(l8_comm *c, int tp, l8_comm **tp_comm, l8_comm **dp_comm)
{
    L8_CHECK(l8i_comm_ready(c, "l8_comm_grid"));
    if (tp < 1 || c->size % tp)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_grid: tp %d does not divide the world size %d",
                       tp, c->size);
    l8_comm *t = NULL, *d = NULL;
    l8_status st = l8_comm_split(c, c->rank / tp, c->rank % tp, &t);
    if (st == L8_OK) st = l8_comm_split(c, c->rank % tp, c->rank / tp, &d);
    if (st != L8_OK) {
        l8_comm_destroy(t);
        return st;
    }
    if (tp_comm) *tp_comm = t; else l8_comm_destroy(t);
    if (dp_comm) *dp_comm = d; else l8_comm_destroy(d);
    return L8_OK;
}

/* ---- collectives ---- */

static int reducible(l8_dtype dt)
{
    return dt == L8_F32 || dt == L8_BF16 || dt == L8_F16 || dt == L8_E4M3 || dt == L8_E5M2;
}

static l8_status need(l8_comm *c, const char *fn, const char *name, const l8_tensor *t,
                      int reduce)
{
    L8_CHECK(l8i_need_tensor(fn, name, t, c->ctx));
    l8_dtype dt = l8_tensor_dtype(t);
    if (reduce && !reducible(dt))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: %s has dtype %s; reductions take f32, bf16, f16, "
                       "e4m3 or e5m2", fn, name, l8_dtype_name(dt));
    if (reduce && c->nccl && l8_dtype_is_fp8(dt))
        return L8_FAIL(L8_ERR_UNSUPPORTED, "%s: NCCL does not reduce FP8 here (NCCL 2.28 on the "
                       "H200 refused it as an invalid argument): reduce in bf16 or f32, or "
                       "gather the bytes", fn);
    return L8_OK;
}

static l8_status same_dtype(const char *fn, const l8_tensor *a, const l8_tensor *b)
{
    if (l8_tensor_dtype(a) != l8_tensor_dtype(b))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: send is %s, recv is %s", fn,
                       l8_dtype_name(l8_tensor_dtype(a)), l8_dtype_name(l8_tensor_dtype(b)));
    return L8_OK;
}

static l8_status check_op(const char *fn, l8_reduce_op op)
{
    if (op != L8_REDUCE_SUM && op != L8_REDUCE_AVG && op != L8_REDUCE_MAX)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: unknown reduce op %d", fn, (int)op);
    return L8_OK;
}

/* The device pointers of a and b (both checked by need), in use on s. */
static l8_status pointers(const char *fn, l8_stream *s, const l8_tensor *a, void **pa,
                          const l8_tensor *b, void **pb)
{
    L8_CHECK(l8_tensor_data(a, pa));
    L8_CHECK(l8_tensor_data(b, pb));
    if (!*pa || !*pb)
        return L8_FAIL(L8_ERR_STATE, "%s: a tensor has no data on the device", fn);
    return l8i_tensors_use(s, (const l8_tensor *const[]){ a, b }, 2);
}

/* pointers for one tensor. */
static l8_status pointer(const char *fn, l8_stream *s, const l8_tensor *a, void **pa)
{
    L8_CHECK(l8_tensor_data(a, pa));
    if (!*pa)
        return L8_FAIL(L8_ERR_STATE, "%s: a tensor has no data on the device", fn);
    return l8i_tensors_use(s, (const l8_tensor *const[]){ a }, 1);
}

/* The checks every send/recv collective starts with; *s resolved. */
static l8_status pair_args(l8_comm *c, const char *fn, const l8_tensor *send, const l8_tensor *recv,
                           int reduce, l8_stream **s)
{
    L8_CHECK(l8i_comm_ready(c, fn));
    L8_CHECK(need(c, fn, "send", send, reduce));
    L8_CHECK(need(c, fn, "recv", recv, reduce));
    L8_CHECK(same_dtype(fn, send, recv));
    return l8i_resolve_stream(fn, c->ctx, s);
}

l8_status l8_comm_all_reduce(l8_comm *c, const l8_tensor *send, l8_tensor *recv, l8_reduce_op op,
                             l8_stream *s)
{
    const char *fn = "l8_comm_all_reduce";
    L8_CHECK(pair_args(c, fn, send, recv, 1, &s));
    L8_CHECK(check_op(fn, op));
    size_t n = (size_t)l8_tensor_numel(send);
    if ((size_t)l8_tensor_numel(recv) != n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: send has %zu elements, recv %lld", fn, n,
                       (long long)l8_tensor_numel(recv));
    void *sp, *rp;
    L8_CHECK(pointers(fn, s, send, &sp, recv, &rp));
    l8_dtype dt = l8_tensor_dtype(send);
    if (c->nccl) return l8i_comm_fail(c, l8i_nccl_all_reduce(c, sp, rp, n, dt, op, s));
    return l8i_comm_fail(c, l8i_host_all_reduce(c, sp, rp, n, dt, op));
}

l8_status l8_comm_broadcast(l8_comm *c, l8_tensor *buf, int root, l8_stream *s)
{
    const char *fn = "l8_comm_broadcast";
    L8_CHECK(l8i_comm_ready(c, fn));
    L8_CHECK(need(c, fn, "buf", buf, 0));
    L8_CHECK(l8i_resolve_stream(fn, c->ctx, &s));
    if (root < 0 || root >= c->size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: root %d outside [0, %d)", fn, root, c->size);
    void *p;
    L8_CHECK(pointer(fn, s, buf, &p));
    if (c->nccl)
        return l8i_comm_fail(c, l8i_nccl_broadcast(c, p, (size_t)l8_tensor_numel(buf),
                                                   l8_tensor_dtype(buf), root, s));
    return l8i_comm_fail(c, l8i_host_broadcast(c, p, l8_tensor_nbytes(buf), root));
}

/* A tensor as [rows, cols] and the shape check of a gather or scatter:
 * `big` must be `small` with dimension `dim` (0 or last) times world. */
static l8_status split_shape(const char *fn, const l8_tensor *small, const l8_tensor *big,
                             int *dim, int world, size_t *rows, size_t *cols)
{
    int nd = l8_tensor_ndim(small);
    if (nd < 1 || l8_tensor_ndim(big) != nd)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: send and recv need the same ndim >= 1 (%d, %d)",
                       fn, nd, l8_tensor_ndim(big));
    if (*dim < 0) *dim += nd;
    if (*dim != 0 && *dim != nd - 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dim must be 0 or the last (-1), got %d", fn, *dim);
    if (nd == 1) *dim = 0;
    for (int d = 0; d < nd; d++) {
        int64_t want = l8_tensor_dim(small, d) * (d == *dim ? world : 1);
        if (l8_tensor_dim(big, d) != want)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: dimension %d is %lld, expected %lld (%s %d of "
                           "%d ranks along dim %d)", fn, d, (long long)l8_tensor_dim(big, d),
                           (long long)want, d == *dim ? "world" : "the same as", world, world,
                           *dim);
    }
    *cols = (size_t)l8_tensor_dim(small, nd - 1);
    *rows = *cols ? (size_t)l8_tensor_numel(small) / *cols : 0;
    return L8_OK;
}

/* FP8 data gathered as bytes must share one scale (comm.h "FP8"). */
static l8_status same_scales(l8_comm *c, const char *fn, const l8_tensor *t)
{
    l8_fp8_meta *m = l8_tensor_fp8_meta(t);
    if (!l8_dtype_is_fp8(l8_tensor_dtype(t)) || !m || c->size == 1 || c->nccl) return L8_OK;
    float mine[3], *all = malloc(sizeof(float) * (size_t)c->size);
    if (!all) return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", fn);
    l8_status st = l8_fp8_meta_get(m, &mine[0], &mine[1], &mine[2]);
    if (st == L8_OK) st = l8i_host_exchange(c, L8I_OP_SCALES, &mine[1], all, sizeof(float));
    for (int r = 1; st == L8_OK && r < c->size; r++)
        if (memcmp(&all[r], &all[0], sizeof(float)))
            st = L8_FAIL(L8_ERR_INVALID_ARG, "%s: FP8 data cast with different scales (rank 0 "
                         "scale_inv %g, rank %d %g): reduce the amax over the group first "
                         "(l8_comm_reduce_amax)", fn, (double)all[0], r, (double)all[r]);
    free(all);
    return st;
}

l8_status l8_comm_all_gather(l8_comm *c, const l8_tensor *send, l8_tensor *recv, int dim,
                             l8_stream *s)
{
    const char *fn = "l8_comm_all_gather";
    L8_CHECK(pair_args(c, fn, send, recv, 0, &s));
    size_t rows, cols;
    L8_CHECK(split_shape(fn, send, recv, &dim, c->size, &rows, &cols));
    void *sp, *rp;
    L8_CHECK(pointers(fn, s, send, &sp, recv, &rp));
    size_t bytes = l8_tensor_nbytes(send), esz = l8_dtype_size(l8_tensor_dtype(send));
    int in_place = dim == 0 && (char *)sp == (char *)rp + (size_t)c->rank * bytes;
    if (bytes && !in_place && (char *)rp < (char *)sp + bytes && (char *)sp < (char *)rp + bytes * c->size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: recv overlaps send (in place is send = this "
                       "rank's slice of recv, dim 0)", fn);
    L8_CHECK(l8i_comm_fail(c, same_scales(c, fn, send)));
    l8_dtype dt = l8_tensor_dtype(send);
    int last = dim != 0 && c->size > 1 && rows > 1;
    if (c->nccl)
        return l8i_comm_fail(c, l8i_nccl_all_gather(c, sp, rp, (size_t)l8_tensor_numel(send), dt, s,
                                                    last ? rows : 0, cols * esz));
    if (!last) return l8i_comm_fail(c, l8i_host_all_gather(c, sp, rp, bytes, dt));
    void *tmp = malloc(bytes * (size_t)c->size);
    if (!tmp) return L8_FAIL(L8_ERR_OOM, "%s: out of host memory (%zu bytes)", fn, bytes * c->size);
    l8_status st = l8i_host_all_gather(c, sp, tmp, bytes, dt);
    if (st == L8_OK) st = l8i_interleave(s, rp, tmp, c->size, (int64_t)rows, cols * esz, L8I_INTERLEAVE);
    free(tmp);
    return l8i_comm_fail(c, st);
}

l8_status l8_comm_reduce_scatter(l8_comm *c, const l8_tensor *send, l8_tensor *recv,
                                 l8_reduce_op op, int dim, l8_stream *s)
{
    const char *fn = "l8_comm_reduce_scatter";
    L8_CHECK(pair_args(c, fn, send, recv, 1, &s));
    L8_CHECK(check_op(fn, op));
    size_t rows, cols;
    L8_CHECK(split_shape(fn, recv, send, &dim, c->size, &rows, &cols));
    void *sp, *rp;
    L8_CHECK(pointers(fn, s, send, &sp, recv, &rp));
    size_t bytes = l8_tensor_nbytes(recv), esz = l8_dtype_size(l8_tensor_dtype(recv));
    int in_place = dim == 0 && (char *)rp == (char *)sp + (size_t)c->rank * bytes;
    if (bytes && !in_place && (char *)sp < (char *)rp + bytes && (char *)rp < (char *)sp + bytes * c->size)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: recv overlaps send (in place is recv = this "
                       "rank's slice of send, dim 0)", fn);
    l8_dtype dt = l8_tensor_dtype(recv);
    size_t n = (size_t)l8_tensor_numel(recv);
    int last = dim != 0 && c->size > 1 && rows > 1;
    if (c->nccl)
        return l8i_comm_fail(c, l8i_nccl_reduce_scatter(c, sp, rp, n, dt, op, s,
                                                        last ? rows : 0, cols * esz));
    if (!last) return l8i_comm_fail(c, l8i_host_reduce_scatter(c, sp, rp, n, dt, op));
    void *tmp = malloc(bytes * (size_t)c->size);
    if (!tmp) return L8_FAIL(L8_ERR_OOM, "%s: out of host memory (%zu bytes)", fn, bytes * c->size);
    l8_status st = l8i_interleave(s, tmp, sp, c->size, (int64_t)rows, cols * esz, L8I_DEINTERLEAVE);
    if (st == L8_OK) st = l8i_host_reduce_scatter(c, tmp, rp, n, dt, op);
    free(tmp);
    return l8i_comm_fail(c, st);
}

l8_status l8_comm_barrier(l8_comm *c)
{
    L8_CHECK(l8i_comm_ready(c, "l8_comm_barrier"));
    return l8i_comm_fail(c, c->nccl ? l8i_nccl_barrier(c) : l8i_host_barrier(c));
}

l8_status l8_comm_reduce_amax(void *comm, l8_tensor *amax, l8_stream *s)
{
    return l8_comm_all_reduce((l8_comm *)comm, amax, amax, L8_REDUCE_MAX, s);
}

l8_status l8_comm_reduce_sum(void *comm, l8_tensor *t, l8_stream *s)
{
    return l8_comm_all_reduce((l8_comm *)comm, t, t, L8_REDUCE_SUM, s);
}
