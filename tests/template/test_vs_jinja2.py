#!/usr/bin/env python3
"""Compare nibble's chat-template interpreter with Python jinja2 configured as transformers
configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
transformers' tojson / raise_exception / strftime_now, the {% generation %} tag).

  tests/template/test_vs_jinja2.py [--bin build/nibble] [--dir DIR] [--only SUBSTRING] [-v]

Checks, each an exact string comparison (or both sides failing):
  * snippets.json: small templates over the expression / filter / statement surface;
  * templates/*.jinja x cases/*.json: the project's chat templates with many message lists;
  * 300 random templates of nested statements (seeded): scoping, loops, break/continue,
    for-else, macros, call / filter / with / block-set bodies; and 200 random templates
    of text and tags with every whitespace-control modifier;
  * --model DIR: model folders built here (template string, named templates, a
    chat_template.jinja file, with and without tokenizer.json), bos/eos from the config;
  * with --dir DIR (or NIBBLE_TEMPLATE_DIR): every *.jinja in DIR x cases/*.json; without it
    that part is skipped with a message. When DIR is the only thing asked for and is unset,
    the script exits 77 (skipped).
The reference runs in a cached virtual environment (scripts/pyenv.sh tpl jinja2==3.1.6 ...).
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PKGS = ["jinja2==3.1.6", "markupsafe==3.0.2"]


def ensure_venv():
    """Re-run this script inside the cached venv that has the pinned jinja2."""
    try:
        import jinja2  # noqa: F401
        if jinja2.__version__ == "3.1.6":
            return
    except ImportError:
        pass
    if os.environ.get("NIBBLE_TPL_VENV_ACTIVE"):
        sys.exit("test_vs_jinja2.py: jinja2 3.1.6 missing from the venv")
    venv = subprocess.check_output([os.path.join(ROOT, "scripts", "pyenv.sh"), "tpl"] + PKGS, text=True).strip()
    env = dict(os.environ, NIBBLE_TPL_VENV_ACTIVE="1")
    os.execve(os.path.join(venv, "bin", "python"), [os.path.join(venv, "bin", "python")] + sys.argv, env)


ensure_venv()

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker parses {% generation %}...{% endgeneration %} into a
    call block whose output is the body unchanged (tracking aside)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def reference(src, messages, tools, add_gen, kwargs, bos=None, eos=None):
    """(True, text) or (False, error) as transformers' render_jinja_template would give."""
    try:
        tpl = ENV.from_string(src)
        extra = {}
        if bos is not None:
            extra["bos_token"] = bos
        if eos is not None:
            extra["eos_token"] = eos
        extra.update(kwargs or {})
        return True, tpl.render(messages=messages, tools=tools, documents=None, add_generation_prompt=add_gen, **extra)
    except Exception as e:  # any failure: ours must fail too
        return False, "%s: %s" % (type(e).__name__, e)


def ours(binary, tpl_path, messages, tools, add_gen, kwargs, tmp):
    mpath = os.path.join(tmp, "messages.json")
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False)
    cmd = [binary, "render-template", "--template", tpl_path, "--messages", mpath]
    if tools is not None:
        tpath = os.path.join(tmp, "tools.json")
        with open(tpath, "w", encoding="utf-8") as f:
            json.dump(tools, f, ensure_ascii=False)
        cmd += ["--tools", tpath]
    if add_gen:
        cmd.append("--add-generation-prompt")
    if kwargs:
        kpath = os.path.join(tmp, "kwargs.json")
        with open(kpath, "w", encoding="utf-8") as f:
            json.dump(kwargs, f, ensure_ascii=False)
        cmd += ["--kwargs", "@" + kpath]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        return False, p.stderr.decode("utf-8", "replace").strip()
    return True, p.stdout.decode("utf-8")


