"""Write the README's parameter table from the registry of calibrations (run after changing one).

The table lies between two marker comments in README.md; everything else in the README is prose.
The last column says whether the profile shipped for the H200 holds the parameter, and whether its
fit was flagged there.
"""

import json
import sys
from pathlib import Path

from calib import calibrations

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SHIPPED_H200 = ROOT / "profiles" / "nvidia-h200.json"
BEGIN, END = "<!-- parameters:begin (tools/readme_table.py writes this table) -->", "<!-- parameters:end -->"


def table() -> str:
    shipped = json.loads(SHIPPED_H200.read_text())["params"] if SHIPPED_H200.exists() else {}
    lines = ["| name | unit | meaning | calibration (notebook) | H200 |", "|---|---|---|---|---|"]
    for module in calibrations.all_calibrations():
        for p in module.PARAMETERS:
            rec = shipped.get(p.name)
            h200 = "no" if rec is None else "yes, flagged" if rec.get("flags") else "yes"
            lines.append(f"| `{p.name}` | {p.unit} | {p.meaning} | `{module.ID}` | {h200} |")
    return "\n".join(lines)


def render(text: str) -> str:
    """README text with the table between the markers replaced by the registry's."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main():
    README.write_text(render(README.read_text()))


if __name__ == "__main__":
    sys.exit(main())
