/* test_comm.c - communicators on the host transports: ranks as threads of
 * this process, joined by the THREADS transport or by TCP on loopback.
 *
 * Threads never assert (Check's assertions must stay on the test's thread):
 * each rank records its status, message and output; the test thread
 * compares them with a serial reference computed here from the same inputs.
 * Multi-process runs (lean8-run, TCP rendezvous, a rank that dies) are in
 * tests/comm.sh.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/comm.h"
#include "runtime/fp8.h"

/* ---- inputs: element i of rank r, seeded ---- */

static float value(uint64_t salt, int r, size_t i)
{
    l8_rng g;
    l8_rng_init(&g, salt * 1000003u + (uint64_t)r * 7919u + i * 104729u);
    l8_rng_next(&g);
    return l8_rng_float(&g, -3.0f, 3.0f);
}

static void fill(void *p, l8_dtype dt, size_t n, uint64_t salt, int r)
{
    for (size_t i = 0; i < n; i++) l8_host_store_f32(p, dt, i, value(salt, r, i));
}

static l8_status tensor(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, l8_tensor **t,
                        void **data)
{
    int64_t shape[2] = { rows, cols };
    L8_CHECK(l8_tensor_empty(ctx, dt, 2, shape, t));
    L8_CHECK(l8_tensor_data(*t, data));
    memset(*data, 0xA5, l8_tensor_nbytes(*t));          /* poison: unwritten bytes show */
    return L8_OK;
}


/* ---- one collective, described ---- */

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_BROADCAST } kind;

typedef struct coll_case {
    kind k;
    l8_dtype dt;
    int64_t rows, cols;           /* of the per-rank ("small") tensor */
    int dim;
    l8_reduce_op op;
    int root;
    uint64_t salt;
    int in_place;
} coll_case;

static l8_status run_case(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const coll_case *k = j->arg;
    int w = j->world;
    int64_t br = k->dim == 0 ? k->rows * w : k->rows, bc = k->dim == 0 ? k->cols : k->cols * w;
    l8_tensor *a = NULL, *b = NULL;
    void *pa, *pb;
    l8_status st = L8_OK;
    switch (k->k) {
    case K_ALL_REDUCE:
        st = tensor(ctx, k->dt, k->rows, k->cols, &a, &pa);
        if (st == L8_OK) fill(pa, k->dt, (size_t)(k->rows * k->cols), k->salt, j->rank);
        if (st == L8_OK && !k->in_place) st = tensor(ctx, k->dt, k->rows, k->cols, &b, &pb);
        if (st == L8_OK) st = l8_comm_all_reduce(c, a, k->in_place ? a : b, k->op, NULL);
        if (st == L8_OK) st = l8t_keep(j, k->in_place ? pa : pb, l8_tensor_nbytes(a));
        break;
    case K_ALL_GATHER:
        st = tensor(ctx, k->dt, k->rows, k->cols, &a, &pa);
        if (st == L8_OK) fill(pa, k->dt, (size_t)(k->rows * k->cols), k->salt, j->rank);
        if (st == L8_OK) st = tensor(ctx, k->dt, br, bc, &b, &pb);
        if (st == L8_OK) st = l8_comm_all_gather(c, a, b, k->dim, NULL);
        if (st == L8_OK) st = l8t_keep(j, pb, l8_tensor_nbytes(b));
        break;
    case K_REDUCE_SCATTER:
        st = tensor(ctx, k->dt, br, bc, &a, &pa);
        if (st == L8_OK) fill(pa, k->dt, (size_t)(br * bc), k->salt, j->rank);
        if (st == L8_OK) st = tensor(ctx, k->dt, k->rows, k->cols, &b, &pb);
        if (st == L8_OK) st = l8_comm_reduce_scatter(c, a, b, k->op, k->dim, NULL);
        if (st == L8_OK) st = l8t_keep(j, pb, l8_tensor_nbytes(b));
        break;
    case K_BROADCAST:
        st = tensor(ctx, k->dt, k->rows, k->cols, &a, &pa);
        if (st == L8_OK) fill(pa, k->dt, (size_t)(k->rows * k->cols), k->salt, j->rank);
        if (st == L8_OK) st = l8_comm_broadcast(c, a, k->root, NULL);
        if (st == L8_OK) st = l8t_keep(j, pa, l8_tensor_nbytes(a));
        break;
    }
    l8_tensor_destroy(a);
    l8_tensor_destroy(b);
    return st;
}

