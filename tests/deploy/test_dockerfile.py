"""The Dockerfile, without a Docker engine: hadolint's rules checked on the parsed file, and the
commands it runs run here (the build stage's `pip wheel`, the runtime's `pip install`, the numba
warm-up), so that a command that would break the image build breaks this test first.

The file is parsed by `dockerfile`, which wraps BuildKit's own parser (the one `docker build`
uses): a line it reads differently from us is read as Docker reads it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import dockerfile
import pytest

ROOT = Path(__file__).resolve().parents[2]
USER = "10001"


def instructions() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(ROOT / "Dockerfile")))


def stages() -> list[list[dockerfile.Command]]:
    """The instructions of each stage, FROM first (instructions before the first FROM: none allowed)."""
    out: list[list[dockerfile.Command]] = []
    for c in instructions():
        if c.cmd == "FROM":
            out.append([c])
        else:
            assert out, f"line {c.start_line}: {c.cmd} before the first FROM"
            out[-1].append(c)
    return out


def stage_name(stage: list[dockerfile.Command]) -> str | None:
    v = stage[0].value
    return v[2] if len(v) == 3 and v[1].upper() == "AS" else None


def runs(stage: list[dockerfile.Command]) -> list[tuple[dockerfile.Command, str]]:
    """(instruction, shell text) of every RUN of a stage (exec-form RUNs joined back into one line)."""
    return [(c, shlex.join(c.value) if c.json else " ".join(c.value)) for c in stage if c.cmd == "RUN"]


def commands_in(shell: str) -> list[list[str]]:
    """The simple commands of a RUN line: split on &&, ||, ; and pipes, line continuations removed."""
    lexer = shlex.shlex(shell.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    out: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            out.append([])
        else:
            out[-1].append(token)
    return [cmd for cmd in out if cmd]


def the_command(stage: list[dockerfile.Command], *head: str) -> list[str]:
    """The one command of the stage that starts with `head` (e.g. "pip", "wheel")."""
    found = [cmd for _, text in runs(stage) for cmd in commands_in(text) if tuple(cmd[:len(head)]) == head]
    assert len(found) == 1, f"expected one `{' '.join(head)}` in stage {stage_name(stage)!r}, found {found}"
    return found[0]


def env_of(stage: list[dockerfile.Command]) -> dict[str, str]:
    out = {}
    for c in stage:
        if c.cmd == "ENV":
            out.update(zip(c.value[0::2], c.value[1::2]))
    return out


# -- hadolint's rules ----------------------------------------------------------------------------


def test_two_stages_a_named_build_and_the_runtime():
    build, runtime = stages()  # more or fewer stages: the rules below would need another look
    assert stage_name(build) == "build"
    assert stage_name(runtime) is None


def test_every_base_image_is_pinned():
    """DL3006/DL3007: an exact version tag (python:X.Y.Z-…) or a digest, never `latest` or none."""
    for stage in stages():
        image = stage[0].value[0]
        assert "$" not in image, f"{image}: an ARG in FROM cannot be checked here"
        if "@sha256:" in image:
            assert re.fullmatch(r"[\w./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}", image), image
            continue
        name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{image}: pin an exact tag or a digest"
        assert re.match(r"\d+\.\d+\.\d+", tag), f"{image}: {tag} is not an exact version (python:3.11.14-…)"


def test_both_stages_run_the_same_python():
    """The wheels are built for the build stage's Python (cp311 …): the runtime must be the same."""
    versions = {re.match(r"\d+\.\d+\.\d+", s[0].value[0].partition(":")[2]).group() for s in stages()}
    assert len(versions) == 1, versions


