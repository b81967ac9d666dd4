/* status.h - lean8 status codes, the thread-local last-error record, and the
 * checking macros every file uses.
 *
 * Every public function returns an l8_status. Caller mistakes, environment
 * failures and internal errors are distinct ranges so a caller can tell
 * "I passed something wrong" from "the machine said no" from "lean8 has a bug".
 *
 * The last error is thread-local and owned by the library (the pointer returned
 * by l8_last_error() stays valid until the next lean8 call that fails on the
 * same thread). Library code never exits or aborts.
 */
#ifndef L8_STATUS_H
#define L8_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define L8_NODISCARD __attribute__((warn_unused_result))
#define L8_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define L8_NODISCARD
#define L8_PRINTF(f, a)
#endif

/* Append-only; values are part of the ABI (the Fortran module mirrors them). */
typedef enum l8_status {
    L8_OK = 0,
    /* caller mistakes: 1..99 */
    L8_ERR_INVALID_ARG = 1,   /* NULL where not allowed, bad shape or size,
                                 dtype mismatch, out-of-range index          */
    L8_ERR_UNSUPPORTED = 2,   /* valid but not supported here: a combination,
                                 an alignment or a device lean8 cannot serve */
    L8_ERR_STATE = 3,         /* object not in a state that allows the call  */
    /* environment failures: 100..199 */
    L8_ERR_OOM = 100,         /* device, pinned or host memory exhausted       */
    L8_ERR_CUDA = 101,        /* driver call failed (CUresult kept)            */
    L8_ERR_CUBLAS = 102,      /* cuBLASLt call failed (cublasStatus_t kept)    */
    L8_ERR_NCCL = 103,        /* NCCL call failed (ncclResult_t kept)          */
    L8_ERR_IO = 104,          /* file or socket I/O                            */
    L8_ERR_TIMEOUT = 105,     /* a peer or collective never completed          */
    L8_ERR_NO_DEVICE = 106,   /* no driver, no GPU, or library not loadable    */
    L8_ERR_COMM = 107,        /* peer died / communicator aborted              */
    /* lean8's own fault: 200.. */
    L8_ERR_INTERNAL = 200
} l8_status;

/* The record behind l8_last_error(). All strings are owned by the library. */
typedef struct l8_error {
    l8_status status;
    int foreign_code;          /* CUresult / cublasStatus_t / ncclResult_t / errno; 0 if none */
    const char *foreign_name;  /* e.g. "CUDA_ERROR_OUT_OF_MEMORY"; "" if none */
    const char *call;          /* the failing call, e.g. "cuMemAlloc_v2"; "" if none */
    const char *file;          /* source file of the failure */
    int line;
    const char *message;       /* one human sentence (may be long for OOM) */
} l8_error;

/* Short constant name of a status ("L8_ERR_OOM"). Never NULL. */
const char *l8_status_name(l8_status st);

/* 1 for caller mistakes, 0 otherwise. */
int l8_status_is_caller_error(l8_status st);

/* The calling thread's last error. Never NULL; status L8_OK if none since
 * l8_error_clear(). Valid until the next failing lean8 call on this thread. */
const l8_error *l8_last_error(void);

/* The last error as one line: "L8_ERR_CUDA: cuMemAlloc_v2 failed with
 * CUDA_ERROR_OUT_OF_MEMORY (2) at alloc/cache.c:120: <message>". Library-owned. */
const char *l8_last_error_string(void);

/* Reset the calling thread's last error to L8_OK ("no error"). */
void l8_error_clear(void);

/* Record an error and return st. For library code and extensions; the
 * message is formatted with printf rules and truncated to 2 KiB. */
l8_status l8_error_set(l8_status st, int foreign_code, const char *foreign_name,
                       const char *call, const char *file, int line,
                       const char *fmt, ...) L8_PRINTF(7, 8);

/* l8_error_set for bindings that cannot call a variadic C function (Fortran):
 * records `message` as it is (truncated to 2 KiB) under `call` (may be NULL),
 * with no foreign error and no source location (the one-line form then ends
 * with the message). Returns st. */
l8_status l8_error_set_text(l8_status st, const char *call, const char *message);

/* The constant name of an errno value ("ENOENT"), "errno" for others: the
 * foreign_name of L8_ERR_IO records. */
const char *l8_errno_name(int e);

/* The library's version string ("0.1.0"), for checking header vs library
 * (lean8.h defines L8_VERSION_MAJOR/MINOR/PATCH). */
const char *l8_version(void);

/* ---- checking macros (also usable by embedders) ---- */

/* Fail with a caller error: return l8_error_set(...). */
#define L8_FAIL(st, ...) l8_error_set((st), 0, "", "", __FILE__, __LINE__, __VA_ARGS__)

/* Return form: propagate a failing status unchanged (record already set). */
#define L8_CHECK(expr) do { l8_status l8__s = (expr); if (l8__s != L8_OK) return l8__s; } while (0)

/* goto form, for functions holding resources: st = expr; on failure jump to label. */
#define L8_TRY(st, expr, label) do { (st) = (expr); if ((st) != L8_OK) goto label; } while (0)

/* Argument check: on false, record L8_ERR_INVALID_ARG with the condition text. */
#define L8_ARG(cond) do { if (!(cond)) return L8_FAIL(L8_ERR_INVALID_ARG, "invalid argument: %s", #cond); } while (0)

/* The clang static analyzer reads one file at a time, so it cannot see that
 * l8_error_set returns its st: it would follow "failed, yet L8_OK" paths out
 * of every L8_FAIL. Under the analyzer only, the call says so itself (st is
 * evaluated twice there; the compiled code is unchanged). */
#ifdef __clang_analyzer__
#define l8_error_set(st, ...) (l8_error_set((st), __VA_ARGS__), (st))
#endif

#ifdef __cplusplus
}
#endif
#endif /* L8_STATUS_H */
