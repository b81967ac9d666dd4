/* test_fuzz.c - mutation fuzzing of every file reader: checkpoints
 * (runtime/ckpt_read.c), allocator traces (alloc/trace_read.c and
 * lean8-trace's model, tools/trace_model.c), the GEMM plan cache
 * (ops/gemm_cache.c) and Fashion-MNIST IDX(.gz) files (tools/fmnist.c).
 *
 * Seeds are valid files made by lean8's own writers in a mkdtemp directory.
 * Each iteration mutates one of them (bit flips, special bytes, 1/2/4/8-byte
 * fields set to 0, 1, -1, INT32_MAX, huge values..., truncation at random
 * and at structure boundaries, appended garbage, duplicated or removed
 * chunks, and format-aware field and entry edits) and sends the result
 * through the whole read path. Checkpoints (and plan caches, which are
 * checkpoints) are usually re-checksummed after the mutation, so that what
 * lies behind the CRC checks is reached too.
 *
 * A pass is L8_OK with every invariant the API promises holding, or an error
 * status the header documents whose message names the file; never a crash,
 * a sanitizer report, a leak (of memory, a storage or a descriptor) or an
 * input that takes more than FUZZ_ALARM_S seconds.
 *
 * Deterministic: the seed is fixed (L8_FUZZ_SEED overrides it) and each
 * iteration draws from its own stream, so one failing iteration is repeated
 * alone with L8_FUZZ_SEED=<s> L8_FUZZ_FIRST=<i> L8_FUZZ_ITERS=1. Failures
 * and crashes print the reader, seed and iteration; a failed test leaves its
 * input in its temporary directory. L8_FUZZ_ITERS=N runs N iterations per
 * reader (long sanitizer runs); L8_TEST_QUICK=1 (valgrind) runs a tenth.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/tests.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "runtime/checkpoint.h"
#include "alloc/trace.h"
#include "ops/gemm_internal.h"
#include "tools/fmnist.h"
#include "tools/trace_model.h"

#define FUZZ_DEFAULT_SEED 0x4C38465A5A2025ull
#define FUZZ_ALARM_S 20u              /* one input, valgrind included */

/* ---- the run: seed, iteration, what was done (for every message) ---- */

typedef struct fuzz {
    const char *reader;
    uint64_t seed;
    long first, iters, it;
    char what[512];               /* the current iteration's mutations */
    l8t_tmpdir tmp;               /* the temporary directory and every file the test names */
    int fd0;                      /* the lowest free descriptor at the start: none may leak */
} fuzz;

static fuzz *g_cur;               /* the running fuzz loop, for crash reports */

static void report_case(void)
{
    fuzz *f = g_cur;
    if (!f) return;
    char line[900];
    int n = snprintf(line, sizeof line, "\nfuzz %s: died at seed 0x%" PRIx64 " iteration %ld (%s);"
                     " L8_FUZZ_SEED=0x%" PRIx64 " L8_FUZZ_FIRST=%ld L8_FUZZ_ITERS=1 repeats it\n",
                     f->reader, f->seed, f->it, f->what, f->seed, f->it);
    if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* A crash or a hang names its input before the process dies (snprintf is
 * not async-signal-safe, but the process is lost anyway). Under a sanitizer
 * its own handlers stay in place and its death callback reports instead. */
static void on_fatal(int sig)
{
    report_case();
    signal(sig, SIG_DFL);
    raise(sig);
}

extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static int lowest_free_fd(void)
{
    int fd = dup(0);
    ck_assert_int_ge(fd, 0);
    close(fd);
    return fd;
}

static void fuzz_begin(fuzz *f, const char *reader, long default_iters)
{
    memset(f, 0, sizeof *f);
    f->reader = reader;
    const char *s = getenv("L8_FUZZ_SEED"), *it = getenv("L8_FUZZ_ITERS");
    const char *first = getenv("L8_FUZZ_FIRST");
    f->seed = s && s[0] ? strtoull(s, NULL, 0) : FUZZ_DEFAULT_SEED;
    f->iters = it && it[0] ? strtol(it, NULL, 0)
                           : (l8_test_quick() ? default_iters / 10 : default_iters);
    f->first = first && first[0] ? strtol(first, NULL, 0) : 0;
    printf("fuzz %s: seed 0x%" PRIx64 ", iterations %ld..%ld (L8_FUZZ_SEED, L8_FUZZ_FIRST,"
           " L8_FUZZ_ITERS)\n", reader, f->seed, f->first, f->first + f->iters - 1);
    fflush(stdout);
    g_cur = f;
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(report_case);
    } else {
        signal(SIGSEGV, on_fatal);
        signal(SIGBUS, on_fatal);
        signal(SIGFPE, on_fatal);
        signal(SIGILL, on_fatal);
        signal(SIGABRT, on_fatal);
    }
    signal(SIGALRM, on_fatal);
    l8t_tmp_init(&f->tmp, "l8fuzz");
    f->fd0 = lowest_free_fd();
}

/* After each test, passed or not (a failed one in CK_FORK=no mode must not
 * leave the alarm armed or the handlers naming its input). */
static void fuzz_teardown(void)
{
    static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM };
    alarm(0);
    g_cur = NULL;
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(NULL);
    else
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    signal(SIGALRM, SIG_DFL);
}

/* No descriptor leaked, and every file the test named goes with its
 * directory (a passing test leaves nothing behind); fuzz_teardown disarms. */
static void fuzz_end(fuzz *f)
{
    ck_assert_msg(lowest_free_fd() == f->fd0, "fuzz %s: a file descriptor leaked (lowest free %d,"
                  " %d at the start)", f->reader, lowest_free_fd(), f->fd0);
    for (int i = 0; i < f->tmp.n; i++) unlink(f->tmp.path[i]);
    ck_assert_msg(rmdir(f->tmp.dir) == 0, "rmdir %s: %s (a file was left behind)", f->tmp.dir,
                  strerror(errno));
}

/* The iteration's own stream: iteration i of a seed is always the same. */
static void fuzz_iter(fuzz *f, l8_rng *r, long i, uint64_t salt)
{
    f->it = i;
    f->what[0] = '\0';
    uint64_t z = f->seed ^ (salt * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xBF58476D1CE4E5B9ull);
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
    r->s = (z ^ (z >> 29)) | 1;
    alarm(FUZZ_ALARM_S);
}

static void note(fuzz *f, const char *fmt, ...) L8_PRINTF(2, 3);
static void note(fuzz *f, const char *fmt, ...)
{
    size_t k = strlen(f->what);
    if (k + 2 >= sizeof f->what) return;
    if (k) f->what[k++] = ',', f->what[k++] = ' ', f->what[k] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what + k, sizeof f->what - k, fmt, ap);
    va_end(ap);
}

