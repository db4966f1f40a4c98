#!/usr/bin/env python3
"""Every NIBBLE_* environment variable the code reads is documented in docs/switches.md, and
every one documented there still exists in the code (stdlib only, label cpu unit).
A variable counts as read when its name appears as a string literal ("NIBBLE_...") in a source
file under src/ or apps/; the table rows of docs/switches.md start with | `NIBBLE_...` |.
Run from the repository root: python3 tests/docs/switches_documented.py"""
import os
import re
import sys

SRC_DIRS = ("src", "apps")
EXTS = (".c", ".h", ".cu", ".cuh")
IN_CODE = re.compile(r'"(NIBBLE_[A-Z0-9_]+)"')
IN_DOC = re.compile(r'^\| `(NIBBLE_[A-Z0-9_]+)` \|', re.M)
NOT_SWITCHES = {"NIBBLE_VERSION_STRING"}  # a build-time definition, not an environment variable


def code_names(root):
    names = {}
    for d in SRC_DIRS:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if not f.endswith(EXTS):
                    continue
                path = os.path.join(base, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for m in IN_CODE.finditer(fh.read()):
                        names.setdefault(m.group(1), os.path.relpath(path, root))
    for n in NOT_SWITCHES:
        names.pop(n, None)
    return names


def main():
    root = os.environ.get("NIBBLE_SRC", ".")
    doc = os.path.join(root, "docs", "switches.md")
    if not os.path.exists(doc):
        print(f"missing {doc}", file=sys.stderr)
        return 1
    with open(doc, encoding="utf-8") as fh:
        documented = set(IN_DOC.findall(fh.read()))
    code = code_names(root)
    if len(code) < 10:
        print(f"only {len(code)} NIBBLE_* names found under {SRC_DIRS}: run from the repository root",
              file=sys.stderr)
        return 1
    undocumented = sorted(set(code) - documented)
    stale = sorted(documented - set(code))
    for n in undocumented:
        print(f"undocumented: {n} (read in {code[n]}): add a row to docs/switches.md", file=sys.stderr)
    for n in stale:
        print(f"stale: {n} is in docs/switches.md but no source file reads it", file=sys.stderr)
    print(f"{len(code)} variables read, {len(documented)} documented, {len(undocumented)} undocumented, "
          f"{len(stale)} stale")
    return 1 if undocumented or stale else 0


if __name__ == "__main__":
    sys.exit(main())
