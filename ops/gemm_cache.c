/* gemm_cache.c - the persistent GEMM plan cache (L8_GEMM_CACHE=path, or
 * l8_gemm_config.plan_cache): the algorithms the autotuner chose, kept in a
 * file so that the next handle - in this process or another - runs them by
 * default without tuning, and a resumed run uses the algorithms the first
 * one used.
 *
 * The file is a lean8 checkpoint container (runtime/checkpoint.h: written to
 * a temporary name, fsynced and renamed into place; CRC-32C over every byte;
 * length and index validated on open) of kind "lean8-gemm-plan-cache",
 * version L8I_GCACHE_VERSION, with two sections:
 *   "identity"  l8i_gemm_cache_id: the device name, its SM count and the
 *               cuBLASLt version (cublasLtGetVersion) that chose the entries;
 *   "entries"   l8i_gemm_cache_entry[n]: plan key (shapes, leading
 *               dimensions, dtypes, transposes, epilogue, fast accumulation,
 *               beta != 0, which scales are present, pointer alignments),
 *               the workspace limit and precise_reduction it was tuned
 *               under, how it was picked, and the cublasLtMatmulAlgo_t
 *               (cuBLASLt documents the struct as serializable for reuse
 *               with the same library version, hence the identity).
 * Host byte order; a file from another byte order fails the identity check.
 *
 * Trust: nothing in the file is used unless the whole file validates and its
 * identity equals this device's and library's; otherwise the file is
 * ignored with a warning on stderr and treated as empty (the next save
 * replaces it). Even then an entry is only a suggestion: gemm.c re-validates
 * its algorithm with cublasLtMatmulAlgoCheck against the plan's descriptors
 * and the handle's workspace before using it, and falls back to the
 * heuristic (and tuning) when cuBLASLt refuses it.
 *
 * Concurrency: a save first merges the entries another process saved since
 * (same identity, keys this cache lacks), then replaces the file atomically;
 * two processes saving at the same moment lose at most the other's newest
 * entries, never the file. The pure file logic here touches no GPU library
 * and is tested on the host (tests/test_gemm.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ops/gemm_internal.h"
#include "runtime/checkpoint.h"

#define KIND "lean8-gemm-plan-cache"

_Static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(((l8i_gemm_cache_entry *)0)->algo),
               "cublasLtMatmulAlgo_t is not 64 bytes: the plan cache layout must change");
_Static_assert(sizeof(l8i_gemm_cache_entry) == 17 * sizeof(uint64_t), "entry has padding");
_Static_assert(sizeof(l8i_gemm_cache_id) == 104, "identity has padding");

int l8i_gemm_debug(void)
{
    static int v = -1;            /* racy but idempotent */
    if (v < 0) {
        const char *e = getenv("L8_GEMM_DEBUG");
        v = e && e[0] && e[0] != '0';
    }
    return v;
}

void l8i_gemm_cache_clear(l8i_gemm_cache *c)
{
    free(c->e);
    c->e = NULL;
    c->n = c->cap = 0;
}

static int entry_matches(const l8i_gemm_cache_entry *e, const plan_key *k, uint64_t ws, int precise)
{
    return !memcmp(&e->key, k, sizeof *k) && e->ws_bytes == ws &&
           (int)(e->flags & L8I_GCE_PRECISE) == (precise ? 1 : 0);
}

const l8i_gemm_cache_entry *l8i_gemm_cache_find(const l8i_gemm_cache *c, const plan_key *k,
                                                uint64_t ws, int precise)
{
    for (size_t i = 0; i < c->n; i++)
        if (entry_matches(&c->e[i], k, ws, precise)) return &c->e[i];
    return NULL;
}

l8_status l8i_gemm_cache_put(l8i_gemm_cache *c, const l8i_gemm_cache_entry *e)
{
    for (size_t i = 0; i < c->n; i++)
        if (entry_matches(&c->e[i], &e->key, e->ws_bytes, (int)(e->flags & L8I_GCE_PRECISE))) {
            c->e[i] = *e;
            return L8_OK;
        }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        l8i_gemm_cache_entry *ne = realloc(c->e, cap * sizeof *ne);
        if (!ne) return L8_FAIL(L8_ERR_OOM, "GEMM plan cache: out of host memory for %zu entries", cap);
        c->e = ne;
        c->cap = cap;
    }
    c->e[c->n++] = *e;
    return L8_OK;
}

