/*
 * cordon's compatibility shim for gVisor (the `gvisor` backend), preloaded
 * into every dynamically linked program of a gVisor sandbox through the
 * sandbox's own /etc/ld.so.preload.
 *
 * Debian 12's runsc (release 20221219) answers EINVAL to statx(2) and
 * newfstatat(2) whenever AT_NO_AUTOMOUNT is among the flags, and Debian
 * 12's coreutils passes it on every stat: `ls -l`, `ls -d`, `stat` all
 * fail with "Invalid argument". A gVisor sandbox has no automount points,
 * so the flag changes nothing there; these wrappers clear it and make the
 * same call. They widen nothing: the call is the one the program made,
 * answered by gVisor's kernel as before.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_NO_AUTOMOUNT
#define AT_NO_AUTOMOUNT 0x800
#endif

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask,
          struct statx *restrict buf) {
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *restrict path, struct stat *restrict buf, int flags) {
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *restrict path, struct stat64 *restrict buf, int flags) {
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
