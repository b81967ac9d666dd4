/* graph.c - CUDA graphs (graph.h): capture a callback's work on a stream,
 * instantiate, launch, update, destroy; on the host backend the same calls
 * run the callback eagerly at each launch.
 *
 * Capture sequence (the order matters):
 *   0. (l8_graph_warmup) fn runs eagerly with allocations routed to the
 *      graph's pool (non-strict), so the pool holds what the capture needs;
 *   1. (first capture only) synchronize the context: nothing enqueued before
 *      may still use memory the capture is about to take over;
 *   2. l8_alloc_capture_begin on the context's three streams, BEFORE the
 *      driver's capture begins (PyTorch's order: a free on another thread
 *      must never record an event into a running capture); the pinned pool
 *      refuses service until the capture ends (alloc/pinned.h);
 *   3. cuStreamBeginCapture(s, THREAD_LOCAL);
 *   4. fork: an event recorded on s inside the capture, waited on by the
 *      comm and copy streams, which thereby join the capture;
 *   5. fn(arg, s);
 *   6. join: events recorded on comm and copy, waited on by s - also after
 *      fn failed, so that the capture can end (an unjoined fork makes
 *      cuStreamEndCapture fail);
 *   7. cuStreamEndCapture (always), l8_alloc_capture_end (always);
 *   8. instantiate (or cuGraphExecUpdate for an update; a new instantiation
 *      when the topology changed), cuGraphUpload.
 * Any failure: the partial graph is destroyed, the first error is reported;
 * the allocator is left valid and the graph keeps its previous executable.
 *
 * Invariants: g->exec is NULL (host, or nothing captured yet) or an
 * executable of g->graph's shape; g->gid is 0 or the allocator pool that
 * every warm-up and capture of g used; the
 * fork/join events are used only inside captures (an event recorded during
 * capture cannot be queried afterwards, so they are never queried).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/graph.h"
#include "runtime/internal.h"
#include "alloc/alloc.h"
#include "alloc/pinned.h"

struct l8_graph {
    l8_ctx *ctx;
    l8_stream *s;
    l8_graph_fn fn;               /* host backend: what a launch runs */
    void *arg;
    CUgraph graph;                /* CUDA: the template of the last capture */
    CUgraphExec exec;
    CUgraphExec rexec;            /* n chained copies of graph (l8_graph_launch_repeat) */
    int rn;                       /* their count, 0 while rexec is NULL */
    int chain_refused;            /* the driver refused a chain since the last capture */
    CUevent fork, join[2];
    uint32_t gid;                 /* the allocator's graph pool */
    l8_graph_stats st;
};

int l8_graph_native(const l8_ctx *ctx)
{
    return ctx && l8_ctx_backend(ctx) == L8_BACKEND_CUDA && l8i_cuda_has_graphs();
}

/* The context's streams other than g->s, in a fixed order. */
static int other_streams(const l8_graph *g, l8_stream *out[2])
{
    int n = 0;
    static const l8_stream_kind kinds[3] = { L8_STREAM_COMPUTE, L8_STREAM_COMM, L8_STREAM_COPY };
    for (int i = 0; i < 3; i++) {
        l8_stream *o = l8_ctx_stream(g->ctx, kinds[i]);
        if (o != g->s) out[n++] = o;
    }
    return n;
}

/* The allocator's ids of g's stream and the others (o); returns the count. */
static int stream_ids(const l8_graph *g, l8_stream *o[2], l8_stream_id ids[3])
{
    int no = other_streams(g, o);
    ids[0] = l8_stream_handle(g->s);
    for (int i = 0; i < no; i++) ids[1 + i] = l8_stream_handle(o[i]);
    return 1 + no;
}

/* Run fn eagerly with the allocations of g's streams served from g's pool
 * (created here if need be; it grows through the driver as needed), then
 * wait for the context: the capture that follows takes those blocks. */
