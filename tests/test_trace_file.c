/* test_trace_file.c - the recorder's file: per-context traces, %r/%p names,
 * the header (rank, device, pid), the end marker, stream roles, refusing to
 * truncate another writer's file, replacing a finished one, and the
 * background flush of a writer that goes quiet.
 *
 * The other-process cases fork a child that only creates a trace and waits
 * on a pipe (no Check calls in the child).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/tests.h"
#include "tests/trace_known.h"
#include "runtime/ctx.h"
#include "alloc/trace.h"

static void cleanup(l8t_tmpdir *d)
{
    for (int i = 0; i < d->n; i++) unlink(d->path[i]);
    ck_assert_msg(rmdir(d->dir) == 0, "rmdir %s: %s", d->dir, strerror(errno));
}

static l8_trace_file_info info_of(l8_trace_reader *r)
{
    l8_trace_file_info in;
    memset(&in, 0, sizeof in);
    in.size = sizeof in;
    L8_CK(l8_trace_reader_info(r, &in));
    return in;
}

/* Read all events of path into ev (at most n); returns the count. */
static size_t read_all(const char *path, l8_trace_event *ev, size_t n, l8_trace_file_info *in)
{
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(path, &r));
    size_t k = 0;
    for (;;) {
        l8_trace_event e;
        int got;
        L8_CK(l8_trace_reader_next(r, &e, &got));
        if (!got) break;
        if (k < n) ev[k] = e;
        k++;
    }
    if (in) *in = info_of(r);
    l8_trace_reader_close(r);
    return k;
}

/* Two contexts (devs[0], devs[1]), each with its own trace named with %r
 * and %p: the header carries pid, rank and device, events name the stream
 * roles, and destroy writes the end marker. The rank is 5 here. */
static void per_context(l8t_tmpdir *d, const char *const devs[2])
{
    char pattern[400], want[2][400];
    snprintf(pattern, sizeof pattern, "%s/ctx%%%%.%%r.%%p.l8trace", d->dir);
    l8_ctx *ctx[2];
    for (int i = 0; i < 2; i++) {
        l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
        cfg.device = devs[i];
        char pat[420];
        snprintf(pat, sizeof pat, "%s.%d", pattern, i);
        cfg.trace_path = pat;
        L8_CK(l8_ctx_create(&cfg, &ctx[i]));
        snprintf(want[i], sizeof want[i], "%s/ctx%%.5.%ld.l8trace.%d", d->dir, (long)getpid(), i);
        ck_assert_str_eq(l8_trace_path(l8_ctx_trace(ctx[i])), want[i]);
        l8t_tmp_file(d, strrchr(want[i], '/') + 1);
    }
    ck_assert_ptr_ne(l8_ctx_trace(ctx[0]), l8_ctx_trace(ctx[1]));
    int dev[2] = { l8_ctx_device(ctx[0]), l8_ctx_device(ctx[1]) };
    void *a, *b;
    L8_CK(l8_tag_push("ctx0.buf"));
    L8_CK(l8_ctx_malloc(ctx[0], 1000, NULL, &a));
    L8_CK(l8_tag_pop());
    L8_CK(l8_ctx_malloc(ctx[1], 3000, l8_ctx_stream(ctx[1], L8_STREAM_COPY), &b));
    L8_CK(l8_ctx_free(ctx[0], a));
    L8_CK(l8_ctx_free(ctx[1], b));
    l8_trace_record(l8_ctx_trace(ctx[1]), L8_TRACE_STEP, -1, 0, 0, 0, 1);
    for (int i = 0; i < 2; i++) l8t_ctx_finish(ctx[i]);

    for (int i = 0; i < 2; i++) {
        l8_trace_event ev[64];
        l8_trace_file_info in;
        size_t n = read_all(want[i], ev, 64, &in);
        ck_assert_uint_eq(in.version, 2);
        ck_assert_uint_eq(in.pid, (uint32_t)getpid());
        ck_assert_int_eq(in.rank, 5);
        ck_assert_int_eq(in.device, dev[i]);
        ck_assert_int_eq(in.ended, 1);
        ck_assert_uint_eq(in.offset, in.file_bytes);
        ck_assert_int_eq(in.replaced, 0);
        int allocs = 0;
        for (size_t k = 0; k < n && k < 64; k++) {
            if (ev[k].kind != L8_TRACE_ALLOC) continue;
            allocs++;
            ck_assert_uint_eq(ev[k].size, i == 0 ? 1024 : 3072);
            ck_assert_int_eq(ev[k].device, dev[i]);
            ck_assert_uint_eq(ev[k].stream, i == 0 ? L8_TRACE_STREAM_COMPUTE : L8_TRACE_STREAM_COPY);
        }
        ck_assert_int_eq(allocs, 1);
        ck_assert_uint_eq(ev[n - 1].kind, L8_TRACE_SEGMENT_FREE);
    }
}

