#!/usr/bin/env python3
"""A PNG screenshot of an HTML report (`gpu-acceptance local|report ... --html FILE`) with headless Chromium.

    python hack/report_screenshot.py report.html docs/images/report.png            # 1280 px wide
    python hack/report_screenshot.py report.html out.png --width 1400 --height 9000
    python hack/report_screenshot.py --dump-dom report.html                         # the DOM after loading

Chromium is Debian's `chromium` package (hack/install-tools.sh installs it).
It runs headless with every host name unresolvable, so the screenshot also
shows that the page needs nothing from the network. Chromium shoots the whole
window, so the window is tall (--height) and the white space under the page
is cut off afterwards (with Pillow, which matplotlib brings).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_SECONDS = 120


def find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def chromium_command(browser: str, profile: str, *args: str) -> list[str]:
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
             "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}"]
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        flags.append("--no-sandbox")
    return [browser, *flags, *args]


def run(browser: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        proc = subprocess.run(chromium_command(browser, profile, *args), capture_output=True, text=True,
                              timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"chromium failed (exit code {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def trim(png: Path, margin: int = 24) -> None:
    """Cut the white rows under the page (needs Pillow; without it the PNG keeps the window's height)."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return
    with Image.open(png) as im:
        rgb = im.convert("RGB")
        box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
        if box:
            rgb.crop((0, 0, rgb.width, min(rgb.height, box[3] + margin))).save(png)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("html", type=Path, help="the report page")
    p.add_argument("png", type=Path, nargs="?", help="where to write the screenshot")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=8000, help="window height; the white below the page is cut off")
    p.add_argument("--dump-dom", action="store_true", help="print the DOM after loading instead of a screenshot")
    args = p.parse_args(argv)
    browser = find_chromium()
    if browser is None:
        print("error: no Chromium here; install Debian's package: apt-get install -y chromium "
              "(or bash hack/install-tools.sh)", file=sys.stderr)
        return 2
    if not args.html.is_file():
        print(f"error: {args.html} is not a file", file=sys.stderr)
        return 2
    url = args.html.resolve().as_uri()
    if args.dump_dom:
        sys.stdout.write(run(browser, "--dump-dom", url).stdout)
        return 0
    if args.png is None:
        p.error("give the PNG to write, or --dump-dom")
    args.png.parent.mkdir(parents=True, exist_ok=True)
    run(browser, f"--window-size={args.width},{args.height}", f"--screenshot={args.png.resolve()}", url)
    if not args.png.is_file():
        print(f"error: chromium wrote no {args.png}", file=sys.stderr)
        return 2
    trim(args.png)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