/* Fail with the reader, seed, iteration and mutations. */
#define FZ(f, cond, fmt, ...) \
    ck_assert_msg(cond, "fuzz %s seed 0x%" PRIx64 " iteration %ld (%s): " fmt, (f)->reader, \
                  (f)->seed, (f)->it, (f)->what, ## __VA_ARGS__)

/* An error as the readers promise it: a documented status, a message that
 * names the file. */
static void fz_error(fuzz *f, l8_status st, const char *call, const char *path)
{
    const l8_error *e = l8_last_error();
    FZ(f, st == L8_ERR_INVALID_ARG || st == L8_ERR_UNSUPPORTED, "%s -> %s (%s)", call,
       l8_status_name(st), e->message);
    FZ(f, e->status == st, "%s -> %s but the last error is %s", call, l8_status_name(st),
       l8_status_name(e->status));
    FZ(f, e->message && e->message[0], "%s -> %s with an empty message", call, l8_status_name(st));
    FZ(f, !path || strstr(e->message, path), "%s -> %s: the message does not name '%s': %s", call,
       l8_status_name(st), path, e->message);
}

/* ---- byte buffers ---- */

typedef struct fzbuf {
    unsigned char *p;
    size_t n, cap;
} fzbuf;

static void b_reserve(fzbuf *b, size_t n)
{
    if (n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n) cap *= 2;
    b->p = realloc(b->p, cap);
    ck_assert_ptr_nonnull(b->p);
    b->cap = cap;
}

static void b_set(fzbuf *b, const void *p, size_t n)
{
    b_reserve(b, n);
    if (n) memcpy(b->p, p, n);
    b->n = n;
}

static void b_free(fzbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Insert n bytes from src (NULL: zeros) at offset at. src may point into b. */
static void b_insert(fzbuf *b, size_t at, const unsigned char *src, size_t n)
{
    unsigned char *tmp = NULL;
    if (src) {
        tmp = l8t_xmalloc(n);
        memcpy(tmp, src, n);
    }
    b_reserve(b, b->n + n);
    memmove(b->p + at + n, b->p + at, b->n - at);
    if (tmp) memcpy(b->p + at, tmp, n);
    else memset(b->p + at, 0, n);
    b->n += n;
    free(tmp);
}

static void b_remove(fzbuf *b, size_t at, size_t n)
{
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
}

static uint64_t get_le(const unsigned char *p, int w)
{
    uint64_t v = 0;
    for (int i = w - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put_le(unsigned char *p, int w, uint64_t v)
{
    for (int i = 0; i < w; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_be(const unsigned char *p, int w)
{
    uint64_t v = 0;
    for (int i = 0; i < w; i++) v = v << 8 | p[i];
    return v;
}

static void put_be(unsigned char *p, int w, uint64_t v)
{
    for (int i = 0; i < w; i++) p[i] = (unsigned char)(v >> (8 * (w - 1 - i)));
}

static void spit(fuzz *f, const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FZ(f, fd >= 0, "open %s: %s", path, strerror(errno));
    FZ(f, n == 0 || write(fd, p, n) == (ssize_t)n, "write %s: %s", path, strerror(errno));
    FZ(f, close(fd) == 0, "close %s: %s", path, strerror(errno));
}

static void slurp(const char *path, fzbuf *b)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    b_reserve(b, (size_t)sb.st_size + 1);
    ck_assert_int_eq(read(fd, b->p, (size_t)sb.st_size), (ssize_t)sb.st_size);
    b->n = (size_t)sb.st_size;
    close(fd);
}

/* The lowest free descriptor: a reader that leaks one moves it. */
/* ---- generic mutations ---- */

/* A value for a field of w bytes that held old: the edges parsers get wrong. */
static uint64_t pick_value(l8_rng *r, uint64_t old, int w)
{
    uint64_t mask = w == 8 ? ~0ull : (1ull << (8 * w)) - 1;
    switch (l8_rng_below(r, 14)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return ~0ull & mask;                          /* -1 */
    case 3: return 0x7FFFFFFFull & mask;                  /* INT32_MAX */
    case 4: return 0x80000000ull & mask;
    case 5: return 0x7FFFFFFFFFFFFFFFull & mask;          /* INT64_MAX */
    case 6: return (1ull << l8_rng_below(r, 64)) & mask;
    case 7: return (old + 1) & mask;
    case 8: return (old - 1) & mask;
    case 9: return (old + 64) & mask;
    case 10: return (old - 64) & mask;
    case 11: return (old ^ (1ull << l8_rng_below(r, (uint64_t)(8 * w)))) & mask;
    case 12: return (old * 2 + l8_rng_below(r, 3)) & mask;
    default: return l8_rng_next(r) & mask;
    }
}

static size_t pick_cut(l8_rng *r, const size_t *cuts, int ncuts, size_t n)
{
    if (ncuts == 0 || l8_rng_below(r, 3) == 0) return (size_t)l8_rng_below(r, n + 1);
    size_t c = cuts[l8_rng_below(r, (uint64_t)ncuts)];
    c += (size_t)l8_rng_below(r, 3) - 1;                  /* at, one before, one after */
    return c > n ? n : c;
}

/* One mutation of any byte string; cuts are the format's structure
 * boundaries (offsets where a section, record or field starts). */
static void mutate_bytes(fuzz *f, l8_rng *r, fzbuf *b, const size_t *cuts, int ncuts)
{
    static const unsigned char special[] = { 0x00, 0xFF, 0x7F, 0x80 };
    size_t n = b->n;
    unsigned op = (unsigned)l8_rng_below(r, 11);
    if (n == 0) op = 5;
    switch (op) {
    case 0: {                                             /* 1 to 8 bit flips */
        int k = 1 + (int)l8_rng_below(r, 8);
        for (int i = 0; i < k; i++)
            b->p[l8_rng_below(r, n)] ^= (unsigned char)(1u << l8_rng_below(r, 8));
        note(f, "%d bit flips", k);
        break;
    }
    case 1: {
        size_t at = (size_t)l8_rng_below(r, n);
        b->p[at] = special[l8_rng_below(r, 4)];
        note(f, "byte %zu = 0x%02x", at, b->p[at]);
        break;
    }
    case 2: case 3: {                                     /* a 1/2/4/8-byte field */
        int w = 1 << l8_rng_below(r, 4);
        if ((size_t)w > n) w = 1;
        size_t at = (size_t)l8_rng_below(r, n - (size_t)w + 1);
        if (l8_rng_below(r, 2) && at % (size_t)w) at -= at % (size_t)w;   /* aligned, often */
        int be = (int)l8_rng_below(r, 2);
        uint64_t old = be ? get_be(b->p + at, w) : get_le(b->p + at, w);
        uint64_t v = pick_value(r, old, w);
        if (be) put_be(b->p + at, w, v);
        else put_le(b->p + at, w, v);
        note(f, "%d-byte %s field at %zu = 0x%" PRIx64, w, be ? "BE" : "LE", at, v);
        break;
    }
    case 4: {
        size_t c = pick_cut(r, cuts, ncuts, n);
        b->n = c;
        note(f, "truncated to %zu of %zu bytes", c, n);
        break;
    }
    case 5: {                                             /* appended garbage or zeros */
        size_t k = 1 + (size_t)l8_rng_below(r, 300);
        b_reserve(b, n + k);
        int zeros = (int)l8_rng_below(r, 3) == 0;
        for (size_t i = 0; i < k; i++) b->p[n + i] = zeros ? 0 : (unsigned char)l8_rng_next(r);
        b->n = n + k;
        note(f, "%zu %s bytes appended", k, zeros ? "zero" : "random");
        break;
    }
    case 6: {                                             /* a chunk duplicated */
        size_t at = pick_cut(r, cuts, ncuts, n), len = 1 + (size_t)l8_rng_below(r, 200);
        if (at >= n) at = n - 1;
        if (len > n - at) len = n - at;
        size_t to = pick_cut(r, cuts, ncuts, n);
        b_insert(b, to, b->p + at, len);
        note(f, "%zu bytes at %zu duplicated at %zu", len, at, to);
        break;
    }
    case 7: {                                             /* a chunk removed */
        size_t at = pick_cut(r, cuts, ncuts, n), len = 1 + (size_t)l8_rng_below(r, 200);
        if (at >= n) at = n - 1;
        if (len > n - at) len = n - at;
        b_remove(b, at, len);
        note(f, "%zu bytes at %zu removed", len, at);
        break;
    }
    case 8: {                                             /* a chunk copied over another */
        size_t a = (size_t)l8_rng_below(r, n), c = (size_t)l8_rng_below(r, n);
        size_t len = 1 + (size_t)l8_rng_below(r, 64);
        if (len > n - a) len = n - a;
        if (len > n - c) len = n - c;
        memmove(b->p + c, b->p + a, len);
        note(f, "%zu bytes at %zu copied to %zu", len, a, c);
        break;
    }
    case 9: {                                             /* a run set to one byte */
        size_t at = (size_t)l8_rng_below(r, n), len = 1 + (size_t)l8_rng_below(r, 32);
        if (len > n - at) len = n - at;
        unsigned char v = special[l8_rng_below(r, 4)];
        memset(b->p + at, v, len);
        note(f, "%zu bytes at %zu = 0x%02x", len, at, v);
        break;
    }
    default: {
        size_t at = (size_t)l8_rng_below(r, n);
        b->p[at] = (unsigned char)l8_rng_next(r);
        note(f, "byte %zu = 0x%02x", at, b->p[at]);
        break;
    }
    }
}

/* ================================================================ checkpoints */

/* docs/checkpoint-format.md: the header and index entry offsets. */
#define CK_HDR 128u
#define CK_ENTRY 192u
#define CK_KIND "fuzz/ckpt"
#define CK_USER 7u

typedef struct field { unsigned off, w; const char *name; } field;

static const field k_hdr_fields[] = {
    { 8, 4, "version" }, { 12, 4, "header_size" }, { 16, 8, "file_size" },
    { 24, 8, "index_offset" }, { 32, 4, "section_count" }, { 36, 4, "entry_size" },
    { 40, 4, "user_version" }, { 44, 4, "body_crc" }, { 112, 8, "reserved0" },
    { 120, 4, "reserved1" }, { 124, 4, "header_crc" },
};
static const field k_entry_fields[] = {
    { 128, 8, "offset" }, { 136, 8, "length" }, { 144, 4, "crc" }, { 148, 4, "type" },
    { 152, 4, "dtype" }, { 156, 4, "ndim" }, { 160, 8, "shape[0]" }, { 168, 8, "shape[1]" },
    { 176, 8, "shape[2]" }, { 184, 8, "shape[3]" },
};
#define NFIELDS(a) (int)(sizeof a / sizeof a[0])

/* How many whole index entries the (maybe damaged) header points at. */
static size_t ck_entries(const fzbuf *b, uint64_t *index)
{
    if (b->n < CK_HDR) return 0;
    *index = get_le(b->p + 24, 8);
    uint64_t count = get_le(b->p + 32, 4);
    if (*index < CK_HDR || *index > b->n) return 0;
    uint64_t fit = (b->n - *index) / CK_ENTRY;
    return (size_t)(count < fit ? count : fit);
}

/* The format's boundaries: header, every section's start and end, every
 * index entry. */
static int ck_cuts(const fzbuf *b, size_t *cuts, int cap)
{
    int k = 0;
    uint64_t index = 0;
    size_t ne = ck_entries(b, &index);
    cuts[k++] = 8;
    cuts[k++] = CK_HDR;
    if (ne || index) cuts[k++] = (size_t)index;
    for (size_t i = 0; i < ne && k + 3 <= cap; i++) {
        const unsigned char *e = b->p + index + i * CK_ENTRY;
        uint64_t off = get_le(e + 128, 8), len = get_le(e + 136, 8);
        cuts[k++] = (size_t)(index + (i + 1) * CK_ENTRY);
        if (off <= b->n) cuts[k++] = (size_t)off;
        if (off <= b->n && len <= b->n - off) cuts[k++] = (size_t)(off + len);
    }
    return k;
}

/* A format-aware edit: a header field, an entry field or name, or the
 * index reshaped (entries swapped, copied, dropped, added). */
static void ck_mutate(fuzz *f, l8_rng *r, fzbuf *b)
{
    uint64_t index = 0;
    size_t ne = ck_entries(b, &index);
    if (b->n < CK_HDR) return mutate_bytes(f, r, b, NULL, 0);
    unsigned op = (unsigned)l8_rng_below(r, 10);
    if (ne == 0 && op >= 2) op = (unsigned)l8_rng_below(r, 2);
    if (op == 0) {                                        /* a header field */
        const field *fd = &k_hdr_fields[l8_rng_below(r, NFIELDS(k_hdr_fields))];
        uint64_t v = pick_value(r, get_le(b->p + fd->off, (int)fd->w), (int)fd->w);
        if (l8_rng_below(r, 4) == 0) v = l8_rng_below(r, 2) ? b->n : index;
        put_le(b->p + fd->off, (int)fd->w, v);
        note(f, "header %s = 0x%" PRIx64, fd->name, v);
    } else if (op == 1) {                                 /* the kind string */
        size_t at = 48 + (size_t)l8_rng_below(r, 64);
        static const unsigned char v[] = { 0, 0x1F, 0x7F, 0x80, 'x', ' ' };
        b->p[at] = v[l8_rng_below(r, sizeof v)];
        note(f, "kind byte %zu = 0x%02x", at - 48, b->p[at]);
    } else if (op <= 5) {                                 /* an entry field */
        size_t i = (size_t)l8_rng_below(r, ne), j = (size_t)l8_rng_below(r, ne);
        unsigned char *e = b->p + index + i * CK_ENTRY, *o = b->p + index + j * CK_ENTRY;
        const field *fd = &k_entry_fields[l8_rng_below(r, NFIELDS(k_entry_fields))];
        uint64_t v = pick_value(r, get_le(e + fd->off, (int)fd->w), (int)fd->w);
        switch (l8_rng_below(r, 6)) {
        case 0: v = get_le(o + fd->off, (int)fd->w); break;    /* another entry's value */
        case 1:                                           /* up to the index */
            v = fd->off == 128 ? index : fd->off == 136 ? index - get_le(e + 128, 8) : v;
            break;
        default: break;
        }
        put_le(e + fd->off, (int)fd->w, v);
        note(f, "entry %zu %s = 0x%" PRIx64, i, fd->name, v);
    } else if (op == 6) {                                 /* a name byte, or another's name */
        size_t i = (size_t)l8_rng_below(r, ne), j = (size_t)l8_rng_below(r, ne);
        unsigned char *e = b->p + index + i * CK_ENTRY;
        if (l8_rng_below(r, 2)) {
            memcpy(e, b->p + index + j * CK_ENTRY, 128);
            note(f, "entry %zu named as entry %zu", i, j);
        } else {
            static const unsigned char v[] = { 0, 0x1F, 0x7F, 0x80, 'x', 0xFF };
            size_t at = (size_t)l8_rng_below(r, 128);
            e[at] = v[l8_rng_below(r, sizeof v)];
            note(f, "entry %zu name byte %zu = 0x%02x", i, at, e[at]);
        }
    } else if (op == 7) {                                 /* entries swapped or copied */
        size_t i = (size_t)l8_rng_below(r, ne), j = (size_t)l8_rng_below(r, ne);
        unsigned char tmp[CK_ENTRY], *ei = b->p + index + i * CK_ENTRY;
        unsigned char *ej = b->p + index + j * CK_ENTRY;
        int copy = (int)l8_rng_below(r, 2);
        memcpy(tmp, ei, CK_ENTRY);
        memcpy(ei, ej, CK_ENTRY);
        if (!copy) memcpy(ej, tmp, CK_ENTRY);
        note(f, "entry %zu %s entry %zu", j, copy ? "copied over" : "swapped with", i);
    } else if (op == 8) {                                 /* one entry dropped */
        size_t i = (size_t)l8_rng_below(r, ne);
        b_remove(b, (size_t)index + i * CK_ENTRY, CK_ENTRY);
        put_le(b->p + 32, 4, get_le(b->p + 32, 4) - 1);
        put_le(b->p + 16, 8, b->n);
        note(f, "entry %zu dropped from the index", i);
    } else {                                              /* an entry added */
        size_t i = (size_t)l8_rng_below(r, ne), to = (size_t)l8_rng_below(r, ne + 1);
        b_insert(b, (size_t)index + to * CK_ENTRY, b->p + index + i * CK_ENTRY, CK_ENTRY);
        put_le(b->p + 32, 4, get_le(b->p + 32, 4) + 1);
        put_le(b->p + 16, 8, b->n);
        note(f, "entry %zu added again as entry %zu", i, to);
    }
}

/* Make the checksums right again after a mutation: level 3 the entries'
 * CRCs, the body CRC and the header CRC; 2 the last two; 1 the header's;
 * 0 none. fix_size also sets the header's file size to the file's. */
static void ck_fix(fzbuf *b, int level, int fix_size)
{
    if (b->n < CK_HDR || level == 0) return;
    if (fix_size) put_le(b->p + 16, 8, b->n);
    if (level >= 3) {
        uint64_t index = 0;
        size_t ne = ck_entries(b, &index);
        for (size_t i = 0; i < ne; i++) {
            unsigned char *e = b->p + index + i * CK_ENTRY;
            uint64_t off = get_le(e + 128, 8), len = get_le(e + 136, 8);
            if (off <= b->n && len <= b->n - off)
                put_le(e + 144, 4, l8_crc32c(0, b->p + off, (size_t)len));
        }
    }
    if (level >= 2) put_le(b->p + 44, 4, l8_crc32c(0, b->p + CK_HDR, b->n - CK_HDR));
    put_le(b->p + 124, 4, l8_crc32c(0, b->p, 124));
}

/* Mutate a checkpoint container: 1 to 3 edits (raw or format-aware), then,
 * usually, the checksums made right again. iter < the number of boundaries
 * of the seed: a truncation at boundary iter instead (checksums fixed with
 * the file size on odd rounds). */
static void ck_mutate_file(fuzz *f, l8_rng *r, fzbuf *b, long iter)
{
    size_t cuts[256];
    int ncuts = ck_cuts(b, cuts, 256);
    if (iter < 2L * ncuts) {
        size_t c = cuts[iter / 2];
        b->n = c < b->n ? c : b->n;
        note(f, "truncated at boundary %zu", b->n);
        if (iter % 2) {
            ck_fix(b, 3, 1);
            note(f, "checksums fixed");
        }
        return;
    }
    int k = 1 + (int)l8_rng_below(r, 3);
    for (int m = 0; m < k; m++) {
        if (l8_rng_below(r, 3)) ck_mutate(f, r, b);
        else mutate_bytes(f, r, b, cuts, ncuts);
    }
    unsigned p = (unsigned)l8_rng_below(r, 20);
    int level = p < 12 ? 3 : p < 15 ? 2 : p < 18 ? 1 : 0;
    int fix_size = l8_rng_below(r, 4) != 0;
    ck_fix(b, level, fix_size);
    if (level) note(f, "checksums fixed to level %d%s", level, fix_size ? " with the size" : "");
}

/* The host tensor's bytes, row-major. */
static unsigned char *tensor_host(fuzz *f, const l8_tensor *t, size_t n)
{
    unsigned char *p = l8t_xmalloc(n);
    l8_tensor *c = NULL;
    l8_status st = l8_tensor_contiguous(t, NULL, &c);
    FZ(f, st == L8_OK, "l8_tensor_contiguous: %s", l8_last_error_string());
    st = l8_tensor_copy_to_host(c, p, n, NULL);
    FZ(f, st == L8_OK, "l8_tensor_copy_to_host: %s", l8_last_error_string());
    l8_tensor_destroy(c);
    return p;
}

/* A tensor section into host tensors: a contiguous one and, with 2 or more
 * dimensions, a transposed view; a mismatched destination is refused. */
static void ck_read_tensor(fuzz *f, l8_ctx *ctx, const l8_ckpt_reader *rd,
                           const l8_ckpt_section_info *in, const void *payload, const char *path)
{
    l8_tensor *t = NULL;
    l8_status st = l8_tensor_empty(ctx, in->dtype, in->ndim, in->shape, &t);
    FZ(f, st == L8_OK, "section '%s' opened but no tensor can hold it: %s", in->name,
       l8_last_error_string());
    FZ(f, l8_tensor_nbytes(t) == in->bytes, "section '%s': %zu bytes, its tensor %zu", in->name,
       in->bytes, l8_tensor_nbytes(t));
    st = l8_ckpt_check_tensor(rd, in->name, t);
    FZ(f, st == L8_OK, "l8_ckpt_check_tensor '%s': %s", in->name, l8_last_error_string());
    st = l8_ckpt_read_tensor(rd, in->name, t);
    FZ(f, st == L8_OK, "l8_ckpt_read_tensor '%s': %s", in->name, l8_last_error_string());
    unsigned char *got = tensor_host(f, t, in->bytes);
    FZ(f, in->bytes == 0 || !memcmp(got, payload, in->bytes), "section '%s' read wrong", in->name);
    free(got);
    l8_tensor_destroy(t);
    if (in->ndim >= 2) {                                  /* strided destination */
        int64_t sh[L8_MAX_DIMS];
        memcpy(sh, in->shape, sizeof sh);
        sh[0] = in->shape[1];
        sh[1] = in->shape[0];
        l8_tensor *base = NULL, *view = NULL;
        st = l8_tensor_empty(ctx, in->dtype, in->ndim, sh, &base);
        FZ(f, st == L8_OK, "transposed tensor: %s", l8_last_error_string());
        st = l8_tensor_transpose(base, 0, 1, &view);
        FZ(f, st == L8_OK, "l8_tensor_transpose: %s", l8_last_error_string());
        st = l8_ckpt_read_tensor(rd, in->name, view);
        FZ(f, st == L8_OK, "l8_ckpt_read_tensor '%s' (strided): %s", in->name,
           l8_last_error_string());
        got = tensor_host(f, view, in->bytes);
        FZ(f, in->bytes == 0 || !memcmp(got, payload, in->bytes),
           "section '%s' read wrong (strided)", in->name);
        free(got);
        l8_tensor_destroy(view);
        l8_tensor_destroy(base);
    }
    /* another dtype: refused, naming the file */
    l8_dtype other = (l8_dtype)((in->dtype + 1) % L8_DTYPE_COUNT);
    st = l8_tensor_empty(ctx, other, in->ndim, in->shape, &t);
    if (st == L8_OK) {
        l8_error_clear();
        st = l8_ckpt_read_tensor(rd, in->name, t);
        fz_error(f, st, "l8_ckpt_read_tensor (another dtype)", path);
        l8_tensor_destroy(t);
    }
}

/* Everything a checkpoint offers, read and cross-checked. */
static void ck_read_all(fuzz *f, l8_ctx *ctx, const char *path, size_t file_bytes, int must_open)
{
    l8_ckpt_reader *rd = (l8_ckpt_reader *)&rd;          /* must become NULL on failure */
    l8_error_clear();
    l8_status st = l8_ckpt_open(path, &rd);
    FZ(f, st == L8_OK || !must_open, "the seed does not open: %s", l8_last_error_string());
    if (st != L8_OK) {
        FZ(f, rd == NULL, "a failed l8_ckpt_open returned a reader");
        fz_error(f, st, "l8_ckpt_open", path);
        return;
    }
    const char *kind = l8_ckpt_kind(rd);
    FZ(f, kind[0] && strlen(kind) <= L8_CKPT_KIND_MAX, "kind '%s'", kind);
    l8_error_clear();
    st = l8_ckpt_expect(rd, CK_KIND, CK_USER);
    if (st != L8_OK) fz_error(f, st, "l8_ckpt_expect", path);
    size_t n = l8_ckpt_section_count(rd);
    FZ(f, n <= file_bytes / CK_ENTRY, "%zu sections in %zu bytes", n, file_bytes);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        l8_ckpt_section_info in, by_name;
        st = l8_ckpt_section_at(rd, i, &in);
        FZ(f, st == L8_OK, "l8_ckpt_section_at %zu: %s", i, l8_last_error_string());
        size_t len = strlen(in.name);
        FZ(f, len >= 1 && len <= L8_CKPT_NAME_MAX, "section %zu: name of %zu bytes", i, len);
        FZ(f, l8_ckpt_has(rd, in.name), "section '%s' listed but not found", in.name);
        st = l8_ckpt_find(rd, in.name, &by_name);
        FZ(f, st == L8_OK && by_name.name == in.name && by_name.bytes == in.bytes,
           "l8_ckpt_find '%s' disagrees with l8_ckpt_section_at", in.name);
        const void *p = NULL;
        size_t bytes = 0;
        st = l8_ckpt_section(rd, in.name, &p, &bytes);
        FZ(f, st == L8_OK && bytes == in.bytes && (bytes == 0) == (p == NULL) &&
           (uintptr_t)p % L8_CKPT_ALIGN == 0, "l8_ckpt_section '%s'", in.name);
        total += bytes;
        FZ(f, total <= file_bytes, "sections hold %zu bytes of a %zu-byte file", total,
           file_bytes);
        unsigned char *copy = l8t_xmalloc(bytes + 1);
        st = l8_ckpt_read_section_into(rd, in.name, copy, bytes);
        FZ(f, st == L8_OK && (bytes == 0 || !memcmp(copy, p, bytes)),
           "l8_ckpt_read_section_into '%s'", in.name);
        l8_error_clear();
        st = l8_ckpt_read_section_into(rd, in.name, copy, bytes + 1);
        fz_error(f, st, "l8_ckpt_read_section_into (one byte more)", path);
        free(copy);
        if (in.is_tensor) {
            FZ(f, (unsigned)in.dtype < L8_DTYPE_COUNT && in.ndim >= 0 && in.ndim <= L8_MAX_DIMS,
               "section '%s': dtype %d, %d dims", in.name, (int)in.dtype, in.ndim);
            ck_read_tensor(f, ctx, rd, &in, p, path);
        } else {
            l8_tensor *t = NULL;
            int64_t one = 1;
            L8_CK(l8_tensor_empty(ctx, L8_U8, 1, &one, &t));
            l8_error_clear();
            st = l8_ckpt_check_tensor(rd, in.name, t);
            fz_error(f, st, "l8_ckpt_check_tensor (byte section)", path);
            l8_tensor_destroy(t);
        }
    }
    l8_ckpt_section_info in;
    l8_error_clear();
    st = l8_ckpt_section_at(rd, n, &in);
    fz_error(f, st, "l8_ckpt_section_at (past the end)", path);
    l8_ckpt_close(rd);
}

/* The seed: byte sections (empty, short, long) and a tensor of every dtype
 * in shapes from a scalar to 4 dimensions, some empty. */
static void ck_write_seed(l8_ctx *ctx, const char *path)
{
    static const int64_t shapes[][4] = {
        { 2, 3 }, { 5 }, { 0 }, { 2, 0, 3 }, { 1, 2, 1, 3 }, { 3, 1 }, { 4, 2, 2 },
    };
    static const int ndims[] = { 2, 1, 0, 3, 4, 2, 3 };
    l8_rng r;
    l8_rng_init(&r, 1);
    r.s = 0x1234567u;                                     /* the seed file never varies */
    unsigned char blob[200];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)l8_rng_next(&r);
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, CK_KIND, CK_USER, &w));
    L8_CK(l8_ckpt_write_section(w, "empty", NULL, 0));
    L8_CK(l8_ckpt_write_section(w, "abc", "abc", 3));
    L8_CK(l8_ckpt_write_section(w, "blob", blob, sizeof blob));
    for (int dt = 0; dt < L8_DTYPE_COUNT; dt++) {
        l8_tensor *t = NULL;
        L8_CK(l8_tensor_empty(ctx, (l8_dtype)dt, ndims[dt], shapes[dt], &t));
        size_t n = l8_tensor_nbytes(t);
        L8_CK(l8_tensor_copy_from_host(t, blob, n, NULL));
        char name[32];
        snprintf(name, sizeof name, "t.%s", l8_dtype_name((l8_dtype)dt));
        L8_CK(l8_ckpt_write_tensor(w, name, t));
        l8_tensor_destroy(t);
    }
    L8_CK(l8_ckpt_writer_commit(w));
}

START_TEST(test_fuzz_checkpoint)
{
    fuzz f;
    fuzz_begin(&f, "checkpoint", 3000);
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    const char *seed_path = l8t_tmp_file(&f.tmp, "seed.l8ckpt");
    const char *empty_path = l8t_tmp_file(&f.tmp, "empty.l8ckpt");
    const char *path = l8t_tmp_file(&f.tmp, "mutated.l8ckpt");
    ck_write_seed(ctx, seed_path);
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(empty_path, CK_KIND, CK_USER, &w));
    L8_CK(l8_ckpt_writer_commit(w));
    fzbuf seeds[2] = { { 0 }, { 0 } }, b = { 0 };
    slurp(seed_path, &seeds[0]);
    slurp(empty_path, &seeds[1]);
    ck_read_all(&f, ctx, seed_path, seeds[0].n, 1);       /* the seeds read as they are */
    ck_read_all(&f, ctx, empty_path, seeds[1].n, 1);
    long opened = 0;
    for (long i = f.first; i < f.first + f.iters; i++) {
        l8_rng r;
        fuzz_iter(&f, &r, i, 1);
        int s = l8_rng_below(&r, 5) == 0;                 /* the empty one, sometimes */
        b_set(&b, seeds[s].p, seeds[s].n);
        note(&f, "seed %s", s ? "empty" : "full");
        ck_mutate_file(&f, &r, &b, i);
        spit(&f, path, b.p, b.n);
        ck_read_all(&f, ctx, path, b.n, 0);
        l8_ckpt_reader *rd = NULL;
        if (l8_ckpt_open(path, &rd) == L8_OK) opened++;
        l8_ckpt_close(rd);
    }
    printf("fuzz checkpoint: %ld of %ld mutated files opened\n", opened, f.iters);
    /* Not every mutation may be refused, nor every one accepted: the fixed
     * checksums must reach the parser behind them. */
    ck_assert_msg(f.iters < 100 || (opened > 0 && opened < f.iters), "opened %ld of %ld", opened,
                  f.iters);
    b_free(&b);
    b_free(&seeds[0]);
    b_free(&seeds[1]);
    l8t_ctx_finish(ctx);
    fuzz_end(&f);
}
END_TEST

