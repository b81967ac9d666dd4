/* bootstrap.c - how ranks find each other: ids, the launcher's environment
 * (torchrun, Slurm, Open MPI), the TCP rendezvous at MASTER_ADDR:MASTER_PORT
 * and the rendezvous file (L8_INIT_FILE).
 *
 * An id made by l8_comm_id_create for TCP owns a listening socket until
 * rank 0 of that id joins in the same process; the socket is kept in a small
 * process-wide list keyed by the id's run id.
 *
 * The rendezvous file: rank 0 listens on a free port and writes the id
 * (with its host and port) to a temporary name, then renames it into place;
 * the other ranks poll for the file, read it and connect. A file left by an
 * earlier job is recognised by its run id when the launcher gives one
 * (L8_RUN_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID): ranks wait for the file of
 * their own job. Without a job id, remove the file between jobs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "runtime/comm_internal.h"

int64_t l8i_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t l8i_random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
        v ^= (uintptr_t)&v;
    }
    return v;
}

/* Seconds from the environment as ms; fallback when unset or not positive. */
static int env_seconds_ms(const char *name, int fallback_ms)
{
    const char *v = getenv(name);
    if (!v || !*v) return fallback_ms;
    char *end;
    double s = strtod(v, &end);
    if (*end || !(s > 0) || s > 2e6) return fallback_ms;
    return (int)(s * 1000);
}

void l8_comm_config_init(l8_comm_config *cfg)
{
    if (cfg) *cfg = (l8_comm_config)L8_COMM_CONFIG_INIT;
}

int l8i_comm_timeout_ms(const l8_comm_config *c)
{
    return c && c->timeout_ms > 0 ? c->timeout_ms : env_seconds_ms("L8_COMM_TIMEOUT", 600000);
}

int l8i_init_timeout_ms(const l8_comm_config *c)
{
    return c && c->init_timeout_ms > 0 ? c->init_timeout_ms
                                       : env_seconds_ms("L8_INIT_TIMEOUT", 300000);
}

/* ---- ids ---- */

l8_status l8i_id_read(const char *fn, const l8_comm_id *id, l8i_id *out)
{
    memcpy(out, id->bytes, sizeof *out);
    out->host[sizeof out->host - 1] = '\0';
    if (out->magic != L8I_ID_MAGIC || out->proto != L8I_PROTO_VERSION ||
        out->transport < L8_COMM_NCCL || out->transport > L8_COMM_THREADS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: not an l8_comm_id of this lean8 (magic %08x, "
                       "protocol %u, transport %u)", fn, out->magic, out->proto, out->transport);
    return L8_OK;
}

typedef struct pending { struct pending *next; uint64_t run_id; int fd; } pending;
static pthread_mutex_t g_pending_mu = PTHREAD_MUTEX_INITIALIZER;
static pending *g_pending;

static l8_status keep_listener(uint64_t run_id, int fd)
{
    pending *p = malloc(sizeof *p);
    if (!p) return L8_FAIL(L8_ERR_OOM, "l8_comm_id_create: out of host memory");
    p->run_id = run_id;
    p->fd = fd;
    pthread_mutex_lock(&g_pending_mu);
    p->next = g_pending;
    g_pending = p;
    pthread_mutex_unlock(&g_pending_mu);
    return L8_OK;
}

int l8i_id_take_listener(uint64_t run_id)
{
    int fd = -1;
    pthread_mutex_lock(&g_pending_mu);
    for (pending **at = &g_pending; *at; at = &(*at)->next)
        if ((*at)->run_id == run_id) {
            pending *p = *at;
            *at = p->next;
            fd = p->fd;
            free(p);
            break;
        }
    pthread_mutex_unlock(&g_pending_mu);
    return fd;
}

/* A TCP id: a listener on L8_COMM_ADDR (or all interfaces) and the address
 * the others should dial. */
static l8_status tcp_id(l8i_id *d)
{
    const char *bind_host = getenv("L8_COMM_ADDR");
    int fd, port;
    L8_CHECK(l8i_tcp_listen(bind_host, 0, &fd, &port));
    l8i_tcp_advertised_host(d->host, sizeof d->host);
    d->port = (uint32_t)port;
    l8_status st = keep_listener(d->run_id, fd);
    if (st != L8_OK) close(fd);
    return st;
}

l8_status l8_comm_id_create(l8_ctx *ctx, l8_comm_transport transport, l8_comm_id *id)
{
    L8_ARG(ctx != NULL && id != NULL);
    l8_backend b = l8_ctx_backend(ctx);
    if (transport == L8_COMM_DEFAULT) transport = b == L8_BACKEND_CUDA ? L8_COMM_NCCL : L8_COMM_TCP;
    if (transport < L8_COMM_NCCL || transport > L8_COMM_THREADS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_id_create: unknown transport %d", (int)transport);
    if ((transport == L8_COMM_NCCL) != (b == L8_BACKEND_CUDA))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_id_create: transport %s does not fit a %s "
                       "context (NCCL for CUDA, TCP or THREADS for host)",
                       transport == L8_COMM_NCCL ? "NCCL" : transport == L8_COMM_TCP ? "TCP" : "THREADS",
                       l8_ctx_device_name(ctx));
    l8i_id d;
    memset(&d, 0, sizeof d);
    d.magic = L8I_ID_MAGIC;
    d.proto = L8I_PROTO_VERSION;
    d.transport = (uint32_t)transport;
    d.run_id = l8i_random64();
    if (transport == L8_COMM_THREADS) L8_CHECK(l8i_threads_create_group(&d.run_id));
    if (transport == L8_COMM_TCP) L8_CHECK(tcp_id(&d));
    if (transport == L8_COMM_NCCL) L8_CHECK(l8i_nccl_get_unique_id(d.nccl));
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &d, sizeof d);
    return L8_OK;
}

