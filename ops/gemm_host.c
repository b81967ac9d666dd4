/* gemm_host.c - the host backend's GEMM: packed, cache-blocked, SIMD, and
 * split over a few threads. It is the arithmetic of l8_gemm on a host
 * context (gemm.c validates, then calls l8i_host_gemm) and what the GPU tests
 * compare cuBLASLt against.
 *
 * Dataflow for D[M,N] = op(A)[M,K] . op(B)[K,N] (see ops/internal.h):
 *
 *   1. pack    op(A) -> Ap: panels of MR = 6 rows, each [K][MR] f32 (rows past
 *              M are zero); op(B) -> Bp: panels of NR = 16 columns, each
 *              [K][NR] f32 (columns past N are zero). Decoding is exact (FP8
 *              through a 256-entry table, bf16 by a shift). The bias-gradient
 *              epilogues sum the packed rows here. Parallel over panels.
 *   2. compute C[Mp][Np] f32 (Mp, Np rounded up to MR, NR): for each block of
 *              KC = 256 k's, for each block of MC_PANELS A panels (96 rows x
 *              256 k = 96 KiB: stays in L2), for each B panel (256 x 16 x 4 =
 *              16 KiB: stays in L1 across the A panels), the MR x NR
 *              micro-kernel keeps its 6 x 16 accumulators in registers for the
 *              whole k block. Parallel over output panels (rows when there are
 *              at least as many row panels as column panels, else columns).
 *   3. epilogue t = ab * C + beta * D + bias (with the GELU epilogue: aux =
 *              round(t), t = gelu(t)), D = round(t * sd), amax of t -
 *              the same partition as 2, so each thread reads its own C.
 *
 * Summation order. Each output is one chain over k in order, 0 .. K-1:
 * acc = acc + a_k * b_k, a fused multiply-add (one rounding) on x86-64 CPUs
 * with AVX2 and FMA, else a multiply and an add (two roundings; also with
 * L8_HOST_SIMD=0). A later k block reloads C and continues the chain, and the
 * threads split outputs, never k: the result does not depend on the blocking
 * or the thread count, only on the kernel (FMA or not).
 *
 * Threads: l8i_host_threads() workers for calls of at least PAR_FLOPS; each
 * parallel phase starts its workers and joins them (no pool: a few tens of
 * microseconds against milliseconds of work). A worker that cannot be
 * started has its share run by the calling thread, so thread creation never
 * fails a GEMM.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ops/internal.h"
#include "runtime/fp8.h"
#include "ops/gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_SIMD 1
#include <immintrin.h>
#endif

#define MR 6
#define NR 16
#define KC 256
#define MC_PANELS 16
#define MAX_THREADS 8
#define PAR_FLOPS 8.0e6            /* 2 M N K below this: one thread */

/* c[MR][ldc] (=, or += when load) the MR x NR product of kc steps of packed
 * a [kc][MR] and b [kc][NR]. */
typedef void (*kern_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                        int load);

/* Portable kernel: the compiler vectorizes the j loop (SSE2 at -O2). */
static void kern_c(int64_t kc, const float *restrict a, const float *restrict b,
                   float *restrict c, int64_t ldc, int load)
{
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = load ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR)
        for (int i = 0; i < MR; i++) {
            const float ai = a[i];
            for (int j = 0; j < NR; j++)
                acc[i][j] += ai * b[j];
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            c[i * ldc + j] = acc[i][j];
}

#ifdef HAVE_X86_SIMD
/* AVX2 + FMA: 12 ymm accumulators (6 rows x 2 vectors of 8), 2 for the B
 * row, 1 broadcast: 15 of 16 registers. Per k: 2 loads, 6 broadcasts, 12
 * FMAs. Bp panels are 64-byte aligned, so the B loads are aligned. */
#define ROW_LOAD(i) \
    c##i##0 = load ? _mm256_loadu_ps(c + (i) * ldc) : _mm256_setzero_ps(); \
    c##i##1 = load ? _mm256_loadu_ps(c + (i) * ldc + 8) : _mm256_setzero_ps()
#define ROW_FMA(i) \
    t = _mm256_broadcast_ss(a + (i)); \
    c##i##0 = _mm256_fmadd_ps(t, b0, c##i##0); \
    c##i##1 = _mm256_fmadd_ps(t, b1, c##i##1)
