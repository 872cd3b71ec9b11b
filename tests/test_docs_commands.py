"""Every shell command in README.md and docs/*.md runs as written, on a fresh clone with nothing else.

Which blocks hold commands: a fenced block whose language is ``bash``, ``sh``, ``shell`` or ``console`` (every
line of which must then be a command), or that has no language and whose every line starts with a command
(``agent``, ``.venv/bin/agent``, ``python``, ``pip``, ``make``, ``vllm``, ``curl``, ``accelerate``, ``hf``,
``xvfb-run``; ``VAR=value`` before it is fine), apart from comments and continuations (a trailing backslash). In a ``console`` block the
lines starting with ``$ `` are commands and the lines after each one are its output, compared exactly in an
80-column terminal (the ``agent parse`` worked examples of docs/coordinates.md).

Marks: an HTML comment on the line just before the opening fence (invisible when the page is rendered) says what
the block needs. Items are separated by ``;``:

    <!-- needs: gpu -->                    skipped, reported with the reason; kinds: gpu, phone, server, download,
    <!-- needs: gpu, download (why) -->    network, display, person, long (more than the slow suite's time), lan;
                                           text in parentheses is added to the reason
    <!-- slow -->                          run in the slow suite only (``make test-all``; ``-m slow``)
    <!-- skip: why -->                     never run (``make test`` itself)
    <!-- tiny: ARGS -->                    run with ARGS (tiny-model settings) added to each ``agent`` command, in
                                           place of what ``needs:`` names; in the slow suite
    <!-- timeout: S -->                    seconds per command (default 120, 600 in the slow suite)

A block without a mark runs in the default suite (``make test``), so a new command must either be fast or say
what it needs. Commands run with bash, one after another in document order, in one copy of the checkout (so
``agent show`` can read what ``agent run`` wrote, and nothing is written into the checkout), with ``.venv/bin``
first on PATH (``agent`` as in an activated venv), COLUMNS=80 and HF_HUB_OFFLINE=1 (a command that would download
a model fails at once instead of hanging). A command fails the test when it exits non-zero or prints a traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import procs

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMANDS = frozenset({"agent", "make", "python", "python3", "pip", "vllm", "curl", "accelerate", "tensorboard", "hf",
                      "xvfb-run", "Xvfb", "mkdir", "chmod", "openssl", "mosquitto_passwd", "sudo"})
NEEDS = {
    "gpu": "needs a CUDA GPU",
    "phone": "needs an Android phone (adb)",
    "server": "needs a running model server (an OpenAI-compatible endpoint such as vLLM)",
    "download": "downloads a model, a dataset or packages",
    "network": "reaches a site on the internet",
    "display": "needs an X display of your own",
    "person": "needs a person at the screen",
    "long": "takes longer than the slow suite allows a test: run it by hand",
    "lan": "needs two machines on a network (tests/agent/fleet/test_two_machines.py runs docs/fleet.md's on loopback)",
}
FAST_S, SLOW_S = 120, 600
MARK = re.compile(r"<!--(.*?)-->\s*$")
ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    """Line number of the opening fence (1-based)."""
    lang: str
    commands: tuple[str, ...]
    expected: tuple[tuple[str, ...] | None, ...]
    """Per command: its expected output lines (console blocks), or None."""
    needs: tuple[str, ...] = ()
    detail: str = ""
    slow: bool = False
    skip: str = ""
    tiny: str = ""
    timeout: int = 0
    raw: tuple[str, ...] = field(default=(), repr=False)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def first_word(line: str) -> str:
    """The command a shell line runs: its first word after VAR=value assignments, without its folder."""
    words = line.split()
    while words and ENV_ASSIGN.fullmatch(words[0]):
        words = words[1:]
    return os.path.basename(words[0]) if words else ""


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a # outside quotes, after a blank)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def logical_lines(lines: list[str]) -> list[str]:
    """Join backslash continuations; drop blank lines and lines that are only a comment."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if strip_comment(line).endswith("\\"):
            pending = strip_comment(line)[:-1].rstrip()
            continue
        if line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    assert not pending, f"a continuation with nothing after it: {pending!r}"
    return out


def parse_mark(text: str, where: str) -> dict:
    out: dict = {}
    for item in (i.strip() for i in text.split(";")):
        if not item:
            continue
        key, _, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if key == "needs":
            detail = re.search(r"\((.*)\)\s*$", value)
            kinds = [k for k in re.split(r"[,\s]+", value[:detail.start()] if detail else value) if k]
            unknown = [k for k in kinds if k not in NEEDS]
            assert kinds and not unknown, f"{where}: unknown needs {unknown or value!r}; known: {', '.join(NEEDS)}"
            out["needs"], out["detail"] = tuple(kinds), detail.group(1) if detail else ""
        elif key == "slow" and not value:
            out["slow"] = True
        elif key == "skip" and value:
            out["skip"] = value
        elif key == "tiny" and value:
            out["tiny"] = value
        elif key == "timeout" and value.isdigit():
            out["timeout"] = int(value)
        else:
            raise AssertionError(f"{where}: unknown mark {item!r} (see tests/test_docs_commands.py)")
    return out


