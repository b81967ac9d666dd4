/* test_checkpoint.c - the checkpoint container: round trips, the byte format,
 * damaged files, mismatched destinations, and failed saves.
 *
 * Files go to a fresh mkdtemp directory per test; tmp_finish() fails the test
 * when anything but the files the test named is left there (a temporary file
 * a failed save forgot). Tensors live on a host context; ctx_finish() fails
 * on a leaked storage. Hand-made files are built from the byte offsets in
 * docs/checkpoint-format.md, not from checkpoint.c's structs, so the document
 * is tested too. Test data are random bytes (seeded, printed by main).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/tests.h"
#include "runtime/checkpoint.h"

/* The table path of the CRC, exported by checkpoint.c for this test only. */
uint32_t l8i_crc32c_portable(uint32_t crc, const void *p, size_t n);

#define EXPECT(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define KIND "test/ckpt"

/* ---- files ---- */

typedef l8t_tmpdir tmpdir;
#define tmp_init(d) l8t_tmp_init((d), "l8ckpt")
#define tmp_file l8t_tmp_file

/* Names in the directory that the test did not name (temporaries). */
static int stray_files(const tmpdir *d, char *first, size_t cap)
{
    DIR *dh = opendir(d->dir);
    ck_assert_ptr_nonnull(dh);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        int known = 0;
        for (int i = 0; i < d->n; i++) {
            const char *base = strrchr(d->path[i], '/') + 1;
            if (!strcmp(base, de->d_name)) known = 1;
        }
        if (!known && n++ == 0 && first) snprintf(first, cap, "%s", de->d_name);
    }
    closedir(dh);
    return n;
}

static void tmp_finish(tmpdir *d)
{
    char stray[256] = "";
    int n = stray_files(d, stray, sizeof stray);
    for (int i = 0; i < d->n; i++) {
        struct stat sb;
        if (stat(d->path[i], &sb) == 0 && S_ISDIR(sb.st_mode)) rmdir(d->path[i]);
        else unlink(d->path[i]);
    }
    ck_assert_msg(n == 0, "%d unexpected file(s) left in %s, e.g. '%s'", n, d->dir, stray);
    ck_assert_msg(rmdir(d->dir) == 0, "rmdir %s: %s", d->dir, strerror(errno));
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "fopen %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "fopen %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void fill_random(l8_rng *r, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(l8_rng_next(r) >> 56);
}

/* ---- contexts and tensors ---- */

static l8_ctx *ctx_make(void) { return l8t_ctx("host", NULL, 0); }

static void ctx_finish(l8_ctx *ctx) { l8t_ctx_finish(ctx); }

/* A contiguous tensor filled with random bytes, which are returned in *bytes. */
static l8_tensor *tensor_random(l8_ctx *ctx, l8_rng *r, l8_dtype dt, int ndim, const int64_t *shape,
                                unsigned char **bytes)
{
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, dt, ndim, shape, &t));
    size_t n = l8_tensor_nbytes(t);
    *bytes = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(*bytes);
    fill_random(r, *bytes, n);
    L8_CK(l8_tensor_copy_from_host(t, *bytes, n, NULL));
    return t;
}

static unsigned char *tensor_bytes(const l8_tensor *t)
{
    size_t n = l8_tensor_nbytes(t);
    unsigned char *b = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(b);
    l8_tensor *c = NULL;
    L8_CK(l8_tensor_contiguous(t, NULL, &c));
    L8_CK(l8_tensor_copy_to_host(c, b, n, NULL));
    l8_tensor_destroy(c);
    return b;
}

/* ---- the checksum ---- */

static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

START_TEST(test_crc32c)
{
    /* RFC 3720 (iSCSI) B.4 vectors and the usual check value */
    unsigned char zeros[32] = { 0 }, ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) { ones[i] = 0xFF; inc[i] = (unsigned char)i; dec[i] = (unsigned char)(31 - i); }
    ck_assert_uint_eq(l8_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(l8_crc32c(0, zeros, 32), 0x8A9136AAu);
    ck_assert_uint_eq(l8_crc32c(0, ones, 32), 0x62A8AB43u);
    ck_assert_uint_eq(l8_crc32c(0, inc, 32), 0x46DD794Eu);
    ck_assert_uint_eq(l8_crc32c(0, dec, 32), 0x113FDB5Cu);
    ck_assert_uint_eq(l8_crc32c(0, NULL, 0), 0u);
    ck_assert_uint_eq(l8i_crc32c_portable(0, "123456789", 9), 0xE3069283u);

    /* both paths against the bitwise definition, at every alignment, and continued */
    l8_rng r;
    l8_rng_init(&r, 11);
    enum { N = 4096 };
    unsigned char *buf = malloc(N + 16);
    ck_assert_ptr_nonnull(buf);
    fill_random(&r, buf, N + 16);
    int rounds = l8_test_quick() ? 100 : 1000;
    for (int i = 0; i < rounds; i++) {
        size_t off = l8_rng_below(&r, 16), n = l8_rng_below(&r, N + 1), cut = l8_rng_below(&r, n + 1);
        uint32_t want = crc_bitwise(0, buf + off, n);
        uint32_t hw = l8_crc32c(0, buf + off, n), sw = l8i_crc32c_portable(0, buf + off, n);
        uint32_t cont = l8_crc32c(l8_crc32c(0, buf + off, cut), buf + off + cut, n - cut);
        uint32_t cont_sw = l8i_crc32c_portable(l8i_crc32c_portable(0, buf + off, cut), buf + off + cut, n - cut);
        EXPECT(hw == want && sw == want && cont == want && cont_sw == want,
               "crc of %zu bytes at +%zu (cut %zu): %08x %08x %08x %08x, wanted %08x", n, off, cut,
               hw, sw, cont, cont_sw, want);
    }
    free(buf);
}
END_TEST

