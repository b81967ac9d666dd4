/* test_streams.c - an op enqueued on another stream than the one its tensors
 * were allocated on keeps their memory from being handed out again until that
 * stream has run it.
 *
 * The caching allocator reuses a freed block at once for later work on the
 * block's own stream: stream order makes that safe. Work on a second stream
 * is not ordered with it, so every op records the storages it touches (and
 * their FP8 metas) on the stream it runs on (l8_storage_record_stream); a
 * block freed after that waits for an event on that stream before it is
 * reused. A missing record is silent on a GPU until two kernels race.
 *
 * Here a host context runs on a provider whose events stay incomplete until
 * the test lets them go. Each case runs one op on the copy stream with
 * tensors allocated on the compute stream, then releases them all. Every
 * block the op touched must then be pending (freed, waiting on the copy
 * stream), and a new allocation of the first tensor's size on the compute
 * stream must not get its address back: without the record it does.
 */
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "alloc/alloc.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "runtime/comm.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/gemm.h"
#include "ops/loss.h"

/* ---- a provider whose events complete only when the test says so ---- */

typedef struct holder {
    l8_segment_provider base;     /* what the context is given */
    l8_segment_provider host;     /* segments come from here */
    int hold;                     /* 1: every event is incomplete */
    int records;
} holder;

static l8_status h_alloc(void *u, size_t bytes, void **p)
{
    holder *h = u;
    return h->host.segment_alloc(h->host.user, bytes, p);
}

static l8_status h_free(void *u, void *p, size_t bytes)
{
    holder *h = u;
    return h->host.segment_free(h->host.user, p, bytes);
}

static l8_status h_ev_create(void *u, void **ev)
{
    (void)u;
    *ev = l8t_xmalloc(1);
    return L8_OK;
}

static l8_status h_ev_record(void *u, void *ev, l8_stream_id s)
{
    (void)ev;
    (void)s;
    ((holder *)u)->records++;
    return L8_OK;
}

static l8_status h_ev_query(void *u, void *ev, int *done)
{
    (void)ev;
    *done = !((holder *)u)->hold;
    return L8_OK;
}

/* The allocator waits only when it has no other way (teardown, an OOM
 * retry): let the events go then, as the stream would have run by then. */
static l8_status h_ev_sync(void *u, void *ev)
{
    (void)ev;
    ((holder *)u)->hold = 0;
    return L8_OK;
}

static void h_ev_destroy(void *u, void *ev)
{
    (void)u;
    free(ev);
}

static void holder_init(holder *h)
{
    memset(h, 0, sizeof *h);
    l8_host_provider(&h->host);
    h->base = h->host;
    h->base.user = h;
    h->base.name = "holder";
    h->base.segment_alloc = h_alloc;
    h->base.segment_free = h_free;
    h->base.event_create = h_ev_create;
    h->base.event_record = h_ev_record;
    h->base.event_query = h_ev_query;
    h->base.event_sync = h_ev_sync;
    h->base.event_destroy = h_ev_destroy;
}

/* ---- tensors: each its own storage (and, for FP8, its own meta) ---- */

typedef struct kit {
    l8_ctx *ctx;
    l8_stream *side;              /* the copy stream: where every op runs */
    l8_tensor *t[12];
    int n;                        /* tensors made */
    int blocks;                   /* storages made, metas included */
    void *first;                  /* the first tensor's block */
    size_t first_bytes;
} kit;

/* A zero-filled [rows, cols] tensor of dt ([cols] when rows is -1); FP8
 * with a new meta unless share_meta names a tensor whose meta it takes. */
static l8_tensor *mk(kit *k, l8_dtype dt, int64_t rows, int64_t cols, const l8_tensor *share_meta)
{
    int64_t shape[2] = { rows, cols };
    l8_tensor *t = NULL;
    void *p;
    ck_assert_int_lt(k->n, 12);
    L8_CK(l8_tensor_empty(k->ctx, dt, rows < 0 ? 1 : 2, rows < 0 ? shape + 1 : shape, &t));
    L8_CK(l8_tensor_data(t, &p));
    memset(p, 0, l8_tensor_nbytes(t));
    if (!k->n) {
        k->first = p;
        k->first_bytes = l8_tensor_nbytes(t);
    }
    k->blocks++;
    if (l8_dtype_is_fp8(dt)) {
        if (share_meta) {
            L8_CK(l8_tensor_set_fp8_meta(t, l8_tensor_fp8_meta(share_meta)));
        } else {
            l8_fp8_meta *m = NULL;
            L8_CK(l8_fp8_meta_create(k->ctx, &m));
            L8_CK(l8_tensor_set_fp8_meta(t, m));
            l8_fp8_meta_release(m);
            k->blocks++;
        }
    }
    k->t[k->n++] = t;
    return t;
}

