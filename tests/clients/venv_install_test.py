#!/usr/bin/python3
"""clients/python installs as the package headroom-client, offline, into a fresh venv: the
venv's python, run from elsewhere (the source tree not on sys.path), imports headroom_client
from the venv, with its version, py.typed and a working `batched`.

The install is the README's, `pip install --no-index --no-build-isolation ./clients/python`, on
a copy of clients/python in a temporary directory (pip builds in the tree it is given: the copy
takes the build/ and *.egg-info it leaves). The temporary directory is removed, pass or fail.

Usage: venv_install_test.py. Exit 0 on success, 1 on a failure, 77 without python3-venv,
python3-pip, python3-setuptools or python3-wheel (scripts/setup.sh).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_DIR = os.path.join(ROOT, "clients", "python")
TIMEOUT_S = 100  # each step; the whole test takes a few seconds

# Run in the venv, from the temporary directory, isolated (-I: no PYTHONPATH, no user site).
CHECK = r"""
import importlib.metadata, os, sys
import headroom_client as h
from headroom_client import batched
assert h.__file__.startswith(os.path.realpath(sys.prefix) + os.sep) or \
    h.__file__.startswith(sys.prefix + os.sep), "not from the venv: " + h.__file__
assert h.__version__ == sys.argv[1], (h.__version__, sys.argv[1])
assert importlib.metadata.version("headroom-client") == h.__version__
meta = importlib.metadata.metadata("headroom-client")
assert meta["Requires-Python"] == ">=3.8", meta["Requires-Python"]
assert not importlib.metadata.requires("headroom-client"), "no dependencies"
assert os.path.isfile(os.path.join(os.path.dirname(h.__file__), "py.typed")), "py.typed"
assert list(batched(range(5), 2)) == [[0, 1], [2, 3], [4]]
assert list(batched(iter("abc"), lambda: 0)) == [["a"], ["b"], ["c"]]
print("installed:", h.__file__, h.__version__)
"""


def missing():
    """What this test needs and the machine lacks (Debian packages)."""
    need = {"venv": "python3-venv", "ensurepip": "python3-venv", "pip": "python3-pip",
            "setuptools": "python3-setuptools", "wheel": "python3-wheel"}
    return sorted({pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None})


def run(cmd, cwd, env):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:],
                                                  r.stderr[-3000:]))
    return r.stdout


def main():
    lacking = missing()
    if lacking:
        print("venv_install_test: skipped: %s not installed (scripts/setup.sh)"
              % ", ".join(lacking))
        return 77
    sys.path.insert(0, CLIENT_DIR)
    from headroom_client import __version__

    # Offline and independent of this machine's pip configuration (an index, find-links).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1")
    tmp = tempfile.mkdtemp(prefix="headroom-venv-")
    try:
        src = os.path.join(tmp, "python")
        shutil.copytree(CLIENT_DIR, src,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        venv = os.path.join(tmp, "venv")
        # --system-site-packages: offline, with --no-build-isolation, the build backend
        # (setuptools) and its bdist_wheel (the wheel package) must be importable by the venv's
        # pip; a plain venv has setuptools (ensurepip) but not wheel, and the build fails with
        # "invalid command 'bdist_wheel'". Debian's python3-wheel in the system site-packages
        # provides it; pip still installs into the venv (checked below: imported from there).
        run([sys.executable, "-m", "venv", "--system-site-packages", venv], tmp, env)
        python = os.path.join(venv, "bin", "python")
        run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", src], tmp,
            env)
        shutil.rmtree(src)  # the source is gone: the import below is the installed copy
        out = run([python, "-I", "-c", CHECK, __version__], tmp, env)
        print(out, end="")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print("FAIL:", e)
        print("venv_install_test: FAILED")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("venv_install_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