/* ---- round trip ---- */

typedef struct sec {
    char name[L8_CKPT_NAME_MAX + 1];
    unsigned char *bytes;
    size_t n;
} sec;

/* A random printable name of length len, unique through the index i. */
static void make_name(l8_rng *r, char *out, size_t len, size_t i)
{
    int k = snprintf(out, len + 1, "s%zu.", i);
    for (size_t j = (size_t)k; j < len; j++) out[j] = (char)(0x20 + l8_rng_below(r, 0x5F));
    out[len] = '\0';
}

START_TEST(test_round_trip_sections)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "rt.l8ckpt");
    l8_rng r;
    l8_rng_init(&r, 21);
    size_t nsec = l8_test_quick() ? 300 : 2000;
    sec *s = calloc(nsec, sizeof *s);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < nsec; i++) {
        size_t len = i % 3 == 0 ? L8_CKPT_NAME_MAX : 8 + l8_rng_below(&r, 40);
        make_name(&r, s[i].name, len, i);
        switch (i % 5) {
        case 0: s[i].n = 0; break;                           /* empty sections */
        case 1: s[i].n = 1 + l8_rng_below(&r, 70); break;    /* around the 64-B alignment */
        case 2: s[i].n = 64 * (1 + l8_rng_below(&r, 4)); break;
        default: s[i].n = l8_rng_below(&r, 5000); break;
        }
        if (i == 7) s[i].n = (3u << 20) + 17;                /* bigger than the write buffer */
        s[i].bytes = malloc(s[i].n ? s[i].n : 1);
        ck_assert_ptr_nonnull(s[i].bytes);
        fill_random(&r, s[i].bytes, s[i].n);
    }
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 7, &w));
    for (size_t i = 0; i < nsec; i++) L8_CK(l8_ckpt_write_section(w, s[i].name, s[i].bytes, s[i].n));
    L8_CK(l8_ckpt_writer_commit(w));

    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    ck_assert_str_eq(l8_ckpt_kind(rd), KIND);
    ck_assert_uint_eq(l8_ckpt_user_version(rd), 7);
    ck_assert_str_eq(l8_ckpt_path(rd), path);
    L8_CK(l8_ckpt_expect(rd, KIND, 7));
    ck_assert_uint_eq(l8_ckpt_section_count(rd), nsec);
    unsigned char *buf = malloc((3u << 20) + 64);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < nsec; i++) {
        l8_ckpt_section_info info;
        L8_CK(l8_ckpt_section_at(rd, i, &info));
        EXPECT(!strcmp(info.name, s[i].name) && info.bytes == s[i].n && !info.is_tensor,
               "section %zu: '%s' %zu bytes, wanted '%s' %zu", i, info.name, info.bytes, s[i].name, s[i].n);
        ck_assert(l8_ckpt_has(rd, s[i].name));
        const void *p = NULL;
        size_t n = 99;
        L8_CK(l8_ckpt_section(rd, s[i].name, &p, &n));
        EXPECT(n == s[i].n && (n == 0 ? p == NULL : ((uintptr_t)p % 64 == 0 && !memcmp(p, s[i].bytes, n))),
               "section '%s': %zu bytes at %p differ", s[i].name, n, p);
        memset(buf, 0xA5, s[i].n + 1);
        L8_CK(l8_ckpt_read_section_into(rd, s[i].name, buf, s[i].n));
        EXPECT(!memcmp(buf, s[i].bytes, s[i].n) && buf[s[i].n] == 0xA5, "read_into '%s' differs", s[i].name);
    }
    ck_assert(!l8_ckpt_has(rd, "no such section"));
    l8_ckpt_section_info info;
    L8_CK_ST(l8_ckpt_section_at(rd, nsec, &info), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_find(rd, "missing", &info), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "missing"));
    L8_CK(l8_ckpt_find(rd, s[1].name, &info));
    ck_assert_uint_eq(info.bytes, s[1].n);
    /* exact sizes only */
    if (s[1].n) {
        L8_CK_ST(l8_ckpt_read_section_into(rd, s[1].name, buf, s[1].n - 1), L8_ERR_INVALID_ARG);
        L8_CK_ST(l8_ckpt_read_section_into(rd, s[1].name, buf, s[1].n + 1), L8_ERR_INVALID_ARG);
    }
    l8_ckpt_close(rd);
    free(buf);
    for (size_t i = 0; i < nsec; i++) free(s[i].bytes);
    free(s);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_round_trip_tensors)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "t.l8ckpt");
    l8_ctx *ctx = ctx_make();
    l8_rng r;
    l8_rng_init(&r, 31);
    static const int64_t shapes[][4] = {
        { 0 }, { 1 }, { 37 }, { 3, 5 }, { 2, 3, 4 }, { 2, 1, 3, 5 }, { 4, 0, 3 }, { 1024, 1030 },
    };
    static const int ndims[] = { 0, 1, 1, 2, 3, 4, 3, 2 };
    enum { NS = sizeof ndims / sizeof ndims[0] };
    l8_tensor *t[L8_DTYPE_COUNT][NS];
    unsigned char *bytes[L8_DTYPE_COUNT][NS];
    char name[64];
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 1, &w));
    for (int dt = 0; dt < L8_DTYPE_COUNT; dt++)
        for (int k = 0; k < NS; k++) {
            t[dt][k] = tensor_random(ctx, &r, (l8_dtype)dt, ndims[k], shapes[k], &bytes[dt][k]);
            snprintf(name, sizeof name, "%s.%d", l8_dtype_name((l8_dtype)dt), k);
            L8_CK(l8_ckpt_write_tensor(w, name, t[dt][k]));
        }
    /* a non-contiguous source is saved in row-major order of its view */
    l8_tensor *tr = NULL;
    L8_CK(l8_tensor_transpose(t[L8_F32][4], 0, 2, &tr));   /* (4, 3, 2) view */
    L8_CK(l8_ckpt_write_tensor(w, "transposed", tr));
    unsigned char *tr_bytes = tensor_bytes(tr);
    L8_CK(l8_ckpt_write_section(w, "raw", "abc", 3));
    /* more than one 8 MiB bounce chunk */
    int64_t huge_n = (9 << 20) + 5;
    unsigned char *huge_bytes = NULL;
    l8_tensor *huge = tensor_random(ctx, &r, L8_U8, 1, &huge_n, &huge_bytes);
    L8_CK(l8_ckpt_write_tensor(w, "huge", huge));
    L8_CK(l8_ckpt_writer_commit(w));

    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    for (int dt = 0; dt < L8_DTYPE_COUNT; dt++)
        for (int k = 0; k < NS; k++) {
            snprintf(name, sizeof name, "%s.%d", l8_dtype_name((l8_dtype)dt), k);
            l8_ckpt_section_info info;
            L8_CK(l8_ckpt_find(rd, name, &info));
            ck_assert(info.is_tensor && info.dtype == (l8_dtype)dt && info.ndim == ndims[k]);
            for (int i = 0; i < ndims[k]; i++) ck_assert_int_eq(info.shape[i], shapes[k][i]);
            l8_tensor *dst = NULL;
            L8_CK(l8_tensor_empty(ctx, (l8_dtype)dt, ndims[k], shapes[k], &dst));
            size_t n = l8_tensor_nbytes(dst);
            unsigned char *poison = malloc(n ? n : 1);
            memset(poison, 0xA5, n);
            L8_CK(l8_tensor_copy_from_host(dst, poison, n, NULL));
            L8_CK(l8_ckpt_check_tensor(rd, name, dst));
            L8_CK(l8_ckpt_read_tensor(rd, name, dst));
            unsigned char *got = tensor_bytes(dst);
            EXPECT(!memcmp(got, bytes[dt][k], n), "tensor '%s' differs after the round trip", name);
            free(got);
            free(poison);
            l8_tensor_destroy(dst);
        }
    /* into a non-contiguous destination: a (2, 3, 4) section through a transposed (4, 3, 2) storage */
    l8_tensor *base = NULL, *view = NULL;
    int64_t tshape[3] = { 4, 3, 2 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 3, tshape, &base));
    L8_CK(l8_tensor_transpose(base, 0, 2, &view));
    L8_CK(l8_ckpt_read_tensor(rd, "f32.4", view));
    unsigned char *got = tensor_bytes(view);
    ck_assert(!memcmp(got, bytes[L8_F32][4], l8_tensor_nbytes(view)));
    free(got);
    /* and the transposed source came back in its view's order */
    L8_CK(l8_ckpt_read_tensor(rd, "transposed", base));
    got = tensor_bytes(base);
    ck_assert(!memcmp(got, tr_bytes, l8_tensor_nbytes(base)));
    free(got);
    l8_tensor *huge2 = NULL;
    L8_CK(l8_tensor_empty(ctx, L8_U8, 1, &huge_n, &huge2));
    L8_CK(l8_ckpt_read_tensor(rd, "huge", huge2));
    got = tensor_bytes(huge2);
    ck_assert(!memcmp(got, huge_bytes, (size_t)huge_n));
    free(got);
    l8_tensor_destroy(huge2);
    /* raw bytes of a tensor section are reachable too */
    const void *p;
    size_t n;
    L8_CK(l8_ckpt_section(rd, "i32.3", &p, &n));
    ck_assert_uint_eq(n, 15 * 4);
    ck_assert(!memcmp(p, bytes[L8_I32][3], n));
    l8_ckpt_close(rd);

    l8_tensor_destroy(view);
    l8_tensor_destroy(base);
    l8_tensor_destroy(tr);
    l8_tensor_destroy(huge);
    free(huge_bytes);
    free(tr_bytes);
    for (int dt = 0; dt < L8_DTYPE_COUNT; dt++)
        for (int k = 0; k < NS; k++) {
            l8_tensor_destroy(t[dt][k]);
            free(bytes[dt][k]);
        }
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