/* ================================================================ GEMM plan cache */

static l8i_gemm_cache_entry gc_entry(uint64_t seed)
{
    l8i_gemm_cache_entry e;
    memset(&e, 0, sizeof e);
    e.key.m = 64 * seed;
    e.key.n = 128 + seed;
    e.key.k = 256;
    e.ws_bytes = 32u << 20;
    e.flags = (uint64_t)seed << 32;
    for (int i = 0; i < 8; i++) e.algo[i] = 0x9E3779B97F4A7C15ull * (seed + 1) + (uint64_t)i;
    return e;
}

static l8i_gemm_cache gc_at(const char *path)
{
    static const l8i_gemm_cache_id id = { "fuzz device", 132, 130100 };
    l8i_gemm_cache c;
    memset(&c, 0, sizeof c);
    c.path = (char *)path;        /* owned by the test */
    c.id = id;
    return c;
}

/* Load: LOADED or IGNORED (with a reason), never a last error; what loads
 * can be found. Sometimes also save over it: a corrupt file never stops a
 * save, and what was saved loads. */
static void gc_read(fuzz *f, const char *path, int save)
{
    l8i_gemm_cache c = gc_at(path);
    char why[512];
    l8_error_clear();
    int res = l8i_gemm_cache_load(&c, why, sizeof why);
    FZ(f, l8_last_error()->status == L8_OK, "a load left an error: %s", l8_last_error_string());
    FZ(f, res == L8I_GCACHE_LOADED || res == L8I_GCACHE_IGNORED, "load -> %d", res);
    if (res == L8I_GCACHE_IGNORED) {
        FZ(f, why[0] && c.n == 0 && c.e == NULL, "ignored: why '%s', %zu entries", why, c.n);
    } else {
        for (size_t i = 0; i < c.n; i++) {
            const l8i_gemm_cache_entry *e = &c.e[i];
            FZ(f, l8i_gemm_cache_find(&c, &e->key, e->ws_bytes, (int)(e->flags & L8I_GCE_PRECISE)),
               "loaded entry %zu not found", i);
        }
    }
    if (save) {
        l8i_gemm_cache_entry e = gc_entry(99);
        L8_CK(l8i_gemm_cache_put(&c, &e));
        l8_status st = l8i_gemm_cache_save(&c);
        FZ(f, st == L8_OK, "save over the mutated file: %s", l8_last_error_string());
        l8i_gemm_cache_clear(&c);
        res = l8i_gemm_cache_load(&c, why, sizeof why);
        FZ(f, res == L8I_GCACHE_LOADED && l8i_gemm_cache_find(&c, &e.key, e.ws_bytes, 0),
           "what was saved does not load: %d, %s", res, why);
    }
    l8i_gemm_cache_clear(&c);
}

