"""The person at the other end: who says yes to a risky action and answers the agent's questions.

``TerminalPerson`` asks on the terminal (the CLI uses it when stdin is a terminal); ``CallbackPerson``
wraps a program's own functions; no person at all (``None``) means nobody can say yes, so actions
that need a yes are refused and an ``ask_user`` ends the episode. The runner asks; guards only say
what needs asking.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Person(Protocol):
    async def confirm(self, question: str) -> bool:
        """Yes or no to ``question`` (an action the guard wants confirmed)."""
        ...

    async def answer(self, question: str) -> str:
        """The person's answer to the agent's ``question`` (an ``ask_user`` action)."""
        ...


class TerminalPerson:
    """Asks on the terminal (rich prompts, in a worker thread so the event loop keeps running). The question is
    shown as text, never as markup: it holds a model's words and a page's text."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)

    async def confirm(self, question: str) -> bool:
        from rich.prompt import Confirm
        from rich.text import Text

        prompt = Text.assemble(("confirm: ", "bold yellow"), question, " Go ahead?")
        return await asyncio.to_thread(Confirm.ask, prompt, console=self.console, default=False)

    async def answer(self, question: str) -> str:
        from rich.prompt import Prompt
        from rich.text import Text

        prompt = Text.assemble(("the agent asks: ", "bold cyan"), question)
        return await asyncio.to_thread(Prompt.ask, prompt, console=self.console, default="")


class CallbackPerson:
    """A program's answers: ``confirm(question) -> bool`` and ``answer(question) -> str``, plain or async."""

    def __init__(self, confirm: Callable[[str], bool | Awaitable[bool]] | None = None,
                 answer: Callable[[str], str | Awaitable[str]] | None = None) -> None:
        self._confirm, self._answer = confirm, answer

    async def confirm(self, question: str) -> bool:
        if self._confirm is None:
            return False
        result = self._confirm(question)
        return bool(await result) if inspect.isawaitable(result) else bool(result)

    async def answer(self, question: str) -> str:
        if self._answer is None:
            return ""
        result = self._answer(question)
        return str(await result) if inspect.isawaitable(result) else str(result)