/* ---- the bytes, as docs/checkpoint-format.md describes them ---- */

static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* Recompute every checksum of a hand-edited file, as the document says. */
static void refresh_crcs(unsigned char *b, size_t size)
{
    uint64_t index = get64(b + 24);
    uint32_t count = get32(b + 32);
    for (uint32_t i = 0; i < count; i++) {
        unsigned char *e = b + index + (size_t)i * 192;
        uint64_t off = get64(e + 128), len = get64(e + 136);
        if (off <= size && len <= size - off) put32(e + 144, l8_crc32c(0, b + off, (size_t)len));
    }
    put32(b + 44, l8_crc32c(0, b + 128, size - 128));
    put32(b + 124, l8_crc32c(0, b, 124));
}

/* A small file: "alpha" (5 bytes), "empty" (0), a (2, 3) f32 tensor "w". */
static void write_small(const char *path, l8_ctx *ctx)
{
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 3, &w));
    L8_CK(l8_ckpt_write_section(w, "alpha", "hello", 5));
    L8_CK(l8_ckpt_write_section(w, "empty", NULL, 0));
    int64_t shape[2] = { 2, 3 };
    l8_tensor *t = NULL;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 2, shape, &t));
    float v[6] = { 1, 2, 3, 4, 5, 6 };
    L8_CK(l8_tensor_copy_from_host(t, v, sizeof v, NULL));
    L8_CK(l8_ckpt_write_tensor(w, "w", t));
    l8_tensor_destroy(t);
    L8_CK(l8_ckpt_writer_commit(w));
}

