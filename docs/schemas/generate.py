"""Write docs/schemas/<command>.schema.json from the document types in rnnprof.reports.schema.

Usage: python docs/schemas/generate.py [--check]   (--check: write nothing; exit 1 naming each schema that is
missing or differs from what the types give)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rnnprof.reports.schema import DOCUMENTS, json_schema

HERE = Path(__file__).resolve().parent


def schema_text(command: str) -> str:
    return json.dumps(json_schema(command), indent=2, ensure_ascii=False) + "\n"


def stale() -> list[str]:
    """The schema files that are missing or differ from their types' schema."""
    return [command for command in DOCUMENTS
            if not (HERE / f"{command}.schema.json").is_file()
            or (HERE / f"{command}.schema.json").read_text(encoding="utf-8") != schema_text(command)]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        out_of_date = stale()
        for command in out_of_date:
            print(f"docs/schemas/{command}.schema.json is out of date: run python docs/schemas/generate.py",
                  file=sys.stderr)
        return 1 if out_of_date else 0
    for command in DOCUMENTS:
        (HERE / f"{command}.schema.json").write_text(schema_text(command), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
