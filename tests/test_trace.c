/* test_trace.c - the trace recorder, its file format and its reader.
 *
 * Files go to a fresh mkdtemp directory per test. Hand-made files are built
 * from the byte offsets in docs/trace-format.md, not from trace.c's structs,
 * so the format document is tested too. Worker threads never call ck_assert
 * (it cannot unwind another thread under CK_FORK=no); they count mismatches.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "tests/tests.h"
#include "alloc/trace.h"
#include "tests/trace_known.h"

/* ---- temp files ---- */

typedef l8t_tmpdir tmpdir;
#define tmp_init(d) l8t_tmp_init((d), "l8trace")
#define tmp_file l8t_tmp_file

static void tmp_cleanup(tmpdir *d)
{
    for (int i = 0; i < d->n; i++) unlink(d->path[i]);
    ck_assert_msg(rmdir(d->dir) == 0, "rmdir %s: %s", d->dir, strerror(errno));
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;           /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ck_assert writes a location record on every call, even when it passes;
 * in per-event loops check first and only then fail. */
#define EXPECT(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

/* ---- the expected content of thread tid's event seq ---- */

typedef struct want_event {
    uint16_t kind;
    int16_t device;
    uint64_t addr, size, aux;
    uint64_t raw;                 /* the stream handle passed to l8_trace_record */
    uint64_t stream;              /* the role recorded for it (register_roles) */
    char tag[64];                 /* "" = no tag */
} want_event;

/* Handles 1001 and 1002 on every device the workers use have roles, 1003
 * has none (recorded as OTHER), 0 is no stream. */
static void register_roles(l8_trace *t)
{
    for (int dev = -1; dev <= 3; dev++) {
        L8_CK(l8_trace_set_stream(t, dev, 1001, L8_TRACE_STREAM_COMPUTE));
        L8_CK(l8_trace_set_stream(t, dev, 1002, L8_TRACE_STREAM_COMM));
    }
}

static void want(int tid, uint32_t seq, want_event *w)
{
    uint64_t h = mix(l8_test_seed() ^ ((uint64_t)tid << 40) ^ seq);
    w->kind = (uint16_t)(1 + h % 11);
    w->device = (int16_t)((int)((h >> 8) % 5) - 1);
    w->addr = ((uint64_t)tid << 32) | seq;
    w->size = mix(h) >> (h % 50);
    static const uint64_t roles[4] = { L8_TRACE_STREAM_NONE, L8_TRACE_STREAM_COMPUTE,
                                       L8_TRACE_STREAM_COMM, L8_TRACE_STREAM_OTHER };
    w->raw = seq % 4 ? 1000 + seq % 4 : 0;
    w->stream = roles[seq % 4];
    w->aux = mix(h ^ 1);
    if (seq == 0) w->tag[0] = '\0';
    else if (seq % 10 < 5) snprintf(w->tag, sizeof w->tag, "t%d.layer%u.fc1", tid, (seq / 10) % 3);
    else snprintf(w->tag, sizeof w->tag, "t%d.outer", tid);
}

typedef struct worker {
    l8_trace *t;
    int tid;
    uint32_t n;
    int flush_every;              /* 0: never */
    int errors;
} worker;

/* Records events 0..n-1 of thread tid with the tags of want(). */
static void *record_worker(void *arg)
{
    worker *w = arg;
    want_event e;
    char outer[64];
    snprintf(outer, sizeof outer, "t%d.outer", w->tid);
    for (uint32_t seq = 0; seq < w->n; seq++) {
        want(w->tid, seq, &e);
        if (seq == 1 && l8_tag_push(outer) != L8_OK) w->errors++;
        int inner = e.tag[0] && strcmp(e.tag, outer) != 0;
        if (inner && l8_tag_push(e.tag) != L8_OK) w->errors++;
        const char *cur = l8_tag_current();
        if (strcmp(cur ? cur : "", e.tag) != 0) w->errors++;
        l8_trace_record(w->t, (l8_trace_kind)e.kind, e.device, e.raw, e.addr, e.size, e.aux);
        if (inner && l8_tag_pop() != L8_OK) w->errors++;
        if (w->flush_every && seq % w->flush_every == 0 && l8_trace_flush(w->t) != L8_OK) w->errors++;
    }
    if (w->n > 1 && l8_tag_pop() != L8_OK) w->errors++;
    if (l8_tag_current() != NULL) w->errors++;
    return NULL;
}

/* Check one event against want(), and that each thread's events arrive in
 * program order. next_seq[tid] is the seq expected next. */
static void check_event(const l8_trace_event *ev, const char *tag, uint32_t *next_seq, int nthreads)
{
    int tid = (int)(ev->addr >> 32);
    uint32_t seq = (uint32_t)ev->addr;
    EXPECT(tid < nthreads, "event from unknown thread %d", tid);
    EXPECT(seq == next_seq[tid], "thread %d: event %u arrived, expected %u", tid, seq, next_seq[tid]);
    next_seq[tid]++;
    want_event w;
    want(tid, seq, &w);
    EXPECT(ev->kind == w.kind && ev->device == w.device && ev->size == w.size &&
           ev->stream == w.stream && ev->aux == w.aux,
           "thread %d event %u: kind %u dev %d size %llu stream %llu aux %llu, wanted kind %u "
           "dev %d size %llu stream %llu aux %llu", tid, seq, ev->kind, ev->device,
           (unsigned long long)ev->size, (unsigned long long)ev->stream,
           (unsigned long long)ev->aux, w.kind, w.device, (unsigned long long)w.size,
           (unsigned long long)w.stream, (unsigned long long)w.aux);
    EXPECT(!strcmp(tag ? tag : "", w.tag), "thread %d event %u: tag '%s', wanted '%s'", tid, seq,
           tag ? tag : "", w.tag);
    EXPECT((ev->tag == 0) == (w.tag[0] == 0), "tag id %u for tag '%s'", ev->tag, w.tag);
}

static void run_workers(worker *w, int n)
{
    pthread_t th[16];
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, record_worker, &w[i]), 0);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].errors == 0, "worker %d: %d tag errors", i, w[i].errors);
    }
}

