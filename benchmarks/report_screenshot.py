"""A screenshot of `luminal bench --html`, to look at the report as a reader sees it.

    python benchmarks/report_screenshot.py [--out report.png] [--budget 30s] [--keep DIR]

Tunes two example models into one shared studies.db (so the report must leave the other model's studies out),
benches the first with the tuning cache, and has headless Chromium (`chromium`, or $CHROMIUM; on Debian
`apt-get install chromium`) render the page to a PNG. The run takes about a minute and a half on two cores; its
timings are whatever the machine gives, the point is the page's layout: the legend, the axes and their units.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
SHOWN = (MODELS / "resnet-small-torchscript.onnx", "batch=1")
OTHER = (MODELS / "vit-small-torchscript.onnx", "batch=1")  # tuned into the same studies.db, never shown


def luminal(*args: str) -> None:
    cmd = [sys.executable, "-c", "from luminal.cli.main import main; main()", *args]
    print("$ luminal " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="report.png", help="the PNG to write")
    ap.add_argument("--budget", default="30s", help="tuning budget of each model")
    ap.add_argument("--keep", help="keep the cache, studies and report.html in this folder")
    args = ap.parse_args()
    browser = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("no chromium on PATH (apt-get install chromium, or set $CHROMIUM)")
    work = Path(args.keep or tempfile.mkdtemp(prefix="luminal-report-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "tuning.db"
    for model, shape in (SHOWN, OTHER):
        luminal("tune", str(model), "--shape", shape, "--budget", args.budget, "--backend", "cpu", "--cache",
                str(cache))
    html = work / "report.html"
    luminal("bench", str(SHOWN[0]), "--shape", SHOWN[1], "--backend", "cpu", "--cache", str(cache), "--time", "5",
            "--html", str(html))
    out = Path(args.out).resolve()
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={out}", "--window-size=1100,4200", html.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    print(f"wrote {out} (the report: {html})")


if __name__ == "__main__":
    main()
