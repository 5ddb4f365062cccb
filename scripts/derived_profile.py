"""What the scripts that derive one hardware profile from another share: reading the base
profile, and writing the derived one where `metp-sim` finds it (hardware-profiles/NAME.json,
two-space JSON, one trailing newline), byte for byte as scripts/regen-reports.sh checks.

Imported by scripts/derive-grand-teton.py, derive-jean-zay.py and derive-gb200-segments.py
(python puts the running script's folder on the import path).
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def start(base_name: str, name: str) -> tuple[dict, dict]:
    """The base profile `base_name` and a shallow copy of it renamed `name`, to edit."""
    base = json.loads((ROOT / f"hardware-profiles/{base_name}.json").read_text())
    d = dict(base)
    d["name"] = name
    return base, d


def quoted(figure: dict, why: str) -> dict:
    """A copy of `figure` ({value, source}) whose source says why the derived profile takes it
    and then quotes the base profile's: `why` + ": " + the base's source."""
    return dict(figure, source=f"{why}: {figure['source']}")


def write(d: dict) -> None:
    """Writes profile `d` to hardware-profiles/<its name>.json."""
    out = ROOT / f"hardware-profiles/{d['name']}.json"
    out.write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
