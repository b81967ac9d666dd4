/* lean8.h - the umbrella header: include this one.
 *
 * lean8 is a lean C runtime for FP8 training on NVIDIA GPUs: the CUDA Driver
 * API opened at run time, a caching device allocator and pinned-host pool,
 * refcounted tensors, hand-written PTX kernels, cuBLASLt GEMMs, NCCL
 * collectives. Every public name starts with l8_; every function returns an
 * l8_status (see status.h) unless it cannot fail.
 *
 * Installed as include/lean8/lean8.h: #include <lean8.h> with the flags of
 * `pkg-config --cflags lean8` (-I${includedir}/lean8); link with
 * `pkg-config --libs lean8` (liblean8.so) or `--libs lean8-static` (liblean8.a).
 */
#ifndef L8_LEAN8_H
#define L8_LEAN8_H

#include "runtime/status.h"
#include "alloc/alloc.h"
#include "alloc/pinned.h"
#include "alloc/trace.h"
#include "runtime/ctx.h"
#include "runtime/tensor.h"
#include "runtime/params.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/ddp.h"
#include "runtime/graph.h"
#include "runtime/offload.h"
/* ops/: the umbrella is the one runtime header that names them (for users;
 * runtime code itself never includes ops/) */
#include "runtime/fp8.h"
#include "ops/cast.h"
#include "ops/gemm.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/recipe.h"
#include "ops/linear.h"
#include "ops/optim.h"
#include "ops/loss.h"

/* Version of the library this header belongs to. */
#define L8_VERSION_MAJOR 0
#define L8_VERSION_MINOR 1
#define L8_VERSION_PATCH 0

/* l8_version() (the library's version string) is declared in status.h. */

#endif
