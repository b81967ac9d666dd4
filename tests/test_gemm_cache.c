/* test_gemm_cache.c - the persistent GEMM plan cache's file logic on the
 * host (ops/gemm_cache.c): entries survive a save and a load; a missing file
 * is an empty cache; a corrupt, truncated, foreign or non-cache file is
 * ignored (never trusted) and replaced by the next save; saves merge what
 * another process saved; a failed save leaves the old file intact. The GPU
 * side (a second handle runs the tuned algorithm without tuning) is
 * test_gpu_plan_cache_file in test_gemm.c.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "ops/gemm.h"
#include "ops/gemm_internal.h"
#include "runtime/checkpoint.h"

static l8i_gemm_cache_id id_of(const char *dev, uint32_t sms, uint32_t ltv)
{
    l8i_gemm_cache_id id;
    memset(&id, 0, sizeof id);
    snprintf(id.device, sizeof id.device, "%s", dev);
    id.sm_count = sms;
    id.lt_version = ltv;
    return id;
}

static l8i_gemm_cache cache_at(const char *path, l8i_gemm_cache_id id)
{
    l8i_gemm_cache c;
    memset(&c, 0, sizeof c);
    c.path = (char *)path;        /* the tests own the path; never freed here */
    c.id = id;
    return c;
}

/* A distinct entry per seed: key, flags and algo bytes all depend on it. */
static l8i_gemm_cache_entry entry_of(uint64_t seed, uint64_t ws, int precise)
{
    l8i_gemm_cache_entry e;
    memset(&e, 0, sizeof e);
    e.key.m = 128 * seed;
    e.key.n = 256 + seed;
    e.key.k = 512;
    e.key.lda = e.key.ldb = 512;
    e.key.ldd = 256 + seed;
    e.key.bits = 0x1234 ^ seed;
    e.ws_bytes = ws;
    e.flags = (precise ? L8I_GCE_PRECISE : 0) | (uint64_t)L8I_PICK_SEARCH << 8 |
              (uint64_t)(uint8_t)(int8_t)-1 << 16 | (uint64_t)(40 + seed) << 32;
    for (int i = 0; i < 8; i++) e.algo[i] = 0x9E3779B97F4A7C15ull * (seed + 1) + (uint64_t)i;
    return e;
}

static const l8i_gemm_cache_id k_id = { "NVIDIA H200", 132, 130100 };

static void expect_entries(const l8i_gemm_cache *c, const uint64_t *seeds, int n)
{
    ck_assert_uint_eq(c->n, (size_t)n);
    for (int i = 0; i < n; i++) {
        l8i_gemm_cache_entry want = entry_of(seeds[i], 32u << 20, 0);
        const l8i_gemm_cache_entry *got = l8i_gemm_cache_find(c, &want.key, want.ws_bytes, 0);
        ck_assert_msg(got != NULL, "entry %llu missing", (unsigned long long)seeds[i]);
        ck_assert_msg(memcmp(got, &want, sizeof want) == 0, "entry %llu differs",
                      (unsigned long long)seeds[i]);
    }
}

/* Files in dir other than the ones named: temporaries left behind. */
static int stray_files(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, keep)) n++;
    closedir(d);
    return n;
}

static void save_seeds(const char *path, l8i_gemm_cache_id id, const uint64_t *seeds, int n)
{
    l8i_gemm_cache c = cache_at(path, id);
    for (int i = 0; i < n; i++) {
        l8i_gemm_cache_entry e = entry_of(seeds[i], 32u << 20, 0);
        L8_CK(l8i_gemm_cache_put(&c, &e));
    }
    L8_CK(l8i_gemm_cache_save(&c));
    l8i_gemm_cache_clear(&c);
}

static int load(const char *path, l8i_gemm_cache_id id, l8i_gemm_cache *out, char *why, size_t n)
{
    *out = cache_at(path, id);
    l8_error_clear();                             /* earlier tests of this process */
    int r = l8i_gemm_cache_load(out, why, n);
    ck_assert_int_eq(l8_last_error()->status, L8_OK);   /* a load leaves no error behind */
    return r;
}

static void cleanup(l8t_tmpdir *d)
{
    for (int i = 0; i < d->n; i++) unlink(d->path[i]);
    ck_assert_int_eq(rmdir(d->dir), 0);
}

