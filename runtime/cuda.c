/* cuda.c - the driver layer: libcuda.so.1 opened at run time.
 *
 * Nothing in lean8 links against CUDA. On first use, libcuda.so.1 is opened
 * with dlopen, cuGetProcAddress_v2 is looked up with dlsym, and every entry
 * point of l8_cuda_api is resolved through it at a pinned API version, so the
 * versioned ABI (cuMemAlloc_v2, ...) is what we call. The same binary runs on
 * a machine with no driver: l8i_cuda_load then fails with L8_ERR_NO_DEVICE
 * and says why.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/cuda_internal.h"
#include "runtime/ctx.h"              /* declares l8_cuda_device_count, l8_library_info */

/* The API version the table's prototypes are written against: CUDA 12.0,
 * so drivers from 12.0 on work (the H200 machine runs 13.0). */
#define L8_CU_API_VERSION 12000

l8_cuda_api l8i_cu;

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static const l8i_sym k_entries[] = {
/* #fn directly, not through another macro: cuda.h #defines many names to
 * their versioned symbols (cuMemAlloc -> cuMemAlloc_v2), and cuGetProcAddress
 * wants the base name */
#define E(fn) { #fn, offsetof(l8_cuda_api, fn), 0 }
    E(cuInit), E(cuDriverGetVersion), E(cuGetErrorName), E(cuGetErrorString),
    E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceGetAttribute),
    E(cuDeviceTotalMem), E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease),
    E(cuCtxSetCurrent), E(cuCtxGetCurrent), E(cuCtxSynchronize), E(cuMemGetInfo),
    E(cuMemAlloc), E(cuMemFree), E(cuMemAllocAsync), E(cuMemFreeAsync),
    E(cuDeviceGetDefaultMemPool), E(cuMemPoolSetAttribute), E(cuMemHostAlloc), E(cuMemFreeHost),
    E(cuMemcpyHtoDAsync), E(cuMemcpyDtoHAsync), E(cuMemcpyDtoDAsync), E(cuMemsetD8Async),
    E(cuMemsetD32Async), E(cuStreamCreateWithPriority),
    E(cuStreamGetPriority), E(cuCtxGetStreamPriorityRange), E(cuStreamDestroy),
    E(cuStreamSynchronize), E(cuStreamWaitEvent), E(cuStreamQuery), E(cuEventCreate),
    E(cuEventDestroy), E(cuEventRecord), E(cuEventQuery), E(cuEventSynchronize),
    E(cuEventElapsedTime), E(cuModuleLoadDataEx), E(cuModuleUnload), E(cuModuleGetFunction),
    E(cuFuncSetAttribute), E(cuLaunchKernel),
#undef E
};

/* Optional entry points (CUDA graphs): resolved at L8_CU_API_VERSION like the
 * rest, but a driver without them still loads; then none is set. */
static const l8i_sym k_graph_entries[] = {
#define E(fn) { #fn, offsetof(l8_cuda_api, fn), 1 }
    E(cuStreamBeginCapture), E(cuStreamEndCapture), E(cuStreamIsCapturing),
    E(cuThreadExchangeStreamCaptureMode), E(cuGraphInstantiateWithFlags), E(cuGraphExecUpdate),
    E(cuGraphUpload), E(cuGraphLaunch), E(cuGraphExecDestroy), E(cuGraphDestroy),
#undef E
};
static int g_has_graphs;

/* Optional one by one: launch attributes (CUDA 12.0 drivers have them), a
 * graph's kernel nodes read back, child graph nodes (a repeat launch), the
 * clusters' occupancy. */
static const l8i_sym k_optional_entries[] = {
#define E(fn) { #fn, offsetof(l8_cuda_api, fn), 1 }
    E(cuLaunchKernelEx), E(cuGraphGetNodes), E(cuGraphNodeGetType),
    E(cuGraphKernelNodeGetAttribute), E(cuGraphCreate), E(cuGraphAddChildGraphNode),
    E(cuOccupancyMaxActiveClusters),
#undef E
};

int l8i_cuda_has_graphs(void) { return g_has_graphs; }

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static l8_status g_load_status = L8_ERR_NO_DEVICE;
static char g_load_reason[512] = "not loaded";
static int g_device_count;

