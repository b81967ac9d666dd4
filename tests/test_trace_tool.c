/* test_trace_tool.c - lean8-trace's replay (tools/trace_model.c) against
 * traces with known content made through the recorder API: every number of
 * the summary, a random alloc/free history checked against a brute-force
 * replay, and truncated or corrupt files read up to the last whole record.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/tests.h"
#include "tests/trace_known.h"
#include "tools/trace_model.h"
#include "alloc/trace.h"

static void cleanup(l8t_tmpdir *d)
{
    for (int i = 0; i < d->n; i++) unlink(d->path[i]);
    ck_assert_msg(rmdir(d->dir) == 0, "rmdir %s: %s", d->dir, strerror(errno));
}

static void write_known(const char *path)
{
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    ck_assert_int_eq(l8t_trace_known(t), 0);
    l8_trace_destroy(t);
}

static uint32_t tag_id(trace_model *m, const char *name)
{
    for (uint32_t i = 1; i < m->ntags; i++)
        if (!strcmp(tm_tag_name(m, i), name)) return i;
    ck_abort_msg("tag %s not in the trace", name);
    return 0;
}

static void check_known(trace_model *m, uint64_t events)
{
    ck_assert_uint_eq(m->events, events);
    ck_assert_uint_eq(m->alloc_peak, KNOWN_ALLOC_PEAK);
    ck_assert_uint_eq(m->reserved_peak, KNOWN_RESERVED_PEAK);
    ck_assert_uint_eq(m->pinned_peak, KNOWN_PINNED_PEAK);
    ck_assert_uint_eq(m->pinned_cur, 0);
    ck_assert_uint_eq(m->offload_out, KNOWN_OFFLOAD);
    ck_assert_uint_eq(m->offload_in, KNOWN_OFFLOAD);
    ck_assert_uint_eq(m->offload_out_n, 1);
    ck_assert_uint_eq(m->offload_in_n, 1);
    ck_assert_uint_eq(m->nooms, 1);
    ck_assert_uint_eq(m->ooms[0].request, KNOWN_OOM_REQUEST);
    ck_assert_uint_eq(m->ooms[0].reserved, KNOWN_OOM_RESERVED);
    ck_assert_str_eq(tm_tag_name(m, m->ooms[0].tag), KNOWN_TAG2);
    ck_assert_uint_eq(m->steps, KNOWN_STEPS);
    ck_assert_uint_eq(m->last_step, 2);
    uint64_t *at = l8t_xmalloc(m->ntags * sizeof *at);
    tm_snap_read(m, &m->peak, at);
    ck_assert_uint_eq(m->peak.best, KNOWN_ALLOC_PEAK);
    ck_assert_uint_eq(at[tag_id(m, KNOWN_TAG0)], KNOWN_TAG0_BYTES);
    ck_assert_uint_eq(at[tag_id(m, KNOWN_TAG1)], KNOWN_TAG1_BYTES);
    ck_assert_uint_eq(at[tag_id(m, KNOWN_TAG2)], KNOWN_TAG2_BYTES);
    ck_assert_uint_eq(at[0], 0);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->ntags; i++) sum += at[i];
    ck_assert_uint_eq(sum, KNOWN_ALLOC_PEAK);
    free(at);
}

START_TEST(test_summary_known)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8tool");
    const char *path = l8t_tmp_file(&d, "known.l8trace");
    write_known(path);
    trace_model m;
    ck_assert_int_eq(tm_load(&m, path, NULL, NULL, NULL), 0);
    check_known(&m, KNOWN_EVENTS);
    ck_assert_uint_eq(m.alloc_cur, KNOWN_ALLOC_END);
    ck_assert_uint_eq(m.reserved_cur, KNOWN_RESERVED_END);
    ck_assert_uint_eq(m.tag_cur[tag_id(&m, KNOWN_TAG2)], KNOWN_TAG2_END);
    ck_assert_uint_eq(m.tag_cur[tag_id(&m, KNOWN_TAG0)], 0);
    ck_assert_uint_eq(m.tag_peak[tag_id(&m, KNOWN_TAG2)], KNOWN_TAG2_END);
    ck_assert_uint_eq(m.unmatched_frees, 1);
    ck_assert_int_eq(m.info.ended, 1);
    ck_assert_int_eq(m.corrupt, 0);
    tm_close(&m);
    cleanup(&d);
}
END_TEST

/* The file cut inside its last event (and the end marker gone): the model
 * keeps every whole event; a corrupt record stops it where it is. */
