/* trace.c - the memory trace recorder: in-memory ring, streamed file, tags,
 * the process-wide trace, and the file reader.
 *
 * Recording. Every event goes into a ring of the most recent `capacity`
 * records and, when the trace has a path, into a 64 KiB write buffer that is
 * written to the file when it fills, when an event arrives more than 100 ms
 * after the last write (so a live reader sees events within about that long
 * of a busy writer), on l8_trace_flush and on destroy. The file format is in
 * docs/trace-format.md; records are the l8_trace_event bytes, little-endian.
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
 * The file is written directly at its path rather than to a temporary name
 * renamed into place (DESIGN.md "Errors"): a streamed trace must be readable
 * while it grows. Readers cope with a partially written last record.
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
#include "alloc/trace.h"
#include "runtime/config_internal.h"

#define TRACE_VERSION 1u
#define TRACE_RECORD 48u
#define TRACE_HEADER 48u
#define TRACE_KIND_STRING 0xFFFFu      /* string definition record */
#define TRACE_KIND_FIRST_RESERVED 0x8000u
#define TRACE_DEFAULT_CAPACITY ((size_t)1 << 20)
#define WBUF_BYTES ((size_t)64 * 1024)
#define LIVE_FLUSH_NS 100000000ull     /* 100 ms */
#define TAG_MAX_DEPTH 64
#define TAG_MAX_LEN 127
#define READER_BUF_BYTES ((size_t)256 * 1024)
#define READER_STRING_MAX 4096u

static const unsigned char k_magic[8] = { 'L', '8', 'T', 'R', 'A', 'C', 'E', 0 };

/* The file header, written once at create (docs/trace-format.md). */
typedef struct trace_header {
    unsigned char magic[8];
    uint32_t version;
    uint32_t record_size;
    uint32_t header_size;
    uint32_t pid;
    uint64_t start_realtime_ns;
    uint64_t start_monotonic_ns;
    uint64_t reserved;
} trace_header;

/* The format is the in-memory layout; pin it down. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the trace format is little-endian; add byte swapping for this host");
_Static_assert(sizeof(l8_trace_event) == TRACE_RECORD, "l8_trace_event must be 48 bytes");
_Static_assert(offsetof(l8_trace_event, tag) == 40 && offsetof(l8_trace_event, kind) == 44 &&
               offsetof(l8_trace_event, device) == 46, "l8_trace_event layout");
_Static_assert(sizeof(trace_header) == TRACE_HEADER, "trace header must be 48 bytes");

struct l8_trace {
    pthread_mutex_t mu;
    uint64_t serial;              /* unique per trace in this process */
    uint64_t t0;                  /* CLOCK_MONOTONIC ns at create */
    uint64_t last_time;           /* latest time_ns recorded */
    /* ring */
    l8_trace_event *ring;
    size_t cap, head;
    uint64_t count;
    /* file (fd < 0: memory only) */
    int fd;
    char *path;
    unsigned char *wbuf;
    size_t wlen;
    uint64_t last_write;          /* time_ns of the last write to the file */
    uint64_t written;             /* bytes written to the file */
    int write_through;            /* set at exit: every record is written at once */
    int werr;                     /* errno of the first write error, 0 if none */
    uint64_t unwritten;           /* events not written because of werr */
    uint64_t untagged;            /* events whose tag could not be interned (no memory) */
    /* tag interning: names[id - 1]; slots is an open-addressing table of ids */
    char **names;
    uint32_t nnames, names_cap;
    uint32_t *slots;
    uint32_t slots_cap;           /* power of two, or 0 */
};

static atomic_uint_fast64_t g_serial;

/* ---- small helpers ---- */

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static l8_status io_error(int e, const char *call, const char *file, int line, const char *what,
                          const char *path)
{
    char buf[128];
    const char *msg = strerror_r(e, buf, sizeof buf);   /* GNU form: returns the string */
    return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), call, file, line, "%s '%s': %s", what,
                        path, msg);
}

