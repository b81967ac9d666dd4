PTX_SRCS += ptx/copy.ptx ptx/gather.ptx
PTX_SRCS += ptx/cast.ptx ptx/dequantize.ptx ptx/scale_update.ptx
PTX_SRCS += ptx/loss.ptx
# Templates (ptx/<name>.ptx.in, expanded by ptx/ptxgen.awk into build/ptx/<name>.ptx)
PTX_TMPLS += ptx/cast_transpose.ptx.in ptx/cast_transpose_sm.ptx.in ptx/transpose.ptx.in
PTX_TMPLS += ptx/cast_transpose_strip.ptx.in
PTX_TMPLS += ptx/interleave.ptx.in ptx/optim.ptx.in ptx/gemm_small.ptx.in
PTX_TMPLS += ptx/elementwise.ptx.in
