/* trace_plot.c - `lean8-trace plot FILE -o OUT.svg`: an SVG timeline of
 * allocated memory by tag (stacked areas), reserved memory (a line), step
 * marks (thin vertical lines) and OOMs (red marks).
 *
 * Size stays bounded for any trace: time is cut into at most N buckets
 * (default 400). Each bucket keeps the bytes by tag at the moment its total
 * was highest (the model's snapshot undo log, reset per bucket), so the
 * stack at a bucket is a real state and every peak survives; reserved keeps
 * its per-bucket maximum. Buckets start 1 us wide and double (merging pairs,
 * keeping the higher) whenever the trace outgrows them, so one pass
 * suffices and the file may still be growing. The top K tags (by their
 * highest bucket value) get colours, the rest are stacked as "other".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/trace_model.h"

static const char *k_colours[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#aec7e8",
                                   "#ffbb78", "#98df8a" };
#define NCOLOURS (int)(sizeof k_colours / sizeof k_colours[0])
#define OTHER_COLOUR "#c7c7c7"
#define RESERVED_COLOUR "#000000"

typedef struct bucket {
    int filled;
    uint64_t total, reserved;
    uint64_t *tags;               /* bytes by tag at the bucket's highest total */
    uint32_t ntags;
} bucket;

typedef struct plot {
    bucket *b;
    int nb;                       /* capacity (N) */
    int cur;                      /* the open bucket */
    uint64_t width;               /* ns per bucket */
    int started;
    uint64_t res_max;             /* reserved maximum in the open bucket */
    tm_snap snap;
    uint64_t *steps, *ooms;
    size_t nsteps, cap_steps, nooms, cap_ooms;
} plot;

static void *checked(void *q)
{
    if (!q) {
        fprintf(stderr, "lean8-trace plot: out of host memory\n");
        exit(1);
    }
    return q;
}

static void *xalloc(void *p, size_t n) { return checked(realloc(p, n ? n : 1)); }

/* n zeroed elements of size es (at least one: never NULL). */
static void *xzalloc(size_t n, size_t es) { return checked(calloc(n ? n : 1, es)); }

/* Merge a state (total, tags, reserved) into bucket i, keeping the higher. */
static void merge_into(bucket *b, uint64_t total, const uint64_t *tags, uint32_t ntags,
                       uint64_t reserved)
{
    if (!b->filled || total > b->total) {
        b->tags = xalloc(b->tags, ntags * sizeof *b->tags);
        memcpy(b->tags, tags, ntags * sizeof *b->tags);
        b->ntags = ntags;
        b->total = total;
    }
    if (!b->filled || reserved > b->reserved) b->reserved = reserved;
    b->filled = 1;
}

static void close_bucket(plot *p, trace_model *m)
{
    uint64_t *tags = xalloc(NULL, m->ntags * sizeof *tags);
    tm_snap_read(m, &p->snap, tags);
    merge_into(&p->b[p->cur], p->snap.best, tags, m->ntags, p->res_max);
    free(tags);
}

static void halve(plot *p)
{
    for (int i = 0; i < p->nb / 2; i++) {
        bucket a = p->b[2 * i], c = p->b[2 * i + 1];
        bucket n = { 0 };
        if (a.filled) merge_into(&n, a.total, a.tags, a.ntags, a.reserved);
        if (c.filled) merge_into(&n, c.total, c.tags, c.ntags, c.reserved);
        free(a.tags);
        free(c.tags);
        p->b[i] = n;
    }
    for (int i = p->nb / 2; i < p->nb; i++) p->b[i] = (bucket){ 0 };
    p->width *= 2;
    p->cur /= 2;
}

static void push(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = xalloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = x;
}

