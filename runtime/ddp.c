/* ddp.c - the data-parallel reducer (ddp.h): buckets over the group's
 * main_grad buffer, reports counted per bucket, all-reduces (average) on the
 * comm stream in bucket order.
 *
 * Invariants:
 *  - buckets partition [0, buffer_numel) in order; param_bucket[id] is the
 *    bucket of parameter id; pending[b] counts the parameters of bucket b
 *    that have not reported in this step's last micro-batch;
 *  - next_launch is the first bucket not launched this step; buckets launch
 *    only in index order (a completed bucket waits for the ones before it),
 *    so every rank issues the same collectives in the same order;
 *  - reported[id] = the micro-batch number of id's last report, so a second
 *    report in one micro-batch is caught, and reported[id] >= step_mb0 says
 *    it reported in this step; done[id] = 1 once it reported in the last
 *    micro-batch (or was zeroed, or finish took its earlier gradient).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/ddp.h"
#include "runtime/internal.h"

struct l8_ddp {
    l8_params *g;
    l8_comm *dp;
    l8_ctx *ctx;
    l8_stream *cs;                /* the comm stream */
    int overlap, strict;
    int np, nb;                   /* parameters, buckets */
    int64_t *b_first, *b_n;       /* [nb] */
    l8_tensor **b_view;           /* [nb] views of the grad buffer */
    int *pending;                 /* [nb] */
    int *param_bucket;            /* [np] */
    uint64_t *reported;           /* [np] micro-batch serial of the last report */
    unsigned char *done;          /* [np] */
    int next_launch;
    int last;                     /* the current micro-batch is the step's last */
    uint64_t mb;                  /* micro-batch serial (1, 2, ...) */
    uint64_t step_mb0;            /* the serial of this step's first micro-batch */
    l8_event *ev;
    l8_ddp_stats st;
    int in_bw, at_finish, zeroed; /* this step's counts */
};

void l8_ddp_config_init(l8_ddp_config *cfg)
{
    if (cfg) *cfg = (l8_ddp_config)L8_DDP_CONFIG_INIT;
}

static l8_status on_report(void *arg, int id, l8_event *ev);

/* Buckets in buffer order: parameters sorted by offset, a bucket closed when
 * it holds >= target elements; each ends where the next parameter starts
 * (the layout's padding goes with the parameter before it). */
static l8_status make_buckets(l8_ddp *d, int64_t target)
{
    int np = d->np > 0 ? d->np : 0;
    size_t cap = (size_t)np + 1;
    int *order = malloc(sizeof *order * cap);
    if (!order) return L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    for (int i = 0; i < np; i++) order[i] = i;
    for (int i = 1; i < np; i++)              /* insertion sort by offset */
        for (int j = i; j > 0 && l8_params_offset(d->g, order[j]) < l8_params_offset(d->g, order[j - 1]); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t total = l8_params_buffer_numel(d->g);
    d->b_first = calloc(cap, sizeof *d->b_first);
    d->b_n = calloc(cap, sizeof *d->b_n);
    if (!d->b_first || !d->b_n) {
        free(order);
        return L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    }
    int nb = 0;
    int64_t start = 0;
    for (int k = 0; k < np; k++) {
        int id = order[k];
        d->param_bucket[id] = nb;
        int64_t end = k + 1 < np ? l8_params_offset(d->g, order[k + 1]) : total;
        if (end - start >= target || k + 1 == np) {
            d->b_first[nb] = start;
            d->b_n[nb] = end - start;
            nb++;
            start = end;
        }
    }
    free(order);
    d->nb = nb;
    return L8_OK;
}

l8_status l8_ddp_create(l8_params *g, l8_comm *dp, const l8_ddp_config *cfg, l8_ddp **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(g != NULL && dp != NULL);
    l8_ddp_config c = L8_DDP_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_ddp_create", "L8_DDP_CONFIG_INIT");
    if (!l8_params_is_finalized(g))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: the parameter group is not finalized");
    if (l8_comm_ctx(dp) != l8_params_ctx(g))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: the communicator and the group belong "
                       "to different contexts");
    if (c.bucket_elems < 0 || (c.overlap != 0 && c.overlap != 1) || (c.strict != 0 && c.strict != 1))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: bucket_elems %lld, overlap %d, strict %d "
                       "(want >= 0, 0 or 1, 0 or 1)", (long long)c.bucket_elems, c.overlap, c.strict);
    l8_ddp *d = calloc(1, sizeof *d);
    if (!d) return L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    d->g = g;
    d->dp = dp;
    d->ctx = l8_params_ctx(g);
    d->cs = l8_ctx_stream(d->ctx, L8_STREAM_COMM);
    d->overlap = c.overlap;
    d->strict = c.strict;
    d->np = l8_params_count(g);
    d->last = 1;
    d->mb = d->step_mb0 = 1;
    size_t np = (size_t)(d->np ? d->np : 1);
    d->param_bucket = calloc(np, sizeof *d->param_bucket);
    d->reported = calloc(np, sizeof *d->reported);
    d->done = calloc(np, 1);
    l8_status st = d->param_bucket && d->reported && d->done
                       ? make_buckets(d, c.bucket_elems ? c.bucket_elems : L8_DDP_BUCKET_DEFAULT)
                       : L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    if (st == L8_OK) {
        d->b_view = calloc((size_t)(d->nb ? d->nb : 1), sizeof *d->b_view);
        d->pending = calloc((size_t)(d->nb ? d->nb : 1), sizeof *d->pending);
        if (!d->b_view || !d->pending) st = L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    }
    for (int b = 0; b < d->nb && st == L8_OK; b++) {
        st = l8_tensor_narrow(l8_params_grad_flat(g), 0, d->b_first[b], d->b_n[b], &d->b_view[b]);
        if (d->b_n[b] > d->st.largest_bucket) d->st.largest_bucket = d->b_n[b];
    }
    if (st == L8_OK) st = l8_event_create(d->ctx, 0, &d->ev);
    for (int i = 0; i < d->np && st == L8_OK; i++) d->pending[d->param_bucket[i]]++;
    if (st == L8_OK) st = l8_params_set_grad_ready_cb(g, on_report, d);
    if (st != L8_OK) {
        l8_ddp_destroy(d);
        return st;
    }
    d->st.size = sizeof d->st;
    d->st.buckets = d->nb;
    *out = d;
    return L8_OK;
}

