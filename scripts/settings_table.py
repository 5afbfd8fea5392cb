"""The README's configuration tables, generated from the settings' declarations.

    python3 scripts/settings_table.py          # rewrite them in README.md
    python3 scripts/settings_table.py --check  # exit 1 (with a diff) when README.md differs

Each setting is declared once, as a field of ``Settings`` in
handler/responses_gateway/settings.py (variable, default, doc, section, secret or not); this
writes one table per section between the markers in README.md, and the row naming every
setting that may come from Secrets Manager / SSM. tests/test_settings.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = ("<!-- settings: generated from handler/responses_gateway/settings.py by "
         "scripts/settings_table.py; edit the declarations, then run it -->")
END = "<!-- /settings -->"

sys.path.insert(0, str(ROOT / "handler"))

from responses_gateway.settings import SECTIONS, declared  # noqa: E402


def shown_default(name: str) -> str:
    """The default column: the declaration's ``shown``, else the field's default."""
    setting = declared()[name]
    if setting.shown is not None:
        return setting.shown
    value: Any = setting.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ((), {}):
        return "empty"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def tables() -> str:
    """Every section's table, then the secrets-by-reference row, between the markers."""
    settings = declared()
    lines = [BEGIN]
    for section in SECTIONS:
        names = [n for n, s in settings.items() if s.section == section.key]
        if not names:
            continue
        lines += ["", f"#### {section.title}", "", "| variable | default | meaning |",
                  "| --- | --- | --- |"]
        lines += [f"| `{settings[n].env}` | {shown_default(n)} | {settings[n].doc} |"
                  for n in names]
    secret = ", ".join(f"`{s.env.removeprefix('GATEWAY_')}`" for s in settings.values()
                       if s.secret)
    lines += ["", "#### Secrets by reference", "", "| variable | default | meaning |",
              "| --- | --- | --- |",
              f"| `GATEWAY_<NAME>_SECRET_ARN` / `GATEWAY_<NAME>_PARAMETER` | unset | for "
              f"{secret} (and a variable a `GATEWAY_ROUTES` deployment's `api_key` names): "
              "read the value from Secrets Manager or SSM (`arn[#field]`, `/name[#field]`), "
              "cached; the plain variable wins when set |",
              "", END]
    return "\n".join(lines)


def rewritten(text: str) -> str:
    """``text`` (README.md) with the block between the markers generated anew."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + tables() + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check README.md (exit 1 with a diff when it differs)")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = rewritten(text)
    if args.check:
        if new == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            text.splitlines(keepends=True), new.splitlines(keepends=True),
            "README.md", "README.md (from the declarations)"))
        print("README.md's settings tables differ from the declarations: run "
              "python3 scripts/settings_table.py", file=sys.stderr)
        return 1
    if new != text:
        README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