START_TEST(test_fuzz_gemm_cache)
{
    fuzz f;
    fuzz_begin(&f, "gemm-cache", 1500);
    const char *seed_path = l8t_tmp_file(&f.tmp, "seed.l8c");
    const char *path = l8t_tmp_file(&f.tmp, "mutated.l8c");
    l8i_gemm_cache c = gc_at(seed_path);
    for (uint64_t s = 1; s <= 3; s++) {
        l8i_gemm_cache_entry e = gc_entry(s);
        L8_CK(l8i_gemm_cache_put(&c, &e));
    }
    L8_CK(l8i_gemm_cache_save(&c));
    l8i_gemm_cache_clear(&c);
    fzbuf seed = { 0 }, b = { 0 };
    slurp(seed_path, &seed);
    long loaded = 0;
    for (long i = f.first; i < f.first + f.iters; i++) {
        l8_rng r;
        fuzz_iter(&f, &r, i, 2);
        b_set(&b, seed.p, seed.n);
        ck_mutate_file(&f, &r, &b, i);
        spit(&f, path, b.p, b.n);
        gc_read(&f, path, i % 16 == 15);
        l8i_gemm_cache lc = gc_at(path);
        char why[256];
        if (i % 16 != 15 && l8i_gemm_cache_load(&lc, why, sizeof why) == L8I_GCACHE_LOADED)
            loaded++;
        l8i_gemm_cache_clear(&lc);
    }
    printf("fuzz gemm-cache: %ld of %ld mutated files loaded\n", loaded, f.iters);
    b_free(&b);
    b_free(&seed);
    fuzz_end(&f);
}
END_TEST

