LIB_SRCS += runtime/status.c runtime/cuda.c runtime/ctx.c runtime/tensor.c
LIB_SRCS += runtime/checkpoint.c runtime/ckpt_write.c runtime/ckpt_read.c
LIB_SRCS += runtime/params.c runtime/fp8.c runtime/deps.c
LIB_SRCS += runtime/interleave.c
LIB_SRCS += runtime/ddp.c
LIB_SRCS += runtime/comm.c runtime/comm_host.c runtime/comm_threads.c runtime/comm_tcp.c runtime/comm_nccl.c runtime/bootstrap.c
LIB_SRCS += runtime/graph.c
LIB_SRCS += runtime/offload.c
