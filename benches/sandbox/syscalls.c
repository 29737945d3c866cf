/* Syscall cost, inside or outside a sandbox: ns per getppid, and per
 * open+close of one file. Used by benches/sandbox-overhead.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: syscalls N FILE\n");
        return 2;
    }
    long n = atol(argv[1]);
    const char *path = argv[2];
    double a = now_ns();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    double b = now_ns();
    for (long i = 0; i < n; i++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { perror("open"); return 1; }
        close(fd);
    }
    double c = now_ns();
    printf("getppid %.1f ns\nopen+close %.1f ns\n", (b - a) / n, (c - b) / n);
    return 0;
}