/* The serial reference of op over ranks of element i of a [R, C] input
 * (rank order 0..w-1 in f32, rounded once). */
static float ref_reduce(const coll_case *k, int w, size_t i)
{
    float acc = 0;
    for (int r = 0; r < w; r++) {
        /* the value as the rank's dtype holds it */
        unsigned char tmp[4];
        l8_host_store_f32(tmp, k->dt, 0, value(k->salt, r, i));
        float v = l8_host_load_f32(tmp, k->dt, 0);
        if (r == 0) acc = v;
        else if (k->op == L8_REDUCE_MAX) acc = isnan(acc) || isnan(v) ? NAN : (v > acc ? v : acc);
        else acc += v;
    }
    if (k->op == L8_REDUCE_AVG) acc /= (float)w;
    return acc;
}

/* Expected bytes of rank r's output. */
static unsigned char *expected(const coll_case *k, int w, int r, size_t *bytes)
{
    size_t es = l8_dtype_size(k->dt), R = (size_t)k->rows, C = (size_t)k->cols, n = R * C;
    size_t out_n = k->k == K_ALL_GATHER ? n * (size_t)w : n;
    unsigned char *e = l8t_xmalloc(out_n * es + 1);
    for (size_t o = 0; o < out_n; o++) {
        if (k->k == K_ALL_REDUCE) {
            l8_host_store_f32(e, k->dt, o, ref_reduce(k, w, o));
        } else if (k->k == K_BROADCAST) {
            l8_host_store_f32(e, k->dt, o, value(k->salt, k->root, o));
        } else if (k->k == K_ALL_GATHER) {
            /* output [R*w, C] (dim 0) or [R, w*C] (last): which rank, which element */
            size_t src_r, src_i;
            if (k->dim == 0) { src_r = o / n; src_i = o % n; }
            else { size_t row = o / (C * w), col = o % (C * w); src_r = col / C; src_i = row * C + col % C; }
            l8_host_store_f32(e, k->dt, o, value(k->salt, (int)src_r, src_i));
        } else {
            /* reduce-scatter: rank r keeps its slice of the [R*w, C] / [R, C*w] input */
            size_t row = o / C, col = o % C;
            size_t big_i = k->dim == 0 ? ((size_t)r * R + row) * C + col : row * C * w + (size_t)r * C + col;
            coll_case one = *k;
            l8_host_store_f32(e, k->dt, o, ref_reduce(&one, w, big_i));
        }
    }
    *bytes = out_n * es;
    return e;
}

static void check_case(const coll_case *k, int w, l8_comm_transport t, l8t_job *jobs)
{
    l8t_world_run(w, t, run_case, k, jobs, 0);
    l8t_world_ok(jobs, w);
    for (int r = 0; r < w; r++) {
        size_t bytes;
        unsigned char *e = expected(k, w, r, &bytes);
        ck_assert_msg(jobs[r].out_bytes == bytes, "kind %d rank %d: %zu bytes, want %zu", k->k, r,
                      jobs[r].out_bytes, bytes);
        size_t bad = bytes;
        for (size_t i = 0; i < bytes && bad == bytes; i++)
            if (jobs[r].out[i] != e[i]) bad = i;
        ck_assert_msg(bad == bytes, "kind %d dtype %s %lldx%lld dim %d op %d world %d transport "
                      "%d: rank %d byte %zu is %02x, want %02x (seed %llu)", k->k,
                      l8_dtype_name(k->dt), (long long)k->rows, (long long)k->cols, k->dim,
                      k->op, w, t, r, bad, bad < bytes ? jobs[r].out[bad] : 0,
                      bad < bytes ? e[bad] : 0, (unsigned long long)l8_test_seed());
        free(e);
    }
}

static const l8_dtype k_dtypes[] = { L8_F32, L8_BF16, L8_F16, L8_E4M3, L8_E5M2 };

