"""Every docstring example of the user-facing packages runs and shows what it says (issue 59 item 6): doctest over
every module of symformer.positional, .attention, .facts and .teleport, one test per docstring named by its
qualified name (`symformer.positional.rope.RoPE`). An example checks something that holds for any input (a
rotation keeps norms, a core equals its reference), never a printed float that depends on BLAS; each docstring runs
with torch's global generator seeded at 0 and restored afterwards, in a scratch folder (examples that save files
write there). The negative controls run deliberately wrong docstrings through the same runner, so a wrong example
cannot pass by a runner that reports nothing; and every `>>>` line of the packages' sources must belong to a
collected example, so none is skipped silently (an example in a comment, in a string that is not a docstring, or
on an object the finder does not reach)."""

from __future__ import annotations

import doctest
import importlib
import inspect
import io
import pkgutil
import re
import textwrap
import types
from pathlib import Path

import pytest
import torch

PACKAGES = (
    "symformer.positional",
    "symformer.attention",
    "symformer.facts",
    "symformer.teleport",
    "symformer.kernels",
    "symformer.linearize",
)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules() -> list:
    """Every module of the packages (the packages themselves included), imported."""
    out = []
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        out.append(pkg)
        out += [importlib.import_module(m.name) for m in pkgutil.walk_packages(pkg.__path__, name + ".")]
    return out


def find(mod) -> list[doctest.DocTest]:
    """The docstrings of `mod` with examples, one DocTest each (doctest's finder: the module, its classes, functions,
    methods and properties; an object imported from another module is reported under that one)."""
    return [t for t in doctest.DocTestFinder(exclude_empty=True).find(mod, mod.__name__) if t.examples]


def collect() -> list[doctest.DocTest]:
    return sorted((t for mod in modules() for t in find(mod)), key=lambda t: t.name)


def run(test: doctest.DocTest) -> tuple[int, int, str]:
    """(failed, attempted, report) of one docstring's examples, seeded and with the global RNG restored."""
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        result = runner.run(test, out=out.write)
    return result.failed, result.attempted, out.getvalue()


EXAMPLES = collect()


@pytest.fixture
def builders():
    """The teleport group builders as they were: register_group_builder's example registers one."""
    from symformer.teleport import groups

    saved = dict(groups._BUILDERS)
    yield
    groups._BUILDERS.clear()
    groups._BUILDERS.update(saved)


@pytest.mark.parametrize("test", EXAMPLES, ids=lambda t: t.name)
def test_docstring_example(test, tmp_path, monkeypatch, builders):
    monkeypatch.chdir(tmp_path)
    failed, attempted, report = run(test)
    assert attempted == len(test.examples)
    assert failed == 0, f"{test.name} ({test.filename}:{test.lineno}):\n{report}"


def _planted(docstring: str) -> doctest.DocTest:
    return doctest.DocTestParser().get_doctest(textwrap.dedent(docstring), {"torch": torch}, "planted", "planted.py", 0)


@pytest.mark.parametrize(
    "docstring, expected",
    [
        (">>> 1 + 1\n3\n", "Expected:\n    3\nGot:\n    2"),  # wrong output
        (">>> torch.eye(2).sum()\ntensor(3.)\n", "Got:\n    tensor(2.)"),
        (">>> torch.allclose(torch.ones(2), torch.zeros(2))\nTrue\n", "Got:\n    False"),  # a failed check
        (">>> torch.ones(2) @ torch.ones(3)\n", "Exception raised"),  # an example that raises
        (">>> x = 1\n>>> x + 1\n2\n>>> x\n5\n", "Got:\n    1"),  # one wrong line among right ones
    ],
)
def test_a_wrong_example_fails(docstring, expected):
    failed, attempted, report = run(_planted(docstring))
    assert failed == 1 and attempted >= 1 and expected in report


def test_a_wrong_example_in_a_module_fails():
    """A planted module goes through the same finder and runner as the packages' modules."""
    mod = types.ModuleType("planted_module")
    source = textwrap.dedent(
        '''
        class Part:
            def rotate(self):
                """
                >>> Part().rotate()
                2
                """
                return 3
        '''
    )
    exec(compile(source, "planted_module.py", "exec"), mod.__dict__)
    (test,) = find(mod)
    failed, attempted, report = run(test)
    assert test.name == "planted_module.Part.rotate" and (failed, attempted) == (1, 1)
    assert "Expected:\n    2\nGot:\n    3" in report


def test_a_right_example_passes():
    assert run(_planted(">>> torch.eye(2).sum()\ntensor(2.)\n>>> print('a  b')\na b\n"))[0] == 0


def test_every_example_is_collected():
    """The `>>>` lines of each package file are exactly the examples the finder collects from that file."""
    found: dict[str, int] = {}
    for t in EXAMPLES:
        found[t.filename] = found.get(t.filename, 0) + len(t.examples)
    written = {}
    for mod in modules():
        path = inspect.getsourcefile(mod)
        written[path] = sum(1 for line in Path(path).read_text().splitlines() if re.match(r"\s*>>>", line))
    missing = {p: (n, found.get(p, 0)) for p, n in written.items() if n != found.get(p, 0)}
    assert not missing, f"file: (>>> lines, collected examples): {missing}"
    for name in PACKAGES:  # each package shows its use
        assert any(t.name.startswith(name + ".") for t in EXAMPLES), name