START_TEST(test_format_matches_doc)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "f.l8ckpt");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);
    size_t size;
    unsigned char *b = slurp(path, &size);
    ck_assert(!memcmp(b, "L8CKPT\0\0", 8));
    ck_assert_uint_eq(get32(b + 8), 1);                  /* version */
    ck_assert_uint_eq(get32(b + 12), 128);               /* header_size */
    ck_assert_uint_eq(get64(b + 16), size);              /* file_size */
    uint64_t index = get64(b + 24);
    ck_assert_uint_eq(get32(b + 32), 3);                 /* section_count */
    ck_assert_uint_eq(get32(b + 36), 192);               /* entry_size */
    ck_assert_uint_eq(get32(b + 40), 3);                 /* user_version */
    ck_assert_uint_eq(get32(b + 44), l8_crc32c(0, b + 128, size - 128));
    ck_assert_str_eq((const char *)b + 48, KIND);
    ck_assert_uint_eq(get32(b + 124), l8_crc32c(0, b, 124));
    ck_assert_uint_eq(index, size - 3 * 192);
    ck_assert_uint_eq(index % 64, 0);
    /* sections in order, each at the next multiple of 64, zero padding */
    const char *names[3] = { "alpha", "empty", "w" };
    uint64_t lens[3] = { 5, 0, 24 }, want_off = 128;
    for (int i = 0; i < 3; i++) {
        const unsigned char *e = b + index + i * 192;
        ck_assert_str_eq((const char *)e, names[i]);
        uint64_t off = get64(e + 128), len = get64(e + 136);
        ck_assert_uint_eq(off, want_off);
        ck_assert_uint_eq(len, lens[i]);
        ck_assert_uint_eq(get32(e + 144), l8_crc32c(0, b + off, len));
        ck_assert_uint_eq(get32(e + 148), i == 2 ? 1 : 0);          /* type */
        if (i == 2) {
            ck_assert_uint_eq(get32(e + 152), L8_F32);
            ck_assert_uint_eq(get32(e + 156), 2);
            ck_assert_int_eq((int64_t)get64(e + 160), 2);
            ck_assert_int_eq((int64_t)get64(e + 168), 3);
            float v[6];
            memcpy(v, b + off, 24);
            ck_assert(v[0] == 1 && v[5] == 6);
        }
        for (uint64_t p = off + len; p < (off + len + 63) / 64 * 64; p++) ck_assert_uint_eq(b[p], 0);
        want_off = (off + len + 63) / 64 * 64;
    }
    ck_assert_uint_eq(want_off, index);
    free(b);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

/* ---- damaged files ---- */

/* Open must refuse the file with want (or, when want2 != L8_OK, want2). */
static void expect_refused(const char *path, l8_status want, l8_status want2, const char *what)
{
    l8_ckpt_reader *rd = (l8_ckpt_reader *)&rd;
    l8_status st = l8_ckpt_open(path, &rd);
    EXPECT(st == want || (want2 != L8_OK && st == want2), "%s: open -> %s (%s)", what,
           l8_status_name(st), st ? l8_last_error_string() : "accepted");
    EXPECT(rd == NULL, "%s: a failed open returned a reader", what);
}

