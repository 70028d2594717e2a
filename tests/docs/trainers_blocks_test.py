#!/usr/bin/python3
"""Runs every code block of docs/TRAINERS.md (issue 52: "every code block in TRAINERS.md runs in
a test"); fails when any does not exit 0, naming each such block's line in the doc.

Which blocks run:
- every ```python block, each in its own `python3` process, with PYTHONPATH=clients/python and
  the working directory a temporary one;
- a block in another language (```sh) only when the line before its fence (blank lines
  between allowed) is `<!-- runnable -->`, as the README's runnable blocks
  (tests/docs/readme_commands_test.py): run with `bash -e -o pipefail`, the headroom binary's
  folder first on PATH, in its own process group, killed when it ends;
- a block after `<!-- not run: REASON -->` is skipped (the reason is printed). A non-python
  block with neither marker fails the test: every block is either run or says why not.

The agent: before the first block, a real `headroom agent --source twin --scenario a100-7b-tp1
--controller pid --listen 127.0.0.1:0 --speed 20` starts (its log in a file; its port read
from the line `listening on 127.0.0.1:PORT`), and every block has `127.0.0.1:10470` (the
agent's default address, which the doc uses) replaced by that address. A python block that
names that address must also reach the agent: the requests it served (`/v1/status`
`connections.requests`, less the test's own reading) have to grow while the block runs, or the
block ran on the client's fallback and the test fails. (Not the trainer reports counter: the
twin's own reports count there too.) The agent is stopped by its PID at the end, pass or fail.
HEADROOM_TOKEN is removed from the environment of both.

The stand-ins: the blocks under the heading `## 3.` (TRL, verl, OpenRLHF) run against the
stand-ins the integration tests use (tests/clients/standins: the frameworks' call sites with
the same names, Ray replaced by threads, vLLM by a simulated engine). Their process gets
tests/clients on PYTHONPATH too, and this prelude before the block:

    import standins
    standins.install(list(standins.FILES))   # trl, verl, openrlhf, vllm, ray, torch, ...

(the stand-ins registered under the real module names, as integrations_*_test.py do). The
block itself is compiled under the doc's path with its own line numbers, so a traceback
points at docs/TRAINERS.md:LINE.

Fails, too, when the doc has no python block (extraction broke) or no block under `## 3.`.
Exit 0 on success, 1 on a failure.

Usage: trainers_blocks_test.py HEADROOM_BINARY SOURCE_DIR [DOC]
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
RUNNABLE = re.compile(r"^<!-- runnable -->\s*$")
NOT_RUN = re.compile(r"^<!-- not run:\s*(.+?)\s*-->\s*$")
STANDIN_SECTION = "## 3."
DOC_ADDRESS = "127.0.0.1:10470"
AGENT_START_S = 10.0
BLOCK_LIMIT_S = 120
PRELUDE = ("import standins\n"
           "standins.install(list(standins.FILES))\n")
# The runner: the prelude (section 3), then the block compiled under the doc's name, padded so
# that its line numbers are the doc's.
RUNNER = """import sys
{prelude}with open({block!r}, encoding="utf-8") as _f:
    _source = _f.read()
exec(compile(_source, {doc!r}, "exec"), {{"__name__": "__main__", "__builtins__": __builtins__}})
"""


class Block:
    def __init__(self, line, lang, text, marker, section):
        self.line = line          # the opening fence's line number (1-based)
        self.lang = lang          # the fence's info string ("" when none)
        self.text = text          # the block's lines, the fence's indentation removed
        self.marker = marker      # ("runnable", None), ("not run", REASON) or (None, None)
        self.section = section    # the last "## " heading above it

    def first(self):
        for s in self.text.splitlines():
            if s.strip():
                return s.strip()
        return ""


def blocks(path):
    """Every fenced block of the file, in order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, section, i = [], "", 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = lines[i]
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, lang = i + 1, m.group(1), m.group(2)
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = (None, None)
        if j >= 0 and RUNNABLE.match(lines[j]):
            marker = ("runnable", None)
        elif j >= 0 and NOT_RUN.match(lines[j]):
            marker = ("not run", NOT_RUN.match(lines[j]).group(1))
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            s = lines[i]
            body.append(s[len(indent):] if s.startswith(indent) else s.lstrip())
            i += 1
        if i == len(lines):
            sys.exit("%s:%d: a code block that is never closed" % (path, start))
        found.append(Block(start, lang, "\n".join(body), marker, section))
        i += 1
    return found


def start_agent(headroom, work):
    """(process, "127.0.0.1:PORT") of a twin agent on a free port; its log in work/agent.log."""
    log_path = os.path.join(work, "agent.log")
    env = dict(os.environ)
    env.pop("HEADROOM_TOKEN", None)
    with open(log_path, "w") as log:
        p = subprocess.Popen([headroom, "agent", "--source", "twin", "--scenario", "a100-7b-tp1",
                              "--controller", "pid", "--listen", "127.0.0.1:0", "--speed", "20"],
                             stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env)
    deadline = time.monotonic() + AGENT_START_S
    while time.monotonic() < deadline:
        with open(log_path) as f:
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", f.read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    stop(p)
    with open(log_path) as f:
        sys.exit("the agent did not start:\n" + f.read())


