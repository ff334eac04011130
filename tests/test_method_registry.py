"""plan.REGISTRY is the one place a method name is interpreted (issue 24, item 3).

The runner's config validation, the vLLM backend check and build, lm-eval's model_args and the engine
accept exactly the registry's names and refuse any other with their own one-line message; and no
module under src/ decides anything from a method name outside plan.py (an AST scan).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cos.engine import LOOP_MAKERS, plan_from_kwargs
from cos.lm_eval.args import check_names, member_section
from cos.plan import FAMILIES, LOOP_KINDS, REGISTRY
from cos.presets import PRESETS
from cos.runner.config import MEMBER_KEYS, run_config
from cos.runner.vllm_build import ONE_MODEL, combination_spec

SRC = Path(__file__).resolve().parents[1] / "src" / "cos"
NOT_METHODS = ["chef", "we_fast", "sd_chef", "cd_mix", "large", "WE", ""]
# files that may spell method names, and why (each an exception to keep small)
ALLOWED = {
    "plan.py": "the registry itself, and messages naming the method that applies",
    "report/grid.py": "the reproduction grid's selection of the paper's methods (data, not a parser)",
    "report/paper.py": "the paper's role of each published method (to read plan.REGISTRY when report/ changes)",
}


def section(name: str, backend: str = "hf") -> dict:
    """A method section the runner accepts for `name`: two members (one for large_model), a combination
    where the family implies none, what vLLM needs where it runs the method."""
    info = REGISTRY[name]
    keys = info.family.member_keys
    m = {"name": name, **{key: f"m{i}" for i, key in enumerate(keys)}}
    if info.family.preset is None and not info.family.one_model:
        m["combination"] = "mean"
    if backend == "vllm" and info.loop == "naive":
        m["bonus"] = "exact"
    if info.loop == "cos":
        m["gamma"] = [1, 5]
    return m


def test_the_table_is_consistent():
    assert {m.loop for m in REGISTRY.values()} == set(LOOP_KINDS) == {*LOOP_MAKERS, "standard"}  # every loop runs and is used
    assert {m.family.name for m in REGISTRY.values()} == set(FAMILIES)
    for m in REGISTRY.values():
        assert m.family.standard in REGISTRY and LOOP_KINDS[REGISTRY[m.family.standard].loop].drafts is False
        assert REGISTRY[m.family.standard].family.member_keys[0] == "model"
        assert m.family.preset is None or m.family.preset in PRESETS
    assert MEMBER_KEYS == {f: fam.member_keys for f, fam in FAMILIES.items()}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_runner_engine_and_lm_eval_accept_every_registry_name(name):
    info = REGISTRY[name]
    spec = run_config({"method": section(name)}).method
    assert spec.method == name and len(spec.members) == len(info.family.member_keys)
    assert plan_from_kwargs(name, len(spec.members), **spec.plan_kwargs).loop == info.loop
    check_names({"members": "a|b", "method": name})
    members = ["a", "b"][: info.family.n_members or 2]
    assert set(member_section(name, members)) == {"name", *info.family.member_keys}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_vllm_check_and_build_follow_the_registry_backends(name):
    info = REGISTRY[name]
    if "vllm" not in info.backends:
        fam = info.family.name
        with pytest.raises(ValueError, match=re.escape(f"{LOOP_KINDS[info.loop].what} is not expressed by vLLM: use "
                                                       f"backend=hf, or {fam}_sd (method.bonus=exact) or {fam} on")):
            run_config({"method": section(name, "vllm"), "backend": "vllm"})
        return
    composite = combination_spec(run_config({"method": section(name, "vllm"), "backend": "vllm"}).method)
    if info.family.one_model:
        assert composite == ONE_MODEL
    else:
        assert composite["kind"] == (info.family.preset or "mean")


@pytest.mark.parametrize("name", NOT_METHODS)
def test_every_reader_refuses_other_names_with_its_message(name):
    with pytest.raises(ValueError, match=f"unknown method {name!r}: use method=<config in configs/method>"):
        run_config({"method": {"name": name, "model": "m0"}})
    with pytest.raises(ValueError, match=f"unknown method {name!r}: use one of large_model, we, cd"):
        plan_from_kwargs(name, 2)
    with pytest.raises(ValueError, match=f"method={name!r} is not a method: use one of large_model"):
        check_names({"members": "a|b", "method": name})
    if name:  # compare_with="" means no baseline
        with pytest.raises(ValueError, match=f"compare_with={name!r} is not a method"):
            run_config({"method": section("cd_chef"), "compare_with": name})


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _names_a_method(node) -> bool:
    """`method`, `name`, `other`, `x.method` or `m.get("name")`: an expression that holds a method name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and _strings(node.args[0])[:1] in (["name"], ["method"])
    ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return ident in ("method", "name", "other")


def method_name_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each place that decides from a method name: a string that can only be a method
    name (not also a loop or a combination preset), `.split("_")`, or a method-holding expression
    compared with a method name (`method == "sd"`, `name in ("we", "cd")`)."""
    only_methods = set(REGISTRY) - set(LOOP_KINDS) - set(PRESETS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in only_methods:
            found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
                and node.args and _strings(node.args[0]) == ["_"]:
            found.append((node.lineno, 'split("_")'))
        elif isinstance(node, ast.Compare) and any(_names_a_method(s) for s in (node.left, *node.comparators)):
            found += [(node.lineno, repr(s)) for side in (node.left, *node.comparators)
                      for s in _strings(side) if s in REGISTRY]
    return found


def test_the_scan_sees_the_parsers_it_replaced():  # a negative control: the old code would fail the scan
    old = ('kind = method.split("_")[0]\nif method in ("large_model", "sd"): pass\n'
           'n = {"large_model": 1, "sd": 2}.get(f)\nif m.get("name") == "we": pass\nif other == "cd": pass')
    assert sorted({line for line, _ in method_name_uses(ast.parse(old))}) == [1, 2, 3, 4, 5]


def test_no_module_outside_the_registry_decides_from_a_method_name():
    found = [f"{path.relative_to(SRC)}:{line}: {what}" for path in sorted(SRC.rglob("*.py"))
             if str(path.relative_to(SRC)) not in ALLOWED
             for line, what in method_name_uses(ast.parse(path.read_text()))]
    assert not found, "read plan.REGISTRY instead of spelling method names:\n" + "\n".join(found)
