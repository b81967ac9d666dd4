/* trace_gen.c - writes traces with known content through the recorder API,
 * for tests/trace.sh (lean8-trace end to end). Not installed.
 *
 *   trace-gen known PATH      the trace of l8t_trace_known (tests/trace_known.c)
 *   trace-gen spread PATH     3 tags growing and shrinking over ~0.4 s, steps, an OOM
 *   trace-gen slow PATH SEC   one event every 20 ms for SEC seconds, then destroy
 *   trace-gen hang PATH       a few events, then sleeps (until killed)
 *   trace-gen hold PATH       creates the trace, prints "ready", sleeps (until killed)
 *
 * Exit status: 0, or 1 with the library's message when the trace cannot be
 * created (tests/trace.sh checks that message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "alloc/trace.h"
#include "tests/trace_known.h"

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void tag(const char *name)
{
    if (l8_tag_push(name) != L8_OK) exit(3);
}

static void untag(void)
{
    if (l8_tag_pop() != L8_OK) exit(3);
}

static void spread(l8_trace *t)
{
    static const char *names[3] = { "weights", "activations", "grads" };
    const uint64_t MiB = 1u << 20;
    l8_trace_record(t, L8_TRACE_SEGMENT_ALLOC, 0, 0, 0x10000000, 64 * MiB, 64 * MiB);
    tag(names[0]);
    l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, 0x10000000, 16 * MiB, 16 * MiB);
    untag();
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < 8; i++) {               /* forward: activations grow */
            tag(names[1]);
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, 0x20000000 + (uint64_t)i * 4 * MiB, 4 * MiB, 0);
            untag();
            sleep_ms(5);
        }
        for (int i = 7; i >= 0; i--) {              /* backward: grads up, activations down */
            tag(names[2]);
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, 0x40000000 + (uint64_t)i * 2 * MiB, 2 * MiB, 0);
            untag();
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, 0x20000000 + (uint64_t)i * 4 * MiB, 4 * MiB, 0);
            sleep_ms(5);
        }
        for (int i = 0; i < 8; i++)
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, 0x40000000 + (uint64_t)i * 2 * MiB, 2 * MiB, 0);
        if (step == 2) l8_trace_record(t, L8_TRACE_OOM, 0, 1, 0, 128 * MiB, 64 * MiB);
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, (uint64_t)step + 1);
        sleep_ms(10);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: trace-gen known|spread|slow|hang|hold PATH [SECONDS]\n");
        return 2;
    }
    const char *mode = argv[1];
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = argv[2];
    l8_trace *t;
    if (l8_trace_create(&c, &t) != L8_OK) {
        fprintf(stderr, "trace-gen: %s\n", l8_last_error_string());
        return 1;
    }
    if (l8_trace_set_stream(t, 0, 1, L8_TRACE_STREAM_COMPUTE) != L8_OK) return 3;
    printf("%s\n", l8_trace_path(t));
    fflush(stdout);
    if (!strcmp(mode, "known")) {
        l8t_trace_known(t);
    } else if (!strcmp(mode, "spread")) {
        spread(t);
    } else if (!strcmp(mode, "slow") && argc > 3) {
        int n = (int)(atof(argv[3]) * 50);
        for (int i = 0; i < n; i++) {
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, 0x1000 + (uint64_t)i * 512, 512, 512);
            sleep_ms(20);
        }
    } else if (!strcmp(mode, "hang")) {
        tag("before.hang");
        l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, 0x1000, 4096, 4096);
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, 1);
        untag();
        for (;;) sleep_ms(1000);
    } else if (!strcmp(mode, "hold")) {
        printf("ready\n");
        fflush(stdout);
        for (;;) sleep_ms(1000);
    } else {
        fprintf(stderr, "trace-gen: unknown mode '%s'\n", mode);
        return 2;
    }
    l8_trace_destroy(t);
    return 0;
}
