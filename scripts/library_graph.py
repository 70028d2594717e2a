#!/usr/bin/env python3
"""Prints headroom's library graph as CMake has it: each library of src/ and what it links of
the others (BUILD/library_graph.txt, written at configure time by cmake/LinkClosure.cmake).

    scripts/library_graph.py build/library_graph.txt            # the graph, one library a line
    scripts/library_graph.py build/library_graph.txt --dot      # Graphviz
    scripts/library_graph.py build/library_graph.txt --check src/README.md
        # exit 1 when the block between <!-- library-graph --> and <!-- /library-graph --> in
        # src/README.md differs from the graph (the differing lines printed)
"""
import argparse
import re
import sys


def read_graph(path):
    graph = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            lib, _, deps = line.partition(":")
            graph[lib.strip()] = sorted(deps.split())
    return graph


def short(name):
    return name[len("headroom_"):] if name.startswith("headroom_") else name


def as_text(graph):
    width = max(len(short(lib)) for lib in graph)
    return "\n".join(
        f"{short(lib):<{width}} -> {' '.join(short(d) for d in deps) or '(nothing of ours)'}"
        for lib, deps in sorted(graph.items(), key=lambda kv: short(kv[0]))
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph", help="BUILD/library_graph.txt")
    parser.add_argument("--dot", action="store_true", help="print Graphviz")
    parser.add_argument("--check", metavar="README", help="compare with README's block")
    parser.add_argument("--not-built", default="", metavar="LIB,LIB",
                        help="libraries this build leaves out (HEADROOM_WITH_DILOCO=OFF): "
                             "README's lines for them are not compared")
    args = parser.parse_args()
    graph = read_graph(args.graph)
    text = as_text(graph)
    if args.dot:
        print("digraph headroom {")
        for lib, deps in sorted(graph.items()):
            for d in deps:
                print(f'  "{short(lib)}" -> "{short(d)}";')
        print("}")
        return 0
    if not args.check:
        print(text)
        return 0
    readme = open(args.check, encoding="utf-8").read()
    m = re.search(r"<!-- library-graph -->\n```\n(.*?)```\n<!-- /library-graph -->", readme, re.S)
    if not m:
        print(f"{args.check}: no ```-block between <!-- library-graph --> and "
              "<!-- /library-graph -->", file=sys.stderr)
        return 1
    not_built = {short(lib) for lib in args.not_built.split(",") if lib}
    written = "\n".join(line for line in m.group(1).rstrip("\n").splitlines()
                        if line.split(" ", 1)[0] not in not_built)
    if written == text:
        print(f"{args.check}: the library graph matches CMake's ({len(graph)} libraries)")
        return 0
    have, want = set(written.splitlines()), set(text.splitlines())
    for line in sorted(want - have):
        print(f"CMake has, {args.check} lacks: {line}", file=sys.stderr)
    for line in sorted(have - want):
        print(f"{args.check} has, CMake lacks: {line}", file=sys.stderr)
    print(f"update it with: scripts/library_graph.py {args.graph}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
