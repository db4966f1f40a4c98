/* Incremental reasoning/content splitter (server/reasoning.h). */
#include "server/reasoning.h"

#include <string.h>

static const char nb_open[] = "<think>", nb_close[] = "</think>";

int nb_reasoning_parse_kind(const char *s)
{
    if (!strcmp(s, "glm45") || !strcmp(s, "glm4.5") || !strcmp(s, "glm5")) return NB_REASONING_GLM45;
    if (!strcmp(s, "qwen3")) return NB_REASONING_QWEN3;
    if (!strcmp(s, "deepseek-r1") || !strcmp(s, "deepseek_r1")) return NB_REASONING_DEEPSEEK_R1;
    return -1;
}

void nb_reasoning_init(nb_reasoning *r, nb_reasoning_kind kind, int prompt_open)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->open_id = r->close_id = -1;
    r->state = kind == NB_REASONING_NONE ? 2 : (prompt_open || kind == NB_REASONING_DEEPSEEK_R1) ? 1 : 0;
}

int nb_reasoning_prompt_open(const char *p, size_t len)
{
    const char *last_open = NULL, *last_close = NULL;
    for (size_t i = 0; i + 7 <= len; i++) {
        if (!memcmp(p + i, nb_open, 7)) last_open = p + i;
        if (i + 8 <= len && !memcmp(p + i, nb_close, 8)) last_close = p + i;
    }
    return last_open && (!last_close || last_close < last_open);
}

/* Longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t nb_partial_suffix(const char *s, size_t n, const char *tag)
{
    size_t t = strlen(tag);
    for (size_t k = t - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, tag, k)) return k;
    return 0;
}

void nb_reasoning_feed(nb_reasoning *r, const char *text, size_t n, nb_strbuf *reason, nb_strbuf *content)
{
    if (r->state == 2 && !r->hold_len) {
        nb_sb_add(content, text, n);
        return;
    }
    nb_strbuf buf = {0};
    size_t held = r->hold_len < sizeof r->hold ? r->hold_len : sizeof r->hold;
    if (nb_sb_reserve(&buf, held + n)) {
        content->oom = 1;
        return;
    }
    memcpy(buf.p, r->hold, held);
    if (n) memcpy(buf.p + held, text, n);
    buf.len = held + n;
    buf.p[buf.len] = 0;
    r->hold_len = 0;
    const char *s = buf.p;
    size_t len = buf.len, i = 0;
    if (!r->open_checked && r->state != 2) {
        /* In reasoning from the start, a <think> the model emits anyway is dropped. */
        /* Opening tag only at the very start of the output, after whitespace. */
        size_t w = 0;
        while (w < len && (s[w] == ' ' || s[w] == '\n' || s[w] == '\r' || s[w] == '\t')) w++;
        size_t rest = len - w;
        if (rest >= 7 && !memcmp(s + w, nb_open, 7)) {
            i = w + 7;
            r->state = 1;
            r->open_checked = 1;
        } else if (rest < 7 && !memcmp(s + w, nb_open, rest) && len <= sizeof r->hold) {
            memcpy(r->hold, s, len);
            r->hold_len = len;
            nb_sb_free(&buf);
            return;
        } else {
            r->open_checked = 1;
            if (r->state == 0) r->state = 2;
        }
    }
    if (r->state == 1) {
        const char *end = NULL;
        for (size_t k = i; k + 8 <= len; k++)
            if (!memcmp(s + k, nb_close, 8)) {
                end = s + k;
                break;
            }
        if (end) {
            nb_sb_add(reason, s + i, (size_t)(end - (s + i)));
            i = (size_t)(end - s) + 8;
            r->state = 2;
        } else {
            size_t keep = nb_partial_suffix(s + i, len - i, nb_close);
            nb_sb_add(reason, s + i, len - i - keep);
            memcpy(r->hold, s + len - keep, keep);
            r->hold_len = keep;
            nb_sb_free(&buf);
            return;
        }
    }
    if (r->state == 2 && i < len) nb_sb_add(content, s + i, len - i);
    nb_sb_free(&buf);
}

void nb_reasoning_flush(nb_reasoning *r, nb_strbuf *reason, nb_strbuf *content)
{
    if (!r->hold_len) return;
    nb_sb_add(r->state == 1 ? reason : content, r->hold, r->hold_len);
    r->hold_len = 0;
}

void nb_reasoning_use_ids(nb_reasoning *r, int32_t open_id, int32_t close_id)
{
    r->open_id = open_id;
    r->close_id = close_id;
}

void nb_reasoning_feed_tokens(nb_reasoning *r, const int32_t *ids, int n_ids, const char *text, size_t n,
                              nb_strbuf *reason, nb_strbuf *content)
{
    if (r->close_id < 0 || r->state == 2) {
        nb_reasoning_feed(r, text, n, reason, content);
        return;
    }
    if (!r->open_checked && n_ids > 0) {
        r->open_checked = 1;
        if (ids[0] == r->open_id) r->state = 1;
        else if (r->state == 0) r->state = 2;
    }
    if (r->state != 1) {
        nb_sb_add(content, text, n);
        return;
    }
    int k = -1;
    for (int i = 0; i < n_ids; i++)
        if (ids[i] == r->close_id) {
            k = i;
            break;
        }
    if (k < 0) {
        nb_sb_add(reason, text, n);
        return;
    }
    r->state = 2;
    if (k == 0 && n_ids > 1) nb_sb_add(content, text, n);
    else nb_sb_add(reason, text, n);
}
