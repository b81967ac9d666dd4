/* trace_model.c - replaying a trace file into memory by tag (see
 * trace_model.h for the accounting and the snapshot undo log).
 *
 * Hot path: one reader call and one hash probe per event; the tag arrays are
 * indexed by the file's dense tag ids. 10 M events take about a second.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/trace_model.h"

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "lean8-trace: out of host memory\n");
        exit(1);
    }
    return q;
}

int tm_open(trace_model *m, const char *path)
{
    memset(m, 0, sizeof *m);
    m->path = path;
    if (l8_trace_reader_open(path, &m->r) != L8_OK) {
        fprintf(stderr, "lean8-trace: %s\n", l8_last_error()->message);
        return 1;
    }
    m->info.size = sizeof m->info;
    if (l8_trace_reader_info(m->r, &m->info) != L8_OK) {
        fprintf(stderr, "lean8-trace: %s\n", l8_last_error()->message);
        return 1;
    }
    m->ntags = 1;
    m->tag_cur = xrealloc(NULL, sizeof(uint64_t));
    m->tag_peak = xrealloc(NULL, sizeof(uint64_t));
    m->tag_cur[0] = m->tag_peak[0] = 0;
    m->peak.tag_epoch = xrealloc(NULL, sizeof(uint64_t));
    m->peak.tag_epoch[0] = 0;
    m->peak.epoch = 1;
    m->cap_blocks = 1024;
    m->blocks = xrealloc(NULL, m->cap_blocks * sizeof *m->blocks);
    memset(m->blocks, 0, m->cap_blocks * sizeof *m->blocks);
    return 0;
}

void tm_snap_free(tm_snap *s)
{
    free(s->tag_epoch);
    free(s->log);
    memset(s, 0, sizeof *s);
}

void tm_close(trace_model *m)
{
    l8_trace_reader_close(m->r);
    free(m->tag_cur);
    free(m->tag_peak);
    free(m->ooms);
    free(m->blocks);
    tm_snap_free(&m->peak);
    memset(m, 0, sizeof *m);
}

const char *tm_tag_name(trace_model *m, uint32_t id)
{
    const char *s = id ? l8_trace_reader_tag_name(m->r, id) : NULL;
    return s ? s : "(untagged)";
}

/* ---- tags and snapshots ---- */

static void grow_snap(tm_snap *s, uint32_t old_n, uint32_t n)
{
    if (!s) return;
    if (!s->tag_epoch) old_n = 0;
    s->tag_epoch = xrealloc(s->tag_epoch, n * sizeof *s->tag_epoch);
    /* a new tag's value was 0 at any earlier snapshot: log it as such */
    for (uint32_t i = old_n; i < n; i++) s->tag_epoch[i] = 0;
}

static void ensure_tag(trace_model *m, uint32_t id)
{
    if (id < m->ntags) return;
    uint32_t n = id + 1;
    m->tag_cur = xrealloc(m->tag_cur, n * sizeof *m->tag_cur);
    m->tag_peak = xrealloc(m->tag_peak, n * sizeof *m->tag_peak);
    for (uint32_t i = m->ntags; i < n; i++) m->tag_cur[i] = m->tag_peak[i] = 0;
    grow_snap(&m->peak, m->ntags, n);
    grow_snap(m->extra, m->ntags, n);
    m->ntags = n;
}

static void snap_log(tm_snap *s, uint32_t tag, uint64_t old)
{
    if (s->tag_epoch[tag] == s->epoch) return;
    s->tag_epoch[tag] = s->epoch;
    if (s->nlog == s->caplog) {
        s->caplog = s->caplog ? 2 * s->caplog : 64;
        s->log = xrealloc(s->log, s->caplog * sizeof *s->log);
    }
    s->log[s->nlog].tag = tag;
    s->log[s->nlog].old = old;
    s->nlog++;
}

static void snap_total(tm_snap *s, uint64_t total, uint64_t time)
{
    if (total <= s->best) return;
    s->best = total;
    s->best_time = time;
    s->epoch++;
    s->nlog = 0;
}

void tm_snap_reset(trace_model *m, tm_snap *s)
{
    if (!s->tag_epoch) {
        s->tag_epoch = xrealloc(NULL, m->ntags * sizeof *s->tag_epoch);
        memset(s->tag_epoch, 0, m->ntags * sizeof *s->tag_epoch);
    }
    s->best = m->alloc_cur;
    s->best_time = m->last_time;
    s->epoch++;
    s->nlog = 0;
}

void tm_snap_read(const trace_model *m, const tm_snap *s, uint64_t *out)
{
    memcpy(out, m->tag_cur, m->ntags * sizeof *out);
    for (size_t i = 0; i < s->nlog; i++) out[s->log[i].tag] = s->log[i].old;
}

