# lean8 - one non-recursive make. Each folder adds its sources in module.mk.
#
#   make            library (build/liblean8.{a,so}), tools, tests
#   make test       build and run every Check suite (installs Check if missing),
#                   host suites again under valgrind and built with ASan,
#                   UBSan and TSan, GPU suites when a GPU is present, and
#                   ptxas over every PTX module (ptx/*.ptx and
#                   the build/ptx/*.ptx generated from ptx/*.ptx.in), and
#                   the PTX kernels' logic on the CPU (tools/ptxsim.py), and
#                   the clang static analyzer over the library (test-analyze:
#                   any finding fails; installs clang and clang-tools if missing)
#   make run        the main job: lean8-train on Fashion-MNIST (RUN_ARGS=... for flags)
#   make info       lean8-info: devices, libraries, allocator self-check
#   make bench      lean8-bench alloc, cast, gemm, offload
#   make install    PREFIX=/usr/local DESTDIR=
#   V=1             print full command lines
.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
# keep intermediates (the embedded-PTX .S files, tool objects): no "rm build/..." after a build
.SECONDARY:
.SUFFIXES:

BUILD     ?= build
PREFIX    ?= /usr/local
DESTDIR   ?=
CUDA_HOME ?= /usr/local/cuda
CC        ?= cc
# Fortran compiler (make's default FC is f77): the module is built when it exists
ifeq ($(origin FC),default)
FC := gfortran
endif
HAVE_FC := $(shell command -v $(FC) 2>/dev/null)
VERSION   := 0.1.0
L8_DEBUG  ?= 1

Q := $(if $(V),,@)
say = $(if $(V),,@printf '  %-7s %s\n' $(1) $(2);)

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -fPIC -pthread $(WARN) $(if $(filter 1,$(WERROR) $(CI)),-Werror)
CPPFLAGS += -I. -I$(BUILD)/gen -D_GNU_SOURCE -DL8_DEBUG=$(L8_DEBUG) -DL8_VERSION='"$(VERSION)"' \
            -isystem $(CUDA_HOME)/include
LDLIBS   := -ldl -lm -pthread

# Check: CHECK_PREFIX (the GPU machine's setup.sh), else pkg-config, else the system.
ifneq ($(CHECK_PREFIX),)
CHECK_CFLAGS := -I$(CHECK_PREFIX)/include
CHECK_LIBS   := -L$(CHECK_PREFIX)/lib/x86_64-linux-gnu -L$(CHECK_PREFIX)/lib -lcheck -lsubunit -lrt -lm -pthread
else
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(or $(shell pkg-config --libs check 2>/dev/null),-lcheck -lsubunit -lrt -lm -pthread)
endif

LIB_SRCS  :=
PTX_SRCS  :=
PTX_TMPLS :=
TOOLS     :=
BENCH_SRCS :=
TRAIN_SRCS :=
TEST_SRCS :=
include runtime/module.mk alloc/module.mk ops/module.mk ptx/module.mk tools/module.mk tests/module.mk

# PTX modules: hand-written ptx/<name>.ptx, and build/ptx/<name>.ptx expanded
# from a template ptx/<name>.ptx.in (one source per kernel family).
PTX_GEN   := $(PTX_TMPLS:ptx/%.ptx.in=$(BUILD)/ptx/%.ptx)
PTX_ALL   := $(PTX_SRCS) $(PTX_GEN)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(patsubst %.ptx,$(BUILD)/ptx/%.ptx.o,$(notdir $(PTX_ALL))) \
             $(BUILD)/gen/ptx_registry.o
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)
TOOL_BINS := $(TOOLS:%=$(BUILD)/bin/%)
HEADERS   := runtime/lean8.h runtime/status.h runtime/ctx.h runtime/tensor.h runtime/checkpoint.h runtime/params.h runtime/fp8.h runtime/comm.h runtime/ddp.h \
             runtime/graph.h \
             alloc/alloc.h alloc/pinned.h alloc/trace.h $(OPS_HEADERS) \
             runtime/offload.h

all: $(BUILD)/liblean8.a $(BUILD)/liblean8.so $(TOOL_BINS) $(BUILD)/bin/lean8-tests $(KTRACE_LIB)

# Rebuild everything when the flags change (git's GIT-CFLAGS idea).
FLAGS_STR := $(CC) $(CPPFLAGS) $(CFLAGS) $(CHECK_CFLAGS)
$(BUILD)/.flags: FORCE
	@mkdir -p $(@D)
	@echo '$(FLAGS_STR)' | cmp -s - $@ || echo '$(FLAGS_STR)' > $@
