#!/usr/bin/env python3
"""Checks that every library of src/ includes only headers of libraries it links (issue 54).

CMake's graph (BUILD/library_graph.txt, cmake/LinkClosure.cmake) says what each library links;
the sources say what each includes. A library's files are its folder's headers and the sources
its add_library() names (src/FOLDER/CMakeLists.txt); an `#include "OTHER/file.h"` of a folder
OTHER of src/ is allowed when the library is OTHER's or links OTHER's library, directly or not.
An include the link does not cover builds today only because something else links it: the day
that something goes, the build breaks far from the cause.

    scripts/include_links.py build/library_graph.txt src
        # exit 1 with one line per include the links do not cover
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"', re.M)
ADD_LIBRARY = re.compile(r"add_library\(\s*(headroom_\w+)([^)]*)\)", re.S)


def read_graph(path):
    graph = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            lib, sep, deps = line.strip().partition(":")
            if sep:
                graph[lib.strip()] = set(deps.split())
    return graph


def closure(graph, lib):
    seen, todo = set(), [lib]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def same_folder_headers(src, folder, files):
    """The headers of src/folder that `files` include, directly or through one another."""
    seen, todo = set(), list(files)
    while todo:
        path = os.path.join(src, folder, todo.pop())
        if not os.path.exists(path):
            continue
        for m in re.finditer(r'^\s*#\s*include\s+"' + re.escape(folder) + r'/([^"/]+\.h)"',
                             open(path, encoding="utf-8").read(), re.M):
            if m.group(1) not in seen:
                seen.add(m.group(1))
                todo.append(m.group(1))
    return seen


def library_files(src, folder):
    """{library: [files]} of src/folder: the sources add_library() names, and the folder's
    headers but those only an executable's sources there include (cli/ holds two)."""
    out = {}
    cmake = os.path.join(src, folder, "CMakeLists.txt")
    if not os.path.exists(cmake):
        return out
    text = open(cmake, encoding="utf-8").read()
    here = os.listdir(os.path.join(src, folder))
    headers = {f for f in here if f.endswith(".h")}
    libraries = {m.group(1): [w for w in m.group(2).split() if w.endswith(".cc") and "$" not in w]
                 for m in ADD_LIBRARY.finditer(text)}
    in_libraries = {f for sources in libraries.values() for f in sources}
    others = [f for f in here if f.endswith(".cc") and f not in in_libraries]
    theirs = same_folder_headers(src, folder, others)
    ours = same_folder_headers(src, folder, sorted(in_libraries))
    for lib, sources in libraries.items():
        mine = sorted((headers - theirs) | (headers & ours))
        out[lib] = [os.path.join(folder, f) for f in mine + sources]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph", help="BUILD/library_graph.txt")
    p.add_argument("src", help="the src/ folder")
    args = p.parse_args()
    graph = read_graph(args.graph)
    folders = {f for f in os.listdir(args.src) if os.path.isdir(os.path.join(args.src, f))}
    failures, checked = [], 0
    for folder in sorted(folders):
        for lib, files in sorted(library_files(args.src, folder).items()):
            if lib not in graph:
                continue  # not configured in this build (e.g. DiLoCo off)
            linked = closure(graph, lib) | {lib}
            for rel in files:
                path = os.path.join(args.src, rel)
                if not os.path.exists(path):
                    continue
                checked += 1
                for other in sorted(set(INCLUDE.findall(open(path, encoding="utf-8").read()))):
                    want = "headroom_" + other
                    if other in folders and want in graph and want not in linked:
                        failures.append(f"src/{rel}: includes a header of {other}/, but {lib} "
                                        f"does not link {want}")
    for line in failures:
        print(line)
    print(f"include_links: {checked} files of {len(graph)} libraries, "
          f"{len(failures)} includes their links do not cover", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
