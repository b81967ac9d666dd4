! test_fortran.f90 - the Fortran module `lean8` against hand-computed results
! (make test-fortran; L8_DEVICE picks the device, the host in make test):
!   1. the struct mirrors match the C library's sizes;
!   2. column-major reversal: an array x(K, T) is the C tensor (T, K), and a
!      Linear weight of Fortran dims [K, N] computes y(:, t) = W^T x(:, t) + b;
!   3. errors come back as statuses, with the message as a Fortran string;
!   4. a backward and an optimizer step move the weights, checkpoint save and
!      load restore them exactly, a checkpoint of another kind is refused;
!   5. trace tags nest; the GELU inside the layer (forward_act, backward_act)
!      gives the results of l8_gelu / l8_gelu_backward around it bit for bit;
!      the GELU in the GEMM (forward_gelu): z exactly, h within a bf16 step;
!   6. a communicator of one rank joins from an id and reduces in place;
!   7. FP8 operands cast by the caller (l8_fp8_cast_transpose(_dbias) with the
!      layer's recipe metas, l8_linear_forward_fp8 / _backward_fp8) give a
!      twin layer's y, dx and main_grads bit for bit over two steps (the
!      second through _backward_fp8_dx, and the twin through _backward_dx,
!      whose dx8 / dx8t and meta equal the dGELU cast of dx); the roles,
!      dtypes and metas the recipe hands out;
!      the amax flag;
!   8. row gathers and puts at a cursor against a plain loop, out-of-range
!      positions and indices counted in `bad`; the loss of a padded batch at
!      a cursor: its real columns bit for bit l8_softmax_xent's, the padding
!      zero;
!   9. a rate table (and rates pushed for a captured step) gives the weights
!      of set_lr before each step bit for bit; the step cursor counts.
!  10. a resumable checkpoint: an FP8 model (two Linear layers on a recipe,
!      AdamW) trained N steps equals bit for bit (master weights, losses) one
!      trained k steps, saved (master, optimizer states, step, recipe state
!      and metas) through l8_ckpt_*, destroyed, rebuilt and restored from the
!      file, then trained N - k; bad state indices and steps are refused.
!  11. data parallel over two processes (this program starts a second copy of
!      itself as rank 1; TCP transport on host contexts): layers report into
!      the group (grad_ready), the reducer averages main_grad over the ranks
!      in buckets during backward, two micro-batches accumulate first, a
!      parameter that never reports is zeroed; main_grad equals the mean of
!      both ranks' gradients computed by a twin layer, bit for bit, with and
!      without overlap; ZeRO-1 (a padded group, the shard ranges, the norm
!      hook, the gather) gives the master weights of an unsharded AdamW on
!      those gradients bit for bit, and its sharded state saved and loaded
!      per rank (l8_optim_save / _check_load / _load; another rank's shard
!      refused); the recipe's amax hook gives every rank
!      the same scales; errors (a second consumer, a bad id, a twice-marked
!      parameter, grad_ready without a group). Then tensor and sequence
!      parallel on the same two ranks: Megatron's pair (a column-parallel
!      layer that gathers the tokens, a row-parallel one that scatters them)
!      gives this rank's rows and columns of the whole chain's outputs,
!      input gradient and weight gradients, bit for bit (small integers:
!      every sum exact). The gathers and reduce-scatters along either
!      Fortran dimension, a barrier, split and grid, a communicator joined
!      from the launcher's variables (L8_INIT_FILE) and aborted by rank 0
!      (rank 1's next collective fails). Each rank's failures are summed over
!      the communicator, so rank 0 reports rank 1's too.
!  12. SGD (momentum, dampening, L2 weight decay; nesterov) against the
!      formulas of ops/optim.h written out here, bit for bit over four steps;
!      what a step did (l8_optim_step's optional results, l8_optim_read_result):
!      the gradient norm, the clip factor, the count, and a step skipped for
!      a NaN gradient that leaves the weights alone; bad settings refused.
!  13. the recipe's configuration: the history length, the margin, the amax
!      rule (most recent or the window's maximum) and the format give the
!      scales and dtypes the formulas of ops/recipe.h give; role names, the
!      update count; bad settings refused.
!  14. views: sections along either dimension (with a step), a transpose and
!      reshapes of x(K, T) hold the elements Fortran's own sections,
!      transpose and reshape give; a copy into a section writes the parent's
!      storage and nothing else; non-contiguous views refused where a
!      contiguous one is needed; bad dimensions, bounds and shapes refused.
!  15. a checkpoint's raw sections: arrays of f32, f64, i32, i64 and i8 (and
!      scalars) and texts come back exactly; a tensor's section read raw is
!      the array it came from; l8_ckpt_has and l8_ckpt_section_bytes; a name
!      written twice, a read of the wrong length (the array untouched) and
!      a missing section refused.
!  16. unset handles (the C NULL) passed to every procedure of the module:
!      each call that needs the object is refused with L8_ERR_INVALID_ARG,
!      each query gives its documented answer for nothing; no crash.
!  17. l8_fp8_cast_transpose_act / _dact and l8_dbias_dact give the bytes,
!      amax and bias gradient of l8_gelu / l8_gelu_backward followed by the
!      plain casts, bit for bit; l8_fp8_transpose of a cast's out is its
!      out_t; l8_fp8_cast_transpose_many the bytes of one call each;
!      l8_fp8_scale_update the scales of its formula (history, most recent,
!      margin, reset); a layer's counters (l8_linear_get_stats) and
!      features; an optimizer's shard before and after l8_optim_set_shard.
!  18. a step captured as a CUDA graph (a bind(c) module procedure) and
!      launched after its warm-up, once and three in a row, gives what five
!      eager steps give, bit for bit; its counters; bad launches refused.
!  19. memory: a context's limits (a request past one refused and counted),
!      its own trace file (a tag, the OOM, a step mark and the rank read
!      back), the allocator's and pinned pool's counters back to the start
!      after empty_cache; offload by hand (two views of one storage: one copy
!      out, one in, bit for bit) and through Linear layers (three steps equal
!      to the same training without offload, bit for bit).
!  20. events: the GPU time between two timing events, done after a wait;
!      records on a stream that is not one or of another context refused.
!  21. a grad-ready consumer of one's own (a bind(c) module procedure, what
!      a reduction over MPI would be) hears a layer's reports and changes the
!      gradients in place through their address; the ready table names the
!      parameter that never reports; the consumer's error comes back from
!      backward; zero_grad clears the gradients and the table.
! Exit status 0 when every check passes; each failure prints one line.
! The captured step of part 18, a module procedure (a bind(c) callback that
! needs no trampoline): x = gelu(x), through y.
module test_fortran_graph
    use, intrinsic :: iso_c_binding
    use lean8
    implicit none
    type :: graph_step_state
        type(l8_tensor) :: x, y
    end type
contains
    integer(c_int) function graph_step(arg, s) bind(c)
        type(c_ptr), value :: arg, s
        type(graph_step_state), pointer :: st
        graph_step = L8_ERR_INVALID_ARG
        if (.not. c_associated(arg) .or. .not. c_associated(s)) return  ! both always given
        call c_f_pointer(arg, st)
        graph_step = l8_gelu(st%x, st%y)
        if (graph_step == L8_OK) graph_step = l8_tensor_copy(st%x, st%y)
    end function
end module test_fortran_graph

! The grad-ready consumer of part 21, a module procedure (a bind(c) callback):
! what a reduction over MPI of one's own would be.
module test_fortran_ready
    use, intrinsic :: iso_c_binding
    use lean8
    implicit none
    type :: ready_log
        type(l8_params) :: g
        integer :: n = 0
        integer(c_int) :: ids(8) = -1
        logical :: fail = .false., gpu = .false.
    end type
contains
    ! Each report's id in order; its gradient doubled in place, what an
    ! in-place all-reduce over two ranks holding the same gradient gives:
    ! through its address on the host backend, through an array on a GPU.
    integer(c_int) function on_ready(arg, id, ev) bind(c) result(st)
        type(c_ptr), value :: arg, ev
        integer(c_int), value :: id
        type(ready_log), pointer :: log
        type(l8_event) :: e
        type(l8_tensor) :: gt
        type(c_ptr) :: p
        real(c_float), pointer :: v(:)
        real(c_float), allocatable :: a(:)
        call c_f_pointer(arg, log)
        st = L8_ERR_STATE
        if (log%fail) return
        if (c_associated(ev)) then                ! the gradient is written when ev is
            e%p = ev
            st = l8_event_synchronize(e)
            if (st /= L8_OK) return
        end if
        log%n = log%n + 1
        if (log%n <= size(log%ids)) log%ids(log%n) = id
        gt = l8_params_main_grad(log%g, id)
        st = l8_tensor_data(gt, p)
        if (st /= L8_OK) return
        if (log%gpu) then
            allocate(a(l8_tensor_numel(gt)))
            st = l8_tensor_to_array(gt, a)
            if (st /= L8_OK) return
            a = 2 * a
            st = l8_tensor_copy_from_array(gt, a)
        else
            call c_f_pointer(p, v, [l8_tensor_numel(gt)])
            v = 2 * v
        end if
    end function
end module test_fortran_ready

program test_fortran
    use, intrinsic :: iso_c_binding
    use, intrinsic :: iso_fortran_env, only: real64
    use, intrinsic :: ieee_exceptions, only: ieee_set_flag, ieee_all
    use lean8
    use test_fortran_graph
    use test_fortran_ready
    implicit none
    integer, parameter :: K = 32, N = 16, T = 48           ! distinct: a swapped dim shows
    ! -- 10. the FP8 model of the resume test: x(K, T) -> N -> N, GELU between
    integer, parameter :: NR8 = 6                          ! its recipe rows, 3 per layer
    ! -- 11. the data-parallel layer DK -> DN, micro-batches of DT, a spare of DS
    integer, parameter :: DK = 32, DN = 16, DT = 8, DS = 168   ! 896 elements, 1024 padded
    type :: fp8_model
        type(l8_params) :: g
        type(l8_gemm_handle) :: gemm
        type(l8_recipe) :: rc
        type(l8_linear) :: lin(2)
        type(l8_optim) :: opt
        type(l8_tensor) :: xf, xb, labels, loss, hit, pre(2), grad(2)
        integer(c_int) :: wid(2), bid(2)
    end type
    type(l8_ctx) :: ctx, bad
    type(l8_tensor) :: xt, xb, yb, yf, dy, w, wg, b, bg, flat, hb, z, dg, dx1, dx2, hg
    type(l8_params) :: g
    type(l8_gemm_handle) :: h
    type(l8_linear) :: lin
    type(l8_linear_ctx) :: saved, saved2
    real(c_float) :: y2(N, T), dxa(K, T), dxb(K, T), gref(N, T)
    type(l8_optim) :: opt
    type(l8_ckpt_writer) :: cw
    type(l8_ckpt_reader) :: cr
    type(l8_comm) :: comm, nocomm
    type(l8_comm_id) :: id
    real(c_float) :: x(K, T), wf(K, N), bias(N), y(N, T), want(N, T), back(K, T)
    real(c_float), allocatable :: before(:), after(:), restored(:)
    real(c_float) :: r4(2, 3, 4, 5), r4back(2, 3, 4, 5)
    integer(c_int32_t) :: i3(4, 3, 2), i3back(4, 3, 2)
    type(l8_tensor) :: t4, t3
    integer(c_int) :: wid, bid
    integer :: fails, i, j, tt
    character(len=256) :: path
    character(len=1024) :: arg
    fails = 0

    ! -- 11, the second rank: `lean8-fortran-test --ddp-rank1 IDFILE`
    if (command_argument_count() == 2) then
        call get_command_argument(1, arg)
        if (arg == '--ddp-rank1') then
            call get_command_argument(2, arg)
            call ddp_world(1, trim(arg))
            if (fails > 0) error stop 1
            call ieee_set_flag(ieee_all, .false.)    ! STOP prints no floating-point summary
            stop
        end if
    end if

    call check(l8_fortran_check_layouts() == 0, 'struct mirrors are prefixes of the C structs')
    call ok(l8_ctx_create(ctx), 'l8_ctx_create')
    if (.not. c_associated(ctx%p)) then
        print '(a)', 'FAIL  no context (L8_DEVICE picks the device): the other checks need one'
        error stop 1
    end if
    print '(a, a, a, a)', 'lean8 ', l8_version(), ' Fortran test on ', l8_ctx_device_name(ctx)

    ! -- 3. errors: a status, and the message as a Fortran string
    call check(l8_ctx_create(bad, 'nonsense:7') == L8_ERR_INVALID_ARG, 'bad device string refused')
    call check(index(l8_last_error_message(), 'nonsense:7') > 0, &
               'the last error names the device: ' // l8_last_error_message())
    call check(l8_status_name(L8_ERR_OOM) == 'L8_ERR_OOM', 'l8_status_name')

    ! -- 2. reversal: x(K, T) -> the C tensor (T, K) with the same memory
    do tt = 1, T
        do i = 1, K
            x(i, tt) = real(mod(i + 2 * tt, 7) - 3, c_float)      ! small integers: exact in bf16
        end do
    end do
    call ok(l8_tensor_from_array(ctx, x, xt), 'l8_tensor_from_array')
    call check(all(l8_tensor_dims(xt) == [K, T]), 'Fortran dims of a (K, T) array are [K, T]')
    call check(l8_tensor_numel(xt) == K * T, 'numel')
    back = 0
    call ok(l8_tensor_to_array(xt, back), 'l8_tensor_to_array')
    call check(all(back == x), 'round trip of a (K, T) array')
    call check(l8_tensor_to_array(xt, bias) == L8_ERR_INVALID_ARG, 'a copy of the wrong size is refused')
    ! any rank, either element type (assumed-rank procedures)
    r4 = reshape([(real(i, c_float), i = 1, size(r4))], shape(r4))
    i3 = reshape([(int(-i, c_int32_t), i = 1, size(i3))], shape(i3))
    call ok(l8_tensor_from_array(ctx, r4, t4), 'l8_tensor_from_array of rank 4')
    call ok(l8_tensor_from_array(ctx, i3, t3), 'l8_tensor_from_array of i32 rank 3')
    call check(all(l8_tensor_dims(t4) == [2, 3, 4, 5]), 'rank-4 dims')
    call check(all(l8_tensor_dims(t3) == [4, 3, 2]), 'i32 rank-3 dims')
    r4back = 0
    i3back = 0
    call ok(l8_tensor_to_array(t4, r4back), 'rank 4 back')
    call ok(l8_tensor_to_array(t3, i3back), 'i32 rank 3 back')
    call check(all(r4back == r4), 'round trip of rank 4')
    call check(all(i3back == i3), 'round trip of i32 rank 3')
    call ok(l8_tensor_copy_from_array(t4, r4(:, :, :, 5:1:-1)), 'a reversed (non-contiguous) section in')
    call ok(l8_tensor_to_array(t4, r4back), 'rank 4 back again')
    call check(all(r4back == r4(:, :, :, 5:1:-1)), 'the section arrived in order')
    call l8_tensor_destroy(t4)
    call l8_tensor_destroy(t3)

    ! -- a Linear of Fortran dims [K, N] in bf16 with a bias
    call ok(l8_params_create(ctx, g), 'l8_params_create')
    call ok(l8_params_add(g, 'fc.weight', [K, N], wid), 'l8_params_add weight')
    call ok(l8_params_add(g, 'fc.bias', [N], bid), 'l8_params_add bias')
    call ok(l8_params_finalize(g), 'l8_params_finalize')
    w = l8_params_master(g, wid)
    wg = l8_params_main_grad(g, wid)
    b = l8_params_master(g, bid)
    bg = l8_params_main_grad(g, bid)
    call check(all(l8_tensor_dims(w) == [K, N]), 'the weight has Fortran dims [K, N]')
    do j = 1, N
        do i = 1, K
            wf(i, j) = real(mod(3 * i + j, 5) - 2, c_float)
        end do
        bias(j) = real(j - 8, c_float)
    end do
    call ok(l8_tensor_copy_from_array(w, wf), 'weights from an array')
    call ok(l8_tensor_copy_from_array(b, bias), 'bias from an array')
    call ok(l8_gemm_handle_create(ctx, h), 'l8_gemm_handle_create')
    call ok(l8_linear_create(ctx, 'fc', h, w, wg, lin, mode=L8_LINEAR_BF16, bias=b, bias_grad=bg, &
                             weight_id=wid, bias_id=bid), 'l8_linear_create')
    call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], xb), 'l8_tensor_empty x')
    call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], yb), 'l8_tensor_empty y')
    call ok(l8_tensor_empty(ctx, L8_F32, [N, T], yf), 'l8_tensor_empty y f32')
    call ok(l8_convert(xt, xb), 'l8_convert to bf16')
    call ok(l8_tag_push('fortran-test'), 'l8_tag_push')
    call ok(l8_linear_begin_step(lin), 'l8_linear_begin_step')
    call ok(l8_linear_refresh_weights([lin, lin]), 'l8_linear_refresh_weights (a layer twice)')
    call ok(l8_linear_forward(lin, xb, yb, saved), 'l8_linear_forward')
    call ok(l8_tag_pop(), 'l8_tag_pop')
    call check(l8_tag_pop() /= L8_OK, 'popping an empty tag stack is refused')
    call ok(l8_convert(yb, yf), 'l8_convert to f32')
    call ok(l8_tensor_to_array(yf, y), 'y to an array')
    want = matmul(transpose(wf), x)
    do tt = 1, T
        want(:, tt) = want(:, tt) + bias
    end do
    call check(all(y == want), 'y(:, t) = W^T x(:, t) + b exactly (column-major reversal)')

    ! -- 4. backward, an AdamW step, checkpoint save and load
    call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], dy), 'l8_tensor_empty dy')
    call ok(l8_convert(yf, dy), 'dy')
    call ok(l8_linear_backward(lin, saved, dy), 'l8_linear_backward')
    call check(.not. c_associated(saved%p), 'backward consumed what forward saved')

    ! -- 5. the GELU inside the layer, against l8_gelu / l8_gelu_backward
    call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], hb), 'l8_tensor_empty h')
    call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], z), 'l8_tensor_empty z')
    call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], dg), 'l8_tensor_empty dg')
    call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], dx1), 'l8_tensor_empty dx1')
    call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], dx2), 'l8_tensor_empty dx2')
    call ok(l8_gelu(xb, hb), 'l8_gelu')
    call ok(l8_linear_forward(lin, hb, z), 'forward of gelu(x)')
    call ok(l8_convert(z, yf), 'z to f32')
    call ok(l8_tensor_to_array(yf, y), 'z to an array')
    call ok(l8_linear_forward_act(lin, L8_ACT_GELU, xb, z, saved2), 'l8_linear_forward_act')
    call ok(l8_convert(z, yf), 'z to f32 again')
    call ok(l8_tensor_to_array(yf, y2), 'z to an array again')
    call check(all(y2 == y), 'forward_act(GELU, x) = forward(gelu(x)) exactly')
    call check(any(y2 /= want), 'the GELU changed y')
    call check(l8_linear_forward_act(lin, 7_c_int, xb, z) == L8_ERR_INVALID_ARG, &
               'an unknown activation is refused')
    call ok(l8_linear_backward_act(lin, L8_ACT_GELU, saved2, dy, z, dx1), 'l8_linear_backward_act')
    call check(.not. c_associated(saved2%p), 'backward_act consumed what forward saved')
    call ok(l8_linear_forward_act(lin, L8_ACT_GELU, xb, z, saved2), 'forward_act again')
    call ok(l8_gelu_backward(z, dy, dg), 'l8_gelu_backward')
    call ok(l8_linear_backward(lin, saved2, dg, dx2), 'backward of dy * gelu''(z)')
    call ok(l8_convert(dx1, xt), 'dx1 to f32')
    call ok(l8_tensor_to_array(xt, dxa), 'dx1 to an array')
    call ok(l8_convert(dx2, xt), 'dx2 to f32')
    call ok(l8_tensor_to_array(xt, dxb), 'dx2 to an array')
    call check(all(dxa == dxb), 'backward_act(GELU) = gelu_backward then backward, exactly')
    call check(any(dxa /= 0), 'dx is not all zero')
    ! the GELU in the GEMM's epilogue: z = y exactly, h = gelu(y) within a bf16 step
    call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], hg), 'l8_tensor_empty h (forward_gelu)')
    call ok(l8_linear_forward_gelu(lin, L8_ACT_NONE, z, hg, x=xb), 'l8_linear_forward_gelu')
    call ok(l8_convert(z, yf), 'forward_gelu z to f32')
    call ok(l8_tensor_to_array(yf, y2), 'forward_gelu z to an array')
    call check(all(y2 == want), 'forward_gelu: z = W^T x + b exactly')
    call ok(l8_convert(hg, yf), 'forward_gelu h to f32')
    call ok(l8_tensor_to_array(yf, y2), 'forward_gelu h to an array')
    gref = 0.5 * want * (1 + tanh(sqrt(2 / acos(-1.0)) * (want + 0.044715 * want**3)))
    call check(all(abs(y2 - gref) <= abs(gref) / 128 + 1.0 / 1024), &
               'forward_gelu: h = gelu(z) within a bf16 step')
    call check(any(y2 /= want), 'forward_gelu: the GELU changed h')
    call check(l8_linear_forward_gelu(lin, L8_ACT_NONE, z, hg) == L8_ERR_INVALID_ARG, &
               'forward_gelu without an input is refused')
    call check(l8_linear_forward_gelu(lin, L8_ACT_NONE, z, hg, x=xb, x8=xb) == L8_ERR_INVALID_ARG, &
               'forward_gelu with x and x8 both is refused')
    call l8_tensor_destroy(hg)
    call ok(l8_tensor_copy_from_array(xt, x), 'x back into xt')
    call ok(l8_optim_create_adamw(g, opt, lr=0.01_c_float), 'l8_optim_create_adamw')
    flat = l8_params_master_flat(g)
    allocate(before(l8_tensor_numel(flat)), after(l8_tensor_numel(flat)), &
             restored(l8_tensor_numel(flat)))
    call ok(l8_tensor_to_array(flat, before), 'master before')
    call ok(l8_optim_step(opt), 'l8_optim_step')
    call ok(l8_tensor_to_array(flat, after), 'master after')
    call check(any(after /= before), 'the optimizer step moved the weights')

    path = tmp_file('lean8-fortran-test.ckpt')
    call ok(l8_ckpt_writer_open(trim(path), 'fortran-test', 1, cw), 'l8_ckpt_writer_open')
    call ok(l8_ckpt_write_tensor(cw, 'master', flat), 'l8_ckpt_write_tensor')
    call ok(l8_ckpt_writer_commit(cw), 'l8_ckpt_writer_commit')
    call ok(l8_tensor_copy_from_array(flat, before), 'overwrite the master weights')
    call ok(l8_ckpt_open(trim(path), cr), 'l8_ckpt_open')
    call check(l8_ckpt_expect(cr, 'another-model', 1) == L8_ERR_INVALID_ARG, &
               'a checkpoint of another kind is refused')
    call ok(l8_ckpt_expect(cr, 'fortran-test', 1), 'l8_ckpt_expect')
    call ok(l8_ckpt_read_tensor(cr, 'master', flat), 'l8_ckpt_read_tensor')
    call check(l8_ckpt_read_tensor(cr, 'missing', flat) == L8_ERR_INVALID_ARG, &
               'a missing section is refused')
    call l8_ckpt_close(cr)
    call ok(l8_tensor_to_array(flat, restored), 'master restored')
    call check(all(restored == after), 'checkpoint load restores the saved weights exactly')
    open(newunit=i, file=trim(path), status='old')
    close(i, status='delete')

    ! -- 6. a communicator of one rank, on the context's default transport
    !    (TCP on the host, NCCL on a GPU)
    call ok(l8_comm_id_create(ctx, id), 'l8_comm_id_create')
    call check(any(id%bytes /= 0), 'the id has content')
    call check(l8_comm_init_rank(ctx, id, 1, 1, nocomm) == L8_ERR_INVALID_ARG, &
               'rank 1 of a world of 1 is refused')
    call ok(l8_comm_init_rank(ctx, id, 0, 1, comm), 'l8_comm_init_rank')
    call check(l8_comm_rank(comm) == 0, 'rank 0')
    call check(l8_comm_size(comm) == 1, 'a world of 1')
    call ok(l8_comm_all_reduce(comm, xt, xt, L8_REDUCE_SUM), 'l8_comm_all_reduce in place')
    call ok(l8_comm_broadcast(comm, xt, 0), 'l8_comm_broadcast')
    back = 0
    call ok(l8_tensor_to_array(xt, back), 'x after the collectives')
    call check(all(back == x), 'a sum over one rank and a broadcast leave x as it was')
    call l8_comm_destroy(comm)

    call fp8_precast()
    call rows_at()
    call xent_at()
    call lr_table()
    call resume()
    call sgd_result()
    call recipe_cfg()
    call views()
    call ckpt_sections()
    call fp8_more()
    call graph_steps()
    call memory()
    call offload_linear()
    call events()
    call ready_table()
    call unset_handles()
    call ddp_world(0, '')

    call ok(l8_ctx_synchronize(ctx), 'l8_ctx_synchronize')
    call l8_optim_destroy(opt)
    call l8_linear_destroy(lin)
    call l8_gemm_handle_destroy(h)
    call l8_tensor_destroy(xt)
    call l8_tensor_destroy(xb)
    call l8_tensor_destroy(yb)
    call l8_tensor_destroy(yf)
    call l8_tensor_destroy(dy)
    call l8_tensor_destroy(hb)
    call l8_tensor_destroy(z)
    call l8_tensor_destroy(dg)
    call l8_tensor_destroy(dx1)
    call l8_tensor_destroy(dx2)
    call l8_params_destroy(g)
    call l8_ctx_destroy(ctx)
    call check(.not. c_associated(ctx%p), 'destroy nulls the handle')
    call l8_ctx_destroy(ctx)                                   ! a null handle: no-op
    deallocate(before, after, restored)

    if (fails > 0) then
        print '(i0, a)', fails, ' Fortran check(s) FAILED'
        error stop 1
    end if
    print '(a)', 'Fortran module: every check passed'

