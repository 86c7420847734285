"""An error's words in packdata's language: the library speaks its arguments (skip_bad=True,
source_format="files"), and packdata says the same with its flags (--skip-bad, --source-format
files), so neither interface shows the other's spelling.

The table is read from packdata's own parser (each option's dest and flag), so a new option is
translated as soon as it exists; only names a Python argument spells otherwise are listed.
"""

from __future__ import annotations

import argparse
import re

_RENAMED = {"field": "fields"}  # parser dest -> pack()'s argument name
_VALUE = r"""(?:"[^"]*"|'[^']*'|[\w.-]+)"""


def flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """pack()'s argument name -> packdata's long flag, for every option of the parser."""
    table: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of its options
        long = [s for s in action.option_strings if s.startswith("--")]
        if long and action.dest not in ("help", argparse.SUPPRESS):
            table.setdefault(_RENAMED.get(action.dest, action.dest), long[0])
    return table


def cli_words(text: str, table: dict[str, str]) -> str:
    """text with every argument spelling of table's names turned into its flag:
    `--skip-bad (skip_bad=True)` and `skip_empty (--skip-empty)` -> the flag alone,
    `skip_bad=True` -> `--skip-bad`, `with skip_bad=False` -> `without --skip-bad`,
    `source_format="files"` -> `--source-format files`, `fields=` -> `--field`,
    `fields={'COL': KIND}` -> `--field COL:KIND`."""
    if "fields" in table:  # fields={'COL': KIND} -> --field COL:KIND
        text = re.sub(r"\bfields=\{'([^']*)': '?([^'}]*)'?\}", rf"{table['fields']} \1:\2", text)
    names = "|".join(sorted(map(re.escape, table), key=len, reverse=True))
    arg = rf"(?<![\w-])(?:{names})(?:={_VALUE}?)?"
    flag = r"--[a-z][\w-]*(?: [\w.-]+)?"
    text = re.sub(rf"({flag}) \({arg}\)", r"\1", text)  # "--skip-bad (skip_bad=True)"
    text = re.sub(rf"{arg} \(({flag})\)", r"\1", text)  # "masks (--masks)"
    text = re.sub(rf"(?:\bwith )?(?<![\w-])({names})=(?:False|None)\b",
                  lambda m: f"without {table[m.group(1)]}", text)

    def one(match: re.Match[str]) -> str:
        option, value = table[match.group(1)], match.group(2)
        if value is None or value == "True":
            return option
        return f"{option} {value.strip(chr(34) + chr(39))}"

    return re.sub(rf"(?<![\w-])({names})=({_VALUE})?", one, text)
