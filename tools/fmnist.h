/* fmnist.h - the Fashion-MNIST data set for lean8-train.
 *
 * Reads the four IDX files of the Debian package dataset-fashion-mnist
 * (/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz):
 * 60000 training and 10000 test images of 28x28 unsigned bytes, labels 0..9.
 *
 * gzip is read through zlib opened at run time (dlopen "libz.so.1", present
 * on every Debian and Ubuntu system), so building needs no zlib headers and
 * the library gains no link dependency.
 *
 * Which files: "<dir>/<split>-images-idx3-ubyte.gz" and
 * "<dir>/<split>-labels-idx1-ubyte.gz"; when a .gz name does not exist, the
 * same name without ".gz" is tried (data sets gunzipped by hand). Either
 * file may hold gzip or plain IDX bytes: zlib reads a file without the gzip
 * magic as is ("transparent" mode), and the IDX checks below then decide.
 * So a file that is neither gzip nor IDX is refused for its bad IDX magic.
 *
 * Everything is validated before load returns: IDX magic (0x00000803 for
 * images, 0x00000801 for labels), dimensions (28x28), 1 <= n <= 2^24, equal
 * counts in the two files, the exact length (no missing and no extra
 * bytes), labels 0..9, and the gzip stream itself (zlib checks its CRC).
 *
 * Errors (messages name the file):
 *   L8_ERR_IO           missing file (with the package to install), or a
 *                       read error; errno in the last error
 *   L8_ERR_INVALID_ARG  bad arguments, or a malformed file: bad magic, wrong
 *                       dimensions, truncated, extra bytes, count mismatch,
 *                       label out of range, corrupt gzip data
 *   L8_ERR_NO_DEVICE    libz.so.1 cannot be loaded ("library not loadable")
 *   L8_ERR_OOM          host memory
 * A failed call leaves its outputs untouched and allocates nothing.
 */
#ifndef FMNIST_H
#define FMNIST_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define FMNIST_ROWS 28
#define FMNIST_COLS 28
#define FMNIST_PIXELS (FMNIST_ROWS * FMNIST_COLS)   /* 784 */
#define FMNIST_CLASSES 10
#define FMNIST_MAX_N ((size_t)1 << 24)
/* Mean and standard deviation of the training pixels scaled to [0, 1]. */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

/* A loaded split. images: n * 784 bytes, image i at images + i * 784,
 * row-major 28x28, 0 = background; labels: n bytes, each 0..9. Owned by the
 * struct; release with fmnist_free. */
typedef struct fmnist_data {
    size_t n;
    uint8_t *images;
    uint8_t *labels;
} fmnist_data;

/* Load split "train" or "t10k" from dir (NULL: FMNIST_DIR) into *out,
 * which is overwritten (not freed) on success and untouched on failure.
 * Blocks (the training set is about 26 MB of gzip, 47 MB inflated).
 * Thread-safe. Errors: see the top of this file. */
L8_NODISCARD l8_status fmnist_load(const char *dir, const char *split, fmnist_data *out);

/* Free what load allocated and zero *ds. NULL or a zeroed struct: no-op. */
void fmnist_free(fmnist_data *ds);

/* A batch for training: for b < count, image idx[b] normalized as
 * ((pixel / 255) - FMNIST_MEAN) / FMNIST_STD into
 * x[b * 784 .. (b + 1) * 784) (f32, host memory, row-major), and its label
 * into y[b] (y may be NULL). Indices may repeat. x and y are written only
 * when every index is valid.
 * Errors: L8_ERR_INVALID_ARG (ds empty, x NULL with count > 0, an index
 * outside [0, n): the message gives its position). */
L8_NODISCARD l8_status fmnist_batch(const fmnist_data *ds, const int64_t *idx, size_t count,
                                        float *x, int32_t *y);

/* "T-shirt/top", "Trouser", ... "Ankle boot"; "?" outside 0..9. */
const char *fmnist_class_name(int label);

/* Write n bytes to path as a gzip file (through the same run-time zlib):
 * for tests and for making small data sets. Replaces path.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_IO, L8_ERR_NO_DEVICE (no libz). */
L8_NODISCARD l8_status fmnist_gz_write(const char *path, const void *bytes, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FMNIST_H */
