/* provider.c - segment providers that need no GPU: host memory and fault
 * injection (alloc.h).
 *
 * Host provider: segments are posix_memalign'ed host memory, 512-B aligned
 * (alloc.h promises 256; 512 lets the allocator use the whole segment).
 * Host work is synchronous, so an event is complete the moment it is
 * recorded: event objects are one static dummy, never allocated, and every
 * event call succeeds.
 *
 * Fault provider: counts segment_alloc calls and fails the chosen ones or
 * those that would pass a byte limit, then forwards to the inner provider.
 * The allocator calls providers from several threads at once (never under
 * its lock), so the counters are atomic. Invariant: live_bytes == bytes
 * handed out by inner and not yet freed (through this wrapper), plus those
 * of segment_alloc calls still inside inner.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/alloc.h"

#define HOST_ALIGN 512

/* ---- host ---- */

static char g_host_event;   /* the one dummy event: its address is never NULL */

static l8_status host_segment_alloc(void *user, size_t bytes, void **ptr)
{
    (void)user;
    *ptr = NULL;
    if (bytes == 0) return L8_FAIL(L8_ERR_INVALID_ARG, "host provider: segment of 0 bytes");
    void *p = NULL;
    int rc = posix_memalign(&p, HOST_ALIGN, bytes);
    if (rc != 0 || !p)
        return l8_error_set(L8_ERR_OOM, rc, rc == ENOMEM ? "ENOMEM" : "", "posix_memalign",
                            __FILE__, __LINE__, "host provider: cannot allocate %zu bytes", bytes);
    *ptr = p;
    return L8_OK;
}

static l8_status host_segment_free(void *user, void *ptr, size_t bytes)
{
    (void)user;
    (void)bytes;
    free(ptr);
    return L8_OK;
}

static l8_status host_event_create(void *user, void **event)
{
    (void)user;
    *event = &g_host_event;
    return L8_OK;
}

static l8_status host_event_record(void *user, void *event, l8_stream_id stream)
{
    (void)user;
    (void)event;
    (void)stream;
    return L8_OK;
}

static l8_status host_event_query(void *user, void *event, int *done)
{
    (void)user;
    (void)event;
    *done = 1;
    return L8_OK;
}

static l8_status host_event_sync(void *user, void *event)
{
    (void)user;
    (void)event;
    return L8_OK;
}

static void host_event_destroy(void *user, void *event)
{
    (void)user;
    (void)event;
}

void l8_host_provider(l8_segment_provider *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    out->user = NULL;
    out->name = "host";
    out->device = -1;
    out->segment_alloc = host_segment_alloc;
    out->segment_free = host_segment_free;
    out->event_create = host_event_create;
    out->event_record = host_event_record;
    out->event_query = host_event_query;
    out->event_sync = host_event_sync;
    out->event_destroy = host_event_destroy;
}

/* ---- fault injection ---- */

static l8_status fault_segment_alloc(void *user, size_t bytes, void **ptr)
{
    l8_fault_provider *fp = user;
    *ptr = NULL;
    uint64_t n = __atomic_add_fetch(&fp->calls, 1, __ATOMIC_RELAXED);
    int hit = fp->fail_nth > 0 && (n == fp->fail_nth || (fp->fail_sticky && n > fp->fail_nth));
    if (hit) {
        __atomic_add_fetch(&fp->failures, 1, __ATOMIC_RELAXED);
        return L8_FAIL(L8_ERR_OOM, "fault provider: injected failure of segment_alloc #%llu "
                       "(%zu bytes)", (unsigned long long)n, bytes);
    }
    /* Take the bytes before calling inner, so that concurrent calls cannot
     * pass the limit together; written so that it cannot overflow:
     * live_bytes <= memory_limit holds. */
    size_t live = __atomic_load_n(&fp->live_bytes, __ATOMIC_RELAXED);
    do {
        if (fp->memory_limit > 0 && (bytes > fp->memory_limit || live > fp->memory_limit - bytes)) {
            __atomic_add_fetch(&fp->failures, 1, __ATOMIC_RELAXED);
            return L8_FAIL(L8_ERR_OOM, "fault provider: segment of %zu bytes would exceed the "
                           "memory limit (%zu of %zu bytes in use)", bytes, live,
                           fp->memory_limit);
        }
    } while (!__atomic_compare_exchange_n(&fp->live_bytes, &live, live + bytes, 1,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    l8_status st = fp->inner.segment_alloc(fp->inner.user, bytes, ptr);
    if (st != L8_OK) {
        __atomic_sub_fetch(&fp->live_bytes, bytes, __ATOMIC_RELAXED);
        return st;
    }
    size_t peak = __atomic_load_n(&fp->peak_bytes, __ATOMIC_RELAXED);
    while (live + bytes > peak &&
           !__atomic_compare_exchange_n(&fp->peak_bytes, &peak, live + bytes, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return L8_OK;
}

static l8_status fault_segment_free(void *user, void *ptr, size_t bytes)
{
    l8_fault_provider *fp = user;
    l8_status st = fp->inner.segment_free(fp->inner.user, ptr, bytes);
    if (st != L8_OK) return st;
    size_t live = __atomic_load_n(&fp->live_bytes, __ATOMIC_RELAXED);
    size_t left;
    do left = live - (bytes < live ? bytes : live);
    while (!__atomic_compare_exchange_n(&fp->live_bytes, &live, left, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return L8_OK;
}

static l8_status fault_event_create(void *user, void **event)
{
    l8_fault_provider *fp = user;
    return fp->inner.event_create(fp->inner.user, event);
}

static l8_status fault_event_record(void *user, void *event, l8_stream_id stream)
{
    l8_fault_provider *fp = user;
    return fp->inner.event_record(fp->inner.user, event, stream);
}

static l8_status fault_event_query(void *user, void *event, int *done)
{
    l8_fault_provider *fp = user;
    return fp->inner.event_query(fp->inner.user, event, done);
}

static l8_status fault_event_sync(void *user, void *event)
{
    l8_fault_provider *fp = user;
    return fp->inner.event_sync(fp->inner.user, event);
}

static void fault_event_destroy(void *user, void *event)
{
    l8_fault_provider *fp = user;
    fp->inner.event_destroy(fp->inner.user, event);
}

void l8_fault_provider_init(l8_fault_provider *fp, const l8_segment_provider *inner)
{
    if (!fp || !inner) return;
    memset(fp, 0, sizeof *fp);
    fp->inner = *inner;
    fp->base.size = sizeof fp->base;
    fp->base.user = fp;
    fp->base.name = "fault";
    fp->base.device = inner->device;
    fp->base.segment_alloc = fault_segment_alloc;
    fp->base.segment_free = fault_segment_free;
    fp->base.event_create = fault_event_create;
    fp->base.event_record = fault_event_record;
    fp->base.event_query = fault_event_query;
    fp->base.event_sync = fault_event_sync;
    fp->base.event_destroy = fault_event_destroy;
}
