/* graph.h - CUDA graphs: capture a piece of work (a training step) once and
 * launch it again and again for a fraction of the launch cost.
 *
 * The work is a callback, fn(arg, s), that enqueues on stream s (and on the
 * context's other streams) exactly what it would enqueue eagerly.
 *
 *   l8_graph_create    an empty graph for a stream, with its memory pool;
 *   l8_graph_warmup    runs fn once eagerly - a real execution - with the
 *                      memory it allocates served from the graph's pool
 *                      (which grows through the driver as needed), then
 *                      waits: the pool then holds what a capture needs;
 *   l8_graph_capture   runs fn under stream capture: nothing executes, the
 *                      calls are recorded and instantiated. A later capture
 *                      of the same graph updates the executable in place
 *                      (cuGraphExecUpdate; a new instantiation when the
 *                      work's shape changed) - for work whose kernel
 *                      arguments change from step to step (a learning rate
 *                      passed by value): capture before each launch and
 *                      every launch runs exactly what eager code would run;
 *   l8_graph_launch    executes the recorded work (each launch is one step);
 *   l8_graph_launch_repeat  executes it n times in a row in one launch (n
 *                      steps: a few microseconds of launch gap less per
 *                      step, which small steps feel);
 *   l8_graph_destroy   waits for the graph's last launch and frees it.
 *
 * Capture rules (CUDA's, and what lean8 does about them):
 *   - capture records, it runs nothing: after l8_graph_capture the work has
 *     NOT happened; launch it;
 *   - every address is frozen at capture. Memory the work allocates during
 *     capture comes from a graph-private pool of the context's caching
 *     allocator that stays reserved while the graph lives (alloc.h, "CUDA
 *     graph capture"); nothing calls the driver's allocator during capture.
 *     l8_graph_warmup first: it reserves the pool's memory, loads the
 *     kernels, creates GEMM plans and workspaces. A capture that would need
 *     a new segment from the driver fails with L8_ERR_STATE;
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
 * without running them; warm-up and each launch call fn(arg, s), so host and
 * GPU programs are written the same way.
 *
 * One capture per context at a time. A graph must be destroyed before its
 * context.
 *
 * L8_GRAPH_REFUSE, for testing a program's fallbacks: a comma list of
 * "capture" (every l8_graph_capture fails with L8_ERR_UNSUPPORTED, its
 * capture discarded and the graph's previous work kept, as when the driver
 * refuses to instantiate it; on CUDA fn has run under the capture; on both
 * backends) and "chain" (l8_graph_launch_repeat's chain is refused, as by a
 * driver without child graph nodes). Read at each call; another word makes
 * l8_graph_create fail.
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

/* The captured work: enqueue on s, return L8_OK or the first error. */
typedef l8_status (*l8_graph_fn)(void *arg, l8_stream *s);

/* 1 when ctx can capture CUDA graphs (a CUDA context on a driver with the
 * graph entry points); 0 on the host backend (where graphs run eagerly) or
 * an older driver. */
int l8_graph_native(const l8_ctx *ctx);