/* ================================================================ trace files */

#define TR_REC 48u

/* docs/trace-format.md: header fields, then a record's. */
static const field k_tr_hdr[] = {
    { 8, 4, "version" }, { 12, 4, "record_size" }, { 16, 4, "header_size" }, { 20, 4, "pid" },
    { 40, 4, "rank" }, { 44, 4, "device" },
};
static const field k_tr_rec[] = {
    { 0, 8, "time_ns" }, { 8, 8, "addr" }, { 16, 8, "size" }, { 24, 8, "stream" },
    { 32, 8, "aux" }, { 40, 4, "tag" }, { 44, 2, "kind" }, { 46, 2, "device" },
};

/* A format-aware edit: a header or record field (kinds and string lengths
 * from the format's own values), a record dropped, repeated or moved. */
static void tr_mutate(fuzz *f, l8_rng *r, fzbuf *b)
{
    size_t nrec = b->n > TR_REC ? (b->n - TR_REC) / TR_REC : 0;
    unsigned op = (unsigned)l8_rng_below(r, 6);
    if (b->n < TR_REC || (nrec == 0 && op)) return mutate_bytes(f, r, b, NULL, 0);
    if (op == 0) {
        const field *fd = &k_tr_hdr[l8_rng_below(r, NFIELDS(k_tr_hdr))];
        uint64_t v = pick_value(r, get_le(b->p + fd->off, (int)fd->w), (int)fd->w);
        put_le(b->p + fd->off, (int)fd->w, v);
        note(f, "header %s = 0x%" PRIx64, fd->name, v);
        return;
    }
    size_t i = (size_t)l8_rng_below(r, nrec), j = (size_t)l8_rng_below(r, nrec);
    unsigned char *rec = b->p + TR_REC + i * TR_REC;
    if (op <= 2) {
        const field *fd = &k_tr_rec[l8_rng_below(r, NFIELDS(k_tr_rec))];
        uint64_t v = pick_value(r, get_le(rec + fd->off, (int)fd->w), (int)fd->w);
        if (fd->off == 44 && l8_rng_below(r, 2)) {
            static const uint16_t kinds[] = { 0, 1, 2, 9, 11, 12, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF };
            v = kinds[l8_rng_below(r, sizeof kinds / sizeof kinds[0])];
        } else if (fd->off == 16 && l8_rng_below(r, 2)) {
            static const uint64_t lens[] = { 0, 1, 47, 48, 49, 4095, 4096, 4097, 1ull << 32 };
            v = lens[l8_rng_below(r, sizeof lens / sizeof lens[0])];
        }
        put_le(rec + fd->off, (int)fd->w, v);
        note(f, "record %zu %s = 0x%" PRIx64, i, fd->name, v);
    } else if (op == 3) {
        b_remove(b, TR_REC + i * TR_REC, TR_REC);
        note(f, "record %zu dropped", i);
    } else if (op == 4) {
        b_insert(b, TR_REC + j * TR_REC, b->p + TR_REC + i * TR_REC, TR_REC);
        note(f, "record %zu repeated at %zu", i, j);
    } else {
        unsigned char tmp[TR_REC], *o = b->p + TR_REC + j * TR_REC;
        memcpy(tmp, rec, TR_REC);
        memcpy(rec, o, TR_REC);
        memcpy(o, tmp, TR_REC);
        note(f, "records %zu and %zu swapped", i, j);
    }
}

