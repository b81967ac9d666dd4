/* trace_model.h - lean8-trace's replay of a trace file: memory by tag,
 * reserved and pinned memory, peaks, offload traffic, OOMs, steps.
 *
 * Accounting (docs/trace.md):
 *  - allocated: + size at ALLOC, - size at FREE_REQUESTED of that block,
 *    charged to the tag the ALLOC carried (a free of a block the file never
 *    allocated is counted in `unmatched_frees` and changes nothing);
 *  - reserved: + size at SEGMENT_ALLOC, - size at SEGMENT_FREE;
 *  - pinned: + size at PINNED_ALLOC, - size at PINNED_FREE of that block;
 *  - offload: bytes of OFFLOAD_OUT / OFFLOAD_IN.
 * Sums run over every device in the file.
 *
 * Snapshots of "bytes by tag at the moment the total was highest" are kept
 * in O(1) per event with an undo log (tm_snap): when the total reaches a new
 * best the current state becomes the snapshot and the log is cleared; each
 * later change of a tag logs its value before the first change. The summary
 * uses one over the whole file (the peak), the plot one per time bucket.
 */
#ifndef L8_TRACE_MODEL_H
#define L8_TRACE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "alloc/trace.h"

typedef struct tm_snap {
    uint64_t best;                /* highest total seen since the last reset */
    uint64_t best_time;           /* its time_ns */
    uint64_t epoch;
    uint64_t *tag_epoch;          /* per tag: the epoch its old value was logged in */
    struct { uint32_t tag; uint64_t old; } *log;
    size_t nlog, caplog;
} tm_snap;

typedef struct tm_block {
    uint64_t addr, size;
    uint32_t tag;
    int16_t device;
    uint8_t used;
} tm_block;

typedef struct tm_oom {
    uint64_t time_ns, request, reserved;
    uint32_t tag;
} tm_oom;

typedef struct trace_model trace_model;
/* Called after each event is applied. */
typedef void (*tm_hook)(void *user, trace_model *m, const l8_trace_event *ev);

struct trace_model {
    const char *path;
    l8_trace_reader *r;
    l8_trace_file_info info;
    /* per tag id (0 = untagged), grown as ids appear */
    uint64_t *tag_cur, *tag_peak;
    uint32_t ntags;
    uint64_t alloc_cur, alloc_peak, alloc_peak_time;
    uint64_t reserved_cur, reserved_peak;
    uint64_t pinned_cur, pinned_peak;
    uint64_t offload_out, offload_in, offload_out_n, offload_in_n;
    uint64_t events, last_time, unmatched_frees;
    uint64_t steps, last_step;
    tm_oom *ooms;
    size_t nooms, cap_ooms;
    tm_snap peak;                 /* bytes by tag at alloc_peak */
    tm_snap *extra;               /* a second snapshot (the plot's buckets), or NULL */
    /* live blocks (device and pinned): open addressing */
    tm_block *blocks;
    size_t nblocks, cap_blocks;
    uint32_t changed[2];          /* tags whose bytes the last event changed */
    int nchanged;
    tm_hook hook;
    void *hook_user;
    int corrupt;                  /* the reader stopped at a corrupt record */
    char corrupt_msg[512];
};

/* Open path; on failure print the reason on stderr and return nonzero. */
int tm_open(trace_model *m, const char *path);
void tm_close(trace_model *m);
/* Apply every whole record written so far. Returns the number of events
 * applied; at a corrupt record sets m->corrupt (message in corrupt_msg) and
 * stops for good. Refreshes m->info. On out-of-memory prints and exits. */
uint64_t tm_pump(trace_model *m);
/* Tag name for an id ("(untagged)" for 0). */
const char *tm_tag_name(trace_model *m, uint32_t id);
/* Bytes by tag at the snapshot s into out[0..m->ntags). */
void tm_snap_read(const trace_model *m, const tm_snap *s, uint64_t *out);
/* Start a new window: the current state is the snapshot. */
void tm_snap_reset(trace_model *m, tm_snap *s);
void tm_snap_free(tm_snap *s);
/* Print warnings about the file's end (partial record, corrupt record) to
 * stderr. writer_done: the writer finished or is gone, so a partial record
 * will never complete. */
void tm_warn_tail(trace_model *m, int writer_done);
/* 1 when the writer ended (end marker) or its process is gone. */
int tm_writer_done(trace_model *m);

/* Human-readable bytes ("1.50 GiB") into buf. */
const char *tm_bytes(uint64_t b, char *buf, size_t n);
/* Index order of values v[0..n) by decreasing value (out: n indices). */
void tm_order_desc(const uint64_t *v, uint32_t n, uint32_t *out);

/* ---- lean8-trace's subcommands (argv after the subcommand's name) ---- */
int trace_cmd_plot(int argc, char **argv);        /* trace_plot.c */
int trace_cmd_export(int argc, char **argv);      /* trace_export.c */
/* Open path and replay it to its end (hook, user and extra as in the
 * struct; may be NULL); prints notes and warnings on stderr. Returns 0, or
 * 1 when the file could not be opened or no event could be read. */
int tm_load(trace_model *m, const char *path, tm_hook hook, void *user, tm_snap *extra);

#endif