def requests_served(address):
    """The agent's connections.requests (this reading included), or None when unreadable."""
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open("http://%s/v1/status" % address, timeout=5) as r:
            return int(json.load(r)["connections"]["requests"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run(argv, cwd, env, own_group):
    """(exit status, seconds, output)."""
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=own_group)
        try:
            status = p.wait(timeout=BLOCK_LIMIT_S)
        except subprocess.TimeoutExpired:
            status = "nothing: killed after %d s" % BLOCK_LIMIT_S
            p.kill()
        if own_group:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()
        log.seek(0)
        return status, time.monotonic() - start, log.read()


def python_block(block, n, doc, source, work, address):
    """argv and env that run a python block (module doc)."""
    text = block.text.replace(DOC_ADDRESS, address)
    padded = "\n" * block.line + text + "\n"  # the block's first line is the fence's + 1
    block_path = os.path.join(work, "block_%03d.py" % n)
    with open(block_path, "w", encoding="utf-8") as f:
        f.write(padded)
    standins = block.section.startswith(STANDIN_SECTION)
    runner_path = os.path.join(work, "run_%03d.py" % n)
    with open(runner_path, "w", encoding="utf-8") as f:
        f.write(RUNNER.format(prelude=PRELUDE if standins else "", block=block_path, doc=doc))
    paths = [os.path.join(source, "clients", "python")]
    if standins:
        paths.append(os.path.join(source, "tests", "clients"))
    env = dict(os.environ)
    env.pop("HEADROOM_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return ["/usr/bin/python3", runner_path], env


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1])
    headroom, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    doc = os.path.abspath(sys.argv[3]) if len(sys.argv) == 4 else os.path.join(
        source, "docs", "TRAINERS.md")
    found = blocks(doc)
    python = [b for b in found if b.lang == "python"]
    if not python:
        print("%s: no ```python blocks: the extraction is broken or the doc lost its code" % doc)
        return 1
    if not any(b.section.startswith(STANDIN_SECTION) for b in python):
        print("%s: no python block under a '%s' heading (the stand-in recipes)" %
              (doc, STANDIN_SECTION))
        return 1
    unmarked = [b for b in found if b.lang != "python" and b.marker[0] is None]
    for b in unmarked:
        print("%s:%d: a ```%s block neither `<!-- runnable -->` nor `<!-- not run: WHY -->`: %s"
              % (doc, b.line, b.lang, b.first()))
    if unmarked:
        return 1

    work = tempfile.mkdtemp(prefix="headroom_trainers_md_")
    agent, address = start_agent(headroom, work)
    failed = 0
    try:
        print("agent at %s; %d blocks" % (address, len(found)))
        print("%-6s %-8s %8s  %s" % ("line", "lang", "seconds", "first line"))
        for n, b in enumerate(found):
            if b.marker[0] == "not run":
                print("%-6d %-8s %8s  %s  (not run: %s)" % (b.line, b.lang, "-", b.first()[:60],
                                                           b.marker[1]))
                continue
            if b.lang == "python":
                argv, env = python_block(b, n, doc, source, work, address)
                before = requests_served(address)
                status, seconds, out = run(argv, work, env, own_group=True)
                after = requests_served(address)
                if status == 0 and DOC_ADDRESS in b.text and (
                        before is None or after is None or after - before <= 1):
                    status = ("0, but it never reached the agent (requests served %s -> %s, "
                              "this test's reading included)" % (before, after))
            else:
                env = dict(os.environ)
                env.pop("HEADROOM_TOKEN", None)
                env["PATH"] = os.path.dirname(headroom) + os.pathsep + env.get("PATH", "/usr/bin")
                status, seconds, out = run(
                    ["/bin/bash", "-e", "-o", "pipefail", "-c",
                     b.text.replace(DOC_ADDRESS, address)], source, env, own_group=True)
            print("%-6d %-8s %8.1f  %s" % (b.line, b.lang, seconds, b.first()[:80]), flush=True)
            if status != 0:
                failed += 1
                print("%s:%d: the ```%s block (first line: %s) exited %s; its output (last 40 "
                      "lines):\n%s" % (doc, b.line, b.lang, b.first(), status,
                                       "\n".join(out.splitlines()[-40:])), flush=True)
    finally:
        stop(agent)
    run_count = sum(1 for b in found if b.marker[0] != "not run")
    print("%d blocks run, %d not run (marked), %d failed" %
          (run_count, len(found) - run_count, failed))
    if failed:
        print("left for inspection: %s (agent.log, block_*.py, run_*.py)" % work)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
