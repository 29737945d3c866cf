/*
 * cordon's exec helper inside a warm sandbox (the `gvisor` and `docker`
 * backends' warm exec). Linked statically: it runs in whatever root the
 * sandbox has (a stored image without a C library among them).
 *
 *   podexec pause
 *       The pod's first process: reaps whatever is handed to it, forever.
 *
 *   podexec probe
 *       Exits 0: what a pod's first exec runs to learn the helper works.
 *
 *   podexec exec UID GID NPROC CPU FSIZE NOFILE -- ARGV...
 *       Makes the exec a pid, mount and IPC namespace of its own (and a
 *       network namespace with CORDON_PODEXEC_OWN_NET=1), whose PID 1 is
 *       this helper's child and dies with it (PR_SET_PDEATHSIG); mounts a
 *       /proc that shows only that namespace, masks in it what the bundle
 *       masks (CORDON_PODEXEC_MASK, colon-separated), makes read-only
 *       what it holds read-only (CORDON_PODEXEC_READONLY), and starts the
 *       command as UID:GID with no capability left (the bounding set
 *       emptied, the sets cleared), the rlimits set, no_new_privs and the
 *       seccomp program the host compiled (CORDON_PODEXEC_FILTER, hex of
 *       struct sock_filter[]). When the command ends, its PID 1 exits and
 *       the kernel kills everything else in the namespace: nothing an exec
 *       starts outlives it. Exit status: the command's code, or 128 + its
 *       signal.
 *
 *       Two ways in. As root (gVisor: `runsc exec` as the sentry's root,
 *       never the host's, with CAP_SYS_ADMIN, SETUID, SETGID, SETPCAP and
 *       SYS_RESOURCE), it changes to UID:GID before the command. As UID
 *       itself with no capability (Docker: `docker exec` as the workload's
 *       user), it first makes a user namespace mapping only UID and GID to
 *       themselves, which gives it the rights over the namespaces it
 *       makes and nothing over the host's; the command, not root there
 *       either, keeps none of them past its exec.
 *
 * Every failure before the command starts refuses: a message on stderr
 * naming what failed, exit 125, and the command never runs. The command's
 * argv is never printed (it may carry what its caller keeps private).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define REFUSED 125

static void die(const char *what) {
    fprintf(stderr, "cordon (exec helper): %s: %s\n", what, strerror(errno));
    _exit(REFUSED);
}

static void die_msg(const char *what) {
    fprintf(stderr, "cordon (exec helper): %s\n", what);
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

/* Makes each path of `paths` that exists read-only: bound on itself, then
 * remounted read-only (and nosuid, nodev, noexec). */
static void read_only_all(char *paths) {
    for (char *p = paths ? strtok(paths, ":") : NULL; p; p = strtok(NULL, ":")) {
        struct stat st;
        if (stat(p, &st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) continue;
            die("looking at a path to make read-only");
        }
        if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            die("making a path of /proc read-only");
    }
}

/* Writes `text` to the file `path`, or refuses. */
static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) die(path);
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len) die(path);
    close(fd);
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
    char *read_only;
    int in_userns; /* came in as UID, not root: a user namespace of its own */
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
    /* In its own user namespace the groups are what they were (setgroups
     * is denied there, and the groups are not its to change). */
    if (!x->in_userns && setgroups(0, NULL) != 0) die("dropping supplementary groups");
    if (setresgid(x->gid, x->gid, x->gid) != 0) die("changing group");
    if (setresuid(x->uid, x->uid, x->uid) != 0) die("changing user");
    /* No capability is carried to the command, whichever way it came. */
    struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &head, none) != 0) die("clearing the capability sets");
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
    /* Nothing mounted here is seen outside the exec's namespace. */
    if (x->in_userns && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("making the exec's mounts private");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        die("mounting the exec's /proc");
    mask_all(x->masks);
    read_only_all(x->read_only);
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
    if (argc == 2 && strcmp(argv[1], "probe") == 0) return 0;
    if (argc < 10 || strcmp(argv[1], "exec") != 0 || strcmp(argv[8], "--") != 0)
        die_msg("usage: podexec exec UID GID NPROC CPU FSIZE NOFILE -- ARGV... (or: podexec pause | probe)");
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
    x.read_only = list_from_env("CORDON_PODEXEC_READONLY");
    const char *own_net = getenv("CORDON_PODEXEC_OWN_NET");
    int flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC;
    if (own_net != NULL && strcmp(own_net, "1") == 0) flags |= CLONE_NEWNET;
    unsetenv("CORDON_PODEXEC_FILTER");
    unsetenv("CORDON_PODEXEC_MASK");
    unsetenv("CORDON_PODEXEC_READONLY");
    unsetenv("CORDON_PODEXEC_OWN_NET");
    if (getuid() != 0) {
        /* The workload's own uid: a user namespace mapping it (and its
         * group) to itself, where it holds what the namespaces below need. */
        if (getuid() != x.uid || geteuid() != x.uid || getgid() != x.gid || getegid() != x.gid)
            die_msg("the helper runs as neither root nor the command's UID:GID");
        x.in_userns = 1;
        if (unshare(CLONE_NEWUSER) != 0) die("making the exec's user namespace");
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)x.uid, (unsigned)x.uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)x.gid, (unsigned)x.gid);
        write_file("/proc/self/gid_map", map);
    }

    /* Closed when this process ends, however it ends: its PID 1 sees the
     * hang-up if it was gone before PR_SET_PDEATHSIG took. */
    int alive[2];
    if (pipe2(alive, O_CLOEXEC) != 0) die("making a pipe");
    x.alive = alive[0];
    x.alive_w = alive[1];
    if (unshare(flags) != 0) die("making the exec's pid, mount and IPC namespaces");
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
