/* checkpoint.c - the checkpoint container: writer, reader, CRC-32C.
 *
 * File layout (docs/checkpoint-format.md is the reference):
 *
 *   [0, 128)                  header (its own CRC-32C in its last 4 bytes)
 *   [128, index_offset)       sections, each at a multiple of 64, zero-padded
 *   [index_offset, file_size) index: section_count entries of 192 bytes
 *
 * body_crc in the header is the CRC-32C of every byte after the header, so
 * the header CRC and the body CRC together cover the whole file. Each index
 * entry also carries its section's own CRC, which names the damaged section
 * when the body CRC disagrees.
 *
 * Writer invariants:
 *   - w->pos is the logical file length so far (header placeholder included),
 *     always a multiple of 64 between sections;
 *   - w->body_crc covers bytes [128, w->pos) exactly;
 *   - an entry is in w->entries only when all its bytes (padding included)
 *     went through emit(); a section that failed half way is never indexed;
 *   - after the first I/O or device failure w->failed is set and no further
 *     byte is written; only commit (which reports it) and abort remain;
 *   - path itself is touched by exactly one call: rename() in commit.
 *
 * Reader invariants: after l8_ckpt_open returns L8_OK every entry has been
 * checked (bounds, alignment, overlap, name, tensor record, CRC), so the
 * accessors only index into memory they know is valid.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/checkpoint.h"

#define CKPT_VERSION 1u
#define HDR_SIZE 128u
#define HDR_CRC_AT 124u
#define ENTRY_SIZE 192u
#define ENTRY_BYTES 0u
#define ENTRY_TENSOR 1u
#define WBUF_BYTES ((size_t)1 << 20)      /* coalesces small writes */
#define BOUNCE_BYTES ((size_t)8 << 20)    /* device -> host chunk for tensor sections */
#define IO_CHUNK ((size_t)1 << 30)        /* read/write at most this much per call */

static const unsigned char k_magic[8] = { 'L', '8', 'C', 'K', 'P', 'T', 0, 0 };

/* The header, exactly as in the file (little-endian, no padding). */
typedef struct ckpt_header {
    unsigned char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint64_t file_size;
    uint64_t index_offset;
    uint32_t section_count;
    uint32_t entry_size;
    uint32_t user_version;
    uint32_t body_crc;
    char kind[64];
    uint64_t reserved0;
    uint32_t reserved1;
    uint32_t header_crc;
} ckpt_header;

/* One index entry, exactly as in the file. */
typedef struct ckpt_entry {
    char name[128];
    uint64_t offset;
    uint64_t length;
    uint32_t crc;
    uint32_t type;                /* ENTRY_BYTES or ENTRY_TENSOR */
    uint32_t dtype;
    uint32_t ndim;
    int64_t shape[4];
} ckpt_entry;

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the checkpoint format is little-endian; add byte swapping for this host");
_Static_assert(sizeof(ckpt_header) == HDR_SIZE, "checkpoint header must be 128 bytes");
_Static_assert(offsetof(ckpt_header, kind) == 48 && offsetof(ckpt_header, header_crc) == HDR_CRC_AT,
               "checkpoint header layout");
_Static_assert(sizeof(ckpt_entry) == ENTRY_SIZE, "checkpoint index entry must be 192 bytes");
_Static_assert(offsetof(ckpt_entry, offset) == 128 && offsetof(ckpt_entry, shape) == 160,
               "checkpoint entry layout");
_Static_assert(L8_MAX_DIMS == 4, "the index entry holds 4 dimensions");
_Static_assert(HDR_SIZE % L8_CKPT_ALIGN == 0 && ENTRY_SIZE % L8_CKPT_ALIGN == 0, "alignment");

/* ================================================================ CRC-32C */

static uint32_t g_crc_table[8][256];
static int g_crc_hw;
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        g_crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            g_crc_table[t][i] = (g_crc_table[t - 1][i] >> 8) ^ g_crc_table[0][g_crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    g_crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Slicing-by-8 on the inverted state c. */
static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = c ^ load32(p), hi = load32(p + 4);
        c = g_crc_table[7][lo & 0xFF] ^ g_crc_table[6][(lo >> 8) & 0xFF] ^
            g_crc_table[5][(lo >> 16) & 0xFF] ^ g_crc_table[4][lo >> 24] ^
            g_crc_table[3][hi & 0xFF] ^ g_crc_table[2][(hi >> 8) & 0xFF] ^
            g_crc_table[1][(hi >> 16) & 0xFF] ^ g_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = g_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
/* The SSE4.2 crc32 instruction computes exactly CRC-32C. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

uint32_t l8_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&g_crc_once, crc_init);
    if (n == 0) return crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (g_crc_hw) return ~crc_hw(~crc, p, n);
#endif
    return ~crc_sw(~crc, p, n);
}

/* The table path whatever the CPU has; the tests compare both. Not in the
 * public header on purpose. */
uint32_t l8i_crc32c_portable(uint32_t crc, const void *p, size_t n);
uint32_t l8i_crc32c_portable(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&g_crc_once, crc_init);
    return n ? ~crc_sw(~crc, p, n) : crc;
}

