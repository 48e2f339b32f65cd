/* Opening a path for reading that must be a regular file, without ever blocking.
 *
 * open(2) of a FIFO with no writer waits forever, and a device may wait too; every path the
 * engine and the tools read (model files, text files) goes through regular_file_open, which
 * opens with O_NONBLOCK, checks the type on the descriptor (no race between a stat and the
 * open), refuses anything but a regular file, and restores blocking mode before returning.
 * (The library's cache loader, which cannot depend on the engine, does the same in
 * src/cachefile.c.) */
#ifndef TQ_ENGINE_REGULAR_FILE_H
#define TQ_ENGINE_REGULAR_FILE_H

/* Returns a read-only, blocking, close-on-exec descriptor of the regular file at path, or -1
 * with *why (if why is not NULL) set to a static reason for a message: strerror's text, or
 * "not a regular file (a FIFO)" / "(a directory)" / "(a character device)" / "(a block
 * device)" / "(a socket)". errno is set too (EINVAL for a file that is not regular). */
int regular_file_open(const char *path, const char **why);

#endif
