/* Stop strings over streamed text (src/engine/stop.c): matches spanning token pieces are
 * caught and never emitted; without a match the stream comes out whole; a property test
 * over random texts, stop sets and splits against a direct recomputation.
 * Run: build-eng/tests/test_stop */
#include "engine/sampling.h"
#include "engine/stop.h"
#include "nbtest.h"

/* Feed pieces; return the index matched (or -1) and the emitted text in out. */
static int feed(const char *const *stops, int n_stops, const char *const *pieces, int n_pieces, char *out)
{
    nb_stop_matcher m;
    nb_stop_init(&m, stops, n_stops);
    out[0] = 0;
    int hit = -1;
    for (int i = 0; i < n_pieces && hit < 0; i++) {
        const char *e;
        size_t el;
        hit = nb_stop_push(&m, pieces[i], strlen(pieces[i]), &e, &el);
        strncat(out, e, el);
    }
    if (hit < 0) {
        const char *e;
        size_t el;
        nb_stop_flush(&m, &e, &el);
        strncat(out, e, el);
    }
    nb_stop_free(&m);
    return hit;
}

static void test_spanning(void)
{
    const char *pieces[] = {"He", "llo", " wor", "ld", "!"};
    const char *s1[] = {"lo wo"};
    char out[256];
    NB_CHECK(feed(s1, 1, pieces, 5, out) == 0 && !strcmp(out, "Hel"));
    const char *s2[] = {"xyz", "world!", "ld"};
    NB_CHECK(feed(s2, 3, pieces, 5, out) == 2 && !strcmp(out, "Hello wor"));
    const char *s3[] = {"He"};
    NB_CHECK(feed(s3, 1, pieces, 5, out) == 0 && !strcmp(out, ""));
    const char *s4[] = {"nope", "!!"};
    NB_CHECK(feed(s4, 2, pieces, 5, out) == -1 && !strcmp(out, "Hello world!"));
    /* a multi-byte stop string split across pieces */
    const char *mb[] = {"a\xc3", "\xa9", "b"};
    const char *s5[] = {"\xc3\xa9" "b"};
    NB_CHECK(feed(s5, 1, mb, 3, out) == 0 && !strcmp(out, "a"));
}

static void test_release_is_prompt(void)
{
    /* text that cannot begin a stop string is released at once */
    const char *stops[] = {"STOP"};
    nb_stop_matcher m;
    nb_stop_init(&m, stops, 1);
    const char *e;
    size_t el;
    NB_CHECK(nb_stop_push(&m, "abc", 3, &e, &el) == -1 && el == 3);
    NB_CHECK(nb_stop_push(&m, "xST", 3, &e, &el) == -1 && el == 1 && e[0] == 'x');
    NB_CHECK(nb_stop_push(&m, "Ox", 2, &e, &el) == -1 && el == 4 && !memcmp(e, "STOx", 4));
    NB_CHECK(nb_stop_push(&m, "ST", 2, &e, &el) == -1 && el == 0);
    NB_CHECK(nb_stop_push(&m, "OP", 2, &e, &el) == 0 && el == 0);
    nb_stop_free(&m);
}

static void test_property(void)
{
    for (uint64_t seed = 1; seed <= 3000; seed++) {
        uint64_t k = 0;
#define RND(n) ((int)(nb_mix64(seed * 7777 + k++) % (uint64_t)(n)))
        char text[64];
        int tl = 1 + RND(40);
        for (int i = 0; i < tl; i++) text[i] = "abc"[RND(3)];
        text[tl] = 0;
        char stopbuf[3][8];
        const char *stops[3];
        int ns = 1 + RND(3);
        for (int s = 0; s < ns; s++) {
            int sl = 1 + RND(5);
            for (int i = 0; i < sl; i++) stopbuf[s][i] = "abc"[RND(3)];
            stopbuf[s][sl] = 0;
            stops[s] = stopbuf[s];
        }
        /* random split into pieces */
        char pb[64][64];
        const char *pieces[64];
        int np = 0, pos = 0;
        while (pos < tl) {
            int n = 1 + RND(4);
            if (pos + n > tl) n = tl - pos;
            memcpy(pb[np], text + pos, (size_t)n);
            pb[np][n] = 0;
            pieces[np] = pb[np];
            np++;
            pos += n;
        }
        /* expected, as streaming servers define it: generation stops after the first
         * piece whose arrival completes any stop string; the text before the earliest
         * match present at that moment is emitted */
        int best = -1, bpos = tl + 1;
        char sofar[64];
        size_t sl = 0;
        for (int i = 0; i < np && best < 0; i++) {
            memcpy(sofar + sl, pieces[i], strlen(pieces[i]));
            sl += strlen(pieces[i]);
            sofar[sl] = 0;
            for (int st = 0; st < ns; st++) {
                const char *f = strstr(sofar, stops[st]);
                if (f && f - sofar < bpos) {
                    bpos = (int)(f - sofar);
                    best = st;
                }
            }
        }
        char out[128];
        int hit = feed(stops, ns, pieces, np, out);
        if (best < 0) {
            NB_CHECK_MSG(hit == -1 && !strcmp(out, text), "seed %llu", (unsigned long long)seed);
        } else {
            /* the emitted text is exactly what precedes that match */
            NB_CHECK_MSG(hit >= 0 && (int)strlen(out) == bpos && !strncmp(out, text, (size_t)bpos),
                         "seed %llu: text '%s' out '%s' want %d chars", (unsigned long long)seed, text, out, bpos);
            if (hit >= 0) NB_CHECK(!strncmp(text + bpos, stops[hit], strlen(stops[hit])));
        }
#undef RND
    }
}

static const nb_test tests[] = {
    {"spanning", test_spanning},
    {"release_is_prompt", test_release_is_prompt},
    {"property", test_property},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