/* ---- round trip ---- */

START_TEST(test_round_trip_threads)
{
    enum { T = 4 };
    uint32_t per = l8_test_quick() ? 500 : 5000;
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "rt.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    c.capacity = T * per;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    register_roles(t);
    worker w[T];
    for (int i = 0; i < T; i++) w[i] = (worker){ .t = t, .tid = i, .n = per };
    run_workers(w, T);
    ck_assert_uint_eq(l8_trace_count(t), T * per);
    ck_assert_uint_eq(l8_trace_held(t), T * per);
    L8_CK(l8_trace_flush(t));

    /* the ring, checked event by event */
    l8_trace_event *mem = malloc(sizeof *mem * T * per);
    ck_assert_ptr_nonnull(mem);
    ck_assert_uint_eq(l8_trace_events(t, 0, mem, T * per), T * per);
    uint32_t next[T] = { 0 };
    for (size_t i = 0; i < (size_t)T * per; i++) {
        check_event(&mem[i], l8_trace_tag_name(t, mem[i].tag), next, T);
        EXPECT(i == 0 || mem[i].time_ns >= mem[i - 1].time_ns, "time goes back at event %zu", i);
    }
    /* tag names live as long as the trace: copy them for the file check */
    char (*names)[64] = calloc((size_t)T * per, 64);
    ck_assert_ptr_nonnull(names);
    for (size_t i = 0; i < (size_t)T * per; i++) {
        const char *s = l8_trace_tag_name(t, mem[i].tag);
        snprintf(names[i], 64, "%s", s ? s : "");
    }
    ck_assert_ptr_null(l8_trace_tag_name(t, 0));
    ck_assert_ptr_null(l8_trace_tag_name(t, 100000));
    l8_trace_destroy(t);

    /* the file: the same events, byte for byte, with the same tag names */
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    l8_trace_event ev;
    int got;
    for (size_t i = 0; i < (size_t)T * per; i++) {
        l8_status st = l8_trace_reader_next(r, &ev, &got);
        EXPECT(st == L8_OK, "reader: %s", l8_last_error_string());
        EXPECT(got == 1, "file ended after %zu of %u events", i, T * per);
        EXPECT(memcmp(&ev, &mem[i], sizeof ev) == 0, "event %zu differs", i);
        const char *s = l8_trace_reader_tag_name(r, ev.tag);
        EXPECT(!strcmp(s ? s : "", names[i]), "event %zu: tag '%s', wanted '%s'", i, s, names[i]);
    }
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);
    l8_trace_reader_close(r);
    free(names);
    free(mem);
    tmp_cleanup(&d);
}
END_TEST

