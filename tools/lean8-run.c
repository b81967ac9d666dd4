/* lean8-run - start N local ranks of a program with the torchrun environment,
 * as `torchrun --standalone --nproc-per-node N prog args...` does.
 *
 *   lean8-run [-n N] [--master-addr A] [--master-port P] [--timeout S]
 *             [--grace S] [--no-prefix] [--tee DIR] [--] prog args...
 *
 * Each rank gets RANK = LOCAL_RANK = r, WORLD_SIZE = LOCAL_WORLD_SIZE = N,
 * GROUP_RANK = 0, MASTER_ADDR, MASTER_PORT, L8_RUN_ID = TORCHELASTIC_RUN_ID
 * (16 random hex digits, the same for every rank) and torchrun's ROLE_*,
 * GROUP_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT/_MAX_RESTARTS = 0 and
 * TORCHELASTIC_USE_AGENT_STORE = False. L8_DEVICE is left as it is: the
 * library binds cuda:LOCAL_RANK itself.
 *
 * MASTER_PORT, when not given: the launcher binds port 0 on the master
 * address, reads the port the kernel chose and closes the socket just before
 * it starts the ranks. Between that close and rank 0's own bind another
 * process could take the port (the kernel hands out ports at random, so this
 * needs another bind(0) to draw the same port in that window); rank 0's bind
 * then fails with "address in use" and the run stops like any failed rank.
 * Holding the socket and passing it down would close the window but would
 * break every program that binds MASTER_PORT itself, which is all of them.
 *
 * Invariants:
 * - One thread. SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked and read from
 *   a signalfd, so everything happens in one poll loop.
 * - The ranks share one process group (rank 0's pid), not the launcher's: a
 *   terminal's Ctrl-C reaches only the launcher, which forwards it. Signals go
 *   to the whole group, so helpers a rank started stop with it.
 * - Each rank has its own stdout and stderr pipes; the launcher alone writes
 *   the terminal, one whole prefixed line per write(), so lines never mix.
 *   A line longer than LINE_CAP bytes is printed in LINE_CAP pieces.
 * - Ranks run with PR_SET_PDEATHSIG(SIGKILL): a killed launcher leaves none.
 *   Their stdin is /dev/null (they are not in the terminal's foreground
 *   group, so a read from the terminal would stop them).
 *
 * Exit status: 0 when every rank exited 0; the status of the first rank that
 * failed (128 + signal when a signal killed it); 124 after --timeout; 128 +
 * signal after a forwarded SIGINT/SIGTERM/SIGHUP; 2 for bad usage; 127 (126)
 * when the program cannot be found (executed); 1 for other launcher errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#ifndef L8_VERSION
#define L8_VERSION "unknown"
#endif

enum {
    MAX_RANKS = 1024,
    LINE_CAP = 64 * 1024,   /* longest line printed whole */
    DRAIN_MS = 1000,        /* after the last rank exits: how long a pipe that a
                               helper process still holds may keep the run open */
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
};

typedef struct {
    int fd;                 /* read end of the rank's pipe; -1 once at EOF */
    int out;                /* the launcher's fd the lines go to: 1 or 2 */
    int tee;                /* --tee file, or -1 */
    char *buf;              /* the line read so far (no '\n' yet) */
    size_t len;
} stream;

typedef struct {
    pid_t pid;              /* 0 once reaped */
    stream io[2];           /* the rank's stdout, stderr */
} rank_t;

static struct {
    long nproc, port;
    const char *addr, *tee;
    double timeout, grace;
    int prefix;
    char **argv;
} opt = { .nproc = 1, .addr = "127.0.0.1", .grace = 5.0, .prefix = 1 };

static rank_t *ranks;
static int alive;                       /* ranks not reaped yet */
static pid_t pgid, launcher;
static sigset_t orig_mask;
static struct rlimit orig_nofile;
static char run_id[17];
static int out_dead[3];                 /* the launcher's stdout/stderr is gone (EPIPE) */

