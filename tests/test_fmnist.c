/* test_fmnist.c - the Fashion-MNIST loader on small synthetic files, every
 * malformation it must refuse, and the real data set when it is installed.
 *
 * Synthetic IDX files are built byte by byte (big-endian header, then data)
 * and gzipped through the loader's own run-time zlib (fmnist_gz_write)
 * into a fresh mkdtemp directory per test.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/tests.h"
#include "tools/fmnist.h"

#define EXPECT(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define PIX FMNIST_PIXELS

typedef struct dir {
    char path[256];
} dir;

static void dir_init(dir *d)
{
    const char *base = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/l8fmnist.XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(d->path) != NULL, "mkdtemp: %s", strerror(errno));
}

static const char *const k_files[] = {
    "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
};

static void dir_clear(dir *d)
{
    char p[400];
    for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", d->path, k_files[i]);
        unlink(p);
    }
}

static void dir_finish(dir *d)
{
    dir_clear(d);
    ck_assert_msg(rmdir(d->path) == 0, "rmdir %s: %s", d->path, strerror(errno));
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX file image in memory. */
typedef struct idx {
    unsigned char *b;
    size_t n;
} idx;

/* magic, ndims dims, then data bytes (random when data is NULL). */
static idx idx_make(uint32_t magic, int ndims, const uint32_t *dims, const unsigned char *data,
                    size_t data_n)
{
    idx x;
    x.n = 4 + 4 * (size_t)ndims + data_n;
    x.b = malloc(x.n);
    ck_assert_ptr_nonnull(x.b);
    put_be32(x.b, magic);
    for (int i = 0; i < ndims; i++) put_be32(x.b + 4 + 4 * i, dims[i]);
    if (data_n) memcpy(x.b + 4 + 4 * ndims, data, data_n);
    return x;
}

static void write_gz(const dir *d, const char *name, const void *b, size_t n)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", d->path, name);
    L8_CK(fmnist_gz_write(p, b, n));
}

static void write_plain(const dir *d, const char *name, const void *b, size_t n)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", d->path, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* A consistent synthetic split of n images: pixels and labels random. */
typedef struct synth {
    size_t n;
    unsigned char *pixels, *labels;
    idx images_file, labels_file;
} synth;

static synth synth_make(size_t n, uint64_t salt)
{
    l8_rng r;
    l8_rng_init(&r, salt);
    synth s;
    s.n = n;
    s.pixels = malloc(n * PIX);
    s.labels = malloc(n);
    ck_assert(s.pixels && s.labels);
    for (size_t i = 0; i < n * PIX; i++) s.pixels[i] = (unsigned char)l8_rng_below(&r, 256);
    for (size_t i = 0; i < n; i++) s.labels[i] = (unsigned char)l8_rng_below(&r, 10);
    uint32_t idims[3] = { (uint32_t)n, 28, 28 }, ldims[1] = { (uint32_t)n };
    s.images_file = idx_make(0x00000803, 3, idims, s.pixels, n * PIX);
    s.labels_file = idx_make(0x00000801, 1, ldims, s.labels, n);
    return s;
}

static void synth_free(synth *s)
{
    free(s->pixels);
    free(s->labels);
    free(s->images_file.b);
    free(s->labels_file.b);
}

static void check_loaded(const fmnist_data *ds, const synth *s)
{
    ck_assert_uint_eq(ds->n, s->n);
    ck_assert(!memcmp(ds->images, s->pixels, s->n * PIX));
    ck_assert(!memcmp(ds->labels, s->labels, s->n));
}

