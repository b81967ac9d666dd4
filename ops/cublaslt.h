/* cublaslt.h - the cuBLASLt layer of ops/ (internal, not installed).
 *
 * libcublasLt is opened at run time by runtime/cuda.c (l8i_cublaslt_open);
 * ops/cublaslt.c resolves the entry points lean8 uses into l8i_lt once, with
 * dlsym, so nothing links against cuBLASLt. Every call goes through L8_LT,
 * which turns a cublasStatus_t into an l8_status and keeps the foreign code,
 * its name and the call in the last-error record (L8_ERR_CUBLAS).
 *
 * The member types are taken from the prototypes in the toolkit's
 * cublasLt.h with __typeof__, so a table entry cannot disagree with the
 * header it was built against. Naming a function in __typeof__ neither calls
 * it nor takes its address: no symbol reference reaches the object file.
 */
#ifndef L8_OPS_CUBLASLT_H
#define L8_OPS_CUBLASLT_H

#include <cublasLt.h>             /* types and enums only: nothing links cuBLASLt */
#include "runtime/status.h"

#define L8_LT_ENTRY(fn) __typeof__(fn) *fn

typedef struct l8_cublaslt_api {
    L8_LT_ENTRY(cublasLtCreate);
    L8_LT_ENTRY(cublasLtDestroy);
    L8_LT_ENTRY(cublasLtGetVersion);
    L8_LT_ENTRY(cublasLtGetStatusName);           /* optional: NULL if absent */
    L8_LT_ENTRY(cublasLtMatmulDescCreate);
    L8_LT_ENTRY(cublasLtMatmulDescDestroy);
    L8_LT_ENTRY(cublasLtMatmulDescSetAttribute);
    L8_LT_ENTRY(cublasLtMatrixLayoutCreate);
    L8_LT_ENTRY(cublasLtMatrixLayoutDestroy);
    L8_LT_ENTRY(cublasLtMatmulPreferenceCreate);
    L8_LT_ENTRY(cublasLtMatmulPreferenceDestroy);
    L8_LT_ENTRY(cublasLtMatmulPreferenceSetAttribute);
    L8_LT_ENTRY(cublasLtMatmulAlgoGetHeuristic);
    L8_LT_ENTRY(cublasLtMatmul);
    /* The algorithm-configuration API, for autotune = 2 (gemm_tune.c).
     * Optional: NULL if absent; l8i_lt_has_algo_config says whether all are. */
    L8_LT_ENTRY(cublasLtMatmulAlgoGetIds);
    L8_LT_ENTRY(cublasLtMatmulAlgoInit);
    L8_LT_ENTRY(cublasLtMatmulAlgoCapGetAttribute);
    L8_LT_ENTRY(cublasLtMatmulAlgoConfigSetAttribute);
    L8_LT_ENTRY(cublasLtMatmulAlgoConfigGetAttribute);
    L8_LT_ENTRY(cublasLtMatmulAlgoCheck);
} l8_cublaslt_api;

/* Resolve the table once (thread-safe). L8_OK, or L8_ERR_NO_DEVICE when the
 * library is missing, lacks a required entry point, or is older than 12.0
 * (FP8 with beta != 0 needs 12.0). *version (may be NULL) gets
 * cublasLtGetVersion(). */
l8_status l8i_lt_load(int *version);
/* Valid only after l8i_lt_load returned L8_OK. */
extern l8_cublaslt_api l8i_lt;
/* 1 when the loaded library exports every entry of the algorithm-
 * configuration API (the six optional ones above), else 0 (also before
 * l8i_lt_load succeeded). */
int l8i_lt_has_algo_config(void);

/* CUBLAS_STATUS_SUCCESS -> L8_OK; anything else -> L8_ERR_CUBLAS (or
 * L8_ERR_OOM for ALLOC_FAILED) with the code, its name and `call`. */
l8_status l8i_lt_check(cublasStatus_t r, const char *call, const char *file, int line);
/* Constant name of a cublasStatus_t ("CUBLAS_STATUS_NOT_SUPPORTED"). */
const char *l8i_lt_status_name(cublasStatus_t r);

/* Call through the table: L8_LT(cublasLtMatmulDescCreate, &d, ...) -> l8_status. */
#define L8_LT(fn, ...) l8i_lt_check(l8i_lt.fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

#endif /* L8_OPS_CUBLASLT_H */
