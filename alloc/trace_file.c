/* trace_file.c - a trace's file: its name (%r, %p), its creation without
 * ever truncating someone else's file, the header, the background flusher,
 * the end marker, and the process rank.
 *
 * Creation. The path is first tried with O_CREAT | O_EXCL. When it exists:
 *  - a directory fails (EISDIR); a device, FIFO or socket is opened for
 *    writing as it is (a trace may stream into a pipe);
 *  - a regular file is inspected: empty, or a lean8 trace that is finished
 *    (end marker last) or whose writer is gone (pid not alive), or written by
 *    this process and no longer open here -> replaced: a new file is written
 *    under a temporary name and renamed over the path, so a reader still
 *    following the old file keeps it whole (and can notice the replacement);
 *  - anything else (a trace of a running process, one this process still
 *    writes, a file that is not a lean8 trace) -> L8_ERR_IO, errno EEXIST,
 *    with the reason.
 *
 * The flusher. One thread per file-backed trace writes the buffers that
 * recorders hand over when full, and every 50 ms the partly filled one, so
 * a writer that goes quiet (or hangs) has its last events in the file
 * within ~50 ms. It writes without holding the trace's mutex.
 *
 * The registry: a list of open file traces (g_reg_mu), used to refuse a
 * path this process already writes, to update the header rank of traces
 * that follow the process rank when l8_trace_set_rank is called, and at
 * fork: the child has no flusher threads and must not write into its
 * parent's files, so its copies of file traces become memory-only (a fork
 * handler holds every trace's mutex across the fork, so none is copied
 * locked). Lock order: g_reg_mu, then a trace's mu.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "alloc/trace_internal.h"

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static l8_trace *g_open;          /* registry head (g_reg_mu) */
static int g_rank = -1;           /* set by l8_trace_set_rank (g_reg_mu) */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* ---- fork ---- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_reg_mu);
    for (l8_trace *t = g_open; t; t = t->next_open) pthread_mutex_lock(&t->mu);
}

static void fork_parent(void)
{
    for (l8_trace *t = g_open; t; t = t->next_open) pthread_mutex_unlock(&t->mu);
    pthread_mutex_unlock(&g_reg_mu);
}

static void fork_child(void)
{
    for (l8_trace *t = g_open; t; t = t->next_open) {
        close(t->fd);                     /* the child's descriptor only */
        t->fd = -1;
        t->flusher_on = 0;                /* the thread was not copied */
        t->file_ready = 0;
        if (t->pend) {                    /* its buffer back, unwritten */
            t->spare = t->pend;
            t->pend = NULL;
        }
        t->wlen = 0;
        pthread_mutex_unlock(&t->mu);
    }
    g_open = NULL;
    pthread_mutex_unlock(&g_reg_mu);
}

static void atfork_init(void)
{
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) {
        /* without the handlers a child that records could write into the
         * parent's file; nothing else to do here */
    }
}

/* ---- the process rank ---- */

static int rank_locked(void)
{
    if (g_rank >= 0) return g_rank;
    const char *e = getenv("RANK");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 0x7FFFFFFF) return (int)v;
    }
    return 0;
}

int l8_trace_rank(void)
{
    pthread_mutex_lock(&g_reg_mu);
    int r = rank_locked();
    pthread_mutex_unlock(&g_reg_mu);
    return r;
}

l8_status l8_trace_set_rank(int rank)
{
    if (rank < 0) return L8_FAIL(L8_ERR_INVALID_ARG, "trace rank %d is negative", rank);
    pthread_mutex_lock(&g_reg_mu);
    g_rank = rank;
    int32_t v = rank;
    /* In place: the header is never buffered, and the field is 4 aligned
     * bytes that no other write touches. */
    for (l8_trace *t = g_open; t; t = t->next_open)
        if (t->follow_rank && pwrite(t->fd, &v, sizeof v, TRACE_HDR_RANK_OFF) != sizeof v) {
            /* a pipe or a full disk: the header keeps its old rank */
        }
    pthread_mutex_unlock(&g_reg_mu);
    return L8_OK;
}

/* ---- the name ---- */

/* Expand %r, %p, %% of pattern into a new string (*out, malloc'ed). */
static l8_status expand_path(const char *pattern, int rank, char **out)
{
    size_t cap = strlen(pattern) + 64, n = 0;
    char *s = malloc(cap);
    if (!s) return L8_FAIL(L8_ERR_OOM, "no host memory for the trace path");
    for (const char *p = pattern; *p; p++) {
        char num[24];
        const char *add = num;
        if (*p != '%') {
            num[0] = *p;
            num[1] = '\0';
        } else if (p[1] == 'r') {
            snprintf(num, sizeof num, "%d", rank);
            p++;
        } else if (p[1] == 'p') {
            snprintf(num, sizeof num, "%ld", (long)getpid());
            p++;
        } else if (p[1] == '%') {
            add = "%";
            p++;
        } else {
            free(s);
            return L8_FAIL(L8_ERR_INVALID_ARG, "trace path '%s': '%%%c' is not %%r (rank), %%p "
                           "(pid) or %%%%", pattern, p[1] ? p[1] : ' ');
        }
        size_t k = strlen(add);
        if (n + k + 1 > cap) {
            cap = 2 * (n + k + 1);
            char *ns = realloc(s, cap);
            if (!ns) {
                free(s);
                return L8_FAIL(L8_ERR_OOM, "no host memory for the trace path");
            }
            s = ns;
        }
        memcpy(s + n, add, k);
        n += k;
    }
    s[n] = '\0';
    *out = s;
    return L8_OK;
}