/* Read every event; the reader must move forward or stop, a corrupt record
 * stays an error, every tag an event names exists, and lean8-trace's model
 * replays the same events. */
static void tr_read_all(fuzz *f, const char *path, size_t file_bytes, int must_read)
{
    l8_trace_reader *rd = (l8_trace_reader *)&rd;
    l8_error_clear();
    l8_status st = l8_trace_reader_open(path, &rd);
    FZ(f, st == L8_OK || !must_read, "the seed does not open: %s", l8_last_error_string());
    if (st != L8_OK) {
        FZ(f, rd == NULL, "a failed l8_trace_reader_open returned a reader");
        fz_error(f, st, "l8_trace_reader_open", path);
        return;
    }
    uint64_t events = 0, calls = 0;
    int corrupt = 0;
    for (;;) {
        l8_trace_event ev;
        int got = 0;
        FZ(f, ++calls <= file_bytes / TR_REC + 2, "more than %zu records in %zu bytes",
           file_bytes / TR_REC + 1, file_bytes);
        st = l8_trace_reader_next(rd, &ev, &got);
        FZ(f, st == L8_OK || !must_read, "the seed does not read: %s", l8_last_error_string());
        if (st != L8_OK) {
            fz_error(f, st, "l8_trace_reader_next", path);
            FZ(f, l8_trace_reader_next(rd, &ev, &got) == st && !got,
               "the reader moved past a corrupt record");
            corrupt = 1;
            break;
        }
        if (!got) break;
        events++;
        FZ(f, ev.kind >= 1 && ev.kind < 0x8000 && ev.device >= -1, "event kind %u device %d",
           ev.kind, ev.device);
        if (ev.tag) {
            const char *name = l8_trace_reader_tag_name(rd, ev.tag);
            FZ(f, name && name[0] && strlen(name) <= 4096, "event tag %u has no name", ev.tag);
        }
    }
    l8_trace_file_info in;
    memset(&in, 0, sizeof in);
    in.size = sizeof in;
    st = l8_trace_reader_info(rd, &in);
    FZ(f, st == L8_OK, "l8_trace_reader_info: %s", l8_last_error_string());
    FZ(f, (in.version == 1 || in.version == 2) && in.offset <= in.file_bytes &&
       in.file_bytes == file_bytes && !in.shrunk, "info: version %u, offset %llu of %llu bytes",
       in.version, (unsigned long long)in.offset, (unsigned long long)in.file_bytes);
    l8_trace_reader_close(rd);

    trace_model m;
    FZ(f, tm_open(&m, path) == 0, "lean8-trace's model cannot open what the reader opened");
    uint64_t applied = tm_pump(&m);
    FZ(f, applied == events && m.corrupt == corrupt, "the model applied %llu events (corrupt %d),"
       " the reader returned %llu (corrupt %d)", (unsigned long long)applied, m.corrupt,
       (unsigned long long)events, corrupt);
    FZ(f, m.ntags >= 1 && m.nblocks * 2 <= m.cap_blocks,
       "model tables: %u tags, %zu of %zu blocks", m.ntags, m.nblocks, m.cap_blocks);
    tm_close(&m);
}