static l8_status warmup(l8_graph *g, l8_graph_fn fn, void *arg)
{
    l8_alloc *a = l8_ctx_allocator(g->ctx);
    l8_stream *o[2];
    l8_stream_id ids[3];
    int n = stream_ids(g, o, ids);
    uint32_t gid = g->gid;
    L8_CHECK(l8_alloc_capture_begin(a, ids, n, &gid, 0));
    g->gid = gid;
    l8_status st = fn(arg, g->s);
    l8_status e = l8_alloc_capture_end(a, gid);
    if (st == L8_OK) st = e;
    if (st == L8_OK) st = l8_ctx_synchronize(g->ctx);
    return st;
}

/* Steps 2-7 of the banner: *out is the captured graph on success. */
static l8_status capture(l8_graph *g, l8_graph_fn fn, void *arg, CUgraph *out)
{
    l8_alloc *a = l8_ctx_allocator(g->ctx);
    l8_stream *o[2];
    l8_stream_id ids[3];
    int nids = stream_ids(g, o, ids), no = nids - 1;
    CUstream cs = l8i_stream_cu(g->s);
    uint32_t gid = g->gid;
    *out = NULL;
    L8_CHECK(l8_alloc_capture_begin(a, ids, nids, &gid, 1));
    l8_pinned_set_capturing(l8_ctx_pinned(g->ctx), 1);
    l8_status st = L8_CU(cuStreamBeginCapture, cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    int begun = st == L8_OK;
    if (st == L8_OK) st = L8_CU(cuEventRecord, g->fork, cs);
    for (int i = 0; i < no && st == L8_OK; i++)
        st = L8_CU(cuStreamWaitEvent, l8i_stream_cu(o[i]), g->fork, 0);
    if (st == L8_OK) st = fn(arg, g->s);
    /* join, whatever happened: without it the capture cannot end */
    for (int i = 0; begun && i < no; i++) {
        CUresult r = l8i_cu.cuEventRecord(g->join[i], l8i_stream_cu(o[i]));
        if (r == CUDA_SUCCESS) r = l8i_cu.cuStreamWaitEvent(cs, g->join[i], 0);
        if (r != CUDA_SUCCESS && st == L8_OK)
            st = l8i_cu_check(r, "cuEventRecord/cuStreamWaitEvent (join)", __FILE__, __LINE__);
    }
    CUgraph graph = NULL;
    if (begun) {
        CUresult r = l8i_cu.cuStreamEndCapture(cs, &graph);
        if (r != CUDA_SUCCESS && st == L8_OK)
            st = l8_error_set(L8_ERR_CUDA, (int)r, "", "cuStreamEndCapture", __FILE__, __LINE__,
                              "the capture failed (CUresult %d): the captured work did something a"
                              " CUDA graph capture forbids (a synchronization, an event query, a "
                              "host copy, work on a stream outside the capture)", (int)r);
    }
    l8_pinned_set_capturing(l8_ctx_pinned(g->ctx), 0);
    l8_status e = l8_alloc_capture_end(a, gid);
    if (st == L8_OK) st = e;
    g->gid = gid;                 /* the pool is g's from now on, even after a failure */
    if (st != L8_OK) {
        if (graph) (void)l8i_cu.cuGraphDestroy(graph);
        return st;
    }
    *out = graph;
    return L8_OK;
}

/* Free the repeat executable (l8_graph_launch_repeat builds it again). */
static void drop_repeat(l8_graph *g)
{
    if (g->rexec) (void)l8i_cu.cuGraphExecDestroy(g->rexec);
    g->rexec = NULL;
    g->rn = 0;
    g->chain_refused = 0;
}

static atomic_int g_refuse_chain;   /* l8i_graph_refuse_chain: tests only */

void l8i_graph_refuse_chain(int on)
{
    atomic_store(&g_refuse_chain, on != 0);
}

/* L8_GRAPH_REFUSE (graph.h), read now: the words it holds as a mask of
 * REFUSE_*; *bad, if not NULL, receives the first word that is neither
 * "capture" nor "chain" (NULL when there is none). */
enum { REFUSE_CAPTURE = 1, REFUSE_CHAIN = 2 };

static unsigned env_refuse(const char **bad, size_t *badlen)
{
    const char *e = getenv("L8_GRAPH_REFUSE");
    unsigned mask = 0;
    if (bad) *bad = NULL;
    while (e && *e) {
        const char *c = strchr(e, ',');
        size_t n = c ? (size_t)(c - e) : strlen(e);
        if (n == 7 && !memcmp(e, "capture", 7)) {
            mask |= REFUSE_CAPTURE;
        } else if (n == 5 && !memcmp(e, "chain", 5)) {
            mask |= REFUSE_CHAIN;
        } else if (bad && !*bad && n) {
            *bad = e;
            *badlen = n;
        }
        e = c ? c + 1 : NULL;
    }
    return mask;
}

static l8_status refused_capture(void)
{
    return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_graph_capture: the capture refused on purpose "
                   "(L8_GRAPH_REFUSE=capture)");
}