/* ---- may an existing file be replaced? ---- */

static l8_status refuse(const char *path, const char *why)
{
    return l8_error_set(L8_ERR_IO, EEXIST, "EEXIST", "open", __FILE__, __LINE__,
                        "trace file '%s' exists and %s; refusing to overwrite it (remove it, or "
                        "put %%p or %%r in the path)", path, why);
}

/* L8_OK: the regular file at path (st) may be replaced. */
static l8_status check_replaceable(const char *path, const struct stat *st)
{
    pthread_mutex_lock(&g_reg_mu);
    int mine = 0;
    for (l8_trace *t = g_open; t; t = t->next_open)
        mine |= t->dev_id == (uint64_t)st->st_dev && t->ino == (uint64_t)st->st_ino;
    pthread_mutex_unlock(&g_reg_mu);
    if (mine) return refuse(path, "is being written by another trace of this process");
    if (st->st_size == 0) return L8_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return l8i_trace_io_error(errno, "open", __FILE__, __LINE__,
                                          "cannot inspect existing trace file", path);
    trace_header h;
    memset(&h, 0, sizeof h);
    ssize_t n = pread(fd, &h, sizeof h, 0);
    l8_trace_event last;
    memset(&last, 0, sizeof last);
    int has_last = n == (ssize_t)sizeof h && h.header_size >= TRACE_HEADER &&
                   st->st_size >= (off_t)h.header_size + TRACE_RECORD &&
                   (st->st_size - (off_t)h.header_size) % TRACE_RECORD == 0 &&
                   pread(fd, &last, sizeof last, st->st_size - TRACE_RECORD) == (ssize_t)sizeof last;
    close(fd);
    if (n < (ssize_t)sizeof l8i_trace_magic || memcmp(h.magic, l8i_trace_magic, sizeof h.magic))
        return refuse(path, "is not a lean8 trace");
    if (has_last && h.version >= 2 && last.kind == TRACE_KIND_END) return L8_OK;   /* finished */
    if (h.pid == (uint32_t)getpid()) return L8_OK;      /* ours, and no longer open (above) */
    if (h.pid != 0 && (kill((pid_t)h.pid, 0) == 0 || errno == EPERM)) {
        char why[96];
        snprintf(why, sizeof why, "belongs to process %u, which is still running", h.pid);
        return refuse(path, why);
    }
    return L8_OK;                                       /* its writer is gone */
}

/* ---- create ---- */

static l8_status write_header(l8_trace *t, int fd, const char *path, int rank, int device)
{
    trace_header h = { .version = TRACE_VERSION, .record_size = TRACE_RECORD,
                       .header_size = TRACE_HEADER, .pid = (uint32_t)getpid(),
                       .start_realtime_ns = l8i_clock_ns(CLOCK_REALTIME),
                       .start_monotonic_ns = t->t0, .rank = rank, .device = device };
    memcpy(h.magic, l8i_trace_magic, sizeof h.magic);
    /* Written at once, not buffered: a reader may open the file as soon as
     * l8_trace_create returns. */
    int e = l8i_write_all(fd, &h, sizeof h, &t->written);
    if (e) return l8i_trace_io_error(e, "write", __FILE__, __LINE__,
                                     "cannot write trace header to", path);
    return L8_OK;
}

/* Open the final file: a fresh one, or a replacement renamed over the old. */
static l8_status create_file(l8_trace *t, int rank, int device)
{
    const char *path = t->path;
    t->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t->fd >= 0) return write_header(t, t->fd, path, rank, device);
    if (errno != EEXIST)
        return l8i_trace_io_error(errno, "open", __FILE__, __LINE__, "cannot create trace file", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return l8i_trace_io_error(errno, "stat", __FILE__, __LINE__, "cannot create trace file", path);
    if (S_ISDIR(st.st_mode))
        return l8i_trace_io_error(EISDIR, "open", __FILE__, __LINE__, "cannot create trace file", path);
    if (!S_ISREG(st.st_mode)) {                         /* a device, FIFO or socket */
        t->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (t->fd < 0)
            return l8i_trace_io_error(errno, "open", __FILE__, __LINE__, "cannot open trace file", path);
        return write_header(t, t->fd, path, rank, device);
    }
    L8_CHECK(check_replaceable(path, &st));
    size_t len = strlen(path) + 48;
    char *tmp = malloc(len);
    if (!tmp) return L8_FAIL(L8_ERR_OOM, "no host memory for the trace path");
    snprintf(tmp, len, "%s.tmp.%ld.%llu", path, (long)getpid(), (unsigned long long)t->serial);
    l8_status s = L8_OK;
    t->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t->fd < 0) {
        s = l8i_trace_io_error(errno, "open", __FILE__, __LINE__, "cannot create trace file", tmp);
    } else if ((s = write_header(t, t->fd, tmp, rank, device)) != L8_OK) {
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        s = l8i_trace_io_error(errno, "rename", __FILE__, __LINE__,
                               "cannot move the new trace file over", path);
        unlink(tmp);
    }
    free(tmp);
    return s;
}

