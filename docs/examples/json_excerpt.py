"""Print a part of the JSON document on stdin, for the docs' JSON examples (docs/gen.py runs it as a filter).

    leakscope check ... --format json | python docs/examples/json_excerpt.py [options]

--path A.0.B         the value at that path (keys and list indices), instead of the whole document
--drop K1,K2         leave out these keys wherever they appear
--first K:N          keep the first N items of every list under key K
--items K:I,J        keep the items at positions I, J of every list under key K
--inline DEPTH       print containers nested DEPTH deep or deeper on one line (default: never)
--name NAME          print ``"NAME": value``, as the value appears inside its document

Values are never changed, only left out; the rest is printed as leakscope prints JSON (two spaces
of indentation, ASCII only).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _prune(value: Any, drop: set[str], first: dict[str, int], items: dict[str, list[int]]) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in drop:
                continue
            item = _prune(item, drop, first, items)
            if isinstance(item, list) and key in first:
                item = item[: first[key]]
            if isinstance(item, list) and key in items:
                item = [item[i] for i in items[key] if i < len(item)]
            out[key] = item
        return out
    if isinstance(value, list):
        return [_prune(item, drop, first, items) for item in value]
    return value


def _dump(value: Any, inline: int | None, depth: int = 0) -> str:
    if not isinstance(value, (dict, list)) or not value or (inline is not None and depth >= inline):
        return json.dumps(value, separators=(", ", ": "))
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        parts = [f"{pad}{json.dumps(k)}: {_dump(v, inline, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(parts) + "\n" + "  " * depth + "}"
    parts = [f"{pad}{_dump(v, inline, depth + 1)}" for v in value]
    return "[\n" + ",\n".join(parts) + "\n" + "  " * depth + "]"


def _pairs(spec: list[str]) -> dict[str, str]:
    return dict(part.split(":", 1) for part in spec)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", default="")
    parser.add_argument("--drop", default="")
    parser.add_argument("--first", action="append", default=[])
    parser.add_argument("--items", action="append", default=[])
    parser.add_argument("--inline", type=int)
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    value: Any = json.loads(sys.stdin.read())
    for step in filter(None, args.path.split(".")):
        value = value[int(step)] if isinstance(value, list) else value[step]
    first = {k: int(v) for k, v in _pairs(args.first).items()}
    items = {k: [int(i) for i in v.split(",")] for k, v in _pairs(args.items).items()}
    value = _prune(value, set(filter(None, args.drop.split(","))), first, items)
    text = _dump(value, args.inline)
    sys.stdout.write((f"{json.dumps(args.name)}: " if args.name else "") + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