/* ---- hand-made files (offsets from docs/trace-format.md) ---- */

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static void make_header(unsigned char h[48], uint32_t version, uint32_t record_size)
{
    memset(h, 0, 48);
    memcpy(h, "L8TRACE", 8);                  /* includes the NUL */
    put32(h + 8, version);
    put32(h + 12, record_size);
    put32(h + 16, 48);                        /* header size */
    put32(h + 20, 1234);                      /* pid */
    put64(h + 24, 1700000000000000000ull);    /* start, realtime */
    put64(h + 32, 42);                        /* start, monotonic */
}

static void make_record(unsigned char r[48], uint64_t time, uint64_t addr, uint64_t size,
                        uint64_t stream, uint64_t aux, uint32_t tag, uint16_t kind, int16_t dev)
{
    put64(r, time);
    put64(r + 8, addr);
    put64(r + 16, size);
    put64(r + 24, stream);
    put64(r + 32, aux);
    put32(r + 40, tag);
    memcpy(r + 44, &kind, 2);
    memcpy(r + 46, &dev, 2);
}

static void append(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static void expect_open_fails(const char *path, l8_status want_st, const char *needle)
{
    l8_trace_reader *r = (l8_trace_reader *)&r;
    L8_CK_ST(l8_trace_reader_open(path, &r), want_st);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(l8_last_error()->message, needle) != NULL, "message '%s' lacks '%s'",
                  l8_last_error()->message, needle);
}

START_TEST(test_live_partial_records)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "live.l8trace");
    unsigned char h[48], rec[48], str[48 + 48];
    make_header(h, 1, 48);
    append(path, h, 48);
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    l8_trace_event ev;
    int got = 7;
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);                           /* nothing yet */

    make_record(rec, 10, 0x1000, 512, 3, 500, 0, L8_TRACE_ALLOC, 0);
    append(path, rec, 48);
    make_record(rec, 20, 0x1000, 512, 3, 0, 0, L8_TRACE_FREE_REQUESTED, -1);
    append(path, rec, 20);                              /* half a record */
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(ev.kind, L8_TRACE_ALLOC);
    ck_assert_uint_eq(ev.addr, 0x1000);
    ck_assert_uint_eq(ev.aux, 500);
    for (int i = 0; i < 3; i++) {                       /* stays put until it is whole */
        L8_CK(l8_trace_reader_next(r, &ev, &got));
        ck_assert_int_eq(got, 0);
    }
    append(path, rec + 20, 28);
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(ev.kind, L8_TRACE_FREE_REQUESTED);
    ck_assert_uint_eq(ev.time_ns, 20);
    ck_assert_int_eq(ev.device, -1);

    /* a string record whose bytes are not there yet */
    memset(str, 0, sizeof str);
    make_record(str, 25, 0, 10, 0, 0, 1, 0xFFFF, 0);
    memcpy(str + 48, "layer3.fc1", 10);
    append(path, str, 48 + 5);
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);
    ck_assert_ptr_null(l8_trace_reader_tag_name(r, 1));
    append(path, str + 53, 43);
    make_record(rec, 30, 0x2000, 1024, 0, 1000, 1, L8_TRACE_ALLOC, 2);
    append(path, rec, 48);
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(ev.tag, 1);
    ck_assert_str_eq(l8_trace_reader_tag_name(r, 1), "layer3.fc1");
    ck_assert_int_eq(ev.device, 2);
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);
    l8_trace_reader_close(r);
    tmp_cleanup(&d);
}
END_TEST