/* ================================================================ helpers */

static l8_status io_error(int e, const char *call, int line, const char *what, const char *path)
{
    char buf[128];
    const char *msg = strerror_r(e, buf, sizeof buf);   /* GNU form: returns the string */
    return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), call, __FILE__, line, "%s '%s': %s", what,
                        path, msg);
}

static uint64_t align_up(uint64_t n) { return (n + L8_CKPT_ALIGN - 1) / L8_CKPT_ALIGN * L8_CKPT_ALIGN; }

/* 1 when s is 1..max bytes of printable ASCII. */
static int printable(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= max || (unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7E) return 0;
    return n > 0;
}

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;                 /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Open-addressing set of entry indices (stored +1; 0 = empty), keyed by name.
 * Capacity a power of two, kept at most half full. */
typedef struct name_table {
    uint32_t *slots;
    size_t cap;
} name_table;

static const ckpt_entry *table_find(const name_table *t, const ckpt_entry *entries, const char *name,
                                    size_t *idx)
{
    if (!t->cap) return NULL;
    for (size_t j = hash_name(name) & (t->cap - 1); t->slots[j]; j = (j + 1) & (t->cap - 1)) {
        const ckpt_entry *e = &entries[t->slots[j] - 1];
        if (!strcmp(e->name, name)) {
            if (idx) *idx = t->slots[j] - 1;
            return e;
        }
    }
    return NULL;
}

/* Make room for n entries. 0 or -1 (no memory). */
static int table_reserve(name_table *t, const ckpt_entry *entries, size_t n)
{
    if (n * 2 <= t->cap) return 0;
    size_t ncap = t->cap ? t->cap : 64;
    while (ncap < n * 2) ncap *= 2;
    uint32_t *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        uint32_t id = t->slots[i];
        if (!id) continue;
        size_t j = hash_name(entries[id - 1].name) & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = id;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

/* Insert entry i (room reserved, name not present). */
static void table_insert(name_table *t, const ckpt_entry *entries, size_t i)
{
    size_t j = hash_name(entries[i].name) & (t->cap - 1);
    while (t->slots[j]) j = (j + 1) & (t->cap - 1);
    t->slots[j] = (uint32_t)(i + 1);
}

static l8_status check_name(const char *fn, const char *name)
{
    if (!name) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section name is NULL", fn);
    if (!printable(name, L8_CKPT_NAME_MAX))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section name '%.*s%s' must be 1 to %d printable"
                       " ASCII characters", fn, 160, name, strlen(name) > 160 ? "..." : "",
                       L8_CKPT_NAME_MAX);
    return L8_OK;
}

/* "[2, 3]" (or "[]" for a scalar) into a caller buffer. */
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* ================================================================ writer */

struct l8_ckpt_writer {
    char *path, *tmp, *dir;
    int fd;
    int created;                  /* the temporary file exists and is ours to remove */
    ckpt_header hdr;              /* kind and user_version filled at open */
    uint64_t pos;                 /* logical file length so far */
    uint32_t body_crc;
    unsigned char *wbuf;
    size_t wlen;
    ckpt_entry *entries;
    size_t n, cap;
    name_table names;
    unsigned char *bounce;        /* device -> host chunks; grows up to BOUNCE_BYTES */
    size_t bounce_cap;
    l8_status failed;             /* L8_OK, or the status of the first failed write */
    char fail_msg[512];
};

static atomic_uint g_tmp_seq;

/* Write all of p at the file's current position. 0 or an errno. */
static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n < IO_CHUNK ? n : IO_CHUNK);
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (k == 0) return EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Mark the writer failed with the error just recorded, and return it. */
static l8_status fail_writer(l8_ckpt_writer *w, l8_status st)
{
    w->failed = st;
    snprintf(w->fail_msg, sizeof w->fail_msg, "%s", l8_last_error_string());
    return st;
}

static l8_status check_writer(const char *fn, l8_ckpt_writer *w)
{
    if (!w) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: writer is NULL", fn);
    if (w->failed)
        return L8_FAIL(L8_ERR_STATE, "%s: the checkpoint writer for '%s' cannot go on: an earlier"
                       " write failed (%s); abort it, the previous checkpoint is untouched",
                       fn, w->path, w->fail_msg);
    return L8_OK;
}

static l8_status flush_wbuf(l8_ckpt_writer *w)
{
    if (w->wlen == 0) return L8_OK;
    int e = write_all(w->fd, w->wbuf, w->wlen);
    w->wlen = 0;
    if (e) return fail_writer(w, io_error(e, "write", __LINE__, "cannot write checkpoint temporary file", w->tmp));
    return L8_OK;
}