def test_the_runtime_runs_as_the_charts_user_not_root():
    """DL3002: the last USER of the final stage is not root; the chart runs pods as 10001."""
    runtime = stages()[-1]
    users = [c.value[0] for c in runtime if c.cmd == "USER"]
    assert users, "no USER in the final stage: it would run as root"
    assert users[-1] == f"{USER}:{USER}", users[-1]
    adds = [cmd for _, t in runs(runtime) for cmd in commands_in(t) if cmd[0] in ("useradd", "groupadd")]
    assert any(c[0] == "useradd" and "--uid" in c and c[c.index("--uid") + 1] == USER for c in adds), adds
    assert any(c[0] == "groupadd" and "--gid" in c and c[c.index("--gid") + 1] == USER for c in adds), adds


def test_pip_and_apt_follow_the_rules():
    """DL3042 pip without a cache; DL3015 apt-get install --no-install-recommends; no upgrade (DL3005)."""
    for stage in stages():
        for c, text in runs(stage):
            for cmd in commands_in(text):
                where = f"line {c.start_line}: {shlex.join(cmd)}"
                if cmd[:2] in (["pip", "install"], ["pip", "wheel"]):
                    assert "--no-cache-dir" in cmd, where
                if cmd[:1] in (["apt-get"], ["apt"]):
                    assert "upgrade" not in cmd and "dist-upgrade" not in cmd, where
                    if "install" in cmd:
                        assert "--no-install-recommends" in cmd and "-y" in cmd, where


def test_workdirs_are_absolute_and_files_come_by_copy():
    """DL3000 absolute WORKDIR; DL3020 COPY, not ADD, for local files; no ADD at all here."""
    for c in instructions():
        if c.cmd == "WORKDIR":
            assert c.value[0].startswith("/"), f"line {c.start_line}: WORKDIR {c.value[0]}"
        assert c.cmd != "ADD", f"line {c.start_line}: use COPY"


def test_the_entrypoint_is_bluedove_in_exec_form():
    """Exec form: bluedove is PID 1 and gets SIGTERM itself (a matcher leaves on it)."""
    runtime = stages()[-1]
    [entry] = [c for c in runtime if c.cmd == "ENTRYPOINT"]
    [cmd] = [c for c in runtime if c.cmd == "CMD"]
    assert entry.json and entry.value == ("bluedove",)
    assert cmd.json and cmd.value == ("--help",)
    [expose] = [c for c in runtime if c.cmd == "EXPOSE"]
    assert sorted(expose.value) == sorted(("7001", "7002", "8080", "50051"))  # docs: the deployment contract