START_TEST(test_truncated_and_corrupt)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8tool");
    const char *path = l8t_tmp_file(&d, "cut.l8trace");
    write_known(path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 48 - 20), 0);   /* end marker + 20 bytes */
    trace_model m;
    ck_assert_int_eq(tm_load(&m, path, NULL, NULL, NULL), 0);
    ck_assert_uint_eq(m.events, KNOWN_EVENTS - 1);                /* SEGMENT_FREE cut */
    ck_assert_uint_eq(m.info.file_bytes - m.info.offset, 28);
    ck_assert_int_eq(m.info.ended, 0);
    ck_assert_uint_eq(m.reserved_cur, KNOWN_RESERVED_PEAK);       /* the free never arrived */
    check_known(&m, KNOWN_EVENTS - 1);
    tm_close(&m);

    /* zero the kind of the 16th record after the header (an event) */
    const char *bad = l8t_tmp_file(&d, "bad.l8trace");
    write_known(bad);
    ck_assert_int_eq(stat(bad, &st), 0);
    int fd = open(bad, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    uint16_t zero = 0;
    ck_assert_int_eq(pwrite(fd, &zero, 2, st.st_size - 48 - 48 + 44), 2);   /* the SEGMENT_FREE */
    close(fd);
    ck_assert_int_eq(tm_load(&m, bad, NULL, NULL, NULL), 0);
    ck_assert_int_eq(m.corrupt, 1);
    ck_assert_ptr_nonnull(strstr(m.corrupt_msg, "kind 0x0000"));
    check_known(&m, KNOWN_EVENTS - 1);
    tm_close(&m);

    /* nothing readable: a header and a corrupt first record */
    const char *none = l8t_tmp_file(&d, "none.l8trace");
    write_known(none);
    fd = open(none, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    unsigned char junk[48];
    memset(junk, 0xAB, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, 48, 48), 48);
    close(fd);
    ck_assert_int_eq(tm_load(&m, none, NULL, NULL, NULL), 1);
    tm_close(&m);
    cleanup(&d);
}
END_TEST

/* A random history (several tags, frees in random order, segments): the
 * model's peak, per-tag bytes at the peak and final state equal a direct
 * replay of the same operations. */
START_TEST(test_random_history)
{
    enum { OPS = 4000, TAGS = 6, SLOTS = 64 };
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8tool");
    const char *path = l8t_tmp_file(&d, "rand.l8trace");
    l8_trace_config c = L8_TRACE_CONFIG_INIT;
    c.path = path;
    l8_trace *t;
    L8_CK(l8_trace_create(&c, &t));
    l8_rng rng;
    l8_rng_init(&rng, 0x7ace);
    uint64_t live_size[SLOTS] = { 0 };
    int live_tag[SLOTS];
    uint64_t cur[TAGS + 1] = { 0 }, at_peak[TAGS + 1] = { 0 }, total = 0, peak = 0;
    uint64_t reserved = 0, reserved_peak = 0;
    char name[TAGS][16];
    for (int i = 0; i < TAGS; i++) snprintf(name[i], sizeof name[i], "tag%d", i);
    for (int op = 0; op < OPS; op++) {
        int s = (int)l8_rng_below(&rng, SLOTS);
        uint64_t addr = 0x10000 + (uint64_t)s * 0x100000;
        if (live_size[s]) {
            l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 0, addr, 1, 0);   /* size ignored */
            cur[live_tag[s]] -= live_size[s];
            total -= live_size[s];
            live_size[s] = 0;
        } else {
            uint64_t size = 512 * (1 + l8_rng_below(&rng, 2000));
            int tg = (int)l8_rng_below(&rng, TAGS + 1);               /* TAGS: untagged */
            if (tg < TAGS) L8_CK(l8_tag_push(name[tg]));
            l8_trace_record(t, L8_TRACE_ALLOC, 0, 0, addr, size, size);
            if (tg < TAGS) L8_CK(l8_tag_pop());
            int slot = tg < TAGS ? tg + 1 : 0;
            live_size[s] = size;
            live_tag[s] = slot;
            cur[slot] += size;
            total += size;
            if (total > peak) {
                peak = total;
                memcpy(at_peak, cur, sizeof cur);
            }
        }
        if (op % 50 == 0) {
            uint64_t seg = 2ull << 20;
            int grow = reserved == 0 || l8_rng_below(&rng, 3) != 0;
            l8_trace_record(t, grow ? L8_TRACE_SEGMENT_ALLOC : L8_TRACE_SEGMENT_FREE, 0, 0, 0, seg, 0);
            reserved = grow ? reserved + seg : reserved - seg;
            if (reserved > reserved_peak) reserved_peak = reserved;
        }
    }
    l8_trace_destroy(t);
    trace_model m;
    ck_assert_int_eq(tm_load(&m, path, NULL, NULL, NULL), 0);
    ck_assert_uint_eq(m.alloc_peak, peak);
    ck_assert_uint_eq(m.alloc_cur, total);
    ck_assert_uint_eq(m.reserved_peak, reserved_peak);
    ck_assert_uint_eq(m.reserved_cur, reserved);
    uint64_t *snap = l8t_xmalloc(m.ntags * sizeof *snap);
    tm_snap_read(&m, &m.peak, snap);
    for (uint32_t id = 0; id < m.ntags; id++) {
        const char *n = tm_tag_name(&m, id);
        int slot = id == 0 ? 0 : atoi(n + 3) + 1;
        ck_assert_msg(snap[id] == at_peak[slot], "tag %s at the peak: %llu, expected %llu", n,
                      (unsigned long long)snap[id], (unsigned long long)at_peak[slot]);
        ck_assert_uint_eq(m.tag_cur[id], cur[slot]);
    }
    free(snap);
    tm_close(&m);
    cleanup(&d);
}
END_TEST

void l8t_trace_tool_tests(Suite *s)
{
    TCase *tc = tcase_create("trace_tool");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_summary_known);
    tcase_add_test(tc, test_truncated_and_corrupt);
    tcase_add_test(tc, test_random_history);
    suite_add_tcase(s, tc);
}