#define ROW_STORE(i) \
    _mm256_storeu_ps(c + (i) * ldc, c##i##0); \
    _mm256_storeu_ps(c + (i) * ldc + 8, c##i##1)

__attribute__((target("avx2,fma")))
static void kern_avx2(int64_t kc, const float *restrict a, const float *restrict b,
                      float *restrict c, int64_t ldc, int load)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
    ROW_LOAD(0); ROW_LOAD(1); ROW_LOAD(2); ROW_LOAD(3); ROW_LOAD(4); ROW_LOAD(5);
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        b0 = _mm256_load_ps(b);
        b1 = _mm256_load_ps(b + 8);
        ROW_FMA(0); ROW_FMA(1); ROW_FMA(2); ROW_FMA(3); ROW_FMA(4); ROW_FMA(5);
    }
    ROW_STORE(0); ROW_STORE(1); ROW_STORE(2); ROW_STORE(3); ROW_STORE(4); ROW_STORE(5);
}
#undef ROW_LOAD
#undef ROW_FMA
#undef ROW_STORE
#endif

static kern_fn pick_kernel(void)
{
    const char *e = getenv("L8_HOST_SIMD");
    if (e && e[0] == '0')
        return kern_c;
#ifdef HAVE_X86_SIMD
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return kern_avx2;
#endif
    return kern_c;
}

static atomic_int g_threads;       /* 0: not decided yet */

int l8i_host_threads(double flops)
{
    if (flops < PAR_FLOPS)
        return 1;
    int n = atomic_load_explicit(&g_threads, memory_order_relaxed);
    if (n == 0) {
        const char *e = getenv("L8_HOST_THREADS");
        long v = e ? strtol(e, NULL, 10) : 0;
        if (v <= 0)
            v = sysconf(_SC_NPROCESSORS_ONLN);
        n = v < 1 ? 1 : v > MAX_THREADS ? MAX_THREADS : (int)v;
        atomic_store_explicit(&g_threads, n, memory_order_relaxed);
    }
    return n;
}

/* ---- decoding ---- */

typedef struct src {
    const void *p;
    l8_dtype dt;
    float lut[256];               /* FP8 codes -> f32 */
} src;

static void src_init(src *s, const void *p, l8_dtype dt)
{
    s->p = p;
    s->dt = dt;
    if (l8_dtype_is_fp8(dt))
        for (int i = 0; i < 256; i++)
            s->lut[i] = l8_fp8_to_f32((uint8_t)i, dt);
}

/* out[i * ostride] = element (start + i * stride) of s, i < count. */
static void decode(const src *s, size_t start, size_t stride, size_t count, float *out,
                   size_t ostride)
{
    switch (s->dt) {
    case L8_F32: {
        const float *x = (const float *)s->p + start;
        for (size_t i = 0; i < count; i++)
            out[i * ostride] = x[i * stride];
        break;
    }
    case L8_BF16: {
        const uint16_t *x = (const uint16_t *)s->p + start;
        for (size_t i = 0; i < count; i++) {
            uint32_t u = (uint32_t)x[i * stride] << 16;
            memcpy(&out[i * ostride], &u, sizeof u);
        }
        break;
    }
    case L8_F16: {
        const uint16_t *x = (const uint16_t *)s->p + start;
        for (size_t i = 0; i < count; i++)
            out[i * ostride] = l8_f16_to_f32(x[i * stride]);
        break;
    }
    default: {                    /* FP8 (analyze() admits nothing else) */
        const uint8_t *x = (const uint8_t *)s->p + start;
        for (size_t i = 0; i < count; i++)
            out[i * ostride] = s->lut[x[i * stride]];
        break;
    }
    }
}

/* ---- the job ---- */

typedef struct job {
    const l8i_hgemm *g;
    src sa, sb;
    kern_fn kern;
    float *ap, *bp, *c, *biasf;   /* packed A, packed B, C [mp*MR][ldc], bias as f32 */
    int64_t mp, np, ldc;          /* panel counts; row stride of C */
    int split_m;                  /* phase 2/3 partition: row panels (1) or column panels */
    uint32_t amax_bits[MAX_THREADS];
} job;