contains

    ! TMPDIR (else /tmp) / name.
    function tmp_file(name) result(p)
        character(len=*), intent(in) :: name
        character(len=:), allocatable :: p
        character(len=1024) :: dir
        call get_environment_variable('TMPDIR', dir)
        if (len_trim(dir) == 0) dir = '/tmp'
        p = trim(dir) // '/' // name
    end function

    ! Exact equality of f32 arrays as bits (NaNs included).
    logical function same_bits(a, b)
        real(c_float), intent(in) :: a(:, :), b(:, :)
        same_bits = all(transfer(a, [0_c_int32_t]) == transfer(b, [0_c_int32_t]))
    end function

    ! A bf16 or f32 tensor of Fortran dims `shape(a)` into a (through f32);
    ! t on context `on` (default: the test's ctx).
    subroutine get_f32(t, a, what, on)
        type(l8_tensor), intent(in) :: t
        real(c_float), intent(inout) :: a(:, :)
        character(len=*), intent(in) :: what
        type(l8_ctx), intent(in), optional :: on
        type(l8_tensor) :: f
        if (present(on)) then
            call ok(l8_tensor_empty(on, L8_F32, shape(a), f), what // ': f32 tensor')
        else
            call ok(l8_tensor_empty(ctx, L8_F32, shape(a), f), what // ': f32 tensor')
        end if
        call ok(l8_convert(t, f), what // ': to f32')
        call ok(l8_tensor_to_array(f, a), what // ': to an array')
        call l8_tensor_destroy(f)
    end subroutine

    ! An f32 array into a bf16 (or f32) tensor t of its dims.
    subroutine put_f32(t, a, what)
        type(l8_tensor), intent(in) :: t
        real(c_float), intent(in) :: a(:, :)
        character(len=*), intent(in) :: what
        type(l8_tensor) :: f
        call ok(l8_tensor_from_array(ctx, a, f), what // ': from an array')
        call ok(l8_convert(f, t), what // ': to the tensor''s dtype')
        call l8_tensor_destroy(f)
    end subroutine

    ! -- 7. Two FP8 layers a and b with the same weights on one recipe, two
    !    steps of one micro-batch: a casts its X and dY itself, b is handed
    !    them cast by l8_fp8_cast_transpose(_dbias) with its own metas
    !    (l8_recipe_meta of l8_linear_role_index); on step 2 b's dgrad also
    !    casts dx for a layer below (l8_linear_backward_fp8_dx), and a's through
    !    l8_linear_backward_dx. A wrong role constant,
    !    meta or dtype is refused by forward_fp8/backward_fp8; a wrong cast
    !    (flags, shapes) changes the bytes; either fails a check below.
    subroutine fp8_precast()
        type(l8_params) :: g8
        type(l8_recipe) :: rc
        type(l8_linear) :: la, lb
        type(l8_linear_ctx) :: ca, cb
        type(l8_fp8_meta) :: mx, mg, mine
        type(l8_tensor) :: xbf, ya, yb, dyb, dxa, dxb, x8, x8t, dy8, dy8t, db, dbt, q8, xf
        integer(c_int) :: ids(4)
        real(c_float) :: xv(K, T), dyv(N, T), ga(N, T), gb(N, T), dxva(K, T), dxvb(K, T)
        real(c_float) :: gwa(K, N), gwb(K, N), gba(N, 1), gbb(N, 1), dbv(K), sa, sb, si, amax
        integer(c_int8_t) :: q(K, T), qt(T, K), q2(K, T), qt2(T, K)
        type(l8_tensor) :: q8t, dbx, zb, dz8(3), dz8t(3)
        type(l8_fp8_meta) :: mz(3)
        integer :: step
        character(len=2) :: sn

        call ok(l8_params_create(ctx, g8), 'fp8: l8_params_create')
        call ok(l8_params_add(g8, 'a.weight', [K, N], ids(1)), 'fp8: add a.weight')
        call ok(l8_params_add(g8, 'a.bias', [N], ids(2)), 'fp8: add a.bias')
        call ok(l8_params_add(g8, 'b.weight', [K, N], ids(3)), 'fp8: add b.weight')
        call ok(l8_params_add(g8, 'b.bias', [N], ids(4)), 'fp8: add b.bias')
        call ok(l8_params_finalize(g8), 'fp8: l8_params_finalize')
        call ok(l8_tensor_copy_from_array(l8_params_master(g8, ids(1)), wf), 'fp8: a weights')
        call ok(l8_tensor_copy_from_array(l8_params_master(g8, ids(2)), bias), 'fp8: a bias')
        call ok(l8_tensor_copy_from_array(l8_params_master(g8, ids(3)), wf), 'fp8: b weights')
        call ok(l8_tensor_copy_from_array(l8_params_master(g8, ids(4)), bias), 'fp8: b bias')
        call ok(l8_recipe_create(ctx, rc), 'fp8: l8_recipe_create')
        call ok(l8_linear_create(ctx, 'a', h, l8_params_master(g8, ids(1)), &
                                 l8_params_main_grad(g8, ids(1)), la, recipe=rc, &
                                 bias=l8_params_master(g8, ids(2)), &
                                 bias_grad=l8_params_main_grad(g8, ids(2)), &
                                 weight_id=ids(1), bias_id=ids(2)), 'fp8: create layer a')
        call ok(l8_linear_create(ctx, 'b', h, l8_params_master(g8, ids(3)), &
                                 l8_params_main_grad(g8, ids(3)), lb, recipe=rc, &
                                 bias=l8_params_master(g8, ids(4)), &
                                 bias_grad=l8_params_main_grad(g8, ids(4)), &
                                 weight_id=ids(3), bias_id=ids(4)), 'fp8: create layer b')

        ! roles: three rows per layer in registration order, dtypes of HYBRID
        call check(l8_recipe_count(rc) == 6, 'fp8: two layers registered six roles')
        call check(all([l8_linear_role_index(la, L8_ROLE_INPUT), &
                        l8_linear_role_index(la, L8_ROLE_WEIGHT), &
                        l8_linear_role_index(la, L8_ROLE_GRAD_OUTPUT), &
                        l8_linear_role_index(lb, L8_ROLE_INPUT), &
                        l8_linear_role_index(lb, L8_ROLE_GRAD_OUTPUT)] == [0, 1, 2, 3, 5]), &
                   'fp8: role rows (three per layer, in registration order)')
        call check(l8_linear_role_index(lin, L8_ROLE_INPUT) == -1, 'fp8: a bf16 layer has no roles')
        call check(all([l8_recipe_dtype(rc, L8_ROLE_INPUT), l8_recipe_dtype(rc, L8_ROLE_WEIGHT), &
                        l8_recipe_dtype(rc, L8_ROLE_GRAD_OUTPUT)] == [L8_E4M3, L8_E4M3, L8_E5M2]), &
                   'fp8: HYBRID dtypes (E4M3 input and weight, E5M2 grad_output)')
        mx = l8_recipe_meta(rc, l8_linear_role_index(lb, L8_ROLE_INPUT))
        mg = l8_recipe_meta(rc, l8_linear_role_index(lb, L8_ROLE_GRAD_OUTPUT))
        call check(c_associated(mx%p) .and. c_associated(mg%p), 'fp8: l8_recipe_meta')
        mine = l8_recipe_meta(rc, 6)
        call check(.not. c_associated(mine%p), 'fp8: no meta past the last role')

        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], xbf), 'fp8: x')
        call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], ya), 'fp8: ya')
        call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], yb), 'fp8: yb')
        call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], dyb), 'fp8: dy')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], dxa), 'fp8: dxa')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], dxb), 'fp8: dxb')
        call ok(l8_tensor_empty(ctx, l8_recipe_dtype(rc, L8_ROLE_INPUT), [K, T], x8), 'fp8: x8')
        call ok(l8_tensor_empty(ctx, l8_recipe_dtype(rc, L8_ROLE_INPUT), [T, K], x8t), 'fp8: x8t')
        call ok(l8_tensor_empty(ctx, l8_recipe_dtype(rc, L8_ROLE_GRAD_OUTPUT), [N, T], dy8), 'fp8: dy8')
        call ok(l8_tensor_empty(ctx, l8_recipe_dtype(rc, L8_ROLE_GRAD_OUTPUT), [T, N], dy8t), &
                'fp8: dy8t')
        call ok(l8_tensor_empty(ctx, L8_F32, [N], db), 'fp8: db')
        ! a layer below b: its output z (the GELU's input) and its dY8 / dY8t, on
        ! three metas of one's own (backward_fp8_dx, the plain cast, backward_dx)
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], zb), 'fp8: z')
        call put_f32(zb, reshape([(real(mod(7 * i, 13) - 6, c_float) / 4, i = 1, K * T)], [K, T]), &
                     'fp8 z')
        do i = 1, 3
            call ok(l8_fp8_meta_create(ctx, mz(i)), 'fp8: a meta for dz8')
            call ok(l8_fp8_meta_set(mz(i), 2.0_c_float, 1.0_c_float, 0.0_c_float), 'fp8: its scale')
            call ok(l8_tensor_empty(ctx, L8_E5M2, [K, T], dz8(i)), 'fp8: dz8')
            call ok(l8_tensor_empty(ctx, L8_E5M2, [T, K], dz8t(i)), 'fp8: dz8t')
            call ok(l8_tensor_set_fp8_meta(dz8(i), mz(i)), 'fp8: meta of dz8')
            call ok(l8_tensor_set_fp8_meta(dz8t(i), mz(i)), 'fp8: meta of dz8t')
        end do
        call ok(l8_tensor_set_fp8_meta(x8, mx), 'fp8: meta of x8')
        call ok(l8_tensor_set_fp8_meta(x8t, mx), 'fp8: meta of x8t')
        call ok(l8_tensor_set_fp8_meta(dy8, mg), 'fp8: meta of dy8')
        call ok(l8_tensor_set_fp8_meta(dy8t, mg), 'fp8: meta of dy8t')
        mine = l8_tensor_fp8_meta(x8)
        call check(c_associated(mine%p, mx%p), 'fp8: l8_tensor_fp8_meta')
        call check(l8_tensor_dtype(dy8) == L8_E5M2, 'fp8: l8_tensor_dtype')
        call check(l8_tensor_dtype(l8_tensor()) == -1, 'fp8: l8_tensor_dtype of a null tensor')
        call check(l8_tensor_set_fp8_meta(xbf, mx) == L8_ERR_INVALID_ARG, &
                   'fp8: a meta on a bf16 tensor is refused')

        do step = 1, 2
            write(sn, '(i0)') step
            call ok(l8_linear_begin_step(la), 'fp8: begin_step a')
            call ok(l8_linear_begin_step(lb), 'fp8: begin_step b')
            do j = 1, T
                do i = 1, K
                    xv(i, j) = real(mod(i * step + 2 * j, 7) - 3, c_float) / real(step, c_float)
                end do
                do i = 1, N
                    dyv(i, j) = real(mod(3 * i + j * (step + 1), 11) - 5, c_float) / 8
                end do
            end do
            call put_f32(xbf, xv, 'fp8 x')
            call put_f32(dyb, dyv, 'fp8 dy')
            call ok(l8_linear_forward(la, xbf, ya, ca), 'fp8: forward a')
            call ok(l8_fp8_cast_transpose(xbf, x8, x8t, L8_CAST_ACCUMULATE_AMAX), &
                    'fp8: l8_fp8_cast_transpose of x')
            call ok(l8_linear_forward_fp8(lb, x8, x8t, yb, cb), 'fp8: l8_linear_forward_fp8')
            if (step == 1) then        ! scale 1: small integers are exact in E4M3
                call ok(l8_tensor_to_array(x8, q), 'fp8: x8 bytes')
                call ok(l8_tensor_to_array(x8t, qt), 'fp8: x8t bytes')
                call check(all(qt == transpose(q)), 'fp8: x8t is x8 transposed (Fortran dims)')
                call check(any(q /= 0), 'fp8: x8 has content')
                call ok(l8_tensor_from_array(ctx, q, q8), 'fp8: bytes into a new tensor')
                call check(l8_tensor_dtype(q8) == L8_U8, 'fp8: an integer(c_int8_t) array makes a u8 tensor')
                call check(all(l8_tensor_dims(q8) == [K, T]), 'fp8: dims of the u8 tensor')
                call ok(l8_tensor_copy_from_array(q8, -q), 'fp8: bytes into a tensor')
                call ok(l8_tensor_to_array(q8, q), 'fp8: bytes back')
                call check(all(q == -transpose(qt)), 'fp8: byte copies in and out')
                call l8_tensor_destroy(q8)
                call ok(l8_tensor_empty(ctx, L8_F32, [K, T], xf), 'fp8: xf')
                call ok(l8_fp8_dequantize(x8, xf), 'fp8: l8_fp8_dequantize')
                call ok(l8_tensor_to_array(xf, dxva), 'fp8: dequantized x')
                call check(same_bits(dxva, xv), 'fp8: dequantize(cast(x)) = x at scale 1')
                call l8_tensor_destroy(xf)
            end if
            call get_f32(ya, ga, 'fp8 ya')
            call get_f32(yb, gb, 'fp8 yb')
            call check(same_bits(ga, gb), 'fp8 step ' // trim(sn) // ': y of forward_fp8 = y of forward')
            call check(any(ga /= 0), 'fp8: y has content')

            if (step == 1) then
                call ok(l8_linear_backward(la, ca, dyb, dxa), 'fp8: backward a')
            else                  ! a's dgrad casting dx for a layer below too (dY in bf16)
                call ok(l8_linear_backward_dx(la, ca, dyb, dxa, zb, dz8(3), dz8t(3)), &
                        'fp8: l8_linear_backward_dx')
            end if
            ! db straight into b's bias main_grad on step 1, a tensor of its own on step 2
            dbt = db
            if (step == 1) dbt = l8_params_main_grad(g8, ids(4))
            call ok(l8_fp8_cast_transpose_dbias(dyb, dy8, dy8t, dbt, L8_CAST_ACCUMULATE_AMAX), &
                    'fp8: l8_fp8_cast_transpose_dbias of dy')
            if (step == 2) then
                call check(l8_linear_backward_fp8(lb, cb, dy8, dy8t, dx=dxb) == L8_ERR_INVALID_ARG, &
                           'fp8: backward_fp8 without db on a layer with a bias is refused')
                call check(l8_linear_backward_fp8(lb, cb, dy8t, dy8, db, dxb) == L8_ERR_INVALID_ARG, &
                           'fp8: backward_fp8 with dy8 and dy8t swapped is refused')
                call check(l8_linear_backward_fp8(lb, cb, x8, dy8t, db, dxb) == L8_ERR_INVALID_ARG, &
                           'fp8: backward_fp8 of the input''s dtype and meta is refused')
                call check(c_associated(cb%p), 'fp8: a refused backward leaves saved valid')
            end if
            if (step == 1) then
                call ok(l8_linear_backward_fp8(lb, cb, dy8, dy8t, dbt, dxb), &
                        'fp8: l8_linear_backward_fp8')
            else                  ! the dgrad casting dx for a layer below, through the GELU
                call ok(l8_linear_backward_fp8_dx(lb, cb, dy8, dy8t, dxb, zb, dz8(1), dz8t(1), &
                                                  dbt), 'fp8: l8_linear_backward_fp8_dx')
                call ok(l8_fp8_cast_transpose_dact(L8_ACT_GELU, dxa, zb, dz8(2), dz8t(2), &
                                                   flags=L8_CAST_ACCUMULATE_AMAX), &
                        'fp8: the same cast of dxa')
                call ok(l8_tensor_to_array(dz8(1), q), 'fp8: dz8 bytes')
                call ok(l8_tensor_to_array(dz8(2), q2), 'fp8: the cast''s bytes')
                call check(all(q == q2) .and. any(q /= 0), &
                           'fp8: backward_fp8_dx''s dx8 = the cast''s')
                call ok(l8_tensor_to_array(dz8t(1), qt), 'fp8: dz8t bytes')
                call ok(l8_tensor_to_array(dz8t(2), qt2), 'fp8: the cast''s transposed bytes')
                call check(all(qt == qt2) .and. all(qt == transpose(q)), &
                           'fp8: backward_fp8_dx''s dx8t = the cast''s, dx8 transposed')
                call ok(l8_fp8_meta_get(mz(1), sa, si, amax), 'fp8: dx8''s meta')
                call ok(l8_fp8_meta_get(mz(2), sb, dbv(1), dbv(2)), 'fp8: the cast''s meta')
                call check(sa == sb .and. si == dbv(1) .and. amax == dbv(2) .and. amax > 0, &
                           'fp8: backward_fp8_dx''s meta = the cast''s')
                call ok(l8_tensor_to_array(dz8(3), q), 'fp8: backward_dx''s dz8 bytes')
                call ok(l8_tensor_to_array(dz8t(3), qt), 'fp8: backward_dx''s dz8t bytes')
                call check(all(q == q2) .and. all(qt == qt2), &
                           'fp8: backward_dx''s dx8 and dx8t = the cast''s')
                call ok(l8_fp8_meta_get(mz(3), sa, si, amax), 'fp8: backward_dx''s meta')
                call check(sa == sb .and. si == dbv(1) .and. amax == dbv(2), &
                           'fp8: backward_dx''s meta = the cast''s')
            end if
            call check(.not. c_associated(cb%p), 'fp8: backward_fp8 consumed saved')
            call get_f32(dxa, dxva, 'fp8 dxa')
            call get_f32(dxb, dxvb, 'fp8 dxb')
            call check(same_bits(dxva, dxvb), 'fp8 step ' // trim(sn) // ': dx bit for bit')
            call check(any(dxva /= 0), 'fp8: dx has content')
            call ok(l8_tensor_to_array(l8_params_main_grad(g8, ids(1)), gwa), 'fp8: gW a')
            call ok(l8_tensor_to_array(l8_params_main_grad(g8, ids(3)), gwb), 'fp8: gW b')
            call ok(l8_tensor_to_array(l8_params_main_grad(g8, ids(2)), gba), 'fp8: gb a')
            call ok(l8_tensor_to_array(l8_params_main_grad(g8, ids(4)), gbb), 'fp8: gb b')
            call check(same_bits(gwa, gwb), 'fp8 step ' // trim(sn) // ': weight main_grad bit for bit')
            call check(same_bits(gba, gbb), 'fp8 step ' // trim(sn) // ': bias main_grad bit for bit')
            call check(any(gba /= 0), 'fp8: the bias gradient has content')
            call ok(l8_recipe_update(rc), 'fp8: l8_recipe_update')
            ! the scales both input roles got from their amaxes: the same, and moved
            call ok(l8_fp8_meta_get(l8_recipe_meta(rc, l8_linear_role_index(la, L8_ROLE_INPUT)), &
                                    scale=sa), 'fp8: l8_fp8_meta_get a')
            call ok(l8_fp8_meta_get(mx, scale=sb), 'fp8: l8_fp8_meta_get b')
            call check(sa == sb .and. sa /= 1, 'fp8 step ' // trim(sn) // ': the input scales agree and moved')
        end do

        ! errors: bf16 layer, swapped operands, wrong dtype, null handles
        call check(l8_linear_forward_fp8(lin, x8, x8t, yb, cb) == L8_ERR_INVALID_ARG, &
                   'fp8: forward_fp8 on a bf16 layer is refused')
        call check(l8_linear_forward_fp8(lb, x8t, x8, yb, cb) == L8_ERR_INVALID_ARG, &
                   'fp8: forward_fp8 with x8 and x8t swapped is refused')
        call check(l8_linear_forward_fp8(lb, x8, y=yb, saved=cb) == L8_ERR_INVALID_ARG, &
                   'fp8: forward_fp8 for training without x8t is refused')
        call check(.not. c_associated(cb%p), 'fp8: a refused forward saves nothing')
        call check(l8_fp8_cast_transpose(xbf, dxa, x8t) == L8_ERR_INVALID_ARG, &
                   'fp8: a cast into a bf16 tensor is refused')
        call check(l8_fp8_cast_transpose(l8_tensor(), x8, x8t) == L8_ERR_INVALID_ARG, &
                   'fp8: a cast of a null tensor is refused')
        call check(l8_linear_forward_fp8(l8_linear(), x8, x8t, yb) == L8_ERR_INVALID_ARG, &
                   'fp8: forward_fp8 of a null layer is refused')
        ! inference: x8 without its transpose (out absent: only x8t... here only x8)
        call ok(l8_fp8_cast_transpose(xbf, x8, x8t, L8_CAST_ACCUMULATE_AMAX), 'fp8: cast again')
        call ok(l8_linear_forward(la, xbf, ya), 'fp8: inference a')
        call ok(l8_linear_forward_fp8(lb, x8, y=yb), 'fp8: inference forward_fp8 without x8t')
        call get_f32(ya, ga, 'fp8 ya')
        call get_f32(yb, gb, 'fp8 yb')
        call check(same_bits(ga, gb), 'fp8: inference y bit for bit')

        ! the amax flag and scale_inv on a meta of one's own
        call ok(l8_fp8_meta_create(ctx, mine), 'fp8: l8_fp8_meta_create')
        call ok(l8_tensor_empty(ctx, L8_E4M3, [K, T], q8), 'fp8: q8')
        call ok(l8_tensor_set_fp8_meta(q8, mine), 'fp8: meta of q8')
        call ok(l8_tensor_empty(ctx, L8_E4M3, [T, K], q8t), 'fp8: q8t')
        call ok(l8_tensor_set_fp8_meta(q8t, mine), 'fp8: meta of q8t')
        call ok(l8_tensor_empty(ctx, L8_F32, [K], dbx), 'fp8: dbias of x')
        call ok(l8_fp8_cast(xbf, q8), 'fp8: l8_fp8_cast')           ! x of step 2: max |x| = 1.5
        call put_f32(xbf, xv / 2, 'fp8 x/2')
        ! each quantizing op with the flag keeps the larger amax of x
        call ok(l8_fp8_cast(xbf, q8, L8_CAST_ACCUMULATE_AMAX), 'fp8: l8_fp8_cast accumulating')
        call ok(l8_fp8_meta_get(mine, amax=amax), 'fp8: amax after cast')
        call check(amax == maxval(abs(xv)), 'fp8: l8_fp8_cast with L8_CAST_ACCUMULATE_AMAX accumulates')
        call ok(l8_fp8_cast_transpose(xbf, q8, q8t, L8_CAST_ACCUMULATE_AMAX), 'fp8: cast_transpose acc.')
        call ok(l8_fp8_meta_get(mine, amax=amax), 'fp8: amax after cast_transpose')
        call check(amax == maxval(abs(xv)), 'fp8: l8_fp8_cast_transpose passes the flag')
        call ok(l8_fp8_cast_transpose_dbias(xbf, q8, q8t, dbx, L8_CAST_ACCUMULATE_AMAX), &
                'fp8: cast_transpose_dbias accumulating')
        call ok(l8_fp8_meta_get(mine, amax=amax), 'fp8: amax after cast_transpose_dbias')
        call check(amax == maxval(abs(xv)), 'fp8: l8_fp8_cast_transpose_dbias passes the flag')
        call ok(l8_tensor_to_array(dbx, dbv), 'fp8: dbias of x to an array')
        call check(all(dbv == sum(xv / 2, dim=2)), &
                   'fp8: dbias of x(K, T) is sum(x, dim=2) (the C column sums)')
        call ok(l8_fp8_meta_set(mine, 4.0_c_float, 1.0_c_float, 0.0_c_float), 'fp8: l8_fp8_meta_set')
        call ok(l8_fp8_cast_transpose(xbf, out_t=x8t), 'fp8: cast_transpose without out')
        call ok(l8_fp8_cast(xbf, q8), 'fp8: l8_fp8_cast overwriting')
        call ok(l8_fp8_meta_get(mine, sa, si, amax), 'fp8: the meta after a plain cast')
        call check(sa == 4 .and. si == 0.25 .and. amax == maxval(abs(xv)) / 2, &
                   'fp8: without the flag amax is overwritten; scale_inv = 1/scale')
        call check(l8_fp8_cast(xbf, q8, 4_c_int) == L8_ERR_INVALID_ARG, 'fp8: an unknown flag is refused')
        call l8_tensor_destroy(q8)
        call l8_tensor_destroy(q8t)
        call l8_tensor_destroy(dbx)
        call l8_fp8_meta_release(mine)
        call check(.not. c_associated(mine%p), 'fp8: release nulls the handle')

        do i = 1, 3
            call l8_tensor_destroy(dz8(i))
            call l8_tensor_destroy(dz8t(i))
            call l8_fp8_meta_release(mz(i))
        end do
        call l8_tensor_destroy(zb)
        call l8_linear_destroy(la)
        call l8_linear_destroy(lb)
        call l8_recipe_destroy(rc)
        call l8_tensor_destroy(xbf)
        call l8_tensor_destroy(ya)
        call l8_tensor_destroy(yb)
        call l8_tensor_destroy(dyb)
        call l8_tensor_destroy(dxa)
        call l8_tensor_destroy(dxb)
        call l8_tensor_destroy(x8)
        call l8_tensor_destroy(x8t)
        call l8_tensor_destroy(dy8)
        call l8_tensor_destroy(dy8t)
        call l8_tensor_destroy(db)
        call l8_params_destroy(g8)
    end subroutine

    ! -- 8. Rows moved at a cursor (gather_rows_at, put_rows_at) as a loop of
    !    R-row batches over an order of L entries does them, against a plain
    !    loop: cursor values past the end and below 0, a bad index in the order.
    subroutine rows_at()
        integer, parameter :: C = 3, NR = 10, L = 7, R = 3, M = 8
        real(c_float) :: src(C, NR), res(C, R), got(C, R), want(C, R), out(C, M), wout(C, M)
        integer(c_int32_t) :: idx(L), nbad(1), gidx(R)
        type(l8_tensor) :: ts, ti, tg, tc, tb, td, tr, tout
        integer :: kk, ir, pos, expect, total
        integer, parameter :: ks(5) = [0, 1, 2, 3, -1]
        character(len=3) :: kn

        src = reshape([(real(i, c_float), i = 1, C * NR)], shape(src))
        idx = [4, 0, 9, NR, 2, 2, 7]                 ! 0-based rows; NR is out of range
        gidx = [9, 0, 5]
        call ok(l8_tensor_from_array(ctx, src, ts), 'rows: src')
        call ok(l8_tensor_from_array(ctx, idx, ti), 'rows: idx')
        call ok(l8_tensor_from_array(ctx, gidx, tg), 'rows: plain idx')
        call ok(l8_tensor_from_array(ctx, [0_c_int32_t], tc), 'rows: cursor')
        call ok(l8_tensor_from_array(ctx, [0_c_int32_t], tb), 'rows: bad')
        call ok(l8_tensor_empty(ctx, L8_F32, [C, R], td), 'rows: dst')
        call ok(l8_tensor_empty(ctx, L8_F32, [C, R], tr), 'rows: results')
        wout = -1
        call ok(l8_tensor_from_array(ctx, wout, tout), 'rows: epoch results')

        call ok(l8_gather_rows(ts, tg, td), 'rows: l8_gather_rows')
        call ok(l8_tensor_to_array(td, got), 'rows: gathered')
        do ir = 1, R
            want(:, ir) = src(:, gidx(ir) + 1)
        end do
        call check(all(got == want), 'rows: l8_gather_rows picks the Fortran columns idx + 1')

        total = 0
        do kk = 1, size(ks)
            write(kn, '(i0)') ks(kk)
            res = real(100 * kk, c_float) + reshape([(real(i, c_float), i = 1, C * R)], shape(res))
            call ok(l8_tensor_copy_from_array(tr, res), 'rows: results in')
            call ok(l8_tensor_copy_from_array(tc, [int(ks(kk), c_int32_t)]), 'rows: cursor in')
            call ok(l8_tensor_copy_from_array(tb, [0_c_int32_t]), 'rows: bad zeroed')
            call ok(l8_gather_rows_at(ts, ti, tc, R, td, tb), 'rows: l8_gather_rows_at')
            call ok(l8_put_rows_at(tout, tc, R, tr, tb), 'rows: l8_put_rows_at')
            expect = 0
            do ir = 1, R
                pos = ks(kk) * R + ir
                want(:, ir) = 0
                if (pos >= 1 .and. pos <= L) then
                    if (idx(pos) >= 0 .and. idx(pos) < NR) want(:, ir) = src(:, idx(pos) + 1)
                end if
                if (all(want(:, ir) == 0)) expect = expect + 1
                if (pos >= 1 .and. pos <= M) then
                    wout(:, pos) = res(:, ir)
                else
                    expect = expect + 1
                end if
            end do
            call ok(l8_tensor_to_array(td, got), 'rows: gathered at the cursor')
            call ok(l8_tensor_to_array(tout, out), 'rows: put at the cursor')
            call ok(l8_tensor_to_array(tb, nbad), 'rows: bad count')
            call check(all(got == want), 'rows: gather_rows_at at cursor ' // trim(kn) // ' = the loop')
            call check(all(out == wout), 'rows: put_rows_at at cursor ' // trim(kn) // ' = the loop')
            call check(nbad(1) == expect, 'rows: bad counted at cursor ' // trim(kn))
            total = total + expect
        end do
        call check(total > 0, 'rows: out-of-range rows were exercised')
        call ok(l8_gather_rows_at(ts, ti, tc, 0, td), 'rows: stride 0 without bad')
        call check(l8_gather_rows_at(ts, ti, tc, -1, td) == L8_ERR_INVALID_ARG, &
                   'rows: a negative stride is refused')
        call check(l8_gather_rows(l8_tensor(), tg, td) == L8_ERR_INVALID_ARG, &
                   'rows: a null source is refused')
        call check(l8_put_rows_at(tout, tg, R, tr) == L8_ERR_INVALID_ARG, &
                   'rows: a cursor of three elements is refused')
        call l8_tensor_destroy(ts)
        call l8_tensor_destroy(ti)
        call l8_tensor_destroy(tg)
        call l8_tensor_destroy(tc)
        call l8_tensor_destroy(tb)
        call l8_tensor_destroy(td)
        call l8_tensor_destroy(tr)
        call l8_tensor_destroy(tout)
    end subroutine

    ! -- 8, the loss at a cursor: 8 columns of 16 logits, a pass of 19 in
    !    batches of 8. At cursor 2 the first 3 columns are real: their loss,
    !    hit and dlogits are l8_softmax_xent's of those 3 with grad_scale 1/3,
    !    bit for bit; the other 5 get zeros and their labels (out of range)
    !    are not read. At cursor 1 every column is real.
    subroutine xent_at()
        integer, parameter :: C = 16, T = 8, NV = 3
        real(c_float) :: x(C, T), d(C, T), dr(C, T), lo(T), lr(T)
        integer(c_int32_t) :: y(T), hi(T), hr(T)
        type(l8_tensor) :: tx, ty, td, tl, th, tc, rx, ry, rd, rl, rh
        integer :: k, n

        x = reshape([(real(mod(13 * i, 29) - 14, c_float) / 4, i = 1, C * T)], shape(x))
        lo = 0
        do k = 1, 2
            n = merge(NV, T, k == 1)
            y = [(int(mod(3 * i, 10), c_int32_t), i = 1, T)]
            if (n < T) y(n + 1:) = 99                    ! padding: never read
            call ok(l8_tensor_from_array(ctx, x, tx), 'xent_at: logits')
            call ok(l8_tensor_from_array(ctx, y, ty), 'xent_at: labels')
            call ok(l8_tensor_from_array(ctx, x + 1, td), 'xent_at: dlogits (poisoned)')
            call ok(l8_tensor_from_array(ctx, lo + 1, tl), 'xent_at: row_loss')
            call ok(l8_tensor_from_array(ctx, y + 1, th), 'xent_at: row_hit')
            call ok(l8_tensor_from_array(ctx, [int(3 - k, c_int32_t)], tc), 'xent_at: cursor')
            call ok(l8_softmax_xent_at(tx, ty, 10, 1.0_c_float, tc, T, 19, tl, th, dlogits=td), &
                    'xent_at: l8_softmax_xent_at')
            call ok(l8_tensor_to_array(td, d), 'xent_at: dlogits out')
            call ok(l8_tensor_to_array(tl, lo), 'xent_at: loss out')
            call ok(l8_tensor_to_array(th, hi), 'xent_at: hit out')
            ! the reference: l8_softmax_xent of the first n columns with 1/n
            call ok(l8_tensor_from_array(ctx, x(:, 1:n), rx), 'xent_at: reference logits')
            call ok(l8_tensor_from_array(ctx, y(1:n), ry), 'xent_at: reference labels')
            call ok(l8_tensor_from_array(ctx, x(:, 1:n), rd), 'xent_at: reference dlogits')
            call ok(l8_tensor_from_array(ctx, lo(1:n), rl), 'xent_at: reference loss')
            call ok(l8_tensor_from_array(ctx, y(1:n), rh), 'xent_at: reference hit')
            call ok(l8_softmax_xent(rx, ry, 10, 1.0_c_float / real(n, c_float), rl, rh, &
                                    dlogits=rd), 'xent_at: the reference')
            dr = 0
            lr = 0
            hr = 0
            call ok(l8_tensor_to_array(rd, dr(:, 1:n)), 'xent_at: reference dlogits out')
            call ok(l8_tensor_to_array(rl, lr(1:n)), 'xent_at: reference loss out')
            call ok(l8_tensor_to_array(rh, hr(1:n)), 'xent_at: reference hit out')
            call check(same_bits(d, dr), 'xent_at: dlogits, bit for bit (the padding +0)')
            call check(all(transfer(lo, 0_c_int32_t, T) == transfer(lr, 0_c_int32_t, T)), &
                       'xent_at: the loss, bit for bit (the padding +0)')
            call check(all(hi == hr), 'xent_at: the hits (the padding 0)')
            call check(any(d(:, 1:n) /= 0), 'xent_at: the real columns have a gradient')
            call l8_tensor_destroy(tx)
            call l8_tensor_destroy(ty)
            call l8_tensor_destroy(td)
            call l8_tensor_destroy(tl)
            call l8_tensor_destroy(th)
            call l8_tensor_destroy(tc)
            call l8_tensor_destroy(rx)
            call l8_tensor_destroy(ry)
            call l8_tensor_destroy(rd)
            call l8_tensor_destroy(rl)
            call l8_tensor_destroy(rh)
        end do
        call ok(l8_tensor_from_array(ctx, x, tx), 'xent_at: logits again')
        call check(l8_softmax_xent_at(tx, tx, 10, 1.0_c_float, l8_tensor(), T, 19, tx, tx) == &
                   L8_ERR_INVALID_ARG, 'xent_at: an unset cursor is refused')
        call check(index(l8_last_error_message(), 'cursor') > 0, &
                   'xent_at: the refusal names the cursor')
        call l8_tensor_destroy(tx)
    end subroutine

    ! -- 9. Three AdamW optimizers over equal groups and gradients, 5 steps:
    !    1 sets the rate before each step, 2 reads a 4-entry table (the last
    !    step past its end), 3 has its rate pushed before each step and a
    !    wrong one set after the push. The same weights bit for bit.
    subroutine lr_table()
        integer, parameter :: NP = 40, S = 5
        real(c_float), parameter :: rates(4) = [7e-3, 3.3e-3, 1.1e-3, 2.9e-4]
        type(l8_params) :: gp(3)
        type(l8_optim) :: op(3)
        type(l8_tensor) :: rt, ti
        real(c_float) :: w0(NP, 1), gr(NP, 1), wout(NP, 1, 3)
        integer(c_int32_t) :: cur(1)
        integer(c_int) :: pid
        integer :: p, k

        w0(:, 1) = [(real(mod(7 * i, 11) - 5, c_float) / 4, i = 1, NP)]
        do p = 1, 3
            call ok(l8_params_create(ctx, gp(p)), 'lr: l8_params_create')
            call ok(l8_params_add(gp(p), 'w', [NP], pid), 'lr: l8_params_add')
            call ok(l8_params_finalize(gp(p)), 'lr: l8_params_finalize')
            call ok(l8_tensor_copy_from_array(l8_params_master(gp(p), pid), w0), 'lr: weights')
            call ok(l8_optim_create_adamw(gp(p), op(p), weight_decay=0.1_c_float), 'lr: adamw')
        end do
        call ok(l8_tensor_from_array(ctx, rates, rt), 'lr: rates')
        call ok(l8_optim_set_lr_table(op(2), rt), 'lr: l8_optim_set_lr_table')
        call l8_tensor_destroy(rt)                   ! the optimizer keeps its own view
        call ok(l8_optim_set_lr_external(op(3), .true.), 'lr: l8_optim_set_lr_external')
        do k = 1, S
            gr(:, 1) = [(real(mod(i * k, 13) - 6, c_float) / 3, i = 1, NP)]
            do p = 1, 3
                call ok(l8_tensor_copy_from_array(l8_params_main_grad(gp(p), pid), gr), 'lr: grads')
            end do
            call ok(l8_optim_set_lr(op(1), rates(min(k, 4))), 'lr: set_lr')
            call ok(l8_optim_set_lr(op(3), rates(min(k, 4))), 'lr: set_lr before the push')
            call ok(l8_optim_push_lr(op(3)), 'lr: l8_optim_push_lr')
            call ok(l8_optim_set_lr(op(3), 0.5_c_float), 'lr: a rate set after the push')
            do p = 1, 3
                call ok(l8_optim_step(op(p)), 'lr: step')
            end do
        end do
        call ok(l8_tensor_to_array(l8_optim_cursor(op(2)), cur), 'lr: the cursor')
        call check(cur(1) == S, 'lr: the cursor counted every step')
        do p = 1, 3
            call ok(l8_tensor_to_array(l8_params_master(gp(p), pid), wout(:, :, p)), 'lr: weights out')
        end do
        call check(any(wout(:, 1, 1) /= w0(:, 1)), 'lr: the steps moved the weights')
        call check(same_bits(wout(:, :, 1), wout(:, :, 2)), 'lr: a rate table = set_lr per step, bit for bit')
        call check(same_bits(wout(:, :, 1), wout(:, :, 3)), 'lr: pushed rates = set_lr per step, bit for bit')
        call check(l8_optim_lr(op(1)) == rates(4), 'lr: l8_optim_lr')
        call check(l8_optim_lr(op(3)) == 0.5, 'lr: l8_optim_lr after the push')
        call ok(l8_optim_set_lr_table(op(2)), 'lr: the table dropped')
        call ok(l8_tensor_to_array(l8_optim_cursor(op(2)), cur), 'lr: the cursor again')
        call check(cur(1) == 0, 'lr: dropping the table resets the cursor')
        call ok(l8_tensor_from_array(ctx, [1_c_int32_t, 2_c_int32_t], ti), 'lr: i32 rates')
        call check(l8_optim_set_lr_table(op(1), ti) == L8_ERR_INVALID_ARG, 'lr: an i32 table is refused')
        call check(l8_optim_set_lr_table(l8_optim(), ti) == L8_ERR_INVALID_ARG, &
                   'lr: a null optimizer is refused')
        rt = l8_optim_cursor(l8_optim())
        call check(.not. c_associated(rt%p), 'lr: no cursor for a null handle')
        call l8_tensor_destroy(ti)
        do p = 1, 3
            call l8_optim_destroy(op(p))
            call l8_params_destroy(gp(p))
        end do
    end subroutine

    ! -- 12. SGD against its formulas, operation by operation (each rounded
    !    once, in the order ops/optim.h gives), and what each step did.
    !    Gradients are multiples of 1/4: their squares and sums are exact, so
    !    the norm is too. op(1): momentum and dampening; op(2): nesterov; op(3):
    !    no momentum, clipped to a norm of 1.
    subroutine sgd_result()
        use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan, ieee_is_nan
        integer, parameter :: NP = 40, S = 4
        real(c_float), parameter :: lr = 0.125, mom = 0.875, damp = 0.25, wd = 0.0625
        type(l8_params) :: gp(3)
        type(l8_optim) :: op(3), no
        real(c_float) :: w(NP, 3), buf(NP, 2), gr(NP, 1), ge(NP), t1(NP), t2(NP), wout(NP, 1)
        real(c_float) :: omd(2), norm, clip, rnorm
        logical :: skipped
        integer(c_int64_t) :: step
        integer(c_int) :: pid
        integer :: p, k

        omd = [1 - damp, 1.0_c_float]                 ! 1 - dampening, rounded to f32
        do p = 1, 3
            call ok(l8_params_create(ctx, gp(p)), 'sgd: l8_params_create')
            call ok(l8_params_add(gp(p), 'w', [NP], pid), 'sgd: l8_params_add')
            call ok(l8_params_finalize(gp(p)), 'sgd: l8_params_finalize')
            w(:, p) = [(real(mod(5 * i, 9) - 4, c_float) / 8, i = 1, NP)]
            call ok(l8_tensor_copy_from_array(l8_params_master(gp(p), pid), w(:, p)), 'sgd: weights')
        end do
        call ok(l8_optim_create_sgd(gp(1), op(1), lr=lr, momentum=mom, dampening=damp, &
                                    weight_decay=wd), 'sgd: l8_optim_create_sgd (momentum)')
        call ok(l8_optim_create_sgd(gp(2), op(2), lr=lr, momentum=mom, weight_decay=wd, &
                                    nesterov=.true.), 'sgd: l8_optim_create_sgd (nesterov)')
        call ok(l8_optim_create_sgd(gp(3), op(3), lr=lr, max_grad_norm=1.0_c_float), &
                'sgd: l8_optim_create_sgd (clipped)')
        call check(l8_optim_state_count(op(1)) == 1, 'sgd: a momentum buffer with momentum')
        call check(l8_optim_state_count(op(3)) == 0, 'sgd: no state without momentum')
        call check(l8_optim_state_name(op(2), 0) == 'momentum_buffer', 'sgd: the state''s name')
        call ok(l8_optim_read_result(op(1), skipped, norm, clip, step), 'sgd: a result before any step')
        call check(.not. skipped .and. norm == 0 .and. clip == 1 .and. step == 0, &
                   'sgd: before any step: step 0, norm 0, clip 1')
        do k = 1, S
            gr(:, 1) = [(real(mod(i * k, 13) - 6, c_float) / 4, i = 1, NP)]
            do p = 1, 3
                call ok(l8_tensor_copy_from_array(l8_params_main_grad(gp(p), pid), gr), 'sgd: grads')
            end do
            call ok(l8_optim_step(op(1), skipped, norm, clip, step), 'sgd: step with its result')
            rnorm = real(sqrt(sum(real(gr(:, 1), real64)**2)), c_float)
            call check(.not. skipped .and. norm == rnorm .and. clip == 1 .and. step == k, &
                       'sgd: the result: not skipped, the norm, no clip, the count')
            call ok(l8_optim_step(op(2)), 'sgd: step (nesterov)')
            call ok(l8_optim_read_result(op(2), step=step), 'sgd: l8_optim_read_result')
            call check(step == k, 'sgd: read_result counts the steps')
            do p = 1, 2                                ! ops/optim.h's SGD, written out
                t1 = wd * w(:, p)
                ge = gr(:, 1) + t1
                if (k == 1) then
                    buf(:, p) = ge
                else
                    t1 = mom * buf(:, p)
                    t2 = omd(p) * ge
                    buf(:, p) = t1 + t2
                end if
                if (p == 2) then
                    t1 = mom * buf(:, p)
                    ge = ge + t1
                else
                    ge = buf(:, p)
                end if
                t1 = lr * ge
                w(:, p) = w(:, p) - t1
                call ok(l8_tensor_to_array(l8_params_master(gp(p), pid), wout), 'sgd: weights out')
                call check(same_bits(wout, w(:, p:p)), 'sgd: the step''s weights bit for bit ' // &
                           trim(merge('(momentum, dampening)', '(nesterov)           ', p == 1)))
            end do
            call ok(l8_optim_step(op(3), clip_coef=clip, grad_norm=norm), 'sgd: clipped step')
            call check(abs(clip - 1 / (rnorm + 1e-6)) <= 1e-6 * clip .and. norm == rnorm, &
                       'sgd: clip factor = max_norm / (norm + 1e-6)')
            w(:, 3) = w(:, 3) - lr * (gr(:, 1) * clip)
            call ok(l8_tensor_to_array(l8_params_master(gp(3), pid), wout), 'sgd: clipped weights')
            call check(all(abs(wout(:, 1) - w(:, 3)) <= 1e-6 * (abs(w(:, 3)) + 1)), &
                       'sgd: the clipped step''s weights')
        end do
        ! a NaN gradient: the step is skipped, the weights and the count stay
        gr(7, 1) = ieee_value(gr(7, 1), ieee_quiet_nan)
        call ok(l8_tensor_copy_from_array(l8_params_main_grad(gp(1), pid), gr), 'sgd: a NaN gradient')
        call ok(l8_optim_step(op(1), skipped=skipped, step=step), 'sgd: the NaN step')
        call check(skipped .and. step == S, 'sgd: a NaN gradient skips the step, the count stays')
        call ok(l8_optim_read_result(op(1), grad_norm=norm, skipped=skipped), 'sgd: its result read')
        call check(skipped .and. ieee_is_nan(norm), 'sgd: read_result: skipped, the norm NaN')
        call ok(l8_tensor_to_array(l8_params_master(gp(1), pid), wout), 'sgd: weights after the skip')
        call check(same_bits(wout, w(:, 1:1)), 'sgd: a skipped step leaves the weights bit for bit')
        ! bad settings
        call check(l8_optim_create_sgd(gp(1), no, nesterov=.true.) == L8_ERR_INVALID_ARG, &
                   'sgd: nesterov without momentum is refused')
        call check(l8_optim_create_sgd(gp(1), no, lr=-1.0_c_float) == L8_ERR_INVALID_ARG, &
                   'sgd: a negative rate is refused')
        call check(l8_optim_create_sgd(gp(1), no, momentum=0.5_c_float, dampening=2.0_c_float) == &
                   L8_ERR_INVALID_ARG, 'sgd: dampening above 1 is refused')
        call check(l8_optim_read_result(l8_optim(), step=step) == L8_ERR_INVALID_ARG, &
                   'sgd: read_result of a null optimizer is refused')
        do p = 1, 3
            call l8_optim_destroy(op(p))
            call l8_params_destroy(gp(p))
        end do
    end subroutine

    ! -- 13. The recipe's configuration. r(1): a window of 2, margin 1, the
    !    most recent amax, E4M3 for every role; r(2): a window of 2, the
    !    defaults otherwise (the window's maximum, margin 0, HYBRID). The
    !    input role's amax goes 8, 2, 1 over three updates (set in its meta,
    !    where the casts would leave it); the gradient role sees none.
    subroutine recipe_cfg()
        use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan
        type(l8_recipe) :: r(2), r0, no
        type(l8_params) :: gr
        type(l8_linear) :: ln(2)
        type(l8_tensor) :: fm
        real(c_float) :: sc(2, 3), fmax(3), nan
        real(c_float), parameter :: amaxes(3) = [8.0, 2.0, 1.0]
        integer(c_int) :: wid
        integer :: q, u

        call ok(l8_recipe_create(ctx, r(1), history_len=2, margin=1.0_c_float, &
                                 amax_compute=L8_AMAX_MOST_RECENT, format=L8_FP8_E4M3), &
                'recipe: l8_recipe_create (configured)')
        call ok(l8_recipe_create(ctx, r(2), history_len=2), 'recipe: l8_recipe_create (window 2)')
        call ok(l8_recipe_create(ctx, r0), 'recipe: l8_recipe_create (defaults)')
        call check(l8_recipe_history_len(r(1)) == 2, 'recipe: a history of 2')
        call check(l8_recipe_history_len(r0) == 1024, 'recipe: a history of 1024 by default')
        call check(l8_recipe_dtype(r(1), L8_ROLE_GRAD_OUTPUT) == L8_E4M3, &
                   'recipe: the E4M3 format: E4M3 gradients')
        call check(l8_recipe_dtype(r(2), L8_ROLE_GRAD_OUTPUT) == L8_E5M2, &
                   'recipe: HYBRID: E5M2 gradients')
        call ok(l8_params_create(ctx, gr), 'recipe: l8_params_create')
        call ok(l8_params_add(gr, 'w', [16, 16], wid), 'recipe: l8_params_add')
        call ok(l8_params_finalize(gr), 'recipe: l8_params_finalize')
        do q = 1, 2
            call ok(l8_linear_create(ctx, trim(merge('rc1', 'rc2', q == 1)), h, &
                                     l8_params_master(gr, wid), l8_params_main_grad(gr, wid), &
                                     ln(q), recipe=r(q)), 'recipe: an FP8 Linear registers its roles')
        end do
        call check(l8_recipe_count(r(1)) == 3, 'recipe: three roles')
        call check(l8_recipe_role_name(r(1), 0) == 'rc1.input', 'recipe: role 0''s name')
        call check(l8_recipe_role_name(r(1), 2) == 'rc1.grad_output', 'recipe: role 2''s name')
        call check(l8_recipe_role_name(r(2), 1) == 'rc2.weight', 'recipe: role 1''s name')
        call check(l8_recipe_role_name(r(1), 3) == '', 'recipe: no name past the last row')
        call check(l8_recipe_role_name(r(1), -1) == '', 'recipe: no name for row -1')
        call check(l8_recipe_updates(r(1)) == 0, 'recipe: no update yet')
        do u = 1, 3
            do q = 1, 2
                call ok(l8_fp8_meta_set(l8_recipe_meta(r(q), 0), 1.0_c_float, 1.0_c_float, amaxes(u)), &
                        'recipe: the input''s amax')
                call ok(l8_recipe_update(r(q)), 'recipe: l8_recipe_update')
                call ok(l8_fp8_meta_get(l8_recipe_meta(r(q), 0), scale=sc(q, u)), 'recipe: the scale')
            end do
        end do
        ! r(1): (448 / newest) / 2; r(2): 448 / max(the last two)
        call check(all(sc(1, :) == [28.0, 112.0, 224.0]), 'recipe: most recent amax, margin 1')
        call check(all(sc(2, :) == [56.0, 56.0, 224.0]), 'recipe: the window''s maximum over 2 updates')
        call check(l8_recipe_updates(r(1)) == 3, 'recipe: three updates counted')
        call ok(l8_fp8_meta_get(l8_recipe_meta(r(1), 2), scale=sc(1, 1)), 'recipe: the gradient''s scale')
        call check(sc(1, 1) == 1, 'recipe: no amax seen keeps the scale at 1')
        call ok(l8_recipe_state(r(1), fp8_max=fm), 'recipe: l8_recipe_state(fp8_max=)')
        call ok(l8_tensor_to_array(fm, fmax), 'recipe: fp8_max')
        call check(all(fmax == 448), 'recipe: E4M3 format: every fp8_max 448')
        call l8_tensor_destroy(fm)
        ! bad settings
        nan = ieee_value(nan, ieee_quiet_nan)
        call check(l8_recipe_create(ctx, no, history_len=-1) == L8_ERR_INVALID_ARG, &
                   'recipe: a negative history length is refused')
        call check(l8_recipe_create(ctx, no, margin=nan) == L8_ERR_INVALID_ARG, &
                   'recipe: a NaN margin is refused')
        call check(l8_recipe_create(ctx, no, amax_compute=7) == L8_ERR_INVALID_ARG, &
                   'recipe: an unknown amax rule is refused')
        call check(l8_recipe_create(ctx, no, format=9) == L8_ERR_INVALID_ARG, &
                   'recipe: an unknown format is refused')
        call check(.not. c_associated(no%p), 'recipe: no recipe after a refusal')
        do q = 1, 2
            call l8_linear_destroy(ln(q))
            call l8_recipe_destroy(r(q))
        end do
        call l8_recipe_destroy(r0)
        call l8_params_destroy(gr)
    end subroutine

    ! -- 14. Views of x(K, T) against Fortran's sections, transpose, reshape.
    subroutine views()
        type(l8_tensor) :: xv, zv, v(6), c
        real(c_float) :: a8(K, 8), a10(10, T), at(T, K), a3(16, 2, T), zb(K, T)
        integer :: q

        call ok(l8_tensor_from_array(ctx, x, xv), 'views: x')
        call ok(l8_tensor_section(xv, 2, 5, 12, v(1)), 'views: the section x(:, 5:12)')
        call check(all(l8_tensor_dims(v(1)) == [K, 8]), 'views: x(:, 5:12) has dims [K, 8]')
        call ok(l8_tensor_to_array(v(1), a8), 'views: x(:, 5:12) out (contiguous)')
        call check(all(a8 == x(:, 5:12)), 'views: x(:, 5:12) holds those columns')
        call ok(l8_tensor_section(xv, 1, 3, 30, v(2), step=3), 'views: the section x(3:30:3, :)')
        call check(all(l8_tensor_dims(v(2)) == [10, T]), 'views: x(3:30:3, :) has dims [10, T]')
        call check(l8_tensor_to_array(v(2), a10) == L8_ERR_INVALID_ARG, &
                   'views: an array copy of a strided view is refused')
        call ok(l8_tensor_contiguous(v(2), c), 'views: l8_tensor_contiguous')
        call ok(l8_tensor_to_array(c, a10), 'views: the strided section made contiguous, out')
        call check(all(a10 == x(3:30:3, :)), 'views: x(3:30:3, :) holds those rows')
        call l8_tensor_destroy(c)
        call ok(l8_tensor_transpose(xv, 1, 2, v(3)), 'views: l8_tensor_transpose')
        call check(all(l8_tensor_dims(v(3)) == [T, K]), 'views: the transpose has dims [T, K]')
        call ok(l8_tensor_contiguous(v(3), c), 'views: the transpose made contiguous')
        call ok(l8_tensor_to_array(c, at), 'views: the transpose out')
        call check(all(at == transpose(x)), 'views: the transpose holds transpose(x)')
        call l8_tensor_destroy(c)
        call ok(l8_tensor_reshape(xv, [16, 2, T], v(4)), 'views: l8_tensor_reshape')
        call ok(l8_tensor_to_array(v(4), a3), 'views: the reshape out')
        call check(all(a3 == reshape(x, [16, 2, T])), 'views: reshape as Fortran''s reshape')
        call ok(l8_tensor_reshape(v(4), [-1, T], v(5)), 'views: a reshape with -1')
        call check(all(l8_tensor_dims(v(5)) == [K, T]), 'views: -1 inferred as K')
        call check(l8_tensor_reshape(v(2), [10 * T], c) == L8_ERR_INVALID_ARG, &
                   'views: reshaping a strided section is refused')
        call check(l8_tensor_reshape(xv, [K, T + 1], c) == L8_ERR_INVALID_ARG, &
                   'views: a reshape to another count is refused')
        ! a copy into a section of a zeroed tensor: those columns, nothing else
        zb = 0
        call ok(l8_tensor_from_array(ctx, zb, zv), 'views: a zeroed tensor')
        call ok(l8_tensor_section(zv, 2, 5, 12, v(6)), 'views: its section (:, 5:12)')
        call ok(l8_tensor_copy(v(6), v(1)), 'views: l8_tensor_copy into the section')
        call ok(l8_tensor_to_array(zv, zb), 'views: the parent out')
        call check(all(zb(:, 5:12) == x(:, 5:12)) .and. all(zb(:, 1:4) == 0) .and. &
                   all(zb(:, 13:) == 0), 'views: the copy wrote the section''s columns only')
        call check(l8_tensor_copy(v(6), v(2)) == L8_ERR_INVALID_ARG, &
                   'views: a copy between other dims is refused')
        ! bad dimensions and bounds
        call check(l8_tensor_section(xv, 3, 1, 2, c) == L8_ERR_INVALID_ARG, &
                   'views: a section along dimension 3 of a 2-d tensor is refused')
        call check(l8_tensor_section(xv, 2, 1, T + 1, c) == L8_ERR_INVALID_ARG, &
                   'views: a section past the extent is refused')
        call check(l8_tensor_section(xv, 2, 5, 2, c) == L8_ERR_INVALID_ARG, &
                   'views: a section with hi < lo - 1 is refused')
        call check(l8_tensor_section(xv, 1, 1, K, c, step=0) == L8_ERR_INVALID_ARG, &
                   'views: a step of 0 is refused')
        call ok(l8_tensor_section(xv, 2, 5, 4, c), 'views: an empty section (hi = lo - 1)')
        call check(l8_tensor_numel(c) == 0, 'views: the empty section has no elements')
        call l8_tensor_destroy(c)
        call check(l8_tensor_transpose(xv, 0, 2, c) == L8_ERR_INVALID_ARG, &
                   'views: a transpose of dimension 0 is refused')
        do q = 1, 6
            call l8_tensor_destroy(v(q))
        end do
        call l8_tensor_destroy(xv)
        call l8_tensor_destroy(zv)
    end subroutine

    ! -- 17. The casts with an activation against l8_gelu / l8_gelu_backward
    !    and the plain casts, the byte transpose against a cast's out_t, many
    !    casts at once against one call each, delayed scaling against its
    !    formula, a layer's counters and an optimizer's shard queries.
    subroutine fp8_more()
        type(l8_tensor) :: xb8, dyb8, hb8, gb8, q(2), qt(2), r(2), rt(2), db(2), dba, tt
        type(l8_tensor) :: am, sc, si, fm, hist
        type(l8_fp8_meta) :: m(4)
        type(l8_params) :: g9
        type(l8_recipe) :: r9
        type(l8_linear) :: l9
        type(l8_linear_ctx) :: c9
        type(l8_optim) :: o9
        type(l8_tensor) :: x9, y9
        real(c_float) :: xv(K, T), dyv(K, T), dbv(K, 1), dbw(K, 1), f1, f2, amax1, amax2
        real(c_float) :: hv(3, 2), sv(2), siv(2), av(2)
        integer(c_int8_t) :: b1(K, T), b2(K, T), bt1(T, K), bt2(T, K)
        integer(c_int64_t) :: fw, bw, wc, ic, gc, stp, mb, off, num
        integer :: i, j
        do j = 1, T
            do i = 1, K
                xv(i, j) = real(mod(5 * i + 3 * j, 17) - 8, c_float) / 4
                dyv(i, j) = real(mod(7 * i + j, 13) - 6, c_float) / 16
            end do
        end do
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], xb8), 'more: x')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], dyb8), 'more: dy')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], hb8), 'more: h')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], gb8), 'more: g')
        call put_f32(xb8, xv, 'more x')
        call put_f32(dyb8, dyv, 'more dy')
        do i = 1, 4
            call ok(l8_fp8_meta_create(ctx, m(i)), 'more: a meta')
            call ok(l8_fp8_meta_set(m(i), 2.0, 0.5, 0.0), 'more: its scale 2')
        end do
        do i = 1, 2
            call ok(l8_tensor_empty(ctx, L8_E4M3, [K, T], q(i)), 'more: q')
            call ok(l8_tensor_empty(ctx, L8_E4M3, [T, K], qt(i)), 'more: qt')
            call ok(l8_tensor_empty(ctx, L8_E4M3, [K, T], r(i)), 'more: r')
            call ok(l8_tensor_empty(ctx, L8_E4M3, [T, K], rt(i)), 'more: rt')
            call ok(l8_tensor_empty(ctx, L8_F32, [K], db(i)), 'more: dbias')
            call ok(l8_tensor_set_fp8_meta(q(i), m(i)), 'more: meta of q')
            call ok(l8_tensor_set_fp8_meta(qt(i), m(i)), 'more: meta of qt')
            call ok(l8_tensor_set_fp8_meta(r(i), m(i + 2)), 'more: meta of r')
            call ok(l8_tensor_set_fp8_meta(rt(i), m(i + 2)), 'more: meta of rt')
        end do

        ! the GELU inside the cast = l8_gelu, then the cast
        call ok(l8_fp8_cast_transpose_act(L8_ACT_GELU, xb8, q(1), qt(1)), &
                'more: cast_transpose_act')
        call ok(l8_gelu(xb8, hb8), 'more: l8_gelu')
        call ok(l8_fp8_cast_transpose(hb8, r(1), rt(1)), 'more: cast of h')
        call same_bytes(q(1), qt(1), r(1), rt(1), 'more: act = gelu, then cast_transpose')
        call ok(l8_fp8_meta_get(m(1), amax=amax1), 'more: amax of act')
        call ok(l8_fp8_meta_get(m(3), amax=amax2), 'more: amax of the cast')
        call check(amax1 > 0 .and. amax1 == amax2, 'more: the amax of h either way')
        call ok(l8_fp8_cast_transpose_act(L8_ACT_GELU, xb8, out=q(2)), 'more: act without out_t')
        call ok(l8_fp8_cast(hb8, r(2)), 'more: l8_fp8_cast of h')
        call ok(l8_tensor_to_array(q(2), b1), 'more: bytes of act')
        call ok(l8_tensor_to_array(r(2), b2), 'more: bytes of the cast')
        call check(all(b1 == b2), 'more: act without out_t = l8_fp8_cast of h')
        call check(l8_fp8_cast_transpose_act(L8_ACT_GELU, xb8) == L8_ERR_INVALID_ARG, &
                   'more: act with neither output refused')
        call check(l8_fp8_cast_transpose_act(7, xb8, q(1), qt(1)) == L8_ERR_INVALID_ARG, &
                   'more: an unknown activation refused')

        ! dy * gelu'(x) inside the cast = l8_gelu_backward, then the cast with dbias
        call ok(l8_fp8_cast_transpose_dact(L8_ACT_GELU, dyb8, xb8, q(1), qt(1), db(1)), &
                'more: cast_transpose_dact')
        call ok(l8_gelu_backward(xb8, dyb8, gb8), 'more: l8_gelu_backward')
        call ok(l8_fp8_cast_transpose_dbias(gb8, r(1), rt(1), db(2)), 'more: cast of g, dbias')
        call same_bytes(q(1), qt(1), r(1), rt(1), 'more: dact = gelu_backward, then cast')
        call ok(l8_tensor_to_array(db(1), dbv), 'more: dbias of dact')
        call ok(l8_tensor_to_array(db(2), dbw), 'more: dbias of the cast')
        call check(same_bits(dbv, dbw) .and. any(dbv /= 0), 'more: dact''s dbias = the cast''s')
        call check(l8_fp8_cast_transpose_dact(L8_ACT_GELU, dyb8, out=q(1), out_t=qt(1)) == &
                   L8_ERR_INVALID_ARG, 'more: dact with GELU and no a refused')
        ! the bias gradient alone: the same sums, nothing cast
        call ok(l8_tensor_empty(ctx, L8_F32, [K], dba), 'more: dbias alone')
        call ok(l8_dbias_dact(L8_ACT_GELU, dyb8, dba, xb8), 'more: l8_dbias_dact')
        call ok(l8_tensor_to_array(dba, dbw), 'more: dbias alone back')
        call check(same_bits(dbv, dbw), 'more: dbias_dact = dact''s dbias')
        call ok(l8_dbias_dact(L8_ACT_NONE, dyb8, dba), 'more: l8_dbias_dact without activation')
        call ok(l8_fp8_cast_transpose_dbias(dyb8, r(1), rt(1), db(2)), 'more: dbias of dy')
        call ok(l8_tensor_to_array(dba, dbv), 'more: dbias_dact none')
        call ok(l8_tensor_to_array(db(2), dbw), 'more: cast_transpose_dbias of dy')
        call check(same_bits(dbv, dbw), 'more: dbias_dact(NONE) = cast_transpose_dbias''s')

        ! the byte transpose of a cast's out is its out_t
        call ok(l8_tensor_empty(ctx, L8_E4M3, [T, K], tt), 'more: tt')
        call ok(l8_fp8_transpose(r(1), tt), 'more: l8_fp8_transpose')
        call ok(l8_tensor_to_array(tt, bt1), 'more: transposed bytes')
        call ok(l8_tensor_to_array(rt(1), bt2), 'more: the cast''s out_t')
        call check(all(bt1 == bt2) .and. any(bt1 /= 0), 'more: l8_fp8_transpose(out) = out_t')
        call check(l8_fp8_transpose(r(1), q(1)) == L8_ERR_INVALID_ARG, &
                   'more: a transpose into the same dims refused')

        ! two casts in one call = one call each
        call ok(l8_fp8_cast_transpose_many([xb8, dyb8], qt, q), 'more: cast_transpose_many')
        call ok(l8_fp8_cast_transpose(xb8, r(1), rt(1)), 'more: cast of x alone')
        call ok(l8_fp8_cast_transpose(dyb8, r(2), rt(2)), 'more: cast of dy alone')
        call same_bytes(q(1), qt(1), r(1), rt(1), 'more: many, tensor 1')
        call same_bytes(q(2), qt(2), r(2), rt(2), 'more: many, tensor 2')
        call ok(l8_fp8_cast_transpose_many([xb8, dyb8], rt), 'more: many without out')
        call ok(l8_tensor_to_array(rt(2), bt1), 'more: many without out, bytes')
        call ok(l8_tensor_to_array(qt(2), bt2), 'more: many with out, bytes')
        call check(all(bt1 == bt2), 'more: many without out writes the same out_t')
        call check(l8_fp8_cast_transpose_many([xb8, dyb8], qt(1:1)) == L8_ERR_INVALID_ARG, &
                   'more: many with arrays of two sizes refused')

        ! delayed scaling: history [3, 2] (a column a tensor, newest first)
        hv = reshape([1.0, 2.0, 3.0, 4.0, 0.0, 0.0], [3, 2])
        call ok(l8_tensor_from_array(ctx, hv, hist), 'more: history')
        call ok(l8_tensor_from_array(ctx, [7.0, 2.0], am), 'more: amax')
        call ok(l8_tensor_from_array(ctx, [1.0, 1.0], sc), 'more: scale')
        call ok(l8_tensor_from_array(ctx, [1.0, 1.0], si), 'more: scale_inv')
        call ok(l8_tensor_from_array(ctx, [448.0, 448.0], fm), 'more: fp8_max')
        call ok(l8_fp8_scale_update(am, sc, fm, amax_history=hist, scale_inv=si), &
                'more: l8_fp8_scale_update')
        call ok(l8_tensor_to_array(hist, hv), 'more: history back')
        call ok(l8_tensor_to_array(sc, sv), 'more: scale back')
        call ok(l8_tensor_to_array(si, siv), 'more: scale_inv back')
        call check(all(hv == reshape([7.0, 1.0, 2.0, 2.0, 4.0, 0.0], [3, 2])), &
                   'more: each amax pushed at the front of its history')
        call check(all(sv == [64.0, 112.0]), 'more: scale = 448 / max(history)')
        f1 = 1.0 / 64.0
        f2 = 1.0 / 112.0
        call check(all(siv == [f1, f2]), 'more: scale_inv = 1 / scale')
        call ok(l8_fp8_scale_update(am, sc, fm, amax_compute=L8_AMAX_MOST_RECENT, margin=1.0, &
                                    reset_amax=.true.), 'more: most recent, margin 1, reset')
        call ok(l8_tensor_to_array(sc, sv), 'more: scale back')
        call ok(l8_tensor_to_array(am, av), 'more: amax back')
        call check(all(sv == [32.0, 112.0]), 'more: scale = 448 / amax / 2')
        call check(all(av == 0), 'more: amax reset after use')
        call check(l8_fp8_scale_update(am, sc, fm) == L8_ERR_INVALID_ARG, &
                   'more: no history with MAX_HISTORY refused')

        ! a layer's counters, and the shard of an optimizer
        call ok(l8_params_create(ctx, g9), 'more: params')
        call ok(l8_params_add(g9, 'w', [K, N], i), 'more: w')
        call ok(l8_params_finalize(g9), 'more: finalize')
        call ok(l8_params_init_uniform(g9, 0, -0.5, 0.5, 9_c_int64_t), 'more: init w')
        call ok(l8_recipe_create(ctx, r9), 'more: recipe')
        call ok(l8_linear_create(ctx, 'l9', h, l8_params_master(g9, 0), &
                                 l8_params_main_grad(g9, 0), l9, recipe=r9), 'more: an FP8 layer')
        call check(l8_linear_in_features(l9) == K, 'more: in_features')
        call check(l8_linear_out_features(l9) == N, 'more: out_features')
        call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], y9), 'more: y')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], x9), 'more: x of the layer')
        call put_f32(x9, xv, 'more x9')
        call ok(l8_linear_begin_step(l9), 'more: begin_step')
        call ok(l8_linear_forward(l9, x9, y9, c9), 'more: forward')
        call ok(l8_linear_backward(l9, c9, y9), 'more: backward (dy: y itself)')
        call ok(l8_linear_get_stats(l9, fw, bw, wc, ic, gc, stp, mb), 'more: l8_linear_get_stats')
        call check(all([fw, bw, wc, ic, gc, stp, mb] == 1), &
                   'more: one forward, backward, weight cast, x cast, dy cast, step, micro-batch')
        call ok(l8_linear_forward(l9, x9, y9), 'more: an inference forward')
        call ok(l8_linear_get_stats(l9, forwards=fw, micro_batch=mb), 'more: stats again')
        call check(fw == 2 .and. mb == 1, 'more: two forwards, still one micro-batch')
        call ok(l8_optim_create_adamw(g9, o9), 'more: AdamW')
        call check(.not. l8_optim_is_sharded(o9), 'more: not sharded')
        call check(l8_optim_shard_count(o9) == 1, 'more: one range unsharded')
        call ok(l8_optim_shard_range(o9, 0, off, num), 'more: the range')
        call check(off == 0 .and. num == 512, 'more: the whole buffer (512 elements)')
        call check(l8_optim_shard_numel(o9) == 512, 'more: shard_numel = the buffer')
        call check(l8_optim_state_bytes(o9) == 2 * 512 * 4, 'more: two f32 states')
        call ok(l8_optim_set_shard(o9, [0_c_int64_t, 384_c_int64_t], &
                                   [128_c_int64_t, 128_c_int64_t]), &
                'more: two ranges')
        call check(l8_optim_is_sharded(o9), 'more: sharded')
        call check(l8_optim_shard_count(o9) == 2, 'more: two ranges')
        call ok(l8_optim_shard_range(o9, 1, off, num), 'more: range 1')
        call check(off == 384 .and. num == 128, 'more: range 1 as set')
        call check(l8_optim_shard_numel(o9) == 256, 'more: the states hold the ranges')
        call check(l8_optim_state_bytes(o9) == 2 * 256 * 4, 'more: two f32 states of the ranges')
        call check(l8_optim_shard_range(o9, 2, off, num) == L8_ERR_INVALID_ARG, &
                   'more: a range past the last refused')

        call l8_optim_destroy(o9)
        call l8_linear_destroy(l9)
        call l8_recipe_destroy(r9)
        call l8_params_destroy(g9)
        do i = 1, 2
            call l8_tensor_destroy(q(i))
            call l8_tensor_destroy(qt(i))
            call l8_tensor_destroy(r(i))
            call l8_tensor_destroy(rt(i))
            call l8_tensor_destroy(db(i))
        end do
        do i = 1, 4
            call l8_fp8_meta_release(m(i))
        end do
        call l8_tensor_destroy(xb8)
        call l8_tensor_destroy(dyb8)
        call l8_tensor_destroy(hb8)
        call l8_tensor_destroy(gb8)
        call l8_tensor_destroy(dba)
        call l8_tensor_destroy(tt)
        call l8_tensor_destroy(x9)
        call l8_tensor_destroy(y9)
        call l8_tensor_destroy(am)
        call l8_tensor_destroy(sc)
        call l8_tensor_destroy(si)
        call l8_tensor_destroy(fm)
        call l8_tensor_destroy(hist)
    end subroutine

    ! Two FP8 casts' outputs (out [K, T], out_t [T, K]) hold the same bytes.
    subroutine same_bytes(a, at, b, bt, what)
        type(l8_tensor), intent(in) :: a, at, b, bt
        character(len=*), intent(in) :: what
        integer(c_int8_t) :: x1(K, T), x2(K, T), y1(T, K), y2(T, K)
        call ok(l8_tensor_to_array(a, x1), what // ': out')
        call ok(l8_tensor_to_array(b, x2), what // ': reference out')
        call ok(l8_tensor_to_array(at, y1), what // ': out_t')
        call ok(l8_tensor_to_array(bt, y2), what // ': reference out_t')
        call check(all(x1 == x2) .and. all(y1 == y2) .and. any(x1 /= 0), what)
    end subroutine

    ! -- 18. A step captured once (x = gelu(x): graph_step above) and launched
    !    1 + 3 times after its warm-up gives x of five eager steps, bit for
    !    bit; the counters; a launch before any capture and a bad repeat
    !    count refused.
    subroutine graph_steps()
        type(graph_step_state), target :: gs
        type(l8_graph) :: gr, g2
        type(l8_tensor) :: xe, ye
        real(c_float) :: xv(K, T), a(K, T), b(K, T)
        integer(c_int64_t) :: launches, captures, warmups
        logical :: native, gpu
        integer :: i, j
        do j = 1, T
            do i = 1, K
                xv(i, j) = real(mod(3 * i + 5 * j, 19) - 9, c_float) / 3
            end do
        end do
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], gs%x), 'graph: x')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], gs%y), 'graph: y')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], xe), 'graph: eager x')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], ye), 'graph: eager y')
        call put_f32(gs%x, xv, 'graph x')
        call put_f32(xe, xv, 'graph eager x')
        do i = 1, 5
            call ok(l8_gelu(xe, ye), 'graph: eager gelu')
            call ok(l8_tensor_copy(xe, ye), 'graph: eager copy')
        end do
        native = l8_graph_native(ctx)
        gpu = l8_ctx_device_name(ctx) /= 'host'
        call check(native .eqv. gpu, 'graph: native CUDA graphs on a GPU, eager on the host')
        call ok(l8_graph_create(ctx, gr), 'graph: l8_graph_create')
        call ok(l8_graph_warmup(gr, c_funloc(graph_step), c_loc(gs)), 'graph: warm-up (step 1)')
        call ok(l8_graph_capture(gr, c_funloc(graph_step), c_loc(gs)), 'graph: capture')
        call ok(l8_graph_launch(gr), 'graph: launch (step 2)')
        call ok(l8_graph_launch_repeat(gr, 3), 'graph: three in a row (steps 3-5)')
        call get_f32(xe, a, 'graph eager result')
        call get_f32(gs%x, b, 'graph result')
        call check(same_bits(a, b) .and. any(a /= xv), 'graph: five graph steps = five eager ones')
        call ok(l8_graph_get_stats(gr, launches=launches, captures=captures, warmups=warmups), &
                'graph: l8_graph_get_stats')
        call check(launches == 4 .and. captures == 1 .and. warmups == 1, &
                   'graph: 4 executions, 1 capture, 1 warm-up')
        call check(l8_graph_launch_repeat(gr, 0) == L8_ERR_INVALID_ARG, &
                   'graph: a repeat of 0 refused')
        call ok(l8_graph_create(ctx, g2), 'graph: a second graph')
        call check(l8_graph_launch(g2) == L8_ERR_STATE, 'graph: a launch before any capture refused')
        call l8_graph_destroy(g2)
        call l8_graph_destroy(gr)
        call check(.not. c_associated(gr%p), 'graph: destroy nulls the handle')
        call l8_tensor_destroy(gs%x)
        call l8_tensor_destroy(gs%y)
        call l8_tensor_destroy(xe)
        call l8_tensor_destroy(ye)
    end subroutine

    ! -- 19. Memory: a context's limits and trace file of its own, the
    ! allocator's and the pinned pool's counters, tags and a step mark in the
    ! trace, and activation offload by hand: one storage saved through two
    ! views moves once and comes back bit for bit.
    subroutine memory()
        integer(c_int64_t), parameter :: MIB = 1048576
        type(l8_ctx) :: mc, c2
        type(l8_alloc) :: al
        type(l8_pinned) :: pp
        type(l8_trace) :: tr
        type(l8_alloc_stats) :: a0, a1, a2
        type(l8_pinned_stats) :: p0, p1
        type(l8_offload) :: off
        type(l8_offload_stats) :: os
        type(l8_trace_event), allocatable :: ev(:)
        type(l8_tensor) :: big, over, base, va, vb
        real(c_float), allocatable :: xv(:, :), back(:, :)
        character(len=:), allocatable :: path, top, desc
        integer(c_int64_t) :: held, got, cnt, fsz, i
        integer(c_int) :: dev, sa, sb, rank0
        integer :: u, j
        logical :: tagged, oom_seen, step_seen, there
        call check(l8_ctx_create(c2, memory_limit=-1_c_int64_t) == L8_ERR_INVALID_ARG .and. &
                   .not. c_associated(c2%p), 'memory: a negative memory_limit refused')
        call check(index(l8_last_error_message(), 'memory_limit is negative') > 0, &
                   'memory: the refusal says why: ' // l8_last_error_message())
        call check(l8_ctx_create(c2, pinned_limit=-5_c_int64_t) == L8_ERR_INVALID_ARG, &
                   'memory: a negative pinned_limit refused')
        rank0 = l8_trace_rank()
        call check(l8_trace_set_rank(-1) == L8_ERR_INVALID_ARG, 'memory: a negative rank refused')
        call ok(l8_trace_set_rank(5), 'memory: l8_trace_set_rank')
        call ok(l8_ctx_create(mc, memory_limit=64 * MIB, pinned_limit=16 * MIB, &
                              trace_path=tmp_file('lean8-fortran-%r-%p.l8t')), 'memory: a context')
        call ok(l8_trace_set_rank(rank0), 'memory: the rank as it was')
        if (.not. c_associated(mc%p)) return
        dev = l8_ctx_device(mc)
        call check(dev == l8_ctx_device(ctx), 'memory: on the device of the test')
        tr = l8_ctx_trace(mc)
        path = l8_trace_path(tr)
        call check(c_associated(tr%p) .and. index(path, 'lean8-fortran-5-') > 0 .and. &
                   index(path, '%') == 0, 'memory: the trace writes ' // path)
        al = l8_ctx_allocator(mc)
        pp = l8_ctx_pinned(mc)
        call ok(l8_alloc_get_stats(al, a0), 'memory: allocator stats')
        call ok(l8_pinned_get_stats(pp, p0), 'memory: pinned stats')

        ! a tagged 4 MiB tensor, then a request past the limit
        call ok(l8_tag_push('part19.big'), 'memory: tag push')
        top = l8_tag_current()
        call check(top == 'part19.big', 'memory: the current tag')
        call ok(l8_tensor_empty(mc, L8_F32, [1023, 1025], big), 'memory: about 4 MiB')
        call ok(l8_tag_pop(), 'memory: tag pop')
        call ok(l8_alloc_get_stats(al, a1), 'memory: allocator stats after')
        call check(a1%requested_bytes - a0%requested_bytes == 4 * 1023 * 1025 .and. &
                   a1%allocated_bytes - a0%allocated_bytes >= 4 * 1023 * 1025 .and. &
                   a1%allocated_bytes - a0%allocated_bytes < 4 * 1023 * 1025 + 1024 .and. &
                   a1%requested_peak >= a1%requested_bytes .and. a1%segments >= 1 .and. &
                   a1%allocations == a0%allocations + 1 .and. a1%live_blocks == a0%live_blocks + 1 &
                   .and. a1%reserved_bytes >= a1%allocated_bytes .and. &
                   a1%allocated_peak >= a1%allocated_bytes .and. a1%size == c_sizeof(a1), &
                   'memory: the allocator counts the tensor')
        call check(l8_tensor_empty(mc, L8_F32, [1024, 16 * 1024], over) == L8_ERR_OOM, &
                   'memory: 64 MiB more past the 64 MiB limit: L8_ERR_OOM')
        call ok(l8_alloc_get_stats(al, a2), 'memory: allocator stats after the OOM')
        call check(a2%ooms == a1%ooms + 1 .and. a2%reserved_bytes <= 64 * MIB, &
                   'memory: one OOM counted, reserved within the limit')
        desc = l8_alloc_describe(al)
        call check(index(desc, 'allocator[') == 1 .and. index(desc, 'limit 64') > 0, &
                   'memory: l8_alloc_describe: ' // desc)

        ! a step mark, then the events held in memory
        call l8_trace_record(tr, L8_TRACE_STEP, l8_ctx_device(mc), aux=7_c_int64_t)
        held = l8_trace_held(tr)
        allocate(ev(held + 4))
        got = l8_trace_events(tr, 0_c_int64_t, ev)
        cnt = l8_trace_count(tr)
        call check(got == held .and. cnt >= held .and. held >= 3, &
                   'memory: every held event copied')
        tagged = .false.
        oom_seen = .false.
        step_seen = .false.
        do i = 1, got
            if (ev(i)%kind == L8_TRACE_ALLOC .and. ev(i)%aux == 4 * 1023 * 1025) &
                tagged = l8_trace_tag_name(tr, ev(i)%tag) == 'part19.big'
            if (ev(i)%kind == L8_TRACE_OOM) oom_seen = ev(i)%size >= 64 * MIB
            if (ev(i)%kind == L8_TRACE_STEP) step_seen = ev(i)%aux == 7 .and. &
                ev(i)%device == dev .and. ev(i)%tag == 0
        end do
        call check(tagged, 'memory: the 4 MiB allocation carries its tag')
        call check(oom_seen, 'memory: the OOM is in the trace')
        call check(step_seen, 'memory: the step mark is in the trace')
        call check(l8_trace_events(tr, -1_c_int64_t, ev) == 0, 'memory: a negative first: none')
        call ok(l8_trace_flush(tr), 'memory: l8_trace_flush')
        inquire(file=path, exist=there, size=fsz)
        call check(there .and. fsz >= 48 * got, 'memory: the file holds the events')

        ! offload by hand: two views of one 1 MiB storage (the owner lets go)
        allocate(xv(256, 1024), back(256, 512))
        do j = 1, 1024
            xv(:, j) = [(real(mod(int(i) * 7 + j * 3, 101), c_float) / 8, i = 1, 256)]
        end do
        call ok(l8_offload_create(mc, off, min_bytes=0_c_int64_t), 'offload: create')
        call ok(l8_tensor_from_array(mc, xv, base), 'offload: base')
        call ok(l8_tensor_section(base, 2, 1, 512, va), 'offload: view a (columns 1-512)')
        call ok(l8_tensor_reshape(base, [256 * 1024], vb), 'offload: view b (flat)')
        call l8_tensor_destroy(base)
        call l8_tensor_destroy(big)
        call ok(l8_alloc_get_stats(al, a1), 'offload: allocator stats')
        call ok(l8_offload_forward_layer(off, 0), 'offload: forward layer 0')
        call ok(l8_offload_save(off, va, 'x.a'), 'offload: save a')
        call ok(l8_offload_save(off, vb, 'x.b'), 'offload: save b')
        call ok(l8_offload_forward_layer(off, 1), 'offload: forward layer 1')
        call ok(l8_offload_wait(off), 'offload: wait')
        sa = l8_offload_state_of(off, va)
        sb = l8_offload_state_of(off, vb)
        call check(sa == L8_OFFLOAD_ON_HOST .and. sb == L8_OFFLOAD_ON_HOST, &
                   'offload: both views on the host: ' // l8_offload_state_name(sa))
        call ok(l8_offload_get_stats(off, os), 'offload: stats')
        call check(os%saves == 2 .and. os%aliased == 1 .and. os%copies_out == 1 .and. &
                   os%bytes_out == 4 * 256 * 1024 .and. os%released == 1 .and. &
                   os%entries == 1 .and. os%host_bytes == os%bytes_out .and. &
                   os%device_bytes_freed == os%bytes_out, &
                   'offload: one copy of the whole storage, its device block given back')
        call ok(l8_alloc_get_stats(al, a2), 'offload: allocator stats on the host')
        call ok(l8_pinned_get_stats(pp, p1), 'offload: pinned stats')
        call check(a1%allocated_bytes - a2%allocated_bytes >= os%bytes_out .and. &
                   p1%allocated_bytes - p0%allocated_bytes >= os%bytes_out, &
                   'offload: the bytes left the device for the pinned pool')
        call ok(l8_offload_backward_layer(off, 0), 'offload: backward layer 0')
        call ok(l8_offload_restore(off, va, 'x.a'), 'offload: restore a')
        call ok(l8_offload_restore(off, vb, 'x.b'), 'offload: restore b')
        call check(l8_offload_state_of(off, vb) == L8_OFFLOAD_RESTORED, 'offload: restored')
        call ok(l8_tensor_to_array(va, back), 'offload: view a back')
        call check(same_bits(back, xv(:, 1:512)), 'offload: view a bit for bit')
        call ok(l8_tensor_to_array(vb, xv), 'offload: view b back')
        call check(same_bits(back, xv(:, 1:512)), 'offload: view b bit for bit')
        call l8_offload_release(off, va, 'x.a')
        call l8_offload_release(off, vb)
        call ok(l8_offload_get_stats(off, os), 'offload: stats after')
        sa = l8_offload_state_of(off, va)
        call check(os%entries == 0 .and. os%host_bytes == 0 .and. os%copies_in == 1 .and. &
                   sa == L8_OFFLOAD_NONE, 'offload: released')
        call l8_offload_destroy(off)
        call check(.not. c_associated(off%p), 'offload: destroy nulls the handle')
        call l8_tensor_destroy(va)
        call l8_tensor_destroy(vb)

        ! everything freed: the caches go back, the peaks reset
        call ok(l8_alloc_empty_cache(al), 'memory: l8_alloc_empty_cache')
        call ok(l8_pinned_empty_cache(pp), 'memory: l8_pinned_empty_cache')
        call l8_alloc_reset_peaks(al)
        call ok(l8_alloc_get_stats(al, a2), 'memory: allocator stats at the end')
        call ok(l8_pinned_get_stats(pp, p1), 'memory: pinned stats at the end')
        call check(a2%allocated_bytes == a0%allocated_bytes .and. &
                   a2%reserved_bytes == a0%reserved_bytes .and. &
                   a2%allocated_peak == a2%allocated_bytes .and. a2%segment_frees > 0, &
                   'memory: back to the start, segments given back, peaks reset')
        call check(p1%allocated_bytes == p0%allocated_bytes .and. p1%reserved_bytes == 0, &
                   'memory: the pinned pool empty')
        call l8_ctx_destroy(mc)
        open(newunit=u, file=path, status='old')
        close(u, status='delete')
    end subroutine

    ! -- 19, offload through Linear layers: the resume test's model trained
    ! three steps with its saved tensors offloaded equals the same training
    ! without, bit for bit.
    subroutine offload_linear()
        type(fp8_model) :: m1, m2
        type(l8_offload) :: off
        type(l8_offload_stats) :: os
        real(real64) :: l1(3), l2(3)
        real(c_float) :: w1(K, N), w2(K, N)
        integer :: s
        call ok(l8_offload_create(ctx, off, min_bytes=0_c_int64_t), 'offload linear: create')
        call build(m1, 11)
        call build(m2, 11, off)
        do s = 1, 3
            l1(s) = train_step(m1, s)
            l2(s) = train_step(m2, s, off)
        end do
        call get_f32(l8_params_master(m1%g, m1%wid(1)), w1, 'offload linear: w1')
        call get_f32(l8_params_master(m2%g, m2%wid(1)), w2, 'offload linear: w2')
        call check(all(l1 == l2) .and. same_bits(w1, w2), &
                   'offload linear: losses and weights equal those without offload')
        call ok(l8_offload_get_stats(off, os), 'offload linear: stats')
        call check(os%copies_out > 0 .and. os%released > 0 .and. os%copies_in > 0 .and. &
                   os%entries == 0, 'offload linear: saves went out and came back')
        call destroy(m1)
        call destroy(m2)
        call l8_offload_destroy(off)
    end subroutine

    ! -- 20. Events: the GPU's time between two, done after a wait, records
    ! refused on another context's stream or a stream that is not one.
    subroutine events()
        type(l8_event) :: e0, e1, plain
        type(l8_ctx) :: hc
        type(l8_tensor) :: a, b
        real(c_float) :: ms
        real(c_float), allocatable :: av(:, :)
        logical :: done, gpu
        integer(c_int) :: st
        character(len=:), allocatable :: msg
        integer :: i
        gpu = l8_ctx_device(ctx) >= 0
        allocate(av(512, 512))
        av = 0.5
        call ok(l8_tensor_from_array(ctx, av, a), 'events: a')
        call ok(l8_tensor_empty(ctx, L8_F32, [512, 512], b), 'events: b')
        call ok(l8_event_create(ctx, e0, timing=.true.), 'events: a timing event')
        call ok(l8_event_create(ctx, e1, timing=.true.), 'events: another')
        call ok(l8_event_create(ctx, plain), 'events: one without timing')
        call ok(l8_event_record(e0, ctx), 'events: record on compute')
        do i = 1, 8
            call ok(l8_gelu(a, b), 'events: gelu')
        end do
        call ok(l8_event_record(e1, ctx), 'events: record after the work')
        call ok(l8_event_record(plain, ctx, L8_STREAM_COPY), 'events: record on copy')
        call ok(l8_event_synchronize(e1), 'events: wait')
        call ok(l8_event_query(e1, done), 'events: query')
        call check(done, 'events: done after the wait')
        call ok(l8_event_elapsed_ms(e0, e1, ms), 'events: elapsed')
        call check((gpu .and. ms > 0) .or. (.not. gpu .and. ms == 0), &
                   'events: the GPU time of 8 GELUs (0 on the host)')
        st = l8_event_elapsed_ms(e0, plain, ms)
        call check((gpu .and. st == L8_ERR_CUDA) .or. (.not. gpu .and. st == L8_OK), &
                   'events: no time with an event without timing (on a GPU)')
        st = l8_event_record(e0, ctx, 3)
        msg = l8_last_error_message()
        call check(st == L8_ERR_INVALID_ARG .and. index(msg, 'L8_STREAM_COMPUTE') > 0, &
                   'events: stream 3 refused, the message says which are streams')
        call ok(l8_ctx_create(hc, 'host'), 'events: a host context')
        call check(l8_event_record(e0, hc) == L8_ERR_INVALID_ARG, &
                   'events: a stream of another context refused')
        call l8_ctx_destroy(hc)
        call l8_event_destroy(e0)
        call l8_event_destroy(e1)
        call l8_event_destroy(plain)
        call check(.not. c_associated(plain%p), 'events: destroy nulls the handle')
        call l8_tensor_destroy(a)
        call l8_tensor_destroy(b)
    end subroutine

    ! -- 21. A grad-ready consumer of one's own and the ready table: a bf16
    ! layer's two reports reach it, it changes the gradients in place through
    ! their addresses, the spare parameter that never reports is named, an
    ! error it returns comes back from backward, zero_grad clears both.
    subroutine ready_table()
        type(ready_log), target :: log
        type(l8_params) :: gr
        type(l8_gemm_handle) :: gh
        type(l8_linear) :: la
        type(l8_linear_ctx) :: sv
        type(l8_tensor) :: xa, ya, dya
        integer(c_int) :: wi, bi, si, st, counts(4), nmiss
        logical :: all_in
        real(c_float) :: xv(DK, DT), dv(DN, DT), w0(DK, DN), w1(DK, DN), b0(DN, 1), b1(DN, 1)
        character(len=:), allocatable :: msg
        integer :: i, j
        do j = 1, DT
            do i = 1, DK
                xv(i, j) = real(mod(5 * i + 3 * j, 11) - 5, c_float) / 4
            end do
            do i = 1, DN
                dv(i, j) = real(mod(3 * i + 7 * j, 9) - 4, c_float) / 8
            end do
        end do
        call ok(l8_gemm_handle_create(ctx, gh), 'ready: gemm')
        call model(ctx, gh, gr, la, wi, bi, si, 'ra', report=.true.)
        call bf16_in(ctx, xv, xa)
        call bf16_in(ctx, dv, dya)
        call ok(l8_tensor_empty(ctx, L8_BF16, [DN, DT], ya), 'ready: y')
        ! without a consumer: the gradients, and the table
        call ok(l8_linear_forward(la, xa, ya, sv), 'ready: forward')
        call ok(l8_linear_backward(la, sv, dya), 'ready: backward')
        call get_f32(l8_params_main_grad(gr, wi), w0, 'ready: dW')
        call get_f32(l8_params_main_grad(gr, bi), b0, 'ready: db')
        counts = [l8_params_ready_count(gr, wi), l8_params_ready_count(gr, bi), &
                  l8_params_ready_count(gr, si), l8_params_ready_count(gr, 99)]
        call check(all(counts == [1, 1, 0, -1]), 'ready: one report each, none of the spare')
        all_in = l8_params_all_ready(gr)
        nmiss = l8_params_missing_count(gr)
        call check(.not. all_in .and. nmiss == 1, 'ready: one missing')
        msg = l8_params_describe_missing(gr)
        call check(msg == 'ra.spare', 'ready: the missing one named: ' // msg)
        st = l8_params_check_all_ready(gr)
        msg = l8_last_error_message()
        call check(st == L8_ERR_STATE .and. index(msg, 'ra.spare') > 0, &
                   'ready: check_all_ready names it: ' // msg)
        call l8_params_reset_ready(gr)
        call check(l8_params_missing_count(gr) == 3, 'ready: reset: three missing')
        ! the consumer doubles each gradient as it comes
        log%g = gr
        log%gpu = l8_ctx_device(ctx) >= 0
        call ok(l8_params_set_grad_ready_cb(gr, c_funloc(on_ready), c_loc(log)), 'ready: consumer')
        call ok(l8_linear_begin_step(la), 'ready: begin_step')
        call ok(l8_linear_forward(la, xa, ya, sv), 'ready: forward 2')
        call ok(l8_linear_backward(la, sv, dya), 'ready: backward 2')
        call get_f32(l8_params_main_grad(gr, wi), w1, 'ready: dW 2')
        call get_f32(l8_params_main_grad(gr, bi), b1, 'ready: db 2')
        call check(log%n == 2 .and. any(log%ids(1:2) == wi) .and. any(log%ids(1:2) == bi), &
                   'ready: the consumer heard the weight and the bias')
        call check(same_bits(w1, 2 * w0) .and. same_bits(b1, 2 * b0) .and. any(w0 /= 0), &
                   'ready: it changed them in place')
        ! an error from the consumer comes back from backward
        log%fail = .true.
        call ok(l8_linear_begin_step(la), 'ready: begin_step 3')
        call ok(l8_linear_forward(la, xa, ya, sv), 'ready: forward 3')
        call check(l8_linear_backward(la, sv, dya) == L8_ERR_STATE, &
                   'ready: the error of the consumer from backward')
        call l8_linear_ctx_destroy(sv)
        ! removed: reports go on into the table only
        call ok(l8_params_set_grad_ready_cb(gr, c_null_funptr), 'ready: no consumer')
        call ok(l8_linear_begin_step(la), 'ready: begin_step 4')
        call ok(l8_linear_forward(la, xa, ya, sv), 'ready: forward 4')
        call ok(l8_linear_backward(la, sv, dya), 'ready: backward 4')
        call check(log%n == 2, 'ready: a removed consumer hears nothing')
        call ok(l8_params_zero_grad(gr), 'ready: zero_grad')
        call get_f32(l8_params_main_grad(gr, wi), w1, 'ready: dW zeroed')
        nmiss = l8_params_missing_count(gr)
        call check(all(w1 == 0) .and. nmiss == 3, &
                   'ready: zero_grad clears the gradients and the table')
        call check(l8_tensor_numel(l8_params_grad_flat(gr)) >= DK * DN + DN + DS, &
                   'ready: the flat gradient buffer holds them all')
        call l8_tensor_destroy(xa)
        call l8_tensor_destroy(ya)
        call l8_tensor_destroy(dya)
        call l8_linear_destroy(la)
        call l8_params_destroy(gr)
        call l8_gemm_handle_destroy(gh)
    end subroutine

    ! -- 16. Unset handles (the C NULL) everywhere: every call that needs the
    ! object returns L8_ERR_INVALID_ARG with a message naming it, every query
    ! its documented answer for nothing, and none of them may crash.
    subroutine unset_handles()
        use, intrinsic :: ieee_arithmetic, only: ieee_is_nan
        type(l8_ctx) :: c0
        type(l8_tensor) :: t0, u0, v0, w0, tv
        type(l8_fp8_meta) :: m0
        type(l8_params) :: g0
        type(l8_gemm_handle) :: h0
        type(l8_recipe) :: r0
        type(l8_linear) :: l0
        type(l8_linear_ctx) :: s0
        type(l8_optim) :: o0
        type(l8_ckpt_writer) :: cw0
        type(l8_ckpt_reader) :: cr0
        type(l8_comm) :: k0, k1
        type(l8_comm_id) :: id0
        type(l8_ddp) :: d0
        type(l8_graph) :: gr0
        type(l8_alloc) :: al0
        type(l8_pinned) :: pp0
        type(l8_trace) :: tr0
        type(l8_offload) :: of0
        type(l8_alloc_stats) :: ast
        type(l8_pinned_stats) :: pst
        type(l8_offload_stats) :: ost
        type(l8_trace_event) :: ev(2)
        type(l8_event) :: e0
        type(c_ptr) :: pp
        logical :: done
        real(c_float) :: a(4, 4), f1, f2, f3
        integer(c_int64_t) :: i1, i2, off(2), num(2)
        integer(c_int) :: pid
        integer :: n
        logical :: skipped
        character(kind=c_char, len=:), allocatable :: text
        a = 1
        ! queries: nothing, not a crash
        call check(l8_ctx_device_name(c0) == '', 'unset: the device name of no context is ""')
        call check(l8_tensor_numel(t0) == 0, 'unset: numel 0')
        call check(size(l8_tensor_dims(t0)) == 0, 'unset: no dims')
        call check(l8_tensor_dtype(t0) == -1, 'unset: dtype -1')
        m0 = l8_tensor_fp8_meta(t0)
        call check(.not. c_associated(m0%p), 'unset: no FP8 meta')
        tv = l8_params_master(g0, 0)
        call check(.not. c_associated(tv%p), 'unset: no master tensor')
        tv = l8_params_main_grad(g0, 0)
        call check(.not. c_associated(tv%p), 'unset: no main_grad')
        tv = l8_params_master_flat(g0)
        call check(.not. c_associated(tv%p), 'unset: no flat master')
        call check(l8_recipe_count(r0) == 0, 'unset: a recipe of 0 rows')
        m0 = l8_recipe_meta(r0, 0)
        call check(.not. c_associated(m0%p), 'unset: no recipe meta')
        call check(l8_recipe_dtype(r0, L8_ROLE_INPUT) == -1, 'unset: recipe dtype -1')
        call check(l8_recipe_history_len(r0) == 0, 'unset: history 0')
        call check(l8_recipe_role_name(r0, 0) == '', 'unset: no role name')
        call check(l8_recipe_updates(r0) == 0, 'unset: 0 updates')
        call check(l8_linear_role_index(l0, L8_ROLE_INPUT) == -1, 'unset: role index -1')
        f1 = l8_optim_lr(o0)
        call check(ieee_is_nan(f1), 'unset: the rate of no optimizer is NaN')
        tv = l8_optim_cursor(o0)
        call check(.not. c_associated(tv%p), 'unset: no cursor')
        call check(l8_optim_state_count(o0) == 0, 'unset: 0 states')
        call check(l8_optim_state_name(o0, 0) == '', 'unset: no state name')
        tv = l8_optim_state(o0, 0)
        call check(.not. c_associated(tv%p), 'unset: no state')
        call check(.not. l8_ckpt_has(cr0, 'x'), 'unset: a reader of nothing has nothing')
        call check(l8_ckpt_section_bytes(cr0, 'x') == -1, 'unset: section bytes -1')
        call check(l8_comm_rank(k0) == -1, 'unset: rank -1')
        call check(l8_comm_size(k0) == 0, 'unset: size 0')
        call check(.not. l8_graph_native(c0), 'unset: no CUDA graphs without a context')
        call check(l8_linear_in_features(l0) == 0, 'unset: in_features 0')
        call check(l8_linear_out_features(l0) == 0, 'unset: out_features 0')
        call check(.not. l8_optim_is_sharded(o0), 'unset: not sharded')
        call check(l8_optim_shard_count(o0) == -1, 'unset: shard count -1')
        call check(l8_optim_shard_numel(o0) == -1, 'unset: shard numel -1')
        call check(l8_optim_state_bytes(o0) == 0, 'unset: 0 state bytes')
        call check(l8_ctx_device(c0) == -1, 'unset: device -1')
        call check(l8_params_ready_count(g0, 0) == -1, 'unset: ready count -1')
        call check(.not. l8_params_all_ready(g0), 'unset: not all ready')
        call check(l8_params_missing_count(g0) == 0, 'unset: 0 missing')
        call check(l8_params_describe_missing(g0) == '', 'unset: no missing names')
        tv = l8_params_grad_flat(g0)
        call check(.not. c_associated(tv%p), 'unset: no flat gradient')
        al0 = l8_ctx_allocator(c0)
        pp0 = l8_ctx_pinned(c0)
        tr0 = l8_ctx_trace(c0)
        call check(.not. (c_associated(al0%p) .or. c_associated(pp0%p) .or. c_associated(tr0%p)), &
                   'unset: no allocator, pinned pool or trace')
        call check(l8_alloc_describe(al0) == '', 'unset: no allocator to describe')
        call check(l8_trace_path(tr0) == '', 'unset: no trace path')
        call check(l8_trace_count(tr0) == 0, 'unset: 0 events counted')
        call check(l8_trace_held(tr0) == 0, 'unset: 0 events held')
        call check(l8_trace_events(tr0, 0_c_int64_t, ev) == 0, 'unset: 0 events copied')
        call check(l8_trace_tag_name(tr0, 1_c_int32_t) == '', 'unset: no tag name')
        call check(l8_trace_flush(tr0) == L8_OK, 'unset: flushing no trace is L8_OK')
        call check(l8_offload_state_of(of0, t0) == L8_OFFLOAD_NONE, 'unset: offload state none')
        call check(l8_offload_state_name(99) == 'invalid', 'unset: state 99 is "invalid"')
        ! calls that need the object
        call refused(l8_ctx_synchronize(c0), 'ctx_synchronize')
        call refused(l8_tensor_empty(c0, L8_F32, [4, 4], tv), 'tensor_empty')
        call refused(l8_tensor_from_array(c0, a, tv), 'tensor_from_array')
        call refused(l8_tensor_copy_from_array(t0, a), 'tensor_copy_from_array')
        call refused(l8_tensor_to_array(t0, a), 'tensor_to_array')
        call refused(l8_tensor_section(t0, 1, 1, 2, tv), 'tensor_section')
        call refused(l8_tensor_reshape(t0, [16], tv), 'tensor_reshape')
        call refused(l8_tensor_transpose(t0, 1, 2, tv), 'tensor_transpose')
        call refused(l8_tensor_copy(t0, u0), 'tensor_copy')
        call refused(l8_tensor_contiguous(t0, tv), 'tensor_contiguous')
        call refused(l8_fp8_meta_create(c0, m0), 'fp8_meta_create')
        call refused(l8_fp8_meta_get(m0, f1, f2, f3), 'fp8_meta_get')
        call refused(l8_fp8_meta_set(m0, 1.0, 1.0, 0.0), 'fp8_meta_set')
        call refused(l8_tensor_set_fp8_meta(t0, m0), 'tensor_set_fp8_meta')
        call refused(l8_params_create(c0, g0), 'params_create')
        call refused(l8_params_add(g0, 'w', [4, 4], pid), 'params_add')
        call refused(l8_params_finalize(g0), 'params_finalize')
        call refused(l8_params_init_uniform(g0, 0, -1.0, 1.0, 1_c_int64_t), 'params_init_uniform')
        call refused(l8_params_init_kaiming_uniform(g0, 0, 1.0, 1_c_int64_t), 'params_init_kaiming')
        call refused(l8_gemm_handle_create(c0, h0), 'gemm_handle_create')
        call refused(l8_recipe_create(c0, r0), 'recipe_create')
        call refused(l8_recipe_update(r0), 'recipe_update')
        call refused(l8_recipe_state(r0, tv), 'recipe_state')
        call refused(l8_recipe_push_scales(r0), 'recipe_push_scales')
        call refused(l8_recipe_set_reduce(r0, k0), 'recipe_set_reduce')
        call refused(l8_fp8_cast(t0, u0), 'fp8_cast')
        call refused(l8_fp8_cast_transpose(t0, u0, v0), 'fp8_cast_transpose')
        call refused(l8_fp8_cast_transpose_dbias(t0, u0, v0, w0), 'fp8_cast_transpose_dbias')
        call refused(l8_fp8_dequantize(t0, u0), 'fp8_dequantize')
        call refused(l8_fp8_cast_transpose_act(L8_ACT_GELU, t0, u0, v0), 'fp8_cast_transpose_act')
        call refused(l8_fp8_cast_transpose_dact(L8_ACT_GELU, t0, u0, v0, w0), &
                     'fp8_cast_transpose_dact')
        call refused(l8_dbias_dact(L8_ACT_NONE, t0, u0), 'dbias_dact')
        call refused(l8_fp8_cast_transpose_many([t0], [u0]), 'fp8_cast_transpose_many')
        call refused(l8_fp8_transpose(t0, u0), 'fp8_transpose')
        call refused(l8_fp8_scale_update(t0, u0, v0, w0), 'fp8_scale_update')
        call refused(l8_linear_create(c0, 'l', h0, t0, u0, l0), 'linear_create')
        call refused(l8_linear_begin_step(l0), 'linear_begin_step')
        call refused(l8_linear_refresh_weights([l0]), 'linear_refresh_weights')
        call refused(l8_linear_forward(l0, t0, u0, s0), 'linear_forward')
        call refused(l8_linear_backward(l0, s0, t0), 'linear_backward')
        call refused(l8_linear_forward_act(l0, L8_ACT_GELU, t0, u0, s0), 'linear_forward_act')
        call refused(l8_linear_backward_act(l0, L8_ACT_GELU, s0, t0, u0), 'linear_backward_act')
        call refused(l8_linear_forward_fp8(l0, t0, y=u0), 'linear_forward_fp8')
        call refused(l8_linear_forward_gelu(l0, L8_ACT_GELU, t0, u0), 'linear_forward_gelu')
        call refused(l8_linear_backward_fp8(l0, s0, t0, u0), 'linear_backward_fp8')
        call refused(l8_linear_get_stats(l0, i1), 'linear_get_stats')
        call refused(l8_optim_create_adamw(g0, o0), 'optim_create_adamw')
        call refused(l8_optim_create_sgd(g0, o0), 'optim_create_sgd')
        call refused(l8_optim_step(o0, skipped, f1, f2, i1), 'optim_step')
        call refused(l8_optim_read_result(o0, skipped), 'optim_read_result')
        call refused(l8_optim_set_lr(o0, 0.1), 'optim_set_lr')
        call refused(l8_optim_set_lr_external(o0, .true.), 'optim_set_lr_external')
        call refused(l8_optim_push_lr(o0), 'optim_push_lr')
        call refused(l8_optim_set_lr_table(o0, t0), 'optim_set_lr_table')
        call refused(l8_optim_state_view(o0, 0, 0, tv), 'optim_state_view')
        call refused(l8_optim_get_step(o0, i1), 'optim_get_step')
        call refused(l8_optim_set_step(o0, 1_c_int64_t), 'optim_set_step')
        call refused(l8_optim_set_norm_reduce(o0, k0), 'optim_set_norm_reduce')
        call refused(l8_optim_set_shard(o0, [0_c_int64_t], [4_c_int64_t]), 'optim_set_shard')
        call refused(l8_optim_set_shard_rank(o0, 0, 1), 'optim_set_shard_rank')
        call refused(l8_optim_shard_range(o0, 0, i1, i2), 'optim_shard_range')
        call refused(l8_optim_save(o0, cw0), 'optim_save')
        call refused(l8_optim_check_load(o0, cr0), 'optim_check_load')
        call refused(l8_optim_load(o0, cr0), 'optim_load')
        call refused(l8_convert(t0, u0), 'convert')
        call refused(l8_gelu(t0, u0), 'gelu')
        call refused(l8_gelu_backward(t0, u0, v0), 'gelu_backward')
        call refused(l8_softmax_xent(t0, u0, 10, 1.0, v0, w0), 'softmax_xent')
        call refused(l8_gather_rows(t0, u0, v0), 'gather_rows')
        call refused(l8_gather_rows_at(t0, u0, v0, 1, w0), 'gather_rows_at')
        call refused(l8_put_rows_at(t0, u0, 1, v0), 'put_rows_at')
        call refused(l8_ckpt_write_tensor(cw0, 'x', t0), 'ckpt_write_tensor')
        call refused(l8_ckpt_write_section(cw0, 'x', a), 'ckpt_write_section')
        call refused(l8_ckpt_write_section(cw0, 'x', 'text'), 'ckpt_write_section (text)')
        call refused(l8_ckpt_writer_commit(cw0), 'ckpt_writer_commit')
        call refused(l8_ckpt_expect(cr0, 'k', 1), 'ckpt_expect')
        call refused(l8_ckpt_read_tensor(cr0, 'x', t0), 'ckpt_read_tensor')
        call refused(l8_ckpt_check_tensor(cr0, 'x', t0), 'ckpt_check_tensor')
        call refused(l8_ckpt_read_section(cr0, 'x', a), 'ckpt_read_section')
        call refused(l8_ckpt_read_section(cr0, 'x', text), 'ckpt_read_section (text)')
        call refused(l8_graph_create(c0, gr0), 'graph_create')
        call refused(l8_graph_warmup(gr0, c_funloc(graph_step)), 'graph_warmup')
        call refused(l8_graph_capture(gr0, c_funloc(graph_step)), 'graph_capture')
        call refused(l8_graph_launch(gr0), 'graph_launch')
        call refused(l8_graph_launch_repeat(gr0, 1), 'graph_launch_repeat')
        call refused(l8_graph_get_stats(gr0, i1), 'graph_get_stats')
        call refused(l8_comm_id_create(c0, id0), 'comm_id_create')
        call refused(l8_comm_init_rank(c0, id0, 0, 1, k1), 'comm_init_rank')
        call refused(l8_comm_init_env(c0, k1), 'comm_init_env')
        call refused(l8_comm_split(k0, 0, 0, k1), 'comm_split')
        call refused(l8_comm_grid(k0, 1, k1), 'comm_grid')
        call refused(l8_comm_check(k0), 'comm_check')
        call refused(l8_comm_barrier(k0), 'comm_barrier')
        call refused(l8_comm_all_reduce(k0, t0, u0, L8_REDUCE_SUM), 'comm_all_reduce')
        call refused(l8_comm_broadcast(k0, t0, 0), 'comm_broadcast')
        call refused(l8_comm_all_gather(k0, t0, u0, 1), 'comm_all_gather')
        call refused(l8_comm_reduce_scatter(k0, t0, u0, L8_REDUCE_SUM, 1), 'comm_reduce_scatter')
        call refused(l8_ddp_create(g0, k0, d0), 'ddp_create')
        call refused(l8_ddp_begin_micro_batch(d0, .true.), 'ddp_begin_micro_batch')
        call refused(l8_ddp_mark_unused(d0, 0), 'ddp_mark_unused')
        call refused(l8_ddp_finish(d0), 'ddp_finish')
        call refused(l8_ddp_shard_ranges(d0, off, num, n), 'ddp_shard_ranges')
        call refused(l8_ddp_gather_params(d0), 'ddp_gather_params')
        call refused(l8_ddp_wait_param(d0, 0), 'ddp_wait_param')
        call refused(l8_ddp_get_stats(d0, n), 'ddp_get_stats')
        call refused(l8_ddp_bucket(d0, 0, i1, i2), 'ddp_bucket')
        call refused(l8_alloc_get_stats(al0, ast), 'alloc_get_stats')
        call refused(l8_event_create(c0, e0), 'event_create')
        call refused(l8_params_set_grad_ready_cb(g0, c_null_funptr), 'params_set_grad_ready_cb')
        call refused(l8_params_check_all_ready(g0), 'params_check_all_ready')
        call refused(l8_params_zero_grad(g0), 'params_zero_grad')
        call refused(l8_tensor_data(t0, pp), 'tensor_data')
        call refused(l8_event_record(e0, ctx), 'event_record')
        call refused(l8_event_query(e0, done), 'event_query')
        call refused(l8_event_synchronize(e0), 'event_synchronize')
        call refused(l8_event_elapsed_ms(e0, e0, f1), 'event_elapsed_ms')
        call refused(l8_alloc_empty_cache(al0), 'alloc_empty_cache')
        call refused(l8_pinned_get_stats(pp0, pst), 'pinned_get_stats')
        call refused(l8_pinned_empty_cache(pp0), 'pinned_empty_cache')
        call refused(l8_offload_create(c0, of0), 'offload_create')
        call refused(l8_offload_forward_layer(of0, 0), 'offload_forward_layer')
        call refused(l8_offload_backward_layer(of0, 0), 'offload_backward_layer')
        call refused(l8_offload_save(of0, t0, 'x'), 'offload_save')
        call refused(l8_offload_restore(of0, t0), 'offload_restore')
        call refused(l8_offload_poll(of0), 'offload_poll')
        call refused(l8_offload_wait(of0), 'offload_wait')
        call refused(l8_offload_get_stats(of0, ost), 'offload_get_stats')
        call refused(l8_linear_create(ctx, 'l', h0, t0, u0, l0, offload=of0), &
                     'linear_create offload')
        text = l8_last_error_message()
        call check(index(text, 'offload is an unset handle') > 0, &
                   'unset: an unset offloader named as such: ' // text)
        ! releases of nothing: no-ops
        call l8_comm_abort(k0)
        call l8_tensor_destroy(t0)
        call l8_fp8_meta_release(m0)
        call l8_params_destroy(g0)
        call l8_gemm_handle_destroy(h0)
        call l8_recipe_destroy(r0)
        call l8_linear_ctx_destroy(s0)
        call l8_linear_destroy(l0)
        call l8_optim_destroy(o0)
        call l8_ckpt_writer_abort(cw0)
        call l8_ckpt_close(cr0)
        call l8_comm_destroy(k0)
        call l8_ddp_destroy(d0)
        call l8_graph_destroy(gr0)
        call l8_alloc_reset_peaks(al0)
        call l8_trace_record(tr0, L8_TRACE_STEP, -1, aux=1_c_int64_t)
        call l8_offload_release(of0, t0, 'x')
        call l8_offload_destroy(of0)
        call l8_event_destroy(e0)
        call l8_params_reset_ready(g0)
        call l8_ctx_destroy(c0)
    end subroutine

    ! st is L8_ERR_INVALID_ARG, and the last error says so.
    subroutine refused(st, what)
        integer(c_int), intent(in) :: st
        character(len=*), intent(in) :: what
        logical :: named
        named = index(l8_last_error_message(), 'L8_ERR_INVALID_ARG') == 1
        call check(st == L8_ERR_INVALID_ARG .and. named, 'unset handles: ' // what // ' refused')
    end subroutine

    ! -- 15. Raw checkpoint sections beside a tensor's.
    subroutine ckpt_sections()
        type(l8_ckpt_writer) :: w
        type(l8_ckpt_reader) :: r
        type(l8_tensor) :: xv
        real(c_float) :: f(3, 4), fb(3, 4), f5(5), xr(K, T)
        real(c_double) :: d, db
        integer(c_int32_t) :: i3(7), ib(7)
        integer(c_int64_t) :: l2(2), lb(2)
        integer(c_int8_t) :: b5(5), bb(5)
        character(kind=c_char, len=:), allocatable :: txt
        character(len=256) :: fpath
        integer :: q

        f = reshape([(real(q, c_float) / 3, q = 1, 12)], [3, 4])
        d = acos(-1.0_c_double)
        i3 = [(int(q * q - 20, c_int32_t), q = 1, 7)]
        l2 = [huge(0_c_int64_t), -huge(0_c_int64_t) + 5]
        b5 = [int(-128, c_int8_t), -1_c_int8_t, 0_c_int8_t, 1_c_int8_t, 127_c_int8_t]
        fpath = tmp_file('lean8-fortran-sections.ckpt')
        call ok(l8_tensor_from_array(ctx, x, xv), 'sections: x')
        call ok(l8_ckpt_writer_open(trim(fpath), 'fortran-sections', 1, w), 'sections: open')
        call ok(l8_ckpt_write_section(w, 'f32', f), 'sections: an f32 array')
        call ok(l8_ckpt_write_section(w, 'f64', d), 'sections: an f64 scalar')
        call ok(l8_ckpt_write_section(w, 'i32', i3), 'sections: an i32 array')
        call ok(l8_ckpt_write_section(w, 'i64', l2), 'sections: an i64 array')
        call ok(l8_ckpt_write_section(w, 'i8', b5), 'sections: an i8 array')
        call ok(l8_ckpt_write_section(w, 'config', 'lr=1e-3 batch=128'), 'sections: a text')
        call ok(l8_ckpt_write_section(w, 'empty', ''), 'sections: an empty text')
        call ok(l8_ckpt_write_tensor(w, 'x', xv), 'sections: a tensor beside them')
        call check(l8_ckpt_write_section(w, 'f32', f) == L8_ERR_INVALID_ARG, &
                   'sections: a name written twice is refused')
        call ok(l8_ckpt_writer_commit(w), 'sections: commit')
        call ok(l8_ckpt_open(trim(fpath), r), 'sections: l8_ckpt_open')
        call check(l8_ckpt_has(r, 'config'), 'sections: l8_ckpt_has a section')
        call check(l8_ckpt_has(r, 'x'), 'sections: l8_ckpt_has a tensor''s')
        call check(.not. l8_ckpt_has(r, 'nope'), 'sections: l8_ckpt_has no such one')
        call check(l8_ckpt_section_bytes(r, 'f32') == 48, 'sections: the f32 section''s 48 bytes')
        call check(l8_ckpt_section_bytes(r, 'x') == 4 * K * T, 'sections: the tensor''s bytes')
        call check(l8_ckpt_section_bytes(r, 'nope') == -1, 'sections: -1 bytes for none')
        fb = 0
        db = 0
        ib = 0
        lb = 0
        bb = 0
        call ok(l8_ckpt_read_section(r, 'f32', fb), 'sections: read f32')
        call ok(l8_ckpt_read_section(r, 'f64', db), 'sections: read f64')
        call ok(l8_ckpt_read_section(r, 'i32', ib), 'sections: read i32')
        call ok(l8_ckpt_read_section(r, 'i64', lb), 'sections: read i64')
        call ok(l8_ckpt_read_section(r, 'i8', bb), 'sections: read i8')
        call check(all(fb == f) .and. db == d .and. all(ib == i3) .and. all(lb == l2) .and. &
                   all(bb == b5), 'sections: every array and scalar back exactly')
        call ok(l8_ckpt_read_section(r, 'config', txt), 'sections: read the text')
        call check(txt == 'lr=1e-3 batch=128' .and. len(txt) == 17, 'sections: the text back')
        call ok(l8_ckpt_read_section(r, 'empty', txt), 'sections: read the empty text')
        call check(len(txt) == 0, 'sections: the empty text back')
        call ok(l8_ckpt_read_section(r, 'x', xr), 'sections: a tensor''s section read raw')
        call check(all(xr == x), 'sections: the raw bytes of x(K, T) are x')
        f5 = 7
        call check(l8_ckpt_read_section(r, 'f32', f5) == L8_ERR_INVALID_ARG, &
                   'sections: a read of the wrong length is refused')
        call check(all(f5 == 7), 'sections: the refused read left the array alone')
        call check(l8_ckpt_read_section(r, 'nope', txt) == L8_ERR_INVALID_ARG, &
                   'sections: a missing text is refused')
        call check(l8_ckpt_read_section(r, 'nope', fb) == L8_ERR_INVALID_ARG, &
                   'sections: a missing array is refused')
        call l8_ckpt_close(r)
        call l8_tensor_destroy(xv)
        open(newunit=q, file=trim(fpath), status='old')
        close(q, status='delete')
    end subroutine

    ! -- 10. Resume bit for bit. Run a trains NS steps; run b trains KS,
    !    saves what lean8-train saves (docs/training-loop.md, Checkpoints),
    !    and is destroyed; run c is built anew (other initial weights: only
    !    the file can make it b), restored, and trains steps KS + 1 .. NS.
    !    An evaluation forward after step KS leaves amaxes in the metas that
    !    the next recipe update folds in, so the metas are state too.
    subroutine resume()
        integer, parameter :: NS = 6, KS = 3
        type(fp8_model) :: ma, mb, mc
        type(l8_tensor) :: bad_t, v
        type(l8_ckpt_reader) :: r
        real(c_float), allocatable :: wa(:), wb(:), st0(:), st1(:)
        real(c_float) :: fmax(NR8), vk(K, N)
        real(real64) :: la(NS), lc(NS)
        integer(c_int64_t) :: stp
        character(len=256) :: cpath
        integer :: s, u

        cpath = tmp_file('lean8-fortran-resume.ckpt')

        ! a: NS steps without a stop (the evaluation after step KS as b does it)
        call build(ma, 11)
        do s = 1, NS
            la(s) = train_step(ma, s)
            if (s == KS) call evaluate(ma)
        end do
        call ok(l8_optim_get_step(ma%opt, stp), 'resume: l8_optim_get_step')
        call check(stp == NS, 'resume: the step counter counted every step')
        allocate(wa(l8_tensor_numel(l8_params_master_flat(ma%g))))
        allocate(wb(size(wa)), st0(size(wa)), st1(size(wa)))
        call ok(l8_tensor_to_array(l8_params_master_flat(ma%g), wa), 'resume: master of a')

        ! the state the optimizer and the recipe hand out
        call check(l8_optim_state_count(ma%opt) == 2, 'resume: AdamW has two state buffers')
        call check(l8_optim_state_name(ma%opt, 0) == 'exp_avg', 'resume: state 0 is exp_avg')
        call check(l8_optim_state_name(ma%opt, 1) == 'exp_avg_sq', 'resume: state 1 is exp_avg_sq')
        call check(all(l8_tensor_dims(l8_optim_state(ma%opt, 1)) == [size(wa)]), &
                   'resume: a state buffer is laid out as the flat master buffer')
        call ok(l8_tensor_to_array(l8_optim_state(ma%opt, 0), st0), 'resume: exp_avg')
        call ok(l8_optim_state_view(ma%opt, 0, ma%wid(1), v), 'resume: l8_optim_state_view')
        call check(all(l8_tensor_dims(v) == [K, N]), 'resume: a state view has the weight''s Fortran dims')
        call ok(l8_tensor_to_array(v, vk), 'resume: the view''s values')
        call check(any(vk /= 0) .and. any(st0 /= 0), 'resume: exp_avg has content')
        call l8_tensor_destroy(v)
        call ok(l8_recipe_state(ma%rc, fp8_max=v), 'resume: l8_recipe_state(fp8_max=)')
        call ok(l8_tensor_to_array(v, fmax), 'resume: fp8_max')
        call check(all(fmax == [448, 448, 57344, 448, 448, 57344]), &
                   'resume: fp8_max per role row (E4M3, E4M3, E5M2 per layer)')
        call l8_tensor_destroy(v)

        ! bad indices and steps: refused, nothing changed, no crash
        bad_t = l8_optim_state(ma%opt, 2)
        call check(.not. c_associated(bad_t%p), 'resume: no state buffer 2 (0-based: AdamW has 0, 1)')
        bad_t = l8_optim_state(ma%opt, -1)
        call check(.not. c_associated(bad_t%p), 'resume: no state buffer -1')
        call check(l8_tensor_to_array(bad_t, st1) == L8_ERR_INVALID_ARG, &
                   'resume: copying a bad state index out is refused')
        call check(l8_optim_state_name(ma%opt, 2) == '', 'resume: no name for state 2')
        call check(l8_optim_state_view(ma%opt, 2, ma%wid(1), v) == L8_ERR_INVALID_ARG, &
                   'resume: l8_optim_state_view of state 2 is refused')
        call check(.not. c_associated(v%p), 'resume: a refused view is null')
        call check(l8_optim_state_view(ma%opt, 0, 99_c_int, v) == L8_ERR_INVALID_ARG, &
                   'resume: l8_optim_state_view of parameter 99 is refused')
        call check(l8_optim_set_step(ma%opt, -1_c_int64_t) == L8_ERR_INVALID_ARG, &
                   'resume: a negative step is refused')
        call check(index(l8_last_error_message(), '-1 as a signed count') > 0, &
                   'resume: the message says why: ' // l8_last_error_message())
        call ok(l8_optim_get_step(ma%opt, stp), 'resume: the step after the refusal')
        call check(stp == NS, 'resume: a refused step leaves the counter')
        call check(l8_optim_get_step(l8_optim(), stp) == L8_ERR_INVALID_ARG, &
                   'resume: l8_optim_get_step of a null optimizer is refused')
        call check(l8_optim_state_count(l8_optim()) == 0, 'resume: no state for a null optimizer')
        call check(l8_recipe_state(l8_recipe(), v) == L8_ERR_INVALID_ARG, &
                   'resume: l8_recipe_state of a null recipe is refused')
        call destroy(ma)

        ! b: KS steps, the evaluation, save, destroy
        call build(mb, 11)
        do s = 1, KS
            lc(s) = train_step(mb, s)
        end do
        call evaluate(mb)
        call save(mb, trim(cpath))
        call check(l8_ckpt_open(trim(cpath), r) == L8_OK, 'resume: the checkpoint opens')
        bad_t = l8_optim_state(mb%opt, 2)
        call check(l8_ckpt_check_tensor(r, 'optim.exp_avg', bad_t) == L8_ERR_INVALID_ARG, &
                   'resume: l8_ckpt_check_tensor into a bad state index is refused')
        call check(l8_ckpt_read_tensor(r, 'optim.exp_avg', bad_t) == L8_ERR_INVALID_ARG, &
                   'resume: l8_ckpt_read_tensor into a bad state index is refused')
        call check(l8_ckpt_check_tensor(r, 'optim.exp_avg', l8_params_master(mb%g, mb%wid(1))) &
                   == L8_ERR_INVALID_ARG, 'resume: l8_ckpt_check_tensor of another shape is refused')
        call l8_ckpt_close(r)
        call destroy(mb)

        ! c: built anew with other weights, restored, the remaining steps
        call build(mc, 23)
        call restore(mc, trim(cpath))
        call ok(l8_optim_get_step(mc%opt, stp), 'resume: the restored step')
        call check(stp == KS, 'resume: the step counter restored')
        do s = KS + 1, NS
            lc(s) = train_step(mc, s)
        end do
        call ok(l8_tensor_to_array(l8_params_master_flat(mc%g), wb), 'resume: master of c')
        call check(all(transfer(wa, [0_c_int32_t]) == transfer(wb, [0_c_int32_t])), &
                   'resume: master after k steps + restore + N - k steps = N steps, bit for bit')
        call check(all(transfer(la(KS + 1:), [0_c_int64_t]) == transfer(lc(KS + 1:), [0_c_int64_t])), &
                   'resume: the losses of the steps after the restore, bit for bit')
        call check(all(la(1:KS) == lc(1:KS)), 'resume: the losses before the stop')
        call check(la(NS) /= la(1), 'resume: the loss moved')
        call destroy(mc)
        open(newunit=u, file=trim(cpath), status='old')
        close(u, status='delete')
        deallocate(wa, wb, st0, st1)
    end subroutine

    ! The model on ctx: initial weights from seed, a recipe (HYBRID), AdamW.
    subroutine build(m, seed, off)
        type(fp8_model), intent(out) :: m
        integer, intent(in) :: seed
        type(l8_offload), intent(in), optional :: off
        integer, parameter :: din(2) = [K, N]
        integer :: l
        call ok(l8_params_create(ctx, m%g), 'model: l8_params_create')
        do l = 1, 2
            call ok(l8_params_add(m%g, 'fc' // achar(48 + l) // '.weight', [din(l), N], m%wid(l)), &
                    'model: add weight')
            call ok(l8_params_add(m%g, 'fc' // achar(48 + l) // '.bias', [N], m%bid(l)), 'model: add bias')
        end do
        call ok(l8_params_finalize(m%g), 'model: finalize')
        do l = 1, 2
            call ok(l8_params_init_kaiming_uniform(m%g, m%wid(l), sqrt(5.0_c_float), &
                                                   int(seed + l, c_int64_t)), 'model: init weight')
            call ok(l8_params_init_uniform(m%g, m%bid(l), -0.2_c_float, 0.2_c_float, &
                                           int(seed + 7 * l, c_int64_t)), 'model: init bias')
        end do
        call ok(l8_optim_create_adamw(m%g, m%opt, lr=2e-2_c_float, weight_decay=0.01_c_float), &
                'model: adamw')
        call ok(l8_gemm_handle_create(ctx, m%gemm), 'model: gemm')
        call ok(l8_recipe_create(ctx, m%rc), 'model: recipe')
        do l = 1, 2
            call ok(l8_linear_create(ctx, 'fc' // achar(48 + l), m%gemm, l8_params_master(m%g, m%wid(l)), &
                                     l8_params_main_grad(m%g, m%wid(l)), m%lin(l), recipe=m%rc, &
                                     bias=l8_params_master(m%g, m%bid(l)), &
                                     bias_grad=l8_params_main_grad(m%g, m%bid(l)), &
                                     weight_id=m%wid(l), bias_id=m%bid(l), offload=off), &
                    'model: linear')
        end do
        call ok(l8_tensor_empty(ctx, L8_F32, [K, T], m%xf), 'model: xf')
        call ok(l8_tensor_empty(ctx, L8_BF16, [K, T], m%xb), 'model: xb')
        call ok(l8_tensor_empty(ctx, L8_I32, [T], m%labels), 'model: labels')
        call ok(l8_tensor_empty(ctx, L8_F32, [T], m%loss), 'model: loss')
        call ok(l8_tensor_empty(ctx, L8_I32, [T], m%hit), 'model: hit')
        do l = 1, 2
            call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], m%pre(l)), 'model: pre')
            call ok(l8_tensor_empty(ctx, L8_BF16, [N, T], m%grad(l)), 'model: grad')
        end do
    end subroutine

    subroutine destroy(m)
        type(fp8_model), intent(inout) :: m
        integer :: l
        do l = 1, 2
            call l8_linear_destroy(m%lin(l))
            call l8_tensor_destroy(m%pre(l))
            call l8_tensor_destroy(m%grad(l))
        end do
        call l8_tensor_destroy(m%xf)
        call l8_tensor_destroy(m%xb)
        call l8_tensor_destroy(m%labels)
        call l8_tensor_destroy(m%loss)
        call l8_tensor_destroy(m%hit)
        call l8_optim_destroy(m%opt)
        call l8_recipe_destroy(m%rc)
        call l8_gemm_handle_destroy(m%gemm)
        call l8_params_destroy(m%g)
    end subroutine

    ! The batch of step s (scaled by amp), the same in every run.
    subroutine batch(m, s, amp)
        type(fp8_model), intent(inout) :: m
        integer, intent(in) :: s
        real(c_float), intent(in) :: amp
        real(c_float) :: xv(K, T)
        integer(c_int32_t) :: lab(T)
        integer :: ii, jj
        do jj = 1, T
            do ii = 1, K
                xv(ii, jj) = amp * real(mod(ii * s + 3 * jj, 13) - 6, c_float) / 4
            end do
            lab(jj) = int(mod(jj + s, 10), c_int32_t)
        end do
        call ok(l8_tensor_copy_from_array(m%xf, xv), 'model: x in')
        call ok(l8_tensor_copy_from_array(m%labels, lab), 'model: labels in')
        call ok(l8_convert(m%xf, m%xb), 'model: x to bf16')
    end subroutine

    ! One training step on batch s: its summed loss.
    ! With off (the offloader the layers were built with), layer by layer.
    real(real64) function train_step(m, s, off) result(total)
        type(fp8_model), intent(inout) :: m
        integer, intent(in) :: s
        type(l8_offload), intent(in), optional :: off
        type(l8_linear_ctx) :: sv(2)
        real(c_float) :: rl(T)
        call batch(m, s, 1.0_c_float)
        call ok(l8_linear_begin_step(m%lin(1)), 'model: begin_step 1')
        call ok(l8_linear_begin_step(m%lin(2)), 'model: begin_step 2')
        if (present(off)) call ok(l8_offload_forward_layer(off, 0), 'model: offload layer 0')
        call ok(l8_linear_forward(m%lin(1), m%xb, m%pre(1), sv(1)), 'model: forward 1')
        if (present(off)) call ok(l8_offload_forward_layer(off, 1), 'model: offload layer 1')
        call ok(l8_linear_forward_act(m%lin(2), L8_ACT_GELU, m%pre(1), m%pre(2), sv(2)), 'model: forward 2')
        call ok(l8_softmax_xent(m%pre(2), m%labels, 10, 1.0_c_float / T, m%loss, m%hit, &
                                dlogits=m%grad(2)), 'model: loss')
        if (present(off)) call ok(l8_offload_backward_layer(off, 1), 'model: back layer 1')
        call ok(l8_linear_backward(m%lin(2), sv(2), m%grad(2), m%grad(1)), 'model: backward 2')
        if (present(off)) call ok(l8_offload_backward_layer(off, 0), 'model: back layer 0')
        call ok(l8_linear_backward_act(m%lin(1), L8_ACT_GELU, sv(1), m%grad(1), m%pre(1)), &
                'model: backward 1')
        call ok(l8_optim_step(m%opt), 'model: step')
        call ok(l8_recipe_update(m%rc), 'model: recipe update')
        call ok(l8_tensor_to_array(m%loss, rl), 'model: losses')
        total = sum(real(rl, real64))
    end function

    ! An inference forward on a larger batch: its casts leave amaxes in the
    ! metas for the next update.
    subroutine evaluate(m)
        type(fp8_model), intent(inout) :: m
        call batch(m, 100, 3.0_c_float)
        call ok(l8_linear_forward(m%lin(1), m%xb, m%pre(1)), 'model: eval forward 1')
        call ok(l8_linear_forward_act(m%lin(2), L8_ACT_GELU, m%pre(1), m%pre(2)), 'model: eval forward 2')
    end subroutine

    ! What lean8-train saves: the master buffer, "optim.<state name>" for each
    ! state buffer, "optim.step" (its 8 bytes, a u8 tensor), the recipe's
    ! amax_history, scale and amax, and the metas (scale, scale_inv, amax
    ! per role: f32 [3, N]).
    subroutine save(m, path)
        type(fp8_model), intent(in) :: m
        character(len=*), intent(in) :: path
        type(l8_ckpt_writer) :: w
        type(l8_tensor) :: hist, scale, amax, mv, stt
        real(c_float) :: metas(3, NR8)
        integer(c_int64_t) :: stp
        integer :: kk
        call ok(l8_ckpt_writer_open(path, 'fortran-resume', 1, w), 'save: open')
        call ok(l8_ckpt_write_tensor(w, 'params.master', l8_params_master_flat(m%g)), 'save: master')
        do kk = 0, l8_optim_state_count(m%opt) - 1
            call ok(l8_ckpt_write_tensor(w, 'optim.' // l8_optim_state_name(m%opt, kk), &
                                         l8_optim_state(m%opt, kk)), 'save: optimizer state')
        end do
        call check(l8_ckpt_write_tensor(w, 'optim.bad', l8_optim_state(m%opt, 2)) == L8_ERR_INVALID_ARG, &
                   'save: writing a bad state index is refused (the writer goes on)')
        call ok(l8_optim_get_step(m%opt, stp), 'save: step')
        call ok(l8_tensor_from_array(ctx, transfer(stp, [0_c_int8_t]), stt), 'save: step bytes')
        call ok(l8_ckpt_write_tensor(w, 'optim.step', stt), 'save: write step')
        call ok(l8_recipe_state(m%rc, hist, scale, amax), 'save: l8_recipe_state')
        call check(all(l8_tensor_dims(hist) == [1024, NR8]), 'save: amax_history has Fortran dims [H, N]')
        call ok(l8_ckpt_write_tensor(w, 'recipe.amax_history', hist), 'save: amax_history')
        call ok(l8_ckpt_write_tensor(w, 'recipe.scale', scale), 'save: scale')
        call ok(l8_ckpt_write_tensor(w, 'recipe.amax', amax), 'save: amax')
        do kk = 1, NR8
            call ok(l8_fp8_meta_get(l8_recipe_meta(m%rc, kk - 1), metas(1, kk), metas(2, kk), &
                                    metas(3, kk)), 'save: meta')
        end do
        call check(any(metas(3, :) /= 0), 'save: the evaluation left amaxes in the metas')
        call ok(l8_tensor_from_array(ctx, metas, mv), 'save: metas tensor')
        call ok(l8_ckpt_write_tensor(w, 'recipe.metas', mv), 'save: metas')
        call ok(l8_ckpt_writer_commit(w), 'save: commit')
        call free_views(hist, scale, amax, mv, stt)
    end subroutine

    ! Every section checked first, then read; the step set, the scales
    ! pushed to the metas, the metas written.
    subroutine restore(m, path)
        type(fp8_model), intent(inout) :: m
        character(len=*), intent(in) :: path
        type(l8_ckpt_reader) :: r
        type(l8_tensor) :: hist, scale, amax, mv, stt
        real(c_float) :: metas(3, NR8), sc(NR8), ms
        integer(c_int8_t) :: sb(8)
        integer :: kk
        metas = 0
        sb = 0
        call ok(l8_ckpt_open(path, r), 'restore: open')
        call ok(l8_ckpt_expect(r, 'fortran-resume', 1), 'restore: expect')
        call ok(l8_recipe_state(m%rc, hist, scale, amax), 'restore: l8_recipe_state')
        call ok(l8_tensor_from_array(ctx, metas, mv), 'restore: metas tensor')
        call ok(l8_tensor_from_array(ctx, sb, stt), 'restore: step tensor')
        call sections(r, m, hist, scale, amax, stt, .false.)
        call ok(l8_ckpt_check_tensor(r, 'recipe.metas', mv), 'restore: check recipe.metas')
        ! all checked: now read
        call sections(r, m, hist, scale, amax, stt, .true.)
        call ok(l8_tensor_to_array(stt, sb), 'restore: step bytes out')
        call ok(l8_optim_set_step(m%opt, transfer(sb, 0_c_int64_t)), 'restore: l8_optim_set_step')
        call ok(l8_recipe_push_scales(m%rc), 'restore: l8_recipe_push_scales')
        call ok(l8_tensor_to_array(scale, sc), 'restore: the scales read')
        do kk = 1, NR8
            call ok(l8_fp8_meta_get(l8_recipe_meta(m%rc, kk - 1), scale=ms), 'restore: a meta''s scale')
            call check(ms == sc(kk) .and. sc(kk) /= 1, 'restore: the scale read reached the meta')
        end do
        call ok(l8_ckpt_read_tensor(r, 'recipe.metas', mv), 'restore: metas')
        call ok(l8_tensor_to_array(mv, metas), 'restore: metas out')
        do kk = 1, NR8
            call ok(l8_fp8_meta_set(l8_recipe_meta(m%rc, kk - 1), metas(1, kk), metas(2, kk), &
                                    metas(3, kk)), 'restore: meta')
        end do
        call l8_ckpt_close(r)
        call free_views(hist, scale, amax, mv, stt)
    end subroutine

    ! restore's sections that go straight into tensors: checked (reading
    ! .false.) or read, in one order.
    subroutine sections(r, m, hist, scale, amax, stt, reading)
        type(l8_ckpt_reader), intent(in) :: r
        type(fp8_model), intent(in) :: m
        type(l8_tensor), intent(in) :: hist, scale, amax, stt
        logical, intent(in) :: reading
        integer :: kk
        call ckpt_io(r, 'params.master', l8_params_master_flat(m%g), reading)
        do kk = 0, l8_optim_state_count(m%opt) - 1
            call ckpt_io(r, 'optim.' // l8_optim_state_name(m%opt, kk), l8_optim_state(m%opt, kk), &
                         reading)
        end do
        call ckpt_io(r, 'optim.step', stt, reading)
        call ckpt_io(r, 'recipe.amax_history', hist, reading)
        call ckpt_io(r, 'recipe.scale', scale, reading)
        call ckpt_io(r, 'recipe.amax', amax, reading)
    end subroutine

    subroutine ckpt_io(r, name, t, reading)
        type(l8_ckpt_reader), intent(in) :: r
        character(len=*), intent(in) :: name
        type(l8_tensor), intent(in) :: t
        logical, intent(in) :: reading
        if (reading) then
            call ok(l8_ckpt_read_tensor(r, name, t), 'restore: read ' // name)
        else
            call ok(l8_ckpt_check_tensor(r, name, t), 'restore: check ' // name)
        end if
    end subroutine

    ! The views save and restore take of the recipe state, the metas and the step.
    subroutine free_views(hist, scale, amax, mv, stt)
        type(l8_tensor), intent(inout) :: hist, scale, amax, mv, stt
        call l8_tensor_destroy(hist)
        call l8_tensor_destroy(scale)
        call l8_tensor_destroy(amax)
        call l8_tensor_destroy(mv)
        call l8_tensor_destroy(stt)
    end subroutine

    ! -- 11. Data parallel over two processes. Rank 0 makes the id, writes it
    !    to a file and starts rank 1 (this program with --ddp-rank1 FILE).
    subroutine ddp_world(rank, idfile)
        integer, intent(in) :: rank
        character(len=*), intent(in) :: idfile
        integer, parameter :: NSTEP = 2
        interface
            integer(c_int) function c_getpid() bind(c, name='getpid')
                import :: c_int
            end function
            integer(c_int) function c_setenv(name, val, over) bind(c, name='setenv')
                import :: c_int, c_char
                character(kind=c_char), intent(in) :: name(*), val(*)
                integer(c_int), value :: over
            end function
        end interface
        type(l8_ctx) :: hc
        type(l8_comm_id) :: cid
        type(l8_comm) :: dp
        type(l8_params) :: gd, gt, gz, gf, gx
        type(l8_gemm_handle) :: gh
        type(l8_linear) :: ld, lt, lz, lf, lx
        type(l8_ddp) :: d, d2
        type(l8_optim) :: ot, oz
        type(l8_recipe) :: rc
        type(l8_tensor) :: vt
        integer(c_int) :: wd, bd, sd, wt, bt, st_, wz, bz, sz, wf, bf
        integer(c_int64_t) :: off(8), num(8), first, nb
        integer :: u, cs, es, nr, buckets, inb, atf, zeroed, q
        integer(c_int64_t) :: steps
        real(c_float) :: ew(DK, DN), eb(DN), aw(DK, DN), ab(DN)
        real(c_float) :: spare(DS), mw(DK, DN), mb(DN), tw(DK, DN), tb(DN), sc(3), sc0(3), tot(1)
        real(c_float) :: w0(DK, DN)
        character(len=1024) :: exe, idp, ip
        character(len=256) :: msg

        if (rank == 0) then
            call ok(l8_ctx_create(hc, 'host'), 'ddp: a host context')
            call ok(l8_comm_id_create(hc, cid, L8_COMM_TCP), 'ddp: l8_comm_id_create (TCP)')
            write(idp, '(a, i0, a)') tmp_file('lean8-fortran-ddp.'), c_getpid(), '.id'
            open(newunit=u, file=trim(idp), access='stream', form='unformatted', status='replace')
            write(u) cid%bytes
            close(u)
            ! a dead or lost peer fails in seconds, not after the defaults (inherited by rank 1)
            u = c_setenv('L8_INIT_TIMEOUT' // c_null_char, '60' // c_null_char, 0_c_int)
            u = c_setenv('L8_COMM_TIMEOUT' // c_null_char, '120' // c_null_char, 0_c_int)
            ! the launcher's variables l8_comm_init_env reads (comm_more; RANK set by each)
            write(ip, '(a, a)') idp(1:len_trim(idp) - 3), '.init'
            u = c_setenv('L8_INIT_FILE' // c_null_char, trim(ip) // c_null_char, 1_c_int)
            u = c_setenv('WORLD_SIZE' // c_null_char, '2' // c_null_char, 1_c_int)
            u = c_setenv('RANK' // c_null_char, '0' // c_null_char, 1_c_int)
            call get_command_argument(0, exe)
            msg = ''
            es = 0
            cs = 0
            call execute_command_line("'" // trim(exe) // "' --ddp-rank1 '" // trim(idp) // "'", &
                                      wait=.false., exitstat=es, cmdstat=cs, cmdmsg=msg)
            call check(cs == 0, 'ddp: rank 1 started: ' // trim(msg))
        else
            call ok(l8_ctx_create(hc, 'host'), 'ddp rank 1: a host context')
            u = c_setenv('RANK' // c_null_char, '1' // c_null_char, 1_c_int)
            idp = idfile                             ! the stem of this run's files
            open(newunit=u, file=idfile, access='stream', form='unformatted', status='old')
            read(u) cid%bytes
            close(u)
        end if
        call ok(l8_comm_init_rank(hc, cid, rank, 2, dp), 'ddp: l8_comm_init_rank of 2')
        if (rank == 0) then                          ! rank 1 has read it: both joined
            open(newunit=u, file=trim(idp), status='old')
            close(u, status='delete')
        end if
        call check(l8_comm_size(dp) == 2, 'ddp: a world of 2')
        call check(l8_comm_rank(dp) == rank, 'ddp: the rank')
        call ok(l8_gemm_handle_create(hc, gh), 'ddp: gemm handle')

        ! every rank's gradients by a twin layer that reports to nobody
        call model(hc, gh, gt, lt, wt, bt, st_, 'twin')
        call twin_mean(hc, gt, lt, wt, bt, ew, eb)

        ! the layer reports into its group, the reducer averages
        call model(hc, gh, gd, ld, wd, bd, sd, 'dp', .true.)
        call ok(l8_ddp_create(gd, dp, d, bucket_elems=128), 'l8_ddp_create')
        call check(l8_ddp_create(gd, dp, d2) == L8_ERR_STATE, 'a second consumer of a group is refused')
        call check(l8_ddp_begin_micro_batch(l8_ddp(), .true.) == L8_ERR_INVALID_ARG, &
                   'an unset reducer is refused')
        call check(l8_ddp_mark_unused(d, 99_c_int) == L8_ERR_INVALID_ARG, 'a bad id is refused')
        call check(l8_linear_create(hc, 'x', gh, l8_params_master(gd, wd), &
                   l8_params_main_grad(gd, wd), lx, mode=L8_LINEAR_BF16, grad_ready=gx) &
                   == L8_ERR_INVALID_ARG, 'grad_ready with an unset group is refused')
        do u = 0, 1                                  ! overlapped, then all at finish
            if (u == 1) then
                call l8_ddp_destroy(d)
                call check(.not. c_associated(d%p), 'l8_ddp_destroy nulls the handle')
                call ok(l8_ddp_create(gd, dp, d, bucket_elems=128, overlap=.false.), &
                        'l8_ddp_create, overlap off')
            end if
            spare = 7
            call ok(l8_tensor_copy_from_array(l8_params_main_grad(gd, sd), spare), 'ddp: a stale spare')
            call ddp_step(hc, ld, d, rank)
            call ok(l8_tensor_to_array(l8_params_main_grad(gd, wd), aw), 'ddp: dW')
            call ok(l8_tensor_to_array(l8_params_main_grad(gd, bd), ab), 'ddp: db')
            call ok(l8_tensor_to_array(l8_params_main_grad(gd, sd), spare), 'ddp: spare')
            call check(same_bits(aw, ew), 'ddp: dW is the mean of both ranks'' dW, bit for bit')
            call check(same_bits(reshape(ab, [DN, 1]), reshape(eb, [DN, 1])), &
                       'ddp: db is the mean of both ranks'' db, bit for bit')
            call check(all(spare == 0), 'ddp: a parameter that never reported is zeroed')
            call ok(l8_ddp_get_stats(d, buckets=buckets, steps=steps, launched_in_backward=inb, &
                                     launched_at_finish=atf, zeroed=zeroed), 'l8_ddp_get_stats')
            call check(buckets == 3 .and. steps == 1 .and. zeroed == 1 .and. inb + atf == 3, &
                       'ddp: three buckets, one step, the spare zeroed')
            if (u == 0) call check(inb == 2, 'ddp: overlap: two buckets launched in backward')
            if (u == 1) call check(inb == 0, 'ddp: overlap off: every bucket at finish')
        end do
        call ok(l8_ddp_bucket(d, 0, first, nb), 'l8_ddp_bucket')
        call check(first == 0 .and. nb > 0, 'ddp: bucket 0 starts the buffer')
        call check(l8_ddp_bucket(d, 3, first, nb) == L8_ERR_INVALID_ARG, 'ddp: bucket 3 is refused')
        call ok(l8_ddp_begin_micro_batch(d, .true.), 'ddp: a step with mark_unused')
        call ok(l8_ddp_mark_unused(d, sd), 'l8_ddp_mark_unused')
        call check(l8_ddp_mark_unused(d, sd) == L8_ERR_STATE, 'ddp: marked twice is refused')
        call ok(l8_ddp_mark_unused(d, wd), 'ddp: mark the weight unused')
        call ok(l8_ddp_mark_unused(d, bd), 'ddp: mark the bias unused')
        call ok(l8_ddp_finish(d), 'ddp: finish, nothing reported')
        call ok(l8_tensor_to_array(l8_params_main_grad(gd, wd), aw), 'ddp: dW, unused')
        call check(all(aw == 0), 'ddp: an unused weight''s main_grad is zero')

        ! ZeRO-1 against AdamW on the whole group with the mean gradients
        call check(l8_ddp_create(gt, dp, d2, zero1=.true.) == L8_ERR_INVALID_ARG, &
                   'zero1 over a group not padded to 128 x 2 is refused')
        call model(hc, gh, gz, lz, wz, bz, sz, 'z1', .true., 256)
        call ok(l8_ddp_create(gz, dp, d2, bucket_elems=128, zero1=.true.), 'l8_ddp_create zero1')
        call ok(l8_optim_create_adamw(gz, oz, lr=0.01, max_grad_norm=1e6), 'zero1: AdamW')
        call ok(l8_ddp_shard_ranges(d2, off, num, nr), 'l8_ddp_shard_ranges')
        call ok(l8_ddp_get_stats(d2, buckets=buckets), 'zero1: buckets')
        call check(nr == buckets .and. buckets >= 2 .and. sum(num(1:nr)) == 512, &
                   'zero1: a range per bucket, half of the 1024 elements')
        call ok(l8_optim_set_shard(oz, off(1:nr), num(1:nr)), 'l8_optim_set_shard')
        call ok(l8_optim_set_shard_rank(oz, rank, 2), 'l8_optim_set_shard_rank')
        call ok(l8_optim_set_norm_reduce(oz, dp), 'l8_optim_set_norm_reduce')
        call check(l8_optim_set_shard(oz, off(1:2), num(1:1)) == L8_ERR_INVALID_ARG, &
                   'zero1: ranges of two lengths are refused')
        call ok(l8_optim_create_adamw(gt, ot, lr=0.01, max_grad_norm=1e6), 'zero1: twin AdamW')
        call ok(l8_tensor_to_array(l8_params_master(gz, wz), w0), 'zero1: W before')
        do q = 1, NSTEP
            call ddp_step(hc, lz, d2, rank)          ! finish reduce-scatters
            call ok(l8_optim_step(oz), 'zero1: the sharded step')
            call ok(l8_ddp_gather_params(d2, wait=q == 1), 'l8_ddp_gather_params')
            if (q /= 1) call ok(l8_ddp_wait_param(d2, -1_c_int), 'l8_ddp_wait_param')
            ! the twin: both ranks' gradients of its own weights, averaged
            call twin_mean(hc, gt, lt, wt, bt, tw, tb)
            call ok(l8_tensor_copy_from_array(l8_params_main_grad(gt, wt), tw), 'zero1: twin dW')
            call ok(l8_tensor_copy_from_array(l8_params_main_grad(gt, bt), tb), 'zero1: twin db')
            call ok(l8_optim_step(ot), 'zero1: the twin''s step')
        end do
        call ok(l8_tensor_to_array(l8_params_master(gz, wz), mw), 'zero1: W')
        call ok(l8_tensor_to_array(l8_params_master(gz, bz), mb), 'zero1: b')
        call ok(l8_tensor_to_array(l8_params_master(gt, wt), tw), 'zero1: twin W')
        call ok(l8_tensor_to_array(l8_params_master(gt, bt), tb), 'zero1: twin b')
        call check(same_bits(mw, tw) .and. same_bits(reshape(mb, [DN, 1]), reshape(tb, [DN, 1])), &
                   'zero1: gathered weights equal the unsharded AdamW''s, bit for bit')
        call check(any(mw /= w0), 'zero1: the weights moved')
        call shard_ckpt(gz, oz, off(1:nr), num(1:nr), rank, trim(idp) // '.r', ot)

        ! the recipe's amax hook: rank 1's input is twice rank 0's, one scale
        call ok(l8_recipe_create(hc, rc), 'amax: recipe')
        call ok(l8_params_create(hc, gf), 'amax: group')
        call ok(l8_params_add(gf, 'f.weight', [DK, DN], wf), 'amax: weight')
        call ok(l8_params_add(gf, 'f.bias', [DN], bf), 'amax: bias')
        call ok(l8_params_finalize(gf), 'amax: finalize')
        call ok(l8_params_init_uniform(gf, wf, -0.5, 0.5, 11_c_int64_t), 'amax: init')
        call ok(l8_linear_create(hc, 'f', gh, l8_params_master(gf, wf), l8_params_main_grad(gf, wf), &
                lf, recipe=rc, bias=l8_params_master(gf, bf), bias_grad=l8_params_main_grad(gf, bf), &
                weight_id=wf, bias_id=bf), 'amax: an FP8 layer')
        call ok(l8_recipe_set_reduce(rc, dp), 'l8_recipe_set_reduce')
        call ok(l8_linear_begin_step(lf), 'amax: begin_step')
        call fwd_bwd(hc, lf, rank, 1, real(rank + 1, c_float))
        call ok(l8_recipe_update(rc), 'amax: l8_recipe_update (reduced over the ranks)')
        call ok(l8_recipe_state(rc, scale=vt), 'amax: the scales')
        call ok(l8_tensor_to_array(vt, sc), 'amax: scales to an array')
        call ok(l8_comm_broadcast(dp, vt, 0), 'amax: rank 0''s scales')
        call ok(l8_tensor_to_array(vt, sc0), 'amax: rank 0''s scales to an array')
        call l8_tensor_destroy(vt)
        call check(same_bits(reshape(sc, [3, 1]), reshape(sc0, [3, 1])), &
                   'amax: every rank casts with the same scales')
        call ok(l8_recipe_set_reduce(rc), 'l8_recipe_set_reduce, none')
        call ok(l8_optim_set_norm_reduce(oz), 'l8_optim_set_norm_reduce, none')

        call tp_pair(hc, gh, dp, rank)
        call comm_more(hc, dp, rank)
        if (rank == 0) then
            open(newunit=u, file=trim(ip), status='old', iostat=es)
            if (es == 0) close(u, status='delete')
        end if

        ! the verdict: rank 1's failures counted on rank 0 too
        tot(1) = real(fails, c_float)
        call ok(l8_tensor_from_array(hc, tot, vt), 'ddp: the failure count')
        call ok(l8_comm_all_reduce(dp, vt, vt, L8_REDUCE_SUM), 'ddp: failures summed over the ranks')
        call ok(l8_tensor_to_array(vt, tot), 'ddp: the sum')
        call l8_tensor_destroy(vt)
        if (rank == 0 .and. nint(tot(1)) > fails) then
            print '(a, i0, a)', 'FAIL  rank 1 of the two-process test: ', nint(tot(1)) - fails, &
                ' check(s) failed'
            fails = nint(tot(1))
        end if

        call l8_ddp_destroy(d)
        call l8_ddp_destroy(d2)
        call l8_optim_destroy(oz)
        call l8_optim_destroy(ot)
        call l8_linear_destroy(ld)
        call l8_linear_destroy(lt)
        call l8_linear_destroy(lz)
        call l8_linear_destroy(lf)
        call l8_recipe_destroy(rc)
        call l8_params_destroy(gd)
        call l8_params_destroy(gt)
        call l8_params_destroy(gz)
        call l8_params_destroy(gf)
        call l8_gemm_handle_destroy(gh)
        call l8_comm_destroy(dp)
        call l8_ctx_destroy(hc)
    end subroutine

    ! -- 11, ZeRO-1 checkpoints: this rank's sharded optimizer saved into a
    !    file of its own (name: `stem` and the rank), loaded into a new one
    !    with the same shard (state and step bit for bit); the other rank's
    !    shard and an unsharded optimizer are refused.
    subroutine shard_ckpt(gz, oz, off, num, rank, stem, whole)
        type(l8_params), intent(in) :: gz
        type(l8_optim), intent(in) :: oz, whole
        integer(c_int64_t), intent(in) :: off(:), num(:)
        integer, intent(in) :: rank
        character(len=*), intent(in) :: stem
        type(l8_optim) :: o2, o3
        type(l8_ckpt_writer) :: w
        type(l8_ckpt_reader) :: r
        real(c_float), allocatable :: a(:), b(:)
        integer(c_int64_t) :: s1, s2
        character(len=1100) :: path
        integer :: k, u
        write(path, '(a, i0, a)') stem, rank, '.ckpt'
        call ok(l8_ckpt_writer_open(trim(path), 'fortran-zero1', 1, w), 'zero1 ckpt: open')
        call ok(l8_optim_save(oz, w), 'l8_optim_save (a shard)')
        call ok(l8_ckpt_writer_commit(w), 'zero1 ckpt: commit')
        call ok(l8_optim_create_adamw(gz, o2, lr=0.01, max_grad_norm=1e6), 'zero1 ckpt: a new AdamW')
        call ok(l8_optim_set_shard(o2, off, num), 'zero1 ckpt: the same shard')
        call ok(l8_optim_set_shard_rank(o2, rank, 2), 'zero1 ckpt: the same rank')
        call ok(l8_optim_create_adamw(gz, o3, lr=0.01), 'zero1 ckpt: another AdamW')
        call ok(l8_optim_set_shard(o3, off, num), 'zero1 ckpt: its shard')
        call ok(l8_optim_set_shard_rank(o3, 1 - rank, 2), 'zero1 ckpt: the other rank')
        call ok(l8_ckpt_open(trim(path), r), 'zero1 ckpt: l8_ckpt_open')
        call check(l8_optim_check_load(o3, r) == L8_ERR_INVALID_ARG, &
                   'zero1 ckpt: the other rank''s shard is refused')
        call check(index(l8_last_error_message(), 'rank') > 0, &
                   'zero1 ckpt: the refusal names the rank: ' // l8_last_error_message())
        call check(l8_optim_check_load(whole, r) == L8_ERR_INVALID_ARG, &
                   'zero1 ckpt: an unsharded optimizer is refused')
        call ok(l8_optim_check_load(o2, r), 'l8_optim_check_load')
        call ok(l8_optim_load(o2, r), 'l8_optim_load')
        call l8_ckpt_close(r)
        call ok(l8_optim_get_step(oz, s1), 'zero1 ckpt: step')
        call ok(l8_optim_get_step(o2, s2), 'zero1 ckpt: step loaded')
        call check(s1 == s2 .and. s1 > 0, 'zero1 ckpt: the step comes back')
        do k = 0, l8_optim_state_count(oz) - 1
            allocate(a(l8_tensor_numel(l8_optim_state(oz, k))), b(l8_tensor_numel(l8_optim_state(o2, k))))
            call ok(l8_tensor_to_array(l8_optim_state(oz, k), a), 'zero1 ckpt: state')
            b = 0
            call ok(l8_tensor_to_array(l8_optim_state(o2, k), b), 'zero1 ckpt: state loaded')
            call check(size(a) == sum(num) .and. size(b) == size(a), &
                       'zero1 ckpt: a state buffer holds the shard only')
            if (size(b) == size(a)) call check(all(transfer(a, [0_c_int32_t]) == &
                       transfer(b, [0_c_int32_t])) .and. any(a /= 0), &
                       'zero1 ckpt: ' // l8_optim_state_name(oz, k) // ' comes back bit for bit')
            deallocate(a, b)
        end do
        call l8_optim_destroy(o2)
        call l8_optim_destroy(o3)
        open(newunit=u, file=trim(path), status='old')
        close(u, status='delete')
    end subroutine

    ! -- 11, the other collectives on two ranks, the sub-communicators, a
    !    communicator joined from the launcher's variables (set by ddp_world:
    !    WORLD_SIZE, RANK, L8_INIT_FILE) and aborted by rank 0.
    subroutine comm_more(hc, dp, rank)
        type(l8_ctx), intent(in) :: hc
        type(l8_comm), intent(in) :: dp
        integer, intent(in) :: rank
        real(c_float) :: a(2, 3, 0:1), g1(4, 3), g2(2, 6), r1(2, 3), r2(2, 3)
        type(l8_tensor) :: ta, tg1, tg2, tr
        type(l8_comm) :: sp, tpc, dpc, none, ec
        integer :: i, j, q
        do q = 0, 1                               ! what each rank sends
            do j = 1, 3
                do i = 1, 2
                    a(i, j, q) = real(10 * q + 3 * j + i, c_float)
                end do
            end do
        end do
        call ok(l8_tensor_from_array(hc, a(:, :, rank), ta), 'comm: send')
        call ok(l8_tensor_empty(hc, L8_F32, [4, 3], tg1), 'comm: recv [4, 3]')
        call ok(l8_tensor_empty(hc, L8_F32, [2, 6], tg2), 'comm: recv [2, 6]')
        call ok(l8_comm_all_gather(dp, ta, tg1, 1), 'l8_comm_all_gather along dim 1')
        call ok(l8_comm_all_gather(dp, ta, tg2, 2), 'l8_comm_all_gather along dim 2')
        call ok(l8_tensor_to_array(tg1, g1), 'comm: gathered 1')
        call ok(l8_tensor_to_array(tg2, g2), 'comm: gathered 2')
        call check(all(g1(1:2, :) == a(:, :, 0)) .and. all(g1(3:4, :) == a(:, :, 1)), &
                   'comm: a gather along Fortran dim 1 stacks the ranks'' columns')
        call check(all(g2(:, 1:3) == a(:, :, 0)) .and. all(g2(:, 4:6) == a(:, :, 1)), &
                   'comm: a gather along Fortran dim 2 stacks the ranks'' rows')
        call check(l8_comm_all_gather(dp, ta, tg1, 3) == L8_ERR_INVALID_ARG, &
                   'comm: dim 3 of a 2-d tensor is refused')
        call ok(l8_tensor_empty(hc, L8_F32, [2, 3], tr), 'comm: recv [2, 3]')
        call ok(l8_comm_reduce_scatter(dp, tg2, tr, L8_REDUCE_SUM, 2), 'l8_comm_reduce_scatter dim 2')
        call ok(l8_tensor_to_array(tr, r2), 'comm: scattered 2')
        call ok(l8_comm_reduce_scatter(dp, tg1, tr, L8_REDUCE_SUM, 1), 'l8_comm_reduce_scatter dim 1')
        call ok(l8_tensor_to_array(tr, r1), 'comm: scattered 1')
        ! every rank holds the same gathered tensors: the sum is twice its slice
        call check(all(r2 == 2 * g2(:, 3 * rank + 1:3 * rank + 3)), &
                   'comm: a reduce-scatter along dim 2 keeps this rank''s rows, summed')
        call check(all(r1 == 2 * g1(2 * rank + 1:2 * rank + 2, :)), &
                   'comm: a reduce-scatter along dim 1 keeps this rank''s columns, summed')
        call ok(l8_comm_barrier(dp), 'l8_comm_barrier')
        call ok(l8_comm_check(dp), 'l8_comm_check')
        ! sub-communicators
        call ok(l8_comm_split(dp, rank, 0, sp), 'l8_comm_split by rank')
        call check(l8_comm_size(sp) == 1, 'comm: a split by rank is a world of 1')
        call ok(l8_comm_split(dp, -1, 0, none), 'l8_comm_split, no color')
        call check(.not. c_associated(none%p), 'comm: a negative color joins none')
        call ok(l8_comm_grid(dp, 2, tp_comm=tpc, dp_comm=dpc), 'l8_comm_grid tp 2')
        call check(l8_comm_size(tpc) == 2, 'comm: the TP group holds both ranks')
        call check(l8_comm_rank(tpc) == rank, 'comm: TP rank is the rank')
        call check(l8_comm_size(dpc) == 1, 'comm: the DP group holds one rank')
        call check(l8_comm_grid(dp, 3, tp_comm=none) == L8_ERR_INVALID_ARG, &
                   'comm: tp 3 of a world of 2 is refused')
        ! joined from the environment, then rank 0 aborts it
        call ok(l8_comm_init_env(hc, ec, init_timeout_ms=60000), 'l8_comm_init_env (L8_INIT_FILE)')
        call check(l8_comm_size(ec) == 2, 'comm: the environment says a world of 2')
        call check(l8_comm_rank(ec) == rank, 'comm: and this rank')
        call ok(l8_comm_all_reduce(ec, ta, ta, L8_REDUCE_SUM), 'comm: a sum over it')
        call ok(l8_tensor_to_array(ta, r1), 'comm: the sum')
        call check(all(r1 == a(:, :, 0) + a(:, :, 1)), 'comm: both ranks'' sum')
        call ok(l8_comm_barrier(dp), 'comm: before the abort')
        if (rank == 0) then
            call l8_comm_abort(ec)
            call check(l8_comm_check(ec) /= L8_OK, 'comm: an aborted communicator says so')
        end if
        call ok(l8_comm_barrier(dp), 'comm: after the abort')
        if (rank == 1) call check(l8_comm_all_reduce(ec, ta, ta, L8_REDUCE_SUM) == L8_ERR_COMM, &
                                  'comm: the peer''s next collective fails with L8_ERR_COMM')
        call l8_comm_destroy(ec)
        call l8_comm_destroy(sp)
        call l8_comm_destroy(tpc)
        call l8_comm_destroy(dpc)
        call l8_tensor_destroy(ta)
        call l8_tensor_destroy(tg1)
        call l8_tensor_destroy(tg2)
        call l8_tensor_destroy(tr)
    end subroutine

    ! -- 11, tensor parallel: x [TT, TK] -> A (column, SP) -> h [TT, TN] -> B
    !    (row, SP) -> y [TT, TM], C shapes; each rank holds half of A's out
    !    features, half of B's in features and half of the tokens outside.
    subroutine tp_pair(hc, gh, dp, rank)
        type(l8_ctx), intent(in) :: hc
        type(l8_gemm_handle), intent(in) :: gh
        type(l8_comm), intent(in) :: dp
        integer, intent(in) :: rank
        integer, parameter :: TT = 8, TK = 16, TN = 16, TM = 16, H = TN / 2, S = TT / 2
        real(c_float) :: x(TK, TT), w1(TK, TN), w2(TN, TM), dy(TM, TT)
        real(c_float) :: hf(TN, TT), yf(TM, TT), dxf(TK, TT), g1f(TK, TN), g2f(TN, TM)
        real(c_float) :: ht(H, TT), yt(TM, S), dxt(TK, S), g1t(TK, H), g2t(H, TM)
        type(l8_params) :: gf, gs
        type(l8_linear) :: fa, fb, ta, tb, bad
        integer(c_int) :: f1, f2, s1, s2
        integer :: i, j, c0, t0
        c0 = rank * H                             ! this rank's hidden features
        t0 = rank * S                             ! and tokens
        do j = 1, TT
            do i = 1, TK
                x(i, j) = real(mod(i + 2 * j, 3) - 1, c_float)
            end do
            do i = 1, TM
                dy(i, j) = real(mod(2 * i + j, 3) - 1, c_float)
            end do
        end do
        do j = 1, TN
            do i = 1, TK
                w1(i, j) = real(mod(i * j + 1, 3) - 1, c_float)
            end do
        end do
        do j = 1, TM
            do i = 1, TN
                w2(i, j) = real(mod(i + 3 * j, 3) - 1, c_float)
            end do
        end do
        ! the whole chain on this rank
        call ok(l8_params_create(hc, gf), 'tp: group')
        call ok(l8_params_add(gf, 'fa.weight', [TK, TN], f1), 'tp: fa.weight')
        call ok(l8_params_add(gf, 'fb.weight', [TN, TM], f2), 'tp: fb.weight')
        call ok(l8_params_finalize(gf), 'tp: finalize')
        call ok(l8_tensor_copy_from_array(l8_params_master(gf, f1), w1), 'tp: w1')
        call ok(l8_tensor_copy_from_array(l8_params_master(gf, f2), w2), 'tp: w2')
        call ok(l8_linear_create(hc, 'fa', gh, l8_params_master(gf, f1), &
                l8_params_main_grad(gf, f1), fa, mode=L8_LINEAR_BF16), 'tp: fa')
        call ok(l8_linear_create(hc, 'fb', gh, l8_params_master(gf, f2), &
                l8_params_main_grad(gf, f2), fb, mode=L8_LINEAR_BF16), 'tp: fb')
        call tp_chain(hc, fa, fb, x, dy, hf, yf, dxf)
        call ok(l8_tensor_to_array(l8_params_main_grad(gf, f1), g1f), 'tp: whole dW1')
        call ok(l8_tensor_to_array(l8_params_main_grad(gf, f2), g2f), 'tp: whole dW2')
        ! the same chain split over the two ranks
        call ok(l8_params_create(hc, gs), 'tp: shard group')
        call ok(l8_params_add(gs, 'ta.weight', [TK, H], s1), 'tp: ta.weight')
        call ok(l8_params_add(gs, 'tb.weight', [H, TM], s2), 'tp: tb.weight')
        call ok(l8_params_finalize(gs), 'tp: shard finalize')
        call ok(l8_tensor_copy_from_array(l8_params_master(gs, s1), w1(:, c0 + 1:c0 + H)), &
                'tp: w1 shard (out features)')
        call ok(l8_tensor_copy_from_array(l8_params_master(gs, s2), w2(c0 + 1:c0 + H, :)), &
                'tp: w2 shard (in features)')
        call check(l8_linear_create(hc, 'bad', gh, l8_params_master(gs, s1), &
                   l8_params_main_grad(gs, s1), bad, mode=L8_LINEAR_BF16, tp_comm=dp, &
                   parallel=7_c_int) == L8_ERR_INVALID_ARG, 'tp: an unknown split is refused')
        call ok(l8_linear_create(hc, 'ta', gh, l8_params_master(gs, s1), &
                l8_params_main_grad(gs, s1), ta, mode=L8_LINEAR_BF16, tp_comm=dp, &
                parallel=L8_PARALLEL_COLUMN, sequence_parallel=.true.), 'tp: column, SP')
        call ok(l8_linear_create(hc, 'tb', gh, l8_params_master(gs, s2), &
                l8_params_main_grad(gs, s2), tb, mode=L8_LINEAR_BF16, tp_comm=dp, &
                parallel=L8_PARALLEL_ROW, sequence_parallel=.true.), 'tp: row, SP')
        call tp_chain(hc, ta, tb, x(:, t0 + 1:t0 + S), dy(:, t0 + 1:t0 + S), ht, yt, dxt)
        call ok(l8_tensor_to_array(l8_params_main_grad(gs, s1), g1t), 'tp: dW1 shard')
        call ok(l8_tensor_to_array(l8_params_main_grad(gs, s2), g2t), 'tp: dW2 shard')
        call check(same_bits(ht, hf(c0 + 1:c0 + H, :)), &
                   'tp: h is this rank''s hidden features of every token')
        call check(same_bits(yt, yf(:, t0 + 1:t0 + S)), 'tp: y is this rank''s tokens of the chain''s')
        call check(same_bits(dxt, dxf(:, t0 + 1:t0 + S)), 'tp: dx is this rank''s tokens')
        call check(same_bits(g1t, g1f(:, c0 + 1:c0 + H)), 'tp: dW1 is this rank''s shard')
        call check(same_bits(g2t, g2f(c0 + 1:c0 + H, :)), 'tp: dW2 is this rank''s shard')
        call check(any(g1t /= 0) .and. any(dxt /= 0), 'tp: the gradients are not all zero')
        call l8_linear_destroy(ta)
        call l8_linear_destroy(tb)
        call l8_linear_destroy(fa)
        call l8_linear_destroy(fb)
        call l8_params_destroy(gs)
        call l8_params_destroy(gf)
    end subroutine

    ! Forward and backward of a -> b (bf16 activations), everything back as f32.
    subroutine tp_chain(hc, a, b, xa, dya, ha, ya, dxa)
        type(l8_ctx), intent(in) :: hc
        type(l8_linear), intent(in) :: a, b
        real(c_float), intent(in) :: xa(:, :), dya(:, :)
        real(c_float), intent(inout) :: ha(:, :), ya(:, :), dxa(:, :)
        type(l8_tensor) :: xb, hb, yb, dyb, dhb, dxb
        type(l8_linear_ctx) :: sa, sb
        call bf16_in(hc, xa, xb)
        call bf16_in(hc, dya, dyb)
        call ok(l8_tensor_empty(hc, L8_BF16, shape(ha), hb), 'tp: h')
        call ok(l8_tensor_empty(hc, L8_BF16, shape(ha), dhb), 'tp: dh')
        call ok(l8_tensor_empty(hc, L8_BF16, shape(ya), yb), 'tp: y')
        call ok(l8_tensor_empty(hc, L8_BF16, shape(dxa), dxb), 'tp: dx')
        call ok(l8_linear_begin_step(a), 'tp: begin_step a')
        call ok(l8_linear_begin_step(b), 'tp: begin_step b')
        call ok(l8_linear_forward(a, xb, hb, sa), 'tp: forward a')
        call ok(l8_linear_forward(b, hb, yb, sb), 'tp: forward b')
        call ok(l8_linear_backward(b, sb, dyb, dhb), 'tp: backward b')
        call ok(l8_linear_backward(a, sa, dhb, dxb), 'tp: backward a')
        call get_f32(hb, ha, 'tp: h', hc)
        call get_f32(yb, ya, 'tp: y', hc)
        call get_f32(dxb, dxa, 'tp: dx', hc)
        call l8_linear_ctx_destroy(sa)
        call l8_linear_ctx_destroy(sb)
        call l8_tensor_destroy(xb)
        call l8_tensor_destroy(hb)
        call l8_tensor_destroy(yb)
        call l8_tensor_destroy(dyb)
        call l8_tensor_destroy(dhb)
        call l8_tensor_destroy(dxb)
    end subroutine
    ! An f32 array as a new bf16 tensor t on hc.
    subroutine bf16_in(hc, a, t)
        type(l8_ctx), intent(in) :: hc
        real(c_float), intent(in) :: a(:, :)
        type(l8_tensor), intent(out) :: t
        type(l8_tensor) :: f
        call ok(l8_tensor_from_array(hc, a, f), 'bf16_in: from the array')
        call ok(l8_tensor_empty(hc, L8_BF16, shape(a), t), 'bf16_in: a bf16 tensor')
        call ok(l8_convert(f, t), 'bf16_in: to bf16')
        call l8_tensor_destroy(f)
    end subroutine

    ! A bf16 layer DK -> DN with a bias and a spare parameter that never
    ! gets a gradient (registered first, like the layers a forward uses
    ! first: its bucket is the last), the same weights in every model; reporting into its
    ! group when `report` is given; the group padded to `pad` when given.
    subroutine model(hc, gh, gg, ll, w_, b_, s_, name, report, pad)
        type(l8_ctx), intent(in) :: hc
        type(l8_gemm_handle), intent(in) :: gh
        type(l8_params), intent(out), target :: gg
        type(l8_linear), intent(out) :: ll
        integer(c_int), intent(out) :: w_, b_, s_
        character(len=*), intent(in) :: name
        logical, intent(in), optional :: report
        integer, intent(in), optional :: pad
        type(l8_params), pointer :: to                ! disassociated: grad_ready absent
        to => null()
        if (present(report)) to => gg
        call ok(l8_params_create(hc, gg, pad_to=pad), name // ': l8_params_create')
        call ok(l8_params_add(gg, name // '.spare', [DS], s_), name // ': spare')
        call ok(l8_params_add(gg, name // '.weight', [DK, DN], w_), name // ': weight')
        call ok(l8_params_add(gg, name // '.bias', [DN], b_), name // ': bias')
        call ok(l8_params_finalize(gg), name // ': finalize')
        call ok(l8_params_init_uniform(gg, w_, -0.5, 0.5, 5_c_int64_t), name // ': init W')
        call ok(l8_params_init_uniform(gg, b_, -0.5, 0.5, 6_c_int64_t), name // ': init b')
        call ok(l8_linear_create(hc, name, gh, l8_params_master(gg, w_), &
                l8_params_main_grad(gg, w_), ll, mode=L8_LINEAR_BF16, &
                bias=l8_params_master(gg, b_), bias_grad=l8_params_main_grad(gg, b_), &
                weight_id=w_, bias_id=b_, grad_ready=to), name // ': layer')
    end subroutine

    ! Both ranks' gradients of layer ll (group gg, ids w_ and b_) over their
    ! two micro-batches, and their mean as the reducer computes it: an f32
    ! sum in rank order, then / 2.
    subroutine twin_mean(hc, gg, ll, w_, b_, mw_, mb_)
        type(l8_ctx), intent(in) :: hc
        type(l8_params), intent(in) :: gg
        type(l8_linear), intent(in) :: ll
        integer(c_int), intent(in) :: w_, b_
        real(c_float), intent(out) :: mw_(DK, DN), mb_(DN)
        real(c_float) :: gw(DK, DN, 0:1), gb(DN, 0:1)
        integer :: r, m
        do r = 0, 1
            call ok(l8_linear_begin_step(ll), 'twin: begin_step')
            do m = 1, 2
                call fwd_bwd(hc, ll, r, m)
            end do
            call ok(l8_tensor_to_array(l8_params_main_grad(gg, w_), gw(:, :, r)), 'twin: dW')
            call ok(l8_tensor_to_array(l8_params_main_grad(gg, b_), gb(:, r)), 'twin: db')
        end do
        mw_ = (gw(:, :, 0) + gw(:, :, 1)) * 0.5_c_float
        mb_ = (gb(:, 0) + gb(:, 1)) * 0.5_c_float
    end subroutine

    ! One step of rank r through reducer d: two micro-batches, then finish.
    subroutine ddp_step(hc, ll, d, r)
        type(l8_ctx), intent(in) :: hc
        type(l8_linear), intent(in) :: ll
        type(l8_ddp), intent(in) :: d
        integer, intent(in) :: r
        integer :: m
        call ok(l8_linear_begin_step(ll), 'ddp: begin_step')
        do m = 1, 2
            call ok(l8_ddp_begin_micro_batch(d, m == 2), 'l8_ddp_begin_micro_batch')
            call fwd_bwd(hc, ll, r, m)
        end do
        call ok(l8_ddp_finish(d), 'l8_ddp_finish')
    end subroutine

    ! Forward and backward of rank r's micro-batch m (small integers,
    ! exact in bf16; times amp when given).
    subroutine fwd_bwd(hc, ll, r, m, amp)
        type(l8_ctx), intent(in) :: hc
        type(l8_linear), intent(in) :: ll
        integer, intent(in) :: r, m
        real(c_float), intent(in), optional :: amp
        real(c_float) :: xa(DK, DT), dya(DN, DT)
        type(l8_tensor) :: xb_, yb_, dyb
        type(l8_linear_ctx) :: sv
        integer :: i, t
        do t = 1, DT
            do i = 1, DK
                xa(i, t) = real(mod(i * (r + 2) + 3 * t + 5 * m, 9) - 4, c_float)
            end do
            do i = 1, DN
                dya(i, t) = real(mod(2 * i + t * (m + 1) + 7 * r, 5) - 2, c_float)
            end do
        end do
        if (present(amp)) xa = xa * amp
        call bf16_in(hc, xa, xb_)
        call bf16_in(hc, dya, dyb)
        call ok(l8_tensor_empty(hc, L8_BF16, [DN, DT], yb_), 'fwd_bwd: y')
        call ok(l8_linear_forward(ll, xb_, yb_, sv), 'fwd_bwd: forward')
        call ok(l8_linear_backward(ll, sv, dyb), 'fwd_bwd: backward')
        call l8_linear_ctx_destroy(sv)
        call l8_tensor_destroy(xb_)
        call l8_tensor_destroy(yb_)
        call l8_tensor_destroy(dyb)
    end subroutine

    subroutine ok(st, what)
        integer(c_int), intent(in) :: st
        character(len=*), intent(in) :: what
        if (st /= L8_OK) then
            fails = fails + 1
            print '(a, a, a, a)', 'FAIL  ', what, ': ', l8_last_error_message()
        end if
    end subroutine

    subroutine check(cond, what)
        logical, intent(in) :: cond
        character(len=*), intent(in) :: what
        if (.not. cond) then
            fails = fails + 1
            print '(a, a)', 'FAIL  ', what
        end if
    end subroutine
end program test_fortran
