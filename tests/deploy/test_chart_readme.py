"""The chart's README.md: generated from values.yaml by scripts/gen_chart_readme.py, it is what the
script writes now; its table has every value of values.yaml with its real default and the
comment values.yaml gives it; and a value without a comment is refused."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import script

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "bluedove"
README = CHART / "README.md"
VALUES = CHART / "values.yaml"
ROW = re.compile(r"^\| `([^`]+)` \| (`+) ?(.*?) ?\2 \| (.*) \|$")


def generator():
    return script("gen_chart_readme")


def table(text: str) -> dict[str, tuple[str, str]]:
    """The README's value rows, read from the Markdown itself: key -> (default, description)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            assert m[1] not in rows, f"{m[1]}: two rows"
            default = m[3].replace("\\|", "|")
            description = m[4].replace("\\|", "|").replace("&lt;", "<").replace("&gt;", ">")
            rows[m[1]] = (default, description)
    return rows


def leaves(node: dict, prefix: str = ""):
    """Every leaf of values.yaml: a scalar, a list, or an empty map, by dotted path."""
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def omitted(shown, value) -> int | None:
    """How many items were left off value to show it as shown (at any depth, each left-off item
    counted once whatever it holds); None when shown is not value with items left off the end."""
    if isinstance(value, (dict, list)):
        if type(shown) is not type(value) or len(shown) > len(value):
            return None
        if isinstance(value, dict):
            if list(shown) != list(value)[:len(shown)]:
                return None
            pairs = [(shown[k], value[k]) for k in shown]
        else:
            pairs = list(zip(shown, value, strict=False))
        inner = [omitted(a, b) for a, b in pairs]
        return None if None in inner else len(value) - len(shown) + sum(inner)
    return 0 if shown == value else None


def lookup(data: dict, path: str):
    node = data
    for part in path.split("."):
        assert isinstance(node, dict) and part in node, f"{path}: no such key in values.yaml"
        node = node[part]
    return node


def test_the_readme_is_what_the_generator_writes():
    """A hand edit of the README, or a values.yaml change without rerunning the script, fails
    here: run `python scripts/gen_chart_readme.py`."""
    assert README.read_text(encoding="utf-8") == generator().text(), "run python scripts/gen_chart_readme.py"


def test_check_exits_1_when_the_readme_is_out_of_date(tmp_path, monkeypatch, capsys):
    gen = generator()
    out = tmp_path / "README.md"
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "OUTPUT", out)
    monkeypatch.setattr(sys, "argv", ["gen_chart_readme.py", "--check"])
    assert gen.main() == 1  # missing
    out.write_text(README.read_text(encoding="utf-8").replace("| `matcher.replicas` | `2` |",
                                                              "| `matcher.replicas` | `3` |"), encoding="utf-8")
    assert gen.main() == 1  # one default changed by hand
    assert "is not what scripts/gen_chart_readme.py generates" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["gen_chart_readme.py"])
    assert gen.main() == 0
    monkeypatch.setattr(sys, "argv", ["gen_chart_readme.py", "--check"])
    assert gen.main() == 0
    assert out.read_text(encoding="utf-8") == README.read_text(encoding="utf-8")


def test_the_introduction_says_how_to_install_and_where_the_guide_is():
    text = README.read_text(encoding="utf-8")
    intro = text[:text.index("## Values")]
    assert "helm install bluedove deploy/helm/bluedove" in intro
    assert "`docs/kubernetes.md`" in intro
    assert (ROOT / "docs" / "kubernetes.md").exists()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"Chart version {chart['version']}" in intro and chart["description"] in intro


