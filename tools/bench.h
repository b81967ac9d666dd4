/* bench.h - shared pieces of lean8-bench: timing, medians, the JSON report.
 *
 * Every subcommand prints a table and writes the same numbers as JSON
 * when asked (--json PATH; nothing is written without it). Ratios
 * are measured in the same run, never against remembered numbers.
 */
#ifndef L8_BENCH_H
#define L8_BENCH_H

#include <stddef.h>
#include <stdio.h>
#include "runtime/lean8.h"

/* Monotonic time in nanoseconds. */
double bench_now_ns(void);
/* Median of n values (sorts v in place). */
double bench_median(double *v, size_t n);

/* A flat JSON object written as results come in. */
typedef struct bench_json {
    FILE *f;
    int first;
} bench_json;
int bench_json_open(bench_json *j, const char *path, const char *bench, const char *device);
void bench_json_num(bench_json *j, const char *key, double v);
void bench_json_str(bench_json *j, const char *key, const char *v);
void bench_json_close(bench_json *j);

/* Options common to all subcommands, parsed from argv after the name. */
typedef struct bench_opts {
    const char *json;             /* --json PATH */
    const char *device;           /* --device cuda:0|host (default: best) */
    const char *dump_trace;       /* --dump-trace PATH (alloc) */
    const char *cache;            /* --cache FILE (gemm): persistent GEMM plan cache */
    int quick;                    /* --quick: fewer repetitions */
} bench_opts;
int bench_parse(int argc, char **argv, bench_opts *o);

/* A rows x cols tensor (cols == 0: a vector of rows); a no-op once *st is
 * an error, so a run of calls checks once at the end. */
l8_tensor *bench_mk(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, l8_status *st);
/* Fill t with xorshift values in [-amp, amp) (an f32 upload, converted to
 * t's dtype), then synchronize. */
l8_status bench_fill(l8_ctx *ctx, l8_tensor *t, float amp, uint64_t seed);

/* Subcommands. Return a process exit status. */
int bench_alloc(const bench_opts *o);
int bench_cast(const bench_opts *o);
int bench_linear(const bench_opts *o);
int bench_gemm(const bench_opts *o);
/* lean8-train's FP8 GEMMs: cuBLASLt against lean8's small kernel (bench_gemm_small.c). */
int bench_gemm_small(const bench_opts *o);
/* comm: bench_comm runs the parts below (bench_comm.c). */
int bench_comm(const bench_opts *o);
/* The last-dimension rearrangement (l8i_interleave) against a device copy. */
int bench_comm_interleave(const bench_opts *o, bench_json *j);
/* All-reduce, all-gather (first and last dim), reduce-scatter bus bandwidth:
 * launched (WORLD_SIZE > 1) over l8_comm_init_env, else the host transports. */
int bench_comm_collectives(const bench_opts *o, bench_json *j);
int bench_trace(const bench_opts *o);
/* Data parallel: step time without a reducer, reducing after backward, overlapped. */
int bench_ddp(const bench_opts *o);
int bench_offload(const bench_opts *o);

#endif
