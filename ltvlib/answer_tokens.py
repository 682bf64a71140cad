"""How text and answers become token ids: the one tokenisation rule every prompt and every answer follows.

A leaf module (nothing from ``ltvlib`` is imported at run time) so that the prompt builder
(:mod:`ltvlib.prompts`, which reads task data) and the task registry (:mod:`ltvlib.tasks`, which checks that a
classification task's labels start with distinct tokens) can both use it without importing each other. The names
are re-exported by :mod:`ltvlib.prompts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tasks import Task

__all__ = ["answer_ids", "text_ids"]


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids of ``text`` without special tokens (none for an empty text): prompts are concatenations of such
    pieces, so a full forward and a forward over a cached prefix see the same sequence."""
    return list(tokenizer(text, add_special_tokens=False).input_ids) if text else []


def answer_ids(tokenizer: Any, task: Task, outputs: Sequence[str]) -> list[list[int]]:
    """Token ids of each answer as it follows the query (``task.format_answer``, e.g. ``" cold"``).

    Raises:
        ValueError: an answer tokenises to nothing, or to nothing but whitespace (an empty label after the
            template's leading space would otherwise train on the bare space token); the message names it.
    """
    result = []
    for y in outputs:
        text = task.format_answer(y)
        ids = text_ids(tokenizer, text)
        if not ids:
            raise ValueError(f"label {y!r} of task {task.name!r} tokenises to nothing (answer text {text!r})")
        if not y.strip() or not tokenizer.decode(ids).strip():
            raise ValueError(
                f"label {y!r} of task {task.name!r} tokenises to whitespace only (answer text {text!r} -> ids "
                f"{ids}); every label needs at least one visible character"
            )
        result.append(ids)
    return result
