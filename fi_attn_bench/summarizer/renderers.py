"""The report formats behind one interface: a renderer turns either model, summary or
regression, into text; the model's ``kind`` picks the function, no format asks what a model is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fi_attn_bench.summarizer.markdown import regression_markdown, summary_markdown
from fi_attn_bench.summarizer.output import model_json
from fi_attn_bench.summarizer.terminal import regression_console, summary_console


@dataclass(frozen=True)
class Renderer:
    """One format: its text of a summary model and of a regression model."""

    name: str
    summary: Callable[..., str]
    regression: Callable[..., str]

    def render(self, model, *args, **kwargs) -> str:
        return getattr(self, model.kind.value)(model, *args, **kwargs)


MARKDOWN = Renderer("markdown", summary_markdown, regression_markdown)
TERMINAL = Renderer("terminal", summary_console, regression_console)
JSON = Renderer("json", model_json, model_json)