def test_the_runtime_environment():
    env = env_of(stages()[-1])
    assert {k: env.get(k) for k in ("NUMBA_CACHE_DIR", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")} == {
        "NUMBA_CACHE_DIR": "/tmp/numba-cache", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    assert env.get("NUMBA_CPU_NAME") == "generic"  # see test_the_numba_warm_up_compiles_what_a_matcher_runs


def test_the_runtime_takes_only_wheels_from_the_build_stage_and_installs_no_build_tools():
    build, runtime = stages()
    from_build = [(c.cmd, c.flags, c.value) for c in runtime if any(f.startswith("--from=") for f in c.flags)]
    assert [x for x in from_build if x[0] == "COPY"] == [], "a COPY --from=build would keep the wheels in a layer"
    mounts = [f for c in runtime if c.cmd == "RUN" for f in c.flags if f.startswith("--mount=")]
    for m in mounts:
        opts = dict(kv.split("=", 1) for kv in m.removeprefix("--mount=").split(","))
        assert opts.get("from") == stage_name(build) and opts.get("source") == "/wheels", m
    assert len(mounts) == 1
    install = the_command(runtime, "pip", "install")
    assert {"--no-cache-dir", "--no-index"} <= set(install)
    assert install[install.index("--find-links") + 1] == "/wheels"
    [spec] = [a for a in install[2:] if not a.startswith("-") and a != "/wheels"]
    assert spec == "bluedove[kubernetes]", "the kubernetes extra only: not lab, plots or test"
    for _, text in runs(runtime):  # the slim base has no compiler; none may be installed
        for cmd in commands_in(text):
            assert cmd[0] not in ("apt-get", "apt", "gcc", "cc", "make"), f"{shlex.join(cmd)} in the final stage"


# -- .dockerignore ---------------------------------------------------------------------------------


def ignore_patterns() -> list[str]:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    pats = [ln for ln in lines if ln and not ln.startswith("#")]
    assert not [p for p in pats if p.startswith("!")], "exceptions: teach ignored() about them first"
    return pats


def _regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as Docker reads it: relative to the context, `*` within a name,
    `**` across directories."""
    out, i, p = "", 0, pattern.strip("/")
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out)


def ignored(path: str, patterns: list[str]) -> bool:
    """Excluded from the build context: the path or one of its parent directories matches."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return any(_regex(p).fullmatch(pre) for p in patterns for pre in prefixes)


@pytest.mark.parametrize("path", [
    ".venv/bin/python", ".git/HEAD", "bluedove/matcher/__pycache__/packed.cpython-311.pyc",
    "bluedove.egg-info/PKG-INFO",
    ".pytest_cache/v/cache/nodeids", ".hypothesis/examples/x", ".benchmarks/run.json", "build/lib/x.py",
    ".bluedove/redis/appendonly.aof", "some/dir/.bluedove/logs/m1.log", "tests/unit/test_layers.py",
])
def test_the_context_leaves_out(path):
    assert ignored(path, ignore_patterns())


def test_the_context_keeps_what_the_wheel_needs():
    """pyproject.toml, the README (the package's long description) and every package."""
    keep = ["pyproject.toml", "README.md", "bluedove/dispatcher/static/dashboard.html", "bluedove/v1/matcher_pb2.py",
            "bluedove/matcher/packed.py", "bluedove/gossip/__init__.py", "bluedove/autoscaler/kubernetes.py",
            "bluedove/lab/__init__.py"]
    assert [p for p in keep if ignored(p, ignore_patterns())] == []


def build_context(dest: Path) -> Path:
    """What `docker build .` sends: the tracked and untracked files less .dockerignore's."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    patterns = ignore_patterns()
    for rel in listed:
        src = ROOT / rel
        if src.is_file() and not ignored(rel, patterns):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


# -- the commands, run as the image build runs them ----------------------------------------------


def as_here(cmd: list[str], python: str, wheels: Path) -> list[str]:
    """A `pip …` command of the Dockerfile, for `python`'s pip, with /wheels replaced by `wheels`."""
    assert cmd[0] == "pip"
    return [python, "-m", "pip", *(str(wheels) if a == "/wheels" else a for a in cmd[1:])]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The build stage's `pip wheel` on the build context, restricted to the project (--no-deps):
    the dependencies' wheels are PyPI's, and the context is what decides whether ours builds."""
    build, _ = stages()
    cmd = the_command(build, "pip", "wheel")
    assert "--no-cache-dir" in cmd and cmd[cmd.index("--wheel-dir") + 1] == "/wheels"
    assert [c.value[0] for c in build if c.cmd == "WORKDIR"] == ["/src"]
    assert [c.value for c in build if c.cmd == "COPY"] == [(".", ".")]
    context = build_context(tmp_path_factory.mktemp("context"))
    out = tmp_path_factory.mktemp("wheels")
    run = subprocess.run([*as_here(cmd, sys.executable, out), "--no-deps"], cwd=context,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [whl] = out.glob("bluedove-*.whl")  # a second wheel would mean --no-deps was not honoured
    return whl


def test_the_wheel_holds_the_package_data_and_declares_the_kubernetes_extra(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        eps = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for must in ("bluedove/dispatcher/static/dashboard.html", "bluedove/v1/matcher_pb2.py",
                 "bluedove/v1/matcher_pb2_grpc.py",
                 "bluedove/v1/pubsub_pb2_grpc.py", "bluedove/v1/gossip_pb2.py", "bluedove/matcher/packed.py",
                 "bluedove/autoscaler/kubernetes.py", "bluedove/cli/main.py"):
        assert must in names, f"{must} is not in {wheel.name}"
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
    assert "Provides-Extra: kubernetes" in meta
    assert re.search(r'^Requires-Dist: kubernetes>=\S+; extra == "kubernetes"$', meta, re.M), meta
    assert "bluedove = bluedove.cli.main:main" in eps


def test_the_runtime_install_of_the_wheel_gives_the_entry_point(wheel, tmp_path):
    """The runtime's `pip install --no-index --find-links /wheels 'bluedove[kubernetes]'` into a
    fresh venv (with --no-deps: only our wheel is in the directory): the `bluedove` script is there
    and calls the CLI, and the dashboard's static file is installed beside the dispatcher."""
    _, runtime = stages()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    cmd = [*as_here(the_command(runtime, "pip", "install"), str(python), wheel.parent), "--no-deps"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    script = (env_dir / "bin" / "bluedove").read_text()
    assert script.startswith(f"#!{python}") and "from bluedove.cli.main import main" in script, script
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(site) / "bluedove" / "dispatcher" / "static" / "dashboard.html").is_file()
    assert (Path(site) / "bluedove" / "v1" / "matcher_pb2.py").is_file()


def test_every_role_starts_without_the_lab_and_plots_extras():
    """The image has the kubernetes extra only: `bluedove --help` and each role's help must not
    need psutil, aiohttp or matplotlib (the lab's commands are added by entry point at start)."""
    blocked = ["psutil", "aiohttp", "matplotlib"]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}: raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from bluedove.cli.main import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as e:\n"
        "    sys.exit(e.code)\n"
    )
    for role in ([], ["matcher"], ["dispatcher"], ["autoscaler"], ["init"]):
        run = subprocess.run([sys.executable, "-c", code, *role, "--help"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        if role == ["init"] and "invalid choice: 'init'" in run.stderr:
            continue  # `bluedove init` is not in every version of the CLI yet
        assert run.returncode == 0, (role, run.stderr[-2000:])
        assert "usage: bluedove" in run.stdout


def warm_up_code() -> str:
    _, runtime = stages()
    [code] = [cmd[2] for _, text in runs(runtime) for cmd in commands_in(text) if cmd[:2] == ["python", "-c"]]
    return code


def test_the_numba_warm_up_compiles_what_a_matcher_runs(tmp_path):
    """The image compiles the index walk and the typed filters' check at build time (as the
    runtime user, into NUMBA_CACHE_DIR, for the generic CPU). A matcher's SubscriptionSet (a
    typed one too) must then find every kernel it calls in that cache: a miss means the warm-up
    compiled another signature (other array types or layouts) and each matcher would compile
    again at start."""
    code = warm_up_code()
    ast.parse(code)
    env = {**os.environ, **{k: v for k, v in env_of(stages()[-1]).items() if k.startswith("NUMBA_")},
           "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    cached = sorted(p.name for p in (tmp_path / "numba-cache").rglob("*.nbc"))
    assert cached, "the warm-up cached nothing"
    matcher_like = (
        "import json, numpy as np\n"
        "from bluedove.matcher.index import SubscriptionSet\n"
        "from bluedove.matcher.forest import _walk_levels\n"
        "from bluedove.matcher.packed import _per_slab, _query, _scan, _tile\n"
        "rng = np.random.default_rng(7)\n"
        "s = SubscriptionSet(4)\n"
        "lows = rng.uniform(0, 900, (5001, 4)); highs = lows + rng.uniform(1, 100, (5001, 4))\n"
        "first = SubscriptionSet(4)\n"
        "first.add('only', 'q', lows[0].tolist(), highs[0].tolist())\n"
        "first.match_batch(rng.uniform(0, 1000, (100, 4)))  # a buffer alone: the scan\n"
        "s.add_many([f's{i}' for i in range(5000)], ['q'] * 5000, lows[:5000], highs[:5000])\n"
        "s.match_batch(rng.uniform(0, 1000, (100, 4)))  # one tree: its walk\n"
        "s.add('last', 'q', lows[5000].tolist(), highs[5000].tolist())\n"
        "assert s._levels.trees and s._levels.b_live, 'a tree and a buffer: the levels walked together'\n"
        "s.match_batch(rng.uniform(0, 1000, (100, 4)))\n"
        "from bluedove.core.attributes import NUMBER, STRING, Attribute\n"
        "from bluedove.core.model import build_subscription\n"
        "from bluedove.core.space import Space\n"
        "from bluedove.matcher.filter_book import FilterBook, _pairs, _keep\n"
        "from bluedove.matcher.filter_check import _needed, _evaluate\n"
        "from bluedove.matcher import group_match as gm, groups as gr\n"
        "from bluedove.matcher.matches import _count\n"
        "space = Space.of((Attribute('city', STRING), Attribute('v', NUMBER, False, 0, 100)), ('v',))\n"
        "book, t = FilterBook(space), SubscriptionSet(space.k)\n"
        "t.book = book\n"
        "for i in range(50):  # typed: a string condition checked after the walk, filters shared\n"
        "    preds = {'city': {'in': ['oslo', f'c{i % 5}']}, 'v': [i % 9, i % 9 + 20]}\n"
        "    sub = build_subscription(f't{i}', f'q{i % 7}', preds, space)\n"
        "    book.learn(sub)\n"
        "    rows = sub.rows()\n"
        "    if i % 2:\n"
        "        for key, lo, hi in rows:\n"
        "            t.add(key, sub.queue, lo, hi)\n"
        "    else:\n"
        "        lo, hi = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])\n"
        "        t.add_many([r[0] for r in rows], [sub.queue] * len(rows), lo, hi)\n"
        "msgs = [{'city': 'oslo' if j % 2 else 'rome', 'v': j} for j in range(60)]\n"
        "pts = np.array([[m['v']] for m in msgs], dtype=float)\n"
        "t.groups.flat_min = 0\n"
        "t.match(pts, msgs.__getitem__); t.count(pts, msgs.__getitem__); t.match_ids(pts); t.coverage(0, [5.0])\n"
        "book.forget(['t1'])  # rows whose filter the book forgot: entry by entry\n"
        "t.match(pts, msgs.__getitem__); t.count(pts, msgs.__getitem__)\n"
        "t.remove_many([k for k in t.ids() if k.startswith('t3#')])\n"
        "fns = (_query, _scan, _walk_levels, _tile, _per_slab, _pairs, _keep, _needed, _evaluate, _count, gm._stale,\n"
        "       gm._resolve, gm._any_mixed, gm._pairs, gm._kept_members, gr._link, gr._unlink,\n"
        "       gr._expand, gr._members, gr._flatten)\n"
        "name = lambda f: f.__module__.rsplit('.', 1)[-1] + '.' + f.__name__\n"
        "print(json.dumps({name(f): [len(f.stats.cache_hits), len(f.stats.cache_misses)] for f in fns}))\n"
    )
    run = subprocess.run([sys.executable, "-c", matcher_like], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    assert stats["packed._query"] == [1, 0], f"(hits, misses) of the index walk: {stats}"
    assert stats["packed._scan"] == [1, 0], f"(hits, misses) of the buffer's scan: {stats}"
    assert stats["forest._walk_levels"] == [1, 0], f"(hits, misses) of the levels' walk: {stats}"
    assert stats["packed._tile"] == stats["packed._per_slab"] == [1, 0], f"(hits, misses) of packing: {stats}"
    assert all(v == [1, 0] for v in stats.values()), f"(hits, misses) of a typed set's groups and check: {stats}"
    assert sorted(p.name for p in (tmp_path / "numba-cache").rglob("*.nbc")) == cached, "compiled again"
