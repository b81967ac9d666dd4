/* checkpoint.h - the checkpoint container: one atomic file of named sections.
 *
 * The runtime owns the container (header, index, checksums, the atomic
 * replace of the file); each component writes and reads its own sections
 * ("params.master", "adam.m", "recipe.amax_history", ...). The bytes are
 * documented in docs/checkpoint-format.md.
 *
 * Writing. l8_ckpt_writer_open creates "<path>.tmp.<pid>.<seq>" in the
 * directory of path; sections are streamed into it; l8_ckpt_writer_commit
 * writes the index and the header, fsyncs the file, renames it over path and
 * fsyncs the directory. Until that rename, path is never touched: a save
 * that fails anywhere (a full disk, a dead device, a crash) leaves the
 * previous checkpoint at path exactly as it was. A writer is used by one
 * thread at a time.
 *
 * Reading. l8_ckpt_open reads the whole file into host memory and validates
 * all of it before returning: magic, format version, header checksum, file
 * length, index bounds and alignment, every section inside the file and no
 * two overlapping, names well formed and unique, tensor records consistent,
 * and the CRC-32C of every byte after the header. Nothing is read lazily, so
 * a reader that opened is immutable: any number of threads may read from it
 * at once. Memory: the file's size in host memory until l8_ckpt_close.
 *
 * Errors, one rule for the whole container:
 *   L8_ERR_IO           a system call failed (open, read, write, fsync,
 *                       rename...); errno and its name are in the last error.
 *   L8_ERR_INVALID_ARG  the caller's arguments, and also a file that is not
 *                       a valid checkpoint: not one at all, truncated,
 *                       corrupt (checksum), malformed, of another kind or
 *                       user version (l8_ckpt_expect), or without the section
 *                       asked for, or whose section does not match the
 *                       destination (size, dtype, shape). The message names
 *                       the file, the section and what was expected and found.
 *   L8_ERR_UNSUPPORTED  a well-formed header of a newer format version.
 *   L8_ERR_STATE        a writer used after one of its writes failed.
 *   L8_ERR_OOM          host memory for the file or a bounce buffer.
 *   L8_ERR_CUDA         copying a tensor to or from the device.
 * A failed call changes nothing the caller can see: a failed read leaves the
 * destination untouched, a failed open returns no reader.
 */
#ifndef L8_CHECKPOINT_H
#define L8_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define L8_CKPT_NAME_MAX 127      /* section name: 1..127 printable ASCII bytes (0x20..0x7E) */
#define L8_CKPT_KIND_MAX 63       /* kind string: 1..63 printable ASCII bytes */
#define L8_CKPT_ALIGN 64          /* every section starts at a multiple of 64 in the file,
                                     and l8_ckpt_section pointers are 64-B aligned */

typedef struct l8_ckpt_writer l8_ckpt_writer;
typedef struct l8_ckpt_reader l8_ckpt_reader;

/* ---- writing ---- */

/* Start a checkpoint that will replace `path` on commit. `kind` names what
 * the checkpoint holds (e.g. "lean8-train/mlp-784-256-10") and user_version
 * its layout version; a loader refuses a checkpoint of another kind or
 * version with l8_ckpt_expect. Creates the temporary file at once (so an
 * unwritable directory fails here). The caller owns *out and ends it with
 * exactly one of commit or abort.
 * Errors: L8_ERR_INVALID_ARG (NULL, empty or over-long path, kind not 1..63
 * printable bytes), L8_ERR_IO (cannot create the temporary file), L8_ERR_OOM. */
L8_NODISCARD l8_status l8_ckpt_writer_open(const char *path, const char *kind,
                                            uint32_t user_version, l8_ckpt_writer **out);

/* Append a section of n raw bytes (n may be 0; bytes may be NULL only then).
 * The bytes are copied before the call returns.
 * Errors: L8_ERR_INVALID_ARG (name not 1..127 printable bytes, or already
 * written to this checkpoint: nothing is written), L8_ERR_IO (the write
 * failed: the writer is then failed, see L8_ERR_STATE), L8_ERR_STATE (an
 * earlier write of this writer failed; only commit or abort are left). */
L8_NODISCARD l8_status l8_ckpt_write_section(l8_ckpt_writer *w, const char *name,
                                              const void *bytes, size_t n);

/* Append a tensor section: its dtype, shape and elements in row-major order
 * (any strides; a non-contiguous tensor is first made contiguous on the
 * device). The elements are copied to the host in chunks through a bounce
 * buffer on the compute stream of the tensor's context, and the call waits
 * for that stream: work that writes the tensor on another stream must be
 * ordered before it with an event. FP8 scaling metadata is not saved; its
 * owner saves it in a section of its own.
 * Errors: as l8_ckpt_write_section, plus L8_ERR_STATE (storage not on the
 * device), L8_ERR_OOM, L8_ERR_CUDA (the writer is then failed). */
L8_NODISCARD l8_status l8_ckpt_write_tensor(l8_ckpt_writer *w, const char *name,
                                             const l8_tensor *t);

