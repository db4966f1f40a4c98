/* Raw JSON value spans (server/json_span.h).
 * Exercised by: build-srv2/tests/test_oai_request, fuzz_oai_request */
#include "server/json_span.h"

#include <string.h>

#define NB_NPOS ((size_t)-1)

size_t nb_json_skip_ws(const char *s, size_t n, size_t pos)
{
    /* cJSON skips every byte <= 32 between tokens; so must we, to stay in step with it. */
    while (pos < n && (unsigned char)s[pos] <= 32) pos++;
    return pos;
}

/* One past the closing quote of the string whose opening quote is at s[pos]. */
static size_t nb_string_end(const char *s, size_t n, size_t pos)
{
    for (size_t i = pos + 1; i < n; i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') return i + 1;
    }
    return NB_NPOS;
}

size_t nb_json_value_end(const char *s, size_t n, size_t pos)
{
    if (pos >= n) return NB_NPOS;
    char c = s[pos];
    if (c == '"') return nb_string_end(s, n, pos);
    if (c == '{' || c == '[') {
        /* Brackets balance outside strings; no recursion, so depth costs no stack. */
        size_t depth = 0;
        for (size_t i = pos; i < n; i++) {
            char d = s[i];
            if (d == '"') {
                i = nb_string_end(s, n, i);
                if (i == NB_NPOS) return NB_NPOS;
                i--;
            } else if (d == '{' || d == '[') {
                depth++;
            } else if (d == '}' || d == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return NB_NPOS;
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (n - pos >= l && !memcmp(s + pos, lits[k], l)) return pos + l;
    }
    /* A number: cJSON reads the run of these characters (it is laxer than RFC 8259). */
    size_t i = pos;
    while (i < n && strchr("0123456789+-.eE", s[i]) && s[i]) i++;
    return i > pos ? i : NB_NPOS;
}

int nb_json_iter_begin(nb_json_iter *it, const char *s, size_t n, size_t start)
{
    if (start >= n || (s[start] != '{' && s[start] != '[')) return -1;
    it->s = s, it->n = n, it->obj = s[start] == '{', it->started = 0;
    it->pos = nb_json_skip_ws(s, n, start + 1);
    return 0;
}

int nb_json_iter_next(nb_json_iter *it, size_t *ks, size_t *ke, size_t *vs, size_t *ve)
{
    const char *s = it->s;
    size_t n = it->n, p = it->pos;
    char close = it->obj ? '}' : ']';
    if (p >= n) return -1;
    if (s[p] == close) return 0;
    if (it->started) {
        if (s[p] != ',') return -1;
        p = nb_json_skip_ws(s, n, p + 1);
    }
    size_t k0 = 0, k1 = 0;
    if (it->obj) {
        if (p >= n || s[p] != '"') return -1;
        k0 = p;
        k1 = nb_string_end(s, n, p);
        if (k1 == NB_NPOS) return -1;
        p = nb_json_skip_ws(s, n, k1);
        if (p >= n || s[p] != ':') return -1;
        p = nb_json_skip_ws(s, n, p + 1);
    }
    size_t e = nb_json_value_end(s, n, p);
    if (e == NB_NPOS) return -1;
    *ks = k0, *ke = k1, *vs = p, *ve = e;
    it->pos = nb_json_skip_ws(s, n, e);
    it->started = 1;
    return 1;
}
