#!/usr/bin/env python3
"""Check every internal link of the built book and of the repository's top-level Markdown.

Usage: scripts/check-links.py BOOK_DIR [FILE.md ...]

- In the built book (BOOK_DIR, from `mdbook build docs`), every relative `href` and `src`
  of every page must name a file of the book, and its `#fragment` an `id` in that file.
  A link from the book to a file outside it (`../../src/x.rs`) is broken there, so it fails.
- In each Markdown FILE (README.md, BENCHMARKS.md), every relative link must name a file of
  the repository, and a `#fragment` into a Markdown file one of its headings (GitHub's slugs).

Prints each broken link as `FILE: LINK: why` and exits 1 when there is any.
"""

import html
import os
import re
import sys
from urllib.parse import unquote, urlsplit

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SKIP_PAGES = {"print.html", "toc.html", "404.html"}
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def html_ids(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        cache[path] = {html.unescape(m) for m in re.findall(r'\sid="([^"]*)"', text)}
    return cache[path]


def check_book(book):
    broken = []
    for dirpath, _, files in os.walk(book):
        for name in files:
            if not name.endswith(".html") or name in SKIP_PAGES:
                continue
            page = os.path.join(dirpath, name)
            with open(page, encoding="utf-8") as f:
                text = f.read()
            for link in re.findall(r'\s(?:href|src)="([^"]*)"', text):
                link = html.unescape(link)
                if not link or EXTERNAL.match(link) or link.startswith("//"):
                    continue
                parts = urlsplit(link)
                target = page if not parts.path else os.path.normpath(
                    os.path.join(os.path.dirname(page), unquote(parts.path)))
                rel = os.path.relpath(page, book)
                if not target.startswith(os.path.abspath(book)) or not os.path.exists(target):
                    broken.append(f"{rel}: {link}: no such file in the book")
                elif parts.fragment and target.endswith(".html"):
                    if unquote(parts.fragment) not in html_ids(target):
                        broken.append(f"{rel}: {link}: no such anchor")
    return broken


def github_slugs(path):
    """The anchors GitHub gives a Markdown file's headings."""
    slugs, seen, fence = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^#{1,6} +(.*?) *#*$", line.rstrip("\n"))
            if not m:
                continue
            text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda g: g.group(1) or "", m.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def check_markdown(path):
    broken, fence = [], False
    rel = os.path.relpath(path, ROOT)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for link in re.findall(r"\]\(([^)\s]+)\)", line):
            if EXTERNAL.match(link):
                continue
            parts = urlsplit(link)
            target = path if not parts.path else os.path.normpath(
                os.path.join(os.path.dirname(path), unquote(parts.path)))
            if not os.path.exists(target):
                broken.append(f"{rel}: {link}: no such file")
            elif parts.fragment and target.endswith(".md"):
                if parts.fragment not in github_slugs(target):
                    broken.append(f"{rel}: {link}: no such heading")
    return broken


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    book = os.path.abspath(sys.argv[1])
    if not os.path.isfile(os.path.join(book, "index.html")):
        sys.exit(f"{book}: not a built book (no index.html)")
    broken = check_book(book)
    for md in sys.argv[2:]:
        broken += check_markdown(os.path.abspath(md))
    for b in broken:
        print(f"broken link: {b}")
    if broken:
        sys.exit(1)
    print("links ok")


if __name__ == "__main__":
    main()
