/* A small JSON reader for the golden files of the tests: a whole document parsed into a
 * tree of nodes held in one arena. Strings are kept raw (escapes other than \" and \\ are
 * not decoded: the golden keys and the values the tests read never need it). Test-only. */
#ifndef TQ_TESTS_JSON_LITE_H
#define TQ_TESTS_JSON_LITE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JL_NULL, JL_BOOL, JL_NUM, JL_STR, JL_ARR, JL_OBJ } jl_kind;

typedef struct jl_node {
    jl_kind kind;
    double num;           /* JL_NUM, JL_BOOL */
    const char *str;      /* JL_STR: raw bytes in the document; for members: the key */
    size_t len;
    const char *key;      /* key when the node is an object member */
    size_t key_len;
    struct jl_node *first; /* first child (JL_ARR / JL_OBJ) */
    struct jl_node *next;  /* next sibling */
    size_t n;              /* children */
} jl_node;

typedef struct jl_doc {
    char *text;
    jl_node *nodes;
    size_t n_nodes, cap;
    const char *p, *end;
    int bad;
} jl_doc;

static jl_node *jl_new(jl_doc *d) {
    if (d->n_nodes == d->cap) { d->bad = 1; return NULL; }
    jl_node *n = &d->nodes[d->n_nodes++];
    memset(n, 0, sizeof *n);
    return n;
}

static void jl_ws(jl_doc *d) {
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\n' || *d->p == '\r' || *d->p == '\t')) d->p++;
}

static int jl_string(jl_doc *d, const char **s, size_t *len) {
    if (d->p >= d->end || *d->p != '"') return 0;
    const char *start = ++d->p;
    while (d->p < d->end && *d->p != '"') d->p += (*d->p == '\\') ? 2 : 1;
    if (d->p >= d->end) return 0;
    *s = start;
    *len = (size_t)(d->p - start);
    d->p++;
    return 1;
}

static jl_node *jl_value(jl_doc *d) {
    jl_ws(d);
    if (d->p >= d->end) return NULL;
    jl_node *n = jl_new(d);
    if (n == NULL) return NULL;
    char c = *d->p;
    if (c == '{' || c == '[') {
        n->kind = c == '{' ? JL_OBJ : JL_ARR;
        d->p++;
        jl_node **tail = &n->first;
        jl_ws(d);
        if (d->p < d->end && *d->p == (c == '{' ? '}' : ']')) { d->p++; return n; }
        for (;;) {
            const char *k = NULL;
            size_t kl = 0;
            if (c == '{') {
                jl_ws(d);
                if (!jl_string(d, &k, &kl)) return NULL;
                jl_ws(d);
                if (d->p >= d->end || *d->p != ':') return NULL;
                d->p++;
            }
            jl_node *kid = jl_value(d);
            if (kid == NULL) return NULL;
            kid->key = k;
            kid->key_len = kl;
            *tail = kid;
            tail = &kid->next;
            n->n++;
            jl_ws(d);
            if (d->p < d->end && *d->p == ',') { d->p++; continue; }
            if (d->p < d->end && *d->p == (c == '{' ? '}' : ']')) { d->p++; return n; }
            return NULL;
        }
    }
    if (c == '"') {
        n->kind = JL_STR;
        return jl_string(d, &n->str, &n->len) ? n : NULL;
    }
    if (strncmp(d->p, "true", 4) == 0) { n->kind = JL_BOOL; n->num = 1; d->p += 4; return n; }
    if (strncmp(d->p, "false", 5) == 0) { n->kind = JL_BOOL; d->p += 5; return n; }
    if (strncmp(d->p, "null", 4) == 0) { n->kind = JL_NULL; d->p += 4; return n; }
    char *e;
    n->kind = JL_NUM;
    n->num = strtod(d->p, &e);
    if (e == d->p) return NULL;
    d->p = e;
    return n;
}

/* Reads and parses path; root or NULL. Free with jl_free(). */
static jl_node *jl_load(const char *path, jl_doc *d) {
    memset(d, 0, sizeof *d);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    d->text = malloc((size_t)sz + 1);
    if (d->text == NULL || fread(d->text, 1, (size_t)sz, fp) != (size_t)sz) { fclose(fp); return NULL; }
    fclose(fp);
    d->text[sz] = '\0';
    d->cap = (size_t)sz / 2 + 16; /* every value takes at least two bytes of text */
    d->nodes = malloc(d->cap * sizeof *d->nodes);
    if (d->nodes == NULL) return NULL;
    d->p = d->text;
    d->end = d->text + sz;
    jl_node *root = jl_value(d);
    return d->bad ? NULL : root;
}

static void jl_free(jl_doc *d) {
    free(d->text);
    free(d->nodes);
    memset(d, 0, sizeof *d);
}

static const jl_node *jl_get(const jl_node *obj, const char *key) {
    if (obj == NULL || obj->kind != JL_OBJ) return NULL;
    size_t kl = strlen(key);
    for (const jl_node *k = obj->first; k; k = k->next)
        if (k->key_len == kl && memcmp(k->key, key, kl) == 0) return k;
    return NULL;
}

static const jl_node *jl_at(const jl_node *arr, size_t i) {
    if (arr == NULL || (arr->kind != JL_ARR && arr->kind != JL_OBJ)) return NULL;
    const jl_node *k = arr->first;
    while (k != NULL && i-- > 0) k = k->next;
    return k;
}

static double jl_num(const jl_node *n, double dflt) { return n != NULL && n->kind == JL_NUM ? n->num : dflt; }

#endif
