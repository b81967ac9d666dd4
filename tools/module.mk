TOOLS += lean8-info lean8-bench lean8-train
# lean8-bench: one binary, one file per subcommand
BENCH_SRCS += tools/lean8-bench.c tools/bench_util.c tools/bench_alloc.c
BENCH_SRCS += tools/bench_gemm.c tools/bench_cast.c tools/bench_linear.c
# Fashion-MNIST loader: linked into lean8-train (the Makefile's rule uses
# TRAIN_SRCS) and into the test binary (tests/module.mk)
TRAIN_SRCS += tools/fmnist.c
BENCH_SRCS += tools/bench_offload.c