static void tag_add(trace_model *m, uint32_t tag, uint64_t bytes, int sign)
{
    uint64_t old = m->tag_cur[tag];
    snap_log(&m->peak, tag, old);
    if (m->extra) snap_log(m->extra, tag, old);
    m->tag_cur[tag] = sign > 0 ? old + bytes : old - bytes;
    if (m->nchanged < 2) m->changed[m->nchanged++] = tag;
    if (m->tag_cur[tag] > m->tag_peak[tag]) m->tag_peak[tag] = m->tag_cur[tag];
}

/* ---- live blocks ---- */

static size_t slot_of(const trace_model *m, uint64_t addr, int16_t dev)
{
    uint64_t h = (addr ^ ((uint64_t)(uint16_t)dev << 48)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (m->cap_blocks - 1);
}

static tm_block *find_block(trace_model *m, uint64_t addr, int16_t dev)
{
    for (size_t i = slot_of(m, addr, dev);; i = (i + 1) & (m->cap_blocks - 1)) {
        tm_block *b = &m->blocks[i];
        if (!b->used) return NULL;
        if (b->addr == addr && b->device == dev) return b;
    }
}

static void put_block(trace_model *m, uint64_t addr, int16_t dev, uint64_t size, uint32_t tag);

static void grow_blocks(trace_model *m)
{
    tm_block *old = m->blocks;
    size_t oldcap = m->cap_blocks;
    m->cap_blocks *= 2;
    m->blocks = xrealloc(NULL, m->cap_blocks * sizeof *m->blocks);
    memset(m->blocks, 0, m->cap_blocks * sizeof *m->blocks);
    m->nblocks = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].used) put_block(m, old[i].addr, old[i].device, old[i].size, old[i].tag);
    free(old);
}

/* Insert or replace (an ALLOC of an address the file never freed). Returns
 * the replaced block's bytes via the caller's lookup first. */
static void put_block(trace_model *m, uint64_t addr, int16_t dev, uint64_t size, uint32_t tag)
{
    if ((m->nblocks + 1) * 2 > m->cap_blocks) grow_blocks(m);
    size_t i = slot_of(m, addr, dev);
    while (m->blocks[i].used && !(m->blocks[i].addr == addr && m->blocks[i].device == dev))
        i = (i + 1) & (m->cap_blocks - 1);
    if (!m->blocks[i].used) m->nblocks++;
    m->blocks[i] = (tm_block){ addr, size, tag, dev, 1 };
}

/* Remove b (backward-shift deletion keeps probe chains whole). */
static void del_block(trace_model *m, tm_block *b)
{
    size_t i = (size_t)(b - m->blocks), mask = m->cap_blocks - 1;
    m->blocks[i].used = 0;
    m->nblocks--;
    for (size_t j = (i + 1) & mask; m->blocks[j].used; j = (j + 1) & mask) {
        size_t home = slot_of(m, m->blocks[j].addr, m->blocks[j].device);
        /* move j to the hole i if its home is not in (i, j] cyclically */
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            m->blocks[i] = m->blocks[j];
            m->blocks[j].used = 0;
            i = j;
        }
    }
}

/* ---- events ---- */

/* Pinned blocks share the table with device blocks: a distinct device key. */
#define PINNED_DEV ((int16_t)-32768)

