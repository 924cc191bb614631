"""The report formats behind one interface: a renderer turns a model (summary, regression, or
history from ``history.report``) into text; the model's ``kind`` picks the function, no format
asks what a model is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fi_attn_bench.summarizer.markdown import regression_markdown, summary_markdown
from fi_attn_bench.summarizer.output import model_json
from fi_attn_bench.summarizer.terminal import regression_console, summary_console


@dataclass(frozen=True)
class Renderer:
    """One format: its text of each kind of model it renders (None: a kind it does not)."""

    name: str
    summary: Callable[..., str] | None = None
    regression: Callable[..., str] | None = None
    history: Callable[..., str] | None = None

    def render(self, model, *args, **kwargs) -> str:
        function = getattr(self, model.kind.value)
        if function is None:
            raise TypeError(f"the {self.name} format renders no {model.kind.value} model")
        return function(model, *args, **kwargs)


MARKDOWN = Renderer("markdown", summary_markdown, regression_markdown)
TERMINAL = Renderer("terminal", summary_console, regression_console)
JSON = Renderer("json", model_json, model_json)
