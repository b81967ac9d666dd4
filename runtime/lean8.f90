! lean8.f90 - the Fortran module `lean8`: lean8's C API through ISO_C_BINDING.
!
!   use lean8
!   type(l8_ctx) :: ctx
!   if (l8_ctx_create(ctx) /= L8_OK) print *, l8_last_error_message()
!
! Build: gfortran app.f90 $(pkg-config --cflags --libs lean8) (lean8.mod is
! installed beside the C headers, in include/lean8/; it is specific to the
! compiler and version that built it, so `make` builds it with yours).
!
! Conventions:
! - Handles are bind(c) types holding one C pointer (`%p`), null when unset:
!   type(l8_ctx), type(l8_tensor), ... The destroy subroutines accept null
!   handles and set the handle back to null.
! - Every C function that returns an l8_status is a Fortran function with the
!   same name returning the status as integer(c_int): compare with L8_OK and
!   read l8_last_error_message() for what went wrong.
! - Shapes are in Fortran order. A C tensor of shape (T, K) (row-major, K
!   fastest) is the same memory as a Fortran array x(K, T) (column-major, K
!   fastest): every dims argument here is the reverse of the C shape, and
!   l8_tensor_from_array/l8_tensor_to_array copy the array's memory as is.
!   So a batch of T images of 784 pixels is x(784, T) in Fortran and the
!   (T, 784) tensor Linear expects; a Linear weight (N, K) in C is (K, N) here.
! - Indices and ids are the C side's, 0-based (parameter ids, recipe role
!   rows, ranks, and device data such as gather indices and the step
!   cursor): row j of a C tensor (N, C) is column j + 1 of the array (C, N).
! - Handles C takes as NULL-able are optional arguments, mostly in the C
!   order (omit one before a required argument and pass the later ones by
!   keyword; l8_softmax_xent takes its dlogits last); an unset handle is
!   C's NULL.
! - Work is enqueued on the context's compute stream; copies to and from
!   Fortran arrays block until done.
! - Strings are Fortran strings (trailing blanks trimmed); the C side copies
!   what it keeps.
module lean8
    use, intrinsic :: iso_c_binding
    implicit none
    private

    ! ---- statuses (runtime/status.h; append-only values) ----
    integer(c_int), parameter, public :: L8_OK = 0, L8_ERR_INVALID_ARG = 1, &
        L8_ERR_UNSUPPORTED = 2, L8_ERR_STATE = 3, L8_ERR_OOM = 100, L8_ERR_CUDA = 101, &
        L8_ERR_CUBLAS = 102, L8_ERR_NCCL = 103, L8_ERR_IO = 104, L8_ERR_TIMEOUT = 105, &
        L8_ERR_NO_DEVICE = 106, L8_ERR_COMM = 107, L8_ERR_INTERNAL = 200
    ! ---- dtypes (runtime/tensor.h) ----
    integer(c_int), parameter, public :: L8_F32 = 0, L8_BF16 = 1, L8_F16 = 2, L8_E4M3 = 3, &
        L8_E5M2 = 4, L8_I32 = 5, L8_U8 = 6, L8_DTYPE_INVALID = -1
    ! ---- Linear modes and tensor-parallel splits (ops/linear.h) ----
    integer(c_int), parameter, public :: L8_LINEAR_FP8 = 0, L8_LINEAR_BF16 = 1
    integer(c_int), parameter, public :: L8_PARALLEL_NONE = 0, L8_PARALLEL_COLUMN = 1, &
        L8_PARALLEL_ROW = 2
    ! ---- activations fused into the Linear's casts (ops/cast.h) ----
    integer(c_int), parameter, public :: L8_ACT_NONE = 0, L8_ACT_GELU = 1
    ! ---- FP8 tensor roles of a recipe (ops/recipe.h) ----
    integer(c_int), parameter, public :: L8_ROLE_INPUT = 0, L8_ROLE_WEIGHT = 1, &
        L8_ROLE_GRAD_OUTPUT = 2
    ! ---- a recipe's amax rule and formats (ops/cast.h, ops/recipe.h) ----
    integer(c_int), parameter, public :: L8_AMAX_MAX_HISTORY = 0, L8_AMAX_MOST_RECENT = 1
    integer(c_int), parameter, public :: L8_FP8_HYBRID = 0, L8_FP8_E4M3 = 1
    ! ---- flags of the FP8 casts (ops/cast.h; `unsigned` there) ----
    integer(c_int), parameter, public :: L8_CAST_ACCUMULATE_AMAX = 1, L8_CAST_FEW_SMS = 2
    ! ---- communicator transports and reductions (runtime/comm.h) ----
    integer(c_int), parameter, public :: L8_COMM_DEFAULT = 0, L8_COMM_NCCL = 1, L8_COMM_TCP = 2, &
        L8_COMM_THREADS = 3
    integer(c_int), parameter, public :: L8_REDUCE_SUM = 0, L8_REDUCE_AVG = 1, L8_REDUCE_MAX = 2
    integer, parameter, public :: L8_COMM_ID_BYTES = 256
    ! ---- a context's streams (runtime/ctx.h) ----
    integer(c_int), parameter, public :: L8_STREAM_COMPUTE = 0, L8_STREAM_COMM = 1, &
        L8_STREAM_COPY = 2
    ! ---- memory trace event kinds and stream roles (alloc/trace.h) ----
    integer(c_int), parameter, public :: L8_TRACE_ALLOC = 1, L8_TRACE_FREE_REQUESTED = 2, &
        L8_TRACE_FREE_COMPLETED = 3, L8_TRACE_SEGMENT_ALLOC = 4, L8_TRACE_SEGMENT_FREE = 5, &
        L8_TRACE_OOM = 6, L8_TRACE_OFFLOAD_OUT = 7, L8_TRACE_OFFLOAD_IN = 8, L8_TRACE_STEP = 9, &
        L8_TRACE_PINNED_ALLOC = 10, L8_TRACE_PINNED_FREE = 11
    integer(c_int), parameter, public :: L8_TRACE_STREAM_NONE = 0, L8_TRACE_STREAM_COMPUTE = 1, &
        L8_TRACE_STREAM_COMM = 2, L8_TRACE_STREAM_COPY = 3, L8_TRACE_STREAM_OTHER = 4
    ! ---- where an offloader has a storage (runtime/offload.h) ----
    integer(c_int), parameter, public :: L8_OFFLOAD_NONE = 0, L8_OFFLOAD_COPYING_OUT = 1, &
        L8_OFFLOAD_KEPT = 2, L8_OFFLOAD_ON_HOST = 3, L8_OFFLOAD_COPYING_IN = 4, &
        L8_OFFLOAD_RESTORED = 5
    integer(c_int64_t), parameter, public :: L8_OFFLOAD_MIN_BYTES_DEFAULT = 1048576

    ! ---- handles ----
    type, bind(c), public :: l8_ctx
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_tensor
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_params
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_gemm_handle
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_recipe
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_fp8_meta          ! an FP8 tensor's scale, scale_inv, amax
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_linear
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_linear_ctx        ! what a forward saved for backward
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_optim
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_ckpt_writer
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_ckpt_reader
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_comm
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_ddp               ! a data-parallel gradient reducer
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_graph             ! a captured step (CUDA graph)
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_event             ! a point in a stream's work (timing)
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_alloc             ! a context's device allocator (borrowed)
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_pinned            ! a context's pinned-host pool (borrowed)
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_trace             ! a memory trace (the context's: borrowed)
        type(c_ptr) :: p = c_null_ptr
    end type
    type, bind(c), public :: l8_offload           ! an activation offloader
        type(c_ptr) :: p = c_null_ptr
    end type
    ! What the allocator, the pinned pool and the offloader count: the C
    ! structs (alloc/alloc.h, alloc/pinned.h, runtime/offload.h) field for
    ! field, bytes and counts; the *_get_stats calls set `size` and fill them.
    type, bind(c), public :: l8_alloc_stats
        integer(c_size_t) :: size = 0
        integer(c_int64_t) :: allocated_bytes = 0, allocated_peak = 0   ! live blocks (rounded)
        integer(c_int64_t) :: requested_bytes = 0, requested_peak = 0   ! live blocks (asked for)
        integer(c_int64_t) :: reserved_bytes = 0, reserved_peak = 0     ! segments held
        integer(c_int64_t) :: active_bytes = 0, active_peak = 0         ! + freed, awaiting events
        integer(c_int64_t) :: inactive_split_bytes = 0, inactive_split_peak = 0
        integer(c_int64_t) :: allocations = 0, frees = 0, live_blocks = 0, segments = 0
        integer(c_int64_t) :: segment_allocs = 0, segment_frees = 0, cache_hits = 0
        integer(c_int64_t) :: retries = 0, ooms = 0
        integer(c_int64_t) :: graph_reserved_bytes = 0, graph_held_bytes = 0
        integer(c_int64_t) :: capture_refusals = 0
    end type
    type, bind(c), public :: l8_pinned_stats
        integer(c_size_t) :: size = 0
        integer(c_int64_t) :: allocated_bytes = 0, allocated_peak = 0   ! live blocks (classes)
        integer(c_int64_t) :: requested_bytes = 0
        integer(c_int64_t) :: reserved_bytes = 0, reserved_peak = 0     ! every block held
        integer(c_int64_t) :: allocations = 0, frees = 0, cache_hits = 0
        integer(c_int64_t) :: segment_allocs = 0, segment_frees = 0
        integer(c_int64_t) :: pending_blocks = 0                        ! freed, awaiting events
    end type
    type, bind(c), public :: l8_offload_stats
        integer(c_size_t) :: size = 0
        integer(c_int64_t) :: saves = 0, aliased = 0     ! saves; of those, of a storage again
        integer(c_int64_t) :: kept_small = 0, kept_resident = 0, kept_layer = 0
        integer(c_int64_t) :: copies_out = 0, bytes_out = 0, copies_in = 0, bytes_in = 0
        integer(c_int64_t) :: prefetches = 0, prefetch_deferred = 0
        integer(c_int64_t) :: released = 0, kept_in_place = 0
        integer(c_int64_t) :: entries = 0, host_bytes = 0, device_bytes_freed = 0   ! now
    end type
    ! One event of a memory trace (alloc/trace.h, 48 bytes): kind is an
    ! L8_TRACE_* kind, stream an L8_TRACE_STREAM_* role, tag a tag's id
    ! (l8_trace_tag_name; 0: none), device a CUDA ordinal (-1 host).
    type, bind(c), public :: l8_trace_event
        integer(c_int64_t) :: time_ns = 0, addr = 0, size = 0, stream = 0, aux = 0
        integer(c_int32_t) :: tag = 0
        integer(c_int16_t) :: kind = 0, device = 0
    end type
    ! A communicator's id: plain bytes, to broadcast from the rank that made it,
    ! e.g. call MPI_Bcast(id, int(c_sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD, ierr)
    type, bind(c), public :: l8_comm_id
        integer(c_int8_t) :: bytes(L8_COMM_ID_BYTES) = 0_c_int8_t
    end type

    ! ---- config struct mirrors (private) ----
    ! Each is a prefix of the C struct: the fields this module sets. Their
    ! size field says how long the mirror is, and the library's struct-size
    ! rule gives every C field past it its default, so the C structs may grow
    ! without this module changing. Defaults come from the C init functions
    ! (init_mirror), never written here twice.
    type, bind(c) :: ctx_config
        integer(c_size_t) :: size
        type(c_ptr) :: device
        integer(c_size_t) :: memory_limit, pinned_limit
        type(c_ptr) :: provider
        type(c_ptr) :: trace_path
    end type
    type, bind(c) :: adamw_config
        integer(c_size_t) :: size
        real(c_float) :: lr, beta1, beta2, eps, weight_decay, max_grad_norm
    end type
    type, bind(c) :: sgd_config
        integer(c_size_t) :: size
        real(c_float) :: lr, momentum, dampening, weight_decay
        integer(c_int) :: nesterov
        real(c_float) :: max_grad_norm
    end type
    type, bind(c) :: recipe_config               ! up to the reduce hook (l8_recipe_set_reduce)
        integer(c_size_t) :: size
        integer(c_int) :: history_len
        real(c_float) :: margin
        integer(c_int) :: amax_compute, format
    end type
    type, bind(c) :: linear_config
        integer(c_size_t) :: size
        type(c_ptr) :: name
        integer(c_int) :: mode
        type(c_ptr) :: gemm, recipe, weight, weight_grad, bias, bias_grad
        integer(c_int) :: weight_id, bias_id
        type(c_funptr) :: grad_ready
        type(c_ptr) :: grad_ready_arg
        integer(c_int) :: accumulate_grad
        type(c_ptr) :: save_hooks
        type(c_ptr) :: tp_comm
        integer(c_int) :: parallel, sequence_parallel
    end type
    type, bind(c) :: comm_config
        integer(c_size_t) :: size
        integer(c_int) :: timeout_ms, init_timeout_ms, transport
    end type
    type, bind(c) :: params_config
        integer(c_size_t) :: size
        integer(c_int) :: grad_dtype
        integer(c_int64_t) :: pad_to
    end type
    type, bind(c) :: ddp_config
        integer(c_size_t) :: size
        integer(c_int64_t) :: bucket_elems
        integer(c_int) :: overlap, strict, zero1
    end type
    type, bind(c) :: optim_result                 ! read back, not a config: no defaults
        integer(c_size_t) :: size
        integer(c_int) :: skipped
        real(c_float) :: grad_norm, clip_coef
        integer(c_int64_t) :: step
    end type
    type, bind(c) :: scale_update_config         ! l8_fp8_scale_update_config
        integer(c_size_t) :: size
        integer(c_int) :: amax_compute
        real(c_float) :: margin
        integer(c_int) :: reset_amax
    end type
    type, bind(c) :: linear_stats                 ! read back, not a config: no defaults
        integer(c_size_t) :: size
        integer(c_int64_t) :: forwards, backwards, weight_casts, input_casts, grad_casts, steps
        integer(c_int64_t) :: micro_batch
    end type
    type, bind(c) :: graph_stats                  ! read back, not a config: no defaults
        integer(c_size_t) :: size
        integer(c_int64_t) :: launches, captures, updates_in_place, reinstantiations, warmups
        integer(c_int64_t) :: chained, chain_refusals
    end type
    type, bind(c) :: offload_config               ! up to the trace (the context's)
        integer(c_size_t) :: size
        integer(c_size_t) :: min_bytes
        integer(c_int) :: prefetch_layers
    end type
    type, bind(c) :: save_hooks                   ! l8_save_hooks (ops/linear.h), whole
        integer(c_size_t) :: size
        type(c_funptr) :: save, restore, release
        type(c_ptr) :: arg
    end type
    type, bind(c) :: ddp_stats                    ! read back, not a config: no defaults
        integer(c_size_t) :: size
        integer(c_int) :: buckets
        integer(c_int64_t) :: largest_bucket, steps
        integer(c_int) :: launched_in_backward, launched_at_finish, zeroed
    end type

    public :: l8_last_error_message, l8_status_name, l8_version
    public :: l8_ctx_create, l8_ctx_destroy, l8_ctx_synchronize, l8_ctx_device_name
    public :: l8_tensor_empty, l8_tensor_from_array, l8_tensor_to_array, l8_tensor_copy_from_array
    public :: l8_tensor_destroy, l8_tensor_numel, l8_tensor_dims, l8_tensor_dtype
    public :: l8_tensor_section, l8_tensor_reshape, l8_tensor_transpose
    public :: l8_tensor_copy, l8_tensor_contiguous
    public :: l8_fp8_meta_create, l8_fp8_meta_release, l8_fp8_meta_get, l8_fp8_meta_set
    public :: l8_tensor_set_fp8_meta, l8_tensor_fp8_meta
    public :: l8_params_create, l8_params_destroy, l8_params_add, l8_params_finalize
    public :: l8_params_master, l8_params_main_grad, l8_params_master_flat
    public :: l8_params_init_uniform, l8_params_init_kaiming_uniform
    public :: l8_gemm_handle_create, l8_gemm_handle_destroy
    public :: l8_recipe_create, l8_recipe_destroy, l8_recipe_update
    public :: l8_recipe_count, l8_recipe_meta, l8_recipe_dtype
    public :: l8_recipe_history_len, l8_recipe_role_name, l8_recipe_updates
    public :: l8_fp8_cast, l8_fp8_cast_transpose, l8_fp8_cast_transpose_dbias, l8_fp8_dequantize
    public :: l8_fp8_cast_transpose_act, l8_fp8_cast_transpose_dact, l8_dbias_dact
    public :: l8_fp8_cast_transpose_many, l8_fp8_transpose, l8_fp8_scale_update
    public :: l8_linear_get_stats, l8_linear_in_features, l8_linear_out_features
    public :: l8_optim_is_sharded, l8_optim_shard_count, l8_optim_shard_range
    public :: l8_optim_shard_numel, l8_optim_state_bytes
    public :: l8_linear_create, l8_linear_destroy, l8_linear_begin_step
    public :: l8_linear_refresh_weights
    public :: l8_linear_forward, l8_linear_backward, l8_linear_ctx_destroy
    public :: l8_linear_forward_act, l8_linear_backward_act
    public :: l8_linear_forward_fp8, l8_linear_backward_fp8, l8_linear_role_index
    public :: l8_linear_backward_fp8_dx, l8_linear_backward_dx
    public :: l8_linear_forward_gelu
    public :: l8_optim_create_adamw, l8_optim_destroy, l8_optim_step, l8_optim_set_lr
    public :: l8_optim_create_sgd, l8_optim_read_result
    public :: l8_optim_lr, l8_optim_set_lr_external, l8_optim_push_lr
    public :: l8_optim_set_lr_table, l8_optim_cursor
    public :: l8_optim_state_count, l8_optim_state_name, l8_optim_state, l8_optim_state_view
    public :: l8_optim_get_step, l8_optim_set_step
    public :: l8_optim_save, l8_optim_check_load, l8_optim_load
    public :: l8_recipe_state, l8_recipe_push_scales
    public :: l8_gather_rows, l8_gather_rows_at, l8_put_rows_at
    public :: l8_convert, l8_gelu, l8_gelu_backward, l8_softmax_xent, l8_softmax_xent_at
    public :: l8_tag_push, l8_tag_pop
    public :: l8_ckpt_writer_open, l8_ckpt_write_tensor, l8_ckpt_writer_commit
    public :: l8_ckpt_writer_abort, l8_ckpt_open, l8_ckpt_expect, l8_ckpt_read_tensor
    public :: l8_ckpt_close, l8_ckpt_check_tensor
    public :: l8_ckpt_write_section, l8_ckpt_read_section, l8_ckpt_has, l8_ckpt_section_bytes
    public :: l8_comm_id_create, l8_comm_init_rank, l8_comm_destroy, l8_comm_rank, l8_comm_size
    public :: l8_comm_all_reduce, l8_comm_broadcast, l8_comm_all_gather, l8_comm_reduce_scatter
    public :: l8_comm_init_env, l8_comm_split, l8_comm_grid, l8_comm_abort, l8_comm_check
    public :: l8_comm_barrier
    public :: l8_recipe_set_reduce, l8_optim_set_norm_reduce
    public :: l8_optim_set_shard, l8_optim_set_shard_rank
    public :: l8_graph_native, l8_graph_create, l8_graph_warmup, l8_graph_capture
    public :: l8_graph_launch, l8_graph_launch_repeat, l8_graph_get_stats, l8_graph_destroy
    public :: l8_ddp_create, l8_ddp_destroy, l8_ddp_begin_micro_batch, l8_ddp_mark_unused
    public :: l8_ddp_finish, l8_ddp_shard_ranges, l8_ddp_gather_params, l8_ddp_wait_param
    public :: l8_ddp_get_stats, l8_ddp_bucket
    public :: l8_fortran_check_layouts
    public :: l8_ctx_device, l8_ctx_allocator, l8_ctx_pinned, l8_ctx_trace
    public :: l8_alloc_get_stats, l8_alloc_empty_cache, l8_alloc_reset_peaks, l8_alloc_describe
    public :: l8_pinned_get_stats, l8_pinned_empty_cache
    public :: l8_trace_record, l8_trace_flush, l8_trace_path, l8_trace_count, l8_trace_held
    public :: l8_trace_events, l8_trace_tag_name, l8_tag_current
    public :: l8_trace_rank, l8_trace_set_rank
    public :: l8_event_create, l8_event_destroy, l8_event_record, l8_event_query
    public :: l8_event_synchronize, l8_event_elapsed_ms
    public :: l8_params_set_grad_ready_cb, l8_params_reset_ready, l8_params_ready_count
    public :: l8_params_all_ready, l8_params_missing_count, l8_params_describe_missing
    public :: l8_params_check_all_ready, l8_params_zero_grad, l8_params_grad_flat
    public :: l8_tensor_data
    public :: l8_offload_create, l8_offload_destroy, l8_offload_forward_layer
    public :: l8_offload_backward_layer, l8_offload_save, l8_offload_restore, l8_offload_release
    public :: l8_offload_poll, l8_offload_wait, l8_offload_state_of, l8_offload_state_name
    public :: l8_offload_get_stats

    ! Tensors from and to Fortran arrays of f32 (real(c_float)), i32
    ! (integer(c_int32_t)) or byte (integer(c_int8_t)) elements, of any rank
    ! the C side takes (one assumed-rank procedure per element type). Bytes
    ! make a new L8_U8 tensor, and copy the raw bytes of any tensor of as many
    ! bytes (FP8 data: one byte per element, unscaled codes).
    interface l8_tensor_from_array
        module procedure from_f32, from_i32, from_i8
    end interface
    interface l8_tensor_copy_from_array
        module procedure copy_from_f32, copy_from_i32, copy_from_i8
    end interface
    interface l8_tensor_to_array
        module procedure to_f32, to_i32, to_i8
    end interface
    ! A checkpoint's raw sections: an array of any rank (or a scalar) of f32,
    ! f64, i32, i64 or i8, or a text.
    interface l8_ckpt_write_section
        module procedure put_f32, put_f64, put_i32, put_i64, put_i8, put_text
    end interface
    interface l8_ckpt_read_section
        module procedure get_f32, get_f64, get_i32, get_i64, get_i8, get_text
    end interface

    ! ---- the C functions (private: the wrappers below are the interface) ----
    interface
        function c_strlen(s) bind(c, name='strlen')
            import :: c_ptr, c_size_t
            type(c_ptr), value :: s
            integer(c_size_t) :: c_strlen
        end function
        function c_last_error_string() bind(c, name='l8_last_error_string')
            import :: c_ptr
            type(c_ptr) :: c_last_error_string
        end function
        function c_status_name(st) bind(c, name='l8_status_name')
            import :: c_ptr, c_int
            integer(c_int), value :: st
            type(c_ptr) :: c_status_name
        end function
        function c_version() bind(c, name='l8_version')
            import :: c_ptr
            type(c_ptr) :: c_version
        end function
        subroutine c_ctx_config_init(cfg) bind(c, name='l8_ctx_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_ctx_create(cfg, out) bind(c, name='l8_ctx_create')
            import :: c_int, ctx_config, c_ptr
            type(ctx_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_ctx_create
        end function
        subroutine c_ctx_destroy(ctx) bind(c, name='l8_ctx_destroy')
            import :: c_ptr
            type(c_ptr), value :: ctx
        end subroutine
        function c_ctx_synchronize(ctx) bind(c, name='l8_ctx_synchronize')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            integer(c_int) :: c_ctx_synchronize
        end function
        function c_ctx_device_name(ctx) bind(c, name='l8_ctx_device_name')
            import :: c_ptr
            type(c_ptr), value :: ctx
            type(c_ptr) :: c_ctx_device_name
        end function
        function c_tensor_empty(ctx, dt, ndim, shape, out) bind(c, name='l8_tensor_empty')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: ctx
            integer(c_int), value :: dt, ndim
            integer(c_int64_t), intent(in) :: shape(*)
            type(c_ptr) :: out
            integer(c_int) :: c_tensor_empty
        end function
        subroutine c_tensor_destroy(t) bind(c, name='l8_tensor_destroy')
            import :: c_ptr
            type(c_ptr), value :: t
        end subroutine
        function c_tensor_numel(t) bind(c, name='l8_tensor_numel')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: t
            integer(c_int64_t) :: c_tensor_numel
        end function
        function c_tensor_ndim(t) bind(c, name='l8_tensor_ndim')
            import :: c_ptr, c_int
            type(c_ptr), value :: t
            integer(c_int) :: c_tensor_ndim
        end function
        function c_tensor_dim(t, d) bind(c, name='l8_tensor_dim')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: t
            integer(c_int), value :: d
            integer(c_int64_t) :: c_tensor_dim
        end function
        function c_tensor_copy_from_host(t, host, bytes, s) bind(c, name='l8_tensor_copy_from_host')
            import :: c_ptr, c_size_t, c_int
            type(c_ptr), value :: t, host, s
            integer(c_size_t), value :: bytes
            integer(c_int) :: c_tensor_copy_from_host
        end function
        function c_tensor_copy_to_host(t, host, bytes, s) bind(c, name='l8_tensor_copy_to_host')
            import :: c_ptr, c_size_t, c_int
            type(c_ptr), value :: t, host, s
            integer(c_size_t), value :: bytes
            integer(c_int) :: c_tensor_copy_to_host
        end function
        function c_params_create(ctx, cfg, out) bind(c, name='l8_params_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx, cfg
            type(c_ptr) :: out
            integer(c_int) :: c_params_create
        end function
        subroutine c_params_destroy(g) bind(c, name='l8_params_destroy')
            import :: c_ptr
            type(c_ptr), value :: g
        end subroutine
        function c_params_add(g, name, ndim, shape, id) bind(c, name='l8_params_add')
            import :: c_ptr, c_int, c_char, c_int64_t
            type(c_ptr), value :: g
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int), value :: ndim
            integer(c_int64_t), intent(in) :: shape(*)
            integer(c_int) :: id
            integer(c_int) :: c_params_add
        end function
        function c_params_finalize(g) bind(c, name='l8_params_finalize')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int) :: c_params_finalize
        end function
        function c_params_master(g, id) bind(c, name='l8_params_master')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int), value :: id
            type(c_ptr) :: c_params_master
        end function
        function c_params_main_grad(g, id) bind(c, name='l8_params_main_grad')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int), value :: id
            type(c_ptr) :: c_params_main_grad
        end function
        function c_params_master_flat(g) bind(c, name='l8_params_master_flat')
            import :: c_ptr
            type(c_ptr), value :: g
            type(c_ptr) :: c_params_master_flat
        end function
        function c_params_init_uniform(g, id, lo, hi, seed) bind(c, name='l8_params_init_uniform')
            import :: c_ptr, c_int, c_float, c_int64_t
            type(c_ptr), value :: g
            integer(c_int), value :: id
            real(c_float), value :: lo, hi
            integer(c_int64_t), value :: seed
            integer(c_int) :: c_params_init_uniform
        end function
        function c_params_init_kaiming_uniform(g, id, a, seed) &
                bind(c, name='l8_params_init_kaiming_uniform')
            import :: c_ptr, c_int, c_float, c_int64_t
            type(c_ptr), value :: g
            integer(c_int), value :: id
            real(c_float), value :: a
            integer(c_int64_t), value :: seed
            integer(c_int) :: c_params_init_kaiming_uniform
        end function
        function c_gemm_handle_create(ctx, cfg, out) bind(c, name='l8_gemm_handle_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx, cfg
            type(c_ptr) :: out
            integer(c_int) :: c_gemm_handle_create
        end function
        subroutine c_gemm_handle_destroy(h) bind(c, name='l8_gemm_handle_destroy')
            import :: c_ptr
            type(c_ptr), value :: h
        end subroutine
        function c_recipe_create(ctx, cfg, out) bind(c, name='l8_recipe_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx, cfg
            type(c_ptr) :: out
            integer(c_int) :: c_recipe_create
        end function
        subroutine c_recipe_config_init(cfg) bind(c, name='l8_recipe_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_recipe_history_len(r) bind(c, name='l8_recipe_history_len')
            import :: c_ptr, c_int
            type(c_ptr), value :: r
            integer(c_int) :: c_recipe_history_len
        end function
        function c_recipe_role_name(r, i) bind(c, name='l8_recipe_role_name')
            import :: c_ptr, c_int
            type(c_ptr), value :: r
            integer(c_int), value :: i
            type(c_ptr) :: c_recipe_role_name
        end function
        function c_recipe_updates(r) bind(c, name='l8_recipe_updates')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: r
            integer(c_int64_t) :: c_recipe_updates
        end function
        subroutine c_recipe_destroy(r) bind(c, name='l8_recipe_destroy')
            import :: c_ptr
            type(c_ptr), value :: r
        end subroutine
        function c_recipe_update(r, s) bind(c, name='l8_recipe_update')
            import :: c_ptr, c_int
            type(c_ptr), value :: r, s
            integer(c_int) :: c_recipe_update
        end function
        subroutine c_linear_config_init(cfg) bind(c, name='l8_linear_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_linear_create(ctx, cfg, out) bind(c, name='l8_linear_create')
            import :: c_ptr, c_int, linear_config
            type(c_ptr), value :: ctx
            type(linear_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_linear_create
        end function
        subroutine c_linear_destroy(l) bind(c, name='l8_linear_destroy')
            import :: c_ptr
            type(c_ptr), value :: l
        end subroutine
        function c_linear_begin_step(l) bind(c, name='l8_linear_begin_step')
            import :: c_ptr, c_int
            type(c_ptr), value :: l
            integer(c_int) :: c_linear_begin_step
        end function
        function c_linear_refresh_weights(ls, n, s) bind(c, name='l8_linear_refresh_weights')
            import :: c_ptr, c_int
            type(c_ptr), intent(in) :: ls(*)
            integer(c_int), value :: n
            type(c_ptr), value :: s
            integer(c_int) :: c_linear_refresh_weights
        end function
        function c_linear_forward(l, x, y, saved, s) bind(c, name='l8_linear_forward')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, x, y, saved, s
            integer(c_int) :: c_linear_forward
        end function
        function c_linear_forward_act(l, act, x, y, saved, s) bind(c, name='l8_linear_forward_act')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, x, y, saved, s
            integer(c_int), value :: act
            integer(c_int) :: c_linear_forward_act
        end function
        function c_linear_backward_act(l, act, saved, da, y, dx, s) &
                bind(c, name='l8_linear_backward_act')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, da, y, dx, s
            integer(c_int), value :: act
            type(c_ptr) :: saved
            integer(c_int) :: c_linear_backward_act
        end function
        function c_linear_backward(l, saved, dy, dx, s) bind(c, name='l8_linear_backward')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, dy, dx, s
            type(c_ptr) :: saved
            integer(c_int) :: c_linear_backward
        end function
        subroutine c_linear_ctx_destroy(c) bind(c, name='l8_linear_ctx_destroy')
            import :: c_ptr
            type(c_ptr), value :: c
        end subroutine
        subroutine c_adamw_config_init(cfg) bind(c, name='l8_adamw_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_optim_create_adamw(g, cfg, out) bind(c, name='l8_optim_create_adamw')
            import :: c_ptr, c_int, adamw_config
            type(c_ptr), value :: g
            type(adamw_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_optim_create_adamw
        end function
        subroutine c_sgd_config_init(cfg) bind(c, name='l8_sgd_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_optim_create_sgd(g, cfg, out) bind(c, name='l8_optim_create_sgd')
            import :: c_ptr, c_int, sgd_config
            type(c_ptr), value :: g
            type(sgd_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_optim_create_sgd
        end function
        function c_optim_read_result(o, res) bind(c, name='l8_optim_read_result')
            import :: c_ptr, c_int, optim_result
            type(c_ptr), value :: o
            type(optim_result) :: res
            integer(c_int) :: c_optim_read_result
        end function
        subroutine c_optim_destroy(o) bind(c, name='l8_optim_destroy')
            import :: c_ptr
            type(c_ptr), value :: o
        end subroutine
        function c_optim_step(o, s, res) bind(c, name='l8_optim_step')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, s, res
            integer(c_int) :: c_optim_step
        end function
        function c_optim_set_lr(o, lr) bind(c, name='l8_optim_set_lr')
            import :: c_ptr, c_int, c_float
            type(c_ptr), value :: o
            real(c_float), value :: lr
            integer(c_int) :: c_optim_set_lr
        end function
        function c_convert(x, y, s) bind(c, name='l8_convert')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, y, s
            integer(c_int) :: c_convert
        end function
        function c_gelu(x, y, s) bind(c, name='l8_gelu')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, y, s
            integer(c_int) :: c_gelu
        end function
        function c_gelu_backward(x, dy, dx, s) bind(c, name='l8_gelu_backward')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, dy, dx, s
            integer(c_int) :: c_gelu_backward
        end function
        function c_softmax_xent(logits, labels, classes, grad_scale, dlogits, row_loss, row_hit, s) &
                bind(c, name='l8_softmax_xent')
            import :: c_ptr, c_int, c_float
            type(c_ptr), value :: logits, labels, dlogits, row_loss, row_hit, s
            integer(c_int), value :: classes
            real(c_float), value :: grad_scale
            integer(c_int) :: c_softmax_xent
        end function
        function c_softmax_xent_at(logits, labels, classes, grad_scale, cursor, stride, total, &
                dlogits, row_loss, row_hit, s) bind(c, name='l8_softmax_xent_at')
            import :: c_ptr, c_int, c_float, c_int64_t
            type(c_ptr), value :: logits, labels, cursor, dlogits, row_loss, row_hit, s
            integer(c_int), value :: classes
            real(c_float), value :: grad_scale
            integer(c_int64_t), value :: stride, total
            integer(c_int) :: c_softmax_xent_at
        end function
        function c_tag_push(name) bind(c, name='l8_tag_push')
            import :: c_char, c_int
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int) :: c_tag_push
        end function
        function c_tag_pop() bind(c, name='l8_tag_pop')
            import :: c_int
            integer(c_int) :: c_tag_pop
        end function
        function c_ckpt_writer_open(path, kind, version, out) bind(c, name='l8_ckpt_writer_open')
            import :: c_char, c_int32_t, c_ptr, c_int
            character(kind=c_char), intent(in) :: path(*), kind(*)
            integer(c_int32_t), value :: version
            type(c_ptr) :: out
            integer(c_int) :: c_ckpt_writer_open
        end function
        function c_ckpt_write_tensor(w, name, t) bind(c, name='l8_ckpt_write_tensor')
            import :: c_char, c_ptr, c_int
            type(c_ptr), value :: w, t
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int) :: c_ckpt_write_tensor
        end function
        function c_ckpt_writer_commit(w) bind(c, name='l8_ckpt_writer_commit')
            import :: c_ptr, c_int
            type(c_ptr), value :: w
            integer(c_int) :: c_ckpt_writer_commit
        end function
        subroutine c_ckpt_writer_abort(w) bind(c, name='l8_ckpt_writer_abort')
            import :: c_ptr
            type(c_ptr), value :: w
        end subroutine
        function c_ckpt_open(path, out) bind(c, name='l8_ckpt_open')
            import :: c_char, c_ptr, c_int
            character(kind=c_char), intent(in) :: path(*)
            type(c_ptr) :: out
            integer(c_int) :: c_ckpt_open
        end function
        function c_ckpt_expect(r, kind, version) bind(c, name='l8_ckpt_expect')
            import :: c_char, c_ptr, c_int, c_int32_t
            type(c_ptr), value :: r
            character(kind=c_char), intent(in) :: kind(*)
            integer(c_int32_t), value :: version
            integer(c_int) :: c_ckpt_expect
        end function
        function c_ckpt_write_section(w, name, bytes, n) bind(c, name='l8_ckpt_write_section')
            import :: c_char, c_ptr, c_int, c_size_t
            type(c_ptr), value :: w, bytes
            character(kind=c_char), intent(in) :: name(*)
            integer(c_size_t), value :: n
            integer(c_int) :: c_ckpt_write_section
        end function
        function c_ckpt_read_section_into(r, name, buf, n) &
                bind(c, name='l8_ckpt_read_section_into')
            import :: c_char, c_ptr, c_int, c_size_t
            type(c_ptr), value :: r, buf
            character(kind=c_char), intent(in) :: name(*)
            integer(c_size_t), value :: n
            integer(c_int) :: c_ckpt_read_section_into
        end function
        function c_ckpt_section(r, name, ptr, n) bind(c, name='l8_ckpt_section')
            import :: c_char, c_ptr, c_int, c_size_t
            type(c_ptr), value :: r
            character(kind=c_char), intent(in) :: name(*)
            type(c_ptr) :: ptr
            integer(c_size_t) :: n
            integer(c_int) :: c_ckpt_section
        end function
        function c_ckpt_has(r, name) bind(c, name='l8_ckpt_has')
            import :: c_char, c_ptr, c_int
            type(c_ptr), value :: r
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int) :: c_ckpt_has
        end function
        function c_ckpt_read_tensor(r, name, t) bind(c, name='l8_ckpt_read_tensor')
            import :: c_char, c_ptr, c_int
            type(c_ptr), value :: r, t
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int) :: c_ckpt_read_tensor
        end function
        function c_optim_save(o, w) bind(c, name='l8_optim_save')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, w
            integer(c_int) :: c_optim_save
        end function
        function c_optim_check_load(o, r) bind(c, name='l8_optim_check_load')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, r
            integer(c_int) :: c_optim_check_load
        end function
        function c_optim_load(o, r) bind(c, name='l8_optim_load')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, r
            integer(c_int) :: c_optim_load
        end function
        subroutine c_ckpt_close(r) bind(c, name='l8_ckpt_close')
            import :: c_ptr
            type(c_ptr), value :: r
        end subroutine
    end interface

    ! ---- FP8 metadata and casts, caller-cast Linear, row moves, rate schedules ----
    interface
        function c_tensor_dtype(t) bind(c, name='l8_tensor_dtype')
            import :: c_ptr, c_int
            type(c_ptr), value :: t
            integer(c_int) :: c_tensor_dtype
        end function
        function c_tensor_slice(t, d, start, stop, step, out) bind(c, name='l8_tensor_slice')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: t
            integer(c_int), value :: d
            integer(c_int64_t), value :: start, stop, step
            type(c_ptr) :: out
            integer(c_int) :: c_tensor_slice
        end function
        function c_tensor_reshape(t, ndim, shape, out) bind(c, name='l8_tensor_reshape')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: t
            integer(c_int), value :: ndim
            integer(c_int64_t), intent(in) :: shape(*)
            type(c_ptr) :: out
            integer(c_int) :: c_tensor_reshape
        end function
        function c_tensor_transpose(t, d0, d1, out) bind(c, name='l8_tensor_transpose')
            import :: c_ptr, c_int
            type(c_ptr), value :: t
            integer(c_int), value :: d0, d1
            type(c_ptr) :: out
            integer(c_int) :: c_tensor_transpose
        end function
        function c_tensor_copy(dst, src, s) bind(c, name='l8_tensor_copy')
            import :: c_ptr, c_int
            type(c_ptr), value :: dst, src, s
            integer(c_int) :: c_tensor_copy
        end function
        function c_tensor_contiguous(src, s, out) bind(c, name='l8_tensor_contiguous')
            import :: c_ptr, c_int
            type(c_ptr), value :: src, s
            type(c_ptr) :: out
            integer(c_int) :: c_tensor_contiguous
        end function
        function c_fp8_meta_create(ctx, out) bind(c, name='l8_fp8_meta_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            type(c_ptr) :: out
            integer(c_int) :: c_fp8_meta_create
        end function
        subroutine c_fp8_meta_release(m) bind(c, name='l8_fp8_meta_release')
            import :: c_ptr
            type(c_ptr), value :: m
        end subroutine
        function c_fp8_meta_get(m, scale, scale_inv, amax) bind(c, name='l8_fp8_meta_get')
            import :: c_ptr, c_int, c_float
            type(c_ptr), value :: m
            real(c_float) :: scale, scale_inv, amax
            integer(c_int) :: c_fp8_meta_get
        end function
        function c_fp8_meta_set(m, scale, scale_inv, amax) bind(c, name='l8_fp8_meta_set')
            import :: c_ptr, c_int, c_float
            type(c_ptr), value :: m
            real(c_float), value :: scale, scale_inv, amax
            integer(c_int) :: c_fp8_meta_set
        end function
        function c_tensor_set_fp8_meta(t, m) bind(c, name='l8_tensor_set_fp8_meta')
            import :: c_ptr, c_int
            type(c_ptr), value :: t, m
            integer(c_int) :: c_tensor_set_fp8_meta
        end function
        function c_tensor_fp8_meta(t) bind(c, name='l8_tensor_fp8_meta')
            import :: c_ptr
            type(c_ptr), value :: t
            type(c_ptr) :: c_tensor_fp8_meta
        end function
        function c_recipe_count(r) bind(c, name='l8_recipe_count')
            import :: c_ptr, c_int
            type(c_ptr), value :: r
            integer(c_int) :: c_recipe_count
        end function
        function c_recipe_meta(r, i) bind(c, name='l8_recipe_meta')
            import :: c_ptr, c_int
            type(c_ptr), value :: r
            integer(c_int), value :: i
            type(c_ptr) :: c_recipe_meta
        end function
        function c_recipe_dtype(r, role) bind(c, name='l8_recipe_dtype')
            import :: c_ptr, c_int
            type(c_ptr), value :: r
            integer(c_int), value :: role
            integer(c_int) :: c_recipe_dtype
        end function
        function c_linear_role_index(l, role) bind(c, name='l8_linear_role_index')
            import :: c_ptr, c_int
            type(c_ptr), value :: l
            integer(c_int), value :: role
            integer(c_int) :: c_linear_role_index
        end function
        function c_fp8_cast(x, out, flags, s) bind(c, name='l8_fp8_cast')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, out, s
            integer(c_int), value :: flags
            integer(c_int) :: c_fp8_cast
        end function
        function c_fp8_cast_transpose(x, out, out_t, flags, s) bind(c, name='l8_fp8_cast_transpose')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, out, out_t, s
            integer(c_int), value :: flags
            integer(c_int) :: c_fp8_cast_transpose
        end function
        function c_fp8_cast_transpose_dbias(x, out, out_t, dbias, flags, s) &
                bind(c, name='l8_fp8_cast_transpose_dbias')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, out, out_t, dbias, s
            integer(c_int), value :: flags
            integer(c_int) :: c_fp8_cast_transpose_dbias
        end function
        function c_fp8_dequantize(x, out, s) bind(c, name='l8_fp8_dequantize')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, out, s
            integer(c_int) :: c_fp8_dequantize
        end function
        function c_fp8_cast_transpose_act(act, x, out, out_t, flags, s) &
                bind(c, name='l8_fp8_cast_transpose_act')
            import :: c_ptr, c_int
            integer(c_int), value :: act, flags
            type(c_ptr), value :: x, out, out_t, s
            integer(c_int) :: c_fp8_cast_transpose_act
        end function
        function c_fp8_cast_transpose_dact(act, dy, a, out, out_t, dbias, flags, s) &
                bind(c, name='l8_fp8_cast_transpose_dact')
            import :: c_ptr, c_int
            integer(c_int), value :: act, flags
            type(c_ptr), value :: dy, a, out, out_t, dbias, s
            integer(c_int) :: c_fp8_cast_transpose_dact
        end function
        function c_dbias_dact(act, dy, a, dbias, s) bind(c, name='l8_dbias_dact')
            import :: c_ptr, c_int
            integer(c_int), value :: act
            type(c_ptr), value :: dy, a, dbias, s
            integer(c_int) :: c_dbias_dact
        end function
        function c_fp8_cast_transpose_many(n, x, out, out_t, flags, s) &
                bind(c, name='l8_fp8_cast_transpose_many')
            import :: c_ptr, c_int
            integer(c_int), value :: n, flags
            type(c_ptr), value :: x, out, out_t, s      ! arrays of n tensors (out: or NULL)
            integer(c_int) :: c_fp8_cast_transpose_many
        end function
        function c_fp8_transpose(x, out, s) bind(c, name='l8_fp8_transpose')
            import :: c_ptr, c_int
            type(c_ptr), value :: x, out, s
            integer(c_int) :: c_fp8_transpose
        end function
        function c_fp8_scale_update(hist, amax, scale, scale_inv, fp8_max, cfg, s) &
                bind(c, name='l8_fp8_scale_update')
            import :: c_ptr, c_int, scale_update_config
            type(c_ptr), value :: hist, amax, scale, scale_inv, fp8_max, s
            type(scale_update_config), intent(in) :: cfg
            integer(c_int) :: c_fp8_scale_update
        end function
        subroutine c_scale_update_config_init(cfg) bind(c, name='l8_fp8_scale_update_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_linear_get_stats(l, out) bind(c, name='l8_linear_get_stats')
            import :: c_ptr, c_int, linear_stats
            type(c_ptr), value :: l
            type(linear_stats), intent(inout) :: out
            integer(c_int) :: c_linear_get_stats
        end function
        function c_linear_in_features(l) bind(c, name='l8_linear_in_features')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: l
            integer(c_int64_t) :: c_linear_in_features
        end function
        function c_linear_out_features(l) bind(c, name='l8_linear_out_features')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: l
            integer(c_int64_t) :: c_linear_out_features
        end function
        function c_optim_is_sharded(o) bind(c, name='l8_optim_is_sharded')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int) :: c_optim_is_sharded
        end function
        function c_optim_shard_count(o) bind(c, name='l8_optim_shard_count')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int) :: c_optim_shard_count
        end function
        function c_optim_shard_range(o, i, offset, numel) bind(c, name='l8_optim_shard_range')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: o
            integer(c_int), value :: i
            integer(c_int64_t), intent(out) :: offset, numel
            integer(c_int) :: c_optim_shard_range
        end function
        function c_optim_shard_numel(o) bind(c, name='l8_optim_shard_numel')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: o
            integer(c_int64_t) :: c_optim_shard_numel
        end function
        function c_optim_state_bytes(o) bind(c, name='l8_optim_state_bytes')
            import :: c_ptr, c_size_t
            type(c_ptr), value :: o
            integer(c_size_t) :: c_optim_state_bytes
        end function
        function c_linear_forward_fp8(l, x8, x8t, y, saved, s) bind(c, name='l8_linear_forward_fp8')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, x8, x8t, y, saved, s
            integer(c_int) :: c_linear_forward_fp8
        end function
        function c_linear_forward_gelu(l, act, x, x8, x8t, z, h, saved, side, s) &
                bind(c, name='l8_linear_forward_gelu')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, x, x8, x8t, z, h, saved, side, s
            integer(c_int), value :: act
            integer(c_int) :: c_linear_forward_gelu
        end function
        function c_linear_backward_fp8(l, saved, dy8, dy8t, db, dx, s) &
                bind(c, name='l8_linear_backward_fp8')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, dy8, dy8t, db, dx, s
            type(c_ptr) :: saved
            integer(c_int) :: c_linear_backward_fp8
        end function
        function c_linear_backward_fp8_dx(l, saved, dy8, dy8t, db, dx, z, dx8, dx8t, s) &
                bind(c, name='l8_linear_backward_fp8_dx')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, dy8, dy8t, db, dx, z, dx8, dx8t, s
            type(c_ptr) :: saved
            integer(c_int) :: c_linear_backward_fp8_dx
        end function
        function c_linear_backward_dx(l, saved, dy, dx, z, dx8, dx8t, s) &
                bind(c, name='l8_linear_backward_dx')
            import :: c_ptr, c_int
            type(c_ptr), value :: l, dy, dx, z, dx8, dx8t, s
            type(c_ptr) :: saved
            integer(c_int) :: c_linear_backward_dx
        end function
        function c_gather_rows(src, idx, dst, bad, s) bind(c, name='l8_gather_rows')
            import :: c_ptr, c_int
            type(c_ptr), value :: src, idx, dst, bad, s
            integer(c_int) :: c_gather_rows
        end function
        function c_gather_rows_at(src, idx, cursor, stride, dst, bad, s) &
                bind(c, name='l8_gather_rows_at')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: src, idx, cursor, dst, bad, s
            integer(c_int64_t), value :: stride
            integer(c_int) :: c_gather_rows_at
        end function
        function c_put_rows_at(dst, cursor, stride, src, bad, s) bind(c, name='l8_put_rows_at')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: dst, cursor, src, bad, s
            integer(c_int64_t), value :: stride
            integer(c_int) :: c_put_rows_at
        end function
        function c_optim_lr(o) bind(c, name='l8_optim_lr')
            import :: c_ptr, c_float
            type(c_ptr), value :: o
            real(c_float) :: c_optim_lr
        end function
        function c_optim_set_lr_external(o, external) bind(c, name='l8_optim_set_lr_external')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int), value :: external
            integer(c_int) :: c_optim_set_lr_external
        end function
        function c_optim_push_lr(o, s) bind(c, name='l8_optim_push_lr')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, s
            integer(c_int) :: c_optim_push_lr
        end function
        function c_optim_set_lr_table(o, rates, s) bind(c, name='l8_optim_set_lr_table')
            import :: c_ptr, c_int
            type(c_ptr), value :: o, rates, s
            integer(c_int) :: c_optim_set_lr_table
        end function
        function c_optim_cursor(o) bind(c, name='l8_optim_cursor')
            import :: c_ptr
            type(c_ptr), value :: o
            type(c_ptr) :: c_optim_cursor
        end function
    end interface

    ! ---- what a resumable checkpoint holds: optimizer state and step, the
    ! recipe's scaling state (ops/optim.h, ops/recipe.h) ----
    interface
        function c_optim_state_count(o) bind(c, name='l8_optim_state_count')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int) :: c_optim_state_count
        end function
        function c_optim_state_name(o, k) bind(c, name='l8_optim_state_name')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int), value :: k
            type(c_ptr) :: c_optim_state_name
        end function
        function c_optim_state(o, k) bind(c, name='l8_optim_state')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int), value :: k
            type(c_ptr) :: c_optim_state
        end function
        function c_optim_state_view(o, k, id, out) bind(c, name='l8_optim_state_view')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int), value :: k, id
            type(c_ptr) :: out
            integer(c_int) :: c_optim_state_view
        end function
        ! uint64_t in C: the same 8 bytes, read as non-negative here
        function c_optim_get_step(o, step) bind(c, name='l8_optim_get_step')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: o
            integer(c_int64_t) :: step
            integer(c_int) :: c_optim_get_step
        end function
        function c_optim_set_step(o, step) bind(c, name='l8_optim_set_step')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: o
            integer(c_int64_t), value :: step
            integer(c_int) :: c_optim_set_step
        end function
        function c_recipe_state(r, amax_history, scale, amax, fp8_max) bind(c, name='l8_recipe_state')
            import :: c_ptr, c_int
            type(c_ptr), value :: r, amax_history, scale, amax, fp8_max
            integer(c_int) :: c_recipe_state
        end function
        function c_recipe_push_scales(r, s) bind(c, name='l8_recipe_push_scales')
            import :: c_ptr, c_int
            type(c_ptr), value :: r, s
            integer(c_int) :: c_recipe_push_scales
        end function
        function c_ckpt_check_tensor(r, name, t) bind(c, name='l8_ckpt_check_tensor')
            import :: c_char, c_ptr, c_int
            type(c_ptr), value :: r, t
            character(kind=c_char), intent(in) :: name(*)
            integer(c_int) :: c_ckpt_check_tensor
        end function
    end interface

    ! ---- communicators (runtime/comm.h) ----
    interface
        function c_comm_id_create(ctx, transport, id) bind(c, name='l8_comm_id_create')
            import :: c_ptr, c_int, l8_comm_id
            type(c_ptr), value :: ctx
            integer(c_int), value :: transport
            type(l8_comm_id) :: id
            integer(c_int) :: c_comm_id_create
        end function
        function c_comm_init_rank(ctx, id, rank, world, cfg, out) bind(c, name='l8_comm_init_rank')
            import :: c_ptr, c_int, l8_comm_id, comm_config
            type(c_ptr), value :: ctx
            type(comm_config), intent(in) :: cfg
            type(l8_comm_id), intent(in) :: id
            integer(c_int), value :: rank, world
            type(c_ptr) :: out
            integer(c_int) :: c_comm_init_rank
        end function
        subroutine c_comm_destroy(comm) bind(c, name='l8_comm_destroy')
            import :: c_ptr
            type(c_ptr), value :: comm
        end subroutine
        function c_comm_rank(comm) bind(c, name='l8_comm_rank')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm
            integer(c_int) :: c_comm_rank
        end function
        function c_comm_size(comm) bind(c, name='l8_comm_size')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm
            integer(c_int) :: c_comm_size
        end function
        function c_comm_all_reduce(comm, send, recv, op, s) bind(c, name='l8_comm_all_reduce')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, send, recv, s
            integer(c_int), value :: op
            integer(c_int) :: c_comm_all_reduce
        end function
        function c_comm_broadcast(comm, buf, root, s) bind(c, name='l8_comm_broadcast')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, buf, s
            integer(c_int), value :: root
            integer(c_int) :: c_comm_broadcast
        end function
        function c_comm_all_gather(comm, send, recv, dim, s) bind(c, name='l8_comm_all_gather')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, send, recv, s
            integer(c_int), value :: dim
            integer(c_int) :: c_comm_all_gather
        end function
        function c_comm_reduce_scatter(comm, send, recv, op, dim, s) &
                bind(c, name='l8_comm_reduce_scatter')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, send, recv, s
            integer(c_int), value :: op, dim
            integer(c_int) :: c_comm_reduce_scatter
        end function
        subroutine c_comm_config_init(cfg) bind(c, name='l8_comm_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_comm_init_env(ctx, cfg, out) bind(c, name='l8_comm_init_env')
            import :: c_ptr, c_int, comm_config
            type(c_ptr), value :: ctx
            type(comm_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_comm_init_env
        end function
        function c_comm_split(comm, color, key, out) bind(c, name='l8_comm_split')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm
            integer(c_int), value :: color, key
            type(c_ptr) :: out
            integer(c_int) :: c_comm_split
        end function
        function c_comm_grid(comm, tp, tp_comm, dp_comm) bind(c, name='l8_comm_grid')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, tp_comm, dp_comm
            integer(c_int), value :: tp
            integer(c_int) :: c_comm_grid
        end function
        subroutine c_comm_abort(comm) bind(c, name='l8_comm_abort')
            import :: c_ptr
            type(c_ptr), value :: comm
        end subroutine
        function c_comm_check(comm) bind(c, name='l8_comm_check')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm
            integer(c_int) :: c_comm_check
        end function
        function c_comm_barrier(comm) bind(c, name='l8_comm_barrier')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm
            integer(c_int) :: c_comm_barrier
        end function
    end interface

    ! ---- data parallel (runtime/ddp.h) and the hooks over a communicator ----
    interface
        ! Taken by address only (c_funloc): the hooks C calls back.
        function c_params_grad_ready(group, id, ev) bind(c, name='l8_params_grad_ready')
            import :: c_ptr, c_int
            type(c_ptr), value :: group, ev
            integer(c_int), value :: id
            integer(c_int) :: c_params_grad_ready
        end function
        function c_comm_reduce_amax(comm, t, s) bind(c, name='l8_comm_reduce_amax')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, t, s
            integer(c_int) :: c_comm_reduce_amax
        end function
        function c_comm_reduce_sum(comm, t, s) bind(c, name='l8_comm_reduce_sum')
            import :: c_ptr, c_int
            type(c_ptr), value :: comm, t, s
            integer(c_int) :: c_comm_reduce_sum
        end function
        subroutine c_params_config_init(cfg) bind(c, name='l8_params_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_recipe_set_reduce(r, fn, arg) bind(c, name='l8_recipe_set_reduce')
            import :: c_ptr, c_funptr, c_int
            type(c_ptr), value :: r, arg
            type(c_funptr), value :: fn
            integer(c_int) :: c_recipe_set_reduce
        end function
        function c_optim_set_norm_reduce(o, fn, arg) bind(c, name='l8_optim_set_norm_reduce')
            import :: c_ptr, c_funptr, c_int
            type(c_ptr), value :: o, arg
            type(c_funptr), value :: fn
            integer(c_int) :: c_optim_set_norm_reduce
        end function
        function c_optim_set_shard(o, n, offset, numel) bind(c, name='l8_optim_set_shard')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: o
            integer(c_int), value :: n
            integer(c_int64_t), intent(in) :: offset(*), numel(*)
            integer(c_int) :: c_optim_set_shard
        end function
        function c_optim_set_shard_rank(o, rank, world) bind(c, name='l8_optim_set_shard_rank')
            import :: c_ptr, c_int
            type(c_ptr), value :: o
            integer(c_int), value :: rank, world
            integer(c_int) :: c_optim_set_shard_rank
        end function
        subroutine c_ddp_config_init(cfg) bind(c, name='l8_ddp_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_ddp_create(g, dp, cfg, out) bind(c, name='l8_ddp_create')
            import :: c_ptr, c_int, ddp_config
            type(c_ptr), value :: g, dp
            type(ddp_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_ddp_create
        end function
        function c_graph_native(ctx) bind(c, name='l8_graph_native')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            integer(c_int) :: c_graph_native
        end function
        function c_graph_create(ctx, s, out) bind(c, name='l8_graph_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx, s
            type(c_ptr) :: out
            integer(c_int) :: c_graph_create
        end function
        function c_graph_warmup(g, fn, arg) bind(c, name='l8_graph_warmup')
            import :: c_ptr, c_funptr, c_int
            type(c_ptr), value :: g, arg
            type(c_funptr), value :: fn
            integer(c_int) :: c_graph_warmup
        end function
        function c_graph_capture(g, fn, arg) bind(c, name='l8_graph_capture')
            import :: c_ptr, c_funptr, c_int
            type(c_ptr), value :: g, arg
            type(c_funptr), value :: fn
            integer(c_int) :: c_graph_capture
        end function
        function c_graph_launch(g) bind(c, name='l8_graph_launch')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int) :: c_graph_launch
        end function
        function c_graph_launch_repeat(g, n) bind(c, name='l8_graph_launch_repeat')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int), value :: n
            integer(c_int) :: c_graph_launch_repeat
        end function
        function c_graph_get_stats(g, out) bind(c, name='l8_graph_get_stats')
            import :: c_ptr, c_int, graph_stats
            type(c_ptr), value :: g
            type(graph_stats), intent(inout) :: out
            integer(c_int) :: c_graph_get_stats
        end function
        subroutine c_graph_destroy(g) bind(c, name='l8_graph_destroy')
            import :: c_ptr
            type(c_ptr), value :: g
        end subroutine
        subroutine c_ddp_destroy(d) bind(c, name='l8_ddp_destroy')
            import :: c_ptr
            type(c_ptr), value :: d
        end subroutine
        function c_ddp_begin_micro_batch(d, last) bind(c, name='l8_ddp_begin_micro_batch')
            import :: c_ptr, c_int
            type(c_ptr), value :: d
            integer(c_int), value :: last
            integer(c_int) :: c_ddp_begin_micro_batch
        end function
        function c_ddp_mark_unused(d, id) bind(c, name='l8_ddp_mark_unused')
            import :: c_ptr, c_int
            type(c_ptr), value :: d
            integer(c_int), value :: id
            integer(c_int) :: c_ddp_mark_unused
        end function
        function c_ddp_finish(d, s) bind(c, name='l8_ddp_finish')
            import :: c_ptr, c_int
            type(c_ptr), value :: d, s
            integer(c_int) :: c_ddp_finish
        end function
        function c_ddp_shard_ranges(d, max, n, offset, numel) bind(c, name='l8_ddp_shard_ranges')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: d
            integer(c_int), value :: max
            integer(c_int) :: n
            integer(c_int64_t) :: offset(*), numel(*)
            integer(c_int) :: c_ddp_shard_ranges
        end function
        function c_ddp_gather_params(d, s, wait) bind(c, name='l8_ddp_gather_params')
            import :: c_ptr, c_int
            type(c_ptr), value :: d, s
            integer(c_int), value :: wait
            integer(c_int) :: c_ddp_gather_params
        end function
        function c_ddp_wait_param(d, id, s) bind(c, name='l8_ddp_wait_param')
            import :: c_ptr, c_int
            type(c_ptr), value :: d, s
            integer(c_int), value :: id
            integer(c_int) :: c_ddp_wait_param
        end function
        function c_ddp_get_stats(d, out) bind(c, name='l8_ddp_get_stats')
            import :: c_ptr, c_int, ddp_stats
            type(c_ptr), value :: d
            type(ddp_stats) :: out
            integer(c_int) :: c_ddp_get_stats
        end function
        function c_ddp_bucket(d, b, first, n) bind(c, name='l8_ddp_bucket')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: d
            integer(c_int), value :: b
            integer(c_int64_t) :: first, n
            integer(c_int) :: c_ddp_bucket
        end function
    end interface

    ! ---- memory: the context's allocator and pinned pool, the trace, offload ----
    interface
        function c_error_set_text(st, call, msg) bind(c, name='l8_error_set_text')
            import :: c_int, c_char
            integer(c_int), value :: st
            character(kind=c_char), intent(in) :: call(*), msg(*)
            integer(c_int) :: c_error_set_text
        end function
        function c_ctx_device(ctx) bind(c, name='l8_ctx_device')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            integer(c_int) :: c_ctx_device
        end function
        function c_ctx_stream(ctx, kind) bind(c, name='l8_ctx_stream')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            integer(c_int), value :: kind
            type(c_ptr) :: c_ctx_stream
        end function
        function c_event_create(ctx, timing, out) bind(c, name='l8_event_create')
            import :: c_ptr, c_int
            type(c_ptr), value :: ctx
            integer(c_int), value :: timing
            type(c_ptr) :: out
            integer(c_int) :: c_event_create
        end function
        subroutine c_event_destroy(e) bind(c, name='l8_event_destroy')
            import :: c_ptr
            type(c_ptr), value :: e
        end subroutine
        function c_event_record(e, s) bind(c, name='l8_event_record')
            import :: c_ptr, c_int
            type(c_ptr), value :: e, s
            integer(c_int) :: c_event_record
        end function
        function c_event_query(e, done) bind(c, name='l8_event_query')
            import :: c_ptr, c_int
            type(c_ptr), value :: e
            integer(c_int) :: done
            integer(c_int) :: c_event_query
        end function
        function c_event_synchronize(e) bind(c, name='l8_event_synchronize')
            import :: c_ptr, c_int
            type(c_ptr), value :: e
            integer(c_int) :: c_event_synchronize
        end function
        function c_event_elapsed_ms(a, b, ms) bind(c, name='l8_event_elapsed_ms')
            import :: c_ptr, c_int, c_float
            type(c_ptr), value :: a, b
            real(c_float) :: ms
            integer(c_int) :: c_event_elapsed_ms
        end function
        function c_params_set_grad_ready_cb(g, fn, arg) &
                bind(c, name='l8_params_set_grad_ready_cb')
            import :: c_ptr, c_funptr, c_int
            type(c_ptr), value :: g, arg
            type(c_funptr), value :: fn
            integer(c_int) :: c_params_set_grad_ready_cb
        end function
        subroutine c_params_reset_ready(g) bind(c, name='l8_params_reset_ready')
            import :: c_ptr
            type(c_ptr), value :: g
        end subroutine
        function c_params_ready_count(g, id) bind(c, name='l8_params_ready_count')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int), value :: id
            integer(c_int) :: c_params_ready_count
        end function
        function c_params_missing_count(g) bind(c, name='l8_params_missing_count')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int) :: c_params_missing_count
        end function
        function c_params_describe_missing(g, buf, n) bind(c, name='l8_params_describe_missing')
            import :: c_ptr, c_size_t
            type(c_ptr), value :: g, buf
            integer(c_size_t), value :: n
            integer(c_size_t) :: c_params_describe_missing
        end function
        function c_params_check_all_ready(g) bind(c, name='l8_params_check_all_ready')
            import :: c_ptr, c_int
            type(c_ptr), value :: g
            integer(c_int) :: c_params_check_all_ready
        end function
        function c_params_zero_grad(g, s) bind(c, name='l8_params_zero_grad')
            import :: c_ptr, c_int
            type(c_ptr), value :: g, s
            integer(c_int) :: c_params_zero_grad
        end function
        function c_params_grad_flat(g) bind(c, name='l8_params_grad_flat')
            import :: c_ptr
            type(c_ptr), value :: g
            type(c_ptr) :: c_params_grad_flat
        end function
        function c_tensor_data(t, ptr) bind(c, name='l8_tensor_data')
            import :: c_ptr, c_int
            type(c_ptr), value :: t
            type(c_ptr) :: ptr
            integer(c_int) :: c_tensor_data
        end function
        function c_ctx_allocator(ctx) bind(c, name='l8_ctx_allocator')
            import :: c_ptr
            type(c_ptr), value :: ctx
            type(c_ptr) :: c_ctx_allocator
        end function
        function c_ctx_pinned(ctx) bind(c, name='l8_ctx_pinned')
            import :: c_ptr
            type(c_ptr), value :: ctx
            type(c_ptr) :: c_ctx_pinned
        end function
        function c_ctx_trace(ctx) bind(c, name='l8_ctx_trace')
            import :: c_ptr
            type(c_ptr), value :: ctx
            type(c_ptr) :: c_ctx_trace
        end function
        function c_alloc_get_stats(a, out) bind(c, name='l8_alloc_get_stats')
            import :: c_ptr, c_int, l8_alloc_stats
            type(c_ptr), value :: a
            type(l8_alloc_stats) :: out
            integer(c_int) :: c_alloc_get_stats
        end function
        function c_alloc_empty_cache(a) bind(c, name='l8_alloc_empty_cache')
            import :: c_ptr, c_int
            type(c_ptr), value :: a
            integer(c_int) :: c_alloc_empty_cache
        end function
        subroutine c_alloc_reset_peaks(a) bind(c, name='l8_alloc_reset_peaks')
            import :: c_ptr
            type(c_ptr), value :: a
        end subroutine
        function c_alloc_describe(a, buf, n) bind(c, name='l8_alloc_describe')
            import :: c_ptr, c_size_t
            type(c_ptr), value :: a, buf
            integer(c_size_t), value :: n
            integer(c_size_t) :: c_alloc_describe
        end function
        function c_pinned_get_stats(p, out) bind(c, name='l8_pinned_get_stats')
            import :: c_ptr, c_int, l8_pinned_stats
            type(c_ptr), value :: p
            type(l8_pinned_stats) :: out
            integer(c_int) :: c_pinned_get_stats
        end function
        function c_pinned_empty_cache(p) bind(c, name='l8_pinned_empty_cache')
            import :: c_ptr, c_int
            type(c_ptr), value :: p
            integer(c_int) :: c_pinned_empty_cache
        end function
        subroutine c_trace_record(t, kind, device, stream, addr, size, aux) &
                bind(c, name='l8_trace_record')
            import :: c_ptr, c_int, c_int64_t
            type(c_ptr), value :: t
            integer(c_int), value :: kind, device
            integer(c_int64_t), value :: stream, addr, size, aux
        end subroutine
        function c_trace_flush(t) bind(c, name='l8_trace_flush')
            import :: c_ptr, c_int
            type(c_ptr), value :: t
            integer(c_int) :: c_trace_flush
        end function
        function c_trace_path(t) bind(c, name='l8_trace_path')
            import :: c_ptr
            type(c_ptr), value :: t
            type(c_ptr) :: c_trace_path
        end function
        function c_trace_count(t) bind(c, name='l8_trace_count')
            import :: c_ptr, c_int64_t
            type(c_ptr), value :: t
            integer(c_int64_t) :: c_trace_count
        end function
        function c_trace_held(t) bind(c, name='l8_trace_held')
            import :: c_ptr, c_size_t
            type(c_ptr), value :: t
            integer(c_size_t) :: c_trace_held
        end function
        function c_trace_events(t, first, out, n) bind(c, name='l8_trace_events')
            import :: c_ptr, c_size_t, l8_trace_event
            type(c_ptr), value :: t
            integer(c_size_t), value :: first, n
            type(l8_trace_event) :: out(*)
            integer(c_size_t) :: c_trace_events
        end function
        function c_trace_tag_name(t, id) bind(c, name='l8_trace_tag_name')
            import :: c_ptr, c_int32_t
            type(c_ptr), value :: t
            integer(c_int32_t), value :: id
            type(c_ptr) :: c_trace_tag_name
        end function
        function c_trace_rank() bind(c, name='l8_trace_rank')
            import :: c_int
            integer(c_int) :: c_trace_rank
        end function
        function c_trace_set_rank(rank) bind(c, name='l8_trace_set_rank')
            import :: c_int
            integer(c_int), value :: rank
            integer(c_int) :: c_trace_set_rank
        end function
        function c_tag_current() bind(c, name='l8_tag_current')
            import :: c_ptr
            type(c_ptr) :: c_tag_current
        end function
        subroutine c_offload_config_init(cfg) bind(c, name='l8_offload_config_init')
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        function c_offload_create(ctx, cfg, out) bind(c, name='l8_offload_create')
            import :: c_ptr, c_int, offload_config
            type(c_ptr), value :: ctx
            type(offload_config), intent(in) :: cfg
            type(c_ptr) :: out
            integer(c_int) :: c_offload_create
        end function
        subroutine c_offload_destroy(off) bind(c, name='l8_offload_destroy')
            import :: c_ptr
            type(c_ptr), value :: off
        end subroutine
        function c_offload_forward_layer(off, layer, enable) &
                bind(c, name='l8_offload_forward_layer')
            import :: c_ptr, c_int
            type(c_ptr), value :: off
            integer(c_int), value :: layer, enable
            integer(c_int) :: c_offload_forward_layer
        end function
        function c_offload_backward_layer(off, layer) bind(c, name='l8_offload_backward_layer')
            import :: c_ptr, c_int
            type(c_ptr), value :: off
            integer(c_int), value :: layer
            integer(c_int) :: c_offload_backward_layer
        end function
        ! The three hooks, also handed to a Linear (l8_linear_create's offload=).
        function c_offload_save(off, t, name, s) bind(c, name='l8_offload_save')
            import :: c_ptr, c_int
            type(c_ptr), value :: off, t, name, s
            integer(c_int) :: c_offload_save
        end function
        function c_offload_restore(off, t, name, s) bind(c, name='l8_offload_restore')
            import :: c_ptr, c_int
            type(c_ptr), value :: off, t, name, s
            integer(c_int) :: c_offload_restore
        end function
        subroutine c_offload_release(off, t, name) bind(c, name='l8_offload_release')
            import :: c_ptr
            type(c_ptr), value :: off, t, name
        end subroutine
        function c_offload_poll(off) bind(c, name='l8_offload_poll')
            import :: c_ptr, c_int
            type(c_ptr), value :: off
            integer(c_int) :: c_offload_poll
        end function
        function c_offload_wait(off) bind(c, name='l8_offload_wait')
            import :: c_ptr, c_int
            type(c_ptr), value :: off
            integer(c_int) :: c_offload_wait
        end function
        function c_offload_state_of(off, st) bind(c, name='l8_offload_state_of')
            import :: c_ptr, c_int
            type(c_ptr), value :: off, st
            integer(c_int) :: c_offload_state_of
        end function
        function c_offload_state_name(st) bind(c, name='l8_offload_state_name')
            import :: c_ptr, c_int
            integer(c_int), value :: st
            type(c_ptr) :: c_offload_state_name
        end function
        function c_offload_get_stats(off, out) bind(c, name='l8_offload_get_stats')
            import :: c_ptr, c_int, l8_offload_stats
            type(c_ptr), value :: off
            type(l8_offload_stats) :: out
            integer(c_int) :: c_offload_get_stats
        end function
        function c_tensor_storage(t) bind(c, name='l8_tensor_storage')
            import :: c_ptr
            type(c_ptr), value :: t
            type(c_ptr) :: c_tensor_storage
        end function
    end interface

    ! Room for the C init functions to write a whole (grown) struct into.
    integer, parameter :: SCRATCH_WORDS = 512             ! 4 KiB

    ! The C config init functions (l8_*_config_init) as procedure arguments.
    abstract interface
        subroutine c_config_init(cfg) bind(c)
            import :: c_ptr
            type(c_ptr), value :: cfg
        end subroutine
        ! l8_alloc_describe, l8_params_describe_missing: text about obj into
        ! buf (n bytes with the NUL), the length wanted returned
        function c_describe(obj, buf, n) bind(c)
            import :: c_ptr, c_size_t
            type(c_ptr), value :: obj, buf
            integer(c_size_t), value :: n
            integer(c_size_t) :: c_describe
        end function
    end interface

contains

    ! ---- config mirrors: the C defaults, cut to the mirror's length ----

    ! What `init` writes, in a zeroed scratch of SCRATCH_WORDS words.
    function c_defaults(init) result(scratch)
        procedure(c_config_init) :: init
        integer(c_int64_t), target :: scratch(SCRATCH_WORDS)
        scratch = 0
        call init(c_loc(scratch))
    end function
    subroutine init_ctx_config(cfg)
        type(ctx_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_ctx_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_adamw_config(cfg)
        type(adamw_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_adamw_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_sgd_config(cfg)
        type(sgd_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_sgd_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_recipe_config(cfg)
        type(recipe_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_recipe_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_scale_update_config(cfg)
        type(scale_update_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_scale_update_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_linear_config(cfg)
        type(linear_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_linear_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_comm_config(cfg, timeout_ms, init_timeout_ms)
        type(comm_config), intent(out) :: cfg
        integer, intent(in), optional :: timeout_ms, init_timeout_ms
        cfg = transfer(c_defaults(c_comm_config_init), cfg)
        cfg%size = c_sizeof(cfg)
        if (present(timeout_ms)) cfg%timeout_ms = int(timeout_ms, c_int)
        if (present(init_timeout_ms)) cfg%init_timeout_ms = int(init_timeout_ms, c_int)
    end subroutine
    subroutine init_params_config(cfg)
        type(params_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_params_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine
    subroutine init_ddp_config(cfg)
        type(ddp_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_ddp_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine

    subroutine init_offload_config(cfg)
        type(offload_config), intent(out) :: cfg
        cfg = transfer(c_defaults(c_offload_config_init), cfg)
        cfg%size = c_sizeof(cfg)
    end subroutine

    ! An optional integer, 0 when absent.
    pure integer(c_int64_t) function opt64(x)
        integer(c_int64_t), intent(in), optional :: x
        opt64 = 0
        if (present(x)) opt64 = x
    end function

    ! A logical as the C side's 0 / 1.
    pure integer(c_int) function int01(x)
        logical, intent(in) :: x
        int01 = merge(1_c_int, 0_c_int, x)
    end function

    ! Does the C struct `init` fills not fit the scratch, or is it shorter
    ! than a mirror of `bytes`? (Its size field comes first.)
    logical function misfit(init, bytes)
        procedure(c_config_init) :: init
        integer(c_size_t), intent(in) :: bytes
        integer(c_int64_t) :: scratch(SCRATCH_WORDS)
        scratch = c_defaults(init)
        misfit = scratch(1) > SCRATCH_WORDS * 8 .or. scratch(1) < bytes
    end function

    ! ---- strings ----

    ! A Fortran string as a NUL-terminated C string (trailing blanks trimmed).
    pure function cstr(s) result(c)
        character(len=*), intent(in) :: s
        character(kind=c_char, len=len_trim(s) + 1) :: c
        c = trim(s) // c_null_char
    end function

    ! The text a C function of snprintf rules (obj, buf, n: the length it
    ! wanted) writes about obj: asked for its length, then into a buffer of
    ! that size (a longer text by then, e.g. a new segment, is cut there).
    function described(fn, obj) result(s)
        procedure(c_describe) :: fn
        type(c_ptr), intent(in) :: obj
        character(len=:), allocatable :: s
        character(kind=c_char), allocatable, target :: buf(:)
        integer(c_size_t) :: n
        n = fn(obj, c_null_ptr, 0_c_size_t)
        allocate(buf(n + 1))
        n = fn(obj, c_loc(buf), n + 1)
        s = fstr(c_loc(buf))
    end function

    ! A C string (library-owned) as an allocated Fortran string; "" for NULL.
    function fstr(p) result(s)
        type(c_ptr), intent(in) :: p
        character(len=:), allocatable :: s
        character(kind=c_char), pointer :: chars(:)
        integer(c_size_t) :: n, i
        if (.not. c_associated(p)) then
            s = ''
            return
        end if
        n = c_strlen(p)
        call c_f_pointer(p, chars, [n])
        allocate(character(len=n) :: s)
        do i = 1, n
            s(i:i) = chars(i)
        end do
    end function

    ! The calling thread's last error as one line ("L8_ERR_...: call failed
    ! ...: message (file:line)"), or "no error".
    function l8_last_error_message() result(s)
        character(len=:), allocatable :: s
        s = fstr(c_last_error_string())
    end function

    ! "L8_OK", "L8_ERR_INVALID_ARG", ...
    function l8_status_name(st) result(s)
        integer(c_int), intent(in) :: st
        character(len=:), allocatable :: s
        s = fstr(c_status_name(st))
    end function

    ! The library's version string, "0.1.0".
    function l8_version() result(s)
        character(len=:), allocatable :: s
        s = fstr(c_version())
    end function

    ! ---- contexts ----

    ! A context on `device` ("host", "cuda:N"); absent: L8_DEVICE, else the
    ! first GPU, else the host. By keyword: memory_limit, the device
    ! allocator's cap in bytes (reserved bytes never exceed it: what lean8
    ! may take of a GPU shared with the rest of the program), pinned_limit
    ! the pinned pool's (0 or absent: none; negative: refused), and
    ! trace_path, a memory trace file of the context's own (%r rank, %p pid;
    ! absent: the process-wide L8_TRACE one, if set).
    integer(c_int) function l8_ctx_create(ctx, device, memory_limit, pinned_limit, &
            trace_path) result(st)
        type(l8_ctx), intent(out) :: ctx
        character(len=*), intent(in), optional :: device, trace_path
        integer(c_int64_t), intent(in), optional :: memory_limit, pinned_limit
        type(ctx_config) :: cfg
        character(kind=c_char, len=:), allocatable, target :: dev, path
        call init_ctx_config(cfg)
        if (present(device)) then
            dev = cstr(device)
            cfg%device = c_loc(dev)
        end if
        if (present(memory_limit)) then
            if (memory_limit < 0) then
                st = refuse('l8_ctx_create', 'memory_limit is negative')
                return
            end if
            cfg%memory_limit = memory_limit
        end if
        if (present(pinned_limit)) then
            if (pinned_limit < 0) then
                st = refuse('l8_ctx_create', 'pinned_limit is negative')
                return
            end if
            cfg%pinned_limit = pinned_limit
        end if
        if (present(trace_path)) then
            path = cstr(trace_path)
            cfg%trace_path = c_loc(path)
        end if
        st = c_ctx_create(cfg, ctx%p)
    end function

    ! Every tensor, layer, group... of ctx must be destroyed first.
    subroutine l8_ctx_destroy(ctx)
        type(l8_ctx), intent(inout) :: ctx
        call c_ctx_destroy(ctx%p)
        ctx%p = c_null_ptr
    end subroutine

    integer(c_int) function l8_ctx_synchronize(ctx) result(st)
        type(l8_ctx), intent(in) :: ctx
        st = c_ctx_synchronize(ctx%p)
    end function

    ! "NVIDIA H200", "host"; "" for an unset handle (the C accessor wants a
    ! context: it would read through NULL).
    function l8_ctx_device_name(ctx) result(s)
        type(l8_ctx), intent(in) :: ctx
        character(len=:), allocatable :: s
        s = ''
        if (c_associated(ctx%p)) s = fstr(c_ctx_device_name(ctx%p))
    end function

    ! ---- tensors ----

    ! A new dense tensor of dtype dt whose Fortran-order dims are `dims`
    ! (the C shape reversed), contents undefined.
    integer(c_int) function l8_tensor_empty(ctx, dt, dims, t) result(st)
        type(l8_ctx), intent(in) :: ctx
        integer(c_int), intent(in) :: dt
        integer, intent(in) :: dims(:)
        type(l8_tensor), intent(out) :: t
        integer(c_int64_t) :: shp(max(1, size(dims)))
        integer :: i
        do i = 1, size(dims)
            shp(i) = int(dims(size(dims) + 1 - i), c_int64_t)
        end do
        st = c_tensor_empty(ctx%p, dt, int(size(dims), c_int), shp, t%p)
    end function

    subroutine l8_tensor_destroy(t)
        type(l8_tensor), intent(inout) :: t
        call c_tensor_destroy(t%p)
        t%p = c_null_ptr
    end subroutine

    integer(c_int64_t) function l8_tensor_numel(t)
        type(l8_tensor), intent(in) :: t
        l8_tensor_numel = c_tensor_numel(t%p)
    end function

    ! The tensor's dims in Fortran order (the C shape reversed); empty for a
    ! null tensor.
    function l8_tensor_dims(t) result(dims)
        type(l8_tensor), intent(in) :: t
        integer, allocatable :: dims(:)
        integer :: n, i
        n = 0
        if (c_associated(t%p)) n = max(0, int(c_tensor_ndim(t%p)))
        allocate(dims(n))
        do i = 1, n
            dims(i) = int(c_tensor_dim(t%p, int(n - i, c_int)))
        end do
    end function

    ! Shared body of the array copies (f32 and i32 elements: 4 bytes each).
    integer(c_int) function new_from(ctx, dt, dims, host, bytes, t) result(st)
        type(l8_ctx), intent(in) :: ctx
        integer(c_int), intent(in) :: dt
        integer, intent(in) :: dims(:)
        type(c_ptr), intent(in) :: host
        integer(c_size_t), intent(in) :: bytes
        type(l8_tensor), intent(out) :: t
        st = l8_tensor_empty(ctx, dt, dims, t)
        if (st /= L8_OK) return
        st = c_tensor_copy_from_host(t%p, host, bytes, c_null_ptr)
        if (st /= L8_OK) call l8_tensor_destroy(t)
    end function

    integer(c_int) function from_f32(ctx, x, t) result(st)
        type(l8_ctx), intent(in) :: ctx
        real(c_float), intent(in), target, contiguous :: x(..)
        type(l8_tensor), intent(out) :: t
        st = new_from(ctx, L8_F32, shape(x), c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, t)
    end function
    integer(c_int) function from_i32(ctx, x, t) result(st)
        type(l8_ctx), intent(in) :: ctx
        integer(c_int32_t), intent(in), target, contiguous :: x(..)
        type(l8_tensor), intent(out) :: t
        st = new_from(ctx, L8_I32, shape(x), c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, t)
    end function

    ! Copy an array into an existing tensor of as many bytes (blocks).
    integer(c_int) function copy_from_f32(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        real(c_float), intent(in), target, contiguous :: x(..)
        st = c_tensor_copy_from_host(t%p, c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, c_null_ptr)
    end function
    integer(c_int) function copy_from_i32(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        integer(c_int32_t), intent(in), target, contiguous :: x(..)
        st = c_tensor_copy_from_host(t%p, c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, c_null_ptr)
    end function

    ! Copy a tensor of as many bytes out into an array (blocks until done,
    ! after the work enqueued before it).
    integer(c_int) function to_f32(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        real(c_float), intent(inout), target, contiguous :: x(..)
        st = c_tensor_copy_to_host(t%p, c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, c_null_ptr)
    end function
    integer(c_int) function to_i32(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        integer(c_int32_t), intent(inout), target, contiguous :: x(..)
        st = c_tensor_copy_to_host(t%p, c_loc(x), size(x, kind=c_size_t) * 4_c_size_t, c_null_ptr)
    end function

    ! Bytes: a new L8_U8 tensor; the raw bytes into or out of a tensor of as
    ! many bytes, of any dtype (FP8: the codes, unscaled).
    integer(c_int) function from_i8(ctx, x, t) result(st)
        type(l8_ctx), intent(in) :: ctx
        integer(c_int8_t), intent(in), target, contiguous :: x(..)
        type(l8_tensor), intent(out) :: t
        st = new_from(ctx, L8_U8, shape(x), c_loc(x), size(x, kind=c_size_t), t)
    end function
    integer(c_int) function copy_from_i8(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        integer(c_int8_t), intent(in), target, contiguous :: x(..)
        st = c_tensor_copy_from_host(t%p, c_loc(x), size(x, kind=c_size_t), c_null_ptr)
    end function
    integer(c_int) function to_i8(t, x) result(st)
        type(l8_tensor), intent(in) :: t
        integer(c_int8_t), intent(inout), target, contiguous :: x(..)
        st = c_tensor_copy_to_host(t%p, c_loc(x), size(x, kind=c_size_t), c_null_ptr)
    end function

    ! ---- views (runtime/tensor.h) ----
    ! New tensors over the storage (and FP8 metadata) of t: no data moves,
    ! writes through one are seen through the others. Yours to destroy; the
    ! storage lives while any of them does. Dimensions are Fortran's. A
    ! view that is not contiguous (a section along any dimension but the
    ! last, a transpose) is read or written elementwise on the device
    ! (l8_tensor_copy, the ops that take strides); the array copies want a
    ! contiguous one (l8_tensor_contiguous). Refusals: L8_ERR_INVALID_ARG.

    ! The array section t(.., lo:hi:step, ..) along Fortran dimension dim,
    ! 1-based and inclusive like Fortran's: 1 <= lo, lo - 1 <= hi <= the
    ! extent (hi = lo - 1: empty), step >= 1 (default 1).
    integer(c_int) function l8_tensor_section(t, dim, lo, hi, v, step) result(st)
        type(l8_tensor), intent(in) :: t
        integer, intent(in) :: dim, lo, hi
        type(l8_tensor), intent(out) :: v
        integer, intent(in), optional :: step
        integer(c_int64_t) :: k
        k = 1
        if (present(step)) k = step
        st = c_tensor_slice(t%p, c_dim(t, dim), int(lo, c_int64_t) - 1, int(hi, c_int64_t), k, v%p)
    end function
    ! The same elements in Fortran dims `dims` (column-major order, as
    ! Fortran's reshape); one entry may be -1 (inferred). A view whose
    ! strides do not allow it (a section, a transpose) is refused: make it
    ! contiguous first.
    integer(c_int) function l8_tensor_reshape(t, dims, v) result(st)
        type(l8_tensor), intent(in) :: t
        integer, intent(in) :: dims(:)
        type(l8_tensor), intent(out) :: v
        integer(c_int64_t) :: shape(max(1, size(dims)))
        integer :: i, n
        n = size(dims)
        do i = 1, n
            shape(i) = dims(n + 1 - i)
        end do
        st = c_tensor_reshape(t%p, int(n, c_int), shape, v%p)
    end function
    ! Fortran dimensions d1 and d2 swapped (the view of transpose(x) for a
    ! 2-d x with d1 = 1, d2 = 2).
    integer(c_int) function l8_tensor_transpose(t, d1, d2, v) result(st)
        type(l8_tensor), intent(in) :: t
        integer, intent(in) :: d1, d2
        type(l8_tensor), intent(out) :: v
        st = c_tensor_transpose(t%p, c_dim(t, d1), c_dim(t, d2), v%p)
    end function
    ! dst = src elementwise (same dims and dtype, any strides, one context;
    ! dst must not overlap src).
    integer(c_int) function l8_tensor_copy(dst, src) result(st)
        type(l8_tensor), intent(in) :: dst, src
        st = c_tensor_copy(dst%p, src%p, c_null_ptr)
    end function
    ! A new contiguous tensor with src's elements (always a copy).
    integer(c_int) function l8_tensor_contiguous(src, t) result(st)
        type(l8_tensor), intent(in) :: src
        type(l8_tensor), intent(out) :: t
        st = c_tensor_contiguous(src%p, c_null_ptr, t%p)
    end function

    ! L8_F32, L8_BF16, ...; -1 (no dtype) for a null tensor.
    integer(c_int) function l8_tensor_dtype(t) result(dt)
        type(l8_tensor), intent(in) :: t
        dt = -1
        if (c_associated(t%p)) dt = c_tensor_dtype(t%p)
    end function

    ! The C pointer of an optional handle argument; NULL when absent.
    type(c_ptr) function ptr_of(t) result(p)
        type(l8_tensor), intent(in), optional :: t
        p = c_null_ptr
        if (present(t)) p = t%p
    end function
    ! An optional name as a C string held in buf (the caller's, alive across
    ! the C call), or C's NULL when absent.
    type(c_ptr) function name_of(name, buf) result(p)
        character(len=*), intent(in), optional :: name
        character(kind=c_char, len=:), allocatable, target, intent(inout) :: buf
        p = c_null_ptr
        if (present(name)) then
            buf = cstr(name)
            p = c_loc(buf)
        end if
    end function

    ! An optional c_ptr argument (a graph step's arg): absent is C NULL.
    type(c_ptr) function arg_of(arg) result(p)
        type(c_ptr), intent(in), optional :: arg
        p = c_null_ptr
        if (present(arg)) p = arg
    end function

    ! An optional cast flags argument: absent is 0.
    integer(c_int) function flags_of(flags) result(f)
        integer(c_int), intent(in), optional :: flags
        f = 0
        if (present(flags)) f = flags
    end function

    ! ---- FP8 metadata: scale, scale_inv, amax (device f32 scalars) ----
    ! An FP8 tensor (L8_E4M3, L8_E5M2) carries one; the casts read its scale
    ! and write its scale_inv and amax. A Linear's are its recipe's:
    ! l8_recipe_meta(recipe, l8_linear_role_index(lin, L8_ROLE_INPUT)).

    ! A meta of one's own (scale = scale_inv = 1, amax = 0), owned by the
    ! caller: l8_fp8_meta_release it (tensors holding it keep it alive).
    integer(c_int) function l8_fp8_meta_create(ctx, m) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_fp8_meta), intent(out) :: m
        st = c_fp8_meta_create(ctx%p, m%p)
    end function
    ! Drop the caller's reference (never for a borrowed one: l8_recipe_meta,
    ! l8_tensor_fp8_meta); null accepted; m is null after.
    subroutine l8_fp8_meta_release(m)
        type(l8_fp8_meta), intent(inout) :: m
        call c_fp8_meta_release(m%p)
        m%p = c_null_ptr
    end subroutine
    ! The three values (blocks: read after the work enqueued before).
    integer(c_int) function l8_fp8_meta_get(m, scale, scale_inv, amax) result(st)
        type(l8_fp8_meta), intent(in) :: m
        real(c_float), intent(out), optional :: scale, scale_inv, amax
        real(c_float) :: s, si, a
        st = c_fp8_meta_get(m%p, s, si, a)
        if (st /= L8_OK) return
        if (present(scale)) scale = s
        if (present(scale_inv)) scale_inv = si
        if (present(amax)) amax = a
    end function
    ! Write the three values (blocks).
    integer(c_int) function l8_fp8_meta_set(m, scale, scale_inv, amax) result(st)
        type(l8_fp8_meta), intent(in) :: m
        real(c_float), intent(in) :: scale, scale_inv, amax
        st = c_fp8_meta_set(m%p, scale, scale_inv, amax)
    end function
    ! Attach m to an FP8 tensor (the tensor holds a reference; a null m
    ! detaches). L8_ERR_INVALID_ARG for a tensor that is not FP8.
    integer(c_int) function l8_tensor_set_fp8_meta(t, m) result(st)
        type(l8_tensor), intent(in) :: t
        type(l8_fp8_meta), intent(in) :: m
        st = c_tensor_set_fp8_meta(t%p, m%p)
    end function
    ! The tensor's meta, borrowed; null if none.
    type(l8_fp8_meta) function l8_tensor_fp8_meta(t) result(m)
        type(l8_tensor), intent(in) :: t
        m%p = c_tensor_fp8_meta(t%p)
    end function

    ! ---- parameter groups ----

    ! A new empty group. grad_dtype: L8_F32 (default) or L8_BF16 main_grads;
    ! pad_to: the buffers' length a multiple of this many elements (default
    ! 128; ZeRO-1 over p ranks needs 128 * p, see l8_ddp_create).
    integer(c_int) function l8_params_create(ctx, g, grad_dtype, pad_to) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_params), intent(out) :: g
        integer(c_int), intent(in), optional :: grad_dtype
        integer, intent(in), optional :: pad_to
        type(params_config), target :: cfg
        call init_params_config(cfg)
        if (present(grad_dtype)) cfg%grad_dtype = grad_dtype
        if (present(pad_to)) cfg%pad_to = int(pad_to, c_int64_t)
        st = c_params_create(ctx%p, c_loc(cfg), g%p)
    end function

    subroutine l8_params_destroy(g)
        type(l8_params), intent(inout) :: g
        call c_params_destroy(g%p)
        g%p = c_null_ptr
    end subroutine

    ! Register a parameter of Fortran-order dims (a Linear weight of C shape
    ! (N, K) is dims = [K, N]); id is what master/main_grad take.
    integer(c_int) function l8_params_add(g, name, dims, id) result(st)
        type(l8_params), intent(in) :: g
        character(len=*), intent(in) :: name
        integer, intent(in) :: dims(:)
        integer(c_int), intent(out) :: id
        integer(c_int64_t) :: shp(max(1, size(dims)))
        integer :: i
        do i = 1, size(dims)
            shp(i) = int(dims(size(dims) + 1 - i), c_int64_t)
        end do
        st = c_params_add(g%p, cstr(name), int(size(dims), c_int), shp, id)
    end function

    integer(c_int) function l8_params_finalize(g) result(st)
        type(l8_params), intent(in) :: g
        st = c_params_finalize(g%p)
    end function

    ! Borrowed views (the group owns them: never l8_tensor_destroy them);
    ! null for a bad id or before finalize.
    type(l8_tensor) function l8_params_master(g, id) result(t)
        type(l8_params), intent(in) :: g
        integer(c_int), intent(in) :: id
        t%p = c_params_master(g%p, id)
    end function
    type(l8_tensor) function l8_params_main_grad(g, id) result(t)
        type(l8_params), intent(in) :: g
        integer(c_int), intent(in) :: id
        t%p = c_params_main_grad(g%p, id)
    end function
    type(l8_tensor) function l8_params_master_flat(g) result(t)
        type(l8_params), intent(in) :: g
        t%p = c_params_master_flat(g%p)
    end function

    integer(c_int) function l8_params_init_uniform(g, id, lo, hi, seed) result(st)
        type(l8_params), intent(in) :: g
        integer(c_int), intent(in) :: id
        real(c_float), intent(in) :: lo, hi
        integer(c_int64_t), intent(in) :: seed
        st = c_params_init_uniform(g%p, id, lo, hi, seed)
    end function
    integer(c_int) function l8_params_init_kaiming_uniform(g, id, a, seed) result(st)
        type(l8_params), intent(in) :: g
        integer(c_int), intent(in) :: id
        real(c_float), intent(in) :: a
        integer(c_int64_t), intent(in) :: seed
        st = c_params_init_kaiming_uniform(g%p, id, a, seed)
    end function

    ! ---- GEMM handles (default configuration) and the FP8 recipe ----

    integer(c_int) function l8_gemm_handle_create(ctx, h) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_gemm_handle), intent(out) :: h
        st = c_gemm_handle_create(ctx%p, c_null_ptr, h%p)
    end function
    subroutine l8_gemm_handle_destroy(h)
        type(l8_gemm_handle), intent(inout) :: h
        call c_gemm_handle_destroy(h%p)
        h%p = c_null_ptr
    end subroutine

    ! Absent arguments take the C defaults: history_len 1024 (0 means that
    ! too), margin 0 (scale = fp8_max / amax / 2**margin), amax_compute
    ! L8_AMAX_MAX_HISTORY (or L8_AMAX_MOST_RECENT), format L8_FP8_HYBRID
    ! (E4M3 forward, E5M2 gradients; or L8_FP8_E4M3 for every role). A
    ! negative history_len, a margin not finite, an unknown rule or format:
    ! L8_ERR_INVALID_ARG. The amax hook: l8_recipe_set_reduce.
    integer(c_int) function l8_recipe_create(ctx, r, history_len, margin, amax_compute, &
            format) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_recipe), intent(out) :: r
        integer, intent(in), optional :: history_len, amax_compute, format
        real(c_float), intent(in), optional :: margin
        type(recipe_config), target :: cfg
        call init_recipe_config(cfg)
        if (present(history_len)) cfg%history_len = int(history_len, c_int)
        if (present(margin)) cfg%margin = margin
        if (present(amax_compute)) cfg%amax_compute = int(amax_compute, c_int)
        if (present(format)) cfg%format = int(format, c_int)
        st = c_recipe_create(ctx%p, c_loc(cfg), r%p)
    end function
    subroutine l8_recipe_destroy(r)
        type(l8_recipe), intent(inout) :: r
        call c_recipe_destroy(r%p)
        r%p = c_null_ptr
    end subroutine
    ! After each optimizer step: new scales from the amax histories.
    integer(c_int) function l8_recipe_update(r) result(st)
        type(l8_recipe), intent(in) :: r
        st = c_recipe_update(r%p, c_null_ptr)
    end function
    ! The number of roles registered (three per FP8 Linear).
    integer function l8_recipe_count(r)
        type(l8_recipe), intent(in) :: r
        l8_recipe_count = int(c_recipe_count(r%p))
    end function
    ! The meta of role row i (0-based, as l8_linear_role_index gives it),
    ! borrowed: it lives as long as the recipe; null for a bad i.
    type(l8_fp8_meta) function l8_recipe_meta(r, i) result(m)
        type(l8_recipe), intent(in) :: r
        integer, intent(in) :: i
        m%p = c_recipe_meta(r%p, int(i, c_int))
    end function
    ! New views of the recipe's state, owned by the caller (l8_tensor_destroy
    ! them), each optional (absent: not wanted), all f32, Fortran dims:
    ! amax_history [H, N] (column i + 1: role row i, newest first), scale
    ! [N], amax [N], fp8_max [N]; N = l8_recipe_count. Take them after the
    ! last layer is created (registering roles may move the state). To resume:
    ! l8_ckpt_read_tensor into amax_history, scale and amax, then
    ! l8_recipe_push_scales, so the metas (and the casts) use the scales read.
    integer(c_int) function l8_recipe_state(r, amax_history, scale, amax, fp8_max) result(st)
        type(l8_recipe), intent(in) :: r
        type(l8_tensor), intent(out), optional :: amax_history, scale, amax, fp8_max
        type(c_ptr), target :: p(4)
        p = c_null_ptr
        ! a pointer to the slot of each output wanted, NULL for the others
        st = c_recipe_state(r%p, merge(c_loc(p(1)), c_null_ptr, present(amax_history)), &
                            merge(c_loc(p(2)), c_null_ptr, present(scale)), &
                            merge(c_loc(p(3)), c_null_ptr, present(amax)), &
                            merge(c_loc(p(4)), c_null_ptr, present(fp8_max)))
        if (present(amax_history)) amax_history%p = p(1)
        if (present(scale)) scale%p = p(2)
        if (present(amax)) amax%p = p(3)
        if (present(fp8_max)) fp8_max%p = p(4)
    end function
    ! Every role's meta scale = the recipe's scale (after writing `scale`).
    integer(c_int) function l8_recipe_push_scales(r) result(st)
        type(l8_recipe), intent(in) :: r
        st = c_recipe_push_scales(r%p, c_null_ptr)
    end function
    ! The FP8 dtype of a role (L8_ROLE_*) under the recipe's format: L8_E4M3
    ! for the input and weight, L8_E5M2 for grad_output (the default HYBRID).
    integer(c_int) function l8_recipe_dtype(r, role) result(dt)
        type(l8_recipe), intent(in) :: r
        integer(c_int), intent(in) :: role
        dt = c_recipe_dtype(r%p, role)
    end function
    ! The amax history's length H (the configured one, 1024 for 0).
    integer function l8_recipe_history_len(r)
        type(l8_recipe), intent(in) :: r
        l8_recipe_history_len = int(c_recipe_history_len(r%p))
    end function
    ! Role row i's name (0-based, as l8_linear_role_index gives), e.g.
    ! "fc1.input"; "" for a bad i.
    function l8_recipe_role_name(r, i) result(s)
        type(l8_recipe), intent(in) :: r
        integer, intent(in) :: i
        character(len=:), allocatable :: s
        s = fstr(c_recipe_role_name(r%p, int(i, c_int)))
    end function
    ! The successful l8_recipe_update calls so far.
    integer(c_int64_t) function l8_recipe_updates(r)
        type(l8_recipe), intent(in) :: r
        l8_recipe_updates = c_recipe_updates(r%p)
    end function

    ! ---- FP8 casts (ops/cast.h) ----
    ! q = fp8(x * scale) with the output meta's scale; the meta's scale_inv
    ! becomes 1/scale and its amax max|x| (with L8_CAST_ACCUMULATE_AMAX: the
    ! max of what it held and max|x|, as a Linear's casts do over a step).
    ! x: f32, bf16 or f16, contiguous; outputs FP8 with a meta. flags absent: 0.

    ! out = fp8(x), any shape of x's numel.
    integer(c_int) function l8_fp8_cast(x, out, flags) result(st)
        type(l8_tensor), intent(in) :: x, out
        integer(c_int), intent(in), optional :: flags
        st = c_fp8_cast(x%p, out%p, flags_of(flags), c_null_ptr)
    end function

    ! One pass over x of Fortran dims [cols, rows] (C [rows, cols]):
    ! out [cols, rows] = fp8(x) (optional: not written when absent) and
    ! out_t [rows, cols] its transpose, both of one FP8 dtype and one meta.
    ! For a Linear's caller-cast input: x(K, T) bf16 -> x8 [K, T], x8t [T, K].
    integer(c_int) function l8_fp8_cast_transpose(x, out, out_t, flags) result(st)
        type(l8_tensor), intent(in) :: x
        type(l8_tensor), intent(in), optional :: out
        type(l8_tensor), intent(in) :: out_t
        integer(c_int), intent(in), optional :: flags
        st = c_fp8_cast_transpose(x%p, ptr_of(out), out_t%p, flags_of(flags), c_null_ptr)
    end function

    ! l8_fp8_cast_transpose plus dbias [cols] (f32, bf16 or f16) = the sum
    ! of x over its rows (=, f32 accumulation in a fixed order): for dy(N, T),
    ! dbias(n) = sum(dy(n, :)), the bias gradient.
    integer(c_int) function l8_fp8_cast_transpose_dbias(x, out, out_t, dbias, flags) result(st)
        type(l8_tensor), intent(in) :: x
        type(l8_tensor), intent(in), optional :: out
        type(l8_tensor), intent(in) :: out_t, dbias
        integer(c_int), intent(in), optional :: flags
        st = c_fp8_cast_transpose_dbias(x%p, ptr_of(out), out_t%p, dbias%p, flags_of(flags), &
                                        c_null_ptr)
    end function

    ! out = x * scale_inv of x's meta, in out's dtype (f32, bf16, f16).
    integer(c_int) function l8_fp8_dequantize(x, out) result(st)
        type(l8_tensor), intent(in) :: x, out
        st = c_fp8_dequantize(x%p, out%p, c_null_ptr)
    end function

    ! The FP8 input of a layer after an activation, without the activation in
    ! memory: h = act(x) in x's dtype (l8_gelu's arithmetic), then out = fp8(h)
    ! and out_t its transpose (either may be absent, not both), amax of h: bit
    ! for bit l8_gelu then l8_fp8_cast_transpose. act: L8_ACT_GELU, L8_ACT_NONE.
    integer(c_int) function l8_fp8_cast_transpose_act(act, x, out, out_t, flags) result(st)
        integer(c_int), intent(in) :: act
        type(l8_tensor), intent(in) :: x
        type(l8_tensor), intent(in), optional :: out, out_t
        integer(c_int), intent(in), optional :: flags
        st = c_fp8_cast_transpose_act(act, x%p, ptr_of(out), ptr_of(out_t), flags_of(flags), &
                                      c_null_ptr)
    end function

    ! The FP8 output gradient of a layer before an activation: g = dy * act'(a)
    ! in dy's dtype (l8_gelu_backward's arithmetic; a: the activation's input,
    ! dy's numel, not read with L8_ACT_NONE), cast as l8_fp8_cast_transpose
    ! into out / out_t and, with dbias (which needs out_t), its column sums as
    ! l8_fp8_cast_transpose_dbias gives them: bit for bit those ops.
    integer(c_int) function l8_fp8_cast_transpose_dact(act, dy, a, out, out_t, dbias, flags) &
            result(st)
        integer(c_int), intent(in) :: act
        type(l8_tensor), intent(in) :: dy
        type(l8_tensor), intent(in), optional :: a, out, out_t, dbias
        integer(c_int), intent(in), optional :: flags
        st = c_fp8_cast_transpose_dact(act, dy%p, ptr_of(a), ptr_of(out), ptr_of(out_t), &
                                       ptr_of(dbias), flags_of(flags), c_null_ptr)
    end function

    ! The bias gradient alone: dbias = the column sums of g = dy * act'(a),
    ! exactly what l8_fp8_cast_transpose_dact writes into its dbias, with
    ! nothing cast (no FP8 output, meta or amax). a absent with L8_ACT_NONE.
    integer(c_int) function l8_dbias_dact(act, dy, dbias, a) result(st)
        integer(c_int), intent(in) :: act
        type(l8_tensor), intent(in) :: dy, dbias
        type(l8_tensor), intent(in), optional :: a
        st = c_dbias_dact(act, dy%p, ptr_of(a), dbias%p, c_null_ptr)
    end function

    ! l8_fp8_cast_transpose of x(i) into out(i) (out absent: none written) and
    ! out_t(i), each with its own meta, in as few launches as the tiles allow:
    ! the bytes, amaxes and scale_invs of one call each. 1 to 64 tensors;
    ! arrays of different sizes are refused.
    integer(c_int) function l8_fp8_cast_transpose_many(x, out_t, out, flags) result(st)
        type(l8_tensor), intent(in) :: x(:), out_t(:)
        type(l8_tensor), intent(in), optional :: out(:)
        integer(c_int), intent(in), optional :: flags
        type(c_ptr), target :: px(max(1, size(x))), pt(max(1, size(x))), po(max(1, size(x)))
        type(c_ptr) :: pout
        integer(c_int) :: n
        integer :: i
        n = int(size(x), c_int)
        if (size(out_t) /= size(x)) n = -1              ! refused by the C side, with its message
        if (present(out)) then
            if (size(out) /= size(x)) n = -1
        end if
        px = c_null_ptr
        pt = c_null_ptr
        po = c_null_ptr
        if (n > 0) then
            do i = 1, size(x)
                px(i) = x(i)%p
                pt(i) = out_t(i)%p
                if (present(out)) po(i) = out(i)%p
            end do
        end if
        pout = c_null_ptr                               ! no out at all: C's NULL array
        if (present(out)) pout = c_loc(po)
        st = c_fp8_cast_transpose_many(n, c_loc(px), pout, c_loc(pt), flags_of(flags), c_null_ptr)
    end function

    ! out = x transposed, bytes only (FP8 or U8, one dtype on both sides): for
    ! x of Fortran dims [cols, rows], out [rows, cols]. Metas are not touched.
    integer(c_int) function l8_fp8_transpose(x, out) result(st)
        type(l8_tensor), intent(in) :: x, out
        st = c_fp8_transpose(x%p, out%p, c_null_ptr)
    end function

    ! Delayed scaling for n tensors at once (f32 tensors): amax(n) this step's
    ! amaxes, scale(n) updated, fp8_max(n) (448 or 57344 each); amax_history
    ! [H, n] in Fortran dims (column i = tensor i, newest first; absent only
    ! with amax_compute = L8_AMAX_MOST_RECENT), scale_inv(n) = 1 / scale where
    ! it changes. margin, amax_compute and reset_amax (a logical: amax = 0
    ! after use) absent: the C defaults (0, L8_AMAX_MAX_HISTORY, .false.).
    integer(c_int) function l8_fp8_scale_update(amax, scale, fp8_max, amax_history, scale_inv, &
            amax_compute, margin, reset_amax) result(st)
        type(l8_tensor), intent(in) :: amax, scale, fp8_max
        type(l8_tensor), intent(in), optional :: amax_history, scale_inv
        integer, intent(in), optional :: amax_compute
        real(c_float), intent(in), optional :: margin
        logical, intent(in), optional :: reset_amax
        type(scale_update_config) :: cfg
        call init_scale_update_config(cfg)
        if (present(amax_compute)) cfg%amax_compute = int(amax_compute, c_int)
        if (present(margin)) cfg%margin = margin
        if (present(reset_amax)) cfg%reset_amax = merge(1_c_int, 0_c_int, reset_amax)
        st = c_fp8_scale_update(ptr_of(amax_history), amax%p, scale%p, ptr_of(scale_inv), &
                                fp8_max%p, cfg, c_null_ptr)
    end function

    ! ---- Linear ----

    ! Y = X . W^T + b. weight/weight_grad: the group's master and main_grad
    ! views of a parameter of Fortran dims [K, N] (C (N, K)); bias/bias_grad
    ! [N], optional together; recipe required for L8_LINEAR_FP8 (the default
    ! mode). weight_id/bias_id: the group's ids. grad_ready: the group the
    ! layer reports each finished gradient to (l8_params_grad_ready; what a
    ! data-parallel reducer over the group listens to, l8_ddp_create).
    ! Tensor parallel: tp_comm, parallel (L8_PARALLEL_COLUMN: weight, its
    ! grad and bias are this rank's shard of the out features; _ROW: of the
    ! in features) and sequence_parallel (.true.: the activations outside
    ! the layer are this rank's share of the tokens), as in ops/linear.h.
    integer(c_int) function l8_linear_create(ctx, name, gemm, weight, weight_grad, lin, mode, &
            recipe, bias, bias_grad, weight_id, bias_id, grad_ready, tp_comm, parallel, &
            sequence_parallel, offload) result(st)
        type(l8_ctx), intent(in) :: ctx
        character(len=*), intent(in) :: name
        type(l8_gemm_handle), intent(in) :: gemm
        type(l8_tensor), intent(in) :: weight, weight_grad
        type(l8_linear), intent(out) :: lin
        integer(c_int), intent(in), optional :: mode, weight_id, bias_id
        type(l8_recipe), intent(in), optional :: recipe
        type(l8_tensor), intent(in), optional :: bias, bias_grad
        type(l8_params), intent(in), optional :: grad_ready
        type(l8_comm), intent(in), optional :: tp_comm
        integer(c_int), intent(in), optional :: parallel
        logical, intent(in), optional :: sequence_parallel
        type(l8_offload), intent(in), optional :: offload
        type(linear_config) :: cfg
        type(save_hooks), target :: hooks
        character(kind=c_char, len=:), allocatable, target :: cname
        call init_linear_config(cfg)
        cname = cstr(name)
        cfg%name = c_loc(cname)
        cfg%gemm = gemm%p
        cfg%weight = weight%p
        cfg%weight_grad = weight_grad%p
        if (present(mode)) cfg%mode = mode
        if (present(recipe)) cfg%recipe = recipe%p
        if (present(bias)) cfg%bias = bias%p
        if (present(bias_grad)) cfg%bias_grad = bias_grad%p
        if (present(weight_id)) cfg%weight_id = weight_id
        if (present(bias_id)) cfg%bias_id = bias_id
        if (present(grad_ready)) then
            cfg%grad_ready = c_funloc(c_params_grad_ready)
            cfg%grad_ready_arg = grad_ready%p
        end if
        if (present(tp_comm)) cfg%tp_comm = tp_comm%p
        if (present(parallel)) cfg%parallel = parallel
        if (present(sequence_parallel)) cfg%sequence_parallel = int01(sequence_parallel)
        if (present(offload)) then                ! the offloader's hooks (C copies them)
            if (.not. c_associated(offload%p)) then
                st = refuse('l8_linear_create', 'offload is an unset handle')
                return
            end if
            hooks = save_hooks(c_sizeof(hooks), c_funloc(c_offload_save), &
                               c_funloc(c_offload_restore), c_funloc(c_offload_release), offload%p)
            cfg%save_hooks = c_loc(hooks)
        end if
        st = c_linear_create(ctx%p, cfg, lin%p)
    end function

    subroutine l8_linear_destroy(lin)
        type(l8_linear), intent(inout) :: lin
        call c_linear_destroy(lin%p)
        lin%p = c_null_ptr
    end subroutine

    ! Once per optimizer step, before its first forward.
    integer(c_int) function l8_linear_begin_step(lin) result(st)
        type(l8_linear), intent(in) :: lin
        st = c_linear_begin_step(lin%p)
    end function

    ! After begin_step: every listed layer's weight copies rebuilt at once
    ! (two launches for the whole model instead of two per layer; the
    ! forwards then rebuild nothing). At most 64 layers.
    integer(c_int) function l8_linear_refresh_weights(lins) result(st)
        type(l8_linear), intent(in) :: lins(:)
        type(c_ptr) :: ps(size(lins))
        integer :: i
        do i = 1, size(lins)
            ps(i) = lins(i)%p
        end do
        st = c_linear_refresh_weights(ps, int(size(lins), c_int), c_null_ptr)
    end function

    ! y = x . W^T + b; x bf16 (T, K) = Fortran dims [K, T], y (T, N). With
    ! `saved`, what backward needs is kept there (training); without, inference.
    integer(c_int) function l8_linear_forward(lin, x, y, saved) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_tensor), intent(in) :: x, y
        type(l8_linear_ctx), intent(inout), target, optional :: saved
        if (present(saved)) then
            st = c_linear_forward(lin%p, x%p, y%p, c_loc(saved%p), c_null_ptr)
        else
            st = c_linear_forward(lin%p, x%p, y%p, c_null_ptr, c_null_ptr)
        end if
    end function

    ! From dy: dx (=, optional: the first layer needs none), weight and bias
    ! gradients into the group's main_grad. Consumes `saved` (null after).
    integer(c_int) function l8_linear_backward(lin, saved, dy, dx) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_linear_ctx), intent(inout) :: saved
        type(l8_tensor), intent(in) :: dy
        type(l8_tensor), intent(in), optional :: dx
        if (present(dx)) then
            st = c_linear_backward(lin%p, saved%p, dy%p, dx%p, c_null_ptr)
        else
            st = c_linear_backward(lin%p, saved%p, dy%p, c_null_ptr, c_null_ptr)
        end if
    end function

    ! y = act(x) . W^T + b: the layer applies the activation to its input
    ! itself (L8_ACT_GELU; in FP8 inside its input cast), bit for bit
    ! l8_gelu then l8_linear_forward.
    integer(c_int) function l8_linear_forward_act(lin, act, x, y, saved) result(st)
        type(l8_linear), intent(in) :: lin
        integer(c_int), intent(in) :: act
        type(l8_tensor), intent(in) :: x, y
        type(l8_linear_ctx), intent(inout), target, optional :: saved
        if (present(saved)) then
            st = c_linear_forward_act(lin%p, act, x%p, y%p, c_loc(saved%p), c_null_ptr)
        else
            st = c_linear_forward_act(lin%p, act, x%p, y%p, c_null_ptr, c_null_ptr)
        end if
    end function

    ! The backward of a layer whose output y goes through act: da is the
    ! gradient of act(y); the layer multiplies it by act'(y) itself (in FP8
    ! inside its gradient cast), bit for bit l8_gelu_backward then
    ! l8_linear_backward. Consumes `saved`.
    integer(c_int) function l8_linear_backward_act(lin, act, saved, da, y, dx) result(st)
        type(l8_linear), intent(in) :: lin
        integer(c_int), intent(in) :: act
        type(l8_linear_ctx), intent(inout) :: saved
        type(l8_tensor), intent(in) :: da, y
        type(l8_tensor), intent(in), optional :: dx
        if (present(dx)) then
            st = c_linear_backward_act(lin%p, act, saved%p, da%p, y%p, dx%p, c_null_ptr)
        else
            st = c_linear_backward_act(lin%p, act, saved%p, da%p, y%p, c_null_ptr, c_null_ptr)
        end if
    end function

    ! FP8 operands cast by the caller (FP8 layers only). The bytes must be
    ! those the layer's own cast would write: the layer's meta attached
    ! (l8_recipe_meta(recipe, l8_linear_role_index(lin, role)): the input
    ! role for x8/x8t, grad_output for dy8/dy8t), its dtype
    ! (l8_recipe_dtype), cast with L8_CAST_ACCUMULATE_AMAX; then the results
    ! are bit for bit those of l8_linear_forward / l8_linear_backward.
    !   st = l8_fp8_cast_transpose(xb, x8, x8t, L8_CAST_ACCUMULATE_AMAX)
    !   st = l8_linear_forward_fp8(lin, x8, x8t, y, saved)

    ! y = x . W^T + b from x8 (Fortran dims [K, T]) and x8t ([T, K]). With
    ! `saved` the layer keeps a view of x8t for backward (do not overwrite it
    ! before); x8t may be absent only without `saved` (inference).
    integer(c_int) function l8_linear_forward_fp8(lin, x8, x8t, y, saved) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_tensor), intent(in) :: x8
        type(l8_tensor), intent(in), optional :: x8t
        type(l8_tensor), intent(in) :: y
        type(l8_linear_ctx), intent(inout), target, optional :: saved
        if (present(saved)) then
            st = c_linear_forward_fp8(lin%p, x8%p, ptr_of(x8t), y%p, c_loc(saved%p), c_null_ptr)
        else
            st = c_linear_forward_fp8(lin%p, x8%p, ptr_of(x8t), y%p, c_null_ptr, c_null_ptr)
        end if
    end function

    ! The next layer's input from this layer's GEMM, the GELU in its epilogue:
    ! z ([N, T] bf16) gets what l8_linear_forward writes as y (the backward's
    ! GELU input: l8_linear_backward_act(lin, L8_ACT_GELU, saved, dh, z, ...))
    ! and h ([N, T]) gelu(z) - bf16, or from an FP8 layer E4M3 with the next
    ! layer's input meta (l8_recipe_meta of its L8_ROLE_INPUT row), the next
    ! layer then l8_linear_forward_fp8(next, h, ht, ...) with ht its transpose
    ! (l8_fp8_transpose). One launch instead of a forward and the next layer's
    ! GELU; h is not bit for bit l8_gelu(z) (the GELU on the f32 sum, in
    ! cuBLASLt: ops/linear.h). The input: x (with act, as in
    ! l8_linear_forward_act) or x8 with x8t (as in l8_linear_forward_fp8, act
    ! L8_ACT_NONE), passed by keyword. Everything runs on the compute stream.
    ! Layers with a bias, not row-parallel (L8_ERR_UNSUPPORTED).
    integer(c_int) function l8_linear_forward_gelu(lin, act, z, h, x, x8, x8t, saved) result(st)
        type(l8_linear), intent(in) :: lin
        integer(c_int), intent(in) :: act
        type(l8_tensor), intent(in) :: z, h
        type(l8_tensor), intent(in), optional :: x, x8, x8t
        type(l8_linear_ctx), intent(inout), target, optional :: saved
        if (present(saved)) then
            st = c_linear_forward_gelu(lin%p, act, ptr_of(x), ptr_of(x8), ptr_of(x8t), z%p, h%p, &
                                       c_loc(saved%p), c_null_ptr, c_null_ptr)
        else
            st = c_linear_forward_gelu(lin%p, act, ptr_of(x), ptr_of(x8), ptr_of(x8t), z%p, h%p, &
                                       c_null_ptr, c_null_ptr, c_null_ptr)
        end if
    end function

    ! The backward from dy8 ([N, T]), dy8t ([T, N]) and db ([N], f32 or
    ! main_grad's dtype: the column sums of dY before the cast, as
    ! l8_fp8_cast_transpose_dbias writes them; required with a bias, absent
    ! without). On a step's first backward db may be the bias's main_grad
    ! itself (nothing more is done with it); later that is refused. dx and
    ! `saved` as in l8_linear_backward.
    integer(c_int) function l8_linear_backward_fp8(lin, saved, dy8, dy8t, db, dx) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_linear_ctx), intent(inout) :: saved
        type(l8_tensor), intent(in) :: dy8, dy8t
        type(l8_tensor), intent(in), optional :: db, dx
        st = c_linear_backward_fp8(lin%p, saved%p, dy8%p, dy8t%p, ptr_of(db), ptr_of(dx), &
                                   c_null_ptr)
    end function

    ! l8_linear_backward_fp8 whose dgrad also casts dx for the FP8 layer below
    ! through its GELU: dx8 ([K, T] in Fortran dims) and dx8t ([T, K]) with
    ! that layer's grad_output meta, bit for bit l8_fp8_cast_transpose_dact(
    ! L8_ACT_GELU, dx, z, dx8, dx8t, flags=L8_CAST_ACCUMULATE_AMAX) after
    ! l8_linear_backward_fp8; z is the layer below's output (bf16, dx's
    ! shape). One launch where lean8's small FP8 GEMM kernel takes the dgrad.
    integer(c_int) function l8_linear_backward_fp8_dx(lin, saved, dy8, dy8t, dx, z, dx8, dx8t, &
                                                      db) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_linear_ctx), intent(inout) :: saved
        type(l8_tensor), intent(in) :: dy8, dy8t, dx, z, dx8, dx8t
        type(l8_tensor), intent(in), optional :: db
        st = c_linear_backward_fp8_dx(lin%p, saved%p, dy8%p, dy8t%p, ptr_of(db), dx%p, z%p, &
                                      dx8%p, dx8t%p, c_null_ptr)
    end function

    ! l8_linear_backward (dy in bf16: a bf16 layer, or an FP8 layer casting
    ! its own dY) whose dgrad also casts dx for the FP8 layer below, as
    ! l8_linear_backward_fp8_dx does: dx8, dx8t and their meta bit for bit
    ! l8_fp8_cast_transpose_dact(L8_ACT_GELU, dx, z, dx8, dx8t,
    ! flags=L8_CAST_ACCUMULATE_AMAX) after l8_linear_backward (ops/linear.h).
    integer(c_int) function l8_linear_backward_dx(lin, saved, dy, dx, z, dx8, dx8t) result(st)
        type(l8_linear), intent(in) :: lin
        type(l8_linear_ctx), intent(inout) :: saved
        type(l8_tensor), intent(in) :: dy, dx, z, dx8, dx8t
        st = c_linear_backward_dx(lin%p, saved%p, dy%p, dx%p, z%p, dx8%p, dx8t%p, c_null_ptr)
    end function

    ! The recipe row of an FP8 layer's role (L8_ROLE_INPUT, L8_ROLE_WEIGHT,
    ! L8_ROLE_GRAD_OUTPUT), 0-based as l8_recipe_meta takes it; -1 for a
    ! bf16 layer.
    integer function l8_linear_role_index(lin, role)
        type(l8_linear), intent(in) :: lin
        integer(c_int), intent(in) :: role
        l8_linear_role_index = int(c_linear_role_index(lin%p, role))
    end function

    ! What the layer did since create: forwards, backwards, weight copies built
    ! (FP8 cast + transpose or bf16 convert), FP8 casts of x and of dy,
    ! begin_step calls, and backwards since the last begin_step. Each optional.
    integer(c_int) function l8_linear_get_stats(lin, forwards, backwards, weight_casts, &
            input_casts, grad_casts, steps, micro_batch) result(st)
        type(l8_linear), intent(in) :: lin
        integer(c_int64_t), intent(out), optional :: forwards, backwards, weight_casts, &
                                                     input_casts, grad_casts, steps, micro_batch
        type(linear_stats) :: s
        s = linear_stats(c_sizeof(s), 0, 0, 0, 0, 0, 0, 0)
        st = c_linear_get_stats(lin%p, s)
        if (present(forwards)) forwards = s%forwards
        if (present(backwards)) backwards = s%backwards
        if (present(weight_casts)) weight_casts = s%weight_casts
        if (present(input_casts)) input_casts = s%input_casts
        if (present(grad_casts)) grad_casts = s%grad_casts
        if (present(steps)) steps = s%steps
        if (present(micro_batch)) micro_batch = s%micro_batch
    end function
    ! The layer's K (its input's features) and N (its output's); 0 for an
    ! unset handle.
    integer(c_int64_t) function l8_linear_in_features(lin)
        type(l8_linear), intent(in) :: lin
        l8_linear_in_features = c_linear_in_features(lin%p)
    end function
    integer(c_int64_t) function l8_linear_out_features(lin)
        type(l8_linear), intent(in) :: lin
        l8_linear_out_features = c_linear_out_features(lin%p)
    end function

    ! Drop what a forward saved without running backward.
    subroutine l8_linear_ctx_destroy(saved)
        type(l8_linear_ctx), intent(inout) :: saved
        call c_linear_ctx_destroy(saved%p)
        saved%p = c_null_ptr
    end subroutine

    ! ---- optimizer ----

    ! AdamW over the whole (finalized) group; absent arguments take the C
    ! defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 1e-2, no clip).
    integer(c_int) function l8_optim_create_adamw(g, opt, lr, weight_decay, beta1, beta2, eps, &
            max_grad_norm) result(st)
        type(l8_params), intent(in) :: g
        type(l8_optim), intent(out) :: opt
        real(c_float), intent(in), optional :: lr, weight_decay, beta1, beta2, eps, max_grad_norm
        type(adamw_config) :: cfg
        call init_adamw_config(cfg)
        if (present(lr)) cfg%lr = lr
        if (present(weight_decay)) cfg%weight_decay = weight_decay
        if (present(beta1)) cfg%beta1 = beta1
        if (present(beta2)) cfg%beta2 = beta2
        if (present(eps)) cfg%eps = eps
        if (present(max_grad_norm)) cfg%max_grad_norm = max_grad_norm
        st = c_optim_create_adamw(g%p, cfg, opt%p)
    end function

    ! SGD over the whole (finalized) group, PyTorch's: absent arguments take
    ! the C defaults (lr 1e-3, no momentum, dampening 0, weight_decay 0 (L2,
    ! added to the gradient), nesterov .false., no clip). Without momentum
    ! there is no state buffer; nesterov needs momentum > 0 and dampening 0.
    integer(c_int) function l8_optim_create_sgd(g, opt, lr, momentum, dampening, weight_decay, &
            nesterov, max_grad_norm) result(st)
        type(l8_params), intent(in) :: g
        type(l8_optim), intent(out) :: opt
        real(c_float), intent(in), optional :: lr, momentum, dampening, weight_decay, max_grad_norm
        logical, intent(in), optional :: nesterov
        type(sgd_config) :: cfg
        call init_sgd_config(cfg)
        if (present(lr)) cfg%lr = lr
        if (present(momentum)) cfg%momentum = momentum
        if (present(dampening)) cfg%dampening = dampening
        if (present(weight_decay)) cfg%weight_decay = weight_decay
        if (present(nesterov)) cfg%nesterov = int01(nesterov)
        if (present(max_grad_norm)) cfg%max_grad_norm = max_grad_norm
        st = c_optim_create_sgd(g%p, cfg, opt%p)
    end function

    subroutine l8_optim_destroy(opt)
        type(l8_optim), intent(inout) :: opt
        call c_optim_destroy(opt%p)
        opt%p = c_null_ptr
    end subroutine

    ! One step over the group from its main_grad. With any of the optional
    ! arguments the host waits for the step and gets what it did (as
    ! l8_optim_read_result); without them nothing blocks.
    integer(c_int) function l8_optim_step(opt, skipped, grad_norm, clip_coef, step) result(st)
        type(l8_optim), intent(in) :: opt
        logical, intent(out), optional :: skipped
        real(c_float), intent(out), optional :: grad_norm, clip_coef
        integer(c_int64_t), intent(out), optional :: step
        st = c_optim_step(opt%p, c_null_ptr, c_null_ptr)
        if (st /= L8_OK .or. .not. (present(skipped) .or. present(grad_norm) .or. &
                present(clip_coef) .or. present(step))) return
        st = l8_optim_read_result(opt, skipped, grad_norm, clip_coef, step)
    end function
    ! What the last step did (before any: step 0, not skipped, norm 0, clip
    ! 1): skipped (the gradients were not finite, nothing changed), the
    ! group's gradient norm before clipping, the factor applied, the steps
    ! applied so far. Blocks until that step has finished.
    integer(c_int) function l8_optim_read_result(opt, skipped, grad_norm, clip_coef, step) &
            result(st)
        type(l8_optim), intent(in) :: opt
        logical, intent(out), optional :: skipped
        real(c_float), intent(out), optional :: grad_norm, clip_coef
        integer(c_int64_t), intent(out), optional :: step
        type(optim_result) :: res
        res = optim_result(c_sizeof(res), 0, 0.0, 1.0, 0)
        st = c_optim_read_result(opt%p, res)
        if (present(skipped)) skipped = res%skipped /= 0
        if (present(grad_norm)) grad_norm = res%grad_norm
        if (present(clip_coef)) clip_coef = res%clip_coef
        if (present(step)) step = res%step
    end function

    integer(c_int) function l8_optim_set_lr(opt, lr) result(st)
        type(l8_optim), intent(in) :: opt
        real(c_float), intent(in) :: lr
        st = c_optim_set_lr(opt%p, lr)
    end function
    ! The rate of the last l8_optim_set_lr (NaN for a null handle).
    real(c_float) function l8_optim_lr(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_lr = c_optim_lr(opt%p)
    end function

    ! For a step captured in a CUDA graph: with external = .true. a step no
    ! longer writes the rate itself; l8_optim_push_lr, enqueued before each
    ! step, writes the rate of the last set_lr (set_lr may change it at once
    ! after the push). .false.: the default.
    integer(c_int) function l8_optim_set_lr_external(opt, external) result(st)
        type(l8_optim), intent(in) :: opt
        logical, intent(in) :: external
        st = c_optim_set_lr_external(opt%p, int01(external))
    end function
    integer(c_int) function l8_optim_push_lr(opt) result(st)
        type(l8_optim), intent(in) :: opt
        st = c_optim_push_lr(opt%p, c_null_ptr)
    end function

    ! A schedule on the device: rates, f32 1-d of n >= 1 rates (finite, >= 0:
    ! not checked); the k-th step from now (k = 0, 1, ...: every step, skipped
    ! or not) runs at rates(min(k, n - 1) + 1), bit for bit set_lr(that rate)
    ! before it. Resets the step cursor to 0. The optimizer keeps a view of
    ! rates: write new rates into it and call again to change the schedule.
    ! rates absent: the host's rate again (set_lr); the cursor is reset.
    integer(c_int) function l8_optim_set_lr_table(opt, rates) result(st)
        type(l8_optim), intent(in) :: opt
        type(l8_tensor), intent(in), optional :: rates
        st = c_optim_set_lr_table(opt%p, ptr_of(rates), c_null_ptr)
    end function

    ! The step cursor, an i32 tensor of one element (borrowed: never destroy
    ! it): the steps since the last set_lr_table (or create). Work enqueued
    ! before a step reads that step's number k, 0-based; l8_gather_rows_at
    ! and l8_put_rows_at take it. Null for a null handle.
    type(l8_tensor) function l8_optim_cursor(opt) result(t)
        type(l8_optim), intent(in) :: opt
        t%p = c_optim_cursor(opt%p)
    end function

    ! ---- optimizer state and step, for resumable checkpoints ----
    ! A resume restores the master weights, every state buffer and the step
    ! (AdamW's bias corrections count from it), and the recipe's state
    ! (l8_recipe_state): then the next steps are those of the run that never
    ! stopped, bit for bit.

    ! The number of state buffers: AdamW 2 ("exp_avg", "exp_avg_sq"); 0 for
    ! a null handle. Buffers are numbered k = 0 .. count - 1.
    integer function l8_optim_state_count(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_state_count = int(c_optim_state_count(opt%p))
    end function
    ! The shard (ZeRO-1, l8_optim_set_shard): whether there is one, its ranges
    ! (unsharded: 1, the whole buffer; -1 for an unset handle), range i
    ! (0-based) as group elements [offset, offset + numel), the elements of
    ! each state buffer (-1 unset) and the device bytes of them all (0 unset).
    logical function l8_optim_is_sharded(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_is_sharded = c_optim_is_sharded(opt%p) /= 0
    end function
    integer function l8_optim_shard_count(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_shard_count = int(c_optim_shard_count(opt%p))
    end function
    integer(c_int) function l8_optim_shard_range(opt, i, offset, numel) result(st)
        type(l8_optim), intent(in) :: opt
        integer, intent(in) :: i
        integer(c_int64_t), intent(out) :: offset, numel
        offset = 0
        numel = 0
        st = c_optim_shard_range(opt%p, int(i, c_int), offset, numel)
    end function
    integer(c_int64_t) function l8_optim_shard_numel(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_shard_numel = c_optim_shard_numel(opt%p)
    end function
    integer(c_int64_t) function l8_optim_state_bytes(opt)
        type(l8_optim), intent(in) :: opt
        l8_optim_state_bytes = int(c_optim_state_bytes(opt%p), c_int64_t)
    end function
    ! The name of state buffer k (0-based): "exp_avg", ...; "" for a bad k.
    function l8_optim_state_name(opt, k) result(s)
        type(l8_optim), intent(in) :: opt
        integer, intent(in) :: k
        character(len=:), allocatable :: s
        s = fstr(c_optim_state_name(opt%p, int(k, c_int)))
    end function
    ! State buffer k (0-based) as a whole: f32, 1-d, laid out as the group's
    ! flat buffers (l8_params_master_flat). Borrowed: the optimizer owns it,
    ! never destroy it. Null for a bad k (a call that takes it then returns
    ! L8_ERR_INVALID_ARG). Save it with l8_ckpt_write_tensor, restore it with
    ! l8_ckpt_read_tensor.
    type(l8_tensor) function l8_optim_state(opt, k) result(t)
        type(l8_optim), intent(in) :: opt
        integer, intent(in) :: k
        t%p = c_optim_state(opt%p, int(k, c_int))
    end function
    ! State buffer k of parameter id as a new view of the parameter's
    ! Fortran dims, owned by the caller (l8_tensor_destroy it).
    ! L8_ERR_INVALID_ARG for a bad k or id.
    integer(c_int) function l8_optim_state_view(opt, k, id, t) result(st)
        type(l8_optim), intent(in) :: opt
        integer, intent(in) :: k
        integer(c_int), intent(in) :: id
        type(l8_tensor), intent(out) :: t
        st = c_optim_state_view(opt%p, int(k, c_int), id, t%p)
    end function
    ! The steps applied so far (blocks until the last step is done).
    integer(c_int) function l8_optim_get_step(opt, step) result(st)
        type(l8_optim), intent(in) :: opt
        integer(c_int64_t), intent(out) :: step
        integer(c_int64_t) :: v
        v = 0
        st = c_optim_get_step(opt%p, v)
        step = v
    end function
    ! Set the step counter (resume); blocks. step >= 0: a negative one (above
    ! 2^63 - 1 as C's unsigned counter) is refused by the C side with
    ! L8_ERR_INVALID_ARG, and the counter is unchanged.
    integer(c_int) function l8_optim_set_step(opt, step) result(st)
        type(l8_optim), intent(in) :: opt
        integer(c_int64_t), intent(in) :: step
        st = c_optim_set_step(opt%p, step)
    end function

    ! ---- elementwise and loss ----

    ! y = x in y's dtype (f32 <-> bf16 <-> f16), same shape.
    integer(c_int) function l8_convert(x, y) result(st)
        type(l8_tensor), intent(in) :: x, y
        st = c_convert(x%p, y%p, c_null_ptr)
    end function
    integer(c_int) function l8_gelu(x, y) result(st)
        type(l8_tensor), intent(in) :: x, y
        st = c_gelu(x%p, y%p, c_null_ptr)
    end function
    ! dx = dy * gelu'(x); dx may be dy.
    integer(c_int) function l8_gelu_backward(x, dy, dx) result(st)
        type(l8_tensor), intent(in) :: x, dy, dx
        st = c_gelu_backward(x%p, dy%p, dx%p, c_null_ptr)
    end function

    ! Softmax cross-entropy over the first `classes` logits of each row:
    ! row_loss (f32 [T]), row_hit (i32 [T]); with dlogits (training), the
    ! gradient times grad_scale (1/T for a mean loss).
    integer(c_int) function l8_softmax_xent(logits, labels, classes, grad_scale, row_loss, row_hit, &
            dlogits) result(st)
        type(l8_tensor), intent(in) :: logits, labels, row_loss, row_hit
        integer, intent(in) :: classes
        real(c_float), intent(in) :: grad_scale
        type(l8_tensor), intent(in), optional :: dlogits
        type(c_ptr) :: d
        d = c_null_ptr
        if (present(dlogits)) d = dlogits%p
        st = c_softmax_xent(logits%p, labels%p, int(classes, c_int), grad_scale, d, row_loss%p, &
                            row_hit%p, c_null_ptr)
    end function

    ! The same for a batch padded to a fixed size (a captured step whose
    ! pass ends in a partial batch): the batch is step k = cursor (an i32
    ! tensor of one element, read on the device) of a pass over `total` rows
    ! in batches of `stride`; its first valid = min(T, max(0, total - k *
    ! stride)) rows are real, the rest padding (loss 0, hit 0, dlogits 0,
    ! labels unread), and the gradient scale is grad_scale / valid.
    integer(c_int) function l8_softmax_xent_at(logits, labels, classes, grad_scale, cursor, &
            stride, total, row_loss, row_hit, dlogits) result(st)
        type(l8_tensor), intent(in) :: logits, labels, cursor, row_loss, row_hit
        integer, intent(in) :: classes, stride, total
        real(c_float), intent(in) :: grad_scale
        type(l8_tensor), intent(in), optional :: dlogits
        st = c_softmax_xent_at(logits%p, labels%p, int(classes, c_int), grad_scale, cursor%p, &
                               int(stride, c_int64_t), int(total, c_int64_t), ptr_of(dlogits), &
                               row_loss%p, row_hit%p, c_null_ptr)
    end function

    ! ---- row moves (ops/gather.h) ----
    ! A C row is a Fortran column: src of Fortran dims [C, N] (C values per
    ! row, N rows; a 1-d [N] is N rows of one value), dst [C, R]. Indices and
    ! the cursor are device data and 0-based, as C reads them: row j of the C
    ! side is column j + 1 of the Fortran array. Any dtype (bytes are copied),
    ! src and dst of the same dtype, idx an i32 tensor. An index or position
    ! out of range writes zeros (gathers) or nothing (put) and, with `bad` (an
    ! i32 tensor of one element), adds 1 to it per row: no error is returned
    ! for it (the kernel cannot return one without a synchronization).

    ! dst(:, r) = src(:, idx(r) + 1) for r = 1..R (idx: R entries).
    integer(c_int) function l8_gather_rows(src, idx, dst, bad) result(st)
        type(l8_tensor), intent(in) :: src, idx, dst
        type(l8_tensor), intent(in), optional :: bad
        st = c_gather_rows(src%p, idx%p, dst%p, ptr_of(bad), c_null_ptr)
    end function

    ! At a device cursor (read when the work runs: a captured step moves
    ! another slice at each replay), off = cursor * stride:
    ! dst(:, r) = src(:, idx(off + r) + 1) for r = 1..R, idx any length L;
    ! a position off + r outside 1..L counts as bad. With idx an epoch's
    ! order and stride the batch size, the rows of step `cursor`.
    integer(c_int) function l8_gather_rows_at(src, idx, cursor, stride, dst, bad) result(st)
        type(l8_tensor), intent(in) :: src, idx, cursor, dst
        integer, intent(in) :: stride
        type(l8_tensor), intent(in), optional :: bad
        st = c_gather_rows_at(src%p, idx%p, cursor%p, int(stride, c_int64_t), dst%p, &
                              ptr_of(bad), c_null_ptr)
    end function

    ! dst(:, off + r) = src(:, r) for r = 1..R (src [C, R], dst [C, M]); a
    ! column off + r outside 1..M is not written and counts as bad: a
    ! step's per-row results filed at their place in the epoch's.
    integer(c_int) function l8_put_rows_at(dst, cursor, stride, src, bad) result(st)
        type(l8_tensor), intent(in) :: dst, cursor, src
        integer, intent(in) :: stride
        type(l8_tensor), intent(in), optional :: bad
        st = c_put_rows_at(dst%p, cursor%p, int(stride, c_int64_t), src%p, ptr_of(bad), &
                           c_null_ptr)
    end function

    ! ---- trace tags (what the memory trace attributes allocations to) ----

    integer(c_int) function l8_tag_push(name) result(st)
        character(len=*), intent(in) :: name
        st = c_tag_push(cstr(name))
    end function
    integer(c_int) function l8_tag_pop() result(st)
        st = c_tag_pop()
    end function

    ! ---- checkpoints: atomic, checksummed files of named tensors ----

    integer(c_int) function l8_ckpt_writer_open(path, kind, version, w) result(st)
        character(len=*), intent(in) :: path, kind
        integer, intent(in) :: version
        type(l8_ckpt_writer), intent(out) :: w
        st = c_ckpt_writer_open(cstr(path), cstr(kind), int(version, c_int32_t), w%p)
    end function
    integer(c_int) function l8_ckpt_write_tensor(w, name, t) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        type(l8_tensor), intent(in) :: t
        st = c_ckpt_write_tensor(w%p, cstr(name), t%p)
    end function
    ! Write the file and free w (also on failure: w is null after).
    integer(c_int) function l8_ckpt_writer_commit(w) result(st)
        type(l8_ckpt_writer), intent(inout) :: w
        st = c_ckpt_writer_commit(w%p)
        w%p = c_null_ptr
    end function
    subroutine l8_ckpt_writer_abort(w)
        type(l8_ckpt_writer), intent(inout) :: w
        call c_ckpt_writer_abort(w%p)
        w%p = c_null_ptr
    end subroutine
    integer(c_int) function l8_ckpt_open(path, r) result(st)
        character(len=*), intent(in) :: path
        type(l8_ckpt_reader), intent(out) :: r
        st = c_ckpt_open(cstr(path), r%p)
    end function
    ! L8_OK when the file was written for (kind, version); else
    ! L8_ERR_INVALID_ARG naming what differs.
    integer(c_int) function l8_ckpt_expect(r, kind, version) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: kind
        integer, intent(in) :: version
        st = c_ckpt_expect(r%p, cstr(kind), int(version, c_int32_t))
    end function
    ! Load section `name` into t (same dtype and shape, else refused).
    integer(c_int) function l8_ckpt_read_tensor(r, name, t) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        type(l8_tensor), intent(in) :: t
        st = c_ckpt_read_tensor(r%p, cstr(name), t%p)
    end function
    ! Would l8_ckpt_read_tensor(r, name, t) be accepted (section present,
    ! same dtype and shape)? Check every tensor first, then read: a mismatch
    ! then changes nothing. L8_ERR_INVALID_ARG naming what differs.
    integer(c_int) function l8_ckpt_check_tensor(r, name, t) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        type(l8_tensor), intent(in) :: t
        st = c_ckpt_check_tensor(r%p, cstr(name), t%p)
    end function
    subroutine l8_ckpt_close(r)
        type(l8_ckpt_reader), intent(inout) :: r
        call c_ckpt_close(r%p)
        r%p = c_null_ptr
    end subroutine

    ! Raw sections (l8_ckpt_write_section / l8_ckpt_read_section, generic):
    ! the array's bytes in memory order, what the program's own state needs
    ! beside the tensors (counters, a data cursor, a configuration as text).
    ! Writing a name twice is refused (L8_ERR_INVALID_ARG, nothing written).
    ! A read needs the section's length exactly (else L8_ERR_INVALID_ARG, x
    ! untouched; l8_ckpt_section_bytes tells it); a text read allocates.
    integer(c_int) function put_f32(w, name, x) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        real(c_float), intent(in), target, contiguous :: x(..)
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 4)
    end function
    integer(c_int) function put_f64(w, name, x) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        real(c_double), intent(in), target, contiguous :: x(..)
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 8)
    end function
    integer(c_int) function put_i32(w, name, x) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        integer(c_int32_t), intent(in), target, contiguous :: x(..)
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 4)
    end function
    integer(c_int) function put_i64(w, name, x) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        integer(c_int64_t), intent(in), target, contiguous :: x(..)
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 8)
    end function
    integer(c_int) function put_i8(w, name, x) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        integer(c_int8_t), intent(in), target, contiguous :: x(..)
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(x), size(x, kind=c_size_t))
    end function
    integer(c_int) function put_text(w, name, text) result(st)
        type(l8_ckpt_writer), intent(in) :: w
        character(len=*), intent(in) :: name
        character(kind=c_char, len=*), intent(in), target :: text
        st = c_ckpt_write_section(w%p, cstr(name), c_loc(text), len(text, kind=c_size_t))
    end function
    integer(c_int) function get_f32(r, name, x) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        real(c_float), intent(inout), target, contiguous :: x(..)
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 4)
    end function
    integer(c_int) function get_f64(r, name, x) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        real(c_double), intent(inout), target, contiguous :: x(..)
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 8)
    end function
    integer(c_int) function get_i32(r, name, x) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        integer(c_int32_t), intent(inout), target, contiguous :: x(..)
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 4)
    end function
    integer(c_int) function get_i64(r, name, x) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        integer(c_int64_t), intent(inout), target, contiguous :: x(..)
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(x), size(x, kind=c_size_t) * 8)
    end function
    integer(c_int) function get_i8(r, name, x) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        integer(c_int8_t), intent(inout), target, contiguous :: x(..)
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(x), size(x, kind=c_size_t))
    end function
    integer(c_int) function get_text(r, name, text) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        character(kind=c_char, len=:), allocatable, intent(out) :: text
        integer(c_int64_t) :: n
        n = l8_ckpt_section_bytes(r, name)
        allocate(character(kind=c_char, len=max(n, 0_c_int64_t)) :: text)
        if (n < 0) then                  ! no such section: the C side's refusal and message
            st = c_ckpt_read_section_into(r%p, cstr(name), c_null_ptr, 0_c_size_t)
            return
        end if
        st = text_into(r, name, text)
    end function
    integer(c_int) function text_into(r, name, text) result(st)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        character(kind=c_char, len=*), intent(inout), target :: text
        st = c_ckpt_read_section_into(r%p, cstr(name), c_loc(text), len(text, kind=c_size_t))
    end function
    ! Has the checkpoint a section of that name (tensors' included)?
    logical function l8_ckpt_has(r, name)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        l8_ckpt_has = c_ckpt_has(r%p, cstr(name)) /= 0
    end function
    ! A section's length in bytes (a tensor's: its raw elements); -1 when
    ! there is none of that name.
    integer(c_int64_t) function l8_ckpt_section_bytes(r, name) result(n)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        type(c_ptr) :: p
        integer(c_size_t) :: bytes
        n = -1
        if (c_ckpt_section(r%p, cstr(name), p, bytes) == L8_OK) n = int(bytes, c_int64_t)
    end function

    ! The optimizer's sections (state buffers, step; a ZeRO-1 shard's ranks
    ! and ranges) in one call each: written into w, checked against r (would
    ! load accept it? the message names what differs), restored from r.
    integer(c_int) function l8_optim_save(opt, w) result(st)
        type(l8_optim), intent(in) :: opt
        type(l8_ckpt_writer), intent(in) :: w
        st = c_optim_save(opt%p, w%p)
    end function
    integer(c_int) function l8_optim_check_load(opt, r) result(st)
        type(l8_optim), intent(in) :: opt
        type(l8_ckpt_reader), intent(in) :: r
        st = c_optim_check_load(opt%p, r%p)
    end function
    integer(c_int) function l8_optim_load(opt, r) result(st)
        type(l8_optim), intent(in) :: opt
        type(l8_ckpt_reader), intent(in) :: r
        st = c_optim_load(opt%p, r%p)
    end function

    ! ---- communicators: an id made on one rank, broadcast, joined by all ----
    !   if (rank == 0) st = l8_comm_id_create(ctx, id)
    !   call MPI_Bcast(id, int(c_sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD, ierr)
    !   st = l8_comm_init_rank(ctx, id, rank, world, comm)
    ! Ranks are 0-based, as MPI's.

    ! A new id (transport absent: NCCL on a GPU context, TCP on the host).
    integer(c_int) function l8_comm_id_create(ctx, id, transport) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_comm_id), intent(out) :: id
        integer(c_int), intent(in), optional :: transport
        integer(c_int) :: t
        t = L8_COMM_DEFAULT
        if (present(transport)) t = transport
        st = c_comm_id_create(ctx%p, t, id)
    end function

    ! Join as `rank` of `world` (collective). timeout_ms: collectives and dead
    ! peers, init_timeout_ms: joining (absent or 0: L8_COMM_TIMEOUT and
    ! L8_INIT_TIMEOUT seconds, else 600 and 300 s).
    integer(c_int) function l8_comm_init_rank(ctx, id, rank, world, comm, timeout_ms, &
            init_timeout_ms) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_comm_id), intent(in) :: id
        integer, intent(in) :: rank, world
        type(l8_comm), intent(out) :: comm
        integer, intent(in), optional :: timeout_ms, init_timeout_ms
        type(comm_config) :: cfg
        call init_comm_config(cfg, timeout_ms, init_timeout_ms)
        st = c_comm_init_rank(ctx%p, id, int(rank, c_int), int(world, c_int), cfg, comm%p)
    end function

    ! Join the job the launcher's environment describes (torchrun or
    ! lean8-run, Slurm, Open MPI: rank and world size; the rendezvous at
    ! MASTER_ADDR:MASTER_PORT or through the file L8_INIT_FILE; a world of 1
    ! needs neither). transport absent: NCCL on a GPU context, TCP on the host.
    integer(c_int) function l8_comm_init_env(ctx, comm, transport, timeout_ms, init_timeout_ms) &
            result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_comm), intent(out) :: comm
        integer(c_int), intent(in), optional :: transport
        integer, intent(in), optional :: timeout_ms, init_timeout_ms
        type(comm_config) :: cfg
        call init_comm_config(cfg, timeout_ms, init_timeout_ms)
        if (present(transport)) cfg%transport = transport
        st = c_comm_init_env(ctx%p, cfg, comm%p)
    end function

    ! Sub-communicators (collective): the ranks of one color, ordered by key;
    ! a negative color joins none (out stays unset).
    integer(c_int) function l8_comm_split(comm, color, key, out) result(st)
        type(l8_comm), intent(in) :: comm
        integer, intent(in) :: color, key
        type(l8_comm), intent(out) :: out
        st = c_comm_split(comm%p, int(color, c_int), int(key, c_int), out%p)
    end function
    ! The Megatron grid, world = tp x dp with tensor-parallel ranks adjacent
    ! (rank r: TP rank mod(r, tp), DP rank r / tp); either output optional.
    integer(c_int) function l8_comm_grid(comm, tp, tp_comm, dp_comm) result(st)
        type(l8_comm), intent(in) :: comm
        integer, intent(in) :: tp
        type(l8_comm), intent(out), optional, target :: tp_comm, dp_comm
        type(c_ptr) :: pt, pd
        pt = c_null_ptr
        pd = c_null_ptr
        if (present(tp_comm)) pt = c_loc(tp_comm%p)
        if (present(dp_comm)) pd = c_loc(dp_comm%p)
        st = c_comm_grid(comm%p, int(tp, c_int), pt, pd)
    end function
    ! Abort now: the peers' next collectives fail. Destroy it still.
    subroutine l8_comm_abort(comm)
        type(l8_comm), intent(in) :: comm
        call c_comm_abort(comm%p)
    end subroutine
    ! L8_OK, or the communicator's first error (never blocks).
    integer(c_int) function l8_comm_check(comm) result(st)
        type(l8_comm), intent(in) :: comm
        st = c_comm_check(comm%p)
    end function
    ! Wait until every rank has arrived.
    integer(c_int) function l8_comm_barrier(comm) result(st)
        type(l8_comm), intent(in) :: comm
        st = c_comm_barrier(comm%p)
    end function

    subroutine l8_comm_destroy(comm)
        type(l8_comm), intent(inout) :: comm
        call c_comm_destroy(comm%p)
        comm%p = c_null_ptr
    end subroutine

    integer function l8_comm_rank(comm)
        type(l8_comm), intent(in) :: comm
        l8_comm_rank = int(c_comm_rank(comm%p))
    end function
    integer function l8_comm_size(comm)
        type(l8_comm), intent(in) :: comm
        l8_comm_size = int(c_comm_size(comm%p))
    end function

    ! recv = op over the ranks of send (recv may be send: in place).
    integer(c_int) function l8_comm_all_reduce(comm, send, recv, op) result(st)
        type(l8_comm), intent(in) :: comm
        type(l8_tensor), intent(in) :: send, recv
        integer(c_int), intent(in) :: op
        st = c_comm_all_reduce(comm%p, send%p, recv%p, op, c_null_ptr)
    end function
    ! buf on every rank = buf on root.
    integer(c_int) function l8_comm_broadcast(comm, buf, root) result(st)
        type(l8_comm), intent(in) :: comm
        type(l8_tensor), intent(in) :: buf
        integer, intent(in) :: root
        st = c_comm_broadcast(comm%p, buf%p, int(root, c_int), c_null_ptr)
    end function
    ! Every rank's send concatenated in rank order along Fortran dimension
    ! dim of send: 1 (the first, fastest: [c, r] -> [world * c, r]) or the
    ! last ([c, r] -> [c, world * r]).
    integer(c_int) function l8_comm_all_gather(comm, send, recv, dim) result(st)
        type(l8_comm), intent(in) :: comm
        type(l8_tensor), intent(in) :: send, recv
        integer, intent(in) :: dim
        st = c_comm_all_gather(comm%p, send%p, recv%p, c_dim(send, dim), c_null_ptr)
    end function
    ! The reverse: op over the ranks, this rank's slice along Fortran
    ! dimension dim of send (1 or the last) kept in recv.
    integer(c_int) function l8_comm_reduce_scatter(comm, send, recv, op, dim) result(st)
        type(l8_comm), intent(in) :: comm
        type(l8_tensor), intent(in) :: send, recv
        integer(c_int), intent(in) :: op
        integer, intent(in) :: dim
        st = c_comm_reduce_scatter(comm%p, send%p, recv%p, op, c_dim(send, dim), c_null_ptr)
    end function
    ! The C dimension of Fortran dimension dim of t (Fortran order reverses
    ! C's): dim 1 is C's last, the last is C's 0. A dim C refuses stays one.
    integer(c_int) function c_dim(t, dim)
        type(l8_tensor), intent(in) :: t
        integer, intent(in) :: dim
        integer(c_int) :: nd
        nd = c_tensor_ndim(t%p)
        c_dim = nd - int(dim, c_int)
        if (dim < 1 .or. dim > nd) c_dim = -100   ! refused by the C side, with its message
    end function

    ! ---- data parallel (runtime/ddp.h) ----
    ! A step: l8_ddp_begin_micro_batch(d, last) before each micro-batch's
    ! backward (optional with one), the backward (layers created with
    ! grad_ready = g report into the group), l8_ddp_finish(d) before the
    ! optimizer step: main_grad then holds the average over the ranks.

    ! The amax hook of a recipe over comm (l8_comm_reduce_amax: every rank
    ! casts with one scale); comm absent: no hook.
    integer(c_int) function l8_recipe_set_reduce(r, comm) result(st)
        type(l8_recipe), intent(in) :: r
        type(l8_comm), intent(in), optional :: comm
        if (present(comm)) then
            st = c_recipe_set_reduce(r%p, c_funloc(c_comm_reduce_amax), comm%p)
        else
            st = c_recipe_set_reduce(r%p, c_null_funptr, c_null_ptr)
        end if
    end function
    ! The norm hook of an optimizer over comm (l8_comm_reduce_sum: the
    ! gradient norm of a ZeRO-1 group is its shards' sum); comm absent: none.
    integer(c_int) function l8_optim_set_norm_reduce(opt, comm) result(st)
        type(l8_optim), intent(in) :: opt
        type(l8_comm), intent(in), optional :: comm
        if (present(comm)) then
            st = c_optim_set_norm_reduce(opt%p, c_funloc(c_comm_reduce_sum), comm%p)
        else
            st = c_optim_set_norm_reduce(opt%p, c_null_funptr, c_null_ptr)
        end if
    end function
    ! ZeRO-1: the optimizer keeps state for these ranges of the group's
    ! buffers only (what l8_ddp_shard_ranges gives: offset(1:n), numel(1:n)).
    integer(c_int) function l8_optim_set_shard(opt, offset, numel) result(st)
        type(l8_optim), intent(in) :: opt
        integer(c_int64_t), intent(in) :: offset(:), numel(:)
        if (size(offset) /= size(numel)) then
            st = c_optim_set_shard(opt%p, -1_c_int, offset, numel)   ! refused, with its message
        else
            st = c_optim_set_shard(opt%p, int(size(offset), c_int), offset, numel)
        end if
    end function
    ! Which rank (0-based) of how many the shard is: named in checkpoints.
    integer(c_int) function l8_optim_set_shard_rank(opt, rank, world) result(st)
        type(l8_optim), intent(in) :: opt
        integer, intent(in) :: rank, world
        st = c_optim_set_shard_rank(opt%p, int(rank, c_int), int(world, c_int))
    end function

    ! A reducer for the finalized group g over comm; it becomes the group's
    ! grad-ready consumer. bucket_elems: target elements per bucket (default
    ! 40M); overlap (default .true.): reduce buckets during backward; strict:
    ! a parameter that never reports fails finish (default: it is zeroed);
    ! zero1: reduce-scatter for a sharded optimizer (g created with
    ! pad_to = 128 * ranks).
    integer(c_int) function l8_ddp_create(g, comm, d, bucket_elems, overlap, strict, zero1) &
            result(st)
        type(l8_params), intent(in) :: g
        type(l8_comm), intent(in) :: comm
        type(l8_ddp), intent(out) :: d
        integer, intent(in), optional :: bucket_elems
        logical, intent(in), optional :: overlap, strict, zero1
        type(ddp_config) :: cfg
        call init_ddp_config(cfg)
        if (present(bucket_elems)) cfg%bucket_elems = int(bucket_elems, c_int64_t)
        if (present(overlap)) cfg%overlap = int01(overlap)
        if (present(strict)) cfg%strict = int01(strict)
        if (present(zero1)) cfg%zero1 = int01(zero1)
        st = c_ddp_create(g%p, comm%p, cfg, d%p)
    end function
    ! ---- CUDA graphs (runtime/graph.h): a step captured once, launched many times ----
    ! The step is a function of yours, bind(c), best a module procedure (an
    ! internal one needs a trampoline on the stack):
    !     integer(c_int) function step(arg, s) bind(c)
    !         type(c_ptr), value :: arg, s   ! arg: what you passed; s: the stream
    ! that makes the step's lean8 calls and returns L8_OK or the first error.
    ! The graph runs on the context's compute stream, where every call of this
    ! module enqueues (s is that stream). Rules of capture: graph.h (no reads
    ! to the host, no synchronization, scalars frozen as captured). The host
    ! backend runs the step eagerly at warm-up and at every launch.

    ! .true. when ctx captures real CUDA graphs (a GPU with the graph API).
    logical function l8_graph_native(ctx)
        type(l8_ctx), intent(in) :: ctx
        l8_graph_native = c_graph_native(ctx%p) /= 0
    end function
    ! An empty graph on ctx's compute stream.
    integer(c_int) function l8_graph_create(ctx, g) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_graph), intent(out) :: g
        st = c_graph_create(ctx%p, c_null_ptr, g%p)
    end function
    ! Run the step once now (a real step), its memory from g's pool: before
    ! the first capture. arg absent: C NULL.
    integer(c_int) function l8_graph_warmup(g, step, arg) result(st)
        type(l8_graph), intent(in) :: g
        type(c_funptr), value :: step            ! by value: no constant copy to relocate
        type(c_ptr), intent(in), optional :: arg
        st = c_graph_warmup(g%p, step, arg_of(arg))
    end function
    ! Record the step (nothing runs on a GPU); a later capture updates it.
    integer(c_int) function l8_graph_capture(g, step, arg) result(st)
        type(l8_graph), intent(in) :: g
        type(c_funptr), value :: step            ! by value: no constant copy to relocate
        type(c_ptr), intent(in), optional :: arg
        st = c_graph_capture(g%p, step, arg_of(arg))
    end function
    ! Run the recorded step once (returns at once: the work is enqueued).
    integer(c_int) function l8_graph_launch(g) result(st)
        type(l8_graph), intent(in) :: g
        st = c_graph_launch(g%p)
    end function
    ! Run it n times in a row (1 <= n <= 1024) in one launch.
    integer(c_int) function l8_graph_launch_repeat(g, n) result(st)
        type(l8_graph), intent(in) :: g
        integer, intent(in) :: n
        st = c_graph_launch_repeat(g%p, int(n, c_int))
    end function
    ! How the graph was used: executions, captures (in place or anew),
    ! warm-ups, executions run in a chain, chains the driver refused.
    integer(c_int) function l8_graph_get_stats(g, launches, captures, updates_in_place, &
            reinstantiations, warmups, chained, chain_refusals) result(st)
        type(l8_graph), intent(in) :: g
        integer(c_int64_t), intent(out), optional :: launches, captures, updates_in_place, &
                                                     reinstantiations, warmups, chained, &
                                                     chain_refusals
        type(graph_stats) :: s
        s = graph_stats(c_sizeof(s), 0, 0, 0, 0, 0, 0, 0)
        st = c_graph_get_stats(g%p, s)
        if (present(launches)) launches = s%launches
        if (present(captures)) captures = s%captures
        if (present(updates_in_place)) updates_in_place = s%updates_in_place
        if (present(reinstantiations)) reinstantiations = s%reinstantiations
        if (present(warmups)) warmups = s%warmups
        if (present(chained)) chained = s%chained
        if (present(chain_refusals)) chain_refusals = s%chain_refusals
    end function
    ! Wait for the last launch, free the graph and its pool; before the context.
    subroutine l8_graph_destroy(g)
        type(l8_graph), intent(inout) :: g
        call c_graph_destroy(g%p)
        g%p = c_null_ptr
    end subroutine
    subroutine l8_ddp_destroy(d)
        type(l8_ddp), intent(inout) :: d
        call c_ddp_destroy(d%p)
        d%p = c_null_ptr
    end subroutine
    ! The next backward is a micro-batch; last = .true. for the step's last.
    integer(c_int) function l8_ddp_begin_micro_batch(d, last) result(st)
        type(l8_ddp), intent(in) :: d
        logical, intent(in) :: last
        st = c_ddp_begin_micro_batch(d%p, int01(last))
    end function
    ! Parameter id (0-based) gets no gradient this step (zeroed, counts as
    ! reported), during the last micro-batch.
    integer(c_int) function l8_ddp_mark_unused(d, id) result(st)
        type(l8_ddp), intent(in) :: d
        integer(c_int), intent(in) :: id
        st = c_ddp_mark_unused(d%p, id)
    end function
    ! End of backward: the remaining buckets launched, the compute stream
    ! waits for them; main_grad is the ranks' average after it.
    integer(c_int) function l8_ddp_finish(d) result(st)
        type(l8_ddp), intent(in) :: d
        st = c_ddp_finish(d%p, c_null_ptr)
    end function
    ! ZeRO-1: this rank's range of each bucket, n of them, in offset(1:n),
    ! numel(1:n) (elements of the group's buffers; 0-based offsets). The
    ! arrays need one entry per bucket (l8_ddp_get_stats' buckets).
    integer(c_int) function l8_ddp_shard_ranges(d, offset, numel, n) result(st)
        type(l8_ddp), intent(in) :: d
        integer(c_int64_t), intent(out) :: offset(:), numel(:)
        integer, intent(out) :: n
        integer(c_int) :: cn
        cn = 0
        st = c_ddp_shard_ranges(d%p, int(min(size(offset), size(numel)), c_int), cn, offset, &
                                numel)
        n = int(cn)
    end function
    ! ZeRO-1, after the optimizer step: every rank's master weights whole
    ! again. wait (default .true.): the compute stream waits for all of them;
    ! .false.: call l8_ddp_wait_param before each parameter's first use.
    integer(c_int) function l8_ddp_gather_params(d, wait) result(st)
        type(l8_ddp), intent(in) :: d
        logical, intent(in), optional :: wait
        integer(c_int) :: w
        w = 1
        if (present(wait)) w = int01(wait)
        st = c_ddp_gather_params(d%p, c_null_ptr, w)
    end function
    ! The compute stream waits for parameter id's gather (-1: every one's).
    integer(c_int) function l8_ddp_wait_param(d, id) result(st)
        type(l8_ddp), intent(in) :: d
        integer(c_int), intent(in) :: id
        st = c_ddp_wait_param(d%p, id, c_null_ptr)
    end function
    ! The buckets and the last finished step's counters, each optional.
    integer(c_int) function l8_ddp_get_stats(d, buckets, largest_bucket, steps, &
            launched_in_backward, launched_at_finish, zeroed) result(st)
        type(l8_ddp), intent(in) :: d
        integer, intent(out), optional :: buckets, launched_in_backward, launched_at_finish, zeroed
        integer(c_int64_t), intent(out), optional :: largest_bucket, steps
        type(ddp_stats) :: s
        s = ddp_stats(c_sizeof(s), 0, 0, 0, 0, 0, 0)
        st = c_ddp_get_stats(d%p, s)
        if (present(buckets)) buckets = int(s%buckets)
        if (present(largest_bucket)) largest_bucket = s%largest_bucket
        if (present(steps)) steps = s%steps
        if (present(launched_in_backward)) launched_in_backward = int(s%launched_in_backward)
        if (present(launched_at_finish)) launched_at_finish = int(s%launched_at_finish)
        if (present(zeroed)) zeroed = int(s%zeroed)
    end function
    ! Bucket b's (0-based) range of the grad buffer: elements [first, first + n).
    integer(c_int) function l8_ddp_bucket(d, b, first, n) result(st)
        type(l8_ddp), intent(in) :: d
        integer, intent(in) :: b
        integer(c_int64_t), intent(out) :: first, n
        first = 0
        n = 0
        st = c_ddp_bucket(d%p, int(b, c_int), first, n)
    end function

    ! ---- memory: the context's allocator and pinned pool, the trace, offload ----

    ! A refusal found here, before any C call: L8_ERR_INVALID_ARG, recorded
    ! as the last error like the C side's.
    integer(c_int) function refuse(call, message) result(st)
        character(len=*), intent(in) :: call, message
        st = c_error_set_text(L8_ERR_INVALID_ARG, cstr(call), cstr(message))
    end function

    ! The context's CUDA ordinal; -1 on the host and for an unset handle.
    integer(c_int) function l8_ctx_device(ctx)
        type(l8_ctx), intent(in) :: ctx
        l8_ctx_device = -1
        if (c_associated(ctx%p)) l8_ctx_device = c_ctx_device(ctx%p)
    end function
    ! Events: record one on a stream of ctx (absent: the compute stream,
    ! where every call of this module enqueues; L8_STREAM_COMM, L8_STREAM_COPY)
    ! and wait for it, ask whether the work before it is done, or time the
    ! GPU's work between two (timing=.true.): e.g. a training step on the
    ! device, without synchronizing each call. On the host every event is
    ! complete at once and the time between two is 0.
    integer(c_int) function l8_event_create(ctx, e, timing) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_event), intent(out) :: e
        logical, intent(in), optional :: timing
        integer(c_int) :: t
        t = 0
        if (present(timing)) t = int01(timing)
        st = c_event_create(ctx%p, t, e%p)
    end function
    subroutine l8_event_destroy(e)
        type(l8_event), intent(inout) :: e
        call c_event_destroy(e%p)
        e%p = c_null_ptr
    end subroutine
    ! Another context's event, or a stream kind outside the three: refused.
    integer(c_int) function l8_event_record(e, ctx, stream) result(st)
        type(l8_event), intent(in) :: e
        type(l8_ctx), intent(in) :: ctx
        integer(c_int), intent(in), optional :: stream
        integer(c_int) :: kind
        kind = L8_STREAM_COMPUTE
        if (present(stream)) kind = stream
        if (kind < L8_STREAM_COMPUTE .or. kind > L8_STREAM_COPY) then
            st = refuse('l8_event_record', 'stream is not L8_STREAM_COMPUTE, _COMM or _COPY')
            return
        end if
        st = c_event_record(e%p, c_ctx_stream(ctx%p, kind))
    end function
    ! done: the work recorded before e has completed (also for an event
    ! never recorded). Does not block.
    integer(c_int) function l8_event_query(e, done) result(st)
        type(l8_event), intent(in) :: e
        logical, intent(out) :: done
        integer(c_int) :: d
        d = 0
        st = c_event_query(e%p, d)
        done = d /= 0
    end function
    integer(c_int) function l8_event_synchronize(e) result(st)
        type(l8_event), intent(in) :: e
        st = c_event_synchronize(e%p)
    end function
    ! Milliseconds of GPU time from start to finish, both completed timing
    ! events (an event created without timing: L8_ERR_CUDA on a GPU).
    integer(c_int) function l8_event_elapsed_ms(start, finish, ms) result(st)
        type(l8_event), intent(in) :: start, finish
        real(c_float), intent(out) :: ms
        ms = 0
        st = c_event_elapsed_ms(start%p, finish%p, ms)
    end function

    ! ---- the gradients' ready table and a consumer of one's own ----

    ! The group's consumer of its layers' reports (l8_linear_create(...,
    ! grad_ready=g)): c_funloc of a function of yours,
    !     integer(c_int) function on_ready(arg, id, ev) bind(c)
    !         type(c_ptr), value :: arg, ev   ! ev: an l8_event's pointer, or null
    !         integer(c_int), value :: id     ! the parameter whose gradient is enqueued
    ! best a module procedure, called during backward as each gradient is
    ! enqueued (a reduction over MPI of one's own: wait for ev with
    ! e%p = ev; l8_event_synchronize(e), when ev is not null, then reduce
    ! main_grad(id)); a status other than L8_OK comes back from the layer's
    ! backward. c_null_funptr removes it. arg (absent: null) comes back to it.
    integer(c_int) function l8_params_set_grad_ready_cb(g, fn, arg) result(st)
        type(l8_params), intent(in) :: g
        type(c_funptr), value :: fn
        type(c_ptr), intent(in), optional :: arg
        st = c_params_set_grad_ready_cb(g%p, fn, arg_of(arg))
    end function
    ! The ready table: which parameters reported since the last reset (a
    ! step's start; l8_params_zero_grad resets it too). ready_count: reports
    ! of id (-1 for a bad id or an unset group); all_ready: every parameter
    ! reported (.false. for an unset group); missing_count: how many did not;
    ! describe_missing: their names, "fc1.bias, fc2.weight"; check_all_ready:
    ! L8_OK, or L8_ERR_STATE naming them (what a reduction turns a gradient
    ! that never came into: an error, not a hang).
    subroutine l8_params_reset_ready(g)
        type(l8_params), intent(in) :: g
        call c_params_reset_ready(g%p)
    end subroutine
    integer(c_int) function l8_params_ready_count(g, id)
        type(l8_params), intent(in) :: g
        integer(c_int), intent(in) :: id
        l8_params_ready_count = c_params_ready_count(g%p, id)
    end function
    logical function l8_params_all_ready(g)
        type(l8_params), intent(in) :: g
        l8_params_all_ready = c_associated(g%p)
        if (l8_params_all_ready) l8_params_all_ready = c_params_missing_count(g%p) == 0
    end function
    integer(c_int) function l8_params_missing_count(g)
        type(l8_params), intent(in) :: g
        l8_params_missing_count = c_params_missing_count(g%p)
    end function
    function l8_params_describe_missing(g) result(s)
        type(l8_params), intent(in) :: g
        character(len=:), allocatable :: s
        s = described(c_params_describe_missing, g%p)
    end function
    integer(c_int) function l8_params_check_all_ready(g) result(st)
        type(l8_params), intent(in) :: g
        st = c_params_check_all_ready(g%p)
    end function
    ! Every main_grad = 0 (padding included) on the compute stream, and the
    ! ready table reset: for layers that accumulate (several backwards a step).
    integer(c_int) function l8_params_zero_grad(g) result(st)
        type(l8_params), intent(in) :: g
        st = c_params_zero_grad(g%p, c_null_ptr)
    end function
    ! The whole main_grad buffer as one 1-d tensor (borrowed; laid out as
    ! l8_params_master_flat): one reduction for every gradient.
    type(l8_tensor) function l8_params_grad_flat(g) result(t)
        type(l8_params), intent(in) :: g
        t%p = c_params_grad_flat(g%p)
    end function
    ! The address of t's first element now: device memory on a GPU (for a
    ! CUDA-aware MPI), host memory on the host backend (c_f_pointer it). It
    ! moves with offload: do not keep it across calls. L8_ERR_STATE while the
    ! storage is not on the device.
    integer(c_int) function l8_tensor_data(t, ptr) result(st)
        type(l8_tensor), intent(in) :: t
        type(c_ptr), intent(out) :: ptr
        ptr = c_null_ptr
        st = c_tensor_data(t%p, ptr)
    end function

    ! The context's allocator, pinned pool and trace, borrowed (never destroy
    ! them); unset for an unset context, and the trace unset when the context
    ! records none (no trace_path and no L8_TRACE).
    type(l8_alloc) function l8_ctx_allocator(ctx) result(a)
        type(l8_ctx), intent(in) :: ctx
        if (c_associated(ctx%p)) a%p = c_ctx_allocator(ctx%p)
    end function
    type(l8_pinned) function l8_ctx_pinned(ctx) result(p)
        type(l8_ctx), intent(in) :: ctx
        if (c_associated(ctx%p)) p%p = c_ctx_pinned(ctx%p)
    end function
    type(l8_trace) function l8_ctx_trace(ctx) result(t)
        type(l8_ctx), intent(in) :: ctx
        t%p = c_ctx_trace(ctx%p)
    end function

    ! The allocator's counters (bytes: live, reserved, peaks since creation or
    ! l8_alloc_reset_peaks; counts of calls, segments, cache hits, OOMs).
    integer(c_int) function l8_alloc_get_stats(a, stats) result(st)
        type(l8_alloc), intent(in) :: a
        type(l8_alloc_stats), intent(out) :: stats
        stats%size = c_sizeof(stats)
        st = c_alloc_get_stats(a%p, stats)
    end function
    ! Give every wholly free cached segment back to the driver (after the
    ! pending frees' events), e.g. before a phase that needs the memory
    ! outside lean8. L8_ERR_STATE during a graph capture.
    integer(c_int) function l8_alloc_empty_cache(a) result(st)
        type(l8_alloc), intent(in) :: a
        st = c_alloc_empty_cache(a%p)
    end function
    ! Peaks back to the current values. An unset handle: nothing.
    subroutine l8_alloc_reset_peaks(a)
        type(l8_alloc), intent(in) :: a
        call c_alloc_reset_peaks(a%p)
    end subroutine
    ! One line per segment and the totals, lines ending in new_line('a');
    ! "" for an unset handle.
    function l8_alloc_describe(a) result(s)
        type(l8_alloc), intent(in) :: a
        character(len=:), allocatable :: s
        s = described(c_alloc_describe, a%p)
    end function

    ! The pinned pool's counters; its cached blocks back to the system.
    integer(c_int) function l8_pinned_get_stats(p, stats) result(st)
        type(l8_pinned), intent(in) :: p
        type(l8_pinned_stats), intent(out) :: stats
        stats%size = c_sizeof(stats)
        st = c_pinned_get_stats(p%p, stats)
    end function
    integer(c_int) function l8_pinned_empty_cache(p) result(st)
        type(l8_pinned), intent(in) :: p
        st = c_pinned_empty_cache(p%p)
    end function

    ! Record an event; the tag (l8_tag_push) and the time are filled in. A
    ! step mark: call l8_trace_record(tr, L8_TRACE_STEP, l8_ctx_device(ctx), aux=step).
    ! stream is a stream's handle (0: none), not its role. An unset trace:
    ! nothing; a kind outside L8_TRACE_ALLOC .. L8_TRACE_PINNED_FREE is dropped.
    subroutine l8_trace_record(t, kind, device, stream, addr, size, aux)
        type(l8_trace), intent(in) :: t
        integer(c_int), intent(in) :: kind, device
        integer(c_int64_t), intent(in), optional :: stream, addr, size, aux
        call c_trace_record(t%p, kind, device, opt64(stream), opt64(addr), opt64(size), opt64(aux))
    end subroutine
    ! Write the buffered events to the trace's file (L8_ERR_IO: a write
    ! failed, now or before). An unset or memory-only trace: L8_OK.
    integer(c_int) function l8_trace_flush(t) result(st)
        type(l8_trace), intent(in) :: t
        st = c_trace_flush(t%p)
    end function
    ! The file the trace writes (%r, %p expanded); "" for memory only or unset.
    function l8_trace_path(t) result(s)
        type(l8_trace), intent(in) :: t
        character(len=:), allocatable :: s
        s = fstr(c_trace_path(t%p))
    end function
    ! Events recorded so far (dropped from the ring included), and those held
    ! in memory; 0 for an unset trace.
    integer(c_int64_t) function l8_trace_count(t)
        type(l8_trace), intent(in) :: t
        l8_trace_count = c_trace_count(t%p)
    end function
    integer(c_int64_t) function l8_trace_held(t)
        type(l8_trace), intent(in) :: t
        l8_trace_held = c_trace_held(t%p)
    end function
    ! Copy the held events from `first` (0: the oldest held) into out(1:),
    ! oldest first; the number copied (0 for a negative first or an unset trace).
    integer(c_int64_t) function l8_trace_events(t, first, out) result(n)
        type(l8_trace), intent(in) :: t
        integer(c_int64_t), intent(in) :: first
        type(l8_trace_event), intent(inout) :: out(:)
        n = 0
        if (first < 0 .or. size(out) == 0) return
        n = c_trace_events(t%p, first, out, size(out, kind=c_size_t))
    end function
    ! The tag of an event's id; "" for 0, an unknown id or an unset trace.
    function l8_trace_tag_name(t, id) result(s)
        type(l8_trace), intent(in) :: t
        integer(c_int32_t), intent(in) :: id
        character(len=:), allocatable :: s
        s = fstr(c_trace_tag_name(t%p, id))
    end function
    ! The process rank of trace paths (%r) and headers: the last
    ! l8_trace_set_rank, else the RANK environment variable, else 0. An MPI
    ! program sets it before l8_ctx_create(..., trace_path='mem.%r.l8t');
    ! a communicator sets it once made (paths already expanded keep theirs).
    ! A negative rank is refused.
    integer(c_int) function l8_trace_rank()
        l8_trace_rank = c_trace_rank()
    end function
    integer(c_int) function l8_trace_set_rank(rank) result(st)
        integer, intent(in) :: rank
        st = c_trace_set_rank(int(rank, c_int))
    end function
    ! The calling thread's innermost tag; "" when none is pushed.
    function l8_tag_current() result(s)
        character(len=:), allocatable :: s
        s = fstr(c_tag_current())
    end function

    ! An activation offloader for ctx: saved tensors go to pinned host memory
    ! during the forward and come back for their backward (runtime/offload.h;
    ! docs/offload.md). Storages under min_bytes (default 1 MiB,
    ! L8_OFFLOAD_MIN_BYTES_DEFAULT; 0: every one) stay on the device; the
    ! backward of layer i prefetches layers i-1 .. i-prefetch_layers (default
    ! 1). Events go to the context's trace. Hand it to layers with
    ! l8_linear_create(..., offload=off); destroy it after them.
    integer(c_int) function l8_offload_create(ctx, off, min_bytes, prefetch_layers) result(st)
        type(l8_ctx), intent(in) :: ctx
        type(l8_offload), intent(out) :: off
        integer(c_int64_t), intent(in), optional :: min_bytes
        integer(c_int), intent(in), optional :: prefetch_layers
        type(offload_config) :: cfg
        call init_offload_config(cfg)
        if (present(min_bytes)) then
            if (min_bytes < 0) then
                st = refuse('l8_offload_create', 'min_bytes is negative')
                return
            end if
            cfg%min_bytes = min_bytes
        end if
        if (present(prefetch_layers)) cfg%prefetch_layers = prefetch_layers
        st = c_offload_create(ctx%p, cfg, off%p)
    end function
    ! Wait for every copy and free what the offloader holds; after the layers
    ! that use it (their saves released).
    subroutine l8_offload_destroy(off)
        type(l8_offload), intent(inout) :: off
        call c_offload_destroy(off%p)
        off%p = c_null_ptr
    end subroutine
    ! The forward enters layer `layer` (0-based, in forward order): saves
    ! until the next call belong to it; enable = .false. keeps them on the
    ! device (default .true.).
    integer(c_int) function l8_offload_forward_layer(off, layer, enable) result(st)
        type(l8_offload), intent(in) :: off
        integer, intent(in) :: layer
        logical, intent(in), optional :: enable
        integer(c_int) :: on
        on = 1
        if (present(enable)) on = int01(enable)
        st = c_offload_forward_layer(off%p, int(layer, c_int), on)
    end function
    ! The backward is about to run layer `layer`: brings it back, prefetches
    ! the layers before it. Does not block.
    integer(c_int) function l8_offload_backward_layer(off, layer) result(st)
        type(l8_offload), intent(in) :: off
        integer, intent(in) :: layer
        st = c_offload_backward_layer(off%p, int(layer, c_int))
    end function
    ! The hooks by hand, for a tensor of one's own (a GELU's input): save
    ! (not read before its restore, not written before its release; copied
    ! out after the work enqueued so far), restore (resident and ordered
    ! before later work), release (that save is over). The unit is t's
    ! storage: views of one storage saved under several names move once.
    integer(c_int) function l8_offload_save(off, t, name) result(st)
        type(l8_offload), intent(in) :: off
        type(l8_tensor), intent(in) :: t
        character(len=*), intent(in), optional :: name
        character(kind=c_char, len=:), allocatable, target :: cn
        st = c_offload_save(off%p, t%p, name_of(name, cn), c_null_ptr)
    end function
    integer(c_int) function l8_offload_restore(off, t, name) result(st)
        type(l8_offload), intent(in) :: off
        type(l8_tensor), intent(in) :: t
        character(len=*), intent(in), optional :: name
        character(kind=c_char, len=:), allocatable, target :: cn
        st = c_offload_restore(off%p, t%p, name_of(name, cn), c_null_ptr)
    end function
    ! name: the one given to the save (absent: any save of t). Unknown
    ! tensors and unset handles: nothing.
    subroutine l8_offload_release(off, t, name)
        type(l8_offload), intent(in) :: off
        type(l8_tensor), intent(in) :: t
        character(len=*), intent(in), optional :: name
        character(kind=c_char, len=:), allocatable, target :: cn
        call c_offload_release(off%p, t%p, name_of(name, cn))
    end subroutine
    ! Give back the device blocks whose copies out are done (never blocks);
    ! wait: block until every copy enqueued so far is done, then poll.
    integer(c_int) function l8_offload_poll(off) result(st)
        type(l8_offload), intent(in) :: off
        st = c_offload_poll(off%p)
    end function
    integer(c_int) function l8_offload_wait(off) result(st)
        type(l8_offload), intent(in) :: off
        st = c_offload_wait(off%p)
    end function
    ! Where the offloader has t's storage: an L8_OFFLOAD_* state
    ! (L8_OFFLOAD_NONE when not registered, or for unset handles).
    integer(c_int) function l8_offload_state_of(off, t) result(s)
        type(l8_offload), intent(in) :: off
        type(l8_tensor), intent(in) :: t
        s = c_offload_state_of(off%p, c_tensor_storage(t%p))
    end function
    ! "none", "copying out", "kept", "on host", "copying in", "restored";
    ! "invalid" for a value outside the states.
    function l8_offload_state_name(state) result(s)
        integer(c_int), intent(in) :: state
        character(len=:), allocatable :: s
        s = fstr(c_offload_state_name(state))
    end function
    integer(c_int) function l8_offload_get_stats(off, stats) result(st)
        type(l8_offload), intent(in) :: off
        type(l8_offload_stats), intent(out) :: stats
        stats%size = c_sizeof(stats)
        st = c_offload_get_stats(off%p, stats)
    end function

    ! ---- self-check ----

    ! 0 when every struct mirror of this module fits the C library's struct
    ! (is no longer than it, and the C init function fits the scratch) and
    ! reads the C defaults in the right places; else the number of problems.
    integer function l8_fortran_check_layouts() result(bad)
        type(ctx_config) :: cc
        type(adamw_config) :: ac
        type(linear_config) :: lc
        type(params_config) :: pc
        type(comm_config) :: mc
        type(ddp_config) :: dc
        type(sgd_config) :: sc
        type(recipe_config) :: rc
        type(scale_update_config) :: uc
        type(offload_config) :: oc
        type(l8_trace_event) :: ev_mold
        type(l8_comm_id) :: id_mold
        bad = 0
        if (misfit(c_ctx_config_init, c_sizeof(cc))) bad = bad + 1
        if (misfit(c_adamw_config_init, c_sizeof(ac))) bad = bad + 1
        if (misfit(c_linear_config_init, c_sizeof(lc))) bad = bad + 1
        if (misfit(c_params_config_init, c_sizeof(pc))) bad = bad + 1
        if (misfit(c_comm_config_init, c_sizeof(mc))) bad = bad + 1
        if (misfit(c_ddp_config_init, c_sizeof(dc))) bad = bad + 1
        if (misfit(c_sgd_config_init, c_sizeof(sc))) bad = bad + 1
        if (misfit(c_recipe_config_init, c_sizeof(rc))) bad = bad + 1
        if (misfit(c_scale_update_config_init, c_sizeof(uc))) bad = bad + 1
        if (misfit(c_offload_config_init, c_sizeof(oc))) bad = bad + 1
        call init_ctx_config(cc)
        call init_adamw_config(ac)
        call init_linear_config(lc)
        call init_params_config(pc)
        call init_ddp_config(dc)
        call init_comm_config(mc)
        call init_sgd_config(sc)
        call init_recipe_config(rc)
        call init_scale_update_config(uc)
        call init_offload_config(oc)
        if (oc%min_bytes /= L8_OFFLOAD_MIN_BYTES_DEFAULT .or. oc%prefetch_layers /= 1) bad = bad + 1
        if (c_sizeof(ev_mold) /= 48) bad = bad + 1
        if (uc%amax_compute /= L8_AMAX_MAX_HISTORY .or. abs(uc%margin) > 0 .or. &
            uc%reset_amax /= 0) bad = bad + 1
        if (abs(sc%lr - 1e-3) > 1e-9 .or. abs(sc%momentum) > 0 .or. sc%nesterov /= 0 .or. &
            abs(sc%max_grad_norm) > 0) bad = bad + 1
        if (rc%history_len /= 0 .or. abs(rc%margin) > 0 .or. &
            rc%amax_compute /= L8_AMAX_MAX_HISTORY .or. rc%format /= L8_FP8_HYBRID) bad = bad + 1
        if (mc%timeout_ms /= 0 .or. mc%init_timeout_ms /= 0 .or. mc%transport /= L8_COMM_DEFAULT) &
            bad = bad + 1
        if (pc%grad_dtype /= L8_F32 .or. pc%pad_to /= 0) bad = bad + 1
        if (dc%bucket_elems /= 0 .or. dc%overlap /= 1 .or. dc%strict /= 0 .or. dc%zero1 /= 0) &
            bad = bad + 1
        if (c_associated(cc%device) .or. cc%memory_limit /= 0 .or. c_associated(cc%provider)) &
            bad = bad + 1
        if (abs(ac%lr - 1e-3) > 1e-9 .or. abs(ac%beta2 - 0.999) > 1e-7) bad = bad + 1
        if (lc%mode /= L8_LINEAR_FP8 .or. lc%weight_id /= 0 .or. lc%bias_id /= 1 .or. &
            c_associated(lc%save_hooks) .or. lc%parallel /= L8_PARALLEL_NONE) bad = bad + 1
        if (c_sizeof(id_mold) /= L8_COMM_ID_BYTES) bad = bad + 1
    end function
end module lean8