/* Every collective, dtype, dim and world 2..4, against the serial reference. */
static void sweep(l8_comm_transport t)
{
    l8t_job jobs[8];
    int quick = l8_test_quick();
    static const int64_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 7, 33 }, { 64, 130 } };
    for (int w = 2; w <= 4; w++)
        for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                if (quick && (s == 3 || (w == 3 && d > 1))) continue;
                for (int kk = K_ALL_REDUCE; kk <= K_BROADCAST; kk++)
                    for (int dim = 0; dim <= 1; dim++) {
                        if ((kk == K_ALL_REDUCE || kk == K_BROADCAST) && dim) continue;
                        coll_case k = { (kind)kk, k_dtypes[d], shapes[s][0], shapes[s][1],
                                        dim ? -1 : 0, (l8_reduce_op)((s + (size_t)kk) % 3),
                                        w - 1, l8_test_seed() + s * 31 + d, (int)(s & 1) };
                        check_case(&k, w, t, jobs);
                        l8t_world_free(jobs, w);
                    }
            }
}

START_TEST(test_comm_threads_collectives) { sweep(L8_COMM_THREADS); }
END_TEST

START_TEST(test_comm_tcp_collectives) { sweep(L8_COMM_TCP); }
END_TEST

/* The same all-reduce on both transports gives the same bits (the host
 * reductions are deterministic), run after run. */
START_TEST(test_comm_transports_agree)
{
    coll_case k = { K_ALL_REDUCE, L8_BF16, 33, 77, 0, L8_REDUCE_SUM, 0, l8_test_seed(), 0 };
    l8t_job a[4], b[4], c[4];
    l8t_world_run(4, L8_COMM_THREADS, run_case, &k, a, 0);
    l8t_world_run(4, L8_COMM_TCP, run_case, &k, b, 0);
    l8t_world_run(4, L8_COMM_THREADS, run_case, &k, c, 0);
    l8t_world_ok(a, 4);
    l8t_world_ok(b, 4);
    l8t_world_ok(c, 4);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(a[r].out_bytes, b[r].out_bytes);
        ck_assert_msg(!memcmp(a[r].out, b[r].out, a[r].out_bytes), "rank %d: THREADS and TCP differ", r);
        ck_assert_msg(!memcmp(a[r].out, c[r].out, a[r].out_bytes), "rank %d: two runs differ", r);
        ck_assert_msg(!memcmp(a[r].out, a[0].out, a[r].out_bytes), "rank %d differs from rank 0", r);
    }
    l8t_world_free(a, 4), l8t_world_free(b, 4), l8t_world_free(c, 4);
}
END_TEST

/* ---- seeds/004: the gather along the last dimension ---- */

typedef struct seed_case { l8_dtype dt; int first_dim; } seed_case;

/* x_ref [128, 16 * world] is the same on every rank; rank r keeps columns
 * [16r, 16r + 16) and gathers them back (the seed's first script). */
static l8_status seed_gather(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    const seed_case *k = j->arg;
    int w = j->world;
    l8_tensor *xi = NULL, *xt = NULL;
    void *pi, *pt;
    l8_status st = tensor(ctx, k->dt, 128, 16, &xi, &pi);
    if (st == L8_OK) st = tensor(ctx, k->dt, k->first_dim ? 128 * w : 128, k->first_dim ? 16 : 16 * w, &xt, &pt);
    size_t es = l8_dtype_size(k->dt);
    for (int row = 0; st == L8_OK && row < 128; row++)
        for (int col = 0; col < 16; col++)
            l8_host_store_f32(pi, k->dt, (size_t)row * 16 + (size_t)col,
                              value(404, 0, (size_t)row * 16 * w + (size_t)j->rank * 16 + (size_t)col));
    if (st == L8_OK) st = l8_comm_all_gather(c, xi, xt, k->first_dim ? 0 : -1, NULL);
    if (st == L8_OK) st = l8t_keep(j, pt, (size_t)128 * 16 * w * es);
    l8_tensor_destroy(xi);
    l8_tensor_destroy(xt);
    return st;
}

