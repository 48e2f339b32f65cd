/* The one argv loop of the tq commands and the help printer (options.h). */
#include "options.h"

#include <stdarg.h>
#include <string.h>

#include "common.h"

/* Help layout: "  NAME META" in a column of HELP_COL characters, then the description; its
 * further lines, and a description after a left column too wide to share a line with it,
 * start at HELP_INDENT. */
#define HELP_COL 14
#define HELP_INDENT 17
#define HELP_SAME_LINE 24 /* widest left column still followed on its line (two spaces) */

static void print_lines(FILE *f, const char *text, int indent) {
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "%*s%.*s\n", indent, "", len, p);
        p += len + (nl ? 1 : 0);
    }
}

static void print_opt(FILE *f, const tool_opt *o) {
    if (o->help == NULL) return;
    if (o->kind == TOOL_OPT_TEXT) {
        print_lines(f, o->help, 2);
        return;
    }
    char left[96];
    if (o->show) snprintf(left, sizeof left, "%s", o->show);
    else snprintf(left, sizeof left, "%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
    const int w = (int)strlen(left);
    const char *nl = strchr(o->help, '\n');
    int first = nl ? (int)(nl - o->help) : (int)strlen(o->help);
    if (w <= HELP_COL) fprintf(f, "  %-*s %.*s\n", HELP_COL, left, first, o->help);
    else if (w <= HELP_SAME_LINE) fprintf(f, "  %s  %.*s\n", left, first, o->help);
    else fprintf(f, "  %s\n%*s%.*s\n", left, HELP_INDENT, "", first, o->help);
    if (nl) print_lines(f, nl + 1, HELP_INDENT);
}

void tool_opts_help(FILE *f, const tool_cmd *c) {
    fprintf(f, "%s\n", c->synopsis);
    for (size_t i = 0; i < c->n_opts; i++) print_opt(f, &c->opts[i]);
    for (size_t i = 0; i < c->n_shared; i++) print_opt(f, &c->shared[i]);
    if (c->epilogue) fputs(c->epilogue, f);
}

int tool_opts_usage_error(const tool_cmd *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tq %s: ", c->name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    tool_opts_help(stderr, c);
    return TQ_EXIT_USAGE;
}

/* Entry k of opts then shared. */
static const tool_opt *entry(const tool_cmd *c, size_t k) {
    return k < c->n_opts ? &c->opts[k] : &c->shared[k - c->n_opts];
}

/* The entry named a (by its name or alias), or NULL. */
static const tool_opt *find(const tool_cmd *c, const char *a) {
    for (size_t k = 0; k < c->n_opts + c->n_shared; k++) {
        const tool_opt *o = entry(c, k);
        if (o->kind != TOOL_OPT_TEXT && (!strcmp(a, o->name) || (o->alias && !strcmp(a, o->alias))))
            return o;
    }
    return NULL;
}

/* Stores value v of option o; 0 when v is not a valid value. */
static int store(const tool_opt *o, const char *v) {
    switch (o->kind) {
    case TOOL_OPT_INT: return tool_parse_int(v, (long)o->lo, (long)o->hi, o->to.l);
    case TOOL_OPT_U64: return tool_parse_u64(v, o->to.u);
    case TOOL_OPT_DOUBLE: return tool_parse_double(v, o->lo, o->hi, o->to.d);
    case TOOL_OPT_DOUBLES: {
        int n = tool_parse_double_list(v, o->lo, o->hi, o->to.d, o->cap);
        if (n < 1) return 0;
        *o->count = n;
        return 1;
    }
    case TOOL_OPT_STRING: *o->to.s = v; return 1;
    case TOOL_OPT_CHOICE:
        for (int k = 0; o->choices[k]; k++)
            if (!strcmp(v, o->choices[k])) {
                *o->to.flag = k;
                return 1;
            }
        return 0;
    default: return 0; /* FLAG, CALL and TEXT never get here */
    }
}

int tool_opts_parse(const tool_cmd *c, int argc, char **argv, int *exit_code) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tool_opts_help(stdout, c);
            *exit_code = 0;
            return 0;
        }
        const tool_opt *o = find(c, a);
        if (o == NULL) {
            *exit_code = tool_opts_usage_error(c, "unknown option: %s", a);
            return 0;
        }
        if (o->kind == TOOL_OPT_FLAG) {
            *o->to.flag = 1;
            continue;
        }
        if (i + 1 >= argc) {
            *exit_code = tool_opts_usage_error(c, "%s needs a value", a);
            return 0;
        }
        const char *v = argv[++i];
        int rc = o->kind == TOOL_OPT_CALL ? o->call(o->to.ctx, a, v)
                 : store(o, v)            ? 0
                                          : tool_opts_usage_error(c, "bad value for %s: '%s'", a, v);
        if (rc) {
            *exit_code = rc;
            return 0;
        }
    }
    for (size_t k = 0; k < c->n_opts + c->n_shared; k++) {
        const tool_opt *o = entry(c, k);
        if (o->required && *o->to.s == NULL) {
            *exit_code = tool_opts_usage_error(c, "%s %s is required", o->name, o->meta);
            return 0;
        }
    }
    return 1;
}
