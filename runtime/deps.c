/* deps.c - lists of dependents: the objects that keep a pointer to a
 * parameter group or a communicator and must be told when it is destroyed
 * before them (internal.h, "dependents").
 *
 * Invariants: v[0..n) are the live entries in the order they were added;
 * an object is in a list at most once per add; notify empties the list
 * before it returns, taking each entry off before calling its lost().
 */
#include <stdlib.h>
#include <string.h>
#include "runtime/internal.h"

struct l8i_dep {
    void (*lost)(void *obj);
    void *obj;
};

l8_status l8i_deps_add(l8i_deps *d, void (*lost)(void *obj), void *obj, const char *what)
{
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 4;
        struct l8i_dep *v = realloc(d->v, (size_t)cap * sizeof *v);
        if (!v)
            return L8_FAIL(L8_ERR_OOM, "%s: out of host memory", what);
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = (struct l8i_dep){ lost, obj };
    return L8_OK;
}

void l8i_deps_remove(l8i_deps *d, void *obj)
{
    for (int i = d->n - 1; i >= 0; i--)
        if (d->v[i].obj == obj) {
            memmove(&d->v[i], &d->v[i + 1], (size_t)(d->n - i - 1) * sizeof *d->v);
            d->n--;
            return;
        }
}

void l8i_deps_notify(l8i_deps *d)
{
    while (d->n > 0) {
        struct l8i_dep e = d->v[--d->n];
        e.lost(e.obj);
    }
    free(d->v);
    *d = (l8i_deps){ 0 };
}
