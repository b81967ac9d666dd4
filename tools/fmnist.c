/* fmnist.c - Fashion-MNIST IDX files through a run-time zlib.
 *
 * zlib: libz.so.1 is opened once (pthread_once) and gzopen, gzread, gzwrite,
 * gzclose, gzerror resolved from it (gzbuffer when present: a bigger input
 * buffer reads the 26 MB training file faster). The handle stays open for
 * the life of the process. Nothing includes zlib.h: the few types and
 * constants used are restated below, as zlib's ABI fixes them.
 *
 * IDX (big-endian): u32 magic 0x0000_08_NN (08 = unsigned byte, NN = number
 * of dimensions), NN u32 dimensions, then the bytes in row-major order.
 *
 * Reading an IDX file validates as it goes and owns one buffer, which is
 * grown as data arrives (never sized from the header alone, so a corrupt
 * count cannot ask for gigabytes before the file proves it has them).
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tools/fmnist.h"

#define IDX_IMAGES 0x00000803u
#define IDX_LABELS 0x00000801u
#define Z_OK 0
#define Z_ERRNO (-1)
#define Z_BUF_ERROR (-5)
#define GZ_CHUNK ((size_t)1 << 26)        /* gzread takes an unsigned length */

typedef void *gz_file;                    /* zlib's gzFile */

static struct {
    void *handle;
    gz_file (*gzopen)(const char *, const char *);
    int (*gzread)(gz_file, void *, unsigned);
    int (*gzwrite)(gz_file, const void *, unsigned);
    int (*gzclose)(gz_file);
    const char *(*gzerror)(gz_file, int *);
    int (*gzbuffer)(gz_file, unsigned);   /* optional (zlib >= 1.2.4) */
    char why[256];                        /* why loading failed; "" when loaded */
} z;
static pthread_once_t z_once = PTHREAD_ONCE_INIT;

static void z_load(void)
{
    z.handle = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!z.handle) {
        const char *e = dlerror();
        snprintf(z.why, sizeof z.why, "%s", e ? e : "dlopen failed");
        return;
    }
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer. */
    *(void **)&z.gzopen = dlsym(z.handle, "gzopen");
    *(void **)&z.gzread = dlsym(z.handle, "gzread");
    *(void **)&z.gzwrite = dlsym(z.handle, "gzwrite");
    *(void **)&z.gzclose = dlsym(z.handle, "gzclose");
    *(void **)&z.gzerror = dlsym(z.handle, "gzerror");
    *(void **)&z.gzbuffer = dlsym(z.handle, "gzbuffer");
    if (!z.gzopen || !z.gzread || !z.gzwrite || !z.gzclose || !z.gzerror) {
        snprintf(z.why, sizeof z.why, "libz.so.1 lacks gzopen/gzread/gzwrite/gzclose/gzerror");
        dlclose(z.handle);
        z.handle = NULL;
    }
}

static l8_status z_ready(void)
{
    pthread_once(&z_once, z_load);
    if (z.handle) return L8_OK;
    return l8_error_set(L8_ERR_NO_DEVICE, 0, "", "dlopen", __FILE__, __LINE__,
                        "cannot load zlib to read gzip files: %s; install it (apt-get install zlib1g)",
                        z.why);
}

static l8_status io_fail(int e, const char *call, int line, const char *what, const char *path)
{
    return l8_error_set(L8_ERR_IO, e, e == ENOENT ? "ENOENT" : e == EACCES ? "EACCES" : "errno",
                        call, __FILE__, line, "%s '%s': %s", what, path, strerror(e));
}

#define BAD(path, ...) bad_file(__LINE__, path, __VA_ARGS__)
static l8_status bad_file(int line, const char *path, const char *fmt, ...) L8_PRINTF(3, 4);
static l8_status bad_file(int line, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return l8_error_set(L8_ERR_INVALID_ARG, 0, "", "fmnist_load", __FILE__, line,
                        "Fashion-MNIST file '%s' %s", path, msg);
}

/* Read up to n bytes; *got says how many. A short count is the end of the
 * data; zlib's error, if any, is returned as a status. */
static l8_status gz_read_full(gz_file f, const char *path, unsigned char *p, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        size_t want = n - *got < GZ_CHUNK ? n - *got : GZ_CHUNK;
        int k = z.gzread(f, p + *got, (unsigned)want);
        if (k < 0) {
            int zerr = 0;
            const char *m = z.gzerror(f, &zerr);
            if (zerr == Z_ERRNO) return io_fail(errno, "gzread", __LINE__, "cannot read", path);
            size_t plen = strlen(path);                 /* zlib prefixes "<path>: " */
            if (m && !strncmp(m, path, plen) && !strncmp(m + plen, ": ", 2)) m += plen + 2;
            return BAD(path, "is not valid gzip data: %s (zlib error %d)", m ? m : "?", zerr);
        }
        if (k == 0) break;
        *got += (size_t)k;
    }
    return L8_OK;
}

