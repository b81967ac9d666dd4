/* ktrace.c - libl8ktrace.so: every kernel, memset and memcpy a process runs
 * on the GPU, with its start and end on the GPU's clock, for telling where a
 * CUDA graph step's time goes (tools/ktrace.py reads the file). A CUDA
 * injection library: the driver loads it at cuInit and calls
 * InitializeInjection, so the traced program needs no change:
 *
 *   CUDA_INJECTION64_PATH=build/libl8ktrace.so L8_KTRACE=trace.csv prog args...
 *   python3 tools/ktrace.py trace.csv
 *
 * It enables CUPTI's activity records (concurrent kernels, memsets, memcpys:
 * they do not serialize kernels) and writes them at exit to L8_KTRACE
 * (default ktrace.csv), one line each:
 *
 *   kind,stream,start_ns,end_ns,graph_id,graph_node,correlation,name
 *
 * kind K (kernel), S (memset; name "memset<bytes>"), C (memcpy); graph_id 0
 * for work outside a CUDA graph; correlation is the launch's id (one id for
 * every node of one cuGraphLaunch). The name is last, as it is (C++ kernel
 * names stay mangled). Caveats: records cost the traced program some speed
 * (8-12% on lean8-train's graph step on an H200); a kernel launched with
 * programmatic dependent launch starts before its predecessor ends and its
 * time includes the wait. Records CUPTI had to drop are counted on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <cupti.h>

int InitializeInjection(void);

static FILE *out;
#define BUF_BYTES (8u << 20)

static void report(const char *what, CUptiResult r)
{
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    fprintf(stderr, "libl8ktrace: %s: %s\n", what, s ? s : "unknown CUPTI error");
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_BYTES);   /* NULL: CUPTI drops records (counted at exit) */
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

/* One CSV line; a memset's or memcpy's name is `name` followed by its bytes. */
static void put(char kind, uint32_t stream, uint64_t start, uint64_t end, uint32_t graph,
                uint64_t node, uint32_t corr, const char *name, unsigned long long bytes)
{
    fprintf(out, "%c,%u,%llu,%llu,%u,%llu,%u,%s", kind, stream, (unsigned long long)start,
            (unsigned long long)end, graph, (unsigned long long)node, corr, name);
    if (kind != 'K') fprintf(out, "%llu", bytes);
    fputc('\n', out);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            put('K', k->streamId, k->start, k->end, k->graphId, k->graphNodeId, k->correlationId,
                k->name ? k->name : "?", 0);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            put('S', m->streamId, m->start, m->end, m->graphId, m->graphNodeId, m->correlationId,
                "memset", m->bytes);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            put('C', m->streamId, m->start, m->end, m->graphId, m->graphNodeId, m->correlationId,
                "memcpy", m->bytes);
        }
    }
    free(buf);
}

static void finish(void)
{
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) report("cuptiActivityFlushAll", r);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "libl8ktrace: %zu records dropped (out of host memory)\n", dropped);
    if (out && fclose(out) != 0) perror("libl8ktrace: closing the trace");
    out = NULL;
}

/* Called by the driver at cuInit. 1: loaded (tracing or not: a trace that
 * cannot be written is reported and the program runs untraced). */
int InitializeInjection(void)
{
    const char *path = getenv("L8_KTRACE");
    path = path && *path ? path : "ktrace.csv";
    out = fopen(path, "w");
    if (!out) {
        perror("libl8ktrace: L8_KTRACE");
        return 1;
    }
    static const CUpti_ActivityKind kinds[] = { CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                CUPTI_ACTIVITY_KIND_MEMSET,
                                                CUPTI_ACTIVITY_KIND_MEMCPY };
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof kinds / sizeof kinds[0]; i++)
        r = cuptiActivityEnable(kinds[i]);
    if (r != CUPTI_SUCCESS) {
        report("enabling the activity records", r);
        fclose(out);
        out = NULL;
        return 1;
    }
    atexit(finish);
    return 1;
}
