/* Opening a path for reading that must be a regular file, without ever blocking; writing a
 * file atomically.
 *
 * open(2) of a FIFO with no writer waits forever, and a device may wait too; every path the
 * engine and the tools read (model files, text files) goes through regular_file_open, which
 * opens with O_NONBLOCK, checks the type on the descriptor (no race between a stat and the
 * open), refuses anything but a regular file, and restores blocking mode before returning.
 * (The library's cache loader, which cannot depend on the engine, does the same in
 * src/cachefile.c.) */
#ifndef TQ_ENGINE_REGULAR_FILE_H
#define TQ_ENGINE_REGULAR_FILE_H

#include <stddef.h>

/* Returns a read-only, blocking, close-on-exec descriptor of the regular file at path, or -1
 * with *why (if why is not NULL) set to a static reason for a message: strerror's text, or
 * "not a regular file (a FIFO)" / "(a directory)" / "(a character device)" / "(a block
 * device)" / "(a socket)". errno is set too (EINVAL for a file that is not regular). */
int regular_file_open(const char *path, const char **why);

/* Writes a[0, na) then b[0, nb) (b may be NULL when nb is 0) to path atomically: a new
 * temporary file next to it (mkstemp: mode 0600), fsync, rename over path, fsync of the folder.
 * Readers see the old file or the new one, never a part. Returns 0, or an errno value with
 * *what (if not NULL) naming the step ("cannot create a temporary file next to it", "cannot
 * write"); path is untouched then and no temporary file is left. */
int regular_file_write_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb,
                              const char **what);

#endif