void l8_ddp_destroy(l8_ddp *d)
{
    if (!d) return;
    if (d->g) {
        l8_status ignored = l8_params_set_grad_ready_cb(d->g, NULL, NULL);   /* g is valid: never fails */
        (void)ignored;
    }
    for (int b = 0; d->b_view && b < d->nb; b++) l8_tensor_destroy(d->b_view[b]);
    l8_event_destroy(d->ev);
    free(d->b_view), free(d->b_first), free(d->b_n), free(d->pending);
    free(d->param_bucket), free(d->reported), free(d->done);
    free(d);
}

/* ---- a step ---- */

/* Launch the completed buckets from next_launch on, in order. */
static l8_status launch_ready(l8_ddp *d, int *counter)
{
    while (d->next_launch < d->nb && d->pending[d->next_launch] == 0) {
        int b = d->next_launch++;
        L8_CHECK(l8_comm_all_reduce(d->dp, d->b_view[b], d->b_view[b], L8_REDUCE_AVG, d->cs));
        (*counter)++;
    }
    return L8_OK;
}

static l8_status count_done(l8_ddp *d, int id)
{
    d->done[id] = 1;
    d->pending[d->param_bucket[id]]--;
    return d->overlap ? launch_ready(d, &d->in_bw) : L8_OK;
}

static l8_status on_report(void *arg, int id, l8_event *ev)
{
    l8_ddp *d = arg;
    if (id < 0 || id >= d->np)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp: report of parameter id %d (the group has %d)",
                       id, d->np);
    if (d->reported[id] == d->mb || d->done[id])
        return L8_FAIL(L8_ERR_STATE, "l8_ddp: parameter %s reported twice in one micro-batch (a "
                       "weight shared by two layers must report once: accumulate_grad and one "
                       "grad_ready)", l8_params_name(d->g, id));
    d->reported[id] = d->mb;
    if (!d->last) return L8_OK;            /* accumulating: reduce after the last micro-batch */
    /* the comm stream waits for this gradient now: the reporter re-records its event later */
    if (ev) L8_CHECK(l8_stream_wait_event(d->cs, ev));
    return count_done(d, id);
}

l8_status l8_ddp_begin_micro_batch(l8_ddp *d, int last)
{
    L8_ARG(d != NULL && (last == 0 || last == 1));
    d->mb++;
    d->last = last;
    return L8_OK;
}

/* The comm stream waits for the work enqueued on s so far. */
static l8_status comm_after(l8_ddp *d, l8_stream *s)
{
    if (s == d->cs) return L8_OK;
    L8_CHECK(l8_event_record(d->ev, s));
    return l8_stream_wait_event(d->cs, d->ev);
}

