#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISFIFO(m)) return "not a regular file (a FIFO)";
    if (S_ISDIR(m)) return "not a regular file (a directory)";
    if (S_ISCHR(m)) return "not a regular file (a character device)";
    if (S_ISBLK(m)) return "not a regular file (a block device)";
    if (S_ISSOCK(m)) return "not a regular file (a socket)";
    return "not a regular file";
}

/* Closes fd keeping errno, sets *why from it, returns -1. */
static int fail_errno(int fd, const char **why) {
    int e = errno;
    if (fd >= 0) close(fd);
    errno = e;
    *why = strerror(e);
    return -1;
}

int regular_file_open(const char *path, const char **why) {
    const char *unused;
    if (!why) why = &unused;
    if (!path || !*path) {
        errno = ENOENT;
        return fail_errno(-1, why);
    }
    int fd;
    do {
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return fail_errno(-1, why);
    struct stat st;
    if (fstat(fd, &st) != 0) return fail_errno(fd, why);
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        *why = kind_of(st.st_mode);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return fail_errno(fd, why);
    return fd;
}

/* Writes n bytes; 0 on an error (errno set). */
static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO;
        if (w <= 0) return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

/* fsync of the folder holding path (the rename made durable); file systems that refuse fsync
 * on a folder are fine. */
static void sync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash == NULL) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

int regular_file_write_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb,
                              const char **what) {
    const char *w_ = "cannot write";
    if (what) *what = w_;
    if (path == NULL || (a == NULL && na > 0) || (b == NULL && nb > 0)) return EINVAL;
    size_t pn = strlen(path);
    char *tmp = malloc(pn + 16);
    if (tmp == NULL) return ENOMEM;
    snprintf(tmp, pn + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp); /* O_EXCL: a new file of ours, mode 0600 (a prompt may be private) */
    if (fd < 0) {
        int err = errno;
        free(tmp);
        if (what) *what = "cannot create a temporary file next to it";
        return err;
    }
    int ok = write_all(fd, a, na) && write_all(fd, b, nb) && fsync(fd) == 0;
    int err = ok ? 0 : errno;
    if (close(fd) != 0 && ok) ok = 0, err = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
    if (!ok) unlink(tmp);
    free(tmp);
    if (!ok) return err ? err : EIO;
    sync_dir_of(path);
    return 0;
}