typedef struct live_arg {
    l8_trace *t;
    uint32_t n;
    int errors;
} live_arg;

static void *live_writer(void *arg)
{
    live_arg *a = arg;
    for (uint32_t i = 0; i < a->n; i++) {
        l8_trace_record(a->t, L8_TRACE_ALLOC, 0, 0, i, (uint64_t)i * 3, i ^ 0x55);
        if (i % 97 == 0) {
            if (l8_trace_flush(a->t) != L8_OK) a->errors++;
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    }
    if (l8_trace_flush(a->t) != L8_OK) a->errors++;
    return NULL;
}

START_TEST(test_live_concurrent_reader)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "live2.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    c.capacity = 16;                     /* the file keeps everything, the ring need not */
    live_arg a = { .n = l8_test_quick() ? 2000 : 20000 };
    L8_CK(l8_trace_create(&c, &a.t));
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));   /* the header is there at once */
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, live_writer, &a), 0);
    uint32_t seen = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (seen < a.n) {
        l8_trace_event ev;
        int got;
        l8_status st = l8_trace_reader_next(r, &ev, &got);
        EXPECT(st == L8_OK, "reader: %s", l8_last_error_string());
        if (!got) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            EXPECT(now.tv_sec - t0.tv_sec < 30, "live reader stuck at %u of %u", seen, a.n);
            struct timespec ts = { 0, 100000 };
            nanosleep(&ts, NULL);
            continue;
        }
        EXPECT(ev.addr == seen && ev.size == (uint64_t)seen * 3 && ev.aux == (seen ^ 0x55),
               "live event %u: addr %llu size %llu aux %llu", seen, (unsigned long long)ev.addr,
               (unsigned long long)ev.size, (unsigned long long)ev.aux);
        seen++;
    }
    pthread_join(th, NULL);
    ck_assert_int_eq(a.errors, 0);
    ck_assert_uint_eq(l8_trace_count(a.t), a.n);
    ck_assert_uint_eq(l8_trace_held(a.t), 16);
    l8_trace_destroy(a.t);
    l8_trace_event ev;
    int got;
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);
    l8_trace_reader_close(r);
    tmp_cleanup(&d);
}
END_TEST

/* Without any flush or later event, the flusher thread puts a writer's
 * events in the file: a live reader is never far behind (the 200 ms bound
 * is tested in test_trace_file.c). */
START_TEST(test_live_without_flush)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "timed.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    l8_trace_event ev;
    int got;
    for (uint64_t i = 1; i <= 2; i++) {
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, i, 0, i);
        struct timespec ts = { 0, 150 * 1000000 };
        nanosleep(&ts, NULL);
        L8_CK(l8_trace_reader_next(r, &ev, &got));
        ck_assert_msg(got == 1, "event %llu is still buffered after 150 ms", (unsigned long long)i);
        ck_assert_uint_eq(ev.aux, i);
    }
    l8_trace_reader_close(r);
    l8_trace_destroy(t);
    tmp_cleanup(&d);
}
END_TEST

/* ---- the ring ---- */

