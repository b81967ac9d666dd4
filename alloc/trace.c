/* trace.c - the memory trace recorder: in-memory ring, write buffer, tags,
 * stream roles, and the process-wide trace. The file's creation, naming and
 * background flusher are in trace_file.c, the reader in trace_read.c.
 *
 * Recording. Every event goes into a ring of the most recent `capacity`
 * records and, when the trace has a path, into a 64 KiB write buffer. The
 * flusher thread (trace_file.c) writes the buffer when it fills (the
 * recorder hands it over and continues in a spare one, so the kernel's copy
 * is off the recording thread) and every 50 ms (so a live reader sees even
 * a quiet writer's events within about that long); l8_trace_flush and
 * destroy write synchronously. The file format is in docs/trace-format.md;
 * records are the l8_trace_event bytes, little-endian.
 *
 * Invariants (all under t->mu):
 *  - ring[head] is the next slot; when count >= cap the oldest held event is
 *    ring[head], otherwise ring[0];
 *  - events enter the ring and the file in one order, and an event's time is
 *    raised to its predecessor's when needed, so times never decrease along
 *    either (the raise is at most the wait for the lock);
 *  - a tag's string record is appended to the file before the first event
 *    that uses the tag (interning and emitting happen together), tag ids are
 *    dense from 1, in order of first use;
 *  - after the first write error nothing more is written (a gap in the middle
 *    of a stream would silently misattribute frees); the error is sticky and
 *    every later l8_trace_flush reports it.
 *
 * Tags live in a per-thread stack of fixed slots (no allocation on push).
 * Each slot caches the id its name has in one trace, keyed by the trace's
 * serial number (unique per process, never reused), so the common record
 * path does no hashing.
 *
 * The file is appended to at its final path rather than written to a
 * temporary name and renamed into place when complete: a streamed trace
 * must be readable while it grows. Readers cope with a partially written
 * last record.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/config_internal.h"
#include "alloc/trace_internal.h"
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#define TRACE_DEFAULT_CAPACITY ((size_t)1 << 20)
/* With a file the ring is only the recent past: a smaller one stays in the
 * caches (measured: ~20 ns less per event than 48 MiB of ring). */
#define TRACE_DEFAULT_CAPACITY_FILE ((size_t)1 << 16)
#define TAG_MAX_DEPTH 64
#define TAG_MAX_LEN 127

const unsigned char l8i_trace_magic[8] = { 'L', '8', 'T', 'R', 'A', 'C', 'E', 0 };

/* The format is the in-memory layout; pin it down. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the trace format is little-endian; add byte swapping for this host");
_Static_assert(sizeof(l8_trace_event) == TRACE_RECORD, "l8_trace_event must be 48 bytes");
_Static_assert(offsetof(l8_trace_event, tag) == 40 && offsetof(l8_trace_event, kind) == 44 &&
               offsetof(l8_trace_event, device) == 46, "l8_trace_event layout");
_Static_assert(sizeof(trace_header) == TRACE_HEADER, "trace header must be 48 bytes");
_Static_assert(offsetof(trace_header, rank) == TRACE_HDR_RANK_OFF, "trace header layout");

static atomic_uint_fast64_t g_serial;

/* ---- small helpers ---- */

uint64_t l8i_clock_ns(int id)
{
    struct timespec ts;
    clock_gettime((clockid_t)id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the recorder's clock ----
 *
 * Event times are CLOCK_MONOTONIC nanoseconds. Reading that clock is half
 * of an event's cost (25-60 ns on a VM), so on x86-64 with an invariant TSC
 * that the kernel itself uses as its clocksource, the recorder reads the TSC
 * (about 10 ns) and scales it by a ratio measured once per process against
 * CLOCK_MONOTONIC over 20 ms (error a few ppm: milliseconds per hour, which
 * a memory timeline does not notice). L8_TRACE_CLOCK=monotonic turns it off.
 * A trace's t0 comes from the same clock, so its times never go below 0. */
static struct {
    int tsc;
    uint64_t c0, m0;              /* a TSC reading and CLOCK_MONOTONIC at it */
    uint64_t mult;                /* ns per tick, 32.32 fixed point */
} g_clk;
static pthread_once_t g_clk_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* A (tsc, monotonic) pair read as close together as this thread manages. */
static void clk_sample(uint64_t *c, uint64_t *m)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t a = __rdtsc(), mono = l8i_clock_ns(CLOCK_MONOTONIC), b = __rdtsc();
        if (b >= a && b - a < best) {
            best = b - a;
            *c = a + (b - a) / 2;
            *m = mono;
        }
    }
}

