#!/usr/bin/env python3
"""check-layers.py - check every #include under src/ against the layer order.

The layers, bottom to top, are the numbered list between the markers
"<!-- layers: bottom to top -->" and "<!-- end layers -->" in src/README.md.
A file in folder L (src/L/..., subfolders included) may include:
  - a header of its own folder, by layer path ("L/x.h") or, from the same
    directory, by bare name ("x.h");
  - the interface header "M/M.h" of a layer M below L (never another header
    of M: those are private to M);
  - a public header of include/, and system headers (<...>, not checked).
Anything else -- an upper layer's header, a lower layer's private header, a
path that does not resolve -- is reported as FILE:LINE: the include and why,
and the script exits 1.  Source files directly in src/ (outside any layer)
are reported too.

Usage: tools/check-layers.py [SOURCE_ROOT]   (default: the repository root)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = ('.c', '.h', '.cc')


def read_layers(root):
    path = os.path.join(root, 'src', 'README.md')
    try:
        text = open(path, encoding='utf-8').read()
    except OSError as e:
        sys.exit(f'check-layers: cannot read {path}: {e}')
    m = re.search(r'<!-- layers: bottom to top -->(.*?)<!-- end layers -->', text, re.S)
    if not m:
        sys.exit(f'check-layers: {path}: no layer list between the markers')
    layers = re.findall(r'^\s*\d+\.\s+`([a-z0-9_]+)/`', m.group(1), re.M)
    if not layers:
        sys.exit(f'check-layers: {path}: the layer list is empty')
    for name in layers:
        if not os.path.isdir(os.path.join(root, 'src', name)):
            sys.exit(f'check-layers: {path}: layer {name}/ has no folder src/{name}')
    return layers


def check_file(root, rel, layer, rank, problems):
    here = os.path.dirname(os.path.join(root, rel))
    with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            where = f'{rel}:{lineno}: #include "{inc}"'
            first = inc.split('/', 1)[0]
            if '/' in inc and first in rank:
                if not os.path.isfile(os.path.join(root, 'src', inc)):
                    problems.append(f'{where}: no such file src/{inc}')
                elif rank[first] > rank[layer]:
                    problems.append(f'{where}: layer {layer}/ (#{rank[layer] + 1}) includes '
                                    f'layer {first}/ (#{rank[first] + 1}), which is above it')
                elif first != layer and inc != f'{first}/{first}.h':
                    problems.append(f'{where}: private header of layer {first}/ '
                                    f'(include its interface {first}/{first}.h)')
            elif os.path.isfile(os.path.join(here, inc)) and '/' not in inc:
                pass  # a header next to the file: the same folder
            elif os.path.isfile(os.path.join(root, 'include', inc)):
                pass  # public API
            else:
                problems.append(f'{where}: not a layer header, a header of the same '
                                f'folder, or a public header')


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    layers = read_layers(root)
    rank = {name: i for i, name in enumerate(layers)}
    problems = []
    nfiles = 0
    src = os.path.join(root, 'src')
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            parts = rel.split(os.sep)
            if len(parts) < 3:
                problems.append(f'{rel}: source file outside every layer folder')
                continue
            layer = parts[1]
            if layer not in rank:
                problems.append(f'{rel}: folder src/{layer}/ is not in the layer list '
                                f'of src/README.md')
                continue
            nfiles += 1
            check_file(root, rel, layer, rank, problems)
    for p in problems:
        print(p)
    if problems:
        print(f'check-layers: {len(problems)} problem(s) in {nfiles} files', file=sys.stderr)
        return 1
    print(f'check-layers: OK: {nfiles} files in {len(layers)} layers ({" < ".join(layers)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