START_TEST(test_load_synthetic)
{
    dir d;
    dir_init(&d);
    synth s = synth_make(37, 1);
    write_gz(&d, "train-images-idx3-ubyte.gz", s.images_file.b, s.images_file.n);
    write_gz(&d, "train-labels-idx1-ubyte.gz", s.labels_file.b, s.labels_file.n);
    fmnist_data ds;
    memset(&ds, 0, sizeof ds);
    L8_CK(fmnist_load(d.path, "train", &ds));
    check_loaded(&ds, &s);

    /* a batch: repeats allowed, values exactly the documented formula */
    l8_rng r;
    l8_rng_init(&r, 2);
    enum { B = 50 };
    int64_t ix[B];
    for (int b = 0; b < B; b++) ix[b] = (int64_t)l8_rng_below(&r, s.n);
    ix[0] = 0;
    ix[1] = (int64_t)s.n - 1;
    ix[2] = ix[3];
    float *x = malloc(sizeof(float) * B * PIX);
    int32_t y[B];
    L8_CK(fmnist_batch(&ds, ix, B, x, y));
    for (int b = 0; b < B; b++) {
        EXPECT(y[b] == s.labels[ix[b]], "label %d", b);
        for (int p = 0; p < PIX; p++) {
            float want = ((float)s.pixels[(size_t)ix[b] * PIX + p] / 255.0f - 0.2860f) / 0.3530f;
            EXPECT(x[(size_t)b * PIX + p] == want, "x[%d][%d] = %g, wanted %g", b, p,
                   (double)x[(size_t)b * PIX + p], (double)want);
        }
    }
    L8_CK(fmnist_batch(&ds, ix, B, x, NULL));             /* y optional */
    L8_CK(fmnist_batch(&ds, NULL, 0, NULL, NULL));        /* empty batch */

    /* bad indices: refused, outputs untouched */
    for (int b = 0; b < B * PIX; b++) x[b] = -1234.5f;
    for (int b = 0; b < B; b++) y[b] = -7;
    ix[B - 1] = (int64_t)s.n;
    L8_CK_ST(fmnist_batch(&ds, ix, B, x, y), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "idx[49] = 37"));
    ix[B - 1] = -1;
    L8_CK_ST(fmnist_batch(&ds, ix, B, x, y), L8_ERR_INVALID_ARG);
    for (int b = 0; b < B * PIX; b++) EXPECT(x[b] == -1234.5f, "x[%d] written", b);
    for (int b = 0; b < B; b++) EXPECT(y[b] == -7, "y[%d] written", b);
    L8_CK_ST(fmnist_batch(&ds, ix, B, NULL, y), L8_ERR_INVALID_ARG);
    L8_CK_ST(fmnist_batch(NULL, ix, B, x, y), L8_ERR_INVALID_ARG);
    free(x);
    fmnist_free(&ds);
    ck_assert(ds.n == 0 && ds.images == NULL && ds.labels == NULL);
    fmnist_free(&ds);
    fmnist_free(NULL);
    L8_CK_ST(fmnist_batch(&ds, NULL, 0, NULL, NULL), L8_ERR_INVALID_ARG);

    /* plain IDX bytes under the .gz name are read as they are (zlib's transparent mode) */
    write_plain(&d, "train-images-idx3-ubyte.gz", s.images_file.b, s.images_file.n);
    L8_CK(fmnist_load(d.path, "train", &ds));
    check_loaded(&ds, &s);
    fmnist_free(&ds);
    /* a gunzipped data set: only the names without .gz exist */
    dir_clear(&d);
    write_plain(&d, "train-images-idx3-ubyte", s.images_file.b, s.images_file.n);
    write_gz(&d, "train-labels-idx1-ubyte", s.labels_file.b, s.labels_file.n);
    L8_CK(fmnist_load(d.path, "train", &ds));
    check_loaded(&ds, &s);
    fmnist_free(&ds);

    ck_assert_str_eq(fmnist_class_name(0), "T-shirt/top");
    ck_assert_str_eq(fmnist_class_name(9), "Ankle boot");
    ck_assert_str_eq(fmnist_class_name(10), "?");
    ck_assert_str_eq(fmnist_class_name(-1), "?");
    synth_free(&s);
    dir_finish(&d);
}
END_TEST

