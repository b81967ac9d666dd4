! fmnist_mlp.f90 - train the Fashion-MNIST MLP from Fortran with lean8:
! 784 -> 256 -> 128 -> 10 (the head padded to 16 outputs: FP8 GEMM dimensions
! are multiples of 16), GELU between layers (applied by the next layer inside
! its FP8 casts: l8_linear_forward_act / _backward_act), FP8 Linear layers with delayed
! scaling, AdamW with a cosine learning-rate decay, softmax cross-entropy.
! After training it saves the weights to a checkpoint, reloads them and checks
! that the test accuracy is the same, then checks it against a bar. (That
! checkpoint is the final weights, not a point to resume from: see
! save_weights.)
!
!   gfortran fmnist_mlp.f90 $(pkg-config --cflags --libs lean8-fortran) -o fmnist_mlp
!   ./fmnist_mlp DIR [EPOCHS [LIMIT [MIN_ACCURACY]]]
!
! DIR holds the four uncompressed IDX files (gunzip the ones of the Debian
! package dataset-fashion-mnist). EPOCHS (default 5) passes over the first
! LIMIT training images (default all 60000); exit status 1 when the test
! accuracy is below MIN_ACCURACY (default 0.88). L8_DEVICE picks the device.
! With L8_TRACE=FILE the run writes a memory trace: every allocation with its
! tag, a step mark per training step; `lean8-trace summary FILE` reads it. At
! the end it prints the allocator's peaks.
!
! Layout: a batch of B images is the Fortran array x(784, B), which is the
! C tensor (B, 784) that Linear takes; every dims argument is in Fortran order.
program fmnist_mlp
    use, intrinsic :: iso_c_binding
    use, intrinsic :: iso_fortran_env, only: int8, real64
    use lean8
    implicit none
    integer, parameter :: NL = 3, B = 80, CLASSES = 10, PIXELS = 784
    integer, parameter :: dims(0:NL) = [PIXELS, 256, 128, 16]
    real(c_float), parameter :: MEAN = 0.2860, STD = 0.3530, LR = 1e-3
    character(len=*), parameter :: KIND = 'fmnist-mlp-fortran'
    type(l8_ctx) :: ctx
    type(l8_params) :: g
    type(l8_gemm_handle) :: gemm
    type(l8_recipe) :: recipe
    type(l8_optim) :: opt
    type(l8_linear) :: lin(NL)
    type(l8_linear_ctx) :: saved(NL)
    type(l8_tensor) :: xf, labels, loss, hit, act0, pre(NL), grad(0:NL)
    real(c_float), allocatable :: xtr(:, :), xte(:, :)
    integer(c_int32_t), allocatable :: ytr(:), yte(:)
    integer, allocatable :: order(:)
    integer(c_int) :: wid(NL), bid(NL)
    integer :: epochs, limit, nb, e, s, steps, total, l
    real :: min_acc, acc, acc2
    real(real64) :: sum_loss
    character(len=512) :: dir, arg
    type(l8_alloc_stats) :: mem

    call get_command_argument(1, dir)
    if (len_trim(dir) == 0) then
        print '(a)', 'usage: fmnist_mlp DIR [EPOCHS [LIMIT [MIN_ACCURACY]]]'
        error stop 2
    end if
    epochs = 5; limit = 60000; min_acc = 0.88
    call get_command_argument(2, arg); if (len_trim(arg) > 0) read (arg, *) epochs
    call get_command_argument(3, arg); if (len_trim(arg) > 0) read (arg, *) limit
    call get_command_argument(4, arg); if (len_trim(arg) > 0) read (arg, *) min_acc

    call load_split(trim(dir), 'train', xtr, ytr)
    call load_split(trim(dir), 't10k', xte, yte)
    limit = min(limit, size(ytr))
    nb = limit / B
    if (nb < 1) call die('LIMIT is smaller than one batch of 80 images')

    ! ---- the model ----
    call ck(l8_ctx_create(ctx))
    print '(a, a, a, i0, a, i0, a)', 'lean8 ', l8_version(), ' on ', &
        size(ytr), ' training images (using ', nb * B, '), device ' // l8_ctx_device_name(ctx)
    call ck(l8_tag_push('model'))          ! allocations below are tagged in a memory trace
    call ck(l8_params_create(ctx, g))
    do l = 1, NL
        ! a Linear weight (N, K) in C is Fortran dims [K, N]
        call ck(l8_params_add(g, 'fc' // digit(l) // '.weight', [dims(l - 1), dims(l)], wid(l)))
        call ck(l8_params_add(g, 'fc' // digit(l) // '.bias', [dims(l)], bid(l)))
    end do
    call ck(l8_params_finalize(g))
    do l = 1, NL                           ! nn.Linear's initialization
        call ck(l8_params_init_kaiming_uniform(g, wid(l), sqrt(5.0_c_float), int(131 + l, c_int64_t)))
        call ck(l8_params_init_uniform(g, bid(l), -1 / sqrt(real(dims(l - 1), c_float)), &
                                       1 / sqrt(real(dims(l - 1), c_float)), int(137 + l, c_int64_t)))
    end do
    call ck(l8_optim_create_adamw(g, opt, lr=LR, weight_decay=0.01_c_float))
    call ck(l8_gemm_handle_create(ctx, gemm))
    call ck(l8_recipe_create(ctx, recipe))
    do l = 1, NL
        call ck(l8_linear_create(ctx, 'fc' // digit(l), gemm, l8_params_master(g, wid(l)), &
                                 l8_params_main_grad(g, wid(l)), lin(l), mode=L8_LINEAR_FP8, &
                                 recipe=recipe, bias=l8_params_master(g, bid(l)), &
                                 bias_grad=l8_params_main_grad(g, bid(l)), weight_id=wid(l), &
                                 bias_id=bid(l)))
    end do
    call ck(l8_tensor_empty(ctx, L8_F32, [PIXELS, B], xf))
    call ck(l8_tensor_empty(ctx, L8_I32, [B], labels))
    call ck(l8_tensor_empty(ctx, L8_F32, [B], loss))
    call ck(l8_tensor_empty(ctx, L8_I32, [B], hit))
    do l = 0, NL
        call ck(l8_tensor_empty(ctx, L8_BF16, [dims(l), B], grad(l)))      ! gradients (B, dims(l))
    end do
    call ck(l8_tensor_empty(ctx, L8_BF16, [PIXELS, B], act0))              ! the images, bf16
    do l = 1, NL
        call ck(l8_tensor_empty(ctx, L8_BF16, [dims(l), B], pre(l)))          ! layer l's output
    end do
    call ck(l8_tag_pop())

    ! ---- training ----
    allocate(order(size(ytr)))
    order = [(s, s = 1, size(ytr))]
    total = epochs * nb
    steps = 0
    do e = 1, epochs
        call shuffle(order, e)
        sum_loss = 0
        do s = 1, nb
            call ck(l8_optim_set_lr(opt, real(LR * 0.5 * (1 + cos(3.14159265d0 * steps / total)), c_float)))
            sum_loss = sum_loss + train_step(order((s - 1) * B + 1:s * B))
            steps = steps + 1
            ! a step mark in the memory trace (nothing without one)
            call l8_trace_record(l8_ctx_trace(ctx), L8_TRACE_STEP, l8_ctx_device(ctx), &
                                 aux=int(steps, c_int64_t))
        end do
        acc = evaluate()
        print '(a, i0, a, f7.4, a, f6.4)', 'epoch ', e, '  train loss ', sum_loss / (nb * B), &
            '  test accuracy ', acc
    end do

    call ck(l8_alloc_get_stats(l8_ctx_allocator(ctx), mem))
    print '(a, f0.2, a, f0.2, a)', 'memory: allocated peak ', &
        real(mem%allocated_peak, real64) / 1048576, ' MiB, reserved peak ', &
        real(mem%reserved_peak, real64) / 1048576, ' MiB'

    ! ---- checkpoint: save, scramble, load, and the accuracy must not move ----
    call get_command_argument(5, arg)
    if (len_trim(arg) == 0) arg = 'fmnist_mlp.ckpt'
    call save_weights(trim(arg))
    call ck(l8_params_init_uniform(g, wid(1), -1.0_c_float, 1.0_c_float, 99_c_int64_t))
    call load_weights(trim(arg))
    acc2 = evaluate()
    print '(a, a, a, f6.4)', 'checkpoint ', trim(arg), ': saved and reloaded, test accuracy ', acc2
    if (acc2 /= acc) call die('the reloaded weights give another accuracy')

    do l = 1, NL
        call l8_linear_destroy(lin(l))
    end do
    call l8_tensor_destroy(xf); call l8_tensor_destroy(labels)
    call l8_tensor_destroy(loss); call l8_tensor_destroy(hit)
    call l8_tensor_destroy(act0)
    do l = 1, NL
        call l8_tensor_destroy(pre(l))
    end do
    do l = 0, NL
        call l8_tensor_destroy(grad(l))
    end do
    call l8_optim_destroy(opt)
    call l8_recipe_destroy(recipe)
    call l8_gemm_handle_destroy(gemm)
    call l8_params_destroy(g)
    call l8_ctx_destroy(ctx)
    if (acc < min_acc) then
        print '(a, f6.4, a, f6.4)', 'test accuracy ', acc, ' is below ', min_acc
        error stop 1
    end if

contains

    ! One step on the images idx(:) (1-based): forward, loss, backward,
    ! AdamW, recipe update. Returns the batch's summed loss.
    real(real64) function train_step(idx) result(total_loss)
        integer, intent(in) :: idx(:)
        real(c_float) :: rl(B)
        integer :: i
        call ck(l8_tensor_copy_from_array(xf, xtr(:, idx)))
        call ck(l8_tensor_copy_from_array(labels, ytr(idx)))
        call ck(l8_convert(xf, act0))
        do i = 1, NL
            call ck(l8_linear_begin_step(lin(i)))
        end do
        call ck(l8_linear_refresh_weights(lin))   ! every layer's weight copies in two launches
        ! layer i > 1 takes gelu(pre(i - 1)) and applies the GELU itself
        call ck(l8_linear_forward(lin(1), act0, pre(1), saved(1)))
        do i = 2, NL
            call ck(l8_linear_forward_act(lin(i), L8_ACT_GELU, pre(i - 1), pre(i), saved(i)))
        end do
        call ck(l8_softmax_xent(pre(NL), labels, CLASSES, 1.0_c_float / B, loss, hit, dlogits=grad(NL)))
        ! grad(i - 1): the gradient of layer i's input; below the head the
        ! layer takes the gradient of gelu(pre(i)) and multiplies by gelu'
        call ck(l8_linear_backward(lin(NL), saved(NL), grad(NL), grad(NL - 1)))
        do i = NL - 1, 1, -1
            if (i > 1) then
                call ck(l8_linear_backward_act(lin(i), L8_ACT_GELU, saved(i), grad(i), pre(i), &
                                               grad(i - 1)))
            else
                call ck(l8_linear_backward_act(lin(i), L8_ACT_GELU, saved(i), grad(i), pre(i)))
            end if
        end do
        call ck(l8_optim_step(opt))
        call ck(l8_recipe_update(recipe))
        call ck(l8_tensor_to_array(loss, rl))
        total_loss = sum(real(rl, real64))
    end function

    ! Test accuracy over the 10000 test images (125 batches of 80).
    real function evaluate() result(a)
        integer(c_int32_t) :: h(B)
        integer :: i, j, hits
        hits = 0
        do i = 0, size(yte) / B - 1
            call ck(l8_tensor_copy_from_array(xf, xte(:, i * B + 1:(i + 1) * B)))
            call ck(l8_tensor_copy_from_array(labels, yte(i * B + 1:(i + 1) * B)))
            call ck(l8_convert(xf, act0))
            call ck(l8_linear_forward(lin(1), act0, pre(1)))
            do j = 2, NL
                call ck(l8_linear_forward_act(lin(j), L8_ACT_GELU, pre(j - 1), pre(j)))
            end do
            call ck(l8_softmax_xent(pre(NL), labels, CLASSES, 1.0_c_float, loss, hit))
            call ck(l8_tensor_to_array(hit, h))
            hits = hits + sum(h)
        end do
        a = real(hits) / real((size(yte) / B) * B)
    end function

    ! The master weights only, by design: the end of training, reloaded into
    ! this same model, whose recipe still holds its FP8 scales. Resuming
    ! training bit for bit also needs each optimizer state (l8_optim_state),
    ! the step (l8_optim_get_step), the recipe's state (l8_recipe_state) and
    ! its metas, and here the epoch; FP8 inference in another process needs
    ! the recipe's scales too (a new recipe casts at scale 1). resume() in
    ! tests/test_fortran.f90 saves and restores all of it.
    subroutine save_weights(path)
        character(len=*), intent(in) :: path
        type(l8_ckpt_writer) :: w
        call ck(l8_ckpt_writer_open(path, KIND, 1, w))
        call ck(l8_ckpt_write_tensor(w, 'master', l8_params_master_flat(g)))
        call ck(l8_ckpt_writer_commit(w))
    end subroutine

    subroutine load_weights(path)
        character(len=*), intent(in) :: path
        type(l8_ckpt_reader) :: r
        call ck(l8_ckpt_open(path, r))
        call ck(l8_ckpt_expect(r, KIND, 1))
        call ck(l8_ckpt_read_tensor(r, 'master', l8_params_master_flat(g)))
        call l8_ckpt_close(r)
    end subroutine

    ! The same permutation for a given epoch on every run (Fisher-Yates from
    ! the compiler's generator seeded by the epoch).
    subroutine shuffle(p, epoch)
        integer, intent(inout) :: p(:)
        integer, intent(in) :: epoch
        integer, allocatable :: seed(:)
        integer :: n, i, j, tmp
        real :: u
        call random_seed(size=n)
        allocate(seed(n))
        seed = [(7919 * epoch + 104729 * i, i = 1, n)]
        call random_seed(put=seed)
        do i = size(p), 2, -1
            call random_number(u)
            j = 1 + min(i - 1, int(u * i))
            tmp = p(i); p(i) = p(j); p(j) = tmp
        end do
    end subroutine

    ! One split of the IDX files: images normalized to x(784, n), labels y(n).
    subroutine load_split(dir, split, x, y)
        character(len=*), intent(in) :: dir, split
        real(c_float), allocatable, intent(out) :: x(:, :)
        integer(c_int32_t), allocatable, intent(out) :: y(:)
        integer(int8), allocatable :: bytes(:)
        integer :: n, m
        call read_idx(dir // '/' // split // '-images-idx3-ubyte', 2051, n, bytes)
        if (size(bytes) /= n * PIXELS) call die(split // ' images: not 28x28')
        x = reshape((real(iand(int(bytes), 255), c_float) / 255 - MEAN) / STD, [PIXELS, n])
        call read_idx(dir // '/' // split // '-labels-idx1-ubyte', 2049, m, bytes)
        if (m /= n) call die(split // ': image and label counts differ')
        y = int(bytes, c_int32_t)
    end subroutine

    ! An IDX file: big-endian magic, count, dims; then the bytes.
    subroutine read_idx(path, magic, n, bytes)
        character(len=*), intent(in) :: path
        integer, intent(in) :: magic
        integer, intent(out) :: n
        integer(int8), allocatable, intent(out) :: bytes(:)
        integer(int8) :: hdr(4)
        integer :: u, ios, ndim, i, total
        integer(c_int64_t) :: fsize
        open (newunit=u, file=path, access='stream', form='unformatted', status='old', &
              action='read', iostat=ios)
        if (ios /= 0) call die('cannot open ' // path // ' (gunzip the dataset files into DIR)')
        inquire (unit=u, size=fsize)
        read (u) hdr
        if (be32(hdr) /= magic) call die(path // ': not an IDX file of the expected kind')
        ndim = iand(int(hdr(4)), 255)
        read (u) hdr
        n = be32(hdr)
        total = n
        do i = 2, ndim
            read (u) hdr
            total = total * be32(hdr)
        end do
        if (fsize /= 4 * (1 + ndim) + total) call die(path // ': wrong length')
        allocate(bytes(total))
        read (u) bytes
        close (u)
    end subroutine

    integer function be32(h)
        integer(int8), intent(in) :: h(4)
        be32 = ishft(iand(int(h(1)), 255), 24) + ishft(iand(int(h(2)), 255), 16) + &
               ishft(iand(int(h(3)), 255), 8) + iand(int(h(4)), 255)
    end function

    character(len=1) function digit(i)
        integer, intent(in) :: i
        digit = achar(iachar('0') + i)
    end function

    subroutine ck(st)
        integer(c_int), intent(in) :: st
        if (st /= L8_OK) call die(l8_last_error_message())
    end subroutine

    subroutine die(msg)
        character(len=*), intent(in) :: msg
        print '(a, a)', 'fmnist_mlp: ', msg
        error stop 1
    end subroutine
end program fmnist_mlp
