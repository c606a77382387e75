"""config/example.yaml names every key of the config model (proxy/config.py), and only those.

The example's `#|` lines are commented examples of a section that is off by default (`tls: null`) or of
the entries of a list or mapping of models (`virtual_clusters: []`, `users: {}`). They are compared
uncommented in place of the empty value above them, as a user would use them.

Paths name a list's entries `[]` and a mapping's values `{}`: `tenancy.virtual_clusters[].name`,
`credentials.users{}.SCRAM-SHA-256.salt`. A model's fields are required where the model is first met,
breadth first (`tenancy.topic_policy.max_topics`); where the same model is met again (a seed entry's
`topic_policy`), only its key is required, and any keys written there must still be its fields.
"""

from __future__ import annotations

import re
import types
import typing
from collections import deque
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter

from proxy.config import MetricsConfig, ProxyConfig, TenancyConfig, VirtualClusterSeedConfig, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "example.yaml"

_EXAMPLE_LINE = re.compile(r"^(?P<indent> *)#\|(?P<rest>.*)$")
_EMPTY_KEY_LINE = re.compile(r"^(?P<head>(?P<indent> *)[^#\s][^#]*?:)\s*(?:null|\[\]|\{\})\s*(?P<comment>#.*)?$")


def uncomment_examples(text: str) -> str:
    """The example with every `#|` block uncommented in place of the empty value of the key above it."""
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        example = _EXAMPLE_LINE.match(line)
        if example is None:
            out.append(line)
            continue
        if i == 0 or not _EXAMPLE_LINE.match(lines[i - 1]):  # a block's first line: find the key it is for
            j = len(out) - 1
            while j >= 0 and (not out[j].strip() or out[j].lstrip().startswith("#")):
                j -= 1
            key = _EMPTY_KEY_LINE.match(out[j]) if j >= 0 else None
            assert key is not None, f"example.yaml line {i + 1}: a `#|` block follows no `key: null|[]|{{}}` line"
            assert key["indent"] == example["indent"], f"example.yaml line {i + 1}: `#|` not at its key's indentation"
            out[j] = f"{key['head']}  {key['comment'] or ''}".rstrip()
        out.append(f"{example['indent']}  {example['rest']}")
    return "\n".join(out) + "\n"


def _model_in(annotation: object) -> tuple[type[BaseModel], str] | None:
    """The model a field holds and how: `` (the model, or None), `[]` (a list of it), `{}` (a mapping to it)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        found = [m for m in (_model_in(a) for a in args if a is not type(None)) if m is not None]
        assert len(found) <= 1, f"unsupported union of models: {annotation}"
        return found[0] if found else None
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return args[1], "{}"
    assert not any(_model_in(a) for a in args), f"unsupported shape holding a model: {annotation} (extend this test)"
    return None


def _fields(model: type[BaseModel]) -> dict[str, typing.Any]:
    """A model's fields by the key a config file uses (the alias when there is one)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def model_paths(root: type[BaseModel] = ProxyConfig) -> set[str]:
    """Every key path of the config model (each model's fields where it is first met, breadth first)."""
    paths: set[str] = set()
    seen: set[type[BaseModel]] = set()
    queue: deque[tuple[type[BaseModel], str]] = deque([(root, "")])
    while queue:
        model, prefix = queue.popleft()
        if model in seen:
            continue
        seen.add(model)
        for key, field in _fields(model).items():
            path = f"{prefix}{key}"
            paths.add(path)
            nested = _model_in(field.annotation)
            if nested is not None:
                queue.append((nested[0], f"{path}{nested[1]}."))
    return paths


def example_paths(data: object, root: type[BaseModel] = ProxyConfig) -> tuple[set[str], set[str]]:
    """The key paths a parsed example names that are fields of the model there, and those that are not."""
    known: set[str] = set()
    unknown: set[str] = set()

    def walk(value: object, model: type[BaseModel], prefix: str) -> None:
        if value is None:  # an optional section with no example: its keys are reported missing
            return
        if not isinstance(value, dict):
            unknown.add(f"{prefix or '(top level)'} (not a mapping: {value!r})")
            return
        fields = _fields(model)
        for key, sub in value.items():
            path = f"{prefix}{key}"
            if key not in fields:
                unknown.add(path)
                continue
            known.add(path)
            nested = _model_in(fields[key].annotation)
            if nested is None:
                continue
            sub_model, how = nested
            if how == "":
                walk(sub, sub_model, f"{path}.")
            elif how == "[]":
                for entry in sub or []:
                    walk(entry, sub_model, f"{path}[].")
            else:
                for entry in (sub or {}).values():
                    walk(entry, sub_model, f"{path}{{}}.")

    walk(data, root, "")
    return known, unknown


