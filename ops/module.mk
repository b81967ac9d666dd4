# ops/: FP8 formats, kernels, GEMM (issue 3 onward)
OPS_HEADERS :=
LIB_SRCS += ops/cast.c
OPS_HEADERS += ops/cast.h
LIB_SRCS += ops/gemm.c ops/gemm_tune.c ops/cublaslt.c ops/gemm_host.c ops/launch.c
LIB_SRCS += ops/gemm_cache.c ops/gemm_small.c
OPS_HEADERS += ops/gemm.h
LIB_SRCS += ops/loss.c
OPS_HEADERS += ops/loss.h
LIB_SRCS += ops/optim.c ops/optim_shard.c
OPS_HEADERS += ops/optim.h
LIB_SRCS += ops/elementwise.c ops/recipe.c ops/linear.c ops/gather.c
OPS_HEADERS += ops/elementwise.h ops/recipe.h ops/linear.h ops/gather.h
