#!/usr/bin/python3
"""Writes README.md's configuration reference from configs/default.toml (itself `diloco config`),
between the markers <!-- config-reference:begin --> and <!-- config-reference:end -->.
  scripts/config-reference.py          rewrite README.md
  scripts/config-reference.py --check  exit 1 if README.md is out of date (a ctest runs this)"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"


def table(toml_text):
    out, section, doc, array = [], None, "", False
    for line in toml_text.splitlines():
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            section, array = m.group(1), False
            out += ["", f"**[{section}]**", "", "| key | default | meaning |", "| --- | --- | --- |"]
            continue
        # Arrays of tables ([[faults]], [[sites]], [[syncers]]) are commented out in the defaults
        # (none by default): their keys are listed as "#   key = default  # meaning".
        m = re.match(r"^# .*[Oo]ne \[\[(\w+)\]\] table each[^|]*:$", line)
        if m:
            section, array = None, True
            out += ["", f"**[[{m.group(1)}]]** (none by default; one table each)", "",
                    "| key | default | meaning |", "| --- | --- | --- |"]
            continue
        m = re.match(r"^#   (\w+) = (.*?)  # (.*)$", line) if array else None
        if m:
            out.append(f"| `{m.group(1)}` | `{m.group(2)}` | {m.group(3).replace('|', chr(92) + '|')} |")
            continue
        if line.startswith("# ") and section:
            doc = line[2:].replace("|", "\\|")
            continue
        m = re.match(r"^(\w+) = (.*)$", line)
        if m and section:
            out.append(f"| `{m.group(1)}` | `{m.group(2)}` | {doc} |")
    return "\n".join(out).strip() + "\n"


def main():
    readme = (root / "README.md").read_text()
    if BEGIN not in readme or END not in readme:
        sys.exit("README.md lacks the config-reference markers")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + table((root / "configs/default.toml").read_text()) + END + tail
    if "--check" in sys.argv:
        if new != readme:
            sys.exit("README.md's configuration reference is out of date: run scripts/config-reference.py")
        return
    (root / "README.md").write_text(new)


main()