def compare(text: str, root: type[BaseModel] = ProxyConfig) -> tuple[set[str], set[str]]:
    """(model keys the example does not name, example keys the model does not have)."""
    known, unknown = example_paths(yaml.safe_load(uncomment_examples(text)), root)
    return model_paths(root) - known, unknown


def test_example_names_every_key_of_the_model_and_no_other():
    missing, unknown = compare(EXAMPLE.read_text(encoding="utf-8"))
    assert not missing, f"keys of proxy/config.py missing from config/example.yaml: {sorted(missing)}"
    assert not unknown, f"keys of config/example.yaml that proxy/config.py does not have: {sorted(unknown)}"


def test_example_shows_the_defaults():
    """Uncommented examples aside, the example is the default config (with its one required key)."""
    example = load_config(EXAMPLE)
    defaults = parse_config({"upstream": {"bootstrap_servers": example.upstream.bootstrap_servers}})
    assert example.model_dump() == defaults.model_dump()


def _examples(original: object, uncommented: object, model: type[BaseModel], prefix: str = ""):
    """(path, field, value) of each uncommented example: a value that was empty in the file as shipped."""
    assert isinstance(original, dict) and isinstance(uncommented, dict)
    for key, field in _fields(model).items():
        before, after = original.get(key), uncommented.get(key)
        if before in (None, [], {}) and after not in (None, [], {}):
            yield f"{prefix}{key}", field, after
        elif isinstance(before, dict) and (nested := _model_in(field.annotation)) and nested[1] == "":
            yield from _examples(before, after, nested[0], f"{prefix}{key}.")


def test_the_commented_examples_are_valid():
    text = EXAMPLE.read_text(encoding="utf-8")
    found = {}
    for path, field, value in _examples(yaml.safe_load(text), yaml.safe_load(uncomment_examples(text)), ProxyConfig):
        found[path] = value
        if path == "listeners.tls":  # names certificate files, which must exist
            continue
        TypeAdapter(field.annotation).validate_python(value, context={"base_dir": EXAMPLE.parent})
    assert set(found) == {
        "listeners.tls",
        "listeners.sni",
        "upstream.tls",
        "credentials.users",
        "tenancy.virtual_clusters",
        "tenancy.topic_policy.configs",
    }


# The comparison fails on a modified model or example: ---------------------------------------------------


class _Metrics(MetricsConfig):
    path: str = "/metrics"


class _Seed(VirtualClusterSeedConfig):
    quota: int | None = None


class _Tenancy(TenancyConfig):
    virtual_clusters: list[_Seed] = []


class _WithNewFields(ProxyConfig):
    metrics: _Metrics = _Metrics()
    tenancy: _Tenancy = _Tenancy()


def test_a_field_added_to_the_model_and_not_to_the_example_is_missing():
    missing, unknown = compare(EXAMPLE.read_text(encoding="utf-8"), _WithNewFields)
    assert missing == {"metrics.path", "tenancy.virtual_clusters[].quota"}
    assert not unknown


def _edit(old: str, new: str) -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "missing", "unknown"),
    [
        ("  jsonl_keep: 10 ", "  # jsonl_keep: 10 ", {"tracing.jsonl_keep"}, set()),
        ("  #|    client_ids: []", "  #|    # client_ids: []", {"tenancy.virtual_clusters[].client_ids"}, set()),
        ("\n  #|  check_hostname: true", "", {"upstream.tls.check_hostname"}, set()),
        ("  port: 9404", "  port: 9404\n  bogus: 1", set(), {"metrics.bogus"}),
        ("  #|  - name: big\n", "  #|  - name: big\n  #|    bogus: 1\n", set(), {"tenancy.virtual_clusters[].bogus"}),
        (
            "    #|    settable: true ",
            "    #|    step: 1\n    #|    settable: true ",
            set(),
            {"tenancy.topic_policy.configs{}.step"},
        ),
        (  # a pydantic alias is the key, not the field's name (ScramEntryConfig's keys are required under it)
            "  #|    SCRAM-SHA-256: ",
            "  #|    scram_sha_256: ",
            {
                "credentials.users{}.SCRAM-SHA-256" + k
                for k in ("", ".salt", ".iterations", ".stored_key", ".server_key")
            },
            {"credentials.users{}.scram_sha_256"},
        ),
    ],
)
def test_a_modified_example_fails_the_comparison(old, new, missing, unknown):
    assert compare(_edit(old, new)) == (missing, unknown)


def test_an_example_block_without_its_key_is_refused():
    with pytest.raises(AssertionError, match="follows no"):
        uncomment_examples(_edit("  tls: null                      #", "  tls: {}\n  x: 1  #"))
