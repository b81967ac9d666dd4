# ops/: FP8 formats, kernels, GEMM (issue 3 onward)
OPS_HEADERS :=
