LIB_SRCS += runtime/status.c runtime/cuda.c runtime/ctx.c runtime/tensor.c
LIB_SRCS += runtime/checkpoint.c runtime/ckpt_write.c runtime/ckpt_read.c
LIB_SRCS += runtime/params.c
LIB_SRCS += runtime/offload.c