/* Instantiate graph and prepare it for launch on g's stream. */
static l8_status instantiate(l8_graph *g, CUgraph graph, CUgraphExec *exec)
{
    *exec = NULL;
    /* each kernel keeps the priority of the stream it was captured on
     * (l8_ctx_config.high_priority), not the launch stream's */
    L8_CHECK(L8_CU(cuGraphInstantiateWithFlags, exec, graph,
                   (unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
    l8_status st = L8_CU(cuGraphUpload, *exec, l8i_stream_cu(g->s));
    if (st != L8_OK) {
        (void)l8i_cu.cuGraphExecDestroy(*exec);
        *exec = NULL;
    }
    return st;
}

l8_status l8_graph_create(l8_ctx *ctx, l8_stream *s, l8_graph **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    L8_CHECK(l8i_resolve_stream("l8_graph_create", ctx, &s));
    int cuda = l8_ctx_backend(ctx) == L8_BACKEND_CUDA;
    const char *bad;
    size_t badlen = 0;
    (void)env_refuse(&bad, &badlen);
    if (bad)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_graph_create: L8_GRAPH_REFUSE holds \"%.*s\" "
                       "(a comma list of capture, chain)", (int)(badlen > 64 ? 64 : badlen), bad);
    if (cuda && !l8i_cuda_has_graphs())
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8_graph_create: the CUDA driver has no graph API "
                       "(cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags, ...)");
    l8_graph *g = calloc(1, sizeof *g);
    if (!g) return L8_FAIL(L8_ERR_OOM, "l8_graph_create: out of host memory");
    g->ctx = ctx;
    g->s = s;
    g->st.size = sizeof g->st;
    l8_status st = L8_OK;
    if (cuda) {
        L8_TRY(st, l8i_ctx_bind(ctx), fail);
        L8_TRY(st, L8_CU(cuEventCreate, &g->fork, CU_EVENT_DISABLE_TIMING), fail);
        L8_TRY(st, L8_CU(cuEventCreate, &g->join[0], CU_EVENT_DISABLE_TIMING), fail);
        L8_TRY(st, L8_CU(cuEventCreate, &g->join[1], CU_EVENT_DISABLE_TIMING), fail);
    }
    *out = g;
    return L8_OK;
fail:
    l8_graph_destroy(g);
    return st;
}

l8_status l8_graph_warmup(l8_graph *g, l8_graph_fn fn, void *arg)
{
    L8_ARG(g != NULL && fn != NULL);
    if (l8_ctx_backend(g->ctx) != L8_BACKEND_CUDA) {
        L8_CHECK(fn(arg, g->s));
    } else {
        L8_CHECK(l8i_ctx_bind(g->ctx));
        L8_CHECK(warmup(g, fn, arg));
    }
    g->st.warmups++;
    return L8_OK;
}

l8_status l8_graph_capture(l8_graph *g, l8_graph_fn fn, void *arg)
{
    L8_ARG(g != NULL && fn != NULL);
    if (l8_ctx_backend(g->ctx) != L8_BACKEND_CUDA) {
        if (env_refuse(NULL, NULL) & REFUSE_CAPTURE) return refused_capture();
        g->fn = fn;
        g->arg = arg;
        if (g->st.captures++) g->st.updates_in_place++;
        return L8_OK;
    }
    L8_CHECK(l8i_ctx_bind(g->ctx));
    /* before the first capture nothing enqueued may still use the memory
     * the capture takes over; later captures only reuse the graph's own */
    if (!g->exec) L8_CHECK(l8_ctx_synchronize(g->ctx));
    CUgraph graph = NULL;
    L8_CHECK(capture(g, fn, arg, &graph));
    if (env_refuse(NULL, NULL) & REFUSE_CAPTURE) {      /* as an instantiation the driver refused */
        (void)l8i_cu.cuGraphDestroy(graph);
        return refused_capture();
    }
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    if (g->exec && l8i_cu.cuGraphExecUpdate(g->exec, graph, &info) == CUDA_SUCCESS) {
        g->st.updates_in_place++;
    } else {
        /* the first capture, or another shape of work (a smaller last
         * batch): a new executable; an old one is freed by the driver once
         * its launches in flight are done */
        CUgraphExec exec = NULL;
        l8_status st = instantiate(g, graph, &exec);
        if (st != L8_OK) {
            (void)l8i_cu.cuGraphDestroy(graph);
            return st;
        }
        if (g->exec) {
            (void)l8i_cu.cuGraphExecDestroy(g->exec);
            g->st.reinstantiations++;
        }
        g->exec = exec;
    }
    if (g->graph) (void)l8i_cu.cuGraphDestroy(g->graph);
    g->graph = graph;
    drop_repeat(g);               /* copies of the old work: built again when asked */
    g->st.captures++;
    return L8_OK;
}

l8_status l8_graph_launch(l8_graph *g)
{
    L8_ARG(g != NULL);
    if (!g->st.captures)
        return L8_FAIL(L8_ERR_STATE, "l8_graph_launch: nothing captured yet (l8_graph_capture)");
    if (l8_ctx_backend(g->ctx) != L8_BACKEND_CUDA) {
        L8_CHECK(g->fn(g->arg, g->s));
    } else {
        L8_CHECK(l8i_ctx_bind(g->ctx));
        L8_CHECK(L8_CU(cuGraphLaunch, g->exec, l8i_stream_cu(g->s)));
    }
    g->st.launches++;
    return L8_OK;
}

/* An executable of n chained copies of g->graph into g->rexec: child i + 1
 * depends on child i, so copy i + 1 starts once every node of copy i has
 * ended - n launches' order in one launch. */
static l8_status build_repeat(l8_graph *g, int n)
{
    if (atomic_load(&g_refuse_chain) || (env_refuse(NULL, NULL) & REFUSE_CHAIN))
        return L8_FAIL(L8_ERR_CUDA, "a chain of %d copies refused on purpose (a test's"
                       " l8i_graph_refuse_chain or L8_GRAPH_REFUSE=chain)", n);
    CUgraph chain = NULL;
    CUgraphNode prev = NULL;
    L8_CHECK(L8_CU(cuGraphCreate, &chain, 0));
    l8_status st = L8_OK;
    for (int i = 0; i < n && st == L8_OK; i++) {
        CUgraphNode node = NULL;
        st = L8_CU(cuGraphAddChildGraphNode, &node, chain, prev ? &prev : NULL, prev ? 1 : 0,
                   g->graph);
        prev = node;
    }
    if (st == L8_OK) st = instantiate(g, chain, &g->rexec);
    (void)l8i_cu.cuGraphDestroy(chain);   /* the executable holds its own copy */
    if (st == L8_OK) g->rn = n;
    return st;
}

l8_status l8_graph_launch_repeat(l8_graph *g, int n)
{
    L8_ARG(g != NULL);
    if (n < 1 || n > L8_GRAPH_MAX_REPEAT)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_graph_launch_repeat: n = %d, not 1..%d", n,
                       L8_GRAPH_MAX_REPEAT);
    if (!g->st.captures)
        return L8_FAIL(L8_ERR_STATE, "l8_graph_launch_repeat: nothing captured yet "
                       "(l8_graph_capture)");
    int chain = l8_ctx_backend(g->ctx) == L8_BACKEND_CUDA && n > 1 && l8i_cu.cuGraphCreate &&
                l8i_cu.cuGraphAddChildGraphNode && !g->chain_refused;
    if (chain) {
        L8_CHECK(l8i_ctx_bind(g->ctx));
        if (g->rn != n) {
            drop_repeat(g);
            if (build_repeat(g, n) != L8_OK) {
                /* the same work as n launches: warn, and launch one by one
                 * until the next capture */
                l8i_warn("l8_graph_launch_repeat: the driver refused a chain of %d copies"
                         " of the step (%s); launching them one by one", n,
                         l8_last_error_string());
                l8_error_clear();   /* handled: the call succeeds */
                g->chain_refused = 1;
                g->st.chain_refusals++;
                chain = 0;
            }
        }
    }
    if (!chain) {
        for (int i = 0; i < n; i++) L8_CHECK(l8_graph_launch(g));
        return L8_OK;
    }
    L8_CHECK(L8_CU(cuGraphLaunch, g->rexec, l8i_stream_cu(g->s)));
    g->st.launches += (uint64_t)n;
    g->st.chained += (uint64_t)n;
    return L8_OK;
}