START_TEST(test_truncated_every_length)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "full.l8ckpt");
    const char *cut = tmp_file(&d, "cut.l8ckpt");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);
    size_t size;
    unsigned char *b = slurp(path, &size);
    char what[64];
    for (size_t len = 0; len < size; len++) {
        spit(cut, b, len);
        snprintf(what, sizeof what, "truncated to %zu of %zu bytes", len, size);
        expect_refused(cut, L8_ERR_INVALID_ARG, L8_OK, what);
        const char *msg = l8_last_error()->message;
        EXPECT(strstr(msg, cut) && (len == 0 ? strstr(msg, "empty") : strstr(msg, "truncated")) != NULL,
               "%s: message '%s'", what, msg);
    }
    /* one byte too many is refused as well */
    unsigned char *longer = malloc(size + 1);
    memcpy(longer, b, size);
    longer[size] = 0;
    spit(cut, longer, size + 1);
    expect_refused(cut, L8_ERR_INVALID_ARG, L8_OK, "one byte appended");
    free(longer);
    free(b);

    /* a bigger file: a dense sample of lengths */
    l8_rng r;
    l8_rng_init(&r, 41);
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 1, &w));
    unsigned char blob[3000];
    for (int i = 0; i < 100; i++) {
        fill_random(&r, blob, sizeof blob);
        char name[32];
        snprintf(name, sizeof name, "blob%d", i);
        L8_CK(l8_ckpt_write_section(w, name, blob, l8_rng_below(&r, sizeof blob)));
    }
    L8_CK(l8_ckpt_writer_commit(w));
    b = slurp(path, &size);
    int samples = l8_test_quick() ? 200 : 2000;
    for (int i = 0; i < samples; i++) {
        size_t len = i < 64 ? size - 1 - (size_t)i : l8_rng_below(&r, size);
        spit(cut, b, len);
        snprintf(what, sizeof what, "truncated to %zu of %zu bytes", len, size);
        expect_refused(cut, L8_ERR_INVALID_ARG, L8_OK, what);
    }
    free(b);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_corrupt_every_byte)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "good.l8ckpt");
    const char *bad = tmp_file(&d, "bad.l8ckpt");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);
    size_t size;
    unsigned char *b = slurp(path, &size);
    l8_rng r;
    l8_rng_init(&r, 51);
    char what[96];
    for (size_t i = 0; i < size; i++) {
        unsigned char flip = (unsigned char)(1 + l8_rng_below(&r, 255));
        b[i] ^= flip;
        spit(bad, b, size);
        snprintf(what, sizeof what, "byte %zu of %zu xor 0x%02x", i, size, flip);
        /* bytes 8..11 are the version: a different one is "unsupported" */
        expect_refused(bad, L8_ERR_INVALID_ARG, i >= 8 && i < 12 ? L8_ERR_UNSUPPORTED : L8_OK, what);
        if (i >= 128) {
            const char *msg = l8_last_error()->message;
            EXPECT(strstr(msg, "checksum") != NULL, "%s: message '%s'", what, msg);
        }
        b[i] ^= flip;
    }
    /* damage inside a section's payload names the section */
    b[128 + 2] ^= 0x10;                                   /* "alpha" is the first section */
    spit(bad, b, size);
    expect_refused(bad, L8_ERR_INVALID_ARG, L8_OK, "damaged alpha");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "section 'alpha'"));
    b[128 + 2] ^= 0x10;
    /* the untouched file still opens */
    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    l8_ckpt_close(rd);
    free(b);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_bad_files)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "good.l8ckpt");
    const char *bad = tmp_file(&d, "bad.l8ckpt");
    const char *sub = tmp_file(&d, "subdir");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);
    size_t size;
    unsigned char *b = slurp(path, &size);
    unsigned char *c = malloc(size);

    /* missing file: an I/O error with errno */
    l8_ckpt_reader *rd = NULL;
    L8_CK_ST(l8_ckpt_open(bad, &rd), L8_ERR_IO);
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOENT");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, bad));
    /* a directory */
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    expect_refused(sub, L8_ERR_INVALID_ARG, L8_OK, "a directory");
    /* bad magic, even with every checksum right */
    memcpy(c, b, size);
    c[3] = 'X';
    refresh_crcs(c, size);
    spit(bad, c, size);
    expect_refused(bad, L8_ERR_INVALID_ARG, L8_OK, "bad magic");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "not a lean8 checkpoint"));
    /* text */
    spit(bad, "hello, world\n", 13);
    expect_refused(bad, L8_ERR_INVALID_ARG, L8_OK, "a text file");
    /* a newer format version, consistent otherwise */
    memcpy(c, b, size);
    put32(c + 8, 2);
    refresh_crcs(c, size);
    spit(bad, c, size);
    expect_refused(bad, L8_ERR_UNSUPPORTED, L8_OK, "version 2");
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "version 2"));
    ck_assert_int_eq(l8_status_is_caller_error(L8_ERR_UNSUPPORTED), 1);
    free(c);
    free(b);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

/* Files with every checksum right but a malformed index (a buggy or hostile
 * writer): edit the index of the small file, refresh the checksums. */