static void part_range(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi)
{
    *lo = n * part / nparts;
    *hi = n * (part + 1) / nparts;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Panel ip of op(A): dst[k][i] = op(A)[ip*MR + i][k]. */
static void pack_a(const job *j, int64_t ip)
{
    const l8i_hgemm *g = j->g;
    const int64_t K = g->k, m0 = ip * MR, rows = min64(MR, g->m - m0);
    float *dst = j->ap + ip * K * MR;
    if (rows < MR)
        memset(dst, 0, (size_t)(K * MR) * sizeof *dst);
    if (!g->ta) {                 /* A (M,K): row m0+i is contiguous in k */
        for (int64_t i = 0; i < rows; i++)
            decode(&j->sa, (size_t)((m0 + i) * g->lda), 1, (size_t)K, dst + i, MR);
    } else {                      /* A (K,M): each k holds the panel's rows side by side */
        for (int64_t k = 0; k < K; k++)
            decode(&j->sa, (size_t)(k * g->lda + m0), 1, (size_t)rows, dst + k * MR, 1);
    }
    if (g->epi == L8_GEMM_EPI_DBIAS_A)
        for (int64_t i = 0; i < rows; i++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += dst[k * MR + i];
            l8_host_store_f32(g->bias, g->dt_bias, (size_t)(m0 + i), s);
        }
}

/* Panel jp of op(B): dst[k][c] = op(B)[k][jp*NR + c]. */
static void pack_b(const job *j, int64_t jp)
{
    const l8i_hgemm *g = j->g;
    const int64_t K = g->k, n0 = jp * NR, cols = min64(NR, g->n - n0);
    float *dst = j->bp + jp * K * NR;
    if (cols < NR)
        memset(dst, 0, (size_t)(K * NR) * sizeof *dst);
    if (g->tb) {                  /* B (N,K): column n0+c of op(B) is contiguous in k */
        for (int64_t c = 0; c < cols; c++)
            decode(&j->sb, (size_t)((n0 + c) * g->ldb), 1, (size_t)K, dst + c, NR);
    } else {                      /* B (K,N) */
        for (int64_t k = 0; k < K; k++)
            decode(&j->sb, (size_t)(k * g->ldb + n0), 1, (size_t)cols, dst + k * NR, 1);
    }
    if (g->epi == L8_GEMM_EPI_DBIAS_B)
        for (int64_t c = 0; c < cols; c++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += dst[k * NR + c];
            l8_host_store_f32(g->bias, g->dt_bias, (size_t)(n0 + c), s);
        }
}

static void pack_part(void *arg, int part, int nparts)
{
    job *j = arg;
    int64_t lo, hi;
    part_range(j->mp, part, nparts, &lo, &hi);
    for (int64_t ip = lo; ip < hi; ip++)
        pack_a(j, ip);
    part_range(j->np, part, nparts, &lo, &hi);
    for (int64_t jp = lo; jp < hi; jp++)
        pack_b(j, jp);
}

static void store_d(const l8i_hgemm *g, size_t i, float t)
{
    switch (g->dt_d) {
    case L8_F32: ((float *)g->d)[i] = t; break;
    case L8_BF16: ((uint16_t *)g->d)[i] = l8_bf16_from_f32(t); break;
    case L8_F16: ((uint16_t *)g->d)[i] = l8_f16_from_f32(t); break;
    default: ((uint8_t *)g->d)[i] = l8_fp8_from_f32(t * g->sd, g->dt_d); break;
    }
}

static float load_d(const l8i_hgemm *g, size_t i)
{
    if (l8_dtype_is_fp8(g->dt_d))
        return l8_fp8_to_f32(((const uint8_t *)g->d)[i], g->dt_d);
    return l8_host_load_f32(g->d, g->dt_d, i);
}

/* Rows [r0, r1) x columns [c0, c1) of D from C; returns the amax bits. */
static uint32_t epilogue(const job *j, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    const l8i_hgemm *g = j->g;
    uint32_t am = 0;
    for (int64_t m = r0; m < r1; m++) {
        const float *crow = j->c + m * j->ldc;
        const size_t drow = (size_t)(m * g->ldd);
        for (int64_t n = c0; n < c1; n++) {
            float t = g->ab * crow[n];
            if (g->beta != 0.0f)
                t += g->beta * load_d(g, drow + (size_t)n);
            if (j->biasf)
                t += j->biasf[n];
            if (g->aux) {         /* the GELU's input kept, then the GELU */
                l8_host_store_f32(g->aux, g->dt_bias, (size_t)(m * g->ld_aux + n), t);
                t = l8i_gelu_f32(t);
            }
            uint32_t b = l8_amax_bits(t);
            am = b > am ? b : am;
            store_d(g, drow + (size_t)n, t);
        }
    }
    return am;
}

static void compute_part(void *arg, int part, int nparts)
{
    job *j = arg;
    const int64_t K = j->g->k, ldc = j->ldc;
    int64_t m_lo = 0, m_hi = j->mp, n_lo = 0, n_hi = j->np;
    if (j->split_m)
        part_range(j->mp, part, nparts, &m_lo, &m_hi);
    else
        part_range(j->np, part, nparts, &n_lo, &n_hi);
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = min64(KC, K - k0);
        for (int64_t ic = m_lo; ic < m_hi; ic += MC_PANELS) {
            const int64_t ie = min64(ic + MC_PANELS, m_hi);
            for (int64_t jp = n_lo; jp < n_hi; jp++) {
                const float *bp = j->bp + (jp * K + k0) * NR;
                for (int64_t ip = ic; ip < ie; ip++)
                    j->kern(kc, j->ap + (ip * K + k0) * MR, bp, j->c + ip * MR * ldc + jp * NR,
                            ldc, k0 > 0);
            }
        }
    }
    j->amax_bits[part] = epilogue(j, m_lo * MR, min64(m_hi * MR, j->g->m), n_lo * NR,
                                  min64(n_hi * NR, j->g->n));
}