START_TEST(test_ring_wraparound)
{
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.capacity = 8;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_event out[32];
    ck_assert_uint_eq(l8_trace_events(t, 0, out, 32), 0);
    for (uint64_t i = 0; i < 5; i++) l8_trace_record(t, L8_TRACE_STEP, -1, 0, i, 0, i);
    ck_assert_uint_eq(l8_trace_count(t), 5);
    ck_assert_uint_eq(l8_trace_held(t), 5);
    ck_assert_uint_eq(l8_trace_events(t, 0, out, 32), 5);
    for (uint64_t i = 0; i < 5; i++) ck_assert_uint_eq(out[i].addr, i);
    for (uint64_t i = 5; i < 21; i++) l8_trace_record(t, L8_TRACE_STEP, -1, 0, i, 0, i);
    ck_assert_uint_eq(l8_trace_count(t), 21);
    ck_assert_uint_eq(l8_trace_held(t), 8);
    ck_assert_uint_eq(l8_trace_events(t, 0, out, 32), 8);
    for (uint64_t i = 0; i < 8; i++) {
        ck_assert_uint_eq(out[i].addr, 13 + i);           /* oldest first */
        ck_assert_uint_eq(out[i].kind, L8_TRACE_STEP);
        if (i) ck_assert_uint_ge(out[i].time_ns, out[i - 1].time_ns);
    }
    ck_assert_uint_eq(l8_trace_events(t, 5, out, 32), 3);
    ck_assert_uint_eq(out[0].addr, 18);
    ck_assert_uint_eq(out[2].addr, 20);
    ck_assert_uint_eq(l8_trace_events(t, 2, out, 4), 4);  /* across the wrap point */
    for (uint64_t i = 0; i < 4; i++) ck_assert_uint_eq(out[i].addr, 15 + i);
    ck_assert_uint_eq(l8_trace_events(t, 8, out, 32), 0);
    L8_CK(l8_trace_flush(t));                            /* memory only: nothing to do */
    /* bogus kinds are dropped, never recorded */
    l8_trace_record(t, (l8_trace_kind)0, 0, 0, 0, 0, 0);
    l8_trace_record(t, (l8_trace_kind)0xFFFF, 0, 0, 0, 0, 0);
    ck_assert_uint_eq(l8_trace_count(t), 21);
    l8_trace_destroy(t);
    l8_trace_destroy(NULL);
    l8_trace_record(NULL, L8_TRACE_STEP, 0, 0, 0, 0, 0);
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_bad_files)
{
    tmpdir d;
    tmp_init(&d);
    unsigned char h[48], rec[48];
    l8_trace_event ev;
    int got;

    const char *magic = tmp_file(&d, "magic");
    make_header(h, 1, 48);
    memcpy(h, "NOTTRACE", 8);
    append(magic, h, 48);
    expect_open_fails(magic, L8_ERR_INVALID_ARG, "magic");

    const char *version = tmp_file(&d, "version");
    make_header(h, 3, 48);
    append(version, h, 48);
    expect_open_fails(version, L8_ERR_INVALID_ARG, "version 3");

    const char *recsize = tmp_file(&d, "recsize");
    make_header(h, 1, 64);
    append(recsize, h, 48);
    expect_open_fails(recsize, L8_ERR_INVALID_ARG, "record size 64");

    const char *trunc = tmp_file(&d, "trunc");
    make_header(h, 1, 48);
    append(trunc, h, 20);
    expect_open_fails(trunc, L8_ERR_INVALID_ARG, "truncated trace header (20 of 48");

    const char *empty = tmp_file(&d, "empty");
    append(empty, h, 0);
    expect_open_fails(empty, L8_ERR_INVALID_ARG, "truncated");

    /* a header_size past the end of the file: a cut header, not a file that shrank */
    const char *longhdr = tmp_file(&d, "longhdr");
    make_header(h, 2, 48);
    put32(h + 16, 96);
    append(longhdr, h, 48);
    append(longhdr, h, 20);
    expect_open_fails(longhdr, L8_ERR_INVALID_ARG, "truncated trace header (68 of the 96 bytes");
    make_header(h, 1, 48);

    expect_open_fails("/nonexistent-l8/x.l8trace", L8_ERR_IO, "cannot open");
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOENT");

    /* a FIFO: refused at once (the reader preads), not an open that waits for a writer */
    const char *fifo = tmp_file(&d, "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    expect_open_fails(fifo, L8_ERR_IO, "cannot read trace file");
    ck_assert_int_eq(l8_last_error()->foreign_code, ESPIPE);

    /* garbage kinds: an error that names the kind, and stays */
    const char *kind = tmp_file(&d, "kind");
    append(kind, h, 48);
    make_record(rec, 1, 0x100, 512, 0, 0, 0, L8_TRACE_ALLOC, 0);
    append(kind, rec, 48);
    make_record(rec, 2, 0x100, 512, 0, 0, 0, 0xBEEF, 0);
    append(kind, rec, 48);
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(kind, &r));
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 1);
    for (int i = 0; i < 2; i++) {
        got = 7;
        L8_CK_ST(l8_trace_reader_next(r, &ev, &got), L8_ERR_INVALID_ARG);
        ck_assert_int_eq(got, 0);
        ck_assert_msg(strstr(l8_last_error()->message, "kind 0xbeef") &&
                      strstr(l8_last_error()->message, "offset 96"), "%s", l8_last_error()->message);
    }
    l8_trace_reader_close(r);

    const char *zero = tmp_file(&d, "zero");          /* all-zero record: kind 0 */
    append(zero, h, 48);
    memset(rec, 0, 48);
    append(zero, rec, 48);
    L8_CK(l8_trace_reader_open(zero, &r));
    L8_CK_ST(l8_trace_reader_next(r, &ev, &got), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "kind 0x0000"));
    l8_trace_reader_close(r);

    const char *tag = tmp_file(&d, "tag");            /* tag id never defined */
    append(tag, h, 48);
    make_record(rec, 1, 0x100, 512, 0, 0, 3, L8_TRACE_ALLOC, 0);
    append(tag, rec, 48);
    L8_CK(l8_trace_reader_open(tag, &r));
    L8_CK_ST(l8_trace_reader_next(r, &ev, &got), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "tag id"));
    l8_trace_reader_close(r);

    const char *order = tmp_file(&d, "order");        /* string id 2 before id 1 */
    append(order, h, 48);
    unsigned char s[96] = { 0 };
    make_record(s, 1, 0, 3, 0, 0, 2, 0xFFFF, 0);
    memcpy(s + 48, "abc", 3);
    append(order, s, 96);
    L8_CK(l8_trace_reader_open(order, &r));
    L8_CK_ST(l8_trace_reader_next(r, &ev, &got), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "out of order"));
    l8_trace_reader_close(r);

    L8_CK_ST(l8_trace_reader_open(NULL, &r), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_trace_reader_next(NULL, &ev, &got), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(l8_trace_reader_tag_name(NULL, 1));
    l8_trace_reader_close(NULL);
    tmp_cleanup(&d);
}
END_TEST