/* Append n bytes of the body; updates the body CRC and *sec_crc if given. */
static l8_status emit(l8_ckpt_writer *w, const void *p, size_t n, uint32_t *sec_crc)
{
    if (n == 0) return L8_OK;
    w->body_crc = l8_crc32c(w->body_crc, p, n);
    if (sec_crc) *sec_crc = l8_crc32c(*sec_crc, p, n);
    w->pos += n;
    if (n <= WBUF_BYTES - w->wlen) {
        memcpy(w->wbuf + w->wlen, p, n);
        w->wlen += n;
        return L8_OK;
    }
    L8_CHECK(flush_wbuf(w));
    if (n < WBUF_BYTES) {
        memcpy(w->wbuf, p, n);
        w->wlen = n;
        return L8_OK;
    }
    int e = write_all(w->fd, p, n);
    if (e) return fail_writer(w, io_error(e, "write", __LINE__, "cannot write checkpoint temporary file", w->tmp));
    return L8_OK;
}

/* Zero padding up to the next multiple of 64. */
static l8_status emit_pad(l8_ckpt_writer *w)
{
    static const unsigned char zeros[L8_CKPT_ALIGN];
    return emit(w, zeros, (size_t)(align_up(w->pos) - w->pos), NULL);
}

l8_status l8_ckpt_writer_open(const char *path, const char *kind, uint32_t user_version,
                              l8_ckpt_writer **out)
{
    const char *fn = "l8_ckpt_writer_open";
    L8_ARG(out != NULL);
    *out = NULL;
    if (!path || !path[0]) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: path is NULL or empty", fn);
    size_t plen = strlen(path);
    if (plen > PATH_MAX - 48 || path[plen - 1] == '/')
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: path '%.200s' is too long or names a directory", fn, path);
    if (!kind || !printable(kind, L8_CKPT_KIND_MAX))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: kind '%.100s' must be 1 to %d printable ASCII"
                       " characters", fn, kind ? kind : "(null)", L8_CKPT_KIND_MAX);

    l8_status ret = L8_OK;
    l8_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return L8_FAIL(L8_ERR_OOM, "%s: no host memory for the writer", fn);
    w->fd = -1;
    w->path = strdup(path);
    w->tmp = malloc(plen + 48);
    w->dir = strdup(path);
    w->wbuf = malloc(WBUF_BYTES);
    if (!w->path || !w->tmp || !w->dir || !w->wbuf) {
        ret = L8_FAIL(L8_ERR_OOM, "%s: no host memory for the writer of '%s'", fn, path);
        goto fail;
    }
    char *slash = strrchr(w->dir, '/');
    if (!slash) strcpy(w->dir, ".");
    else if (slash == w->dir) w->dir[1] = '\0';
    else *slash = '\0';
    snprintf(w->tmp, plen + 48, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&g_tmp_seq, 1u));
    /* O_TRUNC, not O_EXCL: a stale temporary of a crashed run that had the
     * same pid (containers reuse small pids) must not block saving. */
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (w->fd < 0) {
        ret = io_error(errno, "open", __LINE__, "cannot create checkpoint temporary file", w->tmp);
        goto fail;
    }
    w->created = 1;
    memcpy(w->hdr.magic, k_magic, sizeof k_magic);
    w->hdr.version = CKPT_VERSION;
    w->hdr.header_size = HDR_SIZE;
    w->hdr.entry_size = ENTRY_SIZE;
    w->hdr.user_version = user_version;
    memcpy(w->hdr.kind, kind, strlen(kind));
    /* Placeholder header: the real one is written at commit. */
    memset(w->wbuf, 0, HDR_SIZE);
    w->wlen = HDR_SIZE;
    w->pos = HDR_SIZE;
    *out = w;
    return L8_OK;
fail:
    l8_ckpt_writer_abort(w);
    return ret;
}

const char *l8_ckpt_writer_temp_path(const l8_ckpt_writer *w) { return w ? w->tmp : ""; }

/* Check the name and make room for one more entry; nothing is written. */
static l8_status begin_section(const char *fn, l8_ckpt_writer *w, const char *name)
{
    L8_CHECK(check_writer(fn, w));
    L8_CHECK(check_name(fn, name));
    if (table_find(&w->names, w->entries, name, NULL))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint '%s' already has a section named '%s'",
                       fn, w->path, name);
    if (w->n >= UINT32_MAX - 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint '%s' cannot hold more than %u sections",
                       fn, w->path, UINT32_MAX - 1);
    if (w->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 16;
        ckpt_entry *ne = realloc(w->entries, ncap * sizeof *ne);
        if (!ne) return L8_FAIL(L8_ERR_OOM, "%s: no host memory for the checkpoint index", fn);
        w->entries = ne;
        w->cap = ncap;
    }
    if (table_reserve(&w->names, w->entries, w->n + 1) != 0)
        return L8_FAIL(L8_ERR_OOM, "%s: no host memory for the checkpoint index", fn);
    ckpt_entry *e = &w->entries[w->n];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, strlen(name));
    e->offset = w->pos;
    return L8_OK;
}

/* The section's bytes went out: pad it and index it. */
static l8_status end_section(l8_ckpt_writer *w, uint32_t crc)
{
    ckpt_entry *e = &w->entries[w->n];
    e->length = w->pos - e->offset;
    e->crc = crc;
    L8_CHECK(emit_pad(w));
    table_insert(&w->names, w->entries, w->n);
    w->n++;
    return L8_OK;
}

