#!/usr/bin/env python3
"""check-size.py - no source file over 800 lines, no function over 60 lines.

Checks the C sources of the library (src/, every layer folder and preload/):
  - a file may have at most MAX_FILE_LINES lines;
  - a function definition, from the first line of its signature to its closing
    brace, at most MAX_FUNC_LINES lines.
Exempt: the restartable sequences of the per-CPU layer (a function of
src/percpu/rseq.* whose body is an asm statement: one sequence must stay in one
piece for the kernel's abort range).

Functions are found the way the tree is formatted (.clang-format, Linux style): a
definition's body opens with "{" alone at column 0 and closes with "}" at column 0.

Usage: tools/check-size.py [SOURCE_ROOT]   exits 1 and lists every violation.
"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 60
SOURCE_EXT = ('.c', '.h')
NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*\(')


def functions(lines):
    """Yield (name, first_line, last_line, body_text), 1-based lines."""
    i = 0
    n = len(lines)
    while i < n:
        if lines[i].rstrip('\n') == '{':
            # The signature: the lines above, back to a blank line, a line ending a
            # declaration or a comment, or a preprocessor line.
            start = i
            while start > 0:
                prev = lines[start - 1].rstrip('\n')
                if (not prev.strip() or prev.startswith('#') or prev.endswith(';') or
                        prev.endswith('*/') or prev.startswith('}') or prev.endswith('{')):
                    break
                start -= 1
            sig = ' '.join(l.strip() for l in lines[start:i])
            m = NAME.search(sig)
            j = i + 1
            while j < n and not lines[j].startswith('}'):
                j += 1
            if m and j < n:
                yield m.group(1), start + 1, j + 1, ''.join(lines[i:j + 1])
            i = j + 1
        else:
            i += 1


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    problems = []
    nfiles = nfuncs = 0
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, 'src')):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(SOURCE_EXT):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = f.readlines()
            nfiles += 1
            if len(lines) > MAX_FILE_LINES:
                problems.append(f'{rel}: {len(lines)} lines (at most {MAX_FILE_LINES})')
            rseq = rel.replace(os.sep, '/').startswith('src/percpu/rseq.')
            for name, first, last, body in functions(lines):
                nfuncs += 1
                length = last - first + 1
                if length <= MAX_FUNC_LINES:
                    continue
                if rseq and re.search(r'\basm\b', body):
                    continue
                problems.append(f'{rel}:{first}: {name}() is {length} lines (at most {MAX_FUNC_LINES})')
    for p in problems:
        print(p)
    if problems:
        print(f'check-size: {len(problems)} problem(s) in {nfiles} files', file=sys.stderr)
        return 1
    print(f'check-size: OK: {nfiles} files (at most {MAX_FILE_LINES} lines), {nfuncs} functions '
          f'(at most {MAX_FUNC_LINES} lines)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