START_TEST(test_unwritable)
{
    tmpdir d;
    tmp_init(&d);
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.l8trace", d.dir);
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = bad;
    l8_trace *t = (l8_trace *)&t;
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_IO);
    ck_assert_ptr_null(t);
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOENT");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, bad));

    c.path = d.dir;                                   /* a directory */
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_IO);
    ck_assert_str_eq(l8_last_error()->foreign_name, "EISDIR");
    c.path = "";
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_trace_create(NULL, NULL), L8_ERR_INVALID_ARG);
    c.size = 4;
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_INVALID_ARG);

    if (access("/dev/full", W_OK) == 0) {             /* the header write fails */
        c = (l8_trace_config)L8_TRACE_CONFIG_INIT;
        c.path = "/dev/full";
        L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_IO);
        ck_assert_str_eq(l8_last_error()->foreign_name, "ENOSPC");
    }
    tmp_cleanup(&d);
}
END_TEST

/* A write error after the header (file size limit): flush reports it, keeps
 * reporting it, and the file holds a readable prefix. */
START_TEST(test_write_error_at_flush)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "full.l8trace");
    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 4096) {
        tmp_cleanup(&d);
        return;
    }
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = { 4096, old.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t;
    l8_status st = l8_trace_create(&c, &t);
    if (st == L8_OK) {
        for (uint64_t i = 0; i < 200; i++) l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, i, 512, 0);
        st = l8_trace_flush(t);
    }
    l8_status st2 = st == L8_ERR_IO ? l8_trace_flush(t) : L8_OK;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);   /* restore before asserting */
    signal(SIGXFSZ, old_sig);
    ck_assert_msg(st == L8_ERR_IO, "flush -> %s", l8_status_name(st));
    ck_assert_int_eq(st2, L8_ERR_IO);                     /* sticky */
    ck_assert_str_eq(l8_last_error()->foreign_name, "EFBIG");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, path));
    ck_assert_uint_eq(l8_trace_count(t), 200);            /* memory still has them */
    l8_trace_destroy(t);

    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    uint64_t n = 0;
    l8_trace_event ev;
    int got;
    for (;;) {
        L8_CK(l8_trace_reader_next(r, &ev, &got));
        if (!got) break;
        ck_assert_uint_eq(ev.addr, n);
        n++;
    }
    ck_assert_uint_eq(n, (4096 - 48) / 48);               /* then a partial record */
    l8_trace_reader_close(r);
    tmp_cleanup(&d);
}
END_TEST

