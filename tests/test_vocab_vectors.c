/* The tokenizer against llama.cpp's vocabulary test vectors, and byte-level BPE round trips.
 *
 *   test_vectors      every ggml-vocab-*.gguf in TQ_VOCAB_DIR (default ../shared/data/vocab,
 *                     see its README): each input of NAME.gguf.inp (separated by lines
 *                     "__ggml_vocab_test__") encoded with add_special = false, parse_special =
 *                     false must give exactly the ids on its line of NAME.gguf.out, with the
 *                     fast and the reference encoder; SentencePiece and BPE files alike.
 *   test_wikitext     every BPE vocabulary (the vector files, and the SmolLM2 model's when
 *                     present): WikiText-2 test (TQ_WIKITEXT, default
 *                     ../shared/data/wikitext-2-raw-test.txt) encodes and decodes back to
 *                     the same bytes; the fast and the reference encoder agree on its first
 *                     lines; the time of the full encode is printed.
 *   test_random       every BPE vocabulary: random bytes (invalid UTF-8 included), random
 *                     valid UTF-8 mixes of scripts, white space and digits: decode(encode(x))
 *                     == x, and fast == reference.
 *   test_threads      every BPE vocabulary: four threads encoding WikiText-2's first 256 KiB
 *                     at once (tokenizer_encode_with, a scratch each, one shared tokenizer and
 *                     its compiled regexes) give the single-thread ids.
 * Each test reports SKIP when its data is absent. */
#include "gguf.h"
#include "test_util.h"
#include "tokenizer.h"
#include "vocab.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define MAX_VOCABS 16

typedef struct loaded {
    char name[256];
    tokenizer *tok;
    int bpe;
} loaded;

static loaded g_vocabs[MAX_VOCABS];
static int g_n_vocabs;
static const char *g_dir;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    *len = n;
    return buf;
}

static tokenizer *open_tokenizer(const char *path, int *bpe) {
    gguf_file *f = NULL;
    char err[256];
    if (gguf_open(path, &f, err, sizeof err) != GGUF_OK) {
        fprintf(stderr, "gguf_open %s: %s\n", path, err);
        return NULL;
    }
    gguf_vocab gv;
    tokenizer *tok = NULL;
    if (vocab_build(f, &gv, err, sizeof err) != VOCAB_OK) {
        fprintf(stderr, "vocab_build %s: %s\n", path, err);
    } else {
        int rc = tokenizer_create(&gv.v, &tok);
        if (rc != TOKENIZER_OK) fprintf(stderr, "tokenizer_create %s: %s\n", path, tokenizer_status_name(rc));
        *bpe = gv.v.model == TOKENIZER_MODEL_BPE;
        vocab_free(&gv);
    }
    gguf_close(f);
    return tok;
}

/* Encodes with both encoders; returns the fast ids (malloc'ed) or NULL after a failed check. */
static int32_t *encode_both(tokenizer *tok, const char *text, size_t len, unsigned flags, size_t *n) {
    size_t cap = tokenizer_encode_bound(tok, len);
    int32_t *a = malloc((cap ? cap : 1) * sizeof *a), *b = malloc((cap ? cap : 1) * sizeof *b);
    size_t na = 0, nb = 0;
    int ra = tokenizer_encode(tok, text, len, flags, a, cap, &na);
    int rb = tokenizer_encode_ref(tok, text, len, flags, b, cap, &nb);
    int same = ra == TOKENIZER_OK && rb == TOKENIZER_OK && na == nb && memcmp(a, b, na * sizeof *a) == 0;
    CHECK_MSG(same, "fast %s (%zu ids) vs ref %s (%zu ids), text of %zu bytes", tokenizer_status_name(ra), na,
              tokenizer_status_name(rb), nb, len);
    free(b);
    if (!same) {
        free(a);
        return NULL;
    }
    *n = na;
    return a;
}

/* ---- test vectors ----------------------------------------------------------------------- */

