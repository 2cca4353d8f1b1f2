"""ESGD studies side by side (variants of one study on one net):

    python -m harness.esgd.variants results/esgd/net2 results/esgd/net2_shared_init ... \\
        --out results/esgd/net2_variants

writes variants.md (ESGD against the population baseline, paired by seed, and how the
offspring fare, per study) and variants.png/.svg to the output folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.esgd import figures, tables
from harness.esgd.record import RECORD, changed_settings


def label(folder: Path) -> str:
    """A study's folder name and the settings where it differs from the committed study."""
    esgd = json.loads((folder / RECORD).read_text())["config"]["esgd"]
    return f"{folder.name} ({', '.join(changed_settings(esgd)) or 'as committed'})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.esgd.variants")
    parser.add_argument("folders", nargs="+", type=Path, help="ESGD study folders")
    parser.add_argument("--out", type=Path, required=True, help="folder for variants.md/.png")
    args = parser.parse_args(argv)
    studies = {label(f): tables.read_tables(f) for f in args.folders}
    args.out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(
        [
            "# ESGD variants: ESGD − population baseline, paired by seed, and the offspring",
            "",
            "Δ: ESGD minus the population baseline (mean ± 95 % CI over seeds; negative: ESGD "
            "better). Offspring shares: mean over seeds and generations; child / parents: "
            "an offspring's fitness at birth over its parents' mean after their SGD phase.",
            "",
            tables.variants_markdown(studies),
            "",
            "![variants](variants.png)",
            "",
        ]
    )
    (args.out / "variants.md").write_text(text)
    figures.write_figure(figures.variants_figure(studies), args.out / "variants")


if __name__ == "__main__":
    main()
