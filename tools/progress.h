/* A one-line progress bar on stderr for the long tq commands.
 *
 * On a terminal the line is redrawn in place ("\r"), at most ~10 times a second; otherwise
 * (a log file, a pipe) a plain line is written each time another ~5% is done, so logs stay
 * short. Each line shows done/total, the rate, the time left and a caller's note. */
#ifndef TQ_TOOLS_PROGRESS_H
#define TQ_TOOLS_PROGRESS_H

typedef struct progress {
    const char *label; /* "perplexity" */
    const char *unit;  /* "chunks" */
    long total;
    double t_start, t_last;
    long last_done;
    int tty, drawn;
} progress;

void progress_start(progress *p, const char *label, const char *unit, long total);
/* done in [0, total]; note may be NULL. */
void progress_update(progress *p, long done, const char *note);
/* Ends the line (on a terminal) so that later output starts clean. */
void progress_end(progress *p);

#endif
