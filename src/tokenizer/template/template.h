/* Chat templates: a Jinja2-subset interpreter in C that renders Hugging Face chat templates
 * exactly as transformers does (jinja2 ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks, the loopcontrols extension, transformers' tojson filter, and the
 * raise_exception / strftime_now globals). The supported language is listed in
 * docs/templates.md.
 *   nb_template *t; nb_template_compile(src, strlen(src), "glm5", &t);
 *   char *text; size_t n; nb_chat_template_apply(t, messages, tools, 1, kwargs, bos, eos, &text, &n);
 *   free(text); nb_template_free(t);
 * Exercised by: tests/template/ (unit tests; test_vs_jinja2.py compares with Python jinja2
 * configured as transformers configures it), `nibble render-template`.
 *
 * A compiled template is immutable: render may be called from several threads at once on
 * the same template. Variables come in as cJSON values (JSON stays in the tokenizer and
 * server layers). JSON numbers through cJSON: an integral value that fits in int64 is an
 * int, any other a float (cJSON keeps no "1.0" vs "1" distinction; the _json entry point
 * below reads JSON text and keeps it). */
#ifndef NB_TOKENIZER_TEMPLATE_TEMPLATE_H
#define NB_TOKENIZER_TEMPLATE_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "nibble.h"

typedef struct nb_template nb_template;

/* Compile `len` bytes of Jinja source. `name` (copied; NULL: "template") names the
 * template in error messages. A syntax error is NB_ERR_FORMAT with a message
 * "template NAME line N: ..."; an unsupported construct (include, extends, ...) is also
 * NB_ERR_FORMAT naming the line. */
nb_status nb_template_compile(const char *src, size_t len, const char *name, nb_template **out);

/* Render with `vars`, a JSON object whose members are the template's variables (NULL: no
 * variables). *out is malloc'd, NUL-terminated (free() it); *len (may be NULL) is its
 * length. Errors are "template NAME line N: ..." with status:
 *   NB_ERR_INVALID_ARG  the template raised it: raise_exception("msg") (the message is
 *                       "template NAME line N: raise_exception: msg"), or a runtime error
 *                       in the template (undefined attribute, type error, bad filter
 *                       argument, unsafe sandbox access such as list.append);
 *   NB_ERR_OUT_OF_MEMORY the render exceeded a budget: 256 MiB of values, macro recursion
 *                       200 deep, or 1e7 loop iterations plus macro calls. */
nb_status nb_template_render(const nb_template *tpl, const cJSON *vars, char **out, size_t *len);

/* The template's name as given to compile. */
const char *nb_template_name(const nb_template *tpl);

void nb_template_free(nb_template *tpl);

/* Render a chat template the way transformers' apply_chat_template does: the variables
 * are `messages` (a JSON array; NULL is an empty list), `tools` (a JSON array, or NULL
 * for Python None), `add_generation_prompt` (bool), `bos_token` / `eos_token` (strings;
 * NULL leaves the name undefined, as transformers does for a tokenizer without one), then
 * every member of `kwargs` (a JSON object or NULL: enable_thinking, ...), which override
 * the names above as Python keyword arguments would. Output and errors as
 * nb_template_render. */
nb_status nb_chat_template_apply(const nb_template *tpl, const cJSON *messages, const cJSON *tools,
                                 int add_generation_prompt, const cJSON *kwargs, const char *bos_token,
                                 const char *eos_token, char **out, size_t *len);

/* As nb_chat_template_apply, with the variables as NUL-terminated JSON text:
 * messages_json an array (NULL: empty), tools_json any JSON value (NULL: None),
 * kwargs_json an object (NULL: none). Numbers are read as Python's json.loads reads them,
 * so "1.0" stays a float and prints "1.0" (cJSON cannot keep it apart from "1"); prefer
 * this entry when the JSON text is at hand. A JSON syntax error is NB_ERR_INVALID_ARG
 * naming the argument, line and column. */
nb_status nb_chat_template_apply_json(const nb_template *tpl, const char *messages_json, const char *tools_json,
                                      int add_generation_prompt, const char *kwargs_json, const char *bos_token,
                                      const char *eos_token, char **out, size_t *len);

#endif
