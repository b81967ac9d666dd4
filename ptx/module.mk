PTX_SRCS += ptx/copy.ptx ptx/gather.ptx
PTX_SRCS += ptx/cast.ptx ptx/cast_transpose.ptx ptx/transpose.ptx ptx/dequantize.ptx ptx/scale_update.ptx
PTX_SRCS += ptx/loss.ptx
PTX_SRCS += ptx/optim.ptx
PTX_SRCS += ptx/elementwise.ptx
PTX_SRCS += ptx/interleave.ptx