/* ---- tags ---- */

static void *tag_thread(void *arg)
{
    int *errors = arg;
    if (l8_tag_current() != NULL) (*errors)++;   /* the main thread's tags are not ours */
    if (l8_tag_push("other") != L8_OK) (*errors)++;
    if (l8_tag_pop() != L8_OK) (*errors)++;
    if (l8_tag_pop() != L8_ERR_STATE) (*errors)++;
    return NULL;
}

START_TEST(test_tag_stack)
{
    char name[140];
    ck_assert_ptr_null(l8_tag_current());
    L8_CK_ST(l8_tag_pop(), L8_ERR_STATE);
    L8_CK_ST(l8_tag_push(NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_tag_push(""), L8_ERR_INVALID_ARG);
    memset(name, 'x', 128);
    name[128] = '\0';
    L8_CK_ST(l8_tag_push(name), L8_ERR_INVALID_ARG);      /* 128 bytes: too long */
    ck_assert_ptr_null(l8_tag_current());
    name[127] = '\0';
    L8_CK(l8_tag_push(name));                             /* 127: fits */
    ck_assert_str_eq(l8_tag_current(), name);
    L8_CK(l8_tag_pop());
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof name, "depth%d", i);
        L8_CK(l8_tag_push(name));
    }
    L8_CK_ST(l8_tag_push("one.too.many"), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "64"));
    ck_assert_str_eq(l8_tag_current(), "depth63");

    int errors = 0;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, tag_thread, &errors), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(errors, 0);
    ck_assert_str_eq(l8_tag_current(), "depth63");

    for (int i = 63; i >= 0; i--) {
        snprintf(name, sizeof name, "depth%d", i);
        ck_assert_str_eq(l8_tag_current(), name);
        L8_CK(l8_tag_pop());
    }
    ck_assert_ptr_null(l8_tag_current());
    L8_CK_ST(l8_tag_pop(), L8_ERR_STATE);
}
END_TEST

/* Tag ids are per trace, and a slot reused by a different name gets the new
 * name's id (the per-thread id cache must not go stale). */
START_TEST(test_tags_two_traces)
{
    l8_trace *a, *b;
    L8_CK(l8_trace_create(NULL, &a));
    L8_CK(l8_trace_create(NULL, &b));
    L8_CK(l8_tag_push("only.in.b"));
    l8_trace_record(b, L8_TRACE_STEP, 0, 0, 0, 0, 0);
    L8_CK(l8_tag_pop());
    L8_CK(l8_tag_push("alpha"));
    l8_trace_record(a, L8_TRACE_STEP, 0, 0, 1, 0, 0);
    l8_trace_record(b, L8_TRACE_STEP, 0, 0, 1, 0, 0);
    l8_trace_record(a, L8_TRACE_STEP, 0, 0, 2, 0, 0);
    L8_CK(l8_tag_pop());
    L8_CK(l8_tag_push("beta"));
    l8_trace_record(a, L8_TRACE_STEP, 0, 0, 3, 0, 0);
    L8_CK(l8_tag_pop());
    l8_trace_record(a, L8_TRACE_STEP, 0, 0, 4, 0, 0);

    l8_trace_event ea[4], eb[2];
    ck_assert_uint_eq(l8_trace_events(a, 0, ea, 4), 4);
    ck_assert_uint_eq(l8_trace_events(b, 0, eb, 2), 2);
    ck_assert_str_eq(l8_trace_tag_name(b, eb[0].tag), "only.in.b");
    ck_assert_str_eq(l8_trace_tag_name(b, eb[1].tag), "alpha");
    ck_assert_str_eq(l8_trace_tag_name(a, ea[0].tag), "alpha");
    ck_assert_uint_eq(ea[0].tag, 1);                     /* dense from 1, per trace */
    ck_assert_uint_eq(ea[1].tag, ea[0].tag);
    ck_assert_str_eq(l8_trace_tag_name(a, ea[2].tag), "beta");
    ck_assert_uint_eq(ea[2].tag, 2);
    ck_assert_uint_eq(ea[3].tag, 0);
    ck_assert_ptr_null(l8_trace_tag_name(a, 3));
    l8_trace_destroy(a);
    l8_trace_destroy(b);
}
END_TEST

