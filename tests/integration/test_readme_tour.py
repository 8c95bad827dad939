"""README's 5-minute tour, run verbatim with bash and curl against a real cluster: every
command works, every answer shown in full is the answer, and the tour covers every
operation of the public API (docs/api.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                                 reason="needs curl and bash")]

README = Path(__file__).resolve().parents[2] / "README.md"
# docs/api.md's operations; the tour must call each (the browser pages it must name).
OPERATIONS = [
    ("GET", "/v1/space"), ("POST", "/v1/queues"), ("DELETE", "/v1/queues/$Q"), ("POST", "/v1/subscriptions"),
    ("GET", "/v1/subscriptions/$S"), ("DELETE", "/v1/subscriptions/$S"), ("POST", "/v1/messages"),
    ("POST", "/v1/messages:batch"), ("GET", "/v1/queues/$Q/messages"), ("POST", "/v1/queues/$Q/ack"),
    ("GET", "/v1/cluster"), ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
]
BROWSER_PAGES = ["/dashboard", "/docs"]


def tour() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    return next(b for b in blocks if b.startswith("B=http://127.0.0.1:8080"))


def _closed(text: str) -> bool:
    """True when no quote is left open (bash's rules for ' and ", and for a comment: a # that
    starts a word outside quotes runs to the end of its line; enough for the tour)."""
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is None and ch == "#" and (i == 0 or text[i - 1] in " \t\n"):
            i = text.find("\n", i)
            if i < 0:
                break
        elif quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
        elif ch == "\\" and quote != "'":
            i += 1
        i += 1
    return quote is None


def commands(block: str) -> list[tuple[str, list[str]]]:
    """[(command, the comment lines right after it)]: a command runs over several lines while
    a quote is open or a line ends with a backslash."""
    out: list[tuple[str, list[str]]] = []
    cur = ""
    for line in block.splitlines():
        if not cur and line.lstrip().startswith("#"):
            if out:
                out[-1][1].append(line.lstrip())
            continue
        if not cur and not line.strip():
            continue
        cur += line + "\n"
        if cur.rstrip().endswith("\\") or not _closed(cur):
            continue
        out.append((cur.strip(), []))
        cur = ""
    assert not cur, f"unterminated command: {cur}"
    return out


def called(cmd: str) -> set[tuple[str, str]]:
    """(method, path) of each curl in a command, the path with its shell variables."""
    out = set()
    for part in re.split(r"[;|]", cmd):
        if "curl" not in part:
            continue
        method = re.search(r"-X\s*(\w+)", part)
        path = re.search(r"\$B(/[^\s\"'?]*)", part)
        if path:
            out.add(((method.group(1) if method else "GET"), path.group(1)))
    return out


def test_every_command_of_the_tour_works_verbatim(cluster):
    env = {**os.environ, "B": cluster.url}
    last = ""  # the previous command's output
    shown = ""  # the answer the README shows for the previous command (`#  {...}` below it)
    calls: set[tuple[str, str]] = set()
    for cmd, notes in commands(tour()):
        if cmd.startswith("B="):
            assert cmd.split()[0] == "B=http://127.0.0.1:8080", cmd  # as `up --http-port 8080` serves
            continue
        if re.fullmatch(r"([A-Z]=\S+…;?\s*)+", cmd):  # Q=4f1c…; T=Qm9…: values from the answer above
            answer = json.loads(last)
            for var, prefix in re.findall(r"([A-Z])=(\S+?)…", cmd):
                key = re.search(r'"(\w+)":"' + re.escape(prefix) + "…", shown)
                assert key, f"{cmd}: no value starting {prefix} in the answer shown ({shown})"
                env[var] = answer[key.group(1)]
            continue
        receipt = re.search(r'"(\d+…-\d+\.[0-9a-f]+…)"', cmd)
        if receipt:  # an ack of "1795…-0.4f1c…": the receipt of the poll just shown
            cmd = cmd.replace(receipt.group(1), json.loads(last)["messages"][0]["receipt"])
        assert "…" not in cmd, f"a placeholder the test cannot fill: {cmd}"
        calls |= called(cmd)
        proc = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
        last = proc.stdout
        if "|" in cmd:  # (a pipeline's status is its last command's: a failed curl shows as no output)
            assert last.strip(), f"{cmd}: no output"
        shown = " ".join(n[1:].strip() for n in notes if n.startswith("#  {"))
        if shown:
            if "…" in shown:  # the same fields
                answer = json.loads(last)
                for key in re.findall(r'"(\w+)":', shown):
                    assert key in json.dumps(answer), f"{cmd}: {key} not in {last}"
            else:
                assert json.loads(last) == json.loads(shown), f"{cmd}: {last} != {shown}"
        elif '"error"' in last:
            pytest.fail(f"{cmd} answered an error: {last}")
    missing = [op for op in OPERATIONS if op not in calls]
    assert not missing, f"the tour does not show {missing}"


def test_the_tour_names_the_browser_pages_and_they_are_served(api):
    block = tour()
    for page in BROWSER_PAGES:
        assert f"$B{page}" in block, page
        assert api.get(page).status_code == 200, page
