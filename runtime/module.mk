LIB_SRCS += runtime/status.c runtime/cuda.c runtime/ctx.c runtime/tensor.c
LIB_SRCS += runtime/checkpoint.c
LIB_SRCS += runtime/params.c
