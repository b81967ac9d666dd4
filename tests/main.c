/* main.c - the one test runner: adds every suite, runs those matching --tags.
 *
 *   lean8-tests --tags host     host suites (forking unless CK_FORK=no)
 *   lean8-tests --tags gpu      GPU suites, CK_NOFORK, only when a CUDA device
 *                               is usable; otherwise one line says they were
 *                               skipped and nothing is counted
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tests/tests.h"
#include "runtime/ctx.h"

static uint64_t g_seed;

uint64_t l8_test_seed(void) { return g_seed; }

void l8_rng_init(l8_rng *r, uint64_t salt)
{
    r->s = (g_seed ^ (salt * 0x9E3779B97F4A7C15ull)) | 1;
}

uint64_t l8_rng_next(l8_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

uint64_t l8_rng_below(l8_rng *r, uint64_t n) { return n ? l8_rng_next(r) % n : 0; }

float l8_rng_float(l8_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((l8_rng_next(r) >> 40) * (1.0 / 16777216.0));
}

int l8_test_quick(void) { return getenv("L8_TEST_QUICK") != NULL; }

int main(int argc, char **argv)
{
    const char *tags = "host";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tags") && i + 1 < argc) tags = argv[++i];
        else { fprintf(stderr, "usage: %s [--tags host|gpu|slow]\n", argv[0]); return 2; }
    }
    const char *env_seed = getenv("L8_TEST_SEED");
    g_seed = env_seed ? strtoull(env_seed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    int gpu = strstr(tags, "gpu") != NULL;
    if (gpu) {
        int n = l8_cuda_device_count();
        if (n == 0) {
            printf("gpu suites: SKIPPED (not run, not counted): no usable CUDA device (%s)\n",
                   l8_last_error()->status != L8_OK ? l8_last_error_string() : "none found");
            return 0;
        }
    }
    printf("lean8-tests: tags=%s seed=%llu (L8_TEST_SEED=%llu reproduces)\n", tags,
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);

    SRunner *sr = srunner_create(l8_status_suite());
    srunner_add_suite(sr, l8_alloc_suite());
    srunner_add_suite(sr, l8_pinned_suite());
    srunner_add_suite(sr, l8_trace_suite());
    srunner_add_suite(sr, l8_tensor_suite());
    srunner_add_suite(sr, l8_gpu_suite());
    srunner_add_suite(sr, l8_fp8_suite());
    srunner_add_suite(sr, l8_gemm_suite());
    srunner_add_suite(sr, l8_loss_suite());
    srunner_add_suite(sr, l8_recipe_suite());
    srunner_add_suite(sr, l8_linear_suite());
    srunner_add_suite(sr, l8_checkpoint_suite());
    srunner_add_suite(sr, l8_fmnist_suite());
    srunner_add_suite(sr, l8_params_suite());
    srunner_add_suite(sr, l8_optim_suite());
    srunner_add_suite(sr, l8_gather_suite());
    srunner_add_suite(sr, l8_comm_suite());
    srunner_add_suite(sr, l8_tp_suite());
    srunner_add_suite(sr, l8_ddp_suite());
    srunner_add_suite(sr, l8_interleave_suite());
    srunner_add_suite(sr, l8_abi_suite());
    srunner_add_suite(sr, l8_gemm_cache_suite());
    srunner_add_suite(sr, l8_graph_suite());
    srunner_add_suite(sr, l8_offload_suite());
    srunner_add_suite(sr, l8_zero_suite());
    srunner_add_suite(sr, l8_streams_suite());
    srunner_add_suite(sr, l8_fuzz_suite());
    /* Never initialize CUDA before a fork: GPU suites run in this process. */
    if (gpu) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_tagged(sr, NULL, NULL, tags, NULL, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) { printf("lean8-tests: no test matched tags=%s\n", tags); return 1; }
    return failed ? 1 : 0;
}
