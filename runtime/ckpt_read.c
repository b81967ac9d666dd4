/* ckpt_read.c - the checkpoint reader: the whole file checked at open
 * (header, index, bounds, CRCs), then sections and tensors by name. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/ckpt_internal.h"

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
static void bad_file(int line, const char *path, const char *fmt, ...) L8_PRINTF(3, 4);
static void bad_file(int line, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    (void)l8_error_set(L8_ERR_INVALID_ARG, 0, "", "l8_ckpt_open", __FILE__, line,
                       "checkpoint '%s' %s", path, msg);
}
/* The status in sight of the caller (a variadic bad_file is opaque to the
 * static analyzer, which would follow a "failed, yet L8_OK" path out of it). */
#define BAD(...) (bad_file(__LINE__, __VA_ARGS__), L8_ERR_INVALID_ARG)

/* Check the first min(size, 128) bytes b of a file of `size` bytes. */
static l8_status check_header(const char *path, const unsigned char *b, uint64_t size, ckpt_header *h)
{
    if (size == 0) return BAD(path, "is empty (0 bytes): not a lean8 checkpoint");
    size_t have = size < sizeof l8i_ckpt_magic ? (size_t)size : sizeof l8i_ckpt_magic;
    if (memcmp(b, l8i_ckpt_magic, have) != 0)
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
    if (!nul || !l8i_ckpt_printable(h->kind, L8_CKPT_KIND_MAX))
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
    if (memchr(e->name, 0, sizeof e->name) && l8i_ckpt_printable(e->name, L8_CKPT_NAME_MAX))
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
    if (r->n && l8i_ckpt_table_reserve(&r->names, r->entries, r->n) != 0) goto oom;
    spans = malloc((r->n ? r->n : 1) * sizeof *spans);
    if (!spans) goto oom;
    for (size_t i = 0; i < r->n; i++) {
        const ckpt_entry *e = &r->entries[i];
        entry_label(e, i, label, sizeof label);
        const char *nul = memchr(e->name, 0, sizeof e->name);
        if (!nul || !l8i_ckpt_printable(e->name, L8_CKPT_NAME_MAX)) {
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
            int okay = es && e->ndim <= L8_MAX_DIMS, huge = 0, empty = 0;
            /* dense: the bytes with zero dimensions counted as 1, as a tensor's
             * layout counts them; past INT64_MAX no tensor could receive the
             * section, however empty it is. */
            uint64_t dense = es;
            for (uint32_t d = 0; okay && d < 4; d++) {
                if (d >= e->ndim) { okay = e->shape[d] == 0; continue; }
                if (e->shape[d] < 0) { okay = 0; break; }
                uint64_t dim = e->shape[d] ? (uint64_t)e->shape[d] : 1;
                if (dim > (uint64_t)INT64_MAX / dense) { huge = 1; break; }
                dense *= dim;
                empty |= e->shape[d] == 0;
            }
            if (huge) {
                char shape[128];
                ret = BAD(path, "is malformed: tensor %s of shape %s (%s) spans more than int64"
                          " bytes", label, l8i_ckpt_fmt_shape(shape, sizeof shape, (int)e->ndim,
                          e->shape), l8_dtype_name((l8_dtype)e->dtype));
                goto out;
            }
            if (!okay || (empty ? 0 : dense) != e->length) {
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
        if (l8i_ckpt_table_find(&r->names, r->entries, e->name, NULL)) {
            ret = BAD(path, "is malformed: two sections are named '%s'", e->name);
            goto out;
        }
        l8i_ckpt_table_insert(&r->names, r->entries, i);
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
    if (fd < 0) return l8i_ckpt_io_error(errno, "open", __LINE__, "cannot open checkpoint", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ret = l8i_ckpt_io_error(errno, "fstat", __LINE__, "cannot stat checkpoint", path);
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
    if (e > 0) { ret = l8i_ckpt_io_error(e, "pread", __LINE__, "cannot read checkpoint", path); goto fail; }
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
    if (e > 0) { ret = l8i_ckpt_io_error(e, "pread", __LINE__, "cannot read checkpoint", path); goto fail; }
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
    return r && name && l8i_ckpt_table_find(&r->names, r->entries, name, NULL) != NULL;
}

/* The entry called name, or L8_ERR_INVALID_ARG naming what is missing. */
static l8_status lookup(const char *fn, const l8_ckpt_reader *r, const char *name, const ckpt_entry **e)
{
    if (!r || !name) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: reader or section name is NULL", fn);
    *e = l8i_ckpt_table_find(&r->names, r->entries, name, NULL);
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
                       l8i_ckpt_fmt_shape(have, sizeof have, (int)e->ndim, e->shape),
                       l8_dtype_name(l8_tensor_dtype(dst)), l8i_ckpt_fmt_shape(want, sizeof want, nd, shape));
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
