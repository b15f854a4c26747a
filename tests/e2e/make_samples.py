#!/usr/bin/env python3
"""Turn requests recorded with `cachet serve --record DIR` into small client samples.

Usage: python3 tests/e2e/make_samples.py TRACE.jsonl INDEX OUT.json [WORKDIR]

Keeps the request's shape (fields, message and block types, tool names and schemas) and
shortens long texts (tool descriptions, system prompts) to their first lines, keeping the
date lines that the stabilize-volatile policy moves. WORKDIR, when given, is replaced by
/home/dev/project. No key or header is kept: samples are request bodies only.
"""

import json
import re
import sys

KEEP = re.compile(r"(?im)^.*(?:Current date|Today's date|Date:|gitStatus:).*$")
LIMIT = 400


def shorten(value, workdir):
    if isinstance(value, dict):
        return {k: shorten(v, workdir) for k, v in value.items()}
    if isinstance(value, list):
        return [shorten(v, workdir) for v in value]
    if isinstance(value, str):
        if workdir:
            value = value.replace(workdir, "/home/dev/project")
        if len(value) > LIMIT:
            kept = [m.group(0) for m in KEEP.finditer(value)]
            value = "\n".join([value[:LIMIT].rsplit("\n", 1)[0] or value[:LIMIT]] + kept)
        return value
    return value


def main():
    trace, index, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    workdir = sys.argv[4] if len(sys.argv) > 4 else None
    record = json.loads(open(trace).read().splitlines()[index])
    with open(out, "w") as f:
        json.dump(shorten(record["body"], workdir), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
