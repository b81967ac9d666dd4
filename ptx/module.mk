PTX_SRCS += ptx/copy.ptx
