/* tests.h - shared helpers for the Check suites.
 *
 * Each tests/test_<module>.c exports one Suite constructor below. Tags:
 * "host" (runs everywhere, also under valgrind), "gpu" (needs a CUDA device;
 * run with CK_NOFORK, one context per test case), "slow".
 */
#ifndef L8_TESTS_H
#define L8_TESTS_H

#include <check.h>
#include <stdint.h>
#include "runtime/status.h"

/* Check's ck_assert_msg records a "mark point" on every assertion that
 * passes: a message written to its temporary file, about a microsecond each.
 * The suites compare millions of elements one assertion at a time (GPU
 * against host), which took minutes. Here a passing assertion costs nothing
 * and a failing one is reported exactly as before (file, line, expression,
 * message); every ck_assert_* macro expands through this one. A crash is
 * still reported with its test's name. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
    ((expr) ? (void)0 : \
     _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ## __VA_ARGS__))

Suite *l8_status_suite(void);
Suite *l8_alloc_suite(void);
Suite *l8_pinned_suite(void);
Suite *l8_trace_suite(void);
Suite *l8_tensor_suite(void);
Suite *l8_gpu_suite(void);
Suite *l8_fp8_suite(void);
Suite *l8_gemm_suite(void);
Suite *l8_loss_suite(void);
Suite *l8_recipe_suite(void);
Suite *l8_linear_suite(void);
Suite *l8_checkpoint_suite(void);
Suite *l8_fmnist_suite(void);
Suite *l8_params_suite(void);
Suite *l8_optim_suite(void);
Suite *l8_gather_suite(void);
Suite *l8_comm_suite(void);
Suite *l8_tp_suite(void);
Suite *l8_ddp_suite(void);
Suite *l8_interleave_suite(void);
Suite *l8_abi_suite(void);
Suite *l8_gemm_cache_suite(void);
Suite *l8_graph_suite(void);
Suite *l8_offload_suite(void);
Suite *l8_zero_suite(void);
Suite *l8_streams_suite(void);
Suite *l8_fuzz_suite(void);

/* The run's random seed: L8_TEST_SEED or time-based; printed once by main. */
uint64_t l8_test_seed(void);
/* xorshift64* stream seeded from l8_test_seed() ^ salt. */
typedef struct { uint64_t s; } l8_rng;
void l8_rng_init(l8_rng *r, uint64_t salt);
uint64_t l8_rng_next(l8_rng *r);
/* Uniform in [0, n). */
uint64_t l8_rng_below(l8_rng *r, uint64_t n);
/* Uniform float in [lo, hi). */
float l8_rng_float(l8_rng *r, float lo, float hi);
/* 1 when L8_TEST_QUICK is set (valgrind runs): loops use fewer iterations. */
int l8_test_quick(void);

/* ---- util.c ---- */
struct l8_segment_provider;
typedef struct l8_ctx l8_ctx;
/* A context on `device` ("host", "cuda:0") with an optional provider and
 * memory limit; fails the test if it cannot be made. */
l8_ctx *l8t_ctx(const char *device, const struct l8_segment_provider *prov, size_t memory_limit);
/* Synchronize, assert that no byte is still allocated and the allocator is
 * consistent, destroy. */
void l8t_ctx_finish(l8_ctx *ctx);
/* malloc that fails the test instead of returning NULL. */
void *l8t_xmalloc(size_t n);
/* Assert that tensors x and y (the same byte size) hold the same bytes,
 * naming `what` and the first byte that differs; returns how many of x's
 * bytes are neither 0x00 nor 0xFF (the tests' poison), for a check that
 * something was written. */
struct l8_tensor;
size_t l8t_same_bytes(const struct l8_tensor *x, const struct l8_tensor *y, const char *what);

/* A fresh temporary directory ($TMPDIR or /tmp, "<prefix>.XXXXXX") and the
 * files a test names in it (at most 16). */
typedef struct l8t_tmpdir {
    char dir[256];
    char path[16][320];
    int n;
} l8t_tmpdir;
void l8t_tmp_init(l8t_tmpdir *d, const char *prefix);
/* The path of `name` in d, remembered for cleanup. */
const char *l8t_tmp_file(l8t_tmpdir *d, const char *name);

/* Assert a status and show the last error when it differs. */
#define L8_CK(expr) do { l8_status l8__t = (expr); \
    ck_assert_msg(l8__t == L8_OK, "%s -> %s", #expr, l8_last_error_string()); } while (0)
#define L8_CK_ST(expr, want) do { l8_status l8__t = (expr); \
    ck_assert_msg(l8__t == (want), "%s -> %s, wanted %s (%s)", #expr, l8_status_name(l8__t), \
                  l8_status_name(want), l8_last_error_string()); } while (0)

/* ---- world.c: ranks as threads of this process (host contexts) ----
 * Each rank creates a host context, joins communicator *id as rank of
 * world, runs fn and records its status, message and output; threads never
 * assert (Check's assertions belong to the test's thread). */
struct l8_comm;
struct l8_comm_id;
typedef struct l8t_job l8t_job;
typedef l8_status (*l8t_rank_fn)(l8t_job *j, struct l8_comm *c, l8_ctx *ctx);

struct l8t_job {
    int rank, world;
    const struct l8_comm_id *id;
    int timeout_ms;
    l8t_rank_fn fn;
    const void *arg;
    l8_status st;                 /* the first failure, or L8_OK */
    char err[700];
    unsigned char *out;           /* what the rank produced (malloc'ed by fn) */
    size_t out_bytes;
};

void *l8t_rank_main(void *job);
/* A new id of transport t (int: an l8_comm_transport). */
struct l8_comm_id l8t_comm_id(int transport);
/* A communicator of one rank over transport t on ctx (fails the test if it
 * cannot be made). */
struct l8_comm *l8t_comm_one(l8_ctx *ctx, int transport);
/* Run fn on `world` (<= 8) ranks of a new communicator of transport t;
 * jobs[world] out. timeout_ms 0: 20 s. */
void l8t_world_run(int world, int transport, l8t_rank_fn fn, const void *arg, l8t_job *jobs,
                   int timeout_ms);
void l8t_world_free(l8t_job *jobs, int world);
/* Fail the test unless every rank returned L8_OK. */
void l8t_world_ok(l8t_job *jobs, int world);
/* Copy bytes into j->out. */
l8_status l8t_keep(l8t_job *j, const void *p, size_t bytes);

#endif