/* ---- the ops, one case each ---- */

static void op_cast(kit *k)
{
    l8_tensor *x = mk(k, L8_BF16, 8, 16, NULL), *q = mk(k, L8_E4M3, 8, 16, NULL);
    L8_CK(l8_fp8_cast(x, q, 0, k->side));
}

static void op_cast_transpose(kit *k)
{
    l8_tensor *x = mk(k, L8_BF16, 8, 16, NULL), *q = mk(k, L8_E4M3, 8, 16, NULL);
    l8_tensor *qt = mk(k, L8_E4M3, 16, 8, q);
    L8_CK(l8_fp8_cast_transpose(x, q, qt, 0, k->side));
}

static void op_cast_transpose_dbias(kit *k)
{
    l8_tensor *x = mk(k, L8_F32, 8, 16, NULL), *q = mk(k, L8_E5M2, 8, 16, NULL);
    l8_tensor *qt = mk(k, L8_E5M2, 16, 8, q), *db = mk(k, L8_F32, -1, 16, NULL);
    L8_CK(l8_fp8_cast_transpose_dbias(x, q, qt, db, 0, k->side));
}

static void op_cast_transpose_dact(kit *k)
{
    l8_tensor *dy = mk(k, L8_BF16, 8, 16, NULL), *a = mk(k, L8_BF16, 8, 16, NULL);
    l8_tensor *q = mk(k, L8_E5M2, 8, 16, NULL), *qt = mk(k, L8_E5M2, 16, 8, q);
    l8_tensor *db = mk(k, L8_F32, -1, 16, NULL);
    L8_CK(l8_fp8_cast_transpose_dact(L8_ACT_GELU, dy, a, q, qt, db, 0, k->side));
}

static void op_dbias_dact(kit *k)
{
    l8_tensor *dy = mk(k, L8_BF16, 8, 16, NULL), *a = mk(k, L8_BF16, 8, 16, NULL);
    l8_tensor *db = mk(k, L8_F32, -1, 16, NULL);
    L8_CK(l8_dbias_dact(L8_ACT_GELU, dy, a, db, k->side));
}

static void op_cast_transpose_many(kit *k)
{
    l8_tensor *x0 = mk(k, L8_F32, 8, 16, NULL), *x1 = mk(k, L8_F32, 4, 8, NULL);
    l8_tensor *q0 = mk(k, L8_E4M3, 8, 16, NULL), *q0t = mk(k, L8_E4M3, 16, 8, q0);
    l8_tensor *q1 = mk(k, L8_E4M3, 4, 8, NULL), *q1t = mk(k, L8_E4M3, 8, 4, q1);
    const l8_tensor *in[2] = { x0, x1 };
    l8_tensor *out[2] = { q0, q1 }, *out_t[2] = { q0t, q1t };
    L8_CK(l8_fp8_cast_transpose_many(2, in, out, out_t, 0, k->side));
}

static void op_dequantize(kit *k)
{
    l8_tensor *q = mk(k, L8_E4M3, 8, 16, NULL), *y = mk(k, L8_F32, 8, 16, NULL);
    L8_CK(l8_fp8_dequantize(q, y, k->side));
}

static void op_transpose(kit *k)
{
    l8_tensor *q = mk(k, L8_E4M3, 8, 16, NULL), *qt = mk(k, L8_E4M3, 16, 8, NULL);
    L8_CK(l8_fp8_transpose(q, qt, k->side));
}

static void op_scale_update(kit *k)
{
    l8_tensor *hist = mk(k, L8_F32, 3, 4, NULL), *amax = mk(k, L8_F32, -1, 3, NULL);
    l8_tensor *scale = mk(k, L8_F32, -1, 3, NULL), *sinv = mk(k, L8_F32, -1, 3, NULL);
    l8_tensor *fmax = mk(k, L8_F32, -1, 3, NULL);
    L8_CK(l8_fp8_scale_update(hist, amax, scale, sinv, fmax, NULL, k->side));
}