def doc_blocks(doc: Path) -> list[Block]:
    lines = doc.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body, lang = lines[i + 1:end], fence.group(1)
        where = f"{doc.relative_to(REPO)}:{i + 1}"
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        # A block without a language holds commands when every line does (a diagram may start with "agent").
        plain = logical_lines(body) if lang == "" else []
        is_commands = lang in ("bash", "sh", "shell", "console") or (
            bool(plain) and all(first_word(line) in COMMANDS for line in plain))
        if is_commands:
            marks = parse_mark(MARK.match(prev).group(1), where) if MARK.match(prev) else {}
            if lang == "console":
                commands, expected = [], []
                for line in body:
                    if line.startswith("$ "):
                        commands.append(line[2:])
                        expected.append([])
                    else:
                        expected[-1].append(line)
                block = Block(doc, i + 1, lang, tuple(commands), tuple(tuple(e) for e in expected), raw=tuple(body),
                              **marks)
            else:
                commands = logical_lines(body)
                block = Block(doc, i + 1, lang, tuple(commands), (None,) * len(commands), raw=tuple(body), **marks)
            out.append(block)
        i = end + 1
    return out


BLOCKS = [b for doc in DOCS for b in doc_blocks(doc)]


def with_tiny(command: str, args: str) -> str:
    """``command`` with ``args`` added where the agent command's own arguments end (before a comment)."""
    bare = strip_comment(command)
    if first_word(bare) == "agent" or "-m agent.cli" in bare or "-m agent " in bare:
        return f"{bare} {args}"
    return bare


