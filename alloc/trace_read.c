/* trace_read.c - reading a trace file, also while it is written.
 *
 * The reader keeps one offset, the start of the next unread record, and a
 * 256 KiB window of the file. A short tail is a record still being written:
 * "nothing yet", retried from the same offset. String records define tags,
 * the end marker sets `ended`; neither is returned. Versions 1 and 2 are
 * read (version 1: no rank/device in the header, raw stream handles, no end
 * marker). At the end of what is written, the reader checks that the file
 * did not shrink under it (truncated or rewritten by another process).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "alloc/trace_internal.h"

#define READER_BUF_BYTES ((size_t)256 * 1024)
#define READER_STRING_MAX 4096u

static size_t round_up48(size_t n) { return (n + TRACE_RECORD - 1) / TRACE_RECORD * TRACE_RECORD; }


struct l8_trace_reader {
    int fd;
    char *path;
    uint64_t off;                 /* file offset of the next record */
    unsigned char *buf;           /* file bytes [buf_off, buf_off + buf_len) */
    uint64_t buf_off;
    size_t buf_len;
    char **names;                 /* names[id - 1] */
    uint32_t nnames, names_cap;
    trace_header h;               /* as read at open (version 1: rank -1, device ANY) */
    uint64_t dev_id, ino;         /* the file opened */
    int ended;                    /* end marker read */
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
            l8i_trace_io_error(errno, "pread", __FILE__, __LINE__, "cannot read trace file", r->path);
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
    /* O_NONBLOCK: a FIFO at path must not hang the open; the reader preads,
     * so a FIFO then fails its first read (ESPIPE). No effect on files. */
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (r->fd < 0) {
        st = l8i_trace_io_error(errno, "open", __FILE__, __LINE__, "cannot open trace file", path);
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
    if (r->buf_len >= sizeof l8i_trace_magic && memcmp(h.magic, l8i_trace_magic, sizeof l8i_trace_magic) != 0) {
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
    if (h.version != 1 && h.version != 2) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': trace format version %u; this reader "
                     "understands versions 1 and 2", path, h.version);
        goto fail;
    }
    if (h.version == 1) {          /* the field was reserved */
        h.rank = -1;
        h.device = L8_TRACE_DEVICE_ANY;
    }
    if (h.record_size != TRACE_RECORD || h.header_size < TRACE_HEADER ||
        h.header_size > READER_BUF_BYTES) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': bad trace header: record size %u (expected "
                     "%u), header size %u (expected at least %u)", path, h.record_size,
                     TRACE_RECORD, h.header_size, TRACE_HEADER);
        goto fail;
    }
    /* The writer writes the whole header before l8_trace_create returns, so
     * a file shorter than its header_size was cut, not caught mid-write. The
     * fill above read up to READER_BUF_BYTES (>= header_size) or to the end. */
    if (r->buf_len < h.header_size) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "'%s': truncated trace header (%zu of the %u bytes its "
                     "header_size says)", path, r->buf_len, h.header_size);
        goto fail;
    }
    r->off = h.header_size;
    r->h = h;
    struct stat sb;
    if (fstat(r->fd, &sb) == 0) {
        r->dev_id = (uint64_t)sb.st_dev;
        r->ino = (uint64_t)sb.st_ino;
    }
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

/* At the end of what is written: the file must not be shorter than what was
 * read. */
static l8_status check_not_shrunk(l8_trace_reader *r)
{
    struct stat sb;
    if (fstat(r->fd, &sb) != 0)
        return l8i_trace_io_error(errno, "fstat", __FILE__, __LINE__, "cannot stat trace file",
                                  r->path);
    if ((uint64_t)sb.st_size < r->off)
        return l8_error_set(L8_ERR_IO, 0, "", "fstat", __FILE__, __LINE__,
                            "trace file '%s' shrank to %lld bytes after %llu were read: it was "
                            "truncated or rewritten under the reader", r->path,
                            (long long)sb.st_size, (unsigned long long)r->off);
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
        if (!have) return check_not_shrunk(r);
        l8_trace_event e;
        memcpy(&e, r->buf + (r->off - r->buf_off), sizeof e);
        if (e.kind == TRACE_KIND_STRING) {
            int done;
            L8_CHECK(reader_string(r, &e, &done));
            if (!done) return L8_OK;
            continue;
        }
        if (e.kind == TRACE_KIND_END && r->h.version >= 2) {
            r->ended = 1;
            r->off += TRACE_RECORD;
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

l8_status l8_trace_reader_info(l8_trace_reader *r, l8_trace_file_info *out)
{
    L8_ARG(r != NULL && out != NULL);
    L8_ARG(out->size >= offsetof(l8_trace_file_info, shrunk) + sizeof out->shrunk);
    size_t size = out->size;
    memset(out, 0, size);
    out->size = size;
    int32_t rank = r->h.rank;
    if (r->h.version >= 2 && pread(r->fd, &rank, sizeof rank, TRACE_HDR_RANK_OFF) != sizeof rank)
        rank = r->h.rank;                       /* set after creation: re-read */
    out->version = r->h.version;
    out->pid = r->h.pid;
    out->rank = rank;
    out->device = r->h.device;
    out->start_realtime_ns = r->h.start_realtime_ns;
    out->start_monotonic_ns = r->h.start_monotonic_ns;
    out->offset = r->off;
    out->ended = r->ended;
    struct stat sb;
    if (fstat(r->fd, &sb) != 0)
        return l8i_trace_io_error(errno, "fstat", __FILE__, __LINE__, "cannot stat trace file",
                                  r->path);
    out->file_bytes = (uint64_t)sb.st_size;
    out->shrunk = (uint64_t)sb.st_size < r->off;
    struct stat now;
    out->replaced = stat(r->path, &now) != 0 || (uint64_t)now.st_dev != r->dev_id ||
                    (uint64_t)now.st_ino != r->ino;
    return L8_OK;
}
