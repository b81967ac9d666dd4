/* trace.h - the memory trace recorder.
 *
 * Every allocator and offload event (alloc, free requested, free completed,
 * segment alloc/free, OOM, offload out/in, step marks) is recorded with its
 * time, device, stream, size, address and the calling thread's current tag
 * (l8_tag_push("layer3.fc1")). Events are kept in memory (a ring of the most
 * recent `capacity` records) and, when the trace has a path, streamed to a
 * file in the binary format of docs/trace-format.md.
 *
 * The process-wide trace: l8_trace_global() returns the trace started from
 * the L8_TRACE environment variable (path) at first use, or NULL when unset;
 * contexts hand it to their allocators.
 *
 * Thread safety: all functions may be called from any thread.
 */
#ifndef L8_TRACE_H
#define L8_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_trace l8_trace;

/* Event kinds; append-only, the values are in the file format. */
typedef enum l8_trace_kind {
    L8_TRACE_ALLOC = 1,           /* block handed out: addr, size (rounded), aux = requested */
    L8_TRACE_FREE_REQUESTED = 2,  /* l8_alloc_free called */
    L8_TRACE_FREE_COMPLETED = 3,  /* block back in the cache (events done) */
    L8_TRACE_SEGMENT_ALLOC = 4,   /* provider gave a segment */
    L8_TRACE_SEGMENT_FREE = 5,    /* segment returned to the provider */
    L8_TRACE_OOM = 6,             /* size = request, aux = reserved bytes at the time */
    L8_TRACE_OFFLOAD_OUT = 7,     /* storage copied to host: addr = device, aux = host */
    L8_TRACE_OFFLOAD_IN = 8,      /* storage restored */
    L8_TRACE_STEP = 9,            /* step mark: aux = step number */
    L8_TRACE_PINNED_ALLOC = 10,   /* pinned-host pool block handed out */
    L8_TRACE_PINNED_FREE = 11
} l8_trace_kind;

/* One event as kept in memory and in the file (48 bytes, little-endian). */
typedef struct l8_trace_event {
    uint64_t time_ns;             /* CLOCK_MONOTONIC since the trace started */
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    uint64_t aux;
    uint32_t tag;                 /* string id, 0 = no tag */
    uint16_t kind;                /* l8_trace_kind */
    int16_t device;               /* CUDA ordinal, -1 host */
} l8_trace_event;

typedef struct l8_trace_config {
    size_t size;                  /* sizeof(l8_trace_config) */
    const char *path;             /* NULL: memory only */
    size_t capacity;              /* events kept in memory; 0: default 1<<20 */
} l8_trace_config;
#define L8_TRACE_CONFIG_INIT { sizeof(l8_trace_config), NULL, 0 }
/* Fill *cfg with the defaults of L8_TRACE_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_trace_config_init(l8_trace_config *cfg);

/* Start a trace. With a path, the file is created (truncated) at once and
 * written through a buffer; it is complete after l8_trace_flush/destroy.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_IO, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_trace_create(const l8_trace_config *cfg, l8_trace **out);

/* Flush and close; NULL: no-op. */
void l8_trace_destroy(l8_trace *t);

/* Record one event; tag and time are filled in here. NULL trace: no-op.
 * Never fails the caller: a write error is kept and reported by
 * l8_trace_flush. */
void l8_trace_record(l8_trace *t, l8_trace_kind kind, int device, uint64_t stream,
                     uint64_t addr, uint64_t size, uint64_t aux);

/* Write buffered events to the file. NULL or memory-only trace: L8_OK.
 * Errors: L8_ERR_IO (also an earlier write error: after the first one the
 * file ends there and every flush reports it), L8_ERR_OOM (some events were
 * recorded without their tag: no memory to intern it). */
L8_NODISCARD l8_status l8_trace_flush(l8_trace *t);

/* Events recorded so far (including those dropped from the ring) and the
 * number still held in memory. */
uint64_t l8_trace_count(l8_trace *t);
size_t l8_trace_held(l8_trace *t);

/* Copy the held events, oldest first, from index `first` (0 = oldest held).
 * Returns how many were copied. */
size_t l8_trace_events(l8_trace *t, size_t first, l8_trace_event *out, size_t n);

/* The string for a tag id, or NULL. The pointer lives as long as the trace. */
const char *l8_trace_tag_name(l8_trace *t, uint32_t id);

/* The process-wide trace from L8_TRACE, started on first call; NULL when the
 * variable is unset or the file could not be created (the error is kept in
 * the last-error record of the first caller). */
l8_trace *l8_trace_global(void);

/* Tags: a per-thread stack of names. The innermost one is recorded with
 * every event the thread causes. Strings are copied. Errors:
 * L8_ERR_INVALID_ARG (NULL, empty, longer than 127 bytes, or deeper than 64),
 * L8_ERR_STATE (pop of an empty stack). */
L8_NODISCARD l8_status l8_tag_push(const char *name);
L8_NODISCARD l8_status l8_tag_pop(void);
/* The calling thread's innermost tag, or NULL. */
const char *l8_tag_current(void);

/* ---- reading a trace file (tests and lean8-trace) ---- */
typedef struct l8_trace_reader l8_trace_reader;

/* Open a file written by a trace. Errors: L8_ERR_IO, L8_ERR_INVALID_ARG (bad
 * magic or version: the message says which). */
L8_NODISCARD l8_status l8_trace_reader_open(const char *path, l8_trace_reader **out);
void l8_trace_reader_close(l8_trace_reader *r);
/* Next event; *got = 0 at the end of what is written so far (a live file may
 * grow: call again later). Tag strings are collected as they pass.
 * Errors: L8_ERR_IO, L8_ERR_INVALID_ARG (a corrupt record). */
L8_NODISCARD l8_status l8_trace_reader_next(l8_trace_reader *r, l8_trace_event *ev, int *got);
const char *l8_trace_reader_tag_name(l8_trace_reader *r, uint32_t id);

#ifdef __cplusplus
}
#endif
#endif /* L8_TRACE_H */