static int kernel_uses_tsc(void)
{
    char buf[32] = "";
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= 3 && !strncmp(buf, "tsc", 3) && (n == 3 || buf[3] == '\n');
}
#endif

static void clk_init(void)
{
#if defined(__x86_64__)
    const char *e = getenv("L8_TRACE_CLOCK");
    if (e && !strcmp(e, "monotonic")) return;
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return;   /* invariant */
    if (!kernel_uses_tsc()) return;
    uint64_t c0 = 0, m0 = 0, c1 = 0, m1 = 0;
    clk_sample(&c0, &m0);
    struct timespec ts = { 0, 20 * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {}
    clk_sample(&c1, &m1);
    if (c1 <= c0 || m1 <= m0 + 10000000ull) return;
    g_clk.mult = (uint64_t)(((unsigned __int128)(m1 - m0) << 32) / (c1 - c0));
    g_clk.c0 = c1;
    g_clk.m0 = m1;
    g_clk.tsc = g_clk.mult != 0;
#endif
}

static inline uint64_t rec_clock_ns(void)
{
#if defined(__x86_64__)
    if (g_clk.tsc) {
        uint64_t c = __rdtsc();
        if (c < g_clk.c0) c = g_clk.c0;
        return g_clk.m0 + (uint64_t)(((unsigned __int128)(c - g_clk.c0) * g_clk.mult) >> 32);
    }
#endif
    return l8i_clock_ns(CLOCK_MONOTONIC);
}

l8_status l8i_trace_io_error(int e, const char *call, const char *file, int line,
                             const char *what, const char *path)
{
    char buf[128];
    const char *msg = strerror_r(e, buf, sizeof buf);   /* GNU form: returns the string */
    return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), call, file, line, "%s '%s': %s", what,
                        path, msg);
}

/* Write all of p, retrying short writes and EINTR. Returns 0 or an errno. */
int l8i_write_all(int fd, const void *p, size_t n, uint64_t *written)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        b += w;
        n -= (size_t)w;
        *written += (uint64_t)w;
    }
    return 0;
}

static size_t round_up48(size_t n) { return (n + TRACE_RECORD - 1) / TRACE_RECORD * TRACE_RECORD; }

/* ---- file writing (t->mu held) ---- */

/* Wait until the flusher has written the buffer it holds (the wait
 * releases t->mu). */
static void wait_pending(l8_trace *t)
{
    while (t->pend) pthread_cond_wait(&t->done, &t->mu);
}

void l8i_trace_drain(l8_trace *t)
{
    wait_pending(t);
    if (t->wlen == 0) return;
    if (!t->werr) t->werr = l8i_write_all(t->fd, t->wbuf, t->wlen, &t->written);
    t->wlen = 0;
}

void l8i_trace_hand_off(l8_trace *t)
{
    t->pend = t->wbuf;
    t->pend_len = t->wlen;
    t->wbuf = t->spare;
    t->spare = NULL;
    t->wlen = 0;
    pthread_cond_signal(&t->wake);
}

/* Room for `need` more bytes in the buffer, made before an event takes its
 * time and place in the order (so waiting here cannot reorder events). With
 * a flusher the full buffer is handed to it and the recorder goes on in the
 * spare one; it waits only when the flusher still writes the previous one. */