/* Write all of p, retrying short writes and EINTR. Returns 0 or an errno. */
static int write_all(int fd, const void *p, size_t n, uint64_t *written)
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

static void drain(l8_trace *t)
{
    if (t->wlen == 0) return;
    if (!t->werr) t->werr = write_all(t->fd, t->wbuf, t->wlen, &t->written);
    t->wlen = 0;
    t->last_write = t->last_time;
}

/* Append n bytes (n <= WBUF_BYTES) to the write buffer. */
static void put_bytes(l8_trace *t, const void *p, size_t n)
{
    if (t->wlen + n > WBUF_BYTES) drain(t);
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

static l8_status open_file(l8_trace *t, const char *path)
{
    size_t len = strlen(path);
    t->path = malloc(len + 1);
    t->wbuf = malloc(WBUF_BYTES);
    if (!t->path || !t->wbuf)
        return L8_FAIL(L8_ERR_OOM, "no host memory for the trace write buffer");
    memcpy(t->path, path, len + 1);
    t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t->fd < 0)
        return io_error(errno, "open", __FILE__, __LINE__, "cannot create trace file", path);
    trace_header h = { .version = TRACE_VERSION, .record_size = TRACE_RECORD,
                       .header_size = TRACE_HEADER, .pid = (uint32_t)getpid(),
                       .start_realtime_ns = clock_ns(CLOCK_REALTIME), .start_monotonic_ns = t->t0 };
    memcpy(h.magic, k_magic, sizeof k_magic);
    /* Written at once, not buffered: a reader may open the file as soon as
     * l8_trace_create returns. */
    int e = write_all(t->fd, &h, sizeof h, &t->written);
    if (e) return io_error(e, "write", __FILE__, __LINE__, "cannot write trace header to", path);
    return L8_OK;
}

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
    if (c.capacity == 0) c.capacity = TRACE_DEFAULT_CAPACITY;
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
    t->t0 = clock_ns(CLOCK_MONOTONIC);
    t->cap = c.capacity;
    /* Not touched until used, so the default 48 MiB costs only what is recorded. */
    t->ring = malloc(t->cap * sizeof *t->ring);
    if (!t->ring) {
        st = L8_FAIL(L8_ERR_OOM, "no host memory for a trace ring of %zu events", t->cap);
        goto fail;
    }
    if (c.path) L8_TRY(st, open_file(t, c.path), fail);
    *out = t;
    return L8_OK;
fail:
    l8_trace_destroy(t);
    return st;
}

