#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-citations.py - every citation in Sheaf's code and docs names a section that exists.

Code comments cite documents of this repository by short forms; this script resolves each one
and fails (exit 1, one line per bad citation: file:line: what) when a citation does not resolve:

  K§2.3, K§2.6 step 5, K§1.1-1.2    a section (and numbered step) of docs/kernel.md
  D1 ... D7, D1-D7                  a "### Dn" section of docs/design.md
  design §4                         a paragraph "§4" of the theory statement in docs/design.md
  seed 001                          a "### Seed 001" section of docs/design.md
  docs/rcu.md, docs/kernel.md §2    an existing file (and a numbered section of it)
  peers.md, src/README.md           any other *.md named must be a file of the repository
  [text](../bench/x.md)             a relative link in a markdown file must point to a file

The words DESIGN and STYLE used as citations are errors: they named documents that are not in
the repository.

Usage: tools/check-citations.py [ROOT [FILE...]]
  ROOT defaults to the repository holding this script; with FILEs, only those are checked
  (against ROOT's docs), which is how tests/lint/test_citations.sh shows that bad citations
  are reported.
"""

import os
import re
import sys

# Where code and prose that cite live; bench/results holds generated reports.
SCAN_DIRS = ["src", "include", "tests", "bench", "tools", "cmake", "docs", ".ci", "scripts"]
SCAN_FILES = ["CMakeLists.txt", "README.md"]
SKIP_DIRS = {"results", "build", ".git", "__pycache__"}
TEXT_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".S", ".py", ".sh", ".txt", ".md", ".in", ".cmake",
                 ".env", ".supp", ".json", ".map", ".lds")

NUM = r"\d+(?:\.\d+)?"
RE_K = re.compile(r"K§(" + NUM + r")?(?:\s*[-–]\s*(?:K§)?(" + NUM + r"))?(?:\s+steps?\s+(\d+))?")
RE_D = re.compile(r"(?<![\w§])D(\d+)(?:\s*[-–]\s*D(\d+))?(?![\w.])")
RE_DESIGN_SEC = re.compile(r"\bdesign\s+§(\d+)")
RE_SEED = re.compile(r"\bseeds?\s+(\d{3})")
RE_DOC = re.compile(r"\bdocs/([\w.-]+\.md)(?:\s+§(" + NUM + r"))?")
RE_MD = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")
RE_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
RE_BANNED = re.compile(r"\b(DESIGN|STYLE)\b(?:\s+(?:[RD]?\d+|§\s*\d+(?:\.\d+)?))?")


def headings(path):
    """Numbered section ids of a markdown file: '## 2. Title' -> '2', '### 2.3 Title' -> '2.3'."""
    ids = {}
    cur = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#{1,4}\s+(\d+(?:\.\d+)*)\.?\s", line)
            if m:
                cur = m.group(1)
                ids[cur] = set()
                continue
            if line.startswith("#"):
                cur = None
                continue
            m = re.match(r"\s{0,6}(\d+)\.\s", line)
            if cur is not None and m:
                ids[cur].add(int(m.group(1)))
    return ids


def design_index(path):
    """D sections, seed sections and theory-statement paragraphs of docs/design.md."""
    ds, seeds, theory = set(), set(), set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"###\s+D(\d+)\b", line)
            if m:
                ds.add(int(m.group(1)))
            m = re.match(r"###\s+Seed\s+(\d{3})\b", line)
            if m:
                seeds.add(m.group(1))
            m = re.match(r"§(\d+)\s", line)
            if m:
                theory.add(int(m.group(1)))
    return ds, seeds, theory


def files_to_scan(root):
    for name in SCAN_FILES:
        p = os.path.join(root, name)
        if os.path.isfile(p):
            yield p
    for d in SCAN_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(x for x in dirnames if x not in SKIP_DIRS)
            for fn in sorted(filenames):
                if fn.endswith(TEXT_SUFFIXES) or fn == "CMakeLists.txt":
                    yield os.path.join(dirpath, fn)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, ".."))
    only = [os.path.abspath(f) for f in sys.argv[2:]]
    kernel_md = os.path.join(root, "docs", "kernel.md")
    design_md = os.path.join(root, "docs", "design.md")
    errors = []
    for p in (kernel_md, design_md):
        if not os.path.isfile(p):
            errors.append(f"{os.path.relpath(p, root)}: missing")
    if errors:
        print("\n".join(errors))
        return 1
    ksec = headings(kernel_md)
    dsec, seeds, theory = design_index(design_md)
    doc_cache = {}
    md_names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [x for x in dirnames if x not in (".git", "build")]
        md_names.update(fn for fn in filenames if fn.endswith(".md"))
    self_path = os.path.abspath(__file__)
    # The test of this script writes bad citations on purpose.
    self_test = os.path.join(root, "tests", "lint", "test_citations.sh")
    count = 0

    for path in only or files_to_scan(root):
        if os.path.abspath(path) in (self_path, self_test):
            continue
        rel = os.path.relpath(path, root)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(lines, 1):
            where = f"{rel}:{no}"
            for m in RE_K.finditer(line):
                count += 1
                a, b, step = m.group(1), m.group(2), m.group(3)
                if a is None:
                    if line[m.end():m.end() + 1] == "n":
                        continue  # "K§n": the form itself, in prose about citations
                    errors.append(f"{where}: 'K§' without a section number")
                    continue
                for s in (a, b):
                    if s is not None and s not in ksec:
                        errors.append(f"{where}: K§{s} is not a section of docs/kernel.md")
                if step and b is None and a in ksec and int(step) not in ksec[a]:
                    errors.append(f"{where}: K§{a} has no step {step} in docs/kernel.md")
            for m in RE_D.finditer(line):
                lo = int(m.group(1))
                hi = int(m.group(2)) if m.group(2) else lo
                # Only D0..D9-style departures are citations; larger numbers are not ours.
                if lo > 9:
                    continue
                count += 1
                for n in range(lo, hi + 1):
                    if n not in dsec:
                        errors.append(f"{where}: D{n} is not a section of docs/design.md")
            for m in RE_DESIGN_SEC.finditer(line):
                count += 1
                if int(m.group(1)) not in theory:
                    errors.append(f"{where}: design §{m.group(1)} is not in the theory "
                                  "statement of docs/design.md")
            for m in RE_SEED.finditer(line):
                count += 1
                if m.group(1) not in seeds:
                    errors.append(f"{where}: seed {m.group(1)} is not described in docs/design.md")
            for m in RE_DOC.finditer(line):
                count += 1
                doc = os.path.join(root, "docs", m.group(1))
                if not os.path.isfile(doc):
                    errors.append(f"{where}: docs/{m.group(1)} does not exist")
                    continue
                if m.group(2):
                    if doc not in doc_cache:
                        doc_cache[doc] = headings(doc)
                    if m.group(2) not in doc_cache[doc]:
                        errors.append(f"{where}: docs/{m.group(1)} has no section {m.group(2)}")
            for m in RE_MD.finditer(line):
                name = m.group(1)
                if name.startswith("docs/") or line[:m.start()].endswith("docs/"):
                    continue  # checked above
                count += 1
                if os.path.basename(name) not in md_names:
                    errors.append(f"{where}: {name} is not a document of the repository")
            if path.endswith(".md"):
                for m in RE_LINK.finditer(line):
                    target = m.group(1)
                    if re.match(r"[a-z]+:", target):
                        continue  # a web address
                    count += 1
                    if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                        errors.append(f"{where}: link target {target} does not exist")
            for m in RE_BANNED.finditer(line):
                errors.append(f"{where}: '{m.group(0)}' cites a document that is not in the "
                              "repository (use docs/...)")

    for e in errors:
        print(e)
    if errors:
        print(f"check-citations: {len(errors)} unresolved citation(s)")
        return 1
    print(f"check-citations: {count} citations resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