START_TEST(test_malformed_index)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "good.l8ckpt");
    const char *bad = tmp_file(&d, "bad.l8ckpt");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);
    size_t size;
    unsigned char *b = slurp(path, &size);
    unsigned char *c = malloc(size);
    uint64_t index = get64(b + 24);
    unsigned char *e0, *e1, *e2;
    struct { const char *what, *msg; } cases[] = {
        { "duplicate names", "two sections are named 'alpha'" },
        { "overlapping sections", "overlap" },
        { "misaligned offset", "aligned" },
        { "section past the index", "aligned inside" },
        { "unknown type", "unknown type" },
        { "tensor length", "does not match" },
        { "bad dtype", "does not match" },
        { "control character in a name", "malformed" },
        { "unterminated name", "malformed" },
        { "bytes after a name", "after its name" },
        { "index does not end the file", "does not end" },
        { "bad kind", "kind" },
        { "reserved header field", "reserved" },
        { "empty tensor of a shape beyond int64 bytes", "more than int64 bytes" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(c, b, size);
        e0 = c + index;
        e1 = e0 + 192;
        e2 = e1 + 192;
        switch (k) {
        case 0: memset(e1, 0, 128); memcpy(e1, "alpha", 5); break;
        case 1: put64(e2 + 128, get64(e0 + 128)); put64(e2 + 136, 24); break;   /* w over alpha */
        case 2: put64(e0 + 128, get64(e0 + 128) + 8); break;
        case 3: put64(e2 + 136, index); break;
        case 4: put32(e0 + 148, 7); break;
        case 5: put64(e2 + 168, 4); break;                  /* (2, 4) f32 is 32 bytes, not 24 */
        case 6: put32(e2 + 152, 99); break;
        case 7: e0[1] = '\n'; break;
        case 8: memset(e0, 'a', 128); break;
        case 9: e0[100] = 'x'; break;
        case 10: put32(c + 32, 2); break;
        case 11: c[48] = '\0'; break;
        case 12: put32(c + 120, 1); break;
        case 13: put64(e2 + 160, 0); put64(e2 + 168, INT64_MAX); put64(e2 + 136, 0); break;
        }
        refresh_crcs(c, size);
        spit(bad, c, size);
        expect_refused(bad, L8_ERR_INVALID_ARG, L8_OK, cases[k].what);
        EXPECT(strstr(l8_last_error()->message, cases[k].msg) != NULL, "%s: message '%s'",
               cases[k].what, l8_last_error()->message);
    }
    /* refresh_crcs itself makes a valid file from a valid one */
    memcpy(c, b, size);
    refresh_crcs(c, size);
    ck_assert(!memcmp(c, b, size));
    free(c);
    free(b);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

/* ---- caller mistakes ---- */

START_TEST(test_writer_arguments)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "a.l8ckpt");
    l8_ckpt_writer *w = (l8_ckpt_writer *)&w;
    L8_CK_ST(l8_ckpt_writer_open(NULL, KIND, 1, &w), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(w);
    L8_CK_ST(l8_ckpt_writer_open("", KIND, 1, &w), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_writer_open(path, "", 1, &w), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_writer_open(path, NULL, 1, &w), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_writer_open(path, "tab\there", 1, &w), L8_ERR_INVALID_ARG);
    char kind[80];
    memset(kind, 'k', sizeof kind);
    kind[64] = '\0';
    L8_CK_ST(l8_ckpt_writer_open(path, kind, 1, &w), L8_ERR_INVALID_ARG);
    kind[63] = '\0';                                       /* 63: the limit */
    L8_CK(l8_ckpt_writer_open(path, kind, 1, &w));

    char name[L8_CKPT_NAME_MAX + 2];
    memset(name, 'n', sizeof name);
    name[L8_CKPT_NAME_MAX + 1] = '\0';                     /* 128 */
    L8_CK_ST(l8_ckpt_write_section(w, name, "x", 1), L8_ERR_INVALID_ARG);
    name[L8_CKPT_NAME_MAX] = '\0';                         /* 127 */
    L8_CK(l8_ckpt_write_section(w, name, "x", 1));
    L8_CK_ST(l8_ckpt_write_section(w, name, "y", 1), L8_ERR_INVALID_ARG);   /* duplicate */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "already has"));
    L8_CK_ST(l8_ckpt_write_section(w, "", "x", 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_write_section(w, NULL, "x", 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_write_section(w, "nl\n", "x", 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_write_section(w, "\xC3\xA9", "x", 1), L8_ERR_INVALID_ARG);   /* not ASCII */
    L8_CK_ST(l8_ckpt_write_section(w, "null", NULL, 4), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_write_tensor(w, "t", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_write_section(NULL, "a", "x", 1), L8_ERR_INVALID_ARG);
    /* caller mistakes do not fail the writer */
    L8_CK(l8_ckpt_write_section(w, "after", "zz", 2));
    L8_CK(l8_ckpt_writer_commit(w));
    L8_CK_ST(l8_ckpt_writer_commit(NULL), L8_ERR_INVALID_ARG);
    l8_ckpt_writer_abort(NULL);

    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    ck_assert_uint_eq(l8_ckpt_section_count(rd), 2);
    char got[2];
    L8_CK(l8_ckpt_read_section_into(rd, name, got, 1));
    ck_assert_int_eq(got[0], 'x');
    ck_assert_str_eq(l8_ckpt_kind(rd), kind);
    L8_CK_ST(l8_ckpt_expect(rd, "other", 1), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "'other' version 1 is expected"));
    L8_CK_ST(l8_ckpt_expect(rd, kind, 2), L8_ERR_INVALID_ARG);
    L8_CK(l8_ckpt_expect(rd, kind, 1));
    l8_ckpt_close(rd);
    l8_ckpt_close(NULL);
    ck_assert_uint_eq(l8_ckpt_section_count(NULL), 0);
    ck_assert_str_eq(l8_ckpt_kind(NULL), "");
    L8_CK_ST(l8_ckpt_open(path, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_ckpt_open(NULL, &rd), L8_ERR_INVALID_ARG);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_tensor_mismatch)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "m.l8ckpt");
    l8_ctx *ctx = ctx_make();
    write_small(path, ctx);                               /* "w": f32 (2, 3) */
    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    struct { l8_dtype dt; int nd; int64_t shape[3]; const char *section, *msg; } cases[] = {
        { L8_BF16, 2, { 2, 3 }, "w", "holds a f32 tensor of shape [2, 3], but the destination is a bf16 tensor of shape [2, 3]" },
        { L8_F32, 2, { 3, 2 }, "w", "destination is a f32 tensor of shape [3, 2]" },
        { L8_F32, 1, { 6 }, "w", "shape [6]" },
        { L8_F32, 3, { 2, 3, 1 }, "w", "shape [2, 3, 1]" },
        { L8_F32, 0, { 0 }, "w", "shape []" },
        { L8_U8, 1, { 5 }, "alpha", "not a tensor" },
        { L8_F32, 2, { 2, 3 }, "nope", "no section 'nope'" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        l8_tensor *dst = NULL;
        L8_CK(l8_tensor_empty(ctx, cases[k].dt, cases[k].nd, cases[k].shape, &dst));
        size_t n = l8_tensor_nbytes(dst);
        unsigned char *poison = malloc(n + 1);
        memset(poison, 0x5A, n);
        L8_CK(l8_tensor_copy_from_host(dst, poison, n, NULL));
        L8_CK_ST(l8_ckpt_check_tensor(rd, cases[k].section, dst), L8_ERR_INVALID_ARG);
        L8_CK_ST(l8_ckpt_read_tensor(rd, cases[k].section, dst), L8_ERR_INVALID_ARG);
        const char *msg = l8_last_error()->message;
        EXPECT(strstr(msg, cases[k].msg) && strstr(msg, cases[k].section),
               "case %zu: message '%s' lacks '%s'", k, msg, cases[k].msg);
        unsigned char *got = tensor_bytes(dst);
        EXPECT(!memcmp(got, poison, n), "case %zu: the destination changed", k);
        free(got);
        free(poison);
        l8_tensor_destroy(dst);
    }
    /* a broadcast destination is refused by the copy, and stays as it was */
    l8_tensor *one = NULL, *bc = NULL;
    int64_t s1 = 1, shape[2] = { 2, 3 }, strides[2] = { 0, 0 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &s1, &one));
    float v = 42.0f;
    L8_CK(l8_tensor_copy_from_host(one, &v, sizeof v, NULL));
    L8_CK(l8_tensor_from_storage(l8_tensor_storage(one), 0, L8_F32, 2, shape, strides, &bc));
    L8_CK_ST(l8_ckpt_read_tensor(rd, "w", bc), L8_ERR_INVALID_ARG);
    L8_CK(l8_tensor_copy_to_host(one, &v, sizeof v, NULL));
    ck_assert(v == 42.0f);
    l8_tensor_destroy(bc);
    l8_tensor_destroy(one);
    L8_CK_ST(l8_ckpt_read_tensor(rd, "w", NULL), L8_ERR_INVALID_ARG);
    l8_ckpt_close(rd);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

/* ---- failed saves ---- */

/* The new checkpoint of the failure tests: a 2 MiB tensor between small
 * sections, so the file limit can fall inside a section, between them, in
 * the index, or at the header. */
static l8_status save_new(const char *path, l8_tensor *big, int commit_anyway, int *stage, char *errname)
{
    errname[0] = '\0';
    l8_ckpt_writer *w = NULL;
    *stage = 0;
    l8_status st = l8_ckpt_writer_open(path, KIND, 2, &w);
    if (st) return st;
    *stage = 1;
    static unsigned char small[1000];
    if ((st = l8_ckpt_write_section(w, "a", small, sizeof small)) != L8_OK ||
        (st = l8_ckpt_write_tensor(w, "big", big)) != L8_OK ||
        (st = l8_ckpt_write_section(w, "b", small, 100)) != L8_OK) {
        snprintf(errname, 32, "%s", l8_last_error()->foreign_name);
        /* a failed writer refuses everything but commit and abort */
        l8_status again = l8_ckpt_write_section(w, "c", small, 1);
        if (st == L8_ERR_IO && again != L8_ERR_STATE) st = L8_ERR_INTERNAL;
        if (!commit_anyway) {
            l8_ckpt_writer_abort(w);
            return st;
        }
        /* commit of a failed writer: refused, and it cleans up as abort does */
        again = l8_ckpt_writer_commit(w);
        return again == L8_ERR_STATE ? st : L8_ERR_INTERNAL;
    }
    *stage = 2;
    l8_status st2 = l8_ckpt_writer_commit(w);
    snprintf(errname, 32, "%s", l8_last_error()->foreign_name);
    return st2;
}

START_TEST(test_failed_save_keeps_previous)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "keep.l8ckpt");
    l8_ctx *ctx = ctx_make();
    l8_rng r;
    l8_rng_init(&r, 61);
    write_small(path, ctx);
    size_t old_size;
    unsigned char *old = slurp(path, &old_size);
    int64_t n = 512 * 1024;
    unsigned char *big_bytes = NULL;
    l8_tensor *big = tensor_random(ctx, &r, L8_F32, 1, &n, &big_bytes);

    struct rlimit lim0;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &lim0), 0);
    if (lim0.rlim_max != RLIM_INFINITY && lim0.rlim_max < (8u << 20)) {
        printf("checkpoint: failed-save test SKIPPED: RLIMIT_FSIZE hard limit too low\n");
        l8_tensor_destroy(big);
        free(big_bytes);
        free(old);
        ctx_finish(ctx);
        tmp_finish(&d);
        return;
    }
    size_t full = 128 + 1024 + (2u << 20) + 128 + 3 * 192;
    size_t limits[] = { 0, 100, 128, 4096, (1u << 20) - 1, (1u << 20) + 5000, (2u << 20) + 1,
                        full - 193, full - 1, full };
    for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
        void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = { limits[k], lim0.rlim_max };
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
        int stage;
        char errname[32];
        l8_status st = save_new(path, big, (int)(k & 1), &stage, errname);
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim0), 0);   /* restore before asserting */
        signal(SIGXFSZ, old_sig);
        char stray[256] = "";
        EXPECT(stray_files(&d, stray, sizeof stray) == 0, "limit %zu: '%s' left behind", limits[k], stray);
        if (limits[k] < full) {
            EXPECT(st == L8_ERR_IO, "limit %zu (stage %d): save -> %s, wanted L8_ERR_IO", limits[k],
                   stage, l8_status_name(st));
            EXPECT(!strcmp(errname, "EFBIG"), "limit %zu (stage %d): failed with %s, wanted EFBIG",
                   limits[k], stage, errname);
            size_t now_size;
            unsigned char *now = slurp(path, &now_size);
            EXPECT(now_size == old_size && !memcmp(now, old, old_size),
                   "limit %zu: the previous checkpoint changed", limits[k]);
            free(now);
        } else {
            EXPECT(st == L8_OK, "limit %zu: save -> %s", limits[k], l8_last_error_string());
            l8_ckpt_reader *rd = NULL;
            L8_CK(l8_ckpt_open(path, &rd));
            ck_assert_uint_eq(l8_ckpt_user_version(rd), 2);
            const void *p;
            size_t nb;
            L8_CK(l8_ckpt_section(rd, "big", &p, &nb));
            ck_assert(nb == (size_t)n * 4 && !memcmp(p, big_bytes, nb));
            l8_ckpt_close(rd);
        }
    }
    l8_tensor_destroy(big);
    free(big_bytes);
    free(old);
    ctx_finish(ctx);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_failed_rename_and_open)
{
    tmpdir d;
    tmp_init(&d);
    const char *dirpath = tmp_file(&d, "isdir.l8ckpt");
    const char *inner = tmp_file(&d, "isdir.l8ckpt/keep");
    const char *file = tmp_file(&d, "plain");
    ck_assert_int_eq(mkdir(dirpath, 0755), 0);
    spit(inner, "x", 1);
    /* path is a non-empty directory: everything works until the rename */
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(dirpath, KIND, 1, &w));
    L8_CK(l8_ckpt_write_section(w, "a", "abc", 3));
    L8_CK_ST(l8_ckpt_writer_commit(w), L8_ERR_IO);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, dirpath));
    struct stat sb;
    ck_assert_int_eq(stat(inner, &sb), 0);
    /* the directory of path does not exist, or is a file */
    char p[400];
    snprintf(p, sizeof p, "%s/nodir/x.l8ckpt", d.dir);
    L8_CK_ST(l8_ckpt_writer_open(p, KIND, 1, &w), L8_ERR_IO);
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOENT");
    ck_assert_ptr_null(w);
    spit(file, "y", 1);
    snprintf(p, sizeof p, "%s/x.l8ckpt", file);
    L8_CK_ST(l8_ckpt_writer_open(p, KIND, 1, &w), L8_ERR_IO);
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOTDIR");
    /* a directory without write permission (root writes anyway) */
    if (geteuid() != 0) {
        const char *ro = tmp_file(&d, "ro");
        ck_assert_int_eq(mkdir(ro, 0555), 0);
        snprintf(p, sizeof p, "%s/x.l8ckpt", ro);
        L8_CK_ST(l8_ckpt_writer_open(p, KIND, 1, &w), L8_ERR_IO);
        ck_assert_str_eq(l8_last_error()->foreign_name, "EACCES");
    } else {
        printf("checkpoint: unwritable-directory case skipped (running as root); "
               "RLIMIT_FSIZE and rename failures cover failed saves\n");
    }
    unlink(inner);
    tmp_finish(&d);
}
END_TEST

