/* trace_known.h - one trace with known content, recorded through the
 * recorder API, and every number lean8-trace must derive from it. Used by
 * the Check suite (tests/test_trace_tool.c) and by trace-gen for
 * tests/trace.sh, which checks the same numbers in the CLI's output. */
#ifndef L8_TRACE_KNOWN_H
#define L8_TRACE_KNOWN_H

#include "alloc/trace.h"

#define KNOWN_EVENTS 17u                    /* events recorded */
#define KNOWN_ALLOC_PEAK 3670016ull         /* 1 MiB + 2 MiB + 512 KiB */
#define KNOWN_RESERVED_PEAK 6291456ull      /* 4 MiB + 2 MiB segments */
#define KNOWN_ALLOC_END 2621440ull          /* 1 MiB + 512 KiB + 1 MiB */
#define KNOWN_RESERVED_END 4194304ull
#define KNOWN_PINNED_PEAK 65536ull
#define KNOWN_OFFLOAD 524288ull             /* out once, in once */
#define KNOWN_OOM_REQUEST 8388608ull
#define KNOWN_OOM_RESERVED 6291456ull
#define KNOWN_STEPS 2u
/* at the allocated peak: layer0.fc1 2 MiB, embed 1 MiB, layer1.fc1 512 KiB */
#define KNOWN_TAG0 "layer0.fc1"
#define KNOWN_TAG0_BYTES 2097152ull
#define KNOWN_TAG1 "embed"
#define KNOWN_TAG1_BYTES 1048576ull
#define KNOWN_TAG2 "layer1.fc1"
#define KNOWN_TAG2_BYTES 524288ull
#define KNOWN_TAG2_END 1572864ull           /* layer1.fc1 at the end */

/* Record the events into t (device 0; stream handle 1, which the caller may
 * register). Returns 0, or -1 when a tag push/pop failed. */
int l8t_trace_known(l8_trace *t);

/* Test cases added to the "trace" suite by tests/test_trace.c. */
struct Suite;
void l8t_trace_file_tests(struct Suite *s);   /* tests/test_trace_file.c: the recorder's file */
void l8t_trace_tool_tests(struct Suite *s);   /* tests/test_trace_tool.c: lean8-trace's model */

#endif
