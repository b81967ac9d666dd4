/* main.c - the one test runner: adds every suite, runs those matching --tags.
 *
 *   lean8-tests --tags host     host suites (forking unless CK_FORK=no)
 *   lean8-tests --tags gpu      GPU suites, CK_NOFORK, only when a CUDA device
 *                               is usable; otherwise one line says they were
 *                               skipped and nothing is counted
 *   --suites a,b,...            only these suites (names as the run prints
 *                               them), e.g. the rest of a GPU run cut short;
 *                               an unknown or empty name is refused (exit 2)
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

/* Every suite, in the order they run; a suite's name is its function's
 * without l8_ and _suite (the name it gives suite_create). */
#define SUITE(n) { #n, l8_##n##_suite }
static const struct { const char *name; Suite *(*make)(void); } k_suites[] = {
    SUITE(status), SUITE(alloc), SUITE(pinned), SUITE(trace), SUITE(tensor), SUITE(gpu),
    SUITE(fp8), SUITE(gemm), SUITE(loss), SUITE(recipe), SUITE(linear), SUITE(checkpoint),
    SUITE(fmnist), SUITE(params), SUITE(optim), SUITE(gather), SUITE(comm), SUITE(tp),
    SUITE(ddp), SUITE(interleave), SUITE(abi), SUITE(gemm_cache), SUITE(graph), SUITE(offload),
    SUITE(zero), SUITE(streams), SUITE(fuzz),
};
#define NSUITES (sizeof k_suites / sizeof k_suites[0])

/* Marks in use[] each suite the comma-separated list names; 0 (and a
 * message) at the first name that is no suite's (an empty one too). */
static int select_suites(const char *list, int *use)
{
    for (const char *p = list;; p++) {
        size_t k = strcspn(p, ","), i = 0;
        while (i < NSUITES && (strlen(k_suites[i].name) != k || strncmp(p, k_suites[i].name, k)))
            i++;
        if (i == NSUITES) {
            fprintf(stderr, "lean8-tests: --suites: no suite \"%.*s\"\n", (int)k, p);
            return 0;
        }
        use[i] = 1;
        p += k;
        if (!*p) return 1;
    }
}

int main(int argc, char **argv)
{
    const char *tags = "host", *suites = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tags") && i + 1 < argc) tags = argv[++i];
        else if (!strcmp(argv[i], "--suites") && i + 1 < argc) suites = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--tags host|gpu|slow] [--suites NAME,...]\n", argv[0]);
            return 2;
        }
    }
    int use[NSUITES];
    for (size_t i = 0; i < NSUITES; i++) use[i] = !suites;
    if (suites && !select_suites(suites, use)) return 2;
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

    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < NSUITES; i++)
        if (use[i]) srunner_add_suite(sr, k_suites[i].make());
    /* Never initialize CUDA before a fork: GPU suites run in this process. */
    if (gpu) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_tagged(sr, NULL, NULL, tags, NULL, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) { printf("lean8-tests: no test matched tags=%s\n", tags); return 1; }
    return failed ? 1 : 0;
}
