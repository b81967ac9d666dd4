/* checkpoint.c - the checkpoint container: CRC-32C and what the writer
 * (ckpt_write.c) and the reader (ckpt_read.c) share (ckpt_internal.h).
 *
 * File layout (docs/checkpoint-format.md is the reference):
 *
 *   [0, 128)                  header (its own CRC-32C in its last 4 bytes)
 *   [128, index_offset)       sections, each at a multiple of 64, zero-padded
 *   [index_offset, file_size) index: section_count entries of 192 bytes
 *
 * body_crc in the header is the CRC-32C of every byte after the header, so
 * the header CRC and the body CRC together cover the whole file. Each index
 * entry also carries its section's own CRC, which names the damaged section
 * when the body CRC disagrees.
 *
 * Writer invariants:
 *   - w->pos is the logical file length so far (header placeholder included),
 *     always a multiple of 64 between sections;
 *   - w->body_crc covers bytes [128, w->pos) exactly;
 *   - an entry is in w->entries only when all its bytes (padding included)
 *     went through emit(); a section that failed half way is never indexed;
 *   - after the first I/O or device failure w->failed is set and no further
 *     byte is written; only commit (which reports it) and abort remain;
 *   - path itself is touched by exactly one call: rename() in commit.
 *
 * Reader invariants: after l8_ckpt_open returns L8_OK every entry has been
 * checked (bounds, alignment, overlap, name, tensor record, CRC), so the
 * accessors only index into memory they know is valid.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/ckpt_internal.h"

const unsigned char l8i_ckpt_magic[8] = { 'L', '8', 'C', 'K', 'P', 'T', 0, 0 };

/* ================================================================ CRC-32C */

static uint32_t g_crc_table[8][256];
static int g_crc_hw;
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        g_crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            g_crc_table[t][i] = (g_crc_table[t - 1][i] >> 8) ^ g_crc_table[0][g_crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    g_crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Slicing-by-8 on the inverted state c. */
static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = c ^ load32(p), hi = load32(p + 4);
        c = g_crc_table[7][lo & 0xFF] ^ g_crc_table[6][(lo >> 8) & 0xFF] ^
            g_crc_table[5][(lo >> 16) & 0xFF] ^ g_crc_table[4][lo >> 24] ^
            g_crc_table[3][hi & 0xFF] ^ g_crc_table[2][(hi >> 8) & 0xFF] ^
            g_crc_table[1][(hi >> 16) & 0xFF] ^ g_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = g_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
/* The SSE4.2 crc32 instruction computes exactly CRC-32C. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

uint32_t l8_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&g_crc_once, crc_init);
    if (n == 0) return crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (g_crc_hw) return ~crc_hw(~crc, p, n);
#endif
    return ~crc_sw(~crc, p, n);
}

/* The table path whatever the CPU has; the tests compare both. Not in the
 * public header on purpose. */
uint32_t l8i_crc32c_portable(uint32_t crc, const void *p, size_t n);
uint32_t l8i_crc32c_portable(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&g_crc_once, crc_init);
    return n ? ~crc_sw(~crc, p, n) : crc;
}

/* ================================================================ helpers */

l8_status l8i_ckpt_io_error(int e, const char *call, int line, const char *what, const char *path)
{
    char buf[128];
    const char *msg = strerror_r(e, buf, sizeof buf);   /* GNU form: returns the string */
    return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), call, __FILE__, line, "%s '%s': %s", what,
                        path, msg);
}


/* 1 when s is 1..max bytes of printable ASCII. */
int l8i_ckpt_printable(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= max || (unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7E) return 0;
    return n > 0;
}

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;                 /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}


const ckpt_entry *l8i_ckpt_table_find(const name_table *t, const ckpt_entry *entries, const char *name,
                                    size_t *idx)
{
    if (!t->cap) return NULL;
    for (size_t j = hash_name(name) & (t->cap - 1); t->slots[j]; j = (j + 1) & (t->cap - 1)) {
        const ckpt_entry *e = &entries[t->slots[j] - 1];
        if (!strcmp(e->name, name)) {
            if (idx) *idx = t->slots[j] - 1;
            return e;
        }
    }
    return NULL;
}

/* Make room for n entries. 0 or -1 (no memory). */
int l8i_ckpt_table_reserve(name_table *t, const ckpt_entry *entries, size_t n)
{
    if (n * 2 <= t->cap) return 0;
    size_t ncap = t->cap ? t->cap : 64;
    while (ncap < n * 2) ncap *= 2;
    uint32_t *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        uint32_t id = t->slots[i];
        if (!id) continue;
        size_t j = hash_name(entries[id - 1].name) & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = id;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

/* Insert entry i (room reserved, name not present). */
void l8i_ckpt_table_insert(name_table *t, const ckpt_entry *entries, size_t i)
{
    size_t j = hash_name(entries[i].name) & (t->cap - 1);
    while (t->slots[j]) j = (j + 1) & (t->cap - 1);
    t->slots[j] = (uint32_t)(i + 1);
}

l8_status l8i_ckpt_check_name(const char *fn, const char *name)
{
    if (!name) return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section name is NULL", fn);
    if (!l8i_ckpt_printable(name, L8_CKPT_NAME_MAX))
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: section name '%.*s%s' must be 1 to %d printable"
                       " ASCII characters", fn, 160, name, strlen(name) > 160 ? "..." : "",
                       L8_CKPT_NAME_MAX);
    return L8_OK;
}

/* "[2, 3]" (or "[]" for a scalar) into a caller buffer. */
const char *l8i_ckpt_fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}