l8_status l8_ckpt_write_section(l8_ckpt_writer *w, const char *name, const void *bytes, size_t n)
{
    const char *fn = "l8_ckpt_write_section";
    L8_CHECK(begin_section(fn, w, name));
    if (n && !bytes)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section '%s': bytes is NULL for %zu bytes", fn, name, n);
    uint32_t crc = 0;
    L8_CHECK(emit(w, bytes, n, &crc));
    return end_section(w, crc);
}

l8_status l8_ckpt_write_tensor(l8_ckpt_writer *w, const char *name, const l8_tensor *t)
{
    const char *fn = "l8_ckpt_write_tensor";
    L8_CHECK(begin_section(fn, w, name));
    if (!t) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section '%s': tensor is NULL", fn, name);
    size_t nbytes = l8_tensor_nbytes(t);
    size_t want = nbytes < BOUNCE_BYTES ? nbytes : BOUNCE_BYTES;
    if (want > w->bounce_cap) {
        unsigned char *nb = realloc(w->bounce, want);
        if (!nb) return L8_FAIL(L8_ERR_OOM, "%s: no host memory for a %zu-byte bounce buffer", fn, want);
        w->bounce = nb;
        w->bounce_cap = want;
    }
    l8_status ret = L8_OK;
    l8_tensor *c = NULL;
    const l8_tensor *src = t;
    l8_stream *s = l8_ctx_stream(l8_tensor_ctx(t), L8_STREAM_COMPUTE);
    void *base = NULL;
    /* Everything that can fail before the first byte goes out does so
     * without failing the writer. */
    if (nbytes && !l8_tensor_is_contiguous(t)) {
        L8_TRY(ret, l8_tensor_contiguous(t, s, &c), out);
        src = c;
    }
    if (nbytes) L8_TRY(ret, l8_tensor_data(src, &base), out);

    ckpt_entry *e = &w->entries[w->n];
    e->type = ENTRY_TENSOR;
    e->dtype = (uint32_t)l8_tensor_dtype(t);
    e->ndim = (uint32_t)l8_tensor_ndim(t);
    for (int d = 0; d < l8_tensor_ndim(t); d++) e->shape[d] = l8_tensor_dim(t, d);
    uint32_t crc = 0;
    for (size_t off = 0; off < nbytes; off += BOUNCE_BYTES) {
        size_t len = nbytes - off < BOUNCE_BYTES ? nbytes - off : BOUNCE_BYTES;
        /* (len) bytes of the row-major elements */
        ret = l8_memcpy_dtoh(s, w->bounce, (const unsigned char *)base + off, len);
        if (ret == L8_OK) ret = l8_stream_synchronize(s);
        if (ret != L8_OK) { fail_writer(w, ret); goto out; }
        L8_TRY(ret, emit(w, w->bounce, len, &crc), out);
    }
    L8_TRY(ret, end_section(w, crc), out);
out:
    if (c) {
        /* The copy was made on s; wait so the block is idle when freed. */
        l8_status st2 = l8_stream_synchronize(s);
        if (ret == L8_OK && st2 != L8_OK) ret = fail_writer(w, st2);
        l8_tensor_destroy(c);
    }
    return ret;
}

/* fsync the directory holding the checkpoint so the rename is durable.
 * EINVAL: the filesystem does not support it (nothing more can be done). */
static l8_status sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error(errno, "open", __LINE__, "cannot open checkpoint directory", dir);
    l8_status st = L8_OK;
    if (fsync(fd) != 0 && errno != EINVAL)
        st = io_error(errno, "fsync", __LINE__, "cannot sync checkpoint directory", dir);
    close(fd);
    return st;
}

l8_status l8_ckpt_writer_commit(l8_ckpt_writer *w)
{
    const char *fn = "l8_ckpt_writer_commit";
    if (!w) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: writer is NULL", fn);
    l8_status ret = L8_OK;
    L8_TRY(ret, check_writer(fn, w), discard);
    uint64_t index_offset = w->pos;           /* a multiple of 64: every section is padded */
    for (size_t i = 0; i < w->n; i++) L8_TRY(ret, emit(w, &w->entries[i], ENTRY_SIZE, NULL), discard);
    L8_TRY(ret, flush_wbuf(w), discard);

    ckpt_header *h = &w->hdr;
    h->file_size = w->pos;
    h->index_offset = index_offset;
    h->section_count = (uint32_t)w->n;
    h->body_crc = w->body_crc;
    h->header_crc = l8_crc32c(0, h, HDR_CRC_AT);
    ssize_t k;
    do k = pwrite(w->fd, h, HDR_SIZE, 0); while (k < 0 && errno == EINTR);
    if (k != (ssize_t)HDR_SIZE) {
        ret = io_error(k < 0 ? errno : EIO, "pwrite", __LINE__, "cannot write checkpoint header to", w->tmp);
        goto discard;
    }
    if (fsync(w->fd) != 0) {
        ret = io_error(errno, "fsync", __LINE__, "cannot sync checkpoint temporary file", w->tmp);
        goto discard;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        ret = io_error(errno, "close", __LINE__, "cannot close checkpoint temporary file", w->tmp);
        goto discard;
    }
    if (rename(w->tmp, w->path) != 0) {
        ret = io_error(errno, "rename", __LINE__, "cannot move the new checkpoint into place at", w->path);
        goto discard;
    }
    ret = sync_dir(w->dir);
    w->created = 0;                           /* renamed: nothing to remove */
    l8_ckpt_writer_abort(w);
    return ret;
discard:
    l8_ckpt_writer_abort(w);
    return ret;
}

