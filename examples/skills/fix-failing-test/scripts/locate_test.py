#!/usr/bin/env python3
"""List the test files that cover a source file: same folder and stem, or a __tests__ folder.

Prints JSON: {"source": ..., "tests": [...]} (paths relative to the working directory).
"""
import json
import os
import sys

SUFFIXES = (".test.ts", ".test.tsx", ".test.js", ".spec.ts", ".spec.js")


def candidates(source):
    folder, name = os.path.split(source)
    stem = name.rsplit(".", 1)[0]
    for suffix in SUFFIXES:
        yield os.path.join(folder, stem + suffix)
        yield os.path.join(folder, "__tests__", stem + suffix)


def main():
    if len(sys.argv) != 2:
        print("usage: locate_test.py SOURCE", file=sys.stderr)
        return 2
    source = sys.argv[1]
    if not os.path.isfile(source):
        print(f"no such source file: {source}", file=sys.stderr)
        return 1
    tests = [c for c in candidates(source) if os.path.isfile(c)]
    print(json.dumps({"source": source, "tests": tests}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
