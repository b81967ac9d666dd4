/* replay.c - the training-like allocation trace of replay.h and the
 * fake-address provider it runs on.
 *
 * Every pointer the replay holds lives in one slot array (persistent
 * buffers, per-layer saved activations, the few gradient buffers in flight),
 * so the failure path frees exactly what is live by walking the slots. The
 * token sequence comes from splitmix64 over cfg->seed: the same config gives
 * the same trace on every machine.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tools/replay.h"

#define MIB ((size_t)1 << 20)
#define WORKSPACE (32 * MIB)      /* cuBLASLt-style GEMM workspace */
#define SCRATCH   ((size_t)256)   /* amax reduction scratch */
#define SCALE_REC ((size_t)64)    /* scale / scale_inv / amax record */

enum { S_LN1, S_QKV, S_LSE, S_ATTN, S_ATTN8, S_RESID, S_LN2, S_FC1, S_GELU8, NSAVED };
enum { P_WQKV, P_WPROJ, P_WFC1, P_WFC2, P_SCALE, P_SCALE_INV, P_AMAX, NPERSIST };
enum { M_DX, M_LOGITS, M_DLOGITS, M_DGELU, M_DLN2, M_DRES, M_DATTN, M_DQKV, M_DLN1, M_DX2,
       M_EMBED, NMISC };

typedef struct replay {
    l8_alloc *a;
    l8_stream_id stream;
    uint64_t ops;
    void **saved;                 /* layers x NSAVED */
    void **persist;               /* layers x NPERSIST */
    void *m[NMISC];
} replay;

static l8_status r_alloc(replay *r, size_t bytes, void **slot)
{
    l8_status st = l8_alloc_malloc(r->a, bytes, r->stream, slot);
    if (st == L8_OK) r->ops++;
    return st;
}

static l8_status r_free(replay *r, void **slot)
{
    l8_status st = l8_alloc_free(r->a, *slot);
    if (st == L8_OK) {
        *slot = NULL;
        r->ops++;
    }
    return st;
}