/* An empty graph for work on s (NULL: ctx's compute stream): nothing
 * captured yet. The caller owns *out (l8_graph_destroy, before ctx).
 * Errors: L8_ERR_INVALID_ARG (NULL, a stream of another context, a word of
 * L8_GRAPH_REFUSE other than capture and chain), L8_ERR_UNSUPPORTED (a CUDA
 * driver without the graph API), L8_ERR_CUDA, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_graph_create(l8_ctx *ctx, l8_stream *s, l8_graph **out);

/* Run fn(arg, s) once now, eagerly, with the allocations of the context's
 * streams served from g's memory pool, and wait for the context. The work
 * really executes (it is a step). Needed before the first capture, and
 * before capturing work that needs more memory than the pool holds (a
 * capture that lacks memory fails with L8_ERR_STATE). Host backend: runs
 * fn. Errors: fn's own, L8_ERR_STATE (a capture underway on ctx),
 * L8_ERR_INVALID_ARG, L8_ERR_CUDA, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_graph_warmup(l8_graph *g, l8_graph_fn fn, void *arg);

/* Capture fn(arg, s) on g's stream into g's pool; nothing executes. The
 * first capture instantiates the executable; later ones update it in place
 * when the work has the same shape (the same calls in the same order;
 * arguments and addresses may differ), else instantiate anew. Each kernel
 * keeps the priority of the stream it was enqueued on (a context's
 * high_priority streams, ctx.h), whatever stream the graph is launched into.
 * Launches already enqueued run the work they were launched with. Synchronizes ctx's
 * streams before the first capture only. arg need only live through the
 * call on CUDA; on the host backend it must live until the next capture or
 * destroy (each launch calls fn(arg, s)). On failure the capture is ended,
 * its memory stays in g's pool, and g keeps its previous executable.
 * Errors: L8_ERR_INVALID_ARG (NULL), fn's own error, L8_ERR_STATE (another
 * capture underway on ctx, or an allocation the pool could not serve without
 * the driver: warm up first), L8_ERR_CUDA (also when fn did something a
 * capture forbids: the driver's code in the last error), L8_ERR_OOM,
 * L8_ERR_UNSUPPORTED (L8_GRAPH_REFUSE=capture). */
L8_NODISCARD l8_status l8_graph_capture(l8_graph *g, l8_graph_fn fn, void *arg);

/* Enqueue one execution of g's captured work on g's stream; returns at
 * once. Host backend: calls fn(arg, s) now and returns its status.
 * Errors: L8_ERR_INVALID_ARG (NULL), L8_ERR_STATE (nothing captured),
 * L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_graph_launch(l8_graph *g);

/* Enqueue n executions of g's captured work in a row on g's stream, as one
 * launch; returns at once. The same work, in the same order, as n calls of
 * l8_graph_launch: every execution starts after the previous one has ended
 * on all of the context's streams, so they share the captured addresses
 * and need no more memory. CUDA: a graph of n chained copies of the
 * capture (child graph nodes), built at the first call with this n after
 * a capture and kept until the next capture or another n; a driver without
 * child graph nodes gets n launches, and so does a driver that refuses the
 * chain (adding the nodes or instantiating them fails): then a warning goes
 * to stderr (the last error is cleared: the call succeeds) and g launches
 * one by one until its next capture. Host backend: calls fn(arg, s) n
 * times, stopping at the first error. Counts n launches in the stats, and
 * in `chained` those that ran in a chain.
 * Errors: L8_ERR_INVALID_ARG (NULL, n outside 1..L8_GRAPH_MAX_REPEAT),
 * L8_ERR_STATE (nothing captured), L8_ERR_CUDA; the host backend: fn's own. */
#define L8_GRAPH_MAX_REPEAT 1024
L8_NODISCARD l8_status l8_graph_launch_repeat(l8_graph *g, int n);

/* How g's executable was last brought up to date. */
typedef struct l8_graph_stats {
    size_t size;                  /* sizeof(l8_graph_stats), set by the caller */
    uint64_t launches;            /* executions of the work enqueued (or run): one per
                                     l8_graph_launch, n per l8_graph_launch_repeat */
    uint64_t captures;            /* successful captures, the first included */
    uint64_t updates_in_place;    /* later captures that kept the executable */
    uint64_t reinstantiations;    /* later captures that needed a new one */
    uint64_t warmups;             /* successful l8_graph_warmup calls */
    uint64_t chained;             /* of the launches, those run inside a chain of copies
                                     (l8_graph_launch_repeat with n > 1 on CUDA) */
    uint64_t chain_refusals;      /* chains the driver refused (then: single launches) */
} l8_graph_stats;
/* The stats rule of docs/api.md. Errors: L8_ERR_INVALID_ARG (NULL, a size covering
 * no field). */
L8_NODISCARD l8_status l8_graph_get_stats(const l8_graph *g, l8_graph_stats *out);

/* Wait for g's stream (its last launch), free the executable and the graph,
 * and give its memory pool back to the allocator. NULL: no-op. */
void l8_graph_destroy(l8_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* L8_RUNTIME_GRAPH_H */