/* The flusher: writes the buffers recorders hand over (outside the
 * trace's mutex, so recording goes on meanwhile) and, every 50 ms, the
 * partly filled one. On stop it finishes what it holds. */
static void *flusher_main(void *arg)
{
    l8_trace *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop || t->pend) {
        if (t->pend) {
            unsigned char *p = t->pend;
            size_t n = t->pend_len;
            int skip = t->werr != 0;             /* nothing more after a write error */
            uint64_t w = 0;
            pthread_mutex_unlock(&t->mu);
            int e = skip ? 0 : l8i_write_all(t->fd, p, n, &w);
            pthread_mutex_lock(&t->mu);
            t->written += w;
            if (e && !t->werr) t->werr = e;
            t->spare = p;
            t->pend = NULL;
            pthread_cond_broadcast(&t->done);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + TRACE_FLUSH_PERIOD_NS;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        int r = pthread_cond_timedwait(&t->wake, &t->mu, &ts);
        if (r == ETIMEDOUT && !t->pend && t->wlen) l8i_trace_hand_off(t);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

l8_status l8i_trace_open_file(l8_trace *t, const l8_trace_config *c)
{
    if (!c->path[0]) return L8_FAIL(L8_ERR_INVALID_ARG, "trace path is empty");
    pthread_once(&g_atfork_once, atfork_init);
    pthread_mutex_lock(&g_reg_mu);
    int prank = rank_locked();
    pthread_mutex_unlock(&g_reg_mu);
    L8_CHECK(expand_path(c->path, prank, &t->path));
    if (!t->path[0]) return L8_FAIL(L8_ERR_INVALID_ARG, "trace path is empty");
    t->wbuf = malloc(WBUF_BYTES);
    t->spare = malloc(WBUF_BYTES);
    if (!t->wbuf || !t->spare) return L8_FAIL(L8_ERR_OOM, "no host memory for the trace write buffer");
    t->follow_rank = c->rank < 0;
    L8_CHECK(create_file(t, t->follow_rank ? prank : c->rank, c->device));
    struct stat st;
    if (fstat(t->fd, &st) == 0) {
        t->dev_id = (uint64_t)st.st_dev;
        t->ino = (uint64_t)st.st_ino;
    }
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&t->wake, &ca) != 0)
        return L8_FAIL(L8_ERR_OOM, "cannot set up the trace flusher's condition variable");
    pthread_condattr_destroy(&ca);
    if (pthread_cond_init(&t->done, NULL) != 0) {
        pthread_cond_destroy(&t->wake);
        return L8_FAIL(L8_ERR_OOM, "cannot set up the trace flusher's condition variable");
    }
    t->done_init = 1;
    if (pthread_create(&t->flusher, NULL, flusher_main, t) != 0) {
        pthread_cond_destroy(&t->wake);
        return L8_FAIL(L8_ERR_OOM, "cannot start the trace flusher thread");
    }
    t->flusher_on = 1;
    t->file_ready = 1;
    pthread_mutex_lock(&g_reg_mu);
    t->next_open = g_open;
    g_open = t;
    /* a rank set while the file was being created */
    int32_t now_rank = rank_locked();
    if (t->follow_rank && now_rank != prank &&
        pwrite(t->fd, &now_rank, sizeof now_rank, TRACE_HDR_RANK_OFF) != sizeof now_rank) {
        /* best effort, as in l8_trace_set_rank */
    }
    pthread_mutex_unlock(&g_reg_mu);
    return L8_OK;
}

void l8i_trace_stop_flusher(l8_trace *t)
{
    if (!t->flusher_on) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->flusher, NULL);
    pthread_cond_destroy(&t->wake);
    /* t->done stays: drain may still wait on it (never blocks: nothing pending) */
    t->flusher_on = 0;
}

void l8i_trace_close_file(l8_trace *t)
{
    if (t->fd < 0) return;
    if (!t->file_ready) {                 /* creation failed half way */
        close(t->fd);
        t->fd = -1;
        return;
    }
    l8i_trace_stop_flusher(t);
    pthread_mutex_lock(&g_reg_mu);
    for (l8_trace **p = &g_open; *p; p = &(*p)->next_open)
        if (*p == t) {
            *p = t->next_open;
            break;
        }
    pthread_mutex_unlock(&g_reg_mu);
    pthread_mutex_lock(&t->mu);
    l8i_trace_put_end(t);
    l8i_trace_drain(t);
    pthread_mutex_unlock(&t->mu);
    close(t->fd);
    t->fd = -1;
}

const char *l8_trace_path(const l8_trace *t) { return t ? t->path : NULL; }