/* One line "lean8-run: ..." on stderr, in one write. */
static void say(const char *fmt, ...)
{
    char line[600] = "lean8-run: ";
    size_t k = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + k, sizeof line - k - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    k += (size_t)n < sizeof line - k - 1 ? (size_t)n : sizeof line - k - 2;
    line[k++] = '\n';
    if (write(2, line, k) < 0) { /* nowhere left to report */ }
}

static void usage_error(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lean8-run: %s\nTry 'lean8-run --help'.\n", msg);
    exit(EXIT_USAGE);
}

static void usage(void)
{
    printf("usage: lean8-run [-n N] [options] [--] prog args...\n"
           "Starts N local ranks of prog with the torchrun environment (RANK, WORLD_SIZE,\n"
           "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, L8_RUN_ID).\n"
           "  -n, --nproc N         ranks to start, 1 to %d (default 1)\n"
           "  --master-addr ADDR    MASTER_ADDR (default 127.0.0.1)\n"
           "  --master-port PORT    MASTER_PORT (default: a free port of ADDR)\n"
           "  --timeout SECONDS     stop every rank after this long and exit %d\n"
           "  --grace SECONDS       SIGTERM -> SIGKILL delay when stopping ranks (default 5)\n"
           "  --no-prefix           print the ranks' lines without the \"[rank] \" prefix\n"
           "  --tee DIR             also write each rank's output to DIR/rank<r>.stdout/.stderr\n"
           "  --version, --help\n"
           "When a rank exits non-zero or dies, the others get SIGTERM (SIGKILL after the\n"
           "grace) and lean8-run exits with that rank's status. SIGINT, SIGTERM and SIGHUP\n"
           "are forwarded to every rank.\n", MAX_RANKS, EXIT_TIMEOUT);
}

static long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        usage_error("%s: '%s' is not a whole number from %ld to %ld", flag, s, lo, hi);
    return v;
}

static double parse_seconds(const char *flag, const char *s, int zero_ok)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno != 0 || !(zero_ok ? v >= 0 : v > 0) || v > 1e7)
        usage_error("%s: '%s' is not a number of seconds %s 0 (at most 1e7)", flag, s,
                    zero_ok ? ">=" : ">");
    return v;
}

/* argv[*i] is --name VALUE, --name=VALUE, -s VALUE or -sVALUE: returns VALUE
 * and moves *i past it; NULL when argv[*i] is another option. */
static const char *value_of(int argc, char **argv, int *i, const char *name, const char *s)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    int exact = strcmp(a, name) == 0 || (s && strcmp(a, s) == 0);
    if (exact) {
        if (*i + 1 >= argc) usage_error("option '%s' needs a value", a);
        *i += 2;
        return argv[*i - 1];
    }
    if (strncmp(a, name, n) == 0 && a[n] == '=') { *i += 1; return a + n + 1; }
    if (s && strncmp(a, s, strlen(s)) == 0 && a[1] != '-') { *i += 1; return a + strlen(s); }
    return NULL;
}

