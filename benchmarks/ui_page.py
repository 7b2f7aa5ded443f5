"""The chat page's size and first paint on loopback, against a plain-text page of the same server.

    .venv/bin/python benchmarks/ui_page.py [--rounds 15] [--screenshot docs/ui.png]

Starts `llmcli serve` on a free port (the store of an empty LLMCLI_HOME: the embedded model only,
nothing loaded) and loads /ui in Debian's chromium through Playwright, a fresh browser context each
round (no cache). Per round, from the page's own Performance API: first contentful paint, DOM
content loaded, and the moment the model picker is filled (the page's first API answers). The
baseline is `GET /` on the same server ("Ollama is running", one text response): the ratio is what
the page costs over the cheapest thing a browser can paint from this server. --screenshot sends one
question to the embedded model and saves the page after the reply (docs/ui.png).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The first contentful paint can come after the load event: wait for its entry (buffered: one that
# came before the observer counts).
FIRST_PAINT = """() => new Promise((resolve) => new PerformanceObserver((list) => {
  const fcp = list.getEntries().find((e) => e.name === 'first-contentful-paint');
  if (fcp) resolve(fcp.startTime);
}).observe({ type: 'paint', buffered: true }))"""
DCL = "() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
SIZES = (
    "() => [performance.getEntriesByType('navigation')[0], ...performance.getEntriesByType('resource')]"
    ".map(e => [new URL(e.name).pathname, e.encodedBodySize, e.transferSize])"
)


def start_server(home: str) -> tuple[subprocess.Popen, str]:
    src = str(HERE.parent / "src")
    env = {
        **os.environ,
        "LLMCLI_HOME": home,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "llmcli", "serve", "--port", "0", "-t", "1", "-n", "48", "--temp", "0"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"on (http://\S+) ", line)
    if not found:
        proc.kill()
        raise SystemExit(f"serve said: {line!r}")
    return proc, found.group(1)


def load(browser, url: str, ready: str | None) -> dict:
    context = browser.new_context()
    page = context.new_page()
    page.goto(url, wait_until="load")
    if ready is not None:
        page.wait_for_selector(ready, state="attached")
    out = {
        "fcp": page.evaluate(FIRST_PAINT),
        "dcl": page.evaluate(DCL),
        "ready": page.evaluate("performance.now()") if ready is not None else None,
        "sizes": page.evaluate(SIZES),
    }
    context.close()
    return out


def screenshot(browser, url: str, path: Path) -> None:
    context = browser.new_context(viewport={"width": 1100, "height": 720}, device_scale_factor=1)
    page = context.new_page()
    page.goto(url + "/ui")
    page.wait_for_selector("#model option", state="attached")
    # A first turn loads the model (its load would be the shown reply's first stage); the second is
    # the one the screenshot shows, a typical reply with the first turn's prefix cached.
    for n, question in enumerate(["Hello!", "In two sentences: what is a KV cache?"]):
        if n:
            page.click("#new-chat")
        page.fill("#prompt", question)
        page.press("#prompt", "Enter")
        page.wait_for_selector("section.assistant .stagebar", timeout=120_000)
    page.screenshot(path=str(path))
    context.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--screenshot", type=Path, help="save the page after one reply here (PNG)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory() as home, sync_playwright() as playwright:
        proc, url = start_server(home)
        browser = playwright.chromium.launch(executable_path=chromium)
        version = browser.version
        try:
            load(browser, url + "/ui", "#model option")  # warm: the server's first answers; not counted
            page, plain = [], []
            for r in range(args.rounds):
                pair = [("ui", url + "/ui", "#model option"), ("plain", url + "/", None)]
                for name, address, ready in pair if r % 2 == 0 else pair[::-1]:
                    (page if name == "ui" else plain).append(load(browser, address, ready))
                print(
                    f"round {r + 1:>2}: /ui first paint {page[-1]['fcp']:6.1f} ms, models shown "
                    f"{page[-1]['ready']:6.1f} ms   / first paint {plain[-1]['fcp']:6.1f} ms"
                )
            if args.screenshot is not None:
                screenshot(browser, url, args.screenshot)
                print(f"screenshot: {args.screenshot}")
        finally:
            browser.close()
            proc.terminate()
            proc.wait(30)

    files = [(path, body) for path, body, _ in page[-1]["sizes"] if path.startswith("/ui")]
    print("\n| file | bytes (as sent) |\n|---|---:|")
    for path, body in files:
        print(f"| `{path}` | {body:,} |")
    print(f"| all of the page | {sum(body for _, body in files):,} |")
    med = {key: statistics.median(r[key] for r in page) for key in ("fcp", "dcl", "ready")}
    base = statistics.median(r["fcp"] for r in plain)
    print(f"\nmedian of {args.rounds} cold loads on loopback (chromium {version}):")
    print("| measure | /ui | `GET /` (plain text) | ratio |\n|---|---:|---:|---:|")
    print(f"| first contentful paint | {med['fcp']:.1f} ms | {base:.1f} ms | {med['fcp'] / base:.2f} |")
    print(f"| DOM content loaded | {med['dcl']:.1f} ms | | |")
    print(f"| model picker filled (/v1/models + /api/ps) | {med['ready']:.1f} ms | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
