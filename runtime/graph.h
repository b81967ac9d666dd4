/* graph.h - CUDA graphs: capture a piece of work (a training step) once and
 * launch it again and again for a fraction of the launch cost.
 *
 * The work is a callback, fn(arg, s), that enqueues on stream s (and on the
 * context's other streams) exactly what it would enqueue eagerly.
 *
 *   l8_graph_capture   runs fn once under stream capture: nothing executes,
 *                      the calls are recorded into a graph and instantiated;
 *   l8_graph_launch    executes the recorded work (each launch is one step);
 *   l8_graph_update    captures fn again into the same graph and updates the
 *                      executable in place (a new instantiation when the
 *                      work's shape changed): for work whose kernel arguments
 *                      change from step to step (a learning rate passed by
 *                      value), so every launch runs exactly what eager code
 *                      would run - bitwise the same results;
 *   l8_graph_destroy   waits for the graph's last launch and frees it.
 *
 * Capture rules (CUDA's, and what lean8 does about them):
 *   - capture records, it runs nothing: after l8_graph_capture the work has
 *     NOT happened; launch it;
 *   - every address is frozen at capture. Memory the work allocates during
 *     capture comes from a graph-private pool of the context's caching
 *     allocator that stays reserved while the graph lives (alloc.h, "CUDA
 *     graph capture"); nothing calls the driver's allocator during capture.
 *     Capture with L8_GRAPH_WARMUP (or run fn eagerly yourself first): the
 *     warm-up reserves the pool's memory, loads the kernels, creates GEMM
 *     plans and workspaces. A capture that would need a new segment from
 *     the driver fails with L8_ERR_STATE;
 *   - fn must not synchronize, query events, read results to the host,
 *     autotune GEMMs, or allocate from the pinned pool; host values passed to
 *     kernels by value (scalars) are frozen as they were at capture;
 *   - capture uses THREAD_LOCAL mode: other threads (a watchdog, the tracer)
 *     keep working; this thread may do nothing else with CUDA until the
 *     capture ends;
 *   - the context's comm and copy streams fork from s inside the capture
 *     and are joined back at its end, so fn may enqueue on them, ordered
 *     through events recorded inside fn as usual;
 *   - a graph is launched on the stream it was captured on; launches are
 *     ordered with other work on that stream like any kernel.
 *
 * Host backend: the API exists and runs eagerly. Capture records fn and arg
 * without running them; each launch (and nothing else) calls fn(arg, s), so
 * host and GPU programs are written the same way.
 *
 * One capture per context at a time. A graph must be destroyed before its
 * context.
 */
#ifndef L8_RUNTIME_GRAPH_H
#define L8_RUNTIME_GRAPH_H

#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_graph l8_graph;

/* Flags of l8_graph_capture and l8_graph_update. */
#define L8_GRAPH_WARMUP 1u        /* first run the work once eagerly - a real execution -
                                     with the allocations of the context's streams served
                                     from the graph's memory pool (which grows through the
                                     driver as needed), wait for it, then capture: the
                                     capture then finds every block it needs in the pool */

/* The captured work: enqueue on s, return L8_OK or the first error. */
typedef l8_status (*l8_graph_fn)(void *arg, l8_stream *s);

/* 1 when ctx can capture CUDA graphs (a CUDA context on a driver with the
 * graph entry points); 0 on the host backend (where graphs run eagerly) or
 * an older driver. */
int l8_graph_native(const l8_ctx *ctx);

/* Capture fn(arg, s) on s (NULL: ctx's compute stream) into a new graph,
 * instantiated and ready to launch. Without L8_GRAPH_WARMUP the work has
 * not run; with it, it ran exactly once (the warm-up). arg must stay
 * valid while the graph lives (the host backend calls fn with it at each
 * launch). Synchronizes ctx's streams first (work before the capture must
 * not share the graph's memory). On failure nothing is left behind: the
 * capture is ended, its memory returns to the allocator, *out is NULL.
 * Errors: L8_ERR_INVALID_ARG (NULL, a stream of another context), fn's own
 * error, L8_ERR_STATE (a capture underway on ctx, or an allocation the
 * cache could not serve without the driver during capture),
 * L8_ERR_UNSUPPORTED (the driver has no graph API), L8_ERR_CUDA (also when
 * fn did something a capture forbids: the driver's code in the last error),
 * L8_ERR_OOM. */
L8_NODISCARD l8_status l8_graph_capture(l8_ctx *ctx, l8_stream *s, l8_graph_fn fn, void *arg,
                                        unsigned flags, l8_graph **out);

/* Capture fn(arg, s) again on g's stream into g's memory pool and update
 * g's executable: in place when the work has the same shape (same calls in
 * the same order; arguments and addresses may differ), else by a new
 * instantiation. Launches already enqueued run the old work. Does not wait
 * for the GPU (except for L8_GRAPH_WARMUP, which runs fn eagerly first, as
 * for l8_graph_capture: use it when a plain update failed with
 * L8_ERR_STATE, the pool lacking memory for new work). Host backend: g's fn
 * and arg become these. On failure g keeps its previous executable and
 * stays usable. Errors: as l8_graph_capture. */
L8_NODISCARD l8_status l8_graph_update(l8_graph *g, l8_graph_fn fn, void *arg, unsigned flags);

/* Enqueue one execution of g on its capture stream; returns at once.
 * Host backend: calls fn(arg, s) now and returns its status.
 * Errors: L8_ERR_INVALID_ARG (NULL), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_graph_launch(l8_graph *g);

/* How g's executable was last brought up to date. */
typedef struct l8_graph_stats {
    size_t size;                  /* sizeof(l8_graph_stats), set by the caller */
    uint64_t launches;            /* l8_graph_launch calls that enqueued (or ran) */
    uint64_t captures;            /* successful captures, the first included */
    uint64_t updates_in_place;    /* l8_graph_update that kept the executable */
    uint64_t reinstantiations;    /* l8_graph_update that needed a new one */
    uint64_t warmups;             /* eager runs of L8_GRAPH_WARMUP */
} l8_graph_stats;
/* Errors: L8_ERR_INVALID_ARG (NULL, size too small). */
L8_NODISCARD l8_status l8_graph_get_stats(const l8_graph *g, l8_graph_stats *out);

/* Wait for g's stream (its last launch), free the executable and the graph,
 * and give its memory pool back to the allocator. NULL: no-op. */
void l8_graph_destroy(l8_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* L8_RUNTIME_GRAPH_H */
