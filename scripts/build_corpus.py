#!/usr/bin/env python3
"""The English corpus of `headroom diloco` (docs/DILOCO.md), built from Debian packages.

Sources, in this order: the King James Bible (`bible-kjv-text`, read with the `bible` program
of `bible-kjv`; verse references stripped), every fortune file of `fortunes` and
`fortunes-min` (`%` separators become blank lines, backspace overstrikes are resolved to the
struck character), and the Jargon File (`jargon-text`). Bytes other than printable ASCII, tab
and newline are dropped, runs of more than two newlines are shortened.

The held-out split is fixed: the text is cut into 4,096-byte blocks and every 20th block
(index 19, 39, ...) is validation; the rest, in order, is training. Writes OUT/train.txt,
OUT/val.txt and OUT/manifest.json (sizes and SHA-256 of both). Deterministic: the same
packages give the same bytes.

Usage: build_corpus.py OUT_DIR
"""
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys

BLOCK_BYTES = 4096
VAL_EVERY = 20
FORTUNE_DIR = "/usr/share/games/fortunes"
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"


def clean(text: bytes) -> bytes:
    # Overstrike: "X\bX" (bold) and "_\bX" (underline) both print X.
    while b"\x08" in text:
        text = re.sub(rb"[^\x08]\x08", b"", text)
        text = text.replace(b"\x08", b"")
    text = text.replace(b"\r\n", b"\n")
    text = bytes(c for c in text if c in (9, 10) or 32 <= c < 127)
    return re.sub(rb"\n{3,}", b"\n\n", text)


def bible() -> bytes:
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout
    # "Ge1:1 In the beginning ..." -> "In the beginning ..."
    return re.sub(rb"(?m)^[0-9A-Za-z]+\d+:\d+ ", b"", out)


def fortunes() -> bytes:
    parts = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if name.endswith((".dat", ".u8")) or not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            parts.append(re.sub(rb"(?m)^%\n", b"\n", f.read()))
    return b"\n".join(parts)


def jargon() -> bytes:
    with gzip.open(JARGON, "rb") as f:
        return f.read()


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    text = clean(b"\n\n".join([bible(), fortunes(), jargon()]))
    blocks = [text[i:i + BLOCK_BYTES] for i in range(0, len(text), BLOCK_BYTES)]
    val = b"".join(b for i, b in enumerate(blocks) if i % VAL_EVERY == VAL_EVERY - 1)
    train = b"".join(b for i, b in enumerate(blocks) if i % VAL_EVERY != VAL_EVERY - 1)
    os.makedirs(out, exist_ok=True)
    manifest = {"block_bytes": BLOCK_BYTES, "val_every": VAL_EVERY}
    for name, data in (("train", train), ("val", val)):
        tmp = os.path.join(out, f".{name}.txt.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(out, f"{name}.txt"))
        manifest[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(out, ".manifest.json.tmp"), "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(os.path.join(out, ".manifest.json.tmp"), os.path.join(out, "manifest.json"))
    print(f"build_corpus: {out}: train {len(train):,} bytes, val {len(val):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
