#!/usr/bin/env python3
"""The include rule of docs/ARCHITECTURE.md's module map: every #include "..." of our own code points
down the table below (or stays in its own row), never up. Reads every source file outside tests/;
fails naming each upward include, and each source folder that has no row (a new folder gets one).

    layering_test.py SOURCE_DIR
"""
import pathlib
import re
import sys
import tempfile

# Top to bottom. Folders in one row may include each other; the longest matching prefix wins.
ROWS = [
    ["cli/"],
    ["server/"],
    ["clients/", "planner/", "benchmarks/"],
    ["engine/"],
    ["engine/cpu/", "engine/cuda/"],
    ["engine/step/"],
    ["model/"],
    ["text/"],
    ["comm/", "kernels/"],
    ["common/", "tpserve/"],  # tpserve/: the code protoc generates from proto/
]
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh"}
NOT_CHECKED = ("tests/", "build", ".assets", "gpu-bundle", "node_modules", "deploy/", "docs/", "scripts/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def row_of(path):
    """(row index, prefix) of the longest prefix in ROWS that `path` starts with, or (None, None)."""
    best = (None, None)
    for index, prefixes in enumerate(ROWS):
        for prefix in prefixes:
            if path.startswith(prefix) and (best[1] is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    return best


def check(root):
    """(upward includes, folders without a row, files checked) of the tree at `root`."""
    upward, unplaced, checked = [], set(), 0
    for file in sorted(root.rglob("*")):
        if file.suffix not in SOURCE_SUFFIXES or not file.is_file():
            continue
        relative = file.relative_to(root).as_posix()
        if relative.startswith(NOT_CHECKED):
            continue
        row, prefix = row_of(relative)
        if row is None:
            unplaced.add(relative.split("/")[0] + "/")
            continue
        checked += 1
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target_row, target_prefix = row_of(match.group(1))
            if target_row is not None and target_row < row:
                upward.append(f"{relative}:{number}: includes {match.group(1)} ({prefix} may not include "
                              f"{target_prefix}: it is higher in the table)")
    return upward, unplaced, checked


def self_test():
    """The checker itself: a tree with one upward include, one sideways, one down, one new folder."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = pathlib.Path(scratch)
        files = {
            "model/config.h": '#include "engine/engine.h"\n#include "text/tokenizer/tokenizer.h"\n',
            "engine/cuda/decoder.h": '#include "engine/cpu/decoder.h"\n#include "engine/step/plan.h"\n',
            "newfolder/thing.cc": '#include "common/status.h"\n',
            "tests/model/config_test.cc": '#include "cli/commands.h"\n',
        }
        for name, text in files.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        upward, unplaced, checked = check(tree)
    expected = (["model/config.h:1"], {"newfolder/"}, 2)
    got = ([line.split(": ")[0] for line in upward], unplaced, checked)
    if got != expected:
        print(f"layering: the self-test expected {expected}, got {got}")
        return False
    return True


def main():
    if not self_test():
        return 1
    upward, unplaced, checked = check(pathlib.Path(sys.argv[1]).resolve())
    root = sys.argv[1]
    for line in upward:
        print("layering: " + line)
    for folder in sorted(unplaced):
        print(f"layering: {folder} holds sources but has no row in tests/layout/layering_test.py's table")
    if checked < 100:
        print(f"layering: only {checked} source files found under {root}; is that the source tree?")
        return 1
    if upward or unplaced:
        return 1
    print(f"layering: all passed ({checked} files, every include points down)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