static void op_convert(kit *k)
{
    l8_tensor *x = mk(k, L8_F32, 8, 16, NULL), *y = mk(k, L8_BF16, 8, 16, NULL);
    L8_CK(l8_convert(x, y, k->side));
}

static void op_convert_many(kit *k)
{
    l8_tensor *x0 = mk(k, L8_F32, 8, 16, NULL), *x1 = mk(k, L8_F32, -1, 16, NULL);
    l8_tensor *y0 = mk(k, L8_BF16, 8, 16, NULL), *y1 = mk(k, L8_BF16, -1, 16, NULL);
    const l8_tensor *in[2] = { x0, x1 };
    l8_tensor *out[2] = { y0, y1 };
    L8_CK(l8_convert_many(2, in, out, k->side));
}

static void op_add_into(kit *k)
{
    l8_tensor *y = mk(k, L8_F32, 8, 16, NULL), *x = mk(k, L8_BF16, 8, 16, NULL);
    L8_CK(l8_add_into(y, x, k->side));
}

static void op_gelu(kit *k)
{
    l8_tensor *x = mk(k, L8_BF16, 8, 16, NULL), *y = mk(k, L8_BF16, 8, 16, NULL);
    L8_CK(l8_gelu(x, y, k->side));
}

static void op_gelu_backward(kit *k)
{
    l8_tensor *x = mk(k, L8_BF16, 8, 16, NULL), *dy = mk(k, L8_BF16, 8, 16, NULL);
    l8_tensor *dx = mk(k, L8_BF16, 8, 16, NULL);
    L8_CK(l8_gelu_backward(x, dy, dx, k->side));
}

static void op_gather_rows(kit *k)
{
    l8_tensor *src = mk(k, L8_BF16, 8, 16, NULL), *idx = mk(k, L8_I32, -1, 4, NULL);
    l8_tensor *dst = mk(k, L8_BF16, 4, 16, NULL), *bad = mk(k, L8_I32, -1, 1, NULL);
    L8_CK(l8_gather_rows(src, idx, dst, bad, k->side));
}

static void op_put_rows_at(kit *k)
{
    l8_tensor *dst = mk(k, L8_F32, 8, 4, NULL), *cursor = mk(k, L8_I32, -1, 1, NULL);
    l8_tensor *src = mk(k, L8_F32, 2, 4, NULL);
    L8_CK(l8_put_rows_at(dst, cursor, 2, src, NULL, k->side));
}

static void op_softmax_xent(kit *k)
{
    l8_tensor *logits = mk(k, L8_F32, 4, 10, NULL), *labels = mk(k, L8_I32, -1, 4, NULL);
    l8_tensor *dl = mk(k, L8_F32, 4, 10, NULL), *loss = mk(k, L8_F32, -1, 4, NULL);
    l8_tensor *hit = mk(k, L8_I32, -1, 4, NULL);
    L8_CK(l8_softmax_xent(logits, labels, 10, 1.0f, dl, loss, hit, k->side));
}

static void op_gemm(kit *k)
{
    l8_tensor *a = mk(k, L8_E4M3, 4, 16, NULL), *b = mk(k, L8_E4M3, 8, 16, NULL);
    l8_tensor *d = mk(k, L8_BF16, 4, 8, NULL);
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(k->ctx, NULL, &h));
    l8_gemm_desc g = L8_GEMM_DESC_INIT;
    g.a = a; g.b = b; g.d = d;
    g.trans_b = 1;
    L8_CK(l8_gemm(h, &g, k->side));
    l8_gemm_handle_destroy(h);
}

static void op_all_reduce(kit *k)
{
    l8_tensor *x = mk(k, L8_F32, 8, 16, NULL), *y = mk(k, L8_F32, 8, 16, NULL);
    l8_comm_id id;
    l8_comm *c = NULL;
    L8_CK(l8_comm_id_create(k->ctx, L8_COMM_THREADS, &id));
    L8_CK(l8_comm_init_rank(k->ctx, &id, 0, 1, NULL, &c));
    L8_CK(l8_comm_all_reduce(c, x, y, L8_REDUCE_SUM, k->side));
    l8_comm_destroy(c);
}