void l8_ckpt_writer_abort(l8_ckpt_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->created) unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w->dir);
    free(w->wbuf);
    free(w->bounce);
    free(w->entries);
    free(w->names.slots);
    free(w);
}

/* ================================================================ reader */

struct l8_ckpt_reader {
    char *path;
    unsigned char *buf;           /* the whole file, 64-B aligned */
    size_t size;
    ckpt_header hdr;
    const ckpt_entry *entries;    /* in buf, at hdr.index_offset */
    size_t n;
    name_table names;
};

/* L8_ERR_INVALID_ARG "checkpoint '<path>' <sentence>". */
static l8_status bad_file(int line, const char *path, const char *fmt, ...) L8_PRINTF(3, 4);
static l8_status bad_file(int line, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return l8_error_set(L8_ERR_INVALID_ARG, 0, "", "l8_ckpt_open", __FILE__, line,
                        "checkpoint '%s' %s", path, msg);
}
#define BAD(...) bad_file(__LINE__, __VA_ARGS__)

/* Check the first min(size, 128) bytes b of a file of `size` bytes. */
static l8_status check_header(const char *path, const unsigned char *b, uint64_t size, ckpt_header *h)
{
    if (size == 0) return BAD(path, "is empty (0 bytes): not a lean8 checkpoint");
    size_t have = size < sizeof k_magic ? (size_t)size : sizeof k_magic;
    if (memcmp(b, k_magic, have) != 0)
        return BAD(path, "is not a lean8 checkpoint: its first bytes are not the magic \"L8CKPT\"");
    if (size < HDR_SIZE)
        return BAD(path, "is truncated: %" PRIu64 " bytes, shorter than the %u-byte header", size, HDR_SIZE);
    memcpy(h, b, HDR_SIZE);
    if (h->version != CKPT_VERSION)
        return l8_error_set(L8_ERR_UNSUPPORTED, 0, "", "l8_ckpt_open", __FILE__, __LINE__,
                            "checkpoint '%s' has format version %u; this lean8 reads version %u",
                            path, h->version, CKPT_VERSION);
    uint32_t crc = l8_crc32c(0, b, HDR_CRC_AT);
    if (h->header_crc != crc)
        return BAD(path, "is corrupt: the header checksum does not match (stored 0x%08x, computed"
                   " 0x%08x)", h->header_crc, crc);
    if (h->header_size != HDR_SIZE || h->entry_size != ENTRY_SIZE || h->reserved0 || h->reserved1)
        return BAD(path, "is malformed: header size %u, entry size %u, reserved fields %" PRIu64
                   "/%u (version 1 has 128, 192, 0/0)", h->header_size, h->entry_size,
                   h->reserved0, h->reserved1);
    const char *nul = memchr(h->kind, 0, sizeof h->kind);
    if (!nul || !printable(h->kind, L8_CKPT_KIND_MAX))
        return BAD(path, "is malformed: its kind is not 1 to %d printable characters", L8_CKPT_KIND_MAX);
    for (const char *p = nul; p < h->kind + sizeof h->kind; p++)
        if (*p) return BAD(path, "is malformed: bytes after the kind string are not zero");
    if (h->file_size != size) {
        if (size < h->file_size)
            return BAD(path, "is truncated: its header says %" PRIu64 " bytes, the file has %" PRIu64,
                       h->file_size, size);
        return BAD(path, "has %" PRIu64 " unexpected bytes after its end (the header says %" PRIu64
                   " bytes, the file has %" PRIu64 ")", size - h->file_size, h->file_size, size);
    }
    uint64_t index_bytes = (uint64_t)h->section_count * ENTRY_SIZE;
    if (h->index_offset < HDR_SIZE || h->index_offset % L8_CKPT_ALIGN ||
        h->index_offset > h->file_size || h->file_size - h->index_offset != index_bytes)
        return BAD(path, "is malformed: an index of %u entries at offset %" PRIu64 " does not end"
                   " the %" PRIu64 "-byte file", h->section_count, h->index_offset, h->file_size);
    return L8_OK;
}

