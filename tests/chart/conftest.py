from __future__ import annotations

from pathlib import Path

import pytest

from .render import Helm, build_validator, helm_binary


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(helm_binary())


@pytest.fixture(scope="session")
def validator(tmp_path_factory) -> Path:
    return build_validator(tmp_path_factory.mktemp("k8s-validate"))