static void ensure_room(l8_trace *t, size_t need)
{
    while (t->wlen + need > WBUF_BYTES) {
        if (!t->flusher_on) l8i_trace_drain(t);
        else if (t->pend) wait_pending(t);
        else l8i_trace_hand_off(t);
    }
}

/* Append n bytes (n <= WBUF_BYTES) to the write buffer. */
static void put_bytes(l8_trace *t, const void *p, size_t n)
{
    if (t->wlen + n > WBUF_BYTES) l8i_trace_drain(t);   /* not reached after ensure_room */
    memcpy(t->wbuf + t->wlen, p, n);
    t->wlen += n;
}

/* A string definition record: header record, then the bytes padded with
 * zeros to a multiple of 48. */
static void put_string(l8_trace *t, uint32_t id, const char *s, size_t len, uint64_t now)
{
    unsigned char rec[TRACE_RECORD + ((TAG_MAX_LEN + TRACE_RECORD) / TRACE_RECORD) * TRACE_RECORD];
    l8_trace_event h = { .time_ns = now, .size = len, .tag = id, .kind = TRACE_KIND_STRING };
    size_t padded = round_up48(len);
    memset(rec, 0, TRACE_RECORD + padded);
    memcpy(rec, &h, TRACE_RECORD);
    memcpy(rec + TRACE_RECORD, s, len);
    put_bytes(t, rec, TRACE_RECORD + padded);
}

void l8i_trace_put_end(l8_trace *t)
{
    l8_trace_event e = { .time_ns = t->last_time, .kind = TRACE_KIND_END };
    if (!t->werr) put_bytes(t, &e, TRACE_RECORD);
}

/* ---- tag interning (t->mu held) ---- */

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;                 /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int slots_grow(l8_trace *t)
{
    uint32_t ncap = t->slots_cap ? t->slots_cap * 2 : 64;
    uint32_t *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (uint32_t i = 0; i < t->slots_cap; i++) {
        uint32_t id = t->slots[i];
        if (!id) continue;
        uint32_t j = hash_str(t->names[id - 1]) & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = id;
    }
    free(t->slots);
    t->slots = ns;
    t->slots_cap = ncap;
    return 0;
}

/* The id of name in t, interning it (and emitting its string record) on
 * first use. 0 when host memory ran out. */
static uint32_t intern(l8_trace *t, const char *name, uint64_t now)
{
    if (t->slots_cap) {
        uint32_t j = hash_str(name) & (t->slots_cap - 1);
        for (; t->slots[j]; j = (j + 1) & (t->slots_cap - 1))
            if (!strcmp(t->names[t->slots[j] - 1], name)) return t->slots[j];
    }
    /* keep the table at most half full */
    if ((uint64_t)(t->nnames + 1) * 2 > t->slots_cap && slots_grow(t) != 0) return 0;
    if (t->nnames == t->names_cap) {
        uint32_t ncap = t->names_cap ? t->names_cap * 2 : 32;
        char **nn = realloc(t->names, ncap * sizeof *nn);
        if (!nn) return 0;
        t->names = nn;
        t->names_cap = ncap;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy) return 0;
    memcpy(copy, name, len + 1);
    uint32_t id = ++t->nnames;
    t->names[id - 1] = copy;
    uint32_t j = hash_str(name) & (t->slots_cap - 1);
    while (t->slots[j]) j = (j + 1) & (t->slots_cap - 1);
    t->slots[j] = id;
    if (t->fd >= 0 && !t->werr) put_string(t, id, copy, len, now);
    return id;
}

/* ---- the per-thread tag stack ---- */

typedef struct tag_slot {
    uint64_t serial;              /* trace whose id is cached in `id`; 0: none */
    uint32_t id;
    char name[TAG_MAX_LEN + 1];
} tag_slot;

static _Thread_local struct {
    int depth;
    tag_slot slot[TAG_MAX_DEPTH];
} g_tags;

