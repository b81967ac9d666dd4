/* bench_util.c - timing, medians and the JSON report for lean8-bench. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tools/bench.h"
#include "ops/elementwise.h"

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (!n) return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* path NULL (no --json): no file; the bench_json_* calls do nothing. */
int bench_json_open(bench_json *j, const char *path, const char *bench, const char *device)
{
    j->first = 1;
    j->f = NULL;
    if (!path) return 0;
    j->f = fopen(path, "w");
    if (!j->f) { perror(path); return -1; }
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(j->f, "{");
    bench_json_str(j, "bench", bench);
    bench_json_str(j, "device", device);
    bench_json_str(j, "date", date);
    bench_json_str(j, "lean8", l8_version());
    return 0;
}

void bench_json_num(bench_json *j, const char *key, double v)
{
    if (!j || !j->f) return;
    fprintf(j->f, "%s\n  \"%s\": %.6g", j->first ? "" : ",", key, v);
    j->first = 0;
}

void bench_json_str(bench_json *j, const char *key, const char *v)
{
    if (!j || !j->f) return;
    fprintf(j->f, "%s\n  \"%s\": \"", j->first ? "" : ",", key);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', j->f);
        if ((unsigned char)*p >= 0x20) fputc(*p, j->f);
    }
    fputc('"', j->f);
    j->first = 0;
}

void bench_json_close(bench_json *j)
{
    if (!j->f) return;
    fprintf(j->f, "\n}\n");
    fclose(j->f);
    j->f = NULL;
}

int bench_parse(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json") && i + 1 < argc) o->json = argv[++i];
        else if (!strcmp(a, "--device") && i + 1 < argc) o->device = argv[++i];
        else if (!strcmp(a, "--dump-trace") && i + 1 < argc) o->dump_trace = argv[++i];
        else if (!strcmp(a, "--cache") && i + 1 < argc) o->cache = argv[++i];
        else if (!strcmp(a, "--quick")) o->quick = 1;
        else { fprintf(stderr, "lean8-bench: unknown option %s\n", a); return -1; }
    }
    return 0;
}

l8_tensor *bench_mk(l8_ctx *ctx, l8_dtype dt, int64_t rows, int64_t cols, l8_status *st)
{
    int64_t sh[2] = { rows, cols };
    l8_tensor *t = NULL;
    if (*st == L8_OK) *st = l8_tensor_empty(ctx, dt, cols ? 2 : 1, sh, &t);
    return t;
}

l8_status bench_fill(l8_ctx *ctx, l8_tensor *t, float amp, uint64_t seed)
{
    int64_t n = l8_tensor_numel(t), sh[1] = { n };
    float *h = malloc(sizeof(float) * (size_t)n);
    l8_tensor *f = NULL, *flat = NULL;
    l8_status st = h ? L8_OK : L8_FAIL(L8_ERR_OOM, "bench: host buffer");
    uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
    for (int64_t i = 0; st == L8_OK && i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        h[i] = amp * ((float)(x >> 40) / 8388608.0f - 1.0f);
    }
    if (st == L8_OK) st = l8_tensor_empty(ctx, L8_F32, 1, sh, &f);
    if (st == L8_OK) st = l8_tensor_copy_from_host(f, h, sizeof(float) * (size_t)n, NULL);
    if (st == L8_OK) st = l8_tensor_reshape(t, 1, sh, &flat);
    if (st == L8_OK) st = l8_tensor_dtype(t) == L8_F32 ? l8_tensor_copy(flat, f, NULL)
                                                        : l8_convert(f, flat, NULL);
    if (st == L8_OK) st = l8_ctx_synchronize(ctx);
    l8_tensor_destroy(flat);
    l8_tensor_destroy(f);
    free(h);
    return st;
}
