#!/usr/bin/python3
"""Runs every command block the README marks runnable, as a reader would, and fails on the first
that does not exit 0.

A runnable block is an indented code block right after the line

    <!-- runnable -->

(or `<!-- runnable: SETUP -->`, SETUP being shell commands that make inputs the block names but
does not make itself). The blocks run in the README's order in one temporary directory that
holds links to the checkout's shipped files (policies/, scenarios/, examples/, clients/,
deploy/), each with `bash -e -o pipefail`, the build's `bin/` first on PATH, in its own process
group (killed when the block ends, pass or fail: a daemon started with `&` goes with it) and
under a time limit.

Usage: readme_commands_test.py SOURCE_DIR BUILD_DIR [README]
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^<!-- runnable(?::\s*(.*?))?\s*-->\s*$")
SHIPPED = ("policies", "scenarios", "examples", "clients", "deploy")
LIMIT_S = 300


def blocks(path):
    """[(line number of the marker, setup, block text)] in the file's order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        at = i + 1
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        body = []
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            body.append(lines[i][4:])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        if not body:
            sys.exit("%s:%d: a runnable marker with no indented block after it" % (path, at))
        found.append((at, m.group(1) or "", "\n".join(body)))
    return found


def run(block, cwd, env):
    """(exit status, seconds, output); the block's process group is killed when it ends (its
    output goes to a file: a daemon left running would hold a pipe open)."""
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        p = subprocess.Popen(["/bin/bash", "-e", "-o", "pipefail", "-c", block], cwd=cwd,
                             env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            status = p.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            status = "nothing: killed after %d s" % LIMIT_S
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        log.seek(0)
        return status, time.monotonic() - start, log.read()


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1])
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    readme = sys.argv[3] if len(sys.argv) == 4 else os.path.join(source, "README.md")
    found = blocks(readme)
    if not found:
        sys.exit("%s: no runnable blocks (<!-- runnable --> before an indented block)" % readme)
    work = tempfile.mkdtemp(prefix="headroom_readme_")
    for name in SHIPPED:
        os.symlink(os.path.join(source, name), os.path.join(work, name))
    env = dict(os.environ)
    env["PATH"] = os.path.join(build, "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.pop("HEADROOM_TOKEN", None)
    failed = 0
    print("%-8s %8s  %s" % ("line", "seconds", "first command"))
    for line, setup, block in found:
        text = (setup + "\n" + block) if setup else block
        status, seconds, out = run(text, work, env)
        first = block.strip().splitlines()[0]
        print("%-8d %8.1f  %s" % (line, seconds, first[:100]), flush=True)
        if status != 0:
            failed += 1
            print("%s:%d: the runnable block exited %s:\n%s\n--- its output (last 40 lines):\n%s" %
                  (readme, line, status, text, "\n".join(out.splitlines()[-40:])))
    print("%d runnable blocks, %d failed" % (len(found), failed))
    if failed:
        print("left for inspection: %s" % work)
        return 1
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