l8_status l8_tag_push(const char *name)
{
    L8_ARG(name != NULL);
    size_t len = strnlen(name, TAG_MAX_LEN + 1);
    if (len == 0) return L8_FAIL(L8_ERR_INVALID_ARG, "tag name is empty");
    if (len > TAG_MAX_LEN)
        return L8_FAIL(L8_ERR_INVALID_ARG, "tag name is longer than %d bytes: '%.40s...'",
                       TAG_MAX_LEN, name);
    if (g_tags.depth == TAG_MAX_DEPTH)
        return L8_FAIL(L8_ERR_INVALID_ARG,
                       "tag stack is full (%d deep; a push without its pop?) pushing '%s'",
                       TAG_MAX_DEPTH, name);
    tag_slot *s = &g_tags.slot[g_tags.depth++];
    memcpy(s->name, name, len + 1);
    s->serial = 0;
    s->id = 0;
    return L8_OK;
}

l8_status l8_tag_pop(void)
{
    if (g_tags.depth == 0)
        return L8_FAIL(L8_ERR_STATE, "tag stack is empty: l8_tag_pop without l8_tag_push");
    g_tags.depth--;
    return L8_OK;
}

const char *l8_tag_current(void)
{
    return g_tags.depth ? g_tags.slot[g_tags.depth - 1].name : NULL;
}

/* The current tag's id in t (t->mu held); 0 for none. */
static uint32_t current_tag(l8_trace *t, uint64_t now)
{
    if (g_tags.depth == 0) return 0;
    tag_slot *s = &g_tags.slot[g_tags.depth - 1];
    if (s->serial == t->serial) return s->id;
    uint32_t id = intern(t, s->name, now);
    if (id == 0) {
        t->untagged++;
        return 0;
    }
    s->serial = t->serial;
    s->id = id;
    return id;
}

/* ---- create / destroy ---- */

void l8_trace_config_init(l8_trace_config *cfg)
{
    if (cfg) *cfg = (l8_trace_config)L8_TRACE_CONFIG_INIT;
}

l8_status l8_trace_create(const l8_trace_config *cfg, l8_trace **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_trace_create", "L8_TRACE_CONFIG_INIT");
    if (c.rank < -1) return L8_FAIL(L8_ERR_INVALID_ARG, "trace rank %d (want >= 0, or -1)", c.rank);
    if (c.device < L8_TRACE_DEVICE_ANY)
        return L8_FAIL(L8_ERR_INVALID_ARG, "trace device %d (want an ordinal, -1 for host, or "
                       "L8_TRACE_DEVICE_ANY)", c.device);
    if (c.capacity == 0) c.capacity = c.path ? TRACE_DEFAULT_CAPACITY_FILE : TRACE_DEFAULT_CAPACITY;
    if (c.capacity > SIZE_MAX / sizeof(l8_trace_event))
        return L8_FAIL(L8_ERR_INVALID_ARG, "trace capacity %zu events is too large", c.capacity);
    if (c.path && !c.path[0]) return L8_FAIL(L8_ERR_INVALID_ARG, "trace path is empty");

    l8_trace *t = calloc(1, sizeof *t);
    if (!t) return L8_FAIL(L8_ERR_OOM, "no host memory for a trace");
    t->fd = -1;
    l8_status st = L8_OK;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return L8_FAIL(L8_ERR_OOM, "pthread_mutex_init failed for a trace");
    }
    t->serial = atomic_fetch_add(&g_serial, 1) + 1;
    pthread_once(&g_clk_once, clk_init);
    t->t0 = rec_clock_ns();
    t->cap = c.capacity;
    /* Not touched until used, so the default 48 MiB costs only what is recorded. */
    t->ring = malloc(t->cap * sizeof *t->ring);
    if (!t->ring) {
        st = L8_FAIL(L8_ERR_OOM, "no host memory for a trace ring of %zu events", t->cap);
        goto fail;
    }
    if (c.path) L8_TRY(st, l8i_trace_open_file(t, &c), fail);
    *out = t;
    return L8_OK;