l8_status l8i_graph_kernel_priorities(const l8_graph *g, int *prio, size_t cap, size_t *n)
{
    L8_ARG(g != NULL && n != NULL && (prio != NULL || cap == 0));
    *n = 0;
    if (l8_ctx_backend(g->ctx) != L8_BACKEND_CUDA || !l8i_cu.cuGraphGetNodes ||
        !l8i_cu.cuGraphNodeGetType || !l8i_cu.cuGraphKernelNodeGetAttribute)
        return L8_FAIL(L8_ERR_UNSUPPORTED, "l8i_graph_kernel_priorities: needs a CUDA context and"
                       " cuGraphGetNodes, cuGraphNodeGetType, cuGraphKernelNodeGetAttribute");
    if (!g->graph)
        return L8_FAIL(L8_ERR_STATE, "l8i_graph_kernel_priorities: nothing captured yet");
    L8_CHECK(l8i_ctx_bind(g->ctx));
    size_t nodes = 0;
    L8_CHECK(L8_CU(cuGraphGetNodes, g->graph, NULL, &nodes));
    CUgraphNode *v = malloc((nodes ? nodes : 1) * sizeof *v);
    if (!v) return L8_FAIL(L8_ERR_OOM, "l8i_graph_kernel_priorities: out of host memory");
    l8_status st = L8_CU(cuGraphGetNodes, g->graph, v, &nodes);
    for (size_t i = 0; i < nodes && st == L8_OK; i++) {
        CUgraphNodeType type;
        st = L8_CU(cuGraphNodeGetType, v[i], &type);
        if (st != L8_OK || type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
        CUkernelNodeAttrValue val;
        memset(&val, 0, sizeof val);
        st = L8_CU(cuGraphKernelNodeGetAttribute, v[i], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &val);
        if (st == L8_OK && *n < cap) prio[*n] = val.priority;
        if (st == L8_OK) (*n)++;
    }
    free(v);
    return st;
}

l8_status l8_graph_get_stats(const l8_graph *g, l8_graph_stats *out)
{
    L8_ARG(g != NULL && out != NULL);
    return l8i_stats_out(out, &g->st, sizeof g->st, "l8_graph_get_stats");
}

void l8_graph_destroy(l8_graph *g)
{
    if (!g) return;
    if (l8_ctx_backend(g->ctx) == L8_BACKEND_CUDA && l8i_ctx_bind(g->ctx) == L8_OK) {
        /* the last launch must be done before the pool's memory is reused */
        (void)l8i_cu.cuStreamSynchronize(l8i_stream_cu(g->s));
        if (g->exec) (void)l8i_cu.cuGraphExecDestroy(g->exec);
        drop_repeat(g);
        if (g->graph) (void)l8i_cu.cuGraphDestroy(g->graph);
        if (g->fork) (void)l8i_cu.cuEventDestroy(g->fork);
        for (int i = 0; i < 2; i++)
            if (g->join[i]) (void)l8i_cu.cuEventDestroy(g->join[i]);
    }
    if (g->gid && l8_alloc_graph_release(l8_ctx_allocator(g->ctx), g->gid) != L8_OK) {
        /* in the last error; a destroy cannot report it */
    }
    free(g);
}
