#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "common.h"

#define BAR_WIDTH 30

void progress_start(progress *p, const char *label, const char *unit, long total) {
    p->label = label;
    p->unit = unit;
    p->total = total > 0 ? total : 1;
    p->t_start = p->t_last = tool_now();
    p->last_done = 0;
    p->tty = isatty(STDERR_FILENO);
    p->drawn = 0;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
}

void progress_update(progress *p, long done, const char *note) {
    double now = tool_now(), el = now - p->t_start;
    int final = done >= p->total;
    if (p->tty) {
        if (!final && now - p->t_last < 0.1) return;
    } else {
        long step = p->total / 20 > 0 ? p->total / 20 : 1;
        if (!final && done - p->last_done < step) return;
        if (final && done == p->last_done && p->drawn) return;
    }
    p->t_last = now;
    p->last_done = done;
    p->drawn = 1;
    char eta[32], spent[32];
    fmt_time(eta, sizeof eta, done > 0 ? el * (double)(p->total - done) / (double)done : 0);
    fmt_time(spent, sizeof spent, el);
    if (p->tty) {
        int fill = (int)((long)BAR_WIDTH * done / p->total);
        char bar[BAR_WIDTH + 1];
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
        bar[BAR_WIDTH] = 0;
        fprintf(stderr, "\r%s [%s] %ld/%ld %s, %s, left %s%s%s\033[K", p->label, bar, done,
                p->total, p->unit, spent, eta, note ? "  " : "", note ? note : "");
    } else {
        fprintf(stderr, "%s: %ld/%ld %s, %s, left %s%s%s\n", p->label, done, p->total, p->unit,
                spent, eta, note ? "  " : "", note ? note : "");
    }
    fflush(stderr);
}

void progress_end(progress *p) {
    if (p->tty && p->drawn) fputc('\n', stderr);
    p->drawn = 0;
}