/* Read path into a new entry list. L8I_GCACHE_LOADED with *out and *n (the
 * caller frees *out), ABSENT (no file), or IGNORED with the reason in why. */
static int read_file(const char *path, const l8i_gemm_cache_id *id, l8i_gemm_cache_entry **out,
                     size_t *n, char *why, size_t whysz)
{
    struct stat sb;
    l8_ckpt_reader *r = NULL;
    const void *p = NULL;
    size_t bytes = 0;
    int res = L8I_GCACHE_IGNORED;
    *out = NULL;
    *n = 0;
    if (stat(path, &sb) != 0 && errno == ENOENT) return L8I_GCACHE_ABSENT;
    if (l8_ckpt_open(path, &r) != L8_OK || l8_ckpt_expect(r, KIND, L8I_GCACHE_VERSION) != L8_OK) {
        snprintf(why, whysz, "%s", l8_last_error()->message);
        l8_error_clear();
        goto out;
    }
    if (l8_ckpt_section(r, "identity", &p, &bytes) != L8_OK || bytes != sizeof *id) {
        l8_error_clear();
        snprintf(why, whysz, "no identity section of %zu bytes", sizeof *id);
        goto out;
    }
    const l8i_gemm_cache_id *fid = p;
    if (memcmp(fid, id, sizeof *id) != 0) {
        snprintf(why, whysz, "written for %.*s (%u SMs, cuBLASLt %u), this is %s (%u SMs,"
                 " cuBLASLt %u)", (int)sizeof fid->device, fid->device, (unsigned)fid->sm_count,
                 (unsigned)fid->lt_version, id->device, (unsigned)id->sm_count,
                 (unsigned)id->lt_version);
        goto out;
    }
    if (l8_ckpt_section(r, "entries", &p, &bytes) != L8_OK ||
        bytes % sizeof(l8i_gemm_cache_entry) != 0) {
        l8_error_clear();
        snprintf(why, whysz, "no entries section of whole %zu-byte entries",
                 sizeof(l8i_gemm_cache_entry));
        goto out;
    }
    *n = bytes / sizeof(l8i_gemm_cache_entry);
    if (*n) {
        *out = malloc(bytes);
        if (!*out) {
            *n = 0;
            snprintf(why, whysz, "out of host memory for %zu bytes", bytes);
            goto out;
        }
        memcpy(*out, p, bytes);
    }
    res = L8I_GCACHE_LOADED;
out:
    l8_ckpt_close(r);
    return res;
}

int l8i_gemm_cache_load(l8i_gemm_cache *c, char *why, size_t whysz)
{
    l8i_gemm_cache_entry *e = NULL;
    size_t n = 0;
    why[0] = '\0';
    l8i_gemm_cache_clear(c);
    int res = read_file(c->path, &c->id, &e, &n, why, whysz);
    if (res == L8I_GCACHE_LOADED) {
        c->e = e;
        c->n = c->cap = n;
    }
    return res;
}

l8_status l8i_gemm_cache_save(l8i_gemm_cache *c)
{
    l8i_gemm_cache_entry *disk = NULL;
    size_t nd = 0;
    char why[256];
    /* keep what others saved since we loaded: their keys that we lack */
    if (read_file(c->path, &c->id, &disk, &nd, why, sizeof why) == L8I_GCACHE_LOADED) {
        for (size_t i = 0; i < nd; i++) {
            const l8i_gemm_cache_entry *d = &disk[i];
            if (l8i_gemm_cache_find(c, &d->key, d->ws_bytes, (int)(d->flags & L8I_GCE_PRECISE)))
                continue;
            l8_status st = l8i_gemm_cache_put(c, d);
            if (st != L8_OK) {
                free(disk);
                return st;
            }
        }
    }
    free(disk);
    l8_ckpt_writer *w = NULL;
    L8_CHECK(l8_ckpt_writer_open(c->path, KIND, L8I_GCACHE_VERSION, &w));
    l8_status st = l8_ckpt_write_section(w, "identity", &c->id, sizeof c->id);
    if (st == L8_OK) st = l8_ckpt_write_section(w, "entries", c->e, c->n * sizeof *c->e);
    if (st != L8_OK) {
        l8_ckpt_writer_abort(w);
        return st;
    }
    return l8_ckpt_writer_commit(w);
}
