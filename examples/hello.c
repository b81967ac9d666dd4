/* hello.c - the smallest program that embeds lean8: a context on the best
 * device, a tensor, a round trip through device memory.
 *
 *   cc hello.c $(pkg-config --cflags --libs lean8) -o hello && ./hello
 *   (LD_LIBRARY_PATH=<prefix>/lib when the prefix is not a system one)
 */
#include <stdio.h>
#include <lean8.h>

#define TRY(x) do { l8_status s_ = (x); if (s_ != L8_OK) { \
    fprintf(stderr, "%s\n", l8_last_error_string()); goto out; } } while (0)

int main(void)
{
    int rc = 1;
    l8_ctx *ctx = NULL;
    l8_tensor *t = NULL, *tt = NULL, *c = NULL;
    float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
    int64_t shape[2] = {2, 3};

    TRY(l8_ctx_create(NULL, &ctx));
    TRY(l8_tensor_empty(ctx, L8_F32, 2, shape, &t));
    TRY(l8_tensor_copy_from_host(t, in, sizeof in, NULL));
    TRY(l8_tensor_transpose(t, 0, 1, &tt));          /* (3, 2) view, no copy */
    TRY(l8_tensor_contiguous(tt, NULL, &c));         /* (3, 2) dense copy */
    TRY(l8_tensor_copy_to_host(c, out, sizeof out, NULL));
    TRY(l8_ctx_synchronize(ctx));
    printf("lean8 %s on %s: transpose of [[1 2 3] [4 5 6]] = [[%g %g] [%g %g] [%g %g]]\n",
           l8_version(), l8_ctx_device_name(ctx), out[0], out[1], out[2], out[3], out[4], out[5]);
    rc = (out[1] == 4 && out[2] == 2) ? 0 : 1;
out:
    l8_tensor_destroy(c);
    l8_tensor_destroy(tt);
    l8_tensor_destroy(t);
    l8_ctx_destroy(ctx);
    return rc;
}
