/* ckpt_write.c - the checkpoint writer: sections into a temporary file,
 * then fsync and rename (the invariants are in checkpoint.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/ckpt_internal.h"

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
    if (e) return fail_writer(w, l8i_ckpt_io_error(e, "write", __LINE__, "cannot write checkpoint temporary file", w->tmp));
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
    if (e) return fail_writer(w, l8i_ckpt_io_error(e, "write", __LINE__, "cannot write checkpoint temporary file", w->tmp));
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
    if (!kind || !l8i_ckpt_printable(kind, L8_CKPT_KIND_MAX))
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
        ret = l8i_ckpt_io_error(errno, "open", __LINE__, "cannot create checkpoint temporary file", w->tmp);
        goto fail;
    }
    w->created = 1;
    memcpy(w->hdr.magic, l8i_ckpt_magic, sizeof l8i_ckpt_magic);
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
    L8_CHECK(l8i_ckpt_check_name(fn, name));
    if (l8i_ckpt_table_find(&w->names, w->entries, name, NULL))
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
    if (l8i_ckpt_table_reserve(&w->names, w->entries, w->n + 1) != 0)
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
    l8i_ckpt_table_insert(&w->names, w->entries, w->n);
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
    if (fd < 0) return l8i_ckpt_io_error(errno, "open", __LINE__, "cannot open checkpoint directory", dir);
    l8_status st = L8_OK;
    if (fsync(fd) != 0 && errno != EINVAL)
        st = l8i_ckpt_io_error(errno, "fsync", __LINE__, "cannot sync checkpoint directory", dir);
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
        ret = l8i_ckpt_io_error(k < 0 ? errno : EIO, "pwrite", __LINE__, "cannot write checkpoint header to", w->tmp);
        goto discard;
    }
    if (fsync(w->fd) != 0) {
        ret = l8i_ckpt_io_error(errno, "fsync", __LINE__, "cannot sync checkpoint temporary file", w->tmp);
        goto discard;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        ret = l8i_ckpt_io_error(errno, "close", __LINE__, "cannot close checkpoint temporary file", w->tmp);
        goto discard;
    }
    if (rename(w->tmp, w->path) != 0) {
        ret = l8i_ckpt_io_error(errno, "rename", __LINE__, "cannot move the new checkpoint into place at", w->path);
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