/* cuGetProcAddress at the pinned API version: the versioned ABI of each
 * name (cuMemAlloc -> cuMemAlloc_v2), NULL when the driver lacks it. */
static get_proc_fn g_get_proc;
static void *driver_lookup(void *unused, const char *name)
{
    (void)unused;
    void *fn = NULL;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = g_get_proc(name, &fn, L8_CU_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    return r == CUDA_SUCCESS && q == CU_GET_PROC_ADDRESS_SUCCESS ? fn : NULL;
}

l8_status l8i_sym_table_load(const char *lib, l8i_lookup_fn lookup, void *ctx, const l8i_sym *e,
                             size_t n, void *table, char *why, size_t why_n)
{
    for (size_t i = 0; i < n; i++) {
        void *fn = lookup(ctx, e[i].name);
        if (!fn && !e[i].optional) {
            snprintf(why, why_n, "%s has no %s", lib, e[i].name);
            return L8_ERR_NO_DEVICE;
        }
        /* Object pointer -> function pointer through the table's bytes: the
         * POSIX dlsym idiom, without a cast ISO C does not define. */
        *(void **)((char *)table + e[i].off) = fn;
    }
    return L8_OK;
}

void *l8i_dlsym_lookup(void *handle, const char *name) { return dlsym(handle, name); }

/* All graph entry points or none (a partial set would be worse than none). */
static void resolve_graph_entries(void)
{
    l8_cuda_api t = l8i_cu;
    char why[128];
    size_t n = sizeof k_graph_entries / sizeof k_graph_entries[0];
    if (l8i_sym_table_load("the driver", driver_lookup, NULL, k_graph_entries, n, &t, why,
                           sizeof why) != L8_OK)
        return;
    for (size_t i = 0; i < n; i++)
        if (!*(void **)((char *)&t + k_graph_entries[i].off)) return;
    l8i_cu = t;
    g_has_graphs = 1;
}

static void load_once(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_load_reason, sizeof g_load_reason, "cannot open libcuda.so.1 (%s)", e ? e : "?");
        return;
    }
    get_proc_fn get_proc = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!get_proc) {
        snprintf(g_load_reason, sizeof g_load_reason,
                 "libcuda.so.1 has no cuGetProcAddress_v2: driver older than CUDA 12.0");
        return;
    }
    g_get_proc = get_proc;
    if (l8i_sym_table_load("the driver", driver_lookup, NULL, k_entries,
                           sizeof k_entries / sizeof k_entries[0], &l8i_cu, g_load_reason,
                           sizeof g_load_reason) != L8_OK)
        return;
    resolve_graph_entries();
    if (l8i_sym_table_load("the driver", driver_lookup, NULL, k_optional_entries,
                           sizeof k_optional_entries / sizeof k_optional_entries[0], &l8i_cu,
                           g_load_reason, sizeof g_load_reason) != L8_OK)
        return;                   /* unreachable: every entry is optional */
    CUresult r = l8i_cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        l8i_cu.cuGetErrorName(r, &name);
        snprintf(g_load_reason, sizeof g_load_reason, "cuInit failed with %s (%d)", name, (int)r);
        return;
    }
    r = l8i_cu.cuDeviceGetCount(&g_device_count);
    if (r != CUDA_SUCCESS || g_device_count <= 0) {
        g_device_count = 0;
        snprintf(g_load_reason, sizeof g_load_reason, "the driver reports no CUDA device");
        return;
    }
    g_load_status = L8_OK;
    g_load_reason[0] = '\0';
}

l8_status l8i_cuda_load(void)
{
    pthread_once(&g_once, load_once);
    if (g_load_status != L8_OK)
        return l8_error_set(L8_ERR_NO_DEVICE, 0, "", "dlopen", __FILE__, __LINE__, "%s",
                            g_load_reason);
    return L8_OK;
}

int l8_cuda_device_count(void)
{
    return l8i_cuda_load() == L8_OK ? g_device_count : 0;
}

l8_status l8i_cu_check(CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS) return L8_OK;
    const char *name = "CUDA_ERROR_UNKNOWN", *text = "";
    if (l8i_cu.cuGetErrorName) l8i_cu.cuGetErrorName(r, &name);
    if (l8i_cu.cuGetErrorString) l8i_cu.cuGetErrorString(r, &text);
    l8_status st = (r == CUDA_ERROR_OUT_OF_MEMORY) ? L8_ERR_OOM : L8_ERR_CUDA;
    return l8_error_set(st, (int)r, name, call, file, line, "%s", text ? text : "");
}

