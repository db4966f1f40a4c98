#!/usr/bin/env python3
"""Compare nibble's tokenizer with the reference (PyPI `tokenizers`).

Trains small byte-level BPE tokenizers at test time (seconds) with the pre-tokenizer,
normalizer, post-processor and added-token configurations of real model families:
  glm      Split(GLM-4.5/GLM-5 regex) + ByteLevel, [gMASK]<sop> template, GLM specials
  qwen     NFC + Split(Qwen2/3 regex) + ByteLevel, ChatML specials, <think> added tokens
  cl100k   tiktoken-style Split regex with possessive quantifiers + ByteLevel, ignore_merges
  deepseek Sequence of three Splits (digits, CJK, main regex) + ByteLevel, bos template
  llama    sentencepiece style: Prepend/Replace normalizer, byte_fallback + unk,
           Replace/ByteFallback/Fuse/Strip decoder, merges written as "a b" strings
  meta     Metaspace(prepend_scheme=first) pre-tokenizer and decoder, byte_fallback
  meta_always  Digits (contiguous) + Metaspace(prepend_scheme=always, no split)
  misc     NFKC + Lowercase + Replace normalizers, Digits, Split with Removed /
           MergedWithPrevious / MergedWithNext / Contiguous / invert, GPT-2 ByteLevel
           regex with add_prefix_space, lstrip/rstrip/single_word added tokens
then runs `nibble tokenize` / `nibble detokenize` on a corpus with CJK, emoji, code,
whitespace runs, numbers, special tokens inside text and invalid UTF-8, and requires
identical ids and identical text (also through the streaming detokenizer).

Usage: NIBBLE_BIN=build/nibble tests/tokenizer/test_vs_hf.py [--keep DIR] [--bench]
Run by ctest (label cpu) through tests/tokenizer/CMakeLists.txt.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TOKENIZERS_PIN = "tokenizers==0.22.1"


def ensure_venv():
    """Re-exec under the cached venv that has the pinned `tokenizers`."""
    try:
        import tokenizers  # noqa: F401
        if tokenizers.__version__ == TOKENIZERS_PIN.split("==")[1]:
            return
    except ImportError:
        pass
    if os.environ.get("NB_TOK_VENV_DONE"):
        print("test_vs_hf: the venv does not provide " + TOKENIZERS_PIN, file=sys.stderr)
        sys.exit(1)
    try:
        venv = subprocess.run([os.path.join(ROOT, "scripts", "pyenv.sh"), "tok", TOKENIZERS_PIN],
                              check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as e:
        print("test_vs_hf: SKIP: cannot create the Python venv (no PyPI?):\n" + e.stderr, file=sys.stderr)
        sys.exit(77)
    os.environ["NB_TOK_VENV_DONE"] = "1"
    py = os.path.join(venv, "bin", "python")
    os.execv(py, [py] + sys.argv)


ensure_venv()

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from tokenizers import AddedToken  # noqa: E402

GLM_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken cl100k style (GPT-4, converted tiktoken tokenizers): possessive quantifiers
CL100K_RE = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"
             r"|\s*[\r\n]|\s+(?!\S)|\s+")
DS_RE_DIGITS = r"\p{N}{1,3}"
DS_RE_CJK = r"[一-龥぀-ゟ゠-ヿ]+"
DS_RE_MAIN = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
              r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>"]

# ---------------------------------------------------------------------------------------
# corpora

WORDS = ("the of and to in is was for on that with as by at from it an be this which or are have not "
         "model token expert layer weight scale tensor kernel request stream batch decode prefill "
         "Hello World Mixture Experts NVFP4 GLM DeepSeek Qwen don't it's we're they've I'm you'll he'd").split()
CJK = ["你好", "世界", "模型", "专家", "推理", "服务器", "量化", "注意力", "こんにちは", "カタカナ", "ひらがな",
       "東京", "한국어", "안녕하세요", "中文文本测试", "混合专家模型"]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🤖", "✨", "🔥"]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
        "if __name__ == '__main__':\n    main()\n", "const x = {a: 1, b: [2, 3]};\n",
        "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n", "SELECT * FROM t WHERE id=7;\n"]
NUMBERS = ["3.14159", "1,234,567", "2024-01-31", "0x1F", "1e-9", "42", "007", "１２３", "½", "Ⅻ", "٣٤٥"]
SPACES = ["  ", "   ", "\t", "\n", "\n\n", "\r\n", "    \n", " \u00a0 ", "\u3000", "\u0085", "\u2028", "\u200b",
          " \u0085", "\u180e", " \u180e"]
ACCENTS = ["café", "cafe\u0301", "naïve", "Ångström", "ﬁle", "Ⅸ", "ＡＢＣ", "İstanbul", "straße", "ΣΊΣΥΦΟΣ"]


def corpus_line(rng):
    parts = []
    for _ in range(rng.randint(3, 14)):
        r = rng.random()
        if r < 0.45:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.2 else w)
        elif r < 0.58:
            parts.append(rng.choice(CJK))
        elif r < 0.64:
            parts.append(rng.choice(EMOJI))
        elif r < 0.72:
            parts.append(rng.choice(NUMBERS))
        elif r < 0.78:
            parts.append(rng.choice(ACCENTS))
        elif r < 0.83:
            parts.append(rng.choice(CODE))
        else:
            parts.append(rng.choice([",", ".", "!", "?", ":", ";", "-", "'", "\"", "(", ")", "...", "—"]))
        parts.append(rng.choice(SPACES) if rng.random() < 0.15 else " ")
    return "".join(parts)


def training_corpus():
    rng = random.Random(1234)
    return [corpus_line(rng) for _ in range(4000)]


def test_texts(specials):
    """The comparison corpus: (name, bytes)."""
    rng = random.Random(99)
    t = []
    fixed = [
        "", " ", "a", "Hello world", " Hello  world ", "hello\n\nworld\n", "   leading and trailing   ",
        "\t\tTabs\tand\nnewlines\r\n", " " * 37 + "x" + " " * 19, "\n" * 9, "x" + "\u0085" + "y \u0085 z",
        "你好，世界！这是一个测试。", "混合专家模型的推理服务器", "日本語のテキストとカタカナ", "한국어 텍스트",
        "😀🚀👍🏽👨‍👩‍👧🇫🇷❤️ emoji 🤖✨", "数字 1234567890 and 3.14159 and １２３ and ½ Ⅻ ٣٤٥",
        "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n", "don't can't WON'T It's I'M",
        "café cafe\u0301 naïve Ångström ﬁle ＡＢＣ İstanbul straße ΣΊΣΥΦΟΣ",
        "a\u200bb\u200dc", "\u00a0\u00a0nbsp", "x" * 300, "ab" * 150, "1" * 50, "  \n  \n  ",
        "https://example.com/path?q=1&r=[2]#frag", "{\"key\": [1, 2, {\"n\": null}]}",
        "mixed中文and English和数字123在一起", "\U0001F600\U0001F600\U0001F600", "\u0000nul\u0001ctl\u007f",
        # Oniguruma's \s includes U+0085; U+180E (which PCRE2 10.42's \s has) and U+001C are not \s
        # normalization across ASCII/non-ASCII boundaries: combining marks on ASCII bases,
        # reordering of marks, conjoining Hangul jamo, compatibility characters
        "e\u0301 a\u0323\u0302 A\u030a\u0041\u0301x \u1100\u1161\u11a8 k\u1161 \u0071\u0307\u0323 \ufb01x \u2460",
        "a \u0085\u0085b", "a\u180e\u180eb c\u180e \u180e", "q\u180e \u200b\u2028z", "a\u001cb\u001d c \u2029\u0085 \u000b\u000c!",
    ]
    for i, s in enumerate(fixed):
        t.append(("fixed%d" % i, s.encode("utf-8")))
    for i in range(60):
        t.append(("rand%d" % i, corpus_line(rng).encode("utf-8")))
    # special tokens inside text, glued to words and spaced
    for i in range(25):
        s = corpus_line(rng)
        for _ in range(rng.randint(1, 4)):
            p = rng.randint(0, len(s))
            sp = rng.choice(specials)
            glue = rng.choice(["", " ", "  ", "\n"])
            s = s[:p] + glue + sp + rng.choice(["", " ", "\n"]) + s[p:]
        t.append(("special%d" % i, s.encode("utf-8")))
    t.append(("special_only", "".join(specials).encode("utf-8")))
    # invalid UTF-8: stray continuation bytes, truncated sequences, overlongs, surrogates
    bad = [b"abc\xffdef", b"\x80\x80", b"\xe4\xbd", b"\xe4\xbdX\xa0", b"\xc0\xaf", b"\xed\xa0\x80z",
           b"\xf0\x9f\x98", b"ok \xf4\x90\x80\x80 no", "你好".encode() + b"\xe4" + " 世界".encode(),
           b"\xfe\xff" + specials[0].encode() + b"\xc3"]
    for i, b in enumerate(bad):
        t.append(("invalid%d" % i, b))
    return t


# ---------------------------------------------------------------------------------------
# tokenizers

def bl_trainer(vocab, specials):
    return trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials)


def build_glm(corpus):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, bl_trainer(3000, GLM_SPECIALS))
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False),
                    AddedToken("<tool_call>", special=False, normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="[gMASK] <sop> $A", pair="[gMASK] <sop> $A $B",
        special_tokens=[("[gMASK]", tok.token_to_id("[gMASK]")), ("<sop>", tok.token_to_id("<sop>"))])
    return tok, {"ignore_merges": True}


def build_qwen(corpus):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_pad|>"]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, bl_trainer(2500, specials))
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False),
                    AddedToken("café", special=False, normalized=True)])
    return tok, {}


def build_deepseek(corpus):
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(DS_RE_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DS_RE_CJK), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DS_RE_MAIN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, bl_trainer(2500, specials))
    bos = specials[0]
    tok.post_processor = processors.TemplateProcessing(single=bos + " $A", pair=bos + " $A $B",
                                                       special_tokens=[(bos, tok.token_to_id(bos))])
    return tok, {}


def build_cl100k(corpus):
    specials = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, bl_trainer(2500, specials))
    return tok, {"ignore_merges": True}


def add_byte_fallback(tok_json):
    """Give a trained sentencepiece-style BPE the 256 <0xNN> tokens and byte_fallback."""
    m = tok_json["model"]
    nxt = max(m["vocab"].values()) + 1
    for b in range(256):
        name = "<0x%02X>" % b
        if name not in m["vocab"]:
            m["vocab"][name] = nxt
            nxt += 1
    m["byte_fallback"] = True
    m["fuse_unk"] = True
    return tok_json


def build_llama(corpus):
    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tr = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False, special_tokens=specials,
                             limit_alphabet=120)
    tok.train_from_iterator(corpus, tr)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok, {"byte_fallback": True, "string_merges": True}


def build_meta(corpus):
    specials = ["<unk>", "<s>", "</s>", "<|eot|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)])
    tr = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False, special_tokens=specials,
                             limit_alphabet=150)
    tok.train_from_iterator(corpus, tr)
    return tok, {"byte_fallback": True}


def build_meta_always(corpus):
    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)])
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement="▁", prepend_scheme="always", split=False)])
    tr = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False, special_tokens=specials,
                             limit_alphabet=150)
    tok.train_from_iterator(corpus, tr)
    return tok, {"byte_fallback": True}


def build_misc(corpus):
    specials = ["<pad>", "<eos>", "[SEP]"]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"[\t]+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("--", behavior="removed"),
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[(\[{]"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"!+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[^#]+"), behavior="isolated", invert=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, bl_trainer(2000, specials))
    tok.add_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=False, normalized=False),
                    AddedToken("<nl>", special=False, lstrip=False, rstrip=True, normalized=False),
                    AddedToken("word", special=False, single_word=True, normalized=True),
                    AddedToken("Hello", special=False, normalized=True)])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", tok.token_to_id("<eos>"))])])
    return tok, {}


BUILDERS = {"glm": (build_glm, GLM_SPECIALS + ["<think>", "</think>"]),
            "qwen": (build_qwen, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "café"]),
            "cl100k": (build_cl100k, ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>"]),
            "deepseek": (build_deepseek, ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]),
            "llama": (build_llama, ["<s>", "</s>", "<unk>"]),
            "meta": (build_meta, ["<s>", "</s>", "<|eot|>"]),
            "meta_always": (build_meta_always, ["<s>", "</s>"]),
            "misc": (build_misc, ["<mask>", "<nl>", "word", "Hello", "[SEP]", "<eos>"])}


def write_model(name, tok, opts, d):
    os.makedirs(d, exist_ok=True)
    j = json.loads(tok.to_str())
    if opts.get("byte_fallback"):
        j = add_byte_fallback(j)
    if opts.get("ignore_merges"):
        j["model"]["ignore_merges"] = True
    if opts.get("string_merges"):
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    text = json.dumps(j, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    if name == "glm":
        cfg = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
               "chat_template": [{"name": "default", "template": "{{ messages }}"},
                                 {"name": "tool_use", "template": "{{ tools }}"}]}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|user|>"),
                                        tok.token_to_id("<|observation|>")]}, f)
    return Tokenizer.from_str(text)


# ---------------------------------------------------------------------------------------
# comparison

def run(nibble, args, data=None):
    p = subprocess.run([nibble] + args, input=data, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError("nibble %s failed (%d): %s" % (" ".join(args[:3]), p.returncode,
                                                          p.stderr.decode("utf-8", "replace")))
    return p.stdout


def parse_ids(line):
    return [int(x) for x in line.split(",")] if line else []


def run_batch_encode(nibble, d, texts, add_special, work):
    """One `nibble tokenize --batch` call for texts (bytes without NUL)."""
    path = os.path.join(work, "batch.bin")
    with open(path, "wb") as f:
        f.write(b"".join(t + b"\0" for t in texts))
    out = run(nibble, ["tokenize", "--model", d, "--batch", path] + ([] if add_special else ["--no-special"]))
    lines = out.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1, "batch encode: %d lines for %d texts" % (
        len(lines) - 1, len(texts))
    return [parse_ids(x) for x in lines[:-1]]


def run_batch_decode(nibble, d, id_lists, skip, stream, work):
    """One `nibble detokenize --batch` call; returns the texts (str)."""
    path = os.path.join(work, "ids.txt")
    with open(path, "w") as f:
        f.write("".join(",".join(map(str, ids)) + "\n" for ids in id_lists))
    out = run(nibble, ["detokenize", "--model", d, "--batch", path] + (["--skip-special"] if skip else []) +
              (["--stream"] if stream else []))
    res, i = [], 0
    while i < len(out):
        nl = out.index(b"\n", i)
        n = int(out[i:nl])
        res.append(out[nl + 1:nl + 1 + n].decode("utf-8"))
        i = nl + 1 + n
    assert len(res) == len(id_lists), "batch decode: %d texts for %d id lists" % (len(res), len(id_lists))
    return res


def compare_model(nibble, name, ref, specials, d, work):
    fails = 0
    checks = 0

    def check(ok, msg):
        nonlocal fails, checks
        checks += 1
        if not ok:
            fails += 1
            print("FAIL %s %s" % (name, msg), file=sys.stderr)

    texts = test_texts(specials)
    # encode: all texts in one process per setting (texts holding NUL go one by one through
    # --file), and the single-text forms --text / --file on a few of them
    for add_special in (True, False):
        want = [ref.encode(raw.decode("utf-8", "replace"), add_special_tokens=add_special).ids for _, raw in texts]
        batch = [i for i, (_, raw) in enumerate(texts) if b"\0" not in raw]
        got = dict(zip(batch, run_batch_encode(nibble, d, [texts[i][1] for i in batch], add_special, work)))
        for i, (tname, raw) in enumerate(texts):
            if i in got and not (tname in ("fixed3", "fixed11", "special0") or tname.startswith("invalid")):
                continue
            path = os.path.join(work, "in.txt")
            with open(path, "wb") as f:
                f.write(raw)
            args = ["tokenize", "--model", d, "--file", path]
            if tname in ("fixed3", "fixed11", "special0"):
                args = ["tokenize", "--model", d, "--text", raw.decode()]
            single = parse_ids(run(nibble, args + ([] if add_special else ["--no-special"])).decode().strip())
            if i in got:
                check(single == got[i], "%s: single-text encode differs from batch" % tname)
            got[i] = single
        for i, (tname, raw) in enumerate(texts):
            check(got[i] == want[i], "%s encode(add_special=%s) %r\n  want %s\n  got  %s" %
                  (tname, add_special, raw[:80], want[i][:40], got[i][:40]))
    # decode: the ids of every text, plus random id sequences (partial UTF-8, byte-fallback
    # runs, specials anywhere); plain and streamed, with and without special tokens
    rng = random.Random(zlib.crc32(name.encode()))
    n = ref.get_vocab_size(with_added_tokens=True)
    id_lists = [ref.encode(raw.decode("utf-8", "replace")).ids for _, raw in texts]
    id_lists += [[rng.randrange(n) for _ in range(rng.randint(1, 16))] for _ in range(300)]
    for skip in (False, True):
        want = [ref.decode(ids, skip_special_tokens=skip) for ids in id_lists]
        for stream in (False, True):
            got = run_batch_decode(nibble, d, id_lists, skip, stream, work)
            for ids, w, g in zip(id_lists, want, got):
                check(g == w, "decode(skip=%s, stream=%s) %s\n  want %r\n  got  %r" % (skip, stream, ids[:20], w[:120],
                                                                                     g[:120]))
    # the single-sequence form --ids, on a few
    for ids in id_lists[:3] + id_lists[-3:]:
        got = run(nibble, ["detokenize", "--model", d, "--ids", ",".join(map(str, ids))]).decode("utf-8")
        check(got == ref.decode(ids, skip_special_tokens=False), "detokenize --ids %s" % ids[:20])
    print("%-12s %5d checks, %d failed" % (name, checks, fails), file=sys.stderr)
    return checks, fails


def bench(nibble, d, ref, work):
    """Encode MB/s of nibble vs the reference on a ~8 MB text."""
    rng = random.Random(7)
    lines = []
    size = 0
    while size < 8_000_000:
        s = corpus_line(rng) + "\n"
        lines.append(s)
        size += len(s.encode())
    text = "".join(lines)
    path = os.path.join(work, "big.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    out = subprocess.run([nibble, "tokenize", "--model", d, "--file", path, "--time"], capture_output=True)
    t0 = time.perf_counter()
    want = ref.encode(text).ids
    t_ref = time.perf_counter() - t0
    got = [int(x) for x in out.stdout.decode().strip().split(",")]
    print(out.stderr.decode().strip(), file=sys.stderr)
    print("reference tokenizers (single call, its own threads): %.1f MB/s; ids identical: %s" %
          (size / t_ref / 1e6, got == want), file=sys.stderr)
    return got == want


def main():
    nibble = os.environ.get("NIBBLE_BIN", os.path.join(ROOT, "build", "nibble"))
    if not os.path.exists(nibble):
        print("test_vs_hf: %s not built" % nibble, file=sys.stderr)
        return 1
    keep = None
    if "--keep" in sys.argv:
        keep = sys.argv[sys.argv.index("--keep") + 1]
    only = os.environ.get("NB_TOK_ONLY")
    corpus = training_corpus()
    total = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = keep or tmp
        for name, (builder, specials) in BUILDERS.items():
            if only and name not in only.split(","):
                continue
            tok, opts = builder(corpus)
            d = os.path.join(base, name)
            ref = write_model(name, tok, opts, d)
            c, f = compare_model(nibble, name, ref, specials, d, tmp)
            total += c
            failed += f
            if name == "glm" and "--bench" in sys.argv and not bench(nibble, d, ref, tmp):
                failed += 1
    print("%d passed, %d failed" % (total - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
