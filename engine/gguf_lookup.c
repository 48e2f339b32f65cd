/* GGUF reader: the name tables (keys and tensor names, sorted for lookup and the duplicate
 * check) and the lookups of keys and tensors by index and by name. */
#include "gguf_internal.h"

#include <stdlib.h>
#include <string.h>

/* ======================================================================================
 * name tables
 * ====================================================================================== */

gguf_status gguf_table_init(name_table *t, uint64_t n) {
    size_t cap = n ? (size_t)n : 1; /* n <= 2^20 */
    t->off = malloc(cap * sizeof *t->off);
    t->len = malloc(cap * sizeof *t->len);
    t->sorted = malloc(cap * sizeof *t->sorted);
    t->n = 0;
    return t->off && t->len && t->sorted ? GGUF_OK : GGUF_ERR_NOMEM;
}

void gguf_table_free(name_table *t) {
    free(t->off);
    free(t->len);
    free(t->sorted);
}

/* Byte-wise order of s[0..len) against name i; a proper prefix sorts first. */
static int name_cmp(const name_table *t, const char *pool, const char *s, size_t len,
                    int32_t i) {
    size_t li = t->len[i];
    int c = memcmp(s, pool + t->off[i], len < li ? len : li);
    if (c != 0) return c;
    return (len > li) - (len < li);
}

/* Bottom-up merge sort of t->sorted by name (qsort has no context argument, and a static
 * one would break the promise of no global state). */
gguf_status gguf_table_sort(name_table *t, const char *pool) {
    size_t n = (size_t)t->n;
    int32_t *a = t->sorted, *b = malloc((n ? n : 1) * sizeof *b), *tmp;
    if (!b) return GGUF_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) a[i] = (int32_t)i;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int32_t x = a[j];
                /* ties take the left run: equal names stay in file order, so a duplicate
                 * is reported by its first occurrence */
                if (name_cmp(t, pool, pool + t->off[x], t->len[x], a[i]) >= 0) b[k++] = a[i++];
                else b[k++] = a[j++];
            }
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        tmp = a;
        a = b;
        b = tmp;
    }
    if (a != t->sorted) {
        memcpy(t->sorted, a, n * sizeof *a);
        b = a;
    }
    free(b);
    return GGUF_OK;
}

/* Index of the first name in sorted order whose successor equals it, or -1. */
int64_t gguf_table_duplicate(const name_table *t, const char *pool) {
    for (int64_t i = 1; i < t->n; i++) {
        int32_t x = t->sorted[i - 1];
        if (name_cmp(t, pool, pool + t->off[x], t->len[x], t->sorted[i]) == 0) return x;
    }
    return -1;
}

/* Index of the name equal to s[0..len), or -1. Binary search over the sorted index. */
int64_t gguf_table_find(const name_table *t, const char *pool, const char *s, size_t len) {
    int64_t lo = 0, hi = t->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(t, pool, s, len, t->sorted[mid]);
        if (c == 0) return t->sorted[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return -1;
}

/* Copy a name into the pool, NUL-terminated; *off_out receives its offset. */
gguf_status gguf_pool_add(gguf_file *f, const uint8_t *s, size_t len, size_t *off_out) {
    if (f->names_cap - f->names_len < len + 1) {
        size_t cap = f->names_cap ? f->names_cap : 4096;
        char *grown;
        while (cap - f->names_len < len + 1) cap *= 2; /* bounded by the file size */
        grown = realloc(f->names, cap);
        if (!grown) return GGUF_ERR_NOMEM;
        f->names = grown;
        f->names_cap = cap;
    }
    memcpy(f->names + f->names_len, s, len);
    f->names[f->names_len + len] = '\0';
    *off_out = f->names_len;
    f->names_len += len + 1;
    return GGUF_OK;
}

/* ======================================================================================
 * keys
 * ====================================================================================== */

int64_t gguf_n_kv(const gguf_file *f) { return f ? f->n_kv : 0; }

const char *gguf_kv_key(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_kv) return NULL;
    return f->keys[i];
}

int gguf_kv_type(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_kv) return -1;
    return (int)f->kvs[i].type;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    if (!f || !key || !f->key_table.sorted) return -1;
    return gguf_table_find(&f->key_table, f->names, key, strlen(key));
}

/* ======================================================================================
 * tensors
 * ====================================================================================== */

int64_t gguf_n_tensors(const gguf_file *f) { return f ? f->n_tensors : 0; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_tensors) return NULL;
    return &f->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i;
    if (!f || !name || !f->tensor_table.sorted) return NULL;
    i = gguf_table_find(&f->tensor_table, f->names, name, strlen(name));
    return i < 0 ? NULL : &f->tensors[i];
}
