LIB_SRCS += alloc/cache.c alloc/cache_check.c alloc/provider.c alloc/pinned.c alloc/trace.c alloc/trace_file.c alloc/trace_read.c