static void check_vector_file(const loaded *lv) {
    char path[600];
    size_t inp_len = 0, out_len = 0;
    snprintf(path, sizeof path, "%s/%s.inp", g_dir, lv->name);
    char *inp = read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/%s.out", g_dir, lv->name);
    char *out = read_file(path, &out_len);
    CHECK_MSG(inp && out, "%s: missing .inp or .out", lv->name);
    if (!inp || !out) {
        free(inp);
        free(out);
        return;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    size_t ip = 0, op = 0;
    int cases = 0, bad = 0;
    while (ip < inp_len) {
        const char *hit = NULL;
        for (size_t i = ip; i + sep_len <= inp_len; i++)
            if (memcmp(inp + i, sep, sep_len) == 0) {
                hit = inp + i;
                break;
            }
        CHECK_MSG(hit != NULL, "%s: input without separator at byte %zu", lv->name, ip);
        if (!hit) break;
        size_t len = (size_t)(hit - (inp + ip));
        /* the expected line */
        size_t eol = op;
        while (eol < out_len && out[eol] != '\n') eol++;
        int32_t want[4096];
        size_t n_want = 0;
        for (size_t q = op; q < eol;) {
            while (q < eol && out[q] == ' ') q++;
            if (q >= eol) break;
            want[n_want++] = (int32_t)strtol(out + q, NULL, 10);
            while (q < eol && out[q] != ' ') q++;
        }
        op = eol + 1;
        size_t n_got = 0;
        int32_t *got = encode_both(lv->tok, inp + ip, len, 0, &n_got);
        cases++;
        if (!got || n_got != n_want || memcmp(got, want, n_got * sizeof *got) != 0) {
            bad++;
            fprintf(stderr, "%s case %d (%zu bytes: '%.*s'): want", lv->name, cases, len, (int)(len > 60 ? 60 : len),
                    inp + ip);
            for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n   got");
            for (size_t i = 0; got && i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        free(got);
        ip = (size_t)(hit - inp) + sep_len;
    }
    printf("     %-32s %d of %d cases match\n", lv->name, cases - bad, cases);
    CHECK(bad == 0 && cases > 0);
    free(inp);
    free(out);
}

static void test_vectors(void) {
    int files = 0;
    for (int i = 0; i < g_n_vocabs; i++) {
        if (strncmp(g_vocabs[i].name, "ggml-vocab-", 11) != 0) continue;
        files++;
        check_vector_file(&g_vocabs[i]);
    }
    if (files == 0) SKIP_TEST("no ggml-vocab-*.gguf in %s (set TQ_VOCAB_DIR)", g_dir);
}

/* ---- round trips ------------------------------------------------------------------------ */

static int round_trip(tokenizer *tok, const char *text, size_t len, double *secs) {
    size_t cap = tokenizer_encode_bound(tok, len), n = 0, out_len = 0;
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    char *back = malloc(len + 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = tokenizer_encode(tok, text, len, 0, ids, cap, &n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (secs) *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int ok = rc == TOKENIZER_OK;
    if (ok) {
        rc = tokenizer_decode(tok, ids, n, 0, back, len + 1, &out_len);
        ok = rc == TOKENIZER_OK && out_len == len && memcmp(back, text, len) == 0;
    }
    free(ids);
    free(back);
    return ok ? (int)(n > INT32_MAX ? INT32_MAX : n) : -1;
}

static const char *wikitext_path(void) {
    const char *path = getenv("TQ_WIKITEXT");
    return path && *path ? path : "../shared/data/wikitext-2-raw-test.txt";
}

static void test_wikitext(void) {
    size_t len = 0;
    char *text = read_file(wikitext_path(), &len);
    if (!text) SKIP_TEST("no %s (set TQ_WIKITEXT)", wikitext_path());
    int any = 0;
    for (int i = 0; i < g_n_vocabs; i++) {
        if (!g_vocabs[i].bpe) continue;
        any = 1;
        double secs = 0;
        int n = round_trip(g_vocabs[i].tok, text, len, &secs);
        CHECK_MSG(n > 0, "%s: WikiText-2 does not round-trip", g_vocabs[i].name);
        printf("     %-32s WikiText-2 test: %zu bytes -> %d tokens in %.3f s\n", g_vocabs[i].name, len, n, secs);
        size_t head = len < 20000 ? len : 20000, n_ids;
        free(encode_both(g_vocabs[i].tok, text, head, 0, &n_ids));
    }
    free(text);
    if (!any) SKIP_TEST("no byte-level BPE vocabulary loaded");
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static size_t put_utf8(char *p, uint32_t cp) {
    if (cp < 0x80) return (size_t)(p[0] = (char)cp, 1);
    if (cp < 0x800) return p[0] = (char)(0xC0 | (cp >> 6)), p[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        p[0] = (char)(0xE0 | (cp >> 12)), p[1] = (char)(0x80 | ((cp >> 6) & 63)), p[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    p[0] = (char)(0xF0 | (cp >> 18)), p[1] = (char)(0x80 | ((cp >> 12) & 63));
    p[2] = (char)(0x80 | ((cp >> 6) & 63)), p[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Random text: raw bytes, or characters drawn from ASCII, white space (incl. U+0085, U+00A0,
 * U+3000), Latin, Greek, CJK, Hangul, digits of other scripts, emoji, apostrophes; only bytes
 * with ok[b] (a vocabulary may lack a byte's token: SmolLM2 has none for 0x04, and
 * deepseek-llm's "\xc3\x80" is a user-defined token that decodes as itself, not as the byte
 * 0xC0; llama.cpp drops or keeps those the same way). */
static size_t random_text(char *buf, size_t max, const unsigned char *ok) {
    static const uint32_t pool[] = {' ', ' ', ' ', '\n', '\r', '\t', 0x0B, 0x85, 0xA0, 0x3000, 0x2009, '\'', 's', 'S', 't',
                                    'l', 'e', 'A', 'z', '0', '7', '9', '.', ',', '!', '?', '(', '$', '~', '|', '-',
                                    0xE9, 0xC4, 0x3B1, 0x3A9, 0x4E2D, 0x6587, 0xAC00, 0x0663, 0x0967, 0xFF11, 0x2126,
                                    0x212A, 0x1F600, 0x1F44D, 0x200B, 0xFEFF, 0x0301, 0x00B5, 0x1FBE, 0xFF01};
    size_t n = 0, want = rnd() % max;
    int raw = rnd() % 4 == 0;
    while (n + 4 < want) {
        size_t c = raw ? 1 : put_utf8(buf + n, pool[rnd() % (sizeof pool / sizeof pool[0])]);
        if (raw) buf[n] = (char)rnd();
        int good = 1;
        for (size_t i = 0; i < c; i++) good &= ok[(unsigned char)buf[n + i]];
        if (good) n += c;
    }
    return n;
}

static void test_random(void) {
    int any = 0;
    char buf[600];
    for (int i = 0; i < g_n_vocabs; i++) {
        if (!g_vocabs[i].bpe) continue;
        any = 1;
        int bad = 0, n_ok = 0;
        unsigned char ok[256];
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            ok[b] = round_trip(g_vocabs[i].tok, &c, 1, NULL) > 0;
            n_ok += ok[b];
        }
        if (n_ok < 256) printf("     %-32s %d bytes have no token of their own\n", g_vocabs[i].name, 256 - n_ok);
        for (int r = 0; r < 1500 && bad < 5; r++) {
            size_t len = random_text(buf, sizeof buf, ok);
            size_t n;
            int32_t *ids = encode_both(g_vocabs[i].tok, buf, len, TOKENIZER_ENCODE_PARSE_SPECIAL, &n);
            free(ids);
            if (!ids) bad++;
            if (round_trip(g_vocabs[i].tok, buf, len, NULL) < 0) {
                bad++;
                fprintf(stderr, "%s: random text of %zu bytes does not round-trip\n", g_vocabs[i].name, len);
            }
        }
        CHECK_MSG(bad == 0, "%s", g_vocabs[i].name);
    }
    if (!any) SKIP_TEST("no byte-level BPE vocabulary loaded");
}

typedef struct thread_job {
    const tokenizer *tok;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t cap, n;
    int rc;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    tokenizer_scratch *s = NULL;
    j->rc = tokenizer_scratch_create(&s);
    if (j->rc == TOKENIZER_OK) j->rc = tokenizer_encode_with(j->tok, s, j->text, j->len, 0, j->ids, j->cap, &j->n);
    tokenizer_scratch_free(s);
    return NULL;
}

static void test_threads(void) {
    size_t len = 0;
    char *text = read_file(wikitext_path(), &len);
    if (!text) SKIP_TEST("no %s (set TQ_WIKITEXT)", wikitext_path());
    if (len > 256 * 1024) len = 256 * 1024;
    int any = 0;
    for (int i = 0; i < g_n_vocabs; i++) {
        if (!g_vocabs[i].bpe) continue;
        any = 1;
        size_t cap = tokenizer_encode_bound(g_vocabs[i].tok, len), n = 0;
        int32_t *want = malloc(cap * sizeof *want);
        CHECK(tokenizer_encode(g_vocabs[i].tok, text, len, 0, want, cap, &n) == TOKENIZER_OK);
        thread_job jobs[4];
        pthread_t th[4];
        for (int t = 0; t < 4; t++) {
            jobs[t] = (thread_job){g_vocabs[i].tok, text, len, malloc(cap * sizeof(int32_t)), cap, 0, -1};
            CHECK(pthread_create(&th[t], NULL, encode_thread, &jobs[t]) == 0);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            CHECK_MSG(jobs[t].rc == TOKENIZER_OK && jobs[t].n == n && memcmp(jobs[t].ids, want, n * sizeof *want) == 0,
                      "%s: thread %d", g_vocabs[i].name, t);
            free(jobs[t].ids);
        }
        free(want);
    }
    free(text);
    if (!any) SKIP_TEST("no byte-level BPE vocabulary loaded");
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const loaded *)a)->name, ((const loaded *)b)->name);
}

int main(void) {
    g_dir = getenv("TQ_VOCAB_DIR");
    if (!g_dir || !*g_dir) g_dir = "../shared/data/vocab";
    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && g_n_vocabs < MAX_VOCABS) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ggml-vocab-", 11) != 0 || l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        loaded *lv = &g_vocabs[g_n_vocabs];
        snprintf(lv->name, sizeof lv->name, "%s", e->d_name);
        lv->tok = open_tokenizer(path, &lv->bpe);
        CHECK_MSG(lv->tok != NULL, "%s does not load", path);
        if (lv->tok) g_n_vocabs++;
        else test_failed_count++;
    }
    if (d) closedir(d);
    qsort(g_vocabs, (size_t)g_n_vocabs, sizeof g_vocabs[0], cmp_names);
    const char *smol = getenv("TQ_SMOLLM2");
    if (!smol || !*smol) smol = "models/smollm2-135m-instruct-q4_1.gguf";
    FILE *probe = fopen(smol, "rb");
    if (probe) {
        fclose(probe);
        loaded *lv = &g_vocabs[g_n_vocabs];
        snprintf(lv->name, sizeof lv->name, "smollm2 (model)");
        lv->tok = open_tokenizer(smol, &lv->bpe);
        if (lv->tok) g_n_vocabs++;
        else test_failed_count++;
    } else {
        printf("skip smollm2: no %s (set TQ_SMOLLM2)\n", smol);
    }
    RUN_TEST(test_vectors);
    RUN_TEST(test_wikitext);
    RUN_TEST(test_random);
    RUN_TEST(test_threads);
    for (int i = 0; i < g_n_vocabs; i++) tokenizer_free(g_vocabs[i].tok);
    return test_report();
}