START_TEST(test_comm_seed004_last_dim_gather)
{
    static const l8_dtype dts[] = { L8_F32, L8_BF16, L8_E4M3 };
    for (int w = 2; w <= 4; w += 2)
        for (size_t d = 0; d < 3; d++) {
            size_t es = l8_dtype_size(dts[d]), n = (size_t)128 * 16 * w;
            unsigned char *ref = l8t_xmalloc(n * es);
            for (size_t i = 0; i < n; i++) l8_host_store_f32(ref, dts[d], i, value(404, 0, i));
            for (int first = 0; first <= 1; first++) {
                l8t_job jobs[4];
                seed_case k = { dts[d], first };
                l8t_world_run(w, L8_COMM_THREADS, seed_gather, &k, jobs, 0);
                l8t_world_ok(jobs, w);
                for (int r = 0; r < w; r++) {
                    int same = jobs[r].out_bytes == n * es && !memcmp(jobs[r].out, ref, n * es);
                    /* the last-dimension gather rebuilds x_ref exactly; the
                     * first-dimension one (TE's bug) does not */
                    ck_assert_msg(same == !first, "%s world %d rank %d: gather along %s %s x_ref",
                                  l8_dtype_name(dts[d]), w, r, first ? "dim 0" : "the last dim",
                                  same ? "equals" : "differs from");
                }
                l8t_world_free(jobs, w);
            }
            free(ref);
        }
}
END_TEST

/* ---- split and grid ---- */

static l8_status grid_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    l8_comm *tp = NULL, *dp = NULL;
    l8_status st = l8_comm_grid(c, 2, &tp, &dp);
    int32_t got[6] = { l8_comm_rank(tp), l8_comm_size(tp), l8_comm_rank(dp), l8_comm_size(dp), 0, 0 };
    l8_tensor *t = NULL;
    void *p;
    /* sum of global ranks over each group */
    if (st == L8_OK) st = tensor(ctx, L8_F32, 1, 1, &t, &p);
    if (st == L8_OK) *(float *)p = (float)j->rank;
    if (st == L8_OK) st = l8_comm_all_reduce(tp, t, t, L8_REDUCE_SUM, NULL);
    if (st == L8_OK) got[4] = (int32_t)*(float *)p, *(float *)p = (float)j->rank;
    if (st == L8_OK) st = l8_comm_all_reduce(dp, t, t, L8_REDUCE_SUM, NULL);
    if (st == L8_OK) got[5] = (int32_t)*(float *)p;
    /* the parent still works after its children did */
    if (st == L8_OK) st = l8_comm_barrier(c);
    if (st == L8_OK) st = l8t_keep(j, got, sizeof got);
    l8_tensor_destroy(t);
    l8_comm_destroy(tp);
    l8_comm_destroy(dp);
    return st;
}

START_TEST(test_comm_grid)
{
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS; t++) {
        l8t_job jobs[4];
        l8t_world_run(4, (l8_comm_transport)t, grid_fn, NULL, jobs, 0);
        l8t_world_ok(jobs, 4);
        for (int r = 0; r < 4; r++) {
            const int32_t *g = (const int32_t *)jobs[r].out;
            /* TP groups {0,1} {2,3}; DP groups {0,2} {1,3} */
            ck_assert_int_eq(g[0], r % 2);
            ck_assert_int_eq(g[1], 2);
            ck_assert_int_eq(g[2], r / 2);
            ck_assert_int_eq(g[3], 2);
            ck_assert_int_eq(g[4], r < 2 ? 1 : 5);
            ck_assert_int_eq(g[5], r % 2 ? 4 : 2);
        }
        l8t_world_free(jobs, 4);
    }
}
END_TEST

/* ---- faults: mismatches, a rank that leaves, a rank that never comes ---- */

static l8_status mismatch_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    l8_tensor *t = NULL;
    void *p;
    l8_status st = tensor(ctx, L8_F32, 1, j->rank == 1 ? 102 : 100, &t, &p);
    if (st == L8_OK) st = l8_comm_all_reduce(c, t, t, L8_REDUCE_SUM, NULL);
    l8_tensor_destroy(t);
    return st;
}

static l8_status leave_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    if (j->rank == 1) return L8_OK;            /* leaves (destroy) without the collective */
    l8_tensor *t = NULL;
    void *p;
    l8_status st = tensor(ctx, L8_F32, 4, 4, &t, &p);
    if (st == L8_OK) st = l8_comm_all_reduce(c, t, t, L8_REDUCE_SUM, NULL);
    /* a failed communicator keeps failing */
    if (st != L8_OK) {
        char first[700];
        snprintf(first, sizeof first, "%s", l8_last_error_string());
        l8_status again = l8_comm_barrier(c);
        if (again == L8_OK) st = L8_FAIL(L8_ERR_INTERNAL, "barrier after a failure succeeded");
        else l8_error_set(st, 0, "", "", __FILE__, __LINE__, "%s", first);
    }
    l8_tensor_destroy(t);
    return st;
}

