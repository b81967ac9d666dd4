/* ckpt_internal.h - what the checkpoint container's files share (not
 * installed): the on-disk header and index entry, the name table, and small
 * helpers. checkpoint.c: CRC-32C and these helpers; ckpt_write.c: the
 * writer; ckpt_read.c: the reader. docs/checkpoint-format.md is the format.
 */
#ifndef L8_CKPT_INTERNAL_H
#define L8_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/checkpoint.h"

#define CKPT_VERSION 1u
#define HDR_SIZE 128u
#define HDR_CRC_AT 124u
#define ENTRY_SIZE 192u
#define ENTRY_BYTES 0u
#define ENTRY_TENSOR 1u
#define WBUF_BYTES ((size_t)1 << 20)      /* coalesces small writes */
#define BOUNCE_BYTES ((size_t)8 << 20)    /* device -> host chunk for tensor sections */
#define IO_CHUNK ((size_t)1 << 30)        /* read/write at most this much per call */

extern const unsigned char l8i_ckpt_magic[8];   /* "L8CKPT\0\0" */

/* The header, exactly as in the file (little-endian, no padding). */
typedef struct ckpt_header {
    unsigned char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint64_t file_size;
    uint64_t index_offset;
    uint32_t section_count;
    uint32_t entry_size;
    uint32_t user_version;
    uint32_t body_crc;
    char kind[64];
    uint64_t reserved0;
    uint32_t reserved1;
    uint32_t header_crc;
} ckpt_header;

/* One index entry, exactly as in the file. */
typedef struct ckpt_entry {
    char name[128];
    uint64_t offset;
    uint64_t length;
    uint32_t crc;
    uint32_t type;                /* ENTRY_BYTES or ENTRY_TENSOR */
    uint32_t dtype;
    uint32_t ndim;
    int64_t shape[4];
} ckpt_entry;

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the checkpoint format is little-endian; add byte swapping for this host");
_Static_assert(sizeof(ckpt_header) == HDR_SIZE, "checkpoint header must be 128 bytes");
_Static_assert(offsetof(ckpt_header, kind) == 48 && offsetof(ckpt_header, header_crc) == HDR_CRC_AT,
               "checkpoint header layout");
_Static_assert(sizeof(ckpt_entry) == ENTRY_SIZE, "checkpoint index entry must be 192 bytes");
_Static_assert(offsetof(ckpt_entry, offset) == 128 && offsetof(ckpt_entry, shape) == 160,
               "checkpoint entry layout");
_Static_assert(L8_MAX_DIMS == 4, "the index entry holds 4 dimensions");
_Static_assert(HDR_SIZE % L8_CKPT_ALIGN == 0 && ENTRY_SIZE % L8_CKPT_ALIGN == 0, "alignment");

/* Open-addressing set of entry indices (stored +1; 0 = empty), keyed by name.
 * Capacity a power of two, kept at most half full. */
typedef struct name_table {
    uint32_t *slots;
    size_t cap;
} name_table;

static inline uint64_t align_up(uint64_t n)
{
    return (n + L8_CKPT_ALIGN - 1) / L8_CKPT_ALIGN * L8_CKPT_ALIGN;
}

/* L8_ERR_IO for errno e from `call` on `what` '<path>'. */
l8_status l8i_ckpt_io_error(int e, const char *call, int line, const char *what, const char *path);
/* 1 when s is 1..max bytes of printable ASCII. */
int l8i_ckpt_printable(const char *s, size_t max);
/* L8_ERR_INVALID_ARG unless name is a valid section name. */
l8_status l8i_ckpt_check_name(const char *fn, const char *name);
/* "[2, 3]" (or "[]" for a scalar) into a caller buffer. */
const char *l8i_ckpt_fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape);
/* The name table over an entry array: find (idx may be NULL), make room for n
 * (0, or -1 without memory), insert entry i (room reserved, name absent). */
const ckpt_entry *l8i_ckpt_table_find(const name_table *t, const ckpt_entry *entries,
                                      const char *name, size_t *idx);
int l8i_ckpt_table_reserve(name_table *t, const ckpt_entry *entries, size_t n);
void l8i_ckpt_table_insert(name_table *t, const ckpt_entry *entries, size_t i);

#endif