/* Allocated and freed at once (workspaces, scratch). */
static l8_status r_temp(replay *r, size_t bytes)
{
    void *p = NULL;
    L8_CHECK(r_alloc(r, bytes, &p));
    return r_free(r, &p);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int tokens_for_step(const replay_config *c, uint64_t *rng)
{
    uint64_t span = (uint64_t)(c->max_tokens - c->min_tokens) + 1;
    uint64_t t = (uint64_t)c->min_tokens + splitmix64(rng) % span;
    uint64_t m = (uint64_t)c->token_multiple;
    t = (t + m - 1) / m * m;
    return (int)t;
}

static l8_status persistent_alloc(replay *r, const replay_config *c)
{
    size_t h = (size_t)c->hidden, f = h * (size_t)c->ffn_mult, e = (size_t)c->bytes_per_elem;
    for (int l = 0; l < c->layers; l++) {
        void **p = &r->persist[(size_t)l * NPERSIST];
        L8_CHECK(r_alloc(r, h * 3 * h * e, &p[P_WQKV]));
        L8_CHECK(r_alloc(r, h * h * e, &p[P_WPROJ]));
        L8_CHECK(r_alloc(r, h * f * e, &p[P_WFC1]));
        L8_CHECK(r_alloc(r, f * h * e, &p[P_WFC2]));
        L8_CHECK(r_alloc(r, SCALE_REC, &p[P_SCALE]));
        L8_CHECK(r_alloc(r, SCALE_REC, &p[P_SCALE_INV]));
        L8_CHECK(r_alloc(r, SCALE_REC, &p[P_AMAX]));
    }
    return r_alloc(r, (size_t)c->vocab * h * e, &r->m[M_EMBED]);
}

/* One GEMM's transient allocations. */
static l8_status gemm_temps(replay *r)
{
    L8_CHECK(r_temp(r, SCRATCH));
    return r_temp(r, WORKSPACE);
}

static l8_status forward(replay *r, const replay_config *c, size_t T)
{
    size_t h = (size_t)c->hidden, f = h * (size_t)c->ffn_mult, e = (size_t)c->bytes_per_elem;
    for (int l = 0; l < c->layers; l++) {
        void **s = &r->saved[(size_t)l * NSAVED];
        L8_CHECK(r_alloc(r, T * h, &s[S_LN1]));                 /* (T, h) e4m3 */
        L8_CHECK(gemm_temps(r));
        L8_CHECK(r_alloc(r, T * 3 * h * e, &s[S_QKV]));         /* (T, 3h) bf16 */
        L8_CHECK(r_alloc(r, T * (h / 128) * 4, &s[S_LSE]));     /* (heads, T) f32 */
        L8_CHECK(r_alloc(r, T * h * e, &s[S_ATTN]));            /* (T, h) bf16 */
        L8_CHECK(r_alloc(r, T * h, &s[S_ATTN8]));               /* (T, h) e4m3 */
        L8_CHECK(gemm_temps(r));
        L8_CHECK(r_alloc(r, T * h * e, &s[S_RESID]));           /* (T, h) bf16 */
        L8_CHECK(r_alloc(r, T * h, &s[S_LN2]));                 /* (T, h) e4m3 */
        L8_CHECK(gemm_temps(r));
        L8_CHECK(r_alloc(r, T * f * e, &s[S_FC1]));             /* (T, f) bf16 */
        L8_CHECK(r_alloc(r, T * f, &s[S_GELU8]));               /* (T, f) e4m3 */
        L8_CHECK(gemm_temps(r));
    }
    return L8_OK;
}

static l8_status head(replay *r, const replay_config *c, size_t T)
{
    size_t h = (size_t)c->hidden, e = (size_t)c->bytes_per_elem, V = (size_t)c->vocab;
    L8_CHECK(r_alloc(r, T * V * e, &r->m[M_LOGITS]));           /* (T, V) bf16 */
    L8_CHECK(gemm_temps(r));
    L8_CHECK(r_alloc(r, T * V * e, &r->m[M_DLOGITS]));
    L8_CHECK(r_free(r, &r->m[M_LOGITS]));
    L8_CHECK(r_alloc(r, T * h * e, &r->m[M_DX]));
    L8_CHECK(gemm_temps(r));
    return r_free(r, &r->m[M_DLOGITS]);
}

static l8_status backward_layer(replay *r, const replay_config *c, size_t T, void **s)
{
    size_t h = (size_t)c->hidden, f = h * (size_t)c->ffn_mult, e = (size_t)c->bytes_per_elem;
    void **m = r->m;
    L8_CHECK(gemm_temps(r));
    L8_CHECK(r_alloc(r, T * f * e, &m[M_DGELU]));
    L8_CHECK(r_free(r, &s[S_GELU8]));
    L8_CHECK(r_free(r, &s[S_FC1]));
    L8_CHECK(gemm_temps(r));
    L8_CHECK(r_alloc(r, T * h * e, &m[M_DLN2]));
    L8_CHECK(r_free(r, &m[M_DGELU]));
    L8_CHECK(r_free(r, &s[S_LN2]));
    L8_CHECK(r_alloc(r, T * h * e, &m[M_DRES]));
    L8_CHECK(r_free(r, &m[M_DLN2]));
    L8_CHECK(r_free(r, &m[M_DX]));
    L8_CHECK(r_free(r, &s[S_RESID]));
    m[M_DX] = m[M_DRES];
    m[M_DRES] = NULL;
    L8_CHECK(gemm_temps(r));
    L8_CHECK(r_alloc(r, T * h * e, &m[M_DATTN]));
    L8_CHECK(r_free(r, &s[S_ATTN8]));
    L8_CHECK(r_free(r, &s[S_ATTN]));
    L8_CHECK(r_alloc(r, T * 3 * h * e, &m[M_DQKV]));
    L8_CHECK(r_free(r, &m[M_DATTN]));
    L8_CHECK(r_free(r, &s[S_LSE]));
    L8_CHECK(r_free(r, &s[S_QKV]));
    L8_CHECK(gemm_temps(r));
    L8_CHECK(r_alloc(r, T * h * e, &m[M_DLN1]));
    L8_CHECK(r_free(r, &m[M_DQKV]));
    L8_CHECK(r_free(r, &s[S_LN1]));
    L8_CHECK(r_alloc(r, T * h * e, &m[M_DX2]));
    L8_CHECK(r_free(r, &m[M_DLN1]));
    L8_CHECK(r_free(r, &m[M_DX]));
    m[M_DX] = m[M_DX2];
    m[M_DX2] = NULL;
    return r_temp(r, SCRATCH);
}

static l8_status step(replay *r, const replay_config *c, size_t T)
{
    L8_CHECK(forward(r, c, T));
    L8_CHECK(head(r, c, T));
    for (int l = c->layers - 1; l >= 0; l--)
        L8_CHECK(backward_layer(r, c, T, &r->saved[(size_t)l * NSAVED]));
    L8_CHECK(r_free(r, &r->m[M_DX]));
    size_t h = (size_t)c->hidden;
    for (int l = 0; l < c->layers; l++) L8_CHECK(r_temp(r, h * h * 4));
    return L8_OK;
}

/* Free whatever is live, newest first; keeps the first failure. */
static l8_status free_all(replay *r, size_t nsaved, size_t npersist)
{
    l8_status first = L8_OK;
    for (int i = NMISC - 1; i >= 0; i--)
        if (r->m[i]) {
            l8_status st = r_free(r, &r->m[i]);
            if (first == L8_OK) first = st;
        }
    for (size_t i = nsaved; i-- > 0;)
        if (r->saved[i]) {
            l8_status st = r_free(r, &r->saved[i]);
            if (first == L8_OK) first = st;
        }
    for (size_t i = npersist; i-- > 0;)
        if (r->persist[i]) {
            l8_status st = r_free(r, &r->persist[i]);
            if (first == L8_OK) first = st;
        }
    return first;
}

static l8_status config_check(const replay_config *c)
{
    L8_ARG(c->size >= sizeof *c);
    L8_ARG(c->layers >= 1 && c->layers <= 4096);
    L8_ARG(c->hidden >= 128 && c->hidden % 128 == 0 && c->hidden <= (1 << 20));
    L8_ARG(c->ffn_mult >= 1 && c->ffn_mult <= 64);
    L8_ARG(c->vocab >= 1 && c->vocab <= (1 << 24));
    L8_ARG(c->min_tokens >= 1 && c->max_tokens >= c->min_tokens && c->max_tokens <= (1 << 24));
    L8_ARG(c->token_multiple >= 1 && c->token_multiple <= 4096);
    L8_ARG(c->steps >= 1);
    L8_ARG(c->bytes_per_elem >= 1 && c->bytes_per_elem <= 8);
    return L8_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

l8_status replay_training(l8_alloc *a, l8_stream_id stream, const replay_config *cfg,
                                   replay_result *res)
{
    L8_ARG(a != NULL);
    L8_ARG(cfg != NULL);
    L8_ARG(res != NULL && res->size >= sizeof *res);
    L8_CHECK(config_check(cfg));
    l8_status st = L8_OK;
    size_t nsaved = (size_t)cfg->layers * NSAVED, npersist = (size_t)cfg->layers * NPERSIST;
    replay r = { .a = a, .stream = stream };
    r.saved = calloc(nsaved, sizeof *r.saved);
    r.persist = calloc(npersist, sizeof *r.persist);
    if (!r.saved || !r.persist) {
        st = L8_FAIL(L8_ERR_OOM, "replay: no host memory for %zu slots", nsaved + npersist);
        goto out;
    }
    l8_alloc_stats s0 = { .size = sizeof s0 }, s1 = { .size = sizeof s1 };
    L8_TRY(st, l8_alloc_get_stats(a, &s0), out);
    l8_alloc_reset_peaks(a);
    uint64_t rng = cfg->seed;
    int max_seen = 0;
    double t0 = now_s();
    L8_TRY(st, persistent_alloc(&r, cfg), fail);
    for (int i = 0; i < cfg->steps; i++) {
        int T = tokens_for_step(cfg, &rng);
        if (T > max_seen) max_seen = T;
        if (cfg->step_hook) cfg->step_hook(cfg->step_arg, a, i, T);
        L8_TRY(st, step(&r, cfg, (size_t)T), fail);
    }
    L8_TRY(st, free_all(&r, nsaved, npersist), out);
    double t1 = now_s();
    L8_TRY(st, l8_alloc_get_stats(a, &s1), out);
    memset((char *)res + sizeof res->size, 0, sizeof *res - sizeof res->size);
    res->allocated_peak = s1.allocated_peak;
    res->requested_peak = s1.requested_peak;
    res->reserved_peak = s1.reserved_peak;
    res->ratio = s1.allocated_peak ? (double)s1.reserved_peak / (double)s1.allocated_peak : 0.0;
    res->ops = r.ops;
    res->seconds = t1 - t0;
    res->ns_per_op = r.ops ? (t1 - t0) * 1e9 / (double)r.ops : 0.0;
    res->segment_allocs = s1.segment_allocs - s0.segment_allocs;
    res->segment_frees = s1.segment_frees - s0.segment_frees;
    res->max_tokens_seen = max_seen;
out:
    free(r.saved);
    free(r.persist);
    return st;
fail:
    /* Successful frees leave the last-error record alone: the caller still
     * sees why the replay failed. */
    (void)free_all(&r, nsaved, npersist);
    goto out;
}

/* ---- virtual provider ---- */

#define VIRT_BASE  ((uintptr_t)1 << 44)
#define VIRT_ALIGN ((uintptr_t)2 << 20)
#define VIRT_END   ((uintptr_t)1 << 62)

static char g_virtual_event;

static l8_status virt_segment_alloc(void *user, size_t bytes, void **ptr)
{
    replay_virtual_provider *vp = user;
    *ptr = NULL;
    if (bytes == 0) return L8_FAIL(L8_ERR_INVALID_ARG, "virtual provider: segment of 0 bytes");
    if (vp->capacity && (bytes > vp->capacity || vp->live_bytes > vp->capacity - bytes))
        return L8_FAIL(L8_ERR_OOM, "virtual provider: %zu bytes would pass its capacity "
                       "(%zu of %zu in use)", bytes, vp->live_bytes, vp->capacity);
    uintptr_t at = (vp->next + VIRT_ALIGN - 1) & ~(VIRT_ALIGN - 1);
    if (bytes > VIRT_END - at - VIRT_ALIGN)
        return L8_FAIL(L8_ERR_OOM, "virtual provider: address space exhausted");
    vp->next = at + bytes + VIRT_ALIGN;   /* a gap: ranges never touch */
    vp->live_bytes += bytes;
    if (vp->live_bytes > vp->peak_bytes) vp->peak_bytes = vp->live_bytes;
    vp->segment_allocs++;
    *ptr = (void *)at;
    return L8_OK;
}

static l8_status virt_segment_free(void *user, void *ptr, size_t bytes)
{
    replay_virtual_provider *vp = user;
    (void)ptr;
    vp->live_bytes -= bytes < vp->live_bytes ? bytes : vp->live_bytes;
    vp->segment_frees++;
    return L8_OK;
}

static l8_status virt_event_create(void *user, void **event)
{
    (void)user;
    *event = &g_virtual_event;
    return L8_OK;
}

static l8_status virt_event_record(void *user, void *event, l8_stream_id stream)
{
    (void)user;
    (void)event;
    (void)stream;
    return L8_OK;
}

static l8_status virt_event_query(void *user, void *event, int *done)
{
    (void)user;
    (void)event;
    *done = 1;
    return L8_OK;
}

static l8_status virt_event_sync(void *user, void *event)
{
    (void)user;
    (void)event;
    return L8_OK;
}

static void virt_event_destroy(void *user, void *event)
{
    (void)user;
    (void)event;
}

void replay_virtual_provider_init(replay_virtual_provider *vp, size_t capacity)
{
    if (!vp) return;
    memset(vp, 0, sizeof *vp);
    vp->next = VIRT_BASE;
    vp->capacity = capacity;
    vp->base.size = sizeof vp->base;
    vp->base.user = vp;
    vp->base.name = "virtual";
    vp->base.device = -1;
    vp->base.segment_alloc = virt_segment_alloc;
    vp->base.segment_free = virt_segment_free;
    vp->base.event_create = virt_event_create;
    vp->base.event_record = virt_event_record;
    vp->base.event_query = virt_event_query;
    vp->base.event_sync = virt_event_sync;
    vp->base.event_destroy = virt_event_destroy;
}
