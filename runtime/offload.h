/* offload.h - activation offload over refcounted storages.
 *
 * Tensors saved from forward to backward (a Linear's input, a GELU's input)
 * are moved to pinned host memory while the rest of the forward runs and
 * brought back before their backward. The unit is the *storage*, never the
 * view: the registry is keyed by storage, so one storage saved under two
 * names, through two views, or through a view and a narrower view is copied
 * once (the whole storage), its device memory is given back once, and it is
 * restored once; every view of it follows, because views resolve their
 * pointer through the storage (runtime/tensor.h).
 *
 * Life of a saved storage (l8_offload_state_of; the storage's own state,
 * l8_storage_state_of, in brackets):
 *   save       -> COPYING_OUT [IN_FLIGHT, readable]: the copy stream waits on
 *                 the producer stream, copies the whole storage into a block
 *                 of the context's pinned pool and records an event.
 *   released   -> ON_HOST [HOST]: once the forward has moved on to another
 *                 layer (l8_offload_forward_layer; callers that never call it:
 *                 at once) and no one but the saves holds the storage (its
 *                 refcount is the registry's reference plus the saved
 *                 tensors'), at that call or any later offloader call, the
 *                 device block is handed back to the caching
 *                 allocator, recorded on the copy stream: the allocator gives
 *                 it out again only after the copy's event has completed, and
 *                 the host never waits for that. While another holder remains
 *                 (the caller still has the tensor) the bytes stay; once the
 *                 copy is done the entry is KEPT [DEVICE] until they let go.
 *   prefetch   -> COPYING_IN [IN_FLIGHT, not readable]: a new device block on
 *                 the storage's allocation stream, the copy stream waits on
 *                 that stream, copies back, records an event.
 *   restore    -> RESTORED [DEVICE]: the consumer stream waits on the copy
 *                 back; the pinned copy is freed (reused only after the copy
 *                 stream has passed it). A restore that finds the device bytes
 *                 still there (COPYING_OUT, KEPT) simply keeps them.
 *   release    when the last save of a storage is released the entry goes:
 *                 its pinned copy is freed and the registry's reference is
 *                 dropped. Copies still in flight are safe: the device block
 *                 and the pinned block were recorded on the copy stream, so
 *                 neither is reused before the copy ends, even when that was
 *                 the storage's last reference.
 *
 * Never offloaded: resident storages (l8_storage_set_resident: parameter
 * groups, FP8 metadata), storages smaller than cfg.min_bytes, and saves made
 * while the current forward layer is disabled (l8_offload_forward_layer).
 * They stay where they are and their restore is a no-op.
 *
 * Layers: the caller numbers its layers in forward order and calls
 * l8_offload_forward_layer(i, enable) before layer i's forward (the caller
 * chooses which layers offload, e.g. all but the last K) and
 * l8_offload_backward_layer(i) before layer i's backward, which brings layer
 * i back if needed and prefetches layers i-1 .. i-prefetch_layers. The last
 * layer's storages are still on the device when its backward starts, so
 * they make no round trip (their copies out still run).
 *
 * Hooks: l8_offload_save/restore/release have the signatures of the Linear
 * layer's l8_save_hooks (ops/linear.h) with the offloader as `arg`:
 *     l8_save_hooks hk = L8_SAVE_HOOKS_INIT;
 *     hk.save = l8_offload_save; hk.restore = l8_offload_restore;
 *     hk.release = l8_offload_release; hk.arg = off;
 * Any other saved tensor (a GELU's input) can go through the same calls.
 *
 * Threads: every call takes the offloader's lock; storage states are
 * published atomically, so readers on other threads (l8_storage_state_of,
 * l8_tensor_data) see a consistent state: a pointer only while the device
 * bytes are valid, L8_ERR_STATE otherwise. Use one offloader per context.
 *
 * Trace: OFFLOAD_OUT and OFFLOAD_IN (addr = device block, size = bytes,
 * aux = pinned block, stream = the copy stream) when a copy is enqueued, into
 * cfg.trace or the context's trace (l8_ctx_trace).
 */
#ifndef L8_OFFLOAD_H
#define L8_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_offload l8_offload;

#define L8_OFFLOAD_MIN_BYTES_DEFAULT ((size_t)1 << 20)

typedef struct l8_offload_config {
    size_t size;                  /* sizeof(l8_offload_config) */
    size_t min_bytes;             /* smaller storages stay on the device; 0: offload all
                                     (empty storages always stay) */
    int prefetch_layers;          /* backward of layer i prefetches layers i-1 .. i-n;
                                     0: bring back on demand only (at restore) */
    l8_trace *trace;              /* NULL: the context's (l8_ctx_trace; or none) */
} l8_offload_config;
#define L8_OFFLOAD_CONFIG_INIT { sizeof(l8_offload_config), L8_OFFLOAD_MIN_BYTES_DEFAULT, 1, NULL }
/* Fill *cfg with L8_OFFLOAD_CONFIG_INIT, for bindings. NULL: nothing. */
void l8_offload_config_init(l8_offload_config *cfg);

