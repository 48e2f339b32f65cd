#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
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