/* A version 2 trace with tags (one long enough for several records), every
 * event kind, host and device events, and its end marker. big: also 700
 * live blocks freed in a scrambled order (the model's table grows, and
 * deletes move probe chains). */
static void tr_write_seed(const char *path, int big)
{
    l8_trace_config cfg = L8_TRACE_CONFIG_INIT;
    cfg.path = path;
    cfg.rank = 3;
    cfg.device = -1;
    l8_trace *t = NULL;
    L8_CK(l8_trace_create(&cfg, &t));
    char long_tag[128];
    memset(long_tag, 'q', 127);
    long_tag[127] = '\0';
    static const char *const tags[] = { "embed", "layer0.fc1", NULL, "x" };
    for (int k = 0; k < 4; k++) {
        L8_CK(l8_tag_push(tags[k] ? tags[k] : long_tag));
        uint64_t a = 0x10000ull * (uint64_t)(k + 1);
        l8_trace_record(t, L8_TRACE_SEGMENT_ALLOC, 0, 0, a, 1 << 20, 0);
        l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, a, 4096u << k, 4000);
        l8_trace_record(t, L8_TRACE_PINNED_ALLOC, -1, 0, a + 8, 512, 0);
        l8_trace_record(t, L8_TRACE_OFFLOAD_OUT, 0, 3, a, 4096, a + 8);
        l8_trace_record(t, L8_TRACE_OFFLOAD_IN, 0, 3, a, 4096, a + 8);
        if (k % 2) {
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, a, 4096u << k, 4000);
            l8_trace_record(t, L8_TRACE_FREE_COMPLETED, 0, 1, a, 4096u << k, 4000);
            l8_trace_record(t, L8_TRACE_PINNED_FREE, -1, 0, a + 8, 512, 0);
        }
        l8_trace_record(t, L8_TRACE_OOM, 0, 1, 0, 1ull << 40, 1 << 20);
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, (uint64_t)k);
        L8_CK(l8_tag_pop());
    }
    l8_trace_record(t, L8_TRACE_SEGMENT_FREE, 0, 0, 0x10000, 1 << 20, 0);
    for (uint64_t k = 0; big && k < 700; k++)
        l8_trace_record(t, L8_TRACE_ALLOC, (int)(k % 2), 1, 0x100000 + 512 * k, 512, 500);
    for (uint64_t k = 0; big && k < 700; k++)
        l8_trace_record(t, L8_TRACE_FREE_REQUESTED, (int)(k * 7 % 700 % 2), 1,
                        0x100000 + 512 * (k * 7 % 700), 512, 500);
    L8_CK(l8_trace_flush(t));
    l8_trace_destroy(t);
}

/* The same trace as version 1 wrote it: reserved header field, no end marker. */
static void tr_to_v1(fzbuf *b)
{
    put_le(b->p + 8, 4, 1);
    memset(b->p + 40, 0, 8);
    for (size_t off = TR_REC; off + TR_REC <= b->n;) {
        uint16_t kind = (uint16_t)get_le(b->p + off + 44, 2);
        if (kind == 0xFFFE) {
            b_remove(b, off, TR_REC);
            continue;
        }
        uint64_t len = kind == 0xFFFF ? get_le(b->p + off + 16, 8) : 0;   /* a string's bytes */
        off += TR_REC + (len + TR_REC - 1) / TR_REC * TR_REC;
    }
}

START_TEST(test_fuzz_trace)
{
    fuzz f;
    fuzz_begin(&f, "trace", 3000);
    const char *seed_path = l8t_tmp_file(&f.tmp, "seed.l8trace");
    const char *path = l8t_tmp_file(&f.tmp, "mutated.l8trace");
    tr_write_seed(seed_path, 0);
    fzbuf seeds[3] = { { 0 }, { 0 }, { 0 } }, b = { 0 };
    slurp(seed_path, &seeds[0]);
    slurp(seed_path, &seeds[1]);
    tr_to_v1(&seeds[1]);
    ck_assert_uint_eq(seeds[0].n - seeds[1].n, TR_REC);   /* one end marker */
    unlink(seed_path);
    tr_write_seed(seed_path, 1);
    slurp(seed_path, &seeds[2]);
    for (int s = 0; s < 3; s++) {                         /* the seeds read whole */
        spit(&f, path, seeds[s].p, seeds[s].n);
        tr_read_all(&f, path, seeds[s].n, 1);
    }
    size_t cuts[512];
    int ncuts = 0;
    for (size_t c = 0; c <= seeds[0].n && ncuts < 512; c += TR_REC) cuts[ncuts++] = c;
    long corrupt = 0;
    for (long i = f.first; i < f.first + f.iters; i++) {
        l8_rng r;
        fuzz_iter(&f, &r, i, 3);
        unsigned pick = (unsigned)l8_rng_below(&r, 12);
        int s = pick < 7 ? 0 : pick < 11 ? 1 : 2;
        b_set(&b, seeds[s].p, seeds[s].n);
        note(&f, "seed %s", s == 0 ? "version 2" : s == 1 ? "version 1" : "version 2, 700 blocks");
        if (i < 2L * ncuts) {                 /* every record boundary, and one byte short */
            size_t c = cuts[i / 2] - (i % 2 && cuts[i / 2] ? 1 : 0);
            b.n = c < b.n ? c : b.n;
            note(&f, "truncated to %zu bytes", b.n);
        } else {
            int k = 1 + (int)l8_rng_below(&r, 3);
            for (int m = 0; m < k; m++) {
                if (l8_rng_below(&r, 2)) tr_mutate(&f, &r, &b);
                else mutate_bytes(&f, &r, &b, cuts, ncuts);
            }
        }
        spit(&f, path, b.p, b.n);
        tr_read_all(&f, path, b.n, 0);
        l8_trace_reader *rd = NULL;
        if (l8_trace_reader_open(path, &rd) != L8_OK) corrupt++;
        l8_trace_reader_close(rd);
    }
    printf("fuzz trace: %ld of %ld mutated files refused at open\n", corrupt, f.iters);
    b_free(&b);
    for (int k = 0; k < 3; k++) b_free(&seeds[k]);
    fuzz_end(&f);
}
END_TEST

/* ================================================================ Fashion-MNIST */

#define FM_N 3