/* ---- threads ---- */

typedef void (*part_fn)(void *arg, int part, int nparts);
typedef struct worker {
    part_fn fn;
    void *arg;
    int part, nparts;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    w->fn(w->arg, w->part, w->nparts);
    return NULL;
}

/* fn(arg, i, nparts) for every i < nparts, part 0 on this thread. */
static void run_parts(part_fn fn, void *arg, int nparts)
{
    pthread_t th[MAX_THREADS];
    worker w[MAX_THREADS];
    int started[MAX_THREADS] = { 0 };
    for (int i = 1; i < nparts; i++) {
        w[i] = (worker){ fn, arg, i, nparts };
        started[i] = pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
    }
    fn(arg, 0, nparts);
    for (int i = 1; i < nparts; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(arg, i, nparts);
    }
}

/* ---- entry ---- */

#define SCRATCH_KEEP ((size_t)64 << 20)

/* Bytes of a x b x c floats rounded up to 64, added to *total; 0 on overflow. */
static int add_floats(int64_t a, int64_t b, int64_t c, size_t *off, size_t *total)
{
    int64_t n;
    size_t bytes;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow((size_t)n, sizeof(float), &bytes) ||
        __builtin_add_overflow(bytes, (size_t)63, &bytes))
        return 0;
    bytes &= ~(size_t)63;
    *off = *total;
    return !__builtin_add_overflow(*total, bytes, total);
}

l8_status l8i_host_gemm(const l8i_hgemm *g)
{
    const int64_t M = g->m, N = g->n, K = g->k;
    job *j = calloc(1, sizeof *j);
    if (!j)
        return L8_FAIL(L8_ERR_OOM, "l8_gemm (host): out of host memory");
    l8_status ret = L8_OK;
    void *mem = NULL;
    j->g = g;
    j->mp = (M + MR - 1) / MR;
    j->np = (N + NR - 1) / NR;
    j->ldc = j->np * NR;
    j->kern = pick_kernel();
    /* one block: packed A, packed B, C, bias (64-byte aligned parts) */
    size_t total = 0, o_ap, o_bp, o_c, o_bias = 0;
    int ok = add_floats(j->mp, K, MR, &o_ap, &total) && add_floats(j->np, K, NR, &o_bp, &total) &&
             add_floats(j->mp * MR, j->ldc, 1, &o_c, &total) &&
             ((g->epi != L8_GEMM_EPI_BIAS && g->epi != L8_GEMM_EPI_BIAS_GELU_AUX) ||
              add_floats(N, 1, 1, &o_bias, &total));
    if (ok && g->scratch && *g->scratch && *g->scratch_bytes >= total)
        mem = *g->scratch;                          /* reuse: no page faults */
    else if (!ok || posix_memalign(&mem, 64, total) != 0)
        mem = NULL;
    if (!mem) {
        ret = L8_FAIL(L8_ERR_OOM, "l8_gemm (host): out of host memory for the packed operands of"
                      " %lld x %lld x %lld", (long long)M, (long long)N, (long long)K);
        goto out;
    }
    j->ap = (float *)((char *)mem + o_ap);
    j->bp = (float *)((char *)mem + o_bp);
    j->c = (float *)((char *)mem + o_c);
    if (g->epi == L8_GEMM_EPI_BIAS || g->epi == L8_GEMM_EPI_BIAS_GELU_AUX)
        j->biasf = (float *)((char *)mem + o_bias);
    src_init(&j->sa, g->a, g->dt_a);
    src_init(&j->sb, g->b, g->dt_b);
    if (j->biasf)
        for (int64_t n = 0; n < N; n++)
            j->biasf[n] = l8_host_load_f32(g->bias, g->dt_bias, (size_t)n);

    int nt = l8i_host_threads(2.0 * (double)M * (double)N * (double)K);
    int64_t most = j->mp > j->np ? j->mp : j->np;
    run_parts(pack_part, j, (int)min64(nt, most));
    j->split_m = j->mp >= j->np;
    int parts = (int)min64(nt, j->split_m ? j->mp : j->np);
    run_parts(compute_part, j, parts);
    if (g->amax) {
        uint32_t am = 0;
        for (int i = 0; i < parts; i++)
            am = j->amax_bits[i] > am ? j->amax_bits[i] : am;
        memcpy(g->amax, &am, sizeof am);
    }
out:
    if (mem && g->scratch && mem != *g->scratch) {
        if (total <= SCRATCH_KEEP) {              /* keep the larger block */
            free(*g->scratch);
            *g->scratch = mem;
            *g->scratch_bytes = total;
            mem = NULL;
        }
    }
    if (mem && (!g->scratch || mem != *g->scratch))
        free(mem);
    free(j);
    return ret;
}
