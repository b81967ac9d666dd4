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
 * contexts hand it to their allocators unless their config names a trace
 * file of their own (l8_ctx_config.trace_path).
 *
 * Paths may contain %r (the process rank, l8_trace_rank()), %p (the pid) and
 * %% (a '%'). An existing file is never truncated: a trace whose writer is
 * still running (or that this process still writes) is refused with
 * L8_ERR_IO; a finished one is replaced by a new file renamed over it, so a
 * reader still following the old one keeps it whole.
 *
 * A background thread per file-backed trace writes buffered records at least
 * every 50 ms, so a live reader sees even a quiet or hung writer's last
 * events within about 100 ms. Destroy writes an end marker.
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

/* What the `stream` field of an event holds (format version 2): the role of
 * the stream in its context, not its handle. Append-only. */
typedef enum l8_trace_stream {
    L8_TRACE_STREAM_NONE = 0,     /* no stream (pinned pool, step marks, handle 0) */
    L8_TRACE_STREAM_COMPUTE = 1,
    L8_TRACE_STREAM_COMM = 2,
    L8_TRACE_STREAM_COPY = 3,
    L8_TRACE_STREAM_OTHER = 4     /* a handle nobody registered (l8_trace_set_stream) */
} l8_trace_stream;

/* One event as kept in memory and in the file (48 bytes, little-endian). */
typedef struct l8_trace_event {
    uint64_t time_ns;             /* CLOCK_MONOTONIC since the trace started (read
                                     through the TSC where safe: docs/trace-format.md) */
    uint64_t addr;
    uint64_t size;
    uint64_t stream;              /* l8_trace_stream (version 1 files: the raw handle) */
    uint64_t aux;
    uint32_t tag;                 /* string id, 0 = no tag */
    uint16_t kind;                /* l8_trace_kind */
    int16_t device;               /* CUDA ordinal, -1 host */
} l8_trace_event;

#define L8_TRACE_DEVICE_ANY (-2)  /* header device of a trace not bound to one device */

typedef struct l8_trace_config {
    size_t size;                  /* sizeof(l8_trace_config) */
    const char *path;             /* NULL: memory only; %r, %p, %% expanded */
    size_t capacity;              /* events kept in memory; 0: default 1<<20 without
                                     a path, 1<<16 with one (the file keeps them all) */
    int rank;                     /* header rank; -1: the process rank (follows
                                     l8_trace_set_rank) */
    int device;                   /* header device: CUDA ordinal, -1 host,
                                     L8_TRACE_DEVICE_ANY (default): not one device */
} l8_trace_config;
#define L8_TRACE_CONFIG_INIT { sizeof(l8_trace_config), NULL, 0, -1, L8_TRACE_DEVICE_ANY }
/* Fill *cfg with the defaults of L8_TRACE_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_trace_config_init(l8_trace_config *cfg);

/* Start a trace. With a path (after %r/%p expansion), the file is created
 * at once with its header, never by truncating an existing file (see the top
 * of this header), and written through a buffer that a background thread
 * drains at least every 50 ms; it is complete after l8_trace_flush/destroy.
 * Errors: L8_ERR_INVALID_ARG (empty path, unknown %-sequence, bad size),
 * L8_ERR_IO (cannot create; EEXIST: the file belongs to a running writer or
 * is not a lean8 trace — the message names the pid or the reason),
 * L8_ERR_OOM. */
L8_NODISCARD l8_status l8_trace_create(const l8_trace_config *cfg, l8_trace **out);

/* Stop the flusher, write the end marker, flush and close; NULL: no-op. */
void l8_trace_destroy(l8_trace *t);

/* The path the trace writes (after expansion), or NULL for memory only. */
const char *l8_trace_path(const l8_trace *t);

/* The process rank used for %r and for headers with rank -1: the last
 * l8_trace_set_rank value, else the RANK environment variable, else 0. */
int l8_trace_rank(void);

/* Set the process rank (the communicator layer calls this once it knows).
 * Open traces that follow the process rank get it written into their file
 * header at once; paths already expanded keep their name.
 * Errors: L8_ERR_INVALID_ARG (rank < 0). */
L8_NODISCARD l8_status l8_trace_set_rank(int rank);

/* Register the role of a stream handle on a device, so events on it record
 * `cls` instead of the handle. Registrations are counted: registering the
 * same (device, handle) again adds a holder (the role is replaced), and
 * L8_TRACE_STREAM_NONE drops one holder. Unregistered non-zero handles record
 * L8_TRACE_STREAM_OTHER, handle 0 records NONE. NULL trace: L8_OK.
 * Errors: L8_ERR_INVALID_ARG (cls out of range), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_trace_set_stream(l8_trace *t, int device, uint64_t handle,
                                           l8_trace_stream cls);

/* Record one event; tag and time are filled in here, and `stream` (a raw
 * handle) is replaced by its registered role. NULL trace: no-op.
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

/* Open a file written by a trace (format version 1 or 2). Errors: L8_ERR_IO,
 * L8_ERR_INVALID_ARG (bad magic or version: the message says which). */
L8_NODISCARD l8_status l8_trace_reader_open(const char *path, l8_trace_reader **out);
void l8_trace_reader_close(l8_trace_reader *r);
/* Next event; *got = 0 at the end of what is written so far (a live file may
 * grow: call again later). Tag strings and the end marker are taken in as
 * they pass (events after the marker are still returned).
 * Errors: L8_ERR_IO (read error; also the file shrank below what was read:
 * truncated or rewritten under the reader), L8_ERR_INVALID_ARG (a corrupt
 * record: the message gives the offset; the reader stays there). */
L8_NODISCARD l8_status l8_trace_reader_next(l8_trace_reader *r, l8_trace_event *ev, int *got);
const char *l8_trace_reader_tag_name(l8_trace_reader *r, uint32_t id);

/* The file's header and the reader's view of it. */
typedef struct l8_trace_file_info {
    size_t size;                  /* caller sets sizeof(l8_trace_file_info) */
    uint32_t version;             /* format version: 1 or 2 */
    uint32_t pid;                 /* the writing process */
    int32_t rank;                 /* version 1: -1 */
    int32_t device;               /* ordinal, -1 host, L8_TRACE_DEVICE_ANY */
    uint64_t start_realtime_ns;   /* ns since the Unix epoch */
    uint64_t start_monotonic_ns;
    uint64_t offset;              /* bytes consumed: the next record's offset */
    uint64_t file_bytes;          /* the file's size now */
    int ended;                    /* the writer's end marker has been read */
    int replaced;                 /* the path now names another file (a new trace) */
    int shrunk;                   /* the file is shorter than offset */
} l8_trace_file_info;

/* Fill *out: the header (re-read, so a rank set after creation shows) and
 * the state; file_bytes - offset are bytes past the last whole record (a
 * record being written, or, once the writer is gone, a truncated tail).
 * Errors: L8_ERR_INVALID_ARG (NULL, size too small), L8_ERR_IO. */
L8_NODISCARD l8_status l8_trace_reader_info(l8_trace_reader *r, l8_trace_file_info *out);

#ifdef __cplusplus
}
#endif
#endif /* L8_TRACE_H */
