"""Every command that needs an optional extra says which, and exits 2 without a traceback, when
the extra is not installed. Each case runs `bluedove` in a fresh interpreter in which the
extra's modules cannot be imported (an import hook refuses them, as a missing package would)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bluedove.runtime.extras import EXTRAS, missing

BLOCKED_RUN = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in BLOCKED: raise ModuleNotFoundError(name, name=name)\n"
    "sys.meta_path.insert(0, Block())\n"
    "from bluedove.cli.main import main\n"
    "main(sys.argv[1:])\n"
)


def run_without(blocked: tuple[str, ...], argv: list[str], cwd) -> subprocess.CompletedProcess:
    code = f"BLOCKED = {list(blocked)!r}\n" + BLOCKED_RUN
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


CASES = {
    "export": (("pyarrow",), "spark",
               ["export", "catalogue", "--store", "redis://127.0.0.1:9/0", "--out", "OUT"]),
    "seed": (("pyspark",), "spark",
             ["seed", "--subscriptions", "S", "--messages", "M", "--matchers", "2", "--out", "seed.json"]),
    "up --tls": (("cryptography",), "tls",
                 ["up", "--tls", "self-signed", "--matchers", "1", "--data-dir", "DATA"]),
    "autoscaler": (("kubernetes",), "kubernetes",
                   ["autoscaler", "--store", "redis://127.0.0.1:9/0", "--statefulset", "bluedove-matcher"]),
    "bench": (("psutil",), "lab", ["bench", "backpressure"]),
    "bench seed": (("pyspark",), "spark", ["bench", "seed"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_command_without_its_extra_names_it_and_exits_2(case, tmp_path):
    blocked, extra, argv = CASES[case]
    argv = [str(tmp_path / a) if a in ("OUT", "DATA") else a for a in argv]
    run = run_without(blocked, argv, tmp_path)
    assert run.returncode == 2, (run.returncode, run.stdout[-2000:], run.stderr[-3000:])
    assert f"pip install 'bluedove[{extra}]'" in run.stderr, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert not list(tmp_path.iterdir()), "nothing is written before the check"


def test_with_the_extras_installed_nothing_is_missing():
    """The test extra installs every other extra: the check finds them all (so it can tell)."""
    assert {extra: missing(extra) for extra in EXTRAS} == {extra: [] for extra in EXTRAS}