/* main_grad of id = 0 on the comm stream (ordered before its bucket; the
 * caller ordered the comm stream after the compute work that reads it). */
static l8_status zero_param(l8_ddp *d, int id)
{
    l8_tensor *t = l8_params_main_grad(d->g, id);
    void *p;
    L8_CHECK(l8_tensor_data(t, &p));
    return l8_memset_d8(d->cs, p, 0, l8_tensor_nbytes(t));
}

l8_status l8_ddp_mark_unused(l8_ddp *d, int id)
{
    L8_ARG(d != NULL);
    if (id < 0 || id >= d->np)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_mark_unused: parameter id %d (the group has %d)",
                       id, d->np);
    if (d->done[id] || d->reported[id] >= d->step_mb0)
        return L8_FAIL(L8_ERR_STATE, "l8_ddp_mark_unused: parameter %s has reported this step",
                       l8_params_name(d->g, id));
    /* after the compute work so far (the last step's optimizer reads main_grad) */
    L8_CHECK(comm_after(d, l8_ctx_stream(d->ctx, L8_STREAM_COMPUTE)));
    L8_CHECK(zero_param(d, id));
    d->zeroed++;
    return count_done(d, id);
}

static void reset_step(l8_ddp *d)
{
    memset(d->done, 0, (size_t)d->np);
    for (int b = 0; b < d->nb; b++) d->pending[b] = 0;
    for (int i = 0; i < d->np; i++) d->pending[d->param_bucket[i]]++;
    d->next_launch = 0;
    d->last = 1;
    d->mb++;
    d->step_mb0 = d->mb;
    d->in_bw = d->at_finish = d->zeroed = 0;
}

l8_status l8_ddp_finish(l8_ddp *d, l8_stream *s)
{
    L8_ARG(d != NULL);
    L8_CHECK(l8i_resolve_stream("l8_ddp_finish", d->ctx, &s));
    l8_status st = L8_OK;
    if (d->strict) {
        char names[512] = "";
        size_t len = 0;
        int missing = 0;
        for (int i = 0; i < d->np; i++)
            if (!d->done[i] && d->reported[i] < d->step_mb0) {
                if (len < sizeof names)
                    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", missing ? ", " : "",
                                            l8_params_name(d->g, i));
                missing++;
            }
        if (missing) {
            reset_step(d);
            return L8_FAIL(L8_ERR_STATE, "l8_ddp_finish: %d parameter(s) never reported their "
                           "gradient this step (strict): %s", missing, names);
        }
    }
    /* everything enqueued on s so far (gradients of earlier micro-batches
     * included) comes before what follows on the comm stream */
    st = comm_after(d, s);
    for (int i = 0; i < d->np && st == L8_OK; i++)
        if (!d->done[i]) {
            if (d->reported[i] < d->step_mb0) {  /* unused this step: zero, not a stale gradient */
                st = zero_param(d, i);
                d->zeroed++;
            }
            d->done[i] = 1;
            d->pending[d->param_bucket[i]]--;
        }
    if (st == L8_OK) st = launch_ready(d, &d->at_finish);
    if (st == L8_OK && d->next_launch != d->nb)
        st = L8_FAIL(L8_ERR_INTERNAL, "l8_ddp_finish: bucket %d still pending", d->next_launch);
    if (st == L8_OK && s != d->cs) st = l8_event_record(d->ev, d->cs);
    if (st == L8_OK && s != d->cs) st = l8_stream_wait_event(s, d->ev);
    if (st == L8_OK) {
        d->st.steps++;
        d->st.launched_in_backward = d->in_bw;
        d->st.launched_at_finish = d->at_finish;
        d->st.zeroed = d->zeroed;
    }
    reset_step(d);
    return st;
}

l8_status l8_ddp_get_stats(const l8_ddp *d, l8_ddp_stats *out)
{
    L8_ARG(d != NULL && out != NULL && out->size >= sizeof *out);
    *out = d->st;
    return L8_OK;
}

l8_status l8_ddp_bucket(const l8_ddp *d, int b, int64_t *first, int64_t *n)
{
    L8_ARG(d != NULL && first != NULL && n != NULL);
    if (b < 0 || b >= d->nb)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_bucket: bucket %d (there are %d)", b, d->nb);
    *first = d->b_first[b];
    *n = d->b_n[b];
    return L8_OK;
}