/* "the gzip stream ends early" when zlib saw a cut-off stream, else "". */
static const char *gz_cut(gz_file f)
{
    int zerr = 0;
    z.gzerror(f, &zerr);
    return zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Which file: "<dir>/<base>.gz", else "<dir>/<base>" if only that exists. */
static l8_status find_file(const char *dir, const char *base, char *path, size_t cap)
{
    struct stat sb;
    snprintf(path, cap, "%s/%s.gz", dir, base);
    if (stat(path, &sb) == 0) return L8_OK;
    int e = errno;
    char plain[4096];
    snprintf(plain, sizeof plain, "%s/%s", dir, base);
    if (e == ENOENT && stat(plain, &sb) == 0) {
        snprintf(path, cap, "%s", plain);
        return L8_OK;
    }
    if (e == ENOENT)
        return l8_error_set(L8_ERR_IO, ENOENT, "ENOENT", "stat", __FILE__, __LINE__,
                            "Fashion-MNIST file '%s': no such file; install the package "
                            "dataset-fashion-mnist (apt-get install dataset-fashion-mnist)", path);
    return io_fail(e, "stat", __LINE__, "cannot access Fashion-MNIST file", path);
}

/* Read one IDX file of `magic` whose dimensions after the first must be
 * `inner` (ndim - 1 of them). *n = first dimension; *data (malloc'ed, owned
 * by the caller on success) holds n * prod(inner) bytes. */
static l8_status read_idx(const char *path, uint32_t magic, const uint32_t *inner, int ninner,
                          size_t *n, unsigned char **data)
{
    const char *what = magic == IDX_IMAGES ? "images" : "labels";
    l8_status ret = L8_OK;
    unsigned char *buf = NULL;
    errno = 0;
    gz_file f = z.gzopen(path, "rb");
    if (!f) {
        int e = errno ? errno : ENOMEM;
        return io_fail(e, "gzopen", __LINE__, "cannot open Fashion-MNIST file", path);
    }
    if (z.gzbuffer) (void)z.gzbuffer(f, 1u << 18);
    unsigned char head[16];
    size_t hlen = 8 + 4 * (size_t)ninner, got = 0;
    L8_TRY(ret, gz_read_full(f, path, head, hlen, &got), out);
    if (got >= 4 && be32(head) != magic) {
        uint32_t m = be32(head);
        char why[96];
        if (m >> 16) snprintf(why, sizeof why, "it is not a plain or gzip-compressed IDX file");
        else if ((m >> 8) != 0x08) snprintf(why, sizeof why, "its elements are of IDX type 0x%02x, not unsigned bytes", (m >> 8) & 0xFF);
        else if (m == IDX_IMAGES || m == IDX_LABELS) snprintf(why, sizeof why, "it holds %s", m == IDX_IMAGES ? "images" : "labels");
        else snprintf(why, sizeof why, "it has %u dimensions, not %d", m & 0xFF, ninner + 1);
        ret = BAD(path, "has IDX magic 0x%08x where a file of %s has 0x%08x: %s", m, what, magic, why);
        goto out;
    }
    if (got < hlen) {
        ret = BAD(path, "is truncated: %zu bytes, shorter than the %zu-byte IDX header%s", got, hlen, gz_cut(f));
        goto out;
    }
    uint64_t count = be32(head + 4), per = 1;
    for (int d = 0; d < ninner; d++) {
        uint32_t v = be32(head + 8 + 4 * d);
        if (v != inner[d]) {
            ret = ninner == 2
                ? BAD(path, "has %" PRIu32 "x%" PRIu32 " images; Fashion-MNIST images are %ux%u",
                      be32(head + 8), be32(head + 12), inner[0], inner[1])
                : BAD(path, "has dimension %d of %" PRIu32 ", expected %u", d + 1, v, inner[d]);
            goto out;
        }
        per *= v;
    }
    if (count == 0 || count > FMNIST_MAX_N) {
        ret = BAD(path, "announces %" PRIu64 " %s; expected 1 to %zu", count, what, FMNIST_MAX_N);
        goto out;
    }
    /* Grow as the data arrives. */
    size_t total = (size_t)(count * per), have = 0, cap = 0;
    while (have < total) {
        size_t ncap = cap ? cap * 2 : ((size_t)1 << 20);
        if (ncap > total) ncap = total;
        unsigned char *nb = realloc(buf, ncap);
        if (!nb) {
            ret = l8_error_set(L8_ERR_OOM, 0, "", "realloc", __FILE__, __LINE__,
                               "no host memory for the %zu bytes of '%s'", total, path);
            goto out;
        }
        buf = nb;
        cap = ncap;
        L8_TRY(ret, gz_read_full(f, path, buf + have, cap - have, &got), out);
        have += got;
        if (have < cap) {
            ret = BAD(path, "is truncated: its header announces %" PRIu64 " %s (%zu bytes of data),"
                      " it holds %zu bytes%s", count, what, total, have, gz_cut(f));
            goto out;
        }
    }
    /* Exact length: nothing after the data (this read also makes zlib check
     * the gzip trailer's CRC and length). */
    unsigned char extra[64];
    L8_TRY(ret, gz_read_full(f, path, extra, sizeof extra, &got), out);
    if (got) {
        ret = BAD(path, "has %s%zu extra byte%s after its %" PRIu64 " %s", got == sizeof extra ? "at least " : "",
                  got, got == 1 ? "" : "s", count, what);
        goto out;
    }
    if (gz_cut(f)[0]) {
        ret = BAD(path, "is truncated%s", gz_cut(f));
        goto out;
    }
    *n = (size_t)count;
    *data = buf;
    buf = NULL;
out:
    z.gzclose(f);
    free(buf);
    return ret;
}

l8_status fmnist_load(const char *dir, const char *split, fmnist_data *out)
{
    L8_ARG(out != NULL);
    if (!split || (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0))
        return L8_FAIL(L8_ERR_INVALID_ARG, "fmnist_load: split '%s' is neither \"train\" nor \"t10k\"",
                       split ? split : "(null)");
    if (!dir) dir = FMNIST_DIR;
    if (strlen(dir) > 3900) return L8_FAIL(L8_ERR_INVALID_ARG, "fmnist_load: directory name too long");
    L8_CHECK(z_ready());
    char ipath[4096], lpath[4096], base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    L8_CHECK(find_file(dir, base, ipath, sizeof ipath));
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    L8_CHECK(find_file(dir, base, lpath, sizeof lpath));

    static const uint32_t image_dims[2] = { FMNIST_ROWS, FMNIST_COLS };
    l8_status ret = L8_OK;
    unsigned char *images = NULL, *labels = NULL;
    size_t ni = 0, nl = 0;
    L8_TRY(ret, read_idx(ipath, IDX_IMAGES, image_dims, 2, &ni, &images), fail);
    L8_TRY(ret, read_idx(lpath, IDX_LABELS, NULL, 0, &nl, &labels), fail);
    if (ni != nl) {
        ret = L8_FAIL(L8_ERR_INVALID_ARG, "Fashion-MNIST files disagree: '%s' holds %zu images, '%s'"
                      " holds %zu labels", ipath, ni, lpath, nl);
        goto fail;
    }
    for (size_t i = 0; i < nl; i++)
        if (labels[i] >= FMNIST_CLASSES) {
            ret = BAD(lpath, "has label %u at index %zu; Fashion-MNIST has classes 0..9", labels[i], i);
            goto fail;
        }
    out->n = ni;
    out->images = images;
    out->labels = labels;
    return L8_OK;
fail:
    free(images);
    free(labels);
    return ret;
}

void fmnist_free(fmnist_data *ds)
{
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

l8_status fmnist_batch(const fmnist_data *ds, const int64_t *idx, size_t count, float *x, int32_t *y)
{
    const char *fn = "fmnist_batch";
    if (!ds || !ds->n || !ds->images || !ds->labels)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the data set is NULL or empty", fn);
    if (count && (!idx || !x)) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: idx or x is NULL", fn);
    for (size_t b = 0; b < count; b++)
        if (idx[b] < 0 || (uint64_t)idx[b] >= ds->n)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s: idx[%zu] = %" PRId64 " is outside [0, %zu)", fn, b,
                           idx[b], ds->n);
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - FMNIST_MEAN) / FMNIST_STD;
    for (size_t b = 0; b < count; b++) {
        const uint8_t *img = ds->images + (size_t)idx[b] * FMNIST_PIXELS;   /* (28, 28) u8 */
        float *dst = x + b * FMNIST_PIXELS;                               /* (28, 28) f32 */
        for (int p = 0; p < FMNIST_PIXELS; p++) dst[p] = lut[img[p]];
        if (y) y[b] = ds->labels[idx[b]];
    }
    return L8_OK;
}