/* The control: tensor copies have recorded their streams from the start. */
static void op_copy(kit *k)
{
    l8_tensor *x = mk(k, L8_F32, 8, 16, NULL), *y = mk(k, L8_F32, 8, 16, NULL);
    L8_CK(l8_tensor_copy(y, x, k->side));
}

typedef struct opcase {
    const char *name;
    void (*run)(kit *k);
} opcase;

static const opcase k_cases[] = {
    { "l8_fp8_cast", op_cast },
    { "l8_fp8_cast_transpose", op_cast_transpose },
    { "l8_fp8_cast_transpose_dbias", op_cast_transpose_dbias },
    { "l8_fp8_cast_transpose_dact", op_cast_transpose_dact },
    { "l8_dbias_dact", op_dbias_dact },
    { "l8_fp8_cast_transpose_many", op_cast_transpose_many },
    { "l8_fp8_dequantize", op_dequantize },
    { "l8_fp8_transpose", op_transpose },
    { "l8_fp8_scale_update", op_scale_update },
    { "l8_convert", op_convert },
    { "l8_convert_many", op_convert_many },
    { "l8_add_into", op_add_into },
    { "l8_gelu", op_gelu },
    { "l8_gelu_backward", op_gelu_backward },
    { "l8_gather_rows", op_gather_rows },
    { "l8_put_rows_at", op_put_rows_at },
    { "l8_softmax_xent", op_softmax_xent },
    { "l8_gemm", op_gemm },
    { "l8_comm_all_reduce", op_all_reduce },
    { "l8_tensor_copy", op_copy },
};
#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

typedef struct tally {
    int pending, free_at_first;
    uintptr_t first;
} tally;

static void count_block(void *arg, const l8_block_info *b)
{
    tally *t = arg;
    if (b->pending) t->pending++;
    if (!b->allocated && !b->pending && b->addr == t->first) t->free_at_first = 1;
}

START_TEST(test_ops_hold_blocks_used_on_other_streams)
{
    const opcase *oc = &k_cases[_i];
    holder h;
    holder_init(&h);
    kit k = { 0 };
    k.ctx = l8t_ctx("host", &h.base, 0);
    k.side = l8_ctx_stream(k.ctx, L8_STREAM_COPY);
    l8_alloc *a = l8_ctx_allocator(k.ctx);
    h.hold = 1;
    oc->run(&k);
    for (int i = 0; i < k.n; i++)
        l8_tensor_destroy(k.t[i]);
    tally t = { 0, 0, (uintptr_t)k.first };
    L8_CK(l8_alloc_visit(a, count_block, &t));
    ck_assert_msg(t.pending == k.blocks && !t.free_at_first,
                  "%s on the copy stream: %d of the %d blocks it used wait for that stream%s",
                  oc->name, t.pending, k.blocks,
                  t.free_at_first ? "; the first is free for the compute stream at once" : "");
    ck_assert_int_ge(h.records, 1);
    /* the compute stream asks for the first tensor's size: another block */
    void *p = NULL;
    L8_CK(l8_ctx_malloc(k.ctx, k.first_bytes, NULL, &p));
    ck_assert_msg(p != k.first, "%s: the compute stream got the block the copy stream still uses",
                  oc->name);
    L8_CK(l8_ctx_free(k.ctx, p));
    /* the copy stream has run: every block returns */
    h.hold = 0;
    L8_CK(l8_ctx_synchronize(k.ctx));
    L8_CK(l8_ctx_malloc(k.ctx, k.first_bytes, NULL, &p));   /* processes the finished frees */
    L8_CK(l8_ctx_free(k.ctx, p));
    t = (tally){ 0, 0, 0 };
    L8_CK(l8_alloc_visit(a, count_block, &t));
    ck_assert_int_eq(t.pending, 0);
    l8t_ctx_finish(k.ctx);
}
END_TEST

Suite *l8_streams_suite(void)
{
    Suite *s = suite_create("streams");
    TCase *tc = tcase_create("record");
    tcase_add_loop_test(tc, test_ops_hold_blocks_used_on_other_streams, 0, NCASES);
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
