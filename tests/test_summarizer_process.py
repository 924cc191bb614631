"""The summarizer's process settings: made before numpy loads, by both entry points, and
never by a library import."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_command_line_ux import console_scripts

from fi_attn_bench.summarizer import process

ROOT = Path(__file__).resolve().parents[1]

ENTRY_POINTS = {
    "summarize_results.py": "import runpy; runpy.run_path('summarize_results.py', run_name='__main__')",
    "fi-attn-summarize": "from fi_attn_bench.summarizer.process import run; sys.exit(run())",
}

# Records the collector's state and the BLAS setting when numpy is first looked up.
_PROBE = (
    "import gc, os, sys\n"
    "seen = []\n"
    "class Probe:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'numpy':\n"
    "            seen.append((gc.isenabled(), os.environ.get('OPENBLAS_NUM_THREADS')))\n"
    "sys.meta_path.insert(0, Probe())\n"
)


def _python(code: str, **env_extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, **env_extra},
        check=True,
    )
    return done.stdout.splitlines()


def _entry_run(entry: str) -> str:
    return (
        "sys.argv = ['prog', '--version']\n"
        f"try:\n    {ENTRY_POINTS[entry]}\nexcept SystemExit as exit:\n"
        "    assert exit.code in (0, None)\n"
    )


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_the_program_is_prepared_before_numpy_loads(entry):
    shown = _python(_PROBE + _entry_run(entry) + "print(seen)\n")
    assert shown[-1] == "[(False, '1')]"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads in /proc")
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_openblas_starts_no_worker_thread_in_the_program(entry):
    """As many threads as when the user sets one BLAS thread (other libraries, pyarrow's
    pool for one, may hold threads of their own)."""
    count = "import os; print(len(os.listdir('/proc/self/task')))\n"
    code = "import sys\n" + _entry_run(entry) + count
    assert _python(code)[-1] == _python(code, OPENBLAS_NUM_THREADS="1")[-1]


def test_a_users_blas_setting_is_kept():
    code = "import sys, os\n" + _entry_run("summarize_results.py")
    code += "print(os.environ['OPENBLAS_NUM_THREADS'])\n"
    assert _python(code, OPENBLAS_NUM_THREADS="2")[-1] == "2"


def test_importing_the_summarizer_as_a_library_changes_no_setting():
    shown = _python(_PROBE + "import summarize_results\nprint(seen)\n")
    assert shown[-1] == "[(True, None)]"


def test_the_console_script_is_the_prepared_entry_point():
    assert console_scripts()["fi-attn-summarize"] == f"{process.__name__}:{process.run.__name__}"