/* Read exactly n bytes at offset 0. 0, an errno, or -1 (the file is shorter). */
static int read_exact(int fd, unsigned char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < IO_CHUNK ? n - got : IO_CHUNK;
        ssize_t k = pread(fd, p + got, want, (off_t)got);
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (k == 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Entry i's name as text for a message (it may not be valid yet). */
static void entry_label(const ckpt_entry *e, size_t i, char *buf, size_t cap)
{
    if (memchr(e->name, 0, sizeof e->name) && printable(e->name, L8_CKPT_NAME_MAX))
        snprintf(buf, cap, "section '%s'", e->name);
    else
        snprintf(buf, cap, "section #%zu (its name is damaged)", i);
}

static int entry_in_bounds(const ckpt_entry *e, uint64_t index_offset)
{
    return e->offset >= HDR_SIZE && e->offset <= index_offset && e->length <= index_offset - e->offset;
}

/* The body CRC disagrees: say where, as far as the index can tell. */
static l8_status locate_damage(const l8_ckpt_reader *r, uint32_t stored, uint32_t computed)
{
    char label[192];
    for (size_t i = 0; i < r->n; i++) {
        const ckpt_entry *e = &r->entries[i];
        if (!entry_in_bounds(e, r->hdr.index_offset)) continue;
        uint32_t c = l8_crc32c(0, r->buf + e->offset, (size_t)e->length);
        if (c != e->crc) {
            entry_label(e, i, label, sizeof label);
            return BAD(r->path, "is corrupt: the checksum does not match (stored 0x%08x, computed"
                       " 0x%08x); %s is damaged", stored, computed, label);
        }
    }
    return BAD(r->path, "is corrupt: the checksum does not match (stored 0x%08x, computed 0x%08x);"
               " the damage is in the index or the padding", stored, computed);
}

typedef struct span { uint64_t off, end; size_t i; } span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Every entry well formed, in bounds, not overlapping, uniquely named. */
static l8_status check_entries(l8_ckpt_reader *r)
{
    const char *path = r->path;
    char label[192];
    l8_status ret = L8_OK;
    span *spans = NULL;
    if (r->n && table_reserve(&r->names, r->entries, r->n) != 0) goto oom;
    spans = malloc((r->n ? r->n : 1) * sizeof *spans);
    if (!spans) goto oom;
    for (size_t i = 0; i < r->n; i++) {
        const ckpt_entry *e = &r->entries[i];
        entry_label(e, i, label, sizeof label);
        const char *nul = memchr(e->name, 0, sizeof e->name);
        if (!nul || !printable(e->name, L8_CKPT_NAME_MAX)) {
            ret = BAD(path, "is malformed: %s", label);
            goto out;
        }
        for (const char *p = nul; p < e->name + sizeof e->name; p++)
            if (*p) { ret = BAD(path, "is malformed: %s has non-zero bytes after its name", label); goto out; }
        if (e->offset % L8_CKPT_ALIGN || !entry_in_bounds(e, r->hdr.index_offset)) {
            ret = BAD(path, "is malformed: %s at offset %" PRIu64 " with %" PRIu64 " bytes is not"
                      " 64-B aligned inside [%u, %" PRIu64 ")", label, e->offset, e->length,
                      HDR_SIZE, r->hdr.index_offset);
            goto out;
        }
        if (e->type == ENTRY_BYTES) {
            int extra = e->dtype || e->ndim;
            for (int d = 0; d < 4; d++) extra |= e->shape[d] != 0;
            if (extra) { ret = BAD(path, "is malformed: byte %s has tensor fields set", label); goto out; }
        } else if (e->type == ENTRY_TENSOR) {
            size_t es = e->dtype < L8_DTYPE_COUNT ? l8_dtype_size((l8_dtype)e->dtype) : 0;
            int okay = es && e->ndim <= L8_MAX_DIMS;
            uint64_t bytes = es;
            for (uint32_t d = 0; okay && d < 4; d++) {
                if (d >= e->ndim) { okay = e->shape[d] == 0; continue; }
                if (e->shape[d] < 0) { okay = 0; break; }
                if (e->shape[d] == 0) bytes = 0;
                else if (bytes && (uint64_t)e->shape[d] > UINT64_MAX / bytes) okay = 0;
                else bytes *= (uint64_t)e->shape[d];
            }
            if (!okay || bytes != e->length) {
                ret = BAD(path, "is malformed: tensor %s (dtype %u, %u dims) does not match its"
                          " %" PRIu64 " bytes", label, e->dtype, e->ndim, e->length);
                goto out;
            }
        } else {
            ret = BAD(path, "is malformed: %s has unknown type %u", label, e->type);
            goto out;
        }
        uint32_t c = l8_crc32c(0, r->buf + e->offset, (size_t)e->length);
        if (c != e->crc) {
            ret = BAD(path, "is corrupt: %s has checksum 0x%08x, the index says 0x%08x", label, c, e->crc);
            goto out;
        }
        if (table_find(&r->names, r->entries, e->name, NULL)) {
            ret = BAD(path, "is malformed: two sections are named '%s'", e->name);
            goto out;
        }
        table_insert(&r->names, r->entries, i);
        spans[i] = (span){ e->offset, e->offset + e->length, i };
    }
    qsort(spans, r->n, sizeof *spans, span_cmp);
    for (size_t k = 1; k < r->n; k++)
        if (spans[k].off < spans[k - 1].end) {
            ret = BAD(path, "is malformed: sections '%s' and '%s' overlap",
                      r->entries[spans[k - 1].i].name, r->entries[spans[k].i].name);
            goto out;
        }
out:
    free(spans);
    return ret;
oom:
    free(spans);
    return l8_error_set(L8_ERR_OOM, 0, "", "l8_ckpt_open", __FILE__, __LINE__,
                        "no host memory to index the %zu sections of checkpoint '%s'", r->n, path);
}

l8_status l8_ckpt_open(const char *path, l8_ckpt_reader **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(path != NULL);
    l8_status ret = L8_OK;
    l8_ckpt_reader *r = NULL;
    /* O_NONBLOCK: a FIFO at path must not hang the open (refused below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return io_error(errno, "open", __LINE__, "cannot open checkpoint", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ret = io_error(errno, "fstat", __LINE__, "cannot stat checkpoint", path);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        ret = BAD(path, "is not a regular file");
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char head[HDR_SIZE];
    size_t head_n = size < HDR_SIZE ? (size_t)size : HDR_SIZE;
    int e = read_exact(fd, head, head_n);
    if (e > 0) { ret = io_error(e, "pread", __LINE__, "cannot read checkpoint", path); goto fail; }
    if (e < 0) { ret = BAD(path, "shrank while it was read"); goto fail; }
    ckpt_header h;
    L8_TRY(ret, check_header(path, head, size, &h), fail);
    if (size > SIZE_MAX - L8_CKPT_ALIGN) {
        ret = BAD(path, "is too large for this machine's address space");
        goto fail;
    }

    r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) goto oom;
    r->hdr = h;
    r->size = (size_t)size;
    if (posix_memalign((void **)&r->buf, L8_CKPT_ALIGN, r->size) != 0) { r->buf = NULL; goto oom; }
    e = read_exact(fd, r->buf, r->size);
    if (e > 0) { ret = io_error(e, "pread", __LINE__, "cannot read checkpoint", path); goto fail; }
    if (e < 0 || memcmp(r->buf, head, HDR_SIZE) != 0) {
        ret = BAD(path, "changed while it was read");
        goto fail;
    }
    r->entries = (const ckpt_entry *)(r->buf + h.index_offset);   /* 64-B aligned */
    r->n = h.section_count;
    uint32_t body = l8_crc32c(0, r->buf + HDR_SIZE, r->size - HDR_SIZE);
    if (body != h.body_crc) { ret = locate_damage(r, h.body_crc, body); goto fail; }
    L8_TRY(ret, check_entries(r), fail);
    close(fd);
    *out = r;
    return L8_OK;
oom:
    ret = l8_error_set(L8_ERR_OOM, 0, "", "l8_ckpt_open", __FILE__, __LINE__,
                       "no host memory to read the %" PRIu64 "-byte checkpoint '%s'", size, path);
fail:
    close(fd);
    l8_ckpt_close(r);
    return ret;
}

void l8_ckpt_close(l8_ckpt_reader *r)
{
    if (!r) return;
    free(r->path);
    free(r->buf);
    free(r->names.slots);
    free(r);
}

const char *l8_ckpt_kind(const l8_ckpt_reader *r) { return r ? r->hdr.kind : ""; }
uint32_t l8_ckpt_user_version(const l8_ckpt_reader *r) { return r ? r->hdr.user_version : 0; }
const char *l8_ckpt_path(const l8_ckpt_reader *r) { return r ? r->path : ""; }
size_t l8_ckpt_section_count(const l8_ckpt_reader *r) { return r ? r->n : 0; }

l8_status l8_ckpt_expect(const l8_ckpt_reader *r, const char *kind, uint32_t user_version)
{
    L8_ARG(r != NULL && kind != NULL);
    if (strcmp(r->hdr.kind, kind) != 0 || r->hdr.user_version != user_version)
        return L8_FAIL(L8_ERR_INVALID_ARG, "checkpoint '%s' holds '%s' version %u, but '%s' version"
                       " %u is expected: it was written for another model or configuration",
                       r->path, r->hdr.kind, r->hdr.user_version, kind, user_version);
    return L8_OK;
}

static void fill_info(const ckpt_entry *e, l8_ckpt_section_info *info)
{
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->bytes = (size_t)e->length;
    info->is_tensor = e->type == ENTRY_TENSOR;
    info->dtype = (l8_dtype)e->dtype;
    info->ndim = (int)e->ndim;
    for (int d = 0; d < L8_MAX_DIMS; d++) info->shape[d] = e->shape[d];
}

l8_status l8_ckpt_section_at(const l8_ckpt_reader *r, size_t i, l8_ckpt_section_info *info)
{
    L8_ARG(r != NULL && info != NULL);
    if (i >= r->n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ckpt_section_at: index %zu, but checkpoint '%s' has"
                       " %zu sections", i, r->path, r->n);
    fill_info(&r->entries[i], info);
    return L8_OK;
}

int l8_ckpt_has(const l8_ckpt_reader *r, const char *name)
{
    return r && name && table_find(&r->names, r->entries, name, NULL) != NULL;
}

/* The entry called name, or L8_ERR_INVALID_ARG naming what is missing. */
static l8_status lookup(const char *fn, const l8_ckpt_reader *r, const char *name, const ckpt_entry **e)
{
    if (!r || !name) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: reader or section name is NULL", fn);
    *e = table_find(&r->names, r->entries, name, NULL);
    if (!*e)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: checkpoint '%s' (kind '%s') has no section '%.200s'",
                       fn, r->path, r->hdr.kind, name);
    return L8_OK;
}

l8_status l8_ckpt_find(const l8_ckpt_reader *r, const char *name, l8_ckpt_section_info *info)
{
    L8_ARG(info != NULL);
    const ckpt_entry *e;
    L8_CHECK(lookup("l8_ckpt_find", r, name, &e));
    fill_info(e, info);
    return L8_OK;
}

l8_status l8_ckpt_section(const l8_ckpt_reader *r, const char *name, const void **ptr, size_t *n)
{
    L8_ARG(ptr != NULL && n != NULL);
    const ckpt_entry *e;
    L8_CHECK(lookup("l8_ckpt_section", r, name, &e));
    *ptr = e->length ? r->buf + e->offset : NULL;
    *n = (size_t)e->length;
    return L8_OK;
}

l8_status l8_ckpt_read_section_into(const l8_ckpt_reader *r, const char *name, void *buf, size_t n)
{
    const char *fn = "l8_ckpt_read_section_into";
    const ckpt_entry *e;
    L8_CHECK(lookup(fn, r, name, &e));
    if (e->length != n)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section '%s' of checkpoint '%s' holds %" PRIu64
                       " bytes, the destination %zu", fn, name, r->path, e->length, n);
    if (n && !buf) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: buf is NULL for %zu bytes", fn, n);
    if (n) memcpy(buf, r->buf + e->offset, n);
    return L8_OK;
}

