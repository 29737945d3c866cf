/*
 * cordon's exec helper inside a gVisor pod (the `gvisor` backend's warm
 * exec). Linked statically: it runs in whatever root the sandbox has (a
 * stored image without a C library among them).
 *
 *   podexec pause
 *       The pod's first process: reaps whatever is handed to it, forever.
 *
 *   podexec exec UID GID NPROC CPU FSIZE NOFILE -- ARGV...
 *       Started by `runsc exec` as root of the sentry (never of the host)
 *       with CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID, CAP_SETPCAP and
 *       CAP_SYS_RESOURCE. It makes the exec a
 *       pid and mount namespace of its own (its PID 1 is this helper's
 *       child, which dies with it: PR_SET_PDEATHSIG), mounts a /proc that
 *       shows only that namespace, masks in it what the bundle masks
 *       (CORDON_PODEXEC_MASK, colon-separated), and starts the command as
 *       UID:GID with no capability left (the bounding set emptied), the
 *       rlimits set, no_new_privs and the seccomp program the host
 *       compiled (CORDON_PODEXEC_FILTER, hex of struct sock_filter[]).
 *       When the command ends, its PID 1 exits, and the sentry kills
 *       everything else in the namespace: nothing an exec starts outlives
 *       it. Exit status: the command's code, or 128 + its signal.
 *
 * Every failure before the command starts refuses: a message on stderr
 * naming what failed, exit 125, and the command never runs. The command's
 * argv is never printed (it may carry what its caller keeps private).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define REFUSED 125

static void die(const char *what) {
    fprintf(stderr, "cordon (gvisor exec): %s: %s\n", what, strerror(errno));
    _exit(REFUSED);
}

static void die_msg(const char *what) {
    fprintf(stderr, "cordon (gvisor exec): %s\n", what);
    _exit(REFUSED);
}

static unsigned long long number(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-')
        die_msg(what);
    return n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The seccomp program from its hex, or refusal. */
static struct sock_fprog filter_from_env(void) {
    const char *hex = getenv("CORDON_PODEXEC_FILTER");
    if (hex == NULL)
        die_msg("no seccomp program was given; refusing to run the command without it");
    size_t len = strlen(hex);
    size_t each = 2 * sizeof(struct sock_filter);
    if (len == 0 || len % each != 0 || len / each > BPF_MAXINSNS)
        die_msg("the seccomp program is malformed");
    unsigned char *bytes = malloc(len / 2);
    if (bytes == NULL) die("allocating the seccomp program");
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) die_msg("the seccomp program is malformed");
        bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    struct sock_fprog prog = {
        .len = (unsigned short)(len / each),
        .filter = (struct sock_filter *)bytes,
    };
    return prog;
}

/* A colon-separated list from the environment (copied), or NULL. */
static char *list_from_env(const char *name) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') return NULL;
    char *copy = strdup(v);
    if (copy == NULL) die("copying a list");
    return copy;
}

/* Hides each path of `masks` that exists: an empty read-only tmpfs over a
 * directory, /dev/null over anything else. */
static void mask_all(char *masks) {
    for (char *p = masks ? strtok(masks, ":") : NULL; p; p = strtok(NULL, ":")) {
        struct stat st;
        if (stat(p, &st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) continue;
            die("looking at a path to mask");
        }
        int r = S_ISDIR(st.st_mode)
                    ? mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=000")
                    : mount("/dev/null", p, NULL, MS_BIND, NULL);
        if (r != 0) die("masking a path of /proc");
    }
}

static void set_limit(int resource, unsigned long long n, const char *what) {
    struct rlimit r = {.rlim_cur = (rlim_t)n, .rlim_max = (rlim_t)n};
    if (setrlimit(resource, &r) != 0) die(what);
}

static int status_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return REFUSED;
}

static void pause_forever(void) {
    for (;;) {
        if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD) sleep(1);
    }
}

/* What the exec's PID 1 is told (it shares this process's memory). */
struct exec {
    uid_t uid;
    gid_t gid;
    unsigned long long nproc, cpu, fsize, nofile;
    char **command;
    struct sock_fprog prog;
    char *masks;
    int alive;   /* the read end: hung up once the helper is gone */
    int alive_w; /* the helper's write end (PID 1 closes its copy) */
};

/* The command, in PID 1's vfork child: confined, then exec'd. Only system
 * calls and _exit here (the memory is PID 1's until the exec). */
