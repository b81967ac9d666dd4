/* lean8-bench - benchmarks, each measured side by side in one run.
 *
 *   lean8-bench alloc [--device D] [--json PATH] [--dump-trace PATH] [--quick]
 *   lean8-bench gemm  [--device D] [--json PATH] [--quick] [--cache FILE]
 *   lean8-bench gemmsmall [--device D] [--json PATH] [--quick]
 *   lean8-bench cast  [--device D] [--json PATH] [--quick]
 *   lean8-bench linear [--device D] [--json PATH] [--quick]
 *   lean8-bench comm  [--device D] [--json PATH] [--quick]
 *   lean8-bench trace [--json PATH] [--quick]
 *   lean8-bench offload [--device D] [--json PATH] [--quick]
 */
#include <stdio.h>
#include <string.h>
#include "tools/bench.h"

static const struct { const char *name; int (*fn)(const bench_opts *); const char *what; } k_cmds[] = {
    { "cast", bench_cast, "FP8 cast, cast+transpose(+dbias), dequantize, transpose vs copy bandwidth,"
                             " aligned and tail shapes" },
    { "linear", bench_linear, "FP8 and bf16 Linear forward + backward on GPU-sized shapes: eager, one"
                                 " CUDA graph, tuned plans; FP8 by stage" },
    { "alloc", bench_alloc, "caching allocator vs cuMemAlloc and cuMemAllocAsync; fragmentation" },
    { "gemm", bench_gemm, "FP8 and bf16 GEMMs through cuBLASLt, heuristic and autotuned" },
    { "gemmsmall", bench_gemm_small, "lean8-train's FP8 GEMMs: cuBLASLt vs lean8's small kernel"
                                       " (l8_gemm_config.small), and cuBLASLt bf16" },
    { "comm", bench_comm, "collectives: the last-dimension rearrangement vs a device copy" },
    { "ddp", bench_ddp, "data parallel: an 8-layer FP8 MLP step, none / after backward / overlapped" },
    { "trace", bench_trace, "memory tracer: recording cost per event; lean8-trace over 10 M events" },
    { "offload", bench_offload, "activation offload on 8 x (Linear + GELU) vs pinned bandwidth" },
};

static int usage(void)
{
    fprintf(stderr, "usage: lean8-bench <benchmark> [--device D] [--json PATH] [--quick]"
                    " [--cache FILE (gemm)]\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(stderr, "  %-8s %s\n", k_cmds[i].name, k_cmds[i].what);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) {
        if (strcmp(argv[1], k_cmds[i].name)) continue;
        bench_opts o;
        if (bench_parse(argc - 2, argv + 2, &o)) return usage();
        return k_cmds[i].fn(&o);
    }
    return usage();
}
