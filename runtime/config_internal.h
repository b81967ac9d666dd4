/* config_internal.h - the one struct-size rule of every versioned config
 * struct (not installed). Part of the status layer, so alloc/ may use it.
 *
 * Every config struct starts with `size_t size`, which the caller sets to
 * sizeof the struct as its headers declare it (the _INIT macros and the
 * l8_*_config_init() functions do). The library accepts:
 *   - size == sizeof: the common case;
 *   - size <  sizeof: a caller built against older headers; the fields it
 *     does not have keep the library's defaults (the _INIT values). The size
 *     must cover at least the size field itself;
 *   - size >  sizeof: a caller built against newer headers; accepted when
 *     every byte past the fields this library knows is zero (a newer field
 *     left at zero asks for nothing this library cannot do), refused
 *     otherwise, naming the first non-zero byte.
 */
/* Statistics structs go the other way (the library fills the caller's
 * struct), under one rule too:
 *   - the caller's size must cover the size field and at least one byte of
 *     the fields after it;
 *   - a shorter struct (older headers) gets the prefix it has room for;
 *   - a longer one (newer headers) gets every field this library knows and
 *     zeros in the rest;
 *   - its size becomes the number of bytes the library filled with values
 *     (the smaller of the two sizes).
 */
#ifndef L8_RUNTIME_CONFIG_INTERNAL_H
#define L8_RUNTIME_CONFIG_INTERNAL_H

#include <stddef.h>
#include "runtime/status.h"

/* dst (dst_size bytes) holds the defaults; overlay the caller's src (its
 * first size_t is its size) by the rule above and set dst's size to
 * dst_size. L8_OK, or L8_ERR_INVALID_ARG "<fn>: cfg->size N ..." naming
 * `init`. dst is unchanged on failure. */
l8_status l8i_config_copy(void *dst, size_t dst_size, const void *src, const char *fn,
                          const char *init);

/* Fill the caller's stats struct `out` (its first size_t is its size) from
 * the library's `src` (src_size bytes) by the statistics rule above. L8_OK,
 * or L8_ERR_INVALID_ARG "<fn>: stats->size N ..."; out is unchanged then. */
l8_status l8i_stats_out(void *out, const void *src, size_t src_size, const char *fn);

/* c (a config struct holding the defaults) becomes *cfg by the rule above
 * when cfg is not NULL; returns the failing status from the caller. */
#define L8I_CONFIG_COPY(c, cfg, fn, init)                                                     \
    do {                                                                                      \
        (void)sizeof(&(c) == (cfg));               /* same struct type on both sides */       \
        if (cfg) {                                                                            \
            l8_status l8i_cc_ = l8i_config_copy(&(c), sizeof(c), (cfg), (fn), (init));        \
            if (l8i_cc_ != L8_OK) return l8i_cc_;                                             \
        }                                                                                     \
    } while (0)

#endif