static l8_status silent_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    if (j->rank == 1) {                        /* present but never joins the collective */
        struct timespec ts = { 1, 0 };
        nanosleep(&ts, NULL);
        return L8_OK;
    }
    return l8_comm_barrier(c);
}

START_TEST(test_comm_faults)
{
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS; t++) {
        l8t_job jobs[3];
        /* shapes that differ across ranks: an error on both, not a hang */
        l8t_world_run(2, (l8_comm_transport)t, mismatch_fn, NULL, jobs, 0);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(jobs[r].st == L8_ERR_COMM, "transport %d rank %d: %s", t, r, jobs[r].err);
            ck_assert_msg(strstr(jobs[r].err, "disagree"), "rank %d: %s", r, jobs[r].err);
        }
        /* a rank that leaves: the others fail fast with L8_ERR_COMM */
        l8t_world_run(3, (l8_comm_transport)t, leave_fn, NULL, jobs, 20000);
        ck_assert_int_eq(jobs[1].st, L8_OK);
        for (int r = 0; r < 3; r += 2) {
            ck_assert_msg(jobs[r].st == L8_ERR_COMM, "transport %d rank %d: %s", t, r, jobs[r].err);
            /* rank 1 left; a survivor may first lose the other survivor, which failed on it */
            ck_assert_msg(strstr(jobs[r].err, "rank 1") || strstr(jobs[r].err, r ? "rank 0" : "rank 2"),
                          "rank %d: %s", r, jobs[r].err);
            ck_assert_msg(strstr(jobs[r].err, "gone") || strstr(jobs[r].err, "left") ||
                          strstr(jobs[r].err, "lost"), "rank %d: %s", r, jobs[r].err);
        }
        /* a rank that never calls: the timeout, named */
        l8t_world_run(2, (l8_comm_transport)t, silent_fn, NULL, jobs, 300);
        ck_assert_msg(jobs[0].st == L8_ERR_TIMEOUT || jobs[0].st == L8_ERR_COMM, "transport %d: %s",
                      t, jobs[0].err);
        ck_assert_msg(strstr(jobs[0].err, "barrier"), "%s", jobs[0].err);
    }
}
END_TEST

/* Joining with another world size fails for the whole group, at once. */
START_TEST(test_comm_join_mismatch)
{
    for (int t = L8_COMM_TCP; t <= L8_COMM_THREADS; t++) {
        l8_comm_id id = l8t_comm_id((l8_comm_transport)t);
        l8t_job jobs[2];
        pthread_t th[2];
        for (int r = 0; r < 2; r++) {
            jobs[r] = (l8t_job){ .rank = r, .world = r == 1 ? 3 : 2, .id = &id };
            ck_assert_int_eq(pthread_create(&th[r], NULL, l8t_rank_main, &jobs[r]), 0);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(jobs[r].st == L8_ERR_COMM, "transport %d rank %d: %s", t, r, jobs[r].err);
            ck_assert_msg(strstr(jobs[r].err, "world size 3"), "rank %d: %s", r, jobs[r].err);
        }
    }
}
END_TEST

/* FP8 tensors cast with different scales are not gathered as bytes. */
static l8_status scales_fn(l8t_job *j, l8_comm *c, l8_ctx *ctx)
{
    l8_tensor *a = NULL, *b = NULL;
    l8_fp8_meta *m = NULL;
    void *pa, *pb;
    l8_status st = tensor(ctx, L8_E4M3, 2, 16, &a, &pa);
    if (st == L8_OK) st = tensor(ctx, L8_E4M3, 2, 16 * j->world, &b, &pb);
    if (st == L8_OK) st = l8_fp8_meta_create(ctx, &m);
    if (st == L8_OK) st = l8_fp8_meta_set(m, 2.0f, j->rank ? 0.25f : 0.5f, 1.0f);
    if (st == L8_OK) st = l8_tensor_set_fp8_meta(a, m);
    if (st == L8_OK) st = l8_comm_all_gather(c, a, b, -1, NULL);
    l8_fp8_meta_release(m);
    l8_tensor_destroy(a);
    l8_tensor_destroy(b);
    return st;
}