const char *fmnist_class_name(int label)
{
    static const char *const names[FMNIST_CLASSES] = {
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    };
    return label >= 0 && label < FMNIST_CLASSES ? names[label] : "?";
}

l8_status fmnist_gz_write(const char *path, const void *bytes, size_t n)
{
    L8_ARG(path != NULL && (bytes != NULL || n == 0));
    L8_CHECK(z_ready());
    errno = 0;
    gz_file f = z.gzopen(path, "wb");
    if (!f) return io_fail(errno ? errno : ENOMEM, "gzopen", __LINE__, "cannot create gzip file", path);
    const unsigned char *p = bytes;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < GZ_CHUNK ? n - done : GZ_CHUNK;
        int k = z.gzwrite(f, p + done, (unsigned)want);
        if (k <= 0) {
            int zerr = 0, e = errno;
            const char *m = z.gzerror(f, &zerr);
            z.gzclose(f);
            if (zerr == Z_ERRNO) return io_fail(e, "gzwrite", __LINE__, "cannot write gzip file", path);
            return l8_error_set(L8_ERR_IO, zerr, "", "gzwrite", __FILE__, __LINE__,
                                "cannot write gzip file '%s': %s", path, m ? m : "?");
        }
        done += (size_t)k;
    }
    int rc = z.gzclose(f);
    if (rc != Z_OK)
        return l8_error_set(L8_ERR_IO, rc, "", "gzclose", __FILE__, __LINE__,
                            "cannot finish gzip file '%s' (zlib error %d)", path, rc);
    return L8_OK;
}