/* ---- cuBLASLt and NCCL: opened lazily, the same way ---- */

typedef struct lazy_lib {
    pthread_once_t once;
    void *handle;
    int version;
    char where[256];              /* the path opened, or why nothing was */
} lazy_lib;

static lazy_lib g_cublaslt = { PTHREAD_ONCE_INIT, NULL, 0, "" };
static lazy_lib g_nccl = { PTHREAD_ONCE_INIT, NULL, 0, "" };

/* Try each soname, then the same names under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64 (toolkits often sit outside the loader's path). */
static void *open_first(const char *const *names, char *where, size_t n)
{
    const char *home = getenv("CUDA_HOME");
    const char *dirs[] = { NULL, home, "/usr/local/cuda", "/usr/lib/x86_64-linux-gnu" };
    char path[512], tried[256] = "";
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        for (size_t i = 0; names[i]; i++) {
            if (d == 0) snprintf(path, sizeof path, "%s", names[i]);
            else if (!dirs[d]) continue;
            else snprintf(path, sizeof path, "%s/%s%s", dirs[d], d == 3 ? "" : "lib64/", names[i]);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) { snprintf(where, n, "%.250s", path); return h; }
            if (!tried[0]) { const char *e = dlerror(); snprintf(tried, sizeof tried, "%.200s", e ? e : path); }
        }
    }
    snprintf(where, n, "not found (%.200s)", tried);
    return NULL;
}

static void cublaslt_once(void)
{
    static const char *const names[] = { "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL };
    g_cublaslt.handle = open_first(names, g_cublaslt.where, sizeof g_cublaslt.where);
    if (!g_cublaslt.handle) return;
    size_t (*ver)(void) = (size_t (*)(void))dlsym(g_cublaslt.handle, "cublasLtGetVersion");
    if (ver) g_cublaslt.version = (int)ver();
}

static void nccl_once(void)
{
    static const char *const names[] = { "libnccl.so.2", NULL };
    g_nccl.handle = open_first(names, g_nccl.where, sizeof g_nccl.where);
    if (!g_nccl.handle) return;
    int (*ver)(int *) = (int (*)(int *))dlsym(g_nccl.handle, "ncclGetVersion");
    int v = 0;
    if (ver && ver(&v) == 0) g_nccl.version = v;
}

static l8_status lazy_result(lazy_lib *lib, const char *what, void **handle)
{
    if (!lib->handle)
        return l8_error_set(L8_ERR_NO_DEVICE, 0, "", "dlopen", __FILE__, __LINE__, "%s: %s", what,
                            lib->where);
    *handle = lib->handle;
    return L8_OK;
}

l8_status l8i_cublaslt_open(void **handle)
{
    pthread_once(&g_cublaslt.once, cublaslt_once);
    return lazy_result(&g_cublaslt, "cuBLASLt", handle);
}

l8_status l8i_nccl_open(void **handle)
{
    pthread_once(&g_nccl.once, nccl_once);
    return lazy_result(&g_nccl, "NCCL", handle);
}

l8_status l8_library_info(l8_library lib, int *version, const char **where)
{
    L8_ARG(version != NULL);
    void *h = NULL;
    const char *w = "";
    l8_status st;
    *version = 0;
    switch (lib) {
    case L8_LIB_DRIVER:
        st = l8i_cuda_load();
        w = st == L8_OK ? "libcuda.so.1" : g_load_reason;
        if (st == L8_OK) st = L8_CU(cuDriverGetVersion, version);
        break;
    case L8_LIB_CUBLASLT:
        st = l8i_cublaslt_open(&h);
        w = g_cublaslt.where;
        *version = g_cublaslt.version;
        break;
    case L8_LIB_NCCL:
        st = l8i_nccl_open(&h);
        w = g_nccl.where;
        *version = g_nccl.version;
        break;
    default:
        return L8_FAIL(L8_ERR_INVALID_ARG, "unknown library %d", (int)lib);
    }
    if (where) *where = w;
    return st;
}
