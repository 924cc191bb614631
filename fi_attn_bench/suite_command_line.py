"""bench_all's own command line: ``--scripts`` and ``--resume`` parsed once into a frozen
``SuiteRequest``; every other word is the scripts' own options, parsed per script by
``command_line.parse_command_line``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.apis import registry
from fi_attn_bench.program import program_name
from fi_attn_bench.suite_record import RECORD_NAME

FACE = "bench_all.py"


@dataclass(frozen=True)
class ResumeWords:
    """What ``--resume DIR`` accepts besides the directory; ``others`` it refuses."""

    verbose: bool
    shard: str | None
    others: tuple[str, ...]


@dataclass(frozen=True)
class SuiteRequest:
    """Which scripts run (empty: all), the directory resumed, and the scripts' own words."""

    scripts: tuple[str, ...]
    resume: str | None
    script_words: tuple[str, ...]
    resume_words: ResumeWords | None  # set with --resume


def prog() -> str:
    """What the user ran: fi-attn-bench-all or bench_all.py."""
    return program_name(FACE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog(),
        description="All four benchmark scripts in one process, one CSV each in --output-dir.",
        epilog="Every other option is the scripts' own: see python bench_batch_decode.py --help.",
    )
    parser.add_argument(
        "--scripts",
        nargs="+",
        choices=registry.script_names(),
        metavar="NAME",
        help=f"which scripts, in this order (default all: {' '.join(registry.script_names())})",
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help=f"finish the interrupted run whose --output-dir is DIR (its {RECORD_NAME}, or a "
        "shard's bench_all.shardIofN.json): resume each script's CSV, run the scripts that never "
        "started; no other option but --verbose and --shard I/N",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def parse_suite_command_line(argv: Sequence[str] | None = None) -> SuiteRequest | int:
    """The request, or argparse's exit code: 0 after --help or --version, 2 after a bad
    argument."""
    try:
        own, rest = build_parser().parse_known_args(argv)
        resume_words = _resume_words(rest) if own.resume else None
    except SystemExit as exc:  # --help, --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    return SuiteRequest(tuple(own.scripts or ()), own.resume, tuple(rest), resume_words)


def _resume_words(words: Sequence[str]) -> ResumeWords:
    parser = argparse.ArgumentParser(prog=f"{prog()} --resume", add_help=False)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--shard")
    given, others = parser.parse_known_args(words)
    return ResumeWords(given.verbose, given.shard, tuple(others))
