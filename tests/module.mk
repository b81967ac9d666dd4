TEST_SRCS += tests/main.c tests/util.c tests/test_status.c tests/test_alloc.c tests/test_pinned.c \
             tests/test_trace.c tests/test_tensor.c tests/test_gpu.c
TEST_SRCS += tests/test_gemm.c
TEST_SRCS += tests/test_fp8.c
TEST_SRCS += tests/test_loss.c
TEST_SRCS += tests/test_checkpoint.c
TEST_SRCS += tests/test_params.c tests/test_optim.c
TEST_SRCS += tests/test_fmnist.c tools/fmnist.c
TEST_SRCS += tests/test_recipe.c tests/test_linear.c tests/test_gather.c
TEST_SRCS += tests/test_comm.c tests/world.c tests/test_tp.c tests/test_ddp.c
TEST_SRCS += tests/test_interleave.c
TEST_SRCS += tests/test_abi.c
TEST_SRCS += tools/replay.c
# the trace recorder's file and lean8-trace's model (tools/trace_model.c)
TEST_SRCS += tests/test_trace_file.c tests/test_trace_tool.c tests/trace_known.c tools/trace_model.c

# lean8-trace end to end (tests/trace.sh): trace-gen writes known traces;
# headless Chromium renders the SVG (installed here when missing, like Check).
$(BUILD)/tests/trace-gen: $(BUILD)/tests/trace_gen.o $(BUILD)/tests/trace_known.o $(BUILD)/liblean8.a
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

.PHONY: test-trace deps-chromium
deps-chromium:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
	    echo "  DEPS    installing Chromium for the SVG render check (apt-get install chromium)"; \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        timeout 600 apt-get install -y -qq chromium >/dev/null 2>&1 || \
	        (timeout 300 apt-get update -qq && timeout 600 apt-get install -y -qq chromium >/dev/null 2>&1) || \
	        echo "  DEPS    chromium could not be installed: tests/trace.sh will skip the render check"; \
	    fi; \
	fi

test-trace: $(BUILD)/bin/lean8-trace $(BUILD)/tests/trace-gen deps-chromium
	$(Q)timeout 600 tests/trace.sh $(BUILD)
TEST_SRCS += tests/test_gemm_cache.c
TEST_SRCS += tests/test_graph.c
TEST_SRCS += tests/test_offload.c
TEST_SRCS += tests/test_zero.c
TEST_SRCS += tests/test_streams.c
# every file reader under mutated input (tests/test_fuzz.c)
TEST_SRCS += tests/test_fuzz.c