START_TEST(test_abort_and_replace)
{
    tmpdir d;
    tmp_init(&d);
    const char *path = tmp_file(&d, "r.l8ckpt");
    /* abort before any checkpoint exists: nothing at path, no temporary */
    l8_ckpt_writer *w = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 1, &w));
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s", l8_ckpt_writer_temp_path(w));
    ck_assert_ptr_nonnull(strstr(tmp, ".tmp."));
    ck_assert_int_eq(strncmp(tmp, path, strlen(path)), 0);
    L8_CK(l8_ckpt_write_section(w, "a", "first", 5));
    struct stat sb;
    ck_assert_int_eq(stat(tmp, &sb), 0);
    ck_assert_int_ne(stat(path, &sb), 0);
    l8_ckpt_writer_abort(w);
    ck_assert_int_ne(stat(tmp, &sb), 0);
    ck_assert_int_ne(stat(path, &sb), 0);

    /* commit, then replace, then abort a third: the second stays */
    for (int round = 0; round < 3; round++) {
        L8_CK(l8_ckpt_writer_open(path, KIND, (uint32_t)round, &w));
        char v[16];
        int n = snprintf(v, sizeof v, "round %d", round);
        L8_CK(l8_ckpt_write_section(w, "a", v, (size_t)n));
        if (round < 2) L8_CK(l8_ckpt_writer_commit(w));
        else l8_ckpt_writer_abort(w);
    }
    l8_ckpt_reader *rd = NULL;
    L8_CK(l8_ckpt_open(path, &rd));
    ck_assert_uint_eq(l8_ckpt_user_version(rd), 1);
    const void *p;
    size_t n;
    L8_CK(l8_ckpt_section(rd, "a", &p, &n));
    ck_assert(n == 7 && !memcmp(p, "round 1", 7));
    l8_ckpt_close(rd);
    /* two writers to one path at once get different temporaries */
    l8_ckpt_writer *w2 = NULL;
    L8_CK(l8_ckpt_writer_open(path, KIND, 5, &w));
    L8_CK(l8_ckpt_writer_open(path, KIND, 6, &w2));
    ck_assert_str_ne(l8_ckpt_writer_temp_path(w), l8_ckpt_writer_temp_path(w2));
    L8_CK(l8_ckpt_writer_commit(w2));
    l8_ckpt_writer_abort(w);
    L8_CK(l8_ckpt_open(path, &rd));
    ck_assert_uint_eq(l8_ckpt_user_version(rd), 6);
    l8_ckpt_close(rd);
    tmp_finish(&d);
}
END_TEST

Suite *l8_checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *basic = tcase_create("round_trip");
    tcase_add_test(basic, test_crc32c);
    tcase_add_test(basic, test_round_trip_sections);
    tcase_add_test(basic, test_round_trip_tensors);
    tcase_add_test(basic, test_format_matches_doc);
    TCase *damaged = tcase_create("damaged");
    tcase_add_test(damaged, test_truncated_every_length);
    tcase_add_test(damaged, test_corrupt_every_byte);
    tcase_add_test(damaged, test_bad_files);
    tcase_add_test(damaged, test_malformed_index);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_writer_arguments);
    tcase_add_test(errors, test_tensor_mismatch);
    tcase_add_test(errors, test_failed_save_keeps_previous);
    tcase_add_test(errors, test_failed_rename_and_open);
    tcase_add_test(errors, test_abort_and_replace);
    TCase *all[] = {basic, damaged, errors};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        tcase_set_tags(all[i], "host");
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    return s;
}