START_TEST(test_missing_and_arguments)
{
    dir d;
    dir_init(&d);
    fmnist_data ds = { 5, (uint8_t *)&ds, (uint8_t *)&ds };     /* must stay untouched */
    L8_CK_ST(fmnist_load(d.path, "train", &ds), L8_ERR_IO);
    const char *msg = l8_last_error()->message;
    ck_assert_str_eq(l8_last_error()->foreign_name, "ENOENT");
    ck_assert_ptr_nonnull(strstr(msg, "train-images-idx3-ubyte.gz"));
    ck_assert_ptr_nonnull(strstr(msg, "apt-get install dataset-fashion-mnist"));
    /* images present, labels missing: the message names the labels file */
    synth s = synth_make(3, 3);
    write_gz(&d, "t10k-images-idx3-ubyte.gz", s.images_file.b, s.images_file.n);
    L8_CK_ST(fmnist_load(d.path, "t10k", &ds), L8_ERR_IO);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "t10k-labels-idx1-ubyte.gz"));
    ck_assert(ds.n == 5 && ds.images == (uint8_t *)&ds);
    L8_CK_ST(fmnist_load(d.path, "valid", &ds), L8_ERR_INVALID_ARG);
    L8_CK_ST(fmnist_load(d.path, NULL, &ds), L8_ERR_INVALID_ARG);
    L8_CK_ST(fmnist_load(d.path, "train", NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(fmnist_gz_write(NULL, "x", 1), L8_ERR_INVALID_ARG);
    char p[400];
    snprintf(p, sizeof p, "%s/no/such/dir/x.gz", d.path);
    L8_CK_ST(fmnist_gz_write(p, "x", 1), L8_ERR_IO);
    synth_free(&s);
    dir_finish(&d);
}
END_TEST

/* Write the pair, expect L8_ERR_INVALID_ARG naming `file` and saying `msg`. */
static void expect_malformed(const dir *d, const idx *images, const idx *labels, int plain_images,
                             const char *file, const char *msg, const char *what)
{
    if (plain_images) write_plain(d, "train-images-idx3-ubyte.gz", images->b, images->n);
    else write_gz(d, "train-images-idx3-ubyte.gz", images->b, images->n);
    write_gz(d, "train-labels-idx1-ubyte.gz", labels->b, labels->n);
    fmnist_data ds = { 0, NULL, NULL };
    l8_status st = fmnist_load(d->path, "train", &ds);
    EXPECT(st == L8_ERR_INVALID_ARG, "%s: load -> %s (%s)", what, l8_status_name(st),
           st ? l8_last_error_string() : "accepted");
    const char *m = l8_last_error()->message;
    EXPECT(strstr(m, file) && strstr(m, msg), "%s: message '%s' lacks '%s' or '%s'", what, m, file, msg);
    EXPECT(ds.n == 0 && !ds.images && !ds.labels, "%s: output written", what);
}

START_TEST(test_malformed)
{
    dir d;
    dir_init(&d);
    synth s = synth_make(10, 4);
    const char *IMG = "train-images-idx3-ubyte.gz", *LAB = "train-labels-idx1-ubyte.gz";
    idx x;
    uint32_t dims[3];

    dims[0] = 10; dims[1] = 28; dims[2] = 28;
    x = idx_make(0x00000801, 3, dims, s.pixels, 10 * PIX);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "IDX magic 0x00000801 where a file of images has 0x00000803: it holds labels", "labels magic on images");
    free(x.b);
    x = idx_make(0x00000803, 1, dims, s.labels, 10);
    expect_malformed(&d, &s.images_file, &x, 0, LAB, "it holds images", "images magic on labels");
    free(x.b);
    x = idx_make(0x00000C03, 3, dims, s.pixels, 10 * PIX);             /* int32 data */
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "IDX type 0x0c, not unsigned bytes", "int32 magic");
    free(x.b);
    x = idx_make(0x00000802, 2, dims, s.pixels, 10 * 28);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "it has 2 dimensions, not 3", "two dims");
    free(x.b);
    dims[1] = 27;
    x = idx_make(0x00000803, 3, dims, s.pixels, 10 * 27 * 28);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "27x28 images", "wrong dims");
    free(x.b);
    dims[1] = 28;
    dims[0] = 0;
    x = idx_make(0x00000803, 3, dims, NULL, 0);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "announces 0 images", "zero images");
    free(x.b);
    dims[0] = 0xFFFFFFFFu;                                               /* a huge count */
    x = idx_make(0x00000803, 3, dims, s.pixels, 10 * PIX);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "announces 4294967295", "huge count");
    free(x.b);
    dims[0] = 11;                                                        /* says 11, holds 10 */
    x = idx_make(0x00000803, 3, dims, s.pixels, 10 * PIX);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "is truncated", "truncated data");
    free(x.b);
    dims[0] = 10;
    x = idx_make(0x00000803, 3, dims, s.pixels, 10 * PIX - 1);
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "it holds 7839 bytes", "one byte short");
    free(x.b);
    x = idx_make(0x00000803, 3, dims, s.pixels, 10 * PIX);
    x.b = realloc(x.b, x.n + 1);
    x.b[x.n++] = 0;
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "has 1 extra byte after its 10 images", "extra byte");
    free(x.b);
    x = idx_make(0x00000803, 0, dims, NULL, 0);
    x.n = 3;
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "shorter than the 16-byte IDX header", "3 bytes");
    x.n = 0;
    expect_malformed(&d, &x, &s.labels_file, 0, IMG, "0 bytes, shorter", "empty file");
    free(x.b);

    /* labels: count mismatch, a label of 10 */
    dims[0] = 9;
    x = idx_make(0x00000801, 1, dims, s.labels, 9);
    expect_malformed(&d, &s.images_file, &x, 0, LAB, "holds 10 images", "count mismatch");
    free(x.b);
    unsigned char bad_labels[10];
    memcpy(bad_labels, s.labels, 10);
    bad_labels[6] = 10;
    dims[0] = 10;
    x = idx_make(0x00000801, 1, dims, bad_labels, 10);
    expect_malformed(&d, &s.images_file, &x, 0, LAB, "label 10 at index 6", "label 10");
    free(x.b);

    /* neither gzip nor IDX */
    unsigned char junk[2000];
    l8_rng r;
    l8_rng_init(&r, 5);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(0x40 + l8_rng_below(&r, 64));
    x.b = junk;
    x.n = sizeof junk;
    expect_malformed(&d, &x, &s.labels_file, 1, IMG, "not a plain or gzip-compressed IDX file", "junk");

    /* damaged gzip: cut anywhere, or a flipped byte */
    char gz[400];
    snprintf(gz, sizeof gz, "%s/%s", d.path, IMG);
    L8_CK(fmnist_gz_write(gz, s.images_file.b, s.images_file.n));
    FILE *f = fopen(gz, "rb");
    unsigned char comp[16384];
    size_t cn = fread(comp, 1, sizeof comp, f);
    fclose(f);
    ck_assert(cn > 100 && cn < sizeof comp);
    size_t cuts[] = { cn - 1, cn - 4, cn - 8, cn - 9, cn / 2, 30, 11 };
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        x.b = comp;
        x.n = cuts[k];
        char what[64];
        snprintf(what, sizeof what, "gzip cut to %zu of %zu bytes", cuts[k], cn);
        expect_malformed(&d, &x, &s.labels_file, 1, IMG, "", what);
    }
    int flips = l8_test_quick() ? 10 : 60;
    for (int k = 0; k < flips; k++) {
        size_t at = 10 + l8_rng_below(&r, cn - 10);                     /* past the gzip header */
        unsigned char m = (unsigned char)(1 + l8_rng_below(&r, 255));
        comp[at] ^= m;
        x.b = comp;
        x.n = cn;
        char what[64];
        snprintf(what, sizeof what, "gzip byte %zu of %zu xor 0x%02x", at, cn, m);
        expect_malformed(&d, &x, &s.labels_file, 1, IMG, "", what);
        comp[at] ^= m;
    }
    synth_free(&s);
    dir_finish(&d);
}
END_TEST

