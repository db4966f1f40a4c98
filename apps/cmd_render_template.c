/* nibble render-template: render a chat template the way transformers' apply_chat_template
 * does and print the prompt exactly (no newline added).
 *   nibble render-template (--template FILE.jinja | --model DIR) --messages MESSAGES.json
 *       [--tools TOOLS.json] [--add-generation-prompt] [--kwargs JSON|@FILE] [--name NAME]
 * --model DIR takes the model's own template (chat_template.jinja, else tokenizer_config.json's
 * chat_template, a string or a list of named templates: --name, else "tool_use" when tools
 * are given and it exists, else "default") and defines bos_token / eos_token from
 * tokenizer_config.json as transformers does (through the tokenizer when tokenizer.json is
 * there, else read directly). With --template, bos_token / eos_token are undefined unless
 * given in --kwargs. Exercised by tests/template/test_vs_jinja2.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "nibble.h"
#include "tokenizer/template/template.h"
#include "tokenizer/tokenizer.h"

const char nb_cmd_render_template_summary[] = "render a chat template (as transformers does) and print the prompt";

static void usage(FILE *f)
{
    fprintf(f, "usage: nibble render-template (--template FILE.jinja | --model DIR) --messages MESSAGES.json\n"
               "           [--tools TOOLS.json] [--add-generation-prompt] [--kwargs JSON|@FILE] [--name NAME]\n");
}

/* A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}. */
static char *config_token(const cJSON *cfg, const char *key)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
    return cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
}

/* The model folder's template source and special tokens without tokenizer.json. */
static int load_model_dir(const char *dir, const char *name, int have_tools, char **src, char **bos, char **eos)
{
    char path[4096];
    cJSON *cfg = NULL;
    nb_path_join(path, sizeof path, dir, "tokenizer_config.json");
    if (nb_path_exists(path) && nb_json_load_file(path, &cfg) != NB_OK) return -1;
    if (cfg) {
        *bos = config_token(cfg, "bos_token");
        *eos = config_token(cfg, "eos_token");
    }
    size_t len;
    nb_path_join(path, sizeof path, dir, "chat_template.jinja");
    if (!name && nb_path_exists(path)) {
        cJSON_Delete(cfg);
        return nb_read_file(path, src, &len, 0) == NB_OK ? 0 : -1;
    }
    const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
    const char *pick = NULL;
    if (cJSON_IsString(ct) && !name) pick = ct->valuestring;
    else if (cJSON_IsArray(ct)) {
        const char *want[2] = {name, NULL};
        if (!name) {
            want[0] = have_tools ? "tool_use" : "default";
            want[1] = "default";
        }
        for (int w = 0; w < 2 && !pick && want[w]; w++) {
            const cJSON *e;
            cJSON_ArrayForEach(e, ct)
            {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "template");
                if (cJSON_IsString(n) && cJSON_IsString(t) && !strcmp(n->valuestring, want[w])) {
                    pick = t->valuestring;
                    break;
                }
            }
        }
    }
    if (pick) *src = strdup(pick);
    cJSON_Delete(cfg);
    if (!*src) {
        nb_error(NB_ERR_NOT_FOUND, "%s: no chat template%s%s", dir, name ? " named " : "", name ? name : "");
        return -1;
    }
    return 0;
}

/* JSON argument text: a file, or (inline_ok) the text itself unless it starts with '@'. */
static char *load_json_text(const char *arg, int inline_ok)
{
    if (inline_ok && arg[0] != '@') return strdup(arg);
    char *text;
    size_t len;
    if (nb_read_file(arg[0] == '@' ? arg + 1 : arg, &text, &len, 0) != NB_OK) {
        fprintf(stderr, "nibble render-template: %s\n", nb_last_error());
        return NULL;
    }
    return text;
}

int nb_cmd_render_template(int argc, char **argv)
{
    const char *tpl_path = NULL, *model = NULL, *msgs_path = NULL, *tools_path = NULL, *kwargs_arg = NULL,
               *name = NULL;
    int add_gen = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--template") && i + 1 < argc) tpl_path = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--messages") && i + 1 < argc) msgs_path = argv[++i];
        else if (!strcmp(argv[i], "--tools") && i + 1 < argc) tools_path = argv[++i];
        else if (!strcmp(argv[i], "--kwargs") && i + 1 < argc) kwargs_arg = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--add-generation-prompt")) add_gen = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "nibble render-template: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if ((!tpl_path) == (!model) || !msgs_path) {
        usage(stderr);
        return 2;
    }
    int rc = 1;
    char *src = NULL, *bos = NULL, *eos = NULL, *out = NULL, *msgs = NULL, *tools = NULL, *kwargs = NULL;
    nb_template *tpl = NULL;
    size_t len = 0;
    const char *tpl_name = tpl_path;
    /* JSON stays text down to the renderer, which reads numbers as Python does (1.0 stays a float) */
    if (!(msgs = load_json_text(msgs_path, 0)) || (tools_path && !(tools = load_json_text(tools_path, 0))) ||
        (kwargs_arg && !(kwargs = load_json_text(kwargs_arg, 1))))
        goto done;
    if (tpl_path) {
        if (nb_read_file(tpl_path, &src, &len, 0) != NB_OK) {
            fprintf(stderr, "nibble render-template: %s\n", nb_last_error());
            goto done;
        }
    } else {
        tpl_name = model;
        char path[4096];
        nb_tokenizer *tok = NULL;
        nb_path_join(path, sizeof path, model, "tokenizer.json");
        if (nb_path_exists(path)) {
            if (nb_tokenizer_load(model, &tok) != NB_OK) {
                fprintf(stderr, "nibble render-template: %s\n", nb_last_error());
                goto done;
            }
            const char *want = name ? name : (tools_path && nb_tokenizer_chat_template(tok, "tool_use")) ? "tool_use" : NULL;
            const char *t = nb_tokenizer_chat_template(tok, want);
            if (t) src = strdup(t);
            if (nb_tokenizer_bos_token(tok)) bos = strdup(nb_tokenizer_bos_token(tok));
            if (nb_tokenizer_eos_token(tok)) eos = strdup(nb_tokenizer_eos_token(tok));
            nb_tokenizer_free(tok);
            if (!src) {
                fprintf(stderr, "nibble render-template: %s: no chat template%s%s\n", model, name ? " named " : "",
                        name ? name : "");
                goto done;
            }
        } else if (load_model_dir(model, name, tools_path != NULL, &src, &bos, &eos)) {
            fprintf(stderr, "nibble render-template: %s\n", nb_last_error());
            goto done;
        }
        len = strlen(src);
    }
    if (nb_template_compile(src, len, tpl_name, &tpl) != NB_OK ||
        nb_chat_template_apply_json(tpl, msgs, tools, add_gen, kwargs, bos, eos, &out, &len) != NB_OK) {
        fprintf(stderr, "nibble render-template: %s\n", nb_last_error());
        goto done;
    }
    if (fwrite(out, 1, len, stdout) != len || fflush(stdout)) {
        fprintf(stderr, "nibble render-template: write failed\n");
        goto done;
    }
    rc = 0;
done:
    free(out);
    nb_template_free(tpl);
    free(msgs);
    free(tools);
    free(kwargs);
    free(src);
    free(bos);
    free(eos);
    return rc;
}