static void plot_hook(void *user, trace_model *m, const l8_trace_event *e)
{
    plot *p = user;
    uint64_t t = e->time_ns;
    if (e->kind == L8_TRACE_STEP) push(&p->steps, &p->nsteps, &p->cap_steps, t);
    if (e->kind == L8_TRACE_OOM) push(&p->ooms, &p->nooms, &p->cap_ooms, t);
    if (!p->started) {
        p->started = 1;
        tm_snap_reset(m, &p->snap);
        p->res_max = m->reserved_cur;
    }
    if (t / p->width != (uint64_t)p->cur) {
        /* This event opens a later bucket; it is credited to the one it
         * closes (one event early: peaks stay, a bucket's width late). */
        close_bucket(p, m);
        while (t / p->width >= (uint64_t)p->nb) halve(p);
        int idx = (int)(t / p->width);
        for (int i = p->cur + 1; i < idx; i++)    /* quiet stretch: the state held */
            merge_into(&p->b[i], m->alloc_cur, m->tag_cur, m->ntags, m->reserved_cur);
        if (idx != p->cur) {
            p->cur = idx;
            tm_snap_reset(m, &p->snap);
            p->res_max = m->reserved_cur;
        }
    }
    if (m->reserved_cur > p->res_max) p->res_max = m->reserved_cur;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '&') fputs("&amp;", f);
        else if (c < 0x20 || c >= 0x7F) fputc('?', f);   /* tags need not be UTF-8 */
        else fputc(c, f);
    }
}

/* A "nice" axis step of about range/n. */
static double nice_step(double range, int n)
{
    double raw = range / n, p = 1;
    while (p * 10 <= raw) p *= 10;
    while (p > raw) p /= 10;
    return raw / p < 2 ? 2 * p : raw / p < 5 ? 5 * p : 10 * p;
}

enum { W = 1200, H = 640, L = 90, R = 330, T = 50, B = 60 };

static void render(plot *p, trace_model *m, FILE *f, int top)
{
    int n = p->cur + 1;
    uint32_t nt = m->ntags;
    /* series: top tags by their highest bucket value */
    uint64_t *best = xzalloc(nt, sizeof *best);
    uint64_t ymax = 1;
    for (int i = 0; i < n; i++) {
        bucket *b = &p->b[i];
        for (uint32_t k = 0; k < b->ntags && k < nt; k++)   /* tags only grow: b->ntags <= nt */
            if (b->tags[k] > best[k]) best[k] = b->tags[k];
        if (b->total > ymax) ymax = b->total;
        if (b->reserved > ymax) ymax = b->reserved;
    }
    uint32_t *ord = xalloc(NULL, nt * sizeof *ord);
    tm_order_desc(best, nt, ord);
    int ns = 0;
    while (ns < top && ns < NCOLOURS && (uint32_t)ns < nt && best[ord[ns]]) ns++;
    int has_other = (uint32_t)ns < nt && best[ord[ns]] > 0;
    double span = (double)p->width * n;
    const char *unit = "MiB";
    double ud = 1048576.0;
    if (ymax >= (1ull << 30)) { unit = "GiB"; ud = 1073741824.0; }
    double yscale = (H - T - B) / ((double)ymax * 1.05), xscale = (W - L - R) / span;
#define X(t) (L + (t) * xscale)
#define Y(v) (H - B - (double)(v) * yscale)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n<text x=\"%d\" y=\"24\" "
            "font-size=\"15\">", W, H, L);
    xml_text(f, m->path);
    fprintf(f, " - rank %d, %llu events, allocated by tag (stacked), reserved (line)</text>\n",
            m->info.rank, (unsigned long long)m->events);
    /* stacked areas, bottom first: series 0..ns-1, then other */
    double *cum = xzalloc((size_t)n, sizeof *cum);
    for (int s = 0; s <= ns; s++) {
        if (s == ns && !has_other) break;
        fprintf(f, "<polygon fill=\"%s\" stroke=\"none\" points=\"", s < ns ? k_colours[s] : OTHER_COLOUR);
        double *top_v = xalloc(NULL, (size_t)n * sizeof *top_v);
        for (int i = 0; i < n; i++) {
            bucket *b = &p->b[i];
            double v = 0;
            if (s < ns) v = ord[s] < b->ntags ? (double)b->tags[ord[s]] : 0;
            else {
                v = (double)b->total;
                for (int k = 0; k < ns; k++) if (ord[k] < b->ntags) v -= (double)b->tags[ord[k]];
            }
            top_v[i] = cum[i] + v;
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(p->width * (double)i), Y(top_v[i]),
                    X(p->width * (double)(i + 1)), Y(top_v[i]));
        }
        for (int i = n - 1; i >= 0; i--)
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(p->width * (double)(i + 1)), Y(cum[i]),
                    X(p->width * (double)i), Y(cum[i]));
        fputs("\"/>\n", f);
        memcpy(cum, top_v, (size_t)n * sizeof *cum);
        free(top_v);
    }
    /* reserved */
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", RESERVED_COLOUR);
    for (int i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(p->width * (double)i), Y(p->b[i].reserved),
                X(p->width * (double)(i + 1)), Y(p->b[i].reserved));
    fputs("\"/>\n", f);
    /* steps (at most 200 drawn) and OOMs */
    size_t every = p->nsteps / 200 + 1;
    for (size_t i = 0; i < p->nsteps; i += every)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#666666\" "
                "stroke-width=\"0.5\" stroke-dasharray=\"2,3\"/>\n", X((double)p->steps[i]), T,
                X((double)p->steps[i]), H - B);
    for (size_t i = 0; i < p->nooms && i < 1000; i++)
        fprintf(f, "<path d=\"M%.1f %d l-6 -10 h12 z\" fill=\"#ff0000\"><title>OOM</title></path>\n",
                X((double)p->ooms[i]), T + 10);
    /* axes */
    fprintf(f, "<path d=\"M%d %d V%d H%d\" fill=\"none\" stroke=\"#333333\"/>\n", L, T, H - B, W - R);
    double ys = nice_step((double)ymax * 1.05 / ud, 6);
    for (double v = 0; v * ud <= (double)ymax * 1.05; v += ys)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n", L - 6,
                Y(v * ud) + 4, v, unit);
    double xs = nice_step(span / 1e9, 8);
    for (double v = 0; v * 1e9 <= span; v += xs)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g s</text>\n", X(v * 1e9),
                H - B + 18, v);
    /* legend */
    int ly = T;
    for (int s = 0; s <= ns + 1; s++) {
        if (s == ns && !has_other) continue;
        const char *col = s < ns ? k_colours[s] : s == ns ? OTHER_COLOUR : RESERVED_COLOUR;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"%d\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">", W - R + 20, ly, s == ns + 1 ? 3 : 14, col, W - R + 40,
                ly + 11);
        if (s < ns) {
            char buf[32];
            xml_text(f, tm_tag_name(m, ord[s]));
            fprintf(f, " (max %s)", tm_bytes(best[ord[s]], buf, sizeof buf));
        } else {
            fputs(s == ns ? "other tags" : "reserved", f);
        }
        fputs("</text>\n", f);
        ly += 20;
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#666666\">%zu step marks, %zu OOMs, %d buckets of "
            "%.3g ms</text>\n</svg>\n", W - R + 20, ly + 10, p->nsteps, p->nooms, n,
            (double)p->width / 1e6);