/* Append-only. */
typedef enum l8_offload_state {
    L8_OFFLOAD_NONE = 0,          /* not registered: never saved, kept on the device, released */
    L8_OFFLOAD_COPYING_OUT = 1,   /* copy to the host enqueued; device bytes valid */
    L8_OFFLOAD_KEPT = 2,          /* copied, but another holder keeps the device bytes */
    L8_OFFLOAD_ON_HOST = 3,       /* device block given back; the pinned copy is the data */
    L8_OFFLOAD_COPYING_IN = 4,    /* copy back enqueued (prefetch or restore) */
    L8_OFFLOAD_RESTORED = 5       /* on the device again, pinned copy freed */
} l8_offload_state;

typedef struct l8_offload_stats {
    size_t size;                  /* caller sets sizeof(l8_offload_stats) */
    uint64_t saves;               /* saves that registered a storage (aliases included) */
    uint64_t aliased;             /* of those, saves of a storage already registered */
    uint64_t kept_small, kept_resident, kept_layer;   /* saves left on the device */
    uint64_t copies_out, bytes_out;
    uint64_t copies_in, bytes_in;
    uint64_t prefetches;          /* copies in started by l8_offload_backward_layer */
    uint64_t prefetch_deferred;   /* prefetches put off for lack of device memory */
    uint64_t released;            /* device blocks given back after a copy out */
    uint64_t kept_in_place;       /* restores that found the device bytes still there */
    uint64_t entries;             /* storages registered now */
    uint64_t host_bytes;          /* bytes in pinned copies now */
    uint64_t device_bytes_freed;  /* bytes of saved storages not on the device now */
} l8_offload_stats;

/* An offloader for ctx (copies on ctx's copy stream, host copies in ctx's
 * pinned pool). cfg may be NULL. The caller owns *out.
 * Errors: L8_ERR_INVALID_ARG (NULL, cfg->size, negative prefetch_layers),
 * L8_ERR_OOM, L8_ERR_CUDA (an event). */
L8_NODISCARD l8_status l8_offload_create(l8_ctx *ctx, const l8_offload_config *cfg,
                                         l8_offload **out);

/* Wait for every copy, free every pinned copy, drop every reference held.
 * Release all saves first (l8_linear_ctx_destroy does): a storage still on
 * the host at destroy is brought back when another holder has it (blocking),
 * else dropped. NULL: no-op. */
void l8_offload_destroy(l8_offload *off);

/* The forward is entering layer `layer` (>= 0): saves until the next call
 * belong to it; enable = 0 keeps them on the device. Before the first call,
 * saves belong to layer 0, enabled. Also polls (l8_offload_poll).
 * Errors: L8_ERR_INVALID_ARG, those of l8_offload_poll. */
L8_NODISCARD l8_status l8_offload_forward_layer(l8_offload *off, int layer, int enable);

/* The backward is about to run layer `layer`: its storages that are on the
 * host start coming back, and layers layer-1 .. layer-prefetch_layers are
 * prefetched (their copies out, if still running, are kept on the device).
 * A prefetch that finds no device memory is put off to the restore.
 * Does not block. Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (host memory),
 * L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_offload_backward_layer(l8_offload *off, int layer);

/* Hook: t (borrowed) will not be read before its restore and not written
 * before its release; its storage is registered under `name` (may be NULL;
 * kept for messages) and, unless it stays (see the banner) or is already
 * registered, its copy to the host is enqueued after the work enqueued on s
 * so far (s: the producer stream; NULL: compute). arg is the l8_offload.
 * Errors: L8_ERR_INVALID_ARG (NULL, another context), L8_ERR_STATE (the
 * storage is not on the device), L8_ERR_OOM (no pinned memory or host
 * memory: nothing is registered, the storage stays on the device intact),
 * L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_offload_save(void *arg, l8_tensor *t, const char *name, l8_stream *s);

/* Hook: make t's storage resident and ordered before later work on s
 * (NULL: compute): a no-op for storages never offloaded; else waits on the
 * copy back (enqueuing it first when the storage is still on the host).
 * Idempotent. Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (no device memory: the
 * data stays in the pinned copy and a later restore can retry), L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_offload_restore(void *arg, l8_tensor *t, const char *name,
                                          l8_stream *s);

/* Hook: the save of t under `name` is over. With the storage's last save
 * the entry goes (see the banner). Unknown tensors: no-op. */
void l8_offload_release(void *arg, l8_tensor *t, const char *name);

/* Give back the device blocks whose copies out have completed and that no
 * other holder keeps; note copies back that completed. Does not block.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_CUDA (an event query). */
L8_NODISCARD l8_status l8_offload_poll(l8_offload *off);

/* Block until every copy enqueued so far has completed, then poll.
 * Errors: as l8_offload_poll. */
L8_NODISCARD l8_status l8_offload_wait(l8_offload *off);

/* Where the offloader has st (L8_OFFLOAD_NONE when not registered). */
l8_offload_state l8_offload_state_of(l8_offload *off, const l8_storage *st);
const char *l8_offload_state_name(l8_offload_state s);

/* Counters since create (and the current entries / bytes).
 * The stats rule of docs/api.md. Errors: L8_ERR_INVALID_ARG (NULL, a size covering
 * no field). */
L8_NODISCARD l8_status l8_offload_get_stats(l8_offload *off, l8_offload_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* L8_OFFLOAD_H */