static l8_status check_tensor(const char *fn, const l8_ckpt_reader *r, const char *name,
                              const l8_tensor *dst, const ckpt_entry **out)
{
    const ckpt_entry *e;
    L8_CHECK(lookup(fn, r, name, &e));
    if (!dst) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: destination tensor is NULL", fn);
    if (e->type != ENTRY_TENSOR)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section '%s' of checkpoint '%s' holds %" PRIu64
                       " raw bytes, not a tensor", fn, name, r->path, e->length);
    int nd = l8_tensor_ndim(dst);
    int64_t shape[L8_MAX_DIMS] = { 0 };
    for (int d = 0; d < nd; d++) shape[d] = l8_tensor_dim(dst, d);
    int same = l8_tensor_dtype(dst) == (l8_dtype)e->dtype && nd == (int)e->ndim;
    for (int d = 0; same && d < nd; d++) same = shape[d] == e->shape[d];
    if (!same) {
        char want[96], have[96];
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section '%s' of checkpoint '%s' holds a %s tensor of"
                       " shape %s, but the destination is a %s tensor of shape %s", fn, name, r->path,
                       l8_dtype_name((l8_dtype)e->dtype),
                       fmt_shape(have, sizeof have, (int)e->ndim, e->shape),
                       l8_dtype_name(l8_tensor_dtype(dst)), fmt_shape(want, sizeof want, nd, shape));
    }
    *out = e;
    return L8_OK;
}

