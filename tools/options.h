/* Option parsing of the tq commands: each command describes its options in a table, and one
 * loop (tool_opts_parse) reads argv against it — and against the model commands' shared table
 * (session_opts_init, model_session.h) — and prints --help from it.
 *
 * Rules, the same for every command: an option and its value are two arguments ("-n 8"; no
 * "-n8" or "--n=8"); a value is the next argument whatever it looks like ("-p --help" is a
 * prompt); options come in any order and a later one overrides an earlier one; -h / --help
 * prints the help to stdout and exits 0 at the point it is read. Numbers are strict
 * (tools/common.h: they start with a digit, or '-' where the range allows negatives, and the
 * whole argument is the number, in range). Every error is a usage error, exit 2: "tq CMD:
 * WHAT", a blank line and the help on stderr. */
#ifndef TQ_TOOLS_OPTIONS_H
#define TQ_TOOLS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum tool_opt_kind {
    TOOL_OPT_FLAG,    /* no value: *to.flag = 1 */
    TOOL_OPT_INT,     /* *to.l: a whole number in [lo, hi] (tool_parse_int) */
    TOOL_OPT_U64,     /* *to.u: 0 .. 2^64-1, decimal or 0x hex (tool_parse_u64) */
    TOOL_OPT_DOUBLE,  /* *to.d: a number in [lo, hi] (tool_parse_double) */
    TOOL_OPT_DOUBLES, /* to.d[0 .. cap): comma-separated numbers in [lo, hi]; *count = how many */
    TOOL_OPT_STRING,  /* *to.s: the argument itself */
    TOOL_OPT_CHOICE,  /* *to.flag: the index of the argument in choices (NULL-terminated) */
    TOOL_OPT_CALL,    /* call(to.ctx, name, value): 0, or an exit code after printing why */
    TOOL_OPT_TEXT,    /* no option: help text printed in the list, each line indented by 2 */
} tool_opt_kind;

typedef struct tool_opt {
    const char *name;  /* "-n", "--top-k" */
    const char *alias; /* another spelling taken the same way ("--ctx-size"), not listed */
    const char *meta;  /* the value's name in the help ("N"); NULL for flags */
    tool_opt_kind kind;
    union {
        int *flag;
        long *l;
        uint64_t *u;
        double *d;
        const char **s;
        void *ctx;
    } to;
    double lo, hi;              /* INT, DOUBLE, DOUBLES: the range */
    int *count;                 /* DOUBLES */
    int cap;                    /* DOUBLES: at most this many */
    const char *const *choices; /* CHOICE */
    int (*call)(void *ctx, const char *name, const char *value); /* CALL */
    int required;               /* STRING only: a usage error ("NAME META is required") when
                                   *to.s is still NULL after parsing */
    const char *show;           /* the help's left column when not "NAME META" */
    const char *help;           /* description, lines separated by '\n'; NULL: not listed */
} tool_opt;

/* Table entries, written {OPT_INT(...)} so that more fields can follow: {OPT_STRING(...),
 * .required = 1}. The target's type is checked by the compiler. */
#define OPT_FLAG(name_, p_, help_) \
    .name = (name_), .kind = TOOL_OPT_FLAG, .to.flag = (p_), .help = (help_)
#define OPT_INT(name_, meta_, p_, lo_, hi_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_INT, .to.l = (p_), .lo = (lo_), \
    .hi = (hi_), .help = (help_)
#define OPT_U64(name_, meta_, p_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_U64, .to.u = (p_), .help = (help_)
#define OPT_DOUBLE(name_, meta_, p_, lo_, hi_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_DOUBLE, .to.d = (p_), .lo = (lo_), \
    .hi = (hi_), .help = (help_)
#define OPT_DOUBLES(name_, meta_, array_, count_, cap_, lo_, hi_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_DOUBLES, .to.d = (array_), \
    .count = (count_), .cap = (cap_), .lo = (lo_), .hi = (hi_), .help = (help_)
#define OPT_STRING(name_, meta_, p_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_STRING, .to.s = (p_), .help = (help_)
#define OPT_CHOICE(name_, meta_, p_, choices_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_CHOICE, .to.flag = (p_), \
    .choices = (choices_), .help = (help_)
#define OPT_CALL(name_, meta_, fn_, ctx_, help_) \
    .name = (name_), .meta = (meta_), .kind = TOOL_OPT_CALL, .call = (fn_), .to.ctx = (ctx_), \
    .help = (help_)
#define OPT_TEXT(text_) .kind = TOOL_OPT_TEXT, .help = (text_)

#define OPT_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* One command: its name, its help around the option list, its table and the shared one. */
typedef struct tool_cmd {
    const char *name;     /* "generate": messages read "tq generate: ..." */
    const char *synopsis; /* "usage: tq generate ...\n" (its lines) */
    const tool_opt *opts;
    size_t n_opts;
    const tool_opt *shared; /* listed after opts; NULL for none */
    size_t n_shared;
    const char *epilogue; /* printed after the list (start it with "\n" for a blank line); or NULL */
} tool_cmd;

/* Reads argv[1 .. argc) (argv[0] is the command's name). Returns 1 when the command should
 * run; 0 when it should return *exit_code at once: 0 after printing --help, TQ_EXIT_USAGE
 * after a usage error (printed), or what a CALL option returned. */
int tool_opts_parse(const tool_cmd *c, int argc, char **argv, int *exit_code);

/* The command's help: synopsis, blank line, the options, the epilogue. */
void tool_opts_help(FILE *f, const tool_cmd *c);

/* A usage error found after parsing: prints "tq NAME: MESSAGE" (printf-style), a blank line
 * and the help to stderr; returns TQ_EXIT_USAGE. */
int tool_opts_usage_error(const tool_cmd *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
