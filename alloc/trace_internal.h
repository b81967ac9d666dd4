/* trace_internal.h - what alloc/trace.c (recording), alloc/trace_file.c
 * (the file: naming, creation, flusher, rank) and alloc/trace_read.c (the
 * reader) share. Not installed. */
#ifndef L8_TRACE_INTERNAL_H
#define L8_TRACE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "alloc/trace.h"

#define TRACE_VERSION 2u               /* what the writer writes */
#define TRACE_RECORD 48u
#define TRACE_HEADER 48u
#define TRACE_KIND_STRING 0xFFFFu      /* string definition record */
#define TRACE_KIND_END 0xFFFEu         /* the writer's end marker (version 2) */
#define TRACE_KIND_FIRST_RESERVED 0x8000u
#define TRACE_HDR_RANK_OFF 40          /* i32 rank in the version 2 header */
#define TRACE_FLUSH_PERIOD_NS 50000000ull   /* background flusher: 50 ms */
#define WBUF_BYTES ((size_t)64 * 1024)

extern const unsigned char l8i_trace_magic[8];

/* The file header (docs/trace-format.md). Version 1 had a u64 reserved
 * field where version 2 keeps rank and device. */
typedef struct trace_header {
    unsigned char magic[8];
    uint32_t version;
    uint32_t record_size;
    uint32_t header_size;
    uint32_t pid;
    uint64_t start_realtime_ns;
    uint64_t start_monotonic_ns;
    int32_t rank;
    int32_t device;
} trace_header;

typedef struct stream_role {
    int device;
    uint64_t handle;
    uint16_t cls;                 /* l8_trace_stream */
    uint32_t holders;
} stream_role;

struct l8_trace {
    pthread_mutex_t mu;
    uint64_t serial;              /* unique per trace in this process */
    uint64_t t0;                  /* CLOCK_MONOTONIC ns at create */
    uint64_t last_time;           /* latest time_ns recorded */
    /* ring */
    l8_trace_event *ring;
    size_t cap, head;
    uint64_t count;
    /* stream roles (a handful: linear search) */
    stream_role *roles;
    size_t nroles, roles_cap;
    /* file (fd < 0: memory only) */
    int fd;
    char *path;                   /* expanded */
    int follow_rank;              /* header rank follows l8_trace_set_rank */
    uint64_t dev_id, ino;         /* the file's identity (st_dev, st_ino) */
    unsigned char *wbuf;          /* being filled (t->mu) */
    size_t wlen;
    unsigned char *spare;         /* the other buffer, NULL while the flusher holds it */
    unsigned char *pend;          /* handed to the flusher, being written; NULL if none */
    size_t pend_len;
    pthread_cond_t done;          /* signalled when pend has been written */
    int done_init;
    uint64_t written;             /* bytes written to the file */
    int write_through;            /* set at exit: every record is written at once */
    int werr;                     /* errno of the first write error, 0 if none */
    uint64_t unwritten;           /* events not written because of werr */
    uint64_t untagged;            /* events whose tag could not be interned (no memory) */
    /* the background flusher (file traces) */
    pthread_t flusher;
    pthread_cond_t wake;
    int flusher_on, stop;
    int file_ready;               /* created and registered */
    struct l8_trace *next_open;   /* the registry of open file traces */
    /* tag interning: names[id - 1]; slots is an open-addressing table of ids */
    char **names;
    uint32_t nnames, names_cap;
    uint32_t *slots;
    uint32_t slots_cap;           /* power of two, or 0 */
};

/* ---- trace.c ---- */
uint64_t l8i_clock_ns(int clock_id);
l8_status l8i_trace_io_error(int e, const char *call, const char *file, int line,
                             const char *what, const char *path);
/* Write all of p, retrying short writes and EINTR. Returns 0 or an errno. */
int l8i_write_all(int fd, const void *p, size_t n, uint64_t *written);
/* Write everything buffered to the file: wait for the flusher's buffer,
 * then write the current one (t->mu held; the wait releases it). */
void l8i_trace_drain(l8_trace *t);
/* Give the current buffer to the flusher, continue in the spare one
 * (t->mu held, nothing pending). */
void l8i_trace_hand_off(l8_trace *t);
/* Append the end marker to the buffer (t->mu held). */
void l8i_trace_put_end(l8_trace *t);

/* ---- trace_file.c ---- */
/* Create t's file from cfg (path expanded, header written), start the
 * flusher and enter t in the registry. */
l8_status l8i_trace_open_file(l8_trace *t, const l8_trace_config *cfg);
/* Stop the flusher, leave the registry, write the end marker, flush and
 * close (t->mu not held). */
void l8i_trace_close_file(l8_trace *t);
/* Stop the flusher thread only (exit handler of the process-wide trace). */
void l8i_trace_stop_flusher(l8_trace *t);

#endif