/* Finish: index, header and checksums, fsync, rename over path, fsync of the
 * directory. Always consumes w (the caller must not use it afterwards). On
 * any failure the temporary file is removed and path is untouched, except for
 * the directory fsync, which comes after the rename: its L8_ERR_IO means the
 * new checkpoint is in place but may not survive a power loss.
 * Errors: L8_ERR_INVALID_ARG (w NULL), L8_ERR_STATE (an earlier write failed;
 * the message repeats why), L8_ERR_IO. */
L8_NODISCARD l8_status l8_ckpt_writer_commit(l8_ckpt_writer *w);

/* Give up: remove the temporary file and free w. path is untouched. NULL: no-op. */
void l8_ckpt_writer_abort(l8_ckpt_writer *w);

/* The temporary file the writer writes to (library-owned, valid until commit
 * or abort). For tests and messages. */
const char *l8_ckpt_writer_temp_path(const l8_ckpt_writer *w);

/* ---- reading ---- */

/* Read and validate the checkpoint at path (see the top of this file). The
 * caller owns *out (NULL on failure) and closes it with l8_ckpt_close.
 * Errors: L8_ERR_INVALID_ARG (NULL; not a checkpoint, truncated, corrupt,
 * malformed), L8_ERR_UNSUPPORTED (newer format version), L8_ERR_IO, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_ckpt_open(const char *path, l8_ckpt_reader **out);
void l8_ckpt_close(l8_ckpt_reader *r);                 /* NULL: no-op */

const char *l8_ckpt_kind(const l8_ckpt_reader *r);     /* the writer's kind; "" for NULL */
uint32_t l8_ckpt_user_version(const l8_ckpt_reader *r);
const char *l8_ckpt_path(const l8_ckpt_reader *r);     /* as given to open; "" for NULL */

/* Refuse a checkpoint made for something else: L8_OK when kind and
 * user_version are the ones given, else L8_ERR_INVALID_ARG saying which were
 * expected and which found. */
L8_NODISCARD l8_status l8_ckpt_expect(const l8_ckpt_reader *r, const char *kind,
                                       uint32_t user_version);

/* What a section holds. name is reader-owned, valid until close. */
typedef struct l8_ckpt_section_info {
    const char *name;
    size_t bytes;                 /* payload length */
    int is_tensor;                /* 1: written by l8_ckpt_write_tensor */
    l8_dtype dtype;               /* tensor sections only */
    int ndim;                     /* tensor sections only; 0 for a scalar */
    int64_t shape[L8_MAX_DIMS];   /* tensor sections only; unused entries 0 */
} l8_ckpt_section_info;

/* Sections in the order they were written. */
size_t l8_ckpt_section_count(const l8_ckpt_reader *r);
/* Errors: L8_ERR_INVALID_ARG (NULL, i out of range). */
L8_NODISCARD l8_status l8_ckpt_section_at(const l8_ckpt_reader *r, size_t i,
                                           l8_ckpt_section_info *info);
/* 1 when the checkpoint has a section of that name, else 0. */
int l8_ckpt_has(const l8_ckpt_reader *r, const char *name);
/* Errors: L8_ERR_INVALID_ARG (NULL, no such section). */
L8_NODISCARD l8_status l8_ckpt_find(const l8_ckpt_reader *r, const char *name,
                                     l8_ckpt_section_info *info);

/* The payload of a section, in place: *ptr is 64-B aligned host memory owned
 * by the reader, read-only, valid until close (NULL when *n is 0). Any
 * section, tensor sections included (their raw element bytes).
 * Errors: L8_ERR_INVALID_ARG (NULL, no such section). */
L8_NODISCARD l8_status l8_ckpt_section(const l8_ckpt_reader *r, const char *name,
                                        const void **ptr, size_t *n);
/* Copy a section's payload into buf; n must equal its length exactly.
 * Errors: L8_ERR_INVALID_ARG (NULL, no such section, length mismatch: buf
 * untouched). */
L8_NODISCARD l8_status l8_ckpt_read_section_into(const l8_ckpt_reader *r, const char *name,
                                                  void *buf, size_t n);

/* Would l8_ckpt_read_tensor(r, name, dst) be accepted? A loader that restores
 * several tensors checks them all first, so a mismatch leaves every one of
 * them untouched. Errors: L8_ERR_INVALID_ARG (no such section, not a tensor
 * section, dtype or shape differ: the message names the section and gives
 * both), and dst NULL. */
L8_NODISCARD l8_status l8_ckpt_check_tensor(const l8_ckpt_reader *r, const char *name,
                                             const l8_tensor *dst);
/* dst = the tensor section `name`. dtype and shape must be the section's
 * exactly; dst may have any strides (not a broadcast view). Copied from the
 * reader's memory on the compute stream of dst's context; waits for it. On a
 * mismatch dst is untouched.
 * Errors: those of l8_ckpt_check_tensor, L8_ERR_STATE, L8_ERR_OOM, L8_ERR_CUDA. */
L8_NODISCARD l8_status l8_ckpt_read_tensor(const l8_ckpt_reader *r, const char *name,
                                            l8_tensor *dst);

/* ---- the checksum ---- */

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial and final
 * XOR 0xFFFFFFFF), continued from crc: start with 0, pass the previous result
 * to go on. crc32c("123456789") = 0xE3069283. Uses the SSE4.2 instruction
 * when the CPU has it. Never fails. */
uint32_t l8_crc32c(uint32_t crc, const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* L8_CHECKPOINT_H */
