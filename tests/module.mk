TEST_SRCS += tests/main.c tests/util.c tests/test_status.c tests/test_alloc.c tests/test_pinned.c \
             tests/test_trace.c tests/test_tensor.c tests/test_gpu.c
TEST_SRCS += tests/test_gemm.c
TEST_SRCS += tests/test_fp8.c
TEST_SRCS += tests/test_loss.c
TEST_SRCS += tests/test_checkpoint.c
TEST_SRCS += tests/test_params.c tests/test_optim.c
TEST_SRCS += tests/test_fmnist.c tools/fmnist.c
TEST_SRCS += tests/test_recipe.c tests/test_linear.c tests/test_gather.c
TEST_SRCS += tests/test_offload.c