void l8_trace_destroy(l8_trace *t)
{
    if (!t) return;
    if (t->fd >= 0) {
        drain(t);
        close(t->fd);
    }
    for (uint32_t i = 0; i < t->nnames; i++) free(t->names[i]);
    free(t->names);
    free(t->slots);
    free(t->wbuf);
    free(t->path);
    free(t->ring);
    pthread_mutex_destroy(&t->mu);
    free(t);
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
    uint64_t now = clock_ns(CLOCK_MONOTONIC) - t->t0;
    pthread_mutex_lock(&t->mu);
    if (now < t->last_time) now = t->last_time;
    t->last_time = now;
    uint32_t tag = current_tag(t, now);
    l8_trace_event *e = &t->ring[t->head];
    e->time_ns = now;
    e->addr = addr;
    e->size = size;
    e->stream = stream;
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
            if (t->write_through || now - t->last_write >= LIVE_FLUSH_NS) drain(t);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

l8_status l8_trace_flush(l8_trace *t)
{
    if (!t) return L8_OK;
    pthread_mutex_lock(&t->mu);
    if (t->fd >= 0) drain(t);
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

/* At exit: flush, then write every later event through at once. The trace
 * is not freed: atexit handlers registered before this one run after it and
 * may still record (a context torn down at exit). */
static void global_at_exit(void)
{
    l8_trace *t = g_global;
    pthread_mutex_lock(&t->mu);
    if (t->fd >= 0) drain(t);
    t->write_through = 1;
    pthread_mutex_unlock(&t->mu);
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

/* ---- the reader ---- */

struct l8_trace_reader {
    int fd;
    char *path;
    uint64_t off;                 /* file offset of the next record */
    unsigned char *buf;           /* file bytes [buf_off, buf_off + buf_len) */
    uint64_t buf_off;
    size_t buf_len;
    char **names;                 /* names[id - 1] */
    uint32_t nnames, names_cap;
};

/* Make file bytes [off, off + need) available in the buffer. 1: there;
 * 0: the file does not have them (yet); -1: read error (recorded). */
static int reader_fill(l8_trace_reader *r, size_t need)
{
    if (r->off >= r->buf_off && r->off + need <= r->buf_off + r->buf_len) return 1;
    /* keep what we have from off on, then read after it */
    size_t keep = 0;
    if (r->off >= r->buf_off && r->off < r->buf_off + r->buf_len) {
        keep = (size_t)(r->buf_off + r->buf_len - r->off);
        memmove(r->buf, r->buf + (r->off - r->buf_off), keep);
    }
    r->buf_off = r->off;
    r->buf_len = keep;
    while (r->buf_len < READER_BUF_BYTES) {
        ssize_t n = pread(r->fd, r->buf + r->buf_len, READER_BUF_BYTES - r->buf_len,
                          (off_t)(r->buf_off + r->buf_len));
        if (n < 0) {
            if (errno == EINTR) continue;
            io_error(errno, "pread", __FILE__, __LINE__, "cannot read trace file", r->path);
            return -1;
        }
        if (n == 0) break;
        r->buf_len += (size_t)n;
    }
    return r->buf_len >= need;
}

static l8_status corrupt(l8_trace_reader *r, const char *what, long long v)
{
    return L8_FAIL(L8_ERR_INVALID_ARG, "trace file '%s' is corrupt at offset %llu: %s (%lld)",
                   r->path, (unsigned long long)r->off, what, v);
}

l8_status l8_trace_reader_open(const char *path, l8_trace_reader **out)
{
    L8_ARG(path != NULL && out != NULL);
    *out = NULL;
    l8_status st = L8_OK;
    l8_trace_reader *r = calloc(1, sizeof *r);
    if (!r) return L8_FAIL(L8_ERR_OOM, "no host memory for a trace reader");
    r->fd = -1;
    size_t len = strlen(path);
    r->path = malloc(len + 1);
    r->buf = malloc(READER_BUF_BYTES);
    if (!r->path || !r->buf) {
        st = L8_FAIL(L8_ERR_OOM, "no host memory for a trace reader");
        goto fail;
    }
    memcpy(r->path, path, len + 1);
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        st = io_error(errno, "open", __FILE__, __LINE__, "cannot open trace file", path);
        goto fail;
    }
    int got = reader_fill(r, TRACE_HEADER);
    if (got < 0) {
        st = L8_ERR_IO;
        goto fail;
    }
    trace_header h;
    memset(&h, 0, sizeof h);
    memcpy(&h, r->buf, r->buf_len < sizeof h ? r->buf_len : sizeof h);
    if (r->buf_len >= sizeof k_magic && memcmp(h.magic, k_magic, sizeof k_magic) != 0) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s' is not a lean8 trace: bad magic (first bytes "
                     "%02x %02x %02x %02x, expected \"L8TRACE\\0\")", path, h.magic[0],
                     h.magic[1], h.magic[2], h.magic[3]);
        goto fail;
    }
    if (!got) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': truncated trace header (%zu of %u bytes)", path,
                     r->buf_len, TRACE_HEADER);
        goto fail;
    }
    if (h.version != TRACE_VERSION) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': trace format version %u; this reader "
                     "understands version %u", path, h.version, TRACE_VERSION);
        goto fail;
    }
    if (h.record_size != TRACE_RECORD || h.header_size < TRACE_HEADER ||
        h.header_size > READER_BUF_BYTES) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': bad trace header: record size %u (expected "
                     "%u), header size %u (expected at least %u)", path, h.record_size,
                     TRACE_RECORD, h.header_size, TRACE_HEADER);
        goto fail;
    }
    r->off = h.header_size;
    *out = r;
    return L8_OK;