static void start_command(const struct exec *x) {
    close(x->alive);
    set_limit(RLIMIT_NPROC, x->nproc, "setting RLIMIT_NPROC");
    set_limit(RLIMIT_CPU, x->cpu, "setting RLIMIT_CPU");
    set_limit(RLIMIT_FSIZE, x->fsize, "setting RLIMIT_FSIZE");
    set_limit(RLIMIT_NOFILE, x->nofile, "setting RLIMIT_NOFILE");
    set_limit(RLIMIT_CORE, 0, "setting RLIMIT_CORE");
    for (int c = 0; c <= 63; c++) {
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
            die("dropping the capability bounding set");
    }
    if (setgroups(0, NULL) != 0) die("dropping supplementary groups");
    if (setresgid(x->gid, x->gid, x->gid) != 0) die("changing group");
    if (setresuid(x->uid, x->uid, x->uid) != 0) die("changing user");
    /* Every capability went with the change of user; hold it. */
    if (setresuid(0, 0, 0) == 0) die_msg("root could be regained after the change of user");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("setting no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &x->prog) != 0) die("installing the seccomp program");
    char **command = x->command;
    if (strchr(command[0], '/') != NULL)
        execv(command[0], command);
    else
        execvp(command[0], command);
    int e = errno;
    fprintf(stderr, "cordon: the command could not be started: %s\n", strerror(e));
    _exit(e == ENOENT ? 127 : 126);
}

/* PID 1 of the exec's namespace: its /proc, the command, and its end. */
static int exec_init(void *arg) {
    const struct exec *x = arg;
    close(x->alive_w);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("tying the exec to its helper");
    struct pollfd pf = {.fd = x->alive, .events = POLLIN};
    if (poll(&pf, 1, 0) != 0) _exit(REFUSED); /* the helper is gone already */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        die("mounting the exec's /proc");
    mask_all(x->masks);
    /* vfork: no address space of its own until the exec (each one costs
     * gVisor a new stub process on its ptrace platform). */
    pid_t cmd = vfork();
    if (cmd < 0) die("starting the command");
    if (cmd == 0) start_command(x);
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p == cmd) _exit(status_code(st));
        if (p < 0 && errno != EINTR) _exit(REFUSED);
    }
}

/* PID 1's stack: it shares the helper's memory (CLONE_VM), not its stack. */
static char init_stack[256 * 1024] __attribute__((aligned(16)));

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "pause") == 0) pause_forever();
    if (argc < 10 || strcmp(argv[1], "exec") != 0 || strcmp(argv[8], "--") != 0)
        die_msg("usage: podexec exec UID GID NPROC CPU FSIZE NOFILE -- ARGV... (or: podexec pause)");
    struct exec x = {
        .uid = (uid_t)number(argv[2], "UID is not a number"),
        .gid = (gid_t)number(argv[3], "GID is not a number"),
        .nproc = number(argv[4], "NPROC is not a number"),
        .cpu = number(argv[5], "CPU is not a number"),
        .fsize = number(argv[6], "FSIZE is not a number"),
        .nofile = number(argv[7], "NOFILE is not a number"),
        .command = &argv[9],
    };
    if (x.uid == 0 || x.gid == 0) die_msg("the command must not run as root");
    x.prog = filter_from_env();
    x.masks = list_from_env("CORDON_PODEXEC_MASK");
    unsetenv("CORDON_PODEXEC_FILTER");
    unsetenv("CORDON_PODEXEC_MASK");

    /* Closed when this process ends, however it ends: its PID 1 sees the
     * hang-up if it was gone before PR_SET_PDEATHSIG took. */
    int alive[2];
    if (pipe2(alive, O_CLOEXEC) != 0) die("making a pipe");
    x.alive = alive[0];
    x.alive_w = alive[1];
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) die("making the exec's pid and mount namespaces");
    /* PID 1 shares this memory (no copy of it: see the vfork above); its
     * descriptors are its own, and this process only waits. */
    pid_t init = clone(exec_init, init_stack + sizeof init_stack, CLONE_VM | SIGCHLD, &x);
    if (init < 0) die("starting the exec's PID 1");
    close(alive[0]);
    int st;
    while (waitpid(init, &st, 0) < 0) {
        if (errno != EINTR) die("waiting for the exec");
    }
    _exit(status_code(st));
}