def test_every_leaf_value_is_in_the_table_with_its_default():
    """Each leaf of values.yaml is a row of its own, or belongs to a map the table lists as one
    value; every row names a key of values.yaml; and a default shown whole reads back (as YAML)
    as the value in values.yaml."""
    data = yaml.safe_load(VALUES.read_text())
    rows = table(README.read_text(encoding="utf-8"))
    assert len(rows) > 100  # the table was read at all
    missing = [path for path, _ in leaves(data)
               if not any(path == key or path.startswith(f"{key}.") for key in rows)]
    assert missing == [], "values.yaml leaves not in the README table"
    for key, (default, _) in rows.items():
        value = lookup(data, key)
        if "…" in default:  # a long map or list, cut: what is shown is its first items, the rest counted
            assert isinstance(value, (dict, list)) and len(default) <= 100, key
            more = sum(int(n) for n in re.findall(r", … \+(\d+) more", default))
            shown = yaml.safe_load(re.sub(r", … \+\d+ more", "", default))
            assert 0 < more == omitted(shown, value), f"{key}: {default!r} is not {value!r} cut short"
        else:
            assert yaml.safe_load(default) == value, f"{key}: README default {default!r}, values.yaml {value!r}"


def test_every_row_has_the_comment_values_yaml_gives_its_key():
    """Each `## @param key text` of values.yaml (read here with a regex, apart from the
    generator's parser) is the description of key's row, and no row is without one."""
    text = VALUES.read_text()
    params = dict(re.findall(r"^\s*## @param (\S+) (.+)$", text, re.MULTILINE))
    rows = table(README.read_text(encoding="utf-8"))
    assert [key for key, (_, description) in rows.items() if not description.strip()] == []
    assert sorted(set(params) - set(rows)) == [], "@param keys of values.yaml without a README row"
    for key, text in params.items():
        assert rows[key][1] == text.strip(), key


@pytest.mark.parametrize("line", [
    "  ## @param matcher.replicas Matcher pods when the autoscaler is off",
    "  ## @param dispatcher.resources Requests and limits of the dispatcher container",
])
def test_a_value_without_a_comment_is_refused(line):
    """Taking one value's comment away makes the generator fail, naming the value (for a map
    documented as one value, its leaves are then values without a comment)."""
    gen = generator()
    text = VALUES.read_text()
    lines = [x for x in text.splitlines(keepends=True) if not x.startswith(line)]
    assert len(lines) == len(text.splitlines()) - 1, f"not in values.yaml: {line}"
    key = line.split()[2]
    with pytest.raises(gen.ValuesError, match=re.escape(key)):
        gen.render("".join(lines), yaml.safe_load((CHART / "Chart.yaml").read_text()))


def test_comments_are_read_above_a_key_or_trailing_its_line():
    gen = generator()
    text = """## BlueDove (a file's header, apart from the first key by a blank line)

## @param a A's text,
## over two lines
a: 1
b: "x # not a comment"  # B's text
# C's text, a plain comment
c: {d: 1, e: [1, 2]}
f:
  ## @param f.g G's text
  g: |
    two
    lines
  h: []  # H's text
"""
    assert gen.values(text) == [
        gen.Value("a", 1, "A's text, over two lines"),
        gen.Value("b", "x # not a comment", "B's text"),
        gen.Value("c", {"d": 1, "e": [1, 2]}, "C's text, a plain comment"),
        gen.Value("f.g", "two\nlines\n", "G's text"),
        gen.Value("f.h", [], "H's text"),
    ]
    with pytest.raises(gen.ValuesError, match=r"line 2: the comment of b is `@param a`"):
        gen.values("## @param a A\nb: 1\n")


def test_defaults_are_short_yaml():
    gen = generator()
    assert gen.short({"a": "1", "b": "a, b", "c": "", "d": None, "e": "250m", "f": True}) == \
        '{a: "1", b: "a, b", c: "", d: null, e: 250m, f: true}'
    long = gen.short([{"name": f"x{i}", "min": 0, "max": 1000} for i in range(10)])
    assert long.startswith("[{name: x0, min: 0, max: 1000}, ") and long.endswith(" more]")
    assert len(long) <= gen.DEFAULT_WIDTH