#undef X
#undef Y
    free(cum);
    free(best);
    free(ord);
}

int trace_cmd_plot(int argc, char **argv)
{
    const char *path = NULL, *out = NULL;
    int nb = 400, top = 10;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--buckets") && i + 1 < argc) nb = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--top") && i + 1 < argc) top = atoi(argv[++i]);
        else if (argv[i][0] == '-' || path) path = NULL, i = argc;
        else path = argv[i];
    }
    if (!path || !out || nb < 2 || nb > 100000 || top < 1) {
        fprintf(stderr, "usage: lean8-trace plot FILE -o OUT.svg [--buckets N (2..100000)] "
                "[--top N]\n");
        return 2;
    }
    nb &= ~1;                                   /* halving merges pairs */
    plot p = { .nb = nb, .width = 1000 };       /* 1 us to start */
    p.b = xzalloc((size_t)nb, sizeof *p.b);
    trace_model m;
    int rc = tm_load(&m, path, plot_hook, &p, &p.snap);
    if (rc == 0) {
        if (p.started) close_bucket(&p, &m);
        FILE *f = fopen(out, "w");
        if (!f) {
            perror(out);
            rc = 1;
        } else {
            render(&p, &m, f, top);
            if (fclose(f) != 0) {
                perror(out);
                rc = 1;
            }
        }
    }
    for (int i = 0; i < nb; i++) free(p.b[i].tags);
    free(p.b);
    free(p.steps);
    free(p.ooms);
    tm_snap_free(&p.snap);
    tm_close(&m);
    return rc;
}
