/* ddp.c - the data-parallel reducer (ddp.h): buckets over the group's
 * main_grad buffer, reports counted per bucket, all-reduces (average) on the
 * comm stream in bucket order.
 *
 * Invariants:
 *  - buckets partition [0, buffer_numel) in order; parameter id lies in
 *    buckets pb_first[id]..pb_last[id] (one, or in zero1 two when a cut on a
 *    multiple of 128 x p falls inside it); pending[b] counts the parameters
 *    in bucket b that have not reported in this step's last micro-batch;
 *  - next_launch is the first bucket not launched this step; buckets launch
 *    only in index order (a completed bucket waits for the ones before it),
 *    so every rank issues the same collectives in the same order;
 *  - reported[id] = the micro-batch number of id's last report, so a second
 *    report in one micro-batch is caught, and reported[id] >= step_mb0 says
 *    it reported in this step; done[id] = 1 once it reported in the last
 *    micro-batch (or was zeroed, or finish took its earlier gradient).
 *  - g is NULL once the group was destroyed (group_lost), dp once the
 *    communicator was (comm_lost): every call that steps, zeroes or gathers
 *    then fails with L8_ERR_STATE; the views in b_view and the shards hold
 *    their own references to the group's storage.
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
    int overlap, strict, zero1;
    int world, rank;              /* of dp */
    int np, nb;                   /* parameters, buckets */
    int64_t *b_first, *b_n;       /* [nb] */
    l8_tensor **b_view;           /* [nb] views of the grad buffer */
    l8_tensor **g_shard, **m_bucket, **m_shard;   /* [nb] zero1: this rank's grad slice, master views */
    l8_event **gathered;          /* [nb] zero1: recorded after the bucket's parameter gather */
    unsigned char *gather_pending; /* [nb] a gather not yet waited for */
    int *pending;                 /* [nb] */
    int *pb_first, *pb_last;      /* [np] the buckets a parameter lies in (two at most in zero1) */
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

/* The group or the communicator is being destroyed before this reducer
 * (l8_params_destroy / l8_comm_destroy call these). */
static void group_lost(void *obj) { ((l8_ddp *)obj)->g = NULL; }
static void comm_lost(void *obj) { ((l8_ddp *)obj)->dp = NULL; }

static l8_status need_parts(const l8_ddp *d, const char *op)
{
    if (d->g && d->dp) return L8_OK;
    return L8_FAIL(L8_ERR_STATE, "%s: the %s was destroyed before this reducer (l8_ddp_destroy "
                   "it first)", op, d->g ? "communicator" : "parameter group");
}

/* pending[b] = the parameters in bucket b (a parameter spanning two counts in both). */
static void reset_pending(l8_ddp *d)
{
    for (int b = 0; b < d->nb; b++) d->pending[b] = 0;
    for (int i = 0; i < d->np; i++)
        for (int b = d->pb_first[i]; b <= d->pb_last[i]; b++) d->pending[b]++;
}

