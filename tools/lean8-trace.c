/* lean8-trace - read lean8 memory traces (docs/trace.md).
 *
 *   lean8-trace summary FILE...              peaks, fragmentation, top tags, offload, OOMs
 *   lean8-trace live FILE [--interval S] [--top N]   follow a running job, like top
 *   lean8-trace plot FILE -o out.svg [--buckets N] [--top N]
 *   lean8-trace export --chrome FILE... -o out.json
 *
 * A truncated or corrupt file is read up to its last whole record with a
 * warning on stderr; the exit status is 0 unless a file could not be read
 * at all (1) or the command line is wrong (2).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tools/trace_model.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: lean8-trace summary FILE...\n"
            "       lean8-trace live FILE [--interval SECONDS] [--top N]\n"
            "       lean8-trace plot FILE -o OUT.svg [--buckets N] [--top N]\n"
            "       lean8-trace export --chrome FILE... -o OUT.json\n");
    return 2;
}

static const char *device_name(int32_t d, char *buf, size_t n)
{
    if (d == -1) snprintf(buf, n, "host");
    else if (d < -1) snprintf(buf, n, "any");
    else snprintf(buf, n, "cuda:%d", d);
    return buf;
}

static const char *start_time(uint64_t ns, char *buf, size_t n)
{
    time_t s = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

/* ---- summary ---- */

static void summary_one(trace_model *m, int top)
{
    char a[32], b[32], c[48], d[16];
    const l8_trace_file_info *in = &m->info;
    printf("%s: format %u, rank %d, pid %u, device %s, started %s\n", m->path, in->version,
           in->rank, in->pid, device_name(in->device, d, sizeof d),
           start_time(in->start_realtime_ns, c, sizeof c));
    printf("  events           %llu over %.3f s, %s\n", (unsigned long long)m->events,
           (double)m->last_time / 1e9,
           in->ended ? "ended" : tm_writer_done(m) ? "writer gone (no end marker)" : "still being written");
    printf("  allocated peak   %s (%llu B) at %.3f s\n", tm_bytes(m->alloc_peak, a, sizeof a),
           (unsigned long long)m->alloc_peak, (double)m->alloc_peak_time / 1e9);
    printf("  reserved peak    %s (%llu B)\n", tm_bytes(m->reserved_peak, a, sizeof a),
           (unsigned long long)m->reserved_peak);
    if (m->alloc_peak)
        printf("  fragmentation    %.3f (reserved peak / allocated peak)\n",
               (double)m->reserved_peak / (double)m->alloc_peak);
    else
        printf("  fragmentation    - (nothing allocated)\n");
    printf("  now              allocated %s, reserved %s\n", tm_bytes(m->alloc_cur, a, sizeof a),
           tm_bytes(m->reserved_cur, b, sizeof b));
    printf("  pinned peak      %s (%llu B)\n", tm_bytes(m->pinned_peak, a, sizeof a),
           (unsigned long long)m->pinned_peak);
    printf("  offload          out %s (%llu B, %llu copies), in %s (%llu B, %llu copies)\n",
           tm_bytes(m->offload_out, a, sizeof a), (unsigned long long)m->offload_out,
           (unsigned long long)m->offload_out_n, tm_bytes(m->offload_in, b, sizeof b),
           (unsigned long long)m->offload_in, (unsigned long long)m->offload_in_n);
    printf("  steps            %llu", (unsigned long long)m->steps);
    if (m->steps) printf(" (last %llu)", (unsigned long long)m->last_step);
    printf("\n  OOM events       %zu\n", m->nooms);
    for (size_t i = 0; i < m->nooms && i < 10; i++)
        printf("    at %.3f s: %s (%llu B) requested, %s reserved, tag %s\n",
               (double)m->ooms[i].time_ns / 1e9, tm_bytes(m->ooms[i].request, a, sizeof a),
               (unsigned long long)m->ooms[i].request, tm_bytes(m->ooms[i].reserved, b, sizeof b),
               tm_tag_name(m, m->ooms[i].tag));
    uint64_t *at = malloc(m->ntags * sizeof *at);
    uint32_t *ord = malloc(m->ntags * sizeof *ord);
    if (!at || !ord) {
        fprintf(stderr, "lean8-trace: out of host memory\n");
        exit(1);
    }
    tm_snap_read(m, &m->peak, at);
    tm_order_desc(at, m->ntags, ord);
    printf("  top tags at the allocated peak:\n");
    for (uint32_t i = 0; i < m->ntags && (int)i < top && at[ord[i]]; i++)
        printf("    %-40s %12s %15llu B %6.2f%%\n", tm_tag_name(m, ord[i]),
               tm_bytes(at[ord[i]], a, sizeof a), (unsigned long long)at[ord[i]],
               100.0 * (double)at[ord[i]] / (double)m->alloc_peak);
    free(at);
    free(ord);
}