/* ---- the environment ---- */

/* An integer variable: *found = 0 when unset. */
static l8_status env_int(const char *name, int lo, int hi, int *v, int *found)
{
    const char *s = getenv(name);
    *found = s && *s;
    if (!*found) return L8_OK;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s='%s' is not an integer in %d..%d", name, s, lo, hi);
    *v = (int)x;
    return L8_OK;
}

l8_status l8_dist_env_read(l8_dist_env *e)
{
    L8_ARG(e != NULL);
    if (e->size < sizeof *e)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_dist_env_read: size %zu, wanted %zu", e->size,
                       sizeof *e);
    size_t size = e->size;
    memset(e, 0, sizeof *e);
    e->size = size;
    e->world_size = e->local_world_size = 1;
    e->source = "none";
    static const struct { const char *src, *rank, *world, *local, *local_world; } k[] = {
        { "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE" },
        { "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE" },
        { "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE" },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        int r = 0, w = 1, fr, fw, fl, flw;
        L8_CHECK(env_int(k[i].rank, 0, 1 << 24, &r, &fr));
        if (!fr) continue;
        L8_CHECK(env_int(k[i].world, 1, 1 << 24, &w, &fw));
        if (!fw)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s is set but %s is not", k[i].rank, k[i].world);
        if (r >= w)
            return L8_FAIL(L8_ERR_INVALID_ARG, "%s=%d is not below %s=%d", k[i].rank, r,
                           k[i].world, w);
        e->rank = r;
        e->world_size = w;
        e->local_world_size = w;
        L8_CHECK(env_int(k[i].local, 0, 1 << 24, &e->local_rank, &fl));
        L8_CHECK(env_int(k[i].local_world, 1, 1 << 24, &e->local_world_size, &flw));
        if (!fl) e->local_rank = r;
        e->source = k[i].src;
        break;
    }
    const char *a = getenv("MASTER_ADDR"), *f = getenv("L8_INIT_FILE");
    snprintf(e->master_addr, sizeof e->master_addr, "%s", a ? a : "");
    int found;
    L8_CHECK(env_int("MASTER_PORT", 1, 65535, &e->master_port, &found));
    snprintf(e->init_file, sizeof e->init_file, "%s", f ? f : "");
    return L8_OK;
}

/* The job's id from the launcher, hashed; 0 if none (then only the id or
 * the rendezvous ties the ranks). */
static uint64_t job_run_id(void)
{
    static const char *const names[] = { "L8_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", NULL };
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v) continue;
        uint64_t h = 1469598103934665603ull;  /* FNV-1a */
        for (; *v; v++) h = (h ^ (uint8_t)*v) * 1099511628211ull;
        return h | 1;
    }
    return 0;
}

/* The rendezvous file: {run id, host, port} as one text line. */
static l8_status file_write(const char *path, uint64_t run_id, const char *host, int port)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return l8_error_set(L8_ERR_IO, errno, l8_errno_name(errno), "fopen", __FILE__, __LINE__,
                            "L8_INIT_FILE: cannot write %s: %s", tmp, strerror(errno));
    int ok = fprintf(f, "lean8-rendezvous 1 %016llx %s %d\n", (unsigned long long)run_id, host,
                     port) > 0;
    ok = (fflush(f) == 0) & ok & (fsync(fileno(f)) == 0);
    ok = (fclose(f) == 0) & ok;
    if (!ok || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return l8_error_set(L8_ERR_IO, e, l8_errno_name(e), "rename", __FILE__, __LINE__,
                            "L8_INIT_FILE: cannot publish %s: %s", path, strerror(e));
    }
    return L8_OK;
}