l8_status l8_ckpt_check_tensor(const l8_ckpt_reader *r, const char *name, const l8_tensor *dst)
{
    const ckpt_entry *e;
    return check_tensor("l8_ckpt_check_tensor", r, name, dst, &e);
}

l8_status l8_ckpt_read_tensor(const l8_ckpt_reader *r, const char *name, l8_tensor *dst)
{
    const char *fn = "l8_ckpt_read_tensor";
    const ckpt_entry *e;
    L8_CHECK(check_tensor(fn, r, name, dst, &e));
    if (e->length == 0) return L8_OK;
    l8_ctx *ctx = l8_tensor_ctx(dst);
    l8_stream *s = l8_ctx_stream(ctx, L8_STREAM_COMPUTE);
    const void *src = r->buf + e->offset;   /* (shape) dtype, row-major */
    l8_status ret = L8_OK;
    l8_tensor *tmp = NULL;
    if (l8_tensor_is_contiguous(dst)) {
        L8_TRY(ret, l8_tensor_copy_from_host(dst, src, (size_t)e->length, s), out);
    } else {
        /* Through a contiguous tensor: host -> device, then a strided copy. */
        L8_TRY(ret, l8_tensor_empty(ctx, (l8_dtype)e->dtype, (int)e->ndim, e->shape, &tmp), out);
        L8_TRY(ret, l8_tensor_copy_from_host(tmp, src, (size_t)e->length, s), out);
        L8_TRY(ret, l8_tensor_copy(dst, tmp, s), out);
    }
out:;
    /* Wait so the caller may close the reader (the source) and free tmp. */
    l8_status st2 = l8_stream_synchronize(s);
    if (ret == L8_OK) ret = st2;
    l8_tensor_destroy(tmp);
    return ret;
}