/* lines of the per-rank table: by rank, then command-line order */
typedef struct line {
    int rank, order;
    char text[512];
} line;

static int cmp_line(const void *a, const void *b)
{
    const line *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmd_summary(int argc, char **argv)
{
    int top = 10, nfiles = 0, rc = 0;
    const char *files[256];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--top") && i + 1 < argc) top = atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1]) return usage();
        else if (nfiles < 256) files[nfiles++] = argv[i];
        else return usage();
    }
    if (nfiles == 0 || top < 1) return usage();
    if (nfiles == 1) {
        trace_model m;
        if (tm_load(&m, files[0], NULL, NULL, NULL)) rc = 1;
        else summary_one(&m, top);
        tm_close(&m);
        return rc;
    }
    /* one line per rank (file), sorted by rank */
    line *lines = calloc((size_t)nfiles, sizeof *lines);
    if (!lines) exit(1);
    int nl = 0;
    for (int f = 0; f < nfiles; f++) {
        trace_model m;
        if (tm_load(&m, files[f], NULL, NULL, NULL)) {
            rc = 1;
            tm_close(&m);
            continue;
        }
        char a[32], b[32], c[32], d[32], e[32], dev[16];
        uint64_t *at = malloc(m.ntags * sizeof *at);
        uint32_t *ord = malloc(m.ntags * sizeof *ord);
        if (!at || !ord) exit(1);
        tm_snap_read(&m, &m.peak, at);
        tm_order_desc(at, m.ntags, ord);
        char frag[16] = "-";
        if (m.alloc_peak) snprintf(frag, sizeof frag, "%.3f", (double)m.reserved_peak / (double)m.alloc_peak);
        lines[nl].rank = m.info.rank;
        lines[nl].order = f;
        snprintf(lines[nl].text, sizeof lines[nl].text,
                 "%-5d %-8u %-7s %10llu %12s %12s %6s %12s %12s %5zu %6llu  %s (%s)", m.info.rank,
                 m.info.pid, device_name(m.info.device, dev, sizeof dev),
                 (unsigned long long)m.events, tm_bytes(m.alloc_peak, a, sizeof a),
                 tm_bytes(m.reserved_peak, b, sizeof b), frag, tm_bytes(m.offload_out, c, sizeof c),
                 tm_bytes(m.offload_in, d, sizeof d), m.nooms, (unsigned long long)m.steps,
                 at[ord[0]] ? tm_tag_name(&m, ord[0]) : "-", tm_bytes(at[ord[0]], e, sizeof e));
        nl++;
        free(at);
        free(ord);
        tm_close(&m);
    }
    qsort(lines, (size_t)nl, sizeof *lines, cmp_line);
    printf("%-5s %-8s %-7s %10s %12s %12s %6s %12s %12s %5s %6s  %s\n", "rank", "pid", "device",
           "events", "alloc_peak", "reserved_pk", "frag", "offload_out", "offload_in", "ooms",
           "steps", "top tag at peak");
    for (int i = 0; i < nl; i++) printf("%s\n", lines[i].text);
    free(lines);
    return rc;
}

/* ---- live ---- */

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) { (void)sig; g_stop = 1; }

