"""Capture Neovim showing CodeCue ghost text, as text and as a PNG.

Runs Neovim with the plugin in a tmux pane against a CodeCue server, types into a file, waits (over
Neovim's RPC socket) until a suggestion is streaming and until it is final, and saves the pane each time:
``NAME.txt`` (plain) and ``NAME.png`` (rendered from tmux's colour escapes; ghost text in its grey).

    .venv/bin/python editor_clients/tools/nvim_screenshot.py --out editor_clients/screenshots \\
        --cmd "codecue serve --stdio --in-process"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editor_clients" / "nvim"

SAMPLE = '''import math


def circle_area(radius: float) -> float:
    """Area of a circle."""
    return math.pi * radius ** 2


def fibonacci(n: int) -> int:
    """The n-th Fibonacci number."""
'''

INIT = """
vim.opt.runtimepath:prepend({plugin!r})
vim.opt.swapfile = false
vim.opt.number = true
vim.opt.termguicolors = true
vim.opt.laststatus = 2
_G.codecue_status = function() return require('codecue').statusline() end
vim.opt.statusline = ' %f %= %{{v:lua.codecue_status()}} '
require('codecue').setup({{ cmd = {cmd}, max_tokens = 48 }})
"""

SGR = re.compile(r"\x1b\[([0-9;]*)m")
PALETTE = [
    (0, 0, 0),
    (205, 49, 49),
    (13, 188, 121),
    (229, 229, 16),
    (36, 114, 200),
    (188, 63, 188),
    (17, 168, 205),
    (229, 229, 229),
    (102, 102, 102),
    (241, 76, 76),
    (35, 209, 139),
    (245, 245, 67),
    (59, 142, 234),
    (214, 112, 214),
    (41, 184, 219),
    (255, 255, 255),
]


def xterm_color(index: int) -> tuple[int, int, int]:
    if index < 16:
        return PALETTE[index]
    if index < 232:
        index -= 16
        levels = [0, 95, 135, 175, 215, 255]
        return levels[index // 36], levels[(index // 6) % 6], levels[index % 6]
    gray = 8 + (index - 232) * 10
    return gray, gray, gray


def render_png(ansi: str, path: Path) -> None:
    """Draw tmux's `capture-pane -e` output (SGR colours) as a PNG."""
    from PIL import Image, ImageDraw, ImageFont

    default_fg, default_bg = (220, 220, 220), (24, 24, 28)
    try:
        font = ImageFont.truetype("DejaVuSansMono.ttf", 15)
    except OSError:
        font = ImageFont.load_default()
    cell_w = int(font.getlength("M")) or 9
    cell_h = 19
    lines = ansi.rstrip("\n").split("\n")
    width = max(len(SGR.sub("", line)) for line in lines)
    image = Image.new("RGB", (cell_w * width + 16, cell_h * len(lines) + 16), default_bg)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        fg, bg, col, pos = default_fg, default_bg, 0, 0
        for match in [*SGR.finditer(line), None]:
            end = match.start() if match else len(line)
            for ch in line[pos:end]:
                x, y = 8 + col * cell_w, 8 + row * cell_h
                if bg != default_bg:
                    draw.rectangle([x, y, x + cell_w, y + cell_h], fill=bg)
                draw.text((x, y), ch, font=font, fill=fg)
                col += 1
            if not match:
                break
            pos = match.end()
            codes = [int(c) if c else 0 for c in match.group(1).split(";")]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0:
                    fg, bg = default_fg, default_bg
                elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                    color = xterm_color(codes[i + 2])
                    fg, bg = (color, bg) if c == 38 else (fg, color)
                    i += 2
                elif c in (38, 48) and i + 4 < len(codes) and codes[i + 1] == 2:
                    color = tuple(codes[i + 2 : i + 5])
                    fg, bg = (color, bg) if c == 38 else (fg, color)
                    i += 4
                elif 30 <= c <= 37:
                    fg = PALETTE[c - 30]
                elif 90 <= c <= 97:
                    fg = PALETTE[c - 90 + 8]
                elif 40 <= c <= 47:
                    bg = PALETTE[c - 40]
                elif c == 39:
                    fg = default_fg
                elif c == 49:
                    bg = default_bg
                i += 1
    image.save(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "editor_clients" / "screenshots")
    parser.add_argument("--cmd", default="codecue serve --stdio --in-process", help="server command line")
    parser.add_argument("--nvim", default=str(Path(sys.executable).parent / "nvim"))
    parser.add_argument("--type", dest="typed", default="    if n < 2:\n        return n\n    return fib")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()

    import pynvim

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="codecue-shot-"))
    source = work / "example.py"
    source.write_text(SAMPLE)
    init = work / "init.lua"
    init.write_text(
        INIT.format(
            plugin=str(PLUGIN), cmd=json.dumps(shlex.split(args.cmd)).replace("[", "{").replace("]", "}")
        )
    )
    sock = work / "nvim.sock"
    session = "codecue-shot"
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    nvim_cmd = f"{shlex.quote(args.nvim)} -u {shlex.quote(str(init))} -i NONE -n --listen {shlex.quote(str(sock))} {shlex.quote(str(source))}"
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "96",
            "-y",
            "22",
            "-e",
            "TERM=xterm-256color",
            # The server saves what its K policy learned into <config dir>/profile.toml; a screenshot run must
            # not change the user's real profile (as in the VS Code e2e). tmux panes get the tmux server's
            # environment, not ours, so pass it explicitly.
            "-e",
            f"CODECUE_CONFIG_DIR={os.environ.get('CODECUE_CONFIG_DIR') or work / 'config'}",
            nvim_cmd,
        ],
        check=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline:
                raise SystemExit("nvim did not start")
            time.sleep(0.1)
        nvim = pynvim.attach("socket", path=str(sock))
        nvim.exec_lua(
            "_G.shot = {}; vim.api.nvim_create_autocmd('User', {pattern = 'CodeCueSuggestion', callback = function(a) table.insert(_G.shot, a.data) end})"
        )
        while not nvim.exec_lua(
            "local c = require('codecue')._server.client(); return c ~= nil and c.initialized and vim.lsp.buf_is_attached(0, c.id)"
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the CodeCue client did not attach")
            time.sleep(0.1)
        # Typed as is: no auto-indent on top of the indentation in the text.
        nvim.command("setlocal noautoindent nosmartindent indentexpr=")
        nvim.command("normal! G")
        nvim.input("o" + args.typed.replace("<", "<lt>").replace("\n", "<CR>"))
        deadline = time.monotonic() + args.timeout
        saved_stream = False
        while time.monotonic() < deadline:
            events = nvim.exec_lua("return _G.shot")
            visible = nvim.exec_lua("return require('codecue').visible_text()")
            if (
                not saved_stream
                and visible
                and any(e["source"] == "stream" and not e["done"] for e in events)
            ):
                capture(session, args.out / "nvim-streaming")
                saved_stream = True
            if visible and any(e["source"] == "final" and e["text"] for e in events):
                # Fill the statusline's acceptance and tokens/s from codecue/stats.
                nvim.exec_lua("require('codecue').stats(function() vim.cmd('redrawstatus') end)")
                time.sleep(1.0)
                capture(session, args.out / "nvim-ghost-text")
                print("final suggestion:", repr(visible))
                return 0
            time.sleep(0.05)
        raise SystemExit("no suggestion before the timeout")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def capture(session: str, stem: Path) -> None:
    plain = subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=True
    ).stdout
    colored = subprocess.run(
        ["tmux", "capture-pane", "-p", "-e", "-t", session], capture_output=True, text=True, check=True
    ).stdout
    stem.with_suffix(".txt").write_text(plain)
    render_png(colored, stem.with_suffix(".png"))
    print("saved", stem.with_suffix(".txt"), stem.with_suffix(".png"))


if __name__ == "__main__":
    sys.exit(main())