static l8_status file_wait(const char *path, uint64_t run_id, int64_t deadline, char *host,
                           size_t hn, int *port)
{
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            unsigned long long id = 0;
            char h[256];
            int p = 0;
            int n = fscanf(f, "lean8-rendezvous 1 %llx %255s %d", &id, h, &p);
            fclose(f);
            if (n == 3 && (!run_id || id == run_id) && p > 0 && p < 65536) {
                snprintf(host, hn, "%s", h);
                *port = p;
                return L8_OK;
            }
        }
        if (l8i_now_ms() >= deadline)
            return L8_FAIL(L8_ERR_TIMEOUT, "L8_INIT_FILE: %s did not appear%s before the deadline "
                           "(L8_INIT_TIMEOUT)", path, run_id ? " for this job's run id" : "");
        struct timespec ts = { 0, 50 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

l8_status l8_comm_init_env(l8_ctx *ctx, const l8_comm_config *cfg, l8_comm **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_comm_config c = L8_COMM_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_comm_init_env", "L8_COMM_CONFIG_INIT");
    l8_dist_env e = { .size = sizeof e };
    L8_CHECK(l8_dist_env_read(&e));
    l8_backend b = l8_ctx_backend(ctx);
    l8_comm_transport t = c.transport;
    if (t == L8_COMM_DEFAULT) t = b == L8_BACKEND_CUDA ? L8_COMM_NCCL : L8_COMM_TCP;
    if (t == L8_COMM_THREADS && e.world_size > 1)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_env: the THREADS transport cannot join "
                       "ranks of other processes (use TCP)");
    if (e.world_size == 1) {                  /* nobody to meet: a group of one */
        l8_comm_id id;
        L8_CHECK(l8_comm_id_create(ctx, t, &id));
        return l8_comm_init_rank(ctx, &id, 0, 1, &c, out);
    }
    if ((t == L8_COMM_NCCL) != (b == L8_BACKEND_CUDA))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_env: transport %d does not fit a %s "
                       "context", (int)t, l8_ctx_device_name(ctx));
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (!e.init_file[0] && agent && !strcmp(agent, "True"))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_env: torchrun's own store listens on "
                       "MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 cannot serve "
                       "the rendezvous there: run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
                       "and --rdzv-backend c10d, or set L8_INIT_FILE");
    if (!e.init_file[0] && (!e.master_addr[0] || !e.master_port))
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_comm_init_env: world size %d (%s) but neither "
                       "MASTER_ADDR and MASTER_PORT nor L8_INIT_FILE are set", e.world_size,
                       e.source);
    l8_comm *comm;
    L8_CHECK(l8i_comm_new(ctx, t, e.rank, e.world_size, l8i_comm_timeout_ms(&c), &comm));
    l8i_rdzv r = { .listen_fd = -1, .host = e.master_addr, .port = e.master_port, .rank = e.rank,
                   .world = e.world_size, .transport = (uint32_t)t, .run_id = job_run_id(),
                   .deadline_ms = l8i_now_ms() + l8i_init_timeout_ms(&c),
                   .timeout_ms = comm->timeout_ms };
    char host[256];
    l8_status st = L8_OK;
    if (e.rank == 0) {
        st = l8i_tcp_listen(e.init_file[0] ? getenv("L8_COMM_ADDR") : NULL,
                            e.init_file[0] ? 0 : e.master_port, &r.listen_fd, &r.port);
        if (st == L8_OK && e.init_file[0]) {
            l8i_tcp_advertised_host(host, sizeof host);
            st = file_write(e.init_file, r.run_id, host, r.port);
        }
        if (st == L8_OK && t == L8_COMM_NCCL) st = l8i_nccl_get_unique_id(r.blob);
    } else if (e.init_file[0]) {
        st = file_wait(e.init_file, r.run_id, r.deadline_ms, host, sizeof host, &r.port);
        r.host = host;
    }
    if (st == L8_OK) st = l8i_tcp_rendezvous(&r, t == L8_COMM_TCP ? &comm->xp : NULL);
    else if (r.listen_fd >= 0) close(r.listen_fd);
    if (st == L8_OK && t == L8_COMM_NCCL) st = l8i_nccl_init(comm, r.blob, r.deadline_ms);
    if (st != L8_OK) {
        l8_comm_destroy(comm);
        return st;
    }
    *out = comm;
    return L8_OK;
}