static void live_draw(trace_model *m, int tty, int top, const char *state)
{
    char a[32], b[32], c[32], d[32];
    if (!tty) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < m->ntags; i++) if (m->tag_cur[i] > m->tag_cur[best]) best = i;
        printf("[%9.3f s] allocated %s (peak %s) reserved %s (peak %s) steps %llu ooms %zu "
               "events %llu | top %s %s%s%s\n", (double)m->last_time / 1e9,
               tm_bytes(m->alloc_cur, a, sizeof a), tm_bytes(m->alloc_peak, b, sizeof b),
               tm_bytes(m->reserved_cur, c, sizeof c), tm_bytes(m->reserved_peak, d, sizeof d),
               (unsigned long long)m->steps, m->nooms, (unsigned long long)m->events,
               tm_tag_name(m, best), tm_bytes(m->tag_cur[best], a, sizeof a), state[0] ? " | " : "",
               state);
        fflush(stdout);
        return;
    }
    printf("\033[H\033[J");
    printf("lean8-trace live  %s  rank %d  pid %u  %s\n", m->path, m->info.rank, m->info.pid,
           state[0] ? state : "running");
    printf("time %.3f s   events %llu   steps %llu   OOMs %zu\n", (double)m->last_time / 1e9,
           (unsigned long long)m->events, (unsigned long long)m->steps, m->nooms);
    printf("allocated %12s   peak %12s\n", tm_bytes(m->alloc_cur, a, sizeof a),
           tm_bytes(m->alloc_peak, b, sizeof b));
    printf("reserved  %12s   peak %12s\n", tm_bytes(m->reserved_cur, a, sizeof a),
           tm_bytes(m->reserved_peak, b, sizeof b));
    printf("pinned    %12s   peak %12s   offload out %s in %s\n\n",
           tm_bytes(m->pinned_cur, a, sizeof a), tm_bytes(m->pinned_peak, b, sizeof b),
           tm_bytes(m->offload_out, c, sizeof c), tm_bytes(m->offload_in, d, sizeof d));
    printf("%-40s %12s %12s\n", "TAG", "NOW", "PEAK");
    uint32_t *ord = malloc(m->ntags * sizeof *ord);
    if (!ord) exit(1);
    tm_order_desc(m->tag_cur, m->ntags, ord);
    for (uint32_t i = 0; i < m->ntags && (int)i < top; i++)
        printf("%-40.40s %12s %12s\n", tm_tag_name(m, ord[i]), tm_bytes(m->tag_cur[ord[i]], a, sizeof a),
               tm_bytes(m->tag_peak[ord[i]], b, sizeof b));
    free(ord);
    fflush(stdout);
}

static int cmd_live(int argc, char **argv)
{
    const char *path = NULL;
    double interval = -1;
    int top = 15;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--interval") && i + 1 < argc) interval = atof(argv[++i]);
        else if (!strcmp(argv[i], "--top") && i + 1 < argc) top = atoi(argv[++i]);
        else if (argv[i][0] == '-' || path) return usage();
        else path = argv[i];
    }
    int tty = isatty(STDOUT_FILENO);
    if (interval < 0) interval = tty ? 0.5 : 1.0;
    if (!path || interval < 0.01 || top < 1) return usage();
    trace_model m;
    if (tm_open(&m, path)) return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const char *state = "";
    for (;;) {
        /* decide first, then read: events written before the writer ended
         * are all in the file by now */
        int done = tm_writer_done(&m);
        tm_pump(&m);
        if (m.corrupt) state = "stopped at a corrupt record";
        else if (m.info.shrunk) state = "the file was truncated under the reader";
        else if (m.info.ended) state = "job ended (end marker)";
        else if (done) state = "job ended (writer process gone, no end marker)";
        else if (g_stop) state = "interrupted";
        live_draw(&m, tty, top, state);
        if (state[0]) break;
        for (double w = 0; w < interval && !g_stop; w += 0.05) {
            struct timespec ts = { 0, 50 * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    tm_warn_tail(&m, !g_stop);
    tm_close(&m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "summary")) return cmd_summary(argc - 2, argv + 2);
    if (!strcmp(argv[1], "live")) return cmd_live(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plot")) return trace_cmd_plot(argc - 2, argv + 2);
    if (!strcmp(argv[1], "export")) return trace_cmd_export(argc - 2, argv + 2);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return 0;
    }
    return usage();
}