/* Buckets in buffer order: parameters sorted by offset; a bucket closes
 * once it holds >= target elements, at the end of a parameter (the layout's
 * padding goes with the parameter before it) - in zero1 at the next multiple
 * of 128 x p, so every bucket splits into p equal, aligned slices. Then
 * each parameter is assigned the buckets its elements fall in. */
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
    int64_t total = l8_params_buffer_numel(d->g), unit = (int64_t)L8_PARAMS_ALIGN_ELEMS * d->world;
    d->b_first = calloc(cap, sizeof *d->b_first);
    d->b_n = calloc(cap, sizeof *d->b_n);
    if (!d->b_first || !d->b_n) {
        free(order);
        return L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    }
    int nb = 0;
    int64_t start = 0;
    for (int k = 0; k < np && start < total; k++) {
        int64_t end = k + 1 < np ? l8_params_offset(d->g, order[k + 1]) : total;
        if (end <= start) continue;           /* wholly inside the previous bucket */
        if (end - start >= target || k + 1 == np) {
            int64_t cut = d->zero1 ? (end + unit - 1) / unit * unit : end;
            if (cut > total || k + 1 == np) cut = total;
            d->b_first[nb] = start;
            d->b_n[nb] = cut - start;
            nb++;
            start = cut;
        }
    }
    d->nb = nb;
    for (int k = 0; k < np; k++) {            /* each parameter's buckets */
        int id = order[k];
        int64_t lo = l8_params_offset(d->g, id), hi = k + 1 < np ? l8_params_offset(d->g, order[k + 1]) : total;
        int b = 0;
        while (b + 1 < nb && d->b_first[b] + d->b_n[b] <= lo) b++;
        d->pb_first[id] = b;
        while (b + 1 < nb && d->b_first[b] + d->b_n[b] < hi) b++;
        d->pb_last[id] = b;
    }
    free(order);
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
    void *cb_arg;
    if (l8i_params_grad_ready_cb(g, &cb_arg))
        return L8_FAIL(L8_ERR_STATE, "l8_ddp_create: the group already has a grad-ready consumer "
                       "(another l8_ddp, or l8_params_set_grad_ready_cb); one reducer per group");
    if (l8_comm_ctx(dp) != l8_params_ctx(g))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: the communicator and the group belong "
                       "to different contexts");
    if (c.bucket_elems < 0 || (c.overlap != 0 && c.overlap != 1) || (c.strict != 0 && c.strict != 1) ||
        (c.zero1 != 0 && c.zero1 != 1))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: bucket_elems %lld, overlap %d, strict %d, "
                       "zero1 %d (want >= 0, 0 or 1, 0 or 1, 0 or 1)", (long long)c.bucket_elems,
                       c.overlap, c.strict, c.zero1);
    if (c.zero1 && l8_params_buffer_numel(g) % ((int64_t)L8_PARAMS_ALIGN_ELEMS * l8_comm_size(dp)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_create: ZeRO-1 over %d ranks needs the group's "
                       "buffers padded to a multiple of %lld elements (l8_params_config.pad_to = "
                       "%lld); they have %lld", l8_comm_size(dp),
                       (long long)L8_PARAMS_ALIGN_ELEMS * l8_comm_size(dp),
                       (long long)L8_PARAMS_ALIGN_ELEMS * l8_comm_size(dp),
                       (long long)l8_params_buffer_numel(g));
    l8_ddp *d = calloc(1, sizeof *d);
    if (!d) return L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    d->g = g;
    d->dp = dp;
    d->ctx = l8_params_ctx(g);
    d->cs = l8_ctx_stream(d->ctx, L8_STREAM_COMM);
    d->overlap = c.overlap;
    d->strict = c.strict;
    d->zero1 = c.zero1;
    d->world = l8_comm_size(dp);
    d->rank = l8_comm_rank(dp);
    d->np = l8_params_count(g);
    d->last = 1;
    d->mb = d->step_mb0 = 1;
    size_t np = (size_t)(d->np ? d->np : 1);
    d->pb_first = calloc(np, sizeof *d->pb_first);
    d->pb_last = calloc(np, sizeof *d->pb_last);
    d->reported = calloc(np, sizeof *d->reported);
    d->done = calloc(np, 1);
    l8_status st = d->pb_first && d->pb_last && d->reported && d->done
                       ? make_buckets(d, c.bucket_elems ? c.bucket_elems : L8_DDP_BUCKET_DEFAULT)
                       : L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    if (st == L8_OK) {
        size_t nb = (size_t)(d->nb ? d->nb : 1);
        d->b_view = calloc(nb, sizeof *d->b_view);
        d->g_shard = calloc(nb, sizeof *d->g_shard);
        d->m_bucket = calloc(nb, sizeof *d->m_bucket);
        d->m_shard = calloc(nb, sizeof *d->m_shard);
        d->pending = calloc(nb, sizeof *d->pending);
        d->gathered = calloc(nb, sizeof *d->gathered);
        d->gather_pending = calloc(nb, 1);
        if (!d->b_view || !d->g_shard || !d->m_bucket || !d->m_shard || !d->pending ||
            !d->gathered || !d->gather_pending)
            st = L8_FAIL(L8_ERR_OOM, "l8_ddp_create: out of host memory");
    }
    for (int b = 0; b < d->nb && st == L8_OK; b++) {
        int64_t part = d->b_n[b] / d->world, at = d->b_first[b] + (int64_t)d->rank * part;
        st = l8_tensor_narrow(l8_params_grad_flat(g), 0, d->b_first[b], d->b_n[b], &d->b_view[b]);
        if (st == L8_OK && d->zero1)
            st = l8_tensor_narrow(l8_params_grad_flat(g), 0, at, part, &d->g_shard[b]);
        if (st == L8_OK && d->zero1)
            st = l8_tensor_narrow(l8_params_master_flat(g), 0, d->b_first[b], d->b_n[b], &d->m_bucket[b]);
        if (st == L8_OK && d->zero1)
            st = l8_tensor_narrow(l8_params_master_flat(g), 0, at, part, &d->m_shard[b]);
        if (st == L8_OK && d->zero1) st = l8_event_create(d->ctx, 0, &d->gathered[b]);
        if (d->b_n[b] > d->st.largest_bucket) d->st.largest_bucket = d->b_n[b];
    }
    if (st == L8_OK) st = l8_event_create(d->ctx, 0, &d->ev);
    if (st == L8_OK) reset_pending(d);
    if (st == L8_OK) st = l8i_params_attach(g, group_lost, d);
    if (st == L8_OK) st = l8i_comm_attach(dp, comm_lost, d);
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
    if (d->g) {                   /* uninstall, unless someone replaced the callback since */
        void *cb_arg;
        if (l8i_params_grad_ready_cb(d->g, &cb_arg) == on_report && cb_arg == d) {
            l8_status ignored = l8_params_set_grad_ready_cb(d->g, NULL, NULL);   /* never fails */
            (void)ignored;
        }
        l8i_params_detach(d->g, d);
    }
    if (d->dp) l8i_comm_detach(d->dp, d);
    for (int b = 0; d->b_view && b < d->nb; b++) {
        l8_tensor_destroy(d->b_view[b]);
        l8_tensor_destroy(d->g_shard[b]);
        l8_tensor_destroy(d->m_bucket[b]);
        l8_tensor_destroy(d->m_shard[b]);
        if (d->gathered) l8_event_destroy(d->gathered[b]);
    }
    l8_event_destroy(d->ev);
    free(d->b_view), free(d->g_shard), free(d->m_bucket), free(d->m_shard);
    free(d->gathered), free(d->gather_pending);
    free(d->b_first), free(d->b_n), free(d->pending);
    free(d->pb_first), free(d->pb_last), free(d->reported), free(d->done);
    free(d);
}

