/* trace_known.c - the known trace (numbers in trace_known.h). */
#include "tests/trace_known.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)

static int with_tag(const char *tag, l8_trace *t, l8_trace_kind k, uint64_t addr, uint64_t size,
                    uint64_t aux)
{
    if (l8_tag_push(tag) != L8_OK) return -1;
    l8_trace_record(t, k, 0, 1, addr, size, aux);
    return l8_tag_pop() == L8_OK ? 0 : -1;
}

int l8t_trace_known(l8_trace *t)
{
    int bad = 0;
    l8_trace_record(t, L8_TRACE_SEGMENT_ALLOC, 0, 1, 0x100000000ull, 4 * MiB, 4 * MiB);
    bad |= with_tag("embed", t, L8_TRACE_ALLOC, 0x100000000ull, 1 * MiB, 1000000);
    l8_trace_record(t, L8_TRACE_SEGMENT_ALLOC, 0, 1, 0x200000000ull, 2 * MiB, 6 * MiB);
    bad |= with_tag("layer0.fc1", t, L8_TRACE_ALLOC, 0x200000000ull, 2 * MiB, 2 * MiB);
    bad |= with_tag("layer1.fc1", t, L8_TRACE_ALLOC, 0x100100000ull, 512 * KiB, 500000);
    l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, 1);                       /* peak: 3.5 MiB */
    l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, 0x200000000ull, 2 * MiB, 2 * MiB);
    l8_trace_record(t, L8_TRACE_FREE_COMPLETED, 0, 1, 0x200000000ull, 2 * MiB, 0);
    bad |= with_tag("layer1.fc1", t, L8_TRACE_ALLOC, 0x100180000ull, 1 * MiB, 1 * MiB);
    bad |= with_tag("layer1.fc1", t, L8_TRACE_OOM, 0, 8 * MiB, 6 * MiB);
    l8_trace_record(t, L8_TRACE_OFFLOAD_OUT, 0, 1, 0x100100000ull, 512 * KiB, 0x7000);
    l8_trace_record(t, L8_TRACE_OFFLOAD_IN, 0, 1, 0x100100000ull, 512 * KiB, 0x7000);
    l8_trace_record(t, L8_TRACE_PINNED_ALLOC, -1, 0, 0x7000, 64 * KiB, 60000);
    l8_trace_record(t, L8_TRACE_PINNED_FREE, -1, 0, 0x7000, 64 * KiB, 0);
    l8_trace_record(t, L8_TRACE_STEP, -1, 0, 0, 0, 2);
    l8_trace_record(t, L8_TRACE_FREE_REQUESTED, 0, 1, 0x999000ull, 512, 512); /* never allocated */
    l8_trace_record(t, L8_TRACE_SEGMENT_FREE, 0, 1, 0x200000000ull, 2 * MiB, 4 * MiB);
    return bad ? -1 : 0;
}
