LIB_SRCS += alloc/cache.c alloc/provider.c alloc/replay.c alloc/pinned.c alloc/trace.c