.PHONY: FORCE
FORCE:

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c $(BUILD)/.flags
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(CHECK_CFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# A template expands to plain, readable PTX (ptx/ptxgen.awk says the syntax).
$(BUILD)/ptx/%.ptx: ptx/%.ptx.in ptx/ptxgen.awk $(wildcard ptx/*.ptx.inc)
	@mkdir -p $(@D)
	$(call say,PTXGEN,$<)
	$(Q)awk -f ptx/ptxgen.awk $< > $@

# PTX is embedded as a NUL-terminated string: l8_ptx_<name>.
PTX_EMBED_S = @printf '\t.section .rodata\n\t.globl l8_ptx_%s\n\t.hidden l8_ptx_%s\n\t.balign 16\nl8_ptx_%s:\n\t.incbin "%s"\n\t.byte 0\n\t.section .note.GNU-stack,"",@progbits\n' \
	    $* $* $* $< > $@
$(BUILD)/ptx/%.ptx.S: ptx/%.ptx
	@mkdir -p $(@D)
	$(PTX_EMBED_S)
$(BUILD)/ptx/%.ptx.S: $(BUILD)/ptx/%.ptx
	$(PTX_EMBED_S)
$(BUILD)/ptx/%.ptx.o: $(BUILD)/ptx/%.ptx.S
	$(call say,EMBED,$*.ptx)
	$(Q)$(CC) -c $< -o $@

.SECONDARY: $(patsubst %.ptx,$(BUILD)/ptx/%.ptx.S,$(notdir $(PTX_ALL)))

# The table runtime/ctx.c looks modules up in: name -> embedded text.
PTX_NAMES := $(basename $(notdir $(PTX_ALL)))
$(BUILD)/gen/ptx_registry.c: ptx/module.mk Makefile
	@mkdir -p $(@D)
	@{ echo '/* generated by the Makefile from ptx/module.mk */'; \
	   echo '#pragma GCC visibility push(hidden)'; \
	   echo 'typedef struct { const char *name; const char *text; } l8_ptx_entry;'; \
	   for n in $(PTX_NAMES); do echo "extern const char l8_ptx_$$n[];"; done; \
	   echo 'extern const l8_ptx_entry l8_ptx_registry[]; extern const int l8_ptx_registry_count;'; \
	   echo 'const l8_ptx_entry l8_ptx_registry[] = {'; \
	   for n in $(PTX_NAMES); do echo "    { \"$$n\", l8_ptx_$$n },"; done; \
	   echo '    { 0, 0 } };'; \
	   echo 'const int l8_ptx_registry_count = $(words $(PTX_NAMES));'; } > $@
$(BUILD)/gen/ptx_registry.o: $(BUILD)/gen/ptx_registry.c
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/liblean8.a: $(LIB_OBJS)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/liblean8.so: $(LIB_OBJS) runtime/lean8.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,liblean8.so.0 -Wl,--version-script=runtime/lean8.map -o $@ $(LIB_OBJS) $(LDLIBS)

$(BUILD)/bin/lean8-bench: $(BENCH_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/lean8-train: $(BUILD)/tools/lean8-train.o $(TRAIN_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/%: $(BUILD)/tools/%.o $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/lean8-tests: $(TEST_OBJS) $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# Check is the only thing `make test` may need to install (Debian: package `check`).
.PHONY: deps
deps:
	@if [ -z "$(CHECK_PREFIX)" ] && ! echo '#include <check.h>' | $(CC) $(CHECK_CFLAGS) -E - >/dev/null 2>&1; then \
	    echo "  DEPS    installing Check (apt-get install check)"; \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        (apt-get install -y -qq check pkg-config >/dev/null 2>&1 || \
	         (apt-get update -qq && apt-get install -y -qq check pkg-config)) || exit 1; \
	    else echo "Check is missing: install the 'check' package (or set CHECK_PREFIX)"; exit 1; fi; \
	fi

.PHONY: test test-ptx test-host test-valgrind test-sanitize test-analyze test-gpu test-link test-train test-abi
# tools/ktrace.py on a made-up trace; libl8ktrace.so's entry point where it is built
.PHONY: test-ktrace test-sass
test-ktrace: $(KTRACE_LIB)
	$(Q)tests/ktrace.sh $(BUILD)
# tools/sass.py on a made-up SASS listing, and README's command
test-sass:
	$(Q)tests/sass.sh
# The PTX kernels' logic on the CPU (tools/ptxsim.py, a functional PTX interpreter): its
# self-test, the strip kernel, the byte transpose, the tile kernel (with
# l8_dbias_reduce), the plain cast, the interleave, the row gather and the dequantize
# against references, then each test over a copy of its module with one instruction
# broken, which must fail
.PHONY: test-ptxsim
test-ptxsim: $(PTX_GEN) $(BUILD)/liblean8.so
	$(Q)python3 tools/ptxsim.py --selftest
	$(Q)python3 tests/ptxsim_strip.py --ptx $(BUILD)/ptx/cast_transpose_strip.ptx
	$(Q)python3 tests/ptxsim_transpose.py --ptx $(BUILD)/ptx/transpose.ptx
	$(Q)python3 tests/ptxsim_tile.py --ptx $(BUILD)/ptx/cast_transpose.ptx
	$(Q)python3 tests/ptxsim_cast.py --ptx ptx/cast.ptx
	$(Q)python3 tests/ptxsim_interleave.py --ptx $(BUILD)/ptx/interleave.ptx
	$(Q)python3 tests/ptxsim_gather.py --ptx ptx/gather.ptx
	$(Q)python3 tests/ptxsim_dequantize.py --ptx ptx/dequantize.ptx
	$(Q)python3 tests/ptxsim_gemm.py --ptx $(BUILD)/ptx/gemm_small.ptx
	$(Q)tests/ptxsim_broken.sh $(BUILD)
test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory test-ptx test-link test-abi test-host test-fortran
	$(Q)$(MAKE) --no-print-directory test-launcher
	$(Q)$(MAKE) --no-print-directory test-comm
	$(Q)$(MAKE) --no-print-directory test-train
	$(Q)$(MAKE) --no-print-directory test-trace
	$(Q)$(MAKE) --no-print-directory test-bench
	$(Q)$(MAKE) --no-print-directory test-ktrace
	$(Q)$(MAKE) --no-print-directory test-sass
	$(Q)$(MAKE) --no-print-directory test-ptxsim
	$(Q)$(MAKE) --no-print-directory test-valgrind
	$(Q)$(MAKE) --no-print-directory test-sanitize
	$(Q)$(MAKE) --no-print-directory test-analyze
	$(Q)$(MAKE) --no-print-directory test-gpu

test-ptx: $(PTX_GEN)
	$(Q)awk -f ptx/ptxgen.awk tests/ptxgen/basic.ptx.in | cmp -s - tests/ptxgen/basic.ptx || \
	    { echo "ptxgen: tests/ptxgen/basic.ptx.in does not expand to tests/ptxgen/basic.ptx"; exit 1; }
	$(Q)printf '@for i = 0 to 1\n$${nope}\n' | awk -f ptx/ptxgen.awk >/dev/null 2>&1 && \
	    { echo "ptxgen: a template with an error was accepted"; exit 1; } || true
	@echo "  PTXGEN  self-test ok"
	$(Q)awk -f tests/ptx_pdl.awk $(PTX_ALL)
	$(Q)printf '.entry k(\n.param .u64 p)\n{\n.reg .b32 %%r;\nld.param.u32 %%r, [p];\ngriddepcontrol.wait;\n}\n' | \
	    awk -f tests/ptx_pdl.awk >/dev/null && { echo "ptx_pdl: an entry without the wait first was accepted"; exit 1; } || true
	$(Q)python3 tools/ptx_entries.py $(PTX_ALL) -- $(filter %.c,$(LIB_SRCS))
	$(Q)for call in 'l8i_kernel(ctx, "cast", "l8_no_such_kernel", &f)' \
	        'l8i_kernel_smem(ctx, "cast", "l8_no_such_kernel", 0, &f)'; do \
	    printf 'static l8_status f(l8_ctx *ctx)\n{\n    CUfunction f;\n    return %s;\n}\n' "$$call" \
	        > $(BUILD)/ptx_entries_bad.c; \
	    python3 tools/ptx_entries.py $(PTX_ALL) -- $(BUILD)/ptx_entries_bad.c | \
	        grep -q 'entry "l8_no_such_kernel" is in none of cast.ptx' || \
	        { echo "ptx_entries: $$call was not refused for its kernel name"; exit 1; }; \
	done
	@if command -v $(CUDA_HOME)/bin/ptxas >/dev/null 2>&1 || command -v ptxas >/dev/null 2>&1; then \
	    PTXAS=$$(command -v $(CUDA_HOME)/bin/ptxas || command -v ptxas); \
	    for f in $(PTX_ALL); do \
	        $$PTXAS -arch=sm_90 $$f -o /dev/null || { echo "ptxas: $$f FAILED"; exit 1; }; \
	        echo "  PTXAS   $$f ok (sm_90)"; \
	    done; \
	else echo "  PTXAS   skipped: ptxas not found (set CUDA_HOME)"; fi

# The library must not link CUDA (it dlopens the driver), and an installed
# tree must be usable exactly as README.md says: the documented commands, run
# against a staged install at a non-standard prefix (no -I of our own).
STAGE := $(abspath $(BUILD))/stage
STAGE_PREFIX := /opt/lean8
STAGE_ENV = PKG_CONFIG_PATH=$(STAGE)$(STAGE_PREFIX)/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(STAGE)
test-link: $(BUILD)/liblean8.so $(BUILD)/liblean8.a $(TOOL_BINS)
	@if nm -u $(BUILD)/liblean8.so | grep -E ' (cu|cublas|nccl)[A-Z]'; then \
	    echo "liblean8.so has undefined CUDA symbols (above): it must dlopen them"; exit 1; fi
	@echo "  NM      liblean8.so: no CUDA, cuBLASLt or NCCL symbols"
	$(Q)rm -rf $(STAGE) && $(MAKE) --no-print-directory install DESTDIR=$(STAGE) PREFIX=$(STAGE_PREFIX) >/dev/null
	$(Q)grep -qx 'prefix=$(STAGE_PREFIX)' $(STAGE)$(STAGE_PREFIX)/lib/pkgconfig/lean8.pc || \
	    { echo "lean8.pc does not follow PREFIX"; exit 1; }
	$(Q)cd $(STAGE) && $(STAGE_ENV) sh -ec 'cc -std=c11 -Wall -Werror $(CURDIR)/examples/hello.c $$(pkg-config --cflags --libs lean8) -o hello; \
	    LD_LIBRARY_PATH=$(STAGE)$(STAGE_PREFIX)/lib L8_DEVICE=host ./hello'
	$(Q)LD_LIBRARY_PATH=$(STAGE)$(STAGE_PREFIX)/lib ldd $(STAGE)/hello | grep -q 'liblean8.so.0 => $(STAGE)' || { echo "hello did not load the staged liblean8.so.0"; exit 1; }
	@echo "  INSTALL cc hello.c \$$(pkg-config --cflags --libs lean8): builds and runs"
	$(Q)cd $(STAGE) && $(STAGE_ENV) sh -ec 'cc -std=c11 -Wall -Werror $(CURDIR)/examples/hello.c $$(pkg-config --cflags --libs lean8-static) -o hello-static; \
	    L8_DEVICE=host ./hello-static'
	$(Q)if ldd $(STAGE)/hello-static | grep lean8; then echo "hello-static needs a shared lean8"; exit 1; fi
	@echo "  INSTALL cc hello.c \$$(pkg-config --cflags --libs lean8-static): liblean8.a alone"
	$(Q)mkdir -p $(STAGE)/gs && awk '/^```c$$/{f=1;next} /^```$$/{f=0} f' docs/getting-started.md > $(STAGE)/gs/hello.c
	$(Q)cd $(STAGE)/gs && $(STAGE_ENV) sh -ec 'cc hello.c $$(pkg-config --cflags --libs lean8) -o hello; \
	    LD_LIBRARY_PATH=$(STAGE)$(STAGE_PREFIX)/lib L8_DEVICE=host ./hello | grep -q "^lean8 .* on "; \
	    cc hello.c $$(pkg-config --cflags --libs lean8-static) -o hello; L8_DEVICE=host ./hello >/dev/null'
	@echo "  DOCS    docs/getting-started.md: its C program builds and runs with the commands it gives"
ifneq ($(HAVE_FC),)
	$(Q)awk '/^```fortran$$/{f=1;next} /^```$$/{f=0} f' docs/getting-started.md > $(STAGE)/gs/hello.f90
	$(Q)cd $(STAGE)/gs && $(STAGE_ENV) sh -ec 'gfortran hello.f90 $$(pkg-config --cflags --libs lean8-fortran) -o hello; \
	    LD_LIBRARY_PATH=$(STAGE)$(STAGE_PREFIX)/lib L8_DEVICE=host ./hello | grep -q "lean8 .* on "'
	@echo "  DOCS    docs/getting-started.md: its Fortran program builds and runs with the commands it gives"
	$(Q)cd $(STAGE) && $(STAGE_ENV) sh -ec '$(FC) -c -I$$(pkg-config --variable=includedir lean8)/lean8 $(CURDIR)/examples/fmnist_mlp.f90 -o /dev/null; \
	    $(FC) $(CURDIR)/tests/test_fortran.f90 $$(pkg-config --cflags --libs lean8-fortran) -o test_fortran; \
	    LD_LIBRARY_PATH=$(STAGE)$(STAGE_PREFIX)/lib L8_DEVICE=host ./test_fortran >/dev/null'
	@echo "  INSTALL gfortran app.f90 \$$(pkg-config --cflags --libs lean8-fortran): finds lean8.mod, runs"
endif

# Only l8_ names leave liblean8.so.0, each declared in an installed header
# and documented in docs/api/ (tests/abi.sh names any that is not), and every
# page there is what tools/apidoc.py writes from its header now; the docs name
# no l8_ / L8_ name nor file the tree lacks, and docs/perf.md's table of where
# the targets stand cites entries it has (tests/docrefs.sh).
test-abi: $(BUILD)/liblean8.so
	$(Q)tests/abi.sh $(BUILD)/liblean8.so $(HEADERS)
	$(Q)python3 tools/apidoc.py --check $(filter-out runtime/lean8.h,$(HEADERS))
	$(Q)tests/docrefs.sh

test-host: $(BUILD)/bin/lean8-tests
	$(Q)timeout 1200 $(BUILD)/bin/lean8-tests --tags host
	$(Q)out=$$($(BUILD)/bin/lean8-tests --tags host --suites tensor,status) && \
	    echo "$$out" | grep -qx 'Running suite(s): status' && echo "$$out" | grep -qx ' tensor' && \
	    ! echo "$$out" | grep -qx ' alloc' || { echo "lean8-tests --suites: not just the two suites"; exit 1; }
	$(Q)! $(BUILD)/bin/lean8-tests --tags host --suites tensor,nosuch 2>/dev/null || \
	    { echo "lean8-tests --suites: an unknown suite was accepted"; exit 1; }
	@echo "  SUITES  lean8-tests --suites runs the suites named, refuses an unknown one"

# Communicators across processes: lean8-run, the TCP rendezvous, a dead rank
# (tests/comm.sh with the rank program tests/comm_prog.c).
.PHONY: test-comm
test-comm: $(BUILD)/bin/lean8-run $(BUILD)/tests/comm_prog
	$(Q)timeout -k 10 300 tests/comm.sh $(BUILD)

$(BUILD)/tests/comm_prog: $(BUILD)/tests/comm_prog.o $(BUILD)/liblean8.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

# lean8-run: environment, output, failures, signals, usage (tests/launcher.sh).
.PHONY: test-launcher
test-launcher: $(BUILD)/bin/lean8-run
	$(Q)timeout -k 10 300 tests/launcher.sh $(BUILD)

# lean8-train end to end on the host: loss falls, bitwise resume, bad checkpoints.
test-train: $(BUILD)/bin/lean8-train dataset
	$(Q)timeout 900 tests/train.sh $(BUILD) $(FMNIST_DIR)

VALGRIND ?= $(shell command -v valgrind 2>/dev/null)
test-valgrind: $(BUILD)/bin/lean8-tests
	@if [ -n "$(VALGRIND)" ]; then \
	    echo "  VALGRIND host suites"; \
	    L8_TEST_QUICK=1 CK_FORK=no timeout 2400 $(VALGRIND) -q --leak-check=full --show-leak-kinds=definite,indirect \
	        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
	        $(BUILD)/bin/lean8-tests --tags host; \
	else echo "  VALGRIND skipped: valgrind not found"; fi

# The clang static analyzer (scan-build) over every C source - the library,
# the tools, the tests - in a fresh build of its own ($(BUILD)/analyze): any
# finding fails the target and is printed, with the folder of its HTML report
# (the path that leads to it). Installs clang and clang-tools where they are
# missing (as root, with apt-get); prints one SKIPPED line where it cannot.
SCAN_BUILD ?= scan-build
ANALYZE    := $(BUILD)/analyze
ANALYZE_BINS := $(ANALYZE)/build/liblean8.a $(TOOLS:%=$(ANALYZE)/build/bin/%) \
                $(ANALYZE)/build/bin/lean8-tests $(ANALYZE)/build/tests/comm_prog \
                $(if $(HAVE_CUPTI),$(ANALYZE)/build/libl8ktrace.so)
.PHONY: test-analyze
test-analyze:
	@if ! command -v $(SCAN_BUILD) >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "  DEPS    installing the clang static analyzer (apt-get install clang clang-tools)"; \
	        apt-get install -y -qq clang clang-tools >/dev/null 2>&1 || \
	        { apt-get update -qq && apt-get install -y -qq clang clang-tools; } >/dev/null 2>&1 || true; \
	    fi; \
	fi; \
	if ! command -v $(SCAN_BUILD) >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then \
	    echo "  ANALYZE SKIPPED: scan-build or clang not found (Debian: apt-get install clang clang-tools)"; \
	    exit 0; fi; \
	rm -rf $(ANALYZE) && mkdir -p $(ANALYZE) && echo "  ANALYZE library, tools and tests (scan-build)"; \
	if $(SCAN_BUILD) -o $(ANALYZE)/report --status-bugs sh -c '$(MAKE) --no-print-directory V= \
	        BUILD=$(ANALYZE)/build CC="$$CC" $(ANALYZE_BINS)' > $(ANALYZE)/log 2>&1; then \
	    echo "  ANALYZE $$(grep -c '^  CC ' $(ANALYZE)/log) files: no findings"; \
	else \
	    grep -E -A3 'warning:|error:' $(ANALYZE)/log || cat $(ANALYZE)/log; \
	    grep -E 'bugs? found|scan-view' $(ANALYZE)/log; \
	    echo "test-analyze: the findings above (fix them; see $(ANALYZE)/report)"; exit 1; \
	fi

# The host suites, lean8-train and lean8-run built with AddressSanitizer and
# UndefinedBehaviorSanitizer (in $(BUILD)/san, a build of its own): the
# suites, then short training runs (tests/sanitize.sh); then the host suites
# built with ThreadSanitizer ($(BUILD)/tsan: the communicators' threads, the
# allocator's locks). Any report fails the run (a TSan report exits the test
# with 66). Leaks are valgrind's (test-valgrind): LeakSanitizer needs ptrace,
# which some containers refuse.
SAN_CC = $(CC) -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# a sub-build at -O1 (CFLAGS through the environment, so the Makefile's own flags still add up)
SAN_MAKE = CFLAGS="-O1 -g" $(MAKE) --no-print-directory
.PHONY: test-sanitize
test-sanitize: dataset
	$(Q)$(SAN_MAKE) BUILD=$(BUILD)/san CC="$(SAN_CC)" \
	    $(BUILD)/san/bin/lean8-tests $(BUILD)/san/bin/lean8-train $(BUILD)/san/bin/lean8-run
	@echo "  ASAN+UBSAN host suites"
	$(Q)ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    timeout 1200 $(BUILD)/san/bin/lean8-tests --tags host
	@echo "  ASAN+UBSAN lean8-train, lean8-run"
	$(Q)timeout -k 10 600 tests/sanitize.sh $(BUILD)/san $(FMNIST_DIR)
	$(Q)$(SAN_MAKE) BUILD=$(BUILD)/tsan CC="$(CC) -fsanitize=thread" $(BUILD)/tsan/bin/lean8-tests
	@echo "  TSAN host suites"
	$(Q)timeout 1200 $(BUILD)/tsan/bin/lean8-tests --tags host

# lean8-bench without a GPU: `make bench` as documented, --json only where
# asked, bad input (tests/bench.sh; L8_DEVICE=host there).
.PHONY: test-bench
test-bench: $(BUILD)/bin/lean8-bench $(BUILD)/bin/lean8-train dataset
	$(Q)timeout -k 10 900 tests/bench.sh $(BUILD) $(FMNIST_DIR)

test-gpu: $(BUILD)/bin/lean8-tests
	$(Q)timeout 1800 $(BUILD)/bin/lean8-tests --tags gpu

.PHONY: run info bench clean install
# The main job: lean8-train on Fashion-MNIST (installs the dataset when missing).
FMNIST_DIR ?= /usr/share/datasets/fashion-mnist
RUN_ARGS   ?=
run: $(BUILD)/bin/lean8-train dataset
	$(BUILD)/bin/lean8-train --data $(FMNIST_DIR) $(RUN_ARGS)

.PHONY: dataset
dataset:
	@if [ ! -f $(FMNIST_DIR)/train-images-idx3-ubyte.gz ] && [ ! -f $(FMNIST_DIR)/train-images-idx3-ubyte ]; then \
	    echo "  DEPS    installing the dataset (apt-get install dataset-fashion-mnist)"; \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        (apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
	         (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist)) || exit 1; \
	    else echo "Fashion-MNIST is missing: install the package dataset-fashion-mnist"; exit 1; fi; \
	fi

info: $(BUILD)/bin/lean8-info
	$(BUILD)/bin/lean8-info

bench: $(BUILD)/bin/lean8-bench
	$(BUILD)/bin/lean8-bench alloc && $(BUILD)/bin/lean8-bench cast && $(BUILD)/bin/lean8-bench gemm
	$(BUILD)/bin/lean8-bench offload

clean:
	rm -rf $(BUILD)

# pkg-config files. Regenerated whenever their text changes (PREFIX included),
# so `make install PREFIX=...` after a plain `make` never installs a stale prefix.
# lean8.pc: -I.../include/lean8, so programs say #include <lean8.h> (and
# gfortran finds lean8.mod there); lean8-static.pc links liblean8.a and nothing
# of lean8 at run time.
PC_HEAD = prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\n
PC_BODY = Description: lean C runtime for FP8 training on NVIDIA GPUs\nVersion: $(VERSION)\nCflags: -I$${includedir}/lean8\n
$(BUILD)/lean8.pc: FORCE
	@mkdir -p $(@D)
	@printf '$(PC_HEAD)Name: lean8\n$(PC_BODY)Libs: -L$${libdir} -llean8\nLibs.private: $(LDLIBS)\n' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
$(BUILD)/lean8-fortran.pc: FORCE
	@mkdir -p $(@D)
	@printf '$(PC_HEAD)Name: lean8-fortran\nDescription: the Fortran module lean8 (lean8.mod, built by $(FC); liblean8f.a)\nVersion: $(VERSION)\nRequires: lean8\nCflags: -I$${includedir}/lean8\nLibs: -L$${libdir} -llean8f\n' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
$(BUILD)/lean8-static.pc: FORCE
	@mkdir -p $(@D)
	@printf '$(PC_HEAD)Name: lean8-static\n$(PC_BODY)Libs: -L$${libdir} -l:liblean8.a $(LDLIBS)\n' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@

install: $(BUILD)/liblean8.a $(BUILD)/liblean8.so $(TOOL_BINS) $(BUILD)/lean8.pc $(BUILD)/lean8-static.pc \
         fortran $(BUILD)/lean8-fortran.pc
	install -d $(DESTDIR)$(PREFIX)/include/lean8 $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	for h in $(HEADERS); do \
	    sed -E 's|#include "(runtime\|alloc\|ops)/|#include "|' $$h > $(DESTDIR)$(PREFIX)/include/lean8/$$(basename $$h); \
	    chmod 644 $(DESTDIR)$(PREFIX)/include/lean8/$$(basename $$h); done
	install -m 644 $(BUILD)/liblean8.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/liblean8.so $(DESTDIR)$(PREFIX)/lib/liblean8.so.$(VERSION)
	ln -sf liblean8.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/liblean8.so.0
	ln -sf liblean8.so.0 $(DESTDIR)$(PREFIX)/lib/liblean8.so
	install -m 644 $(BUILD)/lean8.pc $(BUILD)/lean8-static.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	@if [ -f $(BUILD)/liblean8f.a ]; then \
	    echo "install -m 644 lean8.mod liblean8f.a lean8-fortran.pc (Fortran)"; \
	    install -m 644 $(BUILD)/fortran/lean8.mod $(DESTDIR)$(PREFIX)/include/lean8/ && \
	    install -m 644 $(BUILD)/liblean8f.a $(DESTDIR)$(PREFIX)/lib/ && \
	    install -m 644 $(BUILD)/lean8-fortran.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/; fi

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- Fortran: the module `lean8` (runtime/lean8.f90), its test and example ----
# Built by `make` when $(FC) (gfortran) exists, skipped with one line otherwise.
# liblean8f.a holds the module's wrappers (so liblean8 itself never needs
# libgfortran); lean8.mod is installed beside the C headers. The test and the
# example link libgfortran statically, so they run on machines without it.
FFLAGS  ?= -O2 -g
F_FLAGS  = $(FFLAGS) -std=f2018 -fimplicit-none -Wall -Wextra -Wimplicit-interface \
           -Wno-compare-reals -Wno-do-subscript $(if $(filter 1,$(WERROR) $(CI)),-Werror)
# libquadmath too, where its static archive exists (gfortran 12 has no -static-libquadmath)
F_QUADMATH := $(if $(HAVE_FC),$(wildcard $(shell $(FC) -print-file-name=libquadmath.a)))
F_LINK   = $(BUILD)/liblean8f.a $(BUILD)/liblean8.a $(LDLIBS) -static-libgfortran $(F_QUADMATH) \
           -Wl,--as-needed
F_BINS  := $(BUILD)/bin/lean8-fortran-test $(BUILD)/bin/fmnist_mlp

$(BUILD)/fortran/lean8.o: runtime/lean8.f90 $(BUILD)/.flags
	@mkdir -p $(@D)
	$(call say,FC,$<)
	$(Q)$(FC) $(F_FLAGS) -J$(@D) -c $< -o $@
$(BUILD)/liblean8f.a: $(BUILD)/fortran/lean8.o
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
$(BUILD)/bin/lean8-fortran-test: tests/test_fortran.f90 $(BUILD)/liblean8f.a $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,FC,$<)
	$(Q)$(FC) $(F_FLAGS) -I$(BUILD)/fortran -J$(BUILD)/fortran $< -o $@ $(F_LINK)
$(BUILD)/bin/fmnist_mlp: examples/fmnist_mlp.f90 $(BUILD)/liblean8f.a $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,FC,$<)
	$(Q)$(FC) $(F_FLAGS) -I$(BUILD)/fortran -J$(BUILD)/fortran $< -o $@ $(F_LINK)

# The GPU machine has no gfortran: the test and the example built here go to
# .device/fbin (carried with .device) for tools/device-run.sh's fortran stage,
# with the commit they were built from ("-dirty": from uncommitted changes).
.PHONY: device-fortran
ifneq ($(HAVE_FC),)
device-fortran: fortran
	$(Q)mkdir -p .device/fbin && cp $(F_BINS) .device/fbin/
	$(Q)printf '%s%s\n' "$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	    "$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" > .device/fbin/built_from
	@echo "  FORTRAN $(notdir $(F_BINS)) -> .device/fbin (built from $$(cat .device/fbin/built_from))"
else
device-fortran:
	@echo "device-fortran: $(FC) not found"; exit 1
endif

.PHONY: fortran test-fortran
ifneq ($(HAVE_FC),)
fortran: $(BUILD)/liblean8f.a $(F_BINS)
else
fortran:
	@echo "  FORTRAN skipped: $(FC) not found (the lean8 module, its test and examples/fmnist_mlp.f90 need gfortran)"
endif
all: fortran

# The Fashion-MNIST IDX files unzipped for the Fortran example (it reads plain IDX).
FMNIST_RAW := $(BUILD)/fmnist
FMNIST_FILES := train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte
$(FMNIST_RAW)/%-ubyte: | dataset
	@mkdir -p $(@D)
	$(Q)if [ -f $(FMNIST_DIR)/$*-ubyte.gz ]; then zcat $(FMNIST_DIR)/$*-ubyte.gz > $@.tmp; \
	    else cp $(FMNIST_DIR)/$*-ubyte $@.tmp; fi && mv $@.tmp $@

# The module's named constants against the C headers (needs only $(CC)),
# the module's checks, then a short training run of the example on the host
# (one epoch; the full run, 5 epochs to >= 0.88, is the GPU's).
test-fortran: fortran $(if $(HAVE_FC),$(FMNIST_FILES:%=$(FMNIST_RAW)/%))
	$(Q)tests/fortran_consts.sh $(CC) $(CPPFLAGS)
ifneq ($(HAVE_FC),)
	$(Q)L8_DEVICE=host $(BUILD)/bin/lean8-fortran-test
	$(Q)out=$$(L8_DEVICE=cuda:999 $(BUILD)/bin/lean8-fortran-test 2>&1); rc=$$?; \
	    if [ $$rc -ne 1 ] || ! printf '%s\n' "$$out" | grep -q '^FAIL  no context'; then \
	        printf '%s\n' "$$out" | head -20; \
	        echo "lean8-fortran-test on a device that is not there: exit $$rc, not 1 with FAIL  no context"; \
	        exit 1; fi; echo "  FORTRAN no device (cuda:999): refused, exit 1"
	$(Q)if [ -n "$(VALGRIND)" ]; then L8_DEVICE=host $(VALGRIND) -q --error-exitcode=99 --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect $(BUILD)/bin/lean8-fortran-test > /dev/null && \
	    echo "  VALGRIND lean8-fortran-test: clean"; fi
	$(Q)rm -f $(BUILD)/fmnist_mlp.l8t
	$(Q)L8_TRACE=$(BUILD)/fmnist_mlp.l8t L8_DEVICE=host timeout 900 $(BUILD)/bin/fmnist_mlp \
	    $(FMNIST_RAW) 1 60000 0.84 $(BUILD)/fmnist_mlp.ckpt
	$(Q)$(BUILD)/bin/lean8-trace summary $(BUILD)/fmnist_mlp.l8t > $(BUILD)/fmnist_mlp.summary; \
	    if ! grep -Eq '^  steps +750 \(last 750\)$$' $(BUILD)/fmnist_mlp.summary || \
	       ! grep -Eq '^ +model +' $(BUILD)/fmnist_mlp.summary; then cat $(BUILD)/fmnist_mlp.summary; \
	        echo "fmnist_mlp's trace: not 750 step marks and the tag 'model'"; exit 1; fi; \
	    echo "  TRACE   fmnist_mlp under L8_TRACE: 750 step marks and its tags (lean8-trace summary)"
endif
