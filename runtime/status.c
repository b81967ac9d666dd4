/* status.c - status names and the thread-local last-error record.
 *
 * The record's strings live in fixed thread-local buffers, so recording an
 * error never allocates (it must work when memory is exhausted) and the
 * pointers handed out stay valid until the next failure on the thread.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "runtime/status.h"
#include "runtime/config_internal.h"
#include "runtime/internal.h"   /* l8i_warn */

typedef struct err_slot {
    l8_error rec;
    char foreign_name[64];
    char call[64];
    char message[2048];
    char line[2400];
} err_slot;

static _Thread_local err_slot g_err;

const char *l8_status_name(l8_status st)
{
    switch (st) {
    case L8_OK: return "L8_OK";
    case L8_ERR_INVALID_ARG: return "L8_ERR_INVALID_ARG";
    case L8_ERR_UNSUPPORTED: return "L8_ERR_UNSUPPORTED";
    case L8_ERR_STATE: return "L8_ERR_STATE";
    case L8_ERR_OOM: return "L8_ERR_OOM";
    case L8_ERR_CUDA: return "L8_ERR_CUDA";
    case L8_ERR_CUBLAS: return "L8_ERR_CUBLAS";
    case L8_ERR_NCCL: return "L8_ERR_NCCL";
    case L8_ERR_IO: return "L8_ERR_IO";
    case L8_ERR_TIMEOUT: return "L8_ERR_TIMEOUT";
    case L8_ERR_NO_DEVICE: return "L8_ERR_NO_DEVICE";
    case L8_ERR_COMM: return "L8_ERR_COMM";
    case L8_ERR_INTERNAL: return "L8_ERR_INTERNAL";
    }
    return "L8_ERR_UNKNOWN";
}

int l8_status_is_caller_error(l8_status st)
{
    return st >= 1 && st < 100;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    if (!src) src = "";
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memmove(dst, src, len);
    dst[len] = '\0';
}

const l8_error *l8_last_error(void)
{
    err_slot *e = &g_err;
    if (!e->rec.foreign_name) {         /* first use on this thread */
        e->rec.foreign_name = e->foreign_name;
        e->rec.call = e->call;
        e->rec.message = e->message;
        e->rec.file = "";
    }
    return &e->rec;
}

const char *l8_last_error_string(void)
{
    const l8_error *r = l8_last_error();
    err_slot *e = &g_err;
    if (r->status == L8_OK) return "no error";
    int n = snprintf(e->line, sizeof e->line, "%s: ", l8_status_name(r->status));
    if (r->call[0] && n < (int)sizeof e->line) {
        if (r->foreign_name[0])
            n += snprintf(e->line + n, sizeof e->line - n, "%s failed with %s (%d): ", r->call,
                          r->foreign_name, r->foreign_code);
        else
            n += snprintf(e->line + n, sizeof e->line - n, "%s failed: ", r->call);
    }
    if (n < (int)sizeof e->line && !r->file[0])     /* l8_error_set_text: no location */
        snprintf(e->line + n, sizeof e->line - n, "%s", r->message);
    else if (n < (int)sizeof e->line)
        snprintf(e->line + n, sizeof e->line - n, "%s (%s:%d)", r->message, r->file, r->line);
    return e->line;
}

void l8_error_clear(void)
{
    l8_last_error();
    g_err.rec.status = L8_OK;
    g_err.rec.foreign_code = 0;
    g_err.foreign_name[0] = g_err.call[0] = g_err.message[0] = '\0';
}

/* (l8_error_set): the name in parentheses is never the analyzer's macro (status.h) */
l8_status (l8_error_set)(l8_status st, int foreign_code, const char *foreign_name, const char *call,
                         const char *file, int line, const char *fmt, ...)
{
    l8_last_error();
    err_slot *e = &g_err;
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);   /* fmt may name the old message */
    va_end(ap);
    memcpy(e->message, msg, sizeof msg);
    e->rec.status = st;
    e->rec.foreign_code = foreign_code;
    copy_str(e->foreign_name, sizeof e->foreign_name, foreign_name);
    copy_str(e->call, sizeof e->call, call);
    e->rec.file = file ? file : "";
    e->rec.line = line;
    return st;
}

l8_status l8_error_set_text(l8_status st, const char *call, const char *message)
{
    return l8_error_set(st, 0, "", call, "", 0, "%s", message ? message : "");
}

/* The struct-size rule of config_internal.h. */
l8_status l8i_config_copy(void *dst, size_t dst_size, const void *src, const char *fn,
                          const char *init)
{
    size_t n;
    memcpy(&n, src, sizeof n);
    if (n < sizeof(size_t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: cfg->size %zu is smaller than the size field"
                       " (initialize the struct with %s)", fn, n, init);
    if (n > dst_size) {
        const unsigned char *tail = (const unsigned char *)src;
        for (size_t i = dst_size; i < n; i++)
            if (tail[i] != 0)
                return L8_FAIL(L8_ERR_INVALID_ARG, "%s: cfg->size %zu is larger than this"
                               " library's %zu and byte %zu of the unknown tail is not zero"
                               " (built against newer headers? use %s of this version)",
                               fn, n, dst_size, i, init);
    }
    memcpy(dst, src, n < dst_size ? n : dst_size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return L8_OK;
}

/* The statistics rule of config_internal.h. */
l8_status l8i_stats_out(void *out, const void *src, size_t src_size, const char *fn)
{
    size_t n;
    memcpy(&n, out, sizeof n);
    if (n <= sizeof(size_t))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: stats->size %zu covers no field (set it to"
                       " sizeof the struct)", fn, n);
    size_t m = n < src_size ? n : src_size;
    memcpy(out, src, m);
    if (n > src_size) memset((unsigned char *)out + src_size, 0, n - src_size);
    memcpy(out, &m, sizeof m);
    return L8_OK;
}

void l8i_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("lean8: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

#ifndef L8_VERSION
#define L8_VERSION "unknown"
#endif
const char *l8_version(void) { return L8_VERSION; }

/* Constant errno names for the last-error record (strerrorname_np is
 * glibc-only and recent). */
const char *l8_errno_name(int e)
{
    switch (e) {
    case EACCES: return "EACCES";
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EBUSY: return "EBUSY";
    case EDQUOT: return "EDQUOT";
    case EEXIST: return "EEXIST";
    case EFBIG: return "EFBIG";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case EISDIR: return "EISDIR";
    case ELOOP: return "ELOOP";
    case EMFILE: return "EMFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENFILE: return "ENFILE";
    case ENOENT: return "ENOENT";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case ENOTDIR: return "ENOTDIR";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EPERM: return "EPERM";
    case EPIPE: return "EPIPE";
    case EROFS: return "EROFS";
    case ETXTBSY: return "ETXTBSY";
    case EXDEV: return "EXDEV";
    default: return "errno";
    }
}