static void parse_args(int argc, char **argv)
{
    int i = 1;
    while (i < argc) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--") == 0) { i++; break; }
        if (a[0] != '-' || a[1] == '\0') break;                  /* the program */
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(); exit(0); }
        if (strcmp(a, "--version") == 0) { printf("lean8-run (lean8) %s\n", L8_VERSION); exit(0); }
        if (strcmp(a, "--no-prefix") == 0) { opt.prefix = 0; i++; continue; }
        if ((v = value_of(argc, argv, &i, "--nproc", "-n")) ||
            (v = value_of(argc, argv, &i, "--nproc-per-node", NULL))) {
            char flag[32];                  /* the option as written, without "=N" / "N" */
            snprintf(flag, sizeof flag, "%.*s", a[1] == '-' ? (int)strcspn(a, "=") : 2, a);
            opt.nproc = parse_long(flag, v, 1, MAX_RANKS);
        }
        else if ((v = value_of(argc, argv, &i, "--master-addr", NULL))) {
            if (!*v) usage_error("--master-addr: empty address");
            opt.addr = v;
        } else if ((v = value_of(argc, argv, &i, "--master-port", NULL)))
            opt.port = parse_long("--master-port", v, 0, 65535);
        else if ((v = value_of(argc, argv, &i, "--timeout", NULL)))
            opt.timeout = parse_seconds("--timeout", v, 0);
        else if ((v = value_of(argc, argv, &i, "--grace", NULL)))
            opt.grace = parse_seconds("--grace", v, 1);
        else if ((v = value_of(argc, argv, &i, "--tee", NULL))) {
            if (!*v) usage_error("--tee: empty directory name");
            opt.tee = v;
        } else
            usage_error("unknown option '%s'", a);
    }
    if (i >= argc) usage_error("no program to run");
    opt.argv = argv + i;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *signame(int sig)
{
    static const struct { int sig; const char *name; } names[] = {
        { SIGHUP, "SIGHUP" }, { SIGINT, "SIGINT" }, { SIGQUIT, "SIGQUIT" }, { SIGILL, "SIGILL" },
        { SIGTRAP, "SIGTRAP" }, { SIGABRT, "SIGABRT" }, { SIGBUS, "SIGBUS" }, { SIGFPE, "SIGFPE" },
        { SIGKILL, "SIGKILL" }, { SIGUSR1, "SIGUSR1" }, { SIGSEGV, "SIGSEGV" },
        { SIGUSR2, "SIGUSR2" }, { SIGPIPE, "SIGPIPE" }, { SIGALRM, "SIGALRM" },
        { SIGTERM, "SIGTERM" }, { SIGXCPU, "SIGXCPU" }, { SIGXFSZ, "SIGXFSZ" }, { SIGSYS, "SIGSYS" },
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (names[k].sig == sig) return names[k].name;
    return "unnamed";
}

/* ---- output: whole lines, one write each ---------------------------------- */

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            poll(&pf, 1, -1);
            continue;
        }
        return -1;
    }
    return 0;
}

static void emit(int r, stream *s, const char *line, size_t n)
{
    static char buf[LINE_CAP + 32];
    if (out_dead[s->out]) return;
    size_t k = opt.prefix ? (size_t)snprintf(buf, 32, "[%d] ", r) : 0;
    memcpy(buf + k, line, n);
    buf[k + n] = '\n';
    if (write_all(s->out, buf, k + n + 1) != 0) out_dead[s->out] = 1;
}