fail:
    l8_trace_reader_close(r);
    return st;
}

void l8_trace_reader_close(l8_trace_reader *r)
{
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    for (uint32_t i = 0; i < r->nnames; i++) free(r->names[i]);
    free(r->names);
    free(r->buf);
    free(r->path);
    free(r);
}

/* A string record at r->off whose 48-byte head is h; *done = 0 when its
 * bytes are not all in the file yet. */
static l8_status reader_string(l8_trace_reader *r, const l8_trace_event *h, int *done)
{
    *done = 0;
    if (h->size == 0 || h->size > READER_STRING_MAX)
        return corrupt(r, "string length", (long long)h->size);
    if (h->tag != r->nnames + 1) return corrupt(r, "string record out of order, id", h->tag);
    size_t total = TRACE_RECORD + round_up48((size_t)h->size);
    int got = reader_fill(r, total);
    if (got < 0) return L8_ERR_IO;
    if (!got) return L8_OK;
    const char *s = (const char *)r->buf + (r->off - r->buf_off) + TRACE_RECORD;
    if (memchr(s, 0, (size_t)h->size)) return corrupt(r, "NUL inside a tag string, id", h->tag);
    if (r->nnames == r->names_cap) {
        uint32_t ncap = r->names_cap ? r->names_cap * 2 : 32;
        char **nn = realloc(r->names, ncap * sizeof *nn);
        if (!nn) return L8_FAIL(L8_ERR_OOM, "no host memory for trace tag names");
        r->names = nn;
        r->names_cap = ncap;
    }
    char *copy = malloc((size_t)h->size + 1);
    if (!copy) return L8_FAIL(L8_ERR_OOM, "no host memory for trace tag names");
    memcpy(copy, s, (size_t)h->size);
    copy[h->size] = '\0';
    r->names[r->nnames++] = copy;
    r->off += total;
    *done = 1;
    return L8_OK;
}

l8_status l8_trace_reader_next(l8_trace_reader *r, l8_trace_event *ev, int *got)
{
    L8_ARG(r != NULL && ev != NULL && got != NULL);
    *got = 0;
    for (;;) {
        /* A short tail is a record still being written: report "nothing yet"
         * and start from the same offset next time. */
        int have = reader_fill(r, TRACE_RECORD);
        if (have < 0) return L8_ERR_IO;
        if (!have) return L8_OK;
        l8_trace_event e;
        memcpy(&e, r->buf + (r->off - r->buf_off), sizeof e);
        if (e.kind == TRACE_KIND_STRING) {
            int done;
            L8_CHECK(reader_string(r, &e, &done));
            if (!done) return L8_OK;
            continue;
        }
        if (e.kind == 0 || e.kind >= TRACE_KIND_FIRST_RESERVED)
            return L8_FAIL(L8_ERR_INVALID_ARG, "trace file '%s' is corrupt at offset %llu: "
                           "record kind 0x%04x is not an event kind", r->path,
                           (unsigned long long)r->off, e.kind);
        if (e.tag > r->nnames) return corrupt(r, "tag id used before its string record", e.tag);
        if (e.device < -1) return corrupt(r, "device", e.device);
        r->off += TRACE_RECORD;
        *ev = e;
        *got = 1;
        return L8_OK;
    }
}

const char *l8_trace_reader_tag_name(l8_trace_reader *r, uint32_t id)
{
    if (!r || id == 0 || id > r->nnames) return NULL;
    return r->names[id - 1];
}