def first_diff(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


class Tally:
    def __init__(self, verbose):
        self.ok = self.bad = 0
        self.verbose = verbose

    def check(self, label, ref, got):
        (rok, rtext), (gok, gtext) = ref, got
        if rok and gok and rtext == gtext:
            self.ok += 1
            return
        if not rok and not gok:
            self.ok += 1
            if self.verbose:
                print("  both fail: %s\n    ref: %s\n    ours: %s" % (label, rtext, gtext))
            return
        self.bad += 1
        print("MISMATCH %s" % label)
        if rok and gok:
            i = first_diff(rtext, gtext)
            print("  first difference at char %d" % i)
            print("  ref : %r" % rtext[max(0, i - 60): i + 60])
            print("  ours: %r" % gtext[max(0, i - 60): i + 60])
        else:
            print("  ref : %s" % (rtext if not rok else "ok: %r" % rtext[:300]))
            print("  ours: %s" % (gtext if not gok else "ok: %r" % gtext[:300]))


def load_cases():
    cases = []
    for path in sorted(glob.glob(os.path.join(HERE, "cases", "*.json"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for i, c in enumerate(data):
            cases.append(("%s#%d" % (os.path.basename(path), i), c))
    return cases


def run_templates(paths, binary, tally, tmp, only):
    cases = load_cases()
    for tpath in paths:
        with open(tpath, encoding="utf-8") as f:
            src = f.read()
        for cname, c in cases:
            for add_gen in (False, True):
                label = "%s / %s / add_generation_prompt=%s" % (os.path.basename(tpath), cname, add_gen)
                if only and only not in label:
                    continue
                msgs, tools, kw = c["messages"], c.get("tools"), c.get("kwargs", {})
                tally.check(label, reference(src, msgs, tools, add_gen, kw), ours(binary, tpath, msgs, tools, add_gen, kw, tmp))


def run_snippets(binary, tally, tmp, only):
    with open(os.path.join(HERE, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    tpath = os.path.join(tmp, "snippet.jinja")
    for i, s in enumerate(snippets):
        label = "snippet %d: %r" % (i, s["t"][:70])
        if only and only not in label:
            continue
        with open(tpath, "w", encoding="utf-8") as f:
            f.write(s["t"])
        v = s.get("vars", {})
        tally.check(label, reference(s["t"], [], None, False, v), ours(binary, tpath, [], None, False, v, tmp))


def run_model_dirs(binary, tally, tmp, only):
    """--model DIR: the template chosen from tokenizer_config.json / chat_template.jinja as
    transformers chooses it, bos_token / eos_token from the config (string or AddedToken)."""
    tdir = os.path.join(HERE, "templates")
    with open(os.path.join(tdir, "glm_style.jinja"), encoding="utf-8") as f:
        t_glm = f.read()
    with open(os.path.join(tdir, "deepseek_style.jinja"), encoding="utf-8") as f:
        t_ds = f.read()
    with open(os.path.join(tdir, "qwen_style.jinja"), encoding="utf-8") as f:
        t_qwen = f.read()
    bos = {"__type": "AddedToken", "content": "<｜begin▁of▁sentence｜>", "lstrip": False, "normalized": True,
           "rstrip": False, "single_word": False}
    # a minimal byte-level BPE tokenizer.json, so the tokenizer-API path is taken too
    tok_json = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                  "use_regex": True},
                "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                                                    "trim_offsets": True, "use_regex": True},
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                          "vocab": {"a": 0, "b": 1}, "merges": []}}
    dirs = [
        ("string-template", {"bos_token": bos, "eos_token": "<｜end▁of▁sentence｜>", "chat_template": t_ds}, None, False, t_ds),
        ("named-templates", {"eos_token": {"content": "<|im_end|>"}, "chat_template": [
            {"name": "default", "template": t_glm}, {"name": "tool_use", "template": t_qwen}]}, None, False, None),
        ("jinja-file-wins", {"bos_token": "<s>", "chat_template": t_ds}, t_qwen, False, t_qwen),
        ("with-tokenizer-json", {"bos_token": bos, "eos_token": "</s>", "chat_template": t_ds}, None, True, t_ds),
    ]
    cases = load_cases()
    for name, cfg, jinja_file, with_tok, want_src in dirs:
        d = os.path.join(tmp, "model-" + name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False)
        if jinja_file is not None:
            with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(jinja_file)
        if with_tok:
            with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(tok_json, f)
        def tok(key):
            v = cfg.get(key)
            return v.get("content") if isinstance(v, dict) else v
        for cname, c in cases:
            label = "model dir %s / %s" % (name, cname)
            if only and only not in label:
                continue
            msgs, tools, kw = c["messages"], c.get("tools"), c.get("kwargs", {})
            src = want_src or (t_qwen if tools is not None else t_glm)
            ref = reference(src, msgs, tools, True, kw, bos=tok("bos_token"), eos=tok("eos_token"))
            got = ours_model(binary, d, msgs, tools, kw, tmp)
            tally.check(label, ref, got)


def ours_model(binary, model_dir, messages, tools, kwargs, tmp):
    mpath = os.path.join(tmp, "messages.json")
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False)
    cmd = [binary, "render-template", "--model", model_dir, "--messages", mpath, "--add-generation-prompt"]
    if tools is not None:
        tpath = os.path.join(tmp, "tools.json")
        with open(tpath, "w", encoding="utf-8") as f:
            json.dump(tools, f, ensure_ascii=False)
        cmd += ["--tools", tpath]
    if kwargs:
        cmd += ["--kwargs", json.dumps(kwargs, ensure_ascii=False)]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        return False, p.stderr.decode("utf-8", "replace").strip()
    return True, p.stdout.decode("utf-8")


def random_statement_template(rng):
    """A random template of nested for / if / set / namespace / macro / call / filter / with
    / block-set statements with break and continue: the scoping rules are where an
    interpreter most easily drifts from jinja2."""
    def val():
        return rng.choice(["x", "y", "z", "1", "2", "'s'", "ns.a", "loop.index", "i", "j", "x ~ y", "(x or 0) + 1",
                           "m(1)", "undefined_v"])

    def block(d):
        out = []
        for _ in range(rng.randint(1, 3)):
            k = rng.random()
            if d > 0 and k < 0.2:
                v = rng.choice(["i", "j"])
                out.append("{%% for %s in %s %%}%s{%% endfor %%}" % (v, rng.choice(["[1, 2]", "[3]", "[]", "range(3)"]),
                                                                    block(d - 1)))
            elif d > 0 and k < 0.35:
                out.append("{%% if %s %%}%s{%% else %%}%s{%% endif %%}" % (val(), block(d - 1), block(d - 1)))
            elif k < 0.55:
                out.append("{%% set %s = %s %%}" % (rng.choice(["x", "y", "z"]), val()))
            elif k < 0.62:
                out.append("{%% set ns.a = %s %%}" % val())
            elif d > 0 and k < 0.68:
                out.append("{%% macro m(p) %%}[{{ p }}{%% set x = 9 %%}{{ x }}%s]{%% endmacro %%}" % block(d - 1))
            elif d > 0 and k < 0.72:
                out.append("{%% with x = %s %%}%s{%% endwith %%}" % (val(), block(d - 1)))
            elif d > 0 and k < 0.76:
                out.append("{%% set %s %%}%s{%% endset %%}" % (rng.choice(["x", "y", "z"]), block(d - 1)))
            elif d > 0 and k < 0.8:
                out.append("{%% filter upper %%}%s{%% endfilter %%}" % block(d - 1))
            elif d > 0 and k < 0.84:
                out.append("{%% call w() %%}%s{%% endcall %%}" % block(d - 1))
            elif d > 0 and k < 0.88:
                v = rng.choice(["i", "j"])
                out.append("{%% for %s in %s %%}{{ loop.index }}%s{%% if %s %%}{%% %s %%}{%% endif %%}{{ %s }}"
                           "{%% else %%}E{%% endfor %%}" % (v, rng.choice(["[1, 2, 3]", "[]", "range(4)"]), block(d - 1),
                                                            rng.choice([v + " == 2", "loop.first", "x"]),
                                                            rng.choice(["break", "continue"]), v))
            else:
                out.append("{{ %s }}," % val())
        return "".join(out)

    return ("{% set ns = namespace(a=0) %}{% macro m(p) %}<{{ p }}>{% endmacro %}"
            "{% macro w() %}({{ caller() }}){% endmacro %}" + block(3) + "|{{ x }}{{ y }}{{ z }}{{ ns.a }}")


def random_whitespace_template(rng):
    """Random text (spaces, tabs, newlines incl. \r\n, Unicode spaces) around output, comment,
    if / for / set and raw tags with every -/+ modifier: jinja2's trim_blocks / lstrip_blocks
    and whitespace control, exactly."""
    texts = [" ", "  ", "\t", "\n", "\n\n", "x", "ab", " \n ", "\r\n", "\u3000", "\u00a0", "\x0b", "\x0c", "\x1c",
             "\n  \t"]

    def mod():
        return rng.choice(["", "", "-", "+"])

    def emod():
        return rng.choice(["", "", "-"])

    def text():
        return "".join(rng.choice(texts) for _ in range(rng.randint(0, 4)))

    def piece(d):
        k = rng.random()
        if k < 0.25:
            return "{{%s 1 %s}}" % (mod(), emod())
        if k < 0.4:
            return "{#%s c %s#}" % (mod(), emod())
        if k < 0.55 and d > 0:
            return "{%%%s if true %s%%}%s{%%%s else %s%%}%s{%%%s endif %s%%}" % (
                mod(), emod(), body(d - 1), mod(), emod(), body(d - 1), mod(), emod())
        if k < 0.7 and d > 0:
            return "{%%%s for i in [1, 2] %s%%}%s{%%%s endfor %s%%}" % (mod(), emod(), body(d - 1), mod(), emod())
        if k < 0.78:
            return "{%%%s set q = 1 %s%%}" % (mod(), emod())
        if k < 0.84:
            return "{%%%s raw %s%%}%s{{ r }}%s{%%%s endraw %s%%}" % (mod(), emod(), text(), text(), mod(), emod())
        return text()

    def body(d):
        return "".join(text() + piece(d) for _ in range(rng.randint(1, 4))) + text()

    return body(2)


def run_random_statements(binary, tally, tmp, only, count=300, seed=20261130):
    import random
    rng = random.Random(seed)
    tpath = os.path.join(tmp, "random.jinja")
    for i in range(count):
        src = random_statement_template(rng)
        label = "random statements #%d: %s" % (i, src[:60])
        if only and only not in label:
            continue
        with open(tpath, "w", encoding="utf-8") as f:
            f.write(src)
        tally.check(label + "\n  " + src, reference(src, [], None, False, {}), ours(binary, tpath, [], None, False, {}, tmp))
    for i in range(count * 2 // 3):
        src = random_whitespace_template(rng)
        label = "random whitespace #%d" % i
        if only and only not in label:
            continue
        with open(tpath, "w", encoding="utf-8", newline="") as f:
            f.write(src)
        tally.check(label + "\n  " + repr(src), reference(src, [], None, False, {}),
                    ours(binary, tpath, [], None, False, {}, tmp))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("NIBBLE_BIN", os.path.join(ROOT, "build", "nibble")))
    ap.add_argument("--dir", default=None, help="also render every *.jinja here (default: $NIBBLE_TEMPLATE_DIR)")
    ap.add_argument("--dir-only", action="store_true", help="only the --dir / NIBBLE_TEMPLATE_DIR templates")
    ap.add_argument("--only", default=None, help="run only checks whose label contains this")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    d = a.dir or os.environ.get("NIBBLE_TEMPLATE_DIR")
    if a.dir_only and not d:
        print("NIBBLE_TEMPLATE_DIR is not set: skipping the external templates check")
        return 77
    if not os.path.exists(a.bin):
        print("test_vs_jinja2.py: %s not built" % a.bin)
        return 1
    tally = Tally(a.v)
    with tempfile.TemporaryDirectory() as tmp:
        if not a.dir_only:
            run_snippets(a.bin, tally, tmp, a.only)
            run_templates(sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja"))), a.bin, tally, tmp, a.only)
            run_model_dirs(a.bin, tally, tmp, a.only)
            run_random_statements(a.bin, tally, tmp, a.only)
        if d:
            paths = sorted(glob.glob(os.path.join(d, "*.jinja")))
            print("rendering %d templates from %s" % (len(paths), d))
            run_templates(paths, a.bin, tally, tmp, a.only)
        else:
            print("NIBBLE_TEMPLATE_DIR is not set: skipping the external templates check")
            if a.dir_only:
                return 77
    print("%d checks identical, %d mismatches" % (tally.ok, tally.bad))
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