START_TEST(test_per_context_traces)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8trace");
    L8_CK(l8_trace_set_rank(5));
    ck_assert_int_eq(l8_trace_rank(), 5);
    static const char *const devs[2] = { "host", "host" };
    per_context(&d, devs);

    /* a rank set after creation reaches the header of a trace that follows it */
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = l8t_tmp_file(&d, "late.l8trace");
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(c.path, &r));
    ck_assert_int_eq(info_of(r).rank, 5);
    L8_CK(l8_trace_set_rank(7));
    ck_assert_int_eq(info_of(r).rank, 7);
    ck_assert_int_eq(info_of(r).device, L8_TRACE_DEVICE_ANY);
    l8_trace_reader_close(r);
    l8_trace_destroy(t);
    L8_CK_ST(l8_trace_set_rank(-1), L8_ERR_INVALID_ARG);
    L8_CK(l8_trace_set_rank(0));

    /* bad patterns and configs */
    c.path = "/tmp/x.%q.l8trace";
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "'%q'"));
    c.path = NULL;
    c.rank = -3;
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_INVALID_ARG);
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    cfg.device = "host";
    cfg.trace_path = "/nonexistent-l8/ctx.l8trace";
    l8_ctx *bad = (l8_ctx *)&bad;
    L8_CK_ST(l8_ctx_create(&cfg, &bad), L8_ERR_IO);
    ck_assert_ptr_null(bad);
    cfg.size = offsetof(l8_ctx_config, trace_path);          /* an older caller: no trace */
    L8_CK(l8_ctx_create(&cfg, &bad));
    ck_assert_ptr_eq(l8_ctx_trace(bad), l8_trace_global());
    l8t_ctx_finish(bad);
    cleanup(&d);
}
END_TEST

/* Stream roles are counted per (device, handle). */
START_TEST(test_stream_roles)
{
    l8_trace *t;
    L8_CK(l8_trace_create(NULL, &t));
    L8_CK(l8_trace_set_stream(t, 0, 77, L8_TRACE_STREAM_COMM));
    L8_CK(l8_trace_set_stream(t, 0, 77, L8_TRACE_STREAM_COMM));     /* a second holder */
    L8_CK_ST(l8_trace_set_stream(t, 0, 77, (l8_trace_stream)9), L8_ERR_INVALID_ARG);
    l8_trace_record(t, L8_TRACE_ALLOC, 0, 77, 1, 512, 0);            /* comm */
    l8_trace_record(t, L8_TRACE_ALLOC, 1, 77, 2, 512, 0);            /* other device: other */
    L8_CK(l8_trace_set_stream(t, 0, 77, L8_TRACE_STREAM_NONE));
    l8_trace_record(t, L8_TRACE_ALLOC, 0, 77, 3, 512, 0);            /* still held once */
    L8_CK(l8_trace_set_stream(t, 0, 77, L8_TRACE_STREAM_NONE));
    l8_trace_record(t, L8_TRACE_ALLOC, 0, 77, 4, 512, 0);            /* gone: other */
    l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, 5, 512, 0);             /* handle 0: none */
    l8_trace_event ev[5];
    ck_assert_uint_eq(l8_trace_events(t, 0, ev, 5), 5);
    const uint64_t want[5] = { L8_TRACE_STREAM_COMM, L8_TRACE_STREAM_OTHER, L8_TRACE_STREAM_COMM,
                               L8_TRACE_STREAM_OTHER, L8_TRACE_STREAM_NONE };
    for (int i = 0; i < 5; i++) ck_assert_uint_eq(ev[i].stream, want[i]);
    L8_CK(l8_trace_set_stream(NULL, 0, 1, L8_TRACE_STREAM_COMPUTE));
    l8_trace_destroy(t);
}
END_TEST

/* A child process creates a trace at path, reports on `ready`, and waits
 * until `go` is closed; then exits without destroying (no end marker). */