/* ---- a step ---- */

/* Launch the completed buckets from next_launch on, in order. */
static l8_status launch_ready(l8_ddp *d, int *counter)
{
    while (d->next_launch < d->nb && d->pending[d->next_launch] == 0) {
        int b = d->next_launch++;
        if (d->zero1)               /* in place: this rank's slice of the bucket, averaged */
            L8_CHECK(l8_comm_reduce_scatter(d->dp, d->b_view[b], d->g_shard[b], L8_REDUCE_AVG, 0, d->cs));
        else
            L8_CHECK(l8_comm_all_reduce(d->dp, d->b_view[b], d->b_view[b], L8_REDUCE_AVG, d->cs));
        (*counter)++;
    }
    return L8_OK;
}

static void mark_done(l8_ddp *d, int id)
{
    d->done[id] = 1;
    for (int b = d->pb_first[id]; b <= d->pb_last[id]; b++) d->pending[b]--;
}

static l8_status count_done(l8_ddp *d, int id)
{
    mark_done(d, id);
    return d->overlap ? launch_ready(d, &d->in_bw) : L8_OK;
}

static l8_status on_report(void *arg, int id, l8_event *ev)
{
    l8_ddp *d = arg;
    L8_CHECK(need_parts(d, "l8_ddp"));
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
    L8_CHECK(need_parts(d, "l8_ddp_begin_micro_batch"));
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
    L8_CHECK(need_parts(d, "l8_ddp_mark_unused"));
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
    reset_pending(d);
    d->next_launch = 0;
    d->last = 1;
    d->mb++;
    d->step_mb0 = d->mb;
    d->in_bw = d->at_finish = d->zeroed = 0;
}

