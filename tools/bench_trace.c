/* bench_trace.c - `lean8-bench trace`: what the memory tracer costs.
 *
 * 1. Recording overhead: alloc+free pairs (4 KiB, cache hits) on three
 *    allocators over the host provider in the same run, timed in alternating
 *    blocks: without a trace, recording into a memory-only trace (what the
 *    recording thread pays when the flusher keeps up: a training step makes
 *    events at a rate the flusher absorbs easily), and into a trace file
 *    back to back (the file's worst case: ~10^7 events/s, where the
 *    recorder waits for the flusher's writes); the difference per pair and
 *    per recorded event.
 * 2. lean8-trace over a generated 10 M-event file (training-like: 24
 *    layers of tagged activations and weight grads per step, step marks):
 *    the summary replay (the same code as `lean8-trace summary`) and the
 *    plot, its time and the SVG's size. The file is written to $TMPDIR and
 *    removed afterwards.
 * The recording cost is host CPU time on the allocator's path; it is the
 * same code on the CUDA backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tools/bench.h"
#include "tools/trace_model.h"

#define PAIR_BYTES 4096

static double time_pairs(l8_alloc *a, int batch)
{
    void *p = NULL;
    double t0 = bench_now_ns();
    for (int i = 0; i < batch; i++)
        if (l8_alloc_malloc(a, PAIR_BYTES, 1, &p) != L8_OK || l8_alloc_free(a, p) != L8_OK) return -1;
    return (bench_now_ns() - t0) / batch;
}

static int overhead(const char *dir, int quick, bench_json *j)
{
    char path[512];
    snprintf(path, sizeof path, "%s/l8bench-overhead.%ld.l8trace", dir, (long)getpid());
    l8_segment_provider prov;
    l8_host_provider(&prov);
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    tc.path = path;
    l8_trace *t = NULL, *tm = NULL;
    l8_alloc *plain = NULL, *traced = NULL, *mem = NULL;
    l8_alloc_config ac = L8_ALLOC_CONFIG_INIT;
    int rc = 1, reps = quick ? 11 : 41, batch = 20000;
    double *off = calloc((size_t)reps, sizeof *off), *on = calloc((size_t)reps, sizeof *on);
    double *onm = calloc((size_t)reps, sizeof *onm);
    if (!off || !on || !onm || l8_trace_create(&tc, &t) != L8_OK ||
        l8_trace_create(NULL, &tm) != L8_OK ||
        l8_trace_set_stream(t, -1, 1, L8_TRACE_STREAM_COMPUTE) != L8_OK ||
        l8_trace_set_stream(tm, -1, 1, L8_TRACE_STREAM_COMPUTE) != L8_OK ||
        l8_alloc_create(&ac, &prov, &plain) != L8_OK) {
        fprintf(stderr, "lean8-bench trace: %s\n", l8_last_error_string());
        goto out;
    }
    ac.trace = t;
    if (l8_alloc_create(&ac, &prov, &traced) != L8_OK) goto fail;
    ac.trace = tm;
    if (l8_alloc_create(&ac, &prov, &mem) != L8_OK || l8_tag_push("bench.pairs") != L8_OK) goto fail;
    time_pairs(plain, batch);                         /* warm all */
    time_pairs(traced, batch);
    time_pairs(mem, batch);
    uint64_t ev0 = l8_trace_count(t);
    for (int r = 0; r < reps; r++) {
        off[r] = time_pairs(plain, batch);
        onm[r] = time_pairs(mem, batch);
        on[r] = time_pairs(traced, batch);
        if (off[r] < 0 || on[r] < 0 || onm[r] < 0) goto fail;
    }
    double per_pair_events = (double)(l8_trace_count(t) - ev0) / ((double)reps * batch);
    double m_off = bench_median(off, (size_t)reps), m_on = bench_median(on, (size_t)reps);
    double m_mem = bench_median(onm, (size_t)reps);
    double per_event = (m_on - m_off) / per_pair_events, per_event_mem = (m_mem - m_off) / per_pair_events;
    printf("  recording overhead (alloc+free of %d B, host provider, %d x %d pairs, medians)\n",
           PAIR_BYTES, reps, batch);
    printf("  %-44s %8.1f ns\n", "pair, no trace", m_off);
    printf("  %-44s %8.1f ns\n", "pair, traced (memory: the recorder's own cost)", m_mem);
    printf("  %-44s %8.1f ns\n", "pair, traced to a file, back to back", m_on);
    printf("  %-44s %8.1f\n", "events recorded per pair", per_pair_events);
    printf("  %-44s %8.1f ns\n", "per event, recorder", per_event_mem);
    printf("  %-44s %8.1f ns\n", "per event, file at ~10^7 events/s", per_event);
    bench_json_num(j, "pair_ns_untraced", m_off);
    bench_json_num(j, "pair_ns_traced_memory", m_mem);
    bench_json_num(j, "pair_ns_traced_file", m_on);
    bench_json_num(j, "events_per_pair", per_pair_events);
    bench_json_num(j, "ns_per_event_recorder", per_event_mem);
    bench_json_num(j, "ns_per_event_file_saturated", per_event);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "lean8-bench trace: %s\n", l8_last_error_string());