static void apply(trace_model *m, const l8_trace_event *e)
{
    ensure_tag(m, e->tag);
    m->nchanged = 0;
    m->events++;
    m->last_time = e->time_ns;
    switch (e->kind) {
    case L8_TRACE_ALLOC: {
        tm_block *b = find_block(m, e->addr, e->device);
        if (b) {                            /* never freed in the file: drop the old one */
            tag_add(m, b->tag, b->size, -1);
            m->alloc_cur -= b->size;
        }
        put_block(m, e->addr, e->device, e->size, e->tag);
        tag_add(m, e->tag, e->size, +1);
        m->alloc_cur += e->size;
        if (m->alloc_cur > m->alloc_peak) {
            m->alloc_peak = m->alloc_cur;
            m->alloc_peak_time = e->time_ns;
        }
        break;
    }
    case L8_TRACE_FREE_REQUESTED: {
        tm_block *b = find_block(m, e->addr, e->device);
        if (!b) {
            m->unmatched_frees++;
            break;
        }
        tag_add(m, b->tag, b->size, -1);
        m->alloc_cur -= b->size;
        del_block(m, b);
        break;
    }
    case L8_TRACE_SEGMENT_ALLOC:
        m->reserved_cur += e->size;
        if (m->reserved_cur > m->reserved_peak) m->reserved_peak = m->reserved_cur;
        break;
    case L8_TRACE_SEGMENT_FREE:
        m->reserved_cur = e->size > m->reserved_cur ? 0 : m->reserved_cur - e->size;
        break;
    case L8_TRACE_OOM:
        if (m->nooms == m->cap_ooms) {
            m->cap_ooms = m->cap_ooms ? 2 * m->cap_ooms : 8;
            m->ooms = xrealloc(m->ooms, m->cap_ooms * sizeof *m->ooms);
        }
        m->ooms[m->nooms++] = (tm_oom){ e->time_ns, e->size, e->aux, e->tag };
        break;
    case L8_TRACE_OFFLOAD_OUT:
        m->offload_out += e->size;
        m->offload_out_n++;
        break;
    case L8_TRACE_OFFLOAD_IN:
        m->offload_in += e->size;
        m->offload_in_n++;
        break;
    case L8_TRACE_STEP:
        m->steps++;
        m->last_step = e->aux;
        break;
    case L8_TRACE_PINNED_ALLOC:
        put_block(m, e->addr, PINNED_DEV, e->size, e->tag);
        m->pinned_cur += e->size;
        if (m->pinned_cur > m->pinned_peak) m->pinned_peak = m->pinned_cur;
        break;
    case L8_TRACE_PINNED_FREE: {
        tm_block *b = find_block(m, e->addr, PINNED_DEV);
        if (!b) {
            m->unmatched_frees++;
            break;
        }
        m->pinned_cur -= b->size;
        del_block(m, b);
        break;
    }
    default:                                /* FREE_COMPLETED, kinds from newer writers */
        break;
    }
    snap_total(&m->peak, m->alloc_cur, e->time_ns);
    if (m->extra) snap_total(m->extra, m->alloc_cur, e->time_ns);
    if (m->hook) m->hook(m->hook_user, m, e);
}

uint64_t tm_pump(trace_model *m)
{
    uint64_t n = 0;
    while (!m->corrupt) {
        l8_trace_event ev;
        int got = 0;
        l8_status st = l8_trace_reader_next(m->r, &ev, &got);
        if (st != L8_OK) {
            m->corrupt = 1;
            snprintf(m->corrupt_msg, sizeof m->corrupt_msg, "%s", l8_last_error()->message);
            break;
        }
        if (!got) break;
        apply(m, &ev);
        n++;
    }
    if (l8_trace_reader_info(m->r, &m->info) != L8_OK) {
        /* keep the last info: the numbers so far are still right */
    }
    return n;
}

int tm_writer_done(trace_model *m)
{
    if (m->info.ended) return 1;
    if (m->info.pid == 0) return 1;
    return kill((pid_t)m->info.pid, 0) != 0 && errno == ESRCH;
}

void tm_warn_tail(trace_model *m, int writer_done)
{
    if (m->corrupt)
        fprintf(stderr, "lean8-trace: warning: %s; using the %llu events before it\n",
                m->corrupt_msg, (unsigned long long)m->events);
    else if (writer_done && m->info.file_bytes > m->info.offset)
        fprintf(stderr, "lean8-trace: warning: '%s' ends with %llu bytes of an incomplete record "
                "(the writer was killed mid-write?); using the %llu whole events before them\n",
                m->path, (unsigned long long)(m->info.file_bytes - m->info.offset),
                (unsigned long long)m->events);
    if (m->unmatched_frees)
        fprintf(stderr, "lean8-trace: warning: '%s': %llu frees of blocks the file never "
                "allocated (ignored)\n", m->path, (unsigned long long)m->unmatched_frees);
}

const char *tm_bytes(uint64_t b, char *buf, size_t n)
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
    else snprintf(buf, n, "%.2f %s", v, unit[u]);
    return buf;
}

static const uint64_t *g_sort_v;
static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = g_sort_v[*(const uint32_t *)a], y = g_sort_v[*(const uint32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

void tm_order_desc(const uint64_t *v, uint32_t n, uint32_t *out)
{
    for (uint32_t i = 0; i < n; i++) out[i] = i;
    g_sort_v = v;
    qsort(out, n, sizeof *out, cmp_desc);
}

int tm_load(trace_model *m, const char *path, tm_hook hook, void *user, tm_snap *extra)
{
    if (tm_open(m, path)) return 1;
    m->hook = hook;
    m->hook_user = user;
    m->extra = extra;
    tm_pump(m);
    int done = tm_writer_done(m);
    if (!done)
        fprintf(stderr, "lean8-trace: note: '%s' is still being written (pid %u); reading what is "
                "there\n", path, m->info.pid);
    tm_warn_tail(m, done);
    if (m->corrupt && m->events == 0) {
        fprintf(stderr, "lean8-trace: '%s': no event could be read\n", path);
        return 1;
    }
    return 0;
}