START_TEST(test_comm_fp8_scales)
{
    l8t_job jobs[2];
    l8t_world_run(2, L8_COMM_THREADS, scales_fn, NULL, jobs, 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(jobs[r].st == L8_ERR_INVALID_ARG, "rank %d: %s", r, jobs[r].err);
        ck_assert_msg(strstr(jobs[r].err, "different scales"), "rank %d: %s", r, jobs[r].err);
    }
}
END_TEST

/* Caller mistakes, one rank. */
START_TEST(test_comm_errors)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm_id id;
    l8_comm *c = NULL;
    L8_CK_ST(l8_comm_id_create(ctx, L8_COMM_NCCL, &id), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_id_create(ctx, (l8_comm_transport)9, &id), L8_ERR_INVALID_ARG);
    L8_CK(l8_comm_id_create(ctx, L8_COMM_THREADS, &id));
    L8_CK_ST(l8_comm_init_rank(ctx, &id, 1, 1, NULL, &c), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_init_rank(ctx, &id, 0, 0, NULL, &c), L8_ERR_INVALID_ARG);
    l8_comm_id junk;
    memset(&junk, 7, sizeof junk);
    L8_CK_ST(l8_comm_init_rank(ctx, &junk, 0, 1, NULL, &c), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(c);
    L8_CK(l8_comm_init_rank(ctx, &id, 0, 1, NULL, &c));
    ck_assert_int_eq(l8_comm_size(c), 1);
    int64_t s4[2] = { 4, 4 }, s8[2] = { 4, 8 };
    l8_tensor *a, *b, *i32;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, s4, &a));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, s8, &b));
    L8_CK(l8_tensor_empty(ctx, L8_I32, 2, s4, &i32));
    L8_CK_ST(l8_comm_all_reduce(NULL, a, a, L8_REDUCE_SUM, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_all_reduce(c, a, b, L8_REDUCE_SUM, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_all_reduce(c, i32, i32, L8_REDUCE_SUM, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_all_reduce(c, a, a, (l8_reduce_op)7, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_all_gather(c, a, b, 0, NULL), L8_ERR_INVALID_ARG);     /* dim 0 wants [4, 4] */
    L8_CK_ST(l8_comm_all_gather(c, a, a, 2, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_all_gather(c, a, a, 0, NULL), L8_ERR_INVALID_ARG);     /* overlap */
    L8_CK_ST(l8_comm_broadcast(c, a, 1, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_comm_grid(c, 3, NULL, NULL), L8_ERR_INVALID_ARG);
    /* world 1: everything is the identity */
    float *pa, *pb;
    L8_CK(l8_tensor_data(a, (void **)&pa));
    L8_CK(l8_tensor_data(b, (void **)&pb));
    for (int i = 0; i < 16; i++) pa[i] = (float)i - 3.5f;
    l8_tensor *a2;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, s4, &a2));
    L8_CK(l8_comm_all_gather(c, a, a2, -1, NULL));
    float *p2;
    L8_CK(l8_tensor_data(a2, (void **)&p2));
    ck_assert(!memcmp(pa, p2, 64));
    L8_CK(l8_comm_all_reduce(c, a, a2, L8_REDUCE_AVG, NULL));
    ck_assert(!memcmp(pa, p2, 64));
    l8_tensor_destroy(a), l8_tensor_destroy(a2), l8_tensor_destroy(b), l8_tensor_destroy(i32);
    l8_comm_destroy(c);
    l8_comm_destroy(NULL);
    l8t_ctx_finish(ctx);
}
END_TEST

/* The launcher's environment. */
START_TEST(test_comm_dist_env)
{
    static const char *vars[] = { "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
                                  "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                                  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                  "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                  "MASTER_ADDR", "MASTER_PORT", "L8_INIT_FILE", NULL };
    for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
    l8_dist_env e = { .size = sizeof e };
    L8_CK(l8_dist_env_read(&e));
    ck_assert_int_eq(e.world_size, 1);
    ck_assert_str_eq(e.source, "none");
    setenv("SLURM_PROCID", "3", 1), setenv("SLURM_NTASKS", "8", 1), setenv("SLURM_LOCALID", "1", 1);
    L8_CK(l8_dist_env_read(&e));
    ck_assert_str_eq(e.source, "slurm");
    ck_assert_int_eq(e.rank, 3);
    ck_assert_int_eq(e.world_size, 8);
    ck_assert_int_eq(e.local_rank, 1);
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1), setenv("MASTER_PORT", "29500", 1);
    L8_CK(l8_dist_env_read(&e));                         /* torchrun wins */
    ck_assert_str_eq(e.source, "torchrun");
    ck_assert_int_eq(e.rank, 1);
    ck_assert_int_eq(e.world_size, 2);
    ck_assert_str_eq(e.master_addr, "10.0.0.1");
    ck_assert_int_eq(e.master_port, 29500);
    setenv("RANK", "2", 1);
    L8_CK_ST(l8_dist_env_read(&e), L8_ERR_INVALID_ARG);  /* rank >= world */
    ck_assert_msg(strstr(l8_last_error()->message, "RANK=2"), "%s", l8_last_error()->message);
    setenv("RANK", "x1", 1);
    L8_CK_ST(l8_dist_env_read(&e), L8_ERR_INVALID_ARG);
    setenv("RANK", "0", 1), setenv("MASTER_PORT", "70000", 1);
    L8_CK_ST(l8_dist_env_read(&e), L8_ERR_INVALID_ARG);
    ck_assert_msg(strstr(l8_last_error()->message, "MASTER_PORT"), "%s", l8_last_error()->message);
    /* world 2 with no rendezvous: a clear error, not a hang */
    unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_comm *c = NULL;
    L8_CK_ST(l8_comm_init_env(ctx, NULL, &c), L8_ERR_INVALID_ARG);
    ck_assert_msg(strstr(l8_last_error()->message, "MASTER_ADDR"), "%s", l8_last_error()->message);
    /* world 1: a group of one */
    for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
    L8_CK(l8_comm_init_env(ctx, NULL, &c));
    ck_assert_int_eq(l8_comm_size(c), 1);
    L8_CK(l8_comm_barrier(c));
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

/* ---- NCCL at world size 1 (one H200 holds one NCCL rank) ---- */

/* A device tensor [rows, cols] of dt filled from value(salt, rank, i); the
 * host copy of its bytes in *host (malloc'ed). */
static l8_tensor *dev_tensor(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, uint64_t salt,
                             unsigned char **host)
{
    int64_t shape[2] = { rows, cols };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, 2, shape, &t));
    size_t n = (size_t)(rows * cols), bytes = n * l8_dtype_size(dt);
    *host = l8t_xmalloc(bytes + 1);
    fill(*host, dt, n, salt, 0);
    L8_CK(l8_tensor_copy_from_host(t, *host, bytes, NULL));
    return t;
}

static void expect_bytes(l8_tensor *t, const unsigned char *want, size_t bytes, const char *what)
{
    unsigned char *got = l8t_xmalloc(bytes + 1);
    L8_CK(l8_tensor_copy_to_host(t, got, bytes, NULL));
    L8_CK(l8_stream_synchronize(l8_ctx_stream(l8_tensor_ctx(t), L8_STREAM_COMPUTE)));
    ck_assert_msg(!memcmp(got, want, bytes), "%s: the device result differs", what);
    free(got);
}

START_TEST(test_gpu_comm_nccl_world1)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0);
    l8_comm_id id;
    l8_comm *c = NULL;
    L8_CK(l8_comm_id_create(ctx, L8_COMM_DEFAULT, &id));          /* NCCL on CUDA */
    L8_CK(l8_comm_init_rank(ctx, &id, 0, 1, NULL, &c));
    ck_assert_int_eq(l8_comm_get_transport(c), L8_COMM_NCCL);
    l8_stream *comm_s = l8_ctx_stream(ctx, L8_STREAM_COMM);
    for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++) {
        l8_dtype dt = k_dtypes[d];
        unsigned char *ha, *hb;
        l8_tensor *a = dev_tensor(ctx, dt, 37, 64, l8_test_seed() + d, &ha);
        l8_tensor *b = dev_tensor(ctx, dt, 37, 64, l8_test_seed() + 99, &hb);
        size_t bytes = l8_tensor_nbytes(a);
        /* world 1: every reduction, gather and scatter is the identity;
         * NCCL reductions of FP8 are refused, clearly, before NCCL sees them */
        int fp8 = l8_dtype_is_fp8(dt);
        l8_status want = fp8 ? L8_ERR_UNSUPPORTED : L8_OK;
        for (int op = L8_REDUCE_SUM; op <= L8_REDUCE_MAX; op++) {
            L8_CK_ST(l8_comm_all_reduce(c, a, b, (l8_reduce_op)op, NULL), want);
            if (!fp8) expect_bytes(b, ha, bytes, "all_reduce");
        }
        for (int dim = 0; dim >= -1; dim--) {
            L8_CK(l8_comm_all_gather(c, a, b, dim, comm_s));          /* the comm stream itself */
            L8_CK(l8_stream_synchronize(comm_s));
            expect_bytes(b, ha, bytes, "all_gather");
            L8_CK_ST(l8_comm_reduce_scatter(c, a, b, L8_REDUCE_SUM, dim, NULL), want);
            if (!fp8) expect_bytes(b, ha, bytes, "reduce_scatter");
        }
        L8_CK(l8_comm_broadcast(c, a, 0, NULL));
        expect_bytes(a, ha, bytes, "broadcast");
        L8_CK_ST(l8_comm_all_reduce(c, a, a, L8_REDUCE_SUM, NULL), want);      /* in place */
        expect_bytes(a, ha, bytes, "all_reduce in place");
        l8_tensor_destroy(a);
        l8_tensor_destroy(b);
        free(ha);
        free(hb);
    }
    /* ordering: a collective on the compute stream sees the memset enqueued before it */
    int64_t shape[1] = { 1 << 20 };
    l8_tensor *z;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, shape, &z));
    void *zp;
    L8_CK(l8_tensor_data(z, &zp));
    L8_CK(l8_memset_d8(l8_ctx_stream(ctx, L8_STREAM_COMPUTE), zp, 0x3f, l8_tensor_nbytes(z)));
    L8_CK(l8_comm_all_reduce(c, z, z, L8_REDUCE_MAX, NULL));
    unsigned char *want = l8t_xmalloc(l8_tensor_nbytes(z));
    memset(want, 0x3f, l8_tensor_nbytes(z));
    expect_bytes(z, want, l8_tensor_nbytes(z), "ordered after the memset");
    free(want);
    l8_tensor_destroy(z);
    /* split, grid, barrier, check */
    l8_comm *s1 = NULL, *none = (l8_comm *)1, *tp = NULL, *dp = NULL;
    L8_CK(l8_comm_split(c, 0, 0, &s1));
    ck_assert_int_eq(l8_comm_size(s1), 1);
    L8_CK(l8_comm_split(c, -1, 0, &none));
    ck_assert_ptr_null(none);
    L8_CK(l8_comm_grid(c, 1, &tp, &dp));
    ck_assert_int_eq(l8_comm_size(tp), 1);
    ck_assert_int_eq(l8_comm_size(dp), 1);
    L8_CK(l8_comm_barrier(s1));
    L8_CK(l8_comm_barrier(c));
    L8_CK(l8_comm_check(c));
    l8_comm_destroy(s1);
    l8_comm_destroy(tp);
    l8_comm_destroy(dp);
    /* abort: every later call fails and says so */
    l8_comm_abort(c);
    L8_CK_ST(l8_comm_barrier(c), L8_ERR_COMM);
    ck_assert_msg(strstr(l8_last_error()->message, "abort"), "%s", l8_last_error()->message);
    l8_comm_destroy(c);
    /* the environment's group of one */
    L8_CK(l8_comm_init_env(ctx, NULL, &c));
    ck_assert_int_eq(l8_comm_get_transport(c), L8_COMM_NCCL);
    L8_CK(l8_comm_barrier(c));
    l8_comm_destroy(c);
    l8t_ctx_finish(ctx);
}
END_TEST

Suite *l8_comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("host");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_comm_errors);
    tcase_add_test(tc, test_comm_dist_env);
    tcase_add_test(tc, test_comm_threads_collectives);
    tcase_add_test(tc, test_comm_tcp_collectives);
    tcase_add_test(tc, test_comm_transports_agree);
    tcase_add_test(tc, test_comm_seed004_last_dim_gather);
    tcase_add_test(tc, test_comm_grid);
    tcase_add_test(tc, test_comm_faults);
    tcase_add_test(tc, test_comm_join_mismatch);
    tcase_add_test(tc, test_comm_fp8_scales);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 300);
    tcase_add_test(tg, test_gpu_comm_nccl_world1);
    suite_add_tcase(s, tg);
    return s;
}
