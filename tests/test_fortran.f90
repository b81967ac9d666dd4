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
!   6. a communicator of one rank joins from an id and reduces in place.
! Exit status 0 when every check passes; each failure prints one line.
program test_fortran
    use, intrinsic :: iso_c_binding
    use lean8
    implicit none
    integer, parameter :: K = 32, N = 16, T = 48           ! distinct: a swapped dim shows
    type(l8_ctx) :: ctx, bad
    type(l8_tensor) :: xt, xb, yb, yf, dy, w, wg, b, bg, flat, hb, z, dg, dx1, dx2
    type(l8_params) :: g
    type(l8_gemm_handle) :: h
    type(l8_linear) :: lin
    type(l8_linear_ctx) :: saved, saved2
    real(c_float) :: y2(N, T), dxa(K, T), dxb(K, T)
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
    fails = 0

    call check(l8_fortran_check_layouts() == 0, 'struct mirrors are prefixes of the C structs')
    call ok(l8_ctx_create(ctx), 'l8_ctx_create')
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
    call ok(l8_tensor_copy_from_array(xt, x), 'x back into xt')
    call ok(l8_optim_create_adamw(g, opt, lr=0.01_c_float), 'l8_optim_create_adamw')
    flat = l8_params_master_flat(g)
    allocate(before(l8_tensor_numel(flat)), after(l8_tensor_numel(flat)), &
             restored(l8_tensor_numel(flat)))
    call ok(l8_tensor_to_array(flat, before), 'master before')
    call ok(l8_optim_step(opt), 'l8_optim_step')
    call ok(l8_tensor_to_array(flat, after), 'master after')
    call check(any(after /= before), 'the optimizer step moved the weights')

    call get_environment_variable('TMPDIR', path)
    if (len_trim(path) == 0) path = '/tmp'
    path = trim(path) // '/lean8-fortran-test.ckpt'
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
