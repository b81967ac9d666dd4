/* replay.h - a deterministic training-like allocation trace, and a provider
 * of fake device addresses to replay it against without touching memory.
 *
 * Used by tests/test_alloc.c (fragmentation bound) and `lean8-bench alloc`;
 * not library code (linked into those two binaries only), hence no l8_ prefix.
 *
 * The workload (one decoder-only transformer trained with FP8 GEMMs; T tokens
 * in the step, h = hidden, f = ffn_mult * h, e = bytes_per_elem, V = vocab):
 *
 *   start     persistent buffers, allocated once in this order and freed at
 *             the end: per layer the weight gradients qkv (h x 3h), proj
 *             (h x h), fc1 (h x f), fc2 (f x h), all e bytes per element, and
 *             three 64-B FP8 scaling records (scale, scale_inv, amax); then
 *             the embedding gradient (V x h).
 *   step s    T = uniform in [min_tokens, max_tokens], rounded up to a
 *             multiple of token_multiple, a new value every step (seeded).
 *   forward   per layer, saved for backward in this order:
 *               ln1 fp8 (T*h*1), qkv (T*3h*e), softmax stats (T*(h/128)*4),
 *               attn (T*h*e), attn fp8 (T*h*1), residual (T*h*e),
 *               ln2 fp8 (T*h*1), fc1 (T*f*e), gelu fp8 (T*f*1);
 *             around each of its 4 GEMMs a 32 MiB workspace and a 256-B amax
 *             scratch, each freed at once.
 *   head      logits (T*V*e), grad logits (T*V*e), logits freed, grad of the
 *             last hidden state dx (T*h*e), grad logits freed.
 *   backward  layers in reverse; per layer, with 32 MiB workspaces around the
 *             GEMMs: dgelu (T*f*e) then gelu fp8 and fc1 freed; dln2 (T*h*e),
 *             dgelu and ln2 freed; dres (T*h*e), dln2, dx and residual freed,
 *             dx = dres; dattn (T*h*e), attn fp8 and attn freed; dqkv
 *             (T*3h*e), dattn, softmax stats and qkv freed; dln1 (T*h*e),
 *             dqkv and ln1 freed; dx2 (T*h*e), dln1 and dx freed, dx = dx2;
 *             plus 256-B amax scratches. dx is freed after layer 0.
 *   optimizer per layer one fp32 temporary of h x h x 4 bytes, freed at once.
 *
 * Activations are a stack that is pushed in forward and popped in reverse
 * with interleaved gradient buffers, with a size that changes every step:
 * the pattern that splinters PyTorch's segments (reserved peak about 1.30x
 * the allocated peak on such traces). Everything goes on one stream.
 */
#ifndef REPLAY_H
#define REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include "alloc/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct replay_config {
    size_t size;                  /* sizeof(replay_config) */
    int layers;                   /* 24 */
    int hidden;                   /* 4096 (a multiple of 128) */
    int ffn_mult;                 /* 4 */
    int vocab;                    /* 32768 */
    int min_tokens, max_tokens;   /* 2048, 16384 */
    int token_multiple;           /* 64 */
    int steps;                    /* 50 */
    int bytes_per_elem;           /* 2 (bf16 activations and gradients) */
    uint64_t seed;                /* token-count sequence; 1 */
    /* NULL, or called before each step (0-based) with its token count: for
     * step marks in a trace, or to look at the allocator between steps. */
    void (*step_hook)(void *arg, l8_alloc *a, int step, int tokens);
    void *step_arg;
} replay_config;
#define REPLAY_CONFIG_INIT \
    { sizeof(replay_config), 24, 4096, 4, 32768, 2048, 16384, 64, 50, 2, 1, NULL, NULL }

typedef struct replay_result {
    size_t size;                  /* caller sets sizeof(replay_result) */
    uint64_t allocated_peak;      /* from l8_alloc_get_stats over the replay */
    uint64_t requested_peak;
    uint64_t reserved_peak;
    double ratio;                 /* reserved_peak / allocated_peak */
    uint64_t ops;                 /* successful malloc + free calls */
    double seconds;               /* wall time of the replay (host side only) */
    double ns_per_op;
    uint64_t segment_allocs, segment_frees;   /* during the replay */
    int max_tokens_seen;
} replay_result;

/* Run the workload on allocator a, everything on `stream`. The allocator's
 * peaks are reset first, so use a fresh (or emptied) allocator for a
 * meaningful ratio. Every block the replay allocated is freed before it
 * returns, on success and on failure (cached segments stay).
 * Errors: L8_ERR_INVALID_ARG (bad config), whatever l8_alloc_malloc returns
 * (L8_ERR_OOM when the trace does not fit). */
L8_NODISCARD l8_status replay_training(l8_alloc *a, l8_stream_id stream,
                                                const replay_config *cfg,
                                                replay_result *res);

/* A provider of fake addresses: segments are distinct 2-MiB-aligned address
 * ranges that are never backed by memory (the allocator never dereferences
 * them), so multi-GiB traces replay anywhere. Events are always complete.
 * capacity > 0: a segment_alloc that would take live bytes above it fails
 * with L8_ERR_OOM, like a device of that size. vp must outlive the
 * allocator; vp->base is the provider to hand to l8_alloc_create. */
typedef struct replay_virtual_provider {
    l8_segment_provider base;
    uintptr_t next;               /* next address to hand out */
    size_t capacity;
    size_t live_bytes, peak_bytes;
    uint64_t segment_allocs, segment_frees;
} replay_virtual_provider;
void replay_virtual_provider_init(replay_virtual_provider *vp, size_t capacity);

#ifdef __cplusplus
}
#endif
#endif /* REPLAY_H */