static void append(stream *s, const char *p, size_t n)
{
    if (!s->buf && !(s->buf = malloc(LINE_CAP))) {
        say("out of memory for the output of a rank");
        exit(1);
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

/* Splits what a rank wrote into lines; the tail without '\n' waits in s->buf. */
static void consume(int r, stream *s, const char *p, size_t n)
{
    if (s->tee >= 0 && write_all(s->tee, p, n) != 0) {
        say("--tee: writing rank %d's output: %s; no longer teeing it", r, strerror(errno));
        close(s->tee);
        s->tee = -1;
    }
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (s->len + take > LINE_CAP) {        /* too long: print a LINE_CAP piece */
            size_t part = LINE_CAP - s->len;
            append(s, p, part);
            emit(r, s, s->buf, s->len);
            s->len = 0;
            p += part;
            n -= part;
            continue;
        }
        if (!nl) { append(s, p, take); return; }
        if (s->len) {
            append(s, p, take);
            emit(r, s, s->buf, s->len);
            s->len = 0;
        } else {
            emit(r, s, p, take);
        }
        p += take + 1;
        n -= take + 1;
    }
}

/* One read (all == 0) or everything available (all == 1). EOF flushes the
 * partial last line and closes the pipe. */
static void pump(int r, stream *s, int all)
{
    static char chunk[LINE_CAP];
    while (s->fd >= 0) {
        ssize_t n = read(s->fd, chunk, sizeof chunk);
        if (n > 0) {
            consume(r, s, chunk, (size_t)n);
            if (!all) return;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (s->len) emit(r, s, s->buf, s->len);
        s->len = 0;
        close(s->fd);
        s->fd = -1;
    }
}

/* ---- starting ranks ------------------------------------------------------- */

/* The port the kernel gives a socket bound to port 0 of addr; the socket
 * stays open (and the port taken) until the caller closes *fd. */
static int pick_port(const char *addr, int *fd)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *res, *p;
    int rc = getaddrinfo(addr, "0", &hints, &res), err = 0;
    if (rc != 0) { say("--master-addr '%s': %s", addr, gai_strerror(rc)); exit(1); }
    *fd = -1;
    for (p = res; p && *fd < 0; p = p->ai_next) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (s < 0) { err = errno; continue; }
        if (bind(s, p->ai_addr, p->ai_addrlen) == 0 &&
            getsockname(s, (struct sockaddr *)&ss, &len) == 0) { *fd = s; break; }
        err = errno;
        close(s);
    }
    freeaddrinfo(res);
    if (*fd < 0) {
        say("cannot bind a port on --master-addr '%s' (%s): give --master-port", addr, strerror(err));
        exit(1);
    }
    union { struct sockaddr sa; struct sockaddr_in in; struct sockaddr_in6 in6;
            struct sockaddr_storage ss; } a;
    memset(&a, 0, sizeof a);
    socklen_t len = sizeof a;
    if (getsockname(*fd, &a.sa, &len) != 0) {
        say("cannot read the port bound on --master-addr '%s' (%s): give --master-port", addr,
            strerror(errno));
        exit(1);
    }
    return ntohs(a.sa.sa_family == AF_INET6 ? a.in6.sin6_port : a.in.sin_port);
}

/* Returns 0, or -1 when the environment could not grow. */
static int set_env(int r, int port)
{
    char v[32];
    struct { const char *name; long value; } nums[] = {
        { "RANK", r }, { "LOCAL_RANK", r }, { "ROLE_RANK", r }, { "WORLD_SIZE", opt.nproc },
        { "LOCAL_WORLD_SIZE", opt.nproc }, { "ROLE_WORLD_SIZE", opt.nproc }, { "GROUP_RANK", 0 },
        { "GROUP_WORLD_SIZE", 1 }, { "MASTER_PORT", port }, { "TORCHELASTIC_RESTART_COUNT", 0 },
        { "TORCHELASTIC_MAX_RESTARTS", 0 },
    };
    int ok = 1;
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        snprintf(v, sizeof v, "%ld", nums[k].value);
        ok &= setenv(nums[k].name, v, 1) == 0;
    }
    ok &= setenv("MASTER_ADDR", opt.addr, 1) == 0 && setenv("ROLE_NAME", "default", 1) == 0 &&
          setenv("L8_RUN_ID", run_id, 1) == 0 && setenv("TORCHELASTIC_RUN_ID", run_id, 1) == 0 &&
          /* nothing listens on MASTER_PORT but what rank 0 starts there (under
             torchrun "True" means its agent holds the port) */
          setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1) == 0;
    return ok ? 0 : -1;
}

/* In the child: its pipes on 1 and 2, /dev/null on 0, the environment, the
 * launcher's signal mask and fd limit undone, then exec. An exec failure goes
 * back to the launcher as an errno on the status pipe. */
static void child(int r, int port, int out, int err, int status)
{
    int e = 0;
    setpgid(0, pgid);                       /* pgid 0 for rank 0: a new group */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(1);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 0);
    if (dup2(out, 1) < 0 || dup2(err, 2) < 0) e = errno;
    if (!e && set_env(r, port) != 0) e = ENOMEM;
    setrlimit(RLIMIT_NOFILE, &orig_nofile);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
    if (!e) {
        execvp(opt.argv[0], opt.argv);
        e = errno;
    }
    if (write(status, &e, sizeof e) < 0) { /* the launcher sees a short read */ }
    _exit(127);
}