l8_status l8_ddp_finish(l8_ddp *d, l8_stream *s)
{
    L8_ARG(d != NULL);
    L8_CHECK(need_parts(d, "l8_ddp_finish"));
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
            mark_done(d, i);
        }
    if (st == L8_OK) st = launch_ready(d, &d->at_finish);
    if (st == L8_OK && d->next_launch != d->nb)
        st = L8_FAIL(L8_ERR_INTERNAL, "l8_ddp_finish: bucket %d still pending", d->next_launch);
    if (st == L8_OK && s != d->cs) st = l8_event_record(d->ev, d->cs);
    if (st == L8_OK && s != d->cs) st = l8_stream_wait_event(s, d->ev);
    if (st == L8_OK && d->gather_pending)   /* s now waits for every earlier gather too */
        memset(d->gather_pending, 0, (size_t)d->nb);
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
    L8_ARG(d != NULL && out != NULL);
    return l8i_stats_out(out, &d->st, sizeof d->st, "l8_ddp_get_stats");
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

l8_status l8_ddp_shard_ranges(const l8_ddp *d, int max, int *n, int64_t *offset, int64_t *numel)
{
    L8_ARG(d != NULL && n != NULL);
    if (!d->zero1)
        return L8_FAIL(L8_ERR_STATE, "l8_ddp_shard_ranges: the reducer was not made with zero1 = 1");
    *n = d->nb;
    if (max < d->nb || (d->nb && (!offset || !numel)))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_shard_ranges: room for %d ranges, there are %d",
                       max, d->nb);
    for (int b = 0; b < d->nb; b++) {
        numel[b] = d->b_n[b] / d->world;
        offset[b] = d->b_first[b] + (int64_t)d->rank * numel[b];
    }
    return L8_OK;
}

l8_status l8_ddp_gather_params(l8_ddp *d, l8_stream *s, int wait)
{
    L8_ARG(d != NULL && (wait == 0 || wait == 1));
    L8_CHECK(need_parts(d, "l8_ddp_gather_params"));
    if (!d->zero1)
        return L8_FAIL(L8_ERR_STATE, "l8_ddp_gather_params: the reducer was not made with zero1 = 1");
    L8_CHECK(l8i_resolve_stream("l8_ddp_gather_params", d->ctx, &s));
    L8_CHECK(comm_after(d, s));              /* after the optimizer's update */
    for (int b = d->nb - 1; b >= 0; b--) {   /* the first layers' buckets (the buffer's end) first */
        L8_CHECK(l8_comm_all_gather(d->dp, d->m_shard[b], d->m_bucket[b], 0, d->cs));
        L8_CHECK(l8_event_record(d->gathered[b], d->cs));
        d->gather_pending[b] = 1;
    }
    if (!wait || s == d->cs) return L8_OK;
    memset(d->gather_pending, 0, (size_t)d->nb);
    L8_CHECK(l8_event_record(d->ev, d->cs));
    return l8_stream_wait_event(s, d->ev);
}

l8_status l8_ddp_wait_param(l8_ddp *d, int id, l8_stream *s)
{
    L8_ARG(d != NULL);
    L8_CHECK(need_parts(d, "l8_ddp_wait_param"));
    if (id < -1 || id >= d->np)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_ddp_wait_param: parameter id %d (the group has %d)",
                       id, d->np);
    L8_CHECK(l8i_resolve_stream("l8_ddp_wait_param", d->ctx, &s));
    if (!d->zero1) return L8_OK;
    int lo = id < 0 ? 0 : d->pb_first[id], hi = id < 0 ? d->nb - 1 : d->pb_last[id];
    for (int b = lo; b <= hi; b++)
        if (d->gather_pending[b]) {
            if (s != d->cs) L8_CHECK(l8_stream_wait_event(s, d->gathered[b]));
            d->gather_pending[b] = 0;
        }
    return L8_OK;
}