/* The test names these first, in this order: f->tmp.path[k] is k_fm_names[k]. */
static const char *const k_fm_names[] = {
    "train-images-idx3-ubyte.gz", "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte",
};

static void fm_idx(fzbuf *b, uint32_t magic, int images)
{
    size_t head = images ? 16 : 8, per = images ? FMNIST_PIXELS : 1;
    b_reserve(b, head + FM_N * per);
    put_be(b->p, 4, magic);
    put_be(b->p + 4, 4, FM_N);
    if (images) {
        put_be(b->p + 8, 4, FMNIST_ROWS);
        put_be(b->p + 12, 4, FMNIST_COLS);
    }
    for (size_t i = 0; i < FM_N * per; i++)
        b->p[head + i] = (unsigned char)(images ? (i * 7) & 0xFF : i % FMNIST_CLASSES);
    b->n = head + FM_N * per;
}

/* Whole records dropped from or added at the end of an IDX file, with its
 * count made to agree: a well-formed file whose count differs from the
 * other file's (and, added, labels out of range). */
static void fm_resize(fuzz *f, l8_rng *r, fzbuf *b, int images)
{
    size_t head = images ? 16 : 8, per = images ? FMNIST_PIXELS : 1;
    if (b->n < head) return;
    size_t n = (b->n - head) / per;
    if (n && l8_rng_below(r, 2)) {
        size_t k = 1 + (size_t)l8_rng_below(r, n);
        b->n = head + (n - k) * per;
        put_be(b->p + 4, 4, n - k);
        note(f, "%zu records dropped, count %zu", k, n - k);
    } else {
        size_t k = 1 + (size_t)l8_rng_below(r, 3);
        b_reserve(b, head + (n + k) * per);
        for (size_t i = 0; i < k * per; i++)
            b->p[head + n * per + i] = (unsigned char)l8_rng_next(r);
        b->n = head + (n + k) * per;
        put_be(b->p + 4, 4, n + k);
        note(f, "%zu random records added, count %zu", k, n + k);
    }
}

/* Write one file of the pair: plain, or gzipped (fmnist_gz_write). */
static void fm_put(fuzz *f, int images, int gz, const fzbuf *b)
{
    for (int k = 0; k < 2; k++) unlink(f->tmp.path[images ? k : 2 + k]);
    const char *p = f->tmp.path[(images ? 0 : 2) + (gz ? 0 : 1)];
    if (gz == 1) {
        l8_status st = fmnist_gz_write(p, b->p, b->n);
        FZ(f, st == L8_OK, "fmnist_gz_write: %s", l8_last_error_string());
    } else {
        spit(f, p, b->p, b->n);                           /* plain, or gzip bytes as they are */
    }
}

/* Load: all of it checked (labels, a batch of every image), or refused
 * with the outputs untouched and a message naming a file. One of the two
 * files is always the seed's, so a load has exactly FM_N images. */
static void fm_read(fuzz *f, int must_load)
{
    fmnist_data ds;
    memset(&ds, 0xA5, sizeof ds);
    fmnist_data poison = ds;
    l8_error_clear();
    l8_status st = fmnist_load(f->tmp.dir, "train", &ds);
    FZ(f, st == L8_OK || !must_load, "the seed files do not load: %s", l8_last_error_string());
    if (st != L8_OK) {
        fz_error(f, st, "fmnist_load", NULL);
        FZ(f, strstr(l8_last_error()->message, "Fashion-MNIST"), "message: %s",
           l8_last_error()->message);
        FZ(f, strstr(l8_last_error()->message, f->tmp.dir), "the message names no file: %s",
           l8_last_error()->message);
        FZ(f, !memcmp(&ds, &poison, sizeof ds), "a failed load changed its output");
        return;
    }
    FZ(f, ds.n == FM_N, "%zu images, the untouched file has %d", ds.n, FM_N);
    int64_t *idx = l8t_xmalloc(ds.n * sizeof *idx);
    float *x = l8t_xmalloc(ds.n * FMNIST_PIXELS * sizeof *x);
    int32_t *y = l8t_xmalloc(ds.n * sizeof *y);
    for (size_t i = 0; i < ds.n; i++) idx[i] = (int64_t)i;
    st = fmnist_batch(&ds, idx, ds.n, x, y);
    FZ(f, st == L8_OK, "fmnist_batch: %s", l8_last_error_string());
    for (size_t i = 0; i < ds.n; i++) FZ(f, y[i] >= 0 && y[i] < FMNIST_CLASSES, "label %d", y[i]);
    free(idx);
    free(x);
    free(y);
    fmnist_free(&ds);
}

START_TEST(test_fuzz_fmnist)
{
    fuzz f;
    fuzz_begin(&f, "fmnist", 1000);
    for (int k = 0; k < 4; k++) l8t_tmp_file(&f.tmp, k_fm_names[k]);
    fzbuf idx[2] = { { 0 }, { 0 } }, gzs[2] = { { 0 }, { 0 } }, b = { 0 };
    fm_idx(&idx[0], 0x00000803u, 1);
    fm_idx(&idx[1], 0x00000801u, 0);
    for (int k = 0; k < 2; k++) {                         /* the gzip seeds, as zlib writes them */
        fm_put(&f, k == 0, 1, &idx[k]);
        slurp(f.tmp.path[k == 0 ? 0 : 2], &gzs[k]);
    }
    fm_read(&f, 1);
    size_t cuts[FM_N + 8];
    int ncuts = 0;
    for (size_t c = 0; c <= 16; c += 4) cuts[ncuts++] = c;
    for (size_t i = 1; i <= FM_N; i++) cuts[ncuts++] = 16 + i * FMNIST_PIXELS;
    long loaded = 0;
    for (long i = f.first; i < f.first + f.iters; i++) {
        l8_rng r;
        fuzz_iter(&f, &r, i, 4);
        int images = l8_rng_below(&r, 3) != 0;
        int mode = (int)l8_rng_below(&r, 3);   /* 0 plain, 1 IDX then gzip, 2 gzip bytes */
        note(&f, "%s, %s", images ? "images" : "labels",
             mode == 0 ? "plain IDX" : mode == 1 ? "IDX mutated, then gzipped" : "gzip bytes");
        const fzbuf *from = mode == 2 ? &gzs[!images] : &idx[!images];
        b_set(&b, from->p, from->n);
        int k = 1 + (int)l8_rng_below(&r, 3);
        for (int m = 0; m < k; m++) {
            if (mode != 2 && l8_rng_below(&r, 6) == 0) fm_resize(&f, &r, &b, images);
            else mutate_bytes(&f, &r, &b, mode == 2 ? NULL : cuts, mode == 2 ? 0 : ncuts);
        }
        fm_put(&f, images, mode, &b);
        fm_put(&f, !images, (int)l8_rng_below(&r, 2), &idx[images]);
        fm_read(&f, 0);
        fmnist_data ds;
        if (fmnist_load(f.tmp.dir, "train", &ds) == L8_OK) {
            loaded++;
            fmnist_free(&ds);
        }
    }
    printf("fuzz fmnist: %ld of %ld mutated pairs loaded\n", loaded, f.iters);
    b_free(&b);
    for (int k = 0; k < 2; k++) {
        b_free(&idx[k]);
        b_free(&gzs[k]);
    }
    fuzz_end(&f);
}
END_TEST

Suite *l8_fuzz_suite(void)
{
    Suite *s = suite_create("fuzz");
    TCase *tc = tcase_create("readers");
    tcase_add_test(tc, test_fuzz_checkpoint);
    tcase_add_test(tc, test_fuzz_gemm_cache);
    tcase_add_test(tc, test_fuzz_trace);
    tcase_add_test(tc, test_fuzz_fmnist);
    tcase_add_checked_fixture(tc, NULL, fuzz_teardown);
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return s;
}