static void reap_all_now(void)
{
    if (pgid) kill(-pgid, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
}

static void spawn(int r, int port)
{
    int out[2], err[2], st[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(st, O_CLOEXEC)) {
        say("cannot start rank %d: pipe: %s", r, strerror(errno));
        reap_all_now();
        exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("cannot start rank %d: fork: %s", r, strerror(errno));
        reap_all_now();
        exit(1);
    }
    if (pid == 0) child(r, port, out[1], err[1], st[1]);
    setpgid(pid, pgid ? pgid : pid);        /* also here: no race with the child */
    if (!pgid) pgid = pid;
    ranks[r].pid = pid;
    alive++;
    close(out[1]); close(err[1]); close(st[1]);
    int e = 0;
    ssize_t n;
    while ((n = read(st[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    close(st[0]);
    if (n > 0) {
        say("cannot run '%s': %s", opt.argv[0], strerror(e));
        reap_all_now();
        exit(e == ENOENT ? 127 : 126);
    }
    for (int k = 0; k < 2; k++) {
        stream *s = &ranks[r].io[k];
        s->fd = k ? err[0] : out[0];
        s->out = k + 1;
        fcntl(s->fd, F_SETFL, O_NONBLOCK);
        s->tee = -1;
        if (opt.tee) {
            char path[4096];
            snprintf(path, sizeof path, "%s/rank%d.%s", opt.tee, r, k ? "stderr" : "stdout");
            s->tee = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (s->tee < 0) {
                say("--tee: cannot create %s: %s", path, strerror(errno));
                reap_all_now();
                exit(1);
            }
        }
    }
}

static void setup(void)
{
    for (int fd = 0; fd < 3; fd++)          /* a closed 0/1/2 would be reused by a pipe */
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd) exit(1);
    getrlimit(RLIMIT_NOFILE, &orig_nofile);
    rlim_t need = (rlim_t)opt.nproc * (opt.tee ? 4 : 2) + 32;
    if (orig_nofile.rlim_cur != RLIM_INFINITY && orig_nofile.rlim_cur < need) {
        struct rlimit rl = orig_nofile;
        rl.rlim_cur = need;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
            say("-n %ld needs %lu open files; the limit is %lu (ulimit -Hn)", opt.nproc,
                (unsigned long)need, (unsigned long)rl.rlim_max);
            exit(1);
        }
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    uint64_t id;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
    snprintf(run_id, sizeof run_id, "%016llx", (unsigned long long)id);
    if (opt.tee && mkdir(opt.tee, 0755) != 0) {
        struct stat sb;
        int e = errno != EEXIST ? errno : stat(opt.tee, &sb) != 0 ? errno
              : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
        if (e) { say("--tee: cannot create directory %s: %s", opt.tee, strerror(e)); exit(1); }
    }
    if (!(ranks = calloc((size_t)opt.nproc, sizeof *ranks))) { say("out of memory"); exit(1); }
}

/* ---- the run -------------------------------------------------------------- */

static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    setup();
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD); sigaddset(&set, SIGINT); sigaddset(&set, SIGTERM); sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &orig_mask);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) { say("signalfd: %s", strerror(errno)); return 1; }

    int hold = -1, port = (int)opt.port;
    if (port == 0) port = pick_port(opt.addr, &hold);
    launcher = getpid();
    if (hold >= 0) close(hold);             /* the race documented above starts here */
    for (int r = 0; r < opt.nproc; r++) spawn(r, port);

    double start = now(), kill_at = 0, drain_until = 0;
    int code = -1, stopping = 0, killed = 0, open_streams = 2 * (int)opt.nproc;
    struct pollfd *pf = calloc((size_t)(2 * opt.nproc + 1), sizeof *pf);
    int *who = calloc((size_t)(2 * opt.nproc + 1), sizeof *who);
    if (!pf || !who) { say("out of memory"); free(pf); free(who); reap_all_now(); return 1; }

    while (alive > 0 || open_streams > 0) {
        double t = now();
        if (opt.timeout > 0 && !stopping && alive > 0 && t >= start + opt.timeout) {
            say("timeout: ranks still running after %g s (--timeout); stopping them", opt.timeout);
            code = EXIT_TIMEOUT;
            stopping = 1;
            kill(-pgid, SIGTERM);
            kill_at = t + opt.grace;
        }
        if (kill_at > 0 && t >= kill_at && alive > 0 && !killed) {
            say("%d rank(s) still running %g s after SIGTERM; sending SIGKILL", alive, opt.grace);
            kill(-pgid, SIGKILL);
            killed = 1;
        }
        if (alive == 0 && drain_until == 0) drain_until = t + DRAIN_MS / 1000.0;
        if (alive == 0 && t >= drain_until) break;

        double wake = -1;                   /* the next deadline, if any */
        if (opt.timeout > 0 && !stopping && alive > 0) wake = start + opt.timeout;
        if (kill_at > 0 && !killed && alive > 0 && (wake < 0 || kill_at < wake)) wake = kill_at;
        if (drain_until > 0 && (wake < 0 || drain_until < wake)) wake = drain_until;
        int ms = wake < 0 ? -1 : (int)(fmin(wake - t, 3600.0) * 1000.0) + 1;

        int n = 0;
        pf[n++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
        for (int r = 0; r < opt.nproc; r++)
            for (int k = 0; k < 2; k++)
                if (ranks[r].io[k].fd >= 0) {
                    who[n] = 2 * r + k;
                    pf[n++] = (struct pollfd){ .fd = ranks[r].io[k].fd, .events = POLLIN };
                }
        if (poll(pf, (nfds_t)n, ms) < 0 && errno != EINTR) { say("poll: %s", strerror(errno)); break; }

        for (int j = 1; j < n; j++)
            if (pf[j].revents) pump(who[j] / 2, &ranks[who[j] / 2].io[who[j] % 2], 0);

        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int sig = (int)si.ssi_signo;
            if (sig == SIGCHLD) continue;   /* reaped below */
            if (stopping && alive > 0) {    /* asked again: no more grace */
                say("got %s again; sending SIGKILL", signame(sig));
                kill(-pgid, SIGKILL);
                killed = 1;
            } else if (!stopping) {
                say("got %s; forwarding it to every rank", signame(sig));
                if (code < 0) code = 128 + sig;
                stopping = 1;
                if (alive > 0) kill(-pgid, sig);
                kill_at = now() + opt.grace;
            }
        }

        int st;
        pid_t pid;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            int r = 0;
            while (r < opt.nproc && ranks[r].pid != pid) r++;
            if (r == opt.nproc) continue;
            ranks[r].pid = 0;
            alive--;
            pump(r, &ranks[r].io[0], 1);    /* its last words before the verdict */
            pump(r, &ranks[r].io[1], 1);
            if (stopping || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) continue;
            const char *tail = alive > 0 ? "; stopping the others" : "";
            if (WIFEXITED(st))
                say("rank %d exited with status %d%s", r, WEXITSTATUS(st), tail);
            else
                say("rank %d was killed by signal %d (%s%s)%s", r, WTERMSIG(st), signame(WTERMSIG(st)),
                    WCOREDUMP(st) ? ", core dumped" : "", tail);
            code = status_code(st);
            stopping = 1;
            if (alive > 0) kill(-pgid, SIGTERM);
            kill_at = now() + opt.grace;
        }

        open_streams = 0;
        for (int r = 0; r < opt.nproc; r++)
            open_streams += (ranks[r].io[0].fd >= 0) + (ranks[r].io[1].fd >= 0);
    }

    for (int r = 0; r < opt.nproc; r++)     /* partial last lines; pipes a helper still holds */
        for (int k = 0; k < 2; k++) {
            stream *s = &ranks[r].io[k];
            if (s->fd >= 0) pump(r, s, 1);
            if (s->len) emit(r, s, s->buf, s->len);
            if (s->fd >= 0) close(s->fd);
            if (s->tee >= 0) close(s->tee);
            free(s->buf);
        }
    free(pf);
    free(who);
    free(ranks);
    return code < 0 ? 0 : code;
}
