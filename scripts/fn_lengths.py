#!/usr/bin/env python3
"""Function lengths in the non-test Rust code of awf/ and mcpserver/ (#41's yardstick).

Prints every function over --over lines (default 100), longest first, with its file and
line, then how many are over 100 and over 150. A function's length runs from its `fn`
line to its closing brace; test code (`#[cfg(test)]` items and `tests/`) is left out.

    python3 scripts/fn_lengths.py [--over N] [DIR ...]
"""

import argparse
import pathlib
import re
import signal
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)")


def code_only(text: str) -> list:
    """The file's lines with comments, strings and char literals blanked (enough to count
    braces): strings may span lines, raw strings may hold quotes."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        raw = re.match(r'b?r(#*)"', text[i:i + 260]) if c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if raw:
            end = '"' + raw.group(1)
            j = text.find(end, i + raw.end())
            j = n if j < 0 else j + len(end)
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        if c == "'" and i + 2 < n and (text[i + 2] == "'" or text[i + 1] == "\\"):
            j = text.find("'", i + 2)
            i = j + 1 if j > 0 else n
            continue
        out.append(c)
        i += 1
    return "".join(out).split("\n")


def functions(path: pathlib.Path):
    text = path.read_text()
    lines = text.split("\n")
    clean = code_only(text)
    skip_until = -1
    i = 0
    while i < len(lines):
        if i <= skip_until:
            i += 1
            continue
        if lines[i].strip() == "#[cfg(test)]":
            # Skip the item that follows: to its matching brace.
            depth, j, opened = 0, i + 1, False
            while j < len(lines):
                depth += clean[j].count("{") - clean[j].count("}")
                opened = opened or "{" in clean[j]
                if opened and depth <= 0:
                    break
                if not opened and clean[j].rstrip().endswith(";"):
                    break
                j += 1
            skip_until = j
            i = j + 1
            continue
        m = FN.match(lines[i])
        if m:
            depth, j, opened = 0, i, False
            while j < len(lines):
                depth += clean[j].count("{") - clean[j].count("}")
                opened = opened or "{" in clean[j]
                if opened and depth <= 0:
                    break
                if not opened and clean[j].rstrip().endswith(";"):
                    break  # a declaration without a body (a trait's)
                j += 1
            if opened:
                yield m.group(1), i + 1, j - i + 1
        i += 1


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--over", type=int, default=100)
    ap.add_argument("dirs", nargs="*", default=["awf/src", "mcpserver/src"])
    args = ap.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    found = []
    for d in args.dirs:
        for p in sorted((root / d).rglob("*.rs")):
            if p.name == "tests.rs" or "tests" in p.relative_to(root / d).parts[:-1]:
                continue  # test modules kept in files of their own
            for name, line, length in functions(p):
                found.append((length, f"{p.relative_to(root)}:{line}", name))
    found.sort(reverse=True)
    for length, where, name in found:
        if length > args.over:
            print(f"{length:5d}  {name:32s} {where}")
    over100 = sum(1 for f in found if f[0] > 100)
    over150 = sum(1 for f in found if f[0] > 150)
    print(f"{len(found)} functions; {over150} over 150 lines, {over100} over 100 (goal: 0 and at most 15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