static pid_t spawn_holder(const char *path, int *go_w)
{
    int ready[2], go[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        l8_trace_config c = L8_TRACE_CONFIG_INIT;
        c.path = path;
        l8_trace *t;
        char ok = l8_trace_create(&c, &t) == L8_OK ? 'y' : 'n';
        if (ok == 'y') {
            l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, 42);
            ok = l8_trace_flush(t) == L8_OK ? 'y' : 'n';
        }
        if (write(ready[1], &ok, 1) != 1) _exit(3);
        char x;
        while (read(go[0], &x, 1) > 0) {}
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    char ok = 0;
    ck_assert_int_eq(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    ck_assert_int_eq(ok, 'y');
    *go_w = go[1];
    return pid;
}

START_TEST(test_never_truncates)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8trace");
    const char *path = l8t_tmp_file(&d, "shared.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t = NULL;

    /* another process writes it: refused, its file untouched */
    int go;
    pid_t child = spawn_holder(path, &go);
    struct stat before, after;
    ck_assert_int_eq(stat(path, &before), 0);
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_IO);
    ck_assert_ptr_null(t);
    char pidstr[32];
    snprintf(pidstr, sizeof pidstr, "process %ld", (long)child);
    ck_assert_msg(strstr(l8_last_error()->message, pidstr) &&
                  strstr(l8_last_error()->message, "still running"), "%s", l8_last_error()->message);
    ck_assert_str_eq(l8_last_error()->foreign_name, "EEXIST");
    ck_assert_int_eq(stat(path, &after), 0);
    ck_assert_int_eq(after.st_size, before.st_size);
    ck_assert_uint_eq(after.st_ino, before.st_ino);

    /* the writer is gone: replaced by a new file; a reader of the old one
     * keeps it whole and sees the replacement */
    l8_trace_reader *old;
    L8_CK(l8_trace_reader_open(path, &old));
    close(go);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_event ev;
    int got;
    L8_CK(l8_trace_reader_next(old, &ev, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(ev.aux, 42);
    l8_trace_file_info in = info_of(old);
    ck_assert_int_eq(in.replaced, 1);
    ck_assert_uint_eq(in.pid, (uint32_t)child);
    l8_trace_reader_close(old);

    /* this process still writes it: refused */
    l8_trace *t2 = (l8_trace *)&t2;
    L8_CK_ST(l8_trace_create(&c, &t2), L8_ERR_IO);
    ck_assert_ptr_null(t2);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "another trace of this process"));
    l8_trace_destroy(t);
    /* finished (end marker): replaced */
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_destroy(t);

    /* not a lean8 trace: refused, contents kept */
    const char *other = l8t_tmp_file(&d, "notes.txt");
    FILE *f = fopen(other, "w");
    ck_assert_ptr_nonnull(f);
    fputs("precious data\n", f);
    fclose(f);
    c.path = other;
    L8_CK_ST(l8_trace_create(&c, &t), L8_ERR_IO);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "not a lean8 trace"));
    char buf[64] = "";
    f = fopen(other, "r");
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, "precious data\n");
    cleanup(&d);
}
END_TEST

/* A writer that records and then goes quiet: the background flusher puts
 * its last event in the file within 200 ms (no flush, no later event). */
START_TEST(test_quiet_writer_flushed)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = l8t_tmp_file(&d, "quiet.l8trace");
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    l8_trace_reader *r;
    L8_CK(l8_trace_reader_open(c.path, &r));
    for (int round = 0; round < 3; round++) {
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, (uint64_t)round + 100);
        l8_trace_event ev;
        int got = 0;
        double ms = 0;
        while (!got && ms < 1000) {
            L8_CK(l8_trace_reader_next(r, &ev, &got));
            clock_gettime(CLOCK_MONOTONIC, &now);
            ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
            if (!got) {
                struct timespec ts = { 0, 2000000 };
                nanosleep(&ts, NULL);
            }
        }
        ck_assert_msg(got && ms <= 200, "round %d: the quiet writer's event reached the file "
                      "after %.0f ms (limit 200)", round, ms);
        ck_assert_uint_eq(ev.aux, (uint64_t)round + 100);
        struct timespec pause = { 0, 120000000 };     /* quiet longer than a period */
        nanosleep(&pause, NULL);
    }
    l8_trace_file_info in = info_of(r);
    ck_assert_int_eq(in.ended, 0);
    l8_trace_destroy(t);
    l8_trace_event ev;
    int got;
    L8_CK(l8_trace_reader_next(r, &ev, &got));
    ck_assert_int_eq(got, 0);
    ck_assert_int_eq(info_of(r).ended, 1);                 /* the end marker is not an event */
    l8_trace_reader_close(r);

    /* a file truncated under a reader is reported, not silently re-read */
    L8_CK(l8_trace_reader_open(c.path, &r));
    while (l8_trace_reader_next(r, &ev, &got) == L8_OK && got) {}
    ck_assert_int_eq(truncate(c.path, 48), 0);
    L8_CK_ST(l8_trace_reader_next(r, &ev, &got), L8_ERR_IO);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "shrank"));
    ck_assert_int_eq(info_of(r).shrunk, 1);
    l8_trace_reader_close(r);
    cleanup(&d);
}
END_TEST