fail:
    l8_trace_destroy(t);
    return st;
}

void l8_trace_destroy(l8_trace *t)
{
    if (!t) return;
    l8i_trace_close_file(t);
    for (uint32_t i = 0; i < t->nnames; i++) free(t->names[i]);
    free(t->names);
    free(t->slots);
    free(t->wbuf);
    free(t->spare);
    free(t->path);
    free(t->ring);
    free(t->roles);
    if (t->done_init) pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- stream roles ---- */

static stream_role *find_role(l8_trace *t, int device, uint64_t handle)
{
    for (size_t i = 0; i < t->nroles; i++)
        if (t->roles[i].handle == handle && t->roles[i].device == device) return &t->roles[i];
    return NULL;
}

/* t->mu held */
static uint64_t stream_role_of(l8_trace *t, int device, uint64_t handle)
{
    stream_role *r = find_role(t, device, handle);
    return r ? r->cls : L8_TRACE_STREAM_OTHER;
}

l8_status l8_trace_set_stream(l8_trace *t, int device, uint64_t handle, l8_trace_stream cls)
{
    if (!t) return L8_OK;
    if ((unsigned)cls > L8_TRACE_STREAM_OTHER)
        return L8_FAIL(L8_ERR_INVALID_ARG, "trace stream role %d is not an l8_trace_stream",
                       (int)cls);
    l8_status st = L8_OK;
    pthread_mutex_lock(&t->mu);
    stream_role *r = find_role(t, device, handle);
    if (cls == L8_TRACE_STREAM_NONE) {
        if (r && --r->holders == 0) *r = t->roles[--t->nroles];
    } else if (r) {
        r->cls = (uint16_t)cls;
        r->holders++;
    } else {
        if (t->nroles == t->roles_cap) {
            size_t ncap = t->roles_cap ? t->roles_cap * 2 : 8;
            stream_role *nr = realloc(t->roles, ncap * sizeof *nr);
            if (!nr) {
                st = L8_FAIL(L8_ERR_OOM, "no host memory for the trace's stream table");
                goto out;
            }
            t->roles = nr;
            t->roles_cap = ncap;
        }
        t->roles[t->nroles++] = (stream_role){ device, handle, (uint16_t)cls, 1 };
    }
out:
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* ---- recording ---- */

void l8_trace_record(l8_trace *t, l8_trace_kind kind, int device, uint64_t stream, uint64_t addr,
                     uint64_t size, uint64_t aux)
{
    /* Kind 0 and the reserved range (string records among them) would make
     * the file unreadable; such a call is a bug and is dropped. */
    if (!t || (unsigned)kind == 0 || (unsigned)kind >= TRACE_KIND_FIRST_RESERVED) return;
    int16_t dev = device < 0 ? -1 : device > INT16_MAX ? INT16_MAX : (int16_t)device;
    /* The clock is read before the lock (it is the costliest step, and the
     * lock is what threads contend for); an event that lost the race for the
     * lock to a later reading takes that reading's time. */
    uint64_t now = rec_clock_ns();
    now = now > t->t0 ? now - t->t0 : 0;
    pthread_mutex_lock(&t->mu);
    /* an event and the string record of its tag's first use */
    if (t->fd >= 0 && !t->werr) ensure_room(t, 2 * TRACE_RECORD + TAG_MAX_LEN + TRACE_RECORD);
    if (now < t->last_time) now = t->last_time;
    t->last_time = now;
    uint32_t tag = current_tag(t, now);
    uint64_t role = stream ? stream_role_of(t, device, stream) : L8_TRACE_STREAM_NONE;
    l8_trace_event *e = &t->ring[t->head];
    e->time_ns = now;
    e->addr = addr;
    e->size = size;
    e->stream = role;
    e->aux = aux;
    e->tag = tag;
    e->kind = (uint16_t)kind;
    e->device = dev;
    if (++t->head == t->cap) t->head = 0;
    t->count++;
    if (t->fd >= 0) {
        if (t->werr) {
            t->unwritten++;
        } else {
            put_bytes(t, e, TRACE_RECORD);
            if (t->write_through) l8i_trace_drain(t);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

l8_status l8_trace_flush(l8_trace *t)
{
    if (!t) return L8_OK;
    pthread_mutex_lock(&t->mu);
    if (t->fd >= 0) l8i_trace_drain(t);
    int e = t->werr;
    uint64_t written = t->written, unwritten = t->unwritten, untagged = t->untagged;
    pthread_mutex_unlock(&t->mu);
    if (e) {
        char buf[128];
        const char *msg = strerror_r(e, buf, sizeof buf);
        return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), "write", __FILE__, __LINE__,
                            "trace file '%s': write failed after %llu bytes: %s; the file ends "
                            "there (%llu later events kept only in memory)",
                            t->path, (unsigned long long)written, msg,
                            (unsigned long long)unwritten);
    }
    if (untagged)
        return L8_FAIL(L8_ERR_OOM, "trace: %llu events were recorded without their tag "
                       "(no host memory to intern the name)", (unsigned long long)untagged);
    return L8_OK;
}

/* ---- in-memory access ---- */

uint64_t l8_trace_count(l8_trace *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    uint64_t n = t->count;
    pthread_mutex_unlock(&t->mu);
    return n;
}

size_t l8_trace_held(l8_trace *t)
{
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    size_t n = t->count < t->cap ? (size_t)t->count : t->cap;
    pthread_mutex_unlock(&t->mu);
    return n;
}

size_t l8_trace_events(l8_trace *t, size_t first, l8_trace_event *out, size_t n)
{
    if (!t || !out) return 0;
    pthread_mutex_lock(&t->mu);
    size_t held = t->count < t->cap ? (size_t)t->count : t->cap;
    size_t oldest = t->count < t->cap ? 0 : t->head;
    size_t m = 0;
    if (first < held) {
        m = held - first < n ? held - first : n;
        size_t i = oldest + first;
        if (i >= t->cap) i -= t->cap;
        size_t part = t->cap - i < m ? t->cap - i : m;   /* up to the end of the array */
        memcpy(out, t->ring + i, part * sizeof *out);
        memcpy(out + part, t->ring, (m - part) * sizeof *out);
    }
    pthread_mutex_unlock(&t->mu);
    return m;
}

const char *l8_trace_tag_name(l8_trace *t, uint32_t id)
{
    if (!t) return NULL;
    pthread_mutex_lock(&t->mu);
    const char *s = id >= 1 && id <= t->nnames ? t->names[id - 1] : NULL;
    pthread_mutex_unlock(&t->mu);
    return s;
}

/* ---- the process-wide trace ---- */

static pthread_once_t g_global_once = PTHREAD_ONCE_INIT;
static l8_trace *g_global;

/* At exit: write the end marker and flush, stop the flusher, then write
 * every later event through at once (after the marker). The trace
 * is not freed: atexit handlers registered before this one run after it and
 * may still record (a context torn down at exit). */
static void global_at_exit(void)
{
    l8_trace *t = g_global;
    pthread_mutex_lock(&t->mu);
    if (t->fd >= 0) {
        l8i_trace_put_end(t);
        l8i_trace_drain(t);
    }
    t->write_through = 1;
    pthread_mutex_unlock(&t->mu);
    l8i_trace_stop_flusher(t);
}

static void global_init(void)
{
    const char *path = getenv("L8_TRACE");
    if (!path || !path[0]) return;
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t;
    if (l8_trace_create(&c, &t) != L8_OK) return;   /* error stays with this thread */
    g_global = t;
    if (atexit(global_at_exit) != 0) t->write_through = 1;   /* no hook: never buffer */
}

l8_trace *l8_trace_global(void)
{
    pthread_once(&g_global_once, global_init);
    return g_global;
}