/* ---- concurrency ---- */

START_TEST(test_many_threads)
{
    enum { T = 8 };
    uint32_t per = l8_test_quick() ? 1000 : 25000;
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "mt.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    c.capacity = 1000;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    register_roles(t);
    worker w[T];
    for (int i = 0; i < T; i++) w[i] = (worker){ .t = t, .tid = i, .n = per, .flush_every = 4096 };
    run_workers(w, T);
    ck_assert_uint_eq(l8_trace_count(t), (uint64_t)T * per);
    ck_assert_uint_eq(l8_trace_held(t), 1000);
    l8_trace_destroy(t);

    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    uint32_t next[T] = { 0 };
    uint64_t n = 0, last_time = 0;
    l8_trace_event ev;
    int got;
    for (;;) {
        l8_status st = l8_trace_reader_next(r, &ev, &got);
        EXPECT(st == L8_OK, "reader: %s", l8_last_error_string());
        if (!got) break;
        check_event(&ev, l8_trace_reader_tag_name(r, ev.tag), next, T);
        EXPECT(ev.time_ns >= last_time, "time goes back at event %llu", (unsigned long long)n);
        last_time = ev.time_ns;
        n++;
    }
    ck_assert_uint_eq(n, (uint64_t)T * per);
    for (int i = 0; i < T; i++) ck_assert_uint_eq(next[i], per);
    l8_trace_reader_close(r);
    tmp_cleanup(&d);
}
END_TEST

/* ---- the process-wide trace ---- */

START_TEST(test_global_from_env)
{
    /* pthread_once: only the first call in a process reads L8_TRACE. That is
     * this test only in a forked child that has not called it yet. */
    const char *fork_env = getenv("CK_FORK");
    if (getenv("L8_TRACE") || (fork_env && !strcmp(fork_env, "no"))) {
        ck_assert_ptr_eq(l8_trace_global(), l8_trace_global());
        return;
    }
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "global.l8trace");
    ck_assert_int_eq(setenv("L8_TRACE", path, 1), 0);
    l8_trace *g = l8_trace_global();
    unsetenv("L8_TRACE");
    ck_assert_msg(g != NULL, "%s", l8_last_error_string());
    ck_assert_ptr_eq(l8_trace_global(), g);
    l8_trace_record(g, L8_TRACE_STEP, -1, 0, 0, 0, 7);
    L8_CK(l8_trace_flush(g));
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    l8_trace_event ev;
    int got;
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(ev.kind, L8_TRACE_STEP);
    ck_assert_uint_eq(ev.aux, 7);
    l8_trace_reader_close(r);
    tmp_cleanup(&d);            /* the open file outlives its name: fine */
}
END_TEST

Suite *l8_trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_round_trip_threads);
    tcase_add_test(tc, test_live_partial_records);
    tcase_add_test(tc, test_live_concurrent_reader);
    tcase_add_test(tc, test_live_without_flush);
    tcase_add_test(tc, test_ring_wraparound);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_unwritable);
    tcase_add_test(tc, test_write_error_at_flush);
    tcase_add_test(tc, test_tag_stack);
    tcase_add_test(tc, test_tags_two_traces);
    tcase_add_test(tc, test_many_threads);
    tcase_add_test(tc, test_global_from_env);
    suite_add_tcase(s, tc);
    l8t_trace_file_tests(s);
    l8t_trace_tool_tests(s);
    return s;
}