START_TEST(test_host_cache_roundtrip)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8gc");
    const char *path = l8t_tmp_file(&d, "plans.l8c");
    char why[512];
    l8i_gemm_cache c;
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_ABSENT);
    ck_assert_uint_eq(c.n, 0);
    static const uint64_t seeds[] = { 1, 2, 3, 4, 5 };
    save_seeds(path, k_id, seeds, 5);
    ck_assert_int_eq(stray_files(d.dir, "plans.l8c"), 0);
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_LOADED);
    expect_entries(&c, seeds, 5);
    /* the lookup key is the plan key with the workspace and reduction mode */
    l8i_gemm_cache_entry e = entry_of(3, 32u << 20, 0);
    ck_assert_ptr_null(l8i_gemm_cache_find(&c, &e.key, 16u << 20, 0));
    ck_assert_ptr_null(l8i_gemm_cache_find(&c, &e.key, 32u << 20, 1));
    e.key.ldd++;
    ck_assert_ptr_null(l8i_gemm_cache_find(&c, &e.key, 32u << 20, 0));
    /* put replaces an entry with the same key, adds one with another mode */
    l8i_gemm_cache_entry r = entry_of(3, 32u << 20, 0);
    r.algo[0] ^= 1;
    L8_CK(l8i_gemm_cache_put(&c, &r));
    ck_assert_uint_eq(c.n, 5);
    ck_assert_uint_eq(l8i_gemm_cache_find(&c, &r.key, 32u << 20, 0)->algo[0], r.algo[0]);
    l8i_gemm_cache_entry p = entry_of(3, 32u << 20, 1);
    L8_CK(l8i_gemm_cache_put(&c, &p));
    ck_assert_uint_eq(c.n, 6);
    l8i_gemm_cache_clear(&c);
    cleanup(&d);
}
END_TEST

/* Every kind of untrustworthy file: ignored with a reason, the cache empty. */
START_TEST(test_host_cache_untrusted_files)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8gc");
    const char *path = l8t_tmp_file(&d, "plans.l8c");
    static const uint64_t seeds[] = { 7, 8, 9 };
    char why[512];
    l8i_gemm_cache c;
    save_seeds(path, k_id, seeds, 3);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char img[1 << 16];
    size_t len = fread(img, 1, sizeof img, f);
    fclose(f);
    ck_assert_uint_gt(len, 3 * sizeof(l8i_gemm_cache_entry));
    ck_assert_uint_lt(len, sizeof img);

    /* a foreign device, SM count or cuBLASLt version */
    const l8i_gemm_cache_id foreign[] = { id_of("NVIDIA H100 80GB HBM3", 132, 130100),
                                          id_of("NVIDIA H200", 114, 130100),
                                          id_of("NVIDIA H200", 132, 120900) };
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(load(path, foreign[i], &c, why, sizeof why), L8I_GCACHE_IGNORED);
        ck_assert_uint_eq(c.n, 0);
        ck_assert_msg(strstr(why, "written for NVIDIA H200") != NULL, "why: %s", why);
    }
    /* one flipped bit anywhere: in the entries (the end) and in the header */
    size_t at[] = { len - 20, len / 2, 5 };
    for (int i = 0; i < 3; i++) {
        img[at[i]] ^= 0x10;
        f = fopen(path, "wb");
        ck_assert_uint_eq(fwrite(img, 1, len, f), len);
        fclose(f);
        img[at[i]] ^= 0x10;
        ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
        ck_assert_uint_eq(c.n, 0);
        ck_assert_msg(why[0] != '\0', "no reason given");
    }
    /* truncated at several points, empty, and not a cache at all */
    size_t cut[] = { len - 1, len - sizeof(l8i_gemm_cache_entry), len / 2, 64, 0 };
    for (int i = 0; i < 5; i++) {
        f = fopen(path, "wb");
        ck_assert_uint_eq(fwrite(img, 1, cut[i], f), cut[i]);
        fclose(f);
        ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
        ck_assert_uint_eq(c.n, 0);
    }
    f = fopen(path, "wb");
    for (int i = 0; i < 1000; i++) fputs("not a plan cache\n", f);
    fclose(f);
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
    /* a valid lean8 container of another kind */
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, "lean8-train/other", 1, &w));
    L8_CK(l8_ckpt_write_section(w, "identity", &k_id, sizeof k_id));
    L8_CK(l8_ckpt_writer_commit(w));
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
    /* a directory where the file should be */
    unlink(path);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
    ck_assert_int_eq(rmdir(path), 0);

    /* an ignored foreign file is replaced by the next save, not merged */
    save_seeds(path, foreign[0], seeds, 3);
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_IGNORED);
    static const uint64_t mine[] = { 11 };
    save_seeds(path, k_id, mine, 1);
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_LOADED);
    expect_entries(&c, mine, 1);
    l8i_gemm_cache_clear(&c);
    cleanup(&d);
}
END_TEST

/* Two writers: the second save keeps the first's entries it lacks, its own
 * entries win on a shared key; a save that cannot write changes nothing. */