START_TEST(test_real_dataset)
{
    char p[512];
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", FMNIST_DIR);
    struct stat sb;
    if (stat(p, &sb) != 0) {
        printf("fmnist: real data set SKIPPED: %s not found (apt-get install dataset-fashion-mnist)\n", p);
        return;
    }
    const char *splits[2] = { "t10k", "train" };
    const size_t want_n[2] = { 10000, 60000 };
    for (int k = 0; k < 2; k++) {
        fmnist_data ds;
        L8_CK(fmnist_load(NULL, splits[k], &ds));
        ck_assert_uint_eq(ds.n, want_n[k]);
        size_t hist[FMNIST_CLASSES] = { 0 };
        for (size_t i = 0; i < ds.n; i++) hist[ds.labels[i]]++;
        for (int c = 0; c < FMNIST_CLASSES; c++)
            EXPECT(hist[c] == want_n[k] / 10, "%s: class %d has %zu images", splits[k], c, hist[c]);
        if (k == 1) {
            /* the normalization constants are the training set's statistics */
            double sum = 0, sq = 0, m = (double)ds.n * PIX;
            for (size_t i = 0; i < ds.n * PIX; i++) {
                double v = ds.images[i] / 255.0;
                sum += v;
                sq += v * v;
            }
            double mean = sum / m, sd = sqrt(sq / m - mean * mean);
            EXPECT(fabs(mean - FMNIST_MEAN) < 5e-4 && fabs(sd - FMNIST_STD) < 5e-4,
                   "train pixels: mean %.4f std %.4f", mean, sd);
        }
        fmnist_free(&ds);
    }
}
END_TEST

Suite *l8_fmnist_suite(void)
{
    Suite *s = suite_create("fmnist");
    TCase *tc = tcase_create("fmnist");
    tcase_add_test(tc, test_load_synthetic);
    tcase_add_test(tc, test_missing_and_arguments);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_real_dataset);
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}
