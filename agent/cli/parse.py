"""``agent parse --format F --size WxH TEXT``: read a model's output as its family would, and show where each
action lands, in model, normalized and frame-pixel coordinates. docs/coordinates.md has worked examples (which
tests/test_docs_commands.py reproduces at 80 columns, so keep this output stable)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent.cli.common import EXIT_EPISODE_FAILED, EXIT_OK, add_set_option, config_path, make_console, print_error, size
from agent.terminal import plain

NAME = "parse"


def add_parser(sub: Any) -> None:
    parse = sub.add_parser(NAME, help="parse a model's output and show where each action lands", description=(
        "Read TEXT as the named model family (or registered model id) would have written it for a "
        "screenshot of WxH pixels, and print each action with its model-space, normalized and frame-pixel "
        "coordinates. For debugging a model's clicks."))
    parse.add_argument("text", help="the model's output (use $'...' in bash for newlines)")
    parse.add_argument("--format", dest="fmt", help="family (qwen2.5-vl, infigui-g1, gui-r1, ui-tars, ui-tars-1.5, "
                       "ui-tars-v1) or a registered model id (config: model.format / model.id)")
    parse.add_argument("--model", help="model id whose preset to use (config: model.id)")
    parse.add_argument("--size", required=True, type=size, metavar="WxH", help="screenshot (frame) size, e.g. 1920x1080")
    parse.add_argument("--variant", help="prompt variant (config: model.variant)")
    parse.add_argument("--config", help="config file (default: ./config.toml when present)")
    add_set_option(parse)


def main(args: argparse.Namespace) -> int:
    from agent.config import load_config
    from agent.errors import AgentError
    from policy.errors import PolicyError
    from policy.formats import get_format

    try:
        cfg = load_config(config_path(args.config), _overrides(args))
        if not (cfg.model.id or cfg.model.format):
            return print_error("say which model wrote the text: --format FAMILY or --model ID")
        preset = cfg.model.preset()
        space = preset.space(args.size)
        fmt = get_format(preset.family)
    except (AgentError, PolicyError, ValueError) as e:
        return print_error(str(e))
    return _show(args, preset, space, fmt)


def _overrides(args: argparse.Namespace) -> list[str]:
    """--format is a family name or else a model id; --model and --format go before the --set overrides, --variant
    after them."""
    from policy.presets import FAMILY_DEFAULTS

    overrides = list(args.overrides)
    if args.fmt:
        key = "model.format" if args.fmt.lower() in FAMILY_DEFAULTS else "model.id"
        overrides.insert(0, f"{key}={json.dumps(args.fmt)}")
    if args.model:
        overrides.insert(0, f"model.id={json.dumps(args.model)}")
    if args.variant:
        overrides.append(f"model.variant={json.dumps(args.variant)}")
    return overrides


def _show(args: argparse.Namespace, preset: Any, space: Any, fmt: Any) -> int:
    """Print the preset, the model-input size and a table of the parsed actions (exit 1 when the text does not
    parse). Laid out for an 80-column terminal: the preset on two lines, one table row per point (a drag's end on
    a row of its own), and the actions' other fields listed under the table; free text folds at word boundaries."""
    from policy.errors import FormatParseError

    console = make_console()
    W, H = args.size
    console.print(f"[bold]{plain(preset.model_id)}[/] ({plain(preset.family)} {plain(preset.version)} "
                  f"{plain(preset.variant)}, {preset.coord_mode.value})".replace("  ", " "))
    pre = "" if preset.pre_resize.value == "none" else (f", pre-resize {preset.pre_resize.value} "
                                                        f"{preset.pre_resize_pixels:,} px")
    console.print(f"pixels {preset.min_pixels:,}..{preset.max_pixels:,}{pre}")
    console.print(f"frame {W}x{H} -> model input {space.input_size[0]}x{space.input_size[1]}"
                  + ("; coordinates on a 0-1000 grid" if space.mode.value == "relative_1000" else ""))
    try:
        parsed = fmt.parse(args.text, space, preset)
    except FormatParseError as e:
        console.print(f"[bold red]parse error:[/] {plain(e)}")
        return EXIT_EPISODE_FAILED
    if parsed.thought:
        console.print(f"thought: {plain(parsed.thought.strip()[:300])}")
    console.print(_table(parsed.actions, space))
    details = [(i, {k: v for k, v in a.to_dict().items() if k not in ("kind", "point", "end")})
               for i, a in enumerate(parsed.actions)]
    if any(d for _, d in details):
        console.print("details:")
        for i, d in details:
            if d:
                console.print(f"{i:>2}  {plain(json.dumps(d, ensure_ascii=False))}")
    return EXIT_OK


def _table(actions: Any, space: Any) -> Any:
    """One row per point: the action's point, and for a drag a second row for its end."""
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("#", "action", "model point", "normalized", "frame px"):
        table.add_column(col, overflow="fold")
    for i, action in enumerate(actions):
        label = action.kind.value + (" (executed)" if i == 0 and len(actions) > 1 else "")
        points = [p for p in (action.point, action.end) if p is not None]
        if not points:
            table.add_row(str(i), label, "-", "-", "-")
        for n, p in enumerate(points):
            (x, y), (u, v) = space.from_point(p), space.to_frame_pixels(p)
            table.add_row(str(i) if n == 0 else "", label if n == 0 else "-> end", f"({x:g}, {y:g})",
                          f"({p.x:.4f}, {p.y:.4f})", f"({u:.1f}, {v:.1f})")
    return table
