/* trace_export.c - `lean8-trace export --chrome FILE... -o OUT.json`:
 * Chrome trace-event JSON (the format chrome://tracing and Perfetto open).
 *
 * One process per file (pid = the file's rank, named "rank R (pid P)"):
 *  - a counter track ("ph":"C") per tag with its allocated bytes, one sample
 *    each time the tag's bytes change;
 *  - counter tracks "reserved" and "pinned";
 *  - instant events ("ph":"i") for OOMs and step marks, with their numbers
 *    in args.
 * Timestamps are microseconds since the file's trace started (the header's
 * monotonic zero), with ns precision.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/trace_model.h"

typedef struct export_ctx {
    FILE *f;
    int pid;
    int first;
    uint64_t last_reserved, last_pinned;
} export_ctx;

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7F) fprintf(f, "\\u%04x", *p);   /* bytes as code points */
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void begin(export_ctx *x)
{
    fputs(x->first ? "\n" : ",\n", x->f);
    x->first = 0;
}

static void counter(export_ctx *x, const char *name, uint64_t t_ns, uint64_t bytes)
{
    begin(x);
    fputs("{\"ph\":\"C\",\"name\":", x->f);
    json_str(x->f, name);
    fprintf(x->f, ",\"ts\":%llu.%03u,\"pid\":%d,\"tid\":0,\"args\":{\"bytes\":%llu}}",
            (unsigned long long)(t_ns / 1000), (unsigned)(t_ns % 1000), x->pid,
            (unsigned long long)bytes);
}

static void export_hook(void *user, trace_model *m, const l8_trace_event *e)
{
    export_ctx *x = user;
    uint64_t t = e->time_ns;
    for (int i = 0; i < m->nchanged; i++)
        counter(x, tm_tag_name(m, m->changed[i]), t, m->tag_cur[m->changed[i]]);
    if (e->kind == L8_TRACE_OOM || e->kind == L8_TRACE_STEP) {
        begin(x);
        if (e->kind == L8_TRACE_OOM)
            fprintf(x->f, "{\"ph\":\"i\",\"s\":\"p\",\"name\":\"OOM\",\"ts\":%llu.%03u,\"pid\":%d,"
                    "\"tid\":0,\"args\":{\"requested\":%llu,\"reserved\":%llu,\"tag\":",
                    (unsigned long long)(t / 1000), (unsigned)(t % 1000), x->pid,
                    (unsigned long long)e->size, (unsigned long long)e->aux);
        else
            fprintf(x->f, "{\"ph\":\"i\",\"s\":\"p\",\"name\":\"step %llu\",\"ts\":%llu.%03u,"
                    "\"pid\":%d,\"tid\":0,\"args\":{\"step\":%llu,\"tag\":",
                    (unsigned long long)e->aux, (unsigned long long)(t / 1000),
                    (unsigned)(t % 1000), x->pid, (unsigned long long)e->aux);
        json_str(x->f, tm_tag_name(m, e->tag));
        fputs("}}", x->f);
    }
    if (m->reserved_cur != x->last_reserved) {
        x->last_reserved = m->reserved_cur;
        counter(x, "reserved", t, m->reserved_cur);
    }
    if (m->pinned_cur != x->last_pinned) {
        x->last_pinned = m->pinned_cur;
        counter(x, "pinned", t, m->pinned_cur);
    }
}

int trace_cmd_export(int argc, char **argv)
{
    const char *out = NULL, *files[256];
    int nfiles = 0, chrome = 0, rc = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--chrome")) chrome = 1;
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-' || nfiles == 256) {
            fprintf(stderr, "lean8-trace export: unknown option '%s'\n", argv[i]);
            return 2;
        } else files[nfiles++] = argv[i];
    }
    if (!chrome || !out || nfiles == 0) {
        fprintf(stderr, "usage: lean8-trace export --chrome FILE... -o OUT.json\n");
        return 2;
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        perror(out);
        return 1;
    }
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    export_ctx x = { .f = f, .first = 1 };
    int read_any = 0;
    for (int i = 0; i < nfiles; i++) {
        trace_model m;
        x.pid = i;                    /* replaced by the rank once the header is read */
        x.last_reserved = x.last_pinned = 0;
        if (tm_open(&m, files[i])) {
            rc = 1;
            continue;
        }
        x.pid = m.info.rank >= 0 ? m.info.rank : i;
        begin(&x);
        fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"ts\":0,\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"rank %d (pid %u)\"}}", x.pid, m.info.rank, m.info.pid);
        tm_close(&m);
        if (tm_load(&m, files[i], export_hook, &x, NULL)) rc = 1;
        else read_any = 1;
        tm_close(&m);
    }
    fputs("\n]}\n", f);
    if (fclose(f) != 0) {
        perror(out);
        return 1;
    }
    return read_any ? rc : 1;
}