/* Event times follow CLOCK_MONOTONIC (whichever clock the recorder reads:
 * the TSC, scaled, or clock_gettime): ns since the header's start, within
 * a few ms over sleeps of 30 ms, never decreasing. */
START_TEST(test_event_clock)
{
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, 0);
    for (int i = 1; i <= 5; i++) {
        struct timespec ts = { 0, 30 * 1000000L };
        nanosleep(&ts, NULL);
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, (uint64_t)i);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    l8_trace_event ev[6];
    ck_assert_uint_eq(l8_trace_events(t, 0, ev, 6), 6);
    double wall = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    double span = (double)(ev[5].time_ns - ev[0].time_ns);
    ck_assert_msg(span <= wall + 1e5 && span >= 150e6, "events span %.3f ms, the clock %.3f ms",
                  span / 1e6, wall / 1e6);
    for (int i = 1; i < 6; i++) {
        double dt = (double)(ev[i].time_ns - ev[i - 1].time_ns);
        ck_assert_msg(dt >= 29.5e6 && dt < 80e6, "event %d came %.3f ms after the previous, "
                      "slept 30 ms", i, dt / 1e6);
    }
    ck_assert_msg(ev[0].time_ns < 50000000ull, "first event at %llu ns after the start",
                  (unsigned long long)ev[0].time_ns);
    l8_trace_destroy(t);
}
END_TEST

/* A child forked while the parent records (its flusher running) keeps a
 * memory-only copy: its events never reach the parent's file, it does not
 * deadlock, and the parent's file holds exactly the parent's events. */
START_TEST(test_fork_child_memory_only)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = l8t_tmp_file(&d, "parent.l8trace");
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    for (uint64_t i = 0; i < 1000; i++) l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, i, 512, 1);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (uint64_t i = 0; i < 5000; i++) l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, i, 512, 2);
        int code = l8_trace_flush(t) == L8_OK && l8_trace_count(t) == 6000 ? 0 : 1;
        l8_trace_destroy(t);
        _exit(code);
    }
    for (uint64_t i = 1000; i < 2000; i++) l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, i, 512, 1);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    l8_trace_destroy(t);
    l8_trace_event ev[2048];
    l8_trace_file_info in;
    size_t n = read_all(c.path, ev, 2048, &in);
    ck_assert_uint_eq(n, 2000);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(ev[i].aux, 1);
        ck_assert_uint_eq(ev[i].addr, i);
    }
    ck_assert_int_eq(in.ended, 1);
    cleanup(&d);
}
END_TEST

/* The same on a GPU: one CUDA context and one host context (one GPU
 * context per test case), CUstream handles recorded as their roles. */
START_TEST(test_gpu_per_context_traces)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8trace");
    L8_CK(l8_trace_set_rank(5));
    static const char *const devs[2] = { "cuda:0", "host" };
    per_context(&d, devs);
    L8_CK(l8_trace_set_rank(0));
    cleanup(&d);
}
END_TEST

void l8t_trace_file_tests(Suite *s)
{
    TCase *tc = tcase_create("trace_file");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_per_context_traces);
    tcase_add_test(tc, test_stream_roles);
    tcase_add_test(tc, test_never_truncates);
    tcase_add_test(tc, test_quiet_writer_flushed);
    tcase_add_test(tc, test_fork_child_memory_only);
    tcase_add_test(tc, test_event_clock);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("trace_gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 60);
    tcase_add_test(tg, test_gpu_per_context_traces);
    suite_add_tcase(s, tg);
}
