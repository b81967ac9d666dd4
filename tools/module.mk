TOOLS += lean8-info lean8-bench lean8-train
# lean8-bench: one binary, one file per subcommand
BENCH_SRCS += tools/lean8-bench.c tools/bench_util.c tools/bench_alloc.c
BENCH_SRCS += tools/bench_gemm.c tools/bench_cast.c tools/bench_linear.c
BENCH_SRCS += tools/bench_gemm_small.c
# Fashion-MNIST loader: linked into lean8-train (the Makefile's rule uses
# TRAIN_SRCS) and into the test binary (tests/module.mk)
TRAIN_SRCS += tools/fmnist.c
# lean8-run: the local launcher (plain POSIX; links nothing of the library)
TOOLS += lean8-run
# tools/replay.c: the training-like allocation workload (tests and lean8-bench alloc; not library code)
BENCH_SRCS += tools/replay.c
BENCH_SRCS += tools/bench_comm.c tools/bench_ddp.c
# lean8-trace: the memory tracer (several files, hence its own link rule)
TOOLS += lean8-trace
TRACE_TOOL_SRCS := tools/lean8-trace.c tools/trace_model.c tools/trace_plot.c tools/trace_export.c
$(BUILD)/bin/lean8-trace: $(TRACE_TOOL_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/liblean8.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -o $@ $^ $(LDLIBS)
# lean8-bench trace: the recorder's cost and lean8-trace's replay and plot
BENCH_SRCS += tools/bench_trace.c tools/trace_model.c tools/trace_plot.c
BENCH_SRCS += tools/bench_offload.c
# libl8ktrace.so: the CUPTI kernel timeline (a CUDA injection library, tools/ktrace.c;
# tools/ktrace.py reads its file), built where the CUDA toolkit has CUPTI
HAVE_CUPTI := $(and $(wildcard $(CUDA_HOME)/include/cupti_activity.h),$(wildcard $(CUDA_HOME)/lib64/libcupti.so))
KTRACE_LIB := $(if $(HAVE_CUPTI),$(BUILD)/libl8ktrace.so)
$(BUILD)/libl8ktrace.so: tools/ktrace.c $(BUILD)/.flags
	@mkdir -p $(@D)
	$(call say,CC,$@)
	$(Q)$(CC) $(CFLAGS) -isystem $(CUDA_HOME)/include -shared -o $@ $< -L$(CUDA_HOME)/lib64 -lcupti \
	    -Wl,-rpath,$(CUDA_HOME)/lib64