out:
    if (l8_tag_current()) {
        l8_status st = l8_tag_pop();
        (void)st;
    }
    l8_alloc_destroy(mem);
    l8_alloc_destroy(traced);
    l8_alloc_destroy(plain);
    l8_trace_destroy(tm);
    l8_trace_destroy(t);
    unlink(path);
    free(off);
    free(on);
    free(onm);
    return rc;
}

/* A training-like trace of n events: per step, 24 layers allocate two
 * activations in forward, free them and allocate/free a grad in backward. */
static int generate(const char *path, uint64_t n)
{
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    tc.path = path;
    tc.capacity = 1024;                                /* the file keeps everything */
    l8_trace *t;
    if (l8_trace_create(&tc, &t) != L8_OK) return 1;
    if (l8_trace_set_stream(t, 0, 1, L8_TRACE_STREAM_COMPUTE) != L8_OK) return 1;
    char tags[24][32];
    for (int l = 0; l < 24; l++) snprintf(tags[l], sizeof tags[l], "layer%d.fc1", l);
    const uint64_t act = 64ull << 20, grad = 32ull << 20, base = 0x7f0000000000ull;
    uint64_t done = 0, step = 0;
    l8_trace_record(t, L8_TRACE_SEGMENT_ALLOC, 0, 1, base, 8ull << 30, 8ull << 30);
    while (done < n) {
        for (int l = 0; l < 24 && done < n; l++, done += 2) {
            if (l8_tag_push(tags[l]) != L8_OK) return 1;
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, base + (uint64_t)l * 2 * act, act, act);
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, base + ((uint64_t)l * 2 + 1) * act, act, act);
            if (l8_tag_pop() != L8_OK) return 1;
        }
        for (int l = 23; l >= 0 && done < n; l--, done += 4) {
            if (l8_tag_push(tags[l]) != L8_OK) return 1;
            uint64_t g = base + (6ull << 30) + (uint64_t)l * grad;
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 1, g, grad, grad);
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, base + (uint64_t)l * 2 * act, act, act);
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, base + ((uint64_t)l * 2 + 1) * act, act, act);
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, g, grad, grad);
            if (l8_tag_pop() != L8_OK) return 1;
        }
        l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, ++step);
        done++;
    }
    l8_status st = l8_trace_flush(t);
    l8_trace_destroy(t);
    return st != L8_OK;
}

static int tools(const char *dir, int quick, bench_json *j)
{
    uint64_t n = quick ? 1000000 : 10000000;
    char path[512], svg[512];
    snprintf(path, sizeof path, "%s/l8bench-10m.%ld.l8trace", dir, (long)getpid());
    snprintf(svg, sizeof svg, "%s/l8bench-10m.%ld.svg", dir, (long)getpid());
    double t0 = bench_now_ns();
    if (generate(path, n)) {
        fprintf(stderr, "lean8-bench trace: cannot write %s: %s\n", path, l8_last_error_string());
        unlink(path);
        return 1;
    }
    double t_gen = (bench_now_ns() - t0) / 1e9;
    struct stat st;
    stat(path, &st);
    trace_model m;
    t0 = bench_now_ns();
    int rc = tm_load(&m, path, NULL, NULL, NULL);
    double t_sum = (bench_now_ns() - t0) / 1e9;
    uint64_t events = m.events, peak = m.alloc_peak;
    tm_close(&m);
    char *argv[] = { path, (char *)"-o", svg, NULL };
    t0 = bench_now_ns();
    if (rc == 0) rc = trace_cmd_plot(3, argv);
    double t_plot = (bench_now_ns() - t0) / 1e9;
    struct stat ss;
    long long svg_bytes = stat(svg, &ss) == 0 ? (long long)ss.st_size : -1;
    unlink(path);
    unlink(svg);
    if (rc) return 1;
    printf("\n  lean8-trace over %llu events (%.0f MiB file, written in %.2f s)\n",
           (unsigned long long)events, (double)st.st_size / 1048576.0, t_gen);
    printf("  %-40s %8.2f s  (target <= 5 s for 10 M events)\n", "summary (replay)", t_sum);
    printf("  %-40s %8.2f s\n", "plot", t_plot);
    printf("  %-40s %8lld bytes\n", "plot SVG size", svg_bytes);
    printf("  %-40s %8.2f GiB\n", "allocated peak found", (double)peak / 1073741824.0);
    bench_json_num(j, "tool_events", (double)events);
    bench_json_num(j, "tool_file_bytes", (double)st.st_size);
    bench_json_num(j, "summary_s", t_sum);
    bench_json_num(j, "plot_s", t_plot);
    bench_json_num(j, "plot_svg_bytes", (double)svg_bytes);
    return 0;
}

int bench_trace(const bench_opts *o)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    bench_json j = {0};
    if (bench_json_open(&j, o->json, "trace", "host")) return 1;
    printf("lean8-bench trace (files in %s)\n", dir);
    int rc = overhead(dir, o->quick, &j);
    if (rc == 0) rc = tools(dir, o->quick, &j);
    bench_json_close(&j);
    return rc;
}
