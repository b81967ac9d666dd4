/* cublaslt.c - the cuBLASLt function table and its status wrapper.
 *
 * runtime/cuda.c opens libcublasLt (l8i_cublaslt_open: dlopen, sonames .13,
 * .12, then CUDA_HOME/lib64); here the entry points ops/gemm.c uses are
 * resolved once with dlsym into l8i_lt. The library is never linked, so
 * liblean8.so has no cublas* undefined symbols (make test-link checks).
 * Optional entries (the status-name helper, the algorithm-configuration API
 * that autotune = 2 uses) stay NULL when the library lacks them; only a
 * missing required entry fails the load.
 *
 * Invariants: l8i_lt is written only inside load_once (pthread_once) and
 * read only after l8i_lt_load returned L8_OK. Status names come from the
 * library when it exports cublasLtGetStatusName, else from our own table;
 * both are static strings, so the last-error record may point at them.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include "ops/cublaslt.h"
#include "runtime/internal.h"

l8_cublaslt_api l8i_lt;

/* 12.0 is the first version that allows beta != 0 with FP8 inputs. */
#define L8_LT_MIN_VERSION 120000

static const l8i_sym k_entries[] = {
#define E(fn, opt) L8I_SYM(l8_cublaslt_api, fn, opt)
    E(cublasLtCreate, 0), E(cublasLtDestroy, 0), E(cublasLtGetVersion, 0),
    E(cublasLtGetStatusName, 1), E(cublasLtMatmulDescCreate, 0), E(cublasLtMatmulDescDestroy, 0),
    E(cublasLtMatmulDescSetAttribute, 0), E(cublasLtMatrixLayoutCreate, 0),
    E(cublasLtMatrixLayoutDestroy, 0), E(cublasLtMatmulPreferenceCreate, 0),
    E(cublasLtMatmulPreferenceDestroy, 0), E(cublasLtMatmulPreferenceSetAttribute, 0),
    E(cublasLtMatmulAlgoGetHeuristic, 0), E(cublasLtMatmul, 0),
    E(cublasLtMatmulAlgoGetIds, 1), E(cublasLtMatmulAlgoInit, 1),
    E(cublasLtMatmulAlgoCapGetAttribute, 1), E(cublasLtMatmulAlgoConfigSetAttribute, 1),
    E(cublasLtMatmulAlgoConfigGetAttribute, 1), E(cublasLtMatmulAlgoCheck, 1),
#undef E
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static l8_status g_status = L8_ERR_NO_DEVICE;
static char g_reason[256] = "not loaded";
static int g_version;

static void load_once(void)
{
    void *h = NULL;
    if (l8i_cublaslt_open(&h) != L8_OK) {
        /* l8i_cublaslt_open put the reason (paths tried) in the last error */
        snprintf(g_reason, sizeof g_reason, "%s", l8_last_error()->message);
        return;
    }
    if (l8i_sym_table_load("libcublasLt", l8i_dlsym_lookup, h, k_entries,
                           sizeof k_entries / sizeof k_entries[0], &l8i_lt, g_reason,
                           sizeof g_reason) != L8_OK)
        return;
    g_version = (int)l8i_lt.cublasLtGetVersion();
    if (g_version < L8_LT_MIN_VERSION) {
        snprintf(g_reason, sizeof g_reason,
                 "libcublasLt version %d is older than 12.0 (needed for FP8 with beta != 0)",
                 g_version);
        return;
    }
    g_status = L8_OK;
}

int l8i_lt_has_algo_config(void)
{
    const l8_cublaslt_api *t = &l8i_lt;
    return g_status == L8_OK && t->cublasLtMatmulAlgoGetIds && t->cublasLtMatmulAlgoInit &&
           t->cublasLtMatmulAlgoCapGetAttribute && t->cublasLtMatmulAlgoConfigSetAttribute &&
           t->cublasLtMatmulAlgoConfigGetAttribute && t->cublasLtMatmulAlgoCheck;
}

l8_status l8i_lt_load(int *version)
{
    pthread_once(&g_once, load_once);
    if (version) *version = g_version;
    if (g_status != L8_OK)
        return l8_error_set(L8_ERR_NO_DEVICE, 0, "", "dlopen", __FILE__, __LINE__,
                            "cuBLASLt: %s", g_reason);
    return L8_OK;
}

const char *l8i_lt_status_name(cublasStatus_t r)
{
    switch (r) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: break;
    }
    if (g_status == L8_OK && l8i_lt.cublasLtGetStatusName) {
        const char *n = l8i_lt.cublasLtGetStatusName(r);
        if (n) return n;
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

l8_status l8i_lt_check(cublasStatus_t r, const char *call, const char *file, int line)
{
    if (r == CUBLAS_STATUS_SUCCESS) return L8_OK;
    l8_status st = r == CUBLAS_STATUS_ALLOC_FAILED ? L8_ERR_OOM : L8_ERR_CUBLAS;
    const char *hint = "";
    switch (r) {
    case CUBLAS_STATUS_NOT_SUPPORTED:
        hint = "the device or this cuBLASLt does not support the configured GEMM";
        break;
    case CUBLAS_STATUS_INVALID_VALUE:
        hint = "cuBLASLt rejected the GEMM's parameters (set CUBLASLT_LOG_MASK=63 for details)";
        break;
    case CUBLAS_STATUS_ARCH_MISMATCH: hint = "the GEMM needs a newer GPU"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: hint = "a kernel failed to launch or run"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: hint = "cuBLASLt could not allocate memory"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: hint = "cuBLASLt is not initialized (no CUDA context?)"; break;
    default: hint = "cuBLASLt call failed"; break;
    }
    return l8_error_set(st, (int)r, l8i_lt_status_name(r), call, file, line, "%s", hint);
}