def params() -> list:
    out = []
    for b in BLOCKS:
        marks: list = []
        if b.skip:
            marks.append(pytest.mark.skip(reason=f"{b.where}: {b.skip}"))
        elif b.needs and not b.tiny:
            reason = "; ".join(NEEDS[k] for k in b.needs) + (f" ({b.detail})" if b.detail else "")
            marks.append(pytest.mark.skip(reason=f"{b.where}: {reason}"))
        slow = b.slow or bool(b.tiny)
        per = b.timeout or (SLOW_S if slow else FAST_S)
        if slow:
            marks.append(pytest.mark.slow)
        marks.append(pytest.mark.timeout(per * max(1, len(b.commands)) + 60))
        out.append(pytest.param(b, marks=marks, id=b.where))
    return out


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (no .git, no runs, no caches) with the venv linked in, as a fresh clone after
    ``make setup`` would be."""
    dest = tmp_path_factory.mktemp("docs") / "handeye"
    shutil.copytree(REPO, dest, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "__pycache__", ".pytest_cache", "*.egg-info", ".mypy_cache", ".ruff_cache"))
    (dest / ".venv").symlink_to(REPO / ".venv")
    return dest


def run(command: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", "HF_HUB_OFFLINE": "1",
           "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTEST_CURRENT_TEST", None)
    return procs.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("block", params())
def test_documented_commands_run_as_written(block: Block, clone: Path):
    per = block.timeout or (SLOW_S if block.slow or block.tiny else FAST_S)
    for command, expected in zip(block.commands, block.expected):
        line = with_tiny(command, block.tiny) if block.tiny else command
        try:
            result = run(line, clone, per)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.where}: `{command}` ran past {per} s")
        out = result.stdout + result.stderr
        assert result.returncode == 0 and "Traceback (most recent call last)" not in out, (
            f"{block.where}: `{line}` exited {result.returncode}\n{out[-3000:]}")
        if expected is not None:
            got = [ln.rstrip() for ln in result.stdout.rstrip("\n").split("\n")]
            assert got == [ln.rstrip() for ln in expected], f"{block.where}: `{command}` printed\n" + "\n".join(got)
            assert all(len(ln) <= 80 for ln in got), f"{block.where}: wider than 80 columns:\n" + "\n".join(got)


def test_every_command_block_is_found_and_every_line_is_a_command():
    """The reader above finds the blocks it should (a change in the docs' layout would otherwise skip them
    silently), and no line is a placeholder that bash would read as a redirect (``runs/<run_id>``)."""
    assert len(BLOCKS) >= 40, len(BLOCKS)
    for doc in (REPO / "README.md", REPO / "docs" / "training.md", REPO / "docs" / "online.md",
                REPO / "docs" / "coordinates.md", REPO / "docs" / "benchmarks.md"):
        assert any(b.doc == doc for b in BLOCKS), f"no command block found in {doc.name}"
    for b in BLOCKS:
        for command in b.commands:
            assert first_word(command) in COMMANDS, f"{b.where}: {command!r} does not start with a known command"
            bare = strip_comment(command)
            try:
                shlex.split(bare)
            except ValueError as e:
                raise AssertionError(f"{b.where}: {command!r}: {e}") from None
            assert not re.search(r"<[\w .-]+>", unquoted(bare)), (
                f"{b.where}: a <placeholder> in {command!r} reads as a redirect in bash")


def unquoted(line: str) -> str:
    """``line`` with everything inside quotes blanked out."""
    out, quote = [], ""
    for ch in line:
        if quote:
            quote = "" if ch == quote else quote
            out.append(" ")
        elif ch in "'\"":
            quote = ch
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def test_every_family_has_a_worked_example():
    commands = " ".join(c for b in BLOCKS if b.doc.name == "coordinates.md" for c in b.commands)
    for family in ("qwen2.5-vl", "infigui-g1", "gui-r1", "ui-tars-1.5", "ui-tars-v1"):
        assert f"--format {family} " in commands, f"no worked example for {family}"


def test_the_configuration_table_names_every_section():
    from agent.config import SECTIONS

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text[text.index("## Sections"):text.index("## Secrets")]
    missing = [name for name in (*SECTIONS, "secrets") if f"| `[{name}]` |" not in table]
    assert not missing, f"docs/configuration.md's section table lacks {missing}"


def test_the_readme_names_every_extra_and_all_means_all():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    assert table == set(extras) - {"all"}
    (everything,) = extras["all"]
    assert set(everything.split("[")[1].rstrip("]").split(",")) == set(extras) - {"all", "test", "bench"}


def test_the_suites_table_names_every_registered_suite():
    """docs/environments.md's suite table names every suite ``agent envs`` lists (``bench/`` registers its own only
    when imported), and the two that need --data."""
    from envs.registry import all_specs

    text = (REPO / "docs" / "environments.md").read_text(encoding="utf-8")
    table = text[text.index("## Suites"):text.index("**Generated GUI tasks**")]
    suites = {spec.suite for spec in all_specs()} - {"bench"} | {"screenspot", "actions"}
    missing = sorted(name for name in suites if f"| `{name}` |" not in table)
    assert not missing, f"docs/environments.md's suite table lacks {missing}"


def test_configs_aepo_3b_is_the_worked_example_of_training_md():
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    block = re.search(r"`configs/aepo-3b.toml`:\n\n```toml\n(.*?)```", text, re.S).group(1)
    on_disk = (REPO / "configs" / "aepo-3b.toml").read_text(encoding="utf-8")
    assert tomllib.loads(on_disk) == tomllib.loads(block) and on_disk.endswith(block)
    from agent.config import load_train_config

    assert load_train_config(REPO / "configs" / "aepo-3b.toml").model.id  # it names its model


def test_the_script_examples_are_what_the_scripted_policy_reads():
    """--script takes a JSON list of actions: the example in docs/actions.md and docs/examples/*.json are lists
    whose every entry is a valid action."""
    import json

    from devices.actions import Action

    text = (REPO / "docs" / "actions.md").read_text(encoding="utf-8")
    example = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    for script in (example, *(json.loads(p.read_text()) for p in (REPO / "docs" / "examples").glob("*.json"))):
        assert isinstance(script, list) and script
        for entry in script:
            Action.from_dict(entry)


@pytest.mark.timeout(SLOW_S + 120)  # the tiny model's two steps take a minute or two on a loaded machine
def test_recording_md_records_where_its_training_command_reads(clone: Path, monkeypatch, capsys):
    """docs/recording.md's record-then-train block, one command after the other in the clone: `agent record` as
    written (here in this process, headless, a program playing the person on the built-in page with trusted input)
    writes where the block's `agent train` reads, and that trains on it (two steps, to be quick)."""
    import asyncio

    from agent.cli import main as agent_main
    from tests.support.person import play_once_started

    (block,) = [b for b in BLOCKS if b.doc.name == "recording.md" and len(b.commands) == 2
                and [first_word(c) + " " + c.split()[1] for c in b.commands] == ["agent record", "agent train"]]
    record, train = (strip_comment(c) for c in block.commands)

    async def play(recorder) -> None:
        page = recorder.device.page

        async def click(selector: str) -> None:
            box = await page.locator(selector).bounding_box()
            await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            await asyncio.sleep(0.5)

        await click("#email")
        await page.keyboard.type("alice@example.com")
        await click("#password")
        await page.keyboard.type("hunter22")
        await click("#signin")
        await page.keyboard.press("Control+Alt+s")

    errors = play_once_started(monkeypatch, play)
    before = set((clone / "runs").iterdir()) if (clone / "runs").exists() else set()
    monkeypatch.chdir(clone)
    try:
        code = agent_main([*shlex.split(record)[1:], "--headless"])
        out = capsys.readouterr().out
        assert not errors and code == 0, (errors, out)
        result = run(f"{train} --set train.steps=2", clone, SLOW_S)
        log = result.stdout + result.stderr
        assert result.returncode == 0 and "Traceback" not in log, log[-3000:]
        (demo,) = (clone / "runs" / "demos").iterdir()
        (trained,) = set((clone / "runs").iterdir()) - before - {clone / "runs" / "demos"}
        assert (demo / "ep0000" / "steps.jsonl").exists() and (trained / "metrics.jsonl").exists(), log[-3000:]
    finally:
        for made in set((clone / "runs").iterdir()) - before if (clone / "runs").exists() else ():
            shutil.rmtree(made)


WALKTHROUGH = ("training.md", "online.md", "fleet.md")
"""The pages a newcomer follows in order to train and use a model: each continues the one before."""


def _agent_words(command: str) -> list[str]:
    """The agent subcommand and its arguments (``accelerate launch ... -m agent.cli train ...`` too), or []."""
    words = shlex.split(strip_comment(command))
    if words and first_word(command) == "agent":
        return words[1:]
    for i, w in enumerate(words[:-1]):
        if w == "-m" and words[i + 1] in ("agent", "agent.cli"):
            return words[i + 2:]
    return []


def _walk(command: str) -> tuple[str | None, bool, str, list[tuple[str, str]]]:
    """What one command of the walkthrough does with run folders: (the folder it writes, None for a new
    timestamped one or none at all; whether it continues that folder; what it leaves there, "adapter" or "model";
    the paths it reads, each with what it must be: "run", "adapter", "model")."""
    from agent.config import load_train_config, parse_override

    words = _agent_words(command)
    if not words:
        lora = re.search(r"--lora-modules \S+?=(\S+)", command)  # vllm serve ... g1=runs/x/adapter
        return None, False, "", [(lora.group(1), "adapter")] if lora else []
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    flag = {w: words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else ""
            for i, w in enumerate(words) if w.startswith("--")}
    if words[0] in ("train", "learner"):
        cfg = load_train_config(REPO / flag["--config"] if "--config" in flag else None, sets)
        run_dir = flag.get("--run-dir") or cfg.train.run_dir or None
        resume = "--resume" in flag
        if resume and flag["--resume"]:
            run_dir = flag["--resume"]
        reads = [(v, "model" if cfg.model.finetune == "full" or v.endswith("/model") else "run")
                 for v in (cfg.model.id,) if v.startswith("runs/")]
        reads += [(cfg.model.adapter, "adapter")] if cfg.model.adapter.startswith("runs/") else []
        return run_dir, resume, "adapter" if cfg.model.finetune == "lora" else "model", reads
    reads = [(flag["--adapter"], "adapter")] if flag.get("--adapter", "").startswith("runs/") else []
    policy = flag.get("--policy", "")
    if policy.startswith("transformers:runs/"):
        reads.append((policy.removeprefix("transformers:"), "run"))
    for text in sets:
        section, key, value = parse_override(text)
        if (section, key) == ("model", "adapter") and str(value).startswith("runs/"):
            reads.append((str(value), "adapter"))
    return None, False, "", reads


def test_the_training_walkthrough_makes_every_folder_before_it_is_used():
    """docs/training.md, then docs/online.md and docs/fleet.md, followed in order as written (the GPU commands
    included): no new run goes into a folder an earlier command filled (a fresh run refuses one that holds
    checkpoints, a new online session one that is not empty), and every run folder, adapter or model folder a
    command loads or continues was written before, with the weights its fine-tuning mode leaves (a full fine-tune
    writes model/, a LoRA run adapter/)."""
    written: dict[str, str] = {}  # run folder -> "adapter" or "model"
    problems = []
    for block in (b for name in WALKTHROUGH for b in BLOCKS if b.doc.name == name):
        for command in block.commands:
            run_dir, resume, leaves, reads = _walk(command)
            for path, kind in reads:
                parts = path.rstrip("/").split("/")
                run, sub = ("/".join(parts[:-1]), parts[-1]) if parts[-1] in ("adapter", "model") else (path, "")
                has = written.get(run)
                if has is None:
                    problems.append(f"{block.where}: {path} is used before any command wrote {run}")
                elif (sub and sub != has) or (kind in ("adapter", "model") and has != kind):
                    problems.append(f"{block.where}: {path} is used as {kind}, but {run} holds {has}/")
            if run_dir is None:
                continue
            if resume and run_dir not in written:
                problems.append(f"{block.where}: --resume {run_dir}, which no earlier command wrote")
            elif not resume and run_dir in written:
                problems.append(f"{block.where}: a new run into {run_dir}, which an earlier command filled")
            written[run_dir] = leaves
    assert not problems, "\n".join(problems)