START_TEST(test_host_cache_merge_and_failed_save)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8gc");
    const char *path = l8t_tmp_file(&d, "plans.l8c");
    char why[512];
    l8i_gemm_cache a, b;
    ck_assert_int_eq(load(path, k_id, &a, why, sizeof why), L8I_GCACHE_ABSENT);
    ck_assert_int_eq(load(path, k_id, &b, why, sizeof why), L8I_GCACHE_ABSENT);
    l8i_gemm_cache_entry e1 = entry_of(1, 32u << 20, 0), e2 = entry_of(2, 32u << 20, 0);
    L8_CK(l8i_gemm_cache_put(&a, &e1));
    L8_CK(l8i_gemm_cache_put(&a, &e2));
    L8_CK(l8i_gemm_cache_save(&a));
    l8i_gemm_cache_entry b1 = entry_of(1, 32u << 20, 0), e3 = entry_of(3, 32u << 20, 0);
    b1.algo[7] = 42;              /* b tuned key 1 again, differently */
    L8_CK(l8i_gemm_cache_put(&b, &b1));
    L8_CK(l8i_gemm_cache_put(&b, &e3));
    L8_CK(l8i_gemm_cache_save(&b));
    l8i_gemm_cache c;
    ck_assert_int_eq(load(path, k_id, &c, why, sizeof why), L8I_GCACHE_LOADED);
    ck_assert_uint_eq(c.n, 3);
    ck_assert_uint_eq(l8i_gemm_cache_find(&c, &b1.key, b1.ws_bytes, 0)->algo[7], 42);
    ck_assert_ptr_nonnull(l8i_gemm_cache_find(&c, &e2.key, e2.ws_bytes, 0));
    ck_assert_ptr_nonnull(l8i_gemm_cache_find(&c, &e3.key, e3.ws_bytes, 0));
    ck_assert_int_eq(stray_files(d.dir, "plans.l8c"), 0);

    /* a save into a directory that does not exist: an error, nothing written */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no-such-dir/plans.l8c", d.dir);
    l8i_gemm_cache x = cache_at(bad, k_id);
    L8_CK(l8i_gemm_cache_put(&x, &e1));
    l8_status st = l8i_gemm_cache_save(&x);
    ck_assert_int_ne(st, L8_OK);
    ck_assert_msg(l8_last_error()->message[0] != '\0', "no message");
    l8_error_clear();
    l8i_gemm_cache_clear(&x);
    /* the good file is untouched by all of that */
    l8i_gemm_cache c2;
    ck_assert_int_eq(load(path, k_id, &c2, why, sizeof why), L8I_GCACHE_LOADED);
    ck_assert_uint_eq(c2.n, 3);
    l8i_gemm_cache_clear(&a);
    l8i_gemm_cache_clear(&b);
    l8i_gemm_cache_clear(&c);
    l8i_gemm_cache_clear(&c2);
    cleanup(&d);
}
END_TEST

/* The public side on the host backend: a handle takes the config field and
 * the environment without touching the file (the cache is for cuBLASLt
 * plans), and a corrupt file there never fails a call. */
START_TEST(test_host_cache_handle)
{
    l8t_tmpdir d;
    l8t_tmp_init(&d, "l8gc");
    const char *path = l8t_tmp_file(&d, "plans.l8c");
    FILE *f = fopen(path, "wb");
    fputs("garbage", f);
    fclose(f);
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    l8_gemm_config cfg = L8_GEMM_CONFIG_INIT;
    cfg.plan_cache = path;
    l8_gemm_handle *h = NULL;
    L8_CK(l8_gemm_handle_create(ctx, &cfg, &h));
    l8_gemm_stats s = { .size = sizeof s };
    L8_CK(l8_gemm_get_stats(h, &s));
    ck_assert_uint_eq(s.plan_cache_loaded, 0);
    ck_assert_uint_eq(s.plan_cache_saves, 0);
    l8_gemm_handle_destroy(h);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq((int)sb.st_size, 7);            /* untouched */
    l8t_ctx_finish(ctx);
    cleanup(&d);
}
END_TEST

Suite *l8_gemm_cache_suite(void)
{
    Suite *s = suite_create("gemm_cache");
    TCase *tc = tcase_create("gemm-cache-host");
    tcase_set_tags(tc, "host");
    tcase_add_test(tc, test_host_cache_roundtrip);
    tcase_add_test(tc, test_host_cache_untrusted_files);
    tcase_add_test(tc, test_host_cache_merge_and_failed_save);
    tcase_add_test(tc, test_host_cache_handle);
    suite_add_tcase(s, tc);
    return s;
}
